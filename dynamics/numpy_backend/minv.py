"""Analytical inverse of the joint-space inertia matrix, O(n²), without factorising M.

This is the articulated-body recursion run on all ``nv`` unit torques at once, with velocity and
gravity set to zero (Carpentier, Saurel et al., "Analytical Inverse of the Joint Space Inertia
Matrix", 2018; the same backward-forward structure as Yang, Chen & Han 2023's MMinvGen, Algorithm 2): the
backward sweep builds the articulated inertias and the projected unit-torque forces ``F_i`` (6, nv);
the forward sweep propagates the resulting accelerations ``P_i`` (6, nv). Row block i of ``M^-1``
is ``D_i^-1 (E_i - S_i^T F_i - U_i^T X_i P_λ)``.
"""

from __future__ import annotations

import numpy as np

from .aba import _inv
from .transforms import link_transforms


def minv(model, q, X=None):
    """``M(q)^-1`` (B, nv, nv), symmetric."""
    if X is None:
        X, _, _ = link_transforms(model, q)
    B = X.shape[0]
    L, nv = model.nlinks, model.nv
    dtype = X.dtype
    IA = np.broadcast_to(model.link_inertia, (B, L, 6, 6)).astype(dtype, copy=True)
    F = np.zeros((B, L, 6, nv), dtype=dtype)
    U = [None] * L
    Dinv = [None] * L
    Mi = np.zeros((B, nv, nv), dtype=dtype)
    for i in range(L - 1, -1, -1):
        S = model.link_S[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        U[i] = IA[:, i] @ S
        Dinv[i] = _inv(S.T @ U[i] + np.diag(model.dof_armature[d0:d0 + nd]))
        u = -(S.T @ F[:, i])
        u[:, :, d0:d0 + nd] += np.eye(nd)
        Mi[:, d0:d0 + nd] = Dinv[i] @ u          # partial rows; completed in the forward sweep
        lam = model.link_parent[i]
        if lam >= 0:
            UD = U[i] @ Dinv[i]
            Ia = IA[:, i] - UD @ np.swapaxes(U[i], -1, -2)
            pa = F[:, i] + UD @ u
            Xt = np.swapaxes(X[:, i], -1, -2)
            IA[:, lam] += Xt @ Ia @ X[:, i]
            F[:, lam] += Xt @ pa
    P = np.zeros((B, L, 6, nv), dtype=dtype)
    for i in range(L):
        lam = model.link_parent[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        if lam >= 0:
            Pi = X[:, i] @ P[:, lam]
            Mi[:, d0:d0 + nd] -= Dinv[i] @ np.swapaxes(U[i], -1, -2) @ Pi
        else:
            Pi = np.zeros((B, 6, nv), dtype=dtype)
        P[:, i] = Pi + model.link_S[i] @ Mi[:, d0:d0 + nd]
    return Mi
