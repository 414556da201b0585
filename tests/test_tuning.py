"""kernels/tuning.py: the prefetch distance and the int8 compute limit are measured once per
machine, recorded beside the kernel cache, read back without measuring again, and overridden by
SPECNB_PREFETCH and SPECNB_INT8_PEAK."""
import json

import pytest

from specnb.kernels import tuning


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    # a cache of its own, no recorded verdict in memory, and a small calibration matrix
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECNB_PREFETCH", raising=False)
    monkeypatch.setattr(tuning.PREFETCH, "memo", {})
    monkeypatch.setattr(tuning, "calibration_bytes", lambda: 4 << 20)
    return tmp_path


def test_calibrate_times_every_candidate_and_picks_the_fastest():
    v = tuning.calibrate(candidates=(-1, 128, 2048), reps=2, nbytes=2 << 20, candidates_x16=(-1, 4096))
    for suffix, cs in (("", {-1, 128, 2048}), ("_x16", {-1, 4096})):   # the file's layout and the interleaved one
        ms = v["ms" + suffix]
        assert set(ms) == cs and all(m > 0 for m in ms.values())
        assert v["ahead" + suffix] == min(ms, key=ms.get)
    assert v["mib"] == pytest.approx(2, rel=0.01)
    line = tuning.describe(v)
    assert "GB/s: off" in line and "; interleaved: off" in line
    assert "do not prefetch" in line if v["ahead"] < 0 else f"prefetch the weights {v['ahead']} B ahead" in line
    assert "interleaved ones not at all" in line if v["ahead_x16"] < 0 else f"ones {v['ahead_x16']} B ahead" in line


@pytest.mark.parametrize("bad", [(), (-2, 64)])
def test_calibrate_refuses_bad_candidates(bad):
    with pytest.raises(ValueError, match="candidates"):
        tuning.calibrate(candidates=bad, nbytes=1 << 20)
    with pytest.raises(ValueError, match="candidates"):
        tuning.calibrate(candidates_x16=bad, nbytes=1 << 20)


def test_the_verdict_is_measured_once_then_read_back(fresh, monkeypatch):
    said = []
    ahead = tuning.prefetch_ahead(on_measure=said.append)
    assert said and ahead in tuning.CANDIDATES
    recorded = json.loads(open(tuning.verdict_path()).read())
    assert [v["ahead"] for v in recorded.values()] == [ahead]
    assert [v["ahead_x16"] for v in recorded.values()] == [tuning.prefetch_ahead_x16()] and len(said) == 1
    assert tuning.verdict_path().startswith(str(fresh))
    # a new process (no memo) reads the file: calibrate is not called again
    monkeypatch.setattr(tuning.PREFETCH, "memo", {})
    monkeypatch.setattr(tuning, "calibrate", lambda **kw: pytest.fail("measured again"))
    assert tuning.prefetch_ahead(on_measure=said.append) == ahead and len(said) == 1
    assert tuning.prefetch_ahead_x16(on_measure=said.append) == recorded[next(iter(recorded))]["ahead_x16"]


def test_a_verdict_without_the_interleaved_distance_is_measured_again(fresh):
    # a verdict recorded before the interleaved layouts had their own distance lacks ahead_x16
    import os
    os.makedirs(os.path.dirname(tuning.verdict_path()), exist_ok=True)
    tuning.measure_and_record()
    recorded = json.loads(open(tuning.verdict_path()).read())
    for v in recorded.values():
        del v["ahead_x16"]
    open(tuning.verdict_path(), "w").write(json.dumps(recorded))
    tuning.PREFETCH.memo.clear()
    assert tuning.cached_verdict() is None
    said = []
    assert tuning.prefetch_ahead_x16(on_measure=said.append) in tuning.CANDIDATES_X16 and said


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
    assert tuning.prefetch_ahead() == want and tuning.prefetch_ahead_x16() == want


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
    assert q8.ahead_x16 == q8._fused_shape.ahead_x16 == 768
    f32 = Context(m, n_ctx=16, activations="f32").backend
    assert f32.ahead == f32._fused_shape.ahead == f32.ahead_x16 == f32._fused_shape.ahead_x16 == -1


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


# ---- the int8 compute limit --------------------------------------------------------------------

@pytest.fixture
def fresh_peak(monkeypatch, tmp_path):
    # a cache of its own, no verdict in memory, no override; measure_int8_peak counted and faked
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SPECNB_INT8_PEAK", raising=False)
    monkeypatch.setattr(tuning.PEAK, "memo", {})
    calls = []

    def fake(n_threads=None, **kw):
        calls.append(n_threads)
        return {"gmacs_s": 123.0, "rounds_gmacs_s": [120.0, 123.0, 125.0], "threads": n_threads,
                "simd_level": tuning.SIMD_LEVEL, "instruction": "x", "accumulators": 4, "iterations": 10,
                "cpu_share": fake.cpu_share}
    fake.cpu_share = 1.0
    monkeypatch.setattr(tuning, "measure_int8_peak", fake)
    return calls, fake


def test_the_int8_peak_is_measured_once_then_read_back(fresh_peak, monkeypatch, tmp_path):
    calls, _ = fresh_peak
    said = []
    assert tuning.int8_peak(2, on_measure=said.append) == 123.0 and calls == [2] and len(said) == 1
    assert tuning.peak_path().startswith(str(tmp_path))
    assert tuning.peak_path() == tuning.verdict_path().replace("prefetch.json", "int8_peak.json")
    recorded = json.loads(open(tuning.peak_path()).read())
    [key] = recorded
    assert key.endswith(f"|2 threads|SIMD {tuning.SIMD_LEVEL}") and recorded[key]["gmacs_s"] == 123.0
    # the same process: from memory; a new process (no memo): from the file; neither measures
    assert tuning.int8_peak(2, on_measure=said.append) == 123.0
    monkeypatch.setattr(tuning.PEAK, "memo", {})
    v = tuning.int8_peak_verdict(2, on_measure=said.append)
    assert v["gmacs_s"] == 123.0 and v["source"] == "measured" and calls == [2] and len(said) == 1
    # another thread count is another verdict
    assert tuning.int8_peak(1) == 123.0 and calls == [2, 1]
    assert len(json.loads(open(tuning.peak_path()).read())) == 2


def test_a_contended_int8_peak_is_not_recorded(fresh_peak, monkeypatch):
    # other work held the CPUs while it ran: the number serves this process, the next measures again
    calls, fake = fresh_peak
    fake.cpu_share = 0.5
    assert tuning.int8_peak(2) == 123.0 and tuning.int8_peak(2) == 123.0 and calls == [2]
    assert tuning.cached_int8_peak(2) is None
    line = tuning.describe_int8_peak(tuning.int8_peak_verdict(2))
    assert "50% of their CPUs" in line and "not recorded" in line
    monkeypatch.setattr(tuning.PEAK, "memo", {})
    fake.cpu_share = 1.0
    assert tuning.int8_peak(2) == 123.0 and calls == [2, 2] and tuning.cached_int8_peak(2) is not None


def test_an_unreadable_int8_peak_is_measured_again(fresh_peak):
    import os
    calls, _ = fresh_peak
    os.makedirs(os.path.dirname(tuning.peak_path()), exist_ok=True)
    open(tuning.peak_path(), "w").write("{not json")
    assert tuning.int8_peak(2) == 123.0 and calls == [2]
    assert tuning.cached_int8_peak(2)["gmacs_s"] == 123.0


def test_a_run_probes_the_peak_beside_the_machines_recorded_figure(fresh_peak, monkeypatch):
    # start_int8_probes records a figure first (once), then probes; peak_beside names the
    # recorded figure, not one an earlier run set for this process with use_int8_peak
    calls, fake = fresh_peak
    said = []
    probes = tuning.start_int8_probes(2, on_measure=said.append)
    assert calls == [2, 2] and len(probes) == 1 and len(said) == 1
    tuning.use_int8_peak(2, {"gmacs_s": 999.0, "threads": 2})
    assert tuning.int8_peak(2) == 999.0
    pk = tuning.peak_beside(probes + [dict(probes[0], gmacs_s=61.0)])
    assert pk["gmacs_s"] == 92.0 and pk["probes_gmacs_s"] == [123.0, 61.0] and pk["recorded_gmacs_s"] == 123.0
    assert "recorded for this machine: 123.0" in tuning.describe_int8_peak(pk)
    # SPECNB_INT8_PEAK sets the limit: nothing is probed
    monkeypatch.setenv("SPECNB_INT8_PEAK", "250")
    assert tuning.start_int8_probes(2) is None and calls == [2, 2]


@pytest.mark.parametrize("env, want", [("250", 250.0), (" 1.5e3 ", 1500.0), ("0.5", 0.5)])
def test_the_environment_overrides_the_int8_peak(fresh_peak, monkeypatch, env, want):
    calls, _ = fresh_peak
    tuning.int8_peak(2)                                   # a recorded verdict: the override still wins
    monkeypatch.setenv("SPECNB_INT8_PEAK", env)
    v = tuning.int8_peak_verdict(2)
    assert tuning.int8_peak(2) == want and v["source"] == "SPECNB_INT8_PEAK" and calls == [2]
    assert v["threads"] == 2 and v["simd_level"] == tuning.SIMD_LEVEL
    assert "from SPECNB_INT8_PEAK" in tuning.describe_int8_peak(v)
    monkeypatch.setenv("SPECNB_INT8_PEAK", "auto")
    assert tuning.int8_peak(2) == 123.0


@pytest.mark.parametrize("env", ["fast", "-5", "0", "nan", "inf", "1e400", "12 G"])
def test_a_bad_int8_peak_value_is_named(fresh_peak, monkeypatch, env):
    calls, _ = fresh_peak
    monkeypatch.setenv("SPECNB_INT8_PEAK", env)
    with pytest.raises(ValueError, match=f"SPECNB_INT8_PEAK={env!r}: expected auto or"):
        tuning.int8_peak(2)
    assert calls == []


def test_the_peak_kernel_does_the_dot_products_it_counts():
    # 16 PEAK_VECS rounds pair every 64-byte weight vector once with each of the 16 activation words
    # of the same 64 bytes, broadcast: accumulator r holds, over the thread's vectors v, the sum over
    # byte positions b < 4 of (the sum of w[v, 4l + b] over lanes l) (the sum of x_r[v, 4j + b] over
    # words j) (small integers: exact in float32), so the rate counts real work. Nibble weights and
    # the activations' full range, as the 4-bit kernels call it; then every weight 15 beside a row of
    # 127s (AVX2's int16 pair sums of 8 steps at 8 x 2 x 15 x 127), over a count of rounds that
    # ends inside a run of 8, against the rounds summed one by one
    import numpy as np
    rng = np.random.default_rng(1)
    row, R, V = tuning.PEAK_VECS * 64, tuning.PEAK_ROWS, tuning.PEAK_VECS
    w = rng.integers(0, 16, 2 * row, dtype=np.uint8)
    x = rng.integers(-127, 128, 2 * R * row, dtype=np.int8)
    out = np.zeros(2 * R, np.float32)
    tuning._dot4_rounds(w, x, out, 1, 16 * V)                     # thread 1's part only
    wv = w[row:].astype(np.int64).reshape(V, 16, 4).sum(1)        # [v, b]
    want = [int((wv * x[(R + r) * row:(R + r + 1) * row].astype(np.int64).reshape(V, 16, 4).sum(1)).sum())
            for r in range(R)]
    assert out[:R].tolist() == [0.0] * R and out[R:].astype(np.int64).tolist() == want
    tuning._dot4_rounds(w, x, out, 1, 3 * 16 * V)
    assert out[R:].astype(np.int64).tolist() == [3 * v for v in want]

    w[row:] = 15
    x[R * row:(R + 1) * row] = 127
    n_iter = 8 * V + 5                                           # (sums < 2^24: exact in float32)
    tuning._dot4_rounds(w, x, out, 1, n_iter)
    wt, xt = w[row:].astype(np.int64), x[R * row:].astype(np.int64).reshape(R, row)
    want = [sum(int(wt[64 * (i % V):64 * (i % V) + 64].reshape(16, 4).sum(0)
                    @ xt[r, 64 * (i % V) + 4 * (i // V % 16):][:4]) for i in range(n_iter))
            for r in range(R)]
    assert want[0] == n_iter * 16 * 4 * 15 * 127
    assert out[R:].astype(np.int64).tolist() == want


@pytest.mark.parametrize("n_threads", [1, 2])
def test_the_int8_peak_is_plausible(n_threads):
    v = tuning.measure_int8_peak(n_threads, reps=2, seconds=0.02)
    assert 1 < v["gmacs_s"] < 100000 and len(v["rounds_gmacs_s"]) == 2
    assert v["gmacs_s"] == pytest.approx(sorted(v["rounds_gmacs_s"])[0] / 2 + sorted(v["rounds_gmacs_s"])[1] / 2)
    assert v["threads"] == n_threads and v["simd_level"] == tuning.SIMD_LEVEL and 0 < v["cpu_share"] <= 1
    assert v["accumulators"] == tuning.PEAK_ROWS and v["instruction"] == tuning.PEAK_INSTRUCTIONS[tuning.SIMD_LEVEL]
    line = tuning.describe_int8_peak(v)
    assert line.startswith(f"int8 compute limit: {v['gmacs_s']:.1f} G multiply-adds/s on {n_threads} thread")
    assert f"SIMD level {tuning.SIMD_LEVEL}" in line and "\n" not in line


def test_the_probes_data_start_on_a_cache_line(monkeypatch):
    # wherever NumPy puts an array, the probe's copy starts on a 64-byte boundary (a load that
    # straddles two lines cut a thread's rate by a third) and holds the same values
    import numpy as np
    for dtype in (np.uint8, np.int8):
        for off in (0, 1, 16, 32, 48):
            base = np.arange(3000, dtype=np.int64).astype(dtype)[off:off + 2048]
            a = tuning._cache_line_aligned(base)
            assert a.ctypes.data % 64 == 0 and a.dtype == dtype and np.array_equal(a, base)
    seen = []
    real = tuning._dot4_peak

    def spy(w, x, out, n, n_iter):
        seen.append((w.ctypes.data % 64, x.ctypes.data % 64))
        return real(w, x, out, n, n_iter)
    monkeypatch.setattr(tuning, "_dot4_peak", spy)
    tuning.measure_int8_peak(1, reps=1, seconds=0.01)
    assert seen and set(seen) == {(0, 0)}


def test_the_int8_peak_refuses_bad_arguments():
    with pytest.raises(ValueError, match="measure_int8_peak"):
        tuning.measure_int8_peak(1, reps=0)
