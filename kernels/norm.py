"""RMSNorm (llama.cpp: ggml_rms_norm followed by ggml_mul with the norm weight).

    y = x / sqrt(mean(x^2) + eps) * w

Each row is normalized on its own with a fixed left-to-right sum, so a row's result never
depends on the other rows of the batch (batch invariance).
"""
import numpy as np
from numba import njit


def rmsnorm_ref(x, w, eps):
    # [n_tokens, n_embd], [n_embd] -> [n_tokens, n_embd]   (NumPy reference)
    x64 = x.astype(np.float64)
    scale = 1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)
    return (x64 * scale * w).astype(np.float32)


@njit(cache=True, fastmath=False)
def rmsnorm(x, w, eps, out):
    # [n_tokens, n_embd], [n_embd] -> out [n_tokens, n_embd]
    n, d = x.shape
    for t in range(n):
        acc = 0.0  # float64 accumulator
        for i in range(d):
            v = np.float64(x[t, i])
            acc += v * v
        scale = np.float32(1.0 / np.sqrt(acc / d + eps))
        for i in range(d):
            out[t, i] = x[t, i] * scale * w[i]
    return out
