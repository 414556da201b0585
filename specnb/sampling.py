"""The sampler chain, as llama.cpp's common_sampler (common/sampling.cpp, src/llama-sampling.cpp).

Chain order (llama.cpp's default `--samplers`): penalties -> top_k -> typ_p -> top_p ->
min_p -> temperature -> dist. With temp <= 0 the temperature step keeps only the most
likely candidate, so dist has one choice: greedy decoding.

`sample_and_accept_n` is the verification step of speculative decoding
(common_sampler_sample_and_accept_n): sample each target row with this chain, accept the
token into the chain's state, stop at the first row whose sample differs from the draft,
and take a bonus sample from the last row when every draft token matched.

A Sampler's whole state (penalty window, RNG) can be cloned, so a caller can restore it
and replay the same draws (the checkpoint path of speculative-simple).
"""
from __future__ import annotations

import copy
import math
from collections import Counter, deque
from dataclasses import dataclass, field, fields

import numpy as np

from .errors import ParamError, check_param
from .kernels.activations import argmax, topk

LLAMA_DEFAULT_SEED = 0xFFFFFFFF   # "pick a random seed"
CHAIN_ORDER = ("penalties", "top_k", "typ_p", "top_p", "min_p", "temperature")


@dataclass
class SamplerParams:
    """common_params_sampling (the fields specnb implements), with llama.cpp's defaults."""
    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.0
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    min_keep: int = 0
    seed: int = LLAMA_DEFAULT_SEED
    samplers: tuple = CHAIN_ORDER

    def validate(self) -> "SamplerParams":
        def num(name, lo=None, hi=None, lo_open=False, integer=False, expected=""):
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) if integer else \
                isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            ok = ok and (integer or math.isfinite(v))
            if ok and lo is not None:
                ok = v > lo if lo_open else v >= lo
            if ok and hi is not None:
                ok = v <= hi
            check_param(ok, name, v, expected)
        num("temp", 0.0, expected="a finite number >= 0 (0 = greedy)")
        num("top_k", integer=True, expected="an integer (<= 0 disables top-k)")
        num("top_p", 0.0, 1.0, lo_open=True, expected="a number in (0, 1] (1 disables top-p)")
        num("min_p", 0.0, 1.0, expected="a number in [0, 1] (0 disables min-p)")
        num("typ_p", 0.0, 1.0, lo_open=True, expected="a number in (0, 1] (1 disables typical-p)")
        num("penalty_last_n", -1, integer=True, expected="an integer >= -1 (0 disables, -1 = all)")
        num("penalty_repeat", 0.0, lo_open=True, expected="a number > 0 (1 disables)")
        num("penalty_freq", expected="a finite number (0 disables)")
        num("penalty_present", expected="a finite number (0 disables)")
        num("min_keep", 0, integer=True, expected="an integer >= 0")
        num("seed", 0, 0xFFFFFFFF, integer=True, expected="an integer in [0, 4294967295]")
        for s in self.samplers:
            check_param(s in CHAIN_ORDER, "samplers", s, "names from " + ", ".join(CHAIN_ORDER))
        return self

    @property
    def greedy(self) -> bool:
        return self.temp <= 0.0 and "temperature" in self.samplers

    def replace(self, **kw) -> "SamplerParams":
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(kw) - set(d)
        if unknown:
            raise ParamError(f"unknown sampler parameter(s): {', '.join(sorted(unknown))}")
        d.update(kw)
        return SamplerParams(**d).validate()


@dataclass
class Candidates:
    """llama_token_data_array: candidate ids with logits, and probabilities after dist."""
    ids: np.ndarray            # int64 [n]
    logits: np.ndarray         # float64 [n], sorted descending
    p: np.ndarray | None = None
    selected: int = -1

    @property
    def size(self) -> int:
        return len(self.ids)


def _softmax(logits: np.ndarray) -> np.ndarray:
    # [n] -> [n]  (llama_sampler_softmax_impl on already-sorted candidates)
    e = np.exp(logits - logits[0]) if len(logits) else logits
    return e / e.sum()


class Sampler:
    """common_sampler: sample(ctx, idx) -> token; accept(token); clone(); reset()."""

    def __init__(self, params: SamplerParams | None = None, n_vocab: int | None = None):
        self.params = (params or SamplerParams()).validate()
        self.n_vocab = n_vocab
        seed = self.params.seed
        if seed == LLAMA_DEFAULT_SEED:
            seed = int(np.random.SeedSequence().entropy % 0xFFFFFFFF)
        self.seed_used = seed
        self.rng = np.random.Generator(np.random.PCG64(seed))
        n = self.params.penalty_last_n
        self.prev: deque = deque(maxlen=None if n < 0 else max(n, 0))   # penalty window
        self.counts: Counter = Counter()
        self.cur: Candidates | None = None

    # ---- the chain -----------------------------------------------------------------------
    def _candidates(self, logits: np.ndarray) -> Candidates:
        """penalties then top_k: the full vocab shrinks to k sorted candidates."""
        P = self.params
        logits = np.asarray(logits, dtype=np.float32)
        if self._penalties_active():
            logits = logits.astype(np.float64)
            for tok, c in self.counts.items():        # llama_sampler_penalties_apply
                l = logits[tok]
                l = l * P.penalty_repeat if l <= 0 else l / P.penalty_repeat
                logits[tok] = l - c * P.penalty_freq - (c > 0) * P.penalty_present
        k = P.top_k if "top_k" in P.samplers else 0
        if 0 < k < len(logits):
            ids, vals = topk(logits, k)                # llama_sampler_top_k_impl
        else:
            ids = np.argsort(-logits, kind="stable")
            vals = logits[ids]
        return Candidates(ids.astype(np.int64), vals.astype(np.float64))

    def _penalties_active(self) -> bool:
        P = self.params
        return bool(P.penalty_last_n != 0 and self.counts and "penalties" in P.samplers and
                    (P.penalty_repeat != 1.0 or P.penalty_freq != 0.0 or P.penalty_present != 0.0))

    def _apply_rest(self, c: Candidates) -> None:
        P = self.params
        keep = max(P.min_keep, 1)
        for name in P.samplers:
            if name == "typ_p" and P.typ_p < 1.0 and c.size > 1:     # locally typical sampling
                p = _softmax(c.logits)
                ent = -np.sum(p * np.log(p + 1e-300))
                order = np.argsort(np.abs(-np.log(p + 1e-300) - ent), kind="stable")
                cum = np.cumsum(p[order])
                last = len(order)
                for i in range(len(order)):
                    if cum[i] > P.typ_p and i + 1 >= keep:
                        last = i + 1
                        break
                sel = np.sort(order[:last])          # keep descending-logit order
                c.ids, c.logits = c.ids[sel], c.logits[sel]
            elif name == "top_p" and P.top_p < 1.0:
                cum = np.cumsum(_softmax(c.logits))
                last = c.size
                for i in range(c.size):
                    if cum[i] >= P.top_p and i + 1 >= keep:
                        last = i + 1
                        break
                c.ids, c.logits = c.ids[:last], c.logits[:last]
            elif name == "min_p" and P.min_p > 0.0:
                floor = c.logits[0] + math.log(P.min_p)
                last = max(int(np.sum(c.logits >= floor)), min(keep, c.size))
                c.ids, c.logits = c.ids[:last], c.logits[:last]
            elif name == "temperature":
                if P.temp <= 0.0:                   # keep only the max (already first)
                    c.ids, c.logits = c.ids[:1], c.logits[:1]
                else:
                    c.logits = c.logits / P.temp
        # dist: softmax, one uniform draw, first index where the cumulative sum passes it
        c.p = _softmax(c.logits)
        u = self.rng.random()
        c.selected = min(int(np.searchsorted(np.cumsum(c.p), u, side="right")), c.size - 1)

    def sample_logits(self, logits: np.ndarray) -> int:
        """Run the chain over one logits row [n_vocab] and return the chosen token id."""
        P = self.params
        if P.greedy and not self._penalties_active():
            # fast path, same result: no penalty to apply, the chain keeps the argmax
            i = int(argmax(np.asarray(logits, dtype=np.float32)))
            self.cur = Candidates(np.array([i]), np.array([float(logits[i])]), np.ones(1), 0)
            self.rng.random()                       # dist still draws once
            return i
        c = self._candidates(logits)
        self._apply_rest(c)
        self.cur = c
        return int(c.ids[c.selected])

    def sample(self, ctx, idx: int) -> int:
        """common_sampler_sample(gsmpl, ctx, idx): sample from the logits of batch row idx."""
        return self.sample_logits(ctx.get_logits_ith(idx))

    def accept(self, token: int) -> None:
        """common_sampler_accept: the token enters the penalty window."""
        n = self.params.penalty_last_n
        if n == 0:
            return
        if self.prev.maxlen is not None and len(self.prev) == self.prev.maxlen:
            old = self.prev[0]
            self.counts[old] -= 1
            if self.counts[old] <= 0:
                del self.counts[old]
        self.prev.append(int(token))
        self.counts[int(token)] += 1

    def reset(self) -> None:
        """common_sampler_reset: clear the penalty window (the RNG keeps its state)."""
        self.prev.clear()
        self.counts.clear()

    def clone(self) -> "Sampler":
        """common_sampler_clone: an independent copy, RNG state included."""
        return copy.deepcopy(self)

    def get_candidates(self) -> Candidates | None:
        """common_sampler_get_candidates: the candidates of the last sample, sorted."""
        return self.cur

    def prob_of(self, token: int) -> float:
        """Probability the last sample gave `token` (0 when it was not a candidate)."""
        c = self.cur
        if c is None or c.p is None:
            return 0.0
        hit = np.nonzero(c.ids == token)[0]
        return float(c.p[hit[0]]) if len(hit) else 0.0


def sample_and_accept_n(smpl: Sampler, ctx, draft, idxs=None, probs: list | None = None) -> list[int]:
    """common_sampler_sample_and_accept_n: verify a draft against the target's own sampler.

    Row idxs[i] of the last target batch holds the logits that predict draft[i]. Each row is
    sampled with the target chain and the sample accepted; the first sample that differs from
    the draft ends the walk (it replaces the rejected token). If every draft token matched,
    one more sample from row idxs[len(draft)] is the bonus token. Returns the committed ids:
    len(result) - 1 draft tokens were accepted, and len(result) >= 1 always. If `probs` is a
    list, the sampler's probability of each sampled token is appended to it (for views).
    """
    if idxs is None:
        idxs = list(range(len(draft) + 1))
    if len(idxs) != len(draft) + 1:
        raise ParamError(f"sample_and_accept_n: {len(idxs)} rows for a draft of {len(draft)} "
                         f"(needs len(draft) + 1)")
    result = []
    i = 0
    while i < len(draft):
        tok = smpl.sample(ctx, idxs[i])
        smpl.accept(tok)
        result.append(tok)
        if probs is not None:
            probs.append(smpl.prob_of(tok))
        if draft[i] != tok:
            break
        i += 1
    if i == len(draft):
        tok = smpl.sample(ctx, idxs[i])
        smpl.accept(tok)
        result.append(tok)
        if probs is not None:
            probs.append(smpl.prob_of(tok))
    return result
