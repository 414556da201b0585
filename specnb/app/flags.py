"""The flag table of `generate` and `speculative-simple`, each flag written once, as llama.cpp's
common/arg.cpp keeps its `common_arg`s.

One `Flag` per flag: its names, specnb's default, the help line, what it accepts, the dataclass field
it sets (`sampler.FIELD` of run.sampling.SamplerParams, `spec.FIELD` of speculation.params.SpecParams,
or none when the command reads it itself) and, for a flag llama.cpp master 34af94cd has, master's
default and the stated difference. From the table come:

  add_flags(parser, command)   the argparse options, grouped as `--help` shows them
  build(args, "sampler"/"spec", cls)   the dataclass, from the fields the flags name
  docs_section()               the flag list of docs/commands.md

tests/test_flags.py holds the table against the dataclasses' defaults, `--help`, docs/commands.md and
master's facts in tests/data/master_34af94cd_spec_args.json. Where a default is not master's, the help
line says so ("default: 64, specnb's: <why>; master: -1"), where a range or a behaviour differs it
says how (`note`), and an option or meaning master does not have starts with BEYOND.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from ..errors import ParamError

BEYOND = "[specnb, beyond llama.cpp]"
SAME = "same"                  # Flag.master: master's default is specnb's
ABSENT = "absent"              # Flag.master: master has no such option for this command

# the limits specnb accepts where master accepts more (stated in the flags' help lines)
DRAFT_N_MAX_LIMIT = 256        # the per-position statistics are n_max long (speculation/impl.py)
MIN_HITS_LIMIT = 65535         # master stores min_hits in a uint16_t (common/common.h:361)


@dataclass(frozen=True)
class Flag:
    names: tuple                  # every name; the first is the one docs and errors use
    dest: str                     # the argparse attribute
    help: str
    default: object = None        # specnb's default (None: the field's dataclass default, or none)
    group: str = "run"            # where --help lists it (GROUPS)
    field: str | None = None      # "sampler.temp" / "spec.n_max": the dataclass field it sets
    to_field: object = None       # parsed value -> field value (None: as parsed)
    type: object = None           # argparse type
    choices: tuple | None = None
    metavar: str | None = None
    action: str | None = None     # "store_true", "append", "removed" (refused with `hint`)
    nargs: str | None = None
    const: object = None
    master: object = SAME         # master's default: SAME, ABSENT or the value
    why: str = ""                 # why specnb's default is not master's
    note: str = ""                # how else it differs from master (range or behaviour)
    shown: str | None = None      # the default as --help prints it, when not `default` itself
    bounds: tuple | None = None   # (lo, hi) the field's validator accepts (None: unbounded)
    check_name: str | None = None  # the name the field's validator puts in its messages
    hint: str = ""                # removed flags: what to use instead
    alias_of: str | None = None   # c392e50's name of a master flag (master refuses it)
    extends: bool = False         # master has the name, specnb gives it more (labelled BEYOND)
    commands: tuple = ("generate", "speculative-simple")

    @property
    def label(self) -> str:
        return "/".join(self.names)

    @property
    def kind(self) -> str | None:
        return self.field.split(".")[0] if self.field else None

    @property
    def field_name(self) -> str | None:
        return self.field.split(".")[1] if self.field else None

    @property
    def beyond(self) -> bool:
        """An option, or a meaning, master does not have: its help starts with BEYOND."""
        return (self.master == ABSENT and self.alias_of is None) or self.extends


# ---- value parsers (each raises ParamError naming the value; `build` adds the flag) -----------------
def _draft_max(text: str):
    """--spec-draft-n-max: an integer, or `auto[:CAP]` / `heuristic[:CAP]` (checked by SpecParams)."""
    s = str(text).strip()
    return int(s) if re.fullmatch(r"[+-]?\d+", s) else s


def _threads(text: str):
    """-t: as master, a value <= 0 means every core (here: every core Numba may use)."""
    n = int(text)
    return None if n <= 0 else n


def _spec_types(values):
    """Repeated --spec-type lists add up, as master's handler appends each to params.speculative.types
    (common/arg.cpp:4158-4160): the union of the lists, a `none` inside one list dropping that list
    (common_speculative_types_from_names); `none` when nothing else is left."""
    from ..speculation.params import parse_spec_types
    out = []
    for v in values:
        out += [t for t in parse_spec_types(v) if t != "none" and t not in out]
    return ",".join(out) if out else "none"


def _floats(text: str) -> list:
    try:
        return [float(x) for x in str(text).split(",")]
    except ValueError:
        raise ParamError(f"invalid value {text!r}: expected comma-separated numbers") from None


def _dry_base(v: float) -> float:
    if not v >= 1.0:
        raise ParamError(f"invalid dry_base={v}: expected a number >= 1 (master ignores smaller values)")
    return v


def _dry_breakers(values) -> tuple:
    """As master: the first --dry-sequence-breaker drops the defaults, `none` removes all."""
    out = []
    for b in values:
        out = [] if b == "none" else out + [b]
    return tuple(out)


def _logit_bias(values) -> tuple:
    from ..run.sampling import parse_logit_bias
    return tuple(parse_logit_bias(x) for x in values)


def _samplers(text):
    from ..run.sampling import parse_samplers
    return parse_samplers(text)


def _sampler_seq(text):
    from ..run.sampling import parse_sampler_seq
    return parse_sampler_seq(text)


def _not(v):
    return not v


# ---- the table --------------------------------------------------------------------------------------
GEN, SPEC = ("generate", "speculative-simple"), ("speculative-simple",)
_NGRAM_M = ("length of the drafted m-gram, the longest draft; --spec-draft-n-max does not cut it, "
            "as in master")

FLAGS: tuple[Flag, ...] = (
    # the models
    Flag(("-m", "--model"), "model", "target: a model name (`specnb models`) or a GGUF path",
         group="models", metavar="FNAME", shown="smollm2-135m", master="none (required)"),
    Flag(("--spec-draft-model", "-md", "--model-draft"), "model_draft",
         "draft: a model name or a GGUF path", group="models", metavar="FNAME", commands=SPEC,
         shown="smollm2-135m-q4_0", why="the default target requantized to Q4_0", master="unused"),
    # the prompt
    Flag(("-p", "--prompt"), "prompt", "the prompt", group="prompt", metavar="PROMPT", shown="none"),
    Flag(("-f", "--file"), "file", "read the prompt from a file: its bytes as they are, less one final "
         "newline, as master reads it", group="prompt", metavar="FNAME", shown="none"),
    Flag(("--chat",), "chat", "wrap the prompt as a user message with the model's chat template",
         group="prompt", action="store_true", default=False, master=ABSENT),
    # length and context
    Flag(("-n", "--predict", "--n-predict"), "n_predict",
         "tokens to generate; -1: until the end of generation or a full context", default=64,
         type=int, master=-1, metavar="N", why="the default command ends in seconds on a laptop",
         note="0 and values below -1 are refused (master's speculative-simple still runs one round "
              "with 0)"),
    Flag(("-c", "--ctx-size"), "ctx_size", "context size in tokens; 0: the model's training context "
         "(n_ctx_train, from the GGUF)", default=2048, type=int, master=0, metavar="N",
         why="small KV caches on a laptop, where 0 is 8192 tokens for smollm2-135m"),
    Flag(("-t", "--threads"), "threads", "CPU threads; <= 0: every core", type=_threads, metavar="N",
         group="compute", shown="every core Numba may use", master="the physical cores",
         commands=GEN + ("perplexity", "bench", "demo")),
    Flag(("--backend",), "backend", "compute backend (auto: cuda when a GPU is found, else cpu)",
         default="cpu", choices=("auto", "cpu", "cuda"), group="compute", master=ABSENT,
         commands=GEN + ("perplexity", "bench", "demo")),
    Flag(("--activations",), "activations", "CPU matrix products: q8 = activations rounded to int8 "
         "blocks as llama.cpp's CPU backend does, the fast path; f32 = float32 activations, the exact "
         "reference path that agrees with the NumPy oracle (several times slower). CUDA: f32 only",
         choices=("q8", "f32"), group="compute", shown="q8 on the CPU, f32 on CUDA", master=ABSENT,
         commands=GEN + ("perplexity", "demo")),
    Flag(("--json",), "json", "print one JSON object", action="store_true", default=False,
         group="compute", master=ABSENT, commands=GEN + ("perplexity", "bench", "demo")),
    # sampling (common_params_sampling, common/common.h:223-270)
    Flag(("--temp", "--temperature"), "temp", "temperature; 0 = greedy", default=0.0, type=float,
         group="sampling", field="sampler.temp", metavar="N", master=0.8,
         why="greedy, so that the output compares token for token with plain decoding"),
    Flag(("--top-k",), "top_k", "top-k, <= 0 = off", type=int, group="sampling",
         field="sampler.top_k", metavar="N"),
    Flag(("--top-p",), "top_p", "top-p, 1 = off", type=float, group="sampling",
         field="sampler.top_p", metavar="N"),
    Flag(("--min-p",), "min_p", "min-p, 0 = off", type=float, group="sampling",
         field="sampler.min_p", metavar="N"),
    Flag(("--typical", "--typical-p"), "typical", "locally typical sampling p, 1 = off", type=float,
         group="sampling", field="sampler.typ_p", metavar="N"),
    Flag(("--top-nsigma", "--top-n-sigma"), "top_n_sigma", "top-n-sigma, <= 0 = off", type=float,
         group="sampling", field="sampler.top_n_sigma", metavar="N"),
    Flag(("--xtc-probability",), "xtc_probability", "XTC probability, 0 = off", type=float,
         group="sampling", field="sampler.xtc_probability", metavar="N"),
    Flag(("--xtc-threshold",), "xtc_threshold", "XTC threshold, > 0.5 = off", type=float,
         group="sampling", field="sampler.xtc_threshold", metavar="N"),
    Flag(("--dynatemp-range",), "dynatemp_range", "dynamic temperature range, 0 = off", type=float,
         group="sampling", field="sampler.dynatemp_range", metavar="N"),
    Flag(("--dynatemp-exp",), "dynatemp_exp", "dynamic temperature exponent", type=float,
         group="sampling", field="sampler.dynatemp_exponent", metavar="N"),
    Flag(("--repeat-penalty",), "repeat_penalty", "repeat penalty, 1 = off", type=float,
         group="sampling", field="sampler.penalty_repeat", metavar="N"),
    Flag(("--repeat-last-n",), "repeat_last_n", "tokens the penalties look back at, 0 = off",
         type=int, group="sampling", field="sampler.penalty_last_n", metavar="N"),
    Flag(("--frequency-penalty",), "frequency_penalty", "frequency penalty, 0 = off", type=float,
         group="sampling", field="sampler.penalty_freq", metavar="N"),
    Flag(("--presence-penalty",), "presence_penalty", "presence penalty, 0 = off", type=float,
         group="sampling", field="sampler.penalty_present", metavar="N"),
    Flag(("--dry-multiplier",), "dry_multiplier", "DRY multiplier, 0 = off", type=float,
         group="sampling", field="sampler.dry_multiplier", metavar="N"),
    Flag(("--dry-base",), "dry_base", "DRY base", type=float, group="sampling",
         field="sampler.dry_base", to_field=_dry_base, metavar="N",
         note="a value below 1 is refused; master ignores it and keeps the previous value"),
    Flag(("--dry-allowed-length",), "dry_allowed_length", "DRY: repeats longer than this are "
         "penalised", type=int, group="sampling", field="sampler.dry_allowed_length", metavar="N"),
    Flag(("--dry-penalty-last-n",), "dry_penalty_last_n", "DRY: tokens scanned for repeats, 0 = off",
         type=int, group="sampling", field="sampler.dry_penalty_last_n", metavar="N"),
    Flag(("--dry-sequence-breaker",), "dry_sequence_breaker", "DRY sequence breaker; the first use "
         "replaces the defaults, 'none' removes all; may be repeated", action="append",
         group="sampling", field="sampler.dry_sequence_breakers", to_field=_dry_breakers,
         metavar="STRING", shown="\\n : \" *"),
    Flag(("--mirostat",), "mirostat", "0 = off, 1 = Mirostat, 2 = Mirostat 2.0", type=int,
         group="sampling", field="sampler.mirostat", metavar="N"),
    Flag(("--mirostat-lr",), "mirostat_lr", "Mirostat learning rate, eta", type=float,
         group="sampling", field="sampler.mirostat_eta", metavar="N"),
    Flag(("--mirostat-ent",), "mirostat_ent", "Mirostat target entropy, tau", type=float,
         group="sampling", field="sampler.mirostat_tau", metavar="N"),
    Flag(("-l", "--logit-bias"), "logit_bias", "e.g. 15043+1 or 15043-inf; may be repeated",
         action="append", group="sampling", field="sampler.logit_bias", to_field=_logit_bias,
         metavar="TOKEN_ID(+/-)BIAS", shown="none"),
    Flag(("--samplers",), "samplers", "samplers in order, separated by ';'", group="sampling",
         field="sampler.samplers", to_field=_samplers, metavar="SAMPLERS"),
    Flag(("--sampler-seq", "--sampling-seq"), "sampler_seq", "the samplers as letters",
         group="sampling", field="sampler.samplers", to_field=_sampler_seq, metavar="SEQUENCE",
         shown="edskypmxt"),
    Flag(("-s", "--seed"), "seed", "RNG seed; 4294967295 = random", default=42, type=int,
         group="sampling", field="sampler.seed", metavar="SEED", master=4294967295,
         why="a sampled run repeats"),
    Flag(("--dist-draw",), "dist_draw", "draw the final token as llama.cpp master does, or as "
         "c392e50 did (needed to reproduce a c392e50 build's seeds)", choices=("master", "c392e50"),
         group="sampling", field="sampler.dist_draw", master=ABSENT),
    # speculative-simple: the draft model (common_params_speculative_draft, common/common.h:324-331)
    Flag(("--spec-draft-n-max",), "draft_max",
         "the draft model's tokens per round: N, its drafts cut to N. "
         f"{BEYOND}: auto[:CAP] chooses each round's length 0..CAP (default 16) from the costs this run "
         "measures (specnb.speculation.draft_len); heuristic[:CAP] follows transformers' schedule "
         "(start 20, +2 after a fully accepted draft, else -1; CAP default 64)",
         default=3, type=_draft_max, group="speculative", field="spec.n_max",
         metavar="N|auto[:CAP]|heuristic[:CAP]", commands=SPEC, bounds=(0, DRAFT_N_MAX_LIMIT),
         check_name="draft_max",
         note=f"specnb accepts at most {DRAFT_N_MAX_LIMIT}, master any N >= 0; 0 still drafts one "
              "token, as master's draft loop pushes the token before it tests n_max "
              "(common/speculative.cpp:347-349)"),
    Flag(("--spec-draft-n-min",), "draft_min", "the draft model's fewest tokens: a shorter draft is "
         "dropped", default=0, type=int, group="speculative", field="spec.n_min", metavar="N",
         commands=SPEC, bounds=(0, None), check_name="draft_min",
         note="a negative value is refused; master compares with (size_t) n_min, so there it drops "
              "every draft, as any value above --spec-draft-n-max does in both"),
    Flag(("--spec-draft-p-min", "--draft-p-min"), "draft_p_min", "stop drafting when the draft "
         "model's top probability is below P", default=0.0, type=float, group="speculative",
         field="spec.p_min", metavar="P", commands=SPEC, check_name="draft_p_min"),
    Flag(("--draft-max", "--draft", "--draft-n"), "draft_max", "c392e50's name for "
         "--spec-draft-n-max (removed at master 34af94cd, which refuses it)", type=_draft_max,
         group="speculative", metavar="N", commands=SPEC, master=ABSENT, alias_of="--spec-draft-n-max"),
    Flag(("--draft-min", "--draft-n-min"), "draft_min", "c392e50's name for --spec-draft-n-min "
         "(removed at master 34af94cd, which refuses it)", type=int, group="speculative", metavar="N",
         commands=SPEC, master=ABSENT, alias_of="--spec-draft-n-min"),
    Flag(("--spec-type",), "spec_type", "comma-separated speculator types: none, draft-simple, "
         "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache; they run in llama.cpp's "
         "priority order (n-gram lookups first), and a repeated --spec-type adds its types, as in "
         "master. The n-gram types need no draft model. Master's draft-eagle3, draft-mtp, "
         "draft-dflash and draft-dspark need heads or models trained for the target and are not "
         "implemented (the error says why)", action="append", group="speculative",
         field="spec.types", to_field=_spec_types, metavar="TYPES", commands=SPEC,
         shown="draft-simple with -md or the default draft", master="none", why="c392e50's rule",
         note="at master 34af94cd llama-speculative-simple -md F alone exits with 'failed to "
              "initialize speculative decoding': give --spec-type draft-simple there"),
    Flag(("--verify",), "verify", "how the target checks a draft: exact = llama.cpp's, the only "
         "way llama-speculative-simple verifies (the target's sampler draws each token and a draft "
         "token is kept while it equals the draw; in specnb the output is plain decoding's, token for token); "
         "rejection = specnb's speculative sampling (Leviathan et al. 2023, "
         "specnb.speculation.verify): the draft samples its tokens and the target keeps each with "
         "probability min(1, p/q), the same distribution but not the same tokens",
         default="exact", choices=("exact", "rejection"),
         group="speculative", field="spec.verify", commands=SPEC, master=ABSENT),
    Flag(("--no-reeval",), "no_reeval", "keep the draft's KV rows instead of re-evaluating them in "
         "process() (llama-server's TAG_SPEC_AVOID_DRAFT_REEVAL idea); the one row it misses is "
         "decoded with the next draft's seed row", action="store_true",
         default=False, group="speculative", field="spec.reeval", to_field=_not, commands=SPEC,
         master=ABSENT),
    Flag(("--spec-draft-vocab",), "draft_vocab", "the draft model scores only its N highest-ranked "
         "tokens (ranked by the GGUF file's own tables: BPE merge order, or SentencePiece scores) plus "
         "the prompt's and the control tokens, so each draft token reads a fraction of its output head "
         "(FR-Spec, Zhao et al. 2025); the target still verifies over the whole vocabulary, so the "
         "output is unchanged; 0: the whole vocabulary", default=0, type=int, group="speculative",
         field="spec.draft_vocab", metavar="N", commands=SPEC, master=ABSENT, bounds=(0, None),
         check_name="draft_vocab"),
    Flag(("--no-seq-rm",), "no_seq_rm", "simulate a target memory that refuses partial removal "
         "(a recurrent one): checkpoints and replay, as master does for such models",
         action="store_true", default=False, group="speculative", commands=SPEC, master=ABSENT),
    Flag(("--no-seq-rm-draft",), "no_seq_rm_draft", "simulate a draft memory that refuses partial "
         "removal: the draft restores a checkpoint instead of removing its rejected rows",
         action="store_true", default=False, group="speculative", commands=SPEC, master=ABSENT),
    Flag(("-lcs", "--lookup-cache-static"), "lookup_cache_static", "ngram-cache: a static n-gram "
         "cache file (llama.cpp's layout)", group="speculative", field="spec.lookup_cache_static",
         metavar="FNAME", commands=SPEC, shown="none", master=ABSENT,
         note="master's llama-lookup and llama-server take it, llama-speculative-simple does not"),
    Flag(("-lcd", "--lookup-cache-dynamic"), "lookup_cache_dynamic", "ngram-cache: a dynamic n-gram "
         "cache file (read if it exists)", group="speculative", field="spec.lookup_cache_dynamic",
         metavar="FNAME", commands=SPEC, shown="none", master=ABSENT,
         note="master's llama-lookup and llama-server take it, llama-speculative-simple does not"),
    Flag(("-np", "--parallel"), "parallel", "sequences decoded together, one target batch per round",
         default=1, type=int, group="speculative", metavar="N", commands=SPEC, extends=True,
         note="master's llama-speculative-simple takes -np but decodes one sequence"),
    Flag(("--spec-synth-rates",), "spec_synth_rates", "synthetic acceptance: exactly "
         "--spec-draft-n-max rates, comma-separated, each position's unconditional acceptance (the "
         "output is not text; for benchmarking the loop)", group="speculative",
         field="spec.synth_rates", to_field=_floats, metavar="R,R,...", commands=SPEC, shown="none",
         master=ABSENT),
    Flag(("--spec-synth-len",), "spec_synth_len", "synthetic acceptance: the mean accepted length L "
         "(the output is not text; for benchmarking the loop)", type=float, group="speculative",
         field="spec.synth_len", metavar="L", commands=SPEC, shown="none", master=ABSENT),
    Flag(("-co", "--color"), "color", "colour accepted draft tokens (green from the draft model, cyan "
         "from a lookup): on, off or auto (on at a terminal); --color alone means on",
         default="auto", choices=("on", "off", "auto"), nargs="?", const="on", group="output",
         metavar="on|off|auto", commands=SPEC),
    Flag(("--stop",), "stop", "exact: stop at exactly -n tokens, so the output compares token for "
         "token with `generate`; master: as llama-speculative-simple at 34af94cd, run while "
         "n_predict <= N (at least N + 1 tokens) and let the last round, whose budget is 0, draft "
         "uncapped, so n_predict / n_drafted / n_accept print as master's; c392e50: the same stop, "
         "no draft budget, as that build. Only the stop rule: c392e50's defaults (--draft-max 16 "
         "--draft-p-min 0.75) are not applied, so give them to repeat a c392e50 run with its defaults",
         default="exact", choices=("exact", "master", "c392e50"), group="output", commands=SPEC,
         master=ABSENT),
    Flag(("--penalize-prompt",), "penalize_prompt", "put the prompt into the sampler's penalty "
         "window (repeat, frequency, presence, DRY), as llama-cli and llama-server do; "
         "llama-speculative-simple does not (nor does specnb without this flag)",
         action="store_true", default=False, group="output", commands=SPEC, master=ABSENT),
) + tuple(
    # the n-gram speculators' own flags (common/arg.cpp:4163-4285)
    f for t in ("simple", "map-k", "map-k4v") for f in (
        Flag((f"--spec-ngram-{t}-size-n",), f"ngram_{t.replace('-', '_')}_size_n",
             "length of the lookup n-gram", default=12, type=int, group=f"ngram-{t}",
             field=f"spec.ngram_{t.replace('-', '_')}_size_n", metavar="N", commands=SPEC,
             bounds=(1, 1024)),
        Flag((f"--spec-ngram-{t}-size-m",), f"ngram_{t.replace('-', '_')}_size_m", _NGRAM_M,
             default=48, type=int, group=f"ngram-{t}", field=f"spec.ngram_{t.replace('-', '_')}_size_m",
             metavar="M", commands=SPEC, bounds=(1, 1024)),
        Flag((f"--spec-ngram-{t}-min-hits",), f"ngram_{t.replace('-', '_')}_min_hits",
             "the fewest times a key and its value must have been seen" if t == "map-k4v" else
             "accepted as master does; only ngram-map-k4v reads it there (ngram-map.cpp:401-406), "
             "so no effect", default=1, type=int, group=f"ngram-{t}",
             field=f"spec.ngram_{t.replace('-', '_')}_min_hits", metavar="H", commands=SPEC,
             bounds=(1, MIN_HITS_LIMIT),
             note=f"above {MIN_HITS_LIMIT} refused: master stores the value in 16 bits, so larger "
                  "values wrap"),
    )
) + (
    Flag(("--spec-ngram-mod-n-match",), "ngram_mod_n_match", "length of the hashed n-gram",
         default=24, type=int, group="ngram-mod", field="spec.ngram_mod_n_match", metavar="N",
         commands=SPEC, bounds=(1, 1024)),
    Flag(("--spec-ngram-mod-n-min",), "ngram_mod_n_min", "a draft shorter than N is dropped",
         default=48, type=int, group="ngram-mod", field="spec.ngram_mod_n_min", metavar="N",
         commands=SPEC, bounds=(0, 1024)),
    Flag(("--spec-ngram-mod-n-max",), "ngram_mod_n_max", "the longest draft", default=64, type=int,
         group="ngram-mod", field="spec.ngram_mod_n_max", metavar="N", commands=SPEC,
         bounds=(0, 1024)),
    # removed at master (common/arg.cpp:4287-4325): refused with master's hint
    Flag(("--spec-ngram-size-n",), "removed", "", action="removed", group="removed", commands=SPEC,
         hint="the respective --spec-ngram-*-size-n", master=ABSENT),
    Flag(("--spec-ngram-size-m",), "removed", "", action="removed", group="removed", commands=SPEC,
         hint="the respective --spec-ngram-*-size-m", master=ABSENT),
    Flag(("--spec-ngram-min-hits",), "removed", "", action="removed", group="removed", commands=SPEC,
         hint="the respective --spec-ngram-*-min-hits", master=ABSENT),
    Flag(("--spec-ngram-check-rate",), "removed", "", action="removed", group="removed",
         commands=SPEC, hint="nothing: master looks up every token", master=ABSENT),
)

# --help's groups, in order (None: the command's own options)
GROUPS = {
    "models": None, "prompt": None, "run": None, "compute": None,
    "sampling": "sampling (llama.cpp's flags and defaults, but --temp and --seed; see docs/llama_cpp.md)",
    "speculative": "speculative decoding (master 34af94cd's flags, but where marked)",
    "ngram-simple": "ngram-simple (master 34af94cd's flags)",
    "ngram-map-k": "ngram-map-k (master 34af94cd's flags)",
    "ngram-map-k4v": "ngram-map-k4v (master 34af94cd's flags)",
    "ngram-mod": "ngram-mod (master 34af94cd's flags)",
    "output": "output", "removed": None,
}


def flags_of(command: str, groups=None) -> list[Flag]:
    return [f for f in FLAGS if command in f.commands and (groups is None or f.group in groups)]


def flag(name: str, command: str = "speculative-simple") -> Flag:
    """The Flag one of whose names is `name`."""
    return next(f for f in flags_of(command) if name in f.names)


# ---- defaults and help lines ---------------------------------------------------------------------
def _dataclass(kind: str):
    if kind == "sampler":
        from ..run.sampling import SamplerParams
        return SamplerParams()
    from ..speculation.params import SpecParams
    return SpecParams()


def field_default(f: Flag):
    """The value the field takes when the flag is not given (per-type n-gram knobs resolved)."""
    obj = _dataclass(f.kind)
    v = getattr(obj, f.field_name)
    for knob in ("size_n", "size_m", "min_hits"):
        if v is None and f.field_name.startswith("ngram_") and f.field_name.endswith("_" + knob):
            v = obj.ngram_knobs(f.field_name[len("ngram_"):-len(knob) - 1].replace("_", "-"))[knob]
    return v


def effective_default(f: Flag):
    """The value the command uses when the flag is not given: the field's value for the table's
    default, or the dataclass's own default."""
    if f.default is None:
        return field_default(f) if f.field else None
    return f.to_field(f.default) if f.to_field else f.default


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list)):
        return ";".join(map(str, v)) if v else "none"
    return str(v)


def shown_default(f: Flag) -> str:
    if f.shown is not None:
        return f.shown
    if f.default is None and f.field:
        return _fmt(field_default(f))
    return _fmt(f.default)


def describe(f: Flag) -> str:
    """What the flag does, BEYOND first when master has no such option or meaning."""
    return f"{BEYOND} {f.help}" if f.beyond else f.help


def help_line(f: Flag) -> str:
    """The --help line: what it does, the default, and how it differs from master."""
    if f.action == "removed":
        return argparse.SUPPRESS
    text = describe(f)
    if f.alias_of:
        return text
    if f.action != "store_true":
        d = shown_default(f)
        if f.master not in (SAME, ABSENT):
            why = f": {f.why}" if f.why else ""
            text += f" (default: {d}, specnb's{why}; master: {_fmt(f.master)})"
        else:
            text += f" (default: {d})"
    return text + (f"; {f.note}" if f.note else "")


class _Removed(argparse.Action):
    """A flag master 34af94cd no longer has: refused with its hint, as common/arg.cpp does."""

    def __init__(self, option_strings, dest, hint="", **kw):
        self.hint = hint
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was removed at llama.cpp master 34af94cd: use {self.hint}")


def add_flags(p: argparse.ArgumentParser, command: str, groups=None) -> None:
    """The table's options of `command` (only `groups`, when given), grouped as --help lists them."""
    made = {}
    for f in flags_of(command, groups):
        if GROUPS.get(f.group) is None:
            g = p
        elif f.group not in made:
            g = made[f.group] = p.add_argument_group(GROUPS[f.group])
        else:
            g = made[f.group]
        kw = dict(dest=f.dest, help=help_line(f).replace("%", "%%"))
        if f.action == "removed":
            g.add_argument(*f.names, action=_Removed, hint=f.hint, help=argparse.SUPPRESS)
            continue
        if f.action == "store_true":
            kw.update(action="store_true", default=f.default)
        else:
            if f.action:
                kw["action"] = f.action
            if f.alias_of:
                kw["default"] = argparse.SUPPRESS        # an alias leaves the flag's default alone
            else:
                kw["default"] = f.default
            for k in ("type", "choices", "metavar", "nargs", "const"):
                if getattr(f, k) is not None:
                    kw[k] = getattr(f, k)
        g.add_argument(*f.names, **kw)


# ---- parsed args -> the dataclasses ---------------------------------------------------------------
def _flag_error(e: Exception, f: Flag) -> ParamError:
    return ParamError(f"{f.label}: {e}")


def values(a, kind: str) -> dict:
    """The fields of `kind` ("sampler" or "spec") that the parsed args set, per the table."""
    kw, by = {}, {}
    for f in FLAGS:
        if f.kind != kind or not hasattr(a, f.dest):
            continue
        v = getattr(a, f.dest)
        if v is None:
            continue
        if f.field_name in by:
            raise ParamError(f"give either {by[f.field_name].names[0]} or {f.names[0]}, not both")
        try:
            kw[f.field_name] = f.to_field(v) if f.to_field else v
        except ParamError as e:
            raise _flag_error(e, f) from None
        by[f.field_name] = f
    return kw


def build(a, kind: str, cls):
    """cls(**values(a, kind)).validate(), a refused value named by its flag."""
    kw = values(a, kind)
    try:
        return cls(**kw).validate()
    except ParamError as e:
        m = re.match(r"invalid (\w+)=", str(e))
        f = next((f for f in FLAGS if f.kind == kind and m and m.group(1) in (f.check_name, f.field_name)
                  and f.field_name in kw), None)
        if f is None:
            raise
        raise _flag_error(e, f) from None


# ---- docs/commands.md ------------------------------------------------------------------------------
DOCS_BEGIN = "<!-- flags: generated by specnb.app.flags.docs_section(); do not edit by hand -->"
DOCS_END = "<!-- flags: end -->"


def docs_section() -> str:
    """The flag list of docs/commands.md: every flag of speculative-simple with specnb's and master's
    defaults (`generate` takes the model, prompt, length, compute and sampling flags)."""
    out = [DOCS_BEGIN, "", "| flag | default | master 34af94cd | what it does |", "|---|---|---|---|"]
    for f in flags_of("speculative-simple"):
        if f.action == "removed":
            continue
        names = ", ".join(f"`{n}`" for n in f.names)
        if f.alias_of:
            d, master = f"as {f.alias_of}", "refused"
        else:
            d = "off" if f.action == "store_true" else shown_default(f)
            master = "specnb's" if f.beyond and not f.extends else "same" if f.master == SAME \
                else _fmt(f.master)
            if f.master not in (SAME, ABSENT):
                d += " (specnb's)"
        text = describe(f) + (f"; specnb's default: {f.why}" if f.why else "") + \
            (f"; {f.note}" if f.note else "")
        cells = [names] + [c.replace("|", "\\|").replace("\n", " ") for c in (d, master, text)]
        out.append("| " + " | ".join(cells) + " |")
    removed = ", ".join(f"`{f.names[0]}`" for f in flags_of("speculative-simple") if f.action == "removed")
    out += ["", f"Refused, as master refuses them (removed flags): {removed}.", "", DOCS_END]
    return "\n".join(out)


def update_docs(path) -> bool:
    """Write docs_section() between the markers of `path`; True if the file changed."""
    from pathlib import Path
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    i, j = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    new = text[:i] + docs_section() + text[j:]
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text


# ---- SpecParams -> flags ---------------------------------------------------------------------------
def spec_flags(params) -> list:
    """The speculative-simple flags that give `params` (a SpecParams), in the table's order: for each
    flag of a `spec.` field whose value is not the one the command takes without it, its first name
    and the value (a store_true flag alone; --spec-type's types joined with commas). build() of the
    parsed flags gives `params` back (its types as the parser spells them); a field no flag sets
    (the shared n-gram sizes but through the per-type flags, the synthetic seed) is left out."""
    from ..speculation.draft_len import AUTO_CAP, HEURISTIC_CAP
    from ..speculation.params import parse_spec_types
    out, done = [], set()
    for f in FLAGS:
        if f.kind != "spec" or f.alias_of or f.action == "removed" or f.field_name in done \
                or "speculative-simple" not in f.commands:
            continue
        done.add(f.field_name)
        v, d = getattr(params, f.field_name), effective_default(f)
        if f.field_name == "n_max":                 # N | auto[:CAP] | heuristic[:CAP]
            v = {f"auto:{AUTO_CAP}": "auto", f"heuristic:{HEURISTIC_CAP}": "heuristic"}.get(
                params.draft_max, params.draft_max)
            d = str(d)
        elif f.field_name == "types":
            v = None if v is None else ",".join(parse_spec_types(v))
        elif v is None and f.field_name.startswith("ngram_"):      # a per-type knob: the shared one
            v = getattr(params, "ngram_" + next(k for k in ("size_n", "size_m", "min_hits")
                                                if f.field_name.endswith(k)))
        if v == d:
            continue
        if f.action == "store_true":
            if v != (f.to_field(True) if f.to_field else True):
                raise ParamError(f"{f.names[0]} cannot give {f.field_name}={v!r}")
            out.append(f.names[0])
        else:
            out += [f.names[0], ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    return out


if __name__ == "__main__":          # python -m specnb.app.flags docs/commands.md
    import sys
    print("updated" if update_docs(sys.argv[1]) else "unchanged")
