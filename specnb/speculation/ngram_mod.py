"""ngram-mod: a hash table from n-grams to the token that followed them (common/ngram-mod.*).

llama.cpp master 34af94cd, ported line by line (the markers name the lines each block mirrors):
  - common_ngram_mod (common/ngram-mod.h, common/ngram-mod.cpp): one flat table of int32
    entries, EMPTY (-1) where nothing was written. An n-gram of n tokens is hashed to a slot,
    res = res * 6364136223846793005 + token for each token, wrapping at 2**64, then taken
    modulo the table's size. A slot keeps only the token that followed the n-gram written
    there last, so two n-grams that hash to the same slot overwrite each other and a lookup
    can return the other one's token. That is why the hash is ported exactly: a collision
    changes a draft. There are no buckets and no keys.
  - common_speculative_impl_ngram_mod (common/speculative.cpp:1819-1992): ONE table for all
    sequences (:1822-1823, sized 4 Mi entries at :1846); per sequence only i_last (the history
    positions already added), n_draft_last and n_low.
      begin   adds every n-gram of the prompt, then clears the whole table if more than a
              quarter of its slots are used (:1864-1890);
      draft   adds the history's new n-grams once more than 32 tokens have arrived since the
              last addition, then chains lookups from the last n tokens (the history's last
              n - 1 and id_last), each found token moving the window on by one. It stops at
              the first EMPTY slot: after fewer than n_min tokens the whole draft is dropped,
              otherwise what was found is kept, up to n_max tokens (:1892-1946);
      accept  ignores is_other calls. Otherwise a draft with under a quarter of its tokens
              accepted counts as a low round; after 5 low rounds in a row the shared table is
              cleared, n_low goes back to 0 and only this sequence's i_last is reset to 0
              (:1966-1991);
      process does nothing (:1948-1951).
Defaults and ranges: n_match 24, n_min 48, n_max 64 (common/common.h:351-356); --spec-ngram-mod-
n-min and -n-max take 0..1024, --spec-ngram-mod-n-match 1..1024 (common/arg.cpp:4163-4192). Master
checks nothing between n_min and n_max: with n_min > n_max only full n_max-token drafts survive.

specnb's additions, with none of master's behaviour changed: `self.info[s]` describes each
drafted token (the n tokens looked up for it; match_pos -1, since a hash slot has no position);
`get_state` / `set_state` carry the per-sequence fields (master's impl has neither: it keeps the
base class's, which save nothing, speculative.cpp:173-174); `n_resets` counts table clears by
reason. Master's trace and warning lines (SPC_TRC, SPC_WRN) are not printed, except that an
n_match under 16 warns, as master does (:1856-1859).

The shared table and checkpoints: the table belongs to the impl, not to a sequence, so a
sequence's state does not include it. Saving it per sequence would cost 16 MiB each time, and
restoring it would also undo what the other sequences added. That is safe because the table holds
only n-grams of committed history, never draft tokens. Restoring i_last to an earlier value makes
the next chunk add those positions again, and adding the same n-grams again writes the same
tokens into the same slots.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import check_param
from .ngram import NgramTokenInfo
from .impl import DraftParams, SpeculativeImpl
from .limits import NGRAM_SIZE_LIMIT

EMPTY = -1                                   # ngram-mod.h:16
NGRAM_MOD_SIZE = 4 * 1024 * 1024             # speculative.cpp:1846: mod(n_match, 4*1024*1024)
HASH_MUL = 6364136223846793005               # ngram-mod.cpp:19
_M64 = (1 << 64) - 1
OCCUPANCY_THOLD = 0.25                       # speculative.cpp:1884
CHUNK = 32                                   # speculative.cpp:1910: i_last + 32 < cur_len
LOW_ACC = 0.25                               # speculative.cpp:1976: f_acc < 0.25
LOW_STREAK = 5                               # speculative.cpp:1978: n_low >= 5


class CommonNgramMod:
    """common_ngram_mod: n-gram -> the token that followed it, in one flat int32 table.

    16 MiB at master's size (4 Mi entries x 4 bytes, size_bytes(), ngram-mod.cpp:60-62).
    """

    def __init__(self, n: int, size: int):                              # ngram-mod.cpp:9-13
        self.n = int(n)
        self.used = 0
        self.entries = np.full(int(size), EMPTY, dtype=np.int32)

    def idx(self, tokens) -> int:                                       # ngram-mod.cpp:15-25
        """The slot of tokens[0:n]: res = res*6364136223846793005 + token (mod 2**64), % size.

        A token is an int32 widened to size_t, so a negative one counts as 2**64 + token."""
        res = 0
        for i in range(self.n):
            res = (res * HASH_MUL + (int(tokens[i]) & _M64)) & _M64
        return res % self.entries.size

    def add(self, tokens) -> None:                                      # ngram-mod.cpp:27-35
        """Write tokens[n] into the slot of tokens[0:n] (overwriting what was there)."""
        i = self.idx(tokens)
        if self.entries[i] == EMPTY:
            self.used += 1
        self.entries[i] = int(tokens[self.n])

    def get(self, tokens) -> int:                                       # ngram-mod.cpp:37-41
        """The token in the slot of tokens[0:n], EMPTY (-1) if none was written there."""
        return int(self.entries[self.idx(tokens)])

    def reset(self) -> None:                                            # ngram-mod.cpp:43-46
        self.entries.fill(EMPTY)
        self.used = 0

    def add_range(self, tokens, i0: int, i1: int) -> None:
        """for i in range(i0, i1): add(tokens[i:]), hashing all the positions in one numpy pass.

        Gives the same table and `used` as the loop (the last write to a slot wins; `used`
        counts the slots that were EMPTY before), for tokens >= 0. A negative token, which no
        vocab has, takes the loop."""
        n, m = self.n, i1 - i0
        if m <= 0:
            return
        toks = np.asarray(tokens[i0:i1 + n], dtype=np.int64)
        if toks.min() < 0:
            for i in range(i0, i1):
                self.add(tokens[i:i + n + 1])
            return
        u = toks.astype(np.uint64)
        res = np.zeros(m, dtype=np.uint64)
        mul = np.uint64(HASH_MUL)
        for j in range(n):                     # the same recurrence, every position at once
            res = res * mul + u[j:j + m]       # uint64 arrays wrap at 2**64, as size_t does
        slot = (res % np.uint64(self.entries.size)).astype(np.int64)
        val = toks[n:n + m]
        # the last write to each slot wins: the first occurrence in reverse order
        uniq, first_rev = np.unique(slot[::-1], return_index=True)
        self.used += int(np.count_nonzero(self.entries[uniq] == EMPTY))
        self.entries[uniq] = val[::-1][first_rev]

    def get_n(self) -> int:                                             # ngram-mod.cpp:48-50
        return self.n

    def get_used(self) -> int:                                          # ngram-mod.cpp:52-54
        return self.used

    def size(self) -> int:                                              # ngram-mod.cpp:56-58
        return int(self.entries.size)

    def size_bytes(self) -> int:                                        # ngram-mod.cpp:60-62
        return int(self.entries.nbytes)


def _int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


class NgramMod(SpeculativeImpl):
    """common_speculative_impl_ngram_mod (common/speculative.cpp:1819-1992 @34af94cd).

    n_match: the n-gram length hashed (--spec-ngram-mod-n-match, 1..1024, default 24);
    n_min / n_max: a draft is dropped when the chain of lookups stops before n_min tokens, and
    never longer than n_max (--spec-ngram-mod-n-min / -n-max, 0..1024, defaults 48 / 64);
    mod_size: the table's entries (master: 4 Mi, fixed; a smaller one is for tests).
    """
    type = "ngram-mod"

    def __init__(self, n_seq: int = 1, n_match: int = 24, n_min: int = 48, n_max: int = 64,
                 mod_size: int = NGRAM_MOD_SIZE):
        check_param(_int(n_seq) and n_seq >= 1, "n_seq", n_seq, "an integer >= 1")
        # common/arg.cpp:4163-4192: the flags' ranges
        lim = NGRAM_SIZE_LIMIT
        check_param(_int(n_min) and 0 <= n_min <= lim, "--spec-ngram-mod-n-min", n_min,
                    f"an integer in [0, {lim}]", field="ngram_mod_n_min")
        check_param(_int(n_max) and 0 <= n_max <= lim, "--spec-ngram-mod-n-max", n_max,
                    f"an integer in [0, {lim}]", field="ngram_mod_n_max")
        check_param(_int(n_match) and 1 <= n_match <= lim, "--spec-ngram-mod-n-match", n_match,
                    f"an integer in [1, {lim}]", field="ngram_mod_n_match")
        check_param(_int(mod_size) and mod_size >= 1, "mod_size", mod_size, "an integer >= 1")
        n_seq, n_match, n_min, n_max = int(n_seq), int(n_match), int(n_min), int(n_max)
        super().__init__(n_seq, n_max)
        self.n_match, self.n_min = n_match, n_min                       # speculative.cpp:1845
        self.mod = CommonNgramMod(n_match, int(mod_size))               # :1846, shared (:1822-1823)
        if n_match < 16:                                                # :1856-1859
            warnings.warn(f"ngram_mod n_match={n_match} is too small - poor quality is possible, "
                          f"see: https://github.com/ggml-org/llama.cpp/pull/19164", stacklevel=2)
        # seq_info (:1828-1837), one per sequence (:1861)
        self.i_last = [0] * n_seq          # the last prompt position added to the table
        self.n_draft_last = [0] * n_seq    # the length of the last draft
        self.n_low = [0] * n_seq           # accept rounds in a row with f_acc < 0.25
        self.n_resets = {"occupancy": 0, "low_acceptance": 0}           # specnb: table clears

    # ---- the interface ----------------------------------------------------------------------
    def begin(self, seq: int, prompt) -> None:                          # speculative.cpp:1864-1890
        self.i_last[seq] = 0
        self.n_draft_last[seq] = 0
        n = self.mod.get_n()
        prompt = [int(t) for t in prompt]
        if len(prompt) < n:
            return
        self.mod.add_range(prompt, 0, len(prompt) - n)                  # :1875-1877
        self.i_last[seq] = len(prompt) - n
        f = self.mod.get_used() / self.mod.size()                       # :1881
        if f > OCCUPANCY_THOLD:                                         # :1884-1889
            self.mod.reset()
            self.n_resets["occupancy"] += 1

    def process(self, batch) -> bool:                                   # speculative.cpp:1948-1951
        return True

    def draft(self, dps: list[DraftParams]) -> None:                    # speculative.cpp:1953-1964
        for s, dp in enumerate(dps):
            if not dp.drafting:
                continue
            self._draft_one(s, dp)

    def _draft_one(self, seq: int, dp: DraftParams) -> None:            # speculative.cpp:1892-1946
        self.info[seq] = []
        self.n_draft_last[seq] = 0                                      # :1900
        prompt = [int(t) for t in dp.prompt]
        cur_len = len(prompt)
        n = self.mod.get_n()
        if cur_len < n:                                                 # :1902-1905
            dp.result[:] = []
            return
        if self.i_last[seq] + CHUNK < cur_len:                          # :1909-1916 new n-grams
            self.mod.add_range(prompt, self.i_last[seq], cur_len - n)
            self.i_last[seq] = cur_len - n
        # result = the last n - 1 history tokens, id_last, then room for n_max (:1918-1922)
        result = prompt[cur_len - n + 1:] + [int(dp.id_last)]
        for i in range(self.n_max):                                     # :1924-1936
            token = self.mod.get(result[i:i + n])
            if token == EMPTY:
                if i < self.n_min:                                      # too short: no draft
                    dp.result[:] = []
                    return
                break
            result.append(token)
        draft = result[n:]                                              # :1938-1942 the m tokens
        dp.result[:] = draft
        self.n_draft_last[seq] = len(draft)                             # :1945
        self.info[seq] = [NgramTokenInfo(t, result[i:i + n], -1, self.type)
                          for i, t in enumerate(draft)]

    def accept(self, seq: int, n_accepted: int, is_other: bool) -> None:  # speculative.cpp:1966-1991
        if is_other:
            return
        if self.n_draft_last[seq] > 0:
            f_acc = n_accepted / self.n_draft_last[seq]
            if f_acc < LOW_ACC:
                self.n_low[seq] += 1
                if self.n_low[seq] >= LOW_STREAK:                       # :1978-1985
                    self.mod.reset()
                    self.n_low[seq] = 0
                    self.i_last[seq] = 0
                    self.n_resets["low_acceptance"] += 1
            else:
                self.n_low[seq] = 0

    # ---- specnb: the per-sequence state (the shared table is not a sequence's; see above) ---
    def get_state(self, seq: int):
        return {"i_last": self.i_last[seq], "n_draft_last": self.n_draft_last[seq],
                "n_low": self.n_low[seq]}

    def set_state(self, seq: int, state) -> None:
        if state:
            self.i_last[seq] = int(state["i_last"])
            self.n_draft_last[seq] = int(state["n_draft_last"])
            self.n_low[seq] = int(state["n_low"])
