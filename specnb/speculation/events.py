"""What one round of the speculative loop did: RoundEvent (all slots) and SlotRound (one slot).

The loop yields one RoundEvent per round; the live view, the plots, the benches and the tests
read only these records. `timed(ev, "t_verify")` adds a block's wall time to one of the
event's timers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple


class KvTrail(NamedTuple):
    """One memory's last position (seq_pos_max; -1: empty or no draft model) at three moments of
    a round."""
    drafted: int = -1                 # after drafting (the target's: before its verification)
    verified: int = -1                # after the verification batch (the draft's: after process)
    after: int = -1                   # after the rollback, or after the checkpoint restore


@dataclass
class SlotRound:
    """What happened to one sequence in one round (the facts the view and the tests read)."""
    seq: int
    n_past: int                       # at the start of the round: position of id_last
    id_last: int
    draft: list                       # tokens verified this round (the replayed ids on replay)
    draft_info: list = field(default_factory=list)   # per drafted token: .token, .source, ...
    impl: str = ""                    # type of the impl that drafted `draft` ("" if none / replay)
    batch_pos: list = field(default_factory=list)    # positions of this slot's verification rows
    ids: list = field(default_factory=list)          # target samples: committed ids (len >= 1)
    n_accepted: int = 0               # draft tokens accepted (len(ids) - 1)
    target_p: list = field(default_factory=list)     # target probability of each sampled id
    committed: list = field(default_factory=list)    # ids actually committed (cut at EOG / n_predict)
    kv_tgt: KvTrail = KvTrail()       # the target memory's last position at three moments
    kv_dft: KvTrail = KvTrail()       # the draft memory's, in the target's positions
    replay: bool = False              # this round re-verifies approved tokens (checkpoint path)
    checkpoint: str = ""              # "", "saved", "restored"
    stop_reason: str = ""             # "", "eog", "n_predict", "context_full"
    draft_len: object = None          # draft_len.Decision: the round's chosen length and why
                                      # (None: no schedule chose it, e.g. a replay)


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
    n_dft_eval: int = 0               # draft-model token evaluations this round

    @property
    def slot(self) -> SlotRound:
        return self.slots[0]


class timed:
    """Add the wall time of the `with` block to ev.<name> (a class, not a generator: a round
    times a dozen blocks, and contextlib's machinery cost more than some of them)."""
    __slots__ = ("ev", "name", "t0")

    def __init__(self, ev, name: str):
        self.ev, self.name = ev, name

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        ev, name = self.ev, self.name
        setattr(ev, name, getattr(ev, name) + time.perf_counter() - self.t0)
        return False
