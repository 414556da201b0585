"""Verdicts from intervals: one estimator, one interval beside it, and a word only when the whole
interval lies on one side of its threshold.

A speed-up measured on a shared machine is a handful of paired ratios (plain decoding's time over
speculative decoding's, the two runs taken in turn), and they differ by more than the few percent a
verdict turns on. So every figure the course, the demo and `bench` print is

    the estimate   the median of the paired ratios (one estimator everywhere);
    the interval   their min-max below BOOTSTRAP_FROM pairs, else a percentile bootstrap interval
                   of the median (LEVEL of the resampled medians between its ends);

and a verdict word ("wins", "loses", "cheap", "nearly free", "memory-bound", ...) is said only when
the whole interval lies on one side of the word's threshold. Otherwise the sentence says "within
the noise" and shows the interval: the measurement did not decide.

    iv = interval(ratios)                    # Interval(estimate, low, high, n, method)
    speedup_verdict(iv)                      # "wins", "loses" or "within the noise"
    said(iv)                                 # "wins (1.43x; 1.38-1.49x over 5 pairs)"
    band(iv, ROW_PRICE_BANDS, "not cheap")   # "nearly free", "cheap", "not cheap" or None

`said()` is the one printed form; tests/test_verdict.py reads it back out of every committed
notebook and fails on a word whose interval crosses its threshold.
"""
from __future__ import annotations

import math
import random
import re
import statistics
from dataclasses import dataclass

from ..errors import check_param

BOOTSTRAP_FROM = 5          # pairs from which the interval is a bootstrap one, not the min-max
LEVEL = 0.90                # the bootstrap interval's coverage
RESAMPLES = 2000            # bootstrap resamples (seeded: the same values give the same interval)
NOISE = "within the noise"
ONE = "no verdict from one pair"   # one value has no spread to judge by
DIGITS = 2                  # verdicts are taken on the interval as printed (two decimals), so that
                            # a reader of the printed figures reaches the same word

# an extra verification row, in one-row steps: "nearly free" up to 0.10, "cheap" up to 0.25 (the
# speculation goal on AVX2 CPUs), "not cheap" above; a one-row step at half the streaming
# bandwidth or more is spent mostly reading weights ("memory-bound")
ROW_PRICE_BANDS = ((0.10, "nearly free"), (0.25, "cheap"))
ROW_PRICE_ABOVE = "not cheap"
MEMORY_BOUND_SHARE = 0.5


@dataclass(frozen=True)
class Interval:
    """A measured quantity: the median of its values and an interval around it."""
    estimate: float
    low: float
    high: float
    n: int
    method: str                 # "min-max" or "bootstrap 90%"
    values: tuple = ()

    def above(self, threshold: float) -> bool:
        """The whole interval, as printed, lies above the threshold."""
        return round(self.low, DIGITS) > threshold

    def below(self, threshold: float) -> bool:
        """The whole interval, as printed, lies below the threshold."""
        return round(self.high, DIGITS) < threshold

    def crosses(self, threshold: float) -> bool:
        return not (self.above(threshold) or self.below(threshold))

    def text(self, unit: str = "x", fmt: str = "{:.2f}", what: str = "pairs") -> str:
        """'1.43x; 1.38-1.49x over 5 pairs' (one value: '1.43x, one pair')."""
        e = fmt.format(self.estimate) + unit
        if self.n == 1:
            return f"{e}, one {what.rstrip('s')}"
        return f"{e}; {fmt.format(self.low)}-{fmt.format(self.high)}{unit} over {self.n} {what}"

    def as_json(self) -> dict:
        return {"median": self.estimate, "min": self.low, "max": self.high, "n": self.n,
                "method": self.method}


def interval(values, level: float = LEVEL, bootstrap_from: int = BOOTSTRAP_FROM,
             seed: int = 0) -> Interval:
    """The median of `values` and its interval: min-max below `bootstrap_from` values, else the
    percentile bootstrap interval of the median at `level` (RESAMPLES resamples, seeded, so the
    same values always give the same interval). The interval always holds the median."""
    xs = [float(v) for v in values]
    check_param(len(xs) >= 1 and all(math.isfinite(x) for x in xs), "values", values,
                "one or more finite numbers")
    check_param(0.0 < level < 1.0, "level", level, "a share in (0, 1)")
    med = statistics.median(xs)
    if len(xs) < bootstrap_from:
        return Interval(med, min(xs), max(xs), len(xs), "min-max", tuple(xs))
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(RESAMPLES))
    tail = (1.0 - level) / 2
    lo = meds[int(math.floor(tail * (RESAMPLES - 1)))]
    hi = meds[int(math.ceil((1.0 - tail) * (RESAMPLES - 1)))]
    return Interval(med, min(lo, med), max(hi, med), len(xs), f"bootstrap {100 * level:.0f}%", tuple(xs))


def spread(values) -> Interval:
    """The median of `values` with their min and max, however many there are (a cost measured
    over interleaved repetitions: its spread, not an interval of the median)."""
    return interval(values, bootstrap_from=math.inf)


def paired_ratios(plain_s, spec_s) -> list:
    """Speed-ups of runs taken in turn: plain decoding's time per token over speculative
    decoding's, pair by pair (plain_s[i] and spec_s[i] from the same pass)."""
    plain_s, spec_s = list(plain_s), list(spec_s)
    check_param(len(plain_s) == len(spec_s) and plain_s, "pairs", (len(plain_s), len(spec_s)),
                "as many plain as speculative times, at least one")
    check_param(all(t > 0 for t in plain_s + spec_s), "times", plain_s + spec_s, "times > 0")
    return [p / s for p, s in zip(plain_s, spec_s)]


# ---- the words ---------------------------------------------------------------------------------
def speedup_verdict(iv: Interval, threshold: float = 1.0) -> str:
    """"wins" when every value of the interval is above `threshold` (plain decoding's 1), "loses"
    when every one is below, else "within the noise" (and no verdict from a single pair)."""
    if iv.n < 2:
        return ONE
    return "wins" if iv.above(threshold) else "loses" if iv.below(threshold) else NOISE


def said(iv: Interval, threshold: float = 1.0) -> str:
    """The printed form of a speed-up and its verdict: 'wins (1.43x; 1.38-1.49x over 5 pairs)',
    'within the noise (1.01x; 0.93-1.12x over 3 pairs)'."""
    return f"{speedup_verdict(iv, threshold)} ({iv.text()})"


def band(iv: Interval, bands, above: str) -> str | None:
    """The word of the band the whole interval lies in: `bands` is ((upper bound, word), ...) in
    increasing order, `above` the word past the last bound; None when the interval crosses a
    bound (the measurement cannot tell the two words apart)."""
    lo, hi = round(iv.low, DIGITS), round(iv.high, DIGITS)
    lower = -math.inf
    for bound, word in list(bands) + [(math.inf, above)]:
        if lo > lower and hi <= bound:
            return word
        lower = bound
    return None


def row_price(iv: Interval) -> str:
    """An extra verification row's price (in one-row steps) in the course's words, or the two
    words it lies between: "nearly free", "cheap", "not cheap", "between cheap and not cheap"."""
    word = band(iv, ROW_PRICE_BANDS, ROW_PRICE_ABOVE)
    if word is not None:
        return word
    words = [w for _, w in ROW_PRICE_BANDS] + [ROW_PRICE_ABOVE]
    bounds = [b for b, _ in ROW_PRICE_BANDS]
    lo = sum(round(iv.low, DIGITS) > b for b in bounds)
    hi = sum(round(iv.high, DIGITS) > b for b in bounds)
    return f"between {words[lo]} and {words[hi]}"


def point(value: float) -> Interval:
    """A single measured value as an Interval (no spread known)."""
    return interval([value])


# ---- reading a printed verdict back (the tests' side) ---------------------------------------------
_NUM = r"\d+(?:\.\d+)?"
SAID = re.compile(rf"\b(?P<word>wins|loses|{NOISE}|{ONE}) \((?P<est>{_NUM})x"
                  rf"(?:; (?P<lo>{_NUM})-(?P<hi>{_NUM})x over (?P<n>\d+) \w+|, one \w+)\)")


def check_said(text: str) -> list:
    """Each printed speed-up verdict (said()'s form) in `text` whose word its interval does not
    support, as 'word (interval)' strings: an empty list when every one holds."""
    bad = []
    for m in SAID.finditer(text):
        est = float(m["est"])
        lo, hi = (float(m["lo"]), float(m["hi"])) if m["lo"] else (est, est)
        iv = Interval(est, lo, hi, int(m["n"] or 1), "printed")
        if speedup_verdict(iv) != m["word"]:
            bad.append(m.group())
    return bad
