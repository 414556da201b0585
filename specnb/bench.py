"""`specnb bench`: decode speed, prompt speed, and what a k-row batch costs relative to one row.

Figures are medians of several repetitions measured side by side in one run (the machine is
shared and noisy: ratios are what to compare, not absolute times).
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from .context import Batch, Context

BATCH_SIZES = (1, 2, 3, 5, 9, 17)


def _median_time(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def batch_costs(ctx: Context, prefix: list, sizes=BATCH_SIZES, reps: int = 5) -> dict:
    """Median time of a k-row verification-style batch (all rows want logits) after a prefix."""
    ctx.clear()
    ctx.decode(Batch.from_tokens(prefix, 0, 0, "last"))
    P = len(prefix)
    times = {}
    for k in sizes:
        toks = [(prefix[i % len(prefix)]) for i in range(k)]

        def run():
            ctx.decode(Batch.from_tokens(toks, P, 0, "all"))
            ctx.seq_rm(0, P, -1)
        run()   # warm-up (compiles on first use)
        times[k] = _median_time(run, reps)
    return times


# the quantized matmul shapes and types whose bandwidth `bench --backend cuda` reports
BANDWIDTH_SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096))    # (n_out, n_in)
BANDWIDTH_TYPES = ("Q4_0", "Q8_0", "Q4_K")


def bench(model_path=None, backend: str = "cpu", n_threads=None, reps: int = 5, n_gen: int = 32,
          check: bool = False, quick: bool = False, peak_gbs: float = 4800.0) -> dict:
    from .model import load_model
    from .models import default_target_path
    path = model_path or default_target_path()
    t0 = time.perf_counter()
    model = load_model(path)
    t_load = time.perf_counter() - t0
    ctx = Context(model, n_ctx=512, backend=backend, n_threads=n_threads)
    vocab = model.vocab
    prompt = vocab.tokenize("The quick brown fox jumps over the lazy dog. " * 12)[:128]
    ctx.decode(Batch.from_tokens(prompt[:8], 0, 0, "last"))        # warm-up / compile
    ctx.clear()

    def prefill():
        ctx.clear()
        ctx.decode(Batch.from_tokens(prompt, 0, 0, "last"))
    t_prompt = _median_time(prefill, max(2, reps // 2))

    def decode_run():
        ctx.clear()
        ctx.decode(Batch.from_tokens(prompt[:16], 0, 0, "last"))
        tok = int(np.argmax(ctx.get_logits_ith(15)))
        t = time.perf_counter()
        for i in range(n_gen):
            ctx.decode(Batch().add(tok, 16 + i, 0, True))
            tok = int(np.argmax(ctx.get_logits_ith(0)))
        return time.perf_counter() - t
    decode_times = [decode_run() for _ in range(max(1, reps // 2))]
    t_tok = statistics.median(decode_times) / n_gen
    sizes = (1, 2, 5, 9) if quick else BATCH_SIZES
    times = batch_costs(ctx, prompt[:64], sizes, reps)
    out = {
        "model": model.name, "path": path, "backend": ctx.backend_name, "n_threads": ctx.n_threads,
        "load_s": t_load, "decode_tok_s": 1.0 / t_tok, "decode_ms_per_tok": 1e3 * t_tok,
        "prompt_tok_s": len(prompt) / t_prompt, "n_prompt": len(prompt),
        "batch_ms": {k: 1e3 * t for k, t in times.items()},
        "batch_cost": {k: times[k] / times[1] for k in times},
        "weight_mib": model.weight_bytes() / 2**20,
    }
    if check:
        out["check"] = check_against_reference(model, ctx, prompt[:24])
    if ctx.backend_name == "cuda":
        out["bandwidth"] = cuda_bandwidth(peak_gbs, reps=20 if quick else 100)
        out["peak_gbs"] = peak_gbs
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


def format_bench(r: dict) -> str:
    lines = [f"model {r['model']} ({r['weight_mib']:.1f} MiB of weights), backend {r['backend']}, "
             f"{r['n_threads']} threads, loaded in {r['load_s']:.2f} s",
             f"decode: {r['decode_tok_s']:.1f} tok/s ({r['decode_ms_per_tok']:.2f} ms/token)",
             f"prompt: {r['prompt_tok_s']:.1f} tok/s ({r['n_prompt']} tokens)",
             "", "  k rows | batch ms | cost vs 1 row | tok/s in batch",
             "  -------+----------+---------------+---------------"]
    for k, ms in r["batch_ms"].items():
        lines.append(f"  {k:6d} | {ms:8.2f} | {r['batch_cost'][k]:13.2f} | {1e3 * k / ms:13.1f}")
    if "check" in r:
        c = r["check"]
        lines.append(f"\ncheck against {c['against']}: top-1 agreement {c['top1_agree']:.3f} over "
                     f"{c['positions']} positions, max |logit diff| {c['max_abs_diff']:.2e}")
    if "bandwidth" in r:
        lines += ["", f"quantized matmul, 1 activation row (weight bytes read per call; peak "
                      f"{r['peak_gbs']:.0f} GB/s):",
                  "  type | n_out x n_in  |      us |   GB/s | of peak",
                  "  -----+---------------+---------+--------+--------"]
        for b in r["bandwidth"]:
            lines.append(f"  {b['type']:4s} | {b['n_out']:5d} x {b['n_in']:5d} | {b['us']:7.1f} | "
                         f"{b['gbs']:6.0f} | {100 * b['frac_peak']:6.1f}%")
    return "\n".join(lines)
