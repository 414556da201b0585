"""The speculative-simple loop for one or several sequences ("slots", as the server runs them).

`SpeculativeLoop` runs llama.cpp's speculative-simple round (examples/speculative-simple/
speculative-simple.cpp:162-342 @34af94cd; the bare :N below are lines of that file) and yields
one `RoundEvent` per round. It talks to the speculators only through the `Speculative` chain.
The invariants at the start of every round (:141-150) are:
  - the committed tokens sit at positions [0, n_past);   prompt == committed, len == n_past
  - id_last is the token at position n_past, sampled but not yet evaluated by either model
  - both KV caches hold exactly [0, n_past)
A round has four phases:
  1. draft     one chain call drafts for every slot with no replay pending (:170-213)
  2. verify    [id_last, draft...] of every slot at n_past, n_past+1, ... in ONE target batch,
               logits on every row, then the chain sees the batch (process) (:221-240)
  3. commit    the target's own sampler decides token by token (sample_and_accept_n), at least
               one token is committed, both memories drop the rejected tail (:258-262,
               292-337)
  4. restore   where the target memory cannot drop part of a sequence, its state was saved
               before verifying; on a partial acceptance it is restored, the sampler comes back
               from its clone and the approved tokens are the next round's draft (replay,
               :267-290). The draft memory's own checkpoint is DraftSimple's.

Counting, as llama.cpp counts (common_speculative_draft and common_speculative_accept,
common/speculative.cpp:2617-2696, 2698-2732 @34af94cd):
  - the chain's per-impl statistics: accept() after every committed round, to the last drafter
    (impl_last is kept, so rounds that drafted nothing add accept(0) calls); on the checkpoint
    path no accept() on the restored round and accept(a + 1) on its replay (the a accepted
    draft tokens and the target's replacement, re-verified). speculative-simple (:267-292) and
    llama-server (tools/server/server-context.cpp:3831-3864 @34af94cd) both count impl
    statistics so.
  - `n_drafted` / `n_accept`: the chain's totals of those statistics (n_gen_tokens,
    n_acc_tokens).
  - `summary()` prints speculative-simple's own counters (n_drafted += the verified draft's
    length, n_accept += accepted, per committed round: on a replay, a + 1 and a + 1).
    llama-server's slot statistics instead count d drafted and a accepted per draft, as the
    `specnb_*` breakdown in the impl statistics does.
n_predict (`stop_rule`): "exact", specnb's default, stops at exactly n_predict tokens, so speculative
and plain decoding compare token for token. "master" stops as speculative-simple at 34af94cd:
it runs while n_predict <= N (:339-341); each draft is cut to the budget N - n_predict - 1
(:180-184), and a budget of 0 means no cap (the `dp.n_max > 0` tests, common/speculative.cpp:350,
2659), so the last round drafts a full draft and the output has N + 1 tokens or, when that draft
is accepted, up to n_max more; its printed counters are then master's. "c392e50" stops as that
build did (the same `n_predict > N` test, speculative-simple.cpp:223 @c392e50) but has no
budget: every round drafts n_max.
The prompt's tokens enter each target sampler's penalty window (penalize_prompt, as llama-cli
and llama-server do; plain `generate` does the same); speculative-simple does not feed them.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..run.context import Batch, Context
from .draft_len import DraftLenPolicy, format_chosen
from ..errors import ContextFullError, ParamError, check_param
from .events import KvTrail, RoundEvent, SlotRound, timed
from ..run.generate import GenerationResult, check_n_predict, check_prompt
from ..run.sampling import Sampler, SamplerParams
from .impl import DraftParams
from .params import SpecParams
from .speculative import Speculative, build_speculative
from .verify import Verifier


@dataclass
class _Slot:
    seq: int
    sampler: Sampler
    n_predict: int
    prompt: list                      # committed tokens (prompt_tgt)
    id_last: int
    n_past: int
    generated: list = field(default_factory=list)
    accepted_flags: list = field(default_factory=list)   # per generated token: was a draft token
    draft: list = field(default_factory=list)            # this round's draft, or a pending replay
    done: bool = False
    stop_reason: str = ""             # "", "eog", "n_predict", "context_full"
    ckpt: object = None               # the target's saved state (ckpt.update_tgt)
    smpl_save: Sampler | None = None  # the sampler's clone taken with it


@dataclass
class SpecResult(GenerationResult):
    """A generation (run.generate's result) and what speculation did for it."""
    accepted: list = field(default_factory=list)   # per token: True when it came from an accepted
                                                   # draft token
    n_drafted: int = 0
    n_accept: int = 0
    n_rounds: int = 0
    stats: dict = field(default_factory=dict)

    @property
    def accept_rate(self) -> float:
        return self.n_accept / self.n_drafted if self.n_drafted else 0.0


STOP_RULES = ("exact", "master", "c392e50")


class SpeculativeLoop:
    """speculative-simple for one or several sequences, one RoundEvent per round.

    ctx_dft may be None when no type needs a draft model (the n-gram types); `chain`, a prebuilt
    `Speculative`, replaces the one built from `params`; `policy` replaces the chain's draft
    length policy (the chain is its only holder, so the draft model's timings reach it too),
    used as it was built (AutoDraftLen's keeps_rows); `costs_prior` (an auto_costs.CostPrior, from
    the machine's costs record: measure/costs.Costs.prior) gives `auto` every length's price from
    the first round.
    """

    def __init__(self, ctx_tgt: Context, ctx_dft: Context | None, prompts, n_predict: int,
                 sampler_params: SamplerParams | list | None = None,
                 params: SpecParams | None = None, draft_seed: int = 0,
                 chain: Speculative | None = None, penalize_prompt: bool = True,
                 policy: DraftLenPolicy | None = None, stop_rule: str = "exact", costs_prior=None):
        self.params = (params or SpecParams()).validate()
        self.n_predict = check_n_predict(n_predict)
        check_param(stop_rule in STOP_RULES, "stop_rule", stop_rule, " or ".join(STOP_RULES))
        self.stop_rule = stop_rule
        if prompts and isinstance(prompts[0], (int, np.integer)):
            prompts = [prompts]
        n_seq = len(prompts)
        check_param(1 <= n_seq <= ctx_tgt.n_seq_max, "number of prompts", n_seq,
                    f"1..n_seq_max={ctx_tgt.n_seq_max} of the target context")
        self.ctx_tgt, self.ctx_dft = ctx_tgt, ctx_dft
        self.vocab = ctx_tgt.model.vocab
        self.can_rm_tgt = ctx_tgt.partial_seq_rm
        if not isinstance(sampler_params, list):
            sampler_params = [sampler_params] * n_seq
        if len(sampler_params) != n_seq:
            raise ParamError(f"{len(sampler_params)} sampler settings for {n_seq} prompts")
        if chain is None:
            temp = max((sampler_params[0] or SamplerParams()).temp, 0.0)
            chain = build_speculative(self.params, ctx_tgt.model, ctx_dft, n_seq=ctx_tgt.n_seq_max,
                                      sample_draft=self.params.verify == "rejection", draft_temp=temp,
                                      seed=draft_seed, policy=policy, costs_prior=costs_prior)
        elif policy is not None:
            chain.policy = policy
        self.chain = chain
        synth = self.params.synth_probs()
        if synth is not None:
            warnings.warn("synthetic acceptance: drafts are accepted at random, so the output is "
                          "not valid text (for benchmarking the loop only)", stacklevel=2)
        self.verifier = Verifier(self.params.verify, synth, self.params.synth_seed, self.vocab)
        self.slots: list[_Slot] = []
        for s, prompt in enumerate(prompts):
            prompt = check_prompt(prompt, ctx_tgt)
            if ctx_dft is not None and len(prompt) > ctx_dft.n_ctx:
                raise ContextFullError(f"prompt of {len(prompt)} tokens does not fit in the draft "
                                       f"context (n_ctx={ctx_dft.n_ctx})")
            smpl = Sampler(sampler_params[s], ctx_tgt.model.n_vocab)
            if penalize_prompt:                # common_sampler_accept on every prompt token
                for t in prompt:
                    smpl.accept(t)
            self.slots.append(_Slot(seq=s, sampler=smpl, n_predict=self.n_predict, prompt=prompt[:-1],
                                    id_last=prompt[-1], n_past=len(prompt) - 1))
        self.n_prompt = [len(p) for p in prompts]
        self._totals0 = self._totals()
        self.n_rounds = 0
        self.n_drafted_simple = self.n_accept_simple = 0     # speculative-simple's own counters
        self.t_prompt = self.t_gen = 0.0
        self._started = False

    # ---- counters ------------------------------------------------------------------------
    def _totals(self) -> tuple[int, int]:
        st = self.chain.stats()
        return sum(s["n_gen_tokens"] for s in st), sum(s["n_acc_tokens"] for s in st)

    @property
    def n_drafted(self) -> int:
        """Draft tokens the chain proposed (its impls' n_gen_tokens)."""
        return self._totals()[0] - self._totals0[0]

    @property
    def n_accept(self) -> int:
        """Tokens credited as accepted (the impls' n_acc_tokens, llama.cpp's counting)."""
        return self._totals()[1] - self._totals0[1]

    @property
    def policy(self) -> DraftLenPolicy:
        """The chain's draft-length policy (--spec-draft-n-max N | auto | heuristic)."""
        return self.chain.policy

    def _kv_tgt(self, seq: int) -> int:
        return self.ctx_tgt.seq_pos_max(seq)

    def _kv_dft(self, seq: int) -> int:
        """The draft KV's last position, in the target's positions (the chain's answer: under
        `auto` a probe's windowed catch-up leaves rows out, deferred.py)."""
        if self.ctx_dft is None:
            return -1
        p = self.chain.pos_max(seq)
        return self.ctx_dft.seq_pos_max(seq) if p is None else p

    # ---- prefill -------------------------------------------------------------------------
    def _prefill(self) -> None:
        """Evaluate each prompt but its last token (the last is id_last); the chain sees it."""
        with timed(self, "t_prompt"):
            b = Batch()
            for sl in self.slots:
                self.ctx_tgt.seq_rm(sl.seq, -1, -1)
                self.chain.seq_rm(sl.seq, 0)
                for i, t in enumerate(sl.prompt):
                    b.add(t, i, sl.seq, False)
            if len(b):
                t0 = time.perf_counter()
                self.ctx_tgt.decode(b)
                t1 = time.perf_counter()
                self.chain.process(b)
                self.chain.observe_prefill(len(b), t1 - t0, time.perf_counter() - t1)
            for sl in self.slots:
                self.chain.begin(sl.seq, sl.prompt)
        self._started = True

    def prefill(self) -> None:
        """Evaluate the prompts now (rounds() and step() do it on first use): what follows is rounds
        only, as a caller timing them apart from the prompt wants."""
        if not self._started:
            self._prefill()

    def rounds(self):
        """Yield one RoundEvent per round until every slot is done."""
        if not self._started:
            self._prefill()
        while any(not sl.done for sl in self.slots):
            yield self.step()

    # ---- one round -------------------------------------------------------------------------
    def step(self) -> RoundEvent:
        """One round for every active slot: draft, verify, then commit or restore."""
        if not self._started:
            self._prefill()
        ev = RoundEvent(self.n_rounds, [])
        n_eval0 = self.chain.n_eval
        with timed(ev, "t_round"):
            active = [sl for sl in self.slots if not sl.done]
            recs = self._draft(active, ev)
            idxs = self._verify_batch(active, recs, ev)
            for sl in active:
                self._commit_or_restore(sl, recs[sl.seq], idxs[sl.seq], ev)
                ev.slots.append(recs[sl.seq])
        self.n_rounds += 1
        ev.n_dft_eval = self.chain.n_eval - n_eval0
        self.chain.update_candidate_strategy(ev)
        self.t_gen += ev.t_round
        return ev

    def _draft(self, active: list, ev: RoundEvent) -> dict:
        """Phase 1: one draft call for every slot with no replay pending (:170-213)."""
        dps = [DraftParams() for _ in range(self.chain.n_seq)]
        longest = self.chain.n_max
        for sl in active:
            if sl.draft:                       # a replay is pending: reuse it (:214-219)
                continue
            room = self.ctx_tgt.n_ctx - sl.n_past - 2                   # id_last + context shift
            n_draft_max = max(min(room, sl.n_predict - len(sl.generated) - 1), 0)
            if self.stop_rule == "master" and n_draft_max == 0 and room >= longest:
                n_draft_max = -1          # master: a budget of 0 caps nothing (context permitting)
            elif self.stop_rule == "c392e50":
                n_draft_max = max(room, 0)               # no n_predict budget there
            dps[sl.seq] = DraftParams(drafting=n_draft_max != 0, n_max=n_draft_max, n_past=sl.n_past,
                                      id_last=sl.id_last, prompt=sl.prompt, result=[],
                                      smpl=sl.sampler if self.params.verify == "rejection" else None)
        new = [sl for sl in active if not sl.draft]    # the slots that ask for a new draft
        remaining = min((sl.n_predict - len(sl.generated) for sl in new), default=None)
        with timed(ev, "t_draft"):
            self.chain.draft(dps, remaining)
        recs = {}
        for sl in active:
            rec = SlotRound(seq=sl.seq, n_past=sl.n_past, id_last=sl.id_last, draft=[],
                            replay=bool(sl.draft), kv_tgt=KvTrail(self._kv_tgt(sl.seq)),
                            kv_dft=KvTrail(self._kv_dft(sl.seq)))
            if not rec.replay:
                sl.draft = list(dps[sl.seq].result)
                rec.impl, rec.draft_info = self.chain.drafted_by(sl.seq), self.chain.draft_info(sl.seq)
                rec.draft_len = self.chain.record_length(sl.seq)    # the policy's decision, if any
                with timed(ev, "t_draft"):
                    self.chain.before_verify(sl.seq, sl.n_past)    # undo draft()'s decodes
                if sl.draft and not self.can_rm_tgt:                # ckpt.update_tgt (:200-204)
                    sl.ckpt, sl.smpl_save = self.ctx_tgt.state_seq_get(sl.seq), sl.sampler.clone()
                    rec.checkpoint = "saved"
            rec.draft = list(sl.draft)
            recs[sl.seq] = rec
        return recs

    def _verify_batch(self, active: list, recs: dict, ev: RoundEvent) -> dict:
        """Phase 2: [id_last, draft...] of every slot in one target batch, then process (:221-240)."""
        batch, idxs = Batch(), {}
        for sl in active:
            idxs[sl.seq] = list(range(len(batch), len(batch) + len(sl.draft) + 1))
            batch.add(sl.id_last, sl.n_past, sl.seq, True)
            for i, d in enumerate(sl.draft):
                batch.add(d, sl.n_past + 1 + i, sl.seq, True)
            recs[sl.seq].batch_pos = list(range(sl.n_past, sl.n_past + 1 + len(sl.draft)))
        with timed(ev, "t_verify"):
            self.ctx_tgt.decode(batch)
        with timed(ev, "t_process"):
            self.chain.process(batch)
        for sl in active:
            rec = recs[sl.seq]
            rec.kv_tgt = rec.kv_tgt._replace(verified=self._kv_tgt(sl.seq))
            rec.kv_dft = rec.kv_dft._replace(verified=self._kv_dft(sl.seq))
        return idxs

    def _commit_or_restore(self, sl: _Slot, rec: SlotRound, idxs: list, ev: RoundEvent) -> None:
        """Phases 3 and 4 for one slot: the target decides, then commit or restore (:258-342)."""
        with timed(ev, "t_sample"):
            q_rows = None if rec.replay else self.chain.draft_dists(sl.seq)
            ids, rec.target_p = self.verifier(sl.sampler, self.ctx_tgt, sl.draft, idxs, rec.replay,
                                            q_rows, sl.seq)
        rec.ids, rec.n_accepted = ids, len(ids) - 1
        with timed(ev, "t_rollback"):
            if not rec.replay:
                self.chain.record(sl.seq, rec.n_accepted)
            if rec.n_accepted < len(sl.draft) and sl.ckpt is not None and not rec.replay:
                self._restore(sl, rec, ids)
                return
            self.chain.accept(sl.seq, rec.n_accepted)          # (:292)
            self.n_drafted_simple += len(sl.draft)             # (:296-297)
            self.n_accept_simple += rec.n_accepted
            self._commit(sl, rec, ids)

    def _restore(self, sl: _Slot, rec: SlotRound, ids: list) -> None:
        """Phase 4: back to the checkpoint; the approved ids are the next draft (:267-290)."""
        self.ctx_tgt.state_seq_set(sl.seq, sl.ckpt)            # ckpt.load_tgt
        self.chain.seq_rm(sl.seq, sl.n_past)                   # ckpt.load_dft
        sl.sampler = sl.smpl_save
        sl.draft = list(ids)
        rec.checkpoint = "restored"
        self._kv_after(sl, rec)

    def _commit(self, sl: _Slot, rec: SlotRound, ids: list) -> None:
        """Phase 3's end: commit the ids, drop the rejected tail from both memories (:295-337)."""
        n_from_draft = max(len(ids) - 2, 0) if rec.replay else rec.n_accepted
        sl.draft, sl.ckpt, sl.smpl_save = [], None, None
        for i, tok in enumerate(ids):           # n_past += 1 per id, id_last = the newest
            sl.prompt.append(sl.id_last)
            sl.id_last = tok
            sl.n_past += 1
            sl.generated.append(tok)
            sl.accepted_flags.append(i < n_from_draft)
            rec.committed.append(tok)
            if self.vocab.is_eog(tok):
                sl.done, sl.stop_reason = True, "eog"
                break
            if self.stop_rule == "exact" and len(sl.generated) >= sl.n_predict:   # exactly n_predict
                sl.done, sl.stop_reason = True, "n_predict"
                break
        if self.stop_rule != "exact" and not sl.done and len(sl.generated) > sl.n_predict:   # (:339)
            sl.done, sl.stop_reason = True, "n_predict"
        if not sl.done and sl.n_past >= self.ctx_tgt.n_ctx:   # id_last has no cell left
            sl.done, sl.stop_reason = True, "context_full"
        self.ctx_tgt.seq_rm(sl.seq, sl.n_past, -1)
        self.chain.seq_rm(sl.seq, sl.n_past)
        self._kv_after(sl, rec)
        rec.stop_reason = sl.stop_reason

    def _kv_after(self, sl: _Slot, rec: SlotRound) -> None:
        rec.kv_tgt = rec.kv_tgt._replace(after=self._kv_tgt(sl.seq))
        rec.kv_dft = rec.kv_dft._replace(after=self._kv_dft(sl.seq))

    # ---- results ---------------------------------------------------------------------------
    def run(self, on_round=None) -> list[SpecResult]:
        for ev in self.rounds():
            if on_round:
                on_round(ev)
        return self.results()

    def results(self) -> list[SpecResult]:
        st = self.chain.main_stats()
        return [SpecResult(tokens=sl.generated, text=self.vocab.detokenize(sl.generated),
                           accepted=sl.accepted_flags, n_prompt=self.n_prompt[sl.seq],
                           n_drafted=self.n_drafted, n_accept=self.n_accept, n_rounds=self.n_rounds,
                           t_prompt_s=self.t_prompt, t_gen_s=self.t_gen, stop_reason=sl.stop_reason,
                           stats=st)
                for sl in self.slots]

    def summary(self) -> str:
        """The speculative-simple summary (speculative-simple.cpp:354-358), with its counters."""
        n_pred = sum(len(sl.generated) for sl in self.slots)
        # nothing drafted: master divides 0 by 0 in float (:358), and glibc prints x86's default
        # NaN, whose sign bit is set, as -nan
        rate = f"{100.0 * self.n_accept_simple / self.n_drafted_simple:.3f}" if self.n_drafted_simple else "-nan"
        return (f"n_draft   = {self.params.draft_max}\nn_predict = {n_pred}\nn_drafted = {self.n_drafted_simple}\n"
                f"n_accept  = {self.n_accept_simple}\naccept    = {rate}%\n"
                + {"master": f"(stop as llama-speculative-simple at 34af94cd: one round past "
                             f"n_predict = {self.n_predict}, the last draft uncapped)",
                   "c392e50": f"(stop as llama-speculative-simple at c392e50: one round past "
                              f"n_predict = {self.n_predict}, no draft budget)",
                   "exact": f"(specnb stops at exactly n_predict tokens, so speculative output "
                            f"compares token for token with plain decoding; llama-speculative-simple "
                            f"runs one round more, prints n_predict >= {self.n_predict + 1} and "
                            f"counts that round's draft too: --stop master prints its counts)"}[self.stop_rule]
                + ("" if self.params.schedule == "fixed" else "\n" + format_chosen(self.policy.stats())))
