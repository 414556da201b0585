"""DraftSimple: greedy drafts against the NumPy reference, the p_min floor, the draft memory and
its rollback (seq_rm, or a checkpoint for a memory that cannot drop part of a sequence)."""
import numpy as np

from specnb.run.context import Batch, Context
from specnb.speculation.draft_simple import DraftSimple
from specnb.model.reference import Reference
from specnb.speculation.impl import DraftParams


def _prefilled(tgt, dft, prompt, partial=True, **kw):
    impl = DraftSimple(tgt, Context(dft, n_ctx=64, partial_seq_rm=partial, activations="f32"), **kw)
    impl.process(Batch.from_tokens(prompt[:-1], 0, 0, "none"))
    return impl


def _draft(impl, prompt, n_max=-1):
    dp = DraftParams(True, n_max, len(prompt) - 1, prompt[-1], prompt[:-1], [])
    impl.draft([dp])
    return dp.result


def test_greedy_drafts_are_the_reference_argmax(pair):
    """The draft is the draft model's argmax, step after step (the NumPy reference as oracle)."""
    tgt, dft = pair
    prompt = [5, 9, 14, 30, 2]
    impl = _prefilled(tgt, dft, prompt, n_max=4)
    got = _draft(impl, prompt)
    ref, seq = Reference(dft), list(prompt)
    for _ in range(4):
        seq.append(int(np.argmax(ref.forward(seq)[-1])))
    assert got == seq[len(prompt):]
    assert [i.token for i in impl.draft_info(0)] == got
    assert all(i.source == "draft-simple" and i.top_ids[0] == i.token for i in impl.draft_info(0))
    assert impl.n_eval_draft == 4                      # the seed row and 3 more (the last is not fed)
    impl.before_verify(0, len(prompt) - 1)            # back to [0, n_past), then draft again
    assert _draft(impl, prompt, n_max=2) == got[:2]    # the round's cap


def test_p_min_stops_before_the_token(pair):
    """p_min is tested before the token is taken (master); the stopped candidate is recorded."""
    tgt, dft = pair
    prompt = [5, 9, 14, 30, 2]
    full = _draft(_prefilled(tgt, dft, prompt, n_max=6), prompt)
    impl = _prefilled(tgt, dft, prompt, n_max=6, p_min=0.999)
    got = _draft(impl, prompt)
    info = impl.draft_info(0)
    assert got == full[:len(got)] and len(got) < len(full)
    assert info[-1].stopped_by_p_min and info[-1].p < 0.999 and info[-1].token == full[len(got)]


def test_checkpointed_draft_memory_behaves_as_a_removable_one(pair):
    """A memory that cannot drop part of a sequence: before_verify restores the pre-draft state
    (ckpt.load_dft) and seq_rm restores and decodes again the rows it keeps; the next draft is
    the same as from a memory that can drop rows."""
    tgt, dft = pair
    prompt = [5, 9, 14, 30, 2]
    n_past = len(prompt) - 1
    runs = {}
    for partial in (True, False):
        impl = _prefilled(tgt, dft, prompt, partial=partial, n_max=3)
        d = _draft(impl, prompt)
        assert impl.ctx.seq_pos_max(0) > n_past - 1    # drafting left rows behind
        impl.before_verify(0, n_past)
        assert impl.ctx.seq_pos_max(0) == n_past - 1
        # the target verified [id_last, d0, other]: one draft token accepted, then a replacement
        verify = Batch()
        for i, t in enumerate([prompt[-1], d[0], 7]):
            verify.add(t, n_past + i, 0, True)
        impl.process(verify)
        assert impl.ctx.seq_pos_max(0) == n_past + 2
        impl.seq_rm(0, n_past + 2)                     # keep id_last and d0
        assert impl.ctx.seq_pos_max(0) == n_past + 1
        nxt = prompt + [d[0], 7]
        runs[partial] = (_draft(impl, nxt), impl.n_eval_process)
    assert runs[True][0] == runs[False][0]
    assert runs[False][1] == runs[True][1] + 2         # the 2 kept rows decoded again


def test_draft_simple_keeps_no_state_of_specnbs_auto(pair):
    """DraftSimple mirrors common_speculative_impl_draft_simple (plus llama.cpp's own variants):
    `auto`'s deferred rows, catch-up window, position offsets and decode timings live in
    deferred.DeferredDraftSimple."""
    from specnb.speculation.deferred import DeferredDraftSimple
    tgt, dft = pair
    auto_state = {"defer", "_pending", "catch_up_window", "_off", "_decodes", "policy", "_begun"}
    plain = DraftSimple(tgt, Context(dft, n_ctx=16))
    assert not set(vars(plain)) & auto_state
    assert not {"offset", "_catch_up", "_windowed", "_kv_pos", "_seed_rows"} & set(dir(DraftSimple))
    deferred = DeferredDraftSimple(tgt, Context(dft, n_ctx=16))
    assert {"_pending", "_off", "_decodes"} <= set(vars(deferred)) and "policy" not in vars(deferred)


def test_n_max_zero_drafts_one_token_as_master_does(pair):
    """master's draft loop pushes the argmax before it tests n_max (tests/data/
    master_34af94cd_spec_args.json, draft_n_max_zero): --spec-draft-n-max 0 drafts one token
    a round, and the loop stays lossless."""
    import json
    from pathlib import Path
    from spec_checks import SAMPLERS, plain
    from specnb.speculation.loop import SpeculativeLoop
    from specnb.speculation.params import SpecParams
    fact = json.loads((Path(__file__).parent / "data" / "master_34af94cd_spec_args.json").read_text())
    assert "still drafts one token" in fact["draft_n_max_zero"]["rule"]
    tgt, dft = pair
    prompt = tgt.vocab.tokenize("Once upon a time")
    impl = _prefilled(tgt, dft, prompt, n_max=0)
    assert len(_draft(impl, prompt)) == 1
    assert _draft(_prefilled(tgt, dft, prompt, n_max=0, p_min=1.0), prompt) == []   # p_min still applies
    loop = SpeculativeLoop(Context(tgt, n_ctx=64), Context(dft, n_ctx=64), prompt, 12, SAMPLERS["greedy"],
                           SpecParams(n_max=0))
    events = list(loop.rounds())
    assert all(len(ev.slot.draft) == 1 for ev in events if not ev.slot.replay)
    assert loop.results()[0].tokens == plain(tgt, prompt, SAMPLERS["greedy"], 12)
