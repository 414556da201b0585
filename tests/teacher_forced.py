"""Teacher forcing against greedy continuations llama.cpp printed (tests/data/llamacpp_greedy_*.json):
each case's prompt and llama.cpp's continuation are decoded in one batch, so every step sees
llama.cpp's own history."""
import numpy as np

from specnb.run.context import Batch, Context

SAFE_GAP = 0.6   # a top-1 lead (in logits) that specnb's and ggml's summation orders cannot overturn


def teacher_forced_steps(model, cases, n_ctx: int = 256) -> list:
    """One (case, step, specnb's argmax, llama.cpp's token, llama.cpp's top-1/top-2 gap) per
    generated token."""
    ctx = Context(model, n_ctx=n_ctx)
    steps = []
    for case in cases:
        ids, gen = case["prompt_ids"], case["generated_ids"]
        ctx.clear()
        logits = ctx.decode(Batch.from_tokens(ids + gen, 0, 0, "all"))
        for i, want in enumerate(gen):
            got = int(np.argmax(logits[len(ids) - 1 + i]))
            steps.append((case, i, got, want, case["steps_top2"][i]["gap"]))
    return steps


def assert_greedy_steps_match(model, cases, min_clear: int, min_agree: float = 0.9):
    """The prompts tokenize as llama.cpp's did; at every step where llama.cpp's top-1 leads by
    SAFE_GAP, specnb's argmax is the same token; overall at least `min_agree` of the steps agree
    (near ties may differ)."""
    for case in cases:
        assert model.vocab.tokenize(case["prompt"]) == case["prompt_ids"]
    steps = teacher_forced_steps(model, cases)
    wrong = [(c["prompt"][:30], i, got, want) for c, i, got, want, gap in steps
             if gap >= SAFE_GAP and got != want]
    assert not wrong
    assert sum(gap >= SAFE_GAP for *_, gap in steps) >= min_clear
    assert sum(got == want for _, _, got, want, _ in steps) / len(steps) >= min_agree
