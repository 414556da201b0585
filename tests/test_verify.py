"""verify.py: rejection sampling against the target distribution, synthetic acceptance as llama.cpp's
server verifies it."""
import numpy as np
import pytest

from specnb import ParamError
from specnb.context import Context
from specnb.sampling import Sampler, SamplerParams
from specnb.verify import (one_hot, rejection_verify, synth_len_to_p, synth_rates_resolve,
                           synth_verify)
from spec_checks import tiny_pair  # noqa: F401


def test_synthetic_rates_validation_and_resolution():
    """common_speculative_synth_rates_resolve: exactly n_max finite, non-increasing rates in [0, 1]."""
    assert synth_rates_resolve([0.9, 0.72, 0.36], 3) == pytest.approx([0.9, 0.8, 0.5])
    for bad in ([0.5, 0.7, 0.1], [1.2, 1.0, 0.5], [float("nan")] * 3, [], ["x"],
                [0.9, 0.8], [0.9, 0.8, 0.7, 0.6]):            # llama.cpp refuses a length != n_max
        with pytest.raises(ParamError):
            synth_rates_resolve(bad, 3)
    with pytest.raises(ParamError, match="must contain 3 values"):
        synth_rates_resolve([0.9, 0.8], 3)
    with pytest.raises(ParamError, match="at least one speculative token"):
        synth_rates_resolve([0.9], 0)
    p = synth_len_to_p(2.5, 4)
    assert p + p**2 + p**3 + p**4 == pytest.approx(1.5, abs=1e-9)
    assert synth_len_to_p(5.0, 4) == 1.0 and synth_len_to_p(1.0, 4) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ParamError, match="synth_len"):
        synth_len_to_p(9.0, 3)


class _Counting(Sampler):
    """A sampler that counts its sample() calls."""
    n_sample = 0

    def sample(self, ctx, idx):
        self.n_sample += 1
        return super().sample(ctx, idx)


def test_synthetic_verifier_samples_every_position(tiny_pair):
    """server_sample_and_accept_synth samples the target at every position, also where the
    coin accepts the draft token, and keeps the drafted token in the sampler's window."""
    tgt, _ = tiny_pair
    ctx = Context(tgt, n_ctx=32)
    from specnb.context import Batch
    draft = [7, 8, 9]
    ctx.decode(Batch.from_tokens([5, 6] + draft, 0, 0, "all"))
    idxs = [1, 2, 3, 4]
    rng = np.random.Generator(np.random.PCG64(0))
    s = _Counting(SamplerParams(temp=0.8, seed=1))
    ids = synth_verify(s, ctx, draft, idxs, [1.0, 1.0, 1.0], rng, tgt.vocab, False)
    assert ids[:3] == draft and len(ids) == 4 and s.n_sample == 4
    assert list(s.prev)[:3] == draft
    s = _Counting(SamplerParams(temp=0.8, seed=1))
    ids = synth_verify(s, ctx, draft, idxs, [1.0, 0.0, 1.0], rng, tgt.vocab, False)
    assert ids[0] == 7 and len(ids) == 2 and s.n_sample == 2
    # a replay keeps every token and draws no coin
    state = rng.bit_generator.state
    s = _Counting(SamplerParams(temp=0.8, seed=1))
    assert synth_verify(s, ctx, draft, idxs, [0.0, 0.0, 0.0], rng, tgt.vocab, True)[:3] == draft
    assert rng.bit_generator.state == state and s.n_sample == 4


def test_rejection_verify_follows_target_distribution(tiny_pair):
    """Leviathan/Chen verification: the first two committed tokens follow the target's p.

    p and q are the real target and draft distributions of the tiny pair after a prompt
    (the exact joint law of two tokens is p(a) p(b|a); we check the marginal of the first and
    the conditional of the second after the most likely first token), sampled many times.
    """
    from specnb.verify import target_dist as _target_dist
    from specnb.reference import Reference
    tgt, dft = tiny_pair
    prompt = [5, 9, 14]
    T = 1.0
    rt, rd = Reference(tgt), Reference(dft)
    p0 = _target_dist(rt.forward(prompt)[-1], T)
    q0 = _target_dist(rd.forward(prompt)[-1], T)
    a_star = int(np.argmax(p0))
    p1 = _target_dist(rt.forward(prompt + [a_star])[-1], T)
    q1 = _target_dist(rd.forward(prompt + [a_star])[-1], T)
    p2 = _target_dist(rt.forward(prompt + [a_star, int(np.argmax(p1))])[-1], T)
    rng = np.random.default_rng(0)
    n = 20000
    first = np.zeros(tgt.n_vocab)
    second = np.zeros(tgt.n_vocab)
    for _ in range(n):
        d0 = int(rng.choice(len(q0), p=q0))
        d1 = int(rng.choice(len(q1), p=q1)) if d0 == a_star else int(np.argmax(q1))
        # rows beyond a mismatch are never used, so p1/p2 stand in for the off-path rows
        ids = rejection_verify([d0, d1], [q0, q1], [p0, p1, p2], rng)
        first[ids[0]] += 1
        if ids[0] == a_star and len(ids) > 1:
            second[ids[1]] += 1
    def tv(counts, p):
        return 0.5 * np.abs(counts / counts.sum() - p).sum()
    # total variation of an n-sample empirical law: about sqrt(support / n) / 2 by chance
    for counts, p in ((first, p0), (second, p1)):
        support = int((p > 1e-4).sum())
        assert tv(counts, p) < 1.5 * np.sqrt(support / counts.sum()) / 2 + 0.01
    # and the draft alone (no verification) is measurably further from p: the test has power
    assert 0.5 * np.abs(q0 - p0).sum() > 0.02



def test_rejection_with_a_deterministic_draft_follows_the_target():
    """A draft with no distribution (an n-gram lookup) is a one-hot q: keep d with probability
    p(d), else sample from p without d. The first token then follows p exactly."""
    rng = np.random.default_rng(0)
    p0 = rng.dirichlet(np.ones(12))
    p1 = rng.dirichlet(np.ones(12))
    d = int(np.argsort(p0)[-2])
    n = 40000
    first = np.zeros(12)
    for _ in range(n):
        ids = rejection_verify([d], [one_hot(d, 12)], [p0, p1], rng)
        first[ids[0]] += 1
    assert 0.5 * np.abs(first / n - p0).sum() < 1.5 * np.sqrt(12 / n) / 2 + 0.005
