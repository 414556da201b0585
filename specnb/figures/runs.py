"""Plotly figures of speculative decoding, built from statistics objects.

Every function takes data, never a running loop, and returns a `plotly.graph_objects.Figure`
without showing it (a notebook shows the returned figure; `fig.write_html(...)` saves it).
The data come from:

  - `loop.chain.main_stats()` / `loop.chain.stats()[0]`: llama.cpp's statistics of a run
    (also what a synthetic-acceptance run produces);
  - `specnb.measure.stats.event_stats(events, n_max)`: the same figures recomputed from a run's
    RoundEvents, plus per-round series (tokens committed per target call, timings); a function
    given RoundEvents computes them itself;
  - `specnb.measure.experiments.sweep_draft_max(...)` and `specnb.measure.experiments.sweep_temperature(...)`.

Colours follow the live view: accepted green, rejected red, the target's own token blue.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..measure.cost import accepted_length_probs, conditional_rates
from ..measure.stats import accepted_length_counts, as_stats

ACCEPTED, REJECTED, TARGET, BONUS, GREY = "#2e7d32", "#c62828", "#1565c0", "#6a1b9a", "#9e9e9e"
MS_PER_S = 1e3
PHASES = (("draft", "t_draft", "#f9a825"), ("verify", "t_verify", TARGET),
          ("process", "t_process", "#00838f"), ("sample", "t_sample", BONUS),
          ("rollback", "t_rollback", REJECTED))


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
        and stats else {"": as_stats(stats)}
    fig = go.Figure()
    for name, st in runs.items():
        st = as_stats(st)
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
    st = as_stats(source)
    counts = accepted_length_counts(st)
    x = list(range(len(counts)))
    fig = go.Figure()
    fig.add_bar(x=x, y=counts, name="drafts", marker_color=ACCEPTED,
                text=[str(c) for c in counts], textposition="outside")
    alpha, n = st.get("alpha"), sum(counts)
    if alpha is not None and n and len(counts) > 1:
        g = len(counts) - 1
        pred = [n * p for p in accepted_length_probs(alpha, g)]
        fig.add_scatter(x=x, y=pred, mode="lines+markers", line=dict(dash="dot", color=TARGET),
                        name=f"i.i.d. model, alpha = {alpha:.2f}")
    fig.update_xaxes(dtick=1)
    return _layout(fig, title, "accepted draft tokens", "drafts")


def fig_tokens_per_call(source, title: str = "Tokens committed per target call") -> go.Figure:
    """Per round (one target call): tokens committed, and the running mean."""
    st = as_stats(source)
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
        w = [MS_PER_S * getattr(ev, attr) for ev in events]
        fig.add_bar(y=y, x=w, base=list(base), orientation="h", name=name, marker_color=colour,
                    hovertemplate=f"{name}: %{{x:.2f}} ms<extra></extra>")
        base = [b + d for b, d in zip(base, w)]
    other = [max(MS_PER_S * ev.t_round - b, 0.0) for ev, b in zip(events, base)]
    fig.add_bar(y=y, x=other, base=list(base), orientation="h", name="other", marker_color=GREY,
                hovertemplate="other: %{x:.2f} ms<extra></extra>")
    fig.update_layout(barmode="overlay")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, "ms since the round began", "")


IMPL_COLOURS = {"draft-simple": ACCEPTED, "ngram-simple": "#ef6c00", "ngram-map-k": "#8d6e63",
                "ngram-map-k4v": "#6d4c41", "ngram-mod": "#1565c0", "ngram-cache": "#00838f"}


def fig_rounds_by_impl(events, seq: int = 0, title: str = "Who drafted each round") -> go.Figure:
    """One bar per round of sequence `seq`: the draft tokens the target accepted, coloured by the
    impl that proposed them (the speculator chain's impl_last), the drafted tokens it did not
    accept, and the target's own token every round adds. A round no impl drafted for is one
    target token alone."""
    rounds, acc, rej, own, impl = [], [], [], [], []
    for ev in events:
        for s in ev.slots:
            if s.seq != seq or s.replay:
                continue
            rounds.append(ev.round)
            acc.append(s.n_accepted)
            rej.append(len(s.draft) - s.n_accepted)
            own.append(1)
            impl.append(s.impl or "none")
    fig = go.Figure()
    for name in dict.fromkeys(impl):
        if name == "none":
            continue
        ys = [a if i == name else 0 for a, i in zip(acc, impl)]
        fig.add_bar(x=rounds, y=ys, name=f"accepted ({name})", marker_color=IMPL_COLOURS.get(name, GREY),
                    hovertemplate=f"round %{{x}}: %{{y}} accepted from {name}<extra></extra>")
    fig.add_bar(x=rounds, y=rej, name="drafted, not accepted", marker_color="#ffcdd2",
                marker_line_color=REJECTED, marker_line_width=1,
                hovertemplate="round %{x}: %{y} not accepted<extra></extra>")
    fig.add_bar(x=rounds, y=own, name="the target's own token", marker_color=TARGET,
                hovertemplate="round %{x}: the target's token<extra></extra>")
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "round (target call)", "tokens")


def fig_speedup_vs_draft_max(sweep: dict, title: str | None = None) -> go.Figure:
    """Measured speedup against draft-max beside the cost model's prediction.

    `sweep` is `specnb.measure.experiments.sweep_draft_max(...)`'s result: predicted = Leviathan et al. 2023,
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


def figures(stats_or_events, n_max: int | None = None) -> dict:
    """The per-run figures at once: {name: Figure} (timeline only when events are given)."""
    st = as_stats(stats_or_events, n_max)
    out = {"acceptance_per_position": fig_acceptance_per_position(st),
           "accepted_length_histogram": fig_accepted_length_histogram(st)}
    if "committed_per_round" in st:
        out["tokens_per_call"] = fig_tokens_per_call(st)
    if not isinstance(stats_or_events, dict):
        out["round_timeline"] = fig_round_timeline(stats_or_events)
    return out
