"""`auto` started from the machine's costs record (speculation/auto_costs.CostPrior): every length
priced from the first round, the record rescaled by the run's own timings, and, on a simulated
short run, as fast as the best fixed length."""
import random
import statistics

import pytest

from specnb.speculation.auto import PRIOR_ACCEPT, AutoDraftLen
from specnb.speculation.auto_costs import BatchCost, CostPrior
from specnb.speculation.events import RoundEvent, SlotRound

STEP = 0.02
T = {1: 1.0, 2: 1.04, 3: 1.07, 4: 1.25, 5: 1.43}          # a flat-then-rising curve (AVX-512 VNNI-like)


def bc_t(k):
    return STEP * T.get(k, 1.43 + 0.19 * (k - 5))


def bc_d(k, c=0.25):
    return STEP * c * (1 + 0.25 * (k - 1))


def prior(c=0.25, scale=1.0):
    return CostPrior({k: scale * bc_t(k) for k in range(1, 18)}, {k: scale * bc_d(k, c) for k in range(1, 18)}, "test")


def test_a_batch_cost_reads_the_prior_rescaled_by_the_runs_own_timings():
    b = BatchCost(prior={1: 1.0, 2: 1.1, 4: 1.5, 8: 3.0})
    assert b.known and not b.measured and [b(k) for k in (1, 2, 4, 8)] == pytest.approx([1.0, 1.1, 1.5, 3.0])
    for _ in range(3):
        b.add(1, 2.0)                                    # this run is twice as slow as the record
    assert b.measured and b.scale() == pytest.approx(2.0)
    assert b(4) == pytest.approx(3.0) and b(8) == pytest.approx(6.0)
    b.add(4, 9.0)                                        # one slow sample moves nothing: the
    assert b(4) == pytest.approx(3.0) and b(8) == pytest.approx(6.0)   # scale is a median of all
    for _ in range(4):
        b.add(4, 6.0)                                    # a slow spell moves every size alike
    assert b.scale() == pytest.approx(4.0)
    assert [b(k) for k in (1, 2, 4, 8)] == pytest.approx([4.0, 4.4, 6.0, 12.0])
    # a draft's prior, rescaled as the target's until the draft model has decoded
    t = BatchCost(prior={1: 1.0})
    d = BatchCost(prior={1: 0.2, 2: 0.3}, fallback_scale=t.scale)
    t.add(1, 1.5)
    d.invalidate()
    assert d(1) == pytest.approx(0.3) and d(2) == pytest.approx(0.45)


def test_a_cost_prior_refuses_what_cannot_be_a_time():
    for bad in ({}, {2: 1.0}, {1: 0.0}, {1: float("nan")}):
        with pytest.raises(ValueError, match="CostPrior"):
            CostPrior(bad, {1: 1.0})


def test_with_a_prior_the_first_round_drafts_and_every_length_is_reachable():
    pol = AutoDraftLen(16, keeps_rows=True, prior=prior())
    dec = pol.lengths({"draft-simple": True}, 64)["draft-simple"]
    assert dec.reason == "best" and dec.d >= 1 and pol.reach() == 16
    assert pol.accept_mean == PRIOR_ACCEPT and pol.stats()["prior"] == "test"
    # without one: a plain start-up round first, lengths grown one at a time
    plain = AutoDraftLen(16, keeps_rows=True)
    assert plain.lengths({"draft-simple": True}, 64)["draft-simple"].reason == "start-up" and plain.reach() == 1


def test_a_draft_that_cannot_pay_is_judged_at_round_zero():
    # a draft step as dear as the target's and rows at full price: nothing pays even at full acceptance
    steep = CostPrior({k: STEP * k for k in range(1, 18)}, {k: STEP * k for k in range(1, 18)})
    dec = AutoDraftLen(16, keeps_rows=True, prior=steep).lengths({"draft-simple": True}, 64)["draft-simple"]
    assert dec.d == 0 and dec.reason == "no gain"


def simulate(alpha, n=64, fixed=None, seed=0, prior_=None):
    """64 tokens of rounds: i.i.d. acceptance alpha, the costs of bc_t and bc_d, the draft keeping
    its rows (a fully accepted round's last token caught up in the next seed). -> seconds."""
    rnd = random.Random(seed)
    pol = AutoDraftLen(16, keeps_rows=True, prior=prior_)
    pol.observe_prefill(39, bc_t(39), bc_d(39))
    t, done, behind, full_last, rounds = 0.0, 0, 0, False, 0
    while done < n:
        if fixed is None:
            dec = pol.lengths({"draft-simple": True}, n - done, behind)["draft-simple"]
            pol.record(dec)
            d = min(dec.d, n - done - 1) if n - done > 1 else 0
        else:
            dec, d = None, min(fixed, max(n - done - 1, 0))
        t_draft = 0.0
        if d:
            rows = 1 + full_last + (min(behind, dec.catch_up_window) if dec and dec.catch_up_window else behind)
            t_draft = bc_d(rows) + (d - 1) * bc_d(1)
            if fixed is None:
                pol.observe_draft_decode(rows, bc_d(rows))
                for _ in range(d - 1):
                    pol.observe_draft_decode(1, bc_d(1))
            behind = 0
        acc = 0
        while acc < d and rnd.random() < alpha:
            acc += 1
        committed = min(acc + 1, n - done)
        t_tgt = bc_t(1 + d) + 0.0005
        t += t_draft + t_tgt
        behind += 0 if d else committed
        full_last = d > 0 and acc == d
        if fixed is None:
            rec = SlotRound(0, 0, 0, list(range(d)), impl="draft-simple" if d else "", n_accepted=acc,
                            committed=list(range(committed)), draft_len=dec)
            pol.update_candidate_strategy(RoundEvent(rounds, [rec], t_verify=t_tgt, t_round=t_draft + t_tgt))
        done += committed
        rounds += 1
    return t


@pytest.mark.parametrize("alpha", [0.97, 0.93, 0.85])
def test_a_short_run_with_a_prior_is_within_five_percent_of_the_best_fixed_length(alpha):
    seeds = range(24)
    best = min(statistics.mean(simulate(alpha, fixed=d, seed=s) for s in seeds) for d in range(1, 9))
    with_prior = statistics.mean(simulate(alpha, seed=s, prior_=prior()) for s in seeds)
    without = statistics.mean(simulate(alpha, seed=s) for s in seeds)
    assert best / with_prior >= 0.95, (alpha, best / with_prior)
    assert with_prior < without                          # the prior is what closes the gap
    # a record taken on a faster or slower machine is rescaled: the same decisions' quality
    assert best / statistics.mean(simulate(alpha, seed=s, prior_=prior(scale=0.7)) for s in seeds) >= 0.95


def test_on_prose_a_prior_does_not_lose_to_plain_decoding():
    plain = 64 * (bc_t(1) + 0.0005)
    for c in (0.25, 0.45):
        p = CostPrior({k: bc_t(k) for k in range(1, 18)}, {k: bc_d(k, c) for k in range(1, 18)})
        t = statistics.mean(simulate(0.4, seed=s, prior_=p) for s in range(24))
        assert plain / t >= 0.97, (c, plain / t)


def test_the_loop_hands_the_prior_to_auto_and_stays_lossless(pair):
    from specnb.run.generate import generate
    from specnb.run.pair import open_pair
    from specnb.run.sampling import Sampler, SamplerParams
    from specnb.speculation.loop import SpeculativeLoop
    from specnb.speculation.params import SpecParams
    tgt, dft = pair
    p = open_pair(tgt, dft, n_ctx=128)
    ids = tgt.vocab.tokenize("the cat sat on the mat, the cat sat on")
    sp = SamplerParams(temp=0.0, seed=1)
    plain = generate(p.ctx_tgt, Sampler(sp), ids, 24).tokens
    loop = SpeculativeLoop(p.ctx_tgt, p.ctx_dft, ids, 24, sp, SpecParams(n_max="auto", reeval=False),
                           costs_prior=prior())
    events = list(loop.rounds())
    assert loop.results()[0].tokens == plain
    assert events[0].slot.draft_len.reason != "start-up" and loop.policy.stats()["prior"] == "test"
