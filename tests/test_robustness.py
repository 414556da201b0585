"""Interrupted runs, threads, the end of the context, parameter checks."""
import threading

import pytest

from specnb import ContextFullError, ParamError
from specnb.gguf import forge
from specnb.run.context import Batch, Context
from specnb.speculation.params import SpecParams
from specnb.speculation.loop import SpeculativeLoop
from specnb.run.generate import generate
from specnb.run.sampling import Sampler, SamplerParams

SP = SamplerParams(temp=0.8, top_k=40, top_p=1.0, min_p=0.0, seed=5)


def _spec(ct, cd, prompt, n=24, **kw):
    return SpeculativeLoop(ct, cd, prompt, n, SP, SpecParams(n_max=3, **kw)).run()[0].tokens


class Interrupting:
    """Wrap a backend so that its k-th forward pass raises KeyboardInterrupt."""

    def __init__(self, ctx, k):
        self.ctx, self.k, self.n = ctx, k, 0
        self.inner = ctx.backend
        ctx.backend = self

    def forward(self, *a):
        self.n += 1
        if self.n == self.k:
            raise KeyboardInterrupt
        return self.inner.forward(*a)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def restore(self):
        self.ctx.backend = self.inner


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("which", ["target", "draft"])
def test_interrupted_speculative_run_leaves_contexts_usable(pair, k, which):
    tgt, dft = pair
    prompt = [5, 6, 7, 8]
    fresh = _spec(Context(tgt, n_ctx=96), Context(dft, n_ctx=96), prompt)
    ct, cd = Context(tgt, n_ctx=96), Context(dft, n_ctx=96)
    trap = Interrupting(ct if which == "target" else cd, k)
    with pytest.raises(KeyboardInterrupt):
        _spec(ct, cd, prompt)
    trap.restore()
    assert _spec(ct, cd, prompt) == fresh
    # and plain decoding from the same target context is unaffected too
    assert generate(ct, Sampler(SP), prompt, 10).tokens == \
        generate(Context(tgt, n_ctx=96), Sampler(SP), prompt, 10).tokens


def test_interrupted_decode_restores_the_memory(pair):
    tgt, _ = pair
    ctx = Context(tgt, n_ctx=32)
    ctx.decode(Batch.from_tokens([5, 6, 7], 0, 0, "last"))
    trap = Interrupting(ctx, 1)
    with pytest.raises(KeyboardInterrupt):
        ctx.decode(Batch.from_tokens([8, 9], 3, 0, "last"))
    trap.restore()
    assert ctx.seq_pos_max(0) == 2 and ctx.kv_used(0) == 3


def test_two_threads_same_as_sequential(pair):
    tgt, dft = pair
    prompts = [[5, 6, 7], [9, 10, 11, 12]]
    seq = [_spec(Context(tgt, n_ctx=96), Context(dft, n_ctx=96), p, 30) for p in prompts]
    out = [None, None]

    def work(i):
        out[i] = _spec(Context(tgt, n_ctx=96), Context(dft, n_ctx=96), prompts[i], 30)
    ths = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(timeout=600)
    assert out == seq


def test_end_of_context_plain_and_speculative(pair):
    tgt, dft = pair
    prompt = [5, 6, 7, 8, 9, 10]
    greedy = SamplerParams(temp=0.0, penalty_repeat=1.3)
    r = generate(Context(tgt, n_ctx=16), Sampler(greedy), prompt, 100)
    assert r.stop_reason in ("context_full", "eog")
    if r.stop_reason == "context_full":
        assert "n_ctx=16" in r.message and len(r.tokens) == 16 - len(prompt) + 1
    for seq_rm in (True, False):
        loop = SpeculativeLoop(Context(tgt, n_ctx=16, partial_seq_rm=seq_rm), Context(dft, n_ctx=16),
                               prompt, 100, greedy, SpecParams(n_max=4))
        res = loop.run()[0]
        assert res.tokens == r.tokens and res.stop_reason == r.stop_reason
    # several sequences, each stopping at the end of its own cells
    prompts = [prompt, prompt[:3]]
    ct = Context(tgt, n_ctx=16, n_seq_max=2)
    loop = SpeculativeLoop(ct, Context(dft, n_ctx=16, n_seq_max=2), prompts, 100, greedy,
                           SpecParams(n_max=4))
    res = loop.run()
    for p, rr in zip(prompts, res):
        assert rr.tokens == generate(Context(tgt, n_ctx=16), Sampler(greedy), p, 100).tokens


def test_prompt_longer_than_context(pair):
    tgt, dft = pair
    with pytest.raises(ContextFullError, match="longer than the context"):
        generate(Context(tgt, n_ctx=8), Sampler(SP), list(range(5, 15)), 4)
    with pytest.raises(ContextFullError):
        SpeculativeLoop(Context(tgt, n_ctx=8), Context(dft, n_ctx=8), list(range(5, 15)), 4, SP)
    with pytest.raises(ParamError, match="empty"):
        generate(Context(tgt, n_ctx=8), Sampler(SP), [], 4)
    with pytest.raises(ParamError, match="n_predict"):
        generate(Context(tgt, n_ctx=8), Sampler(SP), [5], 0)


@pytest.mark.parametrize("kw,name", [
    (dict(n_threads=0), "n_threads"), (dict(n_threads=10_000), "n_threads"),
    (dict(n_ctx=-5), "n_ctx"), (dict(n_seq_max=1000), "n_seq_max"), (dict(n_batch=0), "n_batch"),
])
def test_context_parameters(pair, kw, name):
    with pytest.raises(ParamError, match=name):
        Context(pair[0], **kw)


def test_forge_refuses_to_overwrite_its_source(tiny_path):
    src = tiny_path("Q8_0")
    before = open(src, "rb").read()
    with pytest.raises(ParamError, match="is the source file"):
        forge.requantize(src, src, "Q4_0")
    assert open(src, "rb").read() == before
