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
