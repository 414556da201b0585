"""The draft vocabulary (FR-Spec, speculation/draft_vocab.py): the ranking read from the GGUF
file's own tables, a restricted head that computes exactly those columns of the full logits, a
sampler that maps them back to real ids, and speculative output identical to plain decoding
with it (greedy and sampled, fixed and auto lengths, the chain, checkpoints, rejection mode)."""
import numpy as np
import pytest

from specnb.errors import ParamError
from specnb.gguf.file import GGUFFile
from specnb.run.context import Batch, Context
from specnb.run.generate import generate
from specnb.run.pair import open_pair
from specnb.run.sampling import Sampler, SamplerParams
from specnb.speculation.draft_vocab import DEFAULT_DRAFT_VOCAB, draft_output_ids, token_rank
from specnb.speculation.loop import SpeculativeLoop
from specnb.speculation.params import SpecParams

PROMPT = "Once upon a time"


def test_rank_follows_the_files_merge_table(pair, pair_paths):
    _, dft = pair
    meta = GGUFFile(pair_paths[1]).metadata
    tokens, types, merges = (meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"],
                             meta["tokenizer.ggml.merges"])
    made = [tokens.index(a + b) for a, _, b in (m.partition(" ") for m in merges)]
    plain = [i for i, t in enumerate(types) if t in (1, 6) and i not in made]
    assert token_rank(dft.vocab).tolist() == plain + made          # bytes first, then merge order
    assert all(types[i] != 3 for i in token_rank(dft.vocab))       # control tokens are not ranked


def test_output_ids_keep_controls_and_the_prompt(pair):
    v = pair[1].vocab
    ids = draft_output_ids(v, 50, extra=[290, 7])
    assert np.all(np.diff(ids) > 0)
    controls = [i for i in range(v.n_vocab) if v.token_types[i] == 3]
    assert set(controls) | {290, 7} | set(token_rank(v)[:50].tolist()) == set(ids.tolist())
    assert draft_output_ids(v, 0) is None and draft_output_ids(v, v.n_vocab) is None
    for bad in (-1, 2.5, True, "32k"):
        with pytest.raises(ParamError, match="draft_vocab"):
            draft_output_ids(v, bad)
    with pytest.raises(ParamError, match=f"token id {v.n_vocab} is outside"):
        draft_output_ids(v, 50, extra=[v.n_vocab])


@pytest.mark.parametrize("activations", ["q8", "f32"])
def test_restricted_head_is_the_full_heads_columns(pair, activations):
    tgt, _ = pair
    ids = tgt.vocab.tokenize(PROMPT)
    ctx = Context(tgt, n_ctx=64, activations=activations)
    full = ctx.decode(Batch.from_tokens(ids, 0, 0, "all")).copy()
    head = np.array(sorted({1, 5, 40, tgt.n_vocab - 1} | set(range(100, 180, 3))))
    ctx.clear()
    ctx.set_output_ids(head)
    assert ctx.n_logits == len(head)
    sub = ctx.decode(Batch.from_tokens(ids, 0, 0, "all"))
    assert np.array_equal(sub.view(np.uint32), full[:, head].view(np.uint32))
    # the same through the one-line-per-operation pass
    steps = ctx.backend.forward_steps(np.array(ids), np.arange(len(ids)), np.zeros(len(ids), np.int64),
                                      ctx.valid, np.arange(len(ids)))
    assert steps.shape == sub.shape
    # a sampler on this context picks real ids: the argmax over the kept tokens
    assert Sampler(SamplerParams(temp=0.0)).sample(ctx, len(ids) - 1) == head[np.argmax(sub[-1])]
    top = Sampler(SamplerParams(top_k=5, samplers=("top_k",))).distribution(ctx, len(ids) - 1)
    assert set(top.ids.tolist()) <= set(head.tolist()) and top.size == 5
    ctx.clear()
    ctx.set_output_ids(None)
    assert ctx.n_logits == tgt.n_vocab
    assert np.array_equal(ctx.decode(Batch.from_tokens(ids, 0, 0, "all")), full)


def test_restricted_heads_are_kept_for_the_next_switch(pair):
    """A new speculator sets its draft vocabulary twice (without, then with its prompt's tokens):
    the last RESTRICTED_HEADS restricted heads are kept and taken again, and give the logits of
    a head built afresh; the one used longest ago goes first."""
    from specnb.run.backend_cpu import RESTRICTED_HEADS
    tgt, _ = pair
    ids = tgt.vocab.tokenize(PROMPT)
    ctx = Context(tgt, n_ctx=64)
    heads = [np.array(sorted({2, 7} | set(range(50 + i, 150, 5)))) for i in range(RESTRICTED_HEADS + 1)]
    want = []
    for h in heads:
        ctx.clear()
        ctx.set_output_ids(h)
        want.append((ctx.backend._output, ctx.decode(Batch.from_tokens(ids, 0, 0, "last")).copy()))
    ctx.set_output_ids(heads[1])                             # kept: the very same arrays
    assert ctx.backend._output is want[1][0]
    ctx.clear()
    assert np.array_equal(ctx.decode(Batch.from_tokens(ids, 0, 0, "last")), want[1][1])
    ctx.set_output_ids(None)
    ctx.set_output_ids(heads[0])                             # the oldest went: built again, same bits
    assert ctx.backend._output is not want[0][0]
    ctx.clear()
    assert np.array_equal(ctx.decode(Batch.from_tokens(ids, 0, 0, "last")), want[0][1])
    assert len([k for k in ctx.backend._heads if k is not None]) == RESTRICTED_HEADS


def test_set_output_ids_refuses_bad_ids(pair):
    ctx = Context(pair[0], n_ctx=16)
    n = pair[0].n_vocab
    for bad, what in (([], "non-empty"), ([3, 2], "ascending"), ([1, 1], "ascending"),
                      ([0, n], rf"\[0, {n}\)"), ([-1, 4], rf"\[0, {n}\)"), ([[1, 2]], "1-D"),
                      ([0.5, 2.0], "token ids")):
        with pytest.raises(ParamError, match=what):
            ctx.set_output_ids(np.array(bad))
    assert ctx.output_ids is None                       # nothing changed
    ctx.set_output_ids(np.arange(n))                    # the whole vocab is no restriction
    assert ctx.output_ids is None


def _plain(model, prompt, sp, n):
    return generate(Context(model, n_ctx=128), Sampler(sp, model.n_vocab), prompt, n).tokens


CASES = {
    "greedy, fixed": (SamplerParams(temp=0.0, seed=1), dict(n_max=4)),
    "sampled, fixed": (SamplerParams(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7), dict(n_max=3)),
    "sampled, auto": (SamplerParams(temp=0.8, top_k=40, seed=5), dict(n_max="auto")),
    "greedy, heuristic": (SamplerParams(temp=0.0, seed=1), dict(n_max="heuristic:8")),
    "greedy, the chain": (SamplerParams(temp=0.0, seed=1), dict(n_max=3, types=("ngram-simple", "draft-simple"))),
    "sampled, checkpoints": (SamplerParams(temp=0.9, seed=3), dict(n_max=3, seq_rm=False)),
    "sampled, draft keeps rows": (SamplerParams(temp=0.9, seed=4), dict(n_max=5, reeval=False)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_draft_vocabulary_is_lossless(pair, case):
    tgt, dft = pair
    sp, spec = CASES[case]
    spec = dict(spec)
    seq_rm = spec.pop("seq_rm", True)
    prompt = tgt.vocab.tokenize(PROMPT)
    n_keep = 60
    p = open_pair(tgt, dft, n_ctx=128, dft_seq_rm=seq_rm)
    loop = SpeculativeLoop(p.ctx_tgt, p.ctx_dft, prompt, 40, sp, SpecParams(draft_vocab=n_keep, **spec))
    events = list(loop.rounds())
    head = p.ctx_dft.output_ids
    assert head is not None and len(head) < dft.n_vocab               # the restriction was in force
    assert set(prompt[:-1]) <= set(head.tolist())                      # the committed prompt (begin)
    drafted = [t for ev in events for t in ev.slot.draft]
    assert set(drafted) <= set(head.tolist())                          # every draft token from it
    assert drafted or spec["n_max"] == "auto"          # (auto may find drafting does not pay here)
    assert loop.results()[0].tokens == _plain(tgt, prompt, sp, 40)


def test_rejection_mode_with_a_draft_vocabulary_keeps_q_on_real_ids(pair):
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    p = open_pair(tgt, dft, n_ctx=128)
    loop = SpeculativeLoop(p.ctx_tgt, p.ctx_dft, prompt, 24, SamplerParams(temp=0.9, seed=2),
                           SpecParams(n_max=3, draft_vocab=60, verify="rejection"))
    list(loop.rounds())
    impl = loop.chain.impls[0]
    head = set(p.ctx_dft.output_ids.tolist())
    qs = [q for s in range(1) for q in impl.draft_dists(s) or []]
    assert qs and all(set(q.ids.tolist()) <= head for q in qs)
    assert len(loop.results()[0].tokens) == 24


def test_a_new_loop_sets_the_head_it_asks_for(pair):
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    p = open_pair(tgt, dft, n_ctx=128)
    SpeculativeLoop(p.ctx_tgt, p.ctx_dft, prompt, 4, SamplerParams(temp=0.0), SpecParams(draft_vocab=60))
    assert p.ctx_dft.output_ids is not None
    SpeculativeLoop(p.ctx_tgt, p.ctx_dft, prompt, 4, SamplerParams(temp=0.0), SpecParams())
    assert p.ctx_dft.output_ids is None and p.ctx_tgt.output_ids is None
    with pytest.raises(ParamError, match="draft_vocab"):
        SpecParams(draft_vocab=-5).validate()


def test_default_size_keeps_a_real_vocab_s_common_tokens(qwen_draft):
    v = qwen_draft.vocab
    ids = draft_output_ids(v, DEFAULT_DRAFT_VOCAB)
    assert DEFAULT_DRAFT_VOCAB <= len(ids) < DEFAULT_DRAFT_VOCAB + 300       # + the control tokens
    for text in ("def ", " return", "    ", "self", " the", "import numpy as np\n"):
        assert set(v.tokenize(text, add_special=False)) <= set(ids.tolist()), text
