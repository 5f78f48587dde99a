"""Box-constrained quadratic program by projected Newton (Tassa, Mansard, Todorov 2014,
"Control-Limited Differential Dynamic Programming", Algorithm 1 and their ``boxQP``):

    minimise  ½ xᵀ H x + gᵀ x   subject to   lower <= x <= upper.

If ``H`` is positive definite and the unconstrained minimiser lies in the box, that is the answer
(one Cholesky solve). Otherwise each iteration: find the clamped set (at a bound with the gradient pushing outwards), take a
Newton step in the free subspace, project it onto the box and backtrack with an Armijo test.
The Cholesky factor of the free block ``H_ff`` is returned: the control-limited DDP gains are
``K_f = -H_ff⁻¹ Q_ux,f`` on the free rows and zero on the clamped rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

# termination codes (Tassa's boxQP numbering)
HESSIAN_NOT_PD = -1
NO_DESCENT = 0
MAX_ITER = 1
MAX_LINESEARCH = 2
NO_IMPROVEMENT = 4
SMALL_GRADIENT = 5
ALL_CLAMPED = 6
INTERIOR = 7
MESSAGES = {INTERIOR: "the unconstrained minimiser lies inside the box", HESSIAN_NOT_PD: "Hessian is not positive definite", NO_DESCENT: "no descent direction found",
            MAX_ITER: "maximum number of iterations", MAX_LINESEARCH: "maximum line-search iterations",
            NO_IMPROVEMENT: "improvement smaller than tolerance", SMALL_GRADIENT: "gradient norm below tolerance",
            ALL_CLAMPED: "all dimensions are clamped"}


@dataclass
class BoxQPResult:
    """``x`` (n,) solution; ``free`` (n,) bool mask of unclamped dimensions; ``chol`` the
    ``cho_factor`` of ``H[free][:, free]`` (None if nothing is free or H is not PD);
    ``status`` (code above) and ``iterations``."""

    x: np.ndarray
    free: np.ndarray
    chol: tuple | None
    status: int
    iterations: int

    @property
    def ok(self) -> bool:
        return self.status != HESSIAN_NOT_PD

    @property
    def message(self) -> str:
        return MESSAGES[self.status]


def box_qp(H: np.ndarray, g: np.ndarray, lower: np.ndarray, upper: np.ndarray, x0: np.ndarray | None = None,
           max_iter: int = 100, min_grad: float = 1e-8, min_rel_improve: float = 1e-8, step_dec: float = 0.6,
           min_step: float = 1e-22, armijo: float = 0.1) -> BoxQPResult:
    """Solve the box QP (see module docstring). H (n, n) symmetric, g (n,), bounds (n,) (±inf ok)."""
    n = g.shape[0]
    lower = np.asarray(lower, float)
    upper = np.asarray(upper, float)
    # fast path (the common case in DDP): a convex QP whose unconstrained minimiser is feasible
    try:
        chol = sla.cho_factor(H, lower=False, check_finite=False)
        if np.all(np.isfinite(chol[0])) and np.all(np.diag(chol[0]) > 0):
            x = -sla.cho_solve(chol, g, check_finite=False)
            if np.all(x >= lower) and np.all(x <= upper):
                return BoxQPResult(x, np.ones(n, dtype=bool), chol, INTERIOR, 0)
    except np.linalg.LinAlgError:
        pass  # not positive definite: the projected-Newton loop reports it if it matters
    if x0 is None:
        both = np.isfinite(lower) & np.isfinite(upper)
        x0 = np.where(both, 0.5 * (np.where(both, lower, 0.0) + np.where(both, upper, 0.0)), 0.0)
    x = np.clip(x0, lower, upper)
    value = x @ g + 0.5 * x @ H @ x
    free = np.ones(n, dtype=bool)
    clamped = np.zeros(n, dtype=bool)
    chol = None
    status = MAX_ITER
    old_value = 0.0
    it = 0
    for it in range(max_iter):
        if it > 0 and (old_value - value) < min_rel_improve * abs(old_value):
            status = NO_IMPROVEMENT
            break
        old_value = value
        grad = g + H @ x
        old_clamped = clamped
        clamped = ((x <= lower) & (grad > 0)) | ((x >= upper) & (grad < 0))
        free = ~clamped
        if clamped.all():
            chol = None
            status = ALL_CLAMPED
            break
        if it == 0 or np.any(old_clamped != clamped) or chol is None:
            try:
                chol = sla.cho_factor(H[np.ix_(free, free)], lower=False, check_finite=False)
            except np.linalg.LinAlgError:
                chol = None
            if chol is None or not np.all(np.isfinite(chol[0])) or np.any(np.diag(chol[0]) <= 0):
                chol = None
                status = HESSIAN_NOT_PD
                break
        if np.linalg.norm(grad[free]) < min_grad:
            status = SMALL_GRADIENT
            break
        # Newton step on the free dims, keeping the clamped dims where they are
        grad_clamped = g + H @ (x * clamped)
        search = np.zeros(n)
        search[free] = -sla.cho_solve(chol, grad_clamped[free], check_finite=False) - x[free]
        sdotg = search @ grad
        if sdotg >= 0:
            status = NO_DESCENT
            break
        step = 1.0
        xc = np.clip(x + step * search, lower, upper)
        vc = xc @ g + 0.5 * xc @ H @ xc
        while (vc - value) / (step * sdotg) < armijo:
            step *= step_dec
            if step < min_step:
                status = MAX_LINESEARCH
                break
            xc = np.clip(x + step * search, lower, upper)
            vc = xc @ g + 0.5 * xc @ H @ xc
        if status == MAX_LINESEARCH:
            break
        x, value = xc, vc
    else:
        it = max_iter
    return BoxQPResult(x, free, chol, status, it)
