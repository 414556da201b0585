"""specnb.app.course: the library hash that stamps executed notebooks, and the notebook list."""
import nbformat

from specnb.app import course


def test_code_form_ignores_comments_docstrings_and_layout():
    a = 'def f(x):\n    """Doc."""\n    return x + 1   # add one\n'
    b = 'def f(x):\n\n    # a comment\n    return (x +\n            1)\n'
    assert course.code_form(a) == course.code_form(b)


def test_code_form_sees_every_change_in_behaviour():
    base = "def f(x):\n    return x + 1\n"
    for changed in ("def f(x):\n    return x + 2\n", "def f(y):\n    return y + 1\n",
                    "def f(x):\n    return x - 1\n", 'def f(x):\n    "x"\n    return x + 1\nf(0)\n'):
        assert course.code_form(changed) != course.code_form(base)


def test_library_hash_covers_the_kernels_and_is_stable():
    names = [name for name, _ in course.library_files()]
    assert "app/course.py" in names and "speculative_simple.py" in names and "kernels/forward.py" in names
    assert not [n for n in names if n.startswith("kernels/") and n.count("/") > 1]
    h = course.library_hash()
    assert len(h) == 16 and h == course.library_hash()


def test_notebooks_are_found_in_order_and_by_number():
    every = course.notebooks()
    assert every and every == sorted(every)
    assert course.notebooks(["00"]) == [every[0]]


def test_stale_reports_unstamped_and_outdated(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook()
    p = tmp_path / "00_x.ipynb"
    nbformat.write(nb, str(p))
    assert "never executed" in course.stale([p])[0][1]
    nb.metadata["specnb"] = {"library_hash": "0" * 16}
    nbformat.write(nb, str(p))
    assert "executed with library 0000" in course.stale([p])[0][1]
    nb.metadata["specnb"] = {"library_hash": course.library_hash()}
    nbformat.write(nb, str(p))
    assert course.stale([p]) == []
