"""speculative-simple's parameters (common_params_speculative) and the speculator types.

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

from dataclasses import dataclass, fields

import numpy as np

from .draft_len import SCHEDULES, format_draft_max, parse_draft_max
from ..errors import ParamError, UnsupportedError, check_param
from .impl import check_draft_limits
from .limits import MIN_HITS_LIMIT, NGRAM_SIZE_LIMIT
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
    draft_vocab: int = 0      # specnb: the draft's output head cut to its N highest-ranked tokens
                              # and the prompt's (FR-Spec; draft_vocab.py); 0: the whole vocab
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
                    " or ".join(SCHEDULES), field="schedule")
        check_draft_limits(self.n_max, self.n_min, self.p_min)
        check_param(isinstance(self.draft_vocab, (int, np.integer)) and not isinstance(self.draft_vocab, bool)
                    and self.draft_vocab >= 0, "draft_vocab", self.draft_vocab,
                    "an integer >= 0 (0: the draft's whole vocabulary)")
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
            # min-hits: master checks >= 1 only and stores a uint16_t (common.h:361), so larger
            # values wrap there; the sizes are checked to 1024 there (arg.cpp:4194-4285)
            hi = MIN_HITS_LIMIT if name.endswith("min_hits") else NGRAM_SIZE_LIMIT
            check_param(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and lo <= v <= hi,
                        name, v, f"an integer in [{lo}, {hi}]")
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

    def needs_draft_model(self) -> bool:
        """Some requested type runs a draft model (-md); the n-gram types need none."""
        return any(t in NEEDS_DRAFT_MODEL for t in self.resolved_types(has_draft_model=True))

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
