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

import importlib as _importlib
import math
from typing import TYPE_CHECKING

# name -> the module that defines it (relative to specnb); modules are loaded on first use
_API = {
    # models: files, forged variants, the vocab gate, the registry
    "Model": "model", "GGUFFile": "gguf.file", "are_compatible": "vocab.gate",
    "SPEC_VOCAB_MAX_SIZE_DIFFERENCE": "vocab.gate", "SPEC_VOCAB_CHECK_START_TOKEN_ID": "vocab.gate",
    "rewrite": "gguf.forge", "truncate_layers": "gguf.forge", "mutate_vocab": "gguf.forge",
    "MUTATIONS": "gguf.forge",
    "REAL_TARGET": "model.registry", "REAL_DRAFT": "model.registry", "describe": "model.registry",
    "model_path": "model.registry", "default_target_path": "model.registry",
    "default_draft_path": "model.registry", "gemma_available": "model.registry",
    "gemma_path": "model.registry",
    # running
    "can_seq_rm": "run.context", "set_threads": "run.context", "Pair": "run.pair",
    # speculation beyond the loop
    "build_speculative": "speculation.speculative", "SPEC_TYPES": "speculation.params",
    "PRIORITY": "speculation.params", "SpeculativeImpl": "speculation.impl",
    "ngram_simple_draft": "speculation.ngram", "rejection_verify": "speculation.verify",
    "speculative_step": "speculation.verify", "AutoDraftLen": "speculation.draft_len",
    "CATCH_UP_WINDOW": "speculation.draft_len",
    # measuring
    "event_stats": "measure.stats", "run_stats": "measure.stats",
    "examined_counts": "measure.stats", "batch_costs": "measure.bench",
    "measure_cost_ratio": "measure.experiments", "sweep_draft_max": "measure.experiments",
    "decode_bytes": "measure.bench", "measure_verify_cost": "measure.verify_cost",
    "verify_verdict": "measure.verify_cost", "flat_but_slow": "measure.verify_cost",
    "row_price": "measure.verify_cost", "verify_cost_from": "measure.verify_cost",
    # the machine's costs, measured once; verdicts from intervals; runs taken in turn
    "machine_costs": "measure.costs", "open_costs": "measure.costs", "format_costs": "measure.costs",
    "interval": "measure.verdict", "said": "measure.verdict", "speedup_verdict": "measure.verdict",
    "compare": "measure.turns", "take_turns": "measure.turns", "chat_ids": "measure.turns",
    "compare_all": "measure.turns",
    # the demo's waterfall: plain decoding, llama.cpp's defaults, then each specnb extension
    "waterfall": "measure.waterfall", "format_waterfall": "app.waterfall_report",
    "ceiling_lines": "app.waterfall_report", "CODE_PROMPTS": "app.demo",
    "LOW_ACCEPTANCE_PROMPT": "app.demo", "RECOMMENDED": "app.demo", "stages": "measure.waterfall",
    "stage_pairs": "measure.waterfall", "spec_flags": "app.flags",
    # what the cost notebook reads off its runs: the map's points and paragraph, run length
    "map_point": "app.cost_story", "map_lines": "app.cost_story", "map_story": "app.cost_story",
    "speedup_over_first": "app.cost_story", "said_verb": "app.cost_story",
    "CODE_EDIT_REQUEST": "measure.spec_bench", "code_edit_prompt": "measure.spec_bench",
    # figures
    "fig_acceptance_per_position": "figures.runs", "fig_tokens_per_call": "figures.runs",
    "fig_round_timeline": "figures.runs", "fig_speedup_vs_draft_max": "figures.runs",
    "fig_rounds_by_impl": "figures.runs",
    "fig_time_per_token": "figures.time_per_token",
    "fig_draft_confidence": "figures.maths", "fig_draft_rows": "figures.maths",
    "fig_alpha_vs_temperature": "figures.maths", "fig_p_q_overlap": "figures.maths",
    "fig_slot_positions": "figures.maths", "tv_distance": "figures.maths",
    "static_figures": "figures.snapshot",
    "round_cost": "figures.cost_map", "engine_speedup": "figures.cost_map",
    "coverage_speedup": "figures.cost_map", "best_speedup": "figures.cost_map",
    "decode_roofline": "figures.cost_map", "streaming_gb_s": "figures.cost_map",
    "break_even_alpha": "figures.cost_map", "c_from_bytes": "figures.cost_map",
    "fig_cost_map": "figures.cost_map",
    # the live view's pieces
    "kv_states": "view", "visible": "view", "MARK": "view",
}
# modules a learner uses as a namespace (cost.speedup(alpha, gamma, c), answers.after_round(...))
_MODULES = {"cost": "measure.cost", "answers": "app.answers"}

if TYPE_CHECKING:       # for editors and type checkers: the same names, imported statically
    from .app.cost_story import map_lines, map_point, map_story, said_verb, speedup_over_first
    from .app.demo import CODE_PROMPTS, LOW_ACCEPTANCE_PROMPT, RECOMMENDED
    from .app.flags import spec_flags
    from .app.waterfall_report import ceiling_lines, format_waterfall
    from .figures.cost_map import (best_speedup, break_even_alpha, c_from_bytes, coverage_speedup,
                                   decode_roofline, engine_speedup, fig_cost_map, round_cost,
                                   streaming_gb_s)
    from .figures.maths import (fig_alpha_vs_temperature, fig_draft_confidence, fig_draft_rows,
                                fig_p_q_overlap, fig_slot_positions, tv_distance)
    from .figures.runs import (fig_acceptance_per_position, fig_round_timeline, fig_rounds_by_impl,
                               fig_speedup_vs_draft_max, fig_tokens_per_call)
    from .figures.snapshot import static_figures
    from .figures.time_per_token import fig_time_per_token
    from .gguf.file import GGUFFile
    from .gguf.forge import MUTATIONS, mutate_vocab, rewrite, truncate_layers
    from .app import answers
    from .measure import cost
    from .measure.bench import batch_costs, decode_bytes
    from .measure.costs import format_costs, machine_costs, open_costs
    from .measure.experiments import measure_cost_ratio, sweep_draft_max
    from .measure.spec_bench import CODE_EDIT_REQUEST, code_edit_prompt
    from .measure.stats import event_stats, examined_counts, run_stats
    from .measure.turns import chat_ids, compare, compare_all, take_turns
    from .measure.verdict import interval, said, speedup_verdict
    from .measure.verify_cost import flat_but_slow, measure_verify_cost, row_price, verify_cost_from, verify_verdict
    from .measure.waterfall import stage_pairs, stages, waterfall
    from .model import Model
    from .model.registry import (REAL_DRAFT, REAL_TARGET, default_draft_path, default_target_path,
                                 describe, gemma_available, gemma_path, model_path)
    from .run.context import can_seq_rm, set_threads
    from .run.pair import Pair
    from .speculation.draft_len import CATCH_UP_WINDOW, AutoDraftLen
    from .speculation.impl import SpeculativeImpl
    from .speculation.ngram import ngram_simple_draft
    from .speculation.params import PRIORITY, SPEC_TYPES
    from .speculation.speculative import build_speculative
    from .speculation.verify import rejection_verify, speculative_step
    from .view import MARK, kv_states, visible
    from .vocab.gate import SPEC_VOCAB_CHECK_START_TOKEN_ID, SPEC_VOCAB_MAX_SIZE_DIFFERENCE, are_compatible

__all__ = sorted(["say", "check", *_API, *_MODULES])


def __getattr__(name: str):
    if name in _MODULES:
        value = _importlib.import_module(f"specnb.{_MODULES[name]}")
    elif name in _API:
        value = getattr(_importlib.import_module(f"specnb.{_API[name]}"), name)
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
