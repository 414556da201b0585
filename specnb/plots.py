"""Plotly figures of speculative decoding, built from statistics objects.

Every function takes data, never a running loop, and returns a `plotly.graph_objects.Figure`
without showing it (a notebook shows the returned figure; `fig.write_html(...)` saves it).
The data come from:

  - `impl_stats(loop.impl)` / `loop.spec.stats()[0]`: llama.cpp's statistics of a run
    (also what a synthetic-acceptance run produces);
  - `event_stats(events, n_max)`: the same figures recomputed from a run's RoundEvents, plus
    per-round series (tokens committed per target call, timings);
  - `specnb.cost.sweep_draft_max(...)` and `specnb.cost.sweep_temperature(...)`.

Colours follow the live view: accepted green, rejected red, the target's own token blue.
"""
from __future__ import annotations

import plotly.graph_objects as go

from .cost import alpha_from_counts, conditional_rates, examined_counts

ACCEPTED, REJECTED, TARGET, BONUS, GREY = "#2e7d32", "#c62828", "#1565c0", "#6a1b9a", "#9e9e9e"
PHASES = (("draft", "t_draft", "#f9a825"), ("verify", "t_verify", TARGET),
          ("process", "t_process", "#00838f"), ("sample", "t_sample", BONUS),
          ("rollback", "t_rollback", REJECTED))


# ---- statistics from events -----------------------------------------------------------------
def event_stats(events, n_max: int | None = None) -> dict:
    """The chain's statistics recomputed from RoundEvents, plus per-round series.

    The shared keys equal `impl_stats(loop.impl)` for a single-impl run. llama.cpp's, counted
    per accept() call as common_speculative_accept does: every committed round credits the last
    drafter of its sequence (impl_last is kept between rounds), with n_accepted tokens (on a
    replay, the a + 1 re-verified ones); a restored round credits nothing. n_call_accept,
    n_acc_drafts, n_acc_tokens, n_acc_tokens_per_pos (as long as the longest accepted run),
    acc_rate_per_pos and mean_acc_len are those. n_gen_drafts / n_gen_tokens count the
    non-empty drafts. The `specnb_*` keys are per draft: accepted draft tokens, per position
    over n_max positions.
    """
    events = list(events)
    if n_max is None:
        n_max = max((len(r.draft) for ev in events for r in ev.slots if not r.replay), default=0)
    per_pos, spec_per_pos = [], [0] * n_max
    n_drafts = n_tokens = n_acc = spec_acc = n_acc_drafts = n_calls = 0
    lengths, committed_per_round, drafter = [], [], {}
    for ev in events:
        committed_per_round.append(sum(len(r.committed) for r in ev.slots))
        for r in ev.slots:
            if r.draft and not r.replay:
                drafter[r.seq] = r.impl or "?"
                n_drafts += 1
                n_tokens += len(r.draft)
                spec_acc += r.n_accepted
                lengths.append(r.n_accepted)
                for i in range(min(r.n_accepted, n_max)):
                    spec_per_pos[i] += 1
            if r.checkpoint == "restored" or r.seq not in drafter:
                continue
            n_calls += 1                                   # common_speculative_accept
            n_acc += r.n_accepted
            n_acc_drafts += r.n_accepted > 0
            per_pos += [0] * (r.n_accepted - len(per_pos))
            for i in range(r.n_accepted):
                per_pos[i] += 1
    n_rounds = len(events)
    n_committed = sum(committed_per_round)
    acc, exa = examined_counts(events)
    t_round = [ev.t_round for ev in events]
    return {
        "n_rounds": n_rounds, "n_max": n_max,
        "n_gen_drafts": n_drafts, "n_gen_tokens": n_tokens, "n_acc_tokens": n_acc,
        "n_acc_drafts": n_acc_drafts, "n_call_accept": n_calls,
        "n_acc_tokens_per_pos": per_pos,
        "acc_rate_per_pos": [n / n_calls for n in per_pos] if n_calls else [],
        "mean_acc_len": 1.0 + n_acc / n_calls if n_calls else 0.0,
        "specnb_n_acc_tokens": spec_acc, "specnb_n_acc_tokens_per_pos": spec_per_pos,
        "specnb_acc_rate_per_pos": [n / n_drafts if n_drafts else 0.0 for n in spec_per_pos],
        "specnb_mean_acc_len": 1.0 + spec_acc / n_drafts if n_drafts else 0.0,
        "accept_rate": spec_acc / n_tokens if n_tokens else 0.0,
        "alpha": alpha_from_counts(acc, exa), "n_examined": exa,
        "accepted_lengths": lengths,
        "committed_per_round": committed_per_round, "n_committed": n_committed,
        "tokens_per_call": n_committed / n_rounds if n_rounds else 0.0,
        "t_round": t_round,
        "t_round_mean": sum(t_round) / n_rounds if n_rounds else 0.0,
        "n_dft_eval": sum(ev.n_dft_eval for ev in events),
    }


def _as_stats(source, n_max=None) -> dict:
    if isinstance(source, dict):
        return source
    return event_stats(source, n_max)


def accepted_length_counts(source) -> list:
    """Drafts by accepted length 0..n_max, from stats (dict) or RoundEvents.

    From llama.cpp's statistics alone: drafts with exactly k accepted = drafts with at least k
    minus drafts with at least k+1 (at least 0: every draft).
    """
    st = _as_stats(source)
    n = int(st["n_gen_drafts"])
    if "specnb_n_acc_tokens_per_pos" in st:        # per draft (llama.cpp's counts accept calls)
        at_least = [n] + [int(x) for x in st["specnb_n_acc_tokens_per_pos"]]
    elif "n_acc_tokens_per_pos" in st:
        at_least = [n] + [int(x) for x in st["n_acc_tokens_per_pos"]]
    else:
        at_least = [n] + [int(round(r * n)) for r in st["acc_rate_per_pos"]]
    at_least.append(0)
    return [at_least[k] - at_least[k + 1] for k in range(len(at_least) - 1)]


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, template="plotly_white",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
                      margin=dict(l=60, r=20, t=70, b=50))
    return fig


# ---- the figures ----------------------------------------------------------------------------
def fig_acceptance_per_position(stats, title: str = "Acceptance per draft position") -> go.Figure:
    """Bars: unconditional acceptance per position (llama.cpp's #acc rate/pos); line: conditional.

    `stats` is one statistics dict (impl_stats, event_stats) or RoundEvents, or a dict
    {run name: statistics} to compare runs side by side.
    """
    runs = stats if isinstance(stats, dict) and all(isinstance(v, dict) for v in stats.values()) \
        and stats else {"": _as_stats(stats)}
    fig = go.Figure()
    for name, st in runs.items():
        st = _as_stats(st)
        rates = list(st["acc_rate_per_pos"])
        x = list(range(1, len(rates) + 1))
        label = f"{name}: " if name else ""
        fig.add_bar(x=x, y=rates, name=f"{label}P(accepted through position i)",
                    marker_color=ACCEPTED if len(runs) == 1 else None,
                    text=[f"{r:.2f}" for r in rates], textposition="outside")
        fig.add_scatter(x=x, y=conditional_rates(rates), mode="lines+markers",
                        name=f"{label}P(i accepted | 1..i-1 accepted)",
                        line=dict(dash="dot", color=TARGET if len(runs) == 1 else None))
    fig.update_yaxes(range=[0, 1.1])
    fig.update_xaxes(dtick=1)
    return _layout(fig, title, "draft position i", "acceptance")


def fig_accepted_length_histogram(source, title: str = "Accepted draft tokens per round") -> go.Figure:
    """Histogram of accepted lengths, with the i.i.d. model's prediction where alpha is known."""
    st = _as_stats(source)
    counts = accepted_length_counts(st)
    x = list(range(len(counts)))
    fig = go.Figure()
    fig.add_bar(x=x, y=counts, name="drafts", marker_color=ACCEPTED,
                text=[str(c) for c in counts], textposition="outside")
    alpha, n = st.get("alpha"), sum(counts)
    if alpha is not None and n and len(counts) > 1:
        g = len(counts) - 1
        pred = [n * (alpha ** k) * (1 - alpha) for k in range(g)] + [n * alpha ** g]
        fig.add_scatter(x=x, y=pred, mode="lines+markers", line=dict(dash="dot", color=TARGET),
                        name=f"i.i.d. model, alpha = {alpha:.2f}")
    fig.update_xaxes(dtick=1)
    return _layout(fig, title, "accepted draft tokens", "drafts")


def fig_tokens_per_call(source, title: str = "Tokens committed per target call") -> go.Figure:
    """Per round (one target call): tokens committed, and the running mean."""
    st = _as_stats(source)
    per = list(st["committed_per_round"])
    x = list(range(len(per)))
    mean, tot = [], 0
    for i, c in enumerate(per):
        tot += c
        mean.append(tot / (i + 1))
    fig = go.Figure()
    fig.add_bar(x=x, y=per, name="this call", marker_color=ACCEPTED)
    fig.add_scatter(x=x, y=mean, mode="lines", name="running mean", line=dict(color=TARGET))
    fig.add_hline(y=1.0, line=dict(dash="dot", color=GREY), annotation_text="plain decoding")
    return _layout(fig, title, "round (target call)", "tokens")


def fig_round_timeline(events, last: int | None = 12, title: str = "Round timeline") -> go.Figure:
    """One row per round: draft, verify (target decode), process (draft KV sync), sample,
    rollback, in the order the loop runs them, from the RoundEvent timings (ms)."""
    events = list(events)
    if last:
        events = events[-last:]
    fig = go.Figure()
    y = [f"round {ev.round}" for ev in events]
    base = [0.0] * len(events)
    for name, attr, colour in PHASES:
        w = [1e3 * getattr(ev, attr) for ev in events]
        fig.add_bar(y=y, x=w, base=list(base), orientation="h", name=name, marker_color=colour,
                    hovertemplate=f"{name}: %{{x:.2f}} ms<extra></extra>")
        base = [b + d for b, d in zip(base, w)]
    other = [max(1e3 * ev.t_round - b, 0.0) for ev, b in zip(events, base)]
    fig.add_bar(y=y, x=other, base=list(base), orientation="h", name="other", marker_color=GREY,
                hovertemplate="other: %{x:.2f} ms<extra></extra>")
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, "ms since the round began", "")


def fig_speedup_vs_draft_max(sweep: dict, title: str | None = None) -> go.Figure:
    """Measured speedup against draft-max beside the cost model's prediction.

    `sweep` is `specnb.cost.sweep_draft_max(...)`'s result: predicted = Leviathan et al. 2023,
    (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)) with that run's alpha and the measured c;
    the dashed line uses the measured per-position rates instead of one alpha.
    """
    x = list(sweep["draft_max"])
    fig = go.Figure()
    fig.add_scatter(x=x, y=sweep["measured_speedup"], mode="lines+markers", name="measured",
                    line=dict(color=ACCEPTED, width=3))
    fig.add_scatter(x=x, y=sweep["predicted_speedup"], mode="lines+markers",
                    name=f"predicted (alpha per run, c = {sweep['c']:.3f})", line=dict(color=TARGET),
                    customdata=sweep["alpha"],
                    hovertemplate="gamma %{x}: %{y:.2f}x (alpha %{customdata:.2f})<extra></extra>")
    if "predicted_speedup_rates" in sweep:
        fig.add_scatter(x=x, y=sweep["predicted_speedup_rates"], mode="lines",
                        name="predicted from per-position rates", line=dict(color=TARGET, dash="dot"))
    fig.add_hline(y=1.0, line=dict(dash="dot", color=GREY), annotation_text="plain decoding")
    fig.update_xaxes(dtick=1)
    if title is None:
        title = "Speedup against draft-max" + (" (synthetic acceptance)" if sweep.get("synthetic") else "")
    return _layout(fig, title, "draft-max (gamma)", "speedup over plain decoding")


def fig_acceptance_vs_temperature(sweep: dict, title: str = "Acceptance against temperature") -> go.Figure:
    """Acceptance rate (accepted / drafted) per temperature, one line per verification mode;
    `sweep` is `specnb.cost.sweep_temperature(...)`'s result."""
    fig = go.Figure()
    colours = {"exact": TARGET, "rejection": ACCEPTED}
    names = {"exact": "exact match (llama.cpp)", "rejection": "rejection sampling (Leviathan/Chen)"}
    for mode in ("exact", "rejection"):
        if mode not in sweep:
            continue
        fig.add_scatter(x=sweep["temp"], y=sweep[mode], mode="lines+markers",
                        name=names[mode], line=dict(color=colours[mode]))
    fig.update_yaxes(range=[0, 1.05])
    return _layout(fig, title, "temperature", "acceptance (accepted / drafted)")


def figures(stats_or_events, n_max: int | None = None) -> dict:
    """The per-run figures at once: {name: Figure} (timeline only when events are given)."""
    st = _as_stats(stats_or_events, n_max)
    out = {"acceptance_per_position": fig_acceptance_per_position(st),
           "accepted_length_histogram": fig_accepted_length_histogram(st)}
    if "committed_per_round" in st:
        out["tokens_per_call"] = fig_tokens_per_call(st)
    if not isinstance(stats_or_events, dict):
        out["round_timeline"] = fig_round_timeline(stats_or_events)
    return out
