"""The live view's player thread (specnb.view.player) with stand-in callbacks: it runs rounds
under the lock until the run ends or it is stopped, redraws, and shows errors."""
import threading
import time

import pytest

pytest.importorskip("ipywidgets")        # specnb.view (the package) assembles ipywidgets

from specnb.view.player import Player  # noqa: E402


def _player(n_rounds, fail_at=None):
    lock, log = threading.RLock(), []
    left = [n_rounds]

    def advance():
        assert lock._is_owned()              # every round runs under the view's lock
        if left[0] == fail_at:
            raise RuntimeError("boom")
        if left[0] == 0:
            return False
        left[0] -= 1
        log.append("round")
        return True
    p = Player(lock, advance, lambda: log.append("render"), lambda m: log.append(f"error {m}"),
               lambda on: log.append(f"running {on}"))
    return p, log, left


def test_player_runs_to_the_end():
    p, log, left = _player(5)
    p.start(None)
    assert p.wait(10) and not p.running and left == [0]
    assert log[0] == "running True" and log.count("round") == 5
    assert log[-2:] == ["render", "running False"]        # a last render, then the label
    p, log, _ = _player(3)
    p.start(lambda: 0.0)                     # at a speed: a render after every round
    assert p.wait(10)
    rounds = [i for i, x in enumerate(log) if x == "round"]
    assert all(log[i + 1] == "render" for i in rounds)


def test_player_stops_and_shows_errors():
    p, log, left = _player(10 ** 6)
    p.start(lambda: 0.05)
    deadline = time.time() + 10
    while log.count("round") < 2 and time.time() < deadline:
        time.sleep(0.01)
    p.stop()
    assert not p.running and left[0] > 0
    n = log.count("round")
    time.sleep(0.2)
    assert log.count("round") == n           # stopped: nothing moves
    p.stop()                                 # stopping twice is harmless
    p, log, _ = _player(5, fail_at=3)
    p.start(None)
    assert p.wait(10)
    assert "error RuntimeError: boom" in log and log[-1] == "running False"
