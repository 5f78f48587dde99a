"""Compiled evaluation of the library's cost terms: the value of every candidate trajectory, or
the derivatives along one trajectory, of all knots and all supported terms in **one** numba call,
on a backend that offers its frame kinematics compiled (:meth:`dynamics.Backend.compiled_kinematics`:
the ``numba`` backend).

Supported terms (exactly these classes, not subclasses that override their math):
:class:`~solvers.costs.StateCost` (``x ⊖ x_ref``; on ball and free joints through the backend's
compiled SO(3)/SE(3) difference and its Jacobian),
:class:`~solvers.costs.ControlCost`, :class:`~solvers.costs.FramePositionCost` with the
Gauss–Newton Hessian, :class:`~solvers.costs.FrameHeightCost` (a frame position entry whose x and
y weights are zero: the same residual row, Jacobian row and Gauss–Newton products),
:class:`~solvers.costs.FrameRotationCost` (``log(R_refᵀ R)`` through the kernel library's SO(3)
log and ``Jr⁻¹``, Gauss–Newton), :class:`~solvers.costs.FrameVelocityCost` (``J(q) v − v_ref`` on
the linear rows of the ``local_world_aligned`` Jacobian; ``∂r/∂q`` at fixed v from the kernel
library's :func:`dynamics.kernels.kinematics.frame_velocity_dq`, Gauss–Newton),
:class:`~solvers.costs.ComPositionCost` (``c(q) − c_ref`` with the kernel library's
:func:`~dynamics.kernels.kinematics.com_knot`, Gauss–Newton), :class:`~solvers.costs.JointLimitCost`,
and the terms on a
running knot's contact forces λ: :class:`~solvers.costs.ContactForceCost` (``λ − λ_ref``),
:class:`~solvers.costs.FrictionConeCost` and :class:`~solvers.costs.WrenchConeCost` (``max(0, A λ
+ b)``, the constant rows A, b of the term). Every other term (plain-Python custom costs, subclasses
that change a term's math, ...) stays on the Python path, term by term, and is added to what the
kernel computes; a problem's cost is the same either way (to rounding: the kernel scales each
term by its weight and dt in another order).

The contact-force terms read λ and its partials at fixed τ from the contact solves that the
dynamics stage made at the same knots (:meth:`CompiledCosts.add_derivatives`' ``solves``) or
from the forces of the rollout that made the candidates (:meth:`CompiledCosts.values`'
``forces``), when the knot's dynamics solves the term's contact set under the same actuation;
otherwise they solve the contact dynamics of their knots themselves (one batched backend call
per contact set). As on the Python path, their Gauss–Newton products are taken on the nc force
rows: the knot's ``∂l/∂λ`` and ``∂²l/∂λ²``, gathered over its force terms, are chained once through
``Λx``, ``Λu`` (:func:`_chain_force_rows`). The kernel reads one force vector per knot: when a
knot's force terms name two contact sets or actuations, all force terms stay on the Python path.

The math is the Python terms' own (their docstrings): ``l = s · ½ Σ_i w_i r_i²`` with ``s`` the
term's weight times the knot's cost scale (dt), Gauss–Newton ``l_x = s Rᵀ W r``,
``l_xx = s Rᵀ W R``, with the residual Jacobian R the identity (state, control), the frame's
``local_world_aligned`` position Jacobian or the centre-of-mass Jacobian, the active joint-limit
rows, ``(∂(J v)/∂q, J)`` of a frame velocity, or for states
``blockdiag(∂(q ⊖ q_ref)/∂q, 1)`` (identity on hinge/slide robots, where the Hessian is exact).

Layout: one *entry* per (term, knot), sorted by knot; entry e has an int row ``E[e] = (knot,
kind, frame slot, offset into IX)`` and a float row ``P[e] = (s, reference..., weights...)``;
a contact-force entry's IX row is ``(nc, offset of its actuation in CF, nr, offset of its cone rows
in CF)``, with CF the layout's float constants: per contact set and actuation ``B`` (nv, nu)
row-major, the stiffness K (nv,) and damping D (nv,); per cone term ``A`` (nr, nc) row-major and
``b`` (nr,).
The float rows of a term are re-packed only when one of the arrays behind them was replaced (the
cost terms' references and weights are read-only arrays that the setters replace, so identity
tells). What a layout owes to the terms alone (kinds, frame slots, IX, CF, the Python remainder) is
kept per set of group costs (:class:`_TermTable`): a re-phased horizon whose knots hold the same
phases' costs in another arrangement (a gait's every update) makes only E, KS, FK and the terms'
rows anew, in a few array operations. Importing this module imports no numba; the kernel is compiled (or loaded from numba's
on-disk cache) on its first use.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from dynamics.worker_threads import use_threads

from ..contact_or_nan import contact_dynamics_or_nan
from .base import CostSum, _plain, per_knot
from .base import data_changes as cost_data_changes
from .com import ComPositionCost
from .contact import _FUSED, ContactForceCost, FrictionConeCost
from .foot import FrameHeightCost, FrameVelocityCost
from .frame import FramePositionCost, FrameRotationCost
from .limits import JointLimitCost
from .state import ControlCost, StateCost
from .wrench import WrenchConeCost

STATE, CONTROL, FRAME_POSITION, JOINT_LIMIT, STATE_LIE = 0, 1, 2, 3, 4
FRAME_HEIGHT = 5            # packed as a FRAME_POSITION entry (the kernel never sees this kind)
FRAME_ROTATION = 6
CONTACT_FORCE, FORCE_CONE = 7, 8      # ContactForceCost; FrictionConeCost and WrenchConeCost (A λ + b ≤ 0)
FRAME_VELOCITY, COM_POSITION = 9, 10
_MATH = ("value", "derivatives", "residual", "residual_jacobian", "_accumulate")

frames_knot = None                       # the kernel library's, bound on the first compilation
frames_workspace = None
difference_x = None
difference_jacobian = None
frame_velocity_dq = None
com_knot = None
run_threaded_parts = None                # dynamics.kernels.threaded_batch's, bound with them


# ---------------------------------------------------------------- kernel source (jitted lazily)
def _cost_kernel(margs, joints, flink, ff, nq, nv, E, KS, FK, P, IX, X, U, deriv, J, rl, rlx, rlu, rlxx, rluu, tl,
                 tlx, tlxx, s0, s1, t0, t1, forces):
    """Values ``J[s]`` of trajectories X (S, N+1, nx), U (S, N, nu) over the entries of knots
    ``t0 <= t < t1``, for ``s0 <= s < s1``, and with ``deriv`` (S = 1) their derivatives added into
    the running rows rl (N,), rlx (N, ndx), rlu (N, nu), rlxx (N, ndx, ndx), rluu (N, nu, nu) and
    the terminal row tl (1,), tlx (1, ndx), tlxx (1, ndx, ndx), rlxu (N, ndx, nu). E, KS (N+2,) entry
    offsets per knot, FK (N+1,) knots with frame or centre-of-mass entries (2: with a frame
    velocity entry, whose value needs the frame Jacobians), P, IX: module docstring. ``forces = (CF,
    LAM, DL, koff, rlxu)``: the layout's float constants CF (module docstring); contact-force entries
    read the forces ``LAM[s, t - koff]`` (≥ nc,) of knot t and, with ``deriv``, their partials
    ``DL[:, t - koff]`` (3, ≥ nc, nv) = (∂λ/∂q, ∂λ/∂v, ∂λ/∂τ) at fixed τ. (One tuple: a call of more
    than 30 arguments compiles to a ``*args`` call, which numba cannot inline.)"""
    CF, LAM, DL, koff, rlxu = forces
    N = X.shape[1] - 1
    nx = X.shape[2]
    ws, wsi = frames_workspace(*margs, nv)
    oRf, opf, Jf = frame_outputs(flink.shape[0], nv)
    q = np.empty(nq)
    wr = np.empty(3)
    dx = np.empty(2 * nv)
    Jq = np.empty((nv, nv))
    WJ = np.empty((nv, nv))
    tmp = np.empty((8, 3, 3))
    M = np.empty((3, 3))
    A3 = np.empty((3, nv))
    R3 = np.empty((3, 2 * nv))
    cp = np.empty(3)
    nu = U.shape[2]
    ncm = LAM.shape[2]
    gL = np.empty(ncm)                 # ∂l/∂λ and ∂²l/∂λ² of a knot's contact-force entries
    HL = np.empty((ncm, ncm))
    L = np.empty((ncm, 2 * nv + nu))   # the force Jacobians (Λx, Λu) of the knot
    HLL = np.empty((ncm, 2 * nv + nu))
    for s in range(s0, s1):
        total = 0.0
        for t in range(t0, t1):
            e0 = KS[t]
            e1 = KS[t + 1]
            if e0 == e1:
                continue
            x = X[s, t]
            if FK[t]:
                for i in range(nq):
                    q[i] = x[i]
                with_J = deriv or FK[t] > 1      # FK 2: a frame velocity needs them for its value too
                frames_knot(*margs, q, flink, ff, with_J, ws, wsi, oRf, opf, Jf)
            term = t == N
            row = 0 if (term or not deriv) else t      # value only: the outputs are 1-row dummies
            lx = tlx[0] if (term or not deriv) else rlx[row]
            lxx = tlxx[0] if (term or not deriv) else rlxx[row]
            cnc = 0                     # > 0: the knot has contact-force entries on nc = cnc forces
            cact = 0
            for e in range(e0, e1):
                kind = E[e, 1]
                sc = P[e, 0]
                val = 0.0
                if kind == STATE:
                    val = _diagonal_residual(x, P[e], nx, sc, deriv, lx, lxx)
                elif kind == STATE_LIE:
                    # r = x ⊖ x_ref; Gauss–Newton with R = ∂(x ⊖ x_ref)/∂x = blockdiag(Jq, 1)
                    difference_x(joints, nq, P[e, 1:1 + nx], x, dx)
                    for i in range(2 * nv):
                        w = P[e, 1 + nx + i]
                        val += w * dx[i] * dx[i]
                    if deriv:
                        difference_jacobian(joints, dx, Jq, tmp)
                        for i in range(nv):
                            w = P[e, 1 + nx + nv + i]
                            lx[nv + i] += sc * (w * dx[nv + i])
                            lxx[nv + i, nv + i] += sc * w
                        for i in range(nv):
                            w = P[e, 1 + nx + i]
                            for c in range(nv):
                                WJ[i, c] = w * Jq[i, c]
                        for c in range(nv):
                            g = 0.0
                            for i in range(nv):
                                g += Jq[i, c] * (P[e, 1 + nx + i] * dx[i])
                            lx[c] += sc * g
                        for a in range(nv):
                            for i in range(nv):
                                ja = Jq[i, a]
                                if ja != 0.0:
                                    ja *= sc
                                    for b in range(nv):
                                        lxx[a, b] += ja * WJ[i, b]
                elif kind == CONTROL:
                    val = _diagonal_residual(U[s, t], P[e], nu, sc, deriv, rlu[row], rluu[row])
                elif kind == FRAME_POSITION:
                    f = E[e, 2]
                    val = _point_residual(opf[f], Jf[f], P[e], nv, sc, deriv, wr, lx, lxx)
                elif kind == COM_POSITION:
                    # r = c(q) - c_ref: the centre of mass at the knot's placements (frames_knot's)
                    com_knot(*margs, ws, deriv, cp, A3)
                    val = _point_residual(cp, A3, P[e], nv, sc, deriv, wr, lx, lxx)
                elif kind == FRAME_ROTATION:
                    # r = log(R_refᵀ R_f); Gauss–Newton with ∂r/∂v = Jr⁻¹(r) R_fᵀ J_angular (world-aligned)
                    f = E[e, 2]
                    for i in range(3):
                        for j in range(3):
                            M[i, j] = (P[e, 1 + i] * oRf[f, 0, j] + P[e, 4 + i] * oRf[f, 1, j]
                                       + P[e, 7 + i] * oRf[f, 2, j])
                    r0, r1, r2 = so3_log_matrix(M)
                    w0, w1, w2 = P[e, 10], P[e, 11], P[e, 12]
                    val += w0 * r0 * r0 + w1 * r1 * r1 + w2 * r2 * r2
                    if deriv:
                        so3_right_jacobian_inverse(r0, r1, r2, tmp[1], tmp[2], M)
                        for a in range(nv):
                            j0 = oRf[f, 0, 0] * Jf[f, 3, a] + oRf[f, 1, 0] * Jf[f, 4, a] + oRf[f, 2, 0] * Jf[f, 5, a]
                            j1 = oRf[f, 0, 1] * Jf[f, 3, a] + oRf[f, 1, 1] * Jf[f, 4, a] + oRf[f, 2, 1] * Jf[f, 5, a]
                            j2 = oRf[f, 0, 2] * Jf[f, 3, a] + oRf[f, 1, 2] * Jf[f, 4, a] + oRf[f, 2, 2] * Jf[f, 5, a]
                            for i in range(3):
                                A3[i, a] = M[i, 0] * j0 + M[i, 1] * j1 + M[i, 2] * j2
                        for a in range(nv):
                            lx[a] += sc * (A3[0, a] * (w0 * r0) + A3[1, a] * (w1 * r1) + A3[2, a] * (w2 * r2))
                            ja0, ja1, ja2 = sc * w0 * A3[0, a], sc * w1 * A3[1, a], sc * w2 * A3[2, a]
                            for b in range(nv):
                                lxx[a, b] += ja0 * A3[0, b] + ja1 * A3[1, b] + ja2 * A3[2, b]
                elif kind == FRAME_VELOCITY:
                    # r = J(q) v - v_ref (J: linear rows, local_world_aligned); Gauss–Newton with
                    # ∂r/∂x = (∂(J v)/∂q at fixed v, J)
                    f = E[e, 2]
                    Jp = Jf[f]
                    for i in range(3):
                        r = -P[e, 1 + i]
                        for a in range(nv):
                            r += Jp[i, a] * x[nq + a]
                        w = P[e, 4 + i]
                        wr[i] = w * r
                        val += w * r * r
                    if deriv:
                        frame_velocity_dq(margs[0], flink[f], x[nq:], Jp, A3)
                        for i in range(3):
                            for a in range(nv):
                                R3[i, a] = A3[i, a]
                                R3[i, nv + a] = Jp[i, a]
                        w0, w1, w2 = P[e, 4], P[e, 5], P[e, 6]
                        for a in range(2 * nv):
                            ja0, ja1, ja2 = R3[0, a], R3[1, a], R3[2, a]
                            if ja0 == 0.0 and ja1 == 0.0 and ja2 == 0.0:
                                continue              # a dof that does not move the frame
                            lx[a] += sc * (ja0 * wr[0] + ja1 * wr[1] + ja2 * wr[2])
                            ja0, ja1, ja2 = sc * w0 * ja0, sc * w1 * ja1, sc * w2 * ja2
                            for b in range(2 * nv):
                                lxx[a, b] += ja0 * R3[0, b] + ja1 * R3[1, b] + ja2 * R3[2, b]
                elif kind == CONTACT_FORCE or kind == FORCE_CONE:
                    # functions of the knot's contact forces λ: Gauss–Newton on the nc force rows,
                    # gathered over the knot's entries and chained to x, u once (after the loop)
                    o = E[e, 3]
                    nc = IX[o]
                    lam = LAM[s, t - koff]
                    if deriv and cnc == 0:
                        cnc = nc
                        cact = IX[o + 1]
                        for i in range(nc):
                            gL[i] = 0.0
                            for k in range(nc):
                                HL[i, k] = 0.0
                    if kind == CONTACT_FORCE:      # r = λ - λ_ref
                        val = _diagonal_residual(lam, P[e], nc, sc, deriv, gL, HL)
                    else:                          # r = max(0, A λ + b), A (nr, nc) and b at CF[ao:]
                        nr = IX[o + 2]
                        ao = IX[o + 3]
                        for j in range(nr):
                            a0 = ao + j * nc
                            g = CF[ao + nr * nc + j]
                            for i in range(nc):
                                g += CF[a0 + i] * lam[i]
                            if g > 0.0:
                                w = P[e, 1 + j]
                                val += w * g * g
                                if deriv:
                                    wg = sc * (w * g)
                                    ws_ = sc * w
                                    for i in range(nc):
                                        ai = CF[a0 + i]
                                        if ai != 0.0:
                                            gL[i] += wg * ai
                                            ai *= ws_
                                            for k in range(nc):
                                                HL[i, k] += ai * CF[a0 + k]
                else:   # JOINT_LIMIT: r = min(q - lo, 0) + max(q - hi, 0) on the limited coordinates
                    o = E[e, 3]
                    n = IX[o]
                    for i in range(n):
                        qi = x[IX[o + 1 + i]]
                        w = P[e, 1 + i]
                        lo = P[e, 1 + n + i]
                        hi = P[e, 1 + 2 * n + i]
                        r = min(qi - lo, 0.0) + max(qi - hi, 0.0)
                        val += w * r * r
                        if deriv and (qi < lo or qi > hi):
                            vi = IX[o + 1 + n + i]
                            lx[vi] += sc * (w * r)
                            lxx[vi, vi] += sc * w
                val *= 0.5 * sc
                total += val
                if deriv:
                    if term:
                        tl[0] += val
                    else:
                        rl[t] += val
            if cnc > 0 and not term:
                _chain_force_rows(nv, nu, cnc, cact, CF, DL, t - koff, gL, HL, L, HLL, lx, lxx,
                                  rlu[row], rlxu[row], rluu[row])
        J[s] = total


def _point_residual(pos, Jp, Pe, nv, sc, deriv, wr, lx, lxx):
    """``Σ_i w_i r_i²`` of a point ``r = pos − Pe[1:4]`` (3,) with weights ``w = Pe[4:7]``; with
    ``deriv`` adds the Gauss–Newton ``sc Jpᵀ W r`` into lx and ``sc Jpᵀ W Jp`` into lxx (configuration
    columns) from the point's Jacobian Jp (≥ 3, nv); wr (3,): scratch."""
    val = 0.0
    for i in range(3):
        r = pos[i] - Pe[1 + i]
        w = Pe[4 + i]
        wr[i] = w * r
        val += w * r * r
    if deriv:
        w0, w1, w2 = Pe[4], Pe[5], Pe[6]
        for a in range(nv):
            lx[a] += sc * (Jp[0, a] * wr[0] + Jp[1, a] * wr[1] + Jp[2, a] * wr[2])
            ja0, ja1, ja2 = sc * w0 * Jp[0, a], sc * w1 * Jp[1, a], sc * w2 * Jp[2, a]
            for b in range(nv):
                lxx[a, b] += ja0 * Jp[0, b] + ja1 * Jp[1, b] + ja2 * Jp[2, b]
    return val


def _diagonal_residual(y, Pe, n, sc, deriv, g, H):
    """``Σ_i w_i r_i²`` of ``r = y[:n] − Pe[1:1+n]`` with weights ``w = Pe[1+n:1+2n]``; with ``deriv``
    adds the Gauss–Newton ``sc w r`` into g (n,) and ``sc w`` into the diagonal of H (n, n)."""
    val = 0.0
    for i in range(n):
        r = y[i] - Pe[1 + i]
        w = Pe[1 + n + i]
        val += w * r * r
        if deriv:
            g[i] += sc * (w * r)
            H[i, i] += sc * w
    return val


def _chain_force_rows(nv, nu, nc, act, CF, DL, tr, gL, HL, L, HLL, lx, lxx, lu, lxu, luu):
    """Add the Gauss–Newton derivatives of a knot's costs on its contact forces λ, gathered on the
    nc force rows as ``gL = ∂l/∂λ`` (nc,) and ``HL = ∂²l/∂λ²`` (nc, nc): ``lx += Λxᵀ gL``,
    ``lu += Λuᵀ gL``, ``lxx += Λxᵀ HL Λx``, ``lxu += Λxᵀ HL Λu``, ``luu += Λuᵀ HL Λu``. The force
    Jacobians ``L = (Λx, Λu)`` (nc, 2 nv + nu) are chained through ``τ = B u + τ_passive(q, v)``
    from the partials at fixed τ ``DL[:, tr]``: ``Λx = (∂λ/∂q − ∂λ/∂τ K, ∂λ/∂v − ∂λ/∂τ D)``,
    ``Λu = ∂λ/∂τ B`` with B (nv, nu) row-major, then K (nv,), D (nv,) at ``CF[act:]``
    (:meth:`dynamics.actuation.Actuation.chain_partials`); HLL (nc, 2 nv + nu): scratch."""
    ndx = 2 * nv
    nz = ndx + nu
    force_jacobians(nv, nu, nc, act, CF, DL, tr, L)
    for i in range(nc):
        g = gL[i]
        if g != 0.0:
            for a in range(ndx):
                lx[a] += L[i, a] * g
            for k in range(nu):
                lu[k] += L[i, ndx + k] * g
        for b in range(nz):
            HLL[i, b] = 0.0
        for k in range(nc):
            h = HL[i, k]
            if h != 0.0:
                for b in range(nz):
                    HLL[i, b] += h * L[k, b]
    for a in range(nz):
        for i in range(nc):
            la = L[i, a]
            if la == 0.0:
                continue
            if a < ndx:
                for b in range(ndx):
                    lxx[a, b] += la * HLL[i, b]
                for b in range(nu):
                    lxu[a, b] += la * HLL[i, ndx + b]
            else:
                for b in range(nu):
                    luu[a - ndx, b] += la * HLL[i, ndx + b]


def frame_outputs(nf, nv):
    """The outputs ``oRf`` (nf, 3, 3), ``opf`` (nf, 3), ``J`` (nf, 6, nv) of
    :func:`~dynamics.kernels.kinematics.frames_knot` for nf frames (one row when nf = 0)."""
    m = nf if nf > 0 else 1
    return np.empty((m, 3, 3)), np.empty((m, 3)), np.empty((m, 6, nv))


def force_jacobians(nv, nu, nc, act, CF, DL, tr, L):
    """The force Jacobians ``L = (Λx, Λu)`` (nc, 2 nv + nu) of knot row ``tr`` chained through
    ``τ = B u + τ_passive(q, v)`` from the partials at fixed τ ``DL[:, tr]`` (3, ≥ nc, nv):
    ``Λx = (∂λ/∂q − ∂λ/∂τ K, ∂λ/∂v − ∂λ/∂τ D)``, ``Λu = ∂λ/∂τ B``, with B (nv, nu) row-major, then
    K (nv,), D (nv,) at ``CF[act:]`` (:meth:`dynamics.actuation.Actuation.chain_partials`; also the
    compiled constraint terms', :mod:`solvers.constraints.compiled`)."""
    ko = act + nv * nu
    do = ko + nv
    ndx = 2 * nv
    for i in range(nc):
        Li = L[i]                # row views: unit-stride inner loops
        dq = DL[0, tr, i]
        dv = DL[1, tr, i]
        dtau = DL[2, tr, i]
        for a in range(nv):
            dt = dtau[a]
            Li[a] = dq[a] - dt * CF[ko + a]
            Li[nv + a] = dv[a] - dt * CF[do + a]
        for k in range(nu):
            Li[ndx + k] = 0.0
    # Λu: over B's non-zero entries only (an actuation map is mostly a selection)
    for j in range(nv):
        b = act + j * nu
        for k in range(nu):
            bjk = CF[b + k]
            if bjk != 0.0:
                for i in range(nc):
                    L[i, ndx + k] += DL[2, tr, i, j] * bjk


def _cost_part(margs, joints, flink, ff, nq, nv, E, KS, FK, P, IX, X, U, deriv, Jc, rl, rlx, rlu, rlxx, rluu, tl,
               tlx, tlxx, CF, LAM, DL, koff, rlxu, c, nt):
    """:func:`_cost_kernel` on part ``c`` of ``nt``: of the candidates when there are several
    (values), else of the knots (parts write disjoint rows; the terminal row belongs to the last).
    Part c writes its totals into ``Jc[c]`` (nt, S): the caller sums over c. The parts run one per
    worker thread (:func:`dynamics.kernels.threaded_batch.run_threaded_parts`, which appends c and nt
    to the arguments: they stay last)."""
    S = X.shape[0]
    N1 = X.shape[1]
    for s in range(S):
        Jc[c, s] = 0.0
    # one call site: the kernel's body is inlined here, and each call site would compile it again
    if S > 1:
        s0, s1, t0, t1 = c * S // nt, (c + 1) * S // nt, 0, N1
    else:
        s0, s1, t0, t1 = 0, 1, c * N1 // nt, (c + 1) * N1 // nt
    _cost_kernel(margs, joints, flink, ff, nq, nv, E, KS, FK, P, IX, X, U, deriv, Jc[c], rl, rlx, rlu, rlxx, rluu,
                 tl, tlx, tlxx, s0, s1, t0, t1, (CF, LAM, DL, koff, rlxu))


_compiled = None


def runs_kernel_library(kin) -> bool:
    """Whether ``kin`` (a :class:`dynamics.backend.CompiledKinematics` or None) is the kernel
    library's frame kinematics and Lie-group difference: what the compiled cost kernel calls."""
    if kin is None:
        return False
    from dynamics.kernels import kinematics, lie
    return (kin.frames_knot is kinematics.frames_knot and kin.workspace is kinematics.frames_workspace
            and kin.difference_x is lie.difference_x and kin.difference_jacobian is lie.difference_jacobian
            and kin.frame_velocity_dq is kinematics.frame_velocity_dq and kin.com_knot is kinematics.com_knot)


def _kernel():
    """The compiled kernel, calling the kernel library's frame kinematics
    (:func:`dynamics.kernels.kinematics.frames_knot`) and SO(3)/SE(3) difference directly, so every
    backend whose :meth:`~dynamics.Backend.compiled_kinematics` runs the kernel library shares it;
    compiled with the project's options and cache stamp (:mod:`dynamics.kernels.jit`)."""
    global _compiled, frames_knot, frames_workspace, difference_x, difference_jacobian, run_threaded_parts
    global frame_velocity_dq, com_knot
    global so3_log_matrix, so3_right_jacobian_inverse
    if _compiled is not None:
        return _compiled
    from dynamics.kernels import kinematics, lie, threaded_batch
    from dynamics.kernels.jit import jit, jit_inline
    run_threaded_parts = threaded_batch.run_threaded_parts
    frames_knot, frames_workspace = kinematics.frames_knot, kinematics.frames_workspace
    frame_velocity_dq, com_knot = kinematics.frame_velocity_dq, kinematics.com_knot
    difference_x, difference_jacobian = lie.difference_x, lie.difference_jacobian
    so3_log_matrix, so3_right_jacobian_inverse = lie.so3_log_matrix, lie.so3_right_jacobian_inverse
    # the kernel body is inlined into the part function, the one function compiled (a callee compiled
    # on its own would be compiled, then linked and optimised again inside its caller)
    g = globals()
    g["_cost_kernel"] = jit_inline(_cost_kernel)
    g["_chain_force_rows"] = jit_inline(_chain_force_rows)
    g["force_jacobians"] = jit_inline(force_jacobians)
    g["frame_outputs"] = jit_inline(frame_outputs)
    g["_diagonal_residual"] = jit_inline(_diagonal_residual)
    g["_point_residual"] = jit_inline(_point_residual)
    _compiled = jit(_cost_part)
    return _compiled


# ---------------------------------------------------------------- Python side
#: (class, kernel kind, the methods a subclass must not override) of the compiled terms, in the
#: order they are tried; StateCost's kind depends on the state space, FramePositionCost's on its Hessian
_KINDS = ((StateCost, STATE, _MATH), (ControlCost, CONTROL, _MATH), (FramePositionCost, FRAME_POSITION, _MATH),
          (JointLimitCost, JOINT_LIMIT, _MATH), (FrameHeightCost, FRAME_HEIGHT, _MATH),
          (FrameRotationCost, FRAME_ROTATION, _MATH), (FrameVelocityCost, FRAME_VELOCITY, _MATH),
          (ComPositionCost, COM_POSITION, _MATH), (ContactForceCost, CONTACT_FORCE, _FUSED),
          (FrictionConeCost, FORCE_CONE, _FUSED), (WrenchConeCost, FORCE_CONE, _FUSED))


#: the kinds whose packed reference is a term's ``_target`` (the others': ``_reference``)
_TARGETED = (FRAME_POSITION, FRAME_HEIGHT, FRAME_ROTATION, FRAME_VELOCITY, COM_POSITION)


def _kind(cost, model) -> int | None:
    """The kernel's kind for a cost term, None when it stays on the Python path."""
    t = type(cost)
    for cls, kind, math in _KINDS:
        if t is cls or (isinstance(cost, cls) and _plain(cost, cls, math)):
            if cls is StateCost:
                return STATE if cost.state.euclidean else STATE_LIE
            if cls is FramePositionCost and cost.hessian != "gauss-newton":
                return None
            return kind
    return None


@dataclass
class _ForceSource:
    """The contact forces that a layout's contact-force entries read at ``knots``: those of
    ``contacts`` under ``actuation`` (the terms' own, compared with a knot's dynamics by identity of
    the contact set and :meth:`~dynamics.actuation.Actuation.same_as`)."""

    contacts: object
    actuation: object
    knots: np.ndarray
    cf_offset: int = 0          # where its B, K, D start in the layout's CF

    @staticmethod
    def index(sources: list, floats: list, nfl: int, cf, nv: int) -> tuple[int, int]:
        """``(index of the source of the term forces cf, float count)``: an existing source of the
        same contact set and actuation, else a new one appended to ``sources`` with its B, K, D
        appended to the float pieces ``floats`` (``nfl`` floats so far)."""
        si = next((i for i, sr in enumerate(sources) if sr.contacts is cf.contacts
                   and sr.actuation.same_as(cf.actuation)), None)
        if si is None:
            si = len(sources)
            a = cf.actuation
            sources.append(_ForceSource(cf.contacts, a, np.zeros(0, np.int64), nfl))
            piece = np.concatenate([np.asarray(a.B, float).ravel(), np.broadcast_to(a.stiffness, (nv,)),
                                    np.broadcast_to(a.damping, (nv,))])
            floats.append(piece)
            nfl += piece.size
        return si, nfl


def _term_ids(cost) -> tuple:
    """``(id(cost), ((name, id(term)), ...))`` over :func:`_terms` (``()`` for None): a group's part of
    :meth:`CompiledCosts.signature_of`, read straight from a CostSum's dict (this runs every solve)."""
    if cost is None:
        return ()
    if type(cost) is CostSum:
        return id(cost), tuple([(name, id(item[0])) for name, item in cost.terms.items()])
    return id(cost), ((None, id(cost)),)


def _terms(cost) -> list[tuple[str | None, object, np.ndarray | None]]:
    """``(name, term, weight array)`` of a group's cost: a CostSum's terms, or the cost itself
    (name and weight None)."""
    if type(cost) is CostSum:
        return [(name, c, w) for name, (c, w) in cost.terms.items()]
    return [(None, cost, None)]


@dataclass
class _Term:
    """A compiled term of one group: its rows in E/P and what its float rows were packed from."""

    name: str | None
    cost: object
    kind: int
    rows: np.ndarray            # its entries' rows in E and P (one per knot of the group)
    knots: np.ndarray           # the knots of those rows
    group: int                  # index into the problem's cost groups, -1: terminal
    #: the rows as a slice when they are evenly spaced (P[sl] is then a view: per-knot data is
    #: written in place), else None
    sl: slice | None = None
    kr: slice | None = None     # the knots as a slice when they are contiguous, else None
    owner: object = None        # the group's cost (a CostSum when ``name`` is not None: the term weight's)
    packed_from: tuple = ()
    put: object = None          # CompiledCosts._putter(self), made on the first packing


class _TermRows(NamedTuple):
    """A layout's record of one compiled term: the first fields of :class:`_Term` (what each
    :class:`CompiledCosts` of the layout copies into its own, mutable, term; a tuple is made in a
    fraction of a dataclass's time, and a layout makes one per term of every new structure)."""

    name: str | None
    cost: object
    kind: int
    rows: np.ndarray
    knots: np.ndarray
    group: int
    sl: slice | None
    kr: slice | None
    owner: object


def _python_part(compiled_names: dict, group: int, cost):
    """:meth:`CompiledCosts.python_part` for the compiled term names per group ``compiled_names``."""
    names = compiled_names.get(group)
    if not names:
        return cost
    if type(cost) is not CostSum:
        return None
    rest = {n: item for n, item in cost.terms.items() if n not in names}
    if not rest:
        return None
    return CostSum.of_terms(rest)


@dataclass
class _TermTable:
    """What a layout owes to its cost terms alone, not to the knots that hold them (kept per set of
    group costs, so a re-phased horizon that re-arranges the same phases' knots reuses it): per
    compiled term ``(group, name, cost, kind)`` and its kernel columns ``(kernel kind, frame slot,
    offset into IX)`` (``cols``, (n, 3)), the int table IX, the float constants CF, the force
    sources (their knots left empty), the frame table, the float rows' width, the compiled term
    names per group and whether they cover every term."""

    groups: tuple               # the group costs (and the terminal cost) it was made for, kept alive
    specs: list                 # (group index, name, cost, kind)
    cols: np.ndarray            # (n, 3) int64: kernel kind, frame slot, IX offset per spec
    src_of: dict                # spec index -> source index (contact-force and cone specs)
    sources: list               # _ForceSource (knots empty)
    IX: np.ndarray
    CF: np.ndarray
    flink: np.ndarray
    ff: np.ndarray
    width: int
    compiled_names: dict
    covers_all: bool
    ncmax: int
    #: which knot models give which source's forces ({(id(model), source): (model, answer)}), answered
    #: once per model (the objects are kept, so an id is not reused)
    gives: dict = field(default_factory=dict)

    @staticmethod
    def build(problem, kin, forces: bool = True) -> _TermTable:
        """The table of ``problem``'s current group costs; forces False: without the terms on
        contact forces (they then stay on the Python path)."""
        m = problem.model
        frames: list[str] = []
        ints: list[int] = []
        floats: list[np.ndarray] = []             # CF's pieces: actuation maps and cone rows
        nfl = 0
        sources: list[_ForceSource] = []
        src_of: dict = {}
        specs, cols = [], []
        groups = [(gi, g.item) for gi, g in enumerate(problem.cost_groups)]
        if problem.terminal_cost is not None:
            groups.append((-1, problem.terminal_cost))
        for gi, cost in groups:
            for name, c, _w in _terms(cost):
                kind = _kind(c, m)
                if kind is None or ((gi < 0 or not forces) and kind in (CONTACT_FORCE, FORCE_CONE)):
                    continue                      # (a terminal knot has no control, no contact forces)
                slot, off = 0, 0
                if kind in (FRAME_POSITION, FRAME_HEIGHT, FRAME_ROTATION, FRAME_VELOCITY):
                    if c.frame not in frames:
                        frames.append(c.frame)
                    slot = frames.index(c.frame)
                elif kind == JOINT_LIMIT:
                    off = len(ints)
                    ints += [c.nr, *map(int, c.q_index), *map(int, c.v_index)]
                elif kind == CONTACT_FORCE or kind == FORCE_CONE:
                    cf = c._cf
                    si, nfl = _ForceSource.index(sources, floats, nfl, cf, m.nv)
                    src_of[len(specs)] = si
                    off = len(ints)
                    nc = cf.contacts.nc
                    if kind == CONTACT_FORCE:
                        ints += [nc, sources[si].cf_offset, 0, 0]
                    else:
                        ints += [nc, sources[si].cf_offset, c.nr, nfl]
                        piece = np.concatenate([np.asarray(c._A, float).ravel(), np.asarray(c._b, float)])
                        floats.append(piece)
                        nfl += piece.size
                specs.append((gi, name, c, kind))
                cols.append((FRAME_POSITION if kind == FRAME_HEIGHT else kind, slot, off))
        nx, ndx, nu = problem.nx, problem.ndx, problem.nu
        widths = {STATE: 1 + nx + ndx, STATE_LIE: 1 + nx + ndx, CONTROL: 1 + 2 * nu, FRAME_POSITION: 7, FRAME_HEIGHT: 7,
                  FRAME_ROTATION: 13, FRAME_VELOCITY: 7, COM_POSITION: 7,
                  JOINT_LIMIT: 1 + 3 * max([c.nr for _, _, c, k in specs if k == JOINT_LIMIT] or [0])}
        widths[CONTACT_FORCE] = 1 + 2 * max([c.nr for _, _, c, k in specs if k == CONTACT_FORCE] or [0])
        widths[FORCE_CONE] = 1 + max([c.nr for _, _, c, k in specs if k == FORCE_CONE] or [0])
        names: dict = {}
        for gi, name, _c, _k in specs:
            names.setdefault(gi, set()).add(name)
        covers_all = all(_python_part(names, gi, cost) is None for gi, cost in groups)
        flink, ff = kin.frame_table(frames)
        return _TermTable(tuple(cost for _, cost in groups), specs, np.array(cols, np.int64).reshape(-1, 3), src_of,
                          sources, np.array(ints or [0], np.int64), np.concatenate(floats) if floats else np.zeros(1),
                          flink, ff, max([widths[k] for *_, k in specs] or [1]), names, covers_all,
                          max([sr.contacts.nc for sr in sources] or [1]))


@dataclass
class _Layout:
    """What a knot structure's compiled terms are laid out as (module docstring: E, KS, FK, IX and
    the frame table), the terms' rows, and the float rows' shape; read-only once built. (The frame
    table depends only on the model and the frames: any kernel-library kinematics of the problem's
    model gives the same one.)"""

    E: np.ndarray
    KS: np.ndarray
    FK: np.ndarray
    IX: np.ndarray
    flink: np.ndarray
    ff: np.ndarray
    terms: list                 # _TermRows: the fields of each compiled term's :class:`_Term`
    compiled_names: dict
    covers_all: bool
    P_shape: tuple
    CF: np.ndarray              # float constants: per force source B (nv, nu), K, D; per cone A, b
    sources: list               # _ForceSource of the contact-force entries
    ncmax: int
    #: which knot models give which source's forces (the term table's: :class:`_TermTable`) and
    #: whether a rollout's per-knot models give them all ({id(models): (models, answer)}): asked at
    #: every MPC update, answered once per model
    gives: dict = field(default_factory=dict)
    models_give: dict = field(default_factory=dict)

    @staticmethod
    def build(problem, kin, tables: dict | None = None, signature: tuple | None = None) -> "_Layout":
        """The layout of ``problem``'s current knot structure; tables: the term tables already made
        for this problem (:class:`_TermTable`, by the group costs' signature), used and filled;
        signature: :meth:`CompiledCosts.signature_of` the problem, when the caller has it."""
        tables = {} if tables is None else tables
        key = (CompiledCosts.signature_of(problem) if signature is None else signature)[2]
        tab = tables.get((key, True))
        if tab is None:
            if len(tables) >= CompiledCosts.MAX_LAYOUTS:
                tables.clear()
            tab = tables[(key, True)] = _TermTable.build(problem, kin)
        N = problem.horizon
        cost_groups = problem.cost_groups
        terminal = np.array([N], np.int64)
        spec_knots = [cost_groups[sp[0]].knots if sp[0] >= 0 else terminal for sp in tab.specs]
        # each knot's contact-force entries read one force vector: when a knot's terms name two
        # contact sets (or actuations), every contact-force term stays on the Python path
        CK = np.full(max(N, 1), -1, np.int64)
        clash = False
        if tab.src_of:
            # a knot with entries of two sources keeps one of them in CK, which then differs from the other's
            fk = [spec_knots[i] for i in tab.src_of]
            fk_all = np.concatenate(fk)
            fs_all = np.repeat(np.fromiter(tab.src_of.values(), np.int64, len(fk)), [k.size for k in fk])
            CK[fk_all] = fs_all
            clash = bool(np.any(CK[fk_all] != fs_all))
        if clash:
            tab = tables.get((key, False))
            if tab is None:
                tab = tables[(key, False)] = _TermTable.build(problem, kin, forces=False)
            spec_knots = [cost_groups[sp[0]].knots if sp[0] >= 0 else terminal for sp in tab.specs]
        sources = [_ForceSource(sr.contacts, sr.actuation, np.flatnonzero(CK == si), sr.cf_offset)
                   for si, sr in enumerate(tab.sources)]
        sizes = [k.size for k in spec_knots]
        n_e = sum(sizes)
        E = np.empty((n_e, 4), np.int64)
        if n_e:
            E[:, 0] = np.concatenate(spec_knots)
            E[:, 1:] = np.repeat(tab.cols, sizes, axis=0)
        order = np.argsort(E[:, 0], kind="stable")          # entries by knot
        E = E[order]
        where = np.empty(n_e, np.int64)
        where[order] = np.arange(n_e)
        KS = np.searchsorted(E[:, 0], np.arange(N + 2))
        FK = np.zeros(N + 1, np.int64)
        FK[E[(E[:, 1] == FRAME_POSITION) | (E[:, 1] == FRAME_ROTATION) | (E[:, 1] == COM_POSITION), 0]] = 1
        FK[E[E[:, 1] == FRAME_VELOCITY, 0]] = 2           # frames with their Jacobians, values too
        # which terms' rows are evenly spaced: row j of a term equals its first row + j · (its step)
        starts = np.cumsum([0] + sizes, dtype=np.int64)[:-1]
        ns = np.asarray(sizes, np.int64)
        step = np.ones_like(ns)
        two = ns > 1
        step[two] = where[starts[two] + 1] - where[starts[two]]
        j = np.arange(n_e) - np.repeat(starts, ns)
        even = np.logical_and.reduceat(where == np.repeat(where[starts], ns) + np.repeat(step, ns) * j, starts) \
            if n_e else np.zeros(0, bool)
        first, last = where[starts].tolist(), (where[starts] + step * (ns - 1)).tolist()
        step_l, even_l = step.tolist(), even.tolist()
        terms = []
        last_knot = slice(N, N + 1)
        for i, ((gi, name, c, kind), knots) in enumerate(zip(tab.specs, spec_knots)):
            o = int(starts[i])
            sl = slice(first[i], last[i] + 1, step_l[i]) if even_l[i] and step_l[i] > 0 else None
            kr = cost_groups[gi].rows if gi >= 0 else last_knot
            terms.append(_TermRows(name, c, kind, where[o:o + knots.size], knots, gi, sl,
                                   kr if isinstance(kr, slice) else None, tab.groups[gi]))
        return _Layout(E, KS.astype(np.int64), FK, tab.IX, tab.flink, tab.ff, terms, tab.compiled_names,
                       tab.covers_all, (n_e, tab.width), tab.CF, sources, tab.ncmax, tab.gives)


#: kind -> ``(columns a, b, per-knot tail, name)`` of a term's reference in its float rows, for the
#: kinds whose reference alone :meth:`CompiledCosts._pack` re-packs (FRAME_HEIGHT: the z column)
_REFERENCE_COLS = {
    STATE: lambda c, nx, nu: (1, 1 + nx, (nx,), "state reference"),
    STATE_LIE: lambda c, nx, nu: (1, 1 + nx, (nx,), "state reference"),
    CONTROL: lambda c, nx, nu: (1, 1 + nu, (nu,), "control reference"),
    FRAME_POSITION: lambda c, nx, nu: (1, 4, (3,), f"{c.name} target"),
    FRAME_VELOCITY: lambda c, nx, nu: (1, 4, (3,), f"{c.name} target"),
    COM_POSITION: lambda c, nx, nu: (1, 4, (3,), f"{c.name} target"),
    FRAME_HEIGHT: lambda c, nx, nu: (3, 4, (), f"{c.name} target"),
    CONTACT_FORCE: lambda c, nx, nu: (1, 1 + c.nr, (c.nr,), f"{c.name} reference"),
}


class CompiledCosts:
    """The compiled cost terms of a :class:`~solvers.problem.ShootingProblem` (running groups and
    terminal cost), and the Python remainder of each group."""

    # one trajectory's knots are split over the backend's threads only in slices this long: below,
    # waking the thread pool costs more than the slice
    MIN_KNOTS_PER_THREAD = 8

    #: the layouts of each problem's recent knot structures and the term tables they were made
    #: from (problem -> ({structure: layout}, {group costs: term table})): a re-phased horizon often
    #: returns to a structure it had (a gait's schedule repeats), and the layout is then reused
    #: instead of rebuilt; a new structure of the same phases' costs reuses their term table (only
    #: the knot columns are made anew); at most MAX_LAYOUTS of each per problem
    _layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    MAX_LAYOUTS = 128

    def __init__(self, problem, kin):
        self.problem = problem
        self.kin = kin
        self.model = problem.model
        self.signature = sig = self.signature_of(problem)
        key = self.layout_key(problem, sig)
        cache = self._layouts.get(problem)
        if cache is None:
            cache = self._layouts[problem] = ({}, {})
        lay = cache[0].get(key)
        if lay is None:
            if len(cache[0]) >= self.MAX_LAYOUTS:
                cache[0].clear()
            lay = cache[0][key] = _Layout.build(problem, kin, cache[1], sig)
        self.layout = lay
        self.E, self.KS, self.FK, self.IX, self.flink, self.ff = lay.E, lay.KS, lay.FK, lay.IX, lay.flink, lay.ff
        self.terms = [_Term(*t) for t in lay.terms]
        self.compiled_names = lay.compiled_names
        self.P = np.zeros(lay.P_shape)
        self._packed_at: tuple | None = None    # (cost_data_changes, cost scales) of the last packing
        #: every term of every group (and the terminal cost) is compiled: nothing on the Python path
        self.covers_all = lay.covers_all
        ndx, nu = problem.ndx, problem.nu
        # the outputs of a value-only call (one specialisation for both: same ranks and layout)
        self._dummy = (np.zeros(1), np.zeros((1, ndx)), np.zeros((1, nu)), np.zeros((1, ndx, ndx)),
                       np.zeros((1, nu, nu)), np.zeros(1), np.zeros((1, ndx)), np.zeros((1, ndx, ndx)))
        self._J1 = np.empty(1)
        self.CF, self.sources = lay.CF, lay.sources
        # contact forces and partials of calls without contact-force entries, or of value calls
        self._no_lam = np.zeros((1, 1, 1))
        self._no_dl = np.zeros((3, 1, 1, 1))
        self._no_lxu = np.zeros((1, ndx, nu))
        self._lam_buf: dict[int, np.ndarray] = {}          # per S: forces computed here
        self._dl_buf = None
        self._Jc: dict[tuple[int, int], np.ndarray] = {}   # per-slice totals of the parallel kernel

    @staticmethod
    def layout_key(problem, signature: tuple) -> tuple:
        """What a layout depends on: the terms (their objects: kinds, frames, index rows) and each
        group's knots, not the revision counter (``signature``: :meth:`signature_of`)."""
        return signature[1], signature[2], tuple([g.knots.tobytes() for g in problem.cost_groups])

    @staticmethod
    def signature_of(problem) -> tuple:
        """What the layout depends on: the knot structure and each group's term objects."""
        groups = [g.item for g in problem.cost_groups]
        groups.append(problem.terminal_cost)
        return (problem.revision, problem.horizon, tuple([_term_ids(c) for c in groups]))

    @property
    def empty(self) -> bool:
        return not self.terms

    def python_part(self, group: int, cost):
        """What of a group's cost (``group`` -1: the terminal cost) stays on the Python path: the
        cost itself, a CostSum of its remaining terms, or None when every term is compiled."""
        return _python_part(self.compiled_names, group, cost)

    # ------------------------------------------------------------ packing
    def _pack(self) -> None:
        """Re-pack the float rows of the terms whose reference, weights, term weight or knot
        scales were replaced since the last call."""
        p = self.problem
        scales = p.cost_scales
        # nothing a term's rows are packed from was replaced since the last packing (every such
        # replacement is counted, cost_data_changes): no term to look at (the second packing of an
        # MPC update, or a solve whose task moved no reference)
        changes = cost_data_changes()
        at = self._packed_at
        if at is not None and at[0] == changes and at[1] is scales:
            return
        nx, nu = p.nx, p.nu
        P = self.P
        for tm in self.terms:
            c = tm.cost
            # (the group costs are those the layout was made for: the signature says so)
            tw = tm.owner.terms[tm.name][1] if tm.name is not None else None
            ref = getattr(c, "_target" if tm.kind in _TARGETED else "_reference", None)
            sc = scales if tm.group >= 0 else None
            pf = tm.packed_from
            # identity of what the rows were packed from (explicit: this runs for every term once
            # per MPC update)
            if pf and pf[0] is tw and pf[1] is c._weights and pf[2] is ref and pf[3] is sc:
                continue
            src = (tw, c._weights, ref, sc)
            knots = tm.knots
            rows = tm.rows if tm.sl is None else tm.sl
            put = tm.put
            if pf and pf[0] is tw and pf[1] is c._weights and pf[3] is sc and tm.kind in _REFERENCE_COLS:
                # only the reference was replaced (a task moving its targets every update): its columns
                a, b, tail, label = _REFERENCE_COLS[tm.kind](c, nx, nu)
                if tm.kind == FRAME_HEIGHT:
                    P[rows, a] = per_knot(label, ref, knots, tail)
                else:
                    put(label, ref, knots, tail, a, b)
                tm.packed_from = src
                continue
            if tm.group >= 0:
                ks = scales[knots] if tm.kr is None else scales[tm.kr]
            if tw is None:
                s = ks if tm.group >= 0 else 1.0
            elif tw.ndim == 0:
                s = float(tw) * ks if tm.group >= 0 else float(tw)
            else:
                s = per_knot(f"weight of '{tm.name}'", tw, knots, ())
                if tm.group >= 0:
                    s = s * ks
            P[rows, 0] = s
            # per-knot data straight into P's rows when they are evenly spaced (a view; else a copy)
            if put is None:
                put = tm.put = self._putter(tm)
            wname = f"{c.name} weights"
            if tm.kind == STATE or tm.kind == STATE_LIE:
                put("state reference", ref, knots, (nx,), 1, 1 + nx)
                put(wname, c._weights, knots, (c.nr,), 1 + nx, 1 + nx + p.ndx)
            elif tm.kind == CONTROL:
                put("control reference", ref, knots, (nu,), 1, 1 + nu)
                put(wname, c._weights, knots, (c.nr,), 1 + nu, 1 + 2 * nu)
            elif tm.kind == FRAME_POSITION or tm.kind == FRAME_VELOCITY or tm.kind == COM_POSITION:
                put(f"{c.name} target", ref, knots, (3,), 1, 4)
                put(wname, c._weights, knots, (c.nr,), 4, 7)
            elif tm.kind == FRAME_ROTATION:
                P[rows, 1:10] = per_knot(f"{c.name} target", ref, knots, (3, 3)).reshape(-1, 9)   # row-major
                put(wname, c._weights, knots, (c.nr,), 10, 13)
            elif tm.kind == FRAME_HEIGHT:
                # target (0, 0, h), weights (0, 0, w): only the z row of the frame position counts
                P[rows, 1:3] = 0.0
                P[rows, 4:6] = 0.0
                P[rows, 3] = per_knot(f"{c.name} target", ref, knots, ())
                P[rows, 6] = per_knot(wname, c._weights, knots, (1,))[:, 0]
            elif tm.kind == CONTACT_FORCE:
                put(f"{c.name} reference", ref, knots, (c.nr,), 1, 1 + c.nr)
                put(wname, c._weights, knots, (c.nr,), 1 + c.nr, 1 + 2 * c.nr)
            elif tm.kind == FORCE_CONE:
                put(wname, c._weights, knots, (c.nr,), 1, 1 + c.nr)
            else:
                n = c.nr
                put(wname, c._weights, knots, (c.nr,), 1, 1 + n)
                P[rows, 1 + n:1 + 2 * n] = c.lower
                P[rows, 1 + 2 * n:1 + 3 * n] = c.upper
            tm.packed_from = src
        self._packed_at = (changes, scales)

    def _putter(self, tm: _Term):
        """``put(name, data, knots, tail, a, b)``: :func:`per_knot` rows of ``data`` into columns a:b of
        the term's rows of P, in place when they are evenly spaced (``tm.sl``: a view), as a slice
        of per-knot data when the knots are contiguous (``tm.kr``)."""
        P, sl, rows, kr = self.P, tm.sl, tm.rows, tm.kr
        kmax = int(tm.knots[-1]) if tm.knots.size else None      # a group's knots are sorted

        def put(name, data, knots, tail, a, b):
            if sl is not None and kr is not None and data.shape != tail and data.shape[0] > kmax:
                P[sl, a:b] = data[kr]
            elif sl is not None:
                per_knot(name, data, knots, tail, out=P[sl, a:b], kmax=kmax)
            else:
                P[rows, a:b] = per_knot(name, data, knots, tail, kmax=kmax)
        return put

    def _call(self, X, U, deriv: bool, J, outs, forces=None, lxu=None) -> None:
        self._pack()
        S, N1 = X.shape[0], X.shape[1]
        nt = max(1, min(self.kin.threads(), S if S > 1 else N1 // self.MIN_KNOTS_PER_THREAD))
        use_threads(nt)                     # 1: no worker woken
        Jc = self._Jc.get((nt, S))
        if Jc is None:
            Jc = self._Jc[(nt, S)] = np.empty((nt, S))
        kernel = _kernel()
        run_threaded_parts(kernel, nt, *self._args(X, U, deriv), Jc, *outs, *self._force_args(forces, lxu))
        if nt == 1:
            J[:] = Jc[0]
        else:
            Jc.sum(axis=0, out=J)

    def _args(self, X: np.ndarray, U: np.ndarray, deriv: bool) -> tuple:
        """The kernel's arguments up to ``deriv`` (then come the totals Jc, the eight outputs, the
        part index and count): the one place that lists them."""
        kin, m = self.kin, self.model
        return (kin.model_args, kin.joint_rows, self.flink, self.ff, m.nq, m.nv, self.E, self.KS, self.FK, self.P,
                self.IX, X, U, deriv)

    def _force_args(self, forces=None, lxu=None) -> tuple:
        """The kernel's contact-force arguments after the eight outputs (``CF, LAM, DL, koff, rlxu``):
        forces ``(lam, dl, koff)`` from :meth:`_forces_at` / :meth:`_partials_at`, None where no
        entry reads a force; lxu: the running knots' l_xu (derivatives), None otherwise."""
        lam, dl, koff = (self._no_lam, self._no_dl, 0) if forces is None else forces
        return self.CF, lam, dl, koff, self._no_lxu if lxu is None else lxu

    def _without_forces(self, what: str) -> None:
        if self.sources:
            raise ValueError(f"CompiledCosts.{what}: the problem has contact-force cost entries, whose forces come "
                             "from each call's contact solves; use add_derivatives / values")

    def refresh(self) -> None:
        """Re-pack the float rows of the terms whose references or weights were replaced (what
        :meth:`values` and :meth:`add_derivatives` do first; the caller of :meth:`prepared_derivatives`
        or :meth:`values_call` does it whenever a term may have changed)."""
        self._pack()

    def prepared_derivatives(self, xs: np.ndarray, us: np.ndarray, outs: tuple):
        """``run()``: :meth:`add_derivatives` along the fixed buffers xs (N+1, nx), us (N, nu) into the
        eight fixed output arrays ``outs`` (l, lx, lu, lxx, luu of the running knots, l, lx, lxx of
        the terminal one; zeroed by the caller), with the arguments bound once: a call is the thread
        count and one dispatch, without the packing check (:meth:`refresh`). The buffers' contents
        may change between calls, not the buffers."""
        self._without_forces("prepared_derivatives")
        kernel = _kernel()
        N1 = xs.shape[0]
        share = N1 // self.MIN_KNOTS_PER_THREAD
        args = self._args(xs[None], us[None], True)
        tail = self._force_args()
        partials: dict[int, np.ndarray] = {}     # thread count -> per-part totals (nt, 1)
        threads, parts = self.kin.threads, run_threaded_parts

        def run() -> None:
            nt = max(1, min(threads(), share))
            use_threads(nt)                 # 1: no worker woken
            Jc = partials.get(nt)
            if Jc is None:
                Jc = partials[nt] = np.empty((nt, 1))
            parts(kernel, nt, *args, Jc, *outs, *tail)
        return run

    def derivatives_call(self, xs: np.ndarray, us: np.ndarray, outs: tuple) -> tuple:
        """``(address, args, serial)``: :meth:`prepared_derivatives`' kernel call on one thread for
        another compiled loop (the solvers' fused derivative stage, :mod:`solvers.derivative_stage_numba`),
        to call by address as ``kernel(*args, 0, 1)`` (numba's calling convention): the derivatives
        along the fixed buffers xs (N+1, nx), us (N, nu) into the eight fixed outputs ``outs``
        (zeroed by the caller). ``threads()``: how many parts :meth:`prepared_derivatives` would
        run now (1: the calling thread); the caller then runs ``kernel(*args, c, nt)`` for ``c < nt``
        as it does (:func:`dynamics.kernels.threaded_batch.run_parts`, by address), after
        ``use_threads(nt)``. The caller re-packs (:meth:`refresh`) whenever a term may have changed.
        The kernel is compiled (or loaded) here, once."""
        from numba import config

        from dynamics.kernels.threaded_batch import kernel_address
        self._without_forces("derivatives_call")
        # (part c writes its totals into row c: a row per worker thread there can be)
        args = (*self._args(xs[None], us[None], True), np.empty((config.NUMBA_NUM_THREADS, 1)), *outs,
                *self._force_args())
        top, share = self.kin.threads, xs.shape[0] // self.MIN_KNOTS_PER_THREAD

        def threads() -> int:
            return max(1, min(top(), share))
        return kernel_address(_kernel(), (*args, 0, 1)), args, threads

    def values_call(self, X: np.ndarray, U: np.ndarray, Jc: np.ndarray) -> tuple:
        """``(address, args)``: the compiled kernel for another compiled loop over the same
        candidates X (S, N+1, nx), U (S, N, nu) (a rollout that scores its own candidates,
        :mod:`solvers.rollout_numba`), to call by address as ``kernel(*args, c, nt)`` (numba's
        calling convention, :func:`dynamics.kernels.threaded_batch.run_parts`'): part c of nt
        writes the values of the candidates ``c·S//nt <= s < (c+1)·S//nt`` into row c of Jc (S, S),
        zero elsewhere in the row, so the totals are the sum of Jc's first nt rows. The caller
        re-packs (:meth:`refresh`) whenever a term may have changed. The kernel is compiled (or
        loaded) here, once."""
        from dynamics.kernels.threaded_batch import kernel_address
        self._without_forces("values_call")
        args = (*self._args(X, U, False), Jc, *self._dummy, *self._force_args())
        return kernel_address(_kernel(), (*args, 0, 1)), args

    # ------------------------------------------------------------ evaluation
    def values(self, X: np.ndarray, U: np.ndarray, forces=None) -> np.ndarray:
        """Compiled part of the total cost of S trajectories X (S, N+1, nx), U (S, N, nu) (finite,
        C-contiguous float64): (S,). forces: the :class:`~solvers.problem_costs.RolloutContactForces`
        of the rollout that made X, U, read by the contact-force entries (else they solve the
        contact dynamics of their knots here)."""
        J = np.empty(X.shape[0])
        self._call(X, U, False, J, self._dummy, self._forces_at(X, U, forces) if self.sources else None)
        return J

    def add_derivatives(self, xs: np.ndarray, us: np.ndarray, run, term, solves=()) -> None:
        """Add the compiled terms' derivatives along xs (N+1, nx), us (N, nu) into the
        :class:`~solvers.costs.CostDerivatives` ``run`` (N knots, scaled by dt) and ``term`` (1).
        solves: the dynamics stage's contact solves at xs, us, ``[(rows, integrated model,
        ContactDynamicsBuffers)]``, whose forces and partials the contact-force entries read (the
        knots they do not cover are solved here)."""
        self._call(xs[None], us[None], True, self._J1,
                   (run.l, run.lx, run.lu, run.lxx, run.luu, term.l, term.lx, term.lxx),
                   self._partials_at(xs, us, solves) if self.sources else None, run.lxu)

    # ------------------------------------------------------------ contact forces
    def _gives(self, model, si: int) -> bool:
        """Whether a knot's integrated model solves source ``si``'s contact set under its actuation."""
        if model is None:
            return False
        memo = self.layout.gives
        hit = memo.get((id(model), si))
        if hit is None:
            src = self.sources[si]
            if len(memo) > 1024:
                memo.clear()
            hit = memo[(id(model), si)] = (model, getattr(model, "contacts", None) is src.contacts
                                           and src.actuation.same_as(model.actuation))
        return hit[1]

    def _forces_at(self, X, U, forces):
        """``(LAM (S, N, ≥ nc), DL dummy, 0)``: the rollout's forces when its knot models give every
        source's forces, else those solved here."""
        S, N = X.shape[0], X.shape[1] - 1
        if forces is not None and forces.lam.shape[0] >= S and forces.lam.shape[1] == N \
                and forces.lam.shape[2] >= self.layout.ncmax:
            models = forces.models
            memo = self.layout.models_give
            hit = memo.get(id(models))
            if hit is None:
                if len(memo) > 64:
                    memo.clear()
                hit = memo[id(models)] = (models, all(self._gives(models[t], si) for si, sr in enumerate(self.sources)
                                                      for t in sr.knots))
            if hit[1]:
                return np.ascontiguousarray(forces.lam), self._no_dl, 0
        lam = self._lam_buf.get(S)
        if lam is None:
            lam = self._lam_buf[S] = np.zeros((S, N, self.layout.ncmax))
        p, m = self.problem, self.model
        for sr in self.sources:
            k, nc = sr.knots, sr.contacts.nc
            x, u = X[:, k].reshape(-1, X.shape[2]), U[:, k].reshape(-1, U.shape[2])
            q, v = x[:, :m.nq], np.ascontiguousarray(x[:, m.nq:])
            tau = sr.actuation.torques(q, v, u)
            lam[:, k, :nc] = contact_dynamics_or_nan(p.backend, m, q, v, tau, sr.contacts)[1].reshape(S, k.size, nc)
        return lam, self._no_dl, 0

    def _partials_at(self, xs, us, solves):
        """``(LAM (1, ·, ≥ nc), DL (3, ·, ≥ nc, nv), koff)`` along one trajectory: the buffers of the
        solve that covers every source's knots as they are (rows offset by koff), else copied from
        the solves into knot rows, the knots no solve covers solved here."""
        srcs = self.sources
        if len(srcs) == 1 and len(solves) >= 1:
            sr = srcs[0]
            for r, dyn, buf in solves:
                # (a solve on non-contiguous knots, r an index array, is copied below)
                if isinstance(r, slice) and r.start <= sr.knots[0] and sr.knots[-1] < r.stop \
                        and self._gives(dyn, 0) and buf.lam.shape[0] == r.stop - r.start:
                    return buf.lam[None], buf.dl, int(r.start)
        N, nv, ncm = us.shape[0], self.model.nv, self.layout.ncmax
        if self._dl_buf is None:
            self._dl_buf = (np.zeros((1, N, ncm)), np.zeros((3, N, ncm, nv)))
        lam, dl = self._dl_buf
        m, p = self.model, self.problem
        for si, sr in enumerate(srcs):
            nc = sr.contacts.nc
            covered = np.zeros(N, bool)
            for r, dyn, buf in solves:
                n = r.stop - r.start if isinstance(r, slice) else r.size
                if self._gives(dyn, si) and buf.lam.shape[0] == n:
                    lam[0, r, :nc] = buf.lam
                    dl[:, r, :nc] = buf.dl
                    covered[r] = True
            k = sr.knots[~covered[sr.knots]]
            if k.size:
                q, v = xs[k, :m.nq], np.ascontiguousarray(xs[k, m.nq:])
                (_, lk), d = p.backend.contact_dynamics_derivatives(m, q, v, sr.actuation.torques(q, v, us[k]),
                                                                    sr.contacts, return_values=True)
                lam[0, k, :nc] = lk
                dl[0, k, :nc], dl[1, k, :nc], dl[2, k, :nc] = d[3], d[4], d[5]
        return lam, dl, 0
