"""specnb: small-draft-model speculative decoding as llama.cpp does it, in readable Python."""
import os as _os

if "NUMBA_CACHE_DIR" not in _os.environ:
    # Numba's compiled-kernel cache lives in specnb's own cache folder, not beside the sources
    from .models import cache_dir as _cache_dir
    _os.environ["NUMBA_CACHE_DIR"] = str(_cache_dir() / "numba")

from .errors import (SpecnbError, GGUFError, UnsupportedError, ParamError, ContextFullError,  # noqa: E402
                     BatchError, VocabError, ModelNotFoundError)

__version__ = "0.1.0"
