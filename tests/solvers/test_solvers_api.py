"""The solver API contract (ShootingProblem, SolverResult, warm start) and failure reporting:
errors raised early with clear messages, non-finite values and regularisation blow-ups reported
in ``result.reason`` rather than returned silently."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dynamics
import tasks
from solvers import DDP, FDDP, ILQR, ShootingProblem, SolverResult
from solvers.costs import ControlCost, CostSum, StateCost, gravity_compensation

N, DT = 10, 0.03


@pytest.fixture(scope="module")
def task():
    return tasks.get_task("iiwa-reach")


@pytest.fixture
def problem(task):
    return task.build_problem(task.initial_state(), N, DT)


def test_problem_attributes(problem, task):
    m = task.model
    assert (problem.nx, problem.ndx, problem.nu, problem.horizon, problem.dt) == (14, 14, 7, N, DT)
    assert problem.model is m
    assert np.array_equal(problem.u_lower, m.u_lower) and np.array_equal(problem.u_upper, m.u_upper)
    x1 = task.initial_state() + 0.01
    problem.set_initial_state(x1)
    assert np.array_equal(problem.x0, x1)
    xs, us = problem.initial_guess()
    assert np.allclose(us, gravity_compensation(m, problem.backend, x1[:7])) and np.allclose(xs[0], x1)


def test_common_dt_follows_the_knots(problem):
    """problem.dt is the knots' shared dt after a re-phasing too, and raises once they differ."""
    models = list(problem.running_models)
    problem.set_running_models([dataclasses.replace(am, dt=0.02) for am in models])
    assert problem.dt == 0.02 and np.all(problem.dts == 0.02)
    problem.set_running_models([models[0]] * (N - 1) + [dataclasses.replace(models[0], dt=0.05)])
    with pytest.raises(ValueError, match="per-knot time steps"):
        _ = problem.dt
    problem.set_running_models(models)
    assert problem.dt == DT


@pytest.mark.parametrize("Solver", [ILQR, FDDP])
def test_bounds_are_read_at_every_solve(problem, Solver):
    """Control bounds set or lifted between two solves of the same solver hold in the next one (the
    solver reads them once per solve, not once per construction)."""
    problem.u_lower, problem.u_upper = np.full(7, -np.inf), np.full(7, np.inf)
    solver = Solver(problem, box=True)
    free = solver.solve(max_iter=5)
    limit = 0.5 * np.abs(free.us).max(axis=0)
    problem.u_lower, problem.u_upper = -limit, limit
    r = solver.solve(max_iter=5)
    assert np.isfinite(r.cost) and np.all(np.abs(r.us) <= limit + 1e-12)
    assert np.any(np.isclose(np.abs(r.us), limit)) and np.any(np.abs(r.K) > 0)
    problem.u_lower, problem.u_upper = np.full(7, -np.inf), np.full(7, np.inf)
    r = solver.solve(max_iter=5)
    assert np.any(np.abs(r.us) > limit)


@pytest.mark.parametrize("Solver", [ILQR, DDP, FDDP])
def test_result_contract(problem, Solver):
    r = Solver(problem, box=True).solve(max_iter=3, tol=1e-6)
    assert isinstance(r, SolverResult)
    assert r.xs.shape == (N + 1, 14) and r.us.shape == (N, 7)
    assert r.K.shape == (N, 7, 14) and r.k.shape == (N, 7)
    assert isinstance(r.cost, float) and r.cost == pytest.approx(problem.cost(r.xs, r.us))
    assert r.cost_history[0] >= r.cost_history[-1] == pytest.approx(r.cost)
    assert r.iterations == 3 and not r.converged and "maximum number of iterations" in r.reason
    assert set(r.timings) == {"derivatives", "backward", "forward", "cost", "total"}
    assert all(v >= 0 for v in r.timings.values())
    assert r.timings["total"] >= r.timings["derivatives"] + r.timings["backward"] + r.timings["forward"]


def test_gains_are_the_local_policy():
    """K is the derivative of the optimal control with respect to the initial state: re-solving from
    a slightly perturbed x0 moves u_0 by about K_0 δx."""
    task = tasks.get_task("iiwa-reach", exact_hessian=True)
    problem = task.build_problem(task.initial_state(), N, DT)
    r = DDP(problem).solve(max_iter=100, tol=1e-9)
    assert r.converged
    dx = np.zeros(14)
    dx[[1, 8]] = 1e-4
    x1 = problem.x0 + dx
    problem.set_initial_state(x1)
    r1 = DDP(problem).solve(us_init=r.us, max_iter=100, tol=1e-9)
    assert np.allclose(r1.us[0] - r.us[0], r.K[0] @ dx, rtol=2e-2, atol=1e-6)


def test_shifted_warm_start(problem):
    r = ILQR(problem).solve(max_iter=50, tol=1e-7)
    xs, us = r.shifted(2)
    assert np.array_equal(xs[:-2], r.xs[2:]) and np.array_equal(xs[-2:], np.repeat(r.xs[-1:], 2, 0))
    assert np.array_equal(us[:-2], r.us[2:]) and np.array_equal(us[-2:], np.repeat(r.us[-1:], 2, 0))
    assert np.array_equal(r.shifted(0)[1], r.us)
    # receding horizon: move x0 to the predicted next state and warm start from the shifted plan
    xs, us = r.shifted(1)
    problem.set_initial_state(r.xs[1])
    for Solver in (ILQR, DDP, FDDP):
        w = Solver(problem).solve(xs_init=xs, us_init=us, max_iter=20, tol=1e-6)
        cold = Solver(problem).solve(max_iter=50, tol=1e-6)
        assert w.converged and cold.converged
        assert w.iterations < cold.iterations
        assert w.cost == pytest.approx(cold.cost, rel=1e-6)


def test_max_iter_zero_returns_gains_at_the_guess(problem):
    r = ILQR(problem).solve(max_iter=0)
    assert r.iterations == 0 and np.any(r.K != 0)
    xs, us = problem.initial_guess()
    assert np.allclose(r.us, us) and np.allclose(r.xs, xs)


class _NaNGradient:
    """A user cost with a finite value but a NaN gradient for large joint-1 angles."""

    def value(self, x, u):
        return 0.5 * np.sum((x[:, :7] - 1.0) ** 2, axis=-1)

    def gradient(self, x, u):
        lx = np.zeros((x.shape[0], 14))
        lx[:, :7] = x[:, :7] - 1.0
        lx[x[:, 0] > 0.05] = np.nan
        return lx, np.zeros((x.shape[0], 7))

    def hessian(self, x, u):
        B = x.shape[0]
        lxx = np.zeros((B, 14, 14))
        lxx[:, np.arange(7), np.arange(7)] = 1.0
        return lxx, np.zeros((B, 14, 7)), np.zeros((B, 7, 7))


class _NaNValue(_NaNGradient):
    def value(self, x, u):
        return np.where(x[:, 0] > 0.05, np.nan, super().value(x, u))


def test_non_finite_values_are_reported(task):
    m = task.model
    x0 = task.initial_state()
    reg = (ControlCost(m, task.u_gravity), 1e-3)
    # a NaN derivative on the current trajectory stops the solve with a diagnostic
    p = ShootingProblem.uniform(m, x0, N, DT, CostSum({"bad": _NaNGradient(), "u": reg}))
    r = ILQR(p).solve(max_iter=20)
    assert not r.converged and "non-finite" in r.reason and "knot" in r.reason
    assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us)) and np.isfinite(r.cost)
    # NaN costs of trial steps are rejected by the line search: the iterate stays finite
    p = ShootingProblem.uniform(m, x0, N, DT, CostSum({"bad": _NaNValue(), "u": reg}))
    r = ILQR(p).solve(max_iter=10)
    assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us)) and np.isfinite(r.cost)
    assert np.all(np.isfinite(r.cost_history))
    # a non-finite cost at the initial guess is reported at once
    x_bad = x0.copy()
    x_bad[0] = 0.1
    p.set_initial_state(x_bad)
    r = ILQR(p).solve(max_iter=5)
    assert not r.converged and "non-finite" in r.reason and r.iterations == 0


class _Concave:
    """-½ u² with its exact (negative definite) Hessian: Q_uu is never positive definite."""

    def value(self, x, u):
        return -0.5 * np.sum(u * u, axis=-1)

    def gradient(self, x, u):
        return np.zeros((x.shape[0], 14)), -u

    def hessian(self, x, u):
        B = x.shape[0]
        return np.zeros((B, 14, 14)), np.zeros((B, 14, 7)), -np.broadcast_to(np.eye(7), (B, 7, 7)) * 1e6


def test_regularization_blow_up_is_reported(task):
    m = task.model
    p = ShootingProblem.uniform(m, task.initial_state(), N, DT, _Concave())
    r = ILQR(p, box=False, reg_max=1e4).solve(max_iter=20)
    assert not r.converged and "regularization blow-up" in r.reason
    assert np.all(np.isfinite(r.us))


def test_input_validation(task):
    m = task.model
    x0 = task.initial_state()
    cost = StateCost(m, x0)
    with pytest.raises(ValueError, match="14"):
        ShootingProblem.uniform(m, x0[:7], N, DT, cost)
    with pytest.raises(ValueError, match="non-finite"):
        ShootingProblem.uniform(m, np.full(14, np.nan), N, DT, cost)
    with pytest.raises(ValueError, match="horizon"):
        ShootingProblem.uniform(m, x0, 0, DT, cost)
    with pytest.raises(ValueError, match="dt"):
        ShootingProblem.uniform(m, x0, N, 0.0, cost)
    with pytest.raises(ValueError, match="u_lower"):
        ShootingProblem.uniform(m, x0, N, DT, cost, u_lower=np.zeros(3))
    with pytest.raises(ValueError, match="<="):
        ShootingProblem.uniform(m, x0, N, DT, cost, u_lower=np.ones(7), u_upper=np.zeros(7))
    with pytest.raises(ValueError, match="integrator"):
        ShootingProblem.uniform(m, x0, N, DT, cost, integrator="midpoint")
    with pytest.raises(ValueError, match="unknown backend"):
        ShootingProblem.uniform(m, x0, N, DT, cost, backend="nope")
    with pytest.raises(TypeError, match="RobotModel"):
        ShootingProblem.uniform("iiwa", x0, N, DT, cost)
    with pytest.raises(ValueError, match="built for model"):
        ShootingProblem.uniform(m, x0, N, DT, StateCost(dynamics.load_model("hyq")))
    p = ShootingProblem.uniform(m, x0, N, DT, cost)
    with pytest.raises(ValueError, match="line_search"):
        ILQR(p, line_search="golden")
    with pytest.raises(ValueError, match="alphas"):
        ILQR(p, alphas=[1.5])
    with pytest.raises(ValueError, match="us_init"):
        ILQR(p).solve(us_init=np.zeros((N - 1, 7)))
    with pytest.raises(ValueError, match="xs_init"):
        FDDP(p).solve(xs_init=np.zeros((N, 14)))
    with pytest.raises(TypeError, match="ShootingProblem"):
        DDP(object())
