"""The documents: README is for users (short, its speed table written from docs/speed.toml as
docs/benchmarks.md's is), docs/benchmarks.md is a reference and docs/lab/ its indexed log, every
relative link and anchor resolves, and docs/architecture.md names every folder of the package and
the subject's reading set, whose size is bounded."""
import re
from pathlib import Path

import pytest
import speed_table

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "docs" / "lab"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(LAB.glob("*.md"))]


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


def test_speed_tables_are_the_record():
    """README's table and docs/benchmarks.md's are docs/speed.toml rendered (their lab links
    relative to each), so the two say the same; the record's lab files exist and name its commits."""
    data = speed_table.load()
    assert len(data["host"]) >= 4
    for doc, to_lab in speed_table.TARGETS.items():
        text = doc.read_text(encoding="utf-8")
        a, b = speed_table.block(text, doc.name)
        assert text.splitlines()[a:b] == speed_table.render(data, to_lab), \
            f"{doc.name}'s speed table is not docs/speed.toml's: run python tests/speed_table.py"


def test_speed_record_refuses_a_host_without_its_lab_file(tmp_path):
    bad = tmp_path / "speed.toml"
    text = speed_table.RECORD.read_text(encoding="utf-8")
    bad.write_text(text.replace('lab = "2026-12-05-zen4.md"', 'lab = "2026-12-05-nowhere.md"'), encoding="utf-8")
    with pytest.raises(ValueError, match="nowhere"):
        speed_table.load(bad)
    bad.write_text(text.replace('commit = "bead47e"', 'commit = "0000000"'), encoding="utf-8")
    with pytest.raises(ValueError, match="does not name commit 0000000"):
        speed_table.load(bad)


def test_benchmarks_is_a_reference_and_the_lab_is_indexed():
    """docs/benchmarks.md stays short and undated (an investigation goes to docs/lab/); every lab
    file is named by its day and host, opens with the host, the commits and the command, and has
    its line in docs/lab/README.md; a raw --json output sits beside the file of its day and host."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    dated = [h for h in re.findall(r"^#+ .*$", text, re.M) if re.search(r"\d{4}-\d{2}-\d{2}", h)]
    assert not dated, f"docs/benchmarks.md has dated sections (they belong in docs/lab/): {dated}"
    index = (LAB / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^- \[([^]]+)\]\(\1\)", index, re.M)
    files = sorted(p.name for p in LAB.iterdir() if p.name != "README.md")
    assert sorted(listed) == sorted(set(listed)) == files, set(listed) ^ set(files)
    for name in files:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9]+(-[a-z0-9]+)*\.(md|json)", name), name
        if name.endswith(".json"):
            assert any(name.startswith(m[:-3] + "-") for m in files if m.endswith(".md")), name
            continue
        head = "\n".join((LAB / name).read_text(encoding="utf-8").splitlines()[:12])
        for field in ("**Host**", "**Commit", "**Command"):
            assert field in head, f"docs/lab/{name} does not open with {field}"


def anchors(md: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered."""
    seen: dict = {}
    out = set()
    text = re.sub(r"^```.*?^```", "", md.read_text(encoding="utf-8"), flags=re.M | re.S)
    for title in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    """Every relative link names a file that exists, and an anchor into a Markdown file names one
    of its headings (so a section that moves takes its links with it)."""
    text = doc.read_text(encoding="utf-8")
    missing = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = doc.parent / target if target else doc
        if not path.exists():
            missing.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            missing.append(f"{target}#{anchor}")
    assert not missing, f"{doc.name} links to missing files or headings: {missing}"


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


# the speculation subject (docs/architecture.md's reading set) and the bounds that keep it readable
READING_SET = ["specnb/speculative_simple.py", "specnb/speculation/loop.py", "specnb/speculation/speculative.py",
               "specnb/speculation/impl.py", "specnb/speculation/draft_simple.py", "specnb/speculation/params.py",
               "specnb/speculation/verify.py", "specnb/speculation/events.py", "specnb/vocab/gate.py"]
READING_FILE_MAX, READING_SET_MAX = 420, 2100


def test_architecture_reading_set_is_named_and_bounded():
    """docs/architecture.md names the subject's files, in its reading order, near the top; each
    stays under READING_FILE_MAX lines and all of them under READING_SET_MAX (as the teaching
    loop's own length is bounded in tests/test_speculative_simple.py)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = table_after(text, "| reading set |")[2:]
    named = [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]
    assert named == READING_SET, named
    assert text.index("| reading set |") < text.index("| layer |"), "the reading set comes first"
    sizes = {f: len((ROOT / f).read_text(encoding="utf-8").splitlines()) for f in READING_SET}
    over = {f: n for f, n in sizes.items() if n > READING_FILE_MAX}
    assert not over, f"reading-set files over {READING_FILE_MAX} lines: {over}"
    assert sum(sizes.values()) <= READING_SET_MAX, f"the reading set has {sum(sizes.values())} lines"
    said = f"at most {READING_FILE_MAX} lines a file and {READING_SET_MAX:,} in all"
    assert said in " ".join(text.split()), f"docs/architecture.md should say the bounds: {said}"


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
