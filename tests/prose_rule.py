"""The course's rule for prose: a sentence that quotes a measured number must come from the cell
that measured it.

A notebook says such sentences with `say(f"... {speedup:.2f}x ...")` (specnb.course): the cell
that measures formats the number into the text. `measured_phrases` finds a quoted measurement
in text (a speed-up, a time, a rate, a share, a cost ratio c, an acceptance α, a batch cost
bc(k)); the notebook tests apply it to every hand-written Markdown cell and to the literal parts
of every `say(f"...")` template, so a number typed by hand is caught.

Some numbers in prose are not measurements: a value chosen for an exercise ("with α = 0.8"), a
published figure with its citation, a definition (c = 1 means the draft costs a target step).
A Markdown cell lists them in a comment, which a reader of the source sees and a rendered page
hides:

    <!-- not measured: α = 0.8 (chosen), 2-3.4x (published, Leviathan et al.) -->
"""
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


# ---- verdicts ------------------------------------------------------------------------------------
# A sentence that judges (wins, loses, pays, nearly free, memory-bound, ...) is a verdict: like a
# number, it must come from the cell that measured it (a say() whose words the measurement
# chooses), or say what it depends on (a condition: if, when, where, whether, depends, can, ...).
VERDICT = re.compile(
    r"\b(?:win|wins|won|winning|lose|loses|lost|losing|pays?\s+off|paid\s+off|pays\s+for\s+itself"
    r"|breaks?\s+even|(?:nearly|almost|practically)\s+(?:free|so)|close\s+to\s+one\s+row|comes?\s+near"
    r"|(?:memory|compute|weight|bandwidth)-bound|beats?|faster\s+than|slower\s+than)\b", re.I)
CONDITION = re.compile(
    r"\b(?:if|when|whenever|where|wherever|whether|unless|until|depends?|depending|would|could|can|cannot"
    r"|may|might|must|needs?|should|as\s+long\s+as|once|predicts?|rule)\b|\?", re.I)
_SENTENCE = re.compile(r"(?<=[.!?:;])\s+|\n\s*[-*|#]|\n\n")


def verdict_phrases(text: str) -> list[str]:
    """The sentences of a piece of prose that state a verdict without a condition (see VERDICT
    and CONDITION), minus those its `not measured:` comments list. Code and link targets are not
    prose."""
    allowed = " ".join(m.group(1) for m in NOT_MEASURED.finditer(text))
    prose = _CODE.sub(" ", _LINK_TARGET.sub("]", NOT_MEASURED.sub(" ", text)))
    out = []
    for s in _SENTENCE.split(prose):
        s = " ".join(s.split())
        m = VERDICT.search(s)
        if m and not CONDITION.search(s) and m.group() not in allowed:
            out.append(s if len(s) <= 160 else s[:157] + "...")
    return out
