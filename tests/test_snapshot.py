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


def test_a_hung_export_is_left_behind_and_drawn_again(monkeypatch):
    """A PNG export that never returns (kaleido's session browser stuck) costs PNG_TIMEOUT_S, not
    the notebook: the session server is dropped and the figure drawn once more."""
    pytest.importorskip("plotly")
    import threading

    import plotly.io as pio
    stuck = threading.Event()
    calls = []

    def to_image(fig, **kw):
        calls.append(kw)
        if len(calls) == 1:
            stuck.wait(5)                   # the first export hangs (released after the test)
        return b"png"
    dropped = []
    monkeypatch.setattr(snapshot, "kaleido_browser", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(pio, "to_image", to_image)
    monkeypatch.setattr(snapshot, "PNG_TIMEOUT_S", 0.2)
    monkeypatch.setattr(snapshot, "_drop_kaleido_server", lambda: dropped.append(True))
    assert snapshot.figure_png({"data": [], "layout": {}}) == b"png"
    assert len(calls) == 2 and dropped == [True]
    stuck.set()


def test_an_export_that_fails_gives_no_picture_and_one_warning(monkeypatch):
    pytest.importorskip("plotly")
    import plotly.io as pio

    def to_image(fig, **kw):
        raise RuntimeError("no browser")
    monkeypatch.setattr(snapshot, "kaleido_browser", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(pio, "to_image", to_image)
    monkeypatch.setattr(snapshot, "_warned", set())
    with pytest.warns(UserWarning, match="no browser"):
        assert snapshot.figure_png({"data": [], "layout": {}}) is None


def test_without_a_browser_a_figure_gets_no_picture_at_once(monkeypatch):
    """kaleido without a browser waits for one (PNG_TIMEOUT_S per notebook, seen on a fresh
    machine): figure_png asks kaleido's own finder first and, finding none, never calls it."""
    pytest.importorskip("plotly")
    import plotly.io as pio
    calls = []
    monkeypatch.setattr(snapshot, "kaleido_browser", lambda: None)
    monkeypatch.setattr(pio, "to_image", lambda fig, **kw: calls.append(kw) or b"png")
    monkeypatch.setattr(snapshot, "_warned", set())
    with pytest.warns(UserWarning, match="no Chromium or Chrome for kaleido"):
        assert snapshot.figure_png({"data": [], "layout": {}}) is None
    assert calls == []


@needs_chromium
def test_kaleido_finds_the_browser_the_pictures_need():
    pytest.importorskip("kaleido")
    assert snapshot.kaleido_browser() is not None


def test_static_figures_without_a_browser_start_no_kaleido_server(monkeypatch):
    # kaleido's server would die in its own thread and print a traceback into the notebook
    kaleido = pytest.importorskip("kaleido")
    import plotly.io as pio
    started = []
    monkeypatch.setattr(snapshot, "kaleido_browser", lambda: None)
    monkeypatch.setattr(kaleido, "start_sync_server", lambda *a, **k: started.append(True))
    old = pio.renderers.default
    try:
        snapshot.static_figures()
    finally:
        pio.renderers.default = old
    assert started == [] and snapshot.static_enabled()
