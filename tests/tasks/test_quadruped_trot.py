"""Quadruped trot: the foot costs' derivatives against central differences, bad arguments, and a
short lockstep closed loop of HyQ trotting in MuJoCo (assertions on what MuJoCo measured: trunk
height, forward displacement, foot contacts of both diagonal pairs)."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from solvers import StateCost, StateSpace
from solvers.costs import CostContext
from solvers.costs import FrameHeightCost, FramePositionCost, FrameVelocityCost

FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")


@pytest.fixture(scope="module")
def hyq():
    m = dynamics.load_model("hyq")
    return m, np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])


def _ctx(m, be, x):
    return CostContext(m, be, StateSpace(m), np.atleast_2d(x), None, np.zeros(np.atleast_2d(x).shape[0], int))


def _fd_gradient(cost, m, be, x, h=1e-6):
    ss = StateSpace(m)
    g = np.empty(ss.ndx)
    for i in range(ss.ndx):
        e = np.zeros(ss.ndx)
        e[i] = h
        g[i] = (cost.value(_ctx(m, be, ss.integrate(x, e)))[0] - cost.value(_ctx(m, be, ss.integrate(x, -e)))[0]) / (2 * h)
    return g


def _fd_residual_jacobian(cost, m, be, x, h=1e-6):
    ss = StateSpace(m)
    cols = []
    for i in range(ss.ndx):
        e = np.zeros(ss.ndx)
        e[i] = h
        cols.append((cost.residual(_ctx(m, be, ss.integrate(x, e)))[0]
                     - cost.residual(_ctx(m, be, ss.integrate(x, -e)))[0]) / (2 * h))
    return np.stack(cols, axis=-1)


COSTS = {
    "height": lambda m, x: FrameHeightCost(m, "lf_foot", 0.05, weights=3.0),
    "velocity": lambda m, x: FrameVelocityCost(m, "rh_foot", (0.1, -0.2, 0.3), weights=(1.0, 2.0, 3.0)),
    "placement": lambda m, x: FramePositionCost(m, "lh_foot", (0.3, 0.2, 0.0), weights=(5.0, 5.0, 0.0)),
    "base velocity": lambda m, x: StateCost(m, np.r_[x[:m.nq], 0.3, 0, 0, 0, 0, 0, np.zeros(m.nv - 6)],
                                            np.r_[np.zeros(m.nv), np.ones(6), np.zeros(m.nv - 6)]),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", list(COSTS))
def test_foot_cost_derivatives_match_central_differences(hyq, name, backend, rng):
    m, x0 = hyq
    be = dynamics.get_backend(backend)
    ss = StateSpace(m)
    x = ss.integrate(x0, np.r_[0.05 * rng.normal(size=m.nv), 0.5 * rng.normal(size=m.nv)])
    cost = COSTS[name](m, x)
    d = cost.derivatives(_ctx(m, be, x))
    assert d.l[0] > 1e-4                                   # away from the optimum: a real gradient
    g = _fd_gradient(cost, m, be, x)
    assert np.abs(d.lx[0] - g).max() <= 1e-6 * max(1.0, np.abs(g).max()), np.abs(d.lx[0] - g).max()
    Rx = cost.residual_jacobian(_ctx(m, be, x))[0][0]
    Rfd = _fd_residual_jacobian(cost, m, be, x)
    assert np.abs(Rx - Rfd).max() <= 1e-6 * max(1.0, np.abs(Rfd).max())
    # Gauss–Newton Hessian Rxᵀ W Rx: at a zero residual it is the Hessian; check it there against
    # central differences of the gradient
    r0 = cost.residual(_ctx(m, be, x))[0]
    if name == "height":
        cost.target = float(cost.target) + r0[0]
    elif name == "base velocity":
        cost.reference = ss.integrate(cost.reference, np.r_[np.zeros(m.nv), r0[m.nv:]])
    else:
        cost.target = cost.target + r0
    d = cost.derivatives(_ctx(m, be, x))
    assert d.l[0] < 1e-20
    H = np.empty((ss.ndx, ss.ndx))
    h = 1e-5
    for i in range(ss.ndx):
        e = np.zeros(ss.ndx)
        e[i] = h
        H[:, i] = (cost.derivatives(_ctx(m, be, ss.integrate(x, e))).lx[0]
                   - cost.derivatives(_ctx(m, be, ss.integrate(x, -e))).lx[0]) / (2 * h)
    if name == "base velocity":
        # StateCost's Hessian is Gauss–Newton on the configuration part; velocity part exact
        H, dH = H[m.nv:, m.nv:], d.lxx[0][m.nv:, m.nv:]
    else:
        dH = d.lxx[0]
    assert np.abs(dH - H).max() <= 1e-5 * max(1.0, np.abs(H).max()), np.abs(dH - H).max()


def test_foot_cost_bad_arguments(hyq):
    m, _ = hyq
    with pytest.raises(KeyError):
        FrameHeightCost(m, "no_such_foot", 0.1)
    with pytest.raises(ValueError, match="target"):
        FrameVelocityCost(m, "lf_foot", (0.0, 1.0))
    with pytest.raises(ValueError, match="non-finite"):
        FrameHeightCost(m, "lf_foot", np.nan)


def test_trot_task_bad_arguments():
    from tasks import QuadrupedTrot
    with pytest.raises(ValueError, match="4 feet"):
        QuadrupedTrot(feet=("lf_foot", "rf_foot"))
    with pytest.raises(ValueError, match="swing_time"):
        QuadrupedTrot(swing_time=0.0)
    with pytest.raises(ValueError, match="free-floating trunk"):
        QuadrupedTrot(robot="iiwa")
    task = QuadrupedTrot()
    with pytest.raises(ValueError, match="shorter than two knots"):
        task.build_problem(task.initial_state(), horizon=4, dt=0.2)


def test_trot_schedule_has_touchdown_impulses():
    from tasks import get_task
    task = get_task("hyq-trot", start_time=0.0, swing_time=0.2, double_support_time=0.0)
    sched = task.knot_schedule(0.0, 30, 0.02)
    kinds = [k for _, k in sched]
    impulses = [i for i, k in enumerate(kinds) if k[0] == "impulse"]
    assert [kinds[i][1] for i in impulses] == [(0, 3), (1, 2)]          # pair A lands, then pair B
    assert kinds[impulses[0] - 1] == (False, True, True, False)          # A swinging before its touchdown
    assert kinds[impulses[0] + 1] == (True, False, False, True)          # then B swings (no double support)
    assert sched[impulses[0]][0] == pytest.approx(0.2)


def test_impulse_knot_targets_the_foothold_of_the_swing_it_ends():
    """An impulse knot's contact mask is judged at the knot's middle, so its time falls up to half a
    knot either side of the scheduled touchdown. Updates off the knot grid (realtime mode,
    --update-every) put it on both sides: its foothold target must be that of the swing ending
    there, in closed form on the steady command (the foot's standing position from MuJoCo, plus the
    trunk's travel from t to the touchdown, plus half the stance stride), not the next swing's."""
    import mujoco

    from tasks import get_task
    task = get_task("hyq-trot")
    N, dt = 16, 0.02
    problem = task.build_problem(task.initial_state(), N, dt, backend="numpy")
    mj = task.model.mj_model
    d = mujoco.MjData(mj)
    d.qpos[:] = task.x_stand[:mj.nq]
    mujoco.mj_kinematics(mj, d)
    feet0 = np.array([d.site(f).xpos for f in FEET])
    v, sw, ds = task.velocity, task.swing_time, task.double_support_time
    late = early = 0
    for t in np.arange(task.start_time + task.ramp_time + 0.01, task.start_time + task.ramp_time + 0.7, 0.005):
        task.update_problem(problem, t)
        for k, (tk, kind) in enumerate(task.knot_schedule(t, N, dt)):
            if kind[0] != "impulse":
                continue
            first = task.start_time + (0.0 if kind[1] == (0, 3) else sw + ds) + sw   # its first touchdown
            td = first + round((tk - first) / task.cycle) * task.cycle
            assert abs(tk - td) <= 0.5 * dt + 1e-9
            late, early = late + (tk > td + 1e-6), early + (tk < td - 1e-6)
            for j in kind[1]:
                want = feet0[j, :2] + [v * (td - t) + 0.5 * (sw + 2 * ds) * v, 0.0]
                got = task._impact[j].target[k]
                assert np.allclose(got[:2], want, atol=1e-9), (t, tk, td, j, got, want)
    assert late > 10 and early > 10                              # both sides of the touchdown seen


def test_hyq_trots_forward_in_mujoco():
    """Lockstep closed loop, 1.4 s (the gait starts after the first horizon, 0.32 s, about 1.6
    cycles of 0.68 s): trunk height, forward travel and foot contacts as MuJoCo measured them."""
    from mpc import MPC
    from sim.runner import simulate
    from tasks import get_task
    task = get_task("hyq-trot", ramp_time=0.4, duration_s=1.4)
    dt = 0.02
    assert task.cones == "hard" and task.defaults.solver == "csqp"   # the default: the stance cones as constraints
    ctrl = MPC(task, solver="csqp", backend="numba", horizon=16, dt=dt)
    ctrl.warmup()
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep",
                 update_every=int(round(dt / task.model.mj_model.opt.timestep)))
    assert r.aborted is None, r.aborted
    t, x = r.t, r.x
    z0 = task.standing_height
    assert np.all(np.abs(x[:, 2] - z0) < 0.05 * z0), (x[:, 2].min(), x[:, 2].max(), z0)
    commanded = float(task._travel(0.0, t[-1]))
    assert x[-1, 0] - x[0, 0] > 0.4 * commanded, (x[-1, 0] - x[0, 0], commanded)
    assert abs(x[-1, 1] - x[0, 1]) < 0.05
    sub = x[::5]
    c = task.foot_contacts(sub)                                  # MuJoCo contacts, every 5 ms
    a_up = ~c[:, 0] & ~c[:, 3] & c[:, 1] & c[:, 2]               # LF+RH in the air on RF+LH
    b_up = ~c[:, 1] & ~c[:, 2] & c[:, 0] & c[:, 3]
    assert a_up.sum() * 0.005 > 0.1 and b_up.sum() * 0.005 > 0.1, (a_up.sum(), b_up.sum())
    assert task.stance_slip(sub, c).max() < 0.03


def test_set_running_models_equals_a_problem_built_with_them(hyq, rng):
    """Re-phasing in place (what the trot's update_problem does) gives the cost and derivatives of a
    problem built from scratch with the new knots; a wrong count is refused."""
    from dynamics import ContactSet
    from solvers import ActionModel, ContactDynamics, ControlCost, ImpulseDynamics, ShootingProblem
    m, x0 = hyq
    cs4, cs2 = ContactSet(m, FEET), ContactSet(m, (FEET[1], FEET[2]))
    w = np.r_[np.full(m.nv, 10.0), np.ones(m.nv)]
    stance = ActionModel(m, StateCost(m, x0, w) + 1e-3 * ControlCost(m), 0.02, ContactDynamics(cs4))
    swing = ActionModel(m, StateCost(m, x0, 2 * w) + 1e-3 * ControlCost(m)
                        + FrameHeightCost(m, FEET[0], 0.1, 100.0), 0.02, ContactDynamics(cs2))
    impact = ActionModel(m, StateCost(m, x0, w) + 1e-3 * ControlCost(m), 0.0, ImpulseDynamics(cs4))
    term = ActionModel(m, StateCost(m, x0, w), 0.0)
    p = ShootingProblem(x0, [stance] * 6, term, backend="numpy")
    models = [stance, swing, swing, impact, stance, stance]
    p.set_running_models(models)
    fresh = ShootingProblem(x0, models, term, backend="numpy")
    assert p.revision == 1 and np.array_equal(p.dts, fresh.dts) and np.array_equal(p.cost_scales, fresh.cost_scales)
    ss = p.state
    xs = np.stack([ss.integrate(x0, 0.01 * rng.normal(size=ss.ndx)) for _ in range(7)])
    us = 10 * rng.normal(size=(6, m.nu))
    assert p.cost(xs, us) == fresh.cost(xs, us)
    d1, d2 = p.derivatives(xs, us), fresh.derivatives(xs, us)
    for a, b in ((d1.running.lx, d2.running.lx), (d1.dynamics.Fx, d2.dynamics.Fx), (d1.dynamics.Fu, d2.dynamics.Fu)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(p.rollout(us), fresh.rollout(us))
    with pytest.raises(ValueError, match="expected 6"):
        p.set_running_models([stance] * 5)


def test_turning_references_follow_the_commanded_arc():
    """With a constant command (no ramp) the trunk reference runs on the circle of radius v/ω
    (the closed form), heading ψ = ω t, and the footholds turn with it."""
    from tasks import get_task
    v, w = 0.2, 0.4
    task = get_task("hyq-trot", velocity=v, yaw_rate=w, start_time=0.0, ramp_time=0.0)
    t = np.linspace(0.0, 2.0, 9)
    assert np.allclose(task.heading(t), w * t)
    circle = np.stack([v / w * np.sin(w * t), v / w * (1 - np.cos(w * t))], axis=-1)
    assert np.allclose(task._arc(np.zeros(2), 0.0, t), circle, atol=1e-5)
    task.start_time = 0.0                   # build_problem would raise it to one horizon
    hold = task._foothold(0, task.x_stand, 0.0, np.pi / (2 * w))    # a quarter turn later
    off = task._offsets[0]
    centre = task._arc(task.x_stand[:2], 0.0, np.array([np.pi / (2 * w)]))[0]
    ahead = 0.5 * task.stance_time * v * np.array([0.0, 1.0])
    assert np.allclose(hold[:2], centre + np.array([-off[1], off[0]]) + ahead, atol=1e-5)
    with pytest.raises(ValueError, match="yaw_rate"):
        get_task("hyq-trot", yaw_rate=float("nan"))


def test_forward_velocity_is_along_the_heading():
    """The forward velocity the trot (and the walk) report and judge turning runs by: the trunk's
    horizontal world velocity along its heading, whatever the yaw (the state's linear velocity is in
    body axes: built here by hand from a world velocity and a yaw rotation)."""
    from tasks import get_task
    task = get_task("hyq-trot", yaw_rate=0.3)
    m = task.model
    for psi, (vx, vy) in ((0.0, (0.3, 0.1)), (1.2, (0.2, -0.4)), (-2.5, (-0.1, 0.5)), (np.pi, (0.3, 0.0))):
        x = task.x_stand.copy()
        x[3:7] = (np.cos(psi / 2), 0.0, 0.0, np.sin(psi / 2))      # (w, x, y, z)
        c, s = np.cos(psi), np.sin(psi)
        x[m.nq:m.nq + 3] = (c * vx + s * vy, -s * vx + c * vy, 0.0)   # Rᵀ v_world
        x[m.nq + 5] = 0.3
        assert task._forward_velocity(x)[0] == pytest.approx(c * vx + s * vy, abs=1e-12)
        assert task._yaw_rate(x)[0] == pytest.approx(0.3, abs=1e-12)


@pytest.mark.parametrize("velocity, yaw_rate, duration, tol", [(0.2, 0.3, 2.2, 0.25), (0.0, 0.5, 2.6, 0.15)],
                         ids=["on the move", "in place"])
def test_hyq_turns_in_mujoco(velocity, yaw_rate, duration, tol):
    """Lockstep closed loops with the task's own solver settings for turning, the command ramped
    over 0.4 s from 0.32 s: 0.3 rad/s at 0.2 m/s, and 0.5 rad/s in place. The trunk yaw MuJoCo
    measured follows the commanded heading, the trunk stays up and level (in place: on the spot)."""
    from dynamics.lie import quat_to_rotation
    from mpc import MPC
    from sim.runner import simulate
    from tasks import get_task
    # the penalty cones (fddp), the settings the turning was tuned with (docs/tasks.md)
    task = get_task("hyq-trot", velocity=velocity, yaw_rate=yaw_rate, ramp_time=0.4, duration_s=duration,
                    cones="penalty")
    d = task.defaults
    assert (d.solver, d.iterations) == ("fddp", 2)
    ctrl = MPC(task, solver=d.solver, backend="numba", horizon=d.horizon, dt=d.dt, iterations_per_update=d.iterations)
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep",
                 update_every=round(d.dt / task.model.mj_model.opt.timestep))
    assert r.aborted is None, r.aborted
    R = quat_to_rotation(r.x[:, 3:7])
    yaw = np.unwrap(np.arctan2(R[:, 1, 0], R[:, 0, 0]))
    commanded = float(task.heading(r.t[-1]) - task.heading(0.0))
    assert commanded > 0.4
    assert abs((yaw[-1] - yaw[0]) - commanded) < tol * commanded, (yaw[-1] - yaw[0], commanded)
    z0 = task.standing_height
    assert np.all(np.abs(r.x[:, 2] - z0) < 0.1 * z0), (r.x[:, 2].min(), z0)
    assert np.all(R[:, 2, 2] > np.cos(0.2))                      # upright: tilt below 0.2 rad
    if velocity == 0.0:
        assert np.abs(r.x[:, :2] - r.x[0, :2]).max() < 0.1       # turning on the spot


def test_knots_entering_the_horizon_are_warm_started_with_their_own_stance_torques():
    """Why the one-iteration trot fell from ``--seed 3/4/5`` (and from seed 0 with the fresh state
    read by update_problem): a knot entering the end of the horizon took the previous plan's last
    control, the four-foot standing torques; on a knot where a diagonal pair swings, those torques
    whip the free legs (a one-knot gap of ~50 rad/s at 1.06 s with seed 3) and one FDDP iteration
    per update never closed it. The task's nominal controls are each knot's own phase torques,
    which keep the free legs still over a knot (model step from the standing state, numpy)."""
    from tasks import get_task
    task = get_task("hyq-trot")
    m, dt = task.model, 0.02
    p = task.build_problem(task.x_stand, 16, dt, backend="numpy")
    t = task.start_time + 0.2                       # pair A swings, its touchdown impulse in the horizon
    task.update_problem(p, t)
    kinds = [k for _, k in task.knot_schedule(t, 16, dt)]
    u = task.nominal_controls(p)
    assert u.shape == (16, m.nu)
    swing = next(k for k, kind in enumerate(kinds) if kind[0] != "impulse" and not all(kind))
    four = next(k for k, kind in enumerate(kinds) if kind[0] != "impulse" and all(kind))
    np.testing.assert_allclose(u[four], task.u_stand)
    assert np.abs(u[swing] - task.u_stand).max() > 1.0             # another stance: other torques
    step = p.running_models[swing].dynamics.integrated(m, dynamics.get_backend("numpy"), dt).step
    v_own = step(task.x_stand, u[swing])[m.nq + 6:]
    v_held = step(task.x_stand, task.u_stand)[m.nq + 6:]
    assert np.abs(v_own).max() < 1.0 and np.abs(v_held).max() > 20.0, (np.abs(v_own).max(), np.abs(v_held).max())
