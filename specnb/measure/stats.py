"""Statistics of speculative runs, computed from the loop's RoundEvents (and its impl's counters).

Everything here reads events, never a context: the live view's counters, the figures in
`specnb.figures.runs` and the sweeps in `specnb.measure.experiments` take their numbers from these functions.

  - `event_stats(events, n_max)`: llama.cpp's per-impl statistics (common_speculative_print_stats)
    recomputed from the events as llama.cpp counts them (per accept call), the `specnb_*` figures
    per draft, plus per-round series (tokens committed per target call, timings);
  - `examined_counts` / `alpha_from_events`: the draft tokens the target examined, and the
    maximum-likelihood acceptance rate alpha they give (`cost.alpha_from_counts`);
  - `accepted_length_counts`: drafts by accepted length, from events or llama.cpp's statistics;
  - `run_stats(loop, events)`: one run's figures for the sweeps (the impl's own statistics,
    alpha, tokens per call and time per token).

A replayed round (the checkpoint path) re-verifies tokens the target approved in the round
before: it counts as a target call, but not as a new draft.
"""
from __future__ import annotations

from .cost import alpha_from_counts


def _new_drafts(events):
    """The SlotRounds that verified a new, non-empty draft (not a replay)."""
    for ev in events:
        for r in ev.slots:
            if not r.replay and r.draft:
                yield r


def examined_counts(events) -> tuple[int, int]:
    """(accepted, examined) draft tokens over RoundEvents: the target examines a draft up to and
    including its first rejection."""
    acc = exa = 0
    for r in _new_drafts(events):
        acc += r.n_accepted
        exa += r.n_accepted + (1 if r.n_accepted < len(r.draft) else 0)
    return acc, exa


def alpha_from_events(events) -> float:
    """`cost.alpha_from_counts` over a run's RoundEvents."""
    return alpha_from_counts(*examined_counts(events))


def committed_per_round(events) -> list:
    """Tokens committed per round (one target call), over every sequence of the round."""
    return [sum(len(r.committed) for r in ev.slots) for ev in events]


def event_stats(events, n_max: int | None = None) -> dict:
    """The chain's statistics recomputed from RoundEvents, plus per-round series.

    The shared keys equal `loop.chain.main_stats()` for a single-impl run. llama.cpp's, counted
    per accept() call as common_speculative_accept does: every committed round credits the last
    drafter of its sequence (impl_last is kept between rounds), with n_accepted tokens (on a
    replay, the a + 1 re-verified ones); a restored round credits nothing. n_call_accept,
    n_acc_drafts, n_acc_tokens, n_acc_tokens_per_pos (as long as the longest accepted run),
    acc_rate_per_pos and mean_acc_len are those. n_gen_drafts / n_gen_tokens count the
    non-empty drafts. The `specnb_*` keys are per draft: accepted draft tokens, per position
    over n_max positions.
    """
    events = list(events)
    if n_max is None:
        n_max = max((len(r.draft) for ev in events for r in ev.slots if not r.replay), default=0)
    per_pos, spec_per_pos = [], [0] * n_max
    n_drafts = n_tokens = n_acc = spec_acc = n_acc_drafts = n_calls = 0
    lengths, drafter = [], {}
    for ev in events:
        for r in ev.slots:
            if r.draft and not r.replay:
                drafter[r.seq] = r.impl or "?"
                n_drafts += 1
                n_tokens += len(r.draft)
                spec_acc += r.n_accepted
                lengths.append(r.n_accepted)
                for i in range(min(r.n_accepted, n_max)):
                    spec_per_pos[i] += 1
            if r.checkpoint == "restored" or r.seq not in drafter:
                continue
            n_calls += 1                                   # common_speculative_accept
            n_acc += r.n_accepted
            n_acc_drafts += r.n_accepted > 0
            per_pos += [0] * (r.n_accepted - len(per_pos))
            for i in range(r.n_accepted):
                per_pos[i] += 1
    per_round = committed_per_round(events)
    n_rounds = len(events)
    n_committed = sum(per_round)
    acc, exa = examined_counts(events)
    t_round = [ev.t_round for ev in events]
    chosen = {}                                        # --spec-draft-n-max auto / heuristic
    for ev in events:
        for r in ev.slots:
            if getattr(r, "draft_len", None) is not None:
                chosen[r.draft_len.d] = chosen.get(r.draft_len.d, 0) + 1
    return {
        "n_rounds": n_rounds, "n_max": n_max,
        "n_gen_drafts": n_drafts, "n_gen_tokens": n_tokens, "n_acc_tokens": n_acc,
        "n_acc_drafts": n_acc_drafts, "n_call_accept": n_calls,
        "n_acc_tokens_per_pos": per_pos,
        "acc_rate_per_pos": [n / n_calls for n in per_pos] if n_calls else [],
        "mean_acc_len": 1.0 + n_acc / n_calls if n_calls else 0.0,
        "specnb_n_acc_tokens": spec_acc, "specnb_n_acc_tokens_per_pos": spec_per_pos,
        "specnb_acc_rate_per_pos": [n / n_drafts if n_drafts else 0.0 for n in spec_per_pos],
        "specnb_mean_acc_len": 1.0 + spec_acc / n_drafts if n_drafts else 0.0,
        "accept_rate": spec_acc / n_tokens if n_tokens else 0.0,
        "alpha": alpha_from_counts(acc, exa), "n_examined": exa,
        "accepted_lengths": lengths,
        "committed_per_round": per_round, "n_committed": n_committed,
        "tokens_per_call": n_committed / n_rounds if n_rounds else 0.0,
        "t_round": t_round,
        "t_round_mean": sum(t_round) / n_rounds if n_rounds else 0.0,
        "n_dft_eval": sum(ev.n_dft_eval for ev in events),
        "draft_len_chosen": dict(sorted(chosen.items())),
    }


def as_stats(source, n_max: int | None = None) -> dict:
    """A statistics dict as given (impl_stats, event_stats, run_stats), or `event_stats` of
    RoundEvents."""
    if isinstance(source, dict):
        return source
    return event_stats(source, n_max)


def accepted_length_counts(source) -> list:
    """Drafts by accepted length 0..n_max, from statistics (a dict) or RoundEvents.

    From llama.cpp's statistics alone: drafts with exactly k accepted = drafts with at least k
    minus drafts with at least k+1 (at least 0: every draft).
    """
    st = as_stats(source)
    n = int(st["n_gen_drafts"])
    if "specnb_n_acc_tokens_per_pos" in st:        # per draft (llama.cpp's counts accept calls)
        at_least = [n] + [int(x) for x in st["specnb_n_acc_tokens_per_pos"]]
    elif "n_acc_tokens_per_pos" in st:
        at_least = [n] + [int(x) for x in st["n_acc_tokens_per_pos"]]
    else:
        at_least = [n] + [int(round(r * n)) for r in st["acc_rate_per_pos"]]
    at_least.append(0)
    return [at_least[k] - at_least[k + 1] for k in range(len(at_least) - 1)]


def run_stats(loop, events) -> dict:
    """The figures one run gives the sweeps and plots: llama.cpp's statistics of the loop's impl
    plus tokens per call, alpha and the time per committed token."""
    return figures_of(loop.chain.main_stats(), events, loop.n_accept, loop.n_drafted)


def figures_of(main_stats: dict, events, n_accept: int, n_drafted: int) -> dict:
    """run_stats from a run's parts: its impl's statistics, events and counts (measure/turns.Run's)."""
    events = list(events)
    st = dict(main_stats)
    st.setdefault("acc_rate_per_pos", [])            # no impl (--spec-type none): no draft position
    n_committed = sum(committed_per_round(events))
    acc, exa = examined_counts(events)
    st.update(n_rounds=len(events), n_committed=n_committed,
              tokens_per_call=n_committed / len(events) if events else 0.0,
              accept_rate=n_accept / n_drafted if n_drafted else 0.0,
              alpha=alpha_from_counts(acc, exa), n_examined=exa,
              t_gen_s=sum(ev.t_round for ev in events))
    st["t_per_token_s"] = st["t_gen_s"] / n_committed if n_committed else float("nan")
    return st
