"""Fuzz the lookup-cache loader: any byte string given as -lcs/-lcd leads to a valid cache or a
ParamError.

Seeds: caches counted by common_ngram_cache_update's rules (n-grams of 1 to 4 tokens, and 2-grams
alone as lookup-create writes a static cache) over random token streams, in cache_save's layout.
Mutations, 1 to 3 stacked:
- `cut`:    truncation anywhere, or at an entry boundary +-1..4 bytes;
- `field`:  one int32 (an n-gram slot, ntokens, a token, a count) set to a boundary or absurd
            value (0, -1, -5, n_vocab - 1, n_vocab, 999999, 2**31 - 1, -2**31, the original +-1);
- `bytes`:  bit flips, overwrites, insertions, deletions;
- `entry`:  an entry repeated, moved or dropped (duplicate n-grams, misaligned entries);
- `token`:  an entry's second token made equal to its first;
- `random`: random bytes, or random int32s near the vocab's range (which get past the walk).

Property, for every case written to a file: cache_load(path, n_vocab) returns a cache whose
n-grams are 1 to 4 ids in [0, n_vocab) followed by -1 padding, whose entries each hold at least
one (token, count) pair with the token in [0, n_vocab) and 0 < count < 2**31, equal to what a
plain reading of common_ngram_cache_load with those checks gives, and which cache_save writes
back byte for byte; or it raises a one-line ParamError naming the file where that reading
refuses the file too. Never another exception; under 1 s of CPU per case.
SPECNB_FUZZ_SCALE=10 runs ten times the random cases, SPECNB_FUZZ_SEED=n draws others.
"""
from __future__ import annotations

import os
import random
import struct
import time
from collections import Counter

import pytest

from specnb.errors import ParamError
from specnb.speculation.ngram_cache import cache_load, cache_save, cache_update

TIME_LIMIT_S = 1.0
SCALE = float(os.environ.get("SPECNB_FUZZ_SCALE", "1"))
SEED = int(os.environ.get("SPECNB_FUZZ_SEED", "2524"))
N_RANDOM = 1500
STATS: Counter = Counter()          # (first mutation, outcome), and which check refused
CHECKS = {"cut short": "cut entry", "bytes, ": "pairs past the end", "more than the vocab's": "ntokens > n_vocab",
          "ntokens=": "ntokens <= 0", "n-gram token id": "n-gram id", "padding": "n-gram padding",
          "drafted token id": "drafted id", "has count": "count <= 0",
          "appears a second time": "duplicate n-gram", "appears twice": "duplicate token"}


def reference_load(data: bytes, n_vocab: int):
    """common_ngram_cache_load read plainly, with specnb's checks: the cache, or None."""
    cache, off = {}, 0
    while off < len(data):
        if off + 20 > len(data):
            return None
        *ngram, k = struct.unpack_from("<5i", data, off)
        off += 20
        size = next((i for i, t in enumerate(ngram) if t == -1), 4)
        if size == 0 or any(t != -1 for t in ngram[size:]) or \
                not all(0 <= t < n_vocab for t in ngram[:size]):
            return None
        if k <= 0 or off + 8 * k > len(data):
            return None
        part = {}
        for _ in range(k):
            t, c = struct.unpack_from("<ii", data, off)
            off += 8
            if not 0 <= t < n_vocab or c <= 0 or t in part:
                return None
            part[t] = c
        if tuple(ngram) in cache:
            return None
        cache[tuple(ngram)] = part
    return cache


def seed_file(rng: random.Random, n_vocab: int) -> bytes:
    c = {}
    inp = [rng.randrange(n_vocab) for _ in range(rng.randrange(2, 120))]
    lo, hi = (2, 2) if rng.random() < 0.3 else (1, 4)
    cache_update(c, lo, hi, inp, len(inp))
    flat = []
    for k, part in c.items():
        flat += [*k, len(part)]
        for t, n in part.items():
            flat += [t, n]
    return struct.pack(f"<{len(flat)}i", *flat)


def entry_starts(data: bytes) -> list[int]:
    out, off = [], 0
    while off + 20 <= len(data):
        out.append(off)
        off += 20 + 8 * max(struct.unpack_from("<i", data, off + 16)[0], 0)
    return out


def mutate(rng: random.Random, data: bytes, n_vocab: int) -> tuple[bytes, str]:
    op = rng.choice(["cut", "field", "field", "bytes", "entry", "token"])
    b = bytearray(data)
    if op == "token":                    # one continuation's token copied onto another's
        many = [o for o in entry_starts(data) if o + 36 <= len(b) and
                struct.unpack_from("<i", b, o + 16)[0] >= 2]
        if many:
            o = rng.choice(many)
            b[o + 28:o + 32] = b[o + 20:o + 24]
        return bytes(b), op
    if op == "cut":
        starts = entry_starts(data) or [0]
        cut = rng.choice([rng.randrange(len(b) + 1), rng.choice(starts) + rng.randint(-4, 4)])
        return bytes(b[:max(cut, 0)]), op
    if op == "field" and len(b) >= 4:
        i = 4 * rng.randrange(len(b) // 4)
        old = struct.unpack_from("<i", b, i)[0]
        v = rng.choice([0, 1, -1, -5, n_vocab - 1, n_vocab, n_vocab + 1, 999999, 2**31 - 1, -2**31,
                        old + 1, old - 1])
        struct.pack_into("<i", b, i, max(-2**31, min(2**31 - 1, v)))
        return bytes(b), op
    if op == "bytes" and b:
        kind = rng.randrange(4)
        i = rng.randrange(len(b))
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i] = rng.randrange(256)
        elif kind == 2:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            del b[i:i + rng.randint(1, 8)]
        return bytes(b), op
    starts = entry_starts(data)
    if len(starts) >= 1:
        bounds = starts + [len(data)]
        j = rng.randrange(len(starts))
        one = data[bounds[j]:bounds[j + 1]]
        rest = data[:bounds[j]] + data[bounds[j + 1]:]
        at = rng.choice(starts + [len(rest), rng.randrange(len(rest) + 1)])
        kind = rng.randrange(3)
        if kind == 0:
            return data + one, "entry"                            # repeated: a duplicate n-gram
        if kind == 1:
            return rest[:at] + one + rest[at:], "entry"           # moved (maybe mid-entry)
        return rest, "entry"                                      # dropped
    return data, "none"


def random_case(rng: random.Random, n_vocab: int) -> tuple[bytes, str]:
    if rng.random() < 0.5:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200))), "random"
    ints = []
    for _ in range(rng.randint(1, 6)):                            # plausible entries
        size = rng.randint(0, 4)
        ints += [rng.randint(-2, n_vocab + 1) for _ in range(size)] + [-1] * (4 - size)
        k = rng.choice([rng.randint(-1, 4), rng.randint(1, 3)])
        ints.append(k)
        for _ in range(max(k, 0) + rng.choice([0, 0, 0, -1, 1])):
            ints += [rng.randint(-2, n_vocab + 1), rng.randint(-1, 5)]
    return struct.pack(f"<{len(ints)}i", *ints), "random-ints"


def check_case(path, data: bytes, n_vocab: int, desc: str) -> str:
    """"loaded", or the check that refused the file."""
    path.write_bytes(data)
    want = reference_load(data, n_vocab)
    t0 = time.process_time()
    try:
        got = cache_load(path, n_vocab)
    except ParamError as e:
        got, msg = None, str(e)
        assert "\n" not in msg and str(path) in msg, (desc, msg)
        refused_by = next(v for k, v in CHECKS.items() if k in msg)
    cpu = time.process_time() - t0
    assert cpu < TIME_LIMIT_S, f"{cpu:.2f} s of CPU on {desc}"
    assert got == want, (desc, data.hex(), got, want)
    kind = desc.split("+")[0]
    if got is None:
        STATS[kind, "refused"] += 1
        STATS["refused by", refused_by] += 1
        return refused_by
    for ngram, part in got.items():
        size = sum(t != -1 for t in ngram)
        assert len(ngram) == 4 and 1 <= size and all(0 <= t < n_vocab for t in ngram[:size])
        assert all(t == -1 for t in ngram[size:])
        assert part and all(0 <= t < n_vocab and 0 < c < 2**31 for t, c in part.items())
    out = path.with_name("resaved.bin")
    cache_save(got, out)
    assert out.read_bytes() == data, desc
    STATS[kind, "loaded"] += 1
    return "loaded"


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    print("\nlookup-cache fuzz: " + ", ".join(f"{k} {o} {v}" for (k, o), v in sorted(STATS.items())))


def test_seeds_load_and_hostile_headers_are_refused(tmp_path):
    rng = random.Random(SEED)
    for n_vocab in (40, 300, 49152):
        for _ in range(10):
            assert check_case(tmp_path / "c.bin", seed_file(rng, n_vocab), n_vocab, "seed") == "loaded"
    hostile = [struct.pack("<5i", 1, -1, -1, -1, k) + b"\0" * 20 for k in (2**31 - 1, 49152, 49153, 3)]
    hostile += [b"\xff" * 40, b"\0" * 40, b"\1", b""]
    for raw in hostile:
        check_case(tmp_path / "c.bin", raw, 49152, "hostile")


def test_mutated_and_random_files(tmp_path):
    rng = random.Random(SEED + 1)
    outcomes = Counter()
    for _ in range(int(N_RANDOM * SCALE)):
        n_vocab = rng.choice([8, 40, 300])
        if rng.random() < 0.2:
            data, desc = random_case(rng, n_vocab)
        else:
            data, ops = seed_file(rng, n_vocab), []
            for _ in range(rng.randint(1, 3)):
                data, op = mutate(rng, data, n_vocab)
                ops.append(op)
            desc = "+".join(ops)
        outcomes[check_case(tmp_path / "c.bin", data, n_vocab, desc)] += 1
    # both outcomes are exercised (mutations that keep a valid file, and refusals), and every
    # check refuses some file
    assert outcomes["loaded"] > 20, outcomes
    assert set(outcomes) == {"loaded", *CHECKS.values()}, outcomes
