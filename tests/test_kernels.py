"""The small CPU kernels (norm, rope, attention, activations) against their NumPy references, and
the whole forward pass implementation by implementation, side by side: the NumPy reference, the
njit kernels called one by one from Python (`forward_steps`), the fused compiled pass
(`forward`), and the CUDA backend under the simulator (in its own process)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specnb.run.context import Batch, Context
from specnb.kernels import activations as A
from specnb.kernels import attention as At
from specnb.kernels import norm as N
from specnb.kernels import rope as R
from specnb.model import load_model
from specnb.model.reference import Reference


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


# ---- one kernel at a time ----------------------------------------------------------------------

def test_rmsnorm_against_reference():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((5, 100)) * 3).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(100)).astype(np.float32)
    out = N.rmsnorm(x, w, 1e-5, np.empty_like(x))
    assert np.abs(out - N.rmsnorm_ref(x, w, 1e-5)).max() <= 1e-6 * np.abs(out).max()
    one = N.rmsnorm(x[3:4].copy(), w, 1e-5, np.empty_like(x[:1]))
    assert np.array_equal(_bits(one[0]), _bits(out[3]))


@pytest.mark.parametrize("mode", [R.ROPE_NORM, R.ROPE_NEOX])
def test_rope_against_reference(mode):
    rng = np.random.default_rng(1)
    pos = np.array([0, 7, 300, 4095])
    cos, sin = R.rope_angles(pos, 8, 10000.0, 1.0, None)         # n_rot 8 of 10: 2 pass through
    x = rng.standard_normal((4, 3, 10)).astype(np.float32)
    got = x.copy()
    R.rope(got, cos, sin, mode)
    assert np.abs(got - R.rope_ref(x, cos, sin, mode)).max() <= 1e-6
    assert np.array_equal(got[..., 8:], x[..., 8:])
    # the angles of a position do not depend on the others in the batch
    c1, s1 = R.rope_angles(pos[2:3], 8, 10000.0, 1.0, None)
    assert np.array_equal(c1[0], cos[2]) and np.array_equal(s1[0], sin[2])


@pytest.mark.parametrize("hd", [16, 48, 64, 128])
def test_attention_kernel_against_reference(hd):
    rng = np.random.default_rng(hd)
    n, nh, nkv, n_ctx = 5, 6, 2, 96
    q = rng.standard_normal((n, nh, hd)).astype(np.float32)
    kc = rng.standard_normal((3, n_ctx, nkv * hd)).astype(np.float32)
    vc = rng.standard_normal((3, n_ctx, nkv * hd)).astype(np.float32)
    valid = rng.random((3, n_ctx)) < 0.8                    # holes in every sequence
    seq = np.array([0, 2, 1, 2, 0])
    pos = np.array([10, 60, 33, 61, 11])
    valid[seq, pos] = True
    out = At.attention(q, kc, vc, valid, seq, pos, nkv, np.empty_like(q), 2)
    ref = At.attention_ref(q, kc.reshape(3, n_ctx, nkv, hd), vc.reshape(3, n_ctx, nkv, hd),
                           valid, seq, pos, nkv)
    assert np.abs(out - ref).max() < 1e-5 * np.abs(vc).max()
    # the threaded path (large work) computes every (row, head) exactly as the serial one, however
    # many heads of a KV group one work item takes
    for hs in (1, 3):
        par = np.empty_like(q)
        At._attention_parallel(q, kc, vc, valid, seq, pos, nkv, par, hs)
        assert np.array_equal(par.view(np.uint32), out.view(np.uint32))
    # and a row alone equals the same row in the batch, whatever the thread count
    for n_threads in (1, 2, 3, 8):
        one = At.attention(q[3:4].copy(), kc, vc, valid, seq[3:4], pos[3:4], nkv, np.empty_like(q[:1]), n_threads)
        assert np.array_equal(one[0].view(np.uint32), out[3].view(np.uint32))


def _attention_by_head(q, kc, vc, valid, seq, pos, nkv):
    """The kernel's numerics one (row, head) at a time, in plain Python over NumPy float32 (the
    order of every operation spelled out): each cell's dot product in four 8-lane partial sums
    (lanes d % 32 // 8, the blocks of 32 in order; then (s0 + s1) + (s2 + s3) and the lanes
    ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))), the weights exp in float64 rounded to
    float32, and out_d = fma(w_j * (1 / sum), v_jd, out_d) cell by cell."""
    f32 = np.float32
    n, nh, hd = q.shape
    group = nh // nkv
    out = np.zeros_like(q)
    for t in range(n):
        s, p = seq[t], pos[t]
        cells = [j for j in range(p + 1) if valid[s, j]]
        for h in range(nh):
            kh = (h // group) * hd
            sc = []
            for j in cells:
                k = kc[s, j, kh:kh + hd]
                acc = np.zeros((4, 8), np.float32)
                for d in range(0, hd, 32):
                    for a in range(4):
                        prod = (q[t, h, d + 8 * a:d + 8 * a + 8].astype(np.float64)
                                * k[d + 8 * a:d + 8 * a + 8].astype(np.float64))
                        acc[a] = (prod + acc[a].astype(np.float64)).astype(np.float32)   # fma, one rounding
                v8 = (acc[0] + acc[1]) + (acc[2] + acc[3])
                tot = ((v8[0] + v8[4]) + (v8[2] + v8[6])) + ((v8[1] + v8[5]) + (v8[3] + v8[7]))
                sc.append(f32(tot) * f32(1.0 / np.sqrt(hd)))
            mx = max(sc)
            e = [np.float64(f32(x - mx)) for x in sc]
            e = [np.exp(x) for x in e]
            inv = f32(1.0 / sum(e))
            o = np.zeros(hd, np.float32)
            for x, j in zip(e, cells):
                w = f32(f32(x) * inv)
                o = (np.float64(w) * vc[s, j, kh:kh + hd].astype(np.float64) + o.astype(np.float64)).astype(np.float32)
            out[t, h] = o
    return out


@pytest.mark.parametrize("nh,nkv", [(12, 2), (14, 2), (9, 3), (4, 4)])
def test_attention_groups_heads_without_changing_a_bit(nh, nkv):
    """The kernel takes the heads of one KV group together (they read the same cache rows, a block
    of cells at a time): each (row, head) is still computed by its own chain of operations, the
    one spelled out in _attention_by_head, to within the exponential (the kernel's own vexp64,
    2 ulp of float64, where the oracle takes NumPy's)."""
    rng = np.random.default_rng(nh)
    hd, n_ctx = 64, 70
    q = rng.standard_normal((3, nh, hd)).astype(np.float32)
    kc = rng.standard_normal((2, n_ctx, nkv * hd)).astype(np.float32)
    vc = rng.standard_normal((2, n_ctx, nkv * hd)).astype(np.float32)
    valid = rng.random((2, n_ctx)) < 0.9
    seq, pos = np.array([0, 1, 0]), np.array([40, 66, 41])
    valid[seq, pos] = True
    want = _attention_by_head(q, kc, vc, valid, seq, pos, nkv)
    for n_threads in (1, 2, 4):
        got = At.attention(q, kc, vc, valid, seq, pos, nkv, np.empty_like(q), n_threads)
        assert np.abs(got - want).max() <= 2e-7 * np.abs(vc).max()
        assert np.mean(got == want) > 0.99
    for hs in range(1, nh // nkv + 1):
        if (nh // nkv) % hs == 0:
            par = np.empty_like(q)
            At._attention_parallel(q, kc, vc, valid, seq, pos, nkv, par, hs)
            assert np.array_equal(par.view(np.uint32), got.view(np.uint32))


def test_heads_per_item_puts_the_fewest_heads_on_the_busiest_thread():
    assert At.heads_per_item(1, 12, 2, 2) == 6            # the 1.5B, one row: one KV group a thread
    assert At.heads_per_item(1, 14, 2, 2) == 7            # the 0.5B
    assert At.heads_per_item(5, 12, 2, 2) == 6
    assert At.heads_per_item(1, 12, 2, 8) == 2            # 6 items of 2 heads: 2 on the busiest thread
    assert At.heads_per_item(1, 9, 3, 2) == 1             # 3 groups of 3 on 2 threads: 9 items, 5 and 4
    assert At.heads_per_item(1, 4, 1, 2) == 2
    assert At.heads_per_item(1, 12, 2, 1) == 6


def test_exp64_against_numpy():
    xs = np.concatenate([np.linspace(-708, 709, 20001), [-1e-300, 0.0, 1e-300, 0.5, -0.5]])
    got = np.array([A.exp64(v) for v in xs])
    assert np.max(np.abs(got - np.exp(xs)) / np.exp(xs)) < 4.5e-16          # 2 ulp of float64
    assert A.exp64(-1e6) == A.exp64(A.EXP_MIN) and A.exp64(1e6) == A.exp64(A.EXP_MAX)  # clamped


@pytest.mark.parametrize("f", [8960, 1100, 100, 3])   # vector body; items, the last with a tail; body + tail; tail
def test_swiglu_against_reference_and_batch_invariant(f):
    rng = np.random.default_rng(2)
    g = (rng.standard_normal((9, f)) * 4).astype(np.float32)
    g[0, :3] = [-800.0, 800.0, 0.0]                          # exp overflow / underflow ends
    u = rng.standard_normal((9, f)).astype(np.float32)
    out = A.swiglu_into(g, u, np.empty_like(g))
    with np.errstate(over="ignore"):
        ref = A.swiglu_ref(g, u)
    assert np.abs(out - ref).max() <= 1e-6 * np.abs(ref).max()
    # the float64 silu rounds to the same float32 as with NumPy's exp, element by element
    with np.errstate(over="ignore"):
        g64 = g.astype(np.float64)
        same_ops = (g64 / (1.0 + np.exp(-g64))).astype(np.float32) * u
    assert np.mean(_bits(out) == _bits(same_ops)) > 0.999
    one = A.swiglu_into(g[4:5].copy(), u[4:5].copy(), np.empty_like(g[:1]))
    assert np.array_equal(_bits(one[0]), _bits(out[4]))
    inplace = g.copy()                                        # out = gate: the forward passes' form
    assert A.swiglu_into(inplace, u, inplace) is inplace and np.array_equal(_bits(inplace), _bits(out))
    par = np.empty_like(g)
    A._swiglu_parallel(g, u, par, 0)                          # the threaded path, same bits
    assert np.array_equal(_bits(par), _bits(out))
    # gate and up side by side in one array (the stacked gate/up product of kernels/forward.py)
    gu = np.concatenate([g, u], axis=1)
    stacked = A.swiglu_into(gu, gu, np.empty_like(g), f)
    assert np.array_equal(_bits(stacked), _bits(out))
    assert np.array_equal(_bits(A.swiglu_into(gu[4:5].copy(), gu[4:5].copy(), np.empty_like(g[:1]), f)[0]),
                          _bits(out[4]))


def test_argmax_and_topk_against_numpy():
    rng = np.random.default_rng(3)
    lg = np.round(rng.standard_normal(300) * 4).astype(np.float32) / 4       # many ties
    lg[[5, 250]] = lg.max() + 1                                               # a tie at the top
    assert A.argmax(lg) == 5 == int(np.argmax(lg))                            # the first maximum
    for k in (1, 7, 300):
        ids, vals = A.topk(lg, k)
        order = np.lexsort((np.arange(300), -lg))[:k]                         # value desc, id asc
        assert np.array_equal(ids, order) and np.array_equal(vals, lg[order])


def _first_greater(lg):
    # llama.cpp's greedy loop: keep index 0, replace it by any later logit that is greater
    best = 0
    for i in range(1, len(lg)):
        if lg[i] > lg[best]:
            best = i
    return best


@pytest.mark.parametrize("n", [1, 40, 64, 95, 1000, 32890])
def test_argmax_is_the_greedy_loops_choice(n):
    # the vectorized maximum must pick what the compare-and-replace loop picks: the first of a
    # tie, a top in the tail past the vector lanes, and NaNs never (but a NaN first stays first)
    rng = np.random.default_rng(n)
    cases = []
    for _ in range(6):
        lg = np.round(rng.standard_normal(n) * 3).astype(np.float32)        # many ties
        cases.append(lg)
        nan = lg.copy()
        nan[rng.integers(0, n, max(1, n // 7))] = np.nan
        cases.append(nan)
    tail = np.zeros(n, np.float32)
    tail[-1] = 1.0
    first_nan = cases[0].copy()
    first_nan[0] = np.nan
    zeros = np.zeros(n, np.float32)
    zeros[1::2] = -0.0
    cases += [tail, first_nan, zeros, np.full(n, -np.inf, np.float32), np.full(n, np.nan, np.float32)]
    for lg in cases:
        assert A.argmax(lg) == _first_greater(lg)


# ---- the whole forward pass, implementation by implementation ---------------------------------

IMPLS = ["reference", "njit", "fused", "cuda-sim"]
_SIM_SCRIPT = """
import json, sys
import numpy as np
from specnb.run.context import Batch, Context
from specnb.model import load_model
m = load_model(sys.argv[1])
ids = json.loads(sys.argv[2])
out = Context(m, n_ctx=32, backend="cuda").decode(Batch.from_tokens(ids, 0, 0, "all"))
np.save(sys.argv[3], out)
"""


def _logits(impl, path, ids, tmp_path):
    m = load_model(path)
    if impl == "reference":
        return Reference(m).forward(ids)
    if impl == "cuda-sim":
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        out = tmp_path / "logits.npy"
        r = subprocess.run([sys.executable, "-c", _SIM_SCRIPT, str(path), json.dumps(ids), str(out)],
                           env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        return np.load(out)
    ctx = Context(m, n_ctx=32, activations="f32")        # the exact path, as the simulator's
    if impl == "njit":
        ctx.backend.forward = ctx.backend.forward_steps
    return ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_0"])
def test_forward_implementations_agree_with_the_reference(tiny_path, tmp_path, impl, qtype):
    if impl == "cuda-sim" and qtype != "Q4_K":
        pytest.skip("one type is enough under the (slow) simulator")
    path = Path(tiny_path(qtype, arch="qwen2", tied=False))
    ids = np.random.default_rng(4).integers(3, load_model(path).n_vocab, 8).tolist()
    ref = Reference(load_model(path)).forward(ids)
    got = _logits(impl, path, ids, tmp_path)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 2e-4 * np.abs(ref).max() + 1e-5
    assert (got.argmax(-1) == ref.argmax(-1)).all()
