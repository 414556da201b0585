"""The capstone's checks (specnb/app/exercise/, docs/exercise.md): the reference solution
(tests/exercise_solution.py) passes every check, and every mistake of every catalogue is caught by
a deliberately wrong function whose diagnosis names it. Tiny forged models, except check_trace (the
recorded run is on the default pair)."""
import ast
import re
import statistics
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import exercise_solution as S
from specnb import Batch
from specnb.app import exercise
from specnb.app.exercise import draft as X1, ngram as X5, rounds as X3, speedup as X4, verify as X2

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The exercise's tiny pair, forged into a temporary folder."""
    return exercise.exercise_models(exercise.tiny_pair_paths(tmp_path_factory.mktemp("exercise")))


def caught(check, *args, words=(), **kw) -> str:
    with pytest.raises(AssertionError) as e:
        check(*args, **kw)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in: {msg}"
    return msg


def literal(text: str) -> str:
    """The longest piece of a catalogue text with no {field} in it: what its diagnosis always says."""
    return max((lit for lit, *_ in string.Formatter().parse(text)), key=len)


def test_every_catalogue_entry_has_a_wrong_function():
    for catalogue, wrong in [(X1.DRAFT_MISTAKES, DRAFT_WRONG), (X2.IDS_MISTAKES, IDS_WRONG),
                             (X3.N_PAST_MISTAKES, N_PAST_WRONG), (X3.ID_LAST_MISTAKES, ID_LAST_WRONG),
                             (X3.KV_MISTAKES, KV_WRONG), (X4.MEASURED_MISTAKES, MEASURED_WRONG),
                             (X4.PREDICTED_MISTAKES, PREDICTED_WRONG), (X5.NGRAM_MISTAKES, NGRAM_WRONG)]:
        assert len(wrong) == len(catalogue)
        assert len({literal(t) for t, _ in catalogue}) == len(catalogue)      # each one says something of its own


# ---- the solution passes ------------------------------------------------------------------------
def test_the_solution_passes_steps_1_to_3_and_5(models, capsys):
    exercise.check_draft(S.draft, models=models)
    exercise.check_sample_and_accept_n(S.sample_and_accept_n, models=models)
    exercise.check_round(S.speculative_round, S.draft, models=models)
    exercise.check_ngram(S.ngram_draft, S.speculative_round, models=models)
    out = capsys.readouterr().out
    assert out.count("passed") == 4
    # the cases reach every stopping rule and every kind of round
    n = {k: int(v) for v, k in re.findall(r"(\d+) (stopped by n_max|by p_min|dropped under n_min|"
                                          r"full acceptances|stopped at a rejection|fully accepted|partly|"
                                          r"rejected at once|empty drafts)", out.split("check_ngram")[0])}
    assert len(n) == 9 and all(v > 0 for v in n.values()), out
    rounds = re.search(r"check_ngram: .*: (\d+) fully accepted drafts, (\d+) partly, (\d+) rejected at once, "
                       r"(\d+) empty drafts", out)
    assert rounds and all(int(v) > 0 for v in rounds.groups()), out     # every kind of round


def test_the_tiny_pair_has_the_default_pairs_tensor_types(models, tmp_path):
    from specnb.run.backend_cpu import model_qtypes
    tgt, dft = models
    assert model_qtypes(tgt) == (8, {3, 8}) and model_qtypes(dft) == (8, {2})   # Q8_0 emb; Q4_1+Q8_0; Q4_0
    a = exercise.tiny_pair_paths(tmp_path)
    mtime = Path(a[0]).stat().st_mtime_ns
    assert exercise.tiny_pair_paths(tmp_path) == a and Path(a[0]).stat().st_mtime_ns == mtime   # forged once
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(p).name for p in a)         # no leftovers


def test_the_draft_rule_is_draftsimples(models):
    """The formula the catalogue varies gives DraftSimple's draft in every case, and the chain's
    whole-vocabulary p is never above the top-10 share."""
    _, cases, _ = X1.draft_cases(models)
    for c in cases:
        assert X1.draft_rule(c.chain, c.n_max, c.n_min, c.p_min) == c.want, c.where
        assert all(a.p_vocab <= a.p + 1e-6 for a in c.chain)


# ---- step 1: broken drafts --------------------------------------------------------------------------
def _draft(mistake):
    """The solution's draft with one mistake."""
    def draft(ctx_dft, smpl, id_last, n_past, n_max, n_min=0, p_min=0.0):
        smpl.reset()
        ctx_dft.decode(Batch().add(id_last, n_past, 0, True))
        result, i = [], 0
        while True:
            smpl.sample(ctx_dft, 0)
            cur = smpl.get_candidates(True)
            tok, p = int(cur.ids[0]), float(cur.p[0])
            if mistake == "full-vocab p":
                row = ctx_dft.get_logits_ith(0).astype(np.float64)
                p = float(1.0 / np.exp(row - row.max()).sum())
            if mistake == "push then test p_min":
                result.append(tok)
                if p < p_min:
                    break
            elif p < p_min and mistake != "ignore p_min":
                break
            else:
                result.append(tok)
            if len(result) >= n_max + (mistake == "past n_max") and mistake != "decode the last":
                break
            pos = n_past + i + (mistake != "decode at n_past + i")
            ctx_dft.decode(Batch().add(tok, pos, 0, True))
            if mistake == "decode the last" and len(result) >= n_max:
                break
            i += 1
        if (len(result) <= n_min if mistake == "n_min off by one" else len(result) < n_min) \
                and mistake != "ignore n_min":
            result = []
        return result
    return draft


DRAFT_WRONG = ["past n_max", "push then test p_min", "ignore p_min", "ignore n_min", "n_min off by one",
               "full-vocab p"]


@pytest.mark.parametrize("k", range(len(DRAFT_WRONG)), ids=DRAFT_WRONG)
def test_check_draft_names_each_mistake(models, k):
    caught(exercise.check_draft, _draft(DRAFT_WRONG[k]), models=models,
           words=["check_draft: n_past=", literal(X1.DRAFT_MISTAKES[k][0]), "expected draft"])


@pytest.mark.parametrize("mistake,words", [
    ("past n_max", ["past n_max"]),
    ("ignore p_min", ["< p_min", "stops before pushing it"]),
    ("push then test p_min", ["stops before pushing it", "c392e50"]),
    ("ignore n_min", ["shorter than n_min"]),
    ("full-vocab p", ["top-10", "not of the whole vocabulary"]),
    ("decode the last", ["rows on ctx_dft", "not decoded"]),
    ("decode at n_past + i", ["BatchError", "not contiguous"]),
])
def test_check_draft_catches(models, mistake, words):
    caught(exercise.check_draft, _draft(mistake), models=models, words=["check_draft: n_past="] + words)


# ---- step 2: broken verifications --------------------------------------------------------------------
def _verify(mistake):
    def sample_and_accept_n(smpl, ctx_tgt, draft):
        ids = []
        for i, d in enumerate(draft):
            tok = smpl.sample(ctx_tgt, i + (mistake == "row off by one"))
            if mistake != "no accept":
                smpl.accept(tok)
            if tok != d:
                ids.append(d if mistake == "keep the draft token" else tok)
                if mistake == "one too many":
                    extra = smpl.sample(ctx_tgt, i + 1)
                    smpl.accept(extra)
                    ids.append(extra)
                return ids
            ids.append(tok)
        if mistake != "no bonus" and not (mistake == "no bonus after a full draft" and draft):
            tok = smpl.sample(ctx_tgt, len(draft))
            if mistake != "no accept":
                smpl.accept(tok)
            ids.append(tok)
        return ids
    return sample_and_accept_n


IDS_WRONG = ["no bonus", "no bonus after a full draft", "one too many", "keep the draft token"]


@pytest.mark.parametrize("k", range(len(IDS_WRONG)), ids=IDS_WRONG)
def test_check_sample_and_accept_n_names_each_mistake(models, k):
    caught(exercise.check_sample_and_accept_n, _verify(IDS_WRONG[k]), models=models,
           words=["check_sample_and_accept_n: sampler ", literal(X2.IDS_MISTAKES[k][0])])


@pytest.mark.parametrize("mistake,words", [
    ("one too many", ["one token too many"]),
    ("no bonus", ["no bonus token"]),
    ("keep the draft token", ["you returned the draft's token", "replaces the rejected draft token"]),
    ("no accept", ["the sampler accepted", "smpl.accept(id)"]),
    ("row off by one", ["expected", "got"]),
])
def test_check_sample_and_accept_n_catches(models, mistake, words):
    caught(exercise.check_sample_and_accept_n, _verify(mistake), models=models,
           words=["check_sample_and_accept_n: sampler "] + words)


def test_check_sample_and_accept_n_catches_a_decode(models):
    def decodes(smpl, ctx_tgt, draft):
        ctx_tgt.decode(Batch().add(0, ctx_tgt.seq_pos_max(0) + 1, 0, True))
        return S.sample_and_accept_n(smpl, ctx_tgt, draft)
    caught(exercise.check_sample_and_accept_n, decodes, models=models, words=["decoded 1 batch"])


def test_check_sample_and_accept_n_catches_an_extra_random_draw(models):
    def extra_draw(smpl, ctx_tgt, draft):
        ids = S.sample_and_accept_n(smpl, ctx_tgt, draft)
        if len(ids) <= len(draft):        # after a rejection, sample the next row too (and drop it)
            smpl.sample(ctx_tgt, len(ids))
        return ids
    caught(exercise.check_sample_and_accept_n, extra_draw, models=models, words=["random numbers"])


# ---- step 3: broken rounds ---------------------------------------------------------------------------
def _round(mistake):
    def speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn):
        dft = draft_fn(id_last, n_past)
        if mistake != "no draft rollback":
            ctx_dft.seq_rm(0, n_past, -1)
        batch = Batch().add(id_last, n_past, 0, True)
        for i, d in enumerate(dft):
            batch.add(d, n_past + 1 + i, 0, True)
        ctx_tgt.decode(batch)
        if mistake != "no replay":
            ctx_dft.decode(Batch.from_tokens(batch.tokens, n_past, 0, "none"))
        ids = S.sample_and_accept_n(smpl, ctx_tgt, dft)
        if mistake == "seq_rm before n_past moves":
            ctx_tgt.seq_rm(0, n_past, -1)
        n_past += (len(dft) + 1 if mistake == "advance by the batch" else len(ids)) - (mistake == "forget id_last")
        id_last = {"id_last = ids[0]": ids[0], "id_last = the last draft token": (dft or ids)[-1]}.get(mistake, ids[-1])
        if mistake != "no seq_rm":
            ctx_tgt.seq_rm(0, n_past + (mistake == "seq_rm at n_past + 1"), -1)
        ctx_dft.seq_rm(0, n_past, -1)
        return dft, ids, n_past, id_last
    return speculative_round


N_PAST_WRONG = ["forget id_last", "advance by the batch"]
ID_LAST_WRONG = ["id_last = ids[0]", "id_last = the last draft token"]
KV_WRONG = ["no seq_rm", "seq_rm at n_past + 1", "seq_rm before n_past moves", "no replay"]


@pytest.mark.parametrize("catalogue,mistake", [
    *[(X3.N_PAST_MISTAKES[k], m) for k, m in enumerate(N_PAST_WRONG)],
    *[(X3.ID_LAST_MISTAKES[k], m) for k, m in enumerate(ID_LAST_WRONG)],
    *[(X3.KV_MISTAKES[k], m) for k, m in enumerate(KV_WRONG)]], ids=N_PAST_WRONG + ID_LAST_WRONG + KV_WRONG)
def test_check_round_names_each_mistake(models, catalogue, mistake):
    caught(exercise.check_round, _round(mistake), S.draft, models=models,
           words=["check_round: greedy", literal(catalogue[0])])


@pytest.mark.parametrize("mistake,words", [
    ("seq_rm at n_past + 1", ["target KV cache must hold exactly [0, n_past)", "still holds position"]),
    ("no seq_rm", ["target KV cache", "drops the rejected rows"]),
    ("seq_rm before n_past moves", ["target KV cache", "committed rows were lost"]),
    ("forget id_last", ["n_past after the round", "id_last's row counts too"]),
    ("id_last = ids[0]", ["id_last after the round", "the first id"]),
    ("no draft rollback", ["BatchError", "roll it back with ctx_dft.seq_rm(0, n_past, -1)"]),
    ("no replay", ["draft KV cache", "replay the verification batch"]),
])
def test_check_round_catches(models, mistake, words):
    caught(exercise.check_round, _round(mistake), S.draft, models=models, words=["check_round: greedy"] + words)


def test_check_round_catches_a_round_that_drafts_twice_or_not_at_all(models):
    def twice(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn):
        draft_fn(id_last, n_past)
        ctx_dft.seq_rm(0, n_past, -1)
        return S.speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn)
    caught(exercise.check_round, twice, S.draft, models=models, words=["call draft_fn(id_last, n_past) once"])
    caught(exercise.check_round, lambda *a: (1, 2), S.draft, models=models,
           words=["must return (draft, ids, n_past, id_last)"])
    caught(exercise.check_round, lambda *a: ([], [], 0, 0), S.draft, models=models, words=["ids is empty"])


def test_check_round_names_a_wrong_draft_or_verification(models):
    caught(exercise.check_round, S.speculative_round, _draft("past n_max"), models=models,
           words=["the draft differs", "check_draft"])

    def round_with(verify):
        def speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn):
            old = S.sample_and_accept_n
            S.sample_and_accept_n = verify
            try:
                return S.speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn)
            finally:
                S.sample_and_accept_n = old
        return speculative_round
    caught(exercise.check_round, round_with(_verify("no bonus")), S.draft, models=models,
           words=["no bonus token", "check_sample_and_accept_n"])


# ---- step 3 against llama.cpp's recorded run ---------------------------------------------------------
def test_the_recorded_trace_reads():
    tr, counts = exercise.read_trace(), exercise.read_counts()
    assert tr["prompt_ids"] == [6403, 1980, 253, 655] and len(tr["steps"]) == 64
    assert sum(a + 1 for _, a, _ in tr["steps"]) == len(tr["generated_ids"]) == 129
    assert [t for d, a, t in tr["steps"] for t in d[:a] + [t]] == tr["generated_ids"]
    assert counts == {"n_draft": 3, "n_predict": 33, "n_drafted": 42, "n_accept": 19}


@pytest.mark.slow
def test_check_trace(capsys):
    from specnb.model.registry import REGISTRY, DEFAULT_TARGET, check_parts
    if not check_parts(REGISTRY[DEFAULT_TARGET]).ok:
        pytest.skip("the default target is not installed")
    exercise.check_trace(S.speculative_round, S.draft)
    assert "16 recorded steps" in capsys.readouterr().out
    caught(exercise.check_trace, _round("forget id_last"), S.draft, words=["recorded step 0", "id_last's row"])
    caught(exercise.check_trace, S.speculative_round, _draft("past n_max"),
           words=["n_predict = 33, n_drafted = 42, n_accept = 19; your rounds give"])


# ---- step 4 --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def measured(models):
    """The solution's step-4 numbers on the tiny pair (its counts are deterministic; the checks of
    the two speed-ups use the dict's own numbers)."""
    pair = exercise.exercise_pair(models, n_ctx=exercise.N_CTX)
    prompt = models[0].vocab.tokenize(exercise.PROMPT)
    return S.measure(pair.ctx_tgt, pair.ctx_dft, prompt, 48, 3)


def _timed(base, ratios, predicted=None):
    """base with times whose paired speed-ups per token are `ratios`, and its `measured` and
    `predicted` consistent with them."""
    d = dict(base, t_plain=[1.0 + 0.1 * i for i in range(len(ratios))])
    d["t_spec"] = [tp / 48 / r * d["n_tokens"] for tp, r in zip(d["t_plain"], ratios)]
    d["measured"] = statistics.median(ratios)
    if predicted is not None:     # the model's prediction moved, through c (the dict stays consistent)
        d["bc"] = d["bd"] = {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.15}
        d["c"] = (_tau(d) / predicted - 1.15) / (3 + 1.15)
    d["predicted"] = d["n_tokens"] / d["n_rounds"] / (3 * d["c"] + d["bc"][4] + d["c"] * d["bd"][4])
    return d


def test_check_speedup_runs_the_solution(models, capsys):
    exercise.check_speedup(S.measure, models=models, n_predict=16, n_max=2)
    out = capsys.readouterr().out
    assert "check_speedup: speculation against plain decoding, by your 3 pairs: " in out
    assert "one-row target steps" in out and "break-even" in out and "costs record" in out


@pytest.mark.parametrize("ratios,predicted,word", [
    ([1.5, 1.6, 1.4], 0.8, "wins"),                 # the measurement wins where the model says it would lose
    ([0.5, 0.6, 0.55], 1.6, "loses"),
    ([0.9, 1.12, 1.0], 1.6, "within the noise"),
    ([1.2, 1.3, 1.25, 1.1, 1.22, 1.28], 1.2, "wins"),   # from 5 pairs the interval is a bootstrap one
])
def test_check_speedup_judges_from_the_measurement(models, measured, capsys, ratios, predicted, word):
    from specnb.measure.verdict import check_said, interval, said
    exercise.check_speedup(lambda *a: _timed(measured, ratios, predicted), models=models)
    out = capsys.readouterr().out
    iv = interval(_per_token(_timed(measured, ratios)))
    assert f"by your {len(ratios)} pairs: {said(iv)}" in out and said(iv).startswith(word)
    assert check_said(out) == []
    assert f"the engine model predicts {predicted:.2f}x" in out
    assert ("does not decide" in out) == (word == "within the noise")


def _with(base, change):
    def measure(*a):
        d = dict(base)
        for k, f in change.items():
            if f is None:
                del d[k]
            else:
                d[k] = f(d)
        return d
    return measure


def _tau(d):
    return d["n_tokens"] / d["n_rounds"]


def _per_token(d):
    return [(tp / 48) / (ts / d["n_tokens"]) for tp, ts in zip(d["t_plain"], d["t_spec"])]


MEASURED_WRONG = [
    lambda d: statistics.median(tp / ts for tp, ts in zip(d["t_plain"], d["t_spec"])),
    lambda d: statistics.median(1 / r for r in _per_token(d)),
    lambda d: (min(d["t_plain"]) / 48) / (min(d["t_spec"]) / d["n_tokens"]),
    lambda d: statistics.fmean(_per_token(d)),
]
PREDICTED_WRONG = [
    lambda d: _tau(d) / (3 * d["c"] + 1),
    lambda d: _tau(d) / (3 * d["c"] + d["bc"][4]),
    lambda d: _tau(d) / (3 * d["c"] + 1 + d["c"]),
    lambda d: _tau(d) / (4 * d["c"] + d["bc"][4] + d["c"] * d["bd"][4]),
    lambda d: _tau(d) / (3 * d["c"] + d["bc"][3] + d["c"] * d["bd"][3]),
    lambda d: _tau(d) / (3 * d["c"] + d["bc"][4] + d["c"] * d["bc"][4]),
    lambda d: (3 * d["c"] + d["bc"][4] + d["c"] * d["bd"][4]) / _tau(d),
]


@pytest.mark.parametrize("key,k", [*[("measured", k) for k in range(len(MEASURED_WRONG))],
                                   *[("predicted", k) for k in range(len(PREDICTED_WRONG))]])
def test_check_speedup_names_each_mistake(models, measured, key, k):
    base = _timed(measured, [1.3, 0.8, 1.1])
    wrong, catalogue = ((MEASURED_WRONG, X4.MEASURED_MISTAKES) if key == "measured" else
                        (PREDICTED_WRONG, X4.PREDICTED_MISTAKES))
    caught(exercise.check_speedup, _with(base, {key: wrong[k]}), models=models,
           words=[f"check_speedup: {key} = ", literal(catalogue[k][0])])


@pytest.mark.parametrize("change,words", [
    (dict(predicted=lambda d: _tau(d) / (3 * d["c"] + 1)), ["Leviathan"]),
    (dict(predicted=lambda d: _tau(d) / (3 * d["c"] + d["bc"][4])), ["leaves out the draft's replay"]),
    (dict(measured=lambda d: statistics.median(1 / r for r in _per_token(d))), ["upside down"]),
    (dict(measured=lambda d: statistics.median(tp / ts for tp, ts in zip(d["t_plain"], d["t_spec"]))),
     ["times per token"]),
    (dict(bc=lambda d: {k: v * 1e-3 for k, v in d["bc"].items()}), ["bc[1] = 0.001", "divide every k-row time"]),
    (dict(bd=lambda d: {1: 1.0, 2: 1.1}), ["bd needs the rows 1..n_max+1", "[3, 4] missing"]),
    (dict(n_tokens=lambda d: d["n_tokens"] - d["n_rounds"]), ["each round commits len(ids) tokens"]),
    (dict(c=None), ["lacks c"]),
    (dict(t_plain=lambda d: d["t_plain"][0]), ["t_plain must be a list of at least 3 times", "decides nothing"]),
    (dict(t_spec=lambda d: d["t_spec"][:2]), ["t_spec must be a list of at least 3 times"]),
    (dict(t_spec=lambda d: d["t_spec"] + [1.0]), ["3 plain times but 4 speculative ones"]),
])
def test_check_speedup_catches(models, measured, change, words):
    caught(exercise.check_speedup, _with(measured, change), models=models, words=["check_speedup: "] + words)


def test_step_4_runs_on_the_real_pair_where_it_is_installed(monkeypatch):
    monkeypatch.setattr(X4, "real_pair_installed", lambda: True)
    assert X4.step4_models(None) == ("real", "")
    monkeypatch.setattr(X4, "real_pair_installed", lambda: False)
    models, note = X4.step4_models(None)
    assert models == "default" and "not installed" in note and "loses there whatever τ" in note
    assert X4.step4_models("tiny") == ("tiny", "")


# ---- step 5 (optional): ngram-simple ------------------------------------------------------------------
def test_the_ngram_cases_are_llamacpps():
    """NGRAM_CASES' written-out drafts are specnb's port's (tested against llama.cpp), and so is the
    rule the catalogue varies, on those and on random histories."""
    from specnb.speculation.ngram import ngram_simple_draft
    for toks, id_last, n, m, want, _ in X5.NGRAM_CASES:
        assert ngram_simple_draft(toks, id_last, n, m)[0] == want == X5.ngram_rule(toks, id_last, n, m)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        toks = [int(t) for t in rng.integers(0, 4, size=int(rng.integers(1, 40)))]
        n, m, id_last = int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(0, 4))
        assert X5.ngram_rule(toks, id_last, n, m) == ngram_simple_draft(toks, id_last, n, m)[0]
        assert S.ngram_draft(toks, id_last, n, m) == ngram_simple_draft(toks, id_last, n, m)[0]


def _ngram(mistake):
    def ngram_draft(tokens, id_last, size_n, size_m):
        if len(tokens) <= size_n + size_m + 1 and mistake != "no floor":
            return []
        key = tokens[-size_n:] if mistake == "key without id_last" else tokens[len(tokens) - size_n + 1:] + [id_last]
        starts = list(range(len(tokens) - size_n - 1, -1 if mistake == "from position 0" else 0, -1))
        for j in (starts[::-1] if mistake == "earliest" else starts):
            if tokens[j:j + size_n] == key:
                follow = tokens[j + size_n:j + size_n + size_m]
                return follow if len(follow) >= size_n or mistake == "keep short" else []
        return []
    return ngram_draft


NGRAM_WRONG = ["earliest", "from position 0", "no floor", "keep short", "key without id_last"]


@pytest.mark.parametrize("k", range(len(NGRAM_WRONG)), ids=NGRAM_WRONG)
def test_check_ngram_names_each_mistake(models, k):
    caught(exercise.check_ngram, _ngram(NGRAM_WRONG[k]), S.speculative_round, models=models,
           words=["check_ngram: tokens=", literal(X5.NGRAM_MISTAKES[k][0])])


def test_check_ngram_runs_your_round(models):
    caught(exercise.check_ngram, S.ngram_draft, _round("forget id_last"), models=models,
           words=["check_ngram: greedy, ngram-simple", "id_last's row counts too"])


# ---- the starter --------------------------------------------------------------------------------------
STARTER = ROOT / "specnb" / "app" / "exercise" / "starter.py"


def test_the_starter_is_printed_and_written(tmp_path):
    run = [sys.executable, "-m", "specnb.app.exercise", "starter"]
    out = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout == STARTER.read_text(encoding="utf-8")
    dst = tmp_path / "mine.py"
    assert subprocess.run(run + [str(dst)], capture_output=True, cwd=tmp_path, timeout=120).returncode == 0
    assert dst.read_text(encoding="utf-8") == STARTER.read_text(encoding="utf-8")
    again = subprocess.run(run + [str(dst)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert again.returncode == 1 and "not overwritten" in again.stderr
    assert subprocess.run(run[:-1], capture_output=True, timeout=120).returncode == 2


def test_the_starter_runs_and_says_the_next_step(tmp_path):
    dst = tmp_path / "my_draft_simple.py"
    dst.write_text(STARTER.read_text(encoding="utf-8"), encoding="utf-8")
    out = subprocess.run([sys.executable, str(dst)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'next: step 1, write draft (docs/exercise.md, "Step 1: the draft")' in out.stdout


def test_the_starter_asks_for_the_solutions_functions():
    import inspect
    tree = ast.parse(STARTER.read_text(encoding="utf-8"))
    asked = {f.name: [a.arg for a in f.args.args] for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert set(asked) == {"draft", "sample_and_accept_n", "speculative_round", "measure", "ngram_draft"}
    for fn, params in asked.items():
        assert list(inspect.signature(getattr(S, fn)).parameters)[:len(params)] == params, fn
    assert all(exercise.steps.unwritten(getattr(S, fn)) is False for fn in asked)


def test_run_steps_stops_at_the_first_step_to_do(capsys):
    ran = []

    def todo(x):
        """Still the starter's."""
        raise NotImplementedError("step 2")

    def check(*fns):
        ran.append(fns)

    def failing(*fns):
        raise AssertionError("check_x: position 3: expected 7, got 8")
    assert exercise.steps.unwritten(todo) and not exercise.steps.unwritten(check)
    assert exercise.run_steps([(1, check, (S.draft,)), (2, check, (todo,)), (3, check, (S.draft,))]) is False
    assert ran == [(S.draft,)] and "next: step 2, write todo" in capsys.readouterr().out
    assert exercise.run_steps([(1, failing, (S.draft,)), (2, check, (S.draft,))]) is False
    assert "step 1 does not pass yet:\n  check_x: position 3" in capsys.readouterr().out
    assert exercise.run_steps([(1, check, (S.draft,)), (5, check, (todo,))]) is True
    assert "every required step passed. Optional next: step 5" in capsys.readouterr().out
    assert exercise.run_steps([(1, check, (S.draft,))]) is True
    assert "every step passed" in capsys.readouterr().out


# ---- the page ------------------------------------------------------------------------------------------
def test_the_page_names_what_exists():
    """Every code block of docs/exercise.md parses; what it imports from specnb exists; the
    functions it asks for are the solution's, with its parameters; it links the starter."""
    import importlib
    import inspect
    text = (ROOT / "docs" / "exercise.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 6
    imported, asked = {}, {}
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("specnb"):
                imported.setdefault(node.module, set()).update(a.name for a in node.names)
            elif isinstance(node, ast.FunctionDef):
                asked[node.name] = [a.arg for a in node.args.args]
    names = imported.get("specnb.app.exercise", set()) | set(re.findall(r"\bexercise\.(\w+)", text))
    assert {"check_draft", "check_sample_and_accept_n", "check_round", "check_trace", "check_speedup",
            "check_ngram", "draft_sampler", "exercise_pair"} <= names
    for module, ns in [*imported.items(), ("specnb.app.exercise", names)]:
        mod = importlib.import_module(module)
        missing = sorted(n for n in ns if not hasattr(mod, n))
        assert not missing, f"docs/exercise.md names {missing}, which {module} lacks"
    assert set(asked) == {"draft", "sample_and_accept_n", "speculative_round", "measure", "ngram_draft"}
    for fn, params in asked.items():
        assert list(inspect.signature(getattr(S, fn)).parameters)[:len(params)] == params, fn
    # the calls the page shows and the checks' docstrings agree on the signatures
    for fn, check in (("draft", exercise.check_draft), ("speculative_round", exercise.check_round),
                      ("measure", exercise.check_speedup), ("ngram_draft", exercise.check_ngram)):
        assert ", ".join(asked[fn][:4]) in " ".join(check.__doc__.split()), fn
    assert "../specnb/app/exercise/starter.py" in text and "python -m specnb.app.exercise starter" in text
    assert re.search(r"minutes", text) and "rubric" in text.lower()


def test_no_grader_is_over_80_lines():
    """Each check and each helper of the exercise is a screen or less; no file of it is over 600 lines."""
    for p in (ROOT / "specnb" / "app" / "exercise").glob("*.py"):
        src = p.read_text(encoding="utf-8")
        assert len(src.splitlines()) <= 600, p.name
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef):
                n = node.end_lineno - node.lineno + 1
                assert n <= 80, f"{p.name}: {node.name} has {n} lines"


def test_the_catalogue_texts_format():
    """Every catalogue text formats, whatever fields its case leaves out (no KeyError, no stray brace)."""
    for text, _ in [*X1.DRAFT_MISTAKES, *X2.IDS_MISTAKES, *X3.KV_MISTAKES, *X4.MEASURED_MISTAKES]:
        out = string.Formatter().vformat(text, (), exercise.grading._Fields(n_max=3))
        assert "{" not in out and "}" not in out, text
