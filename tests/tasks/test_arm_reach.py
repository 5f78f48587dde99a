"""``arm-reach`` on an arm the task was not written for: a 3-dof arm built here as an MJCF string
(targets placed in its own workspace, checked with MuJoCo's kinematics; a short closed loop judged
on what MuJoCo measured), the errors for descriptions it cannot run, and ``iiwa-reach`` as its
preset."""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest

import tasks
from mpc.cli import main
from tasks.iiwa_reach import DEFAULT_TARGETS

# base body at z = 0.1 m; the shoulder 5 cm above it; links of 0.30 m and 0.25 m: straight up, the
# tip is 0.05 + 0.55 = 0.60 m from the base body, which is the arm's reach
ARM = """<mujoco model="arm3">
  <compiler angle="radian"/>
  <option timestep="0.002"/>
  <default><joint damping="0.5" armature="0.01"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="base" pos="0 0 0.1">
      <joint name="j0" type="hinge" axis="0 0 1" range="-2.5 2.5"/>
      <geom type="cylinder" size="0.04 0.05" mass="1"/>
      <body name="upper" pos="0 0 0.05">
        <joint name="j1" type="hinge" axis="0 1 0" range="-2 2"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
        <body name="fore" pos="0.3 0 0">
          <joint name="j2" type="hinge" axis="0 1 0" range="-2.5 2.5"/>
          <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025" mass="0.6"/>
          <site name="tip" pos="0.25 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
ACTUATORS
  </actuator>
</mujoco>
"""
MOTORS = """    <motor name="m0" joint="j0" ctrlrange="-10 10" ctrllimited="true"/>
    <motor name="m1" joint="j1" ctrlrange="-20 20" ctrllimited="true"/>
    <motor name="m2" joint="j2" ctrlrange="-10 10" ctrllimited="true"/>"""
REACH = 0.60
BASE = np.array([0.0, 0.0, 0.1])


def _arm(tmp_path, actuators: str = MOTORS, name: str = "arm3.xml") -> str:
    path = tmp_path / name
    path.write_text(ARM.replace("ACTUATORS", actuators))
    return str(path)


def _mujoco_site(xml: str, q: np.ndarray, site: str = "tip") -> np.ndarray:
    """The site's world position by MuJoCo's own kinematics (the oracle)."""
    mj = mujoco.MjModel.from_xml_path(xml)
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    return d.site(site).xpos.copy()


def test_targets_lie_in_the_arms_own_workspace(tmp_path):
    xml = _arm(tmp_path)
    task = tasks.get_task("arm-reach", robot=xml, ee="tip")
    assert task.frame == "tip" and task.model.nu == 3
    assert np.allclose(task.model.u_upper, [10, 20, 10])             # the torque limits of the file
    assert 0.97 * REACH < task.reach <= REACH + 1e-9                  # sampled reach vs the link lengths
    assert task.targets.shape == (4, 3) and "computed" in task.target_source
    from tasks.arm import inverse_kinematics
    for p in task.targets:
        r = np.linalg.norm(p - BASE)
        assert 0.4 * task.reach - 1e-9 <= r <= 0.7 * task.reach + 1e-9
        assert p[2] >= BASE[2] - 1e-9
        q = inverse_kinematics(task.model, "tip", p, task.q_home)
        assert q is not None
        assert np.all(q >= task.model.q_lower - 1e-12) and np.all(q <= task.model.q_upper + 1e-12)
        assert np.linalg.norm(_mujoco_site(xml, q) - p) < 1e-3          # MuJoCo agrees the IK reaches it
    # the same seed gives the same targets; another seed other ones
    again = tasks.get_task("arm-reach", robot=xml, ee="tip")
    assert np.array_equal(again.targets, task.targets)
    assert not np.allclose(tasks.get_task("arm-reach", robot=xml, ee="tip", seed=1).targets, task.targets)


def test_closed_loop_on_a_new_arm_reaches_its_first_target(tmp_path, capsys):
    xml = _arm(tmp_path)
    out = tmp_path / "run"
    code = main(["run", "arm-reach", "--robot", xml, "--ee", "tip", "--duration", "1.5", "--out", str(out),
                 "--quiet", "--json"])   # the task's default controller settings
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] and s["evaluation"]["details"]["end_effector"] == "tip"
    target = np.array(s["evaluation"]["details"]["targets"][0]["position_m"])
    traj = np.load(out / "trajectory.npz")
    tip = np.stack([_mujoco_site(xml, q) for q in traj["q"][-50:]])   # the last 0.1 s, MuJoCo's kinematics
    assert np.linalg.norm(tip - target, axis=-1).max() < 0.02
    assert np.linalg.norm(_mujoco_site(xml, traj["q"][0]) - target) > 0.1   # it had to move there
    assert np.all(traj["u"] <= traj["u_upper"] + 1e-9) and np.all(traj["u"] >= traj["u_lower"] - 1e-9)
    crit = {c["name"]: c for c in s["evaluation"]["criteria"]}
    assert crit["target 0 time to reach"]["passed"] is True


@pytest.mark.parametrize("actuators, message", [
    ("", "has no actuators"),
    ("""    <position name="p0" joint="j0" kp="50"/>""", "no torque actuator: position or velocity servos"),
    ("""    <motor name="m0" joint="j0"/>
    <motor name="m1" joint="j1" ctrlrange="-20 20" ctrllimited="true"/>
    <motor name="m2" joint="j2"/>""", "no torque limit for the actuator(s) m0, m2"),
    ("""    <motor name="m0" joint="j0" ctrlrange="-10 10" ctrllimited="true"/>
    <motor name="m1" joint="j1" ctrlrange="-1 1" ctrllimited="true"/>
    <motor name="m2" joint="j2" ctrlrange="-10 10" ctrllimited="true"/>""",
     "cannot hold it still at its home posture: actuator 'm1' needs -3.973 N m against gravity"),
])
def test_descriptions_that_cannot_reach_say_why(tmp_path, actuators, message):
    xml = _arm(tmp_path, actuators)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tasks.get_task("arm-reach", robot=xml, ee="tip")


def test_unknown_frame_lists_the_frames_and_cli_says_so(tmp_path, capsys):
    xml = _arm(tmp_path)
    with pytest.raises(ValueError, match="no site, body or geom named 'hand'; sites: tip; bodies: .*base, upper, fore"):
        tasks.get_task("arm-reach", robot=xml, ee="hand")
    with pytest.raises(ValueError, match="give the end-effector frame .* e.g. --ee tip"):
        tasks.get_task("arm-reach", robot=xml)
    assert main(["run", "arm-reach", "--robot", xml, "--ee", "hand", "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "no site, body or geom named 'hand'" in err and "Traceback" not in err   # one line, no traceback


def test_iiwa_reach_is_the_arm_reach_preset(tmp_path):
    task = tasks.get_task("iiwa-reach")
    assert isinstance(task, tasks.ArmReach) and task.frame == "ee" and task.target_source == "given"
    assert np.array_equal(task.targets, np.array(DEFAULT_TARGETS))
    assert task.home_source == "keyframe 'home'"
    generic = tasks.get_task("arm-reach")                  # the iiwa with targets from its workspace
    assert generic.frame == "ee" and generic.targets.shape == (4, 3) and 0.9 < generic.reach < 1.4
    with pytest.raises(ValueError, match="preset of the bundled iiwa.*arm-reach --robot"):
        tasks.get_task("iiwa-reach", robot=_arm(tmp_path))


def test_update_problem_sets_the_targets_again_after_they_were_replaced():
    """update_problem skips the re-pack while nothing changed since it set the targets; a target
    replaced by someone else, the task's own target rows changed in place or a new switch window
    make it set them again."""
    task = tasks.get_task("iiwa-reach")
    p = task.build_problem(task.initial_state(), 8, 0.02)
    ee, term = p.running_cost["ee"], p.terminal_cost["ee"]
    task.update_problem(p, 0.0)
    mine = ee.target
    task.update_problem(p, 0.01)
    assert ee.target is mine                            # skipped: nothing to re-pack
    ee.target = np.zeros((9, 3))                        # replaced behind the task's back
    task.update_problem(p, 0.02)
    np.testing.assert_array_equal(ee.target, mine)
    np.testing.assert_array_equal(term.target, mine)
    task.targets[0] = task.targets[0] + 0.05           # the task's own row changed in place
    task.update_problem(p, 0.03)
    np.testing.assert_allclose(ee.target, np.tile(task.targets[0], (9, 1)))
    t_next = task.switch_period + 0.01                  # the next target's window
    task.update_problem(p, t_next)
    np.testing.assert_allclose(ee.target[0], task.targets[1])
