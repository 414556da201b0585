"""ngram-mod against llama.cpp master 34af94cd, traces worked by hand from its code:
common_ngram_mod (common/ngram-mod.cpp) and common_speculative_impl_ngram_mod
(common/speculative.cpp:1819-1992). Each expected value names the master lines that produce it."""
import random
import warnings

import numpy as np
import pytest

from specnb import ParamError
from specnb.speculation.ngram_mod import EMPTY, HASH_MUL, NGRAM_MOD_SIZE, CommonNgramMod, NgramMod
from specnb.speculation.impl import DraftParams, SpeculativeImpl

A = HASH_MUL                       # 6364136223846793005 (ngram-mod.cpp:19)


def _mod(**kw) -> NgramMod:
    """An NgramMod with a short n_match, without its n_match < 16 warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NgramMod(**kw)


def _draft(impl, history, id_last, seq=0):
    dps = [DraftParams(False, -1, 0, 0, [], []) for _ in range(impl.n_seq)]
    dps[seq] = DraftParams(True, -1, len(history), id_last, list(history), [])
    impl.draft(dps)
    return dps[seq].result


# ---- common_ngram_mod ----------------------------------------------------------------------
def test_hash_is_masters():
    m = CommonNgramMod(1, NGRAM_MOD_SIZE)
    # n = 1: res = 0 * A + t (:18-20), then % size (:22)
    assert m.idx([5]) == 5 and m.idx([NGRAM_MOD_SIZE + 5]) == 5
    m2 = CommonNgramMod(2, NGRAM_MOD_SIZE)
    # n = 2: res = (0 * A + 1) * A + 2 = A + 2; A % 2**22 = 1408813, so the slot is 1408815
    assert A % 2**22 == 1408813 and m2.idx([1, 2]) == 1408815
    # n = 3 wraps at 2**64 (size_t): (A*A + A + 1) mod 2**64 = 13885033948157127959, and
    # 13885033948157127959 % 97 = 64 (without the wrap it would be (42*42 + 42 + 1) % 97 = 61)
    m3 = CommonNgramMod(3, 97)
    assert (A * A + A + 1) % 2**64 == 13885033948157127959 and m3.idx([1, 1, 1]) == 64
    # a token is an int32 widened to size_t: -1 counts as 2**64 - 1, and (2**64 - 1) % 7 = 1
    # (2**3 = 8 = 1 mod 7, so 2**64 = 2 * 2**63 = 2 mod 7)
    assert CommonNgramMod(1, 7).idx([-1]) == 1


def test_a_collision_overwrites_and_a_lookup_returns_the_other_ngrams_token():
    m = CommonNgramMod(2, NGRAM_MOD_SIZE)
    # (1, 0): res = A -> slot 1408813; (0, 1408813): res = 1408813 -> the same slot (:15-25)
    assert m.idx([1, 0]) == m.idx([0, 1408813]) == 1408813
    m.add([1, 0, 7])                                     # entries[i] = tokens[n] (:34); used 1 (:30-32)
    assert m.get([1, 0]) == 7 and m.get_used() == 1
    assert m.get([0, 1408813]) == 7                      # never added, yet found (:37-41)
    m.add([0, 1408813, 9])                               # overwrites; the slot was not EMPTY
    assert m.get([1, 0]) == 9 and m.get_used() == 1
    assert m.get([2, 2]) == EMPTY
    m.reset()                                            # :43-46
    assert m.get([1, 0]) == EMPTY and m.get_used() == 0
    assert m.size() == NGRAM_MOD_SIZE and m.size_bytes() == 16 * 2**20      # :56-62: 16 MiB


def test_add_range_equals_adding_one_by_one():
    rng = random.Random(3)
    for size in (1, 7, 97, NGRAM_MOD_SIZE):
        for n in (1, 2, 5):
            toks = [rng.randrange(40) for _ in range(300)]
            a, b = CommonNgramMod(n, size), CommonNgramMod(n, size)
            a.add_range(toks, 0, 100)
            a.add_range(toks, 100, len(toks) - n)
            for i in range(len(toks) - n):
                b.add(toks[i:i + n + 1])
            assert np.array_equal(a.entries, b.entries) and a.used == b.used, (size, n)
    c, d = CommonNgramMod(2, 97), CommonNgramMod(2, 97)
    c.add_range([3, -5, 4, -1, 2], 0, 3)                 # a negative token takes the loop
    for i in range(3):
        d.add([3, -5, 4, -1, 2][i:i + 3])
    assert np.array_equal(c.entries, d.entries) and c.used == d.used


# ---- the impl ----------------------------------------------------------------------------
def test_defaults_and_flag_ranges_are_masters():
    impl = NgramMod()
    # common.h:351-356 and speculative.cpp:1846
    assert (impl.n_match, impl.n_min, impl.n_max) == (24, 48, 64)
    assert impl.mod.size() == 4 * 1024 * 1024 and impl.mod.get_n() == 24
    # arg.cpp:4163-4192: n-min and n-max in [0, 1024], n-match in [1, 1024]
    for kw, flag in ((dict(n_min=-1), "--spec-ngram-mod-n-min=-1"), (dict(n_min=1025), "n-min=1025"),
                     (dict(n_max=1025), "--spec-ngram-mod-n-max=1025"), (dict(n_max=-1), "n-max=-1"),
                     (dict(n_match=0), "--spec-ngram-mod-n-match=0"),
                     (dict(n_match=1025), "n-match=1025"), (dict(n_min=True), "n-min=True")):
        with pytest.raises(ParamError, match=flag):
            NgramMod(**kw)
    _mod(n_min=0, n_max=0, n_match=1)
    NgramMod(n_min=1024, n_max=1024, n_match=1024)
    with pytest.warns(UserWarning, match="n_match=15 is too small"):         # :1856-1859
        NgramMod(n_match=15)


def test_draft_chains_lookups_and_stops_below_n_min():
    impl = _mod(n_match=2, n_min=0, n_max=64)
    impl.begin(0, [5, 6, 7, 8, 5])
    # :1875-1877: i < 5 - 2 adds [5,6]->7, [6,7]->8, [7,8]->5 (not [8,5], which has no follower)
    assert impl.i_last[0] == 3 and impl.mod.get_used() == 3                  # :1879
    # :1918-1922: window [5, id_last 6]; :1924-1936: 7, 8, 5, then [8,5] is EMPTY at i = 3 >= n_min
    assert _draft(impl, [5, 6, 7, 8, 5], 6) == [7, 8, 5]
    assert impl.n_draft_last[0] == 3                                         # :1945
    assert [(i.token, i.ngram, i.match_pos, i.source) for i in impl.info[0]] == \
        [(7, [5, 6], -1, "ngram-mod"), (8, [6, 7], -1, "ngram-mod"), (5, [7, 8], -1, "ngram-mod")]
    for n_min, n_max, want in ((3, 64, [7, 8, 5]),      # EMPTY at i = 3, not < n_min = 3: kept
                               (4, 64, []),             # :1927-1930: i = 3 < 4, the draft is dropped
                               (0, 2, [7, 8]),          # the loop ends at n_max (:1924)
                               (5, 2, [7, 8]),          # n_min > n_max: a full draft still stands
                               (0, 0, [])):             # nothing looked up
        impl = _mod(n_match=2, n_min=n_min, n_max=n_max)
        impl.begin(0, [5, 6, 7, 8, 5])
        assert _draft(impl, [5, 6, 7, 8, 5], 6) == want, (n_min, n_max)
        assert impl.n_draft_last[0] == len(want)
    impl = _mod(n_match=2, n_min=0)
    impl.begin(0, [5, 6, 7, 8, 5])
    assert _draft(impl, [5, 6, 7, 8, 5], 9) == []        # [5, 9] EMPTY at i = 0: resize(n), nothing
    assert _draft(impl, [5], 6) == [] and impl.i_last[0] == 3     # cur_len < n (:1902-1905)


def test_new_ngrams_are_added_in_chunks_of_more_than_32_tokens():
    impl = _mod(n_match=2, n_min=0)
    h = [5, 6, 7, 8, 5] + list(range(10, 41))            # 36 tokens
    impl.begin(0, h[:5])                                 # i_last = 3
    _draft(impl, h[:35], h[35])
    # :1910: i_last + 32 < cur_len is 35 < 35: nothing added
    assert impl.i_last[0] == 3 and impl.mod.get([8, 5]) == EMPTY and impl.mod.get_used() == 3
    _draft(impl, h[:36], 99)
    # 35 < 36: i = 3 .. 33 adds [8,5]->10 ... [38,39]->40 (:1911-1913), i_last = 34 (:1915)
    assert impl.i_last[0] == 34 and impl.mod.get_used() == 3 + 31
    assert impl.mod.get([8, 5]) == 10 and impl.mod.get([38, 39]) == 40
    assert impl.mod.get([39, 40]) == EMPTY               # i = 34 is not < cur_len - n = 34


def test_accept_resets_the_table_after_five_low_rounds():
    impl = _mod(n_match=2, n_min=0)
    p = [1, 2, 3, 4, 5, 1]
    impl.begin(0, p)                                     # [1,2]->3 [2,3]->4 [3,4]->5 [4,5]->1
    assert _draft(impl, p, 2) == [3, 4, 5, 1]            # then [5,1] EMPTY
    impl.accept(0, 0, True)                              # is_other: ignored (:1967-1969)
    assert impl.n_low[0] == 0
    impl.accept(0, 1, False)                             # 1/4 = 0.25 is not < 0.25 (:1976, :1988)
    assert impl.n_low[0] == 0
    for k in range(1, 5):
        _draft(impl, p, 2)
        impl.accept(0, 0, False)                         # f_acc 0 < 0.25: n_low++ (:1977)
        assert impl.n_low[0] == k and impl.mod.get_used() == 4
    impl.n_low[0] = 3
    impl.accept(0, 3, False)                             # 3/4: the streak is broken (:1988)
    assert impl.n_low[0] == 0
    for _ in range(5):
        _draft(impl, p, 2)
        impl.accept(0, 0, False)
    # the 5th: the shared table cleared, n_low = 0, this sequence's i_last = 0 (:1978-1985)
    assert impl.mod.get_used() == 0 and impl.n_low[0] == 0 and impl.i_last[0] == 0
    assert impl.n_resets == {"occupancy": 0, "low_acceptance": 1}
    # the history is not added again until it is more than 32 tokens past i_last = 0 (:1910)
    assert _draft(impl, p, 2) == [] and impl.n_draft_last[0] == 0
    impl.accept(0, 0, False)                             # no recorded draft: nothing (:1974)
    assert impl.n_low[0] == 0
    long = p * 6                                         # 36 tokens: 0 + 32 < 36, i = 0 .. 33 added
    # period 6: [1,2]->3 [2,3]->4 [3,4]->5 [4,5]->1 [5,1]->1 [1,1]->2; the window [1, 2] cycles
    # through them with no EMPTY, so the draft runs to n_max = 64 (:1924)
    assert _draft(impl, long, 2) == ([3, 4, 5, 1, 1, 2] * 11)[:64]
    assert impl.i_last[0] == 34


def test_begin_clears_a_table_over_a_quarter_full():
    impl = _mod(n_match=1, n_min=0, mod_size=8)
    impl.begin(0, [1, 2, 3])            # n = 1: the slot is the token (:18-22); [1]->2, [2]->3
    assert impl.mod.get_used() == 2 and impl.mod.get([1]) == 2     # 2/8 = 0.25 is not > 0.25
    impl.begin(0, [1, 2, 3, 4])         # [3]->4 is the third slot: 3/8 > 0.25 (:1881-1889)
    assert impl.mod.get_used() == 0 and impl.mod.get([1]) == EMPTY
    assert impl.i_last[0] == 3 and impl.n_resets["occupancy"] == 1        # set before the reset
    impl.begin(0, [])                   # shorter than n: i_last = 0, nothing added (:1867-1873)
    assert impl.i_last[0] == 0


def test_one_table_for_all_sequences_and_the_per_sequence_state():
    impl = _mod(n_seq=2, n_match=2, n_min=0)
    impl.begin(1, [5, 6, 7, 8, 5])                       # sequence 1's n-grams ...
    impl.begin(0, [9])
    assert _draft(impl, [9, 5], 6, seq=0) == [7, 8, 5]   # ... draft for sequence 0 (:1822-1823)
    impl.accept(0, 0, False)
    st = impl.get_state(0)
    assert st == {"i_last": 0, "n_draft_last": 3, "n_low": 1}
    assert impl.get_state(1) == {"i_last": 3, "n_draft_last": 0, "n_low": 0}
    impl.begin(0, [1, 2, 3, 4])                          # begin keeps n_low (:1867-1868)
    impl.n_low[0] = 4
    impl.set_state(0, st)
    assert impl.get_state(0) == st
    impl.set_state(0, None)                              # nothing saved: nothing changed
    assert impl.get_state(0) == st


class _Always(SpeculativeImpl):
    """A higher-priority impl that drafts one token when told to."""
    type = "ngram-simple"

    def __init__(self):
        super().__init__(1, 1)
        self.on = False

    def draft(self, dps):
        for dp in dps:
            if dp.drafting and self.on:
                dp.result[:] = [42]


def test_in_the_chain_is_other_leaves_ngram_mod_alone():
    from specnb.speculation.speculative import Speculative
    mod, other = _mod(n_match=2, n_min=0), _Always()
    chain = Speculative([mod, other], n_seq=1)
    assert chain.types == ["ngram-simple", "ngram-mod"]  # priority (speculative.cpp:2472-2482)
    mod.begin(0, [5, 6, 7, 8, 5])
    dps = [DraftParams(True, -1, 5, 6, [5, 6, 7, 8, 5], [])]
    chain.draft(dps)
    assert dps[0].result == [7, 8, 5] and chain.impl_last[0] is mod
    chain.accept(0, 0)                                   # credited to ngram-mod: n_low 1
    assert mod.n_low[0] == 1
    other.on = True
    dps = [DraftParams(True, -1, 5, 6, [5, 6, 7, 8, 5], [])]
    chain.draft(dps)
    assert dps[0].result == [42]
    chain.accept(0, 0)                                   # ngram-mod hears is_other = true
    assert mod.n_low[0] == 1 and mod.n_draft_last[0] == 3
