"""`python -m specnb.app.exercise starter [PATH]`: the exercise's starter file (starter.py: the
signatures, the docstrings and the checks, the bodies left to write), printed, or written to PATH."""
from __future__ import annotations

import sys
from pathlib import Path

USAGE = ("usage: python -m specnb.app.exercise starter [PATH]\n"
         "  prints the exercise's starter file (docs/exercise.md), or writes it to PATH, never over a file")


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "starter" or len(args) > 2:
        print(USAGE, file=sys.stderr)
        return 2
    text = Path(__file__).with_name("starter.py").read_text(encoding="utf-8")
    if len(args) == 1:
        sys.stdout.write(text)
        return 0
    dst = Path(args[1])
    if dst.exists():
        print(f"{dst} exists: not overwritten (choose another path)", file=sys.stderr)
        return 1
    dst.write_text(text, encoding="utf-8")
    print(f"wrote {dst}: fill in one function at a time and run  python {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
