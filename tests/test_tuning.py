"""kernels/tuning.py: the prefetch distance is measured once per machine, recorded beside the
kernel cache, read back without measuring again, and overridden by SPECNB_PREFETCH."""
import json

import pytest

from specnb.kernels import tuning


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    # a cache of its own, no recorded verdict in memory, and a small calibration matrix
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECNB_PREFETCH", raising=False)
    monkeypatch.setattr(tuning, "_memo", {})
    monkeypatch.setattr(tuning, "calibration_bytes", lambda: 4 << 20)
    return tmp_path


def test_calibrate_times_every_candidate_and_picks_the_fastest():
    v = tuning.calibrate(candidates=(-1, 128, 2048), reps=2, nbytes=2 << 20)
    assert set(v["ms"]) == {-1, 128, 2048} and all(m > 0 for m in v["ms"].values())
    assert v["ahead"] == min(v["ms"], key=v["ms"].get)
    assert v["mib"] == pytest.approx(2, rel=0.01)
    line = tuning.describe(v)
    assert "GB/s: off" in line and ("do not prefetch" in line if v["ahead"] < 0 else f"{v['ahead']} B ahead" in line)


@pytest.mark.parametrize("bad", [(), (-2, 64)])
def test_calibrate_refuses_bad_candidates(bad):
    with pytest.raises(ValueError, match="candidates"):
        tuning.calibrate(candidates=bad, nbytes=1 << 20)


def test_the_verdict_is_measured_once_then_read_back(fresh, monkeypatch):
    said = []
    ahead = tuning.prefetch_ahead(on_measure=said.append)
    assert said and ahead in tuning.CANDIDATES
    recorded = json.loads(open(tuning.verdict_path()).read())
    assert [v["ahead"] for v in recorded.values()] == [ahead]
    assert tuning.verdict_path().startswith(str(fresh))
    # a new process (no memo) reads the file: calibrate is not called again
    monkeypatch.setattr(tuning, "_memo", {})
    monkeypatch.setattr(tuning, "calibrate", lambda **kw: pytest.fail("measured again"))
    assert tuning.prefetch_ahead(on_measure=said.append) == ahead and len(said) == 1


def test_an_unreadable_verdict_is_measured_again(fresh):
    import os
    os.makedirs(os.path.dirname(tuning.verdict_path()), exist_ok=True)
    open(tuning.verdict_path(), "w").write("{not json")
    said = []
    assert tuning.prefetch_ahead(on_measure=said.append) in tuning.CANDIDATES
    assert said, "a corrupt verdict file must lead to a new measurement"
    assert tuning.cached_verdict() is not None


@pytest.mark.parametrize("env, want", [("off", -1), ("-1", -1), ("0", 0), ("1536", 1536)])
def test_the_environment_overrides_the_verdict(fresh, monkeypatch, env, want):
    monkeypatch.setenv("SPECNB_PREFETCH", env)
    monkeypatch.setattr(tuning, "calibrate", lambda **kw: pytest.fail("measured"))
    assert tuning.prefetch_ahead() == want


@pytest.mark.parametrize("env", ["fast", "-5", "1.5"])
def test_a_bad_environment_value_is_named(fresh, monkeypatch, env):
    monkeypatch.setenv("SPECNB_PREFETCH", env)
    with pytest.raises(ValueError, match=f"SPECNB_PREFETCH={env!r}"):
        tuning.prefetch_ahead()


def test_the_context_passes_the_verdict_to_the_fused_pass(monkeypatch, tiny_model):
    # the q8 pass gets the machine's distance; the float32 pass never prefetches (nor measures)
    from specnb import Context
    monkeypatch.setenv("SPECNB_PREFETCH", "768")
    m = tiny_model
    q8 = Context(m, n_ctx=16, activations="q8").backend
    assert q8.ahead == q8._fused_shape.ahead == 768              # forward_steps' products: the same
    f32 = Context(m, n_ctx=16, activations="f32").backend
    assert f32.ahead == f32._fused_shape.ahead == -1


def test_a_product_alone_never_measures(fresh, monkeypatch):
    # matmul_q8's distance is an argument, -1 (none) unless given: a call neither calibrates nor
    # writes a verdict; whoever wants the measured distance resolves it (the CPU backend, once)
    import os
    import numpy as np
    from specnb.kernels import qtypes
    from specnb.kernels.matmul_q8 import matmul_q8
    monkeypatch.setattr(tuning, "calibrate", lambda **kw: pytest.fail("measured"))
    w = qtypes.random_blocks(qtypes.Q4_K, 4, 256, np.random.default_rng(0))
    matmul_q8(np.ones((1, 256), np.float32), w, qtypes.Q4_K, np.empty((1, 4), np.float32))
    assert not os.path.exists(tuning.verdict_path())
