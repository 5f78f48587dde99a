"""FDDP: converges from an infeasible initial guess, closes the gaps, and reaches the optimum of
the single-shooting solvers (checked independently with finite differences of J(us))."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers import DDP, FDDP

N, DT = 16, 0.03


@pytest.fixture(scope="module")
def setup():
    task = tasks.get_task("iiwa-reach", exact_hessian=True)
    p = task.build_problem(task.initial_state(), N, DT)
    ref = DDP(p).solve(max_iter=100, tol=1e-7)
    assert ref.converged
    return task, p, ref


def _infeasible_guess(task, p, rng):
    """States interpolated from x0 to a different posture (zero velocity): far from any rollout."""
    q_end = task.q_home + rng.uniform(-0.5, 0.5, 7)
    s = np.linspace(0, 1, N + 1)[:, None]
    xs = np.concatenate([(1 - s) * task.q_home + s * q_end, np.zeros((N + 1, 7))], axis=-1)
    xs[0, 0] += 0.1          # even the first state differs from x0
    us = np.tile(task.u_gravity, (N, 1))
    return xs, us


@pytest.mark.parametrize("second_order", [False, True])
def test_fddp_converges_from_infeasible_guess_and_closes_gaps(setup, second_order):
    task, p, ref = setup
    xs0, us0 = _infeasible_guess(task, p, np.random.default_rng(1))
    gap0 = max(np.abs(p.state.difference(xs0[1:], p.step(xs0[:-1], us0))).max(),
               np.abs(p.state.difference(xs0[0], p.x0)).max())
    assert gap0 > 0.01
    r = FDDP(p, second_order=second_order).solve(xs_init=xs0, us_init=us0, max_iter=100, tol=1e-7)
    assert r.converged, r.reason
    assert r.gap <= 1e-12
    assert np.allclose(r.xs[0], p.x0) and np.allclose(p.rollout(r.us), r.xs, atol=1e-10)   # feasible
    assert abs(r.cost - ref.cost) < 1e-7 * ref.cost
    assert np.abs(r.us - ref.us).max() < 1e-3 * np.abs(ref.us).max()
    assert np.all(r.us >= p.u_lower) and np.all(r.us <= p.u_upper)


def test_fddp_partial_steps_shrink_the_gaps(setup):
    """With step sizes below one the gaps are only partly closed: after one such iteration the
    largest gap is (1 - α) times the initial one, to first order."""
    task, p, _ = setup
    xs0, us0 = _infeasible_guess(task, p, np.random.default_rng(2))
    solver = FDDP(p, alphas=[0.5])
    r = solver.solve(xs_init=xs0, us_init=us0, max_iter=1, tol=0)
    assert r.step_sizes == [0.5]
    g0 = np.abs(p.state.difference(xs0[0], p.x0)).max()
    g1 = np.abs(p.state.difference(r.xs[0], p.x0)).max()
    assert np.isclose(g1, 0.5 * g0, rtol=1e-6)
    assert 0 < r.gap < gap_of(p, xs0, us0)
    assert np.isclose(r.gap, gap_of(p, r.xs, r.us), rtol=1e-9)     # the stepped iterate's own gap


def gap_of(p, xs, us):
    return max(np.abs(p.state.difference(xs[1:], p.step(xs[:-1], us))).max(),
               np.abs(p.state.difference(xs[0], p.x0)).max())


def test_fddp_stops_with_a_diagnostic_on_a_diverged_warm_start(setup):
    """A warm start whose own dynamics overflow (velocities of 1e200: finite states, non-finite next
    states) stops the solver with a reason instead of a traceback or a NaN plan."""
    task, p, _ = setup
    xs = np.tile(task.initial_state(), (N + 1, 1))
    xs[5, 7:] = 1e200
    us = np.tile(task.u_gravity, (N, 1))
    with np.errstate(all="ignore"):
        r = FDDP(p).solve(xs_init=xs, us_init=us, max_iter=3)
    assert not r.converged and r.iterations == 0
    assert "non-finite" in r.reason and "warm start" in r.reason


def _hyq_stand_problem(horizon: int = 6):
    task = tasks.get_task("hyq-stand", cones="penalty")
    return task, task.build_problem(task.initial_state(), horizon, 0.01, backend="numba")


def _guess_for(robot, setup):
    """(problem, infeasible xs, us) on the iiwa or on HyQ standing (floating base, contacts)."""
    rng = np.random.default_rng(3)
    if robot == "iiwa":
        task, p, _ = setup
        return (p, *_infeasible_guess(task, p, rng))
    task, p = _hyq_stand_problem()
    xs0 = np.tile(task.initial_state(), (p.horizon + 1, 1))
    xs0[:, 7:] += 0.05 * rng.standard_normal(xs0[:, 7:].shape)
    xs0[:, :3] += 0.01 * rng.standard_normal((p.horizon + 1, 3))
    return p, xs0, np.tile(p.default_controls(), (p.horizon, 1))


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_fddp_reports_the_gap_of_a_partly_stepped_iterate(setup, robot):
    """After a partial step (α = 0.25) that ends the solve (refresh_gains=False, as in MPC) the
    returned gap is that of the returned trajectory, as a separate evaluation of f(xs_t, us_t)
    and x0 measures it."""
    p, xs0, us0 = _guess_for(robot, setup)
    r = FDDP(p, alphas=[0.25], refresh_gains=False).solve(xs_init=xs0, us_init=us0, max_iter=1, tol=0)
    assert r.step_sizes == [0.25], r.reason
    g = gap_of(p, r.xs, r.us)
    assert 0 < g < gap_of(p, xs0, us0)
    assert np.isclose(r.gap, g, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_fddp_reports_the_gap_of_an_unstepped_infeasible_iterate(setup, robot):
    """A solve that ends before any step (max_iter = 0) returns its infeasible guess with that
    guess's largest gap, as a separate evaluation of f(xs_t, us_t) and x0 measures it; on a
    floating-base contact problem too (Lie-group state difference)."""
    p, xs0, us0 = _guess_for(robot, setup)
    r = FDDP(p).solve(xs_init=xs0, us_init=us0, max_iter=0)
    assert r.iterations == 0 and np.array_equal(r.xs, xs0)
    g = gap_of(p, xs0, us0)
    assert g > 1e-3
    assert np.isclose(r.gap, g, rtol=1e-9, atol=1e-12)
