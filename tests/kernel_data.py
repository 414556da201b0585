"""Weights, activations and comparisons shared by the kernel tests (test_matmul, test_matmul_q8,
test_simd, test_kernels, test_matmul_x16)."""
from fractions import Fraction

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as GT
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from specnb.kernels import qtypes

TYPES = sorted((qtypes.qtype_name(t) for t in qtypes.SUPPORTED_QTYPES), key=lambda n: int(GT[n]))
FLOAT_TYPES = {"F32", "F16", "BF16"}
K_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
REL_TOL = 1e-5   # |matmul - oracle| <= REL_TOL * (|x| @ |W|^T): float32 sums in another order


def code(name):
    return int(GT[name])


def qk(name):
    return GGML_QUANT_SIZES[GT[name]][0]


def readonly(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)   # like the memory-mapped GGUF tensors (same jit specialization)
    return a


def random_blocks(name, n_out, n_in, rng):
    """Random bytes everywhere (float types too: every bit pattern), finite half-float scales."""
    if name in FLOAT_TYPES:
        size = GGML_QUANT_SIZES[GT[name]][1]
        return readonly(rng.integers(0, 256, (n_out, n_in * size), dtype=np.uint8))
    return qtypes.random_blocks(code(name), n_out, n_in, rng)


def finite_weights(name, n_out, n_in, rng):
    """Weights whose values are all finite: gguf-quantized floats where gguf can quantize the
    type, random blocks with sane scales for the K types (gguf has no K quantizer)."""
    if name in K_TYPES:
        return qtypes.random_blocks(code(name), n_out, n_in, rng)
    wf = rng.standard_normal((n_out, n_in)).astype(np.float32)
    q = gguf_quantize(wf, GT[name])
    return readonly(np.ascontiguousarray(q).view(np.uint8).reshape(n_out, -1))


def gguf_rows(w, name, n_in):
    return np.asarray(gguf_dequantize(w, GT[name]), np.float32).reshape(w.shape[0], n_in)


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def on_the_threaded_path(product, name, n_rows, n_over, rng):
    """product(x, w, code, out) for a batch of n_rows and a weight matrix of n_over rows past
    matmul's SERIAL_MAX_ELEMENTS (the threaded prange path: the serial or threaded choice depends on
    the weight shape only), its first and last rows checked to give the same bits alone.
    -> (x, w, out)."""
    from specnb.kernels.matmul import SERIAL_MAX_ELEMENTS
    n_in = 512
    n_out = SERIAL_MAX_ELEMENTS // n_in + n_over
    w = finite_weights(name, n_out, n_in, rng)
    x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
    out = np.empty((n_rows, n_out), np.float32)
    product(x, w, code(name), out)
    for r in (0, n_rows - 1):
        one = np.empty((1, n_out), np.float32)
        product(x[r:r + 1].copy(), w, code(name), one)
        assert np.array_equal(bits(one[0]), bits(out[r])), (name, r)
    return x, w, out


def same_bits_at_every_interleaved_distance(wx, qtype16, n_in, ks, rng):
    """The batch sizes in ks for which matmul_q8 over the interleaved matrix wx [n_out, the row
    bytes of n_in] does not give the same bits with no prefetching, short and long distances
    (ahead_x16) and one past the end of the weights (clamped to the last byte)."""
    from specnb.kernels.matmul_q8 import matmul_q8
    n_out = wx.shape[0]
    bad = []
    for k in ks:
        x = rng.standard_normal((k, n_in)).astype(np.float32)
        outs = []
        for ahead in (-1, 0, 64, 1000, 10**9):
            out = np.empty((k, n_out), np.float32)
            matmul_q8(x, wx, qtype16, out, ahead_x16=ahead)
            outs.append(bits(out).copy())
        if not all(np.array_equal(outs[0], o) for o in outs[1:]):
            bad.append(k)
    return bad


def check_close(out, x, w, name, n_in, ref, tol=REL_TOL):
    """|out - ref| <= tol * (|x| @ |W|^T) elementwise (ref: the float64 oracle's result)."""
    scale = np.abs(x.astype(np.float64)) @ np.abs(gguf_rows(w, name, n_in).astype(np.float64)).T
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= tol * scale + 1e-30), f"max rel err {np.max(err / (scale + 1e-30)):.2e}"


# ---- exact arithmetic for the interleaved kernels' oracles (test_matmul_x16)

def round_f32(fr: Fraction) -> np.float32:
    """The float32 nearest to an exact rational (ties to even): one rounding, as an FMA does."""
    f = np.float32(float(fr))
    best = f
    for g in (np.nextafter(f, np.float32(-np.inf)), np.nextafter(f, np.float32(np.inf))):
        dg, db = abs(Fraction(float(g)) - fr), abs(Fraction(float(best)) - fr)
        if dg < db or (dg == db and (int(g.view(np.uint32)) & 1) == 0):
            best = g
    return best


def fma(a, b, c) -> np.float32:
    return round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))
