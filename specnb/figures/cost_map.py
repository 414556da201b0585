"""The engine's cost of a round, coverage, the decode against the memory floor, and the (α, c) map.

Leviathan et al.'s speedup (`specnb.measure.cost.speedup`) charges a round γ draft steps at c
each and one target call at the price of one row. This engine pays more, and all of it is
measured. In one-row target calls, a round of llama.cpp's draft-simple (re-evaluation on) costs

    round_cost(γ, c, bc_t, bc_d) = γ c + bc_t[γ+1] + c bc_d[γ+1]

γ one-row draft steps while drafting (id_last, then each kept draft token but the last), the
target's (γ+1)-row verification batch, and the draft's process() replay of that batch, at the
draft's own batch cost. bc_t, bc_d: {rows: time} of the target's and the draft's k-row batches
(seconds or already divided by one row: each is divided by its own one-row entry); without bc_d
the draft's batches are taken to scale like the target's (bc_d = bc_t).

Measured in the loop, the draft's whole work per drafted token (drafting, process(), the catch-up
rows, in plain decoding steps) is c_loop (measure/turns.py). With re-evaluation on it is about
c (1 + bc_d[γ+1] / γ), and a round costs γ c_loop + bc_t[γ+1]: the same round with the replay
already inside the draft's cost (`replay=False` below). The map of a course's runs uses that
form, so that every configuration, with or without specnb's additions, sits at what its draft cost
in the loop.

A drafter that drafts in only part of the rounds (an n-gram lookup that finds no match) has a
coverage φ, the share of rounds that drafted; the other rounds are plain one-row decodes:

    coverage_speedup = (φ E + (1 - φ)) / (φ round_cost + (1 - φ)),   E = (1 - α^(γ+1)) / (1 - α)

`decode_roofline` sets a one-row decode against the machine's streaming bandwidth: the weight bytes
a step reads over the time per token. `fig_cost_map` draws the best predicted speedup over (α, c)
with measured points on it.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from ..errors import check_param
from ..measure.cost import expected_tokens_per_call
from .runs import _layout

GAMMAS = range(1, 9)                  # draft lengths the map's best speedup is taken over
RED, YELLOW, GREEN = "#c62828", "#fff59d", "#2e7d32"
WIN, LOSS, NOISE_GREY = "#1b5e20", "#b71c1c", "#9e9e9e"     # a measured point's verdict


def _norm(bc: dict, k: int) -> float:
    check_param(isinstance(bc, dict) and 1 in bc and k in bc, "bc", sorted(bc) if isinstance(bc, dict) else bc,
                f"batch costs holding 1 and {k} rows")
    return float(bc[k]) / float(bc[1])


def round_cost(gamma: int, c: float, bc: dict, bd: dict | None = None, *, replay: bool = True) -> float:
    """One round in one-row target calls: γ c + bc_t[γ+1] + c bc_d[γ+1] (bd None: bc); γ = 0 is a
    plain decoding step, 1. replay=False: c is the loop's c_loop, which holds the draft's replay
    already, and the round is γ c + bc_t[γ+1]."""
    check_param(isinstance(gamma, int) and not isinstance(gamma, bool) and gamma >= 0, "gamma", gamma,
                "an integer >= 0")
    check_param(isinstance(c, (int, float)) and math.isfinite(c) and c >= 0, "c", c, "a number >= 0")
    if gamma == 0:
        return 1.0
    if not replay:
        return gamma * c + _norm(bc, gamma + 1)
    return gamma * c + _norm(bc, gamma + 1) + c * _norm(bc if bd is None else bd, gamma + 1)


def engine_speedup(tokens_per_call: float, gamma: int, c: float, bc: dict, bd: dict | None = None, *,
                   replay: bool = True) -> float:
    """Measured tokens per round (target call) over the round's cost in one-row target calls."""
    return float(tokens_per_call) / round_cost(gamma, c, bc, bd, replay=replay)


def coverage_speedup(alpha: float, gamma: int, c: float, bc: dict, coverage: float = 1.0,
                     bd: dict | None = None, *, replay: bool = True) -> float:
    """The engine model for a drafter that drafts γ tokens in a share `coverage` of the rounds
    (accepted at α each) and decodes one plain token in the others."""
    check_param(isinstance(coverage, (int, float)) and 0.0 <= coverage <= 1.0, "coverage", coverage,
                "a share in [0, 1]")
    e = expected_tokens_per_call(alpha, gamma)
    cost = round_cost(gamma, c, bc, bd, replay=replay)
    return (coverage * e + 1.0 - coverage) / (coverage * cost + 1.0 - coverage)


def best_speedup(alpha: float, c: float, bc: dict, bd: dict | None = None, gammas=GAMMAS, *,
                 replay: bool = True) -> tuple[float, int]:
    """(speedup, γ): the best of coverage_speedup over the draft lengths (ties to the shorter)."""
    best_s, best_g = -1.0, None
    for g in gammas:
        s = coverage_speedup(alpha, int(g), c, bc, 1.0, bd, replay=replay)
        if s > best_s * (1 + 1e-12):
            best_s, best_g = s, int(g)
    return best_s, best_g


def break_even_alpha(c: float, bc: dict, bd: dict | None = None, gammas=GAMMAS, *,
                     replay: bool = True) -> float | None:
    """The least α at which the best draft length of `gammas` breaks even with plain decoding in
    the engine model (best_speedup = 1), by bisection (the speed-up grows with α); None when even
    α = 1 does not break even."""
    if best_speedup(1.0, c, bc, bd, gammas, replay=replay)[0] < 1.0:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if best_speedup(mid, c, bc, bd, gammas, replay=replay)[0] >= 1.0 else (mid, hi)
    return hi


def c_from_bytes(draft, target, n_draft_vocab: int | None = None) -> float:
    """The cost ratio the bytes predict: the weight bytes a draft step reads over a target
    step's (measure.bench.decode_bytes; the draft's with its output head cut to n_draft_vocab
    rows, --spec-draft-vocab, measure.bench.draft_decode_bytes). A one-row decode near the memory
    limit costs about its bytes, so a draft costs about its share of them."""
    from ..measure.bench import decode_bytes, draft_decode_bytes
    return draft_decode_bytes(draft, n_draft_vocab) / decode_bytes(target)


# ---- the one-row decode against the memory floor ------------------------------------------------

def decode_roofline(model, t_token_s: float, gb_s: float) -> dict:
    """A one-row decode of `model` at t_token_s seconds per token against a streaming bandwidth of
    gb_s: {"bytes" read per token, "t_token_s", "gb_s" reached, "floor_s" (bytes / bandwidth, the
    fastest any decode can be), "fraction" of the bandwidth}."""
    check_param(t_token_s > 0, "t_token_s", t_token_s, "a time > 0")
    check_param(gb_s > 0, "gb_s", gb_s, "a bandwidth > 0")
    from ..measure.bench import decode_bytes
    nb = int(decode_bytes(model))
    reached = nb / t_token_s / 1e9
    return {"bytes": nb, "t_token_s": float(t_token_s), "gb_s": reached, "floor_s": nb / (gb_s * 1e9),
            "fraction": reached / gb_s}


def streaming_gb_s(gib: float = 0.25, reps: int = 2, n_threads: int | None = None) -> float:
    """The machine's streaming bandwidth now, in GB/s: `specnb bench`'s probe, shorter."""
    from ..measure.bench import streaming_bandwidth
    return float(streaming_bandwidth(gib=gib, n_threads=n_threads, reps=reps)["gb_s"])


# ---- the map ---------------------------------------------------------------------------------

def _verdict_colour(measured) -> str:
    # a measured interval's colour: its verdict's (measure/verdict.py); a bare number black
    from ..measure.verdict import Interval, speedup_verdict
    if not isinstance(measured, Interval):
        return "black"
    return {"wins": WIN, "loses": LOSS}.get(speedup_verdict(measured), NOISE_GREY)


def _measured_text(measured) -> str | None:
    from ..measure.verdict import Interval, said
    if measured is None:
        return None
    return said(measured) if isinstance(measured, Interval) else f"measured {measured:.2f}x"


def fig_cost_map(bc: dict, points: dict | None = None, bd: dict | None = None, n: int = 40,
                 gammas=GAMMAS, title: str = "Predicted speedup over (α, c)", *, replay: bool = True,
                 lines: dict | None = None, c_label: str = "c (draft step / target step)") -> go.Figure:
    """The best speedup over γ that the engine model predicts at each (α, c) of an n x n grid
    (every round drafting; replay=False: c is the loop's c_loop, see round_cost), the break-even
    contour, and measured points {name: {"alpha", "c", "measured", "predicted"}}.

    "measured" is a number or a measure.verdict.Interval (the marker then takes its verdict's
    colour, and its hover says it with the interval); optional "alpha_range" and "c_range"
    ((low, high)) draw error bars, "short" labels the marker with a few characters instead of the
    name and both speedups (a table beside the map carries the rest), "symbol" sets the marker.
    `lines`: {label: c} draws a dashed horizontal line at each c (the costs record's c, say).
    The colour scale runs from 0 (no speedup is below it) with plain decoding's 1 in its middle."""
    alphas = [i / n for i in range(n)]
    cs = [i / n for i in range(n + 1)]
    z = [[max(best_speedup(a, x, bc, bd, gammas, replay=replay)[0], 0.0) for a in alphas] for x in cs]
    fig = go.Figure()
    fig.add_heatmap(x=alphas, y=cs, z=z, zmin=0.0, zmax=2.0, zmid=1.0,
                    colorscale=[[0.0, RED], [0.5, YELLOW], [1.0, GREEN]],
                    colorbar=dict(title=dict(text="speedup", side="right"), len=0.75, y=0.42,
                                  tickvals=[0, 0.5, 1, 1.5, 2], ticktext=["0", "0.5", "1", "1.5", "≥ 2"]),
                    hovertemplate="α %{x:.2f}, c %{y:.2f}: %{z:.2f}x<extra></extra>")
    fig.add_contour(x=alphas, y=cs, z=z, contours=dict(start=1.0, end=1.0, size=1.0, coloring="none"),
                    line=dict(color="black", width=2), showscale=False, name="break-even", showlegend=True,
                    hoverinfo="skip")
    for name, p in (points or {}).items():
        said_text = _measured_text(p.get("measured"))
        parts = [said_text, f"predicted {p['predicted']:.2f}x" if p.get("predicted") is not None else None]
        detail = ", ".join(s for s in parts if s)
        label = p["short"] if p.get("short") else f"{name}<br>{detail}"
        # labels open towards the middle of the plot, never off its edges
        side = "left" if p["alpha"] > 0.55 else "right"
        level = "top" if p["c"] < 0.1 else ("bottom" if p["c"] > 0.9 else "middle")
        err = {}
        for axis, key, at in (("error_x", "alpha_range", p["alpha"]), ("error_y", "c_range", p["c"])):
            if p.get(key):
                lo, hi = p[key]
                err[axis] = dict(type="data", symmetric=False, array=[max(hi - at, 0.0)],
                                 arrayminus=[max(at - lo, 0.0)], color="#37474f", thickness=1)
        fig.add_scatter(x=[p["alpha"]], y=[p["c"]], mode="markers+text", text=[label],
                        textposition=f"{level} {side}", cliponaxis=False, textfont=dict(size=11),
                        marker=dict(size=11, color=_verdict_colour(p.get("measured")), symbol=p.get("symbol", "x"),
                                    line=dict(width=1, color="black")),
                        showlegend=False, **err,
                        hovertemplate=f"{name}: α %{{x:.2f}}, c %{{y:.2f}}; {detail}<extra></extra>")
    for label, c in (lines or {}).items():
        fig.add_hline(y=c, line=dict(dash="dash", color="#37474f", width=1), annotation_text=label,
                      annotation_position="top left")
    fig.update_xaxes(range=[0, alphas[-1]])
    fig.update_yaxes(range=[0, 1])
    fig = _layout(fig, title, "α (accepted / examined)", c_label)
    fig.update_layout(height=540, margin=dict(l=60, r=30, t=90, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0))
    return fig
