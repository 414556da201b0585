"""From the live view's settings to a run: prompt text and token ids, the loop's parameters,
the contexts' size.

The settings are plain values (what the controls hold): `prompt` is text with one sequence per
non-empty line, where a line "ids: 1 2 3" gives token ids.
"""
from __future__ import annotations

from ..errors import ParamError
from ..spec.speculative import SpecParams
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


def sampler_params(s: dict, n_seq: int, extra: dict | None = None) -> list:
    """One validated SamplerParams per sequence; sequence i samples with seed + i."""
    return [SamplerParams(temp=float(s["temp"]), top_k=int(s["top_k"]), top_p=float(s["top_p"]),
                          seed=int(s["seed"]) + i, **(extra or {})).validate() for i in range(n_seq)]


def spec_params(s: dict, reeval: bool, synth_rates=None, synth_len=None) -> SpecParams:
    """SpecParams from the controls: --spec-type, --draft-max/min/p-min, the n-gram sizes."""
    return SpecParams(types=s["spec_type"].strip(), n_max=s["draft_max"], n_min=s["draft_min"],
                      p_min=float(s["p_min"]), reeval=reeval, verify=s["verify"],
                      synth_rates=synth_rates, synth_len=synth_len,
                      ngram_size_n=s["ngram_size_n"], ngram_size_m=s["ngram_size_m"],
                      schedule=s.get("draft_schedule", "fixed")).validate()


def context_size(prompts: list, n_predict, draft_max, n_ctx: int | None = None) -> int:
    """n_ctx as given, or enough for the longest prompt, n_predict and one full draft."""
    if n_ctx is not None:
        return n_ctx
    need = max(len(p) for p in prompts) + max(int(n_predict), 1) + max(int(draft_max), 0) + N_CTX_SLACK
    return max(N_CTX_STEP, -(-need // N_CTX_STEP) * N_CTX_STEP)
