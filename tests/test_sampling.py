"""The sampler chain and sample_and_accept_n, checked against hand-computed expectations."""
import math

import numpy as np
import pytest

from specnb import ParamError
from specnb.sampling import Sampler, SamplerParams, sample_and_accept_n


class FakeCtx:
    """Just enough of a Context for the sampler: logits rows by batch index."""

    def __init__(self, rows):
        self.rows = [np.asarray(r, dtype=np.float32) for r in rows]

    def get_logits_ith(self, i):
        return self.rows[i]


def onehotish(n, hot, v=10.0):
    r = np.zeros(n, dtype=np.float32)
    r[hot] = v
    return r


def test_greedy_is_argmax():
    rng = np.random.default_rng(0)
    s = Sampler(SamplerParams(temp=0.0, seed=1))
    for _ in range(20):
        l = rng.standard_normal(1000).astype(np.float32)
        assert s.sample_logits(l) == int(np.argmax(l))


def test_greedy_with_penalty_avoids_repeats():
    l = np.array([5.0, 4.9, 1.0], dtype=np.float32)
    s = Sampler(SamplerParams(temp=0.0, penalty_repeat=1.1, penalty_last_n=8))
    assert s.sample_logits(l) == 0
    s.accept(0)
    # 5.0 / 1.1 = 4.545 < 4.9: the repeat penalty flips the argmax (llama.cpp's formula)
    assert s.sample_logits(l) == 1


def test_penalty_formula_negative_logits_are_multiplied():
    p = SamplerParams(temp=0.0, penalty_repeat=2.0, penalty_freq=0.5, penalty_present=0.25,
                      top_k=0, min_p=0.0, top_p=1.0)
    s = Sampler(p)
    s.accept(1); s.accept(1); s.accept(0)
    c = s._candidates(np.array([3.0, -1.0, 0.5], dtype=np.float32))
    got = dict(zip(c.ids.tolist(), c.logits.tolist()))
    assert got[0] == pytest.approx(3.0 / 2.0 - 1 * 0.5 - 0.25)
    assert got[1] == pytest.approx(-1.0 * 2.0 - 2 * 0.5 - 0.25)
    assert got[2] == pytest.approx(0.5)


def test_penalty_window_slides():
    s = Sampler(SamplerParams(penalty_last_n=2, penalty_repeat=1.5))
    for t in (1, 2, 3):
        s.accept(t)
    assert dict(s.counts) == {2: 1, 3: 1}


def test_distribution_matches_softmax():
    """temp 1, no truncation: frequencies follow softmax(logits) (chi-square test)."""
    l = np.array([2.0, 1.0, 0.5, 0.0, -1.0], dtype=np.float32)
    p = np.exp(l - l.max()); p /= p.sum()
    s = Sampler(SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=123))
    n = 20000
    counts = np.bincount([s.sample_logits(l) for _ in range(n)], minlength=5)
    chi2 = ((counts - n * p) ** 2 / (n * p)).sum()
    assert chi2 < 18.5          # 4 degrees of freedom, p = 0.001


def test_temperature_sharpens():
    l = np.array([1.0, 0.0], dtype=np.float32)
    s = Sampler(SamplerParams(temp=0.5, top_k=0, top_p=1.0, min_p=0.0, seed=5))
    s.sample_logits(l)
    c = s.get_candidates()
    assert c.p[0] == pytest.approx(1 / (1 + math.exp(-2.0)))


def test_top_k_top_p_min_p_truncate_as_defined():
    l = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float64)).astype(np.float32)
    def kept(**kw):
        s = Sampler(SamplerParams(temp=1.0, **kw))
        s.sample_logits(l)
        return sorted(s.get_candidates().ids.tolist())
    assert kept(top_k=2, top_p=1.0, min_p=0.0) == [0, 1]
    # top-p keeps the smallest prefix whose mass reaches p: 0.5 + 0.2 + 0.15 >= 0.8
    assert kept(top_k=0, top_p=0.8, min_p=0.0) == [0, 1, 2]
    # min-p keeps tokens with p >= min_p * p_max: 0.25 * 0.5 = 0.125
    assert kept(top_k=0, top_p=1.0, min_p=0.25) == [0, 1, 2]
    # typical-p with p = 1 changes nothing
    assert kept(top_k=0, top_p=1.0, min_p=0.0, typ_p=1.0) == [0, 1, 2, 3, 4]


def test_clone_replays_the_same_draws():
    l = np.zeros(50, dtype=np.float32)
    s = Sampler(SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=9))
    s.sample_logits(l)
    c = s.clone()
    a = [s.sample_logits(l) for _ in range(10)]
    b = [c.sample_logits(l) for _ in range(10)]
    assert a == b


@pytest.mark.parametrize("kw,name", [
    (dict(temp=-0.1), "temp"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(min_p=-0.1), "min_p"), (dict(temp=float("nan")), "temp"), (dict(seed=-5), "seed"),
    (dict(penalty_last_n=-2), "penalty_last_n"), (dict(top_k=1.5), "top_k"),
    (dict(penalty_repeat=0.0), "penalty_repeat"), (dict(typ_p=0.0), "typ_p"),
])
def test_invalid_sampler_values(kw, name):
    with pytest.raises(ParamError, match=name):
        SamplerParams(**kw).validate()


def test_sample_and_accept_n_partial_and_bonus():
    n = 20
    # target greedy: row i predicts token 10 + i
    rows = [onehotish(n, 10 + i) for i in range(5)]
    ctx = FakeCtx(rows)
    s = Sampler(SamplerParams(temp=0.0))
    # draft matches rows 0 and 1, row 2 disagrees -> 3 ids: 10, 11 accepted, 12 replaces 7
    assert sample_and_accept_n(s, ctx, [10, 11, 7, 13]) == [10, 11, 12]
    # full acceptance -> bonus token from the row after the last draft token
    assert sample_and_accept_n(s, ctx, [10, 11, 12]) == [10, 11, 12, 13]
    # empty draft -> exactly one token
    assert sample_and_accept_n(s, ctx, []) == [10]
    # explicit row indices (several sequences in one batch)
    assert sample_and_accept_n(s, ctx, [12], idxs=[2, 3]) == [12, 13]
    with pytest.raises(ParamError):
        sample_and_accept_n(s, ctx, [1, 2], idxs=[0])
    # every sampled token was accepted into the penalty window
    assert list(s.prev)[-2:] == [12, 13]
