"""Compiled second-order partial derivatives of forward dynamics: FDSVA-SO (Singh, Russell & Wensing 2022 §VI, eq. 46),
fused per state as :mod:`dynamics.numpy_backend.aba_second_derivatives` computes them batch-wise.

Per state: ABA gives ``a``; ``M^-1`` from ABA's articulated inertias; ∇RNEA at ``a`` gives
``∂a/∂q = -M^-1 ∂τ/∂q`` and ``∂a/∂v = -M^-1 ∂τ/∂v``; IDSVA-SO at ``a`` gives the ID tensors; then::

    ∂²a/∂q_j∂q_k = -M^-1 (∂²τ/∂q_j∂q_k + ∂M/∂q_j ∂a/∂q_k + ∂M/∂q_k ∂a/∂q_j)
    ∂²a/∂v_j∂v_k = -M^-1  ∂²τ/∂v_j∂v_k
    ∂²a/∂q_j∂v_k = -M^-1 (∂²τ/∂q_j∂v_k + ∂M/∂q_j ∂a/∂v_k)
    ∂²a/∂q_j∂τ_k = -M^-1  ∂M/∂q_j M^-1[:, k]

(the Direct-Tensor-Matrix variant of Singh, Russell & Wensing 2022, §VI-A) as BLAS ``dgemm`` calls on
the tensors reshaped to matrices: the three ``∂M/∂q_j Y`` products as one (``Y = [∂a/∂q | ∂a/∂v |
M^-1]``), then ``-M^-1`` times each tensor, written straight into the output. Index order as in
:mod:`.rnea_second_derivatives`.
"""

from __future__ import annotations

import numpy as np

from .aba import aba_acceleration_pass, aba_bias_pass, articulated_inertias, bias_forces
from .aba_derivatives import ABA_DERIVATIVES_SCRATCH, aba_derivative_views
from .jit import jit
from .minv import minv_backward, minv_forward
from .rnea import link_external_forces
from .rnea_derivatives import rnea_derivatives_pass
from .rnea_second_derivatives import NMATS, NVECS, second_order_backward, second_order_forward
from .scratch import DOFS, LINKS, buffer, view2, view3
from .state_scratch import articulated_views, motion_views, placement_views
from .world import world_inertias, world_kinematics


#: scratch of :func:`aba_second_derivatives_range`: one state's work arrays
ABA_SECOND_DERIVATIVES_SCRATCH = ABA_DERIVATIVES_SCRATCH.then(
    ("oY2", (LINKS, 13)),
    ("psid", (DOFS, 6)),
    ("psidd", (DOFS, 6)),
    ("phid", (DOFS, 6)),
    ("of", (LINKS, 6)),
    ("Mi", (DOFS, DOFS)),
    ("daq", (DOFS, DOFS)),
    ("dav", (DOFS, DOFS)),
    ("T", (4, DOFS, DOFS * DOFS)),  # ID tensors qq, vv, qv, dM, then the inner terms
    ("X", (DOFS * DOFS, DOFS)),  # X[l * nv + j, m] = ∂M_lm/∂q_j
    ("K", (DOFS, 3 * DOFS)),
    ("nMi", (DOFS, DOFS)),
    ("G", (DOFS * DOFS, 3 * DOFS)),
    ("mats", (NMATS, 6, 6)),
    ("vecs", (NVECS, 6)),
)
_ABASD = ABA_SECOND_DERIVATIVES_SCRATCH.spec


@jit
def aba_second_derivatives_range(li, lf, gv, bl, bf, q, v, tau, fext, out, start, stop):
    """``out[0..3] = (∂²a/∂q², ∂²a/∂v², ∂²a/∂q∂v, ∂²a/∂q∂τ)`` (4, B, nv, nv, nv) for q (B, nq),
    v, tau (B, nv); fext (B, nbody, 6) or (0, nbody, 6). States ``start`` to ``stop - 1``, on the
    calling thread."""
    L = li.shape[0]
    nv = v.shape[1]
    buf = buffer(_ABASD.total, L, nv)
    R, p, oR, op, RJ, fl, tmp = placement_views(buf, L, nv)
    J, ov, vJ, oY = motion_views(buf, L, nv)
    IA, U, UD, Dinv, tmp66, chol, cb, pA, oa, u = articulated_views(buf, L, nv)
    qdd, F, P, ws, dY, cols, dtq, dtv = aba_derivative_views(buf, L, nv)
    oY2 = view2(buf, _ABASD.oY2, L, nv)
    psid = view2(buf, _ABASD.psid, L, nv)
    psidd = view2(buf, _ABASD.psidd, L, nv)
    phid = view2(buf, _ABASD.phid, L, nv)
    of = view2(buf, _ABASD.of, L, nv)
    Mi = view2(buf, _ABASD.Mi, L, nv)
    daq = view2(buf, _ABASD.daq, L, nv)
    dav = view2(buf, _ABASD.dav, L, nv)
    T = view3(buf, _ABASD.T, L, nv)  # ID tensors qq, vv, qv, dM, then the inner terms
    X = view2(buf, _ABASD.X, L, nv)  # X[l * nv + j, m] = ∂M_lm/∂q_j
    K = view2(buf, _ABASD.K, L, nv)
    nMi = view2(buf, _ABASD.nMi, L, nv)
    G = view2(buf, _ABASD.G, L, nv)
    mats = view3(buf, _ABASD.mats, L, nv)
    vecs = view2(buf, _ABASD.vecs, L, nv)
    clink = np.empty(nv, dtype=np.int64)
    has_fext = fext.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        # forward dynamics and M^-1 (as in aba_derivatives)
        world_kinematics(li, lf, q[b], v[b], RJ, R, p, oR, op, J, ov, vJ, tmp[0])
        world_inertias(li, lf, oR, op, oY)
        for i in range(L):
            for k in range(13):
                oY2[i, k] = oY[i, k]
        bias_forces(li, oY, ov, vJ, has_fext, fl, oR, op, cb, pA, tmp)
        articulated_inertias(li, lf, oY, J, IA, U, UD, Dinv, tmp66, chol)
        aba_bias_pass(li, J, tau[b], IA, U, UD, cb, pA, u)
        aba_acceleration_pass(li, gv, J, U, Dinv, cb, u, qdd, oa)
        for r in range(nv):
            for c in range(nv):
                Mi[r, c] = 0.0
        minv_backward(li, J, UD, Dinv, F, Mi)
        minv_forward(li, J, U, Dinv, P, Mi)
        # first-order derivatives at a = qdd (oY becomes composite here)
        rnea_derivatives_pass(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, dtq, dtv)
        for r in range(nv):
            for c in range(nv):
                nMi[r, c] = -Mi[r, c]
        np.dot(nMi, dtq, daq)
        np.dot(nMi, dtv, dav)
        # ID second-order tensors at a (from the rigid inertias again)
        second_order_forward(li, gv, J, ov, oa, oY2, has_fext, fl, oR, op, psid, psidd, phid, dY, of, tmp)
        for m in range(4):
            for x in range(nv):
                for y in range(nv * nv):
                    T[m, x, y] = 0.0
        Tq = T[0].reshape((nv, nv, nv))
        Tv = T[1].reshape((nv, nv, nv))
        Tqv = T[2].reshape((nv, nv, nv))
        TdM = T[3].reshape((nv, nv, nv))
        second_order_backward(li, J, psid, psidd, phid, oY2, dY, of, mats, vecs, clink, Tq, Tv, Tqv, TdM)
        # X[l, j, m] = ∂M_lm/∂q_j, so X @ K contracts m: (∂M/∂q_j K)[l, k], with K = [∂a/∂q | ∂a/∂v | M^-1]
        # (one product for the three inner terms)
        for l_ in range(nv):
            for j in range(nv):
                for m in range(nv):
                    X[l_ * nv + j, m] = TdM[l_, m, j]
        for r in range(nv):
            for c in range(nv):
                K[r, c] = daq[r, c]
                K[r, nv + c] = dav[r, c]
                K[r, 2 * nv + c] = Mi[r, c]
        np.dot(X, K, G)
        for l_ in range(nv):
            for j in range(nv):
                g = l_ * nv + j
                for k in range(nv):
                    Tq[l_, j, k] += G[g, k] + G[l_ * nv + k, j]
                    Tqv[l_, j, k] += G[g, nv + k]
                    TdM[l_, j, k] = G[g, 2 * nv + k]    # ∂M/∂q_j M^-1 (T[3] no longer needed)
        for m in range(4):
            np.dot(nMi, T[m], out[m, b].reshape((nv, nv * nv)))
