"""The controller's first solve (:meth:`mpc.MPC.start`) when the solver's default guess fails: it is
retried from the measured state held at every knot, and if that fails too the controller stops with
one error naming both failures (never a plan built from non-finite values). The retry succeeding is
checked on a perturbed humanoid start in tests/tasks/test_humanoid_walk.py. Also how an update sets
up its solve: the warm start's tail, and the measured state set before the task's update_problem."""

from __future__ import annotations

import numpy as np
import pytest

from mpc import MPC
from tasks import get_task


def test_a_state_no_guess_can_start_from_stops_with_both_reasons():
    """A hand-made start with joint velocities of 1e200 rad/s: the open-loop rollout overflows and
    the held-state guess cannot be evaluated (non-finite); the error names both, and no plan is kept."""
    task = get_task("iiwa-reach")
    ctrl = MPC(task, solver="fddp", backend="numpy", horizon=5, dt=0.02, initial_iterations=3)
    x = np.array(task.initial_state(), float)
    x[task.model.nq:] = 1e200
    with np.errstate(all="ignore"), pytest.raises(RuntimeError, match="first solve failed") as err:
        ctrl.start(0.0, x)
    msg = str(err.value)
    assert "diverged" in msg and "held over the horizon" in msg and "non-finite" in msg.split("held")[1], msg
    assert ctrl.plan is None and ctrl.initial_record is None


def test_knots_past_the_previous_plan_take_the_tasks_nominal_controls():
    """The warm start of an update is the previous plan shifted; the knots it does not reach take
    the task's :meth:`tasks.Task.nominal_controls` (here a hand-made constant) instead of that
    plan's last control, and the others are the shifted plan."""
    from tasks.iiwa_reach import IiwaReach

    class Nominal(IiwaReach):
        def nominal_controls(self, problem):
            return np.full((problem.horizon, problem.nu), 7.0)

    task = Nominal()
    dt, N = 0.02, 5
    ctrl = MPC(task, solver="fddp", backend="numpy", horizon=N, dt=dt, initial_iterations=3)
    x = task.initial_state()
    first = ctrl.start(0.0, x)
    seen = []
    solve = ctrl.solver.solve

    def spy(xs_init=None, us_init=None, **kw):
        seen.append(np.array(us_init))
        return solve(xs_init=xs_init, us_init=us_init, **kw)

    ctrl.solver.solve = spy
    ctrl.update(2 * dt, x)
    us = seen[0]
    np.testing.assert_array_equal(us[:N - 2], first.us[2:])     # the shifted plan
    np.testing.assert_array_equal(us[N - 2:], 7.0)              # past its end: the nominal controls


def test_update_problem_sees_the_measured_state_of_its_own_update():
    """The controller sets the measured state before the task's ``update_problem`` runs, so a task
    that reads ``problem.x0`` there (the gaits: footholds and trunk path from where the robot is)
    gets this update's state, not the previous one's."""
    from tasks.iiwa_reach import IiwaReach

    seen = []

    class Recording(IiwaReach):
        def update_problem(self, problem, t):
            seen.append((float(t), problem.x0.copy()))
            super().update_problem(problem, t)

    task = Recording()
    ctrl = MPC(task, solver="ilqr", backend="numpy", horizon=4, dt=0.02, initial_iterations=2)
    x0 = np.array(task.initial_state(), float)
    x1 = x0.copy()
    x1[task.model.nq:] = 0.1                                          # a measured velocity at the update
    ctrl.start(0.0, x0)
    n = len(seen)
    ctrl.update(0.02, x1)
    assert len(seen) == n + 1 and seen[-1][0] == 0.02
    np.testing.assert_array_equal(seen[-1][1], x1)
