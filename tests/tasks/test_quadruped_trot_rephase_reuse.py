"""Quadruped trot on the numba backend: a problem re-phased knot by knot over more than a gait cycle
(what the MPC does every update), with its solver, data, compiled cost layouts, contact rollouts and
pooled dynamics data kept across re-phasings, and the task's phase patterns kept per gait phase,
gives bitwise the derivatives, candidate costs and FDDP iterate of a problem, solver and phase
pattern built afresh at every update."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics import available_backends
from solvers import FDDP
from tasks.registry import get_task

pytestmark = pytest.mark.skipif(not available_backends()["numba"][0], reason="numba backend unavailable")


def test_rephased_problem_and_solver_equal_fresh_ones_every_update():
    N, dt = 8, 0.02
    kept_task, fresh_task = get_task("hyq-trot", cones="penalty"), get_task("hyq-trot", cones="penalty")
    x_stand = kept_task.initial_state()
    kept = kept_task.build_problem(x_stand, N, dt, backend="numba")
    solver = FDDP(kept)
    data = kept.create_data(second_order=False, max_candidates=3)
    rng = np.random.default_rng(5)
    ts = np.round(kept_task.start_time + dt * np.arange(-2, int(kept_task.cycle / dt) + 6), 9)
    revisions = kept.revision
    cached = 0
    for t in ts:
        x = x_stand + 0.005 * rng.normal(size=x_stand.shape)
        x[3:7] /= np.linalg.norm(x[3:7])
        liftoff = kept_task._liftoff.copy()     # the feet's lift-off points remembered so far
        fresh = fresh_task.build_problem(x_stand, N, dt, backend="numba")
        fresh_task._liftoff = liftoff          # (the build's own update at t = 0 reset them)
        # the kept task's phase patterns come from its cache once the gait comes round to a phase
        # again (the second cycle); the fresh task, rebuilt, computes each afresh
        patterns = len(kept_task._pattern_cache[1])
        for p, task in ((kept, kept_task), (fresh, fresh_task)):
            p.set_initial_state(x)
            task.update_problem(p, t)
        cached += len(kept_task._pattern_cache[1]) == patterns
        us = np.array(kept_task.nominal_controls(kept)) + rng.normal(size=(N, kept.nu))
        xs = kept.rollout(us)
        assert np.all(np.isfinite(xs)), f"t = {t}: the test trajectory diverged"
        # derivatives into kept data (regrouped, pooled) vs fresh data
        a, b = kept.derivatives(xs, us, data=data), fresh.derivatives(xs, us)
        for f in ("l", "lx", "lu", "lxx", "lxu", "luu"):
            np.testing.assert_array_equal(getattr(a.running, f), getattr(b.running, f), err_msg=f"t = {t}: {f}")
        np.testing.assert_array_equal(a.terminal.lxx, b.terminal.lxx)
        for f in ("xnext", "Fx", "Fu"):
            np.testing.assert_array_equal(getattr(a.dynamics, f), getattr(b.dynamics, f), err_msg=f"t = {t}: {f}")
        # candidate costs (the line search's batched evaluation)
        X = np.stack([xs, xs, xs])
        U = np.stack([us, 1.01 * us, 0.99 * us])
        np.testing.assert_array_equal(kept.cost(X, U), fresh.cost(X, U), err_msg=f"t = {t}: candidate costs")
        # one FDDP iteration from the same warm start: the kept solver vs a new one
        r1 = solver.solve(xs, us, max_iter=1)
        r2 = FDDP(fresh).solve(xs, us, max_iter=1)
        np.testing.assert_array_equal(r1.xs, r2.xs, err_msg=f"t = {t}: xs")
        np.testing.assert_array_equal(r1.us, r2.us, err_msg=f"t = {t}: us")
        assert r1.cost == r2.cost
    assert kept.revision - revisions >= len(ts) // 2      # re-phased at most updates (a swing knot shift: not)
    assert cached >= 3                                    # the cached patterns were exercised
