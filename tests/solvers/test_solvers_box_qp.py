"""Projected-Newton box QP against scipy's bounded least squares (BVLS) and the KKT conditions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from solvers.box_qp import ALL_CLAMPED, HESSIAN_NOT_PD, INTERIOR, box_qp


@pytest.mark.parametrize("seed", range(6))
def test_box_qp_matches_bounded_least_squares(seed):
    rng = np.random.default_rng(seed)
    n = 7
    A = rng.normal(size=(n + 3, n))
    b = rng.normal(size=n + 3) * 3
    H, g = A.T @ A, -A.T @ b                     # ½‖Ax - b‖² = ½xᵀHx + gᵀx + const
    lo = -rng.uniform(0.05, 1.0, n)
    hi = rng.uniform(0.05, 1.0, n)
    lo[0], hi[1] = -np.inf, np.inf               # unbounded sides are allowed
    res = box_qp(H, g, lo, hi, x0=rng.normal(size=n))
    ref = lsq_linear(A, b, bounds=(lo, hi), method="bvls", tol=1e-14)
    assert res.ok
    assert np.all(res.x >= lo) and np.all(res.x <= hi)
    assert np.abs(res.x - ref.x).max() < 1e-7
    # KKT: zero gradient on free dims, gradient pushing outwards on clamped dims
    grad = H @ res.x + g
    assert np.abs(grad[res.free]).max(initial=0) < 1e-7
    clamped = ~res.free
    assert np.all(((res.x[clamped] <= lo[clamped]) & (grad[clamped] > 0))
                  | ((res.x[clamped] >= hi[clamped]) & (grad[clamped] < 0)))
    # the factor of the free block gives the gains' linear solves
    if res.free.any():
        from scipy.linalg import cho_solve
        f = res.free
        assert np.allclose(cho_solve(res.chol, np.eye(f.sum())) @ H[np.ix_(f, f)], np.eye(f.sum()), atol=1e-8)


def test_box_qp_all_clamped_and_not_pd():
    H = np.eye(3)
    res = box_qp(H, np.array([10.0, -10.0, 10.0]), -np.ones(3), np.ones(3))
    assert res.status == ALL_CLAMPED and np.allclose(res.x, [-1, 1, -1])
    res = box_qp(-np.eye(3), np.ones(3), -np.ones(3) * np.inf, np.ones(3) * np.inf)
    assert res.status == HESSIAN_NOT_PD and not res.ok


def test_box_qp_interior_fast_path():
    rng = np.random.default_rng(9)
    A = rng.normal(size=(6, 5))
    H, g = A.T @ A + np.eye(5), rng.normal(size=5)
    res = box_qp(H, g, -np.full(5, 1e3), np.full(5, 1e3))
    assert res.status == INTERIOR and res.free.all()
    assert np.allclose(res.x, np.linalg.solve(H, -g), atol=1e-12)
