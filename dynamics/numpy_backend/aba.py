"""Articulated Body Algorithm for forward dynamics (Featherstone, RBDA Table 7.1), with joint
armature added to the articulated joint inertia ``D`` as MuJoCo does."""

from __future__ import annotations

import numpy as np

from ..spatial import force_cross, motion_cross
from .transforms import gravity_acceleration, pass_inputs


def _inv(D: np.ndarray) -> np.ndarray:
    if D.shape[-1] == 1:
        return 1.0 / D
    return np.linalg.inv(D)


def aba(model, q, v, tau, fext=None, X=None):
    """Joint accelerations ``a = M^-1 (tau - c)`` (B, nv) in O(n)."""
    B, L, dtype, X, fl = pass_inputs(model, q, v, tau, fext, X)
    vel = np.zeros((B, L, 6), dtype=dtype)
    c = np.zeros((B, L, 6), dtype=dtype)
    IA = np.broadcast_to(model.link_inertia, (B, L, 6, 6)).astype(dtype, copy=True)
    pA = np.zeros((B, L, 6), dtype=dtype)
    for i in range(L):
        lam = model.link_parent[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        vJ = v[:, d0:d0 + nd] @ model.link_S[i].T
        if lam < 0:
            vel[:, i] = vJ
        else:
            vel[:, i] = np.einsum("bij,bj->bi", X[:, i], vel[:, lam]) + vJ
            c[:, i] = motion_cross(vel[:, i], vJ)
        pA[:, i] = force_cross(vel[:, i], vel[:, i] @ model.link_inertia[i].T)
        if fl is not None:
            pA[:, i] -= fl[:, i]
    U = [None] * L
    Dinv = [None] * L
    u = [None] * L
    for i in range(L - 1, -1, -1):
        S = model.link_S[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        U[i] = IA[:, i] @ S
        D = S.T @ U[i] + np.diag(model.dof_armature[d0:d0 + nd])
        Dinv[i] = _inv(D)
        u[i] = tau[:, d0:d0 + nd] - pA[:, i] @ S
        lam = model.link_parent[i]
        if lam >= 0:
            UD = U[i] @ Dinv[i]
            Ia = IA[:, i] - UD @ np.swapaxes(U[i], -1, -2)
            pa = pA[:, i] + np.einsum("bij,bj->bi", Ia, c[:, i]) + np.einsum("bij,bj->bi", UD, u[i])
            Xt = np.swapaxes(X[:, i], -1, -2)
            IA[:, lam] += Xt @ Ia @ X[:, i]
            pA[:, lam] += np.einsum("bij,bj->bi", Xt, pa)
    acc = np.zeros((B, L, 6), dtype=dtype)
    qdd = np.empty((B, model.nv), dtype=dtype)
    a0 = gravity_acceleration(model, B, dtype)
    for i in range(L):
        lam = model.link_parent[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        ap = a0 if lam < 0 else acc[:, lam]
        ai = np.einsum("bij,bj->bi", X[:, i], ap) + c[:, i]
        qi = np.einsum("bij,bj->bi", Dinv[i], u[i] - np.einsum("bji,bj->bi", U[i], ai))
        qdd[:, d0:d0 + nd] = qi
        acc[:, i] = ai + qi @ model.link_S[i].T
    return qdd
