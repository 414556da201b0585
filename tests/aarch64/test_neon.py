"""The aarch64 checks, run by tests/aarch64/run.sh in an emulated arm64 Debian root (docs/aarch64.md);
they skip on any other CPU.

- importing specnb prints nothing (no warning);
- the level is the NEON one the CPU reports (SPECNB_EXPECT_SIMD, set by run.sh), and the machine
  code of the int8 dot products holds sdot / usdot;
- matmul_q8 of every int8 tensor type (one test per type; SPECNB_NEON_TYPES picks some), for
  every row count 1..17 (the 1-row and the k-row kernels), gives the same bits at the generic
  level and at each NEON level, the levels compiled side by side in fresh processes.
"""
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# how to start another aarch64 Python: under qemu-user without binfmt_misc, through qemu itself
# (run.sh sets SPECNB_ARM_LAUNCHER to qemu-aarch64-static; QEMU_LD_PREFIX and QEMU_CPU are inherited)
PYTHON = os.environ.get("SPECNB_ARM_LAUNCHER", "").split() + [sys.executable]

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("aarch64", "arm64"),
                                reason="an aarch64 check (tests/aarch64/run.sh runs it under emulation)")


def test_import_prints_nothing():
    p = subprocess.run([*PYTHON, "-c", "import specnb, specnb.kernels.blocks, specnb.kernels.matmul_q8"],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout == "" and p.stderr == "", p.stdout + p.stderr


def test_the_neon_level_is_chosen():
    from specnb.kernels import simd as S
    want = os.environ.get("SPECNB_EXPECT_SIMD")
    if want:
        assert S.SIMD_LEVEL == want
    assert S.SIMD_LEVEL in ("neon", "neon-i8mm"), S.SIMD_LEVEL


def test_the_dot_products_are_sdot():
    from numba import njit

    from specnb.kernels import simd as S

    @njit
    def dots(a, b, out):
        S.vstore(out, 0, S.vfloat(S.vdot_u8i8(S.vload_b32(a, 0), S.vload_b32(b, 0))))
        S.vstore(out, 8, S.vfloat(S.vdot_i8i8(S.vload_b32(a, 0), S.vload_b32(b, 0))))

    rng = np.random.default_rng(0)
    u = rng.integers(0, 256, 32).astype(np.uint8)         # every byte value: NEON is exact for all
    x = rng.integers(-128, 128, 32).astype(np.int8)
    out = np.empty(16, np.float32)
    dots(u, x, out)
    assert out[:8].tolist() == (u.astype(np.int64) * x).reshape(8, 4).sum(-1).tolist()
    assert out[8:].tolist() == (u.view(np.int8).astype(np.int64) * x).reshape(8, 4).sum(-1).tolist()
    asm = next(iter(dots.inspect_asm().values()))
    assert "sdot" in asm
    if S.SIMD_LEVEL == "neon-i8mm":
        assert "usdot" in asm


# every int8 tensor type, one test each (under emulation a type's kernels take many minutes to
# compile at each level; SPECNB_NEON_TYPES=Q8_0,Q4_K picks some, run.sh passes it through)
TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
CHOSEN = [t for t in os.environ.get("SPECNB_NEON_TYPES", ",".join(TYPES)).split(",") if t]

_LEVEL_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
from specnb.kernels import matmul_q8, qtypes, simd
name = sys.argv[1]
qt = next(q for q in matmul_q8.Q8_QTYPES if qtypes.qtype_name(q) == name)
rng = np.random.default_rng(7)
n_in = 512 if qt in qtypes.K_QTYPES else 96
w = qtypes.random_blocks(qt, 23, n_in, rng)             # (read-only, as the pass types it)
sel = qtypes.type_sel([qt])           # this type's kernels only (matmul_q8 compiles all ten)
x = rng.standard_normal((17, n_in)).astype(np.float32)
x[0, :32] *= 100.0
bits = []
for k in range(1, 18):
    r = np.empty((k, 23), np.float32)
    matmul_q8.matmul_q8_sel(x[:k], w, qt, r, sel, -1, -1)
    bits.append(hashlib.sha256(r.view(np.uint32).tobytes()).hexdigest())
print(json.dumps({"level": simd.SIMD_LEVEL, "bits": bits}))
"""


def test_every_type_is_covered():
    from specnb.kernels import matmul_q8, qtypes
    assert sorted(TYPES) == sorted(qtypes.qtype_name(q) for q in matmul_q8.Q8_QTYPES)
    assert set(CHOSEN) <= set(TYPES), CHOSEN


@pytest.mark.parametrize("name", CHOSEN)
def test_generic_and_neon_give_the_same_bits(name, tmp_path):
    from specnb.kernels import simd as S
    levels = ["generic", "neon"] + (["neon-i8mm"] if S.SIMD_LEVEL == "neon-i8mm" else [])
    procs = {}
    # each level's compiled kernels are kept (under SPECNB_CACHE_DIR, which run.sh sets), so that a
    # run stopped part-way or repeated does not compile again what it compiled under emulation;
    # one folder per stamp of the kernels' sources (Numba checks a function against its own file
    # only: a caller cached before an edit of another kernel file would keep the old code)
    from specnb.kernels import sources_stamp
    cache = (Path(os.environ["SPECNB_CACHE_DIR"]) / "neon-bits" / sources_stamp()
             if "SPECNB_CACHE_DIR" in os.environ else tmp_path)
    for level in levels:              # the levels compiled side by side, each in a fresh process
        env = dict(os.environ, SPECNB_SIMD=level, NUMBA_CACHE_DIR=str(cache / level))
        procs[level] = subprocess.Popen([*PYTHON, "-c", _LEVEL_SCRIPT, name], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
    got = {}
    for level, p in procs.items():
        out, err = p.communicate(timeout=6 * 3600)
        assert p.returncode == 0, err[-3000:]
        got[level] = json.loads(out.strip().splitlines()[-1])
        assert got[level]["level"] == level
    for level in levels[1:]:
        for k, (a, b) in enumerate(zip(got[level]["bits"], got["generic"]["bits"]), 1):
            assert a == b, f"{name}, {k} rows: {level} differs from generic"
