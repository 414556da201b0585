"""measure/waterfall.py and app/waterfall_report.py: the waterfall's lines, the recommended line
(fastest lossless line that holds on prose), the ceiling, the table, the JSON and bench's goals."""
import statistics

import pytest

from specnb.app import waterfall_report as rep
from specnb.app.flags import spec_flags
from specnb.measure import waterfall as wf
from specnb.measure.turns import Comparison, Run
from specnb.model import registry

TINY_PROMPTS = [("repeats", "the cat sat on the mat, the cat sat on", False),
                ("story", "once upon a time", False)]


@pytest.fixture(scope="module")
def tiny(pair_paths):
    from specnb.run.pair import open_pair
    return open_pair(*pair_paths, n_ctx=256)


def greedy():
    from specnb.run.sampling import SamplerParams
    return SamplerParams(temp=0.0, seed=1)


def test_the_lines_give_the_documented_flags():
    st = wf.stages()
    assert [spec_flags(s.params) for s in st] == [
        [],
        ["--no-reeval"],
        ["--no-reeval", "--spec-draft-vocab", "32768"],
        ["--no-reeval", "--spec-draft-vocab", "32768"],                 # (-md changes)
        ["--spec-draft-n-max", "auto", "--no-reeval", "--spec-draft-vocab", "32768"],
        ["--spec-draft-n-max", "auto", "--spec-type", "ngram-simple,draft-simple", "--no-reeval",
         "--spec-draft-vocab", "32768"]]
    assert [s.index for s in st] == [1, 2, 3, 4, 5, 6] and [s.beyond for s in st] == [False] + [True] * 5
    assert [s.draft for s in st] == [None, None, None] + [wf.DRAFT_Q4_0] * 3
    p = st[0].params                        # llama.cpp's own line is master's defaults
    assert (p.types, p.n_max, p.p_min, p.reeval, p.draft_vocab) == (None, 3, 0.0, True, 0)
    assert st[-1].params.schedule == "auto" and st[-1].params.n_max == 16
    rows = [wf.Row(s, "D.gguf") for s in st]
    assert [rep.stage_step(r) for r in rows] == [[], ["--no-reeval"], ["--spec-draft-vocab", "32768"],
                                                ["-md", "D.gguf"], ["--spec-draft-n-max", "auto"],
                                                ["--spec-type", "ngram-simple,draft-simple"]]
    assert rep.stage_name(rows[2]) == ("3. + a restricted draft vocabulary: --spec-draft-vocab 32768 "
                                      "[specnb, beyond llama.cpp]")
    assert rep.stage_name(wf.Row(None, None)) == f"0. {wf.PLAIN}"


def _runs(ts, n=10, same=True):
    return [Run(tuple(range(n)) if same else tuple([7] * n), "", t) for t in ts]


def _row(i, ratios, prose=None, identical=True):
    """A made-up line: code comparisons whose paired ratios are `ratios` (plain 1 s each pass)."""
    st = wf.stages()[i - 1]
    code = (Comparison.of("code", "greedy", _runs([1.0] * len(ratios)), _runs([1 / r for r in ratios],
                                                                               same=identical)),)
    pr = None if prose is None else Comparison.of("poem", "sampled", _runs([1.0] * len(prose)),
                                                   _runs([1 / r for r in prose]))
    return wf.Row(st, "d.gguf", code, pr, 10.0)


def _waterfall(rows, prose=True):
    return wf.Waterfall(tuple([wf.Row(None, None, plain_tok_s=10.0)] + rows), 64, ("code",), ("greedy",), 2,
                        "poem" if prose else None)


def test_the_recommended_line_is_the_fastest_lossless_one_that_holds_on_prose():
    rows = [_row(1, [1.1, 1.2], [0.7, 0.8]), _row(4, [1.6, 1.7], [0.6, 0.8]), _row(5, [1.5, 1.55], [0.98, 1.02]),
            _row(6, [1.9, 2.0], [1.0, 1.1], identical=False)]
    w = _waterfall(rows)
    assert w.headline.index == 5 and w.fastest_on_code.index == 4    # 6 differs from plain; 4 loses on prose
    text = "\n".join(rep.headline_lines(w, "t.gguf"))
    assert "recommended: line 5" in text and "line 4 is faster on code" in text and "below 0.97" in text
    assert "python -m specnb speculative-simple -m t.gguf -md d.gguf -p PROMPT --spec-draft-n-max auto" in text
    # none holds on prose: plain decoding is recommended, and the command is generate's
    w = _waterfall([_row(4, [1.6, 1.7], [0.6, 0.8])])
    assert w.headline.index == 0 and "python -m specnb generate -m t.gguf -p PROMPT" in "\n".join(
        rep.headline_lines(w, "t.gguf"))
    # without a prose prompt every lossless line holds
    assert _waterfall([_row(4, [1.6, 1.7]), _row(5, [1.5, 1.55])], prose=False).headline.index == 4
    j = rep.headline_json(_waterfall(rows), "t.gguf")
    assert j["stage"] == 5 and j["flags"] == spec_flags(wf.stages()[4].params) and j["draft"] == "d.gguf"
    assert j["speedup"] == {"median": 1.525, "min": 1.5, "max": 1.55, "n": 2, "method": "min-max"}
    assert j["verdict"] == "wins" and j["command"].endswith("-p PROMPT " + " ".join(j["flags"]))


def test_goals_are_met_or_missed_from_the_numbers():
    good = _waterfall([_row(5, [1.7, 1.8], [0.98, 1.0])])
    assert [m for _, _, m in rep.waterfall_goals(good, "avx512")] == [True, True, True]
    slow = _waterfall([_row(5, [1.3, 1.4], [0.99, 1.0])])
    assert [m for _, _, m in rep.waterfall_goals(slow, "avx512")] == [False, True, True]
    # AVX2 alone: the share of the ceiling, which this made-up waterfall has none of
    g = rep.waterfall_goals(slow, "avx2")
    assert "ceiling" in g[0][0] and g[0][2] is None
    bad = _waterfall([_row(5, [1.7, 1.8], [0.98, 1.0], identical=False)])
    assert rep.waterfall_goals(bad, "avx512")[0][2] is False and rep.waterfall_goals(bad, "avx512")[-1][2] is False


def test_the_waterfall_on_the_tiny_pair_is_lossless(tiny):
    said = []
    prose = ("prose", "a b c d e f g", False, "greedy", greedy())
    w = wf.waterfall(tiny, TINY_PROMPTS, [("greedy", greedy())], 12, 2, prose=prose, say=said.append)
    assert w.identical and len(said) == 3                      # two code prompts and the prose one
    assert [r.index for r in w.rows] == list(range(len(wf.WATERFALL) + 1))
    for r in w.rows[1:]:
        assert r.speedup.n == 2 * 2 and len(r.code) == 2 and r.prose is not None and r.identical
        assert sorted(r.speedup.values) == sorted(x for c in r.code for x in c.ratios)
    q4 = w.rows[4].draft_name
    assert [r.draft_name for r in w.rows] == [None] + [tiny.draft.path] * 3 + [q4] * 3
    assert q4 == registry.requantized_draft(tiny.draft)
    table = "\n".join(rep.format_waterfall(w))
    assert table.count("[specnb, beyond llama.cpp]") == 5 and f"-md {q4} [specnb" in table
    assert "| 1. llama.cpp's draft-simple at master's defaults\n" in table
    j = rep.waterfall_json(w, "t.gguf")
    assert [s["stage"] for s in j["stages"]] == list(range(7)) and j["headline"]["stage"] == w.headline.index
    assert j["stages"][2]["flags"] == ["--no-reeval"] and j["stages"][4]["step"] == ["-md", q4]
    # c_loop's parts: each key's median over the comparisons' own medians over their passes
    for r, js in zip(w.rows[1:], j["stages"][1:]):
        per = [c.as_json()["c_parts"] for c in r.code]
        per = [p for p in per if p]
        want = {k: statistics.median(p[k] for p in per) for k in ("steps", "rows", "other", "step_ms")} if per else None
        assert r.c_parts() == js["c_parts"] == want
    assert any(r.c_parts() for r in w.rows[1:])                 # the draft model's lines have parts
    h = w.headline
    if h.index and h.c_parts():
        assert any(ln.startswith(f"  its draft cost in the loop c_loop = {h.loop('c_loop'):.2f}")
                   for ln in rep.headline_lines(w, "t.gguf"))


def test_the_ceiling_prices_draft_tokens_by_their_bytes_and_rows_by_the_int8_limit(tiny):
    from specnb.measure.bench import ideal_row_cost, macs_per_row
    from specnb.figures.cost_map import c_from_bytes
    w = wf.waterfall(tiny, TINY_PROMPTS[:1], [("greedy", greedy())], 12, 1, lines=wf.WATERFALL[:3])
    row = w.rows[3]
    cl = wf.ceiling(row, tiny)
    evs = [ev for c in row.code for s in c.spec for ev in s.events]
    tokens = sum(len(e.slot.committed) for e in evs) / len(evs)
    drafted = sum(len(e.slot.draft) for e in evs) / len(evs)
    c_b = c_from_bytes(tiny.draft, tiny.target, wf.DEFAULT_DRAFT_VOCAB)
    r = ideal_row_cost(macs_per_row(tiny.target), cl.gmacs_s, cl.t_step_ms / 1e3)
    assert (cl.tokens_per_round, cl.drafted_per_round, cl.c_bytes) == pytest.approx((tokens, drafted, c_b))
    assert cl.row == pytest.approx(r) and cl.speedup == pytest.approx(tokens / (1 + drafted * (c_b + r)))
    assert cl.reached == pytest.approx(row.speedup.estimate / cl.speedup)
    line = rep.ceiling_lines(cl)[0]
    assert line.startswith(f"  this CPU's ceiling for line 3: {cl.speedup:.2f}x")
    assert rep.ceiling_lines(None) == [] and wf.ceiling(w.rows[0], tiny) is None
    assert (cl.c_loop, cl.verify_row) == (row.loop("c_loop"), row.loop("verify_row"))
    # a line above its ceiling is told which of the ceiling's prices its own loop undercut
    above = wf.Ceiling(3, 1.2, 2.0, 1.5, 0.2, 0.1, 100.0, 30.0, 1.05, c_loop=0.25, verify_row=0.02)
    assert above.undercut() == [("verification row", 0.02, 0.1)]
    text = rep.ceiling_lines(above)[0]
    assert ("105% of it (above it: its verification rows cost 0.02 of a plain step in the loop against the "
            "ceiling's 0.10, a batch running faster per row") in text and text.endswith(")")
    assert "draft tokens cost" not in text
    both = wf.Ceiling(3, 1.2, 2.0, 1.5, 0.2, 0.1, 100.0, 30.0, 1.05, c_loop=0.15, verify_row=0.02)
    assert [w for w, _, _ in both.undercut()] == ["draft token", "verification row"]
    neither = wf.Ceiling(3, 1.2, 2.0, 1.5, 0.2, 0.1, 100.0, 30.0, 1.05, c_loop=0.3, verify_row=0.2)
    assert neither.undercut() == [] and "paid every price in full" in rep.above_ceiling(neither)
    assert "above it" not in rep.ceiling_lines(wf.Ceiling(3, 1.2, 2.0, 1.5, 0.2, 0.1, 100.0, 30.0, 0.9))[0]
