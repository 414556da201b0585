"""specnb.app.answers (the course door's `answers`): each answer against what the engine does."""
import pytest

from specnb.app import answers
from specnb.figures.cost_map import round_cost
from specnb.measure import cost


def test_after_round_is_what_the_loop_does(run_pair):
    loop, events = run_pair(n_predict=24, n_max=4)
    for ev in events:
        r = ev.slot
        if r.replay:
            continue
        assert answers.after_round(r.n_past, len(r.draft), r.n_accepted) == (
            r.n_past + len(r.committed), r.batch_pos[r.n_accepted + 1:]) or len(r.committed) < r.n_accepted + 1
    assert answers.after_round(20, 4, 2) == (23, [23, 24])


def test_best_gamma_is_where_leviathans_speedup_peaks():
    g = answers.best_gamma(0.7, 0.05)
    assert g == 6
    assert cost.speedup(0.7, g, 0.05) > max(cost.speedup(0.7, g - 1, 0.05), cost.speedup(0.7, g + 1, 0.05))
    assert answers.best_gamma(0.9, 1.0) == 1                       # a draft as dear as the target: the shortest
    assert answers.best_gamma(0.99, 0.0, gammas=range(1, 9)) == 8   # free drafts, near-certain: the longest


@pytest.mark.parametrize("alpha, gamma", [(0.8, 3), (0.95, 4), (0.5, 1)])
def test_break_even_c_makes_the_round_pay_exactly_its_tokens(alpha, gamma):
    bc = {1: 1.0, **{k: 1 + 0.2 * (k - 1) for k in range(2, 10)}}
    bd = {1: 1.0, **{k: 1 + 0.5 * (k - 1) for k in range(2, 10)}}
    c = answers.break_even_c(alpha, gamma, bc, bd)
    if c >= 0:
        assert cost.expected_tokens_per_call(alpha, gamma) == pytest.approx(round_cost(gamma, c, bc, bd))
    # batch costs in seconds are divided by their own one-row entry
    assert answers.break_even_c(alpha, gamma, {k: 2 * v for k, v in bc.items()}, bd) == pytest.approx(c)


def test_the_limit_and_the_tree():
    assert answers.tokens_limit(0.8) == pytest.approx(cost.speedup(0.8, 400, 0.0))
    chain, tree = answers.chain_and_tree()
    assert chain == pytest.approx(0.5 * sum(0.9 ** k for k in range(6)) + 1)
    assert tree == pytest.approx(0.5 * 2.71 + 0.3 * 2.71 + 1) and chain > tree
