"""`python -m specnb ...` / `specnb ...`: generate, tokenize, perplexity, bench, gate,
speculative-simple, demo, models, forge.

Every -m / -md takes a registry name (`specnb models`) or a GGUF path. Every command prints a
one-line error and exits 2 on bad input (no traceback); `gate` exits 1 when the pair is
incompatible, `models path` when the model is not installed, and `speculative-simple`, as master's
does, when no speculator is asked for ("failed to initialize speculative decoding") or the draft
model cannot read the prompt ("failed to process speculative prompt").

Every flag the commands share is written once, in flag_table.py: this module builds the parsers
(flags.add_flags) and the SamplerParams / SpecParams (flags.build) from it; a command adds only its
own options. `models` and `forge` are in model_commands.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import ParamError, SpecnbError

EXIT_BAD_INPUT = 2
POLICY_REPEATS = 5             # demo --policies: runs per cell (the median is kept)


def sampler_params(a):
    """The SamplerParams of the sampling flags (flags.py's table names each field); with -e, the
    DRY sequence breakers' escapes processed too, as master does (common/arg.cpp:930-932)."""
    from .flags import build
    from ..run.sampling import SamplerParams
    from ..vocab.textio import as_text, escaped_prompt
    params = build(a, "sampler", SamplerParams)
    if getattr(a, "escape", False):
        params = params.replace(dry_sequence_breakers=tuple(
            as_text(escaped_prompt(b)) for b in params.dry_sequence_breakers))
    return params


def _ignore_eos(a, params, vocab):
    """--ignore-eos: every end-of-generation token gets a -inf bias after -l's, as master's
    common_init_result adds logit_bias_eog (common/common.cpp:1340-1357); a vocab without an EOS
    token: warned about and left alone (:1340-1343)."""
    if not getattr(a, "ignore_eos", False):
        return params
    if vocab.eos_id < 0:
        print("vocab does not have an EOS token, ignoring --ignore-eos", file=sys.stderr)
        return params
    eog = tuple((t, float("-inf")) for t in sorted(vocab.eog_ids))
    return params.replace(logit_bias=params.logit_bias + eog)


def _n_ctx(a, model) -> int:
    """-c: 0 is the model's training context (n_ctx_train), as in master."""
    if a.ctx_size < 0:
        raise ParamError(f"-c/--ctx-size: invalid context size {a.ctx_size}: expected 0 (the model's "
                         f"training context, {model.hparams.n_ctx_train}) or a number of tokens")
    return model.hparams.n_ctx_train if a.ctx_size == 0 else a.ctx_size


def _n_predict(a, n_ctx: int) -> int:
    """-n: -1 generates until the end of generation or a full context (at most n_ctx tokens)."""
    from ..errors import ParamError
    if a.n_predict == -1:
        return n_ctx
    if a.n_predict < 1:
        raise ParamError(f"-n/--predict/--n-predict: invalid n_predict={a.n_predict}: expected -1 (until "
                         f"the end of generation or a full context) or a number >= 1")
    return a.n_predict


def _load(model, vocab_only: bool = False):
    """The model named by -m: a registry name or a path; the default target when not given."""
    from ..model import load_model
    from ..model.registry import DEFAULT_TARGET
    return load_model(model or DEFAULT_TARGET, vocab_only=vocab_only)


def _read_prompt(a, vocab, default=None, keep_final_newline=False):
    """The prompt as llama.cpp takes it: -f FILE's bytes (specnb/vocab/textio.py), or -p's text (the
    bytes given when they are not UTF-8), its escapes processed unless --no-escape (common/arg.cpp:
    923-924; llama-tokenize's -f too, tokenize.cpp:131-133). llama-tokenize reads -f as it is;
    llama-cli and llama-speculative-simple drop one final newline (keep_final_newline=False)."""
    from ..errors import ParamError
    from ..vocab.textio import as_text, escaped_prompt, prompt_text, read_text_file
    if a.prompt is not None and a.file is not None:
        raise ParamError("give either -p PROMPT or -f FILE, not both")
    if a.file is not None:
        text = read_text_file(a.file, keep_final_newline=keep_final_newline)
    elif a.prompt is not None:
        text = prompt_text(a.prompt)
    elif default is not None:
        text = default
    else:
        raise ParamError("no prompt: give -p PROMPT or -f FILE")
    if a.escape:
        text = escaped_prompt(text)
    if getattr(a, "chat", False):
        rendered = vocab.user_message(as_text(text))
        text = prompt_text(rendered, source=f"{getattr(text, 'source', '') or '-p'} (chat)")
    return text


# ---- commands -------------------------------------------------------------------------------
def cmd_generate(a):
    from ..run.context import Context
    from ..run.generate import generate
    from ..run.sampling import Sampler
    from ..vocab.textio import as_text
    model = _load(a.model)
    text = _read_prompt(a, model.vocab)
    ids = model.vocab.tokenize(text)
    params = _ignore_eos(a, sampler_params(a), model.vocab)
    n_ctx = _n_ctx(a, model)
    n_predict = _n_predict(a, n_ctx)
    ctx = Context(model, n_ctx=n_ctx, backend=a.backend, n_threads=a.threads, activations=a.activations)
    smpl = Sampler(params, model.n_vocab)
    stream = None
    if not a.json:
        sys.stdout.write(as_text(text, "replace"))
        stream = lambda t: (sys.stdout.write(model.vocab.token_to_piece(t, special=False)
                                             .decode("utf-8", "replace")), sys.stdout.flush())
    r = generate(ctx, smpl, ids, n_predict, on_token=stream)
    if a.json:
        print(json.dumps({"tokens": r.tokens, "text": r.text, "n_prompt": r.n_prompt,
                          "t_prompt_s": r.t_prompt_s, "t_gen_s": r.t_gen_s,
                          "prompt_tok_s": r.n_prompt / r.t_prompt_s if r.t_prompt_s else 0.0,
                          "gen_tok_s": r.tok_per_s, "stop_reason": r.stop_reason,
                          "seed": smpl.seed_used, "backend": ctx.backend_name}))
    else:
        print()
        if r.message:
            print(r.message, file=sys.stderr)
        print(f"\nprompt: {r.n_prompt} tokens in {r.t_prompt_s:.3f} s "
              f"({r.n_prompt / max(r.t_prompt_s, 1e-9):.1f} tok/s); generation: {len(r.tokens)} "
              f"tokens in {r.t_gen_s:.3f} s ({r.tok_per_s:.1f} tok/s)", file=sys.stderr)
    return 0


def cmd_tokenize(a):
    model = _load(a.model, vocab_only=True)
    v = model.vocab
    text = _read_prompt(a, v, keep_final_newline=True)
    ids = v.tokenize(text, add_special=not a.no_bos, parse_special=not a.no_parse_special)
    if a.json:
        print(json.dumps({"ids": ids}))
    elif a.ids:
        print("[" + ", ".join(str(i) for i in ids) + "]")
    else:
        for i in ids:
            print(f"{i:6d} -> '{v.token_to_piece(i).decode('utf-8', 'replace')}'")
    return 0


def cmd_gate(a):
    from ..model import load_model
    from ..vocab.gate import are_compatible
    tgt = load_model(a.target, vocab_only=True)
    dft = load_model(a.draft, vocab_only=True)
    rep = are_compatible(tgt, dft)
    if a.json:
        print(json.dumps(rep.as_dict()))
    else:
        print(f"target: {a.target}\ndraft:  {a.draft}")
        print(rep)
    return 0 if rep.ok else 1


def cmd_perplexity(a):
    from ..errors import ParamError
    from ..run.perplexity import perplexity
    from ..vocab.textio import escaped_prompt, read_text_file, strip_final_newline
    if a.file is None:
        raise ParamError("perplexity needs -f FILE")
    text = read_text_file(a.file, "text file")     # perplexity() drops one final newline
    if a.escape:                                    # -e (llama-perplexity's default is off)
        text = escaped_prompt(strip_final_newline(text))
    model = _load(a.model)
    def show(k, n, ppl):
        if not a.json:
            print(f"[{k}]{ppl:.4f},", end="" if k < n else "\n", flush=True)
    r = perplexity(model, text, n_ctx=_n_ctx(a, model), backend=a.backend, n_threads=a.threads,
                   on_chunk=show, max_chunks=None if a.chunks == -1 else a.chunks,
                   activations=a.activations)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"Final estimate: PPL = {r['ppl']:.4f} +/- {r['ppl_stderr']:.5f}  "
              f"({r['n_chunks']} chunks of {r['n_ctx']}, {r['tokens_per_s']:.1f} tok/s)")
    return 0


def cmd_bench(a):
    from ..measure.bench import bench
    from ..measure.bench_report import format_bench, format_goals
    modes = None if a.activations == "both" else (a.activations,)
    if a.profile:
        return _bench_profile(a, modes or ("q8", "f32"))
    r = bench(a.model, backend=a.backend, n_threads=a.threads, reps=a.reps, n_gen=a.n_gen,
              check=a.check, quick=a.quick, peak_gbs=a.peak_gbs, activations=modes,
              memory=not a.no_memory, compile_time=a.compile_time, draft_path=a.model_draft,
              llama_bench=a.llama_bench, bandwidth_gib=a.bandwidth_gib)
    one_mode = None if a.activations == "both" else a.activations
    if a.spec and a.model_draft is None:
        from ..measure.spec_bench import format_spec_bench, spec_bench
        r["speculative"] = spec_bench(n_threads=a.threads, backend=a.backend, sweep=not a.quick,
                                      activations=one_mode)
    elif a.spec:
        # the demo's waterfall of the pair (measure/waterfall.pair_waterfall) on every code prompt,
        # greedy and sampled, and the poem, after the decode figures so that the two never share the CPU
        from .demo import CODE_PROMPTS, LOW_ACCEPTANCE_PROMPT, samplings
        from .waterfall_report import format_pair_waterfall, waterfall_goals, waterfall_json
        from ..kernels.simd import SIMD_LEVEL
        from ..measure.waterfall import pair_waterfall
        from ..model.registry import registry_name
        say = None if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
        smp = samplings()
        w, costs = pair_waterfall(a.model, a.model_draft, n_threads=a.threads, backend=a.backend,
                                  activations=one_mode, passes=1 if a.quick else 2, prompts=CODE_PROMPTS,
                                  samplings=smp, prose=(*LOW_ACCEPTANCE_PROMPT, *smp[1]), say=say)
        names = registry_name(r["path"]), registry_name(r["draft"]["path"])
        lc = r.get("llama_cpp") if (r.get("llama_cpp") or {}).get("tg_tok_s") else None
        r["waterfall"] = {**waterfall_json(w, names[0], lc), "costs_record": costs.as_json(),
                          "goals": waterfall_goals(w, SIMD_LEVEL)}
    if a.json:
        print(json.dumps(r))
    else:
        print(format_bench(r))
        if "speculative" in r:
            print("\n" + format_spec_bench(r["speculative"]))
        if "waterfall" in r:
            print("\n" + format_pair_waterfall(w, *names, SIMD_LEVEL, lc, goals=False))   # (in bench's goals below)
        if r["backend"] == "cpu":
            print("\n" + format_goals(r))
    return 0


def _bench_profile(a, modes):
    # `bench --profile`: each kernel of a 1-row step and of a 5-row verification batch, alone and
    # inside the fused step, per mode
    from ..run.context import set_threads
    from ..model import load_model
    from ..measure.profile import decode_profile, format_profile
    from ..model.registry import default_target_path, resolve
    out = {}
    for role, name in (("target", a.model), ("draft", a.model_draft)):
        if role == "draft" and name is None:
            continue
        model = load_model(resolve(name) if name else default_target_path())
        for mode in modes:
            for n_rows in (1, 5):
                p = decode_profile(model, mode, n_rows=n_rows, n_threads=set_threads(a.threads))
                out[f"{role} {mode} {n_rows}"] = p
                if not a.json:
                    print(f"\n{role}: {os.path.basename(model.path)}\n" + format_profile(p))
    if a.json:
        print(json.dumps(out))
    return 0


def _spec_setup(a, params):
    """The pair for speculative-simple's flags and SpecParams (-md without --spec-type: draft-simple)."""
    import warnings
    from ..run.pair import open_pair
    need_draft = params.needs_draft_model()
    if a.model_draft is not None and not need_draft:
        warnings.warn(f"--spec-type {params.types} has no draft-simple: the draft model "
                      f"{a.model_draft} is not used", stacklevel=2)
    target = a.model if a.ctx_size != 0 else _load(a.model)    # -c 0: the target's n_ctx_train
    n_ctx = a.ctx_size or target.hparams.n_ctx_train
    pair = open_pair(target, a.model_draft if need_draft else False, n_ctx=n_ctx,
                     n_seq=max(1, a.parallel), backend=a.backend,
                     n_threads=a.threads, activations=a.activations,
                     tgt_seq_rm=not a.no_seq_rm, dft_seq_rm=not a.no_seq_rm_draft)
    return pair.target, pair.draft, pair.ctx_tgt, pair.ctx_dft


# master's messages: no speculator (--spec-type none: common_speculative_init returns nullptr,
# speculative-simple.cpp:119-124, exit 1); the draft context cannot decode a batch (:135-138,
# 237-240): in the prompt the program returns 1, later it stops and still prints the statistics
FAILED_INIT = "failed to initialize speculative decoding"
FAILED_PROMPT = "failed to process speculative prompt"
FAILED_BATCH = "failed to process speculative batch"
# master colours every accepted draft token cyan, then sets white (speculative-simple.cpp:317-318)
ACCEPTED_COLOR, AFTER_COLOR = "\x1b[36m", "\x1b[37m"


def _outside_draft_vocab(tokens, ctx_d) -> bool:
    return ctx_d is not None and any(not 0 <= t < ctx_d.model.n_vocab for t in tokens)


def _auto_prior(a, params, tgt, dft, ctx_t, ctx_d):
    """--spec-draft-n-max auto [specnb]: the pair's costs record (`specnb costs`), where one is
    recorded, so that auto prices every length from the first round; said on stderr."""
    from ..measure.turns import auto_prior
    from ..run.pair import Pair
    prior = auto_prior(Pair(tgt, dft, ctx_t, ctx_d), params) if ctx_d is not None else None
    if prior is not None and not a.json:
        print(f"auto: each length priced from the {prior.source}", file=sys.stderr)
    return prior


def cmd_speculative_simple(a):
    import warnings
    from .flags import build
    from ..errors import BatchError
    from ..speculation.loop import SpeculativeLoop
    from ..speculation.params import SpecParams
    from ..vocab.textio import as_text
    color = a.color == "on" or (a.color == "auto" and sys.stdout.isatty())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if a.json else "default")
        smpl_params = sampler_params(a)
        params = build(a, "spec", SpecParams)
        if params.types is not None and not params.resolved_types(has_draft_model=True):
            print(FAILED_INIT, file=sys.stderr)
            return 1
        tgt, dft, ctx_t, ctx_d = _spec_setup(a, params)
        smpl_params = _ignore_eos(a, smpl_params, tgt.vocab)
        text = _read_prompt(a, tgt.vocab)
        ids = tgt.vocab.tokenize(text)
        # the example feeds its sampler no prompt token (speculative-simple.cpp); --penalize-prompt
        # does, as llama-cli and llama-server do
        loop = SpeculativeLoop(ctx_t, ctx_d, [ids] * max(1, a.parallel), _n_predict(a, ctx_t.n_ctx),
                               smpl_params, params, penalize_prompt=a.penalize_prompt, stop_rule=a.stop,
                               costs_prior=_auto_prior(a, params, tgt, dft, ctx_t, ctx_d))
    if not a.json:
        sys.stdout.write(as_text(text, "replace"))
        sys.stdout.flush()

    def show(ev):
        if a.json:
            return
        s = ev.slot
        for i, t in enumerate(s.committed):
            piece = tgt.vocab.token_to_piece(t, special=False).decode("utf-8", "replace")
            if color and i < s.n_accepted:       # an accepted draft token, replays' too, as master's
                piece = f"{ACCEPTED_COLOR}{piece}{AFTER_COLOR}"
            sys.stdout.write(piece)
        sys.stdout.flush()
    failed = None
    try:
        results = loop.run(on_round=show)
    except BatchError:
        # a token the draft model cannot read (its vocab is smaller than the target's)
        if _outside_draft_vocab(ids[:-1], ctx_d):        # in the prompt: master returns 1 (:135-138)
            print(f"\n{FAILED_PROMPT}", file=sys.stderr)
            return 1
        if not _outside_draft_vocab([ids[-1]] + [t for sl in loop.results() for t in sl.tokens], ctx_d):
            raise
        failed = FAILED_BATCH                           # master: break, then the statistics (:237-240)
        print(f"\n{FAILED_BATCH}", file=sys.stderr)
        results = loop.results()
    r = results[0]
    impls = loop.chain.stats()
    st = impls[0] if impls else {}
    if a.json:
        print(json.dumps({
            "tokens": r.tokens, "text": r.text, "n_prompt": r.n_prompt, "n_drafted": r.n_drafted,
            "n_accept": r.n_accept, "n_rounds": r.n_rounds, "spec_types": loop.chain.types,
            # per draft over --draft-max positions (specnb's); llama.cpp's are in impls[]
            "acc_rate_per_pos": _per_draft_rates(impls, params.n_max),
            "mean_acc_len": st.get("mean_acc_len", 0.0), "t_prompt_s": r.t_prompt_s,
            "t_gen_s": r.t_gen_s, "tok_s": len(r.tokens) / r.t_gen_s if r.t_gen_s else 0.0,
            "n_eval_draft": sum(s["n_eval"] for s in impls), "stop_reason": r.stop_reason, "stats": st, "impls": impls,
            "summary": {"n_drafted": loop.n_drafted_simple, "n_accept": loop.n_accept_simple},
            "draft_len": loop.policy.stats(),
            "draft_vocab": None if ctx_d is None or ctx_d.output_ids is None else len(ctx_d.output_ids),
            "parallel": [x.tokens for x in results[1:]], "error": failed}))
    else:
        print("\n", flush=True)                         # the text alone on stdout (LOG, :348)
        _print_statistics(r, loop, impls, ctx_d, params, file=sys.stderr)
    return 0


def _print_statistics(r, loop, impls, ctx_d, params, file):
    """What master prints after the text, LOG_INF on stderr (speculative-simple.cpp:350-366)."""
    n_eval = sum(s["n_eval"] for s in impls)
    say = lambda *x: print(*x, file=file)   # noqa: E731
    say(f"encoded {r.n_prompt:4d} tokens in {r.t_prompt_s:8.3f} seconds, speed: "
        f"{r.n_prompt / max(r.t_prompt_s, 1e-9):8.3f} t/s")
    say(f"decoded {len(r.tokens):4d} tokens in {r.t_gen_s:8.3f} seconds, speed: "
        f"{len(r.tokens) / max(r.t_gen_s, 1e-9):8.3f} t/s\n")
    say(loop.summary())
    say("\ndraft:\n")
    say(loop.chain.print_stats())
    say("  (master 34af94cd prints the lines above at -lv 4 only, after 'spec common_specu: '; "
        "c392e50 prints the draft context's perf counters instead)")
    if ctx_d is not None:
        say(f"  draft evaluations: {n_eval} over {r.n_rounds} rounds ({n_eval / max(r.n_rounds, 1):.2f} "
            f"per round)")
        if ctx_d.output_ids is not None:
            say(f"  draft vocabulary [specnb, beyond llama.cpp]: the draft scored {len(ctx_d.output_ids)} "
                f"of its {ctx_d.model.n_vocab} tokens (--spec-draft-vocab {params.draft_vocab}, the "
                f"prompt's and the control tokens)")
    say("\ntarget:\n")
    say("  (master prints common_perf_print's timings here: the target's load, prompt eval, eval "
        "and sampling times; specnb does not time the target apart from the draft, see "
        "encoded / decoded above)")


def _per_draft_rates(impls: list, n_max: int) -> list:
    """Drafts of every impl with at least i+1 accepted tokens / drafts, i < n_max."""
    n = sum(s["n_gen_drafts"] for s in impls)
    return [sum(s["specnb_n_acc_tokens_per_pos"][i] for s in impls
                if i < len(s["specnb_n_acc_tokens_per_pos"])) / n if n else 0.0 for i in range(n_max)]


def cmd_demo(a):
    from .demo import demo, sweep
    kw = dict(n_predict=a.n_predict, n_threads=a.threads, backend=a.backend, json_out=a.json,
              activations=a.activations)
    if a.policies is not None:
        from .demo import policies
        from ..speculation.draft_len import parse_draft_max
        names = [x.strip() for x in a.policies.split(",") if x.strip()]
        for n in names:
            if n != "plain":
                parse_draft_max(n)                    # a bad name is refused before any run
        labels = [x.strip() for x in a.prompts.split(",")] if a.prompts else None
        if a.repeats < 1:
            from ..errors import ParamError
            raise ParamError(f"invalid --repeats={a.repeats}: expected at least 1 run per cell")
        return policies(names, prompt_labels=labels, repeats=a.repeats, **kw)
    if a.passes is not None and a.passes < 1:
        from ..errors import ParamError
        raise ParamError(f"invalid --passes={a.passes}: expected at least 1")
    if a.sweep:
        from ..errors import ParamError
        try:
            values = tuple(int(x) for x in a.sweep.split(","))
        except ValueError:
            raise ParamError(f"invalid --sweep={a.sweep!r}: expected draft-max values such as "
                             f"1,2,3,4,6,8") from None
        if not values or min(values) < 1:
            raise ParamError(f"invalid --sweep={a.sweep!r}: draft-max values must be >= 1")
        return sweep(values, passes=a.passes or 3, **kw)
    return demo(llama_bench=a.llama_bench, full=a.full, passes=a.passes or 2, **kw)


# ---- argument parsing -----------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .flags import add_flags
    from .model_commands import FORGE_KINDS, cmd_forge, cmd_models
    ap = argparse.ArgumentParser(prog="specnb", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="plain decoding")
    add_flags(p, "generate")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("tokenize", help="text -> token ids, as llama-tokenize")
    add_flags(p, "tokenize")
    p.add_argument("--ids", action="store_true", help="print only the ids, as a list")
    p.add_argument("--no-bos", action="store_true", help="do not add BOS/EOS even if the vocab asks")
    p.add_argument("--no-parse-special", action="store_true", help="treat <|...|> as plain text")
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("perplexity", help="perplexity as llama-perplexity")
    add_flags(p, "perplexity")
    p.add_argument("--chunks", type=int, default=-1, help="score at most this many chunks (default: -1, "
                   "every chunk)")
    p.set_defaults(func=cmd_perplexity)

    p = sub.add_parser("bench", help="decode speed and batch cost, next to llama.cpp's")
    add_flags(p, "bench")
    p.add_argument("-md", "--model-draft", dest="model_draft", default=None,
                   help="a draft model too (a real pair: its decode, the target's batch sweep 1..17, and "
                        "with --spec speculative decoding)")
    p.add_argument("--activations", choices=["f32", "q8", "both"], default="both",
                   help="which CPU activation modes to measure, side by side (default both)")
    p.add_argument("--llama-bench", default=None, metavar="PATH",
                   help="llama.cpp's llama-bench, run on the same models, taking turns with specnb "
                        "(default: $SPECNB_LLAMA_BENCH; without it llama.cpp's figures are quoted "
                        "for the default model only)")
    p.add_argument("--bandwidth-gib", type=float, default=1.0,
                   help="GiB per thread for the streaming-bandwidth measurement (default 1)")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the peak-memory run of the default pair in a fresh process")
    p.add_argument("--compile-time", action="store_true",
                   help="also time a fresh process's first call with an empty and with a filled "
                        "Numba cache (the empty one compiles everything: minutes)")
    p.add_argument("--profile", action="store_true",
                   help="instead: where a decode step's time goes, each kernel timed alone on the "
                        "model's weights and each phase timed inside the fused step (1 row and a "
                        "5-row batch, per activation mode)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n-gen", type=int, default=32)
    p.add_argument("--check", action="store_true", help="also check the backend against the CPU")
    p.add_argument("--quick", action="store_true", help="fewer batch sizes and repetitions")
    p.add_argument("--peak-gbs", type=float, default=4800.0,
                   help="memory bandwidth peak for the GPU fraction column (an H200: 4800)")
    p.add_argument("--spec", action="store_true",
                   help="also measure speculative decoding: with -md the demo's waterfall of the "
                        "pair on code prompts (plain decoding, llama.cpp's draft-simple, specnb's "
                        "additions), its headline against specnb's and llama.cpp's plain decoding, "
                        "the poem, and the goals; else the default pair (acceptance, draft work, "
                        "loop overhead, speedup vs draft-max against the cost model)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("gate", help="vocab compatibility of a target/draft pair, with the "
                                    "verdicts of llama.cpp c392e50 and master")
    p.add_argument("target", help="a model name or a GGUF path")
    p.add_argument("draft", help="a model name or a GGUF path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gate)

    for name in ("speculative-simple", "speculative"):
        p = sub.add_parser(name, help="speculative decoding (a draft model, n-gram lookups)",
                           description="llama-speculative-simple as llama.cpp master 34af94cd has "
                           "it: its flags and statistics, with its defaults where no help line says "
                           "'specnb's default'. Options master lacks are marked [specnb, beyond "
                           "llama.cpp]. c392e50's older names are accepted where labelled so; c392e50 "
                           "is the build specnb compares speeds and printed counts with "
                           "(docs/llama_cpp.md); every flag next to master's: docs/commands.md")
        add_flags(p, "speculative-simple")
        p.set_defaults(func=cmd_speculative_simple)

    from .demo import SWEEP_DRAFT_MAX
    p = sub.add_parser("demo", help="the real pair on code prompts, from plain decoding through "
                                    "llama.cpp's draft-simple to specnb's additions, then on prose, "
                                    "then the teaching pair: speculative == plain, and speed")
    add_flags(p, "demo")
    p.add_argument("--sweep", nargs="?", const=",".join(map(str, SWEEP_DRAFT_MAX)), default=None,
                   metavar="N,N,...", help="instead: plain vs speculative speed on the code "
                   "prompts for each draft-max (default 1,2,3,4,6,8)")
    p.add_argument("--llama-bench", default=None, metavar="PATH",
                   help="llama.cpp's llama-bench: part 1 also measures llama.cpp's plain decoding "
                        "of the same target and sets the headline beside it (default: "
                        "$SPECNB_LLAMA_BENCH)")
    p.add_argument("--policies", nargs="?", const="plain,1,2,4,8,heuristic,auto", default=None,
                   metavar="P,P,...", help="instead: one table prompt x draft-length policy "
                   "(plain, N, heuristic[:CAP], auto[:CAP]; default plain,1,2,4,8,heuristic,auto; "
                   "heuristic and auto are specnb's, beyond llama.cpp, whose draft length is a "
                   "fixed N), "
                   "tok/s and speed-up, every run with line 4's flags, code prompts greedy and two prose "
                   "prompts sampled")
    p.add_argument("--full", action="store_true",
                   help="the waterfall on every code prompt, greedy and sampled (six runs of each line "
                        "and plain decoding a pass), not the first two greedy")
    p.add_argument("--passes", type=int, default=None, metavar="N",
                   help="passes of the waterfall (default 2) and of --sweep (default 3): each runs plain "
                        "decoding and every configuration once, taking turns")
    p.add_argument("--prompts", default=None, metavar="LABEL,...",
                   help="--policies: only these prompts (write a function, edit a function, "
                        "complete code, a poem, a story)")
    p.add_argument("--repeats", type=int, default=POLICY_REPEATS, metavar="N",
                   help="--policies: runs per cell, the policies taking turns; a cell is the "
                        f"median (default {POLICY_REPEATS})")
    p.set_defaults(func=cmd_demo)

    from . import costs
    costs.add_parser(sub)

    p = sub.add_parser("models", help="the models specnb knows by name: list, install, path")
    p.add_argument("action", nargs="?", choices=["list", "install", "path"], default="list")
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--json", action="store_true", help="list as one JSON object")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("forge", help="write GGUF variants (drafts, mutated vocabs, tiny models)")
    from ..gguf.forge import MUTATIONS
    p.add_argument("kind", choices=FORGE_KINDS)
    p.add_argument("-m", "--model", default=None,
                   help="source: a model name or a GGUF path (default: smollm2-135m)")
    p.add_argument("-o", "--output", default=None, help="destination GGUF path")
    p.add_argument("--type", default="Q4_0", help="tensor type for requantize / tiny")
    p.add_argument("--layers", type=int, default=4, help="layers kept by truncate / of tiny")
    p.add_argument("--mutation", choices=MUTATIONS, default="rename-token")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_forge)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        return a.func(a)
    except SpecnbError as e:
        msg = str(e).replace("\n", "\n  ")
        print(f"specnb {a.command}: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"\nspecnb {a.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
