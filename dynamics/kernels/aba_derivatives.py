"""Compiled first-order partial derivatives of forward dynamics, fused per state (Plancher et al. 2021
Algorithm 3, completely fused as in Plancher et al. 2021 Sec. IV-B): ABA gives ``qdd``; the analytical
``M^-1`` reuses ABA's articulated inertias; ∇RNEA is evaluated with ``qdd`` as input, reusing
ABA's world kinematics and accelerations (:mod:`.rnea_derivatives`); then
``∂a/∂q = -M^-1 ∂τ/∂q``, ``∂a/∂v = -M^-1 ∂τ/∂v``, ``∂a/∂τ = M^-1``.
With ``M^-1`` given, its computation is skipped (ΔiFD of Yang, Chen & Han 2023, Dadu-RBD, Table I).

The two dense products are the only O(nv^3) step; they go to BLAS (``np.dot``, single-threaded for
these sizes) rather than a hand-written loop, which is several times slower, except on the
smallest robots (:data:`SMALL_PRODUCT_NV`), where the call costs more than the product.
"""

from __future__ import annotations

import numpy as np

from .aba import aba_passes
from .finite import all_finite
from .jit import jit, jit_inline
from .minv import minv_passes
from .rnea import link_external_forces
from .rnea_derivatives import rnea_derivatives_pass
from .scratch import DOFS, LINKS, buffer, view1, view2, view3
from .state_scratch import ARTICULATED, articulated_views, motion_views, placement_views


#: the largest nv whose two products :func:`neg_products` writes as loops: a BLAS call's overhead
#: is most of a product this small (nv 6 / 7: 0.18 / 0.27 µs for both against 0.31 / 0.35 through
#: BLAS; nv 8: 0.38 against 0.33)
SMALL_PRODUCT_NV = 7


@jit
def neg_products(Mi, dt, prod, out_x, out_y):
    """``out_x = -Mi X`` and ``out_y = -Mi Y`` (all (nv, nv), outputs C-contiguous) for ``dt = [X | Y]``
    (nv, 2 nv), C-contiguous; ``prod`` (nv, 2 nv) scratch. One BLAS call for both products: a
    second call costs more than the wider product (HyQ, nv 18: 0.87 µs against 1.04 µs for two)."""
    n = out_x.shape[0]
    if n > SMALL_PRODUCT_NV:
        np.dot(Mi, dt, prod)
        for r in range(n):
            for c in range(n):
                out_x[r, c] = -prod[r, c]
                out_y[r, c] = -prod[r, n + c]
        return
    for r in range(n):
        for c in range(n):
            out_x[r, c] = 0.0
            out_y[r, c] = 0.0
        for k in range(n):
            a = -Mi[r, k]
            for c in range(n):
                out_x[r, c] += a * dt[k, c]
                out_y[r, c] += a * dt[k, n + c]


#: scratch of :func:`aba_derivatives_range`: one state's work arrays
ABA_DERIVATIVES_SCRATCH = ARTICULATED.then(
    ("qdd", (DOFS,)),
    ("F", (LINKS, DOFS, 6)),
    ("P", (LINKS, DOFS, 6)),
    ("ws", (4, LINKS, 6)),
    ("dY", (LINKS, 12)),
    ("cols", (8, DOFS, 6)),
    ("dt", (DOFS, 2 * DOFS)),      # [∂τ/∂q | ∂τ/∂v]
    ("prod", (DOFS, 2 * DOFS)),    # M^-1 [∂τ/∂q | ∂τ/∂v]
)
_ABAD = ABA_DERIVATIVES_SCRATCH.spec


@jit
def aba_derivative_views(buf, L, nv):
    """``(qdd, F, P, ws, dY, cols, dt, prod)`` of a buffer laid out from :data:`ABA_DERIVATIVES_SCRATCH`
    (its fields after :data:`~.state_scratch.ARTICULATED`'s); ``dt[:, :nv]`` and ``dt[:, nv:]`` take
    ``∂τ/∂q`` and ``∂τ/∂v``."""
    return (view1(buf, _ABAD.qdd, L, nv), view3(buf, _ABAD.F, L, nv), view3(buf, _ABAD.P, L, nv),
            view3(buf, _ABAD.ws, L, nv), view2(buf, _ABAD.dY, L, nv), view3(buf, _ABAD.cols, L, nv),
            view2(buf, _ABAD.dt, L, nv), view2(buf, _ABAD.prod, L, nv))


@jit_inline
def aba_derivatives_passes(li, lf, gv, q, v, tau, has_fext, Mi_given, out_q, out_v, Mi, qdd, views):
    """One state's ``∂a/∂q`` (``out_q``), ``∂a/∂v`` (``out_v``) and ``∂a/∂τ = M^-1`` (``Mi``), all
    (nv, nv), and ``qdd`` (nv,), for q (nq,), v, tau (nv,), in the work arrays ``views`` of an
    :data:`ABA_DERIVATIVES_SCRATCH` buffer, with the per-link external forces already in ``fl``
    when ``has_fext`` and ``Mi`` already holding ``M^-1`` when ``Mi_given``."""
    placements, motion, articulated, own = views
    _, _, oR, op, fl, _ = placements
    J, ov, _, oY = motion
    _, U, UD, Dinv, _, _, _, _, oa, _ = articulated
    F, P, ws, dY, cols, dt, prod = own
    nv = qdd.shape[0]
    aba_passes(li, lf, gv, q, v, tau, has_fext, qdd, placements, motion, articulated)
    if not Mi_given:
        minv_passes(li, J, U, UD, Dinv, F, P, Mi)
    # ∇RNEA at (q, v, qdd); oY becomes the composite inertias
    rnea_derivatives_pass(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, dt[:, :nv], dt[:, nv:])
    neg_products(Mi, dt, prod, out_q, out_v)


@jit
def _views(buf, L, nv):
    """``(views, qdd)``: the work arrays of :func:`aba_derivatives_passes` and the acceleration (nv,) in
    a buffer laid out from :data:`ABA_DERIVATIVES_SCRATCH`."""
    qdd, F, P, ws, dY, cols, dt, prod = aba_derivative_views(buf, L, nv)
    return (placement_views(buf, L, nv), motion_views(buf, L, nv), articulated_views(buf, L, nv),
            (F, P, ws, dY, cols, dt, prod)), qdd


@jit
def aba_derivatives_range(li, lf, gv, bl, bf, q, v, tau, fext, minv_in, out, acc, start, stop):
    """``out[0] = ∂a/∂q``, ``out[1] = ∂a/∂v``, ``out[2] = ∂a/∂τ`` (3, B, nv, nv) for q (B, nq),
    v, tau (B, nv); fext (B, nbody, 6) or (0, nbody, 6) for none; minv_in (B, nv, nv), or
    (0, nv, nv) to compute ``M^-1``; acc (B, nv) receives the acceleration ABA computed on the way,
    or (0, nv) to drop it. States ``start`` to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = v.shape[1]
    _aba_derivatives_range(buffer(_ABAD.total, L, nv), li, lf, gv, bl, bf, q, v, tau, fext, minv_in, out, acc, start,
                           stop)


@jit
def _aba_derivatives_range(buf, li, lf, gv, bl, bf, q, v, tau, fext, minv_in, out, acc, start, stop):
    """:func:`aba_derivatives_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = v.shape[1]
    views, qdd = _views(buf, L, nv)
    fl = views[0][4]
    has_fext = fext.shape[0] > 0
    has_minv = minv_in.shape[0] > 0
    has_acc = acc.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        Mi = out[2, b]
        if has_minv:
            for r in range(nv):
                for c in range(nv):
                    Mi[r, c] = minv_in[b, r, c]
        aba_derivatives_passes(li, lf, gv, q[b], v[b], tau[b], has_fext, has_minv, out[0, b], out[1, b], Mi, qdd,
                               views)
        if has_acc:
            for r in range(nv):
                acc[b, r] = qdd[r]


@jit
def aba_derivatives_state(li, lf, gv, q, v, tau, out, acc):
    """The single-state entry point: ``out`` (3 nv nv,) receives ``∂a/∂q``, ``∂a/∂v`` and ``M^-1``
    (row-major, in that order) for q (nq,), v, tau (nv,), or a batch of one ((1, nq), (1, nv));
    ``acc`` (nv,) the acceleration, or (0,) to drop it. Returns whether every output entry is finite.
    :func:`aba_derivatives_range`'s passes without its batch, external-force and ``M^-1`` arguments
    (each argument costs the caller an unboxing) and with the finiteness check the caller would
    otherwise make in Python."""
    if q.ndim == 2:      # a batch of one (numba resolves ndim when it compiles: one branch is kept)
        q1, v1, tau1 = q[0], v[0], tau[0]
    else:
        q1, v1, tau1 = q, v, tau
    nv = tau1.shape[0]
    n2 = nv * nv
    d = out[:3 * n2]
    return _aba_derivatives_one(buffer(_ABAD.total, li.shape[0], nv), li, lf, gv, q1, v1, tau1,
                                d[:n2].reshape((nv, nv)), d[n2:2 * n2].reshape((nv, nv)), d[2 * n2:].reshape((nv, nv)),
                                acc) and all_finite(d)


@jit
def _aba_derivatives_one(buf, li, lf, gv, q, v, tau, out_q, out_v, Mi, acc):
    """:func:`aba_derivatives_passes` on one state without external forces, in the scratch ``buf``;
    ``acc`` (nv,) receives the acceleration, or (0,) to drop it. Returns whether it is finite."""
    L = li.shape[0]
    nv = tau.shape[0]
    views, qdd = _views(buf, L, nv)
    aba_derivatives_passes(li, lf, gv, q, v, tau, False, False, out_q, out_v, Mi, qdd, views)
    if acc.shape[0] > 0:
        for k in range(nv):
            acc[k] = qdd[k]
    return all_finite(qdd)
