"""The K types Q4_K and Q6_K with their weight rows interleaved 16 at a time: the int8 product where
one weight load serves 16 output rows (llama.cpp: ggml-cpu's repack.cpp, block_q4_Kx8 with
ggml_gemv_q4_K_8x8_q8_K / ggml_gemm_q4_K_8x8_q8_K; matmul_x16.py does the same for the 32-block types).

    interleave_k(w, qtype) -> bytes   the matrix regrouped (same shape, same bytes), for X16_OF[qtype]
    matmul_x16k_by(x, w16, qtype16, out, q4_k, q6_k, ahead)   y = x @ W^T with x rounded to block_q8_K
                                      (matmul_q8's activations); the weights prefetched `ahead` bytes
                                      ahead (< 0: not)

Why: matmul_q8's K passes take one weight row at a time; a row's 64-weight chunk meets each
activation row in a dot product whose 16 lanes are partial sums of that one row, so every
super-block then pays the scales, the lane folding, the integer-to-float conversion and the fused
adds once per weight row and activation row. With 16 rows interleaved, a 64-byte load holds 4
weights of each of 16 rows, the activation's 4 matching bytes are broadcast, and one dot product
gives a partial sum for each of the 16 rows: the scales and the float work of a super-block are
shared by 16 outputs and nothing is summed across lanes, which is what makes a verification row
beyond the first cheap.

The layout, per group of 16 rows (r) and super-block, in this order (a group-block is 16 super-
blocks' bytes, so the matrix keeps its [n_out, row_bytes] shape; the last n_out % 16 rows stay as
the file has them, the tail):
  Q4_K (16 x 144 bytes): the 16 rows' d (float16), their dmin, then 12 planes of 16 bytes (byte r
       of plane j < 8: sc_j | (mn_j & 3) << 6; of plane 8 + i: mn_2i >> 2 | (mn_2i+1 >> 2) << 4,
       the 6-bit scales and mins of the 8 sub-blocks re-packed, nothing lost), then 32 vectors of
       64 bytes: vector 8c + k, bytes 4r .. 4r + 3 = qs_r[32c + 4k ..]: word 8c + k of each row's
       nibbles (low nibbles: sub-block 2c, elements 4k ..; high: sub-block 2c + 1)
  Q6_K (16 x 210 bytes): the 16 rows' d, then 16 x 16 bytes of scales (sub-block i of row r at
       16 i + r, int8), then the 32 words of ql and the 16 words of qh the same way (vector w,
       bytes 4r .. = word w of row r): element 128h + 32p + 4k + j (p < 4, k < 8) takes its low 4
       bits from ql word 16h + 8 (p & 1) + k (low nibble for p < 2), its top 2 from qh word
       8h + k >> 2p.

Numerics: per output and super-block, the integer sum is exact: Q4_K
isum = sum_j sc_j (u_j . q_j) and imin = -sum_j mn_j bsum32_j; Q6_K isum = sum_i sc_i (u_i . q_i
- 32 bsum16_i) (u: the unsigned quants, q: block_q8_K's int8 values, bsum the sums of 16 or 32 of
them); then acc = fma(float(isum), d_x * d_w, acc) (Q4_K: then acc = fma(float(imin), d_x * dmin_w,
acc)), super-block after super-block, one float32 chain per output. Every row of a batch runs the
same chain in every tile height and in the tail's scalar code, so a row's outputs are bit-identical
alone or in any batch, and an output's bits do not depend on where its weight row sits (a restricted
output head gives the same logits as those columns of the whole one). The sums differ from the
per-row kernels' (matmul_q8: lanes folded before the floats) in their last bits.
"""
import numpy as np
from numba import njit, prange

from .blocks import _scale16, _scale_min_k4
from .matmul import _N_CHUNKS, SERIAL_MAX_ELEMENTS
from .qtypes import Q4_K, Q4_KX16, Q6_K, Q6_KX16, X16_ROWS, _BLOCK_BYTES, qtype_name, x16_groups
from .quantize_q8 import _alloc_q8_k, _quantize_q8_k
from .simd import _AVX2_ONLY, _AVX512, _VNNI256, sfma
from .simd_wide import prefetch_l2, vhalf16, vload_b64, vload_i8x16, vload_u8x16, vpairs
from .tiles import (tbcast4, tbroadcast, tdot4, tdot4p, tdotw, tfloat, tfma, tile_rows, tload_f32, tmac, tmul,
                    tsplat_i32, tstore_f32, tzeros)

_inline = njit(fastmath=False, forceinline=True, _nrt=False)
# a piece of a pass, inlined into it by Numba before LLVM sees the pass (forceinline leaves the
# pieces' loops to LLVM apart, which unrolled the Q6_K pass's quarters into twice the code)
_piece = njit(fastmath=False, inline="always", _nrt=False)
# rows per pass. Each row's float sum lives in its output row (read and written once a
# super-block), so the registers hold only what a row needs inside one: Q4_K an integer sum and
# a sub-block's dot (one AVX-512 register each, two AVX2 ones), Q6_K the sum and 4 sub-block dots.
# Every pass beyond the first decodes the weights again, and a batch needing one more pass than the
# batch a row smaller costs that decoding on top of its row. With the float sums in registers too
# (8 and 4 rows a pass), the 9th and the 17th row cost 2.5-3x an average row (a new pass of both
# types at once); with 12 and 5 rows a pass the products of 5-17 rows ran 1.01-1.13x faster and the
# 17th row cost 3.6 ms against 4.4 for an average row of 1-16 (the 1.5B's interleaved matrices,
# streaming; Intel Xeon family 6 model 167, same process, same bits). 16 registers: AVX-VNNI's
# in-place dot products hold 6 rows (4: a row beyond the first at k = 5 / 9 cost 0.16 / 0.19 of a
# step, 6: 0.13 / 0.17, 8 spills: 0.26 at k = 9); the 1.5B, the same Xeon compiled as those CPUs
# would (simd.cpu_features_for), medians of 5, two rounds. AVX2's pmaddubsw pairs 5: one pass over
# cached weights cost, for R = 1 .. 6 rows, Q4_K 32.4 46.0 61.0 65.5 77.4 93.3 us (512 x 1536) and
# 44.1 64.2 100.4 95.8 112.4 143.5 (128 x 8960); Q6_K 43.1 59.6 74.9 93.4 105.0 128.2 and 60.4 92.8
# 127.0 161.7 179.0 254.8 (AMD EPYC family 25 model 1, Zen 3, 1 thread, R taking turns, medians of
# 31). A row costs the same in passes of 4-6, a pass of 3 about what 4 cost, and a pass of 1 twice
# a row: 5 rows in one pass took 0.79-0.80x the time of 4 + 1, 9 as 5 + 4 0.87-0.88x that of
# 4 + 4 + 1, and 8 as 5 + 3 1.06-1.11x that of 4 + 4; the products of 2 threads on the 1.5B's
# shapes (same process, same bits): 5 rows 0.88-0.90x, 9 0.93-0.94x, 8 1.05-1.11x
R_MAX = 12 if _AVX512 else 6 if _VNNI256 else 5
# AVX2 without VNNI: a Q4_K sub-block's pmaddubsw pair sums add up in int16 (8 steps x 2 products x
# 15 x 128 = 30720 < 2^15, exact) and one pmaddwd with the scale finishes it, where tdot4 pays a
# pmaddwd and an int32 add per 64 bytes and tmac a vpmulld: the same integers, fewer instructions
# (Q6_K: _q6_quarter_pairs16)
PAIRS16 = _AVX2_ONLY and not _VNNI256
# (Q6_K: a pass of up to 8 rows summing a quarter of a half at a time read the weights 4 times
# over; with the weights streaming from memory, 5 rows then cost 610-630 us a 1536 x 8960 down
# matrix against 470 in 4 + 1, and no batch size ran faster: Zen 4, same process, same bits. AVX2's
# int16 pass holds one int32 sum a row, not 5 tiles: 6 rows a pass ran the products of 5-17 rows
# 1.07-1.21x faster than 4, and 8 no faster than 6; Intel Xeon family 6 model 167 compiled as an
# AVX2-only CPU without GFNI, medians of three rounds. On the Zen 3 above 5 a pass beat 6: a
# 6-row pass of the 8960-wide matrix cost 42.5 us a row against 35.8 at 5, and 7 rows ran as
# 5 + 2 in 0.86-0.96x the time of 6 + 1, 13 as 5 + 5 + 3 in 0.85-0.95x that of 6 + 6 + 1.)
Q6_R_MAX = 5 if _AVX512 or PAIRS16 else 4
K_BASE = {Q4_KX16: Q4_K, Q6_KX16: Q6_K}
_BLOCK = {t: int(_BLOCK_BYTES[t]) for t in (Q4_K, Q6_K)}    # bytes of one row's super-block (GGUF)


# ---- the layout ----------------------------------------------------------------------------------

def interleave_k(w: np.ndarray, qtype: int) -> np.ndarray:
    """uint8 [n_out, row_bytes] of Q4_K or Q6_K -> the same bytes regrouped for X16_OF[qtype]
    (read-only, C-contiguous, the same shape)."""
    qtype = int(qtype)
    if qtype not in _BLOCK:
        raise ValueError(f"interleave_k: {qtype_name(qtype)} has no interleaved K layout (only Q4_K, Q6_K)")
    G = len(x16_groups(w, _BLOCK[qtype], "interleave_k", f"{qtype_name(qtype)} super-blocks"))  # (checks w)
    w = np.ascontiguousarray(w)
    out = np.empty_like(w)
    _regroup_k(w, out, G, qtype == Q6_K)
    out[X16_ROWS * G:] = w[X16_ROWS * G:]                          # the tail, as the file has it
    out.flags.writeable = False
    return out


@njit(cache=True, parallel=True)
def _regroup_k(w, out, n_groups, q6):
    # the first n_groups groups of 16 rows of w (uint8 [n_out, row_bytes] of Q4_K or, q6, Q6_K
    # super-blocks) into out in the layout above, group-block after group-block, a group per
    # thread. Compiled: NumPy's reshapes and transposes took 13 s for the 1.5B's matrices, every
    # time a context opened it (Intel Xeon family 6 model 167, 2 threads)
    rb = w.shape[1]
    bb = 210 if q6 else 144
    wf, of = w.reshape(-1), out.reshape(-1)       # flat: no array view per row
    for g in prange(n_groups):
        for b in range(rb // bb):
            o = X16_ROWS * (g * rb + bb * b)                         # the group-block in out
            for r in range(X16_ROWS):
                c = (X16_ROWS * g + r) * rb + bb * b                 # row r's super-block b in w
                if q6:
                    of[o + 2 * r] = wf[c + 208]                      # d
                    of[o + 2 * r + 1] = wf[c + 209]
                    for i in range(16):                              # the scales, sub-block i at 16 i + r
                        of[o + 32 + 16 * i + r] = wf[c + 192 + i]
                    for h in range(2):                               # step k of half h: ql words 16h + k,
                        for k in range(8):                           # 16h + 8 + k, qh word 8h + k
                            v = o + 288 + 64 * (24 * h + 3 * k) + 4 * r
                            for e in range(4):
                                of[v + e] = wf[c + 4 * (16 * h + k) + e]
                                of[v + 64 + e] = wf[c + 4 * (16 * h + 8 + k) + e]
                                of[v + 128 + e] = wf[c + 128 + 4 * (8 * h + k) + e]
                else:
                    for j in range(4):                               # d, dmin
                        of[o + 32 * (j // 2) + 2 * r + j % 2] = wf[c + j]
                    for i in range(4):                               # the 12 planes of scales and mins
                        sc0, mn0 = _scale_min_k4(wf, c + 4, 2 * i)
                        sc1, mn1 = _scale_min_k4(wf, c + 4, 2 * i + 1)
                        of[o + 64 + 32 * i + r] = np.uint8(sc0 | ((mn0 & 3) << 6))
                        of[o + 80 + 32 * i + r] = np.uint8(sc1 | ((mn1 & 3) << 6))
                        of[o + 192 + 16 * i + r] = np.uint8((mn0 >> 2) | ((mn1 >> 2) << 4))
                    for k in range(32):                              # word k of the nibbles
                        for e in range(4):
                            of[o + 256 + 64 * k + 4 * r + e] = wf[c + 16 + 4 * k + e]


# ---- the passes: R activation rows x one group of 16 weight rows ----------------------------------
# The activations are matmul_q8's chunk-major block_q8_K (quantize_q8.py): element 64 c + e of
# super-block b of row r at byte 64 ((4 b + c) n_rows + r) + e of qx, d at dx[b n_rows + r]; the
# sums of 16 (Q6_K) of its q at bsum[(b n_rows + r) * 16 + i]; Q4_K's sums of 32, negated, two to an
# int32 (_pairs16) at bsum[(b n_rows + r) * 4 + i // 2].

@_inline
def prefetch_span(w, lo, hi, ahead, last):
    # the cache lines of bytes lo .. hi - 1 of w, `ahead` bytes further on (at most the last byte),
    # towards L2: the first tile of a pass spreads its group's prefetches over the super-block
    for i in range(lo, hi, 64):
        prefetch_l2(w, min(i + ahead, last))


def _pass_q4_k(R):
    @_inline
    def run(r, base, w, p, nb, qx, dx, bsum, out, o, n_out, n_rows, ahead, last):
        r0 = base + r
        tstore_f32(out, r0 * n_out + o, n_out, tzeros(np.float32, 16, R))       # the float sums
        for b in range(nb):
            q = p + X16_ROWS * 144 * b
            ib = b * n_rows + r0
            acc = tzeros(np.int32, 16, R)
            for c in range(4):
                xc = ((4 * b + c) * n_rows + r0) * 64
                if ahead >= 0 and r == 0:       # the first tile reads the weights from memory: a quarter ahead
                    prefetch_span(w, q + 576 * c, q + 576 * c + 576, ahead, last)
                t = tzeros(np.int32, 16, R)                         # sub-block 2c: low nibbles
                for k in range(8):
                    u, x4 = vload_b64(w, q + 256 + 64 * (8 * c + k)) & 15, tbcast4(qx, xc + 4 * k, 64, R)
                    t = tdot4p(t, u, x4) if PAIRS16 else tdot4(t, u, x4)
                sc = vload_u8x16(w, q + 64 + 16 * (2 * c)) & 63
                acc = tdotw(acc, vpairs(sc), t) if PAIRS16 else tmac(acc, t, sc)
                t = tzeros(np.int32, 16, R)                         # sub-block 2c + 1: high nibbles
                for k in range(8):
                    u, x4 = vload_b64(w, q + 256 + 64 * (8 * c + k)) >> 4, tbcast4(qx, xc + 32 + 4 * k, 64, R)
                    t = tdot4p(t, u, x4) if PAIRS16 else tdot4(t, u, x4)
                sc = vload_u8x16(w, q + 64 + 16 * (2 * c + 1)) & 63
                acc = tdotw(acc, vpairs(sc), t) if PAIRS16 else tmac(acc, t, sc)
            im = tzeros(np.int32, 16, R)
            for j in range(0, 8, 2):                               # the mins of sub-blocks j, j + 1
                hi = vload_u8x16(w, q + 64 + 16 * (8 + j // 2))
                mn = ((vload_u8x16(w, q + 64 + 16 * j) >> 6) | ((hi & 15) << 2)) | (
                    ((vload_u8x16(w, q + 64 + 16 * (j + 1)) >> 6) | ((hi >> 4) << 2)) << 16)
                im = tdotw(im, mn, tsplat_i32(bsum, 4 * ib + j // 2, 4, R, 1))
            xd = tbroadcast(dx, ib, 1, R, 16)
            f = tfma(tfloat(acc), tmul(xd, vhalf16(w, q)), tload_f32(out, r0 * n_out + o, n_out, R, 16))
            tstore_f32(out, r0 * n_out + o, n_out, tfma(tfloat(im), tmul(xd, vhalf16(w, q + 32)), f))
    return run


def _pass_q6_k(R):
    # R <= Q6_R_MAX rows; a super-block in four quarters (half h, kk: the steps 4kk .. 4kk + 3 of
    # the sub-blocks i, i + 2, i + 4, i + 6), each quarter's weights read once
    quarter = _q6_quarter_pairs16(R) if PAIRS16 else _q6_quarter_tiles(R)
    offset = _q6_offset_pairs16(R)

    @_inline
    def run(r, base, w, p, nb, qx, dx, bsum, out, o, n_out, n_rows, ahead, last):
        r0 = base + r
        tstore_f32(out, r0 * n_out + o, n_out, tzeros(np.float32, 16, R))       # the float sums
        for b in range(nb):
            q = p + X16_ROWS * 210 * b
            ib = b * n_rows + r0
            acc = tzeros(np.int32, 16, R)
            for h in range(2):
                x0 = ((4 * b + 2 * h) * n_rows + r0) * 64             # elements 128h .. + 63
                x1 = x0 + 64 * n_rows                                # elements 128h + 64 .. + 127
                for kk in range(2):
                    i = 8 * h + kk                                   # the sub-blocks i, i + 2, i + 4, i + 6
                    if ahead >= 0 and r == 0:   # the first tile reads the weights from memory: a quarter ahead
                        prefetch_span(w, q + 840 * (2 * h + kk), q + 840 * (2 * h + kk) + 840, ahead, last)
                    acc = quarter(acc, w, q, qx, x0, x1, bsum, ib, h, kk, i)
            if PAIRS16:                                              # (a constant: one variant compiles)
                acc = offset(acc, w, q, bsum, ib)
            f = tfma(tfloat(acc), tmul(tbroadcast(dx, ib, 1, R, 16), vhalf16(w, q)), tload_f32(out, r0 * n_out + o,
                                                                                              n_out, R, 16))
            tstore_f32(out, r0 * n_out + o, n_out, f)
    return run


def _q6_quarter_tiles(R):
    # the VNNI levels' quarter: each step's three vectors (ql word 16h + k, 16h + 8 + k, qh 8h + k)
    # read once, the 4 sub-blocks summed in 4 tiles that start at -32 bsum16, then tmac by the scales
    @_piece
    def quarter(acc, w, q, qx, x0, x1, bsum, ib, h, kk, i):
        t0 = tsplat_i32(bsum, 16 * ib + i, 16, R, -32)
        t1 = tsplat_i32(bsum, 16 * ib + i + 2, 16, R, -32)
        t2 = tsplat_i32(bsum, 16 * ib + i + 4, 16, R, -32)
        t3 = tsplat_i32(bsum, 16 * ib + i + 6, 16, R, -32)
        for k in range(4 * kk, 4 * kk + 4):
            v = q + 288 + 64 * (24 * h + 3 * k)
            a = vload_b64(w, v)
            c = vload_b64(w, v + 64)
            hb = vload_b64(w, v + 128)
            t0 = tdot4(t0, (a & 15) | ((hb & 3) << 4), tbcast4(qx, x0 + 4 * k, 64, R))
            t1 = tdot4(t1, (c & 15) | ((hb & 12) << 2), tbcast4(qx, x0 + 32 + 4 * k, 64, R))
            t2 = tdot4(t2, (a >> 4) | (hb & 48), tbcast4(qx, x1 + 4 * k, 64, R))
            t3 = tdot4(t3, (c >> 4) | ((hb >> 2) & 48), tbcast4(qx, x1 + 32 + 4 * k, 64, R))
        acc = tmac(acc, t0, vload_i8x16(w, q + 32 + 16 * i))
        acc = tmac(acc, t1, vload_i8x16(w, q + 32 + 16 * (i + 2)))
        acc = tmac(acc, t2, vload_i8x16(w, q + 32 + 16 * (i + 4)))
        return tmac(acc, t3, vload_i8x16(w, q + 32 + 16 * (i + 6)))
    return quarter


def _q6_quarter_pairs16(R):
    # AVX2 without VNNI (PAIRS16): two steps' pmaddubsw pairs of a sub-block summed in int16 (4
    # products x 63 x 128 = 32256 < 2^15, exact), finished by one pmaddwd with the sub-block's scale
    # in pair form (shared by every row); the -32 bsum16 term apart (_q6_offset_pairs16). The same
    # integers as the tiles' quarter, which pays a pmaddwd by ones and an int32 add per 64 bytes
    # and a vpmulld per sub-block, and holds 4 tiles a row (llama.cpp's AVX2
    # ggml_vec_dot_q6_K_q8_K: maddubs, then a madd by the scale).
    # The sub-blocks in the order i, i + 4 (the low and high nibbles of the same ql words), then
    # i + 2, i + 6, each scale made where it is used: the first two's ql words are dead before the
    # others' are loaded, and no scale is held across the quarter. With the four scales made first
    # and the sub-blocks in order i .. i + 6 the pass spilled more registers (LLVM's code for the
    # rows kernels: 588 spill stores against 535), and a Q6_K 8960 x 1536 matrix took 0.92-1.26x
    # this order's time, 1.10x in the median, at 1-9 rows from the L3 and streaming (AMD EPYC Zen 3,
    # 2 threads, the two versions taking turns in one process, medians of 9, two rounds). The bits
    # are the same: the int32 sums' order does not change them.
    @_piece
    def quarter(acc, w, q, qx, x0, x1, bsum, ib, h, kk, i):
        for k2 in range(4 * kk, 4 * kk + 4, 2):                 # steps k2, k2 + 1, sub-block by sub-block
            t = tzeros(np.int32, 16, R)
            for k in range(k2, k2 + 2):
                v = q + 288 + 64 * (24 * h + 3 * k)             # ql word 16h + k, 16h + 8 + k, qh 8h + k
                t = tdot4p(t, (vload_b64(w, v) & 15) | ((vload_b64(w, v + 128) & 3) << 4),
                           tbcast4(qx, x0 + 4 * k, 64, R))
            acc = tdotw(acc, vpairs(vload_i8x16(w, q + 32 + 16 * i)), t)
            t = tzeros(np.int32, 16, R)
            for k in range(k2, k2 + 2):
                v = q + 288 + 64 * (24 * h + 3 * k)
                t = tdot4p(t, (vload_b64(w, v) >> 4) | (vload_b64(w, v + 128) & 48),
                           tbcast4(qx, x1 + 4 * k, 64, R))
            acc = tdotw(acc, vpairs(vload_i8x16(w, q + 32 + 16 * (i + 4))), t)
            t = tzeros(np.int32, 16, R)
            for k in range(k2, k2 + 2):
                v = q + 288 + 64 * (24 * h + 3 * k)
                t = tdot4p(t, (vload_b64(w, v + 64) & 15) | ((vload_b64(w, v + 128) & 12) << 2),
                           tbcast4(qx, x0 + 32 + 4 * k, 64, R))
            acc = tdotw(acc, vpairs(vload_i8x16(w, q + 32 + 16 * (i + 2))), t)
            t = tzeros(np.int32, 16, R)
            for k in range(k2, k2 + 2):
                v = q + 288 + 64 * (24 * h + 3 * k)
                t = tdot4p(t, (vload_b64(w, v + 64) >> 4) | ((vload_b64(w, v + 128) >> 2) & 48),
                           tbcast4(qx, x1 + 32 + 4 * k, 64, R))
            acc = tdotw(acc, vpairs(vload_i8x16(w, q + 32 + 16 * (i + 6))), t)
        return acc
    return quarter


def _q6_offset_pairs16(R):
    # the pairs16 quarters' -32 sum_i sc_i bsum16_i: sc_j bsum_j + sc_j+1 bsum_j+1 as int16 pairs
    # (bsum: _pairs16), times -32 once a super-block
    @_piece
    def offset(acc, w, q, bsum, ib):
        sb = tzeros(np.int32, 16, R)
        for j in range(0, 16, 2):
            cj = (vload_i8x16(w, q + 32 + 16 * j) & 0xFFFF) | (vload_i8x16(w, q + 32 + 16 * (j + 1)) << 16)
            sb = tdotw(sb, cj, tsplat_i32(bsum, 8 * ib + j // 2, 8, R, 1))
        return tmac(acc, sb, vload_i8x16(_MINUS32, 0))
    return offset


_MINUS32 = np.full(16, -32, np.int8)


def _rows(make_pass, r_max):
    run = tile_rows(make_pass, r_max)

    @njit(fastmath=False, _nrt=False)
    def rows(qx, dx, bsum, w2, out2, g0, g1, nb, ahead):
        # out2[:, 16 g0 : 16 g1] for the groups g0 .. g1 - 1; the first tile of rows prefetches the
        # weights `ahead` bytes ahead (< 0: not), the others find them in the cache
        n_rows, n_out = out2.shape
        w, out = w2.reshape(-1), out2.reshape(-1)
        for g in range(g0, g1):
            run(n_rows, 0, w, g * X16_ROWS * w2.shape[1], nb, qx, dx, bsum, out, X16_ROWS * g, n_out, n_rows,
                ahead, w.size - 1)
    return rows


_rows_q4_k = _rows(_pass_q4_k, R_MAX)
_rows_q6_k = _rows(_pass_q6_k, Q6_R_MAX)


# ---- the tail: the last n_out % 16 rows, as the file has them, one element at a time -------------

@njit(fastmath=False, _nrt=False)
def _tail_q4_k(qx, dx, bsum, w2, out2, o0, nb):
    n_rows, n_out = out2.shape
    rb = w2.shape[1]
    w = w2.reshape(-1)
    for o in range(o0, n_out):
        for r in range(n_rows):
            acc = np.float32(0)
            for b in range(nb):
                p = o * rb + b * 144
                ib = b * n_rows + r
                isum = 0
                imin = 0
                for j in range(8):                  # ggml's get_scale_min_k4
                    if j < 4:
                        sc, mn = np.int64(w[p + 4 + j]) & 63, np.int64(w[p + 8 + j]) & 63
                    else:
                        sc = (np.int64(w[p + 8 + j]) & 15) | ((np.int64(w[p + j]) >> 6) << 4)
                        mn = (np.int64(w[p + 8 + j]) >> 4) | ((np.int64(w[p + 4 + j]) >> 6) << 4)
                    dot = 0
                    for e in range(32):
                        byte = np.int64(w[p + 16 + 32 * (j // 2) + e])
                        u = (byte & 15) if j % 2 == 0 else (byte >> 4)
                        dot += u * np.int64(qx[((4 * b + j // 2) * n_rows + r) * 64 + 32 * (j % 2) + e])
                    isum += sc * dot
                    imin -= mn * np.int64(bsum[8 * ib + j])
                acc = sfma(np.float32(isum), dx[ib] * _scale16(w, p), acc)
                acc = sfma(np.float32(imin), dx[ib] * _scale16(w, p + 2), acc)
            out2[r, o] = acc


@njit(fastmath=False, _nrt=False)
def _tail_q6_k(qx, dx, bsum, w2, out2, o0, nb):
    n_rows, n_out = out2.shape
    rb = w2.shape[1]
    w = w2.reshape(-1)
    for o in range(o0, n_out):
        for r in range(n_rows):
            acc = np.float32(0)
            for b in range(nb):
                p = o * rb + b * 210
                ib = b * n_rows + r
                isum = 0
                for i in range(16):
                    dot = -32 * np.int64(bsum[16 * ib + i])
                    for e in range(16 * i, 16 * i + 16):
                        h, el = e // 128, e % 128
                        byte = np.int64(w[p + 64 * h + el % 64])
                        lo = (byte & 15) if el < 64 else (byte >> 4)
                        hi = (np.int64(w[p + 128 + 32 * h + el % 32]) >> (2 * (el // 32))) & 3
                        dot += (lo | (hi << 4)) * np.int64(qx[((4 * b + e // 64) * n_rows + r) * 64 + e % 64])
                    sc = np.int64(w[p + 192 + i])
                    isum += (sc - 256 if sc >= 128 else sc) * dot
                acc = sfma(np.float32(isum), dx[ib] * _scale16(w, p + 208), acc)
            out2[r, o] = acc


# ---- the matrix product ----------------------------------------------------------------------

@njit(fastmath=False)
def _bsums(bs, per):
    # block_q8_K's sums of 16 (int16 [nb, n_rows, 16]) -> int32 sums of `per` (16 or 32), flat
    n = bs.size // (per // 16)
    out = np.empty(n, np.int32)
    flat = bs.reshape(-1)
    for i in range(n):
        v = np.int32(0)
        for k in range(per // 16):
            v += np.int32(flat[(per // 16) * i + k])
        out[i] = v
    return out


@njit(fastmath=False)
def _pairs16(bsum, sign):
    # block sums (int32, |sum| <= 4096: an int16 holds it) times sign (1 or -1), two to an int32
    # (sub-block 2p in the low half, 2p + 1 in the high one), for the passes' tdotw: Q4_K's sums
    # of 32 negated (the mins' -sum_j mn_j bsum_j as four two-product steps), AVX2's Q6_K sums of
    # 16 as they are (_q6_offset_pairs16)
    out = np.empty(bsum.size // 2, np.int32)
    for i in range(out.size):
        out[i] = ((sign * bsum[2 * i]) & 0xFFFF) | ((sign * bsum[2 * i + 1]) << 16)
    return out


@njit(fastmath=False)
def _x16k_rows(qx, dx, bsum, w, qtype, out, g0, g1, nb, ahead, q4_k, q6_k):
    # the dispatch, each branch compiled only for the layouts selected (qtypes.TypeSel)
    if q4_k is not None and qtype == Q4_KX16:
        _rows_q4_k(qx, dx, bsum, w, out, g0, g1, nb, ahead)
    elif q6_k is not None and qtype == Q6_KX16:
        _rows_q6_k(qx, dx, bsum, w, out, g0, g1, nb, ahead)
    else:
        raise ValueError("specnb.kernels.matmul_x16k: layout outside the compiled selection:", qtype)


@njit(fastmath=False)
def _x16k_tail(qx, dx, bsum, w, qtype, out, o0, nb, q4_k, q6_k):
    if q4_k is not None and qtype == Q4_KX16:
        _tail_q4_k(qx, dx, bsum, w, out, o0, nb)
    elif q6_k is not None and qtype == Q6_KX16:
        _tail_q6_k(qx, dx, bsum, w, out, o0, nb)
    else:
        raise ValueError("specnb.kernels.matmul_x16k: layout outside the compiled selection:", qtype)


@njit(parallel=True, fastmath=False, cache=True)
def matmul_x16k_by(x, w, qtype, out, q4_k, q6_k, ahead):
    # out [n_rows, n_out] = x [n_rows, n_in] @ W^T for an interleaved K matrix w [n_out, row_bytes]
    # (shapes checked by the caller, x and w C-contiguous); q4_k, q6_k: the TypeSel's fields. Each
    # thread reads one run of group-blocks front to back; ahead >= 0: it prefetches them into L2
    # that many bytes ahead (tuning.prefetch_ahead_x16(), measured per machine: an Intel Xeon's
    # prefetchers fell behind this stream, and its 1.5B decoded 1.32x faster with 16 KB ahead)
    n_rows, n_in = x.shape
    nb = n_in // 256
    qx, dx, bs = _alloc_q8_k(n_rows, n_in)
    _quantize_q8_k(x, qx, dx, bs)
    bsum = _bsums(bs, 32 if qtype == Q4_KX16 else 16)
    qxf, dxf = qx.reshape(-1), dx.reshape(-1)
    n_groups = w.shape[0] // X16_ROWS
    if X16_ROWS * n_groups < w.shape[0]:
        _x16k_tail(qxf, dxf, bsum, w, qtype, out, X16_ROWS * n_groups, nb, q4_k, q6_k)
    # the rows' form of the sums
    bsr = _pairs16(bsum, -1) if qtype == Q4_KX16 else _pairs16(bsum, 1) if PAIRS16 else bsum
    if w.shape[0] * n_in <= SERIAL_MAX_ELEMENTS or n_groups < 2:
        # g0 as an int64 (0 * n_groups), not the literal 0: one compiled copy of the rows kernels
        _x16k_rows(qxf, dxf, bsr, w, qtype, out, 0 * n_groups, n_groups, nb, ahead, q4_k, q6_k)
        return
    n_chunks = min(n_groups, _N_CHUNKS)
    for c in prange(n_chunks):
        _x16k_rows(qxf, dxf, bsr, w, qtype, out, c * n_groups // n_chunks, (c + 1) * n_groups // n_chunks, nb,
                   ahead, q4_k, q6_k)


__all__ = ["interleave_k", "matmul_x16k_by", "R_MAX", "K_BASE"]
