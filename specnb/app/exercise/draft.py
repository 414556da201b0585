"""Step 1: the draft, `draft(ctx_dft, smpl, id_last, n_past, n_max, n_min, p_min) -> list`, against
DraftSimple (speculation/draft_simple.py, llama.cpp's common_speculative_impl_draft_simple::draft).

The cases: five positions of a text times eight (n_max, n_min, p_min) settings, each with
DraftSimple's draft, the rows it decoded and where it left the draft's KV cache. Beside each case,
the argmax chain at its position (greedy drafting with no limit): the stopping rules applied to
that chain give the draft (`draft_rule`), and the rules applied wrongly give what each usual
mistake returns (DRAFT_MISTAKES).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .grading import call, first_diff, name_mistakes, tokens
from .models import PROMPT, draft_sampler, exercise_models, greedy_history, hold

CHAIN = 8                 # argmaxes recorded per position: past the longest n_max (6) and one more


@dataclass(frozen=True)
class Argmax:
    """One step of greedy drafting: the draft model's argmax and its probability, as the top-10
    share llama.cpp reads (cur.p[0] after smpl.sample) and over the whole vocabulary."""
    token: int
    p: float
    p_vocab: float


# ---- the formula: draft-simple's stopping rules, and the usual ways to get them wrong --------------
def draft_rule(chain, n_max, n_min, p_min, p="p", push_first=False, drop_at_n_min=False) -> list:
    """The draft over an argmax chain (common_speculative_impl_draft_simple::draft): test p_min,
    then push; stop when the draft holds n_max tokens; return [] for a draft shorter than n_min.
    The keywords describe mistakes: p="p_vocab", push_first=True, drop_at_n_min=True."""
    out = []
    for a in chain:
        if push_first:
            out.append(a.token)
        if getattr(a, p) < p_min:
            break
        if not push_first:
            out.append(a.token)
        if len(out) >= n_max:
            break
    short = len(out) <= n_min if drop_at_n_min else len(out) < n_min
    return [] if short else out


_P_MIN = ("the argmax {stop_token} at position {stop} has p = {stop_p:.3f} < p_min = {p_min}: llama.cpp "
          "stops before pushing it (test p_min, then push)")
DRAFT_MISTAKES = [
    ("you drafted past n_max = {n_max}: the draft ends when it holds n_max tokens, and its last token "
     "is not decoded", lambda c: draft_rule(c.chain, c.n_max + 1, c.n_min, c.p_min)),
    (_P_MIN + "; you pushed it first and then stopped, as llama.cpp c392e50 did",
     lambda c: draft_rule(c.chain, c.n_max, c.n_min, c.p_min, push_first=True)),
    (_P_MIN + "; you went on past it", lambda c: draft_rule(c.chain, c.n_max, c.n_min, 0.0)),
    ("llama.cpp drafted {drafted} and dropped it, shorter than n_min = {n_min}: return [] for a draft "
     "shorter than n_min", lambda c: draft_rule(c.chain, c.n_max, 0, c.p_min)),
    ("a draft of {n_want} tokens is not shorter than n_min = {n_min}: drop only a draft with "
     "len(draft) < n_min", lambda c: draft_rule(c.chain, c.n_max, c.n_min, c.p_min, drop_at_n_min=True)),
    ("compare p_min with the argmax's share of the top-10 candidates (cur.p[0] after smpl.sample), not "
     "of the whole vocabulary", lambda c: draft_rule(c.chain, c.n_max, c.n_min, c.p_min, p="p_vocab")),
]


# ---- the cases, with the reference's outputs ------------------------------------------------------
@dataclass
class DraftCase:
    n_past: int
    id_last: int
    n_max: int
    n_min: int
    p_min: float
    chain: list               # Argmax per step of greedy drafting at this position
    want: list                # DraftSimple's draft
    info: list                # DraftSimple's record of each argmax it looked at
    rows: int                 # rows DraftSimple decoded on the draft context
    last_pos: int             # the draft context's last position after it

    @property
    def where(self) -> str:
        return (f"n_past={self.n_past}, id_last={self.id_last}, n_max={self.n_max}, n_min={self.n_min}, "
                f"p_min={self.p_min}")

    def fields(self) -> dict:
        stop = next((i for i, x in enumerate(self.info) if x.stopped_by_p_min), None)
        pushed = [x.token for x in self.info if not x.stopped_by_p_min]
        f = dict(n_max=self.n_max, n_min=self.n_min, p_min=self.p_min, drafted=pushed, n_want=len(self.want))
        if stop is not None:
            f.update(stop=stop, stop_token=self.info[stop].token, stop_p=self.info[stop].p)
        return f


def _chain(probe, ctx, history: list, n_past: int) -> list:
    """The argmax chain at n_past: DraftSimple with no limit (p_min 0), then its tokens decoded in
    one batch for each one's probability over the whole vocabulary."""
    from ...run.context import Batch
    from ...speculation.impl import DraftParams
    hold(ctx, history, n_past)
    dp = DraftParams(drafting=True, n_max=-1, n_past=n_past, id_last=history[n_past], result=[])
    probe.draft([dp])
    info = list(probe.info[0])
    hold(ctx, history, n_past)
    ctx.decode(Batch.from_tokens([history[n_past]] + [x.token for x in info[:-1]], n_past, 0, "all"))
    rows = [ctx.get_logits_ith(i).astype(np.float64) for i in range(len(info))]
    return [Argmax(x.token, x.p, float(1.0 / np.exp(r - r.max()).sum())) for x, r in zip(info, rows)]


def draft_cases(pair) -> tuple[list, list, object]:
    """(history, cases, ctx): the text, the table of cases with DraftSimple's outputs, and the
    draft context the reference ran on (the learner's gets the same models)."""
    from ...speculation.draft_simple import DraftSimple
    from ...speculation.impl import DraftParams
    from .models import ctx_for
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    history = greedy_history(pair, prompt, 40)
    ctx = ctx_for(dft, pair)
    positions = sorted({min(len(prompt) - 1 + d, len(history) - 2) for d in (0, 5, 11, 18, 26)})
    probe = DraftSimple(tgt, ctx, n_max=CHAIN)
    chains = {n_past: _chain(probe, ctx, history, n_past) for n_past in positions}
    # p_min from the draft's own probabilities: the median and the upper quartile of the argmaxes
    ps = sorted(a.p for ch in chains.values() for a in ch)
    p_mid, p_hi = round(ps[len(ps) // 2], 2), round(ps[(3 * len(ps)) // 4], 2)
    settings = [(1, 0, 0.0), (3, 0, 0.0), (6, 0, 0.0), (4, 0, p_mid), (6, 0, p_hi), (4, 2, p_mid),
                (3, 3, 0.0), (5, 3, p_mid)]
    impls = {s: DraftSimple(tgt, ctx, n_max=s[0], n_min=s[1], p_min=s[2]) for s in settings}
    cases = []
    for n_past in positions:
        for s in settings:
            hold(ctx, history, n_past)
            ds = impls[s]
            dp = DraftParams(drafting=True, n_max=-1, n_past=n_past, id_last=history[n_past],
                             prompt=history[:n_past], result=[])
            e0 = ds.n_eval_draft
            ds.draft([dp])
            cases.append(DraftCase(n_past, history[n_past], *s, chains[n_past], list(dp.result),
                                   list(ds.info[0]), ds.n_eval_draft - e0, ctx.seq_pos_max(0)))
    return history, cases, ctx


# ---- the diagnosis and the report -----------------------------------------------------------------
def draft_problem(c: DraftCase, got: list) -> str:
    """What differs between the case's draft and the learner's `got` (c.want != got): the usual
    mistakes that give `got`, else the first difference."""
    mistake = name_mistakes(DRAFT_MISTAKES, got, c, c.fields())
    if mistake:
        return mistake
    want, i = c.want, first_diff(c.want, got)
    if i < min(len(want), len(got)):
        p = f" (p = {c.chain[i].p:.3f})" if i < len(c.chain) else ""
        return (f"position {i}: expected {want[i]}{p}, got {got[i]}; the draft takes the argmax of "
                f"the draft model's candidates (cur.ids[0] after smpl.sample) at each step, and "
                f"decodes draft[{i - 1}] at n_past + {i}" if i else
                f"position 0: expected {want[0]}{p}, got {got[0]}; decode id_last at n_past (logits on) "
                f"and take the argmax of the draft model's candidates")
    if len(got) > len(want):
        return f"you returned {len(got) - len(want)} token(s) too many: {got[len(want):]} after position {i - 1}"
    j = len(got)
    why = (f"; that argmax has p = {c.chain[j].p:.3f} >= p_min = {c.p_min} among the top-10 candidates (p "
           "is cur.p[0] after smpl.sample, the argmax's share of the top-10, not of the whole vocabulary)"
           if 0 < c.p_min <= c.chain[j].p else "")
    return f"your draft stops after {j} token(s); expected {want[j]} at position {j} (n_max = {c.n_max}){why}"


def _cache_problem(c: DraftCase, rows: int, last_pos: int) -> str:
    if rows != c.rows:
        return (f"the draft {c.want} is right, but your function decoded {rows} rows on ctx_dft; llama.cpp "
                f"decodes {c.rows}: the seed row (id_last @ n_past), then one row per drafted token it "
                f"drafts on from (the token that reaches n_max is not decoded)")
    if last_pos != c.last_pos:
        return (f"the draft {c.want} is right, but the draft context's last position is {last_pos}, "
                f"llama.cpp's is {c.last_pos} (leave the rows draft() decoded; the round rolls them back)")
    return ""


def _report(cases: list) -> str:
    stops = {"n_max": 0, "p_min": 0, "n_min": 0}
    for c in cases:
        pushed = [x for x in c.info if not x.stopped_by_p_min]
        if c.info and c.info[-1].stopped_by_p_min:
            stops["p_min"] += 1
        elif len(pushed) >= c.n_max:
            stops["n_max"] += 1
        stops["n_min"] += len(pushed) < c.n_min
    return (f"{len(cases)} drafts equal DraftSimple's (n_max 1-{max(c.n_max for c in cases)}, n_min "
            f"0-{max(c.n_min for c in cases)}, p_min 0-{max(c.p_min for c in cases)}): {stops['n_max']} "
            f"stopped by n_max, {stops['p_min']} by p_min, {stops['n_min']} dropped under n_min")


def check_draft(my_draft, models="tiny") -> None:
    """Step 1: `my_draft(ctx_dft, smpl, id_last, n_past, n_max, n_min, p_min) -> list` against
    DraftSimple, at five positions of a text and eight (n_max, n_min, p_min) settings.

    ctx_dft holds [0, n_past) of sequence 0; smpl is `draft_sampler()`. Compared: the draft, then
    the rows your function decoded on ctx_dft and where it left the draft's KV cache (llama.cpp
    decodes the seed row and each drafted token it drafts on from, and rolls back later)."""
    name = "check_draft"
    pair = exercise_models(models)
    history, cases, ctx = draft_cases(pair)
    smpl = draft_sampler()
    for c in cases:
        hold(ctx, history, c.n_past)
        m0 = ctx.n_eval
        got = call(name, c.where, my_draft, ctx, smpl, c.id_last, c.n_past, c.n_max, c.n_min, c.p_min,
                   ctx_dft=ctx, n_past=c.n_past)
        got = tokens(got, "the draft", name)
        problem = (f"{draft_problem(c, got)} (expected draft {c.want}, got {got})" if got != c.want
                   else _cache_problem(c, ctx.n_eval - m0, ctx.seq_pos_max(0)))
        if problem:
            raise AssertionError(f"{name}: {c.where}: {problem}")
    print(f"{name}: passed: {_report(cases)}")
