"""kernels/machine.py: a figure measured once per machine, recorded, read back, measured again
when missing, damaged or too old, and measured by one process while the others wait."""
import json
import subprocess
import sys
import time

import pytest

from specnb.kernels.machine import MachineRecord, machine_key


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECNB_CACHE_DIR", str(tmp_path))
    return tmp_path


def ok(v):
    return isinstance(v.get("x"), int)


def test_measured_once_then_remembered_then_read_back(cache):
    rec, calls, said = MachineRecord("t.json", ok), [], []
    measure = lambda: calls.append(1) or {"x": 7}
    assert rec.get("k", measure, said.append, "measuring x")["x"] == 7 and calls == [1] and said == ["measuring x"]
    assert rec.get("k", measure)["x"] == 7 and calls == [1]                  # this process: from memory
    assert rec.path().startswith(str(cache)) and json.load(open(rec.path()))["k"]["x"] == 7
    again = MachineRecord("t.json", ok)                                       # a new process: from the file
    assert again.get("k", lambda: pytest.fail("measured again"))["x"] == 7
    assert again.get("other", lambda: {"x": 8})["x"] == 8                     # another key beside it
    assert set(json.load(open(rec.path()))) == {"k", "other"}


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"k": {"x": "seven"}}', '{"k": 3}'])
def test_a_damaged_record_is_measured_again(cache, damage):
    rec = MachineRecord("t.json", ok)
    rec.put("k", {"x": 1})
    open(rec.path(), "w").write(damage)
    assert MachineRecord("t.json", ok).read("k") is None
    assert MachineRecord("t.json", ok).get("k", lambda: {"x": 2})["x"] == 2


def test_a_valid_that_raises_reads_as_damaged(cache):
    rec = MachineRecord("t.json", lambda v: v["missing"] > 0)
    rec.put("k", {"x": 1})
    assert MachineRecord("t.json", lambda v: v["missing"] > 0).read("k") is None


def test_an_old_record_is_measured_again(cache):
    rec = MachineRecord("t.json", ok, max_age_s=60)
    rec.put("k", {"x": 1, "time": time.time() - 120})
    assert MachineRecord("t.json", ok, max_age_s=60).read("k") is None
    rec.put("k", {"x": 1})
    assert MachineRecord("t.json", ok, max_age_s=60).read("k")["x"] == 1
    rec.put("k", {"x": 1, "time": time.time() + 3600})                       # from the future: not trusted
    assert MachineRecord("t.json", ok, max_age_s=60).read("k") is None


def test_a_figure_kept_out_serves_this_process_only(cache):
    rec = MachineRecord("t.json", ok)
    assert rec.get("k", lambda: {"x": 1}, keep=lambda v: False)["x"] == 1
    assert rec.get("k", lambda: pytest.fail("measured again"))["x"] == 1
    assert MachineRecord("t.json", ok).read("k") is None


def test_a_read_only_cache_measures_again_next_time(cache, monkeypatch):
    import specnb.cache
    def refuse(*a, **kw):
        raise OSError("read-only")
    monkeypatch.setattr(specnb.cache, "write_bytes_atomic", refuse)
    rec = MachineRecord("t.json", ok)
    assert rec.get("k", lambda: {"x": 3})["x"] == 3 and MachineRecord("t.json", ok).read("k") is None


CHILD = """
import sys, time
from specnb.kernels.machine import MachineRecord
rec = MachineRecord("t.json", lambda v: isinstance(v.get("x"), int))
def measure():
    open(sys.argv[1], "a").write("measured\\n")
    time.sleep(1.0)
    return {"x": 5}
print(rec.get("k", measure)["x"])
"""


def test_processes_asking_at_once_measure_once(cache, tmp_path):
    log = tmp_path / "log.txt"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(log)], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outs == ["5"] * 4 and all(p.returncode == 0 for p in procs)
    assert log.read_text().count("measured") == 1


def test_the_machine_key_names_the_threads():
    assert machine_key(3).endswith("|3 threads")
