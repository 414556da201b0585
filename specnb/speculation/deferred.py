"""specnb's draft-simple for `--spec-draft-n-max auto` and `--no-reeval`: the draft model catches
up only when it drafts, in the same decode as its seed row.

Not llama.cpp's: master's draft-simple replays every target batch on the draft model
(process()) at once, whether or not the next round drafts. `DeferredDraftSimple` wraps
`DraftSimple` with three changes, all in this file:

  - deferred process: on a memory that can drop part of a sequence, process() only notes the
    target's rows; the next draft() decodes them in its seed batch. With --no-reeval the draft
    holds every row but the last draft token (it was drafted, never decoded), so a fixed-length
    round decodes that row beside id_last, one 2-row decode instead of two 1-row decodes (on a
    draft whose step reads its weights once, most of a decode's cost). Under `auto` many rounds
    draft nothing, and such a round costs the draft model nothing; catching up is one batched
    decode;
  - a windowed catch-up (auto only): when the policy's decision this round is a probe or a
    start-up draft, a catch-up of more than CATCH_UP_WINDOW rows decodes only the last ones,
    placed right after what the draft memory holds. The draft model then sees the prompt and
    the recent tokens with the rows between left out, and its positions run `offset` behind the
    target's (target position = draft position + offset);
  - timing: each decode of draft() is reported to the policy (auto's draft-cost table).

The target still verifies every draft with its own sampler, so the output is unchanged.
"""
from __future__ import annotations

import time

from ..run.context import Batch
from .draft_len import CATCH_UP_WINDOW
from .draft_simple import DraftSimple


class DeferredDraftSimple(DraftSimple):
    """DraftSimple whose draft memory follows the target only when it drafts (see the module)."""

    def __init__(self, target, ctx_dft, policy, **kw):
        super().__init__(target, ctx_dft, **kw)
        self.policy = policy                  # draft_len.AutoDraftLen: decisions in, timings out
        policy.keeps_rows = not self.reeval   # its seed decodes (the policy's draft_cost)
        policy.draft_behind = self.behind
        self._begun: set = set()              # sequences past their prompt: their rows wait
        self._pending: list[list] = [[] for _ in range(self.n_seq)]   # (token, position)
        self._off: list[int] = [0] * self.n_seq

    def offset(self, seq: int) -> int:
        """Target position minus draft position of seq's recent rows (0 unless a windowed
        catch-up left rows out)."""
        return self._off[seq]

    # ---- DraftSimple's placement hooks ----------------------------------------------------
    def _kv_pos(self, seq: int, p: int) -> int:
        return p - self._off[seq]

    def _seed_rows(self, seq: int, batch: Batch) -> None:
        """The target's rows the draft memory misses go into the seed batch."""
        rows = dict(sorted((p, t) for t, p in self._pending[seq]))   # the last row per position
        self._pending[seq] = []
        if not rows:
            return
        ctx, off = self.ctx, self._off[seq]
        todo = sorted(rows.items())
        i = 0
        while i < len(todo) and not self.reeval and ctx.holds(seq, todo[i][0] - off, todo[i][1]):
            i += 1                                     # the draft already holds this row
        todo = todo[i:]
        if not todo:
            return
        ctx.seq_rm(seq, todo[0][0] - off, -1)
        if self._windowed() and len(todo) > CATCH_UP_WINDOW:   # leave the older rows out
            off = self._off[seq] = off + len(todo) - CATCH_UP_WINDOW
            todo = todo[-CATCH_UP_WINDOW:]
        for p, t in todo:
            batch.add(t, p - off, seq, False)
            self.n_eval_process += 1
            self.n_eval_draft -= 1                     # counted as process() work

    def _windowed(self) -> bool:
        """A probe or a start-up draft this round: its catch-up is cut to CATCH_UP_WINDOW rows."""
        decs = self.policy.round
        return bool(decs) and any(d.reason in ("probe", "start-up") for d in decs.values())

    def _decode(self, batch: Batch) -> None:
        t0 = time.perf_counter()
        super()._decode(batch)
        self.policy.observe_draft_decode(len(batch), time.perf_counter() - t0)

    # ---- the interface --------------------------------------------------------------------
    def begin(self, seq: int, prompt) -> None:
        super().begin(seq, prompt)
        self._begun.add(seq)

    def process(self, batch: Batch) -> bool:
        """After the prompt, only note the target's rows (a memory that can drop part of a
        sequence); the prompt itself is decoded at once, as DraftSimple does."""
        if not self.partial or not self._begun:
            return super().process(batch)
        for t, p, s in zip(batch.tokens, batch.pos, batch.seq_id):
            self._drop_pending(s, p)                   # a row at p replaces the rows from p on
            self._pending[s].append((int(t), int(p)))
        return True

    def behind(self) -> int:
        """The most rows any sequence would decode before its seed row if it drafted now: the
        target's rows noted since the draft memory last followed, past what it holds."""
        n = 0
        for s in self._begun:
            held = self.ctx.seq_pos_max(s) + self._off[s]         # in the target's positions
            n = max(n, sum(1 for _, p in self._pending[s] if p > held))
        return n

    def pos_max(self, seq: int) -> int:
        p = self.ctx.seq_pos_max(seq)
        return p + self._off[seq] if p >= 0 else p

    def seq_rm(self, seq: int, p0: int) -> None:
        self._drop_pending(seq, p0)
        if p0 <= 0:                                    # a new prompt: no offset, no deferral
            self._begun.discard(seq)
            self._off[seq] = 0
        super().seq_rm(seq, p0)

    def _drop_pending(self, seq: int, p0: int) -> None:
        """Forget the deferred rows at positions >= p0 (the list is kept in position order)."""
        pend = self._pending[seq]
        while pend and pend[-1][1] >= p0:
            pend.pop()
