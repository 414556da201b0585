"""The sampler chain against llama-cli (c392e50, tests/data/llamacpp_cli_*; see its README).

- Penalties and DRY: llama-cli puts the prompt into the penalty window and DRY's history.
  Teacher-forced on llama-cli's greedy continuation with --repeat-penalty 1.3
  --presence-penalty 0.4 --frequency-penalty 0.2 (and, separately, --dry-multiplier 0.8),
  specnb's sampler (the prompt accepted into it) picks llama-cli's token wherever llama.cpp's
  own penalised top-1 leads by a clear margin; near ties may go either way (f32 and q8
  activations resolve them differently).
- Seeds: llama-cli --temp 0.8 --seed S. Given llama.cpp's own final probabilities, specnb's
  dist draw (mt19937, libstdc++'s discrete_distribution: dist_draw="c392e50") picks llama-cli's
  token at every step; on its own logits, specnb's RNG stream stays in step with llama-cli's
  (llama-cli's probabilities drawn with specnb's random numbers give llama-cli's tokens), and
  the tokens differ only where the two models' probabilities differ.
"""
import copy
import json
import os

import numpy as np
import pytest

from specnb.run.context import Batch, Context
from specnb.run.samplers import Candidates, Dist
from specnb.run.sampling import Sampler, SamplerParams

DATA = os.path.join(os.path.dirname(__file__), "data")
SAFE_GAP = 0.6      # as test_llamacpp_facts: llama.cpp's top-1 leads its runner-up clearly


def load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def teacher_forced_logits(model, prompt_ids, generated, activations="f32"):
    ctx = Context(model, n_ctx=256, activations=activations)
    logits = ctx.decode(Batch.from_tokens(prompt_ids + generated, 0, 0, "all"))
    return logits[len(prompt_ids) - 1:len(prompt_ids) - 1 + len(generated)]


PENALISED = {
    "penalties": ("llamacpp_cli_penalties_smollm2.json",
                  dict(penalty_repeat=1.3, penalty_freq=0.2, penalty_present=0.4, penalty_last_n=64)),
    "dry": ("llamacpp_cli_dry_smollm2.json",
            dict(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=64)),
}


@pytest.mark.slow
@pytest.mark.parametrize("name,activations", [("penalties", "f32"), ("penalties", "q8"),
                                              ("dry", "f32")])
def test_greedy_with_prompt_in_window_matches_llama_cli(default_model, name, activations):
    fname, kw = PENALISED[name]
    d = load(fname)
    assert default_model.vocab.tokenize(d["prompt"]) == d["prompt_ids"]
    rows = teacher_forced_logits(default_model, d["prompt_ids"], d["generated_ids"], activations)
    s = Sampler(SamplerParams(temp=0.0, seed=1, **kw), default_model.n_vocab, vocab=default_model.vocab)
    for t in d["prompt_ids"]:              # llama-cli: common_sampler_accept on every prompt token
        s.accept(t)
    clear = agree = 0
    for row, want, st in zip(rows, d["generated_ids"], d["steps"]):
        got = s.sample_logits(row)
        agree += got == want
        if st["top1_logit"] - st["top2_logit"] >= SAFE_GAP:
            assert got == want, (len(s.prev), got, want)
            clear += 1
        s.accept(want)
    assert clear >= 40 and agree >= 0.9 * len(rows)


def test_seeded_draw_matches_llama_cli_on_its_probabilities():
    d = load("llamacpp_cli_sampled_smollm2.json")
    for run in d["runs"]:
        dist = Dist(run["seed"], "c392e50")
        for st, want in zip(run["steps"], run["generated_ids"]):
            cur = Candidates(np.array(st["ids"]), np.float32(st["logits"]),
                             np.zeros(len(st["ids"]), np.float32), sorted=True)
            dist.apply(cur)
            assert cur.p == pytest.approx(np.float32(st["p"]), abs=1e-6)
            assert int(cur.ids[cur.selected]) == want


@pytest.mark.slow
def test_seeded_sampling_follows_llama_cli(default_model):
    d = load("llamacpp_cli_sampled_smollm2.json")
    n_vocab = default_model.n_vocab
    for run in d["runs"]:
        rows = teacher_forced_logits(default_model, d["prompt_ids"], run["generated_ids"])
        s = Sampler(SamplerParams(temp=0.8, seed=run["seed"], dist_draw="c392e50"), n_vocab)
        for t in d["prompt_ids"]:
            s.accept(t)
        agree = 0
        for row, want, st in zip(rows, run["generated_ids"], run["steps"]):
            mine = s.distribution_logits(row)
            theirs = np.zeros(n_vocab)
            theirs[st["ids"]] = st["p"]
            # llama-cli's probabilities, drawn with specnb's random numbers, give its token
            r = copy.deepcopy(s.rng)
            assert st["ids"][r.discrete(np.float32(st["p"]))] == want
            got = s.sample_logits(row)
            agree += got == want
            if got != want:        # only where the two distributions really differ
                assert 0.5 * np.abs(mine.dense(n_vocab) - theirs).sum() > 0.005
            s.accept(want)
        assert agree >= 0.85 * len(rows), (run["seed"], agree)
