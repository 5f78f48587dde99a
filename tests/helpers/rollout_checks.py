"""Comparing a batch of line-search rollouts ``(X, U, ok)`` of a compiled forward pass with the same
rollouts from the reference (Python) path."""

from __future__ import annotations

import numpy as np

from tests.helpers.comparisons import check


def check_rollouts(got, ref, alphas, problem, rtol: float, expect_ok=None) -> None:
    """``got`` and ``ref`` are ``(X, U, ok)`` for the step sizes ``alphas`` on ``problem``: X is
    (S, N + 1, nx), U (S, N, nu), ok (S,) bool with S = len(alphas). Asserts the shapes, the same
    ok flags (and ``expect_ok`` where given), finite X and U, and the states and controls of the ok
    rollouts within ``rtol · max(1, max|ref|)`` (:func:`tests.helpers.comparisons.check`)."""
    (X, U, ok), (X_ref, U_ref, ok_ref) = got, ref
    S, N = len(alphas), problem.horizon
    assert X.shape == (S, N + 1, problem.nx) and U.shape == (S, N, problem.nu), (X.shape, U.shape)
    assert ok.shape == (S,) and ok.dtype == bool, (ok.shape, ok.dtype)
    assert np.array_equal(ok, ok_ref), (ok, ok_ref)
    if expect_ok is not None:
        assert np.array_equal(ok, expect_ok), (ok, expect_ok)
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(U))
    check("states", X[ok], X_ref[ok], rtol)
    check("controls", U[ok], U_ref[ok], rtol)
