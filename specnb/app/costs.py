"""`specnb costs`: the machine's costs record for a pair (specnb.measure.costs), printed.

    specnb costs                              the real pair's record (measured once if there is none)
    specnb costs -md qwen2.5-coder-0.5b-q4_0 --spec-draft-vocab 32768   the demo's headline pair's
    specnb costs --json                       one JSON object; every cost as {"median", "min", "max", ...}
    specnb costs --refresh                    measure again now

The demo, `bench --spec`, the notebooks and the exercise read the same record, so they print the
same c and bc(k) on one machine within a class day.
"""
from __future__ import annotations

import json
import sys


def add_parser(sub) -> None:
    from ..model.registry import REAL_DRAFT, REAL_TARGET
    p = sub.add_parser("costs", help="the machine's costs for a pair (c, bc(k), bandwidth, int8 limit), "
                                     "measured once and read by the demo, bench and the notebooks")
    p.add_argument("-m", "--model", default=REAL_TARGET, help=f"the target (default {REAL_TARGET})")
    p.add_argument("-md", "--model-draft", default=REAL_DRAFT, help=f"the draft (default {REAL_DRAFT})")
    p.add_argument("--spec-draft-vocab", type=int, default=None, metavar="N",
                   help="the draft's head restricted to N tokens, as speculative-simple's flag")
    p.add_argument("--activations", choices=["q8", "f32"], default=None,
                   help="the CPU's activation mode (default q8)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: every core)")
    p.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="cpu")
    p.add_argument("--refresh", action="store_true", help="measure again now, whatever is recorded")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=run)


def run(a) -> int:
    from ..errors import check_param
    from ..measure.costs import format_costs, open_costs
    check_param(a.spec_draft_vocab is None or a.spec_draft_vocab >= 1, "--spec-draft-vocab",
                a.spec_draft_vocab, "a number of tokens >= 1")
    say = lambda text: print(f"specnb: {text}", file=sys.stderr, flush=True)     # noqa: E731
    c = open_costs(a.model, a.model_draft, a.spec_draft_vocab, a.activations, a.threads, a.backend,
                   refresh=a.refresh, on_measure=say)
    print(json.dumps(c.as_json()) if a.json else format_costs(c))
    return 0
