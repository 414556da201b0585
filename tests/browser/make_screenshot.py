"""Make the README's screenshot of the live view: Voilà serving live_view.ipynb on the default
pair, Debian's Chromium driven by Playwright, a few rounds stepped, the view saved as a PNG.

    python tests/browser/make_screenshot.py [OUT.png] [--rounds N] [--tiny]

OUT defaults to docs/live_view.png. Uses the same server set-up as tests/test_browser.py.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import test_browser as tb  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(tb.ROOT / "docs" / "live_view.png"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="a tiny forged pair instead of the default")
    ap.add_argument("--settings", default='{"prompt": "The capital of France is", "n_predict": 48, '
                                          '"draft_max": 5, "temp": 0.0}')
    a = ap.parse_args()
    chromium = tb.find_chromium()
    if chromium is None:
        print("no Chromium found: apt-get install -y chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright
    env = {"SPECNB_LV_SETTINGS": a.settings}
    if not a.tiny:
        env["SPECNB_LV_MODELS"] = "default"
    with tempfile.TemporaryDirectory() as d:
        server = tb.Server("voila", Path(d), env)
        try:
            server.wait_ready(tb.T_SERVER)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium, args=tb.CHROMIUM_ARGS,
                                             headless=True, timeout=60_000)
                try:
                    page = browser.new_page(viewport={"width": 1200, "height": 2000})
                    page.goto(server.url, wait_until="commit", timeout=tb.T_RENDER * 1e3)
                    page.wait_for_selector(".specnb-live-view .specnb-btn-step", timeout=tb.T_RENDER * 1e3)
                    for i in range(a.rounds):
                        page.locator(".specnb-live-view .specnb-btn-step").first.click()
                        tb.rounds_is(page, i + 1, tb.T_ROUND)
                    page.wait_for_timeout(500)
                    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                    page.locator(".specnb-live-view").first.screenshot(path=a.out)
                    print(json.dumps(tb.counts(page)))
                finally:
                    browser.close()
        finally:
            server.stop()
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
