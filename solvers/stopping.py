"""The stopping test shared by the shooting solvers: the ∞-norm of the projected gradient of the
total cost with respect to the controls, ``∂J/∂us``, along a feasible trajectory.

The gradient comes from the adjoint recursion ``λ_N = l_N,x``, ``g_t = l_u + Fuᵀ λ_{t+1}``,
``λ_t = l_x + Fxᵀ λ_{t+1}``; with control limits, components at an active bound that push
further into it are dropped (the first-order optimality condition of the box-constrained
problem). One compiled numba call or a Python loop.
"""

from __future__ import annotations

import numpy as np

from .problem import ProblemDerivatives


def _c(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def control_gradient(d: ProblemDerivatives, compiled: bool) -> np.ndarray:
    """``∂J/∂us`` (N, nu) by the adjoint recursion."""
    Fx, Fu = d.dynamics.Fx, d.dynamics.Fu
    N, nu = d.running.lu.shape
    lam = d.terminal.lx[0]
    g = np.empty((N, nu))
    if compiled:
        from .riccati_numba import gradient_kernel   # imports numba: only for a compiled solver
        gradient_kernel(_c(Fx), _c(Fu), _c(d.running.lx), _c(d.running.lu), _c(lam), g)
        return g
    for t in range(N - 1, -1, -1):
        g[t] = d.running.lu[t] + Fu[t].T @ lam
        lam = d.running.lx[t] + Fx[t].T @ lam
    return g


def projected_gradient_norm(d: ProblemDerivatives, us: np.ndarray, lower: np.ndarray | None,
                            upper: np.ndarray | None, compiled: bool) -> float:
    """∞-norm of the projected ``∂J/∂us``; lower / upper (nu,) the control bounds, or None."""
    g = control_gradient(d, compiled)
    if lower is not None:
        scale = 1e-9 * (1.0 + np.abs(us))
        at_lo = us <= lower + scale
        at_hi = us >= upper - scale
        g = np.where((at_lo & (g > 0)) | (at_hi & (g < 0)), 0.0, g)
    return float(np.abs(g).max()) if g.size else 0.0
