"""spec_bench: the n-gram types beside draft-simple (same outputs), and the code-editing request."""
import pytest

from specnb.run.sampling import SamplerParams
from specnb.measure.spec_bench import (CODE_EDIT_FUNCTION, NGRAM_TYPES, code_edit_prompt, compare_types,
    format_spec_bench)
from spec_checks import repetitive_prompt


def test_compare_types_rows(pair):
    from specnb.run.pair import open_pair
    tgt, dft = pair
    rows = compare_types(open_pair(tgt, dft, n_ctx=128), [("repeats", repetitive_prompt(tgt, 1))], 24,
                         SamplerParams(temp=0.0), n_max=3)
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
        assert plain["speedup"] == pytest.approx(1.0)
        auto = row["policies"]["auto:6"]                 # the median of the passes' ratios, and their range
        ratios = [a / p for a, p in zip(auto["runs"], plain["runs"])]
        assert auto["speedup"] == pytest.approx(sum(ratios) / 2) and auto["plain_tok_s"] == plain["tok_s"]
        assert auto["interval"] == pytest.approx([min(ratios), max(ratios)])
    out = format_policies(r)
    assert "auto:6" in out and "identical to plain decoding: yes" in out


def test_pair_waterfall_reports_the_demo_waterfall_its_costs_record_and_the_goals(pair_paths):
    """`bench --spec -md`: the demo's waterfall through the same function, with the prose prompt and
    the pair's costs record, printed with its goals."""
    from specnb.app.waterfall_report import format_pair_waterfall, waterfall_goals
    from specnb.measure.waterfall import WATERFALL, pair_waterfall
    greedy = SamplerParams(temp=0.0, seed=1)
    w, costs = pair_waterfall(*pair_paths, n_predict=12, passes=1,
                              prompts=[("repeats", "the cat sat on the mat, the cat sat on", False)],
                              samplings=[("greedy", greedy)], prose=("prose", "a b c d e f g", False, "greedy", greedy))
    assert w.identical and all(r.prose is not None for r in w.rows[1:]) and len(w.rows) == len(WATERFALL) + 1
    assert w.costs_id == costs.id and costs.target == str(pair_paths[0])
    goals = {g: met for g, _, met in waterfall_goals(w, "avx512")}
    assert goals["output identical everywhere"] is True and len(goals) == 3
    text = format_pair_waterfall(w, "t.gguf", "d.gguf", "avx512", {"tg_tok_s": 1.0})
    assert "| 0. plain decoding (the target alone)" in text and "goals (the pair's" in text
    assert text.count("[specnb, beyond llama.cpp]") >= 5 and "recommended: " in text
    assert "x llama.cpp's plain decoding" in text or "recommended: plain decoding" in text


def test_compare_policies_runs_every_policy_with_a_waterfall_lines_flags(pair_paths, monkeypatch, tmp_path):
    """demo --policies: every policy with line 4's fields (the draft requantized to Q4_0, its head
    restricted, its rows kept); auto starts from that pair's costs record, measured once first."""
    from specnb.measure import costs
    from specnb.measure.spec_bench import compare_policies, format_policies
    from specnb.measure.waterfall import DRAFT_Q4_0
    from specnb.model.registry import requantized_draft
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "RECORD", None)
    monkeypatch.setattr(costs, "BUSY", 1.0)
    monkeypatch.setattr(costs, "BANDWIDTH_GIB", 0.02)
    line = {"reeval": False, "draft_vocab": 64, "draft": DRAFT_Q4_0}
    prompts = [("a", "the cat sat on the mat, the cat sat on", False, "greedy", SamplerParams(temp=0.0))]
    r = compare_policies(*pair_paths, prompts, ("plain", "2", "auto:6"), n_predict=12, repeats=1, line=line)
    assert r["identical"] and r["draft"] == requantized_draft(pair_paths[1]) and r["line"] == line
    auto = r["rows"][0]["policies"]["auto:6"]
    assert sum(auto["chosen"].values()) >= 1
    assert "every run with {'reeval': False, 'draft_vocab': 64}" in format_policies(r)
