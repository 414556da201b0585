"""tests/cpu_times.py: per-test CPU time, a test's own and its subprocesses', and the report."""
import os
import subprocess
import sys
from pathlib import Path

import cpu_times

_TESTS = '''
import subprocess, sys, time

def _burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass

def test_own():
    _burn(0.3)

def test_child():
    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)

def test_idle():
    time.sleep(0.3)
'''


def test_each_test_gets_its_own_and_its_subprocesses_cpu_time(tmp_path):
    (tmp_path / "test_sample.py").write_text(_TESTS)
    folder = tmp_path / "cpu"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent), **{cpu_times.ENV: str(folder)})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "cpu_times", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = {nodeid.split("::")[1]: (own, kids, wall) for nodeid, own, kids, wall in cpu_times.read(str(folder))}
    assert sorted(rows) == ["test_child", "test_idle", "test_own"]
    assert rows["test_own"][0] >= 0.3 and rows["test_own"][1] < 0.1
    assert rows["test_child"][1] >= 0.3 and rows["test_child"][0] < 0.3
    assert rows["test_idle"][0] + rows["test_idle"][1] < 0.2 and rows["test_idle"][2] >= 0.3
    text = cpu_times.report(cpu_times.read(str(folder)), 2)
    assert text.startswith("3 tests: ") and "test_sample.py" in text
    assert text.count("::test_") == 2                 # the two that used most
    out = subprocess.run([sys.executable, str(Path(cpu_times.__file__)), str(folder), "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("::test_") == 1


def test_without_the_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(cpu_times.ENV, raising=False)
    monkeypatch.setattr(cpu_times, "_out", [])         # (as in a run without the plugin's folder)
    gen = cpu_times.pytest_runtest_protocol(None, None)
    next(gen)                                          # (the test would run here)
    try:
        next(gen)
    except StopIteration:
        pass
    assert not cpu_times._out
