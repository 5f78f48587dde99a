"""Compiled first-order partial derivatives of inverse dynamics, ``∂τ/∂q`` and ``∂τ/∂v``.

This is the world-frame form of the analytical RNEA derivatives of Carpentier & Mansard,
"Analytical derivatives of rigid body dynamics algorithms" (RSS 2018),
whose simplified derivatives Plancher et al. 2021 (Algorithm 2) restate in link frames. In world coordinates
every per-dof column (``J``, ``∂v/∂q``, ``∂a/∂q``, ``∂a/∂v`` and the force columns) is computed once,
at the dof's own link, instead of being re-transformed at every descendant link as Algorithm 2
does; the coupling between links goes through subtree (composite) quantities, and the output is
assembled block-wise: rows of link ``i`` × the dof range of its subtree, and the subtree rows × the
columns of ``i`` (Plancher et al. 2021 Sec. III-B structured sparsity: every other entry is zero).

Derivatives with respect to ``q`` are along the local tangent perturbation ``q ⊕ δ`` (every motion
subspace is constant in its child frame, so ``∂J_j/∂q_k = J_k x J_j`` for ``k`` an ancestor of
``j``), matching :mod:`dynamics.numpy_backend.rnea_derivatives`.

World-frame quantities per link ``i`` (all expressed at the world origin, world axes):
``ov_i``/``oa_i`` spatial velocity/acceleration (``oa`` includes ``-g``), ``oY_i`` rigid-body inertia
then composite inertia (compact form), ``oh_i = oY_i ov_i``, ``of_i`` net then transmitted force,
and the inertia-rate operator ``doY_i y = ov_i x* (oY_i y) - oY_i (ov_i x y) + y x* oh_i``, whose
first block column vanishes: ``doY y = (-2 hl x y_a, K y_a)`` with ``hl`` the linear momentum and
``K = -[v][h] - [h][v] + [w]Io - Io[w] - [ha]`` (``v``, ``w`` linear/angular velocity, ``h``, ``Io``
first and second moment of ``oY``, ``ha`` angular momentum). ``doY`` is linear in the pair
(momentum, K), so it is accumulated over subtrees as 12 numbers.
"""

from __future__ import annotations

from .finite import all_finite
from .jit import jit, jit_inline
from .packing import LI_DOFADR, LI_NV, LI_PARENT, LI_SUBEND
from .rnea import link_external_forces
from .scratch import DOFS, LINKS, buffer, view2, view3
from .spatial import force_cross_add, force_to_parent, inertia_mul, mot_cross
from .state_scratch import MOTION, motion_views, placement_views
from .world import world_accelerations, world_inertias, world_kinematics


@jit
def doY_mul(dY, i, y, out):
    """``out = doY_i y = (-2 hl x y_a, K y_a)`` with ``dY[i] = (hl (3), K (3x3 row-major))``."""
    out[0] = -2.0 * (dY[i, 1] * y[5] - dY[i, 2] * y[4])
    out[1] = -2.0 * (dY[i, 2] * y[3] - dY[i, 0] * y[5])
    out[2] = -2.0 * (dY[i, 0] * y[4] - dY[i, 1] * y[3])
    for r in range(3):
        out[3 + r] = dY[i, 3 + 3 * r] * y[3] + dY[i, 4 + 3 * r] * y[4] + dY[i, 5 + 3 * r] * y[5]


@jit_inline
def inertia_rate(oY, i, ov, oh, dY):
    """``dY[i] = (hl, K)`` of the inertia-rate operator of ``oY[i]`` at velocity ``ov`` (6,), with
    momentum ``oh`` (6,)."""
    vh = ov[0] * oY[i, 1] + ov[1] * oY[i, 2] + ov[2] * oY[i, 3]
    for r in range(3):
        dY[i, r] = oh[r]
    for r in range(3):
        ra = (r + 1) % 3
        rb = (r + 2) % 3
        for c in range(3):
            ca = (c + 1) % 3
            cb = (c + 2) % 3
            # ([w]x Io)[r, c] = w_a Io[b, c] - w_b Io[a, c];  (Io [w]x)[r, c] = Io[r, a] w_b - Io[r, b] w_a
            wI = ov[3 + ra] * oY[i, 4 + 3 * rb + c] - ov[3 + rb] * oY[i, 4 + 3 * ra + c]
            Iw = oY[i, 4 + 3 * r + ca] * ov[3 + cb] - oY[i, 4 + 3 * r + cb] * ov[3 + ca]
            # -[v][h] - [h][v] = 2 (v.h) 1 - h v^T - v h^T
            val = wI - Iw - oY[i, 1 + r] * ov[c] - ov[r] * oY[i, 1 + c]
            if r == c:
                val += 2.0 * vh
            dY[i, 3 + 3 * r + c] = val
    # - [ha]x
    dY[i, 3 + 1] += oh[5]
    dY[i, 3 + 2] -= oh[4]
    dY[i, 3 + 3] -= oh[5]
    dY[i, 3 + 5] += oh[3]
    dY[i, 3 + 6] += oh[4]
    dY[i, 3 + 7] -= oh[3]


@jit
def rnea_derivatives_pass(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, dtau_dq, dtau_dv):
    """``(∂τ/∂q, ∂τ/∂v)`` (nv, nv) each from the world kinematics of :mod:`.world`: columns ``J``,
    velocities ``ov``, accelerations ``oa`` (gravity included) and rigid
    inertias ``oY`` (turned into composite inertias). ``fl`` (L, 6) link-frame external forces.

    Scratch: ``ws`` (4, L, 6) (momenta, forces, two work rows), ``dY`` (L, 12), ``cols`` (8, nv, 6)
    for the per-dof columns ∂v/∂q, ∂a/∂q, ∂a/∂v, ∂f/∂a, ∂f/∂q, ∂f/∂v, the angular part of
    ``doY^T J`` (first 3 entries) and one spare.
    """
    L = li.shape[0]
    nv = dtau_dq.shape[0]
    oh = ws[0]
    of = ws[1]
    t = ws[2, 0]
    g0 = ws[2, 1]
    dVdq = cols[0]
    dAdq = cols[1]
    dAdv = cols[2]
    dFda = cols[3]
    dFdq = cols[4]
    dFdv = cols[5]
    dYtJ = cols[6]
    for r in range(nv):
        for c in range(nv):
            dtau_dq[r, c] = 0.0
            dtau_dv[r, c] = 0.0
    for r in range(3):
        g0[r] = -gv[r]
        g0[3 + r] = 0.0
    # ---------------- forward sweep: momenta, net forces, per-dof columns, inertia rates
    for i in range(L):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        inertia_mul(oY, i, ov[i], oh[i])
        inertia_mul(oY, i, oa[i], of[i])
        force_cross_add(ov[i], oh[i], of[i])
        if has_fext:
            force_to_parent(oR[i], op[i], fl[i], t)
            for r in range(6):
                of[i, r] -= t[r]
        for k in range(nd):
            d = d0 + k
            if lam < 0:
                mot_cross(g0, J[d], dAdq[d])
                mot_cross(ov[i], J[d], dAdv[d])
                for r in range(6):
                    dVdq[d, r] = 0.0
            else:
                mot_cross(oa[lam], J[d], dAdq[d])
                mot_cross(ov[lam], J[d], dVdq[d])
                mot_cross(ov[lam], dVdq[d], t)
                mot_cross(ov[i], J[d], dAdv[d])
                for r in range(6):
                    dAdq[d, r] += t[r]
                    dAdv[d, r] += dVdq[d, r]
        inertia_rate(oY, i, ov[i], oh[i], dY)
    # ---------------- backward sweep (oY, dY, of become subtree sums)
    for i in range(L - 1, -1, -1):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        e = li[i, LI_SUBEND]
        for k in range(nd):
            d = d0 + k
            inertia_mul(oY, i, J[d], dFda[d])
            inertia_mul(oY, i, dAdq[d], dFdq[d])
            doY_mul(dY, i, dVdq[d], t)
            for r in range(6):
                dFdq[d, r] += t[r]
            # angular part of doY^T J = 2 hl x J_l + K^T J_a
            h0, h1, h2 = dY[i, 0], dY[i, 1], dY[i, 2]
            dYtJ[d, 0] = 2.0 * (h1 * J[d, 2] - h2 * J[d, 1])
            dYtJ[d, 1] = 2.0 * (h2 * J[d, 0] - h0 * J[d, 2])
            dYtJ[d, 2] = 2.0 * (h0 * J[d, 1] - h1 * J[d, 0])
            for c in range(3):
                dYtJ[d, c] += dY[i, 3 + c] * J[d, 3] + dY[i, 6 + c] * J[d, 4] + dY[i, 9 + c] * J[d, 5]
        # rows of the strict subtree, columns of this joint (operands of column d hoisted)
        for k in range(nd):
            d = d0 + k
            q0, q1, q2, q3, q4, q5 = dAdq[d, 0], dAdq[d, 1], dAdq[d, 2], dAdq[d, 3], dAdq[d, 4], dAdq[d, 5]
            a0, a1, a2, a3, a4, a5 = dAdv[d, 0], dAdv[d, 1], dAdv[d, 2], dAdv[d, 3], dAdv[d, 4], dAdv[d, 5]
            w0, w1, w2 = dVdq[d, 3], dVdq[d, 4], dVdq[d, 5]
            s0, s1, s2 = J[d, 3], J[d, 4], J[d, 5]
            for r in range(d0 + nd, e):
                f0, f1, f2, f3, f4, f5 = dFda[r, 0], dFda[r, 1], dFda[r, 2], dFda[r, 3], dFda[r, 4], dFda[r, 5]
                y0, y1, y2 = dYtJ[r, 0], dYtJ[r, 1], dYtJ[r, 2]
                dtau_dq[r, d] = (f0 * q0 + f1 * q1 + f2 * q2 + f3 * q3 + f4 * q4 + f5 * q5
                                 + y0 * w0 + y1 * w1 + y2 * w2)
                dtau_dv[r, d] = (f0 * a0 + f1 * a1 + f2 * a2 + f3 * a3 + f4 * a4 + f5 * a5
                                 + y0 * s0 + y1 * s1 + y2 * s2)
        # rows of this joint, columns of its subtree (own columns before the J x* f term, which
        # cancels against the variation of J_i itself)
        for k in range(nd):
            d = d0 + k
            j0, j1, j2, j3, j4, j5 = J[d, 0], J[d, 1], J[d, 2], J[d, 3], J[d, 4], J[d, 5]
            for c in range(d0, e):
                dtau_dq[d, c] = (j0 * dFdq[c, 0] + j1 * dFdq[c, 1] + j2 * dFdq[c, 2] + j3 * dFdq[c, 3]
                                 + j4 * dFdq[c, 4] + j5 * dFdq[c, 5])
        for k in range(nd):
            d = d0 + k
            force_cross_add(J[d], of[i], dFdq[d])
            inertia_mul(oY, i, dAdv[d], dFdv[d])
            doY_mul(dY, i, J[d], t)
            for r in range(6):
                dFdv[d, r] += t[r]
        for k in range(nd):
            d = d0 + k
            j0, j1, j2, j3, j4, j5 = J[d, 0], J[d, 1], J[d, 2], J[d, 3], J[d, 4], J[d, 5]
            for c in range(d0, e):
                dtau_dv[d, c] = (j0 * dFdv[c, 0] + j1 * dFdv[c, 1] + j2 * dFdv[c, 2] + j3 * dFdv[c, 3]
                                 + j4 * dFdv[c, 4] + j5 * dFdv[c, 5])
        if lam >= 0:
            for k in range(13):
                oY[lam, k] += oY[i, k]
            for k in range(12):
                dY[lam, k] += dY[i, k]
            for r in range(6):
                of[lam, r] += of[i, r]


#: scratch of :func:`rnea_derivatives_range`: one state's work arrays
RNEA_DERIVATIVES_SCRATCH = MOTION.then(
    ("oa", (LINKS, 6)),
    ("ws", (4, LINKS, 6)),
    ("dY", (LINKS, 12)),
    ("cols", (8, DOFS, 6)),
)
_RNEAD = RNEA_DERIVATIVES_SCRATCH.spec


@jit
def _views(buf, L, nv):
    """The work arrays of :func:`rnea_derivatives_range` in a buffer laid out from
    :data:`RNEA_DERIVATIVES_SCRATCH`."""
    return (placement_views(buf, L, nv), motion_views(buf, L, nv), view2(buf, _RNEAD.oa, L, nv),
            view3(buf, _RNEAD.ws, L, nv), view2(buf, _RNEAD.dY, L, nv), view3(buf, _RNEAD.cols, L, nv))


@jit_inline
def rnea_derivatives_state_passes(li, lf, gv, q, v, a, has_fext, out_q, out_v, views):
    """One state's ``∂τ/∂q`` (``out_q``) and ``∂τ/∂v`` (``out_v``), (nv, nv), for q (nq,), v, a (nv,),
    in the work arrays ``views`` (:func:`_views`), with the per-link external forces already in
    ``fl`` when ``has_fext``."""
    placements, motion, oa, ws, dY, cols = views
    R, p, oR, op, fl, tmp = placements
    J, ov, vJ, oY = motion
    t = tmp[0]
    world_kinematics(li, lf, q, v, R, p, oR, op, J, ov, vJ, t)
    world_accelerations(li, gv, J, a, ov, vJ, oa, t)
    world_inertias(li, lf, oR, op, oY)
    rnea_derivatives_pass(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, out_q, out_v)


@jit
def rnea_derivatives_range(li, lf, gv, bl, bf, q, v, a, fext, out, start, stop):
    """``out[0] = ∂τ/∂q``, ``out[1] = ∂τ/∂v`` (2, B, nv, nv) for q (B, nq), v, a (B, nv); fext
    (B, nbody, 6) or (0, nbody, 6) for none. States ``start`` to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = v.shape[1]
    _rnea_derivatives_range(buffer(_RNEAD.total, L, nv), li, lf, gv, bl, bf, q, v, a, fext, out, start, stop)


@jit
def _rnea_derivatives_range(buf, li, lf, gv, bl, bf, q, v, a, fext, out, start, stop):
    """:func:`rnea_derivatives_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = v.shape[1]
    views = _views(buf, L, nv)
    fl = views[0][4]
    has_fext = fext.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        rnea_derivatives_state_passes(li, lf, gv, q[b], v[b], a[b], has_fext, out[0, b], out[1, b], views)


@jit
def rnea_derivatives_state(li, lf, gv, q, v, a, out):
    """The single-state entry point: ``out`` (2 nv nv,) receives ``∂τ/∂q`` then ``∂τ/∂v`` (row-major)
    for q (nq,), v, a (nv,), or a batch of one ((1, nq), (1, nv)). Returns whether every output
    entry is finite. :func:`rnea_derivatives_range`'s passes without its batch and external-force
    arguments and with the finiteness check the caller would otherwise make in Python."""
    if q.ndim == 2:      # a batch of one (numba resolves ndim when it compiles: one branch is kept)
        q1, v1, a1 = q[0], v[0], a[0]
    else:
        q1, v1, a1 = q, v, a
    nv = a1.shape[0]
    n2 = nv * nv
    _rnea_derivatives_one(buffer(_RNEAD.total, li.shape[0], nv), li, lf, gv, q1, v1, a1, out[:n2].reshape((nv, nv)),
                          out[n2:2 * n2].reshape((nv, nv)))
    return all_finite(out[:2 * n2])


@jit
def _rnea_derivatives_one(buf, li, lf, gv, q, v, a, out_q, out_v):
    """:func:`rnea_derivatives_state_passes` without external forces, in the scratch ``buf``."""
    rnea_derivatives_state_passes(li, lf, gv, q, v, a, False, out_q, out_v, _views(buf, li.shape[0], a.shape[0]))
