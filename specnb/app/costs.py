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
    """`costs`: the shared flags from the flag table (-m, -md, --spec-draft-vocab, -t, --backend,
    --activations, --json), and --refresh."""
    from .flags import add_flags
    p = sub.add_parser("costs", help="the machine's costs for a pair (c, bc(k), bandwidth, int8 limit), "
                                     "measured once and read by the demo, bench and the notebooks")
    add_flags(p, "costs")
    p.add_argument("--refresh", action="store_true", help="measure again now, whatever is recorded")
    p.set_defaults(func=run)


def run(a) -> int:
    from ..errors import check_param
    from ..measure.costs import format_costs, open_costs
    from ..model.registry import REAL_DRAFT, REAL_TARGET
    from ..run.context import set_threads
    check_param(a.draft_vocab is None or a.draft_vocab >= 0, "--spec-draft-vocab", a.draft_vocab,
                "a number of tokens >= 1, or 0 for the whole vocabulary")
    say = lambda text: print(f"specnb: {text}", file=sys.stderr, flush=True)     # noqa: E731
    n_threads = set_threads(a.threads) if a.threads else None
    c = open_costs(a.model or REAL_TARGET, a.model_draft or REAL_DRAFT, a.draft_vocab or None, a.activations,
                   n_threads, a.backend, refresh=a.refresh, on_measure=say)
    print(json.dumps(c.as_json()) if a.json else format_costs(c))
    return 0
