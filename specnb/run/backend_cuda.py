"""The CUDA backend: the CPU backend's forward pass on a GPU, on numba-cuda kernels.

Same interface and same arithmetic plan as `backend_cpu.CpuBackend` (llama.cpp: ggml-cuda):

- the weights are uploaded once per model and stay on the device as their raw GGUF blocks
  (`kernels.matmul_cuda.DeviceWeight`), a layer's Q, K, V in one buffer and its gate and up in
  another (each a product of one launch); the 1-D tensors (norm weights, biases) as float32;
- the KV cache lives on the device, [n_layer, n_seq, n_ctx, n_head_kv * head_dim] for K and V,
  cell index == position; `read_cells` / `write_cells` copy one sequence's cells to and from the
  host, which is all that state save/load and checkpoints need; seq_rm is pure bookkeeping in the
  Context (the `valid` mask, uploaded with every batch);
- a forward uploads the batch (tokens, positions, sequence ids, the rows wanted, the rope angles,
  the valid mask: one copy of a few KiB), runs every layer on the device, and copies back only the
  logits rows the caller asked for.

A layer is ten launches (kernels/fused_cuda.py, kernels/matmul_cuda.py): RMSNorm into the Q|K|V
product's permuted input, that product, rope with the KV store, the attention, the attention's
output permuted, the Wo product (added to x), RMSNorm into the gate|up product's input, that
product, SwiGLU into the down product's input, the down product (added to x). A pass is ten per
layer plus the embedding lookup, the output norm and the head (21 per layer plus 4 before
issue 69). `n_launches` counts the kernels launched; `launch_counts()` gives them per pass.

A batch shape (rows, logits rows) is made once (`_Step`): its device views, its launches with
their arguments (`kernels.launch_cuda.PreparedLaunch`: one driver call each) and its copies,
kept until the workspace grows or the output head changes. SPECNB_CUDA_LAUNCH=numba launches
through numba-cuda's dispatcher instead (the reference the prepared launches are checked
against); SPECNB_CUDA_GRAPHS=1 captures each step's launches as one CUDA graph and replays it.

Every kernel computes a row from that row's inputs only with a fixed reduction order that depends
on the weight shapes and block sizes, never on the batch: a row's logits are bit-identical alone
or in any batch (the CPU and CUDA backends agree to float32 rounding, not bit for bit).

Under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, for tests without a GPU) the kernels run as
Python with launch shapes chosen for its speed (one thread per output row, grid-stride loops on
one thread): the same kernels, other block sizes.
"""
from __future__ import annotations

import os
import time
import warnings
import weakref

import numba
import numpy as np
from numba import cuda

from ..errors import ParamError, UnsupportedError
from ..kernels.attention import attention_cuda_kernel
from ..kernels.fused_cuda import act_call, prep_call, rope_kv_call
from ..kernels.launch_cuda import LAUNCH_MODES, CapturedGraph, Copy, KernelCall, prepare
from ..kernels.matmul_cuda import DeviceWeight, product_call, rows_call
from ..kernels.rope import rope_angles

SIM = bool(numba.config.ENABLE_CUDASIM)
# attention scores of one launch are kept in a scratch of at most this many floats (256 MiB)
SCRATCH_FLOATS = 1 << 26


class _Launch:
    """Block sizes of the kernels other than the products (which pick their own)."""
    norm = 1 if SIM else 128           # threads per row of the RMSNorm + permutation
    attention = 1 if SIM else 64       # threads per (row, head)
    elementwise = 1 if SIM else 256    # threads per block of rope + KV store, SwiGLU
    embedding = 1 if SIM else 128      # threads per embedding row


class DeviceModel:
    """A model's weights on the device (uploaded once, shared by every context of the model)."""

    def __init__(self, model):
        h = model.hparams
        seen = {}

        def mat(w):
            if id(w) not in seen:
                seen[id(w)] = DeviceWeight(w.data, w.qtype, w.n_in)
            return seen[id(w)]

        def group(*ws):
            g = DeviceWeight.group([(w.data, w.qtype) for w in ws], ws[0].n_in)
            seen[id(g)] = g
            return g

        def vec(a):
            return None if a is None else cuda.to_device(np.ascontiguousarray(a, np.float32))

        def biases(ws, bs):
            # the Q|K|V biases side by side (a missing one as zeros), or None when none is given
            if all(b is None for b in bs):
                return None
            return vec(np.concatenate([np.zeros(w.n_out, np.float32) if b is None else b
                                       for w, b in zip(ws, bs)]))

        self.tok_embd = mat(model.tok_embd)
        self.output = mat(model.output)
        self.output_norm = vec(model.output_norm)
        self.layers = []
        for L in model.layers:
            self.layers.append(dict(
                attn_norm=vec(L.attn_norm), ffn_norm=vec(L.ffn_norm),
                qkv=group(L.wq, L.wk, L.wv),
                qkv_bias=biases((L.wq, L.wk, L.wv), (L.bq, L.bk, L.bv)),
                wo=mat(L.wo), gate_up=group(L.w_gate, L.w_up), down=mat(L.w_down)))
        self.weights = list(seen.values())
        self.nbytes = sum(w.buf.nbytes for w in self.weights)
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
    # rows r0..r1 of a device array: a itself when that is all of them
    return a if r0 == 0 and r1 == a.shape[0] else a[r0:r1]


def _xp_per_row(dm: DeviceModel, output: DeviceWeight) -> int:
    # floats of permuted activations one row of the largest product needs (a copy per order)
    ws = [w for L in dm.layers for w in (L["qkv"], L["wo"], L["gate_up"], L["down"])] + [output]
    return max(w.n_in * len(w.orders) for w in ws)


class _Workspace:
    """Device activations for batches of up to `cap` rows (grown by doubling, reused), the
    staging buffers of each step's inputs, and the steps made for each batch shape."""

    def __init__(self, be: "CudaBackend", cap: int):
        h, f32 = be.h, np.float32
        qd, kvd = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
        self.cap = cap
        self.x = cuda.device_array((cap, h.n_embd), f32)
        self.qkv = cuda.device_array((cap, qd + 2 * kvd), f32)
        self.q = cuda.device_array((cap, h.n_head, h.head_dim), f32)
        self.attn = cuda.device_array((cap, qd), f32)
        self.gu = cuda.device_array((cap, 2 * h.n_ff), f32)
        self.logits = cuda.device_array((cap, be.output.n_out), f32)
        self.xp = cuda.device_array(cap * _xp_per_row(be.dm, be.output), f32)
        self.rows_per_launch = max(1, min(cap, SCRATCH_FLOATS // (h.n_head * be.n_ctx)))
        self.scores = cuda.device_array((self.rows_per_launch * h.n_head, be.n_ctx), f32)
        self.arange = cuda.to_device(np.arange(cap, dtype=np.int64))
        # each step's inputs, packed (_Step.layout): 8-byte words, then the valid mask's bytes
        nbytes = 8 * (4 * cap + 2 * cap * (h.n_rot // 2)) + be.n_seq * be.n_ctx
        self.stage_d = cuda.device_array(nbytes, np.uint8)
        self.stage_h = cuda.pinned_array(nbytes, np.uint8)
        self.steps = {}


class _Step:
    """One batch shape's forward pass made once: views of the workspace, the launches (prepared
    with their arguments, or captured as a graph) and the two copies."""

    def __init__(self, be: "CudaBackend", ws: _Workspace, n: int, n_out: int):
        h, dm, L_ = be.h, be.dm, _Launch
        half, n_seq, n_ctx = h.n_rot // 2, be.n_seq, be.n_ctx
        qd, kvd = h.n_head * h.head_dim, h.n_head_kv * h.head_dim
        # the inputs: tokens, pos, seq, out_rows (int64), cos, sin (float64 [n, half]), valid
        w = [0, n, 2 * n, 3 * n, 3 * n + n_out, 3 * n + n_out + n * half, 3 * n + n_out + 2 * n * half]
        nv = 8 * w[6] + n_seq * n_ctx

        def part(buf, i, dtype):
            return buf[8 * w[i]:8 * w[i + 1]].view(dtype)

        self.host = [part(ws.stage_h, i, np.int64) for i in range(4)]
        self.host += [part(ws.stage_h, i, np.float64).reshape(n, half) for i in (4, 5)]
        self.host.append(ws.stage_h[8 * w[6]:nv].view(np.bool_).reshape(n_seq, n_ctx))
        tok, pos, seq, out_rows = (part(ws.stage_d, i, np.int64) for i in range(4))
        cos, sin = (part(ws.stage_d, i, np.float64).reshape(n, half) for i in (4, 5))
        valid = ws.stage_d[8 * w[6]:nv].view(np.bool_).reshape(n_seq, n_ctx)

        x, qkv, gu, attn = ws.x[:n], ws.qkv[:n], ws.gu[:n], ws.attn[:n]
        x_flat, qkv_flat, gu_flat = (a.reshape(a.size) for a in (x, qkv, gu))
        q3, attn3, ar, xp = ws.q[:n], attn.reshape(n, h.n_head, h.head_dim), ws.arange[:n], ws.xp
        calls = [rows_call(dm.tok_embd, tok, x_flat, threads=L_.embedding)]
        for il, L in enumerate(dm.layers):
            k_il, v_il = be.k_layers[il], be.v_layers[il]
            calls += [prep_call(L["qkv"].orders, x, ar, L["attn_norm"], h.norm_eps, xp, L_.norm),
                      product_call(L["qkv"], n, xp, qkv_flat, bias=L["qkv_bias"]),
                      rope_kv_call(qkv, qd, kvd, cos, sin, h.rope_mode, q3, k_il, v_il, seq, pos,
                                   L_.elementwise)]
            for r0 in range(0, n, ws.rows_per_launch):           # bounded score scratch
                r1 = min(n, r0 + ws.rows_per_launch)
                calls.append(KernelCall(attention_cuda_kernel, (r1 - r0) * h.n_head, L_.attention, 0,
                                        (_rows(q3, r0, r1), k_il, v_il, valid, _rows(seq, r0, r1),
                                         _rows(pos, r0, r1), h.n_head_kv, ws.scores,
                                         _rows(attn3, r0, r1))))
            calls += [prep_call(L["wo"].orders, attn, ar, None, 0.0, xp, L_.norm),
                      product_call(L["wo"], n, xp, x_flat, accumulate=True),      # x += attn Wo^T
                      prep_call(L["gate_up"].orders, x, ar, L["ffn_norm"], h.norm_eps, xp, L_.norm),
                      product_call(L["gate_up"], n, xp, gu_flat),
                      act_call(L["down"].orders[0], gu, h.n_ff, xp, L_.elementwise),
                      product_call(L["down"], n, xp, x_flat, accumulate=True)]    # x += h Wd^T
            if il == 0:
                self.per_layer = len(calls) - 1
        self.logits = None
        if n_out:
            logits = ws.logits[:n_out]
            calls += [prep_call(be.output.orders, x, out_rows, dm.output_norm, h.norm_eps, xp,
                                L_.norm),
                      product_call(be.output, n_out, xp, logits.reshape(logits.size))]
            self.logits = cuda.pinned_array((n_out, be.output.n_out), np.float32)
        self.n_kernels = len(calls)
        self.outside_layers = self.n_kernels - self.per_layer * len(dm.layers)
        try:
            self.launches = [prepare(c, be.stream, be.launch_mode) for c in calls]
        except Exception as e:        # a numba-cuda or a driver binding unlike the ones tested
            if be.launch_mode != "prepared":
                raise
            be.fall_back(e)
            self.launches = [prepare(c, be.stream, be.launch_mode) for c in calls]
        self.upload = Copy(ws.stage_h[:nv], ws.stage_d[:nv], True, be.stream, be.launch_mode)
        if n_out:
            self.download = Copy(self.logits, logits, False, be.stream, be.launch_mode)
        self.graph, self.graph_error = None, None
        if be.graphs:
            try:
                self.graph = CapturedGraph(self.launches, be.stream)
            except Exception as e:            # (a driver or numba-cuda without capture: launch)
                self.graph_error = f"{type(e).__name__}: {e}"

    def run(self, inputs) -> np.ndarray | None:
        """Fill the staged inputs (tokens, pos, seq, out_rows, cos, sin, valid), launch the step,
        and return a copy of the logits rows (None without any)."""
        for dst, src in zip(self.host, inputs):
            dst[...] = src
        self.upload()
        if self.graph is not None:
            self.graph()
        else:
            for launch in self.launches:
                launch()
        if self.logits is not None:
            self.download()


class CudaBackend:
    name = "cuda"

    def __init__(self, model, n_ctx: int, n_seq_max: int):
        if not cuda.is_available():
            raise UnsupportedError("backend='cuda': numba-cuda finds no usable CUDA GPU "
                                   "(numba.cuda.is_available() is False); use backend='cpu' "
                                   "or 'auto'")
        mode = os.environ.get("SPECNB_CUDA_LAUNCH", "prepared")
        if mode not in LAUNCH_MODES:
            raise ParamError(f"SPECNB_CUDA_LAUNCH={mode!r}: expected one of {', '.join(LAUNCH_MODES)}")
        graphs = os.environ.get("SPECNB_CUDA_GRAPHS", "0")
        if graphs not in ("0", "1"):
            raise ParamError(f"SPECNB_CUDA_GRAPHS={graphs!r}: expected 0 or 1")
        self.launch_mode, self.launch_error = mode, None
        self.graphs = graphs == "1" and mode == "prepared" and not SIM
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
        self.stream = cuda.stream()
        self._ff = None if model.rope_freqs is None else model.rope_freqs.astype(np.float64)
        self._ws = None
        self.output = self.dm.output             # the head (set_output_rows restricts it)
        self.reuse_steps = True                  # False: every forward makes its step anew
        self.n_launches = 0                      # kernels launched by this backend's forwards
        self.time_gpu = False                    # True: CUDA events time each forward
        self.last_host_s = self.last_gpu_ms = None

    def set_output_rows(self, ids) -> None:
        """The output head's rows for these token ids only (None: all), uploaded once."""
        out = self.model.output
        self.output = self.dm.output if ids is None else \
            DeviceWeight(out.data[np.asarray(ids, np.int64)], out.qtype, out.n_in)
        self._ws = None                          # the logits buffer and every step change

    def fall_back(self, e: Exception) -> None:
        """Prepared launches failed to be made: say why once, and launch through numba-cuda's
        dispatcher from now on (slower, the same kernels and bits)."""
        self.launch_error = f"{type(e).__name__}: {e}"
        self.launch_mode, self.graphs = "numba", False
        warnings.warn(f"CUDA backend: prepared launches could not be made ({self.launch_error}); "
                      "launching through numba-cuda's dispatcher instead", RuntimeWarning,
                      stacklevel=2)

    def _workspace(self, n: int) -> _Workspace:
        if self._ws is None or self._ws.cap < n:
            cap = 1
            while cap < n:
                cap *= 2
            self._ws = None                      # free the old buffers (and steps) first
            self._ws = _Workspace(self, cap)
        return self._ws

    def _step(self, n: int, n_out: int) -> _Step:
        ws = self._workspace(n)
        if not self.reuse_steps:
            return _Step(self, ws, n, n_out)
        if (n, n_out) not in ws.steps:
            ws.steps[n, n_out] = _Step(self, ws, n, n_out)
        return ws.steps[n, n_out]

    # ---- the forward pass -------------------------------------------------------------
    def forward(self, tokens, pos, seq, valid, out_rows) -> np.ndarray:
        # tokens/pos/seq [n], valid [n_seq, n_ctx] (already marking this batch's cells),
        # out_rows [n_out] batch indices -> logits [n_out, n_vocab] (host)
        h = self.h
        step = self._step(len(tokens), len(out_rows))
        cos, sin = rope_angles(pos, h.n_rot, h.rope_freq_base, h.rope_freq_scale, self._ff)
        t0 = time.perf_counter()
        if self.time_gpu:
            e0, e1 = cuda.event(), cuda.event()
            e0.record(self.stream)
        step.run((tokens, pos, seq, out_rows, cos, sin, valid))
        self.last_host_s = time.perf_counter() - t0      # until every launch was issued
        if self.time_gpu:
            e1.record(self.stream)
        self.stream.synchronize()
        if self.time_gpu:
            self.last_gpu_ms = e0.elapsed_time(e1)
        self.n_launches += step.n_kernels
        if step.logits is None:
            return np.zeros((0, self.output.n_out), np.float32)
        return step.logits.copy()

    def launch_counts(self, n_rows: int = 1, n_out: int = 1) -> dict:
        """The kernels a forward of n_rows rows with n_out logits rows launches: in all, in each
        layer, outside the layers; how they are launched ("prepared" or "numba", with the error
        that made prepared launches fall back), and whether as one captured graph (with the
        capture's error where it failed)."""
        step = self._step(n_rows, n_out)
        return {"per_pass": step.n_kernels, "per_layer": step.per_layer,
                "outside_layers": step.outside_layers, "n_layer": self.h.n_layer,
                "launch": self.launch_mode, "graph": step.graph is not None,
                "graph_error": step.graph_error, "launch_error": self.launch_error}

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
