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
  matmul.py       matmul_ref           matmul, dequant_row    matmul_cuda.py       self_check(), bench()
  quantize_q8.py  ggml's quantize_row_q8_0 / q8_1 / q8_K: the activations as int8 blocks   tests/test_matmul_q8
  matmul_q8.py    ggml's integer sums  matmul_q8              (CPU only)           self_check(), bench()
  matmul_x16.py   the same sums        matmul_x16_by: 16 rows interleaved (Q5_0, Q5_1)  tests/test_matmul_x16
  matmul_x16k.py  the same sums        matmul_x16k_by: the same for Q4_K, Q6_K   tests/test_matmul_x16
  machine.py      (figures measured once per machine and kept: one record file per figure)
  tuning.py       (measured once per machine: matmul_q8's prefetch distance, the int8 compute limit)
  norm.py         rmsnorm_ref          rmsnorm                rmsnorm_cuda         tests/test_kernels
  rope.py         rope_ref             rope                   rope_cuda            tests/test_kernels
  attention.py    attention_ref        attention              attention_cuda       tests/test_kernels
  activations.py  swiglu_ref           swiglu_into, argmax, topk  swiglu_into_cuda  tests/test_kernels
  forward.py      specnb.model.reference     the whole pass fused   specnb.run.backend_cuda  tests/test_speed_paths
  cuda_common.py  (the CUDA kernels' shared helpers and block reductions)
  slots_cuda.py   (how each block type is read on a GPU: the slot decoders and element orders)
  fused_cuda.py   the twins composed   (CUDA only: RMSNorm, SwiGLU into a product's input; rope + KV store)  cudasim
  launch_cuda.py  (CUDA launches made once: prepared arguments, captured graphs)
  cache_files.py  (Numba's cache files keyed by signature: many processes compile into one cache)
  stream.py       np.bitwise_xor       stream_xor (a read at memory speed: the bandwidth probe)    self_check()
  clock.py        (a cycle counter read inside compiled code: the fused pass's phases timed, bench --profile)

`python -m specnb.kernels.matmul` and `python -m specnb.kernels.matmul_q8` run the check and the
benchmark of every type; `python -m specnb.kernels.stream` the bandwidth probe's. The CUDA twins
are checked under the simulator by tests/cudasim_checks.py against the same references.
"""
import os as _os


# ---- where Numba caches the compiled kernels ------------------------------------------------
def sources_stamp(folder: str | None = None) -> str:
    """A hash of the source of every kernel file and of the SIMD level asked for (SPECNB_SIMD,
    and NUMBA_CPU_FEATURES, which sets it too: see simd.py). Numba checks a cached function
    against its own file only, so a cached caller
    (the fused forward pass in forward.py) would keep running an old copy of a kernel edited in
    another file, or machine code compiled for another SIMD level; one cache folder per stamp
    makes every edit of a kernel start from a fresh cache."""
    import hashlib
    folder = folder or _os.path.dirname(_os.path.abspath(__file__))
    h = hashlib.sha256(("simd=" + _os.environ.get("SPECNB_SIMD", "auto")).encode())
    if _os.environ.get("NUMBA_CPU_FEATURES"):       # (so that a stamp without it stays as it was)
        h.update(b"features=" + _os.environ["NUMBA_CPU_FEATURES"].encode())
    for name in sorted(_os.listdir(folder)):
        if name.endswith(".py"):
            with open(_os.path.join(folder, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def cache_root() -> str:
    """The folder of the stamped kernel caches: numba/ in specnb's cache folder (not created)."""
    from ..cache import cache_dir
    return str(cache_dir(create=False) / "numba")


def cache_folder(root: str | None = None, folder: str | None = None) -> str:
    """root/<stamp>: this source tree's kernel cache. Nothing is created: Numba makes the folder
    when it first saves a kernel."""
    return _os.path.join(root or cache_root(), sources_stamp(folder))


def prune_caches(root: str | None = None, keep: int = 3, current: str | None = None) -> list[str]:
    """Remove stamped caches beyond the `keep` most recent (the current one always stays) and
    files of the earlier flat layout: they can never be loaded again. Called before the kernels
    are prepared (run/pair.py warm_up), never on import. Returns the removed paths."""
    import shutil
    if root is None:
        if _os.environ.get("NUMBA_CACHE_DIR") != cache_folder():
            return []                    # the user's own NUMBA_CACHE_DIR: not specnb's to prune
        root = cache_root()
    current = current or _os.path.basename(cache_folder(root))
    try:
        entries = sorted((e for e in _os.scandir(root) if e.name != current),
                         key=lambda e: e.stat().st_mtime, reverse=True)
    except OSError:
        return []
    stamps = [e for e in entries if e.is_dir() and len(e.name) == 16]
    stale = stamps[keep - 1:] + [e for e in entries if not (e.is_dir() and len(e.name) == 16)]
    for e in stale:
        try:
            shutil.rmtree(e.path) if e.is_dir() else _os.remove(e.path)
        except OSError:
            pass
    return [e.path for e in stale]


def _use_stamped_cache() -> None:
    # Numba's compiled-kernel cache lives in specnb's own cache folder, not beside the sources; a
    # NUMBA_CACHE_DIR the user set wins. numba.config is set too, for a process that imported
    # Numba before the kernels (its decorators read config.CACHE_DIR, not the environment).
    if "NUMBA_CACHE_DIR" in _os.environ:
        return
    _os.environ["NUMBA_CACHE_DIR"] = cache_folder()
    import sys
    if "numba" in sys.modules:
        from numba.core import config
        config.CACHE_DIR = _os.environ["NUMBA_CACHE_DIR"]


_use_stamped_cache()


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


def _keyed_cache_files() -> None:
    # One data file per compiled signature, named by it and checked when it loads, so that any
    # number of processes can compile into one cache and load from it at once (cache_files.py).
    from .cache_files import use_keyed_cache_files
    use_keyed_cache_files()


_keyed_cache_files()


def _start_thread_pool() -> None:
    # Numba starts its thread pool when a parallel function is compiled or called from Python. A
    # cached kernel whose compiled code calls a cached parallel one (swiglu_into ->
    # _swiglu_parallel) starts nothing when it is loaded: called from Python before any parallel
    # kernel ran in the process, it crashed the interpreter (seen on an AMD EPYC Zen 3 with
    # swiglu_into(gate, up, out) against a cache that test and benchmark runs had filled). The
    # pool starts here instead (about 5 ms), with the threading layer Numba's settings choose.
    try:
        from numba.np.ufunc.parallel import _launch_threads
    except ImportError:                   # (another Numba layout: kernels then start it on first use)
        return
    _launch_threads()


_start_thread_pool()


# The SIMD level is settled before any kernel module makes a Numba function: Numba builds its
# compile target with the first njit decorator, and on aarch64 simd.py has to give that target
# the CPU's int8 features first (qemu-user and macOS hide them from LLVM); a target made earlier
# keeps LLVM's view, and the NEON levels fall back to generic.
from . import simd as _simd  # noqa: E402,F401
