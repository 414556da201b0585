"""The speed table of README.md and docs/benchmarks.md, written from one record, docs/speed.toml.

    python tests/speed_table.py            # rewrite both tables from docs/speed.toml
    python tests/speed_table.py --check    # exit 1, naming the file, when a table differs

Each document holds the table between BEGIN and END; tests/test_docs.py runs the check. The two
tables differ only in where their links to the lab files point (docs/lab/ from README.md, lab/
from docs/benchmarks.md)."""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "speed.toml"
LAB = ROOT / "docs" / "lab"
# each document, and the path from it to docs/lab/
TARGETS = {ROOT / "README.md": "docs/lab/", ROOT / "docs" / "benchmarks.md": "lab/"}
BEGIN = "<!-- speed table: written by python tests/speed_table.py from docs/speed.toml -->"
END = "<!-- end of speed table -->"


def load(path: Path = RECORD) -> dict:
    """The record, checked: every host has a cell for every row (empty where not measured), a
    date, a commit, and a lab file named by its date that exists and names the commit."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    keys = [k for k, _ in data["rows"]]
    for h in data["host"]:
        name = h.get("column", "?")
        missing = [k for k in keys if k != "measured" and k not in h]
        if missing:
            raise ValueError(f"{path.name}: host {name!r} has no cell for {missing}")
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", h["date"]) or not re.fullmatch(r"[0-9a-f]{7,40}", h["commit"]):
            raise ValueError(f"{path.name}: host {name!r}: date {h['date']!r} or commit {h['commit']!r} malformed")
        lab = LAB / h["lab"]
        if not h["lab"].startswith(h["date"] + "-") or not lab.is_file():
            raise ValueError(f"{path.name}: host {name!r}: lab file {h['lab']!r} is not docs/lab/{h['date']}-<host>.md")
        if h["commit"] not in lab.read_text(encoding="utf-8"):
            raise ValueError(f"{path.name}: host {name!r}: docs/lab/{h['lab']} does not name commit {h['commit']}")
    return data


def render(data: dict, to_lab: str) -> list[str]:
    """The Markdown table, a column per host, its lab links relative to `to_lab`."""
    hosts = data["host"]
    lines = ["| | " + " | ".join(h["column"] for h in hosts) + " |", "|---" * (len(hosts) + 1) + "|"]
    for key, label in data["rows"]:
        if key == "measured":
            cells = [f"[{h['date']}]({to_lab}{h['lab']}), `{h['commit']}`" for h in hosts]
        else:
            cells = [h[key] for h in hosts]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def block(text: str, where: str = "") -> tuple[int, int]:
    """The lines strictly between BEGIN and END in `text`."""
    lines = text.splitlines()
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise ValueError(f"{where}: needs one {BEGIN!r} line, then one {END!r} line")
    return lines.index(BEGIN) + 1, lines.index(END)


def written(doc: Path, data: dict) -> str:
    """`doc`'s text with its table written from `data`."""
    text = doc.read_text(encoding="utf-8")
    a, b = block(text, str(doc.relative_to(ROOT)))
    lines = text.splitlines()
    return "\n".join(lines[:a] + render(data, TARGETS[doc]) + lines[b:]) + "\n"


def main(argv: list[str]) -> int:
    data, check = load(), "--check" in argv
    stale = [doc for doc in TARGETS if written(doc, data) != doc.read_text(encoding="utf-8")]
    names = ", ".join(str(doc.relative_to(ROOT)) for doc in stale)
    if check:
        if stale:
            print(f"not docs/speed.toml's table: {names} (python tests/speed_table.py writes it)")
        return 1 if stale else 0
    for doc in stale:
        doc.write_text(written(doc, data), encoding="utf-8")
    print(f"wrote {names}" if stale else "both tables are docs/speed.toml's already")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
