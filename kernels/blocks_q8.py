"""Weight blocks as bytes for the int8 dot products (matmul_q8.py), 64 elements at a time
(llama.cpp: the weight loads of ggml-cpu's ggml_vec_dot_*_q8_0 / _q8_1 / _q8_K).

K types (super-blocks of 256 elements, 4 chunks of 64):
    setup_<type>(w, p) -> (S, C, d, e) for the super-block at byte p:
        S  i32x16  the scale of each group g of 16 elements (vpairs form), g = 0..15
        C  i16x16  the coefficient of each group's activation sum (the min, or the offset)
        d, e       float32: the super-block sums to d * sum_g S_g (u . x)_g + e * sum_g C_g bsum_g
    chunk_<type>(w, p, c) -> u  i8x64: elements 64c .. 64c + 63 as unsigned integers
  so that weight j = d * S_g * u_j + (e * C_g, spread over the group): ggml's integer formula.
      type  u            S             C                e
      Q2_K  q2 (0..3)    sc_g          mn_g             -dmin
      Q3_K  q3 + 4       sc_g - 32     -4 (sc_g - 32)   d
      Q4_K  nib (0..15)  sc_(g/2)      mn_(g/2)         -dmin
      Q5_K  q5 (0..31)   sc_(g/2)      mn_(g/2)         -dmin
      Q6_K  q6 (0..63)   sc_g (int8)   -32 sc_g         d
Q*_0 / Q*_1 (blocks of 32):
    pair_<type>(w, p, bsize) -> (q, dw, m): the two blocks at p and p + bsize as i8x64 (signed
        for Q*_0, unsigned for Q*_1), their scales as vsplat2(d0, d1) and mins vsparse2(m0, m1);
    one_<type>(w, p) -> the same for a last single block (lanes 32..63 zero).
"""
import numpy as np

from .blocks import _b_q4_0, _b_q4_1, _b_q5_0, _b_q5_1, _b_q8_0, _inline, _scale16, _u32
from .simd_wide import (ld_f32, st_f32, vbytes16, vcat32, vdup2, vfields64, vload_b64, vload_f32x16,
                        vload_i8x16, vload_i16x16, vload_i32x16, vload_u8x16, vpairs, vsparse2, vsplat2,
                        vstore_at, vtrunc16)

_KM1, _KM2, _KM3 = 0x3F3F3F3F, 0x0F0F0F0F, 0x03030303   # ggml's kmask1..3


# ---- K types -----------------------------------------------------------------------------------

@_inline
def _k4_scales(w, p):
    # the 8 scales (lanes 0..7) and 8 mins (lanes 8..15) of a Q4_K / Q5_K super-block, from the
    # 12 packed bytes at p + 4 (ggml_vec_dot_q4_K_q8_K's utmp words)
    u0, u1, u2 = _u32(w, p + 4), _u32(w, p + 8), _u32(w, p + 12)
    t3 = ((u2 >> 4) & _KM2) | (((u1 >> 6) & _KM3) << 4)
    t2 = u1 & _KM1
    t1 = (u2 & _KM2) | (((u0 >> 6) & _KM3) << 4)
    t0 = u0 & _KM1
    return vbytes16(t0, t1, t2, t3)


@_inline
def setup_q4_k(w, p):
    b = _k4_scales(w, p)
    return vpairs(vdup2(b, 0)), vtrunc16(vdup2(b, 1)), _scale16(w, p), -_scale16(w, p + 2)


@_inline
def chunk_q4_k(w, p, c):
    return vfields64(w, p + 16 + 32 * c, 0, 4, 15)


setup_q5_k = setup_q4_k


@_inline
def chunk_q5_k(w, p, c):
    return vfields64(w, p + 48 + 32 * c, 0, 4, 15) | (vfields64(w, p + 16, 2 * c, 2 * c + 1, 1) << 4)


@_inline
def setup_q2_k(w, p):
    b = vload_u8x16(w, p)
    return vpairs(b & 15), vtrunc16(b >> 4), _scale16(w, p + 80), -_scale16(w, p + 82)


@_inline
def chunk_q2_k(w, p, c):
    return vfields64(w, p + 16 + 32 * (c >> 1), 4 * (c & 1), 4 * (c & 1) + 2, 3)


@_inline
def setup_q3_k(w, p):
    a0, a1, a2 = _u32(w, p + 96), _u32(w, p + 100), _u32(w, p + 104)
    s0 = (a0 & _KM2) | ((a2 & _KM3) << 4)                # ggml_vec_dot_q3_K_q8_K's aux words
    s1 = (a1 & _KM2) | (((a2 >> 2) & _KM3) << 4)
    s2 = ((a0 >> 4) & _KM2) | (((a2 >> 4) & _KM3) << 4)
    s3 = ((a1 >> 4) & _KM2) | (((a2 >> 6) & _KM3) << 4)
    sc = vbytes16(s0, s1, s2, s3) - 32
    d = _scale16(w, p + 108)
    return vpairs(sc), vtrunc16(sc * -4), d, d


@_inline
def chunk_q3_k(w, p, c):
    h = c >> 1
    low = vfields64(w, p + 32 + 32 * h, 4 * (c & 1), 4 * (c & 1) + 2, 3)
    return low | (vfields64(w, p, 2 * c, 2 * c + 1, 1) << 2)


@_inline
def setup_q6_k(w, p):
    sc = vload_i8x16(w, p + 192)
    d = _scale16(w, p + 208)
    return vpairs(sc), vtrunc16(sc * -32), d, d


@_inline
def chunk_q6_k(w, p, c):
    h, t = c >> 1, c & 1
    low = (vload_b64(w, p + 64 * h) >> (4 * t)) & 15
    return low | (vfields64(w, p + 128 + 32 * h, 4 * t, 4 * t + 2, 3) << 4)


# ---- decoded super-blocks in a scratch buffer ---------------------------------------------------
# The first pass over a weight row stores what it decoded; the passes for the rest of a batch
# read it back instead of decoding again: per super-block the 4 chunks (256 bytes), S (64), C (32),
# d and e, in K_BUF_BYTES.

K_BUF_BYTES = 384


@_inline
def store_k_scales(buf, q, S, C, d, e):
    # (the chunks go to buf[q + 64 c] as they are decoded)
    vstore_at(buf, q + 256, S)
    vstore_at(buf, q + 320, C)
    st_f32(buf, q + 352, d)
    st_f32(buf, q + 356, e)


@_inline
def setup_kbuf(buf, p):
    return vload_i32x16(buf, p + 256), vload_i16x16(buf, p + 320), ld_f32(buf, p + 352), ld_f32(buf, p + 356)


@_inline
def chunk_kbuf(buf, p, c):
    return vload_b64(buf, p + 64 * c)


# ---- Q*_0 / Q*_1: two blocks of 32 ---------------------------------------------------------------

def _pairs(bfn):
    @_inline
    def pair(w, p, bsize):
        q0, d0, m0 = bfn(w, p)
        q1, d1, m1 = bfn(w, p + bsize)
        return vcat32(q0, q1), vsplat2(d0, d1), vsparse2(m0, m1)

    @_inline
    def one(w, p):
        q0, d0, m0 = bfn(w, p)
        return vcat32(q0, q0 & 0), vsplat2(d0, np.float32(0)), vsparse2(m0, np.float32(0))
    return pair, one


pair_q8_0, one_q8_0 = _pairs(_b_q8_0)
pair_q4_0, one_q4_0 = _pairs(_b_q4_0)
pair_q4_1, one_q4_1 = _pairs(_b_q4_1)
pair_q5_0, one_q5_0 = _pairs(_b_q5_0)
pair_q5_1, one_q5_1 = _pairs(_b_q5_1)

# two decoded blocks in a scratch buffer: the bytes (64), dw (64), m (64): B_BUF_BYTES per chunk
B_BUF_BYTES = 192


@_inline
def store_b(buf, q, u, dw, m):
    vstore_at(buf, q, u)
    vstore_at(buf, q + 64, dw)
    vstore_at(buf, q + 128, m)


@_inline
def pair_bbuf(buf, p, bsize):
    return vload_b64(buf, p), vload_f32x16(buf, p + 64), vload_f32x16(buf, p + 128)


@_inline
def one_bbuf(buf, p):
    return pair_bbuf(buf, p, 0)

__all__ = ["setup_q2_k", "setup_q3_k", "setup_q4_k", "setup_q5_k", "setup_q6_k", "chunk_q2_k",
           "chunk_q3_k", "chunk_q4_k", "chunk_q5_k", "chunk_q6_k", "pair_q8_0", "pair_q4_0",
           "pair_q4_1", "pair_q5_0", "pair_q5_1", "one_q8_0", "one_q4_0", "one_q4_1", "one_q5_0",
           "one_q5_1", "K_BUF_BYTES", "store_k_scales", "setup_kbuf", "chunk_kbuf", "B_BUF_BYTES", "store_b",
           "pair_bbuf", "one_bbuf"]
