"""`specnb demo`, `demo --sweep` and `demo --policies`, run on the tiny and the SmolLM2 pairs in
place of the real one (whose figures are measured by hand: docs/benchmarks.md)."""
import json
import re

import pytest

from specnb.app import demo as demo_mod
from specnb.app.flags import spec_flags
from specnb.measure.waterfall import stages
from specnb.model import registry
from specnb.app.cli import main

SMOL = (registry.DEFAULT_TARGET, registry.DEFAULT_DRAFT)
SHORT = [("write a function", "Write a Python function that adds two numbers.", True),
         ("complete code", "def add(a, b):\n", False)]


TINY_PROMPTS = [("repeats", "the cat sat on the mat, the cat sat on", False),
                ("story", "once upon a time", False)]
TINY_LOW = ("prose", "a b c d e f g", False)


def _same(p, q) -> bool:
    from dataclasses import asdict
    from specnb.speculation.params import parse_spec_types
    a, b = asdict(p), asdict(q)
    a["types"], b["types"] = parse_spec_types(a["types"]), parse_spec_types(b["types"])
    return a == b


@pytest.mark.parametrize("fields", [{k: v for k, v in s.fields.items() if k != "draft"}
                                    for s in stages()] + [
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


def test_demo_json_has_the_first_result_the_costs_the_waterfall_and_the_headline(capsys, pair_paths):
    rc = demo_mod.demo(n_predict=8, real_pair=pair_paths, teaching_pair=pair_paths,
                       code_prompts=TINY_PROMPTS, low_prompt=TINY_LOW, json_out=True, passes=1)
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["identical"]
    f = d["first"]
    assert f["stage"] == demo_mod.RECOMMENDED and f["identical"] and len(f["ratios"]) == demo_mod.FIRST_PASSES
    assert f["command"].endswith("-p PROMPT " + " ".join(spec_flags(stages()[demo_mod.RECOMMENDED - 1].params)))
    assert 0 < f["elapsed_s"] <= d["elapsed_s"]
    # the costs records of the pair and of the first result's pair, every cost with its spread
    assert len(d["costs"]) == 2 and d["costs"][1]["draft_vocab"] == 32768
    for c in d["costs"]:
        assert set(c["c"]) >= {"median", "min", "max"} and set(c["bc_target"]) == {str(k) for k in range(1, 18)}
    w = d["waterfall"]
    assert [s["stage"] for s in w["stages"]] == list(range(len(demo_mod.WATERFALL) + 1))
    assert w["prompts"] == [p[0] for p in TINY_PROMPTS[:2]] and w["prose"] == TINY_LOW[0]
    h = d["headline"]
    ok = [s for s in w["stages"] if s["identical"] and s["holds_on_prose"]]
    assert h["stage"] == max(ok, key=lambda s: s["speedup"]["median"])["stage"]
    assert h["flags"] == w["stages"][h["stage"]]["flags"] and set(h["speedup"]) >= {"median", "min", "max"}
    assert (" speculative-simple -m " in h["command"]) == (h["stage"] > 0)
    assert [t["config"].split(" ")[0] for t in d["teaching"]] == ["llama.cpp's", "auto"]


def test_demo_tells_the_story_in_four_parts(capsys, pair_paths):
    from specnb.measure.verdict import check_said
    rc = demo_mod.demo(n_predict=8, real_pair=pair_paths, teaching_pair=pair_paths,
                       code_prompts=TINY_PROMPTS, low_prompt=TINY_LOW, passes=1)
    out = capsys.readouterr().out
    assert rc == 0
    assert out.splitlines()[0].startswith("specnb demo: speculative decoding")
    heads = [ln for ln in out.splitlines() if ln.startswith("== ")]
    assert [h[:5] for h in heads] == ["== 1.", "== 2.", "== 3.", "== 4."]
    first = out[out.index("== 1."):out.index("== 2.")]
    assert re.search(r"(wins|loses|within the noise) \(\d", first) and "identical to plain decoding: yes" in first
    assert "costs record " in out and "c = " in out.split("== 2.")[1]
    table = out[out.index("  on code (interval, pairs)"):]
    assert "| 0. plain decoding (the target alone)" in table
    for i, (label, _, beyond) in enumerate(demo_mod.WATERFALL):
        line = next(ln for ln in table.splitlines() if f"| {i + 1}. {label}" in ln)
        assert line.endswith("[specnb, beyond llama.cpp]") == beyond and re.search(r"\|\s+yes \|", line)
    assert "recommended: " in out
    assert re.search(r"python -m specnb (speculative-simple -m \S+ -md \S+|generate -m \S+) -p PROMPT", out)
    assert check_said(out) == []                        # every verdict printed is its interval's
    assert "why: a round commits" in out
    assert re.search(r"all speculative outputs identical to plain decoding: yes \(\d+ s in all\)", out)


def test_commands_name_registry_models():
    from specnb.app.waterfall_report import command
    from specnb.model.registry import REGISTRY, registry_name
    e = REGISTRY[registry.REAL_TARGET]
    assert registry_name(f"/somewhere/{e.file_name}") == registry.REAL_TARGET
    assert registry_name("/x/other.gguf") == "/x/other.gguf"
    assert command("t", "d", ["--no-reeval", "--spec-draft-n-max", "auto"]) == \
        "python -m specnb speculative-simple -m t -md d -p PROMPT --no-reeval --spec-draft-n-max auto"


def test_demo_without_the_real_pair_says_how_to_install_it(capsys, monkeypatch):
    real = registry.check_parts

    def missing(e):
        rep = real(e)
        if e.name.startswith("qwen"):
            rep.missing = list(e.parts)
        return rep
    monkeypatch.setattr(registry, "check_parts", missing)
    rc = demo_mod.demo(n_predict=4, passes=1)
    out = capsys.readouterr().out
    assert rc == 0
    assert ("the real pair is not installed: run  specnb models install qwen2.5-coder-1.5b "
            "qwen2.5-coder-0.5b") in out
    assert "== 1." not in out and "== 4. the teaching pair" in out


def test_sweep_reports_each_draft_max(capsys):
    rc = demo_mod.sweep((1, 2), n_predict=6, pair_names=SMOL, code_prompts=SHORT[1:], passes=2)
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("draft-max 1:") == 2 and out.count("draft-max 2:") == 2   # greedy, sampled
    assert "median speed-up per draft-max: 1: " in out and "over 4 pairs)" in out and "-> best " in out


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
