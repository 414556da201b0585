"""One constructor for a target/draft pair and their contexts (common_speculative_init_from_params).

`open_pair(target, draft)` loads both models (a registry name such as "qwen2.5-coder-1.5b", a
path, an already loaded Model, or None for the default) and builds one Context for each with the
same n_ctx and one KV sequence per target sequence, as llama.cpp sizes the draft context: the
draft must hold the same history as the target, not only n_max extra tokens. `draft=False`
opens the target alone (speculators that need no draft model, such as the n-gram ones).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .context import Context
from ..model import Model, load_model


@dataclass
class Pair:
    target: Model
    draft: Model | None
    ctx_tgt: Context
    ctx_dft: Context | None


def resolve_model(m, default) -> Model:
    """A Model as given, or loaded from a registry name or path; `default()` gives the path
    when m is None."""
    if isinstance(m, Model):
        return m
    return load_model(default() if m is None else os.fspath(m))


def open_pair(target=None, draft=None, *, n_ctx: int = 2048, n_seq: int = 1,
              backend: str = "cpu", n_threads: int | None = None, activations: str | None = None,
              tgt_seq_rm: bool = True, dft_seq_rm: bool = True) -> Pair:
    """Load a target and a draft and build their contexts side by side.

    target, draft: a registry name (`specnb models`), a GGUF path, a loaded Model, or None (the
    default target smollm2-135m; the default draft smollm2-135m-q4_0, the target requantized to
    Q4_0). draft=False: no draft model and no draft context.
    tgt_seq_rm / dft_seq_rm=False give a memory that cannot drop part of a sequence (see
    Context's partial_seq_rm), which makes the loop use checkpoints instead of seq_rm.
    """
    from ..model.registry import default_draft_path, default_target_path
    tgt = resolve_model(target, default_target_path)
    dft = None if draft is False else resolve_model(draft, default_draft_path)
    # both contexts run one compiled forward pass, made for the tensor types of both models
    share = () if dft is None else (tgt, dft)
    ctx_tgt = Context(tgt, n_ctx=n_ctx, n_seq_max=n_seq, backend=backend, n_threads=n_threads,
                      partial_seq_rm=tgt_seq_rm, activations=activations, share_kernels_with=share)
    if dft is None:
        return Pair(tgt, None, ctx_tgt, None)
    ctx_dft = Context(dft, n_ctx=n_ctx, n_seq_max=n_seq, backend=backend, n_threads=n_threads,
                      partial_seq_rm=dft_seq_rm, activations=activations, share_kernels_with=share)
    return Pair(tgt, dft, ctx_tgt, ctx_dft)


def with_draft(pair: Pair, draft) -> Pair:
    """The same target and target context with another draft model (a name, a path or a Model)
    and its own context, made as open_pair makes the draft's (its compiled pass serves the
    target's and this draft's tensor types, as a pair opened with it would)."""
    dft = resolve_model(draft, None)
    c = pair.ctx_dft if pair.ctx_dft is not None else pair.ctx_tgt
    ctx = Context(dft, n_ctx=c.n_ctx, n_seq_max=c.n_seq_max, backend=c.backend_name, n_threads=c.n_threads,
                  partial_seq_rm=c.partial_seq_rm, activations=c.activations,
                  share_kernels_with=(pair.target, dft))
    return Pair(pair.target, dft, pair.ctx_tgt, ctx)


def warm_up(*contexts: Context, progress: bool = True) -> float:
    """Decode two tokens in each context and clear it again, so that Numba has compiled (or
    loaded from its cache) every kernel these models use before anything is timed. The first
    run on a machine compiles for a few minutes; a ticker on stderr says so. Returns seconds."""
    from .context import Batch
    from ..kernels import prune_caches
    from ..progress import Ticker
    prune_caches()
    with Ticker("preparing the kernels", every=15.0, enabled=progress,
                hint="Numba compiles them on a machine's first run, a few minutes, then caches them") as t:
        for ctx in contexts:
            if ctx is None:
                continue
            ctx.decode(Batch.from_tokens([0, 1], 0, 0, "all"))
            ctx.decode(Batch.from_tokens([2], 2, 0, "all"))
            ctx.clear()
    return t.elapsed
