"""A streaming read at memory speed: the bandwidth probe of `specnb bench`.

    stream_xor(a, n_parts)   the xor of every 64-bit word of a, read in n_parts contiguous parts
                             side by side (one per thread)

The xor loop is what LLVM's loop vectorizer turns into wide loads and one vector xor per load, so
the loop is limited by memory, not by arithmetic (a NumPy float sum does more work per byte and
can read slower than the quantized matrix products do). `python -m specnb.kernels.stream`
prints GB/s for 1 and 2 threads.
"""
import time

import numba
import numpy as np
from numba import njit, prange


@njit(cache=True)
def _xor(a):
    # one thread's part (a loop of its own: inside the prange body LLVM leaves it scalar)
    s = np.uint64(0)
    for i in range(a.size):
        s ^= a[i]
    return s


@njit(parallel=True, cache=True)
def stream_xor(a, n_parts):
    n = a.size
    parts = np.zeros(n_parts, np.uint64)
    for p in prange(n_parts):
        parts[p] = _xor(a[p * n // n_parts:(p + 1) * n // n_parts])
    s = np.uint64(0)
    for p in range(n_parts):
        s ^= parts[p]
    return s


def stream_gb_s(a: np.ndarray, n_parts: int) -> float:
    """GB/s of one stream_xor over a (uint64) in n_parts side by side."""
    t = time.perf_counter()
    stream_xor(a, n_parts)
    return a.nbytes / (time.perf_counter() - t) / 1e9


def self_check(n: int = 1003) -> bool:
    a = np.random.default_rng(0).integers(0, 2**63, n, dtype=np.uint64)
    return all(int(stream_xor(a, k)) == int(np.bitwise_xor.reduce(a)) for k in (1, 2, 3))


def bench(gib: float = 1.0, reps: int = 3):
    a = np.ones(int(gib * 2**30) // 8, np.uint64)
    print(f"stream_xor over {gib:g} GiB, medians of {reps}: check {'ok' if self_check() else 'FAILED'}")
    for k in sorted({1, numba.get_num_threads()}):
        print(f"  {k} thread(s): {np.median([stream_gb_s(a, k) for _ in range(reps)]):.1f} GB/s")


if __name__ == "__main__":
    bench()
