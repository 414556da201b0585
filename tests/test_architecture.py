"""The shape of the package: data flows one way (file -> model -> context -> sampler -> speculative
loop -> statistics and figures -> widgets and commands), with no import circle, the kernels
included; folders by concern, in the layers' order (docs/architecture.md draws the map).

The layers count module-level imports only: an import inside a function (a command loading what
it needs, the front door's names loaded on first use) runs when it is called, never while the
package is being imported. Circles count both: two modules that each need the other, one of
them only when a function runs, are one idea split in two files all the same.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "specnb"
KERNELS = ROOT / "kernels"          # installed as specnb.kernels (pyproject's package-dir)

# Each folder's (or top-level module's) layer: it may import only from its own layer or a lower one.
LAYERS = [
    {"errors", "cache", "progress", "kernels"},       # 0: leaves, and the compute kernels
    {"gguf"},                                         # 1: the file
    {"vocab"},                                        # 2: tokens and text
    {"model"},                                        # 3: models and where they live
    {"run"},                                          # 4: running a model, choosing tokens
    {"speculation"},                                  # 5: speculation
    {"speculative_simple"},                           # 6: the fifty-line loop, the front door's subject
    {"measure"},                                      # 7: measuring
    {"figures"},                                      # 8: drawing it
    {"view"},                                         # 9: the live view
    {"app"},                                          # 10: commands, the demo, the notebook executor
    {"__main__", "__init__", "course"},               # 11: the two doors
]
LAYER = {m: i for i, layer in enumerate(LAYERS) for m in layer}

# The kernels' own layers (kernels/__init__.py's table): SIMD -> tiles and blocks -> products -> forward.
KERNEL_LAYERS = [
    {"__init__", "qtypes", "simd", "rope", "stream", "cuda_common", "clock", "machine", "launch_cuda", "cache_files"},
    {"simd_wide", "slots_cuda"},
    {"tiles", "blocks"},
    {"blocks_q8", "quantize_q8"},
    {"matmul", "activations", "norm", "attention"},
    {"matmul_q8", "matmul_x16", "matmul_x16k", "matmul_cuda", "fused_cuda"},
    {"forward", "tuning"},
]
KERNEL_LAYER = {m: i for i, layer in enumerate(KERNEL_LAYERS) for m in layer}


def module_name(path: Path) -> str:
    if path.is_relative_to(KERNELS):
        parts = ["specnb", "kernels", *path.relative_to(KERNELS).with_suffix("").parts]
    else:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def file_of(name: str) -> Path | None:
    parts = name.split(".")[1:]
    base = KERNELS.joinpath(*parts[1:]) if parts[:1] == ["kernels"] else PKG.joinpath(*parts)
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def top(name: str) -> str:
    """specnb.speculation.loop -> speculation; specnb.errors -> errors; specnb -> __init__."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _statements(tree: ast.AST, call_time: bool):
    # every node of the module, or (call_time False) those that run while it is imported: not
    # the bodies of its functions
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if call_time or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                todo.append(child)


def imports_in(source: str, name: str, is_package: bool = False, call_time: bool = False) -> set[str]:
    """The specnb modules that module `name` (given as source text) imports at module level,
    or with call_time also inside its functions."""
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in _statements(ast.parse(source), call_time):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else (node.module or "")
            if base == "specnb" or base.startswith("specnb."):
                subs = {f"{base}.{a.name}" for a in node.names if file_of(f"{base}.{a.name}")}
                out |= subs or {base}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("specnb.")}
    return {o for o in out if o != name}


def imports(path: Path, call_time: bool = False) -> set[str]:
    return imports_in(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py", call_time)


def graph(call_time: bool = False) -> dict[str, set[str]]:
    """module -> the specnb modules it imports (at module level; call_time: inside functions too)."""
    files = [p for p in [*PKG.rglob("*.py"), *KERNELS.glob("*.py")] if "__pycache__" not in p.parts]
    return {module_name(p): imports(p, call_time) for p in files}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of graph g, each as a path that ends where it starts (a depth-first
    search's back edges: empty exactly when g has no circle)."""
    state, stack, found = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if d not in g:
                continue
            if state.get(d) == "open":
                found.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"
    for m in sorted(g):
        if m not in state:
            visit(m)
    return found


def test_every_folder_and_module_has_a_layer():
    missing = sorted({top(m) for m in graph()} - set(LAYER))
    assert not missing, f"folders or modules with no layer in tests/test_architecture.py: {missing}"
    kernels = {m.split(".")[2] if m.count(".") >= 2 else "__init__" for m in graph() if top(m) == "kernels"}
    assert kernels - set(KERNEL_LAYER) == set(), f"kernel files with no layer: {kernels - set(KERNEL_LAYER)}"


def test_imports_flow_one_way():
    wrong = []
    for mod, deps in graph().items():
        for d in deps:
            if top(d) != top(mod) and LAYER[top(d)] > LAYER[top(mod)]:
                wrong.append(f"{mod} (layer {LAYER[top(mod)]}) imports {d} (layer {LAYER[top(d)]})")
    assert not wrong, "imports against the flow: " + "; ".join(sorted(wrong))


def test_the_kernels_flow_one_way_and_import_nothing_above_them():
    def kname(m):
        return m.split(".")[2] if m.count(".") >= 2 else "__init__"
    wrong = []
    for mod, deps in graph().items():
        if top(mod) != "kernels":
            continue
        for d in deps:
            if top(d) != "kernels":
                if LAYER[top(d)] > 0:
                    wrong.append(f"{mod} imports {d}")
            elif kname(d) != kname(mod) and KERNEL_LAYER[kname(d)] > KERNEL_LAYER[kname(mod)]:
                wrong.append(f"{mod} (kernel layer {KERNEL_LAYER[kname(mod)]}) imports {d} "
                             f"(kernel layer {KERNEL_LAYER[kname(d)]})")
    assert not wrong, "kernel imports against the flow: " + "; ".join(sorted(wrong))
    # the kernels are in the graph: the backends' arrows reach them
    assert any(d.startswith("specnb.kernels.") for d in graph()["specnb.run.backend_cpu"])


def test_no_import_circle():
    """None at import time, and none through imports inside functions either."""
    found = circles(graph(call_time=True))
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_circle_finder():
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"a2"}, "a2": {"b"}, "b": {"a2", "x"}}) == [["a2", "b", "a2"]]   # x: outside


def test_a_call_time_import_closes_a_circle():
    # kernels/matmul_q8.py <-> kernels/tuning.py as they were: tuning imported matmul_q8 at module
    # level, and matmul_q8() imported tuning when it was called without a prefetch distance
    q8, tuning = "specnb.kernels.matmul_q8", "specnb.kernels.tuning"
    src = {q8: "def matmul_q8(x, w, qtype, out, ahead=None):\n"
               "    if ahead is None:\n"
               "        from .tuning import prefetch_ahead\n",
           tuning: "from . import matmul_q8 as Q8\n"}
    assert circles({m: imports_in(t, m) for m, t in src.items()}) == []
    assert circles({m: imports_in(t, m, call_time=True) for m, t in src.items()}) == [[q8, tuning, q8]]


@pytest.mark.parametrize("mod", ["specnb.gguf.file", "specnb.model", "specnb.run.context", "specnb.run.sampling",
                                 "specnb.speculation.loop", "specnb.gguf.forge"])
def test_the_core_never_imports_widgets_figures_or_commands(mod):
    g = graph()
    seen, todo = set(), [mod]
    while todo:
        m = todo.pop()
        for d in g.get(m, ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    bad = sorted(d for d in seen if top(d) in {"view", "figures", "app", "measure"})
    assert not bad, f"{mod} pulls in {bad} at import time"


def test_ls_specnb_is_short_and_has_no_link():
    entries = [p for p in PKG.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 16, sorted(p.name for p in entries)
    assert not any(p.is_symlink() for p in PKG.rglob("*")), "a link inside specnb/"


def test_every_import_inside_the_package_resolves():
    """Every `from specnb... import name`, module level or inside a function (a command's lazy
    import), names something its module has: a moved name fails here, not when a user runs
    the one command that imports it."""
    import importlib
    missing = []
    for p in [*PKG.rglob("*.py"), *KERNELS.glob("*.py")]:
        if "__pycache__" in p.parts or p.name == "__main__.py":
            continue
        name = module_name(p)
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else (node.module or "")
            if not (base == "specnb" or base.startswith("specnb.")):
                continue
            mod = importlib.import_module(base)
            for a in node.names:
                if a.name != "*" and not hasattr(mod, a.name) and file_of(f"{base}.{a.name}") is None:
                    missing.append(f"{name}:{node.lineno} from {base} import {a.name}")
    assert not missing, "imports of names that do not exist: " + "; ".join(missing)
