"""The experiments: sweeps against the cost model's formulas, measuring c, and their figures."""
import math

import pytest

pytest.importorskip("plotly")

from specnb import ParamError  # noqa: E402
from specnb.measure import cost
from specnb.measure import experiments
from specnb.figures import runs as plots


def test_sweep_draft_max_and_figure(pair):
    tgt, dft = pair
    sw = experiments.sweep_draft_max(tgt, dft, "Once upon a time", (0, 1, 3), n_predict=16, c=0.25)
    assert sw["draft_max"] == [0, 1, 3] and sw["c"] == 0.25
    for g, a, rates, pred, pred_r, meas in zip(sw["draft_max"], sw["alpha"], sw["acc_rate_per_pos"],
                                               sw["predicted_speedup"], sw["predicted_speedup_rates"],
                                               sw["measured_speedup"]):
        assert pred == cost.speedup(a, g, 0.25)
        assert pred_r == (cost.speedup_from_rates(rates, 0.25) if g else 1.0)
        assert meas > 0 and math.isfinite(meas)
    assert sw["alpha"][0] == 0.0 and sw["predicted_speedup"][0] == 1.0
    f = plots.fig_speedup_vs_draft_max(sw)
    assert list(f.data[0].y) == sw["measured_speedup"] and list(f.data[1].y) == sw["predicted_speedup"]
    assert list(f.data[0].x) == [0, 1, 3]
    assert "0.250" in f.data[1].name


def test_sweep_synthetic_acceptance(pair):
    tgt, dft = pair
    with pytest.warns(UserWarning, match="not valid text"):
        sw = experiments.sweep_draft_max(tgt, dft, "Once upon a time", (2, 4), n_predict=24, c=0.1,
                                  synth_rates=[0.9, 0.7, 0.5, 0.3])
    assert sw["synthetic"] and "synthetic" in plots.fig_speedup_vs_draft_max(sw).layout.title.text
    st = sw["stats"][-1]
    f = plots.fig_acceptance_per_position(st)
    assert list(f.data[0].y) == st["acc_rate_per_pos"]


def test_sweep_temperature(pair):
    tgt, dft = pair
    sw = experiments.sweep_temperature(tgt, dft, "Once upon a time", temps=(0.0, 1.0), n_predict=12,
                                draft_max=3, seeds=(1, 2))
    assert sw["temp"] == [0.0, 1.0]
    for mode in ("exact", "rejection"):
        assert len(sw[mode]) == 2 and all(0.0 <= r <= 1.0 for r in sw[mode])
        for r, n_a, n_d in zip(sw[mode], sw["accepted"][mode], sw["drafted"][mode]):
            assert r == (n_a / n_d if n_d else 0.0)


def test_measuring_c(pair, run_pair):
    tgt, dft = pair
    m = experiments.measure_cost_ratio(tgt, dft, n_tokens=8)
    assert m["c"] > 0 and m["t_target_token_s"] > 0
    assert m["c"] == pytest.approx(m["t_draft_token_s"] / m["t_target_token_s"])
    loop, _ = run_pair(n_max=3, n_predict=12)
    c = experiments.cost_ratio_from_contexts(loop.ctx_tgt, loop.ctx_dft)
    t, d = experiments.DecodeCounters.of(loop.ctx_tgt), experiments.DecodeCounters.of(loop.ctx_dft)
    assert c == pytest.approx((d.t_decode / d.n_decode) / (t.t_decode / t.n_decode))
    assert experiments.cost_ratio_from_contexts(loop.ctx_tgt, loop.ctx_dft, per="row") == \
        pytest.approx((d.t_decode / d.n_eval) / (t.t_decode / t.n_eval))
    with pytest.raises(ParamError):     # nothing ran since the snapshots
        experiments.cost_ratio_from_contexts(loop.ctx_tgt, loop.ctx_dft, since_tgt=t, since_dft=d)
