"""SwiGLU, argmax and top-k: the small elementwise and reduction kernels.

llama.cpp: ggml_swiglu (silu(gate) * up) in the feed-forward block; the greedy sampler's argmax
and the top-k sampler in src/llama-sampler.cpp.

SwiGLU computes silu in float64 (as the NumPy reference does) with its own exponential, `vexp64`:
a polynomial written with the explicit-SIMD layer, 8 lanes at a time; the scalar tail runs the
same vector code on one lane, so every element gets the same value wherever it sits (batch
invariance). Its error is within 2 ulp of float64 (the result is rounded to float32 after).
"""
import math

import numpy as np
from numba import njit, prange

from .simd import vbits_f64, vclamp, vfirst, vfloor, vhmax, vload, vload_f64, vmax, vsplat64, vstore, vto_f32, vto_i64

LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01       # ln 2 split in two (Cody and Waite): k * LN2_HI is exact
LN2_LO = 1.90821492927058770002e-10
EXP_MIN, EXP_MAX = -708.0, 709.0          # the arguments whose 2^k stays a normal float64
# Taylor coefficients 1/12! .. 1/0! for e^r on |r| <= ln2 / 2
_C = tuple(1.0 / math.factorial(k) for k in range(12, -1, -1))


def swiglu_ref(gate, up):
    # [n, n_ff], [n, n_ff] -> [n, n_ff]
    g = gate.astype(np.float64)
    return (g / (1.0 + np.exp(-g)) * up).astype(np.float32)


@njit(fastmath=False, inline="always")
def vexp64(x):
    # float64 e^x of each f64x8 lane, x clamped to [EXP_MIN, EXP_MAX]: e^x = 2^k e^r with
    # k = round(x / ln 2), r = x - k ln 2, e^r by its Taylor polynomial (Horner)
    x = vclamp(x, EXP_MIN, EXP_MAX)
    k = vfloor(x * LOG2E + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    p = r * _C[0] + _C[1]
    p = p * r + _C[2]
    p = p * r + _C[3]
    p = p * r + _C[4]
    p = p * r + _C[5]
    p = p * r + _C[6]
    p = p * r + _C[7]
    p = p * r + _C[8]
    p = p * r + _C[9]
    p = p * r + _C[10]
    p = p * r + _C[11]
    p = p * r + _C[12]
    return p * vbits_f64((vto_i64(k) + 1023) << 52)


@njit(fastmath=False, inline="always")
def exp64(x):
    # the same for one float64 (lane 0 of a vector): the scalar tails get the vector's values
    return vfirst(vexp64(vsplat64(x)))


@njit(fastmath=False, inline="always")
def _swiglu_row(g, u, o, f):
    # o[:f] = float32(silu(float64(g))) * u, 8 at a time, then the tail
    f8 = f - f % 8
    for i in range(0, f8, 8):
        x = vload_f64(g, i)
        vstore(o, i, vto_f32(x / (vexp64(x * -1.0) + 1.0)) * vload(u, i))
    for i in range(f8, f):
        x = np.float64(g[i])
        o[i] = np.float32(x / (exp64(-x) + 1.0)) * u[i]


# below this many elements a call runs on the calling thread (one row of a 0.5B's 4864-wide or a
# 1.5B's 8960-wide feed-forward is split between the threads: 7.5 -> 6.0 us and 13.8 -> 10.3 us on
# a Zen 4; a 1536-wide row is not worth starting them)
SERIAL_MAX_ELEMENTS = 1 << 12
# elements per parallel work item (a multiple of 8: only a row's last item has a scalar tail)
_CHUNK = 1024


@njit(fastmath=False, cache=True, parallel=True)
def _swiglu_parallel(gate, up, out, u0):
    # the rows cut into items of _CHUNK elements, the items shared among the threads: every
    # element gets the value _swiglu_row gives it (the vector code and its one-lane tail agree)
    n, f = out.shape
    per_row = (f + _CHUNK - 1) // _CHUNK
    for item in prange(n * per_row):
        t, c = item // per_row, item % per_row
        lo = c * _CHUNK
        hi = min(lo + _CHUNK, f)
        _swiglu_row(gate[t, lo:hi], up[t, u0 + lo:u0 + hi], out[t, lo:hi], hi - lo)


@njit(fastmath=False, cache=True)
def swiglu_into(gate, up, out, u0=0):
    # out [n, n_ff] = silu(gate[:, :n_ff]) * up[:, u0:u0 + n_ff]; returns out. out may be gate
    # itself (the forward passes' swiglu_into(g, u, g): g overwritten in place); gate and up may
    # be one array [n, 2 n_ff], gate's columns then up's, with u0 = n_ff (one product of the two
    # matrices stacked: kernels/forward.py)
    n, f = out.shape
    if n * f > SERIAL_MAX_ELEMENTS:
        _swiglu_parallel(gate, up, out, u0)
    else:
        for t in range(n):
            _swiglu_row(gate[t, :f], up[t, u0:u0 + f], out[t], f)
    return out


@njit(cache=True)
def argmax(logits):
    # [n_vocab] contiguous -> index of the first maximum, as llama.cpp's greedy sampler finds it
    # (keep the first, replace it by any greater: NaNs are never taken, and a NaN first stays)
    n = logits.shape[0]
    bv = logits[0]
    if n < 64 or bv != bv:
        best = 0
        for i in range(1, n):
            if logits[i] > bv:
                bv = logits[i]
                best = i
        return best
    # the maximum first, in 4 x 8 lanes (maxnum skips NaNs as the comparison does), then the first
    # index holding it: a third of the time of one compare-and-branch chain over 152k logits
    m0, m1, m2, m3 = vload(logits, 0), vload(logits, 8), vload(logits, 16), vload(logits, 24)
    i = 32
    while i + 32 <= n:
        m0, m1 = vmax(m0, vload(logits, i)), vmax(m1, vload(logits, i + 8))
        m2, m3 = vmax(m2, vload(logits, i + 16)), vmax(m3, vload(logits, i + 24))
        i += 32
    m = vhmax(vmax(vmax(m0, m1), vmax(m2, m3)))
    for j in range(i, n):
        if logits[j] > m:
            m = logits[j]
    for j in range(n):
        if logits[j] == m:
            return j
    return 0


@njit(cache=True)
def topk(logits, k):
    # [n_vocab] -> (ids [k], values [k]) sorted by value descending, ties by lower id first
    n = logits.shape[0]
    k = min(k, n)
    ids = np.empty(k, dtype=np.int64)
    vals = np.empty(k, dtype=logits.dtype)
    m = 0
    for i in range(n):
        v = logits[i]
        if m == k and v <= vals[k - 1]:
            continue
        j = m if m < k else k - 1
        while j > 0 and vals[j - 1] < v:
            if j < k:
                vals[j] = vals[j - 1]
                ids[j] = ids[j - 1]
            j -= 1
        vals[j] = v
        ids[j] = i
        if m < k:
            m += 1
    return ids, vals


# ---- CUDA ------------------------------------------------------------------------------------
# SwiGLU on a GPU (numba-cuda): one thread per element, silu in float64 with libdevice's exp of
# the clamped argument (the CUDA backend samples on the host, from the logits it copies back).
from numba import cuda  # noqa: E402


@cuda.jit
def swiglu_into_cuda_kernel(gate, up, out):
    # out [n, n_ff] = silu(gate) * up (out may be gate itself); a grid-stride loop
    n, f = gate.shape
    for i in range(cuda.grid(1), n * f, cuda.gridsize(1)):
        t = i // f
        j = i % f
        g = np.float64(gate[t, j])
        e = math.exp(min(max(-g, EXP_MIN), EXP_MAX))       # clamped as the CPU's exp64
        out[t, j] = np.float32(g / (1.0 + e)) * up[t, j]


def swiglu_into_cuda(gate, up, out, threads: int = 128, blocks: int | None = None, stream=0):
    # swiglu_into on device arrays: out = silu(gate) * up (out may be gate itself)
    n = gate.shape[0] * gate.shape[1]
    if n:
        blocks = blocks or (n + threads - 1) // threads
        swiglu_into_cuda_kernel[blocks, threads, stream](gate, up, out)
    return out
