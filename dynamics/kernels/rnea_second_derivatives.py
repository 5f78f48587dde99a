"""Compiled second-order partial derivatives of inverse dynamics: IDSVA-SO (Singh, Russell & Wensing
2022, Algorithm 1), per state, with the case values, index order and exactly-once writes of
:mod:`dynamics.numpy_backend.rnea_second_derivatives`; its per-dof 6x6 matrices are regrouped into
two (see :func:`_dof_terms`) and the per-(p, j) and per-(p, j, k) terms are each one fused loop.

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

from .jit import jit, jit_inline
from .packing import LI_DOFADR, LI_NSUP, LI_NV, LI_PARENT, LI_SUP
from .rnea import link_external_forces
from .rnea_derivatives import inertia_rate
from .scratch import DOFS, LINKS, buffer, view2, view3
from .spatial import dense_inertia, force_cross_add, force_to_parent, inertia_mul, mot_cross
from .state_scratch import MOTION, motion_views, placement_views
from .world import world_accelerations, world_inertias, world_kinematics

# rows of the per-dof 6x6 work matrices (``mats``)
_IC, _BC, _WY, _BCT, _R1, _R3, _WZ = range(7)
#: number of per-dof 6x6 work matrices (the GPU backend sizes its scratch with it)
NMATS = 7
# rows of the work vectors (``vecs``): per dof p of joint i, then per (p, j), then temporaries
# (the four per-dof forces and their products with S_j, ``_R0T`` to ``_R4T``, in the same order)
(_ICS, _G5, _G7, _BCS, _R0T, _T5, _T7, _R4T, _R1T, _U1, _U3, _U58, _U6, _U7, _R6T, _X, _Y, _Z) = range(18)
#: number of work vectors
NVECS = 18


@jit_inline
def _xfr(y, iy, f, jf, out, io):
    """``out[io] = y[iy] ×* f[jf]`` (motion on force; rows of 2-D arrays of 6-vectors)."""
    l0 = y[iy, 4] * f[jf, 2] - y[iy, 5] * f[jf, 1]
    l1 = y[iy, 5] * f[jf, 0] - y[iy, 3] * f[jf, 2]
    l2 = y[iy, 3] * f[jf, 1] - y[iy, 4] * f[jf, 0]
    a0 = y[iy, 1] * f[jf, 2] - y[iy, 2] * f[jf, 1] + y[iy, 4] * f[jf, 5] - y[iy, 5] * f[jf, 4]
    a1 = y[iy, 2] * f[jf, 0] - y[iy, 0] * f[jf, 2] + y[iy, 5] * f[jf, 3] - y[iy, 3] * f[jf, 5]
    a2 = y[iy, 0] * f[jf, 1] - y[iy, 1] * f[jf, 0] + y[iy, 3] * f[jf, 4] - y[iy, 4] * f[jf, 3]
    out[io, 0] = l0
    out[io, 1] = l1
    out[io, 2] = l2
    out[io, 3] = a0
    out[io, 4] = a1
    out[io, 5] = a2


@jit
def second_order_forward(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, psid, psidd, psv, dY, of, t):
    """World-frame forward quantities: ``psid`` (ψ̇), ``psidd`` (ψ̈), ``psv`` (ψ̇ + Ṡ) (nv, 6) — as
    :func:`.rnea_derivatives.rnea_derivatives_pass` computes ∂v/∂q, ∂a/∂q and ∂a/∂v; then the composites
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
            mot_cross(ov[i], J[d], psv[d])
            for r in range(6):
                psv[d, r] += psid[d, r]
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


@jit_inline
def _rhs_add(f, jf, out):
    """``out += `` the matrix of ``y -> y ×* f[jf]``: ``[[0, -[f_l]x], [-[f_l]x, -[f_a]x]]``."""
    for blk in range(3):
        ro = 0 if blk == 0 else 3
        co = 0 if blk == 1 else 3
        o = 3 if blk == 2 else 0
        out[ro, co + 1] += f[jf, o + 2]
        out[ro, co + 2] -= f[jf, o + 1]
        out[ro + 1, co] -= f[jf, o + 2]
        out[ro + 1, co + 2] += f[jf, o]
        out[ro + 2, co] += f[jf, o + 1]
        out[ro + 2, co + 1] -= f[jf, o]


@jit_inline
def _dof_terms(i, p, J, psid, psidd, psv, fC, mats, vecs):
    """The terms of dof ``p`` of joint ``i`` shared by all its (j, k) pairs, from ``I^C`` and
    ``B^C`` (``mats[_IC]``, ``mats[_BC]``): the matrices ``r1 = s ×* I^C − I^C s×`` (symmetric) and
    ``r3 = ψ̇ ×* I^C − I^C ψ̇× + (I^C ψ̇)×̄* + s ×* B^C − B^C s×``, and the vectors ``I^C s``,
    ``B^Cᵀ s``, ``g5 = B^C ψ̇ + s ×* f^C + I^C ψ̈``, ``g7 = B^C s + I^C (ψ̇ + Ṡ)``. The other
    matrices of Alg. 1 are cross-product matrices ``(x)×̄*`` (applied as cross products) or sums of
    these (``(I^C s)×̄*`` is antisymmetric, so ``B^{ic} = r1 + (I^C s)×̄*`` and its transpose
    need no matrix of their own).

    No cross-product matrix is formed: row ``r`` of ``A s×`` is ``−(s ×* A[r])`` (``(s×)ᵀ = −s×*``),
    so with ``Y[r] = s ×* I^C[r]`` (I^C symmetric) ``r1 = Y + Yᵀ``; likewise ``ψ̇`` for ``r3``, whose
    ``s ×* B^C − B^C s×`` is ``Wᵀ + V`` with ``W[c] = s ×* B^C[:, c]`` and ``V[r] = s ×* B^C[r]``
    (the first three columns of ``B^C`` vanish, so are the first three rows of ``W``). The seven
    matrix-vector products share one loop, and every helper is inlined (a call per 6x6 product
    cost as much as the product)."""
    Ic = mats[_IC]
    Bc = mats[_BC]
    Y = mats[_WY]
    BcT = mats[_BCT]
    r1 = mats[_R1]
    r3 = mats[_R3]
    Z = mats[_WZ]
    for r in range(6):
        a1 = a2 = a3 = a4 = b1 = b2 = b3 = 0.0
        for c in range(6):
            ic = Ic[r, c]
            bc = Bc[r, c]
            sc = J[p, c]
            pc = psid[p, c]
            a1 += ic * sc
            a2 += ic * psidd[p, c]
            a3 += ic * psv[p, c]
            a4 += ic * pc
            b1 += bc * pc
            b2 += bc * sc
            b3 += Bc[c, r] * sc
        vecs[_ICS, r] = a1                                  # I^C s
        vecs[_BCS, r] = b3                                  # B^Cᵀ s
        vecs[_G5, r] = b1 + a2                              # B^C ψ̇ + I^C ψ̈ (+ s ×* f^C below)
        vecs[_G7, r] = b2 + a3                              # B^C s + I^C (ψ̇ + Ṡ)
        vecs[_Z, r] = a4                                    # I^C ψ̇
    _xfr(J, p, fC, i, vecs, _X)
    for r in range(6):
        vecs[_G5, r] += vecs[_X, r]
    for r in range(6):
        _xfr(J, p, Ic, r, Y, r)
        _xfr(psid, p, Ic, r, Z, r)
    for r in range(6):
        for c in range(r, 6):
            x = Y[r, c] + Y[c, r]
            r1[r, c] = x
            r1[c, r] = x
            r3[r, c] = Z[r, c] + Z[c, r]
            r3[c, r] = r3[r, c]
    _rhs_add(vecs, _Z, r3)                                  # + (I^C ψ̇)×̄*
    for r in range(6):
        _xfr(J, p, Bc, r, Z, r)                             # V
    for r in range(3, 6):
        for c in range(6):
            BcT[r, c] = Bc[c, r]
        _xfr(J, p, BcT, r, Y, r)                            # W (rows 3..5)
    for r in range(6):
        for c in range(3):
            r3[r, c] += Z[r, c]
        for c in range(3, 6):
            r3[r, c] += Z[r, c] + Y[c, r]


@jit_inline
def _pair_terms(p, j, J, psid, psidd, psv, mats, vecs):
    """The vectors of the pair (p, j) — ``j`` a dof on the chain of ``p``'s joint — that
    :func:`_pair` dots with the k-dof vectors (after :func:`_dof_terms` of ``p``): with ``t = S_j``,
    ``r0 = (I^C s)×̄*``, ``r4 = (B^Cᵀ s)×̄*``, ``r5 = g5×̄*``, ``r7 = g7×̄*``: ``R1T = r1 t``,
    ``R0T = r0 t``, ``U1 = r3ᵀ t``, ``U3 = r3 ψ̇_j + r1 ψ̈_j + r5 t``,
    ``U58 = (r0 − r1) ψ̇_j + r4 t`` (also the paper's ``r4 t − B^{icᵀ} ψ̇_j``),
    ``U6 = (r1 + r0) ψ̇_j + r7 t``, ``U7 = r1 (ψ̇_j + Ṡ_j) + r3 t`` (``psv_j = ψ̇_j + Ṡ_j``),
    ``R6T = r0 t + s ×* I^C t``.
    The eight 6x6 products share one unrolled loop."""
    r1 = mats[_R1]
    r3 = mats[_R3]
    Ic = mats[_IC]
    # the j-vectors in locals, the products unrolled (stores into vecs would otherwise force reloads)
    t0, t1, t2, t3, t4, t5 = J[j, 0], J[j, 1], J[j, 2], J[j, 3], J[j, 4], J[j, 5]
    h0, h1, h2, h3, h4, h5 = psid[j, 0], psid[j, 1], psid[j, 2], psid[j, 3], psid[j, 4], psid[j, 5]
    g0, g1, g2, g3, g4, g5 = psidd[j, 0], psidd[j, 1], psidd[j, 2], psidd[j, 3], psidd[j, 4], psidd[j, 5]
    w0, w1, w2, w3, w4, w5 = psv[j, 0], psv[j, 1], psv[j, 2], psv[j, 3], psv[j, 4], psv[j, 5]
    for r in range(6):
        a0, a1, a2, a3, a4, a5 = r1[r, 0], r1[r, 1], r1[r, 2], r1[r, 3], r1[r, 4], r1[r, 5]
        b0, b1, b2, b3, b4, b5 = r3[r, 0], r3[r, 1], r3[r, 2], r3[r, 3], r3[r, 4], r3[r, 5]
        e0, e1, e2, e3, e4, e5 = r3[0, r], r3[1, r], r3[2, r], r3[3, r], r3[4, r], r3[5, r]
        d0, d1, d2, d3, d4, d5 = Ic[r, 0], Ic[r, 1], Ic[r, 2], Ic[r, 3], Ic[r, 4], Ic[r, 5]
        s6 = a0 * h0 + a1 * h1 + a2 * h2 + a3 * h3 + a4 * h4 + a5 * h5
        vecs[_R1T, r] = a0 * t0 + a1 * t1 + a2 * t2 + a3 * t3 + a4 * t4 + a5 * t5
        vecs[_U1, r] = e0 * t0 + e1 * t1 + e2 * t2 + e3 * t3 + e4 * t4 + e5 * t5
        vecs[_U3, r] = (b0 * h0 + b1 * h1 + b2 * h2 + b3 * h3 + b4 * h4 + b5 * h5
                        + a0 * g0 + a1 * g1 + a2 * g2 + a3 * g3 + a4 * g4 + a5 * g5)
        vecs[_U7, r] = (a0 * w0 + a1 * w1 + a2 * w2 + a3 * w3 + a4 * w4 + a5 * w5
                        + b0 * t0 + b1 * t1 + b2 * t2 + b3 * t3 + b4 * t4 + b5 * t5)
        vecs[_X, r] = s6                                    # r1 ψ̇_j
        vecs[_Z, r] = d0 * t0 + d1 * t1 + d2 * t2 + d3 * t3 + d4 * t4 + d5 * t5  # I^C t
    for f in range(4):                                      # t ×* (I^C s, g5, g7, B^Cᵀ s)
        _xfr(J, j, vecs, _ICS + f, vecs, _R0T + f)
    _xfr(psid, j, vecs, _ICS, vecs, _Y)                     # r0 ψ̇_j
    _xfr(J, p, vecs, _Z, vecs, _R6T)
    for r in range(6):
        x = vecs[_X, r]
        y = vecs[_Y, r]
        vecs[_U3, r] += vecs[_T5, r]
        vecs[_U58, r] = y - x + vecs[_R4T, r]
        vecs[_U6, r] = x + y + vecs[_T7, r]
        vecs[_R6T, r] += vecs[_R0T, r]


@jit
def second_order_backward(li, J, psid, psidd, psv, IC, BC, fC, mats, vecs, clink, qq, vv, qv, dM):
    """The IDSVA-SO backward pass: writes ``qq`` (∂²τ/∂q²), ``vv`` (∂²τ/∂v²), ``qv`` (∂²τ/∂q∂v) and
    ``dM`` (∂M/∂q), each (nv, nv, nv) and zero on entry, from the composites ``IC``, ``BC``, ``fC``
    and the dof vectors ``psid`` (ψ̇), ``psidd`` (ψ̈), ``psv`` (ψ̇ + Ṡ) of :func:`second_order_forward`.
    ``mats`` (NMATS, 6, 6) and ``vecs`` (NVECS, 6) are scratch; ``clink`` is (nv,) int64 scratch
    (the link of each dof of the current chain)."""
    L = li.shape[0]
    Ic = mats[_IC]
    Bc = mats[_BC]
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
            _dof_terms(i, p, J, psid, psidd, psv, fC, mats, vecs)
            for aj in range(nA):
                j = li[i, LI_SUP + aj]
                _pair_terms(p, j, J, psid, psidd, psv, mats, vecs)
                # every k whose link is at or above j's link (all dofs of j's own link included)
                ak_end = aj + 1
                while ak_end < nA and clink[ak_end] == clink[aj]:
                    ak_end += 1
                for ak in range(ak_end):
                    _pair(i, p, j, li[i, LI_SUP + ak], clink[aj], clink[ak], J, psid, psidd, psv, vecs,
                          qq, vv, qv, dM)


@jit_inline
def _pair(i, p, j, k, lj, lk, J, psid, psidd, psv, vecs, qq, vv, qv, dM):
    """The 14 case values of the dofs (p, j, k) — p of joint ``i``, j and k on its chain with k at
    or above j (links ``lj``, ``lk``) — and their writes (Singh, Russell & Wensing 2022 Alg. 1,
    Appendix C; §IV-F), from the pair vectors of :func:`_pair_terms` (sixteen dot products, one
    loop)."""
    a = b = d = e = f = g = p4 = p5 = w = u1p = u1t = x3 = u58t = x5 = x6 = x7 = 0.0
    for r in range(6):
        tk = J[k, r]
        pk = psid[k, r]
        ppk = psidd[k, r]
        fk = psv[k, r]
        r1t = vecs[_R1T, r]
        r0t = vecs[_R0T, r]
        u1 = vecs[_U1, r]
        u58 = vecs[_U58, r]
        a += r1t * pk
        b += r0t * pk
        d += r1t * fk
        e += r0t * ppk
        f += r1t * ppk
        g += r0t * fk
        p4 += r1t * tk
        p5 += r0t * tk
        w += u58 * pk
        u1p += u1 * pk
        u1t += u1 * tk
        u58t += u58 * tk
        x3 += vecs[_U3, r] * tk
        x5 += vecs[_U6, r] * tk
        x6 += vecs[_U7, r] * tk
        x7 += vecs[_R6T, r] * tk
    p1 = a - b
    p2 = e + w
    p3 = p5 - p4
    p6 = p4 + p5
    x1 = u1p + f
    x2 = u1t + d
    x4 = u58t + g
    x8 = -p4
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
    ("psv", (DOFS, 6)),
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
    _rnea_second_derivatives_range(buffer(_RNEASD.total, L, nv), li, lf, gv, bl, bf, q, v, a, fext, out, start, stop)


@jit
def _rnea_second_derivatives_range(buf, li, lf, gv, bl, bf, q, v, a, fext, out, start, stop):
    """:func:`rnea_second_derivatives_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = v.shape[1]
    R, p, oR, op, fl, t = placement_views(buf, L, nv)
    J, ov, vJ, oY = motion_views(buf, L, nv)
    psid = view2(buf, _RNEASD.psid, L, nv)
    psidd = view2(buf, _RNEASD.psidd, L, nv)
    psv = view2(buf, _RNEASD.psv, L, nv)
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
        world_kinematics(li, lf, q[b], v[b], R, p, oR, op, J, ov, vJ, t[0])
        world_accelerations(li, gv, J, a[b], ov, vJ, oa, t[0])
        world_inertias(li, lf, oR, op, oY)
        second_order_forward(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, psid, psidd, psv, dY, of, t)
        for m in range(4):
            T = out[m, b]
            for x in range(nv):
                for y in range(nv):
                    for z in range(nv):
                        T[x, y, z] = 0.0
        second_order_backward(li, J, psid, psidd, psv, oY, dY, of, mats, vecs, clink, out[0, b], out[1, b],
                              out[2, b], out[3, b])
