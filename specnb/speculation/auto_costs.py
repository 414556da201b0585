"""The measured costs behind `auto` (auto.py): what a k-row step of a model costs (`BatchCost`,
from this run's own timings) and how often each draft position is accepted (`Acceptance`).

A BatchCost keeps the last WINDOW times of each size k it measured, and reads any k from them:
  - at a measured size: the running median, a size measured fewer than TRUSTED times no dearer
    than its better-measured neighbours say (`cap_few_samples`), all made non-decreasing in k
    (`monotone`: a k-row step cannot be cheaper than a smaller one);
  - between two measured sizes: `between` (the roofline of the two, optimistic, so that an
    untried size gets tried and measured), with a smaller size measured too no cheaper than the
    step below continued (`onward`); the cautious reading is the straight line (`chord`);
  - above the largest: the slope of the last two; below the smallest: its value.
With a prior (`CostPrior`: a machine's costs record, read before the run), every size reads the
record's step times one scale, the median of the run's own times over the record's at the sizes it
measured: the record gives the curve's shape (every size timed in turn on a quiet machine), the run
its level, so every size is known from the first round and a slow spell in the run moves every
size alike instead of one against the others.
An Acceptance keeps the counts per draft position, decayed by DECAY per observed round, under a
Beta prior of PRIOR_STRENGTH pseudo-counts centred on the pooled rate (the pooled rate itself
starts from `mean`, 1/2 unless a prior says otherwise); with `chain` (a costs prior) each position's
prior is centred on the estimate of the position before it times CHAIN_STEP instead.
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

from .draft_len import expected_tokens_upto

PRIOR_STRENGTH = 2.0          # Beta prior pseudo-counts per position, centred on the pooled rate
CHAIN_STEP = 0.98             # Acceptance.chain: a position's prior, the one before's estimate times this
DECAY = 0.97                  # per observed round: older acceptance counts fade (prompts change)
WINDOW = 15                   # running median over the last WINDOW timings per batch size
TRUSTED = 3                   # a size with fewer timings is capped by its better-measured neighbours


def monotone(points: list, weights: list) -> list:
    """The non-decreasing sequence closest to `points` (values in order of k) in weighted least
    squares: pool-adjacent-violators (isotonic regression). A k-row step cannot be cheaper than
    a smaller one; measured medians that say so (a few noisy samples at one size against many at
    the next) are pooled, each size weighted by its sample count."""
    blocks: list = []                         # [value, weight, count of sizes]
    for v, w in zip(points, weights):
        blocks.append([float(v), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v1, w1, n1 = blocks.pop()
            v0, w0, n0 = blocks.pop()
            blocks.append([(v0 * w0 + v1 * w1) / (w0 + w1), w0 + w1, n0 + n1])
    return [v for v, _, n in blocks for _ in range(n)]


def chord(k: int, k0: int, t0: float, k1: int, t1: float) -> float:
    """The straight line through (k0, t0) and (k1, t1), at k: the cautious reading between two
    measured sizes."""
    return t0 + (t1 - t0) * (k - k0) / (k1 - k0)


def between(k: int, k0: int, t0: float, k1: int, t1: float) -> float:
    """A k-row step's time between two measured sizes k0 < k < k1 (t0 <= t1): the roofline of
    the two, max(t0, t1 k / k1) (the weights are read once, whatever the rows; the rows' work
    grows with k at the larger size's rate per row), where it is under the straight line between
    them. A batch cost curve is flat, then rises: the straight line from a one-row step to the
    prompt's batch lies above it everywhere between, and would make every size nobody has tried
    look dearer than it is, so that no round tries it. The roofline is the optimistic reading:
    a size looks as cheap as it may be, a round that wants it measures it, and the measurement
    then replaces the estimate."""
    return min(chord(k, k0, t0, k1, t1), max(t0, t1 * k / k1))


def onward(k: int, kp: int, tp: float, k0: int, t0: float, k1: int, t1: float) -> float:
    """A k-row step's time between measured sizes k0 < k < k1, with a smaller one kp < k0 measured
    too: `between`, but no cheaper than the step from kp to k0 continued (and no dearer than the
    straight line to k1). Where each row costs about the same (a CPU whose rows are compute), the
    roofline toward a large batch far above (the prompt's) reads the next size as free as the last
    one; the slope just below says what a row costs there."""
    return max(between(k, k0, t0, k1, t1), min(chord(k, k0, t0, k1, t1), t0 + (t0 - tp) * (k - k0) / (k0 - kp)))


def _inside(k: int, pts: list, j: int) -> float:
    """BatchCost's reading of a size k strictly between its measured points j and j + 1:
    `onward` when a point below j was measured, else `between`."""
    (k0, t0), (k1, t1) = pts[j], pts[j + 1]
    return onward(k, *pts[j - 1], k0, t0, k1, t1) if j > 0 else between(k, k0, t0, k1, t1)


def _median(xs) -> float:
    """statistics.median, without its generality (a policy takes medians every round)."""
    v = sorted(xs)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def cap_few_samples(ks: list, medians: list, counts: list, trusted: int = TRUSTED) -> list:
    """The medians, each size measured fewer than `trusted` times capped by the sizes measured at
    least that often (the trusted ones, made non-decreasing by `monotone`): between two of them at
    most the straight line joining them, below the smallest at most its value; above the largest
    uncapped (a straight line from small sizes would promise long drafts at the price of short
    ones). Only a dear reading is corrected: a size that looks too cheap is chosen, and so
    measured again, but one slow sample (a busy moment) would keep its size unchosen, and its
    estimate uncorrected, for the rest of the run."""
    t = [i for i, n in enumerate(counts) if n >= trusted]
    if not t or len(t) == len(ks):
        return list(medians)
    tk = [ks[i] for i in t]
    tv = monotone([medians[i] for i in t], [counts[i] for i in t])
    out = []
    for k, m, n in zip(ks, medians, counts):
        if n < trusted and k < tk[-1]:
            j = bisect.bisect(tk, k)            # tk[j - 1] < k < tk[j] (k itself is not trusted)
            if j == 0:
                m = min(m, tv[0])
            else:
                m = min(m, chord(k, tk[j - 1], tv[j - 1], tk[j], tv[j]))
        out.append(m)
    return out


@dataclass(frozen=True)
class CostPrior:
    """What a machine's costs record (measure/costs.py) says of a pair before a run measures
    anything, in seconds of a k-row step when it was measured: the target's (`target`) and the draft
    model's (`draft`), k = 1..K; `source` names the record for the printed statistics."""
    target: dict
    draft: dict
    source: str = ""

    def __post_init__(self):
        for name, tab in (("target", self.target), ("draft", self.draft)):
            if not tab or 1 not in tab or any(not (math.isfinite(v) and v > 0) for v in tab.values()):
                raise ValueError(f"CostPrior.{name}: expected seconds > 0 for k = 1.., got {tab!r}")


class BatchCost:
    """Seconds of a k-row step, from measurements: the running median of the last WINDOW times at
    each measured k, a size with fewer than TRUSTED times no dearer than its better-measured
    neighbours say (`cap_few_samples`), made non-decreasing in k (`monotone`: sizes whose medians
    fall with k are pooled, weighted by their sample counts); between measured sizes `between`
    (the roofline of the two, at most the straight line), past the second measured size `onward`
    (no cheaper than the step below continued); above the largest, the slope of the last two
    points (never negative); below the smallest, the smallest's value."""

    def __init__(self, window: int = WINDOW, trusted: int = TRUSTED, prior: dict | None = None,
                 fallback_scale=None):
        self.window, self.trusted = window, trusted
        self.samples: dict[int, deque] = {}
        # {k: seconds} a costs record measured, rescaled by this run's own timings (scale());
        # fallback_scale() where this run has measured none of its sizes (the draft: the target's)
        self.prior = dict(prior) if prior else {}
        self.fallback_scale = fallback_scale
        self._points: list | None = None          # the medians, until the next add()
        self._table: list = []                    # upto()'s values, until the next add()
        self._cautious: list = []                 # upto(n, cautious=True)'s

    def add(self, k: int, seconds: float) -> None:
        if k >= 1 and seconds > 0 and math.isfinite(seconds):
            self.samples.setdefault(int(k), deque(maxlen=self.window)).append(float(seconds))
            self.invalidate()

    def invalidate(self) -> None:
        """Read the points again at the next use (a new sample, or a prior's scale moved)."""
        self._points = None
        self._table, self._cautious = [], []

    def upto(self, n: int, cautious: bool = False) -> list:
        """[self(0), self(1), ..., self(n)], kept until the next add() (a policy reads them
        several times per round). cautious: the straight line between measured sizes instead of
        their roofline (the dearer reading: every unmeasured size at its most)."""
        if cautious:
            if len(self._cautious) <= n:
                self._cautious = self._interpolate(n, True)
            return self._cautious
        tab = self._table
        if len(tab) <= n:
            tab = self._table = self._interpolate(n)
        return tab

    def _interpolate(self, n: int, cautious: bool = False) -> list:
        # [self(0), ..., self(n)] in one walk over the points
        pts = self.points()
        if not pts:
            return [math.nan] * (n + 1)
        out, j = [], 0
        k_last, t_last = pts[-1]
        slope = 0.0 if len(pts) == 1 else max((t_last - pts[-2][1]) / (k_last - pts[-2][0]), 0.0)
        for k in range(n + 1):
            while j + 1 < len(pts) and pts[j + 1][0] < k:
                j += 1
            (k0, t0) = pts[j]
            if k <= k0:                         # (only below the smallest size)
                out.append(t0)
            elif j + 1 < len(pts):
                out.append(chord(k, k0, t0, *pts[j + 1]) if cautious else _inside(k, pts, j))
            else:                               # above the largest: the last two points' slope
                out.append(t_last + slope * (k - k_last))
        return out

    @property
    def known(self) -> bool:
        return bool(self.samples) or bool(self.prior)

    @property
    def measured(self) -> bool:
        """This run has timed at least one size (a prior alone is not a measurement)."""
        return bool(self.samples)

    def scale(self) -> float:
        """This run's time over the prior's: the median, over every time this run measured at a
        size the prior has, of time / prior (1 without either; the fallback's where none)."""
        ratios = [t / self.prior[k] for k, ts in self.samples.items() if k in self.prior for t in ts]
        if ratios:
            return _median(ratios)
        return self.fallback_scale() if self.fallback_scale is not None else 1.0

    def points(self) -> list[tuple[int, float]]:
        if self._points is None:
            if self.prior:
                # the record's shape (every size timed in turn, on a quiet machine), the run's level:
                # a slow spell in the run moves every size alike, never one against the others
                f = self.scale()
                self._points = [(k, f * t) for k, t in sorted(self.prior.items())]
            else:
                ks = sorted(self.samples)
                n = [len(self.samples[k]) for k in ks]
                med = cap_few_samples(ks, [_median(self.samples[k]) for k in ks], n, self.trusted)
                self._points = list(zip(ks, monotone(med, n)))
        return self._points

    def __call__(self, k: int) -> float:
        """A k-row step's seconds: upto()'s value."""
        k = max(int(k), 0)
        return self.upto(k)[k]


@dataclass
class Acceptance:
    """Conditional acceptance per draft position: decayed counts with a Beta prior centred on the
    pooled rate. Position i is observed only when positions < i were all accepted."""
    acc: list = field(default_factory=list)
    exa: list = field(default_factory=list)
    decay: float = DECAY
    prior: float = PRIOR_STRENGTH
    mean: float = 0.5                 # the pooled rate before anything is observed
    chain: bool = False               # each position's prior centred on the position before's estimate
    _cache: tuple | None = field(default=None, repr=False, compare=False)

    def observe(self, n_draft: int, n_accepted: int) -> None:
        if n_draft <= 0:
            return
        self._cache = None
        self.acc = [x * self.decay for x in self.acc]
        self.exa = [x * self.decay for x in self.exa]
        n_exa = min(n_accepted + 1, n_draft)
        while len(self.exa) < n_exa:
            self.acc.append(0.0)
            self.exa.append(0.0)
        for i in range(n_exa):
            self.exa[i] += 1.0
            self.acc[i] += 1.0 if i < n_accepted else 0.0

    def pooled(self) -> float:
        return (sum(self.acc) + 2.0 * self.mean) / (sum(self.exa) + 2.0)

    def rates(self, n: int) -> list:
        c = self._cache                              # (n, rates, E(0..n)) until the next observe
        if c is not None and c[0] == n and c[3] == (self.prior, self.decay):
            return c[1]
        m, r = self.pooled(), []
        for i in range(n):
            # chain: a position nobody has reached yet reads as the one before it times CHAIN_STEP
            # (code's drafts are accepted nearly alike at every position, a little less as the draft
            # goes on; the pooled rate would carry an answer's first misses to every position)
            centre = (r[-1] * CHAIN_STEP if r else self.mean) if self.chain else m
            r.append(((self.acc[i] if i < len(self.acc) else 0.0) + self.prior * centre) /
                     ((self.exa[i] if i < len(self.exa) else 0.0) + self.prior))
        self._cache = (n, r, expected_tokens_upto(r, n), (self.prior, self.decay))
        return r

    def expected_upto(self, n: int) -> list:
        """expected_tokens_upto(self.rates(n), n), kept with the rates."""
        self.rates(n)
        return self._cache[2]
