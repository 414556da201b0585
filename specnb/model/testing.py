"""Tiny random models for fast tests and benches: a llama-family network with random
quantized weights of any tensor type and a byte-level BPE vocab of a few hundred tokens.

`tiny_model(dst, qtype="Q8_0", ...)` writes one (atomically) and returns its path; the tests'
`tiny_path` fixture caches one per setting for a session.
"""
from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize as gguf_quantize

from ..errors import ParamError
from ..gguf.write import add_raw_tensor, write_gguf
from ..vocab.bpe import BYTE_TO_UNICODE


def tiny_vocab(n_merges: int = 40):
    """A byte-level BPE vocab: 3 special tokens, 256 bytes, a few merges."""
    b2u = BYTE_TO_UNICODE
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + [b2u[b] for b in range(256)]
    types = [3, 3, 3] + [1] * 256
    merges = []
    words = ["th", "he", "in", "er", "an", "Ġt", "Ġa", "on", "re", "at", "en", "nd", "Ġs", "es",
             "or", "ed", "is", "it", "ou", "ar", "Ġth", "Ġthe", "ing", "al", "le", "st", "Ġo",
             "Ġw", "to", "se", "Ġc", "Ġf", "ion", "ic", "ve", "me", "de", "ro", "ly", "Ġin"]
    for wd in words[:n_merges]:
        # split the new token into two existing tokens (longest known prefix)
        for cut in range(len(wd) - 1, 0, -1):
            a, b = wd[:cut], wd[cut:]
            if a in tokens and b in tokens:
                merges.append(f"{a} {b}")
                tokens.append(wd)
                types.append(1)
                break
    return tokens, types, merges


def random_blocks(rng, qtype: int, n_out: int, n_in: int, scale: float) -> np.ndarray:
    """Valid quantized blocks for any type: quantize random data, or for the K types write
    random quants with sane half-float scales (the gguf package cannot quantize those)."""
    if qtype in (QT.Q4_K, QT.Q6_K):
        blk, size = GGML_QUANT_SIZES[QT(qtype)]
        raw = rng.integers(0, 256, size=(n_out, n_in // blk, size), dtype=np.uint8)
        d = np.float16(scale / 8).view(np.uint16)
        if qtype == QT.Q4_K:      # d, dmin at the start; 6-bit scales/mins
            raw[..., 0:2] = np.frombuffer(np.array([d], np.uint16).tobytes(), np.uint8)
            raw[..., 2:4] = np.frombuffer(np.array([np.float16(scale / 16).view(np.uint16)],
                                                   np.uint16).tobytes(), np.uint8)
        else:                     # Q6_K: int8 scales at 192..207 kept small, d at the end
            raw[..., 192:208] = rng.integers(1, 16, size=(n_out, n_in // blk, 16)).astype(np.uint8)
            raw[..., 208:210] = np.frombuffer(np.array([np.float16(scale / 64).view(np.uint16)],
                                                       np.uint16).tobytes(), np.uint8)
        return raw.reshape(n_out, -1)
    if qtype in (QT.Q2_K, QT.Q3_K, QT.Q5_K):
        from ..kernels.qtypes import random_blocks as k_quant_blocks
        return k_quant_blocks(int(qtype), n_out, n_in, rng, scale=scale, readonly=False)
    x = (rng.standard_normal((n_out, n_in)) * scale).astype(np.float32)
    if qtype == QT.F32:
        return x.view(np.uint8)
    if qtype == QT.F16:
        return x.astype(np.float16).view(np.uint8)
    return gguf_quantize(x, QT(qtype))


def tiny_model(dst, qtype: str = "Q8_0", n_layer: int = 2, n_embd: int = 64, n_head: int = 4,
               n_head_kv: int = 2, n_ff: int = 128, seed: int = 0, arch: str = "llama",
               tied: bool = True, n_ctx_train: int = 512, embd_scale: float = 0.3) -> str:
    """A random llama-family model with a tiny byte-level BPE vocab (fast unit tests)."""
    try:
        wq = QT[qtype]
    except KeyError:
        raise ParamError(f"tiny_model: unknown tensor type {qtype!r}") from None
    blk = GGML_QUANT_SIZES[wq][0]
    if n_embd % blk or n_ff % blk:
        raise ParamError(f"tiny_model: n_embd={n_embd} and n_ff={n_ff} must be multiples of the "
                         f"{qtype} block size {blk}")
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab()
    n_vocab = len(tokens)
    hd = n_embd // n_head

    def fill(w):
        w.add_string("general.name", f"tiny-{arch}-{qtype}-s{seed}")
        w.add_uint32(f"{arch}.block_count", n_layer)
        w.add_uint32(f"{arch}.context_length", n_ctx_train)
        w.add_uint32(f"{arch}.embedding_length", n_embd)
        w.add_uint32(f"{arch}.feed_forward_length", n_ff)
        w.add_uint32(f"{arch}.attention.head_count", n_head)
        w.add_uint32(f"{arch}.attention.head_count_kv", n_head_kv)
        w.add_float32(f"{arch}.rope.freq_base", 10000.0)
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_uint32(f"{arch}.rope.dimension_count", hd)
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", "smollm")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_uint32("tokenizer.ggml.bos_token_id", 1)
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)
        w.add_bool("tokenizer.ggml.add_bos_token", False)

        def mat(name, n_in, n_out, scale, t=wq):
            add_raw_tensor(w, name, random_blocks(rng, t, n_out, n_in, scale), (n_in, n_out), int(t))

        def vec(name, n, base=1.0, jitter=0.1):
            w.add_tensor(name, (base + jitter * rng.standard_normal(n)).astype(np.float32))
        # the tied embedding doubles as the output head: its scale sets how peaked the logits are
        mat("token_embd.weight", n_embd, n_vocab, embd_scale, QT.Q8_0 if n_embd % 32 == 0 else QT.F32)
        if not tied:
            mat("output.weight", n_embd, n_vocab, 0.5)
        vec("output_norm.weight", n_embd)
        for i in range(n_layer):
            p = f"blk.{i}."
            vec(p + "attn_norm.weight", n_embd)
            mat(p + "attn_q.weight", n_embd, n_head * hd, 1.0 / np.sqrt(n_embd))
            mat(p + "attn_k.weight", n_embd, n_head_kv * hd, 1.0 / np.sqrt(n_embd))
            mat(p + "attn_v.weight", n_embd, n_head_kv * hd, 1.0 / np.sqrt(n_embd))
            mat(p + "attn_output.weight", n_head * hd, n_embd, 1.0 / np.sqrt(n_embd))
            if arch == "qwen2":
                vec(p + "attn_q.bias", n_head * hd, 0.0, 0.1)
                vec(p + "attn_k.bias", n_head_kv * hd, 0.0, 0.1)
                vec(p + "attn_v.bias", n_head_kv * hd, 0.0, 0.1)
            vec(p + "ffn_norm.weight", n_embd)
            mat(p + "ffn_gate.weight", n_embd, n_ff, 1.0 / np.sqrt(n_embd))
            mat(p + "ffn_up.weight", n_embd, n_ff, 1.0 / np.sqrt(n_embd))
            mat(p + "ffn_down.weight", n_ff, n_embd, 1.0 / np.sqrt(n_ff))
    return write_gguf(dst, arch, fill)
