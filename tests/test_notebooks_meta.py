"""The notebooks as documents: links, the README's list, no widget state, exercises and answers.

Executing the notebooks is nbval's job (CI: `pytest --nbval-lax notebooks/ --nbval-sanitize-with
nbval_sanitize.cfg`); these checks only read the .ipynb files, so they are fast.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
README_SECTION = "## Teaching with specnb"

# [text](target) and ![alt](target), target up to the first space or ")" (an optional "title" after it)
MD_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
ANCHOR = re.compile(r"\b(?:common|examples|tools|src|include)/[\w./-]+\.(?:cpp|h):\d+")
ABS_PATH = re.compile(r"(?<![\w.])/(?:home|root|tmp|Users|work|private|var)/\S+")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def text_of(output: dict) -> str:
    if output.get("output_type") == "stream":
        t = output.get("text", "")
    else:
        t = output.get("data", {}).get("text/plain", "")
    return "".join(t) if isinstance(t, list) else t


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NB_DIR}"
    for p in NOTEBOOKS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", p.name), \
            f"{p.name}: notebook names are NN_words.ipynb (two digits give the order)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_relative_links_resolve(path):
    nb = load(path)
    missing = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = source(cell)
        for target in MD_LINK.findall(text) + HTML_LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue                  # http:, https:, mailto:, data: ... and in-page anchors
            rel = unquote(target.split("#", 1)[0].split("?", 1)[0])
            if not rel:
                continue
            if not (path.parent / rel).resolve().exists():
                missing.append(f"cell {i}: {target}")
    assert not missing, f"{path.name}: relative links that do not resolve: {missing}"


def readme_notebooks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.find(README_SECTION)
    assert start >= 0, (f"README.md has no '{README_SECTION}' section listing the notebooks "
                        f"(proposed text: docs/teaching.md)")
    nxt = re.search(r"^## ", text[start + len(README_SECTION):], re.M)
    section = text[start: start + len(README_SECTION) + nxt.start()] if nxt else text[start:]
    return re.findall(r"notebooks/(\d\d_[a-z0-9_]+\.ipynb)", section)


def test_readme_lists_exactly_the_notebooks():
    listed = readme_notebooks()
    on_disk = [p.name for p in NOTEBOOKS]
    assert set(listed) == set(on_disk), (
        f"README's '{README_SECTION}' lists {sorted(set(listed))}, notebooks/ holds {on_disk}: "
        f"missing from the README {sorted(set(on_disk) - set(listed))}, "
        f"not in notebooks/ {sorted(set(listed) - set(on_disk))}")
    first = list(dict.fromkeys(listed))          # order of first mention
    assert first == sorted(first), f"README lists the notebooks out of order: {first}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_saved_widget_state(path):
    nb = load(path)
    assert "widgets" not in nb.get("metadata", {}), \
        f"{path.name}: metadata.widgets holds saved widget state; strip it before committing"
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            assert "application/vnd.jupyter.widget-state+json" not in out.get("data", {}), \
                f"{path.name} cell {i}: an output holds saved widget state"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_check_cells_and_folded_answers(path):
    """Exercises: 2 or 3 numbered questions, a predict-then-check code cell with asserts below
    them, and the answers in a folded <details> block after it (a static viewer shows it closed)."""
    cells = load(path)["cells"]
    heads = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
             and re.search(r"^#{2,3}\s+Exercises\b", source(c), re.M)]
    assert heads, f"{path.name}: no '## Exercises' section"
    ex = source(cells[heads[-1]])
    n = len(re.findall(r"^\s*\d+\.\s", ex.split("Exercises", 1)[1], re.M))
    assert 2 <= n <= 3, f"{path.name}: the exercises section has {n} numbered exercises (2 or 3)"
    after = cells[heads[-1] + 1:]
    checks = [c for c in after if c["cell_type"] == "code" and re.search(r"^\s*assert\b", source(c), re.M)]
    assert checks, f"{path.name}: no check cell with an assert after the exercises"
    answers = [c for c in after if c["cell_type"] == "markdown" and "<details" in source(c)
               and "answer" in source(c).lower()]
    assert answers, f"{path.name}: no folded answers (<details> with the answers) after the exercises"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_shows_a_picture_a_static_viewer_can_draw(path):
    """Every notebook stores at least one image output (a PNG beside a plotly figure or a
    snapshot of a live view), so it reads on GitHub or nbviewer without running."""
    pngs = sum("image/png" in out.get("data", {}) for c in load(path)["cells"]
               if c["cell_type"] == "code" for out in c.get("outputs", []))
    assert pngs, f"{path.name}: no stored picture (image/png output)"


def test_outputs_come_from_todays_code():
    """Each notebook was executed by `python -m specnb.app.course` with the library as it is now."""
    from specnb.app.course import library_hash, stale
    bad = stale(NOTEBOOKS)
    assert not bad, (f"notebooks whose outputs were made by other code (library {library_hash()}): "
                     + "; ".join(f"{p.name}: {why}" for p, why in bad)
                     + ". Re-execute them: python -m specnb.app.course")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opens_with_goals_and_llama_cpp_anchors(path):
    cells = load(path)["cells"]
    first = source(cells[0])
    assert cells[0]["cell_type"] == "markdown" and first.startswith("# "), f"{path.name}: no title cell"
    assert "By the end of this notebook" in first, \
        f"{path.name}: the first cell does not say what the learner will understand"
    assert ANCHOR.search(first), f"{path.name}: the first cell cites no llama.cpp file:line anchor"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_with_clean_outputs(path):
    cells = load(path)["cells"]
    checked = 0
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("execution_count") is not None, f"{path.name} cell {i}: not executed (commit with outputs)"
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"{path.name} cell {i}: stored an error output"
            if out.get("output_type") == "stream":
                assert out.get("name") != "stderr" or "NBVAL_CHECK_OUTPUT" not in source(cell), \
                    f"{path.name} cell {i}: a checked cell writes to stderr"
        if "# NBVAL_CHECK_OUTPUT" in source(cell):
            checked += 1
            outs = cell.get("outputs", [])
            assert outs, f"{path.name} cell {i}: a checked cell with no stored output"
            for out in outs:
                t = text_of(out)
                assert not ABS_PATH.search(t), \
                    f"{path.name} cell {i}: a checked output shows a path: {ABS_PATH.search(t).group()}"
                assert not re.search(r"0x[0-9a-f]{8,}", t), f"{path.name} cell {i}: a checked output shows an address"
    assert checked, f"{path.name}: no cell is marked # NBVAL_CHECK_OUTPUT"
