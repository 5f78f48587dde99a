"""The kernel library's small dense linear algebra (dynamics/kernels/dense.py), shared by the
Riccati pass and the contact kernels, against numpy.linalg (the independent oracle): the Cholesky
factor of a principal submatrix, in place and not, its pivots and where it stops, and the row-wise
substitution with one right-hand side (a vector) and several (rows)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from dynamics.kernels.dense import cholesky, cholesky_solve  # noqa: E402


def _spd(rng, n, cond=1e3):
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T


@pytest.mark.parametrize("n, m", [(1, 1), (4, 1), (7, 14), (12, 3)])
def test_factor_of_a_principal_submatrix_and_solve(n, m):
    rng = np.random.default_rng(n)
    N = n + 3
    A = _spd(rng, N)
    idx = np.concatenate([rng.permutation(N)[:n], np.full(3, -1)]).astype(np.int64)   # only idx[:n] is read
    sub = A[np.ix_(idx[:n], idx[:n])]
    L = np.full((N, N), np.nan)
    pmin = cholesky(A, idx, n, L, 0.0)
    ref = np.linalg.cholesky(sub)
    np.testing.assert_allclose(np.tril(L[:n, :n]), ref, rtol=1e-12, atol=1e-14)
    assert pmin == pytest.approx(np.min(np.diag(ref)) ** 2, rel=1e-12)
    B = rng.normal(size=(N, m))
    X = B.copy()
    cholesky_solve(L, n, X)
    np.testing.assert_allclose(X[:n], np.linalg.solve(sub, B[:n]), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(X[n:], B[n:])                # rows past n untouched
    x = B[:, 0].copy()                                         # one right-hand side as a vector
    cholesky_solve(L, n, x)
    np.testing.assert_allclose(x[:n], X[:n, 0], rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x[n:], B[n:, 0])


def test_in_place_factor_equals_the_separate_one():
    rng = np.random.default_rng(1)
    n = 9
    A = _spd(rng, n)
    idx = np.arange(n)
    L = np.zeros((n, n))
    p1 = cholesky(A, idx, n, L, 0.0)
    K = A.copy()
    p2 = cholesky(K, idx, n, K, 0.0)
    assert p1 == p2
    np.testing.assert_array_equal(np.tril(K), np.tril(L))
    np.testing.assert_allclose(np.tril(K), np.linalg.cholesky(A), rtol=1e-12, atol=1e-14)


def test_stops_at_the_first_pivot_not_above_the_tolerance():
    rng = np.random.default_rng(2)
    n = 6
    J = rng.normal(size=(4, n))
    A = J.T @ J                                  # rank 4: the fifth pivot vanishes (to rounding)
    ref = np.linalg.cholesky(A[:4, :4])
    tol = 1e-9 * np.max(np.diag(A))
    L = np.zeros((n, n))
    piv = cholesky(A, np.arange(n), n, L, tol)
    assert piv <= tol and abs(piv) < 1e-9 * np.max(np.diag(A))
    np.testing.assert_allclose(np.tril(L[:4, :4]), ref, rtol=1e-10, atol=1e-12)   # completed rows
    assert not cholesky(-np.eye(3), np.arange(3), 3, np.zeros((3, 3)), 0.0) > 0.0
    nan = np.eye(3)
    nan[1, 1] = np.nan
    assert np.isnan(cholesky(nan, np.arange(3), 3, np.zeros((3, 3)), 0.0))
    assert cholesky(np.eye(2), np.arange(2), 0, np.zeros((2, 2)), 0.0) == np.inf   # an empty matrix
