"""Forge GGUF variants of a real model, for teaching: drafts and vocab mutations.

- `requantize(src, dst, "Q4_0")`: the same network with its quantized matrices requantized
  (the registry's stand-in draft `smollm2-135m-q4_0`: SmolLM2-135M Q4_1 -> Q4_0).
- `truncate_layers(src, dst, k)`: keep the first k layers (a poor draft: many rejections).
- `mutate_vocab(src, dst, kind)`: copies that each fail exactly one vocab-gate check.
- `rewrite(src, dst, ...)`: the generic copy with changed metadata or tensors under them all.

Files are written atomically (gguf_write.write_gguf), only to the destination the caller names.
Tiny random models for tests live in specnb.model.testing.
"""
from __future__ import annotations

import os

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from ..errors import ParamError
from .file import REPACK_KEY, GGUFFile
from .write import add_raw_tensor, copy_kv, write_gguf

MUTATIONS = ("rename-token", "eos-id", "bos-flag", "extra-tokens", "vocab-type")


# ---- the generic rewriter -------------------------------------------------------------------
def rewrite(src, dst, *, metadata: dict | None = None, skip_keys=(), tensor_fn=None,
            keep_tensor=None) -> str:
    """Copy a GGUF, changing metadata and (through tensor_fn) tensors. Returns dst."""
    g = GGUFFile(src)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ParamError(f"forge: destination {dst} is the source file; choose another path")
    arch = g.get("general.architecture", "llama")

    def fill(w):
        copy_kv(w, g, metadata, skip_keys)
        for t in g.tensors.values():
            if keep_tensor is not None and not keep_tensor(t.name):
                continue
            raw, qtype = np.asarray(g.tensor_bytes(t.name)), t.qtype
            if tensor_fn is not None:
                raw, qtype = tensor_fn(t, raw)
            add_raw_tensor(w, t.name, raw, t.shape, qtype)
    return write_gguf(dst, arch, fill)


# ---- the variants ------------------------------------------------------------------------------
def requantize(src, dst, qtype: str = "Q4_0", repack: bool = False, metadata: dict | None = None) -> str:
    """Requantize every quantized 2-D weight (not the token embedding) to `qtype`. repack=True
    also asks specnb's CPU backend to interleave that type (REPACK_KEY; the requantized real draft,
    whose products should be the fast ones; the teaching pair's stand-in keeps the per-row kernels
    with which its rounds are llama.cpp's). `metadata`: more keys to write."""
    try:
        target = QT[qtype]
    except KeyError:
        raise ParamError(f"forge: unknown tensor type {qtype!r}") from None

    def fn(t, raw):
        if len(t.shape) != 2 or t.qtype in (QT.F32, QT.F16, QT.BF16) or t.name == "token_embd.weight":
            return raw, t.qtype
        x = np.asarray(gguf_dequantize(raw, QT(t.qtype)), dtype=np.float32).reshape(t.shape[1], t.shape[0])
        return gguf_quantize(x, target), int(target)
    meta = {"general.file_type": 2 if qtype == "Q4_0" else 0}
    if repack:
        meta[REPACK_KEY] = [qtype]
    meta.update(metadata or {})
    return rewrite(src, dst, metadata=meta, tensor_fn=fn)


def truncate_layers(src, dst, n_layer: int) -> str:
    g = GGUFFile(src)
    arch = g.get("general.architecture")
    n = int(g.get(f"{arch}.block_count", 0))
    if not 1 <= n_layer <= n:
        raise ParamError(f"forge: n_layer={n_layer} must be in [1, {n}] for {src}")

    def keep(name):
        return not name.startswith("blk.") or int(name.split(".")[1]) < n_layer
    return rewrite(src, dst, metadata={f"{arch}.block_count": n_layer}, keep_tensor=keep)


def mutate_vocab(src, dst, kind: str) -> str:
    """A copy whose vocab fails exactly one gate check."""
    g = GGUFFile(src)
    tokens = list(g.get("tokenizer.ggml.tokens") or [])
    if kind == "rename-token":
        i = 1000 if len(tokens) > 1000 else len(tokens) - 1
        tokens[i] = tokens[i] + "_renamed"
        md = {"tokenizer.ggml.tokens": tokens}
    elif kind == "eos-id":
        eos = int(g.get("tokenizer.ggml.eos_token_id", 0))
        md = {"tokenizer.ggml.eos_token_id": 0 if eos != 0 else 1}
    elif kind == "bos-flag":
        md = {"tokenizer.ggml.add_bos_token": not bool(g.get("tokenizer.ggml.add_bos_token", False))}
    elif kind == "extra-tokens":
        extra = [f"<|extra_{i}|>" for i in range(129)]
        md = {"tokenizer.ggml.tokens": tokens + extra}
        types = g.get("tokenizer.ggml.token_type")
        if types is not None:
            md["tokenizer.ggml.token_type"] = np.concatenate([types, np.full(129, 4, np.int32)])
    elif kind == "vocab-type":
        model = g.get("tokenizer.ggml.model")
        md = {"tokenizer.ggml.model": "llama" if model != "llama" else "gpt2"}
        if "tokenizer.ggml.scores" not in g.metadata:
            md["tokenizer.ggml.scores"] = np.zeros(len(tokens), dtype=np.float32)
    else:
        raise ParamError(f"forge: unknown mutation {kind!r}; choose from {', '.join(MUTATIONS)}")
    return rewrite(src, dst, metadata=md)
