"""`specnb demo`: speculative decoding on this machine, llama.cpp's and specnb's additions, measured.

1. The first result: the recommended configuration of the real pair (qwen2.5-coder-0.5b drafting
   for qwen2.5-coder-1.5b, line RECOMMENDED of the waterfall) against plain decoding on one code
   prompt, a few passes taken in turn: its speed-up with an interval, and the output identical.
2. This machine's costs, from the record every notebook and `bench` read (measure/costs.py):
   c and bc(k) with their spread, and when they were measured (measured now if none is recorded).
3. The waterfall (measure/waterfall.py): plain decoding, llama.cpp's draft-simple at master's
   defaults, then specnb's additions [specnb, beyond llama.cpp], each line adding one to the line
   before, on code prompts and a prose prompt. The recommended line is the fastest whose output
   was plain decoding's everywhere and which holds on prose; with its command line and this CPU's
   ceiling. `--full` runs it on every code prompt, greedy and sampled.
4. The SmolLM2 teaching pair, briefly: its stand-in draft costs about as much as its target.

This module prints the story; the measuring is measure/turns.py, waterfall.py and costs.py.
`specnb demo --sweep` measures each fixed draft-max, `specnb demo --policies` each draft-length policy.
"""
from __future__ import annotations

import json
import statistics
import time

from .flags import BEYOND, spec_flags
from .waterfall_report import ceiling_lines, command, format_waterfall, headline_json, headline_lines, waterfall_json
from ..measure.turns import chat_ids
from ..measure.verdict import said
from ..measure.waterfall import WATERFALL
from ..model.registry import DEFAULT_DRAFT, DEFAULT_TARGET, REAL_DRAFT, REAL_TARGET

SWEEP_DRAFT_MAX = (1, 2, 3, 4, 6, 8)
RECOMMENDED = 5                 # the waterfall line the first result runs (each round's length from costs)
FIRST_PASSES = 3                # the first result's passes (pairs of runs)

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
# a second prose prompt (demo --policies): a draft length must hold on prose it was not tuned on
STORY_PROMPT = ("a story", "Tell a short story about a lighthouse keeper who finds a message in a bottle.", True)
POLICY_LINE = 4                 # demo --policies runs every policy with this waterfall line's flags
TEACHING_PROMPT = ("a sentence", "The capital of France is", False)


def samplings():
    from ..run.sampling import SamplerParams
    return [("greedy", SamplerParams(temp=0.0, seed=1)),
            ("sampled", SamplerParams(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7))]


def _show_text(echo, text: str, max_lines: int = 4) -> None:
    lines = text.strip("\n").splitlines() or [""]
    for ln in lines[:max_lines]:
        echo(f"      | {ln}")
    if len(lines) > max_lines:
        echo(f"      | ... ({len(lines) - max_lines} more lines)")


def result_line(label: str, c) -> str:
    """One comparison (measure.turns.Comparison) as a line: speeds, the verdict with its interval,
    acceptance, identical or not."""
    a = "-" if c.alpha is None else f"{c.alpha:.2f}"
    return (f"  {label}: plain {c.plain_tok_s:.1f} tok/s, speculative {c.spec_tok_s:.1f} tok/s: {c.said()} | "
            f"α = {a}, tokens per round {c.loop_median('tokens_per_round'):.2f} | identical to plain "
            f"decoding: {'yes' if c.identical else 'NO'}" + _busy_note(c.busy))


def _busy_note(b) -> str:
    return "" if b is None or b <= 0.10 else f" (busy machine: others took {100 * b:.0f}% of the CPU)"


def why_line(c) -> str:
    """One line from a comparison's last pass: what a round commits, what it costs in plain steps."""
    x = c.loop_costs[-1]
    u = x.t_plain_token_ms
    verify, draft = x.t_verify_ms / u, x.t_draft_ms / u
    other = max(x.t_round_ms / u - verify - draft, 0.0)
    cost, got = verify + draft + other, x.tokens_per_round
    cl = "-" if x.c_loop is None else f"{x.c_loop:.2f}"
    return (f"why: a round commits {got:.2f} tokens and costs {cost:.2f} plain steps: {verify:.2f} to verify "
            f"{x.rows_per_round:.3g} rows, {draft:.2f} of draft work (c_loop = {cl} per drafted token) and "
            f"{other:.2f} of sampling and bookkeeping; {got:.2f} / {cost:.2f} = {got / cost:.2f}x")


def _open(target, draft, n_ctx, **kw):
    from ..run.pair import open_pair, warm_up
    p = open_pair(target, draft, n_ctx=n_ctx, **kw)
    warm_up(p.ctx_tgt, p.ctx_dft)
    return p


def _first_result(echo, pairs, st, prompt, n_predict: int, t0: float, lines):
    from ..measure.turns import compare
    from ..measure.waterfall import auto_records
    from ..model.registry import describe
    label, text, chat = prompt
    pair = pairs[st.draft]
    greedy = samplings()[0][1]
    echo(f"\n== 1. the first result: {describe(pair.draft)} drafting for {describe(pair.target)}, line "
         f"{st.index} ({st.label}) against plain decoding, {label}, greedy, {n_predict} tokens, "
         f"{FIRST_PASSES} passes ==")
    # `auto` starts from this pair's costs record (measured here once, about 20 s, where none is)
    auto_records(pairs, lines, on_measure=lambda text: echo(f"  {text}"))
    c = compare(pair, chat_ids(pair.target.vocab, text, chat), greedy, n_predict, st.params, FIRST_PASSES,
                label, "greedy")
    echo(result_line(label, c))
    _show_text(echo, c.spec[-1].text)
    echo(f"  (after {time.perf_counter() - t0:.0f} s)")
    return c


def _costs(echo, pair, pairs, st) -> list:
    from ..measure.costs import format_costs, machine_costs
    echo("\n== 2. this machine's costs: the record the notebooks and bench read (specnb costs) ==")
    say = lambda text: echo(f"  {text}")                      # noqa: E731
    out = [machine_costs(pair, on_measure=say),
           machine_costs(pairs[st.draft], st.params.draft_vocab or None, on_measure=say)]
    echo("\n".join("  " + ln for ln in format_costs(out[0]).splitlines()))
    h = out[1]
    echo(f"  line {st.index}'s draft ({h.draft}, head of {h.draft_vocab or 'every'} tokens): c = {h.c.estimate:.2f} "
         f"({h.c.low:.2f}-{h.c.high:.2f}), the bytes predict {h.c_bytes:.2f} (record {h.id})")
    return out


def _waterfall(echo, pair, pairs, prompts, samps, prose, n_predict, passes, lines, costs):
    from ..measure.waterfall import waterfall
    from ..model.registry import describe
    echo(f"\n== 3. the waterfall: {describe(pair.draft)} drafting for {describe(pair.target)}, from llama.cpp's "
         f"draft-simple to specnb's additions {BEYOND} ==")
    return waterfall(pair, prompts, samps, n_predict, passes, lines, prose=prose, say=echo, pairs=pairs,
                     costs=costs)


def _beside_llama_cpp(echo, exe, pair, w, n_predict) -> dict:
    # llama-bench's tg (plain decoding, no prompt) on the same target file and thread count, run
    # after specnb's runs so the two never share the CPU
    from ..measure.bench_llamacpp import run_llama_bench
    n_threads = pair.ctx_tgt.n_threads
    r = run_llama_bench(exe, pair.target.path, n_threads, (), n_gen=n_predict, reps=3)
    plain = w.rows[0].tok_s
    echo(f"  llama.cpp's plain decoding of this target: {r['tg']:.1f} tok/s (llama-bench -n {n_predict} "
         f"-t {n_threads}, build {r['build']}); specnb's plain decoding: {plain:.1f} tok/s = "
         f"{plain / r['tg']:.2f}x llama.cpp's")
    return {"tg_tok_s": r["tg"], "build": r["build"], "cmd": " ".join(r["cmd"]), "plain_vs_llama_cpp": plain / r["tg"]}


def _teaching(echo, pair) -> list:
    from ..measure.turns import compare
    from ..model.registry import describe
    from ..speculation.params import SpecParams
    echo(f"\n== 4. the teaching pair: {describe(pair.draft)} drafting for {describe(pair.target)} ==")
    label, text, chat = TEACHING_PROMPT
    ids = chat_ids(pair.target.vocab, text, chat)
    greedy = samplings()[0][1]
    out = []
    for name, params in (("llama.cpp's defaults", SpecParams()), (f"auto {BEYOND}", SpecParams(n_max="auto"))):
        c = compare(pair, ids, greedy, 32, params, FIRST_PASSES, label, "greedy")
        echo(result_line(f"{label}, {name}", c))
        out.append((name, c))
    cl = out[0][1].loop_median("c_loop")
    echo(f"  its draft is the target requantized to Q4_0, so a draft token costs about what a target token does "
         f"(c_loop = {'-' if cl is None else f'{cl:.2f}'} here): the pair shows the mechanism (notebooks, live "
         f"view), not speed")
    return out


def demo(n_predict: int = 64, n_threads=None, backend: str = "cpu", json_out: bool = False,
         activations: str | None = None, real_pair=(REAL_TARGET, REAL_DRAFT),
         teaching_pair=(DEFAULT_TARGET, DEFAULT_DRAFT), code_prompts=CODE_PROMPTS,
         low_prompt=LOW_ACCEPTANCE_PROMPT, passes: int = 2, full: bool = False,
         llama_bench: str | None = None, lines=WATERFALL) -> int:
    """Run the four parts; returns 0 when every speculative output equals plain decoding. The
    default waterfall runs the first two code prompts greedy and the prose prompt sampled; `full`
    every code prompt greedy and sampled. With a llama.cpp build (`llama_bench`, the path of its
    llama-bench, or $SPECNB_LLAMA_BENCH) part 3 also measures llama.cpp's plain decoding of the
    same target and sets the recommended line beside it."""
    from ..measure.bench_llamacpp import find_llama_bench
    from ..measure.waterfall import stage_pairs, stages
    from ..model.registry import REGISTRY, check_parts, registry_name
    t0 = time.perf_counter()
    exe = find_llama_bench(llama_bench)          # a bad path fails now, not after the first part
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    kw = dict(backend=backend, n_threads=n_threads, activations=activations)
    smp = samplings()
    echo("specnb demo: speculative decoding as llama.cpp's speculative-simple does it, and specnb's additions, "
         "measured on this machine: 1. the first result, the recommended command against plain decoding; 2. this "
         "machine's costs; 3. the waterfall from llama.cpp's draft-simple to specnb's additions, on code and on "
         "prose; 4. the SmolLM2 teaching pair. Every speed-up is the median of runs taken in turn with plain "
         "decoding, with its interval; a verdict is said only when the whole interval is on one side of 1.")
    out: dict = {"n_predict": n_predict}
    same = True
    if all(n not in REGISTRY or check_parts(REGISTRY[n]).ok for n in real_pair):
        pair = _open(*real_pair, 1024, **kw)
        pairs = stage_pairs(pair, lines)
        rec = stages(lines)[min(RECOMMENDED, len(lines)) - 1]
        target = registry_name(pair.target)
        first = _first_result(echo, pairs, rec, code_prompts[0], n_predict, t0, lines)
        out["first"] = {**first.as_json(), "stage": rec.index, "draft": registry_name(pairs[rec.draft].draft),
                        "elapsed_s": time.perf_counter() - t0}
        out["first"]["command"] = command(target, out["first"]["draft"], spec_flags(rec.params))
        costs = _costs(echo, pair, pairs, rec)
        out["costs"] = [c.as_json() for c in costs]
        prompts = code_prompts if full else code_prompts[:2]
        samps = smp if full else smp[:1]
        prose = (*low_prompt, *smp[1]) if low_prompt else None
        w = _waterfall(echo, pair, pairs, prompts, samps, prose, n_predict, passes, lines, costs[0])
        lc = _beside_llama_cpp(echo, exe, pair, w, n_predict) if exe else None
        for ln in format_waterfall(w) + headline_lines(w, target, lc) + ceiling_lines(w.ceiling):
            echo(ln)
        if w.rows[1].prose is not None:
            echo(f"  on {w.prose}, llama.cpp's line 1 " + why_line(w.rows[1].prose))
        out["waterfall"] = waterfall_json(w, target, lc)
        out["headline"] = headline_json(w, target, lc)
        if lc is not None:
            out["llama_cpp"] = lc
        same = first.identical and w.identical
        del pair, pairs
    else:
        echo(f"\nthe real pair is not installed: run  specnb models install {' '.join(real_pair)}"
             f"  (./run installs it); showing the teaching pair only")
    teach = _teaching(echo, _open(*teaching_pair, 512, **kw))
    out["teaching"] = [{"config": n, **c.as_json()} for n, c in teach]
    same = same and all(c.identical for _, c in teach)
    out["elapsed_s"] = time.perf_counter() - t0
    if json_out:
        print(json.dumps({**out, "identical": same}))
    else:
        echo(f"\nall speculative outputs identical to plain decoding: {'yes' if same else 'NO'} "
             f"({out['elapsed_s']:.0f} s in all)")
    return 0 if same else 1


# ---- demo --policies and demo --sweep ------------------------------------------------------------
def policies(policy_names=None, n_predict: int = 64, n_threads=None, backend: str = "cpu",
             json_out: bool = False, activations: str | None = None, prompt_labels=None,
             pair_names=(REAL_TARGET, REAL_DRAFT), repeats: int = 3,
             teaching_pair=(DEFAULT_TARGET, DEFAULT_DRAFT)) -> int:
    """`specnb demo --policies`: one table, prompt x draft-length policy (plain, fixed 1/2/4/8,
    transformers' heuristic, auto), tok/s and speed-up with its interval, on the code prompts
    (greedy) and two prose prompts (sampled), every run with the flags of waterfall line
    POLICY_LINE (the draft requantized to Q4_0 and its restricted vocabulary, keeping its rows);
    then the same for the teaching pair on its prompt, with llama.cpp's defaults
    (teaching_pair=None leaves it out; a --prompts selection without its label too)."""
    from ..measure.spec_bench import POLICIES, compare_policies, format_policies
    from ..measure.waterfall import stages
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    smp = dict(samplings())
    prompts = [(lb, tx, ch, "greedy", smp["greedy"]) for lb, tx, ch in CODE_PROMPTS] + \
        [(*p, "sampled", smp["sampled"]) for p in (LOW_ACCEPTANCE_PROMPT, STORY_PROMPT)]
    if prompt_labels:
        prompts = [p for p in prompts if p[0] in prompt_labels]
    pols = tuple(policy_names or POLICIES)
    results = []
    if prompts:
        results.append(compare_policies(*pair_names, prompts, pols, n_predict, n_threads, activations, backend,
                                        repeats, echo, line=stages()[POLICY_LINE - 1].fields))
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


def sweep(draft_max_values=SWEEP_DRAFT_MAX, n_predict: int = 64, n_threads=None, backend: str = "cpu",
          json_out: bool = False, activations: str | None = None, pair_names=(REAL_TARGET, REAL_DRAFT),
          code_prompts=CODE_PROMPTS, passes: int = 3) -> int:
    """`specnb demo --sweep`: plain against speculative decoding (llama.cpp's draft-simple at master's
    defaults otherwise) for every code prompt, sampling and draft-max, `passes` pairs taken in turn,
    and the median speed-up per draft-max over every prompt and sampling, with its interval."""
    from ..measure.turns import compare
    from ..measure.verdict import interval
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    pair = _open(*pair_names, 1024, backend=backend, n_threads=n_threads, activations=activations)
    rows, ratios = [], {dm: [] for dm in draft_max_values}
    echo(f"plain vs speculative, {n_predict} tokens, target {pair_names[0]}, draft {pair_names[1]}, "
         f"{passes} pairs each")
    for label, text, chat in code_prompts:
        ids = chat_ids(pair.target.vocab, text, chat)
        for sname, sp in samplings():
            for dm in draft_max_values:
                c = compare(pair, ids, sp, n_predict, dm, passes, label, sname)
                ratios[dm] += c.ratios
                rows.append({"draft_max": dm, **c.as_json()})
                echo(f"{label:<18} {sname:<8} draft-max {dm}: {result_line('', c).strip()}")
    med = {dm: interval(r) for dm, r in ratios.items()}
    best = max(med, key=lambda dm: med[dm].estimate)
    echo("median speed-up per draft-max: " + ", ".join(f"{dm}: {said(iv)}" for dm, iv in med.items())
         + f"  -> best {best}")
    if json_out:
        print(json.dumps({"rows": rows, "median_speedup": {dm: iv.as_json() for dm, iv in med.items()},
                          "best": best, "median": {dm: statistics.median(r) for dm, r in ratios.items()}}))
    return 0 if all(r["identical"] for r in rows) else 1
