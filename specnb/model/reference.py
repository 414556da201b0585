"""The plain NumPy forward pass of a llama-family model: the oracle every backend is tested against.

Written to be read in one sitting (picoGPT style: a shape comment on every function). It
dequantizes the weights to float32 with the `gguf` package's own dequantizer (independent of
specnb's kernels), computes in float64 where it matters, and recomputes the whole sequence
every call: no KV cache, no batching, nothing clever. Slow on purpose.

`Reference(model, activations="q8")` rounds the input of every quantized matrix product to int8
blocks first, as llama.cpp's CPU backend does (and specnb's activations="q8"); the product itself
stays exact in float64, so the int8 engine can be checked against the rounding alone.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from ..kernels.rope import ROPE_NEOX


def weight(w) -> np.ndarray:
    # QWeight -> float32 [n_out, n_in], dequantized by the gguf package
    arr = gguf_dequantize(np.asarray(w.data), GGMLQuantizationType(w.qtype))
    return np.asarray(arr, dtype=np.float32).reshape(w.n_out, w.n_in)


# the weight types whose products take int8 activations (llama.cpp's vec_dot_type q8_0 / q8_1 /
# q8_K): the K types per 256 elements, the others per 32; float weights keep float activations
_Q8_32 = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}
_Q8_K = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


def round_q8(a, type_name: str) -> np.ndarray:
    """[n, n_in] -> float64 [n, n_in]: the activations as the int8 blocks the CPU backend makes of
    them before a product with weights of `type_name` (ggml-quants.c at c392e50:
    quantize_row_q8_K_ref, d = max / -127 over 256; quantize_row_q8_0, d = max|x| / 127 over 32,
    nearest even as its AVX2 path rounds; ggml keeps that d as a half float, specnb and this
    reference as a float32)."""
    x = np.asarray(a, np.float32)
    if type_name in _Q8_K:
        xb = x.reshape(len(x), -1, 256)                                     # [n, n_in / 256, 256]
        mx = np.take_along_axis(xb, np.abs(xb).argmax(-1)[..., None], -1)   # signed max |x|
        with np.errstate(divide="ignore"):
            iscale = np.where(mx != 0, np.float32(-127) / mx, 0).astype(np.float32)
            d = np.where(mx != 0, np.float32(1) / iscale, 0).astype(np.float32)
        q = np.minimum(127, np.rint(iscale * xb))
    elif type_name in _Q8_32:
        xb = x.reshape(len(x), -1, 32)                                      # [n, n_in / 32, 32]
        d = (np.abs(xb).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
        q = np.rint(xb * inv)
    else:
        return np.asarray(a, np.float64)
    return (q * d.astype(np.float64)).reshape(x.shape)


def rms_norm(x, g, eps):
    # [n_seq, n_embd] -> [n_seq, n_embd]
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def rope(x, pos, n_rot, base, freq_scale, freq_factors, mode):
    # [n_seq, n_head, head_dim] -> [n_seq, n_head, head_dim]
    half = n_rot // 2
    inv = base ** (-np.arange(half) * 2.0 / n_rot) * freq_scale
    if freq_factors is not None:
        inv = inv / freq_factors
    theta = pos[:, None, None] * inv                     # [n_seq, 1, half]
    cos, sin = np.cos(theta), np.sin(theta)
    x = x.copy()
    if mode == ROPE_NEOX:   # rotate (x[i], x[i + half])
        a, b = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half], x[..., half:n_rot] = a * cos - b * sin, a * sin + b * cos
    else:                   # rotate adjacent pairs (x[2i], x[2i+1])
        a, b = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2], x[..., 1:n_rot:2] = a * cos - b * sin, a * sin + b * cos
    return x


def attention(q, k, v, n_head_kv):
    # [n_seq, n_head, hd], [n_seq, n_head_kv, hd] x2 -> [n_seq, n_head * hd]   (causal)
    n, n_head, hd = q.shape
    group = n_head // n_head_kv
    k = np.repeat(k, group, axis=1)                       # [n_seq, n_head, hd]
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)   # [n_head, n_seq, n_seq]
    scores += np.triu(np.full((n, n), -np.inf), 1)          # a token sees itself and its past
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", w, v).reshape(n, n_head * hd)


def silu(x):
    return x / (1.0 + np.exp(-x))


class Reference:
    """forward(ids) -> logits [n_seq, n_vocab] for the whole sequence, from position 0."""

    def __init__(self, model, activations: str = "f32"):
        self.model = model
        self.q8 = activations == "q8"
        self._w: dict[str, np.ndarray] = {}

    def mm(self, a, w) -> np.ndarray:
        # [n, n_in] @ W [n_out, n_in]^T -> [n, n_out] (a rounded to int8 blocks first with q8)
        return (round_q8(a, w.type_name) if self.q8 else a) @ self.W(w).T

    def W(self, w) -> np.ndarray:
        if w.name not in self._w:
            self._w[w.name] = weight(w)
        return self._w[w.name]

    def forward(self, ids) -> np.ndarray:
        # [n_seq] token ids -> [n_seq, n_vocab] logits
        m, h = self.model, self.model.hparams
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.arange(len(ids), dtype=np.float64)
        x = self.W(m.tok_embd)[ids].astype(np.float64)      # [n_seq, n_embd]
        ff = None if m.rope_freqs is None else m.rope_freqs.astype(np.float64)
        for L in m.layers:
            a = rms_norm(x, L.attn_norm, h.norm_eps)
            q = self.mm(a, L.wq) + (0 if L.bq is None else L.bq)
            k = self.mm(a, L.wk) + (0 if L.bk is None else L.bk)
            v = self.mm(a, L.wv) + (0 if L.bv is None else L.bv)
            q = q.reshape(len(ids), h.n_head, h.head_dim)
            k = k.reshape(len(ids), h.n_head_kv, h.head_dim)
            v = v.reshape(len(ids), h.n_head_kv, h.head_dim)
            q = rope(q, pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, ff, h.rope_mode)
            k = rope(k, pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, ff, h.rope_mode)
            x = x + self.mm(attention(q, k, v, h.n_head_kv), L.wo)
            f = rms_norm(x, L.ffn_norm, h.norm_eps)
            x = x + self.mm(silu(self.mm(f, L.w_gate)) * self.mm(f, L.w_up), L.w_down)
        x = rms_norm(x, m.output_norm, h.norm_eps)
        return self.mm(x, m.output).astype(np.float32)
