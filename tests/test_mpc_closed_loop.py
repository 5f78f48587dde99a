"""Closed-loop MPC in MuJoCo (mpc/ + sim/ with the real solvers and the iiwa reaching task).

Kept short: two targets, 10 knots of 20 ms, an update every 20 physics steps (the numpy backend
runs each update in tens of milliseconds). The oracle is the MuJoCo simulation itself: the task's
success criteria are evaluated on MuJoCo's trajectory, not on the controller's predictions."""

from __future__ import annotations

import json
import time

import mujoco
import numpy as np
import pytest

from mpc import MPC
from sim import report
from sim.runner import simulate
from tasks import get_task
from tasks.iiwa_reach import DEFAULT_TARGETS


def _task(n_targets=2, switch_period=1.5):
    return get_task("iiwa-reach", targets=DEFAULT_TARGETS[:n_targets], switch_period=switch_period)


def _ee_error(task, r):
    return np.array([task.metrics(float(t), x)["ee_error"] for t, x in zip(r.t, r.x)])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_lockstep_reaching_succeeds_and_reports(tmp_path, backend):
    """The reference path (numpy dynamics, Python solver loops) and the default compiled path
    (numba dynamics, compiled backward pass) both reach the targets and report every stage."""
    task = _task()
    ctrl = MPC(task, solver="ddp", backend=backend, horizon=10, dt=0.02)
    assert ctrl.solver.compiled is (backend == "numba")
    steps = []
    assert ctrl.warmup(progress=lambda label, done, total: steps.append((label, done, total))) >= 0
    if backend == "numba":    # every kernel reported, in order, ending with the solver's
        assert [d for _, d, _ in steps] == list(range(len(steps)))
        assert {t for _, _, t in steps} == {len(steps)}
        labels = [lab for lab, _, _ in steps]
        assert "aba_derivatives (serial)" in labels and labels[-1] == "solver kernels"
    else:
        assert steps == []
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep", update_every=20)
    assert r.completed, r.aborted
    ev = task.evaluate(r.t, r.x, r.u_cmd)
    assert ev["success"], ev
    assert all(0 < t <= task.reach_time for t in ev["reach_times"])
    assert ev["torque_violation"] == 0.0
    # the controller's own records: one per update, every stage timed
    assert len(ctrl.records) == len(r.updates) == int(task.duration / 0.02) - 1
    for rec in ctrl.records:
        assert rec.iterations >= 0 and np.isfinite(rec.cost)
        assert all(rec.timings[s] > 0 for s in ("derivatives", "backward", "cost", "total"))

    metrics = report.metric_series(task, r)
    s = report.summarize(r, task, metrics, config={"solver": "ddp"}, warmup_s=0.0)
    tm = s["timing"]
    assert tm["control_loop_hz"] > 0 and tm["real_time_factor"] > 0
    assert 0 < tm["update_latency_ms"]["median"] <= tm["update_latency_ms"]["p95"] <= tm["update_latency_ms"]["max"]
    assert all(tm["stage_ms"][k] > 0 for k in ("derivatives", "backward", "forward", "cost"))
    assert s["success"] is True and s["completed"] is True
    assert s["constraints"]["torque_limit"]["violation_steps"] == 0
    assert s["constraints"]["joint_limit"]["violation_steps"] == 0
    assert [t["success"] for t in s["targets"]] == [True, True]
    assert all(t["median_error_after_reach_m"] < task.reach_tolerance for t in s["targets"])

    path = report.write_summary(s, tmp_path / "summary.json")
    assert json.loads(path.read_text())["timing"]["updates"] == len(r.updates)
    npz = np.load(report.write_trajectory(r, tmp_path / "traj.npz", metrics))
    np.testing.assert_array_equal(npz["x"], r.x)
    np.testing.assert_array_equal(npz["update_cost"], [rec.cost for rec in ctrl.records])
    np.testing.assert_array_equal(npz["update_time_cost"], [rec.timings["cost"] for rec in ctrl.records])
    pytest.importorskip("matplotlib", reason="plots need the optional matplotlib (the 'plot' extra)")
    from sim import plots
    for f in (plots.plot_tracking(r, metrics, tmp_path / "tracking.png", threshold=task.reach_tolerance),
              plots.plot_torques(r, tmp_path / "torques.png"), plots.plot_latency(r, tmp_path / "latency.png")):
        assert f.stat().st_size > 1000


def test_feedback_gains_reduce_tracking_error_at_low_update_rate():
    """A 2 kg payload on the last link that the controller's model does not know, and updates at
    only 10 Hz: between updates the Riccati feedback (interpolated along the plan) corrects the
    mismatch; the feed-forward plan alone drifts. Compared on the settled error of one target."""
    task = _task(n_targets=1, switch_period=1.5)
    scene = mujoco.MjModel.from_xml_path(task.model.path)
    scene.body_mass[mujoco.mj_name2id(scene, mujoco.mjtObj.mjOBJ_BODY, "link7")] += 2.0
    settled = {}
    for feedback in (True, False):
        ctrl = MPC(task, solver="ilqr", horizon=10, dt=0.02, feedback=feedback)
        r = simulate(task.model, ctrl, task.initial_state(), task.duration, update_every=100, mj_model=scene)
        assert r.completed
        err = _ee_error(task, r)
        settled[feedback] = err[r.t >= 0.75].mean()
    assert settled[True] < 0.5 * settled[False], settled
    assert settled[True] < task.reach_tolerance


class _SlowMPC(MPC):
    """The same controller with an artificial extra compute time per update (a slow backend)."""

    extra = 0.25

    def update(self, t, x):
        time.sleep(self.extra)
        return super().update(t, x)


def test_realtime_mode_shows_the_cost_of_a_slow_controller():
    task = _task(n_targets=2, switch_period=1.0)
    lock = simulate(task.model, MPC(task, solver="ilqr", horizon=10, dt=0.02), task.initial_state(),
                    task.duration, mode="lockstep", update_every=20)
    slow = simulate(task.model, _SlowMPC(task, solver="ilqr", horizon=10, dt=0.02), task.initial_state(),
                    task.duration, mode="realtime", update_every=20)
    assert lock.completed and slow.completed
    # plans are applied no earlier than their compute time after the state they used
    delays = [u.t_applied - u.t_measured for u in slow.updates if u.t_applied is not None]
    assert min(delays) >= _SlowMPC.extra
    assert len(slow.updates) <= task.duration / _SlowMPC.extra + 1
    # the lockstep run reaches both targets; the slow real-time one tracks visibly worse
    assert task.evaluate(lock.t, lock.x, lock.u_cmd)["success"]
    assert _ee_error(task, slow).mean() > 2 * _ee_error(task, lock).mean()


def test_mpc_rejects_bad_settings():
    task = _task(n_targets=1)
    with pytest.raises(ValueError, match="unknown solver"):
        MPC(task, solver="newton")
    with pytest.raises(ValueError, match="unknown backend"):
        MPC(task, backend="tpu")
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        MPC(task, horizon=0)
    with pytest.raises(ValueError, match="dt must be a positive number"):
        MPC(task, dt=float("nan"))
    with pytest.raises(ValueError, match="iterations_per_update"):
        MPC(task, iterations_per_update=1.5)
    with pytest.raises(ValueError, match="time_budget"):
        MPC(task, time_budget=-1.0)


def test_time_budget_limits_iterations():
    task = _task(n_targets=1)
    ctrl = MPC(task, solver="ilqr", horizon=8, dt=0.02, iterations_per_update=50, time_budget=1e-6)
    x = task.initial_state()
    ctrl.start(0.0, x)
    x2 = x.copy()
    x2[0] += 0.05  # a disturbance so that one iteration does not converge
    ctrl.update(0.02, x2)
    assert ctrl.records[-1].iterations == 1  # the budget allows no second iteration
    ctrl2 = MPC(task, solver="ilqr", horizon=8, dt=0.02, iterations_per_update=3)  # no budget
    ctrl2.start(0.0, x)
    ctrl2.update(0.02, x2)
    rec = ctrl2.records[-1]
    assert rec.iterations == 3 or (rec.converged and rec.iterations >= 1)


def test_failed_solve_keeps_the_previous_plan():
    """A solve that fails before its first iteration (its gains are not valid) must not replace
    the plan in use; a later successful solve does."""
    from solvers import SolverResult

    task = _task(n_targets=1)
    ctrl = MPC(task, solver="ilqr", horizon=8, dt=0.02)
    x = task.initial_state()
    first = ctrl.start(0.0, x)
    real_solve = ctrl.solver.solve

    def failing_solve(xs_init=None, us_init=None, max_iter=1, tol=1e-6):
        N, nu = first.us.shape
        return SolverResult(xs=np.full_like(first.xs, np.nan), us=np.zeros((N, nu)), K=np.zeros_like(first.K),
                            k=np.zeros((N, nu)), cost=np.nan, cost_history=[], iterations=0, converged=False,
                            reason="the initial rollout diverged", timings={"total": 1e-4})

    ctrl.solver.solve = failing_solve
    p = ctrl.update(0.02, x)
    rec = ctrl.records[-1]
    assert rec.fallback and not rec.converged and "diverged" in rec.reason
    assert p.t0 == first.t0
    np.testing.assert_array_equal(p.us, first.us)
    np.testing.assert_array_equal(p.K, first.K)
    ctrl.solver.solve = real_solve
    p2 = ctrl.update(0.04, x)
    assert not ctrl.records[-1].fallback and p2.t0 == 0.04
