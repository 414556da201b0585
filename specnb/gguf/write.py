"""Writing GGUF files with the gguf package's GGUFWriter: metadata values of the right type,
raw quantized tensor blocks, and the file written atomically (cache.atomic_path).

Used by forge.py (variants of a real model) and testing.py (tiny random models).
"""
from __future__ import annotations

import os

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType, GGUFWriter

from ..cache import atomic_path
from ..errors import GGUFError
from .file import GGUFFile

# keys the writer sets itself
_WRITER_KEYS = ("general.architecture", "GGUF.version", "GGUF.tensor_count", "GGUF.kv_count")


def write_gguf(dst: str | os.PathLike, arch: str, fill) -> str:
    """Open a GGUFWriter for `arch` on a temporary file beside dst, let fill(writer) add the
    metadata and tensors, write everything, then rename it to dst. Returns dst."""
    with atomic_path(dst) as tmp:
        w = GGUFWriter(str(tmp), arch)
        fill(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return os.fspath(dst)


def copy_kv(w: GGUFWriter, g: GGUFFile, override: dict | None = None, skip=()) -> None:
    """Copy g's metadata (except the keys the writer sets itself) with optional overrides."""
    override = dict(override or {})
    for key, val in g.metadata.items():
        if key in _WRITER_KEYS or key in skip:
            continue
        add_kv(w, key, override.pop(key, val), _array_type(g, key))
    for key, val in override.items():
        add_kv(w, key, val, None)


def _array_type(g: GGUFFile, key):
    """The element type of an array value as the source file stored it (None: let gguf pick)."""
    v = g.metadata[key]
    if isinstance(v, np.ndarray):
        return {np.dtype(np.float32): GGUFValueType.FLOAT32, np.dtype(np.int32): GGUFValueType.INT32,
                np.dtype(np.uint32): GGUFValueType.UINT32}.get(v.dtype)
    return None


def add_kv(w: GGUFWriter, key: str, val, sub=None) -> None:
    if isinstance(val, bool):
        w.add_bool(key, val)
    elif isinstance(val, str):
        w.add_string(key, val)
    elif isinstance(val, float):
        w.add_float32(key, val)
    elif isinstance(val, (int, np.integer)):
        w.add_uint32(key, int(val)) if 0 <= val < 2**32 else w.add_int64(key, int(val))
    elif isinstance(val, np.ndarray):
        if sub is not None:
            w.add_key_value(key, val.tolist(), GGUFValueType.ARRAY, sub_type=sub)
        else:
            w.add_array(key, val.tolist())
    elif isinstance(val, list):
        w.add_array(key, val)
    else:
        raise GGUFError(f"cannot write metadata {key}={val!r}")


def add_raw_tensor(w: GGUFWriter, name: str, raw: np.ndarray, shape_ggml, qtype: int) -> None:
    """Add a tensor from its raw bytes: uint8 [n_rows, row_bytes] for quantized types (or the
    float arrays' bytes for F32/F16); shape_ggml in ggml order (n_in first)."""
    if qtype == QT.F32:
        w.add_tensor(name, raw.view(np.float32).reshape(tuple(reversed(shape_ggml))))
    elif qtype == QT.F16:
        w.add_tensor(name, raw.view(np.float16).reshape(tuple(reversed(shape_ggml))))
    else:
        w.add_tensor(name, raw, raw_dtype=QT(qtype))
