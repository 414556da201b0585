"""speculative-simple's main loop for one sequence, line by line (the loop to read first).

Each step cites examples/speculative-simple/speculative-simple.cpp at master 34af94cd. `SpeculativeLoop`
(loop.py) is the same loop for several sequences, with timings, events and the other
verification modes; both give the same tokens and counters. As the example, this does not
put the prompt into the sampler's penalty window unless asked (llama-cli and llama-server, and
specnb's `generate` and `SpeculativeLoop` by default, do).
"""
from __future__ import annotations

from .run.context import Batch
from .run.sampling import sample_and_accept_n
from .speculation.impl import DraftParams


def speculative_simple(ctx_tgt, spec, smpl, inp: list, n_predict: int,
                       penalize_prompt: bool = False) -> dict:
    """Decode n_predict tokens after the prompt `inp` with the chain `spec` (a `Speculative`)."""
    seq = 0                                               # :105 one sequence
    for t in inp if penalize_prompt else ():              # (llama-cli's common_sampler_accept of
        smpl.accept(t)                                    # the prompt; the example has none)
    use_ckpt_tgt = not ctx_tgt.partial_seq_rm             # :69 no partial seq_rm: checkpoints
    batch = Batch.from_tokens(inp[:-1], 0, seq, "none")   # :126-138 the prompt but its last token,
    if len(batch):
        ctx_tgt.decode(batch)                             # on the target
        spec.process(batch)                               # and on the speculators
    id_last = inp[-1]                                     # :142 keep the last token separate
    prompt_tgt = list(inp[:-1])                           # :145 the tokens in the target context
    n_past = len(inp) - 1                                 # :148
    spec.begin(seq, prompt_tgt)                           # :150
    draft, out, n_drafted, n_accept = [], [], 0, 0
    while True:                                           # :162
        if not draft:                                     # :170 no replay pending: draft
            n_draft_max = max(min(ctx_tgt.n_ctx - n_past - 2,            # :181-185 the budget
                                  n_predict - len(out) - 1), 0)
            # :188-195 the request (master asks even with a zero budget, which then caps
            # nothing; specnb, as llama-server, asks only for a positive one)
            dp = DraftParams(drafting=n_draft_max > 0, n_max=n_draft_max, n_past=n_past,
                             id_last=id_last, prompt=prompt_tgt, result=draft)   # result: output
            spec.draft([dp] + [DraftParams() for _ in range(spec.n_seq - 1)])  # :196 fills draft
            if draft and use_ckpt_tgt:                    # :200-204 ckpt.update_tgt
                ckpt = ctx_tgt.state_seq_get(seq)
            spec.before_verify(seq, n_past)               # :206-213 reset the draft context
        batch = Batch().add(id_last, n_past, seq, True)   # :222-223 id_last at n_past ...
        for i, d in enumerate(draft):                     # :227-229 ... then the draft
            batch.add(d, n_past + 1 + i, seq, True)
        n_past += 1
        ctx_tgt.decode(batch)                             # :233 one target batch
        spec.process(batch)                               # :237 the speculators see it
        smpl_save = smpl.clone() if use_ckpt_tgt else None                # :243-246
        n_draft = len(draft)                              # :249
        ids = sample_and_accept_n(smpl, ctx_tgt, draft)   # :258 the target's sampler decides
        if use_ckpt_tgt and len(ids) - 1 < n_draft:       # :267 partial acceptance, no seq_rm:
            draft = ids                                   # :270 the approved ids are the next draft
            ctx_tgt.state_seq_set(seq, ckpt)              # :272-275 ckpt.load_tgt
            spec.seq_rm(seq, n_past - 1)                  # :278-281 ckpt.load_dft
            smpl = smpl_save                              # :285
            n_past = len(prompt_tgt)                      # :287
            continue
        spec.accept(seq, len(ids) - 1)                    # :292 credit the drafter
        n_drafted += n_draft                              # :295-296
        n_accept += len(ids) - 1
        eog = False
        for tok in ids:                                   # :305-316 commit the accepted ids
            prompt_tgt.append(id_last)
            id_last = tok
            out.append(tok)
            eog = ctx_tgt.model.vocab.is_eog(tok)
            if eog or len(out) >= n_predict:              # exact stop (see :339 below)
                break
        draft = []                                        # :327
        n_past = len(prompt_tgt)                          # :298 n_past += the committed ids
        ctx_tgt.seq_rm(seq, n_past, -1)                   # :329-337 drop the rejected tail
        spec.seq_rm(seq, n_past)
        # :339 speculative-simple stops once n_predict > N (at least N + 1 tokens); specnb at N
        if eog or len(out) >= n_predict or n_past >= ctx_tgt.n_ctx:
            return {"tokens": out, "n_drafted": n_drafted, "n_accept": n_accept,
                    "stats": spec.stats()}
