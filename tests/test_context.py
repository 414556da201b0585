"""Context.decode against the NumPy reference; batch invariance; seq_rm; state save/load; bad batches."""
import numpy as np
import pytest

from specnb import BatchError, ContextFullError, ParamError
from specnb.run.context import Batch, Context, can_seq_rm
from specnb.model import load_model
from specnb.model.reference import Reference

from conftest import TINY_TYPES

# Tolerance of the engine against the float64 NumPy reference on tiny random models: the
# kernels accumulate in float32, so logits (of order 1..10) agree to about 1e-4 relative.
RTOL = 2e-4


def _ids(model, n, seed=0):
    return np.random.default_rng(seed).integers(0, model.n_vocab, n).tolist()


@pytest.mark.parametrize("qtype", TINY_TYPES)
def test_reference_agreement_every_type(tiny_path, qtype):
    m = load_model(tiny_path(qtype))
    ids = _ids(m, 12, seed=1)
    ref = Reference(m).forward(ids)
    ctx = Context(m, n_ctx=64, activations="f32")             # the exact path
    got = ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= RTOL * scale + 1e-5, qtype
    assert (got.argmax(-1) == ref.argmax(-1)).all()


@pytest.mark.parametrize("arch,tied", [("qwen2", True), ("llama", False)])
def test_reference_agreement_arch(tiny_path, arch, tied):
    m = load_model(tiny_path("Q4_0", arch=arch, tied=tied))
    assert m.hparams.tied_output == tied
    ids = _ids(m, 10, seed=2)
    ref = Reference(m).forward(ids)
    got = Context(m, n_ctx=32, activations="f32").decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert np.abs(got - ref).max() <= RTOL * np.abs(ref).max() + 1e-5


def test_incremental_equals_batch_bitwise(tiny_model):
    """Batch invariance: one token at a time, in one batch, or in chunks: identical bits."""
    m = tiny_model
    ids = _ids(m, 20, seed=3)
    full = Context(m, n_ctx=64).decode(Batch.from_tokens(ids, 0, 0, "all"))
    ctx = Context(m, n_ctx=64)
    rows = [ctx.decode(Batch().add(t, i, 0, True))[0] for i, t in enumerate(ids)]
    assert np.array_equal(np.stack(rows), full)
    ctx2 = Context(m, n_ctx=64)
    parts = [ctx2.decode(Batch.from_tokens(ids[a:b], a, 0, "all")) for a, b in ((0, 7), (7, 8), (8, 20))]
    assert np.array_equal(np.concatenate(parts), full)


def test_batch_invariance_across_sequences(tiny_model):
    """A row's logits do not depend on rows of other sequences in the same batch (up to 64 rows)."""
    m = tiny_model
    a, b = _ids(m, 9, 4), _ids(m, 40, 5)
    alone = Context(m, n_ctx=64).decode(Batch.from_tokens(a, 0, 0, "all"))
    ctx = Context(m, n_ctx=64, n_seq_max=3)
    batch = Batch()
    for i in range(40):                      # interleave: b on seq 1, a on seq 2, b on seq 0
        batch.add(b[i], i, 1, False)
        if i < 9:
            batch.add(a[i], i, 2, True)
        if i < 15:
            batch.add(b[i], i, 0, False)
    assert len(batch) == 64
    mixed = ctx.decode(batch)
    assert np.array_equal(mixed, alone)


def test_seq_rm_then_redecode_matches_never_decoded(tiny_model):
    m = tiny_model
    ids = _ids(m, 12, 6)
    other = _ids(m, 5, 7)
    clean = Context(m, n_ctx=32).decode(Batch.from_tokens(ids, 0, 0, "all"))
    ctx = Context(m, n_ctx=32)
    ctx.decode(Batch.from_tokens(ids[:6] + other, 0, 0, "all"))     # wrong tail
    assert ctx.seq_pos_max(0) == 10
    assert ctx.seq_rm(0, 6, -1)
    assert ctx.seq_pos_max(0) == 5
    got = ctx.decode(Batch.from_tokens(ids[6:], 6, 0, "all"))
    assert np.array_equal(got, clean[6:])


def test_holds_names_the_token_in_a_cell(tiny_model):
    """Context.holds(seq, pos, token): what DraftSimple.process asks before re-decoding a row."""
    ctx = Context(tiny_model, n_ctx=32, n_seq_max=2)
    ctx.decode(Batch.from_tokens([5, 6, 7], 0, 1, "none"))
    assert ctx.holds(1, 0, 5) and ctx.holds(1, 2, 7)
    assert not ctx.holds(1, 2, 8)                 # another token at that position
    assert not ctx.holds(0, 0, 5)                 # another sequence
    assert not ctx.holds(1, 3, 0) and not ctx.holds(1, 31, -1)    # past the sequence's end
    ctx.seq_rm(1, 1, -1)
    assert ctx.holds(1, 0, 5) and not ctx.holds(1, 1, 6)
    with pytest.raises(ParamError, match="seq_id"):
        ctx.holds(2, 0, 5)


def test_state_save_load_round_trip(tiny_model):
    m = tiny_model
    ids = _ids(m, 10, 8)
    ctx = Context(m, n_ctx=32)
    ctx.decode(Batch.from_tokens(ids[:6], 0, 0, "none"))
    st = ctx.state_seq_get(0)
    assert st.n_cells == 6
    ref = ctx.decode(Batch.from_tokens(ids[6:], 6, 0, "all"))
    ctx.seq_rm(0, 0, -1)
    assert ctx.seq_pos_max(0) == -1
    ctx.state_seq_set(0, st)
    assert ctx.seq_pos_max(0) == 5
    got = ctx.decode(Batch.from_tokens(ids[6:], 6, 0, "all"))
    assert np.array_equal(got, ref)


def test_recurrent_style_memory_refuses_partial_removal(tiny_model):
    ctx = Context(tiny_model, n_ctx=32, partial_seq_rm=False)
    assert can_seq_rm(ctx) is False
    assert can_seq_rm(Context(tiny_model, n_ctx=32)) is True
    ctx.decode(Batch.from_tokens([5, 6, 7, 8], 0, 0, "none"))
    assert ctx.seq_rm(0, 2, -1) is False and ctx.seq_pos_max(0) == 3    # nothing changed
    assert ctx.seq_rm(0, 10, -1) is True                                 # beyond the end: no-op
    assert ctx.seq_rm(0, -1, -1) is True and ctx.seq_pos_max(0) == -1   # whole sequence


def test_get_logits_ith(tiny_model):
    ctx = Context(tiny_model, n_ctx=32)
    b = Batch.from_tokens([5, 6, 7], 0, 0, "none")
    b.logits[0] = b.logits[2] = True
    out = ctx.decode(b)
    assert np.array_equal(ctx.get_logits_ith(2), out[1])
    assert np.array_equal(ctx.get_logits_ith(-1), out[1])
    with pytest.raises(BatchError, match="row 1 did not request logits"):
        ctx.get_logits_ith(1)


def test_bad_batches(tiny_model):
    ctx = Context(tiny_model, n_ctx=16, n_seq_max=2)
    with pytest.raises(BatchError, match="empty batch"):
        ctx.decode(Batch())
    with pytest.raises(BatchError, match="not contiguous from 0"):
        ctx.decode(Batch().add(5, 1, 0))
    with pytest.raises(BatchError, match="not contiguous"):
        ctx.decode(Batch().add(5, 0, 0).add(6, 2, 0))
    with pytest.raises(BatchError, match="seq_id 2 .* n_seq_max=2"):
        ctx.decode(Batch().add(5, 0, 2))
    with pytest.raises(BatchError, match=f"token id {tiny_model.n_vocab}"):
        ctx.decode(Batch().add(tiny_model.n_vocab, 0, 0))
    with pytest.raises(ContextFullError, match="n_ctx=16"):
        ctx.decode(Batch.from_tokens(list(range(5, 22)), 0, 0, "last"))
    assert ctx.seq_pos_max(0) == -1        # failed batches leave the memory untouched
    with pytest.raises(ParamError, match="seq_id"):
        ctx.seq_rm(5, 0, -1)
    with pytest.raises(ParamError, match="n_ctx"):
        Context(tiny_model, n_ctx=0)
    with pytest.raises(ParamError, match="n_seq_max"):
        Context(tiny_model, n_seq_max=0)
    with pytest.raises(ParamError, match="backend"):
        Context(tiny_model, backend="tpu")


def _batch_verdict_numpy(ctx, b):
    # llama_batch_allocr::init's checks as whole-array NumPy statements: the oracle for decode's
    # plain-Python checks (None: valid; else the exception type and its message)
    tokens, pos, seq = (np.asarray(v, dtype=np.int64) for v in (b.tokens, b.pos, b.seq_id))
    if len(tokens) == 0:
        return BatchError, "decode: empty batch (llama_decode rejects n_tokens == 0)"
    bad = np.nonzero((tokens < 0) | (tokens >= ctx.model.n_vocab))[0]
    if len(bad):
        return BatchError, (f"decode: token id {tokens[bad[0]]} at row {bad[0]} is outside "
                            f"the vocab [0, {ctx.model.n_vocab})")
    bad = np.nonzero((seq < 0) | (seq >= ctx.n_seq_max))[0]
    if len(bad):
        return BatchError, f"decode: seq_id {seq[bad[0]]} at row {bad[0]} is outside [0, n_seq_max={ctx.n_seq_max})"
    for s in np.unique(seq):
        p = pos[seq == s]
        expect = ctx.seq_pos_max(int(s)) + 1
        if p[0] != expect or np.any(np.diff(p) != 1):
            return BatchError, (f"decode: positions {p.tolist()[:8]}{'...' if len(p) > 8 else ''} of sequence "
                                f"{s} are not contiguous from {expect} (the last position in its KV cache is "
                                f"{expect - 1}; llama.cpp requires Y = X + 1)")
        if p[-1] >= ctx.n_ctx:
            return ContextFullError, (f"decode: sequence {s} would reach position {p[-1]}, beyond "
                                      f"n_ctx={ctx.n_ctx} (context full)")
    return None


def test_batch_checks_agree_with_whole_array_numpy_checks(tiny_model):
    # decode checks a batch in plain Python over its lists: on every batch, valid or not, it must
    # accept what the NumPy statements accept and name the same first problem
    ctx = Context(tiny_model, n_ctx=12, n_seq_max=3)
    ctx.decode(Batch.from_tokens([5, 6, 7], 0, 1, "none"))     # sequence 1 holds 0..2
    rng = np.random.default_rng(4)
    n_vocab, verdicts = tiny_model.n_vocab, set()
    for _ in range(400):
        b = Batch()
        nxt = {0: 0, 1: 3, 2: 0}
        for _ in range(int(rng.integers(0, 5))):
            s = int(rng.integers(-1, 4)) if rng.random() < 0.1 else int(rng.integers(0, 3))
            p = nxt.get(s, 0) + (int(rng.integers(-2, 3)) if rng.random() < 0.15 else 0)
            p += 10 if rng.random() < 0.05 else 0                  # past n_ctx
            t = int(rng.choice([-1, n_vocab])) if rng.random() < 0.05 else int(rng.integers(0, n_vocab))
            b.add(t, p, s, bool(rng.random() < 0.5))
            nxt[s] = p + 1
        want = _batch_verdict_numpy(ctx, b)
        try:
            ctx._validate(b)
            ok = True
            assert want is None, (b, want)
        except (BatchError, ContextFullError) as e:
            ok = False
            assert want is not None and type(e) is want[0] and str(e) == want[1], (b, e, want)
        verdicts.add(ok)
    assert verdicts == {True, False}
    # a batch that fails in its second ubatch leaves every cell and last position as they were
    ctx = Context(tiny_model, n_ctx=12, n_seq_max=2, n_batch=2)
    ctx.decode(Batch.from_tokens([5, 6], 0, 1, "none"))
    before = (ctx.valid.copy(), ctx.seq_pos_max(0), ctx.seq_pos_max(1))
    forward, calls = ctx.backend.forward, []

    def failing(*a):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return forward(*a)
    ctx.backend.forward = failing
    with pytest.raises(KeyboardInterrupt):
        ctx.decode(Batch().add(7, 2, 1).add(8, 0, 0).add(9, 3, 1).add(10, 1, 0, True))
    assert len(calls) == 2
    assert np.array_equal(ctx.valid, before[0]) and (ctx.seq_pos_max(0), ctx.seq_pos_max(1)) == before[1:]


@pytest.mark.slow
def test_default_model_against_reference(default_model):
    """The engine agrees with the NumPy reference on the real model over 300 positions."""
    m = default_model
    text = open(__file__.replace("test_context.py", "data/ppl_text.txt")).read()
    ids = m.vocab.tokenize(text)[:300]
    ref = Reference(m).forward(ids)
    got = Context(m, n_ctx=512, activations="f32").decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert (got.argmax(-1) == ref.argmax(-1)).mean() == 1.0
    # float32 accumulation over 30 layers: logits of order 10-20 agree to about 1e-2
    assert np.abs(got - ref).max() < 5e-2


def test_plain_generation_times_one_decode_per_token_as_the_loop_does(tiny_model):
    """generate() decodes the prompt but its last token as the prompt, then the last prompt token
    as generation's first 1-row decode: n tokens cost n decodes inside the generation clock, as
    speculative-simple's rounds (id_last first) and llama-bench's tg do. The tokens are those of
    sampling after the whole prompt in one batch (greedy, by hand)."""
    from specnb.run.generate import generate
    from specnb.run.sampling import Sampler, SamplerParams
    prompt = np.random.default_rng(5).integers(0, tiny_model.n_vocab, 9).tolist()
    ctx = Context(tiny_model, n_ctx=64)
    calls = []
    decode = ctx.decode
    ctx.decode = lambda b: calls.append(len(b)) or decode(b)
    out = generate(ctx, Sampler(SamplerParams(temp=0.0)), prompt, 6, penalize_prompt=False).tokens
    assert calls == [8] + [1] * 6               # prompt[:-1]; its last token; 5 more tokens
    ref, toks = Context(tiny_model, n_ctx=64), []
    logits = ref.decode(Batch.from_tokens(prompt, 0, 0, "last"))[-1]
    for i in range(6):
        toks.append(int(np.argmax(logits)))
        logits = ref.decode(Batch().add(toks[-1], len(prompt) + i, 0, True))[-1]
    assert out == toks
    one = generate(Context(tiny_model, n_ctx=64), Sampler(SamplerParams(temp=0.0)), prompt[:1], 3)
    assert len(one.tokens) == 3                  # a one-token prompt: no prompt batch at all


def test_decode_log_records_each_decode_when_asked(tiny_model):
    """Context.decode_log: None by default (nothing kept); a list gets (rows, seconds) per decode."""
    from specnb.run.context import Batch, Context
    ctx = Context(tiny_model, n_ctx=16)
    ctx.decode(Batch.from_tokens([1, 2], 0, 0, "last"))
    assert ctx.decode_log is None
    ctx.decode_log = []
    ctx.decode(Batch.from_tokens([3, 4, 5], 2, 0, "last"))
    ctx.decode(Batch.from_tokens([6], 5, 0, "last"))
    assert [n for n, _ in ctx.decode_log] == [3, 1] and all(s > 0 for _, s in ctx.decode_log)
