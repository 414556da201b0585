"""llama.cpp's figures for `specnb bench`: run `llama-bench` on the model being measured, side by
side with specnb (one repetition at a time, in turn with specnb's), or quote the figures it
printed on the default model (tests/data/llamacpp_bench_smollm2.txt) when no llama-bench is at
hand. Never another model's figures.

    find_llama_bench(path)             the llama-bench to run: the path given, or SPECNB_LLAMA_BENCH
    run_llama_bench(exe, model, ...)   one run: {"pp": {k: tok/s}, "tg": tok/s, ...}
    LlamaCppColumn                     collects runs and gives the medians for the bench table
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess

from ..errors import ParamError

ENV = "SPECNB_LLAMA_BENCH"

# llama.cpp on the default model (build c392e509, 2 threads, a 2-vCPU AMD EPYC with AVX2; the
# text it printed is tests/data/llamacpp_bench_smollm2.txt, `llama-bench -t 2 -p 1,2,3,5,9,17,33
# -n 64 -r 10` and `llama-batched-bench ... -npl 1`; a test checks these numbers against it)
RECORDED_SMOLLM2 = {
    "source": "recorded: llama-bench -t 2 -r 10 (build c392e509) on a 2-vCPU AMD EPYC with AVX2 "
              "(tests/data/llamacpp_bench_smollm2.txt), not measured in this run",
    "pp_tok_s": {1: 93.88, 2: 124.67, 3: 148.76, 5: 169.07, 9: 196.90, 17: 163.74},
    "tg64_tok_s": 84.06,
    "batched_bench_tg_tok_s": 106.31,
    "model_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}


def find_llama_bench(path: str | None = None) -> str | None:
    """The llama-bench executable to run: `path`, else $SPECNB_LLAMA_BENCH, else None."""
    exe = path or os.environ.get(ENV) or None
    if exe is not None and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise ParamError(f"llama-bench: {exe!r} is not an executable file "
                         f"(give its path with --llama-bench PATH or {ENV})")
    return exe


def run_llama_bench(exe: str, model: str, n_threads: int, batch_sizes, n_gen: int = 32,
                    reps: int = 1, timeout: float = 900) -> dict:
    """One `llama-bench -m MODEL -t N -p k1,k2,.. -n N_GEN -r REPS -o json` run -> {"pp": {k: tok/s
    of a k-token prompt}, "tg": tok/s of generating n_gen tokens, "build": commit, "cmd": [...]}."""
    cmd = [exe, "-m", str(model), "-t", str(n_threads), "-p", ",".join(str(k) for k in batch_sizes),
           "-n", str(n_gen), "-r", str(reps), "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr[-1500:]}")
    return parse_llama_bench_json(r.stdout) | {"cmd": cmd}


def parse_llama_bench_json(text: str) -> dict:
    """llama-bench's `-o json` output -> {"pp": {k: tok/s}, "tg": tok/s or None, "build": str}."""
    rows = json.loads(text[text.index("["):])
    out = {"pp": {}, "tg": None, "build": None}
    for row in rows:
        out["build"] = row.get("build_commit")
        if row["n_gen"] == 0:
            out["pp"][int(row["n_prompt"])] = float(row["avg_ts"])
        elif row["n_prompt"] == 0:
            out["tg"] = float(row["avg_ts"])
    return out


class LlamaCppColumn:
    """llama.cpp's figures for one model: measured runs (medians), or the recorded default-model
    ones, or nothing."""

    def __init__(self, exe: str | None, model_path: str, is_default_model: bool):
        self.exe, self.model_path = exe, model_path
        self.is_default_model = is_default_model
        self.runs: list[dict] = []

    def run(self, n_threads, batch_sizes, n_gen):
        if self.exe:
            self.runs.append(run_llama_bench(self.exe, self.model_path, n_threads, batch_sizes, n_gen))

    def result(self) -> dict | None:
        if self.runs:
            pp = {k: statistics.median(r["pp"][k] for r in self.runs) for k in self.runs[0]["pp"]}
            tg = statistics.median(r["tg"] for r in self.runs)
            return {"source": f"llama-bench measured in this run ({len(self.runs)} runs taking turns "
                              f"with specnb's; build {self.runs[0]['build']}; medians)",
                    "measured": True, "pp_tok_s": pp, "tg_tok_s": tg, "cmd": " ".join(self.runs[0]["cmd"])}
        if self.is_default_model:
            return dict(RECORDED_SMOLLM2, measured=False, tg_tok_s=RECORDED_SMOLLM2["tg64_tok_s"])
        return None


def batch_cost(col: dict, k: int) -> float | None:
    """What a k-token batch cost llama.cpp relative to one token: k * pp1 / pp_k."""
    pp = col["pp_tok_s"]
    return k * pp[1] / pp[k] if k in pp and 1 in pp else None
