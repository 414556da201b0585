"""How far ahead the int8 kernels prefetch the weights, and how fast their dot product runs,
measured once per machine.

A decode step streams every weight byte from memory once, and one core can only keep so many
reads in flight. Some CPUs' hardware prefetchers run far enough ahead of the kernels' loads on
their own (the AMD Zen hosts; docs/lab/2026-12-03-xeon.md); on others a core waits for memory at every
few cache lines unless the kernel asks for the bytes it will read a little later (on an Intel
Xeon with AVX-512 the 1.5B's 1-row decode ran at 28% of the streaming probe without, 67% with).
The best distance is a property of the memory system, so it is measured, not looked up by
vendor name:

    prefetch_ahead()     the distance in bytes (-1: no prefetching), from the cached verdict, or
                         measured now (a few seconds, once per machine and kernel source)
    prefetch_ahead_x16() the same for the interleaved layouts (matmul_x16, matmul_x16k), which
                         stream one group-block of 16 rows after another and prefetch into L2, so
                         further ahead: measured apart, in the same run (prefetching into L1 slowed
                         a Zen 4's 32-block kernel; an Intel Xeon's prefetchers fell behind, and
                         its 1.5B decoded 1.32x faster with 16 KB ahead into L2)
    calibrate()          the measurement: a 1-row Q4_K product (the 1.5B's matrices' shape) over
                         a matrix larger than the last-level cache, in the file's layout and
                         interleaved, each candidate distance in turn, medians; the fastest wins
    python -m specnb.kernels.tuning   measures again and prints the table

The kernels take the distance as an argument (matmul_q8's `ahead`, -1 unless given); the CPU
backend resolves it here once per context (specnb/run/backend_cpu.py).
SPECNB_PREFETCH=off | BYTES | auto (the default) overrides the verdict. The distance is a hint to
the memory system only: every value gives bit-identical results (tests/test_matmul_q8.py).
The verdict is kept in prefetch.json in the stamped kernel-cache folder (kernels/machine.py),
keyed by the CPU and the thread count, so an edit of any kernel measures again.

The int8 compute limit: the peak rate of the 64-byte int8 dot product the kernels are built on
(tiles.tdot4: one VNNI vpdpbusd with AVX-512, sdot on ARM; with AVX2 alone the kernels' int16 form,
tiles.tdot4p's vpmaddubsw + vpaddw, finished by a vpmaddwd every 8 steps), the
roofline's compute ceiling (Williams, Waterman and Patterson 2009) for the int8 kernels. Each
extra row of a verification batch costs multiply-adds, not weight bytes, so `bench` sets what a
row beyond the first costs beside what it would cost at this rate, measured again beside its runs
(peak_beside: on a shared host the rate moves with the cores' other hardware threads):

    int8_peak()          G multiply-adds per second on n_threads threads at this SIMD level, from
                         the cached verdict, or measured now (about a second, once per machine)
    measure_int8_peak()  the measurement: every thread at once (prange over the threads, so SMT
                         siblings share a core as they do in a decode), each running tdot4 as the
                         kernels do (a weight vector against 4 activation bytes broadcast) into
                         PEAK_ROWS independent accumulators (latency does not limit it) on data
                         resident in L1, about `seconds` a round; the median of `reps` rounds

SPECNB_INT8_PEAK=<G multiply-adds per second> | auto (the default) overrides it. The verdict is
kept in int8_peak.json beside prefetch.json, keyed by the CPU, the thread count and the SIMD
level; a measurement during which other work held the CPUs (the threads had less than 90% of
their CPU time) serves its process only and is measured again next time. `python -m
specnb.kernels.tuning` measures both again and prints them.
"""
import math
import os
import statistics
import time

import numpy as np
from numba import njit, prange

from .machine import MachineRecord, machine_key
from .matmul_q8 import one_row_q4_k, pack_q8_k
from .matmul_x16k import PAIRS16, matmul_x16k_by
from .qtypes import Q4_KX16, X16K_QTYPES, type_sel
from .simd import _AVX512, _VNNI256, SIMD_LEVEL
from .simd_wide import vload_b64
from .tiles import tbcast4, tdot4, tdot4p, tfloat, tpairsum, tstore_hsum, tzeros

CANDIDATES = (-1, 256, 512, 1024, 2048, 4096)     # bytes ahead; -1: the hardware's prefetchers alone
CANDIDATES_X16 = (-1, 2048, 4096, 8192, 16384)    # the interleaved layouts' (into L2, so further ahead)
CAL_N_IN = 1536                                   # a row of the 1.5B's q / gate / up (6 super-blocks)


@njit(parallel=True, cache=True)
def _stream_rows(qx, dx, bs, w, out, ahead, n_chunks):
    # out[0, :] = x @ W^T for one activation row, every weight row through the decode loop's pass
    # (the 1-row Q4_K pass the fused forward pass runs), the rows split into n_chunks contiguous
    # parts (as the int8 driver splits them)
    n_out = w.shape[0]
    for c in prange(n_chunks):
        one_row_q4_k(qx, dx, bs, w, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks, ahead)


def _llc_bytes() -> int:
    # the last-level cache's size where the system says it (0 where it does not)
    for idx in range(4, 0, -1):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/index{idx}/size") as f:
                s = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
        try:
            return int(s.rstrip("KMGkmg")) * mult
        except ValueError:
            return 0
    return 0


def calibration_bytes() -> int:
    """The calibration matrix's size: four times the last-level cache (a matrix that fits there
    would measure the cache, not memory), 256 MiB to 1 GiB."""
    return int(min(1 << 30, max(256 << 20, 4 * _llc_bytes())))


def calibrate(candidates=CANDIDATES, reps: int = 5, nbytes: int | None = None,
              candidates_x16=CANDIDATES_X16) -> dict:
    """Time a 1-row Q4_K product over a matrix of `nbytes` (calibration_bytes()) with each
    distance in `candidates`, and interleaved (Q4_KX16: the same bytes regrouped, which the timing
    does not see) with each of `candidates_x16`, taking turns, `reps` rounds; returns {"ahead": the
    fastest, "ms": {distance: median ms}, "gb_s": {distance: GB/s}, "ahead_x16", "ms_x16",
    "gb_s_x16": the same interleaved, "mib": size, "threads": n}."""
    import numba
    for cs in (candidates, candidates_x16):
        if not cs or any(int(c) < -1 for c in cs):
            raise ValueError(f"calibrate: candidates must be distances >= 0 or -1 (none), not {cs!r}")
    nbytes = int(nbytes or calibration_bytes())
    rb = CAL_N_IN // 256 * 144
    n_out = max(16, nbytes // rb // 16 * 16)         # whole groups of 16 rows for the interleaved layout
    # every byte written (untouched pages would all read one zero page, from the cache); 0x3c
    # makes each block's scales ordinary float16 numbers, not subnormals
    w = np.full((n_out, rb), 0x3C, np.uint8)
    w.flags.writeable = False
    x = np.random.default_rng(0).standard_normal((1, CAL_N_IN)).astype(np.float32)
    qx, dx, bs = pack_q8_k(x)
    out = np.empty((1, n_out), np.float32)
    n_chunks = min(n_out, 32)
    # (the selection of a file with Q4_K and Q6_K matrices, as a Q4_K_M file's pass and the test
    # suite's all-types pass call it: the timed product is the kernel they compile, not a Q4_K-only
    # variant compiled for the calibration alone)
    sel = type_sel(X16K_QTYPES)

    def one_row(layout, c):
        if layout == "x16":
            matmul_x16k_by(x, w, Q4_KX16, out, sel.q4_kx16, sel.q6_kx16, c)
        else:
            _stream_rows(qx, dx, bs, w, out, c, n_chunks)
    for layout in ("file", "x16"):
        one_row(layout, -1)                                     # compiles, and touches every page
    times = {(layout, int(c)): [] for layout, cs in (("file", candidates), ("x16", candidates_x16)) for c in cs}
    for r in range(reps):
        order = list(times) if r % 2 == 0 else list(times)[::-1]
        for key in order:
            t = time.perf_counter()
            one_row(*key)
            times[key].append(time.perf_counter() - t)
    v = {"mib": w.nbytes / 2**20, "threads": numba.get_num_threads()}
    for layout, suffix in (("file", ""), ("x16", "_x16")):
        ms = {c: 1e3 * float(np.median(t)) for (lay, c), t in times.items() if lay == layout}
        v["ahead" + suffix] = min(ms, key=ms.get)
        v["ms" + suffix] = ms
        v["gb_s" + suffix] = {c: w.nbytes / (m / 1e3) / 1e9 for c, m in ms.items()}
    return v


# ---- the verdict, once per machine ---------------------------------------------------------------

PREFETCH = MachineRecord("prefetch.json",
                         valid=lambda v: all(isinstance(v.get(k), int) for k in ("ahead", "ahead_x16")))


def verdict_path() -> str:
    """prefetch.json in this kernel source's stamped cache folder."""
    return PREFETCH.path()


def _threads(n_threads) -> int:
    import numba
    return int(n_threads or numba.get_num_threads())


def cached_verdict(n_threads: int | None = None):
    """This machine's recorded calibration (calibrate()'s dict, with "date"), or None."""
    return PREFETCH.read(machine_key(_threads(n_threads)))


def _env_ahead():
    # SPECNB_PREFETCH as a distance (-1: off), or None for auto
    env = os.environ.get("SPECNB_PREFETCH", "auto").strip().lower()
    if env in ("off", "none", "-1"):
        return -1
    if env in ("", "auto"):
        return None
    try:
        ahead = int(env)
    except ValueError:
        ahead = -2
    if ahead < 0:
        raise ValueError(f"SPECNB_PREFETCH={env!r}: expected auto, off or a distance in bytes >= 0")
    return ahead


def _verdict(n_threads, on_measure) -> dict:
    # the verdict for n_threads: remembered, recorded, or measured now and recorded
    n = _threads(n_threads)
    return PREFETCH.get(machine_key(n), lambda: _calibrated(n), on_measure,
                        "measuring how far ahead to prefetch the weights on this CPU (once)")


def prefetch_ahead(n_threads: int | None = None, on_measure=None) -> int:
    """The int8 kernels' prefetch distance in bytes (-1: none): SPECNB_PREFETCH if set, else the
    recorded verdict for this machine, else calibrate() now and record it. on_measure(text) is
    called before a measurement (the progress line of a first run)."""
    env = _env_ahead()
    return env if env is not None else int(_verdict(n_threads, on_measure)["ahead"])


def prefetch_ahead_x16(n_threads: int | None = None, on_measure=None) -> int:
    """The same for the interleaved layouts (matmul_x16, matmul_x16k), from the same verdict;
    SPECNB_PREFETCH, where set, sets both."""
    env = _env_ahead()
    return env if env is not None else int(_verdict(n_threads, on_measure)["ahead_x16"])


def _calibrated(n_threads: int, **kw) -> dict:
    # calibrate() on n_threads threads, its tables rounded for the record
    import numba
    before = numba.get_num_threads()
    numba.set_num_threads(n_threads)
    try:
        v = calibrate(**kw)
    finally:
        numba.set_num_threads(before)
    for k in ("ms", "gb_s", "ms_x16", "gb_s_x16"):
        v[k] = {str(c): round(m, 3 if k.startswith("ms") else 2) for c, m in v[k].items()}
    return v


def measure_and_record(n_threads: int | None = None, **kw) -> dict:
    """calibrate() with n_threads threads and record the verdict for prefetch_ahead()."""
    n = _threads(n_threads)
    return PREFETCH.put(machine_key(n), _calibrated(n, **kw))


def describe(v: dict) -> str:
    """One line: the chosen distances and each candidate's GB/s, in the file's layout and the
    interleaved one."""
    name = lambda c: "off" if int(c) < 0 else f"{int(c)} B"            # noqa: E731

    def cells(suffix):
        return ", ".join(f"{name(c)} {float(g):.1f}" for c, g in v["gb_s" + suffix].items())
    verdict = ("do not prefetch the weights" if int(v["ahead"]) < 0
               else f"prefetch the weights {name(v['ahead'])} ahead")
    x16 = int(v["ahead_x16"])
    verdict += ", interleaved ones " + ("not at all" if x16 < 0 else f"{name(x16)} ahead")
    return (f"int8 kernels {verdict} (measured on this CPU, {v['threads']} threads, 1-row Q4_K over "
            f"{v['mib']:.0f} MiB, GB/s: {cells('')}; interleaved: {cells('_x16')})")


# ---- the int8 compute limit, once per machine ---------------------------------------------------

PEAK_ENV = "SPECNB_INT8_PEAK"
PEAK_ROWS = 12 if _AVX512 else 6 if _VNNI256 else 4   # accumulators per thread: a VNNI vpdpbusd's
# latency is about 5 cycles at 1-2 a cycle (AVX-VNNI, two 256-bit halves a row: 4 rows 343, 6 rows
# 451, 8 rows 320 G/s on the Intel Xeon family 6 model 167); AVX2's int16 sums chain through vpaddw only
PEAK_VECS = 16                        # 64-byte vectors per row of a thread's data: (1 + PEAK_ROWS) KiB
MIN_CPU_SHARE = 0.9                   # a measurement whose threads had less of their CPUs is not kept
MACS_PER_DOT = 64                     # multiply-adds of one tdot4 (64 bytes times 64 bytes)
PEAK_INSTRUCTIONS = {"avx512": "VNNI vpdpbusd", "avxvnni": "AVX-VNNI vpdpbusd (256-bit)",
                     "avx2": "vpmaddubsw + vpaddw (int16 sums of 8, then a vpmaddwd)", "neon": "sdot",
                     "neon-i8mm": "usdot", "generic": "plain LLVM vector multiply-adds"}


# AVX2 without VNNI: the 32-block and K kernels sum their pmaddubsw pairs in int16 over 8 steps
# (nibble weights: 8 x 2 x 15 x 127 < 2^15) and finish with one pmaddwd (matmul_x16k.PAIRS16); tdot4's
# pmaddwd and int32 add per step ran at 145-195 G/s where this form ran 246-248 on an AMD EPYC Zen 3
# (family 25 model 1), 2 threads: measured as tdot4, the limit sat below what the kernels reached
PEAK_STEPS16 = 8


@njit(fastmath=False, forceinline=True, _nrt=False)
def _peak_operands(w, x, wb, xb, row, it):
    # round it's weight vector and every row's 4 activation bytes broadcast (_dot4_rounds)
    off = (it % PEAK_VECS) * 64
    return vload_b64(w, wb + off), tbcast4(x, xb + off + 4 * ((it // PEAK_VECS) % 16), row, PEAK_ROWS)


@njit(cache=True, fastmath=False)
def _dot4_rounds(w, x, out, t, n_iter):
    # thread t's part: n_iter rounds of PEAK_ROWS 64-byte dot products in the kernels' own form
    # (tiles.tdot4 of one weight vector and each row's 4 activation bytes broadcast: with VNNI a
    # vpdpbusd with a {1to16} memory operand; PAIRS16: tdot4p into int16 pair sums, tpairsum after
    # every PEAK_STEPS16, so the weights must be nibbles) into PEAK_ROWS independent accumulators.
    # Round i takes weight vector i mod PEAK_VECS and word (i / PEAK_VECS) mod 16 of that vector's
    # 64 bytes in each activation row, so 16 PEAK_VECS rounds visit every pair once; every load
    # comes from L1 and none is hoisted. (Whole 64-byte activation loads instead bound a Zen 4 by
    # its load ports: 190-196 G/s a thread against 235 with the broadcasts the kernels use.)
    row = PEAK_VECS * 64
    wb = t * row
    xb = t * PEAK_ROWS * row
    acc = tzeros(np.int32, 16, PEAK_ROWS)
    if PAIRS16:                                         # (a constant: one branch compiles)
        for i0 in range(0, n_iter, PEAK_STEPS16):
            s = tzeros(np.int32, 16, PEAK_ROWS)         # the int16 pair sums of PEAK_STEPS16 rounds
            for it in range(i0, min(i0 + PEAK_STEPS16, n_iter)):
                wv, xv = _peak_operands(w, x, wb, xb, row, it)
                s = tdot4p(s, wv, xv)
            acc = tpairsum(acc, s)
    else:
        for it in range(n_iter):
            wv, xv = _peak_operands(w, x, wb, xb, row, it)
            acc = tdot4(acc, wv, xv)
    tstore_hsum(out, t * PEAK_ROWS, 1, tfloat(acc))        # (so that the sums are not dead code)


@njit(parallel=True, cache=True)
def _dot4_peak(w, x, out, n_threads, n_iter):
    for t in prange(n_threads):
        _dot4_rounds(w, x, out, t, n_iter)


def _cache_line_aligned(a: np.ndarray) -> np.ndarray:
    """A copy of the 1-D array a starting on a 64-byte boundary. The probe's 64-byte loads must not
    straddle two cache lines: NumPy places small arrays 16 bytes past one, and on a Zen 4 a thread's
    rate fell from 190 to 130 G/s with its activations there."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    s = -buf.ctypes.data % 64
    out = buf[s:s + a.nbytes].view(a.dtype)
    out[:] = a
    return out


def measure_int8_peak(n_threads: int | None = None, reps: int = 5, seconds: float = 0.15) -> dict:
    """G int8 multiply-adds per second of tiles.tdot4 on n_threads threads at once (default:
    Numba's thread count), each with its own (1 + PEAK_ROWS) KiB of data: rounds of about `seconds`,
    the median of `reps`. Returns {"gmacs_s", "rounds_gmacs_s", "threads", "simd_level",
    "instruction", "accumulators", "iterations", "cpu_share"}; cpu_share is the process's CPU time
    over the rounds / (their wall time x n_threads): below 1 when other work held the CPUs."""
    import numba
    n = int(n_threads or numba.get_num_threads())
    if n < 1 or reps < 1 or not seconds > 0:
        raise ValueError(f"measure_int8_peak: needs n_threads >= 1, reps >= 1, seconds > 0, not "
                         f"{n_threads!r}, {reps!r}, {seconds!r}")
    # nibble weights and activations in -127..127, as the 4-bit kernels call tdot4 and tdot4p (no
    # vpmaddubsw saturation, and int16 pair sums of 8 steps exact)
    rng = np.random.default_rng(0)
    w = _cache_line_aligned(rng.integers(0, 16, n * PEAK_VECS * 64, dtype=np.uint8))
    x = _cache_line_aligned(rng.integers(-127, 128, n * PEAK_ROWS * PEAK_VECS * 64, dtype=np.int8))
    out = np.empty(n * PEAK_ROWS, np.float32)
    before = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        def run(n_iter):
            t = time.perf_counter()
            _dot4_peak(w, x, out, n, n_iter)
            return time.perf_counter() - t
        run(PEAK_VECS)                                  # compiles (or loads from the cache)
        n_iter = 1 << 14
        while (dt := run(n_iter)) < seconds / 8 and n_iter < 1 << 40:
            n_iter *= 4
        n_iter = max(PEAK_VECS, int(n_iter * seconds / max(dt, 1e-9)))
        macs = n * n_iter * PEAK_ROWS * MACS_PER_DOT
        cpu = time.process_time()
        walls = [run(n_iter) for _ in range(reps)]
        cpu = time.process_time() - cpu
    finally:
        numba.set_num_threads(before)
    rounds = [macs / t / 1e9 for t in walls]
    return {"gmacs_s": float(np.median(rounds)), "rounds_gmacs_s": rounds, "threads": n,
            "simd_level": SIMD_LEVEL, "instruction": PEAK_INSTRUCTIONS.get(SIMD_LEVEL, SIMD_LEVEL),
            "accumulators": PEAK_ROWS, "iterations": n_iter,
            "cpu_share": min(1.0, cpu / sum(walls) / n)}


def _peak_ok(v: dict) -> bool:
    return isinstance(v.get("gmacs_s"), (int, float)) and v["gmacs_s"] > 0


PEAK = MachineRecord("int8_peak.json", valid=_peak_ok)


def peak_path() -> str:
    """int8_peak.json in this kernel source's stamped cache folder (beside prefetch.json)."""
    return PEAK.path()


def _peak_key(n_threads: int) -> str:
    return f"{machine_key(n_threads)}|SIMD {SIMD_LEVEL}"


def cached_int8_peak(n_threads: int | None = None):
    """This machine's recorded int8 compute limit (measure_int8_peak()'s dict, with "date"), or None."""
    return PEAK.read(_peak_key(_threads(n_threads)))


def _peak_from_env():
    # SPECNB_INT8_PEAK as G multiply-adds per second, or None (auto)
    raw = os.environ.get(PEAK_ENV, "auto")
    env = raw.strip().lower()
    if env in ("", "auto"):
        return None
    try:
        g = float(env)
    except ValueError:
        g = math.nan
    if not (math.isfinite(g) and g > 0):
        raise ValueError(f"{PEAK_ENV}={raw!r}: expected auto or the int8 compute limit in G "
                         f"multiply-adds per second, a number > 0 (e.g. 250)")
    return g


def int8_peak_verdict(n_threads: int | None = None, on_measure=None) -> dict:
    """The int8 compute limit as a dict ("gmacs_s", "threads", "simd_level", "source": "measured"
    or SPECNB_INT8_PEAK): the environment's value if set, else the recorded verdict for this
    machine, else measure_int8_peak() now, recorded. on_measure(text) is called before a
    measurement."""
    n_threads = _threads(n_threads)
    g = _peak_from_env()
    if g is not None:
        return {"gmacs_s": g, "threads": n_threads, "simd_level": SIMD_LEVEL,
                "instruction": PEAK_INSTRUCTIONS.get(SIMD_LEVEL, SIMD_LEVEL), "source": PEAK_ENV}
    v = PEAK.get(_peak_key(n_threads), lambda: _measured_peak(n_threads), on_measure,
                 "measuring the int8 compute limit of this CPU (once)", keep=lambda v: v["recorded"])
    return {"source": "measured", **v}          # (peak_beside's names its own)


def int8_peak(n_threads: int | None = None, on_measure=None) -> float:
    """G int8 multiply-adds per second this machine's n_threads threads do at most with the
    kernels' dot product (int8_peak_verdict()'s "gmacs_s")."""
    return float(int8_peak_verdict(n_threads, on_measure)["gmacs_s"])


def _measured_peak(n_threads: int, **kw) -> dict:
    # measure_int8_peak(), marked "recorded" unless other work held the CPUs meanwhile
    v = measure_int8_peak(n_threads, **kw)
    v["rounds_gmacs_s"] = [round(g, 2) for g in v["rounds_gmacs_s"]]
    v["recorded"] = v.get("cpu_share", 1.0) >= MIN_CPU_SHARE
    return v


def record_int8_peak(n_threads: int | None = None, **kw) -> dict:
    """measure_int8_peak() and record the verdict for int8_peak(), unless other work held the
    CPUs meanwhile (cpu_share below MIN_CPU_SHARE): then it serves this process only, and the
    next one measures again."""
    n_threads = _threads(n_threads)
    v = _measured_peak(n_threads, **kw)
    key = _peak_key(n_threads)
    if v["recorded"]:
        return PEAK.put(key, v)
    PEAK.memo[key] = v
    return v


def start_int8_probes(n_threads: int, on_measure=None) -> list | None:
    """The first of a run's probes of the int8 limit beside its work ([measure_int8_peak()], for
    peak_beside once the run has probed again after it), with a figure recorded for this machine
    first (int8_peak_verdict); None where SPECNB_INT8_PEAK sets the limit: nothing is probed then."""
    if int8_peak_verdict(n_threads, on_measure).get("source") == PEAK_ENV:
        return None
    return [measure_int8_peak(n_threads)]


def peak_beside(probes: list) -> dict:
    """The int8 limit of a run that measured it beside its own work (bench: before, between and
    after its repetitions, as it measures the bandwidth): the median of the probes'
    measure_int8_peak() dicts, their figures in "probes_gmacs_s", the figure recorded for this
    machine beside it ("recorded_gmacs_s": cached_int8_peak's, never a figure an earlier run set
    for its process with use_int8_peak). On a shared host the limit moves with whatever runs on the
    cores' other hardware threads (an AMD EPYC Zen 3: 65-126 G/s on one thread within five
    minutes), so a row's cost is set beside the limit of its own minutes."""
    if not probes:
        raise ValueError("peak_beside: needs at least one probe")
    g = [float(p["gmacs_s"]) for p in probes]
    out = dict(probes[0], gmacs_s=statistics.median(g), probes_gmacs_s=[round(x, 2) for x in g],
               cpu_share=min(float(p.get("cpu_share", 1.0)) for p in probes), source="measured beside the runs")
    out.pop("rounds_gmacs_s", None)
    recorded = cached_int8_peak(probes[0].get("threads"))
    if recorded is not None:
        out["recorded_gmacs_s"] = float(recorded["gmacs_s"])
    return out


def use_int8_peak(n_threads: int, verdict: dict) -> None:
    """int8_peak(n_threads) returns verdict's figure for the rest of this process (bench: the
    limit measured beside its runs, which its roofline then uses too); the recorded verdict
    stays as it is."""
    PEAK.memo[_peak_key(int(n_threads))] = dict(verdict)


def describe_int8_peak(v: dict) -> str:
    """One line: the limit, its thread count and SIMD level, and where it comes from."""
    if v.get("probes_gmacs_s"):
        how = (f"{v.get('instruction', '?')}; the median of {len(v['probes_gmacs_s'])} probes beside the runs: "
               + ", ".join(f"{float(g):.1f}" for g in v["probes_gmacs_s"])
               + (f"; recorded for this machine: {v['recorded_gmacs_s']:.1f}" if v.get("recorded_gmacs_s") else ""))
    else:
        how = (f"from {PEAK_ENV}" if v.get("source") == PEAK_ENV else
               f"measured: {v.get('instruction', '?')} into {v.get('accumulators', '?')} accumulators per "
               f"thread, a weight vector times 4 activation bytes broadcast (as the kernels multiply), data in L1"
               + (", rounds " + ", ".join(f"{float(g):.1f}" for g in v["rounds_gmacs_s"]) if v.get("rounds_gmacs_s")
                  else ""))
        if v.get("source") != PEAK_ENV and v.get("cpu_share", 1.0) < MIN_CPU_SHARE:
            how += (f"; its threads had {v['cpu_share']:.0%} of their CPUs, other work was running: an "
                    f"understatement, not recorded")
    threads = f"{v['threads']} thread" + ("" if v["threads"] == 1 else "s")
    return (f"int8 compute limit: {float(v['gmacs_s']):.1f} G multiply-adds/s on {threads} "
            f"(SIMD level {v['simd_level']}; {how})")


if __name__ == "__main__":
    print(describe(measure_and_record()))
    print(describe_int8_peak(record_int8_peak()))
    if _peak_from_env() is not None:
        print(f"({PEAK_ENV}={os.environ[PEAK_ENV]} overrides it: int8_peak() = {_peak_from_env():g})")
