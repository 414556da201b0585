"""specnb.vocab: the GGUF tokenizer, checked against llama.cpp's own output.

- SmolLM2 (gpt2-style BPE, pre "smollm"): every case of llama-tokenize's output in
  tests/data/llamacpp_tokenize_smollm2.json and tests/data/vocab_smollm2_llamacpp.json
  (random texts, with and without parse_special) must match id for id; special tokens,
  pieces, round trips, speed; tables that cannot be used give a VocabError.
- Elsewhere: other BPE pre-tokenizers and a port of llama.cpp's BPE path (test_vocab_bpe.py),
  SentencePiece vocabs (test_vocab_spm.py), chat templates (test_chat_template.py), bytes
  and prompt files (test_textio.py), random Unicode (test_fuzz_tokenizer.py).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from specnb.errors import ParamError, VocabError
from specnb.vocab import Vocab
from vocab_cases import llamacpp_cases, smollm_meta, smollm_vocab, spm_meta, timed


@pytest.fixture
def smol_meta():
    return smollm_meta()


@pytest.fixture
def smol():
    return smollm_vocab()


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


@pytest.mark.slow
def test_smollm_matches_llamacpp_tokenize(smol):
    """Every case llama-tokenize produced (parse_special on, model adds no BOS)."""
    cases = llamacpp_cases("llamacpp_tokenize_smollm2.json")
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
    cases = llamacpp_cases("vocab_smollm2_llamacpp.json")
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
    # bytes are what llama.cpp is given; valid UTF-8 tokenizes as the text it spells
    assert smol.tokenize("Hello world".encode()) == smol.tokenize("Hello world")
    for bad in (None, 12, ["a"]):
        with pytest.raises(ParamError):
            smol.tokenize(bad)


@pytest.mark.slow
def test_smollm_speed(smol_meta):
    # CPU time with a wide margin (a guard against pathological slowness, not a benchmark)
    build = min(timed(lambda: Vocab.from_metadata(smol_meta)) for _ in range(2))
    assert build < 2.0, f"building the 49k vocab took {build:.3f} s"
    v = Vocab.from_metadata(smol_meta)
    rng = random.Random(1)
    words = ["the", "model", "draft", "token", "2024", "😀", "你好", "\n", "  ", "<|im_end|>", "x=1;"]
    text = " ".join(rng.choice(words) for _ in range(3000))[:10000]
    assert len(text) == 10000
    t = min(timed(lambda: v.tokenize(text)) for _ in range(3))
    assert t < 0.5, f"tokenizing 10k characters took {t:.3f} s"




# ============================================================== errors


def test_unknown_tokenizer_model():
    with pytest.raises(VocabError, match="'bert'"):
        Vocab.from_metadata(spm_meta(**{"tokenizer.ggml.model": "bert"}))
    meta = spm_meta()
    del meta["tokenizer.ggml.model"]
    with pytest.raises(VocabError, match="tokenizer.ggml.model"):
        Vocab.from_metadata(meta)


def test_missing_or_bad_tables():
    meta = spm_meta()
    del meta["tokenizer.ggml.tokens"]
    with pytest.raises(VocabError, match="tokenizer.ggml.tokens"):
        Vocab.from_metadata(meta, source="x.gguf")
    with pytest.raises(VocabError, match="tokenizer.ggml.tokens"):
        Vocab.from_metadata(spm_meta(**{"tokenizer.ggml.tokens": []}))
    with pytest.raises(VocabError, match="tokenizer.ggml.scores"):
        Vocab.from_metadata(spm_meta(**{"tokenizer.ggml.scores": np.zeros(3, np.float32)}))
    with pytest.raises(VocabError, match="tokenizer.ggml.token_type"):
        Vocab.from_metadata(spm_meta(**{"tokenizer.ggml.token_type": np.ones(5, np.int32)}))
    dup = spm_meta()
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
        v = Vocab.from_metadata(spm_meta(**{"tokenizer.ggml.bos_token_id": 9999}))
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
