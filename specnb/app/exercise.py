"""The capstone's checks (docs/exercise.md): write draft-simple yourself, then compare it with specnb.

    from specnb.app.exercise import check_draft, check_sample_and_accept_n, check_round, check_trace, check_speedup

The learner writes four functions; each check runs the learner's function and specnb's reference on
the same inputs and raises an AssertionError naming the first difference (the case, the position,
what was expected and what came back), or prints one line saying what passed.

  1. draft(ctx_dft, smpl, id_last, n_past, n_max, n_min, p_min) -> list
         check_draft(draft)                        against DraftSimple (speculation/draft_simple.py)
  2. sample_and_accept_n(smpl, ctx_tgt, draft) -> list
         check_sample_and_accept_n(sample_and_accept_n)    against run/sampling.sample_and_accept_n
  3. speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn) -> (draft, ids, n_past, id_last)
         check_round(speculative_round, draft)     against SpeculativeLoop, round by round
         check_trace(speculative_round, draft)     against llama-speculative-simple's recorded run
                                                   (tests/data/, the default SmolLM2 pair)
  4. measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max) -> dict
         check_speedup(measure)                    the engine model's prediction against the timing

`models` picks the pair the checks run on: "tiny" (steps 1-3's default: a random 2-layer model
forged into specnb's cache on first use, with the default pair's tensor types, so it reuses the
kernels the notebooks compiled; a check takes seconds), "default" (SmolLM2-135M and its Q4_0
stand-in draft, the notebooks' pair; step 4's default, since a tiny model's decode is too short to
time), "real" (Qwen2.5-Coder 1.5B and 0.5B), or a (target, draft) tuple of Models, paths or
registry names.
"""
from __future__ import annotations

import functools
import math
import os
import re
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["PROMPT", "N_CTX", "TINY_SEED", "draft_sampler", "tiny_pair_paths", "exercise_models",
           "exercise_pair", "check_draft", "check_sample_and_accept_n", "check_round", "check_trace",
           "check_speedup", "read_trace", "read_counts"]

PROMPT = "Once upon a time"
N_CTX = 256
TINY_SEED = 1             # a seed whose random pair drafts varied text (full, partial and no acceptance)
TRACE_STEPS = 16          # the recorded trace's steps before llama.cpp's batched rows flip a near-tie
TRACE_FILE = "llamacpp_speculative_simple_smollm2.txt"
COUNTS_FILE = "llamacpp_speculative_simple_n32_smollm2.txt"


# ---- the models ------------------------------------------------------------------------------
def draft_sampler(seed: int = 0):
    """The draft sampler of draft-simple: top-k 10, then dist (common/speculative.cpp:224-234)."""
    from ..run.sampling import Sampler, SamplerParams
    return Sampler(SamplerParams(top_k=10, samplers=("top_k",), seed=seed))


def tiny_pair_paths(folder=None, seed: int = TINY_SEED) -> tuple[str, str]:
    """Forge (once) a tiny random target and its Q4_0 draft; returns their paths.

    The target: specnb.model.testing.tiny_model (2 layers, 64 dims, 299 tokens) in Q4_1 with an
    untied Q8_0 output head; the draft: the target requantized to Q4_0. Those are the default
    SmolLM2 pair's tensor types (Q4_1 and Q4_0 matrices, Q8_0 embedding), so the Numba pass the
    notebooks compiled serves them too."""
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import dequantize, quantize

    from ..cache import cache_dir
    from ..gguf.forge import requantize, rewrite
    from ..model.testing import tiny_model
    folder = Path(folder) if folder is not None else cache_dir() / "exercise"
    folder.mkdir(parents=True, exist_ok=True)
    tgt = folder / f"tiny-target-q4_1-s{seed}.gguf"
    dft = folder / f"tiny-draft-q4_0-s{seed}.gguf"
    if not tgt.exists():
        fd, raw = tempfile.mkstemp(prefix=".tiny-", suffix=".gguf", dir=folder)
        os.close(fd)
        try:
            tiny_model(raw, qtype="Q4_1", seed=seed, tied=False)

            def head_q8(t, data):
                if t.name != "output.weight":
                    return data, t.qtype
                x = np.asarray(dequantize(data, QT(t.qtype)), dtype=np.float32).reshape(t.shape[1], t.shape[0])
                return quantize(x, QT.Q8_0), int(QT.Q8_0)
            rewrite(raw, tgt, tensor_fn=head_q8)
        finally:
            os.remove(raw)
    if not dft.exists():
        requantize(tgt, dft, "Q4_0")
    return str(tgt), str(dft)


@functools.lru_cache(maxsize=4)
def _named_models(name: str):
    from ..model import load_model
    from ..model.registry import DEFAULT_DRAFT, DEFAULT_TARGET, REAL_DRAFT, REAL_TARGET
    if name == "tiny":
        return tuple(load_model(p) for p in tiny_pair_paths())
    if name == "default":
        return load_model(DEFAULT_TARGET), load_model(DEFAULT_DRAFT)
    if name == "real":
        return load_model(REAL_TARGET), load_model(REAL_DRAFT)
    raise ValueError(f"models={name!r}: expected 'tiny', 'default', 'real' or a (target, draft) pair")


def exercise_models(models="tiny"):
    """(target, draft) Models: "tiny", "default", "real", or a (target, draft) pair of Models,
    paths or registry names."""
    from ..model import Model, load_model
    if isinstance(models, str):
        return _named_models(models)
    try:
        tgt, dft = models
    except (TypeError, ValueError):
        raise ValueError(f"models={models!r}: expected 'tiny', 'default', 'real' or a (target, draft) "
                         "pair") from None
    return tuple(m if isinstance(m, Model) else load_model(os.fspath(m)) for m in (tgt, dft))


def exercise_pair(models="tiny", n_ctx: int = N_CTX):
    """A Pair (target, draft, ctx_tgt, ctx_dft) of the exercise's models, to try your functions on."""
    from ..run.pair import open_pair
    tgt, dft = exercise_models(models)
    return open_pair(tgt, dft, n_ctx=n_ctx)


def _ctx(model, pair, n_ctx: int = N_CTX):
    """A context that runs the same compiled pass as open_pair's (both models' tensor types)."""
    from ..run.context import Context
    return Context(model, n_ctx=n_ctx, share_kernels_with=tuple(pair))


# ---- helpers -----------------------------------------------------------------------------------
def _hold(ctx, history: list, n: int) -> None:
    """Make sequence 0 of ctx hold exactly history[:n] (keep the rows that match, decode the rest)."""
    from ..run.context import Batch
    first = next((p for p in range(n) if not ctx.holds(0, p, history[p])), n)
    ctx.seq_rm(0, first, -1)
    if first < n:
        ctx.decode(Batch.from_tokens(history[first:n], first, 0, "none"))


def _history(tgt, pair, prompt: list, n: int) -> list:
    """The prompt and the target's greedy continuation of it (up to n tokens)."""
    from ..run.generate import generate
    from ..run.sampling import Sampler, SamplerParams
    out = generate(_ctx(tgt, pair), Sampler(SamplerParams(temp=0.0)), prompt, n, penalize_prompt=False)
    return list(prompt) + list(out.tokens)


def _tokens(x, what: str, name: str) -> list:
    """x as a list of ints, or an AssertionError saying what came back instead."""
    try:
        out = [int(t) for t in x]
        if any(int(t) != t for t in x):
            raise TypeError
        return out
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {what} must be a list of token ids (ints), got {x!r:.120}") from None


def _hint(err: Exception, ctx_tgt=None, ctx_dft=None, n_past=None) -> str:
    """A hint for the usual exceptions of the API (positions that are not contiguous, rows without
    logits)."""
    msg = str(err)
    if "not contiguous" in msg and n_past is not None:
        if ctx_dft is not None and ctx_dft.seq_pos_max(0) >= n_past:
            return (f" | hint: the draft context still holds rows past n_past = {n_past} (its last "
                    f"position is {ctx_dft.seq_pos_max(0)}): after drafting, roll it back with "
                    f"ctx_dft.seq_rm(0, n_past, -1) before replaying the verification batch on it")
        if ctx_tgt is not None and ctx_tgt.seq_pos_max(0) != n_past - 1:
            return (f" | hint: at the start of a round the target must hold exactly [0, n_past) = "
                    f"[0, {n_past}); its last position is {ctx_tgt.seq_pos_max(0)}")
        return (" | hint: a decode must continue right after the last position the context holds "
                "(seq_rm what should not be there)")
    if "not contiguous" in msg:
        return " | hint: a decode must continue right after the last position the context holds"
    if "did not request logits" in msg:
        return (" | hint: sample only rows that asked for logits (Batch.add(..., logits=True)); "
                "row i of the last decode is index i")
    return ""


def _call(name: str, where: str, fn, *args, ctx_tgt=None, ctx_dft=None, n_past=None):
    try:
        return fn(*args)
    except AssertionError:
        raise
    except Exception as e:            # the learner's function failed: name it, with the case
        raise AssertionError(f"{name}: {where}: your function raised {type(e).__name__}: {e}"
                             + _hint(e, ctx_tgt, ctx_dft, n_past)) from e


def _first_diff(want: list, got: list) -> int:
    return next((i for i, (w, g) in enumerate(zip(want, got)) if w != g), min(len(want), len(got)))


# ---- step 1: the draft ---------------------------------------------------------------------------
def _draft_problem(want: list, got: list, info: list, n_max: int, n_min: int, p_min: float) -> str:
    """What differs between llama.cpp's draft `want` and the learner's `got` (want != got).
    info: DraftSimple's record of every argmax it looked at (token, p, stopped_by_p_min)."""
    looked = [x for x in info if not x.stopped_by_p_min]       # the tokens llama.cpp pushed
    stop = info[-1] if info and info[-1].stopped_by_p_min else None
    i = _first_diff(want, got)
    if i < min(len(want), len(got)):
        p = f" (p = {info[i].p:.3f})" if i < len(info) else ""
        return (f"position {i}: expected {want[i]}{p}, got {got[i]}; the draft takes the argmax of "
                f"the draft model's candidates (cur.ids[0] after smpl.sample) at each step, and "
                f"decodes draft[{i - 1}] at n_past + {i}" if i else
                f"position 0: expected {want[0]}{p}, got {got[0]}; decode id_last at n_past (logits on) "
                f"and take the argmax of the draft model's candidates")
    if len(got) > len(want):
        extra = got[len(want):]
        if not want and looked and len(looked) < n_min:
            return (f"expected an empty draft, got {got}: llama.cpp drafted "
                    f"{[x.token for x in looked]} and dropped it, shorter than n_min = {n_min}")
        if len(want) >= n_max:
            return (f"you drafted {len(got)} tokens, past n_max = {n_max}: position {len(want)} "
                    f"got {extra[0]}, expected the draft to end there")
        if stop is not None:
            return (f"position {len(want)}: the argmax {stop.token} has p = {stop.p:.3f} < p_min = "
                    f"{p_min}: llama.cpp stops before pushing it (test p_min, then push); you "
                    f"went on with {extra}")
        return f"you returned {len(extra)} token(s) too many: {extra} after position {len(want) - 1}"
    j = len(got)
    if not got and len(want) >= n_min and 0 < n_min:
        return (f"you returned [], expected {want}: a draft of {len(want)} tokens is not shorter "
                f"than n_min = {n_min}")
    p = info[j].p if j < len(info) else float("nan")
    why = ""
    if p >= p_min:
        why = (f"; that argmax has p = {p:.3f} >= p_min = {p_min} among the top-10 candidates (p "
               "is cur.p[0] after smpl.sample, the argmax's share of the top-10, not of the "
               "whole vocabulary)") if p_min > 0 else f"; p_min = {p_min} never stops a draft"
    return (f"your draft stops after {len(got)} token(s); expected {want[j]} at position {j} "
            f"(n_max = {n_max}){why}")


def check_draft(my_draft, models="tiny") -> None:
    """Step 1: `my_draft(ctx_dft, smpl, id_last, n_past, n_max, n_min, p_min) -> list` against
    DraftSimple, at five positions of a text and eight (n_max, n_min, p_min) settings.

    ctx_dft holds [0, n_past) of sequence 0; smpl is `draft_sampler()`. Compared: the draft, then
    the rows your function decoded on ctx_dft and where it left the draft's KV cache (llama.cpp
    decodes the seed row and each drafted token it drafts on from, and rolls back later)."""
    from ..speculation.draft_simple import DraftSimple
    from ..speculation.impl import DraftParams
    name = "check_draft"
    pair = exercise_models(models)
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    history = _history(tgt, pair, prompt, 40)
    ctx_ref, ctx_mine = _ctx(dft, pair), _ctx(dft, pair)
    last = len(history) - 2
    positions = sorted({min(len(prompt) - 1 + d, last) for d in (0, 5, 11, 18, 26)})
    # p_min from the draft's own probabilities: the median and the upper quartile of the argmaxes
    probe = DraftSimple(tgt, ctx_ref, n_max=8)
    ps = []
    for n_past in positions:
        _hold(ctx_ref, history, n_past)
        dp = DraftParams(drafting=True, n_max=-1, n_past=n_past, id_last=history[n_past], result=[])
        probe.draft([dp])
        ps += [x.p for x in probe.info[0]]
    ps.sort()
    p_mid, p_hi = round(ps[len(ps) // 2], 2), round(ps[(3 * len(ps)) // 4], 2)
    settings = [(1, 0, 0.0), (3, 0, 0.0), (6, 0, 0.0), (4, 0, p_mid), (6, 0, p_hi), (4, 2, p_mid),
                (3, 3, 0.0), (5, 3, p_mid)]
    impls = {s: DraftSimple(tgt, ctx_ref, n_max=s[0], n_min=s[1], p_min=s[2]) for s in settings}
    smpl = draft_sampler()
    seen = {"n_max": 0, "p_min": 0, "n_min": 0}
    n_cases = 0
    for n_past in positions:
        for (n_max, n_min, p_min) in settings:
            where = f"n_past={n_past}, id_last={history[n_past]}, n_max={n_max}, n_min={n_min}, p_min={p_min}"
            _hold(ctx_ref, history, n_past)
            _hold(ctx_mine, history, n_past)
            ds = impls[(n_max, n_min, p_min)]
            dp = DraftParams(drafting=True, n_max=-1, n_past=n_past, id_last=history[n_past],
                             prompt=history[:n_past], result=[])
            e0 = ds.n_eval_draft
            ds.draft([dp])
            want, info = list(dp.result), list(ds.info[0])
            want_rows, want_pos = ds.n_eval_draft - e0, ctx_ref.seq_pos_max(0)
            m0 = ctx_mine.n_eval
            got = _call(name, where, my_draft, ctx_mine, smpl, history[n_past], n_past, n_max, n_min, p_min,
                        ctx_dft=ctx_mine, n_past=n_past)
            got = _tokens(got, "the draft", name)
            if got != want:
                raise AssertionError(f"{name}: {where}: {_draft_problem(want, got, info, n_max, n_min, p_min)}"
                                     f" (expected draft {want}, got {got})")
            rows = ctx_mine.n_eval - m0
            if rows != want_rows:
                raise AssertionError(
                    f"{name}: {where}: the draft {want} is right, but your function decoded {rows} rows on "
                    f"ctx_dft; llama.cpp decodes {want_rows}: the seed row (id_last @ n_past), then one row "
                    f"per drafted token it drafts on from (the token that reaches n_max is not decoded)")
            if ctx_mine.seq_pos_max(0) != want_pos:
                raise AssertionError(
                    f"{name}: {where}: the draft {want} is right, but the draft context's last position is "
                    f"{ctx_mine.seq_pos_max(0)}, llama.cpp's is {want_pos} (leave the rows draft() decoded; "
                    f"the round rolls them back)")
            n_cases += 1
            pushed = [x for x in info if not x.stopped_by_p_min]
            if info and info[-1].stopped_by_p_min:
                seen["p_min"] += 1
            elif len(pushed) >= n_max:
                seen["n_max"] += 1
            if len(pushed) < n_min:
                seen["n_min"] += 1
    print(f"{name}: passed: {n_cases} drafts equal DraftSimple's (n_max 1-{max(s[0] for s in settings)}, n_min "
          f"0-{max(s[1] for s in settings)}, p_min 0-{p_hi}): "
          f"{seen['n_max']} stopped by n_max, {seen['p_min']} by p_min, {seen['n_min']} dropped under n_min")


# ---- step 2: verification --------------------------------------------------------------------------
def _ids_problem(want: list, got: list, draft: list) -> str:
    """What differs between specnb's ids `want` and the learner's `got` for `draft`."""
    n_acc = len(want) - 1
    full = n_acc == len(draft)
    if not draft and not got:
        return (f"no bonus token: with an empty draft, row 0 is sampled once and its token ({want[0]}) is the "
                f"one id")
    if full and got == want[:-1]:
        return (f"no bonus token: all {len(draft)} draft tokens matched, so sample row {len(draft)} "
                f"once more and append its token ({want[-1]})")
    if len(got) > len(want) and got[:len(want)] == want:
        return (f"one token too many: at row {n_acc} the target sampled {want[-1]}, not the draft's "
                f"{draft[n_acc]}; that sample ends the walk (you went on with {got[len(want):]})")
    if not full and len(got) == len(want) and got[:-1] == want[:-1] and got[-1] == draft[n_acc]:
        return (f"position {n_acc}: you returned the draft's token {draft[n_acc]}; the target sampled "
                f"{want[-1]} there, and its own sample replaces the rejected draft token")
    i = _first_diff(want, got)
    if i < min(len(want), len(got)):
        return (f"position {i}: expected {want[i]}, got {got[i]} (row i of the last decode predicts "
                f"draft[i]; sample row i with the target's sampler, then accept the token)")
    if len(got) < len(want):
        return f"your ids stop after {len(got)} token(s); expected {want[len(got)]} at position {len(got)}"
    return f"you returned {len(got) - len(want)} token(s) too many: {got[len(want):]}"


def _oracle(ctx, smpl, history: list, n_past: int, n: int) -> list:
    """The next n tokens plain decoding draws after history[:n_past + 1] with (a copy of) smpl."""
    from ..run.context import Batch
    _hold(ctx, history, n_past)
    tok, out = history[n_past], []
    for i in range(n):
        ctx.decode(Batch().add(tok, n_past + i, 0, True))
        tok = smpl.sample(ctx, 0)
        smpl.accept(tok)
        out.append(tok)
    return out


def _sampler_problem(s_ref, s_mine, base_len: int) -> str:
    """'' when both samplers are in the same state (window of accepted tokens, random numbers)."""
    want, got = list(s_ref.prev)[base_len:], list(s_mine.prev)[base_len:]
    if want != got:
        return (f"the sampler accepted {got}, expected {want}: call smpl.accept(id) once for each "
                f"sampled id, the bonus token included (the penalties and the next rows depend on it)")
    if s_ref.rng.u32() != s_mine.rng.u32():
        return ("the ids are right, but the sampler drew a different number of random numbers: sample "
                "each row once, in order, and no row after the first mismatch")
    return ""


def check_sample_and_accept_n(my_fn, models="tiny") -> None:
    """Step 2: `my_fn(smpl, ctx_tgt, draft) -> list` against specnb's sample_and_accept_n.

    The last decode of ctx_tgt holds [id_last, draft...] with logits on every row. Three target
    samplers (greedy, greedy with a repeat penalty, temperature 0.8) at three positions, each with
    an empty draft, the target's own next 1-4 tokens (every one accepted, then the bonus) and the
    same 4 tokens with one changed at each position. Compared: the ids, then the sampler's state."""
    from ..run.context import Batch
    from ..run.sampling import Sampler, SamplerParams, sample_and_accept_n
    name = "check_sample_and_accept_n"
    pair = exercise_models(models)
    tgt = pair[0]
    prompt = tgt.vocab.tokenize(PROMPT)
    history = _history(tgt, pair, prompt, 30)
    ctx = _ctx(tgt, pair)
    last = len(history) - 1
    positions = sorted({min(len(prompt) - 1 + d, last) for d in (0, 7, 15)})
    samplers = {"greedy": SamplerParams(temp=0.0, seed=1),
                "greedy, repeat penalty 1.5": SamplerParams(temp=0.0, penalty_repeat=1.5, penalty_last_n=64, seed=1),
                "temperature 0.8": SamplerParams(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)}
    n_vocab = tgt.n_vocab
    n_cases = n_full = 0
    for sname, sp in samplers.items():
        for n_past in positions:
            base = Sampler(sp)
            for t in history[:n_past]:
                base.accept(t)
            oracle = _oracle(ctx, base.clone(), history, n_past, 4)
            drafts = [[]] + [oracle[:k] for k in range(1, 5)]
            for j in range(4):
                d = list(oracle)
                d[j] = (d[j] + 1) % n_vocab
                drafts.append(d)
            for draft in drafts:
                where = f"sampler {sname}, n_past={n_past}, id_last={history[n_past]}, draft={draft}"
                _hold(ctx, history, n_past)
                ctx.decode(Batch.from_tokens([history[n_past]] + draft, n_past, 0, "all"))
                s_ref, s_mine = base.clone(), base.clone()
                want = sample_and_accept_n(s_ref, ctx, draft)
                d0 = ctx.n_decode
                got = _tokens(_call(name, where, my_fn, s_mine, ctx, list(draft)), "the ids", name)
                if ctx.n_decode != d0:
                    raise AssertionError(f"{name}: {where}: your function decoded {ctx.n_decode - d0} batch(es); "
                                         f"it only samples the rows of the last decode (rows 0..{len(draft)})")
                if got != want:
                    raise AssertionError(f"{name}: {where}: {_ids_problem(want, got, draft)} "
                                         f"(expected ids {want}, got {got})")
                problem = _sampler_problem(s_ref, s_mine, len(base.prev))
                if problem:
                    raise AssertionError(f"{name}: {where}: {problem}")
                n_cases += 1
                n_full += len(want) == len(draft) + 1
    print(f"{name}: passed: {n_cases} verifications equal sample_and_accept_n's ({', '.join(samplers)}): "
          f"{n_full} full acceptances with a bonus token, {n_cases - n_full} stopped at a rejection")


# ---- step 3: one round -----------------------------------------------------------------------------
ROUND_CONFIGS = (
    ("greedy, n_max=3", dict(temp=0.0, seed=1), dict(n_max=3, n_min=0, p_min=0.0)),
    ("temperature 0.8, n_max=4, p_min=0.5", dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=5),
     dict(n_max=4, n_min=0, p_min=0.5)),
    ("greedy with repeat penalty 1.3, n_max=5, n_min=2, p_min=0.3",
     dict(temp=0.0, penalty_repeat=1.3, penalty_last_n=64, seed=1), dict(n_max=5, n_min=2, p_min=0.3)),
)


def _unpack_round(out, name: str, where: str):
    try:
        draft, ids, n_past, id_last = out
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {where}: your round must return (draft, ids, n_past, id_last), "
                             f"got {out!r:.120}") from None
    ids = _tokens(ids, "ids", name)
    if not ids:
        raise AssertionError(f"{name}: {where}: ids is empty; a round always commits at least one token "
                             f"(the target's own sample)")
    return (_tokens(draft, "draft", name), ids,
            _int(n_past, "n_past", name, where), _int(id_last, "id_last", name, where))


def _int(x, what: str, name: str, where: str) -> int:
    try:
        if int(x) == x:
            return int(x)
    except (TypeError, ValueError):
        pass
    raise AssertionError(f"{name}: {where}: {what} must be an int, got {x!r:.80}")


def _round_problems(name, where, n_past0, id_last0, draft, ids, n_past, id_last, ctx_tgt, ctx_dft):
    """Check what a round returned and left in both KV caches, given that draft and ids are right."""
    want_n_past = n_past0 + len(ids)
    if n_past != want_n_past:
        if n_past == want_n_past - 1:
            why = ("id_last's row counts too: it sat at n_past, so n_past += 1 for it, then += the "
                   "accepted draft tokens (len(ids) - 1), n_past += len(ids) in all")
        elif n_past == n_past0 + len(draft) + 1 and len(ids) != len(draft) + 1:
            why = "advance by the committed tokens (len(ids)), not by the verification batch's rows"
        else:
            why = "n_past += len(ids): id_last and the accepted draft tokens are now in the KV cache"
        raise AssertionError(f"{name}: {where}: n_past after the round: expected {want_n_past}, got "
                             f"{n_past} ({why})")
    if id_last != ids[-1]:
        why = ("the first id" if id_last == ids[0] else "the last draft token" if draft and id_last == draft[-1]
               else "another token")
        raise AssertionError(f"{name}: {where}: id_last after the round: expected {ids[-1]} (the last "
                             f"id, sampled but not yet decoded), got {id_last} ({why})")
    for side, ctx in (("target", ctx_tgt), ("draft", ctx_dft)):
        last = ctx.seq_pos_max(0)
        if last != n_past - 1:
            if last > n_past - 1:
                cname = "ctx_tgt" if side == "target" else "ctx_dft"
                why = (f"it still holds positions {n_past}..{last}: seq_rm({cname}, 0, n_past, -1) with the "
                       f"new n_past = {n_past} drops the rejected rows")
            elif side == "draft" and last <= n_past0 - 1:
                why = ("replay the verification batch on the draft context (decode the same rows, no "
                       "logits), as common_speculative_process does")
            else:
                why = f"seq_rm from the new n_past = {n_past}, not from an earlier position: committed rows were lost"
            raise AssertionError(f"{name}: {where}: the {side} KV cache must hold exactly [0, n_past) = "
                                 f"[0, {n_past}) after the round; its last position is {last} ({why})")
        for p, tok in zip(range(n_past0, n_past), [id_last0] + ids[:-1]):
            if not ctx.holds(0, p, tok):
                raise AssertionError(f"{name}: {where}: the {side} KV cache's position {p} does not hold "
                                     f"the committed token {tok} (id_last at n_past, then the accepted ids)")


def check_round(my_round, my_draft, models="tiny", n_rounds: int = 12) -> None:
    """Step 3: `my_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn) -> (draft, ids, n_past,
    id_last)` against SpeculativeLoop, round by round, in three settings.

    draft_fn(id_last, n_past) is your step-1 function with its settings bound. Both contexts hold
    [0, n_past) when a round starts (the check decodes the prompt but its last token; id_last is
    the prompt's last token). Compared after each round: the draft, the ids, n_past, id_last, and
    both KV caches (exactly [0, n_past), the committed tokens in place)."""
    from ..run.context import Batch
    from ..run.sampling import Sampler, SamplerParams
    from ..speculation.loop import SpeculativeLoop
    from ..speculation.params import SpecParams
    name = "check_round"
    pair = exercise_models(models)
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    totals = {"rounds": 0, "full": 0, "partial": 0, "none": 0, "empty": 0}
    for label, spk, dk in ROUND_CONFIGS:
        sp = SamplerParams(**spk)
        ct_ref, cd_ref = _ctx(tgt, pair), _ctx(dft, pair)
        loop = SpeculativeLoop(ct_ref, cd_ref, prompt, N_CTX, sp,
                               SpecParams(n_max=dk["n_max"], n_min=dk["n_min"], p_min=dk["p_min"]),
                               penalize_prompt=False, stop_rule="c392e50")
        ct, cd = _ctx(tgt, pair), _ctx(dft, pair)
        for c in (ct, cd):
            c.decode(Batch.from_tokens(prompt[:-1], 0, 0, "none"))
        n_past, id_last = len(prompt) - 1, prompt[-1]
        smpl, smpl_dft = Sampler(sp), draft_sampler()
        calls = []

        def draft_fn(id_last_, n_past_, dk=dk, cd=cd, smpl_dft=smpl_dft, calls=calls):
            calls.append((id_last_, n_past_))
            return my_draft(cd, smpl_dft, id_last_, n_past_, dk["n_max"], dk["n_min"], dk["p_min"])
        for r in range(n_rounds):
            sl = loop.slots[0]
            if sl.done:
                break
            rec = loop.step().slots[0]
            where = f"{label}, round {r} (n_past={n_past}, id_last={id_last})"
            calls.clear()
            out = _call(name, where, my_round, ct, cd, smpl, id_last, n_past, draft_fn,
                        ctx_tgt=ct, ctx_dft=cd, n_past=n_past)
            draft, ids, n_past_new, id_last_new = _unpack_round(out, name, where)
            if calls != [(rec.id_last, rec.n_past)]:
                raise AssertionError(f"{name}: {where}: call draft_fn(id_last, n_past) once per round, with "
                                     f"this round's id_last and n_past ({rec.id_last}, {rec.n_past}); your "
                                     f"round called it as {calls}")
            if draft != rec.draft:
                raise AssertionError(f"{name}: {where}: the draft differs: expected {rec.draft}, got {draft} "
                                     f"(return the draft draft_fn gave; run check_draft first)")
            if ids != rec.ids:
                raise AssertionError(f"{name}: {where}: {_ids_problem(rec.ids, ids, draft)} (draft {draft}, "
                                     f"expected ids {rec.ids}, got {ids}; run check_sample_and_accept_n first)")
            totals["rounds"] += 1
            a = len(ids) - 1
            key = "empty" if not draft else "full" if a == len(draft) else "partial" if a else "none"
            totals[key] += 1
            if sl.done:               # an end-of-generation token: the loop commits up to it and stops
                break
            _round_problems(name, where, rec.n_past, rec.id_last, draft, ids, n_past_new, id_last_new, ct, cd)
            if (n_past_new, id_last_new) != (sl.n_past, sl.id_last):     # (implied by the above)
                raise AssertionError(f"{name}: {where}: after the round SpeculativeLoop has n_past={sl.n_past}, "
                                     f"id_last={sl.id_last}; yours n_past={n_past_new}, id_last={id_last_new}")
            n_past, id_last = n_past_new, id_last_new
    print(f"{name}: passed: {totals['rounds']} rounds equal SpeculativeLoop's in {len(ROUND_CONFIGS)} settings "
          f"(draft, ids, n_past, id_last, both KV caches): {totals['full']} fully accepted drafts, "
          f"{totals['partial']} partly, {totals['none']} rejected at once, {totals['empty']} empty drafts")


# ---- step 3, against llama.cpp: the recorded llama-speculative-simple run --------------------------
def _data_dir() -> Path:
    d = Path(__file__).resolve().parents[2] / "tests" / "data"
    if not (d / TRACE_FILE).exists():
        raise FileNotFoundError(f"check_trace reads llama.cpp's recorded run from the repository's "
                                f"tests/data/{TRACE_FILE}, which is not beside this specnb ({d}): "
                                "run it from a checkout of the repository (pip install -e .)")
    return d


def read_trace(path=None) -> dict:
    """The per-step trace of llama-speculative-simple (tests/data/llamacpp_speculative_simple_smollm2.txt):
    {"prompt_ids", "generated_ids", "steps": [(draft, accepted, target), ...]}."""
    text = Path(path or _data_dir() / TRACE_FILE).read_text()
    steps = [([int(t) for t in d.split(",") if t.strip()], int(a), int(t))
             for d, a, t in re.findall(r"^step\s+\d+: draft=\[([\d, ]*)\] p=\[[^\]]*\] accepted=(\d+) "
                                       r"target=(\d+)$", text, re.M)]
    ids = {k: [int(t) for t in re.search(rf"^{k} = \[([\d, ]*)\]$", text, re.M).group(1).split(",")]
           for k in ("prompt_ids", "generated_ids")}
    return {**ids, "steps": steps}


def read_counts(path=None) -> dict:
    """speculative-simple's printed counts of the n=32 run (tests/data/llamacpp_speculative_simple_n32_smollm2.txt)."""
    text = Path(path or _data_dir() / COUNTS_FILE).read_text()
    return {k: int(re.search(rf"^{k} *= (\d+)$", text, re.M).group(1))
            for k in ("n_draft", "n_predict", "n_drafted", "n_accept")}


def check_trace(my_round, my_draft, n_steps: int = TRACE_STEPS) -> None:
    """Step 3 against llama.cpp itself, on the default pair (SmolLM2-135M and its Q4_0 draft).

    1. Teacher-forced: your round with llama-speculative-simple's recorded drafts (c392e50,
       "Once upon a time", greedy; tests/data/llamacpp_speculative_simple_smollm2.txt) gives the
       recorded accepted count and target token at each of the first n_steps steps (after step 15
       llama.cpp's batched rows flip a near-tie that specnb's batch-invariant rows do not).
    2. Your own drafts (n_max 3, n_min 0, p_min 0) run as that build ran (`-n 32`: rounds while at
       most 32 tokens are out, no draft budget) print llama.cpp's n_predict, n_drafted and n_accept
       (tests/data/llamacpp_speculative_simple_n32_smollm2.txt)."""
    from ..run.context import Batch
    from ..run.sampling import Sampler, SamplerParams
    name = "check_trace"
    trace, counts = read_trace(), read_counts()
    pair = exercise_models("default")
    tgt, dft = pair
    prompt = trace["prompt_ids"]
    if tgt.vocab.tokenize(PROMPT) != prompt:
        raise AssertionError(f"{name}: the default target tokenizes {PROMPT!r} as {tgt.vocab.tokenize(PROMPT)}, "
                             f"the trace as {prompt}: is the default target SmolLM2-135M-Instruct Q4_1?")

    def fresh():
        ct, cd = _ctx(tgt, pair, 512), _ctx(dft, pair, 512)
        for c in (ct, cd):
            c.decode(Batch.from_tokens(prompt[:-1], 0, 0, "none"))
        return ct, cd, len(prompt) - 1, prompt[-1], Sampler(SamplerParams(temp=0.0))
    # 1. the recorded drafts
    ct, cd, n_past, id_last, smpl = fresh()
    out_tokens = []
    steps = trace["steps"][:n_steps]
    for k, (rec_draft, accepted, target) in enumerate(steps):
        where = f"recorded step {k} (n_past={n_past}, id_last={id_last}, llama.cpp's draft {rec_draft})"
        out = _call(name, where, my_round, ct, cd, smpl, id_last, n_past,
                    lambda _id, _n, d=rec_draft: list(d), ctx_tgt=ct, ctx_dft=cd, n_past=n_past)
        draft, ids, n_past_new, id_last_new = _unpack_round(out, name, where)
        want = rec_draft[:accepted] + [target]
        if draft != rec_draft:
            raise AssertionError(f"{name}: {where}: return the draft draft_fn gave ({rec_draft}), got {draft}")
        if ids != want:
            raise AssertionError(f"{name}: {where}: llama.cpp accepted {accepted} token(s) and sampled {target}: "
                                 f"ids {want}; yours {ids} ({_ids_problem(want, ids, rec_draft)})")
        _round_problems(name, where, n_past, id_last, draft, ids, n_past_new, id_last_new, ct, cd)
        out_tokens += ids
        n_past, id_last = n_past_new, id_last_new
    if out_tokens != trace["generated_ids"][:len(out_tokens)]:
        raise AssertionError(f"{name}: the first {len(out_tokens)} tokens differ from llama.cpp's output")
    # 2. your drafts, llama.cpp's counts
    ct, cd, n_past, id_last, smpl = fresh()
    smpl_dft = draft_sampler()
    n_max = counts["n_draft"]

    def draft_fn(id_last_, n_past_):
        return my_draft(cd, smpl_dft, id_last_, n_past_, n_max, 0, 0.0)
    n_predict = n_drafted = n_accept = 0
    limit = 32                                            # llama-speculative-simple -n 32
    generated = []
    while n_predict <= limit and len(generated) < 4 * limit:
        where = f"your drafts, round at n_past={n_past} (n_predict={n_predict} so far)"
        out = _call(name, where, my_round, ct, cd, smpl, id_last, n_past, draft_fn,
                    ctx_tgt=ct, ctx_dft=cd, n_past=n_past)
        draft, ids, n_past, id_last = _unpack_round(out, name, where)
        n_drafted += len(draft)
        n_accept += len(ids) - 1
        n_predict += len(ids)
        generated += ids
    want = (counts["n_predict"], counts["n_drafted"], counts["n_accept"])
    got = (n_predict, n_drafted, n_accept)
    if got != want:
        i = _first_diff(trace["generated_ids"], generated)
        raise AssertionError(
            f"{name}: with your drafts (n_max={n_max}, p_min=0) llama.cpp printed n_predict = {want[0]}, "
            f"n_drafted = {want[1]}, n_accept = {want[2]}; your rounds give {got[0]}, {got[1]}, {got[2]}"
            + (f" (the text parts at generated token {i}: llama.cpp {trace['generated_ids'][i]}, yours "
               f"{generated[i]})" if i < 31 else ""))
    print(f"{name}: passed: {len(steps)} recorded steps of llama-speculative-simple equal your rounds "
          f"(accepted counts and target tokens), and your own drafts give llama.cpp's n_predict = {want[0]}, "
          f"n_drafted = {want[1]}, n_accept = {want[2]}")


# ---- step 4: timing ----------------------------------------------------------------------------------
MEASURE_KEYS = ("t_plain", "t_spec", "n_tokens", "n_rounds", "c", "bc", "bd", "predicted", "measured")


def _ratios(x, key: str, gamma: int, name: str) -> dict:
    if not isinstance(x, dict):
        raise AssertionError(f"{name}: {key} must be a dict {{k: time of a k-row step / time of a one-row "
                             f"step}}, got {x!r:.80}")
    try:
        x = {int(k): float(v) for k, v in x.items()}
    except (TypeError, ValueError):
        raise AssertionError(f"{name}: {key} must map row counts (ints) to numbers, got {x!r:.80}") from None
    missing = [k for k in range(1, gamma + 2) if k not in x]
    if missing:
        raise AssertionError(f"{name}: {key} needs the rows 1..n_max+1 = 1..{gamma + 1}; {missing} missing")
    if not math.isclose(x[1], 1.0, rel_tol=1e-9, abs_tol=1e-12):
        raise AssertionError(f"{name}: {key}[1] = {x[1]:.4g}: divide every k-row time by the one-row time, "
                             f"so that {key}[1] = 1 ({key}(k) is in one-row steps, not seconds)")
    bad = [k for k, v in x.items() if not (math.isfinite(v) and v > 0)]
    if bad:
        raise AssertionError(f"{name}: {key}[{bad[0]}] = {x[bad[0]]}: expected a ratio > 0")
    return x


def check_speedup(my_measure, models="default", n_predict: int = 48, n_max: int = 3) -> None:
    """Step 4: `my_measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max) -> dict` (greedy, p_min 0).

    The dict holds t_plain (plain greedy decoding of n_predict tokens, seconds), t_spec (your rounds
    until at least n_predict tokens), n_tokens and n_rounds (what your rounds made), c (one-row
    draft step / one-row target step), bc and bd ({k: k-row step / one-row step} of the target and
    the draft, k = 1..n_max+1), measured ((t_plain / n_predict) / (t_spec / n_tokens)) and
    predicted (tokens per round / round_cost, the course's engine model: γc + bc(γ+1) + c·bd(γ+1)).

    Checked: the counts against speculative-simple's, both ratios against their definitions from
    your own numbers (a formula that leaves a cost out is named). Reported: measured against
    predicted, your c and bc against a quick measurement here, and what decides the outcome.
    The default models are the notebooks' SmolLM2 pair (seconds): a tiny model's decode is too
    short to time against the loop's own Python; models="tiny" runs the same checks."""
    from ..figures.cost_map import engine_speedup, round_cost
    from ..measure.bench import batch_costs
    from ..run.pair import warm_up
    from ..run.sampling import SamplerParams
    from ..speculation.loop import SpeculativeLoop
    from ..speculation.params import SpecParams
    name = "check_speedup"
    pair = exercise_models(models)
    tgt, dft = pair
    prompt = tgt.vocab.tokenize(PROMPT)
    n_ctx = max(N_CTX, len(prompt) + n_predict + 2 * n_max + 8)
    ct, cd = _ctx(tgt, pair, n_ctx), _ctx(dft, pair, n_ctx)
    warm_up(ct, cd, progress=False)             # compile (or load) the kernels before anything is timed
    where = f"my_measure(ctx_tgt, ctx_dft, prompt, n_predict={n_predict}, n_max={n_max})"
    res = _call(name, where, my_measure, ct, cd, list(prompt), n_predict, n_max)
    if not isinstance(res, dict):
        raise AssertionError(f"{name}: your function must return a dict with {', '.join(MEASURE_KEYS)}; "
                             f"got {type(res).__name__}")
    missing = [k for k in MEASURE_KEYS if k not in res]
    if missing:
        raise AssertionError(f"{name}: the dict lacks {', '.join(missing)} (it needs {', '.join(MEASURE_KEYS)})")
    g = n_max
    bc, bd = _ratios(res["bc"], "bc", g, name), _ratios(res["bd"], "bd", g, name)
    num = {}
    for k in ("t_plain", "t_spec", "c", "predicted", "measured"):
        try:
            num[k] = float(res[k])
        except (TypeError, ValueError):
            raise AssertionError(f"{name}: {k} must be a number, got {res[k]!r:.80}") from None
        if not (math.isfinite(num[k]) and num[k] > 0):
            raise AssertionError(f"{name}: {k} = {res[k]!r}: expected a number > 0")
    n_tokens = _int(res["n_tokens"], "n_tokens", name, "the dict")
    n_rounds = _int(res["n_rounds"], "n_rounds", name, "the dict")
    # the counts, from speculative-simple on the same contexts (greedy: the same every time)
    ct.clear()
    cd.clear()
    loop = SpeculativeLoop(ct, cd, prompt, n_predict - 1, SamplerParams(temp=0.0, seed=1), SpecParams(n_max=n_max),
                           penalize_prompt=False, stop_rule="c392e50")   # rounds while fewer than n_predict
    loop.run()
    sl = loop.slots[0]
    if sl.stop_reason == "eog":
        print(f"{name}: note: speculative-simple met an end-of-generation token after {len(sl.generated)} "
              f"tokens, so your counts are not compared")
    elif (n_tokens, n_rounds) != (len(sl.generated), loop.n_rounds):
        raise AssertionError(
            f"{name}: your rounds made n_tokens = {n_tokens} in n_rounds = {n_rounds}; speculative-simple makes "
            f"{len(sl.generated)} tokens in {loop.n_rounds} rounds (greedy, n_max={n_max}, p_min=0, rounds while "
            f"fewer than n_predict = {n_predict} tokens are out; each round commits len(ids) tokens)")
    tau = n_tokens / n_rounds
    c = num["c"]
    # the measured ratio, from the learner's own times
    want_meas = (num["t_plain"] / n_predict) / (num["t_spec"] / n_tokens)
    if not math.isclose(num["measured"], want_meas, rel_tol=1e-6):
        alts = {"t_plain / t_spec (times, not times per token: your rounds made "
                f"{n_tokens} tokens, plain decoding {n_predict})": num["t_plain"] / num["t_spec"],
                "upside down: speculative time per token over plain": 1 / want_meas}
        hit = next((k for k, v in alts.items() if math.isclose(num["measured"], v, rel_tol=1e-6)), None)
        raise AssertionError(f"{name}: measured = {num['measured']:.4f}, but (t_plain / n_predict) / "
                             f"(t_spec / n_tokens) from your times is {want_meas:.4f}"
                             + (f": yours is {hit}" if hit else ""))
    # the prediction, from the learner's own c, bc, bd
    want_pred = engine_speedup(tau, g, c, bc, bd)
    if not math.isclose(num["predicted"], want_pred, rel_tol=1e-6):
        alts = {
            "Leviathan's τ / (γc + 1): it leaves out the wider batch bc(γ+1) and the draft's replay c·bd(γ+1)":
                tau / (g * c + 1),
            "τ / (γc + bc(γ+1)): it leaves out the draft's replay of the batch, c·bd(γ+1)":
                tau / (g * c + bc[g + 1]),
            "τ / (γc + 1 + c): it takes the (γ+1)-row batches as one-row steps (bc = bd = 1)":
                tau / (g * c + 1 + c),
            "τ / ((γ+1)c + bc(γ+1) + c·bd(γ+1)): the draft decodes γ rows while drafting (id_last, then "
            "each drafted token but the last), not γ+1": tau / ((g + 1) * c + bc[g + 1] + c * bd[g + 1]),
            "bc(γ) and bd(γ): the verification batch has γ+1 rows (id_last and γ draft tokens)":
                tau / (g * c + bc[g] + c * bd[g]),
            "the target's bc for the draft's replay: use the draft's own bd(γ+1)":
                tau / (g * c + bc[g + 1] + c * bc[g + 1]),
            "round_cost / τ: upside down": round_cost(g, c, bc, bd) / tau,
        }
        hit = next((k for k, v in alts.items() if math.isclose(num["predicted"], v, rel_tol=1e-6)), None)
        raise AssertionError(f"{name}: predicted = {num['predicted']:.4f}, but τ / (γc + bc(γ+1) + c·bd(γ+1)) "
                             f"with your numbers (τ = {tau:.3f} tokens per round, γ = {g}, c = {c:.3f}, "
                             f"bc({g + 1}) = {bc[g + 1]:.3f}, bd({g + 1}) = {bd[g + 1]:.3f}) is {want_pred:.4f}"
                             + (f"; yours is {hit}" if hit else ""))
    # the report
    cost = round_cost(g, c, bc, bd)
    meas, pred = num["measured"], num["predicted"]
    ct.clear()
    cd.clear()
    sizes = tuple(range(1, g + 2))
    bt, bdt = batch_costs(ct, prompt, sizes=sizes, reps=3), batch_costs(cd, prompt, sizes=sizes, reps=3)
    c_here, bc_here = bdt[1] / bt[1], bt[g + 1] / bt[1]
    lines = [f"{name}: measured {meas:.2f}x, predicted {pred:.2f}x "
             f"({100 * (pred - meas) / meas:+.0f}% from the measurement)",
             f"  per round: τ = {tau:.2f} tokens ({n_tokens} in {n_rounds} rounds) for "
             f"γc + bc({g + 1}) + c·bd({g + 1}) = {g}×{c:.2f} + {bc[g + 1]:.2f} + {c:.2f}×{bd[g + 1]:.2f} "
             f"= {cost:.2f} one-row target steps",
             f"  so speculation {'wins' if tau > cost else 'loses'} here: a round yields "
             f"{'more' if tau > cost else 'fewer'} tokens ({tau:.2f}) than it costs one-row steps ({cost:.2f})"]
    c_even = (tau - bc[g + 1]) / (g + bd[g + 1])
    lines.append(f"  break-even at this τ: c < {c_even:.2f} (your c is {c:.2f})" if c_even > 0 else
                 f"  break-even at this τ: none; the {g + 1}-row target batch alone costs {bc[g + 1]:.2f} "
                 f"one-row steps, more than the {tau:.2f} tokens a round yields")
    lines.append(f"  a quick measurement here: c = {c_here:.2f} (yours {c:.2f}), bc({g + 1}) = {bc_here:.2f} "
                 f"(yours {bc[g + 1]:.2f})")
    if not 0.5 <= c / c_here <= 2.0 or not 0.67 <= bc[g + 1] / bc_here <= 1.5:
        lines.append("  note: your c or bc is far from this quick measurement: time decodes after a warm-up "
                     "(the first decodes compile), take the median of several, and time the decode alone")
    if not 0.67 <= pred / meas <= 1.5:
        lines.append("  note: the prediction is far from the measurement: the model charges decodes only; "
                     "what else does your loop spend time on (sampling, building batches, Python)?"
                     + (" On the tiny models a decode is so short that this overhead weighs most: try "
                        "models='default'" if models == "tiny" else ""))
    print("\n".join(lines))
