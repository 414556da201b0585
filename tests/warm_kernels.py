"""Compile the kernels the test suite shares into the Numba cache, in two processes at once.

Numba compiles on one core. A fresh cache (a new clone, an edited kernel) costs the suite its
two compiled forward passes (every tensor type, float32 and int8 activations) and the kernels'
Python entry points, one after the other, in whichever test comes first. conftest.py runs this
file twice side by side before the tests start, one activation mode each; on a warm cache each
run only loads what is cached (a few seconds).

The int8 pass alone compiles about three times as long as the float32 one. So its four int8
drivers are shared out: the int8 process starts with the per-row K types' one (the longest), the
float32 process with the other three (the interleaved K and 32-block layouts, the per-row 32-block
types), each called with the pass's own argument types; then each compiles its pass, the int8
one finding those three in the cache. (Numba looks a signature up in the cache on disk before it
compiles it; two processes compiling the same one both write it, and one copy wins.)

Then, with both done, `prefetch` records this machine's prefetch distance once (kernels/tuning.py:
the first int8 decode of a process on a new machine measures it otherwise), on a quiet machine
rather than in whichever test of each pytest-xdist worker comes first, beside the other's tests.

Last, `costs` records this machine's costs for the pairs the notebooks read (specnb/measure/costs.py:
the real pair in both activation modes, its draft requantized to Q4_0 with the demo's draft
vocabulary, the teaching pair), at the thread count the notebooks run with under nbval, once a
class day, on a quiet machine: the notebooks then read them instead of measuring on their own.

    python tests/warm_kernels.py f32|q8|prefetch [THREADS...] | costs
"""
import os
import sys
import tempfile
import time


def warm(mode: str) -> float:
    os.environ.setdefault("SPECNB_KERNEL_TYPES", "all")
    # (no prefetch measurement here, beside the other process's compiling: `prefetch` measures it
    # after; the distance is an argument of the kernels, so the same code compiles)
    os.environ.setdefault("SPECNB_PREFETCH", "off")
    import numpy as np

    from specnb.model import load_model
    from specnb.model.testing import tiny_model
    from specnb.run.context import Batch, Context
    t0 = time.perf_counter()
    _int8_drivers(mode)
    with tempfile.TemporaryDirectory(prefix="specnb-warm-") as d:
        for arch in ("llama", "qwen2"):
            m = load_model(tiny_model(os.path.join(d, f"{arch}.gguf"), qtype="Q8_0", n_layer=1,
                                      arch=arch, tied=arch == "llama"))
            ctx = Context(m, n_ctx=16, activations=mode)
            ctx.decode(Batch.from_tokens([0, 1], 0, 0, "all"))
            ctx.decode(Batch.from_tokens([2], 2, 0, "all"))
    rng = np.random.default_rng(0)
    from specnb.kernels import qtypes
    x = rng.standard_normal((3, 256)).astype(np.float32)
    out = np.empty((3, 4), np.float32)
    w = qtypes.random_blocks(qtypes.Q4_K, 4, 256, rng)
    if mode == "q8":                      # the Python entry point of the int8 products
        from specnb.kernels.matmul_q8 import matmul_q8
        matmul_q8(x, w, qtypes.Q4_K, out)
    else:                                 # ... of the float32 ones, and the row decoder
        from specnb.kernels.matmul import dequantize, matmul
        matmul(x, w, qtypes.Q4_K, out)
        dequantize(w, qtypes.Q4_K, 256)
    return time.perf_counter() - t0


def _int8_drivers(mode: str) -> None:
    # matmul_q8_by's four drivers, called as the int8 pass calls them: x and out writable C
    # float32, the weights read-only, the pass's selection with every type (_Q8_SEL, which
    # tests/test_kernel_types.py checks), the prefetch distances int64. A signature that differed
    # would cost the time twice, never a wrong result.
    import numpy as np
    from specnb.kernels import matmul_q8, matmul_x16, matmul_x16k, qtypes
    rng = np.random.default_rng(1)
    sel = matmul_q8._Q8_SEL
    x = rng.standard_normal((3, 256)).astype(np.float32)
    out = np.empty((3, 32), np.float32)

    def blocks(qt, interleaved=False):
        w = qtypes.random_blocks(qt, 32, 256, rng)
        return matmul_x16.interleave(w, qt) if interleaved else w
    if mode == "q8":
        matmul_q8._matmul_q8_k(x, blocks(qtypes.Q4_K), qtypes.Q4_K, out, sel, -1)
        return
    matmul_x16k.matmul_x16k_by(x, blocks(qtypes.Q4_K, True), qtypes.Q4_KX16, out, sel.q4_kx16, sel.q6_kx16, -1)
    matmul_x16.matmul_x16_by(x, blocks(qtypes.Q5_0, True), qtypes.Q5_0X16, out, sel, -1)
    matmul_q8._matmul_q8_32(x, blocks(qtypes.Q8_0), qtypes.Q8_0, out, sel, -1)


def prefetch(threads=()) -> float:
    """The prefetch verdicts for this machine at the default thread count (a notebook's) and at
    each of `threads` (the pytest-xdist workers', conftest.worker_threads): read where recorded,
    else measured now and recorded (SPECNB_PREFETCH, where set, wins and nothing is measured)."""
    import numba

    from specnb.kernels import tuning
    t0 = time.perf_counter()
    for n in sorted({numba.get_num_threads(), *threads}):
        tuning.prefetch_ahead(n)
    return time.perf_counter() - t0


def costs() -> float:
    """The costs records the notebooks read (measure/costs.py), each measured unless recorded: the
    real pair q8 and f32, the real pair's Q4_0 draft with the default draft vocabulary, the
    teaching pair. Skips the real pair where it is not installed."""
    from specnb.measure.costs import machine_costs
    from specnb.model.registry import REAL_DRAFT, REAL_TARGET, REGISTRY, check_parts, requantized_draft
    from specnb.run.pair import open_pair, with_draft
    from specnb.speculation.draft_vocab import DEFAULT_DRAFT_VOCAB
    t0 = time.perf_counter()
    if all(check_parts(REGISTRY[n]).ok for n in (REAL_TARGET, REAL_DRAFT)):
        for act in ("q8", "f32"):
            pair = open_pair(REAL_TARGET, REAL_DRAFT, n_ctx=256, activations=act)
            machine_costs(pair)
            if act == "q8":
                machine_costs(with_draft(pair, requantized_draft(pair.draft)), DEFAULT_DRAFT_VOCAB)
    machine_costs(open_pair(n_ctx=256))
    return time.perf_counter() - t0


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("f32", "q8", "prefetch", "costs") or (
            sys.argv[1] != "prefetch" and len(sys.argv) != 2) or not all(a.isdigit() for a in sys.argv[2:]):
        sys.exit("usage: python tests/warm_kernels.py f32|q8 (an activation mode to compile) | "
                 "prefetch [THREADS...] (the prefetch verdicts) | costs (the notebooks' costs records)")
    mode = sys.argv[1]
    t = (prefetch([int(a) for a in sys.argv[2:]]) if mode == "prefetch" else costs() if mode == "costs"
         else warm(mode))
    print(f"{mode}: {t:.0f} s")
