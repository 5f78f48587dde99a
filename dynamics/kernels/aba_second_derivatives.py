"""Compiled second-order partial derivatives of forward dynamics: FDSVA-SO (Singh, Russell & Wensing 2022 §VI, eq. 46),
fused per state as :mod:`dynamics.numpy_backend.aba_second_derivatives` computes them batch-wise.

Per state: ABA gives ``a``; ``M^-1`` from ABA's articulated inertias; ∇RNEA at ``a`` gives
``∂a/∂q = -M^-1 ∂τ/∂q`` and ``∂a/∂v = -M^-1 ∂τ/∂v``; IDSVA-SO's backward pass at ``a`` gives the ID
tensors, from what ∇RNEA's pass leaves behind (its ∂v/∂q, ∂a/∂q, ∂a/∂v columns are IDSVA-SO's
``ψ̇``, ``ψ̈``, ``ψ̇ + Ṡ``, its composite inertias, inertia rates and forces its ``I^C``, ``B^C``,
``f^C``: one forward pass for both); then::

    ∂²a/∂q_j∂q_k = -M^-1 (∂²τ/∂q_j∂q_k + ∂M/∂q_j ∂a/∂q_k + ∂M/∂q_k ∂a/∂q_j)
    ∂²a/∂v_j∂v_k = -M^-1  ∂²τ/∂v_j∂v_k
    ∂²a/∂q_j∂v_k = -M^-1 (∂²τ/∂q_j∂v_k + ∂M/∂q_j ∂a/∂v_k)
    ∂²a/∂q_j∂τ_k = -M^-1  ∂M/∂q_j M^-1[:, k]

(the Direct-Tensor-Matrix variant of Singh, Russell & Wensing 2022, §VI-A) as BLAS ``dgemm`` calls on
the tensors reshaped to matrices: the three ``∂M/∂q_j Y`` products as one (``Y = [∂a/∂q | ∂a/∂v |
M^-1]``, with ``∂M_lm/∂q_j = ∂M_ml/∂q_j`` read from the ∂M/∂q tensor as it is, transposed), then
``-M^-1`` times each tensor, written straight into the output; or, with ``bracket``, the bracketed
terms themselves (for DDP, which folds ``-M^-1`` into its contraction vector: four of the seven nv⁴
products skipped). Index order as in :mod:`.rnea_second_derivatives`.
"""

from __future__ import annotations

import numpy as np

from .aba import aba_passes
from .aba_derivatives import ABA_DERIVATIVES_SCRATCH, aba_derivative_views
from .jit import jit
from .minv import minv_passes
from .rnea import link_external_forces
from .rnea_derivatives import rnea_derivatives_pass
from .rnea_second_derivatives import NMATS, NVECS, second_order_backward
from .packing import LI_DOFADR, LI_NSUP, LI_NV, LI_PARENT, LI_SUP
from .scratch import DOFS, align, buffer, carve, extent, view2, view3
from .state_scratch import articulated_views, motion_views, placement_views


#: scratch of :func:`aba_second_derivatives_range`: one state's work arrays
ABA_SECOND_DERIVATIVES_SCRATCH = ABA_DERIVATIVES_SCRATCH.then(
    ("Mi", (DOFS, DOFS)),
    ("da", (DOFS, 2 * DOFS)),       # [∂a/∂q | ∂a/∂v]
    ("T", (4, DOFS, DOFS * DOFS)),  # ID tensors qq, vv, qv, dM
    ("C", (3, DOFS, DOFS * DOFS)),  # qq, qv with their inner terms, and ∂M/∂q_j M^-1
    ("K", (DOFS, 3 * DOFS)),
    ("nMi", (DOFS, DOFS)),
    ("G", (DOFS * DOFS, 3 * DOFS)),
    ("Tc", (DOFS * DOFS, DOFS)),    # the rows of T[3]ᵀ that can be nonzero
    ("mats", (NMATS, 6, 6)),
    ("vecs", (NVECS, 6)),
)
_ABASD = ABA_SECOND_DERIVATIVES_SCRATCH.spec


@jit
def aba_second_derivatives_range(li, lf, gv, bl, bf, q, v, tau, fext, bracket, out, start, stop):
    """``out[0..3] = (∂²a/∂q², ∂²a/∂v², ∂²a/∂q∂v, ∂²a/∂q∂τ)`` (4, B, nv, nv, nv) for q (B, nq),
    v, tau (B, nv); fext (B, nbody, 6) or (0, nbody, 6). With ``bracket`` (bool) the bracketed
    terms ``B`` instead (``∂²a = -M^-1 B``: the four ``-M^-1`` products skipped). States ``start``
    to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = v.shape[1]
    _aba_second_derivatives_range(buffer(_ABASD.total, L, nv), li, lf, gv, bl, bf, q, v, tau, fext, bracket, out,
                                  start, stop)


@jit
def _aba_second_derivatives_range(buf, li, lf, gv, bl, bf, q, v, tau, fext, bracket, out, start, stop):
    """:func:`aba_second_derivatives_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = v.shape[1]
    placements, motion = placement_views(buf, L, nv), motion_views(buf, L, nv)
    articulated = articulated_views(buf, L, nv)
    R, p, oR, op, fl, tmp = placements
    J, ov, vJ, oY = motion
    IA, U, UD, Dinv, tmp66, chol, cb, pA, oa, u = articulated
    qdd, F, P, ws, dY, cols, dt, _ = aba_derivative_views(buf, L, nv)
    Mi = view2(buf, _ABASD.Mi, L, nv)
    da = view2(buf, _ABASD.da, L, nv)
    T = view3(buf, _ABASD.T, L, nv)  # ID tensors qq, vv, qv, dM
    C = view3(buf, _ABASD.C, L, nv)  # the bracketed terms of ∂²a/∂q², ∂²a/∂q∂v, ∂²a/∂q∂τ
    K = view2(buf, _ABASD.K, L, nv)
    nMi = view2(buf, _ABASD.nMi, L, nv)
    # G = T[3]ᵀ K computed on the rows of T[3]ᵀ that can be nonzero only (chain_pairs: ∂M_ml/∂q_j
    # vanishes for every m and state otherwise); pos[l * nv + j] is the row's index in the compact
    # Tc (nr, nv) and G (nr, 3 nv), or -1
    pos = np.empty(nv * nv, dtype=np.int64)
    rows = np.empty(nv * nv, dtype=np.int64)
    nr = chain_pairs(li, nv, pos, rows)
    G = carve(buf, align(extent(_ABASD.G, 0, L, nv)), (nr, 3 * nv))
    Tc = carve(buf, align(extent(_ABASD.Tc, 0, L, nv)), (nr, nv))
    mats = view3(buf, _ABASD.mats, L, nv)
    vecs = view2(buf, _ABASD.vecs, L, nv)
    clink = np.empty(nv, dtype=np.int64)
    has_fext = fext.shape[0] > 0
    # IDSVA-SO writes the same entries of the ID tensors for every state (those whose three dofs
    # are on one chain, a property of the model), so the others are zeroed once
    for m in range(4):
        for x in range(nv):
            for y in range(nv * nv):
                T[m, x, y] = 0.0
    Tq = T[0].reshape((nv, nv, nv))
    Tv = T[1].reshape((nv, nv, nv))
    Tqv = T[2].reshape((nv, nv, nv))
    TdM = T[3].reshape((nv, nv, nv))
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        # forward dynamics and M^-1 (as in aba_derivatives)
        aba_passes(li, lf, gv, q[b], v[b], tau[b], has_fext, qdd, placements, motion, articulated)
        minv_passes(li, J, U, UD, Dinv, F, P, Mi)
        # first-order derivatives at a = qdd; oY, dY, ws[1] become I^C, B^C, f^C and cols[0..2]
        # ψ̇, ψ̈, ψ̇ + Ṡ (second_order_forward's quantities)
        rnea_derivatives_pass(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, dt[:, :nv], dt[:, nv:])
        for r in range(nv):
            for c in range(nv):
                nMi[r, c] = -Mi[r, c]
        np.dot(nMi, dt, da)     # [∂a/∂q | ∂a/∂v], one product
        # ID second-order tensors at a
        second_order_backward(li, J, cols[0], cols[1], cols[2], oY, dY, ws[1], mats, vecs, clink, Tq, Tv, Tqv, TdM)
        # T[3]ᵀ[l * nv + j, m] = ∂M_ml/∂q_j = ∂M_lm/∂q_j, so T[3]ᵀ @ K contracts m: (∂M/∂q_j K)[l, k],
        # with K = [∂a/∂q | ∂a/∂v | M^-1] (one product for the three inner terms), on the compact rows
        for r in range(nv):
            for c in range(nv):
                K[r, c] = da[r, c]
                K[r, nv + c] = da[r, nv + c]
                K[r, 2 * nv + c] = Mi[r, c]
        for r in range(nr):
            g = rows[r]
            for m in range(nv):
                Tc[r, m] = T[3, m, g]
        np.dot(Tc, K, G)
        if bracket:
            # the bracketed terms straight into the output (same [l, j * nv + k] layout as C)
            _inner_terms(Tq, Tqv, G, pos, out[0, b].reshape((nv, nv * nv)), out[2, b].reshape((nv, nv * nv)),
                         out[3, b].reshape((nv, nv * nv)))
            ob = out[1, b].reshape((nv, nv * nv))
            for l_ in range(nv):
                for y in range(nv * nv):
                    ob[l_, y] = T[1, l_, y]
            continue
        _inner_terms(Tq, Tqv, G, pos, C[0], C[1], C[2])
        np.dot(nMi, C[0], out[0, b].reshape((nv, nv * nv)))
        np.dot(nMi, T[1], out[1, b].reshape((nv, nv * nv)))
        np.dot(nMi, C[1], out[2, b].reshape((nv, nv * nv)))
        np.dot(nMi, C[2], out[3, b].reshape((nv, nv * nv)))


@jit
def chain_pairs(li, nv, pos, rows):
    """The rows (l, j) of ``∂M_ml/∂q_j`` (over m) that can be nonzero, in row-major order:
    ``rows[:n]`` their indices ``l * nv + j``, ``pos[l * nv + j]`` their rank or -1 (pos, rows
    (nv * nv,) int64). Returns n. A row vanishes at every state when l and j are not on one chain
    (neither's link supports the other's), or when j is a dof of a root joint (one whose parent is
    the world): moving it moves the whole tree rigidly, which leaves M unchanged."""
    for g in range(nv * nv):
        pos[g] = -1
    for i in range(li.shape[0]):
        for kp in range(li[i, LI_NV]):
            p = li[i, LI_DOFADR] + kp
            for aj in range(li[i, LI_NSUP]):
                j = li[i, LI_SUP + aj]
                pos[p * nv + j] = 0
                pos[j * nv + p] = 0
    for i in range(li.shape[0]):
        if li[i, LI_PARENT] < 0:
            for kp in range(li[i, LI_NV]):
                j = li[i, LI_DOFADR] + kp
                for l_ in range(nv):
                    pos[l_ * nv + j] = -1
    n = 0
    for g in range(nv * nv):
        if pos[g] == 0:
            pos[g] = n
            rows[n] = g
            n += 1
    return n


@jit
def _inner_terms(Tq, Tqv, G, pos, Cqq, Cqv, Cqt):
    """The bracketed terms of the module docstring's formulas, each (nv, nv * nv) [l, j * nv + k],
    from the ID tensors ``Tq``, ``Tqv`` (nv, nv, nv) and ``G = T[3]ᵀ K`` on the rows ``pos`` (of
    :func:`chain_pairs`) lists (the others are zero)."""
    nv = Tq.shape[0]
    for l_ in range(nv):
        for j in range(nv):
            g = pos[l_ * nv + j]
            o = j * nv
            if g < 0:
                for k in range(nv):
                    Cqq[l_, o + k] = Tq[l_, j, k]
                    Cqv[l_, o + k] = Tqv[l_, j, k]
                    Cqt[l_, o + k] = 0.0
            else:
                for k in range(nv):
                    Cqq[l_, o + k] = Tq[l_, j, k] + G[g, k]
                    Cqv[l_, o + k] = Tqv[l_, j, k] + G[g, nv + k]
                    Cqt[l_, o + k] = G[g, 2 * nv + k]  # ∂M/∂q_j M^-1
        # the symmetric term (∂M/∂q_k ∂a/∂q)[l, j] of ∂²/∂q_j∂q_k, on the rows (l, k) that have one
        for k in range(nv):
            h = pos[l_ * nv + k]
            if h >= 0:
                for j in range(nv):
                    Cqq[l_, j * nv + k] += G[h, j]
