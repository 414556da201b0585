"""Causal self-attention over each sequence's own KV cache, with grouped KV heads (GQA).

Row t of the batch belongs to sequence seq[t] at position pos[t]. Its K/V rows have already
been written into the cache, so it attends over the cache cells [0, pos[t]] of its own
sequence that are marked valid (cell index == position). A row's result depends only on
its query and the cached K/V of its own past, never on the other rows of the batch: that is
what makes decoding batch invariant. (llama.cpp: the KQ mask built in llama_kv_cache, then
ggml_soft_max_ext and the KQV product.)

The work is shared among the threads in items of one row and several heads of one KV group
(`heads_per_item`): those heads read the same K and V rows, and an item walks the cells a block
at a time (CELL_BLOCK), each head of the item reading the block while it is in L1. Every head
still runs its own chain of operations, the same whatever heads share its item or how many
threads there are. On a Zen 4 (2 threads) this made the attention of the 1.5B (12 heads over 2
KV heads) and of the 0.5B (14 over 2) 1.13-1.31x faster, for 1 and 5 rows at 150 and 600
positions (0.61 -> 0.52 ms a step for the 1.5B's one row at 150).
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
def _dot2(a, b, o0, o1, hd):
    # (_dot(a, b, o0, hd), _dot(a, b, o1, hd)) for hd % 32 == 0: the same operations for each,
    # interleaved, each element of a loaded once for both
    a0 = a1 = a2 = a3 = vzero()
    b0 = b1 = b2 = b3 = vzero()
    for d in range(0, hd, 32):
        x0, x1, x2, x3 = vload(a, d), vload(a, d + 8), vload(a, d + 16), vload(a, d + 24)
        a0 = vfma(x0, vload(b, o0 + d), a0)
        b0 = vfma(x0, vload(b, o1 + d), b0)
        a1 = vfma(x1, vload(b, o0 + d + 8), a1)
        b1 = vfma(x1, vload(b, o1 + d + 8), b1)
        a2 = vfma(x2, vload(b, o0 + d + 16), a2)
        b2 = vfma(x2, vload(b, o1 + d + 16), b2)
        a3 = vfma(x3, vload(b, o0 + d + 24), a3)
        b3 = vfma(x3, vload(b, o1 + d + 24), b3)
    return vhsum((a0 + a1) + (a2 + a3)), vhsum((b0 + b1) + (b2 + b3))


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


# cells whose K (then V) rows stay in L1 while every head of an item reads them (walked head after
# head over the whole context, each head would bring them from L2, or memory, again)
CELL_BLOCK = 16


@njit(fastmath=False, inline="always")
def _attend_heads(q, k_cache, v_cache, valid, seq, pos, out, t, h0, nh, group, sc, e64):
    # heads h0 .. h0 + nh - 1 of row t, all of one KV head (h0 // group); sc [>= nh, >= pos[t] + 1]
    # float32 and e64 [>= pos[t] + 1] float64 scratch. Each head's result is computed exactly as
    # alone (the same operations in the same order): only the loops over heads and cells are
    # interleaved, block of cells by block of cells
    hd = q.shape[2]
    scale = np.float32(1.0 / np.sqrt(hd))
    s = seq[t]
    n_cells = pos[t] + 1
    # the caches as flat arrays, cell j's part for this KV head at row + j * kv_dim: a view per
    # cell (k_cache[s, j]) would count a reference on the cache's memory, an atomic add that the
    # threads contend for, cell after cell
    kf, vf = k_cache.reshape(-1), v_cache.reshape(-1)
    kv_dim = k_cache.shape[2]
    row = s * k_cache.shape[1] * kv_dim + (h0 // group) * hd
    # 1. score_j = (q . k_j) * scale of every cell (a masked cell's is never read back)
    for j0 in range(0, n_cells, CELL_BLOCK):
        j1 = min(j0 + CELL_BLOCK, n_cells)
        for i in range(nh):
            qr = q[t, h0 + i]
            jp = j0
            if hd % 32 == 0:
                while jp + 2 <= j1:                       # two cells at a time: twice the sums in flight
                    s0, s1 = _dot2(qr, kf, row + jp * kv_dim, row + (jp + 1) * kv_dim, hd)
                    sc[i, jp] = s0 * scale
                    sc[i, jp + 1] = s1 * scale
                    jp += 2
            for j in range(jp, j1):
                sc[i, j] = _dot(qr, kf, row + j * kv_dim, hd) * scale
    # 2. per head, the weights e_j = exp(score_j - max) in float64 (SwiGLU's vexp64, 8 cells at
    # a time; its one-lane form for the last cells: a cell's value never depends on where it
    # falls), summed cell by cell; sc[i] then holds them as float32
    n8 = n_cells - n_cells % 8
    for i in range(nh):
        si = sc[i]
        mx = np.float32(-np.inf)
        for j in range(n_cells):
            if valid[s, j] and si[j] > mx:
                mx = si[j]
        mxv = vsplat(mx)
        for j in range(0, n8, 8):
            vstore(si, j, vload(si, j) - mxv)             # score_j - max in float32 (any cell:
            vstore(e64, j, vexp64(vload_f64(si, j)))     # the masked ones are never read back)
        for j in range(n8, n_cells):
            e64[j] = exp64(np.float64(si[j] - mx))
        tot = 0.0
        for j in range(n_cells):
            if valid[s, j]:
                si[j] = np.float32(e64[j])
                tot += e64[j]
        si[n_cells] = np.float32(1.0 / tot)
    # 3. out_d = fma(w_j, v_jd, out_d) over the valid cells in order, w_j = e_j * (1 / sum), the
    # running sums kept in registers within a block of cells and in the output row between blocks
    for i in range(nh):
        out[t, h0 + i, :] = 0.0
    for j0 in range(0, n_cells, CELL_BLOCK):
        j1 = min(j0 + CELL_BLOCK, n_cells)
        for i in range(nh):
            _weigh_cells(sc[i], sc[i, n_cells], vf, row, kv_dim, valid[s], j0, j1, out[t, h0 + i], hd)


@njit(fastmath=False, inline="always")
def _weigh_cells(w, inv, vf, row, kv_dim, ok, j0, j1, orow, hd):
    # orow[d] = fma(w_j * inv, v_jd, orow[d]) for the valid cells j0 .. j1 - 1 in order (vf: the
    # flat V cache, cell j's row at row + j * kv_dim); 64 or 32 elements of orow in registers
    if hd % 64 == 0:
        for d in range(0, hd, 64):
            a0, a1, a2, a3 = vload(orow, d), vload(orow, d + 8), vload(orow, d + 16), vload(orow, d + 24)
            a4, a5, a6, a7 = vload(orow, d + 32), vload(orow, d + 40), vload(orow, d + 48), vload(orow, d + 56)
            for j in range(j0, j1):
                if ok[j]:
                    ws = vsplat(w[j] * inv)
                    vj = row + j * kv_dim + d
                    a0 = vfma(ws, vload(vf, vj), a0)
                    a1 = vfma(ws, vload(vf, vj + 8), a1)
                    a2 = vfma(ws, vload(vf, vj + 16), a2)
                    a3 = vfma(ws, vload(vf, vj + 24), a3)
                    a4 = vfma(ws, vload(vf, vj + 32), a4)
                    a5 = vfma(ws, vload(vf, vj + 40), a5)
                    a6 = vfma(ws, vload(vf, vj + 48), a6)
                    a7 = vfma(ws, vload(vf, vj + 56), a7)
            vstore(orow, d, a0)
            vstore(orow, d + 8, a1)
            vstore(orow, d + 16, a2)
            vstore(orow, d + 24, a3)
            vstore(orow, d + 32, a4)
            vstore(orow, d + 40, a5)
            vstore(orow, d + 48, a6)
            vstore(orow, d + 56, a7)
    elif hd % 32 == 0:
        for d in range(0, hd, 32):
            a0, a1, a2, a3 = vload(orow, d), vload(orow, d + 8), vload(orow, d + 16), vload(orow, d + 24)
            for j in range(j0, j1):
                if ok[j]:
                    ws = vsplat(w[j] * inv)
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
        for j in range(j0, j1):
            if ok[j]:
                _axpy(w[j] * inv, vf, row + j * kv_dim, orow, hd)


@njit(cache=True)
def heads_per_item(n, n_head, n_head_kv, n_threads):
    # how many heads of a KV group one work item takes: the fewest heads on the busiest thread
    # (the items shared out evenly, whole), and of those the most heads an item (each one more
    # reads the group's cache rows from L1 instead of L2); hs divides the group
    group = n_head // n_head_kv
    best, best_heads = 1, n * n_head
    for hs in range(group, 0, -1):
        if group % hs == 0:
            n_items = n * n_head // hs
            heads = (n_items + n_threads - 1) // n_threads * hs
            if heads < best_heads or (heads == best_heads and hs > best):
                best, best_heads = hs, heads
    return best


@njit(parallel=True, cache=True, fastmath=False)
def _attention_parallel(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out, hs):
    # the items (row t, hs heads of one KV group) shared among the threads
    n, n_head, hd = q.shape
    group = n_head // n_head_kv
    per_row = n_head // hs
    # each item's scratch rows a whole number of cache lines apart: rows sharing a line would
    # bounce it between the threads writing them (one more float: the head's 1 / sum)
    m = (pos.max() + 17) // 16 * 16
    sc = np.empty((n * per_row, hs, m), dtype=np.float32)
    e64 = np.empty((n * per_row, m), dtype=np.float64)
    for item in prange(n * per_row):
        t, h0 = item // per_row, item % per_row * hs
        _attend_heads(q, k_cache, v_cache, valid, seq, pos, out, t, h0, hs, group, sc[item], e64[item])


# below this many multiply-adds (all rows and heads, over the cells they attend to) a call runs on
# the calling thread: starting the thread pool costs more than it saves
SERIAL_MAX_WORK = 1 << 16


@njit(cache=True, fastmath=False)
def attention(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out, n_threads):
    # q [n_tokens, n_head, hd], k/v_cache [n_seq, n_ctx, n_head_kv*hd], valid [n_seq, n_ctx]
    # -> out [n_tokens, n_head, hd]; n_threads: the threads the call runs on (it shapes the work
    # items only: every (row, head) is computed the same way on either path, whatever heads
    # share its work item)
    n, n_head, hd = q.shape
    work = 0
    for t in range(n):
        work += (pos[t] + 1) * n_head * hd
    if work > SERIAL_MAX_WORK:
        hs = heads_per_item(n, n_head, n_head_kv, n_threads)
        _attention_parallel(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out, hs)
    else:
        group = n_head // n_head_kv
        sc = np.empty((group, pos.max() + 2), dtype=np.float32)
        e64 = np.empty(pos.max() + 2, dtype=np.float64)
        for t in range(n):
            for g in range(n_head_kv):
                _attend_heads(q, k_cache, v_cache, valid, seq, pos, out, t, g * group, group, group, sc, e64)
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
