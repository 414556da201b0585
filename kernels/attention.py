"""Causal self-attention over each sequence's own KV cache, with grouped KV heads (GQA).

Row t of the batch belongs to sequence seq[t] at position pos[t]. Its K/V rows have already
been written into the cache, so it attends over the cache cells [0, pos[t]] of its own
sequence that are marked valid (cell index == position). A row's result depends only on
its query and the cached K/V of its own past, never on the other rows of the batch: that is
what makes decoding batch invariant. (llama.cpp: the KQ mask built in llama_kv_cache, then
ggml_soft_max_ext and the KQV product.)
"""
import numpy as np
from numba import njit, prange


def attention_ref(q, k_cache, v_cache, valid, seq, pos, n_head_kv):
    # q [n_tokens, n_head, hd], k/v_cache [n_seq, n_ctx, n_head_kv, hd], valid [n_seq, n_ctx]
    # -> [n_tokens, n_head, hd]   (NumPy reference, float64 inside)
    n, n_head, hd = q.shape
    group = n_head // n_head_kv
    out = np.zeros((n, n_head, hd), dtype=np.float32)
    for t in range(n):
        s, p = seq[t], pos[t]
        cells = np.nonzero(valid[s, :p + 1])[0]
        for h in range(n_head):
            kh = h // group
            k = k_cache[s, cells, kh].astype(np.float64)
            v = v_cache[s, cells, kh].astype(np.float64)
            sc = k @ q[t, h].astype(np.float64) / np.sqrt(hd)
            w = np.exp(sc - sc.max())
            out[t, h] = (w / w.sum()) @ v
    return out


@njit(parallel=True, cache=True, fastmath=False)
def attention(q, k_cache, v_cache, valid, seq, pos, n_head_kv, out):
    # q [n_tokens, n_head, hd], k/v_cache [n_seq, n_ctx, n_head_kv*hd], valid [n_seq, n_ctx]
    # -> out [n_tokens, n_head, hd]
    n, n_head, hd = q.shape
    group = n_head // n_head_kv
    scale = np.float32(1.0 / np.sqrt(hd))
    for item in prange(n * n_head):
        t = item // n_head
        h = item % n_head
        s = seq[t]
        p = pos[t]
        off = (h // group) * hd
        sc = np.empty(p + 1, dtype=np.float32)
        mx = np.float32(-np.inf)
        for j in range(p + 1):
            if valid[s, j]:
                acc = np.float32(0.0)
                for d in range(hd):
                    acc += q[t, h, d] * k_cache[s, j, off + d]
                acc *= scale
                sc[j] = acc
                if acc > mx:
                    mx = acc
        tot = 0.0
        for j in range(p + 1):
            if valid[s, j]:
                e = np.exp(np.float64(sc[j] - mx))
                sc[j] = np.float32(e)
                tot += e
        inv = np.float32(1.0 / tot)
        for d in range(hd):
            out[t, h, d] = 0.0
        for j in range(p + 1):
            if valid[s, j]:
                w = sc[j] * inv
                for d in range(hd):
                    out[t, h, d] += w * v_cache[s, j, off + d]
    return out
