"""The 32-block types interleaved 16 rows at a time (kernels/matmul_x16.py).

- every output is, bit for bit, the float chain the module promises, computed here from the GGUF
  block layout with exact rational arithmetic (an oracle that shares no code with the kernels);
- that decoding of the blocks agrees with gguf-py's dequantization (so the oracle reads the file
  format as llama.cpp's own Python package does);
- a row's outputs are the same bits alone and in every batch size, past the tile height;
- an output's bits do not depend on where its row sits: a group's lane or the tail;
- the CPU backend multiplies the 32-block types in this layout with int8 activations, and only then;
- bad input is refused by name.
"""
import gguf
import numpy as np
import pytest
from kernel_data import fma, same_bits_at_every_interleaved_distance

from specnb.kernels import qtypes as T
from specnb.kernels.matmul_q8 import matmul_q8
from specnb.kernels.matmul_x16 import R_MAX, can_interleave, interleave

TYPES = {"Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "Q4_1": T.Q4_1, "Q5_0": T.Q5_0, "Q5_1": T.Q5_1}


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


def oracle(x, w, qt):
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


@pytest.mark.parametrize("name", sorted(TYPES))
def test_block_ints_read_the_file_format_as_gguf_does(name):
    qt = TYPES[name]
    w = T.random_blocks(qt, 5, 64, np.random.default_rng(1))
    wi, d, m = block_ints(w, qt)
    mine = wi * d[..., None].astype(np.float64) + (0 if m is None else m[..., None])
    ref = gguf.quants.dequantize(w, gguf.GGMLQuantizationType(qt)).reshape(5, 2, 32)
    np.testing.assert_allclose(mine, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_every_output_is_the_promised_chain_bit_for_bit(name):
    qt = TYPES[name]
    rng = np.random.default_rng(2)
    n_out, n_in = 37, 96                         # two groups of 16 and a tail of 5; 3 blocks
    w = T.random_blocks(qt, n_out, n_in, rng)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    x[1, :32] *= 100.0
    x[2, 32:64] = 0.0                            # a block of zeros: d = 0
    out = np.empty((3, n_out), np.float32)
    matmul_q8(x, interleave(w, qt), T.X16_OF[qt], out)
    want = oracle(x, w, qt)
    bad = np.argwhere(out.view(np.uint32) != want.view(np.uint32))
    first = tuple(bad[0]) if bad.size else None
    assert bad.size == 0, f"{name}: {len(bad)} outputs differ, first {first}: {out[first]!r} vs {want[first]!r}"


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_prefetch_distance_never_changes_a_bit(name):
    """ahead_x16 (kernels/tuning.py's interleaved distance) is a hint to the memory system: the
    same bits for one row, a tile, and batches of several tiles."""
    qt = TYPES[name]
    rng = np.random.default_rng(5)
    wx = interleave(T.random_blocks(qt, 53, 160, rng), qt)
    assert same_bits_at_every_interleaved_distance(wx, T.X16_OF[qt], 160, (1, 3, R_MAX + 1, 17), rng) == []


@pytest.mark.parametrize("name", sorted(TYPES))
def test_rows_are_the_same_bits_alone_and_in_every_batch(name):
    qt = TYPES[name]
    rng = np.random.default_rng(3)
    n_out, n_in = 53, 160
    wx = interleave(T.random_blocks(qt, n_out, n_in, rng), qt)
    k_max = 2 * R_MAX + 1
    x = rng.standard_normal((k_max, n_in)).astype(np.float32)
    one = np.empty((1, n_out), np.float32)
    alone = np.empty((k_max, n_out), np.float32)
    for r in range(k_max):
        matmul_q8(x[r:r + 1].copy(), wx, T.X16_OF[qt], one)
        alone[r] = one[0]
    for k in sorted({1, 2, 3, R_MAX, R_MAX + 1, k_max}):
        out = np.empty((k, n_out), np.float32)
        matmul_q8(x[:k], wx, T.X16_OF[qt], out)
        assert np.array_equal(out.view(np.uint32), alone[:k].view(np.uint32)), f"{name}: k = {k}"


def test_an_output_has_the_same_bits_in_a_group_and_in_the_tail():
    # the restricted output head: the rows of some token ids, copied and interleaved again
    qt = T.Q8_0
    rng = np.random.default_rng(4)
    w = T.random_blocks(qt, 64, 128, rng)
    x = rng.standard_normal((2, 128)).astype(np.float32)
    full = np.empty((2, 64), np.float32)
    matmul_q8(x, interleave(w, qt), T.X16_OF[qt], full)
    ids = np.array([63, 0, 17, 5, 40, 41, 42, 2, 9, 33, 12, 50, 51, 52, 53, 54, 3, 7, 1])   # 16 + a tail of 3
    part = np.empty((2, len(ids)), np.float32)
    matmul_q8(x, interleave(np.ascontiguousarray(w[ids]), qt), T.X16_OF[qt], part)
    assert np.array_equal(part.view(np.uint32), full[:, ids].view(np.uint32))


def test_interleaving_keeps_shape_and_bytes():
    rng = np.random.default_rng(5)
    for name, qt in TYPES.items():
        w = T.random_blocks(qt, 21, 64, rng)
        wx = interleave(w, qt)
        assert wx.shape == w.shape and wx.dtype == np.uint8 and not wx.flags.writeable, name
        assert np.array_equal(np.sort(wx[:16].reshape(-1)), np.sort(w[:16].reshape(-1))) or qt in (T.Q5_0, T.Q5_1)
        assert np.array_equal(wx[16:], w[16:]), f"{name}: the tail is the file's own rows"
        assert not np.array_equal(wx[:16], w[:16]), f"{name}: the group is regrouped"


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


def test_bad_input_is_refused_by_name():
    w = T.random_blocks(T.Q5_K, 16, 256, np.random.default_rng(6))
    with pytest.raises(ValueError, match="Q5_K has no interleaved layout"):
        interleave(w, T.Q5_K)
    with pytest.raises(ValueError, match=r"of Q8_0 blocks \(34 bytes each\), got float32"):
        interleave(np.zeros((16, 34), np.float32), T.Q8_0)
    assert can_interleave(T.Q5_0) and not can_interleave(T.Q5_K)
    assert T.qtype_name(T.Q5_0X16) == "Q5_0x16"


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


def test_regrouped_bytes_read_back_as_the_documented_layout():
    """The interleaved bytes, read as the module docstring lays them out (per group of 16 rows and
    block: the 16 d, the 16 m, the quants' 4-byte words side by side, the fifth bits), give each
    row's own block: its d, m and integer weights (block_ints, from the GGUF layout)."""
    rng = np.random.default_rng(11)
    for name, qt in TYPES.items():
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
