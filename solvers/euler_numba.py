"""Compiled semi-implicit Euler step Jacobians for hinge/slide robots: the numpy assembly of
:meth:`solvers.discrete_dynamics.DiscreteDynamics._euler_derivatives` (about a dozen whole-array
numpy operations, ≈ 30 µs of a 32-knot iiwa MPC update) as two numba calls around the backend's
batched ``aba_derivatives``.

With ``τ = B u - D v - K_s (q - q_spring)``, ``a = ABA(q, v, τ)``, ``v⁺ = v + dt a``,
``q⁺ = q + dt v⁺`` (Euclidean configuration: hinge and slide joints only)::

    ∂a/∂q = A_q - M⁻¹ K_s      ∂a/∂v = A_v - M⁻¹ D      ∂a/∂u = M⁻¹ B
    ∂v⁺/∂(q, v, u) = dt [∂a/∂q, ∂a/∂v, ∂a/∂u] + [0, I, 0]
    ∂q⁺/∂(q, v, u) = dt² [∂a/∂q, ∂a/∂v, ∂a/∂u] + [I, dt I, 0]

(``D``, ``K_s`` diagonal.) The numpy path stays the reference (``tests/test_euler_numba.py``
compares both). Importing this module imports numba; the kernels compile on first use.
"""

from __future__ import annotations

import numpy as np
from numba import njit

jit = njit(cache=True, fastmath={"contract"}, error_model="numpy")


@jit
def euler_inputs(x, u, B, b_identity, damping, springs, stiffness, qspring, q, v, tau):
    """Split x (N, nq+nv) into q (N, nq), v (N, nv) and write ``τ = B u - D v - K_s (q - q_spring)``
    into tau (N, nv). springs (n, 2): (q address, dof address) of the links with a spring."""
    N, nq = q.shape
    nv = v.shape[1]
    nu = u.shape[1]
    for n in range(N):
        for i in range(nq):
            q[n, i] = x[n, i]
        for i in range(nv):
            v[n, i] = x[n, nq + i]
        for i in range(nv):
            if b_identity:
                t = u[n, i]
            else:
                t = 0.0
                for j in range(nu):
                    t += B[i, j] * u[n, j]
            tau[n, i] = t - damping[i] * v[n, i]
        for r in range(springs.shape[0]):
            qa, va = springs[r, 0], springs[r, 1]
            tau[n, va] -= stiffness[va] * (q[n, qa] - qspring[qa])


@jit
def euler_jacobians(q, v, a, Aq, Av, Minv, B, b_identity, damping, stiffness, dt, xn, Fx, Fu):
    """``x⁺`` into xn (N, nq+nv) and the Jacobians (module docstring) into Fx (N, 2nv, 2nv), Fu
    (N, 2nv, nu), from the backend's a (N, nv), A_q, A_v, M⁻¹ (N, nv, nv) (Euclidean: nq = nv)."""
    N, nv = v.shape
    nu = Fu.shape[2]
    dt2 = dt * dt
    for n in range(N):
        for i in range(nv):
            vn = v[n, i] + dt * a[n, i]
            xn[n, nv + i] = vn
            xn[n, i] = q[n, i] + dt * vn
            for j in range(nv):
                mq = Aq[n, i, j] - Minv[n, i, j] * stiffness[j]
                mv = Av[n, i, j] - Minv[n, i, j] * damping[j]
                Fx[n, nv + i, j] = dt * mq
                Fx[n, nv + i, nv + j] = dt * mv
                Fx[n, i, j] = dt2 * mq
                Fx[n, i, nv + j] = dt2 * mv
            Fx[n, nv + i, nv + i] += 1.0
            Fx[n, i, i] += 1.0
            Fx[n, i, nv + i] += dt
            for j in range(nu):
                if b_identity:
                    au = Minv[n, i, j]
                else:
                    au = 0.0
                    for k in range(nv):
                        au += Minv[n, i, k] * B[k, j]
                Fu[n, nv + i, j] = dt * au
                Fu[n, i, j] = dt2 * au
