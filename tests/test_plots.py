"""The figures' data against the statistics they draw."""
import pytest

pytest.importorskip("plotly")

from specnb.measure import cost  # noqa: E402
from specnb.figures import runs as plots
from specnb.measure import stats


def test_figures_match_the_statistics(run_pair):
    loop, events = run_pair(n_max=4)
    st = loop.chain.main_stats()
    ev = stats.event_stats(events, 4)

    f = plots.fig_acceptance_per_position(st)
    assert list(f.data[0].y) == st["acc_rate_per_pos"] and list(f.data[0].x) == [1, 2, 3, 4]
    assert list(f.data[1].y) == pytest.approx(cost.conditional_rates(st["acc_rate_per_pos"]))
    f2 = plots.fig_acceptance_per_position({"run a": st, "run b": ev})
    assert len(f2.data) == 4 and list(f2.data[2].y) == ev["acc_rate_per_pos"]

    f = plots.fig_accepted_length_histogram(ev)
    assert list(f.data[0].y) == stats.accepted_length_counts(st)
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


def test_rounds_by_impl_counts_each_impls_accepted_tokens(run_pair):
    # the chain: ngram-simple first, the draft model when the lookup finds nothing
    loop, events = run_pair(n_predict=48, types="ngram-simple,draft-simple", ngram_size_n=2,
                            ngram_size_m=4, n_max=3)
    f = plots.fig_rounds_by_impl(events)
    rounds = [e for e in events if not e.slots[0].replay]
    by_name = {t.name: list(t.y) for t in f.data}
    for name in ("ngram-simple", "draft-simple"):
        want = [e.slots[0].n_accepted if e.slots[0].impl == name else 0 for e in rounds]
        if any(e.slots[0].impl == name for e in rounds):
            assert by_name[f"accepted ({name})"] == want
    assert by_name["the target's own token"] == [1] * len(rounds)
    total = [sum(v[i] for k, v in by_name.items() if k.startswith("accepted") or k == "the target's own token")
             for i in range(len(rounds))]
    assert total == [len(e.slots[0].ids) for e in rounds]
    assert {e.slots[0].impl for e in rounds} >= {"draft-simple"}
