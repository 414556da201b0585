"""The live view: speculative decoding round by round, in ipywidgets (JupyterLab and Voilà).

    from specnb.widgets import LiveView
    view = LiveView(target_model, draft_model, "The capital of France is")
    view            # in a notebook cell: the controls, the current round, the counters

`LiveView` owns a `SpeculativeLoop` and changes only when the loop hands it a `RoundEvent`:
everything it shows is computed from the events (the per-slot `SlotRound` records), never by
peeking into the contexts. For each round and each sequence it shows

  - id_last and n_past at the start of the round;
  - the draft tokens as chips: accepted ✓, rejected ✗ (the first mismatch) or not examined ·
    (after the first rejection), then the target's own token: → replacing the rejected draft
    token, or ★ the bonus token after a full acceptance (↻ marks re-verified tokens on the
    checkpoint path, ✂ the draft's candidate that p_min stopped);
  - the committed text, accepted draft tokens shaded green, target-only tokens blue;
  - for the target and the draft context, a strip of KV cells by position: committed
    [0, n_past), rows written this round and kept, rows written and rolled back;
  - on the checkpoint path: the save before verifying, the restore, the replayed draft.

Hovering a chip shows the draft's top candidates (their top-10-renormalized probabilities,
the numbers p_min is compared with) and the target's sample; clicking it, or picking it in
the detail list, shows the same in the detail panel.

The state the view shows is also plain Python, for tests and for reading in a notebook:
`view.chip_states`, `view.kv_cells`, `view.counters`, `view.committed`, `view.error`.
"""
from __future__ import annotations

import html
import math
import threading
import time
from dataclasses import dataclass, field

import ipywidgets as W

from .context import Context
from .errors import ParamError, SpecnbError
from .loop import VERIFY_MODES, SpecParams, SpeculativeLoop
from .plots import event_stats
from .sampling import SamplerParams

CHIP_STATES = ("accepted", "rejected", "unexamined", "replaced", "bonus", "replayed", "p-min-stop")
KV_STATES = ("committed", "written", "rolled-back", "empty")

MARK = {"accepted": "✓", "rejected": "✗", "unexamined": "·", "replaced": "→", "bonus": "★",
        "replayed": "↻", "p-min-stop": "✂"}
WORDS = {"accepted": "accepted", "rejected": "rejected (first mismatch)",
         "unexamined": "not examined (after the first rejection)",
         "replaced": "the target's own token, replacing the rejected draft token",
         "bonus": "the target's bonus token (every draft token accepted)",
         "replayed": "replayed: an approved token re-verified after the checkpoint restore",
         "p-min-stop": "not drafted: its probability fell under p_min"}
# (background, border, text) per chip state
CHIP_STYLE = {"accepted": ("#e8f5e9", "#2e7d32", "#1b5e20"),
              "rejected": ("#ffebee", "#c62828", "#b71c1c"),
              "unexamined": ("#f5f5f5", "#9e9e9e", "#616161"),
              "replaced": ("#e3f2fd", "#1565c0", "#0d47a1"),
              "bonus": ("#f3e5f5", "#6a1b9a", "#4a148c"),
              "replayed": ("#fff8e1", "#f9a825", "#5d4037"),
              "p-min-stop": ("#ffffff", "#9e9e9e", "#757575")}
KV_STYLE = {"committed": "background:#90a4ae;",
            "written": "background:#43a047;",
            "rolled-back": "background:repeating-linear-gradient(45deg,#e53935 0 3px,#ffcdd2 3px 6px);",
            "empty": "background:#fff;"}
KV_WORDS = {"committed": "committed before this round", "written": "written this round, kept",
            "rolled-back": "written this round, rolled back", "empty": "empty"}

MAX_SEQUENCES = 8


# ---- what one round shows (pure data, computed from a SlotRound) ----------------------------
@dataclass
class Chip:
    """One token of a round's row: a draft token, the target's own token, or the p_min stop."""
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

    @property
    def is_draft(self) -> bool:
        return self.state in ("accepted", "rejected", "unexamined", "replayed")


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
    stop: str = ""
    verify: str = "exact"

    @property
    def chip_states(self) -> list:
        return [c.state for c in self.chips if c.state != "p-min-stop"]


def piece(vocab, tok: int) -> str:
    """The text of one token (special tokens by name, broken UTF-8 as U+FFFD)."""
    try:
        return vocab.token_to_piece(int(tok), True).decode("utf-8", errors="replace")
    except Exception:
        return f"<{tok}>"


def visible(text: str) -> str:
    """Whitespace made visible for chips: ␣ space, ↵ newline, ⇥ tab."""
    return (text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")) or "∅"


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


def slot_view(rec, round_: int, vocab, verify: str = "exact") -> SlotView:
    """Turn one SlotRound into what the view shows."""
    states = chip_states(rec)
    chips = []
    d = len(rec.draft)
    info = list(rec.draft_info)
    k = len(rec.ids) - 1                  # the target's own token: ids[k], at n_past + 1 + k
    for i, st in enumerate(states):
        j = i if i < d else k             # which target sample this chip shows
        tok = rec.draft[i] if i < d else rec.ids[k]
        c = Chip(round_, rec.seq, i, int(tok), piece(vocab, tok), st, rec.n_past + 1 + j)
        if i < d and i < len(info):
            c.top = [(int(t), piece(vocab, t), float(p)) for t, p in zip(info[i].top_ids, info[i].top_p)]
            c.draft_p = next((p for t, _, p in c.top if t == c.token), 0.0)
        if j <= k and st != "unexamined":
            c.target_token = int(rec.ids[j])
            c.target_text = piece(vocab, rec.ids[j])
            if j < len(rec.target_p):
                c.target_p = float(rec.target_p[j])
        chips.append(c)
    # the draft's next candidate when p_min stopped the draft: one DraftTokenInfo past the
    # drafted tokens, flagged stopped_by_p_min (only when the info lines up with this draft)
    if not rec.replay and len(info) == d + 1 and getattr(info[d], "stopped_by_p_min", False) \
            and [int(x.token) for x in info[:d]] == [int(t) for t in rec.draft]:
        x = info[d]
        chips.append(Chip(round_, rec.seq, d, int(x.token), piece(vocab, x.token), "p-min-stop",
                          rec.n_past + 1 + d, float(x.p),
                          [(int(t), piece(vocab, t), float(p)) for t, p in zip(x.top_ids, x.top_p)]))
    n_tgt = max(rec.n_past + d + 1, max(rec.kv_tgt) + 1)
    n_dft = max(rec.n_past + d + 1, max(rec.kv_dft) + 1)
    return SlotView(round_, rec.seq, rec.n_past, rec.id_last, chips,
                    {"target": kv_states(rec.n_past, rec.kv_tgt, n_tgt),
                     "draft": kv_states(rec.n_past, rec.kv_dft, n_dft)},
                    0 if rec.replay else d, rec.n_accepted, committed_flags(rec),
                    rec.checkpoint, rec.replay, rec.stop, verify)


# ---- HTML rendering (pure functions of the data above) --------------------------------------
def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _fmt_p(p) -> str:
    return "—" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.3f}"


def chip_title(c: Chip, p_min: float | None = None) -> str:
    """The hover text of a chip: its state, the draft's top candidates, the target's sample."""
    lines = [f"{MARK[c.state]} {c.text!r} (id {c.token}) at position {c.pos}: {WORDS[c.state]}"]
    if c.top:
        lines.append("draft top candidates (top-10 renormalized p):")
        for t, txt, p in c.top:
            lines.append(f"  {'▸' if t == c.token else ' '} {txt!r:<14} {p:.3f}")
        if p_min:
            lines.append(f"p_min = {p_min:g}")
    if c.target_token is not None:
        lines.append(f"target sampled {c.target_text!r} (id {c.target_token}), p = {_fmt_p(c.target_p)}")
    elif c.is_draft:
        lines.append("target: not examined")
    return "\n".join(lines)


def chip_html(c: Chip, p_min: float | None = None) -> str:
    bg, border, fg = CHIP_STYLE[c.state]
    deco = "text-decoration:line-through;" if c.state == "rejected" else ""
    dash = "dashed" if c.state in ("unexamined", "p-min-stop") else "solid"
    return (f'<span class="specnb-chip specnb-chip-{c.state}" title="{_e(chip_title(c, p_min))}" '
            f'style="display:inline-block;margin:1px 2px;padding:1px 6px;border:2px {dash} {border};'
            f'border-radius:10px;background:{bg};color:{fg};font-family:monospace;font-size:12px;{deco}">'
            f'{MARK[c.state]} {_e(visible(c.text))}</span>')


def kv_strip_html(states: list, label: str, n_past: int, window: int = 64) -> str:
    """One context's cells as a row of small squares; long committed prefixes are folded."""
    start = max(0, min(n_past, len(states)) - window // 2) if len(states) > window else 0
    cells = []
    if start:
        cells.append(f'<span class="specnb-kv-fold" title="positions 0..{start - 1}: committed" '
                     f'style="font-size:11px;color:#546e7a;margin-right:3px">[0…{start - 1}] ✓</span>')
    for p in range(start, len(states)):
        st = states[p]
        edge = "border-left:3px solid #000;" if p == n_past else ""
        glyph = "✗" if st == "rolled-back" else ""
        cells.append(f'<span class="specnb-kv-cell specnb-kv-{st}" data-pos="{p}" '
                     f'title="{label} position {p}: {KV_WORDS[st]}" style="display:inline-block;'
                     f'width:12px;height:14px;margin:0 1px 1px 0;border:1px solid #607d8b;{edge}'
                     f'{KV_STYLE[st]}font-size:9px;line-height:14px;text-align:center;color:#fff">'
                     f'{glyph}</span>')
    return (f'<div class="specnb-kv-strip specnb-kv-{label}" style="margin:2px 0;display:flex;'
            f'align-items:center;flex-wrap:wrap"><span style="width:52px;font-size:12px;'
            f'color:#37474f">{_e(label)}</span>{"".join(cells)}</div>')


KV_LEGEND = ('<div style="font-size:11px;color:#455a64;margin:2px 0 0 52px">'
             + " ".join(f'<span style="display:inline-block;width:10px;height:10px;border:1px solid '
                        f'#607d8b;{KV_STYLE[s]}"></span> {KV_WORDS[s]}&nbsp;&nbsp;'
                        for s in ("committed", "written", "rolled-back"))
             + '| the thick bar marks n_past</div>')


def committed_html(vocab, prompt: list, committed: list, n_new: int) -> str:
    """The prompt (grey), then each committed token: green when it came from an accepted draft
    token, blue when only the target produced it; this round's tokens in bold."""
    parts = [f'<span class="specnb-prompt" style="color:#78909c">{_e(vocab.detokenize(prompt))}</span>']
    n = len(committed)
    for i, (tok, from_draft) in enumerate(committed):
        kind = "draft" if from_draft else "target"
        style = ("background:#c8e6c9;border-bottom:2px solid #2e7d32;" if from_draft
                 else "color:#0d47a1;border-bottom:2px solid #90caf9;")
        if i >= n - n_new:                    # committed this round
            style += "font-weight:bold;"
        who = "an accepted draft token" if from_draft else "the target's own token"
        parts.append(f'<span class="specnb-tok specnb-tok-{kind}" title="id {tok}: {who}" '
                     f'style="{style}">{_e(piece(vocab, tok))}</span>')
    return ('<div class="specnb-committed" style="white-space:pre-wrap;font-family:monospace;'
            'font-size:13px;line-height:1.6;border:1px solid #cfd8dc;border-radius:4px;padding:4px 6px;'
            'max-height:9em;overflow:auto">' + "".join(parts) + "</div>")


def counters_html(c: dict) -> str:
    def row(key, label, value):
        return (f'<tr><td style="padding:1px 8px 1px 0;color:#455a64">{_e(label)}</td>'
                f'<td><span class="specnb-counter" data-counter="{key}">{_e(value)}</span></td></tr>')
    per = c["acc_per_pos"]
    bars = "".join(
        f'<div title="position {i + 1}: {r:.3f}" style="display:flex;align-items:center;font-size:11px">'
        f'<span style="width:16px">{i + 1}</span><span style="display:inline-block;height:9px;'
        f'width:{int(80 * r)}px;background:#2e7d32;margin-right:4px"></span>{r:.2f}</div>'
        for i, r in enumerate(per))
    rows = [row("rounds", "rounds (target calls)", c["rounds"]),
            row("drafted", "drafted", c["drafted"]),
            row("accepted", "accepted", f'{c["accepted"]} ({100 * c["accept_rate"]:.1f}%)'),
            row("mean_acc_len", "mean accepted length", f'{c["mean_acc_len"]:.3f}'),
            row("tokens_per_call", "tokens per target call", f'{c["tokens_per_call"]:.3f}'),
            row("committed", "tokens committed", c["committed"]),
            row("t_round_ms", "time per round", f'{c["t_round_ms"]:.1f} ms'),
            row("t_round_mean_ms", "mean time per round", f'{c["t_round_mean_ms"]:.1f} ms')]
    return ('<div class="specnb-counters" style="font-size:12px;min-width:230px">'
            '<b>counters</b><table style="border-collapse:collapse">' + "".join(rows) + "</table>"
            '<div style="margin-top:4px;color:#455a64">acceptance per position</div>'
            f'<div class="specnb-acc-per-pos">{bars or "—"}</div></div>')


def detail_html(c: Chip | None, p_min: float, verify: str) -> str:
    """The detail panel: the draft's candidates (p_min at work) and the target's decision."""
    if c is None:
        return '<div class="specnb-detail" style="color:#78909c;font-size:12px">no token selected</div>'
    bg, border, fg = CHIP_STYLE[c.state]
    head = (f'<div><span style="color:{fg};font-weight:bold">{MARK[c.state]} {_e(visible(c.text))}</span>'
            f' <span style="color:#546e7a">(id {c.token}, position {c.pos}, round {c.round}, '
            f'sequence {c.seq})</span>: {_e(WORDS[c.state])}</div>')
    body = []
    if c.top:
        pm = (f'p_min = {p_min:g}: the draft keeps drafting while its argmax has p ≥ p_min'
              if p_min > 0 else "p_min = 0: no confidence floor")
        if c.state == "p-min-stop":
            pm = f'p_min = {p_min:g}: the argmax had p = {c.draft_p:.3f} &lt; p_min, so drafting stopped here'
        rows = "".join(
            f'<tr style="{"font-weight:bold;" if t == c.token else ""}'
            f'{"background:#e3f2fd;" if t == c.target_token else ""}">'
            f'<td style="padding:0 6px;font-family:monospace">{_e(visible(txt))}</td>'
            f'<td style="padding:0 6px;color:#78909c">{t}</td>'
            f'<td style="padding:0 6px"><span style="display:inline-block;height:9px;'
            f'width:{int(120 * p)}px;background:{"#c62828" if p < p_min else "#2e7d32"}"></span> {p:.3f}</td>'
            f'<td style="padding:0 6px;font-size:11px">{"draft" if t == c.token else ""}'
            f'{" target" if t == c.target_token else ""}</td></tr>'
            for t, txt, p in c.top)
        body.append(f'<div style="margin-top:4px">draft top candidates, top-10 renormalized '
                    f'({_e(pm)}; red bars are under p_min):</div>'
                    f'<table class="specnb-top" style="font-size:12px">{rows}</table>')
        if verify == "rejection" and c.is_draft:
            body.append('<div style="font-size:12px;color:#455a64">rejection-sampling mode: the draft '
                        'token was sampled from the draft distribution q; the target keeps it with '
                        'probability min(1, p/q)</div>')
    if c.target_token is not None:
        verdict = ""
        if c.is_draft:
            verdict = (" = the draft token: accepted" if c.target_token == c.token
                       else " ≠ the draft token: rejected, the target's token is committed instead")
        body.append(f'<div style="margin-top:4px">target sampled <b>{_e(visible(c.target_text))}</b> '
                    f'(id {c.target_token}) with p = {_fmt_p(c.target_p)}{_e(verdict)}</div>')
    elif c.is_draft:
        body.append('<div style="margin-top:4px;color:#616161">the target did not examine this token: '
                    'an earlier draft token was rejected</div>')
    return (f'<div class="specnb-detail" style="font-size:12px;border:1px solid {border};'
            f'background:#fff;border-radius:4px;padding:4px 8px">{head}{"".join(body)}</div>')


def slot_header_html(sv: SlotView, vocab) -> str:
    badges = []
    if sv.checkpoint == "saved":
        badges.append(("specnb-ckpt-saved", "#5d4037", "⤓ checkpoint saved: both contexts' state and "
                       "the sampler, before verifying"))
    if sv.checkpoint == "restored":
        badges.append(("specnb-ckpt-restored", "#c62828", "⟲ restored from the checkpoint (partial "
                       "acceptance): nothing committed; the approved tokens are replayed next round"))
    if sv.replay:
        badges.append(("specnb-replay", "#f57f17", "↻ replay: the approved tokens of the last round "
                       "re-verified as this round's draft"))
    if sv.stop:
        badges.append(("specnb-stop", "#37474f", f"■ stopped: {sv.stop}"))
    b = "".join(f'<span class="{cls}" style="margin-left:8px;padding:0 6px;border-radius:8px;'
                f'border:1px solid {col};color:{col};font-size:11px">{_e(txt)}</span>'
                for cls, col, txt in badges)
    return (f'<div class="specnb-round-header" style="font-size:12px;margin-top:4px">'
            f'<b>round {sv.round}</b> · sequence {sv.seq} · id_last '
            f'<code>{_e(visible(piece(vocab, sv.id_last)))}</code> (id {sv.id_last}) at n_past = '
            f'<b class="specnb-n-past">{sv.n_past}</b> · drafted {len(sv.chips) - 1 - sum(c.state == "p-min-stop" for c in sv.chips)}'
            f' · accepted {sv.n_accepted if not sv.replay else 0} · committed {len(sv.committed)}{b}</div>')


def error_html(msg: str) -> str:
    if not msg:
        return ""
    return (f'<div class="specnb-error" role="alert" style="border:2px solid #c62828;background:#ffebee;'
            f'color:#b71c1c;padding:4px 8px;border-radius:4px;font-size:13px">⚠ {_e(msg)}</div>')


# ---- the view ---------------------------------------------------------------------------------
class LiveView:
    """An ipywidgets view of a SpeculativeLoop, updated from its RoundEvents.

    target, draft: loaded Models (`specnb.model.load_model`). prompt: text (one sequence per
    non-empty line; a line "ids: 1 2 3" gives token ids), a list of texts, a list of token ids
    or a list of such lists. The other arguments are the initial settings; every one of them
    is also a control, and changing a control restarts the run from the prompt.
    `checkpoints=True` makes the target memory refuse partial removal (the checkpoint and
    replay path). `n_ctx=None` sizes the contexts to the prompt, n_predict and draft-max.
    `reeval`, `n_threads`, `sampler_extra` (more SamplerParams fields, e.g. min_p) and
    `synth_rates` / `synth_len` (synthetic acceptance: the output is not valid text) are passed
    through to the loop. `speed` is the play speed in rounds per second; `history` how many
    earlier rounds are listed under the current one.
    """

    def __init__(self, target, draft, prompt="The capital of France is", *, n_predict: int = 32,
                 draft_max: int = 3, draft_min: int = 0, p_min: float = 0.0, temp: float = 0.0,
                 top_k: int = 40, top_p: float = 0.95, seed: int = 1, verify: str = "exact",
                 checkpoints: bool = False, reeval: bool = True, n_ctx: int | None = None,
                 n_threads: int | None = None, speed: float = 2.0, history: int = 8,
                 sampler_extra: dict | None = None, synth_rates=None, synth_len=None):
        self.target, self.draft = target, draft
        self.vocab = target.vocab
        self.n_ctx_opt, self.n_threads, self.reeval = n_ctx, n_threads, bool(reeval)
        self.sampler_extra = dict(sampler_extra or {})
        self.synth_rates, self.synth_len = synth_rates, synth_len
        self.history = int(history)
        self._lock = threading.RLock()
        self._player: threading.Thread | None = None
        self._stop = threading.Event()
        self._suspend = False
        self.loop: SpeculativeLoop | None = None
        self.events: list = []
        self.slot_views: list = []          # per round: {seq: SlotView}
        self.committed: dict = {}            # seq -> [(token, from_draft)]
        self.prompts: list = []
        self.error = ""
        self.done = False
        self._stopped: set = set()
        self.selected: Chip | None = None
        self._build_widgets(prompt, n_predict, draft_max, draft_min, p_min, temp, top_k, top_p,
                            seed, verify, checkpoints, speed)
        self.restart()

    # ---- widgets ------------------------------------------------------------------------
    def _build_widgets(self, prompt, n_predict, draft_max, draft_min, p_min, temp, top_k, top_p,
                       seed, verify, checkpoints, speed) -> None:
        lay = lambda w: W.Layout(width=w)  # noqa: E731
        style = {"description_width": "initial"}
        self.w_prompt = W.Textarea(value=self._prompt_text(prompt), description="prompt",
                                   continuous_update=False, rows=2, layout=lay("98%"),
                                   placeholder="one sequence per line")
        self.w_n_predict = W.IntText(value=n_predict, description="n_predict", style=style, layout=lay("150px"))
        self.w_draft_max = W.IntText(value=draft_max, description="draft-max", style=style, layout=lay("140px"))
        self.w_draft_min = W.IntText(value=draft_min, description="draft-min", style=style, layout=lay("140px"))
        self.w_p_min = W.FloatText(value=p_min, step=0.05, description="p-min", style=style, layout=lay("140px"))
        self.w_temp = W.FloatText(value=temp, step=0.1, description="temperature", style=style, layout=lay("170px"))
        self.w_top_k = W.IntText(value=top_k, description="top-k", style=style, layout=lay("120px"))
        self.w_top_p = W.FloatText(value=top_p, step=0.05, description="top-p", style=style, layout=lay("130px"))
        self.w_seed = W.IntText(value=seed, description="seed", style=style, layout=lay("150px"))
        self.w_verify = W.Dropdown(options=list(VERIFY_MODES), value=verify, description="verify",
                                   style=style, layout=lay("190px"))
        self.w_checkpoints = W.Checkbox(value=bool(checkpoints), indent=False, layout=lay("auto"),
                                        description="checkpoints (target memory cannot drop part of a sequence)")
        self.controls = [self.w_prompt, self.w_n_predict, self.w_draft_max, self.w_draft_min,
                         self.w_p_min, self.w_temp, self.w_top_k, self.w_top_p, self.w_seed,
                         self.w_verify, self.w_checkpoints]
        for w in self.controls:
            w.observe(self._on_setting, names="value")

        def button(desc, cls, tip, cb, width="110px"):
            b = W.Button(description=desc, tooltip=tip, layout=lay(width))
            b.add_class(cls)
            b.on_click(lambda _b: self._guard(cb))
            return b
        self.b_step = button("▸ step", "specnb-btn-step", "run one round", self.step)
        self.b_play = button("▶ play", "specnb-btn-play", "play / pause", self.toggle_play)
        self.b_run = button("▶▶ run to end", "specnb-btn-run", "run every remaining round",
                            lambda: self.run_to_end(block=False), "130px")
        self.b_reset = button("⟲ reset", "specnb-btn-reset", "restart from the prompt", self.reset)
        self.w_speed = W.FloatSlider(value=speed, min=0.25, max=20.0, step=0.25,
                                     description="rounds/s", style=style, layout=lay("260px"))
        self.w_status = W.HTML()
        self.w_error = W.HTML()
        self.w_error.add_class("specnb-error-box")
        self.w_slots = W.VBox([])
        self.w_counters = W.HTML()
        self.w_counters.add_class("specnb-counters-box")
        self.w_detail_pick = W.Dropdown(options=[("—", None)], value=None, description="detail",
                                        style=style, layout=lay("420px"))
        self.w_detail_pick.observe(self._on_pick, names="value")
        self.w_detail = W.HTML()
        self.w_history = W.HTML()
        title = W.HTML('<div style="font-size:15px;font-weight:bold">specnb live view: '
                       'draft-simple speculative decoding</div>')
        row = lambda *ws: W.HBox(list(ws), layout=W.Layout(flex_flow="row wrap", align_items="center"))  # noqa: E731
        settings = W.VBox([
            self.w_prompt,
            row(self.w_draft_max, self.w_draft_min, self.w_p_min, self.w_n_predict),
            row(self.w_temp, self.w_top_k, self.w_top_p, self.w_seed),
            row(self.w_verify, self.w_checkpoints)])
        buttons = row(self.b_step, self.b_play, self.w_speed, self.b_run, self.b_reset)
        main = W.HBox([W.VBox([self.w_slots], layout=W.Layout(flex="1 1 auto", min_width="360px")),
                       W.VBox([self.w_counters], layout=W.Layout(flex="0 0 270px", margin="0 0 0 10px"))],
                      layout=W.Layout(align_items="flex-start"))
        self.widget = W.VBox([title, settings, buttons, self.w_status, self.w_error, main,
                              W.VBox([self.w_detail_pick, self.w_detail]), self.w_history],
                             layout=W.Layout(border="1px solid #cfd8dc", padding="6px"))
        self.widget.add_class("specnb-live-view")
        self._chip_buttons: list = []
        self._slots_w: list = []
        self._rendered_rounds = -1

    def _repr_mimebundle_(self, **kw):
        return self.widget._repr_mimebundle_(**kw)

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)

    def _prompt_text(self, prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        prompt = list(prompt)
        if prompt and all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        if prompt and not isinstance(prompt[0], (list, tuple)):
            prompt = [prompt]
        return "\n".join("ids: " + " ".join(str(int(t)) for t in p) for p in prompt)

    def _parse_prompts(self, text: str) -> list:
        lines = [ln for ln in text.split("\n") if ln.strip()]
        if not lines:
            raise ParamError("the prompt is empty: write at least one line (one sequence per line)")
        if len(lines) > MAX_SEQUENCES:
            raise ParamError(f"{len(lines)} prompt lines: the live view shows at most "
                             f"{MAX_SEQUENCES} sequences (one per line)")
        out = []
        for ln in lines:
            if ln.strip().startswith("ids:"):
                try:
                    ids = [int(t) for t in ln.strip()[4:].replace(",", " ").split()]
                except ValueError:
                    raise ParamError(f"invalid prompt line {ln!r}: 'ids:' takes integers") from None
                bad = [t for t in ids if not 0 <= t < self.target.n_vocab]
                if bad or not ids:
                    raise ParamError(f"invalid prompt line {ln!r}: token ids must be in "
                                     f"[0, {self.target.n_vocab})" + ("" if ids else ", at least one"))
                out.append(ids)
            else:
                out.append(self.vocab.tokenize(ln))
        return out

    # ---- settings ----------------------------------------------------------------------------
    @property
    def settings(self) -> dict:
        return {"prompt": self.w_prompt.value, "n_predict": self.w_n_predict.value,
                "draft_max": self.w_draft_max.value, "draft_min": self.w_draft_min.value,
                "p_min": self.w_p_min.value, "temp": self.w_temp.value, "top_k": self.w_top_k.value,
                "top_p": self.w_top_p.value, "seed": self.w_seed.value, "verify": self.w_verify.value,
                "checkpoints": self.w_checkpoints.value}

    def set(self, **kw) -> None:
        """Change settings as the controls would (one restart for all of them)."""
        ws = {"prompt": self.w_prompt, "n_predict": self.w_n_predict, "draft_max": self.w_draft_max,
              "draft_min": self.w_draft_min, "p_min": self.w_p_min, "temp": self.w_temp,
              "top_k": self.w_top_k, "top_p": self.w_top_p, "seed": self.w_seed,
              "verify": self.w_verify, "checkpoints": self.w_checkpoints, "speed": self.w_speed}
        unknown = set(kw) - set(ws)
        if unknown:
            raise ParamError(f"unknown live-view setting(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(ws)}")
        self._suspend = True
        try:
            for k, v in kw.items():
                if k == "prompt":
                    v = self._prompt_text(v)
                ws[k].value = v
        finally:
            self._suspend = False
        if set(kw) - {"speed"}:
            self._guard(self.restart)

    def _on_setting(self, change) -> None:
        if not self._suspend:
            self._guard(self.restart)

    def _guard(self, fn) -> None:
        """Run a callback; show any error in the view instead of raising it."""
        try:
            fn()
        except SpecnbError as e:
            self._set_error(str(e))
        except Exception as e:       # a bug, still shown rather than lost in the kernel log
            self._set_error(f"{type(e).__name__}: {e}")

    def _set_error(self, msg: str) -> None:
        self.error = msg
        self.w_error.value = error_html(msg)
        self._render_status()

    # ---- running ------------------------------------------------------------------------
    def _build_loop(self) -> SpeculativeLoop:
        s = self.settings
        prompts = self._parse_prompts(s["prompt"])
        self.prompts = prompts
        n = len(prompts)
        sps = [SamplerParams(temp=float(s["temp"]), top_k=int(s["top_k"]), top_p=float(s["top_p"]),
                             seed=int(s["seed"]) + i, **self.sampler_extra).validate() for i in range(n)]
        spec = SpecParams(n_max=s["draft_max"], n_min=s["draft_min"], p_min=float(s["p_min"]),
                          reeval=self.reeval, verify=s["verify"], synth_rates=self.synth_rates,
                          synth_len=self.synth_len).validate()
        n_predict = s["n_predict"]
        n_ctx = self.n_ctx_opt
        if n_ctx is None:
            need = max(len(p) for p in prompts) + max(int(n_predict), 1) + max(int(s["draft_max"]), 0) + 8
            n_ctx = max(64, -(-need // 64) * 64)
        ctx_t = Context(self.target, n_ctx=n_ctx, n_seq_max=n, n_threads=self.n_threads,
                        partial_seq_rm=not s["checkpoints"])
        ctx_d = Context(self.draft, n_ctx=n_ctx, n_seq_max=n, n_threads=self.n_threads)
        return SpeculativeLoop(ctx_t, ctx_d, prompts, n_predict, sps, spec, draft_seed=int(s["seed"]))

    def restart(self) -> None:
        """Stop playing and start over from the prompt with the current settings."""
        self.pause()
        with self._lock:
            self.loop, self.events, self.slot_views, self.committed = None, [], [], {}
            self.done, self.selected, self._stopped = False, None, set()
            self.error = ""
            self.w_error.value = ""
            self.prompts = []
            try:
                self.loop = self._build_loop()
                self.committed = {s: [] for s in range(len(self.prompts))}
            except SpecnbError as e:
                self.error = str(e)
                self.w_error.value = error_html(self.error)
            self._render()

    reset = restart

    def step(self):
        """Run one round; returns its RoundEvent (None when finished or not runnable)."""
        with self._lock:
            if self.loop is None or self.done:
                return None
            try:
                ev = self.loop.step()
            except SpecnbError as e:
                self._set_error(str(e))
                self.done = True
                return None
            self._apply(ev)
            self._render()
            return ev

    def _apply(self, ev) -> None:
        """Take one RoundEvent in: the only way the view's state changes during a run."""
        self.events.append(ev)
        verify = self.loop.p.verify if self.loop else "exact"
        views = {}
        for rec in ev.slots:
            sv = slot_view(rec, ev.round, self.vocab, verify)
            views[rec.seq] = sv
            self.committed.setdefault(rec.seq, []).extend(sv.committed)
        self.slot_views.append(views)
        self._stopped |= {r.seq for r in ev.slots if r.stop}
        self.done = len(self._stopped) >= len(self.prompts)

    def run_to_end(self, block: bool = True, max_rounds: int = 100000) -> None:
        """Run every remaining round: here (block=True) or in the background (block=False)."""
        if block:
            self.pause()
            for _ in range(max_rounds):
                if self.step() is None:
                    break
            return
        self._start_player(delay=None)

    def play(self) -> None:
        """Step in the background at `speed` rounds per second until paused or finished."""
        self._start_player(delay="speed")

    def toggle_play(self) -> None:
        if self.playing:
            self.pause()
        else:
            self.play()

    @property
    def playing(self) -> bool:
        return self._player is not None and self._player.is_alive()

    def _start_player(self, delay) -> None:
        self.pause()
        if self.loop is None or self.done:
            return
        self._stop = threading.Event()
        stop = self._stop

        def run():
            last_render = 0.0
            try:
                while not stop.is_set():
                    with self._lock:
                        if stop.is_set() or self.loop is None or self.done:
                            break
                        try:
                            ev = self.loop.step()
                        except SpecnbError as e:
                            self._set_error(str(e))
                            self.done = True
                            break
                        self._apply(ev)
                        now = time.perf_counter()
                        if delay is not None or now - last_render > 0.2 or self.done:
                            self._render()
                            last_render = now
                    if delay is not None:
                        stop.wait(1.0 / max(float(self.w_speed.value), 0.01))
            except Exception as e:      # never let a thread die silently
                self._set_error(f"{type(e).__name__}: {e}")
            finally:
                with self._lock:
                    self._render()
                self.b_play.description = "▶ play"

        self._player = threading.Thread(target=run, name="specnb-live-view", daemon=True)
        self.b_play.description = "❚❚ pause"
        self._player.start()

    def pause(self, timeout: float = 60.0) -> None:
        """Stop the background player (waits for the round in progress)."""
        p = self._player
        if p is None:
            return
        self._stop.set()
        if p is not threading.current_thread():
            p.join(timeout)
        self._player = None
        self.b_play.description = "▶ play"

    def wait(self, timeout: float = 60.0) -> bool:
        """Wait for a background run to finish; True when it has."""
        p = self._player
        if p is not None:
            p.join(timeout)
            return not p.is_alive()
        return True

    def close(self) -> None:
        """Stop playing and close every widget of the view."""
        self.pause()

        def close_tree(w):
            for c in getattr(w, "children", ()):
                close_tree(c)
            w.close()
        for b in self._chip_buttons:
            b.close()
        close_tree(self.widget)

    # ---- the state the view shows -----------------------------------------------------------
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
    def counters(self) -> dict:
        n_max = int(self.loop.p.n_max) if self.loop is not None else 0
        st = event_stats(self.events, n_max)
        t = st["t_round"]
        return {"rounds": st["n_rounds"], "drafted": st["n_gen_tokens"],
                "accepted": st["n_acc_tokens"], "accept_rate": st["accept_rate"],
                "acc_per_pos": st["acc_rate_per_pos"], "mean_acc_len": st["mean_acc_len"],
                "committed": st["n_committed"], "tokens_per_call": st["tokens_per_call"],
                "t_round_ms": 1e3 * t[-1] if t else 0.0,
                "t_round_mean_ms": 1e3 * st["t_round_mean"], "n_dft_eval": st["n_dft_eval"]}

    @property
    def current_chips(self) -> list:
        """The chips on show: each sequence's latest round."""
        return [c for _, sv in sorted(self.latest_views().items()) for c in sv.chips]

    def select(self, seq: int = 0, index: int = 0, p_min_stop: bool = False) -> Chip:
        """Show one chip of the latest round in the detail panel (index: its place in the row;
        p_min_stop=True: the draft candidate p_min stopped, which shares the target's index)."""
        key = (seq, index, bool(p_min_stop))
        for c in self.current_chips:
            if (c.seq, c.index, c.state == "p-min-stop") == key:
                self.w_detail_pick.value = key
                return c
        raise ParamError(f"no chip {index} for sequence {seq} in the latest round")

    def _on_pick(self, change) -> None:
        key = change["new"]
        self.selected = None
        if key is not None:
            for c in self.current_chips:
                if (c.seq, c.index, c.state == "p-min-stop") == tuple(key):
                    self.selected = c
        p_min = float(self.loop.p.p_min) if self.loop is not None else 0.0
        verify = self.loop.p.verify if self.loop is not None else "exact"
        self.w_detail.value = detail_html(self.selected, p_min, verify)

    # ---- rendering ------------------------------------------------------------------------
    def _render_status(self) -> None:
        if self.loop is None:
            st = "not running (fix the settings above)"
        elif self.done:
            reasons = sorted({r.stop for ev in self.events for r in ev.slots if r.stop})
            st = f"finished after {len(self.events)} rounds ({', '.join(reasons) or 'done'})"
        elif not self.events:
            st = "ready: press step or play"
        else:
            st = f"round {len(self.events) - 1} done"
        n = len(self.prompts)
        mode = self.settings["verify"] + (", checkpoints" if self.settings["checkpoints"] else "")
        self.w_status.value = (f'<div class="specnb-status" style="font-size:12px;color:#37474f">'
                               f'{_e(st)} · {n} sequence{"s" if n != 1 else ""} · {_e(mode)}</div>')

    def _slot_widgets(self) -> list:
        """Per sequence: header, chip row, committed text, KV strips (made once per run)."""
        n = len(self.prompts)
        if len(self._slots_w) != n:
            for ws in self._slots_w:
                for w in ws:
                    w.close()
            self._slots_w = [[W.HTML(), W.HBox([], layout=W.Layout(flex_flow="row wrap")), W.HTML(),
                              W.HTML()] for _ in range(n)]
            self.w_slots.children = [w for ws in self._slots_w for w in ws]
        return self._slots_w

    def _chip_button(self, c: Chip, p_min: float) -> W.Button:
        bg, border, fg = CHIP_STYLE[c.state]
        dash = "dashed" if c.state in ("unexamined", "p-min-stop") else "solid"
        b = W.Button(description=f"{MARK[c.state]} {visible(c.text)}", tooltip=chip_title(c, p_min),
                     layout=W.Layout(width="auto", height="26px", margin="1px 2px", padding="0 8px",
                                     border=f"2px {dash} {border}"))
        b.style.button_color = bg
        b.style.text_color = fg
        b.style.font_family = "monospace"
        if c.state == "rejected":
            b.style.text_decoration = "line-through"
        if c.state in ("replaced", "bonus"):
            b.style.font_weight = "bold"
        b.add_class("specnb-chip")
        b.add_class(f"specnb-chip-{c.state}")
        key = (c.seq, c.index, c.state == "p-min-stop")
        b.on_click(lambda _b: self._guard(lambda: setattr(self.w_detail_pick, "value", key)))
        return b

    def _render(self) -> None:
        self._render_status()
        p_min = float(self.loop.p.p_min) if self.loop is not None else 0.0
        old_buttons, self._chip_buttons = self._chip_buttons, []
        newest = self.slot_views[-1] if self.slot_views else {}
        latest = self.latest_views()
        for s, (w_head, w_chips, w_text, w_kv) in enumerate(self._slot_widgets()):
            sv = latest.get(s)
            if sv is None:
                w_head.value = (f'<div class="specnb-round-header" style="font-size:12px;margin-top:4px">'
                                f'<b>sequence {s}</b>: no round yet · prompt of {len(self.prompts[s])} '
                                f'tokens; id_last is its last token, n_past = {len(self.prompts[s]) - 1}</div>')
                w_chips.children = []
                w_text.value = committed_html(self.vocab, self.prompts[s], [], 0)
                w_kv.value = ""
                continue
            chips = [self._chip_button(c, p_min) for c in sv.chips]
            self._chip_buttons += chips
            n_new = len(sv.committed) if sv is newest.get(s) else 0
            w_head.value = slot_header_html(sv, self.vocab)
            w_chips.children = chips
            w_text.value = committed_html(self.vocab, self.prompts[s], self.committed.get(s, []), n_new)
            w_kv.value = (kv_strip_html(sv.kv["target"], "target", sv.n_past)
                          + kv_strip_html(sv.kv["draft"], "draft", sv.n_past)
                          + (KV_LEGEND if s == len(self.prompts) - 1 else ""))
        for b in old_buttons:
            b.close()
        self.w_counters.value = counters_html(self.counters)
        # the detail list: every chip of the latest round; keep the selection when it exists
        opts = [("—", None)]
        for c in self.current_chips:
            opts.append((f"seq {c.seq} · #{c.index} {MARK[c.state]} {visible(c.text)} ({c.state})",
                         (c.seq, c.index, c.state == "p-min-stop")))
        keys = [k for _, k in opts]
        cur = self.w_detail_pick.value
        fresh = len(self.events) != self._rendered_rounds     # a new round: show its first rejection
        self._rendered_rounds = len(self.events)
        pick = cur if cur in keys and cur is not None and not fresh else self._default_pick(keys)
        self.w_detail_pick.unobserve(self._on_pick, names="value")
        self.w_detail_pick.options = opts
        self.w_detail_pick.value = pick
        self.w_detail_pick.observe(self._on_pick, names="value")
        self._on_pick({"new": pick})
        self.w_history.value = self._history_html(p_min)

    def _default_pick(self, keys):
        chips = self.current_chips
        first = next((c for c in chips if c.state == "rejected"), chips[0] if chips else None)
        if first is None:
            return None
        k = (first.seq, first.index, first.state == "p-min-stop")
        return k if k in keys else None

    def _history_html(self, p_min: float) -> str:
        rows = []
        for views in reversed(self.slot_views[-self.history - 1:-1] if self.slot_views else []):
            for s, sv in sorted(views.items()):
                tags = ("⤓" if sv.checkpoint == "saved" else "") + ("⟲" if sv.checkpoint == "restored" else "") \
                    + ("↻" if sv.replay else "")
                rows.append(f'<div class="specnb-history-row" style="font-size:11px;margin:1px 0">'
                            f'<span style="display:inline-block;width:150px;color:#546e7a">round {sv.round} · '
                            f'seq {s} · n_past {sv.n_past} {tags}</span>'
                            + "".join(chip_html(c, p_min) for c in sv.chips) + "</div>")
        if not rows:
            return ""
        return ('<div class="specnb-history" style="margin-top:6px"><div style="font-size:12px;'
                'color:#37474f">earlier rounds (newest first; hover a chip for its candidates)</div>'
                + "".join(rows) + "</div>")
