"""specnb: small-draft-model speculative decoding as llama.cpp does it, in readable Python.

This module is the front door: every name the README and the notebooks use is importable from
here (`from specnb import load_model, open_pair, SpeculativeLoop`), loaded on first use, so
`import specnb` itself reads no model, imports no Numba and touches no disk.

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

from .errors import (BatchError, ContextFullError, GGUFError, ModelNotFoundError,  # noqa: F401 (the API)
                     ParamError, SpecnbError, UnsupportedError, VocabError)

# name -> the module that defines it (relative to specnb); modules are loaded on first use
_API = {
    # a model and its file
    "load_model": "model", "Model": "model", "Vocab": "vocab", "GGUFFile": "gguf.file",
    "are_compatible": "vocab.gate", "SPEC_VOCAB_MAX_SIZE_DIFFERENCE": "vocab.gate",
    "SPEC_VOCAB_CHECK_START_TOKEN_ID": "vocab.gate",
    "rewrite": "gguf.forge", "truncate_layers": "gguf.forge", "mutate_vocab": "gguf.forge",
    "MUTATIONS": "gguf.forge",
    # which models, where
    "REAL_TARGET": "model.registry", "REAL_DRAFT": "model.registry", "describe": "model.registry",
    "model_path": "model.registry", "default_target_path": "model.registry",
    "default_draft_path": "model.registry", "gemma_available": "model.registry",
    "gemma_path": "model.registry",
    # running a model, choosing tokens
    "Context": "run.context", "Batch": "run.context", "can_seq_rm": "run.context",
    "set_threads": "run.context", "open_pair": "run.pair", "Pair": "run.pair",
    "Sampler": "run.sampling", "SamplerParams": "run.sampling",
    "sample_and_accept_n": "run.sampling", "generate": "run.generate",
    # speculation
    "speculative_simple": "speculative_simple", "SpeculativeLoop": "speculation.loop",
    "SpecParams": "speculation.params", "build_speculative": "speculation.speculative",
    "SPEC_TYPES": "speculation.params", "PRIORITY": "speculation.params",
    "DraftSimple": "speculation.draft_simple", "DraftParams": "speculation.impl",
    "SpeculativeImpl": "speculation.impl", "ngram_simple_draft": "speculation.ngram",
    "rejection_verify": "speculation.verify", "speculative_step": "speculation.verify",
    "AutoDraftLen": "speculation.draft_len", "CATCH_UP_WINDOW": "speculation.draft_len",
    # measuring
    "event_stats": "measure.stats", "run_stats": "measure.stats",
    "examined_counts": "measure.stats", "batch_costs": "measure.bench",
    "measure_cost_ratio": "measure.experiments", "sweep_draft_max": "measure.experiments",
    "CODE_EDIT_REQUEST": "measure.spec_bench", "code_edit_prompt": "measure.spec_bench",
    # figures
    "fig_acceptance_per_position": "figures.runs", "fig_tokens_per_call": "figures.runs",
    "fig_round_timeline": "figures.runs", "fig_speedup_vs_draft_max": "figures.runs",
    "fig_rounds_by_impl": "figures.runs",
    "fig_time_per_token": "figures.time_per_token",
    "fig_draft_confidence": "figures.sampling", "fig_draft_rows": "figures.sampling",
    "fig_alpha_vs_temperature": "figures.sampling", "fig_p_q_overlap": "figures.sampling",
    "fig_slot_positions": "figures.sampling", "tv_distance": "figures.sampling",
    "static_figures": "figures.snapshot",
    "round_cost": "figures.cost_map", "engine_speedup": "figures.cost_map",
    "coverage_speedup": "figures.cost_map", "best_speedup": "figures.cost_map",
    "decode_roofline": "figures.cost_map", "streaming_gb_s": "figures.cost_map",
    "fig_cost_map": "figures.cost_map",
    # prose from measurements and the exercise format
    "say": "figures.prose", "check": "figures.prose", "measured_phrases": "figures.prose",
    # the live view (the notebook extra)
    "LiveView": "view", "kv_states": "view", "visible": "view", "MARK": "view",
}
# modules a learner uses as a namespace (cost.speedup(alpha, gamma, c), ...)
_MODULES = {"cost": "measure.cost"}

__all__ = sorted(["SpecnbError", "GGUFError", "UnsupportedError", "ParamError", "ContextFullError",
                  "BatchError", "VocabError", "ModelNotFoundError", *_API, *_MODULES])


def __getattr__(name: str):
    if name in _MODULES:
        value = _importlib.import_module(f".{_MODULES[name]}", __name__)
    elif name in _API:
        value = getattr(_importlib.import_module(f".{_API[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'specnb' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__


__version__ = "0.1.0"
