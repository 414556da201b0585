"""Write GGUF variants: the default draft, teaching drafts, vocab mutations, tiny test models.

- `requantize(src, dst, "Q4_0")`: the same network with its quantized matrices requantized
  (the default draft: SmolLM2-135M Q4_1 -> Q4_0, a stand-in for a real smaller draft model).
- `truncate_layers(src, dst, k)`: keep the first k layers (a poor draft: many rejections).
- `mutate_vocab(src, dst, kind)`: copies that each fail exactly one vocab-gate check.
- `tiny_model(dst, ...)`: a random llama model with a tiny byte-level BPE vocab, for fast tests.

Files are written atomically (a temporary file in the same folder, then a rename), and only
into the destination the caller names or specnb's cache directory.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType, GGUFWriter
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from .errors import GGUFError, ParamError
from .gguf_file import GGUFFile
from .models import cache_dir, default_target_path

DEFAULT_DRAFT_NAME = "SmolLM2-135M-Instruct.Q4_0-requant.gguf"
MUTATIONS = ("rename-token", "eos-id", "bos-flag", "extra-tokens", "vocab-type")
_VT = {str: GGUFValueType.STRING, bool: GGUFValueType.BOOL, float: GGUFValueType.FLOAT32}


# ---- writing -------------------------------------------------------------------------------
def _write_atomic(writer_fn, dst: str | os.PathLike) -> str:
    """Run writer_fn(tmp_path) then rename tmp -> dst; the tmp file never survives a failure."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        writer_fn(str(tmp))
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return str(dst)


def _copy_kv(w: GGUFWriter, g: GGUFFile, override: dict | None = None, skip=()) -> None:
    """Copy metadata (except the keys the writer sets itself) with optional overrides."""
    override = override or {}
    for key, val in g.metadata.items():
        if key in ("general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count") \
                or key in skip:
            continue
        _add_kv(w, key, override.pop(key, val), _source_type(g, key))
    for key, val in override.items():
        _add_kv(w, key, val, None)


def _source_type(g, key):
    v = g.metadata[key]
    if isinstance(v, np.ndarray):
        return {np.dtype(np.float32): GGUFValueType.FLOAT32, np.dtype(np.int32): GGUFValueType.INT32,
                np.dtype(np.uint32): GGUFValueType.UINT32}.get(v.dtype)
    return None


def _add_kv(w: GGUFWriter, key, val, sub):
    if isinstance(val, bool):
        w.add_bool(key, val)
    elif isinstance(val, str):
        w.add_string(key, val)
    elif isinstance(val, float):
        w.add_float32(key, val)
    elif isinstance(val, (int, np.integer)):
        w.add_uint32(key, int(val)) if 0 <= val < 2**32 else w.add_int64(key, int(val))
    elif isinstance(val, np.ndarray):
        if sub is not None:
            w.add_key_value(key, val.tolist(), GGUFValueType.ARRAY, sub_type=sub)
        else:
            w.add_array(key, val.tolist())
    elif isinstance(val, list):
        w.add_array(key, val)
    else:
        raise GGUFError(f"cannot write metadata {key}={val!r}")


def _tensor_array(g: GGUFFile, name: str) -> np.ndarray:
    """Raw tensor bytes shaped as the gguf writer expects for quantized data."""
    return np.asarray(g.tensor_bytes(name))


def _add_raw_tensor(w: GGUFWriter, name: str, raw: np.ndarray, shape_ggml, qtype: int):
    # raw: uint8 [n_rows, row_bytes] (or float arrays for F32/F16); shape_ggml: ggml order
    if qtype == QT.F32:
        arr = raw.view(np.float32).reshape(tuple(reversed(shape_ggml)))
        w.add_tensor(name, arr)
    elif qtype == QT.F16:
        arr = raw.view(np.float16).reshape(tuple(reversed(shape_ggml)))
        w.add_tensor(name, arr)
    else:
        w.add_tensor(name, raw, raw_dtype=QT(qtype))


def rewrite(src, dst, *, metadata: dict | None = None, skip_keys=(), tensor_fn=None,
            keep_tensor=None) -> str:
    """Copy a GGUF, changing metadata and (through tensor_fn) tensors. Returns dst."""
    g = GGUFFile(src)
    if os.path.abspath(src) == os.path.abspath(dst):
        raise ParamError(f"forge: destination {dst} is the source file; choose another path")
    arch = g.get("general.architecture", "llama")

    def write(tmp):
        w = GGUFWriter(tmp, arch)
        _copy_kv(w, g, dict(metadata or {}), skip_keys)
        for t in g.tensors.values():
            if keep_tensor is not None and not keep_tensor(t.name):
                continue
            raw, qtype = _tensor_array(g, t.name), t.qtype
            if tensor_fn is not None:
                raw, qtype = tensor_fn(t, raw)
            _add_raw_tensor(w, t.name, raw, t.shape, qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return _write_atomic(write, dst)


# ---- the variants ------------------------------------------------------------------------------
def requantize(src, dst, qtype: str = "Q4_0") -> str:
    """Requantize every quantized 2-D weight (not the Q8_0 embedding) to `qtype`."""
    try:
        target = QT[qtype]
    except KeyError:
        raise ParamError(f"forge: unknown tensor type {qtype!r}") from None

    def fn(t, raw):
        if len(t.shape) != 2 or t.qtype in (QT.F32, QT.F16, QT.BF16) or t.name == "token_embd.weight":
            return raw, t.qtype
        x = np.asarray(gguf_dequantize(raw, QT(t.qtype)), dtype=np.float32).reshape(t.shape[1], t.shape[0])
        return gguf_quantize(x, target), int(target)
    return rewrite(src, dst, metadata={"general.file_type": 2 if qtype == "Q4_0" else 0}, tensor_fn=fn)


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


def ensure_default_draft() -> str:
    """The default draft in the cache: forged on first use, rebuilt if missing or damaged."""
    dst = cache_dir() / DEFAULT_DRAFT_NAME
    src = default_target_path()
    if dst.exists():
        try:
            g = GGUFFile(dst)
            ok = len(g.tensors) == len(GGUFFile(src).tensors) and \
                g.tensors["blk.0.attn_q.weight"].qtype == QT.Q4_0
            g.close()
            if ok:
                return str(dst)
        except Exception:
            pass
        dst.unlink()      # damaged or foreign: rebuild
    return requantize(src, dst, "Q4_0")


# ---- tiny random models ------------------------------------------------------------------------
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable unicode character map (byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def tiny_vocab(n_merges: int = 40):
    """A byte-level BPE vocab: 3 special tokens, 256 bytes, a few merges."""
    b2u = _byte_to_unicode()
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


def _random_blocks(rng, qtype: int, n_out: int, n_in: int, scale: float) -> np.ndarray:
    """Valid quantized blocks for any type: quantize random data, or for the K types write
    random quants with sane half-float scales (the gguf package cannot quantize those)."""
    if qtype in (QT.Q4_K, QT.Q6_K):
        from gguf import GGML_QUANT_SIZES
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
        from .kernels.qtypes import random_blocks
        return random_blocks(int(qtype), n_out, n_in, rng, scale=scale, readonly=False)
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
        raise ParamError(f"forge: unknown tensor type {qtype!r}") from None
    from gguf import GGML_QUANT_SIZES
    blk = GGML_QUANT_SIZES[wq][0]
    if n_embd % blk or n_ff % blk:
        raise ParamError(f"forge: n_embd={n_embd} and n_ff={n_ff} must be multiples of the "
                         f"{qtype} block size {blk}")
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab()
    n_vocab = len(tokens)
    hd = n_embd // n_head

    def write(tmp):
        w = GGUFWriter(tmp, arch)
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
            _add_raw_tensor(w, name, _random_blocks(rng, t, n_out, n_in, scale), (n_in, n_out), int(t))

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
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return _write_atomic(write, dst)


# ---- CLI ---------------------------------------------------------------------------------------
def add_forge_args(p) -> None:
    p.add_argument("kind", choices=["default-draft", "requantize", "truncate", "mutate", "tiny"])
    p.add_argument("-m", "--model", default=None, help="source GGUF (default: the default target)")
    p.add_argument("-o", "--output", default=None, help="destination GGUF path")
    p.add_argument("--type", default="Q4_0", help="tensor type for requantize / tiny")
    p.add_argument("--layers", type=int, default=4, help="layers kept by truncate / of tiny")
    p.add_argument("--mutation", choices=MUTATIONS, default="rename-token")
    p.add_argument("--seed", type=int, default=0)


def forge_cli(a) -> str:
    if a.kind == "default-draft":
        return ensure_default_draft()
    if a.output is None:
        raise ParamError(f"forge {a.kind}: give the destination with -o PATH")
    src = a.model or default_target_path()
    if a.kind == "requantize":
        return requantize(src, a.output, a.type)
    if a.kind == "truncate":
        return truncate_layers(src, a.output, a.layers)
    if a.kind == "mutate":
        return mutate_vocab(src, a.output, a.mutation)
    return tiny_model(a.output, qtype=a.type, n_layer=a.layers, seed=a.seed)
