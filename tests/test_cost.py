"""The cost model against its closed forms (Leviathan et al. 2023) and known values."""
import pytest

from specnb import ParamError
from specnb.measure import cost


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("gamma", [0, 1, 3, 7])
def test_expected_tokens_closed_form(alpha, gamma):
    got = cost.expected_tokens_per_call(alpha, gamma)
    assert got == pytest.approx(sum(alpha ** i for i in range(gamma + 1)), rel=1e-12)
    assert got == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha), rel=1e-12)
    # the same from per-position rates alpha^(i+1)
    assert 1 + sum(alpha ** (i + 1) for i in range(gamma)) == pytest.approx(got)   # 1 + sum of #acc rate/pos
    for c in (0.0, 0.05, 0.5):
        s = cost.speedup(alpha, gamma, c)
        assert s == pytest.approx(got / (gamma * c + 1), rel=1e-12)
        assert cost.speedup_from_rates([alpha ** (i + 1) for i in range(gamma)], c) == pytest.approx(s)
        rates = [alpha ** (i + 1) for i in range(gamma)]
        # the engine model with the paper's prices (free verification, gamma draft runs) is the
        # paper's formula; a verification batch costing b one-row runs divides it further
        assert cost.speedup_engine(rates, c, 1.0, gamma) == pytest.approx(s)
        for b, e in ((1.7, gamma + 1), (3.2, gamma)):
            assert cost.speedup_engine(rates, c, b, e) == pytest.approx(got / (c * e + b), rel=1e-12)


def test_limits_and_known_values():
    for g in range(6):
        assert cost.expected_tokens_per_call(1.0, g) == g + 1            # alpha -> 1
        assert cost.expected_tokens_per_call(1 - 1e-12, g) == pytest.approx(g + 1)
        assert cost.expected_tokens_per_call(1 - 1e-7, g) == pytest.approx(g + 1, rel=1e-6)
        assert cost.expected_tokens_per_call(0.0, g) == 1.0              # nothing accepted
        assert cost.speedup(1.0, g, 0.0) == g + 1
    for a in (0.0, 0.4, 1.0):
        assert cost.expected_tokens_per_call(a, 0) == 1.0                # gamma = 0: plain decoding
        assert cost.speedup(a, 0, 0.3) == 1.0
    # Leviathan et al. 2023: alpha 0.8, gamma 3 -> 2.952 tokens per call
    assert cost.expected_tokens_per_call(0.8, 3) == pytest.approx(2.952)
    assert cost.speedup(0.8, 3, 0.1) == pytest.approx(2.952 / 1.3)
    # the speedup in gamma rises then falls when c > 0
    s = [cost.speedup(0.8, g, 0.1) for g in range(12)]
    best = s.index(max(s))
    assert 0 < best < 11 and s[0] == 1.0


def test_alpha_estimators():
    for a in (0.2, 0.6, 0.9):
        assert cost.alpha_from_rates([a ** (i + 1) for i in range(4)]) == pytest.approx(a, abs=1e-9)
    assert cost.alpha_from_rates([]) == 0.0 and cost.alpha_from_rates([1.0, 1.0]) == 1.0
    assert cost.alpha_from_counts(3, 4) == 0.75 and cost.alpha_from_counts(0, 0) == 0.0
    assert cost.conditional_rates([0.9, 0.72, 0.36]) == pytest.approx([0.9, 0.8, 0.5])


@pytest.mark.parametrize("call", [
    lambda: cost.expected_tokens_per_call(1.5, 3), lambda: cost.expected_tokens_per_call(0.5, -1),
    lambda: cost.expected_tokens_per_call(float("nan"), 2), lambda: cost.speedup(0.5, 2, -1.0),
    lambda: cost.speedup_from_rates(["x"], 0.1),
    lambda: cost.speedup_engine([0.5], 0.1, -1.0, 2), lambda: cost.speedup_engine([0.5], 0.1, 1.0, float("nan")),
    lambda: cost.alpha_from_counts(5, 4)])
def test_cost_bad_input(call):
    with pytest.raises(ParamError):
        call()


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
@pytest.mark.parametrize("gamma", [0, 1, 4])
def test_accepted_length_distribution(alpha, gamma):
    """P(k accepted) of the i.i.d. model: a distribution whose mean plus the target's own token
    is Eq. 1's expected tokens per call."""
    probs = cost.accepted_length_probs(alpha, gamma)
    assert len(probs) == gamma + 1 and all(p >= 0 for p in probs)
    assert sum(probs) == pytest.approx(1.0, abs=1e-12)
    mean = sum(k * p for k, p in enumerate(probs))
    assert mean + 1 == pytest.approx(cost.expected_tokens_per_call(alpha, gamma), rel=1e-12)
    # P(at least i+1 accepted) = alpha^(i+1): llama.cpp's #acc rate/pos under the model
    for i in range(gamma):
        assert sum(probs[i + 1:]) == pytest.approx(alpha ** (i + 1), abs=1e-12)
    with pytest.raises(ParamError):
        cost.accepted_length_probs(alpha, -1)


def test_best_speedup_with_rows_is_theorem_3_8_with_the_batch_priced_by_its_rows():
    # against speedup_engine (the same accounting from per-position rates alpha^(i+1), the draft's
    # gamma evaluations, a (gamma + 1)-row batch at 1 + gamma row_cost) at every gamma, and the limits
    for alpha, c, r in [(0.92, 0.22, 0.18), (0.91, 0.27, 0.21), (0.5, 0.3, 0.25), (0.0, 0.1, 0.1)]:
        s, g = cost.best_speedup_with_rows(alpha, c, r, n_max=12)
        each = [cost.speedup_engine([alpha ** (i + 1) for i in range(k)], c, 1 + k * r, k) for k in range(1, 13)]
        assert s == pytest.approx(max(each)) and each[g - 1] == pytest.approx(s) and 1 <= g <= 12
    # an AMD EPYC Zen 3's case (docs/lab/2026-12-06-zen3.md): a draft at 0.218 / 0.980 GB, a row of 1.544 G
    # multiply-adds at 243 G/s against a 35 ms step, 92% acceptance: 1.63x at 4 or 5 tokens
    s, g = cost.best_speedup_with_rows(0.92, 0.218 / 0.980, 1.544 / 243 / 0.035)
    assert s == pytest.approx(1.63, abs=0.005) and g in (4, 5)     # (1.6294 and 1.6295)
    assert cost.best_speedup_with_rows(1.0, 0.0, 0.0, n_max=7) == (8.0, 7)     # free drafts, free rows
    assert cost.best_speedup_with_rows(0.0, 0.0, 0.0) == (1.0, 1)     # nothing accepted: every length
                                                                      # ties, and the shorter is kept
    assert cost.best_speedup_with_rows(0.9, 0.0, 1.0)[1] == 1                   # a row costs a step


@pytest.mark.parametrize("kw, name", [(dict(c=-0.1), "c"), (dict(row_cost=float("nan")), "row_cost"),
                                      (dict(n_max=0), "n_max"), (dict(n_max=True), "n_max"),
                                      (dict(c=True), "c")])
def test_best_speedup_with_rows_names_a_bad_value(kw, name):
    with pytest.raises(ParamError, match=name):
        cost.best_speedup_with_rows(**{"alpha": 0.8, "c": 0.2, "row_cost": 0.2, **kw})
