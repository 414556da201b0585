"""A solution of docs/exercise.md, written with the calls a learner has: Batch, Context.decode /
seq_rm / seq_pos_max, Sampler.sample / accept / reset / get_candidates, and a clock.

It uses nothing of specnb's speculation code (no DraftSimple, no sample_and_accept_n, no
SpeculativeLoop, no ngram_simple_draft): tests/test_exercise.py checks it with specnb.app.exercise,
which compares it with them.
llama.cpp's names throughout (master 34af94cd: common/speculative.cpp, common/sampling.cpp,
examples/speculative-simple/speculative-simple.cpp).
"""
import statistics
import time

from specnb import Batch, Sampler, SamplerParams


# ---- step 1: the draft (common_speculative_impl_draft_simple::draft) --------------------------------
def draft(ctx_dft, smpl, id_last, n_past, n_max, n_min=0, p_min=0.0):
    """Greedy drafting on the draft model: ctx_dft holds [0, n_past), id_last sits at n_past."""
    smpl.reset()                                          # common_sampler_reset
    ctx_dft.decode(Batch().add(id_last, n_past, 0, True))   # the seed row
    result = []
    i = 0
    while True:
        smpl.sample(ctx_dft, 0)                           # row 0 of the last decode: top-k 10, dist
        cur = smpl.get_candidates(True)                   # sorted by p
        tok, p = int(cur.ids[0]), float(cur.p[0])         # the argmax, its share of the top 10
        if p < p_min:                                     # confidence floor: stop before pushing it
            break
        smpl.accept(tok)
        result.append(tok)
        if len(result) >= n_max:                          # full: the last token is not decoded
            break
        ctx_dft.decode(Batch().add(tok, n_past + 1 + i, 0, True))   # the next input row
        i += 1
    if len(result) < n_min:                               # too short: no speculation this round
        result = []
    return result


# ---- step 2: verification (common_sampler_sample_and_accept_n) ---------------------------------------
def sample_and_accept_n(smpl, ctx_tgt, draft):
    """Row i of the last decode predicts draft[i]: sample it, keep going while the sample agrees."""
    ids = []
    for i, d in enumerate(draft):
        tok = smpl.sample(ctx_tgt, i)
        smpl.accept(tok)
        ids.append(tok)
        if tok != d:                                      # the target's sample replaces d: stop
            return ids
    tok = smpl.sample(ctx_tgt, len(draft))                # every draft token matched: the bonus
    smpl.accept(tok)
    ids.append(tok)
    return ids


# ---- step 3: one round of speculative-simple ----------------------------------------------------------
def speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn):
    """Draft, verify [id_last, draft...] in one target batch, commit, drop the rejected tail."""
    dft = draft_fn(id_last, n_past)
    ctx_dft.seq_rm(0, n_past, -1)                         # undo draft()'s decodes (:206-213)
    batch = Batch().add(id_last, n_past, 0, True)         # id_last @ n_past ...
    for i, d in enumerate(dft):
        batch.add(d, n_past + 1 + i, 0, True)             # ... draft[i] @ n_past + 1 + i
    ctx_tgt.decode(batch)
    replay = Batch()                                      # common_speculative_process: the same
    for t, p in zip(batch.tokens, batch.pos):             # rows on the draft, no logits
        replay.add(t, p, 0, False)
    ctx_dft.decode(replay)
    ids = sample_and_accept_n(smpl, ctx_tgt, dft)
    n_past += len(ids)                                    # id_last and the accepted draft tokens
    id_last = ids[-1]                                     # sampled, not yet decoded
    ctx_tgt.seq_rm(0, n_past, -1)                         # drop the rejected tail (:329-337)
    ctx_dft.seq_rm(0, n_past, -1)
    return dft, ids, n_past, id_last


# ---- step 4: timing --------------------------------------------------------------------------------------
def _prefill(ctx, prompt):
    ctx.seq_rm(0, -1, -1)
    if len(prompt) > 1:
        ctx.decode(Batch.from_tokens(prompt[:-1], 0, 0, "none"))


def step_time(ctx, prompt, k, reps=5):
    """Median seconds of a k-row batch (logits on every row) after the prompt."""
    _prefill(ctx, prompt)
    P = len(prompt) - 1
    times = []
    for _ in range(reps + 1):                             # the first one is a warm-up
        b = Batch.from_tokens([prompt[-1]] * k, P, 0, "all")
        t0 = time.perf_counter()
        ctx.decode(b)
        times.append(time.perf_counter() - t0)
        ctx.seq_rm(0, P, -1)
    return statistics.median(times[1:])


def plain(ctx_tgt, prompt, n_predict):
    """Greedy decoding, one row per decode; returns (tokens, seconds)."""
    _prefill(ctx_tgt, prompt)
    smpl = Sampler(SamplerParams(temp=0.0))
    tok, n_past, out = prompt[-1], len(prompt) - 1, []
    t0 = time.perf_counter()
    while len(out) < n_predict:
        ctx_tgt.decode(Batch().add(tok, n_past, 0, True))
        tok = smpl.sample(ctx_tgt, 0)
        smpl.accept(tok)
        out.append(tok)
        n_past += 1
    return out, time.perf_counter() - t0


def speculative(ctx_tgt, ctx_dft, prompt, n_predict, n_max):
    """Rounds until at least n_predict tokens are out; returns (tokens, rounds, seconds)."""
    for ctx in (ctx_tgt, ctx_dft):
        _prefill(ctx, prompt)
    smpl = Sampler(SamplerParams(temp=0.0))
    smpl_dft = Sampler(SamplerParams(top_k=10, samplers=("top_k",)))
    id_last, n_past, out, rounds = prompt[-1], len(prompt) - 1, [], 0

    def draft_fn(id_last, n_past):
        return draft(ctx_dft, smpl_dft, id_last, n_past, n_max)
    t0 = time.perf_counter()
    while len(out) < n_predict:
        _, ids, n_past, id_last = speculative_round(ctx_tgt, ctx_dft, smpl, id_last, n_past, draft_fn)
        out += ids
        rounds += 1
    return out, rounds, time.perf_counter() - t0


def measure(ctx_tgt, ctx_dft, prompt, n_predict, n_max, pairs=3):
    """Paired timings (plain, then speculative, in turn), c, bc, bd, the measured speed-up and the
    engine model's prediction."""
    plain(ctx_tgt, prompt, 2)                             # warm-up: the first decodes compile
    speculative(ctx_tgt, ctx_dft, prompt, 2, n_max)
    t_plain, t_spec = [], []
    for _ in range(pairs):                                # in turn: a slow spell falls on both sides
        t_plain.append(plain(ctx_tgt, prompt, n_predict)[1])
        out, n_rounds, t = speculative(ctx_tgt, ctx_dft, prompt, n_predict, n_max)
        t_spec.append(t)
    t_t = {k: step_time(ctx_tgt, prompt, k) for k in range(1, n_max + 2)}
    t_d = {k: step_time(ctx_dft, prompt, k) for k in range(1, n_max + 2)}
    c = t_d[1] / t_t[1]
    bc = {k: t / t_t[1] for k, t in t_t.items()}
    bd = {k: t / t_d[1] for k, t in t_d.items()}
    g = n_max
    tau = len(out) / n_rounds                             # tokens per round (per target call)
    round_cost = g * c + bc[g + 1] + c * bd[g + 1]        # in one-row target steps
    ratios = [(tp / n_predict) / (ts / len(out)) for tp, ts in zip(t_plain, t_spec)]
    return {"t_plain": t_plain, "t_spec": t_spec, "n_tokens": len(out), "n_rounds": n_rounds,
            "c": c, "bc": bc, "bd": bd, "predicted": tau / round_cost, "measured": statistics.median(ratios)}


# ---- step 5: ngram-simple (common_ngram_simple_draft, common/ngram-map.cpp:49-112) -----------------------
def ngram_draft(tokens, id_last, size_n, size_m):
    """The tokens after the latest earlier occurrence of [last size_n - 1 tokens, id_last]."""
    cur_len = len(tokens)
    if cur_len <= size_n + size_m + 1:                    # too short a history: no lookup
        return []
    key = list(tokens[cur_len - size_n + 1:]) + [id_last]
    for j in range(cur_len - size_n - 1, 0, -1):          # backwards; position 0 means "no match"
        if list(tokens[j:j + size_n]) == key:
            follow = list(tokens[j + size_n:j + size_n + size_m])
            return follow if len(follow) >= size_n else []
    return []
