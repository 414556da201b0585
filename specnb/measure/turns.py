"""Plain decoding against speculative configurations, the runs taken in turn: the one harness.

A speed-up on a shared machine is only worth as much as its spread, so every comparison the
demo, `bench --spec`, the policies table, the sweeps and the notebooks make runs here the same
way: `passes` passes, each running plain decoding and every configuration once, in an order
rotated by one each pass (a slow spell falls on all of them alike), and a configuration's
speed-up is the median of its paired ratios (its run's speed over the same pass's plain run)
with their interval (measure/verdict.py).

    plain_run(pair, ids, sampler, n)           a Run of plain decoding (run.generate)
    spec_run(pair, ids, sampler, n, params)    a Run of the speculative loop, with its events
    take_turns({name: fn}, passes)             name -> [Run per pass]
    compare(pair, ids, sampler, n, params)     a Comparison: plain against one configuration
    compare_all(pair, ids, sampler, n, {name: params})   name -> Comparison, one plain run a pass
    Comparison.of(label, sampling, plains, specs)   the same from runs already taken

`Comparison.by_impl()` splits a run's rounds by the impl that drafted them (the chain's n-gram
lookup, its draft model, and the rounds nobody drafted): what each verified and committed, and
what its rounds cost in plain decoding's steps, so that a chain's result is read off its parts.

A Comparison also carries what the loop's own rounds measured, per pair of runs: acceptance
(α: accepted over examined), tokens per round, and the loop's draft cost c_loop (drafting and
process() per token the draft model drafted, over plain decoding's time per token: the catch-up
rows and the bookkeeping included, so it is not the costs record's c, one step over one step).
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from .cost import alpha_from_counts
from .stats import examined_counts
from .verdict import Interval, interval, paired_ratios, said


def chat_ids(vocab, text: str, chat: bool) -> list:
    """The prompt's token ids, wrapped as one user message in the model's chat template when `chat`."""
    if chat:
        text = vocab.user_message(text)
    return vocab.tokenize(text)


@dataclass(frozen=True)
class Run:
    """One timed run: plain decoding (no events), or the speculative loop with what it did."""
    tokens: tuple
    text: str
    t_gen_s: float
    busy: float | None = None             # the share of the CPU other processes took during it
    events: tuple = ()                    # speculative: the loop's RoundEvents
    n_drafted: int = 0
    n_accept: int = 0
    n_rounds: int = 0
    stats: dict = field(default_factory=dict)        # the chain's main statistics
    draft_len: dict = field(default_factory=dict)    # the draft-length policy's statistics
    decode_log: tuple = ()                # the draft model's decodes in the rounds: (rows, seconds)
    t_decode_s: float = 0.0               # both models' decode time in the rounds (the prompt's excluded)

    @property
    def tok_s(self) -> float:
        return len(self.tokens) / self.t_gen_s if self.t_gen_s > 0 else 0.0

    @property
    def s_per_token(self) -> float:
        return self.t_gen_s / max(len(self.tokens), 1)


def _timed(fn):
    from .contention import OtherLoad
    with OtherLoad() as load:
        out = fn()
    return out, load.share


def plain_run(pair, ids, sp, n_predict: int):
    """A function running plain decoding of the pair's target once -> Run."""
    from ..run.generate import generate
    from ..run.sampling import Sampler

    def run():
        g, busy = _timed(lambda: generate(pair.ctx_tgt, Sampler(sp, pair.target.n_vocab), ids, n_predict))
        return Run(tuple(g.tokens), g.text, g.t_gen_s, busy)
    return run


def auto_prior(pair, params):
    """The costs prior `auto` starts from (measure/costs.Costs.prior): the pair's recorded costs
    with the line's draft head, when `params` chooses lengths with auto and a record is there."""
    if params.schedule != "auto" or pair.ctx_dft is None or not params.needs_draft_model():
        return None
    from .costs import recorded_costs
    rec = recorded_costs(pair, params.draft_vocab or None)
    return None if rec is None else rec.prior()


def spec_run(pair, ids, sp, n_predict: int, params):
    """A function running the speculative loop once with `params` (a SpecParams) -> Run. The draft
    model's decodes in the rounds (not its prompt's) are logged for c's parts. `auto` starts from
    the pair's costs record where one is recorded (auto_prior)."""
    from ..speculation.loop import SpeculativeLoop
    prior = auto_prior(pair, params)

    def run():
        ctx_dft = pair.ctx_dft if params.needs_draft_model() else None   # n-gram types need none
        loop = SpeculativeLoop(pair.ctx_tgt, ctx_dft, ids, n_predict, sp, params, costs_prior=prior)
        ctxs = [c for c in (pair.ctx_tgt, ctx_dft) if c is not None]
        t_dec = sum(c.t_decode for c in ctxs)
        events, log = [], ()
        if ctx_dft is not None:
            loop.prefill()
            saved, ctx_dft.decode_log = ctx_dft.decode_log, []
            try:
                r, busy = _timed(lambda: loop.run(on_round=events.append)[0])
            finally:
                log, ctx_dft.decode_log = tuple(ctx_dft.decode_log), saved
        else:
            r, busy = _timed(lambda: loop.run(on_round=events.append)[0])
        return Run(tuple(r.tokens), r.text, r.t_gen_s, busy, tuple(events), r.n_drafted, r.n_accept,
                   r.n_rounds, loop.chain.main_stats(), loop.policy.stats(), log,
                   sum(c.t_decode for c in ctxs) - t_dec - loop.t_prompt)
    return run


def warm_runs(runs) -> None:
    """Run each speculative configuration once for a few tokens, untimed: (pair, ids, sampler, params)
    each. First-use costs (the draft vocabulary's ranking, a batch size's first call) stay out of
    the timed runs that follow."""
    for pair, ids, sp, params in runs:
        spec_run(pair, ids, sp, 4, params)()


def take_turns(runs: dict, passes: int = 3, before_pass=None) -> dict:
    """Run each of `runs` (name -> a function returning a Run) once per pass, `passes` passes, the
    order rotated by one each pass. before_pass(i), if given, is called before pass i.
    -> name -> [its Run of each pass]."""
    from ..errors import check_param
    check_param(isinstance(passes, int) and passes >= 1, "passes", passes, "an integer >= 1")
    names = list(runs)
    out: dict = {n: [] for n in names}
    for i in range(passes):
        if before_pass is not None:
            before_pass(i)
        for n in names[i % len(names):] + names[:i % len(names)]:
            out[n].append(runs[n]())
    return out


# ---- what a pair of runs measured ----------------------------------------------------------------
def _drafted_by_model(ev) -> int:
    # tokens the draft model drafted in a round (a replay re-verifies, it does not draft)
    s = ev.slot
    return len(s.draft) if s.impl == "draft-simple" and not s.replay else 0


def c_parts(c_loop: float | None, log, n_dft: int, u: float) -> dict | None:
    """The loop's draft cost c_loop (n_dft drafted tokens, plain decoding's time per token u) in
    three parts, from the draft model's decodes in the rounds (`log`: (rows, seconds) each): "steps",
    one one-row step (the median of the one-row decodes) per decode; "rows", what its batches cost
    beyond that (the rows it catches up: after a round whose draft was all accepted, the last draft
    token beside the target's new one); "other", the rest of the drafting time (sampling,
    bookkeeping). They add up to c_loop. None without a one-row decode to price a step."""
    one = [dt for n, dt in log or () if n == 1]
    if c_loop is None or not one or not n_dft or not u:
        return None
    step = statistics.median(one)
    t_dec = sum(dt for _, dt in log)
    steps = len(log) * step / n_dft / u
    return {"steps": steps, "rows": t_dec / n_dft / u - steps, "other": c_loop - t_dec / n_dft / u,
            "step_ms": 1e3 * step, "decodes": dict(sorted(Counter(n for n, _ in log).items()))}


@dataclass(frozen=True)
class LoopCosts:
    """What one speculative run's rounds cost, against its pass's plain run (in plain steps)."""
    c_loop: float | None           # drafting and process() per model-drafted token
    verify_row: float | None       # the verification batch beyond one plain step, per extra row
    tokens_per_round: float
    rows_per_round: float
    t_plain_token_ms: float
    t_verify_ms: float             # per round
    t_draft_ms: float              # per round, drafting and process()
    t_round_ms: float
    parts: dict | None             # c_parts

    @classmethod
    def of(cls, plain: Run, spec: Run) -> "LoopCosts":
        evs = spec.events
        n = max(len(evs), 1)
        u = plain.s_per_token
        t_draft = sum(ev.t_draft + ev.t_process for ev in evs)
        n_dft = sum(_drafted_by_model(ev) for ev in evs)
        drafted = [ev for ev in evs if ev.slot.draft]
        extra = sum(len(ev.slot.draft) for ev in drafted)
        c = t_draft / n_dft / u if n_dft and u else None
        return cls(c_loop=c,
                   verify_row=((sum(ev.t_verify for ev in drafted) - u * len(drafted)) / extra / u
                               if extra and u else None),
                   tokens_per_round=len(spec.tokens) / n, rows_per_round=sum(1 + len(ev.slot.draft) for ev in evs) / n,
                   t_plain_token_ms=1e3 * u, t_verify_ms=1e3 * sum(ev.t_verify for ev in evs) / n,
                   t_draft_ms=1e3 * t_draft / n, t_round_ms=1e3 * sum(ev.t_round for ev in evs) / n,
                   parts=c_parts(c, spec.decode_log, n_dft, u))


def median_parts(parts) -> dict | None:
    """Each c_parts key's median over the parts given (None entries skipped); None without any."""
    parts = [p for p in parts if p]
    return {k: statistics.median(p[k] for p in parts) for k in ("steps", "rows", "other", "step_ms")} if parts else None


def median_known(xs):
    """The median of the values that are not None; None when there are none (a run's loop costs
    may be missing, e.g. a lookup that never drafted)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


@dataclass(frozen=True)
class ImplRounds:
    """The rounds one impl drafted over a comparison's passes (impl "": the rounds nobody
    drafted, each a plain step of one row): the rows they verified, the tokens they drafted,
    accepted and committed, and their time in plain decoding's time per token (the passes' median),
    with the part of it the speculators' process() took (a draft model decoding the round's
    verification batch too, whichever impl drafted it)."""
    impl: str
    rounds: int
    rows: int
    drafted: int
    accepted: int
    committed: int
    steps: float
    process_steps: float

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens committed per plain step of time: above 1, these rounds beat plain decoding."""
        return self.committed / self.steps if self.steps > 0 else None


def impl_rounds(pairs) -> dict:
    """impl -> ImplRounds over (plain Run, speculative Run) pairs, in the order impls first drafted
    ("" last): each round's time (t_round, t_process) over plain decoding's time per token, the
    median over the passes (one slow plain run on a shared machine would otherwise shrink every
    round of its pass)."""
    pairs = list(pairs)
    u = statistics.median(p.s_per_token for p, _ in pairs) if pairs else 0.0
    tot: dict = {}
    for _, spec in pairs:
        for ev in spec.events:
            s = ev.slot
            impl = s.impl if s.draft and not s.replay else ""
            t = tot.setdefault(impl, [0, 0, 0, 0, 0, 0.0, 0.0])
            t[0] += 1
            t[1] += 1 + len(s.draft)
            t[2] += len(s.draft) if impl else 0
            t[3] += s.n_accepted if impl else 0
            t[4] += len(s.committed)
            t[5] += ev.t_round / u if u else 0.0
            t[6] += ev.t_process / u if u else 0.0
    order = [k for k in tot if k] + [k for k in tot if not k]
    return {k: ImplRounds(k, *tot[k]) for k in order}


@dataclass(frozen=True)
class Comparison:
    """Plain decoding against one configuration on one prompt and sampling, over several passes."""
    label: str
    sampling: str
    plain: tuple                    # Run per pass
    spec: tuple                     # Run per pass (the same passes)

    @classmethod
    def of(cls, label: str, sampling: str, plain, spec) -> "Comparison":
        return cls(label, sampling, tuple(plain), tuple(spec))

    @property
    def ratios(self) -> list:
        """Each pass's speed-up: plain decoding's time per token over the configuration's."""
        return paired_ratios([p.s_per_token for p in self.plain], [s.s_per_token for s in self.spec])

    @property
    def speedup(self) -> Interval:
        return interval(self.ratios)

    @property
    def identical(self) -> bool:
        """Every speculative output was plain decoding's, token for token."""
        return all(s.tokens == p.tokens for p, s in zip(self.plain, self.spec))

    @property
    def examined(self) -> tuple:
        """(accepted, examined) draft tokens over every pass."""
        counts = [examined_counts(s.events) for s in self.spec]
        return sum(a for a, _ in counts), sum(e for _, e in counts)

    @property
    def alpha(self) -> float | None:
        """The maximum-likelihood acceptance per position: accepted over examined (None: no draft)."""
        a, e = self.examined
        return alpha_from_counts(a, e) if e else None

    @property
    def accept_rate(self) -> float | None:
        d = sum(s.n_drafted for s in self.spec)
        return sum(s.n_accept for s in self.spec) / d if d else None

    def by_impl(self) -> dict:
        """impl -> ImplRounds over every pass (impl_rounds)."""
        return impl_rounds(zip(self.plain, self.spec))

    def coverage(self, impl: str | None = None) -> float:
        """The share of rounds that drafted (by `impl` only, when named), over every pass."""
        parts = self.by_impl()
        n = sum(r.rounds for r in parts.values())
        k = sum(r.rounds for name, r in parts.items() if name and (impl is None or name == impl))
        return k / n if n else 0.0

    @property
    def loop_costs(self) -> list:
        return [LoopCosts.of(p, s) for p, s in zip(self.plain, self.spec)]

    def loop_median(self, name: str):
        """The median over the passes of one LoopCosts field."""
        return median_known(getattr(x, name) for x in self.loop_costs)

    @property
    def busy(self) -> float | None:
        b = [r.busy for r in self.plain + self.spec if r.busy is not None]
        return max(b) if b else None

    @property
    def plain_tok_s(self) -> float:
        return statistics.median(r.tok_s for r in self.plain)

    @property
    def spec_tok_s(self) -> float:
        return statistics.median(r.tok_s for r in self.spec)

    def said(self) -> str:
        """'wins (1.43x; 1.38-1.49x over 3 pairs)'"""
        return said(self.speedup)

    def c_parts(self) -> dict | None:
        """The median over the passes of c_loop's parts (c_parts), None where no pass has them."""
        return median_parts(x.parts for x in self.loop_costs)

    def as_json(self) -> dict:
        return {"prompt": self.label, "sampling": self.sampling, "speedup": self.speedup.as_json(),
                "ratios": self.ratios, "identical": self.identical, "alpha": self.alpha,
                "accept_rate": self.accept_rate, "plain_tok_s": self.plain_tok_s, "spec_tok_s": self.spec_tok_s,
                "c_loop": self.loop_median("c_loop"), "verify_row": self.loop_median("verify_row"),
                "tokens_per_round": self.loop_median("tokens_per_round"), "busy": self.busy,
                "c_parts": self.c_parts(), "draft_len": self.spec[-1].draft_len if self.spec else None}


PLAIN = "plain"


def compare_all(pair, ids, sp, n_predict: int, configs: dict, passes: int = 3, label: str = "",
                sampling: str = "", before_pass=None) -> dict:
    """Plain decoding against each of `configs` (name -> a SpecParams, or a draft-max for
    SpecParams(n_max=...)) on one prompt: plain decoding and every configuration take turns,
    `passes` passes, each configuration paired with its pass's plain run (each configuration first
    run once for a few tokens, untimed: warm_runs). -> name -> Comparison."""
    from ..errors import check_param
    from ..speculation.params import SpecParams
    check_param(bool(configs) and PLAIN not in configs, "configs", list(configs or ()),
                f"one or more configurations, none named {PLAIN!r}")
    fns = {PLAIN: plain_run(pair, ids, sp, n_predict)}
    warm = []
    for name, params in configs.items():
        params = params if isinstance(params, SpecParams) else SpecParams(n_max=params)
        fns[name] = spec_run(pair, ids, sp, n_predict, params)
        warm.append((pair, ids, sp, params))
    warm_runs(warm)
    runs = take_turns(fns, passes, before_pass)
    return {name: Comparison.of(label, sampling, runs[PLAIN], runs[name]) for name in configs}


def compare(pair, ids, sp, n_predict: int, params, passes: int = 3, label: str = "", sampling: str = "",
            before_pass=None) -> Comparison:
    """Plain decoding against speculative decoding with `params` (a SpecParams, or a draft-max for
    SpecParams(n_max=...)) on one prompt, `passes` passes taken in turn."""
    return compare_all(pair, ids, sp, n_predict, {"spec": params}, passes, label, sampling, before_pass)["spec"]
