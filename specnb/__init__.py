"""specnb: small-draft-model speculative decoding as llama.cpp does it, in readable Python.

This module is the front door: the learner's API, fifteen names and the errors
(`from specnb import load_model, open_pair, SpeculativeLoop`), loaded on first use, so
`import specnb` itself reads no model, imports no Numba and touches no disk. The course's other
names (figures, measurements, the model registry, `say` and `check`) come from `specnb.course`.

Read the code in this order (docs/architecture.md draws the whole map):
  1. specnb/speculative_simple.py   the algorithm in fifty lines, as examples/speculative-simple
  2. specnb/run/sampling.py         sample_and_accept_n: the target's sampler decides each token
  3. specnb/run/context.py          decode, KV cells, seq_rm, state save and load
  4. specnb/speculation/draft_simple.py    the draft model drafting greedily on its own context
  5. specnb/model/reference.py      the forward pass in plain NumPy (the tests' oracle)
  6. specnb/speculation/loop.py            the full loop: slots, verifiers, checkpoints, round events

The folders, in the order data flows through them: gguf/ (the file) -> vocab/ -> model/ ->
run/ (contexts, samplers) -> speculation/ -> measure/ and figures/ -> view/ (widgets)
-> app/ (the command line, the demo, the notebook executor); the kernels are specnb.kernels
(the repository's kernels/ folder).
"""
from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING

from .errors import (BatchError, ContextFullError, GGUFError, ModelNotFoundError,
                     ParamError, SpecnbError, UnsupportedError, VocabError)

# name -> the module that defines it (relative to specnb); modules are loaded on first use
_API = {
    # a model and its tokens
    "load_model": "model", "Vocab": "vocab",
    # running a model, choosing tokens
    "Context": "run.context", "Batch": "run.context", "open_pair": "run.pair",
    "Sampler": "run.sampling", "SamplerParams": "run.sampling",
    "sample_and_accept_n": "run.sampling", "generate": "run.generate",
    # speculation
    "speculative_simple": "speculative_simple", "SpeculativeLoop": "speculation.loop",
    "SpecParams": "speculation.params", "DraftSimple": "speculation.draft_simple",
    "DraftParams": "speculation.impl",
    # the live view (the notebook extra)
    "LiveView": "view",
}

if TYPE_CHECKING:       # for editors and type checkers: the same names, imported statically
    from .model import load_model
    from .run.context import Batch, Context
    from .run.generate import generate
    from .run.pair import open_pair
    from .run.sampling import Sampler, SamplerParams, sample_and_accept_n
    from .speculation.draft_simple import DraftSimple
    from .speculation.impl import DraftParams
    from .speculation.loop import SpeculativeLoop
    from .speculation.params import SpecParams
    from .speculative_simple import speculative_simple
    from .view import LiveView
    from .vocab import Vocab

__all__ = sorted(["SpecnbError", "GGUFError", "UnsupportedError", "ParamError", "ContextFullError",
                  "BatchError", "VocabError", "ModelNotFoundError", *_API])


def __getattr__(name: str):
    if name in _API:
        value = getattr(_importlib.import_module(f".{_API[name]}", __name__), name)
    elif name == "course":
        value = _importlib.import_module(".course", __name__)
    else:
        hint = " (it is in specnb.course)" if _in_course(name) else ""
        raise AttributeError(f"module 'specnb' has no attribute {name!r}{hint}")
    globals()[name] = value
    return value


def _in_course(name: str) -> bool:
    from . import course
    return name in course.__all__


def __dir__():
    return __all__


__version__ = "0.1.0"
