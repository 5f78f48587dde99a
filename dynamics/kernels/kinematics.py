"""Compiled forward kinematics, frame Jacobians and their time variation, centre of mass; the same
definitions as :mod:`dynamics.numpy_backend.kinematics` (Pinocchio's reference frames).

A *frame* is given as a link index (``-1`` for frames fixed to the world) and its placement row
``(R row-major, p)`` in that link's frame (:mod:`.packing`). Reference frame codes:
``0`` local, ``1`` world, ``2`` local_world_aligned. Jacobian columns are only computed for the
dofs that move the frame (its link's supported dofs); every other column is zero.
"""

from __future__ import annotations

import numpy as np

from .jit import jit
from .joints import all_placements, world_placements
from .packing import FR_P, FR_R, LF_COM, LF_MASS, LF_ST, LI_DOFADR, LI_NSUP, LI_NV, LI_PARENT, LI_SUP
from .scratch import DOFS, LINKS, buffer, view1, view2
from .spatial import mot_cross, mot_to_child, mot_to_parent
from .state_scratch import PLACEMENTS, placement_views

REF_LOCAL, REF_WORLD, REF_LWA = 0, 1, 2


@jit
def frame_world(oR, op, link, ff, f, oRf, opf):
    """World placement ``(oRf, opf)`` of frame row ``ff[f]`` attached to ``link``."""
    if link < 0:
        for r in range(3):
            opf[r] = ff[f, FR_P + r]
            for c in range(3):
                oRf[r, c] = ff[f, FR_R + 3 * r + c]
        return
    for r in range(3):
        opf[r] = op[link, r] + (oR[link, r, 0] * ff[f, FR_P] + oR[link, r, 1] * ff[f, FR_P + 1]
                                + oR[link, r, 2] * ff[f, FR_P + 2])
        for c in range(3):
            oRf[r, c] = (oR[link, r, 0] * ff[f, FR_R + c] + oR[link, r, 1] * ff[f, FR_R + 3 + c]
                         + oR[link, r, 2] * ff[f, FR_R + 6 + c])


#: scratch of :func:`placements_range`: one state's work arrays
PLACEMENTS_SCRATCH = PLACEMENTS
_PLACEMENTS = PLACEMENTS_SCRATCH.spec


@jit
def placements_range(li, lf, q, flink, ff, oRf, opf, start, stop):
    """World placements ``oRf`` (B, nf, 3, 3), ``opf`` (B, nf, 3) of the frames ``flink`` (nf,),
    ``ff`` (nf, 12) for q (B, nq). Runs states ``start`` to ``stop - 1`` on the calling thread."""
    L = li.shape[0]
    nv = 0                   # (the layout has no per-dof field)
    _placements_range(buffer(_PLACEMENTS.total, L, nv), li, lf, q, flink, ff, oRf, opf, start, stop)


@jit
def _placements_range(buf, li, lf, q, flink, ff, oRf, opf, start, stop):
    """:func:`placements_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = 0                   # (the layout has no per-dof field)
    R, p, oR, op, _, _ = placement_views(buf, L, nv)
    for b in range(start, stop):
        all_placements(li, lf, q[b], R, p)
        world_placements(li, R, p, oR, op)
        for f in range(flink.shape[0]):
            frame_world(oR, op, flink[f], ff, f, oRf[b, f], opf[b, f])


@jit
def _world_columns(li, lf, oR, op, link, Jw, t):
    """World Jacobian columns ``Jw[d] = Ad(oM_link(d)) S_d`` (nv, 6) of the dofs supporting ``link``."""
    j = link
    while j >= 0:
        d0 = li[j, LI_DOFADR]
        for k in range(li[j, LI_NV]):
            for r in range(6):
                t[r] = lf[j, LF_ST + 6 * k + r]
            mot_to_parent(oR[j], op[j], t, Jw[d0 + k])
        j = li[j, LI_PARENT]


@jit
def _world_column_rates(li, link, v, Jw, dJw, chain, ov, t):
    """``dJw[d] = ov_link(d) x Jw[d]`` with ``ov_l`` the world spatial velocity of link ``l``."""
    n = 0
    j = link
    while j >= 0:
        chain[n] = j
        n += 1
        j = li[j, LI_PARENT]
    for r in range(6):
        ov[r] = 0.0
    for m in range(n - 1, -1, -1):   # root first
        j = chain[m]
        d0 = li[j, LI_DOFADR]
        nd = li[j, LI_NV]
        for k in range(nd):
            for r in range(6):
                ov[r] += Jw[d0 + k, r] * v[d0 + k]
        for k in range(nd):
            mot_cross(ov, Jw[d0 + k], dJw[d0 + k])


@jit
def frame_jacobian_knot(li, lf, oR, op, link, ff, v, ref, with_dJ, Jw, dJw, chain, oRf, opf, tmp, J, dJ):
    """Frame Jacobian ``J`` (6, nv) in reference ``ref`` and, if ``with_dJ``, its time variation
    ``dJ`` (6, nv) along ``v``."""
    nv = J.shape[1]
    for r in range(6):
        for c in range(nv):
            J[r, c] = 0.0
            if with_dJ:
                dJ[r, c] = 0.0
    if link < 0:
        return
    frame_world(oR, op, link, ff, link - link, oRf, opf)  # row 0 (a non-literal index: one compilation)
    t = tmp[0]
    vf = tmp[1]
    x = tmp[2]
    _world_columns(li, lf, oR, op, link, Jw, t)
    if with_dJ:
        _world_column_rates(li, link, v, Jw, dJw, chain, tmp[3], t)
    nsup = li[link, LI_NSUP]
    if ref == REF_LOCAL:
        for s in range(nsup):
            d = li[link, LI_SUP + s]
            mot_to_child(oRf, opf, Jw[d], t)
            for r in range(6):
                J[r, d] = t[r]
        if with_dJ:
            for r in range(6):
                vf[r] = 0.0
                for s in range(nsup):
                    d = li[link, LI_SUP + s]
                    vf[r] += J[r, d] * v[d]
            for s in range(nsup):
                d = li[link, LI_SUP + s]
                mot_to_child(oRf, opf, dJw[d], t)
                for r in range(6):
                    x[r] = J[r, d]
                mot_cross(vf, x, x)
                for r in range(6):
                    dJ[r, d] = t[r] - x[r]
    elif ref == REF_WORLD:
        for s in range(nsup):
            d = li[link, LI_SUP + s]
            for r in range(6):
                J[r, d] = Jw[d, r]
                if with_dJ:
                    dJ[r, d] = dJw[d, r]
    else:
        # local_world_aligned: linear part taken at the frame origin, [1, -[opf]x; 0, 1] Jw
        for s in range(nsup):
            d = li[link, LI_SUP + s]
            J[0, d] = Jw[d, 0] - (opf[1] * Jw[d, 5] - opf[2] * Jw[d, 4])
            J[1, d] = Jw[d, 1] - (opf[2] * Jw[d, 3] - opf[0] * Jw[d, 5])
            J[2, d] = Jw[d, 2] - (opf[0] * Jw[d, 4] - opf[1] * Jw[d, 3])
            for r in range(3, 6):
                J[r, d] = Jw[d, r]
        if with_dJ:
            pd0 = 0.0
            pd1 = 0.0
            pd2 = 0.0
            for s in range(nsup):
                d = li[link, LI_SUP + s]
                pd0 += J[0, d] * v[d]
                pd1 += J[1, d] * v[d]
                pd2 += J[2, d] * v[d]
            for s in range(nsup):
                d = li[link, LI_SUP + s]
                # transform of dJw, then minus pdot x Jw_angular
                dJ[0, d] = dJw[d, 0] - (opf[1] * dJw[d, 5] - opf[2] * dJw[d, 4]) - (pd1 * Jw[d, 5] - pd2 * Jw[d, 4])
                dJ[1, d] = dJw[d, 1] - (opf[2] * dJw[d, 3] - opf[0] * dJw[d, 5]) - (pd2 * Jw[d, 3] - pd0 * Jw[d, 5])
                dJ[2, d] = dJw[d, 2] - (opf[0] * dJw[d, 4] - opf[1] * dJw[d, 3]) - (pd0 * Jw[d, 4] - pd1 * Jw[d, 3])
                for r in range(3, 6):
                    dJ[r, d] = dJw[d, r]


#: scratch of :func:`frames_knot`: one state's work arrays
FRAMES_SCRATCH = PLACEMENTS.then(
    ("Jw", (DOFS, 6)),
    ("dJw", (DOFS, 6)),
    ("x", (LINKS, 3)),          # the centre of mass of com_knot
    ("msub", (LINKS,)),
    ("mx", (LINKS, 3)),
    ("jc", (6,)),
)
_FRAMES = FRAMES_SCRATCH.spec


@jit
def frames_workspace(li, lf, nv):
    """Scratch of :func:`frames_knot` for the model ``(li, lf)`` with nv dofs: a float array and
    an int array, allocated once per compiled caller (not per state)."""
    L = li.shape[0]
    return buffer(_FRAMES.total, L, nv), np.empty(L, dtype=np.int64)


@jit
def frames_knot(li, lf, q, flink, ff, with_J, ws, wsi, oRf, opf, J):
    """World placements ``oRf`` (nf, 3, 3), ``opf`` (nf, 3) of the frames ``flink`` (nf,), ``ff``
    (nf, 12) at one configuration q (nq,) and, if ``with_J``, their ``local_world_aligned``
    Jacobians ``J`` (nf, 6, nv) (rows 0-2: velocity of the frame origin in world axes). ws, wsi:
    :func:`frames_workspace`. The single-state form of :func:`placements_range` and
    :func:`frame_jacobian_range` for compiled callers (the solvers' compiled cost terms)."""
    L = li.shape[0]
    nv = J.shape[2]
    R, p, oR, op, _, tmp = placement_views(ws, L, nv)
    Jw = view2(ws, _FRAMES.Jw, L, nv)
    dJw = view2(ws, _FRAMES.dJw, L, nv)
    all_placements(li, lf, q, R, p)
    world_placements(li, R, p, oR, op)
    for f in range(flink.shape[0]):
        frame_world(oR, op, flink[f], ff, f, oRf[f], opf[f])
        if with_J:
            # J[f] stands in for dJ and q for v (neither is touched without dJ)
            frame_jacobian_knot(li, lf, oR, op, flink[f], ff[f:f + 1], q, REF_LWA, False, Jw, dJw, wsi, oRf[f],
                                opf[f], tmp, J[f], J[f])


@jit
def frame_velocity_dq(li, link, v, J, out):
    """Derivative ``out`` (3, nv) with respect to q (tangent, at fixed v (nv,)) of the linear velocity
    ``J[:3] v`` of the origin of a frame on ``link`` (``-1``: fixed to the world), from its
    ``local_world_aligned`` Jacobian J (6, nv) (:func:`frames_knot`).

    With Ĵ_c = J[:, c] the spatial column of dof c about the frame origin in world axes, the column
    of dof c moves as ``∂Ĵ_d/∂q_c = Ĵ_c × Ĵ_d`` (spatial motion cross product) for every dof d of the
    same joint or below it on the chain, so the spatial velocity ``V̂ = J v`` moves as
    ``Ĵ_c × Σ_{d ≥ joint(c)} Ĵ_d v_d``; its linear part, plus ``ω × ∂p/∂q_c`` because the reference
    point is the frame origin itself, is column c:
    ``ω_c × a_lin + Ĵlin_c × a_ang + ω × Ĵlin_c`` with ``a = Σ_{d ≥ joint(c)} Ĵ_d v_d`` and ω the
    frame's angular velocity. Columns of the dofs that do not move the frame are zero."""
    nv = J.shape[1]
    for r in range(3):
        for c in range(nv):
            out[r, c] = 0.0
    w0 = 0.0
    w1 = 0.0
    w2 = 0.0
    j = link
    while j >= 0:
        d0 = li[j, LI_DOFADR]
        for d in range(d0, d0 + li[j, LI_NV]):
            w0 += J[3, d] * v[d]
            w1 += J[4, d] * v[d]
            w2 += J[5, d] * v[d]
        j = li[j, LI_PARENT]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    a4 = 0.0
    a5 = 0.0
    j = link
    while j >= 0:                 # leaf first: a accumulates the velocity of this joint and below
        d0 = li[j, LI_DOFADR]
        d1 = d0 + li[j, LI_NV]
        for d in range(d0, d1):
            a0 += J[0, d] * v[d]
            a1 += J[1, d] * v[d]
            a2 += J[2, d] * v[d]
            a3 += J[3, d] * v[d]
            a4 += J[4, d] * v[d]
            a5 += J[5, d] * v[d]
        for c in range(d0, d1):
            l0, l1, l2 = J[0, c], J[1, c], J[2, c]
            o0, o1, o2 = J[3, c], J[4, c], J[5, c]
            out[0, c] = (o1 * a2 - o2 * a1) + (l1 * a5 - l2 * a4) + (w1 * l2 - w2 * l1)
            out[1, c] = (o2 * a0 - o0 * a2) + (l2 * a3 - l0 * a5) + (w2 * l0 - w0 * l2)
            out[2, c] = (o0 * a1 - o1 * a0) + (l0 * a4 - l1 * a3) + (w0 * l1 - w1 * l0)
        j = li[j, LI_PARENT]


@jit
def com_knot(li, lf, ws, with_J, com, J):
    """Centre of mass ``com`` (3,) and, if ``with_J``, its Jacobian J (3, nv) at the configuration of
    the last :func:`frames_knot` call on the workspace ``ws`` (its link placements): the single-state
    form of :func:`com_range` for compiled callers."""
    L = li.shape[0]
    nv = J.shape[1]
    _, _, oR, op, _, tmp = placement_views(ws, L, nv)
    M = 0.0
    for i in range(L):
        M += lf[i, LF_MASS]
    _com_state(li, lf, M, oR, op, view2(ws, _FRAMES.x, L, nv), view1(ws, _FRAMES.msub, L, nv),
               view2(ws, _FRAMES.mx, L, nv), view1(ws, _FRAMES.jc, L, nv), tmp[0], with_J, com, J)


#: scratch of :func:`frame_jacobian_range`: one state's work arrays
FRAME_JACOBIAN_SCRATCH = PLACEMENTS.then(
    ("Jw", (DOFS, 6)),
    ("dJw", (DOFS, 6)),
    ("oRf", (3, 3)),
    ("opf", (3,)),
)
_FRAME_JACOBIAN = FRAME_JACOBIAN_SCRATCH.spec


@jit
def frame_jacobian_range(li, lf, q, v, flink, ff, ref, J, dJ, start, stop):
    """Jacobian ``J`` (B, 6, nv) of the frame ``flink`` (1,), ``ff`` (1, 12) in reference ``ref``; if
    ``dJ`` is (B, 6, nv) also its time variation along ``v`` (B, nv) (pass (0, 6, nv) and any
    (>=1, nv) ``v`` for the Jacobian alone). Runs states ``start`` to ``stop - 1`` on the calling thread."""
    L = li.shape[0]
    nv = J.shape[2]
    _frame_jacobian_range(buffer(_FRAME_JACOBIAN.total, L, nv), li, lf, q, v, flink, ff, ref, J, dJ, start, stop)


@jit
def _frame_jacobian_range(buf, li, lf, q, v, flink, ff, ref, J, dJ, start, stop):
    """:func:`frame_jacobian_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = J.shape[2]
    R, p, oR, op, _, tmp = placement_views(buf, L, nv)
    Jw = view2(buf, _FRAME_JACOBIAN.Jw, L, nv)
    dJw = view2(buf, _FRAME_JACOBIAN.dJw, L, nv)
    oRf = view2(buf, _FRAME_JACOBIAN.oRf, L, nv)
    opf = view1(buf, _FRAME_JACOBIAN.opf, L, nv)
    chain = np.empty(L, dtype=np.int64)
    with_dJ = dJ.shape[0] > 0
    link = flink[0]
    for b in range(start, stop):
        all_placements(li, lf, q[b], R, p)
        world_placements(li, R, p, oR, op)
        # without dJ, J[b] stands in for dJ and v[0] for v (neither is touched)
        frame_jacobian_knot(li, lf, oR, op, link, ff, v[b if with_dJ else 0], ref, with_dJ, Jw, dJw, chain, oRf,
                            opf, tmp, J[b], dJ[b] if with_dJ else J[b])


#: scratch of :func:`com_range`: one state's work arrays
COM_SCRATCH = PLACEMENTS.then(
    ("x", (LINKS, 3)),
    ("msub", (LINKS,)),
    ("mx", (LINKS, 3)),
    ("jc", (6,)),
)
_COM = COM_SCRATCH.spec


@jit
def _com_state(li, lf, M, oR, op, x, msub, mx, jc, t, with_J, com, J):
    """Centre of mass ``com`` (3,) of the links placed at ``oR``, ``op`` (total mass M) and, if
    ``with_J``, its Jacobian J (3, nv); x, msub, mx (per link), jc (6,), t (6,): scratch."""
    L = li.shape[0]
    for i in range(L):
        for r in range(3):
            x[i, r] = op[i, r] + (oR[i, r, 0] * lf[i, LF_COM] + oR[i, r, 1] * lf[i, LF_COM + 1]
                                  + oR[i, r, 2] * lf[i, LF_COM + 2])
    for r in range(3):
        s = 0.0
        for i in range(L):
            s += lf[i, LF_MASS] * x[i, r]
        com[r] = s / M
    if not with_J:
        return
    for i in range(L):
        msub[i] = lf[i, LF_MASS]
        for r in range(3):
            mx[i, r] = lf[i, LF_MASS] * x[i, r]
    for i in range(L - 1, -1, -1):
        lam = li[i, LI_PARENT]
        if lam >= 0:
            msub[lam] += msub[i]
            for r in range(3):
                mx[lam, r] += mx[i, r]
    for i in range(L):
        d0 = li[i, LI_DOFADR]
        for k in range(li[i, LI_NV]):
            for r in range(6):
                t[r] = lf[i, LF_ST + 6 * k + r]
            mot_to_parent(oR[i], op[i], t, jc)
            # msub v_lin + w x (m x)_subtree
            J[0, d0 + k] = (msub[i] * jc[0] + (jc[4] * mx[i, 2] - jc[5] * mx[i, 1])) / M
            J[1, d0 + k] = (msub[i] * jc[1] + (jc[5] * mx[i, 0] - jc[3] * mx[i, 2])) / M
            J[2, d0 + k] = (msub[i] * jc[2] + (jc[3] * mx[i, 1] - jc[4] * mx[i, 0])) / M


@jit
def com_range(li, lf, gv, q, com, J, start, stop):
    """Centre of mass ``com`` (B, 3) and, if ``J`` is (B, 3, nv), its Jacobian (pass (0, 3, nv) for
    the centre of mass alone). Runs states ``start`` to ``stop - 1`` on the calling thread."""
    L = li.shape[0]
    nv = J.shape[2]
    _com_range(buffer(_COM.total, L, nv), li, lf, gv, q, com, J, start, stop)


@jit
def _com_range(buf, li, lf, gv, q, com, J, start, stop):
    """:func:`com_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = J.shape[2]
    R, p, oR, op, _, tmp = placement_views(buf, L, nv)
    x = view2(buf, _COM.x, L, nv)
    msub = view1(buf, _COM.msub, L, nv)
    mx = view2(buf, _COM.mx, L, nv)
    jc = view1(buf, _COM.jc, L, nv)
    with_J = J.shape[0] > 0
    none = np.empty((3, nv))          # the Jacobian rows of a call without J (not written)
    for b in range(start, stop):
        all_placements(li, lf, q[b], R, p)
        world_placements(li, R, p, oR, op)
        Jb = J[b] if with_J else none
        _com_state(li, lf, gv[3], oR, op, x, msub, mx, jc, tmp[0], with_J, com[b], Jb)
