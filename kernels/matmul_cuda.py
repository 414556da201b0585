"""The quantized matrix products on a GPU (numba-cuda), twins of `matmul.matmul` / `matmul.dequant_row`.
(llama.cpp: ggml-cuda's mmvq.cu / dequantize.cuh, with float32 activations instead of q8_1.)

Weights stay raw GGUF blocks on the device: one flat buffer per matrix holding the n_out rows
back to back, each row padded to a multiple of 4 bytes (`upload_weight`), read through three
views of the same memory: uint32 words (the quants, 4 bytes per load), float16 (the block
scales d, m, dmin) and float32 (F32 weights).

A "slot" is the unit of work of one thread: the K weights it can decode from one 4-byte word of
quants (plus its block's scales):

  type              K  slots/block  slot q of block b holds elements (i = 0..3)
  F32 / F16 / BF16  1      1        the element s itself
  Q8_0              4      8        32b + 4q + i
  Q4_0 Q4_1 Q5_*    8      4        32b + 4q + i (low nibbles), 32b + 16 + 4q + i (high)
  Q4_K              8     32        256b + 64c + 4u + i (low), + 32 (high); c = q // 8, u = q % 8
  Q5_K              8     32        as Q4_K (the fifth bits from qh)
  Q6_K              8     32        256b + 32(4h + t) + 4u + i (low), + 64 (high);
                                    h = q // 16, t = (q // 8) % 2, u = q % 8
  Q2_K Q3_K         8     32        256b + 128h + 32k + 4u + i, k = 2 (q % 2) (i = 0..3), k + 1
                                    (i = 4..7); h = q // 16, u = (q // 2) % 8

The activations are first permuted into the same order, xp[r, k, s] = x[r, elem(s, k)], so that
consecutive threads (consecutive slots) read consecutive floats: every load of the hot loop is
coalesced. (For K = 1 the permutation is the identity and x is used as it is.)

matmul: thread-block layout. A block of TG * R threads computes R output rows; the TG threads of
a row group stride over the row's S slots (thread t takes slots t, t + TG, ...). For each slot a
thread decodes its K weights once into registers and multiplies them with CUDA_ROWS_PER_PASS (8)
activation rows kept in local accumulators; more rows take further passes over the same weight
row (from L1/L2). A thread decodes 4 slots back to back before their multiplications, so that
the loads of 4 slots are in flight together. The TG partial sums of a (row, output) pair are
then added by a fixed shared-memory tree. The order of every (row, output) sum depends on (TG,
the weight shape) only, never on n_rows or on the position of the row in the batch: a row's
result is bit-identical in any batch.
TG and R are picked from the weight shape alone (`mm_config`).

Small integers become floats through their bits (2**23 + q, minus 2**23: exact, and no slow
integer-to-float conversion), and the dequantized weights equal the CPU's bit for bit.

Kernels hold no Python objects, raise nothing and print nothing. Two libdevice calls are swapped
for NumPy twins under the CUDA simulator (where libdevice is not implemented).
"""
import time
from functools import partial

import numba
import numpy as np
from numba import cuda

from . import cuda_common as C
from .cuda_common import SIM, ix as _ix
from .qtypes import (BF16, F16, F32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0,
                     check_qtype, qtype_name, random_blocks, row_bytes)

_fmul, _as_f32, _dev = C.fmul, C.as_f32, C.dev
_f32 = np.float32
_u32 = np.uint32
_U15, _U16, _U255 = np.uint32(15), np.uint32(16), np.uint32(255)
_MAGIC = np.uint32(0x4B000000)   # float32 bits of 2**23: (it | b) is 2**23 + b for b < 2**23

CUDA_ROWS_PER_PASS = 8      # activation rows that share one decode of a weight slot
CUDA_SLOTS_PER_STEP = 4     # slots a thread decodes back to back (their loads overlap)
CUDA_MAX_THREADS = C.MAX_THREADS



@_dev
def _w4(wq, p):
    # uint32 <- the 4 bytes at byte p (p % 4 == 0)
    return wq[_ix(p >> 2)]


@_dev
def _w2(wq, p):
    # uint32 <- the 4 bytes at byte p (p % 2 == 0): two aligned words, funnel-shifted
    i = p >> 2
    sh = _u32((p & 2) * 8)
    return _u32((wq[_ix(i)] >> sh) | ((wq[_ix(i + 1)] << _U16) << (_U16 - sh)))


@_dev
def _half(wh, p):
    # float32 <- the float16 at byte p (p % 2 == 0)
    return _f32(wh[_ix(p >> 1)])


@_dev
def _byte(wq, p):
    # uint32 <- the byte at p
    return _u32((wq[_ix(p >> 2)] >> _u32((p & 3) * 8)) & _U255)


@_dev
def _nib(v, j):
    # uint32 <- nibble j (0..7) of the word v
    return _u32((v >> _u32(4 * j)) & _U15)


@_dev
def _bits(v, j, n):
    # uint32 <- n bits of v from bit j
    return _u32((v >> _u32(j)) & _u32((1 << n) - 1))


@_dev
def _fl(b, off):
    # float32(b - off), exactly, for 0 <= b < 2**23 and small off: 2**23 + b is built from its
    # bits and 2**23 + off subtracted (one float op instead of a slow integer->float convert)
    return _as_f32(np.int32(_MAGIC | b)) - _f32(8388608 + off)


# ---- slots: decode the K weights of slot s of the row starting at byte `base` into wv ------------
# Each weight is computed with the float32 operations, in the order, of the CPU dequantization
# (d * (q - 8), d * q + m, ...), so wv holds exactly the values gguf.quants.dequantize gives.

@_dev
def _slot_f32(wq, wh, wf, base, s, wv, j):
    wv[j] = wf[_ix((base >> 2) + s)]


@_dev
def _slot_f16(wq, wh, wf, base, s, wv, j):
    wv[j] = _half(wh, base + 2 * s)


@_dev
def _slot_bf16(wq, wh, wf, base, s, wv, j):
    p = base + 2 * s
    wv[j] = _as_f32(np.int32(_u32((wq[_ix(p >> 2)] >> _u32((p & 2) * 8)) << _U16)))


@_dev
def _slot_q8_0(wq, wh, wf, base, s, wv, j):
    p = base + 34 * (s >> 3)
    d = _half(wh, p)
    v = _w2(wq, p + 2 + 4 * (s & 7))
    for i in range(4):                 # int8 q: (q + 128) is the byte with its top bit flipped
        wv[j + i] = _fl(_bits(v, 8 * i, 8) ^ _u32(128), 128) * d


@_dev
def _slot_q4_0(wq, wh, wf, base, s, wv, j):
    p = base + 18 * (s >> 2)
    d = _half(wh, p)
    v = _w2(wq, p + 2 + 4 * (s & 3))
    for i in range(4):
        wv[j + i] = d * _fl(_nib(v, 2 * i), 8)
        wv[j + 4 + i] = d * _fl(_nib(v, 2 * i + 1), 8)


@_dev
def _slot_q4_1(wq, wh, wf, base, s, wv, j):
    p = base + 20 * (s >> 2)
    d = _half(wh, p)
    m = _half(wh, p + 2)
    v = _w4(wq, p + 4 + 4 * (s & 3))
    for i in range(4):
        wv[j + i] = _fmul(d, _fl(_nib(v, 2 * i), 0)) + m
        wv[j + 4 + i] = _fmul(d, _fl(_nib(v, 2 * i + 1), 0)) + m


@_dev
def _q5(v, qh, q, i, hi):
    # uint32 <- the 5-bit value of element i of slot q: nibble (low or high) | bit 4 from qh
    return (_nib(v, 2 * i + hi) | (_bits(qh, 16 * hi + 4 * q + i, 1) << _u32(4)))


@_dev
def _slot_q5_0(wq, wh, wf, base, s, wv, j):
    p = base + 22 * (s >> 2)
    q = s & 3
    d = _half(wh, p)
    qh = _w2(wq, p + 2)
    v = _w2(wq, p + 6 + 4 * q)
    for i in range(4):
        wv[j + i] = d * _fl(_q5(v, qh, q, i, 0), 16)
        wv[j + 4 + i] = d * _fl(_q5(v, qh, q, i, 1), 16)


@_dev
def _slot_q5_1(wq, wh, wf, base, s, wv, j):
    p = base + 24 * (s >> 2)
    q = s & 3
    d = _half(wh, p)
    m = _half(wh, p + 2)
    qh = _w4(wq, p + 4)
    v = _w4(wq, p + 8 + 4 * q)
    for i in range(4):
        wv[j + i] = _fmul(d, _fl(_q5(v, qh, q, i, 0), 0)) + m
        wv[j + 4 + i] = _fmul(d, _fl(_q5(v, qh, q, i, 1), 0)) + m


@_dev
def _k4_byte(sc0, sc1, sc2, j):
    # byte j (0..11) of the 12 packed Q4_K scale bytes held in three words
    w = sc0 if j < 4 else (sc1 if j < 8 else sc2)
    return _bits(w, 8 * (j & 3), 8)


@_dev
def _k4_scale_min(sc0, sc1, sc2, sb):
    # (scale, min) of sub-block sb (0..7), 6 bits each (ggml's get_scale_min_k4)
    if sb < 4:
        sc = _k4_byte(sc0, sc1, sc2, sb) & _u32(63)
        mn = _k4_byte(sc0, sc1, sc2, sb + 4) & _u32(63)
        return sc, mn
    hi = _k4_byte(sc0, sc1, sc2, sb + 4)
    sc = (hi & _U15) | ((_k4_byte(sc0, sc1, sc2, sb - 4) >> _u32(6)) << _u32(4))
    mn = (hi >> _u32(4)) | ((_k4_byte(sc0, sc1, sc2, sb) >> _u32(6)) << _u32(4))
    return _u32(sc), _u32(mn)


@_dev
def _slot_q6_k(wq, wh, wf, base, s, wv, j):
    p = base + 210 * (s >> 5)
    q = s & 31
    h = q >> 4
    t = (q >> 3) & 1
    u = q & 7
    ql = _w2(wq, p + 4 * q)
    qh = _w2(wq, p + 128 + 32 * h + 4 * u)
    d = _half(wh, p + 208)
    sb = 4 * h + t                     # sub-block of the low nibbles; + 2 for the high ones
    half16 = 1 if u >= 4 else 0        # elements 16..31 of a sub-block use its second scale
    d0 = d * _fl(_byte(wq, p + 192 + 2 * sb + half16) ^ _u32(128), 128)
    d1 = d * _fl(_byte(wq, p + 192 + 2 * (sb + 2) + half16) ^ _u32(128), 128)
    for i in range(4):
        lo = _nib(ql, 2 * i) | (_bits(qh, 8 * i + 2 * t, 2) << _u32(4))
        hi = _nib(ql, 2 * i + 1) | (_bits(qh, 8 * i + 2 * t + 4, 2) << _u32(4))
        wv[j + i] = d0 * _fl(lo, 32)
        wv[j + 4 + i] = d1 * _fl(hi, 32)


def _slot_k45(block_bytes, qs_off, qh_off):
    # Q4_K (no qh: qh_off < 0) and Q5_K: 8 nibbles of word q of qs (sub-blocks 2c and 2c + 1,
    # c = q // 8); the fifth bit of element 64c + 4u + i (+ 32) is bit 2c (2c + 1) of byte 4u + i
    # of qh
    @_dev
    def slot(wq, wh, wf, base, s, wv, j):
        p = base + block_bytes * (s >> 5)
        q = s & 31
        c = q >> 3
        d = _half(wh, p)
        dmin = _half(wh, p + 2)
        sc0 = _w4(wq, p + 4)
        sc1 = _w4(wq, p + 8)
        sc2 = _w4(wq, p + 12)
        qh = _w4(wq, p + qh_off + 4 * (q & 7)) if qh_off >= 0 else _u32(0)
        v = _w4(wq, p + qs_off + 4 * q)
        for hi in range(2):
            sc, mn = _k4_scale_min(sc0, sc1, sc2, 2 * c + hi)
            dl = d * _fl(sc, 0)
            ml = dmin * _fl(mn, 0)
            for i in range(4):
                q5 = _nib(v, 2 * i + hi) | (_bits(qh, 8 * i + 2 * c + hi, 1) << _u32(4))
                wv[j + 4 * hi + i] = _fmul(dl, _fl(q5, 0)) - ml
    return slot


_slot_q4_k = _slot_k45(144, 16, -1)
_slot_q5_k = _slot_k45(176, 48, 16)


@_dev
def _slot_q2_k(wq, wh, wf, base, s, wv, j):
    # slot q: the 2-bit fields k0 = 2 (q % 2) and k0 + 1 of word t = q // 2 of qs; byte i of it
    # holds element 128h + 32k + 4u + i (t = 8h + u) at bits 2k (groups of 16 for the scales)
    p = base + 84 * (s >> 5)
    q = s & 31
    t = q >> 1
    h = t >> 3
    u = t & 7
    k0 = 2 * (q & 1)
    v = _w4(wq, p + 16 + 4 * t)
    d = _half(wh, p + 80)
    dmin = _half(wh, p + 82)
    for kk in range(2):
        k = k0 + kk
        sm = _byte(wq, p + 8 * h + 2 * k + (1 if u >= 4 else 0))   # group 8h + 2k + u // 4
        dl = d * _fl(sm & _U15, 0)
        ml = dmin * _fl(sm >> _u32(4), 0)
        for i in range(4):
            wv[j + 4 * kk + i] = _fmul(dl, _fl(_bits(v, 8 * i + 2 * k, 2), 0)) - ml


@_dev
def _scale_q3_k(wq, p, g):
    # the 6-bit scale of group g (0..15) packed in the 12 bytes at p, as an unsigned value
    lo = (_byte(wq, p + (g & 7)) >> _u32(4 * (g >> 3))) & _U15
    hi = (_byte(wq, p + 8 + (g & 3)) >> _u32(2 * (g >> 2))) & _u32(3)
    return lo | (hi << _u32(4))


@_dev
def _slot_q3_k(wq, wh, wf, base, s, wv, j):
    # the low 2 bits as Q2_K's slots; bit 4h + k of byte 4u + i of hmask adds 4 (else q - 4)
    p = base + 110 * (s >> 5)          # blocks of 110 bytes: 2-byte aligned words
    q = s & 31
    t = q >> 1
    h = t >> 3
    u = t & 7
    k0 = 2 * (q & 1)
    v = _w2(wq, p + 32 + 4 * t)
    hm = _w2(wq, p + 4 * u)
    d = _half(wh, p + 108)
    for kk in range(2):
        k = k0 + kk
        dl = d * _fl(_scale_q3_k(wq, p + 96, 8 * h + 2 * k + (1 if u >= 4 else 0)), 32)
        for i in range(4):
            q3 = _bits(v, 8 * i + 2 * k, 2) | (_bits(hm, 8 * i + 4 * h + k, 1) << _u32(2))
            wv[j + 4 * kk + i] = dl * _fl(q3, 4)


# ---- element order of the slots (the activation permutation) -----------------------------------

@_dev
def _elem_1(s, k):
    return s


@_dev
def _elem_q8_0(s, k):
    return 4 * s + k


@_dev
def _elem_q4(s, k):
    # Q4_0 / Q4_1 / Q5_0 / Q5_1
    return 32 * (s >> 2) + 4 * (s & 3) + (k & 3) + (16 if k >= 4 else 0)


@_dev
def _elem_q4_k(s, k):
    q = s & 31
    return 256 * (s >> 5) + 64 * (q >> 3) + 4 * (q & 7) + (k & 3) + (32 if k >= 4 else 0)


@_dev
def _elem_q6_k(s, k):
    q = s & 31
    return (256 * (s >> 5) + 32 * (4 * (q >> 4) + ((q >> 3) & 1)) + 4 * (q & 7) + (k & 3)
            + (64 if k >= 4 else 0))


@_dev
def _elem_q2_k(s, k):
    # Q2_K / Q3_K
    q = s & 31
    t = q >> 1
    return (256 * (s >> 5) + 128 * (t >> 3) + 32 * (2 * (q & 1) + (1 if k >= 4 else 0))
            + 4 * (t & 7) + (k & 3))


# ---- the kernels, one set per type (compiled with the slot function as a constant) -------------

def _make_kernels(slot, elem, K):
    RC = CUDA_ROWS_PER_PASS
    UK = CUDA_SLOTS_PER_STEP * K

    @_dev
    def fma_rows(acc, xp, wv, j, s, r0, n_rows, S):
        # acc[rr] += xp[r0 + rr, :, s] . wv[j : j + K] for the rows of this pass, k in order
        for rr in range(RC):
            if r0 + rr >= n_rows:
                break
            a = acc[rr]
            xb = (r0 + rr) * K * S + s
            for k in range(K):
                a = cuda.fma(xp[_ix(xb + k * S)], wv[j + k], a)
            acc[rr] = a

    @cuda.jit
    def mm(wq, wh, wf, row_bytes, n_out, xp, n_rows, S, TG, bias, flags, out):
        # out[r, o] (=, += or + bias) sum_s sum_k xp[r, k, s] * w[o, elem(s, k)]
        # wq/wh/wf: views of the weight buffer; xp: [n_rows, K, S] flat; out: [n_rows, n_out] flat;
        # flags: 1 = add bias[o], 2 = accumulate into out (out += product)
        tid = cuda.threadIdx.x
        T = cuda.blockDim.x
        g = tid // TG                   # output row of this thread within the block
        t = tid - g * TG                # this thread's place among the row's TG threads
        o = cuda.blockIdx.x * (T // TG) + g
        live = o < n_out and g < T // TG
        base = o * row_bytes
        sh = cuda.shared.array(0, dtype=numba.float32)      # [RC, T]
        acc = cuda.local.array(RC, dtype=numba.float32)
        wv = cuda.local.array(UK, dtype=numba.float32)
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
                    fma_rows(acc, xp, wv, 0, s, r0, n_rows, S)
                    fma_rows(acc, xp, wv, K, s + TG, r0, n_rows, S)
                    fma_rows(acc, xp, wv, 2 * K, s + 2 * TG, r0, n_rows, S)
                    fma_rows(acc, xp, wv, 3 * K, s + 3 * TG, r0, n_rows, S)
                    s += 4 * TG
                while s < S:
                    slot(wq, wh, wf, base, s, wv, 0)
                    fma_rows(acc, xp, wv, 0, s, r0, n_rows, S)
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
                            v = v + bias[_ix(o)]
                        if flags & 2:
                            v = out[_ix(r * n_out + o)] + v
                        out[_ix(r * n_out + o)] = v
            if TG > 1:
                cuda.syncthreads()     # sh is reused by the next pass

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

    return mm, permute, rows


_TYPES = {          # qtype -> (slot, elem, K)
    F32: (_slot_f32, _elem_1, 1), F16: (_slot_f16, _elem_1, 1),
    BF16: (_slot_bf16, _elem_1, 1),
    Q8_0: (_slot_q8_0, _elem_q8_0, 4),
    Q4_0: (_slot_q4_0, _elem_q4, 8), Q4_1: (_slot_q4_1, _elem_q4, 8),
    Q5_0: (_slot_q5_0, _elem_q4, 8), Q5_1: (_slot_q5_1, _elem_q4, 8),
    Q2_K: (_slot_q2_k, _elem_q2_k, 8), Q3_K: (_slot_q3_k, _elem_q2_k, 8),
    Q4_K: (_slot_q4_k, _elem_q4_k, 8), Q5_K: (_slot_q5_k, _elem_q4_k, 8),
    Q6_K: (_slot_q6_k, _elem_q6_k, 8),
}
_KERNELS = {}


def cuda_kernels(qtype: int):
    """(K, matmul kernel, permute kernel, rows kernel) of one type (built on first use)."""
    check_qtype(qtype)
    qtype = int(qtype)
    if qtype not in _KERNELS:
        slot, elem, K = _TYPES[qtype]
        _KERNELS[qtype] = (K,) + _make_kernels(slot, elem, K)
    return _KERNELS[qtype]


class DeviceWeight:
    """A quantized matrix on the device: its raw GGUF rows, each padded to a multiple of 4 bytes,
    in one flat buffer (plus 8 spare bytes, read but unused by the last 2-aligned word loads)."""

    def __init__(self, data, qtype: int, n_in: int, stream=0):
        data = np.ascontiguousarray(data, dtype=np.uint8)
        self.qtype, self.n_in, self.n_out = int(qtype), int(n_in), data.shape[0]
        rb = row_bytes(qtype, n_in)
        if data.ndim != 2 or data.shape[1] != rb:
            raise ValueError(f"{qtype_name(qtype)} rows of {n_in} elements take {rb} bytes, "
                             f"got an array of shape {data.shape}")
        self.row_bytes = (rb + 3) // 4 * 4
        host = np.zeros(self.n_out * self.row_bytes + 8, np.uint8)
        host[:self.n_out * self.row_bytes].reshape(self.n_out, self.row_bytes)[:, :rb] = data
        self.buf = cuda.to_device(host, stream=stream)
        self.wq = self.buf.view(np.uint32)
        self.wh = self.buf.view(np.float16)
        self.wf = self.buf.view(np.float32)
        self.K = _TYPES[self.qtype][2]
        self.S = n_in // self.K
        self.nbytes = self.n_out * rb        # the GGUF bytes a product reads

    def __repr__(self):
        return f"DeviceWeight({qtype_name(self.qtype)}, {self.n_out}x{self.n_in})"


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
        S = n_in // _TYPES[int(qtype)][2]
        tg = 32
        while tg < 256 and tg * 8 < S:
            tg *= 2
    if not 1 <= tg <= CUDA_MAX_THREADS:
        raise ValueError(f"threads per output row must be in [1, {CUDA_MAX_THREADS}], got {tg}")
    return tg, max(1, 128 // tg)


def matmul_cuda(x, w: DeviceWeight, out, bias=None, accumulate: bool = False,
                threads: int | None = None, rows_per_block: int | None = None,
                scratch=None, stream=0):
    """out [n_rows, n_out] (=, or += when accumulate) x [n_rows, n_in] @ W^T (+ bias [n_out]),
    all device float32 arrays, C-contiguous. scratch: a device float32 array of at least
    n_rows * n_in elements for the permuted activations (allocated when None)."""
    K, mm, permute, _ = cuda_kernels(w.qtype)
    n_rows = x.shape[0]
    if x.shape[1] != w.n_in or out.shape[0] != n_rows or out.shape[1] != w.n_out:
        raise ValueError(f"matmul_cuda: x {x.shape} @ {w} -> out {out.shape} do not fit")
    if n_rows == 0:
        return out
    tg, r = mm_config(w.qtype, w.n_in, threads)
    if rows_per_block is not None:
        r = int(rows_per_block)
    if tg * r > CUDA_MAX_THREADS:
        raise ValueError(f"matmul_cuda: {tg} x {r} threads per block is more than "
                         f"{CUDA_MAX_THREADS}")
    xf = x.reshape(n_rows * w.n_in)
    if K > 1:
        n = n_rows * w.n_in
        if scratch is None:
            scratch = cuda.device_array(n, np.float32, stream=stream)
        elif scratch.size < n:
            raise ValueError(f"matmul_cuda: scratch of {scratch.size} floats; {n} needed")
        # the whole scratch, not scratch[:n]: both kernels index it below n themselves, and
        # numba-cuda builds a slice in Python (about 45 us on an H200's host, more than a launch)
        xp = scratch
        grid = (1, 1) if SIM else ((n + 255) // 256, 256)
        permute[grid[0], grid[1], stream](xf, w.n_in, n_rows, w.S, xp)
    else:
        xp = xf
    flags = (1 if bias is not None else 0) | (2 if accumulate else 0)
    b = bias if bias is not None else xp               # (not read without flag 1)
    T = tg * r
    shmem = 4 * CUDA_ROWS_PER_PASS * T if tg > 1 else 0
    mm[(w.n_out + r - 1) // r, T, stream, shmem](
        w.wq, w.wh, w.wf, w.row_bytes, w.n_out, xp, n_rows, w.S, tg, b, flags,
        out.reshape(n_rows * w.n_out))
    return out


def dequant_rows_cuda(w: DeviceWeight, ids, out, threads: int = 128, stream=0):
    """out [n, n_in] (device float32) <- rows ids [n] (device int32/int64) of w, dequantized."""
    _, _, _, rows = cuda_kernels(w.qtype)
    n = ids.shape[0]
    if n:
        rows[n, threads, stream](w.wq, w.wh, w.wf, w.row_bytes, ids, w.S, w.n_in,
                                 out.reshape(n * w.n_in))
    return out


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


def launch_floor(reps: int = 200) -> float:
    """Microseconds per launch of an empty kernel from Python (numba-cuda's dispatch and the
    driver's launch): the least any kernel call of the backend costs the host."""
    out = cuda.device_array(1, np.float32)
    return _host_us(lambda: _empty_kernel[1, 32](out), reps)


def matmul_bandwidth(shapes=((4096, 4096), (4096, 14336), (14336, 4096)),
                     qtypes=(Q4_0, Q8_0, Q4_K), n_rows: int = 1, reps: int = 50,
                     peak_gbs: float = 4800.0, seed: int = 0) -> list:
    """Time matmul_cuda on random weights of each (n_out, n_in) and type -> [{type, n_out, n_in,
    n_rows, us, gbs, frac_peak, host_us}]: `us` the GPU's time per call (CUDA events around calls
    queued behind a spin, `_gpu_us`), `gbs` the GGUF weight bytes read once per call in that time,
    `host_us` per call as Python issues them one after another. (A GPU only: under the simulator
    this would take hours.)"""
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
            us = host_us if SIM else _gpu_us(call, reps, host_us)      # (the simulator never spins)
            gbs = w.nbytes / (us * 1e-6) / 1e9 if us else None
            res.append({"type": qtype_name(qt), "n_out": n_out, "n_in": n_in, "n_rows": n_rows,
                        "us": us, "gbs": gbs, "frac_peak": gbs and gbs / peak_gbs,
                        "host_us": host_us})
            del w, x, out, scratch
    return res
