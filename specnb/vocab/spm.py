"""SentencePiece-style vocabs (`tokenizer.ggml.model == "llama"`): llama.cpp's SPM session.

llama.cpp (llm_tokenizer_spm_session, src/llama-vocab.cpp:110, c392e50) turns spaces into
U+2581 (llama_escape_whitespace, :2286), cuts the text into UTF-8 characters by their lead byte
alone (unicode_len_utf8, src/unicode.cpp:22), then repeatedly merges the
adjacent pair whose concatenation is the highest-scoring token (the leftmost pair on equal
scores); a symbol left that is not a token is written as its bytes' `<0xXX>` tokens.

This is a direct port rather than a `tokenizers` BPE with merges ranked by score (HF's
LlamaConverter): BPE ranks are strict, so when two tokens share a score (SPM vocabs give whole
families of tokens one score: byte, control and user-defined ones, often 0 or -1000) the BPE
would merge them in rank order, not leftmost first as llama.cpp does, and split some texts
differently (test_spm_segmentations has such a case).
"""
from __future__ import annotations

import heapq
import re

from ..errors import VocabError

SPM_SPACE = "\u2581"  # ▁
SPM_SPACE_BYTES = SPM_SPACE.encode("utf-8")

BYTE_TOKEN_RE = re.compile(r"<0x([0-9A-Fa-f]{2})>")

# unicode_len_utf8 (src/unicode.cpp): a character's length in bytes, from its lead byte's
# high nibble alone (continuation bytes count as one-byte characters)
_UTF8_LEN = (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)


def byte_token_ids(token_to_id: dict) -> list:
    """For each byte, the id of its `<0xXX>` token (llama_byte_to_token_impl), or None."""
    ids = []
    for b in range(256):
        tid = token_to_id.get(f"<0x{b:02X}>")
        if tid is None:     # llama.cpp then tries the byte itself as a token text
            tid = token_to_id.get(chr(b) if b < 0x80 else chr(0xDC00 + b))
        ids.append(tid)
    return ids


def byte_token_value(text: str) -> int:
    """The byte a `<0xXX>` token stands for; llama.cpp reads text[3:5] as hex with strtol."""
    m = BYTE_TOKEN_RE.fullmatch(text)
    if m:
        return int(m.group(1), 16)
    m = re.match(r"\s*([0-9A-Fa-f]*)", text[3:5])
    return int(m.group(1), 16) & 0xFF if m and m.group(1) else 0


def utf8_symbols(data: bytes) -> list[bytes]:
    """The session's first split: each lead byte takes as many bytes as it announces."""
    out, i, n = [], 0, len(data)
    while i < n:
        j = min(i + _UTF8_LEN[data[i] >> 4], n)
        out.append(data[i:j])
        i = j
    return out


def spm_tokenize(syms: list, lookup, scores: list, byte_ids: list, out: list[int],
                 where: str = "") -> None:
    """Merge `syms` (characters as str, or byte strings) and append the token ids to `out`.

    `lookup(symbol)` is the id of a symbol's text or None; `scores[id]` its score.
    """
    n = len(syms)
    if n == 0:
        return
    size = [1] * n                  # symbols merged into each one; 0 once merged away
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    # heap entries: (-score, left, right, size of left + right when queued)
    heap = []
    for i in range(n - 1):
        tid = lookup(syms[i] + syms[i + 1])
        if tid is not None:
            heap.append((-scores[tid], i, i + 1, 2))
    heapq.heapify(heap)
    while heap:
        _, left, right, both = heapq.heappop(heap)
        if size[left] == 0 or size[right] == 0 or size[left] + size[right] != both:
            continue                # one side has changed since this pair was queued
        syms[left] += syms[right]
        syms[right] = syms[right][:0]
        size[left], size[right] = both, 0
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        before = prv[left]
        if before >= 0:
            tid = lookup(syms[before] + syms[left])
            if tid is not None:
                heapq.heappush(heap, (-scores[tid], before, left, size[before] + both))
        if after >= 0:
            tid = lookup(syms[left] + syms[after])
            if tid is not None:
                heapq.heappush(heap, (-scores[tid], left, after, both + size[after]))
    i = 0
    while i != -1:
        sym = syms[i]
        tid = lookup(sym)
        if tid is not None:
            out.append(tid)
        else:
            for byte in sym if isinstance(sym, bytes) else sym.encode("utf-8"):
                bid = byte_ids[byte]
                if bid is None:
                    raise VocabError(f"{where}character {sym!r} is not in the vocab and there is "
                                     f"no byte token <0x{byte:02X}> to spell it")
                out.append(bid)
        i = nxt[i]
