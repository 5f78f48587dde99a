"""Tasks: registry and user-task loading, the iiwa reaching task's references and metrics (against
MuJoCo's kinematics), reachability of its targets, and a short closed loop in MuJoCo."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

import tasks
from solvers import DDP

ROOT = Path(__file__).resolve().parents[2]


def test_registry_and_specs():
    assert "iiwa-reach" in tasks.list_tasks() and tasks.list_tasks()["iiwa-reach"]
    t = tasks.get_task("iiwa-reach", switch_period=1.5)
    assert isinstance(t, tasks.IiwaReach) and t.switch_period == 1.5
    assert isinstance(tasks.get_task("tasks.iiwa_reach:IiwaReach"), tasks.IiwaReach)
    assert tasks.get_task(t) is t
    user = tasks.get_task(f"{ROOT / 'examples' / 'custom_task.py'}:IiwaCircle", radius=0.1)
    assert isinstance(user, tasks.Task) and user.radius == 0.1 and user.name == "iiwa-circle"
    with pytest.raises(KeyError, match="iiwa-reach"):
        tasks.get_task("iiwa-reech")
    with pytest.raises(FileNotFoundError):
        tasks.get_task("no/such/file.py:Task")
    with pytest.raises(AttributeError, match="Nope"):
        tasks.get_task("tasks.iiwa_reach:Nope")
    with pytest.raises(TypeError, match="Task"):
        tasks.get_task("numpy:ndarray")


def test_iiwa_reach_references_and_metrics():
    task = tasks.get_task("iiwa-reach")
    assert task.targets.shape[0] >= 4 and task.duration == 2.0 * task.targets.shape[0]
    x0 = task.initial_state()
    assert np.allclose(x0[:7], task.model.keyframe("home")) and np.all(x0[7:] == 0)
    p = task.build_problem(x0, 20, 0.05)
    # a horizon starting at 1.5 s crosses the switch at 2 s: knots at >= 2 s track target 1
    task.update_problem(p, 1.5)
    refs = p.running_cost["ee"].target
    times = 1.5 + 0.05 * np.arange(21)
    assert np.allclose(refs[times < 2.0 - 1e-9], task.targets[0])
    assert np.allclose(refs[times >= 2.0 - 1e-9], task.targets[1])
    assert np.allclose(p.terminal_cost["ee"].target, refs)
    # updates that skip re-setting an unchanged target still give every knot the right one: inside
    # one target, after the costs' targets or the task's own were changed, on both sides of a switch
    for t, change in ((0.2, None), (0.3, None), (0.4, "costs"), (0.5, "terminal"), (0.6, "task"), (3.2, None),
                      (3.5, None), (4.4, None)):
        if change == "costs":
            p.running_cost["ee"].target = p.terminal_cost["ee"].target = np.zeros(3)
        elif change == "terminal":
            p.terminal_cost["ee"].target = np.ones(3)
        elif change == "task":
            task.targets[0] = task.targets[0] + 0.01       # the task's own target row, edited in place
        task.update_problem(p, t)
        want = task.target_at(t + 0.05 * np.arange(21))
        np.testing.assert_array_equal(np.broadcast_to(p.running_cost["ee"].target, (21, 3)), want)
        np.testing.assert_array_equal(np.broadcast_to(p.terminal_cost["ee"].target, (21, 3)), want)
    # metrics against MuJoCo's site position
    rng = np.random.default_rng(0)
    q = task.model.random_configuration(rng)
    d = mujoco.MjData(task.model.mj_model)
    d.qpos[:] = q
    mujoco.mj_kinematics(task.model.mj_model, d)
    met = task.metrics(2.5, np.concatenate([q, np.zeros(7)]))
    assert met["target_index"] == 1
    assert np.isclose(met["ee_error"], np.linalg.norm(d.site_xpos[task.model.site_id("ee")] - task.targets[1]))
    # orientation tracking option adds the rotation terms
    po = tasks.get_task("iiwa-reach", orientation=True).build_problem(x0, 5, 0.05)
    assert "rotation" in po.running_cost and "rotation" in po.terminal_cost
    with pytest.raises(ValueError, match="targets"):
        tasks.get_task("iiwa-reach", targets=[[0.5, 0.0]])


def test_evaluate_success_criteria():
    task = tasks.get_task("iiwa-reach", targets=[[0.6, 0.0, 0.4]], switch_period=2.0)
    times = np.linspace(0, 2, 5)
    x_home = task.initial_state()
    states = np.tile(x_home, (5, 1))
    controls = np.zeros((5, 7))
    ev = task.evaluate(times, states, controls)
    assert isinstance(ev, tasks.Evaluation) and not ev.success
    assert [c.name for c in ev.criteria] == ["target 0 time to reach", "target 0 error after reach", "torque limit",
                                             "joint range"]
    assert ev["joint range"].passed is None                         # reported, not judged
    reach = ev["target 0 time to reach"]
    assert reach.value is None and reach.passed is False and "never reached" in reach.detail and reach.unit == "s"
    assert ev["target 0 error after reach"].passed is None           # reported, not judged
    assert ev["torque limit"].passed and ev["torque limit"].value == 0.0
    controls[2, 0] = 400.0                                      # over the 320 N m limit
    ev = task.evaluate(times, states, controls)
    assert ev["torque limit"].value == pytest.approx(80.0) and not ev["torque limit"].passed
    # at the target from 0.5 s on: reached at 0.5 s, the IK's error after; the violation alone fails the run
    q_at = _ik(task, task.targets[0])
    states[1:] = np.r_[q_at, np.zeros(7)]
    ev = task.evaluate(times, states, controls)
    assert ev["target 0 time to reach"].value == pytest.approx(0.5) and ev["target 0 time to reach"].passed
    at = np.linalg.norm(task.ee_position(states[1]) - task.targets[0])
    assert ev["target 0 error after reach"].value == pytest.approx(at, abs=1e-12)
    assert [c.name for c in ev.judged if not c.passed] == ["torque limit"] and not ev.success
    controls[2, 0] = 0.0
    assert task.evaluate(times, states, controls).success
    d = ev.to_dict()
    assert d["success"] is False and d["details"]["targets"][0]["time_to_reach_s"] == pytest.approx(0.5)


def _ik(task, target) -> np.ndarray:
    """A configuration with the end effector at ``target`` (a converged reaching solve)."""
    p = task.build_problem(task.initial_state(), 24, 0.05, backend="numpy")
    r = DDP(p).solve(max_iter=60, tol=1e-6)
    q = r.xs[-1, :7]
    assert np.linalg.norm(task.ee_position(np.r_[q, np.zeros(7)]) - target) < 2e-3
    return q


def test_reporting_hooks_and_evaluation_types():
    task = tasks.get_task("iiwa-reach")
    assert [(e.t, e.label) for e in task.events(8.0)] == [(2.0, "target 1"), (4.0, "target 2"), (6.0, "target 3")]
    assert [e.t for e in task.events(3.0)] == [2.0]
    np.testing.assert_array_equal(task.markers([0.0, 2.5, 9.0]), task.targets[[0, 1, 3]])
    info = task.metric_info()
    assert info["ee_error"].threshold == task.reach_tolerance and not info["target_index"].plot
    c = tasks.Criterion("x", float("inf"), "s", True)
    assert c.to_dict()["value"] is None                       # strict JSON
    with pytest.raises(ValueError, match="unique"):
        tasks.Evaluation([tasks.Criterion("a", 1.0), tasks.Criterion("a", 2.0)])
    with pytest.raises(TypeError, match="Criterion"):
        tasks.Evaluation([{"name": "a"}])
    assert tasks.Evaluation().success                         # nothing judged
    assert tasks.Evaluation([tasks.Criterion("info only", 1.0)]).success
    with pytest.raises(TypeError, match="expected tasks.Evaluation"):
        tasks.check_evaluation(task, {"success": True})
    base = tasks.Task()
    assert base.events(1.0) == [] and base.markers([0.0]) is None and base.metric_info() == {}


def test_resolve_task_separates_bad_specs_from_errors_in_user_code(tmp_path):
    f = tmp_path / "user_mod.py"
    f.write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(tasks.TaskCodeError, match="boom at import") as e:
        tasks.resolve_task(f"{f}:T")
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(ModuleNotFoundError, match="no module named 'no_such_module_xyz'"):
        tasks.resolve_task("no_such_module_xyz:T")
    assert tasks.resolve_task("iiwa-reach") is tasks.IiwaReach


def test_targets_are_reachable_from_home():
    """Every target: the optimal 1.2 s motion from home ends within 2 cm, at rest, inside the torque
    limits (box-constrained DDP)."""
    task = tasks.get_task("iiwa-reach")
    for i, target in enumerate(task.targets):
        p = task.build_problem(task.initial_state(), 24, 0.05)
        task.update_problem(p, i * task.switch_period)          # hold target i over the horizon
        r = DDP(p).solve(max_iter=60, tol=1e-5)
        assert np.all(np.isfinite(r.xs)), r.reason
        err = np.linalg.norm(task.ee_position(r.xs[-1]) - target)
        assert err < 0.02, (i, err, r.reason)
        assert np.abs(r.xs[-1, 7:]).max() < 0.2
        assert np.all(r.us >= task.model.u_lower) and np.all(r.us <= task.model.u_upper)


def test_closed_loop_reaches_first_target_in_mujoco():
    """Receding horizon against MuJoCo (1 ms implicitfast steps, feedback gains between updates):
    the first target is reached within 2 cm well inside 1.5 s without torque-limit violations."""
    task = tasks.get_task("iiwa-reach")
    m = task.model
    mj, d = m.mj_model, mujoco.MjData(m.mj_model)
    x = task.initial_state()
    d.qpos[:], d.qvel[:] = x[:7], x[7:]
    horizon, dt = 20, 0.025
    p = task.build_problem(x, horizon, dt)
    solver = DDP(p)
    res = solver.solve(max_iter=30, tol=1e-5)
    steps = int(round(dt / mj.opt.timestep))
    times, states, controls = [], [], []
    t = 0.0
    while t < 0.75:
        x = np.concatenate([d.qpos, d.qvel])
        if t > 0:
            p.set_initial_state(x)
            task.update_problem(p, t)
            res = solver.solve(*res.shifted(1), max_iter=1)
            assert np.all(np.isfinite(res.us)), res.reason
        for _ in range(steps):
            xk = np.concatenate([d.qpos, d.qvel])
            u = np.clip(res.us[0] + res.K[0] @ p.state.difference(res.xs[0], xk), m.u_lower, m.u_upper)
            d.ctrl[:] = u
            times.append(t)
            states.append(xk)
            controls.append(u)
            mujoco.mj_step(mj, d)
            t += mj.opt.timestep
    ev = task.evaluate(np.array(times), np.array(states), np.array(controls))
    assert ev["target 0 time to reach"].passed, ev
    assert ev["torque limit"].value == 0.0
    mujoco.mj_kinematics(mj, d)
    assert np.linalg.norm(d.site_xpos[m.site_id("ee")] - task.targets[0]) < task.reach_tolerance
