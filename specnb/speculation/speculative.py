"""The speculator chain (common_speculative) and its parameters (common_params_speculative).

Behaviour as llama.cpp master 34af94cd, common/speculative.cpp:
  - `--spec-type` takes a comma-separated list of types; common_speculative_init (:2455-2572)
    builds one impl per type in a fixed priority order, whatever order was typed: the n-gram
    lookups first (they cost nothing; when one drafts, the draft model never runs), then the
    draft models.
  - common_speculative_draft (:2617-2696) walks the impls; the first that fills a sequence's
    result clears its `drafting` flag, so later impls skip it; an empty result falls through to
    the next impl. A draft longer than the round's budget dp.n_max is cut to it.
  - impl_last[seq] remembers who drafted last; common_speculative_accept (:2698-2733) credits
    that impl (is_other = false) and tells the others (is_other = true). impl_last is kept
    between rounds, so a round that drafts nothing still counts an accept(0) call for the last
    drafter.
`SpecParams` carries speculative-simple's flags; `build_speculative` is common_speculative_init.

Flags as 34af94cd names them (common/arg.cpp:4076-4285): --spec-draft-n-max, --spec-draft-n-min,
--spec-draft-p-min, --spec-draft-model (-md), --spec-type, and per n-gram type
--spec-ngram-simple-size-n / -size-m / -min-hits, --spec-ngram-map-k-size-n / ... c392e50's
--draft-max and --draft-min are aliases here (34af94cd refuses them, :4292-4304); the shared
--spec-ngram-size-n / -size-m / -min-hits and --spec-ngram-check-rate of early 2026
(003c90352d17) are gone there and refused here.

Which types need what: draft-simple needs a draft model (-md) and its context; the n-gram
types need neither. At 34af94cd the types default to `none` (common/common.h:370), so a draft
model without `--spec-type draft-simple` does not speculate: llama-speculative-simple exits with
"failed to initialize speculative decoding". specnb keeps c392e50's rule, where the example
always drafted with -md: without --spec-type, a draft model means draft-simple.

Draft lengths as master has them: --spec-draft-n-max (SpecParams.n_max) caps the draft model's
drafts; ngram-simple and ngram-map-k draft up to their m-gram size (default 48) and ngram-cache
a fixed NGRAM_CACHE_N_DRAFT (8), each cut only by the round's context and n_predict budget
(dp.n_max). c392e50's llama-server cut every draft to --draft-max (get_n_draft_max,
examples/server/server.cpp:3231-3238); `NgramSimple(n_max=...)` still can.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields

import numpy as np

from .draft_len import SCHEDULES, format_draft_max, parse_draft_max
from .draft_simple import DraftSimple
from ..errors import ParamError, UnsupportedError, check_param
from .ngram import NgramMapK, NgramMapK4V, NgramSimple
from .ngram_cache import NgramCache
from .ngram_mod import NgramMod
from .impl import DraftParams, SpeculativeImpl, check_draft_limits, format_impl_stats, impl_stats
from .verify import VERIFY_MODES, synth_len_to_p, synth_rates_resolve

# ngram-cache's draft length in master (common_speculative_impl_ngram_cache: n_draft = 8,
# examples/lookup's default --draft)
NGRAM_CACHE_N_DRAFT = 8

# common_speculative_init's priority list, the highest first (speculative.cpp:2472-2482 @34af94cd)
PRIORITY = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
            "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
SPEC_TYPES = ("none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
              "ngram-cache")   # specnb's
# master's other types, and why specnb has none of them
NOT_IMPLEMENTED = {
    "draft-eagle3": "needs an EAGLE-3 head trained for the target, fed the target's hidden states",
    "draft-mtp": "needs a target with multi-token-prediction layers (none of specnb's models has them)",
    "draft-dflash": "needs a DFlash block-diffusion drafter trained for the target",
    "draft-dspark": "needs a DSpark drafter (DFlash with a Markov head) trained for the target",
}
NEEDS_DRAFT_MODEL = ("draft-simple",)


def parse_spec_types(value) -> tuple | None:
    """--spec-type: a comma-separated string or a list of names -> a tuple, or None when not given.

    As common_speculative_types_from_names, `none` anywhere means no speculation.
    """
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip() for n in names]
    if not names or not all(names):
        raise ParamError(f"invalid spec type list {value!r}: expected comma-separated names from "
                         + ", ".join(SPEC_TYPES))
    out = []
    for n in names:
        if n == "none":
            return ("none",)
        if n in NOT_IMPLEMENTED:
            raise UnsupportedError(f"speculative type {n!r} is llama.cpp's but not in specnb: "
                                   f"{NOT_IMPLEMENTED[n]} (available: {', '.join(SPEC_TYPES)})")
        if n not in SPEC_TYPES:
            raise ParamError(f"unknown speculative type {n!r}: expected one of {', '.join(SPEC_TYPES)}")
        if n not in out:
            out.append(n)
    return tuple(out)


@dataclass
class SpecParams:
    """The knobs of speculative-simple (common_params_speculative), with llama.cpp's defaults."""
    types: object = None      # --spec-type; None: draft-simple with a draft model, else none
    n_max: int = 3            # --spec-draft-n-max (the draft model's drafts are cut to it;
                              # auto/heuristic: the cap); c392e50: --draft-max
    n_min: int = 0            # --spec-draft-n-min; c392e50: --draft-min
    p_min: float = 0.0        # --spec-draft-p-min
    reeval: bool = True       # llama.cpp's draft re-evaluation; False: keep the draft's KV rows
    verify: str = "exact"     # "exact" (llama.cpp) or "rejection" (Leviathan / Chen)
    synth_rates: list | None = None   # --spec-synth-rates: unconditional acceptance per position
    synth_len: float | None = None    # --spec-synth-len: mean accepted length L
    synth_seed: int = 0
    ngram_size_n: int = 12    # both n-gram types' lookup n-gram length, unless set per type below
    ngram_size_m: int = 48    # both n-gram types' drafted m-gram length (the longest draft)
    ngram_simple_size_n: int | None = None    # --spec-ngram-simple-size-n (None: ngram_size_n)
    ngram_simple_size_m: int | None = None    # --spec-ngram-simple-size-m (None: ngram_size_m)
    ngram_map_k_size_n: int | None = None     # --spec-ngram-map-k-size-n (None: ngram_size_n)
    ngram_map_k_size_m: int | None = None     # --spec-ngram-map-k-size-m (None: ngram_size_m)
    ngram_map_k4v_size_n: int | None = None   # --spec-ngram-map-k4v-size-n (None: ngram_size_n)
    ngram_map_k4v_size_m: int | None = None   # --spec-ngram-map-k4v-size-m (None: ngram_size_m)
    ngram_min_hits: int = 1   # every n-gram map type's fewest hits, unless set per type below
    ngram_simple_min_hits: int | None = None   # --spec-ngram-simple-min-hits (read by none)
    ngram_map_k_min_hits: int | None = None    # --spec-ngram-map-k-min-hits (read by none)
    ngram_map_k4v_min_hits: int | None = None  # --spec-ngram-map-k4v-min-hits (read there only)
    ngram_mod_n_match: int = 24   # --spec-ngram-mod-n-match: the n-gram length hashed
    ngram_mod_n_min: int = 48     # --spec-ngram-mod-n-min: shorter drafts are dropped
    ngram_mod_n_max: int = 64     # --spec-ngram-mod-n-max: the longest draft
    lookup_cache_static: str | None = None    # -lcs: ngram-cache's static cache file
    lookup_cache_dynamic: str | None = None   # -lcd: ngram-cache's dynamic cache file
    schedule: str = "fixed"   # specnb: each round's draft length, "fixed" (llama.cpp),
                              # "heuristic" (transformers') or "auto" (specnb.speculation.draft_len);
                              # n_max="auto", "auto:16", "heuristic" set it too

    def __post_init__(self):
        if isinstance(self.n_max, str):
            schedule, self.n_max = parse_draft_max(self.n_max)
            if self.schedule not in ("fixed", schedule):
                raise ParamError(f"draft_max={schedule!r} contradicts schedule={self.schedule!r}")
            self.schedule = schedule

    @property
    def draft_max(self) -> str:
        """--spec-draft-n-max as typed: N, auto:CAP or heuristic:CAP."""
        return format_draft_max(self.schedule, self.n_max)

    def validate(self) -> "SpecParams":
        check_param(self.schedule in SCHEDULES, "draft_schedule", self.schedule,
                    " or ".join(SCHEDULES))
        check_draft_limits(self.n_max, self.n_min, self.p_min)
        check_param(self.verify in VERIFY_MODES, "verify", self.verify, " or ".join(VERIFY_MODES))
        check_param(self.synth_rates is None or self.synth_len is None, "synth_len",
                    self.synth_len, "not given together with synth_rates")
        parse_spec_types(self.types)
        for name in ("ngram_size_n", "ngram_size_m", "ngram_simple_size_n", "ngram_simple_size_m",
                     "ngram_map_k_size_n", "ngram_map_k_size_m", "ngram_map_k4v_size_n",
                     "ngram_map_k4v_size_m", "ngram_min_hits", "ngram_simple_min_hits",
                     "ngram_map_k_min_hits", "ngram_map_k4v_min_hits",
                     "ngram_mod_n_match", "ngram_mod_n_min", "ngram_mod_n_max"):
            v = getattr(self, name)
            if v is None and name not in ("ngram_size_n", "ngram_size_m", "ngram_min_hits"):
                continue
            lo = 0 if name in ("ngram_mod_n_min", "ngram_mod_n_max") else 1   # arg.cpp:4163-4192
            check_param(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and lo <= v <= 1024,
                        name, v, f"an integer in [{lo}, 1024]")
        self.synth_probs()
        return self

    def resolved_types(self, has_draft_model: bool) -> tuple:
        """The types to build, in llama.cpp's priority order (() for none)."""
        t = parse_spec_types(self.types)
        if t is None:
            t = ("draft-simple",) if has_draft_model else ("none",)
        if t == ("none",):
            return ()
        return tuple(sorted(t, key=PRIORITY.index))

    def ngram_knobs(self, type_: str) -> dict:
        """size_n, size_m and min_hits of an n-gram map type: its own flags (34af94cd) or the
        shared values."""
        key = type_.replace("-", "_")
        out = {}
        for knob in ("size_n", "size_m", "min_hits"):
            v = getattr(self, f"{key}_{knob}", None)
            out[knob] = int(getattr(self, f"ngram_{knob}") if v is None else v)
        return out

    def synth_probs(self) -> list | None:
        """Conditional acceptance probability per draft position, or None (real verification)."""
        if self.synth_rates is not None:
            return synth_rates_resolve(self.synth_rates, self.n_max)
        if self.synth_len is not None:
            return [synth_len_to_p(self.synth_len, self.n_max)] * self.n_max
        return None

    def replace(self, **kw) -> "SpecParams":
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(kw)
        return SpecParams(**d).validate()


def build_speculative(p: SpecParams, target, ctx_dft, n_seq: int = 1, sample_draft: bool = False,
                      draft_temp: float = 1.0, seed: int = 0) -> "Speculative":
    """common_speculative_init: one impl per requested type, in priority order."""
    impls = []
    for t in p.resolved_types(ctx_dft is not None):
        if t == "draft-simple":
            if ctx_dft is None:
                raise ParamError("speculative type 'draft-simple' needs a draft model (-md) and a "
                                 "draft context; the n-gram types need neither")
            impls.append(DraftSimple(target, ctx_dft, n_seq=n_seq, n_max=p.n_max, n_min=p.n_min,
                                     p_min=p.p_min, reeval=p.reeval, sample_draft=sample_draft,
                                     draft_temp=draft_temp, seed=seed))
        elif t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            # not cut to --spec-draft-n-max: master drafts up to the m-gram size
            cls = {"ngram-simple": NgramSimple, "ngram-map-k": NgramMapK, "ngram-map-k4v": NgramMapK4V}[t]
            impls.append(cls(n_seq=n_seq, **p.ngram_knobs(t)))
        elif t == "ngram-mod":
            impls.append(NgramMod(n_seq=n_seq, n_match=int(p.ngram_mod_n_match),
                                  n_min=int(p.ngram_mod_n_min), n_max=int(p.ngram_mod_n_max)))
        elif t == "ngram-cache":
            impls.append(NgramCache(n_seq, n_max=NGRAM_CACHE_N_DRAFT, static_path=p.lookup_cache_static,
                                    dynamic_path=p.lookup_cache_dynamic, n_vocab=target.n_vocab))
    return Speculative(impls, n_seq=n_seq)


def _priority(impl) -> int:
    return PRIORITY.index(impl.type) if impl.type in PRIORITY else len(PRIORITY)


class Speculative:
    """common_speculative: the impls in priority order, impl_last per sequence."""

    def __init__(self, impls: list[SpeculativeImpl], n_seq: int = 1):
        self.impls = sorted(impls, key=_priority)
        self.n_seq = n_seq
        self.impl_last: list[SpeculativeImpl | None] = [None] * n_seq
        self.impl_round: list[SpeculativeImpl | None] = [None] * n_seq   # drafted this round
        self._info: list[list] = [[] for _ in range(n_seq)]

    @property
    def types(self) -> list[str]:
        return [impl.type for impl in self.impls]

    def impl_of(self, type_: str) -> SpeculativeImpl | None:
        return next((i for i in self.impls if i.type == type_), None)

    # ---- llama.cpp's lifecycle (common_speculative_begin / process / draft / accept) -------
    def begin(self, seq: int, prompt) -> None:
        for impl in self.impls:
            t0 = time.perf_counter()
            impl.begin(seq, prompt)
            impl.n_call_begin += 1
            impl.t_begin_us += (time.perf_counter() - t0) * 1e6

    def process(self, batch) -> bool:
        ok = True
        for impl in self.impls:
            ok = impl.process(batch) and ok
        return ok

    def draft(self, dps: list[DraftParams]) -> None:
        """common_speculative_draft: the first impl that fills a sequence's result wins it."""
        self.impl_round, self._info = [None] * self.n_seq, [[] for _ in range(self.n_seq)]
        for dp in dps:
            if dp.drafting:
                dp.result.clear()
        if not any(dp.drafting for dp in dps):
            return
        for impl in self.impls:
            saved = self._impl_caps(impl, dps)
            if any(dp.drafting for dp in dps):
                t0 = time.perf_counter()
                impl.draft(dps)
                impl.t_draft_us += (time.perf_counter() - t0) * 1e6
                impl.n_call_draft += 1
            for s, (n_max, _) in saved.items():
                dps[s].n_max, dps[s].drafting = n_max, True
            for s, dp in enumerate(dps):
                if not dp.drafting or (s in saved and saved[s][1] <= 0):
                    continue
                info = impl.draft_info(s)
                if not dp.result:
                    self._info[s] += info        # e.g. the draft model's p_min stop
                    continue
                dp.drafting = False
                n_max = saved[s][1] if s in saved else dp.n_max
                if 0 < n_max < len(dp.result):             # "truncating draft to %d tokens"
                    del dp.result[n_max:]
                    info = info[:n_max]
                self.impl_last[s] = self.impl_round[s] = impl
                impl.n_gen_drafts += 1
                impl.n_gen_tokens += len(dp.result)
                self._info[s] = info
            if not any(dp.drafting for dp in dps):
                break
        for dp in dps:                                      # these failed to draft
            dp.drafting = False

    @staticmethod
    def _impl_caps(impl, dps) -> dict:
        """specnb's per-impl caps (DraftParams.n_max_type): apply impl's to each sequence that has
        one, a cap of 0 taking the sequence out of this impl's call; {seq: (n_max as it was, the
        impl's cap)}."""
        saved = {}
        for s, dp in enumerate(dps):
            if dp.drafting and dp.n_max_type and impl.type in dp.n_max_type:
                cap = int(dp.n_max_type[impl.type])
                cap = min(dp.n_max, cap) if dp.n_max >= 0 else cap
                saved[s] = (dp.n_max, cap)
                dp.n_max = cap
                if cap <= 0:
                    dp.drafting = False
        return saved

    def accept(self, seq: int, n_accepted: int) -> None:
        """common_speculative_accept: credit the impl that drafted this sequence last."""
        impl = self.impl_last[seq]
        if impl is None:
            assert n_accepted == 0, "accepted tokens without a draft"
            return
        t0 = time.perf_counter()
        if len(impl.n_acc_tokens_per_pos) < n_accepted:
            impl.n_acc_tokens_per_pos += [0] * (n_accepted - len(impl.n_acc_tokens_per_pos))
        for i in range(n_accepted):
            impl.n_acc_tokens_per_pos[i] += 1
        if n_accepted > 0:
            impl.n_acc_drafts += 1
            impl.n_acc_tokens += n_accepted
        impl.accept(seq, n_accepted, False)
        impl.n_call_accept += 1
        impl.t_accept_us += (time.perf_counter() - t0) * 1e6
        for other in self.impls:
            if other is not impl:
                other.accept(seq, n_accepted, True)

    def get_state(self, seq: int) -> dict:
        """common_speculative_get_state, for every impl that has a state: {type: state}."""
        return {impl.type: st for impl in self.impls if (st := impl.get_state(seq)) is not None}

    def set_state(self, seq: int, state: dict) -> None:
        for impl in self.impls:
            impl.set_state(seq, (state or {}).get(impl.type))

    # ---- specnb's hooks -------------------------------------------------------------------
    def record(self, seq: int, n_accepted: int) -> None:
        """specnb's per-draft breakdown: this round's draft of seq had n_accepted tokens kept."""
        impl = self.impl_round[seq]
        if impl is None:
            return
        impl.n_acc_draft_tokens += n_accepted
        for i in range(min(n_accepted, len(impl.n_acc_draft_per_pos))):
            impl.n_acc_draft_per_pos[i] += 1

    def drafted_by(self, seq: int) -> str:
        """The type of the impl that drafted seq's draft this round ("" for none)."""
        impl = self.impl_round[seq]
        return impl.type if impl is not None else ""

    def draft_info(self, seq: int) -> list:
        """Per-token info of seq's draft this round (.token, .source, ...)."""
        return list(self._info[seq])

    def draft_dists(self, seq: int) -> list | None:
        """The distributions seq's draft was sampled from, or None for a deterministic draft."""
        impl = self.impl_round[seq]
        return impl.draft_dists(seq) if impl is not None else None

    def before_verify(self, seq: int, n_past: int) -> None:
        for impl in self.impls:
            impl.before_verify(seq, n_past)

    def seq_rm(self, seq: int, p0: int) -> None:
        for impl in self.impls:
            impl.seq_rm(seq, p0)

    @property
    def n_eval(self) -> int:
        return sum(impl.n_eval for impl in self.impls)

    # ---- statistics ------------------------------------------------------------------------
    def stats(self) -> list[dict]:
        return [impl_stats(impl) for impl in self.impls]

    def print_stats(self) -> str:
        """common_speculative_print_stats: one `statistics <type>:` block per impl."""
        return "\n".join(format_impl_stats(s) for s in self.stats())
