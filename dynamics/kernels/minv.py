"""Compiled analytical ``M(q)^-1`` without factorising M (Carpentier, Saurel et al., "Analytical
Inverse of the Joint Space Inertia Matrix", 2018; the backward-forward structure of MMinvGen,
Yang, Chen & Han 2023 (Dadu-RBD) Algorithm 2), as :mod:`dynamics.numpy_backend.minv`, in world coordinates.

The articulated-body recursion runs on all unit torques at once with the articulated inertias of
:func:`.aba.articulated_inertias`. Structured sparsity: the backward forces ``F_i`` only have
columns in the (contiguous) dof range of the subtree of link ``i``; the forward accelerations
``P_i`` are only propagated for columns ``>= dofadr_i``, which yields the upper triangle of the
symmetric ``M^-1``; the lower triangle is copied at the end.

Per-dof spatial columns are stored as (L, nv, 6) arrays (column ``c`` of link ``i`` contiguous).
"""

from __future__ import annotations

import numpy as np

from .aba import articulated_inertias
from .jit import jit, jit_inline
from .packing import LI_DOFADR, LI_NV, LI_PARENT, LI_SUBEND
from .scratch import DOFS, LINKS, buffer, view3
from .state_scratch import ARTICULATED, articulated_views, motion_views, placement_views
from .world import world_inertias, world_kinematics


@jit
def minv_backward(li, J, UD, Dinv, F, Mi):
    """Unit-torque backward pass: rows ``D_i^-1 (E_i - J_i^T F_i)`` of ``M^-1`` on the subtree columns,
    and ``F_λ += F_i + U_i D_i^-1 (E_i - J_i^T F_i)``. ``Mi`` must be zero on entry."""
    L = li.shape[0]
    w = np.empty(6)
    for i in range(L):
        for c in range(li[i, LI_DOFADR], li[i, LI_SUBEND]):
            for r in range(6):
                F[i, c, r] = 0.0
    for i in range(L - 1, -1, -1):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        lam = li[i, LI_PARENT]
        e = li[i, LI_SUBEND]
        if nd == 1:  # hinge/slide: scalar D, operands hoisted out of the column loop
            j0, j1, j2, j3, j4, j5 = J[d0, 0], J[d0, 1], J[d0, 2], J[d0, 3], J[d0, 4], J[d0, 5]
            g0, g1, g2, g3, g4, g5 = UD[i, 0, 0], UD[i, 0, 1], UD[i, 0, 2], UD[i, 0, 3], UD[i, 0, 4], UD[i, 0, 5]
            di = Dinv[i, 0, 0]
            for c in range(d0, e):
                f0, f1, f2, f3, f4, f5 = F[i, c, 0], F[i, c, 1], F[i, c, 2], F[i, c, 3], F[i, c, 4], F[i, c, 5]
                wc = (1.0 if c == d0 else 0.0) - (j0 * f0 + j1 * f1 + j2 * f2 + j3 * f3 + j4 * f4 + j5 * f5)
                Mi[d0, c] = di * wc
                if lam >= 0:
                    F[lam, c, 0] += f0 + g0 * wc
                    F[lam, c, 1] += f1 + g1 * wc
                    F[lam, c, 2] += f2 + g2 * wc
                    F[lam, c, 3] += f3 + g3 * wc
                    F[lam, c, 4] += f4 + g4 * wc
                    F[lam, c, 5] += f5 + g5 * wc
            continue
        for c in range(d0, e):
            for k in range(nd):
                s = 1.0 if c == d0 + k else 0.0
                for r in range(6):
                    s -= J[d0 + k, r] * F[i, c, r]
                w[k] = s
            for k in range(nd):
                s = 0.0
                for j in range(nd):
                    s += Dinv[i, k, j] * w[j]
                Mi[d0 + k, c] = s
            if lam >= 0:
                for r in range(6):
                    s = F[i, c, r]
                    for k in range(nd):
                        s += UD[i, k, r] * w[k]
                    F[lam, c, r] += s


@jit
def minv_forward(li, J, U, Dinv, P, Mi):
    """Forward pass on the columns ``c >= dofadr_i``: ``M^-1_i -= D_i^-1 U_i^T P_λ``,
    ``P_i = P_λ + J_i M^-1_i``; then the lower triangle is filled by symmetry."""
    L = li.shape[0]
    nv = Mi.shape[0]
    w = np.empty(6)
    for i in range(L):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        lam = li[i, LI_PARENT]
        if nd == 1:  # hinge/slide: scalar D, operands hoisted out of the column loop
            j0, j1, j2, j3, j4, j5 = J[d0, 0], J[d0, 1], J[d0, 2], J[d0, 3], J[d0, 4], J[d0, 5]
            if lam < 0:
                for c in range(d0, nv):
                    m = Mi[d0, c]
                    P[i, c, 0] = j0 * m
                    P[i, c, 1] = j1 * m
                    P[i, c, 2] = j2 * m
                    P[i, c, 3] = j3 * m
                    P[i, c, 4] = j4 * m
                    P[i, c, 5] = j5 * m
                continue
            u0, u1, u2, u3, u4, u5 = U[i, 0, 0], U[i, 0, 1], U[i, 0, 2], U[i, 0, 3], U[i, 0, 4], U[i, 0, 5]
            di = Dinv[i, 0, 0]
            for c in range(d0, nv):
                x0, x1, x2 = P[lam, c, 0], P[lam, c, 1], P[lam, c, 2]
                x3, x4, x5 = P[lam, c, 3], P[lam, c, 4], P[lam, c, 5]
                m = Mi[d0, c] - di * (u0 * x0 + u1 * x1 + u2 * x2 + u3 * x3 + u4 * x4 + u5 * x5)
                Mi[d0, c] = m
                P[i, c, 0] = x0 + j0 * m
                P[i, c, 1] = x1 + j1 * m
                P[i, c, 2] = x2 + j2 * m
                P[i, c, 3] = x3 + j3 * m
                P[i, c, 4] = x4 + j4 * m
                P[i, c, 5] = x5 + j5 * m
            continue
        for c in range(d0, nv):
            if lam >= 0:
                for k in range(nd):
                    s = 0.0
                    for r in range(6):
                        s += U[i, k, r] * P[lam, c, r]
                    w[k] = s
                for k in range(nd):
                    s = Mi[d0 + k, c]
                    for j in range(nd):
                        s -= Dinv[i, k, j] * w[j]
                    Mi[d0 + k, c] = s
            for r in range(6):
                s = P[lam, c, r] if lam >= 0 else 0.0
                for k in range(nd):
                    s += J[d0 + k, r] * Mi[d0 + k, c]
                P[i, c, r] = s
    for i in range(L):
        d0 = li[i, LI_DOFADR]
        for k in range(li[i, LI_NV]):
            for c in range(d0):
                Mi[d0 + k, c] = Mi[c, d0 + k]


@jit_inline
def minv_passes(li, J, U, UD, Dinv, F, P, Mi):
    """``M^-1`` (nv, nv) into ``Mi`` from ABA's articulated quantities (:func:`.aba.articulated_inertias`);
    ``F``, ``P`` (L, nv, 6) scratch."""
    nv = Mi.shape[0]
    for r in range(nv):
        for c in range(nv):
            Mi[r, c] = 0.0
    minv_backward(li, J, UD, Dinv, F, Mi)
    minv_forward(li, J, U, Dinv, P, Mi)


#: scratch of :func:`minv_range`: one state's work arrays
MINV_SCRATCH = ARTICULATED.then(
    ("F", (LINKS, DOFS, 6)),
    ("P", (LINKS, DOFS, 6)),
)
_MINV = MINV_SCRATCH.spec


@jit_inline
def minv_state_passes(li, lf, oR, op, J, oY, IA, U, UD, Dinv, tmp66, chol, F, P, Mb):
    """One state's ``M^-1`` into ``Mb`` (nv, nv) from its world placements ``oR`` (L, 3, 3), ``op``
    (L, 3) (origin at link 0) and world columns ``J`` (nv, 6) (:func:`.world.world_kinematics`);
    the other arrays are the work arrays of :data:`MINV_SCRATCH`."""
    world_inertias(li, lf, oR, op, oY)
    articulated_inertias(li, lf, oY, J, IA, U, UD, Dinv, tmp66, chol)
    minv_passes(li, J, U, UD, Dinv, F, P, Mb)


@jit
def minv_range(li, lf, q, Mi, start, stop):
    """``M^-1`` (B, nv, nv) for q (B, nq). States ``start`` to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = Mi.shape[1]
    _minv_range(buffer(_MINV.total, L, nv), li, lf, q, Mi, start, stop)


@jit
def _minv_range(buf, li, lf, q, Mi, start, stop):
    """:func:`minv_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = Mi.shape[1]
    R, p, oR, op, _, tmp = placement_views(buf, L, nv)
    J, _, _, oY = motion_views(buf, L, nv)
    IA, U, UD, Dinv, tmp66, chol, _, _, _, _ = articulated_views(buf, L, nv)
    F = view3(buf, _MINV.F, L, nv)
    P = view3(buf, _MINV.P, L, nv)
    t = tmp[0]
    no_v = buf[:0]
    # minv_state_passes written out around minv_passes: a loop calling it, inlined or not, measured slower
    # (docs/backends.md, contact dynamics)
    for b in range(start, stop):
        world_kinematics(li, lf, q[b], no_v, R, p, oR, op, J, oY, oY, t)  # (no velocities)
        world_inertias(li, lf, oR, op, oY)
        articulated_inertias(li, lf, oY, J, IA, U, UD, Dinv, tmp66, chol)
        minv_passes(li, J, U, UD, Dinv, F, P, Mi[b])
