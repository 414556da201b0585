"""The tokenizer, built from the GGUF's own tables, matching llama.cpp's `llama_tokenize`.

What llama.cpp does (src/llama-vocab.cpp, src/unicode.cpp) and how it maps here:

1. **Special-token partitioning** (`tokenizer_st_partition`). Every control, user-defined
   and unknown token text is cut out of the raw text, longest text first, each one over all
   the fragments left by the longer ones. With `parse_special=False` control and unknown
   tokens are not looked for, but user-defined ones still are. We do this in plain Python
   (`Vocab._partition`) and hand each plain-text fragment separately to the tokenizer below
   (for BPE a `tokenizers` model with no added tokens of its own, so it cannot do anything
   different).
2. **BPE vocabs** (`tokenizer.ggml.model == "gpt2"`): the fragment is split by the
   pre-tokenizer regexes of `tokenizer.ggml.pre`, applied one after the other, each keeping
   both what it matched and the gaps between (llama.cpp's `unicode_regex_split`), then every
   piece is mapped byte by byte to GPT-2's printable "byte-level" characters and merged by
   the ranks of `tokenizer.ggml.merges`. Here: `pre_tokenizers.Split(Regex(r), "isolated")`
   per regex, `ByteLevel(use_regex=False)`, `models.BPE(vocab, merges)`.
3. **SPM vocabs** (`"llama"`): spaces become U+2581, a space is put in front of the first
   fragment and of every fragment that follows a special token (`add_space_prefix`), then
   adjacent symbols are merged highest token score first (leftmost on a tie); characters
   that no token covers fall back to the `<0xXX>` byte tokens. Here: a direct port of that
   loop (`Vocab._spm_tokenize`), since a `tokenizers` BPE with score-ranked merges cannot
   express llama.cpp's tie rule (see there).
4. BOS is put in front when `add_special` and `add_bos`, EOS at the end when `add_special`
   and `add_eos`; the defaults per vocab type and pre-tokenizer are llama.cpp's, and the
   `tokenizer.ggml.add_bos_token` / `add_eos_token` keys override them.

The BPE pre-tokenizer regexes are the strings llama.cpp uses (see `_PRE_REGEXES`); llama.cpp runs
GPT-2's and Llama-3's with hand-written matchers that behave as the regexes with a final
`|\\s+`, which is what we give the `tokenizers` regex engine (Oniguruma).
"""
from __future__ import annotations

import heapq
import os
import re
import warnings
from datetime import datetime
from typing import Iterable

import numpy as np

from .errors import ParamError, VocabError

# llama_token_type (as stored in tokenizer.ggml.token_type)
TOKEN_TYPE_UNDEFINED = 0
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6

# llama_token_attr bits (what llama.cpp works with after loading)
ATTR_UNDEFINED = 0
ATTR_UNKNOWN = 1 << 0
ATTR_UNUSED = 1 << 1
ATTR_NORMAL = 1 << 2
ATTR_CONTROL = 1 << 3
ATTR_USER_DEFINED = 1 << 4
ATTR_BYTE = 1 << 5
ATTR_LSTRIP = 1 << 7
ATTR_RSTRIP = 1 << 8

_TYPE_TO_ATTR = {TOKEN_TYPE_NORMAL: ATTR_NORMAL, TOKEN_TYPE_UNKNOWN: ATTR_UNKNOWN,
                 TOKEN_TYPE_CONTROL: ATTR_CONTROL, TOKEN_TYPE_USER_DEFINED: ATTR_USER_DEFINED,
                 TOKEN_TYPE_UNUSED: ATTR_UNUSED, TOKEN_TYPE_BYTE: ATTR_BYTE}

# --- BPE pre-tokenizer regexes, as in llama.cpp's llm_tokenizer_bpe ----------------------

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

_PRE_REGEXES: dict[str, tuple[str, ...]] = {
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
_PRE_NAMES: dict[str, tuple[str, dict]] = {
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

# --- token texts llama.cpp recognises (llama_vocab::impl::load) --------------------------
# When a vocab has several of one list (SmolLM2 has both <|im_end|> and <|endoftext|>),
# llama.cpp takes whichever its unordered_map walk meets first, which depends on hashing; we
# take the first text of the list that the vocab has. For EOT/EOM that only changes which id
# is reported: the end-of-generation set below holds every one of these texts anyway.
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<EOT>", "<｜end▁of▁sentence｜>")
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<PAD>"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"),
    "fim_sep": ("<|file_sep|>",),
}
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<|eom_id|>", "<EOT>")

_SPECIAL_KEYS = (  # attribute, GGUF key
    ("bos", "tokenizer.ggml.bos_token_id"), ("eos", "tokenizer.ggml.eos_token_id"),
    ("eot", "tokenizer.ggml.eot_token_id"), ("eom", "tokenizer.ggml.eom_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"), ("sep", "tokenizer.ggml.seperator_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"), ("mask", "tokenizer.ggml.mask_token_id"),
    ("fim_pre", "tokenizer.ggml.fim_pre_token_id"), ("fim_suf", "tokenizer.ggml.fim_suf_token_id"),
    ("fim_mid", "tokenizer.ggml.fim_mid_token_id"), ("fim_pad", "tokenizer.ggml.fim_pad_token_id"),
    ("fim_rep", "tokenizer.ggml.fim_rep_token_id"), ("fim_sep", "tokenizer.ggml.fim_sep_token_id"),
    # deprecated spellings
    ("fim_pre", "tokenizer.ggml.prefix_token_id"), ("fim_suf", "tokenizer.ggml.suffix_token_id"),
    ("fim_mid", "tokenizer.ggml.middle_token_id"),
)

_SPM_SPACE = "\u2581"  # ▁
_C_ISSPACE = " \t\n\v\f\r"


def _bytes_to_unicode() -> dict[int, str]:
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


_BYTE_TO_UNICODE = _bytes_to_unicode()
_UNICODE_TO_BYTE = {c: b for b, c in _BYTE_TO_UNICODE.items()}

_BYTE_TOKEN_RE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _raw(text: str) -> bytes:
    """The token text's original bytes (GGUFFile decodes with surrogateescape)."""
    return text.encode("utf-8", errors="surrogateescape")


def _clean_spaces(b: bytes) -> bytes:
    """llama.cpp's detokenize clean-up passes for `clean_spaces` vocabs."""
    b = re.sub(rb" (?=[?!.,])", b"", b)        # " ?", " !", " .", " ,"
    b = re.sub(rb" ' ", b"'", b)               # a lone apostrophe between spaces
    b = re.sub(rb" '(?=[sm]|re|ve)", b"'", b)  # " 's", " 'm", " 're", " 've"
    return b


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class Vocab:
    """A GGUF vocabulary: token tables, special ids and llama.cpp-exact tokenization."""

    @classmethod
    def from_gguf(cls, gguf_file) -> "Vocab":
        """From a `GGUFFile` (or a path to one)."""
        if isinstance(gguf_file, (str, os.PathLike)):
            from .gguf_file import GGUFFile
            f = GGUFFile(gguf_file)
            try:
                return cls.from_metadata(f.metadata, source=f.path)
            finally:
                f.close()
        return cls.from_metadata(gguf_file.metadata, source=getattr(gguf_file, "path", ""))

    @classmethod
    def from_metadata(cls, meta: dict, source: str = "") -> "Vocab":
        return cls(meta, source)

    # ------------------------------------------------------------------ loading

    def __init__(self, meta: dict, source: str = ""):
        self.source = source
        where = f"{source}: " if source else ""
        self._where = where
        model = meta.get("tokenizer.ggml.model")
        if model is None:
            raise VocabError(f"{where}no tokenizer.ggml.model in the metadata: the file has no vocab")
        for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            if key in meta and not isinstance(meta[key], str):
                raise VocabError(f"{where}{key} must be a string, not {type(meta[key]).__name__}")
        for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                    "tokenizer.ggml.add_space_prefix"):
            if key in meta and not isinstance(meta[key], (bool, int, np.integer)):
                raise VocabError(f"{where}{key} must be a boolean, not {type(meta[key]).__name__}")
        if model == "gpt2":
            self.type = "bpe"
        elif model == "llama":
            self.type = "spm"
        else:
            raise VocabError(f"{where}unsupported tokenizer model tokenizer.ggml.model={model!r}: "
                             f"specnb supports 'gpt2' (BPE) and 'llama' (SentencePiece)")
        pre = meta.get("tokenizer.ggml.pre")
        self.pre = pre if isinstance(pre, str) and pre else "default"

        tokens = meta.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise VocabError(f"{where}no tokenizer.ggml.tokens in the metadata: cannot build the vocab")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise VocabError(f"{where}tokenizer.ggml.tokens is {type(tokens).__name__}, "
                             f"expected an array of strings")
        n = len(tokens)
        if n == 0:
            raise VocabError(f"{where}tokenizer.ggml.tokens is empty")
        # llama.cpp renames empty texts so that every text stays a unique key
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        self.tokens: list[str] = tokens
        self.n_vocab = n
        self._token_to_id: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        if len(self._token_to_id) != n:
            seen: dict[str, int] = {}
            for i, t in enumerate(tokens):
                if t in seen:
                    raise VocabError(f"{where}token text {t!r} appears twice in "
                                     f"tokenizer.ggml.tokens (ids {seen[t]} and {i})")
                seen[t] = i

        self.scores = self._array(meta, "tokenizer.ggml.scores", np.float32, n)
        types = self._array(meta, "tokenizer.ggml.token_type", np.int32, n)
        if types is None:
            attr = np.full(n, ATTR_NORMAL, dtype=np.int32)
            types = np.full(n, TOKEN_TYPE_NORMAL, dtype=np.int32)
        else:
            attr = np.zeros(n, dtype=np.int32)           # unknown type ids: UNDEFINED
            for t, a in _TYPE_TO_ATTR.items():
                attr[types == t] = a
        self.token_types = types
        self._attr = attr

        # flags with llama.cpp's defaults per vocab type / pre-tokenizer
        ignore_merges = False
        bos_null = False
        if self.type == "bpe":
            self.add_space_prefix = False
            self.clean_spaces = True
            self.add_bos, self.add_eos = False, False
            if pre is None or pre == "":
                warnings.warn(f"{where}missing tokenizer.ggml.pre, using the 'default' "
                              f"pre-tokenizer (as llama.cpp does; quality may suffer)", stacklevel=3)
                regex_set, flags = "default", {}
            elif self.pre in _PRE_NAMES:
                regex_set, flags = _PRE_NAMES[self.pre]
            else:
                warnings.warn(f"{where}unknown or unsupported pre-tokenizer "
                              f"tokenizer.ggml.pre={self.pre!r}; falling back to 'default' "
                              f"(llama.cpp would refuse the file)", stacklevel=3)
                regex_set, flags = "default", {}
            ignore_merges = flags.get("ignore_merges", False)
            self.add_bos = flags.get("add_bos", False)
            self.clean_spaces = flags.get("clean_spaces", True)
            bos_null = flags.get("bos_null", False)
            self.pre_regexes: tuple[str, ...] = _PRE_REGEXES[regex_set]
            default_ids = {"bos": 11, "eos": 11, "unk": -1}
        else:
            self.add_space_prefix = True
            self.clean_spaces = False
            self.add_bos, self.add_eos = True, False
            self.pre_regexes = ()
            default_ids = {"bos": 1, "eos": 2, "unk": 0}
        self.ignore_merges = ignore_merges
        v = meta.get("tokenizer.ggml.add_space_prefix")
        if v is not None:
            self.add_space_prefix = bool(v)

        # special ids: defaults, then the GGUF keys (out-of-range ids are ignored with a warning)
        ids = {name: -1 for name, _ in _SPECIAL_KEYS}
        for name, d in default_ids.items():
            ids[name] = d if d < n else -1
        if bos_null:
            ids["bos"] = -1
        for name, key in _SPECIAL_KEYS:
            val = meta.get(key)
            if val is None:
                continue
            if isinstance(val, (bool, float)) or not isinstance(val, (int, np.integer)) \
                    or not 0 <= int(val) < n:
                warnings.warn(f"{where}bad special token {key}={val!r} (vocab has {n} tokens), "
                              f"using id {ids[name]}", stacklevel=3)
                continue
            ids[name] = int(val)
        for key, attr_name in (("tokenizer.ggml.add_bos_token", "add_bos"),
                               ("tokenizer.ggml.add_eos_token", "add_eos")):
            v = meta.get(key)
            if v is not None:
                setattr(self, attr_name, bool(v))

        # find EOT / EOM / FIM tokens by their text when no key names them; llama.cpp forces
        # each one found this way to be a control token
        for name, texts in (("eot", _EOT_TEXTS), ("eom", _EOM_TEXTS), *_FIM_TEXTS.items()):
            if ids[name] != -1:
                continue
            for text in texts:
                tid = self._token_to_id.get(text)
                if tid is not None:
                    ids[name] = tid
                    self._force_control(tid)
                    break

        # the end-of-generation set, built in llama.cpp's order
        eog: set[int] = set()
        for name in ("fim_pad", "fim_rep", "fim_sep"):
            if ids[name] != -1:
                eog.add(ids[name])
        for text in _EOG_TEXTS:
            tid = self._token_to_id.get(text)
            if tid is not None:
                eog.add(tid)
                self._force_control(tid)
        for name in ("eos", "eot", "eom"):
            if ids[name] != -1:
                eog.add(ids[name])
        self.eog_ids: frozenset[int] = frozenset(eog)

        self.bos_id, self.eos_id = ids["bos"], ids["eos"]
        self.eot_id, self.eom_id = ids["eot"], ids["eom"]
        self.unk_id, self.pad_id = ids["unk"], ids["pad"]
        self.sep_id, self.mask_id = ids["sep"], ids["mask"]
        self.fim_ids = {k: ids[k] for k in _FIM_TEXTS}

        # texts cut out before tokenizing: control, user-defined and unknown tokens, longest
        # (in bytes) first; ties by id (llama.cpp's std::sort leaves their order unspecified)
        special = np.nonzero(self._attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))[0]
        self._special_ids: list[int] = sorted(
            (int(i) for i in special), key=lambda i: (-len(_raw(tokens[i])), i))

        # per-model strip attributes llama.cpp sets by name
        name = str(meta.get("general.name", "")).lower()
        if self.pre in ("jina-v2-de", "jina-v2-es", "jina-v2-code"):
            self._set_attr("<mask>", ATTR_LSTRIP, True)
        elif "phi-3" in name or "phi3" in name:
            for i in self._special_ids:
                self._attr[i] |= ATTR_RSTRIP
            self._set_attr("</s>", ATTR_RSTRIP, True)
            for t in ("<unk>", "<s>", "<|endoftext|>"):
                self._set_attr(t, ATTR_RSTRIP, False)

        self.chat_template = meta.get("tokenizer.chat_template")
        self._pieces: list[bytes | None] = [None] * n
        self._tokenizer = self._build_tokenizer(meta)

    def _array(self, meta: dict, key: str, dtype, n: int):
        val = meta.get(key)
        if val is None:
            return None
        try:
            arr = np.array(val, dtype=dtype)     # a copy: token types get overridden below
        except (TypeError, ValueError, OverflowError):
            raise VocabError(f"{self._where}{key} is not a numeric array") from None
        if arr.shape != (n,):
            raise VocabError(f"{self._where}{key} has {arr.size} entries, expected one per "
                             f"token ({n})")
        return arr

    def _force_control(self, tid: int) -> None:
        self._attr[tid] = ATTR_CONTROL
        self.token_types[tid] = TOKEN_TYPE_CONTROL

    def _set_attr(self, text: str, bit: int, on: bool) -> None:
        tid = self._token_to_id.get(text)
        if tid is not None:
            self._attr[tid] = (self._attr[tid] | bit) if on else (self._attr[tid] & ~bit)

    def _build_tokenizer(self, meta: dict):
        if self.type == "spm":
            # no `tokenizers` model for SPM (see _spm_tokenize); just the tables it needs
            self._scores_list = (self.scores.tolist() if self.scores is not None
                                 else [0.0] * self.n_vocab)
            self._byte_ids: list[int | None] = []
            for b in range(256):
                tid = self._token_to_id.get(f"<0x{b:02X}>")
                if tid is None:     # llama.cpp then tries the byte itself as a token text
                    tid = self._token_to_id.get(chr(b) if b < 0x80 else chr(0xDC00 + b))
                self._byte_ids.append(tid)
            return None

        from tokenizers import Regex, Tokenizer, models, pre_tokenizers

        raw = meta.get("tokenizer.ggml.merges")
        if raw is None:
            raise VocabError(f"{self._where}no tokenizer.ggml.merges in the metadata: a 'gpt2' "
                             f"(BPE) vocab needs its merges")
        if not isinstance(raw, list):
            raise VocabError(f"{self._where}tokenizer.ggml.merges is {type(raw).__name__}, "
                             f"expected an array of strings")
        # texts that are not valid UTF-8 can never be matched by text; leave them out of the
        # model (the Rust side refuses lone surrogates)
        vocab = self._token_to_id
        if _has_surrogate("".join(self.tokens)):
            vocab = {t: i for t, i in vocab.items() if not _has_surrogate(t)}
        # split as llama.cpp does, at the first space after position 0; a merge whose parts
        # or result are not tokens would make `tokenizers` panic, so those are left out
        pairs = [(m[:p], m[p + 1:]) if p > 0 else ("", "") for m in raw for p in (m.find(" ", 1),)]
        merges = [(a, b) for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
        if len(merges) != len(pairs):
            warnings.warn(f"{self._where}{len(pairs) - len(merges)} of {len(pairs)} merges name "
                          f"texts that are not in the vocab; they are ignored", stacklevel=4)
        tk = Tokenizer(models.BPE(vocab, merges, ignore_merges=self.ignore_merges))
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in self.pre_regexes]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        return tk

    def _spm_tokenize(self, text: str, out: list[int]) -> None:
        """llama.cpp's SPM session on one fragment (spaces already turned into U+2581).

        Start from single characters; repeatedly merge the adjacent pair whose concatenation
        is the highest-scoring token (the leftmost pair on equal scores); a symbol left that
        is not a token is written as its UTF-8 bytes' `<0xXX>` tokens.

        This is a direct port rather than a `tokenizers` BPE with merges ranked by score (HF's
        LlamaConverter): BPE ranks are strict, so when two tokens share a score (SPM vocabs
        give whole families of tokens one score: byte, control and user-defined ones, often
        0 or -1000) the BPE would merge them in rank order, not leftmost first as llama.cpp
        does, and split some texts differently (test_spm_segmentations has such a case).
        """
        syms = list(text)
        n = len(syms)
        if n == 0:
            return
        get, scores = self._token_to_id.get, self._scores_list
        size = [1] * n                  # characters in each symbol; 0 once merged away
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        # heap entries: (-score, left, right, size of left + right when queued)
        heap = []
        for i in range(n - 1):
            tid = get(syms[i] + syms[i + 1])
            if tid is not None:
                heap.append((-scores[tid], i, i + 1, 2))
        heapq.heapify(heap)
        while heap:
            _, left, right, both = heapq.heappop(heap)
            if size[left] == 0 or size[right] == 0 or size[left] + size[right] != both:
                continue                # one side has changed since this pair was queued
            syms[left] += syms[right]
            syms[right] = ""
            size[left], size[right] = both, 0
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prv[after] = left
            before = prv[left]
            if before >= 0:
                tid = get(syms[before] + syms[left])
                if tid is not None:
                    heapq.heappush(heap, (-scores[tid], before, left, size[before] + both))
            if after >= 0:
                tid = get(syms[left] + syms[after])
                if tid is not None:
                    heapq.heappush(heap, (-scores[tid], left, after, both + size[after]))
        i = 0
        while i != -1:
            tid = get(syms[i])
            if tid is not None:
                out.append(tid)
            else:
                for byte in syms[i].encode("utf-8"):
                    bid = self._byte_ids[byte]
                    if bid is None:
                        raise VocabError(f"{self._where}character {syms[i]!r} is not in the vocab "
                                         f"and there is no byte token <0x{byte:02X}> to spell it")
                    out.append(bid)
            i = nxt[i]

    # ------------------------------------------------------------------ tokenizing

    def _partition(self, text: str, parse_special: bool) -> list:
        """Cut special-token texts out of `text`: a list of str (plain) and int (token id)."""
        frags: list = [text]
        for tid in self._special_ids:
            attr = int(self._attr[tid])
            if not parse_special and attr & (ATTR_CONTROL | ATTR_UNKNOWN):
                continue        # user-defined tokens are matched even without parse_special
            tok = self.tokens[tid]
            if tok not in text:
                continue        # fragments are pieces of text: nothing to cut (the fast path)
            out: list = []
            for f in frags:
                if not isinstance(f, str) or tok not in f:
                    out.append(f)
                    continue
                start = 0
                while True:
                    pos = f.find(tok, start)
                    if pos < 0:
                        break
                    left = f[start:pos]
                    if attr & ATTR_LSTRIP:
                        left = left.rstrip(_C_ISSPACE)
                    if left:
                        out.append(left)
                    out.append(tid)
                    start = pos + len(tok)
                    if attr & ATTR_RSTRIP:
                        while start < len(f) and f[start] in _C_ISSPACE:
                            start += 1
                if start < len(f):
                    out.append(f[start:])
            frags = out
        return frags

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`, as llama.cpp's `llama_tokenize(text, add_special, parse_special)`."""
        if not isinstance(text, str):
            raise ParamError(f"invalid text={text!r:.60}: expected str")
        if _has_surrogate(text):    # lone surrogates cannot be UTF-8: llama.cpp would see U+FFFD
            text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
        frags = self._partition(text, parse_special) if text else []
        out: list[int] = []
        if add_special and self.add_bos:
            if self.bos_id < 0:
                raise VocabError(f"{self._where}the vocab asks for a BOS token (add_bos) but has "
                                 f"no bos_token_id")
            out.append(self.bos_id)
        if self.type == "spm":
            prev_special = True         # a space prefix goes on the first fragment ...
            for f in frags:
                if isinstance(f, str):
                    if self.add_space_prefix and prev_special:
                        f = " " + f
                    self._spm_tokenize(f.replace(" ", _SPM_SPACE), out)
                    prev_special = False
                else:
                    out.append(f)
                    prev_special = True  # ... and on each one that follows a special token
        else:
            # one encode per fragment (encode_batch would start a thread pool, which then
            # complains if the process forks)
            encode = self._tokenizer.encode
            for f in frags:
                if isinstance(f, str):
                    out.extend(encode(f, add_special_tokens=False).ids)
                else:
                    out.append(f)
        if add_special and self.add_eos:
            if self.eos_id < 0:
                raise VocabError(f"{self._where}the vocab asks for an EOS token (add_eos) but has "
                                 f"no eos_token_id")
            out.append(self.eos_id)
        return out

    # ------------------------------------------------------------------ pieces

    def _check_id(self, token_id) -> int:
        if isinstance(token_id, (bool, np.bool_)) or not isinstance(token_id, (int, np.integer)) \
                or not 0 <= int(token_id) < self.n_vocab:
            raise ParamError(f"invalid token id {token_id!r}: expected an int in "
                             f"[0, {self.n_vocab})")
        return int(token_id)

    def _piece(self, tid: int) -> bytes:
        """llama.cpp's cached piece (token_to_piece with special=True)."""
        p = self._pieces[tid]
        if p is not None:
            return p
        text = self.tokens[tid]
        attr = int(self._attr[tid])
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED):
            p = _raw(text)
        elif attr & ATTR_NORMAL:
            if self.type == "spm":
                p = _raw(text.replace(_SPM_SPACE, " "))
            else:
                p = _decode_byte_level(text)
        elif attr & ATTR_BYTE and self.type == "spm":
            m = _BYTE_TOKEN_RE.fullmatch(text)
            # llama.cpp reads text[3:5] as hex; a malformed byte token gives what strtol gives
            p = bytes([int(m.group(1), 16)]) if m else bytes([_strtol_hex(text[3:5])])
        else:
            p = b""             # unused / undefined tokens, and byte tokens in BPE vocabs
        self._pieces[tid] = p
        return p

    def token_to_piece(self, token_id: int, special: bool = True) -> bytes:
        """The bytes of one token, as `llama_token_to_piece(token, lstrip=0, special)`.

        Control and unknown tokens give their text only when `special`; user-defined tokens
        always give their text; BPE tokens are mapped back from GPT-2's byte-level characters;
        SPM tokens turn U+2581 into spaces and `<0xXX>` into that byte.
        """
        tid = self._check_id(token_id)
        if not special and self._attr[tid] & (ATTR_UNKNOWN | ATTR_CONTROL):
            return b""
        return self._piece(tid)

    def detokenize(self, ids: Iterable[int], special: bool = False) -> str:
        """Text of `ids`, as llama.cpp's `common_detokenize(ctx, ids, special)`.

        The pieces are joined; as in llama.cpp, one leading space of the first piece is
        dropped when the vocab adds a space prefix (SPM), and vocabs with `clean_spaces`
        (the GPT-2/Llama-3 family, not SmolLM or Qwen2) get llama.cpp's " ," / " 's" clean-up.
        Invalid UTF-8 (a token sequence cut inside a character) decodes to U+FFFD.
        """
        parts = []
        strip = self.add_space_prefix
        for t in ids:
            p = self.token_to_piece(t, special)
            if strip and p[:1] == b" ":
                p = p[1:]
            strip = False
            parts.append(p)
        b = b"".join(parts)
        if self.clean_spaces:
            b = _clean_spaces(b)
        return b.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ queries

    def is_eog(self, token_id: int) -> bool:
        """End of generation: EOS, EOT, EOM and the other ids llama.cpp collects."""
        try:
            return int(token_id) in self.eog_ids
        except (TypeError, ValueError):
            return False

    def is_control(self, token_id: int) -> bool:
        return bool(self._attr[self._check_id(token_id)] & ATTR_CONTROL)

    def text_to_token(self, text: str) -> int:
        """The id whose text is exactly `text`, or -1."""
        return self._token_to_id.get(text, -1)

    def __len__(self) -> int:
        return self.n_vocab

    def __repr__(self) -> str:
        return (f"Vocab({self.type}, pre={self.pre!r}, n_vocab={self.n_vocab}, bos={self.bos_id}, "
                f"eos={self.eos_id}, add_bos={self.add_bos})")

    # ------------------------------------------------------------------ chat template

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            **kwargs) -> str:
        """Render `tokenizer.chat_template` as HF transformers does (sandboxed jinja2)."""
        if not isinstance(self.chat_template, str) or not self.chat_template:
            raise VocabError(f"{self._where}the file has no tokenizer.chat_template")
        if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
            raise ParamError(f"invalid messages={messages!r:.80}: expected a list of dicts "
                             f"with 'role' and 'content'")
        for m in messages:
            if "role" not in m:
                raise ParamError(f"invalid message {m!r:.80}: it has no 'role'")
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise VocabError(f"{self._where}chat template error: {message}")

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            import json
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            template = env.from_string(self.chat_template)
            return template.render(
                messages=list(messages), add_generation_prompt=bool(add_generation_prompt),
                bos_token=self.tokens[self.bos_id] if self.bos_id >= 0 else "",
                eos_token=self.tokens[self.eos_id] if self.eos_id >= 0 else "", **kwargs)
        except jinja2.TemplateError as e:
            raise VocabError(f"{self._where}cannot render the chat template: "
                             f"{type(e).__name__}: {e}") from None


# --------------------------------------------------------------------------- helpers

def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _strtol_hex(s: str) -> int:
    m = re.match(r"\s*([0-9A-Fa-f]*)", s)
    return int(m.group(1), 16) & 0xFF if m and m.group(1) else 0


def _decode_byte_level(text: str) -> bytes:
    """llama_decode_text: GPT-2 byte-level characters back to bytes."""
    try:
        return bytes([_UNICODE_TO_BYTE[c] for c in text])
    except KeyError:
        pass
    out = bytearray()
    for c in text:
        b = _UNICODE_TO_BYTE.get(c)
        if b is not None:
            out.append(b)
        else:               # llama.cpp writes this marker (with the whole token text)
            out += b"[UNK_BYTE_0x" + _raw(c).hex().encode() + _raw(text) + b"]"
    return bytes(out)
