"""How far ahead the int8 kernels prefetch the weights, measured once per machine.

A decode step streams every weight byte from memory once, and one core can only keep so many
reads in flight. Some CPUs' hardware prefetchers run far enough ahead of the kernels' loads on
their own (the AMD Zen hosts in docs/benchmarks.md); on others a core waits for memory at every
few cache lines unless the kernel asks for the bytes it will read a little later (on an Intel
Xeon with AVX-512 the 1.5B's 1-row decode ran at 28% of the streaming probe without, 67% with).
The best distance is a property of the memory system, so it is measured, not looked up by
vendor name:

    prefetch_ahead()     the distance in bytes (-1: no prefetching), from the cached verdict, or
                         measured now (a few seconds, once per machine and kernel source)
    calibrate()          the measurement: a 1-row Q4_K product (the 1.5B's matrices' shape) over
                         a matrix larger than the last-level cache, each candidate distance in
                         turn, medians; the fastest wins
    python -m specnb.kernels.tuning   measures again and prints the table

The kernels take the distance as an argument (matmul_q8's `ahead`, -1 unless given); the CPU
backend resolves it here once per context (specnb/run/backend_cpu.py).
SPECNB_PREFETCH=off | BYTES | auto (the default) overrides the verdict. The distance is a hint to
the memory system only: every value gives bit-identical results (tests/test_matmul_q8.py).
The verdict is kept in prefetch.json in the stamped kernel-cache folder (kernels/__init__.py),
keyed by the CPU and the thread count, so an edit of any kernel measures again.
"""
import json
import os
import time

import numpy as np
from numba import njit, prange

from .matmul_q8 import one_row_q4_k, pack_q8_k

CANDIDATES = (-1, 256, 512, 1024, 2048, 4096)     # bytes ahead; -1: the hardware's prefetchers alone
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


def calibrate(candidates=CANDIDATES, reps: int = 5, nbytes: int | None = None) -> dict:
    """Time a 1-row Q4_K product over a matrix of `nbytes` (calibration_bytes()) with each
    distance in `candidates`, taking turns, `reps` rounds; returns {"ahead": the fastest,
    "ms": {distance: median ms}, "gb_s": {distance: GB/s}, "mib": size, "threads": n}."""
    import numba
    if not candidates or any(int(c) < -1 for c in candidates):
        raise ValueError(f"calibrate: candidates must be distances >= 0 or -1 (none), not {candidates!r}")
    nbytes = int(nbytes or calibration_bytes())
    rb = CAL_N_IN // 256 * 144
    n_out = max(1, nbytes // rb)
    # every byte written (untouched pages would all read one zero page, from the cache); 0x3c
    # makes each block's scales ordinary float16 numbers, not subnormals
    w = np.full((n_out, rb), 0x3C, np.uint8)
    w.flags.writeable = False
    x = np.random.default_rng(0).standard_normal((1, CAL_N_IN)).astype(np.float32)
    qx, dx, bs = pack_q8_k(x)
    out = np.empty((1, n_out), np.float32)
    n_chunks = min(n_out, 32)
    _stream_rows(qx, dx, bs, w, out, -1, n_chunks)             # compiles, and touches every page
    times = {int(c): [] for c in candidates}
    for r in range(reps):
        order = list(times) if r % 2 == 0 else list(times)[::-1]
        for c in order:
            t = time.perf_counter()
            _stream_rows(qx, dx, bs, w, out, c, n_chunks)
            times[c].append(time.perf_counter() - t)
    ms = {c: 1e3 * float(np.median(v)) for c, v in times.items()}
    best = min(ms, key=ms.get)
    return {"ahead": best, "ms": ms, "gb_s": {c: w.nbytes / (m / 1e3) / 1e9 for c, m in ms.items()},
            "mib": w.nbytes / 2**20, "threads": numba.get_num_threads()}


# ---- the verdict, once per machine ---------------------------------------------------------------

def _machine_key(n_threads: int) -> str:
    from llvmlite import binding as llvm
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{model or llvm.get_host_cpu_name()}|{os.cpu_count()} CPUs|{n_threads} threads"


def verdict_path() -> str:
    """prefetch.json in this kernel source's stamped cache folder."""
    from . import cache_folder
    return os.path.join(cache_folder(), "prefetch.json")


def _read_verdicts(path: str) -> dict:
    try:
        with open(path) as f:
            v = json.load(f)
        return v if isinstance(v, dict) else {}
    except (OSError, ValueError):
        return {}                      # missing or unreadable: measured again, then rewritten


_memo: dict = {}


def cached_verdict(n_threads: int | None = None):
    """This machine's recorded calibration (calibrate()'s dict, with "date"), or None."""
    import numba
    key = _machine_key(n_threads or numba.get_num_threads())
    v = _read_verdicts(verdict_path()).get(key)
    return v if isinstance(v, dict) and isinstance(v.get("ahead"), int) else None


def prefetch_ahead(n_threads: int | None = None, on_measure=None) -> int:
    """The int8 kernels' prefetch distance in bytes (-1: none): SPECNB_PREFETCH if set, else the
    recorded verdict for this machine, else calibrate() now and record it. on_measure(text) is
    called before a measurement (the progress line of a first run)."""
    import numba
    env = os.environ.get("SPECNB_PREFETCH", "auto").strip().lower()
    if env in ("off", "none", "-1"):
        return -1
    if env not in ("", "auto"):
        try:
            ahead = int(env)
        except ValueError:
            ahead = -2
        if ahead < 0:
            raise ValueError(f"SPECNB_PREFETCH={env!r}: expected auto, off or a distance in bytes >= 0")
        return ahead
    n_threads = n_threads or numba.get_num_threads()
    if n_threads in _memo:
        return _memo[n_threads]
    v = cached_verdict(n_threads)
    if v is None:
        if on_measure is not None:
            on_measure("measuring how far ahead to prefetch the weights on this CPU (once)")
        v = measure_and_record(n_threads)
    _memo[n_threads] = int(v["ahead"])
    return _memo[n_threads]


def measure_and_record(n_threads: int | None = None, **kw) -> dict:
    """calibrate() with n_threads threads and record the verdict for prefetch_ahead()."""
    import numba
    from ..cache import write_bytes_atomic
    n_threads = n_threads or numba.get_num_threads()
    before = numba.get_num_threads()
    numba.set_num_threads(n_threads)
    try:
        v = calibrate(**kw)
    finally:
        numba.set_num_threads(before)
    v["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    v["ms"] = {str(k): round(m, 3) for k, m in v["ms"].items()}
    v["gb_s"] = {str(k): round(g, 2) for k, g in v["gb_s"].items()}
    path = verdict_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        verdicts = _read_verdicts(path)
        verdicts[_machine_key(n_threads)] = v
        write_bytes_atomic(path, json.dumps(verdicts, indent=1).encode())
    except OSError:
        pass                           # a read-only cache: measured again next time
    _memo[n_threads] = int(v["ahead"])
    return v


def describe(v: dict) -> str:
    """One line: the chosen distance and each candidate's GB/s."""
    name = lambda c: "off" if int(c) < 0 else f"{int(c)} B"            # noqa: E731
    cells = ", ".join(f"{name(c)} {float(g):.1f}" for c, g in v["gb_s"].items())
    verdict = ("do not prefetch the weights" if int(v["ahead"]) < 0
               else f"prefetch the weights {name(v['ahead'])} ahead")
    return (f"int8 kernels {verdict} (measured on this CPU, {v['threads']} threads, 1-row Q4_K "
            f"over {v['mib']:.0f} MiB, GB/s: {cells})")


if __name__ == "__main__":
    print(describe(measure_and_record()))
