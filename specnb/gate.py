"""The vocab gate: may a draft model draft for a target? (common_speculative_are_compatible)

Four checks, as common/speculative.cpp: the same vocab type, the same BOS and EOS settings, vocab
sizes within SPEC_VOCAB_MAX_SIZE_DIFFERENCE of each other, and identical token text for every id
from SPEC_VOCAB_CHECK_START_TOKEN_ID on. Unlike llama.cpp, every check runs, so the report shows
all of them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import VocabError

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5


@dataclass
class GateCheck:
    name: str
    ok: bool
    detail: str
    llama_cpp_ok: bool | None = None   # what llama.cpp's own check would say, where it differs


@dataclass
class CompatReport:
    """The result of each gate check for a target/draft pair."""
    checks: list[GateCheck]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def first_failure(self) -> GateCheck | None:
        return next((c for c in self.checks if not c.ok), None)

    def check(self, name: str) -> GateCheck:
        return next(c for c in self.checks if c.name == name)

    def __str__(self) -> str:
        lines = [f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}" for c in self.checks]
        f = self.first_failure
        lines.append("compatible" if f is None else f"incompatible: {f.name}: {f.detail}")
        return "\n".join(lines)


class IncompatibleVocabError(VocabError):
    def __init__(self, report: CompatReport):
        self.report = report
        super().__init__(f"draft vocab is not compatible with the target vocab:\n{report}")


def _vocab(m):
    return getattr(m, "vocab", m)


def are_compatible(target, draft) -> CompatReport:
    """common_speculative_are_compatible: may `draft` draft for `target`? (Models or Vocabs.)

    Unlike llama.cpp, every check runs (the report shows all of them), and the vocab types
    are compared as types: llama.cpp stores them in a `bool`, so its own check cannot tell
    SPM from BPE (`llama_cpp_ok` records what it would have said).
    """
    vt, vd = _vocab(target), _vocab(draft)
    checks = [GateCheck("vocab type", vt.type == vd.type,
                        f"target {vt.type}, draft {vd.type}",
                        llama_cpp_ok=True)]   # bool(SPM) == bool(BPE): llama.cpp always passes this
    checks.append(GateCheck(
        "BOS", vt.add_bos == vd.add_bos and vt.bos_id == vd.bos_id,
        f"target id {vt.bos_id} add={vt.add_bos}, draft id {vd.bos_id} add={vd.add_bos}"))
    checks.append(GateCheck(
        "EOS", vt.add_eos == vd.add_eos and vt.eos_id == vd.eos_id,
        f"target id {vt.eos_id} add={vt.add_eos}, draft id {vd.eos_id} add={vd.add_eos}"))
    diff = abs(vt.n_vocab - vd.n_vocab)
    checks.append(GateCheck(
        "vocab size", diff <= SPEC_VOCAB_MAX_SIZE_DIFFERENCE,
        f"target {vt.n_vocab}, draft {vd.n_vocab}, difference {diff} "
        f"(max {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})"))
    n = min(vt.n_vocab, vd.n_vocab)
    first = next((i for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, n)
                  if vt.tokens[i] != vd.tokens[i]), None)
    if first is None:
        detail = f"ids {SPEC_VOCAB_CHECK_START_TOKEN_ID}..{n - 1} identical"
    else:
        detail = f"token {first} differs: target {vt.tokens[first]!r}, draft {vd.tokens[first]!r}"
    checks.append(GateCheck("token text", first is None, detail))
    for c in checks:
        if c.llama_cpp_ok is None:
            c.llama_cpp_ok = c.ok
    return CompatReport(checks)
