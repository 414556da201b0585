"""SwiGLU, softmax, argmax and top-k: the small elementwise and reduction kernels.

llama.cpp: ggml_swiglu (silu(gate) * up) in the feed-forward block; the samplers'
softmax/argmax/top-k in src/llama-sampler.cpp.
"""
import numpy as np
from numba import njit


def swiglu_ref(gate, up):
    # [n, n_ff], [n, n_ff] -> [n, n_ff]
    g = gate.astype(np.float64)
    return (g / (1.0 + np.exp(-g)) * up).astype(np.float32)


@njit(cache=True)
def swiglu(gate, up, out):
    # [n, n_ff], [n, n_ff] -> out [n, n_ff]
    n, f = gate.shape
    for t in range(n):
        for i in range(f):
            g = np.float64(gate[t, i])
            out[t, i] = np.float32(g / (1.0 + np.exp(-g))) * up[t, i]
    return out


@njit(cache=True)
def softmax(logits):
    # [n_vocab] -> [n_vocab] float64 probabilities (max-subtracted, one fixed-order sum)
    m = logits.max()
    p = np.exp(logits.astype(np.float64) - m)
    return p / p.sum()


@njit(cache=True)
def argmax(logits):
    # [n_vocab] -> index of the first maximum (as llama.cpp's greedy sampler)
    best = 0
    bv = logits[0]
    for i in range(1, logits.shape[0]):
        if logits[i] > bv:
            bv = logits[i]
            best = i
    return best


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
