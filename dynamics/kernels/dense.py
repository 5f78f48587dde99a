"""Small dense linear algebra of the compiled kernels: one Cholesky factorisation and one
substitution, for the few-by-few symmetric positive-definite systems of the solvers' Riccati pass
(``Q_uu``, nu × nu, and its free block in the box QP) and of the contact kernels (the Delassus
matrix ``K = J M⁻¹ Jᵀ``, nc × nc). Sizes are a few to a few tens, where LAPACK's call overhead is
larger than the work, so these are plain loops.
"""

from __future__ import annotations

import numpy as np

from .jit import jit


@jit
def cholesky(A, idx, n, L, tol):
    """Lower Cholesky factor ``L[:n, :n]`` of the symmetric ``A[idx[:n]][:, idx[:n]]`` (its lower
    triangle is read). ``L`` may be ``A`` itself when ``idx[:n]`` is ``0 .. n-1``: every entry is
    read before it is overwritten (in place).

    Returns the smallest pivot ``L[j, j]²`` (``inf`` for n = 0). Stops at the first pivot that is
    not ``> tol`` (a NaN pivot included) and returns that pivot; ``L`` is then incomplete."""
    pmin = np.inf
    for j in range(n):
        s = A[idx[j], idx[j]]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > tol:
            return s
        if s < pmin:
            pmin = s
        d = np.sqrt(s)
        L[j, j] = d
        for i in range(j + 1, n):
            t = A[idx[i], idx[j]]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / d
    return pmin


@jit
def cholesky_solve(L, n, X):
    """``X[:n] <- (L Lᵀ)⁻¹ X[:n]`` in place, with the factor ``L[:n, :n]`` of :func:`cholesky`, for one
    right-hand side X (≥ n,) or m of them, X (≥ n, m).

    With m right-hand sides the forward and back substitutions run over whole rows, so the
    innermost loop is over the m columns along X's contiguous rows (no serial reductions); one
    right-hand side takes the dot-product form, which avoids that loop's overhead (the branch is
    resolved when numba compiles for X's number of dimensions)."""
    if X.ndim == 1:
        for i in range(n):
            s = X[i]
            for k in range(i):
                s -= L[i, k] * X[k]
            X[i] = s / L[i, i]
        for i in range(n - 1, -1, -1):
            s = X[i]
            for k in range(i + 1, n):
                s -= L[k, i] * X[k]
            X[i] = s / L[i, i]
        return
    m = X.shape[1]
    for i in range(n):
        for k in range(i):
            w = L[i, k]
            for c in range(m):
                X[i, c] -= w * X[k, c]
        d = 1.0 / L[i, i]
        for c in range(m):
            X[i, c] *= d
    for i in range(n - 1, -1, -1):
        for k in range(i + 1, n):
            w = L[k, i]
            for c in range(m):
                X[i, c] -= w * X[k, c]
        d = 1.0 / L[i, i]
        for c in range(m):
            X[i, c] *= d
