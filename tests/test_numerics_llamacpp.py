"""specnb's logits against llama.cpp's own, teacher-forced on one token stream.

The reference rows are printed by libllama at c392e50 (tests/data/llamacpp_logits_top32_*: the
32 largest logits at each of 256 positions of tests/data/ppl_text.txt, one token per decode or
five, with an F16 or F32 KV cache; tests/data/README.md says how). The yardstick is llama.cpp
against itself: the same build, five tokens per decode instead of one, differs from its one-token
rows as much as specnb does. Measure: at each position, the largest difference of
(logit - the row's largest logit) over llama.cpp's 32 candidates; then its median and 90th
percentile over the positions, and how often the two agree on the top token.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"


def read_rows(name: str):
    """-> (ids, [[(id, logit) x 32] per position])."""
    ids, rows = None, []
    for line in (DATA / f"llamacpp_logits_top32_{name}.txt").read_text().splitlines():
        if line.startswith("# ids:"):
            ids = [int(x) for x in line[6:].split()]
        elif line and not line.startswith("#"):
            rows.append([(int(a), float(b)) for a, b in (p.split(":") for p in line.split()[1:])])
    return ids, rows


def distance(ref, other) -> dict:
    """ref: llama.cpp rows; other: full logit rows (an array) or llama.cpp rows of another run."""
    top1, dmax = [], []
    for r, g in zip(ref, other):
        ids = np.array([i for i, _ in r])
        lr = np.array([v for _, v in r])
        if isinstance(g, np.ndarray):
            lg, top, gmax = g[ids].astype(np.float64), int(np.argmax(g)), float(g.max())
        else:
            d = dict(g)
            lg, top, gmax = np.array([d.get(i, np.nan) for i in ids]), g[0][0], g[0][1]
        top1.append(top == r[0][0])
        dmax.append(np.nanmax(np.abs((lg - gmax) - (lr - lr[0]))))
    return {"top1": float(np.mean(top1)), "median": float(np.median(dmax)),
            "p90": float(np.percentile(dmax, 90)), "max": float(np.max(dmax))}


def _logits(model, ids, activations):
    from specnb.run.context import Batch, Context
    ctx = Context(model, n_ctx=len(ids) + 8, activations=activations)
    b = Batch()
    for i, t in enumerate(ids):
        b.add(t, i, 0, True)
    return np.asarray(ctx.decode(b))


def _check(model, name, activations=("q8", "f32")):
    ids, one = read_rows(f"{name}_one_kvf16")
    text = (DATA / "ppl_text.txt").read_text()
    assert model.vocab.tokenize(text)[:len(ids)] == ids     # the stream llama.cpp was fed
    yard = None
    if (DATA / f"llamacpp_logits_top32_{name}_chunk5_kvf16.txt").exists():
        yard = distance(one, read_rows(f"{name}_chunk5_kvf16")[1])
    got = {}
    for act in activations:
        got[act] = d = distance(one, _logits(model, ids, act))
        assert d["top1"] >= 0.93, (act, d)
        if yard is not None:       # as near to llama.cpp as llama.cpp is to itself, within 25%
            assert d["median"] <= 1.25 * yard["median"] + 0.02, (act, d, yard)
            assert d["p90"] <= 1.25 * yard["p90"] + 0.02, (act, d, yard)
    return one, got, yard


@pytest.mark.slow
def test_default_model_logits_as_near_llama_cpp_as_it_is_to_itself(default_model):
    one, got, yard = _check(default_model, "smollm2")
    # the F16 KV cache llama.cpp uses by default is not what separates the two: its F32-cache
    # rows are as far from its F16-cache rows as specnb's are from either
    f32kv = distance(one, read_rows("smollm2_one_kvf32")[1])
    assert abs(f32kv["median"] - got["q8"]["median"]) < 0.1, (f32kv, got)


@pytest.mark.slow
def test_real_pair_logits_as_near_llama_cpp_as_it_is_to_itself(qwen_target, qwen_draft):
    one, got, yard = _check(qwen_target, "qwen2.5-coder-1.5b")
    _check(qwen_draft, "qwen2.5-coder-0.5b", activations=("q8",))


@pytest.mark.slow
def test_first_position_needs_int8_activations(qwen_target):
    """Position 0 of Qwen2.5-Coder-1.5B (massive activations on the first token): exact arithmetic
    (f32, equal to the float64 oracle there) tops token 16 at about 7.9; int8-rounded activations,
    as llama.cpp's CPU backend computes, top token 15 at about 14.4. specnb's q8 mode gives
    llama.cpp's row; its f32 mode does not."""
    ids, one = read_rows("qwen2.5-coder-1.5b_one_kvf16")
    llama_top, llama_max = one[0][0]
    q8 = _logits(qwen_target, ids[:1], "q8")[0]
    f32 = _logits(qwen_target, ids[:1], "f32")[0]
    assert int(np.argmax(q8)) == llama_top and abs(float(q8.max()) - llama_max) < 0.2
    assert int(np.argmax(f32)) != llama_top and float(f32.max()) < llama_max - 4
