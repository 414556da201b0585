"""measure/turns.py: the one harness: runs taken in turn, paired ratios, the loop's own costs."""
import statistics

import pytest

from specnb.measure import turns
from specnb.measure.turns import Comparison, LoopCosts, Run, c_parts, take_turns
from specnb.measure.verdict import check_said, interval
from specnb.speculation.events import RoundEvent, SlotRound


@pytest.fixture(scope="module")
def tiny(pair_paths):
    from specnb.run.pair import open_pair
    return open_pair(*pair_paths, n_ctx=256)


def test_take_turns_rotates_the_order_each_pass():
    order = []
    fns = {n: (lambda n=n: order.append(n) or n) for n in "abc"}
    got = take_turns(fns, 4)
    assert got == {n: [n] * 4 for n in "abc"}
    assert order == list("abc" + "bca" + "cab" + "abc")
    with pytest.raises(Exception, match="passes"):
        take_turns(fns, 0)


def _run(t, n=10, tokens=None, events=()):
    return Run(tuple(tokens or range(n)), "", t, None, tuple(events))


def test_a_comparison_is_the_median_of_its_paired_ratios():
    plain = [_run(1.0), _run(1.2), _run(0.9)]
    spec = [_run(0.5), _run(1.0), _run(0.6)]
    c = Comparison.of("p", "greedy", plain, spec)
    assert c.ratios == pytest.approx([2.0, 1.2, 1.5])
    assert c.speedup == interval(c.ratios) and c.speedup.estimate == pytest.approx(1.5)
    assert c.identical and c.said().startswith("wins (1.50x; 1.20-2.00x over 3 pairs)")
    assert check_said(c.said()) == []
    assert not Comparison.of("p", "g", plain, [_run(0.5, tokens=[9] * 10)] * 3).identical


def _event(draft, n_acc, impl="draft-simple", t_verify=0.02, t_draft=0.01, t_process=0.0, t_round=0.04):
    s = SlotRound(0, 0, 0, list(draft), impl=impl, n_accepted=n_acc, committed=list(range(n_acc + 1)))
    return RoundEvent(0, [s], t_draft=t_draft, t_verify=t_verify, t_process=t_process, t_round=t_round)


def test_alpha_and_the_loop_costs_come_from_the_rounds():
    evs = [_event([1, 2, 3], 3), _event([1, 2, 3], 1), _event([], 0, impl="")]
    spec = Run(tuple(range(6)), "", 0.12, None, tuple(evs), n_drafted=6, n_accept=4)
    plain = _run(0.3, n=6)                                  # 50 ms a token
    c = Comparison.of("p", "g", [plain], [spec])
    assert c.examined == (4, 5) and c.alpha == pytest.approx(0.8) and c.accept_rate == pytest.approx(4 / 6)
    x = LoopCosts.of(plain, spec)
    assert x.c_loop == pytest.approx((0.01 * 3) / 6 / 0.05)          # draft time per drafted token / plain step
    # the two drafting rounds: their verification beyond one plain step, per extra row
    assert x.verify_row == pytest.approx((0.04 - 2 * 0.05) / 6 / 0.05)
    assert x.tokens_per_round == pytest.approx(2.0) and x.rows_per_round == pytest.approx((4 + 4 + 1) / 3)


def test_c_in_parts_add_up():
    log = [(1, 0.01), (1, 0.012), (2, 0.015), (1, 0.011)]
    p = c_parts(0.5, log, 6, 0.02)
    step = statistics.median([0.01, 0.012, 0.011])
    assert p["steps"] == pytest.approx(4 * step / 6 / 0.02) and p["step_ms"] == pytest.approx(1e3 * step)
    assert p["steps"] + p["rows"] + p["other"] == pytest.approx(0.5) and p["decodes"] == {1: 3, 2: 1}
    assert c_parts(0.3, [(2, 0.01)], 3, 0.02) is None and c_parts(None, log, 3, 0.02) is None


def test_compare_on_the_tiny_pair_is_lossless_and_logs_the_drafts_decodes(tiny):
    from specnb.run.sampling import SamplerParams
    from specnb.speculation.params import SpecParams
    ids = turns.chat_ids(tiny.target.vocab, "the cat sat on the mat, the cat sat on", False)
    c = turns.compare(tiny, ids, SamplerParams(temp=0.0, seed=1), 16, SpecParams(n_max=3), 2, "cat", "greedy")
    assert c.identical and len(c.plain) == len(c.spec) == 2 and c.speedup.n == 2
    s = c.spec[0]
    assert s.decode_log and sum(n for n, _ in s.decode_log) == sum(ev.n_dft_eval for ev in s.events)
    assert tiny.ctx_dft.decode_log is None                         # the context's own setting restored
    assert 0 < s.t_decode_s < s.t_gen_s * 1.5
    j = c.as_json()
    assert j["speedup"]["median"] == c.speedup.estimate and j["identical"] and j["alpha"] == c.alpha
    # n-gram types run without the draft model
    c = turns.compare(tiny, ids, SamplerParams(temp=0.0, seed=1), 12, SpecParams(types="ngram-simple"), 1)
    assert c.identical and not c.spec[0].decode_log


def test_chat_ids_wraps_as_one_user_message(default_model):
    v = default_model.vocab
    assert turns.chat_ids(v, "hi", False) == v.tokenize("hi")
    assert turns.chat_ids(v, "hi", True) == v.tokenize(v.apply_chat_template([{"role": "user", "content": "hi"}]))


def test_compare_all_shares_its_plain_runs_between_the_configurations(tiny):
    from specnb.run.sampling import SamplerParams
    from specnb.speculation.params import SpecParams
    ids = turns.chat_ids(tiny.target.vocab, "the cat sat on the mat, the cat sat on", False)
    got = turns.compare_all(tiny, ids, SamplerParams(temp=0.0, seed=1), 12,
                            {"dm 2": 2, "lookup": SpecParams(types="ngram-simple")}, 2)
    assert list(got) == ["dm 2", "lookup"] and got["dm 2"].plain == got["lookup"].plain
    assert all(c.identical and c.speedup.n == 2 for c in got.values())
    with pytest.raises(Exception, match="configs"):
        turns.compare_all(tiny, ids, SamplerParams(temp=0.0, seed=1), 12, {"plain": 2}, 1)
