"""Fuzz the tokenizer: random Unicode and random bytes tokenize without error, and round-trip
exactly where llama.cpp's tokenizer does.

Texts mix ASCII, C0/C1 controls and NUL, combining marks (alone and in long runs), lone
surrogates, noncharacters, BOMs, bidi and zero-width marks, private use, CJK, emoji with ZWJ,
astral characters, special-token texts, and runs of one unit up to 5,000 long. Byte strings mix
those with invalid bytes, cut sequences, overlong forms and encoded surrogates.

Properties, for every case (CPU time under 5 s each):
- a str tokenizes without error; its lone surrogates count as U+FFFD (a str is text, and lone
  surrogates cannot be UTF-8), so the pieces join to the UTF-8 of the text with them replaced,
  minus the bytes a BPE vocab has no token for (llama.cpp drops those too: SmolLM2 has no token
  for 0x04, 0xF1, 0xF2, ...);
- bytes tokenize without error, except for a sequence decoding beyond U+10FFFF in a BPE vocab
  (llama.cpp aborts; specnb gives a ParamError with the byte offset); a BPE vocab's pieces join
  to what llama.cpp's decoder makes of the bytes (invalid bytes as U+FFFD, overlong forms and
  surrogates re-encoded), an SPM vocab's to the bytes themselves (spaces as U+2581).
The facts: llama-tokenize's ids for 115 such texts on SmolLM2 and Gemma 3
(tests/data/llamacpp_tokenize_unicode_*.json), and whether its pieces round-trip.
SPECNB_FUZZ_SCALE=10 runs ten times the random cases.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from specnb.model import testing
from specnb.errors import ParamError, SpecnbError
from specnb.vocab.textio import llama_decode
from specnb.vocab import Vocab
from specnb.vocab.bpe import BYTE_TO_UNICODE
from vocab_cases import gemma_path, llamacpp_cases, smollm_path, smollm_vocab, spm_meta

TIME_LIMIT_S = 5.0
SCALE = float(os.environ.get("SPECNB_FUZZ_SCALE", "1"))
N_TEXTS, N_BYTES = 300, 300

_UNITS = [
    lambda r: chr(r.randint(0x20, 0x7E)), lambda r: chr(r.choice([0, 1, 4, 7, 9, 10, 13, 27, 0x7F, 0x85, 0x9F])),
    lambda r: chr(r.randint(0x300, 0x36F)), lambda r: chr(r.randint(0xD800, 0xDFFF)),
    lambda r: chr(r.choice([0xFFFD, 0xFEFF, 0xFFFE, 0xFFFF, 0x200B, 0x200D, 0x202E, 0x2028, 0xE000, 0x10FFFF])),
    lambda r: chr(r.randint(0x4E00, 0x9FFF)), lambda r: chr(r.randint(0x1F300, 0x1FAFF)),
    lambda r: "👩\u200d👩\u200d👧", lambda r: chr(r.randint(0xA0, 0x2FF)), lambda r: chr(r.randint(0x10000, 0x10FFFF)),
    lambda r: r.choice(["<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<bos>", "<end_of_turn>", "<|im_start|>"]),
    lambda r: r.choice([" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "123", "x=1;"]),
]


def random_text(rng: random.Random, specials: bool = True) -> str:
    out = []
    for _ in range(rng.randint(0, 30)):
        unit = rng.choice(_UNITS[:-2] if not specials else _UNITS)(rng)
        if not specials and unit.startswith("<"):
            unit = "x"
        out.append(unit * (rng.choice([2, 50, 1000, 5000]) if rng.random() < 0.05 else 1))
    return "".join(out)


def random_bytes(rng: random.Random) -> bytes:
    pool = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc3", b"\xe2\x82", b"\xe0\x80\xaf", b"\xed\xa0\x80",
            b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xff\xfe", b"\xe9 "]
    out = []
    for _ in range(rng.randint(0, 24)):
        r = rng.random()
        if r < 0.3:
            out.append(bytes([rng.randint(0x80, 0xFF)]))
        elif r < 0.45:
            out.append(rng.choice(pool))
        elif r < 0.55:
            out.append(bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 6))))
        else:
            out.append(random_text(rng).encode("utf-8", "surrogatepass")[:40])
    return b"".join(out)


def _fixed(text: str) -> str:
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _timed_tokenize(v: Vocab, text, **kw):
    t = time.thread_time()
    try:
        return v.tokenize(text, **kw)
    finally:
        dt = time.thread_time() - t
        assert dt < TIME_LIMIT_S, f"{dt:.1f} s of CPU tokenizing {text[:60]!r} ({len(text)} long)"


def _joined(v: Vocab, ids) -> bytes:
    return b"".join(v.token_to_piece(i, special=True) for i in ids)


def _without_missing_bytes(v: Vocab, data: bytes) -> bytes:
    """What a byte-level BPE vocab can spell of `data` (the bytes with no token are dropped)."""
    return bytes(b for b in data if v.text_to_token(BYTE_TO_UNICODE[b]) >= 0)


def _check_bpe_text(v: Vocab, text: str, parse_special: bool) -> None:
    ids = _timed_tokenize(v, text, parse_special=parse_special)
    expected = _without_missing_bytes(v, _fixed(text).encode())
    assert _joined(v, ids) == expected, text
    if expected == _fixed(text).encode():       # the vocab spells every byte: a round trip
        assert v.detokenize(ids, special=True) == _fixed(text)


def _check_bpe_bytes(v: Vocab, data: bytes) -> None:
    try:
        decoded = llama_decode(data)
    except ParamError:
        with pytest.raises(ParamError, match="byte offset"):
            _timed_tokenize(v, data)
        return
    ids = _timed_tokenize(v, data)
    assert _joined(v, ids) == _without_missing_bytes(v, decoded.encode("utf-8", "surrogatepass")), data


@pytest.fixture(scope="module")
def tiny_bpe():
    tokens, types, merges = testing.tiny_vocab()
    return Vocab.from_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
                                "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
                                "tokenizer.ggml.merges": merges})


def test_fuzz_tiny_bpe(tiny_bpe):
    rng = random.Random(161)
    for _ in range(int(N_TEXTS * SCALE)):
        _check_bpe_text(tiny_bpe, random_text(rng), parse_special=rng.random() < 0.7)
    for _ in range(int(N_BYTES * SCALE)):
        _check_bpe_bytes(tiny_bpe, random_bytes(rng))


def test_fuzz_forged_spm():
    """An SPM vocab spells any text and any bytes (byte tokens): the pieces are the input,
    after the space it puts in front."""
    v = Vocab.from_metadata(spm_meta())
    rng = random.Random(162)
    for _ in range(int(N_TEXTS * SCALE)):
        text = random_text(rng, specials=False)
        ids = _timed_tokenize(v, text, add_special=False, parse_special=False)
        assert _joined(v, ids) == (b" " + _fixed(text).encode() if text else b""), text
        assert v.detokenize(ids) == _fixed(text)
    space = "\u2581".encode()
    for _ in range(int(N_BYTES * SCALE)):
        data = random_bytes(rng).replace(b"<|user|>", b"")
        ids = _timed_tokenize(v, data, add_special=False, parse_special=False)
        # spaces became U+2581 before the merges; one whose bytes an invalid lead byte took
        # comes back as those bytes (llama.cpp's session cuts symbols by lead bytes)
        assert _joined(v, ids).replace(b" ", space) == \
            ((b" " + data).replace(b" ", space) if data else b""), data


@pytest.mark.slow
def test_fuzz_smollm2():
    v = smollm_vocab()
    rng = random.Random(163)
    for _ in range(int(N_TEXTS * SCALE)):
        _check_bpe_text(v, random_text(rng), parse_special=rng.random() < 0.7)
    for _ in range(int(N_BYTES * SCALE)):
        _check_bpe_bytes(v, random_bytes(rng))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_unicode_matches_llamacpp(name):
    """llama-tokenize's ids, and its round trip exactly where specnb's pieces round-trip."""
    if name == "smollm2":
        smollm_path()
        v = smollm_vocab()
    else:
        v = Vocab.from_gguf(gemma_path())
    cases = llamacpp_cases(f"llamacpp_tokenize_unicode_{name}.json")
    bad, trips = [], 0
    for c in cases:
        text = c["run"][0] * c["run"][1] if "run" in c else c["text"]
        try:
            ids = _timed_tokenize(v, text, parse_special=c["parse_special"])
        except SpecnbError as e:        # never: any text tokenizes
            raise AssertionError(f"{text[:40]!r}: {e}") from e
        if ids != c["ids"]:
            bad.append((text[:40], ids[:8], c["ids"][:8]))
            continue
        pieces = ids[1:] if v.add_bos else ids
        ours = _joined(v, pieces) == c.get("llama_text", text).encode()
        if c["llama_round_trip"] is not None:
            assert ours == c["llama_round_trip"], text[:60]
            trips += ours
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp: {bad[:3]}"
    assert trips >= 50
