"""What every step's check shares: reading the learner's answer, calling the learner's function so
that an exception names the case, and naming a mistake from a catalogue.

A catalogue is a list of (text, fn) kept beside the formula it diagnoses: fn(case) computes what a
function with that mistake returns for the case (None where the mistake cannot show), and text says
what the mistake is, with the case's values filled in ("{n_max}"). When the learner's answer
differs from the reference's, every entry whose answer equals the learner's is named.
"""
from __future__ import annotations

import math
import string


def name_mistakes(mistakes, got, case, fields: dict, close: bool = False) -> str:
    """The texts of the catalogue entries whose answer for `case` is `got` ('' when none is):
    `close` compares numbers with a relative tolerance of 1e-6."""
    hits = []
    for text, fn in mistakes:
        try:
            answer = fn(case)
        except (IndexError, KeyError, ZeroDivisionError):
            continue                                    # the mistake cannot happen in this case
        if answer is None:
            continue
        same = math.isclose(got, answer, rel_tol=1e-6) if close else got == answer
        if same:
            hits.append(string.Formatter().vformat(text, (), _Fields(fields)))
    return "; or: ".join(hits)


class _Unknown:
    def __format__(self, spec: str) -> str:
        return "?"


class _Fields(dict):
    def __missing__(self, key):                           # a value this case does not define
        return _Unknown()


def tokens(x, what: str, name: str) -> list:
    """x as a list of ints, or an AssertionError saying what came back instead."""
    try:
        out = [int(t) for t in x]
        if any(int(t) != t for t in x):
            raise TypeError
        return out
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {what} must be a list of token ids (ints), got {x!r:.120}") from None


def as_int(x, what: str, name: str, where: str) -> int:
    try:
        if int(x) == x:
            return int(x)
    except (TypeError, ValueError):
        pass
    raise AssertionError(f"{name}: {where}: {what} must be an int, got {x!r:.80}")


def first_diff(want: list, got: list) -> int:
    return next((i for i, (w, g) in enumerate(zip(want, got)) if w != g), min(len(want), len(got)))


def call(name: str, where: str, fn, *args, ctx_tgt=None, ctx_dft=None, n_past=None):
    """fn(*args); an exception it raises becomes an AssertionError naming the case (with a hint for
    the API's usual ones). The exception stays its __cause__."""
    try:
        return fn(*args)
    except AssertionError:
        raise
    except Exception as e:            # the learner's function failed: name it, with the case
        raise AssertionError(f"{name}: {where}: your function raised {type(e).__name__}: {e}"
                             + _hint(e, ctx_tgt, ctx_dft, n_past)) from e


def _hint(err: Exception, ctx_tgt=None, ctx_dft=None, n_past=None) -> str:
    """A hint for the usual exceptions of the API (positions that are not contiguous, rows without
    logits)."""
    msg = str(err)
    if "not contiguous" in msg and n_past is not None:
        if ctx_dft is not None and ctx_dft.seq_pos_max(0) >= n_past:
            return (f" | hint: the draft context still holds rows past n_past = {n_past} (its last "
                    f"position is {ctx_dft.seq_pos_max(0)}): after drafting, roll it back with "
                    f"ctx_dft.seq_rm(0, n_past, -1) before replaying the verification batch on it")
        if ctx_tgt is not None and ctx_tgt.seq_pos_max(0) != n_past - 1:
            return (f" | hint: at the start of a round the target must hold exactly [0, n_past) = "
                    f"[0, {n_past}); its last position is {ctx_tgt.seq_pos_max(0)}")
        return (" | hint: a decode must continue right after the last position the context holds "
                "(seq_rm what should not be there)")
    if "not contiguous" in msg:
        return " | hint: a decode must continue right after the last position the context holds"
    if "did not request logits" in msg:
        return (" | hint: sample only rows that asked for logits (Batch.add(..., logits=True)); "
                "row i of the last decode is index i")
    return ""


def unpack_round(out, name: str, where: str):
    """A round's (draft, ids, n_past, id_last), read and typed, or an AssertionError."""
    try:
        draft, ids, n_past, id_last = out
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {where}: your round must return (draft, ids, n_past, id_last), "
                             f"got {out!r:.120}") from None
    ids = tokens(ids, "ids", name)
    if not ids:
        raise AssertionError(f"{name}: {where}: ids is empty; a round always commits at least one token "
                             f"(the target's own sample)")
    return (tokens(draft, "draft", name), ids,
            as_int(n_past, "n_past", name, where), as_int(id_last, "id_last", name, where))
