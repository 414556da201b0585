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
# small helpers of the hot loops: always inlined by LLVM (else a call per row or block, with
# reference counting of every array view passed); not cached on their own
_inline = njit(fastmath=False, forceinline=True)

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
# Vec(float32, 8) / Vec(int32, 8) are LLVM <8 x float> / <8 x i32> values in jitted code. Loads
# and stores take a 1-D C-contiguous array and an element index (a byte offset for uint8 arrays);
# they do no bounds checks, so callers validate shapes first. Float ops are plain IEEE (no
# fast-math flags, no contraction) except vfma; + - * & | >> << work on vectors and scalars.

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
_i32 = ir.IntType(32)
_V8F = ir.VectorType(ir.FloatType(), 8)
_V8I = ir.VectorType(_i32, 8)


def _is_1d_c(a, dtype):
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == dtype


def _ptr(context, builder, aryty, ary, idx, vty):
    # pointer to element idx of a 1-D array, as a pointer to vector type vty
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [idx], inbounds=True), vty.as_pointer())


def _splat(builder, s, vty):
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), s, _i32(0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(_i32, vty.count), [0] * vty.count))


@intrinsic
def vload(typingctx, a, i):
    """f32x8 <- a[i : i+8] of a float32 array."""
    if _is_1d_c(a, types.float32) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V8F), align=4)
        return f32x8(a, i), codegen


@intrinsic
def vstore(typingctx, a, i, v):
    """a[i : i+8] <- v, a float32 array."""
    if _is_1d_c(a, types.float32) and isinstance(i, types.Integer) and v == f32x8:
        def codegen(context, builder, sig, args):
            builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], _V8F), align=4)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen


def _byte_load(nbytes, signed):
    # i32x8 <- 8 little-endian integers of `nbytes` bytes each, at byte offset i of a uint8 array
    @intrinsic
    def load(typingctx, a, i):
        if _is_1d_c(a, types.uint8) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                vty = ir.VectorType(ir.IntType(8 * nbytes), 8)
                data = context.make_array(sig.args[0])(context, builder, args[0]).data
                p = builder.bitcast(builder.gep(data, [args[1]], inbounds=True), vty.as_pointer())
                v = builder.load(p, align=1)
                if nbytes == 4:
                    return v
                return (builder.sext if signed else builder.zext)(v, _V8I)
            return i32x8(a, i), codegen
    return load


vload_u8 = _byte_load(1, False)    # 8 x uint8 -> i32x8
vload_i8 = _byte_load(1, True)     # 8 x int8  -> i32x8
vload_u16 = _byte_load(2, False)   # 8 x uint16 -> i32x8
vload_u32 = _byte_load(4, False)   # 8 x uint32 -> i32x8 (bits)


@intrinsic
def vzero(typingctx):
    """f32x8 of +0.0."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_V8F, None)
    return f32x8(), codegen


@intrinsic
def vfloat(typingctx, v):
    """i32x8 -> f32x8 by value (exact for |v| < 2**24)."""
    if v == i32x8:
        def codegen(context, builder, sig, args):
            return builder.sitofp(args[0], _V8F)
        return f32x8(v), codegen


@intrinsic
def vbitcast(typingctx, v):
    """i32x8 -> f32x8 reinterpreting the bits."""
    if v == i32x8:
        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _V8F)
        return f32x8(v), codegen


@intrinsic
def vbits(typingctx, word, j0):
    """i32x8 whose lane l is bit (j0 + l) of the integer `word`."""
    if isinstance(word, types.Integer) and isinstance(j0, types.Integer):
        def codegen(context, builder, sig, args):
            w = _splat(builder, context.cast(builder, args[0], sig.args[0], types.int32), _V8I)
            j = _splat(builder, context.cast(builder, args[1], sig.args[1], types.int32), _V8I)
            j = builder.add(j, ir.Constant(_V8I, list(range(8))))
            return builder.and_(builder.lshr(w, j), ir.Constant(_V8I, [1] * 8))
        return i32x8(word, j0), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c lane-wise (llvm.fmuladd: one fused op where the CPU has FMA)."""
    if a == f32x8 and b == f32x8 and c == f32x8:
        def codegen(context, builder, sig, args):
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_V8F, [_V8F] * 3), "llvm.fmuladd.v8f32")
            return builder.call(fn, args)
        return f32x8(a, b, c), codegen


@intrinsic
def vhsum(typingctx, v):
    """float32 sum of the 8 lanes in a fixed order: ((0+4)+(2+6)) + ((1+5)+(3+7))."""
    if v == f32x8:
        def codegen(context, builder, sig, args):
            def part(x, lo, n):
                return builder.shuffle_vector(x, x, ir.Constant(ir.VectorType(_i32, n),
                                                                list(range(lo, lo + n))))
            s4 = builder.fadd(part(args[0], 0, 4), part(args[0], 4, 4))
            s2 = builder.fadd(part(s4, 0, 2), part(s4, 2, 2))
            return builder.fadd(builder.extract_element(s2, _i32(0)),
                                builder.extract_element(s2, _i32(1)))
        return types.float32(v), codegen


@intrinsic
def vsplat(typingctx, s):
    """f32x8 with every lane = s."""
    if isinstance(s, (types.Float, types.Integer)):
        def codegen(context, builder, sig, args):
            return _splat(builder, context.cast(builder, args[0], sig.args[0], types.float32), _V8F)
        return f32x8(s), codegen


def _vec_unary(name, vt_in, vt_out, build):
    @intrinsic
    def op(typingctx, v):
        if v == vt_in:
            def codegen(context, builder, sig, args):
                return build(builder, args[0])
            return vt_out(v), codegen
    op.__name__ = name
    return op


def _call_intrinsic(builder, name, vty, args):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [a.type for a in args]), name)
    return builder.call(fn, args)


vabs = _vec_unary("vabs", f32x8, f32x8, lambda b, v: _call_intrinsic(b, "llvm.fabs.v8f32", _V8F, [v]))
# nearest integer, ties to even (as llama.cpp's AVX2 quantize_row_q8_0)
vrint = _vec_unary("vrint", f32x8, i32x8,
                   lambda b, v: b.fptosi(_call_intrinsic(b, "llvm.rint.v8f32", _V8F, [v]), _V8I))


@intrinsic
def vmax(typingctx, a, b):
    """lane-wise max of two f32x8 (no nans here)."""
    if a == f32x8 and b == f32x8:
        def codegen(context, builder, sig, args):
            return _call_intrinsic(builder, "llvm.maxnum.v8f32", _V8F, list(args))
        return f32x8(a, b), codegen


@intrinsic
def vhmax(typingctx, v):
    """float32 max of the 8 lanes."""
    if v == f32x8:
        def codegen(context, builder, sig, args):
            return _call_intrinsic(builder, "llvm.vector.reduce.fmax.v8f32", ir.FloatType(), [args[0]])
        return types.float32(v), codegen


@intrinsic
def vhsum_i(typingctx, v):
    """int64 sum of the 8 lanes of an i32x8."""
    if v == i32x8:
        def codegen(context, builder, sig, args):
            s = _call_intrinsic(builder, "llvm.vector.reduce.add.v8i32", _i32, [args[0]])
            return builder.sext(s, ir.IntType(64))
        return types.int64(v), codegen


@intrinsic
def vstore_i8(typingctx, a, i, v):
    """a[i : i+8] <- the 8 lanes of an i32x8 truncated to bytes (an int8 array)."""
    if _is_1d_c(a, types.int8) and isinstance(i, types.Integer) and v == i32x8:
        def codegen(context, builder, sig, args):
            v8 = ir.VectorType(ir.IntType(8), 8)
            builder.store(builder.trunc(args[2], v8), _ptr(context, builder, sig.args[0], args[0], args[1], v8), align=1)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen


# 32 bytes as one value, for the int8 dot products of matmul_q8
i8x32 = Vec(types.int8, 32)
_V32B = ir.VectorType(ir.IntType(8), 32)
_HOST_AVX2 = bool(llvm_binding.get_host_cpu_features().get("avx2", False))


def _is_bytes(a):
    return (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C"
            and a.dtype in (types.uint8, types.int8))


@intrinsic
def vload_b32(typingctx, a, i):
    """i8x32 <- the 32 bytes a[i : i+32] of a uint8 or int8 array."""
    if _is_bytes(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V32B), align=1)
        return i8x32(a, i), codegen


@intrinsic
def vnibbles(typingctx, a, i):
    """i8x32 <- the 16 bytes a[i : i+16] split into nibbles: lanes 0..15 the low nibbles, lanes
    16..31 the high ones (the Q4/Q5 element order)."""
    if _is_bytes(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            v16 = ir.VectorType(ir.IntType(8), 16)
            q = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], v16), align=1)
            lo = builder.and_(q, ir.Constant(v16, [15] * 16))
            hi = builder.lshr(q, ir.Constant(v16, [4] * 16))
            return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_i32, 32), list(range(32))))
        return i8x32(a, i), codegen


@intrinsic
def vbits32(typingctx, word):
    """i8x32 whose lane j is bit j of the integer `word`."""
    if isinstance(word, types.Integer):
        def codegen(context, builder, sig, args):
            v32 = ir.VectorType(_i32, 32)
            w = _splat(builder, context.cast(builder, args[0], sig.args[0], types.int32), v32)
            b = builder.and_(builder.lshr(w, ir.Constant(v32, list(range(32)))), ir.Constant(v32, [1] * 32))
            return builder.trunc(b, _V32B)
        return i8x32(word), codegen


def _dot_bytes_codegen(signed_a):
    # i32x8 lane l = sum_k a[4l+k] * b[4l+k] (k = 0..3), b signed; a signed or unsigned (< 128).
    # With AVX2: pmaddubsw + pmaddwd as llama.cpp (for signed a: |a| and b with a's sign, its
    # mul_sum_i8_pairs); elsewhere plain widening IR. No case here saturates pmaddubsw, so both
    # give the same integers.
    def codegen(context, builder, sig, args):
        a, b = args
        if _HOST_AVX2:
            v16s = ir.VectorType(ir.IntType(16), 16)
            if signed_a:
                psign = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(_V32B, [_V32B, _V32B]), "llvm.x86.avx2.psign.b")
                a, b = builder.call(psign, [a, a]), builder.call(psign, [b, a])
            maddubs = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(v16s, [_V32B, _V32B]), "llvm.x86.avx2.pmadd.ub.sw")
            madd = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_V8I, [v16s, v16s]), "llvm.x86.avx2.pmadd.wd")
            return builder.call(madd, [builder.call(maddubs, [a, b]), ir.Constant(v16s, [1] * 16)])
        v32 = ir.VectorType(_i32, 32)
        p = builder.mul(builder.sext(a, v32) if signed_a else builder.zext(a, v32), builder.sext(b, v32))
        parts = [builder.shuffle_vector(p, p, ir.Constant(_V8I, list(range(k, 32, 4)))) for k in range(4)]
        return builder.add(builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3]))
    return codegen


@intrinsic
def vdot_u8i8(typingctx, a, b):
    """i32x8: sums of 4 adjacent products, a's lanes read as unsigned (must be < 128)."""
    if a == i8x32 and b == i8x32:
        return i32x8(a, b), _dot_bytes_codegen(False)


@intrinsic
def vdot_i8i8(typingctx, a, b):
    """i32x8: sums of 4 adjacent products of signed bytes (b must not hold -128)."""
    if a == i8x32 and b == i8x32:
        return i32x8(a, b), _dot_bytes_codegen(True)


@intrinsic
def _f32_from_bits(typingctx, u):
    """float32 with the bit pattern of the low 32 bits of integer u."""
    if isinstance(u, types.Integer):
        def codegen(context, builder, sig, args):
            b = context.cast(builder, args[0], sig.args[0], types.uint32)
            return builder.bitcast(b, ir.FloatType())
        return types.float32(u), codegen


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
    @overload(pyop)
    def _ov(a, b):
        if isinstance(a, Vec) or isinstance(b, Vec):
            return lambda a, b: impl(a, b)


for _pyop, _fop, _iop in ((operator.add, "fadd", "add"), (operator.sub, "fsub", "sub"),
                          (operator.mul, "fmul", "mul"), (operator.and_, None, "and_"),
                          (operator.or_, None, "or_"), (operator.rshift, None, "lshr"),
                          (operator.lshift, None, "shl")):
    _register_operator(_pyop, _vec_binop(_fop, _iop))


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
            ptr = _ptr(context, builder, sig.args[0], args[0], args[1], ir.HalfType())
            return builder.fpext(builder.load(ptr, align=1), ir.FloatType())
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

    @njit(fastmath=False)
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
        else:                                    # dequantized once, read back 3 rows a pass
            for o in range(lo, hi):
                deq(w[o], buf, n_in)
                for r in range(0, n_rows, 3):
                    _buf_dot_rows(buf, x, r, min(3, n_rows - r), out, o, buf, n_in)

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
        for r in range(0, n_rows, 3):
            _buf_dot_rows(buf, x, r, min(3, n_rows - r), out, o, buf, n_in)


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
def _b_q8_0(w, b):
    # block b as (32 weights as bytes, d, m)
    p = 34 * b
    return vload_b32(w, p + 2), _half(w, p), np.float32(0)


@_inline
def _b_q4_0(w, b):
    p = 18 * b
    return vnibbles(w, p + 2) - 8, _half(w, p), np.float32(0)


@_inline
def _b_q4_1(w, b):
    p = 20 * b
    return vnibbles(w, p + 4), _half(w, p), _half(w, p + 2)


@_inline
def _b_q5_0(w, b):
    p = 22 * b
    return (vnibbles(w, p + 6) | (vbits32(_u32(w, p + 2)) << 4)) - 16, _half(w, p), np.float32(0)


@_inline
def _b_q5_1(w, b):
    p = 24 * b
    return vnibbles(w, p + 8) | (vbits32(_u32(w, p + 4)) << 4), _half(w, p), _half(w, p + 2)


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


def _specialize_q8(bfn, signed):
    """Row kernels of matmul_q8 for one block function bfn (w, b) -> (bytes, d, m); signed: the
    weight bytes are signed (no min term) or unsigned with a min m. Per (activation row, output):
    acc = fma(d * dx, sum(qw * qx), acc) block by block (+ summ += m * sx), then hsum(acc) + summ;
    passes over a weight row serve 4, 3, 2 or 1 activation rows with exactly these operations."""

    @_inline
    def step(acc, summ, bw, d, m, qx, dx, sx, b):
        if signed:
            isum = vdot_i8i8(bw, vload_b32(qx, 32 * b))
        else:
            isum = vdot_u8i8(bw, vload_b32(qx, 32 * b))
            summ += m * sx[b]
        return vfma(vsplat(d * dx[b]), vfloat(isum), acc), summ

    @_inline
    def pass1(wr, qx, dx, sx, r, out, o, nb):
        a0, s0 = vzero(), np.float32(0)
        for b in range(nb):
            bw, d, m = bfn(wr, b)
            a0, s0 = step(a0, s0, bw, d, m, qx[r], dx[r], sx[r], b)
        out[r, o] = vhsum(a0) + s0

    @_inline
    def pass2(wr, qx, dx, sx, r, out, o, nb):
        a0, s0, a1, s1 = vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(nb):
            bw, d, m = bfn(wr, b)
            a0, s0 = step(a0, s0, bw, d, m, qx[r], dx[r], sx[r], b)
            a1, s1 = step(a1, s1, bw, d, m, qx[r + 1], dx[r + 1], sx[r + 1], b)
        out[r, o] = vhsum(a0) + s0
        out[r + 1, o] = vhsum(a1) + s1

    @_inline
    def pass3(wr, qx, dx, sx, r, out, o, nb):
        a0, s0, a1, s1, a2, s2 = vzero(), np.float32(0), vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(nb):
            bw, d, m = bfn(wr, b)
            a0, s0 = step(a0, s0, bw, d, m, qx[r], dx[r], sx[r], b)
            a1, s1 = step(a1, s1, bw, d, m, qx[r + 1], dx[r + 1], sx[r + 1], b)
            a2, s2 = step(a2, s2, bw, d, m, qx[r + 2], dx[r + 2], sx[r + 2], b)
        out[r, o] = vhsum(a0) + s0
        out[r + 1, o] = vhsum(a1) + s1
        out[r + 2, o] = vhsum(a2) + s2

    @_inline
    def pass4(wr, qx, dx, sx, r, out, o, nb):
        a0, s0, a1, s1 = vzero(), np.float32(0), vzero(), np.float32(0)
        a2, s2, a3, s3 = vzero(), np.float32(0), vzero(), np.float32(0)
        for b in range(nb):
            bw, d, m = bfn(wr, b)
            a0, s0 = step(a0, s0, bw, d, m, qx[r], dx[r], sx[r], b)
            a1, s1 = step(a1, s1, bw, d, m, qx[r + 1], dx[r + 1], sx[r + 1], b)
            a2, s2 = step(a2, s2, bw, d, m, qx[r + 2], dx[r + 2], sx[r + 2], b)
            a3, s3 = step(a3, s3, bw, d, m, qx[r + 3], dx[r + 3], sx[r + 3], b)
        out[r, o] = vhsum(a0) + s0
        out[r + 1, o] = vhsum(a1) + s1
        out[r + 2, o] = vhsum(a2) + s2
        out[r + 3, o] = vhsum(a3) + s3

    @njit(fastmath=False)
    def rows(qx, dx, sx, w, out, lo, hi):
        # out[:, lo:hi] for the quantized activations (the 1-row loop compiled on its own)
        n_rows = qx.shape[0]
        nb = qx.shape[1] // 32
        if n_rows == 1:
            for o in range(lo, hi):
                pass1(w[o], qx, dx, sx, 0, out, o, nb)
            return
        for o in range(lo, hi):
            r = 0
            while n_rows - r >= 4:
                pass4(w[o], qx, dx, sx, r, out, o, nb)
                r += 4
            if n_rows - r == 3:
                pass3(w[o], qx, dx, sx, r, out, o, nb)
            elif n_rows - r == 2:
                pass2(w[o], qx, dx, sx, r, out, o, nb)
            elif n_rows - r == 1:
                pass1(w[o], qx, dx, sx, r, out, o, nb)

    return rows


_q8_rows_q8_0 = _specialize_q8(_b_q8_0, True)
_q8_rows_q4_0 = _specialize_q8(_b_q4_0, True)
_q8_rows_q4_1 = _specialize_q8(_b_q4_1, False)
_q8_rows_q5_0 = _specialize_q8(_b_q5_0, True)
_q8_rows_q5_1 = _specialize_q8(_b_q5_1, False)
Q8_QTYPES = frozenset((Q8_0, Q4_0, Q4_1, Q5_0, Q5_1))


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
def matmul_q8(x, w, qtype, out):
    # [n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out], activations rounded to int8
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    _check_shapes(n_in, w.shape[1], qtype)
    if out.shape[0] != n_rows or out.shape[1] != n_out:
        raise ValueError("specnb.kernels.quant.matmul_q8: out must be [n_rows, n_out]")
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w)
    if qtype != Q8_0 and qtype != Q4_0 and qtype != Q4_1 and qtype != Q5_0 and qtype != Q5_1:
        if n_out * n_in <= SERIAL_MAX_ELEMENTS:
            _matmul_rows(xc, wc, qtype, out, 0, n_out, np.empty(n_in, np.float32))
            return
        n_chunks = min(n_out, _N_CHUNKS)
        bufs = np.empty((n_chunks, n_in), np.float32)
        for c in prange(n_chunks):
            _matmul_rows(xc, wc, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks, bufs[c])
        return
    qx = np.empty((n_rows, n_in), np.int8)
    dx = np.empty((n_rows, n_in // 32), np.float32)
    sx = np.empty((n_rows, n_in // 32), np.float32)
    _quantize_q8(xc, qx, dx, sx)
    if n_out * n_in <= SERIAL_MAX_ELEMENTS:
        _q8_rows(qx, dx, sx, wc, qtype, out, 0, n_out)
        return
    n_chunks = min(n_out, _N_CHUNKS)
    for c in prange(n_chunks):
        _q8_rows(qx, dx, sx, wc, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks)


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
