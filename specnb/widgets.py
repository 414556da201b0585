"""The live view's old import path: the view now lives in the specnb.view package (state model,
HTML rendering, player thread, widget assembly); these names stay importable from here."""
from .view import (CHIP_STATES, KV_STATES, MARK, WORDS, Chip, LiveView, SlotView,  # noqa: F401
                   chip_states, committed_flags, kv_states, piece, slot_view, visible)
