"""Quadruped standing in closed loop (lockstep, MuJoCo with its own soft contacts): HyQ tracks a
lower trunk target and survives a lateral push; the same task runs on a second quadruped built
here (other leg lengths and masses, no 'standing' keyframe: the task computes the posture).
Assertions are on what MuJoCo measured: trunk height, feet contacts and foot positions."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from mpc import MPC
from sim.runner import simulate
from tasks import QuadrupedStand, get_task

LEGS = {"fl": (1, 1), "fr": (1, -1), "hl": (-1, 1), "hr": (-1, -1)}


def quadruped_mjcf(half_length=0.25, half_width=0.12, thigh=0.22, shank=0.24, trunk_mass=12.0,
                   leg_mass=0.8) -> str:
    """A quadruped unlike HyQ: box trunk, 3 hinges per leg (abduction x, hip y, knee y), sphere feet
    with sites (the only geoms that collide with the floor, as in most quadruped models; the trunk
    hits the floor if it falls), unnamed torque motors, a floor."""
    legs = []
    for name, (sx, sy) in LEGS.items():
        legs.append(f"""
      <body name="{name}_hip" pos="{sx * half_length} {sy * half_width} 0">
        <joint name="{name}_haa" axis="1 0 0" range="-0.8 0.8"/>
        <geom type="sphere" size="0.04" mass="{leg_mass / 2}" contype="0" conaffinity="0"/>
        <body name="{name}_thigh" pos="0 {sy * 0.05} 0">
          <joint name="{name}_hfe" axis="0 1 0" range="-2 2"/>
          <geom type="capsule" fromto="0 0 0 0 0 -{thigh}" size="0.025" mass="{leg_mass}" contype="0" conaffinity="0"/>
          <body name="{name}_shank" pos="0 0 -{thigh}">
            <joint name="{name}_kfe" axis="0 1 0" range="-2.6 2.6"/>
            <geom type="capsule" fromto="0 0 0 0 0 -{shank}" size="0.02" mass="{leg_mass / 2}" contype="0"
                  conaffinity="0"/>
            <geom type="sphere" pos="0 0 -{shank}" size="0.025" mass="0.05" friction="1.0 0.02 0.01"/>
            <site name="{name}_foot" pos="0 0 -{shank}"/>
          </body>
        </body>
      </body>""")
    motors = "".join(f'<motor joint="{n}_{j}" ctrlrange="-60 60" ctrllimited="true"/>'
                     for n in LEGS for j in ("haa", "hfe", "kfe"))
    return f"""<mujoco model="test_quadruped">
  <compiler angle="radian"/>
  <option timestep="0.001" integrator="implicitfast"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="1.0 0.02 0.01"/>
    <body name="trunk" pos="0 0 {thigh + shank + 0.1}">
      <freejoint/>
      <geom type="box" size="{half_length} {half_width} 0.05" mass="{trunk_mass}" contype="0" conaffinity="1"/>
      {''.join(legs)}
    </body>
  </worldbody>
  <actuator>{motors}</actuator>
</mujoco>"""


def _run(task, duration, horizon=16, dt=0.02):
    ctrl = MPC(task, solver="fddp", backend="numba", horizon=horizon, dt=dt)
    ctrl.warmup()
    h = float(task.model.mj_model.opt.timestep)
    return simulate(task.model, ctrl, task.initial_state(), duration, mode="lockstep",
                    update_every=int(round(dt / h)), disturbances=task.disturbances())


def _feet_in_contact(task, x) -> int:
    """Feet touching the floor in MuJoCo at state x."""
    m = task.model.mj_model
    d = mujoco.MjData(m)
    from dynamics.mujoco_state import write_state
    write_state(task.model, d, x)
    mujoco.mj_forward(m, d)
    floor = [g for g in range(m.ngeom) if m.geom_bodyid[g] == 0]
    bodies = set()
    for c in d.contact[:d.ncon]:
        for g, other in ((c.geom1, c.geom2), (c.geom2, c.geom1)):
            if g in floor:
                bodies.add(int(m.geom_bodyid[other]))
    return len(bodies)


def test_hyq_tracks_a_lower_trunk_and_survives_a_push():
    task = get_task("hyq-stand", poses=((0.0, 0.0, 0.0, 0.0, 0.0), (0.2, -0.05, 0.0, 0.0, 0.0)),
                    pushes=((0.9, "trunk", (0.0, 150.0, 0.0), 0.1),), duration_s=1.6)
    r = _run(task, task.duration)
    assert r.aborted is None, r.aborted
    t, x = r.t, r.x
    z_stand = task.standing_height
    settled = (t > 0.7) & (t < 0.9)
    assert np.all(np.abs(x[settled, 2] - (z_stand - 0.05)) < 0.03), \
        f"trunk height {x[settled, 2].min():.3f}..{x[settled, 2].max():.3f} m, target {z_stand - 0.05:.3f} m"
    assert x[:, 2].min() > 0.5 * z_stand, "the trunk fell"
    assert abs(x[-1, 2] - (z_stand - 0.05)) < 0.03, "did not recover the trunk height after the push"
    assert _feet_in_contact(task, x[-1]) == 4
    ev = task.evaluate(t, x, r.u)
    assert ev["no fall"].passed and ev["push 0 survived"].passed
    assert ev["foot slip"].value < 0.05


def test_stand_task_on_another_quadruped(tmp_path):
    path = tmp_path / "quadruped.xml"
    path.write_text(quadruped_mjcf())
    task = QuadrupedStand(robot=str(path), feet=tuple(f"{n}_foot" for n in LEGS),
                          poses=((0.0, 0.0, 0.0, 0.0, 0.0), (0.3, -0.03, 0.0, 0.0, 0.0)), duration_s=1.0)
    assert task.posture_source.startswith("computed")
    r = _run(task, task.duration)
    assert r.aborted is None, r.aborted
    t, x = r.t, r.x
    assert _feet_in_contact(task, x[t.searchsorted(0.2)]) == 4   # the computed posture lands on all four feet
    target = task.standing_height - 0.03
    late = t > 0.8
    assert np.all(np.abs(x[late, 2] - target) < 0.02), (x[late, 2].min(), x[late, 2].max(), target)
    assert _feet_in_contact(task, x[-1]) == 4
    assert task.evaluate(t, x, r.u)["foot slip"].value < 0.02


def test_bad_quadruped_arguments():
    with pytest.raises(ValueError, match="free-floating trunk"):
        QuadrupedStand(robot="iiwa")   # no free trunk
    with pytest.raises(ValueError, match="4 feet"):
        QuadrupedStand(feet=("lf_foot", "rf_foot"))
