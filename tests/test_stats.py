"""Statistics from RoundEvents against llama.cpp's own statistics of the same run."""
import warnings

import pytest

from specnb.measure import cost
from specnb.measure import stats
from specnb.run.sampling import SamplerParams


SHARED = ("n_gen_drafts", "n_gen_tokens", "n_acc_tokens", "n_acc_drafts", "n_call_accept",
          "acc_rate_per_pos", "mean_acc_len")


@pytest.mark.parametrize("mode", ["exact", "rejection", "checkpoints", "synthetic"])
def test_event_stats_equal_impl_stats(run_pair, mode):
    kw = dict(n_max=4)
    if mode == "rejection":
        kw.update(verify="rejection", sampler=SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=2))
    if mode == "checkpoints":
        kw.update(seq_rm=False)
    if mode == "synthetic":
        kw.update(synth_rates=[0.8, 0.6, 0.4, 0.2], synth_seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loop, events = run_pair(**kw)
    st, ev = loop.chain.main_stats(), stats.event_stats(events, 4)
    for k in SHARED:
        assert ev[k] == st[k], k
    assert ev["n_rounds"] == loop.n_rounds
    assert ev["n_committed"] == sum(len(r.tokens) for r in loop.results())
    assert sum(ev["committed_per_round"]) == ev["n_committed"]
    assert ev["accepted_lengths"] == [r.n_accepted for e in events for r in e.slots if not r.replay and r.draft]
    # the histogram from llama.cpp's statistics alone equals the one from the events
    counts = stats.accepted_length_counts(st)
    assert counts == stats.accepted_length_counts(events)
    assert counts == [ev["accepted_lengths"].count(k) for k in range(5)]


@pytest.mark.parametrize("mode", ["exact", "checkpoints"])
def test_run_stats_and_alpha(run_pair, mode):
    """run_stats: the impl's statistics plus the run's figures; alpha counts the draft tokens
    the target examined, which are the target's samples over the draft (at most the draft)."""
    loop, events = run_pair(n_max=4, seq_rm=mode != "checkpoints")
    st = stats.run_stats(loop, events)
    for k, v in loop.chain.main_stats().items():
        if not k.startswith("t_"):
            assert st[k] == v, k
    new = [r for ev in events for r in ev.slots if not r.replay and r.draft]
    acc = sum(r.n_accepted for r in new)
    exa = sum(min(len(r.ids), len(r.draft)) for r in new)
    assert stats.examined_counts(events) == (acc, exa) and acc < exa
    assert st["alpha"] == stats.alpha_from_events(events) == cost.alpha_from_counts(acc, exa)
    assert st["n_examined"] == exa and st["n_rounds"] == len(events) == loop.n_rounds
    assert st["n_committed"] == sum(len(r.tokens) for r in loop.results())
    assert st["tokens_per_call"] == pytest.approx(st["n_committed"] / len(events))
    assert st["t_per_token_s"] == pytest.approx(sum(ev.t_round for ev in events) / st["n_committed"])
