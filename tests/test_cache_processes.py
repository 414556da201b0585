"""Many processes compile into one kernel cache and load from it at once (kernels/cache_files.py).

Numba numbers the data files of a function's signatures in the order they are saved. Processes
that save different signatures of one function at the same moment take the same number, and the
index can then send a signature to another's machine code: a later process unboxes its arguments
as the wrong types (a TypeError here; with the kernels' selection records, a crash, as
tests/test_matmul_q8.py's first F32 case showed with the suite on two workers).

The module written here has one cached function of two arrays; its 49 signatures (seven dtypes
each) are shared out among three processes that start compiling at the same instant into one empty
cache, then a fourth process calls every signature. Each must give its own answer, loaded from
the cache. With Numba's numbered files, 3 runs in 4 had signatures answered by another's code.
"""
import os
import subprocess
import sys
import time

import pytest

DTYPES = ("float64", "float32", "int64", "int32", "int16", "int8", "uint16")
N_COMPILERS = 3

_MODULE = '''import numpy as np
from numba import njit


@njit(cache=True)
def f(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * (i + 1) - y[i]
    return s + x.itemsize * 1000 + y.itemsize * 100
'''

_RUNNER = '''import sys
import time
import specnb.kernels  # noqa: F401  (what every process of specnb imports first)
import numpy as np
import sigs
DTYPES = %r
pairs = [(a, b) for a in DTYPES for b in DTYPES]
arr = lambda d: (np.arange(5) + 1).astype(d)
role = sys.argv[1]
if role == "load":
    for a, b in pairs:
        try:
            got = repr(float(sigs.f(arr(a), arr(b))))
        except Exception as e:
            got = type(e).__name__
        print(a, b, got, repr(float(sigs.f.py_func(arr(a), arr(b)))))
    print("hits", sum(sigs.f.stats.cache_hits.values()), "misses", sum(sigs.f.stats.cache_misses.values()))
else:
    k, n, start = int(role), int(sys.argv[2]), float(sys.argv[3])
    while time.time() < start:
        pass
    for a, b in pairs[k::n]:
        sigs.f(arr(a), arr(b))
''' % (DTYPES,)


def _setup(tmp_path):
    (tmp_path / "sigs.py").write_text(_MODULE)
    (tmp_path / "runner.py").write_text(_RUNNER)
    return dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))


def _run(tmp_path, env, *args):
    r = subprocess.run([sys.executable, str(tmp_path / "runner.py"), *args], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _load(tmp_path, env):
    lines = _run(tmp_path, env, "load").splitlines()
    wrong = [line for line in lines[:-1] if line.split()[2] != line.split()[3]]
    _, hits, _, misses = lines[-1].split()
    return wrong, int(hits), int(misses)


def test_processes_saving_signatures_at_once_load_their_own(tmp_path):
    env = _setup(tmp_path)
    start = time.time() + 6.0                # every compiler imported and waiting, then all at once
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(k), str(N_COMPILERS),
                               repr(start)], env=env, cwd=str(tmp_path), stderr=subprocess.PIPE, text=True)
             for k in range(N_COMPILERS)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    wrong, hits, misses = _load(tmp_path, env)
    assert not wrong, f"signatures answered by another signature's cached code: {wrong}"
    assert (hits, misses) == (len(DTYPES) ** 2, 0), "every signature loads from the cache"


@pytest.mark.parametrize("damage", ["truncated", "another signature's", "garbage"])
def test_a_damaged_or_foreign_entry_is_compiled_again(tmp_path, damage):
    env = _setup(tmp_path)
    _run(tmp_path, env, "0", "1", "0")       # one process caches every signature
    files = sorted((tmp_path / "cache").rglob("*.nbc"))
    assert len(files) == len(DTYPES) ** 2
    victim, other = files[0], files[1]
    data = victim.read_bytes()
    victim.write_bytes({"truncated": data[:len(data) // 2], "another signature's": other.read_bytes(),
                        "garbage": b"\x80\x05garbage"}[damage])
    wrong, hits, misses = _load(tmp_path, env)
    assert not wrong
    assert (hits, misses) == (len(DTYPES) ** 2 - 1, 1), "the damaged entry alone is compiled again"
