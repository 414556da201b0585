"""`specnb demo`: speculative decoding on this machine, llama.cpp's and specnb's additions, measured.

1. The real pair, qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b, on code prompts (writing
   a function, editing a given one, completing code), greedy and sampled, as a waterfall
   (WATERFALL): plain decoding, llama.cpp's draft-simple at master's defaults, then specnb's
   additions [specnb, beyond llama.cpp], each line adding one to the line before. Per line: the
   median speed-up over plain decoding, the draft's cost c and the verification batch's price per
   extra row as measured in the loop, acceptance, and whether the output was plain decoding's on
   every prompt (it must be: the target's own sampler decides every token). The headline is the
   fastest line whose output was, with the speculative-simple command that runs it on any prompt,
   and beside it this CPU's roofline for that line (roofline(): its acceptance with a draft token
   at its share of the bytes and each verification row at the int8 compute limit).
2. A prompt where acceptance is low (a poem): llama.cpp's defaults, why they run as fast as they
   do in one line, and the headline configuration with --spec-draft-n-max auto [specnb, beyond
   llama.cpp: llama.cpp's draft length is a fixed integer], which measures whether drafting pays
   and stops when it does not.
3. The SmolLM2 teaching pair, briefly: its stand-in draft costs about as much as its target.

`waterfall()` is part 1's measurement (WATERFALL its lines, one tuple each), which `specnb bench
--spec -md` runs too and a notebook can call; `specnb demo --sweep` measures each fixed draft-max,
`specnb demo --policies` each draft-length policy.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter

from .flags import BEYOND
from ..model.registry import DEFAULT_DRAFT, DEFAULT_TARGET, REAL_DRAFT, REAL_TARGET
from ..speculation.draft_vocab import DEFAULT_DRAFT_VOCAB

# Part 1, one line per configuration, each adding its SpecParams fields to the line before's; plain
# decoding (the target alone) comes first. (label, fields, beyond llama.cpp). The field "draft" is
# not a SpecParams field: DRAFT_Q4_0 runs that line and the ones after it with the pair's draft
# requantized to Q4_0 (registry.requantized_draft; -md changes, the flags do not).
DRAFT_Q4_0 = "q4_0"
WATERFALL = (
    ("llama.cpp's draft-simple at master's defaults", {}, False),
    ("+ the draft keeps its KV rows", {"reeval": False}, True),
    ("+ a restricted draft vocabulary", {"draft_vocab": DEFAULT_DRAFT_VOCAB}, True),
    ("+ the draft requantized to Q4_0", {"draft": DRAFT_Q4_0}, True),
    ("+ each round's draft length chosen from measured costs", {"n_max": "auto"}, True),
    ("+ llama.cpp's ngram-simple drafting first, for free", {"types": ("ngram-simple", "draft-simple")},
     True),
)
PLAIN = "plain decoding (the target alone)"
SWEEP_DRAFT_MAX = (1, 2, 3, 4, 6, 8)
# a timed run in which other processes took more than this share of the CPU is run again
QUIET = 0.10

# (label, text, wrap as a chat message)
CODE_PROMPTS = [
    ("write a function", "Write a Python function is_prime(n) that returns True when n is a "
                         "prime number. Only the code, no explanation.", True),
    ("edit a function", "Add type hints and a docstring to this function; keep the body as it "
                        "is. Only the code.\n\n```python\ndef mean(values):\n    total = 0\n"
                        "    for v in values:\n        total += v\n    return total / len(values)\n"
                        "```", True),
    ("complete code", "def binary_search(items, target):\n    \"\"\"Return the index of target "
                      "in the sorted list items, or -1.\"\"\"\n", False),
]
LOW_ACCEPTANCE_PROMPT = ("a poem", "Write a short poem in English about the sea at night.", True)
TEACHING_PROMPT = ("a sentence", "The capital of France is", False)


def samplings():
    from ..run.sampling import SamplerParams
    return [("greedy", SamplerParams(temp=0.0, seed=1)),
            ("sampled", SamplerParams(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7))]


def prompt_ids(vocab, text: str, chat: bool) -> list:
    if chat:
        text = vocab.apply_chat_template([{"role": "user", "content": text}])
    return vocab.tokenize(text)


def verdict(speedup: float) -> str:
    """The word for a measured speed-up over plain decoding (within 2%: a shared machine's noise)."""
    return "wins" if speedup > 1.02 else "loses" if speedup < 0.98 else "breaks even"


# ---- timed runs, taking turns --------------------------------------------------------------------
def take_turns(runs: dict, repeats: int = 1, quiet: float | None = QUIET, max_tries: int = 4,
               wait_s: float = 0.0) -> dict:
    """Run each of `runs` (name -> a function returning a tuple whose first item has t_gen_s) in
    turn, `repeats` passes, and keep the faster run of each. With `quiet`, a run in which other
    processes took more than that share of the CPU does not count: it is run again in a further
    pass (at most max_tries passes, each after waiting up to wait_s seconds for the machine to be
    quiet). -> name -> (the kept run's tuple, the share of the CPU others took during it)."""
    from ..measure.contention import OtherLoad, wait_until_quiet

    def key(run):                       # quiet runs first, then the fastest
        busy = run[1] is not None and quiet is not None and run[1] > quiet
        return busy, run[0][0].t_gen_s
    kept: dict = {}
    for attempt in range(max(max_tries if quiet is not None else 1, repeats)):
        todo = [n for n in runs if attempt < repeats or key(kept[n])[0]]
        if not todo:
            break
        if quiet is not None and wait_s > 0:
            wait_until_quiet(quiet, wait_s)
        for name in todo:
            with OtherLoad() as load:
                out = runs[name]()
            if name not in kept or key((out, load.share)) < key(kept[name]):
                kept[name] = (out, load.share)
    return kept


def _plain_run(pair, ids, sp, n_predict: int):
    from ..run.generate import generate
    from ..run.sampling import Sampler
    return lambda: (generate(pair.ctx_tgt, Sampler(sp, pair.target.n_vocab), ids, n_predict),)


def _spec_run(pair, ids, sp, n_predict: int, params):
    from ..speculation.loop import SpeculativeLoop

    def run():
        ctx_dft = pair.ctx_dft if params.needs_draft_model() else None   # n-gram types need none
        loop = SpeculativeLoop(pair.ctx_tgt, ctx_dft, ids, n_predict, sp, params)
        events, log = [], None
        if ctx_dft is not None:          # the draft model's decodes in the rounds, not its prompt's
            loop.prefill()
            saved, ctx_dft.decode_log = ctx_dft.decode_log, []
            try:
                r = loop.run(on_round=events.append)[0]
            finally:
                log, ctx_dft.decode_log = ctx_dft.decode_log, saved
        else:
            r = loop.run(on_round=events.append)[0]
        return r, loop.chain.main_stats(), events, loop.policy.stats(), log
    return run


def c_parts(c, log, n_dft: int, u: float) -> dict | None:
    """The loop's draft cost c (a drafted token's drafting and process() time over plain decoding's
    time per token u, n_dft tokens) in three parts, from the draft model's decodes in the rounds
    (`log`: (rows, seconds) each): "steps", one one-row step (the median of the one-row decodes)
    per decode, "rows", what its batches cost beyond that (the rows it catches up: after a round
    whose draft was all accepted, the last draft token, which it never decoded, beside the
    target's new token), and "other", the rest of the drafting time (sampling, bookkeeping).
    They add up to c. None without a one-row decode to price a step."""
    one = [dt for n, dt in log or () if n == 1]
    if c is None or not one or not n_dft or not u:
        return None
    step = statistics.median(one)
    t_dec = sum(dt for _, dt in log)
    steps = len(log) * step / n_dft / u
    return {"steps": steps, "rows": t_dec / n_dft / u - steps, "other": c - t_dec / n_dft / u,
            "step_ms": 1e3 * step, "decodes": dict(sorted(Counter(n for n, _ in log).items()))}


def _c_parts_median(runs: list) -> dict | None:
    # a stage's parts of c: each part's median over the runs that have them (so, like the medians
    # of c, they need not add up to the stage's c exactly)
    parts = [r["c_parts"] for r in runs if r.get("c_parts")]
    if not parts:
        return None
    return {k: statistics.median(p[k] for p in parts) for k in ("steps", "rows", "other", "step_ms")}


def _spec_params(spec):
    """A SpecParams, or a draft-max (N, "auto", ...) for SpecParams(n_max=...)."""
    from ..speculation.params import SpecParams
    return spec if isinstance(spec, SpecParams) else SpecParams(n_max=spec)


def _row(plain, spec) -> dict:
    """Speeds, acceptance, where a round's time goes, and the loop's costs, from the kept runs."""
    from ..measure.stats import examined_counts
    (p,), p_share = plain
    (s, st, events, draft_len, log), s_share = spec
    n = max(len(events), 1)
    u = p.t_gen_s / max(len(p.tokens), 1)                  # plain decoding's time per token
    spec_tok_s = len(s.tokens) / s.t_gen_s if s.t_gen_s else 0.0
    t_draft = sum(ev.t_draft + ev.t_process for ev in events)
    n_dft = sum(len(ev.slot.draft) for ev in events if ev.slot.impl == "draft-simple" and not ev.slot.replay)
    rows = sum(1 + len(ev.slot.draft) for ev in events) / n
    t_verify = sum(ev.t_verify for ev in events) / n
    # the price of a verification row, from the rounds that drafted (a plain round has no extra row)
    drafted = [ev for ev in events if ev.slot.draft]
    extra = sum(len(ev.slot.draft) for ev in drafted)
    busy = [x for x in (p_share, s_share) if x is not None]
    c = t_draft / n_dft / u if n_dft and u else None
    return {"identical": p.tokens == s.tokens, "n_tokens": len(s.tokens),
            "plain_tok_s": p.tok_per_s, "spec_tok_s": spec_tok_s,
            "speedup": spec_tok_s / p.tok_per_s if p.tok_per_s else 0.0,
            "n_drafted": s.n_drafted, "n_accept": s.n_accept, "examined": list(examined_counts(events)),
            "accept_rate": s.accept_rate, "acc_rate_per_pos": st.get("acc_rate_per_pos", []),
            "mean_acc_len": st.get("mean_acc_len", 0.0), "n_rounds": s.n_rounds,
            "tokens_per_round": len(s.tokens) / n,
            # where a round's time goes, in milliseconds
            "t_plain_token_ms": 1e3 * u, "t_verify_ms": 1e3 * t_verify,
            "t_draft_ms": 1e3 * t_draft / n,
            "t_round_ms": 1e3 * sum(ev.t_round for ev in events) / n,
            "rows_per_round": rows,
            # the draft's cost c in the loop: drafting and process() per token the draft model
            # drafted, over plain decoding's time per token (None: it drafted none), and its parts
            "c": c, "c_parts": c_parts(c, log, n_dft, u),
            # the verification batch's price per row beyond the first, over a plain step
            "verify_row": ((sum(ev.t_verify for ev in drafted) - u * len(drafted)) / extra / u
                           if extra and u else None),
            "draft_len": draft_len, "busy": max(busy) if busy else None, "text": s.text}


def compare(pair, ids, sp, n_predict: int, spec, repeats: int = 1,
            quiet: float | None = QUIET, max_tries: int = 4, wait_s: float = 0.0) -> dict:
    """Plain decoding, then speculative decoding with `spec` (a SpecParams, or a draft-max) from
    the same prompt, taking turns `repeats` times and keeping the faster run of each (take_turns:
    busy runs are run again, and row["busy"] says how much the kept runs lost to others): speeds,
    acceptance, where a round's time goes, the loop's costs, and whether the two outputs are the
    same tokens."""
    kept = take_turns({"plain": _plain_run(pair, ids, sp, n_predict),
                       "spec": _spec_run(pair, ids, sp, n_predict, _spec_params(spec))},
                      repeats, quiet, max_tries, wait_s)
    return _row(kept["plain"], kept["spec"])


# ---- part 1: the waterfall -----------------------------------------------------------------------
def waterfall_stages(stages=WATERFALL, drafts: dict | None = None) -> list:
    """Each stage as a dict: label, beyond, fields (its SpecParams fields and "draft", added up to
    it), params, draft (the "draft" field: None or DRAFT_Q4_0), flags (speculative-simple's flags
    for its params, app/flags.spec_flags) and step (what it adds: a new draft as `-md NAME`, NAME
    from `drafts`, draft field -> the draft's command-line name, when given, then flags)."""
    from .flags import spec_flags
    from ..speculation.params import SpecParams
    out, fields = [], {}
    for label, add, beyond in stages:
        fields = {**fields, **add}
        params = stage_params(fields)
        step = {k: v for k, v in add.items() if k != "draft"}
        md = ["-md", (drafts or {}).get(add["draft"], "<the draft requantized to Q4_0>")] if "draft" in add else []
        out.append({"label": label, "beyond": beyond, "fields": fields, "params": params,
                    "draft": fields.get("draft"), "flags": spec_flags(params),
                    "step": md + spec_flags(SpecParams(**step).validate())})
    return out


def stage_params(fields: dict):
    """A stage's SpecParams (its fields but "draft")."""
    from ..speculation.params import SpecParams
    return SpecParams(**{k: v for k, v in fields.items() if k != "draft"}).validate()


def stage_pairs(pair, stages=WATERFALL) -> dict:
    """The pair each stage runs on, by its "draft" field: None -> `pair`; DRAFT_Q4_0 -> the same
    target context with the draft requantized to Q4_0 (registry.requantized_draft, forged once)
    in a context of its own, compiled and warmed up here."""
    from ..model.registry import requantized_draft
    from ..run.pair import warm_up, with_draft
    out = {None: pair}
    for st in waterfall_stages(stages):
        d = st["draft"]
        if d is not None and d not in out:
            if d != DRAFT_Q4_0:
                raise ValueError(f"waterfall: unknown draft {d!r} (expected {DRAFT_Q4_0!r})")
            out[d] = with_draft(pair, requantized_draft(pair.draft))
            warm_up(out[d].ctx_dft)
    return out


def pair_of(pairs: dict, stage: dict):
    """The pair (of stage_pairs) a stage or a waterfall row ran on: by its fields' "draft"."""
    return pairs[(stage.get("fields") or {}).get("draft")]


def pick_headline(stages: list) -> dict | None:
    """The fastest stage whose output was plain decoding's on every prompt (the first of equals)."""
    ok = [s for s in stages if s["identical"] and s["speedup"] is not None]
    return max(ok, key=lambda s: s["speedup"], default=None)


def recommended(w: dict) -> dict:
    """The stage to run elsewhere: the headline, or the last stage when plain decoding was fastest."""
    h = w["headline"]
    return h if h is not None and h["stage"] > 0 else w["stages"][-1]


def with_auto(stage: dict):
    """A stage's SpecParams with --spec-draft-n-max auto (as they are when they have it)."""
    p = stage_params(stage["fields"])
    return p if p.schedule == "auto" else p.replace(n_max="auto", schedule="auto")


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _stage_row(i: int, st: dict | None, runs: list, draft: str | None) -> dict:
    from ..measure.cost import alpha_from_counts
    drafted = sum(r.get("n_drafted", 0) for r in runs)
    accepted, examined = (sum(r.get("examined", (0, 0))[i] for r in runs) for i in (0, 1))
    busy = [r["busy"] for r in runs if r.get("busy") is not None]
    return {"stage": i, "label": st["label"] if st else PLAIN, "beyond": bool(st and st["beyond"]),
            "fields": st["fields"] if st else None, "flags": st["flags"] if st else [],
            "draft": draft, "step": st["step"] if st else [],
            "speedup": _median(r["speedup"] for r in runs), "tok_s": _median(r["tok_s"] for r in runs),
            "c": _median(r.get("c") for r in runs), "c_parts": _c_parts_median(runs),
            "verify_row": _median(r.get("verify_row") for r in runs),
            "accept_rate": sum(r["n_accept"] for r in runs) / drafted if drafted else None,
            # the maximum-likelihood acceptance per position (cost.alpha_from_counts: accepted over
            # the draft tokens the target examined, up to each draft's first rejection)
            "alpha": alpha_from_counts(accepted, examined) if examined else None,
            "identical": all(r["identical"] for r in runs), "busy": max(busy) if busy else None,
            "runs": runs}


def waterfall(pair, prompts, samplings, n_predict: int, timing: dict, stages=WATERFALL,
              say=None, pairs: dict | None = None) -> dict:
    """Plain decoding and every stage of `stages` (WATERFALL) on each prompt (label, text, chat)
    x sampling (name, SamplerParams) of the open `pair`. Per prompt and sampling they take turns
    (take_turns with `timing`: repeats, quiet, max_tries, wait_s): each pass runs plain decoding
    once, then every stage; each keeps its faster quiet run, and a stage's speed-up is its kept
    run's tok/s over plain decoding's kept run on the same prompt and sampling (one plain run,
    reused by every stage). Per stage: the median speed-up and tok/s, the medians of the loop's
    draft cost c and verification price per extra row (see _row), the acceptance over every run,
    and whether every output was plain decoding's. `say` gets one line per prompt and sampling.
    A stage with a "draft" runs on pairs[draft] (stage_pairs, made here unless given); its row
    names that draft (the -md of its command).
    -> {"stages": [...], "headline": pick_headline(stages), "identical", "n_predict", "roofline":
    roofline(pairs, ...), ...}"""
    say = say or (lambda *a: None)
    pairs = pairs if pairs is not None else stage_pairs(pair, stages)
    names = {k: cli_name(p.draft) for k, p in pairs.items()}
    st = waterfall_stages(stages, names)
    if prompts and samplings:       # every stage once, untimed: its first-use costs (the draft
                                    # vocabulary's ranking, imports) stay out of the timed runs
        ids = prompt_ids(pair.target.vocab, *prompts[0][1:])
        for s in st:
            _spec_run(pair_of(pairs, s), ids, samplings[0][1], 4, s["params"])()
    probes = _int8_probes(pair)                                 # the int8 limit before the runs
    runs: list = [[] for _ in range(len(st) + 1)]              # [0]: plain decoding
    for label, text, chat in prompts:
        ids = prompt_ids(pair.target.vocab, text, chat)
        for sname, sp in samplings:
            fns = {0: _plain_run(pair, ids, sp, n_predict)}
            fns.update({i + 1: _spec_run(pair_of(pairs, s), ids, sp, n_predict, s["params"])
                        for i, s in enumerate(st)})
            kept = take_turns(fns, **timing)
            (p,), share = kept[0]
            runs[0].append({"prompt": label, "sampling": sname, "tok_s": p.tok_per_s, "speedup": 1.0,
                            "identical": True, "busy": share, "n_tokens": len(p.tokens), "text": p.text})
            for i in range(1, len(st) + 1):
                row = _row(kept[0], kept[i])
                del row["text"]
                runs[i].append({"prompt": label, "sampling": sname, "tok_s": row["spec_tok_s"], **row})
            say(f"  {label} [{sname}]: plain {p.tok_per_s:.1f} tok/s; speed-up per line "
                + " ".join(f"{runs[i][-1]['speedup']:.2f}" for i in range(1, len(st) + 1))
                + ("" if all(runs[i][-1]["identical"] for i in range(1, len(st) + 1)) else
                   "; OUTPUT DIFFERS FROM PLAIN DECODING")
                + _busy_note(max((runs[i][-1] for i in range(len(st) + 1)),
                                 key=lambda r: r["busy"] or 0.0)))
    rows = [_stage_row(i, st[i - 1] if i else None, r, names[st[i - 1]["draft"]] if i else None)
            for i, r in enumerate(runs)]
    w = {"stages": rows, "headline": pick_headline(rows), "n_predict": n_predict,
         "prompts": [p[0] for p in prompts], "samplings": [s[0] for s in samplings],
         "identical": all(r["identical"] for r in rows)}
    w["int8_peak"] = _int8_probes(pair, probes)                # ... and after them
    w["roofline"] = roofline(pairs, w)
    return w


def _int8_probes(pair, before: list | None = None):
    """The int8 compute limit measured beside the waterfall's runs, as bench measures it beside
    its own (it moves with whatever shares the cores: 65-126 G/s on one thread of an AMD EPYC
    Zen 3 within five minutes). Called with no list before the runs: [the first probe]; with that
    list after them: tuning.peak_beside of both (the machine's recorded figure beside it). None
    on a GPU, with float32 activations (the roofline then has no row price) or where
    SPECNB_INT8_PEAK sets the limit (the roofline reads that)."""
    ctx = pair.ctx_tgt
    if ctx.backend_name != "cpu" or ctx.activations != "q8":
        return None
    from ..kernels.tuning import measure_int8_peak, peak_beside, start_int8_probes
    if before is None:
        return start_int8_probes(ctx.n_threads)
    return peak_beside(before + [measure_int8_peak(ctx.n_threads)])


def _cell(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def stage_name(s: dict) -> str:
    """'3. + a restricted draft vocabulary: --spec-draft-vocab 32768 [specnb, beyond llama.cpp]'"""
    return (f"{s['stage']}. {s['label']}" + (f": {' '.join(s['step'])}" if s["step"] else "")
            + (f" {BEYOND}" if s["beyond"] else ""))


def format_waterfall(w: dict) -> list:
    """The waterfall's table, one line per stage, and what its columns mean."""
    L = ["  speed-up |     c | verify/row | accepted | same | configuration (each line adds to the one above)"]
    for s in w["stages"]:
        acc = None if s["accept_rate"] is None else 100 * s["accept_rate"]
        L.append(f"  {s['speedup']:7.2f}x | {_cell(s['c'], '{:.2f}'):>5} | "
                 f"{_cell(s['verify_row'], '{:.2f}'):>10} | {_cell(acc, '{:.0f}%'):>8} | "
                 f"{'yes' if s['identical'] else 'NO':>4} | {stage_name(s)}")
    L += [f"  speed-up: the median over {len(w['prompts'])} prompts x {len(w['samplings'])} samplings "
          f"({w['n_predict']} tokens) of tok/s over plain decoding's on the same prompt; c: the draft's "
          f"time per drafted token in the loop (drafting and process()) over plain decoding's time "
          f"per token; verify/row: in the rounds that drafted, the verification batch's time beyond "
          f"one plain step, per extra row, over a plain step; accepted: the share of drafted tokens "
          f"accepted; same: output identical to plain decoding on every prompt"]
    busy = max((s["busy"] for s in w["stages"] if s["busy"] is not None), default=None)
    if busy is not None and busy > QUIET:
        L.append(f"  busy machine: other processes took up to {100 * busy:.0f}% of the CPU during "
                 f"kept runs; speeds unreliable")
    return L


def command(target: str, draft: str | None, flags: list, prompt: str = "PROMPT") -> str:
    """The command line that runs a configuration (plain decoding: `generate`)."""
    import shlex
    if draft is None:
        return f"python -m specnb generate -m {shlex.quote(target)} -p {prompt}"
    return (f"python -m specnb speculative-simple -m {shlex.quote(target)} -md {shlex.quote(draft)} "
            f"-p {prompt}" + "".join(f" {shlex.quote(t)}" for t in flags))


def cli_name(model) -> str:
    """A model's registry name (`specnb models`), else its path."""
    import os
    from ..model.registry import REGISTRY
    path = os.fspath(getattr(model, "path", model))
    return next((e.name for e in REGISTRY.values() if os.path.basename(path) == e.file_name), path)


def headline_lines(w: dict, target: str, draft: str, lc: dict | None = None) -> list:
    """The headline: the fastest lossless line, its speed-up over specnb's plain decoding and
    over llama.cpp's (when measured), and the command that runs it."""
    h = w["headline"]
    if h is None:
        return ["  headline: none: no line's output was plain decoding's on every prompt"]
    plain = w["stages"][0]
    L = []
    if h["stage"] == 0:
        best = pick_headline(w["stages"][1:])
        L.append("  headline: plain decoding was the fastest here: no lossless speculative line beat "
                 "it in this run" + (f" (the best, line {best['stage']}, {verdict(best['speedup'])} at "
                                     f"{best['speedup']:.2f}x)" if best else ""))
    else:
        L.append(f"  headline: line {h['stage']} ({h['label']}), {h['speedup']:.2f}x specnb's plain decoding "
                 f"({h['tok_s']:.1f} vs {plain['tok_s']:.1f} tok/s, medians)" +
                 (f", {h['tok_s'] / lc['tg_tok_s']:.2f}x llama.cpp's plain decoding "
                  f"({lc['tg_tok_s']:.1f} tok/s)" if lc else "") + f": speculation {verdict(h['speedup'])}")
        p = h.get("c_parts")
        if p and h.get("c") is not None:
            L.append(f"  its draft cost c = {h['c']:.2f} of a target step per drafted token: the draft's "
                     f"one-row steps {p['steps']:.2f} ({p['step_ms']:.1f} ms each), its batches' rows "
                     f"beyond one {p['rows']:.2f} (catching up after a fully accepted round: the last "
                     f"draft token beside the target's new one), sampling and bookkeeping "
                     f"{p['other']:.2f} (medians over the runs)")
    L.append("  run it on your own prompt (add --chat to wrap it as a chat message, as the first "
             "two prompts are):")
    L.append("    " + command(target, (h.get("draft") or draft) if h["stage"] else None, h["flags"]))
    return L


def headline_json(w: dict, target: str, draft: str, lc: dict | None) -> dict | None:
    """The headline for --json: its line, flags (the arguments after -m/-md/-p), speed-up and command."""
    h = w["headline"]
    if h is None:
        return None
    out = {k: h.get(k) for k in ("stage", "label", "flags", "speedup", "tok_s", "c", "c_parts", "accept_rate")}
    out["draft"] = (h.get("draft") or draft) if h["stage"] else None
    out["command"] = command(target, out["draft"], h["flags"])
    if lc:
        out["vs_llama_cpp"] = h["tok_s"] / lc["tg_tok_s"]
    return out


def roofline(pairs: dict, w: dict) -> dict | None:
    """This CPU's roofline for the recommended line (the headline, else the last): the best speed-up
    its acceptance allows (cost.best_speedup_with_rows, whose acceptance is the same alpha at every
    position, independently: the line's maximum-likelihood alpha, its "alpha") with a draft token
    priced by its bytes, c = the draft's bytes a token (its restricted head's rows only) over the
    target's, both read at the same bandwidth, and a verification row beyond the first by the int8
    compute limit, the target's multiply-adds a row at tuning.int8_peak() over plain decoding's
    time per token: what the line would reach with every kernel at the machine's ceilings. The
    limit is w["int8_peak"] where the waterfall probed it beside its runs, else the recorded one
    (or SPECNB_INT8_PEAK's). None without int8 activations on the CPU, without a draft model or
    without examined drafts."""
    from ..figures.cost_map import c_from_bytes
    from ..kernels.tuning import int8_peak
    from ..measure.bench import decode_bytes, draft_decode_bytes, ideal_row_cost, macs_per_row
    from ..measure.cost import best_speedup_with_rows
    rec, plain = recommended(w), w["stages"][0]
    pair = pair_of(pairs, rec)
    ctx = pair.ctx_tgt
    params = stage_params(rec["fields"]) if rec.get("fields") else None
    if (params is None or not params.needs_draft_model() or ctx.backend_name != "cpu"
            or ctx.activations != "q8" or not rec.get("alpha") or not plain.get("tok_s")):
        return None
    probed = w.get("int8_peak")
    gmacs = float(probed["gmacs_s"]) if probed else int8_peak(ctx.n_threads)
    n_vocab, t_step = params.draft_vocab or None, 1.0 / plain["tok_s"]
    c = c_from_bytes(pair.draft, pair.target, n_vocab)
    r = ideal_row_cost(macs_per_row(pair.target), gmacs, t_step)
    s, n = best_speedup_with_rows(rec["alpha"], c, r)
    return {"stage": rec["stage"], "speedup": s, "draft_max": n, "alpha": rec["alpha"], "c": c,
            "row": r, "draft_gb": draft_decode_bytes(pair.draft, n_vocab) / 1e9,
            "target_gb": decode_bytes(pair.target) / 1e9, "gmacs_s": gmacs,
            "gmacs_probes": list(probed["probes_gmacs_s"]) if probed else None,
            "t_step_ms": 1e3 * t_step, "of_roofline": rec["speedup"] / s if rec.get("speedup") else None}


# ---- printing -------------------------------------------------------------------------------------
def roofline_lines(rf: dict | None) -> list:
    """The roofline as text: its speed-up, what it assumes, and the share the line reached."""
    if rf is None:
        return []
    return [f"  this CPU's roofline for line {rf['stage']}: {rf['speedup']:.2f}x at draft-max {rf['draft_max']} "
            f"with its drafts' alpha = {rf['alpha']:.2f} (accepted over examined, taken as independent at each "
            f"position), if a draft token cost its share of the bytes (c = "
            f"{rf['c']:.2f}: {rf['draft_gb']:.3f} against {rf['target_gb']:.3f} GB) and a row beyond the "
            f"first its multiply-adds at the int8 limit ({rf['row']:.2f} of a {rf['t_step_ms']:.1f} ms "
            f"step at {rf['gmacs_s']:.0f} G/s"
            + (", the median of probes before and after the runs: "
               + ", ".join(f"{g:.0f}" for g in rf["gmacs_probes"]) if rf.get("gmacs_probes") else "") + ")"
            + (f"; the line reached {100 * rf['of_roofline']:.0f}% of it" if rf["of_roofline"] else "")]


def why_line(row: dict) -> str:
    """One line: what a round commits, what it costs in target-token times, hence the speedup."""
    u = row["t_plain_token_ms"]
    verify, draft = row["t_verify_ms"] / u, row["t_draft_ms"] / u
    other = max(row["t_round_ms"] / u - verify - draft, 0.0)
    cost, got = verify + draft + other, row["tokens_per_round"]
    c = "-" if row["c"] is None else f"{row['c']:.2f}"
    return (f"why: acceptance is {100 * row['accept_rate']:.0f}%, so a round commits {got:.2f} "
            f"tokens, but it costs {cost:.2f} target-token times: {verify:.2f} to verify "
            f"{row['rows_per_round']:.3g} rows, {draft:.2f} of draft work (c = {c} per draft token) and "
            f"{other:.2f} of sampling and bookkeeping; {got:.2f} / {cost:.2f} = {got / cost:.2f}x")


def _result_line(label: str, sampling: str, row: dict) -> str:
    rates = ", ".join(f"{r:.2f}" for r in row["acc_rate_per_pos"])
    return (f"  {label} [{sampling}]: plain {row['plain_tok_s']:.1f} tok/s, speculative "
            f"{row['spec_tok_s']:.1f} tok/s, speedup {row['speedup']:.2f}x | acceptance "
            f"{100 * row['accept_rate']:.0f}% per position [{rates}], mean accepted length "
            f"{row['mean_acc_len']:.2f} | identical to plain decoding: "
            f"{'yes' if row['identical'] else 'NO'}{_busy_note(row)}" + _chosen_note(row))


def _chosen_note(row: dict) -> str:
    """Under --spec-draft-n-max auto / heuristic: how often each draft length was chosen."""
    st = row.get("draft_len")
    if not st or st["schedule"] == "fixed":
        return ""
    from ..speculation.draft_len import format_chosen
    return "\n      " + format_chosen(st)


def _busy_note(row: dict) -> str:
    b = row.get("busy")
    if b is None or b <= QUIET:
        return ""
    return f" (busy machine: other processes took {100 * b:.0f}% of the CPU; speeds unreliable)"


def _show_text(echo, text: str, max_lines: int = 6) -> None:
    lines = text.strip("\n").splitlines() or [""]
    for ln in lines[:max_lines]:
        echo(f"      | {ln}")
    if len(lines) > max_lines:
        echo(f"      | ... ({len(lines) - max_lines} more lines)")


def _open(target, draft, n_ctx, **kw):
    from ..run.pair import open_pair, warm_up
    p = open_pair(target, draft, n_ctx=n_ctx, **kw)
    warm_up(p.ctx_tgt, p.ctx_dft)
    return p


# ---- the demo -------------------------------------------------------------------------------------
def demo(n_predict: int = 64, n_threads=None, backend: str = "cpu", json_out: bool = False,
         activations: str | None = None, real_pair=(REAL_TARGET, REAL_DRAFT),
         teaching_pair=(DEFAULT_TARGET, DEFAULT_DRAFT), code_prompts=CODE_PROMPTS,
         low_prompt=LOW_ACCEPTANCE_PROMPT, repeats: int = 2, quiet: float | None = QUIET,
         llama_bench: str | None = None, stages=WATERFALL) -> int:
    """Run the three parts; returns 0 when every speculative output equals plain decoding.
    With a llama.cpp build (`llama_bench`, the path of its llama-bench, or $SPECNB_LLAMA_BENCH),
    part 1 also measures llama.cpp's plain decoding of the same target, right after specnb's
    runs, and sets the headline beside it.
    Every comparison runs plain and speculative decoding `repeats` times, taking turns, and
    keeps the faster run of each (a shared machine's noise slows single runs); runs during
    which other processes took the CPU are run again, or marked (see take_turns)."""
    from ..measure.bench_llamacpp import find_llama_bench
    from ..model.registry import REGISTRY, check_parts
    exe = find_llama_bench(llama_bench)          # a bad path fails now, not after the first part
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    kw = dict(backend=backend, n_threads=n_threads, activations=activations)
    # a busy machine gets one more try per run and a few seconds to calm down
    timing = dict(repeats=repeats, quiet=quiet, max_tries=repeats + 1, wait_s=5.0)
    echo("specnb demo: speculative decoding as llama.cpp's speculative-simple does it, and specnb's "
         "additions, measured on this machine.")
    echo(f"  1. the real pair ({real_pair[1]} drafting for {real_pair[0]}) on code prompts, greedy "
         f"and sampled, as a waterfall: plain decoding, llama.cpp's draft-simple at master's "
         f"defaults, then specnb's additions {BEYOND} one at a time; per line the speed-up, the "
         f"draft's and the verification's measured costs, acceptance and whether the output is "
         f"plain decoding's; the fastest lossless line and its command")
    echo("  2. a prose prompt where acceptance is low: llama.cpp's defaults and why they run as "
         f"fast as they do, then the headline with --spec-draft-n-max auto {BEYOND} (llama.cpp's "
         "draft length is a fixed integer), which measures whether drafting pays")
    echo(f"  3. the SmolLM2 teaching pair, briefly (llama.cpp's defaults, then specnb's auto {BEYOND})")
    echo(f"{len(stages)} configurations take turns with plain decoding on six prompt runs: 19 minutes on a busy "
         "2-core AMD EPYC Zen 3 with one line fewer, 3.5 minutes on a 2-core Zen 4 (docs/benchmarks.md), "
         "less on a quiet machine (a run during which other processes took the CPU is run again); the "
         "first run also assembles the real pair (1.6 GB, under a minute), forges its requantized draft "
         "(seconds) and compiles the kernels (a few minutes).")
    out = {"n_predict": n_predict}
    runs, rec = [], None
    if all(n not in REGISTRY or check_parts(REGISTRY[n]).ok for n in real_pair):
        pair = _open(*real_pair, 1024, **kw)
        pairs = stage_pairs(pair, stages)
        w = _winning(echo, pair, code_prompts, n_predict, timing, stages, pairs)
        lc = _beside_llama_cpp(echo, exe, pair, w, n_predict) if exe else None
        names = (cli_name(pair.target), cli_name(pair.draft))
        for ln in format_waterfall(w) + headline_lines(w, *names, lc) + roofline_lines(w["roofline"]):
            echo(ln)
        out.update(waterfall=w["stages"], headline=headline_json(w, *names, lc), roofline=w["roofline"],
                   identical_waterfall=w["identical"])
        if lc is not None:
            out["llama_cpp"] = lc
        rec = recommended(w)
        runs += _low_acceptance(echo, pairs, low_prompt, n_predict, timing, rec)
        del pair, pairs
    else:
        echo(f"\nthe real pair is not installed: run  specnb models install {' '.join(real_pair)}"
             f"  (./run installs it); showing the teaching pair only")
    runs += _teaching(echo, _open(*teaching_pair, 512, **kw), timing)
    same = all(r["identical"] for r in runs) and out.get("identical_waterfall", True)
    if json_out:
        out.pop("identical_waterfall", None)
        print(json.dumps({**out, "identical": same, "runs": runs}))
    else:
        echo(f"\nall speculative outputs identical to plain decoding: {'yes' if same else 'NO'}")
    return 0 if same else 1


def _winning(echo, pair, code_prompts, n_predict, timing, stages, pairs) -> dict:
    from ..model.registry import describe
    echo(f"\n== 1. {describe(pair.draft)} drafting for {describe(pair.target)}: the waterfall ==")
    w = waterfall(pair, code_prompts, samplings(), n_predict, timing, stages, say=echo, pairs=pairs)
    first = w["stages"][0]["runs"][0]
    echo(f"  what the target wrote for {first['prompt']} [{first['sampling']}], as every line did:")
    _show_text(echo, first["text"], 4)
    return w


def _beside_llama_cpp(echo, exe, pair, w, n_predict) -> dict:
    # llama-bench's tg (plain decoding, no prompt) on the same target file and thread count, run
    # after specnb's runs so the two never share the CPU
    from ..measure.bench_llamacpp import run_llama_bench
    n_threads = pair.ctx_tgt.n_threads
    r = run_llama_bench(exe, pair.target.path, n_threads, (), n_gen=n_predict, reps=3)
    plain = w["stages"][0]["tok_s"]
    echo(f"  llama.cpp's plain decoding of this target: {r['tg']:.1f} tok/s (llama-bench -n "
         f"{n_predict} -t {n_threads}, build {r['build']}); specnb's plain decoding: {plain:.1f} "
         f"tok/s = {plain / r['tg']:.2f}x llama.cpp's")
    out = {"tg_tok_s": r["tg"], "build": r["build"], "cmd": " ".join(r["cmd"]),
           "plain_vs_llama_cpp": plain / r["tg"]}
    if w["headline"] is not None:
        out["headline_vs_llama_cpp"] = w["headline"]["tok_s"] / r["tg"]
    return out


def _low_acceptance(echo, pairs, low_prompt, n_predict, timing, rec) -> list:
    """llama.cpp's defaults on the pair's own draft, then `rec` with auto on its line's draft."""
    from ..speculation.params import SpecParams
    from .flags import spec_flags
    pair = pairs[None]
    label, text, chat = low_prompt
    ids = prompt_ids(pair.target.vocab, text, chat)
    sp = samplings()[1][1]
    echo(f"\n== 2. low acceptance: {label}, sampled ==")
    row = compare(pair, ids, sp, n_predict, SpecParams(), **timing)
    echo(_result_line("llama.cpp's defaults", "sampled", row))
    _show_text(echo, row["text"], 4)
    echo("  " + why_line(row))
    params = with_auto(rec)
    flags = spec_flags(params)
    auto = compare(pair_of(pairs, rec), ids, sp, n_predict, params, **timing)
    name = f"line {rec['stage']}" + ("" if rec["fields"].get("n_max") == "auto" else " with auto")
    echo(f"  {name} ({' '.join(flags)}): each round's length chosen from this run's measured costs "
         f"and acceptance {BEYOND}:")
    echo(_result_line(label, "sampled", auto))
    echo(f"  on this prompt llama.cpp's defaults {verdict(row['speedup'])} ({row['speedup']:.2f}x "
         f"plain decoding); {name} {verdict(auto['speedup'])} ({auto['speedup']:.2f}x)")
    return [{"part": 2, "prompt": label, "sampling": "sampled", "flags": [], **row},
            {"part": 2, "prompt": label, "sampling": "sampled", "flags": flags, **auto}]


def _teaching(echo, pair, timing) -> list:
    from ..model.registry import describe
    from ..speculation.params import SpecParams
    echo(f"\n== 3. the teaching pair: {describe(pair.draft)} drafting for {describe(pair.target)} ==")
    label, text, chat = TEACHING_PROMPT
    ids = prompt_ids(pair.target.vocab, text, chat)
    row = compare(pair, ids, samplings()[0][1], 32, SpecParams(), **timing)
    c = "-" if row["c"] is None else f"{row['c']:.2f}"
    echo(f"  its draft is the target requantized to Q4_0, so a draft token costs about what a target "
         f"token does (c = {c} in this run): the pair shows the mechanism (notebooks, live view), "
         f"not speed")
    echo(_result_line(f"{label}, llama.cpp's defaults", "greedy", row))
    auto = compare(pair, ids, samplings()[0][1], 32, SpecParams(n_max="auto"), **timing)
    echo(f"  with --spec-draft-n-max auto {BEYOND} (each round's length chosen from the measured "
         f"costs): {verdict(auto['speedup'])} at {auto['speedup']:.2f}x")
    echo(_result_line(label, "greedy", auto))
    return [{"part": 3, "prompt": label, "sampling": "greedy", "flags": [], **row},
            {"part": 3, "prompt": label, "sampling": "greedy", "flags": ["--spec-draft-n-max", "auto"],
             **auto}]


# ---- the pair's waterfall (`bench --spec -md`): the demo's part 1, the poem, and the goals ---------
HEADLINE_GOAL = 1.6            # the headline on code, x specnb's plain decoding
POEM_GOAL = 0.97               # the headline (with auto) on the poem, x plain decoding
# comparisons of the poem, each taking turns: `auto` decides from timings, so one pair of runs on
# a shared machine reads anywhere in 0.76-1.15x (AMD EPYC Zen 3); the goal takes their median
POEM_RUNS = 3
DRAFT_COST_GOAL = 0.25         # the draft's cost c in the loop, at the headline (else the last line)


def pair_waterfall(target=None, draft=None, n_predict: int = 64, n_threads=None, backend: str = "cpu",
                   activations: str | None = None, repeats: int = 2, quiet="demo's", poem: bool = True,
                   llama_cpp: dict | None = None, stages=None, prompts=None, low_prompt=None,
                   say=None) -> dict:
    """`bench --spec -md`: the demo's waterfall (waterfall) of the pair on its code prompts
    (or `prompts`), greedy and sampled; the configuration it recommends (the headline, else the last
    line) with --spec-draft-n-max auto on the demo's poem (or `low_prompt`), sampled, the median of
    POEM_RUNS comparisons; and the goals
    (waterfall_goals), the headline also set beside llama.cpp's plain decoding when `llama_cpp`
    (bench's llama.cpp column) has it."""
    from ..run.pair import open_pair, warm_up
    pair = open_pair(target, draft, n_ctx=1024, backend=backend, n_threads=n_threads,
                     activations=activations)
    warm_up(pair.ctx_tgt, pair.ctx_dft)
    pairs = stage_pairs(pair, stages or WATERFALL)
    timing = dict(repeats=repeats, quiet=QUIET if quiet == "demo's" else quiet,
                  max_tries=repeats + 1, wait_s=5.0)
    w = waterfall(pair, prompts or CODE_PROMPTS, samplings(), n_predict, timing,
                       stages or WATERFALL, say=say, pairs=pairs)
    names = (cli_name(pair.target), cli_name(pair.draft))
    lc = llama_cpp if llama_cpp and llama_cpp.get("tg_tok_s") else None
    out = {"target": names[0], "draft": names[1], "activations": pair.ctx_tgt.activations, **w,
           "headline": headline_json(w, *names, lc), "llama_cpp": lc}
    if poem:
        from .flags import spec_flags
        rec = recommended(w)
        label, text, chat = low_prompt or LOW_ACCEPTANCE_PROMPT
        params = with_auto(rec)
        ids = prompt_ids(pair.target.vocab, text, chat)
        rows = sorted((compare(pair_of(pairs, rec), ids, samplings()[1][1], n_predict, params, **timing)
                       for _ in range(POEM_RUNS)), key=lambda x: x["speedup"])
        row = rows[len(rows) // 2]
        out["poem"] = {"prompt": label, "sampling": "sampled", "stage": rec["stage"], "draft": rec["draft"],
                       "flags": spec_flags(params), **{k: v for k, v in row.items() if k != "text"},
                       "identical": all(x["identical"] for x in rows), "runs": [x["speedup"] for x in rows]}
    out["goals"] = waterfall_goals(out)
    return out


def waterfall_goals(r: dict) -> list:
    """(goal, measured, met) of a pair_waterfall result: the headline's speed-up on code, the poem,
    the draft's cost c in the loop at the recommended line, and identical output everywhere."""
    h, rec = r["headline"], recommended(r)
    if h is None:
        measured = "no line's output was plain decoding's on every prompt"
    else:
        rf = r.get("roofline")
        measured = (f"{h['speedup']:.2f}x, line {h['stage']}" + ("" if h["stage"] else " (plain decoding)")
                    + (f"; {h['vs_llama_cpp']:.2f}x llama.cpp's plain decoding" if "vs_llama_cpp" in h else "")
                    + (f"; this CPU's roofline for line {rf['stage']}: {rf['speedup']:.2f}x" if rf else ""))
    out = [(f"the headline on code >= {HEADLINE_GOAL}x specnb's plain decoding", measured,
            h is not None and h["speedup"] >= HEADLINE_GOAL)]
    if "poem" in r:
        p = r["poem"]
        out.append((f"on the poem >= {POEM_GOAL}x", f"{p['speedup']:.2f}x, line {p['stage']} with "
                    f"{' '.join(p['flags'])}", p["speedup"] >= POEM_GOAL))
    c = rec["c"]
    out.append((f"draft cost c in the loop <= {DRAFT_COST_GOAL}",
                "-" if c is None else f"c = {c:.2f} at line {rec['stage']}",
                None if c is None else c <= DRAFT_COST_GOAL))
    same = r["identical"] and r.get("poem", {}).get("identical", True)
    out.append(("output identical everywhere", "every prompt, sampling and line"
                + (" and the poem" if "poem" in r else ""), same))
    return out


def format_pair_waterfall(r: dict, goals: bool = True) -> str:
    """The waterfall, its headline and the poem as text; goals=False leaves its goals to bench's
    list (bench_report.goals reads them)."""
    L = [f"speculative decoding of the pair, {r['draft']} drafting for {r['target']}, on the demo's code "
         f"prompts (activations {r['activations']}), one line per configuration:"]
    L += format_waterfall(r) + headline_lines(r, r["target"], r["draft"], r.get("llama_cpp"))
    L += roofline_lines(r.get("roofline"))
    if "poem" in r:
        p = r["poem"]
        runs = p.get("runs") or [p["speedup"]]
        L.append(f"  the poem, sampled, line {p['stage']} with {' '.join(p['flags'])}: {p['speedup']:.2f}x "
                 f"plain decoding ({verdict(p['speedup'])}"
                 + (f"; the median of {len(runs)} comparisons, {min(runs):.2f}-{max(runs):.2f}x" if len(runs) > 1
                    else "") + f"), acceptance {100 * p['accept_rate']:.0f}%, "
                 f"identical: {'yes' if p['identical'] else 'NO'}")
    if goals:
        L.append("goals (the pair's speculative decoding):")
        L += [f"  [{ {True: 'met', False: 'MISSED', None: '-'}[met]}] {g}: {m}" for g, m, met in r["goals"]]
    return "\n".join(L)


def policies(policy_names=None, n_predict: int = 64, n_threads=None, backend: str = "cpu",
             json_out: bool = False, activations: str | None = None, prompt_labels=None,
             pair_names=(REAL_TARGET, REAL_DRAFT), repeats: int = 1,
             teaching_pair=(DEFAULT_TARGET, DEFAULT_DRAFT)) -> int:
    """`specnb demo --policies`: one table, prompt x draft-length policy (plain, fixed 1/2/4/8,
    transformers' heuristic, auto), tok/s and speed-up, on the code prompts (greedy) and the poem
    (sampled), every run on the same pair and prompts; then the same for the teaching pair on its
    prompt (teaching_pair=None leaves it out; a --prompts selection without its label too)."""
    from ..measure.spec_bench import POLICIES, compare_policies, format_policies
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    smp = dict(samplings())
    prompts = [(lb, tx, ch, "greedy", smp["greedy"]) for lb, tx, ch in CODE_PROMPTS] + \
        [(*LOW_ACCEPTANCE_PROMPT, "sampled", smp["sampled"])]
    if prompt_labels:
        prompts = [p for p in prompts if p[0] in prompt_labels]
    pols = tuple(policy_names or POLICIES)
    results = []
    if prompts:
        results.append(compare_policies(*pair_names, prompts, pols, n_predict, n_threads,
                                        activations, backend, repeats, echo))
    label, text, chat = TEACHING_PROMPT
    if teaching_pair and (not prompt_labels or label in prompt_labels):
        results.append(compare_policies(*teaching_pair, [(label, text, chat, "greedy", smp["greedy"])],
                                        pols, n_predict, n_threads, activations, backend, repeats, echo))
    if json_out:
        print(json.dumps({"tables": results}))
    else:
        for r in results:
            echo(format_policies(r))
    return 0 if all(r["identical"] for r in results) else 1


def sweep(draft_max_values=SWEEP_DRAFT_MAX, n_predict: int = 64, n_threads=None,
          backend: str = "cpu", json_out: bool = False, activations: str | None = None,
          pair_names=(REAL_TARGET, REAL_DRAFT), code_prompts=CODE_PROMPTS,
          wait_s: float = 120.0) -> int:
    """`specnb demo --sweep`: plain and speculative tok/s for every code prompt, sampling and
    draft-max, side by side, and the median speedup per draft-max (llama.cpp's draft-simple
    otherwise at master's defaults). Plain decoding is rerun beside every speculative run, so each ratio compares two
    runs made seconds apart; on a shared machine each pair waits (up to wait_s) for the other
    processes to leave the CPU, and is run again when they came back during it."""
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    pair = _open(*pair_names, 1024, backend=backend, n_threads=n_threads, activations=activations)
    rows = []
    echo(f"plain vs speculative, {n_predict} tokens, target {pair_names[0]}, draft {pair_names[1]}")
    for label, text, chat in code_prompts:
        ids = prompt_ids(pair.target.vocab, text, chat)
        for sname, sp in samplings():
            for dm in draft_max_values:
                row = compare(pair, ids, sp, n_predict, dm, max_tries=4, wait_s=wait_s)
                rows.append({"prompt": label, "sampling": sname, "draft_max": dm,
                             **{k: v for k, v in row.items() if k != "text"}})
                echo(f"{label:<18} {sname:<8} draft-max {dm}: plain {row['plain_tok_s']:5.1f} "
                    f"tok/s, speculative {row['spec_tok_s']:5.1f} tok/s, {row['speedup']:.2f}x, "
                    f"acceptance {100 * row['accept_rate']:3.0f}%, mean accepted length "
                    f"{row['mean_acc_len']:.2f}{'' if row['identical'] else '  NOT IDENTICAL'}"
                    f"{_busy_note(row)}")
    def quiet_first(dm):        # the rows measured on a quiet machine, when there are any
        mine = [r for r in rows if r["draft_max"] == dm]
        calm = [r for r in mine if r["busy"] is None or r["busy"] <= QUIET]
        return calm or mine
    med = {dm: statistics.median(r["speedup"] for r in quiet_first(dm)) for dm in draft_max_values}
    best = max(med, key=med.get)
    echo("median speedup per draft-max: " + ", ".join(f"{dm}: {s:.2f}x" for dm, s in med.items())
        + f"  -> best {best}")
    if json_out:
        print(json.dumps({"rows": rows, "median_speedup": med, "best": best}))
    return 0 if all(r["identical"] for r in rows) else 1
