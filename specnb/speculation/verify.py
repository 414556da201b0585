"""How the target decides on a draft: exact match (llama.cpp), rejection sampling, synthetic.

- "exact": sampling.sample_and_accept_n (common_sampler_sample_and_accept_n): the target's own
  sampler samples every row, a draft token is kept only when the sample equals it. The output
  is exactly the target sampler's, token for token.
- "rejection": speculative sampling (Leviathan et al. 2023, Chen et al. 2023), a specnb
  extension of speculative-simple: keep draft token d with probability min(1, p(d) / q(d)),
  else sample from norm(max(0, p - q)). The output follows the target's distribution (not its
  token stream, so it is checked statistically, never token for token).
    p: at each verification row, the distribution the target's whole chain samples from there
       (the final candidates of `Sampler.sample`, every sampler of the chain applied, the
       tokens committed before that row in its state), i.e. what "exact" samples from;
    q: the distribution the draft token was drawn from. draft-simple draws it from its own
       copy of the target's chain (the same parameters, cloned with the target's state each
       round, its own random numbers; see draft_simple.py), so q is that chain's distribution
       over the draft's logits. A deterministic draft (an n-gram lookup) is a one-hot q: keep d
       with probability p(d), else sample from p without d.
  llama.cpp's stochastic verifier (examples/speculative/speculative.cpp:239-365 @c392e50, run
  when temp > 0) takes p the same way (common_sampler_sample then get_candidates, :241-243)
  and q from a clone of the target's sampler run on the draft's logits (:461, :490, :553).
  Two differences, both in specnb's favour: llama.cpp drafts the draft chain's most likely
  candidate (cur_p->data[0], :545) instead of a sample from q, and builds the residual by
  subtracting the two candidate arrays entry by entry after sorting each by id (:303-318),
  which pairs the right tokens only when both arrays hold the same ids; specnb samples d from
  q and subtracts token by token, so the output is exactly p's.
- synthetic acceptance (--spec-synth-rates / --spec-synth-len, for benchmarking the loop), as
  llama-server's server_sample_and_accept_synth (tools/server/server-context.cpp) does it: the
  target is sampled at every position, the draft token is kept with the position's probability
  (never a drafted EOG), and on a replay every replayed token is kept. The output is not valid
  text. This description is from the design's source analysis (master 050dde50c, not in any
  snapshot that can be read here); synthetic acceptance is not in 34af94cd.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ParamError, check_param
from ..run.sampling import Sampler, sample_and_accept_n

VERIFY_MODES = ("exact", "rejection")


# ---- synthetic acceptance -----------------------------------------------------------------
def synth_rates_resolve(rates, n_max: int) -> list:
    """common_speculative_synth_rates_resolve (common/speculative.cpp), then the conditional
    probability per position (common_speculative_init: r_i / r_{i-1}). Both are from the design's
    source analysis (master 050dde50c, not in any snapshot that can be read here); not in 34af94cd.

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
def draw_index(rng, w) -> int:
    """An index i drawn with probability w[i] / sum(w), from one uniform number of rng."""
    cum = np.cumsum(w, dtype=np.float64)
    i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))   # w[i] > 0 always
    return i if i < len(cum) else int(np.nonzero(np.asarray(w) > 0)[0][-1])


def speculative_step(d: int, p: np.ndarray, q: np.ndarray, rng) -> tuple[int, bool]:
    """One position of speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al.
    2023, Algorithm 2). Returns (token, kept).

    d was drawn from the draft's distribution q; p is the target's at the same position
    (vectors over the vocab).
      - keep d with probability min(1, p(d) / q(d)): always where the target likes d at least
        as much as the draft did, only part of the time where the draft over-proposed it;
      - otherwise draw the token from the residual norm(max(0, p - q)): the mass p has and q lacks.
    Why the token follows p: d is kept with probability q(x) min(1, p(x)/q(x)) = min(p(x), q(x))
    for each x; a rejection happens with probability 1 - sum_y min(p(y), q(y)) = sum_y max(0,
    p(y) - q(y)), which is the residual's normaliser, so P(token = x) = min(p(x), q(x)) +
    max(0, p(x) - q(x)) = p(x).
    """
    if q[d] > 0 and rng.random() < min(1.0, p[d] / q[d]):
        return int(d), True
    resid = np.maximum(p - q, 0.0)
    return draw_index(rng, resid if resid.sum() > 0 else p), False


def rejection_verify(draft, q_rows, p_rows, rng) -> list:
    """Speculative sampling over a whole draft, given every row's distributions (vectors).

    draft[i] was sampled from q_rows[i]; p_rows[i] is the target's distribution at the same
    position (len(draft) + 1 rows). `speculative_step` at each position; the first rejection
    ends the walk with its replacement; after a full acceptance a bonus token is drawn from the
    last p row. The returned ids are distributed exactly as sampling from p one token at a time.
    """
    ids = []
    for i, d in enumerate(draft):
        tok, kept = speculative_step(d, p_rows[i], q_rows[i], rng)
        ids.append(tok)
        if not kept:
            return ids
    ids.append(draw_index(rng, p_rows[len(draft)]))
    return ids


def dense(dist, n: int) -> np.ndarray:
    """A distribution as a float64 vector over n tokens: a vector as given, or a sampler's
    Candidates (ids, p) spread out (ids >= n, which the other model cannot take, dropped)."""
    if isinstance(dist, np.ndarray):
        return np.asarray(dist, dtype=np.float64)
    out = np.zeros(n, dtype=np.float64)
    keep = dist.ids < n
    out[dist.ids[keep]] = dist.p[keep]
    return out


def one_hot(token: int, n: int) -> np.ndarray:
    q = np.zeros(n)
    q[int(token)] = 1.0
    return q


class _ChainRow:
    """The target chain's distribution at one batch row, as llama.cpp's stochastic verifier
    takes it: common_sampler_sample, then common_sampler_get_candidates
    (examples/speculative/speculative.cpp:241-243 @c392e50). Sampling runs every sampler of
    the chain once, as plain decoding does at that row, so XTC's coin and the draw's random
    numbers move on exactly as they would; the sampled token itself is not used.
    Mirostat moves mu inside its draw, by the surprise of the token it drew; `take` moves it
    by the surprise of the token actually committed instead."""

    def __init__(self, smpl: Sampler, ctx, idx: int):
        self.smpl = smpl
        self.mu = getattr(smpl.final, "mu", None)      # mirostat's mu before this row
        smpl.sample(ctx, idx)
        self.cand = smpl.get_candidates()
        self.p = dense(self.cand, smpl.n_vocab)

    def take(self, token: int) -> None:
        """Commit `token` at this row into the chain's state (the penalty window, DRY's
        history, mirostat's mu: mu - eta * (surprise - tau), as Mirostat.apply)."""
        m = self.smpl.final
        if self.mu is not None:
            surprise = -np.log2(np.float32(self.p[token]))
            m.mu = self.mu - m.eta * (surprise - m.tau)
        self.smpl.accept(token)


def rejection_sample_and_accept_n(smpl: Sampler, ctx, draft: list, q_rows, idxs: list, rng,
                                  probs: list | None = None) -> list:
    """Speculative sampling against the target's whole sampler chain, row by row: the
    rejection-sampling twin of `sample_and_accept_n`.

    Row idxs[i] of the last target batch predicts draft[i]. p there is the distribution the
    target's chain samples from at that row (top-k, top-p, min-p, typical, penalties, DRY, XTC,
    logit bias, mirostat: `verify="exact"`'s distribution), with every token committed before it
    already in the chain's state; q_rows[i] is the distribution draft[i] was drawn from (a
    sampler's Candidates or a vector; q_rows None: a deterministic draft, one-hot q).
    `speculative_step` decides each position; the first rejection ends the walk with its
    replacement; after a full acceptance the chain's own sample from the last row is the bonus
    token. Returns the committed ids (len(draft) + 1 at most, 1 at least); `probs` gets each
    id's p.
    """
    ids = []
    for i, d in enumerate(draft):
        row = _ChainRow(smpl, ctx, idxs[i])
        q = one_hot(d, len(row.p)) if q_rows is None else dense(q_rows[i], len(row.p))
        tok, kept = speculative_step(d, row.p, q, rng)
        row.take(tok)
        ids.append(tok)
        if probs is not None:
            probs.append(float(row.p[tok]))
        if not kept:
            return ids
    tok = smpl.sample(ctx, idxs[len(draft)])               # the bonus: a plain sample from p
    smpl.accept(tok)
    ids.append(tok)
    if probs is not None:
        probs.append(smpl.prob_of(tok))
    return ids


def replay_and_accept(smpl: Sampler, ctx, approved: list, idxs: list,
                      probs: list | None = None) -> list:
    """A restored round's approved ids (the checkpoint path), committed as they are, then the
    bonus token. Each row's chain runs again, from the sampler's clone, as it ran when the ids
    were approved (the same coins and draws, mu moved by the same tokens)."""
    for i, tok in enumerate(approved):
        row = _ChainRow(smpl, ctx, idxs[i])
        row.take(int(tok))
        if probs is not None:
            probs.append(float(row.p[int(tok)]))
    tok = smpl.sample(ctx, idxs[len(approved)])
    smpl.accept(tok)
    if probs is not None:
        probs.append(smpl.prob_of(tok))
    return [int(t) for t in approved] + [tok]


# ---- the verifier the loop calls ------------------------------------------------------------
RS_SEED_TAG = 0x5eed          # the rejection verifier's own generator: PCG64([seed, RS_SEED_TAG])


class Verifier:
    """Picks the verification for one slot's round and returns (ids, target p of each id).

    Rejection sampling draws its coins and replacements from a generator of its own per
    sequence (as llama.cpp's examples/speculative keeps one beside the samplers,
    speculative.cpp:60 @c392e50), seeded from the sequence's sampler seed. It is not part of
    the sampler, so restoring the sampler's clone on the checkpoint path does not replay
    numbers that already decided a token.
    """

    def __init__(self, mode: str, synth: list | None, synth_seed: int, vocab):
        self.mode, self.synth, self.vocab = mode, synth, vocab
        self.synth_rng = np.random.Generator(np.random.PCG64(synth_seed))
        self.rs_rng: dict = {}                            # seq -> np.random.Generator

    def _rs_rng(self, seq: int, smpl: Sampler):
        if seq not in self.rs_rng:
            self.rs_rng[seq] = np.random.Generator(np.random.PCG64([smpl.seed_used, RS_SEED_TAG]))
        return self.rs_rng[seq]

    def __call__(self, smpl: Sampler, ctx, draft: list, idxs: list, replay: bool,
                 q_rows: list | None = None, seq: int = 0) -> tuple[list, list]:
        probs: list = []
        if self.synth is not None and draft:
            ids = synth_verify(smpl, ctx, draft, idxs, self.synth, self.synth_rng, self.vocab, replay)
            return ids, [float("nan")] * len(ids)
        if self.mode == "rejection" and draft:
            if replay:
                return replay_and_accept(smpl, ctx, draft, idxs, probs), probs
            ids = rejection_sample_and_accept_n(smpl, ctx, draft, q_rows, idxs,
                                                self._rs_rng(seq, smpl), probs)
            return ids, probs
        ids = sample_and_accept_n(smpl, ctx, draft, idxs, probs=probs)
        return ids, probs
