"""The live view (specnb.view), checked by model state: chips, KV cells and counters against the
RoundEvents and llama.cpp's statistics; controls restart the run; bad settings show an error.
The tiny `pair` (conftest) has full acceptances, rejections at several positions and partial
acceptances."""
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("ipywidgets")

from specnb import ParamError  # noqa: E402
from specnb.run.context import Context  # noqa: E402
from specnb.run.generate import generate  # noqa: E402
from specnb.run.sampling import Sampler, SamplerParams  # noqa: E402
from specnb.speculation.params import SpecParams  # noqa: E402
from specnb.speculation.deferred import DeferredDraftSimple  # noqa: E402
from specnb.speculation.impl import impl_stats  # noqa: E402
from specnb.view import CHIP_STATES, KV_STATES, LiveView  # noqa: E402


PROMPT = "Once upon a time"
IMPL_MARKS = {"draft-simple": "◆", "ngram-simple": "#", "ngram-map-k": "#k", "ngram-cache": "#c"}


# ---- what the events say, computed independently of the view -------------------------------
def expected_chips(rec):
    """Chip states from the tokens (view.state.chip_states reads the round's counts): a draft
    token is kept while it equals the target's sample at its position (exact verification, and
    rejection sampling, whose replacement is never the rejected token); the first that differs is
    rejected, those after it unexamined; the target's last sample is the bonus after a draft kept
    whole, else the replacement."""
    d, kept = len(rec.draft), 0
    while kept < d and kept < len(rec.ids) and rec.draft[kept] == rec.ids[kept]:
        kept += 1
    return (["replayed" if rec.replay else "accepted"] * kept + ["rejected"] * (kept < d)
            + ["unexamined"] * max(d - kept - 1, 0) + ["bonus" if kept == d else "replaced"])


def expected_target_kv(rec):
    """Target cells: [0, n_past) committed; the verification rows [n_past, n_past + d] are
    kept up to the new n_past and rolled back after it (all of them when restored)."""
    n, d = rec.n_past, len(rec.draft)
    keep = 0 if rec.checkpoint == "restored" else len(rec.committed)
    return ["committed"] * n + ["written"] * keep + ["rolled-back"] * (d + 1 - keep)


def check_round(view, ev, exact: bool):
    views = view.slot_views[-1]
    assert sorted(views) == sorted(r.seq for r in ev.slots)
    for rec in ev.slots:
        sv = views[rec.seq]
        assert sv.n_past == rec.n_past and sv.id_last == rec.id_last
        assert view.chip_states[-1][rec.seq] == expected_chips(rec)
        assert all(s in CHIP_STATES for s in sv.chip_states)
        draft_chips = [c for c in sv.chips if c.is_draft]
        assert [c.token for c in draft_chips] == list(rec.draft)
        target_chip = [c for c in sv.chips if c.state in ("bonus", "replaced")]
        assert len(target_chip) == 1 and target_chip[0].token == rec.ids[-1]
        assert target_chip[0].target_token == rec.ids[-1]
        assert target_chip[0].pos == rec.n_past + len(rec.ids)     # the new id_last's position
        for i, c in enumerate(draft_chips):
            if c.state in ("accepted", "replayed"):
                assert c.target_token == rec.ids[i]
                if exact:
                    assert c.target_token == c.token
            elif c.state == "rejected":
                assert c.target_token == rec.ids[i]
                if exact:
                    assert c.target_token != c.token
            else:
                assert c.target_token is None
            if not rec.replay and hasattr(rec.draft_info[i], "top_ids"):
                # the draft model's candidates, most likely first: top-10-renormalized (exact)
                info = rec.draft_info[i]   # or the ten likeliest of q (rejection)
                assert [t for t, _, _ in c.top] == list(info.top_ids)
                assert [p for _, _, p in c.top] == pytest.approx(list(info.top_p))
                total = sum(p for _, _, p in c.top)
                assert total == pytest.approx(1.0, abs=1e-6) or len(c.top) < 10 or \
                    (not exact and total < 1.0 + 1e-6)
        kv = view.kv_cells[rec.seq]
        assert kv["target"] == expected_target_kv(rec)
        assert all(s in KV_STATES for s in kv["target"] + kv["draft"])
        # with draft re-evaluation (llama.cpp's default) the draft KV ends as the target's
        if view.loop.ctx_dft is None:
            assert kv["draft"] == []
        elif view.reeval and not isinstance(view.loop.chain.impl_of("draft-simple"), DeferredDraftSimple):
            assert kv["draft"] == kv["target"]     # (auto defers the draft's catch-up)


def check_counters(view):
    loop = view.loop
    stats = [impl_stats(impl) for impl in loop.chain.impls]
    c = view.counters
    assert c["rounds"] == loop.n_rounds == len(view.events)
    assert c["drafted"] == loop.n_drafted == sum(st["n_gen_tokens"] for st in stats)
    assert c["accepted"] == loop.n_accept == sum(st["n_acc_tokens"] for st in stats)
    if len(stats) == 1:
        assert c["acc_per_pos"] == stats[0]["acc_rate_per_pos"]
        assert c["mean_acc_len"] == stats[0]["mean_acc_len"]
    # per impl of the chain: what it drafted and how much of it was accepted
    assert list(c["by_impl"]) == loop.chain.types
    for st in stats:
        assert c["by_impl"][st["type"]] == {"drafted": st["n_gen_tokens"],
                                            "accepted": st["specnb_n_acc_tokens"]}
        assert f'data-counter="impl-{st["type"]}">{st["n_gen_tokens"]} / ' in view.w_counters.value
    n_committed = sum(len(r.committed) for ev in view.events for r in ev.slots)
    assert c["committed"] == n_committed
    assert c["tokens_per_call"] == pytest.approx(n_committed / len(view.events)) if view.events else True
    assert c["t_round_ms"] == pytest.approx(1e3 * view.events[-1].t_round) if view.events else True
    html = view.w_counters.value
    assert f'data-counter="rounds">{c["rounds"]}<' in html
    assert f'data-counter="drafted">{c["drafted"]}<' in html


def check_committed(view):
    for s, res in enumerate(view.loop.results()):
        assert [t for t, _ in view.committed[s]] == res.tokens[:len(view.committed[s])]
        assert [f for _, f in view.committed[s]] == res.accepted[:len(view.committed[s])]


def check_rendered(view):
    """The widgets show what the state says: chip buttons with their classes, KV cells."""
    chips = view.current_chips
    assert chips == [c for _, sv in sorted(view.latest_views().items()) for c in sv.chips]
    assert len(view._chip_buttons) == len(chips)
    for b, c in zip(view._chip_buttons, chips):
        assert f"specnb-chip-{c.state}" in b._dom_classes
        assert b.description.startswith({"accepted": "✓", "rejected": "✗", "unexamined": "·",
                                         "replaced": "→", "bonus": "★", "replayed": "↻",
                                         "p-min-stop": "✂"}[c.state])
        assert "draft top candidates" in b.tooltip or not c.top
        if c.is_draft and not c.state == "replayed":     # who proposed it, as the legend marks it
            assert c.impl in view.loop.chain.types
            assert f"specnb-impl-{c.impl}" in b._dom_classes
            assert b.description.endswith(" " + IMPL_MARKS[c.impl])
            assert "proposed by" in b.tooltip
    latest = view.latest_views()
    for s, (head, _chips, _text, kv) in enumerate(view._slots_w):
        if s not in latest:
            continue
        assert f'specnb-n-past">{latest[s].n_past}<' in head.value
        tgt_html, dft_html = kv.value.split('specnb-kv-strip specnb-kv-draft')
        for part, name in ((tgt_html, "target"), (dft_html, "draft")):
            cells = re.findall(r'class="specnb-kv-cell specnb-kv-([a-z-]+)" data-pos="(\d+)"', part)
            want = latest[s].kv[name]
            assert [st for st, _ in cells] == want[len(want) - len(cells):]
            assert [int(p) for _, p in cells] == list(range(len(want) - len(cells), len(want)))


def run_checked(view, exact=True, max_rounds=200):
    for _ in range(max_rounds):
        ev = view.step()
        if ev is None:
            break
        check_round(view, ev, exact)
        check_counters(view)
        check_committed(view)
        check_rendered(view)
    assert view.done
    assert not view.error
    res = view.loop.results()
    for s, r in enumerate(res):
        assert [t for t, _ in view.committed[s]] == r.tokens
        assert [f for _, f in view.committed[s]] == r.accepted
    return [st for views in view.chip_states for sts in views.values() for st in sts]


# ---- the modes --------------------------------------------------------------------------------
def test_exact_match_greedy(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4))
    assert view.counters["rounds"] == 0 and "ready" in view.w_status.value
    seen = run_checked(view)
    assert {"accepted", "rejected", "unexamined", "replaced", "bonus"} <= set(seen)
    assert "finished" in view.w_status.value
    assert view.step() is None       # finished: nothing more to do


def test_exact_match_sampled(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=3),
                    sampling=SamplerParams(temp=1.0, top_k=0, top_p=1.0, seed=3))
    seen = run_checked(view)
    assert "rejected" in seen and "accepted" in seen


def test_rejection_sampling(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4, verify="rejection"),
                    sampling=SamplerParams(temp=1.0, top_k=0, top_p=1.0, seed=3))
    seen = run_checked(view, exact=False)
    assert "accepted" in seen
    # the target's probability of every examined token is shown
    for views in view.slot_views:
        for sv in views.values():
            for c in sv.chips:
                if c.target_token is not None:
                    assert 0.0 < c.target_p <= 1.0
    assert "rejection" in view.w_status.value


def test_several_sequences(pair):
    tgt, dft = pair
    prompts = "Once upon a time\nthe cat\nhello world"
    view = LiveView(tgt, dft, prompts, n_predict=16, spec=SpecParams(n_max=3),
                    sampling=SamplerParams(temp=0.8, top_k=0, top_p=1.0, seed=5))
    assert len(view.prompts) == 3 and len(view._slots_w) == 3
    run_checked(view)
    # one target call per round serves every sequence
    assert view.loop.ctx_tgt.n_decode == 1 + len(view.events)
    assert set(view.committed) == {0, 1, 2}
    for s in range(3):
        assert len(view.committed[s]) == 16
    # seeds differ per sequence (seed + s)
    assert [sp.params.seed for sp in (sl.sampler for sl in view.loop.slots)] == [5, 6, 7]


def test_checkpoint_and_replay(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4), checkpoints=True)
    run_checked(view)
    recs = [(ev, r) for ev in view.events for r in ev.slots]
    restored = [i for i, (_, r) in enumerate(recs) if r.checkpoint == "restored"]
    assert restored, "this pair should have a partial acceptance"
    i = restored[0]
    _, r = recs[i]
    # the restored round commits nothing and rolls every verification row back
    sv = view.slot_views[i][r.seq]
    assert sv.committed == [] and set(sv.kv["target"][r.n_past:]) == {"rolled-back"}
    # the next round replays the approved tokens and takes a bonus token
    _, nxt = recs[i + 1]
    assert nxt.replay and nxt.draft == r.ids and nxt.n_past == r.n_past
    assert view.chip_states[i + 1][0] == ["replayed"] * len(r.ids) + ["bonus"]
    assert any(rr.checkpoint == "saved" for _, rr in recs)


def test_checkpoint_badges_rendered(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4), checkpoints=True)
    seen = set()
    for _ in range(40):
        ev = view.step()
        if ev is None:
            break
        head = view._slots_w[0][0].value
        r = ev.slot
        if r.checkpoint == "restored":
            assert "specnb-ckpt-restored" in head
            seen.add("restored")
        elif r.checkpoint == "saved":
            assert "specnb-ckpt-saved" in head
            seen.add("saved")
        if r.replay:
            assert "specnb-replay" in head
            seen.add("replay")
    assert seen == {"restored", "saved", "replay"}


def test_p_min_at_work(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4, p_min=0.5))
    run_checked(view)
    drafted = [c for views in view.slot_views for sv in views.values() for c in sv.chips if c.is_draft]
    assert drafted and all(c.draft_p >= 0.5 for c in drafted)
    assert any(len(ev.slot.draft) < 4 for ev in view.events)   # p_min cut some drafts short
    # the candidate that p_min stopped is shown, with its probability under p_min
    stops = [c for views in view.slot_views for sv in views.values() for c in sv.chips
             if c.state == "p-min-stop"]
    assert stops and all(c.draft_p < 0.5 for c in stops)
    for ev, views in zip(view.events, view.slot_views):
        sv = views[0]
        if any(c.state == "p-min-stop" for c in sv.chips):
            assert len(ev.slot.draft) < 4 and sv.chip_states == expected_chips(ev.slot)
    view.reset()
    for _ in range(30):
        view.step()
        if any(c.state == "p-min-stop" for c in view.current_chips):
            break
    stop = next(c for c in view.current_chips if c.state == "p-min-stop")
    assert view.select(0, stop.index, p_min_stop=True) is stop
    assert "drafting stopped here" in view.w_detail.value
    assert "specnb-chip-p-min-stop" in view._chip_buttons[-1]._dom_classes


def test_no_reeval_draft_strip(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=16, spec=SpecParams(n_max=4, reeval=False))
    run_checked(view)
    for ev, views in zip(view.events, view.slot_views):
        r = ev.slot
        kv = views[0].kv["draft"]
        assert kv[:r.n_past] == ["committed"] * r.n_past
        # the draft keeps its rows and catches up in its next seed batch (deferred.py): it lags
        # the target by its last draft token, which it drafted but never decoded, exactly when
        # the target accepted the whole draft
        lag = r.kv_tgt.after - r.kv_dft.after
        assert lag == (1 if r.draft and r.n_accepted == len(r.draft) else 0)
        assert kv.count("written") == len(r.committed) - lag


# ---- controls -----------------------------------------------------------------------------------
def test_controls_restart_the_run(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4))
    changes = [("w_draft_max", 2), ("w_draft_min", 1), ("w_p_min", 0.1), ("w_temp", 0.7),
               ("w_top_k", 20), ("w_top_p", 0.9), ("w_seed", 9), ("w_verify", "rejection"),
               ("w_checkpoints", True), ("w_n_predict", 12), ("w_prompt", "the cat\nhello")]
    for name, value in changes:
        view.step()
        view.step()
        assert view.counters["rounds"] == 2
        old = view.loop
        getattr(view, name).value = value
        assert view.loop is not old and not view.error, (name, view.error)
        assert view.events == [] and view.counters["rounds"] == 0 and view.chip_states == []
        assert "ready" in view.w_status.value
        assert view._chip_buttons == []
    p = view.loop.params
    assert (p.n_max, p.n_min, p.p_min, p.verify) == (2, 1, 0.1, "rejection")
    assert not view.loop.ctx_tgt.partial_seq_rm and view.loop.n_predict == 12
    sp = view.loop.slots[0].sampler.params
    assert (sp.temp, sp.top_k, sp.top_p, sp.seed) == (0.7, 20, 0.9, 9)
    assert len(view.loop.slots) == 2
    # the buttons: reset restarts; step steps
    view.b_step.click()
    view.b_step.click()
    assert view.counters["rounds"] == 2
    view.b_reset.click()
    assert view.counters["rounds"] == 0
    # set() changes several settings with one restart
    view.set(draft_max=3, temp=0.0, verify="exact", checkpoints=False, prompt=PROMPT)
    assert view.loop.params.n_max == 3 and len(view.loop.slots) == 1


def test_spec_and_sampling_params(pair):
    """`spec` and `sampling` give the controls' initial values; their other fields (min_p,
    reeval, ...) reach the loop and survive a restart; other types are refused."""
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=8,
                    spec=SpecParams(n_max=5, p_min=0.2, types="ngram-simple", reeval=False),
                    sampling=SamplerParams(temp=0.7, top_k=20, min_p=0.1, seed=9))
    s = view.settings
    assert (s["draft_max"], s["p_min"], s["spec_type"]) == (5, 0.2, "ngram-simple")
    assert (s["temp"], s["top_k"], s["top_p"], s["seed"]) == (0.7, 20, 0.95, 9)
    assert (view.w_draft_max.value, view.w_p_min.value, view.w_spec_type.value) == (5, 0.2, "ngram-simple")
    assert (view.w_temp.value, view.w_top_k.value, view.w_seed.value) == (0.7, 20, 9)
    assert not view.error, view.error
    p, sp = view.loop.params, view.loop.slots[0].sampler.params
    assert (p.n_max, p.p_min, p.reeval) == (5, 0.2, False) and view.loop.chain.types == ["ngram-simple"]
    assert (sp.temp, sp.top_k, sp.min_p, sp.seed) == (0.7, 20, 0.1, 9)
    view.set(top_k=10)                       # a restart keeps the fields without a control
    sp = view.loop.slots[0].sampler.params
    assert (sp.top_k, sp.min_p) == (10, 0.1) and view.loop.params.reeval is False
    # without them: LiveView's defaults (greedy, seed 1) and SamplerParams' other ones
    view = LiveView(tgt, dft, PROMPT, n_predict=8)
    assert {k: view.settings[k] for k in ("draft_max", "spec_type", "temp", "top_k", "top_p", "seed")} == \
        dict(draft_max=3, spec_type="draft-simple", temp=0.0, top_k=40, top_p=0.95, seed=1)
    assert view.loop.slots[0].sampler.params.min_p == SamplerParams().min_p
    with pytest.raises(ParamError, match=r"spec=.*got dict"):
        LiveView(tgt, dft, PROMPT, spec=dict(n_max=5))
    with pytest.raises(ParamError, match=r"sampling=.*got SpecParams"):
        LiveView(tgt, dft, PROMPT, sampling=SpecParams())
    with pytest.raises(TypeError, match="draft_max"):
        LiveView(tgt, dft, PROMPT, draft_max=4)


def test_bad_settings_show_an_error(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=8, spec=SpecParams(n_max=3))
    view.step()
    view.w_draft_min.value = -2              # raises ParamError inside: shown, not raised
    assert "draft_min" in view.error and "-2" in view.error
    assert "specnb-error" in view.w_error.value and "draft_min" in view.w_error.value
    assert view.loop is None and view.step() is None
    view.b_step.click()                      # the buttons do nothing harmful
    view.b_play.click()
    view.b_run.click()
    assert view.counters["rounds"] == 0
    view.w_draft_min.value = 0               # fixed: the error goes away
    assert view.error == "" and view.w_error.value == "" and view.loop is not None
    for name, value, word in [("w_draft_min", -1, "draft_min"), ("w_top_p", float("nan"), "top_p"),
                              ("w_temp", float("nan"), "temp"), ("w_n_predict", 0, "n_predict"),
                              ("w_prompt", "   ", "prompt"), ("w_prompt", "ids: 1 99999", "token ids")]:
        getattr(view, name).value = value
        assert word in view.error, (name, view.error)
        assert view.loop is None and view.w_slots.children == () or name != "w_prompt"
        getattr(view, name).value = {"w_draft_min": 0, "w_top_p": 0.95, "w_temp": 0.0,
                                     "w_n_predict": 8, "w_prompt": PROMPT}[name]
        assert view.error == ""
    with pytest.raises(Exception, match="unknown live-view setting"):
        view.set(colour="red")


def test_token_id_prompts(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, [[5, 9, 14], [20, 21]], n_predict=6)
    assert view.w_prompt.value == "ids: 5 9 14\nids: 20 21"
    assert view.prompts == [[5, 9, 14], [20, 21]]
    run_checked(view)


def test_play_pause_and_run_to_end(pair):
    tgt, dft = pair
    # (f32: in that mode this pair's greedy text runs the full 40 tokens without an end token)
    view = LiveView(tgt, dft, PROMPT, n_predict=40, spec=SpecParams(n_max=2), speed=20.0, activations="f32")
    view.b_play.click()
    assert view.playing and "pause" in view.b_play.description
    deadline = time.time() + 300             # f32 kernels may still be compiling on a cold cache
    while view.counters["rounds"] < 2 and time.time() < deadline:
        time.sleep(0.05)
    view.b_play.click()                      # pause
    assert not view.playing and "play" in view.b_play.description
    n = view.counters["rounds"]
    assert n >= 2
    time.sleep(0.3)
    assert view.counters["rounds"] == n      # paused: nothing moves
    check_counters(view)
    view.b_run.click()                       # run to the end, in the background
    assert view.wait(120)
    assert view.done and not view.error
    check_counters(view)
    check_committed(view)
    assert len(view.committed[0]) == 40
    # a setting changed while playing stops the player and restarts
    view.w_draft_max.value = 3
    view.play()
    view.w_temp.value = 0.5
    assert not view.playing and view.counters["rounds"] == 0


def test_detail_panel(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4, p_min=0.05))
    for _ in range(30):
        view.step()
        if "rejected" in view.chip_states[-1][0]:
            break
    chips = view.current_chips
    rej = next(c for c in chips if c.state == "rejected")
    # a rejected chip is selected by default; its panel shows both models' view
    assert view.selected is rej
    d = view.w_detail.value
    assert "rejected" in d and f"id {rej.token}" in d
    assert f"{rej.top[0][2]:.3f}" in d                         # the draft's top candidate p
    assert f"id {rej.target_token}" in d and f"{rej.target_p:.3f}" in d
    assert "p_min = 0.05" in d
    # clicking a chip selects it
    i_acc = next(i for i, c in enumerate(chips) if c.state == "accepted")
    view._chip_buttons[i_acc].click()
    assert view.selected is chips[i_acc]
    assert "accepted" in view.w_detail.value
    # and the list does too
    un = next((c for c in chips if c.state == "unexamined"), None)
    if un is not None:
        view.select(un.seq, un.index)
        assert "did not examine" in view.w_detail.value
    tgt_chip = chips[-1]
    view.select(0, tgt_chip.index)
    assert "target sampled" in view.w_detail.value
    # hover text: the chip's tooltip lists the candidates and the target's sample
    tip = view._chip_buttons[0].tooltip
    assert "draft top candidates" in tip and "target sampled" in tip


def test_history_and_text(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4), history=3)
    for _ in range(5):
        view.step()
    h = view.w_history.value
    assert h.count("specnb-history-row") == 3          # the 3 rounds before the latest
    assert "round 3" in h and "round 0" not in h
    text = view._slots_w[0][2].value
    n_draft = sum(f for _, f in view.committed[0])
    assert text.count("specnb-tok-draft") == n_draft
    assert text.count("specnb-tok-target") == len(view.committed[0]) - n_draft
    assert 'class="specnb-prompt"' in text


def test_display_bundle(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=4)
    b = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in b
    view.step()
    buttons = list(view._chip_buttons)
    view.close()
    assert view.widget.comm is None and all(b.comm is None for b in buttons)


# ---- how the contexts are built -----------------------------------------------------------------
def _plain(model, prompt, n, activations=None):
    ctx = Context(model, n_ctx=128, activations=activations)
    return generate(ctx, Sampler(SamplerParams(temp=0.0, seed=1)), prompt, n).tokens


@pytest.mark.parametrize("activations", ["f32", "q8"])
def test_activations_are_honoured(pair, activations):
    """Both contexts compute with the activation mode given; the committed text is plain
    decoding's in that mode (the two modes give different text on this pair)."""
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4), activations=activations)
    assert (view.loop.ctx_tgt.activations, view.loop.ctx_dft.activations) == (activations,) * 2
    run_checked(view)
    tokens = [t for t, _ in view.committed[0]]
    other = {"f32": "q8", "q8": "f32"}[activations]
    assert tokens == _plain(tgt, view.prompts[0], 24, activations)
    assert tokens != _plain(tgt, view.prompts[0], 24, other)
    view.w_temp.value = 0.5                  # a restart keeps the mode
    assert view.loop.ctx_dft.activations == activations


def test_backend_is_honoured(pair):
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=4)
    assert view.loop.ctx_tgt.backend_name == view.loop.ctx_dft.backend_name == "cpu"
    with pytest.raises(ParamError, match="backend"):
        LiveView(tgt, dft, PROMPT, backend="tpu")
    with pytest.raises(ParamError, match="activations"):
        LiveView(tgt, dft, PROMPT, activations="int4")
    from numba import cuda
    if cuda.is_available():
        view = LiveView(tgt, dft, PROMPT, n_predict=12, spec=SpecParams(n_max=3), backend="cuda")
        assert view.loop.ctx_tgt.backend_name == view.loop.ctx_dft.backend_name == "cuda"
        run_checked(view)
    else:                                    # asked for, not silently replaced by the CPU
        view = LiveView(tgt, dft, PROMPT, n_predict=4, backend="cuda")
        assert view.loop is None and "backend='cuda'" in view.error
        assert "specnb-error" in view.w_error.value


def test_draft_checkpoints_control(pair):
    """The draft-memory setting reaches the draft context (and only it), as a control and
    through set(); the status line names it."""
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=8, spec=SpecParams(n_max=3))
    assert view.loop.ctx_dft.partial_seq_rm and view.loop.ctx_tgt.partial_seq_rm
    assert "draft checkpoints" not in view.w_status.value
    old = view.loop
    view.w_draft_checkpoints.value = True
    assert view.loop is not old and view.settings["draft_checkpoints"] is True
    assert not view.loop.ctx_dft.partial_seq_rm and view.loop.ctx_tgt.partial_seq_rm
    assert "exact, draft checkpoints" in view.w_status.value
    view.set(draft_checkpoints=False, checkpoints=True)
    assert view.loop.ctx_dft.partial_seq_rm and not view.loop.ctx_tgt.partial_seq_rm
    view = LiveView(tgt, dft, PROMPT, n_predict=8, checkpoints=True, draft_checkpoints=True)
    assert not view.loop.ctx_dft.partial_seq_rm and not view.loop.ctx_tgt.partial_seq_rm
    assert "exact, checkpoints, draft checkpoints" in view.w_status.value
    assert view.w_draft_checkpoints in view.controls


@pytest.mark.parametrize("checkpoints", [False, True])
def test_draft_checkpoints_run(pair, checkpoints):
    """A draft memory that refuses partial removal (DraftSimple's ckpt.update_dft / load_dft),
    with either target memory: plain decoding's tokens."""
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4), checkpoints=checkpoints,
                    draft_checkpoints=True)
    view.run_to_end()
    assert view.done and not view.error, view.error
    assert [t for t, _ in view.committed[0]] == _plain(tgt, view.prompts[0], 24)


def test_slot_view_without_candidates(pair):
    """A drafting impl whose per-token info has no candidate list (only .token) still gives
    chips: the draft side is empty, the target side and the states are unchanged."""
    from dataclasses import replace
    from types import SimpleNamespace

    from specnb.view import slot_view
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4))
    for _ in range(30):
        ev = view.step()
        if ev is None or "rejected" in view.chip_states[-1][0]:
            break
    rec = ev.slot
    bare = replace(rec, draft_info=[SimpleNamespace(token=t) for t in rec.draft])
    full, sv = slot_view(rec, ev.round, tgt.vocab), slot_view(bare, ev.round, tgt.vocab)
    assert sv.chip_states == full.chip_states == expected_chips(rec)
    assert all(c.top == [] for c in sv.chips) and any(c.top for c in full.chips)
    assert [c.target_token for c in sv.chips] == [c.target_token for c in full.chips]


def test_view_does_not_import_the_figures():
    """The view's counters come from specnb.measure.stats: importing it loads neither specnb.figures.runs
    nor plotly."""
    code = ("import sys, specnb.view; "
            "print(sorted(m for m in sys.modules if m == 'specnb.figures.runs' or m.startswith('plotly')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exact", "rejection", "checkpoints", "two-sequences"])
def test_default_pair(default_model, default_draft_model, mode):
    kw = dict(n_predict=12, spec=SpecParams(n_max=4))
    prompt = "The capital of France is"
    if mode == "rejection":       # a seed whose draws accept some tokens
        kw.update(spec=SpecParams(n_max=4, verify="rejection"), sampling=SamplerParams(temp=0.8, seed=2))
    if mode == "checkpoints":
        kw.update(checkpoints=True)
    if mode == "two-sequences":
        prompt = "The capital of France is\ndef fibonacci(n):"
        kw.update(n_predict=8)
    view = LiveView(default_model, default_draft_model, prompt, **kw)
    seen = run_checked(view, exact=mode != "rejection")
    assert "accepted" in seen


@pytest.mark.parametrize("schedule", ["auto", "heuristic"])
def test_draft_schedule_shows_the_chosen_length(pair, schedule):
    """--draft-max auto / heuristic in the view: each round's header says the chosen length (and,
    for auto, the expected gain behind it); the counters how often each length was chosen."""
    tgt, dft = pair
    view = LiveView(tgt, dft, PROMPT, n_predict=24, spec=SpecParams(n_max=4, schedule=schedule))
    assert view.loop.params.schedule == schedule
    heads = []
    for _ in range(200):
        ev = view.step()
        if ev is None:
            break
        check_round(view, ev, True)
        check_committed(view)
        heads.append(view._slots_w[0][0].value)
        if not ev.slot.replay:
            assert f'class="specnb-draft-len" data-d="{ev.slot.draft_len.d}"' in heads[-1]
    chosen = view.counters["draft_len_chosen"]
    assert sum(chosen.values()) == len(view.events)
    assert 'data-counter="draft_len_chosen"' in view.w_counters.value
    if schedule == "auto":
        assert any("x plain" in h for h in heads), "the expected gain is shown"
        assert 0 in chosen
    view.set(draft_schedule="fixed")
    assert view.loop.params.schedule == "fixed"
