"""A tiny explicit-SIMD layer for Numba: 8-lane float32/int32 vectors and 32-lane byte vectors as
LLVM vector values, with intrinsics that emit plain LLVM vector IR (and x86 AVX2 instructions for
the int8 dot products where the CPU has them).

Numba ships LLVM's SLP vectorizer switched off, so short fixed-size loops (the 32-element blocks of
a quantized row) would otherwise stay scalar. The quantized matrix products (`matmul`,
`matmul_q8`) and the attention kernel are written with these vectors.

This layer uses Numba's extension API (`numba.extending.intrinsic`, data models, `numba.core.
cgutils`) and LLVM intrinsic names, which are not covered by Numba's compatibility promises:
pyproject.toml bounds numba/llvmlite to the versions it was tested with, and tests/test_simd.py
fails with the name of whatever moved.
"""
import operator
import os

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, overload, register_model

# Vec types are LLVM vectors held in jitted code's local variables: f32x8 = <8 x float>,
# i32x8 = <8 x i32>, i8x32 = <32 x i8>. The functions below are Numba intrinsics that emit plain
# LLVM vector IR (x86 AVX2 instructions for the int8 dot products where the CPU has them).
# Loads and stores take a 1-D C-contiguous array and an element index (a byte offset for byte
# arrays) and do no bounds checks: callers validate the shapes first. Float ops are IEEE, with no
# fast-math flags and no contraction, except vfma (one rounding where the CPU has FMA).
# Operators + - * & | >> << work lane-wise on a vector and a vector or a scalar (>> is logical).
#
#   vload(a, i) vstore(a, i, v)      f32x8 <-> float32 a[i:i+8] (vstore: f64x8 -> float64 a[i:i+8] too)
#   vload_u8 / vload_i8 (a, i)       i32x8 <- 8 bytes zero / sign extended
#   vload_u16 / vload_u32 (a, i)     i32x8 <- 8 little-endian uint16 / uint32 (the bits)
#   vload_b32(a, i)                  i8x32 <- 32 bytes;  vstore_i8(a, i, v): 8 lanes as int8
#   vnibbles(a, i)                   i8x32 <- 16 bytes as 32 nibbles (low ones, then high ones)
#   vbits(word, j0) / vbits32(word)  i32x8 / i8x32 of single bits of an integer
#   vzero() vsplat(s) vfloat(v) vbitcast(v) vrint(v) vabs(v) vmax(a, b) vfma(a, b, c)
#   vhsum(v) vhmax(v) vhsum_i(v)     reductions to one scalar (vhsum in a fixed order)
#   sfma(a, b, c)                    float32 scalar a * b + c, fused where the CPU has FMA
#   vdot_u8i8(a, b) vdot_i8i8(a, b)  i32x8 of sums of 4 adjacent byte products
#   ld_u8 ld_i8 ld_u16 ld_u32(a, i)  int64 <- one little-endian integer at byte i
#   f64x8: vload_f64(a, i) (float32 a[i:i+8] widened) vsplat64 vfirst vto_f32 vfloor vto_i64
#          vbits_f64 vclamp

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


# ---- which instructions the kernels use ------------------------------------------------------
# The host's features, or fewer with SPECNB_SIMD=avxvnni (256-bit registers and VNNI's vpdpbusd /
# vpdpwssd: the AVX-VNNI of Intel's Core since Alder Lake, 12th generation, which has no AVX-512),
# SPECNB_SIMD=avx2 (no VNNI at all: AMD Zen 2 / 3, Intel before Alder Lake) or SPECNB_SIMD=generic
# (no x86 intrinsics at all: plain LLVM vector IR, what any CPU compiles). On aarch64 (ARM: Apple
# M-series, Graviton) `neon` is the int8 dot-product instructions of ARMv8.2 (sdot, the dotprod
# feature) and `neon-i8mm` adds usdot (unsigned x signed bytes, the i8mm feature: Apple M2 and
# later, Graviton 3); SPECNB_SIMD=neon or generic forces a lower one. Every level computes the
# same integers and the same float operations, so results are bit-identical across levels; only
# the speed differs. (specnb's Numba cache folder depends on SPECNB_SIMD too: machine code
# compiled for one level is never loaded for another.)

SIMD_LEVELS = ("generic", "avx2", "avxvnni", "avx512", "neon", "neon-i8mm")
_CHAINS = (("generic", "avx2", "avxvnni", "avx512"), ("generic", "neon", "neon-i8mm"))   # each: lowest first


def _simd_level(requested: str, features) -> str:
    has = lambda *names: all(bool(features.get(n, False)) for n in names)
    best = ("avx512" if has("avx2", "avx512f", "avx512bw", "avx512vl", "avx512vnni")
            else "avxvnni" if has("avx2", "avxvnni")
            else "avx2" if has("avx2")
            else "neon-i8mm" if has("neon", "dotprod", "i8mm")
            else "neon" if has("neon", "dotprod") else "generic")
    if requested in ("", "auto"):
        # (the neon levels' bits are checked against generic for every int8 type and row count on
        # an emulated aarch64 CPU: tests/aarch64/run.sh, docs/aarch64.md)
        return best
    if requested not in SIMD_LEVELS:
        raise ValueError(f"SPECNB_SIMD={requested!r}: expected one of auto, "
                         + ", ".join(SIMD_LEVELS))
    chain = next(c for c in _CHAINS if best in c)
    if requested not in chain:          # another architecture's level: this CPU has none of it
        return "generic"
    return chain[min(chain.index(requested), chain.index(best))]


# the x86 features each level lets Numba's compiler use, beyond AVX2's (prefixes of LLVM's names);
# avx2 is a Zen 3, which has no GFNI either (with it LLVM shifts bytes in one instruction)
_ABOVE = {"avx2": ("avx512", "avx10", "evex512", "amx", "avxvnni", "avxifma", "avxneconvert", "gfni"),
          "avxvnni": ("avx512", "avx10", "evex512", "amx")}


def cpu_features_for(level: str) -> str:
    """A NUMBA_CPU_FEATURES value under which this x86 host compiles as a CPU of `level` (avx2:
    an AMD Zen 3; avxvnni: an Intel Core since Alder Lake) would: the host's features with those
    above the level switched off, so that not even LLVM's own code uses a 512-bit register.
    Set it before Python starts; the SIMD level follows (tests/test_simd.py; docs/lab/2026-12-05-xeon.md
    measures the lower levels so)."""
    if level not in _ABOVE:
        raise ValueError(f"cpu_features_for({level!r}): expected one of {', '.join(_ABOVE)}")
    off = _ABOVE[level]
    return ",".join(("+" if on and not k.startswith(off) else "-") + k
                    for k, on in sorted(llvm_binding.get_host_cpu_features().items()))


def _arm_reported() -> dict:
    """aarch64: the int8 features the CPU reports through the operating system (Linux: the
    kernel's HWCAP words; macOS: sysctl hw.optional.arm.FEAT_*), as LLVM feature names. LLVM's
    own detection reads /proc/cpuinfo on Linux (which qemu-user does not emulate) and has no
    feature list on macOS, so these complete it."""
    import ctypes
    import sys
    found = {}
    try:
        libc = ctypes.CDLL(None)
        if sys.platform.startswith("linux"):
            libc.getauxval.restype = ctypes.c_ulong
            libc.getauxval.argtypes = [ctypes.c_ulong]
            hwcap, hwcap2 = libc.getauxval(16), libc.getauxval(26)       # AT_HWCAP, AT_HWCAP2
            found = {"neon": bool(hwcap & 2), "dotprod": bool(hwcap & (1 << 20)),   # ASIMD, ASIMDDP
                     "i8mm": bool(hwcap2 & (1 << 13))}                              # HWCAP2_I8MM
        elif sys.platform == "darwin":
            def sysctl(name):
                v, n = ctypes.c_int(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
                ok = libc.sysctlbyname(name.encode(), ctypes.byref(v), ctypes.byref(n), None, 0) == 0
                return ok and v.value != 0
            found = {"neon": True, "dotprod": sysctl("hw.optional.arm.FEAT_DotProd"),
                     "i8mm": sysctl("hw.optional.arm.FEAT_I8MM")}
    except (OSError, AttributeError):
        pass
    return {k: v for k, v in found.items() if v}


def _host_features() -> dict:
    try:
        features = dict(llvm_binding.get_host_cpu_features())
    except RuntimeError:                # LLVM has no feature list for this host (e.g. macOS on ARM)
        features = {}
    from numba.core import config
    if config.CPU_FEATURES:
        # Numba compiles for these features (NUMBA_CPU_FEATURES, "+avx2,-avx512f,..."), not the
        # host's: the level follows, so that e.g. a host with AVX-512 compiles what a CPU without
        # it runs, with no 512-bit register anywhere (how docs/lab/2026-12-05-xeon.md measures other levels)
        features.update({f[1:]: f[0] == "+" for f in config.CPU_FEATURES.split(",") if f[:1] in "+-" and f[1:]})
    import platform
    if platform.machine().lower() in ("aarch64", "arm64"):
        # what the CPU reports, beside LLVM's view (which misses it under qemu-user and on macOS)
        for f, on in _arm_reported().items():
            features.setdefault(f, on)
    return features


def _numba_target_made() -> bool:
    from numba.core import registry
    return "_toplevel_target_context" in vars(registry.cpu_target)


def _arm_compile_target(level: str, features: dict) -> str:
    """aarch64: Numba compiles for LLVM's view of the host, which lacks dotprod / i8mm where LLVM
    cannot read them (qemu-user, macOS: LLVM's "Cannot select: USDOT"). Before the first kernel is
    compiled, give Numba's compile target the features the CPU reported (NUMBA_CPU_FEATURES, unless
    the user set it). Returns the level that can be compiled: a lower one where Numba's target was
    made before this module ran, or the user's NUMBA_CPU_FEATURES leaves the feature out."""
    from numba.core import config
    if config.CPU_FEATURES is None and not _numba_target_made():
        config.CPU_FEATURES = ",".join("+" + f for f, on in features.items() if on)
    if config.CPU_FEATURES is not None:
        have = {f[1:] for f in config.CPU_FEATURES.split(",") if f.startswith("+")}
    else:                               # the target was made from LLVM's own view
        try:
            have = {f for f, on in llvm_binding.get_host_cpu_features().items() if on}
        except RuntimeError:
            have = set()
    if all(f in have for f in (("dotprod", "i8mm") if level == "neon-i8mm" else ("dotprod",))):
        return level
    return "neon" if level == "neon-i8mm" and "dotprod" in have else "generic"


# whether Numba's compile target existed before this module ran (made by the first Numba function,
# e.g. numba.typed's): too late then to give it features. kernels/__init__.py imports this module
# before any kernel, and tests/test_simd.py checks the entry points keep it so.
TARGET_MADE_FIRST = _numba_target_made()
_FEATURES = _host_features()
SIMD_LEVEL = _simd_level(os.environ.get("SPECNB_SIMD", "auto"), _FEATURES)
if SIMD_LEVEL in ("neon", "neon-i8mm"):
    SIMD_LEVEL = _arm_compile_target(SIMD_LEVEL, _FEATURES)
_AVX2 = SIMD_LEVEL in ("avx2", "avxvnni", "avx512")
_AVX512 = SIMD_LEVEL == "avx512"        # 512-bit byte dot products (AVX512-BW and VNNI)
_AVX2_ONLY = _AVX2 and not _AVX512      # 256-bit registers only: 16 of them, each half a 512-bit one
_VNNI256 = SIMD_LEVEL == "avxvnni"      # ... whose byte dot product is one vpdpbusd (AVX-VNNI)
_NEON = SIMD_LEVEL in ("neon", "neon-i8mm")     # aarch64 sdot
_I8MM = SIMD_LEVEL == "neon-i8mm"               # aarch64 usdot
_F16C = _AVX2 and bool(_FEATURES.get("f16c", False))


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


def _operand_form(name, acc_ty, new_ty):
    """The VNNI intrinsic `name` (acc_ty accumulator, two operands) as a function of the builder
    and three vectors. LLVM changed its operand types (bytes / int16 since LLVM 21 or so, new_ty;
    before, the accumulator's type): this asks the LLVM at hand which one it declares."""
    acc = str(acc_ty)
    try:
        m = llvm_binding.parse_assembly(
            f"declare {acc} @{name}({acc}, {acc}, {acc})\n"
            f"define {acc} @f({acc} %a) {{\n"
            f"  %r = call {acc} @{name}({acc} %a, {acc} %a, {acc} %a)\n"
            f"  ret {acc} %r\n}}\n")
        new = f"{new_ty}, {new_ty})" in str(m)
    except RuntimeError:
        new = True
    form = new_ty if new else acc_ty

    def emit(builder, acc, a, b):
        return _call(builder, name, acc_ty, [acc, builder.bitcast(a, form), builder.bitcast(b, form)])
    emit.operand_type = form
    return emit


# acc + the dot products of 4 unsigned x 4 signed bytes (vpdpbusd) / of 2 x 2 int16 (vpdpwssd), one
# instruction each, exact (no saturation); the 256-bit forms are AVX-VNNI's (or AVX512-VL's)
vpdpbusd256 = _operand_form("llvm.x86.avx512.vpdpbusd.256", _V8I, ir.VectorType(ir.IntType(8), 32))
vpdpwssd256 = _operand_form("llvm.x86.avx512.vpdpwssd.256", _V8I, ir.VectorType(ir.IntType(16), 16))


# -- loads and stores

@intrinsic
def vload(typingctx, a, i):
    if _is_1d_c(a, types.float32) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V8F), align=4)
        return f32x8(a, i), codegen


@intrinsic
def vstore(typingctx, a, i, v):
    # float32 a[i:i+8] <- f32x8, or float64 a[i:i+8] <- f64x8
    vty = {f32x8: _V8F, f64x8: _V8D}.get(v)
    if vty is not None and _is_1d_c(a, v.dtype) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], vty), align=4)
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


def _typed_load(vt):
    # vt <- its bytes at byte i of a byte array (unaligned)
    @intrinsic
    def load(typingctx, a, i):
        if _is_bytes(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                p = _ptr(context, builder, sig.args[0], args[0], args[1], context.get_value_type(vt))
                return builder.load(p, align=1)
            return vt(a, i), codegen
    return load


vload_b32 = _typed_load(i8x32)


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
    # lane j = bit j of the integer word (the 32 bits as a mask vector: kmov + vpmovm2b with
    # AVX-512, a broadcast and a compare with AVX2)
    if isinstance(word, types.Integer):
        def codegen(context, builder, sig, args):
            w = context.cast(builder, args[0], sig.args[0], types.uint32)
            return builder.zext(builder.bitcast(w, ir.VectorType(ir.IntType(1), 32)), _V32B)
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
        is_float = isinstance(vt.dtype, types.Float)
        op = float_op if is_float else int_op
        scalar = (types.Integer, types.Float) if is_float else types.Integer
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
                          (operator.mul, "fmul", "mul"), (operator.truediv, "fdiv", None),
                          (operator.and_, None, "and_"),
                          (operator.or_, None, "or_"), (operator.rshift, None, "lshr"),
                          (operator.lshift, None, "shl")):
    _register_operator(_pyop, _vec_binop(_fop, _iop))


# -- float64 (the exponential of SwiGLU)

f64x8 = Vec(types.float64, 8)
i64x8 = Vec(types.int64, 8)
_V8D = ir.VectorType(ir.DoubleType(), 8)
_V8L = ir.VectorType(ir.IntType(64), 8)


@intrinsic
def vload_f64(typingctx, a, i):
    # f64x8 <- float32 a[i:i+8], widened
    if _is_1d_c(a, types.float32) and isinstance(i, types.Integer):
        def codegen(context, builder, sig, args):
            v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V8F), align=4)
            return builder.fpext(v, _V8D)
        return f64x8(a, i), codegen


vto_f32 = _vec_unary(f64x8, f32x8, lambda b, v: b.fptrunc(v, _V8F))      # rounded to float32
vfloor = _vec_unary(f64x8, f64x8, lambda b, v: _call(b, "llvm.floor.v8f64", _V8D, [v]))
vto_i64 = _vec_unary(f64x8, i64x8, lambda b, v: b.fptosi(v, _V8L))       # toward zero
vbits_f64 = _vec_unary(i64x8, f64x8, lambda b, v: b.bitcast(v, _V8D))    # the bits


@intrinsic
def vsplat64(typingctx, s):
    if isinstance(s, (types.Float, types.Integer)):
        def codegen(context, builder, sig, args):
            return _splat(builder, context.cast(builder, args[0], sig.args[0], types.float64), _V8D)
        return f64x8(s), codegen


@intrinsic
def vfirst(typingctx, v):
    # lane 0 of a float vector
    if isinstance(v, Vec) and isinstance(v.dtype, types.Float):
        def codegen(context, builder, sig, args):
            return builder.extract_element(args[0], _i32(0))
        return v.dtype(v), codegen


@intrinsic
def vclamp(typingctx, v, lo, hi):
    # min(max(v, lo), hi) lane-wise, lo and hi scalars
    if v == f64x8 and isinstance(lo, types.Float) and isinstance(hi, types.Float):
        def codegen(context, builder, sig, args):
            lo_v = _splat(builder, context.cast(builder, args[1], sig.args[1], types.float64), _V8D)
            hi_v = _splat(builder, context.cast(builder, args[2], sig.args[2], types.float64), _V8D)
            m = _call(builder, "llvm.maxnum.v8f64", _V8D, [args[0], lo_v])
            return _call(builder, "llvm.minnum.v8f64", _V8D, [m, hi_v])
        return f64x8(v, lo, hi), codegen


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
    # it is llama.cpp's pmaddubsw + pmaddwd (for a signed: |a| times b with a's sign); on aarch64
    # sdot / usdot (neon_dot4, exact for every input); elsewhere plain widening IR. All give the
    # same integers as long as pmaddubsw cannot saturate: a unsigned < 128, or a signed and b never
    # -128, which is how matmul_q8 uses them.
    def codegen(context, builder, sig, args):
        a, b = args
        if _NEON:
            return _concat_halves(builder, [neon_dot4(builder, None, _bytes16(builder, a, h),
                                                      _bytes16(builder, b, h), signed_a) for h in range(2)])
        if _AVX2:
            v16s = ir.VectorType(ir.IntType(16), 16)
            if signed_a:
                a, b = (_call(builder, "llvm.x86.avx2.psign.b", _V32B, [a, a]),
                        _call(builder, "llvm.x86.avx2.psign.b", _V32B, [b, a]))
            if _VNNI256:
                return vpdpbusd256(builder, ir.Constant(_V8I, None), a, b)
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


_V16B = ir.VectorType(ir.IntType(8), 16)
_V4I = ir.VectorType(_i32, 4)


def _bytes16(builder, v, h):
    # bytes 16h .. 16h + 15 of a <32 x i8>
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_i32, 16), list(range(16 * h, 16 * h + 16))))


def _concat_halves(builder, parts):
    # <4 x i32> parts, in order, as one vector
    while len(parts) > 1:
        n = 2 * parts[0].type.count
        parts = [builder.shuffle_vector(parts[k], parts[k + 1], ir.Constant(ir.VectorType(_i32, n), list(range(n))))
                 for k in range(0, len(parts), 2)]
    return parts[0]


def neon_dot4(builder, acc, a, b, signed_a):
    """aarch64 (the neon levels): <4 x i32> acc + lane l = sum_k a[4l+k] * b[4l+k] of two <16 x i8>,
    b signed, a signed (sdot) or unsigned. Unsigned a: usdot with i8mm; else sdot on a - 128 (the
    byte a ^ 0x80 read as signed) plus 128 * sum_k b[4l+k] (an sdot of b with -128, subtracted).
    Exact for every input, like the generic IR (the AVX2 path needs a < 128)."""
    acc = ir.Constant(_V4I, None) if acc is None else acc
    if signed_a:
        return _call(builder, "llvm.aarch64.neon.sdot.v4i32.v16i8", _V4I, [acc, a, b])
    if _I8MM:
        return _call(builder, "llvm.aarch64.neon.usdot.v4i32.v16i8", _V4I, [acc, a, b])
    d = _call(builder, "llvm.aarch64.neon.sdot.v4i32.v16i8", _V4I,
              [acc, builder.xor(a, ir.Constant(_V16B, [-128] * 16)), b])
    m = _call(builder, "llvm.aarch64.neon.sdot.v4i32.v16i8", _V4I,
              [ir.Constant(_V4I, None), b, ir.Constant(_V16B, [-128] * 16)])
    return builder.sub(d, m)


vdot_u8i8 = _dot_bytes(False)
vdot_i8i8 = _dot_bytes(True)


# -- scalars

def _scalar_load(bits, signed):
    # int64 <- the little-endian integer of `bits` bits at byte i of a byte array: one load, no
    # bounds check and no negative-index wraparound (a[i] in jitted code does both)
    @intrinsic
    def load(typingctx, a, i):
        if _is_bytes(a) and isinstance(i, types.Integer):
            def codegen(context, builder, sig, args):
                v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.IntType(bits)), align=1)
                return (builder.sext if signed else builder.zext)(v, ir.IntType(64))
            return types.int64(a, i), codegen
    return load


ld_u8 = _scalar_load(8, False)
ld_i8 = _scalar_load(8, True)
ld_u16 = _scalar_load(16, False)
ld_u32 = _scalar_load(32, False)


@intrinsic
def _f32_from_bits(typingctx, u):
    # float32 with the bit pattern of the low 32 bits of the integer u
    if isinstance(u, types.Integer):
        def codegen(context, builder, sig, args):
            return builder.bitcast(context.cast(builder, args[0], sig.args[0], types.uint32), ir.FloatType())
        return types.float32(u), codegen

