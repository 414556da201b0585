"""The per-round draft length (specnb.speculation.draft_len, auto, auto_costs): the decision
against Leviathan's closed form, d = 0 when drafting cannot pay, probes, transformers' heuristic
schedule, parsing, `auto` lossless against plain decoding on the tiny pair (greedy and sampled,
every memory, the chain), and the one-way seam between `auto` and the draft model."""
import math
import warnings

import pytest

from specnb import ParamError
from specnb.run.context import Context
from specnb.measure.cost import speedup
from specnb.speculation.auto import (
    CATCH_UP_ROUNDS, CATCH_UP_WINDOW, GROW, NO_GAIN_RECHECK, PROBE_FIRST, PROBE_LEN, PROBE_MAX, PROBE_SHARE,
    AutoDraftLen)
from specnb.speculation.auto_costs import Acceptance, BatchCost, cap_few_samples, monotone
from specnb.speculation.draft_len import (
    AUTO_CAP, HEURISTIC_CAP, HEURISTIC_START, Decision, HeuristicDraftLen, best_length, expected_tokens,
    expected_tokens_upto, format_chosen, parse_draft_max)
from specnb.speculation.events import RoundEvent, SlotRound
from specnb.speculation.params import SpecParams
from specnb.speculation.deferred import DeferredDraftSimple
from specnb.speculation.draft_simple import DraftSimple
from specnb.speculation.loop import SpeculativeLoop
from spec_checks import SAMPLERS, check_invariants, plain, prompts, repetitive_prompt

NGRAM = dict(ngram_size_n=1, ngram_size_m=8)


# ---- the decision --------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.7, 0.9, 0.99])
@pytest.mark.parametrize("c", [0.0, 0.05, 0.2, 0.5, 1.0])
def test_choice_is_the_argmax_of_leviathans_speedup(alpha, c):
    n_max = 12
    want = max(range(n_max + 1), key=lambda g: (round(speedup(alpha, g, c), 12), -g))
    assert best_length_leviathan(alpha, c, n_max) == want
    for g in range(n_max + 1):    # E(d) is Leviathan's Eq. 1
        assert expected_tokens(alpha, g) == pytest.approx((1 - alpha ** (g + 1)) / (1 - alpha))



def best_length_leviathan(alpha: float, c: float, n_max: int) -> int:
    """best_length in Leviathan's units (a target call 1, a draft token c, verification free):
    argmax_gamma cost.speedup(alpha, gamma, c)."""
    return best_length(alpha, lambda k: 1.0, lambda d: d * c, n_max)[0]

def test_choice_with_linear_verification_cost():
    """t_target(k) = 1 + b (k - 1), t_draft(d) = c d: the brute-force argmax of E / T."""
    for alpha in (0.3, 0.6, 0.8, 0.95):
        for b in (0.0, 0.1, 0.3, 1.0):
            for c in (0.0, 0.1, 0.4):
                rate = [expected_tokens(alpha, d) / (1 + b * d + c * d) for d in range(17)]
                want = max(range(17), key=lambda d, rate=rate: (round(rate[d], 12), -d))
                got, rates = best_length(alpha, lambda k, b=b: 1 + b * (k - 1),
                                         lambda d, c=c: c * d, 16)
                assert got == want and rates[got] == pytest.approx(rate[want])


def test_expensive_draft_and_low_acceptance_choose_no_draft():
    assert best_length_leviathan(0.35, 1.0, 16) == 0
    assert best_length_leviathan(0.95, 1.0, 16) == 0      # the teaching pair: draft = target
    assert best_length_leviathan(0.9, 0.05, 16) > 3


def test_per_position_rates():
    assert expected_tokens([1.0, 0.5, 0.0], 3) == 2.5
    # position 2 never accepted: a 1-token draft wins over 2 when the second row costs something
    assert best_length([1.0, 0.0, 0.0], lambda k: 1 + 0.1 * (k - 1), lambda d: 0.0, 3)[0] == 1


def test_batch_cost_interpolates_and_extrapolates():
    bc = BatchCost()
    assert math.isnan(bc(1))
    bc.add(1, 1.0)
    assert bc(5) == 1.0
    bc.add(3, 2.0)
    # between two sizes: the roofline max(t0, t1 k / k1) under the straight line; cautious: the line
    assert bc(2) == pytest.approx(4 / 3) and bc.upto(2, cautious=True)[2] == 1.5
    assert bc(5) == 3.0 and bc(1) == 1.0
    for t in (5.0, 2.0, 2.0):             # a running median: one slow spell does not count
        bc.add(3, t)
    assert bc(3) == 2.0


def test_batch_cost_past_a_measured_step_follows_its_slope():
    """Between the rounds' largest size and the prompt's batch far above, the roofline reads the
    next size as cheap as the last; with a smaller size measured too, the step from it continues
    (clipped to the straight line to the prompt's batch). A Zen 3's 1.5B: each row ~10 ms."""
    bc = BatchCost()
    for k, t in ((1, 0.038), (4, 0.062), (5, 0.088), (23, 0.250)):
        bc.add(k, t)
    line = 0.088 + (0.250 - 0.088) * (6 - 5) / (23 - 5)
    assert bc(6) == pytest.approx(min(line, 0.088 + 0.026)) == pytest.approx(line)   # 97 ms, not 88
    assert bc.upto(7)[6] == pytest.approx(bc(6))
    assert bc(5) == 0.088 and bc(23) == 0.250
    # a curve flat, then rising (AVX-512 VNNI): the slope below is the roofline's reading
    flat = BatchCost()
    for k, t in ((1, 0.020), (2, 0.020), (3, 0.021), (50, 0.200)):
        flat.add(k, t)
    assert flat(4) == pytest.approx(0.022) and flat(4) < flat.upto(4, cautious=True)[4]
    # with one size below the gap (the first), the roofline as before
    one = BatchCost()
    for k, t in ((1, 0.038), (23, 0.250)):
        one.add(k, t)
    assert one(6) == pytest.approx(max(0.038, 0.250 * 6 / 23))


def _isotonic_minmax(y, w):
    """Weighted isotonic regression by its min-max formula (Barlow, Bartholomew, Bremner & Brunk,
    1972): the fit at i is max over j <= i of min over k >= i of the weighted mean of y[j..k]."""
    def mean(j, k):
        return sum(y[t] * w[t] for t in range(j, k + 1)) / sum(w[j:k + 1])
    n = len(y)
    return [max(min(mean(j, k) for k in range(i, n)) for j in range(i + 1)) for i in range(n)]


@pytest.mark.parametrize("y,w", [([1.0, 3.0, 2.0, 4.0], [1, 1, 1, 1]),
                                 ([30.0, 26.0, 27.0, 40.0], [1, 15, 15, 3]),
                                 ([5.0, 4.0, 3.0, 2.0, 1.0], [1, 2, 3, 4, 5]),
                                 ([1.0, 2.0, 3.0], [3, 1, 2]),
                                 ([2.0, 1.0, 2.0, 1.0, 3.0, 0.5], [2, 1, 1, 3, 1, 1])])
def test_monotone_is_the_weighted_isotonic_regression(y, w):
    assert monotone(y, w) == pytest.approx(_isotonic_minmax(y, w))
    assert all(a <= b + 1e-12 for a, b in zip(monotone(y, w), monotone(y, w)[1:]))


def test_batch_cost_never_falls_with_k():
    """One stale, slow 1-row sample against fifteen 2-row ones: the 2-row median is the better
    estimate of both (a 2-row step cannot cost less than a 1-row one). Two samples each: the
    medians are pooled, weighted by their counts."""
    bc = BatchCost()
    bc.add(1, 0.030)
    for _ in range(15):
        bc.add(2, 0.026)
    assert bc(1) == bc(2) == 0.026
    bc.add(3, 0.028)
    assert bc(1) <= bc(2) <= bc(3) == 0.028
    few = BatchCost(trusted=1)
    for k, t in ((1, 0.030), (1, 0.030), (2, 0.026), (2, 0.026), (2, 0.026)):
        few.add(k, t)
    assert few(1) == few(2) == pytest.approx((2 * 0.030 + 3 * 0.026) / 5)


def test_a_size_measured_few_times_is_capped_by_its_better_measured_neighbours():
    """Real-pair figures (a Zen 4, "complete code"): a 4-row verification timed once at a busy
    moment, 52.5 ms, between 3 rows (41.2 ms, ten times) and 5 rows (59.3 ms, three times). Read
    as measured, d = 3 loses to d = 2, is never chosen again and so never measured again. Capped
    at the straight line between its neighbours it is chosen, and its own median then counts."""
    ks, n = [1, 3, 4, 5, 9], [1, 10, 1, 3, 2]
    med = [0.0341, 0.0412, 0.0525, 0.0593, 0.0876]
    assert cap_few_samples(ks, med, n) == pytest.approx([0.0341, 0.0412, (0.0412 + 0.0593) / 2, 0.0593, 0.0876])
    # below the smallest trusted size at most its value; only dear readings move; above the
    # largest trusted size nothing is capped; with no trusted size, or all, nothing changes
    assert cap_few_samples([1, 3], [0.05, 0.04], [1, 5]) == [0.04, 0.04]
    assert cap_few_samples([2, 3, 4], [0.01, 0.015, 0.03], [3, 1, 3]) == [0.01, 0.015, 0.03]
    assert cap_few_samples([2, 4], [0.01, 0.5], [3, 1]) == [0.01, 0.5]
    assert cap_few_samples([2, 4], [0.01, 0.5], [1, 1]) == [0.01, 0.5]
    assert cap_few_samples([2, 4], [0.01, 0.5], [3, 3]) == [0.01, 0.5]
    # the trusted sizes' own medians are made non-decreasing before they cap anything
    assert cap_few_samples([1, 2, 3], [0.9, 0.05, 0.03], [3, 1, 3]) == pytest.approx([0.9, 0.05, 0.03])
    assert cap_few_samples([1, 2, 3], [0.04, 0.09, 0.02], [3, 1, 1]) == [0.04, 0.09, 0.02]
    assert cap_few_samples([1, 2, 3], [0.04, 0.09, 0.02], [3, 1, 3]) == pytest.approx([0.04, 0.03, 0.02])
    bc = BatchCost()
    for k, t in zip(ks, med):
        for _ in range(n[ks.index(k)]):
            bc.add(k, t)
    assert bc(4) == pytest.approx((0.0412 + 0.0593) / 2) and bc(1) == 0.0341


def test_auto_tries_again_a_length_one_slow_round_made_look_dear():
    """The policy on the figures above, the 4-row round timed at 60 ms (every draft accepted, the
    draft model 7.6 ms a row, auto:3): with the cap it drafts 3 tokens; with every size trusted
    from its first sample (the reading before the cap) it keeps drafting 2."""
    def policy(trusted):
        pol = AutoDraftLen(3)
        pol.t_target.trusted = trusted
        pol.update_candidate_strategy(_event(0, 0, 0.0341))
        for d, t, times in ((2, 0.0412, 10), (3, 0.060, 1), (4, 0.0593, 3)):
            for _ in range(times):
                pol.update_candidate_strategy(_event(d, d, t, pol=pol, dft=[(1, 0.0076), (2, 0.0082)]))
        return pol.decide()
    assert policy(1).d == 2
    assert policy(3).d == 3


def test_auto_is_not_fooled_by_a_stale_one_row_cost():
    """The low-acceptance poem on the real pair: t_target(1) measured once, at start-up, slower
    than the many 2-row verifications since; read as measured, d = 1 would look faster than
    plain decoding ((1 + a) / (11 + 26) ms > 1 / 30 ms) though it costs a draft token for a
    third of a token. Monotone costs say d = 0."""
    pol = AutoDraftLen(4)
    pol.update_candidate_strategy(_event(0, 0, 0.030))
    for i in range(40):
        pol.update_candidate_strategy(_event(1, int((7 * i) % 20 < 7), 0.026, pol=pol,
                                             dft=[(2, 0.011), (1, 0.010)]))
    a = pol.rates("draft-simple")[0]
    assert 0.3 < a < 0.4
    assert (1 + a) / (0.011 + 0.026) > 1 / 0.030             # the unpooled reading
    assert pol.decide().d == 0


def test_acceptance_counts_only_examined_positions():
    a = Acceptance(decay=1.0, prior=0.0)
    a.observe(4, 1)                       # positions 1, 2 examined (2 rejected), 3, 4 not
    assert a.exa == [1.0, 1.0] and a.acc == [1.0, 0.0]
    a.observe(2, 2)
    assert a.exa == [2.0, 2.0] and a.acc == [2.0, 1.0]
    r = Acceptance().rates(3)             # the prior alone: 1/2 everywhere
    assert r == [0.5, 0.5, 0.5]


def _event(d, n_acc, t_verify, impl="draft-simple", dec=None, dft=(), pol=None):
    """A round's event; `dft`, the draft model's decodes as (rows, seconds), go to `pol` as
    DeferredDraftSimple reports them, during the round."""
    draft = list(range(d))
    rec = SlotRound(0, 10, 1, draft, impl=impl if d else "", n_accepted=n_acc, draft_len=dec,
                    committed=list(range(n_acc + 1)))
    for n, t in dft:
        pol.observe_draft_decode(n, t)
    return RoundEvent(0, [rec], t_verify=t_verify, t_round=t_verify)


def _draft_decodes(loop) -> list:
    """Record the draft model's decodes as (round, rows) while the loop runs."""
    out, real = [], loop.policy.observe_draft_decode
    loop.policy.observe_draft_decode = lambda n, t: (out.append((loop.n_rounds, n)), real(n, t))
    return out


def _run_auto(t_draft_row, rounds=200):
    """AutoDraftLen against a draft that is never accepted: t_draft_row seconds per draft-model
    decode, the target's k-row side 1 + 0.1 (k - 1) seconds."""
    pol = AutoDraftLen(8)
    assert pol.choose().reason == "start-up" and pol.choose().d == 0
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    dec = pol.choose()
    assert dec.reason == "start-up" and dec.d == PROBE_LEN   # measure the draft model once
    pol.update_candidate_strategy(_event(1, 0, 1.1, dec=dec, pol=pol, dft=[(2, t_draft_row)]))
    ds = []
    for _ in range(rounds):
        dec = pol.choose()
        pol.record(dec)
        ds.append(dec)
        pol.update_candidate_strategy(_event(dec.d, 0, 1.0 + 0.1 * dec.d, dec=dec,
                           pol=pol, dft=[(2, t_draft_row)] if dec.d else []))
    return pol, ds


def test_auto_never_probes_a_draft_that_could_not_pay_even_when_always_accepted():
    """A draft model as costly as its target (the teaching pair): E(d) / T(d) < 1 at full
    acceptance for every d, so after the start-up measurement no round drafts."""
    pol, ds = _run_auto(1.0)
    assert all(x.d == 0 and x.reason == "no gain" for x in ds)
    assert pol.hopeless() and pol.stats()["n_probes"] == 1      # the start-up round only


def test_auto_drafts_nothing_when_it_cannot_pay_and_probes_with_back_off():
    """A cheap draft (0.1 of a target decode) that is never accepted: it could pay at full
    acceptance, so probes go on, ever further apart."""
    pol, ds = _run_auto(0.1)
    assert not pol.hopeless()
    probes = [i for i, x in enumerate(ds) if x.d and x.reason == "probe"]
    # the prior (1/2) may buy one more draft before the rejections outweigh it; then only probes
    assert all(x.reason == "probe" for x in ds[probes[0]:] if x.d)
    assert sum(1 for x in ds[:probes[0]] if x.d) <= 1
    assert 3 <= len(probes) <= 6, probes                    # 8, 16, 32, 64, 128 rounds apart
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps)
    assert pol.stats()["n_probes"] >= len(probes)
    assert pol.chosen[0] > 180
    assert "0: " in format_chosen(pol.stats())


def _run_costly_probes(share, rounds=1500, t_probe_round=5.0):
    """A draft that could pay (cheap decodes) but is never accepted, whose probe rounds take
    t_probe_round seconds (a plain round 1): each probe's net cost is t_probe_round - 1."""
    pol = AutoDraftLen(4)
    pol.probe_share = share
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    probes = []
    for i in range(rounds):
        dec = pol.choose()
        pol.record(dec)
        ev = _event(dec.d, 0, 1.0 + 0.1 * dec.d, dec=dec, pol=pol, dft=[(2, 0.1)] if dec.d else [])
        if dec.d:
            ev.t_round = t_probe_round
            probes.append(i)
        pol.update_candidate_strategy(ev)
        assert pol.t_probes_net <= share * pol.t_run + (t_probe_round - 1.0) + 1e-9
    return pol, probes


def test_auto_keeps_the_probes_net_cost_within_its_share_of_the_run():
    pol, probes = _run_costly_probes(PROBE_SHARE)
    free, free_probes = _run_costly_probes(1.0)            # no limit: the doubling schedule alone
    assert len(free_probes) > len(probes) >= 3
    assert pol.t_probes_net == pytest.approx(4.0 * pol.n_probes)
    assert pol.t_probes_net <= PROBE_SHARE * pol.t_run + 4.0
    assert not pol.hopeless() and all(pol.chosen.get(d, 0) == 0 for d in (2, 3, 4))


def test_auto_drafts_long_when_acceptance_is_high_and_the_draft_cheap():
    pol = AutoDraftLen(8)
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    for _ in range(40):
        dec = pol.choose()
        pol.update_candidate_strategy(_event(dec.d, dec.d, 1.0 + 0.05 * dec.d, dec=dec,
                           pol=pol, dft=[(1 + dec.d, 0.05), (1, 0.02)] if dec.d else []))
    dec = pol.choose()
    assert dec.d >= 6 and dec.gain > 2 and dec.reason == "best"
    assert isinstance(dec, Decision) and dec.as_dict()["d"] == dec.d


def test_auto_grows_a_draft_one_token_beyond_the_longest_verified():
    """Untried sizes read optimistically, but a round drafts at most GROW tokens more than the
    longest draft verified so far: the lengths climb one by one to where they pay."""
    pol = AutoDraftLen(8)
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    seen = []
    for _ in range(12):
        dec = pol.choose()
        assert dec.d <= pol.reach() == min(8, pol.max_draft + GROW)
        seen.append(dec.d)
        pol.update_candidate_strategy(_event(dec.d, dec.d, 1.0 + 0.05 * dec.d, dec=dec,
                                             pol=pol, dft=[(1 + dec.d, 0.05), (1, 0.02)] if dec.d else []))
    assert seen[:8] == [1, 2, 3, 4, 5, 6, 7, 8] and pol.reach() == 8


def test_auto_prices_the_seed_as_the_draft_memory_needs_it():
    """Re-evaluating, the seed decode holds the last round's committed rows (1 + E(d)); keeping its
    rows (--no-reeval), the seed row and, after a fully accepted round, the last draft token."""
    def policy(keeps_rows):
        pol = AutoDraftLen(4, keeps_rows=keeps_rows)
        pol.update_candidate_strategy(_event(0, 0, 1.0))
        for k, t in ((1, 0.010), (2, 0.014), (3, 0.018), (4, 0.022), (5, 0.026)):
            pol.observe_draft_decode(k, t)
        return pol
    a = [0.9, 0.8, 0.5, 0.5]
    e = expected_tokens_upto(a, 4)
    pol = policy(False)
    assert pol.draft_cost(3, accept=a) == pytest.approx(pol.t_draft_rows(1 + round(e[3])) + 2 * 0.010)
    full = 0.9 * 0.8 * 0.5                                   # all three accepted: E(3) - E(2)
    assert policy(True).draft_cost(3, accept=a) == pytest.approx(0.010 + full * 0.004 + 2 * 0.010)


def test_auto_charges_a_catch_up_over_the_rounds_it_opens():
    """A draft after idle rounds first decodes the rows the draft model missed: its cost beyond a
    steady seed counts spread over CATCH_UP_ROUNDS rounds. Where a one-token draft pays a little
    in steady drafting, a long catch-up on a draft whose rows are dear (a Zen 3's 0.5B: a row
    beyond the first ~0.45 of its step) tips the choice to plain decoding."""
    pol = AutoDraftLen(1, keeps_rows=True)
    pol.update_candidate_strategy(_event(0, 0, 0.040))
    for i in range(40):
        pol.update_candidate_strategy(_event(1, int(i % 10 < 6), 0.048, pol=pol,
                                             dft=[(1, 0.009), (2, 0.013), (1, 0.009)]))
    pol.observe_draft_decode(12, 0.060)
    steady = pol.decide()
    assert steady.d == 1 and steady.gain > 1
    behind = pol.decide(behind=11)
    assert behind.d == 0
    dt = pol.t_draft_rows.upto(12)
    seed = dt[1] + pol.rates("draft-simple")[0] * (dt[2] - dt[1])   # a one-token draft accepted in full
    t = pol.target_cost(2) + seed + (dt[12] - seed) / CATCH_UP_ROUNDS
    assert behind.rates[1] == pytest.approx(steady.expected_tokens / t)
    assert pol.choose(behind=11).d == 0                      # as the chain feeds it
    assert pol.choose(behind=1).d == 1


def test_auto_for_a_free_ngram_draft_weighs_only_the_verification():
    pol = AutoDraftLen(8)
    for k, t in ((1, 1.0), (2, 1.5), (3, 2.0), (9, 5.0)):   # each row costs half a decode
        pol.update_candidate_strategy(_event(k - 1, 0 if k > 1 else 0, t, impl="ngram-simple"))
    for _ in range(30):
        pol.update_candidate_strategy(_event(2, 1, 2.0, impl="ngram-simple"))   # position 1 accepted, 2 not
    assert pol.draft_cost(3, "ngram-simple", costs_model=False) == 0.0
    assert pol.choose("ngram-simple", costs_model=False).d == 1


def test_heuristic_schedule_is_transformers():
    pol = HeuristicDraftLen(64)
    assert pol.choose().d == HEURISTIC_START == 20
    pol.update_candidate_strategy(_event(20, 20, 1.0))
    assert pol.choose().d == 22
    pol.update_candidate_strategy(_event(22, 3, 1.0))
    assert pol.choose().d == 21
    for _ in range(40):
        pol.update_candidate_strategy(_event(5, 0, 1.0))
    assert pol.choose().d == 1                              # never under 1
    capped = HeuristicDraftLen(8)
    assert capped.choose().d == 8
    capped.update_candidate_strategy(_event(8, 8, 1.0))
    assert capped.choose().d == 8


# ---- parameters ----------------------------------------------------------------------------------
def test_parse_draft_max():
    assert parse_draft_max(3) == ("fixed", 3)
    assert parse_draft_max("5") == ("fixed", 5)
    assert parse_draft_max("auto") == ("auto", AUTO_CAP)
    assert parse_draft_max("auto:8") == ("auto", 8)
    assert parse_draft_max("heuristic") == ("heuristic", HEURISTIC_CAP)
    for bad in ("fast", "auto:0", "auto:x", "-1", "300", "3:4", "", True):
        with pytest.raises(ParamError, match=r"draft(_max|-n-max)"):
            parse_draft_max(bad)


def test_spec_params_take_auto():
    sp = SpecParams(n_max="auto:8").validate()
    assert (sp.schedule, sp.n_max, sp.draft_max) == ("auto", 8, "auto:8")
    assert SpecParams(schedule="heuristic", n_max=10).validate().draft_max == "heuristic:10"
    assert sp.replace(p_min=0.5).schedule == "auto"
    with pytest.raises(ParamError, match="draft_schedule"):
        SpecParams(schedule="greedy").validate()
    with pytest.raises(ParamError, match="contradicts"):
        SpecParams(n_max="auto", schedule="heuristic")


# ---- lossless in the loop ------------------------------------------------------------------------
def _loop(tgt, dft, prompt, n, sp, spec, tgt_rm=True, dft_rm=True, n_ctx=128, n_seq=1, policy=None):
    needs_draft = spec.needs_draft_model()
    ct = Context(tgt, n_ctx=n_ctx, n_seq_max=n_seq, partial_seq_rm=tgt_rm)
    cd = Context(dft, n_ctx=n_ctx, n_seq_max=n_seq, partial_seq_rm=dft_rm) if needs_draft else None
    return SpeculativeLoop(ct, cd, prompt, n, sp, spec, policy=policy)


@pytest.mark.parametrize("name", ["greedy", "temp0.8-topk40", "repeat1.1"])
@pytest.mark.parametrize("draft_max", ["auto:6", "heuristic:6"])
@pytest.mark.parametrize("types,tgt_rm,dft_rm", [("draft-simple", True, True),
                                                  ("draft-simple", False, True),
                                                  ("draft-simple", True, False),
                                                  ("ngram-simple,draft-simple", True, True),
                                                  ("ngram-simple", True, True)])
def test_auto_and_heuristic_lossless(pair, name, draft_max, types, tgt_rm, dft_rm):
    tgt, dft = pair
    lengths = set()
    for seed, reeval in ((1, True), (2, False)):
        sp = SAMPLERS[name].replace(seed=seed)
        prompt = repetitive_prompt(tgt, seed)
        expect = plain(tgt, prompt, sp, 40)
        loop = _loop(tgt, dft, prompt, 40, sp, SpecParams(types=types, n_max=draft_max,
                                                          reeval=reeval, **NGRAM),
                     tgt_rm=tgt_rm, dft_rm=dft_rm)
        events = list(loop.rounds())
        assert loop.results()[0].tokens == expect, (types, name, seed, draft_max)
        check_invariants(loop, events)
        for ev in events:
            for r in ev.slots:
                if not r.replay:
                    assert r.draft_len is not None and len(r.draft) <= r.draft_len.d
                    lengths.add(r.draft_len.d)
        st = loop.policy.stats()
        assert sum(st["chosen"].values()) == sum(not ev.slot.replay for ev in events)
        assert "chosen per round" in loop.summary()
    if draft_max.startswith("auto"):
        assert 0 in lengths, "auto starts with a plain round"


def test_auto_lossless_several_sequences(pair):
    tgt, dft = pair
    ps = [repetitive_prompt(tgt, 5), prompts(tgt, 1, 6)[0]]
    sps = [SAMPLERS["greedy"], SAMPLERS["temp0.8-topk40"].replace(seed=3)]
    expect = [plain(tgt, p, sp, 24) for p, sp in zip(ps, sps)]
    loop = _loop(tgt, dft, ps, 24, sps, SpecParams(n_max="auto:4"), n_seq=2)
    events = list(loop.rounds())
    assert [r.tokens for r in loop.results()] == expect
    check_invariants(loop, events)


def test_auto_skips_the_draft_model_on_rounds_without_a_draft(pair):
    """A round that drafts nothing costs the draft model nothing: the rows it missed are decoded
    in the next draft's seed batch (as process() work), and its KV then holds the history."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    loop = _loop(tgt, dft, prompt, 30, SAMPLERS["greedy"], SpecParams(n_max="auto:4"))
    ds = loop.chain.impl_of("draft-simple")
    # the forged draft model costs about what its target does: judged from the prompt's decodes it
    # would never draft; without that estimate the second round is a start-up draft
    loop.policy.observe_prefill = lambda n, t_target, t_draft=None: None
    decodes = _draft_decodes(loop)
    events = []
    for ev in loop.rounds():
        events.append(ev)
        if not ev.slot.draft:
            assert ev.n_dft_eval == 0
    assert events[0].slot.draft == [] and events[0].slot.draft_len.reason == "start-up"
    assert events[1].slot.draft_len.reason == "start-up" and events[1].slot.draft
    assert [n for r, n in decodes if r == 1][0] == 2    # the missed row and the seed row
    assert isinstance(ds, DeferredDraftSimple) and ds.n_eval_process > 0


def test_fixed_keeps_llama_cpp_behaviour(pair):
    """--draft-max N: no per-type caps, no deferred process, the draft model catches up every round."""
    tgt, dft = pair
    prompt = prompts(tgt, 1, 4)[0]
    loop = _loop(tgt, dft, prompt, 16, SAMPLERS["greedy"], SpecParams(n_max=3))
    events = list(loop.rounds())
    assert type(loop.chain.impl_of("draft-simple")) is DraftSimple
    assert all(r.draft_len is None for ev in events for r in ev.slots)
    assert loop.policy.stats()["chosen"] == {3: len(events)}


@pytest.mark.parametrize("sampling", ["greedy", "temp0.8-topk40"])
def test_no_reeval_catches_up_beside_the_seed_row(pair, sampling):
    """--no-reeval with a fixed draft-max: the draft keeps its rows, so after the prompt process()
    decodes nothing; the one row it misses (the last drafted token, after a fully accepted draft)
    is decoded in the next seed batch, beside id_last: a 2-row decode instead of two 1-row ones.
    The output stays plain decoding's, and the draft ends holding the committed tokens."""
    tgt, dft = pair
    prompt = prompts(tgt, 1, 0)[0]
    sp = SAMPLERS[sampling].replace(seed=3)
    loop = _loop(tgt, dft, prompt, 40, sp, SpecParams(n_max=3, reeval=False))
    ds = loop.chain.impl_of("draft-simple")
    assert isinstance(ds, DeferredDraftSimple)
    seen, decode, phase = [], ds.ctx.decode, {"draft": False}
    draft = ds.draft

    def in_draft(dps):
        phase["draft"] = True
        try:
            draft(dps)
        finally:
            phase["draft"] = False
    ds.draft = in_draft
    ds.ctx.decode = lambda b: (seen.append((phase["draft"], len(b), list(b.pos))), decode(b))[1]
    events = list(loop.rounds())
    assert loop.results()[0].tokens == plain(tgt, prompt, sp, 40)
    assert seen[0][:2] == (False, len(prompt) - 1)            # the prompt, decoded at once
    assert all(in_d for in_d, _, _ in seen[1:]), "process() decoded after the prompt"
    full = [i for i, ev in enumerate(events[:-1]) if ev.slot.draft and ev.slot.n_accepted == len(ev.slot.draft)]
    assert full, "the tiny pair accepts some drafts whole"
    two_row = [pos for _, n, pos in seen if n == 2]
    assert len(two_row) == sum(1 for i in full if events[i + 1].slot.draft)
    for pos in two_row:
        assert pos[1] == pos[0] + 1            # the missed row, then id_last right after it
    check_invariants(loop, events)


def test_rejection_mode_with_auto(pair):
    tgt, dft = pair
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the forged draft model would not pay (auto would not draft): the lengths are scripted,
        # so rejection sampling runs under auto's deferred catch-up
        loop = _loop(tgt, dft, prompts(tgt, 1, 2)[0], 20, SAMPLERS["temp0.8-topk40"].replace(seed=5),
                     SpecParams(n_max="auto:4", verify="rejection"),
                     policy=_Scripted([(0, "start-up"), (1, "start-up")]))
        events = list(loop.rounds())
    res = loop.results()[0]
    assert sum(len(ev.slot.committed) for ev in events) == len(res.tokens)
    assert len(res.tokens) == 20 or res.stop_reason == "eog"
    assert sum(1 for ev in events if ev.slot.draft) >= min(3, len(events) - 1)
    assert isinstance(loop.chain.impl_of("draft-simple"), DeferredDraftSimple)
    check_invariants(loop, events)


def test_auto_judges_a_hopeless_draft_from_the_prompt_decodes_without_a_start_up_draft():
    """The loop times both models' decode of the prompt rows: a draft model whose decode of them
    costs 0.9 of the target's, with a target whose 5-row decode costs 1.5 one-row decodes, cannot
    pay at full acceptance, so no round drafts (not even a start-up draft) within PROBE_MAX rounds."""
    pol = AutoDraftLen(8)
    pol.observe_prefill(5, 1.5, 0.9 * 1.5)
    assert pol.prefill_ratio == pytest.approx(0.9)
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    ds = []
    for _ in range(PROBE_MAX - 1):
        dec = pol.choose(remaining=1000)
        pol.record(dec)
        ds.append(dec)
        pol.update_candidate_strategy(_event(dec.d, 0, 1.0 + 0.125 * dec.d, dec=dec))
    assert all(x.d == 0 and x.reason == "no gain" for x in ds)
    dec = pol.choose(remaining=1000)          # the estimate is checked by one real draft
    assert dec.reason == "probe" and dec.d == PROBE_LEN
    # a cheap draft model (0.2 of the target) on the same prompt: start-up draft as before
    cheap = AutoDraftLen(8)
    cheap.observe_prefill(5, 1.5, 0.2 * 1.5)
    cheap.update_candidate_strategy(_event(0, 0, 1.0))
    assert cheap.choose(remaining=1000).reason == "start-up"


def test_a_no_gain_verdict_holds_for_a_few_rounds_then_is_read_again():
    """In the "no gain" regime the costs are read once per NO_GAIN_RECHECK rounds (the decision is
    a round's one expense beyond plain decoding); a change in them is seen at the next reading."""
    pol = AutoDraftLen(8)
    pol.observe_prefill(5, 1.5, 0.9 * 1.5)                  # the teaching pair: no length pays
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    calls = []
    decide = pol.decide
    pol.decide = lambda *a, **kw: calls.append(1) or decide(*a, **kw)
    for _ in range(4 * NO_GAIN_RECHECK):
        dec = pol.choose(remaining=1000)
        pol.record(dec)
        pol.update_candidate_strategy(_event(0, 0, 1.0))
        assert dec.d == 0 and dec.reason == "no gain"
    assert len(calls) == 4
    assert pol.choose(remaining=1000).reason == "no gain" and len(calls) == 5   # read again
    pol.prefill_ratio = 0.05                                # the draft model became cheap
    decs = [pol.choose(remaining=1000) for _ in range(NO_GAIN_RECHECK)]
    assert decs[-1].reason == "start-up" and all(d.reason == "no gain" for d in decs[:-1])


def test_auto_draft_costs_come_from_the_prefill_ratio_until_the_draft_model_has_drafted():
    pol = AutoDraftLen(8)
    pol.observe_prefill(9, 3.0, 1.2)                      # ratio 0.4
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    k = 1 + round(expected_tokens(pol.rates("draft-simple"), 1))   # the seed batch's rows
    assert k == 3 and pol.target_cost(3) == pytest.approx(1.0)   # max(1.0, 3.0 * 3 / 9)
    assert pol.draft_cost(1) == pytest.approx(0.4 * pol.target_cost(3))
    assert pol.draft_cost(3) == pytest.approx(0.4 * pol.target_cost(1 + round(
        expected_tokens(pol.rates("draft-simple"), 3))) + 2 * 0.4 * 1.0)
    pol.update_candidate_strategy(_event(2, 0, 1.2, pol=pol, dft=[(3, 0.3), (1, 0.25)]))
    k = 1 + round(expected_tokens(pol.rates("draft-simple"), 1))
    assert pol.draft_cost(1) == pytest.approx(pol.t_draft_rows(k))   # measured from now on
    assert 0.25 <= pol.draft_cost(1) <= 0.3


def test_auto_probes_only_while_enough_tokens_remain_to_use_what_the_probe_finds():
    """A start-up draft or a probe pays only in the rounds after it: with fewer tokens left than
    PROBE_FIRST (start-up) or than the probe interval, the round does not draft ("budget")."""
    pol = AutoDraftLen(8)
    pol.update_candidate_strategy(_event(0, 0, 1.0))
    assert pol.choose(remaining=PROBE_FIRST - 1).reason == "budget"
    assert pol.choose(remaining=PROBE_FIRST).reason == "start-up"
    pol.update_candidate_strategy(_event(2, 0, 1.2, pol=pol, dft=[(3, 0.1), (1, 0.1)]))
    for _ in range(20):                                     # never accepted: d = 0 wins
        pol.update_candidate_strategy(_event(1, 0, 1.1, pol=pol, dft=[(2, 0.1)]))
    decs = [pol.choose(remaining=3) for _ in range(3 * PROBE_FIRST)]
    assert all(d.d == 0 for d in decs) and "budget" in {d.reason for d in decs}
    decs = [pol.choose(remaining=1000) for _ in range(PROBE_FIRST)]
    assert any(d.reason == "probe" and d.d > 0 for d in decs)


def test_batch_cost_medians_follow_every_new_sample():
    bc = BatchCost()
    bc.add(1, 1.0)
    assert bc(1) == 1.0
    bc.add(1, 3.0)
    bc.add(1, 5.0)
    assert bc(1) == 3.0 and bc.points() == [(1, 3.0)]
    bc.add(3, 7.0)
    assert bc(2) == pytest.approx(7.0 * 2 / 3)


def test_batch_cost_tables_agree_whatever_their_length_and_read_measured_sizes_as_measured():
    """One walk computes every reading (bc(k) is the table's value): a table for n = 70 and one
    for a smaller n agree on their common sizes, and a measured size reads as its point (to the
    last bits: past the first point, the rule between two sizes evaluated at the larger)."""
    import random
    rnd = random.Random(3)
    for _ in range(500):
        bc = BatchCost()
        for _ in range(rnd.randint(1, 30)):
            bc.add(rnd.choice([1, 2, 3, 5, 9, 17, rnd.randint(1, 60)]), rnd.random())
        n = rnd.randint(0, 70)
        big, small = bc._interpolate(70), bc._interpolate(n)
        assert big[:n + 1] == small and bc(n) == small[n]
        for k, t in bc.points():
            assert big[k] == pytest.approx(t, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_auto_decision_is_best_length_of_its_costs(seed):
    """decide() and hopeless() read the cost tables in one pass; they equal the plain functions
    best_length(accept, target_cost, draft_cost) on the same estimates."""
    import random
    rnd = random.Random(seed)
    pol = AutoDraftLen(rnd.choice([1, 4, 8, 16]))
    pol.observe_prefill(rnd.randint(2, 40), 0.02 + 0.02 * rnd.random(), 0.002 + 0.03 * rnd.random())
    pol.update_candidate_strategy(_event(0, 0, 0.02 + 0.01 * rnd.random()))
    def check(source, model):
        a = pol.rates(source)
        want = best_length(a, pol.target_cost, lambda d: pol.draft_cost(d, source, a, model), pol.n_max)
        near = best_length(a, pol.target_cost, lambda d: pol.draft_cost(d, source, a, model), pol.reach())
        dec = pol.decide(source, costs_model=model)
        assert dec.d == near[0] <= pol.max_draft + GROW and dec.rates == pytest.approx(want[1], rel=1e-12)
        full = best_length(1.0, lambda k: pol.t_target.upto(pol.n_max + 2, cautious=True)[k],
                           lambda d: pol._draft_cost_e(d, 1.0 + d, 1.0, cautious=True) if model else 0.0,
                           pol.n_max)
        assert pol.hopeless(model) == (full[0] == 0)
    for source, model in (("draft-simple", True), ("ngram-simple", False)):
        for _ in range(rnd.randint(0, 30)):
            d = rnd.randint(1, pol.n_max)
            dft = ([(rnd.randint(1, 6), 0.004 + 0.01 * rnd.random())]
                   if source == "draft-simple" and rnd.random() < 0.7 else [])
            pol.update_candidate_strategy(_event(d, rnd.randint(0, d), 0.02 + 0.004 * d * rnd.random(),
                                                 impl=source, pol=pol, dft=dft))
        check(source, model)


def test_expected_tokens_upto_agrees_with_expected_tokens():
    a = [0.9, 0.5, 0.25, 0.1]
    assert expected_tokens_upto(a, 4) == pytest.approx([expected_tokens(a, d) for d in range(5)])
    assert expected_tokens_upto(0.5, 3) == pytest.approx([1.0, 1.5, 1.75, 1.875])


class _Scripted(AutoDraftLen):
    """auto's machinery with the lengths and reasons given in advance (then 2, "best")."""

    def __init__(self, script):
        super().__init__(4)
        self.script = list(script)
        self.behind_seen = []

    def choose(self, source="draft-simple", remaining=None, behind=0, costs_model=True):
        self.behind_seen.append(behind)
        d, why = self.script.pop(0) if self.script else (2, "best")
        return Decision(d, why)


@pytest.mark.parametrize("reeval", [True, False])
def test_a_probe_after_idle_rounds_catches_up_only_the_last_rows(pair, reeval):
    """After 10 rounds without a draft, a probe's seed batch holds the last CATCH_UP_WINDOW missed
    rows and the seed row, placed right after what the draft KV holds (its positions now run
    behind the target's by the rows left out); drafting goes on from there, the bookkeeping holds
    and the output is plain decoding's."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    sp = SAMPLERS["greedy"]
    want = plain(tgt, prompt, sp, 30, penalize_prompt=False)
    script = [(0, "start-up")] + [(0, "best")] * 9 + [(1, "probe")]
    loop = _loop(tgt, dft, prompt, 30, sp, SpecParams(n_max="auto:4", reeval=reeval), policy=_Scripted(script))
    ds = loop.chain.impl_of("draft-simple")
    decodes = _draft_decodes(loop)
    events = list(loop.rounds())
    probe = events[10]
    assert probe.slot.draft_len.reason == "probe" and len(probe.slot.draft) == 1
    missed = probe.slot.n_past - (len(prompt) - 1)       # the rows since the prompt
    assert missed == 10 > CATCH_UP_WINDOW
    # what the draft model would catch up, as the policy sees it before each round: after round
    # i of those drafting nothing, their i rows (the prompt's last row is the seed's, not missed)
    assert loop.policy.behind_seen[:11] == list(range(11))
    # drafting since: the last draft token (kept rows), or the committed rows to re-evaluate
    assert all(b <= (1 + 2 if reeval else 1) for b in loop.policy.behind_seen[12:])
    assert [n for r, n in decodes if r == 10][0] == CATCH_UP_WINDOW + 1
    assert ds.offset(0) == missed - CATCH_UP_WINDOW
    # the round's record gives the draft KV's end in the target's positions: after drafting and
    # rolling back, [0, n_past) (llama.cpp's re-evaluation) or also the drafted row (kept)
    assert probe.slot.kv_dft.verified == probe.slot.n_past - 1 + (0 if reeval else 1)
    assert all(len(ev.slot.draft) for ev in events[11:])            # drafting from then on
    firsts = {}
    for r, n in decodes:
        firsts.setdefault(r, n)
    assert all(firsts[r] <= 1 + 4 for r in range(12, len(events)))    # no more rows left out
    check_invariants(loop, events)
    assert loop.results()[0].tokens == want
    # what the draft KV holds: the prompt's rows, then the window's and the later ones
    held = [int(t) for t in loop.ctx_dft.cell_tokens[0, :loop.ctx_dft.seq_pos_max(0) + 1]]
    history = list(prompt) + loop.results()[0].tokens
    n0 = len(prompt) - 1 + 1                  # the prompt's rows and the first round's id_last
    assert held[:len(prompt) - 1] == history[:len(prompt) - 1]
    assert held[n0 - 1:] == history[n0 - 1 + ds.offset(0):len(held) + ds.offset(0)]


def test_a_policy_given_with_a_chain_is_the_one_the_draft_model_reports_to(pair):
    """SpeculativeLoop(chain=..., policy=...) puts the policy in the chain, its only holder: the
    draft model's catch-up, its decode times and its rows behind reach the new policy, not the
    one the chain was built with."""
    from specnb.speculation.speculative import build_speculative
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    sp, spec = SAMPLERS["greedy"], SpecParams(n_max="auto:4")
    ct, cd = Context(tgt, n_ctx=128), Context(dft, n_ctx=128)
    chain = build_speculative(spec, tgt, cd)
    built_with = chain.policy
    pol = _Scripted([(0, "start-up")] + [(0, "best")] * 9 + [(1, "probe")])
    loop = SpeculativeLoop(ct, cd, prompt, 30, sp, spec, chain=chain, policy=pol)
    decodes = _draft_decodes(loop)
    events = list(loop.rounds())
    assert loop.policy is pol and loop.chain.policy is pol
    assert pol.t_draft_rows.known and not built_with.t_draft_rows.known
    assert pol.behind_seen[:11] == list(range(11))
    assert events[10].slot.draft_len.reason == "probe"
    assert [n for r, n in decodes if r == 10][0] == CATCH_UP_WINDOW + 1   # the probe's window
    assert loop.results()[0].tokens == plain(tgt, prompt, sp, 30)
    check_invariants(loop, events)


def test_the_seam_between_auto_and_the_draft_model_runs_one_way():
    """The policy is fed by the chain (arguments in, decisions out): the draft model's module
    names no policy and reads no reason, and the policy's modules import no speculator."""
    import ast
    from pathlib import Path
    import specnb.speculation as pkg
    here = Path(pkg.__file__).parent

    def tree(name):
        return ast.parse((here / f"{name}.py").read_text(encoding="utf-8"))
    deferred = tree("deferred")
    names = {n.id for n in ast.walk(deferred) if isinstance(n, ast.Name)} | \
            {n.attr for n in ast.walk(deferred) if isinstance(n, ast.Attribute)}
    assert not {n for n in names if "policy" in n.lower() or n in ("round", "reason")}
    strings = {n.value for n in ast.walk(deferred) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & {"probe", "start-up"}
    for name in ("draft_len", "auto_costs", "auto"):
        imported = {n.module for n in ast.walk(tree(name)) if isinstance(n, ast.ImportFrom)}
        assert not imported & {"impl", "draft_simple", "deferred", "speculative", "loop"}, name
        source = (here / f"{name}.py").read_text(encoding="utf-8")
        assert '== "draft-simple"' not in source and '!= "draft-simple"' not in source, name
