"""First-order partial derivatives of inverse dynamics, ∂τ/∂q and ∂τ/∂v.

Plancher et al. 2021, Algorithm 2 (∇RNEA): the RNEA forward and backward sweeps are differentiated column by
column, all nv columns at once. Because every motion subspace is constant in its child frame, the
derivative of a parent-to-child transform along joint i's tangent is ``∂(X_i y)/∂q_i = (X_i y) × S_i``
and that of the force transform is ``∂(X_i^T f)/∂q_i = X_i^T (S_i ×* f)``. Configuration derivatives
are along the local tangent perturbation ``q ⊕ δ`` (docs/conventions.md).
"""

from __future__ import annotations

import numpy as np

from ..spatial import force_cross_matrix, force_cross_rhs_matrix, motion_cross_matrix
from .rnea import rnea_pass
from .transforms import gravity_acceleration


def rnea_derivatives(model, q, v, a, fext=None):
    """Returns ``(dtau_dq, dtau_dv)``, each (B, nv, nv), rows = torque, columns = variable."""
    tau, (X, vel, acc, f) = rnea_pass(model, q, v, a, fext)
    B, L, nv = q.shape[0], model.nlinks, model.nv
    dtype = vel.dtype
    a0 = gravity_acceleration(model, B, dtype)
    I = model.link_inertia
    dv_dq = np.zeros((B, L, 6, nv), dtype=dtype)
    dv_dv = np.zeros((B, L, 6, nv), dtype=dtype)
    da_dq = np.zeros((B, L, 6, nv), dtype=dtype)
    da_dv = np.zeros((B, L, 6, nv), dtype=dtype)
    df_dq = np.zeros((B, L, 6, nv), dtype=dtype)
    df_dv = np.zeros((B, L, 6, nv), dtype=dtype)
    for i in range(L):
        lam = model.link_parent[i]
        S = model.link_S[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        cols = slice(d0, d0 + nd)
        Xi = X[:, i]
        vJ = v[:, cols] @ S.T
        if lam >= 0:
            Xv = np.einsum("bij,bj->bi", Xi, vel[:, lam])
            Xa = np.einsum("bij,bj->bi", Xi, acc[:, lam])
            dv_dq[:, i] = Xi @ dv_dq[:, lam]
            dv_dv[:, i] = Xi @ dv_dv[:, lam]
            da_dq[:, i] = Xi @ da_dq[:, lam]
            da_dv[:, i] = Xi @ da_dv[:, lam]
            dv_dq[:, i, :, cols] += motion_cross_matrix(Xv) @ S
        else:
            Xa = np.einsum("bij,bj->bi", Xi, a0)
        dv_dv[:, i, :, cols] += S
        da_dq[:, i, :, cols] += motion_cross_matrix(Xa) @ S
        # d(v_i x vJ): the v_i factor varies with both q and v, vJ with v only
        cvJ = motion_cross_matrix(vJ)
        da_dq[:, i] -= cvJ @ dv_dq[:, i]
        da_dv[:, i] -= cvJ @ dv_dv[:, i]
        da_dv[:, i, :, cols] += motion_cross_matrix(vel[:, i]) @ S
        # f_i = I a_i + v_i x* (I v_i)
        G = force_cross_matrix(vel[:, i]) @ I[i] + force_cross_rhs_matrix(vel[:, i] @ I[i].T)
        df_dq[:, i] = I[i] @ da_dq[:, i] + G @ dv_dq[:, i]
        df_dv[:, i] = I[i] @ da_dv[:, i] + G @ dv_dv[:, i]
    dtau_dq = np.empty((B, nv, nv), dtype=dtype)
    dtau_dv = np.empty((B, nv, nv), dtype=dtype)
    for i in range(L - 1, -1, -1):
        S = model.link_S[i]
        d0, nd = model.link_dofadr[i], model.link_nv[i]
        cols = slice(d0, d0 + nd)
        dtau_dq[:, cols] = S.T @ df_dq[:, i]
        dtau_dv[:, cols] = S.T @ df_dv[:, i]
        lam = model.link_parent[i]
        if lam >= 0:
            Xt = np.swapaxes(X[:, i], -1, -2)
            df_dq[:, lam] += Xt @ df_dq[:, i]
            df_dv[:, lam] += Xt @ df_dv[:, i]
            df_dq[:, lam, :, cols] += Xt @ (force_cross_rhs_matrix(f[:, i]) @ S)
    return dtau_dq, dtau_dv
