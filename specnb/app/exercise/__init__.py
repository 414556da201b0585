"""The capstone's checks (docs/exercise.md): write draft-simple yourself, then compare it with specnb.

    from specnb.app.exercise import check_draft, check_sample_and_accept_n, check_round, check_trace, check_speedup

The learner writes four functions (and a fifth, optional); each check runs the learner's function
over a table of cases whose expected outputs come from specnb's reference (or llama.cpp's recorded
run), and raises an AssertionError naming the first difference (the case, the position, what was
expected and what came back, and the usual mistake that gives that answer), or prints one line
saying what passed. `python -m specnb.app.exercise starter > my_draft_simple.py` writes the
starter: the signatures, the docstrings and the checks, with the bodies left to write.

  1. draft(ctx_dft, smpl, id_last, n_past, n_max, n_min, p_min) -> list
         check_draft(draft)                        against DraftSimple (draft.py)
  2. sample_and_accept_n(smpl, ctx_tgt, draft) -> list
         check_sample_and_accept_n(sample_and_accept_n)    against sample_and_accept_n (verify.py)
  3. speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn) -> (draft, ids, n_past, id_last)
         check_round(speculative_round, draft)     against SpeculativeLoop, round by round (rounds.py)
         check_trace(speculative_round, draft)     against llama-speculative-simple's recorded run
                                                   (tests/data/, the default SmolLM2 pair; trace.py)
  4. measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max) -> dict
         check_speedup(measure)                    the verdict from your paired timings, the engine
                                                   model's prediction beside it (speedup.py)
  5. ngram_draft(tokens, id_last, size_n, size_m) -> list      (optional)
         check_ngram(ngram_draft, speculative_round)   llama.cpp's ngram-simple, in your round (ngram.py)

`models` picks the pair (models.py): "tiny" (steps 1-3 and 5), "default" (the notebooks' SmolLM2
pair), "real" (Qwen2.5-Coder 1.5B and 0.5B: step 4's pair where installed), or a (target, draft)
tuple of Models, paths or registry names.
"""
from .draft import check_draft
from .models import (N_CTX, PROMPT, TINY_SEED, draft_sampler, exercise_models, exercise_pair,
                     real_pair_installed, tiny_pair_paths)
from .ngram import check_ngram
from .rounds import check_round
from .speedup import check_speedup
from .steps import run_steps
from .trace import check_trace, read_counts, read_trace
from .verify import check_sample_and_accept_n

__all__ = ["PROMPT", "N_CTX", "TINY_SEED", "draft_sampler", "tiny_pair_paths", "exercise_models",
           "exercise_pair", "real_pair_installed", "check_draft", "check_sample_and_accept_n", "check_round",
           "check_trace", "check_speedup", "check_ngram", "run_steps", "read_trace", "read_counts"]
