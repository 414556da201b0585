"""specnb/measure/bench.py, bench_report.py and bench_llamacpp.py: what `specnb bench` measures and
prints, llama.cpp's column (measured by llama-bench on the same model, or the printed figures of
the default model, never another model's), and the goals it marks met or missed."""
import json
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from specnb import ParamError
from specnb.measure.bench_llamacpp import find_llama_bench, parse_llama_bench_json
from specnb.measure.bench_report import cliffs, format_bench, format_goals, goals, steps
from specnb.measure.bench import extra_row_costs

DATA = Path(__file__).parent / "data"


def test_bench_llama_cpp_figures_are_the_printed_ones():
    # the default model's recorded llama.cpp column against the tables llama-bench printed
    from specnb.measure.bench_llamacpp import RECORDED_SMOLLM2 as rec, batch_cost
    text = (DATA / "llamacpp_bench_smollm2.txt").read_text()
    run2 = text.split("## Run 2")[1].split("## Run 3")[0]
    pp = {int(k): float(v) for k, v in re.findall(r"\|\s+pp(\d+) \|\s+([\d.]+) ±", run2)}
    assert {k: pp[k] for k in rec["pp_tok_s"]} == rec["pp_tok_s"]
    assert float(re.search(r"tg64 \|\s+([\d.]+) ±", run2).group(1)) == rec["tg64_tok_s"]
    bb = text.split("## llama-batched-bench")[1]
    row1 = [r for r in bb.splitlines() if re.match(r"\|\s+64 \|\s+32 \|\s+1 \|", r)][0]
    assert float(row1.split("|")[8]) == rec["batched_bench_tg_tok_s"]
    assert batch_cost(rec, 1) == 1.0
    assert abs(batch_cost(rec, 5) - 5 * pp[1] / pp[5]) < 1e-12


def test_llama_bench_json_is_parsed():
    # what llama-bench -o json printed for the real pair's target (tests/data/README.md)
    text = (DATA / "llamacpp_bench_qwen2.5-coder-1.5b.json").read_text()
    got = parse_llama_bench_json(text)
    rows = json.loads(text)
    assert got["pp"] == {r["n_prompt"]: r["avg_ts"] for r in rows if r["n_gen"] == 0}
    assert got["tg"] == [r["avg_ts"] for r in rows if r["n_prompt"] == 0][0]
    assert set(got["pp"]) == {1, 2, 3, 5, 9, 17}
    assert 5 < got["tg"] < 200


def _fake_llama_bench(tmp_path):
    # an executable that prints the recorded llama-bench JSON whatever it is asked
    exe = tmp_path / "llama-bench"
    exe.write_text("#!/bin/sh\ncat " + str(DATA / "llamacpp_bench_qwen2.5-coder-1.5b.json") + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_llama_bench_is_found_or_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECNB_LLAMA_BENCH", raising=False)
    assert find_llama_bench(None) is None
    exe = _fake_llama_bench(tmp_path)
    assert find_llama_bench(exe) == exe
    monkeypatch.setenv("SPECNB_LLAMA_BENCH", exe)
    assert find_llama_bench(None) == exe
    with pytest.raises(ParamError, match="not an executable"):
        find_llama_bench(str(tmp_path / "missing"))


def test_bench_on_a_tiny_model_prints_both_modes(tiny_path, monkeypatch):
    from specnb.measure.bench import bench, macs_per_row
    from specnb.model import load_model
    monkeypatch.delenv("SPECNB_LLAMA_BENCH", raising=False)
    monkeypatch.setenv("SPECNB_INT8_PEAK", "0.5")
    r = bench(tiny_path("Q4_1"), reps=2, n_gen=4, quick=True, memory=False, bandwidth_gib=0.02)
    assert set(r["modes"]) == {"f32", "q8"}
    for mode in r["modes"].values():
        assert mode["decode_tok_s"] > 0 and mode["batch_cost"][1] == 1.0
        assert set(mode["batch_cost"]) == {1, 2, 3, 5, 9}
        assert 0 < mode["bandwidth_frac"]
    d = r["default_activations"]
    assert r["decode_tok_s"] == r["modes"][d]["decode_tok_s"] and r["batch_cost"] == r["modes"][d]["batch_cost"]
    assert r["bandwidth"]["gb_s"] > 0 and r["decode_bytes"] > 0
    # another model than the default, no llama-bench: no llama.cpp figures at all (never the
    # default model's next to another one)
    assert r["llama_cpp"] is None
    text = format_bench(r)
    assert "decode tok/s" in text and "k =  9" in text and "llama.cpp: not measured" in text
    # (the llama.cpp column of every table row stays empty: a figure search would also match a
    # measured prompt speed such as 5884.1)
    rows = [ln for ln in text.splitlines()
            if ln[:25].strip() and ln.count("|") == len(r["modes"]) + 1]
    assert len(rows) >= 5 and all(ln.rsplit("|", 1)[1].strip() == "" for ln in rows), rows
    # the prefetch distance the q8 context ran with, and what it was measured from
    from specnb.kernels.tuning import describe, prefetch_ahead
    assert r["prefetch"]["ahead"] == prefetch_ahead() and describe(r["prefetch"]) in text
    # the int8 compute limit (here SPECNB_INT8_PEAK's), the model's multiply-adds per row, and each
    # extra row against its cost at the limit: q8 only, the f32 mode has no int8 limit
    assert r["int8_peak"]["gmacs_s"] == 0.5 and r["int8_peak"]["source"] == "SPECNB_INT8_PEAK"
    assert f"int8 compute limit: 0.5 G multiply-adds/s on {r['n_threads']} thread" in text
    assert r["macs_per_row"] == macs_per_row(load_model(tiny_path("Q4_1"))) > 0
    q8, f32 = r["modes"]["q8"], r["modes"]["f32"]
    assert q8["ideal_extra_row_cost"] == pytest.approx(r["macs_per_row"] / 0.5e9 / (q8["batch_ms"][1] / 1e3))
    assert f32["ideal_extra_row_cost"] is None and f32["extra_row_x_limit"] is None
    for m in (q8, f32):
        assert m["extra_row_cost"] == pytest.approx({k: (m["batch_cost"][k] - 1) / (k - 1) for k in (2, 3, 5, 9)})
    assert f"{q8['ideal_extra_row_cost']:.3f} of a one-row step" in text
    assert f"{q8['extra_row_x_limit'][5]:6.1f}x" in text
    back = json.loads(json.dumps(r))                        # the --json output
    assert back["modes"]["q8"]["extra_row_x_limit"]["9"] == pytest.approx(q8["extra_row_x_limit"][9])
    assert back["macs_per_row"] == r["macs_per_row"] and back["int8_peak"]["gmacs_s"] == 0.5


def test_bench_measures_the_int8_limit_beside_its_runs(tiny_path, monkeypatch, tmp_path):
    """Without SPECNB_INT8_PEAK the limit is probed before, between and after the repetitions, as
    the bandwidth is; the rows are set beside the median, which the process's int8_peak() (the
    roofline's) then returns too; the recorded verdict stays as it was."""
    from specnb.kernels import tuning
    from specnb.measure.bench import bench
    from specnb.measure.bench_report import format_bench
    monkeypatch.delenv("SPECNB_LLAMA_BENCH", raising=False)
    monkeypatch.delenv("SPECNB_INT8_PEAK", raising=False)
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning.PEAK, "memo", {})
    figures = iter([80.0, 200.0, 150.0, 120.0])          # the recorded verdict's, then three probes

    def fake(n_threads=None, **kw):
        return {"gmacs_s": next(figures), "rounds_gmacs_s": [1.0], "threads": n_threads,
                "simd_level": tuning.SIMD_LEVEL, "instruction": "x", "accumulators": 4, "iterations": 10,
                "cpu_share": 1.0}
    monkeypatch.setattr(tuning, "measure_int8_peak", fake)
    r = bench(tiny_path("Q4_1"), reps=2, n_gen=2, quick=True, memory=False, bandwidth_gib=0.02,
              activations=("q8",))
    pk = r["int8_peak"]
    assert pk["probes_gmacs_s"] == [200.0, 150.0, 120.0] and pk["gmacs_s"] == 150.0
    assert pk["recorded_gmacs_s"] == 80.0 and tuning.cached_int8_peak(r["n_threads"])["gmacs_s"] == 80.0
    assert tuning.int8_peak(r["n_threads"]) == 150.0
    q8 = r["modes"]["q8"]
    assert q8["ideal_extra_row_cost"] == pytest.approx(r["macs_per_row"] / 150e9 / (q8["batch_ms"][1] / 1e3))
    assert ("int8 compute limit: 150.0 G multiply-adds/s" in format_bench(r)
            and "the median of 3 probes beside the runs: 200.0, 150.0, 120.0; recorded for this machine: 80.0"
            in format_bench(r))


def test_bench_of_another_model_needs_no_default_model(tiny_path, monkeypatch):
    # a machine with only its own model (a GPU box, a user's file) benches it: whether it is the
    # default target is a question, not a demand that the default be installed
    from specnb.measure.bench import bench
    from specnb.model import registry
    default = registry.default_target_path()
    assert registry.is_default_target(default) and not registry.is_default_target(tiny_path("Q4_1"))
    monkeypatch.delenv("SPECNB_LLAMA_BENCH", raising=False)
    monkeypatch.setattr(registry, "_part_file", lambda part: None)       # not installed
    with pytest.raises(registry.ModelNotFoundError, match="not installed"):
        registry.default_target_path()
    assert not registry.is_default_target(default)
    r = bench(tiny_path("Q4_1"), reps=2, n_gen=2, quick=True, memory=False, bandwidth_gib=0.02,
              activations=("f32",), check=True)
    assert r["modes"]["f32"]["decode_tok_s"] > 0 and r["llama_cpp"] is None
    assert r["check"]["top1_agree"] == 1.0


def test_the_cuda_matmul_table_shows_gpu_and_host_time():
    from specnb.measure.bench_report import format_cuda_matmul
    rows = [{"type": "Q4_0", "n_out": 4096, "n_in": 4096, "us": 4.0, "gbs": 2359.3,
             "frac_peak": 2359.3 / 4800, "host_us": 251.5},
            {"type": "Q8_0", "n_out": 4096, "n_in": 14336, "us": None, "gbs": None,
             "frac_peak": None, "host_us": 247.9}]       # the calls could not be queued
    text = "\n".join(format_cuda_matmul({"bandwidth_cuda": rows, "peak_gbs": 4800.0,
                                          "cuda_launch_us": 61.25}))
    assert "Q4_0 |  4096 x  4096 |     4.0 |   2359 |   49.2% |         251.5" in text
    assert "Q8_0 |  4096 x 14336 |       - |      - |       - |         247.9" in text
    assert "empty kernel's launch from Python: 61.2 us" in text
    rows[0]["host_us_prepared"] = 9.5
    launches = {"per_pass": 283, "per_layer": 10, "outside_layers": 3, "n_layer": 28,
                "launch": "prepared", "graph": True, "graph_error": None}
    text = "\n".join(format_cuda_matmul({"bandwidth_cuda": rows, "peak_gbs": 4800.0,
                                          "cuda_launches": launches}))
    assert "251.5 (prepared: 9.5)" in text
    assert ("launches per decoded token: 283 = 10 per layer x 28 + 3 (prepared launches, one "
            "captured graph)") in text


def test_bench_runs_llama_bench_on_the_measured_model(tiny_path, tmp_path):
    from specnb.measure.bench import bench
    from specnb.measure.bench_report import format_bench
    exe = _fake_llama_bench(tmp_path)
    r = bench(tiny_path("Q4_0"), reps=2, n_gen=2, quick=True, memory=False, bandwidth_gib=0.02,
              llama_bench=exe, activations=("q8",))
    want = parse_llama_bench_json((DATA / "llamacpp_bench_qwen2.5-coder-1.5b.json").read_text())
    lc = r["llama_cpp"]
    assert lc["measured"] and lc["tg_tok_s"] == want["tg"] and lc["pp_tok_s"] == want["pp"]
    assert lc["batch_cost"][5] == pytest.approx(5 * want["pp"][1] / want["pp"][5])
    assert tiny_path("Q4_0") in lc["cmd"] and "-t" in lc["cmd"]
    assert f"{want['tg']:.1f}" in format_bench(r)


def test_bench_gives_llama_bench_the_files_of_model_names(tmp_path):
    from specnb.measure.bench import bench
    from specnb.model.registry import default_draft_path, default_target_path
    r = bench("smollm2-135m", reps=2, n_gen=2, quick=True, memory=False, bandwidth_gib=0.02,
              llama_bench=_fake_llama_bench(tmp_path), activations=("q8",),
              draft_path="smollm2-135m-q4_0")
    assert r["path"] == default_target_path() and r["llama_cpp"]["cmd"].split()[2] == r["path"]
    assert r["draft"]["llama_cpp"]["cmd"].split()[2] == default_draft_path()


def test_cliffs():
    assert cliffs({k: 1 + 0.2 * (k - 1) for k in range(1, 18)}) == []
    bc = {k: 1 + 0.2 * (k - 1) for k in range(1, 18)}
    bc = {k: v + (1.0 if k >= 4 else 0) for k, v in bc.items()}          # a jump from 3 to 4 rows
    assert cliffs(bc) == [3]
    assert cliffs({1: 1.0, 5: 3.0}) == []                                # not consecutive sizes


def _mode(tok_s, frac, bc):
    return {"decode_tok_s": tok_s, "bandwidth_frac": frac, "batch_cost": bc}


def test_goals_of_a_real_pair():
    lc = {"tg_tok_s": 30.0, "measured": True, "bandwidth_frac": 0.7}
    sweep = {k: 1 + 0.15 * (k - 1) for k in range(1, 18)}
    slow = {k: 1 + 0.6 * (k - 1) for k in range(1, 18)}
    r = {"default_activations": "f32", "llama_cpp": lc,
         "modes": {"f32": _mode(12.0, 0.3, slow), "q8": _mode(33.0, 0.85, sweep)},
         "draft": {"default_activations": "f32", "llama_cpp": dict(lc, tg_tok_s=60.0),
                   "modes": {"f32": _mode(30.0, 0.3, slow), "q8": _mode(55.0, 0.75, sweep)}},
         "pair": {"modes": {"f32": {"spec_tok_s": 20.0, "best": "8+keep", "identical": True},
                            "q8": {"spec_tok_s": 45.0, "best": "8+keep", "identical": True}}}}
    g = {name: met for name, _, met in goals(r)}
    assert g["decode of the target >= llama.cpp's"] == {"f32": False, "q8": True}
    assert g["decode of the target reads >= 70% of the streaming bandwidth"] == {"f32": False, "q8": True}
    assert g["decode of the draft >= llama.cpp's"] == {"f32": False, "q8": False}     # 55 < 60
    assert g["3 rows <= 1.2x one row"] == {"f32": False, "q8": False}                 # 1.30
    assert g["9 rows <= 2.5x one row"] == {"f32": False, "q8": True}                  # 2.2
    assert g[STEP_GOAL] == {"f32": True, "q8": True}
    key = "speculative decoding of the pair on code prompts >= 1.3x llama.cpp's plain decoding of the target"
    assert g[key] == {"f32": False, "q8": True}                                       # 45 >= 39
    assert g["speculative output identical to plain decoding"] == {"f32": True, "q8": True}
    text = format_goals(r)
    assert "[f32 MISSED, q8 met] decode of the target >= llama.cpp's" in text


def test_goals_of_the_default_model():
    r = {"default_activations": "f32", "llama_cpp": {"tg_tok_s": 84.06, "measured": False},
         "modes": {"f32": _mode(70.0, None, {1: 1.0, 2: 1.1, 3: 1.2, 5: 1.25, 9: 1.9}),
                   "q8": _mode(90.0, None, {1: 1.0, 2: 1.5, 3: 2.0, 5: 3.0, 9: 5.0})},
         "memory": {"peak_rss_mib": 1100.0, "n_ctx": 2048, "load_target_s": 0.5},
         "speculative": {"prompts": [
             {"llama.cpp": {"overhead_frac": 0.02, "draft_evals_per_round": 7.0},
              "no-reeval": {"overhead_frac": 0.12, "draft_evals_per_round": 4.0}}],
             "sweeps": {"real pair": {"max_rel_error_engine": 0.1, "max_rel_error": 0.3}}}}
    met = {g.split(" (")[0].split(",")[0]: m for g, _, m in goals(r)}
    assert met["decode of the model >= llama.cpp's"] == {"f32": False, "q8": True}    # vs 84.06
    assert met["5 rows <= 2.0x one row"] == {"f32": True, "q8": False}
    assert met["1 + d rows <= 1.3x one row for d <= 4"] == {"f32": True, "q8": False}
    assert met["1 + d rows <= 2.0x one row for d <= 16"] is None      # 17 rows not measured
    assert met["loop overhead < 10% of a round"] is False              # 12% on one mode
    assert met["draft work per round <= 1 + d"] is True
    assert met["measured speedup within 15% of the cost model"] is True
    assert met["peak RSS of the default pair < 1 GiB"] is False
    assert met["first-call compile time"] is None
    assert "MISSED" in format_goals(r) and "(recorded, not this run)" in format_goals(r)


def test_streaming_bandwidth_runs_side_by_side():
    from specnb.measure.bench import streaming_bandwidth
    b = streaming_bandwidth(gib=0.02, n_threads=2, reps=2)
    assert b["threads"] == 2 and len(b["rounds_gb_s"]) == 2 and len(b["xor_rounds_gb_s"]) == 2
    assert b["gb_s"] == max(b["numpy_gb_s"], b["xor_gb_s"]) > 0


def test_stream_probe_reads_every_word():
    # the xor probe must touch every word of every part, or its GB/s would be a fiction
    from specnb.kernels.stream import self_check, stream_xor
    assert self_check()
    a = np.zeros(1001, np.uint64)
    for i in (0, 500, 1000):
        a[:] = 0
        a[i] = 1 << 40
        assert all(int(stream_xor(a, k)) == 1 << 40 for k in (1, 2, 7))


def test_cli_bench_takes_a_draft_and_llama_bench(tmp_path):
    from specnb.app.cli import build_parser
    a = build_parser().parse_args(["bench", "-m", "t.gguf", "-md", "d.gguf", "--llama-bench", "x", "--spec"])
    assert (a.model, a.model_draft, a.llama_bench, a.spec) == ("t.gguf", "d.gguf", "x", True)
@pytest.mark.slow
def test_pair_memory_probe_in_a_fresh_process():
    from specnb.measure.bench import pair_memory
    m = pair_memory(n_ctx=256, n_predict=8)
    assert 50 < m["peak_rss_mib"] < 4096
    assert m["load_target_s"] > 0 and m["n_ctx"] == 256
    assert m["kv_cache_mib"] == pytest.approx(2 * 2 * 30 * 256 * 192 * 4 / 2**20)




def test_cold_start_goal_reads_the_default_mode_first():
    # bench --compile-time: the first mode timed is the default one, the learner's cold start
    c = {"cold": {"total_s": 140.0, "load_s": 2.0, "first_decode_q8_s": 70.0, "first_decode_f32_s": 60.0},
         "warm": {"total_s": 9.0, "load_s": 2.0, "first_decode_q8_s": 2.0, "first_decode_f32_s": 2.0},
         "cache_mib": 30.0, "model": "m.gguf", "modes": ["q8", "f32"]}
    r = {"default_activations": "q8", "modes": {"q8": _mode(90.0, None, {1: 1.0, 5: 1.5})}, "compile": c}
    met = {g: m for g, _, m in goals(r)}
    key = "cold start: first logits of m.gguf (q8) within 90 s of an empty kernel cache"
    assert met[key] is True                                    # 2 + 70 s
    c["cold"]["first_decode_q8_s"] = 95.0
    assert {g: m for g, _, m in goals(r)}[key] is False


def test_cold_start_counts_the_prefetch_measurement():
    # a first run on a new machine measures the prefetch distance before its first decode: the
    # cold start counts it, and says so
    c = {"cold": {"total_s": 90.0, "load_s": 2.0, "prefetch_s": 8.0, "first_decode_q8_s": 70.0},
         "warm": {"total_s": 9.0, "load_s": 2.0, "prefetch_s": 0.0, "first_decode_q8_s": 2.0},
         "cache_mib": 30.0, "model": "m.gguf", "modes": ["q8"]}
    r = {"default_activations": "q8", "modes": {"q8": _mode(90.0, None, {1: 1.0, 5: 1.5})}, "compile": c}
    [(_, text, met)] = [(g, t, m) for g, t, m in goals(r) if g.startswith("cold start")]
    assert met is True and "80 s" in text and "prefetch distance 8.0 s" in text
    c["cold"]["prefetch_s"] = 20.0                               # 2 + 20 + 70 > 90
    assert [m for g, _, m in goals(r) if g.startswith("cold start")] == [False]


def test_the_prefetch_verdict_reads_as_one_line():
    # (test_bench_on_a_tiny_model_prints_both_modes checks that bench prints it)
    from specnb.kernels.tuning import describe
    v = {"ahead": 2048, "ms": {"-1": 100.0, "2048": 40.0}, "gb_s": {"-1": 10.3, "2048": 26.8},
         "ahead_x16": -1, "ms_x16": {"-1": 50.0, "2048": 51.0}, "gb_s_x16": {"-1": 21.5, "2048": 21.1},
         "mib": 1024.0, "threads": 2}
    line = describe(v)
    assert "\n" not in line and "prefetch the weights 2048 B ahead, interleaved ones not at all" in line
    assert "GB/s: off 10.3, 2048 B 26.8; interleaved: off 21.5, 2048 B 21.1" in line
    other = describe(v | {"ahead": -1, "ahead_x16": 1024})
    assert "do not prefetch the weights, interleaved ones 1024 B ahead" in other


# ---- a row beyond the first, against the int8 compute limit -----------------------------------

STEP_GOAL = "no step from 1 to 17 rows exceeds 2x the median step (a step: cost(k + 1) - cost(k))"


def test_extra_row_costs_arithmetic():
    # a 1.6 G multiply-add row at 100 G/s is 16 ms; against an 80 ms one-row step: 0.2 of a step
    bc = {1: 1.0, 2: 1.3, 5: 1.8, 9: 2.6}
    e = extra_row_costs(bc, 0.080, 1.6e9, 100.0)
    assert e["ideal_extra_row_cost"] == pytest.approx(0.2)
    assert e["extra_row_cost"] == pytest.approx({2: 0.3, 5: 0.2, 9: 0.2})
    assert e["extra_row_x_limit"] == pytest.approx({2: 1.5, 5: 1.0, 9: 1.0})
    e2 = extra_row_costs({1: 1.0, 3: 1.1}, 0.010, 2e8, 50.0)                  # 4 ms of 10 ms
    assert e2["ideal_extra_row_cost"] == pytest.approx(0.4) and e2["extra_row_cost"] == pytest.approx({3: 0.05})
    assert e2["extra_row_x_limit"] == pytest.approx({3: 0.125})
    none = extra_row_costs(bc, 0.080, 1.6e9, None)                             # no limit (f32)
    assert none["ideal_extra_row_cost"] is None and none["extra_row_x_limit"] is None
    assert none["extra_row_cost"] == e["extra_row_cost"]
    from specnb.measure.bench import ideal_row_cost
    assert ideal_row_cost(1.6e9, 100.0, 0.080) == pytest.approx(0.2)
    assert ideal_row_cost(1.6e9, None, 0.080) is None and ideal_row_cost(1.6e9, 100.0, 0.0) is None


def test_macs_per_row_counts_every_product_once(tiny_path):
    # the head's multiply-adds are counted, the embedding lookup's are not (tied or not)
    from specnb.measure.bench import macs_per_row
    from specnb.model import load_model
    for tied in (True, False):
        m = load_model(tiny_path("Q8_0", tied=tied))
        h = m.hparams
        layer = (h.n_embd * (h.n_head + 2 * h.n_head_kv) * h.head_dim + h.n_head * h.head_dim * h.n_embd
                 + 3 * h.n_embd * h.n_ff)
        assert macs_per_row(m) == h.n_layer * layer + h.n_vocab * h.n_embd
        assert macs_per_row(m) == m.n_params() - (0 if tied else m.tok_embd.n_in * m.tok_embd.n_out)


def _curve(per_row, k_max=17, jump_at=None, jump=0.0):
    # cost(k) = 1 + per_row (k - 1), with `jump` more one-row steps from jump_at + 1 rows on
    return {k: 1 + per_row * (k - 1) + (jump if jump_at and k > jump_at else 0.0) for k in range(1, k_max + 1)}


def _pair(bc, level, ideal=None):
    mode = {"decode_tok_s": 30.0, "bandwidth_frac": 0.8, "batch_cost": bc, "ideal_extra_row_cost": ideal}
    return {"default_activations": "q8", "simd_level": level, "llama_cpp": None, "modes": {"q8": mode},
            "draft": {"default_activations": "q8", "llama_cpp": None, "modes": {"q8": dict(mode)}}}


def _goal(r, start):
    [(goal, measured, met)] = [g for g in goals(r) if g[0].startswith(start)]
    return goal, measured, met


EXTRA = "a row beyond the first costs"


@pytest.mark.parametrize("per_row, level, want, lim", [
    (0.20, "avx2", True, "0.25"), (0.25, "avx2", True, "0.25"), (0.26, "avx2", False, "0.25"),
    (0.14, "avx512", True, "0.15"), (0.20, "avx512", False, "0.15"), (0.20, "generic", True, "0.25")])
def test_the_extra_row_goal_reads_the_cpus_level(per_row, level, want, lim):
    goal, measured, met = _goal(_pair(_curve(per_row, 9), level, ideal=0.1), EXTRA)
    assert met == {"q8": want}
    assert goal.startswith(f"{EXTRA} <= {lim} of a one-row step at k = 5 and 9") and f"this CPU: {level}" in goal
    assert "AVX-512 VNNI CPUs: <= 0.15, AVX2-only, AVX-VNNI included: <= 0.25" in goal
    assert f"q8 {per_row:.3f} at k = 5, {per_row:.3f} at k = 9" in measured
    assert f"{per_row / 0.1:.1f}x, {per_row / 0.1:.1f}x the int8 limit's 0.100" in measured


def test_the_extra_row_goal_needs_both_k():
    bc = _curve(0.2, 9)
    bc[9] = 1 + 8 * 0.3                                    # fine at 5 rows, not at 9
    assert _goal(_pair(bc, "avx2"), EXTRA)[2] == {"q8": False}
    del bc[9]
    assert _goal(_pair(bc, "avx2"), EXTRA)[1:] == ("not measured", None)
    text = format_goals(_pair(_curve(0.3, 9), "avx2"))
    assert f"[q8 MISSED] {EXTRA} <= 0.25" in text
    assert f"[q8 met] {EXTRA} <= 0.25" in format_goals(_pair(_curve(0.1, 9), "avx2"))


@pytest.mark.parametrize("jump, want", [(0.0, True), (0.18, True), (0.22, False), (1.0, False)])
def test_the_step_goal_is_twice_the_median_step(jump, want):
    # steps of 0.2; one step of 0.2 + jump from 12 to 13 rows (over 2x the median: jump > 0.2)
    bc = _curve(0.2, 17, jump_at=12, jump=jump)
    assert steps(bc)[12] == pytest.approx(0.2 + jump) and steps(bc)[3] == pytest.approx(0.2)
    goal, measured, met = _goal(_pair(bc, "avx2"), "no step from 1 to 17 rows")
    assert goal == STEP_GOAL and met == {"q8": want}
    assert ("over 2x at k = none" if want else "over 2x at k = [12]") in measured
    if jump:
        assert f"largest {0.2 + jump:.3f} at k = 12 -> 13, median 0.200" in measured
    assert ("[q8 met] " if want else "[q8 MISSED] ") + STEP_GOAL in format_goals(_pair(bc, "avx2"))


def test_the_step_goal_needs_the_sweep():
    r = _pair(_curve(0.2, 9), "avx2")
    del r["modes"]["q8"]["batch_cost"][4]                  # the quick sizes 1, 2, 3, 5, 9
    assert _goal(r, "no step")[2] is None
    # the default model: only with every size measured
    single = {k: v for k, v in _pair(_curve(0.2, 9), "avx2").items() if k != "draft"}
    assert not [g for g in goals(single) if g[0].startswith("no step")]
    single["modes"]["q8"]["batch_cost"] = _curve(0.2, 17, jump_at=5, jump=1.0)
    assert _goal(single, "no step")[2] == {"q8": False}
    assert _goal(single, EXTRA)[2] == {"q8": False}        # (1 + 0.2 * 8 + 1 - 1) / 8 at 9 rows


def test_the_extra_row_table_is_printed():
    bc = {1: 1.0, 2: 1.3, 3: 1.5, 5: 1.8, 9: 2.6}
    mode = {"decode_tok_s": 12.0, "decode_ms_per_tok": 83.3, "weight_gb_s": 11.8, "bandwidth_frac": 0.6,
            "prompt_tok_s": 40.0, "batch_ms": {k: 80.0 * c for k, c in bc.items()}, "batch_cost": bc,
            **extra_row_costs(bc, 0.080, 1.6e9, 100.0)}
    r = {"model": "m", "backend": "cpu", "n_threads": 2, "load_s": 1.0, "n_prompt": 128, "weight_mib": 940.0,
         "decode_bytes": 9.8e8, "macs_per_row": 1_600_000_000, "llama_cpp": None, "default_activations": "q8",
         "modes": {"q8": mode, "f32": dict(mode, **extra_row_costs(bc, 0.080, 1.6e9, None))},
         "int8_peak": {"gmacs_s": 100.0, "threads": 2, "simd_level": "avx2", "source": "SPECNB_INT8_PEAK"}}
    text = format_bench(r)
    assert "int8 compute limit: 100.0 G multiply-adds/s on 2 threads (SIMD level avx2; from SPECNB_INT8_PEAK)" in text
    assert "multiply-adds per row: 1.600 G" in text
    assert "a row beyond the first costs 0.200 of a one-row step (q8: 16.00 ms of 80.00 ms)" in text
    assert re.search(r"k =  2 +\|   0\.300    1\.5x \|   0\.300 +$", text, re.M)
    assert re.search(r"k =  9 +\|   0\.200    1\.0x \|   0\.200 +$", text, re.M)


def test_goals_of_a_pair_include_its_waterfall_s():
    """bench --spec -md: the waterfall's goals (app/demo.waterfall_goals) join bench's list, in
    place of the line that asks for --spec."""
    sweep = {k: 1 + 0.15 * (k - 1) for k in range(1, 18)}
    r = {"default_activations": "q8", "modes": {"q8": _mode(33.0, 0.85, sweep)},
         "draft": {"default_activations": "q8", "modes": {"q8": _mode(55.0, 0.75, sweep)}},
         "waterfall": {"goals": [
        ("the headline on code >= 1.6x specnb's plain decoding", "1.09x, line 3", False),
        ("output identical everywhere", "every prompt", True)]}}
    from specnb.measure import bench_report
    base = bench_report.goals({k: v for k, v in r.items() if k != "waterfall"})
    assert any(m == "run bench --spec" for _, m, _ in base)
    g = bench_report.goals(r)
    assert ("the headline on code >= 1.6x specnb's plain decoding", "1.09x, line 3", False) in g
    assert not any(m == "run bench --spec" for _, m, _ in g)
    assert "[MISSED] the headline on code" in bench_report.format_goals(r)


def test_a_restricted_draft_head_reads_its_share_of_the_head(pair_paths, tiny_path):
    # against the GGUF file's own tensor table: every matrix but the token embedding (a lookup),
    # the output head's rows cut to N of n_vocab; a tied head (the embedding is the head) the same
    import gguf
    from specnb.model import load_model
    from specnb.measure.bench import decode_bytes, draft_decode_bytes
    for path in (pair_paths[1], tiny_path("Q8_0", seed=0, tied=True)):
        t = {x.name: int(x.n_bytes) for x in gguf.GGUFReader(str(path)).tensors if len(x.shape) == 2}
        head = t.get("output.weight", t["token_embd.weight"])
        whole = sum(t.values()) - (t["token_embd.weight"] if "output.weight" in t else 0)
        m = load_model(path)
        V = m.output.n_out
        assert draft_decode_bytes(m) == draft_decode_bytes(m, V) == draft_decode_bytes(m, 10 * V) == whole
        assert decode_bytes(m) == whole
        for n in (1, V // 4, V - 1):
            assert draft_decode_bytes(m, n) == whole - head * (V - n) // V
    # the cost ratio the bytes predict (figures.cost_map.c_from_bytes), the draft's head cut the same way
    from specnb.figures.cost_map import c_from_bytes
    tgt, dft = load_model(pair_paths[0]), load_model(pair_paths[1])
    V = dft.output.n_out
    assert c_from_bytes(dft, tgt) == c_from_bytes(dft, tgt, V) == decode_bytes(dft) / decode_bytes(tgt)
    cut = c_from_bytes(dft, tgt, V // 4)
    assert cut == draft_decode_bytes(dft, V // 4) / decode_bytes(tgt) < c_from_bytes(dft, tgt)
