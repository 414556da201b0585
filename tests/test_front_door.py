"""The two doors: specnb/__init__.py holds the learner's API (fifteen names and the errors),
specnb/course.py the course's other names and its prose helpers, both loaded on first use; the
course's notebooks import from nowhere else, and editors can follow every name."""
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import specnb
import specnb.course

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DOORS = {"specnb": specnb, "specnb.course": specnb.course}


def test_import_specnb_loads_nothing_else():
    code = "import sys, specnb; print(sorted(m for m in sys.modules if m.startswith(('specnb', 'numba'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['specnb', 'specnb.errors']"


def test_import_specnb_course_loads_no_model_code():
    code = ("import sys, specnb.course; "
            "print(sorted(m for m in sys.modules if m.startswith(('specnb', 'numba', 'IPython'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['specnb', 'specnb.course', 'specnb.errors']"


def test_the_learners_door_is_small():
    assert len(specnb._API) <= 16
    assert not set(specnb._API) & set(specnb.course._API), "a name in both doors"


@pytest.mark.parametrize("door,name", [(d, n) for d, m in DOORS.items() for n in sorted(m._API)])
def test_every_name_comes_from_the_module_that_defines_it(door, name):
    table = DOORS[door]._API
    pytest.importorskip("ipywidgets") if table[name] == "view" else None
    value = getattr(DOORS[door], name)
    where = getattr(value, "__module__", None)
    if where is not None and callable(value) and not isinstance(value, type(specnb)):
        # a function or class: defined in the module the table names (view: its package)
        assert where.startswith(f"specnb.{table[name]}"), (name, where)


@pytest.mark.parametrize("door", DOORS)
def test_each_name_is_written_once_where_editors_follow_it(door):
    """A door's `if TYPE_CHECKING:` block imports its names, one `from .module import name` a line
    (adding a name is adding a line); `_API`, which loads them, is read from those lines."""
    module = DOORS[door]
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    static = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and len(node.names) == 1, ast.unparse(node)
        assert node.names[0].name not in static, f"{node.names[0].name} imported twice"
        static[node.names[0].name] = node.module
    assert static and module._API == static
    assert "_API = {" not in Path(module.__file__).read_text(encoding="utf-8")


def test_unknown_names_fail_clearly_and_point_to_the_course_door():
    with pytest.raises(AttributeError, match="no attribute 'load_modle'"):
        specnb.load_modle    # noqa: B018
    with pytest.raises(AttributeError, match=r"'fig_cost_map' \(it is in specnb.course\)"):
        specnb.fig_cost_map    # noqa: B018
    with pytest.raises(AttributeError, match="'specnb.course' has no attribute 'nope'"):
        specnb.course.nope    # noqa: B018


def _imported(code: str, door: str) -> set:
    used = set()
    for m in re.finditer(rf"^\s*from {re.escape(door)} import \(?([^)]*?)\)?$", code, re.M | re.S):
        used |= {n.strip() for n in m.group(1).replace("\n", " ").split(",") if n.strip()}
    return used


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_through_the_two_doors(nb):
    cells = json.loads(nb.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    deep = set(re.findall(r"^\s*(?:from|import) (specnb\.[\w.]+)", code, re.M)) - {"specnb.course"}
    assert not deep, f"{nb.name} imports {sorted(deep)}; use `from specnb import ...` or specnb.course"
    learner, course = _imported(code, "specnb"), _imported(code, "specnb.course")
    assert learner | course, f"{nb.name} imports nothing from specnb"
    assert learner <= set(specnb.__all__), learner - set(specnb.__all__)
    assert course <= set(specnb.course.__all__), course - set(specnb.course.__all__)
