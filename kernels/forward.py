"""The whole transformer forward pass as one Numba call (llama.cpp: the graph that llm_build_llama
builds, run by ggml-cpu's graph compute).

`specnb.run.backend_cpu.CpuBackend.forward_steps` is the readable version: one Python line per
operation, each a call into a kernel. This function makes exactly the same kernel calls in
exactly the same order, so its logits are bit-identical (tests/test_speed_paths.py checks it),
but from inside compiled code: a decode step of a 30-layer model makes about 400 kernel calls,
and from Python each one costs a few microseconds of dispatch before it starts.

The weights come in as one `FusedWeights` (a named tuple, so Numba caches the compiled pass like
any other function): one typed list of the layers' matrices (7 per layer: q, k, v, o, gate, up,
down) and their quantization types, norms and biases as stacked float32 arrays; the layer shape
as one `FusedShape`.

Where a layer's q, k (and v) or its gate and up share a layout, the CPU backend stacks their rows
into one matrix (fuse, below) and the pass makes one product of them instead of two or three: the
activations are rounded to int8 once, the threads meet once, and the small k and v rows (a 0.5B's
128 x 896) no longer run alone. Each output of these kernels is computed from its own weight row
and the activations only, the same instructions wherever the row sits in the matrix, so the bits
are those of the separate products (tests/test_speed_paths.py compares them with forward_steps).
"""
from collections import namedtuple

import numpy as np
from numba import njit

from .activations import swiglu_into
from .clock import start, tick
from .attention import attention
from .norm import rmsnorm
from .matmul import dequant_row_by, matmul_sel
from .matmul_q8 import Q8_QTYPES, has_q8_kernel, matmul_q8_by
from .qtypes import X16_QTYPES, type_sel
from .rope import rope

WQ, WK, WV, WO, W_GATE, W_UP, W_DOWN = range(7)
N_MATS = 7

# tok_embd [n_vocab, row_bytes] (type tok_qtype); attn_norm / ffn_norm [n_layer, n_embd]; mats: a
# typed list of 7 * n_layer matrices [n_out, row_bytes], qtypes [n_layer, 7]; bias_q / _k / _v
# [n_layer, dim] (zeros [n_layer, 1] when has_bias is False); output_norm [n_embd]; output
# [n_vocab, row_bytes] (type output_qtype)
# fuse [n_layer, 2]: how many of (q, k, v) and of (gate, up), from the first, one product makes
# (1: each its own); the first one's slot in mats then holds the stacked rows of all of them
FusedWeights = namedtuple("FusedWeights", "tok_embd tok_qtype attn_norm ffn_norm mats qtypes fuse bias_q "
                          "bias_k bias_v has_bias output_norm output output_qtype")
# FusedShape: the layers' shape; ahead: how many bytes ahead of the int8 kernels the weights are
# prefetched (tuning.prefetch_ahead(), measured once per machine; -1: not at all), a hint to the
# memory system only; ahead_x16: the same for the interleaved layouts (tuning.prefetch_ahead_x16());
# n_threads: the threads the pass runs on (attention shapes its work items by it). Every value of
# the three gives the same bits.
FusedShape = namedtuple("FusedShape", "n_head n_head_kv head_dim n_ff norm_eps rope_mode ahead ahead_x16 "
                        "n_threads")


FusedTypes = namedtuple("FusedTypes", "emb f i")

# the phases of a step that forward(..., clock) times (clock: int64 [len(PHASES)], counter ticks
# added per phase over every layer; kernels/clock.py): each line below the one before in the pass
PHASES = ("embedding", "attn_norm", "q, k, v", "rope, KV store", "attention", "o", "ffn_norm", "gate, up",
          "swiglu", "down", "output")
(PH_EMBED, PH_ATTN_NORM, PH_QKV, PH_ROPE_KV, PH_ATTENTION, PH_O, PH_FFN_NORM, PH_GATE_UP, PH_SWIGLU, PH_DOWN,
 PH_OUTPUT) = range(len(PHASES))


def fused_types(emb_qtypes, mat_qtypes, q8: bool) -> FusedTypes:
    """The types each kernel family of the pass must serve (qtypes.TypeSel): the embedding's row
    decoder, the float32-activation product and the int8-activation one. Only these kernels
    compile; with q8 every type that has an int8 kernel takes it, the others (F32, F16, BF16) the
    float path, and without q8 everything the float path. (The interleaved layouts, X16_QTYPES,
    have only the int8 kernels: the CPU backend makes them for q8 only.)"""
    mats = {int(t) for t in mat_qtypes}
    i = {t for t in mats if t in Q8_QTYPES or t in X16_QTYPES} if q8 else set()
    return FusedTypes(type_sel(emb_qtypes), type_sel(mats - i), type_sel(i))


# Compile time: Numba optimizes each compiled function together with everything it calls, so
# every layer between the pass and the rows kernels costs another optimization of all of them.
# The pass therefore calls the int8 driver directly (the weights' shapes were checked when the
# model loaded, and every operand here is C-contiguous), and _mm is inlined into the pass.
@njit(cache=True)
def _mm_by(x, w, qtype, out, sf, si, f_any, i_any, i_k, i_b, i_xb, i_xk, ahead, ahead_x16):
    # y = x @ W^T with int8 activations for the types of si, float32 ones for those of sf; a
    # path whose selection is empty (None) is not compiled
    if i_any is not None and has_q8_kernel(qtype):
        matmul_q8_by(x, w, qtype, out, si, i_k, i_b, i_xb, i_xk, ahead, ahead_x16)
    elif f_any is not None:
        matmul_sel(x, w, qtype, out, sf)
    else:
        raise ValueError("specnb.kernels.forward: tensor type outside the compiled selection:", qtype)
    return out


@njit(inline="always")
def _mm(x, w, qtype, ts, ahead, out):
    # ahead: (the distance, the interleaved layouts' distance), FusedShape's two
    return _mm_by(x, w, qtype, out, ts.f, ts.i, ts.f.any, ts.i.any, ts.i.k, ts.i.b, ts.i.xb, ts.i.xk, ahead[0],
                  ahead[1])


# the thin wrappers the pass calls, inlined into it for the same reason (the same code as
# attention.attention, activations.swiglu_into and matmul.dequant_row_sel)
_attention = njit(inline="always")(attention.py_func)
_swiglu_into = njit(inline="always")(swiglu_into.py_func)


@njit(inline="always")
def _embed_row(w_row, qtype, out, s):
    # one embedding row to float32 (matmul.dequant_row_sel without its shape check: the table's
    # shape was checked when the model loaded)
    dequant_row_by(w_row, qtype, out, out.shape[0], s.fl, s.f32, s.f16, s.bf16, s.q8_0, s.q4_0,
                   s.q4_1, s.q5_0, s.q5_1, s.q2_k, s.q3_k, s.q4_k, s.q5_k, s.q6_k)


# Element loops instead of NumPy's broadcasting array statements (x += y, row = row): the
# statements compile Numba's shape checks and their error messages, 4 s of a cold start; every
# shape here is fixed by the pass itself. Each element is computed as the statement would.
@njit(inline="always")
def _add_to(x, y):
    # x [n, d] += y [n, d]
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] += y[i, j]
    return x


@njit(inline="always")
def _add_row(x, b):
    # x [n, d] += b [d] in every row (the q, k, v biases)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] += b[j]


@njit(inline="always")
def _copy_row(dst, src):
    for j in range(dst.shape[0]):
        dst[j] = src[j]


@njit(inline="always")
def _take_cols(dst, y, c0):
    # dst [n, m] = y[:, c0:c0 + m] (one matrix's outputs out of a stacked product's)
    for i in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            dst[i, j] = y[i, c0 + j]


@njit(cache=True)
def forward(tokens, pos, seq, valid, out_rows, k_cache, v_cache, cos, sin, wt, hp, ts, clock):
    # tokens/pos/seq [n]; valid [n_seq, n_ctx]; out_rows [n_out]; k/v_cache [n_layer, n_seq,
    # n_ctx, n_head_kv * head_dim]; cos/sin [n, n_rot / 2]; wt: FusedWeights; hp: FusedShape;
    # ts: FusedTypes (one compiled pass per selection of types and activation mode); clock: None,
    # or int64 [len(PHASES)] that each phase's counter ticks are added to (a second compiled pass,
    # for bench --profile: the same operations, bits and order)
    # -> logits [n_out, n_vocab]
    t_ = start(clock)
    attn_norm, ffn_norm, mats, qtypes, fuse = wt.attn_norm, wt.ffn_norm, wt.mats, wt.qtypes, wt.fuse
    n_head, n_head_kv, head_dim, n_ff = hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff
    norm_eps, rope_mode, ahead = hp.norm_eps, hp.rope_mode, (hp.ahead, hp.ahead_x16)
    n = tokens.shape[0]
    n_layer = attn_norm.shape[0]
    n_embd = attn_norm.shape[1]
    kv_dim = n_head_kv * head_dim
    x = np.empty((n, n_embd), dtype=np.float32)
    for i in range(n):                                       # token embedding lookup
        _embed_row(wt.tok_embd[tokens[i]], wt.tok_qtype, x[i], ts.emb)
    a = np.empty_like(x)
    q = np.empty((n, n_head * head_dim), dtype=np.float32)
    k = np.empty((n, kv_dim), dtype=np.float32)
    v = np.empty((n, kv_dim), dtype=np.float32)
    attn = np.empty((n, n_head, head_dim), dtype=np.float32)
    t_out = np.empty((n, n_embd), dtype=np.float32)
    g = np.empty((n, n_ff), dtype=np.float32)
    u = np.empty((n, n_ff), dtype=np.float32)
    nq = n_head * head_dim
    stacked = np.empty(n * max(nq + 2 * kv_dim, 2 * n_ff), dtype=np.float32)   # a fused product's outputs
    t_ = tick(clock, PH_EMBED, t_)
    for il in range(n_layer):
        m0 = N_MATS * il
        qt = qtypes[il]
        rmsnorm(x, attn_norm[il], norm_eps, a)
        t_ = tick(clock, PH_ATTN_NORM, t_)
        n_qkv = fuse[il, 0]                                  # q, k (and v) in one product
        if n_qkv > 1:
            y = stacked[:n * (nq + (n_qkv - 1) * kv_dim)].reshape(n, nq + (n_qkv - 1) * kv_dim)
            _mm(a, mats[m0 + WQ], qt[WQ], ts, ahead, y)
            _take_cols(q, y, 0)
            _take_cols(k, y, nq)
            if n_qkv == 3:
                _take_cols(v, y, nq + kv_dim)
        else:
            _mm(a, mats[m0 + WQ], qt[WQ], ts, ahead, q)
            _mm(a, mats[m0 + WK], qt[WK], ts, ahead, k)
        if n_qkv < 3:
            _mm(a, mats[m0 + WV], qt[WV], ts, ahead, v)
        if wt.has_bias:
            _add_row(q, wt.bias_q[il])
            _add_row(k, wt.bias_k[il])
            _add_row(v, wt.bias_v[il])
        t_ = tick(clock, PH_QKV, t_)
        q3 = q.reshape(n, n_head, head_dim)
        k3 = k.reshape(n, n_head_kv, head_dim)
        rope(q3, cos, sin, rope_mode)
        rope(k3, cos, sin, rope_mode)
        for t in range(n):                                   # store this batch's K/V rows
            _copy_row(k_cache[il, seq[t], pos[t]], k[t])
            _copy_row(v_cache[il, seq[t], pos[t]], v[t])
        t_ = tick(clock, PH_ROPE_KV, t_)
        _attention(q3, k_cache[il], v_cache[il], valid, seq, pos, n_head_kv, attn, hp.n_threads)
        t_ = tick(clock, PH_ATTENTION, t_)
        _add_to(x, _mm(attn.reshape(n, n_head * head_dim), mats[m0 + WO], qt[WO], ts, ahead, t_out))
        t_ = tick(clock, PH_O, t_)
        rmsnorm(x, ffn_norm[il], norm_eps, a)
        t_ = tick(clock, PH_FFN_NORM, t_)
        if fuse[il, 1] > 1:                                  # gate and up in one product
            y = stacked[:n * 2 * n_ff].reshape(n, 2 * n_ff)
            _mm(a, mats[m0 + W_GATE], qt[W_GATE], ts, ahead, y)
            t_ = tick(clock, PH_GATE_UP, t_)
            _swiglu_into(y, y, g, n_ff)                      # g = silu(gate) * up
        else:
            _mm(a, mats[m0 + W_GATE], qt[W_GATE], ts, ahead, g)
            _mm(a, mats[m0 + W_UP], qt[W_UP], ts, ahead, u)
            t_ = tick(clock, PH_GATE_UP, t_)
            _swiglu_into(g, u, g, 0)                        # g = silu(g) * u, in place
        t_ = tick(clock, PH_SWIGLU, t_)
        _add_to(x, _mm(g, mats[m0 + W_DOWN], qt[W_DOWN], ts, ahead, t_out))
        t_ = tick(clock, PH_DOWN, t_)
    xo = np.empty((out_rows.shape[0], n_embd), dtype=np.float32)
    for i in range(out_rows.shape[0]):
        _copy_row(xo[i], x[out_rows[i]])
    rmsnorm(xo, wt.output_norm, norm_eps, xo)
    logits = np.empty((out_rows.shape[0], wt.output.shape[0]), dtype=np.float32)
    _mm(xo, wt.output, wt.output_qtype, ts, ahead, logits)
    tick(clock, PH_OUTPUT, t_)
    return logits
