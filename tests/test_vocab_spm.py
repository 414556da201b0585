"""specnb.vocab.spm: SentencePiece vocabs. A forged vocab with segmentations derived by hand from
llama.cpp's SPM loop, and Gemma 3 (a real SPM vocab with 262k tokens, the optional `gemma`
extra) against tests/data/vocab_gemma3_llamacpp.json."""
from __future__ import annotations

import pytest

from specnb.errors import VocabError
from specnb.vocab import Vocab
from vocab_cases import gemma_path, llamacpp_cases, spm_meta


# ============================================================== a forged SPM vocab

@pytest.fixture(scope="module")
def spm():
    return Vocab.from_metadata(spm_meta())


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
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.ggml.add_space_prefix": False,
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
    meta = spm_meta()
    meta["tokenizer.ggml.tokens"] = list(meta["tokenizer.ggml.tokens"])
    meta["tokenizer.ggml.tokens"][3 + 0x78] = "<unused-x>"    # drop <0x78>
    v = Vocab.from_metadata(meta)
    with pytest.raises(VocabError, match="0x78"):
        v.tokenize("x")



# ============================================================== Gemma 3 (optional extra)


@pytest.mark.slow
def test_gemma3_matches_llamacpp():
    cases = llamacpp_cases("vocab_gemma3_llamacpp.json")
    v = Vocab.from_gguf(gemma_path())
    assert v.type == "spm" and v.n_vocab == 262144 and v.add_bos
    bad = [c["text"] for c in cases
           if v.tokenize(c["text"], parse_special=c["parse_special"]) != c["ids"]]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp, e.g. {bad[:3]!r}"
