"""A live view as one static picture: the state it shows now, drawn as HTML and then as a PNG.

A committed notebook has no widget state, so GitHub and nbviewer cannot draw a live view: they
fall back to the next mime type a cell's output carries. `snapshot_html(view)` lays out what the
view shows at this moment (each sequence's latest round: header, chips, committed text, KV
strips; the counters; the earlier rounds) with the same pure render functions the widgets use,
and `LiveView._repr_mimebundle_` adds its PNG (specnb/figures/snapshot.py, headless Chromium) once
`snapshot.static_figures()` has been called, as the course's notebooks do in their first cell.
"""
from __future__ import annotations

from .render import (KV_LEGEND, chip_html, committed_html, counters_html, history_html, impl_legend_html,
    kv_strips_html, no_round_header_html, slot_header_html)

SNAPSHOT_WIDTH_PX = 960


def snapshot_html(view) -> str:
    """The live view's current state as one self-contained HTML fragment."""
    run, p_min = view.run, view._p_min
    latest = run.latest_views()
    slots = []
    for s, prompt in enumerate(view.prompts):
        sv = latest.get(s)
        if sv is None:
            slots.append(no_round_header_html(s, len(prompt))
                         + committed_html(view.vocab, prompt, [], 0))
            continue
        slots.append(slot_header_html(sv, view.vocab)
                     + '<div style="margin:2px 0">' + "".join(chip_html(c, p_min) for c in sv.chips)
                     + "</div>"
                     + committed_html(view.vocab, prompt, run.committed.get(s, []), 0)
                     + kv_strips_html(sv))
    return ('<div class="specnb-live-view-snapshot" style="font-family:sans-serif;border:1px solid '
            '#cfd8dc;padding:6px;width:930px"><div style="font-size:15px;font-weight:bold">specnb '
            'live view (a picture of the state it shows; run the notebook to step through it)</div>'
            '<div style="display:flex;align-items:flex-start"><div style="flex:1 1 auto">'
            + (impl_legend_html(run.types) if view.loop is not None else "")
            + "".join(slots) + KV_LEGEND + '</div><div style="flex:0 0 270px;margin-left:10px">'
            + counters_html(view.counters) + "</div></div>"
            + history_html(run.slot_views, view.history, p_min) + "</div>")


def snapshot_png(view, width: int = SNAPSHOT_WIDTH_PX) -> bytes | None:
    """A PNG of `snapshot_html(view)`, or None when no Chromium can draw it."""
    from ..figures.snapshot import html_png
    return html_png(snapshot_html(view), width=width)
