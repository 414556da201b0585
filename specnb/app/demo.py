"""`specnb demo`: speculative decoding winning, and losing, on this machine.

1. The real pair, qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b, on code prompts (writing
   a function, editing a given one), greedy and sampled: plain and speculative tok/s, the
   speedup, acceptance per position, mean accepted length, and that the output is identical to
   plain decoding (it always is: the target's own sampler decides every token).
2. A prompt where acceptance is low (a poem) and speculation loses, with the reason in one
   line: the draft's cost ratio c, the verification batch's price and the acceptance.
3. The SmolLM2 teaching pair, briefly: fast, but its stand-in draft costs as much as its target.

`specnb demo --sweep` measures plain and speculative speed for each draft-max on the code
prompts; DEMO_DRAFT_MAX below was picked with it.
"""
from __future__ import annotations

import json
import statistics

from ..model.registry import DEFAULT_DRAFT, DEFAULT_TARGET, REAL_DRAFT, REAL_TARGET

# `specnb demo --sweep` on the 2-core CPU this project is developed on (three code prompts,
# greedy and sampled, 64 tokens; README "Where speculation wins and loses" has the table): the
# median speedup was 1.10x at draft-max 1, 1.27x at 2, 1.06x at 3, 1.04x at 4, 1.07x at 6 and
# 1.04x at 8. A 3-row verification batch costs little more than one row; a 4-row one costs
# much more, which acceptance of 90-100% does not make up for on this CPU.
DEMO_DRAFT_MAX = 2
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


def compare(pair, ids, sp, n_predict: int, draft_max: int, repeats: int = 1,
            quiet: float | None = QUIET, max_tries: int = 4, wait_s: float = 0.0) -> dict:
    """Plain decoding, then speculative decoding from the same prompt, taking turns `repeats`
    times and keeping the faster run of each: speeds, acceptance, where a round's time goes,
    and whether the two outputs are the same tokens. With `quiet`, a run in which other
    processes took more than that share of the CPU does not count: the pair is run again (at
    most max_tries times, each after waiting up to wait_s seconds for the machine to be
    quiet), and row["busy"] says how much the kept runs lost to others."""
    from ..measure.contention import OtherLoad, wait_until_quiet
    from ..speculation.params import SpecParams
    from ..speculation.loop import SpeculativeLoop
    from ..run.generate import generate
    from ..run.sampling import Sampler

    def key(run):                       # quiet runs first, then the fastest
        busy = run[1] is not None and quiet is not None and run[1] > quiet
        return busy, run[0].t_gen_s
    plain = spec = None
    for attempt in range(max(max_tries if quiet is not None else 1, repeats)):
        if quiet is not None and wait_s > 0:
            wait_until_quiet(quiet, wait_s)
        with OtherLoad() as load:
            p = generate(pair.ctx_tgt, Sampler(sp, pair.target.n_vocab), ids, n_predict)
        if plain is None or key((p, load.share)) < key(plain):
            plain = (p, load.share)
        loop = SpeculativeLoop(pair.ctx_tgt, pair.ctx_dft, ids, n_predict, sp,
                               SpecParams(n_max=draft_max))
        events = []
        with OtherLoad() as load:
            r = loop.run(on_round=events.append)[0]
        if spec is None or key((r, load.share)) < key(spec):
            spec = (r, load.share, loop.chain.stats()[0], events)
        if attempt + 1 >= repeats and not key(plain)[0] and not key(spec)[0]:
            break
    busy = [x[1] for x in (plain, spec) if x[1] is not None]
    (plain, _), (spec, _, st, events) = plain, spec
    n = max(len(events), 1)
    spec_tok_s = len(spec.tokens) / spec.t_gen_s if spec.t_gen_s else 0.0
    return {"identical": plain.tokens == spec.tokens, "n_tokens": len(spec.tokens),
            "plain_tok_s": plain.tok_per_s, "spec_tok_s": spec_tok_s,
            "speedup": spec_tok_s / plain.tok_per_s if plain.tok_per_s else 0.0,
            "n_drafted": spec.n_drafted, "n_accept": spec.n_accept,
            "accept_rate": spec.accept_rate, "acc_rate_per_pos": st["acc_rate_per_pos"],
            "mean_acc_len": st["mean_acc_len"], "n_rounds": spec.n_rounds,
            "tokens_per_round": len(spec.tokens) / n,
            # where a round's time goes, in milliseconds
            "t_plain_token_ms": 1e3 * plain.t_gen_s / max(len(plain.tokens), 1),
            "t_verify_ms": 1e3 * sum(ev.t_verify for ev in events) / n,
            "t_draft_ms": 1e3 * sum(ev.t_draft + ev.t_process for ev in events) / n,
            "t_round_ms": 1e3 * sum(ev.t_round for ev in events) / n,
            "rows_per_round": sum(1 + len(ev.slot.draft) for ev in events) / n,
            "draft_len": loop.policy.stats(),
            "busy": max(busy) if busy else None, "text": spec.text}


def why_line(row: dict, c: float, draft_max: int) -> str:
    """One line: what a round commits, what it costs in target-token times, hence the speedup."""
    u = row["t_plain_token_ms"]
    verify, draft = row["t_verify_ms"] / u, row["t_draft_ms"] / u
    other = max(row["t_round_ms"] / u - verify - draft, 0.0)
    cost, got = verify + draft + other, row["tokens_per_round"]
    return (f"why: acceptance is {100 * row['accept_rate']:.0f}%, so a round commits {got:.2f} "
            f"tokens, but it costs {cost:.2f} target-token times: {verify:.2f} to verify "
            f"{row['rows_per_round']:.3g} rows, {draft:.2f} of draft work (c = {c:.2f} per draft token) and "
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


def demo(n_predict: int = 64, draft_max: int = DEMO_DRAFT_MAX, n_threads=None,
         backend: str = "cpu", json_out: bool = False, activations: str | None = None,
         real_pair=(REAL_TARGET, REAL_DRAFT), teaching_pair=(DEFAULT_TARGET, DEFAULT_DRAFT),
         code_prompts=CODE_PROMPTS, low_prompt=LOW_ACCEPTANCE_PROMPT, repeats: int = 2,
         quiet: float | None = QUIET, llama_bench: str | None = None) -> int:
    """Run the three parts; returns 0 when every speculative output equals plain decoding.
    With a llama.cpp build (`llama_bench`, the path of its llama-bench, or $SPECNB_LLAMA_BENCH),
    part 1 also prints llama.cpp's plain decoding speed of the same target, measured right after
    specnb's, beside specnb's plain and speculative figures.
    Each comparison runs plain and speculative decoding `repeats` times, taking turns, and
    keeps the faster run of each (a shared machine's noise slows single runs); runs during
    which other processes took the CPU are marked (see compare)."""
    from ..measure.bench_llamacpp import find_llama_bench
    from ..model.registry import REGISTRY, check_parts
    exe = find_llama_bench(llama_bench)          # a bad path fails now, not after the first part
    echo = (lambda *a: None) if json_out else (lambda *a: print(*a, flush=True))
    kw = dict(backend=backend, n_threads=n_threads, activations=activations)
    # a busy machine gets one more try per comparison and a few seconds to calm down
    timing = dict(repeats=repeats, quiet=quiet, max_tries=repeats + 1, wait_s=5.0)
    echo("specnb demo: speculative decoding as llama.cpp's speculative-simple does it.")
    echo(f"  1. the real pair ({real_pair[1]} drafting for {real_pair[0]}) on code prompts, greedy "
        f"and sampled, draft-max {draft_max}: plain vs speculative speed, acceptance, identical output")
    echo("  2. a prose prompt where acceptance is low and speculation loses, why, and "
        "--spec-draft-n-max auto, which measures that and stops drafting")
    echo("  3. the SmolLM2 teaching pair, briefly (fixed and auto)")
    echo("About 4 minutes on a 2-core CPU; the first run also assembles the real pair (1.6 GB, "
        "under a minute) and compiles the kernels (a few minutes).")
    runs, lc = [], None             # lc: llama.cpp's plain figure, when it was measured
    if all(n not in REGISTRY or check_parts(REGISTRY[n]).ok for n in real_pair):
        pair = _open(*real_pair, 1024, **kw)
        runs += _winning(echo, pair, code_prompts, n_predict, draft_max, timing)
        if exe:
            lc = _beside_llama_cpp(echo, exe, pair, runs, n_predict)
        runs += _losing(echo, pair, low_prompt, n_predict, draft_max, timing, kw)
        del pair
    else:
        echo(f"\nthe real pair is not installed: run  specnb models install {' '.join(real_pair)}"
            f"  (./run installs it); showing the teaching pair only")
    runs += _teaching(echo, _open(*teaching_pair, 512, **kw), draft_max, timing)
    same = all(r["identical"] for r in runs)
    if json_out:
        print(json.dumps({"draft_max": draft_max, "n_predict": n_predict, "identical": same,
                          "runs": runs} | ({"llama_cpp": lc} if lc is not None else {})))
    else:
        echo(f"\nall speculative outputs identical to plain decoding: {'yes' if same else 'NO'}")
    return 0 if same else 1


def _winning(echo, pair, code_prompts, n_predict, draft_max, timing) -> list:
    from ..model.registry import describe
    echo(f"\n== 1. {describe(pair.draft)} drafting for {describe(pair.target)} ==")
    runs = []
    for label, text, chat in code_prompts:
        ids = prompt_ids(pair.target.vocab, text, chat)
        for i, (sname, sp) in enumerate(samplings()):
            row = compare(pair, ids, sp, n_predict, draft_max, **timing)
            runs.append({"part": 1, "prompt": label, "sampling": sname, **row})
            echo(_result_line(label, sname, row))
            if i == 0:
                _show_text(echo, row["text"])
    echo(f"  median speedup on code: {statistics.median(r['speedup'] for r in runs):.2f}x")
    return runs


def _beside_llama_cpp(echo, exe, pair, runs, n_predict) -> dict:
    # llama-bench's tg (plain decoding, no prompt) on the same target file and thread count, run
    # after specnb's comparisons so the two never share the CPU
    from ..measure.bench_llamacpp import run_llama_bench
    n_threads = pair.ctx_tgt.n_threads
    r = run_llama_bench(exe, pair.target.path, n_threads, (), n_gen=n_predict, reps=3)
    plain = statistics.median(x["plain_tok_s"] for x in runs)
    spec = statistics.median(x["spec_tok_s"] for x in runs)
    echo(f"  llama.cpp's plain decoding of this target: {r['tg']:.1f} tok/s (llama-bench -n "
        f"{n_predict} -t {n_threads}, build {r['build']}); specnb's medians: plain {plain:.1f} "
        f"tok/s = {plain / r['tg']:.2f}x llama.cpp, speculative {spec:.1f} tok/s = "
        f"{spec / r['tg']:.2f}x llama.cpp")
    return {"tg_tok_s": r["tg"], "build": r["build"], "cmd": " ".join(r["cmd"]),
            "plain_vs_llama_cpp": plain / r["tg"], "spec_vs_llama_cpp": spec / r["tg"]}


def _losing(echo, pair, low_prompt, n_predict, draft_max, timing, kw) -> list:
    from ..measure.experiments import measure_cost_ratio
    label, text, chat = low_prompt
    ids = prompt_ids(pair.target.vocab, text, chat)
    echo(f"\n== 2. where it loses: {label}, sampled ==")
    row = compare(pair, ids, samplings()[1][1], n_predict, draft_max, **timing)
    c = measure_cost_ratio(pair.target, pair.draft, n_tokens=16, prompt=ids[:16],
                           n_threads=kw["n_threads"], activations=kw["activations"])["c"]
    echo(_result_line(label, "sampled", row))
    _show_text(echo, row["text"], 4)
    echo("  " + why_line(row, c, draft_max))
    out = [{"part": 2, "prompt": label, "sampling": "sampled", "c": c, **row}]
    if str(draft_max).startswith("auto"):
        return out
    # the same prompt with each round's length chosen from the measured costs: it stops drafting
    # where drafting does not pay (specnb/speculation/draft_len.py)
    auto = compare(pair, ids, samplings()[1][1], n_predict, "auto", **timing)
    echo("  with --spec-draft-n-max auto (each round's length chosen from this run's measured costs "
        "and acceptance):")
    echo(_result_line(label, "sampled", auto))
    return out + [{"part": 2, "prompt": label, "sampling": "sampled", "draft_max": "auto", **auto}]


def _teaching(echo, pair, draft_max, timing) -> list:
    from ..model.registry import describe
    echo(f"\n== 3. the teaching pair: {describe(pair.draft)} drafting for {describe(pair.target)} ==")
    echo("  its draft is the target requantized to Q4_0: as costly as the target, so it shows the "
        "mechanism (notebooks, live view) but never a speedup")
    label, text, chat = TEACHING_PROMPT
    row = compare(pair, prompt_ids(pair.target.vocab, text, chat), samplings()[0][1], 32,
                  draft_max, **timing)
    echo(_result_line(label, "greedy", row))
    out = [{"part": 3, "prompt": label, "sampling": "greedy", **row}]
    if not str(draft_max).startswith("auto"):
        auto = compare(pair, prompt_ids(pair.target.vocab, text, chat), samplings()[0][1], 32,
                       "auto", **timing)
        echo("  with --spec-draft-n-max auto it learns that the draft costs as much as the target:")
        echo(_result_line(label, "greedy", auto))
        out.append({"part": 3, "prompt": label, "sampling": "greedy", "draft_max": "auto", **auto})
    return out


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
    draft-max, side by side, and the median speedup per draft-max (how DEMO_DRAFT_MAX was
    picked). Plain decoding is rerun beside every speculative run, so each ratio compares two
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
