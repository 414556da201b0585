"""Step 4: time it and explain the ratio, `measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max) -> dict`.

The verdict comes from the learner's own measurement: several pairs of runs taken in turn (plain,
speculative, plain, ...), each pair's speed-up per token, their median and interval
(measure/verdict.py), and "wins", "loses" or "within the noise" from where the whole interval lies.
The course's engine model is printed beside it, as a prediction from the learner's τ, c, bc and bd.
Both formulas have their catalogue of usual mistakes beside them.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .grading import as_int, call, name_mistakes
from .models import N_CTX, PROMPT, ctx_for, exercise_models, real_pair_installed

MIN_PAIRS = 3             # pairs of runs a measurement needs: one run of each side decides nothing
MEASURE_KEYS = ("t_plain", "t_spec", "n_tokens", "n_rounds", "c", "bc", "bd", "measured", "predicted")
CODE_PROMPT = ('def binary_search(items, target):\n    """Return the index of target in the sorted list '
               'items, or -1."""\n')   # the real pair is a coder: a completion, where its drafts agree most
STAND_IN = ("the stand-in pair: its draft is SmolLM2-135M requantized, so a draft step costs about a target "
            "step (c near 1) and speculation loses there whatever τ")


@dataclass
class Measurement:
    """The learner's dict, read and typed."""
    t_plain: list             # seconds of plain greedy decoding of n_predict tokens, one per pair
    t_spec: list              # seconds of the speculative rounds, one per pair (taken in turn)
    n_predict: int
    n_tokens: int
    n_rounds: int
    g: int                    # γ = n_max: every draft is full (greedy, p_min 0)
    c: float
    bc: dict
    bd: dict
    measured: float
    predicted: float

    @property
    def tau(self) -> float:
        return self.n_tokens / self.n_rounds

    def fields(self) -> dict:
        return dict(n_tokens=self.n_tokens, n_predict=self.n_predict)


# ---- the measured speed-up, and the usual ways to get it wrong --------------------------------------
def paired_speedups(m: Measurement) -> list:
    """Each pair's speed-up: plain decoding's time per token over the rounds' time per token."""
    from ...measure.verdict import paired_ratios
    return paired_ratios([t / m.n_predict for t in m.t_plain], [t / m.n_tokens for t in m.t_spec])


def measured_speedup(m: Measurement) -> float:
    """The median of the paired speed-ups (the course's one estimator)."""
    return statistics.median(paired_speedups(m))


MEASURED_MISTAKES = [
    ("t_plain / t_spec (times, not times per token: your rounds made {n_tokens} tokens, plain decoding "
     "{n_predict})", lambda m: statistics.median(p / s for p, s in zip(m.t_plain, m.t_spec))),
    ("upside down: speculative time per token over plain", lambda m: statistics.median(
        1 / r for r in paired_speedups(m))),
    ("the fastest run of each side: pair the runs taken in turn and take the median of their ratios",
     lambda m: (min(m.t_plain) / m.n_predict) / (min(m.t_spec) / m.n_tokens)),
    ("the mean of the paired ratios: the course's one estimator is their median",
     lambda m: statistics.fmean(paired_speedups(m))),
]


# ---- the predicted speed-up (the engine model), and the usual ways to get it wrong -------------------
def predicted_speedup(m: Measurement) -> float:
    """τ / (γc + bc(γ+1) + c·bd(γ+1)): a round costs γ one-row draft decodes while drafting, the
    (γ+1)-row verification batch, and the draft's replay of that batch (figures/cost_map.py)."""
    from ...figures.cost_map import engine_speedup
    return engine_speedup(m.tau, m.g, m.c, m.bc, m.bd)


PREDICTED_MISTAKES = [
    ("Leviathan's τ / (γc + 1): it leaves out the wider batch bc(γ+1) and the draft's replay c·bd(γ+1)",
     lambda m: m.tau / (m.g * m.c + 1)),
    ("τ / (γc + bc(γ+1)): it leaves out the draft's replay of the batch, c·bd(γ+1)",
     lambda m: m.tau / (m.g * m.c + m.bc[m.g + 1])),
    ("τ / (γc + 1 + c): it takes the (γ+1)-row batches as one-row steps (bc = bd = 1)",
     lambda m: m.tau / (m.g * m.c + 1 + m.c)),
    ("τ / ((γ+1)c + bc(γ+1) + c·bd(γ+1)): the draft decodes γ rows while drafting (id_last, then each "
     "drafted token but the last), not γ+1", lambda m: m.tau / ((m.g + 1) * m.c + m.bc[m.g + 1] + m.c * m.bd[m.g + 1])),
    ("bc(γ) and bd(γ): the verification batch has γ+1 rows (id_last and γ draft tokens)",
     lambda m: m.tau / (m.g * m.c + m.bc[m.g] + m.c * m.bd[m.g])),
    ("the target's bc for the draft's replay: use the draft's own bd(γ+1)",
     lambda m: m.tau / (m.g * m.c + m.bc[m.g + 1] + m.c * m.bc[m.g + 1])),
    ("round_cost / τ: upside down", lambda m: 1 / predicted_speedup(m)),
]


# ---- reading the learner's dict ----------------------------------------------------------------------
def _number(x, key: str, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {key} must be a number, got {x!r:.80}") from None
    if not (math.isfinite(v) and v > 0):
        raise AssertionError(f"{name}: {key} = {x!r}: expected a number > 0")
    return v


def _times(x, key: str, name: str) -> list:
    if isinstance(x, (int, float)) or not hasattr(x, "__len__") or len(x) < MIN_PAIRS:
        raise AssertionError(f"{name}: {key} must be a list of at least {MIN_PAIRS} times, one per pair of "
                             f"runs taken in turn (plain, speculative, plain, ...); got {x!r:.80}: one run "
                             f"of each side decides nothing on a shared machine")
    return [_number(t, f"{key}[{i}]", name) for i, t in enumerate(x)]


def _ratios(x, key: str, gamma: int, name: str) -> dict:
    if not isinstance(x, dict):
        raise AssertionError(f"{name}: {key} must be a dict {{k: time of a k-row step / time of a one-row "
                             f"step}}, got {x!r:.80}")
    try:
        x = {int(k): float(v) for k, v in x.items()}
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {key} must map row counts (ints) to numbers, got {x!r:.80}") from None
    missing = [k for k in range(1, gamma + 2) if k not in x]
    if missing:
        raise AssertionError(f"{name}: {key} needs the rows 1..n_max+1 = 1..{gamma + 1}; {missing} missing")
    if not math.isclose(x[1], 1.0, rel_tol=1e-9, abs_tol=1e-12):
        raise AssertionError(f"{name}: {key}[1] = {x[1]:.4g}: divide every k-row time by the one-row time, "
                             f"so that {key}[1] = 1 ({key}(k) is in one-row steps, not seconds)")
    bad = [k for k, v in x.items() if not (math.isfinite(v) and v > 0)]
    if bad:
        raise AssertionError(f"{name}: {key}[{bad[0]}] = {x[bad[0]]}: expected a ratio > 0")
    return x


def read_measurement(res, n_predict: int, n_max: int, name: str) -> Measurement:
    """The learner's dict as a Measurement, or an AssertionError naming what is wrong with it."""
    if not isinstance(res, dict):
        raise AssertionError(f"{name}: your function must return a dict with {', '.join(MEASURE_KEYS)}; "
                             f"got {type(res).__name__}")
    missing = [k for k in MEASURE_KEYS if k not in res]
    if missing:
        raise AssertionError(f"{name}: the dict lacks {', '.join(missing)} (it needs {', '.join(MEASURE_KEYS)})")
    t_plain, t_spec = _times(res["t_plain"], "t_plain", name), _times(res["t_spec"], "t_spec", name)
    if len(t_plain) != len(t_spec):
        raise AssertionError(f"{name}: {len(t_plain)} plain times but {len(t_spec)} speculative ones: take "
                             f"the runs in pairs, one of each side in turn")
    return Measurement(t_plain, t_spec, n_predict, as_int(res["n_tokens"], "n_tokens", name, "the dict"),
                       as_int(res["n_rounds"], "n_rounds", name, "the dict"), n_max, _number(res["c"], "c", name),
                       _ratios(res["bc"], "bc", n_max, name), _ratios(res["bd"], "bd", n_max, name),
                       _number(res["measured"], "measured", name), _number(res["predicted"], "predicted", name))


# ---- the reference, the costs here and the report ----------------------------------------------------
def reference_counts(ct, cd, prompt: list, n_predict: int, n_max: int):
    """speculative-simple's (tokens, rounds, stopped at an end-of-generation token) for greedy rounds
    while fewer than n_predict tokens are out."""
    from ...run.sampling import SamplerParams
    from ...speculation.loop import SpeculativeLoop
    from ...speculation.params import SpecParams
    ct.clear()
    cd.clear()
    loop = SpeculativeLoop(ct, cd, prompt, n_predict - 1, SamplerParams(temp=0.0, seed=1), SpecParams(n_max=n_max),
                           penalize_prompt=False, stop_rule="c392e50")   # rounds while fewer than n_predict
    loop.run()
    sl = loop.slots[0]
    return len(sl.generated), loop.n_rounds, sl.stop_reason == "eog"


def _pair_costs(ctx_tgt, ctx_dft) -> dict:
    """c, bc(k) and bd(k) from this machine's costs record for the pair (specnb.measure.costs:
    measured once, with their spread, and read by the notebooks and the demo too)."""
    from ...measure.costs import machine_costs
    from ...run.pair import Pair
    rec = machine_costs(Pair(ctx_tgt.model, ctx_dft.model, ctx_tgt, ctx_dft))
    return {"c": rec.c.estimate, "bc": rec.bc_table("target"), "bd": rec.bc_table("draft"), "record": rec}


def speedup_report(m: Measurement, here: dict, stand_in: bool, tiny: bool) -> list:
    """The verdict from the learner's pairs, the engine model's prediction beside it, what decides."""
    from ...figures.cost_map import round_cost
    from ...measure.verdict import interval, said, speedup_verdict
    iv, g, pred = interval(paired_speedups(m)), m.g, m.predicted
    cost = round_cost(g, m.c, m.bc, m.bd)
    where = "inside" if iv.low <= pred <= iv.high else "above" if pred > iv.high else "below"
    lines = [f"speculation against plain decoding, by your {iv.n} pairs: {said(iv)}",
             f"  the engine model predicts {pred:.2f}x from your τ, c, bc and bd: {where} your interval",
             f"  per round: τ = {m.tau:.2f} tokens ({m.n_tokens} in {m.n_rounds} rounds) for "
             f"γc + bc({g + 1}) + c·bd({g + 1}) = {g}×{m.c:.2f} + {m.bc[g + 1]:.2f} + {m.c:.2f}×{m.bd[g + 1]:.2f} "
             f"= {cost:.2f} one-row target steps"]
    c_even = (m.tau - m.bc[g + 1]) / (g + m.bd[g + 1])
    lines.append(f"  break-even at this τ: c < {c_even:.2f} (your c is {m.c:.2f})" if c_even > 0 else
                 f"  break-even at this τ: none; the {g + 1}-row target batch alone costs {m.bc[g + 1]:.2f} "
                 f"one-row steps, more than the {m.tau:.2f} tokens a round yields")
    rec = here.get("record")
    lines.append(f"  this machine's costs record{f' {rec.id} ({rec.date[:16]})' if rec else ''}: c = {here['c']:.2f} "
                 f"(yours {m.c:.2f}), bc({g + 1}) = {here['bc'][g + 1]:.2f} (yours {m.bc[g + 1]:.2f})")
    if speedup_verdict(iv) not in ("wins", "loses"):
        lines.append("  note: the interval holds 1, so this measurement does not decide: take more pairs (from "
                     "5 the interval is a bootstrap one) or a longer run")
    if not 0.5 <= m.c / here["c"] <= 2.0 or not 0.67 <= m.bc[g + 1] / here["bc"][g + 1] <= 1.5:
        lines.append("  note: your c or bc is far from this quick measurement: time decodes after a warm-up "
                     "(the first decodes compile), take the median of several, and time the decode alone")
    if not 0.67 <= pred / iv.estimate <= 1.5:
        lines.append("  note: the prediction is far from the measurement: the model charges decodes only; "
                     "what else does your loop spend time on (sampling, building batches, Python)?"
                     + (" On the tiny models a decode is so short that this overhead weighs most: try the "
                        "real pair" if tiny else ""))
    if stand_in:
        lines.append(f"  note: {STAND_IN}")
    return lines


def step4_models(models):
    """(models, a note or ''): None picks the real pair where it is installed, else the stand-in."""
    if models is not None:
        return models, ""
    if real_pair_installed():
        return "real", ""
    return "default", ("the real pair (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b) is not installed, so this runs "
                       f"on {STAND_IN} (install it: specnb models install qwen2.5-coder-1.5b qwen2.5-coder-0.5b)")


def check_speedup(my_measure, models=None, n_predict: int = 48, n_max: int = 3) -> None:
    """Step 4: `my_measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max) -> dict` (greedy, p_min 0).

    The dict holds t_plain and t_spec (lists of seconds, one per pair of runs taken in turn, at least
    MIN_PAIRS: plain greedy decoding of n_predict tokens, then your rounds until at least n_predict
    tokens), n_tokens and n_rounds (what your rounds made), c (one-row draft step / one-row target
    step), bc and bd ({k: k-row step / one-row step} of the target and the draft, k = 1..n_max+1),
    measured (the median over the pairs of (t_plain / n_predict) / (t_spec / n_tokens)) and
    predicted (tokens per round / round_cost, the course's engine model: γc + bc(γ+1) + c·bd(γ+1)).

    Checked: the counts against speculative-simple's, both speed-ups against their definitions from
    your own numbers (a formula that leaves a cost out is named). Reported: the verdict from the
    interval of your paired speed-ups, the model's prediction beside it, what decides the outcome
    and your c and bc against this machine's costs record. models=None runs on the real pair where it
    is installed (a code completion) and on the stand-in SmolLM2 pair otherwise, saying so."""
    from ...run.pair import warm_up
    name = "check_speedup"
    models, note = step4_models(models)
    if note:
        print(f"{name}: {note}")
    pair = exercise_models(models)
    prompt = pair[0].vocab.tokenize(CODE_PROMPT if models == "real" else PROMPT)
    n_ctx = max(N_CTX, len(prompt) + n_predict + 2 * n_max + 8)
    ct, cd = ctx_for(pair[0], pair, n_ctx), ctx_for(pair[1], pair, n_ctx)
    warm_up(ct, cd, progress=False)             # compile (or load) the kernels before anything is timed
    where = f"my_measure(ctx_tgt, ctx_dft, prompt, n_predict={n_predict}, n_max={n_max})"
    m = read_measurement(call(name, where, my_measure, ct, cd, list(prompt), n_predict, n_max), n_predict, n_max, name)
    n_tokens, n_rounds, eog = reference_counts(ct, cd, prompt, n_predict, n_max)
    if eog:
        print(f"{name}: note: speculative-simple met an end-of-generation token after {n_tokens} tokens, so "
              f"your counts are not compared")
    elif (m.n_tokens, m.n_rounds) != (n_tokens, n_rounds):
        raise AssertionError(
            f"{name}: your rounds made n_tokens = {m.n_tokens} in n_rounds = {m.n_rounds}; speculative-simple "
            f"makes {n_tokens} tokens in {n_rounds} rounds (greedy, n_max={n_max}, p_min=0, rounds while fewer "
            f"than n_predict = {n_predict} tokens are out; each round commits len(ids) tokens)")
    want = measured_speedup(m)
    if not math.isclose(m.measured, want, rel_tol=1e-6):
        hit = name_mistakes(MEASURED_MISTAKES, m.measured, m, m.fields(), close=True)
        raise AssertionError(f"{name}: measured = {m.measured:.4f}, but the median over your pairs of "
                             f"(t_plain / n_predict) / (t_spec / n_tokens) is {want:.4f}"
                             + (f": yours is {hit}" if hit else ""))
    want = predicted_speedup(m)
    if not math.isclose(m.predicted, want, rel_tol=1e-6):
        hit = name_mistakes(PREDICTED_MISTAKES, m.predicted, m, {}, close=True)
        g = n_max
        raise AssertionError(f"{name}: predicted = {m.predicted:.4f}, but τ / (γc + bc(γ+1) + c·bd(γ+1)) with your "
                             f"numbers (τ = {m.tau:.3f} tokens per round, γ = {g}, c = {m.c:.3f}, bc({g + 1}) = "
                             f"{m.bc[g + 1]:.3f}, bd({g + 1}) = {m.bd[g + 1]:.3f}) is {want:.4f}"
                             + (f"; yours is {hit}" if hit else ""))
    here = _pair_costs(ct, cd)
    lines = speedup_report(m, here, stand_in=models == "default", tiny=models not in ("default", "real"))
    print(f"{name}: " + "\n".join(lines))
