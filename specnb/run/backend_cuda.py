"""The CUDA backend: the CPU backend's forward pass on a GPU, on numba-cuda kernels.

Same interface and same arithmetic plan as `backend_cpu.CpuBackend` (llama.cpp: ggml-cuda):

- the weights are uploaded once per model and stay on the device as their raw GGUF blocks
  (`kernels.matmul_cuda.DeviceWeight`); the 1-D tensors (norm weights, biases) as float32;
- the KV cache lives on the device, [n_layer, n_seq, n_ctx, n_head_kv * head_dim] for K and V,
  cell index == position; `read_cells` / `write_cells` copy one sequence's cells to and from the
  host, which is all that state save/load and checkpoints need; seq_rm is pure bookkeeping in the
  Context (the `valid` mask, uploaded with every batch);
- each forward uploads the batch (tokens, positions, sequence ids, the valid mask, the rope
  angles: a few KiB), runs every layer on the device, and copies back only the logits rows the
  caller asked for.

Every kernel computes a row from that row's inputs only with a fixed reduction order that depends
on the weight shapes and block sizes, never on the batch: a row's logits are bit-identical alone
or in any batch (the CPU and CUDA backends agree to float32 rounding, not bit for bit).

Under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, for tests without a GPU) the kernels run as
Python with launch shapes chosen for its speed (one thread per output row, grid-stride loops on
one thread): the same kernels, other block sizes.
"""
from __future__ import annotations

import weakref

import numba
import numpy as np
from numba import cuda

from ..errors import UnsupportedError
from ..kernels.activations import swiglu_into_cuda
from ..kernels.attention import attention_cuda, kv_store_cuda
from ..kernels.norm import rmsnorm_cuda
from ..kernels.matmul_cuda import DeviceWeight, dequant_rows_cuda, matmul_cuda
from ..kernels.rope import rope_angles, rope_cuda

SIM = bool(numba.config.ENABLE_CUDASIM)
# attention scores of one launch are kept in a scratch of at most this many floats (256 MiB)
SCRATCH_FLOATS = 1 << 26


class _Launch:
    """Block sizes of the small kernels (the matmul picks its own from the weight shape)."""
    norm = 1 if SIM else 128           # threads per row
    attention = 1 if SIM else 64       # threads per (row, head)
    elementwise = 1 if SIM else 256    # threads per block of rope / swiglu / KV store
    embedding = 1 if SIM else 128      # threads per embedding row

    @staticmethod
    def blocks(n: int) -> int | None:
        # grid of the elementwise kernels (grid-stride loops): one block in the simulator
        return 1 if SIM else None


class DeviceModel:
    """A model's weights on the device (uploaded once, shared by every context of the model)."""

    def __init__(self, model):
        h = model.hparams
        seen = {}

        def mat(w):
            if id(w) not in seen:
                seen[id(w)] = DeviceWeight(w.data, w.qtype, w.n_in)
            return seen[id(w)]

        def vec(a):
            return None if a is None else cuda.to_device(np.ascontiguousarray(a, np.float32))

        self.tok_embd = mat(model.tok_embd)
        self.output = mat(model.output)
        self.output_norm = vec(model.output_norm)
        self.layers = []
        for L in model.layers:
            self.layers.append(dict(
                attn_norm=vec(L.attn_norm), ffn_norm=vec(L.ffn_norm),
                wq=mat(L.wq), wk=mat(L.wk), wv=mat(L.wv), wo=mat(L.wo),
                w_gate=mat(L.w_gate), w_up=mat(L.w_up), w_down=mat(L.w_down),
                bq=vec(L.bq), bk=vec(L.bk), bv=vec(L.bv)))
        self.weights = list(seen.values())
        self.nbytes = sum(w.buf.nbytes for w in self.weights)
        self.max_n_in = max(w.n_in for w in self.weights)
        self.n_ff = h.n_ff


_MODELS: dict[int, DeviceModel] = {}


def device_model(model) -> DeviceModel:
    """The model's DeviceModel, uploaded on first use and freed with the model."""
    key = id(model)
    if key not in _MODELS:
        _MODELS[key] = DeviceModel(model)
        weakref.finalize(model, _MODELS.pop, key, None)
    return _MODELS[key]


def _rows(a, r0: int, r1: int):
    # rows r0..r1 of a device array: a itself when that is all of them (a slice is a new device
    # array built in Python, tens of us)
    return a if r0 == 0 and r1 == a.shape[0] else a[r0:r1]


class _Workspace:
    """Device activations for batches of up to `cap` rows (grown by doubling, reused)."""

    def __init__(self, h, dm: DeviceModel, cap: int, n_ctx: int, n_logits: int):
        f32 = np.float32
        qd, kvd = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
        self.cap = cap
        self.x = cuda.device_array((cap, h.n_embd), f32)
        self.a = cuda.device_array((cap, h.n_embd), f32)
        self.q = cuda.device_array((cap, qd), f32)
        self.k = cuda.device_array((cap, kvd), f32)
        self.v = cuda.device_array((cap, kvd), f32)
        self.attn = cuda.device_array((cap, qd), f32)
        self.g = cuda.device_array((cap, h.n_ff), f32)
        self.u = cuda.device_array((cap, h.n_ff), f32)
        self.logits = cuda.device_array((cap, n_logits), f32)
        self.xp = cuda.device_array(cap * dm.max_n_in, f32)       # permuted activations
        self.rows_per_launch = max(1, min(cap, SCRATCH_FLOATS // (h.n_head * n_ctx)))
        self.scores = cuda.device_array((self.rows_per_launch * h.n_head, n_ctx), f32)
        self.arange = cuda.to_device(np.arange(cap, dtype=np.int64))
        self._h = h
        self._views = {}

    def views(self, n: int) -> dict:
        """The buffers' first n rows (and their 3-D head views), made once per batch size: each
        slice or reshape of a device array is a new object built in Python, tens of us apiece,
        and a step would otherwise make a dozen."""
        if n not in self._views:
            h = self._h
            v = {name: getattr(self, name)[:n] for name in ("x", "a", "q", "k", "v", "attn", "g", "u")}
            v["q3"] = v["q"].reshape(n, h.n_head, h.head_dim)
            v["k3"] = v["k"].reshape(n, h.n_head_kv, h.head_dim)
            v["attn3"] = v["attn"].reshape(n, h.n_head, h.head_dim)
            v["rows"] = self.arange[:n]
            self._views[n] = v
        return self._views[n]


class CudaBackend:
    name = "cuda"

    def __init__(self, model, n_ctx: int, n_seq_max: int):
        if not cuda.is_available():
            raise UnsupportedError("backend='cuda': numba-cuda finds no usable CUDA GPU "
                                   "(numba.cuda.is_available() is False); use backend='cpu' "
                                   "or 'auto'")
        h = model.hparams
        self.model, self.h = model, h
        self.n_ctx, self.n_seq = n_ctx, n_seq_max
        self.dm = device_model(model)
        kv_dim = h.n_head_kv * h.head_dim
        shape = (h.n_layer, n_seq_max, n_ctx, kv_dim)
        self.k = cuda.device_array(shape, np.float32)
        self.v = cuda.device_array(shape, np.float32)
        zeros = np.zeros(shape[1:], np.float32)
        for il in range(h.n_layer):              # as the CPU backend: every cell starts at 0
            self.k[il].copy_to_device(zeros)
            self.v[il].copy_to_device(zeros)
        # each layer's cache as a view of its own, made once (not self.k[il] per step and layer)
        self.k_layers = [self.k[il] for il in range(h.n_layer)]
        self.v_layers = [self.v[il] for il in range(h.n_layer)]
        self.valid = cuda.device_array((n_seq_max, n_ctx), np.bool_)
        self._ff = None if model.rope_freqs is None else model.rope_freqs.astype(np.float64)
        self._ws = None
        self._output = self.dm.output              # the head (set_output_rows restricts it)

    def set_output_rows(self, ids) -> None:
        """The output head's rows for these token ids only (None: all), uploaded once."""
        out = self.model.output
        self._output = self.dm.output if ids is None else \
            DeviceWeight(out.data[np.asarray(ids, np.int64)], out.qtype, out.n_in)
        self._ws = None                          # the logits buffer's width changes

    def _workspace(self, n: int) -> _Workspace:
        if self._ws is None or self._ws.cap < n:
            cap = 1
            while cap < n:
                cap *= 2
            self._ws = None                      # free the old buffers first
            self._ws = _Workspace(self.h, self.dm, cap, self.n_ctx, self._output.n_out)
        return self._ws

    # ---- the forward pass -------------------------------------------------------------
    def forward(self, tokens, pos, seq, valid, out_rows) -> np.ndarray:
        # tokens/pos/seq [n], valid [n_seq, n_ctx] (already marking this batch's cells),
        # out_rows [n_out] batch indices -> logits [n_out, n_vocab] (host)
        dm, h = self.dm, self.h
        n = len(tokens)
        ws = self._workspace(n)
        tok_d = cuda.to_device(np.asarray(tokens, np.int64))
        pos_d = cuda.to_device(np.asarray(pos, np.int64))
        seq_d = cuda.to_device(np.asarray(seq, np.int64))
        self.valid.copy_to_device(np.ascontiguousarray(valid, np.bool_))
        cos, sin = rope_angles(pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, self._ff)
        cos_d, sin_d = cuda.to_device(cos), cuda.to_device(sin)
        vw = ws.views(n)
        x, a, q, k, v, attn, g, u = (vw[name] for name in ("x", "a", "q", "k", "v", "attn", "g", "u"))
        q3, k3, attn3, rows = vw["q3"], vw["k3"], vw["attn3"], vw["rows"]
        L_ = _Launch
        ew = dict(threads=L_.elementwise, blocks=L_.blocks(n))
        dequant_rows_cuda(dm.tok_embd, tok_d, x, threads=L_.embedding)      # token embeddings
        for il, L in enumerate(dm.layers):
            rmsnorm_cuda(x, L["attn_norm"], h.norm_eps, a, rows, threads=L_.norm)
            self._mm(a, L["wq"], q, bias=L["bq"])
            self._mm(a, L["wk"], k, bias=L["bk"])
            self._mm(a, L["wv"], v, bias=L["bv"])
            rope_cuda(q3, cos_d, sin_d, h.rope_mode, **ew)
            rope_cuda(k3, cos_d, sin_d, h.rope_mode, **ew)
            k_il, v_il = self.k_layers[il], self.v_layers[il]
            kv_store_cuda(k, v, k_il, v_il, seq_d, pos_d, **ew)
            for r0 in range(0, n, ws.rows_per_launch):           # bounded score scratch
                r1 = min(n, r0 + ws.rows_per_launch)
                attention_cuda(_rows(q3, r0, r1), k_il, v_il, self.valid, _rows(seq_d, r0, r1),
                               _rows(pos_d, r0, r1), h.n_head_kv, ws.scores, _rows(attn3, r0, r1),
                               threads=L_.attention)
            self._mm(attn, L["wo"], x, accumulate=True)                     # x += attn @ Wo^T
            rmsnorm_cuda(x, L["ffn_norm"], h.norm_eps, a, rows, threads=L_.norm)
            self._mm(a, L["w_gate"], g)
            self._mm(a, L["w_up"], u)
            swiglu_into_cuda(g, u, out=g, **ew)                             # g = silu(g) * u, in place
            self._mm(g, L["w_down"], x, accumulate=True)
        n_out = len(out_rows)
        if n_out == 0:
            return np.zeros((0, self._output.n_out), np.float32)
        out_d = cuda.to_device(np.asarray(out_rows, np.int64))
        xo = ws.a[:n_out]                                                   # gathered, normed
        rmsnorm_cuda(x, dm.output_norm, h.norm_eps, xo, out_d, threads=L_.norm)
        logits = ws.logits[:n_out]
        self._mm(xo, self._output, logits)
        return logits.copy_to_host()

    def _mm(self, x, w: DeviceWeight, out, bias=None, accumulate=False):
        matmul_cuda(x, w, out, bias=bias, accumulate=accumulate, scratch=self._ws.xp)

    # ---- KV storage for state save/load --------------------------------------------------
    def read_cells(self, seq: int, n: int):
        # -> (k, v) host copies of cells [0, n) of one sequence: [n_layer, n, kv_dim] each
        kv_dim = self.h.n_head_kv * self.h.head_dim
        k = np.empty((self.h.n_layer, n, kv_dim), np.float32)
        v = np.empty_like(k)
        if n:
            for il in range(self.h.n_layer):
                k[il] = self.k[il, seq, :n].copy_to_host()
                v[il] = self.v[il, seq, :n].copy_to_host()
        return k, v

    def write_cells(self, seq: int, k, v) -> None:
        n = k.shape[1]
        for il in range(self.h.n_layer):
            self.k[il, seq, :n].copy_to_device(np.ascontiguousarray(k[il], np.float32))
            self.v[il, seq, :n].copy_to_device(np.ascontiguousarray(v[il], np.float32))

    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
