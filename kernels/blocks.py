"""Block decoders: the GGUF blocks of a weight row as SIMD vectors (llama.cpp: ggml-quants.c
dequantize_row_*, and the block loads of ggml-cpu's vec_dot_*_q8_*).

- `_g_<type>(w, g)`: the 32 elements [32g, 32g + 32) of a row as four f32x8, computed with the
  float32 operations, in the order, of gguf.quants.dequantize (so bit for bit the same values);
  used by the float32 matrix product (matmul.py) and `dequant_row`.
- `_b_<type>(w, p)`: the Q*_0 / Q*_1 block at byte p as (its 32 quants as bytes, d, m), for the
  int8 matrix product (matmul_q8.py).

The layouts are in qtypes.py. Every helper is inlined into its caller and compiled with the
weight type as a constant.
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .qtypes import F16, F32
from .simd import (_F16C, _call, _i32, _is_bytes, _ptr, _f32_from_bits, ld_i8, ld_u8, ld_u16,
                   ld_u32, vbitcast, vbits, vbits32,
                   vfloat, vload_b32, vload_i8, vload_u8, vload_u16, vload_u32, vnibbles, vstore)

# small helpers of the hot loops: always inlined by LLVM (else a call per row or block); not cached
# on their own. They only read and write arrays they are given, so they are compiled without
# reference counting (_nrt=False): NRT calls for every array view passed between inlined pieces
# cost more than the arithmetic of a short row. Every jitted helper pins fastmath=False: Numba
# lets a callee that leaves fastmath unset inherit it from whichever caller compiles it first,
# and fast-math contraction or reassociation would break the bit-exact dequantization.
_inline = njit(fastmath=False, forceinline=True, _nrt=False)

# ---- half floats -------------------------------------------------------------------------------

# (errstate: on aarch64 the conversion of the signalling-NaN halves raises the invalid flag, a
# RuntimeWarning at every import; the table holds NaNs there on every CPU, the flag means nothing)
with np.errstate(invalid="ignore"):
    _HALF = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@_inline
def _half(w, p):
    # float32 <- the little-endian float16 at byte p of w
    return _HALF[ld_u16(w, p)]


@intrinsic
def _scale16(typingctx, w, p):
    """float32 <- the little-endian float16 at byte p of w, converted by the CPU (vcvtph2ps with
    F16C): exact for every finite value and inf; used for the block scales (d, m, dmin)."""
    if _is_bytes(w) and isinstance(p, types.Integer):
        def codegen(context, builder, sig, args):
            if not _F16C:
                ptr = _ptr(context, builder, sig.args[0], args[0], args[1], ir.HalfType())
                return builder.fpext(builder.load(ptr, align=1), ir.FloatType())
            # the 16 bits go into a zeroed vector register first (vmovd), so the conversion does
            # not wait on whatever that register held before (a false dependency otherwise)
            ptr = _ptr(context, builder, sig.args[0], args[0], args[1], ir.IntType(16))
            h = builder.zext(builder.load(ptr, align=1), _i32)
            v4 = builder.insert_element(ir.Constant(ir.VectorType(_i32, 4), None), h, _i32(0))
            v8 = builder.bitcast(v4, ir.VectorType(ir.IntType(16), 8))
            f4 = _call(builder, "llvm.x86.vcvtph2ps.128", ir.VectorType(ir.FloatType(), 4), [v8])
            return builder.extract_element(f4, _i32(0))
        return types.float32(w, p), codegen


@_inline
def _u32(w, p):
    # int64 <- the little-endian uint32 at byte p of w
    return ld_u32(w, p)


# ---- 32-element groups: one block (Q*_0, Q*_1) or one sub-block (K types) as four f32x8 ----------
# Each returns the vectors for elements [0:8], [8:16], [16:24], [24:32] of group g of a row.

@_inline
def _g_q8_0(w, g):
    p = 34 * g
    d = _half(w, p)
    return (vfloat(vload_i8(w, p + 2)) * d, vfloat(vload_i8(w, p + 10)) * d,
            vfloat(vload_i8(w, p + 18)) * d, vfloat(vload_i8(w, p + 26)) * d)


@_inline
def _g_q4_0(w, g):
    p = 18 * g
    d = _half(w, p)
    q0 = vload_u8(w, p + 2)
    q1 = vload_u8(w, p + 10)
    return (d * vfloat((q0 & 15) - 8), d * vfloat((q1 & 15) - 8),
            d * vfloat((q0 >> 4) - 8), d * vfloat((q1 >> 4) - 8))


@_inline
def _g_q4_1(w, g):
    p = 20 * g
    d = _half(w, p)
    m = _half(w, p + 2)
    q0 = vload_u8(w, p + 4)
    q1 = vload_u8(w, p + 12)
    return (d * vfloat(q0 & 15) + m, d * vfloat(q1 & 15) + m,
            d * vfloat(q0 >> 4) + m, d * vfloat(q1 >> 4) + m)


@_inline
def _g_q5_0(w, g):
    p = 22 * g
    d = _half(w, p)
    qh = _u32(w, p + 2)
    q0 = vload_u8(w, p + 6)
    q1 = vload_u8(w, p + 14)
    return (d * vfloat(((q0 & 15) | (vbits(qh, 0) << 4)) - 16),
            d * vfloat(((q1 & 15) | (vbits(qh, 8) << 4)) - 16),
            d * vfloat(((q0 >> 4) | (vbits(qh, 16) << 4)) - 16),
            d * vfloat(((q1 >> 4) | (vbits(qh, 24) << 4)) - 16))


@_inline
def _g_q5_1(w, g):
    p = 24 * g
    d = _half(w, p)
    m = _half(w, p + 2)
    qh = _u32(w, p + 4)
    q0 = vload_u8(w, p + 8)
    q1 = vload_u8(w, p + 16)
    return (d * vfloat((q0 & 15) | (vbits(qh, 0) << 4)) + m,
            d * vfloat((q1 & 15) | (vbits(qh, 8) << 4)) + m,
            d * vfloat((q0 >> 4) | (vbits(qh, 16) << 4)) + m,
            d * vfloat((q1 >> 4) | (vbits(qh, 24) << 4)) + m)


@_inline
def _scale_min_k4(w, sc_p, s):
    # (sc, mn) of sub-block s (0..7) from the 12 packed bytes at sc_p (ggml's get_scale_min_k4)
    if s < 4:
        return ld_u8(w, sc_p + s) & 63, ld_u8(w, sc_p + s + 4) & 63
    return ((ld_u8(w, sc_p + s + 4) & 15) | ((ld_u8(w, sc_p + s - 4) >> 6) << 4),
            (ld_u8(w, sc_p + s + 4) >> 4) | ((ld_u8(w, sc_p + s) >> 6) << 4))


@_inline
def _g_q4_k(w, g):
    p = 144 * (g >> 3)               # the block
    s = g & 7                        # the sub-block
    sc, mn = _scale_min_k4(w, p + 4, s)
    dl = _half(w, p) * np.float32(sc)
    ml = _half(w, p + 2) * np.float32(mn)
    q = p + 16 + 32 * (s >> 1)
    sh = 4 * (s & 1)
    return (dl * vfloat((vload_u8(w, q) >> sh) & 15) - ml,
            dl * vfloat((vload_u8(w, q + 8) >> sh) & 15) - ml,
            dl * vfloat((vload_u8(w, q + 16) >> sh) & 15) - ml,
            dl * vfloat((vload_u8(w, q + 24) >> sh) & 15) - ml)


@_inline
def _g_q5_k(w, g):
    p = 176 * (g >> 3)
    s = g & 7
    sc, mn = _scale_min_k4(w, p + 4, s)
    dl = _half(w, p) * np.float32(sc)
    ml = _half(w, p + 2) * np.float32(mn)
    q = p + 48 + 32 * (s >> 1)       # low 4 bits
    sh = 4 * (s & 1)
    qh = p + 16                      # bit s of qh[i] is the fifth bit of element 32s + i
    return (dl * vfloat(((vload_u8(w, q) >> sh) & 15) | (((vload_u8(w, qh) >> s) & 1) << 4)) - ml,
            dl * vfloat(((vload_u8(w, q + 8) >> sh) & 15) | (((vload_u8(w, qh + 8) >> s) & 1) << 4)) - ml,
            dl * vfloat(((vload_u8(w, q + 16) >> sh) & 15) | (((vload_u8(w, qh + 16) >> s) & 1) << 4)) - ml,
            dl * vfloat(((vload_u8(w, q + 24) >> sh) & 15) | (((vload_u8(w, qh + 24) >> s) & 1) << 4)) - ml)


@_inline
def _g_q2_k(w, g):
    p = 84 * (g >> 3)
    s = g & 7
    q = p + 16 + 32 * (s >> 2)       # 2-bit quants of elements 32s + i: bits 2 (s % 4) of q[i]
    sh = 2 * (s & 3)
    d = _half(w, p + 80)
    dmin = _half(w, p + 82)
    sc0 = ld_u8(w, p + 2 * s)        # groups 2s and 2s + 1: scale (low nibble), min (high)
    sc1 = ld_u8(w, p + 2 * s + 1)
    dl0, ml0 = d * np.float32(sc0 & 15), dmin * np.float32(sc0 >> 4)
    dl1, ml1 = d * np.float32(sc1 & 15), dmin * np.float32(sc1 >> 4)
    return (dl0 * vfloat((vload_u8(w, q) >> sh) & 3) - ml0,
            dl0 * vfloat((vload_u8(w, q + 8) >> sh) & 3) - ml0,
            dl1 * vfloat((vload_u8(w, q + 16) >> sh) & 3) - ml1,
            dl1 * vfloat((vload_u8(w, q + 24) >> sh) & 3) - ml1)


@_inline
def _scale_q3_k(w, sc_p, g):
    # the signed 6-bit scale of group g (0..15) from the 12 packed bytes at sc_p
    lo = (ld_u8(w, sc_p + (g & 7)) >> (4 * (g >> 3))) & 15
    hi = (ld_u8(w, sc_p + 8 + (g & 3)) >> (2 * (g >> 2))) & 3
    return (lo | (hi << 4)) - 32


@_inline
def _q3(w, q, hm, sh, s, j):
    # i32x8: 3-bit values - 4 (the low 2 bits, minus 4 where the hmask bit is clear)
    return ((vload_u8(w, q + j) >> sh) & 3) - 4 + (((vload_u8(w, hm + j) >> s) & 1) << 2)


@_inline
def _g_q3_k(w, g):
    p = 110 * (g >> 3)
    s = g & 7
    q = p + 32 + 32 * (s >> 2)
    sh = 2 * (s & 3)
    d = _half(w, p + 108)
    d0 = d * np.float32(_scale_q3_k(w, p + 96, 2 * s))
    d1 = d * np.float32(_scale_q3_k(w, p + 96, 2 * s + 1))
    return (d0 * vfloat(_q3(w, q, p, sh, s, 0)), d0 * vfloat(_q3(w, q, p, sh, s, 8)),
            d1 * vfloat(_q3(w, q, p, sh, s, 16)), d1 * vfloat(_q3(w, q, p, sh, s, 24)))


@_inline
def _q6(w, ql, qh, sh_l, sh_h, j):
    # i32x8: 6-bit values - 32 for 8 elements
    return (((vload_u8(w, ql + j) >> sh_l) & 15) | (((vload_u8(w, qh + j) >> sh_h) & 3) << 4)) - 32


@_inline
def _g_q6_k(w, g):
    p = 210 * (g >> 3)
    s = g & 7
    h, t = s >> 2, s & 3             # half of the block, 32-element quarter of the half
    ql = p + 64 * h + 32 * (t & 1)
    qh = p + 128 + 32 * h
    sh_l, sh_h = 4 * (t >> 1), 2 * t
    d = _half(w, p + 208)
    d0 = d * np.float32(ld_i8(w, p + 192 + 2 * s))
    d1 = d * np.float32(ld_i8(w, p + 193 + 2 * s))
    return (d0 * vfloat(_q6(w, ql, qh, sh_l, sh_h, 0)), d0 * vfloat(_q6(w, ql, qh, sh_l, sh_h, 8)),
            d1 * vfloat(_q6(w, ql, qh, sh_l, sh_h, 16)), d1 * vfloat(_q6(w, ql, qh, sh_l, sh_h, 24)))


@_inline
def _g_f32(w, g):
    p = 128 * g
    return (vbitcast(vload_u32(w, p)), vbitcast(vload_u32(w, p + 32)),
            vbitcast(vload_u32(w, p + 64)), vbitcast(vload_u32(w, p + 96)))


@_inline
def _g_bf16(w, g):
    p = 64 * g
    return (vbitcast(vload_u16(w, p) << 16), vbitcast(vload_u16(w, p + 16) << 16),
            vbitcast(vload_u16(w, p + 32) << 16), vbitcast(vload_u16(w, p + 48) << 16))


@_inline
def _scalar(w, qtype, i):
    # float32 <- element i of an F32 / F16 / BF16 row (the tails that are not a whole group)
    if qtype == F32:
        return _f32_from_bits(_u32(w, 4 * i))
    if qtype == F16:
        return _half(w, 2 * i)
    return _f32_from_bits(ld_u16(w, 2 * i) << 16)


@_inline
def _store4(out, i, v):
    vstore(out, i, v[0])
    vstore(out, i + 8, v[1])
    vstore(out, i + 16, v[2])
    vstore(out, i + 24, v[3])




# ---- Q*_0 / Q*_1 blocks as bytes for the int8 dot products ----------------------------------

@_inline
def _b_q8_0(w, p):
    # the block at byte p of the flat weight bytes as (its 32 weights as bytes, d, m)
    return vload_b32(w, p + 2), _scale16(w, p), np.float32(0)


@_inline
def _b_q4_0(w, p):
    return vnibbles(w, p + 2) - 8, _scale16(w, p), np.float32(0)


@_inline
def _b_q4_1(w, p):
    return vnibbles(w, p + 4), _scale16(w, p), _scale16(w, p + 2)


@_inline
def _b_q5_0(w, p):
    return (vnibbles(w, p + 6) | (vbits32(_u32(w, p + 2)) << 4)) - 16, _scale16(w, p), np.float32(0)


@_inline
def _b_q5_1(w, p):
    return vnibbles(w, p + 8) | (vbits32(_u32(w, p + 4)) << 4), _scale16(w, p), _scale16(w, p + 2)


