"""The price of a verification batch, as two numbers from one function.

bc(k), a k-row target call over a one-row call, mixes two things a learner should keep apart:

- **the one-row step against the memory**: the share of the machine's streaming bandwidth a
  one-row decode reaches (its weight bytes / its time / the bandwidth). Near 1, a step is spent
  reading weights, and every row of a batch shares that reading;
- **the price of each row beyond the first**, in one-row steps: (bc(k) - 1) / (k - 1), set beside
  what the row's arithmetic would cost at the int8 compute limit (kernels/tuning.py), the least
  it can cost (the roofline's compute ceiling, Williams et al. 2009).

`measure_verify_cost()` measures both with their spread (min-max over the repetitions, each of
which times every batch size in turn); `verify_cost_from()` reads them from the machine's costs record
(measure/costs.py), as the notebooks do, so every notebook quotes the same curve; `verify_verdict()`
is the one criterion the course and `bench` judge them by, said only where the whole spread lies
on one side of a threshold (measure/verdict.py), "between cheap and not cheap" otherwise.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from .bench import batch_cost_samples, decode_bytes, extra_row_costs, ideal_row_cost, macs_per_row
from .verdict import MEMORY_BOUND_SHARE, ROW_PRICE_BANDS, Interval
from .verdict import row_price as _row_price

# an extra row is "nearly free" at or below EXTRA_ROW_FREE of a one-row step, "cheap" at or below
# EXTRA_ROW_CHEAP (the speculation goal on AVX2 CPUs: docs/benchmarks.md), and has a price above
(EXTRA_ROW_FREE, _), (EXTRA_ROW_CHEAP, _) = ROW_PRICE_BANDS
VERIFY_SIZES = (1, 2, 3, 5, 9)


def _extra_row(bc: dict) -> float:
    # one number per curve: the median over k > 1 of (bc(k) - 1) / (k - 1)
    return statistics.median(extra_row_costs(bc, 1.0, 0.0)["extra_row_cost"].values())


@dataclass(frozen=True)
class VerifyCost:
    """A measured verification-cost curve and its two numbers (see the module's docstring)."""
    label: str
    activations: str
    sizes: tuple
    seconds: dict               # k -> median seconds of a k-row call
    bc: dict                    # k -> median over the repetitions of t(k) / t(1)
    bc_range: dict              # k -> (min, max) of t(k) / t(1) over the repetitions
    extra_row_range: tuple      # (min, max) of the per-repetition extra-row cost
    weight_bytes: int           # what a one-row step reads (measure.bench.decode_bytes)
    gb_s: float | None          # the streaming bandwidth it is set against
    macs_per_row: int
    gmacs_s: float | None       # the int8 compute limit (q8 activations only)
    recorded_extra_row: float | None = None   # a costs record's own extra-row median (verify_cost_from)

    @property
    def one_row_s(self) -> float:
        return self.seconds[1]

    @property
    def bandwidth_share(self) -> float | None:
        """The one-row step's share of the streaming bandwidth (None: no bandwidth given)."""
        return self.weight_bytes / self.one_row_s / (self.gb_s * 1e9) if self.gb_s else None

    @property
    def extra_row(self) -> float:
        """What a row beyond the first costs, in one-row steps: the costs record's median (over its
        repetitions of the median over drafts of 1..8 tokens) where the curve is a record's, so that
        it is the number the record prints, else the median over this curve's sizes."""
        return self.recorded_extra_row if self.recorded_extra_row is not None else _extra_row(self.bc)

    @property
    def ideal_extra_row(self) -> float | None:
        """The same at the int8 compute limit (None in f32, or without a limit)."""
        return ideal_row_cost(self.macs_per_row, self.gmacs_s, self.one_row_s)

    @property
    def x_limit(self) -> float | None:
        """extra_row over ideal_extra_row: how far the rows are from the compute limit."""
        return self.extra_row / self.ideal_extra_row if self.ideal_extra_row else None

    @property
    def extra_row_interval(self) -> Interval:
        lo, hi = self.extra_row_range
        return Interval(self.extra_row, min(lo, self.extra_row), max(hi, self.extra_row), 2, "min-max")


def verify_cost_from(costs, model: str = "target", label: str | None = None) -> VerifyCost:
    """The verification curve of a costs record's target (or "draft"), as measure_verify_cost gives
    it: bc(k) and its spread for k = 1..17, the one-row step, the bandwidth and the int8 limit the
    record measured beside them."""
    from ..model import load_model
    from ..model.registry import resolve
    bc = costs.bc_target if model == "target" else costs.bc_draft
    step = (costs.target_step_ms if model == "target" else costs.draft_step_ms).estimate / 1e3
    m = load_model(resolve(costs.target if model == "target" else costs.draft))
    er = costs.extra_row_target if model == "target" else costs.extra_row_draft
    return VerifyCost(label=label or (costs.target if model == "target" else costs.draft),
                      activations=costs.activations, sizes=tuple(sorted(bc)),
                      seconds={k: iv.estimate * step for k, iv in bc.items()},
                      bc={k: iv.estimate for k, iv in bc.items()},
                      bc_range={k: (iv.low, iv.high) for k, iv in bc.items()},
                      extra_row_range=(er.low, er.high), recorded_extra_row=er.estimate,
                      weight_bytes=int(decode_bytes(m)),
                      gb_s=costs.bandwidth_gb_s.estimate, macs_per_row=int(macs_per_row(m)),
                      gmacs_s=costs.int8_gmacs_s.estimate if costs.int8_gmacs_s else None)


def measure_verify_cost(ctx, prefix: list, sizes=VERIFY_SIZES, reps: int = 3, gb_s: float | None = None,
                        int8_limit: float | bool | None = True, label: str | None = None) -> VerifyCost:
    """Time k-row verification batches of `ctx` after `prefix` (measure.bench.batch_cost_samples:
    every size in every repetition), and the two numbers: the one-row step against `gb_s` (the
    streaming bandwidth; None leaves it out) and each extra row against the int8 compute limit
    (int8_limit True: kernels.tuning.int8_peak(), measured once per machine and cached; a number:
    that many G multiply-adds/s; None: none). f32 activations have no int8 limit."""
    from ..errors import check_param
    sizes = tuple(sorted(set(int(k) for k in sizes) | {1}))
    check_param(reps >= 1, "reps", reps, "at least 1")
    check_param(len(sizes) >= 2, "sizes", sizes, "1 and at least one larger batch size")
    samples = batch_cost_samples(ctx, prefix, sizes, reps)                   # k -> [seconds per rep]
    per_rep = [{k: samples[k][i] / samples[1][i] for k in sizes} for i in range(reps)]
    gmacs = None
    if ctx.activations == "q8" and int8_limit:
        if int8_limit is True:
            from ..kernels.tuning import int8_peak
            gmacs = int8_peak(ctx.n_threads)
        else:
            gmacs = float(int8_limit)
    model = ctx.model
    return VerifyCost(
        label=label or getattr(model, "name", "") or "model", activations=ctx.activations, sizes=sizes,
        seconds={k: statistics.median(v) for k, v in samples.items()},
        bc={k: statistics.median(r[k] for r in per_rep) for k in sizes},
        bc_range={k: (min(r[k] for r in per_rep), max(r[k] for r in per_rep)) for k in sizes},
        extra_row_range=(min(map(_extra_row, per_rep)), max(map(_extra_row, per_rep))),
        weight_bytes=int(decode_bytes(model)), gb_s=gb_s, macs_per_row=int(macs_per_row(model)), gmacs_s=gmacs)


def row_price(v: VerifyCost) -> str:
    """The one criterion's word for an extra row, from its spread over the repetitions: "nearly
    free", "cheap", "not cheap", or the two it lies between (measure/verdict.row_price)."""
    return _row_price(v.extra_row_interval)


def verify_verdict(v: VerifyCost, gamma: int = 4) -> str:
    """The course's one sentence on a verification curve: the one-row step against the memory,
    the extra row against the compute limit, with their spreads, judged by one criterion
    (EXTRA_ROW_FREE, EXTRA_ROW_CHEAP, MEMORY_BOUND_SHARE) and what it means for a γ-token draft."""
    lo, hi = v.extra_row_range
    s = f"{v.label} ({v.activations}): "
    share = v.bandwidth_share
    if share is not None:
        s += (f"a one-row step of {1e3 * v.one_row_s:.1f} ms reads its {v.weight_bytes / 1e9:.2f} GB of weights at "
              f"{100 * share:.0f}% of the streaming bandwidth, "
              + ("so it is spent mostly reading weights, which every row of a batch shares; "
                 if share >= MEMORY_BOUND_SHARE else
                 "so reading the weights is not what sets its time: per-weight arithmetic or fixed per-call "
                 "work does; "))
    s += (f"each row beyond the first costs {v.extra_row:.2f} of a one-row step (from {lo:.2f} to {hi:.2f} over the "
          f"repetitions)")
    if v.ideal_extra_row:
        s += (f", {v.x_limit:.1f}x the {v.ideal_extra_row:.2f} its multiply-adds would take at this machine's "
              f"int8 compute limit")
    s += (f". By the course's criterion (nearly free up to {EXTRA_ROW_FREE:.2f}, cheap up to {EXTRA_ROW_CHEAP:.2f}, "
          f"judged on the whole spread) an extra row is **{row_price(v)}** here: verifying a {gamma}-token draft "
          f"costs about "
          f"{1 + gamma * v.extra_row:.2f} one-row steps"
          + (f" (bc({gamma + 1}) measured {v.bc[gamma + 1]:.2f})" if gamma + 1 in v.bc else "") + ".")
    return s


def flat_but_slow(q8: VerifyCost, f32: VerifyCost) -> str:
    """Why the f32 curve is the flatter one and still the slower engine, from two measured curves
    of one model; "flatter" only where their spreads do not overlap."""
    a, b = f32.extra_row_interval, q8.extra_row_interval
    flatter = a.high < b.low
    state = ("the flatter one" if flatter else "not the flatter one here" if a.low > b.high else
             "as flat as the q8 one within their spreads")
    return (f"In `f32` a row beyond the first costs {f32.extra_row:.2f} ({a.low:.2f}-{a.high:.2f}) of its one-row "
            f"step, in `q8` {q8.extra_row:.2f} ({b.low:.2f}-{b.high:.2f}): the f32 curve is " + state
            + f", but its one-row step takes {1e3 * f32.one_row_s:.1f} ms against {1e3 * q8.one_row_s:.1f} ms. "
            + ("In f32 every weight is unpacked to float before it is multiplied, work done once per weight and shared "
               "by all the rows of a batch; it outweighs the per-row arithmetic, so the rows look cheap against a slow "
               "step. " if flatter else "")
            + f"Counted in time, an extra row costs {1e3 * f32.extra_row * f32.one_row_s:.1f} ms in f32 and "
            f"{1e3 * q8.extra_row * q8.one_row_s:.1f} ms in q8: a flat curve is worth something only beside a "
            "fast step.")
