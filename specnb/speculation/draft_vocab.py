"""A draft vocabulary: the draft model scores only its most frequent tokens (FR-Spec).

Zhao et al., "FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked
Speculative Sampling" (ACL 2025): a small draft model spends much of each step in its output
head (qwen2.5-coder-0.5b: 145 MB of its 392 MB per token, 151,936 rows), yet nearly every token
it gets right is a common one. Restricting the head to the N highest-ranked tokens cuts those
bytes by about n_vocab / N; the target still verifies over its whole vocabulary, so the output
is exactly plain decoding's. A token outside the set is a position the draft cannot get right.

The ranking comes from the GGUF file's own tables, offline:
  - BPE (tokenizer.ggml.merges): the merge rules in the order BPE learned them, each the most
    frequent pair of its corpus at the time, so a token made by an early merge is a frequent one.
    The tokens no rule makes (the 256 byte symbols) come first;
  - SentencePiece (tokenizer.ggml.scores): the scores, highest first (a unigram model's log
    probabilities, or a BPE-SPM vocab's negated merge ranks).
Over Python's standard library the first 32k Qwen2.5 tokens in merge order cover 94.0% of the
tokens, the first 64k 97.9%. Control and user-defined tokens (end of turn, FIM markers) are
always kept, and so are the prompt's own tokens (`DraftSimple.begin`).

    token_rank(vocab)                  token ids, the most frequent first (the normal tokens)
    draft_output_ids(vocab, n, extra)  the ids the draft head keeps, ascending

The draft context computes logits for those rows only (`Context.set_output_ids`); its sampler
maps them back to the real ids, so top-k, p_min and every draft token are real token ids. With
DEFAULT_DRAFT_VOCAB = 32768 the 0.5B's head reads 31 MB instead of 145 MB per token.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..errors import ParamError

DEFAULT_DRAFT_VOCAB = 32768

# llama_token_type values (vocab/__init__.py): a draft may need these whatever their rank
_ALWAYS_TYPES = (3, 4)          # CONTROL, USER_DEFINED
_NORMAL_TYPES = (1, 6)          # NORMAL, BYTE


_RANKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def token_rank(vocab) -> np.ndarray:
    """The normal tokens' ids, the most frequent first, from the vocab's own tables (above)."""
    if vocab not in _RANKS:
        _RANKS[vocab] = _rank(vocab)
    return _RANKS[vocab]


def _rank(vocab) -> np.ndarray:
    n = vocab.n_vocab
    normal = np.isin(np.asarray(vocab.token_types), _NORMAL_TYPES)
    if vocab.type == "bpe" and vocab.merges:
        # each rule "a b" makes the token "ab"; its rank is the rule's index
        made = np.full(n, -1, dtype=np.int64)
        get = {t: i for i, t in enumerate(vocab.tokens)}.get
        for i, rule in enumerate(vocab.merges):
            a, _, b = rule.partition(" ")
            tid = get(a + b)
            if tid is not None and made[tid] < 0:
                made[tid] = i
        key = np.where(made >= 0, made, -1).astype(np.float64)   # rule-less tokens first
        order = np.lexsort((np.arange(n), key))
    elif vocab.scores is not None:
        order = np.lexsort((np.arange(n), -np.asarray(vocab.scores, np.float64)))
    else:
        order = np.arange(n)
    return order[normal[order]]


def draft_output_ids(vocab, n: int, extra=()) -> np.ndarray | None:
    """The token ids a draft head restricted to n tokens keeps, ascending: the n highest-ranked
    normal tokens, every control and user-defined token, and `extra` (the prompt's tokens).
    None when that is the whole vocabulary (n = 0 or n >= n_vocab)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ParamError(f"draft_vocab={n!r}: expected an integer >= 0 (0: the whole vocabulary)")
    if n == 0 or n >= vocab.n_vocab:
        return None
    keep = np.zeros(vocab.n_vocab, dtype=np.bool_)
    keep[token_rank(vocab)[:n]] = True
    keep[np.isin(np.asarray(vocab.token_types), _ALWAYS_TYPES)] = True
    extra = np.asarray(list(extra), dtype=np.int64)
    if extra.size:
        if extra.min() < 0 or extra.max() >= vocab.n_vocab:
            bad = extra[(extra < 0) | (extra >= vocab.n_vocab)][0]
            raise ParamError(f"draft vocabulary: token id {bad} is outside [0, {vocab.n_vocab})")
        keep[extra] = True
    if keep.all():
        return None
    return np.nonzero(keep)[0]
