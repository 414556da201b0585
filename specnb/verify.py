"""How the target decides on a draft: exact match (llama.cpp), rejection sampling, synthetic.

- "exact": sampling.sample_and_accept_n (common_sampler_sample_and_accept_n): the target's own
  sampler samples every row, a draft token is kept only when the sample equals it. The output
  is exactly the target sampler's, token for token.
- "rejection": speculative sampling (Leviathan et al. 2023, Chen et al. 2023), a specnb
  extension: keep draft token d with probability min(1, p(d) / q(d)), else sample from
  norm(max(0, p - q)). The output follows the target's distribution (not its token stream).
  A deterministic draft (an n-gram lookup) is a one-hot q: keep d with probability p(d).
- synthetic acceptance (--spec-synth-rates / --spec-synth-len, for benchmarking the loop):
  server_sample_and_accept_synth (tools/server/server-context.cpp @001d906a): the target is
  sampled at every position, the draft token is kept with the position's probability (never a
  drafted EOG), and on a replay every replayed token is kept. The output is not valid text.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ParamError, check_param
from .sampling import Sampler, sample_and_accept_n

VERIFY_MODES = ("exact", "rejection")


# ---- synthetic acceptance -----------------------------------------------------------------
def synth_rates_resolve(rates, n_max: int) -> list:
    """common_speculative_synth_rates_resolve (common/speculative.cpp @001d906a), then the
    conditional probability per position (common_speculative_init: r_i / r_{i-1}).

    The list must hold exactly n_max unconditional rates, finite, in [0, 1], non-increasing.
    """
    try:
        rates = [float(r) for r in rates]
    except (TypeError, ValueError):
        raise ParamError(f"invalid synth_rates={rates!r}: expected a list of numbers") from None
    if n_max <= 0:
        raise ParamError("synthetic acceptance requires at least one speculative token (draft_max >= 1)")
    if len(rates) != n_max:
        raise ParamError(f"invalid synth_rates={rates}: synthetic acceptance rates must contain "
                         f"{n_max} values (draft_max), got {len(rates)}")
    for i, r in enumerate(rates):
        check_param(math.isfinite(r) and 0.0 <= r <= 1.0, f"synth_rates[{i}]", r,
                    "a finite number in [0, 1]")
        if i and r > rates[i - 1]:
            raise ParamError(f"invalid synth_rates={rates}: rate {r} at position {i} is larger than "
                             f"{rates[i - 1]} before it (unconditional rates must not increase)")
    cond, prev = [], 1.0
    for r in rates:
        cond.append(r / prev if prev > 0 else 0.0)
        prev = r
    return cond


def synth_len_to_p(L: float, k: int) -> float:
    """The constant conditional p with p + p^2 + ... + p^k = L - 1, by bisection (p = 1 at L = k + 1)."""
    if k <= 0:
        raise ParamError("synthetic acceptance requires at least one speculative token (draft_max >= 1)")
    check_param(isinstance(L, (int, float)) and math.isfinite(L) and 1.0 <= L <= k + 1,
                "synth_len", L, f"a number in [1, draft_max + 1 = {k + 1}]")
    if L == k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(1, k + 1)) < L - 1:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def synth_verify(smpl: Sampler, ctx, draft: list, idxs: list, probs: list, rng, vocab,
                 is_replay: bool) -> list:
    """server_sample_and_accept_synth: accept draft[i] with probability probs[i]."""
    ids = []
    for i, d in enumerate(draft):
        tok = smpl.sample(ctx, idxs[i])                    # the target samples every position
        keep = is_replay or rng.random() < probs[i]
        if keep and (is_replay or not vocab.is_eog(d)):    # never a drafted EOG
            smpl.accept(d)
            ids.append(int(d))
            continue
        smpl.accept(tok)
        ids.append(tok)
        return ids
    tok = smpl.sample(ctx, idxs[len(draft)])
    smpl.accept(tok)
    ids.append(tok)
    return ids


# ---- rejection sampling -------------------------------------------------------------------
def rejection_verify(draft, q_rows, p_rows, rng) -> list:
    """Speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

    draft[i] was sampled from the draft's distribution q_rows[i]; p_rows[i] is the target's
    distribution at the same position (len(draft) + 1 rows). Keep draft[i] with probability
    min(1, p(d) / q(d)); on the first rejection sample a replacement from norm(max(0, p - q))
    and stop; after a full acceptance add a bonus token from the last p row. The returned ids
    are distributed exactly as sampling from p one token at a time.
    """
    ids = []
    for i, d in enumerate(draft):
        p, q = p_rows[i], q_rows[i]
        if q[d] > 0 and rng.random() < min(1.0, p[d] / q[d]):
            ids.append(int(d))
            continue
        resid = np.maximum(p - q, 0.0)
        tot = resid.sum()
        ids.append(int(rng.choice(len(p), p=resid / tot if tot > 0 else p)))
        return ids
    p = p_rows[len(draft)]
    ids.append(int(rng.choice(len(p), p=p)))
    return ids


def target_dist(logits, temp: float) -> np.ndarray:
    # [n_vocab] -> the target distribution at temperature temp (one-hot argmax when temp <= 0)
    l = np.asarray(logits, dtype=np.float64)
    if temp <= 0:
        p = np.zeros_like(l)
        p[int(np.argmax(l))] = 1.0
        return p
    l = l / temp
    e = np.exp(l - l.max())
    return e / e.sum()


def one_hot(token: int, n: int) -> np.ndarray:
    q = np.zeros(n)
    q[int(token)] = 1.0
    return q


# ---- the verifier the loop calls ------------------------------------------------------------
class Verifier:
    """Picks the verification for one slot's round and returns (ids, target p of each id)."""

    def __init__(self, mode: str, synth: list | None, synth_seed: int, vocab):
        self.mode, self.synth, self.vocab = mode, synth, vocab
        self.synth_rng = np.random.Generator(np.random.PCG64(synth_seed))

    def __call__(self, smpl: Sampler, ctx, draft: list, idxs: list, replay: bool,
                 q_rows: list | None = None) -> tuple[list, list]:
        if self.synth is not None and draft:
            ids = synth_verify(smpl, ctx, draft, idxs, self.synth, self.synth_rng, self.vocab, replay)
            return ids, [float("nan")] * len(ids)
        if self.mode == "rejection" and draft:
            if replay:   # approved ids of a restored round: commit them as they are, then the bonus
                for d in draft:
                    smpl.accept(d)
                tok = smpl.sample(ctx, idxs[len(draft)])
                smpl.accept(tok)
                return list(draft) + [tok], [float("nan")] * len(draft) + [smpl.prob_of(tok)]
            T = smpl.params.temp
            p_rows = [target_dist(ctx.get_logits_ith(i), T) for i in idxs]
            if q_rows is None:   # a deterministic draft: q is one-hot at each drafted token
                q_rows = [one_hot(d, len(p_rows[0])) for d in draft]
            ids = rejection_verify(draft, q_rows, p_rows, smpl.rng)
            for t in ids:
                smpl.accept(t)
            return ids, [float(p_rows[i][t]) for i, t in enumerate(ids)]
        probs: list = []
        ids = sample_and_accept_n(smpl, ctx, draft, idxs, probs=probs)
        return ids, probs
