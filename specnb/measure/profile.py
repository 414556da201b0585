"""Where a decode step's time goes: each kernel of the forward pass timed on its own, on the
model's own weights and shapes, beside the whole step (`specnb bench --profile`).

    decode_profile(model, activations, n_rows=1)   -> {"rows": [...], "sum_ms", "fused_ms", "decode_ms"}
    format_profile(p)                               the table

A step of the CPU backend is one compiled call (kernels/forward.py) making, per layer, two
RMS norms, seven matrix products (q, k, v, o, gate, up, down), two RoPE rotations, attention
and SwiGLU, then the output norm and product; the embedding lookup decodes one row per token.
Here each of those kernels is called from Python on arrays of the step's shapes, `reps` times,
and its median is charged as many times as the step makes that call. The sum can differ from
the fused step: a call from Python pays a few microseconds of dispatch the fused pass does not
(measured by `call_us`, an empty compiled call, and subtracted), and a kernel alone finds its
inputs in cache where the step may not. What the step costs beyond the compiled pass
(`decode_ms` - `fused_ms`) is Context.decode's Python: validation, RoPE angles, bookkeeping.
Beside them, `phases`: the fused step itself with each phase timed inside it (the CPU's counter,
kernels/clock.py), the weights streaming from memory as they do in a real step.
"""
from __future__ import annotations

import statistics
import time
from functools import partial

import numpy as np


def _median_s(f, reps: int) -> float:
    f()                                                  # compile / load from the cache, warm caches
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _call_overhead_s(reps: int = 200) -> float:
    from numba import njit

    @njit(cache=False)
    def empty(a, b, c, d):
        return None
    a = np.zeros(1, np.float32)
    empty(a, a, 0, a)
    return _median_s(lambda: empty(a, a, 0, a), reps)


def decode_profile(model, activations: str | None = None, n_rows: int = 1, n_past: int = 64,
                   reps: int = 7, n_threads: int | None = None) -> dict:
    """Per-kernel time of one decode step of `n_rows` rows (1: plain decoding; 1 + d: a
    verification batch) after `n_past` positions, on this model's weights, with the given
    activation mode; beside the fused step and Context.decode, measured in the same run."""
    from ..run.context import Batch, Context
    from ..kernels.activations import swiglu_into
    from ..kernels.attention import attention
    from ..kernels.matmul import dequant_row, matmul
    from ..kernels.matmul_q8 import matmul_q8
    from ..kernels.norm import rmsnorm
    from ..kernels.qtypes import qtype_name
    from ..kernels.rope import rope, rope_angles

    ctx = Context(model, n_ctx=n_past + n_rows + 1, n_threads=n_threads, activations=activations)
    h = model.hparams
    # the int8 products at the prefetch distance the pass runs with
    mm = (partial(matmul_q8, ahead=ctx.backend.ahead, ahead_x16=ctx.backend.ahead_x16) if ctx.activations == "q8"
          else matmul)
    rng = np.random.default_rng(0)
    n = n_rows
    call_s = _call_overhead_s()
    rows: dict[tuple, dict] = {}

    def charge(op, qtype, shape, seconds, nbytes=0):
        key = (op, qtype, shape)
        r = rows.setdefault(key, {"op": op, "type": qtype, "shape": shape, "calls": 0, "s": 0.0,
                                  "bytes": 0})
        r["calls"] += 1
        r["s"] += max(seconds - call_s, 0.0)
        r["bytes"] += nbytes

    def x_of(n_in):
        return rng.standard_normal((n, n_in)).astype(np.float32)

    timed: dict[tuple, float] = {}          # (qtype, n_out, n_in) -> median seconds (shared by layers)

    def matrix(op, w, n_in):
        key = (w.qtype, w.n_out, n_in)
        if key not in timed:
            x, out = x_of(n_in), np.empty((n, w.n_out), np.float32)
            timed[key] = _median_s(lambda: mm(x, w.data, w.qtype, out), reps)
        charge(op, qtype_name(w.qtype), f"{w.n_out}x{n_in}", timed[key], w.data.nbytes)

    d, hd = h.n_embd, h.head_dim
    kv = h.n_head_kv * hd
    a = x_of(d)
    w_norm = np.ones(d, np.float32)
    t_norm = _median_s(lambda: rmsnorm(a, w_norm, h.norm_eps, a), reps)
    pos = np.arange(n_past, n_past + n, dtype=np.int64)
    cos, sin = rope_angles(pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, None)
    q = x_of(h.n_head * hd).reshape(n, h.n_head, hd)
    k = x_of(kv).reshape(n, h.n_head_kv, hd)
    t_rope_q = _median_s(lambda: rope(q, cos, sin, h.rope_mode), reps)
    t_rope_k = _median_s(lambda: rope(k, cos, sin, h.rope_mode), reps)
    kc = rng.standard_normal((1, n_past + n, kv)).astype(np.float32)
    vc = rng.standard_normal((1, n_past + n, kv)).astype(np.float32)
    valid = np.ones((1, n_past + n), np.bool_)
    seq = np.zeros(n, np.int64)
    att = np.empty((n, h.n_head, hd), np.float32)
    qa = x_of(h.n_head * hd).reshape(n, h.n_head, hd)
    t_att = _median_s(lambda: attention(qa, kc, vc, valid, seq, pos, h.n_head_kv, att, ctx.n_threads), reps)
    g, u = x_of(h.n_ff), x_of(h.n_ff)
    t_swiglu = _median_s(lambda: swiglu_into(g, u, np.empty_like(g)), reps)
    # the matrices as the pass multiplies them (with int8 activations the 32-block types interleaved)
    layer_w, output_w = ctx.backend.kernel_weights()
    for ws in layer_w:
        charge("rmsnorm", "f32", f"{n}x{d}", t_norm)
        for op, w, n_in in zip(("q", "k", "v", "o", "gate", "up", "down"), ws,
                               (d, d, d, h.n_head * hd, d, d, h.n_ff)):
            matrix("matmul " + op, w, n_in)
        charge("rope", "f32", f"{n}x{h.n_head}x{hd}", t_rope_q)
        charge("rope", "f32", f"{n}x{h.n_head_kv}x{hd}", t_rope_k)
        charge("attention", "f32", f"{n}x{h.n_head}x{hd}, {n_past + n} positions", t_att)
        charge("rmsnorm", "f32", f"{n}x{d}", t_norm)
        charge("swiglu", "f32", f"{n}x{h.n_ff}", t_swiglu)
    charge("rmsnorm", "f32", f"{n}x{d}", t_norm)
    matrix("matmul output", output_w, d)
    row = np.empty(d, np.float32)
    t_emb = _median_s(lambda: dequant_row(model.tok_embd.data[1], model.tok_embd.qtype, row), reps)
    for _ in range(n):
        charge("embedding row", qtype_name(model.tok_embd.qtype), f"1x{d}", t_emb)

    # the whole step, fused and through Context.decode, after n_past positions
    prefix = rng.integers(0, model.n_vocab, n_past).tolist()
    toks = rng.integers(0, model.n_vocab, n).tolist()
    ctx.decode(Batch.from_tokens(prefix, 0, 0, "last"))

    def step():
        ctx.decode(Batch.from_tokens(toks, n_past, 0, "all"))
        ctx.seq_rm(0, n_past, -1)
    decode_s = _median_s(step, reps)
    b = ctx.backend
    tk, ps, sq = (np.asarray(v, np.int64) for v in (toks, pos, seq))
    valid_c = ctx.valid.copy()
    valid_c[0, n_past:n_past + n] = True
    out_rows = np.arange(n, dtype=np.int64)
    fused_s = _median_s(lambda: b.forward(tk, ps, sq, valid_c, out_rows), reps)
    phases = _phases(b, (tk, ps, sq, valid_c, out_rows), layer_w, output_w, reps)
    ctx.seq_rm(0, n_past, -1)

    out = sorted(rows.values(), key=lambda r: -r["s"])
    total = sum(r["s"] for r in out)
    for r in out:
        r["ms"] = 1e3 * r.pop("s")
        r["share"] = r["ms"] / (1e3 * total) if total else 0.0
        r["gb_s"] = r["bytes"] / (r["ms"] / 1e3) / 1e9 if r["bytes"] and r["ms"] else None
    return {"activations": ctx.activations, "n_rows": n, "n_past": n_past, "threads": ctx.n_threads,
            "call_us": 1e6 * call_s, "rows": out, "sum_ms": 1e3 * total, "fused_ms": 1e3 * fused_s,
            "decode_ms": 1e3 * decode_s, "weight_bytes": int(model.weight_bytes()), "phases": phases}


def _phases(backend, args, layer_w, output_w, reps: int) -> list | None:
    """The fused step with its phases timed where they run (kernels/clock.py: the CPU's counter
    read between them inside the compiled pass): per phase, its share of the counter's ticks times
    the call's wall time, the median over `reps` calls, and the weights it reads. None where there
    is no such pass (the CUDA backend) or no counter (kernels.clock.HAS_CLOCK)."""
    from ..kernels.clock import HAS_CLOCK
    from ..kernels.forward import PHASES
    if getattr(backend, "name", "") != "cpu" or not HAS_CLOCK:
        return None
    clock = np.zeros(len(PHASES), np.int64)
    backend.forward(*args, clock)                        # compiles (or loads) the timed pass
    ms = []
    for _ in range(reps):
        clock[:] = 0
        t0 = time.perf_counter()
        backend.forward(*args, clock)
        dt = time.perf_counter() - t0
        ms.append(1e3 * dt * clock / max(int(clock.sum()), 1))
    med = np.median(np.array(ms), axis=0)
    nbytes = dict.fromkeys(PHASES, 0)
    for ws in layer_w:
        q, k, v, o, gate, up, down = (w.data.nbytes for w in ws)
        nbytes["q, k, v"] += q + k + v
        nbytes["o"] += o
        nbytes["gate, up"] += gate + up
        nbytes["down"] += down
    nbytes["output"] = output_w.data.nbytes
    return [{"phase": ph, "ms": float(m), "share": float(m / med.sum()),
             "gb_s": nbytes[ph] / (m / 1e3) / 1e9 if nbytes[ph] and m > 0 else None}
            for ph, m in zip(PHASES, med)]


def format_profile(p: dict, top: int = 14) -> str:
    L = [f"where a {p['n_rows']}-row step's time goes ({p['activations']} activations, "
         f"{p['threads']} threads, after {p['n_past']} positions; each kernel timed alone, less "
         f"{p['call_us']:.1f} us of Python dispatch per call):",
         f"  {'kernel':<16s} {'type':<6s} {'shape':<30s} {'calls':>5s} {'ms/step':>8s} {'share':>6s} {'GB/s':>6s}"]
    for r in p["rows"][:top]:
        gb = f"{r['gb_s']:6.1f}" if r["gb_s"] else "      "
        L.append(f"  {r['op']:<16s} {r['type']:<6s} {r['shape']:<30s} {r['calls']:5d} {r['ms']:8.3f} "
                 f"{100 * r['share']:5.1f}% {gb}")
    rest = p["rows"][top:]
    if rest:
        L.append(f"  ({len(rest)} more rows: {sum(r['ms'] for r in rest):.3f} ms)")
    L.append(f"  sum of the kernels {p['sum_ms']:.2f} ms; the fused step {p['fused_ms']:.2f} ms; "
             f"Context.decode {p['decode_ms']:.2f} ms ({p['decode_ms'] - p['fused_ms']:.2f} ms of "
             f"Python around the compiled pass)")
    if p.get("phases"):
        L.append("inside the fused step (each phase timed where it runs, by the CPU's counter, the weights "
                 "streaming as in a real step; every layer's):")
        L.append(f"  {'phase':<16s} {'ms/step':>8s} {'share':>6s} {'GB/s':>6s}")
        for r in p["phases"]:
            gb = f"{r['gb_s']:6.1f}" if r["gb_s"] else "      "
            L.append(f"  {r['phase']:<16s} {r['ms']:8.3f} {100 * r['share']:5.1f}% {gb}")
    return "\n".join(L)
