"""The course's notebooks: execute them in place and stamp each with the library that produced it.

A committed notebook's outputs are only as good as the code that printed them. `execute` runs a
notebook top to bottom in a fresh kernel (nbclient), saves its outputs, and records in its
metadata (`metadata.specnb`) a hash of the library's code, how long it took and on what machine;
`stale()` lists the notebooks whose recorded hash is not the code's today, which a test turns into
a failure. The hash reads every module of `specnb` (and its kernels) as a syntax tree without
docstrings, so comments, docstrings and formatting can change without making a notebook stale,
and any change to what the code does makes every notebook stale.

    python -m specnb.app.course              # execute every notebook in notebooks/, in order
    python -m specnb.app.course 03 05        # only those (by number or file name)
    python -m specnb.app.course --check      # list the stale ones (exit 1 if any)
    python -m specnb.app.course --times      # rewrite docs/teaching.md's table of recorded times

Executing also rewrites that table, so the guide's times are always the recorded ones.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import os
import platform
import sys
import time
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]          # specnb/
ROOT = PKG.parent
NOTEBOOK_DIR = ROOT / "notebooks"
CELL_TIMEOUT_S = 900
TEACHING_GUIDE = ROOT / "docs" / "teaching.md"
TIMES_BEGIN = "<!-- recorded times: written by python -m specnb.app.course -->"
TIMES_END = "<!-- end of recorded times -->"


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def library_files() -> list[tuple[str, Path]]:
    """Every Python file of the package as (name, path): specnb's own files by their path in
    specnb/, the kernels (the repository's kernels/ folder, installed as specnb.kernels) as
    kernels/NAME.py."""
    from importlib.util import find_spec
    files = [(p.relative_to(PKG).as_posix(), p) for p in PKG.rglob("*.py")
             if "__pycache__" not in p.parts]
    for d in find_spec("specnb.kernels").submodule_search_locations or []:
        files += [(f"kernels/{p.name}", p) for p in Path(d).glob("*.py")]
    return sorted(files)


def code_form(source: str, name: str = "<source>") -> str:
    """What a module does, as text: its syntax tree without docstrings, comments or layout."""
    tree = _strip_docstrings(ast.parse(source, name))
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def library_hash() -> str:
    """sha256 (first 16 hex digits) of the package's code as syntax trees without docstrings."""
    h = hashlib.sha256()
    for name, f in library_files():
        h.update(name.encode() + b"\0")
        h.update(code_form(f.read_text(encoding="utf-8"), str(f)).encode() + b"\0")
    return h.hexdigest()[:16]


def notebooks(names=()) -> list[Path]:
    """The course's notebooks in order, or those named (by number, stem or file name)."""
    every = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    out = []
    for n in names:
        hit = [p for p in every if p.name == n or p.stem == n or p.name.startswith(f"{n}_")]
        if not hit:
            raise SystemExit(f"specnb.app.course: no notebook {n!r} in {NOTEBOOK_DIR}")
        out += hit
    return out


def stamp(path: Path) -> dict:
    """The `metadata.specnb` record of a notebook ({} when it was never stamped)."""
    import nbformat
    return dict(nbformat.read(str(path), as_version=4).metadata.get("specnb", {}))


def stale(paths=None) -> list[tuple[Path, str]]:
    """(notebook, reason) for each notebook whose outputs were not made by today's code."""
    want = library_hash()
    out = []
    for p in paths or notebooks():
        got = stamp(p).get("library_hash")
        if got != want:
            out.append((p, "never executed by specnb.app.course" if got is None else
                        f"executed with library {got}, the code is now {want}"))
    return out


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


def execute(path: Path, timeout: int = CELL_TIMEOUT_S) -> float:
    """Run a notebook in a fresh kernel in its own folder, save it with its outputs, stamp it."""
    import nbclient
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    t0 = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    dt = time.perf_counter() - t0
    nb.metadata["specnb"] = {"library_hash": library_hash(), "executed_s": round(dt, 1),
                             "python": platform.python_version(),
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specnb.app.course", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="notebooks by number (03), stem or file name")
    ap.add_argument("--check", action="store_true", help="list stale notebooks; exit 1 if any")
    ap.add_argument("--times", action="store_true",
                    help=f"only rewrite the recorded-times table in {TEACHING_GUIDE.relative_to(ROOT)}")
    a = ap.parse_args(argv)
    if a.times:
        return 0 if write_times() else 1
    paths = notebooks(a.names)
    if a.check:
        bad = stale(paths)
        for p, why in bad:
            print(f"{p.name}: {why}")
        return 1 if bad else 0
    for p in paths:
        print(f"{p.name} ...", end=" ", flush=True)
        print(f"{execute(p):.1f} s", flush=True)
    write_times()
    return 0


if __name__ == "__main__":
    sys.exit(main())
