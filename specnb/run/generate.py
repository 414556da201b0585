"""Plain autoregressive decoding: the baseline speculative decoding must reproduce token for token.

`generate` decodes the prompt but its last token in one batch, then one token per decode (the
prompt's last token first), sampling each token with the target's sampler chain. The clock of
generation so starts where speculative-simple's does (it evaluates the prompt's last token as
id_last in its first verification, speculative-simple.cpp:141-150 @34af94cd) and where
llama-bench's tg does (one decode per generated token): plain and speculative decoding of n
tokens are timed over the same n decodes' worth of rows. With batch-invariant kernels the last
prompt row's logits are the same either way, so the tokens are too. As llama-cli and
llama-server do, the prompt's tokens first enter the sampler's penalty window
(common_sampler_accept on every prompt token: examples/main/main.cpp:696 and
examples/server/server.cpp:3084 @c392e50), so repetition penalties see the prompt;
`penalize_prompt=False` leaves them out, as speculative-simple does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .context import Batch, Context
from ..errors import ContextFullError, ParamError, check_param
from .sampling import Sampler


@dataclass
class GenerationResult:
    tokens: list
    text: str
    n_prompt: int
    t_prompt_s: float
    t_gen_s: float
    stop_reason: str          # "eog", "n_predict" or "context_full"
    message: str = ""

    @property
    def tok_per_s(self) -> float:
        return len(self.tokens) / self.t_gen_s if self.t_gen_s > 0 else 0.0


def check_prompt(prompt, ctx: Context) -> list:
    """The prompt as a list of ints; it must hold at least one token and fit in the context."""
    try:
        prompt = [int(t) for t in prompt]
    except (TypeError, ValueError):
        raise ParamError(f"invalid prompt {prompt!r:.80}: expected a sequence of token ids") from None
    if not prompt:
        raise ParamError("the prompt is empty: it needs at least one token")
    if len(prompt) > ctx.n_ctx:
        raise ContextFullError(f"prompt of {len(prompt)} tokens is longer than the context "
                               f"(n_ctx={ctx.n_ctx})")
    bad = [t for t in prompt if not 0 <= t < ctx.model.n_vocab]
    if bad:
        raise ParamError(f"prompt token id {bad[0]} is outside the vocab [0, {ctx.model.n_vocab})")
    return prompt


def check_n_predict(n_predict) -> int:
    check_param(isinstance(n_predict, (int, np.integer)) and not isinstance(n_predict, bool)
                and n_predict >= 1, "n_predict", n_predict, "an integer >= 1")
    return int(n_predict)


def generate(ctx: Context, sampler: Sampler, prompt, n_predict: int, seq: int = 0,
             on_token=None, penalize_prompt: bool = True) -> GenerationResult:
    """Plain decoding of n_predict tokens after `prompt` (stops early at EOG or a full context)."""
    n_predict = check_n_predict(n_predict)
    prompt = check_prompt(prompt, ctx)
    vocab = ctx.model.vocab
    if penalize_prompt:
        for t in prompt:
            sampler.accept(t)
    ctx.seq_rm(seq, -1, -1)
    t0 = time.perf_counter()
    if len(prompt) > 1:
        ctx.decode(Batch.from_tokens(prompt[:-1], 0, seq, "none"))
    t1 = time.perf_counter()
    ctx.decode(Batch().add(prompt[-1], len(prompt) - 1, seq, True))      # generation's first decode
    n_past, out, idx, stop, msg = len(prompt), [], 0, "n_predict", ""
    while True:
        tok = sampler.sample(ctx, idx)
        sampler.accept(tok)
        out.append(tok)
        if on_token:
            on_token(tok)
        if vocab.is_eog(tok):
            stop = "eog"
            break
        if len(out) >= n_predict:
            break
        if n_past >= ctx.n_ctx:
            stop, msg = "context_full", f"stopped: the context is full (n_ctx={ctx.n_ctx})"
            break
        ctx.decode(Batch().add(tok, n_past, seq, True))
        n_past, idx = n_past + 1, 0
    t2 = time.perf_counter()
    return GenerationResult(out, vocab.detokenize(out), len(prompt), t1 - t0, t2 - t1, stop, msg)
