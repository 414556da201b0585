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


def _vocab(n, tokens=None):
    from types import SimpleNamespace
    toks = tokens or [f"t{i}" for i in range(n)]
    return SimpleNamespace(type="bpe", add_bos=False, bos_id=1, add_eos=False, eos_id=2, n_vocab=n, tokens=toks)


@pytest.mark.parametrize("extra", [0, 64, 128, 129, 200])
def test_vocab_size_passes_is_the_gates_size_check(extra):
    from specnb.vocab.gate import are_compatible
    base = [f"t{i}" for i in range(1000)]
    report = are_compatible(_vocab(1000, base), _vocab(1000 + extra, base + [f"<pad_{i}>" for i in range(extra)]))
    assert answers.vocab_size_passes(1000, 1000 + extra) == report.check("vocab size").ok == report.ok


def test_top_k_p_bounds_hold_what_the_top_k_sampler_gives():
    import numpy as np
    from specnb.run.sampling import Sampler, SamplerParams
    logits = np.random.default_rng(3).normal(0.0, 2.0, 500).astype(np.float32)
    lo, hi = answers.top_k_p_bounds(logits, 10)
    p = {}
    for k in (10, 40, 500):
        s = Sampler(SamplerParams(top_k=k, samplers=("top_k",), seed=0))
        s.sample_logits(logits)
        p[k] = float(s.get_candidates(do_sort=True).p[0])
    assert hi == pytest.approx(p[10], rel=1e-5) and lo == pytest.approx(p[500], rel=1e-5)
    assert lo < p[40] < hi


def test_acceptance_is_what_the_two_rules_keep_when_drawn():
    import numpy as np
    from specnb.speculation.verify import speculative_step
    p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
    q = np.array([0.30, 0.35, 0.15, 0.15, 0.05])
    exact, ratio = answers.acceptance(p, q)
    rng, n = np.random.Generator(np.random.PCG64(0)), 20000
    g = int(np.argmax(q))
    kept_exact = sum(int(rng.choice(5, p=p)) == g for _ in range(n)) / n
    kept_ratio = sum(speculative_step(int(rng.choice(5, p=q)), p, q, rng)[1] for _ in range(n)) / n
    assert exact == pytest.approx(kept_exact, abs=0.015) and ratio == pytest.approx(kept_ratio, abs=0.015)
    assert answers.acceptance(p, p) == pytest.approx((0.40, 1.0))


def test_rows_per_token_counts_the_round_rows_against_its_tokens():
    assert answers.rows_per_token(0.8, 4) == pytest.approx(5 / 3.3616)
    assert answers.rows_per_token(0.0, 3) == pytest.approx(4.0)            # nothing accepted: 4 rows a token
