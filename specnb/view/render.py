"""The live view's HTML rendering: pure functions from the state model (view/state.py) to markup.

Every element carries a `specnb-*` class (chips `specnb-chip-<state>`, KV cells
`specnb-kv-<state>` with `data-pos`, counters `data-counter`), which the tests and the browser
check read. Colours: accepted green, rejected red, the target's own token blue.
"""
from __future__ import annotations

import html
import math

from .state import Chip, SlotView, piece

KV_WINDOW = 64                # KV cells shown per strip; a longer committed prefix is folded
COUNTER_BAR_PX = 80           # width of a full (rate 1) bar in the acceptance-per-position panel
DETAIL_BAR_PX = 120           # width of a p = 1 bar in the detail panel's candidate table

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
# who proposed a draft chip (the chain's impl types): the mark after its text, its colour, words
IMPL_MARK = {"draft-simple": "◆", "ngram-simple": "#", "ngram-map-k": "#k", "ngram-map-k4v": "#v",
             "ngram-mod": "#m", "ngram-cache": "#c"}
IMPL_COLOUR = {"draft-simple": "#6a1b9a", "ngram-simple": "#00838f", "ngram-map-k": "#00695c",
               "ngram-map-k4v": "#2e7d32", "ngram-mod": "#1565c0", "ngram-cache": "#4e342e"}
IMPL_WORDS = {"draft-simple": "the draft model (draft-simple)",
              "ngram-simple": "an n-gram lookup in the history (ngram-simple)",
              "ngram-map-k": "an n-gram map of the history (ngram-map-k)",
              "ngram-map-k4v": "an n-gram map with its most frequent continuation (ngram-map-k4v)",
              "ngram-mod": "a hash table of n-grams (ngram-mod)",
              "ngram-cache": "the n-gram caches (ngram-cache)"}
KV_WORDS = {"committed": "committed before this round", "written": "written this round, kept",
            "rolled-back": "written this round, rolled back", "empty": "empty"}


def visible(text: str) -> str:
    """Whitespace made visible for chips: ␣ space, ↵ newline, ⇥ tab."""
    return (text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")) or "∅"


# ---- pieces --------------------------------------------------------------------------------
def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _fmt_p(p) -> str:
    return "—" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.3f}"


def impl_mark(impl: str) -> str:
    """The mark of the impl that proposed a chip ("" for the target's own token)."""
    return IMPL_MARK.get(impl, impl[:1]) if impl else ""


def impl_words(impl: str) -> str:
    return IMPL_WORDS.get(impl, impl)


def ngram_words(c: Chip) -> str:
    """What an n-gram draft matched, in words (common_ngram_simple_draft: the latest earlier
    occurrence of the last n tokens; ngram-map-k: the first occurrence it indexed; ngram-mod: a
    hashed n-gram; ngram-cache: a cache entry)."""
    gram = "".join(f"[{t}]" for t in c.ngram_text)
    ids = " ".join(str(t) for t in c.ngram)
    if c.match_pos is None or c.match_pos < 0:
        where = f"the {c.cache} cache" if c.cache else "the caches"
        return f"the n-gram {gram} (ids {ids}) was looked up in {where}, which proposed this token"
    src = c.match_pos + len(c.ngram) + c.index
    return (f"the last {len(c.ngram)} tokens {gram} (ids {ids}) occurred earlier at position "
            f"{c.match_pos}; the draft copies what followed them (this token: position {src})")


def chip_title(c: Chip, p_min: float | None = None) -> str:
    """The hover text of a chip: its state, who proposed it, the draft's top candidates or the
    matched n-gram, the target's sample."""
    lines = [f"{MARK[c.state]} {c.text!r} (id {c.token}) at position {c.pos}: {WORDS[c.state]}"]
    if c.impl:
        lines.append(f"{impl_mark(c.impl)} proposed by {impl_words(c.impl)}")
    if c.is_ngram:
        lines.append(ngram_words(c))
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


def chip_border(state: str) -> str:
    """Dashed for what the target never examined (after a rejection, the p_min stop)."""
    return "dashed" if state in ("unexamined", "p-min-stop") else "solid"


def chip_html(c: Chip, p_min: float | None = None) -> str:
    bg, border, fg = CHIP_STYLE[c.state]
    deco = "text-decoration:line-through;" if c.state == "rejected" else ""
    dash = chip_border(c.state)
    impl = (f' specnb-impl-{_e(c.impl)}" data-impl="{_e(c.impl)}' if c.impl else "")
    mark = (f'<sup class="specnb-impl-mark" style="color:{IMPL_COLOUR.get(c.impl, "#37474f")};'
            f'margin-left:2px">{_e(impl_mark(c.impl))}</sup>' if c.impl else "")
    return (f'<span class="specnb-chip specnb-chip-{c.state}{impl}" title="{_e(chip_title(c, p_min))}" '
            f'style="display:inline-block;margin:1px 2px;padding:1px 6px;border:2px {dash} {border};'
            f'border-radius:10px;background:{bg};color:{fg};font-family:monospace;font-size:12px;{deco}">'
            f'{MARK[c.state]} {_e(visible(c.text))}{mark}</span>')


def impl_legend_html(types) -> str:
    """The legend of who proposes draft tokens: one mark per impl of the chain, in the order
    the chain tries them (n-gram lookups first, the draft model for what they leave)."""
    types = list(types)
    if not types:
        body = "spec-type none: no speculation, the target decodes alone"
    else:
        body = "draft tokens proposed by: " + " · ".join(
            f'<span class="specnb-impl-key" data-impl="{_e(t)}"><b style="color:'
            f'{IMPL_COLOUR.get(t, "#37474f")}">{_e(impl_mark(t))}</b> {_e(impl_words(t))}</span>'
            for t in types)
        if len(types) > 1:
            body += " (tried in this order; the first that drafts a sequence wins the round)"
    return f'<div class="specnb-impl-legend" style="font-size:11px;color:#455a64;margin:2px 0">{body}</div>'


def kv_strip_html(states: list, label: str, n_past: int, window: int = KV_WINDOW,
                  empty: str = "") -> str:
    """One context's cells as a row of small squares; long committed prefixes are folded;
    `empty` is shown instead when there are no cells (no such context)."""
    start = max(0, min(n_past, len(states)) - window // 2) if len(states) > window else 0
    cells = [] if states or not empty else [
        f'<span class="specnb-kv-none" style="font-size:11px;color:#78909c">{_e(empty)}</span>']
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



def kv_strips_html(sv: SlotView) -> str:
    """A round's two strips: the target's KV cells, then the draft's (or why there are none)."""
    return (kv_strip_html(sv.kv["target"], "target", sv.n_past)
            + kv_strip_html(sv.kv["draft"], "draft", sv.n_past,
                            empty="no draft context (no draft-simple in the chain)"))

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
        f'width:{int(COUNTER_BAR_PX * r)}px;background:#2e7d32;margin-right:4px"></span>{r:.2f}</div>'
        for i, r in enumerate(per))
    rows = [row("rounds", "rounds (target calls)", c["rounds"]),
            row("drafted", "drafted", c["drafted"]),
            row("accepted", "accepted", f'{c["accepted"]} ({100 * c["accept_rate"]:.1f}%)'),
            row("mean_acc_len", "mean accepted length", f'{c["mean_acc_len"]:.3f}'),
            row("tokens_per_call", "tokens per target call", f'{c["tokens_per_call"]:.3f}'),
            row("committed", "tokens committed", c["committed"]),
            row("t_round_ms", "time per round", f'{c["t_round_ms"]:.1f} ms'),
            row("t_round_mean_ms", "mean time per round", f'{c["t_round_mean_ms"]:.1f} ms')]
    if c.get("draft_len_chosen"):                   # --spec-draft-n-max auto / heuristic
        rows.append(row("draft_len_chosen", "draft length chosen (d: rounds)",
                        ", ".join(f"{d}: {n}" for d, n in c["draft_len_chosen"].items())))
    for t, v in c.get("by_impl", {}).items():        # per impl of the chain
        rows.append(row(f"impl-{t}", f"{impl_mark(t)} {t}: drafted / accepted",
                        f'{v["drafted"]} / {v["accepted"]}'))
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
    if c.impl:
        body.append(f'<div class="specnb-drafted-by" data-impl="{_e(c.impl)}" style="margin-top:2px">'
                    f'<b style="color:{IMPL_COLOUR.get(c.impl, "#37474f")}">{_e(impl_mark(c.impl))}</b>'
                    f' proposed by {_e(impl_words(c.impl))}</div>')
    if c.is_ngram:
        gram = "".join(f'<code style="background:#e0f2f1;margin-right:1px">{_e(visible(t))}</code>'
                       for t in c.ngram_text)
        body.append(f'<div class="specnb-ngram" style="margin-top:2px">matched n-gram {gram}: '
                    f'{_e(ngram_words(c))}</div>')
    rejection = verify == "rejection"
    if c.top:
        pm = (f'p_min = {p_min:g}: the draft keeps drafting while its argmax has p ≥ p_min'
              if p_min > 0 else "p_min = 0: no confidence floor")
        if c.state == "p-min-stop":
            pm = f'p_min = {p_min:g}: the argmax had p = {c.draft_p:.3f} &lt; p_min, so drafting stopped here'
        what = ("q, the distribution the draft token was sampled from (the target's sampler chain "
                "over the draft's logits), its ten likeliest tokens" if rejection else
                f"draft top candidates, top-10 renormalized ({pm}; red bars are under p_min)")
        floor = 0.0 if rejection else p_min
        rows = "".join(
            f'<tr style="{"font-weight:bold;" if t == c.token else ""}'
            f'{"background:#e3f2fd;" if t == c.target_token else ""}">'
            f'<td style="padding:0 6px;font-family:monospace">{_e(visible(txt))}</td>'
            f'<td style="padding:0 6px;color:#78909c">{t}</td>'
            f'<td style="padding:0 6px"><span style="display:inline-block;height:9px;'
            f'width:{int(DETAIL_BAR_PX * p)}px;background:{"#c62828" if p < floor else "#2e7d32"}"></span> {p:.3f}</td>'
            f'<td style="padding:0 6px;font-size:11px">{"draft" if t == c.token else ""}'
            f'{" target" if t == c.target_token else ""}</td></tr>'
            for t, txt, p in c.top)
        body.append(f'<div style="margin-top:4px">{_e(what)}:</div>'
                    f'<table class="specnb-top" style="font-size:12px">{rows}</table>')
    if rejection and c.is_draft:
        how = ("the draft token was sampled from q; the target keeps it with probability "
               "min(1, p/q), else samples from norm(max(0, p - q))" if c.top else
               "a deterministic draft (q is one-hot): the target keeps it with probability p, "
               "else samples from p without it")
        body.append(f'<div class="specnb-rejection-note" style="font-size:12px;color:#455a64">'
                    f'rejection-sampling mode: {_e(how)}</div>')
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
    if sv.stop_reason:
        badges.append(("specnb-stop", "#37474f", f"■ stopped: {sv.stop_reason}"))
    b = "".join(f'<span class="{cls}" style="margin-left:8px;padding:0 6px;border-radius:8px;'
                f'border:1px solid {col};color:{col};font-size:11px">{_e(txt)}</span>'
                for cls, col, txt in badges)
    n_draft_chips = len(sv.chips) - 1 - sum(c.state == "p-min-stop" for c in sv.chips)   # replayed ones too
    return (f'<div class="specnb-round-header" style="font-size:12px;margin-top:4px">'
            f'<b>round {sv.round}</b> · sequence {sv.seq} · id_last '
            f'<code>{_e(visible(piece(vocab, sv.id_last)))}</code> (id {sv.id_last}) at n_past = '
            f'<b class="specnb-n-past">{sv.n_past}</b> · drafted {n_draft_chips}'
            + (f' by <span class="specnb-round-impl" data-impl="{_e(sv.impl)}">'
               f'{_e(impl_mark(sv.impl))} {_e(sv.impl)}</span>' if sv.impl else "")
            + f' · accepted {sv.n_accepted if not sv.replay else 0} · committed {len(sv.committed)}'
            + draft_len_html(sv.draft_len) + f'{b}</div>')


def draft_len_html(dl: dict | None) -> str:
    """--spec-draft-n-max auto / heuristic: the length chosen for this round and the expected gain behind
    it (expected tokens, and tokens per second over plain decoding's)."""
    if not dl:
        return ""
    why = {"best": "best expected rate", "probe": "probe (d = 0 wins; re-measuring)",
           "start-up": "start-up measurement", "schedule": "schedule",
           "no gain": "no length pays even at full acceptance"}.get(dl["reason"], dl["reason"])
    gain = (f", expected {dl['expected_tokens']:.2f} tokens, {dl['gain']:.2f}x plain"
            if dl.get("gain") else "")
    title = ""
    if dl.get("rates") and dl.get("plain_rate"):
        title = "expected speed over plain per length: " + ", ".join(
            f"{d}: {r / dl['plain_rate']:.2f}x" for d, r in enumerate(dl["rates"]))
    return (f' · <span class="specnb-draft-len" data-d="{dl["d"]}" title="{_e(title)}">chose '
            f'd = <b>{dl["d"]}</b> ({_e(why)}{gain})</span>')


def error_html(msg: str) -> str:
    if not msg:
        return ""
    return (f'<div class="specnb-error" role="alert" style="border:2px solid #c62828;background:#ffebee;'
            f'color:#b71c1c;padding:4px 8px;border-radius:4px;font-size:13px">⚠ {_e(msg)}</div>')



def status_html(text: str, n_seq: int, mode: str) -> str:
    """The status line: where the run is, how many sequences, the verification mode."""
    return (f'<div class="specnb-status" style="font-size:12px;color:#37474f">'
            f'{_e(text)} · {n_seq} sequence{"s" if n_seq != 1 else ""} · {_e(mode)}</div>')


def no_round_header_html(seq: int, n_prompt: int) -> str:
    """A sequence's header before its first round: id_last is the prompt's last token."""
    return (f'<div class="specnb-round-header" style="font-size:12px;margin-top:4px">'
            f'<b>sequence {seq}</b>: no round yet · prompt of {n_prompt} '
            f'tokens; id_last is its last token, n_past = {n_prompt - 1}</div>')


def history_html(slot_views: list, history: int, p_min: float) -> str:
    """The `history` rounds before the latest, newest first, one row of chips per sequence."""
    rows = []
    for views in reversed(slot_views[-history - 1:-1] if slot_views else []):
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
