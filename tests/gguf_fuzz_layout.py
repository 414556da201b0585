"""The GGUF fuzzer's model of a file (tests/test_fuzz_gguf.py): each seed's layout parsed down
to its fields (the offset, width and kind of every count, length, type id and offset), a writer
that serializes key/values and tensor infos back into a file, and the hypothesis strategies that
mutate seeds: one field set to a boundary value, byte edits, structural rebuilds with values of
the wrong kind, random forged files. The runner, the properties and the tests stay in the test
module; this one knows only the format.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from hypothesis import strategies as st

# gguf value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
        U64: "<Q", I64: "<q", F64: "<d"}
_INT_RANGE = {U8: (0, 2**8 - 1), I8: (-2**7, 2**7 - 1), U16: (0, 2**16 - 1),
              I16: (-2**15, 2**15 - 1), U32: (0, 2**32 - 1), I32: (-2**31, 2**31 - 1),
              BOOL: (0, 255), U64: (0, 2**64 - 1), I64: (-2**63, 2**63 - 1)}
ABSURD = [0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**40 + 1, 2**62, 2**63 - 1, 2**63,
          2**64 - 1]


# ---- the seeds' layout ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    kind: str       # magic version count key_len kv_type str_len arr_type arr_len elem_len
                    # scalar name_len n_dims dim ttype toffset
    offset: int
    width: int      # bytes
    label: str
    vtype: int = U64    # for "scalar": the gguf type of the value
    orig: int | float = 0


@dataclass
class KV:
    key: bytes
    vtype: int
    value: bytes    # the serialized value (for arrays: element type, length, elements)


@dataclass
class TInfo:
    name: bytes
    dims: list
    qtype: int
    offset: int


@dataclass
class Seed:
    name: str
    data: bytes
    fields: list
    boundaries: list        # (offset, label) of every section / entry / field boundary
    kvs: list
    tinfos: list
    version: int
    align: int
    tinfo_end: int
    data_start: int

    def __repr__(self) -> str:     # hypothesis prints the test's arguments on failure
        return f"Seed({self.name!r}, {len(self.data)} bytes)"

    def sub(self, kinds):
        return [f for f in self.fields if f.kind in kinds]


def parse_layout(name: str, data: bytes, data_start: int | None = None) -> Seed:
    """Walk a (valid) GGUF and record the offset of every field; independent of specnb's parser."""
    fields, bounds, kvs, tinfos = [], [], [], []
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def fld(kind, width, label, vtype=U64, orig=0):
        fields.append(Field(kind, pos, width, label, vtype, orig))

    def mark(label):
        bounds.append((pos, label))

    mark("start")
    fld("magic", 4, "magic")
    pos += 4
    mark("after magic")
    fld("version", 4, "version")
    version = take("<I")
    mark("after version")
    fld("count", 8, "tensor count")
    n_t = take("<Q")
    fld("count", 8, "kv count")
    n_kv = take("<Q")
    mark("after counts")
    align = 32
    for i in range(n_kv):
        mark(f"kv[{i}]")
        fld("key_len", 8, f"kv[{i}] key length")
        n = take("<Q")
        key = data[pos:pos + n]
        pos += n
        k = key.decode(errors="replace")
        mark(f"kv[{i}] {k} after key")
        fld("kv_type", 4, f"{k} type")
        t = take("<I")
        mark(f"{k} value")
        v0 = pos
        if t in _FMT:
            val = struct.unpack_from(_FMT[t], data, pos)[0]
            fld("scalar", struct.calcsize(_FMT[t]), f"{k} value", t, val)
            pos += struct.calcsize(_FMT[t])
            if k == "general.alignment":
                align = val
        elif t == STRING:
            fld("str_len", 8, f"{k} string length")
            n = take("<Q")
            pos += n
        else:
            assert t == ARRAY
            fld("arr_type", 4, f"{k} array type")
            et = take("<I")
            fld("arr_len", 8, f"{k} array length")
            n = take("<Q")
            mark(f"{k} elements")
            if et == STRING:
                for j in range(n):
                    if j < 8 or j >= n - 4 or j % 4099 == 0:
                        fld("elem_len", 8, f"{k}[{j}] length")
                    pos += 8 + struct.unpack_from("<Q", data, pos)[0]
            else:
                pos += n * struct.calcsize(_FMT[et])
        kvs.append(KV(key, t, data[v0:pos]))
    mark("end of kvs")
    for i in range(n_t):
        mark(f"tensor info {i}")
        fld("name_len", 8, f"tensor {i} name length")
        n = take("<Q")
        nm = data[pos:pos + n]
        pos += n
        s = nm.decode(errors="replace")
        fld("n_dims", 4, f"{s} n_dims")
        nd = take("<I")
        dims = []
        for d in range(nd):
            fld("dim", 8, f"{s} dim {d}", orig=struct.unpack_from("<Q", data, pos)[0])
            dims.append(take("<Q"))
        fld("ttype", 4, f"{s} type")
        qt = take("<I")
        off = struct.unpack_from("<Q", data, pos)[0]
        fld("toffset", 8, f"{s} offset", orig=off)
        pos += 8
        tinfos.append(TInfo(nm, dims, qt, off))
    mark("end of tensor infos")
    tinfo_end = pos
    if data_start is None:
        data_start = (pos + align - 1) // align * align
    if data_start <= len(data):
        bounds.append((data_start, "data section"))
        # each tensor's data (only the first 64 to keep the list short on real files)
        for t in tinfos[:64]:
            if data_start + t.offset <= len(data):
                bounds.append((data_start + t.offset, f"data of {t.name.decode(errors='replace')}"))
    bounds.append((len(data), "end of file"))
    return Seed(name, data, fields, sorted(set(bounds)), kvs, tinfos, version, align,
                tinfo_end, data_start)


def cut_points(seed: Seed) -> list:
    """Every boundary, one byte either side of it and the middle of every field."""
    pts = set()
    for b, _ in seed.boundaries:
        pts.update((b - 1, b, b + 1))
    for f in seed.fields:
        pts.add(f.offset + f.width // 2)
    return sorted(p for p in pts if 0 <= p <= len(seed.data))


# ---- serialization (for the rebuild and forged strategies) ----------------------------------
def _str(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def build_gguf(version: int, kvs: list, tinfos: list, data_section: bytes,
               align: int = 32) -> bytes:
    """Serialize a GGUF: header, key/values, tensor infos, padding to `align`, data section."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tinfos), len(kvs)))
    for kv in kvs:
        out += _str(kv.key) + struct.pack("<I", kv.vtype) + kv.value
    for t in tinfos:
        out += _str(t.name) + struct.pack("<I", len(t.dims))
        out += b"".join(struct.pack("<Q", d & (2**64 - 1)) for d in t.dims)
        out += struct.pack("<IQ", t.qtype & (2**32 - 1), t.offset & (2**64 - 1))
    out += b"\0" * (-len(out) % max(align, 1))
    return bytes(out + data_section)


def _pack(t: int, v) -> bytes:
    if t in (F32, F64):
        return struct.pack(_FMT[t], v)
    lo, hi = _INT_RANGE[t]
    return struct.pack(_FMT[t], min(max(int(v), lo), hi))


def encode(t: int, v) -> bytes:
    if t == STRING:
        return _str(v)
    if t == ARRAY:
        et, items = v
        if et == STRING:
            return struct.pack("<IQ", et, len(items)) + b"".join(_str(s) for s in items)
        if et == ARRAY:     # nested arrays: gguf allows them, specnb refuses them
            return struct.pack("<IQ", et, len(items)) + b"".join(encode(ARRAY, s) for s in items)
        return struct.pack("<IQ", et, len(items)) + b"".join(_pack(et, s) for s in items)
    return _pack(t, v)


# ---- mutation strategies -------------------------------------------------------------------
def _interesting(f: Field, seed: Seed) -> list:
    size = len(seed.data)
    left = max(size - f.offset - f.width, 0)     # bytes after the field
    if f.kind == "magic":
        return [b"GGUF", b"gguf", b"GGML", b"GGJT", b"\0\0\0\0", b"FUGG"]
    if f.kind == "version":
        return [0, 1, 2, 3, 4, 2**31, 2**32 - 1]
    if f.kind in ("kv_type", "arr_type"):
        return list(range(14)) + [255, 2**31, 2**32 - 1]
    if f.kind == "ttype":
        return list(range(42)) + [2**31 - 1, 2**32 - 1]
    if f.kind == "n_dims":
        return [0, 1, 2, 3, 4, 5, 8, 2**16, 2**31 - 1, 2**32 - 1]
    if f.kind == "scalar":
        if f.vtype in (F32, F64):
            return [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, math.inf, -math.inf, math.nan,
                    f.orig * 2, -f.orig]
        lo, hi = _INT_RANGE[f.vtype]
        return sorted({lo, hi, 0, 1, 2, 3, 7, max(lo, -1), f.orig - 1, f.orig + 1, f.orig * 2,
                       f.orig // 2, 2**31 - 1 if hi >= 2**31 else hi})
    vals = set(ABSURD) | {left, left + 1, left - 1, size, size + 1}
    if f.kind == "dim":
        vals |= {f.orig - 1, f.orig + 1, f.orig * 2, f.orig // 2, 31, 32, 256, 257}
    elif f.kind == "toffset":
        data_len = size - seed.data_start
        vals |= {f.orig - 1, f.orig + 1, f.orig + 32, f.orig - 32, 31, 32, data_len, data_len - 32,
                 data_len + 32} | {t.offset for t in seed.tinfos[:40]}
    else:
        vals |= {65535, 65536, 65537}
    return sorted(v for v in vals if 0 <= v < 2**(8 * f.width))


@st.composite
def field_edit(draw, seed: Seed, kinds):
    f = draw(st.sampled_from(seed.sub(kinds)))
    v = draw(st.one_of(st.sampled_from(_interesting(f, seed)),
                       st.integers(0, 2**(8 * f.width) - 1)) if f.kind not in ("magic", "scalar")
             else st.sampled_from(_interesting(f, seed)))
    return ("set", f.offset, f.width, f.vtype if f.kind == "scalar" else None, v, f.label)


def apply_op(data: bytes, op) -> bytes:
    kind = op[0]
    b = bytearray(data)
    if kind == "set":
        _, off, width, vtype, v, _label = op
        if off + width > len(b):
            return bytes(b)
        if isinstance(v, bytes):
            raw = v
        elif vtype is not None:
            raw = _pack(vtype, v)
        else:
            raw = int(v).to_bytes(width, "little")
        b[off:off + width] = raw
    elif kind == "truncate":
        del b[op[1]:]
    elif kind == "swap":
        i, j = op[1] % max(len(b), 1), op[2] % max(len(b), 1)
        if b:
            b[i], b[j] = b[j], b[i]
    elif kind == "insert":
        b[op[1]:op[1]] = op[2]
    elif kind == "delete":
        del b[op[1]:op[1] + op[2]]
    elif kind == "overwrite":
        b[op[1]:op[1] + len(op[2])] = op[2]
        del b[len(data):]   # same length
    elif kind == "flip":
        if op[1] < len(b):
            b[op[1]] ^= 1 << op[2]
    return bytes(b)


def describe(op) -> str:
    if op[0] == "set":
        return f"set {op[5]} @{op[1]} = {op[4]!r}"
    if op[0] in ("insert", "overwrite"):
        return f"{op[0]} {op[2][:16]!r}{'...' if len(op[2]) > 16 else ''} @{op[1]}"
    return f"{op[0]} {op[1:]}"


@st.composite
def position(draw, seed: Seed):
    """A byte position, mostly in the header (where everything interesting is)."""
    header = min(seed.data_start + 64, len(seed.data))
    return draw(st.one_of(st.sampled_from([b for b, _ in seed.boundaries]),
                          st.integers(0, header), st.integers(0, len(seed.data))))


@st.composite
def byte_edit(draw, seed: Seed):
    kind = draw(st.sampled_from(["truncate", "truncate", "swap", "insert", "delete", "overwrite",
                                 "flip"]))
    p = draw(position(seed))
    if kind == "truncate":
        return ("truncate", p)
    if kind == "swap":
        near = draw(st.booleans())
        q = p + draw(st.integers(1, 8)) if near else draw(position(seed))
        return ("swap", p, q)
    if kind == "insert":
        return ("insert", p, draw(st.one_of(st.binary(min_size=1, max_size=16),
                                            st.sampled_from([b"\0" * 8, b"\xff" * 8, b"\0" * 4,
                                                             b"\xff" * 4, b"\0" * 32]))))
    if kind == "delete":
        return ("delete", p, draw(st.integers(1, 16)))
    if kind == "overwrite":
        return ("overwrite", p, draw(st.binary(min_size=1, max_size=8)))
    return ("flip", p, draw(st.integers(0, 7)))


INT_KINDS = ("count", "key_len", "str_len", "arr_len", "elem_len", "name_len", "n_dims", "dim",
             "toffset", "version", "magic", "scalar")
TYPE_KINDS = ("kv_type", "arr_type", "ttype")
# the real header costs ~0.15 s a case (49k token strings), the tiny seeds ~10 ms: draw it less
SEEDS = st.sampled_from(["tiny-Q8_0", "tiny-Q4_K", "tiny-Q8_0", "real-header"])


def seed_of(seeds: dict, name: str) -> Seed:
    """The named seed; without the default model installed the tiny Q8_0 seed stands in."""
    return seeds.get(name) or seeds["tiny-Q8_0"]


# ---- structural rebuilds: valid framing, wrong contents ---------------------------------------
_STRINGS = [b"", b"llama", b"mistral", b"qwen2", b"gemma3", b"gpt2", b"bert", b"linear", b"none",
            b"smollm", b"default", b"\xff\xfe", b"\xc3", b"a b", b" ", b"\0", b"<|endoftext|>",
            b"x" * 300]
_FLOATS = [0.0, -1.0, 1.0, 1e-5, 1e30, -1e30, math.inf, -math.inf, math.nan, 10000.0]
_INTS = [0, 1, 2, 3, 4, 5, 7, 31, 32, 64, 256, 511, 1 << 20, (1 << 20) + 1, 2**31 - 1, 2**32 - 1,
         2**63 - 1, 2**64 - 1, -1, -2**31, -2**63]


def _scalar_value(t):
    if t in (F32, F64):
        return st.one_of(st.sampled_from(_FLOATS), st.floats(width=32 if t == F32 else 64))
    lo, hi = _INT_RANGE[t]
    return st.one_of(st.sampled_from([v for v in _INTS if lo <= v <= hi]), st.integers(lo, hi))


@st.composite
def typed_value(draw, depth=0):
    """(gguf type, serialized value) of any type, biased toward values that break loaders."""
    t = draw(st.sampled_from([U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64,
                              F64] + ([] if depth else [ARRAY, STRING, U32])))
    if t == STRING:
        return t, encode(t, draw(st.one_of(st.sampled_from(_STRINGS), st.binary(max_size=24))))
    if t == ARRAY:
        et = draw(st.sampled_from([STRING, STRING, I32, F32, U32, U8, BOOL, F64, U64]
                                  + ([] if depth else [ARRAY])))
        n = draw(st.integers(0, 12))
        if et == STRING:
            items = draw(st.lists(st.one_of(st.sampled_from(_STRINGS), st.binary(max_size=6)),
                                  min_size=n, max_size=n))
        elif et == ARRAY:
            items = [draw(st.tuples(st.just(I32), st.lists(st.integers(-5, 5), max_size=3)))
                     for _ in range(n)]
        else:
            items = draw(st.lists(_scalar_value(et), min_size=n, max_size=n))
        return t, encode(t, (et, items))
    return t, encode(t, draw(_scalar_value(t)))


def _decode_array(kv: KV):
    """(element type, items) of an array KV's serialized value."""
    et, n = struct.unpack_from("<IQ", kv.value, 0)
    pos, items = 12, []
    for _ in range(n):
        if et == STRING:
            ln = struct.unpack_from("<Q", kv.value, pos)[0]
            items.append(kv.value[pos + 8:pos + 8 + ln])
            pos += 8 + ln
        else:
            items.append(struct.unpack_from(_FMT[et], kv.value, pos)[0])
            pos += struct.calcsize(_FMT[et])
    return et, items


@st.composite
def same_type_value(draw, kv: KV):
    """A new value of the KV's own type: boundary numbers, other strings, edited arrays."""
    if kv.vtype in _FMT:
        return kv.vtype, _pack(kv.vtype, draw(_scalar_value(kv.vtype)))
    if kv.vtype == STRING:
        text = draw(st.one_of(st.sampled_from(_STRINGS), st.binary(max_size=24)))
        return STRING, encode(STRING, text)
    et, items = _decode_array(kv)
    how = draw(st.sampled_from(["empty", "drop", "add", "dup", "blank", "replace", "one"]))
    items = list(items)
    if how == "empty":
        items = []
    elif how == "one":
        items = items[:1]
    elif how == "drop" and items:
        k = draw(st.integers(1, min(len(items), 40)))
        i = draw(st.integers(0, len(items) - k))
        del items[i:i + k]
    elif how in ("add", "dup", "blank", "replace") and items:
        i = draw(st.integers(0, len(items) - 1))
        j = draw(st.integers(0, len(items) - 1))
        if how == "add":
            items.append(items[i])
        elif how == "dup":
            items[j] = items[i]
        elif how == "blank":
            items[i] = b"" if et == STRING else 0
        else:
            items[i] = draw(st.one_of(st.sampled_from(_STRINGS), st.binary(max_size=6))) \
                if et == STRING else draw(_scalar_value(et))
    return ARRAY, encode(ARRAY, (et, items))


KEYS = [b"general.architecture", b"general.alignment", b"general.name", b"llama.block_count",
         b"llama.embedding_length", b"llama.feed_forward_length", b"llama.attention.head_count",
         b"llama.attention.head_count_kv", b"llama.attention.key_length",
         b"llama.rope.dimension_count", b"llama.rope.freq_base", b"llama.context_length",
         b"llama.attention.layer_norm_rms_epsilon", b"llama.rope.scaling.type",
         b"llama.rope.scaling.factor", b"tokenizer.ggml.model", b"tokenizer.ggml.pre",
         b"tokenizer.ggml.tokens", b"tokenizer.ggml.scores", b"tokenizer.ggml.token_type",
         b"tokenizer.ggml.merges", b"tokenizer.ggml.bos_token_id", b"tokenizer.ggml.eos_token_id",
         b"tokenizer.ggml.add_bos_token", b"tokenizer.ggml.add_space_prefix",
         b"tokenizer.chat_template", b"", b"\xff", b"x" * 70000]


@st.composite
def rebuild_edit(draw, seed: Seed):
    kind = draw(st.sampled_from(["kv_value", "kv_value", "kv_same_type", "kv_same_type", "kv_drop",
                                 "kv_dup", "kv_rename", "kv_add", "t_drop", "t_dup", "t_rename",
                                 "t_dims", "t_type", "t_offset", "version", "align"]))
    nk, nt = len(seed.kvs), len(seed.tinfos)
    if kind in ("kv_value", "kv_same_type", "kv_drop", "kv_dup", "kv_rename"):
        i = draw(st.integers(0, nk - 1))
        if kind == "kv_value":
            return (kind, i, draw(typed_value()))
        if kind == "kv_same_type":
            return (kind, i, draw(same_type_value(seed.kvs[i])))
        if kind == "kv_rename":
            return (kind, i, draw(st.one_of(st.sampled_from(KEYS), st.binary(max_size=12))))
        return (kind, i)
    if kind == "kv_add":
        return (kind, draw(st.sampled_from(KEYS)), draw(typed_value()))
    if kind.startswith("t_"):
        i = draw(st.integers(0, nt - 1))
        if kind == "t_rename":
            names = [t.name for t in seed.tinfos] + [b"", b"\xff", b"output.weight",
                                                     b"rope_freqs.weight", b"blk.0.attn_q.bias",
                                                     b"blk.2.attn_q.weight"]
            return (kind, i, draw(st.sampled_from(names)))
        if kind == "t_dims":
            orig = seed.tinfos[i].dims
            dims = draw(st.one_of(
                st.permutations(orig).map(list),
                st.lists(st.sampled_from([1, 2, 32, 64, 128, 256, 512, 0, 2**32, 2**40]),
                         min_size=0, max_size=5),
                st.just(orig + [1]), st.just(orig[:1]), st.just([orig[0] * 2] + orig[1:])))
            return (kind, i, dims)
        if kind == "t_type":
            return (kind, i, draw(st.sampled_from([0, 1, 2, 3, 6, 7, 8, 9, 10, 12, 14, 15, 16, 24,
                                                   28, 30, 39, 41, 99])))
        if kind == "t_offset":
            return (kind, i, draw(st.one_of(
                st.sampled_from([t.offset for t in seed.tinfos]),
                st.integers(0, len(seed.data)).map(lambda v: v // 32 * 32))))
        return (kind, i)
    if kind == "version":
        return (kind, draw(st.sampled_from([1, 2, 3, 4])))
    return (kind, draw(st.sampled_from([0, 1, 8, 16, 64, 4096, 48, 2**32 - 1])))


def rebuild(seed: Seed, edits) -> bytes:
    kvs = [KV(k.key, k.vtype, k.value) for k in seed.kvs]
    tis = [TInfo(t.name, list(t.dims), t.qtype, t.offset) for t in seed.tinfos]
    version, align = seed.version, seed.align
    for e in edits:
        kind = e[0]
        if kind in ("kv_value", "kv_same_type"):
            i = e[1] % len(kvs) if kvs else None
            if i is not None:
                kvs[i] = KV(kvs[i].key, e[2][0], e[2][1])
        elif kind == "kv_drop" and kvs:
            del kvs[e[1] % len(kvs)]
        elif kind == "kv_dup" and kvs:
            kvs.append(kvs[e[1] % len(kvs)])
        elif kind == "kv_rename" and kvs:
            i = e[1] % len(kvs)
            kvs[i] = KV(e[2], kvs[i].vtype, kvs[i].value)
        elif kind == "kv_add":
            kvs.append(KV(e[1], e[2][0], e[2][1]))
        elif kind == "t_drop" and tis:
            del tis[e[1] % len(tis)]
        elif kind == "t_dup" and tis:
            tis.append(tis[e[1] % len(tis)])
        elif kind == "t_rename" and tis:
            tis[e[1] % len(tis)].name = e[2]
        elif kind == "t_dims" and tis:
            tis[e[1] % len(tis)].dims = list(e[2])
        elif kind == "t_type" and tis:
            tis[e[1] % len(tis)].qtype = e[2]
        elif kind == "t_offset" and tis:
            tis[e[1] % len(tis)].offset = e[2]
        elif kind == "version":
            version = e[1]
        elif kind == "align":
            kvs = [k for k in kvs if k.key != b"general.alignment"]
            kvs.append(KV(b"general.alignment", U32, struct.pack("<I", e[1])))
            if e[1] and not e[1] & (e[1] - 1) and e[1] <= 4096:
                align = e[1]    # keep the data section where the new alignment puts it
    data = seed.data[seed.data_start:]
    out = build_gguf(version, kvs, tis, b"", align)
    # the tensors' offsets are relative to the data section; re-pad the new header to it
    return out + data


def real_cuts(seed: Seed) -> list:
    """The real header's cut points, thinned: each cut past the 49k token strings costs a parse
    of ~1 MB of them, so past that point only the boundaries themselves are cut (and only a few
    of the 272 tensor infos); before it, as for the tiny seeds."""
    cheap = next(b for b, label in seed.boundaries if label == "tokenizer.ggml.tokens elements")
    out = {p for p in cut_points(seed) if p <= cheap + 64}
    infos = [b for b, label in seed.boundaries if label.startswith("tensor info ")]
    keep_infos = set(infos[:2] + infos[len(infos) // 2:len(infos) // 2 + 1] + infos[-2:])
    for b, label in seed.boundaries:
        if cheap < b <= len(seed.data) and (not label.startswith("tensor info ") or b in keep_infos):
            out.add(b)
    # inside the two big string arrays: a few element boundaries and mid-length cuts
    for f in seed.fields:
        if f.kind == "elem_len" and f.offset > cheap \
                and f.label.endswith(("[0] length", "[1] length")):
            out.update((f.offset, f.offset + 4))
    return sorted(out)


# ---- regressions: bugs this fuzzer found in specnb/vocab/__init__.py ----------------------------------
def with_kv(seed: Seed, key: bytes, t: int, v) -> bytes:
    i = next((i for i, kv in enumerate(seed.kvs) if kv.key == key), None)
    value = (t, encode(t, v))
    edit = ("kv_value", i, value) if i is not None else ("kv_add", key, value)
    return rebuild(seed, [edit])
