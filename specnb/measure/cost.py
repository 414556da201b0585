"""The cost model of speculative decoding: the closed forms.

Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative Decoding"
(ICML 2023), §3.3-3.4, with

  alpha  the acceptance rate: the probability that the target accepts a draft token, taken
         as the same at every position and independent between positions;
  gamma  the number of draft tokens per round (llama.cpp's --draft-max);
  c      the cost coefficient: the time of one draft-model run over the time of one
         target-model run (one token each; the target's one verification call over
         gamma + 1 rows is assumed to cost the same as a one-row call).

Expected tokens committed per target call (their Eq. 1):

    E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha)

Expected walltime improvement over plain decoding (their Theorem 3.8):

    speedup = (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1))

The same figures from measured *unconditional* acceptance rates per draft position
(r_i = P(at least i+1 draft tokens accepted), llama.cpp's `#acc rate/pos`): a round commits
1 + (accepted draft tokens) tokens, so E[tokens] = 1 + sum_i r_i; with r_i = alpha^(i+1) that
is Eq. 1 again.

This module holds the closed forms only. The statistics they take (alpha, the rates per
position) come from a run's events through `specnb.measure.stats`; measuring c and the sweeps that run
the loop live in `specnb.measure.experiments`.
"""
from __future__ import annotations

import math

from ..errors import ParamError, check_param

# For alpha above 1 - NEAR_ONE, (1 - alpha^(gamma+1)) / (1 - alpha) loses digits to
# cancellation: expected_tokens_per_call sums the geometric series instead.
NEAR_ONE = 1e-6
# alpha_from_rates bisects [0, 1]: 100 halvings reach double precision with room to spare.
BISECTION_STEPS = 100


# ---- the closed forms -----------------------------------------------------------------------
def _check_alpha_gamma(alpha, gamma) -> None:
    check_param(isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and
                math.isfinite(alpha) and 0.0 <= alpha <= 1.0, "alpha", alpha, "a number in [0, 1]")
    check_param(isinstance(gamma, int) and not isinstance(gamma, bool) and gamma >= 0,
                "gamma", gamma, "an integer >= 0 (draft tokens per round)")


def expected_tokens_per_call(alpha: float, gamma: int) -> float:
    """Expected tokens committed per target call: (1 - alpha^(gamma+1)) / (1 - alpha).

    Leviathan et al. 2023, Eq. 1. The limit alpha -> 1 is gamma + 1 (every draft token
    accepted, plus the target's bonus token); gamma = 0 gives 1 (plain decoding).
    """
    _check_alpha_gamma(alpha, gamma)
    alpha = float(alpha)
    if alpha >= 1.0:
        return float(gamma + 1)
    if alpha > 1.0 - NEAR_ONE:   # 1 + a + ... + a^gamma, well conditioned near 1
        return float(sum(alpha ** i for i in range(gamma + 1)))
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speedup(alpha: float, gamma: int, c: float) -> float:
    """Expected walltime improvement: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)).

    Leviathan et al. 2023, Theorem 3.8: a round costs gamma draft runs (gamma c target-run
    units) plus one target run, and commits `expected_tokens_per_call(alpha, gamma)` tokens,
    where plain decoding commits one token per target run.
    """
    check_param(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
                and c >= 0.0, "c", c, "a number >= 0 (draft-to-target cost ratio)")
    return expected_tokens_per_call(alpha, gamma) / (gamma * float(c) + 1.0)


def accepted_length_probs(alpha: float, gamma: int) -> list:
    """P(exactly k draft tokens accepted), k = 0..gamma, under the i.i.d. model:
    alpha^k (1 - alpha) for k < gamma (k accepted, then a rejection) and alpha^gamma for k = gamma.

    Its mean is expected_tokens_per_call(alpha, gamma) - 1 (Leviathan et al. 2023, Eq. 1: the
    round's tokens less the target's own one).
    """
    _check_alpha_gamma(alpha, gamma)
    alpha = float(alpha)
    return [alpha ** k * (1.0 - alpha) for k in range(gamma)] + [alpha ** gamma]


def _check_rates(rates) -> list:
    try:
        rates = [float(r) for r in rates]
    except (TypeError, ValueError):
        raise ParamError(f"invalid rates={rates!r}: expected a list of numbers in [0, 1]") from None
    for i, r in enumerate(rates):
        check_param(math.isfinite(r) and 0.0 <= r <= 1.0, f"rates[{i}]", r, "a number in [0, 1]")
    return rates


def speedup_from_rates(rates, c: float) -> float:
    """The speedup of Theorem 3.8 with measured per-position rates: (1 + sum r_i) / (gamma c + 1).

    gamma = len(rates). This drops Leviathan et al.'s assumption that acceptance is the same at
    every position (draft tokens further out are usually accepted less often).
    """
    rates = _check_rates(rates)
    check_param(isinstance(c, (int, float)) and math.isfinite(c) and c >= 0.0, "c", c,
                "a number >= 0 (draft-to-target cost ratio)")
    return (1.0 + sum(rates)) / (len(rates) * float(c) + 1.0)


def speedup_engine(rates, c: float, verify_cost: float, draft_evals: float) -> float:
    """Theorem 3.8's accounting with this engine's measured prices instead of its assumptions:

        (1 + sum r_i) / (c * e_d + b)

    b = verify_cost: what the target's (gamma + 1)-row verification batch costs in one-row target
    decodes (Leviathan et al. take b = 1: verifying in parallel is free; on a CPU it is not, see
    `specnb bench`); e_d = draft_evals: the draft's one-row evaluations per round (gamma in the
    paper; 1 + gamma with the re-evaluation fix, since the draft also decodes the target's token).
    """
    rates = _check_rates(rates)
    for name, v in (("c", c), ("verify_cost", verify_cost), ("draft_evals", draft_evals)):
        check_param(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0.0, name, v,
                    "a number >= 0")
    return (1.0 + sum(rates)) / (float(c) * float(draft_evals) + float(verify_cost))


def best_speedup_with_rows(alpha: float, c: float, row_cost: float, n_max: int = 16) -> tuple[float, int]:
    """The best expected speed-up over draft lengths gamma = 1 .. n_max when the verification
    batch is priced by its rows: Theorem 3.8 with a (gamma + 1)-row batch costing 1 + gamma
    row_cost one-row target decodes,

        max over gamma of (1 - alpha^(gamma+1)) / ((1 - alpha) (1 + gamma (c + row_cost)))

    -> (speed-up, gamma), ties to the shorter draft (as figures.cost_map.best_speedup). With a
    draft priced by its bytes and a row by the int8 compute limit it is a CPU's roofline for
    speculative decoding (`specnb bench --spec -md`)."""
    for name, v in (("c", c), ("row_cost", row_cost)):
        check_param(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    and v >= 0.0, name, v, "a number >= 0 (in one-row target decodes)")
    check_param(isinstance(n_max, int) and not isinstance(n_max, bool) and n_max >= 1, "n_max", n_max,
                "an integer >= 1")
    return max(((expected_tokens_per_call(alpha, g) / (1.0 + g * (float(c) + float(row_cost))), g)
                for g in range(1, n_max + 1)), key=lambda sg: sg[0])


def conditional_rates(rates) -> list:
    """Unconditional rates per position -> P(position i accepted | positions < i accepted)."""
    rates, out, prev = _check_rates(rates), [], 1.0
    for r in rates:
        out.append(r / prev if prev > 0 else 0.0)
        prev = r
    return out


def alpha_from_rates(rates) -> float:
    """The alpha whose i.i.d. model has the measured mean: sum_{i=1..gamma} alpha^i = sum(rates).

    Solved by bisection; 0 for no rates.
    """
    rates = _check_rates(rates)
    k, target = len(rates), sum(rates)
    if k == 0 or target <= 0.0:
        return 0.0
    if target >= k:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(1, k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def alpha_from_counts(n_accepted: int, n_examined: int) -> float:
    """Maximum-likelihood alpha: accepted draft tokens over draft tokens the target examined.

    The target examines draft tokens up to and including the first rejection; tokens after it
    are never looked at, so n_accept / n_drafted underestimates alpha when drafts are long.
    """
    check_param(isinstance(n_examined, int) and n_examined >= 0, "n_examined", n_examined,
                "an integer >= 0")
    check_param(isinstance(n_accepted, int) and 0 <= n_accepted <= n_examined, "n_accepted",
                n_accepted, f"an integer in [0, n_examined={n_examined}]")
    return n_accepted / n_examined if n_examined else 0.0
