"""The course's exercise answers, computed here and checked by the tests, so that the cell a learner
runs calls `check(my_x, answers.NAME(...))` and never shows the derivation of what it asks.

Each function is the rule its exercise asks for; tests/test_answers.py checks each against what the
engine does (the recorded rounds, the cost model's closed forms, the loop's own counts).
"""
from __future__ import annotations

import numpy as np

from ..measure import cost
from ..vocab.gate import SPEC_VOCAB_MAX_SIZE_DIFFERENCE


def vocab_size_passes(n_target: int, n_draft: int) -> bool:
    """01, exercise 1: does the gate's size check pass two vocabs of these sizes? (at most
    SPEC_VOCAB_MAX_SIZE_DIFFERENCE tokens apart, common_speculative_are_compatible)"""
    return abs(int(n_target) - int(n_draft)) <= SPEC_VOCAB_MAX_SIZE_DIFFERENCE


def top_k_p_bounds(logits, top_k: int) -> tuple:
    """02, exercise 2: (the argmax's probability over the whole vocab, its probability after the
    top-k sampler renormalizes over the k largest logits): any top-k' with k' > k gives a value
    between the two, since a larger k keeps more of the tail in the denominator."""
    x = np.asarray(logits, dtype=np.float64).ravel()
    e = np.exp(x - x.max())
    return float(1.0 / e.sum()), float(1.0 / np.sort(e)[::-1][:int(top_k)].sum())


def acceptance(p, q) -> tuple:
    """04, exercise 1: (the acceptance of llama.cpp's rule, a greedy proposal argmax q kept when
    the target's sample equals it: p(argmax q); that of speculative sampling, a proposal drawn
    from q kept by the ratio test: sum min(p, q) = 1 - TV(p, q))."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    return float(p[int(np.argmax(q))]), float(np.minimum(p, q).sum())


def after_round(n_past: int, n_draft: int, n_accepted: int) -> tuple:
    """05, exercise 1: (n_past after the round, the positions seq_rm(n_past, -1) then removes from
    the verification batch's rows). The round verified [id_last, draft...] at n_past ..
    n_past + n_draft and commits the accepted tokens and the target's own one."""
    new = n_past + n_accepted + 1
    return new, list(range(new, n_past + n_draft + 1))


def best_gamma(alpha: float, c: float, gammas=range(1, 20)) -> int:
    """06, exercise 1: the draft length that maximizes Leviathan's speed-up (measure.cost.speedup)
    at acceptance α and draft cost c (ties to the shorter)."""
    return max(gammas, key=lambda g: (cost.speedup(alpha, g, c), -g))


def break_even_c(alpha: float, gamma: int, bc: dict, bd: dict) -> float:
    """06, exercise 2: the draft cost c at which a round of γ tokens breaks even (figures.cost_map's
    round cost γc + bc_t[γ+1] + c·bc_d[γ+1] equals the tokens it commits, Leviathan's
    E = (1 - α^(γ+1)) / (1 - α)); negative when the verification batch alone costs more than E."""
    e = cost.expected_tokens_per_call(alpha, gamma)
    k = gamma + 1
    return (e - bc[k] / bc[1]) / (gamma + bd[k] / bd[1])


def tokens_limit(alpha: float) -> float:
    """08, exercise 1: the tokens a round commits as the draft grows without end: the geometric sum
    1 + α + α² + ... = 1 / (1 - α)."""
    return 1.0 / (1.0 - alpha)


def rows_per_token(alpha: float, gamma: int) -> float:
    """08, exercise 2: target rows a round computes per token it commits: γ + 1 rows for
    E = (1 - α^(γ+1)) / (1 - α) tokens."""
    return (gamma + 1) / cost.expected_tokens_per_call(alpha, gamma)


def committed_on_branch(p_first: float, n_after: int, p_next: float) -> float:
    """Expected tokens a round commits on a branch whose first token is right with p_first and is
    followed by n_after tokens, each right with p_next: the accepted tokens and the target's own."""
    return p_first * sum(p_next ** k for k in range(n_after + 1)) + 1.0


def chain_and_tree(p_first: float = 0.5, p_second: float = 0.3, p_next: float = 0.9) -> tuple:
    """08, exercise 3: (tokens a round commits with a chain of six draft tokens, with a tree of two
    branches of three, the first tokens right with p_first and p_second): at most one branch of a
    tree is accepted, and the target's own token is counted once."""
    chain = committed_on_branch(p_first, 5, p_next)
    tree = committed_on_branch(p_first, 2, p_next) + committed_on_branch(p_second, 2, p_next) - 1.0
    return chain, tree
