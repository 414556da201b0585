"""SpeculativeLoop: losslessness for every speculator type and memory, the round invariants,
the chain at work, and the counters as llama.cpp counts them."""
import itertools
import warnings

import pytest

from specnb import ParamError
from specnb.run.context import Context
from specnb.speculation.params import SpecParams
from specnb.speculation.loop import SpeculativeLoop
from specnb.run.sampling import Sampler, SamplerParams
from spec_checks import SAMPLERS, check_invariants, plain, prompts, repetitive_prompt

TYPES = ["draft-simple", "ngram-simple", "ngram-map-k", "ngram-cache", "ngram-simple,draft-simple",
         "draft-simple,ngram-map-k,ngram-cache", "ngram-mod,ngram-map-k4v,draft-simple"]
# one-token keys: the tiny models repeat short loops (ngram-mod: hashed 2-grams, drafts of 1..8)
NGRAM = dict(ngram_size_n=1, ngram_size_m=8, ngram_mod_n_match=2, ngram_mod_n_min=1, ngram_mod_n_max=8)


def _loop(tgt, dft, prompt, n, sp, spec, tgt_rm=True, dft_rm=True, n_ctx=128, n_seq=1, **kw):
    needs_draft = spec.needs_draft_model()
    ct = Context(tgt, n_ctx=n_ctx, n_seq_max=n_seq, partial_seq_rm=tgt_rm)
    cd = Context(dft, n_ctx=n_ctx, n_seq_max=n_seq, partial_seq_rm=dft_rm) if needs_draft else None
    return SpeculativeLoop(ct, cd, prompt, n, sp, spec, **kw)


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("n_max,p_min", [(1, 0.0), (3, 0.0), (8, 0.0), (3, 0.5), (8, 0.5)])
@pytest.mark.parametrize("seq_rm", [True, False])
def test_lossless_tiny(pair, name, n_max, p_min, seq_rm):
    tgt, dft = pair
    for seed in (1, 2):
        sp = SAMPLERS[name].replace(seed=seed)
        prompt = prompts(tgt, 1, seed)[0]
        expect = plain(tgt, prompt, sp, 24)
        loop = _loop(tgt, dft, prompt, 24, sp, SpecParams(n_max=n_max, p_min=p_min), tgt_rm=seq_rm)
        events = list(loop.rounds())
        assert loop.results()[0].tokens == expect, (name, seed, n_max, p_min, seq_rm)
        check_invariants(loop, events)
        if not seq_rm:
            assert loop.n_drafted == 0 or any(r.checkpoint for ev in events for r in ev.slots) \
                or loop.n_accept == loop.n_drafted


def _dynamic_cache(path, tokens) -> str:
    """A lookup-cache file (-lcd) of the n-grams of tokens, as examples/lookup saves one."""
    from specnb.speculation.ngram_cache import cache_save, cache_update
    c = {}
    cache_update(c, 1, 4, list(tokens), len(tokens))
    cache_save(c, path, master_order=True)
    return str(path)


def _memories(types_list):
    """(types, target removable, draft removable): all four memory pairs where there is a draft."""
    return [(t, a, b) for t in types_list for a, b in itertools.product([True, False], repeat=2)
            if b or "draft-simple" in t]


@pytest.mark.parametrize("types,tgt_rm,dft_rm", _memories(TYPES))
@pytest.mark.parametrize("name", ["greedy", "temp0.8-topk40", "repeat1.1"])
@pytest.mark.filterwarnings("ignore:ngram_mod n_match")
def test_lossless_every_type_and_memory(pair, types, tgt_rm, dft_rm, name, tmp_path):
    """Every speculator type and combination, on all four memory combinations (the target's and
    the draft's memory removable or not), greedy and sampled, several draft-max."""
    tgt, dft = pair
    n_accept = 0
    for seed, n_max in ((1, 2), (2, 5)):
        sp = SAMPLERS[name].replace(seed=seed)
        prompt = repetitive_prompt(tgt, seed)
        expect = plain(tgt, prompt, sp, 32)
        extra = {}
        if types == "ngram-cache":
            # master's context cache learns from the generated tokens only in rounds that accept
            # something (its update sees the new tokens alone, common/speculative.cpp:2073-2087
            # @34af94cd), and on this pair its drafts from the prompt are all rejected; so, as
            # examples/lookup's -lcd, a dynamic cache of an earlier generation of this prompt
            extra["lookup_cache_dynamic"] = _dynamic_cache(tmp_path / f"dyn{seed}.bin", prompt + expect)
        loop = _loop(tgt, dft, prompt, 32, sp, SpecParams(types=types, n_max=n_max, **NGRAM, **extra),
                     tgt_rm=tgt_rm, dft_rm=dft_rm)
        events = list(loop.rounds())
        assert loop.results()[0].tokens == expect, (types, tgt_rm, dft_rm, name, seed, n_max)
        check_invariants(loop, events)
        drafted = {r.impl for ev in events for r in ev.slots if r.impl}
        assert drafted <= set(types.split(","))
        n_accept += loop.n_accept
    if name == "greedy":
        assert n_accept > 0, "the test means something only if drafts get accepted"


@pytest.mark.parametrize("types,tgt_rm,dft_rm", _memories(["draft-simple", "ngram-simple,draft-simple",
                                                             "ngram-cache"]))
@pytest.mark.parametrize("reeval", [True, False])
def test_lossless_several_sequences(pair, types, tgt_rm, dft_rm, reeval):
    tgt, dft = pair
    ps = [repetitive_prompt(tgt, 5), prompts(tgt, 1, 6)[0], repetitive_prompt(tgt, 7, 16)]
    sps = [SAMPLERS["greedy"], SAMPLERS["temp0.8-topk40"].replace(seed=3),
           SAMPLERS["min-p0.05"].replace(seed=4)]
    expect = [plain(tgt, p, sp, 20) for p, sp in zip(ps, sps)]
    loop = _loop(tgt, dft, ps, 20, sps, SpecParams(types=types, n_max=4, reeval=reeval, **NGRAM),
                 tgt_rm=tgt_rm, dft_rm=dft_rm, n_seq=3)
    events = list(loop.rounds())
    assert [r.tokens for r in loop.results()] == expect
    check_invariants(loop, events)
    assert loop.ctx_tgt.n_decode == 1 + len(events), "all slots verified in one target batch per round"


def test_draft_memory_without_partial_removal(pair):
    """A draft context that cannot drop part of a sequence (recurrent-style memory) is restored
    from its checkpoint; the draft model's work shows in n_eval, the output equals plain."""
    tgt, dft = pair
    prompt = prompts(tgt, 1, 3)[0]
    sp = SAMPLERS["greedy"]
    expect = plain(tgt, prompt, sp, 40)
    out = {}
    for dft_rm in (True, False):
        loop = _loop(tgt, dft, prompt, 40, sp, SpecParams(n_max=4), dft_rm=dft_rm)
        events = list(loop.rounds())
        out[dft_rm] = [(len(ev.slot.draft), ev.slot.n_accepted) for ev in events]
        assert loop.results()[0].tokens == expect
        check_invariants(loop, events)
        assert any(r.n_accepted < len(r.draft) for ev in events for r in ev.slots), \
            "needs a partial acceptance, which leaves rows the draft memory cannot drop"
    assert out[True] == out[False], "same drafts and acceptances whatever the draft memory"


def test_reeval_fix_same_output_fewer_draft_evaluations(pair):
    tgt, dft = pair
    prompt = prompts(tgt, 1, 9)[0]
    out, evals = {}, {}
    for reeval in (True, False):
        loop = _loop(tgt, dft, prompt, 40, SAMPLERS["greedy"], SpecParams(n_max=4, reeval=reeval))
        events = list(loop.rounds())
        out[reeval] = loop.results()[0].tokens
        evals[reeval] = [(ev.n_dft_eval, len(ev.slot.draft)) for ev in events]
        # draft() decodes the seed and all but the last draft token; process() the rest
        for n_eval, d in evals[reeval]:
            assert n_eval <= (2 * (1 + d) if reeval else 1 + d)
    assert out[True] == out[False]
    assert sum(e for e, _ in evals[False]) < sum(e for e, _ in evals[True])


def test_tiny_pair_both_accepts_and_rejects(pair):
    """The losslessness tests mean something only if drafts are both kept and thrown away."""
    tgt, dft = pair
    for sp in (SAMPLERS["greedy"], SAMPLERS["temp0.8-topk40"].replace(seed=1)):
        loop = _loop(tgt, dft, [5, 6, 7, 8, 9, 10], 100, sp, SpecParams(n_max=3), n_ctx=256)
        loop.run()
        assert 0 < loop.n_accept < loop.n_drafted


def test_n_min_discards_short_drafts(pair):
    tgt, dft = pair
    loop = _loop(tgt, dft, prompts(tgt, 1, 4)[0], 16, SAMPLERS["greedy"],
                 SpecParams(n_max=3, n_min=3, p_min=0.9))
    for ev in loop.rounds():
        assert len(ev.slot.draft) in (0, 3)


# ---- the chain at work --------------------------------------------------------------------
def test_chain_ngram_first_then_draft_model(pair):
    """ngram-simple,draft-simple: some rounds drafted by the lookup, the rest by the draft model,
    each counted in its own statistics; the typed order does not matter."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 1)
    runs = {}
    for types in ("ngram-simple,draft-simple", "draft-simple,ngram-simple"):
        loop = _loop(tgt, dft, prompt, 40, SAMPLERS["greedy"], SpecParams(types=types, n_max=3, **NGRAM))
        events = list(loop.rounds())
        assert loop.chain.types == ["ngram-simple", "draft-simple"]
        by = [r.impl for ev in events for r in ev.slots]
        runs[types] = (loop.results()[0].tokens, by)
        st = {s["type"]: s for s in loop.chain.stats()}
        for t in ("ngram-simple", "draft-simple"):
            assert st[t]["n_gen_drafts"] == by.count(t) > 0
            assert st[t]["n_gen_tokens"] == sum(len(r.draft) for ev in events for r in ev.slots
                                                if r.impl == t)
        # the lookup runs first whenever the chain is asked; the draft model only where it failed
        assert st["draft-simple"]["n_call_draft"] == st["ngram-simple"]["n_call_draft"] - by.count("ngram-simple")
        history = prompt + loop.results()[0].tokens
        for ev in events:
            for r in ev.slots:
                if r.impl == "ngram-simple":
                    for i in r.draft_info:
                        assert i.source == "ngram-simple" and len(i.ngram) == 1
                        assert history[i.match_pos:i.match_pos + 1] == i.ngram
                        assert i.ngram[-1] == r.id_last
    assert runs["ngram-simple,draft-simple"] == runs["draft-simple,ngram-simple"]


def test_ngram_types_need_no_draft_model(pair):
    tgt, dft = pair
    # (f32: in that mode the tiny target's greedy text repeats the prompt, so the lookups hit;
    # seed 3: on seed 1 master's ngram-map-k, which keeps drafting a key from where it first
    # found it and only as long as its last draft was accepted (ngram-map.cpp:259-277, 386
    # @34af94cd), has every draft rejected and then drafts nothing)
    prompt = repetitive_prompt(tgt, 3)
    loop = SpeculativeLoop(Context(tgt, n_ctx=128, activations="f32"), None, prompt, 24, SAMPLERS["greedy"],
                           SpecParams(types="ngram-map-k", n_max=4, **NGRAM))
    events = list(loop.rounds())
    assert loop.results()[0].tokens == plain(tgt, prompt, SAMPLERS["greedy"], 24, activations="f32")
    assert loop.n_accept > 0 and all(ev.n_dft_eval == 0 for ev in events)
    with pytest.raises(ParamError, match="draft-simple.*draft model"):
        SpeculativeLoop(Context(tgt, n_ctx=64), None, prompt, 4, SAMPLERS["greedy"],
                        SpecParams(types="draft-simple"))
    # no type and no draft model: no speculation, one token per round
    loop = SpeculativeLoop(Context(tgt, n_ctx=64), None, prompt, 5, SAMPLERS["greedy"])
    assert loop.chain.impls == [] and len(list(loop.rounds())) == 5
    # a draft model with --spec-type none: speculation off, as llama-server's default
    loop = _loop(tgt, dft, prompt, 5, SAMPLERS["greedy"], SpecParams(types="none"))
    assert loop.chain.impls == [] and loop.run()[0].tokens == plain(tgt, prompt, SAMPLERS["greedy"], 5)


# ---- counters as llama.cpp counts them ------------------------------------------------------
def test_acc_rate_per_pos_divides_by_accept_calls(pair):
    """common_speculative_print_stats: #acc rate/pos = n_acc_tokens_per_pos / n_call_accept, and
    impl_last is kept, so rounds that drafted nothing (p_min) still count an accept call."""
    tgt, dft = pair
    loop = _loop(tgt, dft, prompts(tgt, 1, 3)[0], 40, SAMPLERS["greedy"], SpecParams(n_max=5, p_min=0.6))
    events = list(loop.rounds())
    st = loop.chain.stats()[0]
    first = next(i for i, ev in enumerate(events) if ev.slot.draft)
    assert st["n_call_accept"] == len(events) - first > st["n_gen_drafts"], \
        "needs rounds without a draft after the first draft"
    assert st["acc_rate_per_pos"] == pytest.approx([n / st["n_call_accept"]
                                                    for n in st["n_acc_tokens_per_pos"]])
    assert st["mean_acc_len"] == pytest.approx(1 + st["n_acc_tokens"] / st["n_call_accept"])
    longest = max(ev.slot.n_accepted for ev in events)
    assert len(st["acc_rate_per_pos"]) == longest, "as long as the longest accepted run"
    # specnb's breakdown: per draft, over n_max positions
    n = st["n_gen_drafts"]
    assert st["specnb_acc_rate_per_pos"] == pytest.approx(
        [sum(ev.slot.n_accepted > i for ev in events if ev.slot.draft) / n for i in range(5)])


def test_checkpoint_path_counted_as_llama_cpp(pair):
    """speculative-simple: no accept() on the restored round, accept(a + 1) on its replay, and its
    summary counts the replay's a + 1 tokens as drafted and accepted."""
    tgt, dft = pair
    loop = _loop(tgt, dft, prompts(tgt, 1, 3)[0], 40, SAMPLERS["greedy"], SpecParams(n_max=4), tgt_rm=False)
    events = list(loop.rounds())
    recs = [r for ev in events for r in ev.slots]
    restored = [i for i, r in enumerate(recs) if r.checkpoint == "restored"]
    assert restored
    st = loop.chain.stats()[0]
    committed = [r for r in recs if r.checkpoint != "restored"]
    assert st["n_call_accept"] == len(committed)
    assert st["n_acc_tokens"] == sum(r.n_accepted for r in committed) == loop.n_accept
    for i in restored:
        a = recs[i].n_accepted
        assert recs[i + 1].replay and recs[i + 1].n_accepted == a + 1
    assert loop.n_drafted_simple == sum(len(r.draft) for r in committed)
    assert loop.n_accept_simple == st["n_acc_tokens"]
    assert st["specnb_n_acc_tokens"] == sum(r.n_accepted for r in recs if not r.replay)
    assert "n_drafted = %d" % loop.n_drafted_simple in loop.summary()
    assert "--stop master prints its counts" in loop.summary()


# ---- the prompt in the penalty window -------------------------------------------------------
def test_prompt_in_the_penalty_window(tied_pair):
    """As llama-cli and llama-server: with a repeat penalty the prompt's tokens are penalized.
    Plain and speculative still agree; the first token differs from the run without them."""
    tgt, dft = tied_pair
    sp = SamplerParams(temp=0.0, penalty_repeat=1.5, penalty_present=0.5, penalty_last_n=64)
    first_diff = 0
    for seed in range(6):
        prompt = prompts(tgt, 1, 40 + seed, length=8)[0]
        with_p = plain(tgt, prompt, sp, 12)
        without = plain(tgt, prompt, sp, 12, penalize_prompt=False)
        for penalize in (True, False):
            loop = _loop(tgt, dft, prompt, 12, sp, SpecParams(n_max=3), penalize_prompt=penalize)
            assert loop.run()[0].tokens == (with_p if penalize else without)
        # the window holds the prompt: the greedy pick is the argmax of the penalized logits
        s = Sampler(sp)
        for t in prompt:
            s.accept(t)
        assert sorted(s.prev) == sorted(prompt)
        first_diff += with_p[0] != without[0]
    assert first_diff > 0, "on some prompt the penalized prompt changes the first token"


def test_statistics_consistent(pair):
    tgt, dft = pair
    loop = _loop(tgt, dft, prompts(tgt, 1, 3)[0], 40, SAMPLERS["greedy"], SpecParams(n_max=5))
    loop.run()
    st = loop.chain.stats()[0]
    r = loop.results()[0]
    assert st["n_acc_tokens"] == loop.n_accept <= loop.n_drafted == st["n_gen_tokens"]
    rates = st["acc_rate_per_pos"]
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert sum(r.accepted) == st["specnb_n_acc_tokens"] or r.stop_reason != "n_predict"


def test_bad_spec_params(pair):
    tgt, dft = pair
    for kw, name in ((dict(n_max=-1), "draft_max"), (dict(n_min=-1), "draft_min"),
                     (dict(p_min="x"), "draft_p_min"), (dict(verify="magic"), "verify"),
                     (dict(types="ngram-fancy"), "ngram-fancy"), (dict(types=""), "spec type"),
                     (dict(ngram_size_n=0), "ngram_size_n"),
                     (dict(synth_rates=[0.5, 0.4]), "must contain 3 values")):
        with pytest.raises(ParamError, match=name):
            _loop(tgt, dft, [5, 6], 4, SAMPLERS["greedy"], SpecParams(**kw))


def test_synthetic_acceptance_follows_rates(pair):
    tgt, dft = pair
    rates = [0.8, 0.6, 0.3]
    with pytest.warns(UserWarning, match="not valid text"):
        loop = _loop(tgt, dft, prompts(tgt, 1, 1)[0], 400, SAMPLERS["greedy"],
                     SpecParams(n_max=3, synth_rates=rates, synth_seed=3), n_ctx=512)
    loop.run()
    st = loop.chain.stats()[0]
    got = st["specnb_acc_rate_per_pos"]
    assert st["n_gen_drafts"] > 80
    for g, r in zip(got, rates):
        assert abs(g - r) < 0.15, (got, rates)


def test_rejection_mode_end_to_end(pair):
    tgt, dft = pair
    for types in ("draft-simple", "ngram-simple,draft-simple"):
        loop = _loop(tgt, dft, repetitive_prompt(tgt, 3), 40,
                     SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3),
                     SpecParams(types=types, n_max=4, verify="rejection", **NGRAM), draft_seed=3)
        events = list(loop.rounds())
        check_invariants(loop, events)
        assert 0 < loop.n_accept < loop.n_drafted
        assert len(loop.results()[0].tokens) == 40 or loop.results()[0].stop_reason == "eog"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["greedy", "temp0.8-topk40", "repeat1.1"])
def test_lossless_default_pair(default_model, default_draft_model, name):
    tgt, dft = default_model, default_draft_model
    texts = ["The capital of France is", "def fibonacci(n):"]
    for text, (n_max, seq_rm, types) in zip(texts, [(3, True, None), (8, False, "ngram-simple,draft-simple")]):
        ids = tgt.vocab.tokenize(text)
        sp = SAMPLERS[name].replace(seed=7)
        expect = plain(tgt, ids, sp, 32, n_ctx=256)
        with warnings.catch_warnings():
            loop = _loop(tgt, dft, ids, 32, sp, SpecParams(types=types, n_max=n_max, reeval=seq_rm,
                                                           ngram_size_n=3), tgt_rm=seq_rm,
                         dft_rm=seq_rm, n_ctx=256)
        events = list(loop.rounds())
        assert loop.results()[0].tokens == expect
        check_invariants(loop, events)
        if name == "greedy":
            assert loop.n_accept > 0


@pytest.mark.slow
def test_penalized_prompt_as_llama_cli(default_model, default_draft_model):
    """llama-cli penalizes the prompt's tokens: with the same penalties, specnb's greedy text
    follows llama-cli's (tests/data/llamacpp_cli_penalties_smollm2.txt) until a near-tie, plain
    and speculative alike; without the prompt in the window the first word differs."""
    import pathlib
    out = pathlib.Path(__file__).parent / "data" / "llamacpp_cli_penalties_smollm2.txt"
    prompt = "The best way to learn a new language is"
    llama = out.read_text().split("## stdout (verbatim, the prompt then the continuation)\n")[1]
    llama = llama[len(prompt):]
    sp = SamplerParams(temp=0.0, penalty_repeat=1.3, penalty_present=0.4, penalty_freq=0.2,
                       penalty_last_n=64)
    ids = default_model.vocab.tokenize(prompt)
    text = default_model.vocab.detokenize(plain(default_model, ids, sp, 24))
    # the two agree up to a near-tie ("practice it" / "practicing": f32 and llama.cpp's q8
    # activations resolve it differently), about 49 characters in
    assert text[:46] == llama[:46] == " by immersing yourself in the culture and prac"
    loop = _loop(default_model, default_draft_model, ids, 24, sp, SpecParams(n_max=3))
    assert default_model.vocab.detokenize(loop.run()[0].tokens) == text
    without = default_model.vocab.detokenize(plain(default_model, ids, sp, 4, penalize_prompt=False))
    assert not without.startswith(" by")


# ---- the stop rule ------------------------------------------------------------------------------
@pytest.mark.parametrize("types", ["draft-simple", "ngram-simple,draft-simple"])
@pytest.mark.parametrize("seq_rm", [True, False])
def test_master_stop_rule(pair, types, seq_rm):
    """stop_rule="master", as speculative-simple.cpp @34af94cd: each round's draft cut to the budget
    N - n_predict - 1 (:180-184), a budget of 0 capping nothing (`dp.n_max > 0`,
    common/speculative.cpp:350, 2659), the loop running while n_predict <= N (:339): at least
    N + 1 tokens (the last, uncapped draft can add up to n_max more), the first N those of
    stop_rule="exact", all of them those of plain decoding, and the counters summed over the
    committed rounds (:294-297)."""
    tgt, dft = pair
    sp = SamplerParams(temp=0.0)
    prompt = repetitive_prompt(tgt)
    n, n_max = 13, 3
    spec = SpecParams(types=types, n_max=n_max, **NGRAM)
    exact = _loop(tgt, dft, prompt, n, sp, spec, tgt_rm=seq_rm, dft_rm=seq_rm)
    exact.run()
    loop = _loop(tgt, dft, prompt, n, sp, spec, tgt_rm=seq_rm, dft_rm=seq_rm, stop_rule="master")
    events = list(loop.rounds())
    check_invariants(loop, events)
    toks = loop.slots[0].generated
    assert n + 1 <= len(toks) and toks[:n] == exact.slots[0].generated
    assert toks == plain(tgt, prompt, sp, len(toks))
    committed, gen = [], 0
    for ev in events:
        r = ev.slots[0]
        if not r.replay:                       # the draft's length follows the budget
            budget = n - gen - 1
            longest = n_max if r.impl == "draft-simple" else NGRAM["ngram_size_m"]
            assert len(r.draft) <= (min(longest, budget) if budget > 0 else longest), (gen, r.draft)
        if r.checkpoint != "restored":
            committed.append(r)
            gen += len(r.committed)
    last = events[-1].slots[0]
    assert gen == len(toks) and n - (gen - len(last.committed)) - 1 <= 0   # the last had no budget
    if last.impl == "draft-simple" and not last.replay:
        assert len(last.draft) == n_max       # ... and drafted in full, as master does
    assert loop.n_drafted_simple == sum(len(r.draft) for r in committed)
    assert loop.n_accept_simple == sum(r.n_accepted for r in committed)
    s = loop.summary()
    assert f"n_predict = {len(toks)}\n" in s and "as llama-speculative-simple at 34af94cd" in s
    with pytest.raises(ParamError, match="stop"):
        _loop(tgt, dft, prompt, n, sp, spec, stop_rule="b1234")


# ---- the loop's one seam: the chain -------------------------------------------------------------
def test_the_loop_names_no_speculator():
    """loop.py imports no impl module and never looks an impl up: it talks to the chain."""
    import ast
    from specnb.speculation import loop as loop_mod
    tree = ast.parse(open(loop_mod.__file__, encoding="utf-8").read())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"draft_simple", "deferred", "ngram", "ngram_cache", "ngram_mod"}
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"impls", "impl_of", "impl_last", "impl_round"}


@pytest.mark.parametrize("draft_max", ["3", "auto:4", "heuristic:4"])
def test_the_loop_reads_no_attribute_of_an_impl(pair, draft_max):
    """Each impl of the chain wrapped in a watcher: no attribute of an impl is read or set from
    loop.py while a run goes through every phase (auto's deferred draft-simple included)."""
    import sys
    from specnb.speculation import loop as loop_mod
    tgt, dft = pair
    seen = []

    class Watch:
        def __init__(self, impl):
            object.__setattr__(self, "_impl", impl)

        def __getattr__(self, name):
            if sys._getframe(1).f_code.co_filename == loop_mod.__file__:
                seen.append(name)
            return getattr(object.__getattribute__(self, "_impl"), name)

        def __setattr__(self, name, value):
            if sys._getframe(1).f_code.co_filename == loop_mod.__file__:
                seen.append(name)
            setattr(object.__getattribute__(self, "_impl"), name, value)

    spec = SpecParams(n_max=draft_max, types="ngram-simple,draft-simple", **NGRAM)
    loop = _loop(tgt, dft, repetitive_prompt(tgt, 3), 24, SAMPLERS["greedy"], spec)
    loop.chain.impls = [Watch(i) for i in loop.chain.impls]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        events = list(loop.rounds())
    assert any(ev.slot.draft for ev in events) or draft_max.startswith("auto")
    assert loop.results()[0].tokens and not seen, f"loop.py read impl attributes: {sorted(set(seen))}"
