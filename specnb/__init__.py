"""specnb: small-draft-model speculative decoding as llama.cpp does it, in readable Python."""
import os as _os



def _kernel_sources_stamp() -> str:
    """A hash of the source of every kernel file and of the SIMD level asked for (SPECNB_SIMD,
    see kernels/simd.py). Numba checks a cached function against its own file only, so a cached
    caller (the fused forward pass in kernels/forward.py) would keep running an old copy of a
    kernel edited in another file, or machine code compiled for another SIMD level; one cache
    folder per stamp makes every edit of a kernel start from a fresh cache."""
    import hashlib
    from importlib.util import find_spec
    h = hashlib.sha256(("simd=" + _os.environ.get("SPECNB_SIMD", "auto")).encode())
    for d in find_spec("specnb.kernels").submodule_search_locations or []:
        for name in sorted(_os.listdir(d)):
            if name.endswith(".py"):
                with open(_os.path.join(d, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def _numba_cache_dir(root, keep: int = 3) -> str:
    # root/<stamp>; on the first use of a new stamp, older stamps beyond the `keep` most recent
    # (and files from the earlier flat layout) are removed: they can never be loaded again
    import shutil
    d = _os.path.join(str(root), _kernel_sources_stamp())
    if not _os.path.isdir(d):
        _os.makedirs(d, exist_ok=True)
        try:
            old = sorted((e for e in _os.scandir(str(root)) if e.path != d),
                         key=lambda e: e.stat().st_mtime, reverse=True)
            is_stamp = [e.is_dir() and len(e.name) == 16 for e in old]
            stamps = [e for e, st in zip(old, is_stamp) if st]
            for e in stamps[keep - 1:] + [e for e, st in zip(old, is_stamp) if not st]:
                shutil.rmtree(e.path, ignore_errors=True) if e.is_dir() else _os.remove(e.path)
        except OSError:
            pass
    return d


if "NUMBA_CACHE_DIR" not in _os.environ:
    # Numba's compiled-kernel cache lives in specnb's own cache folder, not beside the sources
    from .cache import cache_dir as _cache_dir
    _os.environ["NUMBA_CACHE_DIR"] = _numba_cache_dir(_cache_dir() / "numba")

from .errors import (SpecnbError, GGUFError, UnsupportedError, ParamError, ContextFullError,  # noqa: E402
                     BatchError, VocabError, ModelNotFoundError)

__all__ = ["SpecnbError", "GGUFError", "UnsupportedError", "ParamError", "ContextFullError",
           "BatchError", "VocabError", "ModelNotFoundError"]

__version__ = "0.1.0"
