"""What the cost notebook reads off its runs: each measured configuration as a point of the (α, c)
map, the one paragraph the map says, and how a speed-up moves with the length of the run.

    map_point(comp, bc)               a measure.turns.Comparison as a point of figures.cost_map's map:
                                      α (accepted over examined, with its range over the passes), the
                                      draft's cost in the loop c_loop (0 without a draft model, with its
                                      range), coverage, the speed-up interval, and what the map predicts
    map_lines(points)                 the points as a table, one line each
    map_story(points, bc, c_record, base, best)   the paragraph: where the pair wins and why, in α
                                      and c_loop, each number from the points and every list complete
    speedup_over_first(comp, n)       the speed-up over the first n committed tokens of each pass
    said_verb(iv)                     measure.verdict.said() as a sentence's verb: 'was within the noise (...)'

The map is drawn with replay=False (figures/cost_map.py): c_loop already holds the draft's
process() replay and catch-up, so a round costs γ c_loop + bc_t[γ+1] and every configuration, with
or without specnb's additions, sits at what its draft cost in the loop.
"""
from __future__ import annotations

import statistics

from ..figures.cost_map import GAMMAS, break_even_alpha, coverage_speedup
from ..measure.stats import examined_counts
from ..measure.verdict import NOISE, ONE, said, speedup_verdict

LOOKUP, MODEL, CHAIN = "lookup", "model", "chain"       # what drafted: a lookup, a draft model, both


def said_verb(iv) -> str:
    """said(iv) as the verb of a sentence ("X wins (...)", "X was within the noise (...)", "X gave
    no verdict from one pair (...)"), the verdict word still followed by its interval."""
    word = speedup_verdict(iv)
    return {NOISE: "was ", ONE: "gave "}.get(word, "") + said(iv)


def _chain_c(plain, spec) -> float | None:
    # a chain's draft cost per drafted token: drafting and process() of every round (the draft
    # model catches up on what the lookup's drafts committed, too) over every token drafted, by the
    # lookup or the model, in plain steps; c_loop divides by the model's tokens alone
    evs = [ev for ev in spec.events if not ev.slot.replay]
    n = sum(len(ev.slot.draft) for ev in evs)
    u = plain.s_per_token
    return sum(ev.t_draft + ev.t_process for ev in evs) / n / u if n and u else None


def predicted(alpha: float, c: float, bc: dict, coverage: float = 1.0, gammas=GAMMAS) -> float:
    """The map's speed-up at (α, c_loop), with the drafter drafting in a share `coverage` of the
    rounds: the best over the draft lengths of figures.cost_map.coverage_speedup (replay=False)."""
    return max(coverage_speedup(alpha, int(g), c, bc, coverage, replay=False) for g in gammas)


def map_point(comp, bc: dict, short: str = "", kind: str | None = None) -> dict | None:
    """A Comparison as a point of fig_cost_map: {"alpha", "c", "measured" (the speed-up Interval),
    "predicted" (the map's value with the run's coverage), "alpha_range", "c_range", "coverage",
    "kind" (LOOKUP, MODEL or CHAIN), "short"}. "c" is c_loop (0 for a lookup); for a chain, its
    draft model's time per token drafted by either impl. None when no pass drafted (no α)."""
    if comp.alpha is None:
        return None
    per_pass = [examined_counts(s.events) for s in comp.spec]
    alphas = [a / e for a, e in per_pass if e]
    has_model = any(ev.slot.impl == "draft-simple" for s in comp.spec for ev in s.events)
    has_lookup = any(ev.slot.impl.startswith("ngram") for s in comp.spec for ev in s.events)
    kind = kind or (CHAIN if has_model and has_lookup else MODEL if has_model else LOOKUP)
    if kind == CHAIN:       # the draft model's time over every drafted token, the lookup's free ones too
        c_loops = [c for c in map(_chain_c, comp.plain, comp.spec) if c is not None]
    else:
        c_loops = [x.c_loop for x in comp.loop_costs if x.c_loop is not None]
    c = statistics.median(c_loops) if c_loops else 0.0
    cov = comp.coverage()
    return {"alpha": comp.alpha, "c": c, "measured": comp.speedup,
            "predicted": predicted(comp.alpha, c, bc, cov),
            "alpha_range": (min(alphas), max(alphas)) if alphas else None,
            "c_range": (min(c_loops), max(c_loops)) if c_loops else None,
            "coverage": cov, "kind": kind, "short": short,
            "symbol": {MODEL: "x", LOOKUP: "diamond", CHAIN: "square"}[kind]}


def map_lines(points: dict) -> list:
    """The points as a table: α (range), c_loop (range), coverage, the map's prediction, the
    measured speed-up with its verdict."""
    w = max([len(n) for n in points] + [5])
    out = [f"{'run':{w}s} | α (passes)       | c_loop (passes)  | cover | map    | measured"]
    for name, p in points.items():
        ar, cr = p.get("alpha_range") or (p["alpha"],) * 2, p.get("c_range") or (p["c"],) * 2
        out.append(f"{name:{w}s} | {p['alpha']:.2f} ({ar[0]:.2f}-{ar[1]:.2f}) | {p['c']:.2f} ({cr[0]:.2f}-{cr[1]:.2f}) "
                   f"| {p['coverage']:5.0%} | {p['predicted']:5.2f}x | {said(p['measured'])}")
    return out


def _names(points: dict, names) -> str:
    return ", ".join(f"{n} (α {points[n]['alpha']:.2f}, c_loop {points[n]['c']:.2f})" for n in names)


def _even(c: float, bc: dict) -> str:
    a = break_even_alpha(c, bc, replay=False)
    return "no α up to 1 is enough" if a is None else f"breaking even takes α ≥ {a:.2f}"


def map_story(points: dict, bc: dict, c_record, base: str, best: str | None = None) -> str:
    """One paragraph read off the map: the break-even α at llama.cpp's defaults (the point `base`),
    which runs won, lost or were within the noise (every one named), how many of the decided ones
    the map's contour put on the side they were measured on (and which not, with their coverage),
    what specnb's cheaper draft (the point `best`) moves, and where the lookups sit."""
    b = points[base]
    verdicts = {n: speedup_verdict(p["measured"]) for n, p in points.items()}
    groups = {w: [n for n, v in verdicts.items() if v == w] for w in ("wins", "loses")}
    unclear = [n for n, v in verdicts.items() if v not in groups]
    text = (f"**Read off the map.** At llama.cpp's defaults ({base}) the 0.5B draft cost c_loop = {b['c']:.2f} of a "
            f"plain step per drafted token in the loop (the record's c, a draft step alone, is "
            f"{c_record.estimate:.2f}), and there {_even(b['c'], bc)}. ")
    parts = [f"{len(groups['wins'])} won" + (f": {_names(points, groups['wins'])}" if groups["wins"] else ""),
             f"{len(groups['loses'])} lost" + (f": {_names(points, groups['loses'])}" if groups["loses"] else "")]
    if unclear:
        one = any(points[n]["measured"].n < 2 for n in unclear)
        parts.append(f"{len(unclear)} {'was' if len(unclear) == 1 else 'were'} {NOISE}"
                     + (" or had one pair" if one else "") + f": {', '.join(unclear)}")
    text += f"Of the {len(points)} runs on the map, " + "; ".join(parts) + ". "
    decided = groups["wins"] + groups["loses"]
    if decided:
        missed = [n for n in decided if (points[n]["predicted"] > 1.0) != (verdicts[n] == "wins")]
        text += (f"The map, with each run's coverage, put {len(decided) - len(missed)} of the {len(decided)} "
                 "decided runs on the side of 1 they were measured on")
        if not missed:
            text += ": each won where its α lay beyond the contour at its c_loop and lost where it fell short. "
        else:
            text += ("; not " + ", ".join(f"{n} (predicted {points[n]['predicted']:.2f}x, drafting in "
                                          f"{points[n]['coverage']:.0%} of its rounds)" for n in missed) + ". ")
            if len(missed) < len(decided):
                text += ("The others won where their α lay beyond the contour at their c_loop and lost where it "
                         "fell short. ")
    if best is not None and best in points and points[best]["c"] < b["c"]:
        p = points[best]
        text += (f"specnb's additions lower c_loop to {p['c']:.2f} ({best}), where {_even(p['c'], bc)}; there, with "
                 f"α = {p['alpha']:.2f}, it {said_verb(p['measured'])}. ")
    looks = [n for n, p in points.items() if p["kind"] == LOOKUP]
    if looks:
        text += (f"The lookups cost nothing to draft (c_loop 0, where {_even(0.0, bc)}) but drafted only where the "
                 "text repeats: " + "; ".join(f"{n} in {points[n]['coverage']:.0%} of its rounds, α = "
                                              f"{points[n]['alpha']:.2f}: {said(points[n]['measured'])}" for n in looks)
                 + ".")
    return text.strip()


def speedup_over_first(comp, n_tokens: int) -> list:
    """Per pass: the speed-up over the first `n_tokens` committed tokens, from the speculative run's
    rounds (their times, until n_tokens are committed) against the plain run's time per token
    (plain decoding's steps take about the same time each). The same pass's whole-run figure is
    comp.ratios; a drafter whose drafts begin late (a lookup before the answer repeats) gains less
    over a short run."""
    out = []
    for p, s in zip(comp.plain, comp.spec):
        t = got = 0.0
        for ev in s.events:
            t += ev.t_round
            got += len(ev.slot.committed)
            if got >= n_tokens:
                break
        out.append(p.s_per_token * got / t if t > 0 else float("nan"))
    return out
