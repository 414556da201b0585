"""`specnb demo` and `specnb demo --sweep`, run on the small SmolLM2 pair in place of the real
one (the real pair's figures are measured by hand: README, "Where speculation wins and loses")."""
import json
import re

import pytest

from specnb.app import demo as demo_mod
from specnb.model import registry
from specnb.app.cli import main

SMOL = (registry.DEFAULT_TARGET, registry.DEFAULT_DRAFT)
SHORT = [("write a function", "Write a Python function that adds two numbers.", True),
         ("complete code", "def add(a, b):\n", False)]


@pytest.mark.slow
def test_demo_shows_the_three_parts(capsys):
    rc = demo_mod.demo(n_predict=8, draft_max=3, real_pair=SMOL, code_prompts=SHORT, repeats=1,
                       quiet=None)
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("specnb demo: speculative decoding")
    assert "About 4 minutes" in out.split("\n==")[0]                  # says how long, up front
    assert "== 1. smollm2-135m-q4_0 (92 MB) drafting for smollm2-135m (98 MB) ==" in out
    results = [ln for ln in lines if ln.startswith("  ") and "identical to plain decoding:" in ln]
    # parts 1, 2 (fixed, then auto) and 3 (fixed, then auto)
    assert len(results) == 2 * len(SHORT) + 2 + 2
    assert out.count("with --spec-draft-n-max auto") == 2 and "chosen per round" in out
    assert all("identical to plain decoding: yes" in ln for ln in results)
    assert all("speedup" in ln and "acceptance" in ln and "mean accepted length" in ln
               for ln in results)
    why = next(ln for ln in lines if ln.strip().startswith("why:"))
    rows = re.search(r"to verify ([\d.]+) rows", why)
    assert "c = " in why and rows and 1 < float(rows.group(1)) <= 4      # 1 + draft-max 3 at most
    assert "median speedup on code" in out
    assert out.rstrip().endswith("all speculative outputs identical to plain decoding: yes")
    assert "SmolLM2" not in out.split("== 3.")[0].split("\n", 5)[-1]    # registry names, not general.name


@pytest.mark.slow
def test_demo_json_and_the_why_arithmetic(capsys):
    rc = demo_mod.demo(n_predict=8, real_pair=SMOL, code_prompts=SHORT[:1], json_out=True,
                       repeats=1, quiet=None)
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["identical"] and d["draft_max"] == demo_mod.DEMO_DRAFT_MAX
    assert [r["part"] for r in d["runs"]] == [1, 1, 2, 2, 3, 3]
    assert [r.get("draft_max") for r in d["runs"]] == [None, None, None, "auto", None, "auto"]
    for r in d["runs"]:
        assert r["identical"] and r["n_tokens"] >= 1
        assert r["speedup"] == pytest.approx(r["spec_tok_s"] / r["plain_tok_s"])
        assert r["t_verify_ms"] + r["t_draft_ms"] <= r["t_round_ms"] * 1.0001
    lose = d["runs"][2]
    assert lose["c"] > 0
    # the why line's ratio is the measured one: tokens per round over a round's cost
    line = demo_mod.why_line(lose, lose["c"], demo_mod.DEMO_DRAFT_MAX)
    ratio = float(line.rsplit("= ", 1)[1].rstrip("x"))
    want = lose["tokens_per_round"] * lose["t_plain_token_ms"] / lose["t_round_ms"]
    assert ratio == pytest.approx(want, abs=0.01)


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
