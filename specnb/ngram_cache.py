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

import numpy as np

from .cache import atomic_path
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


# ---- the files (common_ngram_cache_save / common_ngram_cache_load) ---------------------------
# Per entry: the n-gram (LLAMA_NGRAM_MAX x int32, unused slots LLAMA_TOKEN_NULL), ntokens
# (int32), then ntokens (token, count) int32 pairs; little-endian, no header. A file is input
# like a model: every id is checked against the target's vocab, and every count of pairs
# against the vocab size and what is left of the file before the pairs are read.
# a loaded cache is Python dicts: ~15x its file size in memory, ~30x while loading
MAX_FILE_BYTES = 64 << 20
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
_ENTRY_HEAD = LLAMA_NGRAM_MAX + 1            # int32s before the pairs: the n-gram and ntokens


def cache_save(cache: dict, path) -> None:
    """common_ngram_cache_save (:199-220): ngram (4 x int32), ntokens, then (token, count) pairs.

    Written to a temporary file that replaces path in one rename: an interrupted save leaves
    the previous file whole. An n-gram with no counts is skipped (llama.cpp asserts there)."""
    flat = []
    for ngram, part in cache.items():
        if part:
            flat.extend(ngram)
            flat.append(len(part))
            for t, c in part.items():
                flat.append(t)
                flat.append(c)
    try:
        a = np.array(flat, dtype=np.int64)
        fits = a.size == 0 or (a.min() >= INT32_MIN and a.max() <= INT32_MAX)
    except OverflowError:
        fits = False
    if not fits:
        v = next(v for v in flat if not INT32_MIN <= v <= INT32_MAX)
        raise ParamError(f"cannot save the n-gram cache {os.fspath(path)!r}: {v} does not fit "
                         f"the file's int32 token and count fields")
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            f.write(a.astype("<i4").tobytes())
    except OSError as e:
        raise ParamError(f"cannot write the n-gram cache {os.fspath(path)!r}: "
                         f"{e.strerror or e}") from None


def _refuse(path, off: int, what: str):
    raise ParamError(f"n-gram cache {os.fspath(path)}: entry at byte {off}: {what}")


def cache_load(path, n_vocab: int) -> dict:
    """common_ngram_cache_load (:222-258), refusing with a ParamError (file, entry offset,
    value) what llama.cpp would assert on or draft from: a cut entry, ntokens <= 0, a count
    <= 0, an id outside [0, n_vocab) (LLAMA_TOKEN_NULL only as the n-gram's trailing padding,
    as common_ngram writes it), a duplicate n-gram or a duplicate token within an entry
    (llama.cpp's emplace keeps the first and silently drops the rest; save never writes them).
    Files over MAX_FILE_BYTES are refused before they are read."""
    name = os.fspath(path)
    n_vocab = int(n_vocab)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= MAX_FILE_BYTES:
                data = f.read(MAX_FILE_BYTES + 1)
                size = len(data)
    except OSError as e:
        raise ParamError(f"cannot read the n-gram cache {name!r}: {e.strerror or e}") from None
    if size > MAX_FILE_BYTES:
        raise ParamError(f"n-gram cache {name}: {size} bytes; specnb reads n-gram caches of at "
                         f"most {MAX_FILE_BYTES} bytes (MAX_FILE_BYTES)")
    a = np.frombuffer(data, dtype="<i4", count=len(data) // 4)
    n = a.size
    ints = memoryview(a.astype(np.int32, copy=False)).cast("B").cast("i")   # for the walk
    # the walk: each entry's start (in int32s) and ntokens, checked before the next is read
    starts, ks = [], []
    i = 0
    while i < n:
        if i + _ENTRY_HEAD > n:
            break
        k = ints[i + LLAMA_NGRAM_MAX]
        if not 0 < k <= n_vocab or i + _ENTRY_HEAD + 2 * k > n:
            left = len(data) - 4 * (i + _ENTRY_HEAD)
            if k <= 0:
                _refuse(path, 4 * i, f"ntokens={k}; every entry has at least one (token, count) pair")
            if k > n_vocab:
                _refuse(path, 4 * i, f"ntokens={k}, more than the vocab's {n_vocab} tokens")
            _refuse(path, 4 * i, f"ntokens={k} needs {8 * k} bytes, {left} left (truncated, or "
                                 f"not an n-gram cache file)")
        starts.append(i)
        ks.append(k)
        i += _ENTRY_HEAD + 2 * k
    if 4 * i < len(data):
        _refuse(path, 4 * i, f"cut short: {len(data) - 4 * i} bytes left, an n-gram and its "
                             f"ntokens take {4 * _ENTRY_HEAD} (truncated, or not an n-gram "
                             f"cache file)")
    if not starts:
        return {}
    starts = np.array(starts, dtype=np.int64)
    ks = np.array(ks, dtype=np.int64)
    # the n-grams: ids in [0, n_vocab), LLAMA_TOKEN_NULL only after the last token
    keys = a[starts[:, None] + np.arange(LLAMA_NGRAM_MAX)].astype(np.int64)
    null = keys == LLAMA_TOKEN_NULL
    bad = ((keys < 0) & ~null) | (keys >= n_vocab)
    if bad.any():
        e, j = np.argwhere(bad)[0]
        _refuse(path, 4 * int(starts[e]), f"n-gram token id {int(keys[e, j])} is outside the "
                                          f"vocab [0, {n_vocab}) (-1 pads unused slots)")
    bad = null[:, 0] | (null[:, :-1] & ~null[:, 1:]).any(axis=1)
    if bad.any():
        e = int(np.argmax(bad))
        _refuse(path, 4 * int(starts[e]), f"n-gram {tuple(int(x) for x in keys[e])}: common_ngram "
                                          f"holds 1 to {LLAMA_NGRAM_MAX} tokens, then -1 padding")
    # the pairs: drafted tokens in [0, n_vocab), counts > 0
    entry = np.repeat(np.arange(starts.size), ks)
    first = np.cumsum(ks) - ks
    pos = starts[entry] + _ENTRY_HEAD + 2 * (np.arange(entry.size) - first[entry])
    toks, counts = a[pos].astype(np.int64), a[pos + 1].astype(np.int64)
    bad = (toks < 0) | (toks >= n_vocab)
    if bad.any():
        p = int(np.argmax(bad))
        _refuse(path, 4 * int(starts[entry[p]]), f"drafted token id {int(toks[p])} is outside the "
                                                 f"vocab [0, {n_vocab})")
    bad = counts <= 0
    if bad.any():
        p = int(np.argmax(bad))
        _refuse(path, 4 * int(starts[entry[p]]), f"token {int(toks[p])} has count {int(counts[p])}; "
                                                 f"counts are positive")
    # the dicts; a duplicate shows as a dict shorter than what was put in
    cache = {}
    ngrams = list(zip(*(keys[:, j].tolist() for j in range(LLAMA_NGRAM_MAX))))
    pairs = list(zip(toks.tolist(), counts.tolist()))
    for e, (lo, k) in enumerate(zip(first.tolist(), ks.tolist())):
        part = dict(pairs[lo:lo + k])
        if len(part) != k:
            seen = set()
            for t, _ in pairs[lo:lo + k]:
                if t in seen:
                    _refuse(path, 4 * int(starts[e]), f"token {t} appears twice among the n-gram's "
                                                      f"continuations (llama.cpp would keep the first)")
                seen.add(t)
        cache[ngrams[e]] = part
    if len(cache) != len(ngrams):
        seen = {}
        for e, ngram in enumerate(ngrams):
            if ngram in seen:
                _refuse(path, 4 * int(starts[e]), f"n-gram {ngram} appears a second time, first at "
                                                  f"byte {4 * int(starts[seen[ngram]])} (llama.cpp "
                                                  f"would keep the first; its save writes each once)")
            seen[ngram] = e
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
    (lookup.cpp:25: n_draft = --draft-max). The cache files' token ids are checked against
    n_vocab, the target's vocab size, which is needed when a file is given.
    """
    type = "ngram-cache"

    def __init__(self, n_seq: int = 1, n_max: int = 8, static_path=None, dynamic_path=None,
                 n_vocab: int | None = None):
        super().__init__(n_seq, n_max)
        if (static_path or dynamic_path) and n_vocab is None:
            raise ParamError("ngram-cache: n_vocab (the target's vocab size) is needed to check "
                             "the lookup cache files")
        self.nc_static = cache_load(static_path, n_vocab) if static_path else {}
        self.nc_dynamic = (cache_load(dynamic_path, n_vocab)
                           if dynamic_path and os.path.exists(dynamic_path) else {})
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
