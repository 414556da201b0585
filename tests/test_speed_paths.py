"""The fast paths of the CPU engine against the readable ones and against outside references:

- the whole forward pass in one compiled call (kernels/forward.py) against the Python forward
  that calls each kernel in turn (bit for bit, both activation modes, every architecture);
- activations="q8" (llama.cpp's int8 activations): close to the reference, batch invariant;
- the bench's llama.cpp figures against the text llama.cpp printed (tests/data).
"""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from specnb import ParamError, UnsupportedError
from specnb.context import Batch, Context
from specnb.forge import tiny_model
from specnb.model import load_model
from specnb.reference import Reference

DATA = Path(__file__).parent / "data"


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
                                             ("F16", "llama", True)])
def test_fused_forward_equals_step_by_step(tiny_path, qtype, arch, tied, activations):
    m = load_model(tiny_path(qtype, arch=arch, tied=tied))
    fused, steps = _both_forwards(m, activations, _mixed_batch(m), 3)
    assert fused.shape == (23, m.n_vocab)
    assert np.array_equal(fused.view(np.uint32), steps.view(np.uint32))


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
    got = Context(m, n_ctx=32).decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert np.abs(got - ref).max() <= 2e-4 * np.abs(ref).max() + 1e-5


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q5_0"])
def test_q8_activations_close_to_reference_and_batch_invariant(tiny_path, qtype):
    m = load_model(tiny_path(qtype))
    ids = _ids(m, 20, 4)
    ref = Reference(m).forward(ids)
    full = Context(m, n_ctx=64, activations="q8").decode(Batch.from_tokens(ids, 0, 0, "all"))
    # int8 activations move each product by up to max|x_block| / 254: a few percent of a logit
    assert np.abs(full - ref).max() <= 0.05 * np.abs(ref).max()
    assert np.mean(full.argmax(-1) == ref.argmax(-1)) >= 0.9
    ctx = Context(m, n_ctx=64, activations="q8")
    rows = [ctx.decode(Batch().add(t, i, 0, True))[0] for i, t in enumerate(ids)]
    assert np.array_equal(np.stack(rows).view(np.uint32), full.view(np.uint32))
    # and it really is another path: not bit-equal to the float32 activations
    f32 = Context(m, n_ctx=64).decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert not np.array_equal(f32, full)


def test_activations_parameter_is_checked(tiny_model):
    with pytest.raises(ParamError, match="activations.*'int4'"):
        Context(tiny_model, n_ctx=16, activations="int4")
    with pytest.raises(UnsupportedError, match="CPU-only"):
        Context(tiny_model, n_ctx=16, backend="cuda", activations="q8")


def test_bench_llama_cpp_figures_are_the_printed_ones():
    from specnb.bench import LLAMA_CPP, llama_cpp_batch_cost
    text = (DATA / "llamacpp_bench_smollm2.txt").read_text()
    run2 = text.split("## Run 2")[1].split("## Run 3")[0]
    pp = {int(k): float(v) for k, v in re.findall(r"\|\s+pp(\d+) \|\s+([\d.]+) ±", run2)}
    assert {k: pp[k] for k in LLAMA_CPP["pp_tok_s"]} == LLAMA_CPP["pp_tok_s"]
    assert float(re.search(r"tg64 \|\s+([\d.]+) ±", run2).group(1)) == LLAMA_CPP["tg64_tok_s"]
    bb = text.split("## llama-batched-bench")[1]
    row1 = [r for r in bb.splitlines() if re.match(r"\|\s+64 \|\s+32 \|\s+1 \|", r)][0]
    assert float(row1.split("|")[8]) == LLAMA_CPP["batched_bench_tg_tok_s"]
    assert llama_cpp_batch_cost(1) == 1.0
    assert abs(llama_cpp_batch_cost(5) - 5 * pp[1] / pp[5]) < 1e-12


def test_bench_on_a_tiny_model_prints_both_modes(tiny_path):
    from specnb.bench import bench, format_bench
    r = bench(tiny_path("Q4_1"), reps=2, n_gen=4, quick=True, memory=False)
    assert set(r["modes"]) == {"f32", "q8"}
    for mode in r["modes"].values():
        assert mode["decode_tok_s"] > 0 and mode["batch_cost"][1] == 1.0
        assert set(mode["batch_cost"]) == {1, 2, 3, 5, 9}
    text = format_bench(r)
    assert "decode tok/s" in text and "k =  9" in text and "llama.cpp" in text
    json.dumps(r)                                           # the --json output


@pytest.mark.slow
def test_pair_memory_probe_in_a_fresh_process():
    from specnb.bench import pair_memory
    m = pair_memory(n_ctx=256, n_predict=8)
    assert 50 < m["peak_rss_mib"] < 4096
    assert m["load_target_s"] > 0 and m["n_ctx"] == 256
    assert m["kv_cache_mib"] == pytest.approx(2 * 2 * 30 * 256 * 192 * 4 / 2**20)


def test_numba_cache_folder_follows_the_kernel_sources(tmp_path, monkeypatch):
    import importlib.util
    import os
    import types
    import specnb
    src = tmp_path / "kernels"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: types.SimpleNamespace(submodule_search_locations=[str(src)]))
    s1 = specnb._kernel_sources_stamp()
    (src / "a.py").write_text("x = 2\n")                    # an edited kernel: a new stamp
    s2 = specnb._kernel_sources_stamp()
    assert s1 != s2 and len(s1) == len(s2) == 16
    root = tmp_path / "numba"
    root.mkdir()
    (root / "legacy.nbi").write_text("old")                 # the earlier flat layout
    for i, name in enumerate(["0" * 16, "1" * 16, "2" * 16]):
        (root / name).mkdir()
        os.utime(root / name, (1_000_000 + i, 1_000_000 + i))
    d = specnb._numba_cache_dir(root, keep=3)
    assert d == str(root / s2)
    assert sorted(p.name for p in root.iterdir()) == sorted([s2, "2" * 16, "1" * 16])
    assert specnb._numba_cache_dir(root, keep=3) == d       # the same stamp: nothing removed
    assert len(list(root.iterdir())) == 3


def test_goals_read_every_figure():
    from specnb.bench import format_goals, goals
    r = {"modes": {"f32": {"decode_tok_s": 70.0, "batch_cost": {1: 1.0, 2: 1.1, 3: 1.2, 5: 1.25, 9: 1.9}},
                   "q8": {"decode_tok_s": 90.0, "batch_cost": {1: 1.0, 2: 1.5, 3: 2.0, 5: 3.0, 9: 5.0}}},
         "memory": {"peak_rss_mib": 1100.0, "n_ctx": 2048, "load_target_s": 0.5},
         "speculative": {"prompts": [
             {"llama.cpp": {"overhead_frac": 0.02, "draft_evals_per_round": 7.0},
              "no-reeval": {"overhead_frac": 0.12, "draft_evals_per_round": 4.0}}],
             "sweeps": {"real pair": {"max_rel_error_engine": 0.1, "max_rel_error": 0.3}}}}
    met = {g.split(" (")[0].split(",")[0]: m for g, _, m in goals(r)}
    assert met["decode >= llama.cpp"] is True                 # q8's 90 against tg64's 84.06
    assert met["1 + d rows <= 1.3x one row for d <= 4"] is True   # f32's worst is 1.25
    assert met["1 + d rows <= 2.0x one row for d <= 16"] is None  # 17 rows not measured
    assert met["loop overhead < 10% of a round"] is False          # 12% on one mode
    assert met["draft work per round <= 1 + d"] is True
    assert met["measured speedup within 15% of the cost model"] is True
    assert met["peak RSS of the default pair < 1 GiB"] is False
    assert met["first-call compile time"] is None
    assert "MISSED" in format_goals(r)
