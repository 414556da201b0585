"""The speculator chain (common_speculative) and its parameters (common_params_speculative).

Behaviour as llama.cpp master 34af94cd, common/speculative.cpp:
  - `--spec-type` takes a comma-separated list of types; common_speculative_init (:2455-2572)
    builds one impl per type in a fixed priority order, whatever order was typed: the n-gram
    lookups first (they cost nothing; when one drafts, the draft model never runs), then the
    draft models.
  - common_speculative_draft (:2617-2696) walks the impls; the first that fills a sequence's
    result clears its `drafting` flag, so later impls skip it; an empty result falls through to
    the next impl. A draft longer than the round's budget dp.n_max is cut to it.
  - impl_last[seq] remembers who drafted last; common_speculative_accept (:2698-2733) credits
    that impl (is_other = false) and tells the others (is_other = true). impl_last is kept
    between rounds, so a round that drafts nothing still counts an accept(0) call for the last
    drafter.
`SpecParams` (params.py) carries speculative-simple's flags; `build_speculative` is
common_speculative_init.

specnb's one addition is the draft-length policy (draft_len.py), held here and nowhere else, and
fed in one direction: before the impls draft, `draft(dps, n_remaining)` asks it for this round's
length per impl type, telling it which impls' drafts cost a model and how many rows the draft
model is behind (master cuts every draft to a fixed n_max: FixedDraftLen); each impl then drafts
from its own copy of the DraftParams, cut to its length. After the walk the chain hands it the
draft model's decode times, and after each round the loop hands it the round
(`update_candidate_strategy`, shaped like transformers' AssistedCandidateGenerator hook of that
name). Under `auto`, and with --no-reeval, the draft model is a `DeferredDraftSimple`
(deferred.py).
"""
from __future__ import annotations

import time
from dataclasses import replace

from .auto import AutoDraftLen
from .auto_costs import CostPrior
from .deferred import DeferredDraftSimple
from .draft_len import SCHEDULES, DraftLenPolicy, FixedDraftLen, HeuristicDraftLen
from .draft_simple import DraftSimple
from ..errors import ParamError
from .ngram import NgramMapK, NgramMapK4V, NgramSimple
from .ngram_cache import NgramCache
from .ngram_mod import NgramMod
from .impl import DraftParams, SpeculativeImpl, format_impl_stats, impl_stats
from .params import NGRAM_CACHE_N_DRAFT, PRIORITY, SpecParams


def make_policy(schedule: str, n_max: int, keeps_rows: bool = False,
                costs_prior: CostPrior | None = None) -> DraftLenPolicy:
    """The draft-length policy of a schedule (draft_len.py); keeps_rows: the draft model keeps the
    rows it computed while drafting (--no-reeval on a memory that can drop part of a sequence),
    which `auto` prices; costs_prior: what the machine's costs record says of the pair (auto_costs:
    `auto` then drafts from the first round, every length priced)."""
    if schedule == "auto":
        return AutoDraftLen(n_max, keeps_rows=keeps_rows, prior=costs_prior)
    if schedule == "heuristic":
        return HeuristicDraftLen(n_max)
    if schedule == "fixed":
        return FixedDraftLen(n_max)
    raise ParamError(f"unknown draft schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")


def build_speculative(p: SpecParams, target, ctx_dft, n_seq: int = 1, sample_draft: bool = False,
                      draft_temp: float = 1.0, seed: int = 0, policy: DraftLenPolicy | None = None,
                      costs_prior: CostPrior | None = None) -> "Speculative":
    """common_speculative_init: one impl per requested type, in priority order, and the draft
    length policy of p.schedule (or `policy`; `costs_prior` for `auto`: make_policy)."""
    keeps_rows = not p.reeval and ctx_dft is not None and bool(ctx_dft.partial_seq_rm)
    policy = policy or make_policy(p.schedule, p.n_max, keeps_rows, costs_prior)
    impls = []
    for t in p.resolved_types(ctx_dft is not None):
        if t == "draft-simple":
            if ctx_dft is None:
                raise ParamError("speculative type 'draft-simple' needs a draft model (-md) and a "
                                 "draft context; the n-gram types need neither")
            kw = dict(n_seq=n_seq, n_max=p.n_max, n_min=p.n_min, p_min=p.p_min, reeval=p.reeval,
                      sample_draft=sample_draft, draft_temp=draft_temp, seed=seed,
                      draft_vocab=p.draft_vocab)
            # the draft memory catches up in its next seed batch under `auto`, and wherever it
            # keeps its rows (--no-reeval); master's re-evaluation replays each batch at once
            deferred = policy.schedule == "auto" or not p.reeval
            impls.append((DeferredDraftSimple if deferred else DraftSimple)(target, ctx_dft, **kw))
        elif t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            # not cut to --spec-draft-n-max: master drafts up to the m-gram size
            cls = {"ngram-simple": NgramSimple, "ngram-map-k": NgramMapK, "ngram-map-k4v": NgramMapK4V}[t]
            impls.append(cls(n_seq=n_seq, **p.ngram_knobs(t)))
        elif t == "ngram-mod":
            impls.append(NgramMod(n_seq=n_seq, n_match=int(p.ngram_mod_n_match),
                                  n_min=int(p.ngram_mod_n_min), n_max=int(p.ngram_mod_n_max)))
        elif t == "ngram-cache":
            impls.append(NgramCache(n_seq, n_max=NGRAM_CACHE_N_DRAFT, static_path=p.lookup_cache_static,
                                    dynamic_path=p.lookup_cache_dynamic, n_vocab=target.n_vocab))
    return Speculative(impls, n_seq=n_seq, policy=policy)


def _priority(impl) -> int:
    return PRIORITY.index(impl.type) if impl.type in PRIORITY else len(PRIORITY)


class Speculative:
    """common_speculative: the impls in priority order, impl_last per sequence, and specnb's
    draft-length policy (FixedDraftLen: master's fixed n_max)."""

    def __init__(self, impls: list[SpeculativeImpl], n_seq: int = 1,
                 policy: DraftLenPolicy | None = None):
        self.impls = sorted(impls, key=_priority)
        self.n_seq = n_seq
        self.impl_last: list[SpeculativeImpl | None] = [None] * n_seq
        self.impl_round: list[SpeculativeImpl | None] = [None] * n_seq   # drafted this round
        self._info: list[list] = [[] for _ in range(n_seq)]
        self.policy = policy or FixedDraftLen(max((i.n_max for i in self.impls), default=0))
        self._lengths: dict | None = None     # this round's {impl type: Decision}, or None

    @property
    def types(self) -> list[str]:
        return [impl.type for impl in self.impls]

    @property
    def n_max(self) -> int:
        """The longest draft any impl may make (0 without impls)."""
        return max((impl.n_max for impl in self.impls), default=0)

    def impl_of(self, type_: str) -> SpeculativeImpl | None:
        return next((i for i in self.impls if i.type == type_), None)

    # ---- llama.cpp's lifecycle (common_speculative_begin / process / draft / accept) -------
    def begin(self, seq: int, prompt) -> None:
        for impl in self.impls:
            t0 = time.perf_counter()
            impl.begin(seq, prompt)
            impl.n_call_begin += 1
            impl.t_begin_us += (time.perf_counter() - t0) * 1e6

    def process(self, batch) -> bool:
        ok = True
        for impl in self.impls:
            ok = impl.process(batch) and ok
        return ok

    def draft(self, dps: list[DraftParams], n_remaining: int | None = None) -> None:
        """common_speculative_draft: the first impl that fills a sequence's result wins it.

        specnb: with `n_remaining` (the fewest tokens any new draft's sequence still has to
        generate; None: no sequence asks for a new draft, e.g. every one replays) the policy
        first chooses this round's length per impl type, and each impl drafts from its own copy
        of the requests, cut to its length (`_walk`); a length of 0 skips that impl."""
        self.impl_round, self._info = [None] * self.n_seq, [[] for _ in range(self.n_seq)]
        self._lengths = None
        if self.impls and n_remaining is not None:
            self._lengths = self.policy.lengths({impl.type: impl.costs_model for impl in self.impls},
                                                n_remaining, max(impl.behind() for impl in self.impls))
        for dp in dps:
            if dp.drafting:
                dp.result.clear()
        if not any(dp.drafting for dp in dps):
            return
        for impl, dparams in self._walk(dps):
            t0 = time.perf_counter()
            try:
                impl.draft(dparams)
            finally:            # a draft whose decode failed is counted too, as master counts
                impl.t_draft_us += (time.perf_counter() - t0) * 1e6    # it (speculative.cpp:
                impl.n_call_draft += 1                                 # 2643-2644 after :300-304)
            n_drafting = 0
            for s, dp in enumerate(dparams):
                if not dp.drafting:
                    continue
                info = impl.draft_info(s)
                if dp.result:                                   # a new draft has been sampled
                    dp.drafting = dps[s].drafting = False
                    if 0 < dp.n_max < len(dp.result):           # "truncating draft to %d tokens"
                        del dp.result[dp.n_max:]
                        info = info[:dp.n_max]
                    self.impl_last[s] = self.impl_round[s] = impl     # remember which impl was used
                    impl.n_gen_drafts += 1
                    impl.n_gen_tokens += len(dp.result)
                    self._info[s] = info
                else:
                    self._info[s] += info                       # e.g. the draft model's p_min stop
                if dp.drafting:
                    n_drafting += 1
            if n_drafting == 0:
                break
        for dp in dps:                                          # these failed to draft
            dp.drafting = False
        for impl in self.impls:
            for rows, seconds in impl.take_decodes():
                self.policy.observe_draft_decode(rows, seconds)

    def _walk(self, dps: list[DraftParams]):
        """The impls in priority order, each with the requests it drafts from: `dps` itself when
        the length is fixed; under a draft-length policy a copy per impl, made when the walk
        reaches it (so a sequence an earlier impl drafted is no longer drafting there), each
        request's n_max cut to the impl's length and its catch-up window set; an impl whose
        length is 0 sits the round out (specnb's: master cuts every draft to one n_max)."""
        for impl in self.impls:
            if self._lengths is None:
                yield impl, dps
                continue
            dec = self._lengths[impl.type]
            if dec.d <= 0:
                continue
            yield impl, [replace(dp, n_max=min(dp.n_max, dec.d) if dp.n_max >= 0 else dec.d,
                                 catch_up_window=dec.catch_up_window) for dp in dps]

    def accept(self, seq: int, n_accepted: int) -> None:
        """common_speculative_accept: credit the impl that drafted this sequence last."""
        impl = self.impl_last[seq]
        if impl is None:
            assert n_accepted == 0, "accepted tokens without a draft"
            return
        t0 = time.perf_counter()
        if len(impl.n_acc_tokens_per_pos) < n_accepted:
            impl.n_acc_tokens_per_pos += [0] * (n_accepted - len(impl.n_acc_tokens_per_pos))
        for i in range(n_accepted):
            impl.n_acc_tokens_per_pos[i] += 1
        if n_accepted > 0:
            impl.n_acc_drafts += 1
            impl.n_acc_tokens += n_accepted
        impl.accept(seq, n_accepted, False)
        impl.n_call_accept += 1
        impl.t_accept_us += (time.perf_counter() - t0) * 1e6
        for other in self.impls:
            if other is not impl:
                other.accept(seq, n_accepted, True)

    def get_state(self, seq: int) -> dict:
        """common_speculative_get_state, for every impl that has a state: {type: state}."""
        return {impl.type: st for impl in self.impls if (st := impl.get_state(seq)) is not None}

    def set_state(self, seq: int, state: dict) -> None:
        for impl in self.impls:
            impl.set_state(seq, (state or {}).get(impl.type))

    # ---- specnb's hooks -------------------------------------------------------------------
    def record(self, seq: int, n_accepted: int) -> None:
        """specnb's per-draft breakdown: this round's draft of seq had n_accepted tokens kept."""
        impl = self.impl_round[seq]
        if impl is None:
            return
        impl.n_acc_draft_tokens += n_accepted
        for i in range(min(n_accepted, len(impl.n_acc_draft_per_pos))):
            impl.n_acc_draft_per_pos[i] += 1

    def drafted_by(self, seq: int) -> str:
        """The type of the impl that drafted seq's draft this round ("" for none)."""
        impl = self.impl_round[seq]
        return impl.type if impl is not None else ""

    def draft_info(self, seq: int) -> list:
        """Per-token info of seq's draft this round (.token, .source, ...)."""
        return list(self._info[seq])

    def draft_dists(self, seq: int) -> list | None:
        """The distributions seq's draft was sampled from, or None for a deterministic draft."""
        impl = self.impl_round[seq]
        return impl.draft_dists(seq) if impl is not None else None

    def record_length(self, seq: int):
        """Count the policy's Decision that applied to seq's draft this round (the drafter's, or
        the last impl's when none drafted) in the policy's statistics, and return it; None when
        the length was not chosen this round (a fixed n_max, or a replay)."""
        if self._lengths is None:
            return None
        dec = self._lengths.get(self.drafted_by(seq)) or self._lengths[self.types[-1]]
        self.policy.record(dec)
        return dec

    def pos_max(self, seq: int) -> int | None:
        """The last position of seq in a draft model's memory, in the target's positions (None
        when no impl keeps a memory)."""
        held = [p for impl in self.impls if (p := impl.pos_max(seq)) is not None]
        return max(held) if held else None

    def needs_draft_model(self) -> bool:
        """Some impl runs a draft model."""
        return any(impl.costs_model for impl in self.impls)

    # ---- the draft-length policy's hooks (specnb) ------------------------------------------
    def observe_prefill(self, n_rows: int, t_target: float, t_process: float) -> None:
        """The prompt's decodes: the target's, and this chain's process() of them (the draft
        model's decode when one is in the chain)."""
        self.policy.observe_prefill(n_rows, t_target, t_process if self.needs_draft_model() else None)

    def update_candidate_strategy(self, ev) -> None:
        """After a round (transformers' AssistedCandidateGenerator.update_candidate_strategy):
        the policy reads what the round measured."""
        self.policy.update_candidate_strategy(ev)

    def main_stats(self) -> dict:
        """impl_stats of the draft-model impl, else of the first impl ({} without one)."""
        main = next((i for i in self.impls if i.costs_model), self.impls[0] if self.impls else None)
        return impl_stats(main) if main is not None else {}

    def before_verify(self, seq: int, n_past: int) -> None:
        for impl in self.impls:
            impl.before_verify(seq, n_past)

    def seq_rm(self, seq: int, p0: int) -> None:
        for impl in self.impls:
            impl.seq_rm(seq, p0)

    @property
    def n_eval(self) -> int:
        return sum(impl.n_eval for impl in self.impls)

    # ---- statistics ------------------------------------------------------------------------
    def stats(self) -> list[dict]:
        return [impl_stats(impl) for impl in self.impls]

    def print_stats(self) -> str:
        """common_speculative_print_stats: one `statistics <type>:` block per impl."""
        return "\n".join(format_impl_stats(s) for s in self.stats())
