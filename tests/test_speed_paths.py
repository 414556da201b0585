"""The fast paths of the CPU engine against the readable ones and against outside references:

- the whole forward pass in one compiled call (kernels/forward.py) against the Python forward
  that calls each kernel in turn (bit for bit, both activation modes, every architecture);
- activations="q8" (llama.cpp's int8 activations): the reference with the same activation rounding,
  close to the exact reference, batch invariant, for every type with an int8 kernel;
- the fused pass is cached on disk by Numba like any other function (a fresh process loads it);
- the Numba cache folder follows the kernel sources.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from specnb import ParamError, UnsupportedError
from specnb.run.context import Batch, Context
from specnb.model.testing import tiny_model
from specnb.model import load_model
from specnb.model.reference import Reference



def _ids(model, n, seed):
    return np.random.default_rng(seed).integers(0, model.n_vocab, n).tolist()


def _mixed_batch(m):
    # three sequences interleaved, every row wants logits
    a, b = _ids(m, 7, 1), _ids(m, 12, 2)
    batch = Batch()
    for i in range(12):
        batch.add(b[i], i, 1, True)
        if i < 7:
            batch.add(a[i], i, 0, True)
        if i < 4:
            batch.add(b[i], i, 2, True)
    return batch


def _both_forwards(m, activations, batch, n_seq):
    ctx = Context(m, n_ctx=64, n_seq_max=n_seq, activations=activations)
    fused = ctx.decode(batch)
    ctx.clear()
    ctx.backend.forward = ctx.backend.forward_steps          # the readable Python pass
    steps = ctx.decode(batch)
    return fused, steps


@pytest.mark.parametrize("activations", ["f32", "q8"])
@pytest.mark.parametrize("qtype,arch,tied", [("Q8_0", "llama", True), ("Q4_1", "llama", False),
                                             ("Q4_0", "qwen2", True), ("Q6_K", "mistral", True),
                                             ("Q4_K", "qwen2", False), ("Q3_K", "llama", True),
                                             ("F16", "llama", True)])
def test_fused_forward_equals_step_by_step(tiny_path, qtype, arch, tied, activations):
    m = load_model(tiny_path(qtype, arch=arch, tied=tied))
    fused, steps = _both_forwards(m, activations, _mixed_batch(m), 3)
    assert fused.shape == (23, m.n_vocab)
    assert np.array_equal(fused.view(np.uint32), steps.view(np.uint32))


def test_the_fused_pass_is_called_without_the_dispatcher_after_the_first_call(tiny_path):
    """After a first decode, the backend calls the compiled pass's own wrapper (no typing of the
    arguments per call); the logits are the dispatcher's, bit for bit. Read-only id arrays go
    through the same entry (the ids are copied: no second compile of the whole pass)."""
    from specnb.kernels import forward as F
    from specnb.run.backend_cpu import compiled_entry
    m = load_model(tiny_path("Q4_K", arch="qwen2"))
    ctx = Context(m, n_ctx=64, n_seq_max=3)
    first = ctx.decode(_mixed_batch(m))
    be = ctx.backend
    assert len(be._entries) == 1
    (entry,) = be._entries.values()
    assert entry is not F.forward and callable(entry)
    ctx.clear()
    again = ctx.decode(_mixed_batch(m))                       # through the entry
    assert np.array_equal(first.view(np.uint32), again.view(np.uint32))
    ro = [np.array(a, np.int64) for a in (_ids(m, 3, 4), np.arange(3), np.zeros(3), np.arange(3))]
    for a in ro:
        a.flags.writeable = False
    n_sigs = len(F.forward.signatures)
    got = be.forward(ro[0], ro[1], ro[2], be_valid(ctx), ro[3])
    assert len(be._entries) == 1 and len(F.forward.signatures) == n_sigs
    want = be.forward(*[a.copy() for a in ro[:3]], be_valid(ctx), ro[3].copy())
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert compiled_entry(F.forward, (1, 2)) is F.forward      # no overload for such types


def be_valid(ctx):
    v = np.zeros_like(ctx.valid)
    v[0, :3] = True
    return v


def test_fused_forward_with_head_dim_64(tmp_path):
    # head_dim 64 takes the 8-lane attention path (the tiny models above have 16)
    m = load_model(tiny_model(tmp_path / "hd64.gguf", qtype="Q4_1", n_embd=128, n_head=2,
                              n_head_kv=1, n_ff=256))
    assert m.hparams.head_dim == 64
    for act in ("f32", "q8"):
        fused, steps = _both_forwards(m, act, _mixed_batch(m), 3)
        assert np.array_equal(fused.view(np.uint32), steps.view(np.uint32))
    ids = _ids(m, 16, 3)
    ref = Reference(m).forward(ids)
    got = Context(m, n_ctx=32, activations="f32").decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert np.abs(got - ref).max() <= 2e-4 * np.abs(ref).max() + 1e-5


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q5_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_q8_activations_close_to_reference_and_batch_invariant(tiny_path, qtype):
    m = load_model(tiny_path(qtype))
    ids = _ids(m, 20, 4)
    ref = Reference(m).forward(ids)
    rounded = Reference(m, activations="q8").forward(ids)       # the same int8 rounding, exact sums
    full = Context(m, n_ctx=64, activations="q8").decode(Batch.from_tokens(ids, 0, 0, "all"))
    # the engine is the reference with llama.cpp's activation rounding (float32 sums: 2e-7 of the
    # largest logit here), ten times closer than the rounding's own effect on any type; except a
    # row where the float32 sums leave one activation on the other side of an int8 rounding step
    # than the exact sums do: that row moves by the rounding's own effect (the Q5_K network's row
    # 8 of 20 does, 0.145 against a largest logit of 19.8). At most one such row.
    close = np.abs(full - rounded).max(-1) <= 1e-4 * np.abs(ref).max()
    assert close.sum() >= len(ids) - 1, np.nonzero(~close)[0]
    # that effect: 0.1-2% of the largest logit, 10-12% on the random Q5_K and Q6_K networks
    assert np.abs(full - ref).max() <= 0.15 * np.abs(ref).max()
    assert np.mean(full.argmax(-1) == ref.argmax(-1)) >= 0.8
    ctx = Context(m, n_ctx=64, activations="q8")
    rows = [ctx.decode(Batch().add(t, i, 0, True))[0] for i, t in enumerate(ids)]
    assert np.array_equal(np.stack(rows).view(np.uint32), full.view(np.uint32))
    # and it really is another path: not bit-equal to the float32 activations
    f32 = Context(m, n_ctx=64, activations="f32").decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert not np.array_equal(f32, full)


def test_activations_parameter_is_checked(tiny_model):
    with pytest.raises(ParamError, match="activations.*'int4'"):
        Context(tiny_model, n_ctx=16, activations="int4")
    with pytest.raises(UnsupportedError, match="CPU-only"):
        Context(tiny_model, n_ctx=16, backend="cuda", activations="q8")


def test_numba_cache_folder_follows_the_kernel_sources(tmp_path, monkeypatch):
    import os

    from specnb import kernels
    src = tmp_path / "kernels"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    s1 = kernels.sources_stamp(str(src))
    (src / "a.py").write_text("x = 2\n")                    # an edited kernel: a new stamp
    s2 = kernels.sources_stamp(str(src))
    assert s1 != s2 and len(s1) == len(s2) == 16
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,-avx512f")        # another compile target
    assert kernels.sources_stamp(str(src)) not in (s1, s2)
    monkeypatch.delenv("NUMBA_CPU_FEATURES")
    assert kernels.sources_stamp(str(src)) == s2
    root = tmp_path / "numba"
    assert kernels.cache_folder(str(root), str(src)) == str(root / s2)
    assert not root.exists()                                 # naming it creates nothing
    root.mkdir()
    (root / "legacy.nbi").write_text("old")                 # the earlier flat layout
    for i, name in enumerate(["0" * 16, "1" * 16, "2" * 16, s2]):
        (root / name).mkdir()
        os.utime(root / name, (1_000_000 + i, 1_000_000 + i))
    removed = kernels.prune_caches(str(root), keep=3, current=s2)
    assert sorted(os.path.basename(p) for p in removed) == ["0" * 16, "legacy.nbi"]
    assert sorted(p.name for p in root.iterdir()) == sorted([s2, "2" * 16, "1" * 16])
    assert kernels.prune_caches(str(root), keep=3, current=s2) == []     # nothing more to remove
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "users-own"))  # not specnb's to prune
    assert kernels.prune_caches(keep=1) == []


_CACHED = """
import sys
from specnb.run.context import Batch, Context
from specnb.kernels import forward as F
from specnb.model import load_model
ctx = Context(load_model(sys.argv[1]), n_ctx=16, activations=sys.argv[2])
ctx.decode(Batch.from_tokens([3, 4, 5], 0, 0, "last"))
print(sum(F.forward.stats.cache_hits.values()), sum(F.forward.stats.cache_misses.values()))
"""


def test_the_fused_forward_is_cached_on_disk(tiny_path):
    # its weights arrive as named tuples: a fresh process must load the compiled pass from the
    # Numba cache rather than compile it again (the first process may fill the cache)
    path = tiny_path("Q8_0")
    runs = [subprocess.run([sys.executable, "-c", _CACHED, path, "q8"], capture_output=True,
                           text=True, timeout=900, env=dict(os.environ)) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-3000:]
    hits, misses = map(int, runs[1].stdout.split())
    assert hits >= 1 and misses == 0


def test_the_cpu_default_is_int8_activations(tiny_model):
    # the fast path by default on the CPU; the CUDA backend has float32 activations only
    from specnb.run.context import resolve_activations
    assert Context(tiny_model, n_ctx=16).activations == "q8"
    assert Context(tiny_model, n_ctx=16, activations="f32").activations == "f32"
    assert resolve_activations(None, "cpu") == "q8" and resolve_activations(None, "cuda") == "f32"
    from specnb.app.cli import build_parser
    a = build_parser().parse_args(["generate", "-p", "x"])
    assert a.activations is None                    # None: the backend's default


def test_stacked_products_give_each_matrix_its_own_products_bits(tiny_path):
    """With int8 activations the pass multiplies q, k, v (and gate, up) as one stacked matrix
    where they share an interleaved layout (backend_cpu.stack_layer): q, k and v in layer 0, q
    and k only in layer 1 (its v in another type here), and every logit is the bit of the
    separate products (the readable pass), in a mixed batch of three sequences."""
    from specnb.kernels.qtypes import Q6_K, random_blocks
    from specnb.model import QWeight
    m = load_model(tiny_path("Q4_K", arch="qwen2", tied=False))
    L = m.layers[1]
    L.wv = QWeight(L.wv.name, random_blocks(Q6_K, L.wv.n_out, L.wv.n_in, np.random.default_rng(5), 0.05),
                   Q6_K, L.wv.n_in, L.wv.n_out)
    ctx = Context(m, n_ctx=64, n_seq_max=3, activations="q8")
    assert ctx.backend._fused_weights.fuse.tolist() == [[3, 2], [2, 2]]
    q0, k0, v0 = ctx.backend.kernel_weights()[0][0][:3]
    assert q0.data.base is not None and q0.data.base is v0.data.base and q0.data.shape[0] == m.layers[0].wq.n_out
    fused, steps = _both_forwards(m, "q8", _mixed_batch(m), 3)
    assert np.array_equal(fused.view(np.uint32), steps.view(np.uint32))
    assert Context(m, n_ctx=64, activations="f32").backend._fused_weights.fuse.tolist() == [[1, 1], [1, 1]]


def test_the_timed_pass_gives_the_same_logits_and_times_every_phase(tiny_path):
    """forward(..., clock) (bench --profile's pass, kernels/clock.py) computes the same logits bit
    for bit as the normal pass and adds counter ticks to every phase it has: all of them with a
    stacked q, k, v (Q4_K, int8 activations), the embedding and output phases included."""
    from specnb.kernels.clock import HAS_CLOCK
    from specnb.kernels.forward import PHASES
    if not HAS_CLOCK:
        pytest.skip("no cycle counter on this CPU")
    m = load_model(tiny_path("Q4_K", arch="qwen2"))
    ctx = Context(m, n_ctx=64, n_seq_max=3)
    plain = ctx.decode(_mixed_batch(m))
    ctx.clear()
    be = ctx.backend
    ctx.backend = type("Timed", (), {"forward": lambda self, *a: be.forward(*a, clock)})()
    clock = np.zeros(len(PHASES), np.int64)
    timed = ctx.decode(_mixed_batch(m))
    assert np.array_equal(plain.view(np.uint32), timed.view(np.uint32))
    assert np.all(clock > 0), dict(zip(PHASES, clock.tolist()))


def test_bench_profile_reports_the_phases_inside_the_pass(tiny_path):
    """decode_profile's phases: one row per phase of the pass, shares summing to 1, and the
    products' bytes those of the matrices the pass multiplies (q, k, v: three per layer)."""
    from specnb.kernels.clock import HAS_CLOCK
    from specnb.measure.profile import decode_profile, format_profile
    if not HAS_CLOCK:
        pytest.skip("no cycle counter on this CPU")
    m = load_model(tiny_path("Q4_K", arch="qwen2"))
    p = decode_profile(m, "q8", n_rows=2, n_past=8, reps=3)
    ph = {r["phase"]: r for r in p["phases"]}
    assert abs(sum(r["share"] for r in p["phases"]) - 1) < 1e-9
    qkv = sum(w.data.nbytes for L in m.layers for w in (L.wq, L.wk, L.wv))
    assert ph["q, k, v"]["gb_s"] == pytest.approx(qkv / (ph["q, k, v"]["ms"] / 1e3) / 1e9)
    assert "inside the fused step" in format_profile(p)
