"""The quantized matrix products on a GPU (numba-cuda), twins of `matmul.matmul` / `matmul.dequant_row`.
(llama.cpp: ggml-cuda's mmvq.cu, with float32 activations instead of q8_1.)

Weights stay raw GGUF blocks on the device (slots_cuda.py says how each type is read): one flat
buffer holding the rows of one matrix, or of several matrices that multiply the same activations
(`DeviceWeight.group`: a layer's Q, K and V; its gate and up), back to back, each row padded to a
multiple of 4 bytes. Each matrix is a *segment* with its own type; one launch computes every
segment's products, and the outputs lie side by side in one [n_rows, sum of n_out] array. So Q,
K and V of a layer are one launch even where V has another type than Q and K (the Q4_K_M
files' Q6_K rows in half the layers).

The activations are first permuted into each segment's element order, xp[r, k, s] =
x[r, elem(s, k)], so that consecutive threads (consecutive slots) read consecutive floats: every
load of the hot loop is coalesced. Segments whose types share an order read one permuted copy;
the copies lie one after another, copy j at j * n_rows * n_in. (For K = 1 the permutation is the
identity.) The backend writes these copies in the step that makes the activations
(fused_cuda.py: the RMSNorm, the SwiGLU); `matmul_cuda` permutes them itself.

The product: thread-block layout. A block of T threads computes R = T // TG output rows of one
segment; the TG threads of a row group stride over the row's S slots (thread t takes slots t,
t + TG, ...). For each slot a thread decodes its K weights once into registers and multiplies
them with CUDA_ROWS_PER_PASS (8) activation rows kept in local accumulators; more rows take
further passes over the same weight row (from L1/L2). A thread decodes 4 slots back to back
before their multiplications, so that the loads of 4 slots are in flight together. The TG
partial sums of a (row, output) pair are then added by a fixed shared-memory tree. The order of
every (row, output) sum depends on (TG, the weight shape) only, never on n_rows, on the position
of the row in the batch, or on the other segments of the launch: a row's result is bit-identical
in any batch, and a matrix multiplied in a group equals the same matrix multiplied alone.
TG and R are picked from the weight shape alone (`mm_config`); a segment table (one row per
segment, made once per matrix) tells each block its segment, type and place.

Kernels hold no Python objects, raise nothing and print nothing. Two libdevice calls are swapped
for NumPy twins under the CUDA simulator (where libdevice is not implemented).
"""
import time
from functools import partial
from typing import NamedTuple

import numba
import numpy as np
from numba import cuda

from . import cuda_common as C
from .cuda_common import SIM, ix as _ix
from .launch_cuda import KernelCall, prepare
from .qtypes import Q4_0, Q4_K, Q8_0, check_qtype, qtype_name, random_blocks, row_bytes
from .slots_cuda import TYPES, order_of

_dev, _f32 = C.dev, np.float32

CUDA_ROWS_PER_PASS = 8      # activation rows that share one decode of a weight slot
CUDA_SLOTS_PER_STEP = 4     # slots a thread decodes back to back (their loads overlap)
CUDA_MAX_THREADS = C.MAX_THREADS
MAX_SEGMENT_TYPES = 3       # distinct block types one launch decodes
_UK_MAX = CUDA_SLOTS_PER_STEP * max(t.K for t in TYPES.values())

# the segment table: one int64 row per segment
(SEG_BLOCK0,        # the segment's first thread block
 SEG_BASE,          # byte offset of its row 0 in the buffer
 SEG_ROW_BYTES,     # bytes per (padded) row
 SEG_N_OUT,         # its rows (outputs)
 SEG_COL0,          # its first column in out (and in bias)
 SEG_S,             # slots per row
 SEG_TG,            # threads per output row
 SEG_ORDER,         # which permuted copy of the activations it reads
 SEG_BODY) = range(9)   # which of the launch's types decodes it
SEG_FIELDS = 9


# ---- the product: one body per block type, one kernel per tuple of types --------------------

def _make_body(slot, K):
    RC = CUDA_ROWS_PER_PASS

    @_dev
    def fma_rows(acc, xp, wv, j, xb0, s, r0, n_rows, S):
        # acc[rr] += xp[r0 + rr, :, s] . wv[j : j + K] for the rows of this pass, k in order
        for rr in range(RC):
            if r0 + rr >= n_rows:
                break
            a = acc[rr]
            xb = xb0 + (r0 + rr) * K * S + s
            for k in range(K):
                a = cuda.fma(xp[_ix(xb + k * S)], wv[j + k], a)
            acc[rr] = a

    @_dev
    def body(wq, wh, wf, seg, i, lb, xp, n_rows, bias, flags, out, n_cols, sh, acc, wv):
        # block lb of segment i: out[r, col0 + o] (=, += or + bias) sum_s sum_k
        # xp[order, r, k, s] * w[o, elem(s, k)] for its R output rows o
        tid = cuda.threadIdx.x
        T = cuda.blockDim.x
        TG = seg[i, SEG_TG]
        S = seg[i, SEG_S]
        n_out = seg[i, SEG_N_OUT]
        c0 = seg[i, SEG_COL0]
        row_bytes = seg[i, SEG_ROW_BYTES]
        xb0 = seg[i, SEG_ORDER] * n_rows * K * S
        g = tid // TG                   # output row of this thread within the block
        t = tid - g * TG                # this thread's place among the row's TG threads
        o = lb * (T // TG) + g
        live = o < n_out and g < T // TG
        base = seg[i, SEG_BASE] + o * row_bytes
        p2 = 1
        while p2 < TG:
            p2 *= 2
        for r0 in range(0, n_rows, RC):
            for rr in range(RC):
                acc[rr] = _f32(0)
            if live:
                # slots t, t + TG, t + 2 TG, ... in this order; 4 at a time while 4 are left
                # (their loads are then in flight together), then one at a time
                s = t
                while s + 3 * TG < S:           # (written out: CUDA_SLOTS_PER_STEP = 4)
                    slot(wq, wh, wf, base, s, wv, 0)
                    slot(wq, wh, wf, base, s + TG, wv, K)
                    slot(wq, wh, wf, base, s + 2 * TG, wv, 2 * K)
                    slot(wq, wh, wf, base, s + 3 * TG, wv, 3 * K)
                    fma_rows(acc, xp, wv, 0, xb0, s, r0, n_rows, S)
                    fma_rows(acc, xp, wv, K, xb0, s + TG, r0, n_rows, S)
                    fma_rows(acc, xp, wv, 2 * K, xb0, s + 2 * TG, r0, n_rows, S)
                    fma_rows(acc, xp, wv, 3 * K, xb0, s + 3 * TG, r0, n_rows, S)
                    s += 4 * TG
                while s < S:
                    slot(wq, wh, wf, base, s, wv, 0)
                    fma_rows(acc, xp, wv, 0, xb0, s, r0, n_rows, S)
                    s += TG
            if TG > 1:                  # the fixed tree over the TG partial sums
                for rr in range(RC):
                    sh[_ix(rr * T + tid)] = acc[rr]
                cuda.syncthreads()
                stride = p2 // 2
                while stride > 0:
                    if t < stride and t + stride < TG:
                        for rr in range(RC):
                            sh[_ix(rr * T + tid)] += sh[_ix(rr * T + tid + stride)]
                    cuda.syncthreads()
                    stride //= 2
                for rr in range(RC):
                    acc[rr] = sh[_ix(rr * T + g * TG)]
            if live:
                for rr in range(RC):    # thread t writes rows t, t + TG, ... of the pass
                    r = r0 + rr
                    if rr % TG == t and r < n_rows:
                        v = acc[rr]
                        if flags & 1:
                            v = v + bias[_ix(c0 + o)]
                        if flags & 2:
                            v = out[_ix(r * n_cols + c0 + o)] + v
                        out[_ix(r * n_cols + c0 + o)] = v
            if TG > 1:
                cuda.syncthreads()     # sh is reused by the next pass

    return body


def _make_product(types):
    # the product kernel of one tuple of block types (1 to MAX_SEGMENT_TYPES, distinct): one
    # body per type
    bodies = [_make_body(TYPES[t].slot, TYPES[t].K) for t in types]
    n_bodies = len(bodies)
    b0, b1, b2 = (bodies * MAX_SEGMENT_TYPES)[:3]          # (the ones past n_bodies never run)
    RC = CUDA_ROWS_PER_PASS

    @_dev
    def segment(seg):
        # -> (the segment of this block, the block's index within it)
        b = cuda.blockIdx.x
        i = 0
        while i + 1 < seg.shape[0] and b >= seg[i + 1, SEG_BLOCK0]:
            i += 1
        return i, b - seg[i, SEG_BLOCK0]

    @cuda.jit
    def mm(wq, wh, wf, seg, xp, n_rows, bias, flags, out, n_cols):
        # wq/wh/wf: views of the weight buffer; seg: the segment table [n_seg, SEG_FIELDS]; xp:
        # the permuted activations (copy j at j * n_rows * n_in); out: [n_rows, n_cols] flat;
        # flags: 1 = add bias[col], 2 = accumulate into out (out += product)
        i, lb = segment(seg)
        sh = cuda.shared.array(0, dtype=numba.float32)      # [RC, T]
        acc = cuda.local.array(RC, dtype=numba.float32)
        wv = cuda.local.array(_UK_MAX, dtype=numba.float32)
        which = seg[i, SEG_BODY]        # the same for every thread of the block
        # (n_bodies is a constant of the kernel: the bodies it does not have are compiled away)
        if n_bodies == 1 or which == 0:
            b0(wq, wh, wf, seg, i, lb, xp, n_rows, bias, flags, out, n_cols, sh, acc, wv)
        elif n_bodies == 2 or which == 1:
            b1(wq, wh, wf, seg, i, lb, xp, n_rows, bias, flags, out, n_cols, sh, acc, wv)
        else:
            b2(wq, wh, wf, seg, i, lb, xp, n_rows, bias, flags, out, n_cols, sh, acc, wv)
    return mm


# ---- the permutation and the embedding lookup, one kernel each per type ----------------------

def _make_type_kernels(slot, elem, K):
    @cuda.jit
    def permute(x, n_in, n_rows, S, xp):
        # xp[r, k, s] = x[r, elem(s, k)]   (flat; a grid-stride loop)
        for i in range(cuda.grid(1), n_rows * n_in, cuda.gridsize(1)):
            r = i // n_in
            j = i - r * n_in
            k = j // S
            s = j - k * S
            xp[_ix(i)] = x[_ix(r * n_in + elem(s, k))]

    @cuda.jit
    def rows(wq, wh, wf, row_bytes, ids, S, n_in, out):
        # out[r, :] = row ids[r] of the weight, dequantized (the embedding lookup)
        r = cuda.blockIdx.x
        base = ids[_ix(r)] * row_bytes
        wv = cuda.local.array(K, dtype=numba.float32)
        for s in range(cuda.threadIdx.x, S, cuda.blockDim.x):
            slot(wq, wh, wf, base, s, wv, 0)
            for k in range(K):
                out[_ix(r * n_in + elem(s, k))] = wv[k]

    return permute, rows


_PRODUCTS, _TYPE_KERNELS = {}, {}


def product_kernel(types):
    """The product kernel of a tuple of distinct block types (built on first use)."""
    types = tuple(int(t) for t in types)
    if types not in _PRODUCTS:
        for t in types:
            check_qtype(t)
        if not 1 <= len(types) <= MAX_SEGMENT_TYPES or len(set(types)) != len(types):
            raise ValueError(f"a product launch decodes 1 to {MAX_SEGMENT_TYPES} distinct types, "
                             f"got {[qtype_name(t) for t in types]}")
        _PRODUCTS[types] = _make_product(types)
    return _PRODUCTS[types]


def cuda_kernels(qtype: int):
    """(K, product kernel, permute kernel, rows kernel) of one type (built on first use)."""
    check_qtype(qtype)
    qtype = int(qtype)
    if qtype not in _TYPE_KERNELS:
        t = TYPES[qtype]
        _TYPE_KERNELS[qtype] = _make_type_kernels(t.slot, t.elem, t.K)
    return (TYPES[qtype].K, product_kernel((qtype,))) + _TYPE_KERNELS[qtype]


# ---- matrices on the device ------------------------------------------------------------------

class Segment(NamedTuple):
    qtype: int
    n_out: int
    row_bytes: int      # padded to a multiple of 4
    base: int           # byte offset of row 0 in the buffer
    col0: int           # first output column
    nbytes: int         # the GGUF bytes of its rows (unpadded)


class DeviceWeight:
    """A quantized matrix, or a group of matrices of the same n_in (`group`), on the device: the
    raw GGUF rows of each, padded to a multiple of 4 bytes, back to back in one flat buffer (plus
    8 spare bytes, read but unused by the last 2-aligned word loads)."""

    def __init__(self, data, qtype: int, n_in: int, stream=0):
        self._upload([(data, qtype)], n_in, stream)

    @classmethod
    def group(cls, parts, n_in: int, stream=0) -> "DeviceWeight":
        """The matrices parts = [(uint8 [n_out, row_bytes] GGUF rows, qtype), ...] in one buffer:
        their products are one launch, their outputs side by side in the order given."""
        self = cls.__new__(cls)
        self._upload(parts, n_in, stream)
        return self

    def _upload(self, parts, n_in, stream):
        n_in = int(n_in)
        segs, datas, base, col = [], [], 0, 0
        for data, qtype in parts:
            data = np.ascontiguousarray(data, dtype=np.uint8)
            qtype = int(qtype)
            check_qtype(qtype)
            rb = row_bytes(qtype, n_in)
            if data.ndim != 2 or data.shape[1] != rb:
                raise ValueError(f"{qtype_name(qtype)} rows of {n_in} elements take {rb} bytes, "
                                 f"got an array of shape {data.shape}")
            prb = (rb + 3) // 4 * 4
            segs.append(Segment(qtype, data.shape[0], prb, base, col, data.shape[0] * rb))
            datas.append(data)
            base += data.shape[0] * prb
            col += data.shape[0]
        host = np.zeros(base + 8, np.uint8)
        for sg, data in zip(segs, datas):
            host[sg.base:sg.base + sg.n_out * sg.row_bytes].reshape(
                sg.n_out, sg.row_bytes)[:, :data.shape[1]] = data
        self.buf = cuda.to_device(host, stream=stream)
        self.wq = self.buf.view(np.uint32)
        self.wh = self.buf.view(np.float16)
        self.wf = self.buf.view(np.float32)
        self.segments = segs
        self.n_in, self.n_out = n_in, col
        self.types = tuple(dict.fromkeys(s.qtype for s in segs))          # distinct, in order
        if len(self.types) > MAX_SEGMENT_TYPES:
            raise ValueError(f"a group holds at most {MAX_SEGMENT_TYPES} block types, got "
                             f"{[qtype_name(t) for t in self.types]}")
        # the permuted copies of the activations its segments read (one per element order)
        self.orders = tuple(dict.fromkeys(order_of(t) for t in self.types))
        self.nbytes = sum(s.nbytes for s in segs)          # the GGUF bytes a product reads
        # (a single matrix's own figures: the embedding lookup reads them)
        self.qtype, self.row_bytes = segs[0].qtype, segs[0].row_bytes
        self.K = TYPES[self.qtype].K
        self.S = n_in // self.K
        self._shapes = {}

    def __repr__(self):
        parts = ", ".join(f"{qtype_name(s.qtype)} {s.n_out}" for s in self.segments)
        return f"DeviceWeight({parts} x {self.n_in})"

    def launch_shape(self, threads: int | None = None, rows_per_block: int | None = None):
        """(segment table on the device, threads per block, blocks, largest TG) of this matrix's
        product, made once per (threads, rows_per_block): each segment's TG and R from
        `mm_config`, the block size the largest TG * R, each segment R = T // TG rows a block."""
        key = (threads, rows_per_block)
        if key not in self._shapes:
            cfg = [mm_config(s.qtype, self.n_in, threads) for s in self.segments]
            T = max(tg * (int(rows_per_block) if rows_per_block else r) for tg, r in cfg)
            if T > CUDA_MAX_THREADS:
                raise ValueError(f"matmul_cuda: {T} threads per block is more than "
                                 f"{CUDA_MAX_THREADS}")
            table, b0 = [], 0
            for s, (tg, _) in zip(self.segments, cfg):
                R = T // tg
                table.append([b0, s.base, s.row_bytes, s.n_out, s.col0, self.n_in // TYPES[s.qtype].K,
                              tg, self.orders.index(order_of(s.qtype)), self.types.index(s.qtype)])
                b0 += (s.n_out + R - 1) // R
            self._shapes[key] = (cuda.to_device(np.array(table, np.int64)), T, b0,
                                 max(tg for tg, _ in cfg))
        return self._shapes[key]


def upload_weight(data, qtype: int, n_in: int, stream=0) -> DeviceWeight:
    """uint8 [n_out, row_bytes] GGUF rows -> DeviceWeight (copied to the device once)."""
    return DeviceWeight(data, qtype, n_in, stream)


def mm_config(qtype: int, n_in: int, threads: int | None = None):
    """(TG, R): threads per output row and output rows per thread block, from the weight shape
    only (the reduction order depends on TG, so it must not depend on the batch). TG is about
    S/8 (each thread takes about 8 slots), a power of two in [32, 256], and R fills 128 threads.
    `threads` forces TG. Under the simulator (where every thread and every barrier is slow) one
    thread per row and 32 rows per block."""
    if threads is not None:
        tg = int(threads)
    elif SIM:
        return 1, 32
    else:
        S = n_in // TYPES[int(qtype)].K
        tg = 32
        while tg < 256 and tg * 8 < S:
            tg *= 2
    if not 1 <= tg <= CUDA_MAX_THREADS:
        raise ValueError(f"threads per output row must be in [1, {CUDA_MAX_THREADS}], got {tg}")
    return tg, max(1, 128 // tg)


# ---- launches --------------------------------------------------------------------------------

def product_call(w: DeviceWeight, n_rows: int, xp, out_flat, bias=None, accumulate: bool = False,
                 threads: int | None = None, rows_per_block: int | None = None) -> KernelCall:
    """The launch of out [n_rows, w.n_out] (=, or += when accumulate) x @ W^T (+ bias), x given
    permuted (xp: copy j of w.orders at j * n_rows * n_in; flat), out flat."""
    seg, T, n_blocks, tg_max = w.launch_shape(threads, rows_per_block)
    flags = (1 if bias is not None else 0) | (2 if accumulate else 0)
    b = bias if bias is not None else xp               # (not read without flag 1)
    shmem = 4 * CUDA_ROWS_PER_PASS * T if tg_max > 1 else 0
    return KernelCall(product_kernel(w.types), n_blocks, T, shmem,
                      (w.wq, w.wh, w.wf, seg, xp, n_rows, b, flags, out_flat, w.n_out))


def permute_call(order: int, x_flat, n_in: int, n_rows: int, xp) -> KernelCall:
    """The launch of xp (flat) <- x [n_rows, n_in] (flat) in the element order of `order`."""
    n = n_rows * n_in
    threads = 1 if SIM else 256
    return KernelCall(cuda_kernels(order)[2], 1 if SIM else (n + 255) // 256, threads, 0,
                      (x_flat, n_in, n_rows, n_in // TYPES[order].K, xp))


def rows_call(w: DeviceWeight, ids, out_flat, threads: int = 128) -> KernelCall:
    """The launch of out [n, n_in] (flat) <- rows ids [n] (device int64) of w, dequantized."""
    rows = cuda_kernels(w.qtype)[3]
    return KernelCall(rows, ids.shape[0], threads, 0,
                      (w.wq, w.wh, w.wf, w.row_bytes, ids, w.S, w.n_in, out_flat))


def matmul_cuda(x, w: DeviceWeight, out, bias=None, accumulate: bool = False,
                threads: int | None = None, rows_per_block: int | None = None,
                scratch=None, stream=0):
    """out [n_rows, n_out] (=, or += when accumulate) x [n_rows, n_in] @ W^T (+ bias [n_out]),
    all device float32 arrays, C-contiguous; w one matrix or a group (out: their outputs side by
    side). scratch: a device float32 array of at least n_rows * n_in * len(w.orders) elements for
    the permuted activations (allocated when None)."""
    n_rows = x.shape[0]
    if x.shape[1] != w.n_in or out.shape[0] != n_rows or out.shape[1] != w.n_out:
        raise ValueError(f"matmul_cuda: x {x.shape} @ {w} -> out {out.shape} do not fit")
    if n_rows == 0:
        return out
    w.launch_shape(threads, rows_per_block)           # (refuses a block too large first)
    n = n_rows * w.n_in
    xf = x.reshape(n)
    if TYPES[w.orders[0]].K > 1 or len(w.orders) > 1:
        need = n * len(w.orders)
        if scratch is None:
            scratch = cuda.device_array(need, np.float32, stream=stream)
        elif scratch.size < need:
            raise ValueError(f"matmul_cuda: scratch of {scratch.size} floats; {need} needed")
        # the whole scratch, not scratch[:n]: the kernels index it below n themselves, and
        # numba-cuda builds a slice in Python (about 45 us on an H200's host, more than a launch)
        xp = scratch
        for j, order in enumerate(w.orders):
            permute_call(order, xf, w.n_in, n_rows, xp if j == 0 else xp[j * n:])(stream)
    else:
        xp = xf
    product_call(w, n_rows, xp, out.reshape(n_rows * w.n_out), bias, accumulate, threads,
                 rows_per_block)(stream)
    return out


def dequant_rows_cuda(w: DeviceWeight, ids, out, threads: int = 128, stream=0):
    """out [n, n_in] (device float32) <- rows ids [n] (device int32/int64) of w, dequantized."""
    n = ids.shape[0]
    if n:
        rows_call(w, ids, out.reshape(n * w.n_in), threads)(stream)
    return out


# ---- measuring on a GPU ----------------------------------------------------------------------

if not SIM:
    @cuda.jit
    def _spin_kernel(ms):
        # one thread sleeps about `ms` milliseconds: the GPU stays busy while the host queues
        # the launches timed behind it (the simulator has no nanosleep; it never times)
        for _ in range(ms):
            cuda.nanosleep(1000000)


@cuda.jit
def _empty_kernel(out):
    pass


def _host_us(launch, reps: int) -> float:
    """Microseconds per call as Python issues `reps` calls one after another (after one call to
    compile and warm up), the GPU waited for at the end: the host's launch rate where it is the
    slower."""
    launch()
    cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        launch()
    cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e6


def _gpu_us(launch, reps: int, host_us: float):
    """Microseconds per call on the GPU, or None where they could not be separated from the
    launches: the calls are queued behind a spin kernel, so that the events around them measure
    the GPU's work, not how fast the host launches; the spin grows until the queue was filled
    before it ended (event e0 not yet reached when the last call was issued)."""
    e0, e1 = cuda.event(), cuda.event()
    ms = max(2, int(2 * reps * host_us / 1e3))
    for _ in range(6):
        _spin_kernel[1, 1](ms)
        e0.record()
        for _ in range(reps):
            launch()
        e1.record()
        queued = not e0.query()                # the GPU was still spinning: every call queued
        e1.synchronize()
        if queued:
            return e0.elapsed_time(e1) * 1e3 / reps
        ms *= 4
    return None


def _each(launches):
    for launch in launches:
        launch()


def launch_floor(reps: int = 200) -> float:
    """Microseconds per launch of an empty kernel from Python (numba-cuda's dispatch and the
    driver's launch): the least any kernel call of the backend costs the host."""
    out = cuda.device_array(1, np.float32)
    return _host_us(lambda: _empty_kernel[1, 32](out), reps)


def matmul_bandwidth(shapes=((4096, 4096), (4096, 14336), (14336, 4096)),
                     qtypes=(Q4_0, Q8_0, Q4_K), n_rows: int = 1, reps: int = 50,
                     peak_gbs: float = 4800.0, seed: int = 0) -> list:
    """Time matmul_cuda on random weights of each (n_out, n_in) and type -> [{type, n_out, n_in,
    n_rows, us, gbs, frac_peak, host_us, host_us_prepared}]: `us` the GPU's time per call (CUDA
    events around calls queued behind a spin, `_gpu_us`), `gbs` the GGUF weight bytes read once
    per call in that time, `host_us` per call as Python issues `matmul_cuda` calls one after
    another, `host_us_prepared` the same for the call's two launches made once
    (launch_cuda.PreparedLaunch, as the CUDA backend issues them). (A GPU only: under the
    simulator this would take hours.)"""
    rng = np.random.default_rng(seed)
    res = []
    for qt in qtypes:
        qt = int(qt)
        for n_out, n_in in shapes:
            w = upload_weight(random_blocks(qt, n_out, n_in, rng), qt, n_in)
            x = cuda.to_device(rng.standard_normal((n_rows, n_in)).astype(np.float32))
            out = cuda.device_array((n_rows, n_out), np.float32)
            scratch = cuda.device_array(n_rows * n_in, np.float32)
            call = partial(matmul_cuda, x, w, out, scratch=scratch)
            host_us = _host_us(call, reps)
            xf = x.reshape(n_rows * n_in)
            xp = scratch if TYPES[qt].K > 1 else xf
            calls = [product_call(w, n_rows, xp, out.reshape(n_rows * n_out))]
            if TYPES[qt].K > 1:
                calls.insert(0, permute_call(qt, xf, n_in, n_rows, scratch))
            made = [prepare(c, 0, "prepared") for c in calls]
            host_us_prepared = _host_us(partial(_each, made), reps)
            us = host_us if SIM else _gpu_us(call, reps, host_us)      # (the simulator never spins)
            gbs = w.nbytes / (us * 1e-6) / 1e9 if us else None
            res.append({"type": qtype_name(qt), "n_out": n_out, "n_in": n_in, "n_rows": n_rows,
                        "us": us, "gbs": gbs, "frac_peak": gbs and gbs / peak_gbs,
                        "host_us": host_us, "host_us_prepared": host_us_prepared})
            del w, x, out, scratch
    return res
