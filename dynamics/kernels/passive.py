"""The generalised force of the solvers' dynamics, compiled for one state:
``τ = B u - D v - K_s (q - q_spring)`` (actuation through the actuation matrix B, joint damping D and
hinge/slide joint springs K_s, both diagonal).

The numpy reference is :class:`dynamics.actuation.Actuation` (``torques``); this is the one
compiled definition, used by the solvers' compiled rollouts and Euler-derivative stage
(tests/dynamics/kernels/test_kernels_passive_euler.py compares both).
"""

from __future__ import annotations

from .jit import jit


@jit
def joint_torques(u, B, b_identity, damping, damped, springs, stiffness, qspring, q, v, tau):
    """``τ = B u - D v - K_s (q - q_spring)`` into tau (nv,) for u (nu,), q (nq,), v (nv,).

    B (nv, nu) actuation matrix (b_identity: B is the identity, ``B u = u`` exactly); damping,
    stiffness (nv,) the diagonals of D and K_s; damped: some damping is non-zero (``D v`` is
    subtracted only then, as in the reference, so a zero D leaves a non-finite v out of τ);
    springs (n, 2) int64: (q address, dof address) of each joint with a spring; qspring (nq,)."""
    nv = tau.shape[0]
    nu = u.shape[0]
    for i in range(nv):
        if b_identity:
            t = u[i]
        else:
            t = 0.0
            for j in range(nu):
                t += B[i, j] * u[j]
        if damped:
            t -= damping[i] * v[i]
        tau[i] = t
    for r in range(springs.shape[0]):
        qa, va = springs[r, 0], springs[r, 1]
        tau[va] -= stiffness[va] * (q[qa] - qspring[qa])
