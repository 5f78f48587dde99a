"""iLQR and DDP on the iiwa reaching problem: same optimum, monotone cost, DDP's faster local
convergence, box constraints, line-search modes, RK4, a floating-base robot. The optimum is
checked against an independent oracle: central finite differences of the total cost of the
rolled-out trajectory with respect to the controls."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers import DDP, FDDP, ILQR, ShootingProblem
from solvers.costs import ComPositionCost, ControlCost, CostSum, StateCost

N, DT = 16, 0.03


def reaching_problem(**opts) -> ShootingProblem:
    task = tasks.get_task("iiwa-reach", exact_hessian=True)
    return task.build_problem(task.initial_state(), N, DT, **opts)


def fd_gradient_of_total_cost(problem: ShootingProblem, us: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """∂J/∂us of J(us) = cost(rollout(us)) by central differences (uses only f and l values); all
    2·N·nu perturbed rollouts advance together as one batch."""
    n = us.size
    U = np.concatenate([us.ravel() + np.eye(n) * h, us.ravel() - np.eye(n) * h]).reshape((2 * n,) + us.shape)
    X = np.empty((2 * n, us.shape[0] + 1, problem.nx))
    X[:, 0] = problem.x0
    for t in range(us.shape[0]):
        X[:, t + 1] = problem.step(X[:, t], U[:, t])
    J = problem.cost(X, U)
    return ((J[:n] - J[n:]) / (2 * h)).reshape(us.shape)


def projected(problem, us, g, tol=1e-9):
    at_lo = us <= problem.u_lower + tol
    at_hi = us >= problem.u_upper - tol
    return np.where((at_lo & (g > 0)) | (at_hi & (g < 0)), 0.0, g)


@pytest.fixture(scope="module")
def solved():
    p = reaching_problem()
    return p, ILQR(p).solve(max_iter=100, tol=1e-7), DDP(p).solve(max_iter=100, tol=1e-7)


def _monotone(history):
    h = np.asarray(history)
    return np.all(np.diff(h) <= 1e-12 * np.abs(h[:-1]))


def test_ilqr_and_ddp_reach_the_same_optimum(solved):
    p, ri, rd = solved
    for r in (ri, rd):
        assert r.converged, r.reason
        assert _monotone(r.cost_history)
        assert r.cost_history[-1] < 0.5 * r.cost_history[0]
        assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us))
        # the trajectory is the rollout of the controls (single shooting)
        assert np.allclose(p.rollout(r.us), r.xs, atol=1e-12)
    assert abs(ri.cost - rd.cost) <= 1e-8 * rd.cost
    assert np.abs(ri.us - rd.us).max() < 1e-3 * np.abs(rd.us).max()
    # stationarity against finite differences of J(us) (bounds are inactive here)
    g = fd_gradient_of_total_cost(p, rd.us)
    assert np.abs(g).max() < 1e-5
    assert np.abs(fd_gradient_of_total_cost(p, rd.us * 1.001)).max() > 1e-3   # the check can fail


def test_ddp_converges_at_least_as_fast_near_the_optimum(solved):
    p, ri, rd = solved
    rng = np.random.default_rng(3)
    us0 = rd.us + rng.normal(size=rd.us.shape) * 0.05          # a neighbourhood of the optimum
    for tol in (1e-6, 1e-8):
        ilqr = ILQR(p).solve(us_init=us0, max_iter=30, tol=tol)
        ddp = DDP(p).solve(us_init=us0, max_iter=30, tol=tol)
        assert ddp.converged, ddp.reason
        assert (not ilqr.converged) or ddp.iterations <= ilqr.iterations, (ddp.iterations, ilqr.iterations)
        assert _monotone(ddp.cost_history) and _monotone(ilqr.cost_history)
    # quadratic convergence: in as many iterations, DDP's projected gradient falls orders of
    # magnitude below iLQR's (≈ 2e-11 against ≈ 6e-8 after 3 iterations here). Below ≈ 1e-11 the
    # cost decrease a step promises (∝ gradient²) is at the cost's rounding level, so whether the
    # line search accepts further steps depends on rounding (it differs between a freshly compiled
    # and a cached kernel): the tolerance stays above that floor.
    ddp = DDP(p).solve(us_init=us0, max_iter=30, tol=1e-10)
    assert ddp.converged and ddp.gradient_norm <= 1e-10, ddp.reason
    ilqr = ILQR(p).solve(us_init=us0, max_iter=ddp.iterations, tol=0)
    assert ilqr.gradient_norm > 100 * ddp.gradient_norm, (ilqr.gradient_norm, ddp.gradient_norm)


def test_line_search_modes_take_identical_steps():
    p = reaching_problem()
    a = ILQR(p, line_search="backtracking").solve(max_iter=8, tol=0)
    b = ILQR(p, line_search="parallel").solve(max_iter=8, tol=0)
    assert a.step_sizes == b.step_sizes
    assert np.allclose(a.cost_history, b.cost_history, rtol=1e-12)


def test_box_constraints_are_never_violated():
    # ±20 N m everywhere except the shoulder, which must hold the arm against gravity
    hi = np.array([20.0, 80.0, 20.0, 20.0, 20.0, 20.0, 20.0])
    p = reaching_problem(u_lower=-hi, u_upper=hi)
    results = [S(p, box=True).solve(max_iter=60, tol=1e-6) for S in (ILQR, DDP, FDDP)]
    for r in results:
        assert np.all(r.us >= -hi) and np.all(r.us <= hi), r.solver
        assert r.converged, (r.solver, r.reason)
        assert _monotone(r.cost_history)
    active = np.isclose(np.abs(results[1].us), hi)
    assert active.sum() > 10                                     # the bounds do bind
    # constrained stationarity (projected finite-difference gradient) and same optimum
    g = projected(p, results[1].us, fd_gradient_of_total_cost(p, results[1].us))
    assert np.abs(g).max() < 1e-4
    costs = [r.cost for r in results]
    assert max(costs) - min(costs) < 1e-6 * min(costs)
    # without the box the unconstrained solver leaves the bounds
    free = ILQR(p, box=False).solve(max_iter=60, tol=1e-6)
    assert np.any(np.abs(free.us) > hi) and free.cost < min(costs)


def test_rk4_problem():
    task = tasks.get_task("iiwa-reach", exact_hessian=True)
    p = task.build_problem(task.initial_state(), 6, 0.08, integrator="rk4")
    ri = ILQR(p).solve(max_iter=60, tol=1e-6)
    rd = DDP(p).solve(us_init=ri.us * 0.9 + 0.1 * task.u_gravity, max_iter=60, tol=1e-6)
    assert ri.converged and rd.converged
    assert abs(ri.cost - rd.cost) < 1e-6 * rd.cost
    assert np.allclose(p.rollout(rd.us), rd.xs, atol=1e-12)


def test_floating_base_ddp_hyq(bundled):
    """HyQ (free base, underactuated): DDP with the SE(3) second-order terms decreases the cost
    monotonically and agrees with iLQR."""
    m = bundled["hyq"]
    x_ref = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    x0 = x_ref.copy()
    x0[2] += 0.05                        # start a little higher than standing, at rest
    running = CostSum({"x": (StateCost(m, x_ref, np.r_[np.full(6, 10.0), np.ones(12), np.full(18, 0.1)]), 1.0),
                       "u": (ControlCost(m), 1e-4),
                       "com": (ComPositionCost(m, [0.0, 0.0, 0.6]), 1.0)})
    terminal = CostSum({"x": (StateCost(m, x_ref, np.full(36, 10.0)), 1.0)})
    p = ShootingProblem.uniform(m, x0, 5, 0.02, running, terminal)
    rd = DDP(p).solve(max_iter=20, tol=1e-7)
    ri = ILQR(p).solve(max_iter=20, tol=1e-7)
    assert rd.converged and ri.converged, (rd.reason, ri.reason)
    assert _monotone(rd.cost_history) and rd.cost < rd.cost_history[0]
    assert abs(rd.cost - ri.cost) < 1e-8 * rd.cost
    g = fd_gradient_of_total_cost(p, rd.us)
    assert np.abs(g).max() < 1e-5
