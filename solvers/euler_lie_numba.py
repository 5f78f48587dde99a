"""Compiled semi-implicit Euler step Jacobians for robots with ball or free joints (a floating
base): the numpy assembly of :class:`solvers.integrators.euler.EulerModel`'s first-order
derivatives on a non-Euclidean configuration as one numba call after the backend's acceleration
partials (free dynamics or a contact solve); :mod:`solvers.euler_numba` is the hinge/slide case.

With ``a`` the acceleration, ``τ = B u - D v - K_s (q - q_spring)``, ``v⁺ = v + dt a``,
``w = dt v⁺``, ``q⁺ = q ⊕ w`` and ``Jq = ∂(q ⊕ w)/∂q``, ``Jw = ∂(q ⊕ w)/∂w`` (tangent coordinates)::

    ∂a/∂q = A_q - A_τ K_s      ∂a/∂v = A_v - A_τ D      ∂a/∂u = A_τ B
    ∂v⁺/∂(q, v, u) = dt [∂a/∂q, ∂a/∂v, ∂a/∂u] + [0, I, 0]
    ∂q⁺/∂(q, v, u) = Jw dt ∂v⁺/∂(q, v, u) + [Jq, 0, 0]

(``A_τ = ∂a/∂τ``: M⁻¹ for free dynamics, the contact solve's for contact dynamics; ``D``, ``K_s``
diagonal.) ``Jq`` and ``Jw`` are block-diagonal by joint (identity on hinge/slide dofs), so the
product with ``Jw`` runs over each joint's block only. The step, ``q ⊕ w`` and its Jacobians are
the kernel library's one compiled definition (:func:`dynamics.kernels.integrators.euler_velocity`,
:func:`dynamics.kernels.lie.integrate_q`, :func:`dynamics.kernels.lie.integrate_jacobians`). The
numpy path stays the reference (``tests/solvers/test_euler_lie_numba.py`` compares both and checks
finite differences). Importing this module imports numba; the kernel compiles on first use.
"""

from __future__ import annotations

import numpy as np

from dynamics.kernels.integrators import all_finite, euler_velocity
from dynamics.kernels.jit import jit
from dynamics.kernels.lie import integrate_jacobians, integrate_q

_SCALAR, _BALL = 0, 1      # joint kinds of dynamics.kernels.lie's joint rows (2: free)


@jit
def euler_lie_jacobians(joints, q, v, a, Aq, Av, Atau, B, b_identity, damping, stiffness, dt, vn, w, qn, Jq, Jw,
                        xn, Fx, Fu) -> bool:
    """``x⁺`` into xn (N, nq+nv) and the Jacobians (module docstring) into Fx (N, 2nv, 2nv), Fu
    (N, 2nv, nu), from q (N, nq), v, a (N, nv) and the partials A_q, A_v, A_τ (N, nv, nv); also
    v⁺ into vn, w into w (N, nv), q⁺ into qn (N, nq), Jq, Jw into Jq, Jw (N, nv, nv) (DDP's
    second-order terms read them). The passive-force chain rule is applied to A_q and A_v in
    place (they then hold ∂a/∂q, ∂a/∂v, as the numpy path leaves them). joints: the model's
    joint rows (:func:`dynamics.kernels.lie.joint_rows`).

    Returns False, having written only vn and w, when some q or w is not finite (the caller then
    takes the numpy path, which reports it)."""
    N, nq = q.shape
    nv = v.shape[1]
    nu = Fu.shape[2]
    ndx = 2 * nv
    for n in range(N):          # the step first: nothing is changed in place unless every state is finite
        euler_velocity(v[n], a[n], dt, vn[n], w[n])
        if not (all_finite(w[n]) and all_finite(q[n])):
            return False
    tmp = np.empty((8, 3, 3))
    for n in range(N):
        integrate_q(joints, q[n], w[n], qn[n])
        integrate_jacobians(joints, w[n], Jq[n], Jw[n], tmp)
        for i in range(nq):
            xn[n, i] = qn[n, i]
        for i in range(nv):
            xn[n, nq + i] = vn[n, i]
        # the v⁺ rows
        for i in range(nv):
            for j in range(nv):
                if stiffness[j] != 0.0:
                    Aq[n, i, j] -= Atau[n, i, j] * stiffness[j]
                if damping[j] != 0.0:
                    Av[n, i, j] -= Atau[n, i, j] * damping[j]
                Fx[n, nv + i, j] = dt * Aq[n, i, j]
                Fx[n, nv + i, nv + j] = dt * Av[n, i, j]
            Fx[n, nv + i, nv + i] += 1.0
        # ∂a/∂u = A_τ B over B's non-zero entries (a floating base's B selects the actuated joints)
        for i in range(nv):
            for c in range(nu):
                Fu[n, nv + i, c] = dt * Atau[n, i, c] if b_identity else 0.0
        if not b_identity:
            for c in range(nu):
                for k in range(nv):
                    if B[k, c] == 0.0:
                        continue
                    bk = dt * B[k, c]
                    for i in range(nv):
                        Fu[n, nv + i, c] += Atau[n, i, k] * bk
        # the q⁺ rows, joint block by joint block: Jw dt ∂v⁺/∂z + [Jq, 0, 0]
        for jt in range(joints.shape[0]):
            kind, va = joints[jt, 0], joints[jt, 2]
            size = 1 if kind == _SCALAR else (3 if kind == _BALL else 6)
            for r in range(va, va + size):
                for c in range(ndx):
                    s = 0.0
                    for k in range(va, va + size):
                        s += Jw[n, r, k] * Fx[n, nv + k, c]
                    Fx[n, r, c] = dt * s
                for c in range(va, va + size):
                    Fx[n, r, c] += Jq[n, r, c]
                for c in range(nu):
                    s = 0.0
                    for k in range(va, va + size):
                        s += Jw[n, r, k] * Fu[n, nv + k, c]
                    Fu[n, r, c] = dt * s
    return True
