"""dynamics.worker_threads.use_threads: numba's per-calling-thread worker count, set only when it
changes, and per calling thread."""

from __future__ import annotations

import threading

import pytest

numba = pytest.importorskip("numba")

from dynamics import worker_threads  # noqa: E402


def test_use_threads_sets_numba_count_for_the_calling_thread():
    top = numba.config.NUMBA_NUM_THREADS
    worker_threads.use_threads(1)
    assert numba.get_num_threads() == 1
    worker_threads.use_threads(top)
    assert numba.get_num_threads() == top
    seen = []

    def other():            # another Python thread starts from numba's default and sets its own
        worker_threads.use_threads(1)
        seen.append(numba.get_num_threads())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [1] and numba.get_num_threads() == top


# ------------------------------------------------------------------ thread-count policy
def test_threads_for_counts_only_cores_no_other_process_runs_on():
    R = worker_threads.LoadReading
    assert worker_threads.threads_for(R(running=1, own_running=1, cpus=2), top=2) == 2     # quiet
    assert worker_threads.threads_for(R(running=3, own_running=2, cpus=2), top=2) == 1     # one busy neighbour
    assert worker_threads.threads_for(R(running=9, own_running=1, cpus=2), top=2) == 1     # never below 1
    assert worker_threads.threads_for(R(running=2, own_running=1, cpus=8), top=4) == 4     # capped at top
    assert worker_threads.threads_for(R(running=6, own_running=1, cpus=8), top=8) == 3
    # our own spinning workers are not neighbours, even if the machine-wide count is higher than ours
    assert worker_threads.threads_for(R(running=2, own_running=5, cpus=2), top=2) == 2
    with pytest.raises(ValueError, match="top must be >= 1"):
        worker_threads.threads_for(R(1, 1, 2), top=0)


class _Fake:
    """A fake load source and clock: ``others`` runnable threads of other processes."""

    def __init__(self):
        self.others, self.t, self.reads = 0, 0.0, 0

    def read(self):
        self.reads += 1
        return worker_threads.LoadReading(running=1 + self.others, own_running=1, cpus=2)

    def clock(self):
        return self.t


def test_monitor_follows_a_sustained_neighbour_not_a_blip():
    f = _Fake()
    m = worker_threads.CoreMonitor(interval_s=0.05, window=5, read=f.read, clock=f.clock)
    assert m.threads(2) == 2
    m.threads(2)
    assert f.reads == 1                       # no new reading within interval_s
    for _ in range(4):                        # fill the window quiet
        f.t += 0.06
        m.threads(2)
    f.others = 1                              # one reading sees a short-lived thread: no switch
    f.t += 0.06
    assert m.threads(2) == 2
    f.others = 0
    f.t += 0.06
    assert m.threads(2) == 2
    f.others = 1                              # a neighbour that stays: serial within the window
    seen = []
    for _ in range(5):
        f.t += 0.06
        seen.append(m.threads(2))
    assert seen[-1] == 1 and seen[0] == 2
    assert sum(m.chosen.values()) == f.reads and m.chosen[1] >= 1 and m.chosen[2] >= 1
    assert m.last_readings() == [1] * 5
    f.others = 0                              # it leaves: parallel again
    for _ in range(5):
        f.t += 0.06
        m.threads(2)
    assert m.threads(2) == 2


def test_monitor_without_proc_uses_every_thread():
    m = worker_threads.CoreMonitor(read=lambda: None, clock=lambda: 0.0)
    assert m.threads(2) == 2 and m.threads(3) == 3    # a new top starts a new window


def test_read_load_sees_this_thread():
    r = worker_threads.read_load()
    if r is None:
        pytest.skip("no /proc here")
    assert r.own_running >= 1 and r.running >= 1 and r.cpus >= 1


def test_policy_variable(monkeypatch):
    assert worker_threads.parse_policy(None) == "adaptive"
    assert worker_threads.parse_policy(" All ") == "all"
    assert worker_threads.parse_policy("3") == 3
    for bad in ("0", "-1", "fast"):
        with pytest.raises(ValueError, match="MPC_ACCEL_THREADS"):
            worker_threads.parse_policy(bad)
    monkeypatch.setattr(worker_threads, "_policy", "all")
    assert worker_threads.default_threads(2) == 2
    monkeypatch.setattr(worker_threads, "_policy", 1)
    assert worker_threads.default_threads(2) == 1
    assert worker_threads.thread_policy_status() == "MPC_ACCEL_THREADS=1"
    f = _Fake()
    f.others = 1
    monkeypatch.setattr(worker_threads, "_policy", "adaptive")
    monkeypatch.setattr(worker_threads, "_monitor", worker_threads.CoreMonitor(read=f.read, clock=f.clock))
    assert worker_threads.default_threads(2) == 1
    assert worker_threads.default_threads(1) == 1


def test_numba_backend_threads_follow_the_policy(monkeypatch):
    from dynamics.numba_backend import NumbaBackend
    top = numba.config.NUMBA_NUM_THREADS
    be = NumbaBackend()
    monkeypatch.setattr(worker_threads, "_policy", 1)
    assert be.threads == 1 and be.max_threads == top
    monkeypatch.setattr(worker_threads, "_policy", "all")
    assert be.threads == top
    be.set_threads(1)                         # a count set on the backend wins over the policy
    assert be.threads == 1 and be.max_threads == 1


def test_monitor_reports_changes_of_the_count_only():
    f = _Fake()
    changes = []
    m = worker_threads.CoreMonitor(interval_s=0.05, window=1, read=f.read, clock=f.clock, on_change=changes.append)
    for others in (0, 0, 1, 1, 0):
        f.others = others
        f.t += 0.06
        m.threads(2)
    assert changes == [2, 1, 2]


def test_openblas_pool_can_be_resized():
    import numpy as np
    blas = worker_threads.OpenBLASThreads.find()
    if blas is None:
        pytest.skip("numpy does not use OpenBLAS here")
    start = blas.get()
    try:
        blas.set(1)
        assert blas.get() == 1
        a = np.random.default_rng(0).standard_normal((200, 200))
        np.testing.assert_allclose(a @ np.eye(200), a)     # BLAS still works on one thread
    finally:
        blas.set(start)
    assert blas.get() == start


def test_kernels_blas_runs_on_one_thread_once_numba_starts():
    """scipy's OpenBLAS (what the compiled kernels' products call) is sized to one thread by the
    first use_threads call; numpy's follows the count. Fresh process: the pools are per process."""
    import os
    import subprocess
    import sys
    code = (
        "import scipy.linalg.cython_blas\n"
        "from dynamics import worker_threads as w\n"
        "pools = w.OpenBLASThreads.find_all()\n"
        "k = pools['kernels']\n"
        "if k is None: print('none'); raise SystemExit\n"
        "k.set(2); before = k.get()\n"
        "w.use_threads(1)\n"
        "print(before, k.get(), pools['numpy'] is not None)\n")
    env = {k: v for k, v in os.environ.items() if k not in worker_threads.BLAS_VARIABLES}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    if out == ["none"]:
        pytest.skip("no OpenBLAS besides numpy's here (one shared BLAS library follows the numba count)")
    before, after, numpy_found = out
    if int(before) < 2:
        pytest.skip("OpenBLAS runs one thread on this machine: nothing to size")
    assert (int(after), numpy_found) == (1, "True")


# ------------------------------------------------------------------ epoch of the thread counts
def test_epoch_changes_when_a_thread_count_may_change(monkeypatch):
    """What callers that keep derived thread counts watch (worker_threads.epoch): a backend's count
    or serial threshold set, the adaptive policy choosing another count; None while a reading is due."""
    from dynamics.numba_backend import NumbaBackend
    f = _Fake()
    mon = worker_threads.CoreMonitor(interval_s=0.05, window=1, read=f.read, clock=f.clock)
    monkeypatch.setattr(worker_threads, "_monitor", mon)
    monkeypatch.setattr(worker_threads, "_policy", "adaptive")
    assert worker_threads.epoch() is None               # no reading taken yet
    assert worker_threads.default_threads(2) == 2
    e = worker_threads.epoch()
    assert e is not None and worker_threads.epoch() == e
    f.t += 0.06                                          # the interval passed: a reading is due
    assert worker_threads.epoch() is None
    assert worker_threads.default_threads(2) == 2        # same count: the epoch stays
    assert worker_threads.epoch() == e
    f.others, f.t = 1, f.t + 0.06                        # a neighbour: one thread
    assert worker_threads.default_threads(2) == 1
    e1 = worker_threads.epoch()
    assert e1 is not None and e1 != e
    be = NumbaBackend()
    be.set_threads(1)
    e2 = worker_threads.epoch()
    assert e2 != e1
    be.parallel_threshold_us = 0.0
    assert worker_threads.epoch() != e2 and be.parallel_threshold_us == 0.0
    monkeypatch.setattr(worker_threads, "_policy", "all")    # another policy: never due
    f.t += 1.0
    assert worker_threads.epoch() is not None
