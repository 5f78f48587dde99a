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
from tests.helpers.quadruped_mjcf import FEET, quadruped_mjcf


def _run(task, duration, horizon=16, dt=0.02):
    ctrl = MPC(task, solver=task.defaults.solver, backend="numba", horizon=horizon, dt=dt)   # hard cones: csqp
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


@pytest.mark.parametrize("feet_as", ["site", "geom"])     # geom: feet named by their collision spheres (Menagerie)
def test_stand_task_on_another_quadruped(tmp_path, feet_as):
    path = tmp_path / "quadruped.xml"
    # other masses, ranges and motors than HyQ: two-sided knees, unnamed 60 N m motors
    path.write_text(quadruped_mjcf(trunk_mass=12.0, haa_range="-0.8 0.8", hfe_range="-2 2", kfe_range="-2.6 2.6",
                                   limit=60, named_motors=False, feet_as=feet_as))
    task = QuadrupedStand(robot=str(path), feet=FEET,
                          poses=((0.0, 0.0, 0.0, 0.0, 0.0), (0.3, -0.03, 0.0, 0.0, 0.0)), duration_s=1.0)
    assert task.posture_source.startswith("computed")
    assert (feet_as == "geom") == (FEET[0] not in task.model.site_names)
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


def test_update_problem_takes_each_pose_reference_as_reference_state_gives_it():
    """The horizon's state references (running and terminal) are :meth:`reference_state` at the
    knot times, bitwise, across pose switches and past the last pose (each pose's reference is made
    once and picked per knot); a replaced pose table is followed."""
    task = get_task("hyq-stand", poses=((0.0, 0.0, 0.0, 0.0, 0.0), (0.13, -0.05, 0.1, -0.05, 0.2),
                                        (0.3, 0.02, 0.0, 0.08, -0.3)))
    N, dt = 12, 0.02
    p = task.build_problem(task.initial_state(), N, dt, backend="numpy")
    from solvers.costs import StateCost
    costs = [next(c for c, _ in p.running_cost.terms.values() if isinstance(c, StateCost)), p.terminal_cost]
    offsets = np.concatenate([[0.0], np.cumsum(p.dts)])          # the knot times update_problem takes
    for t in (0.0, 0.011, 0.1, 0.13, 0.2999, 0.5):
        task.update_problem(p, t)
        want = task.reference_state(t + offsets)
        for c in costs:
            np.testing.assert_array_equal(c.reference, want, err_msg=f"t = {t}")
    task._poses = np.array([[0.0, 0.05, 0.0, 0.0, 0.0]])
    task.update_problem(p, 0.2)
    np.testing.assert_array_equal(costs[1].reference, task.reference_state(0.2 + offsets))


def test_update_problem_keeps_the_references_while_the_knots_keep_their_poses():
    """Updates whose knots keep their poses give the state costs the validated array of the last
    update again (no copy to check, nothing for the compiled costs to re-pack) — still
    :meth:`reference_state` at the knot times, bitwise — and a new array where some knot's pose
    changes; another problem of the task (another horizon) gets its own knots' references."""
    task = get_task("hyq-stand", poses=((0.0, 0.0, 0.0, 0.0, 0.0), (0.3, -0.04, 0.0, 0.05, 0.0)))
    from solvers.costs import StateCost

    def made(N):
        p = task.build_problem(task.initial_state(), N, 0.02, backend="numpy")
        costs = [next(c for c, _ in p.running_cost.terms.values() if isinstance(c, StateCost)), p.terminal_cost]
        return p, costs, np.concatenate([[0.0], np.cumsum(p.dts)])

    p, costs, offsets = made(10)
    seen = []
    for t in (0.0, 0.01, 0.05, 0.09, 0.1, 0.12, 0.31, 0.4):
        task.update_problem(p, t)
        for c in costs:
            np.testing.assert_array_equal(c.reference, task.reference_state(t + offsets), err_msg=f"t = {t}")
        assert costs[1].reference is costs[0].reference
        seen.append(costs[0].reference)
    # knots up to t + 0.2 s: one pose until t = 0.1 (the last knot at 0.3 switches), both up to 0.3
    assert seen[1] is seen[0] and seen[2] is seen[0] and seen[3] is seen[0]
    assert seen[4] is not seen[0] and seen[5] is not seen[4]
    assert seen[7] is seen[6]
    q, q_costs, q_offsets = made(4)
    task.update_problem(q, 0.4)
    np.testing.assert_array_equal(q_costs[0].reference, task.reference_state(0.4 + q_offsets))
    task.update_problem(p, 0.05)
    np.testing.assert_array_equal(costs[0].reference, task.reference_state(0.05 + offsets))
