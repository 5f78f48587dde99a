"""CSQP against mim-solvers' SolverCSQP on the same problems (solvers/crocoddyl_problem.py maps the
constraints to Crocoddyl's ConstraintModelManager): same optimum with constraints active, and our
own KKT residuals (checked here from the derivatives, not from the solver's report) below
tolerance."""

from __future__ import annotations

import numpy as np
import pytest

croc = pytest.importorskip("crocoddyl", reason="crocoddyl is not installed in this environment")
mim = pytest.importorskip("mim_solvers", reason="mim-solvers is not installed in this environment")

from solvers import CSQP, FDDP
from solvers.crocoddyl_problem import (
    build_crocoddyl_problem,
    from_pinocchio_states,
    to_pinocchio_states,
)
from solvers.problem_constraints import ProblemConstraints

from .problems import JOINT_1_LOWER, WALL, hyq_push, iiwa_wall


def _mim_csqp(p, max_iter=40, tol=1e-9, qp_iters=100):
    s = mim.SolverCSQP(build_crocoddyl_problem(p))
    s.termination_tolerance, s.eps_abs, s.eps_rel, s.max_qp_iters, s.rho_sparse = tol, tol, 0.0, qp_iters, 1.0
    xs0, us0 = p.initial_guess()
    s.solve(list(to_pinocchio_states(p, xs0)), list(us0), max_iter, False)
    return s, from_pinocchio_states(p, np.array(s.xs)), np.array(s.us)


def _kkt(p, r):
    """Primal, dual and complementarity residuals of (xs, us, y) from the problem's derivatives."""
    pc = ProblemConstraints(p, box=False)
    d = p.derivatives(r.xs, r.us)
    G = pc.create_data()
    pc.evaluate(r.xs, r.us, G)
    y, N = r.multipliers, p.horizon
    lam = d.terminal.lx[0] + G.Gx[N].T @ y[N]
    dual = 0.0
    for t in range(N - 1, -1, -1):
        Fx, Fu = d.dynamics.Fx[t], d.dynamics.Fu[t]
        dual = max(dual, np.abs(d.running.lu[t] + G.Gu[t].T @ y[t] + Fu.T @ lam).max())
        lam = d.running.lx[t] + G.Gx[t].T @ y[t] + Fx.T @ lam
    gaps = p.state.difference(r.xs[1:], p.next_states(r.xs[:-1], r.us))
    primal = max(np.abs(gaps).max(), pc.violation(G.g).max(), np.abs(p.state.difference(r.xs[0], p.x0)).max())
    lo, hi = pc.lower, pc.upper
    assert np.all(y[np.isposinf(hi)] <= 1e-12) and np.all(y[np.isneginf(lo)] >= -1e-12), "multiplier signs"
    comp = np.max(np.minimum(np.abs(y), np.where(y > 0, np.abs(hi - G.g), np.abs(G.g - lo))))
    return primal, dual, comp, G.g


@pytest.mark.parametrize("backend,N", [("numpy", 5), ("numba", 10)])    # the numpy Riccati pass is slow: N = 5
def test_iiwa_wall_and_joint_bound_same_optimum_as_mim_csqp(backend, N):
    p = iiwa_wall(N, dt=0.06 if N == 5 else 0.03, backend=backend)
    free = FDDP(iiwa_wall(N, dt=0.06 if N == 5 else 0.03, backend=backend, constrained=False)).solve(
        max_iter=100, tol=1e-9)                                     # the constraints are needed
    _, ee = p.backend.frame_placement(p.model, np.ascontiguousarray(free.xs[:, :p.model.nq]), "ee")
    assert ee[:, 1].max() > WALL + 0.01 and free.xs[:, 1].min() < JOINT_1_LOWER - 0.005
    # the QP solved at least as tightly as the SQP's tolerance (a looser QP can leave the SQP a few
    # 1e-11 above it, depending on rounding)
    r = CSQP(p, box=False, eps_abs=1e-10, eps_rel=0.0).solve(max_iter=100, tol=1e-10)
    assert r.converged, r.reason
    s, xs, us = _mim_csqp(p)
    assert abs(r.cost - s.cost) <= 1e-6 * abs(s.cost), (r.cost, s.cost)
    assert np.abs(r.xs - xs).max() < 1e-5
    assert np.abs(r.us - us).max() < 1e-5 * max(1.0, np.abs(us).max())
    primal, dual, comp, g = _kkt(p, r)
    assert max(primal, dual, comp) < 1e-8, (primal, dual, comp)
    # both constraints active, with non-zero multipliers
    assert np.abs(g[:, 0] - WALL).min() < 1e-8 and np.abs(g[:, 1] - JOINT_1_LOWER).min() < 1e-8
    assert r.multipliers[:, 0].max() > 1e-3 and r.multipliers[:, 1].min() < -1e-3


def test_second_order_dynamics_term_reaches_the_same_optimum():
    """With DDP's term λ·F2 in the QP's Hessian (the costates' dynamics curvature) the KKT point is
    the same as Gauss–Newton's."""
    p = iiwa_wall()
    gn = CSQP(p, box=False, eps_abs=1e-9, eps_rel=0.0).solve(max_iter=100, tol=1e-10)
    so = CSQP(p, box=False, eps_abs=1e-9, eps_rel=0.0, second_order=True).solve(max_iter=100, tol=1e-10)
    assert gn.converged and so.converged, (gn.reason, so.reason)
    assert so.second_order and not gn.second_order
    assert abs(so.cost - gn.cost) <= 1e-9 * gn.cost
    assert np.abs(so.xs - gn.xs).max() < 1e-6


def test_hyq_push_eight_facet_cones_same_optimum_as_mim_csqp():
    """Cones of 8 faces, mapped to Crocoddyl's FrictionCone with 8 facets: the same optimum."""
    _, p = hyq_push(5, facets=8)
    r = CSQP(p, box=False, eps_abs=1e-9, eps_rel=0.0).solve(max_iter=50, tol=1e-9)
    assert r.converged, r.reason
    s, xs, us = _mim_csqp(p, max_iter=30, tol=1e-9, qp_iters=300)
    assert abs(r.cost - s.cost) <= 1e-6 * abs(s.cost), (r.cost, s.cost)
    assert np.abs(r.xs - xs).max() < 1e-5
    assert (r.multipliers > 1e-6).sum() >= 2


def test_hyq_push_friction_cones_same_optimum_as_mim_csqp():
    _, p = hyq_push()
    pc = ProblemConstraints(p, box=False)
    free = FDDP(hyq_push(constrained=False)[1]).solve(max_iter=100, tol=1e-9)
    assert pc.violation(pc.values(free.xs, free.us)).max() > 1.0      # the push needs the cones
    r = CSQP(p, box=False, eps_abs=1e-9, eps_rel=0.0).solve(max_iter=50, tol=1e-9)
    assert r.converged, r.reason
    s, xs, us = _mim_csqp(p, max_iter=30, tol=1e-9, qp_iters=300)
    assert abs(r.cost - s.cost) <= 1e-6 * abs(s.cost), (r.cost, s.cost)
    assert np.abs(r.xs - xs).max() < 1e-5
    # the torques agree to ~1e-5 relative: mim-solvers' own KKT residual stalls near 1e-6 here
    assert np.abs(r.us - us).max() < 3e-5 * np.abs(us).max()
    primal, dual, comp, _ = _kkt(p, r)
    assert max(primal, dual, comp) < 1e-7, (primal, dual, comp)
    assert (r.multipliers > 1e-6).sum() >= 4                            # cone facets active
