"""The rule that finds a quoted measurement (tests/prose_rule.py), say() and check() (specnb.course)."""
import pytest

from prose_rule import measured_phrases, verdict_phrases
from specnb.course import check, say


@pytest.mark.parametrize("text", [
    "the pair ran at 1.16x", "1.16× faster", "about 30 s", "78.6 ms per token", "12.9 tok/s",
    "48.8 GB/s", "acceptance 35%", "1.3-1.6x", "2–3.4×", "c = 0.26", "α ≈ 0.68", "bc(3) = 1.38",
    "bc[4] = 1.66", "about two minutes and 5 minutes", "E[tokens] = 2.94", "c4 = 0.24",
])
def test_finds_quoted_measurements(text):
    assert measured_phrases(text), text


@pytest.mark.parametrize("text", [
    "Qwen2.5-Coder-1.5B and 0.5B", "Q4_0 and Q4_K_M", "draft-max 2", "T = 0.7", "64 tokens",
    "a 2×2 table", "2d + 1 rows", "`c = 0.26` in code", "```\nspeedup 1.16x\n```",
    "[the paper](https://arxiv.org/abs/2211.17192?x=1.5x)", "n_max = 4, p_min = 0.3", "seed 7",
    "β = 1 − TV(p, q)", "c = 1 - α",
])
def test_leaves_settings_names_code_and_links_alone(text):
    assert measured_phrases(text) == [], text


def test_a_not_measured_comment_exempts_exactly_what_it_lists():
    text = "<!-- not measured: α = 0.8 (chosen), 2-3.4x (published) -->\nWith α = 0.8 ... 2-3.4x ... 1.2x"
    assert measured_phrases(text) == ["1.2x"]


def test_say_is_markdown():
    pytest.importorskip("IPython")
    md = say(f"ran at {1.164:.2f}x")
    assert md._repr_markdown_() == "ran at 1.16x"


def test_check_asks_first_then_judges_without_raising(capsys):
    assert check(None, 3) is None
    assert check((1, None), (1, 2), names="a, b") is None
    out = capsys.readouterr().out
    assert out.count("write your prediction") == 2 and "a, b" in out and "3" not in out
    assert check((3, 4), (3, 4)) is True
    assert check(2.0, 2.1, rel=0.1) is True
    assert check(2.0, 2.5, rel=0.1) is False
    assert check("yes", "no") is False
    assert check(True, 1) is False          # a bool is not a number here
    out = capsys.readouterr().out
    assert "right: (3, 4)" in out and "not quite: you wrote 2.0, this run gives 2.5" in out
    check(1.23, 1.234, abs=0.005, show="1.23 (rounded)")
    assert "right: 1.23 (rounded)" in capsys.readouterr().out


# the hand-written verdicts the notebooks' review found (N1-N8), and sentences that say what they
# depend on
@pytest.mark.parametrize("text", [
    "Run 00 to see the real pair winning on code and losing on a poem.",
    "The pair that wins in [00] passes all four checks.",
    "Verification is nearly free on a GPU, and nearly so on this CPU with int8 activations.",
    "It is close to memory-bound, so a few more rows reuse weights already read.",
    "On this CPU only the `q8` mode comes near it.",
    "draft-simple on code at the best fixed draft-max (high α, and batches close to one row).",
    "The 0.5B draft is faster than the target by enough.",
])
def test_finds_hand_written_verdicts(text):
    assert verdict_phrases(text), text


@pytest.mark.parametrize("text", [
    "Speculation wins when a draft token costs a small fraction of a target step.",
    "Whether it pays off depends on c and bc, measured in 00.",
    "A draft must cost a small fraction of the target, or nothing.",
    "Does the poem win at draft-max 1?",
    "`say(f'... wins ...')` in code",
    "<!-- not measured: memory-bound (a definition) -->\nThat is *memory-bound* decoding.",
])
def test_leaves_conditional_verdicts_code_and_definitions_alone(text):
    assert verdict_phrases(text) == [], text
