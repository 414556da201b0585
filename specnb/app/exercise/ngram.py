"""Step 5 (optional): an n-gram drafter in your own round, `ngram_draft(tokens, id_last, size_n,
size_m) -> list`, llama.cpp's ngram-simple (common_ngram_simple_draft, common/ngram-map.cpp:49-112 at
master 34af94cd; specnb's port is speculation/ngram.py).

Two tables. NGRAM_CASES: short histories written out, each with llama.cpp's draft and the rule it
exercises. Then rounds: your step-3 round with your drafter against SpeculativeLoop running
ngram-simple, round by round, on a text that repeats itself.
"""
from __future__ import annotations

from .grading import call, name_mistakes, tokens
from .models import exercise_models
from .rounds import kinds, reference_rounds, run_rounds

NGRAM_PROMPT = ("one two three four five six. one two three four five six. one two three four five six. "
                "one two three")
NGRAM_ROUNDS = dict(size_n=2, size_m=4, n_rounds=24)   # a random model loops: drafts of each kind

# (tokens, id_last, size_n, size_m, llama.cpp's draft, the rule the case exercises)
NGRAM_CASES = [
    ([5, 1, 2, 7, 8, 9, 4, 1, 2, 3, 6, 6, 6, 0, 1], 2, 2, 3, [3, 6, 6],
     "the latest earlier occurrence of [1, 2] wins, and size_m tokens follow it"),
    ([1, 2, 7, 8, 9, 4, 4, 4, 4, 1], 2, 2, 3, [], "position 0 is never a match"),
    ([4, 1, 2, 7, 8, 1], 2, 2, 3, [], "a history of at most size_n + size_m + 1 tokens drafts nothing"),
    ([9, 9, 9, 9, 9, 9, 3, 4, 3, 4], 3, 3, 3, [], "a copy shorter than size_n is no draft"),
    ([6, 6, 6, 6, 1, 2, 3, 4, 1], 2, 2, 5, [3, 4, 1], "the copy ends where the history ends"),
    ([3, 7, 5, 8, 9, 7, 4, 4], 7, 1, 2, [4, 4], "size_n = 1: the n-gram is id_last alone"),
    (list(range(1, 11)), 11, 2, 3, [], "no earlier occurrence, no draft"),
]


# ---- the formula: ngram-simple's lookup, and the usual ways to get it wrong ----------------------
def ngram_rule(tokens, id_last, size_n, size_m, latest=True, first=1, floor=True, keep_short=False,
               with_id_last=True) -> list:
    """ngram-simple's draft: the n-gram is the history's last size_n - 1 tokens and id_last; search
    the history backwards from len(tokens) - size_n - 1 down to position 1 for it; the draft is the
    (up to size_m) tokens after the latest match, none if fewer than size_n, and none while the
    history is not longer than size_n + size_m + 1. The keywords describe mistakes."""
    cur_len = len(tokens)
    if floor and cur_len <= size_n + size_m + 1:
        return []
    pattern = list(tokens[cur_len - size_n + 1:]) + [id_last] if with_id_last else list(tokens[cur_len - size_n:])
    starts = range(cur_len - size_n - 1, first - 1, -1)
    match = next((j for j in (starts if latest else reversed(starts)) if list(tokens[j:j + size_n]) == pattern), None)
    if match is None:
        return []
    copy = list(tokens[match + size_n:match + size_n + size_m])
    return copy if keep_short or len(copy) >= size_n else []


NGRAM_MISTAKES = [
    ("the earliest occurrence: llama.cpp searches backwards from the end and takes the latest match",
     lambda c: ngram_rule(*c[:4], latest=False)),
    ("position 0 searched: llama.cpp's search stops at position 1 (a match position of 0 means 'none' there)",
     lambda c: ngram_rule(*c[:4], first=0)),
    ("a short history drafts: llama.cpp drafts nothing until the history is longer than size_n + size_m + 1 "
     "tokens", lambda c: ngram_rule(*c[:4], floor=False)),
    ("a copy shorter than size_n kept: llama.cpp drops it (copy_max < size_n)",
     lambda c: ngram_rule(*c[:4], keep_short=True)),
    ("the n-gram taken as the history's last size_n tokens: it is the last size_n - 1 tokens and id_last",
     lambda c: ngram_rule(*c[:4], with_id_last=False)),
]


def _lookups(name: str, my_ngram) -> int:
    for case in NGRAM_CASES:
        toks, id_last, n, m, want, rule = case
        where = f"tokens={toks}, id_last={id_last}, size_n={n}, size_m={m} ({rule})"
        got = tokens(call(name, where, my_ngram, list(toks), id_last, n, m), "the draft", name)
        if got != want:
            why = name_mistakes(NGRAM_MISTAKES, got, case, {}) or "compare with llama.cpp's rule above"
            raise AssertionError(f"{name}: {where}: expected {want}, got {got} ({why})")
    return len(NGRAM_CASES)


def check_ngram(my_ngram, my_round, models="tiny") -> None:
    """Step 5: `my_ngram(tokens, id_last, size_n, size_m) -> list` (tokens: the history [0, n_past);
    id_last: the token at n_past) against llama.cpp's ngram-simple, then in your own round.

    1. The short histories of NGRAM_CASES, each with llama.cpp's draft.
    2. Your round (step 3) with draft_fn(id_last, n_past) = my_ngram(history[:n_past], id_last,
       size_n, size_m) against SpeculativeLoop running ngram-simple (no draft model), round by round
       on a text that repeats: the draft, the ids, n_past, id_last and both KV caches (your round
       still replays on the draft context; it has nothing to roll back there)."""
    from ...run.sampling import Sampler, SamplerParams
    from ...speculation.params import SpecParams
    name = "check_ngram"
    n_lookups = _lookups(name, my_ngram)
    pair = exercise_models(models)
    prompt = pair[0].vocab.tokenize(NGRAM_PROMPT)
    n, m = NGRAM_ROUNDS["size_n"], NGRAM_ROUNDS["size_m"]
    sp = dict(temp=0.0, seed=1)
    params = SpecParams(types="ngram-simple", ngram_simple_size_n=n, ngram_simple_size_m=m)
    cases = reference_rounds(pair, prompt, dict(sampler_params=SamplerParams(**sp), params=params),
                             NGRAM_ROUNDS["n_rounds"], with_draft=False)
    history = list(prompt) + [t for r in cases for t in r.ids]

    def draft_with(cd):
        return lambda id_last, n_past: my_ngram(history[:n_past], id_last, n, m)
    label = f"greedy, ngram-simple size_n={n} size_m={m}"
    run_rounds(name, label, cases, my_round, pair, prompt, Sampler(SamplerParams(**sp)), draft_with)
    k = kinds(cases)
    print(f"{name}: passed: {n_lookups} lookups equal llama.cpp's ngram-simple, and {len(cases)} rounds of "
          f"yours with your drafter equal SpeculativeLoop's ({label}): {k['full']} fully accepted drafts, "
          f"{k['partial']} partly, {k['none']} rejected at once, {k['empty']} empty drafts")
