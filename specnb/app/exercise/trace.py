"""Step 3 against llama.cpp itself: the recorded llama-speculative-simple runs in tests/data/ (c392e50,
the default SmolLM2 pair, "Once upon a time", greedy).

The recorded steps are the table of cases: llama.cpp's draft, its accepted count and the target's
token at each step. The learner's round, given those drafts, must reproduce them (teacher-forced);
then the learner's own drafts, run as that build ran (`-n 32`), must print llama.cpp's counts.
"""
from __future__ import annotations

import re
from pathlib import Path

from .grading import call, first_diff, unpack_round
from .models import PROMPT, draft_sampler, exercise_models, prefilled
from .rounds import RoundCase, cache_problem, returned_problem
from .verify import Verification, ids_problem

TRACE_STEPS = 16          # the recorded trace's steps before llama.cpp's batched rows flip a near-tie
TRACE_FILE = "llamacpp_speculative_simple_smollm2.txt"
COUNTS_FILE = "llamacpp_speculative_simple_n32_smollm2.txt"
N_PREDICT = 32            # llama-speculative-simple -n 32


def _data_dir() -> Path:
    d = Path(__file__).resolve().parents[3] / "tests" / "data"
    if not (d / TRACE_FILE).exists():
        raise FileNotFoundError(f"check_trace reads llama.cpp's recorded run from the repository's "
                                f"tests/data/{TRACE_FILE}, which is not beside this specnb ({d}): "
                                "run it from a checkout of the repository (pip install -e .)")
    return d


def read_trace(path=None) -> dict:
    """The per-step trace of llama-speculative-simple (tests/data/llamacpp_speculative_simple_smollm2.txt):
    {"prompt_ids", "generated_ids", "steps": [(draft, accepted, target), ...]}."""
    text = Path(path or _data_dir() / TRACE_FILE).read_text()
    steps = [([int(t) for t in d.split(",") if t.strip()], int(a), int(t))
             for d, a, t in re.findall(r"^step\s+\d+: draft=\[([\d, ]*)\] p=\[[^\]]*\] accepted=(\d+) "
                                       r"target=(\d+)$", text, re.M)]
    ids = {k: [int(t) for t in re.search(rf"^{k} = \[([\d, ]*)\]$", text, re.M).group(1).split(",")]
           for k in ("prompt_ids", "generated_ids")}
    return {**ids, "steps": steps}


def read_counts(path=None) -> dict:
    """speculative-simple's printed counts of the n=32 run (tests/data/llamacpp_speculative_simple_n32_smollm2.txt)."""
    text = Path(path or _data_dir() / COUNTS_FILE).read_text()
    return {k: int(re.search(rf"^{k} *= (\d+)$", text, re.M).group(1))
            for k in ("n_draft", "n_predict", "n_drafted", "n_accept")}


def _teacher_forced(name: str, my_round, pair, trace: dict, n_steps: int) -> int:
    """Your round with llama.cpp's recorded drafts: its accepted counts and target tokens. Returns
    the steps compared."""
    from ...run.sampling import Sampler, SamplerParams
    ct, cd, n_past, id_last = prefilled(pair, trace["prompt_ids"], 512)
    smpl, out_tokens = Sampler(SamplerParams(temp=0.0)), []
    for k, (rec_draft, accepted, target) in enumerate(trace["steps"][:n_steps]):
        where = f"recorded step {k} (n_past={n_past}, id_last={id_last}, llama.cpp's draft {rec_draft})"
        out = call(name, where, my_round, ct, cd, smpl, id_last, n_past,
                   lambda _id, _n, d=rec_draft: list(d), ctx_tgt=ct, ctx_dft=cd, n_past=n_past)
        draft, ids, n_past_new, id_last_new = unpack_round(out, name, where)
        r = RoundCase(n_past, id_last, rec_draft, rec_draft[:accepted] + [target])
        if draft != rec_draft:
            raise AssertionError(f"{name}: {where}: return the draft draft_fn gave ({rec_draft}), got {draft}")
        if ids != r.ids:
            raise AssertionError(f"{name}: {where}: llama.cpp accepted {accepted} token(s) and sampled {target}: "
                                 f"ids {r.ids}; yours {ids} ({ids_problem(Verification(rec_draft, r.ids), ids)})")
        problem = (returned_problem(r, draft, ids, n_past_new, id_last_new) or cache_problem(r, ct, "target")
                   or cache_problem(r, cd, "draft"))
        if problem:
            raise AssertionError(f"{name}: {where}: {problem}")
        out_tokens += ids
        n_past, id_last = n_past_new, id_last_new
    if out_tokens != trace["generated_ids"][:len(out_tokens)]:
        raise AssertionError(f"{name}: the first {len(out_tokens)} tokens differ from llama.cpp's output")
    return min(n_steps, len(trace["steps"]))


def _own_drafts(name: str, my_round, my_draft, pair, trace: dict, counts: dict) -> None:
    """Your drafts (n_max from the run, n_min 0, p_min 0) and rounds while at most N_PREDICT tokens
    are out (c392e50's loop, no draft budget): llama.cpp's n_predict, n_drafted and n_accept."""
    from ...run.sampling import Sampler, SamplerParams
    ct, cd, n_past, id_last = prefilled(pair, trace["prompt_ids"], 512)
    smpl, smpl_dft, n_max = Sampler(SamplerParams(temp=0.0)), draft_sampler(), counts["n_draft"]

    def draft_fn(id_last_, n_past_):
        return my_draft(cd, smpl_dft, id_last_, n_past_, n_max, 0, 0.0)
    n_predict = n_drafted = n_accept = 0
    generated = []
    while n_predict <= N_PREDICT and len(generated) < 4 * N_PREDICT:
        where = f"your drafts, round at n_past={n_past} (n_predict={n_predict} so far)"
        out = call(name, where, my_round, ct, cd, smpl, id_last, n_past, draft_fn, ctx_tgt=ct, ctx_dft=cd,
                   n_past=n_past)
        draft, ids, n_past, id_last = unpack_round(out, name, where)
        n_drafted, n_accept, n_predict = n_drafted + len(draft), n_accept + len(ids) - 1, n_predict + len(ids)
        generated += ids
    want = (counts["n_predict"], counts["n_drafted"], counts["n_accept"])
    got = (n_predict, n_drafted, n_accept)
    if got != want:
        i = first_diff(trace["generated_ids"], generated)
        raise AssertionError(
            f"{name}: with your drafts (n_max={n_max}, p_min=0) llama.cpp printed n_predict = {want[0]}, "
            f"n_drafted = {want[1]}, n_accept = {want[2]}; your rounds give {got[0]}, {got[1]}, {got[2]}"
            + (f" (the text parts at generated token {i}: llama.cpp {trace['generated_ids'][i]}, yours "
               f"{generated[i]})" if i < N_PREDICT - 1 else ""))


def check_trace(my_round, my_draft, n_steps: int = TRACE_STEPS) -> None:
    """Step 3 against llama.cpp itself, on the default pair (SmolLM2-135M and its Q4_0 draft).

    1. Teacher-forced: your round with llama-speculative-simple's recorded drafts (c392e50,
       "Once upon a time", greedy; tests/data/llamacpp_speculative_simple_smollm2.txt) gives the
       recorded accepted count and target token at each of the first n_steps steps (after step 15
       llama.cpp's batched rows flip a near-tie that specnb's batch-invariant rows do not).
    2. Your own drafts (n_max 3, n_min 0, p_min 0) run as that build ran (`-n 32`: rounds while at
       most 32 tokens are out, no draft budget) print llama.cpp's n_predict, n_drafted and n_accept
       (tests/data/llamacpp_speculative_simple_n32_smollm2.txt)."""
    name = "check_trace"
    trace, counts = read_trace(), read_counts()
    pair = exercise_models("default")
    if pair[0].vocab.tokenize(PROMPT) != trace["prompt_ids"]:
        raise AssertionError(f"{name}: the default target tokenizes {PROMPT!r} as {pair[0].vocab.tokenize(PROMPT)}, "
                             f"the trace as {trace['prompt_ids']}: is the default target SmolLM2-135M-Instruct Q4_1?")
    n = _teacher_forced(name, my_round, pair, trace, n_steps)
    _own_drafts(name, my_round, my_draft, pair, trace, counts)
    print(f"{name}: passed: {n} recorded steps of llama-speculative-simple equal your rounds "
          f"(accepted counts and target tokens), and your own drafts give llama.cpp's n_predict = "
          f"{counts['n_predict']}, n_drafted = {counts['n_drafted']}, n_accept = {counts['n_accept']}")
