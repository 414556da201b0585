"""vocab/textio.process_escapes against llama.cpp master 34af94cd's string_process_escapes
(common/common.cpp:644-679), run on 413 inputs by a C++ driver around master's own code
(tests/data/master_34af94cd_escapes.json): every escape it knows, `\\x` with what strtol reads,
and what it leaves alone."""
import json
from pathlib import Path

import pytest

from specnb.vocab.textio import escaped_prompt, process_escapes

CASES = json.loads((Path(__file__).parent / "data" / "master_34af94cd_escapes.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_escapes_are_masters_string_process_escapes(case):
    assert process_escapes(bytes.fromhex(case["in"])).hex() == case["out"]


def test_escaped_prompt_keeps_text_and_bytes_apart():
    """A str stays a str while the result is UTF-8; `\\xff` makes bytes, named by their source."""
    assert escaped_prompt("a\\tb") == "a\tb"
    raw = escaped_prompt("caf\\xe9", source="-p")
    assert raw == b"caf\xe9" and raw.source == "-p"
    assert escaped_prompt(b"x\\n") == b"x\n"
