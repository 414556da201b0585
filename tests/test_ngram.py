"""The n-gram speculators against llama.cpp's lookup rules, worked by hand from its code:
common_ngram_simple_draft / common_ngram_map_draft (common/ngram-map.cpp @34af94cd; more
ngram-map-k and ngram-map-k4v traces in test_ngram_map.py) and common_ngram_cache_update /
_draft / _save / _load / _merge (common/ngram-cache.cpp @c392e50)."""
import struct

import pytest

from specnb import ParamError
from specnb.speculation.ngram import NgramMapK, NgramSimple, ngram_simple_draft
from specnb.speculation.ngram_cache import (NgramCache, _key, cache_draft, cache_load, cache_merge, cache_save,
    cache_update)
from specnb.speculation.impl import DraftParams


def _draft(impl, history, id_last, seq=0, n_max=-1):
    dps = [DraftParams(True, n_max, len(history), id_last, list(history), [])]
    impl.draft(dps)
    return dps[0].result


def test_ngram_simple_latest_earlier_occurrence():
    # pattern = the last n-1 history tokens + id_last; the latest earlier match wins
    tokens = [1, 2, 3, 4, 5, 1, 2, 3, 4, 9, 1, 2]
    assert ngram_simple_draft(tokens, 3, 3, 3) == ([4, 9, 1], 5)
    # position 0 is "no match" in llama.cpp, so a match there drafts nothing
    assert ngram_simple_draft([1, 2, 3, 7, 7, 7, 7, 7, 7, 1, 2], 3, 3, 3) == ([], 0)
    # the history must be longer than n + m + 1
    assert ngram_simple_draft([1, 2, 3, 1, 2, 3, 1], 2, 3, 3) == ([], 0)
    # fewer tokens to copy than n (m < n, say): never a draft
    assert ngram_simple_draft(tokens, 3, 3, 2) == ([], 0)
    # fewer than n tokens to copy after the latest match: no draft (copy_max < size_n), even
    # though an older match (at 1) has plenty after it
    assert ngram_simple_draft([5, 1, 2, 3, 8, 8, 8, 8, 8, 1, 2, 3, 1, 2], 3, 3, 8) == ([], 0)
    # copy_max = min(m, tokens after the match)
    assert ngram_simple_draft([9, 1, 2, 7, 7, 7, 7, 1, 2, 5, 1], 2, 2, 3) == ([5, 1], 7)


def test_ngram_map_k_needs_m_whole_tokens_after_the_match():
    """ngram-map-k searches from cur_len - n - m - 1 (ngram-map.cpp:299 @34af94cd; no begin(), so
    S = 0 and the whole history is the generated part), so its match has m tokens after it."""
    inp = [9, 1, 2, 7, 7, 7, 7, 1, 2, 5, 1]
    assert ngram_simple_draft(inp, 2, 2, 3)[0] == [5, 1]         # the latest match, 2 tokens left
    m = NgramMapK(n_seq=1, size_n=2, size_m=3)
    assert _draft(m, inp, 2) == [7, 7, 7]                        # the earlier match, m tokens
    assert m.info[0][0].match_pos == 1 and m.info[0][0].ngram == [1, 2]
    assert [(k.key_idx, k.key_num) for k in m.keys[0]] == [(1, 1)]
    assert _draft(m, inp, 2) == [7, 7, 7] and m.keys[0][0].key_num == 2   # hits counted (:379)
    assert _draft(NgramMapK(n_seq=1, size_n=2, size_m=3), inp[:6], 2) == []   # cur_len < 2n + m


def test_ngram_impls_validate_and_cap():
    with pytest.raises(ParamError, match="spec_ngram_size_n"):
        NgramSimple(size_n=0)
    impl = NgramSimple(n_seq=1, size_n=2, size_m=8, n_max=3)     # --draft-max caps the draft
    assert impl.n_max == 3
    hist = [5] + [1, 2, 3, 4, 5, 6, 7, 8] * 3 + [1]
    assert _draft(impl, hist, 2) == [3, 4, 5]


# ---- ngram-cache -------------------------------------------------------------------------------
def test_cache_update_counts_the_ngrams_ending_in_new_tokens():
    c = {}
    cache_update(c, 1, 2, [1, 2, 1, 2, 1], 5)
    assert c[_key([1])] == {2: 2} and c[_key([2])] == {1: 2}
    assert c[_key([1, 2])] == {1: 2} and c[_key([2, 1])] == {2: 1}
    # appending and updating with nnew = the new tokens equals one update over everything
    inp = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
    once, twice = {}, {}
    cache_update(once, 1, 4, inp, len(inp))
    cache_update(twice, 1, 4, inp[:7], 7)
    cache_update(twice, 1, 4, inp, len(inp) - 7)
    assert once == twice


def test_cache_draft_follows_the_context_and_validates_with_static():
    inp = [1, 2, 3, 1, 2, 3, 1, 2, 3]
    ctx = {}
    cache_update(ctx, 1, 4, inp, len(inp))
    draft, used = [3], []
    cache_draft(inp, draft, 4, ctx, {}, {}, used=used)
    assert draft == [3, 1, 2, 3, 1]
    assert used[0] == ([3, 1, 2, 3], "context")                  # the longest n-gram first
    # a tie in the context (4 2 -> 5 once, -> 6 once; 50% passes for a 2-gram) is broken by the
    # static cache's counts (x 100), and without one by libstdc++'s map order: 5 went into
    # bucket 5, then 6 into empty bucket 6 at the list's head, so 6 is walked first
    ctx = {_key([4, 2]): {5: 1, 6: 1}}
    stat = {_key([4, 2]): {6: 3}}
    draft, used = [2], []
    cache_draft([4, 2], draft, 1, ctx, {}, stat, used=used)
    assert draft == [2, 6] and used == [([4, 2], "context")]
    draft = [2]
    cache_draft([4, 2], draft, 1, ctx, {}, {})
    assert draft == [2, 6]
    # a 1-gram needs 66%: the same tie there drafts nothing, unless the static cache knows
    draft = [2]
    cache_draft([4, 2], draft, 1, {_key([2]): {5: 1, 6: 1}}, {}, {})
    assert draft == [2]
    draft, used = [2], []
    cache_draft([4, 2], draft, 1, {_key([2]): {5: 1, 6: 1}}, {}, stat, used=used)
    assert draft == [2, 6] and used == [([4, 2], "static")]
    # too few samples (lax: 2 for a 1-gram): nothing drafted
    draft = [2]
    cache_draft([4, 2], draft, 1, {_key([2]): {5: 1}}, {}, {})
    assert draft == [2]


def test_cache_files_in_llama_cpp_layout(tmp_path):
    c = {_key([7, 8]): {9: 3, 4: 1}}
    p = tmp_path / "c.bin"
    cache_save(c, p)
    raw = p.read_bytes()
    assert raw == struct.pack("<4ii", 7, 8, -1, -1, 2) + struct.pack("<iiii", 9, 3, 4, 1)
    assert cache_load(p, n_vocab=10) == c
    cache_merge(c, {_key([7, 8]): {9: 1, 5: 2}, _key([1]): {2: 1}})
    assert c == {_key([7, 8]): {9: 4, 4: 1, 5: 2}, _key([1]): {2: 1}}
    p.write_bytes(raw[:-4])
    with pytest.raises(ParamError, match="not an n-gram cache"):
        cache_load(p, n_vocab=10)
    with pytest.raises(ParamError, match="cannot read"):
        cache_load(tmp_path / "missing.bin", n_vocab=10)


def test_ngram_cache_dynamic_file_carries_over(tmp_path):
    """examples/lookup: the context cache is merged into the dynamic one and saved; a later
    generation drafts from it before its own context knows anything."""
    dyn = tmp_path / "dyn.bin"
    a = NgramCache(n_seq=1, n_max=4, dynamic_path=dyn, n_vocab=100)
    a.begin(0, [])
    text = [11, 12, 13, 14, 15, 16] * 4
    assert _draft(a, text[:-1], text[-1]) != []
    a.save_dynamic()
    b = NgramCache(n_seq=1, n_max=4, dynamic_path=dyn, n_vocab=100)
    b.begin(0, [])
    got = _draft(b, [40, 41, 12, 13], 14)
    assert got == [15, 16, 11, 12] and b.info[0][0].cache == "dynamic"
    assert _draft(NgramCache(n_seq=1, n_max=4), [40, 41, 12, 13], 14) == []


def test_ngram_drafts_are_not_cut_to_draft_max_as_in_master():
    """Master: --draft-max caps the draft model only; ngram-simple and ngram-map-k draft up to
    their m-gram size, ngram-cache 8; the round's budget (dp.n_max) still cuts every draft."""
    from specnb.speculation.params import NGRAM_CACHE_N_DRAFT, SpecParams
    from specnb.speculation.speculative import build_speculative
    sp = SpecParams(types="ngram-simple,ngram-map-k,ngram-cache", n_max=3, ngram_size_n=2,
                    ngram_size_m=8)
    spec = build_speculative(sp, type("M", (), {"n_vocab": 100})(), None)
    assert {i.type: i.n_max for i in spec.impls} == {"ngram-simple": 8, "ngram-map-k": 8,
                                                      "ngram-cache": NGRAM_CACHE_N_DRAFT}
    # a copying history: ngram-simple drafts the whole m-gram with draft-max 3 ...
    hist = [5] + [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3 + [1]
    dps = [DraftParams(True, -1, len(hist), 2, list(hist), [])]
    spec.draft(dps)
    assert dps[0].result == [3, 4, 5, 6, 7, 8, 9, 10]
    # ... and the round's budget cuts it (speculative-simple.cpp's n_draft_max)
    dps = [DraftParams(True, 5, len(hist), 2, list(hist), [])]
    spec.draft(dps)
    assert dps[0].result == [3, 4, 5, 6, 7]
