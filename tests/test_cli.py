"""The command line: JSON outputs, exit codes, one-line errors without tracebacks."""
import json
import subprocess
import sys

import pytest

from specnb.gguf import forge
from specnb.app.cli import main


def run_cli(*args, timeout=600):
    p = subprocess.run([sys.executable, "-m", "specnb", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_bad_inputs_exit_2_without_traceback(tmp_path, tiny_path, capsys):
    notgguf = tmp_path / "x.gguf"
    notgguf.write_bytes(b"hello world, not a model" * 10)
    before = notgguf.read_bytes()
    cases = [
        (["generate", "-m", str(tmp_path / "missing.gguf"), "-p", "hi"], "not found"),
        (["generate", "-m", str(notgguf), "-p", "hi"], "magic"),
        (["generate", "-m", tiny_path("Q8_0"), "-p", "hi", "--mirostat", "3"], "mirostat=3"),
        (["generate", "-m", tiny_path("Q8_0"), "-p", "hi", "--repeat-penalty", "0"], "penalty_repeat=0"),
        (["generate", "-m", tiny_path("Q8_0"), "-p", "hi " * 100, "-c", "16"], "longer than the context"),
        (["generate", "-m", tiny_path("Q8_0"), "-p", "hi", "-t", "999"], "n_threads=999"),
        (["tokenize", "-m", tiny_path("Q8_0"), "-f", str(tmp_path / "nofile.txt")], "cannot read"),
        (["gate", tiny_path("Q8_0"), str(notgguf)], "magic"),
    ]
    for args, msg in cases:
        code = main(args)
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert msg in err, (args, err)
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
    assert notgguf.read_bytes() == before


def test_generate_json_and_tokenize(tiny_path, capsys):
    m = tiny_path("Q8_0")
    assert main(["generate", "-m", m, "-p", "the cat", "-n", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("tokens", "text", "n_prompt", "t_prompt_s", "t_gen_s"):
        assert k in out
    assert 1 <= len(out["tokens"]) <= 5
    assert main(["tokenize", "-m", m, "-p", "the cat", "--json"]) == 0
    ids = json.loads(capsys.readouterr().out)["ids"]
    assert main(["tokenize", "-m", m, "-p", "the cat", "--ids"]) == 0
    assert capsys.readouterr().out.strip() == "[" + ", ".join(map(str, ids)) + "]"


def test_gate_exit_codes(tiny_path, tmp_path, capsys):
    m = tiny_path("Q8_0")
    assert main(["gate", m, m]) == 0
    assert capsys.readouterr().out.strip().endswith("compatible")
    bad = forge.mutate_vocab(m, tmp_path / "bos.gguf", "bos-flag")
    assert main(["gate", m, bad]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("incompatible: BOS")


def test_speculative_simple_json(tiny_path, tmp_path, capsys):
    t = tiny_path("Q8_0", seed=11)
    d = forge.requantize(t, tmp_path / "d.gguf", "Q4_0")
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "the cat sat", "-n", "12",
                 "--json", "--draft-max", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("tokens", "text", "n_drafted", "n_accept", "n_rounds", "acc_rate_per_pos", "t_gen_s"):
        assert k in out
    assert out["n_accept"] <= out["n_drafted"]
    assert len(out["acc_rate_per_pos"]) == 4
    # same tokens as plain greedy decoding
    assert main(["generate", "-m", t, "-p", "the cat sat", "-n", "12", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == out["tokens"]
    # a negative draft-min is refused, naming the flag (master drops every draft with it) ...
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "x", "--spec-draft-n-min", "-1"]) == 2
    assert "--spec-draft-n-min: invalid draft_min=-1" in capsys.readouterr().err
    # ... while one above draft-max runs, as in master, and drops every draft; c392e50's names
    # (--draft-max above, --draft-min here) are aliases of master's
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", "the cat sat", "-n", "6", "--json",
                 "--draft-min", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_drafted"] == 0 and len(out["tokens"]) == 6


def test_speculative_simple_keeps_the_prompt_out_of_the_penalty_window(tiny_path, tmp_path, capsys):
    """As llama-speculative-simple: no prompt token in the penalty window, unless --penalize-prompt
    (then the text is `generate`'s, which penalizes the prompt as llama-cli does)."""
    from specnb.run.context import Context
    from specnb.run.generate import generate
    from specnb.model import load_model
    from specnb.run.sampling import Sampler, SamplerParams
    t = tiny_path("Q8_0", seed=11)
    d = forge.requantize(t, tmp_path / "d.gguf", "Q4_0")
    prompt = "the cat sat on the mat, the cat sat on the mat, the cat sat on"
    pen = ["--repeat-penalty", "1.5", "--temp", "0"]
    assert main(["generate", "-m", t, "-p", prompt, "-n", "12", "--json"] + pen) == 0
    with_prompt = json.loads(capsys.readouterr().out)["tokens"]
    m = load_model(t)
    without = generate(Context(m, n_ctx=128), Sampler(SamplerParams(temp=0.0, penalty_repeat=1.5)),
                       m.vocab.tokenize(prompt), 12, penalize_prompt=False).tokens
    assert with_prompt != without
    for flag, want in (([], without), (["--penalize-prompt"], with_prompt)):
        assert main(["speculative-simple", "-m", t, "-md", d, "-p", prompt, "-n", "12", "--json"]
                    + pen + flag) == 0
        assert json.loads(capsys.readouterr().out)["tokens"] == want, flag


def test_speculative_simple_spec_types(tiny_path, tmp_path, capsys):
    """--spec-type: the chain in llama.cpp's order, one statistics block per impl, in --json as
    `impls`; the n-gram types load no draft model; a draft memory without partial removal."""
    t = tiny_path("Q8_0", seed=11)
    d = forge.requantize(t, tmp_path / "d.gguf", "Q4_0")
    prompt = "the cat sat on the mat, the cat sat on the mat, the cat sat on"
    assert main(["generate", "-m", t, "-p", prompt, "-n", "16", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["tokens"]
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", prompt, "-n", "16", "--json",
                 "--spec-type", "draft-simple,ngram-simple", "--spec-ngram-simple-size-n", "1",
                 "--no-seq-rm-draft"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == plain and out["spec_types"] == ["ngram-simple", "draft-simple"]
    assert [i["type"] for i in out["impls"]] == ["ngram-simple", "draft-simple"]
    for i in out["impls"]:
        for k in ("n_drafted", "n_accept", "acc_rate_per_pos", "mean_acc_len", "n_call_accept"):
            assert k in i
    assert sum(i["n_drafted"] for i in out["impls"]) == out["n_drafted"]
    # the text layout: one llama.cpp statistics line per impl
    with pytest.warns(UserWarning, match="unused.gguf is not used"):
        assert main(["speculative-simple", "-m", t, "-p", prompt, "-n", "8", "--spec-type", "ngram-map-k",
                     "-md", str(tmp_path / "unused.gguf"), "--spec-ngram-map-k-size-n", "1"]) == 0
    text = capsys.readouterr().err
    assert text.count("statistics ") == 1 and "statistics      ngram-map-k: #calls(b,g,a)" in text
    assert "--stop master prints its counts" in text and "draft evaluations" not in text
    assert main(["speculative-simple", "-m", t, "-p", "x", "--spec-type", "ngram-fancy"]) == 2
    assert "unknown speculative type 'ngram-fancy'" in capsys.readouterr().err


@pytest.mark.slow
def test_generate_default_model_subprocess():
    code, out, err = run_cli("generate", "-p", "The capital of France is", "-n", "8", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["text"].startswith(" Paris")


def test_speculative_simple_draft_max_auto(tiny_path, tmp_path, capsys):
    """--spec-draft-n-max auto[:CAP] / heuristic[:CAP]: same tokens as plain (greedy and sampled), the
    chosen lengths in --json and in the printed statistics; a bad value names itself."""
    t = tiny_path("Q8_0", seed=11)
    d = forge.requantize(t, tmp_path / "d.gguf", "Q4_0")
    prompt = "the cat sat on the mat, the cat sat on the mat, the cat sat on"
    for extra in ([], ["--temp", "0.8", "--seed", "5"]):
        assert main(["generate", "-m", t, "-p", prompt, "-n", "16", "--json", *extra]) == 0
        plain = json.loads(capsys.readouterr().out)["tokens"]
        for dm in ("auto", "auto:4", "heuristic:6"):
            assert main(["speculative-simple", "-m", t, "-md", d, "-p", prompt, "-n", "16", "--json",
                         "--spec-draft-n-max", dm, "--spec-type", "ngram-simple,draft-simple",
                         "--spec-ngram-simple-size-n", "1", *extra]) == 0
            out = json.loads(capsys.readouterr().out)
            assert out["tokens"] == plain, (dm, extra)
            assert out["draft_len"]["schedule"] == dm.split(":")[0]
            assert sum(out["draft_len"]["chosen"].values()) >= 1
    assert main(["speculative-simple", "-m", t, "-md", d, "-p", prompt, "-n", "16",
                 "--spec-draft-n-max", "auto:4"]) == 0
    out = capsys.readouterr().err
    assert "n_draft   = auto:4" in out and "draft length (auto:4) chosen per round: 0: " in out
    for bad in ("fast", "auto:0", "heuristic:x"):
        assert main(["speculative-simple", "-m", t, "-md", d, "-p", "x", "--spec-draft-n-max", bad]) == 2
        err = capsys.readouterr().err
        assert f"--spec-draft-n-max={bad!r}" in err and "Traceback" not in err


@pytest.mark.slow
def test_speculative_simple_counts_as_llama_cpp_prints_them(capsys):
    """The default pair, greedy, -n 32, draft-max 3, p-min 0: `--stop c392e50` prints the counts
    c392e50's llama-speculative-simple printed for the same command (recorded in tests/data);
    `--stop master` adds master's budget (each draft cut to N - n_predict - 1, a budget of 0
    capping nothing): on the same rounds that is 33 / 40 / 19; specnb's exact stop prints its
    own 32 tokens and says why they differ."""
    import re
    from pathlib import Path
    rec = (Path(__file__).parent / "data" / "llamacpp_speculative_simple_n32_smollm2.txt").read_text()

    def counts(text):
        return tuple(int(re.search(rf"^{k} *= (\d+)$", text, re.M).group(1))
                     for k in ("n_predict", "n_drafted", "n_accept"))
    args = ["speculative-simple", "-p", "Once upon a time", "-n", "32", "--temp", "0",
            "--spec-draft-n-max", "3", "--spec-draft-p-min", "0"]
    got = {}
    for stop in ("c392e50", "master", "exact"):
        assert main(args + ["--stop", stop]) == 0
        cap = capsys.readouterr()
        got[stop] = cap.out + cap.err
    assert counts(got["c392e50"]) == counts(rec) == (33, 42, 19)
    assert counts(got["master"]) == (33, 40, 19)
    assert counts(got["exact"])[0] == 32 and counts(got["exact"])[2] == 19
    assert "--stop master prints its counts" in got["exact"]
    # the same text up to the near-tie llama.cpp's batched rows flip (see README in tests/data)
    head = "Once upon a time, the city of Nova Haven was a thriving metropolis"
    assert head in rec and all(head in out for out in got.values())


def test_a_negative_context_size_is_named_by_its_flag(tiny_path, capsys):
    from specnb.app.cli import main
    assert main(["generate", "-m", str(tiny_path("Q8_0")), "-p", "hi", "-n", "2", "-c", "-5"]) == 2
    err = capsys.readouterr().err
    assert "-c/--ctx-size" in err and "-5" in err
