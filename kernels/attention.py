"""Causal self-attention over each sequence's own KV cache, with grouped KV heads (GQA).

Row t of the batch belongs to sequence seq[t] at position pos[t]. Its K/V rows have already
been written into the cache, so it attends over the cache cells [0, pos[t]] of its own
sequence that are marked valid (cell index == position). A row's result depends only on
its query and the cached K/V of its own past, never on the other rows of the batch: that is
what makes decoding batch invariant. (llama.cpp: the KQ mask built in llama_kv_cache, then
ggml_soft_max_ext and the KQV product.)
"""
import numpy as np
from numba import njit, prange

from .activations import exp64, vexp64
from .simd import vfma, vhsum, vload, vload_f64, vsplat, vstore, vzero


def attention_ref(q, k_cache, v_cache, valid, seq, pos, n_head_kv):
    # q [n_tokens, n_head, hd], k/v_cache [n_seq, n_ctx, n_head_kv, hd], valid [n_seq, n_ctx]
    # -> [n_tokens, n_head, hd]   (NumPy reference, float64 inside)
    n, n_head, hd = q.shape
    group = n_head // n_head_kv
    out = np.zeros((n, n_head, hd), dtype=np.float32)
    for t in range(n):
        s, p = seq[t], pos[t]
        cells = np.nonzero(valid[s, :p + 1])[0]
        for h in range(n_head):
            kh = h // group
            k = k_cache[s, cells, kh].astype(np.float64)
            v = v_cache[s, cells, kh].astype(np.float64)
            sc = k @ q[t, h].astype(np.float64) / np.sqrt(hd)
            w = np.exp(sc - sc.max())
            out[t, h] = (w / w.sum()) @ v
    return out


@njit(fastmath=False, inline="always")
def _dot(a, b, off, hd):
    # a[0:hd] . b[off:off+hd] in float32, in a fixed order: with hd % 32 == 0 four 8-lane
    # accumulators (lanes d % 32 // 8) then a fixed tree; else one left-to-right sum
    if hd % 32 == 0:
        a0 = a1 = a2 = a3 = vzero()
        for d in range(0, hd, 32):
            a0 = vfma(vload(a, d), vload(b, off + d), a0)
            a1 = vfma(vload(a, d + 8), vload(b, off + d + 8), a1)
            a2 = vfma(vload(a, d + 16), vload(b, off + d + 16), a2)
            a3 = vfma(vload(a, d + 24), vload(b, off + d + 24), a3)
        return vhsum((a0 + a1) + (a2 + a3))
    acc = np.float32(0.0)
    for d in range(hd):
        acc += a[d] * b[off + d]
    return acc


@njit(fastmath=False, inline="always")
def _axpy(w, b, off, out, hd):
    # out[0:hd] += w * b[off:off+hd] (a fused multiply-add per element where hd % 8 == 0)
    if hd % 8 == 0:
        ws = vsplat(w)
        for d in range(0, hd, 8):
            vstore(out, d, vfma(ws, vload(b, off + d), vload(out, d)))
    else:
        for d in range(hd):
            out[d] += w * b[off + d]


@njit(fastmath=False, inline="always")
def _attend(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out, item, sc, e64):
    # one (row, head) pair, item = t * n_head + h; sc, e64: float32 and float64 scratch of at
    # least pos[t] + 1
    n, n_head, hd = q.shape
    group = n_head // n_head_kv
    scale = np.float32(1.0 / np.sqrt(hd))
    t = item // n_head
    h = item % n_head
    s = seq[t]
    p = pos[t]
    qr = q[t, h]
    # the caches as flat arrays, cell j's part for this head at row + j * kv_dim: a view per cell
    # (k_cache[s, j]) would count a reference on the cache's memory, an atomic add that the
    # threads contend for, cell after cell
    kf, vf = k_cache.reshape(-1), v_cache.reshape(-1)
    kv_dim = k_cache.shape[2]
    row = s * k_cache.shape[1] * kv_dim + (h // group) * hd
    mx = np.float32(-np.inf)
    for j in range(p + 1):
        if valid[s, j]:
            acc = _dot(qr, kf, row + j * kv_dim, hd) * scale
            sc[j] = acc
            if acc > mx:
                mx = acc
    # e_j = exp(score_j - max) in float64 (SwiGLU's vexp64, 8 cells at a time; its one-lane form
    # for the last cells: a cell's value never depends on where it falls), summed cell by cell
    n_cells = p + 1
    n8 = n_cells - n_cells % 8
    mxv = vsplat(mx)
    for j in range(0, n8, 8):
        vstore(sc, j, vload(sc, j) - mxv)                 # score_j - max in float32 (any cell:
        vstore(e64, j, vexp64(vload_f64(sc, j)))         # the masked ones are never read back)
    for j in range(n8, n_cells):
        e64[j] = exp64(np.float64(sc[j] - mx))
    tot = 0.0
    for j in range(n_cells):
        if valid[s, j]:
            sc[j] = np.float32(e64[j])
            tot += e64[j]
    inv = np.float32(1.0 / tot)
    orow = out[t, h]
    if hd % 32 == 0:
        # out[d] = fma(w_j, v_jd, out[d]) over the cells in order, as _axpy does, with 32
        # elements of the row held in registers across the cells
        for d in range(0, hd, 32):
            a0 = a1 = a2 = a3 = vzero()
            for j in range(n_cells):
                if valid[s, j]:
                    ws = vsplat(sc[j] * inv)
                    vj = row + j * kv_dim + d
                    a0 = vfma(ws, vload(vf, vj), a0)
                    a1 = vfma(ws, vload(vf, vj + 8), a1)
                    a2 = vfma(ws, vload(vf, vj + 16), a2)
                    a3 = vfma(ws, vload(vf, vj + 24), a3)
            vstore(orow, d, a0)
            vstore(orow, d + 8, a1)
            vstore(orow, d + 16, a2)
            vstore(orow, d + 24, a3)
    else:
        orow[:] = 0.0
        for j in range(n_cells):
            if valid[s, j]:
                _axpy(sc[j] * inv, vf, row + j * kv_dim, orow, hd)


@njit(parallel=True, cache=True, fastmath=False)
def _attention_parallel(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out):
    n, n_head, hd = q.shape
    # each item's scratch rows a whole number of cache lines apart: rows sharing a line would
    # bounce it between the threads writing them
    m = (pos.max() + 16) // 16 * 16
    sc = np.empty((n * n_head, m), dtype=np.float32)
    e64 = np.empty((n * n_head, m), dtype=np.float64)
    for item in prange(n * n_head):
        _attend(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out, item, sc[item], e64[item])


# below this many multiply-adds (all rows and heads, over the cells they attend to) a call runs on
# the calling thread: starting the thread pool costs more than it saves
SERIAL_MAX_WORK = 1 << 16


@njit(cache=True, fastmath=False)
def attention(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out):
    # q [n_tokens, n_head, hd], k/v_cache [n_seq, n_ctx, n_head_kv*hd], valid [n_seq, n_ctx]
    # -> out [n_tokens, n_head, hd]; every (row, head) is computed the same way on either path
    n, n_head, hd = q.shape
    work = 0
    for t in range(n):
        work += (pos[t] + 1) * n_head * hd
    if work > SERIAL_MAX_WORK:
        _attention_parallel(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out)
    else:
        sc = np.empty(pos.max() + 1, dtype=np.float32)
        e64 = np.empty(pos.max() + 1, dtype=np.float64)
        for item in range(n * n_head):
            _attend(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out, item, sc, e64)
    return out


# ---- CUDA ------------------------------------------------------------------------------------
# The same attention on a GPU (numba-cuda): one thread block per (row, head), three passes over
# the row's cache cells [0, pos], as the CPU kernel:
#   1. threads over the cells: score_j = (q . k_j) * scale into a global scratch row, and the max;
#   2. threads over the cells: e_j = exp(score_j - max) (float64, stored as float32), their sum;
#   3. threads over the head dimension: out_d = sum_j (e_j / sum) * v_jd, j in order.
# Sums and maxima are block reductions by a fixed tree (block size only), so a row's result never
# depends on the batch. The scratch holds one score row per (row, head) of the launch: the caller
# sizes it [n_tokens * n_head, >= max(pos) + 1] (or launches fewer rows at a time).
import math  # noqa: E402

import numba  # noqa: E402
from numba import cuda  # noqa: E402

from .cuda_common import MAX_THREADS, block_max, block_sum  # noqa: E402


@cuda.jit
def attention_cuda_kernel(q, k_cache, v_cache, valid, seq, pos, n_head_kv, scratch, out):
    # q [n_tokens, n_head, hd], k/v_cache [n_seq, n_ctx, n_head_kv*hd], valid [n_seq, n_ctx],
    # scratch [n_tokens * n_head, >= max(pos) + 1] -> out [n_tokens, n_head, hd];
    # grid: n_tokens * n_head
    n, n_head, hd = q.shape
    item = cuda.blockIdx.x
    t = item // n_head
    h = item % n_head
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    s = seq[t]
    p = pos[t]
    off = (h // (n_head // n_head_kv)) * hd
    scale = np.float32(1.0 / math.sqrt(hd))
    sh32 = cuda.shared.array(MAX_THREADS, dtype=numba.float32)
    sh64 = cuda.shared.array(MAX_THREADS, dtype=numba.float64)
    mx = np.float32(-np.inf)
    for j in range(tid, p + 1, T):
        if valid[s, j]:
            acc = np.float32(0.0)
            for d in range(hd):
                acc += q[t, h, d] * k_cache[s, j, off + d]
            acc *= scale
            scratch[item, j] = acc
            if acc > mx:
                mx = acc
    sh32[tid] = mx
    mx = block_max(sh32, tid, T)
    tot = 0.0
    for j in range(tid, p + 1, T):
        if valid[s, j]:
            e = math.exp(np.float64(scratch[item, j] - mx))
            scratch[item, j] = np.float32(e)
            tot += e
    sh64[tid] = tot
    tot = block_sum(sh64, tid, T)          # (its barriers also publish the scratch writes)
    inv = np.float32(1.0 / tot)
    for d in range(tid, hd, T):
        acc = np.float32(0.0)
        for j in range(p + 1):
            if valid[s, j]:
                acc += (scratch[item, j] * inv) * v_cache[s, j, off + d]
        out[t, h, d] = acc


@cuda.jit
def kv_store_cuda_kernel(k, v, k_cache, v_cache, seq, pos):
    # k_cache[seq[t], pos[t]] = k[t], v_cache[seq[t], pos[t]] = v[t]; k/v [n_tokens, kv_dim]
    # (the CPU backend's `self.k[il, seq, pos] = k`; a grid-stride loop)
    n, kv_dim = k.shape
    for i in range(cuda.grid(1), n * kv_dim, cuda.gridsize(1)):
        t = i // kv_dim
        c = i % kv_dim
        k_cache[seq[t], pos[t], c] = k[t, c]
        v_cache[seq[t], pos[t], c] = v[t, c]


def attention_cuda(q, k_cache, v_cache, valid, seq, pos, n_head_kv, scratch, out,
                   threads: int = 64, stream=0):
    """Launch attention_cuda_kernel on device arrays (see its comment for the shapes)."""
    n_items = q.shape[0] * q.shape[1]
    if n_items:
        attention_cuda_kernel[n_items, threads, stream](q, k_cache, v_cache, valid, seq, pos,
                                                        n_head_kv, scratch, out)
    return out


def kv_store_cuda(k, v, k_cache, v_cache, seq, pos, threads: int = 128, blocks: int | None = None,
                  stream=0):
    n = k.shape[0] * k.shape[1]
    if n:
        blocks = blocks or (n + threads - 1) // threads
        kv_store_cuda_kernel[blocks, threads, stream](k, v, k_cache, v_cache, seq, pos)
