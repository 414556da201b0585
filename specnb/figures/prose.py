"""Prose from measurements, and the course's one exercise format.

A sentence that quotes a measured number must come from the cell that measured it, or it drifts
the next time the notebook is re-executed on another machine. So a notebook says such sentences
with `say(f"... {speedup:.2f}x ...")`: the cell that measures formats the number into the text
and shows it as Markdown. `measured_phrases` is the rule that finds a quoted measurement in text
(a speed-up, a time, a rate, a share, a cost ratio c, an acceptance α, a batch cost bc(k)); the
notebook tests apply it to every hand-written Markdown cell and to the literal parts of every
`say(f"...")` template, so a number typed by hand is caught.

Some numbers in prose are not measurements: a value chosen for an exercise ("with α = 0.8"), a
published figure with its citation, a definition (c = 1 means the draft costs a target step).
A Markdown cell lists them in a comment, which a reader of the source sees and a rendered page
hides:

    <!-- not measured: α = 0.8 (chosen), 2-3.4x (published, Leviathan et al.) -->

`check(prediction, answer)` is the exercise format: with no prediction it asks for one (so the
committed output never gives the answer away); with one it says right or not quite, without
raising, so Run All goes on.
"""
from __future__ import annotations

import math
import re

_NUM = r"(?<![\w.])\d+(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s*(?:-|–|to)\s*{_NUM})?"
# a number with a unit of speed, time or share, or one of the course's measured quantities
MEASURED = re.compile(
    rf"{_RANGE}\s*(?:×(?!\s*\d)|x(?![\w\d])|ms\b|µs\b|s\b|seconds?\b|minutes?\b|min\b"
    rf"|tok/s|tokens/s|GB/s|%)"
    rf"|(?<![\w])(?:c\d?|α|alpha|β|beta|bc\(\d+\)|bc\[\d+\]|E\[tokens\])\s*(?:=|≈|~)\s*{_NUM}"
    r"(?!\s*(?:[−+*/·^(]|-\s))")         # the start of a formula (β = 1 − TV) quotes nothing
NOT_MEASURED = re.compile(r"<!--\s*not measured:(.*?)-->", re.S)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def measured_phrases(text: str) -> list[str]:
    """The quoted measurements in a piece of prose, minus those its `not measured:` comments
    list. Link targets and code (inline or fenced) are not prose."""
    allowed = " ".join(m.group(1) for m in NOT_MEASURED.finditer(text))
    prose = _CODE.sub(" ", _LINK_TARGET.sub("]", NOT_MEASURED.sub(" ", text)))
    return [m.group() for m in MEASURED.finditer(prose) if m.group() not in allowed]


def say(text: str):
    """Show a sentence made from this cell's measurements as Markdown (the cell's output)."""
    from IPython.display import Markdown
    return Markdown(text)


def _close(mine, answer, rel: float, abs_: float) -> bool:
    if isinstance(answer, (tuple, list)):
        return (isinstance(mine, (tuple, list)) and len(mine) == len(answer)
                and all(_close(m, a, rel, abs_) for m, a in zip(mine, answer)))
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return mine == answer
    if isinstance(mine, bool) or not isinstance(mine, (int, float)):
        return False
    return math.isclose(mine, answer, rel_tol=rel, abs_tol=abs_)


def _unset(x) -> bool:
    return x is None or (isinstance(x, (tuple, list)) and any(_unset(v) for v in x))


def check(prediction, answer, *, names: str = "your prediction", rel: float = 0.0,
          abs: float = 0.0, show=None) -> bool | None:  # noqa: A002 (abs= reads as the tolerance)
    """The exercise format: `check((my_tokens, my_rows), ex1, names="my_tokens, my_rows")`.

    prediction: the learner's value (None, or a tuple holding a None: not written yet).
    answer:     what this run computed; numbers compare within `rel`/`abs`, others exactly.
    show:       how to print the answer once a prediction is in (default: the answer itself).
    Returns None while no prediction is written, else whether it is right; never raises, so a
    wrong guess does not stop Run All."""
    if _unset(prediction):
        print(f"write your prediction into {names} and run the cell again")
        return None
    ok = _close(prediction, answer, rel, abs)
    shown = answer if show is None else show
    print(f"right: {shown}" if ok else f"not quite: you wrote {prediction!r}, this run gives {shown}")
    return ok
