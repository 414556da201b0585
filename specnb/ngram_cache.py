"""ngram-cache: drafting from n-gram statistics (common/ngram-cache.*, examples/lookup).

A cache maps an n-gram (1 to 4 tokens) to the counts of the tokens that followed it. Three
caches are consulted per drafted token, in this order (common/ngram-cache.cpp @c392e50):
  - context: built from this sequence's own history, updated as tokens are accepted;
  - dynamic: statistics of earlier generations, loaded from a file (examples/lookup merges the
    context cache into it and saves it at the end: lookup.cpp:222-224);
  - static: a large corpus's 2-gram statistics, loaded from a file, which also validates the
    other two (a candidate's count is weighted by 100 x its static count).
Each draft step takes the longest n-gram whose cache entry is confident enough (a minimum
sample size and a minimum share of the most frequent continuation: ngram-cache.cpp:58-62,
96-143) and stops at the first step with no confident continuation (:145-197). The files use
llama.cpp's binary layout (common_ngram_cache_save/load, :199-258).
Ties between equally frequent continuations go to the token seen first here; llama.cpp walks a
std::unordered_map, whose order is not specified.
"""
from __future__ import annotations

import os
import struct

from .errors import ParamError
from .spec_impl import DraftParams, SpeculativeImpl

LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, LLAMA_NGRAM_STATIC = 1, 4, 2     # ngram-cache.h:9-11
LLAMA_TOKEN_NULL = -1
# a draft is aborted when the sample size or the top share falls below these (ngram-cache.cpp:59-62)
DRAFT_MIN_SAMPLE_SIZE_LAX = (2, 2, 1, 1)
DRAFT_MIN_PERCENT_LAX = (66, 50, 50, 50)
DRAFT_MIN_SAMPLE_SIZE_STRICT = (4, 3, 2, 2)
DRAFT_MIN_PERCENT_STRICT = (75, 66, 66, 66)


def _key(tokens) -> tuple:
    """common_ngram: up to LLAMA_NGRAM_MAX tokens, padded with LLAMA_TOKEN_NULL."""
    t = tuple(int(x) for x in tokens)
    return t + (LLAMA_TOKEN_NULL,) * (LLAMA_NGRAM_MAX - len(t))


def cache_update(cache: dict, ngram_min: int, ngram_max: int, inp: list, nnew: int) -> None:
    """common_ngram_cache_update (ngram-cache.cpp:11-51): count the n-grams ending in the nnew newest tokens."""
    n = len(inp)
    for size in range(ngram_min, ngram_max + 1):
        for i in range(max(n - nnew, size), n):
            part = cache.setdefault(_key(inp[i - size:i]), {})
            part[inp[i]] = part.get(inp[i], 0) + 1


def _try_draft_static(nc_static: dict, ngram: tuple) -> int:
    """try_draft from the static cache alone (ngram-cache.cpp:65-94)."""
    part = nc_static.get(ngram)
    if not part:
        return LLAMA_TOKEN_NULL
    tok, best = max(part.items(), key=lambda kv: kv[1])
    total = sum(part.values())
    i = LLAMA_NGRAM_STATIC - 1
    if total < DRAFT_MIN_SAMPLE_SIZE_LAX[i] or 100 * best < DRAFT_MIN_PERCENT_LAX[i] * total:
        return LLAMA_TOKEN_NULL
    return tok


def _try_draft(nc: dict, ngrams: list, part_static: dict, min_size, min_percent) -> tuple[int, tuple]:
    """try_draft from a primary cache, validated by the static one (ngram-cache.cpp:97-143)."""
    for i in range(len(ngrams) - 1, -1, -1):                 # the longest n-gram first
        part = nc.get(ngrams[i])
        if not part:
            continue
        tok, best_p, best_s, total = LLAMA_TOKEN_NULL, 0, 0, 0
        for t, c in part.items():
            s = 100 * part_static[t] if t in part_static else 1
            if c * s > best_p * best_s:
                tok, best_p, best_s = t, c, s
            total += c
        if total < min_size[i] or 100 * best_p < min_percent[i] * total:
            continue
        return tok, ngrams[i]
    return LLAMA_TOKEN_NULL, ()


def cache_draft(inp: list, draft: list, n_draft: int, nc_context: dict, nc_dynamic: dict,
                nc_static: dict, ngram_min: int = LLAMA_NGRAM_MIN, ngram_max: int = LLAMA_NGRAM_MAX,
                used: list | None = None) -> None:
    """common_ngram_cache_draft (ngram-cache.cpp:145-197): extend draft = [id_last] in place.

    `used`, if a list, receives (n-gram, cache name) for each drafted token (for views).
    """
    assert len(draft) == 1
    n = len(inp)
    if n < LLAMA_NGRAM_STATIC:
        return

    def get(i):                                              # get_token (:54-56)
        return inp[i] if i < n else draft[1 + i - n]
    while len(draft) - 1 < n_draft:
        start = n - LLAMA_NGRAM_STATIC + len(draft) - 1
        ngram_static = _key(get(j) for j in range(start, start + LLAMA_NGRAM_STATIC))
        part_static = nc_static.get(ngram_static, {})
        ngrams_cd = []                                       # cd = context + dynamic
        for size in range(ngram_min, ngram_max + 1):
            s0 = n - size + len(draft) - 1
            ngrams_cd.append(_key(get(j) for j in range(s0, s0 + size)))
        tok, gram = _try_draft(nc_context, ngrams_cd, part_static, DRAFT_MIN_SAMPLE_SIZE_LAX,
                               DRAFT_MIN_PERCENT_LAX)
        where = "context"
        if tok == LLAMA_TOKEN_NULL:
            tok, gram = _try_draft(nc_dynamic, ngrams_cd, part_static, DRAFT_MIN_SAMPLE_SIZE_STRICT,
                                   DRAFT_MIN_PERCENT_STRICT)
            where = "dynamic"
        if tok == LLAMA_TOKEN_NULL:
            tok, gram, where = _try_draft_static(nc_static, ngram_static), ngram_static, "static"
        if tok == LLAMA_TOKEN_NULL:
            break
        draft.append(tok)
        if used is not None:
            used.append(([t for t in gram if t != LLAMA_TOKEN_NULL], where))


def cache_save(cache: dict, path) -> None:
    """common_ngram_cache_save (:199-220): ngram (4 x int32), ntokens, then (token, count) pairs."""
    with open(path, "wb") as f:
        for ngram, part in cache.items():
            f.write(struct.pack("<4ii", *ngram, len(part)))
            for t, c in part.items():
                f.write(struct.pack("<ii", t, c))


def cache_load(path) -> dict:
    """common_ngram_cache_load (:222-258)."""
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise ParamError(f"cannot read the n-gram cache {os.fspath(path)!r}: {e.strerror}") from None
    cache, off = {}, 0
    try:
        while off < len(data):
            *ngram, k = struct.unpack_from("<4ii", data, off)
            off += 20
            if k <= 0:
                raise ValueError
            part = {}
            for _ in range(k):
                t, c = struct.unpack_from("<ii", data, off)
                off += 8
                if c <= 0:
                    raise ValueError
                part[t] = c
            cache[tuple(ngram)] = part
    except (struct.error, ValueError):
        raise ParamError(f"{os.fspath(path)!r} is not an n-gram cache file (common_ngram_cache_save "
                         f"layout), or it is truncated") from None
    return cache


def cache_merge(target: dict, add: dict) -> None:
    """common_ngram_cache_merge (:260-285)."""
    for ngram, part in add.items():
        dst = target.setdefault(ngram, {})
        for t, c in part.items():
            dst[t] = dst.get(t, 0) + c


class NgramCache(SpeculativeImpl):
    """common_speculative_impl_ngram_cache, with examples/lookup's cache update (c392e50).

    The context cache is updated with every newly committed token over the whole history, as
    examples/lookup does (lookup.cpp:54, 157, 183). A draft has at most n_max tokens
    (lookup.cpp:25: n_draft = --draft-max).
    """
    type = "ngram-cache"

    def __init__(self, n_seq: int = 1, n_max: int = 8, static_path=None, dynamic_path=None):
        super().__init__(n_seq, n_max)
        self.nc_static = cache_load(static_path) if static_path else {}
        self.nc_dynamic = cache_load(dynamic_path) if dynamic_path and os.path.exists(dynamic_path) else {}
        self.dynamic_path = dynamic_path
        self.context = [{} for _ in range(n_seq)]
        self.n_seen = [0] * n_seq          # history tokens already counted in the context cache

    def begin(self, seq: int, prompt) -> None:
        self.context[seq], self.n_seen[seq] = {}, 0

    def draft(self, dps: list[DraftParams]) -> None:
        from .ngram import NgramTokenInfo
        for s, dp in enumerate(dps):
            if not dp.drafting:
                continue
            inp = [int(t) for t in dp.prompt] + [int(dp.id_last)]
            cache_update(self.context[s], LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, inp, len(inp) - self.n_seen[s])
            self.n_seen[s] = len(inp)
            draft, used = [int(dp.id_last)], []
            cache_draft(inp, draft, self.n_max, self.context[s], self.nc_dynamic, self.nc_static,
                        used=used)
            dp.result[:] = draft[1:]
            self.info[s] = [NgramTokenInfo(t, g, -1, self.type, where)
                            for t, (g, where) in zip(draft[1:], used)]

    def save_dynamic(self) -> None:
        """Merge every context cache into the dynamic one and save it (lookup.cpp:222-224)."""
        if not self.dynamic_path:
            raise ParamError("no dynamic n-gram cache file was given (lookup_cache_dynamic)")
        for c in self.context:
            cache_merge(self.nc_dynamic, c)
        cache_save(self.nc_dynamic, self.dynamic_path)
