"""The sampler chain, as llama.cpp's common_sampler (common/sampling.cpp) builds and runs it.

common_sampler_init (master 34af94cd common/sampling.cpp:187) builds the chain in this order:
logit-bias (when any bias is given), then the samplers of `--samplers` in the order given
(names may repeat), then dist, the draw. The default order is llama.cpp's:
penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature (c392e50's lacked
top_n_sigma, which ran in a fixed chain of its own there). Mirostat replaces the whole list
by temperature then mirostat 1 or 2, which draws itself. Samplers whose parameters switch
them off stay in the chain as no-ops ("?name" in `describe()`, as llama.cpp prints them).
The individual samplers are in samplers.py, the random numbers (std::mt19937) in rng.py.

With temp <= 0 the temperature step keeps only the most likely candidate: greedy decoding.

`sample_and_accept_n` is the verification step of speculative decoding
(common_sampler_sample_and_accept_n): sample each target row with this chain, accept the
token into the chain's state, stop at the first row whose sample differs from the draft,
and take a bonus sample from the last row when every draft token matched.

A Sampler's whole state (penalty window, DRY history, RNGs, mirostat's mu) can be cloned, so a
caller can restore it and replay the same draws (the checkpoint path of speculative-simple).
`distribution()` gives the probabilities the chain's final draw would use, changing nothing.
"""
from __future__ import annotations

import copy
import functools
import math
import re
import warnings
from collections import deque
from dataclasses import dataclass, fields

import numpy as np

from ..errors import ParamError, check_param
from ..kernels.activations import argmax
from .rng import LLAMA_DEFAULT_SEED
from .samplers import (Candidates, Disabled, Dist, Dry, LogitBias, Mirostat, MirostatV2, Penalties, Temp,
    Temperature, TopK, TopNSigma, TopP, MinP, Typical, Xtc, dry_breakers)

__all__ = ["Candidates", "LLAMA_DEFAULT_SEED", "DEFAULT_SAMPLERS", "SamplerParams", "Sampler",
           "sample_and_accept_n", "parse_samplers", "parse_sampler_seq", "parse_logit_bias"]

# common_params_sampling::samplers (master common/common.h:260)
DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p",
                    "xtc", "temperature")
CHAIN_ORDER = DEFAULT_SAMPLERS       # the name this module used before
_NOT_IMPLEMENTED = ("infill", "adaptive_p")
# common_sampler_type_to_chr (master common/sampling.cpp:795): the --sampler-seq letters
_SEQ_CHARS = {"d": "dry", "k": "top_k", "y": "typ_p", "p": "top_p", "s": "top_n_sigma",
              "m": "min_p", "t": "temperature", "x": "xtc", "i": "infill", "e": "penalties",
              "a": "adaptive_p"}


def _aliases() -> dict[str, str]:
    """common_sampler_types_from_names: canonical names, kebab-case, no-dash, and a few more."""
    out = {}
    for name in set(_SEQ_CHARS.values()):
        out[name] = name
        if "_" in name:
            out[name.replace("_", "-")] = name
            out[name.replace("_", "")] = name
    out.update(nucleus="top_p", temp="temperature", typ="typ_p")
    return out


_NAMES = _aliases()


def _matched(keys, table: dict, by: str, known: str) -> tuple:
    """The canonical names of `keys` in `table`; a key it lacks is warned about and skipped, as
    llama.cpp's common_sampler_types_from_names / _from_chars do (master common/sampling.cpp:876-887,
    905-916)."""
    out = []
    for k in keys:
        if k in table:
            out.append(table[k])
        else:
            warnings.warn(f"unable to match sampler by {by} {k!r}: skipped, as llama.cpp does ({known})",
                          stacklevel=3)
    return tuple(out)


def parse_samplers(text: str) -> tuple:
    """'penalties;top_k;temperature' -> the canonical names, as llama.cpp's --samplers reads
    them: case-insensitive, aliases allowed, an unknown name warned about and skipped."""
    return _matched([n.lower() for n in str(text).split(";")], _NAMES, "name",
                    "names: " + ", ".join(DEFAULT_SAMPLERS))


def parse_sampler_seq(chars: str) -> tuple:
    """'edskypmxt' -> the canonical names, as llama.cpp's --sampler-seq reads them (an unknown
    letter warned about and skipped)."""
    return _matched(list(chars), _SEQ_CHARS, "char", "letters: " + "".join(_SEQ_CHARS))


_LOGIT_BIAS = re.compile(r"\s*([+-]?\d+)\s*([+-])\s*(.+)", re.S)


def parse_logit_bias(text: str) -> tuple:
    """'15043+1' / '15043-inf' / '15043 + 1' -> (15043, bias), as llama.cpp's --logit-bias reads it
    (common/arg.cpp:2240-2255: a token id, a sign, a number). A NaN bias is refused (master adds
    it to the logit); an id outside the vocab is taken, as master's, and changes nothing."""
    m = _LOGIT_BIAS.fullmatch(str(text))
    try:
        bias = float(m.group(3)) if m else float("nan")
    except ValueError:
        bias = float("nan")
    check_param(m is not None and not math.isnan(bias) and -2**31 <= int(m.group(1)) < 2**31,
                "logit_bias", text, "TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1 or 15043-inf "
                "(a NaN bias refused)")
    return int(m.group(1)), bias if m.group(2) == "+" else -bias


@dataclass
class SamplerParams:
    """common_params_sampling (the fields specnb implements), with llama.cpp's defaults
    (master common/common.h:223)."""
    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.0
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    min_keep: int = 0
    seed: int = LLAMA_DEFAULT_SEED
    samplers: tuple = DEFAULT_SAMPLERS
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64      # c392e50: -1 (the context size)
    dry_sequence_breakers: tuple = ("\n", ":", "\"", "*")
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    top_n_sigma: float = -1.0
    logit_bias: tuple = ()            # ((token, bias), ...)
    dist_draw: str = "master"         # "c392e50": draw as a c392e50 build does (see Dist)

    def validate(self) -> "SamplerParams":
        """Master's ranges (common/arg.cpp:1983-2230): the floats take any number but NaN (their
        samplers switch off or clamp where the flags' help says), the penalties must be finite,
        the windows >= 0; mirostat 0, 1 or 2 (master aborts on others)."""
        def num(name, lo=None, hi=None, lo_open=False, integer=False, finite=False, expected=""):
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) if integer else \
                isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            ok = ok and (integer or (math.isfinite(v) if finite else not math.isnan(v)))
            if ok and lo is not None:
                ok = v > lo if lo_open else v >= lo
            if ok and hi is not None:
                ok = v <= hi
            check_param(ok, name, v, expected)
        num("temp", expected="a number, not NaN (<= 0 = greedy)")
        num("top_k", integer=True, expected="an integer (<= 0 disables top-k)")
        num("top_p", expected="a number, not NaN (>= 1 disables top-p)")
        num("min_p", expected="a number, not NaN (<= 0 disables min-p)")
        num("typ_p", expected="a number, not NaN (>= 1 disables typical-p)")
        num("penalty_last_n", 0, integer=True,
            expected="an integer >= 0 (0 disables; llama.cpp master refuses the -1 that c392e50 "
                     "read as the context size)")
        # master: finite, > 0 and with a finite inverse in float32 (common/arg.cpp:2083-2087)
        rep = self.penalty_repeat
        num("penalty_repeat", 0.0, lo_open=True, finite=True, expected="a finite number > 0 (1 disables)")
        with np.errstate(divide="ignore", over="ignore"):
            check_param(bool(np.isfinite(np.float32(1.0) / np.float32(rep))), "penalty_repeat", rep,
                        "a number whose inverse is finite in float32, as llama.cpp master checks")
        num("penalty_freq", finite=True, expected="a finite number (0 disables)")
        num("penalty_present", finite=True, expected="a finite number (0 disables)")
        num("min_keep", 0, integer=True, expected="an integer >= 0")
        num("seed", 0, 0xFFFFFFFF, integer=True, expected="an integer in [0, 4294967295]")
        num("xtc_probability", expected="a number, not NaN (<= 0 disables XTC)")
        num("xtc_threshold", expected="a number, not NaN (> 0.5 disables XTC)")
        num("dynatemp_range", expected="a number, not NaN (<= 0 disables dynamic temperature)")
        num("dynatemp_exponent", expected="a number, not NaN")
        num("dry_multiplier", expected="a number, not NaN (0 disables DRY)")
        num("dry_base", expected="a number, not NaN (< 1 disables DRY)")
        num("dry_allowed_length", integer=True, expected="an integer")
        num("dry_penalty_last_n", 0, integer=True,
            expected="an integer >= 0 (0 disables; llama.cpp master refuses negative values)")
        num("mirostat", 0, 2, integer=True, expected="0, 1 or 2 (0 = off; llama.cpp master aborts on "
                                                      "other values, common/sampling.cpp:408)")
        num("mirostat_tau", expected="a number, not NaN")
        num("mirostat_eta", expected="a number, not NaN")
        num("top_n_sigma", expected="a number, not NaN (<= 0 disables top-n-sigma)")
        check_param(self.dist_draw in ("master", "c392e50"), "dist_draw", self.dist_draw,
                    "'master' or 'c392e50'")
        check_param(isinstance(self.dry_sequence_breakers, (tuple, list)) and
                    all(isinstance(b, str) for b in self.dry_sequence_breakers),
                    "dry_sequence_breakers", self.dry_sequence_breakers, "a tuple of strings")
        for lb in self.logit_bias:
            ok = isinstance(lb, (tuple, list)) and len(lb) == 2 and \
                isinstance(lb[0], (int, np.integer)) and not isinstance(lb[0], bool) \
                and isinstance(lb[1], (int, float, np.integer, np.floating)) and not math.isnan(lb[1])
            check_param(ok, "logit_bias", lb, "(token id, bias) pairs, the bias not NaN")
        names = []
        for s in self.samplers:
            key = str(s).lower()
            check_param(key in _NAMES, "samplers", s, "names from " + ", ".join(DEFAULT_SAMPLERS))
            check_param(_NAMES[key] not in _NOT_IMPLEMENTED, "samplers", s,
                        "a sampler specnb implements (infill and adaptive_p are not)")
            names.append(_NAMES[key])
        self.samplers = tuple(names)
        self.dry_sequence_breakers = tuple(self.dry_sequence_breakers)
        self.logit_bias = tuple((int(t), float(b)) for t, b in self.logit_bias)
        return self

    @property
    def greedy(self) -> bool:
        """The temperature step keeps only the most likely candidate (temp <= 0, and a dynamic
        range that cannot lift it above 0)."""
        return (self.mirostat == 0 and "temperature" in self.samplers and self.temp <= 0.0
                and (self.dynatemp_range <= 0.0 or self.temp + self.dynatemp_range <= 0.0))

    def replace(self, **kw) -> "SamplerParams":
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(kw) - set(d)
        if unknown:
            raise ParamError(f"unknown sampler parameter(s): {', '.join(sorted(unknown))}")
        d.update(kw)
        return SamplerParams(**d).validate()


@functools.lru_cache(maxsize=4)
def _breakers_for(vocab, breakers: tuple) -> dict:
    return dry_breakers(vocab, breakers)


def _step(name: str, P: SamplerParams):
    """One sampler of the chain, by its --samplers name (common_sampler_init's switch)."""
    if name == "penalties":
        if P.penalty_last_n == 0 or (P.penalty_repeat == 1.0 and P.penalty_freq == 0.0
                                     and P.penalty_present == 0.0):
            return Disabled("penalties")
        return Penalties(P.penalty_last_n, P.penalty_repeat, P.penalty_freq, P.penalty_present)
    if name == "dry":
        if P.dry_multiplier == 0.0 or P.dry_base < 1.0 or P.dry_penalty_last_n == 0:
            return Disabled("dry")
        return Dry(P.dry_multiplier, P.dry_base, P.dry_allowed_length, P.dry_penalty_last_n,
                   None if P.dry_sequence_breakers else {})
    if name == "top_n_sigma":
        return TopNSigma(P.top_n_sigma) if P.top_n_sigma > 0 else Disabled("top-n-sigma")
    if name == "top_k":
        return TopK(P.top_k) if P.top_k > 0 else Disabled("top-k")
    if name == "typ_p":
        return Typical(P.typ_p, P.min_keep) if P.typ_p < 1.0 else Disabled("typical")
    if name == "top_p":
        return TopP(P.top_p, P.min_keep) if P.top_p < 1.0 else Disabled("top-p")
    if name == "min_p":
        return MinP(P.min_p, P.min_keep) if P.min_p > 0.0 else Disabled("min-p")
    if name == "xtc":
        if P.xtc_probability <= 0.0 or P.xtc_threshold > 0.5:
            return Disabled("xtc")
        return Xtc(P.xtc_probability, P.xtc_threshold, P.min_keep, P.seed)
    if name == "temperature":
        if P.temp == 1.0 and P.dynatemp_range <= 0.0:
            return Disabled("temp-ext")
        return Temperature(P.temp, P.dynatemp_range, P.dynatemp_exponent)
    raise ParamError(f"unknown sampler {name!r}")


class Sampler:
    """common_sampler: sample(ctx, idx) -> token; accept(token); reset(); clone();
    distribution(ctx, idx): the final candidates and their probabilities, changing nothing.

    `n_vocab` is the vocab size (mirostat's n; taken from the logits when not given); `vocab`
    is needed only for DRY's sequence breakers and is taken from the context when not given.
    """

    def __init__(self, params: SamplerParams | None = None, n_vocab: int | None = None,
                 vocab=None):
        self.params = P = (params or SamplerParams()).validate()
        self.n_vocab, self.vocab = n_vocab, vocab
        if n_vocab is not None:
            for t, _ in P.logit_bias:
                if not 0 <= t < n_vocab:      # as llama_sampler_logit_bias_apply: no candidate has it
                    warnings.warn(f"logit bias for token {t}: outside the vocab (0..{n_vocab - 1}), "
                                  f"it changes nothing, as in llama.cpp", stacklevel=2)
        chain = [LogitBias(P.logit_bias)] if P.logit_bias else []
        if P.mirostat == 0:
            chain += [_step(name, P) for name in P.samplers] + [Dist(P.seed, P.dist_draw)]
        elif P.mirostat == 1:
            chain += [Temp(P.temp), Mirostat(n_vocab, P.seed, P.mirostat_tau, P.mirostat_eta)]
        else:
            chain += [Temp(P.temp), MirostatV2(P.seed, P.mirostat_tau, P.mirostat_eta)]
        self.chain = chain
        self.final = chain[-1]                       # the step that draws: dist or mirostat
        self.seed_used = self.final.seed_cur
        self.prev: deque = deque(maxlen=max(64, P.penalty_last_n))   # common_sampler::prev
        self.cur: Candidates | None = None
        if vocab is not None:
            self._bind_vocab(vocab)
        self._fast = P.greedy and not P.logit_bias and not any(
            isinstance(st, (Xtc, Typical)) for st in chain[:self._temperature_index()])

    @property
    def rng(self):
        """The RNG of the final draw (an rng.Mt19937)."""
        return self.final.rng

    def _temperature_index(self) -> int:
        return next((i for i, st in enumerate(self.chain) if isinstance(st, Temperature)),
                    len(self.chain))

    def _vocab_from(self, ctx) -> None:
        if self.n_vocab is None and getattr(ctx, "output_ids", None) is not None:
            self.n_vocab = ctx.model.n_vocab   # (not len(logits): a restricted head's are shorter)
        if self.vocab is None and any(isinstance(st, Dry) and st.breakers is None
                                      for st in self.chain):
            self.vocab = ctx.model.vocab
            self._bind_vocab(self.vocab)

    def _bind_vocab(self, vocab) -> None:
        for st in self.chain:
            if isinstance(st, Dry) and st.breakers is None:
                st.breakers = _breakers_for(vocab, self.params.dry_sequence_breakers)

    def _fast_path_now(self) -> bool:
        """Greedy, and nothing before the temperature step can move the argmax right now."""
        if not self._fast:
            return False
        for st in self.chain[:self._temperature_index()]:
            if isinstance(st, Penalties) and st.counts:
                return False
            if isinstance(st, Dry) and len(st.last_tokens) > st.allowed_length:
                return False
        return True

    # ---- the chain -----------------------------------------------------------------------
    def _run(self, logits, preview: bool, ids=None) -> Candidates:
        # ids: the token id of each logit (a restricted head, Context.output_ids); None: 0..n-1
        if self.n_vocab is None:
            self.n_vocab = len(logits)
        if isinstance(self.final, Mirostat) and not self.final.n_vocab:
            self.final.n_vocab = self.n_vocab
        if self._fast_path_now():
            # same result as the chain: nothing moves the argmax, the temperature keeps it
            i = int(argmax(np.ascontiguousarray(logits, dtype=np.float32)))
            cur = Candidates(np.array([i if ids is None else ids[i]]), np.array([logits[i]], dtype=np.float32),
                             np.ones(1, dtype=np.float32), sorted=True)
            if not preview:
                cur.selected = 0
                if self.params.dist_draw == "master":
                    self.final.rng.canonical_double()      # dist still draws once
            return cur
        cur = Candidates.from_logits(logits, ids)
        for st in self.chain:
            if isinstance(st, Dry) and st.breakers is None:
                raise ParamError("DRY sequence breakers need the vocab: pass Sampler(..., vocab=) "
                                 "or sample from a context")
            st.apply(cur, preview)
        return cur

    def sample_logits(self, logits: np.ndarray) -> int:
        """Run the chain over one logits row [n_vocab] and return the chosen token id."""
        self.cur = self._run(logits, preview=False)
        return self._chosen()

    def _chosen(self) -> int:
        if self.cur.selected < 0:
            raise ParamError("the sampler chain left no candidate to sample")
        return int(self.cur.ids[self.cur.selected])

    def sample(self, ctx, idx: int) -> int:
        """common_sampler_sample(gsmpl, ctx, idx): sample from the logits of batch row idx."""
        self._vocab_from(ctx)
        self.cur = self._run(ctx.get_logits_ith(idx), False, getattr(ctx, "output_ids", None))
        return self._chosen()

    def distribution_logits(self, logits: np.ndarray) -> Candidates:
        """The candidates (ids, p) the final draw of `sample_logits(logits)` would pick from,
        after every sampler of the chain, in the order the draw walks them. Consumes no random
        number and changes no state (XTC's coin is the one the next sample will toss)."""
        return self._run(logits, preview=True)

    def distribution(self, ctx, idx: int) -> Candidates:
        """distribution_logits for batch row idx of the last decode."""
        self._vocab_from(ctx)
        return self._run(ctx.get_logits_ith(idx), True, getattr(ctx, "output_ids", None))

    def accept(self, token: int) -> None:
        """common_sampler_accept: the token enters the penalty window and DRY's history."""
        for st in self.chain:
            st.accept(token)
        self.prev.append(int(token))

    def reset(self) -> None:
        """common_sampler_reset: clear the windows and reseed every RNG of the chain
        (llama_sampler_dist_reset; with the default seed that is a fresh random seed)."""
        for st in self.chain:
            st.reset()
        self.seed_used = self.final.seed_cur
        self.prev.clear()

    def clone(self) -> "Sampler":
        """common_sampler_clone: an independent copy, every window, RNG and mu included."""
        memo = {id(self.vocab): self.vocab}
        for st in self.chain:
            if isinstance(st, Dry) and st.breakers is not None:
                memo[id(st.breakers)] = st.breakers
        return copy.deepcopy(self, memo)

    def get_candidates(self, do_sort: bool = False) -> Candidates | None:
        """common_sampler_get_candidates: the candidates of the last sample (sorted by p, the
        selected one followed, when do_sort and they are not sorted)."""
        c = self.cur
        if c is not None and do_sort and not c.sorted:
            tok = c.ids[c.selected] if c.selected >= 0 else None
            c.take(np.argsort(-c.p, kind="stable"))
            c.sorted = True
            if tok is not None:
                c.selected = int(np.nonzero(c.ids == tok)[0][0])
        return c

    def prob_of(self, token: int) -> float:
        """Probability the last sample gave `token` (0 when it was not a candidate)."""
        c = self.cur
        if c is None:
            return 0.0
        if 0 <= c.selected < len(c.ids) and c.ids[c.selected] == token:
            return float(c.p[c.selected])                 # the sampled token itself: no search
        hit = np.nonzero(c.ids == token)[0]
        return float(c.p[hit[0]]) if len(hit) else 0.0

    def describe(self) -> str:
        """common_sampler_print: 'logits -> logit-bias -> penalties -> ... -> dist'."""
        return "logits " + "".join(f"-> {'' if st.enabled else '?'}{st.name} " for st in self.chain)


def sample_and_accept_n(smpl: Sampler, ctx, draft, idxs=None, probs: list | None = None) -> list[int]:
    """common_sampler_sample_and_accept_n: verify a draft against the target's own sampler.

    Row idxs[i] of the last target batch holds the logits that predict draft[i]. Each row is
    sampled with the target chain and the sample accepted; the first sample that differs from
    the draft ends the walk (it replaces the rejected token). If every draft token matched,
    one more sample from row idxs[len(draft)] is the bonus token. Returns the committed ids:
    len(result) - 1 draft tokens were accepted, and len(result) >= 1 always. If `probs` is a
    list, the sampler's probability of each sampled token is appended to it (for views).
    """
    if idxs is None:
        idxs = list(range(len(draft) + 1))
    if len(idxs) != len(draft) + 1:
        raise ParamError(f"sample_and_accept_n: {len(idxs)} rows for a draft of {len(draft)} "
                         f"(needs len(draft) + 1)")
    result = []
    i = 0
    while i < len(draft):
        tok = smpl.sample(ctx, idxs[i])
        smpl.accept(tok)
        result.append(tok)
        if probs is not None:
            probs.append(smpl.prob_of(tok))
        if draft[i] != tok:
            break
        i += 1
    if i == len(draft):
        tok = smpl.sample(ctx, idxs[i])
        smpl.accept(tok)
        result.append(tok)
        if probs is not None:
            probs.append(smpl.prob_of(tok))
    return result
