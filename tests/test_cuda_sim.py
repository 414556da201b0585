"""The CUDA kernels and backend, tested without a GPU.

Each test runs one group of tests/cudasim_checks.py in its own Python process: the simulator
groups with NUMBA_ENABLE_CUDASIM=1 (which replaces numba.cuda for the whole process, so it must
not leak into this one, whose CPU tests use real njit), the `ptx` group with the real numba-cuda
compiling every kernel for sm_90 (it needs NVVM, not a GPU; skipped where NVVM is missing).
See that file for what each group checks and the tolerances.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("cudasim_checks.py")
SKIP = 77

pytestmark = pytest.mark.cudasim


def _run(group: str, sim: bool = True, timeout: int = 900, env_extra: dict | None = None):
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if sim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    env.update(env_extra or {})
    try:
        r = subprocess.run([sys.executable, str(SCRIPT), group], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"cudasim_checks {group}: no result within {timeout} s\n{e.stdout or ''}")
    out = r.stdout + r.stderr
    if r.returncode == SKIP:
        pytest.skip(out.strip().splitlines()[-1])
    assert r.returncode == 0, f"cudasim_checks {group} failed (exit {r.returncode}):\n{out[-6000:]}"
    return out


@pytest.mark.parametrize("group", ["kernels", "quant", "invariance", "fused", "launches", "decode", "state",
                                   "speculative", "device_script"])
def test_cudasim(group):
    _run(group)


def test_compiles_for_sm90():
    # all ten matmul types take minutes to compile here: two representative ones (2-byte aligned
    # blocks, the K-type layout) plus every other kernel; `python tests/cudasim_checks.py ptx`
    # compiles them all
    _run("ptx", sim=False, env_extra={"SPECNB_PTX_TYPES": "Q4_0,Q6_K"})


def test_importing_the_kernels_needs_no_gpu():
    """Importing the kernel modules (with their cuda.jit kernels) works without a GPU and without
    the simulator, and the CPU kernels stay real njit."""
    code = ("import numba, numpy as np\n"
            "from specnb.kernels import norm, rope, attention, activations\n"
            "from specnb.kernels import matmul, matmul_cuda, matmul_q8, qtypes\n"
            "import specnb.run.backend_cuda\n"
            "assert not numba.config.ENABLE_CUDASIM\n"
            "assert type(norm.rmsnorm).__name__ == 'CPUDispatcher'\n"
            "x = np.ones((1, 4), np.float32)\n"
            "norm.rmsnorm(x, np.ones(4, np.float32), 1e-5, x)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_cuda_backend_without_gpu_is_a_clear_error(tiny_model):
    """backend='cuda' on a machine without a usable GPU: UnsupportedError naming the way out;
    'auto' picks the CPU there."""
    from numba import cuda

    from specnb import UnsupportedError
    from specnb.run.context import Context, resolve_backend
    if cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(UnsupportedError, match="backend='cpu'"):
        Context(tiny_model, n_ctx=16, backend="cuda")
    assert resolve_backend("auto") == "cpu"
