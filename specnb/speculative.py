"""The speculator framework and draft-simple, as llama.cpp's common/speculative.cpp.

- the vocab gate (`are_compatible`) lives in gate.py; DraftSimple checks it on construction.
- `SpeculativeImpl`: the interface every speculator implements (begin / process / draft /
  accept, optional get/set state) with llama.cpp's built-in accounting.
- `DraftSimple`: the small-draft-model speculator (common_speculative_impl_draft_simple):
  greedy argmax drafting from a top-10 sampler, the p_min floor, n_max / n_min, all drafting
  sequences in one draft decode per step, and process() keeping the draft KV in sync.
- `Speculative`: the outer object (common_speculative): impls in priority order, the
  per-sequence `drafting` flag that lets the first impl with a draft win, and `impl_last`
  routing accept() back to the impl that drafted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .context import Batch
from .errors import ParamError, check_param
from .gate import IncompatibleVocabError, are_compatible
from .sampling import Sampler, SamplerParams


# ---- the impl interface -------------------------------------------------------------------
@dataclass
class DraftParams:
    """common_speculative_draft_params: one sequence's draft request for this round."""
    drafting: bool = False
    n_max: int = -1           # per-round cap (context / n_predict budget); -1: impl default
    n_past: int = 0           # position of id_last
    id_last: int = 0          # the seed token
    prompt: list = field(default_factory=list)
    result: list = field(default_factory=list)


@dataclass
class DraftTokenInfo:
    """What the draft saw when it proposed one token (for the live view)."""
    token: int
    p: float                          # top-10-renormalized probability of the argmax
    top_ids: list                     # the draft's top candidates ...
    top_p: list                       # ... and their top-10-renormalized probabilities
    stopped_by_p_min: bool = False    # this argmax fell under p_min: not drafted


class SpeculativeImpl:
    """common_speculative_impl: a speculator and llama.cpp's per-impl accounting."""
    type = "none"

    def __init__(self, n_seq: int, n_max: int):
        self.n_seq, self.n_max = n_seq, n_max
        self.n_call_begin = self.n_call_draft = self.n_call_accept = 0
        self.n_gen_drafts = self.n_acc_drafts = 0
        self.n_gen_tokens = self.n_acc_tokens = 0
        self.n_acc_tokens_per_pos = [0] * max(n_max, 0)
        self.t_begin_us = self.t_draft_us = self.t_accept_us = 0.0

    def begin(self, seq: int, prompt) -> None: ...
    def process(self, batch: Batch) -> bool: return True
    def draft(self, dps: list[DraftParams]) -> None: ...
    def accept(self, seq: int, n_accepted: int, is_other: bool) -> None: ...
    def get_state(self, seq: int): return None
    def set_state(self, seq: int, state) -> None: ...


class DraftSimple(SpeculativeImpl):
    """common_speculative_impl_draft_simple: a small draft model drafting greedily.

    `reeval=True` reproduces llama.cpp: the caller rolls the draft context back to n_past after
    drafting and process() replays the whole target batch (about 2(1+d) draft evaluations per
    round). `reeval=False` is the fix the server flags (TAG_SPEC_AVOID_DRAFT_REEVAL): the KV rows
    computed while drafting are kept and process() decodes only the rows still missing
    (at most 1+d evaluations). With batch-invariant kernels both give identical draft KV.
    """
    type = "draft-simple"

    def __init__(self, target, ctx_dft, n_seq: int = 1, n_max: int = 3, n_min: int = 0,
                 p_min: float = 0.0, reeval: bool = True, sample_draft: bool = False,
                 draft_temp: float = 1.0, seed: int = 0):
        check_param(isinstance(n_max, (int, np.integer)) and 0 <= n_max <= 256,
                    "draft n_max (--draft-max)", n_max, "an integer in [0, 256]")
        check_param(isinstance(n_min, (int, np.integer)) and 0 <= n_min,
                    "draft n_min (--draft-min)", n_min, "an integer >= 0")
        check_param(n_min <= n_max or n_max == 0, "draft n_min (--draft-min)", n_min,
                    f"at most draft n_max={n_max}")
        check_param(isinstance(p_min, (int, float)) and 0.0 <= p_min <= 1.0,
                    "draft p_min (--draft-p-min)", p_min, "a number in [0, 1]")
        report = are_compatible(target, ctx_dft.model)
        if not report.ok:
            raise IncompatibleVocabError(report)
        if ctx_dft.n_seq_max != n_seq:   # speculative.cpp:247
            raise ParamError(f"draft context has n_seq_max={ctx_dft.n_seq_max}, the speculator "
                             f"serves n_seq={n_seq}: the draft needs one KV sequence per target sequence")
        super().__init__(n_seq, n_max)
        self.ctx = ctx_dft
        self.n_min, self.p_min, self.reeval = int(n_min), float(p_min), bool(reeval)
        self.sample_draft, self.draft_temp = bool(sample_draft), float(draft_temp)
        # one draft sampler per sequence: top-k 10, then dist (speculative.cpp:226-236)
        self.smpl = [Sampler(SamplerParams(top_k=10, samplers=("top_k",), seed=seed + s))
                     for s in range(n_seq)]
        self.info: list[list[DraftTokenInfo]] = [[] for _ in range(n_seq)]
        self.q: list[list[np.ndarray]] = [[] for _ in range(n_seq)]   # draft distributions (RS mode)
        self._rng = np.random.Generator(np.random.PCG64(seed + 7919))
        self.n_eval_draft = 0      # draft-context rows evaluated by draft()
        self.n_eval_process = 0    # ... and by process()

    def process(self, batch: Batch) -> bool:
        """Keep the draft KV in sync with a target batch (speculative.cpp:262-277), no logits."""
        if self.reeval:
            b = Batch()
            for t, p, s in zip(batch.tokens, batch.pos, batch.seq_id):
                b.add(t, p, s, False)
            self.ctx.decode(b)
            self.n_eval_process += len(b)
            return True
        # the fix: skip rows whose (position, token) the draft KV already holds
        ctx = self.ctx
        b = Batch()
        for s in sorted(set(batch.seq_id)):
            rows = [(p, t) for t, p, q in zip(batch.tokens, batch.pos, batch.seq_id) if q == s]
            first = len(rows)
            for i, (p, t) in enumerate(rows):
                if not (p <= ctx.seq_pos_max(s) and ctx.valid[s, p] and ctx.cell_tokens[s, p] == t):
                    first = i
                    break
            if first < len(rows):
                ctx.seq_rm(s, rows[first][0], -1)
                for p, t in rows[first:]:
                    b.add(t, p, s, False)
        if len(b):
            ctx.decode(b)
            self.n_eval_process += len(b)
        return True

    def draft(self, dps: list[DraftParams]) -> None:
        """Greedy drafting for every sequence with dp.drafting, one draft decode per step."""
        ctx = self.ctx
        batch = Batch()
        active, i_batch = [], {}
        for s, dp in enumerate(dps):
            if not dp.drafting:
                continue
            self.smpl[s].reset()
            dp.result.clear()
            self.info[s], self.q[s] = [], []
            i_batch[s] = len(batch)
            batch.add(dp.id_last, dp.n_past, s, True)            # the seed row
            active.append(s)
        if not active:
            return
        ctx.decode(batch)
        self.n_eval_draft += len(batch)
        i = 0
        while active:
            batch.clear()
            still = []
            for s in active:
                dp = dps[s]
                smpl = self.smpl[s]
                smpl.sample(ctx, i_batch[s])                       # populates the candidates
                cur = smpl.get_candidates()
                tok = int(cur.ids[0])                              # greedy: the argmax
                if self.sample_draft:                              # rejection-sampling mode
                    q = _dist(ctx.get_logits_ith(i_batch[s]), self.draft_temp)
                    tok = int(self._rng.choice(len(q), p=q))
                    self.q[s].append(q)
                top = min(cur.size, 10)
                info = DraftTokenInfo(tok, float(cur.p[0]), cur.ids[:top].tolist(),
                                      cur.p[:top].tolist())
                if cur.p[0] < self.p_min and not self.sample_draft:   # confidence floor
                    info.stopped_by_p_min = True
                    self.info[s].append(info)
                    continue
                self.info[s].append(info)
                smpl.accept(tok)
                dp.result.append(tok)
                cap = self.n_max if dp.n_max < 0 else min(self.n_max, dp.n_max)
                if len(dp.result) >= cap:
                    continue
                i_batch[s] = len(batch)
                batch.add(tok, dp.n_past + i + 1, s, True)         # next input row
                still.append(s)
            active = still
            if not len(batch):
                break
            ctx.decode(batch)
            self.n_eval_draft += len(batch)
            i += 1
        for s, dp in enumerate(dps):
            if dp.drafting and len(dp.result) < self.n_min:        # too short: no speculation
                dp.result.clear()
                self.q[s] = []


def _dist(logits: np.ndarray, temp: float) -> np.ndarray:
    # [n_vocab] -> softmax(logits / temp) as float64
    l = np.asarray(logits, dtype=np.float64) / max(temp, 1e-6)
    e = np.exp(l - l.max())
    return e / e.sum()


class Speculative:
    """common_speculative: the impls in priority order, impl_last per sequence."""

    def __init__(self, impls: list[SpeculativeImpl], n_seq: int = 1):
        self.impls = list(impls)
        self.n_seq = n_seq
        self.impl_last: list[SpeculativeImpl | None] = [None] * n_seq

    def begin(self, seq: int, prompt) -> None:
        for impl in self.impls:
            t0 = time.perf_counter()
            impl.begin(seq, prompt)
            impl.n_call_begin += 1
            impl.t_begin_us += (time.perf_counter() - t0) * 1e6

    def process(self, batch: Batch) -> bool:
        return all(impl.process(batch) for impl in self.impls)

    def draft(self, dps: list[DraftParams]) -> None:
        """common_speculative_draft: the first impl that fills a sequence's result wins it."""
        for impl in self.impls:
            if not any(dp.drafting for dp in dps):
                break
            t0 = time.perf_counter()
            impl.draft(dps)
            impl.t_draft_us += (time.perf_counter() - t0) * 1e6
            impl.n_call_draft += 1
            for s, dp in enumerate(dps):
                if dp.drafting and dp.result:
                    dp.drafting = False
                    self.impl_last[s] = impl
                    impl.n_gen_drafts += 1
                    impl.n_gen_tokens += len(dp.result)

    def accept(self, seq: int, n_accepted: int) -> None:
        """common_speculative_accept: credit the impl that drafted this sequence's last draft."""
        impl = self.impl_last[seq]
        if impl is None:
            return
        t0 = time.perf_counter()
        impl.n_call_accept += 1
        if n_accepted > 0:
            impl.n_acc_drafts += 1
            impl.n_acc_tokens += n_accepted
            for i in range(min(n_accepted, len(impl.n_acc_tokens_per_pos))):
                impl.n_acc_tokens_per_pos[i] += 1
        for other in self.impls:
            other.accept(seq, n_accepted, other is not impl)
        impl.t_accept_us += (time.perf_counter() - t0) * 1e6
        self.impl_last[seq] = None

    def stats(self) -> list[dict]:
        return [impl_stats(impl) for impl in self.impls]

    def print_stats(self) -> str:
        return "\n".join(format_impl_stats(s) for s in self.stats())


def impl_stats(impl: SpeculativeImpl) -> dict:
    """The figures common_speculative_print_stats prints, as a dict."""
    acc_rate = [n / impl.n_gen_drafts if impl.n_gen_drafts else 0.0
                for n in impl.n_acc_tokens_per_pos]
    return {
        "type": impl.type,
        "n_call_begin": impl.n_call_begin, "n_call_draft": impl.n_call_draft,
        "n_call_accept": impl.n_call_accept,
        "n_gen_drafts": impl.n_gen_drafts, "n_acc_drafts": impl.n_acc_drafts,
        "n_gen_tokens": impl.n_gen_tokens, "n_acc_tokens": impl.n_acc_tokens,
        "t_begin_ms": impl.t_begin_us / 1e3, "t_draft_ms": impl.t_draft_us / 1e3,
        "t_accept_ms": impl.t_accept_us / 1e3,
        "mean_acc_len": 1.0 + impl.n_acc_tokens / impl.n_call_accept if impl.n_call_accept else 0.0,
        "acc_rate_per_pos": acc_rate,
        "n_eval_draft": getattr(impl, "n_eval_draft", 0),
        "n_eval_process": getattr(impl, "n_eval_process", 0),
    }


def format_impl_stats(s: dict) -> str:
    rates = ", ".join(f"{r:.3f}" for r in s["acc_rate_per_pos"])
    return (f"statistics {s['type']}: #calls(b,g,a) = {s['n_call_begin']} {s['n_call_draft']} "
            f"{s['n_call_accept']}, #gen drafts = {s['n_gen_drafts']}, #acc drafts = "
            f"{s['n_acc_drafts']}, #gen tokens = {s['n_gen_tokens']}, #acc tokens = "
            f"{s['n_acc_tokens']}, dur(b,g,a) = {s['t_begin_ms']:.3f}, {s['t_draft_ms']:.3f}, "
            f"{s['t_accept_ms']:.3f} ms\n"
            f"  mean accepted length = {s['mean_acc_len']:.3f}, #acc rate/pos = [{rates}]")
