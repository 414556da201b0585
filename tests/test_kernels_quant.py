"""kernels/quant.py: dequantization bit-exact against gguf, matmul against a NumPy oracle, and
batch invariance (a row's outputs are bit-identical whatever the batch around it)."""
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from specnb.kernels import quant

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q6_K"]
FLOAT_TYPES = {"F32", "F16", "BF16"}
# byte offsets of the float16 scale fields (d, dmin / m) inside one block
HALF_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q5_0": (0,), "Q4_1": (0, 2), "Q5_1": (0, 2),
               "Q4_K": (0, 2), "Q6_K": (208,)}
REL_TOL = 1e-5   # |matmul - oracle| <= REL_TOL * (|x| @ |W|^T): float32 sums in another order


def qk(name):
    return GGML_QUANT_SIZES[T[name]][0]


def readonly(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)   # like the memory-mapped GGUF tensors (same jit specialization)
    return a


def random_blocks(name, n_out, n_in, rng):
    """Random bytes everywhere, with random finite float16 values in the scale fields."""
    block, size = GGML_QUANT_SIZES[T[name]]
    nb = n_in // block
    w = rng.integers(0, 256, (n_out, nb, size), dtype=np.uint8)
    for off in HALF_FIELDS.get(name, ()):
        h = (rng.standard_normal((n_out, nb)) * 0.1).astype(np.float16)
        w[:, :, off:off + 2] = h.view(np.uint8).reshape(n_out, nb, 2)
    return readonly(w.reshape(n_out, nb * size))


def finite_weights(name, n_out, n_in, rng):
    """Weights whose values are all finite: gguf-quantized floats where gguf can quantize the
    type, random blocks with sane scales for the K types (gguf has no K quantizer)."""
    if name in ("Q4_K", "Q6_K"):
        return random_blocks(name, n_out, n_in, rng)
    wf = rng.standard_normal((n_out, n_in)).astype(np.float32)
    q = gguf_quantize(wf, T[name])
    return readonly(np.ascontiguousarray(q).view(np.uint8).reshape(n_out, -1))


def gguf_rows(w, name, n_in):
    return np.asarray(gguf_dequantize(w, T[name]), np.float32).reshape(w.shape[0], n_in)


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def check_close(out, x, w, name, n_in):
    ref = quant.matmul_ref(x, w, int(T[name]), n_in)
    scale = np.abs(x.astype(np.float64)) @ np.abs(gguf_rows(w, name, n_in).astype(np.float64)).T
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= REL_TOL * scale + 1e-30), f"max rel err {np.max(err / (scale + 1e-30)):.2e}"


# ---- type table -----------------------------------------------------------------------------

def test_supported_types_and_sizes():
    assert quant.SUPPORTED_QTYPES == frozenset(int(T[n]) for n in TYPES)
    assert all(isinstance(t, int) for t in quant.SUPPORTED_QTYPES)
    for name in TYPES:
        assert quant.qtype_name(int(T[name])) == name
        block, size = GGML_QUANT_SIZES[T[name]]
        assert quant.row_bytes(int(T[name]), 4 * 256) == 4 * 256 // block * size
    assert quant.qtype_name(999) == "type#999"


def test_row_bytes_rejects_partial_blocks():
    with pytest.raises(ValueError, match="Q4_K"):
        quant.row_bytes(int(T.Q4_K), 300)
    with pytest.raises(ValueError, match="Q8_0"):
        quant.row_bytes(int(T.Q8_0), 33)


@pytest.mark.parametrize("code,name", [(int(T.Q2_K), "Q2_K"), (int(T.IQ4_NL), "IQ4_NL"), (999, "type#999")])
def test_unsupported_type_is_named(code, name):
    with pytest.raises(ValueError, match=name):
        quant.row_bytes(code, 256)
    with pytest.raises(ValueError, match=name):
        quant.dequantize(np.zeros((2, 144), np.uint8), code, 256)
    for mm in (quant.matmul, quant.matmul_q8):
        with pytest.raises(ValueError, match="unsupported tensor type code") as e:
            mm(np.zeros((1, 256), np.float32), readonly(np.zeros((2, 144), np.uint8)), code,
               np.zeros((1, 2), np.float32))
        assert str(code) in str(e.value) and name in str(e.value)
    with pytest.raises(ValueError, match=name):
        quant.dequant_row(readonly(np.zeros(144, np.uint8)), code, np.zeros(256, np.float32))


def test_wrong_row_size_is_rejected():
    w = finite_weights("Q4_1", 4, 64, np.random.default_rng(0))
    with pytest.raises(ValueError, match="wrong size"):
        quant.matmul(np.zeros((1, 96), np.float32), w, int(T.Q4_1), np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="wrong size"):
        quant.dequant_row(w[0], int(T.Q4_1), np.zeros(96, np.float32))


# ---- dequantization: bit-identical to gguf --------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_dequant_bit_identical_to_gguf(name):
    rng = np.random.default_rng(1)
    # float types: random bytes, so every bit pattern (subnormals, inf, nan) goes through
    n_in = 3 * qk(name) if name not in FLOAT_TYPES else 77
    w = random_blocks(name, 9, n_in, rng)
    ref = gguf_rows(w, name, n_in)
    assert np.array_equal(bits(quant.dequantize(w, int(T[name]), n_in)), bits(ref))
    row = np.empty(n_in, np.float32)
    for o in (0, 4, 8):
        quant.dequant_row(w[o], int(T[name]), row)
        assert np.array_equal(bits(row), bits(ref[o]))
    # a 1-D tensor (one row), as the norm vectors are stored
    assert np.array_equal(bits(quant.dequantize(w[2], int(T[name]), n_in)), bits(ref[2:3]))


# ---- the matrix product ----------------------------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_matmul_matches_reference(name):
    rng = np.random.default_rng(2)
    n_in = 2 * qk(name) if name not in FLOAT_TYPES else 101   # 101: vector and scalar tails
    w = finite_weights(name, 37, n_in, rng)
    x = rng.standard_normal((5, n_in)).astype(np.float32)
    out = np.full((5, 37), np.nan, np.float32)
    quant.matmul(x, w, int(T[name]), out)
    check_close(out, x, w, name, n_in)


@pytest.mark.parametrize("name", TYPES)
def test_matmul_batch_invariance(name):
    rng = np.random.default_rng(3)
    n_in = 2 * qk(name) if name not in FLOAT_TYPES else 101
    w = finite_weights(name, 19, n_in, rng)
    v = rng.standard_normal(n_in).astype(np.float32)
    one = np.empty((1, 19), np.float32)
    quant.matmul(v[None, :].copy(), w, int(T[name]), one)
    for n_rows in (2, 3, 4, 5, 6, 17, 64):        # in registers (1-3), buffered pairs (4+)
        for at in sorted({0, 1, n_rows // 2, n_rows - 1}):
            x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
            x[at] = v
            out = np.empty((n_rows, 19), np.float32)
            quant.matmul(x, w, int(T[name]), out)
            assert np.array_equal(bits(out[at]), bits(one[0])), (n_rows, at)


@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "Q6_K", "F16"])
def test_batch_invariance_on_the_threaded_path(name):
    # big enough for the prange path (the serial/threaded choice depends on the weight shape only)
    rng = np.random.default_rng(4)
    n_in = 512
    n_out = quant.SERIAL_MAX_ELEMENTS // n_in + 3
    w = finite_weights(name, n_out, n_in, rng)
    x = rng.standard_normal((6, n_in)).astype(np.float32)
    out = np.empty((6, n_out), np.float32)
    quant.matmul(x, w, int(T[name]), out)
    check_close(out, x, w, name, n_in)
    for r in (0, 5):
        one = np.empty((1, n_out), np.float32)
        quant.matmul(x[r:r + 1].copy(), w, int(T[name]), one)
        assert np.array_equal(bits(one[0]), bits(out[r]))


@pytest.mark.parametrize("name", TYPES)
def test_odd_shapes(name):
    rng = np.random.default_rng(5)
    n_ins = (1, 7, 8, 9, 33) if name in FLOAT_TYPES else (qk(name),)   # down to one block
    for n_in in n_ins:
        for n_out in (1, 3, 13):
            w = finite_weights(name, n_out, n_in, rng)
            x = rng.standard_normal((2, n_in)).astype(np.float32)
            out = np.empty((2, n_out), np.float32)
            quant.matmul(x, w, int(T[name]), out)
            check_close(out, x, w, name, n_in)


def test_empty_batch():
    w = finite_weights("Q4_1", 5, 32, np.random.default_rng(6))
    out = np.empty((0, 5), np.float32)
    quant.matmul(np.empty((0, 32), np.float32), w, int(T.Q4_1), out)


# ---- matmul_q8: int8 activations (llama.cpp's vec_dot_*_q8) ----------------------------------

@pytest.mark.parametrize("n_blocks", [2, 3])           # even and odd: both accumulator chains
@pytest.mark.parametrize("name", TYPES)
def test_matmul_q8_close_and_batch_invariant(name, n_blocks):
    rng = np.random.default_rng(7)
    n_in = n_blocks * qk(name) if name not in FLOAT_TYPES else 101
    code = int(T[name])
    w = finite_weights(name, 23, n_in, rng)
    x = rng.standard_normal((7, n_in)).astype(np.float32)
    x[2, :32] *= 100.0                                    # one block with a big max|x|
    out = np.empty((7, 23), np.float32)
    quant.matmul_q8(x, w, code, out)
    if code not in quant.Q8_QTYPES:                       # no int8 kernel: the float path
        ref = np.empty_like(out)
        quant.matmul(x, w, code, ref)
        assert np.array_equal(bits(out), bits(ref))
    else:
        # rounding x to int8 per 32-block moves each element by at most max|x_block| / 254
        wd = np.abs(gguf_rows(w, name, n_in).astype(np.float64))
        amax = np.abs(x.astype(np.float64)).reshape(7, -1, 32).max(-1).repeat(32, -1)
        bound = 1.001 * (amax / 254) @ wd.T + REL_TOL * (np.abs(x.astype(np.float64)) @ wd.T)
        err = np.abs(out - quant.matmul_ref(x, w, code, n_in).astype(np.float64))
        assert np.all(err <= bound), f"max err/bound {np.max(err / bound):.3f}"
    for n_rows in (1, 2, 3, 4, 5, 9):                     # every row-pass shape (4, 3, 2, 1)
        for at in sorted({0, n_rows // 2, n_rows - 1}):
            xb = rng.standard_normal((n_rows, n_in)).astype(np.float32)
            xb[at] = x[2]
            ob = np.empty((n_rows, 23), np.float32)
            quant.matmul_q8(xb, w, code, ob)
            assert np.array_equal(bits(ob[at]), bits(out[2])), (n_rows, at)


@pytest.mark.parametrize("name", ["Q4_1", "Q8_0"])
def test_matmul_q8_threaded_path(name):
    rng = np.random.default_rng(8)
    n_in = 512
    n_out = quant.SERIAL_MAX_ELEMENTS // n_in + 5
    w = finite_weights(name, n_out, n_in, rng)
    x = rng.standard_normal((5, n_in)).astype(np.float32)
    out = np.empty((5, n_out), np.float32)
    quant.matmul_q8(x, w, int(T[name]), out)
    one = np.empty((1, n_out), np.float32)
    quant.matmul_q8(x[4:5].copy(), w, int(T[name]), one)
    assert np.array_equal(bits(one[0]), bits(out[4]))
    ref = quant.matmul_ref(x, w, int(T[name]), n_in)
    scale = np.abs(x) @ np.abs(gguf_rows(w, name, n_in)).T
    assert np.max(np.abs(out - ref) / scale) < 1e-2


def _q8_blocks_oracle(x):
    # llama.cpp's quantize_row_q8_1 (the AVX2 rounding: nearest, ties to even), in float32:
    # per 32-block d = max|x| / 127, q = rint(x * (1 / d)), s = d * sum(q)
    xb = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    d = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = np.rint(xb * inv[..., None]).astype(np.int64)
    return q, d.astype(np.float64), d.astype(np.float64) * q.sum(-1)


def _weight_ints_oracle(w, name):
    # the integer quants and the (d, m) of every block, read straight from the block layout of
    # ggml-common.h (not through specnb): value = d * q + m
    size = GGML_QUANT_SIZES[T[name]][1]
    b = w.reshape(w.shape[0], -1, size)
    half = lambda off: b[..., off:off + 2].copy().view(np.float16)[..., 0].astype(np.float64)
    nib = lambda off: np.concatenate([b[..., off:off + 16] & 15, b[..., off:off + 16] >> 4], -1).astype(np.int64)
    hbits = lambda off: ((b[..., off:off + 4].copy().view(np.uint32)[..., :1].astype(np.int64)
                          >> np.arange(32)) & 1)
    zero = np.zeros(b.shape[:2])
    if name == "Q8_0":
        return b[..., 2:34].copy().view(np.int8).astype(np.int64), half(0), zero
    if name == "Q4_0":
        return nib(2) - 8, half(0), zero
    if name == "Q4_1":
        return nib(4), half(0), half(2)
    if name == "Q5_0":
        return (nib(6) | (hbits(2) << 4)) - 16, half(0), zero
    return nib(8) | (hbits(4) << 4), half(0), half(2)                     # Q5_1


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_matmul_q8_equals_llamacpp_integer_formula(name):
    """matmul_q8 = sum over blocks of d_w * d_x * sum(q_w * q_x) (+ m_w * s_x), the formula of
    ggml_vec_dot_*_q8_0 / _q8_1, evaluated here in float64 from the raw block bytes."""
    rng = np.random.default_rng(11)
    n_in, n_out = 5 * 32, 13
    w = finite_weights(name, n_out, n_in, rng)
    x = rng.standard_normal((6, n_in)).astype(np.float32)
    x[1, 40:64] = 0.0                                       # part of a block zero
    x[2, 64:96] = 0.0                                       # a whole block zero (d = 0)
    out = np.empty((6, n_out), np.float32)
    quant.matmul_q8(x, w, int(T[name]), out)
    qx, dx, sx = _q8_blocks_oracle(x)
    qw, dw, mw = _weight_ints_oracle(w, name)
    isum = np.einsum("rbk,obk->rob", qx, qw)                # exact integers
    terms = dw[None] * dx[:, None] * isum + mw[None] * sx[:, None]
    want = terms.sum(-1)
    scale = np.abs(terms).sum(-1) + 1e-30
    assert np.max(np.abs(out - want) / scale) < 1e-6
