"""Register tiles: one SIMD vector per activation row, for R rows at once (the int8 kernels'
multi-row passes).

A `Tile(vec, R)` is R vectors of the same type held in registers (an LLVM array of vectors that
LLVM keeps in R registers). The kernel code is written once, for a tile of R rows; R is a
constant of each compiled pass (a closure variable), so the intrinsics below unroll into R
copies of each instruction: a weight block is decoded once per pass and meets the R activation
rows in R independent dot products. Every row of a tile goes through exactly the instructions a
tile of one row runs, in the same order, so a row's result is bit-identical whatever R is and
wherever the row sits in the batch.

Arguments: `a, i, stride, R` address row r at element (or byte) i + r * stride of the flat 1-D
array a, for r < R (R a literal constant). No bounds checks: the callers check the shapes.

    tzeros(dtype, lanes, R)              Tile of zero vectors
    tload_bytes(a, i, stride, R, n)      Tile(i8 x n) <- n bytes per row (int8 or uint8 array)
    tload_i16(a, i, stride, R, n)        Tile(i16 x n) <- n int16 per row
    tload_f32(a, i, stride, R, n)        Tile(f32 x n) <- n float32 per row
    tbroadcast(a, i, stride, R, n)       Tile(f32 x n), row r = splat(a[i + r stride])
    tsplat(a, i, stride, R, n, scale)    Tile(f32 x n), row r = splat(a[i + r stride] * scale)
    tsplat_i32(a, i, stride, R, scale)   Tile(i32 x 16), row r = splat(a[i + r stride] * scale) (int32 a)
    tbcast4(a, i, stride, R)             Tile(i8 x 64), row r = the 4 bytes at a[i + r stride], 16 times
    tdot4(acc, u, x) / tdot4s(acc, u, x, s)   acc[r] + the 64-byte dot (simd.dot4_codegen)
    tdot4s8(acc8, u, x, s)               the same into 8 int32 lanes, lane l + lane l + 8 of the dot
    tdot4p(acc, u, x)                    acc[r] + the dot's products summed in int16 pairs, two to a
                                         lane (simd_wide.dot4p_codegen; tdotw with the scales finishes it)
    tfold(t)                             i32 tiles of 16 lanes -> 8 (l + l + 8); 8 lanes as they are
    tnegate_where(x, w)                  x[r] with the lanes where the byte vector w < 0 negated (AVX2:
                                         and 0 where w == 0, as vpsignb does; for dots with |w|)
    tmadd(c, t)                          i32 lanes: c[2l] t[r][2l] + c[2l+1] t[r][2l+1] (int16)
    tmac(acc, t, s)                      i32 lanes: acc[r] + t[r] * s (wrapping, as vpmulld / vpaddd)
    tdotw(acc, c, t)                     i32 lanes: acc[r] + c16[2l] t16[2l] + c16[2l+1] t16[2l+1], c and
                                         t i32x16 holding int16 pairs (vpdpwssd: two products a lane)
    tpairsum(acc, t)                     i32 lanes: acc[r] + t16[2l] + t16[2l+1] (tdotw with ones: a tdot4p
                                         tile finished unscaled, one pmaddwd)
    tfloat(t) tfma(a, b, c) tmul tadd    lane-wise; a plain vector argument serves every row
    tstore_hsum(out, i, stride, t)       out[i + r stride] = hsum(t[r]), a fixed halving tree
    tstore_f32(a, i, stride, t)          a[i + r stride : + lanes] = t[r] (float32 tiles)
"""
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, models, register_model

from .simd import _AVX2_ONLY, _V32B, Vec, _call, _i32, _ptr, _splat
from .simd_wide import _concat, _slice, dot4_codegen, dot4_folded_codegen, dot4p_codegen, dotw_codegen, fold_codegen


class Tile(types.Type):
    def __init__(self, vec, rows):
        self.vec, self.rows = vec, rows
        super().__init__(name=f"Tile({vec}, {rows})")


@register_model(Tile)
class _TileModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        vty = dmm.lookup(fe_type.vec).get_value_type()
        super().__init__(dmm, fe_type, ir.ArrayType(vty, fe_type.rows))


def _rows(builder, t, R):
    return [builder.extract_value(t, r) for r in range(R)]


def _tile(builder, ty, parts):
    v = ir.Constant(ty, ir.Undefined)
    for r, p in enumerate(parts):
        v = builder.insert_value(v, p, r)
    return v


def _row_index(builder, i, stride, r):
    return builder.add(i, builder.mul(stride, ir.Constant(stride.type, r)))


def _literal(*ts):
    return all(isinstance(t, types.IntegerLiteral) for t in ts)


def _ints(context, builder, sig, args, k):
    # args k, k+1 (i, stride) as int64
    return [context.cast(builder, args[j], sig.args[j], types.int64) for j in (k, k + 1)]


def _row_ptrs(context, builder, sig, args, R, ty):
    # pointers (to ty) at element i + r * stride of the array args[0], r < R (i, stride: args 1, 2)
    i, stride = _ints(context, builder, sig, args, 1)
    return [_ptr(context, builder, sig.args[0], args[0], _row_index(builder, i, stride, r), ty) for r in range(R)]


def _row_loads(context, builder, sig, args, R, vty, align):
    return [builder.load(p, align=align) for p in _row_ptrs(context, builder, sig, args, R, vty)]


def _is_1d(a, *dtypes):
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype in dtypes


# ---- making tiles ------------------------------------------------------------------------------

@intrinsic
def tzeros(typingctx, dt, lanes, R):
    if isinstance(dt, types.NumberClass) and _literal(lanes, R):
        T = Tile(Vec(dt.dtype, lanes.literal_value), R.literal_value)

        def codegen(context, builder, sig, args):
            return ir.Constant(context.get_value_type(T), None)
        return T(dt, lanes, R), codegen


def _loader(dtypes, elt, align):
    @intrinsic
    def load(typingctx, a, i, stride, R, n):
        if _is_1d(a, *dtypes) and _literal(R, n):
            T = Tile(Vec(elt, n.literal_value), R.literal_value)

            def codegen(context, builder, sig, args):
                vty = context.get_value_type(T.vec)
                loads = _row_loads(context, builder, sig, args, T.rows, vty, align)
                return _tile(builder, context.get_value_type(T), loads)
            return T(a, i, stride, R, n), codegen
    return load


tload_bytes = _loader((types.int8, types.uint8), types.int8, 1)
tload_i16 = _loader((types.int16,), types.int16, 2)
tload_f32 = _loader((types.float32,), types.float32, 4)


@intrinsic
def tbroadcast(typingctx, a, i, stride, R, n):
    if _is_1d(a, types.float32) and _literal(R, n):
        T = Tile(Vec(types.float32, n.literal_value), R.literal_value)

        def codegen(context, builder, sig, args):
            vty = context.get_value_type(T.vec)
            vals = _row_loads(context, builder, sig, args, T.rows, ir.FloatType(), 4)
            return _tile(builder, context.get_value_type(T), [_splat(builder, v, vty) for v in vals])
        return T(a, i, stride, R, n), codegen


@intrinsic
def tsplat(typingctx, a, i, stride, R, n, scale):
    if _is_1d(a, types.float32) and _literal(R, n) and isinstance(scale, types.Float):
        T = Tile(Vec(types.float32, n.literal_value), R.literal_value)

        def codegen(context, builder, sig, args):
            vty = context.get_value_type(T.vec)
            sc = context.cast(builder, args[5], sig.args[5], types.float32)
            vals = _row_loads(context, builder, sig, args, T.rows, ir.FloatType(), 4)
            return _tile(builder, context.get_value_type(T), [_splat(builder, builder.fmul(v, sc), vty) for v in vals])
        return T(a, i, stride, R, n, scale), codegen


@intrinsic
def tsplat_i32(typingctx, a, i, stride, R, scale):
    if _is_1d(a, types.int32) and _literal(R) and isinstance(scale, types.Integer):
        T = Tile(Vec(types.int32, 16), R.literal_value)

        def codegen(context, builder, sig, args):
            vty = context.get_value_type(T.vec)
            sc = context.cast(builder, args[4], sig.args[4], types.int32)
            vals = _row_loads(context, builder, sig, args, T.rows, _i32, 4)
            return _tile(builder, context.get_value_type(T), [_splat(builder, builder.mul(v, sc), vty) for v in vals])
        return T(a, i, stride, R, scale), codegen


@intrinsic
def tbcast4(typingctx, a, i, stride, R):
    if _is_1d(a, types.int8, types.uint8) and _literal(R):
        T = Tile(Vec(types.int8, 64), R.literal_value)

        def codegen(context, builder, sig, args):
            v16 = ir.VectorType(_i32, 16)
            words = _row_loads(context, builder, sig, args, T.rows, _i32, 1)
            return _tile(builder, context.get_value_type(T),
                         [builder.bitcast(_splat(builder, v, v16), context.get_value_type(T.vec)) for v in words])
        return T(a, i, stride, R), codegen


# ---- arithmetic ------------------------------------------------------------------------------

def _parts(builder, v, ty, R):
    # the R row vectors of a tile argument, or R times a plain vector
    return _rows(builder, v, R) if isinstance(ty, Tile) else [v] * R


def _tile_op(name, check, result, build):
    # an intrinsic applying build(builder, row vectors...) row by row (arity from build's)
    import inspect
    arity = len(inspect.signature(build).parameters) - 1

    def typer(typingctx, *args):
        tiles = [t for t in args if isinstance(t, Tile)]
        if not tiles or not check(*args):
            return None
        R = tiles[0].rows
        T = result(*args)

        def codegen(context, builder, sig, vals):
            rows = [_parts(builder, v, t, R) for v, t in zip(vals, sig.args)]
            out = [build(builder, *row) for row in zip(*rows)]
            return _tile(builder, context.get_value_type(T), out)
        return T(*args), codegen
    # Numba's intrinsic decorator needs explicit parameters
    params = ", ".join(f"a{k}" for k in range(arity))
    ns = {"typer": typer}
    exec(f"def {name}(typingctx, {params}):\n    return typer(typingctx, {params})\n", ns)
    return intrinsic(ns[name])


def _vec(t):
    return t.vec if isinstance(t, Tile) else t


def _same_vec(*ts):
    vs = [_vec(t) for t in ts]
    return all(isinstance(v, Vec) for v in vs) and all(v == vs[0] for v in vs)


def _first_tile(*ts):
    return next(t for t in ts if isinstance(t, Tile))


_I8x64, _I32x16 = Vec(types.int8, 64), Vec(types.int32, 16)

def _dot4_args(acc, u, x):
    # tdot4's and tdot4p's operands: int32 x 16 sums, 64 bytes of weights and of activations
    return _vec(acc) == _I32x16 and _vec(u) == _I8x64 and _vec(x) == _I8x64


tdot4 = _tile_op("tdot4", _dot4_args, _first_tile, lambda b, acc, u, x: dot4_codegen(b, acc, u, x))
tdot4p = _tile_op("tdot4p", _dot4_args, _first_tile, lambda b, acc, u, x: dot4p_codegen(b, acc, u, x))
tdot4s = _tile_op("tdot4s", lambda acc, u, x, s: _vec(acc) == _I32x16 and _vec(u) == _I8x64
                  and _vec(x) == _I8x64 and _vec(s) == _I32x16,
                  lambda acc, u, x, s: _first_tile(acc, u, x, s),
                  lambda b, acc, u, x, s: dot4_codegen(b, acc, u, x, s))

_I32x8 = Vec(types.int32, 8)
tdot4s8 = _tile_op("tdot4s8", lambda acc, u, x, s: _vec(acc) == _I32x8 and _vec(u) == _I8x64
                   and _vec(x) == _I8x64 and _vec(s) == _I32x16,
                   lambda acc, u, x, s: _first_tile(acc, u, x, s),
                   lambda b, acc, u, x, s: dot4_folded_codegen(b, acc, u, x, s))
tfold = _tile_op("tfold", lambda t: _vec(t) in (_I32x16, _I32x8), lambda t: Tile(_I32x8, t.rows),
                 lambda b, v: fold_codegen(b, v) if v.type.count == 16 else v)


def _negate_where(b, x, w):
    if _AVX2_ONLY:
        # vpsignb: x, -x where w < 0, and 0 where w == 0 (which the dot multiplies by |w| = 0)
        return _concat(b, *[_call(b, "llvm.x86.avx2.psign.b", _V32B,
                                  [_slice(b, x, 32 * h, 32), _slice(b, w, 32 * h, 32)]) for h in range(2)])
    neg = b.icmp_signed("<", w, ir.Constant(w.type, None))
    return b.select(neg, b.sub(ir.Constant(x.type, None), x), x)


tnegate_where = _tile_op("tnegate_where", lambda x, w: _vec(x) == _I8x64 and _vec(w) == _I8x64,
                         lambda x, w: _first_tile(x, w), _negate_where)


def _madd(b, c, t):
    n = c.type.count // 2
    v32 = ir.VectorType(_i32, 2 * n)
    p = b.mul(b.sext(c, v32), b.sext(t, v32))
    ev = b.shuffle_vector(p, p, ir.Constant(ir.VectorType(_i32, n), list(range(0, 2 * n, 2))))
    od = b.shuffle_vector(p, p, ir.Constant(ir.VectorType(_i32, n), list(range(1, 2 * n, 2))))
    return b.add(ev, od)       # LLVM matches this to pmaddwd


tmadd = _tile_op("tmadd", lambda c, t: _same_vec(c, t) and _vec(c).dtype == types.int16,
                 lambda c, t: Tile(Vec(types.int32, _vec(c).lanes // 2), _first_tile(c, t).rows), _madd)
tmac = _tile_op("tmac", lambda acc, t, s: _same_vec(acc, t, s) and _vec(acc).dtype == types.int32,
                lambda acc, t, s: _first_tile(acc, t, s), lambda b, acc, t, s: b.add(acc, b.mul(t, s)))
tdotw = _tile_op("tdotw", lambda acc, c, t: _same_vec(acc, c, t) and _vec(acc) == _I32x16,
                 lambda acc, c, t: _first_tile(acc, c, t), dotw_codegen)
_ONES16 = ir.Constant(ir.VectorType(_i32, 16), [0x00010001] * 16)     # 1 in both int16 halves of a lane
tpairsum = _tile_op("tpairsum", lambda acc, t: _same_vec(acc, t) and _vec(acc) == _I32x16, _first_tile,
                    lambda b, acc, t: dotw_codegen(b, acc, _ONES16, t))
tfloat = _tile_op("tfloat", lambda t: _vec(t).dtype == types.int32,
                  lambda t: Tile(Vec(types.float32, t.vec.lanes), t.rows),
                  lambda b, v: b.sitofp(v, ir.VectorType(ir.FloatType(), v.type.count)))


def _fma(b, x, y, z):
    n = x.type.count
    return _call(b, f"llvm.fmuladd.v{n}f32", ir.VectorType(ir.FloatType(), n), [x, y, z])


_is_f32 = lambda *ts: _same_vec(*ts) and _vec(ts[0]).dtype == types.float32   # noqa: E731
tfma = _tile_op("tfma", _is_f32, _first_tile, _fma)
tmul = _tile_op("tmul", _is_f32, _first_tile, lambda b, x, y: b.fmul(x, y))
tadd = _tile_op("tadd", _is_f32, _first_tile, lambda b, x, y: b.fadd(x, y))


# ---- storing -----------------------------------------------------------------------------------

def _hsum(builder, v):
    # the lanes of a float vector summed by halving: (lo + hi) until one lane is left
    while v.type.count > 1:
        h = v.type.count // 2
        v = builder.fadd(_slice(builder, v, 0, h), _slice(builder, v, h, h))
    return builder.extract_element(v, _i32(0))


@intrinsic
def tstore_hsum(typingctx, out, i, stride, t):
    if _is_1d(out, types.float32) and isinstance(t, Tile) and t.vec.dtype == types.float32:
        def codegen(context, builder, sig, args):
            ptrs = _row_ptrs(context, builder, sig, args, t.rows, ir.FloatType())
            for v, p in zip(_rows(builder, args[3], t.rows), ptrs):
                builder.store(_hsum(builder, v), p)
            return context.get_dummy_value()
        return types.none(out, i, stride, t), codegen


@intrinsic
def tstore_f32(typingctx, a, i, stride, t):
    if _is_1d(a, types.float32) and isinstance(t, Tile) and t.vec.dtype == types.float32:
        def codegen(context, builder, sig, args):
            ptrs = _row_ptrs(context, builder, sig, args, t.rows, context.get_value_type(t.vec))
            for v, p in zip(_rows(builder, args[3], t.rows), ptrs):
                builder.store(v, p, align=4)
            return context.get_dummy_value()
        return types.none(a, i, stride, t), codegen


# ---- passes over a batch ------------------------------------------------------------------------

def tile_rows(make_pass, r_max: int):
    """run(n_rows, *args): the batch in tiles, passes[R](r0, *args) for tiles of R rows from row
    r0: r_max rows at a time, then one tile of the rest. make_pass(R) builds the pass for R rows
    (R = 1 .. 12; r_max <= 12), each compiled with its R a constant. run.passes[R - 1] is the
    R-row pass itself: called as run calls it (r an int64, then run's arguments), it shares
    run's compiled code instead of compiling another copy."""
    if not 1 <= r_max <= 12:
        raise ValueError(f"tile_rows: r_max must be 1 .. 12, not {r_max}")
    P = [make_pass(R) for R in range(1, r_max + 1)]
    P = P + [P[0]] * (12 - r_max)                      # (never called: the rest is < r_max)
    P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, _ = P
    PMAX = P[r_max - 1]

    @njit(fastmath=False, _nrt=False, forceinline=True)
    def run(n_rows, *args):
        r = 0
        while n_rows - r >= r_max:
            PMAX(r, *args)
            r += r_max
        k = n_rows - r
        if k == 1:
            P1(r, *args)
        elif k == 2:
            P2(r, *args)
        elif k == 3:
            P3(r, *args)
        elif k == 4:
            P4(r, *args)
        elif k == 5:
            P5(r, *args)
        elif k == 6:
            P6(r, *args)
        elif k == 7:
            P7(r, *args)
        elif k == 8:
            P8(r, *args)
        elif k == 9:
            P9(r, *args)
        elif k == 10:
            P10(r, *args)
        elif k == 11:
            P11(r, *args)
    run.passes = tuple(P[:r_max])       # passes[R - 1]: the R-row pass (one compiled function)
    return run


__all__ = ["Tile", "tzeros", "tload_bytes", "tload_i16", "tload_f32", "tbroadcast", "tsplat", "tsplat_i32", "tbcast4",
           "tdot4", "tdot4s", "tdot4p",
           "tnegate_where", "tmadd", "tmac", "tdotw", "tfloat", "tfma", "tmul", "tadd", "tstore_hsum", "tstore_f32",
           "tile_rows"]
