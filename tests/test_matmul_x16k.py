"""Q4_K and Q6_K interleaved 16 rows at a time (kernels/matmul_x16k.py).

- every output is, bit for bit, the float chain the module promises, computed here from the GGUF
  super-block layout with exact rational arithmetic (an oracle that shares no code with the
  kernels but the activation rounding, which tests/test_matmul_q8.py checks against ggml's);
- that decoding of the super-blocks agrees with gguf-py's dequantization;
- a row's outputs are the same bits alone and in every batch size (both Q6_K traversals, past
  the tile height), and an output's bits do not depend on where its row sits (a group or the tail);
- the interleaved products agree with the per-row kernels within float rounding;
- the CPU backend multiplies Q4_K and Q6_K in this layout with int8 activations by default;
- bad input is refused by name.
"""
import gguf
import numpy as np
import pytest
from kernel_data import fma, same_bits_at_every_interleaved_distance

from specnb.kernels import qtypes as T
from specnb.kernels.matmul_q8 import matmul_q8, quantize_q8_k
from specnb.kernels.matmul_x16 import can_interleave, interleave
from specnb.kernels.matmul_x16k import R_MAX, interleave_k

TYPES = {"Q4_K": T.Q4_K, "Q6_K": T.Q6_K}


def super_block_ints(w, qt):
    """uint8 [n_out, row_bytes] -> per super-block the unsigned quants u [n_out, nb, 256], the
    integer scale of each element's sub-block sc [n_out, nb, 256], d [n_out, nb] and (Q4_K) the
    min of each element's sub-block mn and dmin, read from the layouts in qtypes.py's table:
    Q4_K weight = d sc u - dmin mn; Q6_K weight = d sc (u - 32)."""
    if qt == T.Q4_K:
        b = w.reshape(w.shape[0], -1, 144)
        d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
        dmin = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        s = b[..., 4:16].astype(np.int64)
        sc = np.zeros(s.shape[:-1] + (8,), np.int64)
        mn = np.zeros_like(sc)
        for j in range(8):
            if j < 4:
                sc[..., j], mn[..., j] = s[..., j] & 63, s[..., j + 4] & 63
            else:
                sc[..., j] = (s[..., j + 4] & 15) | ((s[..., j - 4] >> 6) << 4)
                mn[..., j] = (s[..., j + 4] >> 4) | ((s[..., j] >> 6) << 4)
        qs = b[..., 16:144].astype(np.int64)
        u = np.concatenate([np.concatenate([qs[..., 32 * c:32 * c + 32] & 15, qs[..., 32 * c:32 * c + 32] >> 4], -1)
                            for c in range(4)], -1)
        return u, sc.repeat(32, -1), d, mn.repeat(32, -1), dmin
    b = w.reshape(w.shape[0], -1, 210)
    ql, qh = b[..., 0:128].astype(np.int64), b[..., 128:192].astype(np.int64)
    sc = b[..., 192:208].view(np.int8).astype(np.int64)
    d = b[..., 208:210].copy().view(np.float16)[..., 0].astype(np.float32)
    u = np.zeros(b.shape[:-1] + (256,), np.int64)
    for e in range(256):
        h, i = divmod(e, 128)
        lo = ql[..., 64 * h + i % 64] & 15 if i < 64 else ql[..., 64 * h + i % 64] >> 4
        u[..., e] = lo | (((qh[..., 32 * h + i % 32] >> (2 * (i // 32))) & 3) << 4)
    return u, sc.repeat(16, -1), d, None, None


def oracle(x, w, qt):
    """The module's numerics from scratch: x rounded to block_q8_K; per output and super-block the
    exact integers (Q4_K: isum = sum sc u.q, imin = -sum mn bsum32; Q6_K: isum = sum sc (u.q - 32
    bsum16)), then acc = fma(float(isum), d_x * d_w, acc) (Q4_K: and fma(float(imin), d_x * dmin_w,
    acc)) super-block by super-block."""
    u, sc, d, mn, dmin = super_block_ints(w, qt)
    qx, dx, _ = quantize_q8_k(x)
    n_rows, n_in = x.shape
    nb = n_in // 256
    out = np.zeros((n_rows, w.shape[0]), np.float32)
    for r in range(n_rows):
        q = qx[r].astype(np.int64).reshape(nb, 256)
        for o in range(w.shape[0]):
            acc = np.float32(0)
            for b in range(nb):
                if qt == T.Q4_K:
                    isum = int((sc[o, b] * u[o, b] * q[b]).sum())
                    imin = -int((mn[o, b] * q[b]).sum())
                    acc = fma(np.float32(isum), np.float32(dx[r, b] * d[o, b]), acc)
                    acc = fma(np.float32(imin), np.float32(dx[r, b] * dmin[o, b]), acc)
                else:
                    isum = int((sc[o, b] * (u[o, b] - 32) * q[b]).sum())
                    acc = fma(np.float32(isum), np.float32(dx[r, b] * d[o, b]), acc)
            out[r, o] = acc
    return out


@pytest.mark.parametrize("name", sorted(TYPES))
def test_super_block_ints_read_the_file_format_as_gguf_does(name):
    qt = TYPES[name]
    w = T.random_blocks(qt, 5, 512, np.random.default_rng(1))
    u, sc, d, mn, dmin = super_block_ints(w, qt)
    if qt == T.Q4_K:
        mine = d[..., None].astype(np.float64) * sc * u - dmin[..., None].astype(np.float64) * mn
    else:
        mine = d[..., None].astype(np.float64) * sc * (u - 32)
    ref = gguf.quants.dequantize(w, gguf.GGMLQuantizationType(qt)).reshape(5, 2, 256)
    np.testing.assert_allclose(mine, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_every_output_is_the_promised_chain_bit_for_bit(name):
    qt = TYPES[name]
    rng = np.random.default_rng(2)
    n_out, n_in = 37, 512                        # two groups of 16 and a tail of 5; 2 super-blocks
    w = T.random_blocks(qt, n_out, n_in, rng)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    x[1, :256] *= 100.0
    x[2, 256:] = 0.0                             # a super-block of zeros: d = 0
    out = np.empty((3, n_out), np.float32)
    matmul_q8(x, interleave(w, qt), T.X16_OF[qt], out)
    want = oracle(x, w, qt)
    bad = np.argwhere(out.view(np.uint32) != want.view(np.uint32))
    first = tuple(bad[0]) if bad.size else None
    assert bad.size == 0, f"{name}: {len(bad)} outputs differ, first {first}: {out[first]!r} vs {want[first]!r}"
    # and the per-row kernels' sums, which fold lanes in another order, within float rounding
    ref = np.empty_like(out)
    matmul_q8(x, w, qt, ref)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_prefetch_distance_never_changes_a_bit(name):
    """ahead_x16 (kernels/tuning.py's interleaved distance) is a hint to the memory system: the
    same bits for one row, a tile, and batches of several tiles."""
    qt = TYPES[name]
    rng = np.random.default_rng(5)
    wx = interleave(T.random_blocks(qt, 35, 512, rng), qt)
    assert same_bits_at_every_interleaved_distance(wx, T.X16_OF[qt], 512, (1, 3, R_MAX + 1, 17), rng) == []


@pytest.mark.parametrize("name", sorted(TYPES))
def test_rows_are_the_same_bits_alone_and_in_every_batch(name):
    qt = TYPES[name]
    rng = np.random.default_rng(3)
    n_out, n_in = 35, 256
    wx = interleave(T.random_blocks(qt, n_out, n_in, rng), qt)
    k_max = 2 * R_MAX + 1
    x = rng.standard_normal((k_max, n_in)).astype(np.float32)
    one = np.empty((1, n_out), np.float32)
    alone = np.empty((k_max, n_out), np.float32)
    for r in range(k_max):
        matmul_q8(x[r:r + 1].copy(), wx, T.X16_OF[qt], one)
        alone[r] = one[0]
    for k in sorted({1, 2, 3, 4, 5, R_MAX, R_MAX + 1, k_max}):      # Q6_K: tiles of 4, then the rest
        out = np.empty((k, n_out), np.float32)
        matmul_q8(x[:k], wx, T.X16_OF[qt], out)
        assert np.array_equal(out.view(np.uint32), alone[:k].view(np.uint32)), f"{name}: k = {k}"


@pytest.mark.parametrize("name", sorted(TYPES))
def test_an_output_has_the_same_bits_in_a_group_and_in_the_tail(name):
    # the restricted output head: the rows of some token ids, copied and interleaved again
    qt = TYPES[name]
    rng = np.random.default_rng(4)
    w = T.random_blocks(qt, 48, 256, rng)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    full = np.empty((2, 48), np.float32)
    matmul_q8(x, interleave(w, qt), T.X16_OF[qt], full)
    ids = np.array([47, 0, 17, 5, 40, 41, 42, 2, 9, 33, 12, 30, 31, 32, 34, 44, 3, 7, 1])   # 16 + a tail of 3
    part = np.empty((2, len(ids)), np.float32)
    matmul_q8(x, interleave(np.ascontiguousarray(w[ids]), qt), T.X16_OF[qt], part)
    assert np.array_equal(part.view(np.uint32), full[:, ids].view(np.uint32))


def read_interleaved(wx, qt):
    """The whole groups of an interleaved matrix read back as matmul_x16k's docstring lays them out
    -> super_block_ints' tuple for those rows, with the quants as the file's bytes (Q4_K: qs; Q6_K:
    ql, then qh) in place of u."""
    G, rb = wx.shape[0] // 16, wx.shape[1]
    g = wx[:16 * G].reshape(G, rb // (144 if qt == T.Q4_K else 210), -1)     # [group, super-block, bytes]
    nb = g.shape[1]

    def rows(a):                                      # [G, nb, 16 (rows), ...] -> [16 G, nb, ...]
        return np.moveaxis(a, 2, 1).reshape((16 * G, nb) + a.shape[3:])

    def halves(lo, hi):
        return rows(g[..., lo:hi].copy().view(np.float16).astype(np.float32))

    def words(a):                                     # [G, nb, n, 16 (rows), 4] -> each row's n words' bytes
        return rows(a.transpose(0, 1, 3, 2, 4)).reshape(16 * G, nb, -1)
    if qt == T.Q4_K:
        planes = g[..., 64:256].reshape(G, nb, 12, 16).astype(np.int64)      # [plane, row]
        sc = planes[:, :, :8] & 63
        mn = (planes[:, :, :8] >> 6) | (((planes[:, :, 8 + np.arange(8) // 2] >> (4 * (np.arange(8) % 2))[:, None])
                                         & 15) << 2)
        return words(g[..., 256:].reshape(G, nb, 32, 16, 4)), rows(sc.transpose(0, 1, 3, 2)).repeat(32, -1), \
            halves(0, 32), rows(mn.transpose(0, 1, 3, 2)).repeat(32, -1), halves(32, 64)
    sc = rows(g[..., 32:288].view(np.int8).reshape(G, nb, 16, 16).transpose(0, 1, 3, 2)).astype(np.int64)
    v = g[..., 288:].reshape(G, nb, 2, 8, 3, 16, 4)          # [half, k, (ql 16h + k, ql 16h + 8 + k, qh 8h + k)]
    ql = v[:, :, :, :, :2].transpose(0, 1, 2, 4, 3, 5, 6).reshape(G, nb, 32, 16, 4)
    qh = v[:, :, :, :, 2].reshape(G, nb, 16, 16, 4)
    return np.concatenate([words(ql), words(qh)], -1), sc.repeat(16, -1), halves(0, 32), None, None


def test_interleaving_keeps_every_number_and_the_shape():
    rng = np.random.default_rng(5)
    for name, qt in TYPES.items():
        w = T.random_blocks(qt, 37, 512, rng)                                # 2 groups of 16 and a tail of 5
        wx = interleave(w, qt)
        assert wx.shape == w.shape and wx.dtype == np.uint8 and not wx.flags.writeable, name
        want, got = list(super_block_ints(w[:32], qt)), read_interleaved(wx, qt)
        want[0] = w[:32].reshape(32, 2, -1)[..., 16:144] if qt == T.Q4_K else w[:32].reshape(32, 2, -1)[..., 0:192]
        for field, a, b in zip(("quants", "scales", "d", "mins", "dmin"), want, got):
            assert (a is None and b is None) or np.array_equal(a, b), f"{name}: {field}"
        assert np.array_equal(wx[32:], w[32:]), f"{name}: the tail is the file's own rows"


def test_bad_input_is_refused_by_name():
    w = T.random_blocks(T.Q5_K, 16, 256, np.random.default_rng(6))
    with pytest.raises(ValueError, match="Q5_K has no interleaved layout"):
        interleave(w, T.Q5_K)
    with pytest.raises(ValueError, match="Q8_0 has no interleaved K layout"):
        interleave_k(np.zeros((16, 34), np.uint8), T.Q8_0)
    with pytest.raises(ValueError, match=r"of Q6_K super-blocks \(210 bytes each\), got uint8 \(16, 200\)"):
        interleave(np.zeros((16, 200), np.uint8), T.Q6_K)
    assert can_interleave(T.Q4_K) and can_interleave(T.Q6_K) and not can_interleave(T.Q5_K)
    assert T.qtype_name(T.Q4_KX16) == "Q4_Kx16" and T.qtype_name(T.Q6_KX16) == "Q6_Kx16"


def test_the_backend_interleaves_the_k_types_by_default(tiny_path, monkeypatch):
    from specnb.model import load_model
    from specnb.run.backend_cpu import CpuBackend
    m = load_model(tiny_path("Q4_K"))
    mats = lambda b: {w.qtype for ws in b._layer_w for w in ws}          # noqa: E731
    assert mats(CpuBackend(m, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_KX16}
    assert mats(CpuBackend(m, n_ctx=16, n_seq_max=1, activations="f32")) == {T.Q4_K}
    monkeypatch.setenv("SPECNB_REPACK", "q5")
    assert mats(CpuBackend(m, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_K}
    monkeypatch.setenv("SPECNB_REPACK", "k")
    assert mats(CpuBackend(m, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_KX16}
