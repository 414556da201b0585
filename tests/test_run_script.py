"""./run stays portable: macOS's own bash 3.2 and BSD userland run it as well as Linux's.

- no GNU-only command or option (macOS has no sha256sum, no readlink -f before 12.3, a sed -i
  that takes a suffix, ...) and no bash 4+ syntax, checked on the script's text; each pattern is
  checked against an example of what it catches, so the list cannot silently match nothing;
- the script runs with only the commands a stock macOS has on PATH (a folder of links to them),
  which catches a GNU-only command the list above does not know.
"""
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "run"

# (pattern, why it is not portable, an example it must catch)
NOT_ON_MACOS = [
    (r"\b(sha1|sha224|sha256|sha384|sha512|md5|b2)sum\b", "GNU coreutils: macOS has shasum -a 256 / md5",
     "x=$(sha256sum f)"),
    (r"\breadlink\s+(-\w+\s+)*-\w*[fem]", "readlink -f / -e / -m: macOS before 12.3 has none", "readlink -f x"),
    (r"\brealpath\b", "realpath: macOS before 13 has none", "d=$(realpath .)"),
    (r"\bsed\b[^|;&]*\s-i(\s|$)", "sed -i without a suffix: BSD sed takes the next word as the suffix",
     "sed -i 's/a/b/' f"),
    (r"\bsed\b[^|;&]*\s-r\b", "sed -r: BSD sed spells it -E", "sed -r 's/a+/b/' f"),
    (r"\bsed\b[^|;&]*\s--\w", "sed --long-option: GNU only", "sed --in-place f"),
    (r"\bgrep\b[^|;&]*\s-\w*P", "grep -P: not in BSD grep", "grep -oP 'x' f"),
    (r"\bstat\s+(-\w+\s+)*-c\b", "stat -c: BSD stat uses -f", "stat -c %s f"),
    (r"\bdate\b[^|;&]*\s-d\b", "date -d: BSD date uses -j -f", "date -d yesterday"),
    (r"\bdate\b[^|;&]*\s--\w", "date --long-option: GNU only", "date --iso-8601"),
    (r"\btimeout\s", "timeout: GNU coreutils", "timeout 5 cmd"),
    (r"\bnproc\b", "nproc: macOS uses sysctl -n hw.ncpu", "n=$(nproc)"),
    (r"\btac\b", "tac: macOS has tail -r", "tac f"),
    (r"\bxargs\s+(-\w+\s+)*-\w*r", "xargs -r: BSD xargs has none", "xargs -r rm"),
    (r"\bfind\b[^|;&]*-printf\b", "find -printf: GNU only", "find . -printf '%p'"),
    (r"\bbase64\s+(-\w+\s+)*-w", "base64 -w: GNU only", "base64 -w0 f"),
    (r"\bdu\s+(-\w+\s+)*-\w*b", "du -b: GNU only", "du -sb ."),
    (r"\b(head|tail)\s+-[nc]\s*-\d", "head/tail with a negative count: GNU only", "head -n -1 f"),
    (r"\bmktemp\s+--", "mktemp --long-option: GNU only", "mktemp --tmpdir"),
    (r"\b(cp|mv|rm|ln|mkdir|cut|head|tail|sort|wc|tr|cat|ls|touch|readlink|du|df|uniq|xargs)\s+"
     r"(-\w+\s+)*--[a-z]", "a coreutils long option: GNU only", "cp --reflink=auto a b"),
    (r"\bgetopt\s", "getopt: BSD getopt has no long options (use getopts)", "getopt -o ab -- \"$@\""),
    # bash 4+ syntax (macOS's /bin/bash is 3.2)
    (r"\b(declare|local|typeset)\s+-\w*[An]", "declare -A / -n: bash 4", "declare -A m"),
    (r"\b(mapfile|readarray|coproc)\b", "mapfile / readarray / coproc: bash 4", "mapfile -t a < f"),
    (r"\$\{[^}]*(,,|\^\^|@[QEPAa])\}", "${x,,} ${x^^} ${x@Q}: bash 4", "${name,,}"),
    (r"&>>|\|&", "&>> and |&: bash 4", "cmd |& tee log"),
    (r"\[\[\s+-v\s", "[[ -v ]]: bash 4.2", "[[ -v name ]]"),
    (r";;&|;&\s", "case fall-through ;& / ;;&: bash 4", "a) x ;;&"),
    (r"\bEPOCH(SECONDS|REALTIME)\b", "$EPOCHSECONDS: bash 5", "t=$EPOCHSECONDS"),
    (r"\bshopt\s+-s\s+(globstar|lastpipe|autocd)", "shopt globstar / lastpipe / autocd: bash 4",
     "shopt -s globstar"),
]


def _code(text):
    # the script without its comments (whole-line ones and trailing " # ..." ones)
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        lines.append(re.sub(r"\s#\s.*$", "", line))
    return "\n".join(lines)


@pytest.mark.parametrize("pattern,why,example", NOT_ON_MACOS, ids=[w.split(":")[0] for _, w, _ in NOT_ON_MACOS])
def test_run_uses_nothing_gnu_only(pattern, why, example):
    assert re.search(pattern, example), f"the pattern for {why!r} misses its own example {example!r}"
    code = _code(RUN.read_text())
    hits = [line for line in code.splitlines() if re.search(pattern, line)]
    assert not hits, f"./run: {why}: {hits}"


def test_run_parses():
    subprocess.run(["bash", "-n", str(RUN)], check=True)


# The commands every stock macOS has (/bin and /usr/bin, BSD flavours), of those ./run could use.
MACOS_COMMANDS = ["bash", "sh", "env", "dirname", "basename", "cat", "cut", "tr", "head", "tail", "grep",
                  "sed", "awk", "sort", "uniq", "wc", "mkdir", "rm", "cp", "mv", "ln", "ls", "touch",
                  "uname", "mktemp", "date", "printf", "echo", "test", "true", "false", "shasum"]


def test_run_runs_with_only_macos_commands(tmp_path):
    venv_python = ROOT / ".venv" / "bin" / "python"
    stamp = ROOT / ".venv" / ".specnb-installed"
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    if not venv_python.exists() or not stamp.exists() or stamp.read_text().strip() != want:
        pytest.skip("the environment .venv is not installed for this pyproject.toml (./run would install it)")
    shims = tmp_path / "bin"
    shims.mkdir()
    for name in MACOS_COMMANDS:
        path = shutil.which(name)
        if path:
            os.symlink(path, shims / name)
    os.symlink(os.path.realpath(venv_python), shims / "python3")    # the interpreter itself, not a shim
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = str(shims)
    p = subprocess.run([str(shims / "bash"), str(RUN), "--help"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "usage" in p.stdout.lower()
    assert "command not found" not in p.stderr
