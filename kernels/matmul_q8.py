"""The matrix product with int8 activations, as llama.cpp's CPU backend computes it (ggml-cpu:
quantize_row_q8_0 / q8_1 / q8_K and ggml_vec_dot_<type>_q8_<0,1,K>, ggml-cpu-quants.c).

    matmul_q8(x, w, qtype, out, ahead=-1, ahead_x16=-1)   y = x @ W^T with x rounded to int8 blocks first
    matmul_q8_by(...)               the same from compiled code, for a selection of types (forward.py)
    quantize_q8_k(x) / quantize_q8_32(x)   the activation blocks, row by row (for the tests), and
    pack_q8_k(x)                    the blocks as the kernels read them (both from quantize_q8.py)
    one_row_q4_k(...)               the decode loop's 1-row Q4_K pass (tuning.py times it)
    self_check(), bench()           `python -m specnb.kernels.matmul_q8`

The activation rows are rounded to int8 the way ggml does it for the weight type at hand:
  - K types (Q2_K .. Q6_K): per 256-element block (block_q8_K) d = max / -127 where max is the
    element of largest magnitude, q = round(x / d) (ties to even), and bsums, the sums of each 16
    q's; every super-block then meets them in integer dot products with its small integer scales
    (blocks_q8.py) and contributes d_w * d_x * sum_g S_g (u . q)_g + e_w * d_x * sum_g C_g bsum_g;
  - Q8_0, Q4_0, Q5_0 (block_q8_0) and Q4_1, Q5_1 (block_q8_1): per 32 elements d = max|x| / 127,
    q = round(x / d), s = d * sum(q); a block contributes d_w * d_x * (w_q . q) (+ m_w * s).
Rounding x to int8 moves each product by up to max|x_block| / 254, so this is not the exact path
(matmul.py is); it is what llama.cpp computes, and several times faster.

Kernels: a pass takes one weight row and a tile of R activation rows (tiles.py): every 64-weight
chunk is decoded once and meets the R rows in R integer dot products (one or two VNNI
instructions, or two or three AVX2 ones, per row). For more than R_MAX rows the first pass keeps
the decoded row in a scratch buffer (L1-resident) and the passes for the other rows read it back
(the K types on AVX2: each pass decodes the row again, K_STORE).
Each row's sums run the same instructions in the same order whatever R is:
a float32 accumulator per row (8 lanes for the K types, whose integer sums are first folded to 8
lanes; 16 for the others, a block's 8 lanes each) gets one fused multiply-add per super-block (K
types) or per chunk of two blocks (the others), and a fixed halving tree adds its lanes at the end. So a row's
outputs are bit-identical alone or in any batch. The integer sums are exact, so every SIMD level
(simd.py) gives the same bits. Rows come in passes of R_MAX (8 with AVX-512, 4 otherwise; the K
types K_R_MAX, 10 on x86), then one pass of the rest.

Memory (K types, several rows): when a weight row's activations (256 bytes per super-block per
row) would not fit in L1 next to the streaming weights, a block of O_BLOCK weight rows runs one
range of super-blocks at a time (k_block), the float accumulators parked in a scratch between
ranges, so each range of activations is read from L2 once per block instead of once per weight
row; and the piece of weights the next pass reads is prefetched by hand (the hardware
prefetchers lose a stream that jumps from row to row), as it is for long rows in one range. The
order of every row's operations is unchanged, so the bits are too.
"""
import functools
import time

import gguf
import numpy as np
from numba import njit, prange

from . import blocks_q8 as B
from . import qtypes as T
from .matmul import _N_CHUNKS, SERIAL_MAX_ELEMENTS, matmul, matmul_ref
from .matmul_x16 import matmul_x16_by
from .matmul_x16k import matmul_x16k_by
from .quantize_q8 import (_alloc_q8_32, _alloc_q8_k, _quantize_q8_32, _quantize_q8_k, pack_q8_32, pack_q8_k,  # noqa: F401
                          quantize_q8_32, quantize_q8_k)
from .qtypes import (Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, X16_QTYPES, check_shapes,
                     is_x16, is_x16k, type_sel)
from .simd import _AVX2, _AVX2_ONLY, _AVX512, vsplat
from .simd_wide import prefetch, vabs8, vgroups4, vstore_at
from .tiles import (tbroadcast, tdot4, tdot4s, tdot4s8, tfloat, tfma, tfold, tile_rows, tload_bytes, tload_f32,
                    tload_i16, tmadd, tmul, tnegate_where, tstore_f32, tstore_hsum, tzeros)

_jit = njit(cache=True, fastmath=False)
_inline = njit(fastmath=False, forceinline=True, _nrt=False)
R_MAX = 8 if _AVX512 else 4
# The K types: 9 rows (draft-max 8) in one pass. With their sums folded to 8 lanes (K_ACC_LANES) a
# row needs two registers, which AVX-512's 32 hold, and AVX2's 16 nearly: on a Zen 3 (AVX2) 9 rows
# cost 3.4-3.45 one-row passes in one 10-row pass, 4.0-5.3 in 4-row tiles (Q6_K, Q4_K; docs/lab/2026-12-04-zen3.md).
K_R_MAX = 10 if _AVX2 else R_MAX
# beyond K_R_MAX rows: AVX-512 keeps the first tile's decoded row in a scratch for the next tiles;
# AVX2 decodes it again (on a Zen 3 the scratch's extra loads cost more than the decoding)
K_STORE = _AVX512
Q8_QTYPES = frozenset((Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)) | T.K_QTYPES


@_jit
def has_q8_kernel(qtype):
    # qtype in Q8_QTYPES or an interleaved layout (X16_QTYPES), callable from jitted code too
    return (qtype == Q8_0 or qtype == Q4_0 or qtype == Q4_1 or qtype == Q5_0 or qtype == Q5_1
            or qtype == Q2_K or qtype == Q3_K or qtype == Q4_K or qtype == Q5_K or qtype == Q6_K
            or is_x16(qtype))


# ---- passes: one weight row times a tile of R activation rows ------------------------------------
# All arrays are flat; weight row o starts at byte p = o * row_bytes; chunk j of activation row r
# at byte 64 (j n_rows + r) of qx (the layout of the quantizers above).

@functools.lru_cache(maxsize=None)
def _k_unit(chunk, store):
    # one per (type, store), shared by the passes of every R: each of its four chunks compiles
    # once, not once per pass (a closure made inside _k_pass would be a new function per pass)
    @_inline
    def u(w, pb, c, buf, q):
        # chunk c of the super-block at pb (and into buf at q when this pass stores)
        v = chunk(w, pb, c)
        if store:
            vstore_at(buf, q + 64 * c, v)
        return v
    return u


# The K types' integer sums, folded to 8 lanes (lane l + lane l + 8: exact) before they meet the
# floats, so that a row's float accumulator is one 256-bit register. AVX2, short of registers, adds
# each chunk's two halves as they are made (one 256-bit register per row); the other levels sum a
# super-block's four chunks in 16 lanes (one 512-bit register per row with AVX-512) and fold once.
# The same integers either way (the tests compare the levels' bits).
_FOLD_EACH_CHUNK = _AVX2_ONLY
K_ACC_LANES = 8 if _FOLD_EACH_CHUNK else 16
k_dot = tdot4s8 if _FOLD_EACH_CHUNK else tdot4s


def _k_pass(setup, chunk, bsize, R, store=False):
    u = _k_unit(chunk, store)

    @_inline
    def run(r, base, w, p, nb, qx, dx, bs, out, o, n_out, n_rows, buf, b0, b1, accs, ao, pnext):
        # out[r0 + i, o] for i < R, r0 = base + r, over super-blocks b0 .. b1 - 1 of the nb of
        # bsize bytes at byte p of w. A row's float accumulator starts at zero (b0 == 0) or where
        # the previous range left it in accs (at ao + 8 row), and ends in out (b1 == nb) or back in
        # accs: a range of super-blocks continues the sum exactly, in the same order.
        # store: also keep the decoded super-blocks in buf (blocks_q8.store_k). pnext >= 0: the
        # byte of w where the next range of super-blocks starts (prefetched as this one runs)
        r0 = base + r
        if b0 == 0:
            acc_f = tzeros(np.float32, 8, R)
        else:
            acc_f = tload_f32(accs, ao + 8 * r0, 8, R, 8)
        cs = 64 * n_rows                                # bytes from one chunk to the next
        last = w.size - 1
        for b in range(b0, b1):
            pb = p + bsize * b
            q = B.K_BUF_BYTES * b
            if pnext >= 0:
                pn = pnext + bsize * (b - b0)
                for off in range(0, bsize, 64):
                    prefetch(w, min(pn + off, last))
            S, C, d, e = setup(w, pb)
            if store:
                B.store_k_scales(buf, q, S, C, d, e)
            xb = (4 * b * n_rows + r0) * 64
            acc = tzeros(np.int32, K_ACC_LANES, R)
            acc = k_dot(acc, u(w, pb, 0, buf, q), tload_bytes(qx, xb, 64, R, 64), vgroups4(S, 0))
            acc = k_dot(acc, u(w, pb, 1, buf, q), tload_bytes(qx, xb + cs, 64, R, 64), vgroups4(S, 1))
            acc = k_dot(acc, u(w, pb, 2, buf, q), tload_bytes(qx, xb + 2 * cs, 64, R, 64), vgroups4(S, 2))
            acc = k_dot(acc, u(w, pb, 3, buf, q), tload_bytes(qx, xb + 3 * cs, 64, R, 64), vgroups4(S, 3))
            ib = b * n_rows + r0
            bias = tmadd(C, tload_i16(bs, 16 * ib, 16, R, 16))                 # [R] i32x8
            # this super-block's sum, d * acc + e * bias (8 lanes), times the row's d_x
            t = tfma(tfloat(bias), vsplat(e), tmul(tfloat(tfold(acc)), vsplat(d)))
            acc_f = tfma(tbroadcast(dx, ib, 1, R, 8), t, acc_f)
        if b1 == nb:
            tstore_hsum(out, r0 * n_out + o, n_out, acc_f)
        else:
            tstore_f32(accs, ao + 8 * r0, 8, acc_f)
    return run


def _b_pass(pair, one, signed, has_min, bsize, R, store=False):
    @_inline
    def dot(acc_f, q, dw, m, qx, dx16, sx16, j):
        # chunk j (at element 64 j of every row) of the tile
        x = tload_bytes(qx, 64 * j, 64, R, 64)
        if signed:                      # |w| times x with w's sign (pmaddubsw takes unsigned w)
            x = tnegate_where(x, q)
            q = vabs8(q)
        acc = tdot4(tzeros(np.int32, 16, R), q, x)
        acc_f = tfma(tfloat(acc), tmul(tload_f32(dx16, 16 * j, 16, R, 16), dw), acc_f)
        if has_min:
            acc_f = tfma(tload_f32(sx16, 16 * j, 16, R, 16), m, acc_f)
        return acc_f

    @_inline
    def run(r, base, w, p, nb, qx, dx16, sx16, out, o, n_out, n_rows, buf, pnext):
        # pnext >= 0: the byte of w prefetched as the row's first pair of blocks is read; it
        # moves along with them (the weights stream linearly, pnext - p bytes ahead)
        r0 = base + r
        acc_f = tzeros(np.float32, 16, R)
        last = w.size - 1
        for c in range(nb // 2):
            if pnext >= 0:
                prefetch(w, min(pnext + 2 * bsize * c, last))
            q, dw, m = pair(w, p + 2 * bsize * c, bsize)
            if store:
                B.store_b(buf, B.B_BUF_BYTES * c, q, dw, m)
            acc_f = dot(acc_f, q, dw, m, qx, dx16, sx16, c * n_rows + r0)
        if nb % 2:
            c = nb // 2
            q, dw, m = one(w, p + 2 * bsize * c)
            if store:
                B.store_b(buf, B.B_BUF_BYTES * c, q, dw, m)
            acc_f = dot(acc_f, q, dw, m, qx, dx16, sx16, c * n_rows + r0)
        tstore_hsum(out, r0 * n_out + o, n_out, acc_f)
    return run


def _rows(make_pass, buf_tiles):
    """(the Q*_0 / Q*_1 types; the K types: _k_rows)
    rows(qx, dx, sx, w2, out, lo, hi, nb, buf, ahead): out[:, lo:hi] in tiles of rows
    (tiles.tile_rows): up to R_MAX rows decode each weight row in registers; beyond that the
    first tile also keeps the decoded row in buf (uint8 scratch) and the other tiles read it back
    (buf_tiles). ahead >= 0: the weights are prefetched that many bytes ahead of the pass
    reading them (tuning.py measures the distance once per machine); < 0: no prefetching."""
    run = tile_rows(make_pass, R_MAX)
    one = run.passes[0]                         # run's own one-row pass, not another copy
    first = make_pass(R_MAX, True)

    @njit(fastmath=False, _nrt=False)
    def rows(qx2, dx2, sx2, w2, out2, lo, hi, nb, buf, ahead):
        n_rows = qx2.shape[1]
        n_out = out2.shape[1]
        rb = w2.shape[1]
        qx, dx, sx, w, out = qx2.reshape(-1), dx2.reshape(-1), sx2.reshape(-1), w2.reshape(-1), out2.reshape(-1)
        z = lo - lo                                 # (int64s where run passes int64s: one compile)
        if n_rows == 1:                             # the decode loop, on its own
            for o in range(lo, hi):
                one(z, 0, w, o * rb, nb, qx, dx, sx, out, o, n_out, n_rows, buf,
                    o * rb + ahead if ahead >= 0 else z - 1)
        elif n_rows <= R_MAX:
            for o in range(lo, hi):
                run(n_rows, 0, w, o * rb, nb, qx, dx, sx, out, o, n_out, n_rows, buf,
                    o * rb + ahead if ahead >= 0 else z - 1)
        else:
            for o in range(lo, hi):
                first(0, 0, w, o * rb, nb, qx, dx, sx, out, o, n_out, n_rows, buf,
                      o * rb + ahead if ahead >= 0 else z - 1)
                buf_tiles(n_rows - R_MAX, R_MAX, buf, 0, nb, qx, dx, sx, out, o, n_out, n_rows, buf, z - 1)
    return rows


_b_buf_tiles = {signed_min: tile_rows(lambda R, sm=signed_min: _b_pass(B.pair_bbuf, B.one_bbuf, sm[0], sm[1],
                                                                         B.B_BUF_BYTES // 2, R), R_MAX)
                for signed_min in ((True, False), (False, True))}
_b_buf_signed, _b_buf_min = _b_buf_tiles[True, False], _b_buf_tiles[False, True]


# The K types' activations in L1: with several rows, the activation bytes one weight row meets
# (256 per super-block per row) outgrow the 48 KiB L1 of a core on the long rows (ffn_down: 8960
# inputs, 5 rows = 45 KiB), and every weight row would read them again from L2. So with more
# than one row, the K types run a block of O_BLOCK weight rows over a range of super-blocks whose
# activations fit in L1_ACT_BYTES, keep the float accumulators in a scratch (accs: O_BLOCK x
# n_rows x 8 float32), then the next range. The weight bytes are still read once.
L1_ACT_BYTES = 32 << 10
O_BLOCK = 16
PREFETCH_ROW_BYTES = 2048      # prefetch the next weight row when rows are this long or longer


@njit(fastmath=False, _nrt=False, cache=True)
def k_block(nb, n_rows, l1_act_bytes):
    # super-blocks per range: as many as fit l1_act_bytes, the ranges of one row equal in size
    kb = max(1, l1_act_bytes // (256 * max(n_rows, 1)))
    n_ranges = (nb + kb - 1) // kb
    return (nb + n_ranges - 1) // n_ranges


def _k_buf_tiles(r_max):
    # the passes after a tile that stored its decoded weight row: they read it back from buf
    return tile_rows(lambda R: _k_pass(B.setup_kbuf, B.chunk_kbuf, B.K_BUF_BYTES, R), r_max)


def _k_rows(setup, chunk, bsize, l1_act_bytes=L1_ACT_BYTES, prefetch_row_bytes=PREFETCH_ROW_BYTES,
            r_max=K_R_MAX, store=K_STORE):
    """rows(qx, dx, bs, w2, out, lo, hi, nb, buf, accs, ahead): out[:, lo:hi] for one K type:
    in tiles of rows (tiles.tile_rows), ranges of super-blocks at a time (k_block); beyond r_max
    rows the first tile also keeps the decoded row in buf and the other tiles read it back.
    ahead >= 0: where the weights stream linearly (one row, or a batch whose activations fit L1
    in one range), they are prefetched that many bytes ahead of the pass reading them (tuning.py
    measures the distance once per machine); ranges prefetch the next piece whatever ahead is.
    store=False: beyond r_max rows every tile decodes the weight row itself (no buf).
    (l1_act_bytes, prefetch_row_bytes, r_max, store: the tuning constants, as arguments for
    experiments.)"""
    make_pass = lambda R, store=False: _k_pass(setup, chunk, bsize, R, store)   # noqa: E731
    run = tile_rows(make_pass, r_max)
    one = run.passes[0]                         # run's own one-row pass, not another copy
    if store:
        first = make_pass(r_max, True)
        buf_tiles = _k_buf_tiles(r_max)

        @_inline
        def tiles(n_rows, w, p, nb, qx, dx, bs, out, o, n_out, buf, b0, b1, accs, ao, pnext):
            if n_rows <= r_max:
                run(n_rows, 0, w, p, nb, qx, dx, bs, out, o, n_out, n_rows, buf, b0, b1, accs, ao, pnext)
            else:
                first(0, 0, w, p, nb, qx, dx, bs, out, o, n_out, n_rows, buf, b0, b1, accs, ao, pnext)
                buf_tiles(n_rows - r_max, r_max, buf, 0, nb, qx, dx, bs, out, o, n_out, n_rows, buf,
                          b0, b1, accs, ao, -1)
    else:
        @_inline
        def tiles(n_rows, w, p, nb, qx, dx, bs, out, o, n_out, buf, b0, b1, accs, ao, pnext):
            run(n_rows, 0, w, p, nb, qx, dx, bs, out, o, n_out, n_rows, buf, b0, b1, accs, ao, pnext)

    @njit(fastmath=False, _nrt=False)
    def rows(qx2, dx2, bs2, w2, out2, lo, hi, nb, buf, accs, ahead):
        n_rows = qx2.shape[1]
        n_out = out2.shape[1]
        rb = w2.shape[1]
        qx, dx, bs, w, out = qx2.reshape(-1), dx2.reshape(-1), bs2.reshape(-1), w2.reshape(-1), out2.reshape(-1)
        if n_rows == 0:                             # (a batch whose rows all skip the logits)
            return
        z = lo - lo                                 # (int64s where run passes int64s: one compile)
        if n_rows == 1:                             # the decode loop, on its own
            for o in range(lo, hi):
                one(z, 0, w, o * rb, nb, qx, dx, bs, out, o, n_out, n_rows, buf, z, nb, accs, z,
                    o * rb + ahead if ahead >= 0 else z - 1)
            return
        kb = k_block(nb, n_rows, l1_act_bytes)
        # prefetch the piece of weights after each one: the DRAM prefetchers lose the stream when
        # the ranges jump from row to row (and fall behind on long rows); in one range the
        # weights stream linearly, `ahead` bytes ahead where it is given
        linear = kb >= nb and ahead >= 0
        pf = kb < nb or rb >= prefetch_row_bytes
        for o0 in range(lo, hi, O_BLOCK):
            o1 = min(o0 + O_BLOCK, hi)
            for b0 in range(0, nb, kb):
                b1 = min(b0 + kb, nb)
                for o in range(o0, o1):
                    ao = (o - o0) * n_rows * 8
                    pnext = -1                      # where the next piece of weights starts
                    if linear:
                        pnext = o * rb + ahead
                    elif pf:
                        if o + 1 < o1:
                            pnext = (o + 1) * rb + bsize * b0
                        elif b1 < nb:
                            pnext = o0 * rb + bsize * b1
                        elif o1 < hi:
                            pnext = o1 * rb
                    tiles(n_rows, w, o * rb, nb, qx, dx, bs, out, o, n_out, buf, b0, b1, accs, ao, pnext)
    rows.one = one                              # the decode loop's pass (one_row_q4_k)
    return rows


def _b_rows(pair, one, signed, has_min, bsize):
    return _rows(lambda R, store=False: _b_pass(pair, one, signed, has_min, bsize, R, store),
                 _b_buf_signed if signed else _b_buf_min)


_rows_q2_k = _k_rows(B.setup_q2_k, B.chunk_q2_k, 84)
_rows_q3_k = _k_rows(B.setup_q3_k, B.chunk_q3_k, 110)
_rows_q4_k = _k_rows(B.setup_q4_k, B.chunk_q4_k, 144)
_rows_q5_k = _k_rows(B.setup_q5_k, B.chunk_q5_k, 176)
_rows_q6_k = _k_rows(B.setup_q6_k, B.chunk_q6_k, 210)
_rows_q8_0 = _b_rows(B.pair_q8_0, B.one_q8_0, True, False, 34)
_rows_q4_0 = _b_rows(B.pair_q4_0, B.one_q4_0, True, False, 18)
_rows_q4_1 = _b_rows(B.pair_q4_1, B.one_q4_1, False, True, 20)
_rows_q5_0 = _b_rows(B.pair_q5_0, B.one_q5_0, True, False, 22)
_rows_q5_1 = _b_rows(B.pair_q5_1, B.one_q5_1, False, True, 24)
_one_q4_k = _rows_q4_k.one


@_jit
def one_row_q4_k(qx2, dx2, bs2, w2, out2, lo, hi, ahead):
    # out2[0, lo:hi] = one activation row (pack_q8_k of x [1, n]) times the Q4_K weight rows
    # lo .. hi - 1 of w2 [n_out, row_bytes], through the pass matmul_q8 runs for a 1-row Q4_K
    # product (the decode loop's); ahead as matmul_q8's. tuning.py times it.
    n_out = out2.shape[1]
    rb = w2.shape[1]
    nb = qx2.shape[0] // 4
    qx, dx, bs, w, out = qx2.reshape(-1), dx2.reshape(-1), bs2.reshape(-1), w2.reshape(-1), out2.reshape(-1)
    buf = np.empty(1, np.uint8)
    accs = np.empty(1, np.float32)
    z = lo - lo
    for o in range(lo, hi):
        _one_q4_k(z, 0, w, o * rb, nb, qx, dx, bs, out, o, n_out, 1, buf, z, nb, accs, z,
                  o * rb + ahead if ahead >= 0 else z - 1)


@_jit
def _q8_k_rows(qx, dx, bs, w, qtype, out, lo, hi, nb, buf, accs, ahead, q2_k, q3_k, q4_k, q5_k, q6_k):
    # the K types' dispatch, each branch compiled only for the types selected (TypeSel)
    if q4_k is not None and qtype == Q4_K:
        _rows_q4_k(qx, dx, bs, w, out, lo, hi, nb, buf, accs, ahead)
    elif q6_k is not None and qtype == Q6_K:
        _rows_q6_k(qx, dx, bs, w, out, lo, hi, nb, buf, accs, ahead)
    elif q5_k is not None and qtype == Q5_K:
        _rows_q5_k(qx, dx, bs, w, out, lo, hi, nb, buf, accs, ahead)
    elif q3_k is not None and qtype == Q3_K:
        _rows_q3_k(qx, dx, bs, w, out, lo, hi, nb, buf, accs, ahead)
    elif q2_k is not None and qtype == Q2_K:
        _rows_q2_k(qx, dx, bs, w, out, lo, hi, nb, buf, accs, ahead)
    else:
        raise ValueError("specnb.kernels.matmul_q8: tensor type outside the compiled selection:", qtype)


@_jit
def _q8_32_rows(qx, dx16, sx16, w, qtype, out, lo, hi, nb, buf, ahead, q8_0, q4_0, q4_1, q5_0, q5_1):
    # the 32-block types' dispatch, each branch compiled only for the types selected (TypeSel)
    if q4_1 is not None and qtype == Q4_1:
        _rows_q4_1(qx, dx16, sx16, w, out, lo, hi, nb, buf, ahead)
    elif q8_0 is not None and qtype == Q8_0:
        _rows_q8_0(qx, dx16, sx16, w, out, lo, hi, nb, buf, ahead)
    elif q4_0 is not None and qtype == Q4_0:
        _rows_q4_0(qx, dx16, sx16, w, out, lo, hi, nb, buf, ahead)
    elif q5_0 is not None and qtype == Q5_0:
        _rows_q5_0(qx, dx16, sx16, w, out, lo, hi, nb, buf, ahead)
    elif q5_1 is not None and qtype == Q5_1:
        _rows_q5_1(qx, dx16, sx16, w, out, lo, hi, nb, buf, ahead)
    else:
        raise ValueError("specnb.kernels.matmul_q8: tensor type outside the compiled selection:", qtype)


# ---- the matrix product ----------------------------------------------------------------------

@njit(parallel=True, fastmath=False, cache=True)
def _matmul_q8_k(x, w, qtype, out, s, ahead):
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    qx, dx, bs = _alloc_q8_k(n_rows, n_in)
    _quantize_q8_k(x, qx, dx, bs)
    nb = n_in // 256
    nbuf = nb * B.K_BUF_BYTES if n_rows > K_R_MAX and K_STORE else 1
    nacc = O_BLOCK * n_rows * 8 if n_rows > 1 else 1
    if n_out * n_in <= SERIAL_MAX_ELEMENTS:
        # lo as an int64 (0 * n_out), not the literal 0: a literal argument would compile a second
        # copy of every rows kernel beside the one the prange loop calls (the largest code here)
        _q8_k_rows(qx, dx, bs, w, qtype, out, 0 * n_out, n_out, nb, np.empty(nbuf, np.uint8),
                   np.empty(nacc, np.float32), ahead, s.q2_k, s.q3_k, s.q4_k, s.q5_k, s.q6_k)
        return
    n_chunks = min(n_out, _N_CHUNKS)
    bufs = np.empty((n_chunks, nbuf), np.uint8)
    accs = np.empty((n_chunks, nacc), np.float32)
    for c in prange(n_chunks):
        _q8_k_rows(qx, dx, bs, w, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks, nb, bufs[c],
                   accs[c], ahead, s.q2_k, s.q3_k, s.q4_k, s.q5_k, s.q6_k)


@njit(parallel=True, fastmath=False, cache=True)
def _matmul_q8_32(x, w, qtype, out, s, ahead):
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    qx, dx16, sx16 = _alloc_q8_32(n_rows, n_in)
    _quantize_q8_32(x, qx, dx16, sx16)
    nb = n_in // 32
    nbuf = (nb + 1) // 2 * B.B_BUF_BYTES if n_rows > R_MAX else 1
    if n_out * n_in <= SERIAL_MAX_ELEMENTS:
        _q8_32_rows(qx, dx16, sx16, w, qtype, out, 0 * n_out, n_out, nb, np.empty(nbuf, np.uint8), ahead,
                    s.q8_0, s.q4_0, s.q4_1, s.q5_0, s.q5_1)          # (lo: an int64, as above)
        return
    n_chunks = min(n_out, _N_CHUNKS)
    bufs = np.empty((n_chunks, nbuf), np.uint8)
    for c in prange(n_chunks):
        _q8_32_rows(qx, dx16, sx16, w, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks, nb, bufs[c],
                    ahead, s.q8_0, s.q4_0, s.q4_1, s.q5_0, s.q5_1)


@_jit
def matmul_q8_by(x, w, qtype, out, s, k, b, xb, xk, ahead, ahead_x16):
    # out = x @ W^T from compiled code, without matmul_q8_sel's checks (the fused pass checked
    # the shapes when the model loaded; x and w C-contiguous): the K, the interleaved (32-block
    # or K) or the 32-block driver, each compiled only if the TypeSel s has such a type (k = s.k,
    # xb = s.xb, xk = s.xk, b = s.b); ahead: how far ahead the weights are prefetched (bytes; < 0:
    # not at all), ahead_x16 the same for the interleaved layouts (measured apart: they stream
    # one group-block after another, which some CPUs' prefetchers follow on their own)
    if k is not None and (qtype == Q2_K or qtype == Q3_K or qtype == Q4_K or qtype == Q5_K or qtype == Q6_K):
        _matmul_q8_k(x, w, qtype, out, s, ahead)
    elif xk is not None and is_x16k(qtype):
        matmul_x16k_by(x, w, qtype, out, s.q4_kx16, s.q6_kx16, ahead_x16)
    elif xb is not None and is_x16(qtype):
        matmul_x16_by(x, w, qtype, out, s, ahead_x16)
    elif b is not None:
        _matmul_q8_32(x, w, qtype, out, s, ahead)
    else:
        raise ValueError("specnb.kernels.matmul_q8: tensor type outside the compiled selection:", qtype)


@_jit
def matmul_q8_sel(x, w, qtype, out, s, ahead, ahead_x16):
    # [n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out]; qtype in Q8_QTYPES, compiled
    # for the types of TypeSel s only; the weights prefetched `ahead` bytes ahead (< 0: not), the
    # interleaved layouts' `ahead_x16`
    n_rows, n_in = x.shape
    check_shapes(n_in, w.shape[1], qtype)
    if out.shape[0] != n_rows or out.shape[1] != w.shape[0]:
        raise ValueError("specnb.kernels.matmul_q8: out must be [n_rows, n_out]")
    if not has_q8_kernel(qtype):
        raise ValueError("specnb.kernels.matmul_q8: no int8 kernel for this type:", qtype)
    # w as given: np.ascontiguousarray types its result writable, which would compile the whole
    # int8 chain a second time beside the fused pass's read-only one (matmul_q8 passes a C array)
    matmul_q8_by(np.ascontiguousarray(x), w, qtype, out, s, s.k, s.b, s.xb, s.xk, ahead, ahead_x16)


# The selection of every int8 type, as the fused pass with every type has it (forward.fused_types):
# the same TypeSel and read-only weights make a call from Python reuse the pass's int8 kernels.
_Q8_SEL = type_sel(Q8_QTYPES | X16_QTYPES)


def _readonly_c(w: np.ndarray) -> np.ndarray:
    # the weights typed as the fused pass types them (read-only, C-contiguous uint8), so that a
    # call from Python reuses the kernels the pass compiled instead of compiling its own
    if w.flags.c_contiguous and not w.flags.writeable:
        return w
    w = np.ascontiguousarray(w).view()
    w.flags.writeable = False
    return w


def matmul_q8(x: np.ndarray, w: np.ndarray, qtype: int, out: np.ndarray, ahead: int = -1,
              ahead_x16: int = -1) -> None:
    """[n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out] with the activations rounded to
    int8 (llama.cpp's CPU numerics); types without an int8 kernel (F32, F16, BF16) go to
    `matmul`. ahead: how many bytes ahead the weights are prefetched (a hint: the results are the
    same bits for any value); -1, the default: no prefetching; ahead_x16: the same for the
    interleaved layouts (X16_QTYPES). This machine's measured distances are
    tuning.prefetch_ahead() and prefetch_ahead_x16(), which a caller resolves once (the CPU
    backend does)."""
    # (a Python-level switch: one jitted function holding both kernel sets compiles much longer)
    if int(qtype) in Q8_QTYPES or int(qtype) in X16_QTYPES:
        matmul_q8_sel(x, _readonly_c(w), int(qtype), out, _Q8_SEL, int(ahead), int(ahead_x16))
    else:
        matmul(x, w, int(qtype), out)


# ---- check and benchmark: python -m specnb.kernels.matmul_q8 ------------------------------------

def self_check(qtypes=None, n_out: int = 23, rows=(1, 2, 3, 4, 5, 8, 9, 17), seed: int = 0) -> list:
    """For every int8 type: within the int8 rounding bound of matmul_ref, and every row of every
    batch size bit-identical to the same row alone. Returns [(type, what, ok, detail)]."""
    rng = np.random.default_rng(seed)
    res = []
    for qt in sorted(qtypes or Q8_QTYPES, key=T.qtype_name):
        name = T.qtype_name(qt)
        n_in = 512 if qt in T.K_QTYPES else 96              # 96: an odd number of blocks
        w = T.random_blocks(qt, n_out, n_in, rng)
        wd = np.asarray(gguf.quants.dequantize(w, gguf.GGMLQuantizationType(qt)), np.float64)
        wd = np.abs(wd).reshape(n_out, n_in)
        x = rng.standard_normal((max(rows), n_in)).astype(np.float32)
        x[0, :32] *= 100.0                                 # one block with a big max|x|
        one = np.empty((1, n_out), np.float32)
        for k in rows:
            out = np.empty((k, n_out), np.float32)
            matmul_q8(x[:k], w, qt, out)
            blk = 256 if qt in T.K_QTYPES else 32
            amax = np.abs(x[:k].astype(np.float64)).reshape(k, -1, blk).max(-1).repeat(blk, -1)
            bound = 1.001 * (amax / 254) @ wd.T + 1e-5 * (np.abs(x[:k].astype(np.float64)) @ wd.T)
            err = np.abs(out - matmul_ref(x[:k], w, qt, n_in).astype(np.float64))
            res.append((name, f"{k} rows within the int8 rounding bound", bool(np.all(err <= bound)),
                        f"{np.max(err / bound):.2f} of it"))
            matmul_q8(x[k - 1:k].copy(), w, qt, one)
            same = np.array_equal(one[0].view(np.uint32), out[k - 1].view(np.uint32))
            res.append((name, f"row {k - 1} of {k} == alone", same, ""))
    return res


BENCH_SHAPES = ((Q4_K, 8960, 1536), (Q6_K, 1536, 8960), (Q5_0, 4864, 896), (Q8_0, 151936, 896),
                (Q4_1, 576, 1536))


def bench(shapes=BENCH_SHAPES, rows=(1, 2, 3, 5, 9, 17)):
    from .matmul import bench as _bench
    _bench(matmul_q8, shapes, rows, label=f"matmul_q8 (R_MAX {R_MAX}, K types {K_R_MAX})")


def _main():
    from .matmul import print_check
    from .simd import SIMD_LEVEL
    print(f"checking every int8 type against matmul_ref (SIMD level {SIMD_LEVEL}) ...")
    t0 = time.perf_counter()
    ok = print_check(self_check())
    print(f"  ({time.perf_counter() - t0:.1f} s with compiling)\n")
    bench()
    return 0 if ok else 1



if __name__ == "__main__":
    import sys
    from specnb.kernels import matmul_q8 as _m
    sys.exit(_m._main())
