"""Gemma 3 270M (the optional `gemma` extra): a real model of another family.

Its vocab (SentencePiece-style, 262k tokens) is what the vocab gate refuses against SmolLM2's
BPE vocab. specnb only reads its metadata; running Gemma is not supported. It is the registry's
`gemma3-270m`: four chunk packages assembled once into specnb's cache directory (registry.py).
"""
from __future__ import annotations

from .registry import check_parts, entry, model_path

NAME = "gemma3-270m"


def gemma_available() -> bool:
    """Are its packages installed (so that gemma_path() can assemble it)?"""
    return check_parts(entry(NAME)).ok


def gemma_path() -> str:
    """Path of the assembled Gemma 3 270M GGUF in specnb's cache (assembled on first use)."""
    return model_path(NAME)
