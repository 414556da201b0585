"""verify.py: synthetic acceptance as llama.cpp's server verifies it, and speculative sampling
(Leviathan et al. 2023, Chen et al. 2023) on the distributions the target and draft chains
really sample from. Rejection-mode output is checked statistically (total variation against the
chain's exact law), never token for token; with a greedy target it must equal exact match."""
import numpy as np
import pytest

from specnb import ParamError
from specnb.run.context import Batch, Context
from specnb.speculation.draft_simple import DraftSimple
from specnb.speculation.params import SpecParams
from specnb.speculation.loop import SpeculativeLoop
from specnb.run.sampling import Sampler, SamplerParams
from specnb.speculation.impl import DraftParams
from specnb.speculation.verify import (Verifier, draw_index, one_hot, rejection_verify, speculative_step,
    synth_len_to_p, synth_rates_resolve, synth_verify)
from spec_checks import plain, repetitive_prompt


def test_synthetic_rates_validation_and_resolution():
    """common_speculative_synth_rates_resolve: exactly n_max finite, non-increasing rates in [0, 1]."""
    assert synth_rates_resolve([0.9, 0.72, 0.36], 3) == pytest.approx([0.9, 0.8, 0.5])
    for bad in ([0.5, 0.7, 0.1], [1.2, 1.0, 0.5], [float("nan")] * 3, [], ["x"],
                [0.9, 0.8], [0.9, 0.8, 0.7, 0.6]):            # llama.cpp refuses a length != n_max
        with pytest.raises(ParamError):
            synth_rates_resolve(bad, 3)
    with pytest.raises(ParamError, match="must contain 3 values"):
        synth_rates_resolve([0.9, 0.8], 3)
    with pytest.raises(ParamError, match="at least one speculative token"):
        synth_rates_resolve([0.9], 0)
    p = synth_len_to_p(2.5, 4)
    assert p + p**2 + p**3 + p**4 == pytest.approx(1.5, abs=1e-9)
    assert synth_len_to_p(5.0, 4) == 1.0 and synth_len_to_p(1.0, 4) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ParamError, match="synth_len"):
        synth_len_to_p(9.0, 3)


class _Counting(Sampler):
    """A sampler that counts its sample() calls."""
    n_sample = 0

    def sample(self, ctx, idx):
        self.n_sample += 1
        return super().sample(ctx, idx)


def test_synthetic_verifier_samples_every_position(pair):
    """server_sample_and_accept_synth samples the target at every position, also where the
    coin accepts the draft token, and keeps the drafted token in the sampler's window."""
    tgt, _ = pair
    ctx = Context(tgt, n_ctx=32)
    draft = [7, 8, 9]
    ctx.decode(Batch.from_tokens([5, 6] + draft, 0, 0, "all"))
    idxs = [1, 2, 3, 4]
    rng = np.random.Generator(np.random.PCG64(0))
    s = _Counting(SamplerParams(temp=0.8, seed=1))
    ids = synth_verify(s, ctx, draft, idxs, [1.0, 1.0, 1.0], rng, tgt.vocab, False)
    assert ids[:3] == draft and len(ids) == 4 and s.n_sample == 4
    assert list(s.prev)[:3] == draft
    s = _Counting(SamplerParams(temp=0.8, seed=1))
    ids = synth_verify(s, ctx, draft, idxs, [1.0, 0.0, 1.0], rng, tgt.vocab, False)
    assert ids[0] == 7 and len(ids) == 2 and s.n_sample == 2
    # a replay keeps every token and draws no coin
    state = rng.bit_generator.state
    s = _Counting(SamplerParams(temp=0.8, seed=1))
    assert synth_verify(s, ctx, draft, idxs, [0.0, 0.0, 0.0], rng, tgt.vocab, True)[:3] == draft
    assert rng.bit_generator.state == state and s.n_sample == 4


def test_rejection_with_a_deterministic_draft_follows_the_target():
    """A draft with no distribution (an n-gram lookup) is a one-hot q: keep d with probability
    p(d), else sample from p without d. The first token then follows p exactly."""
    rng = np.random.default_rng(0)
    p0 = rng.dirichlet(np.ones(12))
    p1 = rng.dirichlet(np.ones(12))
    d = int(np.argsort(p0)[-2])
    n = 40000
    first = np.zeros(12)
    for _ in range(n):
        ids = rejection_verify([d], [one_hot(d, 12)], [p0, p1], rng)
        first[ids[0]] += 1
    assert 0.5 * np.abs(first / n - p0).sum() < 1.5 * np.sqrt(12 / n) / 2 + 0.005


def test_speculative_step_probabilities():
    """The accept rule, exactly: d is kept with probability min(1, p(d)/q(d)), the replacement
    follows norm(max(0, p - q)); over d ~ q the token follows p (checked by enumeration)."""
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    law = np.zeros(6)
    for d in range(6):                          # P(token = x) = sum_d q(d) P(x | d)
        keep = min(1.0, p[d] / q[d])
        resid = np.maximum(p - q, 0) / np.maximum(p - q, 0).sum()
        law[d] += q[d] * keep
        law += q[d] * (1 - keep) * resid
    assert law == pytest.approx(p, abs=1e-12)
    n, d = 20000, int(np.argmax(q / p))         # the token the draft over-proposes most
    kept = sum(speculative_step(d, p, q, rng)[1] for _ in range(n))
    assert kept / n == pytest.approx(p[d] / q[d], abs=4 * np.sqrt(0.25 / n))
    assert [draw_index(rng, [0.0, 2.0, 0.0, 1.0]) for _ in range(50)].count(0) == 0


# ---- on the chains' distributions ---------------------------------------------------------------
PROMPT = "Once upon a time"
FREE = dict(top_k=0, top_p=1.0, min_p=0.0)
# target chains, each far (in total variation) from plain softmax(logits / T) on the tiny pair
CHAINS = {
    "top-k": dict(FREE, temp=1.0, top_k=6),
    "top-p": dict(FREE, temp=0.7, top_p=0.7),
    "min-p": dict(FREE, temp=1.0, min_p=0.2),
    "typical": dict(FREE, temp=1.0, typ_p=0.5),
    "penalties": dict(FREE, temp=1.5, top_k=5, penalty_repeat=2.5, penalty_present=1.0,
                      penalty_freq=0.5),
    "xtc": dict(FREE, temp=1.0, top_k=8, xtc_probability=0.5, xtc_threshold=0.1),
    "mirostat2": dict(FREE, temp=1.0, mirostat=2, mirostat_tau=2.0, mirostat_eta=0.3),
}
# greedy chains whose choice is not the raw logits' argmax everywhere (on the tiny pair, within
# 12 tokens of PROMPT; the logit bias is set against the raw first choice in the test)
GREEDY_CHAINS = {
    "penalties": dict(temp=0.0, penalty_repeat=1.6, penalty_present=0.6, penalty_freq=0.4),
    "dry": dict(temp=0.0, dry_multiplier=3.0, dry_allowed_length=1),
    "logit-bias": dict(temp=0.0),
}


class Rows:
    """A context after a decode, as the verifier reads it: batch row i holds logits rows[i]."""

    def __init__(self, model, rows):
        self.model, self.rows = model, rows

    def get_logits_ith(self, i):
        return self.rows[i]


def logits_after(model, tokens) -> np.ndarray:
    """[n_vocab] logits predicting the token after `tokens`, from a fresh context."""
    ctx = Context(model, n_ctx=128)
    ctx.decode(Batch.from_tokens(list(tokens), 0, 0, "last"))
    return np.array(ctx.get_logits_ith(len(tokens) - 1))


class After(dict):
    """token -> logits_after(model, prompt + [token]), computed when first asked for."""

    def __init__(self, model, prompt):
        super().__init__()
        self.model, self.prompt = model, list(prompt)

    def __missing__(self, token):
        self[token] = logits_after(self.model, self.prompt + [int(token)])
        return self[token]


def chain(model, params: dict, prompt, seed=1) -> Sampler:
    """The target's sampler after the prompt (its tokens in the penalty window, as the loop does)."""
    s = Sampler(SamplerParams(seed=seed, **params), model.n_vocab)
    for t in prompt:
        s.accept(t)
    return s


def chain_law(model, params: dict, prompt, logits, first=None, first_logits=None) -> np.ndarray:
    """The exact law of the chain's next token over `logits`, after the prompt and, when given,
    after `first` was sampled from first_logits. XTC's coin makes it a mixture of the chain with
    the coin for and against; mirostat's mu moves with `first` as mirostat's own draw moves it
    (a sampler whose first draw is `first` is looked for)."""
    xtc = params.get("xtc_probability", 0.0)
    if 0.0 < xtc < 1.0:
        return sum(w * chain_law(model, dict(params, xtc_probability=x), prompt, logits, first,
                                 first_logits) for w, x in ((xtc, 1.0), (1.0 - xtc, 0.0)))
    s = chain(model, params, prompt)
    if first is not None:
        seed = 0
        while params.get("mirostat", 0) and s.clone().sample_logits(first_logits) != first:
            seed += 1
            s = chain(model, params, prompt, seed)
        s.sample_logits(first_logits)
        s.accept(first)
    return s.distribution_logits(logits).dense(model.n_vocab)


def softmax(logits, temp) -> np.ndarray:
    e = np.exp((logits - logits.max()) / temp)
    return e / e.sum()


def tv(counts, p) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - p).sum())


def tv_bound(p, n) -> float:
    """Three times the total variation an n-sample empirical law of p shows by chance, plus a
    little: E|f_i - p_i| is about sqrt(2 p_i (1 - p_i) / (pi n))."""
    return 3 * 0.5 * float(np.sqrt(2 * p * (1 - p) / (np.pi * n)).sum()) + 0.005


def test_greedy_draft_accepted_exactly_as_exact_match(pair):
    """With a greedy target chain, rejection verification commits exactly what exact match
    commits, for a one-hot (greedy or n-gram) draft and for any q, on rows where the chain's
    choice (penalties, DRY, logit bias) is not the raw logits' argmax."""
    tgt, _ = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    rng = np.random.default_rng(0)
    raw_first = int(np.argmax(logits_after(tgt, prompt)))
    for name, params in GREEDY_CHAINS.items():
        if name == "logit-bias":
            params = dict(params, logit_bias=((raw_first, -5.0),))
        base = chain(tgt, params, prompt)
        greedy = plain(tgt, prompt, SamplerParams(**params), 12)
        moved = accepted = 0
        for trial in range(24):
            draft = list(greedy)
            if trial % 3:                                   # a wrong token somewhere
                draft[int(rng.integers(len(draft)))] = int(rng.integers(3, tgt.n_vocab))
            ctx = Context(tgt, n_ctx=64)
            ctx.decode(Batch.from_tokens(prompt + draft, 0, 0, "all"))
            idxs = list(range(len(prompt) - 1, len(prompt) + len(draft)))
            q_any = [rng.dirichlet(np.ones(tgt.n_vocab)) for _ in draft]
            for q_rows in (None, q_any):
                ex, rs = base.clone(), base.clone()
                want, _ = Verifier("exact", None, 0, tgt.vocab)(ex, ctx, draft, idxs, False)
                got, _ = Verifier("rejection", None, 0, tgt.vocab)(rs, ctx, draft, idxs, False, q_rows)
                assert got == want, (name, trial)
                assert list(rs.prev) == list(ex.prev)
            accepted += len(want) - 1
            s = base.clone()                                # the chain's choice on the walked rows
            for i, t in zip(idxs, want):
                moved += s.sample(ctx, i) != int(np.argmax(ctx.get_logits_ith(i)))
                s.accept(t)
        assert moved > 0 and accepted > 0, name           # the test can tell the two apart


@pytest.mark.parametrize("name", list(CHAINS))
def test_rejection_output_follows_the_target_chain(pair, name):
    """Two draft tokens sampled from the draft chain's q (the target's chain on the draft's
    logits), verified against the target chain's p: the first committed token follows the chain's
    law p0, and the second, after the first token most often kept from the draft, the chain's
    law with that token in its state (penalties, mirostat's mu). Plain softmax(logits / T) is
    far from p0."""
    tgt, dft = pair
    params = CHAINS[name]
    prompt = tgt.vocab.tokenize(PROMPT)
    n_vocab = tgt.n_vocab
    L0, D0 = logits_after(tgt, prompt), logits_after(dft, prompt)
    p0 = chain_law(tgt, params, prompt, L0)
    base = chain(tgt, params, prompt)
    q0_law = base.distribution_logits(D0).dense(n_vocab)
    a = int(np.argmax(np.minimum(p0, q0_law)))     # the first token most often kept from the draft
    L1, D1 = After(tgt, prompt), After(dft, prompt)
    p1 = chain_law(tgt, params, prompt, L1[a], first=a, first_logits=L0)
    verify = Verifier("rejection", None, 0, tgt.vocab)
    rng = np.random.default_rng(7)
    n = 5000
    first, second = np.zeros(n_vocab), np.zeros(n_vocab)
    for _ in range(n):
        # XTC's coin is the chain's own randomness: one sampler, its coins tossed on; the other
        # chains start every draw from the same state
        s = base if name == "xtc" else base.clone()
        dchain = s.clone()                      # the draft's chain: a copy of the target's
        q0 = dchain.distribution_logits(D0)
        d0 = int(q0.ids[draw_index(rng, q0.p)])
        dchain.accept(d0)
        q1 = dchain.distribution_logits(D1[d0])
        d1 = int(q1.ids[draw_index(rng, q1.p)])
        rows = Rows(tgt, [L0, L1[d0], L0])      # row 2 (the bonus) is not checked
        ids, _ = verify(s, rows, [d0, d1], [0, 1, 2], False, [q0.dense(n_vocab), q1.dense(n_vocab)])
        first[ids[0]] += 1
        if ids[0] == a and len(ids) > 1:
            second[ids[1]] += 1
    assert tv(first, p0) < tv_bound(p0, n), name
    assert tv(second, p1) < tv_bound(p1, second.sum()), name
    temp = params["temp"]
    assert 0.5 * np.abs(softmax(L0, temp) - p0).sum() > 2 * tv_bound(p0, n)   # the test has power
    if name == "penalties":                     # ... and sees the first token in the window
        p1_without = chain_law(tgt, params, prompt, L1[a])
        assert 0.5 * np.abs(p1_without - p1).sum() > 2 * tv_bound(p1, second.sum())


def test_draft_samples_from_a_copy_of_the_target_chain(pair):
    """draft-simple in rejection mode: q at each position is the target's chain (cloned with
    its state) over the draft's logits, the clone having accepted the earlier draft tokens; the
    tokens are drawn from q (not its argmax, as llama.cpp's examples/speculative drafts); the
    target's sampler is left as it was."""
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    params = dict(FREE, temp=1.0, top_k=5, penalty_repeat=1.5)
    smpl = chain(tgt, params, prompt, seed=3)
    before = list(smpl.prev)
    ctx_d = Context(dft, n_ctx=64)
    impl = DraftSimple(tgt, ctx_d, n_max=3, sample_draft=True, seed=1)
    impl.process(Batch.from_tokens(prompt[:-1], 0, 0, "none"))

    def draft(n_max):
        dp = DraftParams(True, n_max, len(prompt) - 1, prompt[-1], prompt[:-1], [], smpl=smpl)
        impl.draft([dp])
        impl.before_verify(0, len(prompt) - 1)
        return dp.result, impl.draft_dists(0), impl.draft_info(0)

    result, qs, info = draft(3)
    assert len(result) == len(qs) == len(info) == 3
    for i, (tok, q) in enumerate(zip(result, qs)):
        c = smpl.clone()
        for t in result[:i]:
            c.accept(t)
        want = c.distribution_logits(logits_after(dft, prompt + result[:i]))
        assert q.dense(tgt.n_vocab) == pytest.approx(want.dense(tgt.n_vocab), abs=1e-6)
        assert tok in q.ids and info[i].p == pytest.approx(float(q.p[q.ids == tok][0]))
    assert list(smpl.prev) == before
    n = 3000
    counts = np.zeros(tgt.n_vocab)
    for _ in range(n):
        counts[draft(1)[0][0]] += 1
    q0 = qs[0].dense(tgt.n_vocab)
    assert tv(counts, q0) < tv_bound(q0, n) and q0.max() < 0.9


def _run(tgt, dft, prompt, sps, spec, n_predict, seq_rm=True, draft_seed=0, activations=None):
    n = len(sps)
    ct = Context(tgt, n_ctx=128, n_seq_max=n, partial_seq_rm=seq_rm, activations=activations)
    cd = Context(dft, n_ctx=128, n_seq_max=n, activations=activations)
    loop = SpeculativeLoop(ct, cd, [prompt] * n, n_predict, sps, spec, draft_seed=draft_seed)
    events = list(loop.rounds())
    return loop, events


NGRAM = dict(ngram_size_n=1, ngram_size_m=8)
N_RUNS, N_SEQ = 150, 16          # 2400 samples of the first token


@pytest.mark.parametrize("types,seq_rm", [("draft-simple", True), ("ngram-simple,draft-simple", True),
                                          ("draft-simple", False)])
def test_rejection_mode_loop_follows_the_target_chain(pair, types, seq_rm):
    """SpeculativeLoop with verify="rejection", over many seeds (N_SEQ sequences a run): the
    first two generated tokens follow the target chain's law (top-k and penalties), through
    draft-simple's sampled drafts, the n-gram drafter's one-hot ones and the checkpoint path."""
    tgt, dft = pair
    params = CHAINS["penalties"]
    prompt = repetitive_prompt(tgt, 5, length=8)
    L0 = logits_after(tgt, prompt)
    p0 = chain_law(tgt, params, prompt, L0)
    a = int(np.argmax(p0))
    p1 = chain_law(tgt, params, prompt, logits_after(tgt, prompt + [a]), first=a, first_logits=L0)
    first, second = np.zeros(tgt.n_vocab), np.zeros(tgt.n_vocab)
    impls, restored = set(), 0
    for k in range(N_RUNS):
        sps = [SamplerParams(seed=N_SEQ * k + i, **params) for i in range(N_SEQ)]
        loop, events = _run(tgt, dft, prompt, sps, SpecParams(types=types, n_max=2,
                                                            verify="rejection", **NGRAM),
                            3, seq_rm, draft_seed=k)
        impls |= {r.impl for r in events[0].slots}
        restored += sum(r.checkpoint == "restored" for ev in events for r in ev.slots)
        for r in loop.results():
            first[r.tokens[0]] += 1
            if r.tokens[0] == a:
                second[r.tokens[1]] += 1
    assert tv(first, p0) < tv_bound(p0, first.sum())
    assert tv(second, p1) < tv_bound(p1, second.sum())
    assert impls == {types.split(",")[0]}        # round 0 drafted by the first type of the chain
    assert restored > 0 or seq_rm


def test_rejection_mode_greedy_equals_exact_mode(pair):
    """A greedy target with penalties: rejection mode gives plain decoding's tokens, and with the
    n-gram drafter (one-hot drafts, the same in both modes) the same acceptance round by round
    as exact match. The penalty is mild, so the target still repeats the prompt now and then and
    the n-gram drafts get accepted."""
    tgt, dft = pair
    params = dict(temp=0.0, penalty_repeat=1.1)
    prompt = repetitive_prompt(tgt, 3)
    sp = SamplerParams(seed=1, **params)
    # (f32: in that mode the tiny target's penalized greedy text still repeats the prompt)
    expect = plain(tgt, prompt, sp, 32, activations="f32")
    assert expect != plain(tgt, prompt, SamplerParams(temp=0.0), 32, activations="f32")   # the penalties matter
    for types in ("ngram-simple", "draft-simple", "ngram-simple,draft-simple"):
        runs = {}
        for mode in ("exact", "rejection"):
            loop, events = _run(tgt, dft, prompt, [sp], SpecParams(types=types, n_max=3,
                                                                   verify=mode, **NGRAM), 32,
                                activations="f32")
            assert loop.results()[0].tokens == expect, (types, mode)
            runs[mode] = [(r.draft, r.n_accepted) for ev in events for r in ev.slots]
        if types == "ngram-simple":
            assert runs["rejection"] == runs["exact"]
            assert sum(n for _, n in runs["exact"]) > 0
