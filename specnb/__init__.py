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

# The learner's API, one name a line: editors follow these imports, and `_API` below is read from
# them, so that each name loads on first use.
if TYPE_CHECKING:
    # a model and its tokens
    from .model import load_model
    from .vocab import Vocab
    # running a model, choosing tokens
    from .run.context import Context
    from .run.context import Batch
    from .run.pair import open_pair
    from .run.sampling import Sampler
    from .run.sampling import SamplerParams
    from .run.sampling import sample_and_accept_n
    from .run.generate import generate
    # speculation
    from .speculative_simple import speculative_simple
    from .speculation.loop import SpeculativeLoop
    from .speculation.params import SpecParams
    from .speculation.draft_simple import DraftSimple
    from .speculation.impl import DraftParams
    # the live view (the notebook extra)
    from .view import LiveView


def _type_checking_names(source: str) -> dict:
    """A door's {name: the module that defines it, relative to specnb}, read from the `from .module
    import name` lines of its `if TYPE_CHECKING:` block: each name is written once, there."""
    import ast
    block = next(n for n in ast.parse(source).body
                 if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {alias.asname or alias.name: node.module for node in block.body for alias in node.names}


def _load(module: str, name: str):
    """`from specnb.<module> import <name>`, run now: the module's own name, else its submodule
    (a door's __getattr__ loads its names so, on first use)."""
    mod = _importlib.import_module(f"{__name__}.{module}")
    return vars(mod)[name] if name in vars(mod) else _importlib.import_module(f"{mod.__name__}.{name}")


_API = _type_checking_names(__spec__.loader.get_source(__name__))   # name -> module

__all__ = sorted(["SpecnbError", "GGUFError", "UnsupportedError", "ParamError", "ContextFullError",
                  "BatchError", "VocabError", "ModelNotFoundError", *_API])


def __getattr__(name: str):
    if name in _API:
        value = _load(_API[name], name)
    else:
        hint = " (it is in specnb.course)" if _in_course(name) else ""
        raise AttributeError(f"module 'specnb' has no attribute {name!r}{hint}")
    globals()[name] = value
    return value


def _in_course(name: str) -> bool:
    """Whether the course's door (specnb.course: its names, `say` and `check`) has `name`, read
    from its source: the door is not loaded for an error message."""
    import importlib.util
    spec = importlib.util.find_spec(f"{__name__}.course")
    return name in ("say", "check") or name in _type_checking_names(spec.loader.get_source(spec.name))


def __dir__():
    return __all__


__version__ = "0.1.0"
