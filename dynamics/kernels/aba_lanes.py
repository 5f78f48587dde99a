"""Compiled Articulated Body Algorithm over SIMD lanes: W states at once, the state index last.

:mod:`.aba` runs one state at a time; its per-link updates are a few dozen scalar operations each,
which LLVM cannot vectorise. Here every per-state quantity is one row of W lanes of a single
workspace array ``ws`` (R, W), and every per-link update is a loop over the lanes around
straight-line code, which LLVM's loop vectoriser turns into SIMD instructions over the states (one
array, so no aliasing checks; W comes from the array's shape, so the loops are not unrolled into
scalar code). The algorithm is :mod:`.aba`'s (Featherstone RBDA Table 7.1 in world coordinates at
link 0's origin, armature added to ``D``), with two differences of form:

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

Workspace rows (:func:`lane_rows`): q (nq), v (nv), tau (nv), qdd (nv), the ABA's u (nv), two rows of
sin/cos scratch, 12 rows of one link's parent placement, 6 rows of zeros, then ``LINK_ROWS`` rows per
link (world rotation, origin, joint column, velocity, articulated inertia, U, D⁻¹, bias
acceleration, bias force, acceleration).
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

#: lanes per workspace: states computed together (the loops take W from the workspace's shape)
LANES = 32

# rows of one link's block: world rotation (9, row-major), origin (3), joint column J (6), velocity
# (6), articulated inertia (21: the upper triangle row by row, (0,0)..(0,5), (1,1)..(1,5), ..., (5,5)),
# U = I^A J (6), D^-1 (1), c (6), p^A (6), a (6)
OR, OP, JC, OV, IA, UU, DI, CB, PA, OA = 0, 9, 12, 18, 24, 45, 51, 52, 58, 64
LINK_ROWS = 70

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
    """``(q, v, tau, qdd, u, sincos, placement, zeros, links, total)``: the first row of each block of
    the workspace of :func:`aba_lanes` for a model of ``nlinks`` links and nv = nq dofs; ``total``
    is the number of rows (callers may append their own rows after it)."""
    q = 0
    v = q + nv
    tau = v + nv
    qdd = tau + nv
    u = qdd + nv
    sc = u + nv
    rp = sc + 2
    z = rp + 12
    links = z + 6
    return q, v, tau, qdd, u, sc, rp, z, links, links + nlinks * LINK_ROWS


@jit
def _half_angle_sincos(ws, src, dst, q0, W):
    """``ws[dst] = sin(θ/2)``, ``ws[dst + 1] = cos(θ/2)`` for ``θ = ws[src] - q0``, lane by lane,
    without a libm call (module docstring)."""
    for l in range(W):
        x = 0.5 * (ws[src, l] - q0)
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
        ws[dst, l] = -ss if (k & 2) == 2 else ss
        ws[dst + 1, l] = -cc if ((k + 1) & 2) == 2 else cc


@jit
def aba_lanes(li, lf, gv, ws, rows):
    """``qdd`` of the W states in the lanes of ``ws`` (R, W): q, v and tau in the rows that start at
    ``rows[0]``, ``rows[1]``, ``rows[2]``, qdd into those at ``rows[3]`` (:func:`lane_rows`); the model
    has hinge and slide joints only (:func:`lanes_supported`)."""
    Q, V, T, A, Uu, SC, RP, Z, LB = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5], rows[6], rows[7], rows[8]
    W = ws.shape[1]
    L = li.shape[0]
    for k in range(6):
        for l in range(W):
            ws[Z + k, l] = 0.0
    for i in range(L):
        lam = li[i, LI_PARENT]
        qa = li[i, LI_QADR]
        a0, a1, a2 = lf[i, LF_AXIS], lf[i, LF_AXIS + 1], lf[i, LF_AXIS + 2]
        q0 = lf[i, LF_QPOS0]
        b00, b01, b02 = lf[i, LF_R0], lf[i, LF_R0 + 1], lf[i, LF_R0 + 2]
        b10, b11, b12 = lf[i, LF_R0 + 3], lf[i, LF_R0 + 4], lf[i, LF_R0 + 5]
        b20, b21, b22 = lf[i, LF_R0 + 6], lf[i, LF_R0 + 7], lf[i, LF_R0 + 8]
        e0, e1, e2 = lf[i, LF_P0], lf[i, LF_P0 + 1], lf[i, LF_P0 + 2]
        if li[i, LI_TYPE] == J_HINGE:
            c0, c1, c2 = lf[i, LF_ANCHOR], lf[i, LF_ANCHOR + 1], lf[i, LF_ANCHOR + 2]
            _half_angle_sincos(ws, Q + qa, SC, q0, W)
            x00 = -a2 * a2 - a1 * a1
            x11 = -a2 * a2 - a0 * a0
            x22 = -a1 * a1 - a0 * a0
            for l in range(W):
                sh = ws[SC, l]
                ch = ws[SC + 1, l]
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
                ws[RP + 0, l] = b00 * r00 + b01 * r10 + b02 * r20
                ws[RP + 1, l] = b00 * r01 + b01 * r11 + b02 * r21
                ws[RP + 2, l] = b00 * r02 + b01 * r12 + b02 * r22
                ws[RP + 3, l] = b10 * r00 + b11 * r10 + b12 * r20
                ws[RP + 4, l] = b10 * r01 + b11 * r11 + b12 * r21
                ws[RP + 5, l] = b10 * r02 + b11 * r12 + b12 * r22
                ws[RP + 6, l] = b20 * r00 + b21 * r10 + b22 * r20
                ws[RP + 7, l] = b20 * r01 + b21 * r11 + b22 * r21
                ws[RP + 8, l] = b20 * r02 + b21 * r12 + b22 * r22
                ws[RP + 9, l] = e0 + (b00 * pj0 + b01 * pj1 + b02 * pj2)
                ws[RP + 10, l] = e1 + (b10 * pj0 + b11 * pj1 + b12 * pj2)
                ws[RP + 11, l] = e2 + (b20 * pj0 + b21 * pj1 + b22 * pj2)
        else:
            for l in range(W):
                d = ws[Q + qa, l] - q0
                ws[RP + 0, l] = b00
                ws[RP + 1, l] = b01
                ws[RP + 2, l] = b02
                ws[RP + 3, l] = b10
                ws[RP + 4, l] = b11
                ws[RP + 5, l] = b12
                ws[RP + 6, l] = b20
                ws[RP + 7, l] = b21
                ws[RP + 8, l] = b22
                ws[RP + 9, l] = e0 + (b00 * d * a0 + b01 * d * a1 + b02 * d * a2)
                ws[RP + 10, l] = e1 + (b10 * d * a0 + b11 * d * a1 + b12 * d * a2)
                ws[RP + 11, l] = e2 + (b20 * d * a0 + b21 * d * a1 + b22 * d * a2)
        K = LB + i * LINK_ROWS
        if lam < 0:
            for k in range(12):
                for l in range(W):
                    ws[K + k, l] = ws[RP + k, l]
        else:
            P = LB + lam * LINK_ROWS
            for r in range(3):
                for l in range(W):
                    g0 = ws[P + OR + 3 * r, l]
                    g1 = ws[P + OR + 3 * r + 1, l]
                    g2 = ws[P + OR + 3 * r + 2, l]
                    ws[K + OP + r, l] = ws[P + OP + r, l] + (g0 * ws[RP + 9, l] + g1 * ws[RP + 10, l]
                                                             + g2 * ws[RP + 11, l])
                    ws[K + OR + 3 * r, l] = g0 * ws[RP, l] + g1 * ws[RP + 3, l] + g2 * ws[RP + 6, l]
                    ws[K + OR + 3 * r + 1, l] = g0 * ws[RP + 1, l] + g1 * ws[RP + 4, l] + g2 * ws[RP + 7, l]
                    ws[K + OR + 3 * r + 2, l] = g0 * ws[RP + 2, l] + g1 * ws[RP + 5, l] + g2 * ws[RP + 8, l]
    # origin at link 0
    for i in range(L - 1, -1, -1):
        K = LB + i * LINK_ROWS
        for r in range(3):
            for l in range(W):
                ws[K + OP + r, l] -= ws[LB + OP + r, l]
    # columns, velocities, inertias, bias
    for i in range(L):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        K = LB + i * LINK_ROWS
        P = LB + lam * LINK_ROWS
        s0, s1, s2, s3, s4, s5 = (lf[i, LF_ST], lf[i, LF_ST + 1], lf[i, LF_ST + 2], lf[i, LF_ST + 3],
                                  lf[i, LF_ST + 4], lf[i, LF_ST + 5])
        m = lf[i, 0]
        y1, y2, y3 = lf[i, 1], lf[i, 2], lf[i, 3]
        i00, i01, i02 = lf[i, 4], lf[i, 5], lf[i, 6]
        i10, i11, i12 = lf[i, 7], lf[i, 8], lf[i, 9]
        i20, i21, i22 = lf[i, 10], lf[i, 11], lf[i, 12]
        Pv = Z if lam < 0 else P + OV
        for l in range(W):
            g00, g01, g02 = ws[K + OR, l], ws[K + OR + 1, l], ws[K + OR + 2, l]
            g10, g11, g12 = ws[K + OR + 3, l], ws[K + OR + 4, l], ws[K + OR + 5, l]
            g20, g21, g22 = ws[K + OR + 6, l], ws[K + OR + 7, l], ws[K + OR + 8, l]
            p0, p1, p2 = ws[K + OP, l], ws[K + OP + 1, l], ws[K + OP + 2, l]
            ja0 = g00 * s3 + g01 * s4 + g02 * s5
            ja1 = g10 * s3 + g11 * s4 + g12 * s5
            ja2 = g20 * s3 + g21 * s4 + g22 * s5
            jl0 = g00 * s0 + g01 * s1 + g02 * s2 + p1 * ja2 - p2 * ja1
            jl1 = g10 * s0 + g11 * s1 + g12 * s2 + p2 * ja0 - p0 * ja2
            jl2 = g20 * s0 + g21 * s1 + g22 * s2 + p0 * ja1 - p1 * ja0
            ws[K + JC, l] = jl0
            ws[K + JC + 1, l] = jl1
            ws[K + JC + 2, l] = jl2
            ws[K + JC + 3, l] = ja0
            ws[K + JC + 4, l] = ja1
            ws[K + JC + 5, l] = ja2
            vd = ws[V + d0, l]
            vj0, vj1, vj2, vj3, vj4, vj5 = jl0 * vd, jl1 * vd, jl2 * vd, ja0 * vd, ja1 * vd, ja2 * vd
            w0 = ws[Pv + 0, l] + vj0
            w1 = ws[Pv + 1, l] + vj1
            w2 = ws[Pv + 2, l] + vj2
            w3 = ws[Pv + 3, l] + vj3
            w4 = ws[Pv + 4, l] + vj4
            w5 = ws[Pv + 5, l] + vj5
            ws[K + OV, l] = w0
            ws[K + OV + 1, l] = w1
            ws[K + OV + 2, l] = w2
            ws[K + OV + 3, l] = w3
            ws[K + OV + 4, l] = w4
            ws[K + OV + 5, l] = w5
            ws[K + CB, l] = w4 * vj2 - w5 * vj1 + w1 * vj5 - w2 * vj4
            ws[K + CB + 1, l] = w5 * vj0 - w3 * vj2 + w2 * vj3 - w0 * vj5
            ws[K + CB + 2, l] = w3 * vj1 - w4 * vj0 + w0 * vj4 - w1 * vj3
            ws[K + CB + 3, l] = w4 * vj5 - w5 * vj4
            ws[K + CB + 4, l] = w5 * vj3 - w3 * vj5
            ws[K + CB + 5, l] = w3 * vj4 - w4 * vj3
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
            ws[K + PA, l] = w4 * f2 - w5 * f1
            ws[K + PA + 1, l] = w5 * f0 - w3 * f2
            ws[K + PA + 2, l] = w3 * f1 - w4 * f0
            ws[K + PA + 3, l] = w1 * f2 - w2 * f1 + w4 * f5 - w5 * f4
            ws[K + PA + 4, l] = w2 * f0 - w0 * f2 + w5 * f3 - w3 * f5
            ws[K + PA + 5, l] = w0 * f1 - w1 * f0 + w3 * f4 - w4 * f3
            B = K + IA
            ws[B + 0, l] = m
            ws[B + 1, l] = 0.0
            ws[B + 2, l] = 0.0
            ws[B + 3, l] = 0.0
            ws[B + 4, l] = h2
            ws[B + 5, l] = -h1
            ws[B + 6, l] = m
            ws[B + 7, l] = 0.0
            ws[B + 8, l] = -h2
            ws[B + 9, l] = 0.0
            ws[B + 10, l] = h0
            ws[B + 11, l] = m
            ws[B + 12, l] = h1
            ws[B + 13, l] = -h0
            ws[B + 14, l] = 0.0
            ws[B + 15, l] = o00
            ws[B + 16, l] = o01
            ws[B + 17, l] = o02
            ws[B + 18, l] = o11
            ws[B + 19, l] = o12
            ws[B + 20, l] = o22
    # backward: articulated inertias (packed symmetric) and bias forces, one lane loop per link
    for i in range(L - 1, -1, -1):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        arm = lf[i, LF_ARM]
        K = LB + i * LINK_ROWS
        B = K + IA
        for l in range(W):
            j0, j1, j2 = ws[K + JC, l], ws[K + JC + 1, l], ws[K + JC + 2, l]
            j3, j4, j5 = ws[K + JC + 3, l], ws[K + JC + 4, l], ws[K + JC + 5, l]
            u0 = (ws[B + 0, l] * j0 + ws[B + 1, l] * j1 + ws[B + 2, l] * j2 + ws[B + 3, l] * j3 + ws[B + 4, l] * j4 + ws[B + 5, l] * j5)
            u1 = (ws[B + 1, l] * j0 + ws[B + 6, l] * j1 + ws[B + 7, l] * j2 + ws[B + 8, l] * j3 + ws[B + 9, l] * j4 + ws[B + 10, l] * j5)
            u2 = (ws[B + 2, l] * j0 + ws[B + 7, l] * j1 + ws[B + 11, l] * j2 + ws[B + 12, l] * j3 + ws[B + 13, l] * j4 + ws[B + 14, l] * j5)
            u3 = (ws[B + 3, l] * j0 + ws[B + 8, l] * j1 + ws[B + 12, l] * j2 + ws[B + 15, l] * j3 + ws[B + 16, l] * j4 + ws[B + 17, l] * j5)
            u4 = (ws[B + 4, l] * j0 + ws[B + 9, l] * j1 + ws[B + 13, l] * j2 + ws[B + 16, l] * j3 + ws[B + 18, l] * j4 + ws[B + 19, l] * j5)
            u5 = (ws[B + 5, l] * j0 + ws[B + 10, l] * j1 + ws[B + 14, l] * j2 + ws[B + 17, l] * j3 + ws[B + 19, l] * j4 + ws[B + 20, l] * j5)
            ws[K + UU + 0, l] = u0
            ws[K + UU + 1, l] = u1
            ws[K + UU + 2, l] = u2
            ws[K + UU + 3, l] = u3
            ws[K + UU + 4, l] = u4
            ws[K + UU + 5, l] = u5
            ws[K + DI, l] = 1.0 / (arm + (j0 * u0 + j1 * u1 + j2 * u2 + j3 * u3 + j4 * u4 + j5 * u5))
            ws[Uu + d0, l] = ws[T + d0, l] - (j0 * ws[K + PA + 0, l] + j1 * ws[K + PA + 1, l] + j2 * ws[K + PA + 2, l] + j3 * ws[K + PA + 3, l] + j4 * ws[K + PA + 4, l] + j5 * ws[K + PA + 5, l])
        if lam < 0:
            continue
        P = LB + lam * LINK_ROWS
        for l in range(W):
            u0 = ws[K + UU + 0, l]
            c0 = ws[K + CB + 0, l]
            u1 = ws[K + UU + 1, l]
            c1 = ws[K + CB + 1, l]
            u2 = ws[K + UU + 2, l]
            c2 = ws[K + CB + 2, l]
            u3 = ws[K + UU + 3, l]
            c3 = ws[K + CB + 3, l]
            u4 = ws[K + UU + 4, l]
            c4 = ws[K + CB + 4, l]
            u5 = ws[K + UU + 5, l]
            c5 = ws[K + CB + 5, l]
            di = ws[K + DI, l]
            wk = (ws[Uu + d0, l] - (u0 * c0 + u1 * c1 + u2 * c2 + u3 * c3 + u4 * c4 + u5 * c5)) * di
            ws[P + PA + 0, l] += ws[K + PA + 0, l] + u0 * wk + (ws[B + 0, l] * c0 + ws[B + 1, l] * c1 + ws[B + 2, l] * c2 + ws[B + 3, l] * c3 + ws[B + 4, l] * c4 + ws[B + 5, l] * c5)
            ws[P + PA + 1, l] += ws[K + PA + 1, l] + u1 * wk + (ws[B + 1, l] * c0 + ws[B + 6, l] * c1 + ws[B + 7, l] * c2 + ws[B + 8, l] * c3 + ws[B + 9, l] * c4 + ws[B + 10, l] * c5)
            ws[P + PA + 2, l] += ws[K + PA + 2, l] + u2 * wk + (ws[B + 2, l] * c0 + ws[B + 7, l] * c1 + ws[B + 11, l] * c2 + ws[B + 12, l] * c3 + ws[B + 13, l] * c4 + ws[B + 14, l] * c5)
            ws[P + PA + 3, l] += ws[K + PA + 3, l] + u3 * wk + (ws[B + 3, l] * c0 + ws[B + 8, l] * c1 + ws[B + 12, l] * c2 + ws[B + 15, l] * c3 + ws[B + 16, l] * c4 + ws[B + 17, l] * c5)
            ws[P + PA + 4, l] += ws[K + PA + 4, l] + u4 * wk + (ws[B + 4, l] * c0 + ws[B + 9, l] * c1 + ws[B + 13, l] * c2 + ws[B + 16, l] * c3 + ws[B + 18, l] * c4 + ws[B + 19, l] * c5)
            ws[P + PA + 5, l] += ws[K + PA + 5, l] + u5 * wk + (ws[B + 5, l] * c0 + ws[B + 10, l] * c1 + ws[B + 14, l] * c2 + ws[B + 17, l] * c3 + ws[B + 19, l] * c4 + ws[B + 20, l] * c5)
            e0 = u0 * di
            e1 = u1 * di
            e2 = u2 * di
            e3 = u3 * di
            e4 = u4 * di
            e5 = u5 * di
            ws[P + IA + 0, l] += ws[B + 0, l] - e0 * u0
            ws[P + IA + 1, l] += ws[B + 1, l] - e0 * u1
            ws[P + IA + 2, l] += ws[B + 2, l] - e0 * u2
            ws[P + IA + 3, l] += ws[B + 3, l] - e0 * u3
            ws[P + IA + 4, l] += ws[B + 4, l] - e0 * u4
            ws[P + IA + 5, l] += ws[B + 5, l] - e0 * u5
            ws[P + IA + 6, l] += ws[B + 6, l] - e1 * u1
            ws[P + IA + 7, l] += ws[B + 7, l] - e1 * u2
            ws[P + IA + 8, l] += ws[B + 8, l] - e1 * u3
            ws[P + IA + 9, l] += ws[B + 9, l] - e1 * u4
            ws[P + IA + 10, l] += ws[B + 10, l] - e1 * u5
            ws[P + IA + 11, l] += ws[B + 11, l] - e2 * u2
            ws[P + IA + 12, l] += ws[B + 12, l] - e2 * u3
            ws[P + IA + 13, l] += ws[B + 13, l] - e2 * u4
            ws[P + IA + 14, l] += ws[B + 14, l] - e2 * u5
            ws[P + IA + 15, l] += ws[B + 15, l] - e3 * u3
            ws[P + IA + 16, l] += ws[B + 16, l] - e3 * u4
            ws[P + IA + 17, l] += ws[B + 17, l] - e3 * u5
            ws[P + IA + 18, l] += ws[B + 18, l] - e4 * u4
            ws[P + IA + 19, l] += ws[B + 19, l] - e4 * u5
            ws[P + IA + 20, l] += ws[B + 20, l] - e5 * u5
    # forward: accelerations
    for i in range(L):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        K = LB + i * LINK_ROWS
        if lam < 0:
            for r in range(6):
                gr = gv[r] if r < 3 else 0.0
                for l in range(W):
                    ws[K + OA + r, l] = ws[K + CB + r, l] - gr
        else:
            P = LB + lam * LINK_ROWS
            for r in range(6):
                for l in range(W):
                    ws[K + OA + r, l] = ws[P + OA + r, l] + ws[K + CB + r, l]
        for l in range(W):
            s = ws[Uu + d0, l]
            for r in range(6):
                s -= ws[K + UU + r, l] * ws[K + OA + r, l]
            a = ws[K + DI, l] * s
            ws[A + d0, l] = a
            for r in range(6):
                ws[K + OA + r, l] += ws[K + JC + r, l] * a


@jit
def aba_lanes_range(li, lf, gv, q, v, tau, qdd, ws, rows, start, stop):
    """``qdd`` (B, nv) for q (B, nq), v, tau (B, nv), states ``start`` to ``stop - 1`` in groups of
    W lanes (a short last group repeats its last state in the spare lanes); ws (R, W) with R ≥
    ``rows[-1]``."""
    Q, V, T, A = rows[0], rows[1], rows[2], rows[3]
    W = ws.shape[1]
    nq = q.shape[1]
    nv = v.shape[1]
    for g in range(start, stop, W):
        for l in range(W):
            b = min(g + l, stop - 1)
            for k in range(nq):
                ws[Q + k, l] = q[b, k]
            for k in range(nv):
                ws[V + k, l] = v[b, k]
                ws[T + k, l] = tau[b, k]
        aba_lanes(li, lf, gv, ws, rows)
        for l in range(min(W, stop - g)):
            for k in range(nv):
                qdd[g + l, k] = ws[A + k, l]
