"""Augmented-Lagrangian DDP (solvers.ALDDP) against mim-solvers' SolverCSQP on the problems of the
CSQP oracle tests (same optimum with constraints active; our own KKT residuals checked from the
derivatives, not from the solver's report), the numpy and numba backends against each other,
warm-started multipliers, and diagnostics instead of NaNs."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import ALDDP, SOLVERS, FrameHalfSpace, ShootingProblem

from .problems import JOINT_1_LOWER, WALL, hyq_push, iiwa_wall
from .test_csqp_input import _with


def _solve(p, tol=1e-10, max_iter=200, **kw):
    r = ALDDP(p, box=False, **kw).solve(max_iter=max_iter, tol=tol)
    assert r.converged, r.reason
    assert np.all(np.isfinite(r.multipliers))
    return r


def _against_mim_csqp(p, r, kkt_tol, us_rel, **mim_options):
    """Assert that ALDDP's result r on p is mim-solvers' SolverCSQP optimum (cost to 1e-6 relative,
    states to 1e-5, controls to us_rel of their largest magnitude) and that our KKT residuals,
    recomputed from the problem's derivatives, are below kkt_tol; returns the constraint values."""
    pytest.importorskip("crocoddyl", reason="crocoddyl is not installed in this environment")
    pytest.importorskip("mim_solvers", reason="mim-solvers is not installed in this environment")
    from .test_csqp_oracle import _kkt, _mim_csqp

    solver, xs, us = _mim_csqp(p, **mim_options)
    errors = {"cost": abs(r.cost - solver.cost) / abs(solver.cost), "xs": np.abs(r.xs - xs).max(),
              "us": np.abs(r.us - us).max() / max(1.0, np.abs(us).max())}
    assert errors["cost"] <= 1e-6 and errors["xs"] < 1e-5 and errors["us"] < us_rel, errors
    *residuals, g = _kkt(p, r)
    assert max(residuals) < kkt_tol, residuals
    return g


@pytest.mark.parametrize("backend,N", [("numpy", 5), ("numba", 10)])
def test_iiwa_wall_and_joint_bound_same_optimum_as_mim_csqp(backend, N):
    p = iiwa_wall(N, dt=0.06 if N == 5 else 0.03, backend=backend)
    r = _solve(p)
    g = _against_mim_csqp(p, r, kkt_tol=1e-8, us_rel=1e-5)
    # the wall and the joint bound both active, with multipliers of the right signs
    assert min(np.abs(g[:, 0] - WALL).min(), np.abs(g[:, 1] - JOINT_1_LOWER).min()) < 1e-8
    assert min(r.multipliers[:, 0].max(), -r.multipliers[:, 1].min()) > 1e-3


def test_hyq_push_friction_cones_same_optimum_as_mim_csqp():
    _, p = hyq_push()
    r = _solve(p, tol=1e-9)
    # the torques to 3e-5 relative: mim-solvers' own KKT residual stalls near 1e-6 here
    _against_mim_csqp(p, r, kkt_tol=1e-7, us_rel=3e-5, max_iter=30, tol=1e-9, qp_iters=300)
    assert np.count_nonzero(r.multipliers > 1e-6) >= 4                 # cone facets active


def test_numpy_and_numba_backends_agree():
    a = _solve(iiwa_wall(5, dt=0.06, backend="numpy"))
    b = _solve(iiwa_wall(5, dt=0.06, backend="numba"))
    assert abs(a.cost - b.cost) <= 1e-9 * a.cost
    assert np.abs(a.xs - b.xs).max() < 1e-7 and np.abs(a.us - b.us).max() < 1e-6
    assert np.abs(a.multipliers - b.multipliers).max() < 1e-6


def test_second_order_dynamics_term_reaches_the_same_optimum():
    p = iiwa_wall(5, dt=0.06, backend="numba")
    gn = _solve(p)
    so = _solve(p, second_order=True)
    assert so.second_order and not gn.second_order
    assert abs(so.cost - gn.cost) <= 1e-9 * gn.cost
    assert np.abs(so.xs - gn.xs).max() < 1e-6


def test_second_order_step_retried_gauss_newton_when_the_curvature_pass_fails():
    # no μ to raise (reg_max = reg_init) and no per-μ fallback: the first iteration's pass with
    # DDP's term is indefinite on this problem, and CSQP's retry must be a Gauss–Newton pass (a
    # retry that runs the curvature pass again ends the solve with a regularization blow-up)
    p = iiwa_wall(5, dt=0.06, backend="numpy")
    r = _solve(p, second_order=True, gauss_newton_fallback=False, reg_max=1e-9)
    assert r.gauss_newton_fallbacks >= 1
    _against_mim_csqp(p, r, kkt_tol=1e-8, us_rel=1e-5)


@pytest.mark.parametrize("fallback", [True, False])
def test_failed_second_order_step_runs_each_pass_once(fallback):
    """A step whose every pass fails (Q_uu reported indefinite) runs the curvature pass once and the
    Gauss–Newton pass once: the per-μ fallback's own, or CSQP's retry's — never both, never the
    curvature pass again."""
    class Indefinite(ALDDP):
        def _backward_pass(self, d, mu):
            super()._backward_pass(d, mu)
            self.passes.append(self._with_curvature)
            return "Q_uu + mu I not positive definite (as reported for the test)"

    s = Indefinite(iiwa_wall(5, dt=0.06, backend="numpy"), box=False, second_order=True,
                   gauss_newton_fallback=fallback, reg_max=1e-9)
    s.passes = []
    r = s.solve(max_iter=5)
    assert not r.converged and r.iterations == 0 and "regularization blow-up" in r.reason, r.reason
    assert s.passes == [True, False]


def test_multipliers_warm_start_the_next_solve():
    p = iiwa_wall(6, dt=0.05, backend="numpy")
    s = ALDDP(p, box=False)
    r = s.solve(max_iter=200, tol=1e-9)
    assert r.converged, r.reason
    # warm: y = the returned ŷ, whose own shift at the same point moves the residuals by ~ρ × the
    # violation left (1e-10): at most one iteration
    again = s.solve(xs_init=r.xs, us_init=r.us, max_iter=100, tol=1e-9)
    assert again.converged and again.iterations <= 1, again.reason
    s.reset_multipliers()
    cold = s.solve(xs_init=r.xs, us_init=r.us, max_iter=200, tol=1e-9)      # y = 0: not a KKT point
    assert cold.converged and cold.iterations > 3 * max(again.iterations, 1)
    assert np.abs(cold.multipliers - r.multipliers).max() < 1e-5
    given = ALDDP(p, box=False).solve(r.xs, r.us, max_iter=100, tol=1e-9, multipliers=r.multipliers)
    assert given.converged and given.iterations <= 1 and r.rho == again.rho
    with pytest.raises(ValueError, match="multipliers must be a finite"):
        ALDDP(p, box=False).solve(max_iter=1, multipliers=np.zeros((3, 3)))


def test_warm_start_follows_rephased_knots():
    import dataclasses

    wall = iiwa_wall(6, dt=0.05, backend="numpy")
    a = wall.running_models[0]
    b = dataclasses.replace(a)                      # another phase: same terms, another object
    phases = [a, a, b, b, b, a]
    wall.set_running_models(phases)
    s = ALDDP(wall, box=False)
    r = s.solve(max_iter=200, tol=1e-9)
    assert r.converged and np.abs(r.multipliers).max() > 0, r.reason
    rows = ~(s.constraints.state_only[0] & s.constraints.bounded[0])    # knot 0's state-only rows: x0 is fixed
    wall.set_running_models(phases[2:] + [b, b])    # moved 2 knots earlier
    # max_iter=0: the multipliers returned are ŷ at the start, from the warm-start y moved with the knots
    start = s.solve(xs_init=r.xs, us_init=r.us, max_iter=0)
    # (the warm solve starts from the previous solve's penalty too)
    expected = ALDDP(wall, box=False, rho_init=r.rho).solve(xs_init=r.xs, us_init=r.us, max_iter=0,
                                                            multipliers=r.shifted_multipliers(2))
    assert np.array_equal(start.multipliers[1:], expected.multipliers[1:])
    assert np.array_equal(start.multipliers[0, rows], expected.multipliers[0, rows])


def test_start_state_violating_a_constraint_gives_a_diagnostic_not_nans():
    wall = iiwa_wall(6, dt=0.05, backend="numpy")
    p = _with(wall, [FrameHalfSpace(wall.model, "ee", [1, 0, 0], 0.3)])      # x0's end effector is at x = 0.67
    r = ALDDP(p, box=False).solve(max_iter=10)
    assert not r.converged and r.iterations == 0
    assert "knot 0" in r.reason and "frame_half_space" in r.reason and "x0" in r.reason, r.reason
    assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us)) and np.all(np.isfinite(r.multipliers))


def test_non_finite_constraint_gives_a_diagnostic_not_nans():
    class SqrtOfNegative:
        """sqrt(q_0 − 10): NaN on every knot of the iiwa's trajectories."""
        name = "sqrt_of_negative"
        lower, upper = np.array([-np.inf]), np.array([1.0])

        def residual(self, x, u, knots):
            with np.errstate(invalid="ignore"):
                return np.sqrt(x[:, :1] - 10.0)

        def jacobian(self, x, u, knots):
            return np.zeros((x.shape[0], 1, 14)), None

    wall = iiwa_wall(6, dt=0.05, backend="numpy")
    r = ALDDP(_with(wall, [SqrtOfNegative()]), box=False).solve(max_iter=5)
    assert not r.converged and r.iterations == 0
    assert "non-finite" in r.reason and "sqrt_of_negative" in r.reason, r.reason
    assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us))


def test_bad_options_and_registration():
    p = iiwa_wall(3, backend="numpy")
    assert isinstance(p, ShootingProblem) and SOLVERS["alddp"] is ALDDP and ALDDP.handles_constraints
    with pytest.raises(ValueError, match="rho_init"):
        ALDDP(p, rho_init=0.0)
    with pytest.raises(ValueError, match="rho_growth"):
        ALDDP(p, rho_growth=1.0)
    with pytest.raises(TypeError, match="CSQP option"):
        ALDDP(p, max_qp_iter=10)


def test_control_box_rows_are_respected():
    """With ``box`` the control bounds are constraint rows: tightened bounds are met at the optimum."""
    p = iiwa_wall(5, dt=0.06, backend="numpy")
    free = _solve(p)
    hi = 0.8 * np.abs(free.us).max()
    p = ShootingProblem(p.x0, p.running_models, p.terminal_model, backend="numpy", u_lower=np.full(p.nu, -hi),
                        u_upper=np.full(p.nu, hi))
    r = ALDDP(p, box=True).solve(max_iter=200, tol=1e-9)
    assert r.converged, r.reason
    assert r.us.max() <= hi + 1e-8 and r.us.min() >= -hi - 1e-8
    assert np.isclose(np.abs(r.us).max(), hi, atol=1e-7)


def test_cli_runs_the_wall_task_with_alddp(tmp_path):
    """``--solver alddp`` is accepted where a constrained solver is required; in the closed loop
    (lockstep, 0.5 s, horizon 16 x 10 ms) the end effector, as MuJoCo measures it, stays within
    5 mm of the wall it is reaching past."""
    import json

    from mpc.cli import main

    out = tmp_path / "run"
    code = main(["run", "iiwa-reach", "--task-arg", "wall=y<=0.1", "--solver", "alddp", "--horizon", "16", "--dt",
                 "0.01", "--duration", "0.5", "--out", str(out), "--quiet", "--json"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] and s["config"]["solver"] == "alddp"
    crit = {c["name"]: c for c in s["evaluation"]["criteria"]}
    assert crit["wall violation"]["passed"] is True, crit["wall violation"]


def test_iteration_takes_fddps_prepared_derivatives_and_rollout():
    # the iiwa problem is the prepared path's common case: the derivatives and the line search's
    # candidates go through FDDP's compiled calls, and the optimum is that of the general path
    # (compiled=False: CSQP's derivative stage, NumPy Riccati pass, linear-step trial)
    p = iiwa_wall(10, dt=0.03, backend="numba")
    s = ALDDP(p, box=False)
    r = s.solve(max_iter=200, tol=1e-10)
    assert r.converged, r.reason
    assert s._fast is not None
    ref = _solve(p, compiled=False)
    assert abs(r.cost - ref.cost) <= 1e-9 * abs(ref.cost)
    assert np.abs(r.xs - ref.xs).max() < 1e-6 and np.abs(r.multipliers - ref.multipliers).max() < 1e-5


def test_compiled_linear_rollout_matches_the_recursion():
    pytest.importorskip("numba")
    from solvers.admm_qp import StagewiseAdmmQP
    from solvers.backward_pass import BackwardPass

    rng = np.random.default_rng(3)
    N, ndx, nu = 6, 4, 2
    Fx, Fu = rng.normal(size=(N, ndx, ndx)) * 0.5, rng.normal(size=(N, ndx, nu))
    gaps = rng.normal(size=(N + 1, ndx))
    K, k = rng.normal(size=(N, nu, ndx)), rng.normal(size=(N, nu))
    # the reference: the recursion written out knot by knot
    dx, du = np.zeros((N + 1, ndx)), np.zeros((N, nu))
    dx[0] = gaps[0]
    for t in range(N):
        du[t] = k[t] + K[t] @ dx[t]
        dx[t + 1] = Fx[t] @ dx[t] + Fu[t] @ du[t] + gaps[t + 1]
    eq = np.zeros((N + 1, 1), bool)
    for compiled in (False, True):
        bw = BackwardPass(N, nu, ndx, compiled)
        bw.K[:], bw.k[:] = K, k
        qp = StagewiseAdmmQP(N, ndx, nu, eq, bw, lambda key: None)
        qp.linear_rollout(Fx, Fu, gaps)
        assert np.allclose(qp.dx, dx, rtol=1e-12, atol=1e-12) and np.allclose(qp.du, du, rtol=1e-12, atol=1e-12)


def test_active_set_pass_updates_hessians_as_a_full_assembly():
    # the incremental Hessians of a re-expanded pass (only the knots whose rows changed, by ±ρ GᵀG)
    # equal those assembled from scratch for the new active set
    p = iiwa_wall(5, dt=0.06, backend="numpy")
    s = ALDDP(p, box=False)
    s.solve(max_iter=2, tol=0.0)
    d, cd, qp = s.data.derivatives(), s.cdata, s.qp
    rng = np.random.default_rng(0)
    old = rng.random(cd.g.shape) < 0.5
    new = old.copy()
    new[1, 0] = not new[1, 0]
    new[-1, :] = ~new[-1, :]
    from solvers.problem import ProblemDerivatives
    lqr = ProblemDerivatives(qp.aug, qp.aug_terminal, d.dynamics)
    qp.augmented_hessians(d, cd.Gx, cd.Gu, np.where(old, s.rho, 0.0))
    s._update_hessians(lqr, new, new != old)
    inc = [a.copy() for a in (qp.aug.lxx, qp.aug.lxu, qp.aug.luu, qp.aug_terminal.lxx)]
    qp.augmented_hessians(d, cd.Gx, cd.Gu, np.where(new, s.rho, 0.0))
    for a, b in zip(inc, (qp.aug.lxx, qp.aug.lxu, qp.aug.luu, qp.aug_terminal.lxx)):
        assert np.allclose(a, b, rtol=1e-12, atol=1e-9 * max(1.0, np.abs(b).max()))
