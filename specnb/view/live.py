"""`LiveView`: the controls, the run and the rendered state, assembled from ipywidgets.

The view owns a `SpeculativeLoop` built from its settings (the pair's contexts come from
`specnb.run.pair.open_pair`), hands each RoundEvent to its `RunState` and redraws from that state.
Changing a control restarts the run from the prompt.
"""
from __future__ import annotations

import threading

import ipywidgets as W

from ..run.context import ACTIVATIONS, BACKENDS
from ..errors import ParamError, SpecnbError, check_param
from ..speculation.draft_len import SCHEDULES
from ..speculation.verify import VERIFY_MODES
from ..speculation.loop import SpeculativeLoop
from ..speculation.params import SpecParams
from ..run.sampling import SamplerParams
from ..run.pair import open_pair
from . import settings as S
from .player import JOIN_TIMEOUT_S, Player
from .render import (CHIP_STYLE, KV_LEGEND, MARK, chip_border, chip_title, committed_html, counters_html,
    detail_html, error_html, history_html, impl_legend_html, impl_mark, kv_strips_html, no_round_header_html,
    slot_header_html, status_html, visible)
from .state import Chip, RunState

MIN_SPEED = 0.01              # rounds per second: the slowest the player steps
MAX_ROUNDS = 100000           # run_to_end(block=True) stops after this many rounds


class LiveView:
    """An ipywidgets view of a SpeculativeLoop, updated from its RoundEvents.

    target, draft: loaded Models (`specnb.model.load_model`). prompt: text (one sequence per
    non-empty line; a line "ids: 1 2 3" gives token ids), a list of texts, a list of token ids
    or a list of such lists. `spec` (SpecParams) gives the initial draft-max (n_max), draft-min,
    p-min, verify, spec-type (types; None: draft-simple), ngram-size-n / -m and schedule; its
    other fields (reeval, synth_rates / synth_len: synthetic acceptance, ...) go to the loop as
    given. `sampling` (SamplerParams) gives the initial temp, top-k, top-p and seed (sequence i
    samples with seed + i); its other fields (min_p, ...) go to the loop as given. Without them:
    draft-max 3, greedy (temp 0), top-k 40, top-p 0.95, seed 1 and SamplerParams' other defaults.
    Every initial setting is also a control, and changing a control restarts the run from the
    prompt. `checkpoints=True` makes the target memory refuse partial removal (the checkpoint
    and replay path); `draft_checkpoints=True` the draft memory. `n_ctx=None` sizes the contexts
    to the prompt, n_predict and draft-max. `backend` ("cpu", "cuda", "auto") and `activations`
    ("q8", the CPU default; "f32", the exact reference path; None: the backend's default) choose
    how both contexts compute; `n_threads` goes to them. `speed` is the play speed in rounds per
    second; `history` how many earlier rounds are listed under the current one.
    """

    def __init__(self, target, draft, prompt="The capital of France is", *,
                 spec: SpecParams | None = None, sampling: SamplerParams | None = None,
                 n_predict: int = 32, checkpoints: bool = False, draft_checkpoints: bool = False,
                 n_ctx: int | None = None, n_threads: int | None = None, backend: str = "cpu",
                 activations: str | None = None, speed: float = 2.0, history: int = 8):
        for name, value, cls in (("spec", spec, SpecParams), ("sampling", sampling, SamplerParams)):
            if value is not None and not isinstance(value, cls):
                raise ParamError(f"invalid {name}={value!r}: expected a {cls.__name__} or None, "
                                 f"got {type(value).__name__}")
        check_param(backend in BACKENDS, "backend", backend, "one of " + ", ".join(BACKENDS))
        check_param(activations is None or activations in ACTIVATIONS, "activations", activations,
                    "one of " + ", ".join(ACTIVATIONS) + " or None (the backend's default)")
        spec = spec if spec is not None else SpecParams()
        init = S.initial_settings(spec, sampling)
        self.target, self.draft = target, draft
        self.vocab = target.vocab
        self.n_ctx_opt, self.n_threads = n_ctx, n_threads
        self.backend, self.activations = backend, activations
        self.spec_extra = S.spec_extra(spec)              # SpecParams fields without a control
        self.sampler_extra = S.sampler_extra(sampling)    # SamplerParams fields without a control
        self.reeval = bool(spec.reeval)
        self.synth_rates, self.synth_len = spec.synth_rates, spec.synth_len
        self.history = int(history)
        self._lock = threading.RLock()
        self._suspend = False
        self.loop: SpeculativeLoop | None = None
        self.run = RunState(self.vocab)
        self.prompts: list = []
        self.error = ""
        self.selected: Chip | None = None
        self._build_widgets(prompt, n_predict, init["draft_max"], init["draft_min"], init["p_min"],
                            init["temp"], init["top_k"], init["top_p"], init["seed"], init["verify"],
                            checkpoints, draft_checkpoints, speed, init["spec_type"],
                            init["ngram_size_n"], init["ngram_size_m"], init["draft_schedule"])
        self._player = Player(self._lock, lambda: self._advance() is not None, self._render,
                              self._set_error, self._show_playing)
        self.restart()

    # ---- widgets ------------------------------------------------------------------------
    def _build_widgets(self, prompt, n_predict, draft_max, draft_min, p_min, temp, top_k, top_p,
                       seed, verify, checkpoints, draft_checkpoints, speed,
                       spec_type, ngram_size_n, ngram_size_m, draft_schedule="fixed") -> None:
        lay = lambda w: W.Layout(width=w)  # noqa: E731
        style = {"description_width": "initial"}
        self.w_prompt = W.Textarea(value=S.prompt_text(prompt), description="prompt",
                                   continuous_update=False, rows=2, layout=lay("98%"),
                                   placeholder="one sequence per line")
        self.w_n_predict = W.IntText(value=n_predict, description="n_predict", style=style, layout=lay("150px"))
        self.w_draft_max = W.IntText(value=draft_max, description="draft-max", style=style, layout=lay("140px"))
        self.w_draft_schedule = W.Dropdown(options=list(SCHEDULES), value=draft_schedule,
                                           description="schedule", style=style, layout=lay("170px"),
                                           tooltip="fixed: every draft cut to draft-max (llama.cpp); "
                                                   "auto: each round's length 0..draft-max from measured "
                                                   "costs; heuristic: transformers' +2/-1 schedule")
        self.w_draft_min = W.IntText(value=draft_min, description="draft-min", style=style, layout=lay("140px"))
        self.w_p_min = W.FloatText(value=p_min, step=0.05, description="p-min", style=style, layout=lay("140px"))
        self.w_temp = W.FloatText(value=temp, step=0.1, description="temperature", style=style, layout=lay("170px"))
        self.w_top_k = W.IntText(value=top_k, description="top-k", style=style, layout=lay("120px"))
        self.w_top_p = W.FloatText(value=top_p, step=0.05, description="top-p", style=style, layout=lay("130px"))
        self.w_seed = W.IntText(value=seed, description="seed", style=style, layout=lay("150px"))
        self.w_verify = W.Dropdown(options=list(VERIFY_MODES), value=verify, description="verify",
                                   style=style, layout=lay("190px"))
        self.w_checkpoints = W.Checkbox(value=bool(checkpoints), indent=False, layout=lay("auto"),
                                        description="checkpoints (target memory cannot drop part of a sequence)")
        self.w_draft_checkpoints = W.Checkbox(value=bool(draft_checkpoints), indent=False,
                                              layout=lay("auto"),
                                              description="draft memory cannot drop part of a sequence")
        self.w_spec_type = W.Combobox(value=spec_type, options=list(S.SPEC_TYPE_CHOICES),
                                      ensure_option=False, continuous_update=False,
                                      description="spec-type", style=style, layout=lay("330px"),
                                      placeholder="comma-separated, as --spec-type")
        self.w_ngram_n = W.IntText(value=ngram_size_n, description="ngram-size-n", style=style,
                                   layout=lay("160px"))
        self.w_ngram_m = W.IntText(value=ngram_size_m, description="ngram-size-m", style=style,
                                   layout=lay("160px"))
        # setting name -> control (set(), settings and the restart on change read this)
        self._controls = {"prompt": self.w_prompt, "n_predict": self.w_n_predict,
                          "draft_max": self.w_draft_max, "draft_schedule": self.w_draft_schedule,
                          "draft_min": self.w_draft_min,
                          "p_min": self.w_p_min, "temp": self.w_temp, "top_k": self.w_top_k,
                          "top_p": self.w_top_p, "seed": self.w_seed, "verify": self.w_verify,
                          "checkpoints": self.w_checkpoints,
                          "draft_checkpoints": self.w_draft_checkpoints,
                          "spec_type": self.w_spec_type, "ngram_size_n": self.w_ngram_n,
                          "ngram_size_m": self.w_ngram_m}
        self.controls = list(self._controls.values())
        for w in self.controls:
            w.observe(self._on_setting, names="value")

        def button(desc, cls, tip, cb, width="110px"):
            b = W.Button(description=desc, tooltip=tip, layout=lay(width))
            b.add_class(cls)
            b.on_click(lambda _b: self._guard(cb))
            return b
        self.b_step = button("▸ step", "specnb-btn-step", "run one round", self.step)
        self.b_play = button("▶ play", "specnb-btn-play", "play / pause", self.toggle_play)
        self.b_run = button("▶▶ run to end", "specnb-btn-run", "run every remaining round",
                            lambda: self.run_to_end(block=False), "130px")
        self.b_reset = button("⟲ reset", "specnb-btn-reset", "restart from the prompt", self.reset)
        self.w_speed = W.FloatSlider(value=speed, min=0.25, max=20.0, step=0.25,
                                     description="rounds/s", style=style, layout=lay("260px"))
        self.w_status = W.HTML()
        self.w_error = W.HTML()
        self.w_error.add_class("specnb-error-box")
        self.w_slots = W.VBox([])
        self.w_counters = W.HTML()
        self.w_counters.add_class("specnb-counters-box")
        self.w_detail_pick = W.Dropdown(options=[("—", None)], value=None, description="detail",
                                        style=style, layout=lay("420px"))
        self.w_detail_pick.observe(self._on_pick, names="value")
        self.w_detail = W.HTML()
        self.w_history = W.HTML()
        self.w_legend = W.HTML()
        title = W.HTML('<div style="font-size:15px;font-weight:bold">specnb live view: '
                       'speculative decoding round by round</div>')
        row = lambda *ws: W.HBox(list(ws), layout=W.Layout(flex_flow="row wrap", align_items="center"))  # noqa: E731
        settings = W.VBox([
            self.w_prompt,
            row(self.w_spec_type, self.w_ngram_n, self.w_ngram_m),
            row(self.w_draft_max, self.w_draft_schedule, self.w_draft_min, self.w_p_min,
                self.w_n_predict),
            row(self.w_temp, self.w_top_k, self.w_top_p, self.w_seed),
            row(self.w_verify, self.w_checkpoints, self.w_draft_checkpoints)])
        buttons = row(self.b_step, self.b_play, self.w_speed, self.b_run, self.b_reset)
        main = W.HBox([W.VBox([self.w_legend, self.w_slots], layout=W.Layout(flex="1 1 auto", min_width="360px")),
                       W.VBox([self.w_counters], layout=W.Layout(flex="0 0 270px", margin="0 0 0 10px"))],
                      layout=W.Layout(align_items="flex-start"))
        self.widget = W.VBox([title, settings, buttons, self.w_status, self.w_error, main,
                              W.VBox([self.w_detail_pick, self.w_detail]), self.w_history],
                             layout=W.Layout(border="1px solid #cfd8dc", padding="6px"))
        self.widget.add_class("specnb-live-view")
        self._chip_buttons: list = []
        self._slots_w: list = []
        self._rendered_rounds = -1

    def _repr_mimebundle_(self, **kw):
        """The widget, plus a PNG of what it shows when static pictures are on (view/static.py),
        for viewers that cannot run widgets."""
        bundle = self.widget._repr_mimebundle_(**kw)
        from ..figures import snapshot
        if snapshot.static_enabled():
            from .static import snapshot_png
            bundle = {**snapshot.png_bundle(snapshot_png(self)), **bundle}
        return bundle

    def _ipython_display_(self):
        from IPython.display import display
        display(self._repr_mimebundle_(), raw=True)     # the widget, and its picture when asked for

    # ---- settings ----------------------------------------------------------------------------
    @property
    def settings(self) -> dict:
        return {k: w.value for k, w in self._controls.items()}

    def set(self, **kw) -> None:
        """Change settings as the controls would (one restart for all of them)."""
        ws = dict(self._controls, speed=self.w_speed)
        unknown = set(kw) - set(ws)
        if unknown:
            raise ParamError(f"unknown live-view setting(s): {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(ws)}")
        self._suspend = True
        try:
            for k, v in kw.items():
                ws[k].value = S.prompt_text(v) if k == "prompt" else v
        finally:
            self._suspend = False
        if set(kw) - {"speed"}:
            self._guard(self.restart)

    def _on_setting(self, change) -> None:
        if not self._suspend:
            self._guard(self.restart)

    def _guard(self, fn) -> None:
        """Run a callback; show any error in the view instead of raising it."""
        try:
            fn()
        except SpecnbError as e:
            self._set_error(str(e))
        except Exception as e:       # a bug, still shown rather than lost in the kernel log
            self._set_error(f"{type(e).__name__}: {e}")

    def _set_error(self, msg: str) -> None:
        self.error = msg
        self.w_error.value = error_html(msg)
        self._render_status()

    # ---- running ------------------------------------------------------------------------
    def _build_loop(self) -> SpeculativeLoop:
        s = self.settings
        prompts = S.parse_prompts(s["prompt"], self.vocab, self.target.n_vocab)
        self.prompts = prompts
        n = len(prompts)
        sps = S.sampler_params(s, n, self.sampler_extra)
        spec = S.spec_params(s, self.spec_extra)
        n_ctx = S.context_size(prompts, s["n_predict"], s["draft_max"], self.n_ctx_opt)
        needs_draft = spec.needs_draft_model()
        pair = open_pair(self.target, self.draft if needs_draft else False, n_ctx=n_ctx, n_seq=n, backend=self.backend,
                         n_threads=self.n_threads, activations=self.activations,
                         tgt_seq_rm=not s["checkpoints"], dft_seq_rm=not s["draft_checkpoints"])
        return SpeculativeLoop(pair.ctx_tgt, pair.ctx_dft, prompts, s["n_predict"], sps, spec,
                               draft_seed=int(s["seed"]))

    def restart(self) -> None:
        """Stop playing and start over from the prompt with the current settings."""
        self.pause()
        with self._lock:
            self.loop, self.run = None, RunState(self.vocab)
            self.selected = None
            self.error = ""
            self.w_error.value = ""
            self.prompts = []
            try:
                self.loop = self._build_loop()
                self.run = RunState(self.vocab, len(self.prompts), self.loop.params.verify,
                                    int(self.loop.params.n_max), self.loop.chain.types,
                                    self.loop.ctx_dft is not None)
            except SpecnbError as e:
                self.error = str(e)
                self.w_error.value = error_html(self.error)
            self._render()

    reset = restart

    def _advance(self):
        """One round into the state (lock held); its RoundEvent, or None when none ran."""
        if self.loop is None or self.run.done:
            return None
        try:
            ev = self.loop.step()
        except SpecnbError as e:
            self._set_error(str(e))
            self.run.done = True
            return None
        self.run.apply(ev)
        return ev

    def step(self):
        """Run one round; returns its RoundEvent (None when finished or not runnable)."""
        with self._lock:
            ev = self._advance()
            if ev is not None:
                self._render()
            return ev

    def run_to_end(self, block: bool = True, max_rounds: int = MAX_ROUNDS) -> None:
        """Run every remaining round: here (block=True) or in the background (block=False)."""
        if block:
            self.pause()
            for _ in range(max_rounds):
                if self.step() is None:
                    break
            return
        self._start_player(None)

    def play(self) -> None:
        """Step in the background at `speed` rounds per second until paused or finished."""
        self._start_player(lambda: 1.0 / max(float(self.w_speed.value), MIN_SPEED))

    def toggle_play(self) -> None:
        if self.playing:
            self.pause()
        else:
            self.play()

    @property
    def playing(self) -> bool:
        return self._player.running

    def _start_player(self, interval) -> None:
        self.pause()
        if self.loop is None or self.run.done:
            return
        self._player.start(interval)

    def _show_playing(self, playing: bool) -> None:
        self.b_play.description = "❚❚ pause" if playing else "▶ play"

    def pause(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Stop the background player (waits for the round in progress)."""
        self._player.stop(timeout)

    def wait(self, timeout: float = JOIN_TIMEOUT_S) -> bool:
        """Wait for a background run to finish; True when it has."""
        return self._player.wait(timeout)

    def close(self) -> None:
        """Stop playing and close every widget of the view."""
        self.pause()

        def close_tree(w):
            for c in getattr(w, "children", ()):
                close_tree(c)
            w.close()
        for b in self._chip_buttons:
            b.close()
        close_tree(self.widget)

    # ---- the state the view shows (view/state.py: RunState) -----------------------------------
    @property
    def events(self) -> list:
        return self.run.events

    @property
    def slot_views(self) -> list:
        """Per round: {seq: SlotView}."""
        return self.run.slot_views

    @property
    def committed(self) -> dict:
        """seq -> [(token, from_draft)] committed so far."""
        return self.run.committed

    @property
    def done(self) -> bool:
        return self.run.done

    @property
    def chip_states(self) -> list:
        """Per round: {seq: [chip state per draft token..., the target's token]}."""
        return self.run.chip_states

    def latest_views(self) -> dict:
        """{seq: SlotView} of each sequence's latest round (a finished one keeps its last)."""
        return self.run.latest_views()

    @property
    def kv_cells(self) -> dict:
        """Each sequence's latest round: {seq: {"target": [state per position], "draft": [...]}}."""
        return self.run.kv_cells

    @property
    def counters(self) -> dict:
        return self.run.counters

    @property
    def current_chips(self) -> list:
        """The chips on show: each sequence's latest round."""
        return self.run.current_chips

    def select(self, seq: int = 0, index: int = 0, p_min_stop: bool = False) -> Chip:
        """Show one chip of the latest round in the detail panel (index: its place in the row;
        p_min_stop=True: the draft candidate p_min stopped, which shares the target's index)."""
        c = self.run.chip((seq, index, bool(p_min_stop)))
        if c is None:
            raise ParamError(f"no chip {index} for sequence {seq} in the latest round")
        self.w_detail_pick.value = c.key
        return c

    def _on_pick(self, change) -> None:
        key = change["new"]
        self.selected = None if key is None else self.run.chip(key)
        self.w_detail.value = detail_html(self.selected, self._p_min, self.run.verify)

    # ---- rendering ------------------------------------------------------------------------
    @property
    def _p_min(self) -> float:
        return float(self.loop.params.p_min) if self.loop is not None else 0.0

    def _render_status(self) -> None:
        if self.loop is None:
            st = "not running (fix the settings above)"
        elif self.run.done:
            st = f"finished after {len(self.run.events)} rounds ({', '.join(self.run.stop_reasons) or 'done'})"
        elif not self.run.events:
            st = "ready: press step or play"
        else:
            st = f"round {len(self.run.events) - 1} done"
        s = self.settings
        mode = f'{s["spec_type"]}, {s["verify"]}' + (", checkpoints" if s["checkpoints"] else "") \
            + (", draft checkpoints" if s["draft_checkpoints"] else "")
        self.w_status.value = status_html(st, len(self.prompts), mode)

    def _slot_widgets(self) -> list:
        """Per sequence: header, chip row, committed text, KV strips (made once per run)."""
        n = len(self.prompts)
        if len(self._slots_w) != n:
            for ws in self._slots_w:
                for w in ws:
                    w.close()
            self._slots_w = [[W.HTML(), W.HBox([], layout=W.Layout(flex_flow="row wrap")), W.HTML(),
                              W.HTML()] for _ in range(n)]
            self.w_slots.children = [w for ws in self._slots_w for w in ws]
        return self._slots_w

    def _chip_button(self, c: Chip, p_min: float) -> W.Button:
        bg, border, fg = CHIP_STYLE[c.state]
        mark = f" {impl_mark(c.impl)}" if c.impl else ""      # who proposed it (the legend)
        b = W.Button(description=f"{MARK[c.state]} {visible(c.text)}{mark}", tooltip=chip_title(c, p_min),
                     layout=W.Layout(width="auto", height="26px", margin="1px 2px", padding="0 8px",
                                     border=f"2px {chip_border(c.state)} {border}"))
        b.style.button_color = bg
        b.style.text_color = fg
        b.style.font_family = "monospace"
        if c.state == "rejected":
            b.style.text_decoration = "line-through"
        if c.state in ("replaced", "bonus"):
            b.style.font_weight = "bold"
        b.add_class("specnb-chip")
        b.add_class(f"specnb-chip-{c.state}")
        if c.impl:
            b.add_class(f"specnb-impl-{c.impl}")
        key = c.key
        b.on_click(lambda _b: self._guard(lambda: setattr(self.w_detail_pick, "value", key)))
        return b

    def _render(self) -> None:
        self._render_status()
        p_min = self._p_min
        old_buttons, self._chip_buttons = self._chip_buttons, []
        newest = self.run.slot_views[-1] if self.run.slot_views else {}
        latest = self.run.latest_views()
        for s, (w_head, w_chips, w_text, w_kv) in enumerate(self._slot_widgets()):
            sv = latest.get(s)
            if sv is None:
                w_head.value = no_round_header_html(s, len(self.prompts[s]))
                w_chips.children = []
                w_text.value = committed_html(self.vocab, self.prompts[s], [], 0)
                w_kv.value = ""
                continue
            chips = [self._chip_button(c, p_min) for c in sv.chips]
            self._chip_buttons += chips
            n_new = len(sv.committed) if sv is newest.get(s) else 0
            w_head.value = slot_header_html(sv, self.vocab)
            w_chips.children = chips
            w_text.value = committed_html(self.vocab, self.prompts[s], self.run.committed.get(s, []), n_new)
            w_kv.value = kv_strips_html(sv) + (KV_LEGEND if s == len(self.prompts) - 1 else "")
        for b in old_buttons:
            b.close()
        self.w_counters.value = counters_html(self.counters)
        self.w_legend.value = impl_legend_html(self.run.types) if self.loop is not None else ""
        self._render_detail_pick()
        self.w_history.value = history_html(self.run.slot_views, self.history, p_min)

    def _render_detail_pick(self) -> None:
        """The detail list: every chip of the latest round. A new round selects its first
        rejection; otherwise the selection stays while its chip is on show."""
        opts = [("—", None)]
        for c in self.run.current_chips:
            opts.append((f"seq {c.seq} · #{c.index} {MARK[c.state]} {visible(c.text)} ({c.state})", c.key))
        keys = [k for _, k in opts]
        cur = self.w_detail_pick.value
        fresh = len(self.run.events) != self._rendered_rounds
        self._rendered_rounds = len(self.run.events)
        pick = cur if cur in keys and cur is not None and not fresh else self._default_pick(keys)
        self.w_detail_pick.unobserve(self._on_pick, names="value")
        self.w_detail_pick.options = opts
        self.w_detail_pick.value = pick
        self.w_detail_pick.observe(self._on_pick, names="value")
        self._on_pick({"new": pick})

    def _default_pick(self, keys):
        chips = self.run.current_chips
        first = next((c for c in chips if c.state == "rejected"), chips[0] if chips else None)
        if first is None:
            return None
        return first.key if first.key in keys else None
