"""Composite Rigid Body Algorithm for the joint-space inertia matrix (Featherstone, RBDA Table 6.2),
armature added on the diagonal as in MuJoCo."""

from __future__ import annotations

import numpy as np

from .transforms import link_transforms


def composite_inertias(model, X: np.ndarray) -> np.ndarray:
    """Composite (subtree) spatial inertias in link frames (B, L, 6, 6)."""
    B = X.shape[0]
    Ic = np.broadcast_to(model.link_inertia, (B,) + model.link_inertia.shape).astype(X.dtype, copy=True)
    for i in range(model.nlinks - 1, -1, -1):
        lam = model.link_parent[i]
        if lam >= 0:
            Ic[:, lam] += np.swapaxes(X[:, i], -1, -2) @ Ic[:, i] @ X[:, i]
    return Ic


def crba(model, q, X=None):
    """Joint-space inertia matrix M(q) (B, nv, nv), symmetric, including armature."""
    if X is None:
        X, _, _ = link_transforms(model, q)
    B = X.shape[0]
    Ic = composite_inertias(model, X)
    M = np.zeros((B, model.nv, model.nv), dtype=X.dtype)
    for i in range(model.nlinks):
        S = model.link_S[i]
        di = slice(model.link_dofadr[i], model.link_dofadr[i] + model.link_nv[i])
        F = Ic[:, i] @ S  # (B, 6, nd)
        M[:, di, di] = S.T @ F + np.diag(model.dof_armature[di])
        j = i
        while model.link_parent[j] >= 0:
            F = np.swapaxes(X[:, j], -1, -2) @ F
            j = model.link_parent[j]
            dj = slice(model.link_dofadr[j], model.link_dofadr[j] + model.link_nv[j])
            blk = model.link_S[j].T @ F
            M[:, dj, di] = blk
            M[:, di, dj] = np.swapaxes(blk, -1, -2)
    return M
