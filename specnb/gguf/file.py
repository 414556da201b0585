"""Read a GGUF file: metadata, tensor table and memory-mapped tensor bytes.

Mirrors what llama.cpp's `gguf_init_from_file` does: parse the header, the key/value
metadata and the tensor infos, then map the data section. Tensors are never copied or
dequantized here; `GGUFFile.tensor_bytes(name)` hands back a read-only `uint8[n_rows,
row_bytes]` view of the quantized blocks straight out of the memory map.

The parser is our own (the `gguf` package's reader builds a Python object per array
element and takes seconds on a 49k-token vocab); the type tables, block sizes and the
quantizers come from the `gguf` package. Every count and size in the header is checked
against the bytes actually left in the file *before* anything is allocated, so a hostile
or truncated file gives a `GGUFError` naming the problem, never a MemoryError.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import GGUFError

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_KEY_LEN = 65536
MAX_NAME_LEN = 65536
# Far above any real model (a 70B llama has ~720 tensors and ~40 keys) yet low enough that a
# forged header cannot make the pure-Python parser spend more than about a second on entries
MAX_TENSORS = 1 << 16
MAX_KV = 1 << 16
MAX_STRINGS = 1 << 21   # a string array (a vocab's tokens or merges)
# specnb's own key: the tensor types (names) a file asks the CPU backend to interleave 16 rows at
# a time beyond its default ones (run/backend_cpu.repacked_qtypes); forge.requantize writes it
REPACK_KEY = "specnb.repack"
# specnb's own key: the absolute path of the file a cache copy was forged from
# (registry.requantized_draft), so a copy whose source is gone can be recognised and removed
SOURCE_KEY = "specnb.forged_from"

# gguf_type ids -> (struct format, size); 8 = string, 9 = array
_SCALAR = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4),
           5: ("<i", 4), 6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8),
           12: ("<d", 8)}
_NP_DTYPE = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32,
             5: np.int32, 6: np.float32, 7: np.bool_, 10: np.uint64, 11: np.int64,
             12: np.float64}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]      # ggml order: shape[0] is the contiguous (row) length
    qtype: int                  # GGMLQuantizationType value
    offset: int                 # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        try:
            return GGMLQuantizationType(self.qtype).name
        except ValueError:
            return f"type#{self.qtype}"

    @property
    def n_rows(self) -> int:
        n = 1
        for d in self.shape[1:]:
            n *= d
        return n


class _Cursor:
    """Bounds-checked little-endian reader over the mapped file."""

    def __init__(self, buf, path: str, raw=None):
        self.buf, self.pos, self.size, self.path = buf, 0, len(buf), path
        # slicing the mmap itself gives bytes in one step (a memoryview slice is an extra
        # object per string: twice as slow over a 49k-token vocab)
        self.raw = buf if raw is None else raw

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(f"{self.path}: truncated or corrupt GGUF: {what} needs {n} bytes "
                            f"at offset {self.pos}, file has {self.size}")

    def scalar(self, t: int, what: str):
        fmt, n = _SCALAR[t]
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.scalar(4, what)

    def u64(self, what: str) -> int:
        return self.scalar(10, what)

    def string(self, what: str, max_len: int | None = None) -> str:
        n = self.u64(what + " length")
        if max_len is not None and n > max_len:
            raise GGUFError(f"{self.path}: {what} claims length {n}, more than {max_len}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")

    def value(self, t: int, key: str):
        if t in _SCALAR:
            return self.scalar(t, f"value of {key}")
        if t == _STRING:
            return self.string(f"value of {key}")
        if t == _ARRAY:
            et = self.u32(f"array type of {key}")
            n = self.u64(f"array length of {key}")
            if et in _SCALAR:
                size = _SCALAR[et][1]
                if n > (self.size - self.pos) // size:
                    raise GGUFError(f"{self.path}: array {key} claims {n} elements of {size} "
                                    f"bytes, more than the {self.size - self.pos} bytes left")
                arr = np.frombuffer(self.buf, dtype=_NP_DTYPE[et], count=n, offset=self.pos).copy()
                self.pos += n * size
                return arr
            if et == _STRING:
                if n > MAX_STRINGS:
                    raise GGUFError(f"{self.path}: array {key} claims {n} strings; specnb reads at "
                                    f"most {MAX_STRINGS} (the largest real vocabs hold ~262k)")
                if n > (self.size - self.pos) // 8:   # each string needs at least its length
                    raise GGUFError(f"{self.path}: array {key} claims {n} strings, more than "
                                    f"the {self.size - self.pos} bytes left can hold")
                return self._string_array(n, key)
            raise GGUFError(f"{self.path}: array {key} has unsupported element type {et}")
        raise GGUFError(f"{self.path}: key {key} has unknown value type {t}")

    def _string_array(self, n: int, key: str) -> list[str]:
        buf, raw, pos, size = self.buf, self.raw, self.pos, self.size
        unpack = struct.Struct("<Q").unpack_from
        out = [None] * n
        for i in range(n):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, f"string {i} of {key}")
            (ln,) = unpack(buf, pos)
            pos += 8
            if ln > size - pos:
                self.pos = pos
                self.need(ln, f"string {i} of {key}")
            out[i] = str(raw[pos:pos + ln], "utf-8", "surrogateescape")
            pos += ln
        self.pos = pos
        return out


class GGUFFile:
    """A parsed GGUF: `metadata` (key -> value), `tensors` (name -> TensorInfo), mmap'd data."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise GGUFError(f"model file not found: {self.path}")
        if os.path.isdir(self.path):
            raise GGUFError(f"model path is a directory, not a GGUF file: {self.path}")
        try:
            size = os.path.getsize(self.path)
            if size < 24:
                raise GGUFError(f"{self.path}: not a GGUF file (only {size} bytes)")
            with open(self.path, "rb") as f:
                magic = f.read(4)
                if magic != GGUF_MAGIC:
                    raise GGUFError(f"{self.path}: not a GGUF file (magic {magic!r}, "
                                    f"expected b'GGUF')")
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:    # unreadable, or not a regular file that can be mapped
            raise GGUFError(f"{self.path}: cannot read the model file: {e.strerror or e}") from None
        self._buf = memoryview(self._mm)
        self.file_size = size
        self.metadata: dict = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()

    def _parse(self) -> None:
        c = _Cursor(self._buf, self.path, self._mm)
        c.pos = 4
        self.version = c.u32("version")
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: unsupported GGUF version {self.version} (expected 2 or 3)")
        n_tensors = c.u64("tensor count")
        n_kv = c.u64("metadata count")
        # each kv needs >= 8 (key len) + 4 (type) + 1 byte; each tensor info >= 8+4+8+4+8
        if n_kv > self.file_size // 13:
            raise GGUFError(f"{self.path}: header claims {n_kv} metadata entries, impossible in "
                            f"a file of {self.file_size} bytes")
        if n_tensors > self.file_size // 32:
            raise GGUFError(f"{self.path}: header claims {n_tensors} tensors, impossible in a "
                            f"file of {self.file_size} bytes")
        if n_kv > MAX_KV:
            raise GGUFError(f"{self.path}: header claims {n_kv} metadata entries; specnb reads "
                            f"at most {MAX_KV}")
        if n_tensors > MAX_TENSORS:
            raise GGUFError(f"{self.path}: header claims {n_tensors} tensors; specnb reads at "
                            f"most {MAX_TENSORS}")
        for _ in range(n_kv):
            key = c.string("metadata key", MAX_KEY_LEN)
            t = c.u32(f"type of {key}")
            if key in self.metadata:
                raise GGUFError(f"{self.path}: duplicate metadata key {key!r}")
            self.metadata[key] = c.value(t, key)
        infos = []
        for i in range(n_tensors):
            name = c.string(f"name of tensor {i}", MAX_NAME_LEN)
            n_dims = c.u32(f"n_dims of {name}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFError(f"{self.path}: tensor {name} has {n_dims} dimensions (1..{MAX_DIMS})")
            shape = tuple(c.u64(f"shape of {name}") for _ in range(n_dims))
            qtype = c.u32(f"type of {name}")
            offset = c.u64(f"offset of {name}")
            infos.append((name, shape, qtype, offset))
        align = self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"{self.path}: general.alignment={align!r} is not a power of two")
        data_start = (c.pos + align - 1) // align * align
        self.data_offset = data_start
        for name, shape, qtype, offset in infos:
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor name {name!r}")
            if any(d <= 0 or d > 1 << 40 for d in shape):
                raise GGUFError(f"{self.path}: tensor {name} has impossible shape {list(shape)}")
            try:
                block, bsize = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
            except (ValueError, KeyError):
                raise GGUFError(f"{self.path}: tensor {name} has unknown type id {qtype}") from None
            if shape[0] % block:
                raise GGUFError(f"{self.path}: tensor {name} row length {shape[0]} is not a "
                                f"multiple of its block size {block}")
            n_el = 1
            for d in shape:
                n_el *= d
            nbytes = n_el // block * bsize
            start = data_start + offset
            if offset % align or start + nbytes > self.file_size:
                raise GGUFError(f"{self.path}: tensor {name} data [{start}, {start + nbytes}) lies "
                                f"outside the file ({self.file_size} bytes) or is misaligned")
            self.tensors[name] = TensorInfo(name, shape, qtype, start, nbytes)

    def tensor_bytes(self, name: str) -> np.ndarray:
        """Read-only uint8[n_rows, row_bytes] view of a tensor's blocks (no copy)."""
        t = self.tensors[name]
        arr = np.frombuffer(self._buf, dtype=np.uint8, count=t.nbytes, offset=t.offset)
        return arr.reshape(t.n_rows, t.nbytes // t.n_rows)

    def get(self, key: str, default=None):
        return self.metadata.get(key, default)

    def close(self) -> None:
        self.tensors = {}
        try:
            self._buf.release()
            self._mm.close()
        except BufferError:
            pass  # views are still alive; the map closes when they go

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, v{self.version}, {len(self.metadata)} keys, "
                f"{len(self.tensors)} tensors)")
