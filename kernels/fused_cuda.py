"""The CUDA backend's steps between its products, each one launch (llama.cpp: ggml-cuda's fused
rms_norm + mul, rope + set_rows, and the GLU step). Each is the composition of the one-operation
twins (norm.py, rope.py, attention.py, activations.py, matmul_cuda.py's permutation) with the same
float operations in the same order, so its output equals theirs bit for bit
(tests/cudasim_checks.py, group `fused`):

- `prep`: what feeds a product: rows of x (all, or a gather: the output head's rows), scaled by
  RMSNorm and its weight (or not: the attention's output), written in the element order of each
  block type the product decodes (slots_cuda.py; copy j at j * n * d), instead of rmsnorm_cuda
  then one permutation per product;
- `act`: SwiGLU of the gate and up products (side by side in one array) written in the element
  order of the down matrix, instead of swiglu_into_cuda then a permutation;
- `rope_kv`: the rotary embedding of Q and K (taken from the Q|K|V product's output) and the
  store of K and V into the cache at each row's (sequence, position), instead of two rope_cuda
  and a kv_store_cuda; Q goes to its own [n, n_head, head_dim] array for the attention.

Kernels are made per tuple of element orders (`prep`) or per order (`act`), on first use.
"""
import math

import numba
import numpy as np
from numba import cuda

from . import cuda_common as C
from .activations import EXP_MAX, EXP_MIN
from .cuda_common import MAX_THREADS, SIM, ix as _ix
from .launch_cuda import KernelCall
from .norm import rms_scale
from .rope import ROPE_NEOX
from .slots_cuda import TYPES

MAX_ORDERS = 3          # permuted copies one prep launch writes


def _make_put(elem, K):
    @C.dev
    def put(x, t, w, scale, use_norm, xp, base, idx, d):
        # xp[base + idx] = y[elem(s, k)] with idx = k * S + s: y = x[t] * scale * w (RMSNorm, in
        # the order of rmsnorm_cuda_kernel's float32 products) or x[t] itself
        S = d // K
        k = idx // S
        s = idx - k * S
        e = elem(s, k)
        v = x[t, e]
        if use_norm:
            v = v * scale * w[e]
        xp[_ix(base + idx)] = v
    return put


def _make_prep(orders):
    puts = [_make_put(TYPES[o].elem, TYPES[o].K) for o in orders]
    n_ord = len(puts)
    p0, p1, p2 = (puts * MAX_ORDERS)[:3]                    # (the ones past n_ord never run)

    @cuda.jit
    def prep(x, rows, w, eps, use_norm, xp):
        # x [n_tokens, d], rows [m] -> xp: copy j (j < n_ord) at j * m * d, [m, K_j, S_j] flat, of
        # rmsnorm(x[rows[r]]) * w (use_norm 1) or x[rows[r]] (use_norm 0); grid: m blocks
        r = cuda.blockIdx.x
        t = rows[r]
        tid = cuda.threadIdx.x
        T = cuda.blockDim.x
        d = x.shape[1]
        m = rows.shape[0]
        sh = cuda.shared.array(MAX_THREADS, dtype=numba.float64)
        scale = np.float32(1.0)
        if use_norm:                    # (the same for the whole block)
            scale = rms_scale(x, t, eps, sh, tid, T)
        for idx in range(tid, d, T):
            p0(x, t, w, scale, use_norm, xp, r * d, idx, d)
            if n_ord > 1:
                p1(x, t, w, scale, use_norm, xp, (m + r) * d, idx, d)
            if n_ord > 2:
                p2(x, t, w, scale, use_norm, xp, (2 * m + r) * d, idx, d)

    return prep


def _make_act(order):
    elem, K = TYPES[order].elem, TYPES[order].K

    @cuda.jit
    def act(gu, n_ff, xp):
        # gu [n, 2 n_ff]: gate | up -> xp [n, K, S] flat (S = n_ff / K) of silu(gate) * up in
        # the order elem (swiglu_into_cuda_kernel's float operations); a grid-stride loop
        n = gu.shape[0]
        S = n_ff // K
        for i in range(cuda.grid(1), n * n_ff, cuda.gridsize(1)):
            t = i // n_ff
            j = i - t * n_ff
            k = j // S
            e = elem(j - k * S, k)
            g = np.float64(gu[t, e])
            ex = math.exp(min(max(-g, EXP_MIN), EXP_MAX))
            xp[_ix(i)] = np.float32(g / (1.0 + ex)) * gu[t, n_ff + e]

    return act


@C.dev
def _rotated(qkv, t, c0, dd, cos, sin, half, mode):
    # element dd of the head starting at column c0 of row t, rotated as rope.py's _rotate_pair
    # rotates its pair (float64, the pair read before either is written)
    if dd >= 2 * half:
        return qkv[t, c0 + dd]
    if mode == ROPE_NEOX:
        i = dd if dd < half else dd - half
        j0, j1 = i, i + half
    else:
        i = dd // 2
        j0, j1 = 2 * i, 2 * i + 1
    a = np.float64(qkv[t, c0 + j0])
    b = np.float64(qkv[t, c0 + j1])
    c = cos[t, i]
    s = sin[t, i]
    if dd == j0:
        return np.float32(a * c - b * s)
    return np.float32(a * s + b * c)


@cuda.jit
def rope_kv_kernel(qkv, nq, nk, cos, sin, mode, q, k_cache, v_cache, seq, pos):
    # qkv [n, nq + nk + nv]: Q | K | V of each row -> q [n, n_head, hd] = rope(Q);
    # k_cache[seq[t], pos[t]] = rope(K[t]); v_cache[seq[t], pos[t]] = V[t]; a grid-stride loop
    n, width = qkv.shape
    hd = q.shape[2]
    half = cos.shape[1]
    for i in range(cuda.grid(1), n * width, cuda.gridsize(1)):
        t = i // width
        c = i - t * width
        if c < nq:
            h = c // hd
            dd = c - h * hd
            q[t, h, dd] = _rotated(qkv, t, h * hd, dd, cos, sin, half, mode)
        elif c < nq + nk:
            kc = c - nq
            dd = kc % hd
            k_cache[seq[t], pos[t], kc] = _rotated(qkv, t, c - dd, dd, cos, sin, half, mode)
        else:
            v_cache[seq[t], pos[t], c - nq - nk] = qkv[t, c]


_PREPS, _ACTS = {}, {}


def _grid(n: int, threads: int) -> int:
    # blocks of a grid-stride kernel: one under the simulator (one thread walks every element)
    return 1 if SIM else max(1, (n + threads - 1) // threads)


def prep_kernel(orders):
    """The prep kernel writing these element orders (1 to MAX_ORDERS; built on first use)."""
    orders = tuple(int(o) for o in orders)
    if not 1 <= len(orders) <= MAX_ORDERS:
        raise ValueError(f"prep writes 1 to {MAX_ORDERS} orders, got {len(orders)}")
    if orders not in _PREPS:
        _PREPS[orders] = _make_prep(orders)
    return _PREPS[orders]


def act_kernel(order):
    """The SwiGLU kernel writing this element order (built on first use)."""
    order = int(order)
    if order not in _ACTS:
        _ACTS[order] = _make_act(order)
    return _ACTS[order]


def prep_call(orders, x, rows, w, eps: float, xp, threads: int = 128) -> KernelCall:
    """The launch that writes xp (copy j in the order of orders[j], j * m * d) from the rows
    `rows` (device int64 [m]) of x [n, d]: RMSNorm with weight w [d] first, or (w None) as they
    are."""
    use = 1 if w is not None else 0
    return KernelCall(prep_kernel(orders), rows.shape[0], threads, 0,
                      (x, rows, w if w is not None else xp, float(eps), use, xp))


def act_call(order, gu, n_ff: int, xp, threads: int = 256) -> KernelCall:
    """The launch that writes xp [n, K, S] (flat, down's order) = silu(gate) * up from
    gu [n, 2 n_ff] (gate | up)."""
    return KernelCall(act_kernel(order), _grid(gu.shape[0] * n_ff, threads), threads, 0,
                      (gu, n_ff, xp))


def rope_kv_call(qkv, nq: int, nk: int, cos, sin, mode: int, q3, k_cache, v_cache, seq, pos,
                 threads: int = 256) -> KernelCall:
    """The launch of rope_kv_kernel (see its comment for the shapes)."""
    return KernelCall(rope_kv_kernel, _grid(qkv.shape[0] * qkv.shape[1], threads), threads, 0,
                      (qkv, nq, nk, cos, sin, mode, q3, k_cache, v_cache, seq, pos))
