"""Packaging: the kernels/ folder installs as specnb.kernels (wheel and editable), nothing else leaks
out as a top-level name, importing touches no disk, and building prints no warnings."""
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
    """kernels/ at the top of the repository installs as specnb.kernels (pyproject's package-dir
    mapping), with no link: grep and find see one tree."""
    (where,) = find_spec("specnb.kernels").submodule_search_locations
    assert Path(where).resolve() == ROOT / "kernels"
    assert not (ROOT / "specnb" / "kernels").exists()
    assert not [p for p in ROOT.joinpath("specnb").rglob("*") if p.is_symlink()]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert project["package-dir"]["specnb.kernels"] == "kernels"
    assert sorted(project["packages"]) == sorted(
        ["specnb", "specnb.kernels"]
        + [".".join(("specnb", *p.parent.relative_to(ROOT / "specnb").parts))
           for p in ROOT.joinpath("specnb").glob("*/**/__init__.py")])


def test_the_installed_package_leaks_no_top_level_names(tmp_path):
    """Outside the repository, only specnb is importable: not kernels, docs, notebooks or tests
    (an editable install that put the repository root on sys.path would leak them all)."""
    code = ("import importlib.util as u, specnb.kernels as k, specnb.kernels.matmul as m\n"
            "print([n for n in ('kernels', 'docs', 'notebooks', 'tests') if u.find_spec(n)])\n"
            "print(m.__name__, k.__path__[0])\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert out[0] == "[]", out
    assert out[1].startswith("specnb.kernels.matmul ")


def test_importing_specnb_touches_no_disk(tmp_path):
    """`import specnb` creates nothing (not the cache folder, not Numba's); importing the kernels
    removes nothing (old kernel caches are pruned when kernels are prepared, run/pair.py
    warm_up), and Numba's own folder is the stamped one."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict({k: v for k, v in os.environ.items() if k not in ("SPECNB_CACHE_DIR", "NUMBA_CACHE_DIR",
                                                             "XDG_CACHE_HOME")}, HOME=str(home))
    code = ("import os, sys, specnb\n"
            "import specnb.course\n"
            "specnb.course.cost, specnb.ParamError, dir(specnb), dir(specnb.course)\n"
            "assert not os.listdir(os.environ['HOME']), os.listdir(os.environ['HOME'])\n"
            "stale = os.path.join(os.environ['HOME'], '.cache', 'specnb', 'numba', '0' * 16)\n"
            "os.makedirs(stale)\n"
            "import specnb.kernels.matmul\n"
            "assert os.path.isdir(stale)\n"
            "print(os.environ['NUMBA_CACHE_DIR'])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(home / ".cache" / "specnb" / "numba")), out.stdout


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
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), "."],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # setuptools' warnings are classes named ...Warning (pip's own notes say "WARNING:")
    assert not re.findall(r"\w+Warning\b", p.stdout + p.stderr), p.stdout + p.stderr
    (wheel,) = tmp_path.glob("specnb-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"specnb/kernels/{p.name}" for p in (ROOT / "kernels").glob("*.py")} <= set(names)
    assert {f"specnb/app/exercise/{p.name}" for p in (ROOT / "specnb" / "app" / "exercise").glob("*.py")} \
        <= set(names)                                         # a package inside a folder: listed too
    assert any(n.endswith("licenses/LICENSE") for n in names)
    # the wheel, installed: specnb.kernels is a plain subpackage, and `kernels` is not a name
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    code = ("import importlib.util as u, specnb, specnb.kernels.matmul as m\n"
            "print(specnb.__file__, m.__file__, u.find_spec('kernels'))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(site)), check=True).stdout.split()
    assert out[0].startswith(str(site)) and out[1] == str(site / "specnb" / "kernels" / "matmul.py")
    assert out[2] == "None"


def test_environment_yml_matches_pyproject():
    """environment.yml's pip list is pyproject's dependencies plus the notebook and test extras,
    then specnb itself, so a conda user gets what ./run installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = (project["dependencies"] + project["optional-dependencies"]["notebook"]
            + project["optional-dependencies"]["test"] + ["-e .[notebook,test,qwen]"])
    text = (ROOT / "environment.yml").read_text()
    pip = text.split("  - pip:\n", 1)[1]
    got = [line.strip()[2:] for line in pip.splitlines() if line.strip().startswith("- ")]
    assert got == want
    assert "python>=" + project["requires-python"].lstrip(">=") in text
