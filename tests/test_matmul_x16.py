"""The types interleaved 16 rows at a time: the 32-block types (kernels/matmul_x16.py) and the
super-block types Q4_K and Q6_K (kernels/matmul_x16k.py), each property tested on both families.

- every output is, bit for bit, the float chain the module promises, computed here from the GGUF
  block layouts with exact rational arithmetic (an oracle that shares no code with the kernels
  but, for the super-blocks, the activation rounding, which tests/test_matmul_q8.py checks against
  ggml's), and agrees with the per-row kernels within float rounding;
- that decoding of the blocks agrees with gguf-py's dequantization (so the oracle reads the file
  format as llama.cpp's own Python package does);
- a row's outputs are the same bits alone and in every batch size, past the tile height (both
  Q6_K traversals), at every prefetch distance;
- an output's bits do not depend on where its row sits: a group's lane or the tail;
- the interleaved bytes read back as each module's docstring lays them out;
- the CPU backend multiplies these types in this layout with int8 activations, and only then
  (the 32-block types where asked, Q4_K and Q6_K by default);
- bad input is refused by name.
"""
import gguf
import numpy as np
import pytest
from kernel_data import fma, same_bits_at_every_interleaved_distance

from specnb.kernels import qtypes as T
from specnb.kernels import matmul_x16, matmul_x16k
from specnb.kernels.matmul_q8 import matmul_q8, quantize_q8_k
from specnb.kernels.matmul_x16 import can_interleave, interleave
from specnb.kernels.matmul_x16k import interleave_k

BLOCK_TYPES = {"Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "Q4_1": T.Q4_1, "Q5_0": T.Q5_0, "Q5_1": T.Q5_1}
K_TYPES = {"Q4_K": T.Q4_K, "Q6_K": T.Q6_K}
TYPES = {**BLOCK_TYPES, **K_TYPES}


def family(qt):
    """(elements per block, the module's tile height R_MAX) of a type's interleaved family."""
    return (256, matmul_x16k.R_MAX) if qt in K_TYPES.values() else (32, matmul_x16.R_MAX)


def block_ints(w, qt):
    """uint8 [n_out, row_bytes] -> (integer weights [n_out, nb, 32], d [n_out, nb], m or None),
    read from the block layouts of qtypes.py's table: weight = d * int (+ m)."""
    bs = {T.Q8_0: 34, T.Q4_0: 18, T.Q4_1: 20, T.Q5_0: 22, T.Q5_1: 24}[qt]
    b = w.reshape(w.shape[0], -1, bs)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32) if qt in (T.Q4_1, T.Q5_1) else None
    if qt == T.Q8_0:
        return b[..., 2:].view(np.int8).astype(np.int64), d, m
    qs0 = {T.Q4_0: 2, T.Q4_1: 4, T.Q5_0: 6, T.Q5_1: 8}[qt]
    qs = b[..., qs0:qs0 + 16].astype(np.int64)
    u = np.concatenate([qs & 15, qs >> 4], axis=-1)
    if qt in (T.Q5_0, T.Q5_1):
        qh = b[..., qs0 - 4:qs0].copy().view(np.uint32)[..., 0].astype(np.int64)
        u = u | (((qh[..., None] >> np.arange(32)) & 1) << 4)
    off = {T.Q4_0: 8, T.Q5_0: 16}.get(qt, 0)
    return u - off, d, m


def oracle_blocks(x, w, qt):
    """The module's numerics from scratch: each 32-block of x rounded as ggml's quantize_row_q8_0
    (d = max|x| / 127, q = round(x * (1 / d))), the exact integer dot of each block, then per
    output acc = fma(float(i_b), d_w * d_x, acc) (+ fma(m_w, d_x * sum q, acc)) block by block."""
    wi, dw, mw = block_ints(w, qt)
    n_rows, n_in = x.shape
    out = np.zeros((n_rows, w.shape[0]), np.float32)
    for r in range(n_rows):
        xb = x[r].reshape(-1, 32)
        dx = (np.abs(xb).max(axis=1) / np.float32(127)).astype(np.float32)
        inv = np.where(dx != 0, np.float32(1) / np.where(dx != 0, dx, 1), 0).astype(np.float32)
        q = np.rint((xb * inv[:, None]).astype(np.float32)).astype(np.int64)
        sx = (dx * q.sum(axis=1).astype(np.float32)).astype(np.float32)
        for o in range(w.shape[0]):
            acc = np.float32(0)
            for b in range(xb.shape[0]):
                acc = fma(np.float32(int((wi[o, b] * q[b]).sum())), np.float32(dw[o, b] * dx[b]), acc)
                if mw is not None:
                    acc = fma(mw[o, b], sx[b], acc)
            out[r, o] = acc
    return out


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


def oracle_super_blocks(x, w, qt):
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


def oracle(x, w, qt):
    return (oracle_super_blocks if qt in K_TYPES.values() else oracle_blocks)(x, w, qt)


def dequantized(w, qt):
    """float64 weights [n_out, nb, elements per block] from block_ints or super_block_ints."""
    if qt in BLOCK_TYPES.values():
        wi, d, m = block_ints(w, qt)
        return wi * d[..., None].astype(np.float64) + (0 if m is None else m[..., None])
    u, sc, d, mn, dmin = super_block_ints(w, qt)
    if qt == T.Q4_K:
        return d[..., None].astype(np.float64) * sc * u - dmin[..., None].astype(np.float64) * mn
    return d[..., None].astype(np.float64) * sc * (u - 32)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_blocks_read_the_file_format_as_gguf_does(name):
    qt = TYPES[name]
    qk, _ = family(qt)
    w = T.random_blocks(qt, 5, 2 * qk, np.random.default_rng(1))
    ref = gguf.quants.dequantize(w, gguf.GGMLQuantizationType(qt)).reshape(5, 2, qk)
    np.testing.assert_allclose(dequantized(w, qt), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_every_output_is_the_promised_chain_bit_for_bit(name):
    qt = TYPES[name]
    qk, _ = family(qt)
    rng = np.random.default_rng(2)
    n_out, n_in = 37, (3 if qk == 32 else 2) * qk     # two groups of 16 and a tail of 5
    w = T.random_blocks(qt, n_out, n_in, rng)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    x[1, :qk] *= 100.0
    x[2, qk:2 * qk] = 0.0                        # a block of zeros: d = 0
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
    qk, r_max = family(qt)
    rng = np.random.default_rng(5)
    n_out, n_in = (53, 160) if qk == 32 else (35, 512)
    wx = interleave(T.random_blocks(qt, n_out, n_in, rng), qt)
    assert same_bits_at_every_interleaved_distance(wx, T.X16_OF[qt], n_in, (1, 3, r_max + 1, 17), rng) == []


@pytest.mark.parametrize("name", sorted(TYPES))
def test_rows_are_the_same_bits_alone_and_in_every_batch(name):
    qt = TYPES[name]
    qk, r_max = family(qt)
    rng = np.random.default_rng(3)
    n_out, n_in = (53, 160) if qk == 32 else (35, 256)
    wx = interleave(T.random_blocks(qt, n_out, n_in, rng), qt)
    k_max = 2 * r_max + 1
    x = rng.standard_normal((k_max, n_in)).astype(np.float32)
    one = np.empty((1, n_out), np.float32)
    alone = np.empty((k_max, n_out), np.float32)
    for r in range(k_max):
        matmul_q8(x[r:r + 1].copy(), wx, T.X16_OF[qt], one)
        alone[r] = one[0]
    for k in sorted({1, 2, 3, 4, 5, r_max, r_max + 1, k_max}):      # Q6_K: tiles of 4, then the rest
        out = np.empty((k, n_out), np.float32)
        matmul_q8(x[:k], wx, T.X16_OF[qt], out)
        assert np.array_equal(out.view(np.uint32), alone[:k].view(np.uint32)), f"{name}: k = {k}"


@pytest.mark.parametrize("name", sorted(TYPES))
def test_an_output_has_the_same_bits_in_a_group_and_in_the_tail(name):
    # the restricted output head: the rows of some token ids, copied and interleaved again
    qt = TYPES[name]
    qk, _ = family(qt)
    rng = np.random.default_rng(4)
    n_in = 4 * qk if qk == 32 else qk
    w = T.random_blocks(qt, 48, n_in, rng)
    x = rng.standard_normal((2, n_in)).astype(np.float32)
    full = np.empty((2, 48), np.float32)
    matmul_q8(x, interleave(w, qt), T.X16_OF[qt], full)
    ids = np.array([47, 0, 17, 5, 40, 41, 42, 2, 9, 33, 12, 30, 31, 32, 34, 44, 3, 7, 1])   # 16 + a tail of 3
    part = np.empty((2, len(ids)), np.float32)
    matmul_q8(x, interleave(np.ascontiguousarray(w[ids]), qt), T.X16_OF[qt], part)
    assert np.array_equal(part.view(np.uint32), full[:, ids].view(np.uint32))


def test_fewer_rows_than_a_group_are_all_tail():
    # a matrix (or a restricted head) of fewer than 16 rows has no group: the file's own rows, and
    # the product runs the tail's chain, the same bits as those rows in a group
    rng = np.random.default_rng(7)
    for qt in T.X16_OF:
        n_in = 256 if qt in (T.Q4_K, T.Q6_K) else 64
        w = T.random_blocks(qt, 20, n_in, rng)
        few = interleave(np.ascontiguousarray(w[:5]), qt)
        assert few.shape == (5, w.shape[1]) and np.array_equal(few, w[:5]) and not few.flags.writeable
        x = rng.standard_normal((2, n_in)).astype(np.float32)
        part, full = np.empty((2, 5), np.float32), np.empty((2, 20), np.float32)
        matmul_q8(x, few, T.X16_OF[qt], part)
        matmul_q8(x, interleave(w, qt), T.X16_OF[qt], full)
        assert np.array_equal(part.view(np.uint32), full[:, :5].view(np.uint32)), T.qtype_name(qt)


def test_interleaving_32_blocks_keeps_shape_and_bytes():
    rng = np.random.default_rng(5)
    for name, qt in BLOCK_TYPES.items():
        w = T.random_blocks(qt, 21, 64, rng)
        wx = interleave(w, qt)
        assert wx.shape == w.shape and wx.dtype == np.uint8 and not wx.flags.writeable, name
        assert np.array_equal(np.sort(wx[:16].reshape(-1)), np.sort(w[:16].reshape(-1))) or qt in (T.Q5_0, T.Q5_1)
        assert np.array_equal(wx[16:], w[16:]), f"{name}: the tail is the file's own rows"
        assert not np.array_equal(wx[:16], w[:16]), f"{name}: the group is regrouped"


def test_regrouped_32_blocks_read_back_as_the_documented_layout():
    """The interleaved bytes, read as the module docstring lays them out (per group of 16 rows and
    block: the 16 d, the 16 m, the quants' 4-byte words side by side, the fifth bits), give each
    row's own block: its d, m and integer weights (block_ints, from the GGUF layout)."""
    rng = np.random.default_rng(11)
    for name, qt in BLOCK_TYPES.items():
        w = T.random_blocks(qt, 37, 96, rng)                   # 2 groups and a tail of 5
        wx = interleave(w, qt).reshape(-1)
        ints, d, m = block_ints(w, qt)
        bb, nb = w.shape[1] // 3, 3
        for g in range(2):
            for b in range(nb):
                o = 16 * g * w.shape[1] + 16 * bb * b
                blk = wx[o:o + 16 * bb]
                rows = slice(16 * g, 16 * g + 16)
                assert np.array_equal(blk[:32].view(np.float16).astype(np.float32), d[rows, b]), name
                q0 = 32
                if m is not None:
                    assert np.array_equal(blk[32:64].view(np.float16).astype(np.float32), m[rows, b]), name
                    q0 = 64
                nq = 32 if qt == T.Q8_0 else 16
                words = blk[q0:q0 + 16 * nq].reshape(nq // 4, 16, 4)          # [k, r, j]
                e = (4 * np.arange(nq // 4)[:, None] + np.arange(4)).reshape(-1)   # element 4k + j
                if qt == T.Q8_0:
                    got = words.transpose(1, 0, 2).reshape(16, 32).view(np.int8).astype(np.int64)
                    assert np.array_equal(got, ints[rows, b]), name
                    continue
                qs = words.transpose(1, 0, 2).reshape(16, 16).astype(np.int64)
                u = np.empty((16, 32), np.int64)
                u[:, e], u[:, 16 + e] = qs & 15, qs >> 4
                if qt in (T.Q5_0, T.Q5_1):
                    h = blk[q0 + 16 * nq:q0 + 16 * nq + 64].reshape(16, 4).astype(np.int64)   # [r, j]
                    for k in range(8):
                        u[:, 4 * k + np.arange(4)] |= ((h >> k) & 1) << 4
                off = {T.Q4_0: 8, T.Q5_0: 16}.get(qt, 0)
                assert np.array_equal(u - off, ints[rows, b]), name
        assert np.array_equal(wx.reshape(w.shape)[32:], w[32:]), name


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


def test_interleaving_super_blocks_keeps_every_number_and_the_shape():
    rng = np.random.default_rng(5)
    for name, qt in K_TYPES.items():
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
    with pytest.raises(ValueError, match=r"of Q8_0 blocks \(34 bytes each\), got float32"):
        interleave(np.zeros((16, 34), np.float32), T.Q8_0)
    with pytest.raises(ValueError, match="Q8_0 has no interleaved K layout"):
        interleave_k(np.zeros((16, 34), np.uint8), T.Q8_0)
    with pytest.raises(ValueError, match=r"of Q6_K super-blocks \(210 bytes each\), got uint8 \(16, 200\)"):
        interleave(np.zeros((16, 200), np.uint8), T.Q6_K)
    assert can_interleave(T.Q5_0) and can_interleave(T.Q4_K) and can_interleave(T.Q6_K)
    assert not can_interleave(T.Q5_K)
    assert T.qtype_name(T.Q5_0X16) == "Q5_0x16"
    assert T.qtype_name(T.Q4_KX16) == "Q4_Kx16" and T.qtype_name(T.Q6_KX16) == "Q6_Kx16"


def test_the_backend_interleaves_with_int8_activations_only(tiny_path, monkeypatch):
    from specnb.errors import ParamError
    from specnb.model import load_model
    from specnb.run.backend_cpu import CpuBackend, kernel_qtypes, repacked_qtypes
    m = load_model(tiny_path("Q5_0"))
    mats = lambda b: {w.qtype for ws in b._layer_w for w in ws}          # noqa: E731
    assert mats(CpuBackend(m, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q5_0X16}
    assert mats(CpuBackend(m, n_ctx=16, n_seq_max=1, activations="f32")) == {T.Q5_0}
    assert T.Q5_0X16 in kernel_qtypes(m, True)[1] and T.Q5_0 not in kernel_qtypes(m, True)[1]
    assert kernel_qtypes(m, False)[1] >= {T.Q5_0}
    # SPECNB_REPACK: the default keeps Q4_0 as the file has it; all / none
    m4 = load_model(tiny_path("Q4_0"))
    assert mats(CpuBackend(m4, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_0}
    monkeypatch.setenv("SPECNB_REPACK", "all")
    assert mats(CpuBackend(m4, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_0X16}
    monkeypatch.setenv("SPECNB_REPACK", "none")
    assert repacked_qtypes() == () and kernel_qtypes(m, True)[1] >= {T.Q5_0}
    monkeypatch.setenv("SPECNB_REPACK", "some")
    with pytest.raises(ParamError, match="SPECNB_REPACK='some'"):
        repacked_qtypes()


def test_a_file_asks_for_its_own_interleaved_types(tiny_path, tmp_path, monkeypatch):
    """forge.requantize(repack=True) writes specnb.repack; the backend interleaves those types for
    that model only (the default pair's per-row Q4_0 stays), unless SPECNB_REPACK says otherwise."""
    from specnb.errors import GGUFError
    from specnb.gguf.file import REPACK_KEY
    from specnb.gguf.forge import requantize, rewrite
    from specnb.model import load_model
    from specnb.run.backend_cpu import CpuBackend, repacked_qtypes
    monkeypatch.delenv("SPECNB_REPACK", raising=False)
    mats = lambda b: {w.qtype for ws in b._layer_w for w in ws} | {b._output.qtype}   # noqa: E731
    plain = load_model(requantize(tiny_path("Q8_0", tied=False), tmp_path / "plain.gguf", "Q4_0"))
    asks = load_model(requantize(tiny_path("Q8_0", tied=False), tmp_path / "asks.gguf", "Q4_0", repack=True))
    assert plain.file.get(REPACK_KEY) is None and list(asks.file.get(REPACK_KEY)) == ["Q4_0"]
    assert mats(CpuBackend(plain, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_0}
    assert mats(CpuBackend(asks, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_0X16}
    assert mats(CpuBackend(asks, n_ctx=16, n_seq_max=1, activations="f32")) == {T.Q4_0}
    assert T.Q4_0 in repacked_qtypes(asks) and T.Q4_0 not in repacked_qtypes(plain)
    monkeypatch.setenv("SPECNB_REPACK", "none")                 # the variable wins over the file
    assert mats(CpuBackend(asks, n_ctx=16, n_seq_max=1, activations="q8")) == {T.Q4_0}
    monkeypatch.delenv("SPECNB_REPACK")
    bad = load_model(rewrite(asks.path, tmp_path / "bad.gguf", metadata={REPACK_KEY: ["Q4_0", "Q5_K"]}))
    with pytest.raises(GGUFError, match=r"specnb.repack = \['Q4_0', 'Q5_K'\]: expected a list of the type names"):
        CpuBackend(bad, n_ctx=16, n_seq_max=1, activations="q8")


def test_a_requantized_draft_is_forged_once_into_the_cache(pair_paths, monkeypatch, tmp_path):
    """registry.requantized_draft: any file's copy goes into the cache folder (never beside the
    user's file), forged once, and a copy asked for again is itself; a copy whose file is gone is
    removed; the real draft's copy is a registry entry."""
    import os
    from specnb.gguf.file import REPACK_KEY, SOURCE_KEY, GGUFFile
    from specnb.model import registry
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path / "cache"))
    src = pair_paths[1]
    before = sorted(os.listdir(os.path.dirname(src)))
    q = registry.requantized_draft(src, progress=False)
    assert os.path.dirname(q) == str(tmp_path / "cache") and sorted(os.listdir(os.path.dirname(src))) == before
    g = GGUFFile(q)
    assert list(g.get(REPACK_KEY)) == ["Q4_0"] and g.tensors["blk.0.attn_q.weight"].type_name == "Q4_0"
    g.close()
    mtime = os.stat(q).st_mtime_ns
    assert registry.requantized_draft(src, progress=False) == q and os.stat(q).st_mtime_ns == mtime
    assert registry.requantized_draft(q, progress=False) == q                 # a copy is its own
    mine = tmp_path / "mine.gguf"                      # a file that changes: one copy, the newest
    mine.write_bytes(open(src, "rb").read())
    a = registry.requantized_draft(str(mine), progress=False)
    os.utime(mine, ns=(mtime + 10**9, mtime + 10**9))
    b = registry.requantized_draft(str(mine), progress=False)
    assert a != b and os.path.isfile(b) and not os.path.exists(a) and os.path.isfile(q)
    g = GGUFFile(b)
    assert g.get(SOURCE_KEY) == str(mine)
    g.close()
    mine.unlink()                                     # its file gone: the next forging removes its copy
    other = tmp_path / "other.gguf"
    other.write_bytes(open(src, "rb").read())
    c = registry.requantized_draft(str(other), progress=False)
    assert os.path.isfile(c) and not os.path.exists(b) and os.path.isfile(q)
    e = registry.REGISTRY[registry.REAL_DRAFT_Q4]
    assert e.forged_from == registry.REAL_DRAFT and e.repack
    assert registry.requantized_draft(f"/anywhere/{e.file_name}", progress=False) == registry.REAL_DRAFT_Q4


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
