"""`specnb bench`: decode speed, prompt speed, what a k-row batch costs relative to one row, memory,
load and compile time, next to llama.cpp's figures on the same kind of machine.

Figures are medians of several repetitions measured side by side in one run: the two activation
modes ("f32" and "q8", see `specnb.context.ACTIVATIONS`) take turns rep by rep, so a noisy
neighbour slows both alike. The machine is shared and noisy: compare ratios, not absolute times.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from .context import Batch, Context

BATCH_SIZES = (1, 2, 3, 5, 9, 17)

# llama.cpp on this 2-vCPU AMD EPYC machine with the default model (build c392e509, 2 threads):
# `llama-bench -t 2 -p 1,2,3,5,9,17,33 -n 64 -r 10` and `llama-batched-bench ... -npl 1` (the text
# it printed is tests/data/llamacpp_bench_smollm2.txt; a test checks these numbers against it).
LLAMA_CPP = {
    "source": "llama-bench -t 2 -r 10 (build c392e509), same 2-vCPU machine",
    "pp_tok_s": {1: 93.88, 2: 124.67, 3: 148.76, 5: 169.07, 9: 196.90, 17: 163.74},
    "tg64_tok_s": 84.06,
    "batched_bench_tg_tok_s": 106.31,
}


def llama_cpp_batch_cost(k: int) -> float:
    """What a k-token batch cost llama.cpp relative to one token: k * pp1 / pp_k."""
    pp = LLAMA_CPP["pp_tok_s"]
    return k * pp[1] / pp[k]


def batch_costs(ctx: Context, prefix: list, sizes=BATCH_SIZES, reps: int = 5,
                stat: str = "median") -> dict:
    """Time of a k-row verification-style batch (all rows want logits) after a prefix: the
    median of `reps` runs, or with stat="min" the fastest (to set beside other fastest-run
    figures)."""
    return _batch_costs_side_by_side({"": ctx}, prefix, sizes, reps, stat)[""]


def _batch_costs_side_by_side(ctxs: dict, prefix: list, sizes, reps: int, stat: str = "median") -> dict:
    # {name: Context} -> {name: {k: median seconds}}, the contexts taking turns call by call
    P = len(prefix)
    for ctx in ctxs.values():
        ctx.clear()
        ctx.decode(Batch.from_tokens(prefix, 0, 0, "last"))
    times = {name: {k: [] for k in sizes} for name in ctxs}

    def run(ctx, toks):
        t0 = time.perf_counter()
        ctx.decode(Batch.from_tokens(toks, P, 0, "all"))
        dt = time.perf_counter() - t0
        ctx.seq_rm(0, P, -1)
        return dt
    for k in sizes:
        toks = [prefix[i % len(prefix)] for i in range(k)]
        for ctx in ctxs.values():
            run(ctx, toks)                   # warm-up (compiles on first use)
        for _ in range(reps):
            for name, ctx in ctxs.items():
                times[name][k].append(run(ctx, toks))
    agg = min if stat == "min" else statistics.median
    return {name: {k: agg(v) for k, v in t.items()} for name, t in times.items()}


# the quantized matmul shapes and types whose bandwidth `bench --backend cuda` reports
BANDWIDTH_SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096))    # (n_out, n_in)
BANDWIDTH_TYPES = ("Q4_0", "Q8_0", "Q4_K")


def bench(model_path=None, backend: str = "cpu", n_threads=None, reps: int = 5, n_gen: int = 32,
          check: bool = False, quick: bool = False, peak_gbs: float = 4800.0,
          activations=None, memory: bool = True, compile_time: bool = False) -> dict:
    """Decode / prompt tok/s and k-row batch cost for each activation mode, side by side; the
    load time; optionally (in fresh processes) the default pair's peak memory and the first-call
    compile time with an empty and with a filled Numba cache."""
    from .model import load_model
    from .models import default_target_path
    from .context import resolve_backend
    path = model_path or default_target_path()
    t0 = time.perf_counter()
    model = load_model(path)
    t_load = time.perf_counter() - t0
    if activations is None:
        activations = ("f32", "q8") if resolve_backend(backend) == "cpu" else ("f32",)
    ctxs = {a: Context(model, n_ctx=512, backend=backend, n_threads=n_threads, activations=a)
            for a in activations}
    vocab = model.vocab
    prompt = vocab.tokenize("The quick brown fox jumps over the lazy dog. " * 12)[:128]
    for ctx in ctxs.values():
        ctx.decode(Batch.from_tokens(prompt[:8], 0, 0, "last"))    # warm-up / compile
        ctx.clear()

    def prefill(ctx):
        ctx.clear()
        t = time.perf_counter()
        ctx.decode(Batch.from_tokens(prompt, 0, 0, "last"))
        return time.perf_counter() - t

    def decode_run(ctx):
        ctx.clear()
        ctx.decode(Batch.from_tokens(prompt[:16], 0, 0, "last"))
        tok = int(np.argmax(ctx.get_logits_ith(15)))
        t = time.perf_counter()
        for i in range(n_gen):
            ctx.decode(Batch().add(tok, 16 + i, 0, True))
            tok = int(np.argmax(ctx.get_logits_ith(0)))
        return (time.perf_counter() - t) / n_gen
    t_prompt = {a: [] for a in ctxs}
    t_tok = {a: [] for a in ctxs}
    for _ in range(max(2, reps // 2)):
        for a, ctx in ctxs.items():              # the modes take turns
            t_prompt[a].append(prefill(ctx))
            t_tok[a].append(decode_run(ctx))
    sizes = (1, 2, 3, 5, 9) if quick else BATCH_SIZES
    times = _batch_costs_side_by_side(ctxs, prompt[:64], sizes, reps)
    first = next(iter(ctxs.values()))
    out = {
        "model": model.name, "path": path, "backend": first.backend_name,
        "n_threads": first.n_threads, "load_s": t_load, "n_prompt": len(prompt),
        "weight_mib": model.weight_bytes() / 2**20, "modes": {}, "llama_cpp": LLAMA_CPP,
    }
    for a in ctxs:
        tt = statistics.median(t_tok[a])
        out["modes"][a] = {
            "decode_tok_s": 1.0 / tt, "decode_ms_per_tok": 1e3 * tt,
            "weight_gb_s": model.weight_bytes() / tt / 1e9,
            "prompt_tok_s": len(prompt) / statistics.median(t_prompt[a]),
            "batch_ms": {k: 1e3 * t for k, t in times[a].items()},
            "batch_cost": {k: times[a][k] / times[a][1] for k in times[a]},
        }
    if check:
        out["check"] = check_against_reference(model, first, prompt[:24])
    if first.backend_name == "cuda":
        out["bandwidth"] = cuda_bandwidth(peak_gbs, reps=20 if quick else 100)
        out["peak_gbs"] = peak_gbs
    if memory and model_path is None:
        out["memory"] = pair_memory(n_threads=n_threads)
    if compile_time:
        out["compile"] = compile_times(n_threads=n_threads)
    return out


# ---- measurements in fresh processes -------------------------------------------------------

def _run_probe(args: list, env_extra: dict | None = None, timeout: float = 1800):
    # -> (the JSON the probe printed, wall seconds of the whole process from its start)
    env = dict(os.environ, **(env_extra or {}))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "specnb.bench"] + args, env=env, timeout=timeout,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"bench probe {args} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1]), wall


def pair_memory(n_threads=None, n_ctx: int = 2048, n_predict: int = 64) -> dict:
    """Peak resident memory of a fresh process that imports specnb, loads the default pair, makes
    both contexts (n_ctx cells each, the CLI default) and runs a speculative generation; also
    the time to load the default target in that process (after the import)."""
    args = ["--probe-memory", str(n_ctx), str(n_predict)]
    if n_threads:
        args.append(str(n_threads))
    return _run_probe(args)[0]


def _probe_memory(n_ctx: int, n_predict: int, n_threads=None) -> dict:
    import resource
    from .loop import SpecParams, SpeculativeLoop
    from .model import load_model
    from .models import default_draft_path, default_target_path
    from .sampling import SamplerParams
    t0 = time.perf_counter()
    tgt = load_model(default_target_path())
    t_load = time.perf_counter() - t0
    dft = load_model(default_draft_path())
    ctx_t = Context(tgt, n_ctx=n_ctx, n_threads=n_threads)
    ctx_d = Context(dft, n_ctx=n_ctx, n_threads=n_threads)
    loop = SpeculativeLoop(ctx_t, ctx_d, tgt.vocab.tokenize("Once upon a time"), n_predict,
                           SamplerParams(temp=0.0, seed=1), SpecParams(n_max=3))
    for _ in loop.rounds():
        pass
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss      # KiB on Linux
    return {"peak_rss_mib": peak_kib / 1024, "load_target_s": t_load,
            "n_ctx": n_ctx, "kv_cache_mib": (ctx_t.backend.nbytes() + ctx_d.backend.nbytes()) / 2**20,
            "weights_mib": (tgt.weight_bytes() + dft.weight_bytes()) / 2**20}


def compile_times(n_threads=None) -> dict:
    """Seconds from a fresh process's start to the first logits of the default target, with both
    activation modes: once with an empty Numba cache (everything compiles) and once more with
    the cache that run filled (what a notebook's second run sees)."""
    with tempfile.TemporaryDirectory(prefix="specnb-numba-") as d:
        env = {"NUMBA_CACHE_DIR": d}
        args = ["--probe-first-call"] + ([str(n_threads)] if n_threads else [])
        cold, wall_cold = _run_probe(args, env)
        warm, wall_warm = _run_probe(args, env)
        cold["total_s"], warm["total_s"] = wall_cold, wall_warm
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    return {"cold": cold, "warm": warm, "cache_mib": size / 2**20}


def _probe_first_call(n_threads=None) -> dict:
    # (the parent times the whole process, interpreter start and imports included)
    from .model import load_model
    from .models import default_target_path
    t0 = time.perf_counter()
    model = load_model(default_target_path())
    out = {"load_s": time.perf_counter() - t0}
    for a in ("f32", "q8"):
        t = time.perf_counter()
        ctx = Context(model, n_ctx=64, n_threads=n_threads, activations=a)
        ctx.decode(Batch.from_tokens([1, 2, 3], 0, 0, "last"))
        out[f"first_decode_{a}_s"] = time.perf_counter() - t
    return out


def cuda_bandwidth(peak_gbs: float = 4800.0, reps: int = 100) -> list:
    """GB/s of weight bytes read by the CUDA quantized matmul (one activation row) on large random
    matrices, timed with CUDA events, and the fraction of `peak_gbs` (an H200: about 4800)."""
    from gguf import GGMLQuantizationType

    from .backend_cuda import matmul_bandwidth
    qtypes = [int(GGMLQuantizationType[t]) for t in BANDWIDTH_TYPES]
    return matmul_bandwidth(BANDWIDTH_SHAPES, qtypes, n_rows=1, reps=reps, peak_gbs=peak_gbs)


def check_against_reference(model, ctx: Context, ids: list) -> dict:
    """Top-1 agreement and max |logit difference| of this context against the NumPy reference
    (or, for a GPU context, against the CPU backend)."""
    if ctx.backend_name == "cpu":
        from .reference import Reference
        ref = Reference(model).forward(ids)
        name = "numpy-reference"
    else:
        cpu = Context(model, n_ctx=ctx.n_ctx, backend="cpu")
        ref = cpu.decode(Batch.from_tokens(ids, 0, 0, "all"))
        name = "cpu"
    ctx.clear()
    got = ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))
    ctx.clear()
    return {"against": name, "positions": len(ids),
            "top1_agree": float(np.mean(ref.argmax(-1) == got.argmax(-1))),
            "max_abs_diff": float(np.abs(ref - got).max())}


# ---- printing ------------------------------------------------------------------------------

def format_bench(r: dict) -> str:
    modes = list(r["modes"])
    L = [f"model {r['model']} ({r['weight_mib']:.1f} MiB of weights), backend {r['backend']}, "
         f"{r['n_threads']} threads; loaded in {r['load_s']:.2f} s",
         f"activations: f32 = float32 (exact against the reference), q8 = int8 blocks (llama.cpp's "
         f"CPU numerics); llama.cpp: {LLAMA_CPP['source']}", ""]
    head = "                      | " + " | ".join(f"{m:>9s}" for m in modes) + " | llama.cpp"
    L += [head, "  " + "-" * (len(head) - 2)]
    tg = f"{LLAMA_CPP['tg64_tok_s']:.1f} (tg64), {LLAMA_CPP['batched_bench_tg_tok_s']:.1f} (batched-bench)"
    L.append("  decode tok/s        | " + " | ".join(f"{r['modes'][m]['decode_tok_s']:9.1f}" for m in modes)
             + f" | {tg}")
    L.append("  decode ms/token     | " + " | ".join(f"{r['modes'][m]['decode_ms_per_tok']:9.2f}" for m in modes)
             + f" | {1e3 / LLAMA_CPP['tg64_tok_s']:.2f}")
    L.append("  weights read GB/s   | " + " | ".join(f"{r['modes'][m]['weight_gb_s']:9.1f}" for m in modes) + " |")
    L.append(f"{'  prompt tok/s (' + str(r['n_prompt']) + ')':22s}| "
             + " | ".join(f"{r['modes'][m]['prompt_tok_s']:9.1f}" for m in modes) + " |")
    L.append("")
    L.append("  k rows: cost of a k-row batch (all rows want logits) / cost of 1 row")
    for k in r["modes"][modes[0]]["batch_cost"]:
        ref = f"{llama_cpp_batch_cost(k):.2f}" if k in LLAMA_CPP["pp_tok_s"] else ""
        L.append(f"  k = {k:2d}              | "
                 + " | ".join(f"{r['modes'][m]['batch_cost'][k]:9.2f}" for m in modes) + f" | {ref}")
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
        L.append("first call: a fresh process from its start to the first logits of both modes")
        for name in ("cold", "warm"):
            x = c[name]
            L.append(f"  {name + ' Numba cache':16s}: {x['total_s']:6.1f} s  (load {x['load_s']:.2f} s, "
                     f"first f32 decode {x['first_decode_f32_s']:.1f} s, first q8 decode "
                     f"{x['first_decode_q8_s']:.1f} s)")
        L.append(f"  Numba cache: {c['cache_mib']:.0f} MiB on disk")
    if "bandwidth" in r:
        L += ["", f"quantized matmul, 1 activation row (weight bytes read per call; peak "
                  f"{r['peak_gbs']:.0f} GB/s):",
              "  type | n_out x n_in  |      us |   GB/s | of peak",
              "  -----+---------------+---------+--------+--------"]
        for b in r["bandwidth"]:
            L.append(f"  {b['type']:4s} | {b['n_out']:5d} x {b['n_in']:5d} | {b['us']:7.1f} | "
                     f"{b['gbs']:6.0f} | {100 * b['frac_peak']:6.1f}%")
    return "\n".join(L)


def goals(r: dict) -> list:
    """The speed goals of the project, each as (goal, measured, met: True / False / None when not
    measured in this run), from a `bench` result (with r["speculative"] from `bench --spec`)."""
    out = []
    modes = r["modes"]
    best = max(modes, key=lambda m: modes[m]["decode_tok_s"])
    tg = LLAMA_CPP["tg64_tok_s"]
    out.append(("decode >= llama.cpp (llama-bench tg64, same machine)",
                "; ".join(f"{m} {modes[m]['decode_tok_s']:.1f} tok/s" for m in modes)
                + f" vs {tg:.1f} (batched-bench {LLAMA_CPP['batched_bench_tg_tok_s']:.1f})",
                modes[best]["decode_tok_s"] >= tg))
    for lim, kmax in ((1.3, 5), (2.0, 17)):
        ks = [k for k in modes[best]["batch_cost"] if 1 < k <= kmax]
        worst = {m: max(modes[m]["batch_cost"][k] for k in ks) for m in modes}
        complete = kmax in modes[best]["batch_cost"]          # (bench --quick stops at 9 rows)
        out.append((f"1 + d rows <= {lim}x one row for d <= {kmax - 1}",
                    "; ".join(f"{m} up to {c:.2f}" for m, c in worst.items()) + f" (k = {ks[0]}..{ks[-1]})",
                    min(worst.values()) <= lim if complete else None))
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
    else:
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
    else:
        out.append(("first-call compile time", "run bench --compile-time", None))
    return out


def format_goals(r: dict) -> str:
    L = ["goals:"]
    for goal, measured, met in goals(r):
        mark = {True: "met   ", False: "MISSED", None: "  -   "}[met]
        L.append(f"  [{mark}] {goal}: {measured}")
    return "\n".join(L)


if __name__ == "__main__":
    # the fresh-process probes behind pair_memory() and compile_times()
    if sys.argv[1] == "--probe-memory":
        nt = int(sys.argv[4]) if len(sys.argv) > 4 else None
        print(json.dumps(_probe_memory(int(sys.argv[2]), int(sys.argv[3]), nt)))
    elif sys.argv[1] == "--probe-first-call":
        print(json.dumps(_probe_first_call(int(sys.argv[2]) if len(sys.argv) > 2 else None)))
    else:
        sys.exit(f"unknown probe {sys.argv[1:]}")
