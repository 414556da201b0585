"""How long each round's draft is: llama.cpp's fixed --spec-draft-n-max, Hugging Face's heuristic
schedule, or `auto`, chosen before every round from the costs this run measures.

  fixed      every draft is cut to n_max (llama.cpp's --spec-draft-n-max; p_min and n_min on top)
  heuristic  transformers' assisted generation, num_assistant_tokens_schedule="heuristic"
             (generation/candidate_generator.py, AssistedCandidateGenerator
             .update_candidate_strategy): num_assistant_tokens starts at 20 (GenerationConfig's
             default), +2 after a round in which every draft token was accepted, else -1, never
             under 1; specnb also caps it at n_max
  auto       before each round, the d in 0..n_max that maximizes the expected committed tokens
             per second,

                 E(d) / T(d),   E(d) = 1 + sum_{j=1..d} prod_{i<=j} a_i,
                 T(d) = t_draft(d) + t_target(1 + d),

             a_i the conditional acceptance of draft position i, t_target(k) the time of a
             round's target side with k rows, t_draft(d) the draft model's decodes for a d-token
             draft (nothing for a lookup's draft). d = 0 is plain decoding: T(0) = t_target(1).
             How the terms are measured: auto_costs.py (`BatchCost`, `Acceptance`; WINDOW,
             TRUSTED, PRIOR_STRENGTH, DECAY). When a round drafts at all (start-up, probes, the
             draft model's catch-up, "no gain"): auto.py (`AutoDraftLen`; PROBE_*, GROW,
             CATCH_UP_*, NO_GAIN_RECHECK).

`expected_tokens(a, d)` and `best_length(...)` are the decision as plain functions, usable on a
grid (alpha, c) without a run. A policy only chooses each round's n_max: the target's sampler
still decides every token, so the output is plain decoding's, token for token.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import ParamError
from .limits import DRAFT_N_MAX_LIMIT

SCHEDULES = ("fixed", "heuristic", "auto")
AUTO_CAP = 16                 # `auto` without a cap: lengths 0..16 considered
HEURISTIC_START = 20          # transformers' GenerationConfig.num_assistant_tokens
HEURISTIC_CAP = 64            # `heuristic` without a cap


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
def expected_tokens_upto(accept, n_max: int) -> list:
    """[E(0), E(1), ..., E(n_max)]: E(d) = 1 + sum_{j=1..d} prod_{i<=j} a_i, the tokens a round
    commits with a d-token draft, a_i the conditional acceptance of position i (`accept`: the
    rates per position, or a number: the same at every position, Leviathan's alpha)."""
    out, e, run = [1.0], 1.0, 1.0
    for j in range(n_max):
        run *= float(accept if isinstance(accept, (int, float)) else accept[j])
        e += run
        out.append(e)
    return out


def expected_tokens(accept, d: int) -> float:
    """E(d) alone."""
    return expected_tokens_upto(accept, d)[-1]


def shortest_best(rates: list) -> int:
    """The d of the highest rate; a tie (within one part in 10^9) goes to the shorter draft."""
    best = 0
    for d, r in enumerate(rates):
        if r > rates[best] * (1 + 1e-9):
            best = d
    return best


def best_length(accept, t_target, t_draft, n_max: int) -> tuple[int, list]:
    """argmax_d E(d) / (t_draft(d) + t_target(1 + d)) over d in 0..n_max, and the rates
    [tokens per second for each d]. accept: a number or per-position rates (len >= n_max);
    t_target(k), t_draft(d): seconds (t_draft(0) is ignored). Ties go to the shorter draft."""
    rates = []
    for d, e in enumerate(expected_tokens_upto(accept, n_max)):
        t = t_target(1 + d) + (t_draft(d) if d > 0 else 0.0)
        rates.append(e / t if t > 0 else math.inf)
    return shortest_best(rates), rates


@dataclass
class Decision:
    """One round's choice: the length, why (expected tokens and rate per length), how."""
    d: int
    reason: str                       # "start-up", "best", "probe", "no gain", "schedule", "budget"
    expected_tokens: float = 1.0      # E(d)
    expected_rate: float = 0.0        # E(d) / T(d), tokens per second (0: unknown)
    plain_rate: float = 0.0           # 1 / t_target(1)
    rates: list = field(default_factory=list)   # expected tokens per second for each d
    catch_up_window: int = 0          # the draft model catches up at most this many of the rows it
                                      # missed while idle (0: all of them; DraftParams)

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
    before a round, `update_candidate_strategy(ev)` after it. A policy is fed: what it needs of
    the speculators comes in as arguments, and it never calls them."""
    schedule = "fixed"

    def __init__(self, n_max: int):
        self.n_max = int(n_max)
        self.chosen: dict[int, int] = {}          # how often each length was chosen
        self.last: Decision | None = None

    def lengths(self, sources: dict, remaining: int | None = None, behind: int = 0) -> dict | None:
        """This round's {impl type: Decision} (one decision for every sequence), or None when
        the length is fixed (every draft cut to n_max). `sources`: {impl type: whether its drafts
        cost a model's decodes (SpeculativeImpl.costs_model)}; `remaining`: the tokens still to
        generate; `behind`: the rows the draft model would decode before its seed row if it
        drafted now (the rows it missed while rounds drafted nothing)."""
        return {t: self.choose(t, remaining, behind, model) for t, model in sources.items()}

    def choose(self, source: str = "draft-simple", remaining: int | None = None, behind: int = 0,
               costs_model: bool = True) -> Decision:
        """This round's decision for a draft from `source` (an impl type); `remaining`: the
        tokens still to generate (None: unknown); `behind` and `costs_model` as in lengths()."""
        return Decision(self.n_max, "schedule")

    def record(self, dec: Decision) -> None:
        """Count the decision that applied to a round."""
        self.chosen[dec.d] = self.chosen.get(dec.d, 0) + 1
        self.last = dec

    def update_candidate_strategy(self, ev) -> None:
        """After a round: read what it measured (transformers' hook of that name)."""

    def observe_prefill(self, n_rows: int, t_target: float, t_draft: float | None = None) -> None: ...

    def observe_draft_decode(self, n_rows: int, seconds: float) -> None:
        """One decode of the draft model while drafting (the chain hands them on)."""

    def stats(self) -> dict:
        return {"schedule": self.schedule, "n_max": self.n_max,
                "chosen": dict(sorted(self.chosen.items()))}


class FixedDraftLen(DraftLenPolicy):
    """llama.cpp: every round may draft n_max tokens."""

    def lengths(self, sources: dict, remaining: int | None = None, behind: int = 0) -> None:
        self.record(self.choose())
        return None


class HeuristicDraftLen(DraftLenPolicy):
    """transformers' "heuristic" schedule: start at 20, +2 after a fully accepted draft, else -1
    (minimum 1); here also capped at n_max."""
    schedule = "heuristic"

    def __init__(self, n_max: int, start: int = HEURISTIC_START):
        super().__init__(n_max)
        self.n = float(min(start, n_max))

    def choose(self, source: str = "draft-simple", remaining: int | None = None, behind: int = 0,
               costs_model: bool = True) -> Decision:
        return Decision(int(self.n), "schedule")

    def update_candidate_strategy(self, ev) -> None:
        for r in ev.slots[:1]:
            if r.replay or not r.draft:
                continue
            if r.n_accepted == len(r.draft):
                self.n = min(self.n + 2.0, float(self.n_max))
            else:
                self.n = max(1.0, self.n - 1.0)


def format_chosen(st: dict) -> str:
    """One line: how often each draft length was chosen (and, for auto, the probes)."""
    ch = st.get("chosen", {})
    n = sum(ch.values()) or 1
    body = ", ".join(f"{d}: {c} ({100 * c / n:.0f}%)" for d, c in sorted(ch.items()))
    line = f"draft length ({format_draft_max(st['schedule'], st['n_max'])}) chosen per round: {body}"
    if "n_probes" in st:
        line += f"; probes: {st['n_probes']} ({1e3 * st['t_probes_s']:.1f} ms)"
    if st.get("prior"):
        line += f"; costs from the {st['prior']}"
    return line
