"""Every sampler of the chain inside speculative decoding: SpeculativeLoop gives the tokens
plain decoding gives, with the sampler on, through sample_and_accept_n and (with a target
memory that cannot drop part of a sequence) the checkpoint path that restores a sampler clone
and replays. Each setting must also change the plain output, so the sampler was really used."""
import numpy as np
import pytest

from specnb.run.context import Context
from specnb.speculation.params import SpecParams
from specnb.speculation.loop import SpeculativeLoop
from specnb.run.generate import generate
from specnb.run.sampling import Sampler, SamplerParams

BASE = dict(temp=0.9, top_k=0, top_p=1.0, min_p=0.0)
SETTINGS = {
    "dry": dict(BASE, dry_multiplier=2.0, dry_base=1.75, dry_allowed_length=1),
    "xtc": dict(BASE, xtc_probability=0.7, xtc_threshold=0.05),
    "top-n-sigma": dict(BASE, top_n_sigma=0.7),
    "dynatemp": dict(BASE, dynatemp_range=0.6, dynatemp_exponent=1.5),
    "mirostat1": dict(BASE, mirostat=1, mirostat_tau=2.0, mirostat_eta=0.3),
    "mirostat2": dict(BASE, mirostat=2, mirostat_tau=2.0, mirostat_eta=0.3),
    "logit-bias": dict(BASE, logit_bias=((5, 3.0), (6, -np.inf))),
    "order": dict(BASE, samplers=("temperature", "min_p", "top_k", "temperature"), top_k=12,
                  min_p=0.1),
    "penalties-greedy": dict(temp=0.0, penalty_repeat=1.4, penalty_freq=0.3, penalty_present=0.3),
    "dry-greedy": dict(temp=0.0, dry_multiplier=3.0, dry_allowed_length=1),
}



def _plain(model, prompt, sp, n):
    return generate(Context(model, n_ctx=128), Sampler(sp), prompt, n).tokens


@pytest.mark.parametrize("name", list(SETTINGS))
def test_speculative_equals_plain_with_sampler(pair, name):
    tgt, dft = pair
    changed = False
    for seed, (n_max, seq_rm) in zip((1, 2), ((3, True), (5, False))):
        sp = SamplerParams(seed=seed, **SETTINGS[name])
        prompt = np.random.default_rng(seed).integers(3, tgt.n_vocab, 6).tolist()
        expect = _plain(tgt, prompt, sp, 24)
        loop = SpeculativeLoop(Context(tgt, n_ctx=128, partial_seq_rm=seq_rm),
                               Context(dft, n_ctx=128), prompt, 24, sp, SpecParams(n_max=n_max))
        assert loop.run()[0].tokens == expect, (name, seed, seq_rm)
        assert loop.n_drafted > 0
        if not seq_rm:     # a rejected draft token: the checkpoint was restored and replayed
            assert loop.n_accept < loop.n_drafted
        base = BASE if SETTINGS[name]["temp"] > 0 else dict(temp=0.0)
        changed |= _plain(tgt, prompt, SamplerParams(seed=seed, **base), 24) != expect
    assert changed, f"{name}: the setting never changed the output"
