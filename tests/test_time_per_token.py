"""fig_time_per_token: the stacked parts add up to the measured time per committed token."""
from __future__ import annotations

import math

import pytest

from specnb.course import fig_time_per_token
from specnb.speculation.events import RoundEvent


def _ev(i, draft, verify, process, sample, rollback, extra):
    ev = RoundEvent(i, [], t_draft=draft, t_verify=verify, t_process=process, t_sample=sample,
                    t_rollback=rollback)
    ev.t_round = draft + verify + process + sample + rollback + extra
    return ev


EVENTS = [_ev(0, 0.010, 0.030, 0.004, 0.001, 0.0005, 0.0002),
          _ev(1, 0.012, 0.028, 0.006, 0.002, 0.0, 0.0001),
          _ev(2, 0.009, 0.031, 0.000, 0.001, 0.0010, 0.0003)]


def test_stacked_parts_sum_to_the_measured_time_per_token():
    n_spec, n_plain = 7, 5
    fig = fig_time_per_token({"plain": {"t_gen_s": 0.25, "t_target_s": 0.2, "n_tokens": n_plain},
                              "speculative": {"events": EVENTS, "n_tokens": n_spec}})
    bars = [t for t in fig.data if t.type == "bar"]
    assert [b.name for b in bars] == ["draft", "target call", "process", "sampling, other"]
    stacked = [sum(b.y[j] for b in bars) for j in range(2)]
    assert math.isclose(stacked[0], 1e3 * 0.25 / n_plain, rel_tol=1e-12)
    assert math.isclose(stacked[1], 1e3 * sum(ev.t_round for ev in EVENTS) / n_spec, rel_tol=1e-12)
    # each part is its own timer, not a share of the total
    spec = {b.name: b.y[1] for b in bars}
    assert math.isclose(spec["draft"], 1e3 * 0.031 / n_spec)
    assert math.isclose(spec["target call"], 1e3 * 0.089 / n_spec)
    assert math.isclose(spec["process"], 1e3 * 0.010 / n_spec)
    plain = {b.name: b.y[0] for b in bars}
    assert plain["draft"] == plain["process"] == 0.0
    assert math.isclose(plain["target call"], 1e3 * 0.2 / n_plain)
    # the caption's numbers are the bars' numbers
    assert fig.layout.meta["speculative"] == spec and fig.layout.meta["plain"] == plain
    assert list(fig.data[-1].x) == ["plain", "speculative"]


def test_a_run_with_no_tokens_is_refused():
    with pytest.raises(ValueError):
        fig_time_per_token({"empty": {"events": [], "n_tokens": 0}})
