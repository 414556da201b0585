"""The live view in a real browser: Voilà and JupyterLab on 127.0.0.1, Debian's Chromium driven
headless by Playwright (launched from /usr/bin/chromium: nothing downloads a browser).

Each test serves tests/browser/live_view.ipynb, lets the server run it, presses "step" a few
times, and checks in the rendered page that the chips, the KV cells and the counters are those
the same view shows when stepped here in Python. Screenshots go to test-artifacts/.
Where Chromium, Playwright or the server is missing, the test skips and says why.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "tests" / "browser" / "live_view.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
# the notebook's settings (SPECNB_LV_SETTINGS): "spec" / "sampling" hold SpecParams / SamplerParams fields
SETTINGS = dict(prompt="Once upon a time", n_predict=24, spec=dict(n_max=4))
N_STEPS = 4
# waits (seconds): the first render runs the notebook, which compiles the Numba kernels
T_SERVER, T_RENDER, T_ROUND = 90, 900, 180


def find_chromium():
    for c in (os.environ.get("SPECNB_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def require_browser():
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium found (looked at $SPECNB_CHROMIUM, /usr/bin/chromium and PATH); "
                    "install Debian's package: apt-get install -y chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the 'playwright' Python package is not installed (pip install playwright; "
                    "no browser download is needed: the test uses Debian's Chromium)")
    return chromium


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def models(pair_paths):
    """The tiny pair's files (conftest), which the served notebook loads."""
    return str(pair_paths[0]), str(pair_paths[1])


@pytest.fixture(scope="module")
def expected(models):
    """The same view stepped here: what the page must show after N_STEPS rounds."""
    from specnb.model import load_model
    from specnb import LiveView, SamplerParams, SpecParams
    s = dict(SETTINGS)
    sampling = s.pop("sampling", None)
    view = LiveView(load_model(models[0]), load_model(models[1]), s.pop("prompt"),
                    spec=SpecParams(**s.pop("spec", {})),
                    sampling=None if sampling is None else SamplerParams(**sampling), **s)
    for _ in range(N_STEPS):
        assert view.step() is not None
    states = [st for views in view.chip_states for sts in views.values() for st in sts]
    kv = view.kv_cells[0]
    out = {"chips": {k: states.count(k) for k in ("accepted", "rejected", "unexamined", "replaced", "bonus")},
           "kv": {k: kv["target"].count(k) + kv["draft"].count(k) for k in ("committed", "written", "rolled-back")},
           "counters": {k: str(view.counters[k]) for k in ("rounds", "drafted")}}
    view.close()
    assert out["chips"]["accepted"] and out["chips"]["rejected"], "the pair should show both"
    return out


class Server:
    """jupyter lab or voila in its own process group on 127.0.0.1, killed at the end."""

    def __init__(self, kind: str, workdir: Path, env: dict):
        self.kind, self.port = kind, free_port()
        shutil.copy(NOTEBOOK, workdir / "live_view.ipynb")
        for sub in ("runtime", "config", "data", "ipython", "ws", "settings"):
            (workdir / sub).mkdir(exist_ok=True)
        # JupyterLab: no "official Jupyter news?" toast over the page
        note = workdir / "settings" / "@jupyterlab" / "apputils-extension"
        note.mkdir(parents=True, exist_ok=True)
        (note / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
        env = dict(os.environ, **env, JUPYTER_RUNTIME_DIR=str(workdir / "runtime"),
                   JUPYTER_CONFIG_DIR=str(workdir / "config"), JUPYTER_DATA_DIR=str(workdir / "data"),
                   IPYTHONDIR=str(workdir / "ipython"))
        if kind == "voila":
            cmd = [sys.executable, "-m", "voila", "live_view.ipynb", "--no-browser",
                   f"--port={self.port}", "--Voila.ip=127.0.0.1", "--Voila.port_retries=0",
                   f"--VoilaExecutor.timeout={T_RENDER}", "--show_tracebacks=True"]
            self.url = f"http://127.0.0.1:{self.port}/"
        else:
            cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                   f"--port={self.port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
                   f"--ServerApp.root_dir={workdir}",
                   "--LabApp.expose_app_in_browser=True", f"--LabApp.workspaces_dir={workdir / 'ws'}",
                   f"--LabApp.user_settings_dir={workdir / 'settings'}", "--LabApp.news_url=",
                   "--ServerApp.open_browser=False"] + (["--allow-root"] if os.geteuid() == 0 else [])
            self.url = f"http://127.0.0.1:{self.port}/lab/tree/live_view.ipynb"
        self.log = open(workdir / f"{kind}.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.logfile = workdir / f"{kind}.log"

    def wait_ready(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.kind} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        pytest.fail(f"{self.kind} did not listen on 127.0.0.1:{self.port} within {timeout} s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        self.log.flush()
        return self.logfile.read_text(errors="replace")[-n:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)      # the server and its kernels
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(15)
        self.log.close()


def rounds_is(page, n: int, timeout_s: float) -> None:
    page.wait_for_function(
        "n => { const e = document.querySelector('[data-counter=\"rounds\"]');"
        " return e !== null && e.textContent.trim() === String(n); }", arg=n, timeout=timeout_s * 1e3)


def counts(page) -> dict:
    return page.evaluate("""() => {
        const q = s => document.querySelectorAll(s).length;
        const chips = {}, kv = {}, counters = {};
        for (const k of ['accepted', 'rejected', 'unexamined', 'replaced', 'bonus'])
            chips[k] = q('.specnb-live-view .specnb-chip-' + k);
        for (const k of ['committed', 'written', 'rolled-back'])
            kv[k] = q('.specnb-live-view .specnb-kv-cell.specnb-kv-' + k);
        for (const e of document.querySelectorAll('.specnb-counter'))
            counters[e.dataset.counter] = e.textContent.trim();
        return {chips, kv, counters};
    }""")


def drive(page, server: Server, expected: dict, shot: Path) -> None:
    """Step N_STEPS rounds, check the page against the expected state, play and pause."""
    page.wait_for_selector(".specnb-live-view .specnb-btn-step", timeout=T_RENDER * 1e3)
    rounds_is(page, 0, T_ROUND)
    assert page.locator(".specnb-live-view .specnb-error").count() == 0
    for i in range(N_STEPS):
        page.locator(".specnb-live-view .specnb-btn-step").first.click()
        rounds_is(page, i + 1, T_ROUND)
    page.wait_for_timeout(300)      # the last round's chips and strips arrive with the counters
    got = counts(page)
    assert got["chips"] == expected["chips"], (got, expected)
    assert got["kv"] == expected["kv"], (got, expected)
    for k, v in expected["counters"].items():
        assert got["counters"][k] == v, (k, got["counters"], expected)
    # hover text: a chip carries the draft's candidates and the target's sample
    tip = page.locator(".specnb-live-view button.specnb-chip-accepted").first.get_attribute("title")
    assert tip and "draft top candidates" in tip and "target sampled" in tip
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.locator(".specnb-live-view").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shot), full_page=True)
    # play, then pause: the counters move on their own
    page.locator(".specnb-live-view .specnb-btn-play").first.click()
    page.wait_for_function(
        "n => Number(document.querySelector('[data-counter=\"rounds\"]').textContent) >= n",
        arg=N_STEPS + 2, timeout=T_ROUND * 1e3)
    page.locator(".specnb-live-view .specnb-btn-play").first.click()
    page.wait_for_function(
        "() => document.querySelector('.specnb-btn-play').textContent.includes('play')",
        timeout=T_ROUND * 1e3)


@pytest.mark.parametrize("kind", ["voila", "jupyterlab"])
def test_live_view_in_browser(kind, models, expected, tmp_path):
    chromium = require_browser()
    mod = "voila" if kind == "voila" else "jupyterlab"
    try:
        __import__(mod)
    except ImportError:
        pytest.skip(f"{mod} is not installed (pip install {mod})")
    from playwright.sync_api import sync_playwright
    env = {"SPECNB_LV_TARGET": models[0], "SPECNB_LV_DRAFT": models[1],
           "SPECNB_LV_SETTINGS": json.dumps({k: v for k, v in SETTINGS.items()})}
    ARTIFACTS.mkdir(exist_ok=True)
    server = Server(kind, tmp_path, env)
    try:
        server.wait_ready(T_SERVER)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True,
                                         timeout=60_000)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1100})
                page.set_default_timeout(T_ROUND * 1e3)
                page.goto(server.url, wait_until="commit", timeout=T_RENDER * 1e3)
                if kind == "jupyterlab":
                    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell "
                                           "&& window.jupyterapp.shell.currentWidget "
                                           "&& window.jupyterapp.shell.currentWidget.sessionContext",
                                           timeout=T_SERVER * 1e3)
                    page.evaluate("""async () => {
                        const app = window.jupyterapp, w = app.shell.currentWidget;
                        await w.sessionContext.ready;
                        await app.commands.execute('notebook:run-all-cells');
                    }""")
                shot = ARTIFACTS / ("live_view.png" if kind == "voila" else "live_view_jupyterlab.png")
                try:
                    drive(page, server, expected, shot)
                except Exception:
                    page.screenshot(path=str(ARTIFACTS / f"live_view_{kind}_failed.png"), full_page=True)
                    raise
            finally:
                browser.close()
    except Exception as e:
        raise AssertionError(f"{kind}: {e}\n--- server log ---\n{server.tail()}") from e
    finally:
        server.stop()
