"""Solving the contact KKT system through M⁻¹ and the contact Schur complement.

The KKT system of rigid contact dynamics (Featherstone RBDA §8; Carpentier & Mansard 2018 eq. (10))

    [ M   Jᵀ ] [  a ]   [ τ - b ]
    [ J   0  ] [ -λ ] = [  -γ   ]

is solved as ``a_free = M⁻¹ (τ - b)``, ``K λ = -(γ + J a_free)`` with the small contact Schur
complement (Delassus matrix) ``K = J M⁻¹ Jᵀ`` (nc × nc), then ``a = a_free + M⁻¹ Jᵀ λ``.

K is symmetric positive definite iff J has full row rank. Without damping a factorisation checks
its pivots and a rank-deficient J raises :class:`RankDeficientContactError` (never a silent NaN).
With ``ContactSet(damping=μ)`` the proximal iterations ``(K + μ I) x_{j+1} = r + μ x_j`` (Pinocchio's
``ProximalSettings`` solve) converge, for a consistent system, to the minimum-norm solution.
"""

from __future__ import annotations

import numpy as np

from .contact_set import ContactSet, RankDeficientContactError

PIVOT_RTOL = 1e-11  # relative pivot of the Cholesky factorisation of K below which J is rank deficient


class SchurSolver:
    """Applies ``K⁻¹`` (or the proximal minimum-norm solve) to (B, nc) or (B, nc, m) right-hand sides."""

    def __init__(self, K: np.ndarray, contacts: ContactSet, func: str):
        self.contacts = contacts
        self.func = func
        mu = contacts.damping
        nc = K.shape[-1]
        if mu == 0.0:
            self._check_rank(K.real)
            self.Kinv = np.linalg.inv(K)
        else:
            self.Kmu = K + mu * np.eye(nc)   # solved by LU each iteration: an explicit inverse
            self.Kinv = None                  # would stall the residual at cond(K + μ I)·eps
        self.K = K
        self.mu = mu

    def _check_rank(self, K: np.ndarray) -> None:
        scale = np.max(np.diagonal(K, axis1=-2, axis2=-1), axis=-1)
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:  # not positive definite at some state: rank it by eigenvalues
            check_pivots(self.contacts, self.func, np.linalg.eigvalsh(K)[..., 0] / scale)
            raise rank_error(self.contacts, self.func, None, K.shape[0], 0.0) from None
        piv = np.diagonal(L, axis1=-2, axis2=-1) ** 2
        check_pivots(self.contacts, self.func, piv.min(axis=-1) / scale)

    def solve(self, r: np.ndarray) -> np.ndarray:
        """``K⁻¹ r`` for r (B, nc) or (B, nc, m); with damping, the proximal iterations until the
        residual ``max |K x − r| <= tol · max(1, max |r|)`` (per right-hand side column)."""
        vec = r.ndim == 2
        rr = r[..., None] if vec else r
        if self.mu == 0.0:
            x = self.Kinv @ rr
        else:
            x = np.linalg.solve(self.Kmu, rr)
            c = self.contacts
            scale = np.maximum(1.0, np.max(np.abs(rr), axis=-2, keepdims=True))
            for _ in range(c.max_iter):
                res = np.max(np.abs(self.K @ x - rr) / scale) if x.size else 0.0
                if res <= c.tol:
                    break
                x = np.linalg.solve(self.Kmu, rr + self.mu * x)
            else:
                raise RuntimeError(f"{self.func}: the proximal contact solve did not converge in {c.max_iter} "
                                   f"iterations (relative residual {res:.1e} > tol {c.tol:.0e}): the constraints "
                                   f"are inconsistent (e.g. redundant points on a rigid foot that is turning) "
                                   f"or need more iterations (ContactSet(max_iter=...), larger damping)")
        return x[..., 0] if vec else x


def rank_error(contacts: ContactSet, func: str, nbad: int | None, B: int, rel: float) -> RankDeficientContactError:
    """The error for a singular contact Schur complement (rank-deficient contact Jacobian)."""
    hint = (f"the contact forces of frames {', '.join(contacts.frames)} ({contacts.kind}) are not unique. Remove "
            f"redundant contacts (e.g. at most three non-collinear points per rigid foot, or one 6d contact) or "
            f"pass ContactSet(..., damping=1e-9) for the minimum-norm forces by proximal iterations")
    where = "at some state" if nbad is None else f"at {nbad} of {B} states"
    return RankDeficientContactError(f"{func}: the contact Jacobian is rank deficient {where} (smallest relative "
                                     f"pivot of J M⁻¹ Jᵀ {rel:.1e} < {PIVOT_RTOL:.0e}): {hint}")


def check_pivots(contacts: ContactSet, func: str, rel: np.ndarray) -> None:
    """Raise :class:`RankDeficientContactError` if any relative pivot (B,) is below PIVOT_RTOL."""
    if rel.size and rel.min() > PIVOT_RTOL:  # the common case, cheaply (NaN fails it and is reported)
        return
    bad = ~(rel > PIVOT_RTOL)
    if np.any(bad):
        raise rank_error(contacts, func, int(bad.sum()), bad.size, float(np.min(np.where(np.isnan(rel), 0, rel))))
