"""specnb.app.notebooks: the per-notebook stamp (the specnb modules a notebook's kernel loaded and the
hash of their code), the notebook list and `--check`.

The stamp tests execute a tiny notebook of their own (two imports, no model, no kernel compiled)
with the real executor into a temporary folder; notebooks/ and docs/teaching.md are not touched."""
import json
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import nbformat
import pytest

from specnb.app import notebooks as executor

ROOT = Path(__file__).resolve().parents[1]
TINY_IMPORTS = "import specnb.errors\nimport specnb.cache\n"


def test_code_form_ignores_comments_docstrings_and_layout():
    a = 'def f(x):\n    """Doc."""\n    return x + 1   # add one\n'
    b = 'def f(x):\n\n    # a comment\n    return (x +\n            1)\n'
    assert executor.code_form(a) == executor.code_form(b)


def test_code_form_sees_every_change_in_behaviour():
    base = "def f(x):\n    return x + 1\n"
    for changed in ("def f(x):\n    return x + 2\n", "def f(y):\n    return y + 1\n",
                    "def f(x):\n    return x - 1\n", 'def f(x):\n    "x"\n    return x + 1\nf(0)\n'):
        assert executor.code_form(changed) != executor.code_form(base)


def test_module_names_map_to_the_files_python_imports():
    """A module's file is the one importlib finds for its name; the kernels are the repository's
    kernels/ folder (pyproject's package-dir installs it as specnb.kernels)."""
    for name in ("specnb", "specnb.errors", "specnb.speculation", "specnb.app.notebooks",
                 "specnb.kernels", "specnb.kernels.forward"):
        mine = executor.module_file(name)
        assert mine is not None and mine.samefile(find_spec(name).origin), name
    assert executor.module_file("specnb.kernels.forward").relative_to(ROOT).as_posix() == "kernels/forward.py"
    assert executor.module_file("specnb.speculation").name == "__init__.py"
    for gone in ("specnb.spec", "specnb.spec.loop", "specnb.kernels.nosuch", "specnbx", "numpy"):
        assert executor.module_file(gone) is None and executor.module_code(gone) is None, gone


def test_code_hash_reads_module_names_not_paths(tmp_path, monkeypatch):
    """The same code in a checkout elsewhere (CI's fresh clone) hashes the same."""
    names = ["specnb", "specnb.errors", "specnb.cache"]
    h = executor.code_hash(names)
    assert len(h) == 16 and h == executor.code_hash(reversed(names))
    copy = tmp_path / "elsewhere" / "specnb"
    copy.mkdir(parents=True)
    for f in ("__init__.py", "errors.py", "cache.py"):
        shutil.copy(executor.PKG / f, copy / f)
    monkeypatch.setattr(executor, "PKG", copy)
    assert executor.module_file("specnb.cache") == copy / "cache.py"
    assert executor.code_hash(names) == h
    with pytest.raises(LookupError):
        executor.code_hash(names + ["specnb.app.cli"])          # not in the copy


def test_notebooks_are_found_in_order_and_by_number():
    every = executor.notebooks()
    assert every and every == sorted(every)
    assert executor.notebooks(["00"]) == [every[0]]


# ---- a tiny notebook, executed once for the tests below -----------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """00_tiny.ipynb executed by executor.execute: it imports specnb.errors and specnb.cache only."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A tiny notebook"),
                nbformat.v4.new_code_cell("import specnb.errors"),
                nbformat.v4.new_code_cell("import specnb.cache\nprint(specnb.cache.__name__)")]
    p = tmp_path_factory.mktemp("course") / "00_tiny.ipynb"
    nbformat.write(nb, str(p))
    executor.execute(p, timeout=120)
    return p


def copy_of(tiny: Path, folder: Path, name: str | None = None, **stamp) -> Path:
    """The executed tiny notebook copied into folder (as `name`), its stamp replaced by `stamp`
    when given."""
    nb = nbformat.read(str(tiny), as_version=4)
    if stamp:
        nb.metadata["specnb"] = stamp
    p = folder / (name or tiny.name)
    nbformat.write(nb, str(p))
    return p


def edited(monkeypatch, edits: dict) -> None:
    """Make the executor see the modules of `edits` with that text appended to their real source."""
    real = executor.module_code

    def module_code(name):
        if name not in edits:
            return real(name)
        return executor.code_form(executor.module_file(name).read_text(encoding="utf-8") + edits[name], name)
    monkeypatch.setattr(executor, "module_code", module_code)


def test_the_stamp_lists_the_modules_the_notebook_loaded(tiny):
    """The recorded modules are those a fresh interpreter loads for the same two imports, and no
    unrelated module; the saved notebook holds its own cells only."""
    st = executor.stamp(tiny)
    fresh = subprocess.run(
        [sys.executable, "-c", TINY_IMPORTS + "import json, sys\nprint(json.dumps(sorted(n for n in sys.modules "
         "if n == 'specnb' or n.startswith('specnb.'))))"], capture_output=True, text=True, check=True, cwd=tiny.parent)
    assert st["modules"] == json.loads(fresh.stdout)
    assert {"specnb", "specnb.errors", "specnb.cache"} <= set(st["modules"])
    assert "specnb.app.cli" not in st["modules"] and not [m for m in st["modules"] if m.startswith("specnb.kernels")]
    assert st["code_hash"] == executor.code_hash(st["modules"]) and executor.stale([tiny]) == []
    assert st["kernel_hash"] == executor.code_hash([]) and st["costs"] == []      # no kernels, no costs read
    nb = nbformat.read(str(tiny), as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert [c.get("execution_count") for c in nb.cells[1:]] == [1, 2]
    assert nb.cells[2].outputs[0]["text"] == "specnb.cache\n"
    assert not any("sys.modules" in c.source for c in nb.cells)


def test_a_change_to_an_unrelated_module_leaves_the_notebook_fresh(tiny, monkeypatch):
    edited(monkeypatch, {"specnb.app.cli": "\n_changed = 1\n", "specnb.measure.bench": "\n_changed = 1\n",
                         "specnb.kernels.forward": "\n_changed = 1\n", "specnb.view": "\n_changed = 1\n"})
    assert executor.module_code("specnb.app.cli") != executor.code_form(
        executor.module_file("specnb.app.cli").read_text(encoding="utf-8"))          # the edit is seen
    assert executor.stale([tiny]) == []


def test_a_change_to_a_loaded_module_makes_the_notebook_stale(tiny, monkeypatch):
    edited(monkeypatch, {"specnb.cache": "# a comment\n"})                # a comment is no change
    assert executor.stale([tiny]) == []
    edited(monkeypatch, {"specnb.cache": "\n_changed = 1\n"})
    [(p, why)] = executor.stale([tiny])
    assert p == tiny and f"executed with code {executor.stamp(tiny)['code_hash']}" in why


def test_a_kernel_only_change_makes_the_notebook_drifted_not_stale(tiny, tmp_path, monkeypatch, capsys):
    """A change to the kernels alone keeps every token (the lossless tests prove it) and moves only
    timings: the notebook is drifted, a warning, and --check passes; a change beside it is stale."""
    st = executor.stamp(tiny)
    mods = sorted(st["modules"] + ["specnb.kernels.qtypes"])
    stamped = dict(st, modules=mods, code_hash=executor.code_hash([m for m in mods if not executor.is_kernel(m)]),
                   kernel_hash=executor.code_hash(["specnb.kernels.qtypes"]))
    p = copy_of(tiny, tmp_path, **stamped)
    assert executor.stale([p]) == [] and executor.drifted([p]) == []
    edited(monkeypatch, {"specnb.kernels.qtypes": "\n_changed = 1\n"})
    assert executor.stale([p]) == []
    [(q, why)] = executor.drifted([p])
    assert q == p and "its tokens are the same" in why
    monkeypatch.setattr(executor, "NOTEBOOK_DIR", tmp_path)
    assert executor.main(["--check"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and "drifted (a warning)" in out.err
    edited(monkeypatch, {"specnb.kernels.qtypes": "\n_changed = 1\n", "specnb.cache": "\n_changed = 1\n"})
    assert [q for q, _ in executor.stale([p])] == [p] and executor.main(["--check"]) == 1


def test_a_stamp_of_one_hash_over_kernels_and_all_is_still_read(tiny, tmp_path, monkeypatch):
    """Notebooks stamped before the kernels were hashed apart: one hash over every module."""
    st = executor.stamp(tiny)
    mods = sorted(st["modules"] + ["specnb.kernels.qtypes"])
    old = {k: v for k, v in st.items() if k not in ("kernel_hash", "costs")}
    p = copy_of(tiny, tmp_path, **dict(old, modules=mods, code_hash=executor.code_hash(mods)))
    assert executor.stale([p]) == []
    edited(monkeypatch, {"specnb.kernels.qtypes": "\n_changed = 1\n"})
    assert [q for q, _ in executor.stale([p])] == [p]


def test_a_notebook_that_loaded_a_module_gone_since_is_stale(tiny, tmp_path):
    """specnb/spec/ was renamed specnb/speculation/: a stamp naming specnb.spec.loop is stale."""
    st = executor.stamp(tiny)
    p = copy_of(tiny, tmp_path, **{**st, "modules": st["modules"] + ["specnb.spec.loop"]})
    [(_, why)] = executor.stale([p])
    assert "no longer exist" in why and "specnb.spec.loop" in why


def test_old_whole_library_stamps_and_unstamped_notebooks_are_stale(tiny, tmp_path):
    nb = nbformat.read(str(tiny), as_version=4)
    del nb.metadata["specnb"]
    none = tmp_path / "00_none.ipynb"
    nbformat.write(nb, str(none))
    st = executor.stamp(tiny)
    old = copy_of(tiny, tmp_path, "00_old.ipynb", library_hash="0123456789abcdef",
                  executed_s=st["executed_s"], python=st["python"], machine=st["machine"])
    half = copy_of(tiny, tmp_path, "00_half.ipynb", modules=st["modules"])
    reasons = dict(executor.stale([none, old, half]))
    assert list(reasons) == [none, old, half]
    assert "never executed" in reasons[none]
    assert "whole library (the old rule)" in reasons[old]
    assert "no hash of their code" in reasons[half]


def test_check_lists_the_stale_notebooks_of_the_folder(tiny, tmp_path, monkeypatch, capsys):
    copy_of(tiny, tmp_path)
    nbformat.write(nbformat.v4.new_notebook(), str(tmp_path / "01_unstamped.ipynb"))
    monkeypatch.setattr(executor, "NOTEBOOK_DIR", tmp_path)
    assert executor.main(["--check", "00"]) == 0
    assert executor.main(["--check"]) == 1
    assert capsys.readouterr().out.splitlines() == ["01_unstamped.ipynb: never executed by specnb.app.notebooks"]


def test_executing_without_chromium_stops_before_any_notebook(monkeypatch, capsys):
    """Without Chromium the notebooks would be stored with no static pictures (which the metadata
    tests fail): the executor says what is missing and how to install it, and runs nothing."""
    from specnb.figures import snapshot
    monkeypatch.setattr(snapshot, "find_chromium", lambda: None)
    monkeypatch.setattr(snapshot, "kaleido_browser", lambda: None)
    ran = []
    monkeypatch.setattr(executor, "execute", lambda p, **kw: ran.append(p) or 0.0)
    monkeypatch.setattr(executor, "write_times", lambda *a: True)
    assert executor.main(["00"]) == 2
    err = capsys.readouterr().err
    assert "apt-get install -y chromium" in err and "SPECNB_CHROMIUM" in err and "--without-pictures" in err
    assert "live views" in err and "kaleido" in err and ran == []
    assert executor.main(["00", "--without-pictures"]) == 0 and len(ran) == 1
    monkeypatch.setattr(snapshot, "find_chromium", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(snapshot, "kaleido_browser", lambda: "/usr/bin/chromium")
    assert executor.missing_picture_tools() == [] and executor.main(["00"]) == 0 and len(ran) == 2
