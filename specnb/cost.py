"""The cost model of speculative decoding, and the measurements that feed it.

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
is Eq. 1 again. `sweep_draft_max` and `sweep_temperature` run the loop and collect the data
the plots in `specnb.plots` draw.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import ParamError, check_param


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
    if alpha > 1.0 - 1e-6:   # 1 + a + ... + a^gamma, well conditioned near 1
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


def _check_rates(rates) -> list:
    try:
        rates = [float(r) for r in rates]
    except (TypeError, ValueError):
        raise ParamError(f"invalid rates={rates!r}: expected a list of numbers in [0, 1]") from None
    for i, r in enumerate(rates):
        check_param(math.isfinite(r) and 0.0 <= r <= 1.0, f"rates[{i}]", r, "a number in [0, 1]")
    return rates


def expected_tokens_from_rates(rates) -> float:
    """Expected tokens per target call from unconditional acceptance per position: 1 + sum(rates).

    rates[i] is the fraction of drafts whose first i+1 tokens were all accepted (llama.cpp's
    `#acc rate/pos`, `impl_stats(...)["acc_rate_per_pos"]`). With rates[i] = alpha^(i+1) this
    equals `expected_tokens_per_call(alpha, len(rates))`.
    """
    return 1.0 + sum(_check_rates(rates))


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
    for _ in range(100):
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


def examined_counts(events) -> tuple[int, int]:
    """(accepted, examined) draft tokens over RoundEvents (replayed rounds are not new drafts)."""
    acc = exa = 0
    for ev in events:
        for r in ev.slots:
            if r.replay or not r.draft:
                continue
            acc += r.n_accepted
            exa += r.n_accepted + (1 if r.n_accepted < len(r.draft) else 0)
    return acc, exa


def alpha_from_events(events) -> float:
    """`alpha_from_counts` over a run's RoundEvents."""
    return alpha_from_counts(*examined_counts(events))


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


def measure_cost_ratio(target, draft, n_tokens: int = 16, prompt=None, n_ctx: int = 128,
                       n_threads: int | None = None, repeats: int = 1,
                       activations: str = "f32") -> dict:
    """Measure c directly: plain greedy decoding of n_tokens on each model, one token per call.

    Returns {"c", "t_target_token_s", "t_draft_token_s"}; the prompt decode is not counted.
    `repeats` > 1 keeps the fastest of several runs (less noise on a busy machine).
    """
    from .context import Context
    from .loop import generate
    from .sampling import Sampler, SamplerParams
    check_param(isinstance(n_tokens, int) and n_tokens >= 2, "n_tokens", n_tokens, "an integer >= 2")
    prompt = list(prompt) if prompt is not None else [target.vocab.bos_id if
                                                       target.vocab.bos_id is not None and
                                                       target.vocab.bos_id >= 0 else 0]
    per = {}
    for name, m in (("target", target), ("draft", draft)):
        ctx = Context(m, n_ctx=max(n_ctx, len(prompt) + n_tokens + 2), n_threads=n_threads,
                      activations=activations)
        best = float("inf")
        for _ in range(max(1, repeats)):
            # the first call warms up (Numba compilation, caches); then the timed run
            generate(ctx, Sampler(SamplerParams(temp=0.0, seed=1)), prompt, 2)
            g = generate(ctx, Sampler(SamplerParams(temp=0.0, seed=1)), prompt, n_tokens)
            best = min(best, g.t_gen_s / max(len(g.tokens) - 1, 1))
        per[name] = best
    return {"c": per["draft"] / per["target"], "t_target_token_s": per["target"],
            "t_draft_token_s": per["draft"]}


# ---- sweeps that run the loop ----------------------------------------------------------------
def _ids(model, prompt) -> list:
    if isinstance(prompt, str):
        return model.vocab.tokenize(prompt)
    return [int(t) for t in prompt]


def run_stats(loop, events) -> dict:
    """The figures one run gives the plots: llama.cpp's stats plus timing and alpha."""
    from .speculative import impl_stats
    st = dict(impl_stats(loop.impl))
    n_committed = sum(len(r.committed) for ev in events for r in ev.slots)
    acc, exa = examined_counts(events)
    st.update(n_rounds=len(events), n_committed=n_committed,
              tokens_per_call=n_committed / len(events) if events else 0.0,
              accept_rate=loop.n_accept / loop.n_drafted if loop.n_drafted else 0.0,
              alpha=alpha_from_counts(acc, exa), n_examined=exa,
              t_gen_s=sum(ev.t_round for ev in events))
    st["t_per_token_s"] = st["t_gen_s"] / n_committed if n_committed else float("nan")
    return st


def sweep_draft_max(target, draft, prompt, draft_max_values=(1, 2, 3, 4, 6, 8), n_predict: int = 48,
                    sampler=None, verify: str = "exact", n_ctx: int = 256, c: float | None = None,
                    synth_rates=None, synth_len=None, n_threads: int | None = None,
                    repeats: int = 1, activations: str = "f32", reeval: bool = True,
                    verify_costs: dict | None = None) -> dict:
    """Speculative runs for each draft-max next to plain decoding: measured and predicted speedup.

    Measured speedup = plain decoding's time per token / speculative time per token. Predicted:
    `speedup(alpha, gamma, c)` with alpha measured in that run (`alpha_from_events`) and c
    measured by `measure_cost_ratio` (unless given), and `speedup_from_rates` with the measured
    per-position rates. synth_rates (at least max(draft_max_values) of them; each run takes the first
    draft-max) / synth_len switch the loop to synthetic acceptance (the
    loop warns: its output is not valid text). The fastest of `repeats` runs is kept.
    With verify_costs ({k: cost of a k-row target batch / one row}, e.g. from
    `specnb.bench.batch_costs`), also `speedup_engine`: the same accounting with the measured
    verification price and the draft's evaluations per round.
    """
    from .context import Context
    from .loop import SpecParams, SpeculativeLoop, generate
    from .sampling import Sampler, SamplerParams
    ids = _ids(target, prompt)
    sp = sampler or SamplerParams(temp=0.0, seed=1)
    if c is None:
        c = measure_cost_ratio(target, draft, n_tokens=16, prompt=ids, n_threads=n_threads,
                               activations=activations)["c"]
    ctx_t = Context(target, n_ctx=n_ctx, n_threads=n_threads, activations=activations)
    ctx_d = Context(draft, n_ctx=n_ctx, n_threads=n_threads, activations=activations)
    generate(ctx_t, Sampler(sp), ids, 2)      # warm up
    t_plain = float("inf")
    for _ in range(max(1, repeats)):
        g = generate(ctx_t, Sampler(sp), ids, n_predict)
        t_plain = min(t_plain, g.t_gen_s / max(len(g.tokens) - 1, 1))
    out = {"draft_max": [], "alpha": [], "acc_rate_per_pos": [], "tokens_per_call": [],
           "measured_speedup": [], "predicted_speedup": [], "predicted_speedup_rates": [],
           "predicted_speedup_engine": [], "draft_evals_per_round": [],
           "t_per_token_s": [], "c": float(c), "t_plain_token_s": t_plain,
           "synthetic": synth_rates is not None or synth_len is not None, "stats": []}
    for g_ in draft_max_values:
        best = None
        for _ in range(max(1, repeats)):
            # llama.cpp wants exactly draft-max rates: a sweep takes the first g of its list
            rates = None if synth_rates is None else list(synth_rates)[:int(g_)]
            loop = SpeculativeLoop(ctx_t, ctx_d, ids, n_predict, sp,
                                   SpecParams(n_max=int(g_), verify=verify, synth_rates=rates,
                                              synth_len=synth_len, reeval=reeval))
            events = list(loop.rounds())
            st = run_stats(loop, events)
            st["draft_evals_per_round"] = (sum(ev.n_dft_eval for ev in events) / len(events)
                                           if events else 0.0)
            if best is None or st["t_per_token_s"] < best["t_per_token_s"]:
                best = st
        st = best
        out["draft_max"].append(int(g_))
        out["alpha"].append(st["alpha"])
        out["acc_rate_per_pos"].append(st["acc_rate_per_pos"])
        out["tokens_per_call"].append(st["tokens_per_call"])
        out["t_per_token_s"].append(st["t_per_token_s"])
        out["measured_speedup"].append(t_plain / st["t_per_token_s"])
        out["predicted_speedup"].append(speedup(st["alpha"], int(g_), float(c)))
        out["predicted_speedup_rates"].append(speedup_from_rates(st["acc_rate_per_pos"], float(c))
                                              if g_ else 1.0)
        out["draft_evals_per_round"].append(st["draft_evals_per_round"])
        b = (verify_costs or {}).get(int(g_) + 1)
        out["predicted_speedup_engine"].append(
            speedup_engine(st["acc_rate_per_pos"], float(c), b, st["draft_evals_per_round"])
            if b is not None and g_ else None)
        out["stats"].append(st)
    return out


def sweep_temperature(target, draft, prompt, temps=(0.0, 0.5, 1.0, 1.5), n_predict: int = 32,
                      draft_max: int = 3, modes=("exact", "rejection"), seeds=(1, 2, 3),
                      n_ctx: int = 256, n_threads: int | None = None,
                      activations: str = "f32") -> dict:
    """Acceptance against temperature for exact-match and rejection-sampling verification.

    The target samples from its full softmax at each temperature (top-k, top-p and min-p off),
    so both modes verify against the same distribution. Exact match drafts the draft's argmax
    and keeps it only when the target's own sample equals it; rejection sampling (Leviathan /
    Chen) drafts from the draft's distribution q and keeps d with probability min(1, p(d)/q(d)).
    Each point pools len(seeds) runs. Returns {"temp", mode: [accept rate], "alpha": {mode: [...]}}.
    """
    from .context import Context
    from .loop import SpecParams, SpeculativeLoop
    from .sampling import SamplerParams
    ids = _ids(target, prompt)
    ctx_t = Context(target, n_ctx=n_ctx, n_threads=n_threads, activations=activations)
    ctx_d = Context(draft, n_ctx=n_ctx, n_threads=n_threads, activations=activations)
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

