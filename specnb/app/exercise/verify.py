"""Step 2: verification, `sample_and_accept_n(smpl, ctx_tgt, draft) -> list`, against specnb's
sample_and_accept_n (run/sampling.py, llama.cpp's common_sampler_sample_and_accept_n).

The cases: three target samplers (greedy, greedy with a repeat penalty, temperature 0.8) at three
positions, each with an empty draft, the target's own next 1-4 tokens (every one accepted, then the
bonus) and the same 4 tokens with one changed at each position. Each case holds the reference's ids,
its sampler afterwards, and the token a walk that went on after the rejection would sample next.
"""
from __future__ import annotations

from dataclasses import dataclass

from .grading import call, first_diff, name_mistakes, tokens
from .models import PROMPT, ctx_for, exercise_models, greedy_history, hold


@dataclass
class Verification:
    """One verification: its draft and the ids the target's samples give (ids[-1] is the target's
    own token; len(ids) - 1 draft tokens were accepted)."""
    draft: list
    want: list
    extra: int | None = None      # the next row's sample after a rejection, where it is known

    @property
    def n_acc(self) -> int:
        return len(self.want) - 1

    @property
    def full(self) -> bool:
        return self.n_acc == len(self.draft)

    def fields(self) -> dict:
        return dict(n_draft=len(self.draft), n_acc=self.n_acc, last=self.want[-1],
                    rejected=None if self.full else self.draft[self.n_acc])


# ---- the walk's rules, and the usual ways to get them wrong ---------------------------------------
# Row i of the last decode predicts draft[i]: sample it and accept the sample; go on while the sample
# equals draft[i]; after a full match sample row len(draft), the bonus. So ids = the accepted draft
# tokens + the target's own token, and len(ids) >= 1.
IDS_MISTAKES = [
    ("no bonus token: with an empty draft, row 0 is sampled once and its token ({last}) is the one id",
     lambda v: [] if not v.draft else None),
    ("no bonus token: all {n_draft} draft tokens matched, so sample row {n_draft} once more and append "
     "its token ({last})", lambda v: v.want[:-1] if v.full and v.draft else None),
    ("one token too many: at row {n_acc} the target sampled {last}, not the draft's {rejected}; that "
     "sample ends the walk", lambda v: v.want + [v.extra] if not v.full and v.extra is not None else None),
    ("position {n_acc}: you returned the draft's token {rejected}; the target sampled {last} there, and "
     "its own sample replaces the rejected draft token", lambda v: v.want[:-1] + [v.draft[v.n_acc]]
     if not v.full else None),
]


def ids_problem(v: Verification, got: list) -> str:
    """What differs between the reference's ids and the learner's `got` (v.want != got)."""
    mistake = name_mistakes(IDS_MISTAKES, got, v, v.fields())
    if mistake:
        return mistake
    want, i = v.want, first_diff(v.want, got)
    if i < min(len(want), len(got)):
        return (f"position {i}: expected {want[i]}, got {got[i]} (row i of the last decode predicts "
                f"draft[i]; sample row i with the target's sampler, then accept the token)")
    if len(got) < len(want):
        return f"your ids stop after {len(got)} token(s); expected {want[len(got)]} at position {len(got)}"
    return (f"you returned {len(got) - len(want)} token(s) too many: {got[len(want):]} (the target's own "
            f"sample at row {v.n_acc} ends the walk)")


def sampler_problem(s_ref, s_mine, base_len: int) -> str:
    """'' when both samplers are in the same state (window of accepted tokens, random numbers)."""
    want, got = list(s_ref.prev)[base_len:], list(s_mine.prev)[base_len:]
    if want != got:
        return (f"the sampler accepted {got}, expected {want}: call smpl.accept(id) once for each "
                f"sampled id, the bonus token included (the penalties and the next rows depend on it)")
    if s_ref.rng.u32() != s_mine.rng.u32():
        return ("the ids are right, but the sampler drew a different number of random numbers: sample "
                "each row once, in order, and no row after the first mismatch")
    return ""


# ---- the cases, with the reference's outputs ------------------------------------------------------
SAMPLERS = {"greedy": dict(temp=0.0, seed=1),
            "greedy, repeat penalty 1.5": dict(temp=0.0, penalty_repeat=1.5, penalty_last_n=64, seed=1),
            "temperature 0.8": dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)}


@dataclass
class VerifyCase(Verification):
    sampler: str = ""
    n_past: int = 0
    id_last: int = 0
    base: object = None           # the target's sampler before the walk (the history accepted)
    after: object = None          # the reference's sampler after it

    @property
    def where(self) -> str:
        return f"sampler {self.sampler}, n_past={self.n_past}, id_last={self.id_last}, draft={self.draft}"

    def decode(self, ctx, history: list) -> None:
        """The verification batch: [id_last, draft...] at n_past, logits on every row."""
        from ...run.context import Batch
        hold(ctx, history, self.n_past)
        ctx.decode(Batch.from_tokens([self.id_last] + self.draft, self.n_past, 0, "all"))


def _next_tokens(ctx, smpl, history: list, n_past: int, n: int) -> list:
    """The next n tokens plain decoding draws after history[:n_past + 1] with (a copy of) smpl."""
    from ...run.context import Batch
    hold(ctx, history, n_past)
    tok, out = history[n_past], []
    for i in range(n):
        ctx.decode(Batch().add(tok, n_past + i, 0, True))
        tok = smpl.sample(ctx, 0)
        smpl.accept(tok)
        out.append(tok)
    return out


def verify_cases(pair) -> tuple[list, list, object]:
    """(history, cases, ctx): the text, the table of cases with sample_and_accept_n's outputs, and
    the target context they decode on."""
    from ...run.sampling import Sampler, SamplerParams, sample_and_accept_n
    tgt = pair[0]
    prompt = tgt.vocab.tokenize(PROMPT)
    history = greedy_history(pair, prompt, 30)
    ctx = ctx_for(tgt, pair)
    cases = []
    for sname, kw in SAMPLERS.items():
        for n_past in sorted({min(len(prompt) - 1 + d, len(history) - 1) for d in (0, 7, 15)}):
            base = Sampler(SamplerParams(**kw))
            for t in history[:n_past]:
                base.accept(t)
            own = _next_tokens(ctx, base.clone(), history, n_past, 4)
            wrong = [own[:j] + [(own[j] + 1) % tgt.n_vocab] + own[j + 1:] for j in range(4)]
            for draft in [[]] + [own[:k] for k in range(1, 5)] + wrong:
                v = VerifyCase(draft, [], sampler=sname, n_past=n_past, id_last=history[n_past], base=base)
                v.decode(ctx, history)
                v.after = base.clone()
                v.want = sample_and_accept_n(v.after, ctx, draft)
                if not v.full:
                    v.extra = v.after.clone().sample(ctx, len(v.want))
                cases.append(v)
    return history, cases, ctx


def check_sample_and_accept_n(my_fn, models="tiny") -> None:
    """Step 2: `my_fn(smpl, ctx_tgt, draft) -> list` against specnb's sample_and_accept_n.

    The last decode of ctx_tgt holds [id_last, draft...] with logits on every row. Three target
    samplers (greedy, greedy with a repeat penalty, temperature 0.8) at three positions, each with
    an empty draft, the target's own next 1-4 tokens (every one accepted, then the bonus) and the
    same 4 tokens with one changed at each position. Compared: the ids, then the sampler's state."""
    name = "check_sample_and_accept_n"
    history, cases, ctx = verify_cases(exercise_models(models))
    for v in cases:
        v.decode(ctx, history)
        s_mine, d0 = v.base.clone(), ctx.n_decode
        got = tokens(call(name, v.where, my_fn, s_mine, ctx, list(v.draft)), "the ids", name)
        if ctx.n_decode != d0:
            problem = (f"your function decoded {ctx.n_decode - d0} batch(es); it only samples the rows of "
                       f"the last decode (rows 0..{len(v.draft)})")
        elif got != v.want:
            problem = f"{ids_problem(v, got)} (expected ids {v.want}, got {got})"
        else:
            problem = sampler_problem(v.after, s_mine, len(v.base.prev))
        if problem:
            raise AssertionError(f"{name}: {v.where}: {problem}")
    n_full = sum(v.full for v in cases)
    print(f"{name}: passed: {len(cases)} verifications equal sample_and_accept_n's ({', '.join(SAMPLERS)}): "
          f"{n_full} full acceptances with a bonus token, {len(cases) - n_full} stopped at a rejection")
