"""The shape of the package: data flows one way (file -> model -> context -> sampler -> speculative
loop -> statistics and figures -> widgets and commands), with no import circle.

Only module-level imports count: an import inside a function (a command loading what it needs,
a lazy re-export) runs when it is called, never while the package is being imported.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "specnb"

# Each module's layer; a module may import only from its own layer or a lower one.
LAYERS = [
    # 0: leaves
    {"errors", "progress", "rng", "cache", "textio", "events", "spec_impl", "template_budget",
     "contention", "snapshot", "course", "kernels"},
    # 1: the file and its tables
    {"gguf_file", "gguf_write", "vocab_bpe", "vocab_spm", "chat_template"},
    # 2: models, vocabs and where they live
    {"vocab", "forge", "registry", "testing", "gate", "model", "reference", "gemma"},
    # 3: running a model, choosing tokens
    {"backend_cpu", "backend_cuda", "context", "samplers", "sampling", "generate", "perplexity",
     "pair"},
    # 4: speculation
    {"verify", "draft_simple", "draft_len", "ngram", "ngram_cache", "ngram_mod", "speculative", "loop",
     "speculative_simple"},
    # 5: measuring and drawing it
    {"cost", "stats", "experiments", "plots", "figures_sampling", "bench", "bench_llamacpp", "bench_report",
     "profile", "spec_bench"},
    # 6: what people use
    {"view", "demo", "cli", "__main__", "__init__"},
]
LAYER = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def top(name: str) -> str:
    """specnb.view.live -> view; specnb -> __init__."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_level_imports(path: Path) -> set[str]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else (node.module or "")
            if base == "specnb" or base.startswith("specnb."):
                names = [f"{base}.{a.name}" for a in node.names]
                out |= {n for n in names if (PKG.parent / n.replace(".", "/")).with_suffix(".py").exists()
                        or (PKG.parent / n.replace(".", "/")).is_dir()} or {base}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("specnb.")}
    return {o for o in out if o != name}


def graph() -> dict[str, set[str]]:
    files = [p for p in PKG.rglob("*.py") if "kernels" not in p.relative_to(PKG).parts]
    return {module_name(p): module_level_imports(p) for p in files}


def test_every_module_has_a_layer():
    missing = sorted({top(m) for m in graph()} - set(LAYER))
    assert not missing, f"modules with no layer in tests/test_architecture.py: {missing}"


def test_imports_flow_one_way():
    wrong = []
    for mod, deps in graph().items():
        for d in deps:
            if top(d) != top(mod) and LAYER[top(d)] > LAYER[top(mod)]:
                wrong.append(f"{mod} (layer {LAYER[top(mod)]}) imports {d} (layer {LAYER[top(d)]})")
    assert not wrong, "imports against the flow: " + "; ".join(sorted(wrong))


def test_no_import_circle():
    g = graph()
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if d not in g:
                continue
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"
    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("mod", ["specnb.gguf_file", "specnb.model", "specnb.context", "specnb.sampling",
                                 "specnb.loop", "specnb.forge"])
def test_the_core_never_imports_widgets_figures_or_commands(mod):
    g = graph()
    seen, todo = set(), [mod]
    while todo:
        m = todo.pop()
        for d in g.get(m, ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    bad = sorted(d for d in seen if top(d) in {"view", "plots", "cli", "demo", "bench", "experiments"})
    assert not bad, f"{mod} pulls in {bad} at import time"
