"""`specnb demo` and `specnb demo --sweep`, run on the small SmolLM2 pair in place of the real
one (the real pair's figures are measured by hand: README, "Where speculation wins and loses")."""
import json
import re
import statistics

import pytest

from specnb.app import demo as demo_mod
from specnb.model import registry
from specnb.app.cli import main

SMOL = (registry.DEFAULT_TARGET, registry.DEFAULT_DRAFT)
SHORT = [("write a function", "Write a Python function that adds two numbers.", True),
         ("complete code", "def add(a, b):\n", False)]


TINY_PROMPTS = [("repeats", "the cat sat on the mat, the cat sat on", False),
                ("story", "once upon a time", False)]
TINY_LOW = ("prose", "a b c d e f g", False)
TIMING = dict(repeats=1, quiet=None)


@pytest.fixture(scope="module")
def tiny_pair(pair_paths):
    from specnb.run.pair import open_pair
    return open_pair(*pair_paths, n_ctx=256)


def test_the_stage_list_gives_the_documented_flags():
    st = demo_mod.waterfall_stages()
    assert [s["flags"] for s in st] == [
        [],
        ["--no-reeval"],
        ["--no-reeval", "--spec-draft-vocab", "32768"],
        ["--no-reeval", "--spec-draft-vocab", "32768"],                 # (-md changes)
        ["--spec-draft-n-max", "auto", "--no-reeval", "--spec-draft-vocab", "32768"],
        ["--spec-draft-n-max", "auto", "--spec-type", "ngram-simple,draft-simple", "--no-reeval",
         "--spec-draft-vocab", "32768"]]
    assert [s["step"] for s in st] == [[], ["--no-reeval"], ["--spec-draft-vocab", "32768"],
                                       ["-md", "<the draft requantized to Q4_0>"],
                                       ["--spec-draft-n-max", "auto"],
                                       ["--spec-type", "ngram-simple,draft-simple"]]
    assert [s["beyond"] for s in st] == [False, True, True, True, True, True]
    assert [s["draft"] for s in st] == [None, None, None] + [demo_mod.DRAFT_Q4_0] * 3
    # llama.cpp's own line is master's defaults: n_max 3, p_min 0, re-evaluation
    p = st[0]["params"]
    assert (p.types, p.n_max, p.p_min, p.reeval, p.draft_vocab) == (None, 3, 0.0, True, 0)
    assert st[-1]["params"].schedule == "auto" and st[-1]["params"].n_max == 16


def _same(p, q) -> bool:
    from dataclasses import asdict
    from specnb.speculation.params import parse_spec_types
    a, b = asdict(p), asdict(q)
    a["types"], b["types"] = parse_spec_types(a["types"]), parse_spec_types(b["types"])
    return a == b


@pytest.mark.parametrize("fields", [{k: v for k, v in s["fields"].items() if k != "draft"}
                                    for s in demo_mod.waterfall_stages()] + [
    dict(n_max=5, p_min=0.75, n_min=2), dict(n_max="heuristic:12", verify="rejection"),
    dict(types="ngram-map-k4v", ngram_map_k4v_size_n=6, ngram_map_k4v_min_hits=3),
    dict(n_max=2, synth_rates=[0.5, 0.25]), dict(types=("none",)), dict(n_max="auto:8")])
def test_spec_flags_round_trip_through_the_cli_parser(fields):
    """SpecParams -> spec_flags -> the speculative-simple parser -> build -> the same SpecParams."""
    from specnb.app.cli import build_parser
    from specnb.app.flags import build, spec_flags
    from specnb.speculation.params import SpecParams

    def parse(argv):
        return build(build_parser().parse_args(["speculative-simple", *argv]), "spec", SpecParams)
    base = parse([])                                  # the command's defaults
    want = base.replace(**fields)
    flags = spec_flags(want)
    assert _same(parse(flags), want), flags
    assert spec_flags(parse(flags)) == flags
    assert spec_flags(base) == [] and spec_flags(SpecParams()) == []


def test_the_headline_is_the_fastest_lossless_line():
    def row(i, speedup, identical=True):
        return {"stage": i, "speedup": speedup, "identical": identical}
    rows = [row(0, 1.0), row(1, 0.9), row(2, 1.4), row(3, 2.5, identical=False), row(4, 1.4), row(5, 1.2)]
    assert demo_mod.pick_headline(rows)["stage"] == 2       # 3 is faster but not lossless; 2 before 4
    rows[3]["identical"] = True
    assert demo_mod.pick_headline(rows)["stage"] == 3
    slow = [row(0, 1.0), row(1, 0.8), row(2, 0.95), row(3, 3.0, identical=False)]
    assert demo_mod.pick_headline(slow)["stage"] == 0        # plain decoding, when nothing beats it
    assert demo_mod.pick_headline([row(1, 2.0, identical=False)]) is None
    st = [dict(r, label="x", step=[], beyond=False, flags=[], tok_s=1.0) for r in slow]
    w = {"stages": st, "headline": demo_mod.pick_headline(st)}
    text = "\n".join(demo_mod.headline_lines(w, "t.gguf", "d.gguf"))
    assert "plain decoding was the fastest here" in text and "loses at 0.95x" in text
    assert "python -m specnb generate -m t.gguf -p PROMPT" in text
    assert demo_mod.recommended(w) is w["stages"][-1]


def test_the_waterfall_probes_the_int8_limit_before_and_after_its_runs(tiny_pair, monkeypatch):
    """The roofline's row price reads the int8 limit of the waterfall's own minutes: one probe
    before the runs, one after (faked: 200 and 120, so 160), the machine's recorded verdict (80)
    beside it, not the figure bench set for its own runs (999); with SPECNB_INT8_PEAK set nothing
    is probed."""
    from specnb.kernels import tuning
    assert tiny_pair.ctx_tgt.backend_name == "cpu" and tiny_pair.ctx_tgt.activations == "q8"
    events, figures = [], iter([200.0, 120.0])

    def fake(n_threads=None, **kw):
        events.append("probe")
        return {"gmacs_s": next(figures), "threads": n_threads, "simd_level": tuning.SIMD_LEVEL,
                "rounds_gmacs_s": [1.0], "cpu_share": 1.0}
    monkeypatch.delenv(tuning.PEAK_ENV, raising=False)
    monkeypatch.setattr(tuning, "measure_int8_peak", fake)
    monkeypatch.setattr(tuning, "cached_int8_peak", lambda n=None: {"gmacs_s": 80.0, "threads": n})
    monkeypatch.setattr(tuning.PEAK, "memo", {})
    tuning.use_int8_peak(tiny_pair.ctx_tgt.n_threads, {"gmacs_s": 999.0, "probes_gmacs_s": [999.0], "threads": 1,
                                                       "source": "measured beside the runs"})
    w = demo_mod.waterfall(tiny_pair, TINY_PROMPTS[:1], demo_mod.samplings()[:1], 8, TIMING, say=events.append)
    assert events[0] == events[-1] == "probe" and events.count("probe") == 2 and len(events) == 3
    pk = w["int8_peak"]
    assert pk["gmacs_s"] == 160.0 and pk["probes_gmacs_s"] == [200.0, 120.0] and pk["recorded_gmacs_s"] == 80.0
    rf = w["roofline"]
    if rf is not None:               # (none where the recommended line examined no draft)
        assert rf["gmacs_s"] == 160.0 and rf["gmacs_probes"] == [200.0, 120.0]
        assert "at 160 G/s, the median of probes before and after the runs: 200, 120)" in demo_mod.roofline_lines(rf)[0]
    monkeypatch.undo()               # (the fakes too: SPECNB_INT8_PEAK's verdict is read for real)
    monkeypatch.setenv(tuning.PEAK_ENV, "50")
    monkeypatch.setattr(tuning, "measure_int8_peak", fake)
    events.clear()
    w = demo_mod.waterfall(tiny_pair, TINY_PROMPTS[:1], demo_mod.samplings()[:1], 8, TIMING)
    assert events == [] and w["int8_peak"] is None
    assert w["roofline"] is None or w["roofline"]["gmacs_s"] == 50.0


def test_the_waterfall_on_the_tiny_pair_is_lossless(tiny_pair):
    said = []
    w = demo_mod.waterfall(tiny_pair, TINY_PROMPTS, demo_mod.samplings(), 16, TIMING, say=said.append)
    assert w["identical"] and len(said) == 4                     # one line per prompt x sampling
    st = w["stages"]
    assert [s["stage"] for s in st] == list(range(len(demo_mod.WATERFALL) + 1))
    assert st[0]["label"] == demo_mod.PLAIN and st[0]["speedup"] == 1.0 and st[0]["c"] is None
    for s in st:
        assert s["identical"] and len(s["runs"]) == 4
        assert s["speedup"] == pytest.approx(statistics.median(r["speedup"] for r in s["runs"]))
    for s in st[1:]:
        assert all(r["identical"] and r["n_tokens"] == 16 for r in s["runs"])
        assert s["flags"] == demo_mod.waterfall_stages()[s["stage"] - 1]["flags"]
        for r in s["runs"]:               # each speed-up against the same prompt's plain run
            plain = next(p for p in st[0]["runs"] if (p["prompt"], p["sampling"]) == (r["prompt"], r["sampling"]))
            assert r["plain_tok_s"] == plain["tok_s"]
            assert r["speedup"] == pytest.approx(r["spec_tok_s"] / plain["tok_s"])
    # the draft's cost and the verification's price, from the loop (llama.cpp's line drafts every round)
    one = st[1]["runs"][0]
    assert one["c"] > 0 and one["rows_per_round"] > 1 and one["verify_row"] is not None
    assert w["headline"] is demo_mod.pick_headline(st)
    table = "\n".join(demo_mod.format_waterfall(w))
    assert table.count("[specnb, beyond llama.cpp]") == 5
    assert "| 1. llama.cpp's draft-simple at master's defaults\n" in table
    assert "| 3. + a restricted draft vocabulary: --spec-draft-vocab 32768 [specnb, beyond llama.cpp]" in table
    # from line 4 on, the draft requantized to Q4_0: forged once into the cache, its Q4_0 interleaved
    q4 = st[4]["draft"]
    assert [s["draft"] for s in st] == [None] + [tiny_pair.draft.path] * 3 + [q4] * 3
    assert q4.endswith(".Q4_0-requant.gguf") and q4 == registry.requantized_draft(tiny_pair.draft)
    assert f"| 4. + the draft requantized to Q4_0: -md {q4} [specnb, beyond llama.cpp]" in table
    assert all("-md" not in ln for ln in table.splitlines() if re.search(r"\| [0-35-9]\. ", ln))
    for s in st[1:5]:                    # the stage's parts of c: each part's median over its runs
        parts = [r["c_parts"] for r in s["runs"] if r["c_parts"]]   # (lines 1-4: fixed lengths, each drafts)
        assert parts and s["c_parts"]["steps"] == pytest.approx(statistics.median(p["steps"] for p in parts))
    for r in st[2]["runs"]:
        assert r["c_parts"]["steps"] + r["c_parts"]["rows"] + r["c_parts"]["other"] == pytest.approx(r["c"])
    said_c = "\n".join(demo_mod.headline_lines(dict(w, headline=st[2]), "t.gguf", "d.gguf"))
    assert f"its draft cost c = {st[2]['c']:.2f} of a target step per drafted token: the draft's one-row steps " \
           f"{st[2]['c_parts']['steps']:.2f}" in said_c
    h = demo_mod.headline_json(dict(w, headline=st[5]), "t.gguf", "d.gguf", None)
    assert h["c_parts"] == st[5]["c_parts"]
    assert h["draft"] == q4 and h["command"].startswith(f"python -m specnb speculative-simple -m t.gguf -md {q4} ")


def test_c_in_parts_from_the_draft_models_decodes_in_the_rounds(tiny_pair):
    """c = the draft's one-row steps + its batches' extra rows + the rest, from the draft context's
    decodes during the rounds only: their rows are the chain's own count of draft rows evaluated
    in the rounds (the prompt's decode is not among them), and the parts add up to c."""
    st = demo_mod.waterfall_stages()
    ids = demo_mod.prompt_ids(tiny_pair.target.vocab, *TINY_PROMPTS[0][1:])
    sp = demo_mod.samplings()[0][1]
    for stage in (st[0], st[1]):         # llama.cpp's line (re-evaluating) and the draft keeping its rows
        r, _, events, _, log = demo_mod._spec_run(tiny_pair, ids, sp, 16, stage["params"])()
        assert log and sum(n for n, _ in log) == sum(ev.n_dft_eval for ev in events)
        assert tiny_pair.ctx_dft.decode_log is None                 # the context's own setting restored
        n_dft = sum(len(ev.slot.draft) for ev in events)
        t_draft = sum(ev.t_draft + ev.t_process for ev in events)
        u = 0.01                                                     # a plain step of 10 ms, say
        p = demo_mod.c_parts(t_draft / n_dft / u, log, n_dft, u)
        one = sorted(dt for n, dt in log if n == 1)
        step = statistics.median(one)
        assert p["step_ms"] == pytest.approx(1e3 * step)
        assert p["steps"] == pytest.approx(len(log) * step / n_dft / u)
        assert p["steps"] + p["rows"] == pytest.approx(sum(dt for _, dt in log) / n_dft / u)
        assert p["steps"] + p["rows"] + p["other"] == pytest.approx(t_draft / n_dft / u)
        assert p["other"] >= 0 and p["decodes"] == {n: sum(1 for m, _ in log if m == n) for n, _ in log}
    assert demo_mod.c_parts(0.3, [(2, 0.01)], 3, 0.02) is None        # no one-row decode to price a step
    assert demo_mod.c_parts(None, [(1, 0.01)], 3, 0.02) is None


def test_demo_json_has_the_waterfall_and_the_headline_flags(capsys, pair_paths):
    rc = demo_mod.demo(n_predict=8, real_pair=pair_paths, teaching_pair=pair_paths,
                       code_prompts=TINY_PROMPTS[:1], low_prompt=TINY_LOW, json_out=True, repeats=1,
                       quiet=None)
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["identical"]
    assert [s["stage"] for s in d["waterfall"]] == list(range(len(demo_mod.WATERFALL) + 1))
    h = d["headline"]
    best = max((s for s in d["waterfall"] if s["identical"]), key=lambda s: s["speedup"])
    assert h["stage"] == best["stage"] and h["flags"] == best["flags"]
    if h["stage"]:
        assert h["command"].endswith("-p PROMPT" + "".join(" " + f for f in h["flags"]))
        assert " speculative-simple -m " in h["command"] and " -md " in h["command"]
    else:
        assert " generate -m " in h["command"]
    # part 2: llama.cpp's defaults, then the recommended line with auto; part 3: defaults, auto
    assert [r["part"] for r in d["runs"]] == [2, 2, 3, 3]
    assert d["runs"][0]["flags"] == [] and "--spec-draft-n-max" in d["runs"][1]["flags"]
    assert d["runs"][3]["flags"] == ["--spec-draft-n-max", "auto"]
    for r in d["runs"]:
        assert r["identical"] and r["n_tokens"] >= 1
        assert r["speedup"] == pytest.approx(r["spec_tok_s"] / r["plain_tok_s"])
        assert r["t_verify_ms"] + r["t_draft_ms"] <= r["t_round_ms"] * 1.0001
    lose = d["runs"][0]
    # the why line's ratio is the measured one: tokens per round over a round's cost
    line = demo_mod.why_line(lose)
    ratio = float(line.rsplit("= ", 1)[1].rstrip("x"))
    want = lose["tokens_per_round"] * lose["t_plain_token_ms"] / lose["t_round_ms"]
    assert ratio == pytest.approx(want, abs=0.01)


def test_demo_shows_the_three_parts(capsys, pair_paths):
    rc = demo_mod.demo(n_predict=8, real_pair=pair_paths, teaching_pair=pair_paths,
                       code_prompts=TINY_PROMPTS, low_prompt=TINY_LOW, repeats=1, quiet=None)
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("specnb demo: speculative decoding")
    assert "19 minutes on a busy" in out.split("\n==")[0]                  # says how long, up front
    assert "== 1. pair-draft-Q4_0.gguf (0 MB) drafting for tiny-llama-Q8_0-0-2-0.gguf (0 MB): the waterfall ==" in out
    assert sum(ln.startswith("  repeats [") or ln.startswith("  story [") for ln in lines) == 4
    table = out[out.index("  speed-up |"):]
    assert "| 0. plain decoding (the target alone)" in table
    for i, (label, _, beyond) in enumerate(demo_mod.WATERFALL):
        line = next(ln for ln in table.splitlines() if f"| {i + 1}. {label}" in ln)
        assert line.endswith("[specnb, beyond llama.cpp]") == beyond and re.search(r"\|\s+yes \|", line)
    assert re.search(r"headline: (line \d|plain decoding was the fastest)", out)
    assert re.search(r"python -m specnb (speculative-simple -m \S+ -md \S+|generate -m \S+) -p PROMPT", out)
    results = [ln for ln in lines if ln.startswith("  ") and "identical to plain decoding:" in ln]
    assert len(results) == 2 + 2                                  # parts 2 and 3, two runs each
    assert all("identical to plain decoding: yes" in ln for ln in results)
    why = next(ln for ln in lines if ln.strip().startswith("why:"))
    rows = re.search(r"to verify ([\d.]+) rows", why)
    assert "c = " in why and rows and 1 < float(rows.group(1)) <= 4      # 1 + n_max 3 at most
    # every verdict word printed comes from the number printed beside it
    verdicts = list(re.finditer(r"(wins|loses|breaks even) (?:at )?\(?([\d.]+)x", out))
    assert len(verdicts) >= 3
    assert all(m.group(1) == demo_mod.verdict(float(m.group(2))) for m in verdicts)
    assert out.rstrip().endswith("all speculative outputs identical to plain decoding: yes")


def test_commands_name_registry_models():
    from specnb.model.registry import REGISTRY
    e = REGISTRY[registry.REAL_TARGET]
    assert demo_mod.cli_name(f"/somewhere/{e.file_name}") == registry.REAL_TARGET
    assert demo_mod.cli_name("/x/other.gguf") == "/x/other.gguf"
    assert demo_mod.command("t", "d", ["--no-reeval", "--spec-draft-n-max", "auto"]) == \
        "python -m specnb speculative-simple -m t -md d -p PROMPT --no-reeval --spec-draft-n-max auto"


def test_demo_without_the_real_pair_says_how_to_install_it(capsys, monkeypatch):
    real = registry.check_parts

    def missing(e):
        rep = real(e)
        if e.name.startswith("qwen"):
            rep.missing = list(e.parts)
        return rep
    monkeypatch.setattr(registry, "check_parts", missing)
    rc = demo_mod.demo(n_predict=4, repeats=1, quiet=None)
    out = capsys.readouterr().out
    assert rc == 0
    assert ("the real pair is not installed: run  specnb models install qwen2.5-coder-1.5b "
            "qwen2.5-coder-0.5b") in out
    assert "== 1." not in out and "== 3. the teaching pair" in out


def test_sweep_reports_each_draft_max(capsys):
    rc = demo_mod.sweep((1, 2), n_predict=6, pair_names=SMOL, code_prompts=SHORT[1:], wait_s=0)
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("draft-max 1:") == 2 and out.count("draft-max 2:") == 2   # greedy, sampled
    assert "median speedup per draft-max: 1: " in out and "-> best " in out


def test_sweep_values_are_checked(capsys):
    assert main(["demo", "--sweep", "2,x"]) == 2
    assert "invalid --sweep='2,x'" in capsys.readouterr().err
    assert main(["demo", "--sweep", "0"]) == 2


def test_other_load_sees_another_process_use_the_cpu():
    import subprocess
    import sys
    import time
    from specnb.measure.contention import OtherLoad
    with OtherLoad() as idle:
        time.sleep(0.3)
    if idle.share is None:
        pytest.skip("no /proc on this system")
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass\n"
    with OtherLoad() as busy:
        p = subprocess.Popen([sys.executable, "-c", spin])
        time.sleep(0.8)                     # this process sleeps; the child burns one core
        p.wait()
    import os
    n_cpu = os.cpu_count() or 1
    assert busy.share >= 0.5 / n_cpu           # at least half a core out of n went elsewhere
    with OtherLoad() as mine:
        t = time.time()
        while time.time() - t < 0.5:           # this process's own work does not count
            pass
    assert mine.share <= busy.share


def test_a_busy_run_is_repeated_and_marked(monkeypatch):
    from specnb.measure import contention
    from specnb.run.pair import open_pair
    shares = iter([0.9, 0.9, 0.0, 0.0] + [0.5] * 20)

    class FakeLoad:
        def __enter__(self):
            return self

        def __exit__(self, *_):
            self.share = next(shares)
    monkeypatch.setattr(contention, "OtherLoad", FakeLoad)
    pair = open_pair(*SMOL, n_ctx=128)
    ids = pair.target.vocab.tokenize("def add(a, b):")
    sp = demo_mod.samplings()[0][1]
    row = demo_mod.compare(pair, ids, sp, 4, 2, quiet=0.1)
    assert row["busy"] == 0.0 and row["identical"]              # the second, quiet try was kept
    row = demo_mod.compare(pair, ids, sp, 4, 2, quiet=0.1, max_tries=2)
    assert row["busy"] == 0.5                                     # never quiet: marked
    assert "busy machine: other processes took 50% of the CPU" in demo_mod._result_line("x", "greedy", row)
