"""benchmarks.contention.busy_neighbours: the busy processes run during the block and are always
ended (normal exit, exception, parent killed outright); mpc_rate's quiet/busy medians."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.contention import busy_neighbours

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])     # utime + stime


pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")


def test_neighbours_burn_cpu_during_the_block_and_end_after_it():
    with busy_neighbours(2) as pids:
        assert len(pids) == 2
        time.sleep(0.5)
        assert all(_alive(p) for p in pids)
        assert all(_cpu_ticks(p) > 0 for p in pids)    # they spin, not sleep
        assert all(os.getsid(p) == p for p in pids)    # each in a session of its own, as another program
    assert not any(_alive(p) for p in pids)
    with busy_neighbours(1, same_session=True) as (pid,):
        assert os.getsid(pid) == os.getsid(0)
    assert not _alive(pid)


def test_neighbours_end_on_an_exception_and_reject_bad_counts():
    pids = []
    with pytest.raises(RuntimeError, match="measurement failed"):
        with busy_neighbours(1) as pids:
            raise RuntimeError("measurement failed")
    assert pids and not _alive(pids[0])
    with busy_neighbours(0) as none:
        assert none == []
    with pytest.raises(ValueError, match="k must be an integer >= 0"):
        with busy_neighbours(-1):
            pass


def test_neighbours_exit_when_their_parent_is_killed():
    # the parent skips every cleanup (os._exit, as after SIGKILL): the child must notice by itself
    code = ("import os, sys; from benchmarks.contention import busy_neighbours\n"
            "cm = busy_neighbours(1); pids = cm.__enter__(); print(pids[0], flush=True); os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_closed_loops_reports_quiet_and_busy_medians(monkeypatch):
    from benchmarks import mpc_rate
    rates = iter([100.0, 40.0, 120.0, 60.0, 110.0, 50.0])     # quiet, busy, quiet, busy, ...
    started = []

    def fake_loop(task, backend, solver, N, dt, duration):
        hz = next(rates)
        return {"control_loop_hz": hz, "update_latency_ms": {"median": 1e3 / hz, "p95": 2e3 / hz},
                "real_time_factor": hz / 100}

    class FakeBusy:
        def __init__(self, k, same_session=False):
            started.append(k)

        def __enter__(self):
            return []

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(mpc_rate, "closed_loop", fake_loop)
    monkeypatch.setattr(mpc_rate, "busy_neighbours", FakeBusy)
    e = mpc_rate.closed_loops(None, "numba", "ilqr", 32, 0.01, 1.0, busy=1, loop_repeats=3)
    assert started == [1, 1, 1]
    assert e["runs_hz"] == {"quiet": [100.0, 120.0, 110.0], "busy": [40.0, 60.0, 50.0]}
    assert e["control_loop_hz"] == 110.0 and e["control_loop_hz_median"] == 110.0
    assert e["busy"]["control_loop_hz"] == 50.0 and e["busy"]["ratio_quiet_vs_busy_hz"] == pytest.approx(2.2)
    assert e["busy"]["update_latency_ms_median"] == pytest.approx(20.0)
    rates = iter([90.0, 70.0])
    monkeypatch.setattr(mpc_rate, "closed_loop", fake_loop)
    quiet_only = mpc_rate.closed_loops(None, "numba", "ilqr", 32, 0.01, 1.0, busy=0, loop_repeats=2)
    assert started == [1, 1, 1] and "busy" not in quiet_only
    assert quiet_only["runs_hz"] == {"quiet": [90.0, 70.0]} and quiet_only["control_loop_hz_median"] == 80.0
