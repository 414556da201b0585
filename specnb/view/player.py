"""The live view's background player: rounds in a thread (play, run to end) until stopped.

The thread steps the run through callbacks, each round under the view's lock, so a control
changed meanwhile (which restarts the run) waits for the round in progress.
"""
from __future__ import annotations

import threading
import time

RENDER_EVERY_S = 0.2          # running to the end: redraw at most this often
JOIN_TIMEOUT_S = 60.0         # how long stop() and wait() wait for the round in progress


class Player:
    """Runs rounds in a background thread until stopped or the run ends.

    advance(): run one round, called with `lock` held; False when no round ran (the run is
    finished, or failed and shows its own error). render(): redraw, called with `lock` held
    after rounds and once when the thread ends. on_error(message): an unexpected exception in
    the thread (shown, never lost). on_running(flag): the thread started or ended.
    """

    def __init__(self, lock, advance, render, on_error, on_running):
        self.lock, self.advance, self.render = lock, advance, render
        self.on_error, self.on_running = on_error, on_running
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, interval=None) -> None:
        """Start stepping: interval() gives the seconds between rounds (read every round, so a
        speed control acts at once); None runs every round as fast as possible."""
        self.stop()
        self._stop = threading.Event()
        stop = self._stop

        def run():
            last_render = 0.0
            try:
                while not stop.is_set():
                    with self.lock:
                        if stop.is_set() or not self.advance():
                            break
                        now = time.perf_counter()
                        if interval is not None or now - last_render > RENDER_EVERY_S:
                            self.render()
                            last_render = now
                    if interval is not None:
                        stop.wait(interval())
            except Exception as e:      # never let a thread die silently
                self.on_error(f"{type(e).__name__}: {e}")
            finally:
                with self.lock:
                    self.render()
                self.on_running(False)

        self._thread = threading.Thread(target=run, name="specnb-live-view", daemon=True)
        self.on_running(True)
        self._thread.start()

    def stop(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Stop the thread (waits for the round in progress); a no-op when none runs."""
        t = self._thread
        if t is None:
            return
        self._stop.set()
        if t is not threading.current_thread():
            t.join(timeout)
        self._thread = None
        self.on_running(False)

    def wait(self, timeout: float = JOIN_TIMEOUT_S) -> bool:
        """Wait for the thread to end by itself; True when it has (or none runs)."""
        t = self._thread
        if t is not None:
            t.join(timeout)
            return not t.is_alive()
        return True
