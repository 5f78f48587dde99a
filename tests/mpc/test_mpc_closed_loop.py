"""Closed-loop MPC in MuJoCo (mpc/ + sim/ with the real solvers and the iiwa reaching task).

Kept short: two targets, 10 knots of 20 ms, an update every 20 physics steps (the numpy backend
runs each update in tens of milliseconds). The oracle is the MuJoCo simulation itself: the task's
success criteria are evaluated on MuJoCo's trajectory, not on the controller's predictions."""

from __future__ import annotations

import json
import sys
import time

import mujoco
import numpy as np
import pytest

from mpc import MPC
from sim import report
from sim.runner import simulate
from tasks import get_task
from tasks.iiwa_reach import DEFAULT_TARGETS


def _compiled_signatures() -> dict[tuple[str, str], int]:
    """Number of compiled signatures of every numba kernel of the project's modules loaded so far."""
    from numba.core.registry import CPUDispatcher
    return {(name, attr): len(obj.overloads) for name, mod in list(sys.modules.items())
            if name.split(".")[0] in ("dynamics", "solvers") for attr, obj in list(vars(mod).items())
            if isinstance(obj, CPUDispatcher)}


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
    ctrl.warmup(progress=lambda label, done, total: steps.append((label, done, total)))
    # numba: each kernel compiled is reported, counted, as it compiles (none when all load from the
    # on-disk cache); the numpy reference compiles nothing
    assert [d for _, d, _ in steps] == list(range(1, len(steps) + 1))
    assert all(t is None and isinstance(lab, str) and lab for lab, _, t in steps)
    if backend == "numpy":
        assert steps == []
    before = _compiled_signatures()
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep", update_every=20)
    if backend == "numba":   # the warm-up ran every kernel variant the closed loop uses: none compiled later
        assert _compiled_signatures() == before
    assert r.completed, r.aborted
    ev = task.evaluate(r.t, r.x, r.u_cmd)
    assert ev.success, ev
    reach = [ev[f"target {i} time to reach"].value for i in range(2)]
    assert all(0 < t <= task.reach_time for t in reach), reach
    assert ev["torque limit"].value == 0.0
    # MuJoCo's end effector (its own kinematics, not the task's) ends at the last target
    d = mujoco.MjData(task.model.mj_model)
    d.qpos[:] = r.x[-1, :task.model.nq]
    mujoco.mj_kinematics(task.model.mj_model, d)
    assert np.linalg.norm(d.site_xpos[task.model.site_id("ee")] - task.targets[1]) < task.reach_tolerance
    assert np.abs(r.x[-1, task.model.nq:]).max() < 0.1           # and has come to rest there
    # the controller's own records: one per update, one iteration each (or converged), every stage timed
    assert len(ctrl.records) == len(r.updates) == int(task.duration / 0.02) - 1
    its = np.array([rec.iterations for rec in ctrl.records])
    assert np.all(its <= 1) and its.mean() > 0.9
    for rec in ctrl.records:
        assert np.isfinite(rec.cost) and not rec.fallback
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
    crit = {c["name"]: c for c in s["evaluation"]["criteria"]}
    assert [crit[f"target {i} time to reach"]["passed"] for i in range(2)] == [True, True]
    assert all(crit[f"target {i} error after reach"]["value"] < task.reach_tolerance for i in range(2))
    assert "target_index" not in s["tracking"] and s["tracking_units"]["ee_error"] == "m"
    assert [row["index"] for row in s["evaluation"]["details"]["targets"]] == [0, 1]

    path = report.write_summary(s, tmp_path / "summary.json")
    assert json.loads(path.read_text())["timing"]["updates"] == len(r.updates)
    npz = np.load(report.write_trajectory(r, tmp_path / "traj.npz", metrics))
    np.testing.assert_array_equal(npz["x"], r.x)
    np.testing.assert_array_equal(npz["update_cost"], [rec.cost for rec in ctrl.records])
    np.testing.assert_array_equal(npz["update_time_cost"], [rec.timings["cost"] for rec in ctrl.records])
    pytest.importorskip("matplotlib", reason="plots need the optional matplotlib (the 'plot' extra)")
    from sim import plots
    events = task.events(r.sim_time)
    assert [e.t for e in events] == [1.5]
    for f in (plots.plot_metrics(r, metrics, tmp_path / "tracking.png", info=task.metric_info(), events=events),
              plots.plot_torques(r, tmp_path / "torques.png", events=events),
              plots.plot_latency(r, tmp_path / "latency.png")):
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
    assert task.evaluate(lock.t, lock.x, lock.u_cmd).success
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



@pytest.mark.parametrize("bad", ["xs", "us", "K"])
def test_non_finite_solve_result_keeps_the_previous_plan(bad):
    """A solve that ran its iterations but returned non-finite states, controls or gains: the plan
    in use stays (the plan's own finiteness check decides; no second scan in the controller)."""
    from solvers import SolverResult

    task = _task(n_targets=1)
    ctrl = MPC(task, solver="ilqr", horizon=8, dt=0.02)
    x = task.initial_state()
    first = ctrl.start(0.0, x)
    arrays = {"xs": first.xs.copy(), "us": first.us.copy(), "K": first.K.copy()}
    arrays[bad].flat[3] = np.nan

    def nan_solve(xs_init=None, us_init=None, max_iter=1, tol=1e-6):
        return SolverResult(xs=arrays["xs"], us=arrays["us"], K=arrays["K"], k=np.zeros_like(first.us), cost=1.0,
                            cost_history=[1.0], iterations=1, converged=False, reason="max iterations",
                            timings={"total": 1e-4})

    ctrl.solver.solve = nan_solve
    p = ctrl.update(0.02, x)
    assert ctrl.records[-1].fallback and p.t0 == first.t0
    np.testing.assert_array_equal(p.us, first.us)


def test_solver_settings_reach_the_problem_and_solver():
    """The options the CLI exposes land in the problem and the solver; the default backend is
    dynamics.default_backend_name(); the plan saturates at the problem's bounds."""
    from dynamics import default_backend_name

    task = _task(n_targets=1)
    ctrl = MPC(task, solver="ddp", horizon=4, dt=0.02)
    assert ctrl.backend.name == default_backend_name() == ctrl.problem.backend.name
    assert ctrl.problem.integrator == "euler" and ctrl.solver.box and ctrl.solver.line_search == "backtracking"
    ctrl = MPC(task, solver="fddp", backend="numpy", horizon=4, dt=0.02, box=False, line_search="parallel",
               integrator="rk4", second_order="fd", refresh_gains=True, tol=0.0)
    assert ctrl.problem.integrator == "rk4" and ctrl.problem.second_order == "fd"
    assert ctrl.solver.box is False and ctrl.solver.line_search == "parallel" and ctrl.solver.refresh_gains
    plan = ctrl.start(0.0, task.initial_state())
    np.testing.assert_array_equal(plan.u_lower, ctrl.problem.u_lower)
    x = task.initial_state()
    x[0] += 1.0                           # far from the plan: the feedback term alone exceeds the limits
    assert np.all(np.abs(plan.control(0.0, x)) <= task.model.u_upper)
    assert np.any(np.abs(plan.control(0.0, x, clip=False)) > task.model.u_upper)
    with pytest.raises(ValueError, match="unknown integrator 'midpoint'"):
        MPC(task, integrator="midpoint")
    with pytest.raises(ValueError, match="unknown line_search"):
        MPC(task, line_search="golden")
    with pytest.raises(ValueError, match="tol must be"):
        MPC(task, tol=-1.0)
