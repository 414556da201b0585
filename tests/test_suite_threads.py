"""The test suite's own sharing of the cores (conftest.py): each pytest-xdist worker's Numba
threads, and the passive OpenMP wait of a worker of several, which must not reach subprocesses."""
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


@pytest.mark.parametrize("cpus, share", [(2, 1), (8, 4)])
def test_a_worker_starts_its_threads_waiting_passively(monkeypatch, cpus, share):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen = _calls(monkeypatch, cpus)
    conftest._share_the_cores(2)
    assert seen == [(share, "passive")]          # set while Numba starts its threads ...
    assert "OMP_WAIT_POLICY" not in os.environ   # ... and gone after: subprocesses keep the default


def test_the_users_own_wait_policy_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    seen = _calls(monkeypatch, 2)
    conftest._share_the_cores(2)
    assert seen == [(1, "active")] and os.environ["OMP_WAIT_POLICY"] == "active"
