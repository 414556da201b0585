"""Static pictures beside live outputs, so a notebook reads without running it.

A plotly figure is stored in a notebook as plotly's JSON, which only a running JupyterLab draws; a
live view is stored as a widget reference, which nothing draws once its kernel is gone. GitHub and
nbviewer show neither. specnb stores a PNG beside each: a notebook front end picks the richest
output it can draw (the interactive one in JupyterLab, the picture in a static viewer).

- `static_figures()`: from then on, plotly figures shown in the notebook carry a PNG too
  (rendered by kaleido, which drives the machine's Chromium).
- `html_png(html, width)`: a PNG of an HTML fragment (the live view's static rendering), by
  headless Chromium.

Both are best effort: without Chromium the interactive output is shown alone, with one warning.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tempfile
import warnings

CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-dev-shm-usage", "--force-device-scale-factor=1")
FIGURE_SIZE = (900, 480)          # plotly's default when a figure sets no width/height
RENDER_TIMEOUT_S = 60
_warned: set = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, stacklevel=3)


def find_chromium() -> str | None:
    """$SPECNB_CHROMIUM, Debian's /usr/bin/chromium, or chromium on PATH."""
    for c in (os.environ.get("SPECNB_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


# ---- HTML -> PNG ------------------------------------------------------------------------------
_MEASURE = ("<script>window.addEventListener('load', () => document.body.setAttribute("
            "'data-specnb-height', Math.ceil(document.documentElement.getBoundingClientRect()"
            ".height)));</script>")


def _page(html: str, width: int) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'><style>html,body{margin:0;"
            f"background:#fff;font-family:sans-serif}}#specnb-snap{{width:{width}px;padding:8px;"
            f"box-sizing:border-box}}</style></head><body><div id='specnb-snap'>{html}</div>"
            f"{_MEASURE}</body></html>")


def _chromium(chromium: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="specnb-chromium-") as profile:
        return subprocess.run([chromium, *CHROMIUM_ARGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, timeout=RENDER_TIMEOUT_S)


def html_png(html: str, width: int = 960) -> bytes | None:
    """A PNG of `html` laid out `width` pixels wide and as tall as it is, or None (with one
    warning) when no Chromium can be run. Two headless runs: one measures the height, one draws."""
    chromium = find_chromium()
    if chromium is None:
        _warn_once("chromium", "no Chromium found (looked at $SPECNB_CHROMIUM, /usr/bin/chromium "
                               "and PATH): outputs are stored without a static picture")
        return None
    with tempfile.TemporaryDirectory(prefix="specnb-snapshot-") as d:
        page = os.path.join(d, "page.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(_page(html, width))
        url = "file://" + page
        try:
            dom = _chromium(chromium, "--virtual-time-budget=2000", "--dump-dom", url)
            m = re.search(rb'data-specnb-height="(\d+)"', dom.stdout)
            height = min(int(m.group(1)) if m else 1200, 16000)
            out = os.path.join(d, "page.png")
            _chromium(chromium, "--virtual-time-budget=2000", f"--screenshot={out}",
                      f"--window-size={width},{max(height, 16)}", url)
            with open(out, "rb") as f:
                return f.read()
        except (OSError, subprocess.SubprocessError) as e:
            _warn_once("chromium-run", f"{chromium} could not draw a static picture ({e}); "
                                       "outputs are stored without one")
            return None


def png_bundle(png: bytes | None) -> dict:
    """{'image/png': base64} for a display mime bundle (empty without a picture)."""
    return {"image/png": base64.b64encode(png).decode("ascii")} if png else {}


# ---- plotly figures ---------------------------------------------------------------------------
def kaleido_browser() -> str | None:
    """The Chromium-based browser kaleido would drive (its own finder: a downloaded Chrome, then
    the usual names and places), or None."""
    try:
        from choreographer.browsers.chromium import Chromium
        return Chromium.find_browser(skip_local=False)
    except Exception:           # noqa: BLE001 (another kaleido: look for Chromium ourselves)
        return find_chromium()


def figure_png(fig, width: int | None = None, height: int | None = None) -> bytes | None:
    """A PNG of a plotly figure (or its dict) through kaleido, or None (with one warning).
    Without a browser for kaleido it returns None at once (kaleido would wait for one)."""
    import plotly.io as pio
    if kaleido_browser() is None:
        _warn_once("kaleido-browser", "no Chromium or Chrome for kaleido (apt-get install -y chromium): "
                                      "plotly figures are stored without a static picture")
        return None
    layout = (fig.get("layout", {}) if isinstance(fig, dict) else fig.layout.to_plotly_json())
    w = width or layout.get("width") or FIGURE_SIZE[0]
    h = height or layout.get("height") or FIGURE_SIZE[1]
    def render():
        return pio.to_image(fig, format="png", width=w, height=h)

    try:
        png = _within(render, PNG_TIMEOUT_S)
        if png is None:
            # the session's browser stopped answering (seen on an overloaded machine): leave it,
            # and draw this and later figures with a browser of their own
            _drop_kaleido_server()
            png = _within(render, PNG_TIMEOUT_S)
        if png is None:
            _warn_once("kaleido-timeout", f"kaleido drew no picture within {PNG_TIMEOUT_S} s; "
                                          "figures are stored without one")
        return png
    except Exception as e:       # kaleido missing, or no browser for it to drive
        _warn_once("kaleido", f"plotly figures are stored without a static picture ({e})")
        return None


PNG_TIMEOUT_S = 120
# kaleido's server ignores per-call options, and says so on every call; the filter is set once
# and for good (catch_warnings in the render thread would restore the process's filters whenever
# a stuck export finally returns, over whatever was set meanwhile)
warnings.filterwarnings("ignore", message="The kopts argument is ignored", category=UserWarning)


def _within(fn, timeout_s: float):
    """fn()'s result, or None when it has not returned within timeout_s (it is left running in a
    daemon thread); its exception is raised here."""
    import threading
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:          # noqa: BLE001 (handed to the caller)
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _drop_kaleido_server() -> None:
    """Forget kaleido's session-wide server without waiting for it (its thread is stuck), so
    plotly's next export starts a browser of its own."""
    try:
        import kaleido
        kaleido._global_server._initialized = False     # noqa: SLF001 (close() would wait forever)
    except Exception:     # noqa: BLE001 (an older kaleido: nothing to drop)
        pass


_STATIC = {"on": False}


def static_enabled() -> bool:
    """Whether static_figures() was called in this process (live views then add a PNG too)."""
    return _STATIC["on"]


def static_figures() -> None:
    """Make plotly's notebook output carry a PNG beside the interactive figure, and live views a
    PNG of what they show, from now on."""
    _STATIC["on"] = True
    import plotly.io as pio
    from plotly.io._base_renderers import MimetypeRenderer

    class StaticPng(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            return png_bundle(figure_png(fig_dict))

    pio.renderers["specnb_png"] = StaticPng()
    pio.renderers.default = "plotly_mimetype+specnb_png"
    if kaleido_browser() is None:
        return    # no browser: no server (its thread would die printing a traceback in the notebook)
    try:      # one browser for every figure of the session (a fresh one per figure takes seconds)
        import atexit
        import kaleido
        kaleido.start_sync_server(silence_warnings=True)
        atexit.register(kaleido.stop_sync_server, silence_warnings=True)
    except Exception:     # an older kaleido, or none: figure_png says so on first use
        pass
