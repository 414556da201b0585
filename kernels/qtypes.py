"""The GGUF tensor types the kernels read, their block layouts, and the shape checks.

A weight matrix of n_out rows by n_in columns is the raw bytes of its GGUF tensor, a C-contiguous
uint8[n_out, row_bytes] array (usually a read-only view of the file's memory map). Each row is
n_in / QK blocks of a fixed byte size. Every multi-byte field is little-endian; "half" is an IEEE
float16, "q" a small integer. For a block, element j (0 <= j < QK) decodes as (llama.cpp:
ggml-common.h for the layouts, ggml-quants.c dequantize_row_* for the values):

  type   QK  bytes  block layout                                   element j
  F32     1    4    f32                                            the value
  F16     1    2    half                                           the value
  BF16    1    2    high 16 bits of a f32                          the value
  Q8_0   32   34    d:half, q:int8[32]                             q[j] * d
  Q4_0   32   18    d:half, qs:u8[16]                              d * (nib_j - 8)
  Q4_1   32   20    d:half, m:half, qs:u8[16]                      d * nib_j + m
  Q5_0   32   22    d:half, qh:u32, qs:u8[16]                      d * ((nib_j | h_j << 4) - 16)
  Q5_1   32   24    d:half, m:half, qh:u32, qs:u8[16]              d * (nib_j | h_j << 4) + m
  Q2_K  256   84    scales:u8[16], qs:u8[64], d:half, dmin:half    (d*sc_g) * q2 - (dmin*mn_g)
  Q3_K  256  110    hmask:u8[32], qs:u8[64], scales:u8[12], d:half (d*sc_g) * (q2 - 4 * !hbit)
  Q4_K  256  144    d:half, dmin:half, scales:u8[12], qs:u8[128]   (d*sc_s) * nib - (dmin*mn_s)
  Q5_K  256  176    d, dmin, scales:u8[12], qh:u8[32], qs:u8[128]  (d*sc_s) * q5 - (dmin*mn_s)
  Q6_K  256  210    ql:u8[128], qh:u8[64], scales:int8[16], d:half (d*scales[j/16]) * (q6 - 32)

  Q4_0/Q4_1/Q5: nib_j = qs[j] & 15 for j < 16, qs[j - 16] >> 4 for j >= 16; h_j = bit j of qh.
  K types: super-blocks of 256 in groups g of 16 (Q2_K, Q3_K, Q6_K) or sub-blocks s of 32 (Q4_K,
        Q5_K), each with its own small integer scale (and min); d and dmin scale those.
  Q2_K: element j = 128h + 32k + l (h < 2, k < 4, l < 32) is (qs[32h + l] >> 2k) & 3; byte g of
        `scales` holds sc_g (low nibble) and mn_g (high nibble) of group g = j // 16.
  Q3_K: the low 2 bits as Q2_K's; hbit = bit (j // 32) of hmask[j % 32]; the 16 6-bit scales
        (minus 32, so signed) are packed in 12 bytes: low 4 bits of sc_g from byte g % 8 (low
        nibble for g < 8, high for g >= 8), top 2 bits from byte 8 + g % 4, bits 2 * (g // 4).
  Q4_K: 8 sub-blocks s of 32; sub-block s reads the 32 bytes qs[32*(s//2) :], low nibbles when s
        is even, high when odd; its 6-bit scale sc_s and min mn_s are packed into `scales` (for
        s < 4: sc = scales[s] & 63, mn = scales[s+4] & 63; for s >= 4: the low 4 bits come from
        scales[s+4] (low nibble for sc, high for mn), the top 2 bits from scales[s-4] >> 6 (sc)
        and scales[s] >> 6 (mn)).
  Q5_K: Q4_K's nibbles and scales, plus a fifth bit: bit (j // 32) of qh[j % 32].
  Q6_K: two halves of 128; in half h, element i has low 4 bits from ql[64h + i % 64] (low nibble
        for i < 64, high for i >= 64) and top 2 bits from qh[32h + i % 32] >> (2 * (i // 32)).

specnb's own layouts (not GGUF types; the int8 kernels only): the 32-block types with their rows
interleaved 16 at a time, Q8_0x16, Q4_0x16, Q4_1x16, Q5_0x16 and Q5_1x16 (matmul_x16.py), and the
K types Q4_Kx16 and Q6_Kx16 (matmul_x16k.py) (codes X16_OF[base]). A matrix keeps its shape
[n_out, row_bytes] and its bytes; each group of 16 rows is regrouped so that one 64-byte load
holds 4 elements of each of the 16 rows (llama.cpp: ggml-cpu's repack.cpp, block_q4_0x8,
block_q4_Kx8 and friends).

`random_blocks` makes valid random weights of any type (for the checks, benchmarks and tests).
"""
from collections import namedtuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from numba import njit

_jit = njit(cache=True, fastmath=False)

# ---- tensor types ----------------------------------------------------------------------------

F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = (
    int(GGMLQuantizationType[n]) for n in
    ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
     "Q6_K"))
FLOAT_QTYPES = frozenset((F32, F16, BF16))
K_QTYPES = frozenset((Q2_K, Q3_K, Q4_K, Q5_K, Q6_K))          # super-blocks of 256
SUPPORTED_QTYPES = FLOAT_QTYPES | K_QTYPES | frozenset((Q8_0, Q4_0, Q4_1, Q5_0, Q5_1))

# the interleaved layouts (matmul_x16.py): codes above every GGUF type's
X16_OF = {Q8_0: 56, Q4_0: 57, Q4_1: 58, Q5_0: 59, Q5_1: 60, Q4_K: 61, Q6_K: 62}
Q8_0X16, Q4_0X16, Q4_1X16, Q5_0X16, Q5_1X16, Q4_KX16, Q6_KX16 = (
    X16_OF[t] for t in (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K))
X16_BASE = {x: t for t, x in X16_OF.items()}
X16_QTYPES = frozenset(X16_BASE)
X16K_QTYPES = frozenset((Q4_KX16, Q6_KX16))        # the K layouts (matmul_x16k.py)
X16_ROWS = 16


@njit(cache=True, fastmath=False)
def is_x16k(qtype):
    # qtype in X16K_QTYPES, callable from jitted code too
    return qtype == Q4_KX16 or qtype == Q6_KX16


@njit(cache=True, fastmath=False)
def is_x16(qtype):
    # qtype in X16_QTYPES, callable from jitted code too
    return (qtype == Q8_0X16 or qtype == Q4_0X16 or qtype == Q4_1X16 or qtype == Q5_0X16 or qtype == Q5_1X16
            or is_x16k(qtype))

# (block size QK, bytes per block) by type code, for the jitted code (0: unsupported); an
# interleaved layout has its base type's rows
_BLOCK = np.zeros(64, np.int64)
_BLOCK_BYTES = np.zeros(64, np.int64)
for _t in SUPPORTED_QTYPES:
    _BLOCK[_t], _BLOCK_BYTES[_t] = GGML_QUANT_SIZES[GGMLQuantizationType(_t)]
for _x, _t in X16_BASE.items():
    _BLOCK[_x], _BLOCK_BYTES[_x] = _BLOCK[_t], _BLOCK_BYTES[_t]


# ---- the interleaved layouts' regrouping (matmul_x16.interleave, matmul_x16k.interleave_k) -----

def x16_groups(w, block_bytes: int, who: str, what: str) -> np.ndarray:
    """uint8 [n_out, row_bytes] of blocks of block_bytes, checked -> its whole groups of 16 rows
    as [G, 16, nb, block_bytes] (G = n_out // 16, possibly 0: the rest is the tail)."""
    w = np.asarray(w)
    if w.dtype != np.uint8 or w.ndim != 2 or w.shape[1] % block_bytes != 0:
        raise ValueError(f"{who}: expected uint8 [n_out, row_bytes] of {what} ({block_bytes} bytes each), "
                         f"got {w.dtype} {w.shape}")
    G, nb = w.shape[0] // X16_ROWS, w.shape[1] // block_bytes
    return w[:G * X16_ROWS].reshape(G, X16_ROWS, nb, block_bytes)


def qtype_name(qtype: int) -> str:
    """'Q4_1' for 3; 'Q5_0x16' for specnb's interleaved Q5_0; 'type#99' for a code gguf does not know."""
    if int(qtype) in X16_BASE:
        return qtype_name(X16_BASE[int(qtype)]) + "x16"
    try:
        return GGMLQuantizationType(int(qtype)).name
    except ValueError:
        return f"type#{int(qtype)}"


def check_qtype(qtype: int) -> None:
    if int(qtype) not in SUPPORTED_QTYPES:
        names = ", ".join(sorted(qtype_name(t) for t in SUPPORTED_QTYPES))
        raise ValueError(f"tensor type {qtype_name(qtype)} (code {int(qtype)}) is not supported "
                         f"by specnb.kernels (supported: {names})")


def row_bytes(qtype: int, n_in: int) -> int:
    """Bytes of one row of n_in elements of type qtype."""
    check_qtype(qtype)
    qk, size = GGML_QUANT_SIZES[GGMLQuantizationType(int(qtype))]
    if n_in % qk != 0:
        raise ValueError(f"a {qtype_name(qtype)} row has blocks of {qk} elements; "
                         f"n_in={n_in} is not a multiple of {qk}")
    return n_in // qk * size


@_jit
def _row_bytes(qtype, n_in):
    # -> bytes of a row, or -1 if qtype is unsupported or n_in not a multiple of its block
    if qtype < 0 or qtype >= 64 or _BLOCK[qtype] == 0 or n_in % _BLOCK[qtype] != 0:
        return -1
    return n_in // _BLOCK[qtype] * _BLOCK_BYTES[qtype]


_NAMES = tuple(qtype_name(t) for t in range(64))    # for the messages of the jitted code


@_jit
def check_shapes(n_in, w_row_bytes, qtype):
    # (jitted) a clear ValueError for an unsupported type or rows of the wrong size
    if qtype < 0 or qtype >= 64 or _BLOCK[qtype] == 0:
        name = _NAMES[qtype] if 0 <= qtype < 64 else "type#" + str(qtype)
        raise ValueError("specnb.kernels: unsupported tensor type code (see "
                         "qtypes.SUPPORTED_QTYPES):", qtype, name)
    if _row_bytes(qtype, n_in) != w_row_bytes:
        raise ValueError("specnb.kernels: weight rows have the wrong size for this type "
                         "and n_in (qtype, n_in, row bytes):", qtype, n_in, w_row_bytes)


# ---- which types a compiled pass serves ------------------------------------------------------
# Numba compiles every branch of a function it types, so a dispatch over all thirteen types
# compiles thirteen kernels even for a model that uses two. A TypeSel names the types a call
# may meet: 0 for each type (and group) it serves, None for the rest. The dispatchers take the
# fields as arguments and guard each branch with `if flag is not None`, a test Numba settles
# from the argument's type before typing the branch, so the kernels of absent types are never
# compiled. One compiled version (and cache entry) exists per selection.

TYPE_FIELDS = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
               "q2_k", "q3_k", "q4_k", "q5_k", "q6_k")
X16_FIELDS = ("q8_0x16", "q4_0x16", "q4_1x16", "q5_0x16", "q5_1x16", "q4_kx16", "q6_kx16")
_FIELD_TYPE = dict(zip(TYPE_FIELDS, (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
                                     Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)))
_X16_FIELD_TYPE = dict(zip(X16_FIELDS, (Q8_0X16, Q4_0X16, Q4_1X16, Q5_0X16, Q5_1X16, Q4_KX16, Q6_KX16)))
# any: some type; fl: some float type (F32, F16, BF16); b: some 32-block type; k: some K type;
# xb, xk: some interleaved 32-block / K layout (X16_QTYPES, the int8 kernels only)
TypeSel = namedtuple("TypeSel", ("any", "fl", "b", "k") + TYPE_FIELDS + ("xb", "xk") + X16_FIELDS)


def type_sel(qtypes) -> TypeSel:
    """The TypeSel serving exactly these type codes (each supported, or an interleaved layout)."""
    ts = {int(t) for t in qtypes}
    for t in ts - X16_QTYPES:
        check_qtype(t)
    flag = {f: (0 if t in ts else None) for f, t in (_FIELD_TYPE | _X16_FIELD_TYPE).items()}
    group = lambda g: 0 if ts & g else None     # noqa: E731
    return TypeSel(any=0 if ts else None, fl=group(FLOAT_QTYPES), k=group(K_QTYPES),
                   b=group(SUPPORTED_QTYPES - FLOAT_QTYPES - K_QTYPES), xb=group(X16_QTYPES - X16K_QTYPES),
                   xk=group(X16K_QTYPES), **flag)


@_jit
def all_types():
    # (jitted) the selection of every supported type: what the kernels' public entry points use
    # (the float path: no interleaved layouts)
    return TypeSel(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                   None, None, None, None, None, None, None, None, None)


# ---- random weights ----------------------------------------------------------------------------

# byte offsets of the float16 scale fields (d, dmin / m) inside one block
HALF_FIELDS = {Q8_0: (0,), Q4_0: (0,), Q5_0: (0,), Q4_1: (0, 2), Q5_1: (0, 2),
               Q2_K: (80, 82), Q3_K: (108,), Q4_K: (0, 2), Q5_K: (0, 2), Q6_K: (208,)}


def random_blocks(qtype: int, n_out: int, n_in: int, rng, scale: float = 1.0,
                  readonly: bool = True) -> np.ndarray:
    """uint8 [n_out, row_bytes]: random quant bytes everywhere (every bit pattern of the quants and
    the packed scales), with finite half floats of about scale / QK (random sign) in the d / dmin
    fields; float types: random normal values times scale. Read-only by default, like the
    memory-mapped GGUF tensors (the same jit specialization)."""
    qtype = int(qtype)
    check_qtype(qtype)
    qk, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    if qtype in FLOAT_QTYPES:
        wf = (rng.standard_normal((n_out, n_in)) * scale).astype(np.float32)
        w = {F32: wf, F16: wf.astype(np.float16), BF16: (wf.view(np.uint32) >> 16).astype(np.uint16)}[qtype]
        w = np.ascontiguousarray(w).view(np.uint8).reshape(n_out, -1)
    else:
        nb = n_in // qk
        w = rng.integers(0, 256, (n_out, nb, size), dtype=np.uint8)
        for off in HALF_FIELDS[qtype]:
            h = rng.uniform(0.5, 1.5, (n_out, nb)) * rng.choice([-1, 1], (n_out, nb)) * scale / qk
            w[:, :, off:off + 2] = h.astype(np.float16).view(np.uint8).reshape(n_out, nb, 2)
        w = w.reshape(n_out, nb * size)
    w = np.ascontiguousarray(w)
    if readonly:
        w.setflags(write=False)
    return w
