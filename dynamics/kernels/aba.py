"""Compiled Articulated Body Algorithm (Featherstone RBDA Table 7.1) in world coordinates, joint
armature added to the joint-space inertia ``D`` as MuJoCo does.

With every quantity expressed at the world origin (:mod:`.world`), the recursions need no spatial
transforms: ``I^A_λ += I^A_i - U_i D_i^-1 U_i^T``, ``p^A_λ += p^a_i`` and ``a'_i = a_λ + c_i``.
The passes are shared with the analytical ``M^-1`` (:mod:`.minv`) and the fused forward-dynamics
derivatives (:mod:`.aba_derivatives`): the articulated inertias depend on ``q`` only.

Per-link joint matrices are stored with one 6-vector per joint dof: ``U[i, k] = I^A_i J_d``
(d = dofadr_i + k), ``UD[i, k] = (U_i D_i^-1)[:, k]``, ``Dinv[i]`` (nd x nd block of a 6x6).
"""

from __future__ import annotations

import numpy as np

from .jit import jit, jit_inline
from .packing import LF_ARM, LI_DOFADR, LI_NV, LI_PARENT
from .rnea import link_external_forces
from .scratch import buffer
from .spatial import dense_inertia, force_cross, force_to_parent, inertia_mul, mot_cross, spd_inverse
from .state_scratch import ARTICULATED, articulated_views, motion_views, placement_views
from .world import world_inertias, world_kinematics


@jit
def articulated_inertias(li, lf, oY, J, IA, U, UD, Dinv, tmp66, chol):
    """Backward inertia pass from the world rigid-body inertias ``oY``: articulated inertias ``IA``
    (L, 6, 6), ``U``, ``U D^-1`` (L, 6, 6) and ``D^-1`` (L, 6, 6)."""
    L = li.shape[0]
    for i in range(L):
        dense_inertia(oY, i, IA[i])
    for i in range(L - 1, -1, -1):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        lam = li[i, LI_PARENT]
        if nd == 1:  # hinge/slide: scalar D, operands in registers
            j0, j1, j2, j3, j4, j5 = J[d0, 0], J[d0, 1], J[d0, 2], J[d0, 3], J[d0, 4], J[d0, 5]
            for r in range(6):
                U[i, 0, r] = (IA[i, r, 0] * j0 + IA[i, r, 1] * j1 + IA[i, r, 2] * j2 + IA[i, r, 3] * j3
                              + IA[i, r, 4] * j4 + IA[i, r, 5] * j5)
            di = 1.0 / (j0 * U[i, 0, 0] + j1 * U[i, 0, 1] + j2 * U[i, 0, 2] + j3 * U[i, 0, 3] + j4 * U[i, 0, 4]
                        + j5 * U[i, 0, 5] + lf[i, LF_ARM])
            Dinv[i, 0, 0] = di
            for r in range(6):
                UD[i, 0, r] = U[i, 0, r] * di
            if lam >= 0:
                for r in range(6):
                    ur = UD[i, 0, r]
                    for c in range(6):
                        IA[lam, r, c] += IA[i, r, c] - ur * U[i, 0, c]
            continue
        for k in range(nd):
            for r in range(6):
                s = 0.0
                for c in range(6):
                    s += IA[i, r, c] * J[d0 + k, c]
                U[i, k, r] = s
        for k in range(nd):          # D = J^T U + armature
            for k2 in range(nd):
                s = 0.0
                for r in range(6):
                    s += J[d0 + k2, r] * U[i, k, r]
                tmp66[k2, k] = s
            tmp66[k, k] += lf[i, LF_ARM + k]
        spd_inverse(tmp66, nd, chol, Dinv[i])
        for k in range(nd):
            for r in range(6):
                s = 0.0
                for j in range(nd):
                    s += U[i, j, r] * Dinv[i, j, k]
                UD[i, k, r] = s
        if lam >= 0:
            for r in range(6):
                for c in range(6):
                    s = IA[i, r, c]
                    for k in range(nd):
                        s -= UD[i, k, r] * U[i, k, c]
                    IA[lam, r, c] += s


@jit
def bias_forces(li, oY, ov, vJ, has_fext, fl, oR, op, cb, pA, tmp):
    """Velocity-product accelerations ``c_i = ov_i x vJ_i`` and bias forces
    ``p^A_i = ov_i x* (oY_i ov_i) - f_ext,i`` (world, (L, 6))."""
    h = tmp[0]
    t = tmp[1]
    for i in range(li.shape[0]):
        mot_cross(ov[i], vJ[i], cb[i])
        inertia_mul(oY, i, ov[i], h)
        force_cross(ov[i], h, pA[i])
        if has_fext:
            force_to_parent(oR[i], op[i], fl[i], t)
            for r in range(6):
                pA[i, r] -= t[r]


@jit
def _joint_residual(li, i, U, u, x, w):
    """``w[:nd] = u_i - U_iᵀ x[i]`` for the nd dofs of link ``i``'s joint: the joint-space residual both
    of ABA's passes form, from ``x = c`` (bias pass) or ``x = a'`` (acceleration pass), (L, 6)."""
    d0 = li[i, LI_DOFADR]
    for k in range(li[i, LI_NV]):
        s = u[d0 + k]
        for r in range(6):
            s -= U[i, k, r] * x[i, r]
        w[k] = s


@jit
def _bias_joint(li, i, J, tau, IA, U, UD, cb, pA, u):
    """:func:`aba_bias_pass`'s step at link ``i`` for a joint of any number of dofs."""
    d0 = li[i, LI_DOFADR]
    nd = li[i, LI_NV]
    for k in range(nd):
        s = 0.0
        for r in range(6):
            s += J[d0 + k, r] * pA[i, r]
        u[d0 + k] = tau[d0 + k] - s
    lam = li[i, LI_PARENT]
    if lam >= 0:
        w = np.empty(6)
        _joint_residual(li, i, U, u, cb, w)
        for r in range(6):
            s = pA[i, r]
            for c in range(6):
                s += IA[i, r, c] * cb[i, c]
            for k in range(nd):
                s += UD[i, k, r] * w[k]
            pA[lam, r] += s


@jit
def aba_bias_pass(li, J, tau, IA, U, UD, cb, pA, u):
    """Backward bias pass: ``u_i = tau_i - J_i^T p^A_i``;
    ``p^A_λ += p^A_i + I^A_i c_i + U_i D_i^-1 (u_i - U_i^T c_i)``."""
    for i in range(li.shape[0] - 1, -1, -1):
        lam = li[i, LI_PARENT]
        if li[i, LI_NV] != 1 or lam < 0:
            _bias_joint(li, i, J, tau, IA, U, UD, cb, pA, u)
            continue
        # hinge/slide with a parent: scalar u_i, operands in registers
        d0 = li[i, LI_DOFADR]
        ui = tau[d0] - (J[d0, 0] * pA[i, 0] + J[d0, 1] * pA[i, 1] + J[d0, 2] * pA[i, 2] + J[d0, 3] * pA[i, 3]
                        + J[d0, 4] * pA[i, 4] + J[d0, 5] * pA[i, 5])
        u[d0] = ui
        c0, c1, c2, c3, c4, c5 = cb[i, 0], cb[i, 1], cb[i, 2], cb[i, 3], cb[i, 4], cb[i, 5]
        w = ui - (U[i, 0, 0] * c0 + U[i, 0, 1] * c1 + U[i, 0, 2] * c2 + U[i, 0, 3] * c3 + U[i, 0, 4] * c4
                  + U[i, 0, 5] * c5)
        for r in range(6):
            pA[lam, r] += (pA[i, r] + IA[i, r, 0] * c0 + IA[i, r, 1] * c1 + IA[i, r, 2] * c2 + IA[i, r, 3] * c3
                           + IA[i, r, 4] * c4 + IA[i, r, 5] * c5 + UD[i, 0, r] * w)


@jit
def _acceleration_joint(li, i, Dinv, U, J, u, qdd, oa):
    """:func:`aba_acceleration_pass`'s joint step at link ``i`` (``oa[i]`` holds ``a'_i``) for a joint
    of any number of dofs."""
    d0 = li[i, LI_DOFADR]
    nd = li[i, LI_NV]
    w = np.empty(6)
    _joint_residual(li, i, U, u, oa, w)
    for k in range(nd):
        s = 0.0
        for j in range(nd):
            s += Dinv[i, k, j] * w[j]
        qdd[d0 + k] = s
    for r in range(6):
        s = 0.0
        for k in range(nd):
            s += J[d0 + k, r] * qdd[d0 + k]
        oa[i, r] += s


@jit
def aba_acceleration_pass(li, gv, J, U, Dinv, cb, u, qdd, oa):
    """Forward pass: ``a'_i = a_λ + c_i`` (``a_λ = -g`` at the root), ``qdd_i = D_i^-1 (u_i - U_i^T a'_i)``,
    ``a_i = a'_i + J_i qdd_i`` (world accelerations ``oa`` (L, 6), gravity included)."""
    for i in range(li.shape[0]):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        if lam < 0:
            for r in range(3):
                oa[i, r] = cb[i, r] - gv[r]
                oa[i, 3 + r] = cb[i, 3 + r]
        else:
            for r in range(6):
                oa[i, r] = oa[lam, r] + cb[i, r]
        if li[i, LI_NV] != 1:
            _acceleration_joint(li, i, Dinv, U, J, u, qdd, oa)
            continue
        # hinge/slide: scalar D
        x = Dinv[i, 0, 0] * (u[d0] - (U[i, 0, 0] * oa[i, 0] + U[i, 0, 1] * oa[i, 1] + U[i, 0, 2] * oa[i, 2]
                                      + U[i, 0, 3] * oa[i, 3] + U[i, 0, 4] * oa[i, 4] + U[i, 0, 5] * oa[i, 5]))
        qdd[d0] = x
        for r in range(6):
            oa[i, r] += J[d0, r] * x


#: scratch of :func:`aba_range` and :func:`aba_state`: one state's work arrays
ABA_SCRATCH = ARTICULATED
_ABA = ABA_SCRATCH.spec


@jit_inline
def aba_passes(li, lf, gv, q, v, tau, has_fext, qdd, placements, motion, articulated):
    """``qdd`` (nv,) of one state q (nq,), v, tau (nv,): the passes of ABA, in the work arrays of an
    :data:`ABA_SCRATCH` buffer (:func:`.state_scratch.placement_views`, ``motion_views``,
    ``articulated_views``), with the per-link external forces already in ``fl`` when ``has_fext``."""
    R, p, oR, op, fl, tmp = placements
    J, ov, vJ, oY = motion
    IA, U, UD, Dinv, tmp66, chol, cb, pA, oa, u = articulated
    world_kinematics(li, lf, q, v, R, p, oR, op, J, ov, vJ, tmp[0])
    world_inertias(li, lf, oR, op, oY)
    bias_forces(li, oY, ov, vJ, has_fext, fl, oR, op, cb, pA, tmp)
    articulated_inertias(li, lf, oY, J, IA, U, UD, Dinv, tmp66, chol)
    aba_bias_pass(li, J, tau, IA, U, UD, cb, pA, u)
    aba_acceleration_pass(li, gv, J, U, Dinv, cb, u, qdd, oa)


@jit
def aba_range(li, lf, gv, bl, bf, q, v, tau, fext, qdd, start, stop):
    """``qdd`` (B, nv) for q (B, nq), v, tau (B, nv); fext (B, nbody, 6) or (0, nbody, 6) for none.
    States ``start`` to ``stop - 1``, on the calling thread."""
    _aba_range(buffer(_ABA.total, li.shape[0], tau.shape[1]), li, lf, gv, bl, bf, q, v, tau, fext, qdd, start, stop)


@jit
def _aba_range(buf, li, lf, gv, bl, bf, q, v, tau, fext, qdd, start, stop):
    """:func:`aba_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = tau.shape[1]
    placements = placement_views(buf, L, nv)
    motion, articulated = motion_views(buf, L, nv), articulated_views(buf, L, nv)
    fl = placements[4]
    has_fext = fext.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        aba_passes(li, lf, gv, q[b], v[b], tau[b], has_fext, qdd[b], placements, motion, articulated)


@jit
def _aba_one(buf, li, lf, gv, q, v, tau, qdd):
    """:func:`aba_passes` on one state without external forces, in the scratch ``buf``."""
    L = li.shape[0]
    nv = tau.shape[0]
    aba_passes(li, lf, gv, q, v, tau, False, qdd, placement_views(buf, L, nv), motion_views(buf, L, nv),
               articulated_views(buf, L, nv))


@jit
def aba_state(li, lf, gv, q, v, tau, qdd):
    """``qdd`` for one state without external forces: q (nq,), v, tau, qdd (nv,), or a batch of one
    ((1, nq), (1, nv)); returns whether every entry of ``qdd`` is finite. The single-state entry
    point: :func:`aba_range`'s passes without its batch range and external-force arguments
    (each argument costs the caller an unboxing), and the finiteness check the caller would
    otherwise make in Python."""
    if q.ndim == 2:      # a batch of one (numba resolves ndim when it compiles: one branch is kept)
        q1, v1, tau1, qdd1 = q[0], v[0], tau[0], qdd[0]
    else:
        q1, v1, tau1, qdd1 = q, v, tau, qdd
    nv = tau1.shape[0]
    _aba_one(buffer(_ABA.total, li.shape[0], nv), li, lf, gv, q1, v1, tau1, qdd1)
    for k in range(nv):
        if not np.isfinite(qdd1[k]):
            return False
    return True
