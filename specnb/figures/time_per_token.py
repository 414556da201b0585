"""Where the time of a committed token goes: plain decoding against speculative decoding.

`fig_time_per_token(runs)` draws one stacked bar per run, in milliseconds per committed token,
split into the parts the runs time:

  - draft:           the draft model proposing (RoundEvent.t_draft; 0 for plain decoding),
  - target call:     the target's decodes (RoundEvent.t_verify; plain decoding: its one-row
                     decodes, `t_target_s`),
  - process:         the draft model's process() of the verification batch, the replay
                     (RoundEvent.t_process; 0 for plain decoding),
  - sampling, other: everything else (a speculative run: t_round minus the three above, i.e. the
                     target's sampler, the rollback and the loop's bookkeeping; plain decoding:
                     t_gen_s minus t_target_s).

A speculative bar's parts add up to the sum of its rounds' t_round over the tokens committed, the
measured time per committed token; a plain bar's to t_gen_s over its tokens.
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..errors import check_param
from .runs import GREY, MS_PER_S, TARGET, _layout

PARTS = (("draft", "#f9a825"), ("target call", TARGET), ("process", "#00838f"),
         ("sampling, other", GREY))


def _parts(run: dict) -> dict:
    """{part: ms per committed token} of one run (see the module's docstring for the keys)."""
    n = run.get("n_tokens", 0)
    check_param(n > 0, "n_tokens", n, "a run with at least one committed token")
    if "events" in run:
        evs = list(run["events"])
        draft = sum(ev.t_draft for ev in evs)
        target = sum(ev.t_verify for ev in evs)
        process = sum(ev.t_process for ev in evs)
        total = sum(ev.t_round for ev in evs)
    else:
        draft = process = 0.0
        target, total = run["t_target_s"], run["t_gen_s"]
    secs = (draft, target, process, max(total - draft - target - process, 0.0))
    return {name: MS_PER_S * s / n for (name, _), s in zip(PARTS, secs)}


def fig_time_per_token(runs: dict, title: str = "Time per committed token") -> go.Figure:
    """One stacked bar per run, ms per committed token, split into draft / target call / process /
    sampling and other.

    runs: {bar name: run}, a run being plain decoding, {"t_gen_s", "t_target_s", "n_tokens"}
    (t_target_s: the part of t_gen_s spent in the target's decodes), or a speculative run,
    {"events": its RoundEvents, "n_tokens": the tokens it committed}. The figure's
    `layout.meta` holds {bar name: {part: ms per committed token}}, the numbers drawn, so a
    caption can quote exactly what the picture shows.
    """
    parts = {name: _parts(run) for name, run in runs.items()}
    names = list(parts)
    fig = go.Figure()
    for part, colour in PARTS:
        fig.add_bar(x=names, y=[parts[n][part] for n in names], name=part, marker_color=colour,
                    hovertemplate=f"{part}: %{{y:.1f}} ms per committed token<extra></extra>")
    for n in names:
        fig.add_annotation(x=n, y=sum(parts[n].values()), text=f"{sum(parts[n].values()):.1f} ms",
                           showarrow=False, yshift=10)
    fig.update_layout(barmode="stack", meta=parts)
    return _layout(fig, title, "", "ms per committed token")
