"""Plain decoding and the speculative-simple loop (examples/speculative-simple, server slots).

`generate` is plain autoregressive decoding: decode the prompt, then one token per decode.

`SpeculativeLoop` is llama.cpp's speculative-simple round, for one or several sequences
("slots", as the server runs them), yielding one `RoundEvent` per round. The invariants at the
start of every round (speculative-simple.cpp:141-152) are:
  - the committed tokens sit at positions [0, n_past);   prompt == committed, len == n_past
  - id_last is the token at position n_past, sampled but not yet evaluated by either model
  - both KV caches hold exactly [0, n_past)
A round drafts from id_last, evaluates [id_last, draft...] at n_past, n_past+1, ... in ONE
target batch (all slots together), lets the target's own sampler decide token by token
(sample_and_accept_n), commits at least one token, and rolls both caches back past the first
rejection with seq_rm. Where the target memory cannot drop part of a sequence, it saves both
contexts' state before verifying and, on a partial acceptance, restores it, restores the
sampler from its clone and resubmits the approved tokens as the next round's draft (replay).
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from .context import Batch, Context
from .errors import ContextFullError, ParamError, check_param
from .sampling import Sampler, SamplerParams, sample_and_accept_n
from .speculative import DraftParams, DraftSimple, Speculative, impl_stats

VERIFY_MODES = ("exact", "rejection")


# ---- plain decoding -------------------------------------------------------------------------
@dataclass
class GenerationResult:
    tokens: list
    text: str
    n_prompt: int
    t_prompt_s: float
    t_gen_s: float
    stop_reason: str          # "eog", "n_predict" or "context_full"
    message: str = ""

    @property
    def tok_per_s(self) -> float:
        return len(self.tokens) / self.t_gen_s if self.t_gen_s > 0 else 0.0


def check_prompt(prompt, ctx: Context) -> list:
    """The prompt as a list of ints; it must hold at least one token and fit in the context."""
    try:
        prompt = [int(t) for t in prompt]
    except (TypeError, ValueError):
        raise ParamError(f"invalid prompt {prompt!r:.80}: expected a sequence of token ids") from None
    if not prompt:
        raise ParamError("the prompt is empty: it needs at least one token")
    if len(prompt) > ctx.n_ctx:
        raise ContextFullError(f"prompt of {len(prompt)} tokens is longer than the context "
                               f"(n_ctx={ctx.n_ctx})")
    bad = [t for t in prompt if not 0 <= t < ctx.model.n_vocab]
    if bad:
        raise ParamError(f"prompt token id {bad[0]} is outside the vocab [0, {ctx.model.n_vocab})")
    return prompt


def generate(ctx: Context, sampler: Sampler, prompt, n_predict: int, seq: int = 0,
             on_token=None) -> GenerationResult:
    """Plain decoding: the baseline speculative decoding must reproduce token for token."""
    check_param(isinstance(n_predict, (int, np.integer)) and n_predict >= 1,
                "n_predict", n_predict, "an integer >= 1")
    prompt = check_prompt(prompt, ctx)
    vocab = ctx.model.vocab
    ctx.seq_rm(seq, -1, -1)
    t0 = time.perf_counter()
    ctx.decode(Batch.from_tokens(prompt, 0, seq, "last"))
    t1 = time.perf_counter()
    n_past, out, idx, stop, msg = len(prompt), [], len(prompt) - 1, "n_predict", ""
    while True:
        tok = sampler.sample(ctx, idx)
        sampler.accept(tok)
        out.append(tok)
        if on_token:
            on_token(tok)
        if vocab.is_eog(tok):
            stop = "eog"
            break
        if len(out) >= n_predict:
            break
        if n_past >= ctx.n_ctx:
            stop, msg = "context_full", f"stopped: the context is full (n_ctx={ctx.n_ctx})"
            break
        ctx.decode(Batch().add(tok, n_past, seq, True))
        n_past, idx = n_past + 1, 0
    t2 = time.perf_counter()
    return GenerationResult(out, vocab.detokenize(out), len(prompt), t1 - t0, t2 - t1, stop, msg)


# ---- speculative decoding -------------------------------------------------------------------
@dataclass
class SpecParams:
    """The knobs of speculative-simple (common_params_speculative)."""
    n_max: int = 3            # --draft-max
    n_min: int = 0            # --draft-min
    p_min: float = 0.0        # --draft-p-min
    reeval: bool = True       # llama.cpp's draft re-evaluation; False: keep the draft's KV rows
    verify: str = "exact"     # "exact" (llama.cpp) or "rejection" (Leviathan / Chen)
    synth_rates: list | None = None   # --spec-synth-rates: unconditional acceptance per position
    synth_len: float | None = None    # --spec-synth-len: mean accepted length L
    synth_seed: int = 0

    def validate(self) -> "SpecParams":
        check_param(isinstance(self.n_max, (int, np.integer)) and 0 <= self.n_max <= 256,
                    "draft_max", self.n_max, "an integer in [0, 256]")
        check_param(isinstance(self.n_min, (int, np.integer)) and 0 <= self.n_min <= max(self.n_max, 0),
                    "draft_min", self.n_min, f"an integer in [0, draft_max={self.n_max}]")
        check_param(isinstance(self.p_min, (int, float)) and 0.0 <= self.p_min <= 1.0,
                    "draft_p_min", self.p_min, "a number in [0, 1]")
        check_param(self.verify in VERIFY_MODES, "verify", self.verify, " or ".join(VERIFY_MODES))
        check_param(self.synth_rates is None or self.synth_len is None, "synth_len",
                    self.synth_len, "not given together with synth_rates")
        return self

    def synth_probs(self) -> list | None:
        """Conditional acceptance probability per draft position, or None (real verification)."""
        if self.synth_rates is not None:
            return synth_rates_resolve(self.synth_rates, self.n_max)
        if self.synth_len is not None:
            return [synth_len_to_p(self.synth_len, self.n_max)] * self.n_max
        return None


def synth_rates_resolve(rates, n_max: int) -> list:
    """common_speculative_synth_rates_resolve: unconditional rates -> conditional per position."""
    try:
        rates = [float(r) for r in rates]
    except (TypeError, ValueError):
        raise ParamError(f"invalid synth_rates={rates!r}: expected a list of numbers") from None
    if not rates:
        raise ParamError("invalid synth_rates=[]: expected at least one rate")
    for i, r in enumerate(rates):
        check_param(math.isfinite(r) and 0.0 <= r <= 1.0, f"synth_rates[{i}]", r,
                    "a finite number in [0, 1]")
        if i and r > rates[i - 1]:
            raise ParamError(f"invalid synth_rates={rates}: rate {r} at position {i} is larger than "
                             f"{rates[i - 1]} before it (unconditional rates must not increase)")
    rates = (rates + [rates[-1]] * n_max)[:n_max] if len(rates) < n_max else rates[:n_max]
    cond, prev = [], 1.0
    for r in rates:
        cond.append(r / prev if prev > 0 else 0.0)
        prev = r
    return cond


def synth_len_to_p(L: float, k: int) -> float:
    """The constant conditional p with p + p^2 + ... + p^k = L - 1, by bisection."""
    check_param(isinstance(L, (int, float)) and math.isfinite(L) and 1.0 <= L <= k + 1,
                "synth_len", L, f"a number in [1, draft_max + 1 = {k + 1}]")
    if k == 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(1, k + 1)) < L - 1:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass
class SlotRound:
    """What happened to one sequence in one round (the facts the widgets and tests read)."""
    seq: int
    n_past: int                       # at the start of the round: position of id_last
    id_last: int
    draft: list                       # tokens verified this round (the replayed ids on replay)
    draft_info: list                  # DraftTokenInfo per drafted token (empty on replay)
    batch_pos: list                   # positions of this slot's verification rows
    ids: list                         # target samples: committed ids (len >= 1)
    n_accepted: int                   # draft tokens accepted (len(ids) - 1 when not truncated)
    target_p: list                    # target probability of each sampled id
    committed: list                   # ids actually committed (cut at EOG / n_predict)
    kv_tgt: tuple                     # (pos_max before verify, after decode, after rollback)
    kv_dft: tuple                     # (after drafting, after process, after rollback)
    replay: bool = False              # this round re-verifies approved tokens (checkpoint path)
    checkpoint: str = ""              # "", "saved", "restored"
    stop: str = ""                    # "", "eog", "n_predict", "context_full"


@dataclass
class RoundEvent:
    round: int
    slots: list                       # SlotRound per active slot
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_process: float = 0.0
    t_sample: float = 0.0
    t_rollback: float = 0.0
    t_round: float = 0.0
    n_dft_eval: int = 0               # draft-context token evaluations this round

    @property
    def slot(self) -> SlotRound:
        return self.slots[0]


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
    draft: list = field(default_factory=list)            # pending replay
    done: bool = False
    stop: str = ""
    ckpt: tuple | None = None
    smpl_save: Sampler | None = None


@dataclass
class SpecResult:
    tokens: list
    text: str
    accepted: list            # per token: True when it came from an accepted draft token
    n_prompt: int
    n_drafted: int
    n_accept: int
    n_rounds: int
    t_prompt_s: float
    t_gen_s: float
    stop_reason: str
    stats: dict

    @property
    def accept_rate(self) -> float:
        return self.n_accept / self.n_drafted if self.n_drafted else 0.0


class SpeculativeLoop:
    """speculative-simple for one or several sequences, one RoundEvent per round."""

    def __init__(self, ctx_tgt: Context, ctx_dft: Context, prompts, n_predict: int,
                 sampler_params: SamplerParams | list | None = None,
                 spec: SpecParams | None = None, draft_seed: int = 0):
        self.p = (spec or SpecParams()).validate()
        check_param(isinstance(n_predict, (int, np.integer)) and n_predict >= 1,
                    "n_predict", n_predict, "an integer >= 1")
        if prompts and isinstance(prompts[0], (int, np.integer)):
            prompts = [prompts]
        n_seq = len(prompts)
        check_param(1 <= n_seq <= ctx_tgt.n_seq_max, "number of prompts", n_seq,
                    f"1..n_seq_max={ctx_tgt.n_seq_max} of the target context")
        self.ctx_tgt, self.ctx_dft = ctx_tgt, ctx_dft
        self.vocab = ctx_tgt.model.vocab
        self.n_predict = int(n_predict)
        self.can_rm_tgt = ctx_tgt.partial_seq_rm
        self.can_rm_dft = ctx_dft.partial_seq_rm
        reeval = self.p.reeval or not self.can_rm_dft
        self.impl = DraftSimple(ctx_tgt.model, ctx_dft, n_seq=ctx_tgt.n_seq_max, n_max=self.p.n_max,
                                n_min=self.p.n_min, p_min=self.p.p_min, reeval=reeval,
                                sample_draft=self.p.verify == "rejection", seed=draft_seed)
        self.spec = Speculative([self.impl], n_seq=ctx_tgt.n_seq_max)
        if not isinstance(sampler_params, list):
            sampler_params = [sampler_params] * n_seq
        if len(sampler_params) != n_seq:
            raise ParamError(f"{len(sampler_params)} sampler settings for {n_seq} prompts")
        if self.p.verify == "rejection":
            self.impl.draft_temp = max((sampler_params[0] or SamplerParams()).temp, 0.0)
        self.synth = self.p.synth_probs()
        if self.synth is not None:
            warnings.warn("synthetic acceptance: drafts are accepted at random, so the output is "
                          "not valid text (for benchmarking the loop only)", stacklevel=2)
        self.synth_rng = np.random.Generator(np.random.PCG64(self.p.synth_seed))
        self.slots: list[_Slot] = []
        for s, prompt in enumerate(prompts):
            prompt = check_prompt(prompt, ctx_tgt)
            if len(prompt) > ctx_dft.n_ctx:
                raise ContextFullError(f"prompt of {len(prompt)} tokens does not fit in the draft "
                                       f"context (n_ctx={ctx_dft.n_ctx})")
            smpl = Sampler(sampler_params[s], ctx_tgt.model.n_vocab)
            self.slots.append(_Slot(s, smpl, self.n_predict, prompt[:-1], prompt[-1], len(prompt) - 1))
        self.n_prompt = [len(p) for p in prompts]
        self.n_drafted = self.n_accept = self.n_rounds = 0
        self.t_prompt = self.t_gen = 0.0
        self._started = False

    # ---- prefill ------------------------------------------------------------------------
    def _prefill(self) -> None:
        """Evaluate each prompt but its last token on both models (the last is id_last)."""
        t0 = time.perf_counter()
        for ctx in (self.ctx_tgt, self.ctx_dft):
            for sl in self.slots:
                ctx.seq_rm(sl.seq, -1, -1)
        b = Batch()
        for sl in self.slots:
            for i, t in enumerate(sl.prompt):
                b.add(t, i, sl.seq, False)
        if len(b):
            self.ctx_tgt.decode(b)
            self.spec.process(b)     # the draft sees every target batch
        for sl in self.slots:
            self.spec.begin(sl.seq, sl.prompt)
        self.t_prompt = time.perf_counter() - t0

    # ---- one round -----------------------------------------------------------------------
    def rounds(self):
        """Yield one RoundEvent per round until every slot is done."""
        if not self._started:
            self._prefill()
            self._started = True
        while any(not sl.done for sl in self.slots):
            ev = self.step()
            yield ev

    def step(self) -> RoundEvent:
        if not self._started:
            self._prefill()
            self._started = True
        t_start = time.perf_counter()
        ctx_tgt, ctx_dft, impl = self.ctx_tgt, self.ctx_dft, self.impl
        active = [sl for sl in self.slots if not sl.done]
        ev = RoundEvent(self.n_rounds, [])
        n_eval0 = impl.n_eval_draft + impl.n_eval_process
        # 1. draft for every slot with no replay pending (one draft call for all slots)
        dps = [DraftParams() for _ in range(self.spec.n_seq)]
        replay = {sl.seq: bool(sl.draft) for sl in active}
        for sl in active:
            if replay[sl.seq]:
                continue
            n_draft_max = min(ctx_tgt.n_ctx - sl.n_past - 2, sl.n_predict - len(sl.generated) - 1)
            dps[sl.seq] = DraftParams(drafting=n_draft_max > 0 and self.p.n_max > 0,
                                      n_max=n_draft_max, n_past=sl.n_past, id_last=sl.id_last,
                                      prompt=sl.prompt, result=[])
        asked = {s: dp.drafting for s, dp in enumerate(dps)}
        t0 = time.perf_counter()
        self.spec.draft(dps)
        ev.t_draft = time.perf_counter() - t0
        records = {}
        for sl in active:
            kv_dft_drafted = ctx_dft.seq_pos_max(sl.seq)
            if not replay[sl.seq]:
                sl.draft = list(dps[sl.seq].result)
                if impl.reeval:    # undo the draft() decodes: the replay re-inserts them
                    ctx_dft.seq_rm(sl.seq, sl.n_past, -1)
                if sl.draft and not self.can_rm_tgt:   # checkpoint both memories before verifying
                    sl.ckpt = (ctx_tgt.state_seq_get(sl.seq), ctx_dft.state_seq_get(sl.seq))
                    sl.smpl_save = sl.sampler.clone()
            info = list(impl.info[sl.seq]) if asked[sl.seq] else []   # this round's draft only
            records[sl.seq] = SlotRound(sl.seq, sl.n_past, sl.id_last, list(sl.draft), info, [],
                                        [], 0, [], [], (ctx_tgt.seq_pos_max(sl.seq),),
                                        (kv_dft_drafted,), replay=replay[sl.seq],
                                        checkpoint="saved" if sl.ckpt and not replay[sl.seq] else "")
        # 2. one target batch: [id_last, draft...] of every slot, logits on every row
        batch = Batch()
        idxs = {}
        for sl in active:
            idxs[sl.seq] = [len(batch) + i for i in range(len(sl.draft) + 1)]
            batch.add(sl.id_last, sl.n_past, sl.seq, True)
            for i, d in enumerate(sl.draft):
                batch.add(d, sl.n_past + 1 + i, sl.seq, True)
            records[sl.seq].batch_pos = list(range(sl.n_past, sl.n_past + 1 + len(sl.draft)))
        t0 = time.perf_counter()
        ctx_tgt.decode(batch)
        ev.t_verify = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.spec.process(batch)
        ev.t_process = time.perf_counter() - t0
        # 3. verify with the target's own sampler, commit, roll back
        for sl in active:
            rec = records[sl.seq]
            rec.kv_tgt += (ctx_tgt.seq_pos_max(sl.seq),)
            rec.kv_dft += (ctx_dft.seq_pos_max(sl.seq),)
            t0 = time.perf_counter()
            ids, probs = self._verify(sl, idxs[sl.seq], replay[sl.seq])
            ev.t_sample += time.perf_counter() - t0
            rec.ids, rec.target_p = ids, probs
            n_acc = len(ids) - 1
            rec.n_accepted = n_acc
            t0 = time.perf_counter()
            if not replay[sl.seq]:
                self.spec.accept(sl.seq, n_acc)
                self.n_drafted += len(sl.draft)
                self.n_accept += n_acc
            if n_acc < len(sl.draft) and not self.can_rm_tgt and not replay[sl.seq]:
                # partial acceptance on a memory that cannot drop part of a sequence: restore
                # the checkpoint and the sampler, resubmit the approved ids as the next draft
                st_tgt, st_dft = sl.ckpt
                ctx_tgt.state_seq_set(sl.seq, st_tgt)
                ctx_dft.state_seq_set(sl.seq, st_dft)
                sl.sampler = sl.smpl_save
                sl.draft = list(ids)
                rec.checkpoint = "restored"
                rec.kv_tgt += (ctx_tgt.seq_pos_max(sl.seq),)
                rec.kv_dft += (ctx_dft.seq_pos_max(sl.seq),)
                ev.t_rollback += time.perf_counter() - t0
                ev.slots.append(rec)
                continue
            was_draft = [not replay[sl.seq] and i < n_acc for i in range(len(ids))]
            if replay[sl.seq]:   # approved ids of the last round came from accepted drafts
                k = max(len(ids) - 2, 0)
                was_draft = [i < k for i in range(len(ids))]
            sl.draft = []
            sl.ckpt, sl.smpl_save = None, None
            for i, tok in enumerate(ids):    # commit: n_past += 1 per id, id_last = newest
                sl.prompt.append(sl.id_last)
                sl.id_last = tok
                sl.n_past += 1
                sl.generated.append(tok)
                sl.accepted_flags.append(was_draft[i])
                rec.committed.append(tok)
                if self.vocab.is_eog(tok):
                    sl.done, sl.stop = True, "eog"
                    break
                if len(sl.generated) >= sl.n_predict:
                    sl.done, sl.stop = True, "n_predict"
                    break
            if not sl.done and sl.n_past >= ctx_tgt.n_ctx:     # id_last has no cell left
                sl.done, sl.stop = True, "context_full"
            ctx_tgt.seq_rm(sl.seq, sl.n_past, -1)        # drop the rejected tail
            ctx_dft.seq_rm(sl.seq, sl.n_past, -1)
            rec.kv_tgt += (ctx_tgt.seq_pos_max(sl.seq),)
            rec.kv_dft += (ctx_dft.seq_pos_max(sl.seq),)
            rec.stop = sl.stop
            ev.t_rollback += time.perf_counter() - t0
            ev.slots.append(rec)
        self.n_rounds += 1
        ev.n_dft_eval = impl.n_eval_draft + impl.n_eval_process - n_eval0
        ev.t_round = time.perf_counter() - t_start
        self.t_gen += ev.t_round
        return ev

    def _verify(self, sl: _Slot, idxs: list, replay: bool) -> tuple[list, list]:
        """The target decides: exact match (llama.cpp), rejection sampling, or synthetic."""
        exact = self.synth is None and self.p.verify == "exact"
        if replay and not exact:
            # approved ids of a restored round: commit them as they are, then the bonus sample
            for d in sl.draft:
                sl.sampler.accept(d)
            tok = sl.sampler.sample(self.ctx_tgt, idxs[len(sl.draft)])
            sl.sampler.accept(tok)
            return list(sl.draft) + [tok], [float("nan")] * len(sl.draft) + [sl.sampler.prob_of(tok)]
        if self.synth is not None and sl.draft:
            return self._verify_synth(sl, idxs)
        if self.p.verify == "rejection" and sl.draft and not replay:
            return self._verify_rejection(sl, idxs)
        probs: list = []
        ids = sample_and_accept_n(sl.sampler, self.ctx_tgt, sl.draft, idxs, probs=probs)
        return ids, probs

    def _verify_synth(self, sl: _Slot, idxs: list) -> tuple[list, list]:
        """server_sample_and_accept_synth: accept draft[i] with probability synth[i]."""
        ids = []
        for i, d in enumerate(sl.draft):
            if self.synth_rng.random() < self.synth[min(i, len(self.synth) - 1)] and \
                    not self.vocab.is_eog(d):
                sl.sampler.accept(d)
                ids.append(d)
                continue
            tok = sl.sampler.sample(self.ctx_tgt, idxs[i])
            sl.sampler.accept(tok)
            ids.append(tok)
            return ids, [float("nan")] * len(ids)
        tok = sl.sampler.sample(self.ctx_tgt, idxs[len(sl.draft)])
        sl.sampler.accept(tok)
        ids.append(tok)
        return ids, [float("nan")] * len(ids)

    def _verify_rejection(self, sl: _Slot, idxs: list) -> tuple[list, list]:
        T = sl.sampler.params.temp
        p_rows = [_target_dist(self.ctx_tgt.get_logits_ith(i), T) for i in idxs]
        ids = rejection_verify(sl.draft, self.impl.q[sl.seq], p_rows, sl.sampler.rng)
        for t in ids:
            sl.sampler.accept(t)
        return ids, [float(p_rows[i][t]) for i, t in enumerate(ids)]

    # ---- results --------------------------------------------------------------------------
    def run(self, on_round=None) -> list[SpecResult]:
        for ev in self.rounds():
            if on_round:
                on_round(ev)
        return self.results()

    def results(self) -> list[SpecResult]:
        st = impl_stats(self.impl)
        return [SpecResult(sl.generated, self.vocab.detokenize(sl.generated), sl.accepted_flags,
                           self.n_prompt[sl.seq], self.n_drafted, self.n_accept, self.n_rounds, self.t_prompt, self.t_gen,
                           sl.stop, st) for sl in self.slots]

    def summary(self) -> str:
        """The speculative-simple summary (speculative-simple.cpp:354-358)."""
        n_pred = sum(len(sl.generated) for sl in self.slots)
        rate = 100.0 * self.n_accept / self.n_drafted if self.n_drafted else 0.0
        return (f"n_draft   = {self.p.n_max}\nn_predict = {n_pred}\nn_drafted = {self.n_drafted}\n"
                f"n_accept  = {self.n_accept}\naccept    = {rate:.3f}%")


def rejection_verify(draft, q_rows, p_rows, rng) -> list:
    """Speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

    draft[i] was sampled from the draft's distribution q_rows[i]; p_rows[i] is the target's
    distribution at the same position (len(draft) + 1 rows). Keep draft[i] with probability
    min(1, p(d) / q(d)); on the first rejection sample a replacement from norm(max(0, p - q))
    and stop; after a full acceptance add a bonus token from the last p row. The returned ids
    are distributed exactly as sampling from p one token at a time.
    """
    ids = []
    for i, d in enumerate(draft):
        p, q = p_rows[i], q_rows[i]
        if q[d] > 0 and rng.random() < min(1.0, p[d] / q[d]):
            ids.append(int(d))
            continue
        resid = np.maximum(p - q, 0.0)
        tot = resid.sum()
        ids.append(int(rng.choice(len(p), p=resid / tot if tot > 0 else p)))
        return ids
    p = p_rows[len(draft)]
    ids.append(int(rng.choice(len(p), p=p)))
    return ids


def _target_dist(logits, temp: float) -> np.ndarray:
    # [n_vocab] -> the target distribution at temperature temp (one-hot argmax when temp <= 0)
    l = np.asarray(logits, dtype=np.float64)
    if temp <= 0:
        p = np.zeros_like(l)
        p[int(np.argmax(l))] = 1.0
        return p
    l = l / temp
    e = np.exp(l - l.max())
    return e / e.sum()
