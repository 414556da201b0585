"""A llama.cpp user's command lines run unchanged, read as master 34af94cd reads them
(tests/data/master_34af94cd_spec_args.json): the prompt's escapes (the function itself:
tests/test_escapes.py), master's README command for speculative-simple, the offload and log flags,
the sampler values master takes, where the statistics print, and what master cannot do, said."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from specnb.app import flags as F
from specnb.app.flag_table import NO_EFFECT
from specnb.app.cli import build_parser, main
from specnb.vocab.textio import process_escapes

DATA = Path(__file__).parent / "data"
MASTER = json.loads((DATA / "master_34af94cd_spec_args.json").read_text())


def _sub(name):
    return build_parser()._subparsers._group_actions[0].choices[name]


def _json(capsys, *args):
    assert main(list(args) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---- escapes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["generate", "speculative-simple", "tokenize", "perplexity"])
def test_escapes_default_as_each_master_tool(command):
    fact = MASTER["escape"]
    want = fact["defaults_by_tool"].get(command, fact["default"])
    assert _sub(command).parse_args([]).escape is want
    assert _sub(command).parse_args(["--no-escape"]).escape is False
    assert _sub(command).parse_args(["-e"]).escape is True and _sub(command).parse_args(["--escape"]).escape


def test_prompt_and_file_escapes_as_master(tiny_path, tmp_path, capsys):
    """-p and -f's contents get their escapes processed (a file's final newline dropped first, as
    master's -f does); --no-escape keeps the bytes; tokenize reads -f whole, then escapes it."""
    from specnb.model import load_model
    m = tiny_path("Q8_0")
    v = load_model(m, vocab_only=True).vocab
    raw = "say \\\"hi\\\"\\n\\tdone \\x41\\\\ \\q"
    meant = "say \"hi\"\n\tdone A\\ \\q"
    assert process_escapes(raw.encode()) == meant.encode()
    f = tmp_path / "p.txt"
    f.write_bytes(raw.encode() + b"\n")
    for src in (["-p", raw], ["-f", str(f)]):
        assert _json(capsys, "generate", "-m", m, *src, "-n", "1")["n_prompt"] == len(v.tokenize(meant))
        assert _json(capsys, "generate", "-m", m, *src, "-n", "1", "--no-escape")["n_prompt"] == \
            len(v.tokenize(raw))
        assert _json(capsys, "speculative-simple", "-m", m, "-md", m, *src, "-n", "2")["n_prompt"] == \
            len(v.tokenize(meant))
    assert _json(capsys, "tokenize", "-m", m, "-f", str(f))["ids"] == v.tokenize(meant + "\n")
    assert _json(capsys, "tokenize", "-m", m, "-f", str(f), "--no-escape")["ids"] == v.tokenize(raw + "\n")
    assert _json(capsys, "tokenize", "-m", m, "-p", "\\xff")["ids"] == v.tokenize(b"\xff")


def test_dry_breakers_are_escaped_as_master():
    from specnb.app.cli import sampler_params
    p = sampler_params(_sub("generate").parse_args(["--dry-sequence-breaker", "\\n",
                                                    "--dry-sequence-breaker", "a\\tb"]))
    assert p.dry_sequence_breakers == ("\n", "a\tb")
    p = sampler_params(_sub("generate").parse_args(["--dry-sequence-breaker", "\\n", "--no-escape"]))
    assert p.dry_sequence_breakers == ("\\n",)
    p = sampler_params(_sub("generate").parse_args(["--dry-sequence-breaker", "\\xff"]))     # a byte, not text
    assert p.dry_sequence_breakers[0].encode("utf-8", "surrogateescape") == b"\xff"


# ---- master's README command ----------------------------------------------------------------------
def _readme_argv(target: str, draft: str) -> list[str]:
    """Master's README command for speculative-simple as a shell splits it, the Hugging Face
    repositories (-hf, -hfd) given by specnb's model names (-m, -md)."""
    text = MASTER["readme_command"]["text"]
    argv = shlex.split("\n".join(line for line in text.splitlines() if not line.startswith("#"))
                       .replace("\\\n", " "))
    assert argv[0].endswith("llama-speculative-simple")
    argv = argv[1:]
    for hf, ours, name in (("-hf", "-m", target), ("-hfd", "-md", draft)):
        i = argv.index(hf)
        argv[i:i + 2] = [ours, name]
    return argv


def test_readme_command_parses_with_every_flag():
    argv = _readme_argv("smollm2-135m", "smollm2-135m-q4_0")
    a = _sub("speculative-simple").parse_args(argv)
    assert (a.n_gpu_layers, a.n_gpu_layers_draft, a.verbosity, a.color) == (99, 99, 4, "on")
    assert "\\n\\n#include" in a.prompt                    # the shell leaves the escapes to the program


@pytest.mark.slow
def test_readme_command_runs_unchanged_and_reads_newlines():
    """The command as typed (the models by name): exit 0, the prompt printed with two newlines
    before #include, at most 256 tokens (the model may end first), the statistics on stderr,
    master's draft length 7."""
    argv = _readme_argv("smollm2-135m", "smollm2-135m-q4_0")
    r = subprocess.run([sys.executable, "-m", "specnb", "speculative-simple", *argv], capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("Here is a quick sort implementation in C++. Just code, no comments:\n\n#include")
    assert "\\n" not in r.stdout and "\x1b[36m" in r.stdout            # --color on: master's cyan
    n_predict = int(re.search(r"^n_predict = (\d+)$", r.stderr, re.M).group(1))
    assert "n_draft   = 7" in r.stderr and 0 < n_predict <= 256 and "n_predict" not in r.stdout
    assert "statistics     draft-simple" in r.stderr


# ---- flags master's command lines use ------------------------------------------------------------
def test_offload_attention_and_log_flags_change_nothing(tiny_path, capsys):
    m = tiny_path("Q8_0", seed=3)
    plain = _json(capsys, "generate", "-m", m, "-p", "the cat", "-n", "6")["tokens"]
    for extra in (["-ngl", "99"], ["--gpu-layers", "all"], ["-fa", "on"], ["--flash-attn", "auto"],
                  ["-lv", "4"], ["--verbosity", "0"]):
        assert _json(capsys, "generate", "-m", m, "-p", "the cat", "-n", "6", *extra)["tokens"] == plain
    spec = ["speculative-simple", "-m", m, "-md", m, "-p", "the cat", "-n", "6"]
    for extra in (["-ngld", "99"], ["--spec-draft-ngl", "auto"], ["--spec-draft-p-split", "0.3"]):
        assert _json(capsys, *spec, *extra)["tokens"] == plain
    for flag in ("-ngl", "-ngld", "-fa", "-lv", "--spec-draft-p-split"):
        assert NO_EFFECT in F.help_line(F.flag(flag)), flag
    for bad, msg in ((["-fa", "maybe"], "unknown value for --flash-attn: 'maybe'"),
                     (["-ngl", "x"], "argument -ngl")):
        with pytest.raises(SystemExit):
            main(["generate", *bad])
        assert msg in capsys.readouterr().err


def test_ignore_eos_as_master(tiny_path, capsys):
    """--ignore-eos puts -inf on every end-of-generation token after -l's biases: a run the biases
    would end at its first token goes on to -n."""
    from specnb.model import load_model
    m = tiny_path("Q8_0", seed=3)
    v = load_model(m, vocab_only=True).vocab
    assert v.eos_id >= 0
    force = ["-l", f"{v.eos_id}+100"]
    for cmd in (["generate", "-m", m], ["speculative-simple", "-m", m, "-md", m]):
        assert _json(capsys, *cmd, "-p", "the cat", "-n", "6", *force)["stop_reason"] == "eog"
        out = _json(capsys, *cmd, "-p", "the cat", "-n", "6", *force, "--ignore-eos")
        assert len(out["tokens"]) == 6 and not set(out["tokens"]) & v.eog_ids


# ---- sampler values master takes, doing what master does -----------------------------------------
def test_negative_temperature_is_greedy_and_seed_minus_one_is_random(tiny_path, capsys):
    m = tiny_path("Q8_0", seed=3)
    greedy = _json(capsys, "generate", "-m", m, "-p", "the cat", "-n", "8", "--temp", "0")["tokens"]
    assert _json(capsys, "generate", "-m", m, "-p", "the cat", "-n", "8", "--temp", "-1")["tokens"] == greedy
    seeds = {_json(capsys, "generate", "-m", m, "-p", "x", "-n", "1", "--temp", "1", "-s", "-1")["seed"]
             for _ in range(3)}
    assert len(seeds) > 1 and 4294967295 not in seeds
    assert _json(capsys, "generate", "-m", m, "-p", "x", "-n", "1", "-s", "4294967301")["seed"] == 5


def test_sampler_values_outside_the_usual_ranges_act_as_master():
    """top-p >= 1 and typical >= 1 are off, min-p <= 0 off; top-p <= 0, min-p > 1 keep only the most
    likely token and typical <= 0 the most typical one (src/llama-sampler.cpp, see the JSON)."""
    import numpy as np
    from specnb.app.cli import sampler_params
    from specnb.run.sampling import Sampler

    def chain(*args):
        return Sampler(sampler_params(_sub("generate").parse_args(["--temp", "1", *args])), n_vocab=8)
    assert "?top-p" in chain("--top-p", "1.5").describe() and "?typical" in chain("--typical", "2").describe()
    assert "?min-p" in chain("--min-p", "-1").describe() and "?xtc" in chain("--xtc-probability", "-1").describe()
    logits = np.float32([0.1, 2.0, 0.3, 1.9, -1.0, 0.0, 0.5, 1.0])
    for args in (["--top-p", "-1"], ["--top-p", "0"], ["--min-p", "1.5"]):
        assert chain(*args).distribution_logits(logits).ids.tolist() == [1], args
    assert len(chain("--typical", "0").distribution_logits(logits).ids) == 1


def test_unknown_sampler_names_are_warned_about_and_skipped():
    from specnb.app.cli import sampler_params
    with pytest.warns(UserWarning, match="unable to match sampler by name 'bogus'"):
        p = sampler_params(_sub("generate").parse_args(["--samplers", "top_k;bogus;temp"]))
    assert p.samplers == ("top_k", "temperature")
    with pytest.warns(UserWarning, match="unable to match sampler by char 'z'"):
        assert sampler_params(_sub("generate").parse_args(["--sampler-seq", "kzt"])).samplers == \
            ("top_k", "temperature")


# ---- streams and numbers --------------------------------------------------------------------------
def test_text_on_stdout_statistics_on_stderr(tiny_path, capsys):
    m = tiny_path("Q8_0", seed=3)
    assert main(["speculative-simple", "-m", m, "-md", m, "-p", "the cat", "-n", "6"]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("the cat") and cap.out.endswith("\n\n")
    for word in ("encoded", "decoded", "n_draft", "accept", "statistics", "draft:", "target:", "common_perf_print"):
        assert word not in cap.out and word in cap.err, word


def test_nothing_drafted_prints_masters_nan(tiny_path, capsys):
    """p_min above 1 drafts nothing: master's 100.0f * 0 / 0 prints as -nan (x86 glibc)."""
    m = tiny_path("Q8_0", seed=3)
    assert main(["speculative-simple", "-m", m, "-md", m, "-p", "the cat", "-n", "4",
                 "--spec-draft-p-min", "2"]) == 0
    err = capsys.readouterr().err
    assert "n_drafted = 0" in err and "accept    = -nan%" in err


# ---- what master cannot do, said ------------------------------------------------------------------
def test_spec_type_none_exits_as_master(tiny_path, capsys):
    m = tiny_path("Q8_0", seed=3)
    msg = MASTER["no_spec_type"]["message"]
    for types in (["--spec-type", "none"], ["--spec-type", "ngram-simple,none"]):
        assert main(["speculative-simple", "-m", m, "-md", m, "-p", "x", *types]) == 1
        assert capsys.readouterr().err.strip() == msg
    assert msg in F.help_line(F.flag("--spec-type"))


def test_colours_as_master(tiny_path, capsys):
    """-co takes on, off or auto (and master's other spellings), no bare -co; accepted draft tokens
    print cyan, then master's white."""
    m = tiny_path("Q8_0", seed=3)
    prompt = "the cat sat on the mat, the cat sat on the mat, the cat sat on"
    assert main(["speculative-simple", "-m", m, "-md", m, "-p", prompt, "-n", "12", "-co", "on"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[36m" in out and "\x1b[37m" in out and "\x1b[32m" not in out and "\x1b[0m" not in out
    assert main(["speculative-simple", "-m", m, "-md", m, "-p", prompt, "-n", "12", "--color", "false"]) == 0
    assert "\x1b[" not in capsys.readouterr().out
    for spelling, want in (("enabled", "on"), ("0", "off"), ("-1", "auto")):
        assert _sub("speculative-simple").parse_args(["-co", spelling]).color == want
    with pytest.raises(SystemExit):
        _sub("speculative-simple").parse_args(["-co"])
    with pytest.raises(SystemExit):
        _sub("speculative-simple").parse_args(["-co", "green"])
    assert "unknown value for --color: 'green'" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--spec-ngram-size-n", "--spec-ngram-check-rate"])
def test_flags_master_does_not_take_are_refused_as_its_parser_does(flag, capsys):
    with pytest.raises(SystemExit) as e:
        _sub("speculative-simple").parse_args([flag, "3"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid argument: {flag}, as llama-speculative-simple at master 34af94cd says" in err
    assert "removed at llama.cpp master" not in err


def test_what_master_cannot_do_is_said():
    """n-max 0 aborts master's program, -np > 1 with draft-simple aborts at init, a draft that cannot
    drop rows beside a target that can ends master's run: each said in --help."""
    h = {n: F.help_line(F.flag(n)) for n in ("--spec-draft-n-max", "-np", "--no-seq-rm-draft")}
    assert "aborts on the first round that drafts (src/llama-context.cpp:2189)" in h["--spec-draft-n-max"]
    assert "aborts at init with draft-simple and -np > 1" in h["-np"]
    assert "cannot do this" in h["--no-seq-rm-draft"] and "failed to process speculative batch" in \
        h["--no-seq-rm-draft"]
