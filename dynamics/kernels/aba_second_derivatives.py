"""Compiled second-order partial derivatives of forward dynamics: FDSVA-SO (seed 004 §VI, eq. 46),
fused per state as :mod:`dynamics.numpy_backend.aba_second_derivatives` computes them batch-wise.

Per state: ABA gives ``a``; ``M^-1`` from ABA's articulated inertias; ∇RNEA at ``a`` gives
``∂a/∂q = -M^-1 ∂τ/∂q`` and ``∂a/∂v = -M^-1 ∂τ/∂v``; IDSVA-SO at ``a`` gives the ID tensors; then::

    ∂²a/∂q_j∂q_k = -M^-1 (∂²τ/∂q_j∂q_k + ∂M/∂q_j ∂a/∂q_k + ∂M/∂q_k ∂a/∂q_j)
    ∂²a/∂v_j∂v_k = -M^-1  ∂²τ/∂v_j∂v_k
    ∂²a/∂q_j∂v_k = -M^-1 (∂²τ/∂q_j∂v_k + ∂M/∂q_j ∂a/∂v_k)
    ∂²a/∂q_j∂τ_k = -M^-1  ∂M/∂q_j M^-1[:, k]

(seed 004's Direct-Tensor-Matrix variant, §VI-A), each product one BLAS ``dgemm`` on the tensors
reshaped to matrices. Index order as in :mod:`.rnea_second_derivatives`.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .aba import aba_acceleration_pass, aba_bias_pass, articulated_inertias, bias_forces
from .jit import jit, jit_parallel
from .minv import minv_backward, minv_forward
from .rnea import link_external_forces
from .rnea_derivatives import rnea_derivatives_pass
from .rnea_second_derivatives import _NMATS, _NVECS, second_order_backward, second_order_forward
from .scratch import view1, view2, view3
from .world import world_inertias, world_kinematics


@jit
def _neg_dot(A, X, out):
    """``out = -A X`` (2-D, C-contiguous)."""
    np.dot(A, X, out)
    for r in range(out.shape[0]):
        for c in range(out.shape[1]):
            out[r, c] = -out[r, c]


@jit
def aba_second_derivatives_range(li, lf, gv, bl, bf, q, v, tau, fext, out, start, stop):
    """``out[0..3] = (∂²a/∂q², ∂²a/∂v², ∂²a/∂q∂v, ∂²a/∂q∂τ)`` (4, B, nv, nv, nv) for q (B, nq),
    v, tau (B, nv); fext (B, nbody, 6) or (0, nbody, 6). States ``start`` to ``stop - 1``, on the
    calling thread."""
    L = li.shape[0]
    nv = v.shape[1]
    n3 = nv * nv * nv
    buf = np.empty(272 * L + 12 * L * nv + 74 * nv + 5 * nv * nv + 6 * n3 + 36 * _NMATS + 6 * _NVECS + 105)
    R, o = view3(buf, 0, L, 3, 3)
    p, o = view2(buf, o, L, 3)
    oR, o = view3(buf, o, L, 3, 3)
    op, o = view2(buf, o, L, 3)
    RJ, o = view2(buf, o, 3, 3)
    J, o = view2(buf, o, nv, 6)
    ov, o = view2(buf, o, L, 6)
    vJ, o = view2(buf, o, L, 6)
    oY, o = view2(buf, o, L, 13)
    oY2, o = view2(buf, o, L, 13)
    IA, o = view3(buf, o, L, 6, 6)
    U, o = view3(buf, o, L, 6, 6)
    UD, o = view3(buf, o, L, 6, 6)
    Dinv, o = view3(buf, o, L, 6, 6)
    tmp66, o = view2(buf, o, 6, 6)
    chol, o = view2(buf, o, 6, 6)
    cb, o = view2(buf, o, L, 6)
    pA, o = view2(buf, o, L, 6)
    oa, o = view2(buf, o, L, 6)
    u, o = view1(buf, o, nv)
    qdd, o = view1(buf, o, nv)
    F, o = view3(buf, o, L, nv, 6)
    P, o = view3(buf, o, L, nv, 6)
    ws, o = view3(buf, o, 4, L, 6)
    dY, o = view2(buf, o, L, 12)
    cols, o = view3(buf, o, 8, nv, 6)
    psid, o = view2(buf, o, nv, 6)
    psidd, o = view2(buf, o, nv, 6)
    phid, o = view2(buf, o, nv, 6)
    of, o = view2(buf, o, L, 6)
    Mi, o = view2(buf, o, nv, nv)
    dtq, o = view2(buf, o, nv, nv)
    dtv, o = view2(buf, o, nv, nv)
    daq, o = view2(buf, o, nv, nv)
    dav, o = view2(buf, o, nv, nv)
    T, o = view3(buf, o, 4, nv, nv * nv)       # ID tensors qq, vv, qv, dM, then the inner terms
    X, o = view2(buf, o, nv * nv, nv)          # X[l * nv + j, m] = ∂M_lm/∂q_j
    G, o = view2(buf, o, nv * nv, nv)
    mats, o = view3(buf, o, _NMATS, 6, 6)
    vecs, o = view2(buf, o, _NVECS, 6)
    tmp, o = view2(buf, o, 4, 6)
    fl, o = view2(buf, o, L, 6)
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
        _neg_dot(Mi, dtq, daq)
        _neg_dot(Mi, dtv, dav)
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
        # X[l, j, m] = ∂M_lm/∂q_j, so X @ Y contracts m: (∂M/∂q_j Y)[l, k]
        for l_ in range(nv):
            for j in range(nv):
                for m in range(nv):
                    X[l_ * nv + j, m] = TdM[l_, m, j]
        np.dot(X, daq, G)                               # G[l, j, k] = (∂M/∂q_j ∂a/∂q)[l, k]
        for l_ in range(nv):
            for j in range(nv):
                for k in range(nv):
                    Tq[l_, j, k] += G[l_ * nv + j, k] + G[l_ * nv + k, j]
        np.dot(X, dav, G)
        for l_ in range(nv):
            for j in range(nv):
                for k in range(nv):
                    Tqv[l_, j, k] += G[l_ * nv + j, k]
        np.dot(X, Mi, G)                                # ∂M/∂q_j M^-1 (into T[3], no longer needed)
        for l_ in range(nv):
            for j in range(nv):
                for k in range(nv):
                    TdM[l_, j, k] = G[l_ * nv + j, k]
        for m in range(4):
            _neg_dot(Mi, T[m], out[m, b].reshape((nv, nv * nv)))


@jit_parallel
def aba_second_derivatives_parallel(li, lf, gv, bl, bf, q, v, tau, fext, out, nt):
    """As :func:`aba_second_derivatives_range` on the whole batch, in ``nt`` slices on the worker
    threads."""
    B = q.shape[0]
    for c in prange(nt):
        aba_second_derivatives_range(li, lf, gv, bl, bf, q, v, tau, fext, out, c * B // nt, (c + 1) * B // nt)
