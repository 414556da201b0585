"""The course's notebooks: execute them in place and stamp each with the code that produced it.

A committed notebook's outputs are only as good as the code that printed them. `execute` runs a
notebook top to bottom in a fresh kernel (nbclient), saves its outputs, and records in its
metadata (`metadata.specnb`) which of specnb's modules that kernel had loaded when the last cell
finished (`modules`: the names in its `sys.modules` that start with specnb, read by one more
piece of code run in the same kernel and never saved as a cell), a hash of exactly those
modules' code (`code_hash`), how long it took and on what machine. The kernels the notebook
compiled are covered the same way: they are the modules `specnb.kernels.*` (the repository's
kernels/ folder) that its process imported, so they are in the list.

`stale()` recomputes each notebook's hash over its own list of modules and reports the notebook
when the hash differs, when a module of the list no longer exists (renamed or deleted), or when
the notebook has no such stamp (never executed, or stamped by the old rule with one hash of the
whole library); a test turns that into a failure. The kernels (`specnb.kernels.*`) are hashed
apart (`kernel_hash`): a change to them alone leaves every token bit-identical (the lossless and
batch-invariance tests prove it) and moves only printed timings, so it makes a notebook
`drifted()`, a warning, not stale; the notebooks are re-executed once per change of substance,
not after every kernel commit. The costs records the notebook read (measure/costs.py) are
stamped too (`costs`), so two notebooks can be seen to quote the same record. A module's code is its syntax tree without
docstrings, so comments, docstrings and formatting can change without making a notebook stale,
and a change to what a module does makes stale exactly the notebooks that loaded it: a change to
app/, measure/ or view/ re-executes only the notebooks that use them. The hash reads module
names, never paths, so it is the same in any checkout.

    python -m specnb.app.notebooks              # execute every notebook in notebooks/, in order
    python -m specnb.app.notebooks 03 05        # only those (by number or file name)
    python -m specnb.app.notebooks --check      # list the stale ones (exit 1 if any) and the drifted
    python -m specnb.app.notebooks --times      # rewrite docs/teaching.md's table of recorded times

Executing also rewrites that table, so the guide's times are always the recorded ones.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]          # specnb/
ROOT = PKG.parent
# specnb.kernels: the repository's kernels/ folder (pyproject's package-dir), or specnb/kernels/
# in an installed wheel
KERNEL_DIR = next((d for d in (PKG / "kernels", ROOT / "kernels") if (d / "__init__.py").is_file()),
                  ROOT / "kernels")
NOTEBOOK_DIR = ROOT / "notebooks"
CELL_TIMEOUT_S = 900
TEACHING_GUIDE = ROOT / "docs" / "teaching.md"
TIMES_BEGIN = "<!-- recorded times: written by python -m specnb.app.notebooks -->"
TIMES_END = "<!-- end of recorded times -->"
# run in the notebook's kernel after its last cell: the specnb modules loaded, with their files, and
# the ids of the costs records it read
PROBE = ("import json as _specnb_json, sys as _specnb_sys\n"
         "_specnb_costs = _specnb_sys.modules.get('specnb.measure.costs')\n"
         "print(_specnb_json.dumps({'modules': sorted([n, getattr(m, '__file__', None)] for n, m in\n"
         "      list(_specnb_sys.modules.items()) if n == 'specnb' or n.startswith('specnb.')),\n"
         "      'costs': list(getattr(_specnb_costs, 'READ_IDS', []))}))\n")
KERNELS = "specnb.kernels"


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def code_form(source: str, name: str = "<source>") -> str:
    """What a module does, as text: its syntax tree without docstrings, comments or layout."""
    tree = _strip_docstrings(ast.parse(source, name))
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def module_file(name: str) -> Path | None:
    """The file of specnb's module `name` in this copy of the library (a package is its
    __init__.py; specnb.kernels.X is KERNEL_DIR/X.py), or None when there is none."""
    parts = name.split(".")
    if parts[0] != "specnb" or not all(p.isidentifier() for p in parts):
        return None
    base, rest = PKG, parts[1:]
    if rest[:1] == ["kernels"]:
        base, rest = KERNEL_DIR, rest[1:]
    stem = base.joinpath(*rest)
    for f in (stem / "__init__.py", stem.parent / f"{stem.name}.py" if rest else None):
        if f is not None and f.is_file():
            return f
    return None


def module_code(name: str) -> str | None:
    """The code form of specnb's module `name` as it is now, or None when it no longer exists."""
    f = module_file(name)
    return None if f is None else code_form(f.read_text(encoding="utf-8"), name)


def is_kernel(name: str) -> bool:
    return name == KERNELS or name.startswith(KERNELS + ".")


def code_hash(modules, code=module_code) -> str:
    """sha256 (first 16 hex digits) of the named modules' code forms, by name (never by path).
    `code(name)` gives a module's code form; a module without one is an error."""
    h = hashlib.sha256()
    for name in sorted(set(modules)):
        form = code(name)
        if form is None:
            raise LookupError(f"specnb.app.notebooks: no module {name} in {PKG}")
        h.update(name.encode() + b"\0" + form.encode() + b"\0")
    return h.hexdigest()[:16]


def notebooks(names=(), folder: Path | None = None) -> list[Path]:
    """The course's notebooks in order (those of `folder`, NOTEBOOK_DIR by default), or those
    named (by number, stem or file name)."""
    folder = NOTEBOOK_DIR if folder is None else folder
    every = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    out = []
    for n in names:
        hit = [p for p in every if p.name == n or p.stem == n or p.name.startswith(f"{n}_")]
        if not hit:
            raise SystemExit(f"specnb.app.notebooks: no notebook {n!r} in {folder}")
        out += hit
    return out


def stamp(path: Path) -> dict:
    """The `metadata.specnb` record of a notebook ({} when it was never stamped)."""
    import nbformat
    return dict(nbformat.read(str(path), as_version=4).metadata.get("specnb", {}))


def _hashes(mods, code) -> tuple:
    # (the hash of the modules but the kernels, the kernels' hash)
    return (code_hash([m for m in mods if not is_kernel(m)], code),
            code_hash([m for m in mods if is_kernel(m)], code))


def _check(paths) -> tuple[list, list]:
    # (stale, drifted): (notebook, reason) each
    forms: dict[str, str | None] = {}

    def code(name):                      # each module read once for all the notebooks
        if name not in forms:
            forms[name] = module_code(name)
        return forms[name]

    bad, drift = [], []
    for p in notebooks() if paths is None else paths:
        st = stamp(p)
        mods, got = st.get("modules"), st.get("code_hash")
        if not isinstance(mods, list) or got is None:
            bad.append((p, "never executed by specnb.app.notebooks" if not st else
                        "stamped with one hash of the whole library (the old rule), not with the modules it loaded"
                        if "library_hash" in st else "its stamp records no modules and no hash of their code"))
            continue
        gone = [m for m in mods if code(m) is None]
        if gone:
            bad.append((p, f"it loaded modules that no longer exist: {', '.join(gone)}"))
            continue
        if "kernel_hash" not in st:          # a stamp of one hash over every module, kernels included
            want = code_hash(mods, code)
            if got != want:
                bad.append((p, f"executed with code {got} of the {len(mods)} modules it loaded, "
                               f"their code is now {want}"))
            continue
        want, kernels = _hashes(mods, code)
        if got != want:
            bad.append((p, f"executed with code {got} of the {len(mods)} modules it loaded, "
                           f"their code is now {want}"))
        elif st["kernel_hash"] != kernels:
            drift.append((p, f"executed with kernels {st['kernel_hash']}, now {kernels}: its tokens are the same, "
                             f"its printed timings may have moved"))
    return bad, drift


def stale(paths=None) -> list[tuple[Path, str]]:
    """(notebook, reason) for each notebook whose outputs were not made by today's code of the
    modules it loaded (the kernels apart: see drifted)."""
    return _check(paths)[0]


def drifted(paths=None) -> list[tuple[Path, str]]:
    """(notebook, reason) for each notebook, not stale, executed with other kernels than today's."""
    return _check(paths)[1]


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo names it, with its family and model numbers (Linux), else
    platform's word for it."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    info = {k.strip(): v.strip() for k, v in info.items()}
    name = info.get("model name", platform.machine())
    fam, mod = info.get("cpu family"), info.get("model")
    return f"{name} (family {fam} model {mod})" if fam and mod else name


def loaded_modules(client) -> tuple[list[str], list[str]]:
    """The specnb modules loaded in `client`'s kernel (a started nbclient.NotebookClient), and the
    costs records it read, found by running PROBE there as one more cell, taken out of the notebook
    again before anything is saved. Each module must be this copy's file of that name: a kernel
    that ran another copy of specnb stamps nothing."""
    import nbformat
    probe = nbformat.v4.new_code_cell(PROBE)
    cells = client.nb.cells
    cells.append(probe)                  # nbclient stores an executed cell at its index
    try:
        client.execute_cell(probe, len(cells) - 1)
    finally:
        cells[:] = [c for c in cells if c is not probe]
    text = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
    got = json.loads(text)
    out = []
    for name, file in got["modules"]:
        if file is None:                 # a namespace or built-in module: no code of its own
            continue
        mine = module_file(name)
        if mine is None or not os.path.samefile(mine, file):
            raise RuntimeError(f"specnb.app.notebooks: the kernel loaded {name} from {file}, "
                               f"not from this copy of specnb ({mine or PKG})")
        out.append(name)
    return sorted(out), list(got["costs"])


def execute(path: Path, timeout: int = CELL_TIMEOUT_S) -> float:
    """Run a notebook in a fresh kernel in its own folder, save it with its outputs, stamp it
    with the specnb modules its kernel loaded and the hash of their code."""
    import nbclient
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    with client.setup_kernel():          # the kernel outlives execute() for the probe, then stops
        client.execute(cleanup_kc=False)
        dt = time.perf_counter() - t0
        modules, costs = loaded_modules(client)
    substance, kernels = _hashes(modules, module_code)
    nb.metadata["specnb"] = {"modules": modules, "code_hash": substance, "kernel_hash": kernels, "costs": costs,
                             "executed_s": round(dt, 1), "python": platform.python_version(),
                             "machine": f"{cpu_model()}, {os.cpu_count()} CPUs"}
    nb.metadata.pop("widgets", None)     # live views are re-made by running, not restored
    nbformat.write(nb, str(path))
    return dt


def times_table(paths=None) -> str:
    """The notebooks' recorded execution times (metadata.specnb) as a Markdown table."""
    rows = ["| notebook | executed in | on |", "|---|---|---|"]
    for p in paths or notebooks():
        st = stamp(p)
        t = st.get("executed_s")
        rows.append(f"| {p.stem} | {'never executed' if t is None else f'{t:.0f} s'} | "
                    f"{st.get('machine', '')}, Python {st.get('python', '?')} |")
    return "\n".join(rows) + "\n"


def write_times(guide: Path = TEACHING_GUIDE) -> bool:
    """Replace the recorded-times block of the teaching guide; False when it has none."""
    text = guide.read_text(encoding="utf-8")
    if TIMES_BEGIN not in text or TIMES_END not in text:
        return False
    head, rest = text.split(TIMES_BEGIN, 1)
    tail = rest.split(TIMES_END, 1)[1]
    guide.write_text(f"{head}{TIMES_BEGIN}\n{times_table()}{TIMES_END}{tail}", encoding="utf-8")
    return True


def missing_picture_tools() -> list[str]:
    """What the static pictures need and this machine lacks (specnb.figures.snapshot: Chromium for
    the live views, a browser kaleido can drive for the plotly figures), each said in words."""
    from ..figures import snapshot
    out = []
    if snapshot.find_chromium() is None:
        out.append("no Chromium for the live views' pictures ($SPECNB_CHROMIUM, /usr/bin/chromium, PATH)")
    if snapshot.kaleido_browser() is None:
        out.append("no Chromium or Chrome for kaleido's plotly pictures")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specnb.app.notebooks", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="notebooks by number (03), stem or file name")
    ap.add_argument("--check", action="store_true", help="list stale notebooks; exit 1 if any")
    ap.add_argument("--times", action="store_true",
                    help=f"only rewrite the recorded-times table in {TEACHING_GUIDE.relative_to(ROOT)}")
    ap.add_argument("--without-pictures", action="store_true",
                    help="execute even where no Chromium can draw the figures' static pictures (the "
                         "notebooks are then stored without them, which tests/test_notebooks_meta.py fails)")
    a = ap.parse_args(argv)
    if a.times:
        return 0 if write_times() else 1
    paths = notebooks(a.names)
    if a.check:
        bad, drift = _check(paths)
        for p, why in bad:
            print(f"{p.name}: {why}")
        for p, why in drift:
            print(f"{p.name}: drifted (a warning): {why}", file=sys.stderr)
        return 1 if bad else 0
    missing = [] if a.without_pictures else missing_picture_tools()
    if missing:
        print("python -m specnb.app.notebooks: not executing: " + "; ".join(missing) + ". A committed "
              "notebook carries a PNG beside each figure and live view, drawn by headless Chromium. Install it "
              "(Debian / Ubuntu: apt-get install -y chromium; or set SPECNB_CHROMIUM to a Chromium or Chrome), "
              "or pass --without-pictures.", file=sys.stderr)
        return 2
    for p in paths:
        print(f"{p.name} ...", end=" ", flush=True)
        print(f"{execute(p):.1f} s", flush=True)
    write_times()
    return 0


if __name__ == "__main__":
    sys.exit(main())
