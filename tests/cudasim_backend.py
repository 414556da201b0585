"""The CUDA backend's check groups under the simulator (tests/cudasim_checks.py runs them: see its
docstring for how and for the tolerances): its launches and steps made once, decoding against the
CPU backend, state save/load, speculative decoding, and the device call's script."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from cudasim_checks import check


# ---- the backend --------------------------------------------------------------------------------

def _tiny(tmp, qtype="Q8_0", arch="llama", tied=True, n_layer=2, seed=0, small=False):
    from specnb.model import testing
    from specnb.model import load_model
    kw = dict(n_embd=32, n_ff=64, n_head=2, n_head_kv=1) if small else \
        dict(n_embd=64, n_ff=128, n_head=4, n_head_kv=2)
    p = testing.tiny_model(Path(tmp) / f"{qtype}-{arch}-{tied}-{n_layer}-{seed}-{small}.gguf",
                         qtype=qtype, n_layer=n_layer, seed=seed, arch=arch, tied=tied, **kw)
    return p, load_model(p)


def _ids(model, n, seed):
    return np.random.default_rng(seed).integers(3, model.n_vocab, n).tolist()


def group_decode():
    from specnb.run.context import Batch, Context
    with tempfile.TemporaryDirectory() as tmp:
        for qtype, arch, tied in (("Q8_0", "llama", True), ("Q4_0", "qwen2", False)):
            _, m = _tiny(tmp, qtype, arch, tied, small=arch == "qwen2")
            ids = _ids(m, 8, 1)
            cpu = Context(m, n_ctx=32, activations="f32").decode(Batch.from_tokens(ids, 0, 0, "all"))
            ctx = Context(m, n_ctx=32, backend="cuda")
            got = ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))
            scale = np.abs(cpu).max()
            err = np.abs(got - cpu).max()
            check(err <= 1e-4 * scale and (got.argmax(-1) == cpu.argmax(-1)).all(),
                  f"{arch} {qtype} {'tied' if tied else 'untied'}: 8-token prompt on cuda vs cpu: "
                  f"max |diff| {err:.1e} (max |logit| {scale:.1f}), same argmax everywhere")
            if qtype == "Q8_0":
                inc = Context(m, n_ctx=32, backend="cuda")
                rows = [inc.decode(Batch().add(t, i, 0, True))[0] for i, t in enumerate(ids[:3])]
                part = inc.decode(Batch.from_tokens(ids[3:], 3, 0, "all"))
                check(np.array_equal(np.concatenate([np.stack(rows), part]), got),
                      "token by token, then a 5-token batch == one 8-token batch, bit for bit")
                check(ctx.backend.nbytes() == Context(m, n_ctx=32, activations="f32").backend.nbytes(),
                      "KV cache of the same size as the CPU backend's")
                import specnb.run.backend_cuda as BC
                keep = BC.SCRATCH_FLOATS
                BC.SCRATCH_FLOATS = 3 * m.hparams.n_head * 32       # attention in launches of 3 rows
                try:
                    chunked = Context(m, n_ctx=32, backend="cuda")
                    same = np.array_equal(chunked.decode(Batch.from_tokens(ids, 0, 0, "all")), got)
                    per = chunked.backend._ws.rows_per_launch
                finally:
                    BC.SCRATCH_FLOATS = keep
                check(per == 3 and same, "attention in launches of 3 rows == the whole batch at once, "
                      "bit for bit")
                head = np.arange(1, m.n_vocab, 3)                 # a restricted output head
                ctx.clear()
                ctx.set_output_ids(head)
                sub = ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))
                check(sub.shape == (len(ids), len(head)) and np.array_equal(sub, got[:, head]),
                      f"a head restricted to {len(head)} of {m.n_vocab} rows == those columns of "
                      "the full logits, bit for bit")
                ctx.clear()
                ctx.set_output_ids(None)
                check(np.array_equal(ctx.decode(Batch.from_tokens(ids, 0, 0, "all")), got),
                      "set_output_ids(None) restores the whole head")
                from specnb.measure.bench import check_against_reference
                c = check_against_reference(m, ctx, ids[:4])
                check(c["against"] == "cpu" and c["top1_agree"] == 1.0 and
                      c["max_abs_diff"] <= 1e-4 * scale, f"bench's check against the cpu: {c}")


def group_state():
    from specnb.run.context import Batch, Context
    with tempfile.TemporaryDirectory() as tmp:
        _, m = _tiny(tmp, small=True)
        ids, other = _ids(m, 8, 3), _ids(m, 3, 4)
        clean = Context(m, n_ctx=16, backend="cuda").decode(Batch.from_tokens(ids, 0, 0, "all"))
        ctx = Context(m, n_ctx=16, backend="cuda")
        ctx.decode(Batch.from_tokens(ids[:5] + other, 0, 0, "none"))       # a wrong tail
        check(ctx.seq_rm(0, 5, -1) and ctx.seq_pos_max(0) == 4, "seq_rm drops positions 5..")
        got = ctx.decode(Batch.from_tokens(ids[5:], 5, 0, "all"))
        check(np.array_equal(got, clean[5:]), "after seq_rm, re-decoding == never decoded (bits)")
        st = ctx.state_seq_get(0)
        check(st.n_cells == 8 and isinstance(st.k, np.ndarray), "state_seq_get copies 8 cells "
                                                                "to the host")
        ctx.seq_rm(0, 0, -1)
        ctx.state_seq_set(0, st)
        more = _ids(m, 2, 5)
        a = ctx.decode(Batch.from_tokens(more, 8, 0, "all"))
        ref = Context(m, n_ctx=16, backend="cuda")
        ref.decode(Batch.from_tokens(ids, 0, 0, "none"))
        b = ref.decode(Batch.from_tokens(more, 8, 0, "all"))
        check(np.array_equal(a, b), "state_seq_set after clearing: continuing == never cleared")
        # another sequence in the same batch changes nothing (batch invariance across sequences)
        two = Context(m, n_ctx=16, n_seq_max=2, backend="cuda")
        bt = Batch()
        for i in range(5):
            bt.add(other[i % 3], i, 1, False)
            bt.add(ids[i], i, 0, True)
        mixed = two.decode(bt)
        check(np.array_equal(mixed, clean[:5]), "rows of seq 0 mixed with seq 1 == alone (bits)")


def group_speculative():
    from specnb.gguf import forge
    from specnb.run.context import Context
    from specnb.speculation.params import SpecParams
    from specnb.speculation.loop import SpeculativeLoop
    from specnb.run.generate import generate
    from specnb.model import load_model
    from specnb.run.sampling import Sampler, SamplerParams
    with tempfile.TemporaryDirectory() as tmp:
        tp, tgt = _tiny(tmp, "Q8_0", n_layer=1, seed=11, small=True)
        dft = load_model(forge.requantize(tp, Path(tmp) / "dft.gguf", "Q4_0"))
        prompt = np.random.default_rng(0).integers(3, tgt.n_vocab, 4).tolist()
        greedy = SamplerParams(temp=0.0)
        sampled = SamplerParams(temp=0.8, top_k=40, top_p=1.0, min_p=0.0, seed=3)
        expect = {}
        for name, sp, seq_rm, vocab in (("greedy", greedy, True, 0), ("temp 0.8 top-k 40", sampled, True, 0),
                                        ("temp 0.8 top-k 40, checkpoints", sampled, False, 0),
                                        ("temp 0.8 top-k 40, a 120-token draft vocabulary", sampled, True, 120)):
            if id(sp) not in expect:
                ctx = Context(tgt, n_ctx=32, backend="cuda")
                expect[id(sp)] = generate(ctx, Sampler(sp), prompt, 8).tokens
            # partial_seq_rm=False: the target cannot drop rejected drafts and restores a
            # checkpoint instead (state_seq_get / state_seq_set on the device cache)
            loop = SpeculativeLoop(Context(tgt, n_ctx=32, backend="cuda", partial_seq_rm=seq_rm),
                                   Context(dft, n_ctx=32, backend="cuda"), prompt, 8, sp,
                                   SpecParams(n_max=3, draft_vocab=vocab))
            events = list(loop.rounds())
            got = loop.results()[0].tokens
            restored = sum(r.checkpoint == "restored" for ev in events for r in ev.slots)
            check(got == expect[id(sp)],
                  f"{name}: speculative == plain decoding on cuda ({len(got)} tokens, "
                  f"{loop.n_accept}/{loop.n_drafted} drafts kept, {restored} checkpoint restores)")




def group_launches():
    """The backend's launches: counted, ten per layer; its steps (views, launches, copies made
    once per batch shape) give the bits of steps made anew at every forward, across positions,
    batch shapes, the workspace's growth and a change of output head."""
    from specnb.run.context import Batch, Context
    with tempfile.TemporaryDirectory() as tmp:
        _, m = _tiny(tmp, "Q4_0", "qwen2", False, small=True)
        ids = _ids(m, 16, 6)
        kept, fresh = Context(m, n_ctx=16, backend="cuda"), Context(m, n_ctx=16, backend="cuda")
        fresh.backend.reuse_steps = False
        lc = kept.backend.launch_counts()
        check(lc["per_layer"] == 10 and lc["outside_layers"] == 3
              and lc["per_pass"] == 10 * m.hparams.n_layer + 3,
              f"one decoded token: {lc['per_pass']} launches, {lc['per_layer']} per layer + "
              f"{lc['outside_layers']} (21 per layer + 4 before)")
        before = kept.backend.n_launches
        kept.decode(Batch().add(ids[0], 0, 0, True))
        check(kept.backend.n_launches - before == lc["per_pass"],
              "the backend's counter adds the launches of each forward")
        kept.clear()
        # (rows, logits) per decode: a prompt, single tokens at new positions, a batch that grows
        # the workspace (cap 4 -> 8), single tokens again, then a restricted head and back
        plan = [(3, "all"), (1, "all"), (1, "all"), (5, "last"), (1, "all"), (1, "all")]
        p, same, steps = 0, True, []
        for i, (k, want) in enumerate(plan + [(1, "all"), (1, "all")]):
            if i == len(plan):
                for c in (kept, fresh):
                    c.set_output_ids(np.arange(2, m.n_vocab, 5))
            if i == len(plan) + 1:
                for c in (kept, fresh):
                    c.set_output_ids(None)
            b = Batch.from_tokens(ids[p:p + k], p, 0, want)
            a, f = kept.decode(b), fresh.decode(Batch.from_tokens(ids[p:p + k], p, 0, want))
            same = same and a.shape == f.shape and np.array_equal(a, f)
            steps.append(kept.backend._ws.steps.get((1, 1)))
            p += k
        check(same, f"steps kept per batch shape == steps made anew, bit for bit, over {len(plan) + 2} "
                    "decodes (new positions, the workspace grown, the head restricted and restored)")
        check(steps[1] is steps[2] and steps[4] is not steps[2] and steps[6] is not steps[5],
              "a step is reused at the next position, made again once the workspace grew or the "
              "head changed")
        # prepared launches that cannot be made (an unknown numba-cuda or driver binding): the
        # backend says why and launches through numba-cuda's dispatcher, with the same bits
        import warnings

        import specnb.run.backend_cuda as BC
        real = BC.prepare

        def failing(call, stream, mode):
            if mode == "prepared":
                raise RuntimeError("no driver binding here")
            return real(call, stream, mode)
        BC.prepare = failing
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                fb = Context(m, n_ctx=16, backend="cuda")
                got = fb.decode(Batch.from_tokens(ids[:3], 0, 0, "all"))
            lc = fb.backend.launch_counts()
        finally:
            BC.prepare = real
        ref = Context(m, n_ctx=16, backend="cuda").decode(Batch.from_tokens(ids[:3], 0, 0, "all"))
        check(np.array_equal(got, ref) and lc["launch"] == "numba"
              and "no driver binding here" in lc["launch_error"]
              and any("prepared launches could not be made" in str(w.message) for w in said),
              "prepared launches that fail to be made fall back to numba-cuda's dispatch, said "
              "once, same bits")


# ---- the device script (scripts/cuda_device.py) ------------------------------------------------

def group_device_script():
    """The device call's script, prep here and run there, on a tiny pair under the simulator."""
    import importlib.util
    import io
    from contextlib import redirect_stdout

    import gguf

    from specnb.model import load_model
    path = Path(__file__).resolve().parents[1] / "scripts" / "cuda_device.py"
    spec = importlib.util.spec_from_file_location("cuda_device", path)
    cd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cd)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tp, tgt = _tiny(tmp, "Q4_0", "qwen2", False, n_layer=2, seed=8, small=True)
        dp, _ = _tiny(tmp, "Q4_0", "qwen2", False, n_layer=1, seed=9, small=True)
        info = cd.prep(tmp / "skel", models=[str(tp), str(dp)], wheels=False)
        stem = tmp / "skel" / Path(tp).name.removesuffix(".gguf")
        twin = load_model(cd.build_twin(stem, tmp / "twin.gguf"))
        real, fake = gguf.GGUFReader(str(tp)), gguf.GGUFReader(str(tmp / "twin.gguf"))
        with open(tp, "rb") as a, open(tmp / "twin.gguf", "rb") as b:
            same_head = a.read(real.data_offset) == b.read(real.data_offset)
        layout = [(t.name, int(t.tensor_type), t.shape.tolist(), int(t.data_offset)) for t in real.tensors]
        check(same_head and layout == [(t.name, int(t.tensor_type), t.shape.tolist(), int(t.data_offset))
                                       for t in fake.tensors]
              and twin.hparams == tgt.hparams and info["carried_bytes"] > 0,
              "prep's skeleton makes a twin with the model's header, tensors, types and offsets")
        special = json.loads((tmp / "skel" / (stem.name + ".json")).read_text())["special_ids"]
        differs = any(not np.array_equal(np.asarray(a.data), np.asarray(b.data))
                      for a, b in zip(real.tensors, fake.tensors) if a.n_elements > 64)
        check(len(special) > 0 and not np.asarray(twin.output.data[special]).any() and differs,
              f"the twin's weights are its own, its {len(special)} special tokens' head rows zero")
        buf = io.StringIO()
        with redirect_stdout(buf):
            res = cd.run(tmp / "skel", tmp / "out", alpha=0.9, n_gen=3, bench_cli=False, quick=True)
        text = buf.getvalue()
        bits = res["launch_bits"]
        check(all(b["identical_to_numba"] for b in bits.values())
              and bits["prepared"]["launches"]["per_layer"] == 10,
              "run: numba-cuda's dispatch, prepared launches (and the graph, off here) give one "
              "set of bits")
        spec_runs = res["speculative"]["runs"]
        check(not res["errors"] and len(res["decode"]) == 6 and set(res["k_rows"]) == {"1", "2", "3", "4"}
              and spec_runs["exact 3"]["identical"] and spec_runs["exact 8"]["identical"]
              and "predicted 3" in res["speculative"]
              and json.loads((tmp / "out" / "cuda_device.json").read_text())["speculative"]
              and "launches per token (target): 23 = 10 per layer x 2 + 3" in text,
              "run: decode in three launch modes per model, the k-row curve, speculative == plain "
              "on the twins, the summary and the JSON")
