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


def check_rollouts_on_two_threads(cr, problem, xs, us, k, K, alphas, repeats: int) -> None:
    """Two Python threads rolling out on one compiled rollout ``cr`` at once (the parallel driver
    runs without the GIL), each ``repeats`` times with its own step sizes ``alphas[j]``: every
    rollout's states must equal a serial call's bitwise (the rollout's scratch is per calling thread)."""
    import threading

    p = problem
    want = [cr.run(p.x0, a, xs, us, k, K, p.u_lower, p.u_upper, True)[0].copy() for a in alphas]
    same = [[], []]

    def roll(j):
        for _ in range(repeats):
            X = cr.run(p.x0, alphas[j], xs, us, k, K, p.u_lower, p.u_upper, True)[0]
            same[j].append(np.array_equal(X, want[j]))

    threads = [threading.Thread(target=roll, args=(j,)) for j in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(same[0]) and all(same[1]), \
        f"{same[0].count(False)}, {same[1].count(False)} of {repeats} rollouts differ"
