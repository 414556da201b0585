"""Experiments that feed the cost model: measuring c, and sweeps that run the loop.

  - `measure_cost_ratio(target, draft)`: c = t_draft_token / t_target_token, from plain greedy
    decoding on each model; `cost_ratio_from_contexts` the same from a run's decode counters;
  - `sweep_draft_max(...)`: speculative runs for each draft-max beside plain decoding, measured
    speedup against the predictions of `specnb.measure.cost`;
  - `sweep_temperature(...)`: acceptance against temperature, exact match against rejection
    sampling.

Each opens its target/draft pair with `specnb.run.pair.open_pair` and returns plain data (dicts of
lists), which the figures in `specnb.figures.runs` draw.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .cost import alpha_from_counts, speedup, speedup_engine, speedup_from_rates
from ..errors import ParamError, check_param
from ..speculation.params import SpecParams
from ..speculation.loop import SpeculativeLoop
from ..run.generate import generate
from ..run.pair import open_pair
from ..run.sampling import Sampler, SamplerParams
from .stats import examined_counts

N_WARMUP_TOKENS = 2           # a first short run compiles the kernels and fills the caches
N_CTX_SLACK = 2               # room past prompt + n_tokens in measure_cost_ratio's contexts
N_TOKENS_FOR_C = 16           # tokens decoded per model when a sweep measures c itself


def _greedy() -> SamplerParams:
    return SamplerParams(temp=0.0, seed=1)


# ---- measuring c ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeCounters:
    """A snapshot of a Context's decode counters (llama_perf_context analogue)."""
    n_decode: int       # decode calls
    n_eval: int         # token rows evaluated
    t_decode: float     # seconds spent in decode

    @classmethod
    def of(cls, ctx) -> "DecodeCounters":
        return cls(int(ctx.n_decode), int(ctx.n_eval), float(ctx.t_decode))

    def __sub__(self, other: "DecodeCounters") -> "DecodeCounters":
        return DecodeCounters(self.n_decode - other.n_decode, self.n_eval - other.n_eval,
                              self.t_decode - other.t_decode)

    def per_call(self) -> float:
        return self.t_decode / self.n_decode if self.n_decode else float("nan")

    def per_row(self) -> float:
        return self.t_decode / self.n_eval if self.n_eval else float("nan")


def cost_ratio_from_contexts(ctx_tgt, ctx_dft, since_tgt: DecodeCounters | None = None,
                             since_dft: DecodeCounters | None = None, per: str = "call") -> float:
    """c from two contexts' counters: the draft's mean decode time over the target's.

    per="call": time per decode call (Leviathan et al.'s c when every call is one token, as in
    plain decoding); per="row": time per evaluated row. Pass snapshots taken with
    `DecodeCounters.of(ctx)` as since_* to measure only what ran after them.
    """
    check_param(per in ("call", "row"), "per", per, "'call' or 'row'")
    t = DecodeCounters.of(ctx_tgt) - (since_tgt or DecodeCounters(0, 0, 0.0))
    d = DecodeCounters.of(ctx_dft) - (since_dft or DecodeCounters(0, 0, 0.0))
    num, den = (d.per_call(), t.per_call()) if per == "call" else (d.per_row(), t.per_row())
    if not (den > 0) or math.isnan(num):
        raise ParamError("cost_ratio_from_contexts: a context has no timed decodes to compare")
    return num / den


def _time_per_token(ctx, sampler_params, prompt, n_tokens: int, repeats: int) -> float:
    """Seconds per generated token of plain decoding, the fastest of `repeats` runs (the prompt
    batch is not counted; each token is one 1-row decode and one sample, generate's clock)."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        g = generate(ctx, Sampler(sampler_params), prompt, n_tokens)
        best = min(best, g.t_gen_s / max(len(g.tokens), 1))
    return best


def measure_cost_ratio(target, draft, n_tokens: int = 16, prompt=None, n_ctx: int = 128,
                       n_threads: int | None = None, repeats: int = 1,
                       activations: str | None = None, backend: str = "cpu") -> dict:
    """Measure c directly: plain greedy decoding of n_tokens on each model, one token per call.

    Returns {"c", "t_target_token_s", "t_draft_token_s"}; the prompt decode is not counted.
    `repeats` > 1 keeps the fastest of several runs (less noise on a busy machine).
    """
    check_param(isinstance(n_tokens, int) and n_tokens >= 2, "n_tokens", n_tokens, "an integer >= 2")
    bos = target.vocab.bos_id
    prompt = list(prompt) if prompt is not None else [bos if bos is not None and bos >= 0 else 0]
    pair = open_pair(target, draft, n_ctx=max(n_ctx, len(prompt) + n_tokens + N_CTX_SLACK),
                     backend=backend, n_threads=n_threads, activations=activations)
    per = {}
    for name, ctx in (("target", pair.ctx_tgt), ("draft", pair.ctx_dft)):
        best = float("inf")
        for _ in range(max(1, repeats)):
            generate(ctx, Sampler(_greedy()), prompt, N_WARMUP_TOKENS)
            best = min(best, _time_per_token(ctx, _greedy(), prompt, n_tokens, 1))
        per[name] = best
    return {"c": per["draft"] / per["target"], "t_target_token_s": per["target"],
            "t_draft_token_s": per["draft"]}


# ---- sweeps that run the loop ----------------------------------------------------------------
def _ids(model, prompt) -> list:
    if isinstance(prompt, str):
        return model.vocab.tokenize(prompt)
    return [int(t) for t in prompt]


def sweep_draft_max(target, draft, prompt, draft_max_values=(1, 2, 3, 4, 6, 8), n_predict: int = 48,
                    sampler=None, verify: str = "exact", n_ctx: int = 256, c: float | None = None,
                    synth_rates=None, synth_len=None, n_threads: int | None = None,
                    repeats: int = 1, activations: str | None = None, reeval: bool = True,
                    verify_costs: dict | None = None, backend: str = "cpu") -> dict:
    """Speculative runs for each draft-max next to plain decoding: measured and predicted speedup.

    Plain decoding and every draft-max take turns (measure/turns.take_turns, `repeats` passes);
    measured speedup = the median over the passes of plain decoding's time per token over the
    speculative run's (each pair from one pass), with its interval in "speedup_interval". Predicted:
    `cost.speedup(alpha, gamma, c)` with alpha measured in that run (`stats.alpha_from_events`)
    and c measured by `measure_cost_ratio` (unless given), and `cost.speedup_from_rates` with the
    measured per-position rates (both from the last pass's run). synth_rates (at least
    max(draft_max_values) of them; each run takes the first draft-max) / synth_len switch the loop to
    synthetic acceptance (the loop warns: its output is not valid text). With verify_costs ({k: cost
    of a k-row target batch / one row}, e.g. from `specnb.measure.bench.batch_costs`), also
    `cost.speedup_engine`: the same accounting with the measured verification price and the draft's
    evaluations per round.
    """
    from .stats import figures_of
    from .turns import Comparison, plain_run, spec_run, take_turns
    ids = _ids(target, prompt)
    sp = sampler or _greedy()
    if c is None:
        c = measure_cost_ratio(target, draft, n_tokens=N_TOKENS_FOR_C, prompt=ids,
                               n_threads=n_threads, activations=activations, backend=backend)["c"]
    pair = open_pair(target, draft, n_ctx=n_ctx, backend=backend, n_threads=n_threads,
                     activations=activations)
    generate(pair.ctx_tgt, Sampler(sp), ids, N_WARMUP_TOKENS)
    fns = {"plain": plain_run(pair, ids, sp, n_predict)}
    for g_ in draft_max_values:
        # llama.cpp wants exactly draft-max rates: a sweep takes the first g of its list; draft-max 0
        # is the plain baseline here (master's --spec-draft-n-max 0 still drafts one)
        rates = None if synth_rates is None else list(synth_rates)[:int(g_)]
        fns[int(g_)] = spec_run(pair, ids, sp, n_predict, SpecParams(
            n_max=int(g_), verify=verify, synth_rates=rates, synth_len=synth_len, reeval=reeval,
            types="none" if int(g_) == 0 else None))
    runs = take_turns(fns, max(1, repeats))
    t_plain = statistics.median(r.s_per_token for r in runs["plain"])
    out = {"draft_max": [], "alpha": [], "acc_rate_per_pos": [], "tokens_per_call": [],
           "measured_speedup": [], "speedup_interval": [], "predicted_speedup": [], "predicted_speedup_rates": [],
           "predicted_speedup_engine": [], "draft_evals_per_round": [],
           "t_per_token_s": [], "c": float(c), "t_plain_token_s": t_plain,
           "synthetic": synth_rates is not None or synth_len is not None, "stats": []}
    for g_ in draft_max_values:
        g = int(g_)
        last = runs[g][-1]
        st = figures_of(last.stats, last.events, last.n_accept, last.n_drafted)
        st["draft_evals_per_round"] = (sum(ev.n_dft_eval for ev in last.events) / len(last.events)
                                       if last.events else 0.0)
        iv = Comparison.of("", "", runs["plain"], runs[g]).speedup
        out["draft_max"].append(g)
        out["alpha"].append(st["alpha"])
        out["acc_rate_per_pos"].append(st["acc_rate_per_pos"])
        out["tokens_per_call"].append(st["tokens_per_call"])
        out["t_per_token_s"].append(statistics.median(r.s_per_token for r in runs[g]))
        out["measured_speedup"].append(iv.estimate)
        out["speedup_interval"].append((iv.low, iv.high))
        out["predicted_speedup"].append(speedup(st["alpha"], g, float(c)))
        out["predicted_speedup_rates"].append(speedup_from_rates(st["acc_rate_per_pos"], float(c)) if g else 1.0)
        out["draft_evals_per_round"].append(st["draft_evals_per_round"])
        b = (verify_costs or {}).get(g + 1)
        out["predicted_speedup_engine"].append(
            speedup_engine(st["acc_rate_per_pos"], float(c), b, st["draft_evals_per_round"])
            if b is not None and g else None)
        out["stats"].append(st)
    return out


def sweep_temperature(target, draft, prompt, temps=(0.0, 0.5, 1.0, 1.5), n_predict: int = 32,
                      draft_max: int = 3, modes=("exact", "rejection"), seeds=(1, 2, 3),
                      n_ctx: int = 256, n_threads: int | None = None,
                      activations: str | None = None, backend: str = "cpu") -> dict:
    """Acceptance against temperature for exact-match and rejection-sampling verification.

    The target samples from its full softmax at each temperature (top-k, top-p and min-p off),
    so both modes verify against the same distribution. Exact match drafts the draft's argmax
    and keeps it only when the target's own sample equals it; rejection sampling (Leviathan /
    Chen) drafts from the draft's distribution q and keeps d with probability min(1, p(d)/q(d)).
    Each point pools len(seeds) runs. Returns {"temp", mode: [accept rate], "alpha": {mode: [...]}}.
    """
    ids = _ids(target, prompt)
    pair = open_pair(target, draft, n_ctx=n_ctx, backend=backend, n_threads=n_threads,
                     activations=activations)
    ctx_t, ctx_d = pair.ctx_tgt, pair.ctx_dft
    out = {"temp": [float(t) for t in temps], "draft_max": int(draft_max), "alpha": {},
           "drafted": {}, "accepted": {}}
    for mode in modes:
        rates, alphas, drafted, accepted = [], [], [], []
        for T in temps:
            n_d = n_a = acc = exa = 0
            for s in seeds:
                sp = SamplerParams(temp=float(T), top_k=0, top_p=1.0, min_p=0.0, seed=int(s))
                loop = SpeculativeLoop(ctx_t, ctx_d, ids, n_predict, sp,
                                       SpecParams(n_max=int(draft_max), verify=mode), draft_seed=int(s))
                events = list(loop.rounds())
                n_d += loop.n_drafted
                n_a += loop.n_accept
                a, e = examined_counts(events)
                acc, exa = acc + a, exa + e
            rates.append(n_a / n_d if n_d else 0.0)
            alphas.append(alpha_from_counts(acc, exa))
            drafted.append(n_d)
            accepted.append(n_a)
        out[mode], out["alpha"][mode] = rates, alphas
        out["drafted"][mode], out["accepted"][mode] = drafted, accepted
    return out
