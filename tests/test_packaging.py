"""Packaging: the kernels/ folder installs as specnb.kernels, and building prints no warnings."""
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_kernels_are_specnb_kernels():
    link = ROOT / "specnb" / "kernels"
    assert link.is_symlink() and os.readlink(link) == "../kernels"
    (where,) = find_spec("specnb.kernels").submodule_search_locations
    assert sorted(p.name for p in Path(where).glob("*.py")) == \
        sorted(p.name for p in (ROOT / "kernels").glob("*.py"))
    import specnb.kernels.quant  # noqa: F401  (importable under its package name)


def test_license_metadata():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) the specnb authors" in text


@pytest.mark.slow
def test_wheel_ships_kernels_without_warnings(tmp_path):
    """`pip wheel .` on a copy of the sources (setuptools from the package index)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for name in ("specnb", "kernels"):
        shutil.copytree(ROOT / name, src / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), "."],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # setuptools' warnings are classes named ...Warning (pip's own notes say "WARNING:")
    assert not re.findall(r"\w+Warning\b", p.stdout + p.stderr), p.stdout + p.stderr
    (wheel,) = tmp_path.glob("specnb-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"specnb/kernels/{p.name}" for p in (ROOT / "kernels").glob("*.py")} <= set(names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
