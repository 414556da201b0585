"""The sampler chain (sampling.py): order, state, distribution(), clone/reset, and
sample_and_accept_n, checked against hand-computed expectations."""
import copy
import math

import numpy as np
import pytest

from specnb import ParamError
from specnb.run.sampling import (DEFAULT_SAMPLERS, Sampler, SamplerParams, parse_logit_bias,
    parse_sampler_seq, parse_samplers, sample_and_accept_n)

OPEN = dict(top_k=0, top_p=1.0, min_p=0.0)          # no truncation


class FakeCtx:
    """Just enough of a Context for the sampler: logits rows by batch index."""

    def __init__(self, rows):
        self.rows = [np.asarray(r, dtype=np.float32) for r in rows]

    def get_logits_ith(self, i):
        return self.rows[i]


def onehotish(n, hot, v=10.0):
    r = np.zeros(n, dtype=np.float32)
    r[hot] = v
    return r


def softmax(x):
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


def test_greedy_is_argmax():
    rng = np.random.default_rng(0)
    s = Sampler(SamplerParams(temp=0.0, seed=1))
    for _ in range(20):
        l = rng.standard_normal(1000).astype(np.float32)
        assert s.sample_logits(l) == int(np.argmax(l))


def test_greedy_fast_path_equals_the_chain():
    rng = np.random.default_rng(1)
    for kw in (dict(), dict(penalty_repeat=1.3, penalty_freq=0.2), OPEN,
               dict(top_n_sigma=1.0), dict(dry_multiplier=0.8, dry_sequence_breakers=())):
        fast = Sampler(SamplerParams(temp=0.0, seed=2, **kw))
        slow = Sampler(SamplerParams(temp=0.0, seed=2, **kw))
        slow._fast = False
        for _ in range(30):
            l = rng.standard_normal(300).astype(np.float32) * 2
            a, b = fast.sample_logits(l), slow.sample_logits(l)
            assert a == b
            fast.accept(a)
            slow.accept(b)


def test_greedy_with_penalty_avoids_repeats():
    l = np.array([5.0, 4.9, 1.0], dtype=np.float32)
    s = Sampler(SamplerParams(temp=0.0, penalty_repeat=1.1, penalty_last_n=8))
    assert s.sample_logits(l) == 0
    s.accept(0)
    # 5.0 / 1.1 = 4.545 < 4.9: the repeat penalty flips the argmax (llama.cpp's formula)
    assert s.sample_logits(l) == 1


def test_penalty_window_slides():
    s = Sampler(SamplerParams(penalty_last_n=2, penalty_repeat=1.5))
    for t in (1, 2, 3):
        s.accept(t)
    assert dict(s.chain[0].counts) == {2: 1, 3: 1}


def test_temperature_sharpens():
    l = np.array([1.0, 0.0], dtype=np.float32)
    s = Sampler(SamplerParams(temp=0.5, seed=5, **OPEN))
    s.sample_logits(l)
    c = s.get_candidates()
    assert c.p[np.argmax(c.ids == 0)] == pytest.approx(1 / (1 + math.exp(-2.0)))


def test_top_k_top_p_min_p_truncate_as_defined():
    l = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float64)).astype(np.float32)

    def kept(**kw):
        s = Sampler(SamplerParams(temp=1.0, **kw))
        s.sample_logits(l)
        return sorted(s.get_candidates().ids.tolist())
    assert kept(top_k=2, top_p=1.0, min_p=0.0) == [0, 1]
    # top-p keeps the smallest prefix whose mass reaches p: 0.5 + 0.2 + 0.15 >= 0.8
    assert kept(top_k=0, top_p=0.8, min_p=0.0) == [0, 1, 2]
    # min-p keeps tokens with p >= min_p * p_max: 0.25 * 0.5 = 0.125
    assert kept(top_k=0, top_p=1.0, min_p=0.25) == [0, 1, 2]
    # typical-p with p = 1 changes nothing
    assert kept(top_k=0, top_p=1.0, min_p=0.0, typ_p=1.0) == [0, 1, 2, 3, 4]


# ---- the order of the chain -------------------------------------------------------------------
def test_default_order_and_description():
    assert SamplerParams().samplers == DEFAULT_SAMPLERS
    assert Sampler(SamplerParams()).describe() == (
        "logits -> ?penalties -> ?dry -> ?top-n-sigma -> top-k -> ?typical -> top-p -> min-p "
        "-> ?xtc -> temp-ext -> dist ")
    assert Sampler(SamplerParams(mirostat=2, logit_bias=((1, 2.0),))).describe() == \
        "logits -> logit-bias -> temp -> mirostat-v2 "


def test_user_order_is_honoured():
    l = np.log(np.float32([0.4, 0.3, 0.2, 0.1]))

    def dist(samplers, **kw):
        s = Sampler(SamplerParams(samplers=samplers, **{**OPEN, **kw}))
        return s.distribution_logits(l).dense(4)
    # min-p 0.3 before temperature 2: p >= 0.12 keeps 0, 1, 2; after it (p ~ sqrt) keeps all
    want = softmax(np.log([0.4, 0.3, 0.2]) / 2)
    assert dist(("min_p", "temperature"), min_p=0.3, temp=2.0)[:3] == pytest.approx(want)
    assert dist(("temperature", "min_p"), min_p=0.3, temp=2.0) == \
        pytest.approx(softmax(np.log([0.4, 0.3, 0.2, 0.1]) / 2))
    # a repeated name runs twice: temperature 2 twice is temperature 4
    assert dist(("temperature", "temperature"), temp=2.0) == \
        pytest.approx(softmax(np.log([0.4, 0.3, 0.2, 0.1]) / 4))
    # penalties after top-k: the penalised token stays a candidate, only less likely
    s = Sampler(SamplerParams(samplers=("top_k", "penalties"), top_k=2, penalty_repeat=4.0,
                              temp=1.0))
    s.accept(0)
    assert sorted(s.distribution_logits(l).ids.tolist()) == [0, 1]
    s = Sampler(SamplerParams(samplers=("penalties", "top_k"), top_k=2, penalty_repeat=4.0,
                              temp=1.0))
    s.accept(0)
    assert sorted(s.distribution_logits(l).ids.tolist()) == [1, 2]


def test_sampler_names_as_llamacpp_reads_them():
    assert parse_samplers("penalties;dry;top_k;typ_p;top_p;min_p;xtc;temperature") == \
        ("penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
    assert parse_samplers("Top-K;nucleus;temp;typ;minp;top-n-sigma") == \
        ("top_k", "top_p", "temperature", "typ_p", "min_p", "top_n_sigma")
    assert parse_sampler_seq("edskypmxt") == DEFAULT_SAMPLERS
    with pytest.warns(UserWarning, match="'bogus': skipped"):      # as llama.cpp: warned, skipped
        assert parse_samplers("top_k;bogus") == ("top_k",)
    with pytest.raises(ParamError, match="infill"):
        SamplerParams(samplers=("infill",)).validate()
    assert parse_logit_bias("15043+1") == (15043, 1.0)
    assert parse_logit_bias("15043-0.5") == (15043, -0.5)
    assert parse_logit_bias("2-inf") == (2, -math.inf)
    assert parse_logit_bias(" 15043 + 1") == (15043, 1.0) and parse_logit_bias("-3+2") == (-3, 2.0)
    for bad in ("x+1", "15043", "15043*2", "+1", "12+nan"):
        with pytest.raises(ParamError, match="logit_bias"):
            parse_logit_bias(bad)


def test_logit_bias_runs_first_and_ignores_ids_outside_the_vocab():
    """As llama_sampler_logit_bias_apply: an id no candidate has changes nothing (warned here)."""
    l = np.float32([1.0, 0.0, 0.0])
    s = Sampler(SamplerParams(temp=0.0, logit_bias=((2, 5.0),)))
    assert s.sample_logits(l) == 2
    for t in (3, -1):
        with pytest.warns(UserWarning, match=f"token {t}: outside the vocab"):
            s = Sampler(SamplerParams(temp=0.0, logit_bias=((t, 9.0),)), n_vocab=3)
        assert s.sample_logits(l) == 0


def test_dry_needs_the_vocab_for_string_breakers():
    s = Sampler(SamplerParams(dry_multiplier=0.8))
    with pytest.raises(ParamError, match="vocab"):
        s.sample_logits(np.zeros(8, dtype=np.float32))


# ---- distribution(): what the final draw samples from ----------------------------------------
STATEFUL = {
    "default": dict(temp=0.8),
    "typical": dict(temp=0.9, typ_p=0.8, **OPEN),
    "xtc": dict(temp=1.0, xtc_probability=0.5, xtc_threshold=0.1, **OPEN),
    "dynatemp": dict(temp=0.8, dynatemp_range=0.5, top_k=20),
    "top-n-sigma": dict(temp=1.0, top_n_sigma=1.0, **OPEN),
    "penalties": dict(temp=1.0, penalty_repeat=1.5, penalty_present=0.5, top_k=30),
    "dry": dict(temp=1.0, dry_multiplier=1.0, dry_sequence_breakers=(), top_k=0),
    "mirostat1": dict(temp=1.0, mirostat=1, mirostat_tau=3.0),
    "mirostat2": dict(temp=1.0, mirostat=2, mirostat_tau=3.0),
    "c392e50 draw": dict(temp=0.8, dist_draw="c392e50"),
}


def _state(s):
    st = []
    for step in s.chain:
        rng = getattr(step, "rng", None)
        st.append((dict(rng._bits.state["state"], key=rng._bits.state["state"]["key"].tolist())
                   if rng else None, dict(getattr(step, "counts", {})),
                   list(getattr(step, "last_tokens", [])), float(getattr(step, "mu", 0))))
    return st


@pytest.mark.parametrize("name", list(STATEFUL))
def test_distribution_is_what_sample_draws_from(name):
    """Frequencies of many samples follow the distributions distribution() announced, the
    candidates after each sample equal the announced ones, and distribution() changes
    nothing (no random number, no window, no mu)."""
    rng = np.random.default_rng(3)
    base = (rng.standard_normal(12) * 1.5).astype(np.float32)
    s = Sampler(SamplerParams(seed=11, **STATEFUL[name]))
    n = 2000
    expected, observed = np.zeros(12), np.zeros(12)
    for i in range(n):
        l = base if i % 2 else base[::-1].copy()
        before = _state(s) if i % 7 == 0 else None
        d = s.distribution_logits(l)
        assert before is None or _state(s) == before
        tok = s.sample_logits(l)
        c = s.get_candidates()
        assert c.ids.tolist() == d.ids.tolist() and np.array_equal(c.p, d.p)
        expected += d.dense(12)
        observed[tok] += 1
        s.accept(tok if i % 3 else int(rng.integers(12)))
    keep = expected > 5
    chi2 = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert observed[~keep].sum() <= max(5, expected[~keep].sum() * 3)
    assert chi2 < 33.0          # <= 11 degrees of freedom, p = 0.0005 (or fewer, looser)


def test_distribution_greedy_is_one_token():
    l = np.float32([0.1, 2.0, 0.3])
    s = Sampler(SamplerParams(temp=0.0))
    d = s.distribution_logits(l)
    assert d.ids.tolist() == [1] and d.p.tolist() == [1.0]
    assert s.sample_logits(l) == 1


# ---- clone and reset ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(STATEFUL))
def test_clone_replays_the_same_draws(name):
    rng = np.random.default_rng(4)
    rows = [(rng.standard_normal(40) * 2).astype(np.float32) for _ in range(30)]
    s = Sampler(SamplerParams(seed=9, **STATEFUL[name]))
    for r in rows[:10]:
        s.accept(s.sample_logits(r))
    c = s.clone()

    def walk(x):
        out = []
        for r in rows[10:]:
            out.append(x.sample_logits(r))
            x.accept(out[-1])
        return out
    assert walk(s) == walk(c)


def test_reset_reseeds_as_llamacpp_does():
    """common_sampler_reset -> llama_sampler_dist_reset: the RNG restarts from the seed."""
    rows = [np.float32(np.random.default_rng(i).standard_normal(30)) for i in range(12)]
    s = Sampler(SamplerParams(temp=1.0, seed=5, xtc_probability=0.5, penalty_repeat=1.2, **OPEN))
    first = []
    for r in rows:
        first.append(s.sample_logits(r))
        s.accept(first[-1])
    s.reset()
    again = []
    for r in rows:
        again.append(s.sample_logits(r))
        s.accept(again[-1])
    assert again == first and len(s.prev) == len(rows)
    for name in ("mirostat1", "mirostat2"):
        m = Sampler(SamplerParams(seed=3, **STATEFUL[name]))
        mu0 = float(m.final.mu)
        m.accept(m.sample_logits(rows[0]))
        assert float(m.final.mu) != mu0
        m.reset()
        assert float(m.final.mu) == mu0


def test_seed_gives_the_mt19937_draw():
    """The same seed and probabilities give llama.cpp's pick: the first candidate whose
    running probability reaches u * sum, u the first uniform double of mt19937(seed)."""
    from specnb.run.rng import Mt19937
    l = np.log(np.float32([0.1, 0.2, 0.3, 0.4]))
    for seed in range(20):
        s = Sampler(SamplerParams(temp=1.0, seed=seed, samplers=()))
        u = Mt19937(seed).canonical_double()
        assert s.sample_logits(l) == int(np.argmax(np.cumsum([0.1, 0.2, 0.3, 0.4]) >= u - 1e-12))
    s = Sampler(SamplerParams(seed=77))
    assert s.seed_used == 77 and Sampler(SamplerParams()).seed_used != Sampler(SamplerParams()).seed_used


@pytest.mark.parametrize("kw,name", [
    (dict(top_p=float("nan")), "top_p"), (dict(min_p=float("nan")), "min_p"),
    (dict(temp=float("nan")), "temp"), (dict(seed=-5), "seed"),
    (dict(penalty_last_n=-1), "penalty_last_n"), (dict(top_k=1.5), "top_k"),
    (dict(penalty_repeat=0.0), "penalty_repeat"), (dict(penalty_repeat=1e-45), "penalty_repeat"),
    (dict(penalty_freq=float("inf")), "penalty_freq"), (dict(typ_p=float("nan")), "typ_p"),
    (dict(mirostat=3), "mirostat"), (dict(dry_penalty_last_n=-1), "dry_penalty_last_n"),
    (dict(xtc_probability=float("nan")), "xtc_probability"), (dict(dist_draw="pcg"), "dist_draw"),
    (dict(logit_bias=((1, float("nan")),)), "logit_bias"),
    (dict(top_n_sigma=float("nan")), "top_n_sigma"), (dict(dry_sequence_breakers=(1,)), "breakers"),
])
def test_invalid_sampler_values(kw, name):
    with pytest.raises(ParamError, match=name):
        SamplerParams(**kw).validate()


def test_sample_and_accept_n_partial_and_bonus():
    n = 20
    # target greedy: row i predicts token 10 + i
    rows = [onehotish(n, 10 + i) for i in range(5)]
    ctx = FakeCtx(rows)
    s = Sampler(SamplerParams(temp=0.0))
    # draft matches rows 0 and 1, row 2 disagrees -> 3 ids: 10, 11 accepted, 12 replaces 7
    assert sample_and_accept_n(s, ctx, [10, 11, 7, 13]) == [10, 11, 12]
    # full acceptance -> bonus token from the row after the last draft token
    assert sample_and_accept_n(s, ctx, [10, 11, 12]) == [10, 11, 12, 13]
    # empty draft -> exactly one token
    assert sample_and_accept_n(s, ctx, []) == [10]
    # explicit row indices (several sequences in one batch)
    assert sample_and_accept_n(s, ctx, [12], idxs=[2, 3]) == [12, 13]
    with pytest.raises(ParamError):
        sample_and_accept_n(s, ctx, [1, 2], idxs=[0])
    # every sampled token was accepted
    assert list(s.prev)[-2:] == [12, 13]


def test_rng_keeps_the_generator_api():
    """The loop's rejection verifier draws from Sampler.rng with random() and choice()."""
    s = Sampler(SamplerParams(seed=1))
    r = copy.deepcopy(s.rng)
    assert 0.0 <= s.rng.random() < 1.0 and s.rng.choice(3, p=[0, 1.0, 0]) == 1
    assert r.random() != r.random()


def test_cli_flags_are_llamacpps():
    """The sampler flags under llama.cpp's names; defaults as llama.cpp except temp and seed."""
    from specnb.app.cli import build_parser, sampler_params
    ap = build_parser()
    d = sampler_params(ap.parse_args(["generate"]))
    ref = SamplerParams()
    for f in ("top_k", "top_p", "min_p", "typ_p", "penalty_last_n", "penalty_repeat",
              "xtc_probability", "xtc_threshold", "dynatemp_range", "dynatemp_exponent",
              "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
              "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta", "top_n_sigma",
              "samplers", "logit_bias", "dist_draw"):
        assert getattr(d, f) == getattr(ref, f), f
    assert (d.temp, d.seed) == (0.0, 42) and (ref.temp, ref.seed) == (0.8, 0xFFFFFFFF)
    a = ap.parse_args(["speculative-simple", "--temperature", "0.7", "-s", "5", "--top-n-sigma",
                       "1.5", "--xtc-probability", "0.3", "--xtc-threshold", "0.2",
                       "--dynatemp-range", "0.4", "--dynatemp-exp", "2", "--dry-multiplier", "0.8",
                       "--dry-base", "2", "--dry-allowed-length", "3", "--dry-penalty-last-n", "32",
                       "--dry-sequence-breaker", "none", "--dry-sequence-breaker", "\n",
                       "--mirostat", "2", "--mirostat-lr", "0.2", "--mirostat-ent", "4",
                       "-l", "5+1.5", "--logit-bias", "6-inf", "--samplers", "top_k;temp;temp",
                       "--typical-p", "0.9", "--dist-draw", "c392e50"])
    p = sampler_params(a)
    assert (p.temp, p.seed, p.top_n_sigma, p.xtc_probability, p.xtc_threshold) == (0.7, 5, 1.5, 0.3, 0.2)
    assert (p.dynatemp_range, p.dynatemp_exponent, p.dry_multiplier, p.dry_base) == (0.4, 2.0, 0.8, 2.0)
    assert (p.dry_allowed_length, p.dry_penalty_last_n, p.dry_sequence_breakers) == (3, 32, ("\n",))
    assert (p.mirostat, p.mirostat_eta, p.mirostat_tau, p.typ_p) == (2, 0.2, 4.0, 0.9)
    assert p.logit_bias == ((5, 1.5), (6, -math.inf)) and p.dist_draw == "c392e50"
    assert p.samplers == ("top_k", "temperature", "temperature")
    assert sampler_params(ap.parse_args(["generate", "--sampler-seq", "kt"])).samplers == \
        ("top_k", "temperature")
    for bad in (["--samplers", "top_k", "--sampler-seq", "k"], ["--repeat-last-n", "-1"], ["-l", "x"]):
        with pytest.raises(ParamError):
            sampler_params(ap.parse_args(["generate"] + bad))
    # a DRY base below 1 is ignored, the last one >= 1 kept (common/arg.cpp:2126-2130)
    with pytest.warns(UserWarning, match="--dry-base 0.5 ignored"):
        assert sampler_params(ap.parse_args(["generate", "--dry-base", "2", "--dry-base", "0.5"])).dry_base == 2.0
    with pytest.warns(UserWarning, match="ignored"):
        assert sampler_params(ap.parse_args(["generate", "--dry-base", "0.5"])).dry_base == ref.dry_base
