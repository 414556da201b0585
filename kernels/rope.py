"""Rotary position embedding (llama.cpp: ggml_rope_ext), NORM and NEOX modes.

For rotary dimension pair i (0 <= i < n_rot/2) at position p the angle is
    theta_i = p * freq_scale * base^(-2i / n_rot) / freq_factor_i
NORM mode (llama) rotates adjacent pairs (x[2i], x[2i+1]); NEOX mode (qwen2) rotates
(x[i], x[i + n_rot/2]). Dimensions beyond n_rot pass through unchanged.

A row's rotation depends only on its own position, so it is batch invariant.
"""
import math

import numpy as np
from numba import njit

ROPE_NORM = 0
ROPE_NEOX = 2  # llama.cpp's LLAMA_ROPE_TYPE_NEOX value


def rope_angles(pos, n_rot, base, freq_scale, freq_factors):
    # [n_tokens] -> cos, sin [n_tokens, n_rot/2]  (float64)
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot) * freq_scale
    if freq_factors is not None:
        inv = inv / freq_factors.astype(np.float64)
    return _angles(np.asarray(pos, dtype=np.float64), inv)


@njit(cache=True)
def _angles(pos, inv):
    # [n_tokens], [n_rot/2] -> cos, sin [n_tokens, n_rot/2], one scalar cos/sin per element:
    # NumPy's vectorized cos can round a value differently depending on where it falls in
    # the array, which would make a row's rotation depend on the batch around it.
    n, h = pos.shape[0], inv.shape[0]
    c = np.empty((n, h))
    s = np.empty((n, h))
    for t in range(n):
        for i in range(h):
            th = pos[t] * inv[i]
            c[t, i] = math.cos(th)
            s[t, i] = math.sin(th)
    return c, s


def rope_ref(x, cos, sin, mode):
    # [n_tokens, n_heads, head_dim], cos/sin [n_tokens, n_rot/2] -> [n_tokens, n_heads, head_dim]
    x = x.astype(np.float64).copy()
    half = cos.shape[1]
    c, s = cos[:, None, :], sin[:, None, :]
    if mode == ROPE_NEOX:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, a * s + b * c
    return x.astype(np.float32)


def _rotate_pair(x, t, h, i, c, s, half, mode):
    # rotate the pair (j0, j1) of rotary dimension i of head h of token t by the angle (c, s), in
    # float64 (one function body, compiled for the CPU kernel and for the CUDA one)
    if mode == ROPE_NEOX:
        j0, j1 = i, i + half
    else:
        j0, j1 = 2 * i, 2 * i + 1
    a = np.float64(x[t, h, j0])
    b = np.float64(x[t, h, j1])
    x[t, h, j0] = np.float32(a * c - b * s)
    x[t, h, j1] = np.float32(a * s + b * c)


_rotate_cpu = njit(inline="always")(_rotate_pair)


@njit(cache=True)
def rope(x, cos, sin, mode):
    # in place: [n_tokens, n_heads, head_dim], cos/sin [n_tokens, n_rot/2]
    n, nh, hd = x.shape
    half = cos.shape[1]
    for t in range(n):
        for h in range(nh):
            for i in range(half):
                _rotate_cpu(x, t, h, i, cos[t, i], sin[t, i], half, mode)


# ---- CUDA ------------------------------------------------------------------------------------
# The same rotation on a GPU (numba-cuda): one thread per (token, head, rotary pair), in float64
# as the CPU kernel. The angles (cos, sin) are computed on the host by `rope_angles` (a few
# hundred values per batch) and uploaded, so both backends rotate by identical angles.
from numba import cuda  # noqa: E402


_rotate_cuda = cuda.jit(device=True, inline=True)(_rotate_pair)


@cuda.jit
def rope_cuda_kernel(x, cos, sin, mode):
    # in place: x [n_tokens, n_heads, head_dim], cos/sin [n_tokens, n_rot/2] float64
    # (a grid-stride loop: any grid covers every element)
    n, nh, hd = x.shape
    half = cos.shape[1]
    for idx in range(cuda.grid(1), n * nh * half, cuda.gridsize(1)):
        t = idx // (nh * half)
        h = (idx // half) % nh
        i = idx % half
        _rotate_cuda(x, t, h, i, cos[t, i], sin[t, i], half, mode)


def rope_cuda(x, cos, sin, mode, threads: int = 128, blocks: int | None = None, stream=0):
    """Launch rope_cuda_kernel on device arrays (x rotated in place)."""
    n = x.shape[0] * x.shape[1] * cos.shape[1]
    if n:
        blocks = blocks or (n + threads - 1) // threads
        rope_cuda_kernel[blocks, threads, stream](x, cos, sin, mode)
    return x
