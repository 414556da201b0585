"""The documents: README is for users (short, its speed table copied from docs/benchmarks.md),
every relative link resolves, and docs/architecture.md names every folder of the package."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def table_after(text: str, header_start: str) -> list[str]:
    lines = text.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    j = i
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    return lines[i:j]


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 220, f"README.md has {n} lines; measurements go to docs/benchmarks.md"


def test_readme_speed_table_is_the_one_in_benchmarks():
    head = "| | AMD EPYC"
    readme = table_after((ROOT / "README.md").read_text(encoding="utf-8"), head)
    bench = table_after((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8"), head)
    assert readme == bench and len(readme) >= 3


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    text = doc.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        if not (doc.parent / target).exists():
            missing.append(target)
    assert not missing, f"{doc.name} links to missing files: {missing}"


def test_architecture_names_every_folder():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    folders = sorted(p.parent.name for p in (ROOT / "specnb").glob("*/__init__.py"))
    missing = [f for f in folders if f"`{f}/`" not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"
    assert "docs/architecture.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_architecture_names_every_module_of_every_folder():
    """The layer table's module column, folder by folder (a package inside a folder has its own
    row), is the folder's modules: none missing, none that is gone (`__init__` may be named or not)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named: dict = {}
    for row in table_after(text, "| layer |")[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        folder = re.match(r"`([\w/]+)/?`", cells[1]).group(1).rstrip("/")
        key = "specnb" if folder == "specnb" else folder
        modules = re.sub(r"\([^)]*\)", "", cells[2])        # `__init__` (`Vocab`): the module only
        named.setdefault(key, set()).update(re.findall(r"`(\w+)`", modules))
    actual = {"specnb": {p.stem for p in (ROOT / "specnb").glob("*.py")},
              "kernels": {p.stem for p in (ROOT / "kernels").glob("*.py")}}
    for d in (ROOT / "specnb").glob("*/**/__init__.py"):          # app/exercise/ has a row of its own
        actual["/".join(d.parent.relative_to(ROOT / "specnb").parts)] = {p.stem for p in d.parent.glob("*.py")}
    assert set(named) == set(actual), set(named) ^ set(actual)
    for folder, modules in actual.items():
        assert named[folder] - {"__init__"} == modules - {"__init__"}, (folder, named[folder] ^ modules)


def test_readme_gives_master_only_masters_flags():
    """README's speculative-simple flags: what it calls master 34af94cd's are master's (its
    --spec-draft-n-max takes an integer only; auto, heuristic, the lookup-cache files and
    --verify are specnb's), and specnb's follow the "beyond llama.cpp" label."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    item = re.search(r"^- \*\*speculative-simple\*\*:(.*?)(?=^- \*\*|^\s*$)", text, re.M | re.S)
    assert item, "README.md has no '- **speculative-simple**:' flag list"
    body = " ".join(item.group(1).split())
    cut = body.lower().find("beyond llama.cpp")
    masters, sep, beyond = body[:cut], cut >= 0, body[cut:]
    assert sep and "master 34af94cd" in masters, body
    for specnb_only in ("auto", "heuristic", "-lcs", "-lcd", "--verify", "rejection", "--no-reeval", "-np"):
        assert specnb_only not in masters, f"README lists {specnb_only} among master's flags: {masters}"
        assert specnb_only in beyond, f"README does not label {specnb_only} as specnb's"


def test_readme_bit_identity_is_claimed_for_exact_verification_only():
    """Bit-identical to plain decoding holds with exact verification (llama.cpp's); rejection
    sampling is lossless in distribution only."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    claim = re.search(r"[^.]*\*bit-identical\* to plain decoding[^.]*\.", text)
    assert claim and "exact verification" in claim.group(), claim and claim.group()
    assert re.search(r"--verify rejection.{0,80}lossless in distribution", text)
