"""A solver warmed up again (a task's warm-up times: the same problem re-phased) runs one throw-away
iteration, which builds the new knot structure's data, and the second one (every batch on the
parallel variant) only when the first met a kernel signature not compiled or loaded before. (Each
throw-away iteration is two solves: a cold one and one warm-started from its result, as an MPC
update is.)"""

from __future__ import annotations

import pytest

import solvers.warmup as warmup
from mpc import MPC
from tasks import get_task
from tasks.iiwa_reach import DEFAULT_TARGETS

pytest.importorskip("numba")


def _logged_solves(monkeypatch, solver, log):
    be = solver.problem.backend
    solve = solver.solve
    monkeypatch.setattr(solver, "solve", lambda *a, **k: log.append(be.parallel_threshold_us) or solve(*a, **k))


def test_a_repeated_warmup_runs_one_iteration_unless_a_kernel_is_new(monkeypatch):
    ctrl = MPC(get_task("iiwa-reach", targets=DEFAULT_TARGETS[:1]), solver="ilqr", backend="numba", horizon=8,
               dt=0.02)
    solver, be = ctrl.solver, ctrl.backend
    threshold = be.parallel_threshold_us
    log: list = []
    _logged_solves(monkeypatch, solver, log)
    solver.warmup()
    assert log == [threshold] * 2 + [0.0] * 2      # the first warm-up: both iterations
    log.clear()
    solver.warmup()
    assert log == [threshold] * 2                  # again, nothing new met: one iteration
    # a kernel signature met for the first time in that iteration: the parallel variants too
    counts = iter(range(100))
    monkeypatch.setattr(warmup, "kernel_signatures", lambda: next(counts))
    log.clear()
    solver.warmup()
    assert log == [threshold] * 2 + [0.0] * 2 and be.parallel_threshold_us == threshold

