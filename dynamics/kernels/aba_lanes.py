"""Compiled Articulated Body Algorithm over SIMD lanes: ``LANES`` states at once, the state index last.

:mod:`.aba` runs one state at a time; its per-link updates are a few dozen scalar operations each,
which LLVM cannot vectorise. Here every per-state quantity is one row of ``LANES`` lanes of a single
flat workspace array (row r, lane l at ``ws[r * LANES + l]``), and every per-link update is a loop
over the lanes around straight-line code, which LLVM's loop vectoriser turns into SIMD
instructions over the states. Three things make it vectorise: one array whose rows are a
compile-time constant apart (so LLVM proves that two rows never overlap, where a run-time row
length would need one run-time alias check per pair of rows, more than it allows); each large
loop reading and writing its own link's block only (what it needs from the parent or the dof's
rows is copied into the block by a short loop first, and its contributions to the parent are
added by one short loop per row afterwards); and no libm call inside a loop. The algorithm is
:mod:`.aba`'s (Featherstone RBDA Table 7.1 in world coordinates at link 0's origin, armature added
to ``D``), with two differences of form:

* the articulated inertias are stored as the packed upper triangle of the symmetric 6x6 (21 rows);
* the joint rotation's half-angle sine and cosine are polynomials (Cody–Waite reduction by π/2,
  then the Taylor series of sin and cos to degree 17 and 18 on |r| ≤ π/4, truncation error below
  1e-19), because a call to libm's ``sin`` inside the lane loop would keep it scalar. They agree
  with libm to a few units in the last place for |θ| < 1e9 rad; NaN stays NaN.

Hinge (unit axis, as MuJoCo normalises) and slide joints only — one dof per link, ``nq = nv``: arms
and other fixed-base chains (:func:`lanes_supported`); every other model keeps :mod:`.aba`. No
external forces. Used by the sampling planners' rollouts (:mod:`solvers.rollout_numba`), whose
thousands of states per knot fill the lanes; checked against the numpy reference in
``tests/dynamics/kernels/test_aba_lanes.py``.

Workspace rows (:func:`lane_rows`): q (nq), v (nv), tau (nv), qdd (nv), two rows of sin/cos scratch,
12 rows of one link's parent placement, 6 rows of zeros, then ``LINK_ROWS`` rows per link (world
rotation, origin, joint column, velocity, articulated inertia, U, D⁻¹, bias acceleration, bias
force, acceleration, and the copies above).
"""

from __future__ import annotations

import numpy as np

from .jit import jit
from .packing import (
    J_HINGE,
    J_SLIDE,
    LF_ANCHOR,
    LF_ARM,
    LF_AXIS,
    LF_P0,
    LF_QPOS0,
    LF_R0,
    LF_ST,
    LI_DOFADR,
    LI_NV,
    LI_PARENT,
    LI_QADR,
    LI_TYPE,
)

#: states computed together: a compile-time constant of every kernel here (32 = four AVX-512 or
#: eight AVX2 vectors per row)
LANES = 32

# rows of one link's block: world rotation (9, row-major), origin (3), joint column J (6), velocity
# (6), articulated inertia (21: the upper triangle row by row, (0,0)..(0,5), (1,1)..(1,5), ..., (5,5)),
# U = I^A J (6), D^-1 (1), c (6), p^A (6), a (6)
OR, OP, JC, OV, IA, UU, DI, CB, PA, OA = 0, 9, 12, 18, 24, 45, 51, 52, 58, 64
# and copies of what a link's big lane loops read from elsewhere, so that those loops touch only
# their own block (LLVM vectorises a loop over one block without run-time alias checks, and gives
# up on a loop that also reads other rows): the parent's velocity, then its acceleration (6); the
# dof's v, then τ (1); u (1); q̈ (1)
PX, VD, UD, QA = 70, 76, 77, 78
LINK_ROWS = 79

# Cody–Waite split of π/2 (33 + 33 + 53 bits) and 2/π
_PIO2_1 = 1.5707963267341256
_PIO2_2 = 6.077100506303966e-11
_PIO2_3 = 2.0222662487959506e-21
_TWO_OVER_PI = 0.6366197723675814


def lanes_supported(li: np.ndarray, lf: np.ndarray) -> bool:
    """Whether the packed model (:mod:`.packing`) has only hinge joints about unit axes and slide
    joints, one per link: what :func:`aba_lanes` computes."""
    if li.shape[0] == 0:
        return False
    types = li[:, LI_TYPE]
    if not np.all((li[:, LI_NV] == 1) & ((types == J_HINGE) | (types == J_SLIDE))):
        return False
    axes = lf[types == J_HINGE, LF_AXIS:LF_AXIS + 3]
    return bool(np.all(np.abs(np.einsum("ij,ij->i", axes, axes) - 1.0) < 1e-12))


def lane_rows(nlinks: int, nv: int) -> tuple[int, ...]:
    """``(q, v, tau, qdd, sincos, placement, zeros, links, total)``: the first row of each block of
    the workspace of :func:`aba_lanes` for a model of ``nlinks`` links and nv = nq dofs; ``total``
    is the number of rows (callers may append their own rows after it). Row r, lane l is
    ``ws[r * LANES + l]``."""
    q = 0
    v = q + nv
    tau = v + nv
    qdd = tau + nv
    sc = qdd + nv
    rp = sc + 2
    z = rp + 12
    links = z + 6
    return q, v, tau, qdd, sc, rp, z, links, links + nlinks * LINK_ROWS


@jit
def _half_angle_sincos(src, dst, q0):
    """``dst[:LANES]`` = sin(θ/2) and ``dst[LANES:]`` = cos(θ/2) for θ = ``src`` − q0 (LANES,), lane by
    lane, without a libm call (module docstring)."""
    for l in range(LANES):
        x = 0.5 * (src[l] - q0)
        n = np.floor(x * _TWO_OVER_PI + 0.5)
        n = n if abs(n) < 1e9 else 0.0
        r = ((x - n * _PIO2_1) - n * _PIO2_2) - n * _PIO2_3
        z = r * r
        sp = r * (1.0 + z * (-1.0 / 6 + z * (1.0 / 120 + z * (-1.0 / 5040 + z * (1.0 / 362880 + z * (
            -2.505210838544172e-08 + z * (1.6059043836821613e-10 + z * (
                -7.647163731819816e-13 + z * 2.8114572543455206e-15))))))))
        cp = 1.0 + z * (-0.5 + z * (1.0 / 24 + z * (-1.0 / 720 + z * (1.0 / 40320 + z * (
            -2.755731922398589e-07 + z * (2.08767569878681e-09 + z * (
                -1.1470745597729725e-11 + z * (4.779477332387385e-14 - z * 1.5619206968586225e-16))))))))
        k = np.int64(n) & 3          # quadrant: sin(r + kπ/2), cos(r + kπ/2)
        ss = cp if (k & 1) == 1 else sp
        cc = sp if (k & 1) == 1 else cp
        dst[l] = -ss if (k & 2) == 2 else ss
        dst[LANES + l] = -cc if ((k + 1) & 2) == 2 else cc


@jit
def aba_lanes(li, lf, gv, ws, rows):
    """``qdd`` of the ``LANES`` states in the lanes of ``ws`` (R * LANES,): q, v and tau in the rows
    that start at ``rows[0]``, ``rows[1]``, ``rows[2]``, qdd into those at ``rows[3]``
    (:func:`lane_rows`); the model has hinge and slide joints only (:func:`lanes_supported`)."""
    Q, V, T, A, SC, RP, Z, LB = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7]
    # every loop indexes views at constant row offsets (``view[row * LANES + l]``, never negative), so
    # LLVM sees affine, in-bounds addresses it can vectorise
    sc = ws[SC * LANES:(SC + 2) * LANES]
    rp = ws[RP * LANES:(RP + 12) * LANES]
    b0 = ws[LB * LANES:(LB + LINK_ROWS) * LANES]
    L = li.shape[0]
    for k in range(6):
        for l in range(LANES):
            ws[(Z + k) * LANES + l] = 0.0
    for i in range(L):
        lam = li[i, LI_PARENT]
        qa = li[i, LI_QADR]
        a0, a1, a2 = lf[i, LF_AXIS], lf[i, LF_AXIS + 1], lf[i, LF_AXIS + 2]
        q0 = lf[i, LF_QPOS0]
        qrow = ws[(Q + qa) * LANES:(Q + qa + 1) * LANES]
        b00, b01, b02 = lf[i, LF_R0], lf[i, LF_R0 + 1], lf[i, LF_R0 + 2]
        b10, b11, b12 = lf[i, LF_R0 + 3], lf[i, LF_R0 + 4], lf[i, LF_R0 + 5]
        b20, b21, b22 = lf[i, LF_R0 + 6], lf[i, LF_R0 + 7], lf[i, LF_R0 + 8]
        e0, e1, e2 = lf[i, LF_P0], lf[i, LF_P0 + 1], lf[i, LF_P0 + 2]
        if li[i, LI_TYPE] == J_HINGE:
            c0, c1, c2 = lf[i, LF_ANCHOR], lf[i, LF_ANCHOR + 1], lf[i, LF_ANCHOR + 2]
            _half_angle_sincos(qrow, sc, q0)
            x00 = -a2 * a2 - a1 * a1
            x11 = -a2 * a2 - a0 * a0
            x22 = -a1 * a1 - a0 * a0
            for l in range(LANES):
                sh = sc[l]
                ch = sc[LANES + l]
                s = 2.0 * sh * ch
                cm = 2.0 * sh * sh
                r00 = 1.0 + cm * x00
                r11 = 1.0 + cm * x11
                r22 = 1.0 + cm * x22
                r01 = s * -a2 + cm * (a1 * a0)
                r02 = s * a1 + cm * (a2 * a0)
                r10 = s * a2 + cm * (a0 * a1)
                r12 = s * -a0 + cm * (a2 * a1)
                r20 = s * -a1 + cm * (a0 * a2)
                r21 = s * a0 + cm * (a1 * a2)
                pj0 = c0 - (r00 * c0 + r01 * c1 + r02 * c2)
                pj1 = c1 - (r10 * c0 + r11 * c1 + r12 * c2)
                pj2 = c2 - (r20 * c0 + r21 * c1 + r22 * c2)
                rp[(0) * LANES + l] = b00 * r00 + b01 * r10 + b02 * r20
                rp[(1) * LANES + l] = b00 * r01 + b01 * r11 + b02 * r21
                rp[(2) * LANES + l] = b00 * r02 + b01 * r12 + b02 * r22
                rp[(3) * LANES + l] = b10 * r00 + b11 * r10 + b12 * r20
                rp[(4) * LANES + l] = b10 * r01 + b11 * r11 + b12 * r21
                rp[(5) * LANES + l] = b10 * r02 + b11 * r12 + b12 * r22
                rp[(6) * LANES + l] = b20 * r00 + b21 * r10 + b22 * r20
                rp[(7) * LANES + l] = b20 * r01 + b21 * r11 + b22 * r21
                rp[(8) * LANES + l] = b20 * r02 + b21 * r12 + b22 * r22
                rp[(9) * LANES + l] = e0 + (b00 * pj0 + b01 * pj1 + b02 * pj2)
                rp[(10) * LANES + l] = e1 + (b10 * pj0 + b11 * pj1 + b12 * pj2)
                rp[(11) * LANES + l] = e2 + (b20 * pj0 + b21 * pj1 + b22 * pj2)
        else:
            for l in range(LANES):
                d = qrow[l] - q0
                rp[(0) * LANES + l] = b00
                rp[(1) * LANES + l] = b01
                rp[(2) * LANES + l] = b02
                rp[(3) * LANES + l] = b10
                rp[(4) * LANES + l] = b11
                rp[(5) * LANES + l] = b12
                rp[(6) * LANES + l] = b20
                rp[(7) * LANES + l] = b21
                rp[(8) * LANES + l] = b22
                rp[(9) * LANES + l] = e0 + (b00 * d * a0 + b01 * d * a1 + b02 * d * a2)
                rp[(10) * LANES + l] = e1 + (b10 * d * a0 + b11 * d * a1 + b12 * d * a2)
                rp[(11) * LANES + l] = e2 + (b20 * d * a0 + b21 * d * a1 + b22 * d * a2)
        K = LB + i * LINK_ROWS
        bk = ws[K * LANES:(K + LINK_ROWS) * LANES]
        if lam < 0:
            for k in range(12):
                for l in range(LANES):
                    bk[(k) * LANES + l] = rp[(k) * LANES + l]
        else:
            P = LB + lam * LINK_ROWS
            bp = ws[P * LANES:(P + LINK_ROWS) * LANES]
            for r in range(3):
                for l in range(LANES):
                    g0 = bp[(OR + 3 * r) * LANES + l]
                    g1 = bp[(OR + 3 * r + 1) * LANES + l]
                    g2 = bp[(OR + 3 * r + 2) * LANES + l]
                    bk[(OP + r) * LANES + l] = bp[(OP + r) * LANES + l] + (g0 * rp[(9) * LANES + l] + g1 * rp[(10) * LANES + l]
                                                             + g2 * rp[(11) * LANES + l])
                    bk[(OR + 3 * r) * LANES + l] = g0 * rp[l] + g1 * rp[(3) * LANES + l] + g2 * rp[(6) * LANES + l]
                    bk[(OR + 3 * r + 1) * LANES + l] = g0 * rp[(1) * LANES + l] + g1 * rp[(4) * LANES + l] + g2 * rp[(7) * LANES + l]
                    bk[(OR + 3 * r + 2) * LANES + l] = g0 * rp[(2) * LANES + l] + g1 * rp[(5) * LANES + l] + g2 * rp[(8) * LANES + l]
    # origin at link 0
    for i in range(L - 1, -1, -1):
        K = LB + i * LINK_ROWS
        bk = ws[K * LANES:(K + LINK_ROWS) * LANES]
        for r in range(3):
            for l in range(LANES):
                bk[(OP + r) * LANES + l] -= b0[(OP + r) * LANES + l]
    # columns, velocities, inertias, bias
    for i in range(L):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        K = LB + i * LINK_ROWS
        bk = ws[K * LANES:(K + LINK_ROWS) * LANES]
        P = LB + lam * LINK_ROWS
        ws_v = ws[(V + d0) * LANES:(V + d0 + 1) * LANES]
        s0, s1, s2, s3, s4, s5 = (lf[i, LF_ST], lf[i, LF_ST + 1], lf[i, LF_ST + 2], lf[i, LF_ST + 3],
                                  lf[i, LF_ST + 4], lf[i, LF_ST + 5])
        m = lf[i, 0]
        y1, y2, y3 = lf[i, 1], lf[i, 2], lf[i, 3]
        i00, i01, i02 = lf[i, 4], lf[i, 5], lf[i, 6]
        i10, i11, i12 = lf[i, 7], lf[i, 8], lf[i, 9]
        i20, i21, i22 = lf[i, 10], lf[i, 11], lf[i, 12]
        Pv = Z if lam < 0 else P + OV
        pv = ws[Pv * LANES:(Pv + 6) * LANES]
        for k in range(6):
            for l in range(LANES):
                bk[(PX + k) * LANES + l] = pv[k * LANES + l]
        for l in range(LANES):
            bk[(VD) * LANES + l] = ws_v[l]
        for l in range(LANES):
            g00, g01, g02 = bk[(OR) * LANES + l], bk[(OR + 1) * LANES + l], bk[(OR + 2) * LANES + l]
            g10, g11, g12 = bk[(OR + 3) * LANES + l], bk[(OR + 4) * LANES + l], bk[(OR + 5) * LANES + l]
            g20, g21, g22 = bk[(OR + 6) * LANES + l], bk[(OR + 7) * LANES + l], bk[(OR + 8) * LANES + l]
            p0, p1, p2 = bk[(OP) * LANES + l], bk[(OP + 1) * LANES + l], bk[(OP + 2) * LANES + l]
            ja0 = g00 * s3 + g01 * s4 + g02 * s5
            ja1 = g10 * s3 + g11 * s4 + g12 * s5
            ja2 = g20 * s3 + g21 * s4 + g22 * s5
            jl0 = g00 * s0 + g01 * s1 + g02 * s2 + p1 * ja2 - p2 * ja1
            jl1 = g10 * s0 + g11 * s1 + g12 * s2 + p2 * ja0 - p0 * ja2
            jl2 = g20 * s0 + g21 * s1 + g22 * s2 + p0 * ja1 - p1 * ja0
            bk[(JC) * LANES + l] = jl0
            bk[(JC + 1) * LANES + l] = jl1
            bk[(JC + 2) * LANES + l] = jl2
            bk[(JC + 3) * LANES + l] = ja0
            bk[(JC + 4) * LANES + l] = ja1
            bk[(JC + 5) * LANES + l] = ja2
            vd = bk[(VD) * LANES + l]
            vj0, vj1, vj2, vj3, vj4, vj5 = jl0 * vd, jl1 * vd, jl2 * vd, ja0 * vd, ja1 * vd, ja2 * vd
            w0 = bk[(PX + 0) * LANES + l] + vj0
            w1 = bk[(PX + 1) * LANES + l] + vj1
            w2 = bk[(PX + 2) * LANES + l] + vj2
            w3 = bk[(PX + 3) * LANES + l] + vj3
            w4 = bk[(PX + 4) * LANES + l] + vj4
            w5 = bk[(PX + 5) * LANES + l] + vj5
            bk[(OV) * LANES + l] = w0
            bk[(OV + 1) * LANES + l] = w1
            bk[(OV + 2) * LANES + l] = w2
            bk[(OV + 3) * LANES + l] = w3
            bk[(OV + 4) * LANES + l] = w4
            bk[(OV + 5) * LANES + l] = w5
            bk[(CB) * LANES + l] = w4 * vj2 - w5 * vj1 + w1 * vj5 - w2 * vj4
            bk[(CB + 1) * LANES + l] = w5 * vj0 - w3 * vj2 + w2 * vj3 - w0 * vj5
            bk[(CB + 2) * LANES + l] = w3 * vj1 - w4 * vj0 + w0 * vj4 - w1 * vj3
            bk[(CB + 3) * LANES + l] = w4 * vj5 - w5 * vj4
            bk[(CB + 4) * LANES + l] = w5 * vj3 - w3 * vj5
            bk[(CB + 5) * LANES + l] = w3 * vj4 - w4 * vj3
            hr0 = g00 * y1 + g01 * y2 + g02 * y3
            hr1 = g10 * y1 + g11 * y2 + g12 * y3
            hr2 = g20 * y1 + g21 * y2 + g22 * y3
            h0 = m * p0 + hr0
            h1 = m * p1 + hr1
            h2 = m * p2 + hr2
            pp = p0 * p0 + p1 * p1 + p2 * p2
            ph = p0 * hr0 + p1 * hr1 + p2 * hr2
            diag = m * pp + 2.0 * ph
            # R Io rows
            t00 = g00 * i00 + g01 * i10 + g02 * i20
            t01 = g00 * i01 + g01 * i11 + g02 * i21
            t02 = g00 * i02 + g01 * i12 + g02 * i22
            t10 = g10 * i00 + g11 * i10 + g12 * i20
            t11 = g10 * i01 + g11 * i11 + g12 * i21
            t12 = g10 * i02 + g11 * i12 + g12 * i22
            t20 = g20 * i00 + g21 * i10 + g22 * i20
            t21 = g20 * i01 + g21 * i11 + g22 * i21
            t22 = g20 * i02 + g21 * i12 + g22 * i22
            o00 = t00 * g00 + t01 * g01 + t02 * g02 - m * p0 * p0 - hr0 * p0 - p0 * hr0 + diag
            o01 = t00 * g10 + t01 * g11 + t02 * g12 - m * p0 * p1 - hr0 * p1 - p0 * hr1
            o02 = t00 * g20 + t01 * g21 + t02 * g22 - m * p0 * p2 - hr0 * p2 - p0 * hr2
            o10 = t10 * g00 + t11 * g01 + t12 * g02 - m * p1 * p0 - hr1 * p0 - p1 * hr0
            o11 = t10 * g10 + t11 * g11 + t12 * g12 - m * p1 * p1 - hr1 * p1 - p1 * hr1 + diag
            o12 = t10 * g20 + t11 * g21 + t12 * g22 - m * p1 * p2 - hr1 * p2 - p1 * hr2
            o20 = t20 * g00 + t21 * g01 + t22 * g02 - m * p2 * p0 - hr2 * p0 - p2 * hr0
            o21 = t20 * g10 + t21 * g11 + t22 * g12 - m * p2 * p1 - hr2 * p1 - p2 * hr1
            o22 = t20 * g20 + t21 * g21 + t22 * g22 - m * p2 * p2 - hr2 * p2 - p2 * hr2 + diag
            f0 = m * w0 + w4 * h2 - w5 * h1
            f1 = m * w1 + w5 * h0 - w3 * h2
            f2 = m * w2 + w3 * h1 - w4 * h0
            f3 = h1 * w2 - h2 * w1 + o00 * w3 + o01 * w4 + o02 * w5
            f4 = h2 * w0 - h0 * w2 + o10 * w3 + o11 * w4 + o12 * w5
            f5 = h0 * w1 - h1 * w0 + o20 * w3 + o21 * w4 + o22 * w5
            bk[(PA) * LANES + l] = w4 * f2 - w5 * f1
            bk[(PA + 1) * LANES + l] = w5 * f0 - w3 * f2
            bk[(PA + 2) * LANES + l] = w3 * f1 - w4 * f0
            bk[(PA + 3) * LANES + l] = w1 * f2 - w2 * f1 + w4 * f5 - w5 * f4
            bk[(PA + 4) * LANES + l] = w2 * f0 - w0 * f2 + w5 * f3 - w3 * f5
            bk[(PA + 5) * LANES + l] = w0 * f1 - w1 * f0 + w3 * f4 - w4 * f3
            bk[(IA + 0) * LANES + l] = m
            bk[(IA + 1) * LANES + l] = 0.0
            bk[(IA + 2) * LANES + l] = 0.0
            bk[(IA + 3) * LANES + l] = 0.0
            bk[(IA + 4) * LANES + l] = h2
            bk[(IA + 5) * LANES + l] = -h1
            bk[(IA + 6) * LANES + l] = m
            bk[(IA + 7) * LANES + l] = 0.0
            bk[(IA + 8) * LANES + l] = -h2
            bk[(IA + 9) * LANES + l] = 0.0
            bk[(IA + 10) * LANES + l] = h0
            bk[(IA + 11) * LANES + l] = m
            bk[(IA + 12) * LANES + l] = h1
            bk[(IA + 13) * LANES + l] = -h0
            bk[(IA + 14) * LANES + l] = 0.0
            bk[(IA + 15) * LANES + l] = o00
            bk[(IA + 16) * LANES + l] = o01
            bk[(IA + 17) * LANES + l] = o02
            bk[(IA + 18) * LANES + l] = o11
            bk[(IA + 19) * LANES + l] = o12
            bk[(IA + 20) * LANES + l] = o22
    # backward: articulated inertias (packed symmetric) and bias forces. Each link's lane loop reads
    # and writes its own block only; it leaves its contributions to the parent in its own I^A and p^A
    # rows (not needed afterwards), which one short loop per row then adds to the parent's.
    for i in range(L - 1, -1, -1):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        arm = lf[i, LF_ARM]
        K = LB + i * LINK_ROWS
        bk = ws[K * LANES:(K + LINK_ROWS) * LANES]
        ws_t = ws[(T + d0) * LANES:(T + d0 + 1) * LANES]
        for l in range(LANES):
            bk[(VD) * LANES + l] = ws_t[l]
        for l in range(LANES):
            j0, j1, j2 = bk[(JC) * LANES + l], bk[(JC + 1) * LANES + l], bk[(JC + 2) * LANES + l]
            j3, j4, j5 = bk[(JC + 3) * LANES + l], bk[(JC + 4) * LANES + l], bk[(JC + 5) * LANES + l]
            ia0 = bk[(IA + 0) * LANES + l]
            ia1 = bk[(IA + 1) * LANES + l]
            ia2 = bk[(IA + 2) * LANES + l]
            ia3 = bk[(IA + 3) * LANES + l]
            ia4 = bk[(IA + 4) * LANES + l]
            ia5 = bk[(IA + 5) * LANES + l]
            ia6 = bk[(IA + 6) * LANES + l]
            ia7 = bk[(IA + 7) * LANES + l]
            ia8 = bk[(IA + 8) * LANES + l]
            ia9 = bk[(IA + 9) * LANES + l]
            ia10 = bk[(IA + 10) * LANES + l]
            ia11 = bk[(IA + 11) * LANES + l]
            ia12 = bk[(IA + 12) * LANES + l]
            ia13 = bk[(IA + 13) * LANES + l]
            ia14 = bk[(IA + 14) * LANES + l]
            ia15 = bk[(IA + 15) * LANES + l]
            ia16 = bk[(IA + 16) * LANES + l]
            ia17 = bk[(IA + 17) * LANES + l]
            ia18 = bk[(IA + 18) * LANES + l]
            ia19 = bk[(IA + 19) * LANES + l]
            ia20 = bk[(IA + 20) * LANES + l]
            u0 = ia0 * j0 + ia1 * j1 + ia2 * j2 + ia3 * j3 + ia4 * j4 + ia5 * j5
            u1 = ia1 * j0 + ia6 * j1 + ia7 * j2 + ia8 * j3 + ia9 * j4 + ia10 * j5
            u2 = ia2 * j0 + ia7 * j1 + ia11 * j2 + ia12 * j3 + ia13 * j4 + ia14 * j5
            u3 = ia3 * j0 + ia8 * j1 + ia12 * j2 + ia15 * j3 + ia16 * j4 + ia17 * j5
            u4 = ia4 * j0 + ia9 * j1 + ia13 * j2 + ia16 * j3 + ia18 * j4 + ia19 * j5
            u5 = ia5 * j0 + ia10 * j1 + ia14 * j2 + ia17 * j3 + ia19 * j4 + ia20 * j5
            bk[(UU + 0) * LANES + l] = u0
            bk[(UU + 1) * LANES + l] = u1
            bk[(UU + 2) * LANES + l] = u2
            bk[(UU + 3) * LANES + l] = u3
            bk[(UU + 4) * LANES + l] = u4
            bk[(UU + 5) * LANES + l] = u5
            di = 1.0 / (arm + (j0 * u0 + j1 * u1 + j2 * u2 + j3 * u3 + j4 * u4 + j5 * u5))
            bk[(DI) * LANES + l] = di
            pa0 = bk[(PA + 0) * LANES + l]
            pa1 = bk[(PA + 1) * LANES + l]
            pa2 = bk[(PA + 2) * LANES + l]
            pa3 = bk[(PA + 3) * LANES + l]
            pa4 = bk[(PA + 4) * LANES + l]
            pa5 = bk[(PA + 5) * LANES + l]
            ud = bk[(VD) * LANES + l] - (j0 * pa0 + j1 * pa1 + j2 * pa2 + j3 * pa3 + j4 * pa4 + j5 * pa5)
            bk[(UD) * LANES + l] = ud
            c0 = bk[(CB + 0) * LANES + l]
            c1 = bk[(CB + 1) * LANES + l]
            c2 = bk[(CB + 2) * LANES + l]
            c3 = bk[(CB + 3) * LANES + l]
            c4 = bk[(CB + 4) * LANES + l]
            c5 = bk[(CB + 5) * LANES + l]
            wk = (ud - (u0 * c0 + u1 * c1 + u2 * c2 + u3 * c3 + u4 * c4 + u5 * c5)) * di
            # contributions to the parent: p^A + U D^-1 (u - U^T c) + I^A c, and I^A - U D^-1 U^T
            bk[(PA + 0) * LANES + l] = pa0 + u0 * wk + (ia0 * c0 + ia1 * c1 + ia2 * c2 + ia3 * c3 + ia4 * c4 + ia5 * c5)
            bk[(PA + 1) * LANES + l] = pa1 + u1 * wk + (ia1 * c0 + ia6 * c1 + ia7 * c2 + ia8 * c3 + ia9 * c4 + ia10 * c5)
            bk[(PA + 2) * LANES + l] = pa2 + u2 * wk + (ia2 * c0 + ia7 * c1 + ia11 * c2 + ia12 * c3 + ia13 * c4 + ia14 * c5)
            bk[(PA + 3) * LANES + l] = pa3 + u3 * wk + (ia3 * c0 + ia8 * c1 + ia12 * c2 + ia15 * c3 + ia16 * c4 + ia17 * c5)
            bk[(PA + 4) * LANES + l] = pa4 + u4 * wk + (ia4 * c0 + ia9 * c1 + ia13 * c2 + ia16 * c3 + ia18 * c4 + ia19 * c5)
            bk[(PA + 5) * LANES + l] = pa5 + u5 * wk + (ia5 * c0 + ia10 * c1 + ia14 * c2 + ia17 * c3 + ia19 * c4 + ia20 * c5)
            e0 = u0 * di
            e1 = u1 * di
            e2 = u2 * di
            e3 = u3 * di
            e4 = u4 * di
            e5 = u5 * di
            bk[(IA + 0) * LANES + l] = ia0 - e0 * u0
            bk[(IA + 1) * LANES + l] = ia1 - e0 * u1
            bk[(IA + 2) * LANES + l] = ia2 - e0 * u2
            bk[(IA + 3) * LANES + l] = ia3 - e0 * u3
            bk[(IA + 4) * LANES + l] = ia4 - e0 * u4
            bk[(IA + 5) * LANES + l] = ia5 - e0 * u5
            bk[(IA + 6) * LANES + l] = ia6 - e1 * u1
            bk[(IA + 7) * LANES + l] = ia7 - e1 * u2
            bk[(IA + 8) * LANES + l] = ia8 - e1 * u3
            bk[(IA + 9) * LANES + l] = ia9 - e1 * u4
            bk[(IA + 10) * LANES + l] = ia10 - e1 * u5
            bk[(IA + 11) * LANES + l] = ia11 - e2 * u2
            bk[(IA + 12) * LANES + l] = ia12 - e2 * u3
            bk[(IA + 13) * LANES + l] = ia13 - e2 * u4
            bk[(IA + 14) * LANES + l] = ia14 - e2 * u5
            bk[(IA + 15) * LANES + l] = ia15 - e3 * u3
            bk[(IA + 16) * LANES + l] = ia16 - e3 * u4
            bk[(IA + 17) * LANES + l] = ia17 - e3 * u5
            bk[(IA + 18) * LANES + l] = ia18 - e4 * u4
            bk[(IA + 19) * LANES + l] = ia19 - e4 * u5
            bk[(IA + 20) * LANES + l] = ia20 - e5 * u5
        if lam < 0:
            continue
        P = LB + lam * LINK_ROWS
        bp = ws[P * LANES:(P + LINK_ROWS) * LANES]
        for k in range(6):
            for l in range(LANES):
                bp[(PA + k) * LANES + l] += bk[(PA + k) * LANES + l]
        for k in range(21):
            for l in range(LANES):
                bp[(IA + k) * LANES + l] += bk[(IA + k) * LANES + l]
    # forward: accelerations (the parent's copied into the block first)
    for i in range(L):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        K = LB + i * LINK_ROWS
        bk = ws[K * LANES:(K + LINK_ROWS) * LANES]
        ws_a = ws[(A + d0) * LANES:(A + d0 + 1) * LANES]
        if lam < 0:
            for r in range(6):
                gr = gv[r] if r < 3 else 0.0
                for l in range(LANES):
                    bk[(PX + r) * LANES + l] = -gr
        else:
            P = LB + lam * LINK_ROWS
            bp = ws[P * LANES:(P + LINK_ROWS) * LANES]
            for r in range(6):
                for l in range(LANES):
                    bk[(PX + r) * LANES + l] = bp[(OA + r) * LANES + l]
        for l in range(LANES):
            a0 = bk[(PX + 0) * LANES + l] + bk[(CB + 0) * LANES + l]
            a1 = bk[(PX + 1) * LANES + l] + bk[(CB + 1) * LANES + l]
            a2 = bk[(PX + 2) * LANES + l] + bk[(CB + 2) * LANES + l]
            a3 = bk[(PX + 3) * LANES + l] + bk[(CB + 3) * LANES + l]
            a4 = bk[(PX + 4) * LANES + l] + bk[(CB + 4) * LANES + l]
            a5 = bk[(PX + 5) * LANES + l] + bk[(CB + 5) * LANES + l]
            s = bk[(UD) * LANES + l] - (bk[(UU + 0) * LANES + l] * a0 + bk[(UU + 1) * LANES + l] * a1 + bk[(UU + 2) * LANES + l] * a2 + bk[(UU + 3) * LANES + l] * a3 + bk[(UU + 4) * LANES + l] * a4 + bk[(UU + 5) * LANES + l] * a5)
            qdd = bk[(DI) * LANES + l] * s
            bk[(QA) * LANES + l] = qdd
            bk[(OA + 0) * LANES + l] = a0 + bk[(JC + 0) * LANES + l] * qdd
            bk[(OA + 1) * LANES + l] = a1 + bk[(JC + 1) * LANES + l] * qdd
            bk[(OA + 2) * LANES + l] = a2 + bk[(JC + 2) * LANES + l] * qdd
            bk[(OA + 3) * LANES + l] = a3 + bk[(JC + 3) * LANES + l] * qdd
            bk[(OA + 4) * LANES + l] = a4 + bk[(JC + 4) * LANES + l] * qdd
            bk[(OA + 5) * LANES + l] = a5 + bk[(JC + 5) * LANES + l] * qdd
        for l in range(LANES):
            ws_a[l] = bk[(QA) * LANES + l]


@jit
def aba_lanes_range(li, lf, gv, q, v, tau, qdd, ws, rows, start, stop):
    """``qdd`` (B, nv) for q (B, nq), v, tau (B, nv), states ``start`` to ``stop - 1`` in groups of
    ``LANES`` (a short last group repeats its last state in the spare lanes); ws (R * LANES,) with
    R ≥ ``rows[-1]``."""
    Q, V, T, A = rows[0], rows[1], rows[2], rows[3]
    W = LANES
    nq = q.shape[1]
    nv = v.shape[1]
    for g in range(start, stop, W):
        for l in range(LANES):
            b = min(g + l, stop - 1)
            for k in range(nq):
                ws[(Q + k) * LANES + l] = q[b, k]
            for k in range(nv):
                ws[(V + k) * LANES + l] = v[b, k]
                ws[(T + k) * LANES + l] = tau[b, k]
        aba_lanes(li, lf, gv, ws, rows)
        for l in range(min(W, stop - g)):
            for k in range(nv):
                qdd[g + l, k] = ws[(A + k) * LANES + l]
