"""The CPU backend: one transformer forward pass over a batch of rows, on Numba njit kernels.

This is the engine behind `Context.decode` (llama.cpp: the graph built by llm_build_llama and
run by ggml-cpu). It owns the KV cache storage; the Context owns the bookkeeping (which cells
of which sequence are valid). Weights are read straight from the quantized GGUF blocks by
`kernels.matmul.matmul`, which streams every weight row once for all rows of the batch, or
with activations="q8" by `kernels.matmul_q8.matmul_q8` (activations rounded to int8 blocks
first, as llama.cpp's CPU backend does).

`forward` runs the whole pass as one compiled call (`kernels/forward.py`); `forward_steps` is
the same pass written out in Python, one line per operation, and gives bit-identical logits
(where `forward` multiplies q, k, v or gate, up stacked into one matrix, `stack_layer`, each
output is still computed from its own weight row alone, as `forward_steps`'s separate products do).

Every kernel computes a row from that row's inputs only, with a fixed reduction order, so a
row's logits are bit-identical whether it is decoded alone or inside any batch.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from ..kernels import forward as fused        # (first: the kernels settle Numba's compile target)
from ..model import QWeight
from ..kernels.activations import swiglu_into
from ..kernels.attention import attention
from ..kernels.norm import rmsnorm
from ..kernels.matmul import dequant_row, matmul
from ..kernels.matmul_q8 import matmul_q8
from ..kernels.matmul_x16 import interleave
from ..kernels.qtypes import Q4_K, Q5_0, Q5_1, Q6_K, SUPPORTED_QTYPES, X16_OF, X16_QTYPES, X16_ROWS, qtype_name
from ..kernels.tuning import prefetch_ahead, prefetch_ahead_x16
from ..errors import GGUFError, ParamError
from ..gguf.file import REPACK_KEY
from ..kernels.rope import rope, rope_angles
import numba                                  # (after the kernels: it makes Numba's target)
from numba.typed import List


KERNEL_TYPES_ENV = "SPECNB_KERNEL_TYPES"


def _say(text: str) -> None:
    print(f"specnb: {text}", file=sys.stderr, flush=True)


def kernel_types() -> str:
    """$SPECNB_KERNEL_TYPES: "model" (the default) compiles the forward pass for the tensor types
    of the model at hand (and of the models it shares kernels with), which is what keeps a cold
    start short; "all" compiles one pass for every supported type, which serves every model
    without compiling again (a test suite, or a classroom image that loads many models)."""
    v = os.environ.get(KERNEL_TYPES_ENV, "model") or "model"
    if v not in ("model", "all"):
        raise ParamError(f"{KERNEL_TYPES_ENV}={v!r}: expected 'model' (the default) or 'all'")
    return v


def model_qtypes(model) -> tuple[int, set]:
    """(the token embedding's tensor type, the types of every matrix the pass multiplies)."""
    mats = {int(w.qtype) for L in model.layers
            for w in (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down)}
    return int(model.tok_embd.qtype), mats | {int(model.output.qtype)}


REPACK_ENV = "SPECNB_REPACK"
# SPECNB_REPACK -> the GGUF types the CPU backend interleaves (with int8 activations)
_REPACKED = {"default": (Q5_0, Q5_1, Q4_K, Q6_K), "q5": (Q5_0, Q5_1), "k": (Q4_K, Q6_K), "all": tuple(X16_OF),
             "none": ()}


def repacked_qtypes(model=None) -> tuple:
    """Which types the CPU backend interleaves 16 rows at a time with int8 activations
    (kernels/matmul_x16.py, matmul_x16k.py; llama.cpp: the CPU backend's weight repacking, which
    its --no-repack turns off): $SPECNB_REPACK when it is set, else "default" plus the types the
    model's file lists under REPACK_KEY. "default": Q5_0 and Q5_1, whose fifth bits cost the
    per-row kernels most (the 0.5B draft's layers), and Q4_K and Q6_K (the 1.5B target's every
    matrix, whose verification rows it makes cheap); "q5" or "k": one of those pairs; "all":
    Q8_0, Q4_0 and Q4_1 too; "none": no type. The interleaved products sum each block in another
    order, so logits move in the last bits; the per-row kernels of Q4_0, Q4_1 and Q8_0 are kept by
    default because with them the default pair's rounds are those llama.cpp c392e50 printed
    (tests/data), which the course's exercise replays."""
    v = os.environ.get(REPACK_ENV, "")
    if v:
        if v not in _REPACKED:
            raise ParamError(f"{REPACK_ENV}={v!r}: expected one of {', '.join(repr(k) for k in _REPACKED)}")
        return _REPACKED[v]
    return _REPACKED["default"] + file_repacked(model)


def file_repacked(model) -> tuple:
    """The types model's file asks to be interleaved (REPACK_KEY), checked: () when it has none."""
    names = None if model is None or model.file is None else model.file.get(REPACK_KEY)
    if names is None:
        return ()
    by_name = {qtype_name(t): t for t in X16_OF}
    if not isinstance(names, list) or not all(isinstance(n, str) and n in by_name for n in names):
        raise GGUFError(f"{model.path}: {REPACK_KEY} = {names!r}: expected a list of the type names "
                        f"{', '.join(by_name)}")
    return tuple(by_name[n] for n in names)


def interleaved_types(model, q8: bool) -> tuple:
    """The types a model's matrices are interleaved in: with int8 activations
    repacked_qtypes(model), with float32 ones none."""
    return repacked_qtypes(model) if q8 else ()


def kernel_qtype(qtype: int, interleaved: tuple) -> int:
    """The layout the pass multiplies a matrix in: the types of `interleaved`
    (interleaved_types) 16 rows at a time (X16_OF), everything else as the file has it."""
    return X16_OF[int(qtype)] if int(qtype) in interleaved else int(qtype)


def kernel_weight(w: QWeight, interleaved: tuple) -> QWeight:
    """w in its kernel_qtype layout (the same QWeight when that is the file's own)."""
    qt = kernel_qtype(w.qtype, interleaved)
    if qt == int(w.qtype):
        return w
    return QWeight(w.name, interleave(w.data, w.qtype), qt, w.n_in, w.n_out)


def kernel_qtypes(model, q8: bool) -> tuple[int, set]:
    """model_qtypes, with each matrix in the layout the pass multiplies it in (kernel_qtype)."""
    emb, mats = model_qtypes(model)
    interleaved = interleaved_types(model, q8)
    return emb, {kernel_qtype(t, interleaved) for t in mats}


# the matrices of a layer the pass may multiply as one (kernels/forward.py's fuse): q, k, v and
# gate, up, each group by its slots in a layer's 7 (q, k, v, o, gate, up, down)
RESTRICTED_HEADS = 2      # restricted output heads kept besides the whole one (set_output_rows)
STACKS = ((fused.WQ, fused.WK, fused.WV), (fused.W_GATE, fused.W_UP))


def stack_layer(ws: list) -> tuple[list, list, list]:
    """One layer's 7 matrices in their kernel layout -> (fuse, ws, mats): for each of STACKS, how
    many matrices from its first one are stacked into one (1: none), the QWeights with those
    matrices as row slices of the stacked array, and the arrays the pass multiplies (the stacked
    one in its group's first slot). Stacked: a leading run of a group in one interleaved layout
    (already a copy of the file's bytes, so stacking costs no memory) whose every matrix has whole
    groups of 16 rows. An output's bits do not depend on where its weight row sits, so the stacked
    product gives each matrix's outputs as its own product does."""
    ws, mats, fuse = list(ws), [w.data for w in ws], []
    for group in STACKS:
        w0 = ws[group[0]]
        m = 1
        while m < len(group) and ws[group[m]].qtype == w0.qtype and ws[group[m]].n_in == w0.n_in:
            m += 1
        parts = [ws[j] for j in group[:m]]
        if m == 1 or w0.qtype not in X16_QTYPES or any(w.n_out % X16_ROWS for w in parts):
            fuse.append(1)
            continue
        data = np.concatenate([w.data for w in parts])
        data.flags.writeable = False
        r = 0
        for j, w in zip(group, parts):
            ws[j] = QWeight(w.name, data[r:r + w.n_out], w.qtype, w.n_in, w.n_out)
            mats[j] = ws[j].data
            r += w.n_out
        mats[group[0]] = data
        fuse.append(m)
    return fuse, ws, mats


def compiled_entry(dispatcher, args):
    """The compiled function a Numba dispatcher runs for `args` (the machine code's own Python
    wrapper, which skips the dispatcher's typing of the arguments), or the dispatcher itself
    when no overload matches their types exactly."""
    try:
        tys = tuple(dispatcher.typeof_pyval(a) for a in args)
        return dispatcher.overloads[tys].entry_point
    except (KeyError, AttributeError, TypeError):
        return dispatcher


class CpuBackend:
    name = "cpu"

    def __init__(self, model, n_ctx: int, n_seq_max: int, activations: str = "q8", share_kernels_with=()):
        h = model.hparams
        self.model, self.h = model, h
        kv_dim = h.n_head_kv * h.head_dim
        # KV cache: [n_layer, n_seq, n_ctx, n_head_kv * head_dim]; cell index == position
        self.k = np.zeros((h.n_layer, n_seq_max, n_ctx, kv_dim), dtype=np.float32)
        self.v = np.zeros_like(self.k)
        self._ff = None if model.rope_freqs is None else model.rope_freqs.astype(np.float64)
        self._q8 = activations == "q8"
        # the matrices as the kernels read them (kernel_weight: with int8 activations the 32-block
        # types interleaved, a copy made once here), for both passes
        self._interleaved = interleaved_types(model, self._q8)     # read (and checked) once
        # (the pass multiplies q, k, v and gate, up as one matrix each where they share a layout:
        # stack_layer; _layer_w then holds each matrix as a view of its stacked array)
        stacked = [stack_layer([kernel_weight(w, self._interleaved)
                                for w in (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down)])
                   for L in model.layers]
        self._layer_w = [ws for _, ws, _ in stacked]
        self._output = kernel_weight(model.output, self._interleaved)     # the head (set_output_rows restricts it)
        self._heads = {None: self._output}         # heads built, by their ids' bytes (set_output_rows)
        self._fused_weights = self._pack_weights(model, stacked, self._output)
        # the kernels this model and mode need, and only those, are compiled (kernels/qtypes.py);
        # models run side by side (a target and its draft) share one compiled pass
        emb, mats = set(), set()
        for m in (model, *share_kernels_with):
            e, ms = kernel_qtypes(m, self._q8)
            emb.add(e)
            mats |= ms
        if kernel_types() == "all":                # every type, and with q8 every interleaved layout
            emb = set(SUPPORTED_QTYPES)              # (a file may ask for more: file_repacked)
            mats = emb | (set(X16_QTYPES) if self._q8 else set())
        self._fused_types = fused.fused_types(emb, mats, self._q8)
        # how far ahead the int8 kernels prefetch the weights, in the file's layouts and in the
        # interleaved ones: measured once per machine (kernels/tuning.py); the float32 path does not
        self.ahead = int(prefetch_ahead(on_measure=_say)) if self._q8 else -1
        self.ahead_x16 = int(prefetch_ahead_x16(on_measure=_say)) if self._q8 else -1
        self._fused_shape = fused.FusedShape(h.n_head, h.n_head_kv, h.head_dim, h.n_ff,
                                             float(h.norm_eps), int(h.rope_mode), self.ahead, self.ahead_x16,
                                             numba.get_num_threads())
        self._entries: dict = {}          # per-call argument types -> the compiled pass

    @staticmethod
    def _pack_weights(model, stacked, output):
        # the weights as kernels/forward.py takes them: one typed list of matrices (all typed
        # as read-only uint8[:, :]), stacked norms and biases; stacked: stack_layer's per layer
        def ro(a):
            a = np.ascontiguousarray(a).view()
            a.flags.writeable = False
            return a
        mats = List()
        qtypes = np.zeros((len(model.layers), fused.N_MATS), dtype=np.int64)
        fuse = np.array([f for f, _, _ in stacked], dtype=np.int64).reshape(len(model.layers), len(STACKS))
        for il, (_, ws, ms) in enumerate(stacked):
            for j, (w, a) in enumerate(zip(ws, ms)):
                mats.append(ro(a))
                qtypes[il, j] = w.qtype
        has_bias = model.layers[0].bq is not None

        def stack(name):
            if not has_bias:
                return np.zeros((len(model.layers), 1), dtype=np.float32)
            return np.stack([getattr(L, name) for L in model.layers]).astype(np.float32)
        return fused.FusedWeights(
            tok_embd=ro(model.tok_embd.data), tok_qtype=int(model.tok_embd.qtype),
            attn_norm=np.stack([L.attn_norm for L in model.layers]).astype(np.float32),
            ffn_norm=np.stack([L.ffn_norm for L in model.layers]).astype(np.float32),
            mats=mats, qtypes=qtypes, fuse=fuse, bias_q=stack("bq"), bias_k=stack("bk"), bias_v=stack("bv"),
            has_bias=has_bias, output_norm=np.ascontiguousarray(model.output_norm, np.float32),
            output=ro(output.data), output_qtype=int(output.qtype))

    def set_output_rows(self, ids) -> None:
        """The output head's rows for these token ids only (None: all): a copy of those rows
        of the quantized matrix, in the whole head's layout (kernel_weight), so the compiled pass
        is the same and each logit the same bits as in the whole head."""
        idx = None if ids is None else np.asarray(ids, np.int64)
        key = None if idx is None else idx.tobytes()
        head = self._heads.get(key)
        if head is None:
            out = self.model.output
            a = np.ascontiguousarray(out.data[idx]).view()
            a.flags.writeable = False
            head = kernel_weight(QWeight(out.name, a, out.qtype, out.n_in, len(a)), self._interleaved)
            # the whole head and the last RESTRICTED_HEADS restricted ones are kept: a draft
            # vocabulary is set twice for every new speculator (without, then with its prompt's
            # tokens), and rebuilding one (a row copy, then the interleaving) took 12 ms for the
            # 0.5B's 33k rows on a Zen 4
            for k in [k for k in self._heads if k is not None][:max(len(self._heads) - RESTRICTED_HEADS, 0)]:
                del self._heads[k]
        else:
            del self._heads[key]                   # (re-inserted: the most recent last)
        self._heads[key] = head
        self._output = head
        self._fused_weights = self._fused_weights._replace(output=self._output.data)

    def kernel_weights(self):
        """([the 7 matrices q, k, v, o, gate, up, down] per layer, the output head) as the
        kernels read them (kernel_weight), for timing them alone (measure/profile.py)."""
        return self._layer_w, self._output

    # ---- the forward pass -------------------------------------------------------------
    def forward(self, tokens, pos, seq, valid, out_rows, clock=None) -> np.ndarray:
        # tokens/pos/seq [n], valid [n_seq, n_ctx] (already marking this batch's cells),
        # out_rows [n_out] batch indices -> logits [n_out, n_vocab]. clock: None, or int64
        # [len(kernels.forward.PHASES)] that the pass adds each phase's counter ticks to (a second
        # compiled pass, for bench --profile; the same logits)
        h = self.h
        cos, sin = rope_angles(pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, self._ff)
        # (the ids copied into new writable arrays: a caller's read-only array would otherwise be
        # another argument type, and Numba would compile the whole pass again for it)
        args = (np.array(tokens, np.int64), np.array(pos, np.int64), np.array(seq, np.int64), valid,
                np.array(out_rows, np.int64),
                self.k, self.v, cos, sin, self._fused_weights, self._fused_shape, self._fused_types, clock)
        if clock is not None:
            return fused.forward(*args)
        # the compiled pass called directly: Numba's dispatcher types every argument on every
        # call, and the weights' nested tuples cost it about 0.1 ms, 2-3% of a small model's
        # step. The types of the per-call arrays are the key; the rest never change.
        key = tuple((a.dtype.num, a.ndim, a.flags.c_contiguous, a.flags.writeable)
                    for a in args[:5] + args[7:9])
        fn = self._entries.get(key)
        if fn is None:
            out = fused.forward(*args)                 # compiles or loads the pass for these types
            self._entries[key] = compiled_entry(fused.forward, args)
            return out
        return fn(*args)

    def forward_steps(self, tokens, pos, seq, valid, out_rows) -> np.ndarray:
        # the same pass, one Python line per operation (bit-identical to `forward`); shapes with
        # n = len(tokens), d = n_embd, hd = head_dim, kv = n_head_kv * hd, f = n_ff
        m, h = self.model, self.h
        n = len(tokens)
        x = np.empty((n, h.n_embd), dtype=np.float32)                 # [n, d] the residual stream
        for i in range(n):                                   # token embedding lookup
            dequant_row(m.tok_embd.data[tokens[i]], m.tok_embd.qtype, x[i])
        cos, sin = rope_angles(pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, self._ff)
        a = np.empty_like(x)                                           # [n, d] normed input
        attn = np.empty((n, h.n_head, h.head_dim), dtype=np.float32)   # [n, n_head, hd]
        for il, L in enumerate(m.layers):
            wq, wk, wv, wo, w_gate, w_up, w_down = self._layer_w[il]   # L's matrices, as the kernels read them
            rmsnorm(x, L.attn_norm, h.norm_eps, a)                     # [n, d] -> [n, d]
            q = self._mm(a, wq, L.bq).reshape(n, h.n_head, h.head_dim)        # -> [n, n_head, hd]
            k = self._mm(a, wk, L.bk).reshape(n, h.n_head_kv, h.head_dim)     # -> [n, n_head_kv, hd]
            v = self._mm(a, wv, L.bv)                                          # -> [n, kv]
            rope(q, cos, sin, h.rope_mode)                             # rotated in place
            rope(k, cos, sin, h.rope_mode)
            self.k[il, seq, pos] = k.reshape(n, -1)          # store this batch's K/V rows
            self.v[il, seq, pos] = v                         # cache [n_seq, n_ctx, kv] per layer
            attention(q, self.k[il], self.v[il], valid, seq, pos, h.n_head_kv, attn,  # -> [n, n_head, hd]
                      self._fused_shape.n_threads)
            x += self._mm(attn.reshape(n, -1), wo)                     # [n, n_head hd] -> [n, d]
            rmsnorm(x, L.ffn_norm, h.norm_eps, a)
            g = self._mm(a, w_gate)                                    # [n, d] -> [n, f]
            u = self._mm(a, w_up)                                      # [n, d] -> [n, f]
            swiglu_into(g, u, out=g)                                   # g = silu(g) * u, in place
            x += self._mm(g, w_down)                                   # [n, f] -> [n, d]
        xo = x[out_rows]                                               # [n_out, d]
        rmsnorm(xo, m.output_norm, h.norm_eps, xo)
        return self._mm(xo, self._output)                              # -> [n_out, n_vocab]

    def _mm(self, x, w, bias=None):
        # [n, n_in] x QWeight[n_out, n_in] -> [n, n_out]
        out = np.empty((x.shape[0], w.n_out), dtype=np.float32)
        if self._q8:
            matmul_q8(x, w.data, w.qtype, out, self.ahead, self.ahead_x16)
        else:
            matmul(x, w.data, w.qtype, out)
        if bias is not None:
            out += bias
        return out

    # ---- KV storage for state save/load --------------------------------------------------
    def read_cells(self, seq: int, n: int):
        # -> (k, v) copies of cells [0, n) of one sequence: [n_layer, n, kv_dim] each
        return self.k[:, seq, :n].copy(), self.v[:, seq, :n].copy()

    def write_cells(self, seq: int, k, v) -> None:
        n = k.shape[1]
        self.k[:, seq, :n] = k
        self.v[:, seq, :n] = v

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
