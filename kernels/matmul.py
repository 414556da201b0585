"""The float32 matrix product straight over GGUF weight blocks, on the CPU (llama.cpp:
ggml-quants.c dequantize_row_* and ggml-cpu's mul_mat, with float32 activations).

    matmul(x, w, qtype, out)        y = x @ W^T: [n_rows, n_in] x [n_out, row_bytes] -> [n_rows, n_out]
    dequant_row(w_row, qtype, out)  one row to float32 (the embedding lookup)
    dequantize(w, qtype, n_in)      all rows to float32
    matmul_ref(x, w, qtype, n_in)   the reference: NumPy through gguf.quants.dequantize, float64 sums
    self_check(), bench()           `python -m specnb.kernels.matmul`: both, for every type

Each weight row is decoded block by block into float32 vectors (blocks.py: bit for bit the values
gguf.quants.dequantize gives) and meets the activation rows in fused multiply-adds. Every dot
product of an activation row with a weight row uses one fixed order: four 8-lane accumulators over
32-element steps, a fixed tree to one float, then the scalar tail. Nothing in that order depends on
how many activation rows share the call, so a row's outputs are bit-identical in any batch. This
is the exact path: it agrees with the float64 reference to float32 rounding.
"""
import time

import gguf
import numba
import numpy as np
from gguf import GGMLQuantizationType
from numba import njit, prange

from . import qtypes as T
from .blocks import (_g_bf16, _g_f32, _g_q2_k, _g_q3_k, _g_q4_0, _g_q4_1, _g_q4_k, _g_q5_0,
                     _g_q5_1, _g_q5_k, _g_q6_k, _g_q8_0, _inline, _scalar, _store4)
from .qtypes import (BF16, F16, F32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0,
                     all_types, check_qtype, check_shapes, qtype_name, row_bytes)
from .simd import _AVX512, vfma, vhsum, vload, vzero
from .tiles import tadd, tfma, tile_rows, tload_f32, tstore_hsum, tzeros

_jit = njit(cache=True, fastmath=False)
R_MAX = 6 if _AVX512 else 3

# ---- dot products in the one fixed order ---------------------------------------------------------
# For one activation row x and one weight row w of n elements:
#   acc_k (k = 0..3) = fma(x[32c + 8k : +8], w[32c + 8k : +8], acc_k) over the whole 32-steps c,
#   then the remaining 8-lane steps into acc_0, acc_1, acc_2 (float types only),
#   s = hsum((acc_0 + acc_1) + (acc_2 + acc_3)), then s += x[i] * w[i] for the last n % 8.
# Quantized weight rows are decoded in registers once per tile of up to R_MAX activation rows
# (6 with AVX-512, 3 otherwise: as many as their four accumulators each fit the registers) and
# meet every row of the tile (tiles.py); for more rows the first tile also keeps the decoded row
# in a float32 buffer that the other tiles read back. Float weight rows (F32, F16, BF16, any n)
# are decoded into the buffer and read back row by row. Whichever way, and whatever the tile size,
# every (row, output) pair runs exactly these operations.

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
    value would make the caller uncachable.) Returns (deq, rows, dot1):
      deq(w_row, out, n)                    out[:n] <- the row, n % 32 == 0
      rows(x, w, out, lo, hi, buf)          out[:, lo:hi] <- x @ w[lo:hi]^T (quantized types: each
                                            weight row decoded once, in registers, for tiles of up
                                            to R_MAX activation rows (tiles.py); buf: float32 [n_in])
      dot1(w_row, x_row, buf, n)            one dot product, the tail included (float types)
      tiles                                 the tile passes (of _g_buf: reading a decoded row)
    """

    @_inline
    def deq(w, out, n):
        for g in range(n // 32):
            _store4(out, 32 * g, gfn(w, g))

    @_inline
    def dot1(w, x0, buf, n):
        a = _zero4()
        for g in range(n // 32):
            a = _fma4(x0, 32 * g, gfn(w, g), a)
        return _finish(a, x0, buf, n)

    def make_pass(R, store=False):
        @_inline
        def run(r, base, w, x, n_in, out, o, n_out, buf):
            # out[r0 + i, o] for i < R, r0 = base + r: _fma4's four accumulators for every row of
            # the tile, then vhsum((a0 + a1) + (a2 + a3)) (_finish without a tail: n_in % 32 == 0);
            # store: also keep the decoded row in buf, for the passes of the rows after these
            r0 = base + r
            a0 = a1 = a2 = a3 = tzeros(np.float32, 8, R)
            xr = r0 * n_in
            for g in range(n_in // 32):
                v = gfn(w, g)
                if store:
                    _store4(buf, 32 * g, v)
                i = xr + 32 * g
                a0 = tfma(tload_f32(x, i, n_in, R, 8), v[0], a0)
                a1 = tfma(tload_f32(x, i + 8, n_in, R, 8), v[1], a1)
                a2 = tfma(tload_f32(x, i + 16, n_in, R, 8), v[2], a2)
                a3 = tfma(tload_f32(x, i + 24, n_in, R, 8), v[3], a3)
            tstore_hsum(out, r0 * n_out + o, n_out, tadd(tadd(a0, a1), tadd(a2, a3)))
        return run

    tiles = tile_rows(make_pass, R_MAX)
    one = tiles.passes[0]                    # the tiles' own one-row pass, not another copy
    first = make_pass(R_MAX, store=True)

    @njit(fastmath=False, _nrt=False)
    def rows(x2, w, out2, lo, hi, buf):
        # one tile of up to R_MAX rows decodes each weight row in registers; beyond that the first
        # tile also stores the decoded row in buf and the others read it back (_g_buf)
        n_rows, n_in = x2.shape
        n_out = out2.shape[1]
        x, out = x2.reshape(-1), out2.reshape(-1)
        if n_rows == 1:                          # the decode loop, on its own
            z = lo - lo                          # (an int64 r, as the tiles pass it: one compile)
            for o in range(lo, hi):
                one(z, 0, w[o], x, n_in, out, o, n_out, buf)
        elif n_rows <= R_MAX:
            for o in range(lo, hi):
                tiles(n_rows, 0, w[o], x, n_in, out, o, n_out, buf)
        else:
            for o in range(lo, hi):
                first(0, 0, w[o], x, n_in, out, o, n_out, buf)
                _buf_tiles(n_rows - R_MAX, R_MAX, buf, x, n_in, out, o, n_out, buf)

    return deq, rows, dot1, tiles



_, _, _buf_dot1, _buf_tiles = _specialize(_g_buf)
_deq_f32 = _specialize(_g_f32)[0]
_deq_bf16 = _specialize(_g_bf16)[0]
_deq_q4_1, _rows_q4_1 = _specialize(_g_q4_1)[:2]
_deq_q8_0, _rows_q8_0 = _specialize(_g_q8_0)[:2]
_deq_q4_0, _rows_q4_0 = _specialize(_g_q4_0)[:2]
_deq_q5_0, _rows_q5_0 = _specialize(_g_q5_0)[:2]
_deq_q5_1, _rows_q5_1 = _specialize(_g_q5_1)[:2]
_deq_q4_k, _rows_q4_k = _specialize(_g_q4_k)[:2]
_deq_q6_k, _rows_q6_k = _specialize(_g_q6_k)[:2]
_deq_q2_k, _rows_q2_k = _specialize(_g_q2_k)[:2]
_deq_q3_k, _rows_q3_k = _specialize(_g_q3_k)[:2]
_deq_q5_k, _rows_q5_k = _specialize(_g_q5_k)[:2]


# ---- one row to float32 ------------------------------------------------------------------------

@_jit
def _deq_float(w, qtype, out, n, f32, f16, bf16):
    # F32, F16, BF16 (any n); each branch compiled only where its flag is not None (TypeSel)
    n32 = n - n % 32
    if f32 is not None and qtype == F32:
        _deq_f32(w, out, n32)
    elif bf16 is not None and qtype == BF16:
        _deq_bf16(w, out, n32)
    else:
        n32 = 0                      # F16: the table loop below does it all
    for i in range(n32, n):
        out[i] = _scalar(w, qtype, i)


@_jit
def dequant_row_by(w, qtype, out, n, fl, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k,
                   q5_k, q6_k):
    # [row_bytes] -> out [n], shapes already checked (the fused pass's embedding lookup calls it
    # directly): the dispatch, each branch compiled only for the types selected (the TypeSel's
    # flags; a None flag prunes it)
    if q4_1 is not None and qtype == Q4_1:
        _deq_q4_1(w, out, n)
    elif q8_0 is not None and qtype == Q8_0:
        _deq_q8_0(w, out, n)
    elif q4_0 is not None and qtype == Q4_0:
        _deq_q4_0(w, out, n)
    elif q5_0 is not None and qtype == Q5_0:
        _deq_q5_0(w, out, n)
    elif q5_1 is not None and qtype == Q5_1:
        _deq_q5_1(w, out, n)
    elif q4_k is not None and qtype == Q4_K:
        _deq_q4_k(w, out, n)
    elif q6_k is not None and qtype == Q6_K:
        _deq_q6_k(w, out, n)
    elif q2_k is not None and qtype == Q2_K:
        _deq_q2_k(w, out, n)
    elif q3_k is not None and qtype == Q3_K:
        _deq_q3_k(w, out, n)
    elif q5_k is not None and qtype == Q5_K:
        _deq_q5_k(w, out, n)
    elif fl is not None and (qtype == F32 or qtype == F16 or qtype == BF16):
        _deq_float(w, qtype, out, n, f32, f16, bf16)
    else:
        raise ValueError("specnb.kernels: tensor type outside the compiled selection:", qtype)


@_jit
def _dequant_row(w, qtype, out, n, s):
    # [row_bytes] -> out [n]; shapes already checked; s: the TypeSel of the types to serve
    dequant_row_by(w, qtype, out, n, s.fl, s.f32, s.f16, s.bf16, s.q8_0, s.q4_0, s.q4_1, s.q5_0,
                   s.q5_1, s.q2_k, s.q3_k, s.q4_k, s.q5_k, s.q6_k)


@_jit
def dequant_row_sel(w_row, qtype, out, s):
    # [row_bytes] uint8 -> out [n_in] float32, n_in = out.shape[0], for the types of TypeSel s
    check_shapes(out.shape[0], w_row.shape[0], qtype)
    _dequant_row(np.ascontiguousarray(w_row), qtype, out, out.shape[0], s)


@_jit
def dequant_row(w_row, qtype, out):
    # [row_bytes] uint8 -> out [n_in] float32, n_in = out.shape[0]
    dequant_row_sel(w_row, qtype, out, all_types())


@njit(parallel=True, fastmath=False, cache=True)
def _dequantize(w, qtype, out):
    # [n_out, row_bytes] -> out [n_out, n_in]
    n_in = out.shape[1]
    for o in prange(w.shape[0]):
        _dequant_row(w[o], qtype, out[o], n_in, all_types())


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
def _rows_float(x, w, qtype, out, lo, hi, buf, f32, f16, bf16):
    # F32 / F16 / BF16 w (any n_in): each row dequantized into buf, then the dots row by row
    n_rows, n_in = x.shape
    for o in range(lo, hi):
        _deq_float(w[o], qtype, buf, n_in, f32, f16, bf16)
        for r in range(n_rows):
            out[r, o] = _buf_dot1(buf, x[r], buf, n_in)


@_jit
def _rows_t(x, w, qtype, out, lo, hi, buf, fl, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k,
            q3_k, q4_k, q5_k, q6_k):
    # the dispatch, each branch compiled only for the types selected (a None flag prunes it)
    if q4_1 is not None and qtype == Q4_1:
        _rows_q4_1(x, w, out, lo, hi, buf)
    elif q8_0 is not None and qtype == Q8_0:
        _rows_q8_0(x, w, out, lo, hi, buf)
    elif q4_0 is not None and qtype == Q4_0:
        _rows_q4_0(x, w, out, lo, hi, buf)
    elif q5_0 is not None and qtype == Q5_0:
        _rows_q5_0(x, w, out, lo, hi, buf)
    elif q5_1 is not None and qtype == Q5_1:
        _rows_q5_1(x, w, out, lo, hi, buf)
    elif q4_k is not None and qtype == Q4_K:
        _rows_q4_k(x, w, out, lo, hi, buf)
    elif q6_k is not None and qtype == Q6_K:
        _rows_q6_k(x, w, out, lo, hi, buf)
    elif q2_k is not None and qtype == Q2_K:
        _rows_q2_k(x, w, out, lo, hi, buf)
    elif q3_k is not None and qtype == Q3_K:
        _rows_q3_k(x, w, out, lo, hi, buf)
    elif q5_k is not None and qtype == Q5_K:
        _rows_q5_k(x, w, out, lo, hi, buf)
    elif fl is not None and (qtype == F32 or qtype == F16 or qtype == BF16):
        _rows_float(x, w, qtype, out, lo, hi, buf, f32, f16, bf16)
    else:
        raise ValueError("specnb.kernels.matmul: tensor type outside the compiled selection:", qtype)


@_jit
def _matmul_rows(x, w, qtype, out, lo, hi, buf, s):
    # output columns [lo, hi) of out [n_rows, n_out]; buf: float32 [n_in] scratch; s: TypeSel
    _rows_t(x, w, qtype, out, lo, hi, buf, s.fl, s.f32, s.f16, s.bf16, s.q8_0, s.q4_0, s.q4_1,
            s.q5_0, s.q5_1, s.q2_k, s.q3_k, s.q4_k, s.q5_k, s.q6_k)


# below this many weight elements a call runs on the calling thread (the choice depends on the
# weight shape only, never on n_rows)
SERIAL_MAX_ELEMENTS = 1 << 17
_N_CHUNKS = 32


# (fastmath=False like every helper: no contraction or reassociation anywhere on this path)
@njit(parallel=True, fastmath=False, cache=True)
def matmul_sel(x, w, qtype, out, s):
    # [n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out]   (y = x @ W^T), compiled for
    # the types of TypeSel s only
    n_rows, n_in = x.shape
    n_out = w.shape[0]
    check_shapes(n_in, w.shape[1], qtype)
    if out.shape[0] != n_rows or out.shape[1] != n_out:
        raise ValueError("specnb.kernels.matmul: out must be [n_rows, n_out]")
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w)
    if n_out * n_in <= SERIAL_MAX_ELEMENTS:
        # lo as an int64 (0 * n_out), not the literal 0: a literal argument would compile a second
        # copy of the rows kernels beside the one the prange loop calls
        _matmul_rows(xc, wc, qtype, out, 0 * n_out, n_out, np.empty(n_in, np.float32), s)
        return
    n_chunks = min(n_out, _N_CHUNKS)  # row ranges; prange hands them out to the threads
    bufs = np.empty((n_chunks, n_in), np.float32)
    for c in prange(n_chunks):
        _matmul_rows(xc, wc, qtype, out, c * n_out // n_chunks, (c + 1) * n_out // n_chunks, bufs[c], s)


@_jit
def matmul(x, w, qtype, out):
    # [n_rows, n_in] x [n_out, row_bytes] -> out [n_rows, n_out]   (y = x @ W^T), any type
    matmul_sel(x, w, qtype, out, all_types())




def matmul_ref(x: np.ndarray, w: np.ndarray, qtype: int, n_in: int) -> np.ndarray:
    """NumPy oracle: [n_rows, n_in] x [n_out, row_bytes] -> [n_rows, n_out] (float64 sums)."""
    check_qtype(qtype)
    wd = gguf.quants.dequantize(np.ascontiguousarray(w, dtype=np.uint8), GGMLQuantizationType(int(qtype)))
    wd = np.asarray(wd, dtype=np.float32).reshape(w.shape[0], n_in)
    return (np.asarray(x, np.float64) @ wd.astype(np.float64).T).astype(np.float32)


# ---- check and benchmark: python -m specnb.kernels.matmul ---------------------------------------

REL_TOL = 1e-5   # |matmul - matmul_ref| <= REL_TOL * (|x| @ |W|^T): float32 sums in another order


def self_check(qtypes=None, n_out: int = 37, rows=(1, 2, 3, 4, 5, 9, 17), seed: int = 0) -> list:
    """For every type: dequantize bit-exact against gguf.quants.dequantize, matmul within REL_TOL of
    matmul_ref, and every row of every batch size bit-identical to the same row alone. Returns
    [(type, what, ok, detail)]; the tests assert every ok."""
    rng = np.random.default_rng(seed)
    res = []
    for qt in sorted(qtypes or T.SUPPORTED_QTYPES, key=qtype_name):
        name = qtype_name(qt)
        n_in = 101 if qt in T.FLOAT_QTYPES else 2 * T._BLOCK[qt]        # 101: vector and scalar tails
        w = T.random_blocks(qt, n_out, n_in, rng)
        ref = np.asarray(gguf.quants.dequantize(w, GGMLQuantizationType(qt)), np.float32).reshape(n_out, n_in)
        got = dequantize(w, qt, n_in)
        res.append((name, "dequantize bit-exact", np.array_equal(got.view(np.uint32), ref.view(np.uint32)), ""))
        wf = _finite(w, qt, n_in, rng)
        wdf = np.asarray(gguf.quants.dequantize(wf, GGMLQuantizationType(qt)), np.float64).reshape(n_out, n_in)
        x = rng.standard_normal((max(rows), n_in)).astype(np.float32)
        one = np.empty((1, n_out), np.float32)
        for k in rows:
            out = np.empty((k, n_out), np.float32)
            matmul(x[:k], wf, qt, out)
            scale = np.abs(x[:k].astype(np.float64)) @ np.abs(wdf).T + 1e-30
            err = np.abs(out - matmul_ref(x[:k], wf, qt, n_in)) / scale
            res.append((name, f"{k} rows within {REL_TOL:g} of matmul_ref", bool(err.max() <= REL_TOL),
                        f"{err.max():.1e}"))
            matmul(x[k - 1:k].copy(), wf, qt, one)
            same = np.array_equal(one[0].view(np.uint32), out[k - 1].view(np.uint32))
            res.append((name, f"row {k - 1} of {k} == alone", same, ""))
    return res


def _finite(w, qt, n_in, rng):
    # weights whose values are all finite (random bytes in a float type can be inf or nan)
    if qt not in T.FLOAT_QTYPES:
        return w
    return T.random_blocks(qt, w.shape[0], n_in, rng)


def time_call(f, args, reps):
    """Median seconds of f(*args) over reps calls after one warm-up call."""
    f(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


BENCH_SHAPES = ((Q4_1, 576, 1536), (Q8_0, 49152, 576), (Q4_K, 8960, 1536), (Q6_K, 1536, 8960))


def bench(f=None, shapes=BENCH_SHAPES, rows=(1, 2, 3, 5, 9, 17), seed: int = 0, label="matmul"):
    """Print the time, GFLOP/s, weight GB/s and the cost relative to one row of f (matmul by
    default) on random weights of each (type, n_out, n_in)."""
    f = f or matmul
    rng = np.random.default_rng(seed)
    print(f"{label}: threads {numba.get_num_threads()} ({numba.threading_layer()}); medians; "
          f"cost = time / time at 1 row")
    print(f"{'type':5s} {'n_out x n_in':>13s} {'rows':>4s} {'us':>9s} {'GFLOP/s':>8s} {'GB/s':>6s} {'cost':>6s}")
    for qt, n_out, n_in in shapes:
        w = T.random_blocks(qt, n_out, n_in, rng)
        t1 = None
        for n_rows in rows:
            x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
            out = np.empty((n_rows, n_out), np.float32)
            reps = max(5, min(300, int(2e8 / (n_out * n_in * (n_rows + 4)))))
            t = time_call(f, (x, w, qt, out), reps)
            t1 = t if t1 is None else t1
            print(f"{qtype_name(qt):5s} {f'{n_out}x{n_in}':>13s} {n_rows:4d} {t * 1e6:9.1f} "
                  f"{2 * n_rows * n_out * n_in / t / 1e9:8.1f} {w.nbytes / t / 1e9:6.1f} {t / t1:6.2f}")


def print_check(res) -> bool:
    bad = [r for r in res if not r[2]]
    for name, what, ok, detail in res:
        if not ok or "alone" not in what:
            print(f"  {'ok  ' if ok else 'FAIL'} {name:5s} {what} {detail}")
    print(f"  {len(res) - len(bad)} of {len(res)} checks passed")
    return not bad


def _main():
    print("checking every type against gguf.quants.dequantize and matmul_ref ...")
    ok = print_check(self_check())
    print()
    bench()
    return 0 if ok else 1


if __name__ == "__main__":
    # run the package's copy of this module: Numba's cache files are shared by both, and the types
    # they pickle must name specnb.kernels.matmul, not __main__
    import sys
    from specnb.kernels import matmul as _m
    sys.exit(_m._main())
