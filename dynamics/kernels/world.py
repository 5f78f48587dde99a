"""World-frame quantities shared by the compiled world-frame algorithms (CRBA, ABA, ``M^-1`` and the
RNEA derivatives).

Expressing every link quantity in world coordinates (at the world origin) removes the per-link
spatial transforms from the recursions: a parent accumulates its children's (articulated)
inertias and forces, and a child inherits its parent's acceleration, by plain addition. This is
the formulation Pinocchio uses for its derivatives and ``M^-1`` (Carpentier & Mansard 2018;
Carpentier, Saurel et al. 2018). A per-dof column ``J_d = Ad(oM_i) S_d``
is computed once and reused by every pass; only the motion subspaces (constant in the child frame)
and the link inertias are transformed, once per link and state.

"World" here means world axes with the origin at link 0's origin (a translated inertial frame,
which changes no result but keeps precision far from the world origin).

Arrays: ``J`` (nv, 6) world motion-subspace columns; ``ov`` (L, 6) world spatial velocities;
``vJ`` (L, 6) world joint velocities ``J_i qd_i``; ``oY`` (L, 13) compact world inertias.
"""

from __future__ import annotations


from .jit import jit, jit_inline
from .joints import all_placements, world_placements
from .packing import LF_ST, LI_DOFADR, LI_NV, LI_PARENT
from .spatial import inertia_to_parent_add, mot_cross, mot_to_parent


@jit
def world_kinematics(li, lf, q, v, R, p, oR, op, J, ov, vJ, t):
    """Link placements (parent ``R``, ``p``; world-aligned ``oR``, ``op`` relative to the origin of link
    0), world columns ``J`` and, for
    ``v`` of length nv (pass an empty ``v`` to skip), world velocities ``ov`` and joint velocities
    ``vJ``. ``t`` is (6,) scratch."""
    all_placements(li, lf, q, R, p)
    world_placements(li, R, p, oR, op)
    world_columns(li, lf, v, oR, op, J, ov, vJ, t)


@jit_inline
def world_columns(li, lf, v, oR, op, J, ov, vJ, t):
    """:func:`world_kinematics` after the placements: ``op`` (L, 3) moved in place to the origin of
    link 0, the world columns ``J`` and, for ``v`` of length nv (empty to skip), ``ov`` and ``vJ``."""
    # Shift the origin to link 0 (the floating base, if any): every result is independent of the
    # inertial frame used, and inertias about a nearby origin keep their precision when the robot
    # is far from the world origin.
    if li.shape[0] == 0:
        return
    o0, o1, o2 = op[0, 0], op[0, 1], op[0, 2]
    for i in range(li.shape[0]):
        op[i, 0] -= o0
        op[i, 1] -= o1
        op[i, 2] -= o2
    with_v = v.shape[0] > 0
    for i in range(li.shape[0]):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        for k in range(nd):
            for r in range(6):
                t[r] = lf[i, LF_ST + 6 * k + r]
            mot_to_parent(oR[i], op[i], t, J[d0 + k])
        if with_v:
            lam = li[i, LI_PARENT]
            for r in range(6):
                s = 0.0
                for k in range(nd):
                    s += J[d0 + k, r] * v[d0 + k]
                vJ[i, r] = s
                ov[i, r] = s if lam < 0 else ov[lam, r] + s


@jit
def world_inertias(li, lf, oR, op, oY):
    """World rigid-body inertias ``oY`` (L, 13), compact form, about the world origin."""
    for i in range(li.shape[0]):
        for k in range(13):
            oY[i, k] = 0.0
        inertia_to_parent_add(lf, i, oR[i], op[i], oY, i)


@jit
def world_accelerations(li, gv, J, a, ov, vJ, oa, t):
    """World spatial accelerations ``oa`` (L, 6) for joint accelerations ``a``, gravity included as
    the base acceleration ``-g``: ``oa_i = oa_λ + J_i a_i + ov_λ x vJ_i``."""
    for i in range(li.shape[0]):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        if lam < 0:
            for r in range(6):
                t[r] = 0.0
            for r in range(3):
                oa[i, r] = -gv[r]
                oa[i, 3 + r] = 0.0
        else:
            mot_cross(ov[lam], vJ[i], t)
            for r in range(6):
                oa[i, r] = oa[lam, r]
        for r in range(6):
            s = t[r]
            for k in range(nd):
                s += J[d0 + k, r] * a[d0 + k]
            oa[i, r] += s
