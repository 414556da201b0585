"""A live view's static picture (view/static.py): what a viewer without widgets shows."""
import base64
import re

import pytest

from specnb.figures import snapshot
from specnb.speculation.params import SpecParams
from specnb.view import MARK, LiveView, visible
from specnb.view.static import snapshot_html

PROMPT = "Once upon a time"


def test_snapshot_html_holds_what_the_view_shows(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=16, spec=SpecParams(n_max=3))
    before = snapshot_html(view)
    assert "no round yet" in before
    view.run_to_end()
    html = snapshot_html(view)
    latest = view.latest_views()[0]
    chips = re.findall(r'class="specnb-chip specnb-chip-([a-z-]+)[" ]', html)
    shown_first = chips[:len(latest.chips)]       # the latest round's chips come first
    assert shown_first == [c.state for c in latest.chips]
    for c in latest.chips:
        assert f"{MARK[c.state]} " in html and visible(c.text).replace("&", "&amp;")[:3] in html
    c = view.counters
    assert f'data-counter="rounds">{c["rounds"]}<' in html
    assert f'data-counter="committed">{c["committed"]}<' in html
    assert html.count("specnb-kv-strip specnb-kv-target") == 1
    assert "specnb-impl-legend" in html and 'data-impl="draft-simple"' in html
    assert html.count("specnb-history-row") == min(view.history, c["rounds"] - 1)


def test_display_adds_a_png_only_when_static_pictures_are_on(pair, monkeypatch):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=8, spec=SpecParams(n_max=2))
    view.run_to_end()
    monkeypatch.setitem(snapshot._STATIC, "on", False)
    assert "image/png" not in view._repr_mimebundle_()
    monkeypatch.setitem(snapshot._STATIC, "on", True)
    fake = b"\x89PNG\r\n\x1a\nfake"
    monkeypatch.setattr("specnb.view.static.snapshot_png", lambda v, width=960: fake)
    bundle = view._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]) == fake
    assert "application/vnd.jupyter.widget-view+json" in bundle      # the live widget stays
    shown = []                       # a notebook cell ending in `view` goes through _ipython_display_
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append((obj, raw)))
    view._ipython_display_()
    (obj, raw), = shown
    assert raw and base64.b64decode(obj["image/png"]) == fake
    assert "application/vnd.jupyter.widget-view+json" in obj


@pytest.mark.skipif(snapshot.find_chromium() is None, reason="no Chromium (apt-get install -y chromium)")
def test_snapshot_png_is_a_picture_of_the_view(pair):
    from specnb.view.static import SNAPSHOT_WIDTH_PX, snapshot_png
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=8, spec=SpecParams(n_max=2))
    view.run_to_end()
    png = snapshot_png(view)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert w == SNAPSHOT_WIDTH_PX and 150 < h < 3000
