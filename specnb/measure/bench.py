"""`specnb bench`: decode speed, prompt speed, what a k-row verification batch costs relative to
one row (and each row beyond the first against the int8 compute limit, kernels/tuning.py), the
machine's streaming bandwidth and the fraction of it a decode uses, next to
llama.cpp's figures for the same model; with a draft model (`-md`) the same for the draft and, with
--spec, speculative decoding of the pair on code prompts; memory, load and compile time.

Figures are medians of several repetitions measured side by side in one run: the activation modes
("f32" and "q8", see `specnb.run.context.ACTIVATIONS`) and llama-bench take turns rep by rep, so a
noisy neighbour slows them alike. The machine is shared and noisy: compare ratios, not times.
The goals and the tables are printed by bench_report.py.
"""
from __future__ import annotations

import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from .bench_llamacpp import LlamaCppColumn, find_llama_bench
from .bench_llamacpp import batch_cost as _llama_batch_cost
from ..run.context import Batch, Context

BATCH_SIZES = (1, 2, 3, 5, 9, 17)
QUICK_BATCH_SIZES = (1, 2, 3, 5, 9)
SWEEP_BATCH_SIZES = tuple(range(1, 18))        # every batch size up to 17: any cliff shows
CODE_PROMPTS = ["def fibonacci(n):\n", "import numpy as np\n\n\ndef softmax(x):\n",
                "class Stack:\n    def __init__(self):\n"]


def default_activations(backend: str = "cpu") -> str:
    """The activation mode a Context gets when none is given."""
    from ..run.context import resolve_activations
    return resolve_activations(inspect.signature(Context.__init__).parameters["activations"].default, backend)


def decode_bytes(model) -> int:
    """Weight bytes one decode step reads: every matrix once, the token embedding only as the
    output head (one embedding row is all a step reads of it otherwise)."""
    n = model.weight_bytes()
    if not model.hparams.tied_output:
        n -= model.tok_embd.data.nbytes
    return n


def draft_decode_bytes(model, n_draft_vocab: int | None = None) -> int:
    """decode_bytes of a draft whose output head computes only n_draft_vocab of its rows
    (--spec-draft-vocab N: every row of the head has the same bytes); None or N >= the vocabulary:
    the whole head."""
    n, n_out = decode_bytes(model), model.output.n_out
    if n_draft_vocab is None or n_draft_vocab >= n_out:
        return n
    return n - model.output.data.nbytes * (n_out - int(n_draft_vocab)) // n_out


def macs_per_row(model) -> int:
    """Multiply-adds one row of a batch costs in the matrix products: n_in * n_out summed over
    every matrix a step multiplies by, the output head included (the token embedding is a
    lookup, not a product, unless it is the head too)."""
    n = model.output.n_in * model.output.n_out
    for L in model.layers:
        n += sum(w.n_in * w.n_out for w in (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down))
    return int(n)


def ideal_row_cost(macs_per_row: float, gmacs_s, one_row_s: float) -> float | None:
    """The least a row of arithmetic can add to a batch: macs_per_row multiply-adds at the int8
    compute limit (gmacs_s G multiply-adds per second), as a share of a one-row step of one_row_s
    seconds (the roofline's compute ceiling, Williams et al. 2009). None without a limit or a step."""
    return macs_per_row / (gmacs_s * 1e9) / one_row_s if gmacs_s and one_row_s > 0 else None


def extra_row_costs(batch_cost: dict, one_row_s: float, macs_per_row: float, gmacs_s=None) -> dict:
    """What each row beyond the first costs, from a batch-cost curve (cost(k) = time of k rows /
    time of 1 row) whose one-row step took one_row_s seconds:
    extra_row_cost {k: (cost(k) - 1) / (k - 1)} for every k > 1, in one-row steps;
    ideal_extra_row_cost: ideal_row_cost, macs_per_row at the int8 compute limit (gmacs_s G
    multiply-adds per second) as a share of the one-row step; extra_row_x_limit {k: measured /
    ideal}. The last two are None without a limit."""
    per_row = {k: (c - 1.0) / (k - 1) for k, c in batch_cost.items() if k > 1}
    ideal = ideal_row_cost(macs_per_row, gmacs_s, one_row_s)
    return {"extra_row_cost": per_row, "ideal_extra_row_cost": ideal,
            "extra_row_x_limit": {k: c / ideal for k, c in per_row.items()} if ideal else None}


# ---- batch costs ---------------------------------------------------------------------------

def batch_costs(ctx: Context, prefix: list, sizes=BATCH_SIZES, reps: int = 5,
                stat: str = "median") -> dict:
    """Time of a k-row verification-style batch (all rows want logits) after a prefix: the
    median of `reps` runs, or with stat="min" the fastest (to set beside other fastest-run
    figures)."""
    return _batch_costs_side_by_side({"": ctx}, prefix, sizes, reps, stat)[""]


def batch_cost_samples(ctx: Context, prefix: list, sizes=BATCH_SIZES, reps: int = 5) -> dict:
    """{k: [seconds of each repetition]} of k-row verification-style batches after a prefix:
    every size once per repetition (a slow spell of the machine falls on all sizes alike), so
    sample i of every size comes from the same pass (measure.verify_cost reads the spread so)."""
    return _batch_cost_samples({"": ctx}, prefix, sizes, reps)[""]


def _batch_costs_side_by_side(ctxs: dict, prefix: list, sizes, reps: int, stat: str = "median") -> dict:
    # {name: Context} -> {name: {k: median seconds}}, the contexts taking turns call by call
    agg = min if stat == "min" else statistics.median
    return {name: {k: agg(v) for k, v in t.items()}
            for name, t in _batch_cost_samples(ctxs, prefix, sizes, reps).items()}


def _batch_cost_samples(ctxs: dict, prefix: list, sizes, reps: int) -> dict:
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
    toks = {k: [prefix[i % len(prefix)] for i in range(k)] for k in sizes}
    for k in sizes:
        for ctx in ctxs.values():
            run(ctx, toks[k])                # warm-up (compiles on first use)
    # every size in every repetition, so that a slow spell of the machine falls on all sizes
    # alike and not on one (a ratio to a slow one-row time would read as a batch cheaper than 1)
    for _ in range(reps):
        for k in sizes:
            for name, ctx in ctxs.items():
                times[name][k].append(run(ctx, toks[k]))
    return times


# ---- the machine's streaming bandwidth ---------------------------------------------------------

def streaming_bandwidth(gib: float = 1.0, n_threads: int | None = None, reps: int = 3) -> dict:
    """GB/s the machine streams from memory with n_threads threads, by two probes: the xor of
    every word of a (n_threads x gib) GiB array, one contiguous part per thread
    (kernels/stream.py, a loop LLVM turns into wide loads), and one NumPy sum per thread over
    its own gib GiB part of the same array, side by side. gb_s is the faster probe's median of `reps` rounds (a
    probe can only understate what the memory delivers); a decode cannot beat reading its
    weights once at that speed."""
    import numba

    from ..kernels.stream import stream_gb_s
    n = max(1, int(n_threads or numba.get_num_threads()))
    count = int(gib * 2**30) // 8 * 2                       # float32 per thread (an even number)
    # one allocation serves both probes: thread i sums its own part, the xor reads all of it
    data = np.ones(n * count, np.float32)
    arrays = [data[i * count:(i + 1) * count] for i in range(n)]
    words = data.view(np.uint64)
    stream_gb_s(words[:1024], n)                            # compile (or load from the cache)
    rounds, xor_rounds = [], []
    for _ in range(reps):
        xor_rounds.append(stream_gb_s(words, n))
        barrier = threading.Barrier(n + 1)
        done = [0.0] * n

        def work(i, barrier=barrier, done=done):
            barrier.wait()
            t = time.perf_counter()
            arrays[i].sum()
            done[i] = time.perf_counter() - t
        ths = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in ths:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ths:
            t.join()
        rounds.append(n * count * 4 / (time.perf_counter() - t0) / 1e9)
    numpy_gb_s, xor_gb_s = statistics.median(rounds), statistics.median(xor_rounds)
    return {"gb_s": max(numpy_gb_s, xor_gb_s), "numpy_gb_s": numpy_gb_s, "xor_gb_s": xor_gb_s,
            "rounds_gb_s": rounds, "xor_rounds_gb_s": xor_rounds, "threads": n, "gib_per_thread": gib}


# ---- one model, every activation mode, side by side ----------------------------------------------

class ModelBench:
    """Decode, prompt and batch timings of one model in each activation mode (plus llama.cpp's)."""

    def __init__(self, path, backend, n_threads, activations, llama_exe, is_default_model, n_ctx=512,
                 share_kernels_with=()):
        # share_kernels_with: the other model of a pair, so that this model, the other and the
        # pair (pair_speculative) run one compiled pass instead of three
        from ..model import load_model
        t0 = time.perf_counter()
        self.model = load_model(path)
        self.t_load = time.perf_counter() - t0
        self.path = path
        self.ctxs = {a: Context(self.model, n_ctx=n_ctx, backend=backend, n_threads=n_threads,
                                activations=a, share_kernels_with=share_kernels_with)
                     for a in activations}
        self.prompt = self.model.vocab.tokenize("The quick brown fox jumps over the lazy dog. " * 12)[:128]
        self.t_prompt = {a: [] for a in self.ctxs}
        self.t_tok = {a: [] for a in self.ctxs}
        self.llama = LlamaCppColumn(llama_exe, path, is_default_model)
        for ctx in self.ctxs.values():
            ctx.decode(Batch.from_tokens(self.prompt[:8], 0, 0, "last"))    # warm-up / compile
            ctx.clear()

    def rep(self, n_gen: int, batch_sizes, n_threads):
        # one repetition of every mode, then one llama-bench run
        for a, ctx in self.ctxs.items():
            ctx.clear()
            t = time.perf_counter()
            ctx.decode(Batch.from_tokens(self.prompt, 0, 0, "last"))
            self.t_prompt[a].append(time.perf_counter() - t)
            ctx.clear()
            ctx.decode(Batch.from_tokens(self.prompt[:16], 0, 0, "last"))
            tok = int(np.argmax(ctx.get_logits_ith(15)))
            t = time.perf_counter()
            for i in range(n_gen):
                ctx.decode(Batch().add(tok, 16 + i, 0, True))
                tok = int(np.argmax(ctx.get_logits_ith(0)))
            self.t_tok[a].append((time.perf_counter() - t) / n_gen)
        self.llama.run(n_threads, batch_sizes, n_gen)

    def result(self, sizes, reps, bandwidth_gb_s, int8_gmacs_s=None) -> dict:
        # int8_gmacs_s: the int8 compute limit (kernels/tuning.py), the q8 mode's ideal extra row
        times = _batch_costs_side_by_side(self.ctxs, self.prompt[:64], sizes, reps)
        first = next(iter(self.ctxs.values()))
        nb = decode_bytes(self.model)
        macs = macs_per_row(self.model)
        out = {"model": self.model.name, "path": self.path, "backend": first.backend_name,
               "n_threads": first.n_threads, "load_s": self.t_load, "n_prompt": len(self.prompt),
               "weight_mib": self.model.weight_bytes() / 2**20, "decode_bytes": nb, "macs_per_row": macs,
               "modes": {}, "llama_cpp": self.llama.result()}
        for a in self.ctxs:
            tt = statistics.median(self.t_tok[a])
            bc = {k: times[a][k] / times[a][1] for k in times[a]}
            out["modes"][a] = {
                "decode_tok_s": 1.0 / tt, "decode_ms_per_tok": 1e3 * tt,
                "weight_gb_s": nb / tt / 1e9,
                "bandwidth_frac": nb / tt / 1e9 / bandwidth_gb_s if bandwidth_gb_s else None,
                "prompt_tok_s": len(self.prompt) / statistics.median(self.t_prompt[a]),
                "batch_ms": {k: 1e3 * t for k, t in times[a].items()},
                "batch_cost": bc,
                **extra_row_costs(bc, times[a][1], macs, int8_gmacs_s if a == "q8" else None),
            }
        lc = out["llama_cpp"]
        if lc is not None:
            lc["weight_gb_s"] = nb * lc["tg_tok_s"] / 1e9
            lc["bandwidth_frac"] = lc["weight_gb_s"] / bandwidth_gb_s if bandwidth_gb_s else None
            lc["batch_cost"] = {k: _llama_batch_cost(lc, k) for k in sizes if _llama_batch_cost(lc, k)}
        return out


def bench(model_path=None, backend: str = "cpu", n_threads=None, reps: int = 5, n_gen: int = 32,
          check: bool = False, quick: bool = False, peak_gbs: float = 4800.0,
          activations=None, memory: bool = True, compile_time: bool = False, draft_path=None,
          llama_bench=None, bandwidth_gib: float = 1.0, sweep: bool | None = None,
          pair_spec: bool = False) -> dict:
    """Decode / prompt tok/s and k-row batch cost for each activation mode, side by side with
    llama-bench (when given: `llama_bench` or $SPECNB_LLAMA_BENCH) on the same model; the same
    for a draft model; the streaming bandwidth; optionally (in fresh processes) the default
    pair's peak memory and the first-call compile time, and (pair_spec) speculative decoding of
    the target and draft on code prompts. Top-level decode_tok_s / prompt_tok_s / batch_cost are
    the target's in the default activation mode."""
    from ..run.context import resolve_backend
    from ..model.registry import default_target_path, is_default_target, resolve
    # model names (`specnb models`) to files: llama-bench and the comparisons below need a path
    path = resolve(model_path) if model_path else default_target_path()
    draft_path = resolve(draft_path) if draft_path else None
    if activations is None:
        activations = ("f32", "q8") if resolve_backend(backend) == "cpu" else ("f32",)
    exe = find_llama_bench(llama_bench)
    is_default = is_default_target(path)
    from ..model import load_model
    draft_model = load_model(draft_path) if draft_path else None
    runs = {"target": ModelBench(path, backend, n_threads, activations, exe, is_default,
                                 share_kernels_with=(draft_model,) if draft_model else ())}
    if draft_path:
        runs["draft"] = ModelBench(draft_path, backend, n_threads, activations, exe, False,
                                   share_kernels_with=(runs["target"].model,))
    nt = next(iter(runs["target"].ctxs.values())).n_threads
    peak, probes = None, None
    if "q8" in activations and resolve_backend(backend) == "cpu":
        # the int8 kernels' compute limit on these threads: recorded once per machine, and (unless
        # SPECNB_INT8_PEAK sets it) measured again beside the runs, as the bandwidth is
        from ..kernels.tuning import int8_peak_verdict, measure_int8_peak, peak_beside, start_int8_probes, use_int8_peak
        probes = start_int8_probes(nt, on_measure=lambda text: print(f"specnb: {text}", file=sys.stderr, flush=True))
        peak = int8_peak_verdict(nt)
    if sweep is None:
        sweep = draft_path is not None and not quick
    sizes = QUICK_BATCH_SIZES if quick else (SWEEP_BATCH_SIZES if sweep else BATCH_SIZES)
    bw = [streaming_bandwidth(bandwidth_gib, nt)]
    for i in range(max(2, reps // 2)):
        for mb in runs.values():
            mb.rep(n_gen, sizes, nt)
        if i == 0:
            bw.append(streaming_bandwidth(bandwidth_gib, nt))
            if probes is not None:
                probes.append(measure_int8_peak(nt))
    bw.append(streaming_bandwidth(bandwidth_gib, nt))
    if probes is not None:
        probes.append(measure_int8_peak(nt))
        peak = peak_beside(probes)
        use_int8_peak(nt, peak)          # the roofline of bench --spec reads the same figure
    bandwidth = {"gb_s": statistics.median(b["gb_s"] for b in bw), "threads": nt,
                 "gib_per_thread": bandwidth_gib, "runs_gb_s": [b["gb_s"] for b in bw],
                 "numpy_gb_s": statistics.median(b["numpy_gb_s"] for b in bw),
                 "xor_gb_s": statistics.median(b["xor_gb_s"] for b in bw),
                 "how": f"the faster of a {nt}-thread xor over {nt * bandwidth_gib:g} GiB and {nt} NumPy sums "
                        f"over {bandwidth_gib:g} GiB each, side by side"}
    res = {name: mb.result(sizes, reps, bandwidth["gb_s"], peak and peak["gmacs_s"]) for name, mb in runs.items()}
    out = dict(res["target"])
    out["default_activations"] = default_activations()
    if "q8" in activations and resolve_backend(backend) == "cpu":
        from ..kernels.tuning import cached_verdict
        out["prefetch"] = cached_verdict(nt)          # (the contexts above measured it if needed)
    if resolve_backend(backend) == "cpu":
        from ..kernels.simd import SIMD_LEVEL
        out["simd_level"] = SIMD_LEVEL                 # the kernels' instructions (bench_report prints it)
    out["bandwidth"] = bandwidth
    if peak is not None:
        out["int8_peak"] = peak                         # G multiply-adds/s (bench_report prints it)
    if out["default_activations"] in out["modes"]:
        m = out["modes"][out["default_activations"]]
        out.update(decode_tok_s=m["decode_tok_s"], prompt_tok_s=m["prompt_tok_s"], batch_cost=m["batch_cost"])
    if "draft" in res:
        out["draft"] = res["draft"]
    first = runs["target"]
    if check:
        out["check"] = check_against_reference(first.model, next(iter(first.ctxs.values())), first.prompt[:24])
    if out["backend"] == "cuda":
        from ..kernels.matmul_cuda import launch_floor
        out["bandwidth_cuda"] = cuda_bandwidth(peak_gbs, reps=20 if quick else 100)
        out["cuda_launch_us"] = launch_floor(reps=50 if quick else 200)
        out["peak_gbs"] = peak_gbs
        # kernels launched per decoded token (one-row step), per layer and outside the layers
        out["cuda_launches"] = next(iter(first.ctxs.values())).backend.launch_counts()
    if pair_spec and draft_path:
        del runs
        out["pair"] = pair_speculative(path, draft_path, n_threads=n_threads, activations=activations)
    if memory and model_path is None:
        out["memory"] = pair_memory(n_threads=n_threads)
    if compile_time:
        out["compile"] = compile_times(n_threads=n_threads, model_path=path)
    return out


# ---- speculative decoding of a real pair ------------------------------------------------------

def pair_speculative(target, draft, n_threads=None, activations=("q8",), prompts=CODE_PROMPTS,
                     n_predict: int = 96, draft_max=(4, 8, 16)) -> dict:
    """Plain and speculative greedy decoding of the target with the draft, on code prompts, for
    each activation mode and draft-max (with and without llama.cpp's draft re-evaluation):
    tokens/s, whether the output equals plain decoding, acceptance."""
    from ..speculation.params import SpecParams
    from ..speculation.loop import SpeculativeLoop
    from ..run.generate import generate
    from ..run.pair import open_pair
    from ..run.sampling import Sampler, SamplerParams
    sp = SamplerParams(temp=0.0, seed=1)
    out = {"n_predict": n_predict, "draft_max": list(draft_max), "modes": {}}
    for a in activations:
        pair = open_pair(target, draft, n_ctx=512, n_threads=n_threads, activations=a)
        generate(pair.ctx_tgt, Sampler(sp), pair.target.vocab.tokenize("warm up"), 4)
        rows = []
        for text in prompts:
            ids = pair.target.vocab.tokenize(text)
            plain = generate(pair.ctx_tgt, Sampler(sp), ids, n_predict)
            row = {"prompt": text, "plain_tok_s": plain.tok_per_s, "spec": {}}
            for n_max in draft_max:
                for reeval in (False, True):
                    loop = SpeculativeLoop(pair.ctx_tgt, pair.ctx_dft, ids, n_predict, sp,
                                           SpecParams(n_max=n_max, reeval=reeval))
                    for _ in loop.rounds():
                        pass
                    r = loop.results()[0]
                    row["spec"][f"{n_max}{'' if reeval else '+keep'}"] = {
                        "draft_max": n_max, "reeval": reeval,
                        "tok_s": len(r.tokens) / r.t_gen_s if r.t_gen_s else 0.0,
                        "identical": r.tokens == plain.tokens,
                        "accept_rate": r.n_accept / max(r.n_drafted, 1)}
            rows.append(row)
        plain = statistics.median(r["plain_tok_s"] for r in rows)
        best = max(rows[0]["spec"], key=lambda k: statistics.median(r["spec"][k]["tok_s"] for r in rows))
        out["modes"][a] = {"prompts": rows, "plain_tok_s": plain, "best": best,
                           "spec_tok_s": statistics.median(r["spec"][best]["tok_s"] for r in rows),
                           "identical": all(s["identical"] for r in rows for s in r["spec"].values())}
        del pair
    return out


# the quantized matmul shapes and types whose bandwidth `bench --backend cuda` reports
BANDWIDTH_SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096))    # (n_out, n_in)
BANDWIDTH_TYPES = ("Q4_0", "Q8_0", "Q4_K")


# ---- measurements in fresh processes -------------------------------------------------------

def _run_probe(args: list, env_extra: dict | None = None, timeout: float = 1800):
    # -> (the JSON the probe printed, wall seconds of the whole process from its start)
    env = dict(os.environ, **(env_extra or {}))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "specnb.measure.bench"] + args, env=env, timeout=timeout,
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
    from ..speculation.params import SpecParams
    from ..speculation.loop import SpeculativeLoop
    from ..model import load_model
    from ..model.registry import default_target_path
    from ..run.pair import open_pair
    from ..run.sampling import SamplerParams
    t0 = time.perf_counter()
    tgt = load_model(default_target_path())            # timed apart; open_pair loads the draft
    t_load = time.perf_counter() - t0
    p = open_pair(tgt, None, n_ctx=n_ctx, n_threads=n_threads)
    loop = SpeculativeLoop(p.ctx_tgt, p.ctx_dft, tgt.vocab.tokenize("Once upon a time"), n_predict,
                           SamplerParams(temp=0.0, seed=1), SpecParams(n_max=3))
    for _ in loop.rounds():
        pass
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss      # KiB on Linux
    return {"peak_rss_mib": peak_kib / 1024, "load_target_s": t_load,
            "n_ctx": n_ctx, "kv_cache_mib": (p.ctx_tgt.backend.nbytes() + p.ctx_dft.backend.nbytes()) / 2**20,
            "weights_mib": (tgt.weight_bytes() + p.draft.weight_bytes()) / 2**20}


def compile_times(n_threads=None, model_path=None, activations=None) -> dict:
    """Seconds from a fresh process's start to the first logits of a model (default: the default
    target) in each activation mode asked for (default: the default mode, then the other one):
    once with an empty Numba cache (what the mode's kernels cost to compile) and once more with
    the cache that run filled (what a notebook's second run sees). Only the kernels of the
    model's tensor types and the mode at hand compile (kernels/qtypes.py), so the first mode's
    figure is a learner's cold start."""
    from ..model.registry import default_target_path
    path = model_path or default_target_path()
    first = default_activations()
    modes = activations or (first, *(a for a in ("q8", "f32") if a != first))
    with tempfile.TemporaryDirectory(prefix="specnb-numba-") as d:
        env = {"NUMBA_CACHE_DIR": d}
        args = ["--probe-first-call", path, ",".join(modes), str(n_threads or 0)]
        # the cold run measures the prefetch distance again too (a first run on a new machine
        # does), the warm one reads the verdict it recorded
        cold, wall_cold = _run_probe(args + ["measure-prefetch"], env)
        warm, wall_warm = _run_probe(args, env)
        cold["total_s"], warm["total_s"] = wall_cold, wall_warm
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    return {"cold": cold, "warm": warm, "cache_mib": size / 2**20, "model": os.path.basename(path),
            "modes": list(modes)}


def _probe_first_call(path, modes, n_threads=None, measure_prefetch: bool = False) -> dict:
    # (the parent times the whole process, interpreter start and imports included)
    from ..model import load_model
    t0 = time.perf_counter()
    model = load_model(path)
    out = {"load_s": time.perf_counter() - t0, "prefetch_s": 0.0}
    if measure_prefetch and "q8" in modes:
        from ..kernels.tuning import measure_and_record
        from ..run.context import set_threads
        t = time.perf_counter()
        measure_and_record(set_threads(n_threads))
        out["prefetch_s"] = time.perf_counter() - t
    for a in modes:
        t = time.perf_counter()
        ctx = Context(model, n_ctx=64, n_threads=n_threads, activations=a)
        ctx.decode(Batch.from_tokens([1, 2, 3], 0, 0, "last"))
        out[f"first_decode_{a}_s"] = time.perf_counter() - t
    return out


def cuda_bandwidth(peak_gbs: float = 4800.0, reps: int = 100) -> list:
    """GB/s of weight bytes read by the CUDA quantized matmul (one activation row) on large random
    matrices, timed with CUDA events around calls queued on a busy GPU, the fraction of
    `peak_gbs` (an H200: about 4800), and each call's time as Python issues them."""
    from gguf import GGMLQuantizationType

    from ..kernels.matmul_cuda import matmul_bandwidth
    qtypes = [int(GGMLQuantizationType[t]) for t in BANDWIDTH_TYPES]
    return matmul_bandwidth(BANDWIDTH_SHAPES, qtypes, n_rows=1, reps=reps, peak_gbs=peak_gbs)


def check_against_reference(model, ctx: Context, ids: list) -> dict:
    """Top-1 agreement and max |logit difference| of this context against the NumPy reference
    in the context's own activation mode (or, for a GPU context, against the CPU backend's exact
    float32 path)."""
    if ctx.backend_name == "cpu":
        from ..model.reference import Reference
        ref = Reference(model, activations=ctx.activations).forward(ids)
        name = f"numpy-reference ({ctx.activations} activations)"
    else:
        cpu = Context(model, n_ctx=ctx.n_ctx, backend="cpu", activations="f32")
        ref = cpu.decode(Batch.from_tokens(ids, 0, 0, "all"))
        name = "cpu"
    ctx.clear()
    got = ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))
    ctx.clear()
    return {"against": name, "positions": len(ids),
            "top1_agree": float(np.mean(ref.argmax(-1) == got.argmax(-1))),
            "max_abs_diff": float(np.abs(ref - got).max())}


if __name__ == "__main__":
    # the fresh-process probes behind pair_memory() and compile_times()
    if sys.argv[1] == "--probe-memory":
        nt = int(sys.argv[4]) if len(sys.argv) > 4 else None
        print(json.dumps(_probe_memory(int(sys.argv[2]), int(sys.argv[3]), nt)))
    elif sys.argv[1] == "--probe-first-call":
        print(json.dumps(_probe_first_call(sys.argv[2], sys.argv[3].split(","), int(sys.argv[4]) or None,
                                           measure_prefetch="measure-prefetch" in sys.argv[5:])))
    else:
        sys.exit(f"unknown probe {sys.argv[1:]}")
