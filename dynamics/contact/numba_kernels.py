"""Compiled (numba) frame motion derivatives for the contact derivatives on the numba backend.

Same definitions and recursion as :func:`.kinematics_derivatives.frame_motion_derivatives_numpy`
(the RNEA-derivative forward sweep without gravity, along each contact frame's chain of
ancestors, in link coordinates), written per state with the numba backend's joint placements and
spatial primitives; only the supported dofs of each link are touched (Plancher et al. 2021 Sec. III-B
structured sparsity). Parallel over the batch like the numba backend's kernels.

Caching and compilation options: the kernel library's (:mod:`dynamics.kernels.jit`); the Cholesky
factorisation and substitution of ``K = J M⁻¹ Jᵀ`` are :mod:`dynamics.kernels.dense`.
"""

from __future__ import annotations

import numpy as np

from ..kernel_cache import compiled_source_hash
from ..kernels.dense import cholesky, cholesky_solve
from ..kernels.jit import jit as _jit
from ..kernels.joints import all_placements, world_placements
from ..kernels.kinematics import frame_world
from ..kernels.packing import (
    LF_ST,
    LI_DOFADR,
    LI_NSUP,
    LI_NV,
    LI_PARENT,
    LI_SUP,
    packed,
)
from ..kernels.packing import as_kernel_input as _f64
from ..kernels.spatial import mot_cross, mot_to_child
from ..kernels.threaded_batch import _abi, entry_point, run_threaded
from ..worker_threads import use_threads
from .kinematics_derivatives import FrameMotionDerivatives
from .schur import check_pivots

# serial cost of one state per frame and chain link [us] (rough), to decide on waking the thread pool
_COST_US = 0.3


@_jit
def _frame_sweep(li, lf, R, p, oR, op, link, ff, f, v, a, full, chain, W, t, xv, xa, vel, acc, vJ, S, Rf,
                 ov, oa, odvq, odvv, odaq, odav, oRf, opf):
    """Frame ``f`` (row of ``ff``, on ``link``): local velocity ``ov``, acceleration ``oa`` (6,), the
    derivative columns ``odv*``/``oda*`` (6, nv) of its supported dofs (other columns untouched),
    world placement ``oRf``, ``opf``. ``full=False`` computes only ``ov``, ``oa``, ``odvv`` (= J)."""
    n = 0
    j = link
    while j >= 0:
        chain[n] = j
        n += 1
        j = li[j, LI_PARENT]
    nsup_f = li[link, LI_NSUP]
    nm = 4 if full else 2
    for s in range(nsup_f):
        c = li[link, LI_SUP + s]
        for m in range(nm):
            for r in range(6):
                W[m, c, r] = 0.0
    for r in range(6):
        vel[r] = 0.0
        acc[r] = 0.0
    for m_ in range(n - 1, -1, -1):
        i = chain[m_]
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        Ri = R[i]
        pi = p[i]
        mot_to_child(Ri, pi, vel, xv)
        mot_to_child(Ri, pi, acc, xa)
        nsup = li[i, LI_NSUP]
        for s in range(nsup):
            c = li[i, LI_SUP + s]
            if c >= d0 and c < d0 + nd:
                continue
            mot_to_child(Ri, pi, W[1, c], W[1, c])
            if full:
                mot_to_child(Ri, pi, W[0, c], W[0, c])
                mot_to_child(Ri, pi, W[2, c], W[2, c])
                mot_to_child(Ri, pi, W[3, c], W[3, c])
        for r in range(6):
            vJ[r] = 0.0
        for k in range(nd):
            for r in range(6):
                S[k, r] = lf[i, LF_ST + 6 * k + r]
                vJ[r] += S[k, r] * v[d0 + k]
        for k in range(nd):
            c = d0 + k
            for r in range(6):
                W[1, c, r] = S[k, r]
            if full:
                mot_cross(xv, S[k], W[0, c])
                mot_cross(xa, S[k], W[2, c])
                for r in range(6):
                    W[3, c, r] = 0.0
        for r in range(6):
            vel[r] = xv[r] + vJ[r]
        mot_cross(vel, vJ, t)
        for r in range(6):
            acc[r] = xa[r] + t[r]
        for k in range(nd):
            for r in range(6):
                acc[r] += S[k, r] * a[d0 + k]
        if full:
            for s in range(nsup):
                c = li[i, LI_SUP + s]
                mot_cross(vJ, W[0, c], t)
                for r in range(6):
                    W[2, c, r] -= t[r]
                mot_cross(vJ, W[1, c], t)
                for r in range(6):
                    W[3, c, r] -= t[r]
            for k in range(nd):
                mot_cross(vel, S[k], t)
                for r in range(6):
                    W[3, d0 + k, r] += t[r]
    # to the frame: X_f y with the frame placement (R_f, p_f) in the link
    for r in range(3):
        for c in range(3):
            Rf[r, c] = ff[f, 3 * r + c]
    pf = xa  # scratch: first three entries
    for r in range(3):
        pf[r] = ff[f, 9 + r]
    mot_to_child(Rf, pf, vel, ov)
    mot_to_child(Rf, pf, acc, oa)
    for s in range(nsup_f):
        c = li[link, LI_SUP + s]
        mot_to_child(Rf, pf, W[1, c], xv)
        for r in range(6):
            odvv[r, c] = xv[r]
        if full:
            mot_to_child(Rf, pf, W[0, c], xv)
            for r in range(6):
                odvq[r, c] = xv[r]
            mot_to_child(Rf, pf, W[2, c], xv)
            for r in range(6):
                odaq[r, c] = xv[r]
            mot_to_child(Rf, pf, W[3, c], xv)
            for r in range(6):
                odav[r, c] = xv[r]
    frame_world(oR, op, link, ff, f, oRf, opf)


@_jit
def _state(li, lf, q, v, a, flink, ff, R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S,
           ov, oa, odvq, odvv, odaq, odav, oRf, opf):
    """One state: the frame motion derivatives of every frame (outputs (k, ...) slices)."""
    all_placements(li, lf, q, R, p)
    world_placements(li, R, p, oR, op)
    Rf = np.empty((3, 3))
    for f in range(flink.shape[0]):
        _frame_sweep(li, lf, R, p, oR, op, flink[f], ff, f, v, a, True, chain, W, t, xv, xa, vel, acc, vJ, S, Rf,
                     ov[f], oa[f], odvq[f], odvv[f], odaq[f], odav[f], oRf[f], opf[f])


@_jit
def fmd_range(li, lf, q, v, a, flink, ff, ov, oa, odvq, odvv, odaq, odav, oRf, opf, start, stop):
    """States ``start`` to ``stop - 1`` on the calling thread; outputs must be zero-initialised."""
    L = li.shape[0]
    nv = v.shape[1]
    R = np.empty((L, 3, 3))
    p = np.empty((L, 3))
    oR = np.empty((L, 3, 3))
    op = np.empty((L, 3))
    chain = np.empty(L, dtype=np.int64)
    W = np.zeros((4, nv, 6))
    t = np.empty(6)
    xv = np.empty(6)
    xa = np.empty(6)
    vel = np.empty(6)
    acc = np.empty(6)
    vJ = np.empty(6)
    S = np.empty((6, 6))
    for b in range(start, stop):
        _state(li, lf, q[b], v[b], a[b], flink, ff, R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S,
               ov[b], oa[b], odvq[b], odvv[b], odaq[b], odav[b], oRf[b], opf[b])


_frame_cache: dict = {}


def _ro(x: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous view: every kernel input is passed read-only (as the numba backend's
    ``_f64`` does), so that one compiled specialisation serves every call."""
    x = np.ascontiguousarray(x)
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


def _static(contacts):
    """The kernel arguments that depend on the contact set only (read-only, cached per set):
    ``(flink (k,) int64, ff (k, 12) frame rows (R row-major, p) in the link, fbody (k,) int64,
    fbR (k, 9), fbp (k, 3) frame in its body, pref (k, 3) point references or zeros)``."""
    hit = _frame_cache.get(id(contacts))
    if hit is None or hit[0] is not contacts:
        k = len(contacts.frames)
        ff = np.empty((k, 12))
        ff[:, :9] = contacts.frame_R.reshape(k, 9)
        ff[:, 9:] = contacts.frame_p
        point = contacts.kind == "point"
        pref = contacts.reference if point and contacts.reference is not None else np.zeros((k, 3))
        hit = (contacts, _ro(contacts.links.astype(np.int64)), _ro(ff), _ro(contacts.bodies.astype(np.int64)),
               _ro(contacts.body_frame_R.reshape(k, 9)), _ro(contacts.body_frame_p), _ro(pref))
        if len(_frame_cache) > 256:
            _frame_cache.clear()
        _frame_cache[id(contacts)] = hit
    return hit[1:]


def _frames(contacts):
    """``(flink (k,) int64, ff (k, 12))`` of :func:`_static`."""
    return _static(contacts)[:2]


_zeros: dict = {}


def _zero(B: int, nv: int) -> np.ndarray:
    """A cached read-only (B, nv) zero array (the kernels' zero acceleration)."""
    z = _zeros.get((B, nv))
    if z is None:
        if len(_zeros) > 64:
            _zeros.clear()
        z = _zeros[(B, nv)] = _ro(np.zeros((B, nv)))
    return z


def frame_motion_derivatives(backend, model, q, v, a, contacts) -> FrameMotionDerivatives:
    """The compiled kernel on flat float64 inputs, threaded like the numba backend's kernels."""
    pm = packed(model)
    flink, ff = _frames(contacts)
    B, nv, k = q.shape[0], model.nv, flink.shape[0]
    ov = np.zeros((B, k, 6))
    oa = np.zeros((B, k, 6))
    d = np.zeros((4, B, k, 6, nv))
    oRf = np.zeros((B, k, 3, 3))
    opf = np.zeros((B, k, 3))
    args = (pm.li, pm.lf, _f64(q), _f64(v), _f64(a), flink, ff, ov, oa, d[0], d[1], d[2], d[3], oRf, opf)
    nt = backend.threads
    depth = float(np.sum(model.link_ancestor[contacts.links]))
    if nt <= 1 or B <= 1 or B * depth * _COST_US < backend.parallel_threshold_us:
        fmd_range(*args, 0, B)
    else:
        use_threads(nt)
        run_threaded(fmd_range, B, min(nt, B), *args)
    return FrameMotionDerivatives(ov, oa, d[0], d[1], d[2], d[3], oRf, opf)


# ------------------------------------------------------------------------------ fused contact dynamics
# One compiled pass per state for the numba backend: M⁻¹ and the bias forces (the numba backend's
# per-state kernels), the constraint rows, the Cholesky factorisation of K = J M⁻¹ Jᵀ, a and λ, and
# for the derivatives ∂RNEA with the contact forces as external forces (the backend's kernel), the
# frame motion derivatives and the Schur-complement assembly (docstring of .constrained_dynamics).
# Same math as the generic path; used when the contact set has no damping and no 6-D kp term.

from ..kernels.minv import minv_state_passes  # noqa: E402
from ..kernels.rnea import link_external_forces, rnea_backward, rnea_forward  # noqa: E402
from ..kernels.rnea_derivatives import rnea_derivatives_pass, rnea_derivatives_range  # noqa: E402
from ..kernels.scratch import carve  # noqa: E402
from ..kernels.world import world_accelerations, world_columns  # noqa: E402


PIVOT_RTOL = 1e-11  # as .schur.PIVOT_RTOL


@_jit
def _chol(K, idx, m):
    """In-place lower Cholesky factor of K (m, m) (``idx``: ``0 .. m-1``); returns the smallest
    pivot relative to the largest diagonal entry, or the first one not above PIVOT_RTOL (the
    factor is then incomplete)."""
    dmax = 0.0
    for i in range(m):
        if K[i, i] > dmax:
            dmax = K[i, i]
    if not dmax > 0.0:
        return 0.0 if m > 0 else np.inf
    return cholesky(K, idx, m, K, PIVOT_RTOL * dmax) / dmax


@_jit
def _rows(li, lf, R, p, oR, op, flink, ff, vb, ab, point, kp, kd, pref, chain, W, t, xv, xa, vel, acc, vJ, S, Rf,
          ov, oa, F, oRf, opf, Jc, gam):
    """The constraint rows of one state (placements ``R, p, oR, op`` of its configuration already
    computed): ``Jc`` (nc, nv) and ``gam`` (nc,) = γ (drift and Baumgarte terms) at velocity ``vb``
    and acceleration ``ab`` (zero: the drift J̇ v); frame velocities ``ov``, accelerations ``oa``,
    placements ``oRf``, ``opf`` and the frame columns ``F`` (zeroed here) as by-products."""
    nv = vb.shape[0]
    F[:] = 0.0
    for f in range(flink.shape[0]):
        _frame_sweep(li, lf, R, p, oR, op, flink[f], ff, f, vb, ab, False, chain, W, t, xv, xa, vel, acc,
                     vJ, S, Rf, ov[f], oa[f], F[0, f], F[1, f], F[2, f], F[3, f], oRf[f], opf[f])
        if point:
            w0, w1, w2 = ov[f, 3], ov[f, 4], ov[f, 5]
            l0, l1, l2 = ov[f, 0], ov[f, 1], ov[f, 2]
            c0 = oa[f, 0] + (w1 * l2 - w2 * l1) + kd * l0
            c1 = oa[f, 1] + (w2 * l0 - w0 * l2) + kd * l1
            c2 = oa[f, 2] + (w0 * l1 - w1 * l0) + kd * l2
            for r in range(3):
                gam[3 * f + r] = (oRf[f, r, 0] * c0 + oRf[f, r, 1] * c1 + oRf[f, r, 2] * c2
                                  + kp * (opf[f, r] - pref[f, r]))
                for c in range(nv):
                    Jc[3 * f + r, c] = (oRf[f, r, 0] * F[1, f, 0, c] + oRf[f, r, 1] * F[1, f, 1, c]
                                        + oRf[f, r, 2] * F[1, f, 2, c])
        else:
            for r in range(6):
                gam[6 * f + r] = oa[f, r] + kd * ov[f, r]
                for c in range(nv):
                    Jc[6 * f + r, c] = F[1, f, r, c]


@_jit
def rows_size(L, nv, k, nc):
    """The float64 entries :func:`rows_views` carves, for L links, nv dofs, k contact frames and nc
    constraint rows."""
    return 24 * L + 24 * nv + 81 + 24 * k + 24 * k * nv + nc * nv + nc


@_jit
def rows_views(buf, o, chain, L, nv, k, nc):
    """``(rw, o')``: the work arrays of :func:`constraint_rows` for L links, nv dofs, k contact
    frames and nc constraint rows, ``rw = (R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S, Rf, ov,
    oa, F, oRf, opf, Jc, gam)``, carved from ``buf[o:o']`` (:func:`rows_size` entries; ``W`` and
    ``F`` zeroed) with the int64 ``chain`` (L,) given. ``F`` (4, k, 6, nv) holds the frame columns
    dv_dq, dv_dv (J), da_dq, da_dv."""
    R = carve(buf, o, (L, 3, 3))
    p = carve(buf, o + 9 * L, (L, 3))
    oR = carve(buf, o + 12 * L, (L, 3, 3))
    op = carve(buf, o + 21 * L, (L, 3))
    o += 24 * L
    W = carve(buf, o, (4, nv, 6))
    o += 24 * nv
    t, xv, xa = carve(buf, o, (6,)), carve(buf, o + 6, (6,)), carve(buf, o + 12, (6,))
    vel, acc, vJ = carve(buf, o + 18, (6,)), carve(buf, o + 24, (6,)), carve(buf, o + 30, (6,))
    S = carve(buf, o + 36, (6, 6))
    Rf = carve(buf, o + 72, (3, 3))
    o += 81
    ov, oa = carve(buf, o, (k, 6)), carve(buf, o + 6 * k, (k, 6))
    oRf, opf = carve(buf, o + 12 * k, (k, 3, 3)), carve(buf, o + 21 * k, (k, 3))
    o += 24 * k
    F = carve(buf, o, (4, k, 6, nv))
    o += 24 * k * nv
    Jc = carve(buf, o, (nc, nv))
    gam = carve(buf, o + nc * nv, (nc,))
    o += nc * nv + nc
    W[:, :, :] = 0.0
    F[:, :, :, :] = 0.0
    return (R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S, Rf, ov, oa, F, oRf, opf, Jc, gam), o


@_jit
def constraint_rows(li, lf, qb, vb, ab, flink, ff, point, kp, kd, pref, rw):
    """The link placements at ``qb`` and the contact constraint rows (:func:`_rows`) at velocity
    ``vb``, acceleration ``ab``, into the workspace ``rw`` (:func:`rows_views`)."""
    R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S, Rf, ov, oa, F, oRf, opf, Jc, gam = rw
    all_placements(li, lf, qb, R, p)
    world_placements(li, R, p, oR, op)
    _rows(li, lf, R, p, oR, op, flink, ff, vb, ab, point, kp, kd, pref, chain, W, t, xv, xa, vel, acc, vJ, S, Rf,
          ov, oa, F, oRf, opf, Jc, gam)


@_jit
def state_size(L, nv):
    """The float64 entries :func:`state_views` carves, for L links and nv dofs."""
    return 3 * L + 6 * nv + 13 * L + 144 * L + 72 + 12 * L * nv + 6 * L + 24 + 36 * L + 24 * L + 12 * L + 48 * nv


@_jit
def state_views(buf, o, L, nv):
    """``(sw, o')``: the work arrays of :func:`placements_minv`, the bias RNEA and ∂RNEA for L links and
    nv dofs, ``sw = (op0, J, oY, IA, U, UD, Dinv, tmp66, chol, F, P, fl, tmp, vel, acc, f, ov, vJ, oa,
    ws, dY, cols)``, carved from ``buf[o:o']`` (:func:`state_size` entries): the fields of
    :data:`dynamics.kernels.minv.MINV_SCRATCH` that these use, then (L, 6) velocities,
    accelerations and forces of the RNEA, the world velocities ``ov``, ``vJ``, and
    :func:`~dynamics.kernels.rnea_derivatives.rnea_derivatives_pass`' ``oa`` (L, 6), ``ws``
    (4, L, 6), ``dY`` (L, 12), ``cols`` (8, nv, 6), these four zeroed."""
    op0 = carve(buf, o, (L, 3))
    J = carve(buf, o + 3 * L, (nv, 6))
    o += 3 * L + 6 * nv
    oY = carve(buf, o, (L, 13))
    IA, U = carve(buf, o + 13 * L, (L, 6, 6)), carve(buf, o + 49 * L, (L, 6, 6))
    UD, Dinv = carve(buf, o + 85 * L, (L, 6, 6)), carve(buf, o + 121 * L, (L, 6, 6))
    o += 157 * L
    tmp66, chol = carve(buf, o, (6, 6)), carve(buf, o + 36, (6, 6))
    o += 72
    F, P = carve(buf, o, (L, nv, 6)), carve(buf, o + 6 * L * nv, (L, nv, 6))
    o += 12 * L * nv
    fl = carve(buf, o, (L, 6))
    tmp = carve(buf, o + 6 * L, (4, 6))
    o += 6 * L + 24
    vel, acc, f = carve(buf, o, (L, 6)), carve(buf, o + 6 * L, (L, 6)), carve(buf, o + 12 * L, (L, 6))
    ov, vJ, oa = carve(buf, o + 18 * L, (L, 6)), carve(buf, o + 24 * L, (L, 6)), carve(buf, o + 30 * L, (L, 6))
    o += 36 * L
    ws = carve(buf, o, (4, L, 6))
    dY = carve(buf, o + 24 * L, (L, 12))
    o += 36 * L
    cols = carve(buf, o, (8, nv, 6))
    o += 48 * nv
    oa[:, :] = 0.0
    ws[:, :, :] = 0.0
    dY[:, :] = 0.0
    cols[:, :, :] = 0.0
    return (op0, J, oY, IA, U, UD, Dinv, tmp66, chol, F, P, fl, tmp, vel, acc, f, ov, vJ, oa, ws, dY, cols), o


@_jit
def placements_minv(li, lf, qb, vb, R, p, oR, op, sw, Mb):
    """One state's link placements ``R, p`` (parent) and ``oR, op`` (world) at ``qb`` and its ``M⁻¹``
    into ``Mb`` (nv, nv) from them (the world origin moved to link 0 in a copy ``op0`` of ``op``), in
    the work arrays ``sw`` (:func:`state_views`): the placements once for M⁻¹, the bias, the
    constraint rows and ∂RNEA. ``vb`` (nv,): the velocity whose world velocities ``ov``, ``vJ`` are
    computed too (for :func:`rnea_derivatives_world`), or empty to skip them."""
    op0, J, oY, IA, U, UD, Dinv, tmp66, chol, F, P, _, tmp, _, _, _, ov, vJ, _, _, _, _ = sw
    all_placements(li, lf, qb, R, p)
    world_placements(li, R, p, oR, op)
    for i in range(li.shape[0]):
        for r in range(3):
            op0[i, r] = op[i, r]
    world_columns(li, lf, vb, oR, op0, J, ov, vJ, tmp[0])
    minv_state_passes(li, lf, oR, op0, J, oY, IA, U, UD, Dinv, tmp66, chol, F, P, Mb)


@_jit
def rnea_derivatives_world(li, gv, bl, bf, oR, ab, fextb, sw, out_q, out_v):
    """``∂τ/∂q`` (``out_q``), ``∂τ/∂v`` (``out_v``) (nv, nv) at acceleration ``ab`` (nv,) with the
    per-body external forces ``fextb`` (nbody, 6), from the world placements, columns, inertias and
    velocities that :func:`placements_minv` left in ``sw`` for the same state (its ``vb`` non-empty):
    :func:`~dynamics.kernels.rnea_derivatives.rnea_derivatives_range`'s passes without its own
    placements, columns and inertias. The world inertias ``oY`` are overwritten (composites)."""
    op0, J, oY, _, _, _, _, _, _, _, _, fl, tmp, _, _, _, ov, vJ, oa, ws, dY, cols = sw
    link_external_forces(bl, bf, fextb, fl)
    world_accelerations(li, gv, J, ab, ov, vJ, oa, tmp[0])
    rnea_derivatives_pass(li, gv, J, ov, oa, oY, fextb.shape[0] > 0, fl, oR, op0, ws, dY, cols, out_q, out_v)


@_jit
def _schur(Jc, Mb, JMi, K, idx, JcT):
    """``JMi = J M⁻¹`` (= (M⁻¹ Jᵀ)ᵀ, M⁻¹ symmetric) and the Cholesky factor of ``K = J M⁻¹ Jᵀ`` in
    place in K; returns the smallest relative pivot (:func:`_chol`). idx: ``0 .. nc-1``; ``JcT``
    (nv, nc) scratch (receives Jᵀ). The products are written into their outputs (no temporaries)."""
    JcT[:, :] = Jc.T
    np.dot(Jc, Mb, JMi)
    np.dot(JMi, JcT, K)
    return _chol(K, idx, K.shape[0])


@_jit
def _forces_as_fext(point, oRf, lam, fbody, fbR, fbp, fext):
    """Contact forces ``lam`` (nc,) (point: world-aligned, turned to the frame axes by ``oRf``; 6-D:
    frame axes) as external forces ``fext`` (nbody, 6) in body frames at body origins (zeroed here)."""
    k = oRf.shape[0]
    for bb in range(fext.shape[0]):
        for r in range(6):
            fext[bb, r] = 0.0
    fl = np.zeros(3)
    tl = np.zeros(3)
    fb = np.empty(3)
    tb = np.empty(3)
    for f in range(k):
        if point:
            for r in range(3):
                fl[r] = oRf[f, 0, r] * lam[3 * f] + oRf[f, 1, r] * lam[3 * f + 1] + oRf[f, 2, r] * lam[3 * f + 2]
        else:
            for r in range(3):
                fl[r] = lam[6 * f + r]
                tl[r] = lam[6 * f + 3 + r]
        for r in range(3):
            fb[r] = 0.0
            tb[r] = 0.0
            for c in range(3):
                fb[r] += fbR[f, 3 * r + c] * fl[c]
                tb[r] += fbR[f, 3 * r + c] * tl[c]
        bp0, bp1, bp2 = fbp[f, 0], fbp[f, 1], fbp[f, 2]
        tb[0] += bp1 * fb[2] - bp2 * fb[1]
        tb[1] += bp2 * fb[0] - bp0 * fb[2]
        tb[2] += bp0 * fb[1] - bp1 * fb[0]
        body = fbody[f]
        for r in range(3):
            fext[body, r] += fb[r]
            fext[body, 3 + r] += tb[r]


@_jit
def _turning_force_dq(f, oRf, F, lam, Jc, Jw, Z, dq):
    """Point contact frame ``f``: its world-aligned force ``lam[3f:3f+3]`` turns with the frame while
    ∂RNEA holds ``fext`` fixed in body axes, which adds ``-J_linᵀ [λ]× J_ω,world`` to ``dq`` (nv, nv)
    (:func:`.forces.world_force_rotation_dq`); ``F[1, f, 3:]`` is the frame's local angular Jacobian,
    ``Jw``, ``Z`` (3, nv) scratch."""
    nv = dq.shape[0]
    for c in range(nv):
        ja0, ja1, ja2 = F[1, f, 3, c], F[1, f, 4, c], F[1, f, 5, c]
        for r in range(3):
            Jw[r, c] = oRf[f, r, 0] * ja0 + oRf[f, r, 1] * ja1 + oRf[f, r, 2] * ja2
    la0, la1, la2 = lam[3 * f], lam[3 * f + 1], lam[3 * f + 2]
    for c in range(nv):
        Z[0, c] = la1 * Jw[2, c] - la2 * Jw[1, c]
        Z[1, c] = la2 * Jw[0, c] - la0 * Jw[2, c]
        Z[2, c] = la0 * Jw[1, c] - la1 * Jw[0, c]
    for i in range(nv):
        j0, j1, j2 = Jc[3 * f, i], Jc[3 * f + 1, i], Jc[3 * f + 2, i]
        if j0 == 0.0 and j1 == 0.0 and j2 == 0.0:
            continue
        for c in range(nv):
            dq[i, c] -= j0 * Z[0, c] + j1 * Z[1, c] + j2 * Z[2, c]


@_jit
def contact_range(li, lf, gv, bl, bf, q, v, tau, flink, ff, fbody, fbR, fbp, point, kp, kd, pref, derivs,
                  Mi, bias, zero, no_fext, fext, rd, a_out, lam_out, flag, da, dl, start, stop):
    """States ``start`` to ``stop - 1``: ``a_out`` (B, nv), ``lam_out`` (B, nc), ``flag[b]`` = smallest
    relative pivot of K (rank check); with ``derivs``: ``da`` (3, B, nv, nv), ``dl`` (3, B, nc, nv)."""
    L = li.shape[0]
    nv = v.shape[1]
    k = flink.shape[0]
    nc = (3 if point else 6) * k
    # one allocation for every float work array: a rollout calls this once per knot
    buf = np.empty(rows_size(L, nv, k, nc) + state_size(L, nv) + contact_size(nv, nc))
    _contact_range(buf, np.empty(L, dtype=np.int64), np.arange(nc), li, lf, gv, bl, bf, q, v, tau, flink, ff, fbody,
                   fbR, fbp, point, kp, kd, pref, derivs, Mi, bias, zero, no_fext, fext, rd, a_out, lam_out, flag, da,
                   dl, start, stop)


@_jit
def contact_size(nv, nc):
    """The float64 entries :func:`contact_views` carves."""
    return 10 * nc * nv + nc * nc + 8 * nv + nc + 7 * nv * nv


@_jit
def contact_views(buf, o, nv, nc):
    """``((MiJt, JMi, K, af, tmb, rhs, Rq, Rv, Jw, Z, R3, D2, JcT, Yq, Yv, Z3, MD), o')``:
    :func:`contact_range`'s own work arrays, carved from ``buf[o:o']`` (:func:`contact_size` entries)."""
    MiJt = carve(buf, o, (nv, nc))
    JMi = carve(buf, o + nc * nv, (nc, nv))
    K = carve(buf, o + 2 * nc * nv, (nc, nc))
    o += 2 * nc * nv + nc * nc
    af, tmb = carve(buf, o, (nv,)), carve(buf, o + nv, (nv,))
    rhs = carve(buf, o + 2 * nv, (nc, 1))
    o += 2 * nv + nc
    Rq, Rv = carve(buf, o, (nc, nv)), carve(buf, o + nc * nv, (nc, nv))
    o += 2 * nc * nv
    Jw, Z = carve(buf, o, (3, nv)), carve(buf, o + 3 * nv, (3, nv))
    o += 6 * nv
    R3 = carve(buf, o, (nc, 3 * nv))
    o += 3 * nc * nv
    D2 = carve(buf, o, (nv, 2 * nv))
    o += 2 * nv * nv
    JcT = carve(buf, o, (nv, nc))
    Yq, Yv = carve(buf, o + nc * nv, (nc, nv)), carve(buf, o + 2 * nc * nv, (nc, nv))
    o += 3 * nc * nv
    Z3 = carve(buf, o, (nv, 3 * nv))
    MD = carve(buf, o + 3 * nv * nv, (nv, 2 * nv))
    o += 5 * nv * nv
    return (MiJt, JMi, K, af, tmb, rhs, Rq, Rv, Jw, Z, R3, D2, JcT, Yq, Yv, Z3, MD), o


@_jit
def _contact_range(buf, chain, ident, li, lf, gv, bl, bf, q, v, tau, flink, ff, fbody, fbR, fbp, point, kp, kd, pref,
                   derivs, Mi, bias, zero, no_fext, fext, rd, a_out, lam_out, flag, da, dl, start, stop):
    """:func:`contact_range` with its work arrays carved from ``buf`` (:func:`rows_views`,
    :func:`state_views`, :func:`contact_views`; borrowed, :mod:`dynamics.kernels.scratch`: the
    dozens of arrays its passes take per state are not reference-counted); ``chain`` (L,) and
    ``ident`` = 0 .. nc-1 its integer arrays."""
    L = li.shape[0]
    nv = v.shape[1]
    k = flink.shape[0]
    dim = 3 if point else 6
    nc = dim * k
    rw, o = rows_views(buf, 0, chain, L, nv, k, nc)
    sw, o = state_views(buf, o, L, nv)
    (MiJt, JMi, K, af, tmb, rhs, Rq, Rv, Jw, Z, R3, D2, JcT, Yq, Yv, Z3, MD), _ = contact_views(buf, o, nv, nc)
    R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S, Rf, ov, oa, F, oRf, opf, Jc, gam = rw
    fl, tmp, bvel, bacc, bf_ = sw[11], sw[12], sw[13], sw[14], sw[15]
    has_fext = no_fext.shape[0] > 0             # (False: the bias has no external forces)
    for b in range(start, stop):
        vb = v[b]
        Mb = Mi[b]
        # the placements once per state, for M⁻¹, the bias forces, the constraint rows and ∂RNEA
        placements_minv(li, lf, q[b], vb if derivs else vb[:0], R, p, oR, op, sw, Mb)
        rnea_forward(li, lf, gv, vb, zero[b], has_fext, fl, R, p, bvel, bacc, bf_, tmp)
        rnea_backward(li, lf, zero[b], R, p, bf_, tmp, bias[b])
        _rows(li, lf, R, p, oR, op, flink, ff, vb, zero[b], point, kp, kd, pref, chain, W, t, xv, xa, vel, acc, vJ,
              S, Rf, ov, oa, F, oRf, opf, Jc, gam)
        for j in range(nv):
            tmb[j] = tau[b, j] - bias[b, j]
        for i in range(nv):
            acc_ = 0.0
            for j in range(nv):
                acc_ += Mb[i, j] * tmb[j]
            af[i] = acc_
        rel = _schur(Jc, Mb, JMi, K, ident, JcT)
        MiJt[:, :] = JMi.T
        flag[b] = rel
        if not rel > PIVOT_RTOL:
            continue
        for r in range(nc):
            acc_ = gam[r]
            for j in range(nv):
                acc_ += Jc[r, j] * af[j]
            rhs[r, 0] = -acc_
        cholesky_solve(K, nc, rhs)
        for r in range(nc):
            lam_out[b, r] = rhs[r, 0]
        for i in range(nv):
            a_out[b, i] = af[i]
        for r in range(nc):
            lr = rhs[r, 0]
            for i in range(nv):
                a_out[b, i] += JMi[r, i] * lr
        if not derivs:
            continue
        _forces_as_fext(point, oRf, lam_out[b], fbody, fbR, fbp, fext[b])
        rnea_derivatives_world(li, gv, bl, bf, oR, a_out[b], fext[b], sw, rd[0, b], rd[1, b])
        dq = rd[0, b]
        dv = rd[1, b]
        ab = a_out[b]
        for f in range(k):
            _frame_sweep(li, lf, R, p, oR, op, flink[f], ff, f, vb, ab, True, chain, W, t, xv, xa, vel, acc,
                         vJ, S, Rf, ov[f], oa[f], F[0, f], F[1, f], F[2, f], F[3, f], oRf[f], opf[f])
            if point:
                w0, w1, w2 = ov[f, 3], ov[f, 4], ov[f, 5]
                l0, l1, l2 = ov[f, 0], ov[f, 1], ov[f, 2]
                cl0 = oa[f, 0] + (w1 * l2 - w2 * l1)
                cl1 = oa[f, 1] + (w2 * l0 - w0 * l2)
                cl2 = oa[f, 2] + (w0 * l1 - w1 * l0)
                g0 = F[2, f]
                for c in range(nv):
                    dv0, dv1, dv2 = F[0, f, 0, c], F[0, f, 1, c], F[0, f, 2, c]
                    dw0, dw1, dw2 = F[0, f, 3, c], F[0, f, 4, c], F[0, f, 5, c]
                    ja0, ja1, ja2 = F[1, f, 3, c], F[1, f, 4, c], F[1, f, 5, c]
                    # local dα/dq column: dc − c × J_ω (+ kd (dv_lin − v_lin × J_ω))
                    x0 = (g0[0, c] + (w1 * dv2 - w2 * dv1) - (l1 * dw2 - l2 * dw1) - (cl1 * ja2 - cl2 * ja1)
                          + kd * (dv0 - (l1 * ja2 - l2 * ja1)))
                    x1 = (g0[1, c] + (w2 * dv0 - w0 * dv2) - (l2 * dw0 - l0 * dw2) - (cl2 * ja0 - cl0 * ja2)
                          + kd * (dv1 - (l2 * ja0 - l0 * ja2)))
                    x2 = (g0[2, c] + (w0 * dv1 - w1 * dv0) - (l0 * dw1 - l1 * dw0) - (cl0 * ja1 - cl1 * ja0)
                          + kd * (dv2 - (l0 * ja1 - l1 * ja0)))
                    ev0, ev1, ev2 = F[1, f, 0, c], F[1, f, 1, c], F[1, f, 2, c]
                    ew0, ew1, ew2 = ja0, ja1, ja2
                    y0 = (F[3, f, 0, c] + (w1 * ev2 - w2 * ev1) - (l1 * ew2 - l2 * ew1)) + kd * ev0
                    y1 = (F[3, f, 1, c] + (w2 * ev0 - w0 * ev2) - (l2 * ew0 - l0 * ew2)) + kd * ev1
                    y2 = (F[3, f, 2, c] + (w0 * ev1 - w1 * ev0) - (l0 * ew1 - l1 * ew0)) + kd * ev2
                    for r in range(3):
                        Rq[3 * f + r, c] = (oRf[f, r, 0] * x0 + oRf[f, r, 1] * x1 + oRf[f, r, 2] * x2
                                            + kp * Jc[3 * f + r, c])
                        Rv[3 * f + r, c] = oRf[f, r, 0] * y0 + oRf[f, r, 1] * y1 + oRf[f, r, 2] * y2
                _turning_force_dq(f, oRf, F, lam_out[b], Jc, Jw, Z, dq)
            else:
                for r in range(6):
                    for c in range(nv):
                        Rq[6 * f + r, c] = F[2, f, r, c] + kd * F[0, f, r, c]
                        Rv[6 * f + r, c] = F[3, f, r, c] + kd * F[1, f, r, c]
        # Schur-complement assembly, the three right-hand sides side by side: [∂λ/∂q | ∂λ/∂v | ∂λ/∂τ]
        np.dot(JMi, dq, Yq)
        np.dot(JMi, dv, Yv)
        for r in range(nc):
            for c in range(nv):
                R3[r, c] = Yq[r, c] - Rq[r, c]
                R3[r, nv + c] = Yv[r, c] - Rv[r, c]
                R3[r, 2 * nv + c] = -JMi[r, c]
        cholesky_solve(K, nc, R3)
        for i in range(nv):
            for c in range(nv):
                D2[i, c] = dq[i, c]
                D2[i, nv + c] = dv[i, c]
        np.dot(MiJt, R3, Z3)
        np.dot(Mb, D2, MD)
        for r in range(nc):
            for c in range(nv):
                dl[0, b, r, c] = R3[r, c]
                dl[1, b, r, c] = R3[r, nv + c]
                dl[2, b, r, c] = R3[r, 2 * nv + c]
        for i in range(nv):
            for c in range(nv):
                da[0, b, i, c] = Z3[i, c] - MD[i, c]
                da[1, b, i, c] = Z3[i, nv + c] - MD[i, nv + c]
                da[2, b, i, c] = Mb[i, c] + Z3[i, 2 * nv + c]


@_jit
def impulse_range(li, lf, gv, bl, bf, q, v, flink, ff, fbody, fbR, fbp, point, kp, kd, pref, restitution,
                  Mi, zero, vp_out, imp_out, flag, start, stop):
    """Rigid impacts (:mod:`.impulse`) of states ``start`` to ``stop - 1``: ``vp_out`` (B, nv) = v⁺,
    ``imp_out`` (B, nc) = Λ, ``flag[b]`` = smallest relative pivot of K (rank check; v⁺ and Λ are
    not written where it fails). ``Λ = −(1 + e) K⁻¹ J v⁻``, ``v⁺ = v⁻ + M⁻¹ Jᵀ Λ`` with the same
    constraint rows and Cholesky factor as :func:`contact_range`; ``gv, bl, bf, fbody, fbR, fbp``,
    ``kp``, ``kd``, ``pref`` are not used (the argument list is contact_range's, so that one
    per-contact-set argument tuple serves both), ``zero`` (B, nv) zeros, ``Mi`` (B, nv, nv) scratch."""
    L = li.shape[0]
    nv = v.shape[1]
    nc = (3 if point else 6) * flink.shape[0]
    _impulse_range(np.empty(rows_size(L, nv, flink.shape[0], nc) + state_size(L, nv)), np.empty(L, dtype=np.int64),
                   li, lf, q, v, flink, ff, point, pref, restitution, Mi, zero, vp_out, imp_out, flag, start, stop)


@_jit
def _impulse_range(buf, chain, li, lf, q, v, flink, ff, point, pref, restitution, Mi, zero, vp_out, imp_out, flag,
                   start, stop):
    """:func:`impulse_range` with its row and state work arrays carved from ``buf``
    (:func:`rows_views`, :func:`state_views`), ``chain`` (L,) the rows' integer array."""
    L = li.shape[0]
    nv = v.shape[1]
    k = flink.shape[0]
    dim = 3 if point else 6
    nc = dim * k
    rw, o = rows_views(buf, 0, chain, L, nv, k, nc)
    sw, _ = state_views(buf, o, L, nv)
    Jc = rw[19]
    JMi = np.empty((nc, nv))
    K = np.empty((nc, nc))
    JcT = np.empty((nv, nc))
    ident = np.arange(nc)
    rhs = np.empty((nc, 1))
    R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S, Rf, ov, oa, F, oRf, opf, _, gam = rw
    for b in range(start, stop):
        vb = v[b]
        placements_minv(li, lf, q[b], vb[:0], R, p, oR, op, sw, Mi[b])
        _rows(li, lf, R, p, oR, op, flink, ff, vb, zero[b], point, 0.0, 0.0, pref, chain, W, t, xv, xa, vel, acc, vJ,
              S, Rf, ov, oa, F, oRf, opf, Jc, gam)
        rel = _schur(Jc, Mi[b], JMi, K, ident, JcT)
        flag[b] = rel
        if not rel > PIVOT_RTOL:
            continue
        for r in range(nc):
            acc_ = 0.0
            for j in range(nv):
                acc_ += Jc[r, j] * vb[j]
            rhs[r, 0] = -(1.0 + restitution) * acc_
        cholesky_solve(K, nc, rhs)
        for r in range(nc):
            imp_out[b, r] = rhs[r, 0]
        for i in range(nv):
            acc_ = 0.0
            for r in range(nc):
                acc_ += JMi[r, i] * rhs[r, 0]
            vp_out[b, i] = vb[i] + acc_


@_jit
def impulse_derivatives_range(li, lf, gv0, bl, bf, q, v, flink, ff, fbody, fbR, fbp, point, pref, restitution,
                              Mi, zero, fext, dvel, rd, vp_out, imp_out, flag, dvp, dimp, start, stop):
    """:func:`impulse_range` (v⁺, Λ, rank flags) and the first-order derivatives of states ``start``
    to ``stop - 1`` (:func:`.impulse.impulse_dynamics_derivatives`, same math): ``dvp`` (2, B, nv,
    nv) = ∂v⁺/∂q, ∂v⁺/∂v⁻ and ``dimp`` (2, B, nc, nv) = ∂Λ/∂q, ∂Λ/∂v⁻. ``∂ID₀/∂q`` is the RNEA
    derivative at zero velocity and gravity (``gv0``: the packed gravity row with the gravity
    zeroed) with acceleration v⁺ − v⁻ and the impulses as external forces; the velocity-constraint
    term is the contact frames' velocity derivative at ``v⁺ + e v⁻``. Scratch: ``Mi`` (B, nv, nv),
    ``fext`` (B, nbody, 6), ``dvel`` (B, nv), ``rd`` (2, B, nv, nv); ``zero`` (B, nv) zeros."""
    impulse_range(li, lf, gv0, bl, bf, q, v, flink, ff, fbody, fbR, fbp, point, 0.0, 0.0, pref, restitution,
                  Mi, zero, vp_out, imp_out, flag, start, stop)
    L = li.shape[0]
    nv = v.shape[1]
    nc = imp_out.shape[1]
    _impulse_derivatives(np.empty(rows_size(L, nv, flink.shape[0], nc)), np.empty(L, dtype=np.int64), li, lf, gv0, bl,
                         bf, q, v, flink, ff, fbody, fbR, fbp, point, pref, restitution, Mi, zero, fext, dvel, rd,
                         vp_out, imp_out, flag, dvp, dimp, start, stop)


@_jit
def _impulse_derivatives(buf, chain, li, lf, gv0, bl, bf, q, v, flink, ff, fbody, fbR, fbp, point, pref, restitution,
                         Mi, zero, fext, dvel, rd, vp_out, imp_out, flag, dvp, dimp, start, stop):
    """The derivative part of :func:`impulse_derivatives_range`, with the constraint rows' work
    arrays carved from ``buf`` (:func:`rows_views`), ``chain`` (L,) their integer array."""
    nv = v.shape[1]
    k = flink.shape[0]
    nc = imp_out.shape[1]
    rw, _ = rows_views(buf, 0, chain, li.shape[0], nv, k, nc)
    R, p, oR, op, chain, W, t, xv, xa, vel, acc, vJ, S, Rf, ov, oa, F, oRf, opf, Jc, _ = rw
    JMi, MiJt, K = np.empty((nc, nv)), np.empty((nv, nc)), np.empty((nc, nc))
    w, Rq, R2 = np.empty(nv), np.empty((nc, nv)), np.empty((nc, 2 * nv))
    Jw, Z = np.empty((3, nv)), np.empty((3, nv))
    e1 = 1.0 + restitution
    for b in range(start, stop):
        if not flag[b] > PIVOT_RTOL:
            continue
        vb = v[b]
        Mb = Mi[b]
        # the rows and the factor of K again (impulse_range keeps neither): what the derivatives use
        constraint_rows(li, lf, q[b], vb, zero[b], flink, ff, point, 0.0, 0.0, pref, rw)
        _schur(Jc, Mb, JMi, K, np.arange(nc), MiJt)       # (MiJt as the Jᵀ scratch: overwritten next)
        MiJt[:, :] = JMi.T
        for i in range(nv):
            dvel[b, i] = vp_out[b, i] - vb[i]
            w[i] = vp_out[b, i] + restitution * vb[i]
        # ∂ID₀/∂q: M(q) Δv − J(q)ᵀ Λ at zero velocity and gravity
        _forces_as_fext(point, oRf, imp_out[b], fbody, fbR, fbp, fext[b])
        rnea_derivatives_range(li, lf, gv0, bl, bf, q, zero, dvel, fext, rd, b, b + 1)
        dq = rd[0, b]
        # ∂(J(q) w)/∂q at fixed w = v⁺ + e v⁻ (point: R (∂v_lin/∂q − [v_lin]× J_ω))
        for f in range(k):
            _frame_sweep(li, lf, R, p, oR, op, flink[f], ff, f, w, zero[b], True, chain, W, t, xv, xa, vel, acc,
                         vJ, S, Rf, ov[f], oa[f], F[0, f], F[1, f], F[2, f], F[3, f], oRf[f], opf[f])
            if point:
                l0, l1, l2 = ov[f, 0], ov[f, 1], ov[f, 2]
                for c in range(nv):
                    ja0, ja1, ja2 = F[1, f, 3, c], F[1, f, 4, c], F[1, f, 5, c]
                    x0 = F[0, f, 0, c] - (l1 * ja2 - l2 * ja1)
                    x1 = F[0, f, 1, c] - (l2 * ja0 - l0 * ja2)
                    x2 = F[0, f, 2, c] - (l0 * ja1 - l1 * ja0)
                    for r in range(3):
                        Rq[3 * f + r, c] = oRf[f, r, 0] * x0 + oRf[f, r, 1] * x1 + oRf[f, r, 2] * x2
                _turning_force_dq(f, oRf, F, imp_out[b], Jc, Jw, Z, dq)
            else:
                for r in range(6):
                    for c in range(nv):
                        Rq[6 * f + r, c] = F[0, f, r, c]
        # both right-hand sides side by side: [∂Λ/∂q | ∂Λ/∂v⁻] = K⁻¹ [J M⁻¹ ∂ID₀/∂q − ∂(J w)/∂q | −(1 + e) J]
        R2[:, :nv] = np.dot(JMi, dq) - Rq
        R2[:, nv:] = -e1 * Jc
        cholesky_solve(K, nc, R2)
        dimp[0, b] = R2[:, :nv]
        dimp[1, b] = R2[:, nv:]
        # [∂v⁺/∂q | ∂v⁺/∂v⁻] = M⁻¹ Jᵀ [∂Λ/∂q | ∂Λ/∂v⁻] − [M⁻¹ ∂ID₀/∂q | −1]
        Z2 = np.dot(MiJt, R2)
        dvp[0, b] = Z2[:, :nv] - np.dot(Mb, dq)
        dvp[1, b] = Z2[:, nv:]
        for i in range(nv):
            dvp[1, b, i, i] += 1.0


def supports_fused(contacts, *arrays) -> bool:
    """Whether the fused kernel covers this call: float64 inputs, no damping, no 6-D kp term."""
    return (contacts.damping == 0.0 and not (contacts.kind == "6d" and contacts.baumgarte[0] != 0.0)
            and all(x.dtype == np.float64 for x in arrays))


def _fused_call(backend, model, q, v, tau, contacts, derivs: bool, out):
    """``(args, (a, lam, flag, da, dl), cost)``: :func:`contact_range`'s arguments but the batch
    range, its outputs and the rough serial microseconds per state (see :func:`contact_dynamics_fused`)."""
    pm = packed(model)
    flink, ff, fbody, fbR, fbp, pref = _static(contacts)
    B, nv, nc = q.shape[0], model.nv, contacts.nc
    point = contacts.kind == "point"
    kp, kd = contacts.baumgarte
    zero = _zero(B, nv)
    if out is not None and derivs:
        w = out.scratch.get("fused")
        if w is None or w[2].shape[1] != model.nbody:   # every entry is written before it is read
            w = out.scratch["fused"] = (np.empty((B, nv, nv)), np.empty((B, nv)), np.empty((B, model.nbody, 6)),
                                        np.empty((2, B, nv, nv)), np.empty(B))
        Mi, bias, fext, rd, flag = w
        a, lam, da, dl = out.a, out.lam, out.da, out.dl
    else:
        Mi = np.empty((B, nv, nv))
        bias = np.empty((B, nv))
        fext = np.zeros((B if derivs else 0, model.nbody, 6))
        rd = np.empty((2, B if derivs else 0, nv, nv))
        a = np.zeros((B, nv))
        lam = np.zeros((B, nc))
        flag = np.empty(B)
        da = np.empty((3, B if derivs else 0, nv, nv))
        dl = np.empty((3, B if derivs else 0, nc, nv))
    args = (pm.li, pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), flink, ff, fbody, fbR, fbp, point,
            float(kp), float(kd), pref, derivs, Mi, bias, zero, pm.no_fext, fext, rd, a, lam, flag, da, dl)
    return args, (a, lam, flag, da, dl), nv * (8.0 if derivs else 3.0) * 0.05


def _run_fused(backend, args: tuple, B: int, cost: float, serial=contact_range) -> None:
    """:func:`contact_range` on the B states of ``args``, serially (through ``serial``: the kernel
    or its compiled entry point) or split over the backend's worker threads when that pays."""
    nt = backend.threads
    if nt <= 1 or B <= 1 or B * cost < backend.parallel_threshold_us:
        serial(*args, 0, B)
    else:
        use_threads(nt)
        run_threaded(contact_range, B, min(nt, B), *args)


def contact_dynamics_fused(backend, model, q, v, tau, contacts, derivs: bool, out=None):
    """``(a, lam, flag, da (3, B, nv, nv) | None, dl (3, B, nc, nv) | None)`` on flat float64 inputs;
    ``flag`` (B,) holds the smallest relative pivot of K (the caller raises if it is too small).
    out: a :class:`~dynamics.contact.constrained_dynamics.ContactDynamicsBuffers` (derivs only)
    whose arrays receive the results and whose scratch holds the kernel's work arrays."""
    args, (a, lam, flag, da, dl), cost = _fused_call(backend, model, q, v, tau, contacts, derivs, out)
    _run_fused(backend, args, q.shape[0], cost)
    return a, lam, flag, (da if derivs else None), (dl if derivs else None)


_entries: dict = {}    # _abi(args) -> contact_range's compiled entry point for those argument kinds


def prepare_contact_dynamics_fused(backend, model, q, v, tau, contacts, out, func: str):
    """``run()``: :func:`contact_dynamics_fused` with derivatives on what the caller's state
    buffers q (B, nq), v, tau (B, nv) (checked C-contiguous float64) hold, into ``out``, with the
    arguments bound here once and the serial kernel called through its compiled entry point for
    these argument kinds (no per-call type dispatch); raises where the contact Jacobian lost rank
    (func: the name the error gives)."""
    args, outputs, cost = _fused_call(backend, model, q, v, tau, contacts, True, out)
    flag, B = outputs[2], q.shape[0]
    key = _abi(args)
    serial = _entries.get(key)

    def run() -> None:
        nonlocal serial
        if serial is None:                      # first use of these kinds: compile or load the kernel
            contact_range(*args, 0, B)
            serial = _entries[key] = entry_point(contact_range, (*args, 0, B))
        else:
            _run_fused(backend, args, B, cost, serial)
        check_pivots(contacts, func, flag)
    return run


def supports_fused_impulse(contacts, *arrays) -> bool:
    """Whether :func:`impulse_dynamics_fused` covers this call: float64 inputs, no damping
    (impulses use no Baumgarte terms)."""
    return contacts.damping == 0.0 and all(x.dtype == np.float64 for x in arrays)


def impulse_dynamics_fused(model, q, v_minus, contacts, restitution: float):
    """``(v_plus (B, nv), impulse (B, nc), flag (B,))`` on flat float64 inputs, serially (an impact is
    one knot); ``flag`` holds the smallest relative pivot of K (the caller raises if too small)."""
    pm = packed(model)
    flink, ff, fbody, fbR, fbp, pref = _static(contacts)
    B, nv, nc = q.shape[0], model.nv, contacts.nc
    vp = np.zeros((B, nv))
    imp = np.zeros((B, nc))
    flag = np.empty(B)
    impulse_range(pm.li, pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v_minus), flink, ff, fbody, fbR, fbp,
                  contacts.kind == "point", 0.0, 0.0, pref, float(restitution), np.empty((B, nv, nv)),
                  _zero(B, nv), vp, imp, flag, 0, B)
    return vp, imp, flag


def impulse_dynamics_derivatives_fused(model, q, v_minus, contacts, restitution: float):
    """``(v_plus (B, nv), impulse (B, nc), flag (B,), dvp (2, B, nv, nv), dimp (2, B, nc, nv))`` of
    :func:`impulse_derivatives_range` on flat float64 inputs, serially (impact knots are few);
    ``flag`` holds the smallest relative pivot of K (the caller raises if too small)."""
    pm = packed(model)
    flink, ff, fbody, fbR, fbp, pref = _static(contacts)
    B, nv, nc = q.shape[0], model.nv, contacts.nc
    gv0 = pm.gv.copy()                  # writeable like pm.gv: contact_range's RNEA-derivative types
    gv0[:3] = 0.0
    vp = np.zeros((B, nv))
    imp = np.zeros((B, nc))
    flag = np.empty(B)
    dvp = np.zeros((2, B, nv, nv))
    dimp = np.zeros((2, B, nc, nv))
    impulse_derivatives_range(pm.li, pm.lf, gv0, pm.bl, pm.bf, _f64(q), _f64(v_minus), flink, ff, fbody, fbR, fbp,
                              contacts.kind == "point", pref, float(restitution), np.empty((B, nv, nv)),
                              _zero(B, nv), np.zeros((B, model.nbody, 6)), np.empty((B, nv)),
                              np.empty((2, B, nv, nv)), vp, imp, flag, dvp, dimp, 0, B)
    return vp, imp, flag, dvp, dimp


def prepare_impulse_dynamics_derivatives_fused(model, contacts, restitution: float, B: int):
    """``run(q (B, nq), v_minus (B, nv)) -> (v_plus (B, nv), flag (B,), dvp (2, B, nv, nv))``:
    :func:`impulse_dynamics_derivatives_fused` with its arguments bound here once (packed model,
    contact-set arrays, the outputs and scratch, zeroed before each call as the fresh arrays there
    are) and the kernel called through its compiled entry point for these argument kinds (no
    per-call type dispatch). The inputs are copied into buffers of the call; the returned arrays are
    those buffers, overwritten by the next call. ``flag`` as there (the caller checks the pivots)."""
    pm = packed(model)
    flink, ff, fbody, fbR, fbp, pref = _static(contacts)
    nv, nc = model.nv, contacts.nc
    gv0 = pm.gv.copy()                  # as impulse_dynamics_derivatives_fused: writeable, gravity zeroed
    gv0[:3] = 0.0
    qb, vb = np.empty((B, model.nq)), np.empty((B, nv))
    vp, imp, flag = np.zeros((B, nv)), np.zeros((B, nc)), np.empty(B)
    dvp, dimp, fext = np.zeros((2, B, nv, nv)), np.zeros((2, B, nc, nv)), np.zeros((B, model.nbody, 6))
    zeroed = (vp, imp, dvp, dimp, fext)
    args = (pm.li, pm.lf, gv0, pm.bl, pm.bf, _ro(qb), _ro(vb), flink, ff, fbody, fbR, fbp, contacts.kind == "point",
            pref, float(restitution), np.empty((B, nv, nv)), _zero(B, nv), fext, np.empty((B, nv)),
            np.empty((2, B, nv, nv)), vp, imp, flag, dvp, dimp, 0, B)
    call = entry_point(impulse_derivatives_range, args)

    def run(q: np.ndarray, v_minus: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        qb[...] = q
        vb[...] = v_minus
        for a in zeroed:
            a.fill(0.0)
        call(*args)
        return vp, flag, dvp
    return run


def static_args(contacts) -> tuple:
    """The per-contact-set arrays of :func:`contact_range` / :func:`impulse_range`, read-only:
    ``(flink (k,), ff (k, 12), fbody (k,), fbR (k, 9), fbp (k, 3), pref (k, 3))`` (see :func:`_static`)."""
    return _static(contacts)


def source_hash() -> str:
    """Changes whenever the compiled code of these kernels may change: the stamp of every cached
    kernel (:func:`dynamics.kernel_cache.compiled_source_hash`)."""
    return compiled_source_hash()
