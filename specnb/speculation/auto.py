"""`--spec-draft-n-max auto`: each round's draft length from the costs this run measures.

`AutoDraftLen` takes the argmax of E(d) / T(d) (draft_len.py states it; auto_costs.py measures
its terms) over the lengths the run may try, and decides when a round drafts at all:
  - start-up: the first round decodes plainly (it measures t_target(1)); then one short draft
    (PROBE_LEN tokens) measures the draft model. Until it has drafted, the draft model's decodes
    are priced as the target's times the ratio of the two models' decodes of the prompt;
  - reach: a draft is at most GROW tokens longer than the longest one verified so far (an
    untried size reads optimistically; each try measures it);
  - catch-up: a draft model that skipped idle rounds first decodes the rows it missed (`behind`,
    fed by the chain; deferred.py); the cost beyond a steady seed counts spread over
    CATCH_UP_ROUNDS rounds. A probe's or a start-up draft's round catches up only the last
    CATCH_UP_WINDOW of them (Decision.catch_up_window);
  - probes: while d = 0 wins, a probe (a PROBE_LEN draft) runs after PROBE_FIRST rounds, then
    after twice as many, up to PROBE_MAX, so that a change of acceptance or load is seen; a due
    probe waits while the probes' net cost exceeds PROBE_SHARE of the run;
  - no gain: where no length pays even at full acceptance (the cautious reading of the costs),
    no probe runs; the verdict holds NO_GAIN_RECHECK rounds before the costs are read again;
  - budget: a start-up draft or a probe pays only through the rounds after it, so none runs
    when fewer tokens remain than those rounds.
With a costs prior (auto_costs.CostPrior, from the machine's costs record) every length is priced
from the first round: no start-up round or draft, no reach (every size is priced, none guessed),
and the acceptance starts from PRIOR_ACCEPT (held by PRIOR_ACCEPT_STRENGTH pseudo-counts), so a
run drafts at once and settles on its length within a few rounds (a short run would otherwise
spend a third of itself finding it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .auto_costs import PRIOR_STRENGTH, Acceptance, BatchCost, CostPrior
from .draft_len import Decision, DraftLenPolicy, expected_tokens, expected_tokens_upto, shortest_best

PROBE_FIRST = 8               # rounds of d = 0 before the first probe ...
PROBE_MAX = 128               # ... the interval doubling up to this
PROBE_LEN = 1                 # draft tokens of a probe
PROBE_SHARE = 0.015           # the probes' measured net cost kept within this share of the run
NO_GAIN_RECHECK = 8           # a "no gain" verdict is read again from the costs every N rounds
CATCH_UP_WINDOW = 4           # a probe's draft model decodes at most this many of the rows it missed
GROW = 1                      # a draft at most this many tokens longer than the longest one verified
CATCH_UP_ROUNDS = 8           # a draft after idle rounds: its catch-up charged over this many rounds
PRIOR_ACCEPT = 0.9            # the pooled acceptance a run with a costs prior starts from ...
PRIOR_ACCEPT_STRENGTH = 8.0   # ... held by this many pseudo-counts a position, each position's
                              # centred on the one before's estimate (auto_costs.Acceptance.chain)


@dataclass
class ProbeClock:
    """One source's probes: the rounds since the last one, and the interval before the next."""
    rounds: int
    interval: int


@dataclass
class Held:
    """A "no gain" verdict, and the rounds it still holds before the costs are read again."""
    decision: Decision
    rounds: int


class AutoDraftLen(DraftLenPolicy):
    """Each round's length from measured costs and running acceptance (see the module docstring).

    Fed by `update_candidate_strategy(ev)` with the loop's RoundEvents: ev.t_verify + ev.t_sample +
    ev.t_rollback + ev.t_process time a target side of 1 + len(draft) rows; the slot's draft, impl
    and n_accepted the acceptance per source; by `observe_draft_decode`, the draft model's
    decodes as (rows, seconds); by `observe_prefill`, the prompt's decodes. `keeps_rows`: the
    draft model keeps the rows it computed while drafting (--no-reeval), which prices its seed.
    """
    schedule = "auto"

    def __init__(self, n_max: int, probe_first: int = PROBE_FIRST, probe_max: int = PROBE_MAX,
                 probe_len: int = PROBE_LEN, keeps_rows: bool = False, prior: CostPrior | None = None,
                 accept_mean: float | None = None):
        super().__init__(n_max)
        self.prior = prior
        self.t_target = BatchCost(prior=prior.target if prior else None)
        # the draft model's k-row decodes (before it has drafted, the record's rescaled as the target's)
        self.t_draft_rows = BatchCost(prior=prior.draft if prior else None, fallback_scale=self.t_target.scale)
        # the pooled acceptance before any draft is verified: PRIOR_ACCEPT with a costs prior (which
        # starts the run drafting at once), else one half
        self.accept_mean = accept_mean if accept_mean is not None else PRIOR_ACCEPT if prior else 0.5
        self.accept_strength = PRIOR_ACCEPT_STRENGTH if prior else PRIOR_STRENGTH
        self.acc: dict[str, Acceptance] = {}
        self.probe_first, self.probe_max, self.probe_len = probe_first, probe_max, probe_len
        self._probe: dict[str, ProbeClock] = {}   # per source
        self.n_probes = 0
        self.t_probes = 0.0                       # seconds of the rounds that probed
        self.t_probes_net = 0.0                   # ... less what plain rounds would have taken
        self.t_run = 0.0                          # seconds of every round observed
        self.probe_share = PROBE_SHARE
        self._held: dict[str, Held] = {}          # per source: a "no gain" verdict
        self.prefill_ratio: float | None = None   # draft / target seconds on the same prompt rows
        self.keeps_rows = bool(keeps_rows)
        self.max_draft = 0                        # the longest draft a round has verified

    # ---- the model of a round ------------------------------------------------------------
    def rates(self, source: str) -> list:
        return self._acceptance(source).rates(self.n_max)

    def _acceptance(self, source: str) -> Acceptance:
        a = self.acc.get(source)
        if a is None:
            a = self.acc[source] = Acceptance(prior=self.accept_strength, mean=self.accept_mean,
                                              chain=self.prior is not None)
        return a

    def draft_cost(self, d: int, source: str = "draft-simple", accept=None,
                   costs_model: bool = True) -> float:
        """Seconds the draft model spends on a d-token draft in steady drafting: one seed decode,
        then d - 1 one-row steps. The seed holds the rows the draft misses: re-evaluating, the last
        round's committed ones (1 + E(d) rows); keeping its rows (--no-reeval), the seed row and,
        after a fully accepted round (probability E(d) - E(d - 1)), the last draft token."""
        if d <= 0 or not costs_model:
            return 0.0
        es = expected_tokens_upto(accept if accept is not None else self.rates(source), d)
        return self._draft_cost_e(d, es[d], es[d] - es[d - 1])

    def _seed_cost(self, tab: list, e: float, p_full: float) -> float:
        # the seed decode's expected seconds (draft_cost), from a table of k-row decode times
        if self.keeps_rows:
            return tab[1] + p_full * (tab[2] - tab[1])
        return tab[1 + round(e)]

    def _draft_cost_e(self, d: int, e: float, p_full: float, cautious: bool = False) -> float:
        if self.t_draft_rows.known:
            tab = self.t_draft_rows.upto(self.n_max + 2, cautious)
            return self._seed_cost(tab, e, p_full) + (d - 1) * tab[1]
        # before the draft model has drafted: its decodes estimated as the target's, times the
        # ratio of the two models' measured decodes of the same prompt rows
        tab = self.t_target.upto(self.n_max + 2, cautious)
        return self.prefill_ratio * (self._seed_cost(tab, e, p_full) + (d - 1) * tab[1])

    def target_cost(self, k: int) -> float:
        tab = self.t_target.upto(self.n_max + 2)
        return tab[k] if 0 <= k < len(tab) else self.t_target(k)

    def _rates(self, es: list, costs_model: bool, cautious: bool = False, behind: int = 0) -> list:
        """E(d) / T(d) for d in 0..n_max: best_length's rates with target_cost and draft_cost, a
        copy that reads the cost tables in one pass instead of calling them per length (the policy
        decides every round, so its own time counts: for 17 lengths 5 us against best_length's
        58 us on a 2-core AMD EPYC; tests/test_draft_len.py holds the two equal). behind: the rows
        the draft model must catch up first (rounds that drafted nothing); the catch-up's cost
        beyond a steady seed is paid once, so it counts spread over CATCH_UP_ROUNDS rounds."""
        n = self.n_max
        tt = self.t_target.upto(n + 2, cautious)
        rates = [es[0] / tt[1] if tt[1] > 0 else math.inf]
        if costs_model:
            if self.t_draft_rows.known:
                dt = self.t_draft_rows.upto(max(n, behind) + 2, cautious)
            else:
                dt = [self.prefill_ratio * x for x in self.t_target.upto(max(n, behind) + 2, cautious)]
            for d in range(1, n + 1):
                seed = self._seed_cost(dt, es[d], es[d] - es[d - 1])
                t = tt[1 + d] + seed + (d - 1) * dt[1]
                if behind > 1:
                    t += max(dt[1 + behind] - seed, 0.0) / CATCH_UP_ROUNDS
                rates.append(es[d] / t if t > 0 else math.inf)
        else:
            for d in range(1, n + 1):
                rates.append(es[d] / tt[1 + d] if tt[1 + d] > 0 else math.inf)
        return rates

    def reach(self) -> int:
        """The longest draft a round may choose: GROW tokens beyond the longest one verified so
        far (at most n_max). A size nobody has tried is read optimistically (`between`), so that
        it gets tried; one step at a time, each try measures the next size, where a jump to the
        longest draft the optimistic reading favours can cost a short run several long rounds
        (drafts of 7-12 tokens verified at 3-6 one-row steps each, on code with 97% acceptance)."""
        if self.prior is not None:
            return self.n_max                 # every size is priced by the record: none is guessed
        return min(self.n_max, self.max_draft + GROW)

    def decide(self, source: str = "draft-simple", behind: int = 0, costs_model: bool = True) -> Decision:
        """The argmax decision from the current estimates, without counting it: best_length's,
        with target_cost and draft_cost, from the tables in one pass, over the lengths up to
        reach(); behind: the draft model's rows to catch up (_rates)."""
        es = self._acceptance(source).expected_upto(self.n_max)
        rates = self._rates(es, costs_model, behind=behind)
        d = shortest_best(rates[:self.reach() + 1])
        return Decision(d, "best", es[d], rates[d], rates[0], rates)

    def hopeless(self, costs_model: bool = True) -> bool:
        """True when no length beats plain decoding even if every draft token were accepted, at
        the cautious reading of the costs (unmeasured sizes on the straight line between measured
        ones): a draft model is tried, and probed for, only where it pays in that reading, while
        the lengths of a model that drafts are chosen on the hopeful one (`between`)."""
        full = [1.0 + d for d in range(self.n_max + 1)]
        return shortest_best(self._rates(full, costs_model, cautious=True)) == 0

    # ---- the decision ------------------------------------------------------------------
    def lengths(self, sources: dict, remaining: int | None = None, behind: int = 0) -> dict:
        """DraftLenPolicy.lengths; a round that probes or starts up a source drafts to measure,
        and pays only through the rounds after it: there the draft model catches up only the
        last CATCH_UP_WINDOW rows it missed."""
        decs = super().lengths(sources, remaining, behind)
        if any(dec.reason in ("probe", "start-up") for dec in decs.values()):
            decs = {t: replace(dec, catch_up_window=CATCH_UP_WINDOW) for t, dec in decs.items()}
        return decs

    def choose(self, source: str = "draft-simple", remaining: int | None = None, behind: int = 0,
               costs_model: bool = True) -> Decision:
        """This round's decision for a draft from `source` (an impl type); not yet counted
        (`record` counts the decision that applied). `remaining`, the tokens still to generate:
        a start-up draft or a probe pays only through the rounds after it, so none runs when
        fewer tokens remain than the rounds its measurement would govern ("budget")."""
        if 1 not in self.t_target.samples and self.prior is None:
            return Decision(0, "start-up")                        # measure a plain round first
        held = self._held.get(source)
        if held is not None and held.rounds > 0:
            # a "no gain" verdict holds for NO_GAIN_RECHECK rounds: the costs move slowly, and in
            # a round that drafts nothing the decision is the round's one expense beyond plain
            # decoding (read right after a decode, its tables are cache misses: 60 us on a 3.6 ms
            # step of the 135M)
            held.rounds -= 1
            return self._no_gain(source, remaining, held.decision, costs_model, hold=False)
        if costs_model and not self.t_draft_rows.known:
            # the draft model has not drafted yet: with the prompt's decodes measured, a draft model
            # that could not pay even at full acceptance is judged without a start-up draft
            if self.prefill_ratio is not None and self.hopeless(costs_model):
                return self._no_gain(source, remaining, self.decide(source, costs_model=costs_model),
                                     costs_model)
            if remaining is not None and remaining < self.probe_first:
                return Decision(0, "budget")
            return Decision(min(self.probe_len, self.n_max), "start-up")
        dec = self.decide(source, behind if costs_model else 0, costs_model)
        clock = self._probe.setdefault(source, ProbeClock(0, self.probe_first))
        if dec.d == 0 and self.hopeless(costs_model):
            # even a draft accepted in full would not pay at the measured costs: a probe could only
            # confirm it, at the price of the draft model's catch-up; the costs are re-read every
            # round, so a change of load brings the probes back
            return self._no_gain(source, remaining, dec, costs_model)
        if dec.d == 0:
            clock.rounds += 1
            if clock.rounds >= clock.interval and remaining is not None and remaining < clock.interval:
                return Decision(0, "budget", dec.expected_tokens, dec.expected_rate,
                                dec.plain_rate, dec.rates)
            if clock.rounds >= clock.interval and self._probe_affordable():
                clock.rounds, clock.interval = 0, min(clock.interval * 2, self.probe_max)
                return self._probe_decision(source, dec)
        else:
            clock.rounds, clock.interval = 0, self.probe_first
        return dec

    def _no_gain(self, source: str, remaining, dec: Decision, costs_model: bool,
                 hold: bool = True) -> Decision:
        """d = 0, "no gain" (held for NO_GAIN_RECHECK rounds). Judged from the prompt's decodes
        alone (the draft model has not drafted yet), one probe per PROBE_MAX such rounds checks
        the estimate against a real draft."""
        clock = self._probe.setdefault(source, ProbeClock(0, self.probe_first))
        clock.rounds = clock.rounds + 1 if costs_model and not self.t_draft_rows.known else 0
        if clock.rounds >= self.probe_max and (remaining is None or remaining >= self.probe_max) \
                and self._probe_affordable():
            clock.rounds = 0
            self._held.pop(source, None)
            return self._probe_decision(source, dec)
        if not hold:
            return dec
        out = Decision(0, "no gain", dec.expected_tokens, dec.expected_rate, dec.plain_rate,
                       dec.rates)
        self._held[source] = Held(out, NO_GAIN_RECHECK - 1)
        return out

    def _probe_affordable(self) -> bool:
        """A due probe runs when the probes' measured net cost so far (their rounds' time less the
        plain rounds that would have committed the same tokens), with one more at their mean,
        stays within probe_share of the run's time; else it waits (still d = 0, "best")."""
        if self.n_probes == 0:
            return True
        return self.t_probes_net * (1 + 1 / self.n_probes) <= self.probe_share * self.t_run

    def _probe_decision(self, source: str, dec: Decision) -> Decision:
        d = min(self.probe_len, self.n_max)
        return Decision(d, "probe", expected_tokens(self.rates(source), d), dec.rates[d],
                        dec.plain_rate, dec.rates)

    # ---- measurements --------------------------------------------------------------------
    def observe_prefill(self, n_rows: int, t_target: float, t_draft: float | None = None) -> None:
        """The prompt's decodes: a start-up point for t_target (one sample among the rounds' at
        that size, whose median soon outvotes it), and, with the draft model's decode of the same
        rows (t_draft), the ratio that estimates the draft's costs until it has drafted."""
        if n_rows >= 2:
            self.t_target.add(n_rows, t_target)
        if t_draft is not None and t_draft > 0 and t_target > 0 and math.isfinite(t_draft):
            self.prefill_ratio = t_draft / t_target

    def observe_draft_decode(self, n_rows: int, seconds: float) -> None:
        self.t_draft_rows.add(n_rows, seconds)

    def update_candidate_strategy(self, ev) -> None:
        rows = sum(1 + len(r.draft) for r in ev.slots)
        t_tgt = ev.t_verify + ev.t_sample + ev.t_rollback + ev.t_process
        self.t_target.add(rows, t_tgt)
        if self.prior is not None and not self.t_draft_rows.measured:
            self.t_draft_rows.invalidate()        # its prior is rescaled as the target's
        self.t_run += ev.t_round
        if self._held and any(r.draft for r in ev.slots):
            self._held.clear()                    # new draft measurements: judge again
        if any(r.draft_len is not None and r.draft_len.reason in ("probe", "start-up") and r.draft
               for r in ev.slots):
            self.n_probes += 1
            self.t_probes += ev.t_round
            n = len(ev.slots)                     # a plain round: n rows, one token per slot
            plain = sum(len(r.committed) for r in ev.slots) / n * self.target_cost(n)
            self.t_probes_net += max(ev.t_round - plain, 0.0)
        for r in ev.slots:
            if r.replay or not r.draft:
                continue
            self.max_draft = max(self.max_draft, len(r.draft))
            self._acceptance(r.impl).observe(len(r.draft), r.n_accepted)

    def stats(self) -> dict:
        st = super().stats()
        st.update(n_probes=self.n_probes, t_probes_s=self.t_probes, t_probes_net_s=self.t_probes_net,
                  t_target={k: t for k, t in self.t_target.points()},
                  t_draft_rows={k: t for k, t in self.t_draft_rows.points()},
                  acceptance={s: a.rates(min(self.n_max, 8)) for s, a in self.acc.items()},
                  prior=self.prior.source if self.prior is not None else None)
        return st
