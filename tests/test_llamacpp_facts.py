"""specnb against facts printed by llama.cpp (tests/data, see its README): greedy continuations
and perplexity of the default model."""
import json
import os

import pytest

from specnb.run.context import Context
from specnb.run.generate import generate
from specnb.run.sampling import Sampler, SamplerParams
from teacher_forced import assert_greedy_steps_match

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.mark.slow
def test_greedy_steps_match_llamacpp(default_model):
    """Teacher-forced on llama.cpp's own continuation: at every step where llama.cpp's top-1
    leads by a clear margin, specnb's argmax is the same token; near ties may differ."""
    d = json.load(open(os.path.join(DATA, "llamacpp_greedy_smollm2.json")))
    assert_greedy_steps_match(default_model, d["cases"], min_clear=40)


@pytest.mark.slow
def test_greedy_generation_starts_like_llamacpp(default_model):
    ctx = Context(default_model, n_ctx=256)
    d = json.load(open(os.path.join(DATA, "llamacpp_greedy_smollm2.json")))
    case = d["cases"][2]        # "Once upon a time": its smallest top-2 gap is still 0.10
    got = generate(ctx, Sampler(SamplerParams(temp=0.0)), case["prompt_ids"], 32).tokens
    assert got == case["generated_ids"]


@pytest.mark.slow
def test_perplexity_within_2_percent_of_llamacpp(default_model):
    from specnb.run.perplexity import perplexity
    ref = json.load(open(os.path.join(DATA, "llamacpp_perplexity_smollm2.json")))
    text = open(os.path.join(DATA, "ppl_text.txt"), encoding="utf-8").read()
    r = perplexity(default_model, text, n_ctx=ref["n_ctx"], max_chunks=4)
    assert r["n_scored"] == 4 * ref["tokens_scored_per_chunk"]
    want = ref["chunk_ppl_running"][3]
    assert abs(r["ppl"] - want) / want < 0.02, (r["ppl"], want)
