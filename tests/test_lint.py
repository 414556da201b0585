"""The project's own style rules ([tool.ruff] in pyproject.toml) hold for the library, the
kernels and the tests: pyflakes' errors (undefined and unused names), pycodestyle, bugbear."""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: pip install -e '.[test]' installs it"
    r = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "specnb", "kernels", "tests"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"ruff check found problems:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"
