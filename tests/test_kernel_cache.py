"""Kernels cached by different processes never stand in for one another (kernels/__init__.py).

Numba names a compiled function by its qualified name, argument types and a per-process counter.
Two closures made by one factory (kernels/matmul_q8.py's `_b_rows` makes a `rows` per block
type) share the name and, when they take the same argument types, can get the same counter value
in two processes. Each process then caches a caller linked to its own closure under the same
symbol, and a third process that loads both callers runs the first loaded closure for both.

The module written here has that shape: `make(k)` returns a parallel-called closure too large to
inline, `use_a` calls the k=1 one and `use_b` the k=100 one. Process 1 compiles `use_a`, process 2
`use_b` (each from the same clean start, so their counters agree), process 3 loads both from the
cache. Without specnb.kernels imported first, process 3 gets `use_a`'s answer from `use_b` (the
collision, checked so that the test keeps reproducing it); with it, both answers are right.
"""
import os
import subprocess
import sys

import pytest

N_STEPS = 120      # statements in the closure: enough that LLVM keeps it a separate function


def _module_source() -> str:
    body = "\n".join(f"            v = v * {0.5 + i / 1000} + k * {i % 7 + 1} if v > {i} else v - k * {i % 5}"
                     for i in range(N_STEPS))
    # use_a calls fa, use_b calls fb: two cached parallel callers, written by one template
    users = "".join(f'''

@njit(cache=True, parallel=True)
def use_{w}(x):
    out = np.empty_like(x)
    for c in prange(2):
        f{w}(x, out, 4 * c, 4 * c + 4)
    return out
''' for w in "ab")
    return f'''import numpy as np
from numba import njit, prange


def make(k):
    @njit
    def f(x, out, lo, hi):
        for i in range(lo, hi):
            v = x[i]
{body}
            out[i] = v
    return f


fa = make(1.0)
fb = make(100.0)
{users}

def expected(k):
    v = 0.0
    for i in range({N_STEPS}):
        v = v * (0.5 + i / 1000) + k * (i % 7 + 1) if v > i else v - k * (i % 5)
    return v
'''


_RUNNER = '''import sys
if sys.argv[1] == "specnb":
    import specnb.kernels  # noqa: F401
import numpy as np
import collide
x = np.zeros(8)
for w in sys.argv[2]:
    got = (collide.use_a if w == "a" else collide.use_b)(x)[0]
    print(w, repr(float(got)), repr(collide.expected(1.0 if w == "a" else 100.0)))
'''


def _answers(tmp_path, mode: str) -> dict:
    src = tmp_path / mode
    src.mkdir()
    (src / "collide.py").write_text(_module_source())
    (src / "runner.py").write_text(_RUNNER)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(src / "cache"), PYTHONPATH=str(src))
    out = {}
    for calls in ("a", "b", "ab"):
        r = subprocess.run([sys.executable, str(src / "runner.py"), mode, calls], env=env,
                           capture_output=True, text=True, timeout=300, cwd=str(src))
        assert r.returncode == 0, r.stderr[-3000:]
        out[calls] = [line.split() for line in r.stdout.splitlines()]
    return out


@pytest.mark.parametrize("mode", ["specnb", "plain"])
def test_closures_cached_by_two_processes_do_not_collide(tmp_path, mode):
    out = _answers(tmp_path, mode)
    for calls in ("a", "b"):              # each compiled alone: right
        (w, got, want), = out[calls]
        assert got == want, (calls, got, want)
    (wa, got_a, want_a), (wb, got_b, want_b) = out["ab"]
    assert (wa, got_a) == ("a", want_a)
    if mode == "specnb":
        assert got_b == want_b, f"use_b ran use_a's closure from the cache: {got_b} (want {want_b})"
    else:
        # Numba alone: the collision this guards against (if this starts passing, Numba no longer
        # reuses counter values across processes and kernels/__init__.py's guard can go)
        assert got_b == want_a != want_b, (got_b, want_a, want_b)


@pytest.mark.parametrize("layer", [None, "workqueue"])
def test_importing_the_kernels_starts_numbas_thread_pool(layer):
    """A cached kernel that calls a cached parallel one (swiglu_into) starts no thread pool when it
    loads; called first in a process it crashed the interpreter. Importing specnb.kernels starts
    the pool, with the threading layer the user's NUMBA_THREADING_LAYER names, if any."""
    env = dict(os.environ)
    env.pop("NUMBA_THREADING_LAYER", None)
    if layer:
        env["NUMBA_THREADING_LAYER"] = layer
    code = ("from numba.np.ufunc import parallel\nassert not parallel._is_initialized\n"
            "import numba, specnb.kernels\nprint(parallel._is_initialized, numba.threading_layer())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    started, used = out.stdout.split()
    assert started == "True" and (layer is None or used == layer)
