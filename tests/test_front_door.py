"""The front door: specnb/__init__.py holds the learner's API, loaded on first use, and the
course's notebooks import from nowhere else."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import specnb

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_import_specnb_loads_nothing_else():
    code = "import sys, specnb; print(sorted(m for m in sys.modules if m.startswith(('specnb', 'numba'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['specnb', 'specnb.errors']"


@pytest.mark.parametrize("name", sorted(specnb._API))
def test_every_name_comes_from_the_module_that_defines_it(name):
    pytest.importorskip("ipywidgets") if specnb._API[name] == "view" else None
    value = getattr(specnb, name)
    where = getattr(value, "__module__", None)
    if where is not None and callable(value) and not isinstance(value, type(specnb)):
        # a function or class: defined in the module the table names (view: its package)
        assert where.startswith(f"specnb.{specnb._API[name]}"), (name, where)


def test_unknown_names_fail_clearly():
    with pytest.raises(AttributeError, match="no attribute 'load_modle'"):
        specnb.load_modle    # noqa: B018


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_through_the_front_door(nb):
    cells = json.loads(nb.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    deep = re.findall(r"^\s*(?:from|import) (specnb\.[\w.]+)", code, re.M)
    assert not deep, f"{nb.name} imports {sorted(set(deep))}; use `from specnb import ...`"
    used = set()
    for m in re.finditer(r"^\s*from specnb import \(?([^)]*?)\)?$", code, re.M | re.S):
        used |= {n.strip() for n in m.group(1).replace("\n", " ").split(",") if n.strip()}
    assert used and used <= set(specnb.__all__), used - set(specnb.__all__)
