"""How long each round's draft is: llama.cpp's fixed --spec-draft-n-max, Hugging Face's heuristic
schedule, or `auto`, chosen before every round from the costs this run measures.

  fixed      every draft is cut to n_max (llama.cpp's --spec-draft-n-max; p_min and n_min on top)
  heuristic  transformers' assisted generation, num_assistant_tokens_schedule="heuristic"
             (generation/candidate_generator.py, AssistedCandidateGenerator
             .update_candidate_strategy): num_assistant_tokens starts at 20 (GenerationConfig's
             default), +2 after a round in which every draft token was accepted, else -1, never
             under 1; specnb also caps it at n_max
  auto       `AutoDraftLen`: before each round, the d in 0..n_max that maximizes the expected
             committed tokens per second,

                 E(d) / T(d),   E(d) = 1 + sum_{j=1..d} prod_{i<=j} a_i,
                 T(d) = t_draft(d) + t_target(1 + d),

             a_i the conditional acceptance of draft position i (running Beta estimates, a weak
             prior), t_target(k) the measured time of a round's target side with k rows
             (verification batch, sampling, rollback: running medians per k, pooled where
             they fall with k, between the measured sizes the roofline of the two (`between`:
             optimistic, so untried sizes get tried) but no cheaper than the step just below
             continued (`onward`), a size measured fewer than TRUSTED times no dearer than the
             straight line between the better-measured sizes around it (one slow sample would
             otherwise keep it untried, and so uncorrected, for the rest of the run), the
             prefill as the start-up point), t_draft(d) the draft model's measured decodes (its
             seed batch, then d - 1 one-row steps; the seed holds the last round's committed
             rows when the draft re-evaluates them, else the seed row and, after a fully
             accepted round, the last draft token; before it has drafted, the target's times
             the ratio of the two models' measured decodes of the prompt). d ranges over 0 ..
             min(n_max, the longest draft verified + GROW): each longer size is tried one step
             at a time. A draft after idle rounds first catches up the rows the draft model
             missed (the seed batch grows by them): that cost, paid once, counts spread over
             CATCH_UP_ROUNDS rounds. d = 0 is plain decoding of one
             token: T(0) = t_target(1). An n-gram draft costs nothing to make: for it only
             t_target counts. While d = 0 wins, a probe (a short draft) runs now and then, its
             interval doubling (PROBE_FIRST, PROBE_FIRST*2, ... PROBE_MAX rounds), so a change
             (acceptance, load) is noticed; the probes' count and time are kept, and a due
             probe waits while their net cost (their rounds' time less the plain rounds that
             would have committed the same tokens) exceeds PROBE_SHARE of the run. No probe runs
             while d = 0 would win even at full acceptance (a draft model as costly as its
             target): the reason is then "no gain"; judged from the prompt's decodes alone, the
             first round already says so, without a start-up draft (one probe per PROBE_MAX
             rounds checks it). A start-up draft or a probe pays only through the rounds after
             it: none runs when fewer tokens remain than those rounds ("budget"). A probe
             costs the draft model the rows it missed while idle: it catches up only the last
             CATCH_UP_WINDOW of them (placed right after what its memory holds, so it sees the
             prompt and the recent tokens; deferred.DeferredDraftSimple), not every skipped
             token.

`expected_tokens(a, d)` and `best_length(...)` are the decision as plain functions, usable on a
grid (alpha, c) without a run. The policy only chooses each round's n_max: the target's sampler
still decides every token, so the output is plain decoding's, token for token.
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

from ..errors import ParamError
from .impl import DRAFT_N_MAX_LIMIT

SCHEDULES = ("fixed", "heuristic", "auto")
AUTO_CAP = 16                 # `auto` without a cap: lengths 0..16 considered
HEURISTIC_START = 20          # transformers' GenerationConfig.num_assistant_tokens
HEURISTIC_CAP = 64            # `heuristic` without a cap
PRIOR_STRENGTH = 2.0          # Beta prior pseudo-counts per position, centred on the pooled rate
DECAY = 0.97                  # per observed round: older acceptance counts fade (prompts change)
WINDOW = 15                   # running median over the last WINDOW timings per batch size
TRUSTED = 3                   # a size with fewer timings is capped by its better-measured neighbours
PROBE_FIRST = 8               # rounds of d = 0 before the first probe ...
PROBE_MAX = 128               # ... the interval doubling up to this
PROBE_LEN = 1                 # draft tokens of a probe
PROBE_SHARE = 0.015           # the probes' measured net cost kept within this share of the run
NO_GAIN_RECHECK = 8           # a "no gain" verdict is read again from the costs every N rounds
CATCH_UP_WINDOW = 4           # a probe's draft model decodes at most this many of the rows it missed
GROW = 1                      # a draft at most this many tokens longer than the longest one verified
CATCH_UP_ROUNDS = 8           # a draft after idle rounds: its catch-up charged over this many rounds


def parse_draft_max(value) -> tuple[str, int]:
    """--spec-draft-n-max: N, `auto`, `auto:CAP`, `heuristic` or `heuristic:CAP` -> (schedule, n_max)."""
    if isinstance(value, bool):
        raise ParamError(f"invalid draft_max={value!r}: expected an integer, 'auto[:CAP]' or "
                         f"'heuristic[:CAP]'", field="n_max")
    if isinstance(value, int) or (hasattr(value, "__index__") and not isinstance(value, str)):
        return "fixed", int(value)
    s = str(value).strip().lower()
    name, _, cap = s.partition(":")
    try:
        if name in ("auto", "heuristic"):
            n = int(cap) if cap else (AUTO_CAP if name == "auto" else HEURISTIC_CAP)
            if not 1 <= n <= DRAFT_N_MAX_LIMIT:
                raise ValueError
            return name, n
        if not cap:
            n = int(s)
            if not 0 <= n <= DRAFT_N_MAX_LIMIT:
                raise ValueError
            return "fixed", n
    except ValueError:
        pass
    raise ParamError(f"invalid --spec-draft-n-max={value!r}: expected an integer in "
                     f"[0, {DRAFT_N_MAX_LIMIT}], 'auto', 'auto:CAP' or 'heuristic[:CAP]' "
                     f"(CAP in [1, {DRAFT_N_MAX_LIMIT}])", field="n_max")


def format_draft_max(schedule: str, n_max: int) -> str:
    return str(n_max) if schedule == "fixed" else f"{schedule}:{n_max}"


# ---- the decision, as plain functions -------------------------------------------------------------
def expected_tokens(accept, d: int) -> float:
    """E(d) = 1 + sum_{j=1..d} prod_{i<=j} a_i: tokens a round commits with a d-token draft, a_i the
    conditional acceptance of position i (a number: the same at every position, Leviathan's alpha)."""
    e, run = 1.0, 1.0
    for j in range(d):
        run *= float(accept if isinstance(accept, (int, float)) else accept[j])
        e += run
    return e


def expected_tokens_upto(accept, n_max: int) -> list:
    """[E(0), E(1), ..., E(n_max)] in one pass (expected_tokens for every length)."""
    out, e, run = [1.0], 1.0, 1.0
    for j in range(n_max):
        run *= float(accept if isinstance(accept, (int, float)) else accept[j])
        e += run
        out.append(e)
    return out


def best_length(accept, t_target, t_draft, n_max: int) -> tuple[int, list]:
    """argmax_d E(d) / (t_draft(d) + t_target(1 + d)) over d in 0..n_max, and the rates
    [tokens per second for each d]. accept: a number or per-position rates (len >= n_max);
    t_target(k), t_draft(d): seconds (t_draft(0) is ignored). Ties go to the shorter draft."""
    rates = []
    for d, e in enumerate(expected_tokens_upto(accept, n_max)):
        t = t_target(1 + d) + (t_draft(d) if d > 0 else 0.0)
        rates.append(e / t if t > 0 else math.inf)
    best = 0
    for d, r in enumerate(rates):
        if r > rates[best] * (1 + 1e-9):
            best = d
    return best, rates


# ---- measured costs ------------------------------------------------------------------------------
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


class BatchCost:
    """Seconds of a k-row step, from measurements: the running median of the last WINDOW times at
    each measured k, a size with fewer than TRUSTED times no dearer than its better-measured
    neighbours say (`cap_few_samples`), made non-decreasing in k (`monotone`: sizes whose medians
    fall with k are pooled, weighted by their sample counts); between measured sizes `between`
    (the roofline of the two, at most the straight line), past the second measured size `onward`
    (no cheaper than the step below continued); above the largest, the slope of the last two
    points (never negative); below the smallest, the smallest's value."""

    def __init__(self, window: int = WINDOW, trusted: int = TRUSTED):
        self.window, self.trusted = window, trusted
        self.samples: dict[int, deque] = {}
        self._points: list | None = None          # the medians, until the next add()
        self._table: list = []                    # upto()'s values, until the next add()
        self._cautious: list = []                 # upto(n, cautious=True)'s

    def add(self, k: int, seconds: float) -> None:
        if k >= 1 and seconds > 0 and math.isfinite(seconds):
            self.samples.setdefault(int(k), deque(maxlen=self.window)).append(float(seconds))
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
        return bool(self.samples)

    def points(self) -> list[tuple[int, float]]:
        if self._points is None:
            ks = sorted(self.samples)
            n = [len(self.samples[k]) for k in ks]
            med = cap_few_samples(ks, [_median(self.samples[k]) for k in ks], n, self.trusted)
            self._points = list(zip(ks, monotone(med, n)))
        return self._points

    def __call__(self, k: int) -> float:
        pts = self.points()
        if not pts:
            return math.nan
        if k <= pts[0][0]:
            return pts[0][1]
        for j, (k1, t1) in enumerate(pts[1:]):
            if k == k1:
                return t1
            if k < k1:
                return _inside(k, pts, j)
        if len(pts) == 1:
            return pts[0][1]
        (k0, t0), (k1, t1) = pts[-2], pts[-1]
        return t1 + max((t1 - t0) / (k1 - k0), 0.0) * (k - k1)


@dataclass
class Acceptance:
    """Conditional acceptance per draft position: decayed counts with a Beta prior centred on the
    pooled rate. Position i is observed only when positions < i were all accepted."""
    acc: list = field(default_factory=list)
    exa: list = field(default_factory=list)
    decay: float = DECAY
    prior: float = PRIOR_STRENGTH
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
        return (sum(self.acc) + 1.0) / (sum(self.exa) + 2.0)

    def rates(self, n: int) -> list:
        c = self._cache                              # (n, rates, E(0..n)) until the next observe
        if c is not None and c[0] == n and c[3] == (self.prior, self.decay):
            return c[1]
        m = self.pooled()
        r = [((self.acc[i] if i < len(self.acc) else 0.0) + self.prior * m) /
             ((self.exa[i] if i < len(self.exa) else 0.0) + self.prior) for i in range(n)]
        self._cache = (n, r, expected_tokens_upto(r, n), (self.prior, self.decay))
        return r

    def expected_upto(self, n: int) -> list:
        """expected_tokens_upto(self.rates(n), n), kept with the rates."""
        self.rates(n)
        return self._cache[2]


@dataclass
class Decision:
    """One round's choice: the length, why (expected tokens and rate per length), how."""
    d: int
    reason: str                       # "start-up", "best", "probe", "no gain", "schedule", "budget"
    expected_tokens: float = 1.0      # E(d)
    expected_rate: float = 0.0        # E(d) / T(d), tokens per second (0: unknown)
    plain_rate: float = 0.0           # 1 / t_target(1)
    rates: list = field(default_factory=list)   # expected tokens per second for each d

    @property
    def gain(self) -> float:
        """Expected speed over plain decoding (0 when unknown)."""
        return self.expected_rate / self.plain_rate if self.plain_rate > 0 and self.expected_rate > 0 else 0.0

    def as_dict(self) -> dict:
        return {"d": self.d, "reason": self.reason, "expected_tokens": self.expected_tokens,
                "expected_rate": self.expected_rate, "plain_rate": self.plain_rate,
                "gain": self.gain, "rates": list(self.rates)}


class DraftLenPolicy:
    """The per-round draft length, consulted by the chain (speculative.Speculative): `lengths()`
    before a round, `update_candidate_strategy(ev)` after it."""
    schedule = "fixed"

    def __init__(self, n_max: int):
        self.n_max = int(n_max)
        self.chosen: dict[int, int] = {}          # how often each length was chosen
        self.last: Decision | None = None
        self.round: dict | None = None            # this round's {impl type: Decision}
        # () -> the rows the draft model would decode before its seed row if it drafted now (the
        # rows it missed while rounds drafted nothing); DeferredDraftSimple sets it
        self.draft_behind = None

    def lengths(self, types, remaining: int | None = None) -> dict | None:
        """This round's {impl type: Decision} (one decision for every sequence), or None when
        the length is fixed (every draft cut to n_max); `remaining`: the tokens still to
        generate."""
        self.round = {t: self.choose(t, remaining) for t in types}
        return self.round

    def choose(self, source: str = "draft-simple", remaining: int | None = None) -> Decision:
        """This round's decision for a draft from `source` (an impl type); `remaining`: the
        tokens still to generate (None: unknown)."""
        return Decision(self.n_max, "schedule")

    def record(self, dec: Decision) -> None:
        """Count the decision that applied to a round."""
        self.chosen[dec.d] = self.chosen.get(dec.d, 0) + 1
        self.last = dec

    def update_candidate_strategy(self, ev) -> None:
        """After a round: read what it measured (transformers' hook of that name)."""

    def observe_prefill(self, n_rows: int, t_target: float, t_draft: float | None = None) -> None: ...

    def observe_draft_decode(self, n_rows: int, seconds: float) -> None:
        """One decode of the draft model while drafting (DeferredDraftSimple reports them)."""

    def stats(self) -> dict:
        return {"schedule": self.schedule, "n_max": self.n_max,
                "chosen": dict(sorted(self.chosen.items()))}


class FixedDraftLen(DraftLenPolicy):
    """llama.cpp: every round may draft n_max tokens."""

    def lengths(self, types, remaining: int | None = None) -> None:
        self.record(self.choose())
        self.round = None
        return None


class HeuristicDraftLen(DraftLenPolicy):
    """transformers' "heuristic" schedule: start at 20, +2 after a fully accepted draft, else -1
    (minimum 1); here also capped at n_max."""
    schedule = "heuristic"

    def __init__(self, n_max: int, start: int = HEURISTIC_START):
        super().__init__(n_max)
        self.n = float(min(start, n_max))

    def choose(self, source: str = "draft-simple", remaining: int | None = None) -> Decision:
        return Decision(int(self.n), "schedule")

    def update_candidate_strategy(self, ev) -> None:
        for r in ev.slots[:1]:
            if r.replay or not r.draft:
                continue
            if r.n_accepted == len(r.draft):
                self.n = min(self.n + 2.0, float(self.n_max))
            else:
                self.n = max(1.0, self.n - 1.0)


class AutoDraftLen(DraftLenPolicy):
    """Each round's length from measured costs and running acceptance (see the module docstring).

    Fed by `update_candidate_strategy(ev)` with the loop's RoundEvents: ev.t_verify + ev.t_sample +
    ev.t_rollback + ev.t_process time a target side of 1 + len(draft) rows; the slot's draft, impl
    and n_accepted the acceptance per source; and by `observe_draft_decode`, the draft model's
    decodes as (rows, seconds).
    """
    schedule = "auto"

    def __init__(self, n_max: int, probe_first: int = PROBE_FIRST, probe_max: int = PROBE_MAX,
                 probe_len: int = PROBE_LEN):
        super().__init__(n_max)
        self.t_target = BatchCost()
        self.t_draft_rows = BatchCost()           # the draft model's k-row decodes
        self.acc: dict[str, Acceptance] = {}
        self.probe_first, self.probe_max, self.probe_len = probe_first, probe_max, probe_len
        self._probe: dict[str, list] = {}         # per source: [rounds of d = 0, probe interval]
        self.n_probes = 0
        self.t_probes = 0.0                       # seconds of the rounds that probed
        self.t_probes_net = 0.0                   # ... less what plain rounds would have taken
        self.t_run = 0.0                          # seconds of every round observed
        self.probe_share = PROBE_SHARE
        self._held: dict = {}                     # per source: ["no gain" Decision, rounds it holds]
        self.prefill_ratio: float | None = None   # draft / target seconds on the same prompt rows
        self.keeps_rows = False                   # the draft keeps its rows (--no-reeval; set by it)
        self.max_draft = 0                        # the longest draft a round has verified

    # ---- the model of a round ------------------------------------------------------------
    def rates(self, source: str) -> list:
        return self.acc.setdefault(source, Acceptance()).rates(self.n_max)

    def draft_cost(self, d: int, source: str = "draft-simple", accept=None) -> float:
        """Seconds the draft model spends on a d-token draft in steady drafting: one seed decode,
        then d - 1 one-row steps. The seed holds the rows the draft misses: re-evaluating, the last
        round's committed ones (1 + E(d) rows); keeping its rows (--no-reeval), the seed row and,
        after a fully accepted round (probability E(d) - E(d - 1)), the last draft token."""
        if d <= 0 or source != "draft-simple":
            return 0.0
        es = expected_tokens_upto(accept if accept is not None else self.rates(source), d)
        return self._draft_cost_e(d, es[d], es[d] - es[d - 1])

    def _seed_cost(self, tab: list, e: float, p_full: float) -> float:
        # the seed decode's expected seconds (draft_cost), from a table of k-row decode times
        if self.keeps_rows:
            return tab[1] + p_full * (tab[2] - tab[1])
        return tab[1 + round(e)]

    def _draft_cost_e(self, d: int, e: float, p_full: float, cautious: bool = False) -> float:
        if self.t_draft_rows.known:
            tab = self.t_draft_rows.upto(self.n_max + 2, cautious)
            return self._seed_cost(tab, e, p_full) + (d - 1) * tab[1]
        # before the draft model has drafted: its decodes estimated as the target's, times the
        # ratio of the two models' measured decodes of the same prompt rows
        tab = self.t_target.upto(self.n_max + 2, cautious)
        return self.prefill_ratio * (self._seed_cost(tab, e, p_full) + (d - 1) * tab[1])

    def target_cost(self, k: int) -> float:
        tab = self.t_target.upto(self.n_max + 2)
        return tab[k] if 0 <= k < len(tab) else self.t_target(k)

    def _rates(self, source: str, es: list, cautious: bool = False, behind: int = 0) -> list:
        """E(d) / T(d) for d in 0..n_max from the cost tables: best_length's rates, computed in one
        pass (the policy decides every round, so its own cost counts). behind: the rows the draft
        model must catch up first (rounds that drafted nothing); the catch-up's cost beyond a
        steady seed is paid once, so it counts spread over CATCH_UP_ROUNDS rounds."""
        n = self.n_max
        tt = self.t_target.upto(n + 2, cautious)
        rates = [es[0] / tt[1] if tt[1] > 0 else math.inf]
        if source == "draft-simple":
            if self.t_draft_rows.known:
                dt = self.t_draft_rows.upto(max(n, behind) + 2, cautious)
            else:
                dt = [self.prefill_ratio * x for x in self.t_target.upto(max(n, behind) + 2, cautious)]
            for d in range(1, n + 1):
                seed = self._seed_cost(dt, es[d], es[d] - es[d - 1])
                t = tt[1 + d] + seed + (d - 1) * dt[1]
                if behind > 1:
                    t += max(dt[1 + behind] - seed, 0.0) / CATCH_UP_ROUNDS
                rates.append(es[d] / t if t > 0 else math.inf)
        else:
            for d in range(1, n + 1):
                rates.append(es[d] / tt[1 + d] if tt[1 + d] > 0 else math.inf)
        return rates

    @staticmethod
    def _argmax(rates: list) -> int:
        best = 0                                  # ties go to the shorter draft (best_length's rule)
        for d, r in enumerate(rates):
            if r > rates[best] * (1 + 1e-9):
                best = d
        return best

    def reach(self) -> int:
        """The longest draft a round may choose: GROW tokens beyond the longest one verified so
        far (at most n_max). A size nobody has tried is read optimistically (`between`), so that
        it gets tried; one step at a time, each try measures the next size, where a jump to the
        longest draft the optimistic reading favours can cost a short run several long rounds
        (drafts of 7-12 tokens verified at 3-6 one-row steps each, on code with 97% acceptance)."""
        return min(self.n_max, self.max_draft + GROW)

    def decide(self, source: str = "draft-simple", behind: int = 0) -> Decision:
        """The argmax decision from the current estimates, without counting it: best_length's,
        with target_cost and draft_cost, from the tables in one pass, over the lengths up to
        reach(); behind: the draft model's rows to catch up (_rates)."""
        es = self.acc.setdefault(source, Acceptance()).expected_upto(self.n_max)
        rates = self._rates(source, es, behind=behind)
        d = self._argmax(rates[:self.reach() + 1])
        return Decision(d, "best", es[d], rates[d], rates[0], rates)

    def hopeless(self, source: str = "draft-simple") -> bool:
        """True when no length beats plain decoding even if every draft token were accepted, at
        the cautious reading of the costs (unmeasured sizes on the straight line between measured
        ones): a draft model is tried, and probed for, only where it pays in that reading, while
        the lengths of a model that drafts are chosen on the hopeful one (`between`)."""
        full = [1.0 + d for d in range(self.n_max + 1)]
        return self._argmax(self._rates(source, full, cautious=True)) == 0

    def choose(self, source: str = "draft-simple", remaining: int | None = None) -> Decision:
        """This round's decision for a draft from `source` (an impl type); not yet counted
        (`record` counts the decision that applied). `remaining`, the tokens still to generate:
        a start-up draft or a probe pays only through the rounds after it, so none runs when
        fewer tokens remain than the rounds its measurement would govern ("budget")."""
        if 1 not in self.t_target.samples:
            return Decision(0, "start-up")                        # measure a plain round first
        held = self._held.get(source)
        if held is not None and held[1] > 0:
            # a "no gain" verdict holds for NO_GAIN_RECHECK rounds: the costs move slowly, and in
            # a round that drafts nothing the decision is the round's one expense beyond plain
            # decoding (read right after a decode, its tables are cache misses: 60 us on a 3.6 ms
            # step of the 135M)
            held[1] -= 1
            return self._no_gain(source, remaining, held[0], hold=False)
        if source == "draft-simple" and not self.t_draft_rows.known:
            # the draft model has not drafted yet: with the prompt's decodes measured, a draft model
            # that could not pay even at full acceptance is judged without a start-up draft
            if self.prefill_ratio is not None and self.hopeless(source):
                return self._no_gain(source, remaining, self.decide(source))
            if remaining is not None and remaining < self.probe_first:
                return Decision(0, "budget")
            return Decision(min(self.probe_len, self.n_max), "start-up")
        behind = self.draft_behind() if source == "draft-simple" and self.draft_behind else 0
        dec = self.decide(source, behind)
        st = self._probe.setdefault(source, [0, self.probe_first])   # [rounds of d = 0, interval]
        if dec.d == 0 and self.hopeless(source):
            # even a draft accepted in full would not pay at the measured costs: a probe could only
            # confirm it, at the price of the draft model's catch-up; the costs are re-read every
            # round, so a change of load brings the probes back
            return self._no_gain(source, remaining, dec)
        if dec.d == 0:
            st[0] += 1
            if st[0] >= st[1] and remaining is not None and remaining < st[1]:
                return Decision(0, "budget", dec.expected_tokens, dec.expected_rate,
                                dec.plain_rate, dec.rates)
            if st[0] >= st[1] and self._probe_affordable():
                st[0], st[1] = 0, min(st[1] * 2, self.probe_max)
                return self._probe_decision(source, dec)
        else:
            st[0], st[1] = 0, self.probe_first
        return dec

    def _no_gain(self, source: str, remaining, dec: Decision, hold: bool = True) -> Decision:
        """d = 0, "no gain" (held for NO_GAIN_RECHECK rounds). Judged from the prompt's decodes
        alone (the draft model has not drafted yet), one probe per PROBE_MAX such rounds checks
        the estimate against a real draft."""
        st = self._probe.setdefault(source, [0, self.probe_first])
        st[0] = st[0] + 1 if source == "draft-simple" and not self.t_draft_rows.known else 0
        if st[0] >= self.probe_max and (remaining is None or remaining >= self.probe_max) \
                and self._probe_affordable():
            st[0] = 0
            self._held.pop(source, None)
            return self._probe_decision(source, dec)
        if not hold:
            return dec
        out = Decision(0, "no gain", dec.expected_tokens, dec.expected_rate, dec.plain_rate,
                       dec.rates)
        self._held[source] = [out, NO_GAIN_RECHECK - 1]
        return out

    def _probe_affordable(self) -> bool:
        """A due probe runs when the probes' measured net cost so far (their rounds' time less the
        plain rounds that would have committed the same tokens), with one more at their mean,
        stays within probe_share of the run's time; else it waits (still d = 0, "best")."""
        if self.n_probes == 0:
            return True
        return self.t_probes_net * (1 + 1 / self.n_probes) <= self.probe_share * self.t_run

    def _probe_decision(self, source: str, dec: Decision) -> Decision:
        d = min(self.probe_len, self.n_max)
        return Decision(d, "probe", expected_tokens(self.rates(source), d), dec.rates[d],
                        dec.plain_rate, dec.rates)

    # ---- measurements --------------------------------------------------------------------
    def observe_prefill(self, n_rows: int, t_target: float, t_draft: float | None = None) -> None:
        """The prompt's decodes: a start-up point for t_target (one sample among the rounds' at
        that size, whose median soon outvotes it), and, with the draft model's decode of the same
        rows (t_draft), the ratio that estimates the draft's costs until it has drafted."""
        if n_rows >= 2:
            self.t_target.add(n_rows, t_target)
        if t_draft is not None and t_draft > 0 and t_target > 0 and math.isfinite(t_draft):
            self.prefill_ratio = t_draft / t_target

    def observe_draft_decode(self, n_rows: int, seconds: float) -> None:
        self.t_draft_rows.add(n_rows, seconds)

    def update_candidate_strategy(self, ev) -> None:
        rows = sum(1 + len(r.draft) for r in ev.slots)
        t_tgt = ev.t_verify + ev.t_sample + ev.t_rollback + ev.t_process
        self.t_target.add(rows, t_tgt)
        self.t_run += ev.t_round
        if self._held and any(r.draft for r in ev.slots):
            self._held.clear()                    # new draft measurements: judge again
        if any(r.draft_len is not None and r.draft_len.reason in ("probe", "start-up") and r.draft
               for r in ev.slots):
            self.n_probes += 1
            self.t_probes += ev.t_round
            n = len(ev.slots)                     # a plain round: n rows, one token per slot
            plain = sum(len(r.committed) for r in ev.slots) / n * self.target_cost(n)
            self.t_probes_net += max(ev.t_round - plain, 0.0)
        for r in ev.slots:
            if r.replay or not r.draft:
                continue
            self.max_draft = max(self.max_draft, len(r.draft))
            self.acc.setdefault(r.impl or "draft-simple", Acceptance()).observe(len(r.draft), r.n_accepted)

    def stats(self) -> dict:
        st = super().stats()
        st.update(n_probes=self.n_probes, t_probes_s=self.t_probes, t_probes_net_s=self.t_probes_net,
                  t_target={k: t for k, t in self.t_target.points()},
                  t_draft_rows={k: t for k, t in self.t_draft_rows.points()},
                  acceptance={s: a.rates(min(self.n_max, 8)) for s, a in self.acc.items()})
        return st


def make_policy(schedule: str, n_max: int) -> DraftLenPolicy:
    if schedule == "auto":
        return AutoDraftLen(n_max)
    if schedule == "heuristic":
        return HeuristicDraftLen(n_max)
    if schedule == "fixed":
        return FixedDraftLen(n_max)
    raise ParamError(f"unknown draft schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")


def format_chosen(st: dict) -> str:
    """One line: how often each draft length was chosen (and, for auto, the probes)."""
    ch = st.get("chosen", {})
    n = sum(ch.values()) or 1
    body = ", ".join(f"{d}: {c} ({100 * c / n:.0f}%)" for d, c in sorted(ch.items()))
    line = f"draft length ({format_draft_max(st['schedule'], st['n_max'])}) chosen per round: {body}"
    if "n_probes" in st:
        line += f"; probes: {st['n_probes']} ({1e3 * st['t_probes_s']:.1f} ms)"
    return line
