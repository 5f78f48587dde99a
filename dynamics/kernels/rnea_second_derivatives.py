"""Compiled second-order partial derivatives of inverse dynamics: IDSVA-SO (Singh, Russell & Wensing
2022, Algorithm 1), a per-state port of :mod:`dynamics.numpy_backend.rnea_second_derivatives` (same
expressions, same index order, same exactly-once writes).

World-frame forward quantities (Singh, Russell & Wensing 2022 Alg. 1 lines 2-11, :mod:`.world`): per
dof ``d`` of link ``i``, ``S_d = J_d``, ``ψ̇_d = v_λ × S_d``, ``ψ̈_d = a_λ × S_d + v_λ × ψ̇_d``
(``a_λ = -g`` at the root), ``Ṡ_d = v_i × S_d``; per link the inertia ``I_i``, the body-Coriolis
matrix ``B_i = v_i ×* I_i − I_i v_i× + (I_i v_i)×̄*`` (eq. 14 without the ½; in compact form its
first block column vanishes, see :mod:`.rnea_derivatives`) and the force
``f_i = I_i a_i + v_i ×* I_i v_i − f_ext,i``; the composites ``I^C``, ``B^C``, ``f^C`` are subtree
sums. Backward: for every joint ``i``, every dof ``p`` of ``i`` and every pair ``k ⪯ j`` of dofs
on the chain from the root to ``i``, the 14 case values of the paper's Appendix C are evaluated and
written, with the Hessian symmetries of §IV-F, into every index permutation they determine
(the write table ``_WRITES`` of the numpy backend, expanded below). Entries whose three dofs are
not on one root-to-leaf chain stay zero (branch-induced sparsity, §V-C).

Index order (docs/second_order.md): ``T[i, j, k] = ∂_k (∂_j τ_i)``; ``dM[i, j, k] = ∂M_ij/∂q_k``;
``d2tau_dqdv[i, j, k] = ∂²τ_i/∂q_j∂v_k``.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .jit import jit, jit_parallel
from .packing import LI_DOFADR, LI_NSUP, LI_NV, LI_PARENT, LI_SUP
from .rnea import link_external_forces
from .rnea_derivatives import inertia_rate
from .scratch import DOFS, LINKS, buffer, view2, view3
from .spatial import dense_inertia, force_cross, force_cross_add, force_to_parent, inertia_mul, mot_cross
from .state_scratch import MOTION, motion_views, placement_views
from .world import world_accelerations, world_inertias, world_kinematics

# rows of the per-dof 6x6 work matrices (``mats``)
_IC, _BC, _SX, _PSX, _R0, _R1, _R2, _R3, _R4, _R5, _R6, _R7, _BIC, _T1 = range(14)
#: number of per-dof 6x6 work matrices (the GPU backend sizes its scratch with it)
NMATS = 14
# rows of the per-(p, j) work vectors (``vecs``)
(_R5T, _R6T, _R7T, _R3T, _R4T, _R0T, _BICT, _R1T, _U1, _U2, _U11, _U3, _U58, _U6, _U7, _W, _G5, _G7, _V1,
 _V2) = range(20)
#: number of per-(p, j) work vectors
NVECS = 20


@jit
def _cross_mat(x, out):
    """Matrix of ``m -> x × m`` for the motion vector ``x`` (6,)."""
    for r in range(6):
        for c in range(6):
            out[r, c] = 0.0
    for b in range(2):
        o = 3 * b
        out[o, o + 1] = -x[5]
        out[o, o + 2] = x[4]
        out[o + 1, o] = x[5]
        out[o + 1, o + 2] = -x[3]
        out[o + 2, o] = -x[4]
        out[o + 2, o + 1] = x[3]
    out[0, 4] = -x[2]
    out[0, 5] = x[1]
    out[1, 3] = x[2]
    out[1, 5] = -x[0]
    out[2, 3] = -x[1]
    out[2, 4] = x[0]


@jit
def _rhs_mat(f, out):
    """Matrix of ``y -> y ×* f`` for the force ``f`` (6,): ``[[0, -[f_l]], [-[f_l], -[f_a]]]``."""
    for r in range(6):
        for c in range(6):
            out[r, c] = 0.0
    # -[f_l]x in the upper-right and lower-left blocks, -[f_a]x in the lower-right block
    for blk in range(3):
        ro = 0 if blk == 0 else 3
        co = 0 if blk == 1 else 3
        o = 3 if blk == 2 else 0
        out[ro, co + 1] = f[o + 2]
        out[ro, co + 2] = -f[o + 1]
        out[ro + 1, co] = -f[o + 2]
        out[ro + 1, co + 2] = f[o]
        out[ro + 2, co] = f[o + 1]
        out[ro + 2, co + 1] = -f[o]


@jit
def _mul(A, B, out):
    """``out = A B`` (6x6)."""
    for r in range(6):
        for c in range(6):
            s = 0.0
            for k in range(6):
                s += A[r, k] * B[k, c]
            out[r, c] = s


@jit
def _tmul_add(A, B, sign, out):
    """``out += sign * A^T B`` (6x6)."""
    for r in range(6):
        for c in range(6):
            s = 0.0
            for k in range(6):
                s += A[k, r] * B[k, c]
            out[r, c] += sign * s


@jit
def _mv(A, x, out):
    """``out = A x`` (6x6, 6)."""
    for r in range(6):
        s = 0.0
        for c in range(6):
            s += A[r, c] * x[c]
        out[r] = s


@jit
def _tmv(A, x, out):
    """``out = A^T x`` (6x6, 6)."""
    for r in range(6):
        s = 0.0
        for c in range(6):
            s += A[c, r] * x[c]
        out[r] = s


@jit
def _dot(x, y):
    return x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3] + x[4] * y[4] + x[5] * y[5]


@jit
def second_order_forward(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, psid, psidd, phid, dY, of, t):
    """World-frame forward quantities: ``psid``, ``psidd``, ``phid`` (nv, 6); then the composites
    ``oY`` (I^C, compact), ``dY`` (B^C, compact) and ``of`` (f^C) accumulated over subtrees."""
    L = li.shape[0]
    g0 = t[0]
    h = t[1]
    x = t[2]
    for r in range(3):
        g0[r] = -gv[r]
        g0[3 + r] = 0.0
    for i in range(L):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        for k in range(li[i, LI_NV]):
            d = d0 + k
            if lam >= 0:
                mot_cross(ov[lam], J[d], psid[d])
                mot_cross(oa[lam], J[d], psidd[d])
                mot_cross(ov[lam], psid[d], x)
                for r in range(6):
                    psidd[d, r] += x[r]
            else:
                for r in range(6):
                    psid[d, r] = 0.0
                mot_cross(g0, J[d], psidd[d])
            mot_cross(ov[i], J[d], phid[d])
        inertia_mul(oY, i, ov[i], h)
        inertia_mul(oY, i, oa[i], of[i])
        force_cross_add(ov[i], h, of[i])
        if has_fext:
            force_to_parent(oR[i], op[i], fl[i], x)
            for r in range(6):
                of[i, r] -= x[r]
        inertia_rate(oY, i, ov[i], h, dY)
    for i in range(L - 1, -1, -1):
        lam = li[i, LI_PARENT]
        if lam >= 0:
            for k in range(13):
                oY[lam, k] += oY[i, k]
            for k in range(12):
                dY[lam, k] += dY[i, k]
            for r in range(6):
                of[lam, r] += of[i, r]


@jit
def second_order_backward(li, J, psid, psidd, phid, IC, BC, fC, mats, vecs, clink, qq, vv, qv, dM):
    """The IDSVA-SO backward pass: writes ``qq`` (∂²τ/∂q²), ``vv`` (∂²τ/∂v²), ``qv`` (∂²τ/∂q∂v) and
    ``dM`` (∂M/∂q), each (nv, nv, nv) and zero on entry, from the composites ``IC``, ``BC``, ``fC``.
    ``clink`` is (nv,) int64 scratch (the link of each dof of the current chain)."""
    L = li.shape[0]
    Ic = mats[_IC]
    Bc = mats[_BC]
    sx = mats[_SX]
    psx = mats[_PSX]
    r0 = mats[_R0]
    r1 = mats[_R1]
    r2 = mats[_R2]
    r3 = mats[_R3]
    r4 = mats[_R4]
    r5 = mats[_R5]
    r6 = mats[_R6]
    r7 = mats[_R7]
    Bic = mats[_BIC]
    T1 = mats[_T1]
    for i in range(L - 1, -1, -1):
        d0 = li[i, LI_DOFADR]
        nA = li[i, LI_NSUP]
        a = i
        for aj in range(nA - 1, -1, -1):     # links of the chain dofs (root first in li's list)
            while li[a, LI_DOFADR] > li[i, LI_SUP + aj]:
                a = li[a, LI_PARENT]
            clink[aj] = a
        dense_inertia(IC, i, Ic)
        # B^C = [[0, -2 [hl]x], [0, K]] from its compact form (hl, K)
        for r in range(6):
            for c in range(6):
                Bc[r, c] = 0.0
        hl0, hl1, hl2 = BC[i, 0], BC[i, 1], BC[i, 2]
        Bc[0, 4] = 2.0 * hl2
        Bc[0, 5] = -2.0 * hl1
        Bc[1, 3] = -2.0 * hl2
        Bc[1, 5] = 2.0 * hl0
        Bc[2, 3] = 2.0 * hl1
        Bc[2, 4] = -2.0 * hl0
        for r in range(3):
            for c in range(3):
                Bc[3 + r, 3 + c] = BC[i, 3 + 3 * r + c]
        for kp in range(li[i, LI_NV]):
            p = d0 + kp
            s = J[p]
            ps = psid[p]
            _cross_mat(s, sx)
            _cross_mat(ps, psx)
            g5 = vecs[_G5]
            g7 = vecs[_G7]
            v1 = vecs[_V1]
            v2 = vecs[_V2]
            # g5 = B^C ψ̇ + s ×* f^C + I^C ψ̈;  g7 = B^C s + I^C (ψ̇ + Ṡ)
            _mv(Bc, ps, g5)
            force_cross(s, fC[i], v1)
            _mv(Ic, psidd[p], v2)
            for r in range(6):
                g5[r] += v1[r] + v2[r]
                v1[r] = ps[r] + phid[p, r]
            _mv(Bc, s, g7)
            _mv(Ic, v1, v2)
            for r in range(6):
                g7[r] += v2[r]
            _mv(Ic, s, v1)
            _rhs_mat(v1, r0)                 # (I^C s)×̄*
            _tmv(Bc, s, v1)
            _rhs_mat(v1, r4)                 # (B^Cᵀ s)×̄*
            _rhs_mat(g5, r5)
            _rhs_mat(g7, r7)
            # r1 = s ×* I^C − I^C s×, with s ×* = −(s×)ᵀ
            _mul(Ic, sx, r1)
            for r in range(6):
                for c in range(6):
                    r1[r, c] = -r1[r, c]
            _tmul_add(sx, Ic, -1.0, r1)
            # r3 = ψ̇ ×* I^C − I^C ψ̇× + (I^C ψ̇)×̄* + s ×* B^C − B^C s×
            _mv(Ic, ps, v1)
            _rhs_mat(v1, r3)
            _tmul_add(psx, Ic, -1.0, r3)
            _tmul_add(sx, Bc, -1.0, r3)
            _mul(Ic, psx, T1)
            for r in range(6):
                for c in range(6):
                    r3[r, c] -= T1[r, c]
            _mul(Bc, sx, T1)
            for r in range(6):
                for c in range(6):
                    r3[r, c] -= T1[r, c]
                    Bic[r, c] = r1[r, c] + r0[r, c]
                    r2[r, c] = r0[r, c] - r1[r, c]
                    r6[r, c] = r0[r, c]
            _tmul_add(sx, Ic, -1.0, r6)      # r6 = s ×* I^C + (I^C s)×̄*
            for aj in range(nA):
                j = li[i, LI_SUP + aj]
                t = J[j]
                pt = psid[j]
                _mv(r5, t, vecs[_R5T])
                _mv(r6, t, vecs[_R6T])
                _mv(r7, t, vecs[_R7T])
                _mv(r3, t, vecs[_R3T])
                _mv(r4, t, vecs[_R4T])
                _mv(r0, t, vecs[_R0T])
                _mv(Bic, t, vecs[_BICT])
                _mv(r1, t, vecs[_R1T])
                _tmv(r3, t, vecs[_U1])
                _tmv(r1, t, vecs[_U2])
                _tmv(Bic, t, vecs[_U11])
                u3 = vecs[_U3]
                u58 = vecs[_U58]
                u6 = vecs[_U6]
                u7 = vecs[_U7]
                w = vecs[_W]
                _mv(r3, pt, u3)
                _mv(r1, psidd[j], v1)
                for r in range(6):
                    u3[r] += v1[r] + vecs[_R5T, r]
                _mv(r2, pt, u58)
                _mv(Bic, pt, u6)
                for r in range(6):
                    u58[r] += vecs[_R4T, r]
                    u6[r] += vecs[_R7T, r]
                    v2[r] = pt[r] + phid[j, r]
                _mv(r1, v2, u7)
                for r in range(6):
                    u7[r] += vecs[_R3T, r]
                _tmv(Bic, pt, w)
                for r in range(6):
                    w[r] = vecs[_R4T, r] - w[r]   # r4 t_j − Bicᵀ ψ̇_j
                # every k whose link is at or above j's link (all dofs of j's own link included)
                ak_end = aj + 1
                while ak_end < nA and clink[ak_end] == clink[aj]:
                    ak_end += 1
                for ak in range(ak_end):
                    _pair(i, p, j, li[i, LI_SUP + ak], clink[aj], clink[ak], J, psid, psidd, phid, vecs, v2,
                          qq, vv, qv, dM)


@jit
def _pair(i, p, j, k, lj, lk, J, psid, psidd, phid, vecs, sk, qq, vv, qv, dM):
    """The 14 case values of the dofs (p, j, k) — p of joint ``i``, j and k on its chain with k at
    or above j (links ``lj``, ``lk``) — and their writes (Singh, Russell & Wensing 2022 Alg. 1,
    Appendix C; §IV-F)."""
    tk = J[k]
    pk = psid[k]
    ppk = psidd[k]
    for r in range(6):
        sk[r] = pk[r] + phid[k, r]
    u11 = vecs[_U11]
    u1 = vecs[_U1]
    u2 = vecs[_U2]
    r0t = vecs[_R0T]
    p1 = _dot(u11, pk)
    p2 = _dot(r0t, ppk) + _dot(vecs[_W], pk)
    p3 = -_dot(u11, tk)
    p4 = _dot(vecs[_R1T], tk)
    p5 = _dot(r0t, tk)
    p6 = _dot(vecs[_BICT], tk)
    x1 = _dot(u1, pk) + _dot(u2, ppk)
    x2 = _dot(u1, tk) + _dot(u2, sk)
    x3 = _dot(vecs[_U3], tk)
    x4 = _dot(vecs[_U58], tk) + _dot(r0t, sk)
    x5 = _dot(vecs[_U6], tk)
    x6 = _dot(vecs[_U7], tk)
    x7 = _dot(vecs[_R6T], tk)
    x8 = -_dot(u2, tk)
    ij = lj != i
    kj = lk != lj
    qq[p, j, k] = p2
    qv[p, k, j] = -p1
    if ij:
        qq[j, k, p] = x1
        qq[j, p, k] = x1
        qv[j, k, p] = p1
        qv[j, p, k] = x2
        vv[j, k, p] = -p3
        vv[j, p, k] = -p3
        dM[k, j, p] = p4
        if kj:
            dM[j, k, p] = p4
    if kj:
        qq[p, k, j] = p2
        qq[k, p, j] = x3
        vv[p, j, k] = p3
        vv[p, k, j] = p3
        qv[p, j, k] = x4
        qv[k, j, p] = x5
        dM[k, p, j] = p5
        dM[p, k, j] = p5
        if ij:
            qq[k, j, p] = x3
            vv[k, p, j] = p6
            vv[k, j, p] = p6
            qv[k, p, j] = x6
        else:
            vv[k, j, p] = x7
    else:
        vv[p, j, k] = x8


#: scratch of :func:`rnea_second_derivatives_range`: one state's work arrays
RNEA_SECOND_DERIVATIVES_SCRATCH = MOTION.then(
    ("psid", (DOFS, 6)),
    ("psidd", (DOFS, 6)),
    ("phid", (DOFS, 6)),
    ("oa", (LINKS, 6)),
    ("dY", (LINKS, 12)),
    ("of", (LINKS, 6)),
    ("mats", (NMATS, 6, 6)),
    ("vecs", (NVECS, 6)),
)
_RNEASD = RNEA_SECOND_DERIVATIVES_SCRATCH.spec


@jit
def rnea_second_derivatives_range(li, lf, gv, bl, bf, q, v, a, fext, out, start, stop):
    """``out[0..3] = (∂²τ/∂q², ∂²τ/∂v², ∂²τ/∂q∂v, ∂M/∂q)`` (4, B, nv, nv, nv) for q (B, nq), v, a
    (B, nv); fext (B, nbody, 6) or (0, nbody, 6). States ``start`` to ``stop - 1``, on the calling
    thread."""
    L = li.shape[0]
    nv = v.shape[1]
    buf = buffer(_RNEASD.total, L, nv)
    R, p, oR, op, RJ, fl, t = placement_views(buf, L, nv)
    J, ov, vJ, oY = motion_views(buf, L, nv)
    psid = view2(buf, _RNEASD.psid, L, nv)
    psidd = view2(buf, _RNEASD.psidd, L, nv)
    phid = view2(buf, _RNEASD.phid, L, nv)
    oa = view2(buf, _RNEASD.oa, L, nv)
    dY = view2(buf, _RNEASD.dY, L, nv)
    of = view2(buf, _RNEASD.of, L, nv)
    mats = view3(buf, _RNEASD.mats, L, nv)
    vecs = view2(buf, _RNEASD.vecs, L, nv)
    clink = np.empty(nv, dtype=np.int64)
    has_fext = fext.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        world_kinematics(li, lf, q[b], v[b], RJ, R, p, oR, op, J, ov, vJ, t[0])
        world_accelerations(li, gv, J, a[b], ov, vJ, oa, t[0])
        world_inertias(li, lf, oR, op, oY)
        second_order_forward(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, psid, psidd, phid, dY, of, t)
        for m in range(4):
            T = out[m, b]
            for x in range(nv):
                for y in range(nv):
                    for z in range(nv):
                        T[x, y, z] = 0.0
        second_order_backward(li, J, psid, psidd, phid, oY, dY, of, mats, vecs, clink, out[0, b], out[1, b],
                              out[2, b], out[3, b])


@jit_parallel
def rnea_second_derivatives_parallel(li, lf, gv, bl, bf, q, v, a, fext, out, nt):
    """As :func:`rnea_second_derivatives_range` on the whole batch, in ``nt`` slices on the worker
    threads."""
    B = q.shape[0]
    for c in prange(nt):
        rnea_second_derivatives_range(li, lf, gv, bl, bf, q, v, a, fext, out, c * B // nt, (c + 1) * B // nt)
