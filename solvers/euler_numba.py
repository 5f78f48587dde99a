"""Compiled semi-implicit Euler step Jacobians for hinge/slide robots: the numpy assembly of
:class:`solvers.integrators.euler.EulerModel`'s first-order derivatives (about a dozen whole-array
numpy operations) as two numba calls around the backend's
batched ``aba_derivatives`` (:func:`euler_inputs`, :func:`euler_jacobians`), and for DDP the
acceleration Hessian with the passive-force and actuation chain rule (:func:`acceleration_hessian`)
and the second-order factor C with ``−M⁻¹`` folded in (:func:`folded_factor_C`).

With ``τ = B u - D v - K_s (q - q_spring)``, ``a = ABA(q, v, τ)``, ``v⁺ = v + dt a``,
``q⁺ = q + dt v⁺`` (Euclidean configuration: hinge and slide joints only)::

    ∂a/∂q = A_q - M⁻¹ K_s      ∂a/∂v = A_v - M⁻¹ D      ∂a/∂u = M⁻¹ B
    ∂v⁺/∂(q, v, u) = dt [∂a/∂q, ∂a/∂v, ∂a/∂u] + [0, I, 0]
    ∂q⁺/∂(q, v, u) = dt² [∂a/∂q, ∂a/∂v, ∂a/∂u] + [I, dt I, 0]

(``D``, ``K_s`` diagonal.) The torque and the step are the kernel library's one compiled definition
(:func:`dynamics.kernels.passive.joint_torques`, :func:`dynamics.kernels.integrators.euler_velocity`).
The numpy path stays the reference (``tests/solvers/test_euler_numba.py`` compares both). Importing this
module imports numba; the kernels compile on first use.
"""

from __future__ import annotations

import numpy as np

from dynamics.kernels.integrators import euler_velocity
from dynamics.kernels.jit import jit
from dynamics.kernels.passive import joint_torques


@jit
def euler_inputs(x, u, B, b_identity, damping, springs, stiffness, qspring, q, v, tau):
    """Split x (N, nq+nv) into q (N, nq), v (N, nv) and write ``τ = B u - D v - K_s (q - q_spring)``
    into tau (N, nv). springs (n, 2): (q address, dof address) of the links with a spring."""
    N, nq = q.shape
    nv = v.shape[1]
    damped = False
    for i in range(nv):
        damped = damped or damping[i] != 0.0
    for n in range(N):
        for i in range(nq):
            q[n, i] = x[n, i]
        for i in range(nv):
            v[n, i] = x[n, nq + i]
        joint_torques(u[n], B, b_identity, damping, damped, springs, stiffness, qspring, q[n], v[n], tau[n])


@jit
def euler_jacobians(q, v, a, Aq, Av, Minv, B, b_identity, damping, stiffness, dt, xn, Fx, Fu):
    """``x⁺`` into xn (N, nq+nv) and the Jacobians (module docstring) into Fx (N, 2nv, 2nv), Fu
    (N, 2nv, nu), from the backend's a (N, nv), A_q, A_v, M⁻¹ (N, nv, nv) (Euclidean: nq = nv)."""
    N, nv = v.shape
    nu = Fu.shape[2]
    dt2 = dt * dt
    w = np.empty(nv)
    for n in range(N):
        # the Euler step; q ⊕ w = q + w on a Euclidean configuration
        euler_velocity(v[n], a[n], dt, xn[n, nv:], w)
        for i in range(nv):
            xn[n, i] = q[n, i] + w[i]
        for i in range(nv):
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


@jit
def acceleration_hessian(A2, B, b_identity, damping, stiffness, H):
    """The Hessian of ``a(q, v, τ(q, v, u))`` over z = (q, v, u) into H (N, nv, nz, nz), from the
    backend's second-order tensors A2 = (∂²a/∂q², ∂²a/∂v², ∂²a/∂q∂v, ∂²a/∂q∂τ) (4, N, nv, nv, nv):
    the numpy assembly of :meth:`solvers.integrators.actuated.ActuatedModel._acceleration_hessian`
    in one call. τ = B u - D v - K_s (q - q_spring) is linear
    with diagonal ∂τ/∂q = -K_s, ∂τ/∂v = -D, and ∂²a/∂τ², ∂²a/∂v∂τ vanish::

        H_qq = sym(∂²a/∂q²) + k + kᵀ,  k = -∂²a/∂q∂τ K_s     H_qv = ∂²a/∂q∂v - ∂²a/∂q∂τ D
        H_vv = ∂²a/∂v²      H_qu = ∂²a/∂q∂τ B      (H_vq, H_uq: transposes; H_vu = H_uu = 0)
    """
    N, nv = A2.shape[1], A2.shape[2]
    nu = H.shape[3] - 2 * nv
    for n in range(N):
        for i in range(nv):
            aqq, avv, aqv, aqt = A2[0, n, i], A2[1, n, i], A2[2, n, i], A2[3, n, i]
            h = H[n, i]
            # row by row (contiguous writes); the 7 × 7 blocks read transposed stay in L1
            for j in range(nv):
                hj = h[j]
                for k in range(nv):
                    s = aqq[j, k] + aqq[k, j]
                    s *= 0.5
                    s += -aqt[j, k] * stiffness[k]
                    s += -aqt[k, j] * stiffness[j]
                    hj[k] = s
                for k in range(nv):
                    hj[nv + k] = aqv[j, k] - aqt[j, k] * damping[k]
                for c in range(nu):
                    if b_identity:
                        hj[2 * nv + c] = aqt[j, c]
                    else:
                        t = 0.0
                        for k in range(nv):
                            t += aqt[j, k] * B[k, c]
                        hj[2 * nv + c] = t
            for j in range(nv):
                hj = h[nv + j]
                for k in range(nv):
                    hj[k] = aqv[k, j] - aqt[k, j] * damping[j]
                for k in range(nv):
                    hj[nv + k] = avv[j, k]
                for c in range(nu):
                    hj[2 * nv + c] = 0.0
            for c in range(nu):
                hc = h[2 * nv + c]
                for k in range(nv):
                    hc[k] = h[k, 2 * nv + c]
                for k in range(nv, nv + nv + nu):
                    hc[k] = 0.0


@jit
def folded_factor_C(Minv, Jw, dt, C):
    """The acceleration rows of DDP's second-order factor C (N, R, ndx) when T holds the Hessian of
    the bracketed terms ``B`` (``∂²a = −M⁻¹ B``) instead of the acceleration's: ``C[n, :nv] =
    −M⁻¹ᵀ C₀`` with ``C₀ = [dt² Jwᵀ | dt I]`` (:meth:`solvers.integrators.euler.EulerModel.write_factor_C`),
    i.e. ``C[n, s, i] = −dt² (Jw M⁻¹)[i, s]``, ``C[n, s, nv + i] = −dt M⁻¹[i, s]``. Minv (N, nv, nv)
    is ``∂a/∂τ``; Jw (N, nv, nv) the Lie-group step's Jacobian, or an empty (0, ·, ·) array for ``Jw = I``.
    The rows ``R > nv`` (Lie-group terms) are left as they are."""
    N, nv = Minv.shape[0], Minv.shape[1]
    euclidean = Jw.shape[0] == 0
    dt2 = dt * dt
    for n in range(N):
        Mi = Minv[n]
        c = C[n]
        for s in range(nv):
            for i in range(nv):
                if euclidean:
                    t = Mi[i, s]
                else:
                    t = 0.0
                    for r in range(nv):
                        t += Jw[n, i, r] * Mi[r, s]
                c[s, i] = -dt2 * t
                c[s, nv + i] = -dt * Mi[i, s]
