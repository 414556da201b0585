"""Matrix products straight over GGUF weight blocks, on the CPU with Numba (llama.cpp: ggml-quants.c
dequantize_row_* and ggml-cpu's vec_dot_* / mul_mat).

A weight matrix of n_out rows by n_in columns is the raw bytes of its GGUF tensor, a C-contiguous
uint8[n_out, row_bytes] array (usually a read-only view of the file's memory map). Each row is
n_in / QK blocks of a fixed byte size. Every multi-byte field is little-endian; "half" is an IEEE
float16, "q" a small integer. For a block, element j (0 <= j < QK) decodes as:

  type   QK  bytes  block layout                                   element j
  F32     1    4    f32                                            the value
  F16     1    2    half                                           the value
  BF16    1    2    high 16 bits of a f32                          the value
  Q8_0   32   34    d:half, q:int8[32]                             q[j] * d
  Q4_0   32   18    d:half, qs:u8[16]                              d * (nib_j - 8)
  Q4_1   32   20    d:half, m:half, qs:u8[16]                      d * nib_j + m
  Q5_0   32   22    d:half, qh:u32, qs:u8[16]                      d * ((nib_j | h_j << 4) - 16)
  Q5_1   32   24    d:half, m:half, qh:u32, qs:u8[16]              d * (nib_j | h_j << 4) + m
  Q4_K  256  144    d:half, dmin:half, scales:u8[12], qs:u8[128]   (d*sc_s) * nib - (dmin*mn_s)
  Q6_K  256  210    ql:u8[128], qh:u8[64], scales:int8[16], d:half (d*scales[j/16]) * (q6 - 32)

  Q4_0/Q4_1/Q5: nib_j = qs[j] & 15 for j < 16, qs[j - 16] >> 4 for j >= 16; h_j = bit j of qh.
  Q4_K: 8 sub-blocks s of 32; sub-block s reads the 32 bytes qs[32*(s//2) :], low nibbles when s
        is even, high when odd; its 6-bit scale sc_s and min mn_s are packed into `scales` (for
        s < 4: sc = scales[s] & 63, mn = scales[s+4] & 63; for s >= 4: the low 4 bits come from
        scales[s+4] (low nibble for sc, high for mn), the top 2 bits from scales[s-4] >> 6 (sc)
        and scales[s] >> 6 (mn)).
  Q6_K: two halves of 128; in half h, element i has low 4 bits from ql[64h + i % 64] (low nibble
        for i < 64, high for i >= 64) and top 2 bits from qh[32h + i % 32] >> (2 * (i // 32)).

Dequantization reproduces gguf.quants.dequantize bit for bit (same float32 operations in the same
order, no fused multiply-add). Half floats go through a 65536-entry float32 table (exact for
subnormals, inf and nan, and built by the same numpy cast that gguf uses).

The hot loops are written with a tiny explicit-SIMD layer (8-lane float32/int32 vectors, numba
intrinsics that emit plain LLVM vector IR): Numba ships LLVM's SLP vectorizer switched off, so the
32-element block loops would otherwise stay scalar. Every dot product of an activation row with a
weight row uses one fixed order: four 8-lane accumulators over 32-element steps (a fused multiply-
add each), a fixed tree to one float, then the scalar tail. Nothing in that order depends on how
many activation rows share the call, so a row's outputs are bit-identical in any batch.

  matmul(x, w, qtype, out)        y = x @ W^T, the reference kernel (float32 activations)
  dequant_row(w_row, qtype, out)  one row to float32
  dequantize(w, qtype, n_in)      all rows to float32
  matmul_ref(x, w, qtype, n_in)   NumPy oracle through gguf.quants.dequantize
"""
from __future__ import annotations

import operator

import gguf
import numba
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, models, overload, register_model

# Every jitted helper pins fastmath=False: Numba lets a callee that leaves fastmath unset inherit
# it from whichever caller compiles it first, and fast-math contraction or reassociation would
# break both the bit-exact dequantization and the fixed reduction order.
_jit = njit(cache=True, fastmath=False)
# small helpers of the hot loops: always inlined by LLVM (else a call per row or block); not cached
# on their own. They only read and write arrays they are given, so they are compiled without
# reference counting (_nrt=False): NRT calls for every array view passed between inlined pieces
# cost more than the arithmetic of a short row.
_inline = njit(fastmath=False, forceinline=True, _nrt=False)

# ---- tensor types ----------------------------------------------------------------------------

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, BF16 = (
    int(GGMLQuantizationType[n]) for n in
    ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q6_K", "BF16"))
SUPPORTED_QTYPES = frozenset((F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K))

# (block size QK, bytes per block) by type code, for the jitted code (0: unsupported)
_BLOCK = np.zeros(64, np.int64)
_BLOCK_BYTES = np.zeros(64, np.int64)
for _t in SUPPORTED_QTYPES:
    _BLOCK[_t], _BLOCK_BYTES[_t] = GGML_QUANT_SIZES[GGMLQuantizationType(_t)]


def qtype_name(qtype: int) -> str:
    """'Q4_1' for 3; 'type#99' for a code gguf does not know."""
    try:
        return GGMLQuantizationType(int(qtype)).name
    except ValueError:
        return f"type#{int(qtype)}"


def _check_qtype(qtype: int) -> None:
    if int(qtype) not in SUPPORTED_QTYPES:
        names = ", ".join(sorted(qtype_name(t) for t in SUPPORTED_QTYPES))
        raise ValueError(f"tensor type {qtype_name(qtype)} (code {int(qtype)}) is not supported "
                         f"by specnb.kernels.quant (supported: {names})")


def row_bytes(qtype: int, n_in: int) -> int:
    """Bytes of one row of n_in elements of type qtype."""
    _check_qtype(qtype)
    qk, size = GGML_QUANT_SIZES[GGMLQuantizationType(int(qtype))]
    if n_in % qk != 0:
        raise ValueError(f"a {qtype_name(qtype)} row has blocks of {qk} elements; "
                         f"n_in={n_in} is not a multiple of {qk}")
    return n_in // qk * size


@_jit
def _row_bytes(qtype, n_in):
    # -> bytes of a row, or -1 if qtype is unsupported or n_in not a multiple of its block
    if qtype < 0 or qtype >= 64 or _BLOCK[qtype] == 0 or n_in % _BLOCK[qtype] != 0:
        return -1
    return n_in // _BLOCK[qtype] * _BLOCK_BYTES[qtype]


_NAMES = tuple(qtype_name(t) for t in range(64))    # for the messages of the jitted code


@_jit
def _check_shapes(n_in, w_row_bytes, qtype):
    if qtype < 0 or qtype >= 64 or _BLOCK[qtype] == 0:
        name = _NAMES[qtype] if 0 <= qtype < 64 else "type#" + str(qtype)
        raise ValueError("specnb.kernels.quant: unsupported tensor type code (see "
                         "quant.SUPPORTED_QTYPES):", qtype, name)
    if _row_bytes(qtype, n_in) != w_row_bytes:
        raise ValueError("specnb.kernels.quant: weight rows have the wrong size for this type "
                         "and n_in (qtype, n_in, row bytes):", qtype, n_in, w_row_bytes)


# ---- a tiny explicit-SIMD layer ----------------------------------------------------------------
# Vec types are LLVM vectors held in jitted code's local variables: f32x8 = <8 x float>,
# i32x8 = <8 x i32>, i8x32 = <32 x i8>. The functions below are Numba intrinsics that emit plain
# LLVM vector IR (x86 AVX2 instructions for the int8 dot products where the CPU has them).
# Loads and stores take a 1-D C-contiguous array and an element index (a byte offset for byte
# arrays) and do no bounds checks: callers validate the shapes first. Float ops are IEEE, with no
# fast-math flags and no contraction, except vfma (one rounding where the CPU has FMA).
# Operators + - * & | >> << work lane-wise on a vector and a vector or a scalar (>> is logical).
#
#   vload(a, i) vstore(a, i, v)      f32x8 <-> float32 a[i:i+8]
#   vload_u8 / vload_i8 (a, i)       i32x8 <- 8 bytes zero / sign extended
#   vload_u16 / vload_u32 (a, i)     i32x8 <- 8 little-endian uint16 / uint32 (the bits)
#   vload_b32(a, i)                  i8x32 <- 32 bytes;  vstore_i8(a, i, v): 8 lanes as int8
#   vnibbles(a, i)                   i8x32 <- 16 bytes as 32 nibbles (low ones, then high ones)
#   vbits(word, j0) / vbits32(word)  i32x8 / i8x32 of single bits of an integer
#   vzero() vsplat(s) vfloat(v) vbitcast(v) vrint(v) vabs(v) vmax(a, b) vfma(a, b, c)
#   vhsum(v) vhmax(v) vhsum_i(v)     reductions to one scalar (vhsum in a fixed order)
#   sfma(a, b, c)                    float32 scalar a * b + c, fused where the CPU has FMA
#   vdot_u8i8(a, b) vdot_i8i8(a, b)  i32x8 of sums of 4 adjacent byte products

class Vec(types.Type):
    def __init__(self, dtype, lanes):
        self.dtype, self.lanes = dtype, lanes
        super().__init__(name=f"Vec({dtype}x{lanes})")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elt = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(elt, fe_type.lanes))


f32x8 = Vec(types.float32, 8)
i32x8 = Vec(types.int32, 8)
i8x32 = Vec(types.int8, 32)
_i32 = ir.IntType(32)
_V8F = ir.VectorType(ir.FloatType(), 8)
_V8I = ir.VectorType(_i32, 8)
_V32B = ir.VectorType(ir.IntType(8), 32)
_HOST_AVX2 = bool(llvm_binding.get_host_cpu_features().get("avx2", False))
_HOST_F16C = bool(llvm_binding.get_host_cpu_features().get("f16c", False))


def _is_1d_c(a, dtype):
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == dtype


def _is_bytes(a):
    return _is_1d_c(a, types.uint8) or _is_1d_c(a, types.int8)


def _ptr(context, builder, aryty, ary, idx, vty):
    # pointer to element idx of a 1-D array, as a pointer to vector type vty
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [idx], inbounds=True), vty.as_pointer())


def _splat(builder, s, vty):
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), s, _i32(0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(_i32, vty.count), [0] * vty.count))


def _call(builder, name, ret, args):
    # call the LLVM intrinsic `name`
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


# -- loads and stores

@intrinsic
def vload(typingctx, a, i):
    if _is_1d_c(a, types.float32) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V8F), align=4)
        return f32x8(a, i), codegen


@intrinsic
def vstore(typingctx, a, i, v):
    if _is_1d_c(a, types.float32) and isinstance(i, types.Integer) and v == f32x8:
        def codegen(context, builder, sig, args):
            builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], _V8F), align=4)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen


def _int_load(nbytes, signed):
    # i32x8 <- 8 little-endian integers of `nbytes` bytes each, at byte offset i of a uint8 array
    @intrinsic
    def load(typingctx, a, i):
        if _is_1d_c(a, types.uint8) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                vty = ir.VectorType(ir.IntType(8 * nbytes), 8)
                v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], vty), align=1)
                if nbytes == 4:
                    return v
                return (builder.sext if signed else builder.zext)(v, _V8I)
            return i32x8(a, i), codegen
    return load


vload_u8 = _int_load(1, False)
vload_i8 = _int_load(1, True)
vload_u16 = _int_load(2, False)
vload_u32 = _int_load(4, False)


@intrinsic
def vload_b32(typingctx, a, i):
    if _is_bytes(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V32B), align=1)
        return i8x32(a, i), codegen


@intrinsic
def vnibbles(typingctx, a, i):
    # lanes 0..15: the low nibbles of a[i:i+16], lanes 16..31: the high ones (Q4 / Q5 order)
    if _is_bytes(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            v16 = ir.VectorType(ir.IntType(8), 16)
            q = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], v16), align=1)
            lo = builder.and_(q, ir.Constant(v16, [15] * 16))
            hi = builder.lshr(q, ir.Constant(v16, [4] * 16))
            return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))
        return i8x32(a, i), codegen


@intrinsic
def vstore_i8(typingctx, a, i, v):
    if _is_1d_c(a, types.int8) and isinstance(i, types.Integer) and v == i32x8:
        def codegen(context, builder, sig, args):
            v8 = ir.VectorType(ir.IntType(8), 8)
            p = _ptr(context, builder, sig.args[0], args[0], args[1], v8)
            builder.store(builder.trunc(args[2], v8), p, align=1)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen


# -- making and converting vectors

@intrinsic
def vzero(typingctx):
    def codegen(context, builder, sig, args):
        return ir.Constant(_V8F, None)
    return f32x8(), codegen


@intrinsic
def vsplat(typingctx, s):
    if isinstance(s, (types.Float, types.Integer)):
        def codegen(context, builder, sig, args):
            return _splat(builder, context.cast(builder, args[0], sig.args[0], types.float32), _V8F)
        return f32x8(s), codegen


@intrinsic
def vbits(typingctx, word, j0):
    # lane l = bit (j0 + l) of the integer word
    if isinstance(word, types.Integer) and isinstance(j0, types.Integer):
        def codegen(context, builder, sig, args):
            w = _splat(builder, context.cast(builder, args[0], sig.args[0], types.int32), _V8I)
            j = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int32), _V8I)
            j = builder.add(j, ir.Constant(_V8I, list(range(8))))
            return builder.and_(builder.lshr(w, j), ir.Constant(_V8I, [1] * 8))
        return i32x8(word, j0), codegen


@intrinsic
def vbits32(typingctx, word):
    # lane j = bit j of the integer word
    if isinstance(word, types.Integer):
        def codegen(context, builder, sig, args):
            v32 = ir.VectorType(_i32, 32)
            w = _splat(builder, context.cast(builder, args[0], sig.args[0], types.int32), v32)
            b = builder.and_(builder.lshr(w, ir.Constant(v32, list(range(32)))), ir.Constant(v32, [1] * 32))
            return builder.trunc(b, _V32B)
        return i8x32(word), codegen


def _vec_unary(vt_in, vt_out, build):
    @intrinsic
    def op(typingctx, v):
        if v == vt_in:
            def codegen(context, builder, sig, args):
                return build(builder, args[0])
            return vt_out(v), codegen
    return op


vfloat = _vec_unary(i32x8, f32x8, lambda b, v: b.sitofp(v, _V8F))        # by value
vbitcast = _vec_unary(i32x8, f32x8, lambda b, v: b.bitcast(v, _V8F))      # the bits
vrint = _vec_unary(f32x8, i32x8,                                          # nearest, ties to even
                   lambda b, v: b.fptosi(_call(b, "llvm.rint.v8f32", _V8F, [v]), _V8I))
vabs = _vec_unary(f32x8, f32x8, lambda b, v: _call(b, "llvm.fabs.v8f32", _V8F, [v]))


# -- arithmetic

@intrinsic
def vfma(typingctx, a, b, c):
    # a * b + c (llvm.fmuladd: one fused op where the CPU has FMA, the same choice everywhere)
    if a == f32x8 and b == f32x8 and c == f32x8:
        def codegen(context, builder, sig, args):
            return _call(builder, "llvm.fmuladd.v8f32", _V8F, list(args))
        return f32x8(a, b, c), codegen


@intrinsic
def sfma(typingctx, a, b, c):
    # float32 a * b + c for scalars (llvm.fmuladd, one rounding where the CPU has FMA)
    if all(isinstance(t, types.Float) for t in (a, b, c)):
        def codegen(context, builder, sig, args):
            vals = [context.cast(builder, v, t, types.float32) for v, t in zip(args, sig.args)]
            return _call(builder, "llvm.fmuladd.f32", ir.FloatType(), vals)
        return types.float32(a, b, c), codegen


@intrinsic
def vmax(typingctx, a, b):
    if a == f32x8 and b == f32x8:
        def codegen(context, builder, sig, args):
            return _call(builder, "llvm.maxnum.v8f32", _V8F, list(args))
        return f32x8(a, b), codegen


def _vec_binop(float_op, int_op):
    @intrinsic
    def binop(typingctx, a, b):
        vt = a if isinstance(a, Vec) else b
        op = float_op if vt == f32x8 else int_op
        scalar = (types.Integer, types.Float) if vt == f32x8 else types.Integer
        if op is not None and all(t == vt or isinstance(t, scalar) for t in (a, b)):
            def codegen(context, builder, sig, args):
                vals = [x if t == vt else
                        _splat(builder, context.cast(builder, x, t, vt.dtype), context.get_value_type(vt))
                        for t, x in zip(sig.args, args)]
                return getattr(builder, op)(*vals)
            return vt(a, b), codegen
    return binop


def _register_operator(pyop, impl):
    @overload(pyop, jit_options={"fastmath": False})
    def _ov(a, b):
        if isinstance(a, Vec) or isinstance(b, Vec):
            return lambda a, b: impl(a, b)


for _pyop, _fop, _iop in ((operator.add, "fadd", "add"), (operator.sub, "fsub", "sub"),
                          (operator.mul, "fmul", "mul"), (operator.and_, None, "and_"),
                          (operator.or_, None, "or_"), (operator.rshift, None, "lshr"),
                          (operator.lshift, None, "shl")):
    _register_operator(_pyop, _vec_binop(_fop, _iop))


# -- reductions

@intrinsic
def vhsum(typingctx, v):
    # float32: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), always this order
    if v == f32x8:
        def codegen(context, builder, sig, args):
            def part(x, lo, n):
                return builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(_i32, n), list(range(lo, lo + n))))
            s4 = builder.fadd(part(args[0], 0, 4), part(args[0], 4, 4))
            s2 = builder.fadd(part(s4, 0, 2), part(s4, 2, 2))
            return builder.fadd(builder.extract_element(s2, _i32(0)), builder.extract_element(s2, _i32(1)))
        return types.float32(v), codegen


@intrinsic
def vhmax(typingctx, v):
    if v == f32x8:
        def codegen(context, builder, sig, args):
            return _call(builder, "llvm.vector.reduce.fmax.v8f32", ir.FloatType(), [args[0]])
        return types.float32(v), codegen


@intrinsic
def vhsum_i(typingctx, v):
    if v == i32x8:
        def codegen(context, builder, sig, args):
            s = _call(builder, "llvm.vector.reduce.add.v8i32", _i32, [args[0]])
            return builder.sext(s, ir.IntType(64))
        return types.int64(v), codegen


def _dot_bytes(signed_a):
    # i32x8 lane l = sum_k a[4l+k] * b[4l+k] (k = 0..3), b signed, a signed or unsigned. With AVX2
    # it is llama.cpp's pmaddubsw + pmaddwd (for a signed: |a| times b with a's sign); elsewhere
    # plain widening IR. Both give the same integers as long as pmaddubsw cannot saturate: a
    # unsigned < 128, or a signed and b never -128, which is how matmul_q8 uses them.
    def codegen(context, builder, sig, args):
        a, b = args
        if _HOST_AVX2:
            v16s = ir.VectorType(ir.IntType(16), 16)
            if signed_a:
                a, b = (_call(builder, "llvm.x86.avx2.psign.b", _V32B, [a, a]),
                        _call(builder, "llvm.x86.avx2.psign.b", _V32B, [b, a]))
            pairs = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", v16s, [a, b])
            return _call(builder, "llvm.x86.avx2.pmadd.wd", _V8I, [pairs, ir.Constant(v16s, [1] * 16)])
        v32 = ir.VectorType(_i32, 32)
        p = builder.mul(builder.sext(a, v32) if signed_a else builder.zext(a, v32), builder.sext(b, v32))
        parts = [builder.shuffle_vector(p, p, ir.Constant(_V8I, list(range(k, 32, 4)))) for k in range(4)]
        return builder.add(builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3]))

    @intrinsic
    def dot(typingctx, a, b):
        if a == i8x32 and b == i8x32:
            return i32x8(a, b), codegen
    return dot


vdot_u8i8 = _dot_bytes(False)
vdot_i8i8 = _dot_bytes(True)


# -- scalars

@intrinsic
def _f32_from_bits(typingctx, u):
    # float32 with the bit pattern of the low 32 bits of the integer u
    if isinstance(u, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.bitcast(context.cast(builder, args[0], sig.args[0], types.uint32), ir.FloatType())
        return types.float32(u), codegen


# ---- half floats -------------------------------------------------------------------------------

_HALF = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@_inline
def _half(w, p):
    # float32 <- the little-endian float16 at byte p of w
    return _HALF[np.int64(w[p]) | (np.int64(w[p + 1]) << 8)]


@intrinsic
def _scale16(typingctx, w, p):
    """float32 <- the little-endian float16 at byte p of w, converted by the CPU (vcvtph2ps with
    F16C): exact for every finite value and inf; used for the block scales (d, m, dmin)."""
    if _is_bytes(w) and isinstance(p, types.Integer):
        def codegen(context, builder, sig, args):
            if not _HOST_F16C:
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
    return (np.int64(w[p]) | (np.int64(w[p + 1]) << 8) | (np.int64(w[p + 2]) << 16)
            | (np.int64(w[p + 3]) << 24))


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
def _g_q4_k(w, g):
    p = 144 * (g >> 3)               # the block
    s = g & 7                        # the sub-block
    sc_p = p + 4                     # 12 bytes of packed 6-bit scales and mins
    if s < 4:
        sc = np.int64(w[sc_p + s]) & 63
        mn = np.int64(w[sc_p + s + 4]) & 63
    else:
        sc = (np.int64(w[sc_p + s + 4]) & 15) | ((np.int64(w[sc_p + s - 4]) >> 6) << 4)
        mn = (np.int64(w[sc_p + s + 4]) >> 4) | ((np.int64(w[sc_p + s]) >> 6) << 4)
    dl = _half(w, p) * np.float32(sc)
    ml = _half(w, p + 2) * np.float32(mn)
    q = p + 16 + 32 * (s >> 1)
    sh = 4 * (s & 1)
    return (dl * vfloat((vload_u8(w, q) >> sh) & 15) - ml,
            dl * vfloat((vload_u8(w, q + 8) >> sh) & 15) - ml,
            dl * vfloat((vload_u8(w, q + 16) >> sh) & 15) - ml,
            dl * vfloat((vload_u8(w, q + 24) >> sh) & 15) - ml)


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
    d0 = d * np.float32(np.int8(w[p + 192 + 2 * s]))
    d1 = d * np.float32(np.int8(w[p + 193 + 2 * s]))
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
    return _f32_from_bits((np.int64(w[2 * i]) | (np.int64(w[2 * i + 1]) << 8)) << 16)


@_inline
def _store4(out, i, v):
    vstore(out, i, v[0])
    vstore(out, i + 8, v[1])
    vstore(out, i + 16, v[2])
    vstore(out, i + 24, v[3])


# ---- dot products in the one fixed order ---------------------------------------------------------
# For one activation row x and one weight row w of n elements:
#   acc_k (k = 0..3) = fma(x[32c + 8k : +8], w[32c + 8k : +8], acc_k) over the whole 32-steps c,
#   then the remaining 8-lane steps into acc_0, acc_1, acc_2 (float types only),
#   s = hsum((acc_0 + acc_1) + (acc_2 + acc_3)), then s += x[i] * w[i] for the last n % 8.
# Whether w is dequantized in registers or read back from a float32 buffer, and whether 1, 2 or 3
# activation rows share a pass over w, every (row, output) pair runs exactly these operations.
# Batches of 1 to 3 rows decode each weight row in registers (one pass); from 4 rows on a weight
# row is decoded once into a float32 buffer and read back by passes of 2 rows (8 accumulators:
# enough independent FMA chains to hide their latency, few enough to stay in registers).

@_inline
def _g_buf(buf, g):
    # group g of an already dequantized float32 row
    i = 32 * g
    return vload(buf, i), vload(buf, i + 8), vload(buf, i + 16), vload(buf, i + 24)


@_inline
def _fma4(x, i, v, a):
    # the four accumulators += x[i : i+32] * (the four vectors v)
    return (vfma(vload(x, i), v[0], a[0]), vfma(vload(x, i + 8), v[1], a[1]),
            vfma(vload(x, i + 16), v[2], a[2]), vfma(vload(x, i + 24), v[3], a[3]))


@_inline
def _zero4():
    return vzero(), vzero(), vzero(), vzero()


@_inline
def _finish(a, x, buf, n):
    # the rest of one dot product after the whole 32-steps -> float32 (buf: the float32 w row;
    # not read when n % 32 == 0)
    a0, a1, a2, a3 = a
    i = n - n % 32
    if i + 8 <= n:
        a0 = vfma(vload(x, i), vload(buf, i), a0)
        i += 8
    if i + 8 <= n:
        a1 = vfma(vload(x, i), vload(buf, i), a1)
        i += 8
    if i + 8 <= n:
        a2 = vfma(vload(x, i), vload(buf, i), a2)
        i += 8
    s = vhsum((a0 + a1) + (a2 + a3))
    for j in range(i, n):
        s += x[j] * buf[j]
    return s


def _specialize(gfn):
    """The row kernels for one group function (one weight type): Numba compiles them with gfn as
    a constant, like a C++ template, so the type is decided once per row, outside the loops.
    (They are not cached on their own but compiled into their cached callers. Jitted code must
    call them through module globals, not receive them as arguments: a function passed as a
    value would make the caller uncachable.) Returns (deq, rows, dot_rows):
      deq(w_row, out, n)                    out[:n] <- the row, n % 32 == 0
      dot_rows(w_row, x, r, nr, out, o, buf, n)
                                            out[r : r+nr, o] <- x[r : r+nr] . w_row, nr = 1, 2, 3,
                                            in one pass over w_row (buf: see _finish)
      rows(x, w, out, lo, hi, buf)          out[:, lo:hi] <- x @ w[lo:hi]^T (quantized types)
    """

    @_inline
    def deq(w, out, n):
        for g in range(n // 32):
            _store4(out, 32 * g, gfn(w, g))

    @_inline
    def dots1(w, x0, n):
        a = _zero4()
        for g in range(n // 32):
            a = _fma4(x0, 32 * g, gfn(w, g), a)
        return a

    @_inline
    def dots2(w, x0, x1, n):
        a = b = _zero4()
        for g in range(n // 32):
            v = gfn(w, g)
            a = _fma4(x0, 32 * g, v, a)
            b = _fma4(x1, 32 * g, v, b)
        return a, b

    @_inline
    def dots3(w, x0, x1, x2, n):
        a = b = c = _zero4()
        for g in range(n // 32):
            v = gfn(w, g)
            a = _fma4(x0, 32 * g, v, a)
            b = _fma4(x1, 32 * g, v, b)
            c = _fma4(x2, 32 * g, v, c)
        return a, b, c

    @_inline
    def dot_rows(w, x, r, nr, out, o, buf, n):
        if nr == 3:
            a, b, c = dots3(w, x[r], x[r + 1], x[r + 2], n)
            out[r, o] = _finish(a, x[r], buf, n)
            out[r + 1, o] = _finish(b, x[r + 1], buf, n)
            out[r + 2, o] = _finish(c, x[r + 2], buf, n)
        elif nr == 2:
            a, b = dots2(w, x[r], x[r + 1], n)
            out[r, o] = _finish(a, x[r], buf, n)
            out[r + 1, o] = _finish(b, x[r + 1], buf, n)
        else:
            out[r, o] = _finish(dots1(w, x[r], n), x[r], buf, n)

    @njit(fastmath=False, _nrt=False)
    def rows(x, w, out, lo, hi, buf):
        # one loop per batch shape, so that each is compiled on its own (the 1-row decode loop
        # most of all); the arithmetic per (row, output) is the same in all of them
        n_rows, n_in = x.shape
        if n_rows == 1:                          # dequantized in registers
            for o in range(lo, hi):
                out[0, o] = _finish(dots1(w[o], x[0], n_in), x[0], buf, n_in)
        elif n_rows == 2:
            for o in range(lo, hi):
                dot_rows(w[o], x, 0, 2, out, o, buf, n_in)
        elif n_rows == 3:
            for o in range(lo, hi):
                dot_rows(w[o], x, 0, 3, out, o, buf, n_in)
        else:                                    # dequantized once, read back 2 rows a pass
            for o in range(lo, hi):
                deq(w[o], buf, n_in)
                for r in range(0, n_rows, 2):
                    _buf_dot_rows(buf, x, r, min(2, n_rows - r), out, o, buf, n_in)

    return deq, rows, dot_rows


_, _, _buf_dot_rows = _specialize(_g_buf)
_deq_f32, _, _ = _specialize(_g_f32)
_deq_bf16, _, _ = _specialize(_g_bf16)
_deq_q4_1, _rows_q4_1, _ = _specialize(_g_q4_1)
_deq_q8_0, _rows_q8_0, _ = _specialize(_g_q8_0)
_deq_q4_0, _rows_q4_0, _ = _specialize(_g_q4_0)
_deq_q5_0, _rows_q5_0, _ = _specialize(_g_q5_0)
_deq_q5_1, _rows_q5_1, _ = _specialize(_g_q5_1)
_deq_q4_k, _rows_q4_k, _ = _specialize(_g_q4_k)
_deq_q6_k, _rows_q6_k, _ = _specialize(_g_q6_k)


# ---- one row to float32 ------------------------------------------------------------------------

@_jit
def _dequant_row(w, qtype, out, n):
    # [row_bytes] -> out [n]; shapes already checked
    if qtype == Q4_1:
        _deq_q4_1(w, out, n)
    elif qtype == Q8_0:
        _deq_q8_0(w, out, n)
    elif qtype == Q4_0:
        _deq_q4_0(w, out, n)
    elif qtype == Q5_0:
        _deq_q5_0(w, out, n)
    elif qtype == Q5_1:
        _deq_q5_1(w, out, n)
    elif qtype == Q4_K:
        _deq_q4_k(w, out, n)
    elif qtype == Q6_K:
        _deq_q6_k(w, out, n)
    else:                            # F32, F16, BF16: any n
        n32 = n - n % 32
        if qtype == F32:
            _deq_f32(w, out, n32)
        elif qtype == BF16:
            _deq_bf16(w, out, n32)
        else:
            n32 = 0                  # F16: the table loop below does it all
        for i in range(n32, n):
            out[i] = _scalar(w, qtype, i)


@_jit
def dequant_row(w_row, qtype, out):
    # [row_bytes] uint8 -> out [n_in] float32, n_in = out.shape[0]
    _check_shapes(out.shape[0], w_row.shape[0], qtype)
    _dequant_row(np.ascontiguousarray(w_row), qtype, out, out.shape[0])


@njit(parallel=True, fastmath=False, cache=True)
def _dequantize(w, qtype, out):
    # [n_out, row_bytes] -> out [n_out, n_in]
    n_in = out.shape[1]
    for o in prange(w.shape[0]):
        _dequant_row(w[o], qtype, out[o], n_in)


def dequantize(w: np.ndarray, qtype: int, n_in: int) -> np.ndarray:
    """[n_out, row_bytes] uint8 -> [n_out, n_in] float32 (a 1-D w is one row)."""
    w = np.ascontiguousarray(w, dtype=np.uint8)
    w2 = w.reshape(1, -1) if w.ndim == 1 else w
    if w2.shape[1] != row_bytes(qtype, n_in):
        raise ValueError(f"{qtype_name(qtype)} rows of {n_in} elements take "
                         f"{row_bytes(qtype, n_in)} bytes, got {w2.shape[1]}")
    out = np.empty((w2.shape[0], n_in), np.float32)
    _dequantize(w2, int(qtype), out)
    return out


# ---- the matrix product ----------------------------------------------------------------------

@_jit
def _rows_float(x, w, qtype, out, lo, hi, buf):
    # F32 / F16 / BF16 w (any n_in): each row dequantized into buf, then the buffered dots
    n_rows, n_in = x.shape
    for o in range(lo, hi):
        _dequant_row(w[o], qtype, buf, n_in)
        for r in range(0, n_rows, 2):
            _buf_dot_rows(buf, x, r, min(2, n_rows - r), out, o, buf, n_in)


@_jit
def _matmul_rows(x, w, qtype, out, lo, hi, buf):
    # output columns [lo, hi) of out [n_rows, n_out]; buf: float32 [n_in] scratch
    if qtype == Q4_1:
        _rows_q4_1(x, w, out, lo, hi, buf)
    elif qtype == Q8_0:
        _rows_q8_0(x, w, out, lo, hi, buf)
    elif qtype == Q4_0:
        _rows_q4_0(x, w, out, lo, hi, buf)
    elif qtype == Q5_0:
        _rows_q5_0(x, w, out, lo, hi, buf)
    elif qtype == Q5_1:
        _rows_q5_1(x, w, out, lo, hi, buf)
    elif qtype == Q4_K:
        _rows_q4_k(x, w, out, lo, hi, buf)
    elif qtype == Q6_K:
        _rows_q6_k(x, w, out, lo, hi, buf)
    else:
        _rows_float(x, w, qtype, out, lo, hi, buf)


# below this many weight elements a call runs on the calling thread (the choice depends on the
# weight shape only, never on n_rows)
SERIAL_MAX_ELEMENTS = 1 << 17
_N_CHUNKS = 32


@njit(parallel=True, fastmath=True, cache=True)
def matmul(x, w, qtype, out):
    # [n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out]   (y = x @ W^T)
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    _check_shapes(n_in, w.shape[1], qtype)
    if out.shape[0] != n_rows or out.shape[1] != n_out:
        raise ValueError("specnb.kernels.quant.matmul: out must be [n_rows, n_out]")
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w)
    if n_out * n_in <= SERIAL_MAX_ELEMENTS:
        _matmul_rows(xc, wc, qtype, out, 0, n_out, np.empty(n_in, np.float32))
        return
    n_chunks = min(n_out, _N_CHUNKS)  # row ranges; prange hands them out to the threads
    bufs = np.empty((n_chunks, n_in), np.float32)
    for c in prange(n_chunks):
        _matmul_rows(xc, wc, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks, bufs[c])


# ---- matmul_q8: int8 activations, as llama.cpp's CPU backend -----------------------------------
# The activation rows are quantized like a Q8_0 / Q8_1 block (per 32 elements: dx = max|x| / 127,
# qx = round(x / dx) to even, sx = dx * sum(qx)), and each weight block meets them in an integer dot
# product (ggml_vec_dot_q4_0_q8_0 and friends): per block, acc = fma(dw * dx, sum(qw * qx), acc)
# (+ mw * sx for the types with a min), then hsum(acc) + the min terms. The quantization of x adds
# an error of up to max|x| / 254 per element, so this is not the reference; it is several times
# faster. Each (row, output) pair runs the same operations in any batch, so it is batch-invariant
# too. Types without an int8 kernel here (F32, F16, BF16, Q4_K, Q6_K) go to the float path.

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


@_jit
def _quantize_q8(x, qx, dx, sx):
    # x [n_rows, n] -> qx int8 [n_rows, n], dx and sx [n_rows, n // 32]: per 32-block
    # dx = max|x| / 127, qx = round(x / dx) (ties to even), sx = dx * sum(qx)
    n_rows, n = x.shape
    for r in range(n_rows):
        xr, qr = x[r], qx[r]
        for b in range(n // 32):
            i = 32 * b
            v0, v1, v2, v3 = vload(xr, i), vload(xr, i + 8), vload(xr, i + 16), vload(xr, i + 24)
            amax = vhmax(vmax(vmax(vabs(v0), vabs(v1)), vmax(vabs(v2), vabs(v3))))
            d = amax / np.float32(127)
            inv = np.float32(1) / d if d != 0 else np.float32(0)
            q0, q1, q2, q3 = vrint(v0 * inv), vrint(v1 * inv), vrint(v2 * inv), vrint(v3 * inv)
            vstore_i8(qr, i, q0)
            vstore_i8(qr, i + 8, q1)
            vstore_i8(qr, i + 16, q2)
            vstore_i8(qr, i + 24, q3)
            dx[r, b] = d
            sx[r, b] = d * np.float32(vhsum_i((q0 + q1) + (q2 + q3)))


def _specialize_q8(bfn, signed, bsize):
    """Row kernels of matmul_q8 for one block function bfn (w, p) -> (bytes, d, m) of blocks of
    bsize bytes; signed: the weight bytes are signed (no min term) or unsigned with a min m.
    Per (activation row, output), even blocks go to (acc_e, summ_e) and odd ones to (acc_o,
    summ_o), two independent dependency chains that the CPU overlaps:
    acc = fma(d * dx, sum(qw * qx), acc) (+ summ += m * sx), then
    hsum(acc_e + acc_o) + (summ_e + summ_o). A pass over a weight row serves 4, 3, 2 or 1
    activation rows with exactly these operations per row.
    All arrays are flat (no per-row views in the loops): weight row o starts at byte
    p = o * row_bytes, activation block b of row r is block i = r * nb + b."""

    @_inline
    def step(acc, summ, bw, d, m, qx, dx, sx, i):
        if signed:
            isum = vdot_i8i8(bw, vload_b32(qx, 32 * i))
        else:
            isum = vdot_u8i8(bw, vload_b32(qx, 32 * i))
            summ = sfma(m, sx[i], summ)
        return vfma(vsplat(d) * vsplat(dx[i]), vfloat(isum), acc), summ

    @_inline
    def pass1(w, p, qx, dx, sx, i, out, r, o, nb):
        e0, f0, o0, g0 = vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(0, nb - 1, 2):
            kw, kd, km = bfn(w, p + bsize * b)
            lw, ld, lm = bfn(w, p + bsize * (b + 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + b)
            o0, g0 = step(o0, g0, lw, ld, lm, qx, dx, sx, i + b + 1)
        if nb % 2:
            kw, kd, km = bfn(w, p + bsize * (nb - 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + nb - 1)
        out[r, o] = vhsum(e0 + o0) + (f0 + g0)

    @_inline
    def pass2(w, p, qx, dx, sx, i, out, r, o, nb):
        e0, f0, o0, g0 = vzero(), np.float32(0), vzero(), np.float32(0)
        e1, f1, o1, g1 = vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(0, nb - 1, 2):
            kw, kd, km = bfn(w, p + bsize * b)
            lw, ld, lm = bfn(w, p + bsize * (b + 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + b)
            o0, g0 = step(o0, g0, lw, ld, lm, qx, dx, sx, i + b + 1)
            e1, f1 = step(e1, f1, kw, kd, km, qx, dx, sx, i + 1 * nb + b)
            o1, g1 = step(o1, g1, lw, ld, lm, qx, dx, sx, i + 1 * nb + b + 1)
        if nb % 2:
            kw, kd, km = bfn(w, p + bsize * (nb - 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + nb - 1)
            e1, f1 = step(e1, f1, kw, kd, km, qx, dx, sx, i + 1 * nb + nb - 1)
        out[r, o] = vhsum(e0 + o0) + (f0 + g0)
        out[r + 1, o] = vhsum(e1 + o1) + (f1 + g1)

    @_inline
    def pass3(w, p, qx, dx, sx, i, out, r, o, nb):
        e0, f0, o0, g0 = vzero(), np.float32(0), vzero(), np.float32(0)
        e1, f1, o1, g1 = vzero(), np.float32(0), vzero(), np.float32(0)
        e2, f2, o2, g2 = vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(0, nb - 1, 2):
            kw, kd, km = bfn(w, p + bsize * b)
            lw, ld, lm = bfn(w, p + bsize * (b + 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + b)
            o0, g0 = step(o0, g0, lw, ld, lm, qx, dx, sx, i + b + 1)
            e1, f1 = step(e1, f1, kw, kd, km, qx, dx, sx, i + 1 * nb + b)
            o1, g1 = step(o1, g1, lw, ld, lm, qx, dx, sx, i + 1 * nb + b + 1)
            e2, f2 = step(e2, f2, kw, kd, km, qx, dx, sx, i + 2 * nb + b)
            o2, g2 = step(o2, g2, lw, ld, lm, qx, dx, sx, i + 2 * nb + b + 1)
        if nb % 2:
            kw, kd, km = bfn(w, p + bsize * (nb - 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + nb - 1)
            e1, f1 = step(e1, f1, kw, kd, km, qx, dx, sx, i + 1 * nb + nb - 1)
            e2, f2 = step(e2, f2, kw, kd, km, qx, dx, sx, i + 2 * nb + nb - 1)
        out[r, o] = vhsum(e0 + o0) + (f0 + g0)
        out[r + 1, o] = vhsum(e1 + o1) + (f1 + g1)
        out[r + 2, o] = vhsum(e2 + o2) + (f2 + g2)

    @_inline
    def pass4(w, p, qx, dx, sx, i, out, r, o, nb):
        e0, f0, o0, g0 = vzero(), np.float32(0), vzero(), np.float32(0)
        e1, f1, o1, g1 = vzero(), np.float32(0), vzero(), np.float32(0)
        e2, f2, o2, g2 = vzero(), np.float32(0), vzero(), np.float32(0)
        e3, f3, o3, g3 = vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(0, nb - 1, 2):
            kw, kd, km = bfn(w, p + bsize * b)
            lw, ld, lm = bfn(w, p + bsize * (b + 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + b)
            o0, g0 = step(o0, g0, lw, ld, lm, qx, dx, sx, i + b + 1)
            e1, f1 = step(e1, f1, kw, kd, km, qx, dx, sx, i + 1 * nb + b)
            o1, g1 = step(o1, g1, lw, ld, lm, qx, dx, sx, i + 1 * nb + b + 1)
            e2, f2 = step(e2, f2, kw, kd, km, qx, dx, sx, i + 2 * nb + b)
            o2, g2 = step(o2, g2, lw, ld, lm, qx, dx, sx, i + 2 * nb + b + 1)
            e3, f3 = step(e3, f3, kw, kd, km, qx, dx, sx, i + 3 * nb + b)
            o3, g3 = step(o3, g3, lw, ld, lm, qx, dx, sx, i + 3 * nb + b + 1)
        if nb % 2:
            kw, kd, km = bfn(w, p + bsize * (nb - 1))
            e0, f0 = step(e0, f0, kw, kd, km, qx, dx, sx, i + nb - 1)
            e1, f1 = step(e1, f1, kw, kd, km, qx, dx, sx, i + 1 * nb + nb - 1)
            e2, f2 = step(e2, f2, kw, kd, km, qx, dx, sx, i + 2 * nb + nb - 1)
            e3, f3 = step(e3, f3, kw, kd, km, qx, dx, sx, i + 3 * nb + nb - 1)
        out[r, o] = vhsum(e0 + o0) + (f0 + g0)
        out[r + 1, o] = vhsum(e1 + o1) + (f1 + g1)
        out[r + 2, o] = vhsum(e2 + o2) + (f2 + g2)
        out[r + 3, o] = vhsum(e3 + o3) + (f3 + g3)

    @njit(fastmath=False, _nrt=False)
    def rows(qx2, dx2, sx2, w2, out, lo, hi):
        # out[:, lo:hi] for the quantized activations (the 1-row loop compiled on its own)
        n_rows = qx2.shape[0]
        nb = qx2.shape[1] // 32
        rb = w2.shape[1]
        qx, dx, sx, w = qx2.reshape(-1), dx2.reshape(-1), sx2.reshape(-1), w2.reshape(-1)
        if n_rows == 1:
            for o in range(lo, hi):
                pass1(w, o * rb, qx, dx, sx, 0, out, 0, o, nb)
            return
        for o in range(lo, hi):
            r = 0
            while n_rows - r >= 4:
                pass4(w, o * rb, qx, dx, sx, r * nb, out, r, o, nb)
                r += 4
            if n_rows - r == 3:
                pass3(w, o * rb, qx, dx, sx, r * nb, out, r, o, nb)
            elif n_rows - r == 2:
                pass2(w, o * rb, qx, dx, sx, r * nb, out, r, o, nb)
            elif n_rows - r == 1:
                pass1(w, o * rb, qx, dx, sx, r * nb, out, r, o, nb)

    return rows


_q8_rows_q8_0 = _specialize_q8(_b_q8_0, True, 34)
_q8_rows_q4_0 = _specialize_q8(_b_q4_0, True, 18)
_q8_rows_q4_1 = _specialize_q8(_b_q4_1, False, 20)
_q8_rows_q5_0 = _specialize_q8(_b_q5_0, True, 22)
_q8_rows_q5_1 = _specialize_q8(_b_q5_1, False, 24)
Q8_QTYPES = frozenset((Q8_0, Q4_0, Q4_1, Q5_0, Q5_1))


@_jit
def has_q8_kernel(qtype):
    # qtype in Q8_QTYPES, callable from jitted code too
    return qtype == Q8_0 or qtype == Q4_0 or qtype == Q4_1 or qtype == Q5_0 or qtype == Q5_1


@_jit
def _q8_rows(qx, dx, sx, w, qtype, out, lo, hi):
    if qtype == Q4_1:
        _q8_rows_q4_1(qx, dx, sx, w, out, lo, hi)
    elif qtype == Q8_0:
        _q8_rows_q8_0(qx, dx, sx, w, out, lo, hi)
    elif qtype == Q4_0:
        _q8_rows_q4_0(qx, dx, sx, w, out, lo, hi)
    elif qtype == Q5_0:
        _q8_rows_q5_0(qx, dx, sx, w, out, lo, hi)
    else:
        _q8_rows_q5_1(qx, dx, sx, w, out, lo, hi)


@njit(parallel=True, fastmath=True, cache=True)
def _matmul_q8(x, w, qtype, out):
    # [n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out]; qtype in Q8_QTYPES
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    _check_shapes(n_in, w.shape[1], qtype)
    if out.shape[0] != n_rows or out.shape[1] != n_out:
        raise ValueError("specnb.kernels.quant.matmul_q8: out must be [n_rows, n_out]")
    if not has_q8_kernel(qtype):
        raise ValueError("specnb.kernels.quant.matmul_q8: no int8 kernel for this type:", qtype)
    wc = np.ascontiguousarray(w)
    qx = np.empty((n_rows, n_in), np.int8)
    dx = np.empty((n_rows, n_in // 32), np.float32)
    sx = np.empty((n_rows, n_in // 32), np.float32)
    _quantize_q8(np.ascontiguousarray(x), qx, dx, sx)
    if n_out * n_in <= SERIAL_MAX_ELEMENTS:
        _q8_rows(qx, dx, sx, wc, qtype, out, 0, n_out)
        return
    n_chunks = min(n_out, _N_CHUNKS)
    for c in prange(n_chunks):
        _q8_rows(qx, dx, sx, wc, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks)


def matmul_q8(x: np.ndarray, w: np.ndarray, qtype: int, out: np.ndarray) -> None:
    """[n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out] with the activations rounded to
    int8 (llama.cpp's CPU numerics); types without an int8 kernel go to `matmul`."""
    # (a Python-level switch: one jitted function holding both kernel sets compiles much longer)
    if int(qtype) in Q8_QTYPES:
        _matmul_q8(x, w, int(qtype), out)
    else:
        matmul(x, w, int(qtype), out)


def matmul_ref(x: np.ndarray, w: np.ndarray, qtype: int, n_in: int) -> np.ndarray:
    """NumPy oracle: [n_rows, n_in] x [n_out, row_bytes] -> [n_rows, n_out] (float64 sums)."""
    _check_qtype(qtype)
    wd = gguf.quants.dequantize(np.ascontiguousarray(w, dtype=np.uint8), GGMLQuantizationType(int(qtype)))
    wd = np.asarray(wd, dtype=np.float32).reshape(w.shape[0], n_in)
    return (np.asarray(x, np.float64) @ wd.astype(np.float64).T).astype(np.float32)


# ---- benchmark: python kernels/quant.py ---------------------------------------------------------

def _random_weights(qtype: int, n_out: int, n_in: int, rng) -> np.ndarray:
    # random quant bytes with finite, sane half-float scales in the d / dmin fields (read-only,
    # like the memory-mapped GGUF tensors)
    qk, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    nb = n_in // qk
    if qtype in (F32, F16, BF16):
        wf = rng.standard_normal((n_out, n_in)).astype(np.float32)
        w = {F32: wf, F16: wf.astype(np.float16), BF16: (wf.view(np.uint32) >> 16).astype(np.uint16)}[qtype]
        w = np.ascontiguousarray(w).view(np.uint8).reshape(n_out, -1)
    else:
        w = rng.integers(0, 256, (n_out, nb, size), dtype=np.uint8)
        half_fields = {Q8_0: (0,), Q4_0: (0,), Q5_0: (0,), Q4_1: (0, 2), Q5_1: (0, 2),
                       Q4_K: (0, 2), Q6_K: (208,)}[qtype]
        for off in half_fields:
            h = (rng.uniform(0.5, 1.5, (n_out, nb)) * rng.choice([-1, 1], (n_out, nb)) / qk)
            w[:, :, off:off + 2] = h.astype(np.float16).view(np.uint8).reshape(n_out, nb, 2)
        w = w.reshape(n_out, nb * size)
    w.setflags(write=False)
    return w


def _bench_one(f, args, reps):
    import time
    f(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _main():
    import time
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    print("checking every type against gguf.quants.dequantize and matmul_ref ...")
    for qt in sorted(SUPPORTED_QTYPES, key=qtype_name):
        n_in = 512 if qt in (Q4_K, Q6_K) else 96
        w = _random_weights(qt, 37, n_in, rng)
        x = rng.standard_normal((5, n_in)).astype(np.float32)
        ref = np.asarray(gguf.quants.dequantize(w, GGMLQuantizationType(qt)), np.float32).reshape(37, n_in)
        exact = np.array_equal(dequantize(w, qt, n_in).view(np.uint32), ref.view(np.uint32))
        out = np.empty((5, 37), np.float32)
        matmul(x, w, qt, out)
        scale = np.abs(x) @ np.abs(ref).T
        err = float(np.max(np.abs(out - matmul_ref(x, w, qt, n_in)) / scale))
        one = np.empty((1, 37), np.float32)
        matmul(x[3:4], w, qt, one)
        inv = np.array_equal(one[0].view(np.uint32), out[3].view(np.uint32))
        print(f"  {qtype_name(qt):5s} dequantize bit-exact: {exact}  matmul max rel err {err:.1e}  "
              f"batch-invariant: {inv}")
    print(f"  (compile / cache load and checks: {time.perf_counter() - t0:.1f} s)")

    print(f"\nthreads: {numba.get_num_threads()} ({numba.threading_layer()}); medians; "
          f"ratio = time / time at n_rows=1")
    print(f"{'type':5s} {'n_out x n_in':>13s} {'rows':>4s} {'us':>9s} {'GFLOP/s':>8s} {'GB/s':>6s} {'ratio':>6s}")
    for qt, n_out, n_in in ((Q4_1, 192, 576), (Q4_1, 576, 576), (Q4_1, 1536, 576), (Q4_1, 576, 1536),
                            (Q8_0, 49152, 576)):
        w = _random_weights(qt, n_out, n_in, rng)
        t1 = None
        for n_rows in (1, 2, 3, 5, 9, 17):
            x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
            out = np.empty((n_rows, n_out), np.float32)
            reps = max(5, min(300, int(2e8 / (n_out * n_in * (n_rows + 4)))))
            t = _bench_one(matmul, (x, w, qt, out), reps)
            t1 = t if t1 is None else t1
            print(f"{qtype_name(qt):5s} {f'{n_out}x{n_in}':>13s} {n_rows:4d} {t * 1e6:9.1f} "
                  f"{2 * n_rows * n_out * n_in / t / 1e9:8.1f} {w.nbytes / t / 1e9:6.1f} {t / t1:6.2f}")


if __name__ == "__main__":
    # run the package's copy of this module: Numba's cache files are shared by both, and the types
    # they pickle must name specnb.kernels.quant, not __main__
    from specnb.kernels import quant as _quant
    _quant._main()


# ---- CUDA ------------------------------------------------------------------------------------
# The quantized matrix products on a GPU (numba-cuda), twins of `matmul` / `dequant_row` above.
# (llama.cpp: ggml-cuda's mmvq.cu / dequantize.cuh, with float32 activations instead of q8_1.)
#
# Weights stay raw GGUF blocks on the device: one flat buffer per matrix holding the n_out rows
# back to back, each row padded to a multiple of 4 bytes (`upload_weight`), read through three
# views of the same memory: uint32 words (the quants, 4 bytes per load), float16 (the block
# scales d, m, dmin) and float32 (F32 weights).
#
# A "slot" is the unit of work of one thread: the K weights it can decode from one 4-byte word of
# quants (plus its block's scales):
#
#   type              K  slots/block  slot q of block b holds elements (i = 0..3)
#   F32 / F16 / BF16  1      1        the element s itself
#   Q8_0              4      8        32b + 4q + i
#   Q4_0 Q4_1 Q5_*    8      4        32b + 4q + i (low nibbles), 32b + 16 + 4q + i (high)
#   Q4_K              8     32        256b + 64c + 4u + i (low), + 32 (high); c = q // 8, u = q % 8
#   Q6_K              8     32        256b + 32(4h + t) + 4u + i (low), + 64 (high);
#                                     h = q // 16, t = (q // 8) % 2, u = q % 8
#
# The activations are first permuted into the same order, xp[r, k, s] = x[r, elem(s, k)], so that
# consecutive threads (consecutive slots) read consecutive floats: every load of the hot loop is
# coalesced. (For K = 1 the permutation is the identity and x is used as it is.)
#
# matmul: thread-block layout. A block of TG * R threads computes R output rows; the TG threads of
# a row group stride over the row's S slots (thread t takes slots t, t + TG, ...). For each slot a
# thread decodes its K weights once into registers and multiplies them with CUDA_ROWS_PER_PASS (8)
# activation rows kept in local accumulators; more rows take further passes over the same weight
# row (from L1/L2). A thread decodes 4 slots back to back before their multiplications, so that
# the loads of 4 slots are in flight together. The TG partial sums of a (row, output) pair are
# then added by a fixed shared-memory tree. The order of every (row, output) sum depends on (TG,
# the weight shape) only, never on n_rows or on the position of the row in the batch: a row's
# result is bit-identical in any batch.
# TG and R are picked from the weight shape alone (`mm_config`).
#
# Small integers become floats through their bits (2**23 + q, minus 2**23: exact, and no slow
# integer-to-float conversion), and the dequantized weights equal the CPU's bit for bit.
#
# Kernels hold no Python objects, raise nothing and print nothing. Two libdevice calls are swapped
# for NumPy twins under the CUDA simulator (where libdevice is not implemented).
import numba as _cu_numba  # noqa: E402
from numba import cuda as _cu_cuda  # noqa: E402

_CU_SIM = bool(_cu_numba.config.ENABLE_CUDASIM)
if _CU_SIM:
    def _cu_fmul(a, b):
        # a * b rounded once (never fused into a following add)
        return np.float32(a) * np.float32(b)

    import struct as _cu_struct
    _CU_I32, _CU_F32 = _cu_struct.Struct("<i"), _cu_struct.Struct("<f")

    def _cu_as_f32(bits):
        # float32 with the bit pattern of the int32 `bits`
        return np.float32(_CU_F32.unpack(_CU_I32.pack(int(bits)))[0])

else:
    from numba.cuda import libdevice as _cu_libdevice
    _cu_fmul = _cu_libdevice.fmul_rn
    _cu_as_f32 = _cu_libdevice.int_as_float

_cu_f32 = np.float32
# array indices as unsigned: Numba then skips its negative-index wraparound (a plain int under
# the simulator, where it only costs time)
_cu_ix = int if _CU_SIM else np.uint64
_cu_u32 = np.uint32
_CU_U15, _CU_U16, _CU_U255 = np.uint32(15), np.uint32(16), np.uint32(255)
_CU_MAGIC = np.uint32(0x4B000000)   # float32 bits of 2**23: (it | b) is 2**23 + b for b < 2**23

CUDA_ROWS_PER_PASS = 8      # activation rows that share one decode of a weight slot
CUDA_SLOTS_PER_STEP = 4     # slots a thread decodes back to back (their loads overlap)
CUDA_MAX_THREADS = 1024

# Device functions, inlined into the kernels. Under the simulator they stay plain Python functions:
# it runs them the same, and its own device-function wrapper costs ~40 us a call.
_cu_dev = (lambda f: f) if _CU_SIM else _cu_cuda.jit(device=True, inline=True)


@_cu_dev
def _cu_w4(wq, p):
    # uint32 <- the 4 bytes at byte p (p % 4 == 0)
    return wq[_cu_ix(p >> 2)]


@_cu_dev
def _cu_w2(wq, p):
    # uint32 <- the 4 bytes at byte p (p % 2 == 0): two aligned words, funnel-shifted
    i = p >> 2
    sh = _cu_u32((p & 2) * 8)
    return _cu_u32((wq[_cu_ix(i)] >> sh) | ((wq[_cu_ix(i + 1)] << _CU_U16) << (_CU_U16 - sh)))


@_cu_dev
def _cu_half(wh, p):
    # float32 <- the float16 at byte p (p % 2 == 0)
    return _cu_f32(wh[_cu_ix(p >> 1)])


@_cu_dev
def _cu_byte(wq, p):
    # uint32 <- the byte at p
    return _cu_u32((wq[_cu_ix(p >> 2)] >> _cu_u32((p & 3) * 8)) & _CU_U255)


@_cu_dev
def _cu_nib(v, j):
    # uint32 <- nibble j (0..7) of the word v
    return _cu_u32((v >> _cu_u32(4 * j)) & _CU_U15)


@_cu_dev
def _cu_bits(v, j, n):
    # uint32 <- n bits of v from bit j
    return _cu_u32((v >> _cu_u32(j)) & _cu_u32((1 << n) - 1))


@_cu_dev
def _cu_fl(b, off):
    # float32(b - off), exactly, for 0 <= b < 2**23 and small off: 2**23 + b is built from its
    # bits and 2**23 + off subtracted (one float op instead of a slow integer->float convert)
    return _cu_as_f32(np.int32(_CU_MAGIC | b)) - _cu_f32(8388608 + off)


# ---- slots: decode the K weights of slot s of the row starting at byte `base` into wv ------------
# Each weight is computed with the float32 operations, in the order, of the CPU dequantization
# (d * (q - 8), d * q + m, ...), so wv holds exactly the values gguf.quants.dequantize gives.

@_cu_dev
def _cu_slot_f32(wq, wh, wf, base, s, wv, j):
    wv[j] = wf[_cu_ix((base >> 2) + s)]


@_cu_dev
def _cu_slot_f16(wq, wh, wf, base, s, wv, j):
    wv[j] = _cu_half(wh, base + 2 * s)


@_cu_dev
def _cu_slot_bf16(wq, wh, wf, base, s, wv, j):
    p = base + 2 * s
    wv[j] = _cu_as_f32(np.int32(_cu_u32((wq[_cu_ix(p >> 2)] >> _cu_u32((p & 2) * 8)) << _CU_U16)))


@_cu_dev
def _cu_slot_q8_0(wq, wh, wf, base, s, wv, j):
    p = base + 34 * (s >> 3)
    d = _cu_half(wh, p)
    v = _cu_w2(wq, p + 2 + 4 * (s & 7))
    for i in range(4):                 # int8 q: (q + 128) is the byte with its top bit flipped
        wv[j + i] = _cu_fl(_cu_bits(v, 8 * i, 8) ^ _cu_u32(128), 128) * d


@_cu_dev
def _cu_slot_q4_0(wq, wh, wf, base, s, wv, j):
    p = base + 18 * (s >> 2)
    d = _cu_half(wh, p)
    v = _cu_w2(wq, p + 2 + 4 * (s & 3))
    for i in range(4):
        wv[j + i] = d * _cu_fl(_cu_nib(v, 2 * i), 8)
        wv[j + 4 + i] = d * _cu_fl(_cu_nib(v, 2 * i + 1), 8)


@_cu_dev
def _cu_slot_q4_1(wq, wh, wf, base, s, wv, j):
    p = base + 20 * (s >> 2)
    d = _cu_half(wh, p)
    m = _cu_half(wh, p + 2)
    v = _cu_w4(wq, p + 4 + 4 * (s & 3))
    for i in range(4):
        wv[j + i] = _cu_fmul(d, _cu_fl(_cu_nib(v, 2 * i), 0)) + m
        wv[j + 4 + i] = _cu_fmul(d, _cu_fl(_cu_nib(v, 2 * i + 1), 0)) + m


@_cu_dev
def _cu_q5(v, qh, q, i, hi):
    # uint32 <- the 5-bit value of element i of slot q: nibble (low or high) | bit 4 from qh
    return (_cu_nib(v, 2 * i + hi) | (_cu_bits(qh, 16 * hi + 4 * q + i, 1) << _cu_u32(4)))


@_cu_dev
def _cu_slot_q5_0(wq, wh, wf, base, s, wv, j):
    p = base + 22 * (s >> 2)
    q = s & 3
    d = _cu_half(wh, p)
    qh = _cu_w2(wq, p + 2)
    v = _cu_w2(wq, p + 6 + 4 * q)
    for i in range(4):
        wv[j + i] = d * _cu_fl(_cu_q5(v, qh, q, i, 0), 16)
        wv[j + 4 + i] = d * _cu_fl(_cu_q5(v, qh, q, i, 1), 16)


@_cu_dev
def _cu_slot_q5_1(wq, wh, wf, base, s, wv, j):
    p = base + 24 * (s >> 2)
    q = s & 3
    d = _cu_half(wh, p)
    m = _cu_half(wh, p + 2)
    qh = _cu_w4(wq, p + 4)
    v = _cu_w4(wq, p + 8 + 4 * q)
    for i in range(4):
        wv[j + i] = _cu_fmul(d, _cu_fl(_cu_q5(v, qh, q, i, 0), 0)) + m
        wv[j + 4 + i] = _cu_fmul(d, _cu_fl(_cu_q5(v, qh, q, i, 1), 0)) + m


@_cu_dev
def _cu_k4_byte(sc0, sc1, sc2, j):
    # byte j (0..11) of the 12 packed Q4_K scale bytes held in three words
    w = sc0 if j < 4 else (sc1 if j < 8 else sc2)
    return _cu_bits(w, 8 * (j & 3), 8)


@_cu_dev
def _cu_k4_scale_min(sc0, sc1, sc2, sb):
    # (scale, min) of sub-block sb (0..7), 6 bits each (ggml's get_scale_min_k4)
    if sb < 4:
        sc = _cu_k4_byte(sc0, sc1, sc2, sb) & _cu_u32(63)
        mn = _cu_k4_byte(sc0, sc1, sc2, sb + 4) & _cu_u32(63)
        return sc, mn
    hi = _cu_k4_byte(sc0, sc1, sc2, sb + 4)
    sc = (hi & _CU_U15) | ((_cu_k4_byte(sc0, sc1, sc2, sb - 4) >> _cu_u32(6)) << _cu_u32(4))
    mn = (hi >> _cu_u32(4)) | ((_cu_k4_byte(sc0, sc1, sc2, sb) >> _cu_u32(6)) << _cu_u32(4))
    return _cu_u32(sc), _cu_u32(mn)


@_cu_dev
def _cu_slot_q4_k(wq, wh, wf, base, s, wv, j):
    p = base + 144 * (s >> 5)
    q = s & 31
    c = q >> 3
    d = _cu_half(wh, p)
    dmin = _cu_half(wh, p + 2)
    sc0 = _cu_w4(wq, p + 4)
    sc1 = _cu_w4(wq, p + 8)
    sc2 = _cu_w4(wq, p + 12)
    v = _cu_w4(wq, p + 16 + 4 * q)
    sc, mn = _cu_k4_scale_min(sc0, sc1, sc2, 2 * c)
    dl = d * _cu_fl(sc, 0)
    ml = dmin * _cu_fl(mn, 0)
    for i in range(4):
        wv[j + i] = _cu_fmul(dl, _cu_fl(_cu_nib(v, 2 * i), 0)) - ml
    sc, mn = _cu_k4_scale_min(sc0, sc1, sc2, 2 * c + 1)
    dl = d * _cu_fl(sc, 0)
    ml = dmin * _cu_fl(mn, 0)
    for i in range(4):
        wv[j + 4 + i] = _cu_fmul(dl, _cu_fl(_cu_nib(v, 2 * i + 1), 0)) - ml


@_cu_dev
def _cu_slot_q6_k(wq, wh, wf, base, s, wv, j):
    p = base + 210 * (s >> 5)
    q = s & 31
    h = q >> 4
    t = (q >> 3) & 1
    u = q & 7
    ql = _cu_w2(wq, p + 4 * q)
    qh = _cu_w2(wq, p + 128 + 32 * h + 4 * u)
    d = _cu_half(wh, p + 208)
    sb = 4 * h + t                     # sub-block of the low nibbles; + 2 for the high ones
    half16 = 1 if u >= 4 else 0        # elements 16..31 of a sub-block use its second scale
    d0 = d * _cu_fl(_cu_byte(wq, p + 192 + 2 * sb + half16) ^ _cu_u32(128), 128)
    d1 = d * _cu_fl(_cu_byte(wq, p + 192 + 2 * (sb + 2) + half16) ^ _cu_u32(128), 128)
    for i in range(4):
        lo = _cu_nib(ql, 2 * i) | (_cu_bits(qh, 8 * i + 2 * t, 2) << _cu_u32(4))
        hi = _cu_nib(ql, 2 * i + 1) | (_cu_bits(qh, 8 * i + 2 * t + 4, 2) << _cu_u32(4))
        wv[j + i] = d0 * _cu_fl(lo, 32)
        wv[j + 4 + i] = d1 * _cu_fl(hi, 32)


# ---- element order of the slots (the activation permutation) -----------------------------------

@_cu_dev
def _cu_elem_1(s, k):
    return s


@_cu_dev
def _cu_elem_q8_0(s, k):
    return 4 * s + k


@_cu_dev
def _cu_elem_q4(s, k):
    # Q4_0 / Q4_1 / Q5_0 / Q5_1
    return 32 * (s >> 2) + 4 * (s & 3) + (k & 3) + (16 if k >= 4 else 0)


@_cu_dev
def _cu_elem_q4_k(s, k):
    q = s & 31
    return 256 * (s >> 5) + 64 * (q >> 3) + 4 * (q & 7) + (k & 3) + (32 if k >= 4 else 0)


@_cu_dev
def _cu_elem_q6_k(s, k):
    q = s & 31
    return (256 * (s >> 5) + 32 * (4 * (q >> 4) + ((q >> 3) & 1)) + 4 * (q & 7) + (k & 3)
            + (64 if k >= 4 else 0))


# ---- the kernels, one set per type (compiled with the slot function as a constant) -------------

def _cu_cuda_kernels(slot, elem, K):
    RC = CUDA_ROWS_PER_PASS
    UK = CUDA_SLOTS_PER_STEP * K

    @_cu_dev
    def fma_rows(acc, xp, wv, j, s, r0, n_rows, S):
        # acc[rr] += xp[r0 + rr, :, s] . wv[j : j + K] for the rows of this pass, k in order
        for rr in range(RC):
            if r0 + rr >= n_rows:
                break
            a = acc[rr]
            xb = (r0 + rr) * K * S + s
            for k in range(K):
                a = _cu_cuda.fma(xp[_cu_ix(xb + k * S)], wv[j + k], a)
            acc[rr] = a

    @_cu_cuda.jit
    def mm(wq, wh, wf, row_bytes, n_out, xp, n_rows, S, TG, bias, flags, out):
        # out[r, o] (=, += or + bias) sum_s sum_k xp[r, k, s] * w[o, elem(s, k)]
        # wq/wh/wf: views of the weight buffer; xp: [n_rows, K, S] flat; out: [n_rows, n_out] flat;
        # flags: 1 = add bias[o], 2 = accumulate into out (out += product)
        tid = _cu_cuda.threadIdx.x
        T = _cu_cuda.blockDim.x
        g = tid // TG                   # output row of this thread within the block
        t = tid - g * TG                # this thread's place among the row's TG threads
        o = _cu_cuda.blockIdx.x * (T // TG) + g
        live = o < n_out and g < T // TG
        base = o * row_bytes
        sh = _cu_cuda.shared.array(0, dtype=_cu_numba.float32)      # [RC, T]
        acc = _cu_cuda.local.array(RC, dtype=_cu_numba.float32)
        wv = _cu_cuda.local.array(UK, dtype=_cu_numba.float32)
        p2 = 1
        while p2 < TG:
            p2 *= 2
        for r0 in range(0, n_rows, RC):
            for rr in range(RC):
                acc[rr] = _cu_f32(0)
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
                    sh[_cu_ix(rr * T + tid)] = acc[rr]
                _cu_cuda.syncthreads()
                stride = p2 // 2
                while stride > 0:
                    if t < stride and t + stride < TG:
                        for rr in range(RC):
                            sh[_cu_ix(rr * T + tid)] += sh[_cu_ix(rr * T + tid + stride)]
                    _cu_cuda.syncthreads()
                    stride //= 2
                for rr in range(RC):
                    acc[rr] = sh[_cu_ix(rr * T + g * TG)]
            if live:
                for rr in range(RC):    # thread t writes rows t, t + TG, ... of the pass
                    r = r0 + rr
                    if rr % TG == t and r < n_rows:
                        v = acc[rr]
                        if flags & 1:
                            v = v + bias[_cu_ix(o)]
                        if flags & 2:
                            v = out[_cu_ix(r * n_out + o)] + v
                        out[_cu_ix(r * n_out + o)] = v
            if TG > 1:
                _cu_cuda.syncthreads()     # sh is reused by the next pass

    @_cu_cuda.jit
    def permute(x, n_in, n_rows, S, xp):
        # xp[r, k, s] = x[r, elem(s, k)]   (flat; a grid-stride loop)
        for i in range(_cu_cuda.grid(1), n_rows * n_in, _cu_cuda.gridsize(1)):
            r = i // n_in
            j = i - r * n_in
            k = j // S
            s = j - k * S
            xp[_cu_ix(i)] = x[_cu_ix(r * n_in + elem(s, k))]

    @_cu_cuda.jit
    def rows(wq, wh, wf, row_bytes, ids, S, n_in, out):
        # out[r, :] = row ids[r] of the weight, dequantized (the embedding lookup)
        r = _cu_cuda.blockIdx.x
        base = ids[_cu_ix(r)] * row_bytes
        wv = _cu_cuda.local.array(K, dtype=_cu_numba.float32)
        for s in range(_cu_cuda.threadIdx.x, S, _cu_cuda.blockDim.x):
            slot(wq, wh, wf, base, s, wv, 0)
            for k in range(K):
                out[_cu_ix(r * n_in + elem(s, k))] = wv[k]

    return mm, permute, rows


_CU_CUDA_TYPES = {          # qtype -> (slot, elem, K)
    F32: (_cu_slot_f32, _cu_elem_1, 1), F16: (_cu_slot_f16, _cu_elem_1, 1),
    BF16: (_cu_slot_bf16, _cu_elem_1, 1),
    Q8_0: (_cu_slot_q8_0, _cu_elem_q8_0, 4),
    Q4_0: (_cu_slot_q4_0, _cu_elem_q4, 8), Q4_1: (_cu_slot_q4_1, _cu_elem_q4, 8),
    Q5_0: (_cu_slot_q5_0, _cu_elem_q4, 8), Q5_1: (_cu_slot_q5_1, _cu_elem_q4, 8),
    Q4_K: (_cu_slot_q4_k, _cu_elem_q4_k, 8), Q6_K: (_cu_slot_q6_k, _cu_elem_q6_k, 8),
}
_CU_CUDA_KERNELS = {}


def cuda_kernels(qtype: int):
    """(K, matmul kernel, permute kernel, rows kernel) of one type (built on first use)."""
    _check_qtype(qtype)
    qtype = int(qtype)
    if qtype not in _CU_CUDA_KERNELS:
        slot, elem, K = _CU_CUDA_TYPES[qtype]
        _CU_CUDA_KERNELS[qtype] = (K,) + _cu_cuda_kernels(slot, elem, K)
    return _CU_CUDA_KERNELS[qtype]


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
        self.buf = _cu_cuda.to_device(host, stream=stream)
        self.wq = self.buf.view(np.uint32)
        self.wh = self.buf.view(np.float16)
        self.wf = self.buf.view(np.float32)
        self.K = _CU_CUDA_TYPES[self.qtype][2]
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
    elif _CU_SIM:
        return 1, 32
    else:
        S = n_in // _CU_CUDA_TYPES[int(qtype)][2]
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
            scratch = _cu_cuda.device_array(n, np.float32, stream=stream)
        xp = scratch[:n]
        grid = (1, 1) if _CU_SIM else ((n + 255) // 256, 256)
        permute[grid[0], grid[1], stream](xf, w.n_in, n_rows, w.S, xp)
    else:
        xp = xf
    flags = (1 if bias is not None else 0) | (2 if accumulate else 0)
    b = bias if bias is not None else xp[:1]
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


def matmul_bandwidth(shapes=((4096, 4096), (4096, 14336), (14336, 4096)),
                     qtypes=(Q4_0, Q8_0, Q4_K), n_rows: int = 1, reps: int = 50,
                     peak_gbs: float = 4800.0, seed: int = 0) -> list:
    """Time matmul_cuda on random weights of each (n_out, n_in) and type with CUDA events;
    -> [{type, n_out, n_in, n_rows, us, gbs, frac_peak}] where gbs counts the GGUF weight bytes
    read once per call. (A GPU only: under the simulator this would take hours.)"""
    rng = np.random.default_rng(seed)
    res = []
    for qt in qtypes:
        qt = int(qt)
        for n_out, n_in in shapes:
            w = upload_weight(_random_weights(qt, n_out, n_in, rng), qt, n_in)
            x = _cu_cuda.to_device(rng.standard_normal((n_rows, n_in)).astype(np.float32))
            out = _cu_cuda.device_array((n_rows, n_out), np.float32)
            scratch = _cu_cuda.device_array(n_rows * n_in, np.float32)
            matmul_cuda(x, w, out, scratch=scratch)          # compile, warm up
            _cu_cuda.synchronize()
            e0, e1 = _cu_cuda.event(), _cu_cuda.event()
            e0.record()
            for _ in range(reps):
                matmul_cuda(x, w, out, scratch=scratch)
            e1.record()
            e1.synchronize()
            t = e0.elapsed_time(e1) / 1e3 / reps
            gbs = w.nbytes / t / 1e9
            res.append({"type": qtype_name(qt), "n_out": n_out, "n_in": n_in, "n_rows": n_rows,
                        "us": t * 1e6, "gbs": gbs, "frac_peak": gbs / peak_gbs})
            del w, x, out, scratch
    return res
