"""Standing postures for legged robots the tasks were not written for, and the checks before a run.

The test quadruped (tests/helpers/quadruped_mjcf.py) carries no keyframe and its naive posture is
outside its joint ranges: the knees bend one way only (front [-2.6, -0.6] rad, hind [0.6, 2.6]
rad), so the reference configuration (straight legs, knees at 0) and the reference + 0.3 rad are
both outside them. The task must compute a posture inside the ranges, stand on it in MuJoCo, prefer
a keyframe ('standing', then 'home') when there is one, add a floor to a bare robot file, and stop
with its own message for each description it cannot stand (one test per message)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from mpc import MPC
from sim.runner import simulate
from tasks import QuadrupedStand
from tasks.legged_scene import FLOOR_NOTE
from tests.helpers.quadruped_mjcf import FEET, LEGS
from tests.helpers.quadruped_mjcf import quadruped_mjcf as quadruped


def _write(tmp_path, text: str, name: str = "quadruped.xml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _stand(path: str, **kw) -> QuadrupedStand:
    return QuadrupedStand(robot=path, feet=FEET, poses=((0.0, 0.0, 0.0, 0.0, 0.0),), duration_s=0.5, **kw)


def _mujoco_contacts(mj, q) -> set:
    """Names of the bodies touching a world geom in MuJoCo at configuration q."""
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_forward(mj, d)
    out = set()
    for c in d.contact[:d.ncon]:
        b1, b2 = int(mj.geom_bodyid[c.geom1]), int(mj.geom_bodyid[c.geom2])
        if b1 == 0 or b2 == 0:
            out.add(mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_BODY, b1 or b2))
    return out


def test_naive_posture_is_outside_the_ranges():
    """The premise: the old recipe's starting point (reference + 0.3 rad) breaks the front knees' range."""
    mj = mujoco.MjModel.from_xml_string(quadruped())
    knee = mj.joint("fl_kfe")
    lo, hi = mj.jnt_range[knee.id]
    assert not lo <= 0.0 <= hi and not lo <= 0.3 <= hi


def test_computed_posture_inside_the_ranges_stands_in_mujoco(tmp_path):
    path = _write(tmp_path, quadruped())
    task = _stand(path)
    m, mj = task.model, task.model.mj_model
    assert task.posture_source.startswith("computed") and task.notes()[0].startswith("standing posture: computed")
    q = task.x_stand[:m.nq]
    for name in LEGS:                                      # every joint inside its range (MuJoCo's numbers)
        for j in ("haa", "hfe", "kfe"):
            jid = mj.joint(f"{name}_{j}").id
            lo, hi = mj.jnt_range[jid]
            assert lo - 1e-3 <= q[mj.jnt_qposadr[jid]] <= hi + 1e-3, (name, j)
    # feet under the hips (MuJoCo's kinematics), at rest on the floor, torques within the limits
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    for name in LEGS:
        foot, hip = d.site(f"{name}_foot").xpos, d.body(f"{name}_hip").xpos
        assert np.linalg.norm(foot[:2] - hip[:2]) < 0.03, name
        assert abs(foot[2] - 0.025) < 0.01, name
    assert _mujoco_contacts(mj, q) == {f"{n}_shank" for n in LEGS}
    assert np.all(np.abs(task.u_stand) <= 40.0)
    # a short closed loop: MuJoCo keeps it standing on its four feet
    ctrl = MPC(task, solver=task.defaults.solver, backend="numba", horizon=10, dt=0.02)   # hard cones: csqp
    r = simulate(m, ctrl, task.initial_state(), 0.4, update_every=20)
    assert r.completed
    assert abs(r.x[-1, 2] - task.standing_height) < 0.02
    assert _mujoco_contacts(mj, r.x[-1, :m.nq]) == {f"{n}_shank" for n in LEGS}


def test_keyframes_standing_then_home_are_used(tmp_path):
    q = _stand(_write(tmp_path, quadruped())).x_stand[:19]
    qs = " ".join(f"{v:.6f}" for v in q)
    home = _stand(_write(tmp_path, quadruped(keyframes=f'<keyframe><key name="home" qpos="{qs}"/></keyframe>'),
                         "home.xml"))
    assert home.posture_source == "keyframe 'home' of the model"
    both = _stand(_write(tmp_path, quadruped(keyframes=f'<keyframe><key name="home" qpos="{qs}"/>'
                                                       f'<key name="standing" qpos="{qs}"/></keyframe>'), "both.xml"))
    assert both.posture_source == "keyframe 'standing' of the model"


def test_bare_robot_file_gets_a_floor_and_says_so(tmp_path):
    task = _stand(_write(tmp_path, quadruped(floor="")))
    assert task.floor_note == FLOOR_NOTE and FLOOR_NOTE in task.notes()
    mj = task.model.mj_model
    assert mj.geom("floor_added").type == mujoco.mjtGeom.mjGEOM_PLANE
    assert _mujoco_contacts(mj, task.x_stand[:task.model.nq]) == {f"{n}_shank" for n in LEGS}


def test_scene_file_including_the_robot(tmp_path):
    """Menagerie's layout: scene.xml with the floor includes the robot file, which has none."""
    _write(tmp_path, quadruped(floor=""), "robot.xml")
    scene = _write(tmp_path, '<mujoco model="scene"><include file="robot.xml"/><worldbody>'
                             '<geom name="ground" type="plane" size="5 5 0.1"/></worldbody></mujoco>', "scene.xml")
    task = _stand(scene)
    assert task.floor_note is None and task.model.mj_model.geom("ground") is not None
    assert task.posture_source.startswith("computed")


# ---------------------------------------------------------------- one test per error message
def test_error_foot_frame_not_found(tmp_path):
    with pytest.raises(ValueError, match=r"foot frame 'fl_toe' not found in .*; sites: fl_foot, fr_foot, hl_foot, "
                                         r"hr_foot; bodies: trunk, fl_hip.*Give the feet with --feet"):
        QuadrupedStand(robot=_write(tmp_path, quadruped()), feet=("fl_toe", "fr_foot", "hl_foot", "hr_foot"))


def test_error_no_collision_geometry_at_a_foot(tmp_path):
    with pytest.raises(ValueError, match="foot frame 'fl_foot' .* is on body 'fl_shank', which has no collision "
                                         "geometry.*Add a collision geom"):
        _stand(_write(tmp_path, quadruped(foot_geom=False)))


def test_error_no_ground_the_feet_can_touch(tmp_path):
    floor = '<geom name="floor" type="plane" size="5 5 0.1" contype="2" conaffinity="2"/>'
    with pytest.raises(ValueError, match=r"has no ground geometry the feet can touch: the world's collision geoms "
                                         r"\(floor\).*contype"):
        _stand(_write(tmp_path, quadruped(floor=floor)))


def test_error_feet_cannot_reach_the_ground_within_the_ranges(tmp_path):
    # hips that can only swing the legs far forward: no foot gets under its hip
    with pytest.raises(ValueError, match="feet of .* cannot reach the ground under the hips within the joint "
                                         "ranges: foot '.._foot' stays .* cm from its place"):
        _stand(_write(tmp_path, quadruped(hfe_range="-1.5 -1.2")))


def test_error_another_geom_below_the_feet(tmp_path):
    with pytest.raises(ValueError, match="feet of .* cannot reach the ground in its standing posture .*geom 'belly' "
                                         "of body 'trunk' is .* cm below the feet"):
        _stand(_write(tmp_path, quadruped(belly=True)))


def test_error_actuators_cannot_hold_it_up(tmp_path):
    with pytest.raises(ValueError, match=r"actuators of .* cannot hold it up in its standing posture .*joint "
                                         r"'.._(hfe|kfe)' needs -?[0-9.]+ N m, its actuator's limit is \[-2, 2\] N m"):
        _stand(_write(tmp_path, quadruped(limit=2.0)))


def test_cli_prints_the_check_as_one_line(tmp_path, capsys):
    from mpc.cli import main
    path = _write(tmp_path, quadruped(foot_geom=False))
    assert main(["run", "quadruped-stand", "--robot", path, "--feet", ",".join(FEET), "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "has no collision geometry" in err and "Traceback" not in err


def test_cli_summary_says_which_posture_and_that_a_floor_was_added(tmp_path, capsys):
    import json

    from mpc.cli import main
    path = _write(tmp_path, quadruped(floor=""))
    out = tmp_path / "run"
    assert main(["run", "quadruped-stand", "--robot", path, "--feet", ",".join(FEET), "--duration", "0.06",
                 "--initial-iterations", "2", "--quiet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "task: standing posture: computed" in text and f"task: {FLOOR_NOTE}" in text
    notes = json.loads((out / "summary.json").read_text())["task_notes"]
    assert notes[0].startswith("standing posture: computed") and notes[1] == FLOOR_NOTE
