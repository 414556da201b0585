"""The answers of the notebooks' exercises, checked here rather than in the notebooks.

Each notebook's exercise cell computes its answer from the run and calls check(); the answer
itself sits folded in a <details> block. The asserts that pinned those answers used to be hidden
code cells in 01-05, where anyone reading the source on GitHub saw them. They live here now:
each test recomputes what the exercise cell computes, with the library and the models the
notebook uses (the default SmolLM2 pair, f32 activations as in 02-05), and asserts the answer the
folded block gives. Tests that load the default models are marked slow, as elsewhere.
"""
from __future__ import annotations

import numpy as np
import pytest

from specnb import (Batch, Context, DraftParams, DraftSimple, generate, load_model,
                    sample_and_accept_n, Sampler, SamplerParams, SpecParams, SpeculativeLoop)
from specnb.model.registry import default_draft_path, default_target_path

F32 = "f32"          # 02-05 run the float32 reference path, whose numbers do not move
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def smol():
    """(target, draft): the default pair the notebooks use."""
    return load_model(default_target_path()), load_model(default_draft_path())


def _ctx(model, **kw):
    return Context(model, n_ctx=64, activations=F32, **kw)


def _draft_ctx(draft, ids):
    """The draft context holding the prompt but its last token, as 02 and 03 set it up."""
    ctx = _ctx(draft)
    ctx.decode(Batch.from_tokens(ids[:-1], 0, 0, logits="none"))
    return ctx


# ---- 01 · the vocab gate --------------------------------------------------------------------------
@pytest.mark.slow
def test_01_exercise_1_padding_within_the_size_limit(tmp_path):
    """+64 padding tokens pass the gate (at most SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128 apart, and
    ids 5 .. 49151 identical); +200 are refused."""
    from specnb.course import GGUFFile, answers, are_compatible, rewrite
    target_vocab = load_model(default_target_path(), vocab_only=True).vocab
    d = len(target_vocab)
    ex1 = tuple(answers.vocab_size_passes(d, d + extra) for extra in (64, 200))
    assert ex1 == (True, False)
    g = GGUFFile(default_draft_path())
    tokens, types = list(g.get("tokenizer.ggml.tokens")), g.get("tokenizer.ggml.token_type")
    verdicts = []
    for extra in (64, 200):
        md = {"tokenizer.ggml.tokens": tokens + [f"<pad_{i}>" for i in range(extra)],
              "tokenizer.ggml.token_type": np.concatenate([types, np.full(extra, 4, np.int32)])}
        path = rewrite(default_draft_path(), tmp_path / f"pad{extra}.gguf", metadata=md)
        verdicts.append(are_compatible(target_vocab, load_model(path, vocab_only=True).vocab).ok)
    assert tuple(verdicts) == ex1


@pytest.mark.slow
def test_01_exercise_2_the_text_check_starts_at_id_5(tmp_path):
    """Token 3 renamed: compatible; token 5 renamed: refused."""
    from specnb.course import GGUFFile, are_compatible, rewrite
    target_vocab = load_model(default_target_path(), vocab_only=True).vocab
    verdicts = []
    for i in (3, 5):
        texts = list(GGUFFile(default_draft_path()).get("tokenizer.ggml.tokens"))
        texts[i] = texts[i] + "_renamed"
        path = rewrite(default_draft_path(), tmp_path / f"id{i}.gguf", metadata={"tokenizer.ggml.tokens": texts})
        verdicts.append(are_compatible(target_vocab, load_model(path, vocab_only=True).vocab).ok)
    assert tuple(verdicts) == (True, False)


@pytest.mark.slow
def test_01_exercise_3_the_pre_tokenizer_is_not_compared(tmp_path):
    from specnb.course import are_compatible, rewrite
    target_vocab = load_model(default_target_path(), vocab_only=True).vocab
    pre = rewrite(default_draft_path(), tmp_path / "pre.gguf", metadata={"tokenizer.ggml.pre": "default"})
    assert are_compatible(target_vocab, load_model(pre, vocab_only=True).vocab).ok is True


# ---- 02 · greedy drafting -------------------------------------------------------------------------
def _run_draft(target, ctx_dft, n_past, id_last, **kw):
    """02's run_draft: one DraftSimple draft from id_last, rolled back after."""
    impl = DraftSimple(target, ctx_dft, **kw)
    dp = DraftParams(drafting=True, n_max=-1, n_past=n_past, id_last=id_last)
    impl.draft([dp])
    ctx_dft.seq_rm(0, n_past, -1)
    return dp.result, [round(x.p, 3) for x in impl.info[0]]


@pytest.mark.slow
def test_02_exercise_1_p_min_stops_the_draft(smol):
    """n_max=4, p_min=0.3: 3 tokens in 4 rows (the argmax p at steps 0..3 is 0.842, 0.332, 0.311,
    0.242; the rows are the seed row and the three drafted tokens)."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    n_past, id_last = len(ids) - 1, ids[-1]
    ctx_dft = _draft_ctx(draft, ids)
    n0 = ctx_dft.n_eval
    result, seen = _run_draft(target, ctx_dft, n_past, id_last, n_max=4, p_min=0.3)
    assert (len(result), ctx_dft.n_eval - n0) == (3, 4)
    assert seen == [0.842, 0.332, 0.311, 0.242]


@pytest.mark.slow
def test_02_exercise_2_p_depends_on_the_chain(smol):
    """The seed row's argmax: p over the vocab 0.721, p over the top 10 0.842, over the top 40 about
    0.77."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    n_past, id_last = len(ids) - 1, ids[-1]
    ctx_dft = _draft_ctx(draft, ids)
    from specnb.course import answers
    smpl40 = Sampler(SamplerParams(top_k=40, samplers=("top_k",), seed=0))
    row = ctx_dft.decode(Batch().add(id_last, n_past, 0, True))[0]
    smpl40.sample(ctx_dft, 0)
    ctx_dft.seq_rm(0, n_past, -1)
    p40 = float(smpl40.get_candidates().p[0])
    assert tuple(round(b, 3) for b in answers.top_k_p_bounds(row, 10)) == (0.721, 0.842)
    assert round(p40, 2) == 0.77


@pytest.mark.slow
def test_02_exercise_3_rows_per_full_round(smol):
    """A full 4-token draft costs the draft 9 row evaluations with the re-evaluation (2·4 + 1) and 4
    without (SpecParams(reeval=False)): the draft holds every row but the last drafted one, which
    it misses only when the target accepts the whole draft, and then decodes in the next round's
    seed batch (deferred.py); every full draft of this run met a rejection."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    full = {}
    for reeval in (True, False):
        loop = SpeculativeLoop(_ctx(target), _ctx(draft), ids, 16, SamplerParams(temp=0.0, seed=1),
                               SpecParams(n_max=4, reeval=reeval))
        full[reeval] = sorted({ev.n_dft_eval for ev in loop.rounds() if len(ev.slot.draft) == 4})
    assert (full[True], full[False]) == ([9], [4])


# ---- 03 · verification ----------------------------------------------------------------------------
@pytest.mark.slow
def test_03_exercise_1_rounds_are_tokens_minus_accepted(smol):
    """Every round commits its accepted draft tokens and one token of the target's, so rounds =
    tokens - accepted; on this run every round drafts its full n_max = 3."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    sp = SamplerParams(temp=0.0, seed=1)
    loop = SpeculativeLoop(_ctx(target), _ctx(draft), ids, 16, sp, SpecParams(n_max=3))
    tokens = loop.run()[0].tokens
    assert tokens == generate(_ctx(target), Sampler(sp), ids, 16).tokens
    assert loop.n_rounds == len(tokens) - loop.n_accept
    assert loop.n_drafted == 3 * loop.n_rounds


@pytest.mark.slow
def test_03_exercise_2_a_draft_rejected_at_its_first_token(smol):
    """[' I', ' was', ' a', ' bit'] after 'Once upon a time': 1 token committed (the target's ','),
    4 rows wasted."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    n_past, id_last = len(ids) - 1, ids[-1]
    ctx_tgt = _ctx(target)
    ctx_tgt.decode(Batch.from_tokens(ids[:-1], 0, 0, logits="none"))
    bad = [339, 436, 253, 3241]
    ctx_tgt.decode(Batch.from_tokens([id_last] + bad, n_past, 0, logits="all"))
    ids_bad = sample_and_accept_n(Sampler(SamplerParams(temp=0.0, seed=1)), ctx_tgt, bad)
    assert (len(ids_bad), 1 + len(bad) - len(ids_bad)) == (1, 4)
    assert target.vocab.token_to_piece(int(ids_bad[0])) == b","


# ---- 04 · rejection sampling ----------------------------------------------------------------------
def test_04_exercise_1_a_perfect_draft():
    """q = p: exact match keeps a greedy draft with probability p(argmax) = 0.40; the ratio test keeps
    every draft token (β = Σ min(p, p) = 1)."""
    from specnb.course import answers
    p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
    assert tuple(round(a, 3) for a in answers.acceptance(p, p.copy())) == (0.4, 1.0)


@pytest.mark.slow
def test_04_exercise_2_rejection_is_lossless_in_distribution_only(smol):
    """verify="rejection" reproduces plain decoding token for token when greedy, not at
    temperature 0.7 (seed 1, 16 tokens)."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    same = []
    for temp in (0.0, 0.7):
        sp = SamplerParams(temp=temp, seed=1)
        plain = generate(_ctx(target), Sampler(sp), ids, 16)
        loop = SpeculativeLoop(_ctx(target), _ctx(draft), ids, 16, sp, SpecParams(n_max=3, verify="rejection"))
        same.append(loop.run()[0].tokens == plain.tokens)
    assert tuple(same) == (True, False)


# ---- 05 · rollback and KV -------------------------------------------------------------------------
def test_05_exercise_1_n_past_and_the_removed_positions(run_pair):
    """The rule holds on every round of a run (here the tiny pair's); n_past 20, a 4-token draft, 2
    accepted: n_past 23, positions 23 and 24 removed."""
    from specnb.course import answers
    loop, events = run_pair(n_predict=24, n_max=4)
    assert events
    for ev in events:
        r = ev.slot
        assert answers.after_round(r.n_past, len(r.draft), r.n_accepted) == \
            (r.n_past + len(r.committed), r.batch_pos[r.n_accepted + 1:])
    assert answers.after_round(20, 4, 2) == (23, [23, 24])


@pytest.mark.slow
def test_05_exercises_2_and_3_checkpoints(smol):
    """Exercise 2: the target's checkpoint after the n_max=3 checkpoint loop covers 19 positions,
    855 KiB in float32 (427.5 KiB in F16). Exercise 3: at n_max=1 the checkpoint loop takes 2
    replay rounds and 10 rounds, as many as the seq_rm loop, against 11 and 8 at n_max=3; all
    give plain decoding's 16 tokens."""
    target, draft = smol
    ids = target.vocab.tokenize(PROMPT)
    greedy = SamplerParams(temp=0.0, seed=1)
    plain = generate(_ctx(target), Sampler(greedy), ids, 16).tokens
    rounds = {}
    for n_max in (1, 3):
        for seq_rm in (True, False):
            ct = _ctx(target, partial_seq_rm=seq_rm)
            loop = SpeculativeLoop(ct, _ctx(draft), ids, 16, greedy, SpecParams(n_max=n_max))
            evs = list(loop.rounds())
            assert loop.results()[0].tokens == plain
            rounds[n_max, seq_rm] = (sum(ev.slot.replay for ev in evs), len(evs))
            if (n_max, seq_rm) == (3, False):
                state = ct.state_seq_get(0)
                assert state.n_cells == 19
                ex2 = (round(state.nbytes() / 2**10, 1), round(state.nbytes() / 2**10 / 2, 1))
                assert ex2 == (855.0, 427.5)
    assert rounds[1, False] == (2, 10)
    assert rounds[1, True][1] == 10
    assert (rounds[3, False][1], rounds[3, True][1]) == (11, 8)
