"""The cost model against its closed forms, and the figures' data against the statistics."""
import math
import warnings

import pytest

pytest.importorskip("plotly")

from specnb import ParamError, forge  # noqa: E402
from specnb import cost, plots  # noqa: E402
from specnb.context import Context  # noqa: E402
from specnb.loop import SpecParams, SpeculativeLoop  # noqa: E402
from specnb.model import load_model  # noqa: E402
from specnb.sampling import SamplerParams  # noqa: E402
from specnb.speculative import impl_stats  # noqa: E402


# ---- the cost model ---------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("gamma", [0, 1, 3, 7])
def test_expected_tokens_closed_form(alpha, gamma):
    got = cost.expected_tokens_per_call(alpha, gamma)
    assert got == pytest.approx(sum(alpha ** i for i in range(gamma + 1)), rel=1e-12)
    assert got == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha), rel=1e-12)
    # the same from per-position rates alpha^(i+1)
    assert cost.expected_tokens_from_rates([alpha ** (i + 1) for i in range(gamma)]) == pytest.approx(got)
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
    lambda: cost.expected_tokens_from_rates([0.5, 2.0]), lambda: cost.speedup_from_rates(["x"], 0.1),
    lambda: cost.speedup_engine([0.5], 0.1, -1.0, 2), lambda: cost.speedup_engine([0.5], 0.1, 1.0, float("nan")),
    lambda: cost.alpha_from_counts(5, 4)])
def test_cost_bad_input(call):
    with pytest.raises(ParamError):
        call()


# ---- runs on a tiny pair -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("plots")
    tgt = forge.tiny_model(d / "t.gguf", qtype="Q8_0", n_layer=2, seed=0, tied=False)
    dft = forge.requantize(tgt, d / "d.gguf", "Q4_0")
    return load_model(tgt), load_model(dft)


def _run(pair, n_predict=32, **spec):
    tgt, dft = pair
    sp = spec.pop("sampler", SamplerParams(temp=0.0, seed=1))
    loop = SpeculativeLoop(Context(tgt, n_ctx=128, partial_seq_rm=spec.pop("seq_rm", True)),
                           Context(dft, n_ctx=128), tgt.vocab.tokenize("Once upon a time"),
                           n_predict, sp, SpecParams(**spec))
    events = list(loop.rounds())
    return loop, events


SHARED = ("n_gen_drafts", "n_gen_tokens", "n_acc_tokens", "n_acc_drafts", "n_call_accept",
          "acc_rate_per_pos", "mean_acc_len")


@pytest.mark.parametrize("mode", ["exact", "rejection", "checkpoints", "synthetic"])
def test_event_stats_equal_impl_stats(pair, mode):
    kw = dict(n_max=4)
    if mode == "rejection":
        kw.update(verify="rejection", sampler=SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=2))
    if mode == "checkpoints":
        kw.update(seq_rm=False)
    if mode == "synthetic":
        kw.update(synth_rates=[0.8, 0.6, 0.4, 0.2], synth_seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loop, events = _run(pair, **kw)
    st, ev = impl_stats(loop.impl), plots.event_stats(events, 4)
    for k in SHARED:
        assert ev[k] == st[k], k
    assert ev["n_rounds"] == loop.n_rounds
    assert ev["n_committed"] == sum(len(r.tokens) for r in loop.results())
    assert sum(ev["committed_per_round"]) == ev["n_committed"]
    assert ev["accepted_lengths"] == [r.n_accepted for e in events for r in e.slots if not r.replay and r.draft]
    # the histogram from llama.cpp's statistics alone equals the one from the events
    counts = plots.accepted_length_counts(st)
    assert counts == plots.accepted_length_counts(events)
    assert counts == [ev["accepted_lengths"].count(k) for k in range(5)]


def test_figures_match_the_statistics(pair):
    loop, events = _run(pair, n_max=4)
    st = impl_stats(loop.impl)
    ev = plots.event_stats(events, 4)

    f = plots.fig_acceptance_per_position(st)
    assert list(f.data[0].y) == st["acc_rate_per_pos"] and list(f.data[0].x) == [1, 2, 3, 4]
    assert list(f.data[1].y) == pytest.approx(cost.conditional_rates(st["acc_rate_per_pos"]))
    f2 = plots.fig_acceptance_per_position({"run a": st, "run b": ev})
    assert len(f2.data) == 4 and list(f2.data[2].y) == ev["acc_rate_per_pos"]

    f = plots.fig_accepted_length_histogram(ev)
    assert list(f.data[0].y) == plots.accepted_length_counts(st)
    assert sum(f.data[0].y) == st["n_gen_drafts"]
    pred = list(f.data[1].y)                    # the i.i.d. model's counts add up to the drafts
    assert sum(pred) == pytest.approx(st["n_gen_drafts"])
    assert plots.fig_accepted_length_histogram(st).data[0].y == f.data[0].y

    f = plots.fig_tokens_per_call(events)
    assert list(f.data[0].y) == [sum(len(r.committed) for r in e.slots) for e in events]
    assert f.data[1].y[-1] == pytest.approx(ev["tokens_per_call"])

    f = plots.fig_round_timeline(events, last=5)
    assert list(f.data[0].y) == [f"round {e.round}" for e in events[-5:]]
    for trace, (name, attr, _) in zip(f.data, plots.PHASES):
        assert trace.name == name
        assert list(trace.x) == pytest.approx([1e3 * getattr(e, attr) for e in events[-5:]])
    ends = [b + w for b, w in zip(f.data[-1].base, f.data[-1].x)]
    assert ends == pytest.approx([1e3 * e.t_round for e in events[-5:]])

    figs = plots.figures(events, 4)
    assert set(figs) == {"acceptance_per_position", "accepted_length_histogram", "tokens_per_call",
                         "round_timeline"}
    assert set(plots.figures(st)) == {"acceptance_per_position", "accepted_length_histogram"}
    for fig in figs.values():
        fig.to_json()          # serializable: no numpy leftovers plotly cannot write


def test_sweep_draft_max_and_figure(pair):
    tgt, dft = pair
    sw = cost.sweep_draft_max(tgt, dft, "Once upon a time", (0, 1, 3), n_predict=16, c=0.25)
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
        sw = cost.sweep_draft_max(tgt, dft, "Once upon a time", (2, 4), n_predict=24, c=0.1,
                                  synth_rates=[0.9, 0.7, 0.5, 0.3])
    assert sw["synthetic"] and "synthetic" in plots.fig_speedup_vs_draft_max(sw).layout.title.text
    st = sw["stats"][-1]
    f = plots.fig_acceptance_per_position(st)
    assert list(f.data[0].y) == st["acc_rate_per_pos"]


def test_sweep_temperature_and_figure(pair):
    tgt, dft = pair
    sw = cost.sweep_temperature(tgt, dft, "Once upon a time", temps=(0.0, 1.0), n_predict=12,
                                draft_max=3, seeds=(1, 2))
    assert sw["temp"] == [0.0, 1.0]
    for mode in ("exact", "rejection"):
        assert len(sw[mode]) == 2 and all(0.0 <= r <= 1.0 for r in sw[mode])
        for r, n_a, n_d in zip(sw[mode], sw["accepted"][mode], sw["drafted"][mode]):
            assert r == (n_a / n_d if n_d else 0.0)
    f = plots.fig_acceptance_vs_temperature(sw)
    assert [t.name.split()[0] for t in f.data] == ["exact", "rejection"]
    assert list(f.data[0].y) == sw["exact"] and list(f.data[1].y) == sw["rejection"]
    assert list(f.data[0].x) == [0.0, 1.0]


def test_measuring_c(pair):
    tgt, dft = pair
    m = cost.measure_cost_ratio(tgt, dft, n_tokens=8)
    assert m["c"] > 0 and m["t_target_token_s"] > 0
    assert m["c"] == pytest.approx(m["t_draft_token_s"] / m["t_target_token_s"])
    loop, _ = _run(pair, n_max=3, n_predict=12)
    c = cost.cost_ratio_from_contexts(loop.ctx_tgt, loop.ctx_dft)
    t, d = cost.DecodeCounters.of(loop.ctx_tgt), cost.DecodeCounters.of(loop.ctx_dft)
    assert c == pytest.approx((d.t_decode / d.n_decode) / (t.t_decode / t.n_decode))
    assert cost.cost_ratio_from_contexts(loop.ctx_tgt, loop.ctx_dft, per="row") == \
        pytest.approx((d.t_decode / d.n_eval) / (t.t_decode / t.n_eval))
    with pytest.raises(ParamError):     # nothing ran since the snapshots
        cost.cost_ratio_from_contexts(loop.ctx_tgt, loop.ctx_dft, since_tgt=t, since_dft=d)
