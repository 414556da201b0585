"""The tokenizer, built from the GGUF's own tables, matching llama.cpp's `llama_tokenize`.

What llama.cpp does (src/llama-vocab.cpp, src/unicode.cpp, c392e50) and where it lives here:

1. **Special-token partitioning** (`tokenizer_st_partition`, on the text's bytes). Every
   control, user-defined and unknown token text is cut out of the raw text, longest text
   first, each one over all the fragments left by the longer ones. With `parse_special=False`
   control and unknown tokens are not looked for, but user-defined ones still are
   (`Vocab._partition`).
2. **BPE vocabs** (`tokenizer.ggml.model == "gpt2"`): each plain fragment goes through the
   pre-tokenizer regexes of `tokenizer.ggml.pre` and byte-level BPE (specnb/vocab/bpe.py).
3. **SPM vocabs** (`"llama"`): spaces become U+2581, a space is put in front of the first
   fragment and of every fragment that follows a special token (`add_space_prefix`), then
   llama.cpp's merge loop runs (specnb/vocab/spm.py).
4. BOS is put in front when `add_special` and `add_bos`, EOS at the end when `add_special`
   and `add_eos`; the defaults per vocab type and pre-tokenizer are llama.cpp's, and the
   `tokenizer.ggml.add_bos_token` / `add_eos_token` keys override them.

Text is a `str` or the `bytes` llama.cpp would be given (specnb/vocab/textio.py reads files so). Bytes
that are valid UTF-8 are decoded and tokenized as text; other bytes are tokenized as llama.cpp
does: partitioned as bytes, then decoded its way (BPE) or cut by lead bytes (SPM).
The chat template is rendered with budgets (specnb/vocab/chat_template.py).
"""
from __future__ import annotations

import os
import warnings
from typing import Iterable

import numpy as np

from . import bpe as vocab_bpe, spm as vocab_spm
from ..errors import ParamError, VocabError
from .textio import llama_decode

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

# ---- token texts llama.cpp recognises (llama_vocab::impl::load) ------------------------------
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

_C_ISSPACE = " \t\n\v\f\r"
_C_ISSPACE_BYTES = _C_ISSPACE.encode()


def _raw(text: str) -> bytes:
    """The token text's original bytes (GGUFFile decodes with surrogateescape)."""
    return text.encode("utf-8", errors="surrogateescape")


class Vocab:
    """A GGUF vocabulary: token tables, special ids and llama.cpp-exact tokenization."""

    @classmethod
    def from_gguf(cls, gguf_file) -> "Vocab":
        """From a `GGUFFile` (or a path to one)."""
        if isinstance(gguf_file, (str, os.PathLike)):
            from ..gguf.file import GGUFFile
            f = GGUFFile(gguf_file)
            try:
                return cls.from_metadata(f.metadata, source=f.path)
            finally:
                f.close()
        return cls.from_metadata(gguf_file.metadata, source=getattr(gguf_file, "path", ""))

    @classmethod
    def from_metadata(cls, meta: dict, source: str = "") -> "Vocab":
        return cls(meta, source)

    # ---- loading: one step per idea ----------------------------------------------------------
    def __init__(self, meta: dict, source: str = ""):
        self.source = source
        self._where = f"{source}: " if source else ""
        self.type = self._vocab_type(meta)
        self._load_tokens(meta)
        if self.type == "bpe":
            ids = self._load_bpe(meta)
        else:
            ids = self._load_spm(meta)
        self._load_special_ids(meta, ids)
        self._load_special_texts(meta)
        self.chat_template = meta.get("tokenizer.chat_template")
        self._pieces: list[bytes | None] = [None] * self.n_vocab

    def _vocab_type(self, meta: dict) -> str:
        where = self._where
        model = meta.get("tokenizer.ggml.model")
        if model is None:
            raise VocabError(f"{where}no tokenizer.ggml.model in the metadata: the file has no "
                             f"vocab")
        for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            if key in meta and not isinstance(meta[key], str):
                raise VocabError(f"{where}{key} must be a string, not {type(meta[key]).__name__}")
        for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                    "tokenizer.ggml.add_space_prefix"):
            if key in meta and not isinstance(meta[key], (bool, int, np.integer)):
                raise VocabError(f"{where}{key} must be a boolean, not {type(meta[key]).__name__}")
        if model == "gpt2":
            return "bpe"
        if model == "llama":
            return "spm"
        raise VocabError(f"{where}unsupported tokenizer model tokenizer.ggml.model={model!r}: "
                         f"specnb supports 'gpt2' (BPE) and 'llama' (SentencePiece)")

    def _load_tokens(self, meta: dict) -> None:
        """Token texts, scores and types (as llama.cpp's attributes)."""
        where = self._where
        tokens = meta.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise VocabError(f"{where}no tokenizer.ggml.tokens in the metadata: cannot build the "
                             f"vocab")
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

    def _load_bpe(self, meta: dict) -> dict:
        """BPE flags (llama.cpp's defaults for the pre-tokenizer) and the `tokenizers` model;
        returns the default special ids."""
        pre = meta.get("tokenizer.ggml.pre")
        self.pre = pre or "default"
        self.pre_regexes, flags = vocab_bpe.pre_tokenizer(pre, self._where)
        self.add_space_prefix = False
        self.ignore_merges = flags.get("ignore_merges", False)
        self.clean_spaces = flags.get("clean_spaces", True)
        self._read_add_flags(meta, add_bos=flags.get("add_bos", False), add_eos=False)
        self._tokenizer = vocab_bpe.build_tokenizer(
            self._token_to_id, meta.get("tokenizer.ggml.merges"), self.pre_regexes,
            self.ignore_merges, self._where)
        # the merge rules in the order BPE learned them (build_tokenizer checked them): roughly
        # the tokens' frequency order
        self.merges: list = list(meta.get("tokenizer.ggml.merges") or ())
        return {"bos": -1 if flags.get("bos_null") else 11, "eos": 11, "unk": -1}

    def _load_spm(self, meta: dict) -> dict:
        """SPM flags and the tables of the merge loop; returns the default special ids."""
        self.pre = meta.get("tokenizer.ggml.pre") or "default"
        self.pre_regexes: tuple[str, ...] = ()
        self.ignore_merges = False
        self.clean_spaces = False
        self.add_space_prefix = True
        self._read_add_flags(meta, add_bos=True, add_eos=False)
        self._tokenizer = None
        self.merges = []
        self._scores_list = (self.scores.tolist() if self.scores is not None
                             else [0.0] * self.n_vocab)
        self._byte_ids = vocab_spm.byte_token_ids(self._token_to_id)
        return {"bos": 1, "eos": 2, "unk": 0}

    def _read_add_flags(self, meta: dict, add_bos: bool, add_eos: bool) -> None:
        """The defaults, then the GGUF keys that override them."""
        self.add_bos, self.add_eos = add_bos, add_eos
        for key, name in (("tokenizer.ggml.add_bos_token", "add_bos"),
                          ("tokenizer.ggml.add_eos_token", "add_eos"),
                          ("tokenizer.ggml.add_space_prefix", "add_space_prefix")):
            v = meta.get(key)
            if v is not None:
                setattr(self, name, bool(v))

    def _load_special_ids(self, meta: dict, defaults: dict) -> None:
        """Special ids: the defaults, the GGUF keys, then the texts llama.cpp knows; and the
        end-of-generation set."""
        n = self.n_vocab
        # defaults, then the GGUF keys (out-of-range ids are ignored with a warning)
        ids = {name: -1 for name, _ in _SPECIAL_KEYS}
        for name, d in defaults.items():
            ids[name] = d if d < n else -1
        for name, key in _SPECIAL_KEYS:
            val = meta.get(key)
            if val is None:
                continue
            if isinstance(val, (bool, float)) or not isinstance(val, (int, np.integer)) \
                    or not 0 <= int(val) < n:
                warnings.warn(f"{self._where}bad special token {key}={val!r} (vocab has {n} "
                              f"tokens), using id {ids[name]}", stacklevel=4)
                continue
            ids[name] = int(val)

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

    def _load_special_texts(self, meta: dict) -> None:
        """The texts cut out before tokenizing, and the strip attributes llama.cpp sets."""
        # control, user-defined and unknown tokens, longest (in bytes) first; ties by id
        # (llama.cpp's std::sort leaves their order unspecified)
        special = np.nonzero(self._attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))[0]
        self._special_ids: list[int] = sorted(
            (int(i) for i in special), key=lambda i: (-len(_raw(self.tokens[i])), i))
        self._special_raw: dict[int, bytes] = {i: _raw(self.tokens[i]) for i in self._special_ids}

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

    # ---- tokenizing --------------------------------------------------------------------------
    def _partition(self, text: str | bytes, parse_special: bool) -> list:
        """Cut special-token texts out of `text` (str, or bytes as llama.cpp works on): a list of
        plain pieces (of the same type) and ints (token ids)."""
        as_bytes = isinstance(text, bytes)
        space = _C_ISSPACE_BYTES if as_bytes else _C_ISSPACE
        frags: list = [text]
        for tid in self._special_ids:
            attr = int(self._attr[tid])
            if not parse_special and attr & (ATTR_CONTROL | ATTR_UNKNOWN):
                continue        # user-defined tokens are matched even without parse_special
            tok = self._special_raw[tid] if as_bytes else self.tokens[tid]
            if tok not in text:
                continue        # fragments are pieces of text: nothing to cut (the fast path)
            out: list = []
            for f in frags:
                if isinstance(f, int) or tok not in f:
                    out.append(f)
                    continue
                start = 0
                while True:
                    pos = f.find(tok, start)
                    if pos < 0:
                        break
                    left = f[start:pos]
                    if attr & ATTR_LSTRIP:
                        left = left.rstrip(space)
                    if left:
                        out.append(left)
                    out.append(tid)
                    start = pos + len(tok)
                    if attr & ATTR_RSTRIP:
                        while start < len(f) and f[start] in space:
                            start += 1
                if start < len(f):
                    out.append(f[start:])
            frags = out
        return frags

    def tokenize(self, text: str | bytes, add_special: bool = True,
                 parse_special: bool = True) -> list[int]:
        """Token ids of `text`, as llama.cpp's `llama_tokenize(text, add_special, parse_special)`.

        `text` is a str or bytes (as llama.cpp takes them: see the module docstring); a str's
        lone surrogates cannot be UTF-8 and are tokenized as U+FFFD.
        """
        if isinstance(text, (bytes, bytearray)):
            source = getattr(text, "source", "")
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError:
                text = bytes(text)
                if self.type == "bpe":      # refuse what llama.cpp cannot decode, up front
                    llama_decode(text, source)
        elif not isinstance(text, str):
            raise ParamError(f"invalid text={text!r:.60}: expected str or bytes")
        elif vocab_bpe.has_surrogate(text):
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
                if isinstance(f, int):
                    out.append(f)
                    prev_special = True  # ... and on each one that follows a special token
                    continue
                if self.add_space_prefix and prev_special:
                    f = (b" " if isinstance(f, bytes) else " ") + f
                self._spm_tokenize(f, out)
                prev_special = False
        else:
            for f in frags:
                if isinstance(f, int):
                    out.append(f)
                elif isinstance(f, bytes):
                    out.extend(vocab_bpe.bpe_encode(self._tokenizer, llama_decode(f)))
                else:
                    out.extend(vocab_bpe.bpe_encode(self._tokenizer, f))
        if add_special and self.add_eos:
            if self.eos_id < 0:
                raise VocabError(f"{self._where}the vocab asks for an EOS token (add_eos) but has "
                                 f"no eos_token_id")
            out.append(self.eos_id)
        return out

    def _spm_tokenize(self, fragment: str | bytes, out: list[int]) -> None:
        """One fragment through llama.cpp's SPM session (spaces become U+2581 first)."""
        if isinstance(fragment, str):
            syms, lookup = list(fragment.replace(" ", vocab_spm.SPM_SPACE)), self._token_to_id.get
        else:       # not valid UTF-8: cut by lead bytes, look up by the bytes' text
            syms = vocab_spm.utf8_symbols(fragment.replace(b" ", vocab_spm.SPM_SPACE_BYTES))

            def lookup(b: bytes, get=self._token_to_id.get):
                return get(b.decode("utf-8", "surrogateescape"))
        vocab_spm.spm_tokenize(syms, lookup, self._scores_list, self._byte_ids, out, self._where)

    # ---- pieces ------------------------------------------------------------------------------
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
                p = _raw(text.replace(vocab_spm.SPM_SPACE, " "))
            else:
                p = vocab_bpe.decode_byte_level(text)
        elif attr & ATTR_BYTE and self.type == "spm":
            p = bytes([vocab_spm.byte_token_value(text)])
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
            b = vocab_bpe.clean_spaces(b)
        return b.decode("utf-8", errors="replace")

    # ---- queries -----------------------------------------------------------------------------
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

    # ---- chat template -----------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            **kwargs) -> str:
        """Render `tokenizer.chat_template` as HF transformers does (sandboxed jinja2), within
        the budgets of specnb/vocab/chat_template.py (a template that breaks one is a VocabError)."""
        from .chat_template import render_chat_template
        if not isinstance(self.chat_template, str) or not self.chat_template:
            raise VocabError(f"{self._where}the file has no tokenizer.chat_template")
        return render_chat_template(
            self.chat_template, messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.tokens[self.bos_id] if self.bos_id >= 0 else "",
            eos_token=self.tokens[self.eos_id] if self.eos_id >= 0 else "",
            source=self.source, **kwargs)

    def user_message(self, text: str) -> str:
        """`text` as one user message in the chat template, ready for the assistant's answer (what
        --chat does to a prompt)."""
        return self.apply_chat_template([{"role": "user", "content": text}])
