"""iiwa-reach with a wall (``--task-arg wall=...``): the end effector's hard half-space constraint in
the loop, judged from MuJoCo's own kinematics of the simulated joint positions."""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest

import tasks
from mpc.cli import main
from tasks.arm_reach import parse_wall


def _mujoco_site(model, q, site="ee") -> np.ndarray:
    mm = model.mj_model
    data = mujoco.MjData(mm)
    data.qpos[:] = q
    mujoco.mj_kinematics(mm, data)
    return data.site_xpos[mujoco.mj_name2id(mm, mujoco.mjtObj.mjOBJ_SITE, site)].copy()


@pytest.mark.parametrize("spec, normal, offset", [
    ("y<=0.1", (0, 1, 0), 0.1),
    ("z >= 0.2", (0, 0, -1), -0.2),
    ((0, 2, 0, 0.2), (0, 1, 0), 0.1),
])
def test_wall_syntax(spec, normal, offset):
    n, b = parse_wall(spec)
    assert np.allclose(n, normal) and b == pytest.approx(offset)


@pytest.mark.parametrize("spec, message", [
    ("w<=0.1", "unknown axis 'w'"),
    ("y=0.1", "expected '<=' or '>='"),
    ("y<=abc", "'abc' is not a number"),
    ((0, 0, 0, 1), "non-zero normal"),
])
def test_bad_wall_says_how_to_write_it(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_wall(spec)


def test_wall_the_start_is_past_is_refused():
    with pytest.raises(ValueError, match="starts .* mm past the wall"):
        tasks.resolve_task("iiwa-reach")(wall="x<=0.5")     # the home end effector is at x = 0.669 m


def test_wall_makes_csqp_the_default_and_other_solvers_are_refused(tmp_path, capsys):
    task = tasks.resolve_task("iiwa-reach")(wall="y<=0.1")
    assert task.defaults.solver == "csqp" and tasks.resolve_task("iiwa-reach").defaults.solver == "ddp"
    assert np.allclose(task.goals[0], (0.55, 0.1, 0.45))      # target (0.55, 0.25, 0.45) projected on the wall
    code = main(["run", "iiwa-reach", "--task-arg", "wall=y<=0.1", "--solver", "ddp", "--duration", "0.1",
                 "--out", str(tmp_path / "r"), "--quiet"])
    assert code != 0
    assert "only --solver csqp or alddp enforces it" in capsys.readouterr().err


def test_closed_loop_stays_behind_the_wall_and_reaches_along_it(tmp_path):
    """Target 0 (0.55, 0.25, 0.45) lies past the wall y <= 0.1 m; the unconstrained reach would
    cross it by 15 cm. Lockstep, 1 s, horizon 16 x 10 ms."""
    out = tmp_path / "run"
    code = main(["run", "iiwa-reach", "--task-arg", "wall=y<=0.1", "--horizon", "16", "--dt", "0.01",
                 "--duration", "1.0", "--out", str(out), "--quiet", "--json"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"]
    task = tasks.resolve_task("iiwa-reach")()
    traj = np.load(out / "trajectory.npz")
    ee = np.stack([_mujoco_site(task.model, q) for q in traj["q"]])      # MuJoCo's kinematics, not ours
    assert ee[:, 1].max() <= 0.1 + 0.005                                  # never more than 5 mm past the wall
    goal = np.array([0.55, 0.1, 0.45])
    assert np.linalg.norm(ee[0] - goal) > 0.2                             # it had to move there
    assert np.linalg.norm(ee[-25:] - goal, axis=-1).max() < 0.03          # near the wall-projected target
    crit = {c["name"]: c for c in s["evaluation"]["criteria"]}
    assert crit["wall violation"]["passed"] is True
    assert crit["wall violation"]["value"] == pytest.approx(max(ee[:, 1].max() - 0.1, 0) * 1e3, abs=1e-6)
