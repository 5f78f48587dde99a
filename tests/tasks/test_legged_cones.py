"""Contact-force cones of the legged tasks: the ``cones`` option (penalty costs or hard constraints
solved by csqp) and the closed-loop criterion that judges MuJoCo's own contact forces against the
task's friction cone.

Oracles: Newton's laws on a hand-built MuJoCo scene (a ball held still on the floor by a known
horizontal force and the torque that stops it rolling: its contact force is that force and its
weight), and the contact forces MuJoCo computed inside each physics step of a closed loop (read
from the simulator's data after every ``mj_step``)."""

from __future__ import annotations

from dataclasses import replace

import mujoco
import numpy as np
import pytest

import tasks
from dynamics import load_model
from mpc import MPC
from sim.runner import simulate
from solvers.constraints import FrictionCone
from tasks import get_task
from tasks.base import Disturbance
from tasks.legged import frame_bodies, mujoco_cone_ratios

MASS, RADIUS, G = 2.0, 0.05, 9.81


def _ball_scene(tmp_path, friction: float):
    """A ball on a floor that slides along x and z (no rotation: a horizontal force at its centre
    cannot roll it, so the ball can be held still by that force)."""
    xml = f"""<mujoco model="ball_on_floor">
  <option timestep="0.002" gravity="0 0 -{G}"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="{friction} 0.005 0.0001"/>
    <body name="ball" pos="0 0 {RADIUS}">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom type="sphere" size="{RADIUS}" mass="{MASS}" friction="{friction} 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>"""
    path = tmp_path / "ball.xml"
    path.write_text(xml)
    return load_model(str(path))


def _held_ball(model, force: float, seconds: float = 1.0) -> tuple[np.ndarray, int]:
    """The ball pushed along +x by ``force`` [N] at its centre of mass until it is at rest: its
    state (unaccelerated), and the ball's body id."""
    mj = model.mj_model
    d = mujoco.MjData(mj)
    bid = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, "ball")
    for _ in range(int(seconds / mj.opt.timestep)):
        d.xfrc_applied[bid, :3] = (force, 0, 0)
        mujoco.mj_step(mj, d)
    mujoco.mj_forward(mj, d)
    # MuJoCo's soft friction lets the ball creep at a steady few cm/s: unaccelerated, so the forces balance
    assert np.abs(d.qvel).max() < 5e-2 and np.abs(d.qacc).max() < 1e-3
    return np.concatenate([d.qpos, d.qvel]), bid


@pytest.mark.parametrize("share, mu, inside", [(0.3, 0.5, True), (0.7, 0.5, False), (0.0, 0.5, True)])
def test_cone_ratio_of_a_ball_held_by_a_known_force(tmp_path, share, mu, inside):
    """MuJoCo's floor friction is 1, so the ball stays at rest under a push of ``share`` × its
    weight; by Newton its contact carries that push tangentially and its weight normally: against a
    cone of ``mu`` the ratio is share / mu (inside below 1)."""
    model = _ball_scene(tmp_path, friction=1.0)
    force = share * MASS * G
    x, bid = _held_ball(model, force)
    pushes = [Disturbance(0.0, "ball", (force, 0.0, 0.0), 10.0)]
    cc = mujoco_cone_ratios(model, [bid], mu, x[None], np.zeros((1, 0)), times=[0.0], disturbances=pushes)
    assert cc.contacts.tolist() == [1]
    assert cc.ratio[0] == pytest.approx(share / mu, rel=1e-3, abs=1e-6)
    assert bool(cc.inside[0]) is inside
    assert cc.share_inside() == (1.0 if inside else 0.0)
    if share > 0:   # the push is part of the contact solve: left out, the friction only damps the creep
        cc = mujoco_cone_ratios(model, [bid], mu, x[None], np.zeros((1, 0)))
        assert cc.ratio[0] < 0.5 * share / mu


def test_other_bodies_contacts_are_not_judged(tmp_path):
    model = _ball_scene(tmp_path, friction=1.0)
    x, bid = _held_ball(model, 0.0)
    cc = mujoco_cone_ratios(model, [bid + 1], 0.5, x[None], np.zeros((1, 0)))
    assert cc.contacts.tolist() == [0]


def test_no_ground_contact_counts_as_inside(tmp_path):
    model = _ball_scene(tmp_path, friction=1.0)
    x = np.array([0.0, 0.5, 0.0, 0.0])                              # in the air
    bid = mujoco.mj_name2id(model.mj_model, mujoco.mjtObj.mjOBJ_BODY, "ball")
    cc = mujoco_cone_ratios(model, [bid], 0.5, x[None], np.zeros((1, 0)))
    assert cc.contacts.tolist() == [0] and cc.inside.all() and cc.share_inside() == 1.0


def test_bad_cones_option_says_what_to_give():
    with pytest.raises(ValueError, match="cones must be one of penalty, hard.*--task-arg cones=hard"):
        get_task("hyq-stand", cones="soft")


def test_hard_cones_are_the_default_constraints_and_csqp_the_default_solver():
    hard, pen = get_task("hyq-stand"), get_task("hyq-stand", cones="penalty")
    assert hard.cones == "hard" and hard.defaults.solver == "csqp" and pen.defaults.solver == "fddp"
    assert type(pen).defaults.solver == "csqp"                       # the class keeps its own
    assert pen.defaults == replace(type(pen).defaults, solver="fddp")  # only the solver changes
    for name in ("hyq-stand", "hyq-trot", "atlas-balance", "quadruped-stand", "quadruped-trot", "humanoid-balance"):
        cls = tasks.resolve_task(name)
        assert cls.cones == "hard" and cls.supports_hard_cones() and cls.defaults.solver == "csqp", name
    # a turning trot's two iterations per update go with either mode's solver
    for cones, solver in (("hard", "csqp"), ("penalty", "fddp")):
        d = get_task("hyq-trot", yaw_rate=0.3, cones=cones).defaults
        assert (d.solver, d.iterations) == (solver, 2)
    p = hard.build_problem(hard.initial_state(), 4, 0.02, backend="numpy")
    assert "cone" not in p.running_cost.terms
    assert all(isinstance(c, FrictionCone) for am in p.running_models for c in am.constraints)
    assert all(len(am.constraints) == 1 for am in p.running_models) and not p.terminal_model.constraints
    p = pen.build_problem(pen.initial_state(), 4, 0.02, backend="numpy")
    assert "cone" in p.running_cost.terms and not any(am.constraints for am in p.running_models)


def test_hyq_stand_hard_cones_closed_loop_keeps_mujoco_contacts_in_the_cone():
    """A short lockstep loop with a lateral push; the cone criterion is recomputed from the states
    and commands, and must equal what MuJoCo computed inside each physics step."""
    task = get_task("hyq-stand", cones="hard", poses=((0.0, 0.0, 0.0, 0.0, 0.0),),
                    pushes=((0.05, "trunk", (0.0, 200.0, 0.0), 0.1),), duration_s=0.25)
    mj = task.model.mj_model
    feet = set(frame_bodies(mj, task.feet).tolist())
    seen = []
    f6 = np.zeros(6)

    def record(k, t, d):          # after mj_step: d.contact and the forces are those of step k
        worst, n = 0.0, 0
        for i in range(d.ncon):
            c = d.contact[i]
            b = {int(mj.geom_bodyid[c.geom1]), int(mj.geom_bodyid[c.geom2])}
            if 0 in b and b & feet:
                mujoco.mj_contactForce(mj, d, i, f6)
                worst, n = max(worst, np.hypot(f6[1], f6[2]) / (task.mu * f6[0])), n + 1
        seen.append((worst, n))

    dt = 0.02
    ctrl = MPC(task, solver="csqp", backend="numba", horizon=8, dt=dt)
    ctrl.warmup()
    h = float(mj.opt.timestep)
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep",
                 update_every=round(dt / h), disturbances=task.disturbances(), callbacks=(record,))
    assert r.aborted is None, r.aborted
    ratio, count = np.array(seen).T
    assert count.min() == 4                                          # four feet down throughout
    cc = task.contact_cones(r.t, r.x, r.u_cmd)
    assert np.array_equal(cc.contacts, count.astype(int))
    assert np.allclose(cc.ratio, ratio, rtol=1e-5, atol=1e-8)
    assert ratio.max() < 1.0                                         # every MuJoCo contact inside its cone
    ev = task.evaluate(r.t, r.x, r.u_cmd)
    assert ev["contact forces in cone"].passed and ev["contact forces in cone"].value == 100.0
    assert ev["worst cone ratio"].value == pytest.approx(ratio.max(), rel=1e-5)


def test_tasks_listing_names_the_solver_an_option_switches_to(capsys):
    from mpc.cli import main
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = out[out.index(next(r for r in out if r.startswith("hyq-stand "))) + 1]
    assert line.strip() == "defaults: csqp, horizon 20 x 20 ms, update every 20 ms (solver fddp with cones=penalty)"
    walk = tasks.resolve_task("humanoid-walk") if "humanoid-walk" in tasks.list_tasks() else None
    if walk is not None and not walk.supports_hard_cones():   # a subclass with its own problem
        line = out[out.index(next(r for r in out if r.startswith("humanoid-walk "))) + 1]
        assert "csqp" not in line and walk.cones == "penalty" and walk.defaults.solver == "fddp"
        with pytest.raises(ValueError, match="cones=hard is not available"):
            get_task("humanoid-walk", cones="hard")


def test_metric_bad_input(tmp_path):
    model = _ball_scene(tmp_path, friction=1.0)
    x = np.array([0.0, RADIUS, 0.0, 0.0])
    with pytest.raises(ValueError, match="mu must be a positive"):
        mujoco_cone_ratios(model, [1], 0.0, x[None], np.zeros((1, 0)))
    with pytest.raises(ValueError, match=r"controls must be \(T, nu\)"):
        mujoco_cone_ratios(model, [1], 0.5, x[None], np.zeros((2, 0)))
    with pytest.raises(ValueError, match="unknown body 'nobody'"):
        mujoco_cone_ratios(model, [1], 0.5, x[None], np.zeros((1, 0)), times=[0.0],
                           disturbances=[Disturbance(0.0, "nobody", (1.0, 0.0, 0.0), 1.0)])
