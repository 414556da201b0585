"""A measured waterfall (specnb.measure.waterfall) as the demo and `bench --spec` print it: the
table, the headline with its command line, the ceiling, the JSON, and bench's goals for it.

The flags are speculative-simple's (app/flags.spec_flags), so every configuration printed is one
a user can run as printed.
"""
from __future__ import annotations

import shlex

from .flags import BEYOND, spec_flags
from ..measure.verdict import said, speedup_verdict
from ..measure.waterfall import PLAIN, PROSE_FLOOR, Ceiling, Row, Waterfall

# the goals `bench --spec -md` sets the headline against (docs/benchmarks.md): its speed-up on code
# over specnb's own plain decoding on CPUs with AVX-512 VNNI, its share of this CPU's ceiling on
# AVX2-only CPUs, never below PROSE_FLOOR on prose, and the output identical everywhere
HEADLINE_GOAL = 1.6
CEILING_SHARE_GOAL = 0.90


def stage_flags(row: Row) -> list:
    """The line's speculative-simple flags (after -m/-md/-p)."""
    return spec_flags(row.stage.params) if row.stage else []


def stage_step(row: Row) -> list:
    """What the line adds to the one above: a new draft as `-md NAME`, then its flags."""
    from ..speculation.params import SpecParams
    if row.stage is None:
        return []
    adds = row.stage.adds
    md = ["-md", row.draft_name] if "draft" in adds else []
    return md + spec_flags(SpecParams(**{k: v for k, v in adds.items() if k != "draft"}).validate())


def stage_name(row: Row) -> str:
    """'3. + a restricted draft vocabulary: --spec-draft-vocab 32768 [specnb, beyond llama.cpp]'"""
    if row.stage is None:
        return f"0. {PLAIN}"
    step = stage_step(row)
    return (f"{row.index}. {row.label}" + (f": {' '.join(step)}" if step else "")
            + (f" {BEYOND}" if row.stage.beyond else ""))


def command(target: str, draft: str | None, flags: list, prompt: str = "PROMPT") -> str:
    """The command line that runs a configuration (plain decoding: `generate`)."""
    if draft is None:
        return f"python -m specnb generate -m {shlex.quote(target)} -p {prompt}"
    return (f"python -m specnb speculative-simple -m {shlex.quote(target)} -md {shlex.quote(draft)} "
            f"-p {prompt}" + "".join(f" {shlex.quote(t)}" for t in flags))


def _cell(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def format_waterfall(w: Waterfall) -> list:
    """The waterfall's table, one line per stage, and what its columns mean."""
    prose = w.prose is not None
    L = ["  on code (interval, pairs)  | " + ("  prose | " if prose else "")
         + "c_loop | verify/row |    α | same | configuration (each line adds to the one above)"]
    for r in w.rows:
        iv = r.speedup
        p = "" if not prose else ("      - | " if r.prose is None else f"{r.prose.speedup.estimate:6.2f}x | ")
        L.append(f"  {iv.estimate:5.2f}x ({iv.low:.2f}-{iv.high:.2f}x, {iv.n:2d}) | {p}"
                 f"{_cell(r.loop('c_loop'), '{:.2f}'):>6} | {_cell(r.loop('verify_row'), '{:.2f}'):>10} | "
                 f"{_cell(r.alpha, '{:.2f}'):>4} | {'yes' if r.identical else 'NO':>4} | {stage_name(r)}")
    L.append(f"  on code: the median of the paired ratios (tok/s over the same pass's plain decoding) over "
             f"{len(w.prompts)} code prompt{'s' * (len(w.prompts) != 1)} x {len(w.samplings)} sampling"
             f"{'s' * (len(w.samplings) != 1)} x {w.passes} passes ({w.n_predict} tokens), with their interval"
             + (f"; prose: the median on {w.prose}, which a line must hold at {PROSE_FLOOR} or more to be "
                f"recommended" if prose else "")
             + "; c_loop: the draft's time per drafted token in the loop (drafting, process(), catching up) over "
             "plain decoding's time per token (the costs record's c is one step over one step); verify/row: the "
             "verification batch's time beyond one plain step, per extra row; α: accepted over examined draft "
             "tokens; same: output identical to plain decoding everywhere")
    busy = max((r.busy for r in w.rows if r.busy is not None), default=None)
    if busy is not None and busy > 0.10:
        L.append(f"  busy machine: other processes took up to {100 * busy:.0f}% of the CPU during the runs; "
                 f"the intervals are wider for it")
    return L


def ceiling_lines(cl: Ceiling | None) -> list:
    """The headline's ceiling as text, and what a line above it means."""
    if cl is None:
        return []
    line = (f"  this CPU's ceiling for line {cl.stage}: {cl.speedup:.2f}x, its measured {cl.tokens_per_round:.2f} "
            f"tokens per round with each of its {cl.drafted_per_round:.2f} draft tokens a round at its share of the "
            f"bytes (c = {cl.c_bytes:.2f}) and each verification row beyond the first at the int8 limit "
            f"({cl.row:.2f} of a {cl.t_step_ms:.1f} ms step at {cl.gmacs_s:.0f} G/s)")
    if cl.reached is not None:
        line += (f"; the line reached {100 * cl.reached:.0f}% of it"
                 + (f" ({above_ceiling(cl)})" if cl.reached > 1.0 else ""))
    return [line]


def above_ceiling(cl: Ceiling) -> str:
    """Why a line ran above its ceiling, from its own loop's prices (Ceiling.undercut): the bound
    holds only at the prices it assumes."""
    cut = [f"its {what}s cost {mine:.2f} of a plain step in the loop against the ceiling's {theirs:.2f}, "
           + ("a batch running faster per row than the plain step it is priced from"
              if what == "verification row" else "their share of the bytes")
           for what, mine, theirs in cl.undercut()]
    return "above it: " + ("; ".join(cut) if cut else "its rounds paid every price in full, so the plain runs it is "
                           "divided by ran slower than the rounds' own steps (timed at other moments)")


def headline_lines(w: Waterfall, target: str, lc: dict | None = None) -> list:
    """The recommended line (Waterfall.headline), what the fastest fixed line gains on code and loses
    on prose when that is another line, and the command that runs it."""
    h, best = w.headline, w.fastest_on_code
    L = []
    if h.index:
        L.append(f"  recommended: line {h.index} ({h.label}) {said(h.speedup)} on code ({h.tok_s:.1f} vs "
                 f"{w.rows[0].tok_s:.1f} tok/s)" + (f", {h.tok_s / lc['tg_tok_s']:.2f}x llama.cpp's plain "
                                                    f"decoding ({lc['tg_tok_s']:.1f} tok/s)" if lc else "")
                 + (f"; on {w.prose} {said(h.prose.speedup)}" if h.prose is not None else ""))
    else:
        L.append("  recommended: plain decoding: no speculative line that holds on prose beat it in this run")
    if best.index and best is not h:
        L.append(f"  line {best.index} is faster on code ({said(best.speedup)}) but "
                 + (f"runs {best.prose.speedup.estimate:.2f}x on {w.prose} ({said(best.prose.speedup)}), below "
                    f"{PROSE_FLOOR}: a fixed draft length pays for rejected drafts on prose"
                    if best.prose is not None else "was not measured on prose"))
    if h.index and h.loop("c_loop") is not None:
        p = h.c_parts()
        if p:
            L.append(f"  its draft cost in the loop c_loop = {h.loop('c_loop'):.2f} of a plain step per drafted "
                     f"token: one-row steps {p['steps']:.2f} ({p['step_ms']:.1f} ms each), catch-up rows "
                     f"{p['rows']:.2f}, sampling and bookkeeping {p['other']:.2f}")
    L.append("  run it on your own prompt (add --chat to wrap it as a chat message, as the demo's chat prompts are):")
    L.append("    " + command(target, h.draft_name if h.index else None, stage_flags(h)))
    return L


def headline_json(w: Waterfall, target: str, lc: dict | None = None) -> dict:
    """The recommended line for --json: its line, flags, draft, command and speed-ups with intervals."""
    h = w.headline
    out = {"stage": h.index, "label": h.label, "flags": stage_flags(h), "draft": h.draft_name if h.index else None,
           "speedup": h.speedup.as_json(), "verdict": speedup_verdict(h.speedup),
           "prose_speedup": None if h.prose is None else h.prose.speedup.as_json(),
           "tok_s": h.tok_s, "c_loop": h.loop("c_loop"), "alpha": h.alpha}
    out["command"] = command(target, out["draft"], out["flags"])
    if lc:
        out["vs_llama_cpp"] = h.tok_s / lc["tg_tok_s"]
    return out


def waterfall_json(w: Waterfall, target: str, lc: dict | None = None) -> dict:
    out = w.as_json()
    for r, j in zip(w.rows, out["stages"]):
        j.update(flags=stage_flags(r), step=stage_step(r))
    out["headline"] = headline_json(w, target, lc)
    return out


def waterfall_goals(w: Waterfall, simd: str) -> list:
    """(goal, measured, met) of `bench --spec -md`: the recommended line's speed-up on code (AVX-512
    VNNI: at least HEADLINE_GOAL; AVX2 alone: at least CEILING_SHARE_GOAL of this CPU's ceiling),
    its prose prompt, and identical output everywhere."""
    h, cl = w.headline, w.ceiling
    if simd == "avx512":
        out = [(f"the recommended line on code >= {HEADLINE_GOAL}x specnb's plain decoding (AVX-512 VNNI)",
                f"line {h.index}: {said(h.speedup)}", h.index > 0 and h.speedup.estimate >= HEADLINE_GOAL)]
    else:
        out = [(f"the recommended line on code >= {CEILING_SHARE_GOAL:.0%} of this CPU's ceiling ({simd})",
                "-" if cl is None or cl.reached is None else f"line {cl.stage}: {100 * cl.reached:.0f}% of "
                f"{cl.speedup:.2f}x", None if cl is None or cl.reached is None else cl.reached >= CEILING_SHARE_GOAL)]
    if w.prose is not None:
        out.append((f"the recommended line on prose >= {PROSE_FLOOR}x",
                    "-" if h.prose is None else f"{said(h.prose.speedup)} on {w.prose}", h.holds_on_prose))
    out.append(("output identical everywhere", "every prompt, sampling and line", w.identical))
    return out


def format_pair_waterfall(w: Waterfall, target: str, draft: str, simd: str, lc: dict | None = None,
                          goals: bool = True) -> str:
    """`bench --spec -md`'s part: the waterfall, its recommended line and ceiling, and (goals=True)
    its goals; goals=False leaves them to bench's own list."""
    L = [f"speculative decoding of the pair, {draft} drafting for {target}, on the demo's code prompts and "
         f"prose, one line per configuration:"]
    L += format_waterfall(w) + headline_lines(w, target, lc) + ceiling_lines(w.ceiling)
    if goals:
        L.append("goals (the pair's speculative decoding):")
        marks = {True: "met", False: "MISSED", None: "-"}
        L += [f"  [{marks[met]}] {g}: {m}" for g, m, met in waterfall_goals(w, simd)]
    return "\n".join(L)
