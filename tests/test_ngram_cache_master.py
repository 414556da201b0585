"""ngram-cache as llama.cpp master 34af94cd has it: the impl's update from the new tokens only
(common/speculative.cpp:2065-2108) and ties broken in libstdc++'s std::unordered_map order
(common/ngram-cache.cpp:77-86, 118-132). The orders below were worked by hand from libstdc++'s
rules (see specnb/speculation/ngram_cache.py, "libstdc++'s std::unordered_map iteration order"), and each
was checked against a program built with g++ 12.2."""
import struct

from specnb.speculation.ngram_cache import (LIBSTDCXX_BUCKETS, NgramCache, _key, cache_draft, cache_merge,
    cache_save, cache_update, libstdcxx_order, ngram_hash)
from specnb.speculation.impl import DraftParams

FIB = 11400714819323198485          # ngram-cache.h:43


def _draft(impl, history, id_last):
    dps = [DraftParams(True, -1, len(history), id_last, list(history), [])]
    impl.draft(dps)
    return dps[0].result


# ---- libstdc++'s order ----------------------------------------------------------------------
def test_iteration_order_of_libstdcxx_unordered_map():
    # the first insertion makes 13 buckets; a key whose bucket is empty goes to the list's head
    assert libstdcxx_order([9, 4]) == [4, 9]
    assert libstdcxx_order([5, 4, 9]) == [9, 4, 5]
    # 14 % 13 = 1: 14 goes in front of bucket 1's first node, 1
    assert libstdcxx_order([1, 14]) == [14, 1] and libstdcxx_order([14, 1]) == [1, 14]
    assert libstdcxx_order([1, 14, 2]) == [2, 14, 1]               # 2: empty bucket, the head
    # 0..12: each at the head, [12, ..., 0]. The 14th key (13) first grows the table to 29
    # buckets: the walk 12, 11, ..., 0 puts each at the head (all buckets empty): [0, ..., 12];
    # then 13 goes to the head
    assert LIBSTDCXX_BUCKETS[:3] == (13, 29, 59)
    assert libstdcxx_order(list(range(13))) == list(range(12, -1, -1))
    assert libstdcxx_order(list(range(14))) == [13] + list(range(13))
    # 30 after the rehash: 30 % 29 = 1, so it goes in front of 1 (bucket 1's first node)
    assert libstdcxx_order(list(range(13)) + [30]) == [0, 30] + list(range(1, 13))
    # a rehash that puts two keys into one bucket: 1, 30, 2, 3, 5..13 fill 13 distinct buckets
    # (30 % 13 = 4): [13, 12, ..., 5, 3, 2, 30, 1]. Inserting 0 first rehashes to 29: the walk
    # makes buckets 13, 12, ..., 5, 3, 2 heads in turn, then 30 (bucket 1, empty) the head, then
    # 1 goes in front of 30 in bucket 1: [1, 30, 2, 3, 5, ..., 13]. Then 0 is the new head
    keys = [1, 30, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert libstdcxx_order(keys) == [13, 12, 11, 10, 9, 8, 7, 6, 5, 3, 2, 30, 1]
    assert libstdcxx_order(keys + [0]) == [0, 1, 30, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13]


def test_ngram_hash_is_masters():
    # common_ngram_hash_function (ngram-cache.h:47-55): XOR of t * FIB mod 2**64 over 4 slots.
    # A 2-gram's two -1 pads cancel; a 1-gram keeps one pad's term ((2**64 - 1) * FIB)
    assert ngram_hash(_key([3, 5])) == ((3 * FIB) % 2**64) ^ ((5 * FIB) % 2**64)
    assert ngram_hash(_key([3])) == ((3 * FIB) % 2**64) ^ (((2**64 - 1) * FIB) % 2**64)


def test_a_context_cache_walks_as_masters():
    """The n-grams of [1, 2, 1, 3, 1, 2, 1] and their parts in the order master's own map walks
    them (master's ngram-cache.cpp built with g++ 12.2 printed this list). The 14th n-gram grows
    the map to 29 buckets."""
    c = {}
    cache_update(c, 1, 4, [1, 2, 1, 3, 1, 2, 1], 7)
    walked = [(g, [(t, c[g][t]) for t in libstdcxx_order(list(c[g]))])
              for g in libstdcxx_order(list(c), ngram_hash)]
    assert walked == [
        ((1, -1, -1, -1), [(3, 1), (2, 2)]), ((1, 3, 1, 2), [(1, 1)]), ((1, 2, 1, 3), [(1, 1)]),
        ((2, 1, 3, 1), [(2, 1)]), ((2, -1, -1, -1), [(1, 2)]), ((1, 2, 1, -1), [(3, 1)]),
        ((1, 2, -1, -1), [(1, 2)]), ((2, 1, -1, -1), [(3, 1)]), ((3, -1, -1, -1), [(1, 1)]),
        ((1, 3, 1, -1), [(2, 1)]), ((1, 3, -1, -1), [(1, 1)]), ((3, 1, -1, -1), [(2, 1)]),
        ((2, 1, 3, -1), [(1, 1)]), ((3, 1, 2, -1), [(1, 1)])]


# ---- ties in try_draft ----------------------------------------------------------------------
def test_ties_follow_the_map_order_and_can_decide_whether_a_draft_passes():
    # context (3,) -> {1: 100, 14: 1}; the static cache knows 14 after (7, 3) once, so 14's
    # weight is 100 x 1 (:121-124): both products are 100, a tie (:126)
    stat = {_key([7, 3]): {14: 1}}
    # inserted 1 then 14: the map walks 14 first (same bucket, :126 keeps the first), so
    # max_count_primary = 1 of sum 101 fails the 1-gram's 66% (:137); the static cache's own
    # try_draft needs 2 samples (:88): no draft
    ctx = {_key([3]): {1: 100, 14: 1}}
    draft = [3]
    cache_draft([7, 3], draft, 1, ctx, {}, stat)
    assert draft == [3]
    # inserted 14 then 1: the map walks 1 first: 100 of 101 passes, 1 is drafted
    ctx = {_key([3]): {14: 1, 1: 100}}
    draft, used = [3], []
    cache_draft([7, 3], draft, 1, ctx, {}, stat, used=used)
    assert draft == [3, 1] and used == [([3], "context")]
    # the dynamic cache, the same tie under its strict thresholds (4 samples, 75%: :62-63)
    draft = [3]
    cache_draft([7, 3], draft, 1, {}, {_key([3]): {1: 100, 14: 1}}, stat)
    assert draft == [3]
    draft, used = [3], []
    cache_draft([7, 3], draft, 1, {}, {_key([3]): {14: 1, 1: 100}}, stat, used=used)
    assert draft == [3, 1] and used == [([3], "dynamic")]
    # the static cache's try_draft (:77-86): (7, 3) -> {1: 2, 14: 2} in that order walks 14
    # first: 2 of 4 passes its 50%, 14 is drafted
    draft, used = [3], []
    cache_draft([7, 3], draft, 1, {}, {}, {_key([7, 3]): {1: 2, 14: 2}}, used=used)
    assert draft == [3, 14] and used == [([7, 3], "static")]
    draft = [3]
    cache_draft([7, 3], draft, 1, {}, {}, {_key([7, 3]): {14: 2, 1: 2}})
    assert draft == [3, 1]


def test_an_ngram_reaching_before_the_history_matches_nothing():
    # inp [0, 1]: the 3- and 4-grams would start at inp[-1], where master's get_token reads
    # outside the draft vector (size_t i wraps, undefined behaviour; glibc's heap often has a 0
    # there). Here they match nothing: not (1, 0, 1), which a wrapped Python index would read,
    # nor (0, 0, 1)
    dyn = {_key([1, 0, 1]): {5: 9}, _key([0, 0, 1]): {5: 9}}
    draft = [1]
    cache_draft([0, 1], draft, 1, {}, dyn, {})
    assert draft == [1]
    draft = [1]
    cache_draft([1, 0, 1], draft, 1, {}, dyn, {})      # inp has 3 tokens: (1, 0, 1) is real
    assert draft == [1, 5]


# ---- merge and save ---------------------------------------------------------------------
def test_merge_inserts_in_the_added_maps_order():
    # common_ngram_cache_merge (:260-285) walks add's part (9, 4 -> the map walks 4, 9) and
    # emplaces each new token, so target's part is inserted 5, 4, 9 and walks 9, 4, 5
    target = {_key([1]): {5: 1}}
    cache_merge(target, {_key([1]): {9: 1, 4: 1}, _key([2]): {7: 1, 20: 2}})
    assert list(target[_key([1])].items()) == [(5, 1), (4, 1), (9, 1)]
    assert libstdcxx_order(list(target[_key([1])])) == [9, 4, 5]
    assert list(target[_key([2])].items()) == [(7, 1), (20, 2)]  # a copy keeps its order (:265-268)


def test_save_in_masters_order(tmp_path):
    c = {_key([7, 8]): {9: 3, 4: 1}}
    p = tmp_path / "c.bin"
    cache_save(c, p)                                     # the dicts' order (load then save round-trips)
    assert p.read_bytes() == struct.pack("<5i", 7, 8, -1, -1, 2) + struct.pack("<4i", 9, 3, 4, 1)
    cache_save(c, p, master_order=True)                  # master's walk (:202, :211): 4 before 9
    assert p.read_bytes() == struct.pack("<5i", 7, 8, -1, -1, 2) + struct.pack("<4i", 4, 1, 9, 3)
    # the entries in the walk of test_a_context_cache_walks_as_masters
    c = {}
    cache_update(c, 1, 4, [1, 2, 1, 3, 1, 2, 1], 7)
    cache_save(c, p, master_order=True)
    raw = p.read_bytes()
    assert raw[:20 + 16] == struct.pack("<5i", 1, -1, -1, -1, 2) + struct.pack("<4i", 3, 1, 2, 2)
    assert raw[36:36 + 28] == struct.pack("<5i", 1, 3, 1, 2, 1) + struct.pack("<2i", 1, 1)


# ---- the impl: the update from the new tokens only -----------------------------------------
def test_the_context_cache_is_updated_from_the_new_tokens_only():
    impl = NgramCache(n_seq=1, n_max=8)
    # round 1: cache_size 0 < 3 + 1; tokens_new = [1, 2, 3] + [id_last 4] (:2073-2079), updated
    # with nnew = 4 (:2082-2085): 1-grams at i = 1..3, 2-grams at 2..3, the 3-gram at 3, no 4-gram
    # (:21-22 in ngram-cache.cpp: i_start = max(4 - 4, size))
    assert _draft(impl, [1, 2, 3], 4) == []
    assert impl.context[0] == {_key([1]): {2: 1}, _key([2]): {3: 1}, _key([3]): {4: 1},
                               _key([1, 2]): {3: 1}, _key([2, 3]): {4: 1}, _key([1, 2, 3]): {4: 1}}
    assert impl.cache_size[0] == 4                                   # :2086
    # round 2: tokens_new = prompt[4:] + [3] = [1, 2, 3]: 4 -> 1 and every n-gram across the old
    # boundary (3 4 -> 1, 2 3 4 -> 1, ...) is never counted
    got = _draft(impl, [1, 2, 3, 4, 1, 2], 3)
    assert impl.context[0][_key([1])] == {2: 2} and impl.context[0][_key([1, 2])] == {3: 2}
    assert _key([4]) not in impl.context[0] and _key([3, 4]) not in impl.context[0]
    # inp [1 2 3 4 1 2 3]: (4 1 2 3) unknown; (1 2 3) -> {4: 1} passes the 3-gram's lax 1 / 50%
    # (ngram-cache.cpp:60-61): 4. Next: (4), (3 4), (2 3 4), (1 2 3 4) are all unknown: stop.
    # (examples/lookup's update over the whole history would have 4 -> 1 and go on)
    assert got == [4]
    assert impl.cache_size[0] == 7
    # the same prompt again: 7 < 6 + 1 is false, no update (:2073), whatever id_last is
    before = {k: dict(v) for k, v in impl.context[0].items()}
    _draft(impl, [1, 2, 3, 4, 1, 2], 9)
    assert impl.context[0] == before
    # begin is a no-op (:2061-2063): the cache and cache_size stay
    impl.begin(0, [5, 5])
    assert impl.context[0] == before and impl.cache_size[0] == 7
