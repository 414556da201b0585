"""The pairs the exercise runs on, and the contexts and texts its checks build on them.

"tiny" is steps 1-3's default: a random 2-layer model forged into specnb's cache on first use, with
the default pair's tensor types, so it reuses the kernels the notebooks compiled (a check takes
seconds). "default" is SmolLM2-135M and its Q4_0 stand-in draft, the notebooks' pair. "real" is
Qwen2.5-Coder 1.5B and 0.5B, step 4's pair where it is installed. A (target, draft) tuple of Models,
paths or registry names works everywhere too.
"""
from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import numpy as np

PROMPT = "Once upon a time"
N_CTX = 256
TINY_SEED = 1             # a seed whose random pair drafts varied text (full, partial and no acceptance)
MODEL_NAMES = ("tiny", "default", "real")


def draft_sampler(seed: int = 0):
    """The draft sampler of draft-simple: top-k 10, then dist (common/speculative.cpp:224-234)."""
    from ...run.sampling import Sampler, SamplerParams
    return Sampler(SamplerParams(top_k=10, samplers=("top_k",), seed=seed))


def tiny_pair_paths(folder=None, seed: int = TINY_SEED) -> tuple[str, str]:
    """Forge (once) a tiny random target and its Q4_0 draft; returns their paths.

    The target: specnb.model.testing.tiny_model (2 layers, 64 dims, 299 tokens) in Q4_1 with an
    untied Q8_0 output head; the draft: the target requantized to Q4_0. Those are the default
    SmolLM2 pair's tensor types (Q4_1 and Q4_0 matrices, Q8_0 embedding), so the Numba pass the
    notebooks compiled serves them too."""
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import dequantize, quantize

    from ...cache import cache_dir
    from ...gguf.forge import requantize, rewrite
    from ...model.testing import tiny_model
    folder = Path(folder) if folder is not None else cache_dir() / "exercise"
    folder.mkdir(parents=True, exist_ok=True)
    tgt = folder / f"tiny-target-q4_1-s{seed}.gguf"
    dft = folder / f"tiny-draft-q4_0-s{seed}.gguf"
    if not tgt.exists():
        fd, raw = tempfile.mkstemp(prefix=".tiny-", suffix=".gguf", dir=folder)
        os.close(fd)
        try:
            tiny_model(raw, qtype="Q4_1", seed=seed, tied=False)

            def head_q8(t, data):
                if t.name != "output.weight":
                    return data, t.qtype
                x = np.asarray(dequantize(data, QT(t.qtype)), dtype=np.float32).reshape(t.shape[1], t.shape[0])
                return quantize(x, QT.Q8_0), int(QT.Q8_0)
            rewrite(raw, tgt, tensor_fn=head_q8)
        finally:
            os.remove(raw)
    if not dft.exists():
        requantize(tgt, dft, "Q4_0")
    return str(tgt), str(dft)


def _registry_names(name: str) -> tuple[str, str]:
    from ...model.registry import DEFAULT_DRAFT, DEFAULT_TARGET, REAL_DRAFT, REAL_TARGET
    return {"default": (DEFAULT_TARGET, DEFAULT_DRAFT), "real": (REAL_TARGET, REAL_DRAFT)}[name]


@functools.lru_cache(maxsize=4)
def _named_models(name: str):
    from ...model import load_model
    if name == "tiny":
        return tuple(load_model(p) for p in tiny_pair_paths())
    if name in MODEL_NAMES:
        return tuple(load_model(n) for n in _registry_names(name))
    raise ValueError(f"models={name!r}: expected 'tiny', 'default', 'real' or a (target, draft) pair")


def exercise_models(models="tiny"):
    """(target, draft) Models: "tiny", "default", "real", or a (target, draft) pair of Models,
    paths or registry names."""
    from ...model import Model, load_model
    if isinstance(models, str):
        return _named_models(models)
    try:
        tgt, dft = models
    except (TypeError, ValueError):
        raise ValueError(f"models={models!r}: expected 'tiny', 'default', 'real' or a (target, draft) "
                         "pair") from None
    return tuple(m if isinstance(m, Model) else load_model(os.fspath(m)) for m in (tgt, dft))


def real_pair_installed() -> bool:
    """Are both models of the real pair (Qwen2.5-Coder 1.5B and 0.5B) installed?"""
    from ...model.registry import REGISTRY, check_parts
    return all(n in REGISTRY and check_parts(REGISTRY[n]).ok for n in _registry_names("real"))


def exercise_pair(models="tiny", n_ctx: int = N_CTX):
    """A Pair (target, draft, ctx_tgt, ctx_dft) of the exercise's models, to try your functions on."""
    from ...run.pair import open_pair
    tgt, dft = exercise_models(models)
    return open_pair(tgt, dft, n_ctx=n_ctx)


def ctx_for(model, pair, n_ctx: int = N_CTX):
    """A context that runs the same compiled pass as open_pair's (both models' tensor types)."""
    from ...run.context import Context
    return Context(model, n_ctx=n_ctx, share_kernels_with=tuple(pair))


def prefilled(pair, prompt: list, n_ctx: int = N_CTX):
    """Target and draft contexts holding the prompt but its last token, as a round expects them:
    (ctx_tgt, ctx_dft, n_past, id_last)."""
    from ...run.context import Batch
    ct, cd = ctx_for(pair[0], pair, n_ctx), ctx_for(pair[1], pair, n_ctx)
    for c in (ct, cd):
        c.decode(Batch.from_tokens(prompt[:-1], 0, 0, "none"))
    return ct, cd, len(prompt) - 1, prompt[-1]


def hold(ctx, history: list, n: int) -> None:
    """Make sequence 0 of ctx hold exactly history[:n] (keep the rows that match, decode the rest)."""
    from ...run.context import Batch
    first = next((p for p in range(n) if not ctx.holds(0, p, history[p])), n)
    ctx.seq_rm(0, first, -1)
    if first < n:
        ctx.decode(Batch.from_tokens(history[first:n], first, 0, "none"))


def greedy_history(pair, prompt: list, n: int) -> list:
    """The prompt and the target's greedy continuation of it (up to n tokens)."""
    from ...run.generate import generate
    from ...run.sampling import Sampler, SamplerParams
    out = generate(ctx_for(pair[0], pair), Sampler(SamplerParams(temp=0.0)), prompt, n, penalize_prompt=False)
    return list(prompt) + list(out.tokens)
