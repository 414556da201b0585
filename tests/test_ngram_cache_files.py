"""The lookup-cache files (-lcs / -lcd) are input: common_ngram_cache_save's layout
(common/ngram-cache.cpp @c392e50), read back only if every id fits the target's vocab and every
size fits the file, with a ParamError naming the file, the entry's byte offset and the value;
read with a closed handle; saved atomically."""
import gc
import json
import os
import random
import struct
import time
import warnings

import pytest

from specnb import ParamError
from specnb.speculation import ngram_cache
from specnb.app.cli import main
from specnb.speculation.ngram_cache import NgramCache, _key, cache_load, cache_save, cache_update
from specnb.speculation.params import SpecParams
from specnb.speculation.speculative import build_speculative

N_VOCAB = 49152


def entry(ngram, pairs) -> bytes:
    """One entry as common_ngram_cache_save writes it."""
    ngram = list(ngram) + [-1] * (4 - len(ngram))
    return struct.pack("<5i", *ngram, len(pairs)) + b"".join(struct.pack("<ii", t, c) for t, c in pairs)


GOOD = entry([7, 8], [(9, 3), (4, 1)])             # 36 bytes: the bad entry below is at byte 36


def _load(tmp_path, raw: bytes, n_vocab=N_VOCAB, name="c.bin"):
    p = tmp_path / name
    p.write_bytes(raw)
    return cache_load(p, n_vocab)


def _refused(tmp_path, raw: bytes, *parts, n_vocab=N_VOCAB):
    with pytest.raises(ParamError) as e:
        _load(tmp_path, raw, n_vocab)
    msg = str(e.value)
    assert "\n" not in msg
    for part in (str(tmp_path / "c.bin"), *parts):
        assert part in msg, (part, msg)
    return msg


def test_round_trip_of_random_caches(tmp_path):
    rng = random.Random(5)
    for _ in range(20):
        inp = [rng.randrange(300) for _ in range(rng.randrange(2, 400))]
        c = {}
        cache_update(c, 1, 4, inp, len(inp))
        p = tmp_path / "rt.bin"
        cache_save(c, p)
        assert cache_load(p, 300) == c
        # the layout, entry by entry, in the dict's order
        assert p.read_bytes() == b"".join(entry([t for t in k if t != -1], list(v.items()))
                                          for k, v in c.items())
    cache_save({}, p)
    assert p.read_bytes() == b"" and cache_load(p, 300) == {}
    # an n-gram with no counts is not written (llama.cpp's save asserts on one)
    cache_save({_key([1]): {}, _key([2]): {3: 1}}, p)
    assert cache_load(p, 300) == {_key([2]): {3: 1}}


def test_ids_outside_the_vocab_are_refused_with_file_offset_and_id(tmp_path):
    for bad in (999999, -5, N_VOCAB):
        msg = _refused(tmp_path, GOOD + entry([bad, 2], [(3, 1)]), "entry at byte 36",
                       f"n-gram token id {bad} ")
        assert f"[0, {N_VOCAB})" in msg
        msg = _refused(tmp_path, GOOD + entry([1, 2], [(3, 1), (bad, 2)]), "entry at byte 36",
                       f"drafted token id {bad} ")
    # LLAMA_TOKEN_NULL pads the n-gram; it is never a drafted token
    _refused(tmp_path, GOOD + entry([1], [(-1, 1)]), "entry at byte 36", "drafted token id -1 ")
    # the vocab is the one given: 299 tokens, as the tiny test models
    assert _load(tmp_path, entry([298], [(298, 1)]), n_vocab=299) == {_key([298]): {298: 1}}
    _refused(tmp_path, entry([298], [(299, 1)]), "drafted token id 299", n_vocab=299)


def test_ngram_padding_only_at_the_end(tmp_path):
    for size in range(1, 5):
        toks = list(range(10, 10 + size))
        assert _load(tmp_path, entry(toks, [(1, 1)])) == {_key(toks): {1: 1}}
    for ngram in ([1, -1, 2, -1], [-1, 1, -1, -1], [-1, -1, -1, -1], [1, 2, -1, 3]):
        raw = struct.pack("<5i", *ngram, 1) + struct.pack("<ii", 5, 1)
        _refused(tmp_path, GOOD + raw, "entry at byte 36", f"n-gram {tuple(ngram)}", "padding")


def test_truncated_files_are_refused(tmp_path):
    raw = GOOD + entry([1, 2, 3], [(4, 1)]) + entry([5], [(6, 2), (7, 1), (8, 9)])
    ends = {0, len(GOOD), len(GOOD) + 28, len(raw)}
    for cut in range(len(raw) + 1):
        if cut in ends:     # a cut between entries is a shorter valid file
            assert len(_load(tmp_path, raw[:cut])) == sorted(ends).index(cut)
        else:
            start = max(e for e in ends if e < cut)
            _refused(tmp_path, raw[:cut], f"entry at byte {start}:", "truncated")


def test_impossible_counts_are_refused_at_once(tmp_path):
    t0 = time.process_time()
    for k in (2**31 - 1, N_VOCAB + 1):     # more pairs than the vocab has tokens
        _refused(tmp_path, struct.pack("<5i", 1, -1, -1, -1, k) + b"\0" * 20, "entry at byte 0",
                 f"ntokens={k}, more than the vocab's {N_VOCAB} tokens")
    _refused(tmp_path, GOOD + struct.pack("<5i", 1, -1, -1, -1, 1000) + b"\0" * 20,
             "entry at byte 36", "ntokens=1000 needs 8000 bytes, 20 left")
    for k in (0, -1, -2**31):
        _refused(tmp_path, GOOD + struct.pack("<5i", 1, -1, -1, -1, k) + b"\0" * 8,
                 "entry at byte 36", f"ntokens={k};")
    for c in (0, -7):
        _refused(tmp_path, GOOD + entry([1], [(2, 1), (3, c)]), "entry at byte 36",
                 f"token 3 has count {c}")
    assert time.process_time() - t0 < 1.0


def test_duplicates_are_refused(tmp_path):
    # common_ngram_cache_load inserts with emplace, which keeps the first of two equal keys;
    # its save writes each n-gram and token once, so a duplicate is a damaged file
    _refused(tmp_path, GOOD + entry([1], [(2, 1)]) + entry([7, 8], [(5, 1)]),
             "entry at byte 64", "n-gram (7, 8, -1, -1) appears a second time, first at byte 0")
    _refused(tmp_path, GOOD + entry([1], [(2, 1), (3, 4), (2, 5)]), "entry at byte 36",
             "token 2 appears twice")


def test_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(ngram_cache, "MAX_FILE_BYTES", 64)
    assert _load(tmp_path, GOOD) == {_key([7, 8]): {9: 3, 4: 1}}
    raw = GOOD + entry([1], [(2, 1)])                    # 64 bytes: still read
    assert len(_load(tmp_path, raw)) == 2
    _refused(tmp_path, raw + entry([3], [(2, 1)]), "92 bytes", "at most 64 bytes (MAX_FILE_BYTES)")


def test_unreadable_files(tmp_path):
    with pytest.raises(ParamError, match="cannot read the n-gram cache .*missing.bin"):
        cache_load(tmp_path / "missing.bin", N_VOCAB)
    with pytest.raises(ParamError, match="cannot read the n-gram cache"):
        cache_load(tmp_path, N_VOCAB)                    # a directory


def test_no_resource_warning(tmp_path):
    p = tmp_path / "c.bin"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for raw in (GOOD, GOOD[:-3], entry([999999], [(1, 1)])):
            p.write_bytes(raw)
            try:
                cache_load(p, N_VOCAB)
            except ParamError:
                pass
        cache_save({_key([1]): {2: 3}}, p)
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]


class _Interrupted(BaseException):
    pass


def test_an_interrupted_save_leaves_the_previous_file(tmp_path, monkeypatch):
    p = tmp_path / "dyn.bin"
    old = GOOD + entry([1], [(2, 1)])
    p.write_bytes(old)
    real_open = open

    class HalfWriter:
        """A file that writes half of what it is given, then fails as `exc`."""
        def __init__(self, path, mode, exc):
            self.f, self.exc = real_open(path, mode), exc

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:len(data) // 2])
            self.f.flush()
            raise self.exc

    big = {_key([i, i + 1]): {i + 2: 5, i + 3: 1} for i in range(1000)}
    for exc, caught in ((_Interrupted(), _Interrupted), (OSError(28, "No space left on device"),
                                                         ParamError)):
        monkeypatch.setattr(ngram_cache, "open", lambda path, mode, exc=exc: HalfWriter(path, mode, exc),
                            raising=False)
        with pytest.raises(caught):
            cache_save(big, p)
        assert p.read_bytes() == old
        assert os.listdir(tmp_path) == ["dyn.bin"]       # no temporary file left beside it
    monkeypatch.undo()
    cache_save(big, p)
    assert cache_load(p, N_VOCAB) == big
    assert os.listdir(tmp_path) == ["dyn.bin"]


def test_save_refuses_values_outside_int32(tmp_path):
    with pytest.raises(ParamError, match="2147483648 does not fit"):
        cache_save({_key([1]): {2: 2**31}}, tmp_path / "c.bin")
    assert not (tmp_path / "c.bin").exists()


def test_ngram_cache_checks_its_files_against_the_target_vocab(tmp_path, tiny_model):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(GOOD + entry([1, 2], [(999999, 1)]))
    with pytest.raises(ParamError, match="n_vocab .* is needed"):
        NgramCache(static_path=bad)
    for kw in ({"lookup_cache_static": str(bad)}, {"lookup_cache_dynamic": str(bad)}):
        sp = SpecParams(types="ngram-cache", **kw).validate()
        with pytest.raises(ParamError, match=f"{bad}: entry at byte 36: drafted token id 999999 "
                                             rf"is outside the vocab \[0, {tiny_model.n_vocab}\)"):
            build_speculative(sp, tiny_model, None)
    # a missing dynamic file is an empty cache (a first run has none yet)
    sp = SpecParams(types="ngram-cache", lookup_cache_dynamic=str(tmp_path / "new.bin")).validate()
    assert build_speculative(sp, tiny_model, None).impls[0].nc_dynamic == {}


def test_cli_refuses_a_bad_lookup_cache_in_one_line(tmp_path, tiny_path, capsys):
    m = tiny_path("Q8_0")
    bad = tmp_path / "lcs.bin"
    bad.write_bytes(GOOD + entry([1, 2], [(999999, 1)]))
    good = tmp_path / "good.bin"
    good.write_bytes(GOOD)
    for flag in ("-lcs", "-lcd"):
        code = main(["speculative-simple", "-m", m, "-p", "the cat", "-n", "4", "--spec-type",
                     "ngram-cache", flag, str(bad)])
        out, err = capsys.readouterr()
        assert code == 2, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{bad}: entry at byte 36: drafted token id 999999 is outside the vocab" in err
        assert out == ""                                 # refused before any text
    code = main(["speculative-simple", "-m", m, "-p", "the cat", "-n", "4", "--spec-type",
                 "ngram-cache", "-lcs", str(good), "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["spec_types"] == ["ngram-cache"]
    code = main(["speculative-simple", "-m", m, "-p", "x", "--spec-type", "ngram-cache",
                 "-lcs", str(tmp_path / "missing.bin")])
    assert code == 2 and "cannot read the n-gram cache" in capsys.readouterr().err
