"""Self-speculation from the token history: ngram-simple and ngram-map-k (common/ngram-map.*).

Both look the current n-gram up in the sequence's own history (prompt + accepted tokens,
with id_last as its last token) and draft the tokens that followed its most recent earlier
occurrence. No draft model, no draft context: a draft costs a lookup. They shine where the
output copies the input (rewriting code, quoting, summaries with repeated phrases).

llama.cpp's code, common/ngram-map.cpp @003c90352d17 (the version with check_rate):
  - common_ngram_simple_draft (ngram-map.cpp:22-94): pattern = the last size_n - 1 history
    tokens + id_last; search backwards from cur_len - size_n - 1 for its latest match; draft
    copy_max = min(size_m, cur_len - (match + size_n)) following tokens, none if copy_max <
    size_n, none unless cur_len > size_n + size_m + 1.
  - common_ngram_map_draft, key-only mode (ngram-map.cpp:105-212): needs cur_len >= 2n + m;
    the match must be followed by m whole tokens (search from cur_len - n - m - 1); a key's
    statistics entry counts its hits; the draft is min(m, n_accepted of value 0) tokens (the
    value keeps the m it was created with: this version does not record acceptance in
    key-only mode).
  - both skip the lookup unless check_rate tokens arrived since the last one (:31, :122).
The impls at master 34af94cd: common_speculative_impl_ngram_simple (common/speculative.cpp:
1720-1763 @34af94cd) keeps only its parameters, shared by all sequences; begin(), process()
and accept() are no-ops.
common_speculative_impl_ngram_map_k (:1765-1817) keeps one common_ngram_map per sequence;
process() is a no-op, but begin() calls common_ngram_map_begin (:1784-1788) and accept() calls
common_ngram_map_accept (:1808-1816). 34af94cd's ngram-map differs from 003c90352d17: it finds
keys through a hash map first (ngram-map.cpp:259-277 @34af94cd), common_ngram_map_begin drops
keys only when the new prompt is shorter than the history last seen (:121-219), and key-only
mode records the accepted length, so a key drafts at most what was last accepted from it
(:382-398, 518-536). specnb follows 003c90352d17 (no acceptance record in key-only mode; that
version has no begin(), and specnb's begin() clears the keys). min_hits is read only by
ngram-map-k4v (key-only mode returns before the check, ngram-map.cpp:195-214 @003c90352d17,
:382-406 @34af94cd), so it changes nothing here. specnb keeps the check_rate state per sequence.
Flags and defaults as 003c90352d17 has them (docs/speculative.md:61-67, common/arg.cpp:3420-3459,
common/common.h:278-281 @003c90352d17): --spec-ngram-size-n 12, --spec-ngram-size-m 48,
--spec-ngram-check-rate 1, --spec-ngram-min-hits 1, shared by the n-gram types. 34af94cd gives
each type its own flags with the same defaults (--spec-ngram-simple-size-n / -size-m /
-min-hits, --spec-ngram-map-k-..., --spec-ngram-map-k4v-...; common/arg.cpp:4194-4285,
common/common.h:358-362, 376-378 @34af94cd), refuses the old shared flags as removed
(common/arg.cpp:4305-4325), and has no check_rate.
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec_impl import DraftParams, SpeculativeImpl

COMMON_NGRAM_MAX_VALUE_COUNT = 16380     # ngram-map.cpp:101


@dataclass
class NgramTokenInfo:
    """One token an n-gram lookup drafted: the n-gram it matched and where."""
    token: int
    ngram: list               # the matched n-gram's tokens (the pattern looked up)
    match_pos: int            # where in the history the earlier occurrence starts (-1: a cache)
    source: str = "ngram-simple"
    cache: str = ""           # ngram-cache: which cache proposed it ("context", "dynamic", "static")


def ngram_simple_draft(tokens: list, sampled: int, size_n: int, size_m: int) -> tuple[list, int]:
    """common_ngram_simple_draft without the check_rate gate: (draft, match_pos or 0)."""
    cur_len = len(tokens)
    if cur_len <= size_n + size_m + 1:                            # :44
        return [], 0
    pattern = tokens[cur_len - size_n + 1:] + [sampled]           # :51-54
    match_pos = 0                                                 # position 0 == no match
    for j in range(cur_len - size_n - 1, 0, -1):                  # :61 latest first
        if tokens[j:j + size_n] == pattern:
            match_pos = j
            break
    if match_pos == 0:
        return [], 0
    copy_max = min(size_m, cur_len - (match_pos + size_n))        # :78-81
    if copy_max < size_n:                                         # :82
        return [], 0
    return tokens[match_pos + size_n:match_pos + size_n + copy_max], match_pos


class _NgramImpl(SpeculativeImpl):
    """The parts ngram-simple and ngram-map-k share: parameters, check_rate, info records."""

    def __init__(self, n_seq: int = 1, size_n: int = 12, size_m: int = 48, check_rate: int = 1,
                 min_hits: int = 1, n_max: int | None = None):
        from .errors import check_param
        for name, v, lo in (("spec_ngram_size_n", size_n, 1), ("spec_ngram_size_m", size_m, 1),
                            ("spec_ngram_check_rate", check_rate, 1),
                            ("spec_ngram_min_hits", min_hits, 1)):
            check_param(isinstance(v, int) and not isinstance(v, bool) and lo <= v <= 1024,
                        name, v, f"an integer in [{lo}, 1024]")
        # n_max: the longest draft this impl makes (size_m, as master; or a smaller cap, as
        # c392e50's llama-server cut every draft to --draft-max)
        super().__init__(n_seq, size_m if n_max is None else min(size_m, n_max))
        self.size_n, self.size_m = size_n, size_m
        self.check_rate, self.min_hits = check_rate, min_hits
        self.idx_last_check = [0] * n_seq

    def begin(self, seq: int, prompt) -> None:
        self.idx_last_check[seq] = 0

    def _skip(self, seq: int, cur_len: int) -> bool:
        """Only look up every check_rate tokens (ngram-map.cpp:31, :122)."""
        last = self.idx_last_check[seq]
        return last + self.check_rate > cur_len > last

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

    def get_state(self, seq: int):
        return {"idx_last_check": self.idx_last_check[seq]}

    def set_state(self, seq: int, state) -> None:
        if state:
            self.idx_last_check[seq] = state["idx_last_check"]


class NgramSimple(_NgramImpl):
    """common_speculative_impl_ngram_simple: the latest earlier occurrence of the current n-gram."""
    type = "ngram-simple"

    def _draft_one(self, seq: int, tokens: list, sampled: int) -> tuple[list, int]:
        cur_len = len(tokens)
        if self._skip(seq, cur_len):
            return [], 0
        if cur_len > self.size_n + self.size_m + 1:
            self.idx_last_check[seq] = cur_len                    # :57, after the length check
        return ngram_simple_draft(tokens, sampled, self.size_n, self.size_m)


@dataclass
class _MapKey:
    """common_ngram_map_key, key-only mode: where the key was first seen and its hit count."""
    key_idx: int
    key_num: int = 0
    n_accepted: int = 0       # values[0].n_accepted: set to m when the key is created


class NgramMapK(_NgramImpl):
    """common_speculative_impl_ngram_map_k: ngram-map in key-only mode (one value per key)."""
    type = "ngram-map-k"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.keys: list[list[_MapKey]] = [[] for _ in range(self.n_seq)]

    def begin(self, seq: int, prompt) -> None:
        super().begin(seq, prompt)
        self.keys[seq] = []

    def _draft_one(self, seq: int, inp: list, sampled: int) -> tuple[list, int]:
        n, m = self.size_n, self.size_m
        cur_len = len(inp)
        if cur_len < 2 * n + m:                                   # :116
            return [], 0
        if self._skip(seq, cur_len):                              # :122
            return [], 0
        self.idx_last_check[seq] = cur_len
        key = inp[cur_len - n + 1:] + [sampled]                   # :128-133
        match_pos = 0
        for j in range(cur_len - n - m - 1, 0, -1):               # :137
            if inp[j:j + n] == key:
                match_pos = j
                break
        if match_pos == 0:
            return [], 0
        keys = self.keys[seq]                                     # :161-186 the key's entry
        entry = next((k for k in keys if inp[k.key_idx:k.key_idx + n] == key), None)
        if entry is None:
            entry = _MapKey(match_pos, 0, m)
            keys.append(entry)
        entry.key_num = min(entry.key_num + 1, COMMON_NGRAM_MAX_VALUE_COUNT)   # :192
        n_draft = min(m, entry.n_accepted)                        # :199
        return inp[match_pos + n:match_pos + n + n_draft], match_pos

    def get_state(self, seq: int):
        return {"idx_last_check": self.idx_last_check[seq],
                "keys": [(k.key_idx, k.key_num, k.n_accepted) for k in self.keys[seq]]}

    def set_state(self, seq: int, state) -> None:
        if state:
            super().set_state(seq, state)
            self.keys[seq] = [_MapKey(*k) for k in state["keys"]]
