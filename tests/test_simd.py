"""kernels/simd.py, simd_wide.py and tiles.py: the explicit-SIMD layer on its own.

- the Numba extension API and LLVM intrinsics the layer is built on are there (a new Numba or
  llvmlite release that moves them fails here, with the name);
- each intrinsic against its NumPy definition (the fixed reduction order of vhsum, ties to even
  in vrint, the byte dot products, the field and scale builders, the tiles);
- every SIMD level gives the same bits: the kernels recompiled with SPECNB_SIMD=generic (the plain
  LLVM vector IR a CPU without AVX2, e.g. an ARM laptop, compiles), and as an AVX2-only and an
  AVX-VNNI CPU would compile them (simd.cpu_features_for), in fresh processes, against the host's
  own level as the forward passes run it (their drivers, from the suite's compiled kernels).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from specnb.kernels import simd as S
from specnb.kernels import simd_wide as W
from specnb.kernels import tiles as TL


# ---- what the layer depends on -------------------------------------------------------------------

def test_the_extension_api_it_uses_is_there():
    import llvmlite.binding
    import llvmlite.ir
    import numba.core.cgutils
    import numba.extending
    for mod, names in ((numba.extending, ("intrinsic", "overload", "register_model", "models")),
                       (numba.extending.models, ("PrimitiveModel",)),
                       (numba.core.cgutils, ("get_or_insert_function",)),
                       (llvmlite.binding, ("get_host_cpu_features", "parse_assembly")),
                       (llvmlite.ir, ("VectorType", "ArrayType", "Constant", "IRBuilder"))):
        missing = [n for n in names if not hasattr(mod, n)]
        assert not missing, f"{mod.__name__} no longer has {missing}: kernels/simd.py needs them"


X86_INTRINSICS = [   # (name, IR signature) of every x86 intrinsic the layer emits
    ("llvm.x86.avx2.pmadd.ub.sw", "<16 x i16> (<32 x i8>, <32 x i8>)"),
    ("llvm.x86.avx2.pmadd.wd", "<8 x i32> (<16 x i16>, <16 x i16>)"),
    ("llvm.x86.avx2.psign.b", "<32 x i8> (<32 x i8>, <32 x i8>)"),
    ("llvm.x86.avx512.pmaddubs.w.512", "<32 x i16> (<64 x i8>, <64 x i8>)"),
    ("llvm.x86.avx512.vpdpbusd.512", None),
    ("llvm.x86.avx512.vpdpwssd.512", None),
    ("llvm.x86.avx512.vpdpbusd.256", None),          # AVX-VNNI (or AVX512-VL)
    ("llvm.x86.avx512.vpdpwssd.256", None),
    ("llvm.x86.vcvtph2ps.128", "<4 x float> (<8 x i16>)"),
]


@pytest.mark.parametrize("name,sig", X86_INTRINSICS)
def test_the_llvm_intrinsics_it_emits_compile(name, sig):
    import llvmlite.binding as llvm
    if sig is None:     # the VNNI ones: the operand types of the LLVM at hand (simd.py probes them)
        wide = name.endswith(".512")
        probe = {(True, True): W._VNNI_B, (True, False): W._VNNI_W,
                 (False, True): S.vpdpbusd256, (False, False): S.vpdpwssd256}[wide, "busd" in name]
        acc = "<16 x i32>" if wide else "<8 x i32>"
        b = str(probe.operand_type)
        assert b in (acc, ("<64 x i8>" if wide else "<32 x i8>") if "busd" in name else
                     ("<32 x i16>" if wide else "<16 x i16>")), (name, b)
        sig = f"{acc} ({acc}, {b}, {b})"
    ret, args = sig.split(" (", 1)
    argtys = [a.strip() for a in args.rstrip(")").split(",")]
    params = ", ".join(f"{t} %a{i}" for i, t in enumerate(argtys))
    call = ", ".join(f"{t} %a{i}" for i, t in enumerate(argtys))
    ir = (f"declare {ret} @{name}({', '.join(argtys)})\n"
          f"define {ret} @f({params}) {{\n  %r = call {ret} @{name}({call})\n  ret {ret} %r\n}}\n")
    m = llvm.parse_assembly(ir)
    m.verify()
    if name.endswith(".256") and S.SIMD_LEVEL not in ("avx512", "avxvnni"):
        pytest.skip("this CPU has no VNNI: the layer does not emit it here")
    if "avx512" in name and not name.endswith(".256") and S.SIMD_LEVEL != "avx512":
        pytest.skip("this CPU has no AVX-512: the layer does not emit it here")
    if "x86" in name and not S._AVX2:
        pytest.skip("not an x86 CPU with AVX2")
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten())
    assert "f:" in tm.emit_assembly(m)


# ---- the intrinsics against NumPy ------------------------------------------------------------

@njit
def _hsum(a):
    return S.vhsum(S.vload(a, 0))


def test_vhsum_adds_in_its_fixed_order():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = (rng.standard_normal(8) * 10.0 ** rng.integers(-8, 8, 8)).astype(np.float32)
        l = a.astype(np.float32)
        want = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
        assert _hsum(a) == want


@njit
def _rint_store(a, out):
    S.vstore_i8(out, 0, S.vrint(S.vload(a, 0)))


def test_vrint_rounds_ties_to_even():
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49999, -3.5], np.float32)
    out = np.empty(8, np.int8)
    _rint_store(a, out)
    assert out.tolist() == [0, 2, 2, 0, -2, -2, 3, -4] == np.rint(a).astype(np.int8).tolist()


@njit
def _dots(a, b, out):
    S.vstore(out, 0, S.vfloat(S.vdot_u8i8(S.vload_b32(a, 0), S.vload_b32(b, 0))))
    S.vstore(out, 8, S.vfloat(S.vdot_i8i8(S.vload_b32(a, 0), S.vload_b32(b, 0))))


def test_vdot_byte_products():
    rng = np.random.default_rng(1)
    u = rng.integers(0, 128, 32).astype(np.uint8)       # unsigned a < 128: no pmaddubsw saturation
    x = rng.integers(-127, 128, 32).astype(np.int8)
    out = np.empty(16, np.float32)
    _dots(u, x, out)
    want = (u.astype(np.int64) * x).reshape(8, 4).sum(-1)
    assert out[:8].tolist() == want.tolist()
    s = u.view(np.int8)                                  # the same bytes, signed
    assert out[8:].tolist() == (s.astype(np.int64) * x).reshape(8, 4).sum(-1).tolist()


@njit
def _wide(u, x, s, fields, out_f):
    acc = TL.tzeros(np.int32, 16, 2)
    xt = TL.tload_bytes(x, 0, 64, 2, 64)
    a1 = TL.tdot4(acc, W.vload_b64(u, 0), xt)
    a2 = TL.tdot4s(acc, W.vload_b64(u, 0), xt, W.vpairs(W.vload_i8x16(s, 0)))
    TL.tstore_hsum(out_f, 0, 1, TL.tfloat(a1))
    TL.tstore_hsum(out_f, 2, 1, TL.tfloat(a2))
    f = W.vfields64(fields, 0, 2, 6, 3)              # (checked through a dot product)
    TL.tstore_hsum(out_f, 4, 1, TL.tfloat(TL.tdot4(TL.tzeros(np.int32, 16, 1), f,
                                                     TL.tload_bytes(x, 0, 64, 1, 64))))


def test_wide_dot_products_fields_and_tiles():
    rng = np.random.default_rng(2)
    u = rng.integers(0, 64, 64).astype(np.uint8)
    x = rng.integers(-127, 128, 128).astype(np.int8)     # two rows of 64
    s = rng.integers(-128, 128, 16).astype(np.int8)      # a signed scale per lane
    fields = rng.integers(0, 256, 32).astype(np.uint8)
    out_f = np.empty(5, np.float32)
    _wide(u, x, s, fields, out_f)
    xr = x.reshape(2, 64).astype(np.int64)
    lanes = (u.astype(np.int64) * xr).reshape(2, 16, 4).sum(-1)
    assert out_f[:2].tolist() == lanes.sum(-1).tolist()
    assert out_f[2:4].tolist() == (lanes * s.astype(np.int64)).sum(-1).tolist()
    f = np.concatenate([(fields >> 2) & 3, (fields >> 6) & 3]).astype(np.int64)
    assert out_f[4] == (f * xr[0]).sum()


@njit
def _dotw(c, t, out):
    acc = TL.tzeros(np.int32, 16, 2)
    for k in range(2):                           # accumulates: two steps
        acc = TL.tdotw(acc, W.vload_i32x16(c, 64 * k), TL.tsplat_i32(t, 2 * k, 1, 2, 1))   # c: bytes
    TL.tstore_f32(out, 0, 16, TL.tfloat(acc))


def test_tdotw_adds_int16_pair_products():
    # lane l of row r: acc + c16[2l] t16[2l] + c16[2l+1] t16[2l+1], the int16 halves signed (the
    # interleaved Q4_K pass: mins 0..63 against negated sums of 32, |sum| <= 4096)
    rng = np.random.default_rng(4)
    c16 = rng.integers(-300, 301, (2, 16, 2)).astype(np.int16)
    c16[0, 0] = [63, -1]
    t16 = rng.integers(-4096, 4097, (2, 2, 2)).astype(np.int16)     # [step, row, half]
    t16[0, 0] = [-4096, 4096]
    out = np.empty(32, np.float32)
    _dotw(c16.reshape(-1).view(np.uint8).copy(), t16.view(np.int32).reshape(-1).copy(), out)
    c, t = c16.astype(np.int64), t16.astype(np.int64)
    want = np.einsum("kls,krs->rl", c, t)                             # [row, lane]
    assert out.reshape(2, 16).tolist() == want.tolist()


@njit
def _dot4p(u, x, sel, out):
    t = TL.tzeros(np.int32, 16, 2)
    for k in range(8):                           # a Q4_K sub-block's eight steps, summed in int16
        t = TL.tdot4p(t, W.vload_b64(u, 64 * k), TL.tload_bytes(x, 64 * k, 512, 2, 64))
    for j in range(2):                           # half j of every lane, picked by a pmaddwd with (1, 0) / (0, 1)
        TL.tstore_f32(out, 32 * j, 16, TL.tfloat(TL.tdotw(TL.tzeros(np.int32, 16, 2), W.vload_i32x16(sel, 64 * j), t)))


def test_tdot4p_sums_byte_pairs_in_int16_halves():
    # half j of lane l, row r: the sum over the steps of u[4l + 2j] x[4l + 2j] + u[4l + 2j + 1] x[4l + 2j + 1]
    # (the AVX2 Q4_K pass: nibbles against int8 activations, up to 30480 in magnitude after eight steps)
    rng = np.random.default_rng(8)
    u = rng.integers(0, 16, 512).astype(np.uint8)
    x = rng.integers(-127, 128, 1024).astype(np.int8)
    u[:] = np.where(np.arange(512) % 64 < 4, 15, u)
    x[:512] = np.where(np.arange(512) % 64 < 4, -127, x[:512])     # lane 0 of row 0: -30480 in both halves
    sel = np.array([1] * 16 + [1 << 16] * 16, np.int32).view(np.uint8)
    out = np.empty(64, np.float32)
    _dot4p(u, x, sel, out)
    prod = u.astype(np.int64).reshape(1, 8, 64) * x.astype(np.int64).reshape(2, 8, 64)    # [row, step, byte]
    want = prod.reshape(2, 8, 16, 2, 2).sum(-1).sum(1)                                     # [row, lane, half]
    assert out.reshape(2, 2, 16).transpose(1, 2, 0).tolist() == want.tolist()
    assert want[0, 0].tolist() == [-30480, -30480]


@njit
def _pairsum(u, x, a0, out):
    t = TL.tzeros(np.int32, 16, 2)
    for k in range(8):                           # a Q4_0 group-block's eight steps, summed in int16
        t = TL.tdot4p(t, W.vload_b64(u, 64 * k), TL.tload_bytes(x, 64 * k, 512, 2, 64))
    TL.tstore_f32(out, 0, 16, TL.tfloat(TL.tpairsum(TL.tsplat_i32(a0, 0, 1, 2, 1), t)))


def test_tpairsum_adds_both_int16_halves_to_the_int32_lanes():
    # lane l of row r: a0[r] + both int16 halves of a tdot4p tile (the AVX2 32-block passes'
    # unscaled finish), the halves at -30480 and +30480 in row 0 and row 1's lane 0
    rng = np.random.default_rng(9)
    u = rng.integers(0, 16, 512).astype(np.uint8)
    x = rng.integers(-127, 128, 1024).astype(np.int8)
    u[:] = np.where(np.arange(512) % 64 < 4, 15, u)
    x[:] = np.where(np.arange(1024) % 64 < 4, np.repeat([-127, 127], 512), x)
    a0 = np.array([-(1 << 20), 7], np.int32)
    out = np.empty(32, np.float32)
    _pairsum(u, x, a0, out)
    prod = u.astype(np.int64).reshape(1, 8, 64) * x.astype(np.int64).reshape(2, 8, 64)    # [row, step, byte]
    want = prod.reshape(2, 8, 16, 4).sum(-1).sum(1) + a0[:, None]                           # [row, lane]
    assert out.reshape(2, 16).tolist() == want.tolist()
    assert (want[:, 0] - a0).tolist() == [-60960, 60960]


@njit
def _bits32(w, out):
    v = S.vbits32(w)
    S.vstore(out, 0, S.vfloat(S.vdot_u8i8(v, S.vload_b32(np.ones(32, np.int8), 0))))


def test_vbits32():
    out = np.empty(8, np.float32)
    w = 0b1011_0000_0000_0001_1111_0000_1010_0110
    _bits32(w, out)
    bits = [(w >> j) & 1 for j in range(32)]
    assert out[:8].tolist() == [sum(bits[4 * l:4 * l + 4]) for l in range(8)]


# ---- every SIMD level gives the same bits ----------------------------------------------------

_LEVEL_SCRIPT = r"""
import json, sys
import numpy as np
from specnb.kernels import matmul, matmul_q8, matmul_x16, matmul_x16k, qtypes, simd
rng = np.random.default_rng(5)
out = {"level": simd.SIMD_LEVEL}
# native: each product through the drivers the forward passes call, with the passes' own
# selections (every type) and argument types, so that the kernels the suite compiled before its
# tests (tests/warm_kernels.py) serve them; a lower level: the rows kernels themselves, each with
# a selection of its own type, so that only those compile there (the drivers' prange loops would
# compile every rows kernel twice more)
native = sys.argv[2] == "native"
si, sf = matmul_q8._Q8_SEL, qtypes.type_sel(qtypes.SUPPORTED_QTYPES)
n = 11                           # more rows than a tile: the scratch-buffer passes too
x = rng.standard_normal((n, 512)).astype(np.float32)
buf = np.empty(16 * 384, np.uint8)
ahead = 256                      # prefetching 256 bytes ahead: the instruction at every level, no effect on bits
for name in sys.argv[1].split(","):
    qt = int(getattr(qtypes, name))
    w = qtypes.random_blocks(qt, 17, 512, rng)          # 17 x 512: the drivers' serial branch
    r = np.empty((n, 17), np.float32)
    f = np.empty((n, 17), np.float32)
    k = name in ("Q4_K", "Q6_K")
    if native:
        (matmul_q8._matmul_q8_k if k else matmul_q8._matmul_q8_32)(x, w, qt, r, si, ahead)
        matmul.matmul_sel(x, w, qt, f, sf)
    else:
        if k:
            qx, dx, bs = matmul_q8.pack_q8_k(x)
            accs = np.empty(matmul_q8.O_BLOCK * n * 16, np.float32)
            getattr(matmul_q8, "_rows_" + name.lower())(qx, dx, bs, w, r, 0, 17, 2, buf, accs, ahead)
        else:
            qx, d16, s16 = matmul_q8.pack_q8_32(x)
            getattr(matmul_q8, "_rows_" + name.lower())(qx, d16, s16, w, r, 0, 17, 16, buf, ahead)
        matmul._matmul_rows(x, w, qt, f, 0, 17, np.empty(512, np.float32), qtypes.type_sel([qt]))
    out[name] = [r.view(np.uint32).tolist(), f.view(np.uint32).tolist()]
    if name in ("Q4_K", "Q6_K", "Q5_0"):    # interleaved 16 rows (matmul_x16k, matmul_x16): 35
                                            # outputs (two groups and a tail), 13 rows
        w = qtypes.random_blocks(qt, 35, 512, rng)
        xi = rng.standard_normal((13, 512)).astype(np.float32)
        # the int16 sums of AVX2's passes at their bound: weight row 3's quants all 15 / 63 / 31
        # (Q5_0: its fifth bits too), against activation rows of -127 and of +127 only
        w = np.array(w)
        bb, q0, q1 = {"Q4_K": (144, 16, 144), "Q6_K": (210, 0, 192), "Q5_0": (22, 2, 22)}[name]
        for b in range(512 // (256 if k else 32)):
            w[3, bb * b + q0:bb * b + q1] = 255
        xi[2] = -1.0
        xi[4] = 1.999
        xi[4, ::256] = -2.0
        r = np.empty((13, 35), np.float32)
        q16, wx = qtypes.X16_OF[qt], matmul_x16.interleave(w, qt)
        s16 = si if native else qtypes.type_sel([q16])
        if name == "Q5_0":          # (the products alone: matmul_q8's dispatch would compile every type)
            matmul_x16.matmul_x16_by(xi, wx, q16, r, s16, ahead)
        else:
            matmul_x16k.matmul_x16k_by(xi, wx, q16, r, s16.q4_kx16, s16.q6_kx16, ahead)
        out[name + "X16"] = r.view(np.uint32).tolist()
print(json.dumps(out))
"""
LEVEL_TYPES = "Q4_K,Q6_K,Q8_0,Q4_1,Q5_0"


def _start_level(level, tmp_path):
    # the host's own level in the suite's Numba cache (tests/warm_kernels.py compiled both passes
    # there); the others, compiled afresh, each in a folder of its own
    env = dict(os.environ, SPECNB_SIMD=level)
    if level != "auto":
        env["NUMBA_CACHE_DIR"] = str(tmp_path / level)
    if level in ("avx2", "avxvnni"):    # compiled as such a CPU would: no 512-bit register anywhere
        env.update(SPECNB_SIMD="auto", NUMBA_CPU_FEATURES=S.cpu_features_for(level))
    return subprocess.Popen([sys.executable, "-c", _LEVEL_SCRIPT, LEVEL_TYPES,
                             "native" if level == "auto" else "narrow"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc):
    out, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_simd_level_gives_the_same_bits(tmp_path):
    # compiles the int8 and float32 row kernels of five types and their interleaved products afresh
    # at each lower level (a minute of one core each: the levels compile side by side, one process
    # each); the host's level takes the passes' own kernels, which the suite compiled before its
    # tests (run alone, this test compiles those first: minutes)
    lower = [lv for lv in ("avx2", "avxvnni") if lv != S.SIMD_LEVEL and S._simd_level(lv, S._FEATURES) == lv]
    levels = ["generic", *lower]
    procs = {level: _start_level(level, tmp_path) for level in ["auto", *levels]}
    native = _result(procs.pop("auto"))
    assert native["level"] == S.SIMD_LEVEL
    for level, proc in procs.items():
        got = _result(proc)
        assert got["level"] == level
        assert sorted(got) == sorted(native) and len(native) == 1 + len(LEVEL_TYPES.split(",")) + 3
        for name in set(native) - {"level"}:
            assert got[name] == native[name], (level, name)


def test_cpu_features_for_a_lower_level():
    with pytest.raises(ValueError, match="cpu_features_for\\('avx512'\\)"):
        S.cpu_features_for("avx512")
    for level in ("avx2", "avxvnni"):
        f = dict((x[1:], x[0] == "+") for x in S.cpu_features_for(level).split(","))
        assert not any(on for k, on in f.items() if k.startswith(("avx512", "amx", "evex512")))
        assert f.get("avxvnni", False) == (level == "avxvnni" and S._FEATURES.get("avxvnni", False))
        assert f.get("gfni", False) == (level == "avxvnni" and S._FEATURES.get("gfni", False))   # no Zen 3 has it
        if S._simd_level(level, S._FEATURES) == level:      # the level a process started so picks
            env = dict(os.environ, NUMBA_CPU_FEATURES=S.cpu_features_for(level))
            env.pop("SPECNB_SIMD", None)
            out = subprocess.run([sys.executable, "-c", "from specnb.kernels import simd; print(simd.SIMD_LEVEL)"],
                                 env=env, capture_output=True, text=True, timeout=300)
            assert out.stdout.split() == [level], out.stderr[-2000:]


def test_simd_level_choice():
    feats = {"avx2": True, "avx512f": True, "avx512bw": True, "avx512vl": True, "avx512vnni": True}
    assert S._simd_level("auto", feats) == "avx512"
    assert S._simd_level("avx2", feats) == "avx2"
    assert S._simd_level("avxvnni", feats) == "avxvnni"             # AVX512-VL runs the 256-bit VNNI
    alder = {"avx2": True, "avxvnni": True}                         # Intel Core 12th generation on
    assert S._simd_level("auto", alder) == "avxvnni"
    assert S._simd_level("avx512", alder) == "avxvnni"
    assert S._simd_level("avx2", alder) == "avx2"
    assert S._simd_level("avxvnni", {"avx2": True}) == "avx2"
    assert S._simd_level("generic", feats) == "generic"
    assert S._simd_level("auto", {"avx2": True}) == "avx2"
    assert S._simd_level("avx512", {"avx2": True}) == "avx2"       # never more than the CPU has
    assert S._simd_level("auto", {}) == "generic"                  # e.g. an ARMv8.0 CPU
    arm = {"neon": True, "dotprod": True}
    assert S._simd_level("auto", dict(arm, i8mm=True)) == "neon-i8mm"  # Apple M2+, Graviton 3
    assert S._simd_level("auto", arm) == "neon"                     # Apple M1, Graviton 2
    assert S._simd_level("auto", {"neon": True}) == "generic"       # ARMv8.0: no dotprod
    assert S._simd_level("neon-i8mm", dict(arm, i8mm=True)) == "neon-i8mm"   # Apple M2+, Graviton 3
    assert S._simd_level("neon-i8mm", arm) == "neon"                # Apple M1, Graviton 2
    assert S._simd_level("neon", dict(arm, i8mm=True)) == "neon"
    assert S._simd_level("neon-i8mm", arm) == "neon"
    assert S._simd_level("generic", arm) == "generic"
    assert S._simd_level("avx2", arm) == "generic"                  # another architecture's level
    assert S._simd_level("neon", feats) == "generic"
    with pytest.raises(ValueError, match="SPECNB_SIMD='sse9'"):
        S._simd_level("sse9", feats)


def test_the_arm_compile_target_gets_the_reported_features(monkeypatch):
    # aarch64 under qemu-user or on macOS: LLVM's own view lacks dotprod / i8mm, so Numba's compile
    # target is given the features the CPU reported, before its first kernel is compiled
    from numba.core import config, registry
    arm = {"neon": True, "dotprod": True, "i8mm": True, "sve": False}
    target = registry.CPUTarget("cpu")                  # a target whose context is not made yet
    monkeypatch.setattr(registry, "cpu_target", target)
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    assert S._arm_compile_target("neon-i8mm", arm) == "neon-i8mm"
    assert config.CPU_FEATURES == "+neon,+dotprod,+i8mm"
    # the user's own NUMBA_CPU_FEATURES wins, and the level follows it
    monkeypatch.setattr(config, "CPU_FEATURES", "+neon,+dotprod")
    assert S._arm_compile_target("neon-i8mm", arm) == "neon"
    assert config.CPU_FEATURES == "+neon,+dotprod"
    monkeypatch.setattr(config, "CPU_FEATURES", "+neon")
    assert S._arm_compile_target("neon", arm) == "generic"
    # a target made before specnb's kernels were imported keeps LLVM's view (none here: x86)
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    monkeypatch.setitem(vars(target), "_toplevel_target_context", object())
    assert S._arm_compile_target("neon-i8mm", arm) == "generic"
    assert config.CPU_FEATURES is None


@pytest.mark.parametrize("first", ["specnb.kernels.qtypes", "specnb.kernels.matmul_q8", "specnb.run.backend_cpu",
                                   "specnb.app.cli", "specnb.speculative_simple", "numba.typed.typedlist"])
def test_the_simd_level_is_settled_before_numba_makes_its_target(first):
    # the first Numba function a process makes (a kernel's njit, numba.typed's) builds Numba's
    # compile target; simd.py must run before that, or on aarch64 under qemu-user or macOS the
    # NEON levels fall back to generic (the CPU's features reach the target too late). So every
    # entry point imports the kernels, and the kernels simd.py, first. (numba.typed's List
    # imported first, outside specnb: the case this guards against.)
    code = f"import {first}; from specnb.kernels import simd; print(simd.TARGET_MADE_FIRST)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == ("True" if first.startswith("numba") else "False"), first


@pytest.mark.parametrize("i8mm", [False, True])
def test_the_neon_dot_products_compile_for_aarch64(monkeypatch, i8mm):
    # on any host: the IR of the neon levels (simd.neon_dot4) through LLVM's AArch64 back end
    # (the bits are checked on aarch64 under emulation: tests/aarch64/run.sh, docs/aarch64.md)
    import llvmlite.binding as llvm
    from llvmlite import ir
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    monkeypatch.setattr(S, "_I8MM", i8mm)
    m = ir.Module()
    m.triple = "aarch64-unknown-linux-gnu"
    v16, v4 = ir.VectorType(ir.IntType(8), 16), ir.VectorType(ir.IntType(32), 4)
    f = ir.Function(m, ir.FunctionType(v4, [v4, v16, v16]), "f")
    b = ir.IRBuilder(f.append_basic_block())
    b.ret(S.neon_dot4(b, S.neon_dot4(b, f.args[0], f.args[1], f.args[2], False), f.args[1], f.args[2], True))
    mod = llvm.parse_assembly(str(m))
    mod.verify()
    tm = llvm.Target.from_triple(m.triple).create_target_machine(
        cpu="generic", features="+neon,+dotprod" + (",+i8mm" if i8mm else ""))
    asm = tm.emit_assembly(mod)
    assert "sdot" in asm and ("usdot" in asm) == i8mm
