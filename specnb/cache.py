"""specnb's cache directory: where it is, sha256 verdicts, and the one atomic-write helper.

Everything specnb writes (assembled and forged models, checksum verdicts, Numba's compiled
kernels) goes into this folder and nowhere else: $SPECNB_CACHE_DIR, else
$XDG_CACHE_HOME/specnb, else ~/.cache/specnb.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
from pathlib import Path

VERDICTS_FILE = "verified.json"


def cache_dir(create: bool = True) -> Path:
    """specnb's own cache folder (created on first use unless create=False)."""
    d = os.environ.get("SPECNB_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "specnb")
    p = Path(d)
    if create:
        p.mkdir(parents=True, exist_ok=True)
    return p


# ---- atomic writes --------------------------------------------------------------------------
def _temp_name(dst: Path) -> Path:
    # pid (so a stale file from a dead process can be recognised) + a random tag (so two
    # threads or two kernels of one notebook server never share a temporary file)
    return dst.with_name(f".{dst.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_stale_temps(dst: str | os.PathLike) -> int:
    """Remove temporary files left beside dst by processes that no longer run (a killed
    assembly leaves one as large as the model). Returns how many were removed."""
    dst = Path(dst)
    pattern = re.compile(rf"^\.{re.escape(dst.name)}\.(\d+)\.[0-9a-f]+\.tmp$")
    n = 0
    if not dst.parent.is_dir():
        return 0
    for e in os.scandir(dst.parent):
        m = pattern.match(e.name)
        if m and not _pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.remove(e.path)
                n += 1
    return n


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True         # exists but not ours, or unknowable: leave its file alone
    return True


@contextlib.contextmanager
def atomic_path(dst: str | os.PathLike):
    """Yield a temporary path beside dst; when the block ends normally the file written there
    replaces dst in one rename (readers see the old file or the whole new one, never a part);
    when it raises (or is interrupted), the temporary file is removed and dst is untouched."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(dst)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


# ---- sha256 ---------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike, on_bytes=None) -> str:
    """The file's sha256; on_bytes(n) is called after each chunk read (for a progress bar)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return h.hexdigest()


def _verdict_key(path: str) -> str:
    st = os.stat(path)
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


def _read_verdicts() -> dict:
    try:
        seen = json.loads((cache_dir() / VERDICTS_FILE).read_text())
        return seen if isinstance(seen, dict) else {}
    except (OSError, ValueError):
        return {}           # missing or damaged: everything is rechecked


def remember_verified(path: str | os.PathLike, sha256: str) -> None:
    """Record that the file as it is now (path, size, mtime) has this sha256."""
    path = os.path.abspath(path)
    seen = _read_verdicts()
    seen[_verdict_key(path)] = sha256
    write_bytes_atomic(cache_dir() / VERDICTS_FILE, json.dumps(seen, indent=1).encode())


def is_verified(path: str | os.PathLike, sha256: str, on_bytes=None) -> bool:
    """Does the file have this sha256? Hashed once; a good verdict is remembered, keyed by
    (path, size, mtime), so a later call on the unchanged file reads nothing."""
    path = os.path.abspath(path)
    if _read_verdicts().get(_verdict_key(path)) == sha256:
        return True
    if sha256_file(path, on_bytes) != sha256:
        return False
    remember_verified(path, sha256)
    return True
