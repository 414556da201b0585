"""Prompt text as llama.cpp takes it (specnb.vocab.textio): files read as bytes, llama.cpp's UTF-8
decoding, and bytes tokenized with llama.cpp's ids.

Facts: llama-tokenize on files holding exactly the bytes of each case, for SmolLM2 (BPE,
tests/data/llamacpp_tokenize_bytes_smollm2.json) and Gemma 3 (SPM, the optional `gemma` extra,
tests/data/llamacpp_tokenize_bytes_gemma3.json): line ends, BOM, NUL, empty files, Latin-1
bytes, truncated, overlong and surrogate sequences, bytes beyond U+10FFFF (where llama.cpp
aborts: specnb refuses with a ParamError naming the text and the byte offset).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from specnb.app.cli import main
from specnb.errors import ParamError
from specnb.vocab.textio import SourcedBytes, llama_decode, prompt_text, read_text_file, strip_final_newline
from specnb.vocab import Vocab
from specnb.vocab.bpe import bpe_encode_with_surrogates
from vocab_cases import gemma_path, llamacpp_cases, smollm_path, smollm_vocab, spm_meta


# ---- reading files -----------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"a\r\nb", b"\xef\xbb\xbfhi", b"a\x00b", b"", b"caf\xe9\r\n",
                                  b"\r\r\n\n", bytes(range(256))])
def test_read_text_file_gives_the_bytes(tmp_path, data):
    p = tmp_path / "prompt.txt"
    p.write_bytes(data)
    got = read_text_file(p)
    assert got == data and isinstance(got, SourcedBytes) and got.source == str(p)
    # llama.cpp's common -f option drops one final newline, and only one
    assert read_text_file(p, keep_final_newline=False) == (data[:-1] if data.endswith(b"\n") else data)
    assert strip_final_newline(got).source == str(p)


def test_read_text_file_refuses_what_is_not_a_file(tmp_path):
    with pytest.raises(ParamError, match=r"cannot read prompt file '.*': it is a directory"):
        read_text_file(tmp_path)
    with pytest.raises(ParamError, match="No such file"):
        read_text_file(tmp_path / "missing.txt")
    loop = tmp_path / "loop.txt"
    loop.symlink_to(loop)
    with pytest.raises(ParamError, match="symbolic links"):
        read_text_file(loop)
    if os.geteuid() != 0:           # root reads files whatever their mode
        locked = tmp_path / "locked.txt"
        locked.write_text("x")
        locked.chmod(0)
        with pytest.raises(ParamError, match="Permission denied"):
            read_text_file(locked)


def test_prompt_text_gives_back_undecodable_bytes():
    assert prompt_text("héllo") == "héllo"
    # how Python hands over a command-line argument holding b"caf\xe9"
    arg = b"caf\xe9".decode("utf-8", "surrogateescape")
    assert prompt_text(arg) == b"caf\xe9" and prompt_text(arg).source == "-p"
    assert prompt_text("\ud800") == "\ud800"        # not from bytes: the tokenizer's U+FFFD


# ---- llama.cpp's UTF-8 decoding -----------------------------------------------------------------
def _llama_cpts_reference(data: bytes) -> list[int]:
    """unicode_cpts_from_utf8 (src/unicode.cpp, c392e50), byte by byte."""
    out, i, n = [], 0, len(data)
    while i < n:
        b0 = data[i]
        need = 0 if b0 < 0x80 else -1 if b0 < 0xC0 else 1 if b0 < 0xE0 else 2 if b0 < 0xF0 \
            else 3 if b0 < 0xF8 else -1
        conts = data[i + 1:i + 1 + need] if need > 0 else b""
        if need < 0 or len(conts) < need or any(c & 0xC0 != 0x80 for c in conts):
            out.append(0xFFFD)
            i += 1
            continue
        cpt = b0 & (0x7F, 0x1F, 0x0F, 0x07)[need]
        for c in conts:
            cpt = cpt << 6 | c & 0x3F
        out.append(cpt)
        i += 1 + need
    return out


def test_llama_decode_matches_llama_cpp_loop():
    rng = random.Random(19)
    pool = [b"a", b" ", "é".encode(), "€".encode(), "😀".encode(), b"\x80", b"\xc0\x80", b"\xe0\x80\xaf",
            b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xff", b"\xc3", b"\xe2\x82"]
    cases = [bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    cases += [b"".join(rng.choice(pool) for _ in range(rng.randint(1, 20))) for _ in range(300)]
    for data in cases:
        ref = _llama_cpts_reference(data)
        if any(c > 0x10FFFF for c in ref):
            with pytest.raises(ParamError, match="byte offset"):
                llama_decode(data)
        else:
            assert [ord(c) for c in llama_decode(data)] == ref, data


def test_beyond_unicode_names_the_file_and_offset():
    data = SourcedBytes(b"ok \xf4\x90\x80\x80", "notes.txt")
    with pytest.raises(ParamError, match=r"notes.txt: byte offset 3: f4 90 80 80 decodes to U\+110000"):
        llama_decode(data)


# ---- bytes through the tokenizer ------------------------------------------------------------
def _check_bytes_facts(v: Vocab, cases: list[dict]) -> None:
    bad = []
    for c in cases:
        data = SourcedBytes(bytes.fromhex(c["hex"]), "case.txt")
        if "abort" in c:        # llama.cpp: "terminate called ... invalid codepoint"
            assert "invalid codepoint" in c["abort"]
            with pytest.raises(ParamError, match=r"case.txt: byte offset \d+"):
                v.tokenize(data, parse_special=c["parse_special"])
            continue
        ids = v.tokenize(data, parse_special=c["parse_special"])
        if ids != c["ids"]:
            bad.append((c["name"], data[:30], ids[:10], c["ids"][:10]))
            continue
        # pieces as llama-tokenize printed them (with %s: a piece stops at its first NUL)
        assert [v.token_to_piece(i).split(b"\0")[0].hex() for i in ids] == c["pieces_printed_hex"]
    assert not bad, f"{len(bad)} of {len(cases)} differ from llama.cpp: {bad[:4]}"


@pytest.mark.slow
def test_bytes_match_llamacpp_smollm2():
    cases = llamacpp_cases("llamacpp_tokenize_bytes_smollm2.json")
    assert len(cases) >= 180 and sum("abort" in c for c in cases) == 2
    _check_bytes_facts(smollm_vocab(), cases)


@pytest.mark.slow
def test_bytes_match_llamacpp_gemma3():
    cases = llamacpp_cases("llamacpp_tokenize_bytes_gemma3.json")
    _check_bytes_facts(Vocab.from_gguf(gemma_path()), cases)


def test_spm_bytes_cut_by_lead_bytes():
    """llama.cpp's SPM session takes as many bytes as a lead byte announces: an invalid 0xE9
    swallows the two bytes after it (here a space's U+2581) into one byte-token symbol."""
    v = Vocab.from_metadata(spm_meta())
    byte = lambda b: v.text_to_token(f"<0x{b:02X}>")     # noqa: E731
    hello = v.text_to_token("▁hello")
    assert v.tokenize(b"\xe9 hello", add_special=False) == \
        [v.text_to_token("▁")] + [byte(0xE9), byte(0xE2), byte(0x96), byte(0x81)] + \
        [v.text_to_token("hello")]          # no "▁hello": that space went with 0xE9
    assert v.tokenize(b"hello \xc3", add_special=False) == [hello] + [v.text_to_token("▁")] + \
        [byte(0xC3)]
    # valid UTF-8 bytes are the text they spell
    assert v.tokenize("hé abc".encode()) == v.tokenize("hé abc")


@pytest.mark.slow
def test_surrogate_path_equals_the_fast_path():
    """The stand-in split for texts with lone surrogates gives `tokenizers`' own ids on texts
    without any (it only differs where a surrogate's bytes are put back)."""
    v = smollm_vocab()
    rng = random.Random(5)
    pool = list("ab1 \n\t'sé你😀") + ["<|im_end|>", "  ", "\ue000", "\u0301"]
    for _ in range(300):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(1, 30)))
        assert bpe_encode_with_surrogates(v._tokenizer, text) == \
            v._tokenizer.encode(text, add_special_tokens=False).ids, text


# ---- the commands ----------------------------------------------------------------------------
def _facts_by_name(name: str) -> dict:
    return {c["name"]: c for c in llamacpp_cases(name) if c["parse_special"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["CRLF", "UTF-8 BOM", "NUL inside", "empty", "Latin-1 byte",
                                  "truncated 3-byte", "encoded surrogate", "overlong NUL",
                                  "special tokens around bad bytes"])
def test_tokenize_file_equals_llama_tokenize(tmp_path, capsys, name):
    smollm_path()
    case = _facts_by_name("llamacpp_tokenize_bytes_smollm2.json")[name]
    p = tmp_path / "prompt.txt"
    p.write_bytes(bytes.fromhex(case["hex"]))
    assert main(["tokenize", "-f", str(p), "--ids", "--no-escape"]) == 0      # as llama-tokenize ran
    assert json.loads(capsys.readouterr().out) == case["ids"]


@pytest.mark.slow
def test_tokenize_refusals_are_one_line(tmp_path, capsys):
    smollm_path()
    p = tmp_path / "beyond.txt"
    p.write_bytes(b"x\xf4\x90\x80\x80y")
    for args, msg in [(["-f", str(p)], f"{p}: byte offset 1: f4 90 80 80"),
                      (["-f", str(tmp_path)], "it is a directory")]:
        assert main(["tokenize", *args]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_tokenize_p_with_argument_bytes():
    """A -p argument that is not UTF-8 (bytes straight from the shell) tokenizes as llama.cpp's (its
    escapes processed, as llama-tokenize's default; the case has none)."""
    smollm_path()
    case = _facts_by_name("llamacpp_tokenize_bytes_smollm2.json")["Latin-1 before a space"]
    p = subprocess.run([os.fsencode(sys.executable), b"-m", b"specnb", b"tokenize", b"--ids", b"-p",
                        bytes.fromhex(case["hex"])], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == case["ids"]


def test_generate_speculative_and_perplexity_read_bytes(tmp_path, tiny_path, capsys):
    """Every command reads -f through the same reader: CRLF kept, invalid bytes tokenized,
    one final newline dropped (llama.cpp's common -f), a directory refused (the bytes as they are
    under --no-escape; the text has no backslash, so the default -e reads the same)."""
    from specnb.model import load_model
    m = tiny_path("Q8_0")
    v = load_model(m, vocab_only=True).vocab
    text = b"the cat\r\nsat on caf\xe9 \xc3\r\n" * 8 + b"\n"
    p = tmp_path / "prompt.txt"
    p.write_bytes(text)
    expected = v.tokenize(text[:-1])
    assert len(expected) != len(v.tokenize(text[:-1].decode("latin-1").replace("\r\n", "\n")))
    for escape in ("--no-escape", "-e"):
        assert main(["generate", "-m", m, "-f", str(p), "-n", "1", "--json", escape]) == 0
        assert json.loads(capsys.readouterr().out)["n_prompt"] == len(expected)
        assert main(["speculative-simple", "-m", m, "-md", m, "-f", str(p), "-n", "2", "--json", escape]) == 0
        assert json.loads(capsys.readouterr().out)["n_prompt"] == len(expected)
    assert main(["perplexity", "-m", m, "-f", str(p), "-c", "16", "--chunks", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_tokens"] == \
        len(v.tokenize(text[:-1], add_special=True, parse_special=False))
    for cmd in (["generate", "-m", m], ["speculative-simple", "-m", m, "-md", m],
                ["perplexity", "-m", m], ["tokenize", "-m", m]):
        assert main([*cmd, "-f", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "it is a directory" in err and len(err.strip().splitlines()) == 1, err


def test_chat_keeps_undecodable_bytes(tmp_path, capsys):
    """--chat puts the file's text in a user message; bytes that are not UTF-8 come back out
    of the template as the same bytes."""
    tmpl = "{{ bos_token }}[{{ messages[0]['content'] }}]"
    v = Vocab.from_metadata(spm_meta(**{"tokenizer.chat_template": tmpl}))

    class Args:
        prompt, file, chat, escape = None, str(tmp_path / "p.txt"), True, True
    (tmp_path / "p.txt").write_bytes(b"caf\xe9")
    from specnb.app.cli import _read_prompt
    assert _read_prompt(Args, v) == b"<s>[caf\xe9]"
