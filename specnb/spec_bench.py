"""`specnb bench --spec`: the speculative loop's figures on the default pair, side by side.

- per prompt: plain and speculative tokens/s (greedy), acceptance per position, mean accepted
  length, and the draft's token evaluations per round with and without the re-evaluation fix;
- the loop's own overhead: the time of the rounds beyond their draft and target decodes
  (Python bookkeeping, sampling, copies), as a fraction of the round;
- the draft-to-target cost ratio c, the target's k-row verification cost b(k), and the measured
  speedup against draft-max 1..8 beside two predictions from the measured c and acceptance:
  Leviathan et al. 2023's (verification as cheap as one token, b = 1) and the same accounting
  with the measured b(gamma + 1) and draft evaluations per round (`cost.speedup_engine`), for
  the real pair and for synthetic acceptance rates. The sweeps run with the re-evaluation fix
  (every draft evaluation a one-row decode) and p_min = 0 (every draft is gamma tokens).
All figures are ratios measured in one run on a shared machine; compare them, not the times.
"""
from __future__ import annotations

import statistics
import warnings

from .context import Context
from .loop import SpecParams, SpeculativeLoop, generate
from .sampling import Sampler, SamplerParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


def _spec_run(ctx_t, ctx_d, ids, n_predict, sp, **kw):
    t0, d0 = ctx_t.t_decode, ctx_d.t_decode
    loop = SpeculativeLoop(ctx_t, ctx_d, ids, n_predict, sp, SpecParams(**kw))
    events = list(loop.rounds())
    r = loop.results()[0]
    st = loop.spec.stats()[0]
    t_dec = (ctx_t.t_decode - t0) + (ctx_d.t_decode - d0)
    t_rounds = sum(ev.t_round for ev in events)
    n_eval = [ev.n_dft_eval for ev in events]
    return {
        "tokens": r.tokens, "tok_s": len(r.tokens) / r.t_gen_s if r.t_gen_s else 0.0,
        "n_rounds": r.n_rounds, "n_drafted": r.n_drafted, "n_accept": r.n_accept,
        "acc_rate_per_pos": st["acc_rate_per_pos"], "mean_acc_len": st["mean_acc_len"],
        "draft_evals_per_round": sum(n_eval) / max(len(n_eval), 1),
        "mean_draft_len": sum(len(ev.slot.draft) for ev in events) / max(len(events), 1),
        # everything in the rounds that is not a decode (prefill excluded on both sides)
        "overhead_frac": max(t_rounds - (t_dec - loop.t_prompt), 0.0) / t_rounds if t_rounds else 0.0,
    }


def spec_bench(n_predict: int = 64, n_threads=None, backend: str = "cpu", sweep: bool = True,
               sweep_n_predict: int = 48, draft_max_values=(1, 2, 3, 4, 5, 6, 8),
               activations: str = "f32") -> dict:
    from .cost import measure_cost_ratio, sweep_draft_max
    from .model import load_model
    from .models import default_draft_path, default_target_path
    tgt = load_model(default_target_path())
    dft = load_model(default_draft_path())
    ctx_t = Context(tgt, n_ctx=512, backend=backend, n_threads=n_threads, activations=activations)
    ctx_d = Context(dft, n_ctx=512, backend=backend, n_threads=n_threads, activations=activations)
    sp = SamplerParams(temp=0.0, seed=1)
    generate(ctx_t, Sampler(sp), tgt.vocab.tokenize("warm up"), 4)
    out = {"prompts": [], "activations": activations}
    for text in PROMPTS:
        ids = tgt.vocab.tokenize(text)
        plain = generate(ctx_t, Sampler(sp), ids, n_predict)
        row = {"prompt": text, "plain_tok_s": plain.tok_per_s}
        for reeval in (True, False):
            r = _spec_run(ctx_t, ctx_d, ids, n_predict, sp, n_max=3, reeval=reeval)
            row["llama.cpp" if reeval else "no-reeval"] = {k: v for k, v in r.items() if k != "tokens"}
            row["identical"] = row.get("identical", True) and r["tokens"] == plain.tokens
        out["prompts"].append(row)
    c = measure_cost_ratio(tgt, dft, n_tokens=24, n_threads=n_threads, repeats=3,
                           activations=activations)
    out["c"] = c["c"]
    out["t_target_token_ms"] = 1e3 * c["t_target_token_s"]
    out["t_draft_token_ms"] = 1e3 * c["t_draft_token_s"]
    if sweep:
        from .bench import batch_costs
        ks = sorted({g + 1 for g in draft_max_values} | {1})
        # fastest runs, as the sweeps keep the fastest of their repeats (and c its fastest)
        bt = batch_costs(ctx_t, tgt.vocab.tokenize(PROMPTS[2]) * 4, sizes=ks, reps=9, stat="min")
        out["verify_cost_measured"] = {k: bt[k] / bt[1] for k in ks}
        # the measured shape matters (2 rows share one weight decode and cost little more than
        # one; from 4 rows each row pays its own multiply-adds), so the model takes the measured
        # points, only made non-decreasing in k (a busy machine makes single points jump)
        out["verify_cost"], run = {}, 1.0
        for k in ks:
            run = max(run, out["verify_cost_measured"][k])
            out["verify_cost"][k] = run
        out["sweeps"] = {}
        prompt = tgt.vocab.tokenize(PROMPTS[2])
        settings = [("real pair", None)] + [(f"synthetic {a}", [a ** (i + 1) for i in range(8)])
                                            for a in (0.5, 0.7, 0.9)]
        for name, rates in settings:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = sweep_draft_max(tgt, dft, prompt, draft_max_values, sweep_n_predict, c=c["c"],
                                    synth_rates=rates, n_threads=n_threads, repeats=2,
                                    activations=activations, reeval=False,
                                    verify_costs=out["verify_cost"])
            errs = [abs(m - p) / p for m, p in zip(s["measured_speedup"], s["predicted_speedup_rates"])]
            errs_e = [abs(m - p) / p for m, p in zip(s["measured_speedup"], s["predicted_speedup_engine"])]
            out["sweeps"][name] = {
                "draft_max": s["draft_max"], "measured": s["measured_speedup"],
                "predicted": s["predicted_speedup_rates"], "alpha": s["alpha"],
                "predicted_engine": s["predicted_speedup_engine"],
                "draft_evals_per_round": s["draft_evals_per_round"],
                "max_rel_error": max(errs), "median_rel_error": statistics.median(errs),
                "max_rel_error_engine": max(errs_e), "median_rel_error_engine": statistics.median(errs_e)}
    return out


def format_spec_bench(r: dict) -> str:
    L = [f"speculative decoding, default pair (greedy, draft-max 3, activations "
         f"{r.get('activations', 'f32')})", ""]
    L.append("prompt                       | plain tok/s | spec tok/s (llama.cpp / no-reeval) | "
             "acc/pos              | mean acc len | draft evals/round | loop overhead")
    for p in r["prompts"]:
        a, b = p["llama.cpp"], p["no-reeval"]
        rates = " ".join(f"{x:.2f}" for x in a["acc_rate_per_pos"])
        L.append(f"{p['prompt'][:28]:28s} | {p['plain_tok_s']:11.1f} | {a['tok_s']:8.1f} / {b['tok_s']:8.1f}"
                 f"                   | {rates:20s} | {a['mean_acc_len']:12.2f} | "
                 f"{a['draft_evals_per_round']:5.2f} / {b['draft_evals_per_round']:5.2f}     | "
                 f"{100 * a['overhead_frac']:4.1f}% / {100 * b['overhead_frac']:4.1f}%"
                 + ("" if p["identical"] else "   OUTPUT DIFFERS FROM PLAIN"))
    L.append("")
    L.append(f"cost ratio c = t_draft_token / t_target_token = {r['c']:.3f} "
             f"({r['t_draft_token_ms']:.2f} ms / {r['t_target_token_ms']:.2f} ms)")
    if "verify_cost" in r:
        L.append("target verification batch b(k) = cost of k rows / 1 row: "
                 + "  ".join(f"b({k})={v:.2f}" for k, v in r["verify_cost_measured"].items() if k > 1))
    for name, s in r.get("sweeps", {}).items():
        L.append(f"\nspeedup vs draft-max γ, {name}: measured / Leviathan (b = 1) / engine model "
                 f"(measured b(γ+1), draft evals per round)")
        L.append(f"  error against Leviathan: max {100 * s['max_rel_error']:.0f}%, median "
                 f"{100 * s['median_rel_error']:.0f}%; against the engine model: max "
                 f"{100 * s['max_rel_error_engine']:.0f}%, median {100 * s['median_rel_error_engine']:.0f}%")
        L.append("  " + "  ".join(f"γ={g}: {m:.2f}/{p:.2f}/{e:.2f}" for g, m, p, e in
                                  zip(s["draft_max"], s["measured"], s["predicted"], s["predicted_engine"])))
    return "\n".join(L)
