"""64-byte vectors for the int8 kernels (matmul_q8.py): 64 weights or activations as bytes
(i8x64), 16 int32 / float32 lanes (i32x16, f32x16), 16 int16 (i16x16); one AVX-512 register
each where the CPU has AVX-512, two AVX2 registers elsewhere, plain LLVM vectors on other CPUs.
The conventions are simd.py's (no bounds checks, IEEE float ops, byte offsets for byte arrays).

    vload_b64(a, i)                    i8x64 <- 64 bytes
    prefetch / prefetch_l2(a, i)       a hint: the cache line of byte i towards L1 / L2
    vstore_at(a, i, v)                 any vector's bytes -> a[i:]; vload_i32x16 / vload_i16x16 /
                                       vload_f32x16(a, i) read them back; ld_f32 / st_f32 scalars
    vfields64(a, i, sh0, sh1, mask)    i8x64: lanes 0..31 = (a[i:i+32] >> sh0) & mask, lanes
                                       32..63 = (a[i:i+32] >> sh1) & mask (nibbles, 2-bit fields)
    vcat32(a, b)                       i8x64 <- two i8x32
    vabs8(v)                           i8x64 of |v| (as unsigned bytes: |-128| = 128)
    vbytes16(w0, w1, w2, w3)           i32x16 <- the 16 bytes of four uint32 words, zero-extended
    vload_u8x16 / vload_i8x16(a, i)    i32x16 <- 16 bytes, zero / sign extended
    vhalf16(a, i)                      f32x16 <- 16 little-endian float16 (vcvtph2ps with F16C)
    vdup2(v, half)                     i32x16: lanes 2l, 2l+1 = lane 8 half + l of v
    vpairs(v)                          i32x16 of (v & 0xffff) | (v << 16): v's int16 value in both
                                       halves of its lane (the scales of dot4s)
    vtrunc16(v)                        i16x16 <- the low 16 bits of each lane
    vgroups4(v, c)                     i32x16: lane l = v[4c + l // 4] (c a constant): the scales
                                       of chunk c of a super-block, one per 16 elements
    vsplat2(a, b) / vsparse2(a, b)     f32x16: [a] * 8 + [b] * 8 / [a, 0 * 7, b, 0 * 7]
    dot4_codegen(...)                  the dot products, for tiles.py's tdot4 / tdot4s
    dot4_folded_codegen / fold_codegen the same folded to 8 lanes (l + l + 8), for tdot4s8 / tfold
    dotw_codegen(...)                  int16 pair products added to int32 lanes (vpdpwssd), for tdotw
    dot4p_codegen(...)                 the byte products summed in int16 pairs (pmaddubsw), for tdot4p
"""
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .simd import (_AVX2, _AVX2_ONLY, _AVX512, _NEON, _VNNI256, Vec, _V8I, _call, _i32, _is_bytes, _operand_form, _ptr,
                   _splat, _typed_load, llvm_binding, neon_dot4, vpdpbusd256, vpdpwssd256)

i8x64 = Vec(types.int8, 64)
i16x16 = Vec(types.int16, 16)
i32x16 = Vec(types.int32, 16)
f32x16 = Vec(types.float32, 16)
_I8 = ir.IntType(8)
_V64B = ir.VectorType(_I8, 64)
_V32B = ir.VectorType(_I8, 32)
_V16F = ir.VectorType(ir.FloatType(), 16)


def _const(vty, values):
    return ir.Constant(vty, list(values))


def _int(context, builder, sig, args, k, ty=types.int32):
    return context.cast(builder, args[k], sig.args[k], ty)


# -- dot products (the int8 kernels' inner step; llama.cpp: the maddubs / madd pairs of
# ggml_vec_dot_q4_K_q8_K and friends, or one VNNI vpdpbusd / vpdpwssd)
# u: 64 unsigned bytes (weights), x: 64 signed bytes (activations), acc / s: <16 x i32>. Lane l
# covers bytes 4l..4l+3: d_l = sum_k u[4l+k] * x[4l+k]. Every path gives the same integers as long
# as a pair u[2i] x[2i] + u[2i+1] x[2i+1] fits an int16 (pmaddubsw saturates): u < 128, or
# |x| <= 127 and u <= 128, which is how the kernels call them.

def _slice(builder, v, lo, n):
    # lanes lo .. lo + n - 1 of the vector v
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, n), list(range(lo, lo + n))))


def _concat(builder, a, b):
    # the lanes of a, then those of b (same vector type)
    n = a.type.count + b.type.count
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_i32, n), list(range(n))))


_V16I = ir.VectorType(_i32, 16)
_V16S = ir.VectorType(ir.IntType(16), 16)
_V32S = ir.VectorType(ir.IntType(16), 32)


def dot4_codegen(builder, acc, u, x, s=None):
    """acc + d (s=None), or acc + s_l * d_l where every lane of s holds its scale in both int16
    halves (the 'pair form' (sc & 0xffff) | sc << 16, sc in int16 range)."""
    if _AVX512:
        if s is None:
            return _VNNI_B(builder, acc, u, x)
        p = _call(builder, "llvm.x86.avx512.pmaddubs.w.512", _V32S, [u, x])
        return _VNNI_W(builder, acc, p, s)
    if _VNNI256:
        return _concat(builder, *[_vnni256_half(builder, _slice(builder, acc, 8 * h, 8), u, x, s, h) for h in range(2)])
    if _AVX2:
        halves = _avx2_halves(builder, u, x, s)
        return builder.add(acc, _concat(builder, halves[0], halves[1]))
    if _NEON:
        # four sdot / usdot of 16 bytes (simd.neon_dot4), accumulating into acc when unscaled
        quads = [neon_dot4(builder, None if s is not None else _slice(builder, acc, 4 * q, 4),
                           _slice(builder, u, 16 * q, 16), _slice(builder, x, 16 * q, 16), False)
                 for q in range(4)]
        d = _concat(builder, _concat(builder, quads[0], quads[1]), _concat(builder, quads[2], quads[3]))
        if s is None:
            return d
        return builder.add(acc, builder.mul(d, builder.ashr(s, ir.Constant(_V16I, [16] * 16))))
    v64 = ir.VectorType(_i32, 64)
    p = builder.mul(builder.zext(u, v64), builder.sext(x, v64))
    parts = [builder.shuffle_vector(p, p, ir.Constant(_V16I, list(range(k, 64, 4)))) for k in range(4)]
    d = builder.add(builder.add(parts[0], parts[1]), builder.add(parts[2], parts[3]))
    if s is not None:
        sixteen = ir.Constant(_V16I, [16] * 16)
        d = builder.mul(d, builder.ashr(s, sixteen))
    return builder.add(acc, d)


def _maddubs_half(builder, u, x, h):
    # pmaddubsw of bytes 32h .. 32h + 31: u unsigned times x signed, adjacent products summed in
    # int16 (saturating; the kernels' operands never reach it) -> <16 x i16>
    return _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _V16S,
                 [_slice(builder, u, 32 * h, 32), _slice(builder, x, 32 * h, 32)])


def dot4p_codegen(builder, acc, u, x):
    """acc + the dot's byte products summed in pairs, kept as int16: acc and the result are <16 x
    i32> whose lanes hold two int16 (low half first), and half j of lane l gains u[4l + 2j] x[4l + 2j]
    + u[4l + 2j + 1] x[4l + 2j + 1] (pmaddubsw, then a wrapping int16 add: exact while every sum
    fits an int16). A dotw with the scales in pair form then finishes a sub-block in one pmaddwd,
    where dot4 pays a pmaddwd and an int32 add per 64 bytes (AVX2: llama.cpp's maddubs / add_epi16
    / madd of ggml_vec_dot_q4_K_q8_K)."""
    if _AVX2:
        parts = [builder.add(builder.bitcast(_slice(builder, acc, 8 * h, 8), _V16S), _maddubs_half(builder, u, x, h))
                 for h in range(2)]
        return builder.bitcast(_concat(builder, parts[0], parts[1]), _V16I)
    v64, v16 = ir.VectorType(_i32, 64), ir.VectorType(ir.IntType(16), 32)
    p = builder.mul(builder.zext(u, v64), builder.sext(x, v64))
    pairs = builder.add(builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(_i32, 32), list(range(0, 64, 2)))),
                        builder.shuffle_vector(p, p, ir.Constant(ir.VectorType(_i32, 32), list(range(1, 64, 2)))))
    return builder.bitcast(builder.add(builder.bitcast(acc, v16), builder.trunc(pairs, v16)), _V16I)


def dotw_codegen(builder, acc, c, t):
    """acc + the int16 pair products: lane l + c16[2l] t16[2l] + c16[2l+1] t16[2l+1], c and t
    <16 x i32> whose lanes hold two int16 each (low half first); exact while each sum fits an
    int32. AVX-512 VNNI: one vpdpwssd; AVX2: two pmaddwd; elsewhere the products and a shuffle."""
    if _AVX512:
        return _VNNI_W(builder, acc, c, t)
    if _VNNI256:
        return _concat(builder, *[vpdpwssd256(builder, _slice(builder, acc, 8 * h, 8), _slice(builder, c, 8 * h, 8),
                                              _slice(builder, t, 8 * h, 8)) for h in range(2)])
    if _AVX2:
        halves = [_call(builder, "llvm.x86.avx2.pmadd.wd", _V8I,
                        [builder.bitcast(_slice(builder, c, 8 * h, 8), _V16S),
                         builder.bitcast(_slice(builder, t, 8 * h, 8), _V16S)]) for h in range(2)]
        return builder.add(acc, _concat(builder, halves[0], halves[1]))
    v32 = ir.VectorType(_i32, 32)
    p = builder.mul(builder.sext(builder.bitcast(c, _V32S), v32), builder.sext(builder.bitcast(t, _V32S), v32))
    ev = builder.shuffle_vector(p, p, ir.Constant(_V16I, list(range(0, 32, 2))))
    od = builder.shuffle_vector(p, p, ir.Constant(_V16I, list(range(1, 32, 2))))
    return builder.add(acc, builder.add(ev, od))


def _avx2_halves(builder, u, x, s):
    # lanes 0..7 and 8..15 of the dot (s: the scales, or None), each a pmaddubsw / pmaddwd pair
    halves = []
    for h in range(2):
        sh = ir.Constant(_V16S, [1] * 16) if s is None else builder.bitcast(_slice(builder, s, 8 * h, 8), _V16S)
        halves.append(_call(builder, "llvm.x86.avx2.pmadd.wd", _V8I, [_maddubs_half(builder, u, x, h), sh]))
    return halves


def _vnni256_half(builder, acc8, u, x, s, h):
    # AVX-VNNI: acc8 + lanes 8h .. 8h + 7 of the dot: one vpdpbusd, or pmaddubsw + vpdpwssd (scaled)
    if s is None:
        return vpdpbusd256(builder, acc8, _slice(builder, u, 32 * h, 32), _slice(builder, x, 32 * h, 32))
    return vpdpwssd256(builder, acc8, _maddubs_half(builder, u, x, h), _slice(builder, s, 8 * h, 8))


def fold_codegen(builder, v):
    """<16 x i32> -> <8 x i32>: lane l + lane l + 8 (exact integers)."""
    return builder.add(_slice(builder, v, 0, 8), _slice(builder, v, 8, 8))


def dot4_folded_codegen(builder, acc8, u, x, s):
    """acc8 (<8 x i32>) + fold(the scaled dot4 of u and x): the same integers as folding
    dot4_codegen's 16 lanes, with one 256-bit register per accumulator on AVX2 (the halves
    added as they are made, never concatenated)."""
    if _VNNI256:                        # the halves accumulated in turn: the same integers
        return _vnni256_half(builder, _vnni256_half(builder, acc8, u, x, s, 0), u, x, s, 1)
    if _AVX2_ONLY:
        h0, h1 = _avx2_halves(builder, u, x, s)
        return builder.add(acc8, builder.add(h0, h1))
    return builder.add(acc8, fold_codegen(builder, dot4_codegen(builder, ir.Constant(_V16I, None), u, x, s)))


_VNNI_B = _operand_form("llvm.x86.avx512.vpdpbusd.512", _V16I, ir.VectorType(_I8, 64))
_VNNI_W = _operand_form("llvm.x86.avx512.vpdpwssd.512", _V16I, _V32S)




# -- loads, fields, conversions

def _prefetch_name():
    # llvm.prefetch's name carries its pointer type: .p0 (opaque pointers) or .p0i8 (older LLVM)
    for name in ("llvm.prefetch.p0", "llvm.prefetch.p0i8"):
        try:
            llvm_binding.parse_assembly(f"declare void @{name}(i8*, i32, i32, i32)\n")
            return name
        except RuntimeError:
            pass
    return "llvm.prefetch"


_PREFETCH = _prefetch_name()


def _prefetcher(locality, doc):
    @intrinsic
    def pf(typingctx, a, i):
        if _is_bytes(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                p = _ptr(context, builder, sig.args[0], args[0], args[1], ir.IntType(8))
                _call(builder, _PREFETCH, ir.VoidType(), [p, _i32(0), _i32(locality), _i32(1)])
                return context.get_dummy_value()
            return types.none(a, i), codegen
    pf.__doc__ = doc
    return pf


# hints: bring the cache line holding byte i of the byte array a closer, for reading (x86
# prefetcht0 / prefetcht1); no effect on results, never fault. prefetch_l2 stops at L2, whose
# queue holds more lines in flight than L1's fill buffers: the interleaved kernels stream 2-3 KB
# per group-block and prefetch 8-16 KB ahead (an Intel Xeon read 28 GB/s so, 22 into L1)
prefetch = _prefetcher(3, "prefetch(a, i): the line of byte i towards L1")
prefetch_l2 = _prefetcher(2, "prefetch_l2(a, i): the line of byte i towards L2")


@intrinsic
def vstore_at(typingctx, a, i, v):
    # any vector's bytes into the byte array a at byte i (a scratch buffer of decoded weights)
    if _is_bytes(a) and isinstance(i, types.Integer) and isinstance(v, Vec):
        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0], args[1], context.get_value_type(sig.args[2]))
            builder.store(args[2], p, align=1)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen


@intrinsic
def ld_f32(typingctx, a, i):
    if _is_bytes(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.FloatType()), align=1)
        return types.float32(a, i), codegen


@intrinsic
def st_f32(typingctx, a, i, v):
    if _is_bytes(a) and isinstance(i, types.Integer) and isinstance(v, types.Float):
        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0], args[1], ir.FloatType())
            builder.store(context.cast(builder, args[2], sig.args[2], types.float32), p, align=1)
            return context.get_dummy_value()
        return types.none(a, i, v), codegen



vload_b64 = _typed_load(i8x64)


@intrinsic
def vhalf16(typingctx, a, i):
    if _is_bytes(a) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1],
                                  ir.VectorType(ir.HalfType(), 16)), align=1)
            return builder.fpext(h, _V16F)
        return f32x16(a, i), codegen


@intrinsic
def vfields64(typingctx, a, i, sh0, sh1, mask):
    if _is_bytes(a) and all(isinstance(t, types.Integer) for t in (i, sh0, sh1, mask)):
        def codegen(context, builder, sig, args):
            q = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V32B), align=1)
            m = _splat(builder, _int(context, builder, sig, args, 4, types.int8), _V32B)
            sh_lo = _splat(builder, _int(context, builder, sig, args, 2, types.int8), _V32B)
            sh_hi = _splat(builder, _int(context, builder, sig, args, 3, types.int8), _V32B)
            lo = builder.and_(builder.lshr(q, sh_lo), m)
            hi = builder.and_(builder.lshr(q, sh_hi), m)
            return _concat(builder, lo, hi)
        return i8x64(a, i, sh0, sh1, mask), codegen


@intrinsic
def vcat32(typingctx, a, b):
    if a == Vec(types.int8, 32) and b == a:
        def codegen(context, builder, sig, args):
            return _concat(builder, args[0], args[1])
        return i8x64(a, b), codegen


@intrinsic
def vabs8(typingctx, v):
    if v == i8x64:
        def codegen(context, builder, sig, args):
            return _call(builder, "llvm.abs.v64i8", _V64B, [args[0], ir.Constant(ir.IntType(1), 0)])
        return i8x64(v), codegen


@intrinsic
def vbytes16(typingctx, w0, w1, w2, w3):
    if all(isinstance(t, types.Integer) for t in (w0, w1, w2, w3)):
        def codegen(context, builder, sig, args):
            v = ir.Constant(ir.VectorType(_i32, 4), None)
            for k in range(4):
                v = builder.insert_element(v, _int(context, builder, sig, args, k, types.uint32), _i32(k))
            return builder.zext(builder.bitcast(v, ir.VectorType(_I8, 16)), ir.VectorType(_i32, 16))
        return i32x16(w0, w1, w2, w3), codegen


def _load16(signed):
    @intrinsic
    def load(typingctx, a, i):
        if _is_bytes(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_I8, 16)), align=1)
                return (builder.sext if signed else builder.zext)(v, ir.VectorType(_i32, 16))
            return i32x16(a, i), codegen
    return load


vload_u8x16 = _load16(False)
vload_i8x16 = _load16(True)
vload_i32x16 = _typed_load(i32x16)
vload_i16x16 = _typed_load(i16x16)
vload_f32x16 = _typed_load(f32x16)


@intrinsic
def vdup2(typingctx, v, half):
    if v == i32x16 and isinstance(half, types.IntegerLiteral):
        h = half.literal_value

        def codegen(context, builder, sig, args):
            mask = _const(ir.VectorType(_i32, 16), [8 * h + l // 2 for l in range(16)])
            return builder.shuffle_vector(args[0], args[0], mask)
        return i32x16(v, half), codegen


@intrinsic
def vpairs(typingctx, v):
    if v == i32x16:
        def codegen(context, builder, sig, args):
            vt = ir.VectorType(_i32, 16)
            lo = builder.and_(args[0], _const(vt, [0xFFFF] * 16))
            return builder.or_(lo, builder.shl(args[0], _const(vt, [16] * 16)))
        return i32x16(v), codegen


@intrinsic
def vtrunc16(typingctx, v):
    if v == i32x16:
        def codegen(context, builder, sig, args):
            return builder.trunc(args[0], ir.VectorType(ir.IntType(16), 16))
        return i16x16(v), codegen


@intrinsic
def vgroups4(typingctx, v, c):
    if v == i32x16 and isinstance(c, types.IntegerLiteral):
        k = c.literal_value

        def codegen(context, builder, sig, args):
            mask = _const(ir.VectorType(_i32, 16), [4 * k + l // 4 for l in range(16)])
            return builder.shuffle_vector(args[0], args[0], mask)
        return i32x16(v, c), codegen


def _two(sparse):
    @intrinsic
    def make(typingctx, a, b):
        if isinstance(a, types.Float) and isinstance(b, types.Float):
            def codegen(context, builder, sig, args):
                x = context.cast(builder, args[0], sig.args[0], types.float32)
                y = context.cast(builder, args[1], sig.args[1], types.float32)
                v = ir.Constant(_V16F, None)
                for lane in range(16):
                    if sparse and lane % 8:
                        continue
                    v = builder.insert_element(v, x if lane < 8 else y, _i32(lane))
                return v
            return f32x16(a, b), codegen
    return make


vsplat2 = _two(False)
vsparse2 = _two(True)
