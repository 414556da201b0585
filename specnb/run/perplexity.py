"""Perplexity with llama-perplexity's protocol (examples/perplexity/perplexity.cpp, perplexity()).

- tokenize the whole text (add_special on, parse_special off); one trailing newline of a file
  is stripped first, as llama.cpp's -f does;
- cut it into n_chunk = n_tokens // n_ctx non-overlapping chunks of n_ctx tokens;
- if the vocab adds BOS, the first token of each chunk is replaced by BOS (not prepended);
- each chunk is decoded from position 0 on an empty cache;
- the tokens at positions first+1 .. n_ctx-1 (first = n_ctx/2) are scored from the logits one
  position earlier: n_ctx - 1 - first tokens per chunk;
- the running estimate after chunk k is exp(mean NLL so far).
"""
from __future__ import annotations

import math
import time

import numpy as np

from .context import Batch, Context
from ..errors import ParamError, check_param
from ..vocab.textio import strip_final_newline


def perplexity(model, text: str, n_ctx: int = 512, backend: str = "cpu", n_threads=None,
               on_chunk=None, max_chunks: int | None = None, activations: str | None = None) -> dict:
    check_param(isinstance(n_ctx, int) and n_ctx >= 16, "n_ctx", n_ctx, "an integer >= 16")
    text = strip_final_newline(text)     # a str, or a file's bytes (specnb/vocab/textio.py)
    vocab = model.vocab
    tokens = vocab.tokenize(text, add_special=True, parse_special=False)
    n_chunk = len(tokens) // n_ctx
    if max_chunks is not None:
        check_param(isinstance(max_chunks, int) and max_chunks >= 1, "chunks", max_chunks,
                    "an integer >= 1")
        n_chunk = min(n_chunk, max_chunks)
    if n_chunk < 1:
        raise ParamError(f"perplexity: the text has {len(tokens)} tokens, fewer than one chunk "
                         f"of n_ctx={n_ctx} (need at least {n_ctx})")
    ctx = Context(model, n_ctx=n_ctx, backend=backend, n_threads=n_threads, activations=activations)
    first = n_ctx // 2
    nlls = []
    running = []
    t0 = time.perf_counter()
    for k in range(n_chunk):
        chunk = list(tokens[k * n_ctx:(k + 1) * n_ctx])
        if vocab.add_bos:
            chunk[0] = vocab.bos_id
        ctx.clear()
        b = Batch()
        for i, t in enumerate(chunk):
            b.add(t, i, 0, i >= first)
        logits = ctx.decode(b)                       # rows for positions first .. n_ctx-1
        for j in range(first, n_ctx - 1):
            row = logits[j - first].astype(np.float64)
            m = row.max()
            nlls.append(m + math.log(np.exp(row - m).sum()) - row[chunk[j + 1]])
        running.append(math.exp(float(np.mean(nlls))))
        if on_chunk:
            on_chunk(k + 1, n_chunk, running[-1])
    dt = time.perf_counter() - t0
    nll = np.asarray(nlls)
    mean = nll.mean()
    ppl = math.exp(mean)
    stderr = ppl * math.sqrt(max((nll ** 2).mean() - mean ** 2, 0.0) / (len(nll) - 1))
    return {"ppl": ppl, "ppl_stderr": stderr, "running": running, "n_chunks": n_chunk,
            "n_ctx": n_ctx, "n_tokens": len(tokens), "n_scored": len(nll),
            "seconds": dt, "tokens_per_s": n_chunk * n_ctx / dt}
