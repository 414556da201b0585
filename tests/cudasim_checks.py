"""Checks of the CUDA kernels and the CUDA backend without a GPU, one named group per run:

    NUMBA_ENABLE_CUDASIM=1 python tests/cudasim_checks.py GROUP      (GROUP: see GROUPS below)
    python tests/cudasim_checks.py ptx                                (real NVVM, no GPU needed)

Each group prints one line per check and exits 0, or exits 1 with a readable message on the first
failure (77: the group cannot run here and is skipped). tests/test_cuda_sim.py runs every group in
its own process, so that the pytest process keeps real njit kernels: the simulator replaces
numba.cuda for the whole process it runs in.

Under the simulator every CUDA thread is a Python thread: shapes are tiny, and the simulator's
launch shapes of the backend (one thread per output row) differ from a GPU's; the kernel groups
cover the other block sizes (32, 48, 64, 96 threads: 48 and 96 divide no power of two, and the
problems are sized so that they divide none of them).

Tolerances (float32 kernels, different summation orders than the CPU, so not bit for bit):
  - dequantization (embedding rows): bit-exact against gguf.quants.dequantize (as the CPU's);
  - quantized matmul: |cuda - matmul_ref| <= 2e-6 * (|x| @ |W|^T) elementwise (matmul_ref sums
    in float64; 2e-6 is a few float32 ulps of the sum of absolute products);
  - RMSNorm, rope, SwiGLU: <= 1e-6 relative; attention: <= 1e-5 of max |v|;
  - whole decode of a tiny forged model against the CPU backend: max |logit diff| <= 1e-4 * max
    |logit| and identical argmax at every position;
  - batch invariance (matmul and whole decode): bit-identical.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GROUPS = ("kernels", "quant", "invariance", "fused", "launches", "decode", "state", "speculative",
          "device_script", "ptx")
SKIP = 77
BLOCKS = (32, 48, 64, 96)


class CheckFailed(Exception):
    pass


_T = [time.perf_counter()]


def check(ok, what):
    if not ok:
        raise CheckFailed(what)
    t = time.perf_counter()
    print(f"  ok  {what}  [{t - _T[0]:.1f} s]", flush=True)
    _T[0] = t


def rel_close(got, ref, tol, scale=None):
    scale = np.abs(ref).max() if scale is None else scale
    err = float(np.abs(np.asarray(got, np.float64) - ref).max()) if np.size(ref) else 0.0
    return err <= tol * scale + 1e-30, err / (scale + 1e-30)


# ---- kernels ------------------------------------------------------------------------------------

def group_kernels():
    from numba import cuda

    from specnb.kernels import activations as A
    from specnb.kernels import attention as At
    from specnb.kernels import norm as N
    from specnb.kernels import rope as R
    rng = np.random.default_rng(0)
    d = cuda.to_device

    # every CUDA kernel against the NumPy reference (the CPU kernels are checked against the same
    # references in tests/test_kernels.py, outside the simulator)
    # RMSNorm: 3 rows of 100 (no block size divides 100), and a gather of rows (2, 0)
    x = rng.standard_normal((3, 100)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(100)).astype(np.float32)
    ref = N.rmsnorm_ref(x, w, 1e-5)
    for T in (1,) + BLOCKS:
        out = cuda.device_array((2, 100), np.float32)
        N.rmsnorm_cuda(d(x), d(w), 1e-5, out, rows=d(np.array([2, 0])), threads=T)
        ok, err = rel_close(out.copy_to_host(), ref[[2, 0]], 1e-6)
        check(ok, f"rmsnorm, {T} threads, rows (2, 0): rel err {err:.1e}")

    # rope, both modes, 3 tokens x 3 heads x 10 dims (n_rot 8: the last 2 pass through)
    pos = np.array([0, 7, 300])
    cos, sin = R.rope_angles(pos, 8, 10000.0, 1.0, None)
    for mode in (R.ROPE_NORM, R.ROPE_NEOX):
        x = rng.standard_normal((3, 3, 10)).astype(np.float32)
        ref = R.rope_ref(x, cos, sin, mode)
        for T in (1, 32, 48):
            xd = d(x)
            R.rope_cuda(xd, d(cos), d(sin), mode, threads=T, blocks=1 if T == 1 else None)
            got = xd.copy_to_host()
            ok, err = rel_close(got, ref, 1e-6)
            check(ok, f"rope mode {mode}, {T} threads: rel err {err:.1e}")

    # attention: 2 sequences, holes in the valid mask, grouped KV heads (4 heads on 2)
    n_ctx, hd, nh, nkv = 9, 8, 4, 2
    kc = rng.standard_normal((2, n_ctx, nkv * hd)).astype(np.float32)
    vc = rng.standard_normal((2, n_ctx, nkv * hd)).astype(np.float32)
    valid = rng.random((2, n_ctx)) < 0.7
    seq, pos = np.array([0, 1, 1, 0]), np.array([8, 3, 6, 0])
    valid[seq, pos] = True
    q = rng.standard_normal((4, nh, hd)).astype(np.float32)
    ref = At.attention_ref(q, kc.reshape(2, n_ctx, nkv, hd), vc.reshape(2, n_ctx, nkv, hd),
                           valid, seq, pos, nkv)
    for T in (1,) + BLOCKS:
        out = cuda.device_array(q.shape, np.float32)
        scratch = cuda.device_array((4 * nh, n_ctx), np.float32)
        At.attention_cuda(d(q), d(kc), d(vc), d(valid), d(seq), d(pos), nkv, scratch, out,
                          threads=T)
        ok, err = rel_close(out.copy_to_host(), ref, 1e-5, np.abs(vc).max())
        check(ok, f"attention, {T} threads: err {err:.1e} of max |v|")
    kd, vd = d(np.zeros_like(kc)), d(np.zeros_like(vc))
    kn = rng.standard_normal((4, nkv * hd)).astype(np.float32)
    At.kv_store_cuda(d(kn), d(-kn), kd, vd, d(seq), d(pos), threads=32)
    expect = np.zeros_like(kc)
    expect[seq, pos] = kn
    check(np.array_equal(kd.copy_to_host(), expect) and np.array_equal(vd.copy_to_host(), -expect),
          "kv_store writes each row at (seq, pos)")

    # SwiGLU 3 x 100
    g = (3 * rng.standard_normal((3, 100))).astype(np.float32)
    u = rng.standard_normal((3, 100)).astype(np.float32)
    ref = A.swiglu_ref(g, u)
    for T in (1, 32, 48):
        out = cuda.device_array(g.shape, np.float32)
        A.swiglu_into_cuda(d(g), d(u), out, threads=T, blocks=1 if T == 1 else None)
        ok, err = rel_close(out.copy_to_host(), ref, 1e-6)
        check(ok, f"swiglu, {T} threads: rel err {err:.1e}")


# ---- quantized matmul ---------------------------------------------------------------------------

def _qc():
    # the CUDA twins of the matrix products
    from specnb.kernels import matmul_cuda
    return matmul_cuda


def group_quant():
    # references: gguf's NumPy dequantization and quant.matmul_ref (float64 sums), which need no
    # compiled CPU kernel
    import gguf
    from numba import cuda

    from specnb.kernels import matmul as M, qtypes as Q          # (types, random blocks, matmul_ref)
    qc = _qc()
    rng = np.random.default_rng(1)
    d = cuda.to_device
    for i, qt in enumerate(sorted(Q.SUPPORTED_QTYPES, key=Q.qtype_name)):
        name = Q.qtype_name(qt)
        big = qt in Q.K_QTYPES
        n_in = {Q.F32: 37, Q.F16: 37, Q.BF16: 38}.get(qt, 512 if big else 64)  # odd rows too
        n_out = 5
        w = Q.random_blocks(qt, n_out, n_in, rng)
        dw = qc.upload_weight(w, qt, n_in)
        ids = np.array([4, 0, 3])
        got = cuda.device_array((3, n_in), np.float32)
        qc.dequant_rows_cuda(dw, d(ids), got, threads=32)
        wd = np.asarray(gguf.quants.dequantize(w, gguf.GGMLQuantizationType(qt)),
                        np.float32).reshape(n_out, n_in)
        deq = wd[ids]
        check(np.array_equal(got.copy_to_host().view(np.uint32), deq.view(np.uint32)),
              f"{name}: embedding rows bit-exact against gguf.quants.dequantize")
        # block sizes: one thread per row, 48 (a non-divisor) and one of 32 / 64 / 96
        for tg, r in ((1, 4), (48, 1), ((32, 64, 96)[i % 3], 2)):
            for n_rows in ((1, 11) if tg == 48 else (3,)):
                x = rng.standard_normal((n_rows, n_in)).astype(np.float32)
                ref = M.matmul_ref(x, w, qt, n_in)
                scale = np.abs(x) @ np.abs(wd).T
                out = cuda.device_array((n_rows, n_out), np.float32)
                qc.matmul_cuda(d(x), dw, out, threads=tg, rows_per_block=r)
                err = np.abs(out.copy_to_host() - ref) / scale
                check(err.max() <= 2e-6, f"{name}: matmul {n_rows}x{n_in} @ {n_out}x{n_in}^T, "
                                         f"{tg} threads/row x {r} rows/block: err {err.max():.1e}")
        # bias and accumulate (the qwen2 Q/K/V biases, the residual adds)
        x = rng.standard_normal((2, n_in)).astype(np.float32)
        b = rng.standard_normal(n_out).astype(np.float32)
        y0 = rng.standard_normal((2, n_out)).astype(np.float32)
        o1, o2 = cuda.device_array((2, n_out), np.float32), d(y0)
        qc.matmul_cuda(d(x), dw, o1, threads=32)
        qc.matmul_cuda(d(x), dw, o2, threads=32, accumulate=True)
        o3 = cuda.device_array((2, n_out), np.float32)
        qc.matmul_cuda(d(x), dw, o3, bias=d(b), threads=32)
        p = o1.copy_to_host()
        check(np.array_equal(o2.copy_to_host(), y0 + p)
              and np.array_equal(o3.copy_to_host(), p + b),
              f"{name}: accumulate (out += x W^T) and bias (x W^T + b) add exactly once")
    dw = qc.upload_weight(Q.random_blocks(Q.Q4_0, 5, 64, rng), Q.Q4_0, 64)
    try:
        qc.matmul_cuda(d(np.ones((3, 64), np.float32)), dw, cuda.device_array((3, 5), np.float32),
                       scratch=cuda.device_array(100, np.float32))
        refused = ""
    except ValueError as e:
        refused = str(e)
    check("scratch of 100 floats; 192 needed" in refused, f"a scratch too small is refused: {refused!r}")
    r = qc.matmul_bandwidth(((3, 64),), (Q.Q4_0,), reps=1, peak_gbs=4800.0)
    check(len(r) == 1 and {"type", "n_out", "n_in", "us", "gbs", "frac_peak", "host_us"} <= set(r[0])
          and qc.launch_floor(reps=2) > 0,
          "matmul_bandwidth and launch_floor run (their timings mean nothing under the simulator)")


def group_invariance():
    from numba import cuda

    from specnb.kernels import qtypes as Q
    qc = _qc()
    rng = np.random.default_rng(2)
    d = cuda.to_device
    for qt in (Q.Q4_0, Q.Q8_0, Q.Q6_K, Q.F16):
        name = Q.qtype_name(qt)
        n_in = 256 if qt == Q.Q6_K else 96
        w = Q.random_blocks(qt, 3, n_in, rng)
        dw = qc.upload_weight(w, qt, n_in)
        x = rng.standard_normal((11, n_in)).astype(np.float32)
        for tg in (1, 48):
            full = cuda.device_array((11, 3), np.float32)
            qc.matmul_cuda(d(x), dw, full, threads=tg, rows_per_block=2)
            full = full.copy_to_host()
            perm = rng.permutation(11)
            shuf = cuda.device_array((11, 3), np.float32)
            qc.matmul_cuda(d(x[perm]), dw, shuf, threads=tg, rows_per_block=2)
            same = np.array_equal(shuf.copy_to_host(), full[perm])
            for r in (0, 7, 8, 10):        # first, last of a pass, first of the next, last
                one = cuda.device_array((1, 3), np.float32)
                qc.matmul_cuda(d(x[r:r + 1]), dw, one, threads=tg, rows_per_block=2)
                same = same and np.array_equal(one.copy_to_host()[0], full[r])
            check(same, f"{name}, {tg} threads/row: rows alone, shuffled and in an 11-row "
                        f"batch give identical bits")


# ---- the fused steps and grouped products (kernels/fused_cuda.py, DeviceWeight.group) ----------

def _permuted(qc, x, order):
    # x [n, d] (device) permuted into the element order of `order` (matmul_cuda's own kernel)
    from numba import cuda
    n, d = x.shape
    out = cuda.device_array(n * d, np.float32)
    qc.cuda_kernels(order)[2][1, 1](x.reshape(n * d), d, n, d // qc.TYPES[order].K, out)
    return out.copy_to_host()


def group_fused():
    """Each fused step == the one-operation twins it replaces, bit for bit; a group's product ==
    its matrices multiplied one by one, bit for bit."""
    from numba import cuda

    from specnb.kernels import activations as A
    from specnb.kernels import attention as At
    from specnb.kernels import fused_cuda as F
    from specnb.kernels import norm as N
    from specnb.kernels import qtypes as Q
    from specnb.kernels import rope as R
    qc = _qc()
    rng = np.random.default_rng(5)
    d = cuda.to_device
    bits = np.ndarray.view

    # prep: RMSNorm (or none) of gathered rows, in one to three element orders at once
    x = rng.standard_normal((3, 256)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(256)).astype(np.float32)
    rows = np.array([2, 0])
    for orders in ((Q.Q4_K, Q.Q6_K), (Q.Q8_0,), (Q.F32, Q.Q4_0, Q.Q2_K)):
        for T in (1, 32, 48):
            for norm in (True, False):
                xp = cuda.device_array(2 * 256 * len(orders), np.float32)
                F.prep_call(orders, d(x), d(rows), d(w) if norm else None, 1e-5, xp, T)()
                ref = cuda.device_array((2, 256), np.float32)
                if norm:
                    N.rmsnorm_cuda(d(x), d(w), 1e-5, ref, rows=d(rows), threads=T)
                else:
                    ref = d(x[rows])
                want = np.concatenate([_permuted(qc, ref, o) for o in orders])
                check(np.array_equal(bits(xp.copy_to_host(), np.uint32), bits(want, np.uint32)),
                      f"prep {'RMSNorm' if norm else 'as is'}, orders "
                      f"{[Q.qtype_name(o) for o in orders]}, {T} threads == rmsnorm_cuda + "
                      f"permutations, bit for bit")

    # act: SwiGLU of gate | up in the down matrix's order
    gu = (3 * rng.standard_normal((3, 2 * 256))).astype(np.float32)
    for order in (Q.Q6_K, Q.Q4_0, Q.F32):
        for T, blocks in ((1, 1), (32, None)):        # (the simulator's grid, a GPU's)
            xp = cuda.device_array(3 * 256, np.float32)
            F.act_call(order, d(gu), 256, xp, T)()
            ref = cuda.device_array((3, 256), np.float32)
            A.swiglu_into_cuda(d(np.ascontiguousarray(gu[:, :256])),
                               d(np.ascontiguousarray(gu[:, 256:])), ref, threads=T, blocks=blocks)
            check(np.array_equal(bits(xp.copy_to_host(), np.uint32),
                                 bits(_permuted(qc, ref, order), np.uint32)),
                  f"act in {Q.qtype_name(order)}'s order, {T} threads == swiglu_into_cuda + "
                  f"permutation, bit for bit")

    # rope_kv: Q and K rotated (n_rot 8 of head_dim 10), K and V stored at (seq, pos)
    n, nh, nkv, hd, n_ctx = 3, 4, 2, 10, 9
    seq, pos = np.array([1, 0, 1]), np.array([4, 0, 8])
    cos, sin = R.rope_angles(pos, 8, 10000.0, 1.0, None)
    for mode in (R.ROPE_NORM, R.ROPE_NEOX):
        qkv = rng.standard_normal((n, (nh + 2 * nkv) * hd)).astype(np.float32)
        q = cuda.device_array((n, nh, hd), np.float32)
        kc, vc = d(np.zeros((2, n_ctx, nkv * hd), np.float32)), d(np.zeros((2, n_ctx, nkv * hd), np.float32))
        F.rope_kv_call(d(qkv), nh * hd, nkv * hd, d(cos), d(sin), mode, q, kc, vc, d(seq), d(pos),
                       32)()
        qr = d(np.ascontiguousarray(qkv[:, :nh * hd]).reshape(n, nh, hd))
        kr = d(np.ascontiguousarray(qkv[:, nh * hd:(nh + nkv) * hd]).reshape(n, nkv, hd))
        R.rope_cuda(qr, d(cos), d(sin), mode, threads=32)
        R.rope_cuda(kr, d(cos), d(sin), mode, threads=32)
        kw, vw = d(np.zeros((2, n_ctx, nkv * hd), np.float32)), d(np.zeros((2, n_ctx, nkv * hd), np.float32))
        At.kv_store_cuda(kr.reshape(n, nkv * hd), d(np.ascontiguousarray(qkv[:, (nh + nkv) * hd:])),
                         kw, vw, d(seq), d(pos), threads=32)
        same = all(np.array_equal(bits(a.copy_to_host(), np.uint32), bits(b.copy_to_host(), np.uint32))
                   for a, b in ((q, qr), (kc, kw), (vc, vw)))
        check(same, f"rope_kv mode {mode} == rope_cuda on Q and K + kv_store_cuda, bit for bit")

    # a group's product == each matrix alone (bias and accumulate too), mixed types
    for types, n_in in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 256), ((Q.Q5_0, Q.Q8_0), 64), ((Q.F16,), 37)):
        n_outs = [5, 3, 2][:len(types)]
        ws = [Q.random_blocks(t, no, n_in, rng) for t, no in zip(types, n_outs)]
        g = qc.DeviceWeight.group(list(zip(ws, types)), n_in)
        x = rng.standard_normal((3, n_in)).astype(np.float32)
        b = rng.standard_normal(sum(n_outs)).astype(np.float32)
        y0 = rng.standard_normal((3, sum(n_outs))).astype(np.float32)
        for tg, r in ((1, 4), (48, 1), (32, 2)):
            got = d(y0)
            qc.matmul_cuda(d(x), g, got, bias=d(b), accumulate=True, threads=tg, rows_per_block=r)
            parts, c = [], 0
            for wt, t, no in zip(ws, types, n_outs):
                one = d(np.ascontiguousarray(y0[:, c:c + no]))
                qc.matmul_cuda(d(x), qc.upload_weight(wt, t, n_in), one, bias=d(b[c:c + no]),
                               accumulate=True, threads=tg, rows_per_block=r)
                parts.append(one.copy_to_host())
                c += no
            check(np.array_equal(bits(got.copy_to_host(), np.uint32),
                                 bits(np.concatenate(parts, 1), np.uint32)),
                  f"group {[Q.qtype_name(t) for t in types]}, {tg} threads/row x {r} rows/block "
                  f"== each matrix alone (bias, accumulate), bit for bit")


# ---- compiling for a real GPU -------------------------------------------------------------------

def group_ptx():
    """Compile every CUDA kernel to PTX for sm_90 with NVVM (no GPU needed) and, with ptxas at
    hand, check the matmul kernels keep their accumulators in registers (no local memory)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise CheckFailed("the ptx group needs the real numba-cuda: run it without the simulator")
    os.environ.setdefault("NUMBA_FORCE_CUDA_CC", "9.0")
    try:
        from numba.cuda import cuda_paths
        from numba.cuda.cudadrv import nvvm
        nvvm.NVVM()
    except Exception as e:
        print(f"SKIP: no NVVM here ({type(e).__name__}: {str(e)[:120]})")
        sys.exit(SKIP)
    try:          # NVVM alone is enough to compile; numba-cuda still looks NVRTC up on the way
        cuda_paths._get_nvrtc_path()
    except Exception:
        cuda_paths._get_nvrtc_path = lambda: ("unavailable", None)
    from numba import cuda
    from numba import types as T

    from specnb.kernels import activations as A
    from specnb.kernels import attention as At
    from specnb.kernels import norm as N
    from specnb.kernels import qtypes as Q
    from specnb.kernels import rope as R
    qc = _qc()

    def arr(dt, nd):
        return T.Array(dt, nd, "C")
    f32, f64, i64, b1 = T.float32, T.float64, T.int64, T.boolean
    sigs = {
        "rmsnorm": (N.rmsnorm_cuda_kernel, (arr(f32, 2), arr(i64, 1), arr(f32, 1), f64,
                                            arr(f32, 2))),
        "rope": (R.rope_cuda_kernel, (arr(f32, 3), arr(f64, 2), arr(f64, 2), i64)),
        "attention": (At.attention_cuda_kernel, (arr(f32, 3), arr(f32, 3), arr(f32, 3), arr(b1, 2),
                                                 arr(i64, 1), arr(i64, 1), i64, arr(f32, 2),
                                                 arr(f32, 3))),
        "kv_store": (At.kv_store_cuda_kernel, (arr(f32, 2),) * 2 + (arr(f32, 3),) * 2
                     + (arr(i64, 1),) * 2),
        "swiglu": (A.swiglu_into_cuda_kernel, (arr(f32, 2),) * 3),
        "bench's spin": (qc._spin_kernel, (i64,)),
        "bench's empty kernel": (qc._empty_kernel, (arr(f32, 1),)),
    }
    from specnb.kernels import fused_cuda as F
    sigs["rope + KV store"] = (F.rope_kv_kernel, (arr(f32, 2), i64, i64, arr(f64, 2), arr(f64, 2), i64,
                                                  arr(f32, 3), arr(f32, 3), arr(f32, 3), arr(i64, 1),
                                                  arr(i64, 1)))
    w = (arr(T.uint32, 1), arr(T.float16, 1), arr(f32, 1))
    quick = os.environ.get("SPECNB_PTX_TYPES")
    types = [getattr(Q, t) for t in quick.split(",")] if quick else sorted(Q.SUPPORTED_QTYPES)
    product = w + (arr(i64, 2), arr(f32, 1), i64, arr(f32, 1), i64, arr(f32, 1), i64)
    # the products of single types, and of the mixed groups of the real pair's Q|K|V (Q4_K with
    # Q6_K, Q5_0 with Q8_0), the most types one launch decodes
    groups = [(t,) for t in types] + [(Q.Q4_K, Q.Q6_K), (Q.Q5_0, Q.Q8_0), (Q.Q4_K, Q.Q6_K, Q.Q8_0)]
    for g in groups:
        sigs[f"product {'+'.join(Q.qtype_name(t) for t in g)}"] = (qc.product_kernel(g), product)
    for qt in types:
        n = Q.qtype_name(qt)
        _, _, perm, rows = qc.cuda_kernels(qt)
        if qt == types[0]:
            sigs[f"permute {n}"] = (perm, (arr(f32, 1), i64, i64, i64, arr(f32, 1)))
            sigs[f"rows {n}"] = (rows, w + (i64, arr(i64, 1), i64, i64, arr(f32, 1)))
    orders = sorted({qc.order_of(t) for t in types})
    for o in orders:
        sigs[f"act {Q.qtype_name(o)}"] = (F.act_kernel(o), (arr(f32, 2), i64, arr(f32, 1)))
    for og in ([orders[0]], orders[:3]):
        key = tuple(og)
        sigs[f"prep {'+'.join(Q.qtype_name(o) for o in key)}"] = (
            F.prep_kernel(key), (arr(f32, 2), arr(i64, 1), arr(f32, 1), f64, i64, arr(f32, 1)))
    ptxas = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (kern, sig) in sigs.items():
            t0 = time.perf_counter()
            ptx, _ = cuda.compile_ptx(kern.py_func, sig, cc=(9, 0))
            info = ""
            if os.path.exists(ptxas):
                f = Path(tmp) / "k.ptx"
                f.write_text(ptx)
                r = subprocess.run([ptxas, "-arch=sm_90", "-v", str(f), "-o", os.devnull],
                                   capture_output=True, text=True)
                if r.returncode:
                    raise CheckFailed(f"ptxas rejects {name}: {r.stderr[-500:]}")
                used = [ln.split(":", 1)[-1].strip() for ln in r.stderr.splitlines()
                        if "Used" in ln or "stack frame" in ln]
                info = "; ".join(used)
                if name.startswith("product") and "0 bytes stack frame" not in info:
                    raise CheckFailed(f"{name} uses local memory (accumulators not in registers): "
                                      f"{info}")
            check(True, f"{name}: PTX for sm_90 ({time.perf_counter() - t0:.1f} s) {info}")


def main(argv):
    if len(argv) != 2 or argv[1] not in GROUPS:
        print(__doc__)
        print(f"groups: {', '.join(GROUPS)}")
        return 2
    if argv[1] != "ptx":
        if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
            print("set NUMBA_ENABLE_CUDASIM=1 (before Python starts) to run this group")
            return 2
        # the simulator's barrier waits poll under the GIL: a short switch interval speeds it up
        sys.setswitchinterval(1e-4)
    t0 = time.perf_counter()
    print(f"cudasim_checks {argv[1]}:", flush=True)
    # the backend's groups live in cudasim_backend.py, which takes `check` from this module
    sys.modules.setdefault("cudasim_checks", sys.modules[__name__])
    import cudasim_backend
    group = globals().get(f"group_{argv[1]}") or getattr(cudasim_backend, f"group_{argv[1]}")
    try:
        group()
    except CheckFailed as e:
        print(f"FAIL {e}", flush=True)
        return 1
    print(f"{argv[1]}: all checks passed in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
