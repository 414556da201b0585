"""`specnb demo`: the default pair end to end on a few prompts.

For each prompt it decodes plainly and speculatively (greedy and sampled), shows that the two
outputs are identical token for token, and prints the acceptance figures and both speeds.
"""
from __future__ import annotations

import json
import sys

DEMO_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Speculative decoding works because",
]


def demo(n_predict: int = 48, draft_max: int = 3, n_threads=None, backend: str = "cpu",
         json_out: bool = False, activations: str = "f32") -> int:
    from .context import Context
    from .loop import SpecParams, SpeculativeLoop, generate
    from .model import load_model
    from .models import default_draft_path, default_target_path
    from .sampling import Sampler, SamplerParams
    say = (lambda *a, **k: None) if json_out else (lambda *a, **k: print(*a, **k, flush=True))
    say("specnb demo: speculative decoding with a draft model (llama.cpp's draft-simple)")
    tgt = load_model(default_target_path())
    say(f"target: {tgt.name} ({tgt.path})")
    say("draft:  the target requantized to Q4_0 (a stand-in: a real deployment pairs a smaller "
        "model of the same family)")
    dft = load_model(default_draft_path())
    ctx_t = Context(tgt, n_ctx=1024, backend=backend, n_threads=n_threads, activations=activations)
    ctx_d = Context(dft, n_ctx=1024, backend=backend, n_threads=n_threads, activations=activations)
    settings = [("greedy", SamplerParams(temp=0.0, seed=1)),
                ("temp 0.8, top-k 40, seed 7", SamplerParams(temp=0.8, top_k=40, seed=7))]
    rows, all_same = [], True
    for prompt in DEMO_PROMPTS:
        ids = tgt.vocab.tokenize(prompt)
        for name, sp in settings:
            plain = generate(ctx_t, Sampler(sp, tgt.n_vocab), ids, n_predict)
            loop = SpeculativeLoop(ctx_t, ctx_d, ids, n_predict, sp, SpecParams(n_max=draft_max))
            spec = loop.run()[0]
            st = loop.spec.stats()[0]
            same = plain.tokens == spec.tokens
            all_same &= same
            row = {"prompt": prompt, "sampling": name, "identical": same,
                   "n_tokens": len(spec.tokens), "n_drafted": spec.n_drafted,
                   "n_accept": spec.n_accept, "accept_rate": spec.accept_rate,
                   "mean_acc_len": st["mean_acc_len"], "acc_rate_per_pos": st["acc_rate_per_pos"],
                   "plain_tok_s": plain.tok_per_s,
                   "spec_tok_s": len(spec.tokens) / spec.t_gen_s if spec.t_gen_s else 0.0,
                   "text": spec.text}
            rows.append(row)
            say(f"\n--- {prompt!r} [{name}]")
            say(prompt + spec.text)
            rates = ", ".join(f"{r:.2f}" for r in st["acc_rate_per_pos"])
            say(f"identical to plain decoding: {'yes' if same else 'NO'} | drafted {spec.n_drafted}, "
                f"accepted {spec.n_accept} ({100 * spec.accept_rate:.1f}%), acceptance per position "
                f"[{rates}], mean accepted length {st['mean_acc_len']:.2f} | plain "
                f"{row['plain_tok_s']:.1f} tok/s, speculative {row['spec_tok_s']:.1f} tok/s")
    if json_out:
        print(json.dumps({"identical": all_same, "runs": rows}))
    else:
        print(f"\nall speculative outputs identical to plain decoding: {'yes' if all_same else 'NO'}")
    return 0 if all_same else 1
