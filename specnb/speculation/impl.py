"""The speculator interface (common_speculative_impl) and llama.cpp's per-impl statistics.

Every speculator (draft-simple, the n-gram lookups) implements the same small interface and is
driven only through it by the `Speculative` chain (speculative.py), which the loop talks to:

  begin(seq, prompt)             a new generation starts from `prompt` (the committed tokens)
  process(batch)                 observe a target batch (draft-simple replays it on its model)
  draft(dps)                     fill dps[seq].result for every seq with dps[seq].drafting
  accept(seq, n, is_other)       the target accepted n tokens of the last draft of seq
  get_state(seq) / set_state     optional: the impl's own per-sequence state

and small hooks of specnb's (no-ops unless the impl owns a memory or a record to show):

  draft_info(seq)                one info object per drafted token (.token, .source, ...)
  before_verify(seq, n_past)     after draft(), before the target verifies: undo what draft()
                                 left in the impl's memory (speculative-simple.cpp:206-213
                                 @34af94cd)
  seq_rm(seq, p0)                drop positions >= p0 of seq from the impl's memory
                                 (speculative-simple.cpp:281, 335 @34af94cd: llama_memory_seq_rm
                                 on ctx_dft)
  draft_dists(seq)               the distributions the draft was sampled from (rejection mode),
                                 or None for a deterministic draft
  pos_max(seq)                   the impl's memory's last position of seq, in the target's
                                 positions (None: the impl keeps no memory)
  behind()                       the rows its model would decode before its seed row if it
                                 drafted now (rows it skipped while idle; 0: it follows every batch)
  take_decodes()                 its model's decodes since the last call, as (rows, seconds)
  costs_model                    (a class attribute) its drafts cost a model's decodes, not a lookup
  n_eval_draft, n_eval_process   token rows this impl evaluated on a model while drafting and
                                 while observing target batches (0 for lookups); n_eval their sum

The counters are common_speculative_impl's (common/speculative.cpp:137-175 @34af94cd, struct
common_speculative_impl); `impl_stats` and `format_impl_stats` compute and print them as
common_speculative_print_stats does. specnb adds a per-draft breakdown (`n_acc_draft_tokens`,
`n_acc_draft_per_pos`): llama.cpp's own figures are per accept() call, and accept() also runs
after rounds that drafted nothing (impl_last is kept between rounds: set only when an impl
drafts, common/speculative.cpp:2671 @34af94cd) and, on the checkpoint path, once per replay with
the re-verified tokens (see loop.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import check_param


from .limits import DRAFT_N_MAX_LIMIT


def check_draft_limits(n_max, n_min, p_min) -> None:
    """The draft model's limits (--spec-draft-n-max / -n-min / -p-min), checked in one place for
    SpecParams.validate and DraftSimple. Master 34af94cd accepts (common/arg.cpp:4076-4108) any
    n_max >= 0, any n_min and any p_min. specnb takes the same, except:
    - n_max above DRAFT_N_MAX_LIMIT: the per-position statistics are n_max long;
    - a negative n_min: master compares the draft's size with (size_t) n_min
      (common/speculative.cpp:378), so there it drops every draft, as any n_min above n_max does
      in both; Python's comparison would drop none.
    A p_min above 1 drafts nothing, a negative (or NaN) one never stops a draft, as in master."""
    import numbers
    check_param(isinstance(n_max, numbers.Integral) and not isinstance(n_max, bool)
                and 0 <= n_max <= DRAFT_N_MAX_LIMIT, "draft_max", n_max,
                f"an integer in [0, {DRAFT_N_MAX_LIMIT}] (master: any integer >= 0)", field="n_max")
    check_param(isinstance(n_min, numbers.Integral) and not isinstance(n_min, bool) and n_min >= 0,
                "draft_min", n_min, "an integer >= 0 (master drops every draft with a negative "
                "value; so does any value above draft_max)", field="n_min")
    check_param(isinstance(p_min, numbers.Real) and not isinstance(p_min, bool), "draft_p_min", p_min,
                "a number", field="p_min")


@dataclass
class DraftParams:
    """common_speculative_draft_params: one sequence's draft request for this round."""
    drafting: bool = False
    n_max: int = -1           # per-round cap (context / n_predict / draft-max budget); -1: none
    n_past: int = 0           # position of id_last
    id_last: int = 0          # the seed token
    prompt: list = field(default_factory=list)    # committed tokens [0, n_past)
    result: list = field(default_factory=list)    # output: the draft
    smpl: object = None       # specnb: the target's sampler of seq (rejection-sampling mode)
    catch_up_window: int = 0  # specnb: catch up at most the last N rows the draft model missed
                              # while idle (0: all of them; deferred.py, a Decision of auto's)


class SpeculativeImpl:
    """common_speculative_impl: a speculator and llama.cpp's per-impl accounting."""
    type = "none"
    costs_model = False       # a lookup: its drafts cost no model decode

    def __init__(self, n_seq: int, n_max: int):
        self.n_seq, self.n_max = n_seq, n_max
        self.n_call_begin = self.n_call_draft = self.n_call_accept = 0
        self.n_gen_drafts = self.n_acc_drafts = 0
        self.n_gen_tokens = self.n_acc_tokens = 0
        self.n_acc_tokens_per_pos: list[int] = []     # grows with the longest accepted run
        self.t_begin_us = self.t_draft_us = self.t_accept_us = 0.0
        # specnb's breakdown: per draft, never counting the target's replacement token
        self.n_acc_draft_tokens = 0
        self.n_acc_draft_per_pos = [0] * max(n_max, 0)
        self.info: list[list] = [[] for _ in range(n_seq)]
        self.n_eval_draft = 0         # model rows evaluated by draft()
        self.n_eval_process = 0       # ... and by process() (a lookup evaluates none)

    # ---- the interface (common/speculative.cpp, struct common_speculative_impl) ---------
    def begin(self, seq: int, prompt) -> None: ...
    def process(self, batch) -> bool: return True
    def draft(self, dps: list[DraftParams]) -> None: ...
    def accept(self, seq: int, n_accepted: int, is_other: bool) -> None: ...
    def get_state(self, seq: int): return None
    def set_state(self, seq: int, state) -> None: ...

    # ---- specnb's hooks -------------------------------------------------------------------
    def draft_info(self, seq: int) -> list:
        return list(self.info[seq])

    def draft_dists(self, seq: int) -> list | None: return None
    def before_verify(self, seq: int, n_past: int) -> None: ...
    def seq_rm(self, seq: int, p0: int) -> None: ...
    def pos_max(self, seq: int) -> int | None: return None
    def behind(self) -> int: return 0
    def take_decodes(self) -> list: return []

    @property
    def n_eval(self) -> int:
        return self.n_eval_draft + self.n_eval_process


def impl_stats(impl: SpeculativeImpl) -> dict:
    """What common_speculative_print_stats prints for one impl, as a dict, plus specnb's breakdown.

    llama.cpp (common/speculative.cpp:2759-2803 @34af94cd, common_speculative_print_stats): mean
    accepted length 1 + n_acc_tokens / n_call_accept and #acc rate/pos n_acc_tokens_per_pos[i] /
    n_call_accept, the vector as long as the longest accepted run (common_speculative_accept grows
    it, :2709-2711). specnb's (`specnb_*`): per draft (n_gen_drafts), over n_max positions,
    counting only accepted draft tokens.
    """
    n_acc = impl.n_call_accept
    n_dr = impl.n_gen_drafts
    return {
        "type": impl.type,
        "n_call_begin": impl.n_call_begin, "n_call_draft": impl.n_call_draft,
        "n_call_accept": impl.n_call_accept,
        "n_gen_drafts": impl.n_gen_drafts, "n_acc_drafts": impl.n_acc_drafts,
        "n_gen_tokens": impl.n_gen_tokens, "n_acc_tokens": impl.n_acc_tokens,
        "n_drafted": impl.n_gen_tokens, "n_accept": impl.n_acc_tokens,
        "n_acc_tokens_per_pos": list(impl.n_acc_tokens_per_pos),
        "t_begin_ms": impl.t_begin_us / 1e3, "t_draft_ms": impl.t_draft_us / 1e3,
        "t_accept_ms": impl.t_accept_us / 1e3,
        "mean_acc_len": 1.0 + impl.n_acc_tokens / n_acc if n_acc else 0.0,
        "acc_rate_per_pos": [n / n_acc for n in impl.n_acc_tokens_per_pos] if n_acc else [],
        "specnb_n_acc_tokens": impl.n_acc_draft_tokens,
        "specnb_n_acc_tokens_per_pos": list(impl.n_acc_draft_per_pos),
        "specnb_acc_rate_per_pos": [n / n_dr if n_dr else 0.0 for n in impl.n_acc_draft_per_pos],
        "specnb_mean_acc_len": 1.0 + impl.n_acc_draft_tokens / n_dr if n_dr else 0.0,
        "n_eval": impl.n_eval,
        "n_eval_draft": impl.n_eval_draft,
        "n_eval_process": impl.n_eval_process,
    }


def format_impl_stats(s: dict) -> str:
    """common_speculative_print_stats's line for one impl, then specnb's breakdown."""
    line = (f"statistics {s['type']:>16s}: #calls(b,g,a) = {s['n_call_begin']:4d} "
            f"{s['n_call_draft']:6d} {s['n_call_accept']:6d}, #gen drafts = {s['n_gen_drafts']:6d}, "
            f"#acc drafts = {s['n_acc_drafts']:5d}, #gen tokens = {s['n_gen_tokens']:6d}, "
            f"#acc tokens = {s['n_acc_tokens']:5d}")
    if s["n_call_accept"] > 0:
        rates = ", ".join(f"{r:.3f}" for r in s["acc_rate_per_pos"])
        line += f", #mean acc len = {s['mean_acc_len']:.2f}, #acc rate/pos = ({rates})"
    line += (f", dur(b,g,a) = {s['t_begin_ms']:.3f}, {s['t_draft_ms']:.3f}, "
             f"{s['t_accept_ms']:.3f} ms")
    rates = ", ".join(f"{r:.3f}" for r in s["specnb_acc_rate_per_pos"])
    return (line + f"\n  specnb, per draft: {s['n_gen_drafts']} drafts, {s['specnb_n_acc_tokens']} "
            f"draft tokens accepted, mean accepted length = {s['specnb_mean_acc_len']:.3f}, "
            f"acceptance per draft position = [{rates}]")
