"""From the live view's settings to a run: prompt text and token ids, the loop's parameters,
the contexts' size.

The settings are plain values (what the controls hold): `prompt` is text with one sequence per
non-empty line, where a line "ids: 1 2 3" gives token ids.
"""
from __future__ import annotations

from dataclasses import fields

from ..errors import ParamError
from ..speculation.params import SpecParams
from ..run.rng import LLAMA_DEFAULT_SEED
from ..run.sampling import SamplerParams

MAX_SEQUENCES = 8
# the spec-type control's choices (it also takes any comma-separated list, as --spec-type does)
SPEC_TYPE_CHOICES = ("draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                     "ngram-cache", "ngram-simple,draft-simple", "ngram-map-k,draft-simple",
                     "ngram-mod,draft-simple", "ngram-cache,draft-simple", "none")
# n_ctx=None sizes the contexts: the longest prompt + n_predict + draft-max + N_CTX_SLACK,
# rounded up to a multiple of N_CTX_STEP (and at least N_CTX_STEP).
N_CTX_SLACK = 8
N_CTX_STEP = 64


def prompt_text(prompt) -> str:
    """The prompt control's text for a prompt given as text, texts, token ids or lists of ids."""
    if isinstance(prompt, str):
        return prompt
    prompt = list(prompt)
    if prompt and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    if prompt and not isinstance(prompt[0], (list, tuple)):
        prompt = [prompt]
    return "\n".join("ids: " + " ".join(str(int(t)) for t in p) for p in prompt)


def parse_prompts(text: str, vocab, n_vocab: int) -> list:
    """Token ids per sequence: one per non-empty line, tokenized or given as "ids: ..."."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ParamError("the prompt is empty: write at least one line (one sequence per line)")
    if len(lines) > MAX_SEQUENCES:
        raise ParamError(f"{len(lines)} prompt lines: the live view shows at most "
                         f"{MAX_SEQUENCES} sequences (one per line)")
    out = []
    for ln in lines:
        if ln.strip().startswith("ids:"):
            try:
                ids = [int(t) for t in ln.strip()[4:].replace(",", " ").split()]
            except ValueError:
                raise ParamError(f"invalid prompt line {ln!r}: 'ids:' takes integers") from None
            bad = [t for t in ids if not 0 <= t < n_vocab]
            if bad or not ids:
                raise ParamError(f"invalid prompt line {ln!r}: token ids must be in "
                                 f"[0, {n_vocab})" + ("" if ids else ", at least one"))
            out.append(ids)
        else:
            out.append(vocab.tokenize(ln))
    return out


# the controls' initial values without a `sampling` (LiveView's defaults: greedy, seed 1)
SAMPLING_DEFAULTS = {"temp": 0.0, "top_k": 40, "top_p": 0.95, "seed": 1}
# SamplerParams / SpecParams fields that a control holds (the others pass through as given)
SAMPLING_CONTROLS = {"temp": "temp", "top_k": "top_k", "top_p": "top_p", "seed": "seed"}
SPEC_CONTROLS = {"types": "spec_type", "n_max": "draft_max", "n_min": "draft_min",
                 "p_min": "p_min", "verify": "verify", "ngram_size_n": "ngram_size_n",
                 "ngram_size_m": "ngram_size_m", "schedule": "draft_schedule"}


def _differs(value, default) -> bool:
    if value is default:
        return False
    try:
        return bool(value != default)
    except (TypeError, ValueError):      # e.g. an array of rates: not the default
        return True


def _extra(params, controls) -> dict:
    """The fields of a SpecParams / SamplerParams that no control holds and that differ from
    the dataclass's defaults."""
    base = type(params)()
    return {f.name: getattr(params, f.name) for f in fields(params)
            if f.name not in controls and _differs(getattr(params, f.name), getattr(base, f.name))}


def spec_extra(spec: SpecParams | None) -> dict:
    """SpecParams fields without a control (reeval, synth_rates, ...), where not the default."""
    return {} if spec is None else _extra(spec, SPEC_CONTROLS)


def sampler_extra(sampling: SamplerParams | None) -> dict:
    """SamplerParams fields without a control (min_p, ...), where not the default."""
    return {} if sampling is None else _extra(sampling, SAMPLING_CONTROLS)


def initial_settings(spec: SpecParams | None, sampling: SamplerParams | None) -> dict:
    """The controls' initial values (settings keys) from the SpecParams and SamplerParams."""
    spec = spec if spec is not None else SpecParams()
    out = {SPEC_CONTROLS[k]: getattr(spec, k) for k in SPEC_CONTROLS}
    types = spec.types
    out["spec_type"] = "draft-simple" if types is None else \
        types if isinstance(types, str) else ",".join(str(t) for t in types)
    out.update(SAMPLING_DEFAULTS if sampling is None else
               {SAMPLING_CONTROLS[k]: getattr(sampling, k) for k in SAMPLING_CONTROLS})
    return out


def sampler_params(s: dict, n_seq: int, extra: dict | None = None) -> list:
    """One validated SamplerParams per sequence; sequence i samples with seed + i (with
    LLAMA_DEFAULT_SEED, each one a random seed)."""
    seed = int(s["seed"])
    return [SamplerParams(**(extra or {}), temp=float(s["temp"]), top_k=int(s["top_k"]),
                          top_p=float(s["top_p"]),
                          seed=seed if seed == LLAMA_DEFAULT_SEED else seed + i).validate()
            for i in range(n_seq)]


def spec_params(s: dict, extra: dict | None = None) -> SpecParams:
    """SpecParams from the controls (--spec-type, --draft-max/min/p-min, the n-gram sizes, the
    schedule) and the fields without a control (`extra`: reeval, synth_rates, ...)."""
    return SpecParams(**(extra or {}), types=s["spec_type"].strip(), n_max=s["draft_max"],
                      n_min=s["draft_min"], p_min=float(s["p_min"]), verify=s["verify"],
                      ngram_size_n=s["ngram_size_n"], ngram_size_m=s["ngram_size_m"],
                      schedule=s.get("draft_schedule", "fixed")).validate()


def context_size(prompts: list, n_predict, draft_max, n_ctx: int | None = None) -> int:
    """n_ctx as given, or enough for the longest prompt, n_predict and one full draft."""
    if n_ctx is not None:
        return n_ctx
    need = max(len(p) for p in prompts) + max(int(n_predict), 1) + max(int(draft_max), 0) + N_CTX_SLACK
    return max(N_CTX_STEP, -(-need // N_CTX_STEP) * N_CTX_STEP)
