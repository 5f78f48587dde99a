"""The controller's plan from a solver's result (``Plan.of_solver``, ``checked_bounds``): the same
plan and the same errors as the checking constructor, and bounds that follow the problem's when it
replaces them (the controller and the solver key what they derive from the bounds on identity)."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from mpc import MPC
from mpc.plan import Plan, checked_bounds


def _arrays(m, rng, N=4):
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    return xs, rng.normal(size=(N, m.nu)), rng.normal(size=(N, m.nu, 2 * m.nv))


def test_of_solver_equals_the_constructor(bundled, rng):
    m = bundled["iiwa"]
    xs, us, K = _arrays(m, rng)
    lo, hi = -np.ones(m.nu), np.ones(m.nu)
    ref = Plan(m, 0.5, 0.01, xs, us, K, info={"a": 1}, u_lower=lo, u_upper=hi)
    fast = Plan.of_solver(m, 0.5, 0.01, xs, us, K, {"a": 1}, checked_bounds(m, lo, hi))
    for f in ("model", "t0", "dt", "info", "saturate"):
        assert getattr(fast, f) == getattr(ref, f), f
    for f in ("xs", "us", "K", "u_lower", "u_upper"):
        np.testing.assert_array_equal(getattr(fast, f), getattr(ref, f))
    assert not fast.u_lower.flags.writeable and not fast.u_upper.flags.writeable
    x = xs[1] + 0.1
    for t in (0.5, 0.513, 0.6):
        np.testing.assert_array_equal(fast.control(t, x), ref.control(t, x))
    assert Plan.of_solver(m, 0.5, 0.01, xs, us, None, {}, checked_bounds(m, None, None)).K is None


def test_of_solver_and_checked_bounds_errors(bundled, rng):
    m = bundled["iiwa"]
    xs, us, K = _arrays(m, rng)
    b = checked_bounds(m, None, None)
    np.testing.assert_array_equal(b[0], m.u_lower)
    for name, arrays in (("xs", (np.where(np.arange(xs.size).reshape(xs.shape) == 3, np.nan, xs), us, K)),
                         ("us", (xs, np.full_like(us, np.inf), K)), ("K", (xs, us, np.full_like(K, np.nan)))):
        msg = f"Plan: {name} contains non-finite values; the solver diverged"
        with pytest.raises(ValueError, match=msg):
            Plan.of_solver(m, 0.0, 0.01, *arrays, {}, b)
        with pytest.raises(ValueError, match=msg):
            Plan(m, 0.0, 0.01, *arrays)
    with pytest.raises(ValueError, match="u_lower must be \\(nu,\\)"):
        checked_bounds(m, np.zeros(3), None)
    with pytest.raises(ValueError, match="u_upper must be \\(nu,\\) .* without NaN"):
        checked_bounds(m, None, np.full(m.nu, np.nan))
    with pytest.raises(ValueError, match="u_lower must be <= u_upper"):
        checked_bounds(m, np.ones(m.nu), np.zeros(m.nu))


@pytest.mark.parametrize("solver", ["ilqr", "ddp"])
def test_replaced_problem_bounds_reach_the_solver_and_the_plan(solver):
    task = tasks.get_task("iiwa-reach")
    ctrl = MPC(task, solver=solver, backend="numba", horizon=8, dt=0.01, initial_iterations=5)
    p = ctrl.problem
    plan = ctrl.start(0.0, task.initial_state())
    for i in range(1, 3):
        plan = ctrl.update(0.01 * i, plan.xs[1])
    np.testing.assert_array_equal(plan.u_lower, p.u_lower)
    assert not p.u_lower.flags.writeable          # replaced, never changed in place
    tight = 0.5 * np.abs(plan.us).max(axis=0) + 1e-3
    p.u_lower, p.u_upper = p._bound("u_lower", -tight), p._bound("u_upper", tight)
    for i in range(3, 6):
        plan = ctrl.update(0.01 * i, plan.xs[1])
    np.testing.assert_array_equal(plan.u_lower, -tight)
    np.testing.assert_array_equal(plan.u_upper, tight)
    assert np.all(plan.us <= tight + 1e-12) and np.all(plan.us >= -tight - 1e-12)


@pytest.mark.parametrize("t_start, horizon", [(2.0, 4), (2.02, 4), (2.04, 6), (2.1, 3), (2.03, 1)])
def test_whole_knot_resample_into_buffers_is_the_shifted_plan(bundled, rng, t_start, horizon):
    """The warm start by whole knots written into the controller's buffers: knot j is the plan's
    knot min(n + j, N) (controls min(n + j, N - 1)), whether the shift stays inside the plan,
    reaches past its end or lies wholly beyond it; written from the plan's own rows."""
    m = bundled["iiwa"]
    xs, us, K = _arrays(m, rng)
    p = Plan(m, 2.0, 0.01, xs, us, K)
    n = int(round((t_start - 2.0) / 0.01))
    out = (np.full((horizon + 1, xs.shape[1]), np.nan), np.full((horizon, m.nu), np.nan))
    got = p.resample(t_start, horizon=horizon, dt=0.01, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    N = us.shape[0]
    np.testing.assert_array_equal(out[0], xs[[min(n + j, N) for j in range(horizon + 1)]])
    np.testing.assert_array_equal(out[1], us[[min(n + j, N - 1) for j in range(horizon)]])


def test_of_solver_checks_only_the_gains_when_the_solver_checked_the_states(bundled, rng):
    """states_finite (a solver's ``SolverResult.finite``): xs and us are not checked again, K still is;
    an iLQR result says it checked them."""
    m = bundled["iiwa"]
    xs, us, K = _arrays(m, rng)
    b = checked_bounds(m, None, None)
    bad = K.copy()
    bad[1, 0, 0] = np.nan
    with pytest.raises(ValueError, match="K contains non-finite"):
        Plan.of_solver(m, 0.0, 0.01, xs, us, bad, {}, b, states_finite=True)
    plan = Plan.of_solver(m, 0.0, 0.01, xs, us, K, {}, b, states_finite=True)
    np.testing.assert_array_equal(plan.K, K)
    ctrl = MPC(tasks.get_task("iiwa-reach"), solver="ilqr", backend="numpy", horizon=4, dt=0.01)
    res = ctrl.solver.solve(max_iter=1)
    assert res.finite is True


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_sample_through_the_state_space_equals_the_knot_by_knot_reference(bundled, rng, backend):
    """``Plan.sample`` with a state space (compiled Lie-group math where the backend has it) gives
    the states :meth:`Plan.reference_state` gives one time at a time (to round-off; the velocities
    and the knots met exactly, bitwise) and the same held controls; a state space of another robot
    is refused."""
    if backend == "numba":
        pytest.importorskip("numba")
    from dynamics import get_backend
    from solvers.state_space import StateSpace

    m = bundled["hyq"]
    be = get_backend(backend)
    state = StateSpace(m, compiled=be.compiled_kinematics(m))
    N, dt, t0 = 6, 0.02, 0.3
    xs, us, K = _arrays(m, rng, N)
    plan = Plan(m, t0, dt, xs, us, K)
    ts = t0 + np.array([-0.01, 0.0, 0.005, 0.02, 0.02, 0.0333, 3 * dt, 0.1 + 1e-13, 0.119, 0.12, 0.2])
    got_x, got_u = plan.sample(ts, state)
    ref_x, ref_u = plan.sample(ts)
    np.testing.assert_array_equal(got_u, ref_u)
    np.testing.assert_array_equal(got_x[:, m.nq:], ref_x[:, m.nq:])
    np.testing.assert_allclose(got_x, ref_x, rtol=0, atol=1e-12)
    for t, x in zip(ts, got_x):
        np.testing.assert_allclose(x, plan.reference_state(t), rtol=0, atol=1e-12)
    on_knot = np.isin(ts, t0 + dt * np.arange(N + 1)) | (ts <= t0) | (ts >= t0 + N * dt)
    np.testing.assert_array_equal(got_x[on_knot], ref_x[on_knot])
    with pytest.raises(ValueError, match="state space"):
        plan.sample(ts, StateSpace(bundled["atlas"]))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_control_through_the_state_space_equals_the_model_path(bundled, rng, backend):
    """``Plan.control`` of one measured state with the plan's state space (compiled Lie-group math
    where the backend has it) gives the law of the model's numpy Lie algebra (the plan without
    one) to round-off, on and between knots, before and after the horizon, saturated or not, with
    and without feedback; batches and other inputs take the general path; a state space of another
    robot is refused."""
    if backend == "numba":
        pytest.importorskip("numba")
    from dynamics import get_backend
    from solvers.state_space import StateSpace

    m = bundled["hyq"]
    state = StateSpace(m, compiled=get_backend(backend).compiled_kinematics(m))
    N, dt, t0 = 6, 0.02, 0.3
    xs, us, K = _arrays(m, rng, N)
    ref = Plan(m, t0, dt, xs, us, 0.1 * K)
    fast = Plan(m, t0, dt, xs, us, 0.1 * K, state=state)
    solved = Plan.of_solver(m, t0, dt, xs, us, 0.1 * K, {}, checked_bounds(m, None, None), state=state)
    assert fast.state is state and solved.state is state and ref.state is None
    for t in t0 + np.array([-0.01, 0.0, 0.005, 0.02, 0.0333, 0.1 + 1e-13, 0.119, 0.12, 0.2]):
        x = np.concatenate([m.random_configuration(rng), rng.normal(size=m.nv)])
        for kw in ({}, {"clip": False}, {"feedback": False}):
            want = ref.control(t, x, **kw)
            tol = 1e-12 * max(1.0, np.abs(want).max())
            np.testing.assert_allclose(fast.control(t, x, **kw), want, rtol=0, atol=tol)
            np.testing.assert_array_equal(solved.control(t, x, **kw), fast.control(t, x, **kw))
    xb = np.concatenate([m.random_configuration(rng, 2), rng.normal(size=(2, m.nv))], axis=1)
    np.testing.assert_array_equal(fast.control(t0 + 0.01, xb), ref.control(t0 + 0.01, xb))
    with pytest.raises(ValueError, match="state space"):
        Plan(m, t0, dt, xs, us, K, state=StateSpace(bundled["atlas"]))


def test_controller_plans_carry_the_problem_state_space_on_a_floating_base():
    """The controller hands its problem's state space to the plans of a floating-base task (the
    policy's Lie-group math compiled with the numba backend), none to a hinge/slide robot's."""
    legged = MPC(tasks.get_task("hyq-stand", cones="penalty"), solver="fddp", backend="numpy", horizon=4, dt=0.02,
                 initial_iterations=2)
    x = legged.task.initial_state()
    assert legged.start(0.0, x).state is legged.problem.state
    assert legged.update(0.02, x).state is legged.problem.state
    arm = MPC(tasks.get_task("iiwa-reach"), solver="ilqr", backend="numpy", horizon=4, dt=0.01, initial_iterations=2)
    assert arm.start(0.0, arm.task.initial_state()).state is None


def test_warm_start_on_impulse_knots_takes_the_plans_knots(rng):
    """A trot horizon with touchdown impulse knots (dt = 0): the warm start of an update a whole
    number of knots after the plan's start takes the plan's knot states and controls (the knot
    times evaluated one by one: the plan at those times, to round-off), past the plan's end its last
    knot; an update between knots evaluates the plan at the knot times (Plan.sample)."""
    N, dt = 12, 0.02
    task = tasks.get_task("hyq-trot", cones="penalty")
    ctrl = MPC(task, solver="fddp", backend="numpy", horizon=N, dt=dt)
    m, p = task.model, ctrl.problem
    xs, us, K = _arrays(m, rng, N)
    seen = 0
    for t0, n in ((0.5, 0), (0.5, 3), (0.62, 5), (0.7, 11), (0.7, 13)):
        ctrl.plan = Plan(m, t0, dt, xs, us, K)
        t = t0 + n * dt
        task.update_problem(p, t)
        if (p.dts > 0).all():
            continue
        seen += 1
        got_x, got_u = ctrl._warm_start_on_knots(t)
        ts = t + np.concatenate([[0.0], np.cumsum(p.dts)])
        for k, tk in enumerate(ts):
            np.testing.assert_allclose(got_x[k], ctrl.plan.reference_state(tk), rtol=0, atol=1e-12)
        np.testing.assert_array_equal(got_u, [ctrl.plan.feedforward(tk) for tk in ts[:-1]])
        j = n + np.concatenate([[0], np.cumsum(p.dts > 0)])     # the plan knot of each problem knot
        np.testing.assert_array_equal(got_x, xs[np.minimum(j, N)])
        # between knots: the plan evaluated at the knot times
        got_x, got_u = ctrl._warm_start_on_knots(t + 0.3 * dt)
        want_x, want_u = ctrl.plan.sample(ts + 0.3 * dt, p.state)
        np.testing.assert_array_equal(got_x, want_x)
        np.testing.assert_array_equal(got_u, want_u)
    assert seen >= 3
