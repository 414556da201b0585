"""Step 3: one round, `speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn) ->
(draft, ids, n_past, id_last)`, against SpeculativeLoop, round by round.

The cases: SpeculativeLoop's rounds in three settings (the round's n_past and id_last, its draft and
ids), run first; then the learner's rounds from the same start, each compared with its case: what
the round returned, and what it left in both KV caches (exactly [0, n_past), the committed tokens
in place). A round's bookkeeping and each cache's last position have their catalogues of mistakes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .grading import call, name_mistakes, unpack_round
from .models import N_CTX, PROMPT, ctx_for, draft_sampler, exercise_models, prefilled
from .verify import Verification, ids_problem

ROUND_CONFIGS = (
    ("greedy, n_max=3", dict(temp=0.0, seed=1), dict(n_max=3, n_min=0, p_min=0.0)),
    ("temperature 0.8, n_max=4, p_min=0.5", dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=5),
     dict(n_max=4, n_min=0, p_min=0.5)),
    ("greedy with repeat penalty 1.3, n_max=5, n_min=2, p_min=0.3",
     dict(temp=0.0, penalty_repeat=1.3, penalty_last_n=64, seed=1), dict(n_max=5, n_min=2, p_min=0.3)),
)


@dataclass
class RoundCase:
    """A round of the reference: where it started, its draft and ids (and whether the loop stopped
    there, at an end-of-generation token)."""
    n_past0: int
    id_last0: int
    draft: list
    ids: list
    done: bool = False
    side: str = "target"          # which KV cache a KV_MISTAKES entry is asked about

    @property
    def n_past(self) -> int:      # after the round
        return self.n_past0 + len(self.ids)

    def fields(self, **more) -> dict:
        cname = "ctx_tgt" if self.side == "target" else "ctx_dft"
        return dict(n_past=self.n_past, n_past0=self.n_past0, cname=cname, **more)


# ---- a round's bookkeeping, and the usual ways to get it wrong ------------------------------------
# n_past += len(ids): id_last's row and the accepted draft tokens are committed; id_last = ids[-1],
# sampled but not yet decoded; both caches hold exactly [0, n_past) (seq_rm(0, n_past, -1) after the
# round drops the rejected rows; the draft replays the verification batch first).
N_PAST_MISTAKES = [
    ("id_last's row counts too: it sat at n_past, so n_past += 1 for it, then += the accepted draft "
     "tokens (len(ids) - 1), n_past += len(ids) in all", lambda r: r.n_past - 1),
    ("advance by the committed tokens (len(ids)), not by the verification batch's rows",
     lambda r: r.n_past0 + len(r.draft) + 1),
]
ID_LAST_MISTAKES = [
    ("the first id, not the last", lambda r: r.ids[0]),
    ("the last draft token, not the target's own sample", lambda r: r.draft[-1]),
]
KV_MISTAKES = [                   # the cache's last position each mistake leaves (expected: n_past - 1)
    ("it still holds positions {n_past}..{last}: seq_rm({cname}, 0, n_past, -1) with the new n_past = "
     "{n_past} drops the rejected rows", lambda r: r.n_past0 + len(r.draft)),
    ("it still holds position {n_past}: seq_rm(0, p0, -1) drops p0 and later, so remove from the new "
     "n_past itself, not from n_past + 1", lambda r: r.n_past),
    ("seq_rm from the new n_past = {n_past}, not from the round's first one ({n_past0}): committed rows "
     "were lost", lambda r: r.n_past0 - 1 if r.side == "target" else None),
    ("replay the verification batch on the draft context (decode the same rows, no logits), as "
     "common_speculative_process does", lambda r: r.n_past0 - 1 if r.side == "draft" else None),
]


def returned_problem(r: RoundCase, draft, ids, n_past, id_last) -> str:
    """'' when what the round returned is right, given that its draft is."""
    if ids != r.ids:
        v = Verification(list(r.draft), list(r.ids))
        return (f"{ids_problem(v, ids)} (draft {draft}, expected ids {r.ids}, got {ids}; run "
                f"check_sample_and_accept_n first)")
    if n_past != r.n_past:
        why = (name_mistakes(N_PAST_MISTAKES, n_past, r, r.fields()) or
               "n_past += len(ids): id_last and the accepted draft tokens are now in the KV cache")
        return f"n_past after the round: expected {r.n_past}, got {n_past} ({why})"
    if id_last != ids[-1]:
        why = name_mistakes(ID_LAST_MISTAKES, id_last, r, {}) or "another token"
        return (f"id_last after the round: expected {ids[-1]} (the last id, sampled but not yet decoded), "
                f"got {id_last} ({why})")
    return ""


def cache_problem(r: RoundCase, ctx, side: str) -> str:
    """'' when ctx holds exactly [0, n_past) with the round's committed tokens in place."""
    r.side, last = side, ctx.seq_pos_max(0)
    if last != r.n_past - 1:
        why = name_mistakes(KV_MISTAKES, last, r, r.fields(last=last)) or (
            f"it still holds positions {r.n_past}..{last}: seq_rm drops the rejected rows" if last >= r.n_past
            else "committed rows were lost")
        return (f"the {side} KV cache must hold exactly [0, n_past) = [0, {r.n_past}) after the round; "
                f"its last position is {last} ({why})")
    for p, tok in zip(range(r.n_past0, r.n_past), [r.id_last0] + r.ids[:-1]):
        if not ctx.holds(0, p, tok):
            return (f"the {side} KV cache's position {p} does not hold the committed token {tok} (id_last "
                    f"at n_past, then the accepted ids)")
    return ""


def round_problem(r: RoundCase, out, calls: list, ctx_tgt, ctx_dft, name: str, where: str) -> str:
    """Everything one round of the learner's gets compared on, against its case."""
    draft, ids, n_past, id_last = unpack_round(out, name, where)
    if calls != [(r.id_last0, r.n_past0)]:
        return (f"call draft_fn(id_last, n_past) once per round, with this round's id_last and n_past "
                f"({r.id_last0}, {r.n_past0}); your round called it as {calls}")
    if draft != r.draft:
        return (f"the draft differs: expected {r.draft}, got {draft} (return the draft draft_fn gave; "
                f"run check_draft first)")
    problem = returned_problem(r, draft, ids, n_past, id_last)
    if problem or r.done:         # at an end-of-generation token the loop commits up to it and stops
        return problem
    return cache_problem(r, ctx_tgt, "target") or cache_problem(r, ctx_dft, "draft")


# ---- the cases, with the reference's outputs ------------------------------------------------------
def reference_rounds(pair, prompt: list, loop_args: dict, n_rounds: int, with_draft: bool = True) -> list:
    """SpeculativeLoop's first n_rounds rounds (fewer if it stops), as RoundCases."""
    from ...speculation.loop import SpeculativeLoop
    cd = ctx_for(pair[1], pair) if with_draft else None
    loop = SpeculativeLoop(ctx_for(pair[0], pair), cd, prompt, N_CTX, penalize_prompt=False,
                           stop_rule="c392e50", **loop_args)
    cases = []
    while len(cases) < n_rounds and not loop.slots[0].done:
        rec = loop.step().slots[0]
        cases.append(RoundCase(rec.n_past, rec.id_last, list(rec.draft), list(rec.ids), loop.slots[0].done))
    return cases


def run_rounds(name: str, label: str, cases: list, my_round, pair, prompt, smpl, draft_with) -> None:
    """The learner's rounds from the prompt, each compared with its case; draft_with(ctx_dft)
    gives the round's draft_fn."""
    ct, cd, n_past, id_last = prefilled(pair, prompt)
    calls = []
    inner = draft_with(cd)

    def draft_fn(id_last_, n_past_):
        calls.append((id_last_, n_past_))
        return inner(id_last_, n_past_)
    for k, r in enumerate(cases):
        where = f"{label}, round {k} (n_past={r.n_past0}, id_last={r.id_last0})"
        calls.clear()
        out = call(name, where, my_round, ct, cd, smpl, r.id_last0, r.n_past0, draft_fn,
                   ctx_tgt=ct, ctx_dft=cd, n_past=r.n_past0)
        problem = round_problem(r, out, calls, ct, cd, name, where)
        if problem:
            raise AssertionError(f"{name}: {where}: {problem}")


def kinds(cases: list) -> dict:
    out = {"full": 0, "partial": 0, "none": 0, "empty": 0}
    for r in cases:
        a = len(r.ids) - 1
        out["empty" if not r.draft else "full" if a == len(r.draft) else "partial" if a else "none"] += 1
    return out


def check_round(my_round, my_draft, models="tiny", n_rounds: int = 12) -> None:
    """Step 3: `my_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn) -> (draft, ids, n_past,
    id_last)` against SpeculativeLoop, round by round, in three settings.

    draft_fn(id_last, n_past) is your step-1 function with its settings bound. Both contexts hold
    [0, n_past) when a round starts (the check decodes the prompt but its last token; id_last is
    the prompt's last token). Compared after each round: the draft, the ids, n_past, id_last, and
    both KV caches (exactly [0, n_past), the committed tokens in place)."""
    from ...run.sampling import Sampler, SamplerParams
    from ...speculation.params import SpecParams
    name = "check_round"
    pair = exercise_models(models)
    prompt = pair[0].vocab.tokenize(PROMPT)
    seen = []
    for label, spk, dk in ROUND_CONFIGS:
        cases = reference_rounds(pair, prompt, dict(sampler_params=SamplerParams(**spk),
                                                    params=SpecParams(**dk)), n_rounds)
        smpl_dft = draft_sampler()

        def draft_with(cd, dk=dk, smpl_dft=smpl_dft):
            return lambda i, n: my_draft(cd, smpl_dft, i, n, dk["n_max"], dk["n_min"], dk["p_min"])
        run_rounds(name, label, cases, my_round, pair, prompt, Sampler(SamplerParams(**spk)), draft_with)
        seen += cases
    k = kinds(seen)
    print(f"{name}: passed: {len(seen)} rounds equal SpeculativeLoop's in {len(ROUND_CONFIGS)} settings "
          f"(draft, ids, n_past, id_last, both KV caches): {k['full']} fully accepted drafts, "
          f"{k['partial']} partly, {k['none']} rejected at once, {k['empty']} empty drafts")
