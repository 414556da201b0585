"""Compile the kernels the test suite shares into the Numba cache, in two processes at once.

Numba compiles on one core. A fresh cache (a new clone, an edited kernel) costs the suite its
two compiled forward passes (every tensor type, float32 and int8 activations) and the kernels'
Python entry points, one after the other, in whichever test comes first. conftest.py runs this
file twice side by side before the tests start, one activation mode each; on a warm cache each
run only loads what is cached (a few seconds).

    python tests/warm_kernels.py f32|q8
"""
import os
import sys
import tempfile
import time


def warm(mode: str) -> float:
    os.environ.setdefault("SPECNB_KERNEL_TYPES", "all")
    import numpy as np

    from specnb.model import load_model
    from specnb.model.testing import tiny_model
    from specnb.run.context import Batch, Context
    t0 = time.perf_counter()
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


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("f32", "q8"):
        sys.exit("usage: python tests/warm_kernels.py f32|q8 (the activation mode to compile)")
    print(f"{sys.argv[1]}: {warm(sys.argv[1]):.0f} s")
