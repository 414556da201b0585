"""SwiGLU, softmax, argmax and top-k: the small elementwise and reduction kernels.

llama.cpp: ggml_swiglu (silu(gate) * up) in the feed-forward block; the samplers'
softmax/argmax/top-k in src/llama-sampler.cpp.
"""
import numpy as np
from numba import njit


def swiglu_ref(gate, up):
    # [n, n_ff], [n, n_ff] -> [n, n_ff]
    g = gate.astype(np.float64)
    return (g / (1.0 + np.exp(-g)) * up).astype(np.float32)


@njit(cache=True)
def swiglu(gate, up, out):
    # [n, n_ff], [n, n_ff] -> out [n, n_ff]
    n, f = gate.shape
    for t in range(n):
        for i in range(f):
            g = np.float64(gate[t, i])
            out[t, i] = np.float32(g / (1.0 + np.exp(-g))) * up[t, i]
    return out


@njit(cache=True)
def softmax(logits):
    # [n_vocab] -> [n_vocab] float64 probabilities (max-subtracted, one fixed-order sum)
    m = logits.max()
    p = np.exp(logits.astype(np.float64) - m)
    return p / p.sum()


@njit(cache=True)
def argmax(logits):
    # [n_vocab] -> index of the first maximum (as llama.cpp's greedy sampler)
    best = 0
    bv = logits[0]
    for i in range(1, logits.shape[0]):
        if logits[i] > bv:
            bv = logits[i]
            best = i
    return best


@njit(cache=True)
def topk(logits, k):
    # [n_vocab] -> (ids [k], values [k]) sorted by value descending, ties by lower id first
    n = logits.shape[0]
    k = min(k, n)
    ids = np.empty(k, dtype=np.int64)
    vals = np.empty(k, dtype=logits.dtype)
    m = 0
    for i in range(n):
        v = logits[i]
        if m == k and v <= vals[k - 1]:
            continue
        j = m if m < k else k - 1
        while j > 0 and vals[j - 1] < v:
            if j < k:
                vals[j] = vals[j - 1]
                ids[j] = ids[j - 1]
            j -= 1
        vals[j] = v
        ids[j] = i
        if m < k:
            m += 1
    return ids, vals


# ---- CUDA ------------------------------------------------------------------------------------
# The same operations on a GPU (numba-cuda). SwiGLU: one thread per element. Softmax, argmax and
# top-k: one thread block per logits row; each thread scans its strided elements, then a fixed
# shared-memory tree combines the threads (block size only: the same result for a row in any
# batch). Top-k takes k rounds, each finding the best element strictly after the previous pick in
# the order (value descending, id ascending), which is the CPU kernel's order.
import math  # noqa: E402

import numba  # noqa: E402
from numba import cuda  # noqa: E402

from .cuda_common import MAX_THREADS, block_max, block_sum, block_sync  # noqa: E402


@cuda.jit
def swiglu_cuda_kernel(gate, up, out):
    # [n, n_ff], [n, n_ff] -> out [n, n_ff] (may be gate itself); a grid-stride loop
    n, f = gate.shape
    for i in range(cuda.grid(1), n * f, cuda.gridsize(1)):
        t = i // f
        j = i % f
        g = np.float64(gate[t, j])
        out[t, j] = np.float32(g / (1.0 + math.exp(-g))) * up[t, j]


@cuda.jit
def softmax_cuda_kernel(logits, probs):
    # [n_rows, n_vocab] -> probs [n_rows, n_vocab] float64; grid: n_rows
    r = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    n = logits.shape[1]
    sh32 = cuda.shared.array(MAX_THREADS, dtype=numba.float32)
    sh64 = cuda.shared.array(MAX_THREADS, dtype=numba.float64)
    m = np.float32(-np.inf)
    for i in range(tid, n, T):
        if logits[r, i] > m:
            m = logits[r, i]
    sh32[tid] = m
    m = block_max(sh32, tid, T)
    tot = 0.0
    for i in range(tid, n, T):
        e = math.exp(np.float64(logits[r, i]) - m)
        probs[r, i] = e
        tot += e
    sh64[tid] = tot
    tot = block_sum(sh64, tid, T)
    for i in range(tid, n, T):
        probs[r, i] = probs[r, i] / tot


@cuda.jit
def argmax_cuda_kernel(logits, out):
    # [n_rows, n_vocab] -> out [n_rows] int64: the index of each row's first maximum; grid: n_rows
    r = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    n = logits.shape[1]
    shv = cuda.shared.array(MAX_THREADS, dtype=numba.float32)
    shi = cuda.shared.array(MAX_THREADS, dtype=numba.int64)
    bv = np.float32(-np.inf)
    bi = -1
    for i in range(tid, n, T):
        if bi < 0 or logits[r, i] > bv:
            bv = logits[r, i]
            bi = i
    shv[tid] = bv
    shi[tid] = bi
    block_sync(T)
    p2 = 1
    while p2 < T:
        p2 *= 2
    stride = p2 // 2
    while stride > 0:
        if tid < stride and tid + stride < T:
            ov = shv[tid + stride]
            oi = shi[tid + stride]
            if oi >= 0 and (shi[tid] < 0 or ov > shv[tid] or (ov == shv[tid] and oi < shi[tid])):
                shv[tid] = ov
                shi[tid] = oi
        block_sync(T)
        stride //= 2
    if tid == 0:
        out[r] = shi[0]


@cuda.jit(device=True, inline=True)
def _best_after(v, i, bv, bi, pv, pi):
    # is (v, i) eligible (strictly after the previous pick (pv, pi) in the order value desc,
    # id asc) and better than the current best (bv, bi)?
    after = v < pv or (v == pv and i > pi)
    better = bi < 0 or v > bv or (v == bv and i < bi)
    return after and better


@cuda.jit
def topk_cuda_kernel(logits, k, ids, vals):
    # [n_rows, n_vocab] -> ids [n_rows, k] int64, vals [n_rows, k]: the k largest of each row,
    # by value descending, ties by lower id first; grid: n_rows, k <= n_vocab
    r = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    n = logits.shape[1]
    shv = cuda.shared.array(MAX_THREADS, dtype=numba.float32)
    shi = cuda.shared.array(MAX_THREADS, dtype=numba.int64)
    pv = np.float32(np.inf)
    pi = -1
    for rank in range(k):
        bv = np.float32(-np.inf)
        bi = -1
        for i in range(tid, n, T):
            v = logits[r, i]
            if _best_after(v, i, bv, bi, pv, pi):
                bv = v
                bi = i
        shv[tid] = bv
        shi[tid] = bi
        block_sync(T)
        p2 = 1
        while p2 < T:
            p2 *= 2
        stride = p2 // 2
        while stride > 0:
            if tid < stride and tid + stride < T and shi[tid + stride] >= 0 and \
                    _best_after(shv[tid + stride], shi[tid + stride], shv[tid], shi[tid], pv, pi):
                shv[tid] = shv[tid + stride]
                shi[tid] = shi[tid + stride]
            block_sync(T)
            stride //= 2
        pv = shv[0]
        pi = shi[0]
        if tid == 0:
            ids[r, rank] = pi
            vals[r, rank] = pv
        block_sync(T)


def swiglu_cuda(gate, up, out, threads: int = 128, blocks: int | None = None, stream=0):
    n = gate.shape[0] * gate.shape[1]
    if n:
        blocks = blocks or (n + threads - 1) // threads
        swiglu_cuda_kernel[blocks, threads, stream](gate, up, out)
    return out


def softmax_cuda(logits, probs, threads: int = 128, stream=0):
    """[n_rows, n_vocab] device float32 -> probs (device float64), row by row."""
    if logits.shape[0]:
        softmax_cuda_kernel[logits.shape[0], threads, stream](logits, probs)
    return probs


def argmax_cuda(logits, out, threads: int = 128, stream=0):
    """[n_rows, n_vocab] device float32 -> out [n_rows] int64: each row's first maximum."""
    if logits.shape[0]:
        argmax_cuda_kernel[logits.shape[0], threads, stream](logits, out)
    return out


def topk_cuda(logits, k, ids, vals, threads: int = 128, stream=0):
    """[n_rows, n_vocab] device float32 -> ids [n_rows, k] int64, vals [n_rows, k] float32."""
    if logits.shape[0]:
        topk_cuda_kernel[logits.shape[0], threads, stream](logits, min(k, logits.shape[1]),
                                                           ids, vals)
    return ids, vals
