"""The waterfall: plain decoding, llama.cpp's draft-simple at master's defaults, then specnb's
additions one at a time, each line measured against plain decoding on the same prompts.

    waterfall(pair, prompts, samplings, n_predict, passes, prose=...)   -> Waterfall
    Waterfall.rows[i]      line i (0: plain decoding): its speed-up interval on code, its prose
                           comparison, acceptance, the loop's costs, whether every output was plain's
    Waterfall.headline     the fastest line whose output was plain decoding's everywhere and which
                           holds on prose (PROSE_FLOOR): the configuration to run on any prompt
    Waterfall.ceiling      what the headline's measured tokens per round would give with a draft
                           token at its share of the bytes and a verification row at the int8 limit

app/demo.py prints it (the table, the headline's command line and flags).

Per prompt and sampling the lines take turns with plain decoding (measure/turns.py): each pass
runs plain decoding and every line once; a line's speed-up is the median of its paired ratios
over every prompt, sampling and pass, with their interval (measure/verdict.py).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .turns import Comparison, chat_ids, median_known, median_parts, plain_run, spec_run, take_turns, warm_runs
from .verdict import Interval, interval
from ..speculation.draft_vocab import DEFAULT_DRAFT_VOCAB

# One line per configuration, each adding its SpecParams fields to the line before's; plain decoding
# (the target alone) comes first. (label, fields, beyond llama.cpp). The field "draft" is not a
# SpecParams field: DRAFT_Q4_0 runs that line and the ones after it with the pair's draft
# requantized to Q4_0 (registry.requantized_draft; -md changes, the flags do not).
DRAFT_Q4_0 = "q4_0"
WATERFALL = (
    ("llama.cpp's draft-simple at master's defaults", {}, False),
    ("+ the draft keeps its KV rows", {"reeval": False}, True),
    ("+ a restricted draft vocabulary", {"draft_vocab": DEFAULT_DRAFT_VOCAB}, True),
    ("+ the draft requantized to Q4_0", {"draft": DRAFT_Q4_0}, True),
    ("+ each round's draft length chosen from measured costs", {"n_max": "auto"}, True),
    ("+ llama.cpp's ngram-simple drafting first, for free", {"types": ("ngram-simple", "draft-simple")}, True),
)
PLAIN = "plain decoding (the target alone)"
# a line holds on prose when its median speed-up on the prose prompt is at least this
PROSE_FLOOR = 0.97


@dataclass(frozen=True)
class Stage:
    """A waterfall line's configuration: its fields (added up to it), SpecParams, draft and flags."""
    index: int
    label: str
    beyond: bool
    fields: dict
    params: object              # SpecParams
    draft: str | None           # None: the pair's own draft; DRAFT_Q4_0: requantized
    adds: dict                  # the fields this line adds to the one before


def stage_params(fields: dict):
    """A line's SpecParams (its fields but "draft")."""
    from ..speculation.params import SpecParams
    return SpecParams(**{k: v for k, v in fields.items() if k != "draft"}).validate()


def stages(lines=WATERFALL) -> list:
    """The lines as Stages, numbered from 1, each with the fields added up to it."""
    out, fields = [], {}
    for i, (label, add, beyond) in enumerate(lines, 1):
        fields = {**fields, **add}
        out.append(Stage(i, label, beyond, fields, stage_params(fields), fields.get("draft"), dict(add)))
    return out


def stage_pairs(pair, lines=WATERFALL) -> dict:
    """The pair each line runs on, by its "draft" field: None -> `pair`; DRAFT_Q4_0 -> the same
    target context with the draft requantized to Q4_0 (registry.requantized_draft, forged once)
    in a context of its own, compiled and warmed up here."""
    from ..model.registry import requantized_draft
    from ..run.pair import warm_up, with_draft
    out = {None: pair}
    for st in stages(lines):
        if st.draft is not None and st.draft not in out:
            if st.draft != DRAFT_Q4_0:
                raise ValueError(f"waterfall: unknown draft {st.draft!r} (expected {DRAFT_Q4_0!r})")
            out[st.draft] = with_draft(pair, requantized_draft(pair.draft))
            warm_up(out[st.draft].ctx_dft)
    return out


def auto_records(pairs: dict, lines=WATERFALL, on_measure=None) -> list:
    """The costs records the lines that choose lengths with `auto` start from (measure/turns.auto_prior):
    each such line's pair with its draft head, measured once where none is recorded. -> the Costs."""
    from .costs import machine_costs
    out, seen = [], set()
    for st in stages(lines):
        key = (st.draft, st.params.draft_vocab or None)
        if st.params.schedule == "auto" and st.params.needs_draft_model() and key not in seen:
            seen.add(key)
            out.append(machine_costs(pairs[st.draft], key[1], on_measure=on_measure))
    return out


def _pooled(comps) -> Interval | None:
    ratios = [x for c in comps for x in c.ratios]
    return interval(ratios) if ratios else None


@dataclass(frozen=True)
class Row:
    """One line of the waterfall, measured: its code comparisons (one per prompt and sampling) and
    its prose comparison."""
    stage: Stage | None                   # None: plain decoding
    draft_name: str | None                # the -md of its command (None: plain decoding)
    code: tuple = ()                      # Comparison per code prompt and sampling
    prose: Comparison | None = None
    plain_tok_s: float = 0.0              # plain decoding's (row 0)

    @property
    def index(self) -> int:
        return self.stage.index if self.stage else 0

    @property
    def label(self) -> str:
        return self.stage.label if self.stage else PLAIN

    @property
    def speedup(self) -> Interval:
        """The median of the paired ratios over every code prompt, sampling and pass."""
        return _pooled(self.code) or interval([1.0, 1.0])

    @property
    def tok_s(self) -> float:
        return median_known(c.spec_tok_s for c in self.code) or self.plain_tok_s

    @property
    def identical(self) -> bool:
        return all(c.identical for c in self.code) and (self.prose is None or self.prose.identical)

    @property
    def holds_on_prose(self) -> bool:
        """No prose prompt measured, or its median speed-up at least PROSE_FLOOR."""
        return self.prose is None or self.prose.speedup.estimate >= PROSE_FLOOR

    @property
    def alpha(self) -> float | None:
        a = sum(c.examined[0] for c in self.code)
        e = sum(c.examined[1] for c in self.code)
        return a / e if e else None

    @property
    def accept_rate(self) -> float | None:
        d = sum(s.n_drafted for c in self.code for s in c.spec)
        return sum(s.n_accept for c in self.code for s in c.spec) / d if d else None

    def loop(self, name: str):
        """The median over the code comparisons of a LoopCosts field's per-comparison median."""
        return median_known(c.loop_median(name) for c in self.code)

    @property
    def busy(self) -> float | None:
        b = [c.busy for c in self.code if c.busy is not None]
        return max(b) if b else None

    def c_parts(self) -> dict | None:
        """The median over the code comparisons of c_loop's parts (Comparison.c_parts)."""
        return median_parts(c.c_parts() for c in self.code)

    def as_json(self) -> dict:
        return {"stage": self.index, "label": self.label, "beyond": bool(self.stage and self.stage.beyond),
                "fields": self.stage.fields if self.stage else None, "draft": self.draft_name,
                "speedup": self.speedup.as_json(),
                "tok_s": self.tok_s, "c_loop": self.loop("c_loop"), "verify_row": self.loop("verify_row"),
                "c_parts": self.c_parts(),
                "accept_rate": self.accept_rate, "alpha": self.alpha, "identical": self.identical,
                "busy": self.busy, "holds_on_prose": self.holds_on_prose,
                "prose": None if self.prose is None else self.prose.as_json(),
                "runs": [c.as_json() for c in self.code]}


@dataclass(frozen=True)
class Ceiling:
    """What a line's measured tokens per round allow at the machine's limits: each round's draft
    tokens at the draft's share of the bytes (c_bytes of a plain step each) and each verification
    row beyond the first at the int8 compute limit (row of a plain step), the target's own step as
    measured. A bound under those two prices: a line above it ran a draft step below its share of
    the bytes, or rows faster than the probed limit (the probe then understated it)."""
    stage: int
    speedup: float                # tokens per round / (1 + drafted per round x (c_bytes + row))
    tokens_per_round: float
    drafted_per_round: float
    c_bytes: float
    row: float
    gmacs_s: float
    t_step_ms: float
    reached: float | None         # the line's speed-up over this
    c_loop: float | None = None   # the line's own prices in its loop (Row.loop), beside the two above
    verify_row: float | None = None

    def as_json(self) -> dict:
        return dict(self.__dict__)

    def undercut(self) -> list:
        """Which of the ceiling's prices the line's own loop paid less than, as (what, the loop's,
        the ceiling's): why a line can sit above its ceiling. Empty when it paid both in full."""
        out = []
        if self.c_loop is not None and self.c_loop < self.c_bytes:
            out.append(("draft token", self.c_loop, self.c_bytes))
        if self.verify_row is not None and self.verify_row < self.row:
            out.append(("verification row", self.verify_row, self.row))
        return out


def ceiling(row: Row, pair, costs=None) -> Ceiling | None:
    """The Ceiling of a measured line on `pair` (its own pair: the line's draft), with the int8
    limit and the draft's bytes from `costs` (a measure.costs.Costs) when given, else the
    recorded int8 limit. None without int8 activations on the CPU, a draft model or drafts."""
    from .bench import ideal_row_cost, macs_per_row
    from ..figures.cost_map import c_from_bytes
    ctx = pair.ctx_tgt
    if (row.stage is None or not row.stage.params.needs_draft_model() or ctx.backend_name != "cpu"
            or ctx.activations != "q8" or not row.code):
        return None
    evs = [ev for c in row.code for s in c.spec for ev in s.events]
    if not evs or not any(ev.slot.draft for ev in evs):
        return None
    tokens = sum(len(ev.slot.committed) for ev in evs) / len(evs)
    drafted = sum(len(ev.slot.draft) for ev in evs) / len(evs)
    if costs is not None and costs.int8_gmacs_s is not None:
        gmacs = costs.int8_gmacs_s.estimate
    else:
        from ..kernels.tuning import int8_peak
        gmacs = int8_peak(ctx.n_threads)
    t_step = 1.0 / statistics.median(p.tok_s for c in row.code for p in c.plain)
    c_b = c_from_bytes(pair.draft, pair.target, row.stage.params.draft_vocab or None)
    r = ideal_row_cost(macs_per_row(pair.target), gmacs, t_step)
    s = tokens / (1.0 + drafted * (c_b + r))
    return Ceiling(row.index, s, tokens, drafted, c_b, r, gmacs, 1e3 * t_step, row.speedup.estimate / s,
                   row.loop("c_loop"), row.loop("verify_row"))


@dataclass(frozen=True)
class Waterfall:
    rows: tuple                       # Row per line, row 0 plain decoding
    n_predict: int
    prompts: tuple                    # code prompts' labels
    samplings: tuple
    passes: int
    prose: str | None = None          # the prose prompt's label
    ceiling: Ceiling | None = None
    costs_id: str | None = None       # the costs record the ceiling read
    extra: dict = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return all(r.identical for r in self.rows)

    @property
    def headline(self) -> Row:
        """The fastest line (by its median on code) whose output was plain decoding's everywhere
        and which holds on prose; plain decoding when no such line beats it (the first of equals)."""
        ok = [r for r in self.rows if r.identical and r.holds_on_prose]
        return max(ok, key=lambda r: r.speedup.estimate, default=self.rows[0])

    @property
    def fastest_on_code(self) -> Row:
        """The fastest lossless line on code alone, whatever it does on prose."""
        ok = [r for r in self.rows if r.identical]
        return max(ok, key=lambda r: r.speedup.estimate, default=self.rows[0])

    def as_json(self) -> dict:
        return {"stages": [r.as_json() for r in self.rows], "headline_stage": self.headline.index,
                "n_predict": self.n_predict, "prompts": list(self.prompts), "samplings": list(self.samplings),
                "passes": self.passes, "prose": self.prose, "identical": self.identical,
                "ceiling": None if self.ceiling is None else self.ceiling.as_json(), "costs": self.costs_id,
                **self.extra}


def waterfall(pair, prompts, samplings, n_predict: int, passes: int = 2, lines=WATERFALL, prose=None,
              say=None, pairs: dict | None = None, costs=None) -> Waterfall:
    """Plain decoding and every line of `lines` on each code prompt (label, text, chat) x sampling
    (name, SamplerParams) of the open `pair`, `passes` passes taken in turn; with `prose` (label,
    text, chat, sampling name, SamplerParams) the same on a prose prompt, which decides the
    headline. A line with a "draft" runs on pairs[draft] (stage_pairs, made here unless given).
    `say` gets one line per prompt and sampling; `costs` (measure.costs.Costs) prices the ceiling."""
    from ..model.registry import registry_name
    say = say or (lambda *a: None)
    pairs = pairs if pairs is not None else stage_pairs(pair, lines)
    names = {k: registry_name(p.draft) for k, p in pairs.items()}
    st = stages(lines)
    # every line once, untimed: first-use costs (the draft vocabulary's ranking) stay out of the runs
    warm = chat_ids(pair.target.vocab, *(prompts[0][1:] if prompts else prose[1:3]))
    warm_runs([(pairs[s.draft], warm, samplings[0][1] if samplings else prose[4], s.params) for s in st])
    jobs = [(label, text, chat, sname, sp) for label, text, chat in prompts for sname, sp in samplings]
    code = [[] for _ in range(len(st) + 1)]
    prose_comp = [None] * (len(st) + 1)
    plain_tok_s = []
    for j, (label, text, chat, sname, sp) in enumerate(jobs + ([prose] if prose else [])):
        ids = chat_ids(pair.target.vocab, text, chat)
        fns = {0: plain_run(pair, ids, sp, n_predict)}
        fns.update({s.index: spec_run(pairs[s.draft], ids, sp, n_predict, s.params) for s in st})
        runs = take_turns(fns, passes)
        comps = {i: Comparison.of(label, sname, runs[0], runs[i]) for i in range(1, len(st) + 1)}
        for i, c in comps.items():
            if j < len(jobs):
                code[i].append(c)
            else:
                prose_comp[i] = c
        if j < len(jobs):
            plain_tok_s += [r.tok_s for r in runs[0]]
        say(f"  {label} [{sname}]: plain {statistics.median(r.tok_s for r in runs[0]):.1f} tok/s; speed-up per "
            f"line " + " ".join(f"{comps[i].speedup.estimate:.2f}" for i in comps)
            + ("" if all(c.identical for c in comps.values()) else "; OUTPUT DIFFERS FROM PLAIN DECODING"))
    plain = statistics.median(plain_tok_s) if plain_tok_s else 0.0
    rows = [Row(None, None, plain_tok_s=plain)]
    rows += [Row(s, names[s.draft], tuple(code[s.index]), prose_comp[s.index], plain) for s in st]
    w = Waterfall(tuple(rows), n_predict, tuple(p[0] for p in prompts), tuple(s[0] for s in samplings), passes,
                  prose[0] if prose else None, costs_id=costs.id if costs is not None else None)
    h = w.headline if w.headline.index else rows[-1]
    cl = ceiling(h, pairs[h.stage.draft], costs) if h.stage else None
    return Waterfall(w.rows, w.n_predict, w.prompts, w.samplings, w.passes, w.prose, cl, w.costs_id)


def pair_waterfall(target=None, draft=None, n_predict: int = 64, n_threads=None, backend: str = "cpu",
                   activations: str | None = None, passes: int = 2, prompts=None, samplings=None, prose=None,
                   lines=WATERFALL, say=None) -> tuple:
    """`bench --spec -md`: the pair opened from names or paths, its costs record (measure.costs,
    measured once), and the waterfall on `prompts` x `samplings` with the `prose` prompt.
    -> (Waterfall, Costs)."""
    from .costs import machine_costs
    from ..run.pair import open_pair, warm_up
    pair = open_pair(target, draft, n_ctx=1024, backend=backend, n_threads=n_threads, activations=activations)
    warm_up(pair.ctx_tgt, pair.ctx_dft)
    pairs = stage_pairs(pair, lines)
    costs = machine_costs(pair, on_measure=say)
    auto_records(pairs, lines, say)
    return waterfall(pair, prompts, samplings, n_predict, passes, lines, prose=prose, say=say, pairs=pairs,
                     costs=costs), costs
