"""Shared pieces of the speculative-decoding tests: sampler settings, prompts, plain decoding, and
the loop's round invariants checked from its events (loop.py's docstring). The tiny pairs are
conftest's fixtures `pair` and `tied_pair`."""
import numpy as np

from specnb.run.context import Context
from specnb.run.generate import generate
from specnb.run.sampling import Sampler, SamplerParams
from specnb.speculation.deferred import DeferredDraftSimple

SAMPLERS = {
    "greedy": SamplerParams(temp=0.0),
    "temp0.8-topk40": SamplerParams(temp=0.8, top_k=40, top_p=1.0, min_p=0.0),
    "top-p0.9": SamplerParams(temp=0.8, top_k=0, top_p=0.9, min_p=0.0),
    "min-p0.05": SamplerParams(temp=0.8, top_k=0, top_p=1.0, min_p=0.05),
    "repeat1.1": SamplerParams(temp=0.0, penalty_repeat=1.1, penalty_last_n=64),
}


def prompts(model, n, seed=0, length=6):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, model.n_vocab, length).tolist() for _ in range(n)]


def repetitive_prompt(model, seed=0, length=24):
    """A prompt that repeats itself, so the n-gram lookups find matches."""
    base = np.random.default_rng(seed).integers(3, model.n_vocab, length).tolist()
    return base + base[:length // 2]


def plain(model, prompt, sp, n_predict, n_ctx=128, penalize_prompt=True, activations=None):
    return generate(Context(model, n_ctx=n_ctx, activations=activations), Sampler(sp), prompt, n_predict,
                    penalize_prompt=penalize_prompt).tokens


def check_invariants(loop, events):
    """At every round start: the target KV holds exactly [0, n_past); the verification rows sit at
    n_past, n_past + 1, ...; >= 1 committed token per committed round; both memories end at the
    last committed position."""
    has_draft_model = loop.ctx_dft is not None
    ds = loop.chain.impl_of("draft-simple")
    if isinstance(ds, DeferredDraftSimple) and ds.partial:
        has_draft_model = False     # --draft-max auto: the draft catches up when it next drafts
        for sl in loop.slots:       # its KV and the rows it will catch up: the committed history
            ahead = sorted({p for _, p in ds._pending[sl.seq]})
            held = loop.ctx_dft.seq_pos_max(sl.seq)
            held += ds.offset(sl.seq) if held >= 0 else 0   # in the target's positions
            assert not ahead or (ahead[0] <= held + 1 and ahead == list(range(ahead[0], ahead[-1] + 1)))
            assert max([held] + ahead) == loop.ctx_tgt.seq_pos_max(sl.seq)
    for ev in events:
        for r in ev.slots:
            assert r.kv_tgt.drafted == r.n_past - 1, "target KV must hold exactly [0, n_past)"
            assert r.batch_pos == list(range(r.n_past, r.n_past + 1 + len(r.draft)))
            assert len(r.ids) >= 1 and r.n_accepted == len(r.ids) - 1
            assert (r.impl == "") == (r.replay or not r.draft)
            if r.checkpoint != "restored":
                assert len(r.committed) >= 1
                assert r.kv_tgt.after == r.n_past + len(r.committed) - 1 or r.stop_reason
                if has_draft_model:
                    assert r.kv_dft.after == r.kv_tgt.after or r.stop_reason
            else:
                assert r.kv_tgt.after == r.n_past - 1, "a restored round is back at [0, n_past)"
                if has_draft_model:
                    assert r.kv_dft.after == r.n_past - 1
            if not r.replay:
                assert 0 <= r.n_accepted <= len(r.draft)
            for info in r.draft_info[:len(r.draft)]:
                assert info.source == r.impl
            assert [i.token for i in r.draft_info[:len(r.draft)]] == r.draft or r.replay
