"""Recursive Newton-Euler inverse dynamics (Featherstone, RBDA Table 5.1; Plancher et al. 2021 Algorithm 1
with external forces). Body-frame recursion, gravity as a base acceleration ``a_0 = -g``."""

from __future__ import annotations

import numpy as np

from ..spatial import force_cross, motion_cross
from .transforms import gravity_acceleration, pass_inputs


def rnea_pass(model, q, v, a, fext=None, X=None, gravity=True):
    """Forward-backward RNEA on flattened inputs (B, nq), (B, nv), (B, nv), fext (B, nbody, 6).

    Returns ``tau`` (B, nv) and the per-link workspace ``(X, vel, acc, f)`` that the derivative
    algorithms reuse: X (B, L, 6, 6), vel/acc (B, L, 6) link velocities/accelerations and
    f (B, L, 6) link forces *after* the backward accumulation (forces transmitted by each joint).
    """
    B, L, dtype, X, fl = pass_inputs(model, q, v, a, fext, X)
    vel = np.zeros((B, L, 6), dtype=dtype)
    acc = np.zeros((B, L, 6), dtype=dtype)
    f = np.zeros((B, L, 6), dtype=dtype)
    a0 = gravity_acceleration(model, B, dtype) if gravity else np.zeros((B, 6), dtype=dtype)
    I = model.link_inertia
    for i in range(L):
        lam = model.link_parent[i]
        S = model.link_S[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        vJ = v[:, d0:d0 + nd] @ S.T
        Xi = X[:, i]
        if lam < 0:
            vel[:, i] = vJ
            acc[:, i] = np.einsum("bij,bj->bi", Xi, a0) + a[:, d0:d0 + nd] @ S.T
        else:
            vel[:, i] = np.einsum("bij,bj->bi", Xi, vel[:, lam]) + vJ
            acc[:, i] = (np.einsum("bij,bj->bi", Xi, acc[:, lam]) + a[:, d0:d0 + nd] @ S.T
                         + motion_cross(vel[:, i], vJ))
        h = vel[:, i] @ I[i].T
        f[:, i] = acc[:, i] @ I[i].T + force_cross(vel[:, i], h)
        if fl is not None:
            f[:, i] -= fl[:, i]
    tau = np.empty((B, model.nv), dtype=dtype)
    for i in range(L - 1, -1, -1):
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        tau[:, d0:d0 + nd] = f[:, i] @ model.link_S[i] + model.dof_armature[d0:d0 + nd] * a[:, d0:d0 + nd]
        lam = model.link_parent[i]
        if lam >= 0:
            f[:, lam] += np.einsum("bji,bj->bi", X[:, i], f[:, i])
    return tau, (X, vel, acc, f)


def rnea(model, q, v, a, fext=None):
    """Joint torques ``tau = M(q) a + c(q, v) - J^T fext`` (B, nv)."""
    return rnea_pass(model, q, v, a, fext)[0]


def bias_forces(model, q, v, fext=None):
    """Coriolis, centrifugal, gravity and external-force terms ``c(q, v) = rnea(q, v, 0)``."""
    return rnea(model, q, v, np.zeros_like(v), fext)
