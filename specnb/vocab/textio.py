"""Prompt text as llama.cpp takes it: a file's bytes as they are, and llama.cpp's UTF-8 decoding.

Anchors are llama.cpp c392e50.

- `read_text_file(path)`: the bytes, with no newline translation (`a\\r\\nb` stays four bytes) and
  nothing refused: a BOM, NUL bytes and invalid UTF-8 go to the tokenizer as llama.cpp's do.
  `llama-tokenize -f` reads the file this way (read_prompt_from_file,
  examples/tokenize/tokenize.cpp:46); llama-cli, llama-speculative-simple and llama-perplexity
  read `-f` the same way and then drop one final newline (common/arg.cpp:842), which
  `keep_final_newline=False` does.
- `process_escapes(data)`: llama.cpp's string_process_escapes (master 34af94cd common/common.cpp:
  644-679), which the commands apply by default to `-p` and to `-f`'s contents (`-e`;
  `--no-escape` keeps the bytes; perplexity leaves it off, as llama-perplexity does):
  `\\n \\r \\t \\' \\" \\\\` and `\\xHH` become their byte, any other backslash stays as it is.
- `prompt_text(s)`: a command-line or API string; one that holds bytes Python could not decode
  (command-line arguments arrive with those as lone surrogates) becomes those bytes again.
- `llama_decode(data)`: bytes to code points as llama.cpp's BPE tokenizer sees them
  (unicode_cpts_from_utf8, src/unicode.cpp:616, and unicode_cpt_from_utf8, :36): each byte of
  an invalid sequence becomes U+FFFD, while overlong forms and encoded surrogates decode to
  their code point. A sequence that decodes beyond U+10FFFF makes llama.cpp abort
  (unicode_cpt_to_utf8 throws "invalid codepoint", :574); here it is a `ParamError` naming the
  text and the byte offset.

The bytes carry their origin (`SourcedBytes.source`) so that such an error names the file.
"""
from __future__ import annotations

import codecs
import os

from ..errors import ParamError


class SourcedBytes(bytes):
    """Prompt bytes that remember where they came from (a path, or "-p")."""
    source: str = ""

    def __new__(cls, data: bytes, source: str = ""):
        obj = super().__new__(cls, data)
        obj.source = source
        return obj


def read_text_file(path, what: str = "prompt file",
                   keep_final_newline: bool = True) -> SourcedBytes:
    """A text file's bytes, as llama.cpp reads them; `keep_final_newline=False` drops one final
    newline as llama.cpp's common `-f` option does. Errors are `ParamError`s naming the file."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise ParamError(f"cannot read {what} {name!r}: it is a directory")
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ParamError(f"cannot read {what} {name!r}: {e.strerror or e}") from None
    if not keep_final_newline and data.endswith(b"\n"):
        data = data[:-1]
    return SourcedBytes(data, name)


# string_process_escapes' one-letter escapes (common/common.cpp:651-656)
_ESCAPES = {ord("n"): 0x0A, ord("r"): 0x0D, ord("t"): 0x09, ord("'"): 0x27, ord('"'): 0x22,
            ord("\\"): 0x5C}
_C_SPACE = b" \t\n\v\f\r"           # isspace() in the "C" locale
_HEX = b"0123456789abcdefABCDEF"


def _hex_pair(a: int, b: int) -> int | None:
    """strtol(x, &end, 16) over the two characters x = a b, when it reads both (end == x + 2,
    common/common.cpp:659-666): two hex digits, or a space or a sign before one. None otherwise."""
    if b not in _HEX:
        return None
    if a in _HEX:
        return int(bytes([a, b]), 16)
    if a in _C_SPACE or a == ord("+"):
        return int(bytes([b]), 16)
    if a == ord("-"):
        return -int(bytes([b]), 16)
    return None


def process_escapes(data: bytes) -> bytes:
    """llama.cpp's string_process_escapes (common/common.cpp:644-679) over bytes: a backslash and
    n, r, t, ', " or a backslash make that one byte; `\\x` and two characters strtol reads whole
    make the byte char(value) (`\\x41` is "A", `\\x-1` is 0xFF); anything else, a backslash that
    ends the text included, stays as it is."""
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c != 0x5C or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = data[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
            continue
        if e == ord("x") and i + 3 < n:                    # (input_idx + 2 < input_len)
            v = _hex_pair(data[i + 2], data[i + 3])
            if v is not None:
                out.append(v & 0xFF)                       # char(val)
                i += 4
                continue
        out += data[i:i + 2]                               # default: the backslash and the char
        i += 2
    return bytes(out)


def escaped_prompt(text: str | bytes, source: str = "-p") -> str | SourcedBytes:
    """A prompt (str or bytes) with its escapes processed: a str again when the result is UTF-8,
    else the bytes (`\\xff` makes a byte no UTF-8 text holds)."""
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    done = process_escapes(raw)
    src = getattr(text, "source", "") or source
    try:
        return done.decode("utf-8") if isinstance(text, str) else SourcedBytes(done, src)
    except UnicodeDecodeError:
        return SourcedBytes(done, src)


def prompt_text(text: str, source: str = "-p") -> str | SourcedBytes:
    """`text` itself, or its original bytes when it holds undecodable bytes (surrogateescape)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return SourcedBytes(text.encode("utf-8", "surrogateescape"), source)
    except UnicodeEncodeError:      # other lone surrogates: the tokenizer makes them U+FFFD
        return text


def as_text(text: str | bytes, errors: str = "surrogateescape") -> str:
    """A prompt as a str: for a chat message, undecodable bytes kept as escapes (which
    `prompt_text` turns back into the same bytes); for printing, errors="replace"."""
    return text if isinstance(text, str) else bytes(text).decode("utf-8", errors)


def strip_final_newline(text: str | bytes):
    """`text` without one final newline (keeping where bytes came from)."""
    if isinstance(text, str):
        return text[:-1] if text.endswith("\n") else text
    if not text.endswith(b"\n"):
        return text
    return SourcedBytes(text[:-1], getattr(text, "source", ""))


# ---- llama.cpp's UTF-8 decoder ---------------------------------------------------------------
def _cpt_from_utf8(data: bytes, i: int) -> tuple[int, int]:
    """unicode_cpt_from_utf8: (code point, next offset), or (-1, i + 1) where llama.cpp throws.
    It checks the lead byte and that enough continuation bytes follow, nothing more."""
    n = len(data)
    b0 = data[i]

    def cont(k):
        return i + k < n and data[i + k] & 0xC0 == 0x80

    if not b0 & 0x80:
        return b0, i + 1
    if not b0 & 0x40:
        return -1, i + 1
    if not b0 & 0x20:
        return ((b0 & 0x1F) << 6 | data[i + 1] & 0x3F, i + 2) if cont(1) else (-1, i + 1)
    if not b0 & 0x10:
        if cont(1) and cont(2):
            return (b0 & 0x0F) << 12 | (data[i + 1] & 0x3F) << 6 | data[i + 2] & 0x3F, i + 3
        return -1, i + 1
    if not b0 & 0x08:
        if cont(1) and cont(2) and cont(3):
            return ((b0 & 0x07) << 18 | (data[i + 1] & 0x3F) << 12 | (data[i + 2] & 0x3F) << 6
                    | data[i + 3] & 0x3F, i + 4)
        return -1, i + 1
    return -1, i + 1


class _BeyondUnicode(Exception):
    def __init__(self, offset: int, end: int, cpt: int):
        super().__init__(offset, end, cpt)
        self.offset, self.end, self.cpt = offset, end, cpt


def _llama_errors(e: UnicodeDecodeError):
    # Python's strict decoder agrees with llama.cpp on every well-formed sequence; where it
    # stops, take one llama.cpp step and let Python carry on after it
    cpt, end = _cpt_from_utf8(e.object, e.start)
    if cpt < 0:
        return "\ufffd", end
    if cpt > 0x10FFFF:
        raise _BeyondUnicode(e.start, end, cpt)
    return chr(cpt), end     # an overlong form's code point, or a lone surrogate


codecs.register_error("specnb-llama-utf8", _llama_errors)


def llama_decode(data: bytes, source: str = "") -> str:
    """`data` decoded as llama.cpp's unicode_cpts_from_utf8 does (may hold lone surrogates)."""
    try:
        return bytes(data).decode("utf-8", "specnb-llama-utf8")
    except _BeyondUnicode as e:
        where = source or getattr(data, "source", "") or "text"
        seq = bytes(data[e.offset:e.end]).hex(" ")
        raise ParamError(f"{where}: byte offset {e.offset}: {seq} decodes to U+{e.cpt:X}, beyond "
                         f"Unicode; llama.cpp's BPE tokenizer aborts on such text") from None
