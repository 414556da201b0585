"""The CUDA backend on a lent GPU in one device call: its checks and its figures (issue 69, item 4).

    python scripts/cuda_device.py prep          here, once: .gpu/ (the real pair's skeletons) and
                                                .whl/ (the wheels the GPU machine lacks)
    bash scripts/cuda_device.sh                 there (the `run` tool, carry [".gpu", ".whl"]):
                                                installs the wheels, then `cuda_device.py run`

The real pair does not travel: a call carries 64 MiB in all, and the 1.5B's output head alone is
183 MiB (its token embedding 125 MiB), so no layer cut of it fits either. What travels instead is
each model's *skeleton*: the GGUF header (its metadata, the tokenizer, every tensor's name, type,
shape and offset; 1.3 MB compressed) and a table of its tensors. On the GPU machine each skeleton
becomes a *twin*: the same file, byte for byte up to the data, every tensor filled with random
valid blocks of its own type (rows of a small random pool repeated; the rows of the special
tokens' logits zeroed, so that greedy decoding never stops on them). A twin costs the GPU and
the host exactly what the real model costs them (the same kernels on the same shapes and types,
every byte read), so speeds, launches, host time, the k-row curve and the bandwidth shares are
the real pair's. What a twin cannot give is the real pair's acceptance: its tokens are noise.
So the speculative figures are (a) exact-match speculation on the twins, whose output must equal
plain decoding token for token (the mechanism at the real shapes), and (b) the loop with
synthetic acceptance at the real pair's acceptance on code measured on the CPU (`--alpha`,
default 0.93: docs/lab's waterfall, draft-max 3), which runs every draft step and verification
batch of the real costs, beside the cost model's prediction from the measured c and batch costs.

`run` prints one line per phase as it goes and a summary last, and writes every figure to
OUT/cuda_device.json (OUT: --out, else $OUT). tests/cudasim_checks.py (group `device_script`)
runs `prep` and `run` on a tiny model under the simulator, so the device call is not its first.
"""
from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import lzma
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PAIR = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
CODE_PROMPT = "def fibonacci(n):\n"
WHEELS = ("numpy==2.4.6", "gguf==0.19.0", "numba-cuda==0.30.4")
PEAK_GBS = {"H200": 4800.0, "H100": 3350.0}        # HBM bandwidth by the vendors' datasheets
K_ROWS = (1, 2, 3, 4, 5, 9, 17)


class _KernelsFinder(importlib.abc.MetaPathFinder):
    # `specnb.kernels` is the checkout's kernels/ folder (pyproject's package-dir), found here
    # without installing specnb (the GPU machine runs the checkout as it is)
    def find_spec(self, name, path, target=None):
        if name == "specnb.kernels":
            k = ROOT / "kernels"
            return importlib.util.spec_from_file_location(name, k / "__init__.py",
                                                          submodule_search_locations=[str(k)])
        return None


def use_checkout():
    try:        # numba-cuda's .pth hook (numba.cuda -> numba_cuda), unread in a pip --target folder
        import _numba_cuda_redirector  # noqa: F401
    except ImportError:
        pass
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if not any(isinstance(f, _KernelsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _KernelsFinder())


# ---- here: skeletons and wheels --------------------------------------------------------------

def _file(stem: Path, ext: str) -> Path:
    # stem + ext (not with_suffix: the registry's names hold dots, "qwen2.5-coder-1.5b")
    return stem.parent / (stem.name + ext)


def skeleton(gguf_path, stem: Path) -> dict:
    """Write stem.head.xz (the GGUF's bytes before its tensor data) and stem.json (each tensor's
    name, type, shape, offset, bytes; the file's size; the special tokens' ids)."""
    import gguf
    r = gguf.GGUFReader(str(gguf_path))
    with open(gguf_path, "rb") as f:
        head = f.read(r.data_offset)
    types = r.fields.get("tokenizer.ggml.token_type")
    special = [] if types is None else \
        [i for i, t in enumerate(types.data) if int(types.parts[t][0]) != 1]   # 1: NORMAL
    meta = {"source": os.path.basename(gguf_path), "size": os.path.getsize(gguf_path),
            "data_offset": r.data_offset, "special_ids": special,
            "tensors": [{"name": t.name, "type": int(t.tensor_type), "shape": [int(x) for x in t.shape],
                         "offset": int(t.data_offset) - r.data_offset, "n_bytes": int(t.n_bytes)}
                        for t in r.tensors]}
    stem.parent.mkdir(parents=True, exist_ok=True)
    _file(stem, ".head.xz").write_bytes(lzma.compress(head, preset=6))
    _file(stem, ".json").write_text(json.dumps(meta))
    return meta


def carried_bytes(paths) -> int:
    """Bytes a device call would carry: the tracked files plus the given folders."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\0")
    n = sum(os.path.getsize(ROOT / f) for f in files if f and (ROOT / f).is_file())
    for p in paths:
        n += sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())
    return n


def prep(out: Path, models=PAIR, wheels: bool = True) -> dict:
    """Make out/ (skeletons of the models) and, with wheels, ROOT/.whl (the wheels: NumPy below
    2.5, which numba-cuda 0.30 imports; gguf; numba-cuda as tested here)."""
    from specnb.model.registry import resolve
    done = {}
    for name in models:
        path = resolve(name) if not os.path.exists(name) else name
        done[name] = skeleton(path, out / Path(name).name.removesuffix(".gguf"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                        *[a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                                      "manylinux_2_17_x86_64", "manylinux2014_x86_64")
                          for a in ("--platform", p)],
                        "-d", str(ROOT / ".whl"), *WHEELS], check=True)
    size = carried_bytes([out] + ([ROOT / ".whl"] if wheels else []))
    print(f"skeletons in {out}: {', '.join(done)}; a call carries {size / 2**20:.1f} MiB "
          f"(the limit: 64 MiB)")
    return {"models": list(done), "carried_bytes": size}


# ---- there: twins ----------------------------------------------------------------------------

def build_twin(stem: Path, dst: Path, seed: int = 0, pool_rows: int = 64) -> Path:
    """The GGUF of `stem`'s skeleton with random valid blocks in every tensor (see the module's
    comment); matrices tiled from a pool of `pool_rows` random rows."""
    from specnb.kernels.qtypes import F32, random_blocks
    meta = json.loads(_file(stem, ".json").read_text())
    rng = np.random.default_rng(seed)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as f:
        f.write(lzma.decompress(_file(stem, ".head.xz").read_bytes()))
        f.truncate(meta["size"])
        for t in meta["tensors"]:
            n_in, n_out = t["shape"][0], int(np.prod(t["shape"][1:]))
            if len(t["shape"]) == 1:
                v = rng.standard_normal(n_in).astype(np.float32)
                data = (1 + 0.1 * v) if "norm" in t["name"] else 0.1 * v
                data = np.asarray(data, np.float32).view(np.uint8)
            else:
                pool = random_blocks(t["type"], min(n_out, pool_rows), n_in, rng,
                                     scale=1.0 if t["type"] != F32 else 0.05)
                data = np.resize(pool, (n_out, pool.shape[1]))
                if t["name"] == "output.weight" or (t["name"] == "token_embd.weight" and not any(
                        u["name"] == "output.weight" for u in meta["tensors"])):
                    ids = [i for i in meta["special_ids"] if i < n_out]
                    data[ids] = 0            # logit 0: below the largest random logit
            if data.nbytes != t["n_bytes"]:
                raise ValueError(f"{t['name']}: {data.nbytes} bytes made, {t['n_bytes']} in the file")
            f.seek(meta["data_offset"] + t["offset"])
            f.write(np.ascontiguousarray(data).tobytes())
    return dst


# ---- there: measurements ---------------------------------------------------------------------

def _context(model, mode: str = "prepared", graphs: bool = False, n_ctx: int = 512):
    from specnb.run.context import Context
    os.environ["SPECNB_CUDA_LAUNCH"] = mode
    os.environ["SPECNB_CUDA_GRAPHS"] = "1" if graphs else "0"
    return Context(model, n_ctx=n_ctx, backend="cuda")


def launch_bits(model, prompt, n_steps: int = 6) -> dict:
    """Logits of a prompt, single-token steps and a 5-row batch through numba-cuda's dispatch,
    prepared launches and (on a GPU) a captured graph: identical bits?"""
    from specnb.run.context import Batch
    runs = {}
    for name, mode, graphs in (("numba", "numba", False), ("prepared", "prepared", False),
                               ("graph", "prepared", True)):
        ctx = _context(model, mode, graphs)
        out = [ctx.decode(Batch.from_tokens(prompt, 0, 0, "all"))]
        tok, p = int(out[0][-1].argmax()), len(prompt)
        for _ in range(n_steps):
            out.append(ctx.decode(Batch().add(tok, p, 0, True)))
            tok, p = int(out[-1][0].argmax()), p + 1
        out.append(ctx.decode(Batch.from_tokens([tok] * 5, p, 0, "all")))
        runs[name] = (out, ctx.backend.launch_counts())
        del ctx
    ref = runs["numba"][0]
    return {name: {"identical_to_numba": all(np.array_equal(a, b) for a, b in zip(o, ref)),
                   "launches": lc} for name, (o, lc) in runs.items()}


def decode_speed(model, prompt, n_gen: int, mode: str, graphs: bool) -> dict:
    """Greedy single-token steps after a prompt: tok/s, the median step, the host's time until
    every launch was issued and the GPU's time (CUDA events), per token; launches per token."""
    from specnb.run.context import Batch
    ctx = _context(model, mode, graphs)
    be = ctx.backend
    logits = ctx.decode(Batch.from_tokens(prompt, 0, 0, "last"))
    tok, p = int(logits[0].argmax()), len(prompt)
    for _ in range(3):                                   # warm-up: the step is made, compiled
        tok, p = int(ctx.decode(Batch().add(tok, p, 0, True))[0].argmax()), p + 1
    be.time_gpu = True
    wall, host, gpu = [], [], []
    t0 = time.perf_counter()
    for _ in range(n_gen):
        t = time.perf_counter()
        tok, p = int(ctx.decode(Batch().add(tok, p, 0, True))[0].argmax()), p + 1
        wall.append(time.perf_counter() - t)
        host.append(be.last_host_s)
        gpu.append(be.last_gpu_ms / 1e3)
    total = time.perf_counter() - t0
    lc = be.launch_counts()
    return {"mode": "graph" if graphs else mode, "graph_captured": lc["graph"], "tok_s": n_gen / total,
            "step_ms": 1e3 * statistics.median(wall), "host_us": 1e6 * statistics.median(host),
            "gpu_us": 1e6 * statistics.median(gpu), "launches": lc}


def k_row_curve(model, prompt, graphs: bool, sizes=K_ROWS, reps: int = 5) -> dict:
    from specnb.measure.bench import batch_costs
    ctx = _context(model, "prepared", graphs)
    t = batch_costs(ctx, prompt, sizes, reps)
    return {str(k): t[k] / t[1] for k in sizes}


def speculative(target, draft, prompt, n_predict: int, alpha: float, draft_max=(3, 8)) -> dict:
    """Plain greedy decoding of the target twin, then the pair's loop at each draft-max: exact
    match (output == plain?) and synthetic acceptance at alpha per position; tok/s and speed-up."""
    from specnb.run.generate import generate
    from specnb.run.sampling import Sampler, SamplerParams
    from specnb.speculation.loop import SpeculativeLoop
    from specnb.speculation.params import SpecParams
    sp = SamplerParams(temp=0.0, seed=1)
    tgt, dft = _context(target), _context(draft)
    generate(tgt, Sampler(sp), prompt, 4)                # warm-up
    plain = generate(tgt, Sampler(sp), prompt, n_predict)
    out = {"n_predict": n_predict, "alpha": alpha, "plain_tok_s": plain.tok_per_s, "runs": {}}
    for g in draft_max:
        for name, params in (("exact", SpecParams(n_max=g)),
                             ("synthetic", SpecParams(n_max=g, synth_rates=[alpha ** (i + 1)
                                                                             for i in range(g)]))):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")          # (synthetic acceptance says its output is noise)
                loop = SpeculativeLoop(tgt, dft, prompt, n_predict, sp, params)
                for _ in loop.rounds():
                    pass
            r = loop.results()[0]
            tok_s = len(r.tokens) / r.t_gen_s if r.t_gen_s else 0.0
            out["runs"][f"{name} {g}"] = {"tok_s": tok_s, "speedup": tok_s / plain.tok_per_s,
                                          "accepted": r.n_accept / max(r.n_drafted, 1),
                                          "identical": r.tokens == plain.tokens if name == "exact" else None}
    return out


def predicted_speedup(alpha: float, g: int, c: float, bc: float) -> float:
    """Expected tokens per round over the round's cost in target steps (DESIGN 5, Leviathan et
    al. 2023, with the measured cost bc of a (g + 1)-row verification batch): (1 - a^(g+1)) /
    ((1 - a)(g c + bc))."""
    return (1 - alpha ** (g + 1)) / ((1 - alpha) * (g * c + bc))


def versions() -> dict:
    import numba
    import numpy
    out = {"python": sys.version.split()[0], "numpy": numpy.__version__, "numba": numba.__version__}
    for m in ("numba_cuda", "cuda.core", "cuda.bindings"):
        try:
            out[m] = importlib.import_module(m).__version__
        except Exception as e:             # (reported, not fatal)
            out[m] = f"unavailable ({type(e).__name__})"
    from numba import cuda
    name = getattr(cuda.get_current_device(), "name", "the CUDA simulator")
    out["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
    return out


def run(skeletons: Path, out_dir: Path, alpha: float = 0.93, n_gen: int = 64,
        bench_cli: bool = True, quick: bool = False) -> dict:
    """Everything a device call measures (see the module's comment); returns the JSON it writes.
    A phase that fails is recorded (res["errors"]) and the next one runs: one call, all it can."""
    from specnb.measure.bench import decode_bytes
    from specnb.model import load_model
    t_start = time.perf_counter()
    res = {"versions": versions(), "errors": {}}
    gpu = res["versions"]["gpu"]
    peak = res["peak_gbs"] = next((v for k, v in PEAK_GBS.items() if k in gpu), 4800.0)
    out_dir.mkdir(parents=True, exist_ok=True)

    def phase(name, fn, show=lambda r: r):
        try:
            r = fn()
        except Exception as e:
            traceback.print_exc()
            res["errors"][name] = r = f"{type(e).__name__}: {e}"
            print(f"[{time.perf_counter() - t_start:6.1f} s] {name}: FAILED {r}", flush=True)
            return None
        print(f"[{time.perf_counter() - t_start:6.1f} s] {name}: {show(r)}", flush=True)
        (out_dir / "cuda_device.json").write_text(json.dumps(res, indent=1, default=str))
        return r

    print(f"{gpu}: {res['versions']}", flush=True)
    # the larger model is the target
    stems = sorted((p.parent / p.name.removesuffix(".json") for p in skeletons.glob("*.json")),
                   key=lambda p: -json.loads(_file(p, ".json").read_text())["size"])
    twins = phase("twins", lambda: [build_twin(s, Path("/tmp/specnb-twins") / f"{s.name}-twin.gguf")
                                    for s in stems], lambda r: [t.name for t in r])
    if not twins:
        return res
    target, draft = twins[0], twins[-1]
    if bench_cli:
        from specnb.app.cli import main as cli
        args = ["bench", "--backend", "cuda", "--check", "-m", str(target), "--quick", "--no-memory",
                "--reps", "3", "--bandwidth-gib", "0.25", "--peak-gbs", str(peak)]
        res["bench_cli_rc"] = phase("bench --backend cuda --check",
                                    lambda: cli(args + (["-md", str(draft)] if draft != target else [])),
                                    lambda rc: f"exit {rc}")
    models = {"target": load_model(target), "draft": load_model(draft)}
    prompt = models["target"].vocab.tokenize(CODE_PROMPT)
    res["launch_bits"] = phase("launch modes, identical bits", lambda: launch_bits(models["target"], prompt))
    res["decode"] = {}
    for role, m in models.items():
        for mode, graphs in (("numba", False), ("prepared", False), ("prepared", True)):
            def one(m=m, mode=mode, graphs=graphs):
                d = decode_speed(m, prompt, n_gen, mode, graphs)
                d["bandwidth_frac"] = decode_bytes(m) / (d["gpu_us"] * 1e-6) / 1e9 / peak
                return d
            d = phase(f"{role} decode {'graph' if graphs else mode}", one,
                      lambda d: f"{d['tok_s']:.1f} tok/s, step {d['step_ms']:.2f} ms, host "
                                f"{d['host_us']:.0f} us, GPU {d['gpu_us']:.0f} us, "
                                f"{d['launches']['per_pass']} launches")
            if d:
                res["decode"][f"{role} {d['mode']}"] = d
    graphs = bool(res["decode"].get("target graph", {}).get("graph_captured"))
    res["k_rows"] = phase(f"k-row curve (target, {'graph' if graphs else 'prepared'})",
                          lambda: k_row_curve(models["target"], prompt, graphs,
                                              K_ROWS[:4] if quick else K_ROWS)) or {}
    if not quick:
        from specnb.kernels.matmul_cuda import matmul_bandwidth
        res["products"] = phase("products at one row", lambda: matmul_bandwidth(peak_gbs=peak, reps=100),
                                lambda r: "; ".join(f"{b['type']} {b['n_out']}x{b['n_in']} "
                                                    f"{100 * (b['frac_peak'] or 0):.1f}%" for b in r))
    sp = phase("speculative", lambda: speculative(models["target"], models["draft"], prompt, n_gen, alpha))
    key = "graph" if graphs else "prepared"
    if sp and f"draft {key}" in res["decode"] and f"target {key}" in res["decode"]:
        sp["c"] = c = res["decode"][f"draft {key}"]["step_ms"] / res["decode"][f"target {key}"]["step_ms"]
        for g in (3, 8):
            if str(g + 1) in res["k_rows"]:
                sp[f"predicted {g}"] = predicted_speedup(alpha, g, c, res["k_rows"][str(g + 1)])
    res["speculative"] = sp
    print(summary(res), flush=True)
    (out_dir / "cuda_device.json").write_text(json.dumps(res, indent=1, default=str))
    return res


def summary(res: dict) -> str:
    v, peak = res["versions"], res["peak_gbs"]
    L = [f"== {v['gpu']} (peak {peak:.0f} GB/s); numpy {v['numpy']}, numba {v['numba']}, "
         f"numba-cuda {v['numba_cuda']}"]
    L += [f"FAILED {k}: {e}" for k, e in res["errors"].items()]
    bits = res.get("launch_bits")
    if bits:
        g = bits["graph"]["launches"]
        L.append(f"bits: prepared == numba launches: {bits['prepared']['identical_to_numba']}; graph "
                 f"== numba launches: {bits['graph']['identical_to_numba']} (graph captured: "
                 f"{g['graph']}" + (f", {g['graph_error']}" if g["graph_error"] else "") + ")")
    if res["decode"]:
        L.append(f"{'decode (twin)':32s} {'tok/s':>8s} {'step ms':>8s} {'host us':>8s} {'GPU us':>8s} "
                 f"{'launches':>8s} {'of peak':>8s}")
    for k, d in res["decode"].items():
        k += " (not captured)" if d["mode"] == "graph" and not d["graph_captured"] else ""
        L.append(f"{k:32s} {d['tok_s']:8.1f} {d['step_ms']:8.2f} {d['host_us']:8.0f} {d['gpu_us']:8.0f} "
                 f"{d['launches']['per_pass']:8d} {100 * d['bandwidth_frac']:7.1f}%")
    for role in ("target", "draft"):
        lc = next((d["launches"] for k, d in res["decode"].items() if k.startswith(role)), None)
        if lc:
            L.append(f"launches per token ({role}): {lc['per_pass']} = {lc['per_layer']} per layer x "
                     f"{lc['n_layer']} + {lc['outside_layers']} (before issue 69: 21 per layer + 4)"
                     + (f"; prepared launches FELL BACK: {lc['launch_error']}" if lc.get("launch_error") else ""))
    if res["k_rows"]:
        L.append("k-row curve (target): " + ", ".join(f"{k}: {c:.2f}" for k, c in res["k_rows"].items()))
    for b in res.get("products") or []:
        L.append(f"product {b['type']} {b['n_out']}x{b['n_in']}: GPU {b['us'] or 0:.1f} us, "
                 f"{b['gbs'] or 0:.0f} GB/s = {100 * (b['frac_peak'] or 0):.1f}% of peak; host "
                 f"{b['host_us']:.1f} us (numba) / {b['host_us_prepared']:.1f} us (prepared)")
    s = res.get("speculative")
    if s:
        L.append(f"speculative on the twins, {s['n_predict']} tokens, plain {s['plain_tok_s']:.1f} "
                 f"tok/s, c = {s.get('c', float('nan')):.2f}:")
        for k, r in s["runs"].items():
            ident = "" if r["identical"] is None else f", output identical: {r['identical']}"
            L.append(f"  {k:12s} {r['tok_s']:8.1f} tok/s = {r['speedup']:.2f}x, accepted "
                     f"{100 * r['accepted']:.0f}%{ident}")
        for g in (3, 8):
            if f"predicted {g}" in s:
                L.append(f"  cost model at alpha {s['alpha']}, draft-max {g}: {s[f'predicted {g}']:.2f}x")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prep", help="here: the pair's skeletons into .gpu/, the wheels into .whl/")
    p.add_argument("--out", type=Path, default=ROOT / ".gpu")
    p.add_argument("--models", nargs="+", default=list(PAIR))
    p.add_argument("--no-wheels", action="store_true")
    p = sub.add_parser("run", help="there: twins, checks and figures")
    p.add_argument("--skeletons", type=Path, default=ROOT / ".gpu")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/specnb-device")))
    p.add_argument("--alpha", type=float, default=0.93)
    p.add_argument("--n-gen", type=int, default=64)
    p.add_argument("--no-bench", action="store_true", help="skip `bench --backend cuda --check`")
    p.add_argument("--quick", action="store_true", help="fewer k rows, no product table")
    a = ap.parse_args(argv)
    use_checkout()
    if a.cmd == "prep":
        prep(a.out, a.models, wheels=not a.no_wheels)
    else:
        run(a.skeletons, a.out, a.alpha, a.n_gen, bench_cli=not a.no_bench, quick=a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
