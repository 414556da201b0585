"""A llama-family model read from a GGUF: hyperparameters, quantized weights, vocab.

Mirrors llama.cpp's llama_model_load for the architectures specnb implements: `llama`
(SmolLM2, TinyLlama, Llama 2/3, Mistral converted as llama), `mistral` (the same network)
and `qwen2` (Q/K/V biases, NEOX rope). Weights stay as memory-mapped quantized blocks;
only the tiny 1-D tensors (norm weights, biases) are turned into float32.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
from gguf import GGMLQuantizationType

from ..errors import GGUFError, UnsupportedError
from ..gguf.file import GGUFFile
from ..kernels.rope import ROPE_NEOX, ROPE_NORM

# architecture -> rope mode (llama.cpp: llama_model_rope_type)
SUPPORTED_ARCHS = {"llama": ROPE_NORM, "mistral": ROPE_NORM, "qwen2": ROPE_NEOX}


def supported_qtypes() -> frozenset[int]:
    from ..kernels.qtypes import SUPPORTED_QTYPES
    return SUPPORTED_QTYPES


@dataclass(frozen=True)
class HParams:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    norm_eps: float
    rope_mode: int
    n_rot: int
    rope_freq_base: float
    rope_freq_scale: float
    tied_output: bool


@dataclass
class QWeight:
    """A quantized weight matrix: n_out rows of n_in values, stored as raw GGUF blocks."""
    name: str
    data: np.ndarray      # uint8 [n_out, row_bytes], a view into the file's memory map
    qtype: int
    n_in: int
    n_out: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.qtype).name

    def dequantize(self) -> np.ndarray:
        # -> float32 [n_out, n_in]   (for the reference and for the embedding lookup)
        from ..kernels.matmul import dequantize
        return dequantize(self.data, self.qtype, self.n_in)


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: QWeight
    wk: QWeight
    wv: QWeight
    wo: QWeight
    ffn_norm: np.ndarray
    w_gate: QWeight
    w_up: QWeight
    w_down: QWeight
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None


@dataclass
class Model:
    path: str
    file: GGUFFile
    hparams: HParams
    vocab: object
    tok_embd: QWeight
    output_norm: np.ndarray
    output: QWeight
    layers: list[Layer] = field(default_factory=list)
    rope_freqs: np.ndarray | None = None

    @property
    def n_vocab(self) -> int:
        return self.hparams.n_vocab

    @property
    def name(self) -> str:
        return str(self.file.get("general.name", os.path.basename(self.path)))

    def weight_bytes(self) -> int:
        n = self.tok_embd.data.nbytes + (0 if self.hparams.tied_output else self.output.data.nbytes)
        for L in self.layers:
            n += sum(w.data.nbytes for w in (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down))
        return n

    def n_params(self) -> int:
        h = self.hparams
        n = self.tok_embd.n_in * self.tok_embd.n_out
        if not h.tied_output:
            n += self.output.n_in * self.output.n_out
        for L in self.layers:
            n += sum(w.n_in * w.n_out for w in (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down))
        return n

    def __repr__(self) -> str:
        h = self.hparams
        return (f"Model({self.name!r}, arch={h.arch}, n_layer={h.n_layer}, n_embd={h.n_embd}, "
                f"n_head={h.n_head}/{h.n_head_kv}, n_vocab={h.n_vocab}, "
                f"{self.weight_bytes() / 2**20:.1f} MiB of weights)")


def _int_key(g: GGUFFile, key: str, default=None, lo: int = 1, hi: int = 1 << 20) -> int:
    """An integer hyperparameter: present (or defaulted), of an integer type, within [lo, hi]."""
    v = g.get(key, default)
    if v is None:
        raise GGUFError(f"{g.path}: missing hyperparameter {key}")
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise GGUFError(f"{g.path}: hyperparameter {key}={_short(v)} is not an integer")
    if not lo <= v <= hi:
        raise GGUFError(f"{g.path}: hyperparameter {key}={v} is out of range [{lo}, {hi}]")
    return int(v)


def _float_key(g: GGUFFile, key: str, default: float, positive: bool = True) -> float:
    """A float hyperparameter: a finite number, > 0 (or >= 0 unless `positive`)."""
    v = g.get(key, default)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise GGUFError(f"{g.path}: hyperparameter {key}={_short(v)} is not a number")
    v = float(v)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise GGUFError(f"{g.path}: hyperparameter {key}={v} must be a finite number "
                        f"{'> 0' if positive else '>= 0'}")
    return v


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _hparams(g: GGUFFile, n_vocab: int) -> HParams:
    arch = g.get("general.architecture")
    if arch is None:
        raise GGUFError(f"{g.path}: no general.architecture key: not a model file")
    if not isinstance(arch, str):
        raise GGUFError(f"{g.path}: general.architecture={_short(arch)} is not a string")
    if arch not in SUPPORTED_ARCHS:
        raise UnsupportedError(f"{g.path}: unsupported architecture {arch!r}; specnb supports "
                               f"{', '.join(sorted(SUPPORTED_ARCHS))}")
    n_embd = _int_key(g, f"{arch}.embedding_length")
    n_head = _int_key(g, f"{arch}.attention.head_count")
    n_head_kv = _int_key(g, f"{arch}.attention.head_count_kv", n_head)
    n_layer = _int_key(g, f"{arch}.block_count")
    n_ff = _int_key(g, f"{arch}.feed_forward_length")
    if n_head % n_head_kv:
        raise GGUFError(f"{g.path}: head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    if n_embd < n_head and f"{arch}.attention.key_length" not in g.metadata:
        raise GGUFError(f"{g.path}: embedding_length {n_embd} is smaller than head_count {n_head}")
    head_dim = _int_key(g, f"{arch}.attention.key_length", n_embd // n_head)
    n_rot = _int_key(g, f"{arch}.rope.dimension_count", head_dim)
    if n_rot > head_dim or n_rot % 2:
        raise GGUFError(f"{g.path}: rope.dimension_count {n_rot} does not fit head size {head_dim}")
    scale = 1.0
    scaling = g.get(f"{arch}.rope.scaling.type", "none")
    if not isinstance(scaling, str):
        raise GGUFError(f"{g.path}: {arch}.rope.scaling.type={_short(scaling)} is not a string")
    if scaling == "linear":
        factor = _float_key(g, f"{arch}.rope.scaling.factor", 1.0, positive=False)
        scale = 1.0 / factor if factor > 0 else 1.0     # llama.cpp: a factor of 0 means none
    return HParams(
        arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_ff=n_ff, n_vocab=n_vocab,
        n_ctx_train=_int_key(g, f"{arch}.context_length", 2048, hi=2**32 - 1),
        norm_eps=_float_key(g, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5, positive=False),
        rope_mode=SUPPORTED_ARCHS[arch], n_rot=n_rot,
        rope_freq_base=_float_key(g, f"{arch}.rope.freq_base", 10000.0),
        rope_freq_scale=scale, tied_output="output.weight" not in g.tensors)


def _vector(g: GGUFFile, name: str, n: int) -> np.ndarray:
    t = g.tensors.get(name)
    if t is None:
        raise GGUFError(f"{g.path}: missing tensor {name}")
    if t.shape != (n,):
        raise GGUFError(f"{g.path}: tensor {name} has shape {list(t.shape)}, expected [{n}]")
    _check_type(g, name)
    raw = np.asarray(g.tensor_bytes(name)).reshape(-1)
    # the float types read directly (every real model stores its norms and biases as F32): the
    # kernels' decoder would compile, for every type, at the first load of a fresh install
    if t.qtype == GGMLQuantizationType.F32:
        return raw.view(np.float32).astype(np.float32)
    if t.qtype == GGMLQuantizationType.F16:
        return raw.view(np.float16).astype(np.float32)
    if t.qtype == GGMLQuantizationType.BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    from ..kernels.matmul import dequantize
    return dequantize(raw, t.qtype, n).reshape(n).astype(np.float32)


def _check_type(g: GGUFFile, name: str) -> None:
    t = g.tensors[name]
    if t.qtype not in supported_qtypes():
        names = ", ".join(GGMLQuantizationType(q).name for q in sorted(supported_qtypes()))
        raise UnsupportedError(f"{g.path}: tensor {name} has type {t.type_name}, which specnb "
                               f"does not implement (supported: {names})")


def _matrix(g: GGUFFile, name: str, n_in: int, n_out: int) -> QWeight:
    t = g.tensors.get(name)
    if t is None:
        raise GGUFError(f"{g.path}: missing tensor {name}")
    if t.shape != (n_in, n_out):
        raise GGUFError(f"{g.path}: tensor {name} has shape {list(t.shape)}, expected [{n_in}, {n_out}]")
    _check_type(g, name)
    return QWeight(name, g.tensor_bytes(name), t.qtype, n_in, n_out)


def load_model(path: str | os.PathLike, vocab_only: bool = False) -> Model:
    """Open a GGUF and build the Model (weights stay memory-mapped and quantized). `path` is a
    file or a registry name such as "qwen2.5-coder-1.5b" (`specnb models`; registry.py)."""
    from .registry import resolve
    from ..vocab import Vocab
    path = resolve(path)
    g = GGUFFile(path)
    if vocab_only:   # the vocab gate needs only the tokenizer tables, of any architecture
        return Model(os.fspath(path), g, None, Vocab.from_gguf(g), None, None, None, [])
    tokens = g.get("tokenizer.ggml.tokens")
    h = _hparams(g, len(tokens) if isinstance(tokens, list) else 0)
    if h.n_vocab:
        # the embedding matrix is checked before the vocab is built (a few hundred bytes a
        # token), so a forged token table only becomes as large a vocab as the matrix the file
        # holds
        _matrix(g, "token_embd.weight", h.n_embd, h.n_vocab)
    vocab = Vocab.from_gguf(g)
    if vocab.n_vocab != h.n_vocab or h.n_vocab == 0:
        raise GGUFError(f"{g.path}: tokenizer has {vocab.n_vocab} tokens, model expects {h.n_vocab}")
    hd, nkv = h.head_dim, h.n_head_kv
    tok = _matrix(g, "token_embd.weight", h.n_embd, h.n_vocab)
    out = tok if h.tied_output else _matrix(g, "output.weight", h.n_embd, h.n_vocab)
    layers = []
    for i in range(h.n_layer):
        p = f"blk.{i}."
        L = Layer(
            attn_norm=_vector(g, p + "attn_norm.weight", h.n_embd),
            wq=_matrix(g, p + "attn_q.weight", h.n_embd, h.n_head * hd),
            wk=_matrix(g, p + "attn_k.weight", h.n_embd, nkv * hd),
            wv=_matrix(g, p + "attn_v.weight", h.n_embd, nkv * hd),
            wo=_matrix(g, p + "attn_output.weight", h.n_head * hd, h.n_embd),
            ffn_norm=_vector(g, p + "ffn_norm.weight", h.n_embd),
            w_gate=_matrix(g, p + "ffn_gate.weight", h.n_embd, h.n_ff),
            w_up=_matrix(g, p + "ffn_up.weight", h.n_embd, h.n_ff),
            w_down=_matrix(g, p + "ffn_down.weight", h.n_ff, h.n_embd),
        )
        if p + "attn_q.bias" in g.tensors:
            L.bq = _vector(g, p + "attn_q.bias", h.n_head * hd)
            L.bk = _vector(g, p + "attn_k.bias", nkv * hd)
            L.bv = _vector(g, p + "attn_v.bias", nkv * hd)
        layers.append(L)
    rope_freqs = None
    if "rope_freqs.weight" in g.tensors:
        rope_freqs = _vector(g, "rope_freqs.weight", h.n_rot // 2)
    return Model(os.fspath(path), g, h, vocab, tok, _vector(g, "output_norm.weight", h.n_embd),
                 out, layers, rope_freqs)
