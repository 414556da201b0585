"""`specnb bench --spec`: the speculative loop's figures on the default pair, side by side.

- per prompt: plain and speculative tokens/s (greedy), acceptance per position, mean accepted
  length, and the draft's token evaluations per round with and without the re-evaluation fix;
- the n-gram speculators (ngram-simple, ngram-map-k, ngram-cache: no draft model, cost ratio 0)
  next to draft-simple on the same prompts, one of them a code-editing request (the model
  rewrites a function it was given, so most of its answer copies the prompt);
- the loop's own overhead: the time of the rounds beyond their draft and target decodes
  (Python bookkeeping, sampling, copies), as a fraction of the round;
- the draft-to-target cost ratio c, the target's k-row verification cost b(k), and the measured
  speedup against draft-max 1..8 beside two predictions from the measured c and acceptance:
  Leviathan et al. 2023's (verification as cheap as one token, b = 1) and the same accounting
  with the measured b(gamma + 1) and draft evaluations per round (`cost.speedup_engine`), for
  the real pair and for synthetic acceptance rates. The sweeps run with the re-evaluation fix
  (every draft evaluation a one-row decode) and p_min = 0 (every draft is gamma tokens).
All figures are ratios measured in one run on a shared machine; compare them, not the times.

`python -m specnb.measure.spec_bench ngram-edit -m MODEL` measures plain decoding against ngram-simple
on the code-editing request for several draft-max values, side by side in one process, and
prints the median speedup of several runs.
"""
from __future__ import annotations

import statistics
import warnings

from ..run.context import Context
from ..speculation.params import SpecParams
from ..speculation.loop import SpeculativeLoop
from ..run.generate import generate
from ..run.sampling import Sampler, SamplerParams

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-cache")
# a code-editing request: the answer copies most of the function it was given
CODE_EDIT_FUNCTION = '''def moving_average(values, window):
    """Return the moving averages of values over a sliding window."""
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            result.append(total / window)
    return result
'''
CODE_EDIT_REQUEST = ("Add type hints to this Python function. Keep everything else exactly as it "
                     "is and reply with the code only.\n\n```python\n" + CODE_EDIT_FUNCTION + "```")


def code_edit_prompt(vocab) -> list:
    """The code-editing request in the model's chat template, as token ids."""
    from .turns import chat_ids
    return chat_ids(vocab, CODE_EDIT_REQUEST, True)


def _type_figures(run) -> dict:
    """bench --spec's figures of one speculative Run (measure/turns.py)."""
    evs = run.events
    n = max(len(evs), 1)
    t_rounds = sum(ev.t_round for ev in evs)
    st = run.stats
    return {"tok_s": run.tok_s, "n_rounds": run.n_rounds, "n_drafted": run.n_drafted, "n_accept": run.n_accept,
            "acc_rate_per_pos": st.get("specnb_acc_rate_per_pos", []),
            "mean_acc_len": st.get("specnb_mean_acc_len", 0.0),
            "draft_evals_per_round": sum(ev.n_dft_eval for ev in evs) / n,
            "mean_draft_len": sum(len(ev.slot.draft) for ev in evs) / n,
            # everything in the rounds that is not a decode
            "overhead_frac": max(t_rounds - run.t_decode_s, 0.0) / t_rounds if t_rounds else 0.0}


def compare_types(pair, prompts, n_predict: int, sp, n_max: int = 3, passes: int = 1) -> list:
    """Per prompt: plain decoding, draft-simple (with and without re-evaluation) and each n-gram type,
    taking turns (measure/turns.take_turns); each configuration's figures from its last run."""
    from .turns import plain_run, spec_run, take_turns
    rows = []
    configs = [("llama.cpp", dict(reeval=True)), ("no-reeval", dict(reeval=False))] + \
        [(t, dict(types=t)) for t in NGRAM_TYPES]
    for text, ids in prompts:
        fns = {"plain": plain_run(pair, ids, sp, n_predict)}
        fns.update({name: spec_run(pair, ids, sp, n_predict, SpecParams(n_max=n_max, **kw)) for name, kw in configs})
        runs = take_turns(fns, passes)
        row = {"prompt": text, "plain_tok_s": statistics.median(r.tok_s for r in runs["plain"]),
               "identical": all(r.tokens == runs["plain"][0].tokens for rs in runs.values() for r in rs)}
        for name, _ in configs:
            row[name] = _type_figures(runs[name][-1])
        rows.append(row)
    return rows


def spec_bench(n_predict: int = 64, n_threads=None, backend: str = "cpu", sweep: bool = True,
               sweep_n_predict: int = 48, draft_max_values=(1, 2, 3, 4, 5, 6, 8),
               activations: str | None = None) -> dict:
    from .experiments import measure_cost_ratio, sweep_draft_max
    from ..run.pair import open_pair
    p = open_pair(n_ctx=512, backend=backend, n_threads=n_threads, activations=activations)
    tgt, dft, ctx_t = p.target, p.draft, p.ctx_tgt
    sp = SamplerParams(temp=0.0, seed=1)
    generate(ctx_t, Sampler(sp), tgt.vocab.tokenize("warm up"), 4)
    prompts = [(t, tgt.vocab.tokenize(t)) for t in PROMPTS] + [("(code edit)", code_edit_prompt(tgt.vocab))]
    out = {"prompts": compare_types(p, prompts, n_predict, sp), "activations": ctx_t.activations}
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
                "draft_max": s["draft_max"], "measured": s["measured_speedup"], "interval": s["speedup_interval"],
                "predicted": s["predicted_speedup_rates"], "alpha": s["alpha"],
                "predicted_engine": s["predicted_speedup_engine"],
                "draft_evals_per_round": s["draft_evals_per_round"],
                "max_rel_error": max(errs), "median_rel_error": statistics.median(errs),
                "max_rel_error_engine": max(errs_e), "median_rel_error_engine": statistics.median(errs_e)}
    return out


def format_spec_bench(r: dict) -> str:
    L = [f"speculative decoding, default pair (greedy, draft-max 3, activations "
         f"{r.get('activations', 'q8')})", ""]
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
    L.append("the n-gram speculators (no draft model: cost ratio c = 0), same prompts, draft-max 3: "
             "spec tok/s (x plain) | drafted / accepted | mean acc len")
    L.append("prompt                       | " + " | ".join(f"{t:32s}" for t in NGRAM_TYPES))
    for p in r["prompts"]:
        cells = []
        for t in NGRAM_TYPES:
            x = p[t]
            cells.append(f"{x['tok_s']:6.1f} ({x['tok_s'] / max(p['plain_tok_s'], 1e-9):4.2f}x) "
                         f"{x['n_drafted']:4d}/{x['n_accept']:<4d} {x['mean_acc_len']:4.2f}")
        L.append(f"{p['prompt'][:28]:28s} | " + " | ".join(f"{c:32s}" for c in cells))
    L.append("")
    L.append(f"cost ratio c = t_draft_token / t_target_token = {r['c']:.3f} "
             f"({r['t_draft_token_ms']:.2f} ms / {r['t_target_token_ms']:.2f} ms)")
    if "verify_cost" in r:
        L.append("target verification batch b(k) = cost of k rows / 1 row: "
                 + "  ".join(f"b({k})={v:.2f}" for k, v in r["verify_cost_measured"].items() if k > 1))
    for name, s in r.get("sweeps", {}).items():
        L.append(f"\nspeedup vs draft-max γ, {name}: measured (min-max of the pairs) / Leviathan (b = 1) / "
                 f"engine model (measured b(γ+1), draft evals per round)")
        L.append(f"  error against Leviathan: max {100 * s['max_rel_error']:.0f}%, median "
                 f"{100 * s['median_rel_error']:.0f}%; against the engine model: max "
                 f"{100 * s['max_rel_error_engine']:.0f}%, median {100 * s['median_rel_error_engine']:.0f}%")
        spans = s.get("interval") or [(m, m) for m in s["measured"]]
        L.append("  " + "  ".join(f"γ={g}: {m:.2f} ({lo:.2f}-{hi:.2f})/{p:.2f}/{e:.2f}" for g, m, (lo, hi), p, e in
                                  zip(s["draft_max"], s["measured"], spans, s["predicted"], s["predicted_engine"])))
    return "\n".join(L)


# ---- ngram-simple on a code-editing request, plain against speculative ---------------------------
def ngram_edit_bench(model_path=None, draft_max_values=(1, 2, 3, 4, 6), n_predict: int = 128,
                     repeats: int = 3, size_n: int = 12, n_threads=None, activations: str | None = None,
                     types: str = "ngram-simple") -> dict:
    """Plain decoding against ngram-simple at each draft-max on the code-editing request.

    Each speculative run is paired with a plain run just before it (one process, one context),
    `repeats` times; speedup = plain time per token / speculative time per token, per pair, the
    median over the pairs, both in wall time and in this process's CPU time (which other jobs
    on a shared machine disturb less). The outputs must be identical.
    """
    import time
    from ..model import load_model
    from ..model.registry import default_target_path
    model = load_model(model_path or default_target_path())
    ids = code_edit_prompt(model.vocab)
    ctx = Context(model, n_ctx=len(ids) + n_predict + 64, n_threads=n_threads, activations=activations)
    sp = SamplerParams(temp=0.0, seed=1)
    generate(ctx, Sampler(sp), ids, 4)                                    # warm up

    def timed_run(fn):
        c0, w0 = time.process_time(), time.perf_counter()
        tokens, t_prompt, stats = fn()
        c1, w1 = time.process_time(), time.perf_counter()
        return tokens, (w1 - w0 - t_prompt) / len(tokens), (c1 - c0) / len(tokens), stats

    def plain():
        g = generate(ctx, Sampler(sp), ids, n_predict)
        return g.tokens, g.t_prompt_s, None

    def spec(dm):
        loop = SpeculativeLoop(ctx, None, ids, n_predict, sp,
                               SpecParams(types=types, n_max=dm, ngram_size_n=size_n))
        r = loop.run()[0]
        st = loop.chain.stats()[0]
        return r.tokens, r.t_prompt_s, {"n_rounds": r.n_rounds, "n_drafted": r.n_drafted,
                                        "n_accept": r.n_accept, "mean_acc_len": st["mean_acc_len"],
                                        "acc_rate_per_pos": st["acc_rate_per_pos"]}
    rows = {dm: {"wall": [], "cpu": []} for dm in draft_max_values}
    plain_wall, identical, text = [], True, ""
    for _ in range(repeats):
        for dm in draft_max_values:
            p_tok, p_wall, p_cpu, _ = timed_run(plain)
            s_tok, s_wall, s_cpu, st = timed_run(lambda dm=dm: spec(dm))
            identical = identical and s_tok == p_tok
            text = model.vocab.detokenize(p_tok)
            plain_wall.append(p_wall)
            rows[dm]["wall"].append(p_wall / s_wall)
            rows[dm]["cpu"].append(p_cpu / s_cpu)
            rows[dm].update(st, tok_s=1.0 / s_wall)
    med = statistics.median
    for x in rows.values():
        x["speedup"], x["speedup_cpu"] = med(x["wall"]), med(x["cpu"])
    return {"model": str(model_path or default_target_path()), "types": types, "size_n": size_n,
            "n_predict": n_predict, "repeats": repeats, "n_prompt": len(ids), "identical": identical,
            "n_generated": len(p_tok), "plain_tok_s": 1.0 / med(plain_wall), "text": text,
            "draft_max": rows}


def format_ngram_edit_bench(r: dict) -> str:
    L = [f"{r['types']} on a code-editing request ({r['n_prompt']} prompt tokens, {r['n_generated']} "
         f"generated, greedy, size_n {r['size_n']}), {r['model']}",
         f"plain: {r['plain_tok_s']:.2f} tok/s (median); outputs identical: "
         f"{'yes' if r['identical'] else 'NO'}; {r['repeats']} plain/speculative pairs per draft-max",
         "draft-max | speedup wall (each pair)        | speedup CPU time (each pair)    | rounds | "
         "drafted / accepted | mean acc len"]
    for dm, x in r["draft_max"].items():
        w = " ".join(f"{v:.2f}" for v in x["wall"])
        c = " ".join(f"{v:.2f}" for v in x["cpu"])
        L.append(f"{dm:9d} | {x['speedup']:5.2f}x ({w:22s}) | {x['speedup_cpu']:5.2f}x ({c:22s}) | "
                 f"{x['n_rounds']:6d} | {x['n_drafted']:7d} / {x['n_accept']:<7d} | {x['mean_acc_len']:.2f}")
    return "\n".join(L)



# ---- draft-length policies side by side: plain, fixed 1/2/4/8, heuristic, auto -----------------
POLICIES = ("plain", "1", "2", "4", "8", "heuristic", "auto")


def compare_policies(target, draft, prompts, policies=POLICIES, n_predict: int = 64,
                     n_threads=None, activations: str | None = None, backend: str = "cpu",
                     repeats: int = 3, say=None, line: dict | None = None) -> dict:
    """Per prompt (label, text, chat, sampling name, SamplerParams) and policy: tok/s, the speed-up
    over plain decoding with its interval, the lengths chosen, and whether the output equals plain
    decoding's. The policies take turns (measure/turns.take_turns: `repeats` passes, each running
    plain decoding and every policy once, the order rotated each pass); a cell's speed-up is the
    median of its runs' speeds over the same pass's plain run (`specnb demo --policies`). `line`: a
    waterfall line's fields (measure/waterfall.py) every policy runs with, its "draft" included
    (DRAFT_Q4_0: the draft requantized); `auto` starts from the pair's costs record, measured once."""
    from .costs import machine_costs
    from .turns import Comparison, chat_ids, plain_run, spec_run, take_turns, warm_runs
    from .waterfall import stage_pairs
    from ..run.pair import open_pair, warm_up
    say = say or (lambda *a: None)
    line = dict(line or {})
    base = open_pair(target, draft, n_ctx=1024, backend=backend, n_threads=n_threads, activations=activations)
    warm_up(base.ctx_tgt, base.ctx_dft)
    pair = stage_pairs(base, [("", line, False)])[line.get("draft")]
    fields = {k: v for k, v in line.items() if k != "draft"}
    pols = [p for p in policies if p != "plain"]
    params = {p: SpecParams(**{**fields, "n_max": p}).validate() for p in pols}
    if any(p.schedule == "auto" for p in params.values()):
        machine_costs(pair, fields.get("draft_vocab") or None, on_measure=say)
    rows = []
    for label, text, chat, sname, sp in prompts:
        ids = chat_ids(pair.target.vocab, text, chat)
        fns = {"plain": plain_run(pair, ids, sp, n_predict)}
        fns.update({p: spec_run(pair, ids, sp, n_predict, params[p]) for p in pols})
        warm_runs([(pair, ids, sp, params[p]) for p in pols])
        runs = take_turns(fns, max(repeats, 1))
        row = {"prompt": label, "sampling": sname, "policies": {}}
        plain_med = statistics.median(r.tok_s for r in runs["plain"])
        if "plain" in policies:
            row["policies"]["plain"] = {"tok_s": plain_med, "identical": True, "runs": [r.tok_s for r in runs["plain"]],
                                        "speedup": 1.0, "interval": [1.0, 1.0]}
        for pol in pols:
            c = Comparison.of(label, sname, runs["plain"], runs[pol])
            iv = c.speedup
            last = runs[pol][-1]
            row["policies"][pol] = {"tok_s": c.spec_tok_s, "identical": c.identical,
                                    "runs": [r.tok_s for r in runs[pol]], "plain_tok_s": plain_med,
                                    "speedup": iv.estimate, "interval": [iv.low, iv.high],
                                    "accept_rate": c.accept_rate, "chosen": last.draft_len.get("chosen"),
                                    "n_probes": last.draft_len.get("n_probes", 0)}
            say(f"  {label} [{sname}] {pol}: {c.spec_tok_s:.2f} tok/s (median of {len(runs[pol])}), {c.said()}"
                + ("" if c.identical else "  OUTPUT DIFFERS"))
        fixed = [row["policies"][p]["speedup"] for p in pols if p.isdigit()]
        row["best_fixed"] = max(fixed) if fixed else None
        rows.append(row)
    from ..model.registry import registry_name
    return {"target": str(target), "draft": registry_name(pair.draft), "line": line, "n_predict": n_predict,
            "activations": pair.ctx_tgt.activations, "policies": list(policies), "rows": rows,
            "repeats": max(repeats, 1),
            "identical": all(p["identical"] for r in rows for p in r["policies"].values())}


def format_policies(r: dict) -> str:
    pols = r["policies"]
    line = {k: v for k, v in (r.get("line") or {}).items() if k != "draft"}
    L = [f"draft-length policies, {r['draft']} drafting for {r['target']}, {r['n_predict']} tokens, "
         f"activations {r['activations']}" + (f", every run with {line}" if line else "") + ": median tok/s "
         f"of {r.get('repeats', 1)} runs taking turns "
         f"(speed-up: the median over the passes of the run's speed / that pass's plain run)",
         f"{'prompt':<26} | " + " | ".join(f"{p:>13}" for p in pols) + " | auto / best fixed"]
    for row in r["rows"]:
        cells = [f"{row['policies'][p]['tok_s']:5.1f} ({row['policies'][p]['speedup']:4.2f}x)"
                 + ("" if row["policies"][p]["identical"] else "!") for p in pols]
        spans = [f"{row['policies'][p]['interval'][0]:.2f}-{row['policies'][p]['interval'][1]:.2f}" for p in pols]
        ratio = ""
        if "auto" in row["policies"] and row["best_fixed"]:
            ratio = f"{row['policies']['auto']['speedup'] / row['best_fixed']:.2f}"
        L.append(f"{(row['prompt'] + ' [' + row['sampling'] + ']')[:26]:<26} | " + " | ".join(
            f"{c:>13}" for c in cells) + f" | {ratio}")
        L.append(f"{'  interval (min-max)':<26} | " + " | ".join(f"{x:>13}" for x in spans) + " |")
    for row in r["rows"]:
        if "auto" in row["policies"]:
            a = row["policies"]["auto"]
            L.append(f"  auto on {row['prompt']}: lengths chosen {a['chosen']}, probes {a['n_probes']}")
    L.append(f"every output identical to plain decoding: {'yes' if r['identical'] else 'NO (! marks)'}")
    return "\n".join(L)


if __name__ == "__main__":
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m specnb.measure.spec_bench")
    ap.add_argument("what", choices=["ngram-edit"])
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--draft-max", default="1,2,3,4,6", help="comma-separated draft-max values")
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spec-ngram-size-n", type=int, default=12)
    ap.add_argument("--spec-type", default="ngram-simple")
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--activations", choices=["q8", "f32"], default=None,
                    help="q8 (the CPU default, the fast path) or f32 (the exact reference path)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = ngram_edit_bench(a.model, [int(x) for x in a.draft_max.split(",")], a.n_predict, a.repeats,
                           a.spec_ngram_size_n, a.threads, a.activations, a.spec_type)
    print(json.dumps(res) if a.json else format_ngram_edit_bench(res))
