"""llama.cpp's individual samplers, one class each, as src/llama-sampler.cpp defines them.

Each sampler works on a `Candidates` array (llama_token_data_array: ids, logits, p, selected,
sorted) in place, the way llama.cpp's `apply` does, and keeps its own state where llama.cpp's
does (the penalty window, DRY's history, the RNGs, mirostat's mu): `accept(token)` feeds it,
`reset()` clears it, and a deep copy clones it. The order of the candidates matters: the dist
step walks them as they stand, so every sampler sorts (or leaves unsorted) exactly where
llama.cpp does. Ties in a sort keep their earlier position (llama.cpp's sorts leave the order
of equal logits unspecified).

Line references are to llama.cpp master 34af94cd (src/llama-sampler.cpp, see docs/llama_cpp.md);
where c392e50 (src/llama-sampling.cpp, Feb 2025) behaves differently, the class says so.
Arithmetic is float32 like llama.cpp's, except a few sums noted where NumPy's order differs.

`preview=True` in `apply` asks for the candidates the next real `apply` would produce without
changing any state: samplers that draw use a copy of their RNG (XTC) or skip the draw (dist,
mirostat), and mirostat keeps its mu. `Sampler.distribution` is built on it.
"""
from __future__ import annotations

import copy
import math
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from ..kernels.activations import topk as _topk_kernel
from .rng import Mt19937, get_rng_seed

F32 = np.float32
_ARANGE: dict[int, np.ndarray] = {}


@dataclass
class Candidates:
    """llama_token_data_array: candidate ids with logits, probabilities p after a softmax."""
    ids: np.ndarray            # int64 [n]
    logits: np.ndarray         # float32 [n]
    p: np.ndarray              # float32 [n] (zeros until a softmax)
    selected: int = -1
    sorted: bool = False       # by logit, descending
    vocab_order: bool = False  # ids[i] == i for every i (the array as llama.cpp first fills it)

    @classmethod
    def from_logits(cls, logits, ids=None) -> "Candidates":
        # [n_vocab] -> one candidate per token, in vocab order (common_sampler::set_logits);
        # ids: the token of each logit, ascending (a restricted head), else 0..n-1
        logits = np.array(logits, dtype=F32)
        n = len(logits)
        if ids is not None:
            return cls(np.asarray(ids, dtype=np.int64), logits, np.zeros(n, dtype=F32))
        if n not in _ARANGE:
            _ARANGE[n] = np.arange(n, dtype=np.int64)
        return cls(_ARANGE[n], logits, np.zeros(n, dtype=F32), vocab_order=True)

    @property
    def size(self) -> int:
        return len(self.ids)

    def take(self, idx) -> None:
        """Keep the candidates at positions idx, in that order."""
        self.ids, self.logits, self.p = self.ids[idx], self.logits[idx], self.p[idx]
        self.vocab_order = False

    def resize(self, n: int) -> None:
        """cur_p->size = n: keep the first n (a prefix of a vocab-ordered array stays so)."""
        self.ids, self.logits, self.p = self.ids[:n], self.logits[:n], self.p[:n]

    def sort(self, k: int | None = None) -> None:
        """llama_token_data_array_partial_sort_inplace: the k largest logits, descending."""
        n = self.size
        k = n if k is None else min(k, n)
        if k <= 256 and n > 4 * k:
            pos, _ = _topk_kernel(self.logits, k)          # ties: lower position first
        else:
            pos = np.argsort(-self.logits, kind="stable")[:k]
        self.take(pos)
        self.sorted = True

    def softmax(self, do_sort: bool) -> None:
        """llama_sampler_softmax_impl (:293): p = exp(l - max) / sum, in float32."""
        if do_sort and not self.sorted:
            self.sort()
        m = self.logits[0] if self.sorted else self.logits.max()
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(self.logits - m)
            self.p = p / np.cumsum(p)[-1]

    def positions(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in this array, index into tokens) of the given token ids present here."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.vocab_order:
            hit = np.nonzero((tokens >= 0) & (tokens < self.size))[0]
            return tokens[hit], hit
        order = np.argsort(self.ids, kind="stable")
        i = np.minimum(np.searchsorted(self.ids[order], tokens), max(self.size - 1, 0))
        hit = np.nonzero(self.ids[order][i] == tokens)[0] if self.size else np.zeros(0, np.int64)
        return order[i[hit]], hit

    def dense(self, n_vocab: int) -> np.ndarray:
        """The probabilities as a vector over the whole vocab (0 for tokens not here)."""
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.p
        return out


class SamplerStep:
    """The interface: name, apply(cur, preview), accept(token), reset(). Stateless by default."""
    name = "?"
    enabled = True

    def apply(self, cur: Candidates, preview: bool = False) -> None:
        pass

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        pass


class Disabled(SamplerStep):
    """llama_sampler_init_empty: a sampler whose parameters switch it off (printed as ?name)."""
    enabled = False

    def __init__(self, name: str):
        self.name = name


def temp_impl(cur: Candidates, temp: float) -> None:
    """llama_sampler_temp_impl (:265): divide by temp; temp <= 0 keeps only the first maximum
    (every other logit becomes -inf, the array keeps its size)."""
    if cur.size == 0:
        return
    if temp <= 0.0:
        i = int(np.argmax(cur.logits))
        keep = cur.logits[i]
        cur.logits = np.full(cur.size, -np.inf, dtype=F32)
        cur.logits[i] = keep
        return
    cur.logits = cur.logits / F32(temp)


class LogitBias(SamplerStep):
    """llama_sampler_logit_bias (:3902): add each bias to its token's logit (always first in
    the chain, so the array is still in vocab order; ids outside the array are ignored)."""
    name = "logit-bias"

    def __init__(self, biases):
        self.tokens = np.array([t for t, _ in biases], dtype=np.int64)
        self.biases = np.array([b for _, b in biases], dtype=F32)

    def apply(self, cur, preview=False):
        pos, hit = cur.positions(self.tokens)
        np.add.at(cur.logits, pos, self.biases[hit])


class Penalties(SamplerStep):
    """llama_sampler_penalties (:2919 accept, :2950 apply): over the last penalty_last_n
    accepted tokens, a token seen c times gets l/r (l > 0) or l*r (l <= 0), minus c*freq,
    minus present. c392e50's clone dropped the counts (fixed in master; specnb copies all)."""
    name = "penalties"

    def __init__(self, last_n: int, repeat: float, freq: float, present: float):
        self.last_n, self.repeat, self.freq, self.present = last_n, F32(repeat), F32(freq), F32(present)
        self.prev: deque = deque(maxlen=last_n)
        self.counts: Counter = Counter()

    def accept(self, token):
        if len(self.prev) == self.last_n:
            old = self.prev[0]
            self.counts[old] -= 1
            if self.counts[old] == 0:
                del self.counts[old]
        self.prev.append(int(token))
        self.counts[int(token)] += 1

    def apply(self, cur, preview=False):
        if self.counts:
            toks = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
            pos, hit = cur.positions(toks)
            c = np.fromiter(self.counts.values(), dtype=F32, count=len(self.counts))[hit]
            l = cur.logits[pos]
            l = np.where(l <= 0, l * self.repeat, l / self.repeat)
            cur.logits[pos] = l - (c * self.freq + F32(1.0) * self.present)
        cur.sorted = False

    def reset(self):
        self.prev.clear()
        self.counts.clear()


class Dry(SamplerStep):
    """DRY, "don't repeat yourself" (llama_sampler_dry, :3376 accept, :3386 apply).

    If the last tokens repeat an earlier stretch of the history, the token that followed that
    stretch would extend the repeat: for a repeat of length L >= allowed_length its logit loses
    multiplier * base^(L - allowed_length). Repeats do not reach back past a sequence breaker
    (restart sequences such as "\\n"; `breakers` maps a head token to the token tails that
    complete a breaker, an empty tail for a one-token breaker), and one-token breakers are
    never penalised. The history holds the last penalty_last_n accepted tokens (c392e50 read
    -1 as the context size; master rejects negative values).
    """
    name = "dry"
    FLOAT_MAX_LOG = 88.7228391

    def __init__(self, multiplier, base, allowed_length, penalty_last_n, breakers: dict):
        self.multiplier, self.base = F32(multiplier), F32(base)
        self.allowed_length, self.last_n = int(allowed_length), int(penalty_last_n)
        self.breakers = breakers                     # head token -> list of tail tuples
        self.last_tokens: deque = deque(maxlen=self.last_n)

    def accept(self, token):
        self.last_tokens.append(int(token))

    def reset(self):
        self.last_tokens.clear()

    def max_repeats(self) -> dict[int, int] | None:
        """Token -> the longest repeat its emission would extend (steps 1-3 of the apply);
        None where llama.cpp returns early (history too short, a breaker too close)."""
        r = np.array(self.last_tokens, dtype=np.int64)[::-1]     # r[i] = last_tokens.rat(i)
        n = len(r)
        if n <= self.allowed_length:
            return None
        rep_limit = n                                # step 1: the nearest breaker bounds repeats
        for i in range(n):
            tails = self.breakers.get(int(r[i]))
            if tails is None:
                continue
            longest = -1
            for tail in tails:
                L = len(tail)
                if longest < L <= i and all(tail[o] == r[i - o - 1] for o in range(L)):
                    longest = L
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < self.allowed_length:
            return None
        best: dict[int, int] = {}
        for k in range(1, n):                        # step 2: suffix repeats (the Z-algorithm's
            eq = r[:n - k] == r[k:]                  # values, computed directly)
            z = int(np.argmin(eq)) if not eq.all() else n - k
            z = min(z, rep_limit)
            if z >= self.allowed_length:             # step 3: the token after that repeat
                tok = int(r[k - 1])
                best[tok] = max(best.get(tok, 0), z)
        return best

    def apply(self, cur, preview=False):
        best = self.max_repeats()
        if best is None:
            return
        if best:
            max_exp = int(self.FLOAT_MAX_LOG / math.log(self.base)) if self.base > 1.000001 else 0
            toks = np.array(list(best), dtype=np.int64)
            pos, hit = cur.positions(toks)
            for p_, h in zip(pos, hit):
                tok = int(toks[h])
                if () in self.breakers.get(tok, ()):         # a one-token breaker
                    continue
                e = best[tok] - self.allowed_length
                if max_exp > 0:
                    e = min(e, max_exp)
                cur.logits[p_] -= F32(float(self.multiplier) * float(self.base) ** e)
        cur.sorted = False


def dry_breakers(vocab, breakers, max_chars: int = 40, max_tail: int = 20) -> dict:
    """get_overlapping_token_sequences (:3330), for every breaker string: a token whose text
    contains the breaker is a one-token breaker; a token whose text ends with the start of the
    breaker is a head, and the rest of the breaker, tokenized, is its tail."""
    from ..vocab.bpe import clean_spaces
    out: dict[int, list] = {}
    words = []
    for tid in range(vocab.n_vocab):                 # vocab.detokenize({id}, true) as bytes
        w = vocab.token_to_piece(tid, special=True)
        if vocab.add_space_prefix and w[:1] == b" ":
            w = w[1:]
        words.append(clean_spaces(w) if vocab.clean_spaces else w)
    for s in breakers:
        s = s.encode("utf-8", "surrogateescape")[:max_chars]   # (a \xHH escape can make any byte)
        if not s:
            continue
        for tid, word in enumerate(words):
            if s in word:
                _add_tail(out, tid, ())
                continue
            pos = word.find(s[:1])
            while pos >= 0:
                rest = word[pos:]
                if s.startswith(rest):
                    tail = vocab.tokenize(s[len(rest):].decode("utf-8", "replace"),
                                          add_special=False, parse_special=False)
                    _add_tail(out, tid, tuple(tail[:max_tail]))
                pos = word.find(s[:1], pos + 1)
    return out


def _add_tail(out: dict, tid: int, tail: tuple) -> None:
    tails = out.setdefault(tid, [])
    if tail not in tails:
        tails.append(tail)


class TopK(SamplerStep):
    """llama_sampler_top_k (:321, :1449): keep the k largest logits, sorted. k <= 0 disables it
    (c392e50 instead sorted the whole array)."""
    name = "top-k"

    def __init__(self, k: int):
        self.k = int(k)

    def apply(self, cur, preview=False):
        k = min(self.k, cur.size)
        if not cur.sorted:
            cur.sort(k)
        cur.resize(k)


class TopP(SamplerStep):
    """llama_sampler_top_p (:1549): sort, keep the smallest prefix whose probability mass
    reaches p (and at least min_keep)."""
    name = "top-p"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), int(min_keep)

    def apply(self, cur, preview=False):
        cur.softmax(do_sort=False)
        if not cur.sorted and cur.size > 1024 and self.min_keep <= 256:
            # llama.cpp first sorts only the top 256; enough when they reach p already
            top = np.sort(np.argpartition(-cur.logits, 255)[:256])
            top = top[np.argsort(-cur.logits[top], kind="stable")]
            if np.cumsum(cur.p[top], dtype=F32)[-1] >= self.p:
                cur.take(top)
                cur.sorted = True
        if not cur.sorted:
            cur.sort()
        cum = np.cumsum(cur.p, dtype=F32)
        ok = np.nonzero((cum >= self.p) & (np.arange(1, cur.size + 1) >= self.min_keep))[0]
        cur.resize(int(ok[0]) + 1 if len(ok) else cur.size)


class MinP(SamplerStep):
    """llama_sampler_min_p (:1749): keep tokens with p >= p_min * p_max, i.e. logit >=
    max + log(p_min). On unsorted candidates the survivors keep their order."""
    name = "min-p"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), int(min_keep)

    def apply(self, cur, preview=False):
        if cur.size == 0:
            return
        if not cur.sorted:
            floor = cur.logits.max() + np.log(self.p)
            keep = np.nonzero(cur.logits >= floor)[0]
            if len(keep) and len(keep) >= self.min_keep:
                if len(keep) < cur.size:
                    cur.take(keep)
                return
            cur.sort()
        floor = cur.logits[0] + np.log(self.p)
        below = np.nonzero((cur.logits < floor) & (np.arange(cur.size) >= self.min_keep))[0]
        below = below[below >= 1]                      # the first token always stays
        cur.resize(int(below[0]) if len(below) else cur.size)


class Typical(SamplerStep):
    """Locally typical sampling (llama_sampler_typical, :1910): keep the tokens whose surprise
    -log p is closest to the entropy, until their mass exceeds p. c392e50 kept every token
    when min_keep = 0 (an unsigned underflow, fixed in master)."""
    name = "typical"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), int(min_keep)

    def apply(self, cur, preview=False):
        cur.softmax(do_sort=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = np.log(cur.p)
            entropy = np.cumsum(-cur.p * logp, dtype=F32)[-1]
            shifted = np.abs(-logp - entropy)
        order = np.argsort(shifted, kind="stable")
        cum = np.cumsum(cur.p[order], dtype=F32)
        i = np.arange(len(order))
        ok = np.nonzero((cum > self.p) & ((self.min_keep == 0) | (i >= self.min_keep - 1)))[0]
        last = int(ok[0]) + 1 if len(ok) else len(order)
        cur.take(order[:last])
        cur.sorted = False


class TopNSigma(SamplerStep):
    """Top-n-sigma (llama_sampler_top_n_sigma, :3237): mask (to -inf) every logit below
    max - n * std, the mean and std taken over the finite logits. c392e50 ran it only in a
    fixed chain (top-k, temp, top-n-sigma) whenever top_n_sigma >= 0, ignoring --samplers;
    master lists it among the samplers and disables it at n <= 0."""
    name = "top-n-sigma"

    def __init__(self, n: float):
        self.n = F32(n)

    def apply(self, cur, preview=False):
        if cur.size <= 1:
            return
        l = cur.logits
        valid = l != -np.inf
        m = l[0] if not valid.any() else max(l[0], l[valid].max())
        nv = int(valid.sum())
        mean = F32(np.cumsum(l[valid], dtype=F32)[-1] / F32(nv)) if nv else F32(0)
        d = (l[valid] - mean).astype(np.float64)
        std = F32(math.sqrt(F32(np.sum(d * d)) / F32(nv))) if nv else F32(0)
        cur.logits = np.where(l < m - self.n * std, F32(-np.inf), l).astype(F32)


class Xtc(SamplerStep):
    """Exclude top choices (llama_sample_xtc_apply, :2344): with chance `probability` (its own
    mt19937, one float draw), drop every token with p >= threshold except the least likely of
    them, keeping at least min_keep."""
    name = "xtc"

    def __init__(self, probability, threshold, min_keep, seed):
        self.probability, self.threshold, self.min_keep = F32(probability), F32(threshold), min_keep
        self.seed = seed
        self.rng = Mt19937(get_rng_seed(seed))

    def apply(self, cur, preview=False):
        if cur.size < 2:
            return
        rng = copy.deepcopy(self.rng) if preview else self.rng
        if rng.canonical_float() > self.probability:
            return
        cur.softmax(do_sort=True)
        above = np.nonzero(cur.p < self.threshold)[0]
        pos_last = (int(above[0]) if len(above) else cur.size) - 1
        if cur.size - pos_last >= self.min_keep and pos_last > 0:
            cur.take(np.arange(pos_last, cur.size))
            cur.sorted = True

    def reset(self):
        self.rng.seed(get_rng_seed(self.seed))


class Temperature(SamplerStep):
    """Temperature with the dynamic range (llama_sampler_temp_ext, :2133): with delta > 0 the
    temperature moves in [temp - delta, temp + delta] with the normalised entropy of the
    candidates (raised to `exponent`); otherwise logits / temp (temp <= 0: greedy)."""
    name = "temp-ext"

    def __init__(self, temp, delta=0.0, exponent=1.0):
        self.temp, self.delta, self.exponent = F32(temp), F32(delta), F32(exponent)

    def apply(self, cur, preview=False):
        if self.delta <= 0:
            temp_impl(cur, self.temp)
            return
        if cur.size <= 1:
            return
        lo, hi = max(F32(0), self.temp - self.delta), self.temp + self.delta
        max_entropy = -np.log(F32(1.0) / F32(cur.size))
        cur.softmax(do_sort=True)
        p = cur.p[cur.p > 0]
        entropy = -np.cumsum(p * np.log(p), dtype=F32)[-1]
        dyn = lo + (hi - lo) * F32(np.power(entropy / max_entropy, self.exponent))
        temp_impl(cur, float(dyn))
        e = np.exp(cur.logits.astype(np.float64) - float(cur.logits[0]))   # re-softmax in double
        cur.p = (e.astype(F32).astype(np.float64) / np.cumsum(e)[-1]).astype(F32)


class Temp(Temperature):
    """llama_sampler_temp (:2021): plain temperature, the first step of the mirostat chains."""
    name = "temp"

    def __init__(self, temp):
        super().__init__(temp)


def _c_int(x) -> int:
    # a float -> int32 conversion as x86 does it: out of range or NaN gives INT_MIN
    return int(x) if math.isfinite(x) and -2.0 ** 31 <= x < 2.0 ** 31 else -(2 ** 31)


class Mirostat(SamplerStep):
    """Mirostat 1.0 (llama_sampler_mirostat, :2460): estimate the Zipf exponent s from the top m
    probabilities, keep the top k that makes the expected surprise mu, draw (discrete
    distribution), then mu -= eta * (surprise - tau). mu starts at 2 * tau; the update happens
    in apply, so each sample moves it. c392e50's clone copied the state into the source."""
    name = "mirostat"

    def __init__(self, n_vocab, seed, tau, eta, m=100):
        self.n_vocab, self.seed, self.tau, self.eta, self.m = n_vocab, seed, F32(tau), F32(eta), m
        self.mu = F32(2.0) * self.tau
        self.seed_cur = get_rng_seed(seed)
        self.rng = Mt19937(self.seed_cur)

    def truncate(self, cur: Candidates) -> None:
        cur.softmax(do_sort=True)
        n = min(self.m - 1, cur.size - 1)
        i = np.arange(n, dtype=F32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            t = np.log((i + F32(2)) / (i + F32(1)))
            b = np.log(cur.p[:n] / cur.p[1:n + 1])
            s_hat = np.cumsum(t * b, dtype=F32)[-1] / np.cumsum(t * t, dtype=F32)[-1] if n else F32("nan")
            eps = s_hat - F32(1)
            k = np.power(eps * np.power(F32(2), self.mu) / (F32(1) - np.power(F32(self.n_vocab), -eps)),
                         F32(1) / s_hat)
        TopK(max(_c_int(float(k)), 1)).apply(cur)
        cur.softmax(do_sort=True)

    def apply(self, cur, preview=False):
        self.truncate(cur)
        if preview:
            return
        cur.selected = self.rng.discrete(cur.p)
        self.mu = self.mu - self.eta * (-np.log2(cur.p[cur.selected]) - self.tau)

    def reset(self):
        self.mu = F32(2.0) * self.tau
        self.seed_cur = get_rng_seed(self.seed)
        self.rng.seed(self.seed_cur)


class MirostatV2(Mirostat):
    """Mirostat 2.0 (llama_sampler_mirostat_v2, :2573): keep the most likely tokens up to the
    first whose surprise -log2 p exceeds mu (at least one), renormalise, draw, update mu."""
    name = "mirostat-v2"

    def __init__(self, seed, tau, eta):
        super().__init__(0, seed, tau, eta)

    def truncate(self, cur):
        cur.softmax(do_sort=True)
        with np.errstate(divide="ignore"):
            over = np.nonzero(-np.log2(cur.p) > self.mu)[0]
        cur.resize(max(int(over[0]) if len(over) else cur.size, 1))
        cur.softmax(do_sort=True)


class Dist(SamplerStep):
    """The final draw (llama_sampler_dist, :1150), from its own mt19937.

    master: softmax over the candidates as they stand (no sort), one uniform double u, the
    first candidate whose running sum reaches u * sum; one draw even for a single candidate.
    c392e50 (`draw="c392e50"`): sort by logit, softmax, std::discrete_distribution, which
    draws nothing when one candidate is left: seeds agree with a c392e50 build only this way.
    """
    name = "dist"

    def __init__(self, seed: int, draw: str = "master"):
        self.seed, self.draw = seed, draw
        self.seed_cur = get_rng_seed(seed)
        self.rng = Mt19937(self.seed_cur)

    def apply(self, cur, preview=False):
        if cur.size == 0:
            cur.selected = -1
            return
        if self.draw == "c392e50":
            cur.softmax(do_sort=True)
            cur.selected = -1 if preview else self.rng.discrete(cur.p)
            return
        if cur.size == 1:                             # still one draw, as master does
            cur.p = np.ones(1, dtype=F32)
            cur.selected = -1 if preview else 0
            if not preview:
                self.rng.canonical_double()
            return
        m = cur.logits[0] if cur.sorted else cur.logits.max()
        p = np.exp(cur.logits - m)
        run = np.cumsum(p, dtype=np.float64)          # double sums of the float p
        cur.p = (p / run[-1]).astype(F32)
        if preview:
            cur.selected = -1
            return
        hit = np.nonzero(run >= run[-1] * self.rng.canonical_double())[0]
        cur.selected = int(hit[0]) if len(hit) else cur.size - 1

    def reset(self):
        """llama_sampler_dist_reset (:1225): reseed (a fresh random seed for the default)."""
        self.seed_cur = get_rng_seed(self.seed)
        self.rng.seed(self.seed_cur)
