"""Progress for long work: a byte counter (assembling or hashing a model) and an elapsed-time
ticker (forging a draft, Numba's first-run compilation), both on stderr.

On a terminal they redraw one line; elsewhere (a log, a notebook) they print a line now and
then, so a CI log shows progress without thousands of lines.
"""
from __future__ import annotations

import sys
import threading
import time


def _stream_is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class ByteProgress:
    """`with ByteProgress("assembling x", total) as bar: bar.update(n)` prints
    'assembling x:  41% 458/1117 MB 180 MB/s' (nothing if update is never called)."""

    def __init__(self, label: str, total: int, stream=None, enabled: bool = True):
        self.label, self.total, self.done = label, max(int(total), 1), 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = _stream_is_tty(self.stream)
        self.t0 = time.perf_counter()
        self._last_draw = 0.0
        self._last_pct_line = -1
        self._started = False

    def __enter__(self):
        return self

    def update(self, n: int) -> None:
        self.done += n
        self._draw(force=not self._started)
        self._started = True

    def _draw(self, force: bool = False, end: str = "") -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        pct = min(100, 100 * self.done // self.total)
        if self.tty:
            if not force and now - self._last_draw < 0.2:
                return
            self._last_draw = now
            self.stream.write("\r" + self._line(now, pct) + end)
        else:                                   # a line at 0, 25, 50, 75 and 100 %
            step = pct // 25
            if not force and step == self._last_pct_line:
                return
            self._last_pct_line = step
            self.stream.write(self._line(now, pct) + "\n")
        self.stream.flush()

    def _line(self, now: float, pct: int) -> str:
        dt = max(now - self.t0, 1e-9)
        return (f"{self.label}: {pct:3d}% {self.done / 1e6:.0f}/{self.total / 1e6:.0f} MB "
                f"{self.done / 1e6 / dt:.0f} MB/s")

    def __exit__(self, exc_type, *_):
        if not self.enabled or not self._started:
            return
        if exc_type is None:
            self.done = self.total
            if self.tty:
                self._draw(force=True, end="\n")
            elif self._last_pct_line != 4:
                self._draw(force=True)
        elif self.tty:
            self.stream.write("\n")
            self.stream.flush()


class Ticker:
    """`with Ticker("compiling the kernels", hint="about 2 minutes"):` prints the label once,
    then the elapsed time every `every` seconds while the block runs (from a background
    thread, so it works while the block is inside a long compiled call); nothing at all when
    the block ends before `quiet_s` (fast work stays silent)."""

    def __init__(self, label: str, hint: str = "", every: float = 10.0, quiet_s: float = 2.0,
                 stream=None, enabled: bool = True):
        self.label, self.hint, self.every, self.quiet_s = label, hint, every, quiet_s
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = _stream_is_tty(self.stream)
        self._stop = threading.Event()
        self._spoke = False
        self._thread = None

    def __enter__(self):
        self.t0 = time.perf_counter()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _say(self, text: str, newline: bool) -> None:
        self.stream.write(("\r" if self.tty and self._spoke else "") + text + ("\n" if newline else ""))
        self.stream.flush()
        self._spoke = True

    def _run(self) -> None:
        if self._stop.wait(self.quiet_s):
            return
        hint = f" ({self.hint})" if self.hint else ""
        self._say(f"{self.label}{hint}...", newline=not self.tty)
        while not self._stop.wait(self.every):
            self._say(f"{self.label}{hint}... {time.perf_counter() - self.t0:.0f} s",
                      newline=not self.tty)

    def __exit__(self, exc_type, *_):
        self.elapsed = time.perf_counter() - self.t0
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self._spoke:
            state = "done" if exc_type is None else "stopped"
            self._say(f"{self.label}: {state} in {self.elapsed:.0f} s", newline=True)
