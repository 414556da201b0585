"""The 32-block types with their weight rows interleaved 16 at a time: the int8 product where one
weight load serves 16 output rows (llama.cpp: ggml-cpu's repack.cpp, which regroups block_q4_0
into block_q4_0x8 at load time and multiplies with ggml_gemv_q4_0_8x8_q8_0 / ggml_gemm_...).

    interleave(w, qtype) -> bytes   the matrix regrouped (same shape, same bytes), for X16_OF[qtype]
    can_interleave(qtype)           whether a type has such a layout (the 32-block types)
    matmul_x16_by(x, w16, qtype16, out, s, ahead)   y = x @ W^T with x rounded to int8 blocks (matmul_q8's
                                    numerics); the weights prefetched `ahead` bytes ahead (< 0: not)

Why: matmul_q8's passes take one weight row at a time and meet each activation block in a 64-byte
dot product whose result is 16 partial sums of that one row; every block then pays the sign trick,
the integer-to-float conversion, the scales' product and a fused add for one row. With 16 rows
interleaved, a 64-byte load holds 4 elements of each of 16 rows, the activation's 4 matching bytes
are broadcast, and one dot product gives one partial sum for each of the 16 rows: the float work of
a block is shared by 16 rows and nothing is summed across lanes. On a Zen 4 the one-row product
of the 0.5B's Q5_0 shapes ran 3-5x faster with the weights in cache (docs/lab/2026-12-04-zen4.md). The CPU
backend uses it for the types SPECNB_REPACK names (run/backend_cpu.py: Q5_0 and Q5_1 by default).

The layout, per group of 16 rows (r) and block b of 32 elements (e = 4k + j, k < 8, j < 4), in this
order: the 16 scales d (float16), the 16 mins m (Q4_1, Q5_1), the quants, the fifth bits (Q5_*):
  Q8_0  8 x 64 bytes: vector k, byte 4r + j = q_r[4k + j] (signed)
  Q4_*  4 x 64 bytes: vector c, byte 4r + j = qs_r[4c + j] (its low nibble is element 4c + j, its
        high nibble element 16 + 4c + j: GGUF's own packing, so the nibbles need no regrouping)
  Q5_*  the same, then 64 bytes H: byte 4r + j, bit k = the fifth bit of element 4k + j of row r
A group-block is 16 blocks' bytes, so the matrix keeps its [n_out, row_bytes] shape. When n_out is
not a multiple of 16, the last n_out % 16 rows stay as the file has them (the tail).

Numerics: a block's integer dot product is exact, w . x = sum (u - off) x with u the unsigned
quants and off 8 (Q4_0), 16 (Q5_0), or with the sign trick (Q8_0); then, for each row and output,
acc = fma(float(i_b), d_w * d_x, acc) (+ fma(m_w, s_x, acc) for Q4_1 / Q5_1) block after block,
one float32 chain per output. Every row of a batch runs the same chain, so a row's outputs are
bit-identical alone or in any batch, and every SIMD level gives the same bits; a tail row runs the
same chain one element at a time, so an output's bits do not depend on where its row sits either
(a restricted output head gives the same logits as those columns of the whole one).
"""
from collections import namedtuple

import numpy as np
from numba import njit, prange

from .matmul import _N_CHUNKS, SERIAL_MAX_ELEMENTS
from .qtypes import (Q4_0, Q4_0X16, Q4_1, Q4_1X16, Q5_0, Q5_0X16, Q5_1, Q5_1X16, Q8_0, Q8_0X16, X16_BASE, X16_OF,
                     X16_ROWS, _BLOCK_BYTES, qtype_name, x16_groups)
from .blocks import _scale16
from .matmul_x16k import K_BASE, PAIRS16, interleave_k, prefetch_span
from .quantize_q8 import _quantize_rows
from .simd import _AVX512, _VNNI256, ld_i8, ld_u32, sfma
from .simd_wide import vabs8, vhalf16, vload_b64
from .tiles import (tbcast4, tbroadcast, tdot4, tdot4p, tfloat, tfma, tile_rows, tmul, tnegate_where, tpairsum,
                    tsplat_i32, tstore_f32, tzeros)

_jit = njit(cache=True, fastmath=False)
_inline = njit(fastmath=False, forceinline=True, _nrt=False)
# rows per pass: AVX-512 holds 8 rows' integer and float accumulators (one register each) in its
# 32 registers; on AVX2 each takes two of 16 (AVX-VNNI: 6 rows, measured with matmul_x16k's)
R_MAX = 8 if _AVX512 else 6 if _VNNI256 else 4

# A 32-block type's GGUF block, as the layout and the kernels read it: its bytes (qtypes'
# table), where its quants start (after d, m, qh), the offset of its unsigned quants (w = u - off),
# whether it has a min m (Q4_1, Q5_1) and a fifth bit (Q5_*)
Layout = namedtuple("Layout", "bytes qs0 off has_min five")
_LAYOUT = {t: Layout(int(_BLOCK_BYTES[t]), qs0, off, t in (Q4_1, Q5_1), t in (Q5_0, Q5_1))
           for t, qs0, off in ((Q8_0, 2, 0), (Q4_0, 2, 8), (Q4_1, 4, 0), (Q5_0, 6, 16), (Q5_1, 8, 0))}


def can_interleave(qtype: int) -> bool:
    """A type with an interleaved layout: the 32-block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) here,
    Q4_K and Q6_K in matmul_x16k.py."""
    return int(qtype) in X16_OF


# ---- the layout ----------------------------------------------------------------------------------

def interleave(w: np.ndarray, qtype: int) -> np.ndarray:
    """uint8 [n_out, row_bytes] of a GGUF type with an interleaved layout -> the same bytes
    regrouped for X16_OF[qtype] (read-only, C-contiguous, the same shape); the K types go to
    matmul_x16k.interleave_k."""
    qtype = int(qtype)
    if qtype in K_BASE.values():
        return interleave_k(w, qtype)
    if qtype not in X16_OF:
        raise ValueError(f"interleave: {qtype_name(qtype)} has no interleaved layout "
                         f"(only {', '.join(qtype_name(t) for t in X16_OF)})")
    L = _LAYOUT[qtype]
    W = x16_groups(w, L.bytes, "interleave", f"{qtype_name(qtype)} blocks")    # (checks w)
    w = np.ascontiguousarray(w)
    out = np.empty_like(w)
    _regroup(w, out, len(W), L.bytes, L.qs0, L.has_min, L.five)
    out[X16_ROWS * len(W):] = w[X16_ROWS * len(W):]              # the tail, as the file has it
    out.flags.writeable = False
    return out


@njit(cache=True)
def _regroup(w, out, n_groups, bb, qs0, has_min, five):
    # the first n_groups groups of 16 rows of w (uint8 [n_out, row_bytes], blocks of bb bytes whose
    # quants start at qs0) into out in the layout above, one group-block of 16 blocks after another:
    # d, m (has_min), the quants' words, the fifth bits (five). Compiled: a restricted draft head is
    # regrouped for every new prompt; NumPy's transposes of 4-byte words took 33-50 ms for a 33k-row
    # Q4_0 head (133 ms Q5_0), this loop 11.5 (29) on a Zen 4
    rb = w.shape[1]
    nq = bb - qs0                                  # quant bytes of a block
    wf, of = w.reshape(-1), out.reshape(-1)       # flat: no array view per row (each costs a reference count)
    for g in range(n_groups):
        for b in range(rb // bb):
            o = (X16_ROWS * g * rb) + X16_ROWS * bb * b
            for r in range(X16_ROWS):
                c = (X16_ROWS * g + r) * rb + bb * b                     # row r's block b in w
                of[o + 2 * r] = wf[c]                                    # d
                of[o + 2 * r + 1] = wf[c + 1]
                if has_min:                                              # m
                    of[o + 32 + 2 * r] = wf[c + 2]
                    of[o + 32 + 2 * r + 1] = wf[c + 3]
                q = o + (64 if has_min else 32)
                for k in range(nq // 4):                                 # vector k, bytes 4r + j
                    for j in range(4):
                        of[q + 64 * k + 4 * r + j] = wf[c + qs0 + 4 * k + j]
                if five:                                                 # byte 4r + j, bit k
                    h = q + 16 * nq
                    qh = (np.uint32(wf[c + qs0 - 4]) | (np.uint32(wf[c + qs0 - 3]) << 8)
                          | (np.uint32(wf[c + qs0 - 2]) << 16) | (np.uint32(wf[c + qs0 - 1]) << 24))
                    for j in range(4):
                        v = np.uint32(0)
                        for k in range(8):
                            v |= ((qh >> np.uint32(4 * k + j)) & np.uint32(1)) << np.uint32(k)
                        of[h + 4 * r + j] = np.uint8(v)


# ---- the passes: R activation rows x one group of 16 weight rows ----------------------------------

def _pass(qtype, R):
    _, _, off, has_min, five = _LAYOUT[qtype]
    hdr = 64 if has_min else 32                        # d (and m) of the 16 rows
    gb = X16_ROWS * _LAYOUT[qtype].bytes

    @_inline
    def block(acc, w, q, qx, xi, n):
        # the integer dot products of one group-block (at byte q of w) with R rows' block of 32
        # activations (row r at qx[xi + r n]), added to acc (i32x16 per row, lane = weight row).
        # AVX2 without VNNI (matmul_x16k.PAIRS16): the pmaddubsw pairs add up in int16 and one
        # pmaddwd by ones finishes them, where tdot4 pays a pmaddwd and an int32 add per 64 bytes
        # (16 a group-block, 2 now): Q4_* in one run of 8 steps (8 x 2 x 15 x 127 = 30,480 < 2^15),
        # Q5_* in two of 4 (4 x 2 x 31 x 127 = 31,496); the same integers. Q8_0's sign trick keeps
        # tdot4 (one pair reaches 2 x 128 x 127)
        if qtype == Q8_0:
            for k in range(8):
                v = vload_b64(w, q + hdr + 64 * k)
                acc = tdot4(acc, vabs8(v), tnegate_where(tbcast4(qx, xi + 4 * k, n, R), v))
            return acc
        h = vload_b64(w, q + hdr + 256) if five else vload_b64(w, q)      # (h unused without Q5)
        t = tzeros(np.int32, 16, R)                    # PAIRS16: the int16 pair sums
        for c in range(4):
            v = vload_b64(w, q + hdr + 64 * c)
            lo = v & 15
            hi = v >> 4
            if five:
                lo = lo | ((h << (4 - c)) & 16)        # bit c of h: the fifth bit of element 4c + j
                hi = hi | ((h >> c) & 16)              # bit c + 4: element 16 + 4c + j
            if PAIRS16:
                t = tdot4p(t, lo, tbcast4(qx, xi + 4 * c, n, R))
                t = tdot4p(t, hi, tbcast4(qx, xi + 16 + 4 * c, n, R))
                if five and c == 1:                    # Q5_*: an int16 half holds 4 steps
                    acc = tpairsum(acc, t)
                    t = tzeros(np.int32, 16, R)
            else:
                acc = tdot4(acc, lo, tbcast4(qx, xi + 4 * c, n, R))
                acc = tdot4(acc, hi, tbcast4(qx, xi + 16 + 4 * c, n, R))
        return tpairsum(acc, t) if PAIRS16 else acc

    @_inline
    def run(r, base, w, p, nb, qx, dx, sq, sx, out, o, n_out, n_rows, ahead, last):
        # rows base + r .. + R - 1 of the batch, the group of weight rows at byte p (outputs o .. o + 15);
        # the first tile prefetches the weights `ahead` bytes ahead (< 0: not), the others find them cached
        r0 = base + r
        n = 32 * nb
        f = tzeros(np.float32, 16, R)
        for b in range(nb):
            q = p + gb * b
            if ahead >= 0 and r == 0:
                prefetch_span(w, q, q + gb, ahead, last)
            i = r0 * nb + b
            acc = tsplat_i32(sq, i, nb, R, -off) if off else tzeros(np.int32, 16, R)
            acc = block(acc, w, q, qx, r0 * n + 32 * b, n)
            f = tfma(tfloat(acc), tmul(tbroadcast(dx, i, nb, R, 16), vhalf16(w, q)), f)
            if has_min:
                f = tfma(tbroadcast(sx, i, nb, R, 16), vhalf16(w, q + 32), f)
        tstore_f32(out, r0 * n_out + o, n_out, f)
    return run


def _rows(qtype):
    run = tile_rows(lambda R: _pass(qtype, R), R_MAX)

    @njit(fastmath=False, _nrt=False)
    def rows(qx, dx, sq, sx, w2, out2, g0, g1, nb, ahead):
        # out2[:, 16 g0 : 16 g1] for the groups g0 .. g1 - 1
        n_rows, n_out = out2.shape
        gbytes = X16_ROWS * w2.shape[1]
        w, out = w2.reshape(-1), out2.reshape(-1)
        for g in range(g0, g1):
            run(n_rows, 0, w, g * gbytes, nb, qx, dx, sq, sx, out, X16_ROWS * g, n_out, n_rows, ahead, w.size - 1)
    return rows


def _tail(qtype):
    bs, qs0, off, has_min, five = _LAYOUT[qtype]

    @njit(fastmath=False, _nrt=False)
    def tail(qx, dx, sq, sx, w2, out2, o0, nb):
        # out2[:, o0:] from the tail's plain rows (fewer than 16), one element at a time: each
        # output the same float chain as a group's lane (the exact integer dot, then the fmas)
        n_rows, n_out = out2.shape
        rb = w2.shape[1]
        w = w2.reshape(-1)
        n = 32 * nb
        for o in range(o0, n_out):
            for r in range(n_rows):
                acc = np.float32(0)
                for b in range(nb):
                    p = o * rb + b * bs
                    h = ld_u32(w, p + qs0 - 4) if five else 0
                    isum = 0
                    for j in range(32):
                        if qtype == Q8_0:
                            u = ld_i8(w, p + 2 + j)
                        else:
                            byte = np.int64(w[p + qs0 + j % 16])
                            u = (byte & 15) if j < 16 else (byte >> 4)
                            if five:
                                u |= ((h >> j) & 1) << 4
                            u -= off
                        isum += u * np.int64(qx[r * n + 32 * b + j])
                    i = r * nb + b
                    acc = sfma(np.float32(isum), dx[i] * _scale16(w, p), acc)
                    if has_min:
                        acc = sfma(sx[i], _scale16(w, p + 2), acc)
                out2[r, o] = acc
    return tail


_rows_q8_0, _rows_q4_0, _rows_q4_1, _rows_q5_0, _rows_q5_1 = (_rows(t) for t in (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1))
_tail_q8_0, _tail_q4_0, _tail_q4_1, _tail_q5_0, _tail_q5_1 = (_tail(t) for t in (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1))


@_jit
def _x16_rows(qx, dx, sq, sx, w, qtype, out, g0, g1, nb, ahead, q8_0, q4_0, q4_1, q5_0, q5_1):
    # the dispatch, each branch compiled only for the layouts selected (qtypes.TypeSel)
    if q5_0 is not None and qtype == Q5_0X16:
        _rows_q5_0(qx, dx, sq, sx, w, out, g0, g1, nb, ahead)
    elif q8_0 is not None and qtype == Q8_0X16:
        _rows_q8_0(qx, dx, sq, sx, w, out, g0, g1, nb, ahead)
    elif q4_0 is not None and qtype == Q4_0X16:
        _rows_q4_0(qx, dx, sq, sx, w, out, g0, g1, nb, ahead)
    elif q4_1 is not None and qtype == Q4_1X16:
        _rows_q4_1(qx, dx, sq, sx, w, out, g0, g1, nb, ahead)
    elif q5_1 is not None and qtype == Q5_1X16:
        _rows_q5_1(qx, dx, sq, sx, w, out, g0, g1, nb, ahead)
    else:
        raise ValueError("specnb.kernels.matmul_x16: layout outside the compiled selection:", qtype)


@_jit
def _x16_tail(qx, dx, sq, sx, w, qtype, out, o0, nb, q8_0, q4_0, q4_1, q5_0, q5_1):
    if q5_0 is not None and qtype == Q5_0X16:
        _tail_q5_0(qx, dx, sq, sx, w, out, o0, nb)
    elif q8_0 is not None and qtype == Q8_0X16:
        _tail_q8_0(qx, dx, sq, sx, w, out, o0, nb)
    elif q4_0 is not None and qtype == Q4_0X16:
        _tail_q4_0(qx, dx, sq, sx, w, out, o0, nb)
    elif q4_1 is not None and qtype == Q4_1X16:
        _tail_q4_1(qx, dx, sq, sx, w, out, o0, nb)
    elif q5_1 is not None and qtype == Q5_1X16:
        _tail_q5_1(qx, dx, sq, sx, w, out, o0, nb)
    else:
        raise ValueError("specnb.kernels.matmul_x16: layout outside the compiled selection:", qtype)


@njit(parallel=True, fastmath=False, cache=True)
def matmul_x16_by(x, w, qtype, out, s, ahead):
    # out [n_rows, n_out] = x [n_rows, n_in] @ W^T for an interleaved matrix w [n_out, row_bytes]
    # (shapes checked by the caller, x and w C-contiguous); s: the TypeSel of the layouts to serve;
    # ahead >= 0: each thread prefetches its run of group-blocks that many bytes ahead of reading
    # them (tuning.prefetch_ahead_x16(), measured per machine), < 0: the hardware's prefetchers alone
    n_rows, n_in = x.shape
    nb = n_in // 32
    qx = np.empty(n_rows * n_in, np.int8)
    dx = np.empty(n_rows * nb, np.float32)
    sq = np.empty(n_rows * nb, np.int32)
    sx = np.empty(n_rows * nb, np.float32)
    _quantize_rows(x, qx, dx, sq, sx)
    n_groups = w.shape[0] // X16_ROWS
    if X16_ROWS * n_groups < w.shape[0]:
        _x16_tail(qx, dx, sq, sx, w, qtype, out, X16_ROWS * n_groups, nb,
                  s.q8_0x16, s.q4_0x16, s.q4_1x16, s.q5_0x16, s.q5_1x16)
    if w.shape[0] * n_in <= SERIAL_MAX_ELEMENTS or n_groups < 2:
        # g0 as an int64 (0 * n_groups), not the literal 0: one compiled copy of the rows kernels
        _x16_rows(qx, dx, sq, sx, w, qtype, out, 0 * n_groups, n_groups, nb, ahead,
                  s.q8_0x16, s.q4_0x16, s.q4_1x16, s.q5_0x16, s.q5_1x16)
        return
    n_chunks = min(n_groups, _N_CHUNKS)
    for c in prange(n_chunks):
        _x16_rows(qx, dx, sq, sx, w, qtype, out, c * n_groups // n_chunks, (c + 1) * n_groups // n_chunks, nb,
                  ahead, s.q8_0x16, s.q4_0x16, s.q4_1x16, s.q5_0x16, s.q5_1x16)


__all__ = ["interleave", "can_interleave", "matmul_x16_by", "R_MAX", "X16_OF", "X16_BASE"]
