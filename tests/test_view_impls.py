"""The live view and the speculator chain: each draft chip names the impl that proposed it (a
mark, a class, a legend in the chain's order), n-gram chips show the n-gram they matched (checked
against the token history itself), and the spec-type control picks the chain."""
import re

import pytest

pytest.importorskip("ipywidgets")

from specnb.view import LiveView  # noqa: E402
from spec_checks import plain, repetitive_prompt  # noqa: E402
from specnb.run.sampling import SamplerParams  # noqa: E402
from specnb.speculation.params import SpecParams  # noqa: E402
from test_view import run_checked  # noqa: E402

NGRAM = dict(ngram_size_n=2, ngram_size_m=8)


def chips_of(view, impl=None):
    """Every chip of every round (seq, SlotView, Chip), optionally only one impl's."""
    return [(s, sv, c) for views in view.slot_views for s, sv in views.items() for c in sv.chips
            if impl is None or c.impl == impl]


def check_ngram_chips(view):
    """An n-gram chip's n-gram is the last n tokens of the history at its round (id_last last),
    occurs at match_pos in that history, and the chip's token followed it there."""
    n_checked = 0
    for s, sv, c in chips_of(view):
        if not c.is_ngram or c.match_pos < 0:
            continue
        full = view.prompts[s] + view.loop.results()[s].tokens   # positions of the sequence
        hist = full[:sv.n_past + 1]                              # [0, n_past) and id_last
        n = len(c.ngram)
        assert c.ngram == hist[-n:]
        assert hist[c.match_pos:c.match_pos + n] == c.ngram and c.match_pos + n <= sv.n_past
        assert c.token == hist[c.match_pos + n + c.index]
        assert [t for t in c.ngram_text] == [view.vocab.token_to_piece(t, True).decode(
            "utf-8", errors="replace") for t in c.ngram]
        n_checked += 1
    return n_checked


def test_chain_chips_name_their_impl(pair):
    """ngram-simple before draft-simple (typed in the other order): some rounds drafted by the
    lookup, the rest by the draft model; every chip says which, the legend lists both in the
    chain's order, the header names the round's drafter, the output is plain decoding's."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    view = LiveView(tgt, dft, [prompt], n_predict=24,
                    spec=SpecParams(n_max=4, types="draft-simple,ngram-simple", **NGRAM))
    run_checked(view)
    assert view.loop.chain.types == ["ngram-simple", "draft-simple"]
    by = {impl: chips_of(view, impl) for impl in view.loop.chain.types}
    assert by["ngram-simple"] and by["draft-simple"]
    assert all(c.is_ngram and not c.top for _, _, c in by["ngram-simple"])
    assert all(c.top and not c.is_ngram for _, _, c in by["draft-simple"])
    assert check_ngram_chips(view) == len(by["ngram-simple"])
    for ev, views in zip(view.events, view.slot_views):
        for r in ev.slots:
            sv = views[r.seq]
            assert sv.impl == ("" if r.replay else r.impl)
            assert {c.impl for c in sv.chips if c.is_draft and not r.replay} <= {r.impl}
    legend = view.w_legend.value
    assert re.findall(r'specnb-impl-key" data-impl="([a-z-]+)"', legend) == ["ngram-simple",
                                                                              "draft-simple"]
    assert "the first that drafts a sequence wins" in legend
    heads = [w[0].value for w in view._slots_w]
    assert any('specnb-round-impl" data-impl="' in h for h in heads)
    assert [t for t, _ in view.committed[0]] == plain(tgt, prompt, SamplerParams(temp=0.0), 24)
    # the history's HTML chips carry the impl too
    assert "specnb-impl-" in view.w_history.value or len(view.events) < 2


def test_detail_panel_shows_the_ngram(pair):
    """Selecting an n-gram chip shows the matched n-gram and where it was found; a draft-model
    chip shows the draft's candidates and who proposed it."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    view = LiveView(tgt, dft, [prompt], n_predict=24,
                    spec=SpecParams(n_max=4, types="ngram-simple,draft-simple", **NGRAM))
    seen = set()
    for _ in range(40):
        if view.step() is None:
            break
        for c in view.current_chips:
            if c.is_draft and c.impl not in seen:
                view.select(c.seq, c.index)
                d = view.w_detail.value
                assert f'specnb-drafted-by" data-impl="{c.impl}"' in d
                if c.impl == "ngram-simple":
                    assert "specnb-ngram" in d and f"position {c.match_pos}" in d
                    assert f"ids {' '.join(map(str, c.ngram))}" in d
                    assert "specnb-top" not in d
                else:
                    assert "specnb-ngram" not in d and "specnb-top" in d
                seen.add(c.impl)
    assert seen == {"ngram-simple", "draft-simple"}


def test_ngram_only_view_needs_no_draft_context(pair):
    """spec-type ngram-simple: no draft context is built (the draft strip says so), every draft
    chip is the lookup's, the output is plain decoding's; in rejection mode the detail panel
    explains the one-hot q."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    view = LiveView(tgt, dft, [prompt], n_predict=24, spec=SpecParams(n_max=4, types="ngram-simple", **NGRAM))
    run_checked(view)
    assert view.loop.ctx_dft is None
    assert "no draft context" in view._slots_w[0][3].value
    assert {c.impl for _, _, c in chips_of(view) if c.is_draft and c.state != "replayed"} == {"ngram-simple"}
    assert check_ngram_chips(view) > 0
    assert [t for t, _ in view.committed[0]] == plain(tgt, prompt, SamplerParams(temp=0.0), 24)
    view.set(verify="rejection", temp=1.0, top_k=5)
    for _ in range(40):
        if view.step() is None:
            break
        ng = [c for c in view.current_chips if c.is_ngram]
        if ng:
            view.select(ng[0].seq, ng[0].index)
            assert "deterministic draft (q is one-hot)" in view.w_detail.value
            break
    else:
        pytest.fail("no n-gram draft in rejection mode")


def test_spec_type_control(pair):
    """The spec-type control restarts the run with the chosen chain: ngram-cache (its chips name
    the cache), none (no drafts, the legend says so), a bad name (an error naming it)."""
    tgt, dft = pair
    prompt = repetitive_prompt(tgt, 3)
    view = LiveView(tgt, dft, [prompt], n_predict=16, spec=SpecParams(n_max=4, **NGRAM))
    assert view.loop.chain.types == ["draft-simple"] and "spec-type" in view.w_spec_type.description
    view.set(spec_type="ngram-cache")
    assert view.loop.chain.types == ["ngram-cache"] and view.loop.ctx_dft is None
    view.run_to_end()
    cache = [c for _, _, c in chips_of(view, "ngram-cache")]
    assert cache and all(c.is_ngram and c.match_pos == -1 and c.cache for c in cache)
    assert f"the {cache[0].cache} cache" in __import__("specnb.view.render", fromlist=["x"]).chip_title(cache[0])
    assert "ngram-cache" in view.w_status.value
    view.w_spec_type.value = "none"                 # as the control itself changes
    assert view.loop.chain.types == [] and not view.error
    view.run_to_end()
    assert all(not c.is_draft for _, _, c in chips_of(view))
    assert "no speculation" in view.w_legend.value
    assert [t for t, _ in view.committed[0]] == plain(tgt, prompt, SamplerParams(temp=0.0), 16)
    view.set(spec_type="ngram-simple,bogus")
    assert "bogus" in view.error and view.loop is None
    view.set(spec_type="ngram-map-k")
    assert not view.error and view.loop.chain.types == ["ngram-map-k"]
