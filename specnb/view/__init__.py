"""The live view: speculative decoding round by round, in ipywidgets (JupyterLab and Voilà).

    from specnb.view import LiveView
    view = LiveView(target_model, draft_model, "The capital of France is")
    view            # in a notebook cell: the controls, the current round, the counters

`LiveView` owns a `SpeculativeLoop` and changes only when the loop hands it a `RoundEvent`:
everything it shows is computed from the events (the per-slot `SlotRound` records), never by
peeking into the contexts. For each round and each sequence it shows

  - id_last and n_past at the start of the round;
  - the draft tokens as chips: accepted ✓, rejected ✗ (the first mismatch) or not examined ·
    (after the first rejection), then the target's own token: → replacing the rejected draft
    token, or ★ the bonus token after a full acceptance (↻ marks re-verified tokens on the
    checkpoint path, ✂ the draft's candidate that p_min stopped);
  - after each draft chip, a mark for the impl of the speculator chain that proposed it
    (◆ the draft model, # an n-gram lookup; a legend lists the chain's impls in the order
    they are tried); the spec-type control picks the chain, as --spec-type does;
  - the committed text, accepted draft tokens shaded green, target-only tokens blue;
  - for the target and the draft context, a strip of KV cells by position: committed
    [0, n_past), rows written this round and kept, rows written and rolled back;
  - on the checkpoint path: the save before verifying, the restore, the replayed draft.

Hovering a chip shows the draft's top candidates (their top-10-renormalized probabilities,
the numbers p_min is compared with), or for an n-gram draft the n-gram it matched and where,
and the target's sample; clicking it, or picking it in the detail list, shows the same in the
detail panel.

The state the view shows is also plain Python, for tests and for reading in a notebook:
`view.chip_states`, `view.kv_cells`, `view.counters`, `view.committed`, `view.error`.

The parts, one file each:

  - state.py: what a round shows (Chip, SlotView from a SlotRound) and a run's RunState;
  - render.py: the HTML of chips, KV strips, counters, the detail panel (pure functions);
  - settings.py: prompt text and token ids, the loop's parameters, the contexts' size;
  - player.py: the background thread behind play and run-to-end;
  - live.py: LiveView, the controls and the rendered state assembled from ipywidgets.
"""

from .live import LiveView
from .render import MARK, WORDS, chip_html, chip_title, visible
from .settings import MAX_SEQUENCES
from .state import (CHIP_STATES, KV_STATES, Chip, RunState, SlotView, chip_states, committed_flags,
    kv_states, piece, slot_view)

__all__ = ["LiveView", "MARK", "WORDS", "chip_html", "chip_title", "visible", "MAX_SEQUENCES",
           "CHIP_STATES", "KV_STATES", "Chip", "RunState", "SlotView", "chip_states",
           "committed_flags", "kv_states", "piece", "slot_view"]
