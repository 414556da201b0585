"""ngram-map-k and ngram-map-k4v against llama.cpp master 34af94cd, traces worked by hand from its
code. The bare :N are lines of common/ngram-map.cpp @34af94cd; speculative.cpp:N are lines of
common/speculative.cpp there. Notation: S = size_last_begin (the prompt given to begin()),
cur_len = len(history), last = cur_len - n - m - 1, kmli = key_map_last_idx."""
import copy

from specnb.speculation.ngram import (COMMON_NGRAM_HASH_MAP_SIZE, NgramMapK, NgramMapK4V, NgramSimple,
    ngram_map_hash, ngram_simple_draft)
from specnb.speculation.impl import DraftParams
from specnb.speculation.speculative import Speculative


def _draft(impl, history, id_last, seq=0):
    dps = [DraftParams() for _ in range(impl.n_seq)]
    dps[seq] = DraftParams(True, -1, len(history), id_last, list(history), [])
    impl.draft(dps)
    return dps[seq].result


def _keys(impl, seq=0):
    return [(k.key_idx, k.key_num, k.values[0].n_accepted) for k in impl.keys[seq]]


def _values(key):
    return [(v.value_idx, v.value_num, v.n_accepted) for v in key.values]


# ---- the search: hash index, prompt first, the gap -----------------------------------------------
def test_hash_is_masters_lcg():
    # :14-20: hash = hash * 2654435761 + token, in uint32
    assert ngram_map_hash([1, 2], 0, 2) == 2654435761 + 2
    assert ngram_map_hash([2, 0], 0, 2) == 2 * 2654435761 - 2**32           # wraps at 2^32
    assert ngram_map_hash([5, 1, 2], 1, 2) == 2654435761 + 2           # from `start`
    assert ngram_map_hash([7], 0, 1) % COMMON_NGRAM_HASH_MAP_SIZE == 7
    assert ngram_map_hash([262151], 0, 1) % COMMON_NGRAM_HASH_MAP_SIZE == 7   # 262144 + 7
    # the slot is hash mod 2^18, so the 2^32 wrap never shows in a draft; collisions do (below)


def test_prompt_first_search():
    """The prompt is searched before the generated tokens, so its occurrence wins over a later one."""
    n, m = 2, 2
    P = [9, 1, 2, 3, 4, 8, 8, 8, 8, 1]                  # S = 10, key [1, 2] at 1
    H = P + [2, 5, 5, 1, 2, 6, 6, 6, 6, 1]              # [1, 2] again at 13, generated
    impl = NgramMapK(n_seq=1, size_n=n, size_m=m)
    impl.begin(0, P)                                    # :217-218 S = 10
    # cur_len 20 >= 2n+m (:232); key = [1] + [2] (:247-252); the index is empty (:259-277);
    # S = 10 > n+m+1 = 5: j = S-n-m-1 = 5 .. 1 (:278-294) finds 1; new key, n_accepted = m
    # (:362-373), key-only: min(m, 2) = 2 tokens after 1+n (:382-390)
    assert _draft(impl, H, 2) == [3, 4]
    assert impl.info[0][0].match_pos == 1 and impl.info[0][0].ngram == [1, 2]
    assert _keys(impl) == [(1, 1, 2)]
    # ngram-simple (as did specnb's former port of 003c90352d17) takes the latest match: 13, [6, 6]
    assert ngram_simple_draft(H, 2, n, m) == ([6, 6], 13)
    # the index now holds 1 for [1, 2] (:322-330: j = 5 .. 1, the first writer keeps a slot) and
    # 13 is inserted later without replacing it (:332-338), so the next lookup finds 1 again
    # through the hash (:261-275): the draft stays the prompt's
    H2 = H + [2, 7, 7, 7, 7, 1]
    assert _draft(impl, H2, 2) == [3, 4] and _keys(impl) == [(1, 2, 2)]   # key_num 2 (:379)


def test_the_gap_over_the_prompts_last_n_m_1_tokens():
    """Starts in (S-n-m-1, S] are in neither search (:280 from S-n-m-1 down, :299 above S)."""
    n, m = 2, 2
    P = [9, 8, 8, 8, 8, 8, 1, 2, 3, 4]                  # S = 10, key [1, 2] at 6: in the gap 6..10
    H = P + [5, 5, 5, 5, 5, 5, 1]                       # cur_len 17, last = 12
    impl = NgramMapK(n_seq=1, size_n=n, size_m=m)
    impl.begin(0, P)
    # the index is empty; :280 j = 5 .. 1: no [1, 2]; :299 j = 12 .. 11 (j > S): [5, 5]: no match
    assert _draft(impl, H, 2) == [] and impl.keys[0] == []
    assert ngram_simple_draft(H, 2, n, m) == ([3, 4], 6)   # ngram-simple finds it
    # the index got 1..5 ([8, 8] first written at 4, [8, 1] at 5, :322-330) and 12..11 ([5, 5] at
    # 12, :332-338); kmli = last = 12 (:339): 6..10 is never indexed, so never found
    assert sorted(impl.maps[0].key_map.values()) == [4, 5, 12]
    assert impl.maps[0].key_map_last_idx == 12


def test_a_hash_collision_hides_a_key():
    """The index keeps the first n-gram written to a slot; a key that collides with it is not
    found there (:263-275), and the searches skip indexed positions (:280, 299): no draft."""
    for tok, want in ((262151, []), (262160, [5, 6])):   # slot 7 (collides with 7) / slot 16
        P = [9, tok, 5, 6, 7, 3, 4, 0, 0, 0, 0]          # n = 1, m = 2, S = 11
        impl = NgramMapK(n_seq=1, size_n=1, size_m=2)
        impl.begin(0, P)
        # first call: key [0]; :280 j = 7 .. 1 finds 0 at 7; the index gets 7 .. 1 in that order
        # (:322-330): slot 7 <- 4 (token 7) before j = 1 (token 262151, slot 7 taken)
        assert _draft(impl, P, 0) == [0, 0]
        # key [tok]: slot 7 -> 4, inp[4] = 7 != 262151 (:266-275); :280 S-n-m-1 = 7 > kmli = 7
        # is false, :299 j = 11 > max(S, kmli) = 11 is false: no match. Slot 16 -> 1: [5, 6]
        assert _draft(impl, P + [8, 8, 8, 8], tok) == want
        assert _draft(impl, P + [8, 8, 8, 8], 7) == [3, 4]       # 7 owns slot 7


def test_short_history_drafts_nothing():
    impl = NgramMapK(n_seq=1, size_n=2, size_m=3)
    assert _draft(impl, [9, 1, 2, 7, 7, 7], 2) == []           # cur_len 6 < 2n + m = 7 (:232)
    assert impl.maps[0].idx_last_check == 0                    # returned before :244


# ---- key statistics and the acceptance feedback --------------------------------------------------
def test_key_seen_again_and_acceptance_shortens_the_next_draft():
    n, m = 2, 3
    P = [9, 1, 2, 3, 4, 5, 8, 8, 8, 8, 8, 1]            # S = 12, key [1, 2] at 1
    impl = NgramMapK(n_seq=1, size_n=n, size_m=m)
    impl.begin(0, P)
    assert _draft(impl, P, 2) == [3, 4, 5]              # :280 j = 6 .. 1 finds 1; min(m, m) = 3
    assert _keys(impl) == [(1, 1, 3)]
    impl.accept(0, 1, False)                            # speculative.cpp:1815 -> :535
    assert _keys(impl) == [(1, 1, 1)]
    H = P + [2, 3, 6, 6, 6, 6, 1]                       # cur_len 19, last = 13
    # the hash finds 1 (< 13, :263); the same entry (:349-361): key_num 2 (:379);
    # min(m, n_accepted = 1) = 1 token (:386)
    assert _draft(impl, H, 2) == [3]
    assert _keys(impl) == [(1, 2, 1)]
    impl.accept(0, 3, True)                             # another impl drafted: speculative.cpp:1811
    assert _keys(impl) == [(1, 2, 1)]
    impl.accept(0, 0, False)                            # none accepted: the key drafts nothing
    assert _draft(impl, H + [2, 1], 2) == [] and _keys(impl) == [(1, 3, 0)]
    assert impl.maps[0].last_draft_created              # (an empty draft still counts, :395)
    # a lookup that finds nothing resets last_draft_created (:225), so accept() is a no-op
    assert _draft(impl, H + [2, 1, 2], 77) == []
    impl.accept(0, 3, False)                            # :519-521
    assert _keys(impl) == [(1, 3, 0)]
    # a second key gets its own entry (:362-373), appended
    assert _draft(impl, H + [2, 1, 2, 3, 8, 8, 8], 8) == [8, 8, 8]
    assert [k[0] for k in _keys(impl)] == [1, 6]


def test_chain_tells_map_k_is_other():
    """accept() reaches map-k with is_other when another impl drafted the round
    (speculative.cpp:2726-2731), and map-k then keeps its record (:1811-1813)."""
    n = m = 3
    h = [5, 1, 2, 3, 8, 8, 8, 8, 8, 1, 2, 3, 1, 2]         # cur_len 14, key [1, 2, 3]
    mk = NgramMapK(n_seq=1, size_n=n, size_m=m)
    chain = Speculative([mk, NgramSimple(n_seq=1, size_n=n, size_m=m)], n_seq=1)
    chain.begin(0, h)
    # ngram-simple: the latest match 9 leaves copy_max = min(3, 14 - 12) = 2 < n (ngram-map.cpp:
    # 96-102): nothing; map-k: :280 j = 7 .. 1 finds 1 -> [8, 8, 8]
    assert _draft(chain, h, 3) == [8, 8, 8] and chain.drafted_by(0) == "ngram-map-k"
    chain.accept(0, 2)                                     # map-k, is_other false: n_accepted 2
    assert _keys(mk) == [(1, 1, 2)]
    h2 = h + [3, 8, 8, 8, 8, 1, 2]
    # ngram-simple (first in priority) finds 12 with 3 tokens after it; map-k is not asked, so
    # its last_draft_created is still set from the round before
    assert _draft(chain, h2, 3) == [8, 8, 8] and chain.drafted_by(0) == "ngram-simple"
    assert mk.maps[0].last_draft_created
    chain.accept(0, 0)                                     # ngram-simple's; map-k is told is_other
    assert _keys(mk) == [(1, 1, 2)]                        # not 0
    # and the next map-k draft from that key is min(m, 2) = 2 long (:386)
    h3 = h2 + [3, 7, 7, 7, 1, 2]
    mk_only = Speculative([mk], n_seq=1)
    assert _draft(mk_only, h3, 3) == [8, 8]


# ---- ngram-map-k4v ---------------------------------------------------------------------------
def test_k4v_drafts_the_dominant_value():
    P = [9, 1, 5, 6, 1, 7, 8, 1, 5, 6, 0, 0, 0, 0]      # n = 1, m = 2, S = 14; [1] at 1, 4, 7
    impl = NgramMapK4V(n_seq=1, size_n=1, size_m=2)
    impl.begin(0, P)
    # :280 j = 10 .. 1 finds 7; key_num 1 >= min_hits 1 (:401); :412-456 from stat_idx 0 to 7:
    # 1 -> [5, 6] slot 0, 4 -> [7, 8] slot 1, 7 -> [5, 6] slot 0: counts 2, 1; max 2 at slot 0
    # (:461-469), others 1 (:471-478), 2 < 2*1 is false (:495): draft the 2 tokens after 7
    assert _draft(impl, P, 1) == [5, 6]
    key = impl.keys[0][0]
    assert _values(key) == [(2, 2, 2), (5, 1, 2), (0, 0, 2), (0, 0, 2)] and key.stat_idx == 7
    assert impl.maps[0].last_draft_value_idx == 0        # :515
    impl.accept(0, 1, False)                             # the winner's n_accepted (:530-535)
    # the hash finds 7 (:261-275); the scan starts at stat_idx = 7 itself (:412), so the value
    # at 7 is counted again: 3, 1; min(m, 1) = 1 token (:503)
    assert _draft(impl, P + [3], 1) == [5]
    assert _values(impl.keys[0][0]) == [(2, 3, 1), (5, 1, 2), (0, 0, 2), (0, 0, 2)]


def test_k4v_refuses_without_a_clear_winner():
    # [1] at 1, 4, 7, 10 -> [5, 6], [7, 8], [7, 8], [5, 6]: 2 and 2; slot 0 keeps the max (strict
    # >, :465); 2 < 2*2 (:495): no draft, so a tie never drafts
    P = [9, 1, 5, 6, 1, 7, 8, 1, 7, 8, 1, 5, 6, 0, 0, 0, 0]
    impl = NgramMapK4V(n_seq=1, size_n=1, size_m=2)
    impl.begin(0, P)
    assert _draft(impl, P, 1) == []
    assert _values(impl.keys[0][0])[:2] == [(2, 2, 2), (5, 2, 2)]
    assert impl.maps[0].last_draft_created is False
    # ngram-map-k on the same history drafts the tokens after 10 (the prompt search's first hit)
    mk = NgramMapK(n_seq=1, size_n=1, size_m=2)
    mk.begin(0, P)
    assert _draft(mk, P, 1) == [5, 6]


def test_k4v_drafts_the_tokens_after_the_match_not_the_winners():
    # [1] at 1, 4, 7, 10 -> [5, 6] x3, [7, 8] x1; 3 >= 2*1: draft. The tokens are inp[match_pos +
    # n + i] (:505-507) with match_pos = 10, so [7, 8], cut to the winner's n_accepted (:503)
    P = [9, 1, 5, 6, 1, 5, 6, 1, 5, 6, 1, 7, 8, 0, 0, 0, 0]
    impl = NgramMapK4V(n_seq=1, size_n=1, size_m=2)
    impl.begin(0, P)
    assert _draft(impl, P, 1) == [7, 8]
    assert _values(impl.keys[0][0])[:2] == [(2, 3, 2), (11, 1, 2)]
    assert impl.maps[0].last_draft_value_idx == 0


def test_k4v_min_hits():
    P = [9, 1, 5, 6, 1, 7, 8, 1, 5, 6, 0, 0, 0, 0]
    impl = NgramMapK4V(n_seq=1, size_n=1, size_m=2, min_hits=2)
    impl.begin(0, P)
    # key_num 1 < 2 (:401-406): no draft, nothing counted yet
    assert _draft(impl, P, 1) == []
    assert impl.keys[0][0].key_num == 1 and _values(impl.keys[0][0])[0] == (0, 0, 2)
    # found again (the hash: 7, :261-275): key_num 2, counted from 0: 2, 1: draft
    assert _draft(impl, P + [3], 1) == [5, 6] and impl.keys[0][0].key_num == 2
    # ngram-map-k ignores min_hits (:382-398 returns before :401)
    mk = NgramMapK(n_seq=1, size_n=1, size_m=2, min_hits=2)
    mk.begin(0, P)
    assert _draft(mk, P, 1) == [5, 6]


# ---- begin() ---------------------------------------------------------------------------------
def _begin_run():
    """P (S = 10), then the key [5, 6] found at 13 in the generated part, accepted 0."""
    P = [9, 1, 2, 3, 4, 8, 8, 8, 8, 8]
    H = P + [5, 6, 7, 5, 6, 9, 9, 9, 9, 5]               # cur_len 20
    impl = NgramMapK(n_seq=1, size_n=2, size_m=2)
    impl.begin(0, P)
    # :280 j = 5 .. 1: no [5, 6]; :299 j = 15 .. 11 finds 13 -> [9, 9]
    assert _draft(impl, H, 6) == [9, 9] and impl.info[0][0].match_pos == 13
    impl.accept(0, 0, False)
    H2 = H + [8, 8, 5]                                   # cur_len 23
    assert _draft(impl, H2, 6) == [] and _keys(impl) == [(13, 2, 0)]   # the hash: 13; min(m, 0)
    return impl, H, H2


def test_begin_with_a_shorter_prompt_forgets_the_generated_keys():
    impl, H, H2 = _begin_run()
    # 20 < idx_last_check 23: cleanup from size_last_begin 10 (:128, not > 20); keys at >= 10
    # dropped (:177-183), index entries too (:161-167), kmli = 9 (:168)
    impl.begin(0, H)
    mp = impl.maps[0]
    assert impl.keys[0] == [] and mp.key_map_last_idx == 9
    assert all(i < 10 for i in mp.key_map.values()) and (mp.size_last_begin, mp.idx_last_check) == (20, 20)
    # the hash has no [5, 6]; :280 j = 15 .. 10 (> kmli 9) finds 13 again: a new entry, n_accepted
    # m, so the draft is back
    assert _draft(impl, H, 6) == [9, 9] and _keys(impl) == [(13, 1, 2)]
    # shorter than the previous prompt too: cleanup = 8 - n - m = 4 (:129-131)
    impl.begin(0, H[:8])
    assert impl.keys[0] == [] and mp.key_map_last_idx == 3
    assert sorted(mp.key_map.values()) == [1, 2, 3]


def test_begin_with_a_longer_prompt_keeps_everything():
    impl, H, H2 = _begin_run()
    impl.begin(0, H2)                                    # 23 is not < 23 (:139, :171)
    assert _keys(impl) == [(13, 2, 0)]
    assert _draft(impl, H2, 6) == [] and _keys(impl) == [(13, 3, 0)]


def test_k4v_begin_drops_values_and_keys_left_without_one():
    # n = 1, m = 2, S = 14; [1] at 1, 4, 7 -> [5, 6] at 2 (x2), [7, 8] at 8 (x1)
    P = [9, 1, 5, 6, 1, 5, 6, 1, 7, 8, 0, 0, 0, 0]
    impl = NgramMapK4V(n_seq=1, size_n=1, size_m=2)
    impl.begin(0, P)
    assert _draft(impl, P, 1) == [7, 8]                  # :280 j = 10 .. 1 finds 7; 2 >= 2*1
    assert _values(impl.keys[0][0])[:2] == [(2, 2, 2), (8, 1, 2)]
    # 11 < idx_last_check 14 and < S 14: cleanup = 11 - n - m = 8 (:129-131); the key at 7 stays,
    # its value at 8 goes, the later slots move left (:189-203)
    impl.begin(0, P[:11])
    assert impl.keys[0][0].key_idx == 7
    assert _values(impl.keys[0][0]) == [(2, 2, 2), (0, 0, 2), (0, 0, 2), (0, 0, 2)]
    # min_hits 2: the first lookup makes the key but counts no value (:401-406); a cleanup that
    # keeps the key (7 < 8) finds no value left and drops it (:204-209) ...
    mh = NgramMapK4V(n_seq=1, size_n=1, size_m=2, min_hits=2)
    mh.begin(0, P)
    assert _draft(mh, P, 1) == [] and mh.keys[0][0].key_idx == 7
    mh.begin(0, P[:11])
    assert mh.keys[0] == []
    # ... which key-only mode never checks (:184-186)
    mk = NgramMapK(n_seq=1, size_n=1, size_m=2)
    mk.begin(0, P)
    assert _draft(mk, P, 1) == [7, 8]
    mk.begin(0, P[:11])
    assert _keys(mk) == [(7, 1, 2)]


# ---- get_state / set_state -----------------------------------------------------------------------
def test_state_round_trip_mid_run():
    """A checkpoint taken mid-run and restored replays the rest exactly, for either mode."""
    P = [9, 1, 5, 6, 1, 7, 8, 1, 5, 6, 0, 0, 0, 0]
    steps = [(P, 1, 1), (P + [1, 5], 9, 0), (P + [1, 5, 9, 4], 1, 1),
             (P + [1, 5, 9, 4, 1, 5], 0, 2), (P + [1, 5, 9, 4, 1, 5, 0, 2, 2, 2], 1, 0),
             (P + [1, 5, 9, 4, 1, 5, 0, 2, 2, 2, 1, 5], 2, 1)]

    def run(impl, part):
        out = []
        for hist, id_last, n_acc in part:
            out.append(_draft(impl, hist, id_last, seq=1))
            impl.accept(1, n_acc, False)
        return out

    for cls in (NgramMapK, NgramMapK4V):
        impl = cls(n_seq=2, size_n=1, size_m=2)
        impl.begin(1, P)
        run(impl, steps[:2])
        saved = impl.get_state(1)
        kept = copy.deepcopy(saved)
        rest = run(impl, steps[2:])
        end = impl.get_state(1)
        assert any(rest) and end != saved, cls           # the rest of the run drafts and changes it
        assert saved == kept, cls                        # the state is a copy, not a view
        impl.set_state(1, saved)                         # back to the checkpoint, same object
        assert impl.get_state(1) == saved
        assert run(impl, steps[2:]) == rest and impl.get_state(1) == end, cls
        fresh = cls(n_seq=2, size_n=1, size_m=2)         # or into a new impl
        fresh.set_state(1, saved)
        assert run(fresh, steps[2:]) == rest and fresh.get_state(1) == end, cls
        assert impl.get_state(0) == cls(n_seq=2, size_n=1, size_m=2).get_state(0)   # seq 0 untouched
