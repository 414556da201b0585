"""Fuzz the model loader: any byte string given as a model file leads to a Model or a SpecnbError.

Seeds: two tiny forged models (Q8_0 and Q4_K matrices) and the header of the real default
model (SmolLM2-135M Q4_1), cut right after its tensor-info section (the 98 MB of weights are
too big to rewrite per example; that seed must itself give "tensor data outside the file").

gguf_fuzz_layout.py parses each seed's layout (offsets of the magic, version, counts, every
key/value's key length, key, type, value, array lengths, every tensor info's name, n_dims,
dims, type and offset, the data section) so that the mutations hit meaningful fields:

- `fields`:    one integer field set to a boundary or absurd value (0, 1, 2**31-1, 2**32,
               2**63, 2**64-1, just past the end of the file, the original +-1 ...);
- `types`:     a value type, array element type or tensor type set to another or unknown id;
- `bytes`:     truncation (at a section boundary or anywhere), byte swaps, insertions,
               deletions, overwrites, bit flips;
- `stacked`:   2-4 of the above in a row;
- `rebuild`:   a structurally valid file re-serialized after edits to its key/values and tensor
               infos (values of other types and absurd values, renamed/dropped/duplicated keys
               and tensors, other shapes/types/offsets), which gets past the parser into the
               model and vocab loaders;
- `forged`:    a GGUF forged from scratch out of random key/values and tensor infos;
- `truncate`:  (deterministic) each seed cut at every section, entry and field boundary;
- `retype`:    (deterministic) each key of the tiny seed given a value of every other kind;
- `large`:     (deterministic) the largest entry counts specnb reads, a 2**17-token table.

Property, for every case written to a temporary file: `load_model(path)` and
`load_model(path, vocab_only=True)` each return a Model (whose hyperparameters are usable) or
raise a `SpecnbError` subclass, within 5 s of CPU, with RSS growth (sampled every 2 ms) and,
on every third small case, peak Python/NumPy allocations (tracemalloc) under 16x the file
size + 64 MiB, and without modifying the file. A summary line (cases per strategy, outcomes,
slowest call, largest allocation) is printed when the module finishes.

Bugs the fuzzer found in the vocab loader (specnb/vocab/), now fixed, are pinned by regression
tests at the end. SPECNB_FUZZ_SCALE=10 runs ten times the examples.
"""
from __future__ import annotations

import math
import os
import re
import resource
import signal
import sys
import threading
import time
import tracemalloc
import warnings
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from specnb import ModelNotFoundError, SpecnbError
from specnb.model import testing
from specnb.gguf.file import GGUFFile
from specnb.model import Model, load_model
from specnb.model.registry import default_target_path
from gguf_fuzz_layout import (
    U8, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64, KV, TInfo, parse_layout, cut_points,
    build_gguf, encode, field_edit, apply_op, describe, byte_edit, INT_KINDS, TYPE_KINDS, SEEDS,
    seed_of, typed_value, KEYS, rebuild_edit, rebuild, real_cuts, with_kv)

TIME_LIMIT_S = 5.0          # CPU seconds per load_model call (CPU, so a busy CI box is no excuse)
HANG_ALARM_S = 30           # interrupt a real hang so that CI reports it instead of stalling
MEM_FACTOR, MEM_SLACK = 16, 64 << 20
TRACED_MAX_SIZE, TRACE_EVERY = 1 << 20, 3   # which cases also run under tracemalloc


# ---- the seeds -----------------------------------------------------------------------------
SEED_NAMES = ("tiny-Q8_0", "tiny-Q4_K", "real-header")
TINY_SEEDS = ("tiny-Q8_0", "tiny-Q4_K")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """name -> Seed; the real header only where the default model is installed."""
    d = tmp_path_factory.mktemp("fuzz-seeds")
    out = {}
    for qtype, n_embd, n_ff in (("Q8_0", 64, 128), ("Q4_K", 256, 512)):
        p = testing.tiny_model(d / f"seed-{qtype}.gguf", qtype=qtype, n_layer=2, n_embd=n_embd,
                             n_ff=n_ff, n_head=4, n_head_kv=2, seed=1)
        data = open(p, "rb").read()
        out[f"tiny-{qtype}"] = parse_layout(f"tiny-{qtype}", data, GGUFFile(p).data_offset)
    try:
        real = default_target_path(verify=False)    # only its header is read: no checksum
    except ModelNotFoundError:
        real = None                 # the tiny seeds stand in for it (see seed_of)
    if real is not None:
        g = GGUFFile(real)
        with open(real, "rb") as f:
            head = f.read(g.data_offset)
        g.close()
        full = parse_layout("real-header", head, g.data_offset)
        out["real-header"] = parse_layout("real-header", head[:full.tinfo_end])
    # warm every lazily compiled path (quant kernels) so the time guard measures the loader only
    for name in TINY_SEEDS:
        p = d / f"warm-{name}.gguf"
        p.write_bytes(out[name].data)
        load_model(p)
    _warm_dequantize()
    # the norm vectors are dequantized by a `parallel=True` kernel; on a busy 2-core machine
    # waking its threads costs ~5 ms a call against ~10 us on one thread (the setting is
    # per calling thread and restored afterwards)
    import numba
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    yield out
    numba.set_num_threads(threads)


def _warm_dequantize():
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from specnb.model import supported_qtypes
    from specnb.kernels.matmul import dequantize
    for q in supported_qtypes():
        blk, size = GGML_QUANT_SIZES[GGMLQuantizationType(q)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dequantize(np.zeros((1, size), np.uint8), q, blk)


# ---- running one case ----------------------------------------------------------------------
STATS: Counter = Counter()       # (strategy, outcome) -> count
CASES: Counter = Counter()       # strategy -> byte strings tried
CPU: Counter = Counter()         # strategy -> CPU seconds in check_case
SLOWEST = {"s": 0.0, "case": ""}
MEM_WORST = {"bytes": 0, "case": ""}


class _Hang(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Hang()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, pytestconfig):
    d = tmp_path_factory.mktemp("fuzz-cases")
    t0 = time.perf_counter()
    _SAMPLER.append(_RssSampler())
    yield d
    _SAMPLER.pop().close()
    per = ", ".join(f"{s}={n} in {CPU[s]:.1f} s" for s, n in sorted(CASES.items()))
    outcomes = Counter()
    for (_, o), n in STATS.items():
        outcomes[o] += n
    line = (f"fuzz_gguf: {sum(CASES.values())} byte strings ({per}), "
            f"{sum(outcomes.values())} load_model calls (vocab_only skipped where the parser "
            f"already refused the bytes): "
            + ", ".join(f"{o}={n}" for o, n in outcomes.most_common())
            + f"; {time.perf_counter() - t0:.0f} s; slowest call {SLOWEST['s']:.2f} s CPU "
            f"({SLOWEST['case']}); largest allocation {MEM_WORST['bytes'] / 2**20:.1f} MiB "
            f"({MEM_WORST['case']})")
    if COLLECT is not None:
        with open(COLLECT_PATH, "w") as f:
            for case, err in COLLECT:
                f.write(f"{case}\n    -> {err}\n")
        line += f"; {len(COLLECT)} failures written to {COLLECT_PATH}"
    cap = pytestconfig.pluginmanager.getplugin("capturemanager")
    if cap is not None:
        with cap.global_and_fixture_disabled():
            print("\n" + line, file=sys.stderr)
    else:
        print(line, file=sys.stderr)


_counter = [0]
# SPECNB_FUZZ_COLLECT=<file>: a long local hunt (with SPECNB_FUZZ_SCALE) records every failing
# case there and carries on, instead of stopping at the first
COLLECT_PATH = os.environ.get("SPECNB_FUZZ_COLLECT")
COLLECT = [] if COLLECT_PATH else None


def _note(msg: str) -> None:
    try:
        note(msg)           # shown with hypothesis's falsifying example
    except Exception:       # outside @given (the deterministic loops)
        print(msg, file=sys.stderr)


def check_case(workdir, strategy: str, data: bytes, desc: str) -> None:
    """The property, for one byte string."""
    _counter[0] += 1
    CASES[strategy] += 1
    cpu0 = time.process_time()
    path = workdir / f"case-{_counter[0]}.gguf"
    path.write_bytes(data)
    st0 = os.stat(path)
    try:
        for vocab_only in (False, True):
            outcome, in_parser = _load_guarded(path, vocab_only, len(data), f"{strategy}: {desc}")
            STATS[(strategy, outcome)] += 1
            if in_parser:
                break   # GGUFFile(path) refused the bytes: vocab_only=True opens it the same way
        st1 = os.stat(path)
        assert (st1.st_size, st1.st_mtime_ns) == (st0.st_size, st0.st_mtime_ns) \
            and path.read_bytes() == data, f"load_model modified its input file ({desc})"
    except BaseException as e:
        if COLLECT is not None and not isinstance(e, KeyboardInterrupt):
            COLLECT.append((desc, f"{type(e).__name__}: {e}"[:2000]))
            return
        keep = workdir / f"failing-{_counter[0]}.gguf"
        keep.write_bytes(data)
        _note(f"failing input saved as {keep}")
        raise
    finally:
        path.unlink()
        CPU[strategy] += time.process_time() - cpu0


class _RssSampler:
    """Peak resident set size while armed, sampled every 2 ms by one background thread.

    It sees what tracemalloc cannot (the tokenizers library's Rust allocations, the memory
    map's pages); tracemalloc sees short-lived Python/NumPy peaks the sampler might miss. One
    long-lived thread: starting and joining a thread per call costs ~10 ms on a busy machine.
    """
    PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def __init__(self):
        self.base = self.peak = 0
        self.armed = False
        self._lock = threading.Lock()
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fuzz-rss")
        self._thread.start()

    def rss(self) -> int:
        if self._fd is None:    # no /proc: the process's high-water mark is the best we have
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return int(os.pread(self._fd, 128, 0).split()[1]) * self.PAGE

    def _run(self):
        while not self._stop.wait(0.002):
            if self.armed:
                v = self.rss()
                with self._lock:
                    if self.armed and v > self.peak:
                        self.peak = v

    def __enter__(self):
        with self._lock:
            self.base = self.peak = self.rss()
            self.armed = True
        return self

    def __exit__(self, *exc):
        v = self.rss()
        with self._lock:
            self.armed = False
            self.peak = max(self.peak, v)

    @property
    def growth(self) -> int:
        return self.peak - self.base

    def close(self):
        self._stop.set()
        self._thread.join()
        if self._fd is not None:
            os.close(self._fd)


_SAMPLER: list = []     # the module's sampler, made by the workdir fixture


def _raised_in_parser(e: BaseException) -> bool:
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith("gguf_file.py"):
            return True
        tb = tb.tb_next
    return False


def _load_guarded(path, vocab_only: bool, size: int, desc: str):
    """load_model under the time and memory guards -> (outcome name, raised by the parser)."""
    call = f"load_model(vocab_only={vocab_only})"
    # tracemalloc doubles the cost of a tiny case and slows a 49k-string vocab parse 10x: it
    # runs on every TRACE_EVERY-th case of files up to TRACED_MAX_SIZE (the sampler on all)
    traced = size <= TRACED_MAX_SIZE and _counter[0] % TRACE_EVERY == 0
    own_tracing = traced and not tracemalloc.is_tracing()   # PYTHONTRACEMALLOC may be on
    if own_tracing:
        tracemalloc.start()
    if traced:
        tracemalloc.reset_peak()
        traced0 = tracemalloc.get_traced_memory()[0]
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_ALARM_S)
    result = outcome = None
    in_parser = False
    try:
        with _SAMPLER[0] as rss, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                result = load_model(path, vocab_only=vocab_only)
            finally:
                wall, dt = time.perf_counter() - t0, time.process_time() - c0
    except SpecnbError as e:
        outcome, in_parser = type(e).__name__, _raised_in_parser(e)
    except _Hang:
        pytest.fail(f"{call} still running after {HANG_ALARM_S} s on {desc}")
    except BaseException as e:      # noqa: BLE001 -- this is exactly what the fuzzer hunts
        raise AssertionError(f"{call} raised {type(e).__name__} (not a SpecnbError) on "
                             f"{desc}: {e}") from e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        peak = tracemalloc.get_traced_memory()[1] - traced0 if traced else 0
        if own_tracing:
            tracemalloc.stop()
    budget = MEM_FACTOR * size + MEM_SLACK
    worst = max(peak, rss.growth)
    if dt > SLOWEST["s"] and not traced:
        SLOWEST.update(s=dt, case=desc[:100])
    if worst > MEM_WORST["bytes"]:
        MEM_WORST.update(bytes=worst, case=desc[:100])
    # (under tracemalloc a parse of many small strings runs up to 10x slower: only the hang alarm)
    assert traced or dt < TIME_LIMIT_S, \
        f"{call} took {dt:.1f} s of CPU ({wall:.1f} s wall) on {desc}"
    assert peak < budget, f"{call} allocated {peak >> 20} MiB (file {size} bytes) on {desc}"
    assert rss.growth < budget, (f"{call} grew RSS by {rss.growth >> 20} MiB (file {size} bytes) "
                                 f"on {desc}")
    if outcome is not None:
        return outcome, in_parser
    assert isinstance(result, Model)
    if not vocab_only:
        _sane(result, desc)
    return "Model", False


def _sane(m: Model, desc: str) -> None:
    """A model that loads must have hyperparameters the kernels can run with."""
    h = m.hparams
    assert len(m.layers) == h.n_layer > 0, desc
    for name in ("n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train"):
        assert getattr(h, name) > 0, f"{name}={getattr(h, name)} loaded from {desc}"
    assert 0 < h.n_rot <= h.head_dim and h.n_rot % 2 == 0, f"n_rot={h.n_rot} loaded from {desc}"
    assert h.n_head % h.n_head_kv == 0, desc
    for name in ("norm_eps", "rope_freq_base", "rope_freq_scale"):
        v = getattr(h, name)
        low_ok = v >= 0 if name == "norm_eps" else v > 0
        assert isinstance(v, float) and math.isfinite(v) and low_ok, f"{name}={v} loaded from {desc}"
    assert m.vocab.n_vocab == h.n_vocab
    repr(m)


def _settings(n):
    # no shrinking: it reruns the loader hundreds of times, and each case's description (the
    # seed and the edits) is already a readable reproduction
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, derandomize=True,
                    database=None, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                    print_blob=True)


SCALE = float(os.environ.get("SPECNB_FUZZ_SCALE", "1"))   # more examples for a long local run
N_FIELDS, N_TYPES, N_BYTES, N_STACKED, N_REBUILD, N_FORGED = 200, 80, 200, 80, 200, 80


@_settings(N_FIELDS)
@given(data=st.data())
def test_fuzz_fields(seeds, workdir, data):
    seed = seed_of(seeds, data.draw(SEEDS, label="seed"))
    op = data.draw(field_edit(seed, INT_KINDS), label="edit")
    check_case(workdir, "fields", apply_op(seed.data, op), f"{seed.name}: {describe(op)}")


@_settings(N_TYPES)
@given(data=st.data())
def test_fuzz_types(seeds, workdir, data):
    seed = seed_of(seeds, data.draw(SEEDS, label="seed"))
    op = data.draw(field_edit(seed, TYPE_KINDS), label="edit")
    check_case(workdir, "types", apply_op(seed.data, op), f"{seed.name}: {describe(op)}")


@_settings(N_BYTES)
@given(data=st.data())
def test_fuzz_bytes(seeds, workdir, data):
    seed = seed_of(seeds, data.draw(SEEDS, label="seed"))
    op = data.draw(byte_edit(seed), label="edit")
    check_case(workdir, "bytes", apply_op(seed.data, op), f"{seed.name}: {describe(op)}")


@_settings(N_STACKED)
@given(data=st.data())
def test_fuzz_stacked(seeds, workdir, data):
    seed = seed_of(seeds, data.draw(SEEDS, label="seed"))
    ops = data.draw(st.lists(st.one_of(field_edit(seed, INT_KINDS + TYPE_KINDS), byte_edit(seed)),
                             min_size=2, max_size=4), label="edits")
    out = seed.data
    for op in ops:
        out = apply_op(out, op)
    check_case(workdir, "stacked", out, f"{seed.name}: " + "; ".join(map(describe, ops)))


@_settings(N_REBUILD)
@given(data=st.data())
def test_fuzz_rebuild(seeds, workdir, data):
    seed = seeds[data.draw(st.sampled_from(TINY_SEEDS), label="seed")]
    edits = data.draw(st.lists(rebuild_edit(seed), min_size=1, max_size=3), label="edits")
    desc = "; ".join(f"{e[0]} {e[1:]!r}"[:160] for e in edits)
    check_case(workdir, "rebuild", rebuild(seed, edits), f"{seed.name}: {desc}")


@_settings(N_FORGED)
@given(data=st.data())
def test_fuzz_forged(seeds, workdir, data):
    """A GGUF forged from scratch: random key/values (a valid vocab sometimes) and tensor infos."""
    seed = seeds["tiny-Q8_0"]
    kvs = []
    keys = data.draw(st.lists(st.sampled_from(KEYS[:-1]), max_size=10, unique=True), label="keys")
    for key in keys:
        orig = next((k for k in seed.kvs if k.key == key), None)
        if orig is not None and data.draw(st.booleans()):
            kvs.append(orig)
        else:
            t, v = data.draw(typed_value(), label=key.decode(errors="replace"))
            kvs.append(KV(key, t, v))
    names = [t.name for t in seed.tinfos]
    tis = data.draw(st.lists(st.builds(
        TInfo, st.sampled_from(names + [b"", b"x"]),
        st.lists(st.sampled_from([1, 2, 32, 64, 128, 256, 0, 2**33]), max_size=4),
        st.sampled_from([0, 1, 8, 2, 12, 30, 77]),
        st.integers(0, 64).map(lambda v: v * 32)), max_size=6), label="tensors")
    data_section = data.draw(st.sampled_from([b"", b"\0" * 32, bytes(range(256)) * 40]),
                             label="data")
    version = data.draw(st.sampled_from([2, 3, 3, 3]), label="version")
    out = build_gguf(version, kvs, tis, data_section)
    check_case(workdir, "forged", out, f"forged v{version}: {len(kvs)} kvs "
               f"{[(k.key[:40], k.vtype, k.value[:24]) for k in kvs]}, tensors "
               f"{[(t.name, t.dims, t.qtype, t.offset) for t in tis]}, "
               f"{len(data_section)} data bytes")


# ---- deterministic checks --------------------------------------------------------------------
def test_seeds_behave(seeds, workdir):
    """The unmutated seeds: the tiny models load; the cut real header names the missing data."""
    for name in TINY_SEEDS:
        p = workdir / f"{name}.gguf"
        p.write_bytes(seeds[name].data)
        m = load_model(p)
        assert m.hparams.n_layer == 2 and m.vocab.n_vocab > 256
        assert len(seeds[name].fields) > 100 and len(seeds[name].boundaries) > 100
    if "real-header" not in seeds:
        pytest.skip("the default model is not installed")
    real = seeds["real-header"]
    assert len(real.kvs) > 30 and len(real.tinfos) == 272
    p = workdir / "real-header.gguf"
    p.write_bytes(real.data)
    for vocab_only in (False, True):
        with pytest.raises(SpecnbError, match=r"tensor token_embd\.weight data .* outside the file"):
            load_model(p, vocab_only=vocab_only)


# every key of the tiny seed given a value of each other kind (the loaders must check types)
RETYPE_VALUES = [
    ("u32 0", U32, 0), ("u32 max", U32, 2**32 - 1), ("i32 -1", I32, -1), ("u64 max", U64, 2**64 - 1),
    ("i64 min", I64, -2**63), ("f32 nan", F32, math.nan), ("f32 -1", F32, -1.0),
    ("f64 inf", F64, math.inf), ("bool true", BOOL, 1), ("empty string", STRING, b""),
    ("string", STRING, b"gpt2"), ("string llama", STRING, b"llama"),
    ("invalid utf-8", STRING, b"\xff\xfe"),
    ("empty i32 array", ARRAY, (I32, [])), ("i32[1] array", ARRAY, (I32, [1])),
    ("i32[2] array", ARRAY, (I32, [1, 2])), ("f32[3] array", ARRAY, (F32, [1.0, math.nan, -1.0])),
    ("empty string array", ARRAY, (STRING, [])),
    ("string[2] array", ARRAY, (STRING, [b"llama", b"a b"])),
    ("nested array", ARRAY, (ARRAY, [(I32, [1])])),
]


def test_retype_every_key(seeds, workdir):
    """Each key/value of the tiny seed, in turn, replaced by a value of every other kind."""
    seed = seeds["tiny-Q8_0"]
    n = 0
    for i, kv in enumerate(seed.kvs):
        for label, t, v in RETYPE_VALUES:
            edit = ("kv_value", i, (t, encode(t, v)))
            check_case(workdir, "retype", rebuild(seed, [edit]),
                       f"{seed.name}: {kv.key.decode()} = {label}")
            n += 1
    assert n == len(seed.kvs) * len(RETYPE_VALUES)


def test_truncate_at_every_boundary(seeds, workdir):
    """Cut each seed at every section/entry/field boundary, one byte either side and mid-field
    (the forged Q8_0 seed and, thinned past its token strings, the real header)."""
    n = 0
    for name in SEED_NAMES:
        if name not in seeds:
            continue
        seed = seeds[name]
        if name == "tiny-Q8_0":
            cuts = cut_points(seed)
        elif name == "tiny-Q4_K":   # the same header layout as Q8_0's: its boundaries only
            cuts = sorted({b for b, _ in seed.boundaries})
        else:
            cuts = real_cuts(seed)
        for cut in cuts:
            check_case(workdir, "truncate", seed.data[:cut],
                       f"{name}: truncate at {cut} of {len(seed.data)}")
            n += 1
    assert n > 500


def test_large_counts_bounded(seeds, workdir):
    """Entry counts the file could hold but no model has: refused at the header, or parsed
    within the time and memory guards."""
    from specnb.gguf.file import MAX_KV, MAX_TENSORS
    # more tensor infos / keys than specnb reads: refused before the first entry is parsed
    tis = [TInfo(format(i, "x").encode(), [32], 0, 0) for i in range(MAX_TENSORS + 1)]
    with pytest.raises(SpecnbError, match=f"claims {MAX_TENSORS + 1} tensors; specnb reads at most"):
        p = workdir / "many-tensors.gguf"
        p.write_bytes(build_gguf(3, [], tis, b"\0" * 128))
        load_model(p)
    kvs = [KV(format(i, "x").encode(), U8, b"\0") for i in range(MAX_KV + 1)]
    with pytest.raises(SpecnbError, match=f"claims {MAX_KV + 1} metadata entries; specnb reads"):
        p = workdir / "many-kvs.gguf"
        p.write_bytes(build_gguf(3, kvs, [], b""))
        load_model(p)
    # the most tensor infos specnb reads, all valid (and overlapping: GGUF allows it)
    check_case(workdir, "large", build_gguf(3, [], tis[:MAX_TENSORS], b"\0" * 128),
               f"{MAX_TENSORS} tensor infos")
    # a 2**17-token table of empty strings with a llama header but no embedding matrix: the full
    # load refuses it before building the vocab; vocab_only builds it (within the guards)
    q8 = seeds["tiny-Q8_0"]
    big = [KV(k.key, k.vtype, k.value) for k in q8.kvs
           if not k.key.startswith(b"tokenizer.ggml.") or k.key == b"tokenizer.ggml.model"]
    big.append(KV(b"tokenizer.ggml.tokens", ARRAY, encode(ARRAY, (STRING, [b""] * (1 << 17)))))
    big.append(KV(b"tokenizer.ggml.merges", ARRAY, encode(ARRAY, (STRING, []))))
    check_case(workdir, "large", build_gguf(3, big, [], b""), "2**17 empty tokens, no tensors")
    assert STATS[("large", "Model")] == 1       # the vocab_only load of the big token table


# A numeric array given as tokenizer.ggml.model, .pre or an add_* flag was compared with a
# str / passed to bool(): NumPy's "truth value of an array is ambiguous" ValueError.
@pytest.mark.parametrize("key", ["tokenizer.ggml.model", "tokenizer.ggml.pre",
                                 "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                                 "tokenizer.ggml.add_space_prefix"])
@pytest.mark.parametrize("items", [[], [1, 2]], ids=["empty", "two"])
def test_vocab_bug_array_as_flag(seeds, workdir, key, items):
    p = workdir / "array-flag.gguf"
    p.write_bytes(with_kv(seeds["tiny-Q8_0"], key.encode(), ARRAY, (I32, items)))
    with pytest.raises(SpecnbError, match=re.escape(key)):
        load_model(p, vocab_only=True)


# A scalar tokenizer.ggml.token_type outside int32 (or an infinite float) made np.array(...,
# dtype=np.int32) raise OverflowError, which was not caught.
@pytest.mark.parametrize("t, v", [(U32, 2**32 - 1), (I64, -2**63), (F64, math.inf)],
                         ids=["u32-max", "i64-min", "f64-inf"])
def test_vocab_bug_token_type_overflow(seeds, workdir, t, v):
    p = workdir / "token-type.gguf"
    p.write_bytes(with_kv(seeds["tiny-Q8_0"], b"tokenizer.ggml.token_type", t, v))
    with pytest.raises(SpecnbError, match="token_type"):
        load_model(p, vocab_only=True)
