"""Self-speculation from the token history: ngram-simple, ngram-map-k and ngram-map-k4v.

All three look the current n-gram (the last size_n - 1 history tokens + id_last) up in the
sequence's own history (prompt + accepted tokens) and draft the tokens that followed an earlier
occurrence. No draft model, no draft context: a draft costs a lookup. They shine where the output
copies the input (rewriting code, quoting, summaries with repeated phrases).

Ported from llama.cpp master 34af94cd (the bare :N below are lines of common/ngram-map.cpp there):

  - ngram-simple, common_ngram_simple_draft (:49-112): search backwards from cur_len - size_n - 1
    for the latest match (position 0 means "no match"); draft copy_max = min(size_m, cur_len -
    (match + size_n)) following tokens, none if copy_max < size_n, none unless cur_len >
    size_n + size_m + 1. Its impl (common/speculative.cpp:1720-1763) keeps no state: begin() and
    accept() do nothing. There is no check_rate any more (003c90352d17 had one).
  - ngram-map-k and ngram-map-k4v, one common_ngram_map per sequence (ngram-map.h:61-95), driven
    by common_speculative_impl_ngram_map_k (common/speculative.cpp:1765-1817): begin() calls
    common_ngram_map_begin, draft() common_ngram_map_draft, accept() common_ngram_map_accept
    unless another impl drafted (is_other).
  - common_ngram_map_draft (:221-516). It needs cur_len >= 2n + m. The key is looked up, in
    this order: in a hash index of the n-grams already seen (:259-277); then in the prompt, from
    size_last_begin - n - m - 1 down (:278-294); then in the generated tokens, from cur_len - n
    - m - 1 down to size_last_begin (:295-312). Both searches stop at the index's high-water mark
    key_map_last_idx, and the new n-grams go into the index in the same order, the first writer
    of a hash slot keeping it (:318-340). So a key found in the prompt keeps being drafted from
    there, and the n-grams that start in the prompt's last n + m + 1 positions are never found
    (the gap between the two searches).
  - A key gets a statistics entry when first matched (:346-373); key_num counts the lookups that
    found it (:378-380). Key-only mode (ngram-map-k, :382-398) drafts min(m, n_accepted) tokens
    after the match, n_accepted being what the target accepted of this key's last draft (m
    before any). Values mode (ngram-map-k4v, :401-515): no draft while key_num < min_hits; the
    m-grams after the key's occurrences (scanned from stat_idx to the match) are counted in up to
    COMMON_NGRAM_MAX_VALUES = 4 slots; the most frequent must be at least twice all the others
    together, else no draft. The draft is then the m tokens after the match (not the winning
    value's own tokens: :505-507 read inp[match_pos + n + i]), cut to the winner's n_accepted.
  - common_ngram_map_accept (:518-536) records n_accepted on the key (and value) last drafted.
  - common_ngram_map_begin (:121-219): when the new prompt is shorter than the history the map
    last saw, keys, values and index entries at or beyond the previous prompt's length (or, if
    the new prompt is shorter than that too, beyond its length - n - m) are dropped.

Flags (common/common.h:358-362, 376-378; common/arg.cpp:4194-4285): each type has its own
--spec-ngram-<type>-size-n 12, -size-m 48, -min-hits 1; only ngram-map-k4v reads min_hits.
specnb keeps the hash index as a dict (the same slots, holes left out) and computes master's
hash exactly, because a collision changes drafts (see `ngram_map_hash`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .impl import DraftParams, SpeculativeImpl
from .limits import NGRAM_SIZE_LIMIT

COMMON_NGRAM_MAX_VALUES = 4              # ngram-map.h:39
COMMON_NGRAM_HASH_MAP_SIZE = 262144      # ngram-map.h:42
COMMON_NGRAM_MAX_VALUE_COUNT = 16380     # ngram-map.cpp:119
LCG_FACTOR = 2654435761                  # ngram-map.cpp:11
UINT32_MAX = 0xFFFFFFFF


@dataclass
class NgramTokenInfo:
    """One token an n-gram lookup drafted: the n-gram it matched and where."""
    token: int
    ngram: list               # the matched n-gram's tokens (the pattern looked up)
    match_pos: int            # where in the history the earlier occurrence starts (-1: a cache)
    source: str = "ngram-simple"
    cache: str = ""           # ngram-cache: which cache proposed it ("context", "dynamic", "static")


# ---- ngram-simple ----------------------------------------------------------------------------
def ngram_simple_draft(tokens: list, sampled: int, size_n: int, size_m: int) -> tuple[list, int]:
    """common_ngram_simple_draft (ngram-map.cpp:49-112): (draft, match_pos or 0)."""
    cur_len = len(tokens)
    if cur_len <= size_n + size_m + 1:                            # :64-67
        return [], 0
    pattern = list(tokens[cur_len - size_n + 1:]) + [sampled]     # :70-75
    match_pos = 0                                                 # :77 position 0 == no match
    for j in range(cur_len - size_n - 1, 0, -1):                  # :79-91 latest first
        if tokens[j:j + size_n] == pattern:
            match_pos = j
            break
    if match_pos == 0:                                            # :92-94
        return [], 0
    copy_max = min(size_m, cur_len - (match_pos + size_n))        # :96-99
    if copy_max < size_n:                                         # :100-102
        return [], 0
    return list(tokens[match_pos + size_n:match_pos + size_n + copy_max]), match_pos   # :107-111


# ---- ngram-map (common_ngram_map) --------------------------------------------------------------
def ngram_map_hash(tokens, start: int, length: int) -> int:
    """common_ngram_map_hash (ngram-map.cpp:13-20): an LCG over the n-gram, in uint32.

    Exact because collisions are visible in the drafts: the index keeps the first n-gram written
    to a slot (:326-327, 335-336), a key whose slot holds another n-gram is not found through it
    (:266-275), and the linear searches never revisit indexed positions (:280, 299). So a key
    that collides with an earlier n-gram drafts nothing where the history has it."""
    h = 0
    for i in range(length):
        h = (h * LCG_FACTOR + int(tokens[start + i])) & UINT32_MAX
    return h


@dataclass
class NgramMapValue:
    """common_ngram_map_value (ngram-map.h:45-49): one m-gram seen after a key."""
    value_idx: int = 0        # where the m-gram starts in the history (0: unused slot)
    value_num: int = 0        # how often it followed the key (counted as :412-456 count)
    n_accepted: int = -1      # tokens accepted at its last draft (m when created)


@dataclass
class NgramMapKey:
    """common_ngram_map_key (ngram-map.h:52-58): a key n-gram's statistics."""
    key_idx: int              # where the key was first matched in the history
    key_num: int = 0          # lookups that found it
    stat_idx: int = 0         # the values are counted up to this position
    values: list = field(default_factory=lambda: [NgramMapValue() for _ in range(COMMON_NGRAM_MAX_VALUES)])


@dataclass
class NgramMap:
    """common_ngram_map (ngram-map.h:61-95): one sequence's keys, its hash index and bookkeeping.
    key_map is master's 2^18-slot vector as a dict {slot: history index}, empty slots left out."""
    size_key: int
    size_value: int
    key_only: bool
    min_hits: int
    keys: list = field(default_factory=list)
    size_last_begin: int = 0
    last_draft_created: bool = False
    last_draft_key_idx: int = 0       # an offset into keys
    last_draft_value_idx: int = 0
    idx_last_check: int = 0
    key_map: dict = field(default_factory=dict)
    key_map_last_idx: int = 0

    def get_state(self) -> dict:
        return {"keys": [(k.key_idx, k.key_num, k.stat_idx,
                          tuple((v.value_idx, v.value_num, v.n_accepted) for v in k.values))
                         for k in self.keys],
                "size_last_begin": self.size_last_begin,
                "last_draft_created": self.last_draft_created,
                "last_draft_key_idx": self.last_draft_key_idx,
                "last_draft_value_idx": self.last_draft_value_idx,
                "idx_last_check": self.idx_last_check,
                "key_map": dict(self.key_map), "key_map_last_idx": self.key_map_last_idx}

    def set_state(self, st: dict) -> None:
        self.keys = [NgramMapKey(ki, kn, si, [NgramMapValue(*v) for v in vals])
                     for ki, kn, si, vals in st["keys"]]
        for name in ("size_last_begin", "last_draft_created", "last_draft_key_idx",
                     "last_draft_value_idx", "idx_last_check", "key_map_last_idx"):
            setattr(self, name, st[name])
        self.key_map = dict(st["key_map"])


def ngram_map_begin(mp: NgramMap, tokens) -> None:
    """common_ngram_map_begin (ngram-map.cpp:121-219): a generation starts from `tokens`."""
    size_begin = len(tokens)
    n, m = mp.size_key, mp.size_value
    idx_begin_cleanup = mp.size_last_begin                        # :128-136
    if idx_begin_cleanup > size_begin:
        idx_begin_cleanup = size_begin - n - m if size_begin > n + m else 0
    if size_begin < mp.idx_last_check:                            # :139-169 (key_map is never empty)
        mp.key_map = {h: i for h, i in mp.key_map.items() if i < idx_begin_cleanup}   # :161-167
        mp.key_map_last_idx = idx_begin_cleanup - 1 if idx_begin_cleanup > 0 else 0   # :168
    if size_begin < mp.idx_last_check and mp.keys:                # :171-215
        for i in range(len(mp.keys) - 1, -1, -1):
            key = mp.keys[i]
            if key.key_idx >= idx_begin_cleanup:                  # :177-183
                del mp.keys[i]
                continue
            if mp.key_only:                                       # :184-186
                continue
            for j in range(COMMON_NGRAM_MAX_VALUES - 1, -1, -1):  # :189-203
                v = key.values[j]
                if v.value_idx != 0 and v.value_idx >= idx_begin_cleanup:
                    for k in range(j, COMMON_NGRAM_MAX_VALUES - 1):   # :196-198 (struct copies)
                        key.values[k] = replace(key.values[k + 1])
                    last = key.values[COMMON_NGRAM_MAX_VALUES - 1]    # :200-201 (n_accepted kept)
                    last.value_idx = last.value_num = 0
            if key.values[0].value_idx == 0:                      # :204-209
                del mp.keys[i]
    mp.idx_last_check = size_begin                                # :217-218
    mp.size_last_begin = size_begin


def _at(inp, i: int, key: list) -> bool:
    """The n tokens of inp at i equal key (the comparison loops of :266-271, 283-288, ...)."""
    return inp[i:i + len(key)] == key


def ngram_map_draft(mp: NgramMap, inp, sampled: int) -> tuple[list, int]:
    """common_ngram_map_draft (ngram-map.cpp:221-516): (draft, match_pos or 0)."""
    mp.last_draft_created = False                                 # :224-227
    mp.last_draft_key_idx = 0
    mp.last_draft_value_idx = 0
    cur_len = len(inp)
    n, m = mp.size_key, mp.size_value
    if cur_len < 2 * n + m:                                       # :232-234
        return [], 0
    if cur_len >= UINT32_MAX:                                     # :235-238
        raise RuntimeError(f"ngram-map: cur_len exceeds UINT32_MAX: {cur_len}")
    if mp.idx_last_check > cur_len:                               # :240-243 (master aborts)
        raise RuntimeError(f"ngram-map: idx_last_check > cur_len: {mp.idx_last_check} > {cur_len}"
                           " (a shorter history without begin())")
    mp.idx_last_check = cur_len                                   # :244
    key = list(inp[cur_len - n + 1:]) + [int(sampled)]            # :247-252 the key n-gram
    if mp.size_last_begin > cur_len:                              # :256-258
        raise RuntimeError(f"ngram-map: size_last_begin > cur_len: {mp.size_last_begin} > {cur_len}")
    last = cur_len - n - m - 1            # the latest start whose key is followed by m tokens
    match_pos = 0
    idx_key = mp.key_map.get(ngram_map_hash(key, 0, n) % COMMON_NGRAM_HASH_MAP_SIZE, 0)   # :259-277
    if idx_key != 0 and idx_key < last and _at(inp, idx_key, key):
        match_pos = idx_key
    prompt_last = mp.size_last_begin - n - m - 1
    if match_pos == 0 and mp.size_last_begin > n + m + 1:         # :278-294 the prompt first
        for j in range(prompt_last, mp.key_map_last_idx, -1):
            if _at(inp, j, key):
                match_pos = j
                break
    lo = max(mp.size_last_begin, mp.key_map_last_idx)             # both bounds of :299 (j > lo)
    if match_pos == 0:                                            # :295-312 then the generated part
        for j in range(last, lo, -1):
            if _at(inp, j, key):
                match_pos = j
                break
    if mp.size_last_begin > n + m + 1:                            # :318-330 index the new n-grams,
        for j in range(prompt_last, mp.key_map_last_idx, -1):     # in the same order
            mp.key_map.setdefault(ngram_map_hash(inp, j, n) % COMMON_NGRAM_HASH_MAP_SIZE, j)
    for j in range(last, lo, -1):                                 # :332-338
        mp.key_map.setdefault(ngram_map_hash(inp, j, n) % COMMON_NGRAM_HASH_MAP_SIZE, j)
    mp.key_map_last_idx = max(last, mp.key_map_last_idx)          # :339
    if match_pos == 0:                                            # :342-344
        return [], 0

    key_offset = next((i for i, k in enumerate(mp.keys) if _at(inp, k.key_idx, key)),
                      len(mp.keys))                               # :347-361
    if key_offset == len(mp.keys):                                # :362-373 a new entry
        mp.keys.append(NgramMapKey(match_pos, 0, 0, [NgramMapValue(0, 0, m)
                                                     for _ in range(COMMON_NGRAM_MAX_VALUES)]))
    curr = mp.keys[key_offset]
    curr.key_num = min(curr.key_num + 1, COMMON_NGRAM_MAX_VALUE_COUNT)   # :378-380

    if mp.key_only:                                               # :382-398 ngram-map-k
        n_draft = min(m, curr.values[0].n_accepted)
        mp.last_draft_created = True
        mp.last_draft_key_idx = key_offset
        mp.last_draft_value_idx = 0
        return list(inp[match_pos + n:match_pos + n + max(n_draft, 0)]), match_pos

    if curr.key_num < mp.min_hits:                                # :401-406
        return [], 0
    for i in range(curr.stat_idx, match_pos + 1):                 # :412-456 count the m-grams
        if not _at(inp, i, key):                                  # (stat_idx itself included:
            continue                                              #  a match found again is
        begin_value = i + n                                       #  counted again)
        idx_value = -1
        for v in range(COMMON_NGRAM_MAX_VALUES):
            val = curr.values[v]
            if val.value_idx == 0:                                # :430-437 a free slot: new value
                val.value_idx, val.value_num, val.n_accepted = begin_value, 0, m
                idx_value = v
                break
            if inp[begin_value:begin_value + m] == inp[val.value_idx:val.value_idx + m]:   # :438-449
                idx_value = v
                break
        if idx_value >= 0:                                        # :451-455 (a 5th value: uncounted)
            val = curr.values[idx_value]
            val.value_num = min(val.value_num + 1, COMMON_NGRAM_MAX_VALUE_COUNT)
    curr.stat_idx = match_pos                                     # :458
    max_occur, slot_max = 0, 0                                    # :461-469 strict >: a tie keeps
    for v in range(COMMON_NGRAM_MAX_VALUES):                      # the lower slot (seen first)
        if curr.values[v].value_num > max_occur:
            max_occur, slot_max = curr.values[v].value_num, v
    sum_occur = sum(curr.values[v].value_num for v in range(COMMON_NGRAM_MAX_VALUES)
                    if v != slot_max)                             # :471-478
    if sum_occur > 0 and max_occur < 2 * sum_occur:               # :495-499 not dominant enough
        return [], 0                                              # (so a tie never drafts)
    n_draft = min(m, curr.values[slot_max].n_accepted)            # :503-507 the tokens after the
    mp.last_draft_created = True                                  # match, the winner's length
    mp.last_draft_key_idx = key_offset                            # :513-515
    mp.last_draft_value_idx = slot_max
    return list(inp[match_pos + n:match_pos + n + max(n_draft, 0)]), match_pos


def ngram_map_accept(mp: NgramMap, n_accepted: int) -> None:
    """common_ngram_map_accept (ngram-map.cpp:518-536): the last draft's key (and value) records
    how many of its tokens the target accepted; the next draft from it is that long at most."""
    if not mp.last_draft_created:
        return
    if mp.last_draft_key_idx >= len(mp.keys):     # master indexes out of range (a begin() that
        return                                    # dropped the key came between draft and accept)
    mp.keys[mp.last_draft_key_idx].values[mp.last_draft_value_idx].n_accepted = int(n_accepted)


# ---- the impls -------------------------------------------------------------------------------
class _NgramImpl(SpeculativeImpl):
    """The parts the n-gram impls share: parameters, the draft loop, info records."""

    def __init__(self, n_seq: int = 1, size_n: int = 12, size_m: int = 48, min_hits: int = 1,
                 n_max: int | None = None):
        from ..errors import check_param
        for name, v in (("spec_ngram_size_n", size_n), ("spec_ngram_size_m", size_m),
                        ("spec_ngram_min_hits", min_hits)):
            check_param(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= NGRAM_SIZE_LIMIT,
                        name, v, f"an integer in [1, {NGRAM_SIZE_LIMIT}]")
        # n_max: the longest draft this impl makes (size_m, as master; or a smaller cap, as
        # c392e50's llama-server cut every draft to --draft-max)
        super().__init__(n_seq, size_m if n_max is None else min(size_m, n_max))
        self.size_n, self.size_m, self.min_hits = size_n, size_m, min_hits

    def draft(self, dps: list[DraftParams]) -> None:
        for s, dp in enumerate(dps):
            if not dp.drafting:
                continue
            self.info[s] = []
            draft, match_pos = self._draft_one(s, list(dp.prompt), int(dp.id_last))
            draft = draft[:self.n_max]                   # size_m (or a cap given as n_max)
            if draft:
                key = list(dp.prompt[len(dp.prompt) - self.size_n + 1:]) + [int(dp.id_last)]
                self.info[s] = [NgramTokenInfo(int(t), key, match_pos, self.type) for t in draft]
            dp.result[:] = [int(t) for t in draft]


class NgramSimple(_NgramImpl):
    """common_speculative_impl_ngram_simple (common/speculative.cpp:1720-1763): the latest
    earlier occurrence of the current n-gram; no state, begin() and accept() do nothing."""
    type = "ngram-simple"

    def _draft_one(self, seq: int, tokens: list, sampled: int) -> tuple[list, int]:
        return ngram_simple_draft(tokens, sampled, self.size_n, self.size_m)


class NgramMapK(_NgramImpl):
    """common_speculative_impl_ngram_map_k (common/speculative.cpp:1765-1817) in key-only mode:
    one common_ngram_map per sequence (get_common_ngram_map, :2143-2152)."""
    type = "ngram-map-k"
    key_only = True

    def __init__(self, n_seq: int = 1, size_n: int = 12, size_m: int = 48, min_hits: int = 1,
                 n_max: int | None = None):
        super().__init__(n_seq, size_n, size_m, min_hits, n_max)
        self.maps = [NgramMap(size_n, size_m, self.key_only, min_hits) for _ in range(n_seq)]

    @property
    def keys(self) -> list[list[NgramMapKey]]:
        """Each sequence's key statistics (common_ngram_map::keys)."""
        return [mp.keys for mp in self.maps]

    def begin(self, seq: int, prompt) -> None:                    # speculative.cpp:1784-1788
        ngram_map_begin(self.maps[seq], list(prompt))

    def _draft_one(self, seq: int, inp: list, sampled: int) -> tuple[list, int]:   # :1795-1806
        return ngram_map_draft(self.maps[seq], inp, sampled)

    def accept(self, seq: int, n_accepted: int, is_other: bool) -> None:   # :1808-1816
        if is_other:             # another impl drafted: this map's last draft was not verified
            return
        ngram_map_accept(self.maps[seq], n_accepted)

    def get_state(self, seq: int):
        return self.maps[seq].get_state()

    def set_state(self, seq: int, state) -> None:
        if state:
            self.maps[seq].set_state(state)


class NgramMapK4V(NgramMapK):
    """The same impl for ngram-map-k4v (speculative.cpp:1772-1773, 2536-2540): values mode, up
    to 4 m-grams per key, min_hits read."""
    type = "ngram-map-k4v"
    key_only = False
