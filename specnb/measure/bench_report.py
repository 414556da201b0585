"""The tables and the goals of `specnb bench` (from the result dict of `specnb.measure.bench.bench`).

    format_bench(r)    the measurements: one table per model, modes and llama.cpp side by side
    goals(r)           [(goal, measured, met)], met True / False / None (not measured in this run)
                       or, for the goals that depend on the activation mode, {mode: that}
    format_goals(r)    goals(r) as text, each goal marked met or MISSED
(what each row beyond the first costs, beside its cost at the int8 compute limit, is bench.py's
extra_row_costs; the price it is judged by is measure/verify_cost.py's)
"""
from __future__ import annotations

from .verify_cost import EXTRA_ROW_CHEAP

MIN_BANDWIDTH_FRAC = 0.7        # of the machine's streaming bandwidth, while decoding (the bench probe)
PAIR_BATCH_GOALS = ((3, 1.2), (5, 1.5), (9, 2.5))     # (rows, at most this many one-row decodes)
DEFAULT_BATCH_GOALS = ((5, 2.0),)
PAIR_SPEEDUP_GOAL = 1.3         # speculative tok/s / llama.cpp's plain tok/s of the target
# a cliff: going from k to k + 1 rows costs more than CLIFF_FACTOR times the median such step
# and more than CLIFF_MIN one-row decodes
CLIFF_FACTOR, CLIFF_MIN = 2.0, 0.0
# a row beyond the first, in one-row steps, at most (by SIMD level; the others: the AVX2 bound) at
# k = EXTRA_ROW_KS rows: one VNNI instruction does the 64-byte dot product AVX2 does in two pairs
EXTRA_ROW_GOALS = {"avx512": 0.15, "avxvnni": EXTRA_ROW_CHEAP, "avx2": EXTRA_ROW_CHEAP}
EXTRA_ROW_DEFAULT_GOAL = EXTRA_ROW_CHEAP
EXTRA_ROW_KS = (5, 9)


def _modes(r):
    # the default mode first
    d = r.get("default_activations")
    return sorted(r["modes"], key=lambda m: m != d)


def _fmt_k(v):
    return f"{v:9.2f}" if v is not None else " " * 9


def _model_table(r: dict, title: str) -> list:
    modes = _modes(r)
    lc = r.get("llama_cpp")
    L = [f"{title}: {r['model']} ({r['weight_mib']:.1f} MiB of weights, {r['decode_bytes'] / 1e9:.3f} GB "
         f"read per decoded token), backend {r['backend']}, {r['n_threads']} threads; loaded in {r['load_s']:.2f} s",
         "llama.cpp: " + (lc["source"] if lc else "not measured (give llama-bench with --llama-bench "
                                                  "PATH or SPECNB_LLAMA_BENCH)")]
    head = "                         | " + " | ".join(f"{m + ('*' if m == r.get('default_activations') else ''):>9s}"
                                               for m in modes) + " | llama.cpp"
    L += ["", head, "  " + "-" * (len(head) - 2)]

    def row(label, key, fmt, lc_val=None):
        vals = " | ".join(fmt.format(r["modes"][m][key]) if r["modes"][m].get(key) is not None else " " * 9
                          for m in modes)
        return f"  {label:23s}| {vals} | {lc_val if lc_val is not None else ''}"
    tg = f"{lc['tg_tok_s']:.1f}" if lc else None
    L.append(row("decode tok/s", "decode_tok_s", "{:9.1f}", tg))
    L.append(row("decode ms/token", "decode_ms_per_tok", "{:9.2f}", f"{1e3 / lc['tg_tok_s']:.2f}" if lc else None))
    lc_gb_s = f"{lc['weight_gb_s']:.1f}" if lc and "weight_gb_s" in lc else None
    L.append(row("weights read GB/s", "weight_gb_s", "{:9.1f}", lc_gb_s))
    if r["modes"][modes[0]].get("bandwidth_frac") is not None:
        L.append(row("of the bandwidth", "bandwidth_frac", "{:9.0%}",
                     f"{lc['bandwidth_frac']:.0%}" if lc and lc.get("bandwidth_frac") is not None else None))
    L.append(row(f"prompt tok/s ({r['n_prompt']})", "prompt_tok_s", "{:9.1f}"))
    L += ["", "  k rows: cost of a k-row batch (all rows want logits) / cost of 1 row (llama.cpp: k pp1 / pp_k)"]
    for k in r["modes"][modes[0]]["batch_cost"]:
        ref = lc["batch_cost"].get(k) if lc and "batch_cost" in lc else None
        L.append(f"  k = {k:2d}                 | " + " | ".join(_fmt_k(r["modes"][m]["batch_cost"][k]) for m in modes)
                 + f" | {'' if ref is None else f'{ref:.2f}'}")
    if r.get("macs_per_row") and all("extra_row_cost" in r["modes"][m] for m in modes):
        L += _extra_row_table(r, modes)
    return L


def _extra_row_table(r: dict, modes: list) -> list:
    # each row beyond the first, in one-row steps, and (q8) that / its cost at the int8 limit
    L = ["", f"  multiply-adds per row: {r['macs_per_row'] / 1e9:.3f} G (n_in x n_out over every matrix, "
             f"the output head included)"]
    for m in modes:
        x = r["modes"][m]
        if x.get("ideal_extra_row_cost"):
            L.append(f"  at the int8 compute limit a row beyond the first costs {x['ideal_extra_row_cost']:.3f} "
                     f"of a one-row step ({m}: {x['ideal_extra_row_cost'] * x['batch_ms'][1]:.2f} ms of "
                     f"{x['batch_ms'][1]:.2f} ms)")
    L.append("  per extra row: (cost(k) - 1) / (k - 1), in one-row steps; x: that / the cost at the int8 limit")
    L.append("                         | " + " | ".join(
        f"{m + ('*' if m == r.get('default_activations') else ''):>15s}" for m in modes))
    for k in r["modes"][modes[0]]["extra_row_cost"]:
        cells = []
        for m in modes:
            x = r["modes"][m]
            lim = (x.get("extra_row_x_limit") or {}).get(k)
            cells.append(f"{x['extra_row_cost'][k]:7.3f}" + (f" {lim:6.1f}x" if lim is not None else " " * 8))
        L.append(f"  k = {k:2d}                 | " + " | ".join(cells))
    return L


def format_bench(r: dict) -> str:
    L = ["activations: q8 = int8 blocks as llama.cpp's CPU backend rounds them (the fast path), "
         "f32 = float32 (exact against the reference); * = the default"]
    if "bandwidth" in r:
        b = r["bandwidth"]
        probes = (f"; xor {b['xor_gb_s']:.1f}, NumPy {b['numpy_gb_s']:.1f}" if "xor_gb_s" in b else "")
        L.append(f"streaming bandwidth: {b['gb_s']:.1f} GB/s ({b['how']}{probes}; runs "
                 + ", ".join(f"{x:.1f}" for x in b["runs_gb_s"]) + ")")
    if r.get("int8_peak"):
        from ..kernels.tuning import describe_int8_peak
        L.append(describe_int8_peak(r["int8_peak"]))
    if r.get("prefetch"):
        from ..kernels.tuning import describe
        L.append(describe(r["prefetch"]))
    if r.get("simd_level"):
        L.append(f"SIMD level: {r['simd_level']} (the CPU kernels' instructions; SPECNB_SIMD forces a lower one)")
    L += [""] + _model_table(r, "target" if "draft" in r else "model")
    if "draft" in r:
        L += [""] + _model_table(r["draft"], "draft")
    if "pair" in r:
        L += ["", _format_pair(r)]
    if "check" in r:
        c = r["check"]
        L.append(f"\ncheck against {c['against']}: top-1 agreement {c['top1_agree']:.3f} over "
                 f"{c['positions']} positions, max |logit diff| {c['max_abs_diff']:.2e}")
    if "memory" in r:
        m = r["memory"]
        L.append(f"\nmemory: default pair in a fresh process, n_ctx {m['n_ctx']} each, after a "
                 f"speculative run: peak RSS {m['peak_rss_mib']:.0f} MiB (weights "
                 f"{m['weights_mib']:.0f} MiB mapped, KV caches {m['kv_cache_mib']:.0f} MiB); "
                 f"default target loaded in {m['load_target_s']:.2f} s after the import")
    if "compile" in r:
        c = r["compile"]
        modes = c.get("modes", ["f32", "q8"])
        L.append(f"first call: a fresh process from its start to the first logits of "
                 f"{c.get('model', 'the default target')} in each mode, in turn: "
                 + ", ".join(modes) + " (only the kernels of its tensor types and that mode compile)")
        for name in ("cold", "warm"):
            x = c[name]
            L.append(f"  {name + ' Numba cache':16s}: {x['total_s']:6.1f} s  (load {x['load_s']:.2f} s, "
                     + ", ".join(f"first {a} decode {x[f'first_decode_{a}_s']:.1f} s" for a in modes) + ")")
        L.append(f"  Numba cache: {c['cache_mib']:.0f} MiB on disk")
    if "bandwidth_cuda" in r:
        L += ["", *format_cuda_matmul(r)]
    return "\n".join(L)


def format_cuda_matmul(r: dict) -> list:
    """bench --backend cuda's table of the quantized matmul: GPU time, GB/s, host time per call."""
    L = [f"quantized matmul, 1 activation row (weight bytes read per call; peak "
         f"{r['peak_gbs']:.0f} GB/s). GPU: CUDA events around calls queued on a busy GPU; "
         "from Python: the same calls issued one after another:",
         "  type | n_out x n_in  |  GPU us |   GB/s | of peak | from Python us",
         "  -----+---------------+---------+--------+---------+--------------"]
    for b in r["bandwidth_cuda"]:
        gpu = (f"{b['us']:7.1f} | {b['gbs']:6.0f} | {100 * b['frac_peak']:6.1f}%" if b["us"]
               else f"{'-':>7s} | {'-':>6s} | {'-':>7s}")
        L.append(f"  {b['type']:4s} | {b['n_out']:5d} x {b['n_in']:5d} | {gpu} | "
                 f"{b['host_us']:13.1f}" + (f" (prepared: {b['host_us_prepared']:.1f})"
                                            if "host_us_prepared" in b else ""))
    if "cuda_launch_us" in r:
        L.append(f"  an empty kernel's launch from Python: {r['cuda_launch_us']:.1f} us (each matmul "
                 "is two launches: the activations' permutation and the product; prepared: the two "
                 "launches made once, as the backend issues them)")
    if "cuda_launches" in r:
        c = r["cuda_launches"]
        L.append(f"  launches per decoded token: {c['per_pass']} = {c['per_layer']} per layer x "
                 f"{c['n_layer']} + {c['outside_layers']} ({c['launch']} launches"
                 + (", one captured graph" if c["graph"] else "") + ")")
    return L


def _format_pair(r: dict) -> str:
    p = r["pair"]
    lc = r.get("llama_cpp")
    L = [f"speculative decoding of the pair on code prompts (greedy, {p['n_predict']} tokens; "
         f"draft-max D, +keep: the draft keeps its KV rows instead of llama.cpp's re-evaluation):"]
    for a, m in p["modes"].items():
        keys = list(m["prompts"][0]["spec"])
        L.append(f"  {a}: plain {m['plain_tok_s']:.1f} tok/s; speculative, median over the prompts: "
                 + ", ".join(f"D={k} {_median([x['spec'][k]['tok_s'] for x in m['prompts']]):.1f}" for k in keys))
        L.append(f"      best D={m['best']}: {m['spec_tok_s']:.1f} tok/s = {m['spec_tok_s'] / m['plain_tok_s']:.2f}x "
                 f"plain" + (f", {m['spec_tok_s'] / lc['tg_tok_s']:.2f}x llama.cpp's plain {lc['tg_tok_s']:.1f}"
                             if lc else "") + "; output identical to plain decoding: "
                 + ("yes" if m["identical"] else "NO"))
        acc = [x["spec"][m["best"]]["accept_rate"] for x in m["prompts"]]
        L.append("      acceptance per prompt: " + ", ".join(f"{a_:.2f}" for a_ in acc))
    return "\n".join(L)


def _median(v):
    v = sorted(v)
    n = len(v)
    return (v[(n - 1) // 2] + v[n // 2]) / 2


# ---- goals -------------------------------------------------------------------------------------

def _per_mode(r, f):
    # {mode: f(mode figures)} over the modes measured
    return {m: f(r["modes"][m]) for m in _modes(r)}


def _decode_goals(r: dict, who: str) -> list:
    out = []
    lc = r.get("llama_cpp")
    figs = "; ".join(f"{m} {r['modes'][m]['decode_tok_s']:.1f} tok/s" for m in _modes(r))
    if lc:
        out.append((f"decode of {who} >= llama.cpp's", f"{figs} vs {lc['tg_tok_s']:.1f}"
                    + ("" if lc.get("measured") else " (recorded, not this run)"),
                    _per_mode(r, lambda x: x["decode_tok_s"] >= lc["tg_tok_s"])))
    else:
        out.append((f"decode of {who} >= llama.cpp's", f"{figs}; llama.cpp not measured (--llama-bench)", None))
    if r["modes"][_modes(r)[0]].get("bandwidth_frac") is not None:
        out.append((f"decode of {who} reads >= {MIN_BANDWIDTH_FRAC:.0%} of the streaming bandwidth",
                    "; ".join(f"{m} {r['modes'][m]['bandwidth_frac']:.0%}" for m in _modes(r))
                    + (f" (llama.cpp {lc['bandwidth_frac']:.0%})"
                       if lc and lc.get("bandwidth_frac") is not None else ""),
                    _per_mode(r, lambda x: x["bandwidth_frac"] >= MIN_BANDWIDTH_FRAC)))
    return out


def steps(batch_cost: dict) -> dict:
    """{k: cost(k + 1) - cost(k)}: what going from k to k + 1 rows adds, in one-row steps (only
    consecutive batch sizes count)."""
    ks = sorted(batch_cost)
    return {k: batch_cost[k1] - batch_cost[k] for k, k1 in zip(ks, ks[1:]) if k1 == k + 1}


def cliffs(batch_cost: dict) -> list:
    """The k where going from k to k + 1 rows costs more than CLIFF_FACTOR times the median step
    and more than CLIFF_MIN one-row decodes (only consecutive batch sizes count)."""
    st = steps(batch_cost)
    if not st:
        return []
    limit = max(CLIFF_MIN, CLIFF_FACTOR * _median(list(st.values())))
    return [k for k, step in st.items() if step > limit]


def _sweep_measured(r: dict) -> bool:
    return sorted(r["modes"][_modes(r)[0]]["batch_cost"]) == list(range(1, 18))


def _step_goal(r: dict) -> tuple:
    goal = f"no step from 1 to 17 rows exceeds {CLIFF_FACTOR:g}x the median step (a step: cost(k + 1) - cost(k))"
    if not _sweep_measured(r):
        return goal, "needs every batch size 1..17 (bench with -md, not --quick)", None

    def said(bc):
        st = steps(bc)
        k = max(st, key=st.get)
        return (f"largest {st[k]:.3f} at k = {k} -> {k + 1}, median {_median(list(st.values())):.3f}; "
                f"over {CLIFF_FACTOR:g}x at k = {cliffs(bc) or 'none'}")
    return (goal, "; ".join(f"{m}: {said(r['modes'][m]['batch_cost'])}" for m in _modes(r)),
            _per_mode(r, lambda x: not cliffs(x["batch_cost"])))


def _extra_row_goal(r: dict) -> tuple:
    # a row beyond the first at k = 5 and 9 rows, against the bound of this CPU's SIMD level
    level = r.get("simd_level") or "unknown"
    lim = EXTRA_ROW_GOALS.get(level, EXTRA_ROW_DEFAULT_GOAL)
    ks = EXTRA_ROW_KS
    goal = (f"a row beyond the first costs <= {lim:g} of a one-row step at k = {' and '.join(map(str, ks))} "
            f"(AVX-512 VNNI CPUs: <= {EXTRA_ROW_GOALS['avx512']:g}, "
            f"AVX2-only, AVX-VNNI included: <= {EXTRA_ROW_GOALS['avx2']:g}; "
            f"this CPU: {level})")
    if not all(k in r["modes"][_modes(r)[0]]["batch_cost"] for k in ks):
        return goal, "not measured", None

    def per_row(x, k):
        return (x["batch_cost"][k] - 1.0) / (k - 1)

    def said(m):
        x = r["modes"][m]
        text = f"{m} " + ", ".join(f"{per_row(x, k):.3f} at k = {k}" for k in ks)
        ideal = x.get("ideal_extra_row_cost")
        if ideal:
            text += (" = " + ", ".join(f"{per_row(x, k) / ideal:.1f}x" for k in ks)
                     + f" the int8 limit's {ideal:.3f}")
        return text
    return (goal, "; ".join(said(m) for m in _modes(r)),
            _per_mode(r, lambda x: all(per_row(x, k) <= lim for k in ks)))


def _batch_goals(r: dict, limits, sweep_goal: bool) -> list:
    out = []
    for k, lim in limits:
        if k in r["modes"][_modes(r)[0]]["batch_cost"]:
            out.append((f"{k} rows <= {lim}x one row",
                        "; ".join(f"{m} {r['modes'][m]['batch_cost'][k]:.2f}" for m in _modes(r)),
                        _per_mode(r, lambda x, k=k, lim=lim: x["batch_cost"][k] <= lim)))
        else:
            out.append((f"{k} rows <= {lim}x one row", "not measured", None))
    out.append(_extra_row_goal(r))
    if sweep_goal or _sweep_measured(r):
        out.append(_step_goal(r))
    return out


def goals(r: dict) -> list:
    """The speed goals of the project, each as (goal, measured, met) from a `bench` result."""
    out = []
    pair = "draft" in r
    out += _decode_goals(r, "the target" if pair else "the model")
    if pair:
        out += _decode_goals(r["draft"], "the draft")
        out += _batch_goals(r, PAIR_BATCH_GOALS, True)
        if "pair" in r:
            lc = r.get("llama_cpp")
            p = r["pair"]["modes"]
            out.append((f"speculative decoding of the pair on code prompts >= {PAIR_SPEEDUP_GOAL}x "
                        "llama.cpp's plain decoding of the target",
                        "; ".join(f"{a} {m['spec_tok_s']:.1f} tok/s (D={m['best']})" for a, m in p.items())
                        + (f" vs {lc['tg_tok_s']:.1f}" if lc else "; llama.cpp not measured"),
                        {a: m["spec_tok_s"] >= PAIR_SPEEDUP_GOAL * lc["tg_tok_s"] for a, m in p.items()}
                        if lc else None))
            out.append(("speculative output identical to plain decoding", "every prompt and draft-max",
                        {a: m["identical"] for a, m in p.items()}))
        elif "waterfall" in r:              # bench --spec -md: the waterfall's own goals (app/demo.py)
            out += [tuple(g) for g in r["waterfall"]["goals"]]
        else:
            out.append(("speculative decoding of the pair >= 1.3x llama.cpp's plain decoding", "run bench --spec",
                        None))
    else:
        out += _batch_goals(r, DEFAULT_BATCH_GOALS, False)
        for lim, kmax in ((1.3, 5), (2.0, 17)):
            bc = r["modes"][_modes(r)[0]]["batch_cost"]
            ks = [k for k in bc if 1 < k <= kmax]
            out.append((f"1 + d rows <= {lim}x one row for d <= {kmax - 1}",
                        "; ".join(f"{m} up to {max(r['modes'][m]['batch_cost'][k] for k in ks):.2f}" for m in _modes(r))
                        + f" (k = {ks[0]}..{ks[-1]})",
                        _per_mode(r, lambda x, ks=ks, lim=lim: max(x["batch_cost"][k] for k in ks) <= lim)
                        if kmax in bc else None))
    out += _other_goals(r)
    return out


def _other_goals(r: dict) -> list:
    out = []
    spec = r.get("speculative")
    if spec:
        ov = max(max(p["llama.cpp"]["overhead_frac"], p["no-reeval"]["overhead_frac"]) for p in spec["prompts"])
        out.append(("loop overhead < 10% of a round", f"worst {100 * ov:.1f}% over the prompts", ov < 0.10))
        ev = max(p["no-reeval"]["draft_evals_per_round"] for p in spec["prompts"])
        ev_l = max(p["llama.cpp"]["draft_evals_per_round"] for p in spec["prompts"])
        out.append(("draft work per round <= 1 + d (d = 3) with the fix",
                    f"{ev:.2f} (llama.cpp's way: {ev_l:.2f})", ev <= 4.0 + 1e-9))
        if spec.get("sweeps"):
            errs = {n: s["max_rel_error_engine"] for n, s in spec["sweeps"].items()}
            errs_l = {n: s["max_rel_error"] for n, s in spec["sweeps"].items()}
            out.append(("measured speedup within 15% of the cost model, draft-max 1..8",
                        "engine model: " + ", ".join(f"{n} {100 * e:.0f}%" for n, e in errs.items())
                        + "; Leviathan (b = 1): " + ", ".join(f"{100 * e:.0f}%" for e in errs_l.values()),
                        max(errs.values()) <= 0.15))
    elif "draft" not in r:
        out.append(("speculative goals (overhead, draft work, speedup vs model)", "run bench --spec", None))
    if "memory" in r:
        m = r["memory"]
        out.append(("peak RSS of the default pair < 1 GiB", f"{m['peak_rss_mib']:.0f} MiB (n_ctx {m['n_ctx']})",
                    m["peak_rss_mib"] < 1024))
        out.append(("default target loads in < 2 s after the import", f"{m['load_target_s']:.2f} s",
                    m["load_target_s"] < 2.0))
    if "compile" in r:
        c = r["compile"]
        out.append(("first-call compile time stated, cached on disk",
                    f"{c['cold']['total_s']:.0f} s with an empty cache, {c['warm']['total_s']:.1f} s "
                    f"with it ({c['cache_mib']:.0f} MiB)", c["warm"]["total_s"] < c["cold"]["total_s"]))
        d = c.get("modes", ["f32"])[0]
        cal = c["cold"].get("prefetch_s", 0.0)
        first = c["cold"]["load_s"] + cal + c["cold"][f"first_decode_{d}_s"]
        out.append((f"cold start: first logits of {c.get('model', 'the model')} ({d}) within 90 s "
                    f"of an empty kernel cache", f"{first:.0f} s after the imports (load {c['cold']['load_s']:.1f} s, "
                    + (f"measuring the prefetch distance {cal:.1f} s, " if cal else "")
                    + f"compile and decode {c['cold'][f'first_decode_{d}_s']:.0f} s)", first <= 90))
    elif "draft" not in r:
        out.append(("first-call compile time", "run bench --compile-time", None))
    return out


def _mark(met) -> str:
    return {True: "met", False: "MISSED", None: "-"}[met]


def format_goals(r: dict) -> str:
    L = ["goals" + (" (target and draft)" if "draft" in r else "") + ":"]
    for goal, measured, met in goals(r):
        if isinstance(met, dict):
            status = ", ".join(f"{m} {_mark(v)}" for m, v in met.items())
        else:
            status = _mark(met)
        L.append(f"  [{status}] {goal}: {measured}")
    return "\n".join(L)
