"""How each GGUF block type is read on a GPU (numba-cuda): the per-thread "slot" decoders and the
element order they imply, shared by the products (matmul_cuda.py) and the steps that prepare their
activations (fused_cuda.py). (llama.cpp: ggml-cuda's dequantize.cuh / vecdotq.cuh.)

Weights stay raw GGUF blocks on the device, read through three views of the same memory: uint32
words (the quants, 4 bytes per load), float16 (the block scales d, m, dmin) and float32 (F32
weights). A "slot" is the unit of work of one thread: the K weights it can decode from one 4-byte
word of quants (plus its block's scales):

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

The activations a product multiplies are permuted into the same order, xp[r, k, s] =
x[r, elem(s, k)] (`TYPES[qtype].elem`), so that consecutive threads (consecutive slots) read
consecutive floats. Types with the same element order and K share one permutation (`order_of`).

Small integers become floats through their bits (2**23 + q, minus 2**23: exact, and no slow
integer-to-float conversion), and the dequantized weights equal the CPU's bit for bit.
"""
from typing import NamedTuple

import numpy as np

from . import cuda_common as C
from .cuda_common import ix as _ix
from .qtypes import BF16, F16, F32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0

_fmul, _as_f32, _dev = C.fmul, C.as_f32, C.dev
_f32 = np.float32
_u32 = np.uint32
_U15, _U16, _U255 = np.uint32(15), np.uint32(16), np.uint32(255)
_MAGIC = np.uint32(0x4B000000)   # float32 bits of 2**23: (it | b) is 2**23 + b for b < 2**23


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


class BlockType(NamedTuple):
    slot: object        # slot(wq, wh, wf, base, s, wv, j): wv[j : j + K] <- the K weights of slot s
    elem: object        # elem(s, k): the row element of weight k of slot s
    K: int              # weights per slot


TYPES = {
    F32: BlockType(_slot_f32, _elem_1, 1), F16: BlockType(_slot_f16, _elem_1, 1),
    BF16: BlockType(_slot_bf16, _elem_1, 1),
    Q8_0: BlockType(_slot_q8_0, _elem_q8_0, 4),
    Q4_0: BlockType(_slot_q4_0, _elem_q4, 8), Q4_1: BlockType(_slot_q4_1, _elem_q4, 8),
    Q5_0: BlockType(_slot_q5_0, _elem_q4, 8), Q5_1: BlockType(_slot_q5_1, _elem_q4, 8),
    Q2_K: BlockType(_slot_q2_k, _elem_q2_k, 8), Q3_K: BlockType(_slot_q3_k, _elem_q2_k, 8),
    Q4_K: BlockType(_slot_q4_k, _elem_q4_k, 8), Q5_K: BlockType(_slot_q5_k, _elem_q4_k, 8),
    Q6_K: BlockType(_slot_q6_k, _elem_q6_k, 8),
}


def order_of(qtype: int) -> int:
    """The first type (by TYPES' order) whose activations are permuted as this type's: types with
    the same element order and K share one permuted copy of the activations."""
    t = TYPES[int(qtype)]
    return next(q for q, u in TYPES.items() if u.elem is t.elem and u.K == t.K)
