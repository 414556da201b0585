"""Batch and Context: the llama_batch / llama_context analogue.

A `Batch` is a list of rows (token, position, sequence id, wants-logits flag), exactly as
llama_batch. `Context.decode(batch)` runs the model over all rows at once, stores each row's
K/V in its sequence's cache and returns the logits of the flagged rows.

KV bookkeeping mirrors llama.cpp's unified KV cache, simplified to one cache per sequence
with cell index == position:
  - `valid[seq, pos]` says whether position `pos` of sequence `seq` holds K/V;
  - `seq_rm(seq, p0, p1)` drops positions [p0, p1) (p1 = -1: to the end);
  - `seq_pos_max(seq)` is the last valid position (-1 when empty);
  - `state_seq_get/set` copy one sequence's cells out and back (llama_state_seq_get/set_data).
A context made with `partial_seq_rm=False` behaves like a recurrent memory
(llama_memory_recurrent): it refuses to drop part of a sequence, so a caller must use
checkpoints instead (common_context_can_seq_rm probes for this).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..errors import BatchError, ContextFullError, ParamError, UnsupportedError, check_param

BACKENDS = ("auto", "cpu", "cuda")
# How the CPU backend multiplies activations with quantized weights:
#   "q8":  (the CPU default) activations rounded to int8 blocks first, integer dot products per
#          block, as llama.cpp's CPU backend does (ggml_vec_dot_q4_K_q8_K and friends): the fast
#          path, at memory speed on a decode;
#   "f32": float32 activations, weights decoded exactly: the reference path, agreeing with the
#          NumPy oracle to ~1e-5, and several times slower (compute-bound).
# Both are batch invariant, so speculative output equals plain decoding in either. The CUDA
# backend multiplies float32 activations only. activations=None takes the backend's default.
ACTIVATIONS = ("f32", "q8")
DEFAULT_ACTIVATIONS = {"cpu": "q8", "cuda": "f32"}


def resolve_activations(activations, backend: str = "cpu") -> str:
    """None -> the backend's default activation mode ("q8" on the CPU, "f32" on CUDA)."""
    if activations is None:
        return DEFAULT_ACTIVATIONS[resolve_backend(backend)]
    check_param(activations in ACTIVATIONS, "activations", activations,
                "one of " + ", ".join(ACTIVATIONS) + " (or None for the backend's default)")
    return activations
# Numba's parallel kernels share one thread pool per process: forward passes of different
# contexts (e.g. two runs in two Python threads) take turns rather than race for it.
_DECODE_LOCK = threading.Lock()


@dataclass
class Batch:
    """llama_batch: parallel arrays, one entry per row."""
    tokens: list
    pos: list
    seq_id: list
    logits: list

    def __init__(self):
        self.tokens, self.pos, self.seq_id, self.logits = [], [], [], []

    def add(self, token: int, pos: int, seq_id: int = 0, logits: bool = False) -> "Batch":
        """common_batch_add"""
        self.tokens.append(int(token))
        self.pos.append(int(pos))
        self.seq_id.append(int(seq_id))
        self.logits.append(bool(logits))
        return self

    def clear(self) -> None:
        """common_batch_clear"""
        self.__init__()

    @classmethod
    def from_tokens(cls, tokens, pos0: int = 0, seq_id: int = 0, logits: str = "last") -> "Batch":
        """A run of tokens of one sequence at pos0, pos0+1, ...; logits 'last', 'all' or 'none'."""
        b = cls()
        n = len(tokens)
        for i, t in enumerate(tokens):
            b.add(t, pos0 + i, seq_id, logits == "all" or (logits == "last" and i == n - 1))
        return b

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        rows = ", ".join(f"{t}@{p}/s{s}{'*' if o else ''}"
                         for t, p, s, o in zip(self.tokens, self.pos, self.seq_id, self.logits))
        return f"Batch([{rows}])"


@dataclass
class SeqState:
    """One sequence's saved KV cells (llama_state_seq_get_data)."""
    n_cells: int          # cells [0, n_cells) are stored
    valid: np.ndarray     # bool [n_cells]
    tokens: np.ndarray    # int32 [n_cells], the token held at each cell
    k: object             # backend-specific copies of the K and V rows
    v: object

    def nbytes(self) -> int:
        return int(getattr(self.k, "nbytes", 0) + getattr(self.v, "nbytes", 0) + self.valid.nbytes)


def resolve_backend(backend: str) -> str:
    """'auto' picks 'cuda' when numba-cuda finds a usable GPU, else 'cpu'."""
    check_param(backend in BACKENDS, "backend", backend, "one of " + ", ".join(BACKENDS))
    if backend != "auto":
        return backend
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "cpu"
    try:
        from numba import cuda
        return "cuda" if cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def set_threads(n_threads: int | None) -> int:
    """Set Numba's thread count (default: every core this process may use); returns it."""
    import numba
    avail = numba.config.NUMBA_NUM_THREADS
    if n_threads is None:
        n_threads = avail
    check_param(isinstance(n_threads, (int, np.integer)) and 1 <= n_threads <= avail,
                "n_threads", n_threads, f"an integer in [1, {avail}] (the cores Numba may use)")
    numba.set_num_threads(int(n_threads))
    return int(n_threads)


class Context:
    """A model plus its KV cache for up to n_seq_max sequences of n_ctx positions each.

    activations: "q8" or "f32" (see ACTIVATIONS above); None, the default, takes the backend's
    default (q8 on the CPU). share_kernels_with: models whose tensor types the compiled forward
    pass serves too (open_pair passes both models, so a target and its draft compile one pass;
    Numba compiles the kernels of the types a pass needs, and only those, on first use).
    """

    def __init__(self, model, n_ctx: int = 2048, n_seq_max: int = 1, backend: str = "cpu",
                 n_threads: int | None = None, n_batch: int = 512, partial_seq_rm: bool = True,
                 activations: str | None = None, share_kernels_with=()):
        check_param(isinstance(n_ctx, (int, np.integer)) and 8 <= n_ctx <= 1 << 20,
                    "n_ctx", n_ctx, "an integer in [8, 1048576]")
        check_param(isinstance(n_seq_max, (int, np.integer)) and 1 <= n_seq_max <= 256,
                    "n_seq_max", n_seq_max, "an integer in [1, 256]")
        check_param(isinstance(n_batch, (int, np.integer)) and n_batch >= 1,
                    "n_batch", n_batch, "a positive integer")
        self.model = model
        self.n_ctx, self.n_seq_max, self.n_batch = int(n_ctx), int(n_seq_max), int(n_batch)
        self.partial_seq_rm = bool(partial_seq_rm)
        self.n_threads = set_threads(n_threads)
        self.backend_name = resolve_backend(backend)
        activations = resolve_activations(activations, self.backend_name)
        if self.backend_name == "cpu":
            from .backend_cpu import CpuBackend
            self.backend = CpuBackend(model, self.n_ctx, self.n_seq_max, activations, share_kernels_with)
        else:
            try:
                from .backend_cuda import CudaBackend
            except ImportError as e:
                raise UnsupportedError(f"backend='cuda' is not available: {e}") from None
            if activations != "f32":
                raise UnsupportedError(f"activations={activations!r} is CPU-only; the CUDA backend "
                                       "multiplies float32 activations")
            self.backend = CudaBackend(model, self.n_ctx, self.n_seq_max)
        self.activations = activations
        self.valid = np.zeros((self.n_seq_max, self.n_ctx), dtype=np.bool_)
        self.cell_tokens = np.full((self.n_seq_max, self.n_ctx), -1, dtype=np.int32)  # see holds()
        self._pos_max = np.full(self.n_seq_max, -1, dtype=np.int64)
        self.output_ids: np.ndarray | None = None   # the head's rows (set_output_ids); None: all
        self._logits = np.zeros((0, model.n_vocab), dtype=np.float32)
        self._out_ids: dict[int, int] = {}
        # counters (llama_perf_context analogue)
        self.n_eval = 0          # token rows evaluated
        self.n_decode = 0        # decode calls
        self.t_decode = 0.0      # seconds spent in decode
        self.decode_log: list | None = None   # set to a list: each decode appends (rows, seconds)

    # ---- decode ------------------------------------------------------------------------
    def _validate(self, batch: Batch):
        """The batch's tokens, positions and sequences as int64 arrays, or BatchError /
        ContextFullError naming the first problem (llama_batch_allocr::init's checks). Plain
        Python over the batch's lists: a step of the loop decodes 1-17 rows, and each NumPy call
        right after a pass that streamed the weights runs with cold caches (these checks took
        0.1 ms of a draft step as NumPy calls)."""
        tokens, pos, seq = batch.tokens, batch.pos, batch.seq_id
        n = len(tokens)
        if n == 0:
            raise BatchError("decode: empty batch (llama_decode rejects n_tokens == 0)")
        if not (len(pos) == len(seq) == len(batch.logits) == n):
            raise BatchError(f"decode: batch arrays differ in length ({n}, {len(pos)}, "
                             f"{len(seq)}, {len(batch.logits)})")
        n_vocab = self.model.n_vocab
        for i, t in enumerate(tokens):
            if not 0 <= t < n_vocab:
                raise BatchError(f"decode: token id {t} at row {i} is outside the vocab [0, {n_vocab})")
        for i, s in enumerate(seq):
            if not 0 <= s < self.n_seq_max:
                raise BatchError(f"decode: seq_id {s} at row {i} is outside [0, n_seq_max={self.n_seq_max})")
        by_seq: dict = {}                                    # each sequence's positions, in batch order
        for p, s in zip(pos, seq):
            by_seq.setdefault(s, []).append(p)
        for s in sorted(by_seq):
            p = by_seq[s]
            expect = self._pos_max[s] + 1
            if p[0] != expect or any(b - a != 1 for a, b in zip(p, p[1:])):
                raise BatchError(
                    f"decode: positions {[int(x) for x in p[:8]]}{'...' if len(p) > 8 else ''} of "
                    f"sequence {s} are not contiguous from {expect} (the last position in its KV cache "
                    f"is {self._pos_max[s]}; llama.cpp requires Y = X + 1)")
            if p[-1] >= self.n_ctx:
                raise ContextFullError(
                    f"decode: sequence {s} would reach position {p[-1]}, beyond n_ctx={self.n_ctx} "
                    f"(context full)")
        return (np.array(tokens, dtype=np.int64), np.array(pos, dtype=np.int64),
                np.array(seq, dtype=np.int64))

    def decode(self, batch: Batch) -> np.ndarray:
        """llama_decode: evaluate every row; returns the logits of the flagged rows [n_out, n_vocab]."""
        tokens, pos, seq = self._validate(batch)
        flags = batch.logits
        t0 = time.perf_counter()
        import numba
        if numba.get_num_threads() != self.n_threads:
            numba.set_num_threads(self.n_threads)
        outs = []
        saved = self._pos_max.copy()
        try:
            for c0 in range(0, len(tokens), self.n_batch):    # ubatches of at most n_batch rows
                sl = slice(c0, c0 + self.n_batch)
                t, p, s = tokens[sl], pos[sl], seq[sl]
                self.valid[s, p] = True
                self.cell_tokens[s, p] = t
                out_rows = np.array([i for i, f in enumerate(flags[sl]) if f], dtype=np.int64)
                with _DECODE_LOCK:
                    logits = self.backend.forward(t, p, s, self.valid, out_rows)
                pm = self._pos_max
                for pi, si in zip(batch.pos[sl], batch.seq_id[sl]):
                    if pi > pm[si]:
                        pm[si] = pi
                if len(out_rows):
                    outs.append(logits)
        except BaseException:
            # interrupted or failed: the memory is left as it was before this batch (whose cells
            # all lie past each sequence's last position, so none of them was valid before)
            self.valid[seq, pos] = False
            self._pos_max[:] = saved
            raise
        self._logits = (np.concatenate(outs) if len(outs) > 1 else outs[0]) if outs else \
            np.zeros((0, self.n_logits), dtype=np.float32)
        self._out_ids = {i: j for j, i in enumerate(i for i, f in enumerate(flags) if f)}
        dt = time.perf_counter() - t0
        self.t_decode += dt
        if self.decode_log is not None:
            self.decode_log.append((len(tokens), dt))
        self.n_eval += len(tokens)
        self.n_decode += 1
        return self._logits

    # ---- a restricted output head (specnb: a draft vocabulary, speculation/draft_vocab.py) ----
    @property
    def n_logits(self) -> int:
        """The length of a logits row: n_vocab, or len(output_ids) for a restricted head."""
        return self.model.n_vocab if self.output_ids is None else len(self.output_ids)

    def set_output_ids(self, ids) -> None:
        """Compute logits for these token ids only (ascending; None: the whole vocabulary).
        Logits row j is then token output_ids[j]'s, bit-identical to the full head's (each
        output row is its own product); a Sampler given this context maps the rows back to the
        real ids. The KV cache and every other row of the forward pass are unchanged."""
        if ids is not None:
            ids = np.asarray(ids)
            check_param(ids.ndim == 1 and ids.size > 0 and np.issubdtype(ids.dtype, np.integer),
                        "output_ids", ids if ids.size <= 8 else f"{ids.size} values",
                        "a non-empty 1-D array of token ids")
            ids = ids.astype(np.int64)
            check_param(bool(np.all(np.diff(ids) > 0)), "output_ids", ids[:8].tolist(),
                        "ascending token ids, each once")
            check_param(ids[0] >= 0 and ids[-1] < self.model.n_vocab, "output_ids",
                        [int(ids[0]), int(ids[-1])], f"token ids in [0, {self.model.n_vocab})")
            if ids.size == self.model.n_vocab:
                ids = None
        if ids is None and self.output_ids is None:
            return
        if ids is not None and self.output_ids is not None and np.array_equal(ids, self.output_ids):
            return
        self.backend.set_output_rows(ids)
        self.output_ids = ids
        self._logits = np.zeros((0, self.n_logits), dtype=np.float32)
        self._out_ids = {}

    def get_logits_ith(self, i: int) -> np.ndarray:
        """llama_get_logits_ith: the logits row of batch row i (negative i counts from the end);
        with a restricted head (set_output_ids), the rows of output_ids only."""
        if i < 0:
            i = len(self._out_ids) + i
            rows = sorted(self._out_ids)
            if not 0 <= i < len(rows):
                raise BatchError(f"get_logits_ith: no output row {i - len(self._out_ids)}")
            i = rows[i]
        if i not in self._out_ids:
            raise BatchError(f"get_logits_ith: batch row {i} did not request logits "
                             f"(rows with logits: {sorted(self._out_ids)})")
        return self._logits[self._out_ids[i]]

    # ---- KV cache bookkeeping ----------------------------------------------------------
    def _check_seq(self, seq: int, allow_all: bool = False) -> None:
        ok = isinstance(seq, (int, np.integer)) and (0 <= seq < self.n_seq_max or (allow_all and seq == -1))
        check_param(ok, "seq_id", seq, f"an integer in [0, {self.n_seq_max})" + (" or -1" if allow_all else ""))

    def seq_pos_max(self, seq: int) -> int:
        """llama_memory_seq_pos_max: last position held for seq, -1 when empty."""
        self._check_seq(seq)
        return int(self._pos_max[seq])

    def holds(self, seq: int, pos: int, token: int) -> bool:
        """Does seq's KV cell at pos hold `token`? (What a drafter asks before re-decoding a row
        it may already have: DraftSimple.process keeps the rows that match.)"""
        self._check_seq(seq)
        return 0 <= pos <= self._pos_max[seq] and bool(self.valid[seq, pos]) \
            and int(self.cell_tokens[seq, pos]) == int(token)

    def seq_pos_min(self, seq: int) -> int:
        self._check_seq(seq)
        cells = np.nonzero(self.valid[seq])[0]
        return int(cells[0]) if len(cells) else -1

    def seq_rm(self, seq: int, p0: int, p1: int = -1) -> bool:
        """llama_memory_seq_rm: drop positions [p0, p1) of seq (seq -1: all; p0 < 0: 0; p1 < 0: end).

        Returns False (and changes nothing) when this memory cannot drop part of a sequence.
        """
        self._check_seq(seq, allow_all=True)
        seqs = range(self.n_seq_max) if seq == -1 else [seq]
        p0 = max(0, int(p0))
        p1 = self.n_ctx if p1 is None or p1 < 0 else min(int(p1), self.n_ctx)
        if not self.partial_seq_rm:
            for s in seqs:   # recurrent-style memory: only whole-sequence removal (or a no-op)
                if 0 < p0 <= self._pos_max[s] and p0 < p1:
                    return False
        for s in seqs:
            if p0 < p1:
                self.valid[s, p0:p1] = False
            cells = np.nonzero(self.valid[s])[0]
            self._pos_max[s] = cells[-1] if len(cells) else -1
        return True

    def clear(self) -> None:
        """llama_memory_clear"""
        self.valid[:] = False
        self._pos_max[:] = -1

    def kv_used(self, seq: int) -> int:
        self._check_seq(seq)
        return int(self.valid[seq].sum())

    def state_seq_get(self, seq: int) -> SeqState:
        """llama_state_seq_get_data: a copy of one sequence's KV cells."""
        self._check_seq(seq)
        n = int(self._pos_max[seq]) + 1
        k, v = self.backend.read_cells(seq, n)
        return SeqState(n, self.valid[seq, :n].copy(), self.cell_tokens[seq, :n].copy(), k, v)

    def state_seq_set(self, seq: int, state: SeqState) -> None:
        """llama_state_seq_set_data: replace one sequence's cells with a saved state."""
        self._check_seq(seq)
        if not isinstance(state, SeqState) or state.n_cells > self.n_ctx:
            raise ParamError(f"state_seq_set: {type(state).__name__} does not fit this context "
                             f"(n_ctx={self.n_ctx})")
        self.valid[seq] = False
        if state.n_cells:
            self.backend.write_cells(seq, state.k, state.v)
            self.valid[seq, :state.n_cells] = state.valid
            self.cell_tokens[seq, :state.n_cells] = state.tokens
        cells = np.nonzero(self.valid[seq])[0]
        self._pos_max[seq] = cells[-1] if len(cells) else -1

    def __repr__(self) -> str:
        used = [int(self._pos_max[s]) + 1 for s in range(self.n_seq_max)]
        return (f"Context(n_ctx={self.n_ctx}, n_seq_max={self.n_seq_max}, backend={self.backend_name}, "
                f"partial_seq_rm={self.partial_seq_rm}, kv={used})")


def can_seq_rm(ctx: Context) -> bool:
    """common_context_can_seq_rm: decode 2 tokens, try seq_rm(0, 1, -1), then clear the memory."""
    b = Batch().add(0, 0, 0).add(0, 1, 0)
    ctx.clear()
    ctx.decode(b)
    ok = ctx.seq_rm(0, 1, -1)
    ctx.clear()
    return ok
