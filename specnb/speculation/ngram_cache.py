"""ngram-cache: drafting from n-gram statistics (common/ngram-cache.*, examples/lookup).

A cache maps an n-gram (1 to 4 tokens) to the counts of the tokens that followed it. Three
caches are consulted per drafted token, in this order (common/ngram-cache.cpp @34af94cd):
  - context: built from this sequence's own history, updated as tokens are accepted;
  - dynamic: statistics of earlier generations, loaded from a file (examples/lookup merges the
    context cache into it and saves it at the end: lookup.cpp:220-222);
  - static: a large corpus's 2-gram statistics, loaded from a file, which also validates the
    other two (a candidate's count is weighted by 100 x its static count).
Each draft step takes the longest n-gram whose cache entry is confident enough (a minimum
sample size and a minimum share of the most frequent continuation: ngram-cache.cpp:59-63,
97-144) and stops at the first step with no confident continuation (:146-198). The files use
llama.cpp's binary layout (common_ngram_cache_save/load, :200-258).

Ties. llama.cpp keeps a cache's counts in a std::unordered_map<llama_token, int32_t> and takes
the first of several equal best counts in that map's iteration order (the strict `>` at :81 and
:126). With libstdc++ (GCC's library, which Linux builds of llama.cpp use) that order is fixed by
the order in which the tokens were first inserted, and `libstdcxx_order` reproduces it (see
there). specnb keeps plain dicts, whose insertion order is that same sequence, and resolves a
tie in that order. Built with libc++ (clang on macOS) or MSVC, llama.cpp uses other bucket
policies and can break the same tie differently.
"""
from __future__ import annotations

import os

import numpy as np

from ..cache import atomic_path
from ..errors import ParamError
from .impl import DraftParams, SpeculativeImpl

LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, LLAMA_NGRAM_STATIC = 1, 4, 2     # ngram-cache.h:9-11
LLAMA_TOKEN_NULL = -1
# a draft is aborted when the sample size or the top share falls below these (ngram-cache.cpp:59-63)
DRAFT_MIN_SAMPLE_SIZE_LAX = (2, 2, 1, 1)
DRAFT_MIN_PERCENT_LAX = (66, 50, 50, 50)
DRAFT_MIN_SAMPLE_SIZE_STRICT = (4, 3, 2, 2)
DRAFT_MIN_PERCENT_STRICT = (75, 66, 66, 66)


def _key(tokens) -> tuple:
    """common_ngram: up to LLAMA_NGRAM_MAX tokens, padded with LLAMA_TOKEN_NULL."""
    t = tuple(int(x) for x in tokens)
    return t + (LLAMA_TOKEN_NULL,) * (LLAMA_NGRAM_MAX - len(t))


# ---- libstdc++'s std::unordered_map iteration order (GCC 12.2 checked) ----------------------
# How libstdc++ lays out a map with unique keys (bits/hashtable.h, hashtable_c++0x.cc):
#   - every node is on one singly-linked list, and iteration walks that list. The nodes of a
#     bucket always sit next to each other on it;
#   - a new key whose bucket is empty goes to the head of the list. In a bucket that already
#     has nodes it goes in front of that bucket's first node (_M_insert_bucket_begin);
#   - before a key is inserted, _Prime_rehash_policy::_M_need_rehash may grow the table
#     (max_load_factor 1.0). The first insertion into a default-constructed map (1 bucket,
#     _M_next_resize 0) asks for max(1, 11) + 1 = 12 buckets, which _M_next_bkt's small table
#     rounds up to 13. After that, inserting a key when the count equals the bucket count asks
#     for max(count + 2, 2 x buckets), which is the first prime of __prime_list >= 2 x buckets;
#   - a rehash (_M_rehash_aux, unique keys) walks the old list in order and puts each node
#     by the same rule: at the head of the list if its new bucket is empty, otherwise in front
#     of that bucket's first node;
#   - a copy (try_draft's `const common_ngram_cache_part part = it->second`, and copying a whole
#     cache) keeps the bucket count, the policy's state and the list order (_M_assign).
# No entry is ever erased and an increment does not move a node, so the order depends only on
# the sequence of distinct keys inserted. The bucket counts below came from
# _Prime_rehash_policy::_M_need_rehash/_M_next_bkt compiled with g++ 12.2. A map that grew to
# 3 million elements showed the same steps.
LIBSTDCXX_BUCKETS = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229,
                     172933, 351061, 712697, 1447153, 2938679, 5967347, 12117689, 24607243,
                     49969847, 101473717, 206062531, 418451333, 849749479, 1725587117,
                     3504151727)
_M64 = (1 << 64) - 1
_FIB = 11400714819323198485            # common_token_hash_function (ngram-cache.h:40-45)


def token_hash(token: int) -> int:
    """std::hash<llama_token>: the int32 widened to size_t (the identity for token ids >= 0)."""
    return int(token) & _M64


def ngram_hash(ngram) -> int:
    """common_ngram_hash_function (ngram-cache.h:47-55): XOR of token * 11400714819323198485
    (mod 2**64) over the 4 slots, the -1 padding included."""
    h = 0
    for t in ngram:
        h ^= ((int(t) & _M64) * _FIB) & _M64
    return h


def libstdcxx_order(keys, hash_fn=token_hash) -> list:
    """The iteration order of a libstdc++ std::unordered_map after `keys` (distinct) were
    inserted into an empty map in this order, with hash_fn as its hasher.

    The list is kept as its bucket runs: `runs[b]` holds bucket b's keys newest-first reversed
    (so putting a key in front of its bucket is an append), and `heads` holds the buckets in
    the order they became non-empty (the list starts with the last one)."""
    runs: dict = {}
    heads: list = []
    n_bkt, step = 1, 0
    codes = {}

    def put(k, b):
        if b in runs:
            runs[b].append(k)                  # in front of its bucket's first node
        else:
            runs[b] = [k]                      # at the head of the list
            heads.append(b)

    for n, k in enumerate(keys):
        if n == (LIBSTDCXX_BUCKETS[step - 1] if step else 0):     # _M_need_rehash: grow
            if step == len(LIBSTDCXX_BUCKETS):
                raise ValueError("libstdcxx_order: more keys than the bucket table above covers")
            old = [x for b in reversed(heads) for x in reversed(runs[b])]
            n_bkt, step = LIBSTDCXX_BUCKETS[step], step + 1
            runs, heads = {}, []
            for x in old:                                          # _M_rehash_aux
                put(x, codes[x] % n_bkt)
        codes[k] = hash_fn(k)
        put(k, codes[k] % n_bkt)
    return [x for b in reversed(heads) for x in reversed(runs[b])]


def _first_best(part: dict, score) -> int:
    """The token master's `if (score > best)` loop over the part keeps: the first, in
    libstdc++'s iteration order, of those with the highest score."""
    best = max(score(t, c) for t, c in part.items())
    tied = [t for t, c in part.items() if score(t, c) == best]
    if len(tied) == 1:
        return tied[0]
    tied = set(tied)
    return next(t for t in libstdcxx_order(part) if t in tied)


def cache_update(cache: dict, ngram_min: int, ngram_max: int, inp: list, nnew: int) -> None:
    """common_ngram_cache_update (ngram-cache.cpp:12-52): count the n-grams of inp that end in
    its nnew newest tokens (an n-gram of size k needs k tokens of inp before its token)."""
    n = len(inp)
    for size in range(ngram_min, ngram_max + 1):
        for i in range(max(n - nnew, size), n):
            part = cache.setdefault(_key(inp[i - size:i]), {})
            part[inp[i]] = part.get(inp[i], 0) + 1


def _try_draft_static(nc_static: dict, ngram: tuple) -> int:
    """try_draft from the static cache alone (ngram-cache.cpp:65-95)."""
    part = nc_static.get(ngram)
    if not part:
        return LLAMA_TOKEN_NULL
    tok = _first_best(part, lambda t, c: c)                  # :77-86, ties in map order
    best, total = part[tok], sum(part.values())
    i = LLAMA_NGRAM_STATIC - 1
    if total < DRAFT_MIN_SAMPLE_SIZE_LAX[i] or 100 * best < DRAFT_MIN_PERCENT_LAX[i] * total:
        return LLAMA_TOKEN_NULL
    return tok


def _try_draft(nc: dict, ngrams: list, part_static: dict, min_size, min_percent) -> tuple[int, tuple]:
    """try_draft from a primary cache, validated by the static one (ngram-cache.cpp:97-144)."""
    for i in range(len(ngrams) - 1, -1, -1):                 # the longest n-gram first
        part = nc.get(ngrams[i])
        if not part:
            continue

        def weight(t):                                       # :121-124
            return 100 * part_static[t] if t in part_static else 1
        # :118-132: the first (map order) of the best count x weight; its count is checked
        tok = _first_best(part, lambda t, c: c * weight(t))
        best_p, total = part[tok], sum(part.values())
        if total < min_size[i] or 100 * best_p < min_percent[i] * total:    # :134-139
            continue
        return tok, ngrams[i]
    return LLAMA_TOKEN_NULL, ()


def cache_draft(inp: list, draft: list, n_draft: int, nc_context: dict, nc_dynamic: dict,
                nc_static: dict, ngram_min: int = LLAMA_NGRAM_MIN, ngram_max: int = LLAMA_NGRAM_MAX,
                used: list | None = None) -> None:
    """common_ngram_cache_draft (ngram-cache.cpp:146-198): extend draft = [id_last] in place.

    `used`, if a list, receives (n-gram, cache name) for each drafted token (for views).
    """
    assert len(draft) == 1
    n = len(inp)
    if n < LLAMA_NGRAM_STATIC:
        return

    def get(i):                                              # get_token (:54-57)
        return inp[i] if i < n else draft[1 + i - n]
    while len(draft) - 1 < n_draft:
        start = n - LLAMA_NGRAM_STATIC + len(draft) - 1
        ngram_static = _key(get(j) for j in range(start, start + LLAMA_NGRAM_STATIC))
        part_static = nc_static.get(ngram_static, {})
        ngrams_cd = []                                       # cd = context + dynamic
        for size in range(ngram_min, ngram_max + 1):
            s0 = n - size + len(draft) - 1
            # an n-gram longer than inp + draft would start before inp[0]: master's get_token
            # then reads outside the draft vector (size_t i wraps, undefined behaviour); here
            # such an n-gram matches nothing (None is no cache's key)
            ngrams_cd.append(_key(get(j) for j in range(s0, s0 + size)) if s0 >= 0 else None)
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


def cache_save(cache: dict, path, master_order: bool = False) -> None:
    """common_ngram_cache_save (:200-220): ngram (4 x int32), ntokens, then (token, count) pairs.

    By default the entries and pairs are written in the dicts' order, so that a loaded file is
    written back byte for byte. Master writes them in its maps' iteration order (:202, :211).
    With master_order=True they are written in that order (libstdc++'s, from the dicts'
    insertion order), giving the bytes master writes for the same cache. Loading those bytes,
    here or in master, makes each part's insertion order master's iteration order, which is
    how ties come out after master's own save and load.
    Written to a temporary file that replaces path in one rename: an interrupted save leaves
    the previous file whole. An n-gram with no counts is skipped (llama.cpp asserts there)."""
    flat = []
    ngrams = libstdcxx_order(list(cache), ngram_hash) if master_order else cache
    for ngram in ngrams:
        part = cache[ngram]
        if part:
            flat.extend(ngram)
            flat.append(len(part))
            for t in (libstdcxx_order(list(part)) if master_order else part):
                flat.append(t)
                flat.append(part[t])
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
    """common_ngram_cache_merge (:260-285). Master walks `add` in its map's order, and that
    order decides where new n-grams and new tokens land in target's own order (so in its ties
    and in what cache_save(master_order=True) writes). A new n-gram gets a copy of add's
    part, and a copied map keeps its order (:265-268)."""
    for ngram in libstdcxx_order(list(add), ngram_hash):
        part = add[ngram]
        dst = target.get(ngram)
        if dst is None:
            target[ngram] = dict(part)
            continue
        for t in libstdcxx_order(list(part)):                      # :271-283
            dst[t] = dst.get(t, 0) + part[t]


class NgramCache(SpeculativeImpl):
    """common_speculative_impl_ngram_cache (common/speculative.cpp:1994-2131 @34af94cd).

    Per sequence: a context cache and cache_size, the count of history tokens already handed to
    the update. draft() (:2065-2108) first updates the context cache, but only with the tokens
    that arrived since the last update: tokens_new = prompt[cache_size:] + [id_last], given to
    common_ngram_cache_update whole (nnew = its own length, :2073-2087). So only n-grams that lie
    entirely inside tokens_new are counted. One that starts before the old cache_size and ends
    in the new tokens is never counted (examples/lookup, which updates over the whole history
    with nnew = 1, does count it). Then it drafts from [prompt..., id_last] with
    common_ngram_cache_draft. begin() does nothing (:2061-2063), so the context cache and
    cache_size carry over into a later generation on the same impl, as in a llama-server slot.
    The draft is at most n_max tokens long (master: n_draft = 8, create_state_ngram_cache,
    :2154-2168). The dynamic and static caches are loaded once and are the same for every
    sequence (master gives each sequence its own copy; drafting never changes them). Their
    token ids are checked against n_vocab, the target's vocab size, which is needed when a file
    is given. Ties between equal counts: see the module's docstring.
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
        self.cache_size = [0] * n_seq      # seq_info::cache_size (:2003): tokens handed to the update

    def begin(self, seq: int, prompt) -> None:                          # :2061-2063: a no-op
        pass

    def draft(self, dps: list[DraftParams]) -> None:                    # :2115-2126
        from .ngram import NgramTokenInfo
        for s, dp in enumerate(dps):
            if not dp.drafting:
                continue
            prompt = [int(t) for t in dp.prompt]
            if self.cache_size[s] < len(prompt) + 1:                    # :2073-2087
                tokens_new = prompt[self.cache_size[s]:] + [int(dp.id_last)]
                cache_update(self.context[s], LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, tokens_new,
                             len(tokens_new))
                self.cache_size[s] = len(prompt) + 1
            inp = prompt + [int(dp.id_last)]                            # :2089-2094
            draft, used = [int(dp.id_last)], []                         # :2096
            cache_draft(inp, draft, self.n_max, self.context[s], self.nc_dynamic, self.nc_static,
                        used=used)                                      # :2098-2102
            dp.result[:] = draft[1:]                                    # :2104-2107
            self.info[s] = [NgramTokenInfo(t, g, -1, self.type, where)
                            for t, (g, where) in zip(draft[1:], used)]

    def save_dynamic(self) -> None:
        """Merge every context cache into the dynamic one and save it, as examples/lookup does at
        its end (lookup.cpp:220-222 @34af94cd; master's impl never saves: save_dynamic = false,
        :2161-2163), in master's byte order (cache_save(master_order=True))."""
        if not self.dynamic_path:
            raise ParamError("no dynamic n-gram cache file was given (lookup_cache_dynamic)")
        for c in self.context:
            cache_merge(self.nc_dynamic, c)
        cache_save(self.nc_dynamic, self.dynamic_path, master_order=True)
