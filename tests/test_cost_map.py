"""The engine's round cost and the (alpha, c) map, against the closed forms of measure.cost."""
import math

import pytest

from specnb.figures import cost_map
from specnb.measure import cost

FREE = {k: 1.0 for k in range(1, 18)}                  # a verification batch as cheap as one row
LINEAR = {k: float(k) for k in range(1, 18)}           # k rows cost k one-row calls


@pytest.mark.parametrize("alpha, gamma", [(0.5, 1), (0.8, 3), (0.9, 6), (0.0, 2)])
def test_free_batch_and_no_replay_cost_is_leviathan(alpha, gamma):
    """With a free batch the round costs gamma c + 1 + c: Leviathan's gamma c + 1 plus the replay."""
    c = 0.2
    assert math.isclose(cost_map.round_cost(gamma, c, FREE), gamma * c + 1 + c)
    e = cost.expected_tokens_per_call(alpha, gamma)
    assert math.isclose(cost_map.coverage_speedup(alpha, gamma, c, FREE),
                        e / (gamma * c + 1 + c))
    # a free draft (c = 0) and a free batch: exactly Leviathan's speedup at c = 0
    assert math.isclose(cost_map.coverage_speedup(alpha, gamma, 0.0, FREE), cost.speedup(alpha, gamma, 0.0))


def test_round_cost_uses_both_batch_costs():
    bc = {1: 0.02, 4: 0.03}                            # seconds: normalized by the one-row time
    bd = {1: 0.01, 4: 0.02}
    assert math.isclose(cost_map.round_cost(3, 0.5, bc), 3 * 0.5 + 1.5 + 0.5 * 1.5)
    assert math.isclose(cost_map.round_cost(3, 0.5, bc, bd), 3 * 0.5 + 1.5 + 0.5 * 2.0)
    assert cost_map.round_cost(0, 0.5, bc) == 1.0      # plain decoding


def test_engine_speedup_matches_measure_cost_speedup_engine():
    rates = [0.9, 0.8, 0.6]
    c = 0.3
    b = LINEAR[4]
    mine = cost_map.engine_speedup(1 + sum(rates), 3, c, LINEAR)
    # measure.cost.speedup_engine with the round's batches (target bc(4) + the draft's replay c bc(4)) as
    # its verify cost and the gamma one-row draft steps as its draft evaluations
    ref = cost.speedup_engine(rates, c, b + c * b, 3)
    assert math.isclose(mine, ref)


def test_coverage_blends_drafting_and_plain_rounds():
    alpha, g, c = 0.9, 3, 0.0
    full = cost_map.coverage_speedup(alpha, g, c, LINEAR, 1.0)
    none = cost_map.coverage_speedup(alpha, g, c, LINEAR, 0.0)
    half = cost_map.coverage_speedup(alpha, g, c, LINEAR, 0.5)
    e = cost.expected_tokens_per_call(alpha, g)
    assert math.isclose(full, e / LINEAR[4])
    assert none == 1.0
    assert math.isclose(half, (0.5 * e + 0.5) / (0.5 * LINEAR[4] + 0.5))
    assert min(full, none) <= half <= max(full, none)


def test_best_speedup_is_the_maximum_over_gamma():
    s, g = cost_map.best_speedup(0.7, 0.05, FREE, gammas=range(1, 12))
    ref = max(range(1, 12), key=lambda k: cost.expected_tokens_per_call(0.7, k) / (k * 0.05 + 1 + 0.05))
    assert g == ref
    assert math.isclose(s, cost.expected_tokens_per_call(0.7, g) / (g * 0.05 + 1.05))


def test_roofline_divides_bytes_by_time():
    class M:                                            # decode_bytes reads these
        def weight_bytes(self):
            return 2_000_000_000

        class hparams:
            tied_output = True
    r = cost_map.decode_roofline(M(), 0.1, gb_s=40.0)
    assert math.isclose(r["gb_s"], 20.0)
    assert math.isclose(r["floor_s"], 0.05)
    assert math.isclose(r["fraction"], 0.5)


def test_map_clips_its_colour_scale_at_zero():
    fig = cost_map.fig_cost_map(LINEAR, {"p": dict(alpha=0.8, c=0.2, measured=1.1, predicted=1.0)}, n=8)
    heat = fig.data[0]
    assert heat.zmin == 0.0 and heat.zmid == 1.0
    assert all(v >= 0 for row in heat.z for v in row)
    assert "measured 1.10x" in fig.data[2].text[0]


def test_without_the_replay_the_round_is_the_draft_steps_and_the_batch():
    """replay=False: c is the loop's c_loop, which holds the draft's replay already."""
    assert math.isclose(cost_map.round_cost(3, 0.5, LINEAR, replay=False), 3 * 0.5 + 4.0)
    assert math.isclose(cost_map.round_cost(3, 0.5, LINEAR), 3 * 0.5 + 4.0 + 0.5 * 4.0)
    assert math.isclose(cost_map.engine_speedup(3.0, 3, 0.5, LINEAR, replay=False), 3.0 / (3 * 0.5 + 4.0))
    s, g = cost_map.best_speedup(0.9, 0.2, FREE, replay=False)
    assert math.isclose(s, max(cost.expected_tokens_per_call(0.9, k) / (k * 0.2 + 1) for k in cost_map.GAMMAS))
    # without the replay a dearer draft breaks even sooner than with it
    quarter = {k: 1 + 0.25 * (k - 1) for k in range(1, 18)}        # an extra row at a quarter of a step
    assert cost_map.break_even_alpha(0.3, quarter, replay=False) < cost_map.break_even_alpha(0.3, quarter)


def test_map_points_with_intervals_take_their_verdicts_colour_and_error_bars():
    from specnb.measure.verdict import interval
    pts = {"won": dict(alpha=0.9, c=0.2, measured=interval([1.2, 1.3]), alpha_range=(0.85, 0.95),
                       c_range=(0.18, 0.25), short="w"),
           "lost": dict(alpha=0.5, c=0.5, measured=interval([0.7, 0.8]), symbol="diamond"),
           "unclear": dict(alpha=0.7, c=0.3, measured=interval([0.9, 1.1]))}
    fig = cost_map.fig_cost_map(LINEAR, pts, n=8, replay=False, lines={"record c": 0.4})
    won, lost, unclear = fig.data[2:5]
    assert won.text[0] == "w" and "wins (1.25x; 1.20-1.30x over 2 pairs)" in won.hovertemplate
    assert won.marker.color == cost_map.WIN and lost.marker.color == cost_map.LOSS
    assert unclear.marker.color == cost_map.NOISE_GREY and lost.marker.symbol == "diamond"
    assert won.error_x.array[0] == pytest.approx(0.05) and won.error_y.arrayminus[0] == pytest.approx(0.02)
    assert [s.y0 for s in fig.layout.shapes] == [0.4]
