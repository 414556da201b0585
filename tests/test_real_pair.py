"""The real pair (Qwen2.5-Coder 1.5B target, 0.5B draft) against facts printed by llama.cpp
(tests/data, see its README): tokenizer ids, greedy steps teacher-forced, perplexity; and
speculative output identical to plain decoding, greedy and sampled, for several draft-max.

Marked slow: about two minutes on a 2-core CPU once the kernels are compiled.
"""
import json
import os

import pytest

from specnb.run.context import Context
from specnb.speculation.params import SpecParams
from specnb.speculation.loop import SpeculativeLoop
from specnb.run.generate import generate
from specnb.run.sampling import Sampler, SamplerParams
from teacher_forced import assert_greedy_steps_match

DATA = os.path.join(os.path.dirname(__file__), "data")
pytestmark = pytest.mark.slow


def _facts(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def test_qwen_tokenizer_matches_llamacpp(qwen_target, qwen_draft):
    """Every string llama-tokenize split with the Qwen vocab (special tokens such as
    <|im_start|> and <|fim_prefix|>, code, CJK, digits one by one): same ids, same pieces."""
    d = _facts("llamacpp_tokenize_qwen2.5-coder.json")
    assert d["model"].split("sha256 ")[1].split(";")[0] == \
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    v = qwen_target.vocab
    bad = []
    for c in d["cases"]:
        ids = v.tokenize(c["text"], add_special=True, parse_special=True)
        if ids != c["ids"]:
            bad.append((c["text"][:50], ids[:10], c["ids"][:10]))
            continue
        assert [v.token_to_piece(i, special=True).hex() for i in ids] == c["pieces_hex"], c["text"]
    assert not bad, f"{len(bad)} of {len(d['cases'])} differ from llama.cpp: {bad[:4]}"
    assert len(d["cases"]) >= 60
    digits = next(c for c in d["cases"] if c["text"] == "12345678901234567890")
    assert len(digits["ids"]) == 20                       # Qwen splits digits one by one
    # the draft's vocab is the same table
    some = d["cases"][-1]
    assert qwen_draft.vocab.tokenize(some["text"], add_special=True, parse_special=True) == some["ids"]


def test_the_pair_passes_the_vocab_gate(qwen_target, qwen_draft):
    from specnb.vocab.gate import are_compatible
    rep = are_compatible(qwen_target, qwen_draft)
    assert rep.ok, str(rep)


@pytest.mark.parametrize("name", ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"])
def test_qwen_greedy_steps_match_llamacpp(name, request):
    """Teacher-forced on llama.cpp's own continuation: at every step where llama.cpp's top-1
    leads by a clear margin, specnb's argmax is the same token."""
    model = request.getfixturevalue("qwen_target" if name.endswith("1.5b") else "qwen_draft")
    cases = _facts("llamacpp_greedy_qwen2.5-coder.json")["models"][name]["cases"]
    assert_greedy_steps_match(model, cases, min_clear=80)


def test_qwen_greedy_generation_like_llamacpp(qwen_target):
    # the fill-in-the-middle case: every step leads by more than 1 logit, 16 tokens then EOG
    case = _facts("llamacpp_greedy_qwen2.5-coder.json")["models"]["qwen2.5-coder-1.5b"]["cases"][4]
    assert case["prompt"].startswith("<|fim_prefix|>") and case["min_top1_top2_logit_gap"] > 1
    r = generate(Context(qwen_target, n_ctx=128), Sampler(SamplerParams(temp=0.0)),
                 case["prompt_ids"], 32)
    assert r.tokens == case["generated_ids"]
    assert r.stop_reason == "eog"


def test_qwen_perplexity_within_2_percent_of_llamacpp(qwen_target):
    from specnb.run.perplexity import perplexity
    ref = _facts("llamacpp_perplexity_qwen2.5-coder-1.5b.json")["runs"]["256"]
    with open(os.path.join(DATA, "ppl_text.txt"), encoding="utf-8") as f:
        text = f.read()
    r = perplexity(qwen_target, text, n_ctx=256, max_chunks=2)
    assert r["n_scored"] == 2 * ref["tokens_scored_per_chunk"]
    want = ref["chunk_ppl_running"][1]
    assert abs(r["ppl"] - want) / want < 0.02, (r["ppl"], want)


SAMPLERS = {"greedy": SamplerParams(temp=0.0, seed=1),
            "sampled": SamplerParams(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)}


@pytest.mark.parametrize("sampling", list(SAMPLERS))
def test_real_pair_speculative_is_plain_decoding(qwen_target, qwen_draft, sampling):
    """Bit-identical output whatever the draft proposes: the target decides every token."""
    sp = SAMPLERS[sampling]
    prompt = qwen_target.vocab.tokenize(
        "def binary_search(items, x):\n    \"\"\"Return the index of x in the sorted list items.\"\"\"\n")
    ct, cd = Context(qwen_target, n_ctx=256), Context(qwen_draft, n_ctx=256)
    plain = generate(ct, Sampler(sp, qwen_target.n_vocab), prompt, 24).tokens
    accepted = 0
    for n_max in (1, 3, 6):
        loop = SpeculativeLoop(ct, cd, prompt, 24, sp, SpecParams(n_max=n_max))
        r = loop.run()[0]
        assert r.tokens == plain, (sampling, n_max)
        accepted += r.n_accept
    assert accepted > 0          # the draft did propose tokens the target kept
