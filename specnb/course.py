"""The course's door: every name the notebooks use beyond the learner's API (`specnb`), loaded
on first use, and the two helpers of the notebooks' prose.

    from specnb import Context, SpecParams, SpeculativeLoop      # the learner's API
    from specnb.course import say, check, fig_cost_map, REAL_TARGET

`say(f"... {speedup:.2f}x ...")` shows a sentence made from the cell's own measurements as
Markdown, so a quoted number is always the one the cell just measured (the notebook tests refuse
a measured number typed into prose by hand). `check(prediction, answer)` is the exercise format:
with no prediction it asks for one (so the committed output never gives the answer away); with
one it says right or not quite, without raising, so Run All goes on.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from . import _load, _type_checking_names

# The course's names, one name a line: editors follow these imports, and `_API` below is read from
# them, so that each name loads on first use.
if TYPE_CHECKING:
    # models: files, forged variants, the vocab gate, the registry
    from .model import Model
    from .gguf.file import GGUFFile
    from .vocab.gate import are_compatible
    from .vocab.gate import SPEC_VOCAB_MAX_SIZE_DIFFERENCE
    from .vocab.gate import SPEC_VOCAB_CHECK_START_TOKEN_ID
    from .gguf.forge import rewrite
    from .gguf.forge import truncate_layers
    from .gguf.forge import mutate_vocab
    from .gguf.forge import MUTATIONS
    from .model.registry import REAL_TARGET
    from .model.registry import REAL_DRAFT
    from .model.registry import describe
    from .model.registry import model_path
    from .model.registry import default_target_path
    from .model.registry import default_draft_path
    from .model.registry import gemma_available
    from .model.registry import gemma_path
    from .model.registry import gemma_vocab_recorded
    from .vocab.recorded import same_text_ids
    # running
    from .run.context import can_seq_rm
    from .run.context import set_threads
    from .run.pair import Pair
    # speculation beyond the loop
    from .speculation.speculative import build_speculative
    from .speculation.params import SPEC_TYPES
    from .speculation.params import PRIORITY
    from .speculation.impl import SpeculativeImpl
    from .speculation.ngram import ngram_simple_draft
    from .speculation.verify import rejection_verify
    from .speculation.impl import format_impl_stats
    from .speculation.verify import speculative_step
    from .speculation.auto import AutoDraftLen
    from .speculation.auto import CATCH_UP_WINDOW
    # measuring
    from .measure.stats import event_stats
    from .measure.stats import run_stats
    from .measure.stats import examined_counts
    from .measure.bench import batch_costs
    from .measure.experiments import measure_cost_ratio
    from .measure.experiments import sweep_draft_max
    from .measure.bench import decode_bytes
    from .measure.verify_cost import measure_verify_cost
    from .measure.verify_cost import verify_verdict
    from .measure.verify_cost import flat_but_slow
    from .measure.verify_cost import row_price
    from .measure.verify_cost import verify_cost_from
    # the machine's costs, measured once; verdicts from intervals; runs taken in turn
    from .measure.costs import machine_costs
    from .measure.costs import open_costs
    from .measure.costs import format_costs
    from .measure.verdict import interval
    from .measure.verdict import said
    from .measure.verdict import speedup_verdict
    from .measure.turns import compare
    from .measure.turns import take_turns
    from .measure.turns import chat_ids
    from .measure.turns import compare_all
    # the demo's waterfall: plain decoding, llama.cpp's defaults, then each specnb extension
    from .measure.waterfall import waterfall
    from .app.waterfall_report import format_waterfall
    from .app.waterfall_report import ceiling_lines
    from .app.waterfall_report import above_ceiling
    from .app.demo import CODE_PROMPTS
    from .app.demo import LOW_ACCEPTANCE_PROMPT
    from .app.demo import RECOMMENDED
    from .measure.waterfall import stages
    from .measure.waterfall import stage_pairs
    from .app.flags import spec_flags
    # what the cost notebook reads off its runs: the map's points and paragraph, run length
    from .app.cost_story import map_point
    from .app.cost_story import map_lines
    from .app.cost_story import map_story
    from .app.cost_story import speedup_over_first
    from .app.cost_story import said_verb
    from .measure.spec_bench import CODE_EDIT_REQUEST
    from .measure.spec_bench import code_edit_prompt
    # figures
    from .figures.runs import fig_acceptance_per_position
    from .figures.runs import fig_tokens_per_call
    from .figures.runs import fig_round_timeline
    from .figures.runs import fig_speedup_vs_draft_max
    from .figures.runs import fig_rounds_by_impl
    from .figures.time_per_token import fig_time_per_token
    from .figures.maths import fig_draft_confidence
    from .figures.maths import fig_draft_rows
    from .figures.maths import fig_alpha_vs_temperature
    from .figures.maths import fig_p_q_overlap
    from .figures.maths import fig_slot_positions
    from .figures.maths import tv_distance
    from .figures.snapshot import static_figures
    from .figures.cost_map import round_cost
    from .figures.cost_map import engine_speedup
    from .figures.cost_map import coverage_speedup
    from .figures.cost_map import best_speedup
    from .figures.cost_map import decode_roofline
    from .figures.cost_map import streaming_gb_s
    from .figures.cost_map import break_even_alpha
    from .figures.cost_map import c_from_bytes
    from .figures.cost_map import fig_cost_map
    # the live view's pieces
    from .view import kv_states
    from .view import visible
    from .view import MARK
    # modules a learner uses as a namespace (cost.speedup(alpha, gamma, c), answers.after_round(...))
    from .measure import cost
    from .app import answers

_API = _type_checking_names(__spec__.loader.get_source(__name__))   # name -> module

__all__ = sorted(["say", "check", *_API])


def __getattr__(name: str):
    if name in _API:
        value = _load(_API[name], name)
    else:
        raise AttributeError(f"module 'specnb.course' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__


def say(text: str):
    """Show a sentence made from this cell's measurements as Markdown (the cell's output)."""
    from IPython.display import Markdown
    return Markdown(text)


def _close(mine, answer, rel: float, abs_: float) -> bool:
    if isinstance(answer, (tuple, list)):
        return (isinstance(mine, (tuple, list)) and len(mine) == len(answer)
                and all(_close(m, a, rel, abs_) for m, a in zip(mine, answer)))
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return mine == answer
    if isinstance(mine, bool) or not isinstance(mine, (int, float)):
        return False
    return math.isclose(mine, answer, rel_tol=rel, abs_tol=abs_)


def _unset(x) -> bool:
    return x is None or (isinstance(x, (tuple, list)) and any(_unset(v) for v in x))


def check(prediction, answer, *, names: str = "your prediction", rel: float = 0.0,
          abs: float = 0.0, show=None) -> bool | None:  # noqa: A002 (abs= reads as the tolerance)
    """The exercise format: `check((my_tokens, my_rows), ex1, names="my_tokens, my_rows")`.

    prediction: the learner's value (None, or a tuple holding a None: not written yet).
    answer:     what this run computed; numbers compare within `rel`/`abs`, others exactly.
    show:       how to print the answer once a prediction is in (default: the answer itself).
    Returns None while no prediction is written, else whether it is right; never raises, so a
    wrong guess does not stop Run All."""
    if _unset(prediction):
        print(f"write your prediction into {names} and run the cell again")
        return None
    ok = _close(prediction, answer, rel, abs)
    shown = answer if show is None else show
    print(f"right: {shown}" if ok else f"not quite: you wrote {prediction!r}, this run gives {shown}")
    return ok
