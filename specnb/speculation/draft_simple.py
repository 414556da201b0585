"""draft-simple: a small draft model drafting greedily (common_speculative_impl_draft_simple).

common/speculative.cpp:177-387 @34af94cd, struct common_speculative_impl_draft_simple:
  - one draft sampler per sequence: top-k 10, then dist (the constructor, :224-234);
  - draft() (:277-382): the seed row id_last @ n_past for every drafting sequence in one decode
    (:286-300), then per step the argmax of each sequence (stop under p_min, :335-340; stop at
    min(n_max, dp.n_max), :349-354) and one decode of all next rows together (:364); drafts
    shorter than n_min are dropped (:373-381);
  - process() (:260-275): every target batch replayed on the draft context without logits, so
    the draft KV follows the accepted history.
The draft context and its rollback belong here. speculative-simple rolls the draft memory back
to [0, n_past) after drafting (seq_rm; when the memory cannot drop part of a sequence, it first
restores the checkpoint `ckpt.update_dft` took before drafting, then does the same seq_rm;
speculative-simple.cpp:176-178, 206-213 @34af94cd) and drops the rejected tail after each round
(:335); `before_verify` and `seq_rm` are those two steps. For a memory that cannot drop part of
a sequence (Context(partial_seq_rm=False)) this impl keeps a checkpoint of each sequence taken
before it decodes anything new (ckpt.update_dft), restores it instead of removing, and decodes
again the rows it must keep.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..run.context import Batch
from ..errors import ParamError
from ..vocab.gate import IncompatibleVocabError, are_compatible
from ..run.sampling import Sampler, SamplerParams
from .draft_vocab import draft_output_ids
from .impl import DraftParams, SpeculativeImpl, check_draft_limits
from .verify import draw_index


@dataclass
class DraftTokenInfo:
    """What the draft saw when it proposed one token (for the live view)."""
    token: int
    p: float                          # top-10-renormalized probability of the argmax
                                      # (rejection mode: q(token), the sampled draft's)
    top_ids: list                     # the draft's top candidates ...
    top_p: list                       # ... and their top-10-renormalized probabilities
                                      # (rejection mode: the ten likeliest of q, as they are)
    stopped_by_p_min: bool = False    # this argmax fell under p_min: not drafted
    source: str = "draft-simple"


class DraftSimple(SpeculativeImpl):
    """common_speculative_impl_draft_simple: a small draft model drafting greedily.

    `reeval=True` reproduces llama.cpp: the draft memory is rolled back to n_past after drafting
    and process() replays the whole target batch (d + (1 + d) = 2d + 1 draft evaluations per round).
    `reeval=False` is the fix the server flags (TAG_SPEC_AVOID_DRAFT_REEVAL): the KV rows
    computed while drafting are kept and process() decodes only the rows still missing
    (at most 1+d evaluations). With batch-invariant kernels both give identical draft KV. A
    memory that cannot drop part of a sequence always re-evaluates.
    `sample_draft=True` (rejection-sampling verification) samples each draft token instead of
    taking the argmax, and keeps the distribution q it was drawn from (`draft_dists`). What it
    samples from: the draft's own copy of the target's sampler chain, as llama.cpp's
    examples/speculative gives the draft a sampler with the target's parameters
    (speculative.cpp:199 @c392e50) and replaces it each round by a clone of the target's
    (:461). So each round starts from `dp.smpl.clone()` (the target's penalty window, DRY
    history and mirostat mu), and at each position q = that clone's `distribution` over the
    draft's logits (every sampler of the chain applied; no random number used, so XTC's coin
    and mirostat's mu stay where the target left them for the whole draft), the token is drawn
    from q with this impl's own generator (not the target's, whose numbers the verifier must
    not share), and the clone accepts it before the next position (:549). Without a target
    sampler in the request (dp.smpl None) the chain is plain softmax(logits / draft_temp).
    p_min does not apply to a sampled draft.
    `draft_vocab=N` (specnb, beyond llama.cpp; draft_vocab.py) restricts the draft model's
    output head to its N highest-ranked tokens, the control tokens and every prompt's tokens
    (`begin`), set on the draft context for as long as this impl drafts with it; 0 (llama.cpp)
    keeps the whole vocabulary. The target verifies over its whole vocabulary either way.
    """
    type = "draft-simple"
    costs_model = True

    def __init__(self, target, ctx_dft, n_seq: int = 1, n_max: int = 3, n_min: int = 0,
                 p_min: float = 0.0, reeval: bool = True, sample_draft: bool = False,
                 draft_temp: float = 1.0, seed: int = 0, draft_vocab: int = 0):
        check_draft_limits(n_max, n_min, p_min)
        report = are_compatible(target, ctx_dft.model)
        if not report.ok:
            raise IncompatibleVocabError(report)
        if ctx_dft.n_seq_max != n_seq:   # the constructor's n_seq check
            raise ParamError(f"draft context has n_seq_max={ctx_dft.n_seq_max}, the speculator "
                             f"serves n_seq={n_seq}: the draft needs one KV sequence per target sequence")
        super().__init__(n_seq, int(n_max))
        self.ctx = ctx_dft
        self.partial = bool(ctx_dft.partial_seq_rm)
        self.n_min, self.p_min = int(n_min), float(p_min)
        self.reeval = bool(reeval) or not self.partial
        self.sample_draft, self.draft_temp = bool(sample_draft), float(draft_temp)
        # one draft sampler per sequence: top-k 10, then dist
        self.smpl = [Sampler(SamplerParams(top_k=10, samplers=("top_k",), seed=seed + s))
                     for s in range(n_seq)]
        self.q: list[list] = [[] for _ in range(n_seq)]   # per position: q as Candidates (RS mode)
        self._q_smpl: list = [None] * n_seq                # per sequence: this round's draft chain
        self._rng = np.random.Generator(np.random.PCG64(seed + 7919))
        # n_eval_process also counts seq_rm's replays on a checkpointed memory
        # memory that cannot drop part of a sequence: per sequence, the state saved before the
        # last decode and the rows decoded since (common_prompt_checkpoint's data_dft)
        self._ckpt: list = [None] * n_seq
        self._since: list[list] = [[] for _ in range(n_seq)]
        self._drafted: set = set()            # sequences draft() decoded for since before_verify
        self.draft_vocab = draft_vocab
        self._prompt_tokens: set = set()      # every prompt's tokens (kept in a restricted head)
        self._set_head()                      # (checks draft_vocab)
        self.draft_vocab = int(draft_vocab)

    def _set_head(self) -> None:
        """The draft context's output head: the draft vocabulary, or the whole one."""
        self.ctx.set_output_ids(draft_output_ids(self.ctx.model.vocab, self.draft_vocab,
                                                 sorted(self._prompt_tokens)))

    # ---- the draft memory's checkpoint (only when it cannot drop part of a sequence) -------
    def _save(self, seq: int) -> None:
        """ckpt.update_dft, unless the saved state is still the memory's state."""
        if self._ckpt[seq] is None or self._since[seq]:
            self._ckpt[seq] = self.ctx.state_seq_get(seq)
            self._since[seq] = []

    def _restore(self, seq: int, p0: int) -> None:
        """ckpt.load_dft, then decode again the rows since the checkpoint at positions < p0."""
        keep = [(t, p) for t, p in self._since[seq] if p < p0]
        self.ctx.state_seq_set(seq, self._ckpt[seq])
        self._since[seq] = []
        if keep:
            b = Batch()
            for t, p in keep:
                b.add(t, p, seq, False)
            self.ctx.decode(b)
            self.n_eval_process += len(b)
            self._since[seq] = keep

    def _decoded(self, batch: Batch) -> None:
        if not self.partial:
            for t, p, s in zip(batch.tokens, batch.pos, batch.seq_id):
                self._since[s].append((t, p))

    # ---- specnb's rollback hooks ----------------------------------------------------------
    def pos_max(self, seq: int) -> int:
        """The draft memory's last position of seq, in the target's positions."""
        return self.ctx.seq_pos_max(seq)

    def before_verify(self, seq: int, n_past: int) -> None:
        """Undo the draft() decodes: ckpt.load_dft or seq_rm(n_past) (speculative-simple.cpp:206-213 @34af94cd)."""
        if seq not in self._drafted:
            return
        self._drafted.discard(seq)
        if not self.partial:
            self._restore(seq, n_past)
        elif self.reeval:
            self.ctx.seq_rm(seq, n_past, -1)

    def seq_rm(self, seq: int, p0: int) -> None:
        """Drop positions >= p0 of seq (llama_memory_seq_rm(ctx_dft, seq, p0, -1))."""
        if self.ctx.seq_pos_max(seq) < p0:
            return
        if p0 <= 0:                            # the whole sequence: every memory can do that
            self.ctx.seq_rm(seq, -1, -1)
            self._ckpt[seq], self._since[seq] = None, []
            self._drafted.discard(seq)
        elif self.partial:
            self.ctx.seq_rm(seq, max(p0, 0), -1)
        else:
            self._restore(seq, p0)

    # ---- the interface --------------------------------------------------------------------
    def begin(self, seq: int, prompt) -> None:
        """A restricted head also keeps this prompt's tokens (a prompt's words recur in its
        answer, and the draft can only propose tokens its head scores)."""
        if self.draft_vocab and not set(map(int, prompt)) <= self._prompt_tokens:
            self._prompt_tokens.update(map(int, prompt))
            self._set_head()

    def process(self, batch: Batch) -> bool:
        """Keep the draft KV in sync with a target batch, no logits."""
        if not self.partial:
            for s in sorted(set(batch.seq_id)):
                self._save(s)
        if self.reeval:
            b = Batch()
            for t, p, s in zip(batch.tokens, batch.pos, batch.seq_id):
                b.add(t, p, s, False)
            self.ctx.decode(b)
            self._decoded(b)
            self.n_eval_process += len(b)
            return True
        b = Batch()
        for s in sorted(set(batch.seq_id)):
            rows = [(p, t) for t, p, q in zip(batch.tokens, batch.pos, batch.seq_id) if q == s]
            for p, t in self._missing(s, rows):
                b.add(t, p, s, False)
        if len(b):
            self.ctx.decode(b)
            self.n_eval_process += len(b)
        return True

    def _missing(self, seq: int, rows: list) -> list:
        """The rows [(position, token)] of seq, in position order, that the draft memory must
        decode; the memory is cut before the first of them. Keeping its rows (the fix), the
        leading rows whose (position, token) it holds already are skipped; re-evaluating, none."""
        i = 0
        if not self.reeval:
            while i < len(rows) and self.ctx.holds(seq, *rows[i]):
                i += 1
        if i < len(rows):
            self.ctx.seq_rm(seq, rows[i][0], -1)
        return rows[i:]

    def draft(self, dps: list[DraftParams]) -> None:
        """Greedy drafting for every sequence with dp.drafting, one draft decode per step."""
        ctx = self.ctx
        batch = Batch()
        active, i_batch = [], {}
        for s, dp in enumerate(dps):
            if not dp.drafting:
                continue
            self.info[s], self.q[s] = [], []
            if dp.n_max == 0:
                continue                                           # no room this round
            i_batch[s] = self._seed(batch, s, dp)
            active.append(s)
        if not active:
            return
        self._decode(batch)
        i = 0
        while active:
            batch.clear()
            still = []
            for s in active:
                dp = dps[s]
                if self.sample_draft:                              # rejection-sampling mode
                    tok, info = self._sample_q(s, i_batch[s])
                else:
                    smpl = self.smpl[s]
                    smpl.sample(ctx, i_batch[s])                   # populates the candidates
                    cur = smpl.get_candidates()
                    tok = int(cur.ids[0])                          # greedy: the argmax
                    top = min(cur.size, 10)
                    info = DraftTokenInfo(tok, float(cur.p[0]), cur.ids[:top].tolist(),
                                          cur.p[:top].tolist())
                    if cur.p[0] < self.p_min:                      # confidence floor
                        info.stopped_by_p_min = True
                        self.info[s].append(info)
                        continue
                    smpl.accept(tok)
                self.info[s].append(info)
                dp.result.append(tok)
                # the token is pushed before the limits are tested (:347-354), so n_max = 0
                # still drafts one token, as master does
                if len(dp.result) >= self.n_max or 0 < dp.n_max <= len(dp.result):
                    continue
                i_batch[s] = len(batch)
                batch.add(tok, dp.n_past + i + 1, s, True)         # next input row
                still.append(s)
            active = still
            if not len(batch):
                break
            self._decode(batch)
            i += 1
        for s, dp in enumerate(dps):
            if dp.drafting and len(dp.result) < self.n_min:        # too short: no speculation
                dp.result.clear()
                self.q[s] = []

    def _seed(self, batch: Batch, s: int, dp: DraftParams) -> int:
        """Start seq s's draft (its sampler reset, the checkpoint taken) and add its seed row,
        id_last @ n_past (:286-300), to the seed batch; the row's index."""
        if not self.partial:
            self._save(s)                                          # ckpt.update_dft
        self._drafted.add(s)
        self.smpl[s].reset()
        if self.sample_draft:                                      # :461 the target's chain, cloned
            self._q_smpl[s] = (dp.smpl.clone() if dp.smpl is not None else
                               Sampler(SamplerParams(temp=self.draft_temp, top_k=0, top_p=1.0,
                                                     min_p=0.0)))
        dp.result.clear()
        batch.add(dp.id_last, dp.n_past, s, True)
        return len(batch) - 1

    def _decode(self, batch: Batch) -> None:
        """One decode of the draft model while drafting (n_eval_draft; noted for the checkpoint)."""
        self.ctx.decode(batch)
        self._decoded(batch)
        self.n_eval_draft += len(batch)

    def _sample_q(self, s: int, row: int) -> tuple[int, DraftTokenInfo]:
        """Rejection mode: draw one draft token from q, the draft chain's distribution at row."""
        chain = self._q_smpl[s]
        q = chain.distribution(self.ctx, row)              # Candidates: ids and p, draw order
        tok = int(q.ids[draw_index(self._rng, q.p)])
        chain.accept(tok)                                  # :549 the next position sees it
        self.q[s].append(q)
        top = np.argsort(-q.p, kind="stable")[:10]
        return tok, DraftTokenInfo(tok, float(q.p[q.ids == tok][0]), q.ids[top].tolist(),
                                   q.p[top].tolist())

    def draft_dists(self, seq: int) -> list | None:
        """The distributions (Candidates) the last draft of seq was sampled from (rejection
        mode), else None."""
        return list(self.q[seq]) if self.sample_draft else None
