"""kernels/matmul.py (and the type table of qtypes.py): dequantization bit-exact against gguf,
the float32 matmul against the NumPy oracle, and batch invariance (a row's outputs are
bit-identical whatever the batch around it)."""
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from kernel_data import (FLOAT_TYPES, TYPES, bits, finite_weights, gguf_rows, on_the_threaded_path, qk,
                         random_blocks, readonly)
from kernel_data import check_close as _check_close
from specnb.kernels import matmul as M
from specnb.kernels import matmul_q8 as Q8
from specnb.kernels import qtypes as QT


def check_close(out, x, w, name, n_in):
    _check_close(out, x, w, name, n_in, M.matmul_ref(x, w, int(T[name]), n_in))


# ---- type table -----------------------------------------------------------------------------

def test_supported_types_and_sizes():
    assert sorted(TYPES) == sorted(["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
    assert QT.SUPPORTED_QTYPES == frozenset(int(T[n]) for n in TYPES)
    assert all(isinstance(t, int) for t in QT.SUPPORTED_QTYPES)
    for name in TYPES:
        assert QT.qtype_name(int(T[name])) == name
        block, size = GGML_QUANT_SIZES[T[name]]
        assert QT.row_bytes(int(T[name]), 4 * 256) == 4 * 256 // block * size
    assert QT.qtype_name(999) == "type#999"


def test_row_bytes_rejects_partial_blocks():
    with pytest.raises(ValueError, match="Q4_K"):
        QT.row_bytes(int(T.Q4_K), 300)
    with pytest.raises(ValueError, match="Q8_0"):
        QT.row_bytes(int(T.Q8_0), 33)


@pytest.mark.parametrize("code,name", [(int(T.IQ2_XXS), "IQ2_XXS"), (int(T.IQ4_NL), "IQ4_NL"), (999, "type#999")])
def test_unsupported_type_is_named(code, name):
    with pytest.raises(ValueError, match=name):
        QT.row_bytes(code, 256)
    with pytest.raises(ValueError, match=name):
        M.dequantize(np.zeros((2, 144), np.uint8), code, 256)
    for mm in (M.matmul, Q8.matmul_q8):
        with pytest.raises(ValueError, match="unsupported tensor type code") as e:
            mm(np.zeros((1, 256), np.float32), readonly(np.zeros((2, 144), np.uint8)), code,
               np.zeros((1, 2), np.float32))
        assert str(code) in str(e.value) and name in str(e.value)
    with pytest.raises(ValueError, match=name):
        M.dequant_row(readonly(np.zeros(144, np.uint8)), code, np.zeros(256, np.float32))


def test_wrong_row_size_is_rejected():
    w = finite_weights("Q4_1", 4, 64, np.random.default_rng(0))
    with pytest.raises(ValueError, match="wrong size"):
        M.matmul(np.zeros((1, 96), np.float32), w, int(T.Q4_1), np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="wrong size"):
        M.dequant_row(w[0], int(T.Q4_1), np.zeros(96, np.float32))


# ---- dequantization: bit-identical to gguf --------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_dequant_bit_identical_to_gguf(name):
    rng = np.random.default_rng(1)
    # random bytes, so every bit pattern (subnormals, inf, nan) goes through
    n_in = 3 * qk(name) if name not in FLOAT_TYPES else 77
    w = random_blocks(name, 9, n_in, rng)
    ref = gguf_rows(w, name, n_in)
    assert np.array_equal(bits(M.dequantize(w, int(T[name]), n_in)), bits(ref))
    row = np.empty(n_in, np.float32)
    for o in (0, 4, 8):
        M.dequant_row(w[o], int(T[name]), row)
        assert np.array_equal(bits(row), bits(ref[o]))
    # a 1-D tensor (one row), as the norm vectors are stored
    assert np.array_equal(bits(M.dequantize(w[2], int(T[name]), n_in)), bits(ref[2:3]))


# ---- the matrix product ----------------------------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_matmul_matches_reference(name):
    rng = np.random.default_rng(2)
    n_in = 2 * qk(name) if name not in FLOAT_TYPES else 101   # 101: vector and scalar tails
    w = finite_weights(name, 37, n_in, rng)
    x = rng.standard_normal((5, n_in)).astype(np.float32)
    out = np.full((5, 37), np.nan, np.float32)
    M.matmul(x, w, int(T[name]), out)
    check_close(out, x, w, name, n_in)


@pytest.mark.parametrize("name", TYPES)
def test_matmul_batch_invariance(name):
    rng = np.random.default_rng(3)
    n_in = 2 * qk(name) if name not in FLOAT_TYPES else 101
    w = finite_weights(name, 19, n_in, rng)
    v = rng.standard_normal(n_in).astype(np.float32)
    one = np.empty((1, 19), np.float32)
    M.matmul(v[None, :].copy(), w, int(T[name]), one)
    for n_rows in (2, 3, 4, 5, 6, 17, 64):        # in registers (1-3), buffered pairs (4+)
        for at in sorted({0, 1, n_rows // 2, n_rows - 1}):
            x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
            x[at] = v
            out = np.empty((n_rows, 19), np.float32)
            M.matmul(x, w, int(T[name]), out)
            assert np.array_equal(bits(out[at]), bits(one[0])), (n_rows, at)


@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "Q6_K", "F16"])
def test_batch_invariance_on_the_threaded_path(name):
    x, w, out = on_the_threaded_path(M.matmul, name, 6, 3, np.random.default_rng(4))
    check_close(out, x, w, name, x.shape[1])


@pytest.mark.parametrize("name", TYPES)
def test_odd_shapes(name):
    rng = np.random.default_rng(5)
    n_ins = (1, 7, 8, 9, 33) if name in FLOAT_TYPES else (qk(name),)   # down to one block
    for n_in in n_ins:
        for n_out in (1, 3, 13):
            w = finite_weights(name, n_out, n_in, rng)
            x = rng.standard_normal((2, n_in)).astype(np.float32)
            out = np.empty((2, n_out), np.float32)
            M.matmul(x, w, int(T[name]), out)
            check_close(out, x, w, name, n_in)


def test_empty_batch():
    w = finite_weights("Q4_1", 5, 32, np.random.default_rng(6))
    out = np.empty((0, 5), np.float32)
    M.matmul(np.empty((0, 32), np.float32), w, int(T.Q4_1), out)


def test_the_modules_own_check_passes():
    # matmul.self_check(): the same properties for every type, at the batch sizes of a verification
    res = M.self_check(rows=(1, 3, 9))
    assert res and all(ok for _, _, ok, _ in res), [r for r in res if not r[2]]

