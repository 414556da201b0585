"""specnb.vocab.bpe: BPE pre-tokenizers and merges, against a port of llama.cpp's splitters and
BPE loop written here in the test, and against llama-tokenize on SmolLM2's tables under other
`tokenizer.ggml.pre` values (tests/data/vocab_pretok_llamacpp.json)."""
from __future__ import annotations

import heapq
import random
import unicodedata

import pytest

from specnb.vocab import Vocab
from specnb.vocab.bpe import BYTE_TO_UNICODE
from vocab_cases import llamacpp_cases, smollm_meta, smollm_vocab


# ------------------------------------------- a port of llama.cpp's BPE path (oracle)

_WS = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
       0x2028, 0x2029, 0x202F, 0x205F, 0x3000}   # llama.cpp's unicode_set_whitespace


def _is_letter(s, i):
    return i < len(s) and unicodedata.category(s[i])[0] == "L"


def _is_number(s, i):
    return i < len(s) and unicodedata.category(s[i])[0] == "N"


def _is_space(s, i):
    return i < len(s) and ord(s[i]) in _WS


def _is_other(s, i):
    return i < len(s) and not (_is_letter(s, i) or _is_number(s, i) or _is_space(s, i))


def _ref_gpt2_split(s: str) -> list[str]:
    """llama.cpp's unicode_regex_split_custom_gpt2 on one piece."""
    out, pos, prev, n = [], 0, 0, len(s)

    def cut(end):
        nonlocal prev
        if end > prev:
            out.append(s[prev:end])
        prev = end

    while pos < n:
        c = s[pos]
        if c == "'" and pos + 1 < n:
            if s[pos + 1] in "stmd":
                pos += 2
                cut(pos)
                continue
            if pos + 2 < n and s[pos + 1:pos + 3] in ("re", "ve", "ll"):
                pos += 3
                cut(pos)
                continue
        j = pos + 1 if c == " " else pos
        matched = False
        for test in (_is_letter, _is_number, _is_other):
            if test(s, j):
                pos = j
                while test(s, pos):
                    pos += 1
                cut(pos)
                matched = True
                break
        if matched:
            continue
        k = 0
        while _is_space(s, pos + k):
            k += 1
        if k > 1 and pos + k < n:
            pos += k - 1
        elif k > 0:
            pos += k
        else:
            pos += 1
        cut(pos)
    return out


def _ref_llama3_split(s: str, max_digits: int) -> list[str]:
    """llama.cpp's unicode_regex_split_custom_llama3 (max_digits=1: the Qwen2 expression)."""
    out, pos, prev, n = [], 0, 0, len(s)

    def cut(end):
        nonlocal prev
        if end > prev:
            out.append(s[prev:end])
        prev = end

    while pos < n:
        c = s[pos]
        if c == "'" and pos + 1 < n:
            c1 = s[pos + 1].lower()
            if c1 in ("s", "t", "m", "d"):
                pos += 2
                cut(pos)
                continue
            if pos + 2 < n and c1 + s[pos + 2].lower() in ("re", "ve", "ll"):
                pos += 3
                cut(pos)
                continue
        if not (c in "\r\n" or _is_number(s, pos)) and (_is_letter(s, pos) or _is_letter(s, pos + 1)):
            pos += 1
            while _is_letter(s, pos):
                pos += 1
            cut(pos)
            continue
        if _is_number(s, pos):
            ini = pos
            while _is_number(s, pos):
                pos += 1
                if pos - ini >= max_digits:
                    cut(pos)
                    ini = pos
            cut(pos)
            continue
        j = pos + 1 if c == " " else pos
        if not (_is_space(s, j) or _is_letter(s, j) or _is_number(s, j)):
            pos = j
            while _is_other(s, pos):
                pos += 1
            while pos < n and s[pos] in "\r\n":
                pos += 1
            cut(pos)
            continue
        k, last_nl = 0, 0
        while _is_space(s, pos + k):
            if s[pos + k] in "\r\n":
                last_nl = pos + k + 1
            k += 1
        if last_nl:
            pos = last_nl
        elif k > 1 and pos + k < n:
            pos += k - 1
        elif k > 0:
            pos += k
        else:
            pos += 1
        cut(pos)
    return out


def _byte_level(s: str) -> str:
    return "".join(BYTE_TO_UNICODE[b] for b in s.encode("utf-8"))


def _ref_bpe(word: str, ranks: dict, tok2id: dict) -> list[int]:
    """llama.cpp's llm_tokenizer_bpe_session merge loop on one byte-level word."""
    sy = list(word)
    nxt = list(range(1, len(sy) + 1))
    nxt[-1] = -1
    prv = list(range(-1, len(sy) - 1))
    heap: list = []

    def add(l, r):
        if l >= 0 and r >= 0:
            rank = ranks.get((sy[l], sy[r]))
            if rank is not None:
                heapq.heappush(heap, (rank, l, r, sy[l] + sy[r]))

    for i in range(len(sy) - 1):
        add(i, i + 1)
    while heap:
        _, l, r, text = heapq.heappop(heap)
        if not sy[l] or not sy[r] or sy[l] + sy[r] != text:
            continue
        sy[l], sy[r] = text, ""
        nxt[l] = nxt[r]
        if nxt[r] >= 0:
            prv[nxt[r]] = l
        add(prv[l], l)
        add(l, nxt[l])
    out = []
    for s in sy:
        if s:
            if s in tok2id:
                out.append(tok2id[s])
            else:
                out.extend(tok2id[chr(b)] for b in s.encode() if chr(b) in tok2id)
    return out


def _ref_smollm_tokenize(text: str, ranks: dict, tok2id: dict) -> list[int]:
    pieces, cur = [], ""
    for ch in text:                          # first expression: \p{N}, isolated
        if unicodedata.category(ch)[0] == "N":
            if cur:
                pieces.append(cur)
            pieces.append(ch)
            cur = ""
        else:
            cur += ch
    if cur:
        pieces.append(cur)
    out = []
    for p in pieces:
        for w in _ref_gpt2_split(p):
            out.extend(_ref_bpe(_byte_level(w), ranks, tok2id))
    return out


# characters whose Unicode category Python 3.11 (Unicode 14) and llama.cpp agree on
_FUZZ_POOL = (list("abcdefXYZ") + list("0123456789") + list(" !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
              + [" ", " ", "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", "\xa0", "\u3000", "\u2009",
                 "\x85", "\u2028", "\u200b", "\ufeff", "\x01", "\x7f", "\u00ad"]
              + list("éßñÆø你好世界カタ한국αβПр") + ["e\u0301", "\u0301", "\u093f", "\u0915"]
              + list("²٣①Ⅻ½") + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Ve"]
              + list("😀🤖❤👍🏽€£±×→∑√—…“”«»") + ["the", " the", "ing", " model", "    ", "\n\n"])


def _fuzz_texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(_FUZZ_POOL) for _ in range(rng.randint(1, 30))) for _ in range(n)]


@pytest.mark.slow
def test_smollm_against_llamacpp_port():
    smol_meta = smollm_meta()
    smol = smollm_vocab()
    tok2id = {t: i for i, t in enumerate(smol_meta["tokenizer.ggml.tokens"])}
    ranks = {}
    for i, m in enumerate(smol_meta["tokenizer.ggml.merges"]):
        p = m.find(" ", 1)
        ranks.setdefault((m[:p], m[p + 1:]), i)
    for text in _fuzz_texts(3, 400):
        assert smol.tokenize(text, parse_special=False) == _ref_smollm_tokenize(text, ranks, tok2id), text



# ------------------------------------------- other BPE pre-tokenizers, on SmolLM's tables


def _pre_split(v: Vocab, text: str) -> list[str]:
    return [p for p, _ in v._tokenizer.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.slow
@pytest.mark.parametrize("pre,digits", [("llama-bpe", 3), ("llama3", 3), ("qwen2", 1),
                                        ("deepseek-r1-qwen", 1)])
def test_llama3_family_split_like_llamacpp(pre, digits):
    smol_meta = smollm_meta()
    meta = dict(smol_meta, **{"tokenizer.ggml.pre": pre})
    v = Vocab.from_metadata(meta)
    assert v.pre == pre
    for text in _fuzz_texts(5, 300) + ["12345 678", "I'LL 'Re \r\n\n  x", "  \n\n a", "a  "]:
        ref = [_byte_level(w) for w in _ref_llama3_split(text, digits)]
        assert _pre_split(v, text) == ref, text


@pytest.mark.slow
def test_pre_tokenizers_match_llamacpp():
    """SmolLM2's tables under other tokenizer.ggml.pre values, against llama-tokenize."""
    smol_meta = smollm_meta()
    cases = llamacpp_cases("vocab_pretok_llamacpp.json")
    pres = sorted({c["pre"] for c in cases})
    assert {"gpt-2", "default", "llama-bpe", "qwen2", "starcoder", "falcon"} <= set(pres)
    bad = []
    for pre in pres:
        v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": pre}))
        bad += [(pre, c["text"]) for c in cases
                if c["pre"] == pre and v.tokenize(c["text"], parse_special=c["parse_special"]) != c["ids"]]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp, e.g. {bad[:3]!r}"


@pytest.mark.slow
def test_gpt2_split_like_llamacpp():
    smol_meta = smollm_meta()
    v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": "gpt-2"}))
    for text in _fuzz_texts(6, 300):
        assert _pre_split(v, text) == [_byte_level(w) for w in _ref_gpt2_split(text)], text


@pytest.mark.slow
def test_pre_tokenizer_flags():
    smol_meta = smollm_meta()
    base = {k: v for k, v in smol_meta.items() if k != "tokenizer.ggml.add_bos_token"}
    llama3 = Vocab.from_metadata(dict(base, **{"tokenizer.ggml.pre": "llama-bpe"}))
    assert llama3.add_bos and llama3.ignore_merges and llama3.clean_spaces
    assert llama3.tokenize("hi")[0] == llama3.bos_id == 1
    assert llama3.tokenize("hi", add_special=False)[0] != 1
    assert _pre_split(llama3, "12345") == ["123", "45"]
    qwen = Vocab.from_metadata(dict(base, **{"tokenizer.ggml.pre": "qwen2"}))
    assert not qwen.add_bos and not qwen.clean_spaces and not qwen.ignore_merges
    assert _pre_split(qwen, "12345") == list("12345")
    # the key wins over the pre-tokenizer's default
    v = Vocab.from_metadata(dict(base, **{"tokenizer.ggml.pre": "llama-bpe",
                                          "tokenizer.ggml.add_bos_token": False,
                                          "tokenizer.ggml.add_eos_token": True}))
    assert v.tokenize("hi") == v.tokenize("hi", add_special=False) + [v.eos_id]


@pytest.mark.slow
def test_default_pre_and_clean_spaces():
    smol_meta = smollm_meta()
    v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": "default"}))
    assert v.clean_spaces
    # punctuation runs are cut first, then GPT-2, then digit runs, then 3 digits at a time
    assert _pre_split(v, "a+=b") == ["a", "+=", "b"]
    assert v.detokenize(v.tokenize("Hello , world ! It 's")) == "Hello, world! It's"
    assert v.detokenize(v.tokenize("x ' y")) == "x'y"


@pytest.mark.slow
def test_unknown_pre_warns_and_falls_back():
    smol_meta = smollm_meta()
    with pytest.warns(UserWarning, match="'no-such-pre'"):
        v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": "no-such-pre"}))
    assert v.pre == "no-such-pre" and v.pre_regexes == Vocab.from_metadata(
        dict(smol_meta, **{"tokenizer.ggml.pre": "default"})).pre_regexes
    assert v.detokenize(v.tokenize("it still works 123")) == "it still works 123"
    meta = {k: val for k, val in smol_meta.items() if k != "tokenizer.ggml.pre"}
    with pytest.warns(UserWarning, match="missing tokenizer.ggml.pre"):
        v = Vocab.from_metadata(meta)
    assert v.pre == "default"
