"""spec_bench: the n-gram types beside draft-simple (same outputs), and the code-editing request."""
import pytest

from specnb.run.context import Context
from specnb.run.sampling import SamplerParams
from specnb.measure.spec_bench import (CODE_EDIT_FUNCTION, NGRAM_TYPES, code_edit_prompt, compare_types,
    format_spec_bench)
from spec_checks import repetitive_prompt


def test_compare_types_rows(pair):
    tgt, dft = pair
    rows = compare_types(Context(tgt, n_ctx=128), Context(dft, n_ctx=128),
                         [("repeats", repetitive_prompt(tgt, 1))], 24, SamplerParams(temp=0.0), n_max=3)
    (row,) = rows
    assert row["identical"]
    for name in ("llama.cpp", "no-reeval") + NGRAM_TYPES:
        assert row[name]["n_rounds"] >= 24 / 4
    for t in NGRAM_TYPES:                      # no draft model: no draft evaluations
        assert row[t]["draft_evals_per_round"] == 0
    text = format_spec_bench({"prompts": rows, "c": 0.5, "t_draft_token_ms": 1.0,
                              "t_target_token_ms": 2.0})
    assert "cost ratio c = 0" in text and all(t in text for t in NGRAM_TYPES)


def test_code_edit_prompt_uses_the_chat_template(default_model):
    ids = code_edit_prompt(default_model.vocab)
    text = default_model.vocab.detokenize(ids, special=True)
    assert CODE_EDIT_FUNCTION.splitlines()[0] in text and "<|im_start|>user" in text


def test_ngram_edit_bench_pairs_plain_and_speculative(default_path):
    from specnb.measure.spec_bench import format_ngram_edit_bench, ngram_edit_bench
    r = ngram_edit_bench(default_path, draft_max_values=(1, 2), n_predict=12, repeats=1, size_n=4)
    assert r["identical"] and r["n_generated"] == 12
    assert set(r["draft_max"]) == {1, 2}
    for x in r["draft_max"].values():
        assert len(x["wall"]) == len(x["cpu"]) == 1 and x["speedup"] > 0
    assert "draft-max" in format_ngram_edit_bench(r)


def test_compare_policies_table(pair_paths):
    """One table, prompt x policy (plain, fixed, heuristic, auto): every output equals plain."""
    from specnb.run.sampling import SamplerParams
    from specnb.measure.spec_bench import compare_policies, format_policies
    t, d = pair_paths
    prompts = [("a", "the cat sat on the mat, the cat sat on", False, "greedy", SamplerParams(temp=0.0)),
               ("b", "once upon a time", False, "sampled", SamplerParams(temp=0.8, seed=7))]
    r = compare_policies(t, d, prompts, ("plain", "2", "heuristic:6", "auto:6"), n_predict=16,
                         repeats=2)
    assert r["identical"] and r["repeats"] == 2
    assert [row["prompt"] for row in r["rows"]] == ["a", "b"]
    for row in r["rows"]:
        assert set(row["policies"]) == {"plain", "2", "heuristic:6", "auto:6"}
        assert sum(row["policies"]["auto:6"]["chosen"].values()) >= 1
        for cell in row["policies"].values():          # the median of the runs taking turns
            assert len(cell["runs"]) == 2 and cell["tok_s"] == pytest.approx(sum(cell["runs"]) / 2)
        plain = row["policies"]["plain"]
        assert plain["speedup"] == pytest.approx(1.0) and plain["plain_tok_s"] == plain["tok_s"]
        auto = row["policies"]["auto:6"]                 # the median of the passes' ratios
        assert auto["speedup"] == pytest.approx(sum(a / p for a, p in zip(auto["runs"], plain["runs"])) / 2)
    out = format_policies(r)
    assert "auto:6" in out and "identical to plain decoding: yes" in out


def test_pair_waterfall_reports_the_demo_waterfall_and_the_goals(pair_paths):
    """`bench --spec -md`: the demo's waterfall through the same function, the poem, the goals."""
    from specnb.app import demo
    from specnb.app.demo import format_pair_waterfall, pair_waterfall
    r = pair_waterfall(*pair_paths, n_predict=12, repeats=1, quiet=None,
                       prompts=[("repeats", "the cat sat on the mat, the cat sat on", False)],
                       low_prompt=("prose", "a b c d e f g", False),
                       llama_cpp={"tg_tok_s": 1.0, "measured": True})
    assert r["identical"] and r["poem"]["identical"]
    assert [s["stage"] for s in r["stages"]] == list(range(len(demo.WATERFALL) + 1))
    assert [s["flags"] for s in r["stages"][1:]] == [s["flags"] for s in demo.waterfall_stages()]
    h = r["headline"]
    assert h["stage"] == demo.pick_headline(r["stages"])["stage"]
    assert h["vs_llama_cpp"] == pytest.approx(h["tok_s"] / 1.0)
    assert "--spec-draft-n-max" in r["poem"]["flags"] and "auto" in r["poem"]["flags"]
    runs = r["poem"]["runs"]                     # the goal's figure: the median of the comparisons
    assert len(runs) == demo.POEM_RUNS and runs == sorted(runs) and r["poem"]["speedup"] == runs[len(runs) // 2]
    goals = {g: met for g, _, met in r["goals"]}
    assert goals["output identical everywhere"] is True
    assert set(goals) == {"the headline on code >= 1.6x specnb's plain decoding", "on the poem >= 0.97x",
                          "draft cost c in the loop <= 0.25", "output identical everywhere"}
    text = format_pair_waterfall(r)
    assert "| 0. plain decoding (the target alone)" in text and "goals (the pair's" in text
    assert f"the median of {demo.POEM_RUNS} comparisons, {runs[0]:.2f}-{runs[-1]:.2f}x" in text
    assert text.count("[specnb, beyond llama.cpp]") >= 4 and h["command"] in text
    # the roofline of the recommended line: the draft the line ran, priced by its bytes (its head
    # cut to the line's vocabulary), a row by the int8 limit over plain decoding's time per token
    from specnb.model import load_model
    from specnb.model.registry import requantized_draft
    from specnb.measure.bench import decode_bytes, draft_decode_bytes, macs_per_row
    from specnb.measure.cost import best_speedup_with_rows
    rf, rec = r["roofline"], demo.recommended(r)
    for s in r["stages"][1:]:       # alpha: accepted over examined (cost.alpha_from_counts), >= the share
        acc, exa = (sum(run["examined"][i] for run in s["runs"]) for i in (0, 1))   # of drafted tokens
        assert acc <= sum(run["n_accept"] for run in s["runs"]) and exa <= sum(run["n_drafted"] for run in s["runs"])
        assert s["alpha"] == (acc / exa if exa else None)
        assert s["alpha"] is None or s["alpha"] >= s["accept_rate"] - 1e-12
    if not rec["alpha"]:            # the run's timing picked a line that accepted nothing: no roofline
        assert rf is None and "roofline" not in text
        return
    tgt = load_model(pair_paths[0])
    dft = load_model(requantized_draft(pair_paths[1]) if rec["fields"].get("draft") else pair_paths[1])
    assert rf["stage"] == rec["stage"] > 0 and rf["alpha"] == rec["alpha"] > 0
    assert rf["target_gb"] * 1e9 == decode_bytes(tgt)
    assert rf["draft_gb"] * 1e9 == draft_decode_bytes(dft, demo.stage_params(rec["fields"]).draft_vocab or None)
    assert rf["c"] == pytest.approx(rf["draft_gb"] / rf["target_gb"])
    assert rf["t_step_ms"] == pytest.approx(1e3 / r["stages"][0]["tok_s"])
    assert rf["row"] == pytest.approx(macs_per_row(tgt) / (rf["gmacs_s"] * 1e9) / (rf["t_step_ms"] / 1e3))
    assert (rf["speedup"], rf["draft_max"]) == best_speedup_with_rows(rf["alpha"], rf["c"], rf["row"])
    assert rf["of_roofline"] == pytest.approx(rec["speedup"] / rf["speedup"])
    assert f"this CPU's roofline for line {rf['stage']}: {rf['speedup']:.2f}x" in text
    assert f"this CPU's roofline for line {rf['stage']}" in r["goals"][0][1]


def test_the_roofline_prices_the_lines_draft_by_its_bytes_and_a_row_by_the_int8_limit(pair_paths):
    """demo.roofline on a made-up waterfall whose headline (a draft with a restricted head, 90%
    accepted, 1.3x) is known, whatever the run's timing: every field against the GGUF bytes, the
    int8 limit, plain decoding's step and the formula."""
    from types import SimpleNamespace as NS
    from specnb.app import demo
    from specnb.kernels.tuning import int8_peak
    from specnb.measure.bench import decode_bytes, draft_decode_bytes, macs_per_row
    from specnb.measure.cost import best_speedup_with_rows
    from specnb.model import load_model
    tgt, dft = load_model(pair_paths[0]), load_model(pair_paths[1])
    n = dft.output.n_out // 2
    stages = [{"stage": 0, "tok_s": 20.0, "speedup": 1.0, "fields": None, "accept_rate": None},
              {"stage": 3, "tok_s": 26.0, "speedup": 1.3, "fields": {"reeval": False, "draft_vocab": n},
               "accept_rate": 0.8, "alpha": 0.9}]
    pairs = {None: NS(target=tgt, draft=dft, ctx_tgt=NS(backend_name="cpu", activations="q8", n_threads=1))}
    rf = demo.roofline(pairs, {"stages": stages, "headline": stages[1]})
    c = draft_decode_bytes(dft, n) / decode_bytes(tgt)
    row = macs_per_row(tgt) / (int8_peak(1) * 1e9) / 0.05                  # a 50 ms step (20 tok/s)
    assert c < decode_bytes(dft) / decode_bytes(tgt)                        # the head cut to n rows
    assert rf["stage"] == 3 and rf["alpha"] == 0.9 and rf["gmacs_s"] == int8_peak(1)
    assert rf["c"] == pytest.approx(c) and rf["row"] == pytest.approx(row) and rf["t_step_ms"] == pytest.approx(50)
    assert rf["draft_gb"] * 1e9 == draft_decode_bytes(dft, n) and rf["target_gb"] * 1e9 == decode_bytes(tgt)
    assert (rf["speedup"], rf["draft_max"]) == pytest.approx(best_speedup_with_rows(0.9, c, row))
    assert rf["of_roofline"] == pytest.approx(1.3 / rf["speedup"])
    (line,) = demo.roofline_lines(rf)
    assert line.startswith(f"  this CPU's roofline for line 3: {rf['speedup']:.2f}x at draft-max {rf['draft_max']}")
    assert f"the line reached {100 * 1.3 / rf['speedup']:.0f}% of it" in line
    assert "probes" not in line and rf["gmacs_probes"] is None
    # the limit the waterfall probed beside its runs, where it did: the rows priced by it
    probed = {"gmacs_s": 150.0, "probes_gmacs_s": [140.0, 160.0]}
    rf = demo.roofline(pairs, {"stages": stages, "headline": stages[1], "int8_peak": probed})
    assert rf["gmacs_s"] == 150.0 and rf["row"] == pytest.approx(macs_per_row(tgt) / 150e9 / 0.05)
    (line,) = demo.roofline_lines(rf)
    assert "step at 150 G/s, the median of probes before and after the runs: 140, 160)" in line


def test_the_roofline_needs_int8_activations_on_the_cpu_a_draft_model_and_drafts():
    from types import SimpleNamespace as NS
    from specnb.app import demo
    stages = [{"stage": 0, "tok_s": 20.0, "speedup": 1.0, "fields": None, "accept_rate": None, "alpha": None},
              {"stage": 1, "tok_s": 30.0, "speedup": 1.5, "fields": {}, "accept_rate": 0.9, "alpha": 0.9}]
    w = {"stages": stages, "headline": stages[1]}
    q8 = NS(ctx_tgt=NS(backend_name="cpu", activations="q8", n_threads=1))    # (no models: never read)
    for ctx in (NS(backend_name="cpu", activations="f32", n_threads=1),
                NS(backend_name="cuda", activations="q8", n_threads=1)):
        assert demo.roofline({None: NS(ctx_tgt=ctx)}, w) is None
    assert demo.roofline({None: q8}, dict(w, headline=dict(stages[1], accept_rate=None, alpha=None))) is None
    assert demo.roofline({None: q8}, dict(w, headline=dict(stages[1], fields={"types": ("ngram-simple",)}))) is None
    assert demo.roofline_lines(None) == []


def _made_up(headline_speedup, c, poem_speedup, identical=True):
    stages = [{"stage": 0, "speedup": 1.0, "identical": True, "c": None},
              {"stage": 1, "speedup": 0.9, "identical": True, "c": 0.4},
              {"stage": 2, "speedup": headline_speedup, "identical": identical, "c": c}]
    from specnb.app.demo import pick_headline
    h = pick_headline(stages)
    return {"stages": stages, "identical": identical, "headline": dict(h, label="x", flags=[]),
            "poem": {"speedup": poem_speedup, "stage": 2, "flags": ["--spec-draft-n-max", "auto"],
                     "identical": True}}


def test_waterfall_goals_are_met_or_missed_from_the_numbers():
    from specnb.app.demo import waterfall_goals
    met = [m for _, _, m in waterfall_goals(_made_up(1.7, 0.2, 0.98))]
    assert met == [True, True, True, True]
    met = [m for _, _, m in waterfall_goals(_made_up(1.5, 0.3, 0.9))]
    assert met == [False, False, False, True]
    # a line whose output differs is never the headline, and the identity goal is missed
    g = waterfall_goals(_made_up(3.0, 0.1, 1.0, identical=False))
    assert g[0][2] is False and "1.00x, line 0" in g[0][1]      # plain decoding, 1.0x: not >= 1.6
    assert g[-1][2] is False
