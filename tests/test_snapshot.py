"""specnb.figures.snapshot: static pictures beside live outputs (headless Chromium; skipped without it)."""
import base64
import struct

import pytest

from specnb.figures import snapshot

needs_chromium = pytest.mark.skipif(snapshot.find_chromium() is None,
                                    reason="no Chromium (apt-get install -y chromium)")


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


@needs_chromium
def test_html_png_is_as_wide_as_asked_and_as_tall_as_the_content():
    short = snapshot.html_png("<p>one line</p>", width=400)
    tall = snapshot.html_png("<p>" + "line<br>" * 60 + "</p>", width=400)
    (w1, h1), (w2, h2) = png_size(short), png_size(tall)
    assert w1 == w2 == 400
    assert h1 < 120 < 900 < h2          # 60 lines of text are far taller than one


def test_html_png_without_chromium_warns_once_and_gives_none(monkeypatch):
    monkeypatch.setattr(snapshot, "find_chromium", lambda: None)
    monkeypatch.setattr(snapshot, "_warned", set())
    with pytest.warns(UserWarning, match="no Chromium"):
        assert snapshot.html_png("<p>x</p>") is None
    assert snapshot.png_bundle(None) == {}


@needs_chromium
def test_static_figures_store_a_png_beside_the_interactive_figure():
    pytest.importorskip("kaleido")
    import plotly.graph_objects as go
    import plotly.io as pio
    old = pio.renderers.default
    try:
        snapshot.static_figures()
        bundle = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))._repr_mimebundle_()
    finally:
        pio.renderers.default = old
    assert "application/vnd.plotly.v1+json" in bundle
    w, h = png_size(base64.b64decode(bundle["image/png"]))
    assert (w, h) == snapshot.FIGURE_SIZE
