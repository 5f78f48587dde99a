"""The compiled ADMM iterations (vector-only Riccati passes while ρ and μ stay the same,
solvers/admm_numba.py) against the NumPy form of the same iteration (a full Riccati pass every
iteration, solvers/admm_qp.py): the same steps, multipliers and penalty after every QP of an SQP
solve, on the iiwa past a wall and on HyQ under a push (active cones). The optimum itself is
checked against mim-solvers in test_csqp_oracle.py."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import CSQP

from .problems import hyq_push, iiwa_wall


@pytest.mark.parametrize("eps", [(1e-8, 0.0), (1e-6, 1e-3)], ids=["absolute", "relative"])
@pytest.mark.parametrize("build", [lambda: iiwa_wall(8), lambda: hyq_push(6, push=2.0)[1]], ids=["iiwa-wall", "hyq-push"])
def test_compiled_admm_matches_the_numpy_iteration(build, eps):
    runs = {}
    for compiled in (False, True):
        s = CSQP(build(), compiled=compiled, max_qp_iter=60, rho_update_interval=7, eps_abs=eps[0], eps_rel=eps[1])
        steps = []
        solve_qp = s.qp.solve

        def record(*args, _solve=solve_qp, _s=s, _steps=steps, **kw):
            it = _solve(*args, **kw)
            _steps.append((it, _s.qp.dx.copy(), _s.qp.du.copy(), _s.qp.y.copy(), _s.qp.z.copy(), _s.qp.rho))
            return it

        s.qp.solve = record
        r = s.solve(max_iter=4, tol=1e-12)
        runs[compiled] = (r, steps)
    (r0, s0), (r1, s1) = runs[False], runs[True]
    assert len(s0) == len(s1) >= 3
    if eps[1] > 0:
        assert any(a[0] < 60 for a in s0)                            # the relative tolerances stopped a QP
    for a, b in zip(s0, s1):
        assert a[0] == b[0]                                          # ADMM iterations
        for x, y in zip(a[1:5], b[1:5]):
            np.testing.assert_allclose(y, x, rtol=1e-7, atol=1e-9)   # dx, du, multipliers, splitting variables
        assert b[5] == pytest.approx(a[5], rel=1e-9)                 # penalty
    np.testing.assert_allclose(r1.xs, r0.xs, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(r1.k, r0.k, rtol=1e-6, atol=1e-8)


def test_costates_quu_inverse_and_augmented_hessians_against_numpy():
    """The compiled costate recursion, ``(Q_uu + μI)⁻¹`` of :func:`factor_quu` and the QP's
    augmented Hessians against NumPy's matrix products and inverse on random data (sizes that
    exercise the four-row sweeps and the rows left over; control-bound rows, zero in x)."""
    from solvers import admm_numba

    rng = np.random.default_rng(3)
    N, ndx, nu, m = 5, 14, 7, 9
    Fx, Fu = rng.normal(size=(N, ndx, ndx)), rng.normal(size=(N, ndx, nu))
    lx, lu = rng.normal(size=(N, ndx)), rng.normal(size=(N, nu))
    Gx, Gu, y = rng.normal(size=(N + 1, m, ndx)), rng.normal(size=(N + 1, m, nu)), rng.normal(size=(N + 1, m))
    Gx[:, :3] = 0.0                                       # control-bound rows: one-hot in u
    Gu[:, :3] = np.eye(nu)[:3]
    y[:, 5] = 0.0
    hx = lx + np.einsum("tmi,tm->ti", Gx[:N], y[:N])
    hu = lu + np.einsum("tmi,tm->ti", Gu[:N], y[:N])
    lam = np.zeros((N + 1, ndx))
    lam[N] = rng.normal(size=ndx)
    dual = admm_numba.costates(Fx, Fu, lx, lu, Gx, Gu, y, lam)
    ref, ref_dual = lam[N].copy(), 0.0
    for t in range(N - 1, -1, -1):
        ref_dual = max(ref_dual, np.abs(hu[t] + Fu[t].T @ ref).max())
        ref = hx[t] + Fx[t].T @ ref
        np.testing.assert_allclose(lam[t], ref, rtol=1e-12, atol=1e-12)
    assert dual == pytest.approx(ref_dual, rel=1e-12)

    A = rng.normal(size=(N, nu, nu))
    luu = A @ np.swapaxes(A, -1, -2) + np.eye(nu)
    S = rng.normal(size=(N + 1, ndx, ndx))
    Vxx = S @ np.swapaxes(S, -1, -2)
    mu = 1e-3
    L, Qinv = np.zeros((N, nu, nu)), np.zeros((N, nu, nu))
    status, _ = admm_numba.factor_quu(Fu, luu, Vxx, mu, L, Qinv)
    assert status == admm_numba.OK
    Q = luu + np.swapaxes(Fu, -1, -2) @ Vxx[1:] @ Fu + mu * np.eye(nu)
    np.testing.assert_allclose(L @ np.swapaxes(L, -1, -2), Q, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(Qinv, np.linalg.inv(Q), rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(Qinv, np.swapaxes(Qinv, -1, -2))

    S = rng.normal(size=(N + 1, ndx + nu, ndx + nu))
    H = S @ np.swapaxes(S, -1, -2)
    rho, sigma = rng.uniform(1e-4, 1e2, size=(N + 1, m)), 1e-6
    out = [np.full((N, ndx, ndx), np.nan), np.full((N, ndx, nu), np.nan), np.full((N, nu, nu), np.nan),
           np.full((ndx, ndx), np.nan)]
    _check_augmented_hessians(H, Gx, Gu, rho, sigma, out)

    # trailing rows with a zero Gx (the control box's, appended last): the x products run over the
    # rows before them; a knot without any (an impulse knot's box rows only), a few, none
    Gx = Gx.copy()
    Gx[0] = 0.0
    Gx[1, m - 4:] = 0.0
    Gx[2, m - 1:] = 0.0
    Gx[3, 2:] = 0.0
    Gx[N, m - 2:] = 0.0
    _check_augmented_hessians(H, Gx, Gu, rho, sigma, out)
    np.testing.assert_array_equal(out[0][0], H[0, :ndx, :ndx] + sigma * np.eye(ndx))     # no x rows: l_xx + σI
    np.testing.assert_array_equal(out[1][0], H[0, :ndx, ndx:])


def _check_augmented_hessians(H, Gx, Gu, rho, sigma, out) -> None:
    """:func:`admm_numba.augmented_hessians` into ``out`` against ``H + Gᵀ diag(ρ) G + σ I`` in NumPy
    (H (N + 1, nz, nz), Gx (N + 1, m, ndx), Gu (N + 1, m, nu); the terminal knot's x block only)."""
    from solvers import admm_numba

    N, ndx, nu = Gu.shape[0] - 1, Gx.shape[-1], Gu.shape[-1]
    admm_numba.augmented_hessians(H[:N, :ndx, :ndx].copy(), H[:N, :ndx, ndx:].copy(), H[:N, ndx:, ndx:].copy(),
                                  H[N, :ndx, :ndx].copy(), Gx, Gu, rho, sigma, *out)
    G = np.concatenate([Gx, Gu], axis=-1)
    ref = H + np.swapaxes(G, -1, -2) @ (rho[..., None] * G) + sigma * np.diag(np.r_[np.ones(ndx), np.ones(nu)])
    np.testing.assert_allclose(out[0], ref[:N, :ndx, :ndx], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(out[1], ref[:N, :ndx, ndx:], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(out[2], ref[:N, ndx:, ndx:], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(out[3], ref[N, :ndx, :ndx], rtol=1e-12, atol=1e-10)


def test_compiled_rho_rows_equal_the_numpy_form():
    """The per-row penalty and near flags of the compiled pass (:func:`admm_numba.rho_rows`) are
    exactly those of :meth:`StagewiseAdmmQP._rho_rows`' NumPy form, on rows of every kind: equality,
    one- and two-sided, unbounded (NaN near-bounds), non-zero multipliers, values at, inside and
    past a bound."""
    from solvers.admm_qp import StagewiseAdmmQP

    rng = np.random.default_rng(7)
    N, m = 6, 11
    lo = rng.normal(size=(N + 1, m)) - 1.0
    hi = lo + rng.uniform(0.0, 2.0, size=(N + 1, m))
    hi[:, 0] = lo[:, 0]                                   # equality rows
    lo[:, 1] = -np.inf                                    # one-sided
    hi[:, 2] = np.inf
    lo[:, 3], hi[:, 3] = -np.inf, np.inf                  # unbounded (padding)
    w = np.where(rng.uniform(size=(N + 1, m)) < 0.3, lo, rng.normal(size=(N + 1, m)))   # some exactly at a bound
    w[:, 4] = hi[:, 4] - 1e-4 * (1 + np.abs(hi[:, 4]))   # within the near slack of the upper bound
    y = np.where(rng.uniform(size=(N + 1, m)) < 0.4, rng.normal(size=(N + 1, m)), 0.0)
    z = np.clip(rng.normal(size=(N + 1, m)), lo, hi)

    class _Backward:
        compiled = False

    out = {}
    for compiled in (False, True):
        bw = _Backward()
        bw.compiled = compiled
        qp = StagewiseAdmmQP(N, 4, 2, lo == hi, bw, None, rho=0.37, inactive_rho=3e-4)
        qp.y[:], qp.z[:] = y, z
        r = qp._rho_rows(w, lo, hi)
        out[compiled] = (r, qp._near.copy())
    (r0, n0), (r1, n1) = out[False], out[True]
    assert np.array_equal(r1, r0) and np.array_equal(n1, n0)
    assert len(np.unique(r0)) == 4                        # every kind of row is there: 10³ρ, ρ, 3e-4 ρ, ρ_min
