"""The compiled backward pass (solvers/riccati_numba.py) against the Python reference recursion of
solvers/ilqr.py, and its box QP against solvers/box_qp.py (itself checked against scipy's BVLS in
test_solvers_box_qp.py): same gains, feed-forward, value function and failures, on iLQR, DDP
(curvature term) and FDDP (gaps) at real trajectories of the iiwa and HyQ, and whole solves that
take the same iterates."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
import tasks
from solvers import DDP, FDDP, ILQR, ShootingProblem
from solvers.box_qp import HESSIAN_NOT_PD, box_qp
from solvers.costs import ControlCost, StateCost

pytest.importorskip("numba")
from solvers import riccati_numba as rk  # noqa: E402

N, DT = 16, 0.02
KEYFRAME = "standing"   # HyQ's standing keyframe (dynamics/robots/hyq.xml)


def iiwa_problem(**opts) -> ShootingProblem:
    task = tasks.get_task("iiwa-reach")
    return task.build_problem(task.initial_state(), N, DT, **opts)


def hyq_problem() -> ShootingProblem:
    m = dynamics.load_model("hyq")
    x0 = np.concatenate([m.keyframe(KEYFRAME), np.zeros(m.nv)])
    cost = StateCost(m, x0, 1.0) + ControlCost(m, np.zeros(m.nu), 1e-3)
    return ShootingProblem.uniform(m, x0, 8, DT, cost, StateCost(m, x0, 10.0), backend="numpy")


def run_backward(solver, d, mu, compiled: bool, k_warm=None):
    """One backward pass; ``k_warm`` (the box-QP starting point, overwritten by a pass) is restored first."""
    solver.backward.compiled = compiled
    if k_warm is not None:
        solver.k[:] = k_warm
    failure = solver._backward_pass(d, mu)
    return failure, solver.K.copy(), solver.k.copy(), solver.Vx.copy(), solver.Vxx.copy(), solver.Qu.copy()


def prepared(solver_cls, problem, feasible=True, **opts):
    """A solver with its state set up at a perturbed trajectory, and the derivatives there."""
    s = solver_cls(problem, compiled=False, **opts)
    s.solve(max_iter=3)                       # a non-trivial trajectory and previous k for the box-QP warm start
    rng = np.random.default_rng(3)
    if not feasible:
        s.xs = s.xs + 1e-2 * rng.normal(size=s.xs.shape)
        s.feasible = False
    d = s._derivatives()
    return s, d


@pytest.mark.parametrize("solver_cls", [ILQR, DDP, FDDP])
@pytest.mark.parametrize("box", [True, False])
@pytest.mark.parametrize("feasible", [True, False])
def test_backward_pass_matches_python(solver_cls, box, feasible):
    opts = {"second_order": True} if solver_cls is FDDP else {}
    s, d = prepared(solver_cls, iiwa_problem(), feasible=feasible, box=box, **opts)
    if box:
        # push some controls to the bounds so that the box QP has clamped dimensions
        s.us[::3] = s.problem.u_upper
    k0 = s.k.copy()
    for mu in (1e-9, 1e-2):
        ref = run_backward(s, d, mu, compiled=False, k_warm=k0)
        got = run_backward(s, d, mu, compiled=True, k_warm=k0)
        assert ref[0] is None and got[0] is None
        for a, b in zip(ref[1:], got[1:]):
            scale = max(1.0, np.abs(a).max())
            assert np.abs(a - b).max() <= 1e-9 * scale


def test_backward_pass_floating_base_matches_python():
    s, d = prepared(DDP, hyq_problem())
    k0 = s.k.copy()
    ref = run_backward(s, d, 1e-6, compiled=False, k_warm=k0)
    got = run_backward(s, d, 1e-6, compiled=True, k_warm=k0)
    assert ref[0] is None and got[0] is None
    for a, b in zip(ref[1:], got[1:]):
        assert np.abs(a - b).max() <= 1e-9 * max(1.0, np.abs(a).max())


def test_failures_are_reported_like_python():
    s, d = prepared(ILQR, iiwa_problem(), box=False)
    d.running.luu[5] = -1e6 * np.eye(s.problem.nu)          # Q_uu indefinite at knot 5
    ref = run_backward(s, d, 1e-9, compiled=False)[0]
    got = run_backward(s, d, 1e-9, compiled=True)[0]
    assert ref == got == "Q_uu + mu I not positive definite at knot 5"
    s.box = True
    assert run_backward(s, d, 1e-9, compiled=True)[0] == "Q_uu + mu I not positive definite at knot 5"
    d.running.luu[5] = np.eye(s.problem.nu)
    d.running.lxx[7] = np.nan
    s.box = False
    ref = run_backward(s, d, 1e-9, compiled=False)[0]
    got = run_backward(s, d, 1e-9, compiled=True)[0]
    assert ref == got and "knot 7" in got


@pytest.mark.parametrize("seed", range(12))
def test_box_qp_kernel_matches_box_qp(seed):
    rng = np.random.default_rng(seed)
    n = 7
    A = rng.normal(size=(n + 3, n))
    H = A.T @ A + (0.0 if seed % 3 else 1e-3) * np.eye(n)
    g = rng.normal(size=n) * (10 if seed % 2 else 0.3)         # large gradients clamp many dims
    lo = -rng.uniform(0.05, 1.0, n)
    hi = rng.uniform(0.05, 1.0, n)
    lo[0], hi[1] = -np.inf, np.inf
    x0 = rng.normal(size=n)
    ref = box_qp(H, g, lo, hi, x0=x0)
    x, free, L, idx, work = np.empty(n), np.empty(n, bool), np.empty((n, n)), np.empty(n, np.int64), np.empty((5, n))
    status, nfree = rk.box_qp_kernel(H, g, lo, hi, x0, x, free, L, idx, work)
    assert status == ref.status
    assert np.abs(x - ref.x).max() <= 1e-10 * max(1.0, np.abs(ref.x).max())
    np.testing.assert_array_equal(free, ref.free)
    if ref.chol is not None and ref.free.any():
        f = np.flatnonzero(ref.free)
        assert nfree == f.size and np.array_equal(idx[:nfree], f)
        Lf = np.tril(L[:nfree, :nfree])
        assert np.allclose(Lf @ Lf.T, H[np.ix_(f, f)], rtol=1e-12, atol=1e-12)


def test_box_qp_kernel_not_positive_definite():
    n = 3
    x, free, L, idx, work = np.empty(n), np.empty(n, bool), np.empty((n, n)), np.empty(n, np.int64), np.empty((5, n))
    status, _ = rk.box_qp_kernel(-np.eye(n), np.ones(n), -np.full(n, np.inf), np.full(n, np.inf), np.zeros(n),
                                 x, free, L, idx, work)
    assert status == HESSIAN_NOT_PD


@pytest.mark.parametrize("solver_cls", [ILQR, DDP, FDDP])
def test_whole_solve_takes_the_same_iterates(solver_cls):
    p = iiwa_problem()
    ref = solver_cls(p, compiled=False).solve(max_iter=30, tol=1e-8)
    got = solver_cls(p, compiled=True).solve(max_iter=30, tol=1e-8)
    assert ref.iterations == got.iterations and ref.converged == got.converged
    np.testing.assert_allclose(got.cost_history, ref.cost_history, rtol=1e-9)
    np.testing.assert_allclose(got.us, ref.us, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(got.K, ref.K, rtol=1e-6, atol=1e-6 * np.abs(ref.K).max())


def test_default_follows_the_backend():
    assert ILQR(iiwa_problem(backend="numpy")).compiled is False
    assert ILQR(iiwa_problem(backend="numba")).compiled is True
    assert DDP(iiwa_problem(backend="numba"), compiled=False).compiled is False


def test_fddp_second_order_uses_the_curvature():
    """FDDP(second_order=True) adds V'_x·F2 (it used to be silently dropped): at the same feasible
    trajectory and derivatives, its backward pass differs from the Gauss–Newton one and equals
    DDP's."""
    p = iiwa_problem()
    gn, _ = prepared(FDDP, p)
    d2 = p.derivatives(gn.xs, gn.us, second_order=True)
    assert d2.dynamics.has_second_order and np.abs(d2.dynamics.T).max() > 0
    out = {}
    for name, solver in (("gn", FDDP(p, compiled=False)), ("so", FDDP(p, second_order=True, compiled=False)),
                         ("ddp", DDP(p, compiled=False))):
        solver.xs, solver.us, solver.gaps, solver.feasible = gn.xs, gn.us, np.zeros_like(gn.gaps), True
        assert solver._backward_pass(d2, 1e-6) is None
        out[name] = solver.K.copy()
    assert np.abs(out["so"] - out["gn"]).max() > 1e-6 * np.abs(out["gn"]).max()
    np.testing.assert_array_equal(out["so"], out["ddp"])


@pytest.mark.parametrize("compiled", [True, False])
def test_non_finite_cost_hessian_in_one_triangle_is_reported_and_leaves_no_gains(compiled):
    """The derivatives are searched for NaN only when the backward pass fails: a NaN in the strict
    upper triangle of one knot's l_xx must make the pass fail (both triangles of Q_xx enter V_xx),
    the reason must name the array and the knot, and no gains of that pass are left behind."""
    from solvers.ilqr import SolverFailure
    s, d = prepared(ILQR, iiwa_problem(), box=True)
    s.backward.compiled = compiled
    d.running.lxx[5, 0, 3] = np.nan
    s.reg.mu = 1e-9
    with pytest.raises(SolverFailure, match="non-finite running cost derivatives at knot 5"):
        s._backward_pass_with_regularization(d)
    assert not s.K.any() and not s.k.any()
