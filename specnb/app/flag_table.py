"""The flag table: every flag of specnb's commands written once, as llama.cpp's common/arg.cpp keeps
its `common_arg`s (flags.py turns it into argparse options, the dataclasses and docs/commands.md).

One `Flag` per flag: its names, specnb's default, the help line, what it accepts, the dataclass field
it sets (`sampler.FIELD` of run.sampling.SamplerParams, `spec.FIELD` of speculation.params.SpecParams,
or none when the command reads it itself), the commands that take it and, for a flag llama.cpp
master 34af94cd has, master's default and the stated difference. Where a default is not master's,
the help line says so ("default: 64, specnb's: <why>; master: -1"), where a range or a behaviour
differs it says how (`note`), and an option or meaning master does not have starts with BEYOND. A
command whose default or help differs (perplexity's -c 512 and no escapes, as llama-perplexity's)
gives it in `per_command`. The limits come from the modules that check them.
"""
from __future__ import annotations

import argparse
import math
import re
import warnings
from dataclasses import dataclass, replace

from ..errors import ParamError
from ..speculation.limits import DRAFT_N_MAX_LIMIT, MIN_HITS_LIMIT, NGRAM_SIZE_LIMIT

BEYOND = "[specnb, beyond llama.cpp]"
SAME = "same"                  # Flag.master: master's default is specnb's
ABSENT = "absent"              # Flag.master: master has no such option for this command
NO_EFFECT = "accepted for llama.cpp's command lines; no effect in specnb"


@dataclass(frozen=True)
class Flag:
    names: tuple                  # every name; the first is the one docs and errors use
    dest: str                     # the argparse attribute
    help: str
    default: object = None        # specnb's default (None: the field's dataclass default, or none)
    group: str = "run"            # where --help lists it (GROUPS)
    field: str | None = None      # "sampler.temp" / "spec.n_max": the dataclass field it sets
    to_field: object = None       # parsed value -> field value (None: as parsed; returns None: unset)
    type: object = None           # argparse type
    choices: tuple | None = None
    metavar: str | None = None
    action: str | None = None     # "store_true", "store_false", "append", "removed" (refused: `hint`)
    nargs: str | None = None
    const: object = None
    master: object = SAME         # master's default: SAME, ABSENT or the value
    why: str = ""                 # why specnb's default is not master's
    note: str = ""                # how else it differs from master (range or behaviour)
    shown: str | None = None      # the default as --help prints it, when not `default` itself
    bounds: tuple | None = None   # (lo, hi) the field's validator accepts (None: unbounded)
    hint: str = ""                # removed flags: what to use instead
    alias_of: str | None = None   # c392e50's name of a master flag (master refuses it)
    extends: bool = False         # master has the name, specnb gives it more (labelled BEYOND)
    commands: tuple = ("generate", "speculative-simple")
    per_command: dict | None = None   # command -> the attributes that differ there

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

    def for_command(self, command: str) -> "Flag":
        """The flag as `command` takes it (its per_command attributes applied)."""
        over = (self.per_command or {}).get(command)
        return replace(self, **over) if over else self


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


def _temp(v: float) -> float:
    """--temp: a negative value becomes 0, greedy (common/arg.cpp:2008: std::max(temp, 0.0f))."""
    return max(v, 0.0)


def _seed(text: str) -> int:
    """-s: std::stoul, stored in a uint32_t (common/arg.cpp:1986): -1 wraps to 4294967295, the random
    seed; any value below 2**64 in size is taken modulo 2**32, as master's assignment does."""
    v = int(text)
    if abs(v) >= 1 << 64:
        raise argparse.ArgumentTypeError(f"seed {text} out of range: master's std::stoul reads 64 bits")
    return v % (1 << 32)


_seed.__name__ = "int"


def _dry_base(values) -> float | None:
    """--dry-base: master keeps the last value >= 1 and ignores the others (common/arg.cpp:2126-2130)."""
    kept = None
    for v in values:
        if v >= 1.0:
            kept = v
        else:
            warnings.warn(f"--dry-base {v:g} ignored: below 1, as master ignores it", stacklevel=2)
    return kept


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


def _layers(text: str):
    """-ngl / -ngld: N, auto or all (common/arg.cpp:2747-2753)."""
    if text in ("auto", "all"):
        return text
    return int(text)


def _on_off_auto(option: str):
    """-co / -fa: on, off or auto with master's spellings (is_truthy / is_falsey / is_autoy,
    common/arg.cpp:1332-1342)."""
    def parse(text: str) -> str:
        for word, spellings in (("on", ("on", "enabled", "true", "1")),
                                ("off", ("off", "disabled", "false", "0")), ("auto", ("auto", "-1"))):
            if text in spellings:
                return word
        raise argparse.ArgumentTypeError(f"unknown value for {option}: '{text}' (master's error)")
    parse.__name__ = "on|off|auto"
    return parse


def _finite_or_inf(text: str) -> float:
    """A float as std::stof reads the ones master's samplers take; NaN is refused (stated once in
    the sampling group's title): every comparison with it is false, so the samplers would compute
    NaN probabilities."""
    v = float(text)
    if math.isnan(v):
        raise argparse.ArgumentTypeError(f"NaN refused: {text!r}")
    return v


_finite_or_inf.__name__ = "float"


# ---- the table --------------------------------------------------------------------------------------
GEN, SPEC = ("generate", "speculative-simple"), ("speculative-simple",)
PROMPTED = GEN + ("tokenize",)
COMPUTED = GEN + ("perplexity", "bench", "demo", "costs")
_NGRAM_M = ("length of the drafted m-gram, the longest draft; --spec-draft-n-max does not cut it, "
            "as in master")
_NUM = dict(type=_finite_or_inf, group="sampling", metavar="N")

FLAGS: tuple[Flag, ...] = (
    # the models
    Flag(("-m", "--model"), "model", "the model (speculative-simple's target): a name (`specnb models`) "
         "or a GGUF path", group="models", metavar="FNAME", shown="smollm2-135m", master="none (required)",
         commands=PROMPTED + ("perplexity", "bench", "costs"),
         per_command={"costs": dict(help="the target: a model name or a GGUF path", shown="qwen2.5-coder-1.5b")}),
    Flag(("--spec-draft-model", "-md", "--model-draft"), "model_draft",
         "draft: a model name or a GGUF path", group="models", metavar="FNAME", commands=SPEC + ("costs",),
         shown="smollm2-135m-q4_0", why="the default target requantized to Q4_0", master="unused",
         per_command={"costs": dict(shown="qwen2.5-coder-0.5b", why="the real pair's draft")}),
    # the prompt
    Flag(("-p", "--prompt"), "prompt", "the prompt", group="prompt", metavar="PROMPT", shown="none",
         commands=PROMPTED),
    Flag(("-f", "--file"), "file", "read the prompt from a file: its bytes as they are, less one final "
         "newline, as master's -f reads them (tokenize keeps it, as llama-tokenize does)",
         group="prompt", metavar="FNAME", shown="none", commands=PROMPTED + ("perplexity",),
         per_command={"perplexity": dict(help="the text to score: its bytes as they are, less one "
                                              "final newline, as llama-perplexity reads -f")}),
    Flag(("--chat",), "chat", "wrap the prompt as a user message with the model's chat template",
         group="prompt", action="store_true", default=False, master=ABSENT, commands=PROMPTED),
    Flag(("-e", "--escape"), "escape", "process the escapes of -p, of -f's contents and of "
         "--dry-sequence-breaker as master's string_process_escapes does (common/common.cpp:644-679): "
         "\\n \\r \\t \\' \\\" \\\\ and \\xHH become their character, any other backslash stays",
         action="store_true", default=True, shown="on", group="prompt",
         commands=PROMPTED + ("perplexity",),
         per_command={"perplexity": dict(default=False, shown="off, as llama-perplexity sets it")}),
    Flag(("--no-escape",), "escape", "keep the backslashes of the prompt as they are",
         action="store_false", group="prompt", commands=PROMPTED + ("perplexity",)),
    # length and context
    Flag(("-n", "--predict", "--n-predict"), "n_predict",
         "tokens to generate; -1: until the end of generation or a full context", default=64,
         type=int, master=-1, metavar="N", why="the default command ends in seconds on a laptop",
         note="0 and values below -1 are refused (master's speculative-simple still runs one round "
              "with 0)", commands=GEN + ("demo",),
         per_command={"demo": dict(help="tokens each run generates", master=SAME, why="", note="")}),
    Flag(("-c", "--ctx-size"), "ctx_size", "context size in tokens; 0: the model's training context "
         "(n_ctx_train, from the GGUF)", default=2048, type=int, master=0, metavar="N",
         why="small KV caches on a laptop, where 0 is 8192 tokens for smollm2-135m",
         commands=GEN + ("perplexity",),
         per_command={"perplexity": dict(help="tokens per scored chunk; 0: the model's training "
                                              "context", default=512, master=SAME, why="")}),
    Flag(("-t", "--threads"), "threads", "CPU threads; <= 0: every core", type=_threads, metavar="N",
         group="compute", shown="every core Numba may use", master="the physical cores",
         commands=COMPUTED),
    Flag(("--backend",), "backend", "compute backend (auto: cuda when a GPU is found, else cpu)",
         default="cpu", choices=("auto", "cpu", "cuda"), group="compute", master=ABSENT,
         commands=COMPUTED),
    Flag(("--activations",), "activations", "CPU matrix products: q8 = activations rounded to int8 "
         "blocks as llama.cpp's CPU backend does, the fast path; f32 = float32 activations, the exact "
         "reference path that agrees with the NumPy oracle (several times slower). CUDA: f32 only",
         choices=("q8", "f32"), group="compute", shown="q8 on the CPU, f32 on CUDA", master=ABSENT,
         commands=GEN + ("perplexity", "demo", "costs")),
    Flag(("--json",), "json", "print one JSON object", action="store_true", default=False,
         group="compute", master=ABSENT, commands=COMPUTED + ("tokenize",)),
    # master's offload, attention and log flags (its README's command lines use them)
    Flag(("-ngl", "--gpu-layers", "--n-gpu-layers"), "n_gpu_layers", "layers stored in VRAM: N, "
         "auto or all", type=_layers, metavar="N", group="llama.cpp", shown="auto",
         note=f"{NO_EFFECT}: --backend runs the whole model on one device"),
    Flag(("--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"), "n_gpu_layers_draft",
         "draft model layers stored in VRAM: N, auto or all", type=_layers, metavar="N",
         group="llama.cpp", shown="auto", commands=SPEC,
         note=f"{NO_EFFECT}: the draft runs on --backend's device"),
    Flag(("-fa", "--flash-attn"), "flash_attn", "Flash Attention: on, off or auto",
         type=_on_off_auto("--flash-attn"), metavar="on|off|auto", group="llama.cpp", shown="auto",
         note=f"{NO_EFFECT}: one attention kernel (kernels/attention.py)"),
    Flag(("-lv", "--verbosity", "--log-verbosity"), "verbosity", "log verbosity threshold (0 output, "
         "1 error, 2 warning, 3 info, 4 trace, 5 debug)", type=int, metavar="N", group="llama.cpp",
         shown="3", note=f"{NO_EFFECT}: its output is fixed; speculative-simple prints the speculators' "
                         "statistics lines master prints at -lv 4 and above"),
    Flag(("--spec-draft-p-split", "--draft-p-split"), "draft_p_split", "speculative decoding split "
         "probability", type=float, metavar="P", group="llama.cpp", shown="0.1", commands=SPEC,
         note=f"{NO_EFFECT}, nor in master's llama-speculative-simple: only examples/speculative's "
              "draft tree reads it"),
    # sampling (common_params_sampling, common/common.h:223-270)
    Flag(("--temp", "--temperature"), "temp", "temperature; <= 0 = greedy", default=0.0,
         field="sampler.temp", to_field=_temp, master=0.8,
         why="greedy, so that the output compares token for token with plain decoding", **_NUM),
    Flag(("--top-k",), "top_k", "top-k, <= 0 = off", type=int, group="sampling",
         field="sampler.top_k", metavar="N"),
    Flag(("--top-p",), "top_p", "top-p, >= 1 = off (<= 0 keeps the most likely token)",
         field="sampler.top_p", **_NUM),
    Flag(("--min-p",), "min_p", "min-p, <= 0 = off (>= 1 keeps the most likely token)",
         field="sampler.min_p", **_NUM),
    Flag(("--typical", "--typical-p"), "typical", "locally typical sampling p, >= 1 = off (<= 0 keeps "
         "the most typical token)", field="sampler.typ_p", **_NUM),
    Flag(("--top-nsigma", "--top-n-sigma"), "top_n_sigma", "top-n-sigma, <= 0 = off",
         field="sampler.top_n_sigma", **_NUM),
    Flag(("--xtc-probability",), "xtc_probability", "XTC probability, <= 0 = off (>= 1: every step)",
         field="sampler.xtc_probability", **_NUM),
    Flag(("--xtc-threshold",), "xtc_threshold", "XTC threshold, > 0.5 = off",
         field="sampler.xtc_threshold", **_NUM),
    Flag(("--dynatemp-range",), "dynatemp_range", "dynamic temperature range, <= 0 = off",
         field="sampler.dynatemp_range", **_NUM),
    Flag(("--dynatemp-exp",), "dynatemp_exp", "dynamic temperature exponent",
         field="sampler.dynatemp_exponent", **_NUM),
    Flag(("--repeat-penalty",), "repeat_penalty", "repeat penalty, 1 = off",
         field="sampler.penalty_repeat", **_NUM,
         note="as master, a value that is not finite, <= 0 or whose inverse overflows is refused"),
    Flag(("--repeat-last-n",), "repeat_last_n", "tokens the penalties look back at, 0 = off",
         type=int, group="sampling", field="sampler.penalty_last_n", metavar="N",
         note="as master, a negative value is refused"),
    Flag(("--frequency-penalty",), "frequency_penalty", "frequency penalty, 0 = off",
         field="sampler.penalty_freq", **_NUM, note="as master, an infinite value is refused"),
    Flag(("--presence-penalty",), "presence_penalty", "presence penalty, 0 = off",
         field="sampler.penalty_present", **_NUM, note="as master, an infinite value is refused"),
    Flag(("--dry-multiplier",), "dry_multiplier", "DRY multiplier, 0 = off",
         field="sampler.dry_multiplier", **_NUM),
    Flag(("--dry-base",), "dry_base", "DRY base", field="sampler.dry_base", to_field=_dry_base,
         action="append", **_NUM, shown="1.75",
         note="as master, a value below 1 is ignored (the last one >= 1 stays), with a warning here"),
    Flag(("--dry-allowed-length",), "dry_allowed_length", "DRY: repeats longer than this are "
         "penalised", type=int, group="sampling", field="sampler.dry_allowed_length", metavar="N"),
    Flag(("--dry-penalty-last-n",), "dry_penalty_last_n", "DRY: tokens scanned for repeats, 0 = off",
         type=int, group="sampling", field="sampler.dry_penalty_last_n", metavar="N",
         note="as master, a negative value is refused"),
    Flag(("--dry-sequence-breaker",), "dry_sequence_breaker", "DRY sequence breaker; the first use "
         "replaces the defaults, 'none' removes all; may be repeated", action="append",
         group="sampling", field="sampler.dry_sequence_breakers", to_field=_dry_breakers,
         metavar="STRING", shown="\\n : \" *"),
    Flag(("--mirostat",), "mirostat", "0 = off, 1 = Mirostat, 2 = Mirostat 2.0", type=int,
         group="sampling", field="sampler.mirostat", metavar="N",
         note="other values refused: master aborts on them (GGML_ASSERT 'unknown mirostat version', "
              "common/sampling.cpp:408)"),
    Flag(("--mirostat-lr",), "mirostat_lr", "Mirostat learning rate, eta",
         field="sampler.mirostat_eta", **_NUM),
    Flag(("--mirostat-ent",), "mirostat_ent", "Mirostat target entropy, tau",
         field="sampler.mirostat_tau", **_NUM),
    Flag(("-l", "--logit-bias"), "logit_bias", "e.g. 15043+1 or 15043-inf; may be repeated; a token "
         "id outside the vocab changes nothing (warned about)", action="append", group="sampling",
         field="sampler.logit_bias", to_field=_logit_bias, metavar="TOKEN_ID(+/-)BIAS", shown="none",
         note="a NaN bias is refused; master adds it to the logit"),
    Flag(("--ignore-eos",), "ignore_eos", "ignore the end of generation: every end-of-generation token "
         "gets a -inf logit bias after -l's, as master's common_init_result (common/common.cpp:"
         "1340-1357); a vocab without an EOS token is warned about and left as it is",
         action="store_true", default=False, group="sampling"),
    Flag(("--samplers",), "samplers", "samplers in order, separated by ';'; an unknown name is warned "
         "about and skipped, as master does", group="sampling", field="sampler.samplers",
         to_field=_samplers, metavar="SAMPLERS",
         note="master's infill and adaptive_p are refused: not implemented in specnb"),
    Flag(("--sampler-seq", "--sampling-seq"), "sampler_seq", "the samplers as letters; an unknown "
         "letter is warned about and skipped, as master does", group="sampling",
         field="sampler.samplers", to_field=_sampler_seq, metavar="SEQUENCE", shown="edskypmxt",
         note="master's i (infill) and a (adaptive_p) are refused: not implemented in specnb"),
    Flag(("-s", "--seed"), "seed", "RNG seed; 4294967295 (or -1, which master's unsigned read wraps "
         "to it) = random", default=42, type=_seed, group="sampling", field="sampler.seed",
         metavar="SEED", master=4294967295, why="a sampled run repeats"),
    Flag(("--dist-draw",), "dist_draw", "draw the final token as llama.cpp master does, or as "
         "c392e50 did (needed to reproduce a c392e50 build's seeds)", choices=("master", "c392e50"),
         group="sampling", field="sampler.dist_draw", master=ABSENT),
    # speculative-simple: the draft model (common_params_speculative_draft, common/common.h:324-331)
    Flag(("--spec-draft-n-max",), "draft_max",
         "the draft model's tokens per round: N, its drafts cut to N. "
         f"{BEYOND}: auto[:CAP] chooses each round's length 0..CAP (default 16) from the costs this run "
         "measures, starting from the pair's costs record where one is recorded (`specnb costs`; "
         "specnb.speculation.auto); heuristic[:CAP] follows transformers' schedule "
         "(start 20, +2 after a fully accepted draft, else -1; CAP default 64)",
         type=_draft_max, group="speculative", field="spec.n_max",
         metavar="N|auto[:CAP]|heuristic[:CAP]", commands=SPEC, bounds=(0, DRAFT_N_MAX_LIMIT),
         note=f"specnb accepts at most {DRAFT_N_MAX_LIMIT}, master any N >= 0; 0 still drafts one "
              "token, as master's draft loop pushes the token before it tests n_max "
              "(common/speculative.cpp:347-349), but master's llama-speculative-simple sizes the "
              "target's outputs from n_max and aborts on the first round that drafts "
              "(src/llama-context.cpp:2189); specnb runs it"),
    Flag(("--spec-draft-n-min",), "draft_min", "the draft model's fewest tokens: a shorter draft is "
         "dropped", type=int, group="speculative", field="spec.n_min", metavar="N",
         commands=SPEC, bounds=(0, None),
         note="a negative value is refused; master compares with (size_t) n_min, so there it drops "
              "every draft, as any value above --spec-draft-n-max does in both"),
    Flag(("--spec-draft-p-min", "--draft-p-min"), "draft_p_min", "stop drafting when the draft "
         "model's top probability is below P", type=float, group="speculative",
         field="spec.p_min", metavar="P", commands=SPEC),
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
         "implemented (the error says why). none, as master: 'failed to initialize speculative "
         "decoding', exit status 1", action="append", group="speculative",
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
         choices=("exact", "rejection"),
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
         "output is unchanged; 0: the whole vocabulary", type=int, group="speculative",
         field="spec.draft_vocab", metavar="N", commands=SPEC + ("costs",), master=ABSENT, bounds=(0, None)),
    Flag(("--no-seq-rm",), "no_seq_rm", "simulate a target memory that refuses partial removal "
         "(a recurrent one): checkpoints and replay, as master does for such models",
         action="store_true", default=False, group="speculative", commands=SPEC, master=ABSENT),
    Flag(("--no-seq-rm-draft",), "no_seq_rm_draft", "simulate a draft memory that refuses partial "
         "removal: the draft restores a checkpoint instead of removing its rejected rows. Master's "
         "llama-speculative-simple cannot do this beside a target that can remove rows: its seq_rm on "
         "the draft fails (speculative-simple.cpp:335) and the run ends with 'failed to process "
         "speculative batch'; with --no-seq-rm too, both restore checkpoints as master does",
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
         note="master's llama-speculative-simple aborts at init with draft-simple and -np > 1 (the "
              "draft context's n_seq differs from the one sequence it speculates, "
              "common/speculative.cpp:245-249); with n-gram types it decodes sequence 0 only"),
    Flag(("--spec-synth-rates",), "spec_synth_rates", "synthetic acceptance: exactly "
         "--spec-draft-n-max rates, comma-separated, each position's unconditional acceptance (the "
         "output is not text; for benchmarking the loop)", group="speculative",
         field="spec.synth_rates", to_field=_floats, metavar="R,R,...", commands=SPEC, shown="none",
         master=ABSENT),
    Flag(("--spec-synth-len",), "spec_synth_len", "synthetic acceptance: the mean accepted length L "
         "(the output is not text; for benchmarking the loop)", type=float, group="speculative",
         field="spec.synth_len", metavar="L", commands=SPEC, shown="none", master=ABSENT),
    Flag(("-co", "--color"), "color", "colour accepted draft tokens cyan, as master does: on, off or "
         "auto (on at a terminal)", default="auto", type=_on_off_auto("--color"), group="output",
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
             "length of the lookup n-gram", type=int, group=f"ngram-{t}",
             field=f"spec.ngram_{t.replace('-', '_')}_size_n", metavar="N", commands=SPEC,
             bounds=(1, NGRAM_SIZE_LIMIT)),
        Flag((f"--spec-ngram-{t}-size-m",), f"ngram_{t.replace('-', '_')}_size_m", _NGRAM_M,
             type=int, group=f"ngram-{t}", field=f"spec.ngram_{t.replace('-', '_')}_size_m",
             metavar="M", commands=SPEC, bounds=(1, NGRAM_SIZE_LIMIT)),
        Flag((f"--spec-ngram-{t}-min-hits",), f"ngram_{t.replace('-', '_')}_min_hits",
             "the fewest times a key and its value must have been seen" if t == "map-k4v" else
             "accepted as master does; only ngram-map-k4v reads it there (ngram-map.cpp:401-406), "
             "so no effect", type=int, group=f"ngram-{t}",
             field=f"spec.ngram_{t.replace('-', '_')}_min_hits", metavar="H", commands=SPEC,
             bounds=(1, MIN_HITS_LIMIT),
             note=f"above {MIN_HITS_LIMIT} refused: master stores the value in 16 bits, so larger "
                  "values wrap"),
    )
) + (
    Flag(("--spec-ngram-mod-n-match",), "ngram_mod_n_match", "length of the hashed n-gram",
         type=int, group="ngram-mod", field="spec.ngram_mod_n_match", metavar="N",
         commands=SPEC, bounds=(1, NGRAM_SIZE_LIMIT)),
    Flag(("--spec-ngram-mod-n-min",), "ngram_mod_n_min", "a draft shorter than N is dropped",
         type=int, group="ngram-mod", field="spec.ngram_mod_n_min", metavar="N", commands=SPEC,
         bounds=(0, NGRAM_SIZE_LIMIT)),
    Flag(("--spec-ngram-mod-n-max",), "ngram_mod_n_max", "the longest draft", type=int,
         group="ngram-mod", field="spec.ngram_mod_n_max", metavar="N", commands=SPEC,
         bounds=(0, NGRAM_SIZE_LIMIT)),
    # not llama-speculative-simple's at master (common/arg.cpp:4305-4325 are llama-server's only):
    # refused as master's parser refuses them, with what to use
    Flag(("--spec-ngram-size-n",), "removed", "", action="removed", group="removed", commands=SPEC,
         hint="llama-server refuses it as removed: use the respective --spec-ngram-*-size-n",
         master=ABSENT),
    Flag(("--spec-ngram-size-m",), "removed", "", action="removed", group="removed", commands=SPEC,
         hint="llama-server refuses it as removed: use the respective --spec-ngram-*-size-m",
         master=ABSENT),
    Flag(("--spec-ngram-min-hits",), "removed", "", action="removed", group="removed", commands=SPEC,
         hint="llama-server refuses it as removed: use the respective --spec-ngram-*-min-hits",
         master=ABSENT),
    Flag(("--spec-ngram-check-rate",), "removed", "", action="removed", group="removed",
         commands=SPEC, hint="an early-2026 build's flag, dropped without a stub: master looks up "
                             "every token", master=ABSENT),
)

# --help's groups, in order (None: the command's own options)
GROUPS = {
    "models": None, "prompt": None, "run": None, "compute": None,
    "llama.cpp": f"llama.cpp's offload, attention and log flags ({NO_EFFECT})",
    "sampling": "sampling (llama.cpp's flags and defaults, but --temp and --seed; see docs/llama_cpp.md; "
                "a NaN is refused wherever master takes a float: its samplers would compute NaN "
                "probabilities; so is a number followed by other characters, '0.5x', which master's "
                "std::stof reads as 0.5)",
    "speculative": "speculative decoding (master 34af94cd's flags, but where marked)",
    "ngram-simple": "ngram-simple (master 34af94cd's flags)",
    "ngram-map-k": "ngram-map-k (master 34af94cd's flags)",
    "ngram-map-k4v": "ngram-map-k4v (master 34af94cd's flags)",
    "ngram-mod": "ngram-mod (master 34af94cd's flags)",
    "output": "output", "removed": None,
}


def flags_of(command: str, groups=None) -> list[Flag]:
    """The flags `command` takes (as it takes them), only those of `groups` when given."""
    return [f.for_command(command) for f in FLAGS
            if command in f.commands and (groups is None or f.group in groups)]


def flag(name: str, command: str = "speculative-simple") -> Flag:
    """The Flag one of whose names is `name`."""
    return next(f for f in flags_of(command) if name in f.names)
