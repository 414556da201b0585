"""Each sampler of samplers.py: llama.cpp's own test cases, then each formula computed
independently with NumPy.

The first group repeats the cases of llama.cpp's tests/test-sampling.cpp at master 34af94cd
(main(), lines 342-424): logits = log(probs), one sampler, then (where that test does) dist;
the probabilities must match in the order the candidates end up in.
"""
import math

import numpy as np
import pytest

from specnb.run.rng import Mt19937
from specnb.run.samplers import (Candidates, Dist, Dry, LogitBias, MinP, Mirostat, MirostatV2, Penalties,
    Temperature, TopK, TopNSigma, TopP, Typical, Xtc)

P4 = [0.1, 0.2, 0.3, 0.4]


def run(probs, *steps, dist=True, history=()):
    with np.errstate(divide="ignore"):
        cur = Candidates.from_logits(np.log(np.float32(probs)))
    cur.p = np.float32(probs).copy()
    for st in steps:
        for t in history:
            st.accept(t)
        st.apply(cur)
    if dist:
        Dist(0).apply(cur)
    return cur


@pytest.mark.parametrize("step,probs,want,dist", [
    (Temperature(1.0), P4, P4, True),
    (Temperature(0.0), P4, [0, 0, 0, 1.0], True),
    (Temperature(1.0, 0.0, 1.0), P4, P4, True),
    (TopK(1), P4, [1.0], True),
    (TopK(3), P4, [0.44444, 0.33333, 0.22222], True),
    (TopK(4), P4, [0.4, 0.3, 0.2, 0.1], True),
    (TopP(0.0, 0), P4, [1.0], True),
    (TopP(0.7, 0), P4, [0.571429, 0.428571], True),
    (TopP(0.8, 0), P4, [0.44444, 0.33333, 0.22222], True),
    (MinP(0.24, 0), P4, P4, True),
    (MinP(0.26, 0), P4, [0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9], True),
    (MinP(0.49, 0), P4, [0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9], True),
    (MinP(0.51, 0), P4, [0.3 / 0.7, 0.4 / 0.7], True),
    (MinP(0.74, 0), P4, [0.3 / 0.7, 0.4 / 0.7], True),
    (MinP(0.76, 0), P4, [1.0], True),
    (MinP(1.00, 0), P4, [1.0], True),
    (MinP(1.05, 0), P4, [1.0], True),
    (Xtc(0.99, 0.09, 0, 0), [0.4, 0.3, 0.2, 0.1], [0.1], False),
    (Xtc(0.99, 0.19, 0, 0), [0.4, 0.3, 0.2, 0.1], [0.2, 0.1], False),
    (Xtc(0.99, 0.29, 0, 0), [0.4, 0.3, 0.2, 0.1], [0.3, 0.2, 0.1], False),
    (Xtc(0.99, 0.39, 0, 0), [0.4, 0.3, 0.2, 0.1], [0.4, 0.3, 0.2, 0.1], False),
    (Typical(0.5, 0), [0.97, 0.01, 0.01, 0.01], [0.97], False),
    (Typical(0.5, 0), [0.4, 0.2, 0.2, 0.2], [0.2, 0.2, 0.2], False),
    (TopNSigma(1.0), P4, [0.0, 0.0, 0.428571, 0.571429], True),
    (TopNSigma(3.0), P4, P4, True),
])
def test_llamacpp_test_sampling_cases(step, probs, want, dist):
    cur = run(probs, step, dist=dist)
    assert cur.p == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("history,want,repeat,freq,present", [
    ([0], [0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0),
    ([0, 1, 2], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997], 1.0, 5.0, 5.0),
    ([0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966], 1.0, 5.0, 5.0),
    ([0, 1, 2, 0, 0], [0.0, 0.000023, 0.000023, 0.499977, 0.499977], 1.0, 5.0, 5.0),
])
def test_llamacpp_penalties_cases(history, want, repeat, freq, present):
    cur = run([0.2] * 5, Penalties(len(history), repeat, freq, present), history=history)
    assert cur.p == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("probs,history,want,mult,base,allowed,last_n,breakers", [
    ([0.25] * 4, [0, 1], [0.25] * 4, 1.0, 1.1, 2, 4, {}),
    ([0.25] * 4, [0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 1.1, 2, 5, {}),
    ([0.2] * 5, [0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 2, 6, {3: [()]}),
    ([0.2] * 5, [0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 1.1, 2, 5, {}),
    ([0.2] * 5, [0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 4, 7, {}),
])
def test_llamacpp_dry_cases(probs, history, want, mult, base, allowed, last_n, breakers):
    cur = run(probs, Dry(mult, base, allowed, last_n, breakers), history=history)
    assert cur.p == pytest.approx(want, abs=1e-5)


def _ramp(n):
    # sampler_tester(n_vocab): logit = log(token id), so p is proportional to the id
    with np.errstate(divide="ignore"):
        return Candidates.from_logits(np.log(np.arange(n, dtype=np.float32)))


@pytest.mark.parametrize("seq,top_k,top_p,min_p", [
    ("k", 10000, 1.0, 1.0), ("k", 1, 1.0, 1.0), ("p", 10000, 1.0, 1.0), ("p", 10000, 0.0, 1.0),
    ("m", 10000, 1.0, 1.0), ("m", 10000, 1.0, 1e-12), ("k", 100, 1.0, 1.0),
    ("p", 10000, 0.0003, 1.0), ("p", 10000, 0.8, 1.0), ("m", 10000, 1.0, 9997.9 / 9999.0),
    ("m", 10000, 1.0, 0.1), ("kp", 100, 0.8, 0.1), ("km", 100, 0.8, 0.1), ("pk", 100, 0.8, 0.1),
    ("pm", 100, 0.8, 0.1), ("mk", 100, 0.8, 0.1), ("mp", 100, 0.8, 9997.9 / 9999.0),
    ("mp", 100, 0.8, 0.1), ("kpm", 100, 0.8, 0.1), ("kmp", 100, 0.8, 0.1), ("pkm", 100, 0.8, 0.1),
    ("pmk", 100, 0.8, 0.1), ("mkp", 100, 0.8, 0.1), ("mpk", 100, 0.8, 0.1),
])
def test_llamacpp_sampler_queue(seq, top_k, top_p, min_p):
    """test_sampler_queue: the size and the first/last ids after each step of a sequence."""
    n = 10000
    cur = _ramp(n)
    min_id, max_id = 0, n - 1
    for s in seq:
        step = {"k": TopK(top_k), "p": TopP(top_p, 1), "m": MinP(min_p, 1)}[s]
        if not (s == "p" and top_p >= 1.0) and not (s == "m" and min_p <= 0):
            step.apply(cur)
        Dist(0).apply(cur)
        size = cur.size
        if s == "k":
            want = min(size, top_k)
            min_id = max(min_id, n - top_k)
            assert size == want and cur.ids[0] == max_id and cur.ids[want - 1] == min_id
        elif s == "p":
            divisor = n * (n - 1) // 2 - min_id * (min_id - 1) // 2
            target = math.ceil(np.float32(top_p) * divisor)
            min_id, want, cum = n, 0, 0
            while True:
                min_id -= 1
                want += 1
                cum += min_id
                if cum >= target:
                    break
            if min_id == 1:
                min_id, want = 0, want + 1
            assert size == want
            assert not cur.sorted or (cur.ids[0] == max_id and cur.ids[want - 1] == min_id)
        else:
            want = min(max(math.ceil((1.0 - np.float32(min_p)) * n), 1), size)
            min_id = min(max(math.floor(np.float32(min_p) * n), 1, n - size), n - 1)
            assert size == want
            assert not cur.sorted or (cur.ids[0] == max_id and cur.ids[want - 1] == min_id)


def test_dist_single_candidate_still_draws():
    """test_dist_singleton_rng: master's dist draws once even for one candidate."""
    single, control = Dist(4242), Dist(4242)
    for d, logits in ((single, [0.0]), (control, [0.0, 0.0])):
        d.apply(Candidates.from_logits(logits))
    for _ in range(4):
        a, b = Candidates.from_logits(np.zeros(256)), Candidates.from_logits(np.zeros(256))
        single.apply(a)
        control.apply(b)
        assert a.selected == b.selected
    # c392e50's discrete_distribution draws nothing for one candidate
    single, control = Dist(4242, "c392e50"), Dist(4242, "c392e50")
    single.apply(Candidates.from_logits([0.0]))
    assert single.rng.u32() == control.rng.u32()


# ---- the formulas, computed independently ---------------------------------------------------
RNG = np.random.default_rng(11)


def softmax(x):
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


def logits(n=50, scale=2.0):
    return (RNG.standard_normal(n) * scale).astype(np.float32)


def test_penalty_formula():
    l = logits(20)
    l[3] = -1.5
    hist = [3, 3, 5, 7, 5, 3, 9]
    cur = Candidates.from_logits(l)
    pen = Penalties(6, 1.7, 0.3, 0.2)
    for t in hist:
        pen.accept(t)
    pen.apply(cur)
    want = l.astype(np.float64).copy()
    for t, c in zip(*np.unique(hist[-6:], return_counts=True)):
        v = want[t] * 1.7 if want[t] <= 0 else want[t] / 1.7
        want[t] = v - c * 0.3 - 0.2
    assert cur.logits == pytest.approx(want, rel=1e-6, abs=1e-6)
    assert dict(pen.counts) == {3: 2, 5: 2, 7: 1, 9: 1}


def dry_reference(hist, mult, base, allowed, breakers_single=()):
    """DRY by its definition: for each earlier position j, the longest L with
    hist[j-L:j] == hist[-L:] (not reaching back past a breaker); token hist[j] would extend a
    repeat of length L; penalty mult * base^(L - allowed) for L >= allowed."""
    n = len(hist)
    limit = n
    for i in range(n):                       # nearest one-token breaker from the end
        if hist[n - 1 - i] in breakers_single:
            limit = i
            break
    best = {}
    for j in range(n - 1):
        L = 0
        while L < j and hist[j - 1 - L] == hist[n - 1 - L]:
            L += 1
        L = min(L, limit)
        if L >= allowed:
            best[hist[j]] = max(best.get(hist[j], 0), L)
    return {t: mult * base ** (L - allowed) for t, L in best.items() if t not in breakers_single}


@pytest.mark.parametrize("seed", range(6))
def test_dry_formula(seed):
    rng = np.random.default_rng(seed)
    pattern = rng.integers(0, 6, 5).tolist()
    hist = (pattern * 3 + rng.integers(0, 6, 4).tolist() + pattern[:3])[-24:]
    l = logits(8)
    single = (int(rng.integers(0, 6)),) if seed % 2 else ()
    dry = Dry(0.8, 1.75, 2, 64, {t: [()] for t in single})
    for t in hist:
        dry.accept(t)
    cur = Candidates.from_logits(l)
    dry.apply(cur)
    want = l.astype(np.float64).copy()
    for t, pen in dry_reference(hist, 0.8, 1.75, 2, single).items():
        want[t] -= pen
    assert cur.logits == pytest.approx(want, rel=1e-5, abs=1e-5)


def repeats(hist, last_n, breakers):
    dry = Dry(1.0, 2.0, 1, last_n, breakers)
    for t in hist:
        dry.accept(t)
    return dry.max_repeats()


def test_dry_window_and_multi_token_breaker():
    # 1 2 3 1 2 3 1 2: the suffix 1 2 3 1 2 was followed by 3 (length 5); a window of 6 sees
    # only 3 1 2 3 1 2, where the repeat is 3 long
    assert repeats([1, 2, 3, 1, 2, 3, 1, 2], 16, {}) == {3: 5}
    assert repeats([1, 2, 3, 1, 2, 3, 1, 2], 6, {}) == {3: 3}
    # 5 6 1 2 9 5 6 1 2: the suffix 5 6 1 2 was followed by 9, but the breaker "5 6" (head 5,
    # tail 6) inside it limits repeats to the 2 tokens after it
    hist = [5, 6, 1, 2, 9, 5, 6, 1, 2]
    assert repeats(hist, 16, {}) == {9: 4}
    assert repeats(hist, 16, {5: [(6,)]}) == {9: 2}


def test_top_n_sigma_formula():
    l = logits(200)
    l[:5] = -np.inf
    cur = Candidates.from_logits(l)
    TopNSigma(1.5).apply(cur)
    fin = l[np.isfinite(l)].astype(np.float64)
    keep = l >= fin.max() - 1.5 * fin.std()
    assert np.array_equal(np.isfinite(cur.logits), keep)


def test_typical_formula():
    l = logits(30)
    cur = Candidates.from_logits(l)
    Typical(0.7, 0).apply(cur)
    p = softmax(l)
    h = -(p * np.log(p)).sum()
    order = np.argsort(np.abs(-np.log(p) - h), kind="stable")
    n = int(np.argmax(np.cumsum(p[order]) > 0.7)) + 1
    assert sorted(cur.ids.tolist()) == sorted(order[:n].tolist())


def test_xtc_formula_and_coin():
    l = np.log(np.float32([0.3, 0.25, 0.2, 0.15, 0.1]))
    # probability 1: every token with p >= 0.12 goes except the least likely of them (0.15)
    cur = Candidates.from_logits(l)
    Xtc(1.0, 0.12, 1, 5).apply(cur)
    assert cur.ids.tolist() == [3, 4]
    # probability 0.4: the cut happens exactly when the float draw of its mt19937 is <= 0.4
    x, coin = Xtc(0.4, 0.12, 1, 99), Mt19937(99)
    cuts = []
    for _ in range(200):
        cur = Candidates.from_logits(l)
        x.apply(cur)
        cuts.append(cur.size == 2)
        assert cuts[-1] == (coin.canonical_float() <= np.float32(0.4))
    assert 0.3 < np.mean(cuts) < 0.5


@pytest.mark.parametrize("temp,delta,exponent", [(0.8, 0.5, 1.0), (1.0, 0.7, 2.0), (0.3, 0.5, 0.5)])
def test_dynamic_temperature_formula(temp, delta, exponent):
    l = logits(40)
    cur = Candidates.from_logits(l)
    Temperature(temp, delta, exponent).apply(cur)
    p = softmax(l)
    h = -(p * np.log(p)).sum() / np.log(40)            # normalised entropy
    lo, hi = max(0.0, temp - delta), temp + delta
    want = softmax(l / (lo + (hi - lo) * h ** exponent))
    assert cur.dense(40) == pytest.approx(want, abs=2e-6)


def test_logit_bias_adds_and_removes():
    l = logits(10)
    cur = Candidates.from_logits(l)
    LogitBias([(2, 1.5), (2, 0.5), (7, -np.inf), (99, 3.0)]).apply(cur)
    want = l.astype(np.float64).copy()
    want[2] += 2.0
    want[7] = -np.inf
    assert cur.logits == pytest.approx(want)


def test_mirostat_v2_formula():
    l = logits(100, 3.0)
    m = MirostatV2(5, tau=3.0, eta=0.2)
    mu = 6.0
    for _ in range(30):
        cur = Candidates.from_logits(l)
        p = np.sort(softmax(l))[::-1]
        n = next((i for i in range(len(p)) if -np.log2(p[i]) > mu), len(p)) or 1
        m.apply(cur)
        assert cur.size == n
        q = p[:n] / p[:n].sum()
        assert cur.p == pytest.approx(q, rel=1e-5)
        mu = mu - 0.2 * (-np.log2(q[cur.selected]) - 3.0)
        assert float(m.mu) == pytest.approx(mu, rel=1e-5)


def test_mirostat_v1_formula():
    l = logits(500, 2.0)
    n_vocab = 500
    m = Mirostat(n_vocab, 5, tau=4.0, eta=0.1, m=100)
    mu = 8.0
    for _ in range(20):
        cur = Candidates.from_logits(l)
        p = np.sort(softmax(l))[::-1]
        i = np.arange(99)
        t, b = np.log((i + 2) / (i + 1)), np.log(p[:99] / p[1:100])
        s = (t * b).sum() / (t * t).sum()
        e = s - 1
        k = max(int((e * 2 ** mu / (1 - n_vocab ** -e)) ** (1 / s)), 1)
        m.apply(cur)
        assert abs(cur.size - k) <= 1                     # float32 vs float64 at the edge
        q = p[:cur.size] / p[:cur.size].sum()
        mu = mu - 0.1 * (-np.log2(q[cur.selected]) - 4.0)
        assert float(m.mu) == pytest.approx(mu, rel=1e-4)


def test_master_dist_walks_candidates_as_they_stand():
    """master's dist does not sort: the draw maps the uniform u onto the current order."""
    l = np.float32([0.0, 2.0, 1.0])
    cur = Candidates.from_logits(l)                 # vocab order, unsorted
    d, u_rng = Dist(17), Mt19937(17)
    d.apply(cur)
    p = softmax(l)
    u = u_rng.canonical_double()
    assert cur.selected == int(np.argmax(np.cumsum(p) >= u))
    assert cur.p == pytest.approx(p, rel=1e-6)
