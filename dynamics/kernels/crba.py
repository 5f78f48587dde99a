"""Compiled Composite Rigid Body Algorithm (Featherstone RBDA Table 6.2) in world coordinates,
armature on the diagonal.

Composite inertias are accumulated at the world origin in compact rigid-body form (13 additions per
link, :mod:`.world`); the column ``F_d = I^c_i J_d`` of each dof is computed once, and
``M[d, c] = J_d^T F_c`` for the dofs ``c`` of the subtree of link ``i`` (every other entry of the
rows of ``i`` is zero).
"""

from __future__ import annotations

from .jit import jit
from .packing import LF_ARM, LI_DOFADR, LI_NV, LI_PARENT, LI_SUBEND
from .scratch import DOFS, buffer, view2
from .spatial import inertia_mul
from .state_scratch import MOTION, motion_views, placement_views
from .world import world_inertias, world_kinematics


@jit
def crba_pass(li, lf, oY, J, F, M):
    """``M`` (nv, nv) from the world inertias ``oY`` (turned into composite inertias) and columns
    ``J``; ``F`` is (nv, 6) scratch."""
    nv = M.shape[0]
    for r in range(nv):
        for c in range(nv):
            M[r, c] = 0.0
    for i in range(li.shape[0] - 1, -1, -1):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        for k in range(nd):
            inertia_mul(oY, i, J[d0 + k], F[d0 + k])
        for k in range(nd):
            d = d0 + k
            for c in range(d, li[i, LI_SUBEND]):
                s = 0.0
                for r in range(6):
                    s += J[d, r] * F[c, r]
                M[d, c] = s
                M[c, d] = s
            M[d, d] += lf[i, LF_ARM + k]
        lam = li[i, LI_PARENT]
        if lam >= 0:
            for k in range(13):
                oY[lam, k] += oY[i, k]


#: scratch of :func:`crba_range`: one state's work arrays
CRBA_SCRATCH = MOTION.then(
    ("F", (DOFS, 6)),
)
_CRBA = CRBA_SCRATCH.spec


@jit
def crba_range(li, lf, q, M, start, stop):
    """``M`` (B, nv, nv) for q (B, nq). States ``start`` to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = M.shape[1]
    _crba_range(buffer(_CRBA.total, L, nv), li, lf, q, M, start, stop)


@jit
def _crba_range(buf, li, lf, q, M, start, stop):
    """:func:`crba_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = M.shape[1]
    R, p, oR, op, _, tmp = placement_views(buf, L, nv)
    J, _, _, oY = motion_views(buf, L, nv)
    F = view2(buf, _CRBA.F, L, nv)
    t = tmp[0]
    no_v = buf[:0]
    for b in range(start, stop):
        world_kinematics(li, lf, q[b], no_v, R, p, oR, op, J, oY, oY, t)  # (no velocities)
        world_inertias(li, lf, oR, op, oY)
        crba_pass(li, lf, oY, J, F, M[b])
