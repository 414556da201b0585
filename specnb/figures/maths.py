"""Plotly figures for the drafting, verification and rollback lessons (notebooks 02-04).

Each function takes plain data (lists, arrays, RoundEvents) and returns a
`plotly.graph_objects.Figure` without showing it, as `specnb.figures.runs` does:

  - `fig_draft_confidence`: the draft's argmax probability (top-10 renormalized) at each drafting
    step against `p_min` lines, with the step where each `p_min` stops the draft;
  - `fig_draft_rows`: the rows of each draft decode, one column per decode and one line per
    sequence (several sequences drafting in one batch);
  - `fig_p_q_overlap`: a target distribution p and a draft distribution q, their overlap
    min(p, q) and the residual max(p - q, 0) stacked into p (why rejection sampling outputs p);
  - `fig_alpha_vs_temperature`: alpha = accepted / examined per temperature and verification
    mode, with a 95% interval from the number of examined draft tokens;
  - `fig_slot_positions`: the positions of every slot's verification rows, round by round
    (several sequences in one target batch).

Colours follow the live view: accepted green, rejected red, the target's own token blue.
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .runs import ACCEPTED, BONUS, GREY, REJECTED, TARGET, _layout

DRAFT = "#f9a825"                 # the draft model's colour (plots.PHASES "draft")
COMMITTED = "#cfd8dc"             # positions committed before the round
UNEXAMINED = "#ef9a9a"            # draft rows after the first rejection: computed, never judged
Z95 = 1.96                        # two-sided 95% normal quantile


def tv_distance(p, q) -> float:
    """Total variation distance: (1/2) sum |p - q| (= 1 - sum min(p, q) for two distributions)."""
    return 0.5 * float(np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())


# ---- 02: drafting ------------------------------------------------------------------------------
def first_stop(ps, p_min: float) -> int | None:
    """The drafting step whose argmax falls under p_min (that token is not drafted), or None."""
    return next((i for i, p in enumerate(ps) if p < p_min), None)


def fig_draft_confidence(ps, p_mins, labels=None,
                         title: str = "The draft's confidence at each step, against p_min") -> go.Figure:
    """Line: the argmax's top-10 probability per drafting step; one dashed line per p_min, and a
    cross where that p_min stops the draft (the first step under it)."""
    ps = [float(p) for p in ps]
    x = list(range(len(ps)))
    fig = go.Figure()
    fig.add_scatter(x=x, y=ps, mode="lines+markers+text", name="argmax p (top-10)",
                    text=[repr(t) for t in labels] if labels else None, textposition="top center",
                    line=dict(color=DRAFT), marker=dict(size=9))
    for k, p_min in enumerate(p_mins):
        colour = (TARGET, BONUS, REJECTED, ACCEPTED, GREY)[k % 5]
        fig.add_hline(y=p_min, line=dict(dash="dash", color=colour))
        stop = first_stop(ps, p_min)
        n = len(ps) if stop is None else stop
        fig.add_scatter(x=[stop] if stop is not None else [], y=[ps[stop]] if stop is not None else [],
                        mode="markers", marker=dict(symbol="x", size=14, color=colour),
                        name=f"p_min {p_min}: drafts {n} token{'s' if n != 1 else ''}")
    fig.update_yaxes(range=[0, 1.08])
    fig.update_xaxes(dtick=1)
    fig = _layout(fig, title, "drafting step", "p of the argmax (top-10)")
    fig.update_layout(height=400)
    return fig


def fig_draft_rows(batches, n_seq: int | None = None,
                   title: str = "Draft decodes: one column per decode, one row per sequence") -> go.Figure:
    """`batches`: per draft decode, a list of (seq, label) rows. A filled cell is one row of that
    decode (labelled, e.g. "' time'@3"); the top axis counts the rows."""
    n_seq = n_seq if n_seq is not None else 1 + max((s for b in batches for s, _ in b), default=0)
    z = [[None] * len(batches) for _ in range(n_seq)]
    text = [[""] * len(batches) for _ in range(n_seq)]
    for j, b in enumerate(batches):
        for s, label in b:
            z[s][j], text[s][j] = 1, str(label)
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", textfont=dict(size=13),
        x=[f"decode {j}<br>{len(b)} row{'s' if len(b) != 1 else ''}" for j, b in enumerate(batches)],
        y=[f"seq {s}" for s in range(n_seq)], colorscale=[[0, DRAFT], [1, DRAFT]],
        showscale=False, xgap=3, ygap=3, hoverinfo="text"))
    fig.update_yaxes(autorange="reversed")
    fig = _layout(fig, title, "", "")
    fig.update_layout(height=120 + 60 * n_seq)
    return fig


# ---- 03: verification --------------------------------------------------------------------------
def fig_p_q_overlap(p, q, labels=None,
                    title: str | None = None) -> go.Figure:
    """Left: p (target) and q (draft) side by side. Right: p split into the overlap min(p, q), the
    mass a drafted token keeps, and the residual max(p - q, 0), the mass a rejection resamples
    from; the two stack to exactly p. The title gives beta = sum min(p, q) = 1 - TV(p, q)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    x = [str(t) for t in labels] if labels is not None else [str(i) for i in range(len(p))]
    overlap, resid = np.minimum(p, q), np.maximum(p - q, 0.0)
    beta = float(overlap.sum())
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "p (target) and q (draft)",
        "p = min(p, q) + max(p - q, 0)"))
    fig.add_bar(x=x, y=p, name="p: target", marker_color=TARGET, row=1, col=1)
    fig.add_bar(x=x, y=q, name="q: draft", marker_color=DRAFT, row=1, col=1)
    fig.add_bar(x=x, y=overlap, name="min(p, q): kept when drafted", marker_color=ACCEPTED,
                row=1, col=2)
    fig.add_bar(x=x, y=resid, name="max(p - q, 0): the residual a rejection samples from",
                marker_color=BONUS, row=1, col=2)
    fig.add_scatter(x=x, y=p, mode="markers", name="p", marker=dict(symbol="line-ew-open", size=30,
                    color=TARGET, line=dict(width=3)), row=1, col=2)
    fig.update_layout(barmode="group")
    fig.data[2].update(offsetgroup="stack")
    fig.data[3].update(offsetgroup="stack", base=overlap.tolist())
    if title is None:
        title = (f"beta = sum min(p, q) = {beta:.3f} = 1 - TV(p, q) = 1 - {tv_distance(p, q):.3f}"
                 f"; residual mass {float(resid.sum()):.3f}")
    fig = _layout(fig, title, "token", "probability")
    fig.update_layout(legend=dict(y=-0.25, yanchor="top"), margin=dict(b=120), height=480)
    return fig


def alpha_interval(accepted: int, examined: int) -> tuple[float, float]:
    """alpha = accepted / examined and the half-width of its 95% normal interval."""
    if examined <= 0:
        return 0.0, 0.0
    a = accepted / examined
    return a, Z95 * math.sqrt(a * (1.0 - a) / examined)


def fig_alpha_vs_temperature(temps, counts: dict,
                             title: str = "alpha = accepted / examined, against temperature") -> go.Figure:
    """`counts`: {mode: [(accepted, examined) per temperature]}; one line per verification mode,
    with 95% error bars."""
    names = {"exact": "exact match (llama.cpp)", "rejection": "rejection sampling (Leviathan, Chen)"}
    colours = {"exact": TARGET, "rejection": ACCEPTED}
    fig = go.Figure()
    for mode, cs in counts.items():
        a, h = zip(*(alpha_interval(*c) for c in cs)) if cs else ((), ())
        fig.add_scatter(x=list(temps), y=list(a), mode="lines+markers", name=names.get(mode, mode),
                        error_y=dict(type="data", array=list(h), visible=True),
                        line=dict(color=colours.get(mode)),
                        text=[f"{c[0]}/{c[1]}" for c in cs], hovertemplate="%{text}")
    fig.update_yaxes(range=[0, 1.05])
    return _layout(fig, title, "temperature", "alpha")


# ---- 04: several slots in one target batch ------------------------------------------------------
SLOT_CELLS = (("committed before the round", COMMITTED), ("id_last (the round's first row)", TARGET),
              ("draft token accepted", ACCEPTED), ("draft token rejected", REJECTED),
              ("after the rejection: never judged", UNEXAMINED))


def slot_cells(r, width: int) -> list:
    """One SlotRound as a list of cell kinds per position 0..width-1 (None: not in the cache),
    indices into SLOT_CELLS."""
    row = [None] * width
    for pos in range(min(r.n_past, width)):
        row[pos] = 0
    for i, pos in enumerate(r.batch_pos):
        if pos >= width:
            continue
        if i == 0:
            row[pos] = 1
        elif i - 1 < r.n_accepted:
            row[pos] = 2
        elif i - 1 == r.n_accepted:
            row[pos] = 3
        else:
            row[pos] = 4
    return row


def fig_slot_positions(events, title: str = "One target batch per round: each slot's rows, by position"
                       ) -> go.Figure:
    """One line per (round, slot): the slot's committed positions and the rows it put into that
    round's target batch, coloured by what the target made of them. The lines of one round are
    the rows of one target call."""
    events = list(events)
    width = 1 + max((max(r.batch_pos) for ev in events for r in ev.slots if r.batch_pos), default=0)
    z, y = [], []
    for ev in events:
        for r in ev.slots:
            z.append(slot_cells(r, width))
            y.append(f"round {ev.round} · seq {r.seq}")
    n = len(SLOT_CELLS)
    scale = []
    for k, (_, colour) in enumerate(SLOT_CELLS):
        scale += [[k / n, colour], [(k + 1) / n, colour]]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(width)), y=y, zmin=-0.5, zmax=n - 0.5,
                               colorscale=scale, showscale=False, xgap=2, ygap=2,
                               hovertemplate="%{y}, position %{x}<extra></extra>"))
    for name, colour in SLOT_CELLS:        # a legend for the cell kinds
        fig.add_scatter(x=[None], y=[None], mode="markers", name=name,
                        marker=dict(symbol="square", size=12, color=colour))
    k = 0
    for ev in events[:-1]:                 # a line between rounds: each block is one target call
        k += len(ev.slots)
        fig.add_hline(y=k - 0.5, line=dict(color="#37474f", width=2))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(dtick=1)
    fig = _layout(fig, title, "position", "")
    fig.update_layout(height=200 + 22 * len(y), plot_bgcolor="white",
                      legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.01, x=0),
                      margin=dict(t=50, b=120))
    return fig
