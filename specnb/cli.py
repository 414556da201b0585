"""`python -m specnb ...` / `specnb ...`: generate, tokenize, perplexity, bench, gate,
speculative-simple, demo, forge.

Every command prints a one-line error and exits 2 on bad input (no traceback); `gate` exits 1
when the pair is incompatible.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from .errors import SpecnbError

EXIT_BAD_INPUT = 2


def _add_model(p, flag="-m", dest="model", help_="GGUF model path (default: SmolLM2-135M-Instruct Q4_1)"):
    p.add_argument(flag, f"--{dest.replace('_', '-')}", dest=dest, default=None, help=help_)


def _add_common(p, activations=True):
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="cpu",
                   help="compute backend (auto: cuda when a GPU is found, else cpu)")
    if activations:
        p.add_argument("--activations", choices=["f32", "q8"], default="f32",
                       help="CPU matrix products: f32 = float32 activations, exact against the "
                            "reference (default); q8 = activations rounded to int8 blocks, as "
                            "llama.cpp's CPU backend does (faster)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _add_sampling(p):
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default 0)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--typical", type=float, default=1.0)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--repeat-last-n", type=int, default=64)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=42, help="RNG seed (default 42)")


def _prompt_args(p):
    p.add_argument("-p", "--prompt", default=None)
    p.add_argument("-f", "--file", default=None, help="read the prompt from a file")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt as a user message with the model's chat template")


def sampler_params(a):
    from .sampling import SamplerParams
    return SamplerParams(temp=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, typ_p=a.typical,
                         penalty_repeat=a.repeat_penalty, penalty_last_n=a.repeat_last_n,
                         penalty_freq=a.frequency_penalty, penalty_present=a.presence_penalty,
                         seed=a.seed).validate()


def _load(path):
    from .model import load_model
    from .models import default_target_path
    return load_model(path or default_target_path())


def _read_prompt(a, vocab, default=None) -> str:
    from .errors import ParamError
    if a.prompt is not None and a.file is not None:
        raise ParamError("give either -p PROMPT or -f FILE, not both")
    if a.file is not None:
        try:
            with open(a.file, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ParamError(f"cannot read prompt file {a.file!r}: {e.strerror}") from None
    elif a.prompt is not None:
        text = a.prompt
    elif default is not None:
        text = default
    else:
        raise ParamError("no prompt: give -p PROMPT or -f FILE")
    if getattr(a, "chat", False):
        text = vocab.apply_chat_template([{"role": "user", "content": text}])
    return text


# ---- commands -------------------------------------------------------------------------------
def cmd_generate(a):
    from .context import Context
    from .loop import generate
    from .sampling import Sampler
    model = _load(a.model)
    text = _read_prompt(a, model.vocab)
    ids = model.vocab.tokenize(text)
    ctx = Context(model, n_ctx=a.ctx_size, backend=a.backend, n_threads=a.threads,
                  activations=a.activations)
    smpl = Sampler(sampler_params(a), model.n_vocab)
    stream = None
    if not a.json:
        sys.stdout.write(text)
        stream = lambda t: (sys.stdout.write(model.vocab.token_to_piece(t, special=False)
                                             .decode("utf-8", "replace")), sys.stdout.flush())
    r = generate(ctx, smpl, ids, a.n_predict, on_token=stream)
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
    from .model import load_model
    from .models import default_target_path
    model = load_model(a.model or default_target_path(), vocab_only=True)
    v = model.vocab
    text = _read_prompt(a, v)
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
    from .model import load_model
    from .gate import are_compatible
    tgt = load_model(a.target, vocab_only=True)
    dft = load_model(a.draft, vocab_only=True)
    rep = are_compatible(tgt, dft)
    if a.json:
        print(json.dumps({"compatible": rep.ok, "checks": [
            {"name": c.name, "ok": c.ok, "detail": c.detail, "llama_cpp_ok": c.llama_cpp_ok}
            for c in rep.checks]}))
    else:
        print(f"target: {a.target}\ndraft:  {a.draft}")
        print(rep)
    return 0 if rep.ok else 1


def cmd_perplexity(a):
    from .errors import ParamError
    from .perplexity import perplexity
    model = _load(a.model)
    if a.file is None:
        raise ParamError("perplexity needs -f FILE")
    try:
        with open(a.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ParamError(f"cannot read {a.file!r}: {e.strerror}") from None
    def show(k, n, ppl):
        if not a.json:
            print(f"[{k}]{ppl:.4f},", end="" if k < n else "\n", flush=True)
    r = perplexity(model, text, n_ctx=a.ctx_size, backend=a.backend, n_threads=a.threads,
                   on_chunk=show, max_chunks=a.chunks, activations=a.activations)
    if a.json:
        print(json.dumps(r))
    else:
        print(f"Final estimate: PPL = {r['ppl']:.4f} +/- {r['ppl_stderr']:.5f}  "
              f"({r['n_chunks']} chunks of {r['n_ctx']}, {r['tokens_per_s']:.1f} tok/s)")
    return 0


def cmd_bench(a):
    from .bench import bench, format_bench, format_goals
    modes = None if a.activations == "both" else (a.activations,)
    r = bench(a.model, backend=a.backend, n_threads=a.threads, reps=a.reps, n_gen=a.n_gen,
              check=a.check, quick=a.quick, peak_gbs=a.peak_gbs, activations=modes,
              memory=not a.no_memory, compile_time=a.compile_time, draft_path=a.model_draft,
              llama_bench=a.llama_bench, bandwidth_gib=a.bandwidth_gib,
              pair_spec=a.spec and a.model_draft is not None)
    if a.spec and a.model_draft is None:
        from .spec_bench import format_spec_bench, spec_bench
        r["speculative"] = spec_bench(n_threads=a.threads, backend=a.backend, sweep=not a.quick,
                                      activations="f32" if a.activations == "both" else a.activations)
    if a.json:
        print(json.dumps(r))
    else:
        print(format_bench(r))
        if "speculative" in r:
            print("\n" + format_spec_bench(r["speculative"]))
        if r["backend"] == "cpu":
            print("\n" + format_goals(r))
    return 0


def _spec_setup(a):
    from .loop import SpecParams
    from .pair import open_pair
    pair = open_pair(a.model, a.model_draft, n_ctx=a.ctx_size, n_seq=max(1, getattr(a, "parallel", 1)),
                     backend=a.backend, n_threads=a.threads, activations=a.activations,
                     tgt_seq_rm=not a.no_seq_rm)
    tgt, dft, ctx_t, ctx_d = pair.target, pair.draft, pair.ctx_tgt, pair.ctx_dft
    rates = None
    if a.spec_synth_rates:
        from .errors import ParamError
        try:
            rates = [float(x) for x in a.spec_synth_rates.split(",")]
        except ValueError:
            raise ParamError(f"invalid --spec-synth-rates={a.spec_synth_rates!r}: expected "
                             f"comma-separated numbers") from None
    sp = SpecParams(n_max=a.draft_max, n_min=a.draft_min, p_min=a.draft_p_min,
                    reeval=not a.no_reeval, verify=a.verify, synth_rates=rates,
                    synth_len=a.spec_synth_len).validate()
    return tgt, dft, ctx_t, ctx_d, sp


def cmd_speculative_simple(a):
    import warnings
    from .loop import SpeculativeLoop
    tgt, dft, ctx_t, ctx_d, sp = _spec_setup(a)
    text = _read_prompt(a, tgt.vocab)
    ids = tgt.vocab.tokenize(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if a.json else "default")
        loop = SpeculativeLoop(ctx_t, ctx_d, [ids] * max(1, a.parallel), a.n_predict,
                               sampler_params(a), sp)
    if not a.json:
        sys.stdout.write(text)
        sys.stdout.flush()

    def show(ev):
        if a.json:
            return
        s = ev.slot
        k = s.n_accepted if not s.replay else 0
        for i, t in enumerate(s.committed):
            piece = tgt.vocab.token_to_piece(t, special=False).decode("utf-8", "replace")
            if a.color and i < k:
                piece = f"\x1b[32m{piece}\x1b[0m"    # accepted draft tokens in green
            sys.stdout.write(piece)
        sys.stdout.flush()
    results = loop.run(on_round=show)
    r = results[0]
    st = loop.spec.stats()[0]
    if a.json:
        print(json.dumps({
            "tokens": r.tokens, "text": r.text, "n_prompt": r.n_prompt, "n_drafted": r.n_drafted,
            "n_accept": r.n_accept, "n_rounds": r.n_rounds, "acc_rate_per_pos": st["acc_rate_per_pos"],
            "mean_acc_len": st["mean_acc_len"], "t_prompt_s": r.t_prompt_s, "t_gen_s": r.t_gen_s,
            "tok_s": len(r.tokens) / r.t_gen_s if r.t_gen_s else 0.0,
            "n_eval_draft": st["n_eval_draft"] + st["n_eval_process"], "stop_reason": r.stop_reason,
            "stats": st, "parallel": [x.tokens for x in results[1:]]}))
    else:
        print("\n")
        print(f"encoded {r.n_prompt:4d} tokens in {r.t_prompt_s:8.3f} seconds, speed: "
              f"{r.n_prompt / max(r.t_prompt_s, 1e-9):8.3f} t/s")
        print(f"decoded {len(r.tokens):4d} tokens in {r.t_gen_s:8.3f} seconds, speed: "
              f"{len(r.tokens) / max(r.t_gen_s, 1e-9):8.3f} t/s\n")
        print(loop.summary())
        print()
        print(loop.spec.print_stats())
        print(f"  draft evaluations: {st['n_eval_draft']} in draft() + {st['n_eval_process']} in "
              f"process() over {r.n_rounds} rounds "
              f"({(st['n_eval_draft'] + st['n_eval_process']) / max(r.n_rounds, 1):.2f} per round)")
    return 0


def cmd_demo(a):
    from .demo import demo
    return demo(n_predict=a.n_predict, draft_max=a.draft_max, n_threads=a.threads,
                backend=a.backend, json_out=a.json, activations=a.activations)


def cmd_forge(a):
    from . import forge
    out = forge.forge_cli(a)
    print(out)
    return 0


# ---- argument parsing -----------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="specnb", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="plain decoding")
    _add_model(p); _prompt_args(p); _add_sampling(p); _add_common(p)
    p.add_argument("-n", "--n-predict", type=int, default=64)
    p.add_argument("-c", "--ctx-size", type=int, default=2048)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("tokenize", help="text -> token ids, as llama-tokenize")
    _add_model(p); _prompt_args(p)
    p.add_argument("--ids", action="store_true", help="print only the ids, as a list")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-bos", action="store_true", help="do not add BOS/EOS even if the vocab asks")
    p.add_argument("--no-parse-special", action="store_true", help="treat <|...|> as plain text")
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("perplexity", help="perplexity as llama-perplexity")
    _add_model(p); _add_common(p)
    p.add_argument("-f", "--file", default=None)
    p.add_argument("-c", "--ctx-size", type=int, default=512)
    p.add_argument("--chunks", type=int, default=None, help="score at most this many chunks")
    p.set_defaults(func=cmd_perplexity)

    p = sub.add_parser("bench", help="decode speed and batch cost, next to llama.cpp's")
    _add_model(p); _add_common(p, activations=False)
    _add_model(p, "-md", "model_draft", "a draft model too (a real pair: its decode, the target's "
                                        "batch sweep 1..17, and with --spec speculative decoding)")
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
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--n-gen", type=int, default=32)
    p.add_argument("--check", action="store_true", help="also check the backend against the CPU")
    p.add_argument("--quick", action="store_true", help="fewer batch sizes and repetitions")
    p.add_argument("--peak-gbs", type=float, default=4800.0,
                   help="memory bandwidth peak for the GPU fraction column (an H200: 4800)")
    p.add_argument("--spec", action="store_true",
                   help="also measure speculative decoding: with -md the pair on code prompts "
                        "against llama.cpp's plain decoding; else the default pair (acceptance, "
                        "draft work, loop overhead, speedup vs draft-max against the cost model)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("gate", help="vocab compatibility of a target/draft pair")
    p.add_argument("target"); p.add_argument("draft")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gate)

    for name in ("speculative-simple", "speculative"):
        p = sub.add_parser(name, help="speculative decoding with a draft model")
        _add_model(p)
        _add_model(p, "-md", "model_draft", "draft GGUF (default: the target requantized to Q4_0)")
        _prompt_args(p); _add_sampling(p); _add_common(p)
        p.add_argument("-n", "--n-predict", type=int, default=64)
        p.add_argument("-c", "--ctx-size", type=int, default=2048)
        p.add_argument("--draft-max", "--draft", type=int, default=3)
        p.add_argument("--draft-min", type=int, default=0)
        p.add_argument("--draft-p-min", type=float, default=0.0)
        p.add_argument("--verify", choices=["exact", "rejection"], default="exact")
        p.add_argument("--no-reeval", action="store_true",
                       help="keep the draft's KV rows instead of re-evaluating them in process()")
        p.add_argument("--no-seq-rm", action="store_true",
                       help="target memory refuses partial removal: use checkpoints and replay")
        p.add_argument("-np", "--parallel", type=int, default=1, help="sequences decoded together")
        p.add_argument("--spec-synth-rates", default=None)
        p.add_argument("--spec-synth-len", type=float, default=None)
        p.add_argument("--color", action="store_true", help="colour accepted draft tokens")
        p.set_defaults(func=cmd_speculative_simple)

    p = sub.add_parser("demo", help="the default pair end to end: speculative == plain, and speed")
    p.add_argument("-n", "--n-predict", type=int, default=48)
    p.add_argument("--draft-max", type=int, default=3)
    _add_common(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("forge", help="write GGUF variants (drafts, mutated vocabs, tiny models)")
    from .forge import add_forge_args
    add_forge_args(p)
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
