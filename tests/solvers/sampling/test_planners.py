"""The sampling planners (predictive sampling, MPPI, CEM): spline parametrisation, batched
rollouts against the problem's own sequential rollout and cost, cost reduction on a small
problem, reaching a target in the plan, reproducibility from the seed, the MPC controller driving
them, and bad input. The numpy backend keeps the tests free of compilation."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
import tasks
from mpc import MPC
from solvers import (
    SOLVERS,
    ControlCost,
    CostSum,
    FramePositionCost,
    ShootingProblem,
    StateCost,
)
from solvers.sampling import (
    CEM,
    MPPI,
    ControlSpline,
    PredictiveSampling,
    rollout_batch,
    rollout_costs,
)
from solvers.sampling.policy import GravityDampingFeedback, PDSetpoints

PLANNERS = (PredictiveSampling, MPPI, CEM)


@pytest.fixture(scope="module")
def problem() -> ShootingProblem:
    """The iiwa moving its end effector to a point 20 cm away: 10 knots of 30 ms."""
    m = dynamics.load_model("iiwa")
    x0 = tasks.get_task("iiwa-reach").initial_state()
    be = dynamics.get_backend("numpy")
    p0 = be.frame_placement(m, x0[:m.nq], "ee")[1]
    target = p0 + np.array([0.1, 0.1, -0.15])
    u_g = be.gravity_torques(m, x0[:m.nq])
    running = CostSum({"ee": (FramePositionCost(m, "ee", target), 1e3),
                       "state": (StateCost(m, x0, np.r_[np.full(m.nv, 0.1), np.ones(m.nv)]), 1.0),
                       "u": (ControlCost(m, u_g), 1e-3)})
    terminal = CostSum({"ee": (FramePositionCost(m, "ee", target), 1e4),
                        "state": (StateCost(m, x0, np.r_[np.zeros(m.nv), np.full(m.nv, 10.0)]), 1.0)})
    return ShootingProblem.uniform(m, x0, 10, 0.03, running, terminal, backend="numpy")


# ---------------------------------------------------------------- spline
@pytest.mark.parametrize("interpolation", ("zero", "linear"))
def test_spline(interpolation):
    s = ControlSpline(10, 4, interpolation)
    assert s.W.shape == (10, 4)
    np.testing.assert_allclose(s.W.sum(axis=1), 1.0)
    theta = np.random.default_rng(0).normal(size=(4, 3))
    U = s.controls(theta)
    # knots sit on intervals 0, 3, 6, 9: the controls there are the knot values
    np.testing.assert_allclose(U[[0, 3, 6, 9]], theta, atol=1e-14)
    if interpolation == "zero":
        np.testing.assert_array_equal(U[1], theta[0])
        np.testing.assert_array_equal(U[5], theta[1])
    else:
        np.testing.assert_allclose(U[1], theta[0] + (theta[1] - theta[0]) / 3)
    np.testing.assert_allclose(s.fit(U), theta, atol=1e-12)      # a spline's own controls are fitted exactly
    np.testing.assert_allclose(s.controls(np.stack([theta, 2 * theta])), np.stack([U, 2 * U]), atol=1e-14)
    assert np.all(ControlSpline(5, 1).W == 1.0)


def test_spline_bad_input():
    with pytest.raises(ValueError, match="knots"):
        ControlSpline(10, 0)
    with pytest.raises(ValueError, match="knots"):
        ControlSpline(10, 11)
    with pytest.raises(ValueError, match="interpolation"):
        ControlSpline(10, 3, "cubic")


# ---------------------------------------------------------------- batched rollouts
def test_batched_rollout_matches_sequential(problem):
    """One batched call per knot gives each sample the states and cost of the problem's own
    sequential rollout; a diverged sample costs +inf and leaves the others untouched."""
    rng = np.random.default_rng(1)
    us = problem.clip_controls(problem.default_controls() + 5 * rng.normal(size=(4, problem.horizon, problem.nu)))
    xs = rollout_batch(problem, us, np.empty((4, problem.horizon + 1, problem.nx)))
    J = rollout_costs(problem, xs, us)
    for k in range(4):
        ref = problem.rollout(us[k])
        np.testing.assert_allclose(xs[k], ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(J[k], problem.cost(ref, us[k]), rtol=1e-12)
    bad = us.copy()
    bad[2, 3] = 1e300
    xs2 = rollout_batch(problem, bad, np.empty_like(xs))
    J2 = rollout_costs(problem, xs2, bad)
    assert np.isinf(J2[2]) and np.isnan(xs2[2, -1]).all()
    np.testing.assert_allclose(J2[[0, 1, 3]], J[[0, 1, 3]], rtol=1e-12)


def test_feedback_rollout_and_gains(problem):
    """With the gravity-damping feedback, each knot applies offset + B⁻¹(g(q) − D v) (clipped) at
    the rollout's own state, checked against a sequential loop on the numpy reference; the gains
    are its derivatives (central differences of the feedback)."""
    fb = GravityDampingFeedback(problem, 0.1)
    m, nq, ref = problem.model, problem.model.nq, dynamics.get_backend("numpy")
    assert np.all(fb.D > 0)
    np.testing.assert_allclose(fb.D, 0.1 * np.diag(ref.crba(m, problem.x0[:nq])) / problem.dt)
    rng = np.random.default_rng(2)
    offsets = rng.normal(size=(3, problem.horizon, problem.nu))
    us = offsets.copy()
    xs = rollout_batch(problem, us, np.empty((3, problem.horizon + 1, problem.nx)), fb)
    for k in range(3):
        x = problem.x0.copy()
        for t in range(problem.horizon):
            u = problem.clip_controls(offsets[k, t] + np.linalg.solve(m.actuation_matrix,
                                                                     ref.gravity_torques(m, x[:nq]) - fb.D * x[nq:]))
            np.testing.assert_allclose(us[k, t], u, rtol=1e-12, atol=1e-12)
            x = problem.step(x, u)
            np.testing.assert_allclose(xs[k, t + 1], x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fb.offsets(xs[0], us[0]), offsets[0], atol=1e-9)  # no clipping here
    G, h = fb.gains(xs[0]), 1e-6
    for i in range(problem.nx):
        e = np.zeros(problem.nx)
        e[i] = h
        xp, xm = xs[0, :-1] + e, xs[0, :-1] - e
        fd = (fb(xp[:, :nq], xp[:, nq:]) - fb(xm[:, :nq], xm[:, nq:])) / (2 * h)
        np.testing.assert_allclose(G[:, :, i], fd, rtol=1e-6, atol=1e-6)


def test_feedback_policy_planner(problem):
    """The planner with the feedback: the returned controls are what was applied, its gains the
    feedback's, and it lowers the cost."""
    planner = PredictiveSampling(problem, samples=16, noise=0.02, knots=3, seed=3, policy="gravity_damping")
    res = planner.solve(max_iter=8)
    assert res.cost < 0.5 * res.cost_history[0]
    np.testing.assert_allclose(res.xs, problem.rollout(res.us), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.K, planner.feedback.gains(res.xs), rtol=1e-12)
    warm = planner.solve(xs_init=res.xs, us_init=res.us, max_iter=1)
    assert warm.cost_history[0] == pytest.approx(res.cost, rel=1e-6)
    hyq = tasks.get_task("hyq-stand", cones="penalty")
    p = hyq.build_problem(hyq.initial_state(), 4, 0.02, backend="numpy")
    with pytest.raises(ValueError, match="fixed-base"):
        PredictiveSampling(p, policy="gravity_damping")
    with pytest.raises(ValueError, match="damping"):
        PredictiveSampling(problem, policy="gravity_damping", damping=3.0)
    with pytest.raises(ValueError, match="policy"):
        PredictiveSampling(problem, policy="servo")


# ---------------------------------------------------------------- planners
@pytest.mark.parametrize("cls", PLANNERS)
def test_planner_reduces_cost(problem, cls):
    planner = cls(problem, samples=16, noise=0.02, knots=3, seed=3, policy="open_loop")
    res = planner.solve(max_iter=8)
    assert res.iterations == 8 and res.solver == planner.name
    assert res.cost < 0.5 * res.cost_history[0]
    assert res.xs.shape == (problem.horizon + 1, problem.nx) and res.us.shape == (problem.horizon, problem.nu)
    np.testing.assert_allclose(res.cost, problem.cost(res.xs, res.us), rtol=1e-12)
    np.testing.assert_allclose(res.xs, problem.rollout(res.us), rtol=1e-12, atol=1e-12)
    assert np.all(res.us >= problem.u_lower) and np.all(res.us <= problem.u_upper)
    assert not res.K.any() and res.timings["forward"] > 0 and res.timings["total"] > 0
    if cls is PredictiveSampling:   # the nominal is a sample: its cost never increases
        assert np.all(np.diff(res.cost_history) <= 0)


@pytest.mark.parametrize("cls", PLANNERS)
def test_planner_reproducible_from_seed(problem, cls):
    a = cls(problem, samples=8, noise=0.02, knots=3, seed=11)
    b = cls(problem, samples=8, noise=0.02, knots=3, seed=11)
    b.warmup()                              # warming up does not move the generator
    ra, rb = a.solve(max_iter=3), b.solve(max_iter=3)
    np.testing.assert_array_equal(ra.us, rb.us)
    assert ra.cost_history == rb.cost_history
    rc = cls(problem, samples=8, noise=0.02, knots=3, seed=12).solve(max_iter=3)
    assert not np.array_equal(ra.us, rc.us)
    # a warm start starts from the given controls (here a spline's own, fitted exactly)
    rw = a.solve(us_init=ra.us, max_iter=1)
    assert rw.cost_history[0] == pytest.approx(ra.cost, rel=1e-9)


def test_predictive_sampling_reaches_target_in_its_plan():
    """iiwa-reach's problem (its own costs), 20 knots of 20 ms: after 30 iterations of 32 samples
    the planned end-effector ends within 2.5 cm of the target (from 32 cm)."""
    task = tasks.get_task("iiwa-reach")
    p = task.build_problem(task.initial_state(), 20, 0.02, backend="numpy")
    task.update_problem(p, 0.0)
    res = PredictiveSampling(p, samples=32, noise=0.05, knots=4, seed=0).solve(max_iter=30)
    ee = p.backend.frame_placement(p.model, res.xs[:, :p.model.nq], task.frame)[1]
    d = np.linalg.norm(ee - task.targets[0], axis=1)
    assert d[0] > 0.3 and d[-1] < 0.025, f"end-effector distance start {d[0]:.3f} m, end {d[-1]:.3f} m"


def test_registered_and_driven_by_mpc():
    assert SOLVERS["sampling"] is PredictiveSampling and SOLVERS["mppi"] is MPPI and SOLVERS["cem"] is CEM
    task = tasks.get_task("iiwa-reach")
    ctrl = MPC(task, solver="mppi", backend="numpy", horizon=8, dt=0.02, initial_iterations=2,
               solver_options={"samples": 8, "noise": 0.05, "seed": 1})
    assert ctrl.solver.samples == 8
    x = task.initial_state()
    plan = ctrl.start(0.0, x)
    assert ctrl.initial_record.iterations == 2 and not ctrl.initial_record.fallback
    plan = ctrl.update(0.02, plan.xs[1])
    assert ctrl.records[-1].iterations == 1 and np.isfinite(plan.us).all()
    with pytest.raises(TypeError, match="samples"):
        MPC(task, solver="ilqr", backend="numpy", horizon=8, dt=0.02, solver_options={"samples": 8})


def test_bad_input(problem):
    with pytest.raises(TypeError, match="ShootingProblem"):
        PredictiveSampling("not a problem")
    for kw, match in (({"samples": 1}, "samples"), ({"samples": 2.5}, "samples"), ({"noise": 0.0}, "noise"),
                      ({"noise": float("nan")}, "noise"), ({"knots": 0}, "knots"),
                      ({"interpolation": "cubic"}, "interpolation")):
        with pytest.raises(ValueError, match=match):
            PredictiveSampling(problem, **kw)
    with pytest.raises(ValueError, match="temperature"):
        MPPI(problem, temperature=0.0)
    with pytest.raises(ValueError, match="elites"):
        CEM(problem, samples=8, elites=9)
    planner = PredictiveSampling(problem, samples=4)
    with pytest.raises(ValueError, match="us_init"):
        planner.solve(us_init=np.zeros((3, problem.nu)))
    with pytest.raises(ValueError, match="us_init"):
        planner.solve(us_init=np.full((problem.horizon, problem.nu), np.nan))
    with pytest.raises(ValueError, match="max_iter"):
        planner.solve(max_iter=-1)
    with pytest.raises(ValueError, match="tol"):
        planner.solve(tol=-1.0)


def test_sampled_warm_start_hybrid(problem):
    """iLQR from the best sample: never worse than iLQR from the warm start's own rollout when that
    start is already optimal (the sample is then rejected), gains from the gradient solver."""
    from solvers import ILQR
    from solvers.sampling import SampledWarmStart
    best = ILQR(problem).solve(max_iter=30)
    hybrid = SampledWarmStart(problem, samples=8, noise=0.02, knots=3, seed=0)
    res = hybrid.solve(xs_init=best.xs, us_init=best.us, max_iter=1)
    assert res.solver == "sampling+ilqr" and res.K.shape == (problem.horizon, problem.nu, problem.ndx)
    assert res.cost <= best.cost * (1 + 1e-9)
    # from the default start: iLQR runs from the sampler's best trajectory (same seed, same samples)
    cold = SampledWarmStart(problem, samples=8, noise=0.02, knots=3, seed=1).solve(max_iter=1)
    sampled = PredictiveSampling(problem, samples=8, noise=0.02, knots=3, seed=1).solve(max_iter=1)
    assert sampled.cost < sampled.cost_history[0]
    ref = ILQR(problem).solve(xs_init=sampled.xs, us_init=sampled.us, max_iter=1)
    np.testing.assert_allclose(cold.us, ref.us, rtol=1e-12, atol=1e-12)
    assert cold.timings["forward"] > 0
    with pytest.raises(ValueError, match="gradient solver"):
        SampledWarmStart(problem, solver="ddp")


# ---------------------------------------------------------------- PD set-point policy
def test_pd_setpoint_rollout_gains_and_hold(problem):
    """policy 'pd': each knot applies ``b(q) + Kp (θ − q) − Kd v`` (clipped), b the gravity
    compensation linearised at x0 (the numpy reference's RNEA and its derivative), checked against
    a sequential loop; the gains make every joint a critically damped oscillator at x0 (against
    Pinocchio's mass matrix); offsets invert the law; θ = q0 holds x0 still."""
    import mujoco
    import pinocchio as pin

    from tests.helpers.pinocchio_models import oracle_from_mjcf
    fb = PDSetpoints(problem, stiffness=0.2, damping_ratio=1.0)
    m, nq, ref = problem.model, problem.model.nq, dynamics.get_backend("numpy")
    q0 = problem.x0[:nq]
    omega = 0.2 / problem.dt
    orc = oracle_from_mjcf(m.path, mujoco.MjModel.from_xml_path(m.path))
    M = pin.crba(orc.model, orc.data(), orc.q_to_pin(q0))
    M = orc.mat_from_pin(np.triu(M) + np.triu(M, 1).T)
    np.testing.assert_allclose(np.linalg.solve(M, fb.Kp), omega ** 2 * np.eye(m.nv), atol=1e-8 * omega ** 2)
    np.testing.assert_allclose(np.linalg.solve(M, fb.Kd), 2 * omega * np.eye(m.nv), atol=1e-8 * omega)
    g0 = ref.gravity_torques(m, q0)
    dg = ref.rnea_derivatives(m, q0, np.zeros(m.nv), np.zeros(m.nv))[0]
    rng = np.random.default_rng(4)
    theta = q0 + 0.1 * rng.normal(size=(3, problem.horizon, problem.nu))
    us = theta.copy()
    xs = rollout_batch(problem, us, np.empty((3, problem.horizon + 1, problem.nx)), fb)
    for k in range(3):
        x = problem.x0.copy()
        for t in range(problem.horizon):
            q, v = x[:nq], x[nq:]
            u = problem.clip_controls(g0 + dg @ (q - q0) + fb.Kp @ (theta[k, t] - q) - fb.Kd @ v)
            np.testing.assert_allclose(us[k, t], u, rtol=1e-10, atol=1e-9)
            x = problem.step(x, u)
            np.testing.assert_allclose(xs[k, t + 1], x, rtol=1e-10, atol=1e-10)
    unclipped = (np.abs(us[0]) < problem.u_upper - 1e-9).all(axis=1)
    np.testing.assert_allclose(fb.offsets(xs[0], us[0])[unclipped], theta[0][unclipped], atol=1e-9)
    G, h = fb.gains(xs[0]), 1e-6
    s0 = theta[0]
    for i in range(problem.nx):
        e = np.zeros(problem.nx)
        e[i] = h
        xp, xm = xs[0, :-1] + e, xs[0, :-1] - e
        fd = (fb.controls(s0, xp[:, :nq], xp[:, nq:]) - fb.controls(s0, xm[:, :nq], xm[:, nq:])) / (2 * h)
        np.testing.assert_allclose(G[:, :, i], fd, rtol=1e-6, atol=1e-5)
    hold = np.tile(fb.default(), (1, problem.horizon, 1))
    xh = rollout_batch(problem, hold, np.empty((1, problem.horizon + 1, problem.nx)), fb)
    assert np.abs(xh[0] - problem.x0).max() < 1e-9
    with pytest.raises(ValueError, match="pd_stiffness"):
        PredictiveSampling(problem, pd_stiffness=0.0)


def test_pd_default_policy_and_shifted_warm_start(problem):
    """'auto' picks the PD set-points on an arm whose actuators drive their own joints; a warm
    start whose states are the last plan's sampled later gives the last set-points shifted by as
    much (not the inverse of possibly clipped controls); another warm start is not taken for it."""
    planner = MPPI(problem, samples=16, noise=0.02, knots=4, seed=0)
    assert planner.policy == "pd"
    res = planner.solve(max_iter=3)
    xl, sl = planner._last
    np.testing.assert_array_equal(xl, res.xs)
    xs_shift = np.concatenate([res.xs[:1], res.xs[2:], res.xs[-1:]])     # one knot later, held at the end
    np.testing.assert_allclose(planner._shifted_last(xs_shift), np.concatenate([sl[1:], sl[-1:]]), atol=1e-12)
    half = 0.5 * (res.xs[1:] + np.concatenate([res.xs[2:], res.xs[-1:]]))   # half a knot later
    xs_half = np.concatenate([res.xs[:1], half])
    np.testing.assert_allclose(planner._shifted_last(xs_half)[:-1], 0.5 * (sl[:-1] + sl[1:])[:len(sl) - 1],
                               atol=1e-9)
    other = res.xs.copy()
    other[1:, 0] += 0.1
    assert planner._shifted_last(other) is None
    warm = planner.solve(xs_init=res.xs, us_init=res.us, max_iter=1)
    assert warm.cost_history[0] == pytest.approx(res.cost, rel=1e-9)


@pytest.mark.parametrize("solver, noise, median, worst", [("sampling", 0.01, 0.02, 0.04), ("mppi", 0.02, 0.02, 0.02)])
def test_pd_planner_reaches_and_holds_in_mujoco(solver, noise, median, worst):
    """Closed loop in MuJoCo (numba backend, K = 64 samples, 15 knots of 20 ms, an update every
    10 ms): the end effector, placed by MuJoCo's own kinematics, comes from 32 cm to iiwa-reach's
    first target and stays there over the last 0.4 s of 1 s — MPPI within 2 cm throughout,
    predictive sampling (which jitters: it adopts any cheaper sample) within 2 cm in median and
    4 cm at worst."""
    from sim.runner import simulate
    task = tasks.get_task("iiwa-reach")
    ctrl = MPC(task, solver=solver, backend="numba", horizon=15, dt=0.02, initial_iterations=20, tol=0.0,
               solver_options={"samples": 64, "noise": noise, "seed": 0})
    assert ctrl.solver.policy == "pd"
    ctrl.warmup()
    res = simulate(task.model, ctrl, task.initial_state(), 1.0, update_every=10)
    assert res.completed, res.aborted
    d = np.linalg.norm(task.mujoco_frame_positions(res.x[:, :task.model.nq]) - task.targets[0], axis=1)
    late = d[res.t >= 0.6]
    assert d[0] > 0.3, d[0]
    assert np.median(late) < median and late.max() < worst, \
        f"distance over [0.6, 1] s: median {np.median(late):.3f} m, max {late.max():.3f} m"


@pytest.mark.parametrize("planner", [PredictiveSampling, MPPI, CEM])
def test_a_planner_refuses_hard_constraints(planner):
    """A problem with hard constraints (hyq-stand's default friction cones) is refused by name, not
    sampled with the constraints silently dropped."""
    hyq = tasks.get_task("hyq-stand")
    p = hyq.build_problem(hyq.initial_state(), 4, 0.02, backend="numpy")
    with pytest.raises(ValueError, match="does not handle hard constraints.*CSQP"):
        planner(p, samples=4)
