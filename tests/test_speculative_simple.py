"""The fifty-line teaching loop gives the same tokens and counters as SpeculativeLoop."""
import pytest

from specnb.run.context import Context
from specnb.speculation.params import SpecParams
from specnb.speculation.loop import SpeculativeLoop
from specnb.run.sampling import Sampler
from specnb.speculation.speculative import build_speculative
from specnb.speculative_simple import speculative_simple
from spec_checks import SAMPLERS, plain, repetitive_prompt

LLAMA_KEYS = ("type", "n_call_begin", "n_call_draft", "n_call_accept", "n_gen_drafts", "n_acc_drafts",
              "n_gen_tokens", "n_acc_tokens", "n_acc_tokens_per_pos", "n_eval")


@pytest.mark.parametrize("types,n_max,name,tgt_rm,dft_rm", [
    ("draft-simple", 3, "greedy", True, True),
    ("draft-simple", 5, "temp0.8-topk40", False, True),
    ("draft-simple", 4, "repeat1.1", True, False),
    ("draft-simple", 2, "min-p0.05", False, False),
    ("ngram-simple", 4, "greedy", True, True),
    ("ngram-map-k", 3, "greedy", False, True),
    ("ngram-cache", 6, "temp0.8-topk40", True, True),
    ("ngram-simple,draft-simple", 3, "greedy", False, False),
    ("draft-simple,ngram-cache,ngram-map-k", 4, "repeat1.1", True, True),
])
def test_teaching_loop_equals_speculative_loop(tied_pair, types, n_max, name, tgt_rm, dft_rm, tmp_path):
    tgt, dft = tied_pair
    sp = SAMPLERS[name].replace(seed=3)
    spec = SpecParams(types=types, n_max=n_max, ngram_size_n=1, ngram_size_m=8)
    prompt = repetitive_prompt(tgt, 4)
    if types == "ngram-cache":
        # master's context cache learns from generated tokens only in rounds that accept something
        # (its update sees the new tokens alone, common/speculative.cpp:2073-2087 @34af94cd), and
        # its drafts from this prompt are all rejected; so, as examples/lookup's -lcd, a dynamic
        # cache of an earlier generation of this prompt
        from specnb.speculation.ngram_cache import cache_save, cache_update
        earlier = prompt + plain(tgt, prompt, sp, 40, penalize_prompt=False)
        c = {}
        cache_update(c, 1, 4, earlier, len(earlier))
        cache_save(c, tmp_path / "dyn.bin", master_order=True)
        spec = spec.replace(lookup_cache_dynamic=str(tmp_path / "dyn.bin"))
    draft_model = "draft-simple" in types

    def contexts():
        return (Context(tgt, n_ctx=128, partial_seq_rm=tgt_rm),
                Context(dft, n_ctx=128, partial_seq_rm=dft_rm) if draft_model else None)
    ct, cd = contexts()
    # speculative-simple does not put the prompt into the penalty window
    loop = SpeculativeLoop(ct, cd, prompt, 40, sp, spec, penalize_prompt=False)
    loop.run()
    ct, cd = contexts()
    out = speculative_simple(ct, build_speculative(spec, tgt, cd, n_seq=1), Sampler(sp), prompt, 40)
    assert out["tokens"] == loop.results()[0].tokens == plain(tgt, prompt, sp, 40, penalize_prompt=False)
    assert (out["n_drafted"], out["n_accept"]) == (loop.n_drafted_simple, loop.n_accept_simple)
    assert [{k: s[k] for k in LLAMA_KEYS} for s in out["stats"]] == \
        [{k: s[k] for k in LLAMA_KEYS} for s in loop.chain.stats()]
    assert out["n_accept"] > 0


@pytest.mark.parametrize("types", ["draft-simple", "ngram-simple"])
def test_prompt_in_the_penalty_window_only_when_asked(tied_pair, types):
    """llama-speculative-simple feeds its sampler no prompt token; llama-cli's common_sampler_accept
    of the prompt is the opt-in. Both loops give plain decoding's tokens in each setting, and the
    setting matters here (a strong repeat penalty over a repetitive prompt)."""
    from specnb.run.sampling import SamplerParams
    tgt, dft = tied_pair
    sp = SamplerParams(temp=0.0, penalty_repeat=1.5, penalty_last_n=64)
    spec = SpecParams(types=types, n_max=3, ngram_size_n=1, ngram_size_m=8)
    prompt = repetitive_prompt(tgt, 4)
    got = {}
    for penalize in (False, True):
        cd = Context(dft, n_ctx=128) if types == "draft-simple" else None
        loop = SpeculativeLoop(Context(tgt, n_ctx=128), cd, prompt, 24, sp, spec, penalize_prompt=penalize)
        loop.run()
        cd = Context(dft, n_ctx=128) if types == "draft-simple" else None
        out = speculative_simple(Context(tgt, n_ctx=128), build_speculative(spec, tgt, cd, n_seq=1),
                                 Sampler(sp), prompt, 24, penalize_prompt=penalize)
        want = plain(tgt, prompt, sp, 24, penalize_prompt=penalize)
        assert out["tokens"] == loop.results()[0].tokens == want, penalize
        got[penalize] = want
    assert got[False] != got[True]


def test_teaching_loop_is_about_fifty_lines():
    import inspect
    src = inspect.getsource(speculative_simple).splitlines()
    body = [line for line in src if line.strip() and not line.strip().startswith("#")]
    assert len(body) <= 65
