"""The flag table (specnb/app/flags.py) against what it feeds and what it states: the dataclasses'
defaults, `--help`, docs/commands.md, and llama.cpp master 34af94cd's defaults and ranges
(tests/data/master_34af94cd_spec_args.json). Each difference from master is either master's
behaviour here or stated in the flag's help line; the last tests check the six the fidelity review
listed, one by one."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from specnb.app import flags as F
from specnb.app.cli import build_parser, main
from specnb.errors import ParamError
from specnb.run.sampling import SamplerParams
from specnb.speculation.params import SpecParams

ROOT = Path(__file__).resolve().parents[1]
MASTER = json.loads((ROOT / "tests" / "data" / "master_34af94cd_spec_args.json").read_text())


def _sub(name):
    return build_parser()._subparsers._group_actions[0].choices[name]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _master_entries():
    """(names, master's default) of every flag the data gives a default for."""
    out = [((k,), v) for k, v in MASTER["defaults"].items() if k != "source"]
    return out + [(tuple(f["names"]), f["default"]) for f in MASTER["common_flags"]["flags"]]


# ---- the table against the dataclasses ---------------------------------------------------------------
@pytest.mark.parametrize("f", [f for f in F.FLAGS if f.field], ids=lambda f: f.names[0])
def test_field_defaults_are_the_dataclasses_or_stated(f):
    """A flag's default is its field's dataclass default (master's: SamplerParams and SpecParams keep
    llama.cpp's), or specnb's, stated in the help line next to master's."""
    cls = SamplerParams if f.kind == "sampler" else SpecParams
    assert f.field_name in cls.__dataclass_fields__, f.field
    if F.effective_default(f) != F.field_default(f):
        assert f.master not in (F.SAME, F.ABSENT) and f.master == F.field_default(f), f.names
        assert "specnb's" in F.help_line(f) and f"master: {F._fmt(f.master)}" in F.help_line(f)


def test_no_flag_is_mapped_by_hand():
    """Every field the commands set comes from a table row; parsing nothing gives the dataclasses'
    values, but for the stated defaults."""
    a = _sub("speculative-simple").parse_args([])
    sp, smp = F.build(a, "spec", SpecParams), F.build(a, "sampler", SamplerParams)
    ref = SpecParams().validate()
    for t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):    # None there: the shared 12 / 48 / 1
        assert sp.ngram_knobs(t) == ref.ngram_knobs(t)
    per_type = {k for k in SpecParams.__dataclass_fields__ if re.match(r"ngram_(simple|map_k|map_k4v)_", k)}
    assert {k: v for k, v in vars(sp).items() if k not in per_type} == \
        {k: v for k, v in vars(ref).items() if k not in per_type}
    assert smp == SamplerParams(temp=0.0, seed=42).validate()
    kinds = {f.kind for f in F.FLAGS}
    assert kinds == {None, "sampler", "spec"}
    assert len({f.names[0] for f in F.FLAGS}) == len(F.FLAGS)


def test_choices_are_the_librarys():
    from specnb.speculation.loop import STOP_RULES
    from specnb.speculation.verify import VERIFY_MODES
    assert F.flag("--verify").choices == VERIFY_MODES
    assert F.flag("--stop").choices == STOP_RULES


@pytest.mark.parametrize("f", [f for f in F.FLAGS if f.bounds], ids=lambda f: f.names[0])
def test_bounds_are_what_the_validators_accept(f):
    """The table's bounds are the validators' (both import the limits from speculation/limits.py), and
    a refusal names its field (ParamError.field), which build() maps to the flag."""
    lo, hi = f.bounds
    SpecParams(**{f.field_name: lo}).validate()
    with pytest.raises(ParamError) as e:
        SpecParams(**{f.field_name: lo - 1}).validate()
    assert e.value.field == f.field_name
    if hi is not None:
        SpecParams(**{f.field_name: hi}).validate()
        with pytest.raises(ParamError) as e:
            SpecParams(**{f.field_name: hi + 1}).validate()
        assert e.value.field == f.field_name


def test_limits_are_defined_once():
    """256, 1024 and 65535 are written in speculation/limits.py only: no comparison and no flag's
    bounds elsewhere spells one out; the table and the validators import them."""
    import ast
    from specnb.speculation import limits as L
    limits = {L.DRAFT_N_MAX_LIMIT: 256, L.NGRAM_SIZE_LIMIT: 1024, L.MIN_HITS_LIMIT: 65535}
    assert set(limits) == set(limits.values())
    for path in ("specnb/app/flag_table.py", "specnb/app/flags.py", "specnb/speculation/params.py",
                 "specnb/speculation/impl.py",
                 "specnb/speculation/draft_len.py", "specnb/speculation/ngram.py",
                 "specnb/speculation/ngram_mod.py"):
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.keyword) and node.arg == "bounds":
                operands = list(getattr(node.value, "elts", []))
            else:
                continue
            assert not any(isinstance(o, ast.Constant) and o.value in limits for o in operands), \
                (path, node.lineno if hasattr(node, "lineno") else node.value.lineno)


# ---- the table against master's facts ---------------------------------------------------------------
@pytest.mark.parametrize("names,want", _master_entries(), ids=lambda x: str(x))
def test_defaults_are_masters_or_stated(names, want):
    f = F.flag(names[0])
    assert set(names) <= set(f.names), (names, f.names)          # master's every name
    if f.master == F.SAME:
        got = F.effective_default(f)
        assert got == want or (isinstance(want, float) and math.isclose(got, want)), (names, got, want)
    else:
        assert f.master == want, (names, f.master, want)
        assert "specnb's" in F.help_line(f) and f"master: {F._fmt(want)}" in F.help_line(f)


@pytest.mark.parametrize("name", [k for k in MASTER["ranges"] if k != "source"])
def test_ranges_are_masters_or_stated(name):
    r = MASTER["ranges"][name]
    f = F.flag(name)
    if (f.bounds or (None, None)) != (r["min"], r["max"]):
        assert f.note and "master" in f.note and f.note in F.help_line(f), name


def test_draft_p_min_takes_any_number_as_master():
    for p in (-1.0, 0.0, 1.5, math.inf, math.nan):
        assert SpecParams(p_min=p).validate().p_min is p
    assert SpecParams(n_min=7, n_max=3).validate().n_min == 7      # master: every draft dropped


# ---- --help and docs/commands.md -------------------------------------------------------------------
@pytest.mark.parametrize("command", ["generate", "speculative-simple", "tokenize", "perplexity", "bench",
                                     "demo"])
def test_help_lists_every_flag_with_its_help_line(command):
    text = _squash(_sub(command).format_help())
    for f in F.flags_of(command):
        if f.action == "removed":
            assert not any(n in text for n in f.names if len(n) > 12), f.names
            continue
        for n in f.names:
            assert n in text, n
        assert _squash(F.help_line(f)) in text, f.names


def test_extensions_are_labelled():
    """Options and meanings master lacks start their help with BEYOND; --verify has a help line."""
    for name in ("--verify", "--no-reeval", "--no-seq-rm", "--no-seq-rm-draft", "--stop",
                 "--penalize-prompt", "--spec-synth-rates", "--spec-synth-len", "-np", "--dist-draw",
                 "--chat", "--backend", "--activations", "--json", "-lcs", "-lcd"):
        assert F.help_line(F.flag(name)).startswith(F.BEYOND), name
    h = F.help_line(F.flag("--spec-draft-n-max"))
    assert f"{F.BEYOND}: auto[:CAP]" in h and "heuristic[:CAP]" in h.split(F.BEYOND)[1]
    assert "speculative sampling" in F.help_line(F.flag("--verify"))
    for name in ("--spec-draft-p-min", "--spec-ngram-mod-n-max", "--top-k", "-p"):   # master's own
        assert F.BEYOND not in F.help_line(F.flag(name)), name


def test_verify_says_which_mode_is_whose():
    """--verify has a help line naming exact as llama.cpp's verification and rejection as specnb's
    (lossless in distribution, not token for token)."""
    f = F.flag("--verify")
    assert f.help.strip() and F.help_line(f).startswith(F.BEYOND)
    assert "exact = llama.cpp's" in f.help and "rejection = specnb's" in f.help, f.help
    assert "same distribution but not the same tokens" in f.help, f.help
    text = _squash(_sub("speculative-simple").format_help())
    assert _squash(F.help_line(f)) in text


def test_docs_flag_list_is_the_table():
    """docs/commands.md holds docs_section() verbatim (regenerate: python -m specnb.app.flags
    docs/commands.md)."""
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert F.docs_section() in text
    rows = [line for line in F.docs_section().splitlines() if line.startswith("| `")]
    assert len(rows) == len([f for f in F.flags_of("speculative-simple") if f.action != "removed"])


# ---- the six differences of the review (reviews/fidelity.md §2.1, §2.6) ------------------------------
def test_n_and_c_defaults_are_stated_and_masters_values_work(tiny_path, capsys):
    """-n 64 and -c 2048 stay specnb's (stated); master's -n -1 and -c 0 mean what they mean there."""
    for name, master in (("-n", -1), ("-c", 0)):
        h = F.help_line(F.flag(name))
        assert "specnb's" in h and f"master: {master}" in h
    t = tiny_path("Q8_0", seed=11)
    assert main(["generate", "-m", t, "-p", "the cat", "-n", "-1", "-c", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)       # the tiny model's n_ctx_train is 512
    assert out["stop_reason"] in ("eog", "context_full") and 16 < len(out["tokens"]) < 512
    assert main(["generate", "-m", t, "-p", "x", "-n", "0"]) == 2
    assert "-n/--predict/--n-predict: invalid n_predict=0" in capsys.readouterr().err


def test_repeated_spec_type_adds_up_as_master():
    p = _sub("speculative-simple")

    def types(*args):
        return F.build(p.parse_args(list(args)), "spec", SpecParams).resolved_types(True)
    assert types("--spec-type", "draft-simple", "--spec-type", "ngram-simple") == \
        ("ngram-simple", "draft-simple")
    assert types("--spec-type", "ngram-mod,ngram-simple", "--spec-type", "ngram-simple") == \
        ("ngram-simple", "ngram-mod")
    # `none` inside one list empties that list only (common_speculative_types_from_names)
    assert types("--spec-type", "none", "--spec-type", "ngram-simple") == ("ngram-simple",)
    assert types("--spec-type", "ngram-simple,none") == ()
    assert types() == ("draft-simple",)                          # the stated c392e50 rule
    assert "adds its types, as in master" in F.help_line(F.flag("--spec-type"))


def test_draft_n_max_zero_is_stated():
    h = F.help_line(F.flag("--spec-draft-n-max"))
    assert "0 still drafts one token" in h
    assert MASTER["draft_n_max_zero"]["source"].startswith("common/speculative.cpp:335-354")


def test_refused_ranges_are_named_by_their_flag(tiny_path, capsys):
    t = tiny_path("Q8_0", seed=11)
    for args, msg in ((["--spec-draft-n-max", "300"], "--spec-draft-n-max: invalid draft_max=300"),
                      (["--spec-draft-n-min", "-2"], "--spec-draft-n-min: invalid draft_min=-2"),
                      (["--spec-ngram-map-k4v-min-hits", "65536"],
                       "--spec-ngram-map-k4v-min-hits: invalid ngram_map_k4v_min_hits=65536"),
                      (["-l", "5"], "-l/--logit-bias: invalid logit_bias='5'")):
        assert main(["speculative-simple", "-m", t, "-md", t, "-p", "x", *args]) == 2
        assert msg in capsys.readouterr().err, args
    with pytest.raises(SystemExit) as e:                 # argparse's own: the flag and the value
        main(["speculative-simple", "--top-k", "x"])
    assert e.value.code == 2 and "argument --top-k: invalid int value: 'x'" in capsys.readouterr().err


def _wider_vocab(src, dst, k=4):
    """A copy of `src` with k more tokens (user-defined `<|extra_i|>`, embedding rows copied):
    a target whose vocab passes the gate (k <= 128) yet holds ids the draft cannot decode."""
    from specnb.gguf import forge
    from specnb.gguf.file import GGUFFile
    g = GGUFFile(src)
    md = {"tokenizer.ggml.tokens": list(g.get("tokenizer.ggml.tokens")) + [f"<|extra_{i}|>" for i in range(k)],
          "tokenizer.ggml.token_type": np.concatenate([np.asarray(g.get("tokenizer.ggml.token_type")),
                                                       np.full(k, 4, np.int32)])}

    def rows(t, raw):
        return (np.concatenate([raw, raw[-k:]]) if t.name == "token_embd.weight" else raw), t.qtype
    return forge.rewrite(src, dst, metadata=md, tensor_fn=rows)


def test_token_outside_the_draft_vocab_ends_as_master(tiny_path, tmp_path, capsys):
    """Master: "failed to process speculative batch", then the statistics, exit 0
    (speculative-simple.cpp:237-240); in the prompt, "failed to process speculative prompt" and exit
    1 (:135-138)."""
    from specnb.model import load_model
    d = tiny_path("Q8_0", seed=11)
    t = _wider_vocab(d, tmp_path / "wider.gguf")
    extra = load_model(d).n_vocab                           # the first id the draft lacks
    fb = MASTER["failed_batch"]
    # the target is made to pick the extra token first: the next round's draft cannot read it
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "the cat sat", "-n", "8",
                 "-l", f"{extra}+100"]) == 0
    cap = capsys.readouterr()
    assert fb["batch_message"] in cap.err and "Traceback" not in cap.err
    assert "<|extra_0|>" in cap.out and "n_predict = 1" in cap.err and "statistics     draft-simple" in cap.err
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "the cat sat", "-n", "8", "--json",
                 "-l", f"{extra}+100"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == [extra] and out["error"] == fb["batch_message"] and out["n_rounds"] == 1
    assert out["impls"][0]["n_call_draft"] == 2          # the failed draft counted, as master counts it
    # the prompt's last token is id_last: the first draft fails, as in master
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "the cat<|extra_1|>", "-n", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == [] and out["impls"][0]["n_call_draft"] == 1
    # earlier in the prompt: the draft cannot process the prompt
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "the<|extra_1|> cat", "-n", "8"]) == \
        fb["prompt_exit"]
    assert fb["prompt_message"] in capsys.readouterr().err


def test_stop_c392e50_states_its_defaults_are_not_applied():
    h = F.help_line(F.flag("--stop"))
    assert "--draft-max 16 --draft-p-min 0.75" in h and "not applied" in h
    a = _sub("speculative-simple").parse_args(["--stop", "c392e50"])
    sp = F.build(a, "spec", SpecParams)
    assert (sp.n_max, sp.p_min) == (3, 0.0)                     # master's, not c392e50's 16 / 0.75


# ---- the sampler flags against master's ranges (the JSON's sampler_ranges) -------------------------------
SAMPLER_RANGES = {k: v for k, v in MASTER["sampler_ranges"].items() if k != "source"}


def _master_takes(r) -> list[str]:
    """Values master's handler for a sampling flag accepts, outside the usual ranges included."""
    if r["parse"] == "stof":
        probes = ["-5", "-0.5", "0", "0.5", "1.5", "5", "1e30", "inf", "-inf", "nan"]
        out = []
        for p in probes:
            v = np.float32(float(p))
            if r.get("finite") and not np.isfinite(v):
                continue
            if r["min"] is not None and (v <= r["min"] if r.get("min_exclusive") else v < r["min"]):
                continue
            with np.errstate(divide="ignore", over="ignore"):
                if r.get("inverse_finite") and not np.isfinite(np.float32(1) / v):
                    continue
            out.append(p)
        return out
    if r["parse"] == "int":
        return [p for p in ("-5", "-1", "0", "1", "3", "100000") if r["min"] is None or int(p) >= r["min"]]
    return {"stoul": ["-1", "-5", "0", "4294967295", "4294967296", "18446744073709551615"],
            "an int token id, a sign, a stof bias": ["5+1", "5 + 1", "-3+1", "999999-inf", "5+nan"],
            "names separated by ';'": ["top_k;bogus", "", "infill", "adaptive_p;temperature"],
            "letters": ["kzt", "", "i", "a"]}[r["parse"]]


def _stated(f, value: str) -> bool:
    """A refusal of a value master takes is stated: NaN once, in the sampling group's title; the
    others in the flag's note, beside what master does."""
    if value.strip().split("+")[-1].split("-")[-1].strip() == "nan":
        return "NaN is refused" in F.GROUPS["sampling"] or ("NaN" in f.note and "refused" in f.note)
    return "refused" in f.note and "master" in f.note


@pytest.mark.parametrize("name", sorted(SAMPLER_RANGES))
def test_sampler_values_master_takes_are_taken_or_stated(name, recwarn):
    """Every value master's handler accepts is accepted (and builds a sampler), or its refusal is
    stated in --help: master aborts on it, or it cannot mean anything (NaN)."""
    from specnb.app.cli import sampler_params
    from specnb.run.sampling import Sampler
    r, f = SAMPLER_RANGES[name], F.flag(name)
    assert name in f.names and f.field, name
    refused = []
    for value in _master_takes(r):
        try:
            Sampler(sampler_params(_sub("generate").parse_args([name, value])), n_vocab=16)
        except (ParamError, SystemExit):
            refused.append(value)
    for value in refused:
        assert _stated(f, value), (name, value, f.note)
    if "aborts_unless" in r:             # master aborts at init on these: refusing them is stated
        assert "aborts" in f.note and refused


def test_help_states_the_nan_refusal():
    text = _squash(_sub("generate").format_help())
    assert _squash(F.GROUPS["sampling"]) in text and "NaN is refused" in F.GROUPS["sampling"]
