"""The vocab gate: may a draft model draft for a target? (common_speculative_are_compatible)

Four checks, as common/speculative.cpp makes them: the same vocab type, the same BOS and EOS
settings, vocab sizes within SPEC_VOCAB_MAX_SIZE_DIFFERENCE of each other, and identical token
text for every id from SPEC_VOCAB_CHECK_START_TOKEN_ID on. llama.cpp stops at the first failure;
specnb runs every check, so the report shows all of them.

Two llama.cpp versions answer differently, and the report gives both verdicts:
- c392e50 (Feb 2025; common/speculative.cpp:76-134) stores the vocab types in a `bool`
  (:85, :88), so any two real types (SPM, BPE, ...) look equal, and it compares the BOS and EOS
  add flags and both ids unconditionally (:97-105).
- master (34af94cd; common/speculative.cpp:66-129) compares the types as types (:72-82), and
  compares a BOS or EOS id only when that token is added (:84-98).
specnb's own verdict (`ok`, used by DraftSimple) follows master.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..errors import VocabError

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
# the llama.cpp commits the two verdicts describe (docs/llama_cpp.md)
LLAMA_CPP_C392E50 = "c392e5094deaf2d1a7c18683214f007fad3fe42b"
LLAMA_CPP_MASTER = "34af94cd9ab277632e27caeec2d41de2fd091b31"


@dataclass
class GateCheck:
    name: str
    ok: bool                       # specnb's verdict (as llama.cpp master)
    detail: str
    llama_cpp_c392e50_ok: bool     # what llama.cpp c392e50's check says
    llama_cpp_master_ok: bool      # what llama.cpp master 34af94cd's check says

    @property
    def llama_cpp_ok(self) -> bool:
        """The c392e50 verdict (this field's name before both versions were reported)."""
        return self.llama_cpp_c392e50_ok


@dataclass
class CompatReport:
    """The result of each gate check for a target/draft pair."""
    checks: list[GateCheck]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def llama_cpp_c392e50_ok(self) -> bool:
        """Would llama.cpp c392e50 let this draft draft for this target?"""
        return all(c.llama_cpp_c392e50_ok for c in self.checks)

    @property
    def llama_cpp_master_ok(self) -> bool:
        """Would llama.cpp master 34af94cd let this draft draft for this target?"""
        return all(c.llama_cpp_master_ok for c in self.checks)

    @property
    def first_failure(self) -> GateCheck | None:
        return next((c for c in self.checks if not c.ok), None)

    def check(self, name: str) -> GateCheck:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict:
        return {"compatible": self.ok, "llama_cpp_c392e50_ok": self.llama_cpp_c392e50_ok,
                "llama_cpp_master_ok": self.llama_cpp_master_ok,
                "llama_cpp_commits": {"c392e50": LLAMA_CPP_C392E50, "master": LLAMA_CPP_MASTER},
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail,
                            "llama_cpp_c392e50_ok": c.llama_cpp_c392e50_ok,
                            "llama_cpp_master_ok": c.llama_cpp_master_ok} for c in self.checks]}

    def __str__(self) -> str:
        word = {True: "ok", False: "FAIL"}
        w = max(len(c.name) for c in self.checks)
        lines = [f"  {'check':{w}s}  specnb  c392e50  master   detail"]
        lines += [f"  {c.name:{w}s}  {word[c.ok]:6s}  {word[c.llama_cpp_c392e50_ok]:7s}  "
                  f"{word[c.llama_cpp_master_ok]:7s}  {c.detail}" for c in self.checks]
        lines.append(f"llama.cpp c392e50 would {'accept' if self.llama_cpp_c392e50_ok else 'refuse'}"
                     f" this pair; llama.cpp master {LLAMA_CPP_MASTER[:8]} would "
                     f"{'accept' if self.llama_cpp_master_ok else 'refuse'} it")
        f = self.first_failure           # specnb's verdict last
        lines.append("compatible" if f is None else f"incompatible: {f.name}: {f.detail}")
        return "\n".join(lines)


class IncompatibleVocabError(VocabError):
    def __init__(self, report: CompatReport):
        self.report = report
        super().__init__(f"draft vocab is not compatible with the target vocab:\n{report}")


def _vocab(m):
    return getattr(m, "vocab", m)


def _special(name, add_t, id_t, add_d, id_d) -> GateCheck:
    # master: the flags must match, and the ids too when the token is added (:84-98);
    # c392e50: flags and ids must match, added or not (:97-105)
    master = add_t == add_d and (not add_t or id_t == id_d)
    return GateCheck(name, master, f"target id {id_t} add={add_t}, draft id {id_d} add={add_d}",
                     llama_cpp_c392e50_ok=add_t == add_d and id_t == id_d,
                     llama_cpp_master_ok=master)


# the reports of the pairs already checked, by target vocab, then draft vocab (a vocab does not
# change once loaded, and comparing 150k token texts costs milliseconds each speculator)
_REPORTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def are_compatible(target, draft) -> CompatReport:
    """common_speculative_are_compatible: may `draft` draft for `target`? (Models or Vocabs.)"""
    vt, vd = _vocab(target), _vocab(draft)
    try:
        by_draft = _REPORTS.setdefault(vt, weakref.WeakKeyDictionary())
        rep = by_draft.get(vd)
        if rep is None:
            rep = by_draft[vd] = _check(vt, vd)
    except TypeError:                   # a vocab-like object without weak references or a hash
        return _check(vt, vd)
    return CompatReport(list(rep.checks))


def _check(vt, vd) -> CompatReport:
    # c392e50 compares bool(type): every type but LLAMA_VOCAB_TYPE_NONE is true
    same_type = vt.type == vd.type
    checks = [GateCheck("vocab type", same_type, f"target {vt.type}, draft {vd.type}",
                        llama_cpp_c392e50_ok=(vt.type != "none") == (vd.type != "none"),
                        llama_cpp_master_ok=same_type),
              _special("BOS", vt.add_bos, vt.bos_id, vd.add_bos, vd.bos_id),
              _special("EOS", vt.add_eos, vt.eos_id, vd.add_eos, vd.eos_id)]
    diff = abs(vt.n_vocab - vd.n_vocab)
    size_ok = diff <= SPEC_VOCAB_MAX_SIZE_DIFFERENCE
    checks.append(GateCheck(
        "vocab size", size_ok, f"target {vt.n_vocab}, draft {vd.n_vocab}, difference {diff} "
                               f"(max {SPEC_VOCAB_MAX_SIZE_DIFFERENCE})", size_ok, size_ok))
    n, s = min(vt.n_vocab, vd.n_vocab), SPEC_VOCAB_CHECK_START_TOKEN_ID
    first = None
    if vt.tokens[s:n] != vd.tokens[s:n]:    # one list comparison (in C), then where they differ
        first = next(i for i in range(s, n) if vt.tokens[i] != vd.tokens[i])
    if first is None:
        detail = f"ids {SPEC_VOCAB_CHECK_START_TOKEN_ID}..{n - 1} identical"
    else:
        detail = f"token {first} differs: target {vt.tokens[first]!r}, draft {vd.tokens[first]!r}"
    checks.append(GateCheck("token text", first is None, detail, first is None, first is None))
    return CompatReport(checks)
