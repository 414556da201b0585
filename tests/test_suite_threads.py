"""The test suite's own sharing of the cores (conftest.py): each pytest-xdist worker's Numba
threads, and the passive OpenMP wait of a one-thread worker, which must not reach subprocesses."""
import os

import numba
import pytest

import conftest


@pytest.mark.parametrize("workers, cpus, n_max, want", [
    (2, 2, 2, 1), (2, 8, 8, 4), (3, 2, 2, 1), (1, 4, 2, 2), (0, 4, 4, 4), (4, 16, 2, 2)])
def test_worker_threads(workers, cpus, n_max, want):
    assert conftest.worker_threads(workers, cpus, n_max) == want


def _calls(monkeypatch, cpus):
    seen = []
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", cpus)
    monkeypatch.setattr(numba, "set_num_threads", lambda n: seen.append((n, os.environ.get("OMP_WAIT_POLICY"))))
    return seen


def test_a_one_thread_worker_starts_its_threads_waiting_passively(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen = _calls(monkeypatch, 2)
    conftest._share_the_cores(2)
    assert seen == [(1, "passive")]              # set while Numba starts its threads ...
    assert "OMP_WAIT_POLICY" not in os.environ   # ... and gone after: subprocesses keep the default


def test_a_worker_of_several_threads_and_the_users_setting_keep_their_wait(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen = _calls(monkeypatch, 8)
    conftest._share_the_cores(2)                 # 4 threads a worker: their regions run on all four
    assert seen == [(4, None)]
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    seen = _calls(monkeypatch, 2)
    conftest._share_the_cores(2)
    assert seen == [(1, "active")] and os.environ["OMP_WAIT_POLICY"] == "active"
