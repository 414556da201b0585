"""My draft-simple: the exercise of docs/exercise.md, to fill in.

Write one function at a time, in order, then run this file (`python my_draft_simple.py`): it runs
the check of every step you have written and says which step to do next, or what differs from
llama.cpp. Each docstring says what the function returns; docs/exercise.md gives each step's
recipe and the few calls you need (Batch, ctx.decode, ctx.seq_rm, smpl.sample, ...).
"""
# the calls your functions use: the same as `from specnb import Batch, Sampler, SamplerParams`
from specnb.run.context import Batch  # noqa: F401
from specnb.run.sampling import Sampler, SamplerParams  # noqa: F401
from specnb.app.exercise import (check_draft, check_ngram, check_round, check_sample_and_accept_n,
                                 check_speedup, check_trace, run_steps)


# ---- step 1: the draft (about 40 minutes) ------------------------------------------------------
def draft(ctx_dft, smpl, id_last, n_past, n_max, n_min=0, p_min=0.0):
    """Returns the draft: a list of token ids, possibly empty.

    llama.cpp's common_speculative_impl_draft_simple::draft. ctx_dft holds [0, n_past); id_last
    belongs at n_past. Greedy: at each step the argmax of the draft model's candidates, stopping
    at n_max tokens or (before pushing it) at a p under p_min; [] if shorter than n_min."""
    raise NotImplementedError("step 1: draft")


# ---- step 2: verification (about 20 minutes) -----------------------------------------------------
def sample_and_accept_n(smpl, ctx_tgt, draft):
    """Returns ids: the accepted draft tokens, then the target's own sample.

    llama.cpp's common_sampler_sample_and_accept_n. The last decode of ctx_tgt held [id_last,
    draft...], logits on every row; row i predicts draft[i]. Decode nothing here."""
    raise NotImplementedError("step 2: sample_and_accept_n")


# ---- step 3: one round (about 40 minutes, with the trace) ------------------------------------------
def speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn):
    """Returns (draft, ids, n_past, id_last) after the round.

    One pass of llama-speculative-simple's loop: both caches hold [0, n_past) when it starts, and
    they hold exactly [0, n_past) of the new n_past when it ends. draft_fn(id_last, n_past) is
    your draft() with its settings bound."""
    raise NotImplementedError("step 3: speculative_round")


# ---- step 4: time it and explain the ratio (about 40 minutes, with the closing sentences) -----------
def measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max):
    """Returns a dict: t_plain, t_spec, n_tokens, n_rounds, c, bc, bd, measured, predicted.

    t_plain and t_spec are lists, one time per pair of runs taken in turn (plain, speculative,
    plain, ...), at least 3 pairs (time.perf_counter). measured is the median over the pairs of
    (t_plain / n_predict) / (t_spec / n_tokens) (statistics.median); predicted is the engine
    model's τ / (γc + bc(γ+1) + c·bd(γ+1)). The contexts come empty: decode the prompt yourself."""
    raise NotImplementedError("step 4: measure")


# ---- step 5, optional: an n-gram drafter in your round (about 30 minutes) ----------------------------
def ngram_draft(tokens, id_last, size_n, size_m):
    """Returns the draft of llama.cpp's ngram-simple: the tokens that followed the latest earlier
    occurrence of the current n-gram (the last size_n - 1 tokens of `tokens`, then id_last).

    tokens is the history [0, n_past); id_last sits at n_past."""
    raise NotImplementedError("step 5: ngram_draft")


# Each step's check, in order: the first function still to write, or the first check that fails,
# stops the run and says what to do next. Pass models="default" to a check for the SmolLM2 pair.
STEPS = [
    (1, check_draft, (draft,)),
    (2, check_sample_and_accept_n, (sample_and_accept_n,)),
    (3, check_round, (speculative_round, draft)),
    (3, check_trace, (speculative_round, draft)),
    (4, check_speedup, (measure,)),
    (5, check_ngram, (ngram_draft, speculative_round)),
]

if __name__ == "__main__":
    run_steps(STEPS)
