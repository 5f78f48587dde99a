"""Differential dynamic programming with the full second-order dynamics terms.

Mayne 1966 / Jacobson & Mayne 1970; in the notation of Tassa, Erez & Todorov 2012, eq. (4):

    Q_xx = l_xx + Fxᵀ V'_xx Fx + V'_x · f_xx
    Q_ux = l_ux + Fuᵀ V'_xx Fx + V'_x · f_ux
    Q_uu = l_uu + Fuᵀ V'_xx Fu + V'_x · f_uu

iLQR (:mod:`solvers.ilqr`) drops the last column; that is what Crocoddyl and MuJoCo MPC do. Here
``V'_x · f_zz`` is the second-order tensor ``F2`` of the discrete dynamics on the state manifold
(:mod:`solvers.integrators`: second-order forward-dynamics partials from the backend — FDSVA-SO,
Singh, Russell & Wensing 2022 — plus the SO(3)/SE(3) integration terms) contracted with the gradient of the
value function at the next knot. The tensors for all N knots are computed in one batched call
before the backward pass; only the cheap contraction happens inside the recursion. Everything
else (box QP, regularisation, line search) is shared with iLQR. Near a minimum with small μ the
iteration converges quadratically when the cost Hessians are exact.
"""

from __future__ import annotations

from .ilqr import ILQR


class DDP(ILQR):
    """Second-order DDP on a :class:`ShootingProblem` (same options as :class:`ILQR`). The source
    of the second-order dynamics derivatives is the problem's ``second_order`` setting; the
    curvature ``V'_x · F2[t]`` is added by the shared backward pass
    (:class:`solvers.backward_pass.BackwardPass`, also used by ``FDDP(second_order=True)``)."""

    name = "ddp"
    uses_second_order = True
