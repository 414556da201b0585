"""Per-test CPU time: where a test run's time goes. Opt-in, a pytest plugin and its report:

    PYTHONPATH=tests SPECNB_CPU_TIMES=/tmp/cpu python -m pytest -p cpu_times -n 2 --dist loadfile
    python tests/cpu_times.py /tmp/cpu [N]      # CPU-s per file, then the N tests that used most

Wall durations (`--durations`) mislead when pytest-xdist's workers share the cores: a test beside
another worker's compiling takes several times its time alone. CPU time does not (much). Each
process (each worker) appends one line per test to FOLDER/<pid>.tsv: the node id, its own CPU
seconds (every thread of it), the CPU seconds of the subprocesses it waited for, and the wall
seconds, around the test's setup, call and teardown together.
"""
import os
import resource
import sys
import time
from collections import Counter

import pytest

ENV = "SPECNB_CPU_TIMES"
_out = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    if not _out:
        os.makedirs(folder, exist_ok=True)
        _out.append(open(os.path.join(folder, f"{os.getpid()}.tsv"), "a", encoding="utf-8"))
    own, kids = _cpu()
    t0 = time.perf_counter()
    yield
    own2, kids2 = _cpu()
    _out[0].write(f"{item.nodeid}\t{own2 - own:.3f}\t{kids2 - kids:.3f}\t{time.perf_counter() - t0:.3f}\n")
    _out[0].flush()


def read(folder: str) -> list[tuple[str, float, float, float]]:
    """Every line of every process's file: (node id, own CPU s, children's CPU s, wall s)."""
    rows = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".tsv"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                for line in f:
                    nodeid, own, kids, wall = line.rstrip("\n").split("\t")
                    rows.append((nodeid, float(own), float(kids), float(wall)))
    return rows


def report(rows, n: int = 30) -> str:
    per_file = Counter()
    for nodeid, own, kids, _ in rows:
        per_file[nodeid.split("::")[0]] += own + kids
    own_all, kids_all = sum(r[1] for r in rows), sum(r[2] for r in rows)
    lines = [f"{len(rows)} tests: {own_all + kids_all:.0f} CPU-s ({own_all:.0f} in the test processes, "
             f"{kids_all:.0f} in their subprocesses)", "", "CPU-s  file"]
    lines += [f"{t:6.1f}  {f}" for f, t in per_file.most_common()]
    lines += ["", "CPU-s    own  child   wall  test"]
    top = sorted(rows, key=lambda r: r[1] + r[2], reverse=True)[:n]
    lines += [f"{o + k:6.1f} {o:6.1f} {k:6.1f} {w:6.1f}  {nodeid}" for nodeid, o, k, w in top]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or not os.path.isdir(sys.argv[1]) or (
            len(sys.argv) == 3 and not sys.argv[2].isdigit()):
        sys.exit("usage: python tests/cpu_times.py FOLDER [N]  (FOLDER: what SPECNB_CPU_TIMES named)")
    print(report(read(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 30))
