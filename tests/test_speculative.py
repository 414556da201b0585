"""The speculator chain (speculative.py; the vocab gate DraftSimple checks is tested in
test_gate.py): types in llama.cpp's priority order, the drafting flag and fall-through,
impl_last, the statistics
as common_speculative_print_stats prints them."""
import re

import pytest

from specnb import ParamError, UnsupportedError
from specnb.run.context import Context
from specnb.speculation.impl import DraftParams, SpeculativeImpl
from specnb.speculation.draft_simple import DraftSimple
from specnb.speculation.ngram_cache import NgramCache
from specnb.speculation.ngram import NgramMapK, NgramSimple
from specnb.speculation.params import SpecParams, parse_spec_types
from specnb.speculation.speculative import Speculative, build_speculative


# ---- the chain ------------------------------------------------------------------------------
class Fixed(SpeculativeImpl):
    """A speculator that drafts a fixed list for the sequences it is given (for chain tests)."""

    def __init__(self, type_, drafts: dict, n_seq=2):
        super().__init__(n_seq, 8)
        self.type, self.drafts, self.accepted = type_, drafts, []

    def draft(self, dps):
        for s, dp in enumerate(dps):
            if dp.drafting:
                dp.result[:] = list(self.drafts.get(s, []))

    def accept(self, seq, n, is_other):
        self.accepted.append((seq, n, is_other))


def test_spec_types_parsed_and_ordered_by_priority():
    assert parse_spec_types(None) is None
    assert parse_spec_types("draft-simple, ngram-simple") == ("draft-simple", "ngram-simple")
    assert parse_spec_types(["ngram-cache", "none", "bogus"]) == ("none",)   # none ends the list
    with pytest.raises(ParamError, match="unknown speculative type 'ngram-fancy'"):
        parse_spec_types("ngram-fancy")
    with pytest.raises(UnsupportedError, match="draft-mtp"):
        parse_spec_types("draft-mtp")
    # llama.cpp's fixed order, whatever order was typed (common_speculative_init)
    sp = SpecParams(types="draft-simple,ngram-cache,ngram-map-k,ngram-simple")
    assert sp.resolved_types(True) == ("ngram-simple", "ngram-map-k", "ngram-cache", "draft-simple")
    # -md without --spec-type: draft-simple; nothing at all: no speculation
    assert SpecParams().resolved_types(True) == ("draft-simple",)
    assert SpecParams().resolved_types(False) == ()
    assert SpecParams(types="none").resolved_types(True) == ()


def test_build_speculative_makes_each_impl(pair):
    tgt, dft = pair
    sp = SpecParams(types="draft-simple,ngram-cache,ngram-simple,ngram-map-k", n_max=5,
                    ngram_size_n=3, ngram_size_m=4).validate()
    chain = build_speculative(sp, tgt, Context(dft, n_ctx=32), n_seq=1)
    assert [type(i) for i in chain.impls] == [NgramSimple, NgramMapK, NgramCache, DraftSimple]
    assert [i.n_max for i in chain.impls] == [4, 4, 8, 5]     # size_m; ngram-cache 8; draft-max
    assert chain.impls[0].size_n == 3
    with pytest.raises(ParamError, match="draft model"):
        build_speculative(SpecParams(types="draft-simple"), tgt, None)


def test_first_impl_with_a_draft_wins_and_accept_is_routed():
    """common_speculative_draft / _accept: the drafting flag falls through empty results, a
    draft beyond dp.n_max is cut, impl_last credits the drafter and is kept between rounds."""
    a = Fixed("ngram-simple", {0: [1, 2, 3, 4, 5]})
    b = Fixed("draft-simple", {0: [9], 1: [7, 8]})
    chain = Speculative([b, a], n_seq=2)              # given out of order
    assert chain.types == ["ngram-simple", "draft-simple"]
    dps = [DraftParams(True, 3, 5, 0, [], []), DraftParams(True, -1, 5, 0, [], [])]
    chain.draft(dps)
    assert dps[0].result == [1, 2, 3] and dps[1].result == [7, 8]     # cut to n_max = 3
    assert not any(dp.drafting for dp in dps)
    assert chain.drafted_by(0) == "ngram-simple" and chain.drafted_by(1) == "draft-simple"
    assert (a.n_call_draft, b.n_call_draft) == (1, 1)
    assert (a.n_gen_drafts, a.n_gen_tokens, b.n_gen_drafts, b.n_gen_tokens) == (1, 3, 1, 2)
    chain.accept(0, 2)
    assert a.accepted == [(0, 2, False)] and b.accepted == [(0, 2, True)]
    assert (a.n_call_accept, a.n_acc_tokens, a.n_acc_tokens_per_pos) == (1, 2, [1, 1])
    # the next round drafts nothing for seq 0: accept(0) still goes to the last drafter
    a.drafts, b.drafts = {}, {}
    dps = [DraftParams(True, 3, 8, 0, [], []), DraftParams()]
    chain.draft(dps)
    assert dps[0].result == [] and chain.drafted_by(0) == "" and chain.impl_last[0] is a
    chain.accept(0, 0)
    assert a.n_call_accept == 2 and a.n_acc_drafts == 1
    # nobody drafting: no impl is called
    chain.draft([DraftParams(), DraftParams()])
    assert a.n_call_draft == 2
    chain.accept(1, 1)
    assert (b.n_call_accept, b.n_acc_tokens) == (1, 1) and a.accepted[-1] == (1, 1, True)
    # accept on a sequence that never had a draft is a no-op
    c = Fixed("ngram-map-k", {}, n_seq=1)
    Speculative([c], n_seq=1).accept(0, 0)
    assert c.n_call_accept == 0 and c.accepted == []


def test_print_stats_layout():
    """common_speculative_print_stats's printf layout; mean and rates only after an accept call."""
    a = Fixed("ngram-simple", {0: [1, 2, 3]}, n_seq=1)
    chain = Speculative([a], n_seq=1)
    assert "#mean acc len" not in chain.print_stats()
    chain.draft([DraftParams(True, -1, 3, 0, [], [])])
    chain.record(0, 2)
    chain.accept(0, 2)
    line, specnb_line = chain.print_stats().splitlines()
    # the format string of common_speculative_print_stats (common/speculative.cpp:2793 @34af94cd)
    head = ("statistics %16s: #calls(b,g,a) = %4zu %6zu %6zu, #gen drafts = %6zu, #acc drafts = %5zu, "
            "#gen tokens = %6zu, #acc tokens = %5zu").replace("zu", "d") % ("ngram-simple", 0, 1, 1, 1, 1, 3, 2)
    stats = ", #mean acc len = 3.00, #acc rate/pos = (1.000, 1.000)"
    assert line.startswith(head + stats + ", dur(b,g,a) = "), line
    assert re.fullmatch(r"\d+\.\d{3}, \d+\.\d{3}, \d+\.\d{3} ms", line[len(head + stats) + 15:])
    assert specnb_line.startswith("  specnb, per draft: 1 drafts, 2 draft tokens accepted")


def test_chain_state_round_trip():
    """common_speculative_get_state / set_state, per impl that has a state."""
    m = NgramMapK(n_seq=1, size_n=1, size_m=2)
    chain = Speculative([m, NgramSimple(n_seq=1, size_n=8, size_m=2)], n_seq=1)   # it finds nothing
    hist = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    dps = [DraftParams(True, -1, len(hist), 7, hist, [])]
    chain.draft(dps)
    saved = chain.get_state(0)
    # ngram-simple keeps no state at master 34af94cd (common/speculative.cpp:1720-1763)
    assert set(saved) == {"ngram-map-k"} and saved["ngram-map-k"]["keys"]
    m.begin(0, [])
    assert m.keys[0] == []
    chain.set_state(0, saved)
    assert [(k.key_idx, k.key_num) for k in m.keys[0]] == [tuple(k[:2]) for k in saved["ngram-map-k"]["keys"]]
