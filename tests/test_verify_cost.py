"""The verification batch's two numbers (specnb.measure.verify_cost) and the bytes rule's
break-even α (specnb.figures.cost_map), against their formulas."""
import statistics

import pytest

from specnb import Context, load_model
from specnb.figures import cost_map
from specnb.figures.cost_map import best_speedup, break_even_alpha, c_from_bytes
from specnb.measure import bench, cost, verify_cost
from specnb.measure.verify_cost import (EXTRA_ROW_CHEAP, EXTRA_ROW_FREE, VerifyCost, flat_but_slow,
                                        measure_verify_cost, row_price, verify_verdict)


def _vc(seconds, gmacs_s=None, gb_s=10.0, per_rep=None, activations="q8", spread=0.0):
    bc = {k: t / seconds[1] for k, t in seconds.items()}
    x = statistics.median((bc[k] - 1) / (k - 1) for k in bc if k > 1)
    return VerifyCost(label="m", activations=activations, sizes=tuple(seconds), seconds=seconds, bc=bc,
                      bc_range=per_rep or {k: (v, v) for k, v in bc.items()}, extra_row_range=(x - spread, x + spread),
                      weight_bytes=int(0.5e9), gb_s=gb_s, macs_per_row=int(1e9), gmacs_s=gmacs_s)


def test_the_two_numbers_follow_their_formulas():
    v = _vc({1: 0.100, 2: 0.120, 3: 0.150, 5: 0.200}, gmacs_s=100.0)
    assert v.bandwidth_share == pytest.approx(0.5e9 / 0.100 / 10e9)                  # 50%
    # (bc(k) - 1) / (k - 1): 0.20, 0.25, 0.25 -> the median
    assert v.extra_row == pytest.approx(0.25)
    assert v.ideal_extra_row == pytest.approx(1e9 / 100e9 / 0.100)                    # 0.1 of a step
    assert v.x_limit == pytest.approx(2.5)
    assert _vc({1: 0.1, 3: 0.2}, gb_s=None).bandwidth_share is None
    assert _vc({1: 0.1, 3: 0.2}, activations="f32").x_limit is None


def test_one_criterion_names_the_price():
    assert row_price(_vc({1: 1.0, 2: 1.0 + EXTRA_ROW_FREE - 0.01})) == "nearly free"
    assert row_price(_vc({1: 1.0, 2: 1.0 + EXTRA_ROW_CHEAP - 0.01})) == "cheap"
    assert row_price(_vc({1: 1.0, 2: 1.0 + EXTRA_ROW_CHEAP + 0.01})) == "not cheap"
    text = verify_verdict(_vc({1: 0.100, 2: 0.160, 3: 0.220, 5: 0.340}, gmacs_s=100.0))
    assert "**not cheap**" in text and "50% of the streaming bandwidth" in text and "spent mostly reading" in text
    assert "0.60 of a one-row step" in text and "6.0x" in text
    assert "about 3.40 one-row steps (bc(5) measured 3.40)" in text
    slow = verify_verdict(_vc({1: 0.400, 2: 0.410}, gb_s=10.0))
    assert "12%" in slow and "steps." in slow and "not what sets its time" in slow and "**nearly free**" in slow


def test_a_spread_across_a_threshold_gets_no_word_of_its_own():
    v = _vc({1: 1.0, 2: 1.25}, spread=0.05)                 # 0.20-0.30 straddles "cheap" at 0.25
    assert row_price(v) == "between cheap and not cheap"
    assert "**between cheap and not cheap**" in verify_verdict(v)
    q8, f32 = _vc({1: 0.05, 2: 0.0625}, spread=0.05), _vc({1: 0.2, 2: 0.24}, activations="f32", spread=0.05)
    assert "as flat as the q8 one within their spreads" in flat_but_slow(q8, f32)   # 0.15-0.25 against 0.20-0.30


def test_a_curve_from_the_costs_record(tiny_path, monkeypatch, tmp_path):
    from specnb.measure import costs
    from specnb.run.pair import open_pair
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "RECORD", None)
    monkeypatch.setattr(costs, "BANDWIDTH_GIB", 0.02)
    monkeypatch.setattr(costs, "BUSY", 1.0)
    p = open_pair(tiny_path("Q4_1"), tiny_path("Q4_0"), n_ctx=96)
    rec = costs.machine_costs(p, reps=2)
    v = verify_cost.verify_cost_from(rec)
    assert v.bc == rec.bc_table() and v.bc_range[9] == (rec.bc_target[9].low, rec.bc_target[9].high)
    assert v.extra_row_range == (rec.extra_row_target.low, rec.extra_row_target.high)
    assert v.extra_row == rec.extra_row_target.estimate              # the number the record prints
    assert v.extra_row_interval.low <= v.extra_row <= v.extra_row_interval.high
    assert v.gb_s == rec.bandwidth_gb_s.estimate and v.weight_bytes == bench.decode_bytes(p.target)
    assert v.seconds[1] == pytest.approx(rec.target_step_ms.estimate / 1e3)
    d = verify_cost.verify_cost_from(rec, "draft")
    assert d.bc == rec.bc_table("draft") and d.weight_bytes == bench.decode_bytes(p.draft)


def test_flat_but_slow_counts_the_rows_in_time():
    q8 = _vc({1: 0.050, 2: 0.080, 3: 0.110})            # 0.60 of a 50 ms step: 30 ms
    f32 = _vc({1: 0.200, 2: 0.240, 3: 0.280}, activations="f32")   # 0.20 of a 200 ms step: 40 ms
    text = flat_but_slow(q8, f32)
    assert "the flatter one" in text and "40.0 ms in f32 and 30.0 ms in q8" in text


def test_measured_curves_reduce_each_repetition(tiny_path, monkeypatch):
    # the spread comes from each repetition's own ratios (sample i of every size is one pass)
    samples = {1: [0.10, 0.20, 0.10], 2: [0.15, 0.24, 0.12], 3: [0.20, 0.40, 0.13]}
    monkeypatch.setattr(verify_cost, "batch_cost_samples", lambda ctx, prefix, sizes, reps: samples)
    m = load_model(tiny_path("Q4_1"))
    v = measure_verify_cost(Context(m, n_ctx=64), [1, 2, 3], (1, 2, 3), reps=3, gb_s=5.0, int8_limit=50.0)
    per_rep = [{k: samples[k][i] / samples[1][i] for k in samples} for i in range(3)]
    assert v.bc == {k: statistics.median(r[k] for r in per_rep) for k in samples}
    assert v.bc_range[3] == (min(r[3] for r in per_rep), max(r[3] for r in per_rep))
    per_rep_row = [statistics.median([(r[2] - 1) / 1, (r[3] - 1) / 2]) for r in per_rep]
    assert v.extra_row_range == (min(per_rep_row), max(per_rep_row))
    assert v.seconds[1] == 0.10 and v.gmacs_s == 50.0
    assert v.weight_bytes == bench.decode_bytes(m) and v.macs_per_row == bench.macs_per_row(m)
    f32 = measure_verify_cost(Context(m, n_ctx=64, activations="f32"), [1, 2, 3], (1, 2, 3), reps=3, int8_limit=50.0)
    assert f32.gmacs_s is None                        # the int8 limit is the q8 kernels' only


def test_a_real_measurement_on_a_tiny_model(tiny_path):
    m = load_model(tiny_path("Q4_0"))
    v = measure_verify_cost(Context(m, n_ctx=64), [1, 2, 3, 4], (1, 2, 4), reps=2, int8_limit=None)
    assert v.bc[1] == 1.0 and set(v.bc) == {1, 2, 4}
    for k in v.sizes:
        lo, hi = v.bc_range[k]
        assert lo <= v.bc[k] <= hi
    with pytest.raises(Exception, match="reps"):
        measure_verify_cost(Context(m, n_ctx=64), [1, 2], (1, 2), reps=0)


def test_break_even_alpha_is_where_the_best_length_meets_plain_decoding():
    bc = {k: 1.0 + 0.3 * (k - 1) for k in range(1, 10)}
    for c in (0.0, 0.1, 0.25):
        a = break_even_alpha(c, bc)
        assert a is not None
        assert best_speedup(a, c, bc)[0] >= 1.0 > best_speedup(a - 1e-3, c, bc)[0]
    assert break_even_alpha(0.6, bc) is None                       # not even α = 1 pays
    # free verification and a free draft: Leviathan's speed-up is >= 1 at every α
    assert break_even_alpha(0.0, {k: 1.0 for k in range(1, 10)}) == pytest.approx(0.0, abs=1e-9)
    # with free verification the engine model is Leviathan's formula (reeval charges c once more)
    free = {k: 1.0 for k in range(1, 10)}
    a = break_even_alpha(0.2, free, gammas=(1,))
    assert cost.expected_tokens_per_call(a, 1) / (0.2 + 1 + 0.2) == pytest.approx(1.0, abs=1e-6)
    assert cost_map.round_cost(1, 0.2, free) == pytest.approx(1.4)


def test_c_from_bytes_is_the_ratio_of_the_bytes_a_step_reads(tiny_path):
    a, b = load_model(tiny_path("Q4_0")), load_model(tiny_path("Q8_0"))
    assert c_from_bytes(a, b) == pytest.approx(bench.decode_bytes(a) / bench.decode_bytes(b))
    assert c_from_bytes(a, b) < 1.0 < c_from_bytes(b, a)


def test_bench_and_the_course_share_the_criterion():
    from specnb.measure import bench_report
    assert bench_report.EXTRA_ROW_GOALS["avx2"] == verify_cost.EXTRA_ROW_CHEAP
