"""Compiled first-order partial derivatives of forward dynamics, fused per state (Plancher et al. 2021
Algorithm 3, completely fused as in Plancher et al. 2021 Sec. IV-B): ABA gives ``qdd``; the analytical
``M^-1`` reuses ABA's articulated inertias; ∇RNEA is evaluated with ``qdd`` as input, reusing
ABA's world kinematics and accelerations (:mod:`.rnea_derivatives`); then
``∂a/∂q = -M^-1 ∂τ/∂q``, ``∂a/∂v = -M^-1 ∂τ/∂v``, ``∂a/∂τ = M^-1``.
With ``M^-1`` given, its computation is skipped (ΔiFD of Yang, Chen & Han 2023, Dadu-RBD, Table I).

The two dense products are the only O(nv^3) step; they go to BLAS (``np.dot``, single-threaded for
these sizes) rather than a hand-written loop, which is several times slower.
"""

from __future__ import annotations

import numpy as np

from .aba import aba_acceleration_pass, aba_bias_pass, articulated_inertias, bias_forces
from .jit import jit
from .minv import minv_backward, minv_forward
from .rnea import link_external_forces
from .rnea_derivatives import rnea_derivatives_pass
from .scratch import DOFS, LINKS, buffer, view1, view2, view3
from .state_scratch import ARTICULATED, articulated_views, motion_views, placement_views
from .world import world_inertias, world_kinematics


@jit
def neg_product(Mi, X, out):
    """``out = -Mi X`` (all (nv, nv), C-contiguous)."""
    np.dot(Mi, X, out)
    n = out.shape[0]
    for r in range(n):
        for c in range(n):
            out[r, c] = -out[r, c]


#: scratch of :func:`aba_derivatives_range`: one state's work arrays
ABA_DERIVATIVES_SCRATCH = ARTICULATED.then(
    ("qdd", (DOFS,)),
    ("F", (LINKS, DOFS, 6)),
    ("P", (LINKS, DOFS, 6)),
    ("ws", (4, LINKS, 6)),
    ("dY", (LINKS, 12)),
    ("cols", (8, DOFS, 6)),
    ("dtq", (DOFS, DOFS)),
    ("dtv", (DOFS, DOFS)),
)
_ABAD = ABA_DERIVATIVES_SCRATCH.spec


@jit
def aba_derivative_views(buf, L, nv):
    """``(qdd, F, P, ws, dY, cols, dtq, dtv)`` of a buffer laid out from :data:`ABA_DERIVATIVES_SCRATCH`
    (its fields after :data:`~.state_scratch.ARTICULATED`'s)."""
    return (view1(buf, _ABAD.qdd, L, nv), view3(buf, _ABAD.F, L, nv), view3(buf, _ABAD.P, L, nv),
            view3(buf, _ABAD.ws, L, nv), view2(buf, _ABAD.dY, L, nv), view3(buf, _ABAD.cols, L, nv),
            view2(buf, _ABAD.dtq, L, nv), view2(buf, _ABAD.dtv, L, nv))


@jit
def aba_derivatives_range(li, lf, gv, bl, bf, q, v, tau, fext, minv_in, out, acc, start, stop):
    """``out[0] = ∂a/∂q``, ``out[1] = ∂a/∂v``, ``out[2] = ∂a/∂τ`` (3, B, nv, nv) for q (B, nq),
    v, tau (B, nv); fext (B, nbody, 6) or (0, nbody, 6) for none; minv_in (B, nv, nv), or
    (0, nv, nv) to compute ``M^-1``; acc (B, nv) receives the acceleration ABA computed on the way,
    or (0, nv) to drop it. States ``start`` to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = v.shape[1]
    buf = buffer(_ABAD.total, L, nv)
    R, p, oR, op, RJ, fl, tmp = placement_views(buf, L, nv)
    J, ov, vJ, oY = motion_views(buf, L, nv)
    IA, U, UD, Dinv, tmp66, chol, cb, pA, oa, u = articulated_views(buf, L, nv)
    qdd, F, P, ws, dY, cols, dtq, dtv = aba_derivative_views(buf, L, nv)
    has_fext = fext.shape[0] > 0
    has_minv = minv_in.shape[0] > 0
    has_acc = acc.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        world_kinematics(li, lf, q[b], v[b], RJ, R, p, oR, op, J, ov, vJ, tmp[0])
        world_inertias(li, lf, oR, op, oY)
        bias_forces(li, oY, ov, vJ, has_fext, fl, oR, op, cb, pA, tmp)
        articulated_inertias(li, lf, oY, J, IA, U, UD, Dinv, tmp66, chol)
        aba_bias_pass(li, J, tau[b], IA, U, UD, cb, pA, u)
        aba_acceleration_pass(li, gv, J, U, Dinv, cb, u, qdd, oa)
        if has_acc:
            for r in range(nv):
                acc[b, r] = qdd[r]
        Mi = out[2, b]
        if has_minv:
            for r in range(nv):
                for c in range(nv):
                    Mi[r, c] = minv_in[b, r, c]
        else:
            for r in range(nv):
                for c in range(nv):
                    Mi[r, c] = 0.0
            minv_backward(li, J, UD, Dinv, F, Mi)
            minv_forward(li, J, U, Dinv, P, Mi)
        # ∇RNEA at (q, v, qdd); oY becomes the composite inertias
        rnea_derivatives_pass(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, dtq, dtv)
        neg_product(Mi, dtq, out[0, b])
        neg_product(Mi, dtv, out[1, b])
