"""What the live view shows, as plain data computed from the loop's RoundEvents.

One `SlotRound` (one sequence in one round) becomes a `SlotView`: the round's chips (the draft
tokens, then the target's own token, and the candidate p_min stopped), the KV cells of both
contexts by position, and the tokens the round committed. `RunState` collects them for a whole
run; it changes only when it is handed a RoundEvent, never by looking into a context.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..measure.stats import event_stats

CHIP_STATES = ("accepted", "rejected", "unexamined", "replaced", "bonus", "replayed", "p-min-stop")
DRAFT_CHIP_STATES = ("accepted", "rejected", "unexamined", "replayed")
KV_STATES = ("committed", "written", "rolled-back", "empty")
MS_PER_S = 1e3


# ---- one round of one sequence --------------------------------------------------------------
@dataclass
class Chip:
    """One token of a round's row: a draft token, the target's own token, or the p_min stop.

    The draft side (impl, top, draft_p, and for an n-gram draft the matched n-gram) comes from
    the drafting impl's per-token info; the target side (target_*) from the target's samples.
    """
    round: int
    seq: int
    index: int                        # draft index; len(draft) for the target's token
    token: int
    text: str
    state: str                        # one of CHIP_STATES
    pos: int                          # the KV position this token would take
    draft_p: float | None = None      # draft's top-10-renormalized probability of this token
    top: list = field(default_factory=list)    # [(id, text, p)] the draft's top candidates
    target_token: int | None = None   # the target's sample for this position (None: not examined)
    target_text: str = ""
    target_p: float | None = None
    impl: str = ""                    # type of the impl that proposed it (draft tokens only)
    ngram: list | None = None         # n-gram drafts: the n-gram looked up (ids), its pieces, ...
    ngram_text: list = field(default_factory=list)
    match_pos: int | None = None      # ... where its earlier occurrence starts (-1: a cache)
    cache: str = ""                   # ... and, for ngram-cache, which cache proposed it

    @property
    def is_ngram(self) -> bool:
        return self.ngram is not None

    @property
    def is_draft(self) -> bool:
        return self.state in DRAFT_CHIP_STATES

    @property
    def key(self) -> tuple:
        """(seq, index, is the p_min stop): names a chip of a round (the stop shares the target
        token's index)."""
        return (self.seq, self.index, self.state == "p-min-stop")


@dataclass
class SlotView:
    """What the view shows of one sequence in one round."""
    round: int
    seq: int
    n_past: int
    id_last: int
    chips: list
    kv: dict                          # {"target": [state per position], "draft": [...]}
    n_drafted: int
    n_accepted: int
    committed: list                   # [(token, from_draft)]
    checkpoint: str = ""
    replay: bool = False
    stop_reason: str = ""
    verify: str = "exact"
    impl: str = ""                    # type of the impl that drafted this round ("" for none)
    draft_len: dict | None = None     # --spec-draft-n-max auto / heuristic: the round's chosen length and
                                      # why (draft_len.Decision.as_dict()); None for a fixed one

    @property
    def chip_states(self) -> list:
        return [c.state for c in self.chips if c.state != "p-min-stop"]


def piece(vocab, tok: int) -> str:
    """The text of one token (special tokens by name, broken UTF-8 as U+FFFD)."""
    try:
        return vocab.token_to_piece(int(tok), True).decode("utf-8", errors="replace")
    except Exception:
        return f"<{tok}>"


def chip_states(rec) -> list:
    """Chip states of one SlotRound: one per draft token, then the target's token."""
    d, k = len(rec.draft), rec.n_accepted
    out = []
    for i in range(d):
        if i < k:
            out.append("replayed" if rec.replay else "accepted")
        elif i == k:
            out.append("rejected")
        else:
            out.append("unexamined")
    out.append("bonus" if k >= d else "replaced")
    return out


def kv_states(n_past: int, kv: tuple, length: int) -> list:
    """Cell states by position for one context in one round.

    kv is the SlotRound's (pos_max, ...) trail for that context: its last entry is where the
    round left the cache, its maximum the furthest row written during the round.
    """
    after, hi = kv[-1], max(kv)
    out = []
    for p in range(length):
        if p < n_past:
            out.append("committed")
        elif p <= after:
            out.append("written")
        elif p <= hi:
            out.append("rolled-back")
        else:
            out.append("empty")
    return out


def committed_flags(rec) -> list:
    """[(token, from_draft)] committed by one SlotRound, as the loop flags them."""
    if rec.checkpoint == "restored":
        return []
    if rec.replay:
        k = max(len(rec.ids) - 2, 0)
    else:
        k = rec.n_accepted
    return [(int(t), i < k) for i, t in enumerate(rec.committed)]


def _candidates(vocab, info) -> list:
    """[(id, text, p)]: the drafting impl's top candidates for one drafted token (none when
    its info carries no candidates)."""
    return [(int(t), piece(vocab, t), float(p))
            for t, p in zip(getattr(info, "top_ids", ()), getattr(info, "top_p", ()))]


def _draft_side(c: Chip, vocab, info, impl: str) -> None:
    """Fill a draft chip from its impl's per-token info: who proposed it (DraftTokenInfo or
    NgramTokenInfo .source, else the round's impl), the candidates, the matched n-gram."""
    c.impl = getattr(info, "source", "") or impl
    c.top = _candidates(vocab, info)
    c.draft_p = next((p for t, _, p in c.top if t == c.token), 0.0) if c.top else None
    if getattr(info, "ngram", None) is not None:
        c.ngram = [int(t) for t in info.ngram]
        c.ngram_text = [piece(vocab, t) for t in c.ngram]
        c.match_pos = int(info.match_pos)
        c.cache = str(getattr(info, "cache", "") or "")


def _p_min_stop(rec, vocab, round_: int):
    """The draft's next candidate when p_min stopped the draft, or None: one info past the
    drafted tokens, flagged stopped_by_p_min (only when the info lines up with this draft)."""
    d, info = len(rec.draft), list(rec.draft_info)
    if rec.replay or len(info) != d + 1 or not getattr(info[d], "stopped_by_p_min", False) \
            or [int(x.token) for x in info[:d]] != [int(t) for t in rec.draft]:
        return None
    x = info[d]
    c = Chip(round=round_, seq=rec.seq, index=d, token=int(x.token), text=piece(vocab, x.token),
             state="p-min-stop", pos=rec.n_past + 1 + d)
    _draft_side(c, vocab, x, rec.impl)
    c.draft_p = float(x.p)
    return c


def slot_view(rec, round_: int, vocab, verify: str = "exact", has_draft: bool = True) -> SlotView:
    """Turn one SlotRound into what the view shows (has_draft=False: no draft context, so no
    draft KV strip)."""
    d = len(rec.draft)
    info = list(rec.draft_info)
    k = len(rec.ids) - 1                  # the target's own token: ids[k], at n_past + 1 + k
    chips = []
    for i, st in enumerate(chip_states(rec)):
        j = i if i < d else k             # which target sample this chip shows
        tok = rec.draft[i] if i < d else rec.ids[k]
        c = Chip(round=round_, seq=rec.seq, index=i, token=int(tok), text=piece(vocab, tok), state=st,
                 pos=rec.n_past + 1 + j)
        if i < d and i < len(info):       # the draft side: what the drafting impl saw
            _draft_side(c, vocab, info[i], rec.impl)
        elif i < d:
            c.impl = rec.impl
        if j <= k and st != "unexamined":  # the target side: its sample at this position
            c.target_token = int(rec.ids[j])
            c.target_text = piece(vocab, rec.ids[j])
            if j < len(rec.target_p):
                c.target_p = float(rec.target_p[j])
        chips.append(c)
    stop = _p_min_stop(rec, vocab, round_)
    if stop is not None:
        chips.append(stop)
    n_tgt = max(rec.n_past + d + 1, max(rec.kv_tgt) + 1)
    n_dft = max(rec.n_past + d + 1, max(rec.kv_dft) + 1)
    return SlotView(
        round=round_, seq=rec.seq, n_past=rec.n_past, id_last=rec.id_last, chips=chips,
        kv={"target": kv_states(rec.n_past, rec.kv_tgt, n_tgt),
            "draft": kv_states(rec.n_past, rec.kv_dft, n_dft) if has_draft else []},
        n_drafted=0 if rec.replay else d, n_accepted=rec.n_accepted, committed=committed_flags(rec),
        checkpoint=rec.checkpoint, replay=rec.replay, stop_reason=rec.stop_reason, verify=verify,
        impl="" if rec.replay else rec.impl,
        draft_len=rec.draft_len.as_dict() if getattr(rec, "draft_len", None) is not None else None)


# ---- a whole run ---------------------------------------------------------------------------------
class RunState:
    """The view's state for one run: every RoundEvent so far and what it shows.

    n_seq: the run's sequences; verify: the loop's verification mode (for the detail panel);
    n_max: its draft-max (the length of the per-position acceptance); types: the chain's impl
    types, in the order they run; has_draft: whether there is a draft context.
    """

    def __init__(self, vocab, n_seq: int = 0, verify: str = "exact", n_max: int = 0,
                 types=(), has_draft: bool = True):
        self.vocab, self.n_seq, self.verify, self.n_max = vocab, int(n_seq), verify, int(n_max)
        self.types, self.has_draft = list(types), bool(has_draft)
        self.events: list = []
        self.slot_views: list = []          # per round: {seq: SlotView}
        self.committed: dict = {s: [] for s in range(self.n_seq)}   # seq -> [(token, from_draft)]
        self.stopped: set = set()
        self.done = False

    def apply(self, ev) -> None:
        """Take one RoundEvent in: the only way the state changes during a run."""
        self.events.append(ev)
        views = {}
        for rec in ev.slots:
            sv = slot_view(rec, ev.round, self.vocab, self.verify, self.has_draft)
            views[rec.seq] = sv
            self.committed.setdefault(rec.seq, []).extend(sv.committed)
        self.slot_views.append(views)
        self.stopped |= {r.seq for r in ev.slots if r.stop_reason}
        self.done = len(self.stopped) >= self.n_seq

    @property
    def chip_states(self) -> list:
        """Per round: {seq: [chip state per draft token..., the target's token]}."""
        return [{s: sv.chip_states for s, sv in views.items()} for views in self.slot_views]

    def latest_views(self) -> dict:
        """{seq: SlotView} of each sequence's latest round (a finished one keeps its last)."""
        latest = {}
        for views in self.slot_views:
            latest.update(views)
        return latest

    @property
    def kv_cells(self) -> dict:
        """Each sequence's latest round: {seq: {"target": [state per position], "draft": [...]}}."""
        return {s: sv.kv for s, sv in self.latest_views().items()}

    @property
    def current_chips(self) -> list:
        """The chips on show: each sequence's latest round."""
        return [c for _, sv in sorted(self.latest_views().items()) for c in sv.chips]

    def chip(self, key) -> Chip | None:
        """The chip on show with this key (Chip.key), or None."""
        key = tuple(key)
        return next((c for c in self.current_chips if c.key == key), None)

    @property
    def stop_reasons(self) -> list:
        return sorted({r.stop_reason for ev in self.events for r in ev.slots if r.stop_reason})

    @property
    def counters(self) -> dict:
        """The counters panel: llama.cpp's statistics of the run so far (`stats.event_stats`)."""
        st = event_stats(self.events, self.n_max)
        t = st["t_round"]
        return {"rounds": st["n_rounds"], "drafted": st["n_gen_tokens"],
                "accepted": st["n_acc_tokens"], "accept_rate": st["accept_rate"],
                "acc_per_pos": st["acc_rate_per_pos"], "mean_acc_len": st["mean_acc_len"],
                "committed": st["n_committed"], "tokens_per_call": st["tokens_per_call"],
                "t_round_ms": MS_PER_S * t[-1] if t else 0.0,
                "t_round_mean_ms": MS_PER_S * st["t_round_mean"], "n_dft_eval": st["n_dft_eval"],
                "by_impl": self.by_impl, "draft_len_chosen": st["draft_len_chosen"]}

    @property
    def by_impl(self) -> dict:
        """{type: {"drafted", "accepted"}} per impl of the chain: draft tokens it proposed and
        how many of them the target accepted (replays not counted again), as the impl's
        n_gen_tokens and specnb_n_acc_tokens count them."""
        out = {t: {"drafted": 0, "accepted": 0} for t in self.types}
        for ev in self.events:
            for r in ev.slots:
                if r.draft and not r.replay and r.impl:
                    o = out.setdefault(r.impl, {"drafted": 0, "accepted": 0})
                    o["drafted"] += len(r.draft)
                    o["accepted"] += r.n_accepted
        return out

