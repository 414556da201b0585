"""How much of the machine other processes took while a timed block ran.

On a shared machine a speed figure is only worth keeping when the measured process had the
cores to itself. `with OtherLoad() as load: ...` reads Linux's /proc/stat (all CPUs) and
/proc/self/stat (this process, every thread) before and after; `load.share` is the fraction of
all CPU time that went to anything but this process (the hypervisor's steal time included), or
None where /proc is not there.
"""
from __future__ import annotations

import os


def _machine_jiffies() -> tuple[int, int] | None:
    # /proc/stat first line: cpu user nice system idle iowait irq softirq steal guest guest_nice
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = v
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _own_jiffies() -> int | None:
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])        # utime + stime, all threads
    except (OSError, ValueError, IndexError):
        return None


class OtherLoad:
    """`with OtherLoad() as load: run()`; then `load.share` in [0, 1] (or None)."""

    def __enter__(self):
        self._m0, self._o0 = _machine_jiffies(), _own_jiffies()
        self.share = None
        return self

    def __exit__(self, *_):
        m1, o1 = _machine_jiffies(), _own_jiffies()
        if None in (self._m0, self._o0, m1, o1) or m1[1] <= self._m0[1]:
            return
        others = (m1[0] - self._m0[0]) - (o1 - self._o0)
        self.share = min(max(others / (m1[1] - self._m0[1]), 0.0), 1.0)


def wait_until_quiet(share: float, timeout_s: float, poll_s: float = 1.0) -> float | None:
    """Sleep in steps of poll_s until other processes use less than `share` of the CPU over a
    step, or timeout_s has passed. Returns the last share seen (None without /proc)."""
    import time
    t_end = time.monotonic() + timeout_s
    while True:
        with OtherLoad() as load:
            time.sleep(poll_s)
        if load.share is None or load.share < share or time.monotonic() >= t_end:
            return load.share
