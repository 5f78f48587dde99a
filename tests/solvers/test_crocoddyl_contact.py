"""Against Crocoddyl, on contact knots: the hyq-stand problem (four point feet, state / control /
contact-force / friction-cone costs) mapped by ``solvers.crocoddyl_problem`` to
``DifferentialActionModelContactFwdDynamics`` (``ContactModel3D`` per foot, LOCAL_WORLD_ALIGNED,
``ActuationModelFloatingBase``, symplectic Euler) gives the same cost and next states at random
states and controls (friction cone active), the same with Baumgarte gains, and Crocoddyl's FDDP
reaches the same optimum as ours. Crocoddyl 3.2.1 needs pin 4.0.0 (the ``test`` extra pins it).
"""

from __future__ import annotations

import numpy as np
import pytest

croc = pytest.importorskip("crocoddyl", reason="crocoddyl is not installed in this environment (see docs/solvers.md)")

import dynamics  # noqa: E402
import tasks  # noqa: E402
from solvers import FDDP, ActionModel, ContactDynamics, ShootingProblem, StateSpace  # noqa: E402
from solvers.crocoddyl_problem import build_crocoddyl_problem, from_pinocchio_states, to_crocoddyl_controls, \
    to_pinocchio_states  # noqa: E402

N, DT = 10, 0.01


@pytest.fixture(scope="module")
def hyq():
    task = tasks.get_task("hyq-stand", cones="penalty")
    p = task.build_problem(task.initial_state(), N, DT, backend="numpy", passive_forces=False)
    task.update_problem(p, 3.0)          # the pitched-trunk target: something to optimise
    return task, p


def _random_trajectory(task, p, rng, u_noise):
    m = task.model
    xs = StateSpace(m).integrate(np.repeat(p.x0[None], N + 1, axis=0), rng.normal(size=(N + 1, 2 * m.nv)) * 0.05)
    us = task.u_stand + rng.normal(size=(N, m.nu)) * u_noise
    return xs, us


def test_state_layout_round_trip(hyq):
    task, p = hyq
    x = task.initial_state()
    xp = to_pinocchio_states(p, x)
    np.testing.assert_array_equal(xp[3:7], x[[4, 5, 6, 3]])        # quaternion (w,x,y,z) -> (x,y,z,w)
    np.testing.assert_array_equal(from_pinocchio_states(p, xp), x)


@pytest.mark.parametrize("u_noise", [5.0, 80.0])      # 80 N m: friction cone and force terms far from rest
def test_same_costs_and_next_states(hyq, u_noise):
    task, p = hyq
    cp = build_crocoddyl_problem(p)
    xs, us = _random_trajectory(task, p, np.random.default_rng(int(u_noise)), u_noise)
    xp = to_pinocchio_states(p, xs)
    assert cp.calc(list(xp), list(us)) == pytest.approx(p.cost(xs, us), rel=1e-11)
    if u_noise > 10:
        d = cp.runningModels[0].createData()
        cp.runningModels[0].calc(d, xp[0], us[0])
        costs = d.differential.costs.costs
        assert sum(costs[k].cost for k in costs.todict() if k.startswith("cone")) > 1.0   # cone penalty active
    for t in (0, N - 1):
        d = cp.runningModels[t].createData()
        cp.runningModels[t].calc(d, xp[t], us[t])
        assert np.abs(from_pinocchio_states(p, d.xnext) - p.step(xs[t], us[t])).max() < 1e-11


def test_baumgarte_gains_same_next_states(hyq):
    task, p = hyq
    m = task.model
    be = dynamics.get_backend("numpy")
    feet = task.contacts.frames
    ref = np.stack([be.frame_placement(m, task.x_stand[:m.nq], f)[1] for f in feet]) + [0.0, 0.0, 0.01]
    cs = dynamics.ContactSet(m, frames=feet, kind="point", baumgarte=(30.0, 5.0), reference=ref)
    dyn = ContactDynamics(cs, passive_forces=False)
    state_cost = p.terminal_cost
    q = ShootingProblem(p.x0, [ActionModel(m, state_cost, DT, dyn)] * 2, ActionModel(m, state_cost, 0.0, dyn),
                        backend="numpy")
    cp = build_crocoddyl_problem(q)
    rng = np.random.default_rng(3)
    for _ in range(2):
        x = StateSpace(m).integrate(p.x0, rng.normal(size=2 * m.nv) * 0.1)
        u = task.u_stand + rng.normal(size=m.nu) * 10
        d = cp.runningModels[0].createData()
        cp.runningModels[0].calc(d, to_pinocchio_states(q, x), u)
        assert np.abs(from_pinocchio_states(q, d.xnext) - q.step(x, u)).max() < 1e-11


def test_crocoddyl_fddp_reaches_the_same_optimum(hyq):
    task, p = hyq
    cp = build_crocoddyl_problem(p)
    xs0, us0 = p.initial_guess()
    solver = croc.SolverFDDP(cp)
    solver.th_stop = 1e-16
    solver.solve(list(to_pinocchio_states(p, xs0)), list(us0), 200, False)
    q = ShootingProblem(p.x0, p.running_models, p.terminal_model, backend="numba")
    r = FDDP(q).solve(max_iter=100, tol=1e-9)
    assert r.converged, r.reason
    assert abs(r.cost - solver.cost) <= 1e-9 * solver.cost, (r.cost, solver.cost)
    assert np.abs(r.us - np.array(solver.us)).max() < 1e-4 * np.abs(r.us).max()
    assert np.abs(r.xs - from_pinocchio_states(p, np.array(solver.xs))).max() < 1e-6


def test_unmapped_knots_are_refused(hyq):
    task, _ = hyq
    with_damping = task.build_problem(task.initial_state(), 3, DT, backend="numpy")     # joint damping on
    with pytest.raises(NotImplementedError, match="passive_forces=False"):
        build_crocoddyl_problem(with_damping)


def test_atlas_soles_same_costs_and_next_states():
    """Two 6-D sole contacts (LOCAL), the wrench cone of the flat feet, the CoM and contact-wrench
    terms: cost and next states equal at random states and controls."""
    from solvers.costs import ComPositionCost, ContactForceCost, ControlCost, CostSum, StateCost, WrenchConeCost
    m = dynamics.load_model("atlas")
    be = dynamics.get_backend("numpy")
    cs = dynamics.ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="6d")
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    lam_ref = np.tile([0.0, 0.0, -0.5 * m.total_mass * m.gravity[2], 0.0, 0.0, 0.0], 2)
    running = CostSum({
        "state": (StateCost(m, x0, np.r_[np.full(6, 10.0), np.full(m.nv - 6, 0.1), np.full(m.nv, 1.0)]), 1.0),
        "control": (ControlCost(m, np.zeros(m.nu)), 1e-4),
        "com": (ComPositionCost(m, be.center_of_mass(m, x0[:m.nq]) + [0.0, 0.0, -0.05]), 100.0),
        "wrench": (ContactForceCost(m, cs, lam_ref, passive_forces=False), 1e-4),
        "cone": (WrenchConeCost(m, cs, 0.1, 0.05, mu=0.7, f_min=20.0,
                                weights=np.linspace(1.0, 3.0, 34), passive_forces=False), 10.0)})
    dyn = ContactDynamics(cs, passive_forces=False)
    p = ShootingProblem(x0, [ActionModel(m, running, DT, dyn)] * 2,
                        ActionModel(m, StateCost(m, x0), 0.0, dyn), backend="numpy")
    cp = build_crocoddyl_problem(p)
    rng = np.random.default_rng(5)
    xs = StateSpace(m).integrate(np.repeat(x0[None], 3, axis=0), rng.normal(size=(3, 2 * m.nv)) * 0.05)
    us = rng.normal(size=(2, m.nu)) * 60
    xp = to_pinocchio_states(p, xs)
    d = cp.runningModels[0].createData()
    cp.runningModels[0].calc(d, xp[0], us[0])
    costs = d.differential.costs.costs
    assert sum(costs[k].cost for k in costs.todict() if k.startswith("cone")) > 1.0    # wrench cone active
    assert cp.calc(list(xp), list(us)) == pytest.approx(p.cost(xs, us), rel=1e-11)
    assert np.abs(from_pinocchio_states(p, d.xnext) - p.step(xs[0], us[0])).max() < 1e-10


def test_mpc_rate_anchor_on_a_legged_task():
    """benchmarks/mpc_rate.py's anchor on hyq-stand: the Crocoddyl problem builds from the task and
    one warm-started FDDP iteration and calcDiff are timed (values not checked: speed is never
    asserted)."""
    from benchmarks import mpc_rate
    task = tasks.get_task("hyq-stand", cones="penalty")
    croc_t = mpc_rate.time_crocoddyl_iteration(task, 4, DT, 1)
    assert "unavailable" not in croc_t, croc_t
    assert croc_t["iteration_s"] > 0 and croc_t["calcdiff_s"] > 0


@pytest.mark.parametrize("facets", [4, 8])
def test_swing_and_impulse_knots_same_costs_and_next_states(hyq, facets):
    """A trot-like horizon built by hand: two knots on a diagonal pair with swing-foot height,
    placement and touchdown-velocity costs (a friction-cone penalty of 4 or 8 faces, Crocoddyl's
    FrictionCone with as many), a touchdown impulse on all four feet, then stance.
    Crocoddyl's impulse knot has no control, so the impulse knot's control is set to its
    regularisation reference (where the dropped term is zero)."""
    from solvers import ImpulseDynamics
    from solvers.costs import ContactForceCost, ControlCost, CostSum, FrameHeightCost, FramePositionCost, \
        FrameVelocityCost, FrictionConeCost
    task, p = hyq
    m = task.model
    feet = task.contacts.frames
    pair = dynamics.ContactSet(m, frames=(feet[0], feet[3]), kind="point")
    lam = task.lam_stand.reshape(4, 3)[[0, 3]].reshape(-1) * 2.0
    state = p.terminal_cost
    swing = CostSum({"state": (state, 0.1), "control": (ControlCost(m, task.u_stand), 1e-5),
                     "force": (ContactForceCost(m, pair, lam, passive_forces=False), 1e-3),
                     "cone": (FrictionConeCost(m, pair, 0.7, f_min=10.0, weights=np.linspace(1, 2, 2 * (facets + 1)),
                                               passive_forces=False, facets=facets), 10.0),
                     "swing_z": (FrameHeightCost(m, feet[1], np.linspace(0.0, 0.1, 6), 1e3), 1.0),
                     "swing_xy": (FramePositionCost(m, feet[1], [0.4, 0.2, 0.0], (50.0, 50.0, 0.0)), 1.0),
                     "touchdown_vel": (FrameVelocityCost(m, feet[2], (0.1, 0.0, -0.2), (1.0, 2.0, 3.0)), 1.0)})
    touchdown = CostSum({"state": (state, 0.1), "control": (ControlCost(m, task.u_stand), 1e-5),
                         "impact": (FramePositionCost(m, feet[1], [0.4, 0.2, 0.0], 100.0), 1.0)})
    models = [ActionModel(m, swing, DT, ContactDynamics(pair, passive_forces=False))] * 2 + \
        [ActionModel(m, touchdown, 0.0, ImpulseDynamics(task.contacts, restitution=0.2))] + list(p.running_models[:2])
    q = ShootingProblem(p.x0, models, p.terminal_model, backend="numpy")
    cp = build_crocoddyl_problem(q)
    rng = np.random.default_rng(7)
    xs = StateSpace(m).integrate(np.repeat(p.x0[None], 6, axis=0), rng.normal(size=(6, 2 * m.nv)) * 0.1)
    us = task.u_stand + rng.normal(size=(5, m.nu)) * 30
    us[2] = task.u_stand
    xp, ul = to_pinocchio_states(q, xs), to_crocoddyl_controls(q, us)
    assert ul[2].shape == (0,)
    assert cp.calc(list(xp), ul) == pytest.approx(q.cost(xs, us), rel=1e-11)
    for t in range(5):
        d = cp.runningModels[t].createData()
        cp.runningModels[t].calc(d, xp[t], ul[t])
        assert np.abs(from_pinocchio_states(q, d.xnext) - q.step(xs[t], us[t], t)).max() < 1e-11, t
