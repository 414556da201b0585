"""specnb's compute kernels: Numba njit on the CPU, numba-cuda twins on a GPU.

One file per operation (llm.c's dev/cuda shape: the NumPy reference beside the kernels, a check
and a small benchmark); data flows top to bottom:

  file            reference            CPU kernel             CUDA twin            check / bench
  qtypes.py       (the GGUF block layouts, sizes and shape checks; random_blocks)
  simd.py         (the explicit-SIMD layer: 8-lane vectors, levels generic / avx2 / avx512)
  simd_wide.py    (64-byte vectors and the int8 dot products of the int8 kernels)
  tiles.py        (register tiles: one vector per activation row, R rows per pass)
  blocks.py       gguf.quants          _g_* (to float32)      -                    tests/test_matmul
  blocks_q8.py    ggml-common.h        the int8 block views   -                    tests/test_matmul_q8
  matmul.py       matmul_ref           matmul, dequant_row    matmul_cuda.py       check(), bench()
  matmul_q8.py    ggml's integer sums  matmul_q8              (CPU only)           check(), bench()
  norm.py         rmsnorm_ref          rmsnorm                rmsnorm_cuda         tests/test_kernels
  rope.py         rope_ref             rope                   rope_cuda            tests/test_kernels
  attention.py    attention_ref        attention              attention_cuda       tests/test_kernels
  activations.py  swiglu_ref           swiglu, argmax, topk   swiglu_cuda          tests/test_kernels
  forward.py      specnb.reference     the whole pass fused   specnb.backend_cuda  tests/test_speed_paths
  cuda_common.py  (the CUDA kernels' shared helpers and block reductions)
  stream.py       np.bitwise_xor       stream_xor (a read at memory speed: the bandwidth probe)    check()
  quant.py        (the earlier module name of the matrix products: re-exports)

`python -m specnb.kernels.matmul` and `python -m specnb.kernels.matmul_q8` run the check and the
benchmark of every type; `python -m specnb.kernels.stream` the bandwidth probe's. The CUDA twins
are checked under the simulator by tests/cudasim_checks.py against the same references.
"""


def _distinct_compile_ids() -> None:
    # Numba names a compiled function by its qualified name, its argument types and a counter of
    # the process (the `v<uid>` in the symbol). Functions made by a factory share a qualified name
    # (every `_b_rows(...)` returns a `rows`), so two processes can compile different functions
    # under one symbol: one the Q4_0 rows kernel as `rows v23`, another the Q4_1 one as `rows v23`,
    # each caching a forward pass that calls its own. A third process that loads both cached
    # passes links both calls to whichever `rows v23` it loaded first, and one pass computes with
    # the wrong type's kernel. Starting each process's counter at a random 48-bit offset keeps the
    # ids of different processes apart (tests/test_kernel_cache.py reproduces the collision).
    import itertools
    import os

    from numba.core.bytecode import FunctionIdentity
    if not isinstance(getattr(FunctionIdentity, "_unique_ids", None), itertools.count):
        import warnings
        warnings.warn("specnb.kernels: this Numba version has no numba.core.bytecode.FunctionIdentity."
                      "_unique_ids counter; kernels cached by different processes may collide (run "
                      "tests/test_kernel_cache.py, or set NUMBA_CACHE_DIR to a fresh folder)",
                      RuntimeWarning, stacklevel=2)
        return
    FunctionIdentity._unique_ids = itertools.count(1 + int.from_bytes(os.urandom(6), "little"))


_distinct_compile_ids()
