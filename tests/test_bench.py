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
from specnb.measure.bench_report import cliffs, format_goals, goals

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
    from specnb.measure.bench import bench
    from specnb.measure.bench_report import format_bench
    monkeypatch.delenv("SPECNB_LLAMA_BENCH", raising=False)
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
    assert "84.1" not in text
    # the prefetch distance the q8 context ran with, and what it was measured from
    from specnb.kernels.tuning import describe, prefetch_ahead
    assert r["prefetch"]["ahead"] == prefetch_ahead() and describe(r["prefetch"]) in text
    json.dumps(r)                                           # the --json output


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
    assert g["no cliff from 1 to 17 rows (no step k -> k + 1 over 3x the median step)"] == {"f32": True, "q8": True}
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
         "mib": 1024.0, "threads": 2}
    line = describe(v)
    assert "\n" not in line and "2048 B ahead" in line and "off 10.3, 2048 B 26.8" in line
    assert "do not prefetch" in describe(v | {"ahead": -1})
