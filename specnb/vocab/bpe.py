"""Byte-level BPE vocabs (`tokenizer.ggml.model == "gpt2"`), as llama.cpp's llm_tokenizer_bpe.

A fragment is split by the pre-tokenizer regexes of `tokenizer.ggml.pre`, applied one after the
other, each keeping both what it matched and the gaps between (llama.cpp's
`unicode_regex_split`, src/unicode.cpp:670 at c392e50); every piece is mapped byte by byte to
GPT-2's printable "byte-level" characters and merged by the ranks of `tokenizer.ggml.merges`
(llm_tokenizer_bpe_session, src/llama-vocab.cpp:410; a byte with no token of its own is
dropped, :543). Here: a `tokenizers` model with
`pre_tokenizers.Split(Regex(r), "isolated")` per regex, `ByteLevel(use_regex=False)` and
`models.BPE(vocab, merges)`, and no added tokens of its own (special tokens are cut out
before, in `Vocab`).

The regexes are the strings llama.cpp uses; llama.cpp runs GPT-2's and Llama-3's with
hand-written matchers that behave as the regexes with a final `|\\s+`, which is what we give the
`tokenizers` regex engine (Oniguruma). No regex is ever built from a file's contents: an unknown
`tokenizer.ggml.pre` falls back to the "default" set.
"""
from __future__ import annotations

import re
import warnings

from ..errors import VocabError

# GPT-2's expression. llama.cpp's string stops at `\s+(?!\S)`, but its hand-written matcher
# (unicode_regex_split_custom_gpt2) also takes a lone run of whitespace (`|\s+`).
_RE_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# Llama 3's, with the case-insensitive contractions spelled out as llama.cpp does
_RE_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
              r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
# Qwen2's: Llama 3's with single digits
_RE_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
             r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
             r"|\s+(?!\S)|\s+")

PRE_REGEXES: dict[str, tuple[str, ...]] = {
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _RE_GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "gpt2": (_RE_GPT2,),
    "smollm": (r"\p{N}", _RE_GPT2),          # also starcoder, refact, command-r, ...
    "llama3": (_RE_LLAMA3,),
    "qwen2": (_RE_QWEN2,),
    "falcon": (r"[\p{P}\$\+<=>\^~\|]+", _RE_GPT2, r"[0-9][0-9][0-9]"),
}

# tokenizer.ggml.pre -> (regex set, flags llama.cpp sets for it). BPE vocabs start from
# clean_spaces=True, ignore_merges=False, add_bos=False.
PRE_NAMES: dict[str, tuple[str, dict]] = {
    "default": ("default", {}),
    "llama3": ("llama3", {"ignore_merges": True, "add_bos": True}),
    "llama-v3": ("llama3", {"ignore_merges": True, "add_bos": True}),
    "llama-bpe": ("llama3", {"ignore_merges": True, "add_bos": True}),
    "falcon3": ("llama3", {"ignore_merges": True, "add_bos": True}),
    "dbrx": ("llama3", {}),
    "smaug-bpe": ("llama3", {}),
    "chatglm-bpe": ("llama3", {"bos_null": True}),
    "falcon": ("falcon", {}),
    "mpt": ("gpt2", {}),
    "olmo": ("gpt2", {}),
    "jais": ("gpt2", {}),
    "gpt-2": ("gpt2", {}),
    "phi-2": ("gpt2", {}),
    "jina-es": ("gpt2", {}),
    "jina-de": ("gpt2", {}),
    "gigachat": ("gpt2", {}),
    "jina-v1-en": ("gpt2", {}),
    "jina-v2-es": ("gpt2", {}),
    "jina-v2-de": ("gpt2", {}),
    "jina-v2-code": ("gpt2", {}),
    "roberta-bpe": ("gpt2", {}),
    "starcoder": ("smollm", {}),
    "refact": ("smollm", {}),
    "command-r": ("smollm", {"clean_spaces": False}),
    "smollm": ("smollm", {"clean_spaces": False}),
    "codeshell": ("smollm", {}),
    "exaone": ("smollm", {}),
    "minerva-7b": ("smollm", {}),
    "qwen2": ("qwen2", {"clean_spaces": False}),
    "deepseek-r1-qwen": ("qwen2", {"clean_spaces": False}),
    "stablelm2": ("qwen2", {}),
    "megrez": ("qwen2", {}),
}


def pre_tokenizer(pre: str | None, where: str = "") -> tuple[tuple[str, ...], dict]:
    """The regexes and flags for a `tokenizer.ggml.pre` value (None or "" when missing)."""
    if not pre:
        warnings.warn(f"{where}missing tokenizer.ggml.pre, using the 'default' pre-tokenizer (as "
                      f"llama.cpp does; quality may suffer)", stacklevel=5)
        name, flags = "default", {}
    elif pre in PRE_NAMES:
        name, flags = PRE_NAMES[pre]
    else:
        warnings.warn(f"{where}unknown or unsupported pre-tokenizer tokenizer.ggml.pre={pre!r}; "
                      f"falling back to 'default' (llama.cpp would refuse the file)", stacklevel=5)
        name, flags = "default", {}
    return PRE_REGEXES[name], flags


# ---- GPT-2's byte-level characters ------------------------------------------------------------
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (llama.cpp's unicode_byte_to_utf8_map)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_UNICODE = bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}


def decode_byte_level(text: str) -> bytes:
    """llama_decode_text: GPT-2 byte-level characters back to bytes."""
    try:
        return bytes([UNICODE_TO_BYTE[c] for c in text])
    except KeyError:
        pass
    out = bytearray()
    for c in text:
        b = UNICODE_TO_BYTE.get(c)
        if b is not None:
            out.append(b)
        else:               # llama.cpp writes this marker (with the whole token text)
            code = c.encode("utf-8", "surrogateescape").hex().encode()
            out += b"[UNK_BYTE_0x" + code + text.encode("utf-8", "surrogateescape") + b"]"
    return bytes(out)


def clean_spaces(b: bytes) -> bytes:
    """llama.cpp's detokenize clean-up passes for `clean_spaces` vocabs."""
    b = re.sub(rb" (?=[?!.,])", b"", b)        # " ?", " !", " .", " ,"
    b = re.sub(rb" ' ", b"'", b)               # a lone apostrophe between spaces
    b = re.sub(rb" '(?=[sm]|re|ve)", b"'", b)  # " 's", " 'm", " 're", " 've"
    return b


# ---- the `tokenizers` model -------------------------------------------------------------------
def has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def build_tokenizer(token_to_id: dict, merges_raw, regexes: tuple[str, ...], ignore_merges: bool,
                    where: str = ""):
    """A `tokenizers.Tokenizer` for the vocab, its merges and pre-tokenizer regexes."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    if merges_raw is None:
        raise VocabError(f"{where}no tokenizer.ggml.merges in the metadata: a 'gpt2' (BPE) vocab "
                         f"needs its merges")
    if not isinstance(merges_raw, list):
        raise VocabError(f"{where}tokenizer.ggml.merges is {type(merges_raw).__name__}, expected "
                         f"an array of strings")
    # texts that are not valid UTF-8 can never be matched by text; leave them out of the model
    # (the Rust side refuses lone surrogates)
    vocab = token_to_id
    if has_surrogate("".join(token_to_id)):
        vocab = {t: i for t, i in token_to_id.items() if not has_surrogate(t)}
    # split as llama.cpp does, at the first space after position 0; a merge whose parts or
    # result are not tokens would make `tokenizers` panic, so those are left out
    pairs = [(m[:p], m[p + 1:]) if p > 0 else ("", "")
             for m in merges_raw for p in (m.find(" ", 1),)]
    merges = [(a, b) for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
    if len(merges) != len(pairs):
        warnings.warn(f"{where}{len(pairs) - len(merges)} of {len(pairs)} merges name texts that "
                      f"are not in the vocab; they are ignored", stacklevel=5)
    tk = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tk


# A private-use character stands in for a lone surrogate while the regexes split the text:
# llama.cpp gives both the same flags (CONTROL, src/unicode-data.cpp:1201: not a letter, number,
# space or punctuation), and so does Oniguruma.
_STAND_IN = "\ue000"
_SURROGATE = re.compile("[\ud800-\udfff]")


def bpe_encode(tk, text: str) -> list[int]:
    """Token ids of one fragment (no special tokens in it)."""
    if not has_surrogate(text):
        return tk.encode(text, add_special_tokens=False).ids
    return bpe_encode_with_surrogates(tk, text)


def bpe_encode_with_surrogates(tk, text: str) -> list[int]:
    """A lone surrogate comes from an encoded surrogate in a byte string (ED A0 80), which
    llama.cpp decodes to U+D800 and re-encodes to the same three bytes. `tokenizers` takes no
    lone surrogates, so the text is split with a stand-in, and the pieces that hold surrogates
    are rebuilt from their bytes before the merges."""
    ids = []
    for piece, (start, end) in tk.pre_tokenizer.pre_tokenize_str(_SURROGATE.sub(_STAND_IN, text)):
        orig = text[start:end]
        if has_surrogate(orig):
            piece = "".join(BYTE_TO_UNICODE[b] for b in orig.encode("utf-8", "surrogatepass"))
        ids += [t.id for t in tk.model.tokenize(piece)]
    return ids
