"""examples/custom_task.py run, not only imported: its task (a plain-Python cost that takes its
kinematics from the CostContext, on the problem's backend) in a short closed loop through the
``mpc-accel`` CLI, judged on what MuJoCo measured."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import pytest

import dynamics
import tasks
from mpc.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = f"{ROOT / 'examples' / 'custom_task.py'}:IiwaCircle"


def _ee_positions(model, qs: np.ndarray) -> np.ndarray:
    """MuJoCo's end-effector site positions (T, 3) for configurations qs (T, nq)."""
    d = mujoco.MjData(model.mj_model)
    sid = model.site_id("ee")
    out = np.empty((len(qs), 3))
    for i, q in enumerate(qs):
        d.qpos[:] = q
        mujoco.mj_kinematics(model.mj_model, d)
        out[i] = d.site_xpos[sid]
    return out


def test_table_cost_uses_the_context_on_the_problems_backend():
    """The cost evaluates on the backend of the problem it is in (no hard-coded numpy), sharing
    the end-effector kinematics with the tracking term."""
    task = tasks.get_task(SPEC, center=[0.6, 0.0, 0.22], table_height=0.3)
    for name in ("numpy", dynamics.default_backend_name()):
        p = task.build_problem(task.initial_state(), 4, 0.02, backend=name)
        assert p.backend.name == name and task.backend is p.backend
        calls = []
        real = p.backend.frame_placement

        def counting(model, q, frame, _real=real):
            calls.append(frame)
            return _real(model, q, frame)

        p.backend.frame_placement = counting
        try:
            xs, us = p.initial_guess()
            cost = p.cost(xs, us)
        finally:
            del p.backend.frame_placement
        assert np.isfinite(cost)
        # the problem's backend computed the ee kinematics, once per batch (running, terminal)
        # for both "ee" terms (tracking and clearance), not once per term
        assert 1 <= calls.count("ee") <= 2, calls
        # home puts the ee at z = 0.285 m, 1.5 cm below the 0.3 m table: the clearance term is
        # active, ½ w r² per knot with w = 1e4 (running weight 1, integrated over dt)
        lowered = p.cost(xs, us)
        p.running_cost.set_weight("table", 0.0)
        p.terminal_cost.set_weight("table", 0.0)
        assert lowered - p.cost(xs, us) == pytest.approx(0.5 * 1e4 * 0.015 ** 2 * (4 * 0.02 + 10), rel=0.1)


def test_custom_task_closed_loop_through_the_cli_keeps_above_the_table(tmp_path):
    """Circle centre 5 cm below a table at 0.27 m: the tracking cost pulls the end effector down,
    the custom clearance cost holds it up. MuJoCo's end effector must stay within the soft
    constraint's give (~1 cm) of the table while tracking the circle horizontally; without the
    clearance term it would sink to ~0.22 m."""
    out = tmp_path / "circle"
    code = main(["run", SPEC, "--task-arg", "center=[0.6, 0.0, 0.22]", "--task-arg", "table_height=0.27",
                 "--solver", "ddp", "--horizon", "20", "--dt", "0.02", "--duration", "0.4",
                 "--initial-iterations", "30", "--out", str(out), "--json"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] and s["task"] == "iiwa-circle" and s["config"]["backend"] == dynamics.default_backend_name()
    names = [c["name"] for c in s["evaluation"]["criteria"]]
    assert names == ["max error after settling", "lowest height"]
    assert set(s["tracking"]) == {"ee_error", "ee_height"} and s["tracking_units"]["ee_height"] == "m"
    traj = np.load(out / "trajectory.npz")
    task = tasks.get_task(SPEC, center=[0.6, 0.0, 0.22], table_height=0.27)
    p = _ee_positions(task.model, traj["q"])
    t = traj["t"]
    assert t[-1] == pytest.approx(0.4 - 1e-3)
    assert p[0, 2] == pytest.approx(0.285, abs=2e-3)            # home
    assert p[:, 2].min() > 0.27 - 0.012                          # held up by the clearance cost
    assert p[-1, 2] < 0.27                                       # ... against the pull of the tracking cost
    ref = task.point(t)
    xy_err = np.linalg.norm(p[:, :2] - ref[:, :2], axis=1)
    assert xy_err[0] > 0.05 and xy_err[t >= 0.3].max() < 0.01   # tracks the circle horizontally
    assert np.all(np.abs(traj["u"]) <= task.model.u_upper + 1e-9)
