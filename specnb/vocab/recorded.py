"""A vocab as the gate reads it, recorded from a model's file into a small JSON file.

The vocab gate (vocab/gate.py, common_speculative_are_compatible) reads five things of a vocab:
its type, BOS and EOS (ids and add flags), its size, and the token texts from
SPEC_VOCAB_CHECK_START_TOKEN_ID on, as far as the first one that differs. A RecordedVocab keeps
exactly that of a model that may not be installed: the settings, the first `n_head` token texts,
and, for each named vocab it was recorded against, the ids whose text is the same in both (the
text check's whole answer). So the gate's report on that model is computed by today's gate from
the real file's data, not typed by hand, and a picture of where two vocabs agree can be drawn,
from a file of a few kilobytes instead of the model's 262 144 token texts.

    rec = RecordedVocab.from_vocab(vocab, "gemma-3-270m-q4_k_m.gguf (sha256 ...)", against={"smollm2-135m": v})
    rec.save(path); rec = RecordedVocab.load(path)
    are_compatible(target_vocab, rec)     # the report; a text beyond the head is a VocabError

`rec.tokens` holds the head only: a slice of it is as long as the recorded part (so it never
compares equal to a whole vocab's slice), and an id beyond the head raises VocabError naming it,
so a report that needed more than was recorded fails instead of guessing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import VocabError
from .gate import SPEC_VOCAB_CHECK_START_TOKEN_ID

N_HEAD = 32                     # token texts kept from id 0: the gate compares from id 5 to the
                                # first difference, at id 5 for two families


def same_text_ids(a, b) -> list:
    """The ids from SPEC_VOCAB_CHECK_START_TOKEN_ID to the smaller vocab's end whose token text is
    the same in both (`a`, `b`: token texts by id): the gate's text check, every id of it."""
    return [i for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(len(a), len(b))) if a[i] == b[i]]


class TokenHead:
    """The first recorded token texts of a vocab of n_vocab tokens (see the module docstring)."""

    def __init__(self, head, n_vocab: int, source: str):
        self.head, self.n_vocab, self.source = tuple(head), int(n_vocab), source

    def __len__(self) -> int:
        return self.n_vocab

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self.n_vocab)
            return list(self.head[start:min(stop, len(self.head)):step])
        i = int(i) + (self.n_vocab if int(i) < 0 else 0)
        if not 0 <= i < self.n_vocab:
            raise IndexError(f"token id {i} outside a vocab of {self.n_vocab}")
        if i >= len(self.head):
            raise VocabError(f"the recorded vocab of {self.source} holds the texts of ids 0..{len(self.head) - 1} "
                             f"only; token {i} was asked for: install the model to compare it")
        return self.head[i]


@dataclass
class RecordedVocab:
    """What the vocab gate reads of one model's vocab (see the module docstring)."""
    source: str                     # the file it was recorded from, with its sha256
    type: str                       # "spm", "bpe", ...
    pre: str
    n_vocab: int
    bos_id: int
    eos_id: int
    add_bos: bool
    add_eos: bool
    head: tuple                     # the texts of ids 0 .. len(head) - 1
    same_text: dict = field(default_factory=dict)     # name -> same_text_ids against that vocab

    @property
    def tokens(self) -> TokenHead:
        return TokenHead(self.head, self.n_vocab, self.source)

    def __len__(self) -> int:
        return self.n_vocab

    def __repr__(self) -> str:
        return (f"RecordedVocab({self.type}, pre={self.pre!r}, n_vocab={self.n_vocab}, bos={self.bos_id}, "
                f"eos={self.eos_id}, add_bos={self.add_bos}; the first {len(self.head)} token texts, "
                f"recorded from {self.source})")

    @classmethod
    def from_vocab(cls, vocab, source: str, against: dict | None = None, n_head: int = N_HEAD) -> "RecordedVocab":
        """Record `vocab` (a loaded Vocab); against: name -> another Vocab, for same_text."""
        return cls(source, vocab.type, vocab.pre, int(vocab.n_vocab), int(vocab.bos_id), int(vocab.eos_id),
                   bool(vocab.add_bos), bool(vocab.add_eos), tuple(vocab.tokens[:n_head]),
                   {name: same_text_ids(other.tokens, vocab.tokens) for name, other in (against or {}).items()})

    def as_json(self) -> dict:
        return {"source": self.source, "type": self.type, "pre": self.pre, "n_vocab": self.n_vocab,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "add_bos": self.add_bos, "add_eos": self.add_eos,
                "head": list(self.head), "same_text": {k: list(v) for k, v in self.same_text.items()}}

    @classmethod
    def from_json(cls, v: dict) -> "RecordedVocab":
        try:
            return cls(str(v["source"]), str(v["type"]), str(v["pre"]), int(v["n_vocab"]), int(v["bos_id"]),
                       int(v["eos_id"]), bool(v["add_bos"]), bool(v["add_eos"]), tuple(str(t) for t in v["head"]),
                       {str(k): [int(i) for i in ids] for k, ids in v.get("same_text", {}).items()})
        except (KeyError, TypeError, ValueError) as e:
            raise VocabError(f"a recorded vocab needs source, type, pre, n_vocab, bos_id, eos_id, add_bos, "
                             f"add_eos and head: {e!r}") from e

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.as_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path) -> "RecordedVocab":
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
