"""RMSNorm (llama.cpp: ggml_rms_norm followed by ggml_mul with the norm weight).

    y = x / sqrt(mean(x^2) + eps) * w

Each row is normalized on its own with a fixed left-to-right sum, so a row's result never
depends on the other rows of the batch (batch invariance).
"""
import numpy as np
from numba import njit


def rmsnorm_ref(x, w, eps):
    # [n_tokens, n_embd], [n_embd] -> [n_tokens, n_embd]   (NumPy reference)
    x64 = x.astype(np.float64)
    scale = 1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    return (x64 * scale * w).astype(np.float32)


@njit(cache=True, fastmath=False)
def rmsnorm(x, w, eps, out):
    # [n_tokens, n_embd], [n_embd] -> out [n_tokens, n_embd]
    n, d = x.shape
    for t in range(n):
        acc = 0.0  # float64 accumulator
        for i in range(d):
            v = np.float64(x[t, i])
            acc += v * v
        scale = np.float32(1.0 / np.sqrt(acc / d + eps))
        for i in range(d):
            out[t, i] = x[t, i] * scale * w[i]
    return out


# ---- CUDA ------------------------------------------------------------------------------------
# The same operation on a GPU (numba-cuda): one thread block per row. Each thread sums the squares
# of its strided elements in float64, a fixed shared-memory tree adds the partial sums, and every
# thread scales its elements. The sum's order depends on the block size only, never on the batch.
#
# (The block reductions are in cuda_common.py.)
import math  # noqa: E402

import numba  # noqa: E402
from numba import cuda  # noqa: E402

from .cuda_common import MAX_THREADS, block_sum, dev  # noqa: E402


@dev
def rms_scale(x, t, eps, sh, tid, T):
    # float32 1 / sqrt(mean(x[t]^2) + eps) of row t, for every thread of the block (each calls
    # it; sh: a float64 shared array of at least T)
    d = x.shape[1]
    acc = 0.0
    for i in range(tid, d, T):
        v = np.float64(x[t, i])
        acc += v * v
    sh[tid] = acc
    tot = block_sum(sh, tid, T)
    return np.float32(1.0 / math.sqrt(tot / d + eps))


@cuda.jit
def rmsnorm_cuda_kernel(x, rows, w, eps, out):
    # out[j] = rmsnorm(x[rows[j]]) * w: x [n_tokens, n_embd], rows [n_out], w [n_embd]
    # -> out [n_out, n_embd] (may be x itself when rows is 0, 1, 2, ...); grid: n_out
    j = cuda.blockIdx.x
    t = rows[j]
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    d = x.shape[1]
    sh = cuda.shared.array(MAX_THREADS, dtype=numba.float64)
    scale = rms_scale(x, t, eps, sh, tid, T)
    for i in range(tid, d, T):
        out[j, i] = x[t, i] * scale * w[i]


def rmsnorm_cuda(x, w, eps, out, rows=None, threads: int = 128, stream=0):
    """Launch rmsnorm_cuda_kernel on device arrays: out [n_out, d] <- the rows `rows` (a device
    int64 array; None: all rows in order) of x [n, d], normalized and scaled by w [d]."""
    if rows is None:
        rows = cuda.to_device(np.arange(x.shape[0], dtype=np.int64), stream=stream)
    if rows.shape[0]:
        rmsnorm_cuda_kernel[rows.shape[0], threads, stream](x, rows, w, eps, out)
    return out
