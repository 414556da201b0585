"""app/cost_story.py: runs as points of the (α, c_loop) map, the paragraph read off it, and the
speed-up over the first tokens of a run."""
import re

import pytest

from specnb.app import cost_story
from specnb.figures.cost_map import break_even_alpha
from specnb.measure.turns import Comparison, LoopCosts, Run
from specnb.measure.verdict import check_said, interval
from specnb.speculation.events import RoundEvent, SlotRound

BC = {1: 1.0, **{k: 1 + 0.25 * (k - 1) for k in range(2, 18)}}     # an extra row at a quarter of a step


def _event(n_draft, n_acc, impl="draft-simple", t_draft=0.0, t_round=0.04):
    s = SlotRound(0, 0, 0, list(range(n_draft)), impl=impl if n_draft else "", n_accepted=n_acc,
                  committed=list(range(n_acc + 1)))
    return RoundEvent(0, [s], t_draft=t_draft, t_round=t_round)


def _comparison(ratios, rounds, impl="draft-simple", t_draft=0.0):
    """Passes whose plain runs take 10 tokens at 50 ms and whose speculative runs take
    0.5 s / ratio, each with the given rounds [(drafted, accepted), ...]."""
    plain = [Run(tuple(range(10)), "", 0.5) for _ in ratios]
    spec = [Run(tuple(range(10)), "", 0.5 / r, None, tuple(_event(d, a, impl, t_draft) for d, a in rounds))
            for r in ratios]
    return Comparison.of("p", "greedy", plain, spec)


def test_a_point_is_alpha_c_loop_coverage_and_the_interval():
    comp = _comparison([1.3, 1.4], [(3, 3), (3, 1), (0, 0), (3, 2)], t_draft=0.03)
    p = cost_story.map_point(comp, BC, short="c")
    assert p["alpha"] == pytest.approx(6 / 8)          # accepted 3 + 1 + 2 of the 3 + 2 + 3 examined
    assert p["alpha"] == pytest.approx(comp.alpha)
    assert p["measured"] == comp.speedup and p["measured"].estimate == pytest.approx(1.35)
    assert p["coverage"] == pytest.approx(3 / 4) and p["kind"] == cost_story.MODEL and p["short"] == "c"
    c_loop = LoopCosts.of(comp.plain[0], comp.spec[0]).c_loop
    assert p["c"] == pytest.approx(c_loop) and p["c_range"] == (pytest.approx(c_loop), pytest.approx(c_loop))
    assert p["predicted"] == pytest.approx(cost_story.predicted(p["alpha"], p["c"], BC, 0.75))
    # a lookup sits at c = 0; a run that never drafted has no α and no point
    look = cost_story.map_point(_comparison([1.1, 1.2], [(8, 8), (0, 0)], impl="ngram-simple"), BC)
    assert look["c"] == 0.0 and look["kind"] == cost_story.LOOKUP and look["coverage"] == pytest.approx(0.5)
    assert cost_story.map_point(_comparison([1.0, 1.0], [(0, 0)]), BC) is None


def test_a_chain_spreads_its_draft_models_time_over_every_drafted_token():
    # a lookup round of 8 tokens (the draft model catching up on them: 20 ms of process()) and a model
    # round of 3 (10 ms drafting); plain decoding at 50 ms a token
    evs = (_event(8, 8, "ngram-simple"), _event(3, 3, "draft-simple", t_draft=0.01))
    evs[0].t_process = 0.02
    comp = Comparison.of("p", "g", [Run(tuple(range(10)), "", 0.5)], [Run(tuple(range(10)), "", 0.3, None, evs)])
    p = cost_story.map_point(comp, BC)
    assert p["kind"] == cost_story.CHAIN and p["symbol"] == "square"
    assert p["c"] == pytest.approx(0.03 / 11 / 0.05)
    assert LoopCosts.of(comp.plain[0], comp.spec[0]).c_loop == pytest.approx(0.03 / 3 / 0.05)   # the model's alone


def test_the_prediction_weighs_the_drafting_rounds_by_coverage():
    full = cost_story.predicted(0.9, 0.1, BC)
    assert cost_story.predicted(0.9, 0.1, BC, coverage=0.0) == pytest.approx(1.0)
    assert 1.0 < cost_story.predicted(0.9, 0.1, BC, coverage=0.3) < full


def _pt(alpha, c, ratios, kind=cost_story.MODEL, coverage=1.0):
    return {"alpha": alpha, "c": c, "measured": interval(ratios), "kind": kind, "coverage": coverage,
            "predicted": cost_story.predicted(alpha, c, BC, coverage)}


def test_the_story_names_every_run_and_follows_its_numbers():
    points = {"defaults": _pt(0.8, 0.6, [0.8, 0.85]), "completion": _pt(0.99, 0.6, [1.2, 1.3]),
              "cheap draft": _pt(0.95, 0.25, [1.4, 1.5]), "poem": _pt(0.4, 0.6, [0.95, 1.05]),
              "lookup": _pt(0.9, 0.0, [0.9, 0.95], cost_story.LOOKUP, coverage=0.1)}
    text = cost_story.map_story(points, BC, interval([0.4, 0.41, 0.42]), "defaults", "cheap draft")
    assert check_said(text) == []
    even = break_even_alpha(0.6, BC, replay=False)
    assert "c_loop = 0.60" in text and f"α ≥ {even:.2f}" in text and "a draft step alone, is 0.41" in text
    assert "2 won: completion (α 0.99, c_loop 0.60), cheap draft (α 0.95, c_loop 0.25)" in text
    assert "2 lost: defaults (α 0.80, c_loop 0.60), lookup (α 0.90, c_loop 0.00)" in text
    assert "1 was within the noise: poem" in text
    # the lookup lost where the map (with its 10% coverage) predicts a small win: named as a miss
    assert points["lookup"]["predicted"] > 1.0
    assert "put 3 of the 4 decided runs" in text and "not lookup (predicted" in text and "in 10% of its rounds" in text
    assert "The others won where their α lay beyond the contour" in text
    assert "lower c_loop to 0.25 (cheap draft)" in text and "it wins (1.45x" in text
    assert re.search(r"lookup in 10% of its rounds, α = 0.90: loses \(", text)


def test_the_story_draws_a_conclusion_only_when_the_map_called_every_decided_run():
    points = {"defaults": _pt(0.8, 0.6, [0.8, 0.85]), "completion": _pt(0.99, 0.6, [1.2, 1.3])}
    text = cost_story.map_story(points, BC, interval([0.4]), "defaults")
    assert "put 2 of the 2 decided runs" in text and "each won where its α lay beyond the contour" in text
    points["odd"] = _pt(0.3, 0.6, [1.2, 1.3])                   # a win the map does not predict
    text = cost_story.map_story(points, BC, interval([0.4]), "defaults")
    assert "put 2 of the 3 decided runs" in text and "each won where" not in text and "not odd" in text
    points = {"defaults": _pt(0.3, 0.6, [1.2, 1.3])}                 # the map called none: no conclusion
    assert "put 0 of the 1 decided runs" in cost_story.map_story(points, BC, interval([0.4]), "defaults")
    assert "The others" not in cost_story.map_story(points, BC, interval([0.4]), "defaults")
    assert "lower c_loop" not in text and "lookups" not in text


def test_said_as_a_verb_keeps_the_word_before_its_interval():
    assert cost_story.said_verb(interval([1.2, 1.3])) == "wins (1.25x; 1.20-1.30x over 2 pairs)"
    assert cost_story.said_verb(interval([0.9, 1.1])) == "was within the noise (1.00x; 0.90-1.10x over 2 pairs)"
    assert cost_story.said_verb(interval([1.1])) == "gave no verdict from one pair (1.10x, one pair)"
    assert all(check_said(cost_story.said_verb(interval(v))) == [] for v in ([0.8, 0.9], [0.9, 1.1], [1.1]))


def test_speedup_over_the_first_tokens_reads_the_rounds():
    # plain: 50 ms a token; speculative rounds of 40 ms: two rounds committing 1, then two committing 4
    comp = _comparison([1.0], [(3, 0), (3, 0), (3, 3), (3, 3)])
    assert cost_story.speedup_over_first(comp, 2) == [pytest.approx(0.05 * 2 / 0.08)]
    assert cost_story.speedup_over_first(comp, 10**9) == [pytest.approx(0.05 * 10 / 0.16)]
