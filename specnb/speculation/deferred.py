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
  - a windowed catch-up (auto only): a draft request with a catch-up window
    (DraftParams.catch_up_window: a probe's or a start-up draft's round) decodes only the last
    rows of a longer catch-up, placed right after what the draft memory holds. The draft model
    then sees the prompt and the recent tokens with the rows between left out, and its positions
    run `offset` behind the target's (target position = draft position + offset). DraftSimple
    works in the target's positions; this class translates them where they meet the draft memory
    (its `_decode`, `before_verify`, `seq_rm` and `pos_max`);
  - timing: each decode of draft() is kept as (rows, seconds) for `take_decodes` (the chain hands
    them to auto's draft-cost table).

The target still verifies every draft with its own sampler, so the output is unchanged.
"""
from __future__ import annotations

import bisect
import time

from ..run.context import Batch
from .draft_simple import DraftSimple
from .impl import DraftParams


class DeferredDraftSimple(DraftSimple):
    """DraftSimple whose draft memory follows the target only when it drafts (see the module)."""

    def __init__(self, target, ctx_dft, **kw):
        super().__init__(target, ctx_dft, **kw)
        self._begun: set = set()              # sequences past their prompt: their rows wait
        self._pending: list[list] = [[] for _ in range(self.n_seq)]   # (token, position)
        self._off: list[int] = [0] * self.n_seq
        self._decodes: list = []              # (rows, seconds) of draft()'s decodes

    def offset(self, seq: int) -> int:
        """Target position minus draft position of seq's recent rows (0 unless a windowed
        catch-up left rows out)."""
        return self._off[seq]

    # ---- drafting: the catch-up in the seed batch, positions translated -------------------
    def _seed(self, batch: Batch, s: int, dp: DraftParams) -> int:
        self._catch_up(s, batch, dp.catch_up_window)
        return super()._seed(batch, s, dp)

    def _catch_up(self, seq: int, batch: Batch, window: int) -> None:
        """The target's rows the draft memory misses go into the seed batch, before the seed row
        (with a window, only the last `window` of them; the offset grows by the rows left out)."""
        rows = dict(sorted((p, t) for t, p in self._pending[seq]))   # the last row per position
        self._pending[seq] = []
        off = self._off[seq]
        todo = [(p + off, t) for p, t in self._missing(seq, [(p - off, t) for p, t in rows.items()])]
        if window and len(todo) > window:                  # leave the older rows out
            self._off[seq] += len(todo) - window
            todo = todo[-window:]
        for p, t in todo:
            batch.add(t, p, seq, False)                    # (target positions: _decode places them)
        self.n_eval_process += len(todo)                   # process() work, though decoded with
        self.n_eval_draft -= len(todo)                     # the seed (_decode counts them there)

    def _decode(self, batch: Batch) -> None:
        """DraftSimple's decode, at the draft memory's positions, timed."""
        off = self._off
        if any(off[s] for s in set(batch.seq_id)):
            placed = Batch()
            for t, p, s, want in zip(batch.tokens, batch.pos, batch.seq_id, batch.logits):
                placed.add(t, p - off[s], s, want)
            batch = placed
        t0 = time.perf_counter()
        super()._decode(batch)
        self._decodes.append((len(batch), time.perf_counter() - t0))

    def take_decodes(self) -> list:
        out, self._decodes = self._decodes, []
        return out

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
            pend = self._pending[s]                               # in position order
            n = max(n, len(pend) - bisect.bisect_right(pend, held, key=lambda row: row[1]))
        return n

    def pos_max(self, seq: int) -> int:
        p = self.ctx.seq_pos_max(seq)
        return p + self._off[seq] if p >= 0 else p

    def before_verify(self, seq: int, n_past: int) -> None:
        super().before_verify(seq, n_past - self._off[seq])

    def seq_rm(self, seq: int, p0: int) -> None:
        self._drop_pending(seq, p0)
        if p0 <= 0:                                    # a new prompt: no offset, no deferral
            self._begun.discard(seq)
            self._off[seq] = 0
        super().seq_rm(seq, p0 - self._off[seq])

    def _drop_pending(self, seq: int, p0: int) -> None:
        """Forget the deferred rows at positions >= p0 (the list is kept in position order)."""
        pend = self._pending[seq]
        while pend and pend[-1][1] >= p0:
            pend.pop()
