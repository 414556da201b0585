"""The machine's costs, measured once and read by everyone.

Whether speculative decoding pays on a machine turns on a few costs: the draft's one-row step
against the target's (c), what a k-row target call costs against one row (bc(k)), the memory's
streaming bandwidth and the int8 compute limit those steps are set against. Measured by each
reader on its own, a shared machine prints different numbers minutes apart, and a learner reads
the difference as a contradiction. So they are measured once, with their spread, into one record
per machine, pair, activation mode, thread count and kernel source, and the demo, `bench --spec`,
every notebook, the exercise and `auto`'s prior read it, each printing when it was taken.

    machine_costs(pair)        the record of an open pair: recorded, else measured now (~20 s)
    recorded_costs(pair)       the record if there is one, else None (nothing measured)
    open_costs(target, draft)  the same from model names (`specnb costs`)

A record lives in the stamped kernel-cache folder (kernels/machine.py's MachineRecord), written
atomically; one from another kernel source, older than CLASS_DAY_S, or damaged is measured
again, never trusted. Every cost carries its spread over REPS interleaved repetitions (each times
every batch size of both models in turn, so a slow spell falls on all of them alike): its median,
min and max. bc(k) is made monotone (a bigger batch is never reported cheaper than a smaller one).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from .verdict import Interval, spread

CLASS_DAY_S = 12 * 3600         # a record older than a class day is measured again
SIZES = tuple(range(1, 18))     # batch sizes of both models: a draft of up to 16 tokens
REPS = 5                        # interleaved repetitions
EXTRA_ROW_SIZES = range(2, 10)  # the extra-row price: the median over drafts of 1..8 tokens
BANDWIDTH_GIB = 0.5             # per thread, for the streaming probe (twice: before and after)
PREFIX = "def fibonacci(n):\n    " * 8   # what the batches are decoded after
FILE = "costs.json"
# a measurement during which other processes took more than this share of the CPU serves its
# process only (it is printed with that share) and is measured again next time
BUSY = 0.25

# the ids of the records read in this process (app/notebooks.py stamps a notebook with them)
READ_IDS: list = []


@dataclass(frozen=True)
class Costs:
    """One record of the machine's costs for a pair (see the module's docstring)."""
    id: str
    date: str                       # when it was measured (local time)
    time: float                     # the same, seconds since the epoch
    cpu: str                        # 'AMD EPYC (family 26 model 2)'
    simd: str
    n_threads: int
    kernel_stamp: str
    target: str                     # registry names, or the files' paths
    draft: str
    draft_vocab: int | None         # the draft's restricted head (--spec-draft-vocab), or None
    activations: str
    reps: int
    busy: float                     # the share of the CPU other processes took while it was measured
    bandwidth_gb_s: Interval
    int8_gmacs_s: Interval | None   # the int8 compute limit (q8 on the CPU only)
    target_step_ms: Interval
    draft_step_ms: Interval
    c: Interval                     # the draft's one-row step over the target's, per repetition
    c_bytes: float                  # the draft's weight bytes a step over the target's
    target_gb: float
    draft_gb: float
    bc_target: dict = field(default_factory=dict)     # k -> Interval, monotone in k
    bc_draft: dict = field(default_factory=dict)
    extra_row_target: Interval | None = None            # (bc(k) - 1) / (k - 1), per repetition
    extra_row_draft: Interval | None = None

    @property
    def where(self) -> str:
        """'AMD EPYC (family 26 model 2), avx512, 2 threads, 2026-12-07 05:10'"""
        return f"{self.cpu}, {self.simd}, {self.n_threads} thread{'s' * (self.n_threads != 1)}, {self.date[:16]}"

    def bc(self, k: int, model: str = "target") -> float:
        """bc(k)'s median for the target (or "draft")."""
        return (self.bc_target if model == "target" else self.bc_draft)[int(k)].estimate

    def bc_table(self, model: str = "target") -> dict:
        """{k: median bc(k)}: the form figures.cost_map's round_cost takes."""
        return {k: iv.estimate for k, iv in (self.bc_target if model == "target" else self.bc_draft).items()}

    def prior(self):
        """What `auto` starts from (speculation.auto_costs.CostPrior): each model's k-row step in
        seconds when the record was measured (the medians), which the run's own timings rescale."""
        from ..speculation.auto_costs import CostPrior
        t, d = self.target_step_ms.estimate / 1e3, self.draft_step_ms.estimate / 1e3
        return CostPrior({k: t * iv.estimate for k, iv in self.bc_target.items()},
                         {k: d * iv.estimate for k, iv in self.bc_draft.items()},
                         f"costs record {self.id} ({self.date[:16]})")

    def as_json(self) -> dict:
        iv = lambda x: None if x is None else x.as_json()            # noqa: E731
        out = {k: getattr(self, k) for k in ("id", "date", "time", "cpu", "simd", "n_threads", "kernel_stamp",
                                               "target", "draft", "draft_vocab", "activations", "reps",
                                               "busy", "c_bytes", "target_gb", "draft_gb")}
        for k in ("bandwidth_gb_s", "int8_gmacs_s", "target_step_ms", "draft_step_ms", "c",
                  "extra_row_target", "extra_row_draft"):
            out[k] = iv(getattr(self, k))
        out["bc_target"] = {str(k): v.as_json() for k, v in self.bc_target.items()}
        out["bc_draft"] = {str(k): v.as_json() for k, v in self.bc_draft.items()}
        return out

    @classmethod
    def from_json(cls, v: dict) -> "Costs":
        iv = lambda d: None if d is None else Interval(float(d["median"]), float(d["min"]), float(d["max"]),  # noqa: E731
                                                       int(d["n"]), str(d["method"]))
        kw = {k: v[k] for k in ("id", "date", "cpu", "simd", "kernel_stamp", "target", "draft", "activations")}
        kw.update(time=float(v["time"]), n_threads=int(v["n_threads"]), reps=int(v["reps"]), busy=float(v["busy"]),
                  draft_vocab=None if v["draft_vocab"] is None else int(v["draft_vocab"]),
                  c_bytes=float(v["c_bytes"]), target_gb=float(v["target_gb"]), draft_gb=float(v["draft_gb"]))
        for k in ("bandwidth_gb_s", "int8_gmacs_s", "target_step_ms", "draft_step_ms", "c",
                  "extra_row_target", "extra_row_draft"):
            kw[k] = iv(v[k])
        kw["bc_target"] = {int(k): iv(d) for k, d in v["bc_target"].items()}
        kw["bc_draft"] = {int(k): iv(d) for k, d in v["bc_draft"].items()}
        return cls(**kw)


def _valid(v: dict) -> bool:
    # a record every reader can trust: every field there, every number finite and positive, the
    # intervals ordered, bc(1) = 1 and monotone in k
    c = Costs.from_json(v)
    ivs = [c.bandwidth_gb_s, c.target_step_ms, c.draft_step_ms, c.c, *c.bc_target.values(), *c.bc_draft.values()]
    ivs += [x for x in (c.int8_gmacs_s,) if x is not None]
    if not all(math.isfinite(x) and x > 0 for iv in ivs for x in (iv.low, iv.estimate, iv.high)):
        return False
    ivs += [x for x in (c.extra_row_target, c.extra_row_draft) if x is not None]   # (noise can take these below 0)
    if not all(math.isfinite(x) for iv in ivs for x in (iv.low, iv.estimate, iv.high)):
        return False
    if not all(iv.low <= iv.estimate <= iv.high for iv in ivs) or not 0.0 <= c.busy <= 1.0:
        return False
    for bc in (c.bc_target, c.bc_draft):
        ks = sorted(bc)
        if not ks or ks[0] != 1 or abs(bc[1].estimate - 1.0) > 1e-9:
            return False
        if any(bc[a].estimate > bc[b].estimate or bc[a].low > bc[b].low or bc[a].high > bc[b].high
               for a, b in zip(ks, ks[1:])):
            return False
    return c.c_bytes > 0 and c.reps >= 1 and bool(c.id)


def _record():
    from ..kernels.machine import MachineRecord
    return MachineRecord(FILE, _valid, max_age_s=CLASS_DAY_S)


RECORD = None                    # made on first use (importing this module imports no Numba)


def _the_record():
    global RECORD
    if RECORD is None:
        RECORD = _record()
    return RECORD


def costs_key(pair, draft_vocab: int | None = None) -> str:
    """What a record belongs to: the machine and thread count, the SIMD level, the two files, the
    draft's head and the activation mode."""
    import os

    from ..kernels.machine import machine_key
    from ..kernels.simd import SIMD_LEVEL
    ctx = pair.ctx_tgt
    names = "|".join(os.path.abspath(m.path) for m in (pair.target, pair.draft))      # the files measured
    return (f"{machine_key(ctx.n_threads)}|SIMD {SIMD_LEVEL}|{ctx.backend_name}|{ctx.activations}|{names}"
            f"|draft vocab {draft_vocab or 'all'}")


# ---- measuring -------------------------------------------------------------------------------
def _monotone(per_rep: list, sizes) -> dict:
    # k -> spread of t(k)/t(1) over the repetitions, each of median, min and max made
    # non-decreasing in k (a slow call at k must not make k + 1 look cheaper)
    out, run = {}, (0.0, 0.0, 0.0)
    for k in sizes:
        s = spread([r[k] for r in per_rep])
        run = (max(run[0], s.low), max(run[1], s.estimate), max(run[2], s.high))
        out[k] = Interval(run[1], run[0], run[2], s.n, "min-max, monotone in k")
    return out


def _extra_row(per_rep: list) -> Interval:
    # per repetition: the median over EXTRA_ROW_SIZES of (bc(k) - 1) / (k - 1)
    import statistics
    return spread([statistics.median((r[k] - 1.0) / (k - 1) for k in EXTRA_ROW_SIZES if k in r)
                   for r in per_rep])


def _bandwidth_rounds(n_threads: int) -> list:
    # the faster probe's rounds (measure.bench.streaming_bandwidth: a probe only understates)
    from .bench import streaming_bandwidth
    b = streaming_bandwidth(BANDWIDTH_GIB, n_threads, reps=2)
    return list(b["rounds_gb_s"] if b["numpy_gb_s"] >= b["xor_gb_s"] else b["xor_rounds_gb_s"])


def _int8_rounds(ctx) -> list | None:
    # the int8 limit's rounds (kernels/tuning.py), None without int8 activations on the CPU;
    # SPECNB_INT8_PEAK, where set, is the limit
    if ctx.backend_name != "cpu" or ctx.activations != "q8":
        return None
    from ..kernels.tuning import PEAK_ENV, int8_peak_verdict, measure_int8_peak
    v = int8_peak_verdict(ctx.n_threads)
    if v.get("source") == PEAK_ENV:
        return [float(v["gmacs_s"])]
    return list(measure_int8_peak(ctx.n_threads, reps=3)["rounds_gmacs_s"])


def measure_costs(pair, draft_vocab: int | None = None, reps: int = REPS, sizes=SIZES) -> dict:
    """Measure a record of `pair` (an open run.pair.Pair: its two contexts as they are set up):
    the bandwidth and the int8 limit before and after; in between `reps` repetitions, each timing
    a k-row batch of the target, then of the draft, for every k of `sizes` (measure.bench's
    interleaved batch timing, after the same PREFIX). The draft's head is restricted to
    draft_vocab tokens while it is timed (--spec-draft-vocab). -> the record's JSON form."""
    import time

    from .bench import _batch_cost_samples, decode_bytes, draft_decode_bytes
    from .contention import OtherLoad
    from ..errors import check_param
    from ..kernels import sources_stamp
    from ..kernels.machine import cpu_name
    from ..kernels.simd import SIMD_LEVEL
    from ..model.registry import registry_name
    from ..speculation.draft_vocab import draft_output_ids
    check_param(pair.draft is not None and pair.ctx_dft is not None, "pair", pair, "a pair with a draft model")
    check_param(isinstance(reps, int) and reps >= 1, "reps", reps, "an integer >= 1")
    sizes = tuple(sorted(set(int(k) for k in sizes) | {1}))
    ctx_t, ctx_d = pair.ctx_tgt, pair.ctx_dft
    before_ids = ctx_d.output_ids
    if draft_vocab:
        ctx_d.set_output_ids(draft_output_ids(pair.draft.vocab, int(draft_vocab)))
    try:
        with OtherLoad() as load:
            bw, g8 = _bandwidth_rounds(ctx_t.n_threads), _int8_rounds(ctx_t)
            prefix = pair.target.vocab.tokenize(PREFIX)[:64]
            t = _batch_cost_samples({"target": ctx_t, "draft": ctx_d}, prefix, sizes, reps)
            bw += _bandwidth_rounds(ctx_t.n_threads)
            if g8 is not None and len(g8) > 1:
                g8 += _int8_rounds(ctx_t)
    finally:
        ctx_d.set_output_ids(before_ids)
        ctx_t.clear()
        ctx_d.clear()
    per = {m: [{k: t[m][k][i] / t[m][1][i] for k in sizes} for i in range(reps)] for m in t}
    tgt_b, dft_b = decode_bytes(pair.target), draft_decode_bytes(pair.draft, draft_vocab)
    stamp = sources_stamp()
    v = {"busy": round(load.share or 0.0, 3), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "time": time.time(),
         "cpu": cpu_name(), "simd": SIMD_LEVEL,
         "n_threads": int(ctx_t.n_threads), "kernel_stamp": stamp, "target": registry_name(pair.target),
         "draft": registry_name(pair.draft), "draft_vocab": int(draft_vocab) if draft_vocab else None,
         "activations": ctx_t.activations, "reps": reps, "c_bytes": dft_b / tgt_b,
         "target_gb": tgt_b / 1e9, "draft_gb": dft_b / 1e9,
         "bandwidth_gb_s": spread(bw).as_json(), "int8_gmacs_s": None if g8 is None else spread(g8).as_json(),
         "target_step_ms": spread([1e3 * x for x in t["target"][1]]).as_json(),
         "draft_step_ms": spread([1e3 * x for x in t["draft"][1]]).as_json(),
         "c": spread([d / g for d, g in zip(t["draft"][1], t["target"][1])]).as_json(),
         "bc_target": {str(k): iv.as_json() for k, iv in _monotone(per["target"], sizes).items()},
         "bc_draft": {str(k): iv.as_json() for k, iv in _monotone(per["draft"], sizes).items()},
         "extra_row_target": _extra_row(per["target"]).as_json() if len(sizes) > 1 else None,
         "extra_row_draft": _extra_row(per["draft"]).as_json() if len(sizes) > 1 else None}
    v["id"] = hashlib.sha256(f"{costs_key(pair, draft_vocab)}|{v['time']}".encode()).hexdigest()[:12]
    return v


# ---- reading ---------------------------------------------------------------------------------
def _read(v: dict) -> Costs:
    c = Costs.from_json(v)
    if c.id not in READ_IDS:
        READ_IDS.append(c.id)
    return c


def recorded_costs(pair, draft_vocab: int | None = None) -> Costs | None:
    """The record of `pair` (with this draft head) if one is recorded and valid, else None."""
    v = _the_record().read(costs_key(pair, draft_vocab))
    return None if v is None else _read(v)


def machine_costs(pair, draft_vocab: int | None = None, refresh: bool = False, on_measure=None,
                  reps: int = REPS) -> Costs:
    """The record of `pair`: recorded and valid, else measured now and recorded (one process at a
    time: a second one waits and reads it). refresh=True measures again. on_measure(text) is
    called before a measurement."""
    from ..model.registry import registry_name
    rec, key = _the_record(), costs_key(pair, draft_vocab)
    names = pair_label(registry_name(pair.target), registry_name(pair.draft), draft_vocab)
    text = f"measuring this machine's costs for {names} once (about 20 s; kept for {CLASS_DAY_S // 3600} hours)"
    if refresh:
        if on_measure is not None:
            on_measure(text)
        v = measure_costs(pair, draft_vocab, reps)
        if v["busy"] <= BUSY:
            return _read(rec.put(key, v))
        rec.memo[key] = v
        return _read(v)
    return _read(rec.get(key, lambda: measure_costs(pair, draft_vocab, reps), on_measure, text,
                         keep=lambda v: v["busy"] <= BUSY))


def open_costs(target=None, draft=None, draft_vocab: int | None = None, activations: str | None = None,
               n_threads: int | None = None, backend: str = "cpu", refresh: bool = False,
               on_measure=None) -> Costs:
    """machine_costs() of a pair opened from names or paths (None: the real pair)."""
    from ..model.registry import REAL_DRAFT, REAL_TARGET
    from ..run.pair import open_pair, warm_up
    pair = open_pair(target or REAL_TARGET, draft or REAL_DRAFT, n_ctx=256, backend=backend,
                     n_threads=n_threads, activations=activations)
    if refresh or recorded_costs(pair, draft_vocab) is None:
        warm_up(pair.ctx_tgt, pair.ctx_dft)
    return machine_costs(pair, draft_vocab, refresh=refresh, on_measure=on_measure)


# ---- printing --------------------------------------------------------------------------------
def pair_label(target: str, draft: str, draft_vocab: int | None) -> str:
    """'qwen2.5-coder-1.5b with qwen2.5-coder-0.5b-q4_0 (head of 32768 tokens)': how a record and
    its measuring name the pair."""
    return f"{target} with {draft}" + (f" (head of {draft_vocab} tokens)" if draft_vocab else "")


def _iv(x: Interval, fmt: str = "{:.2f}", unit: str = "") -> str:
    return f"{fmt.format(x.estimate)}{unit} ({fmt.format(x.low)}-{fmt.format(x.high)})"


def format_costs(c: Costs, ks=(2, 3, 5, 9, 17)) -> str:
    """The record as a few lines of text: when and where, the steps, c, bc(k) with their spread."""
    L = [f"costs record {c.id}: {pair_label(c.target, c.draft, c.draft_vocab)}, activations {c.activations}, "
         f"measured {c.date} on "
         f"{c.cpu} ({c.simd}, {c.n_threads} thread{'s' * (c.n_threads != 1)}), medians (min-max) over {c.reps} "
         f"interleaved repetitions"
         + (f"; other processes took {100 * c.busy:.0f}% of the CPU meanwhile: not kept, measured again next time"
            if c.busy > BUSY else ""),
         f"  streaming bandwidth {_iv(c.bandwidth_gb_s, '{:.1f}', ' GB/s')}"
         + (f"; int8 compute limit {_iv(c.int8_gmacs_s, '{:.0f}', ' G multiply-adds/s')}" if c.int8_gmacs_s else ""),
         f"  one-row step: target {_iv(c.target_step_ms, '{:.1f}', ' ms')} reading {c.target_gb:.3f} GB, "
         f"draft {_iv(c.draft_step_ms, '{:.1f}', ' ms')} reading {c.draft_gb:.3f} GB",
         f"  c = {_iv(c.c)} (the bytes predict {c.c_bytes:.2f})"]
    for name, bc, er in (("target", c.bc_target, c.extra_row_target), ("draft", c.bc_draft, c.extra_row_draft)):
        L.append(f"  bc(k), {name}: " + ", ".join(f"bc({k}) {_iv(bc[k])}" for k in ks if k in bc)
                 + (f"; a row beyond the first {_iv(er)} of a step" if er else ""))
    return "\n".join(L)
