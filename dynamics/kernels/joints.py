"""Compiled joint placements: port of :func:`dynamics.joints.joint_placements`.

For link ``i`` the placement of the link frame in its parent link frame is
``(R, p) = (R0, p0) ∘ joint(q)`` with (MuJoCo joint frames, docs/conventions.md):

* hinge: rotation ``exp([θ a]x)`` (Rodrigues, θ = q - qpos0) about the anchor ``c``:
  ``(R_J, c - R_J c)``;
* slide: ``(1, (q - qpos0) a)``;
* ball: rotation of the normalised quaternion (w, x, y, z) about the anchor;
* free: ``(R(quat), position)``.

The arithmetic follows :mod:`dynamics.lie` (same Taylor-series switch at θ² < 1e-6, same
quaternion normalisation), so placements agree with the reference to rounding; a hinge about a
unit axis (MuJoCo normalises joint axes) takes sin and cos of the half angle instead of the
general ``exp`` (no square root or division).
"""

from __future__ import annotations

import numpy as np

from .jit import jit
from .packing import (J_BALL, J_FREE, J_HINGE, LF_ANCHOR, LF_AXIS, LF_P0, LF_QPOS0, LF_R0, LI_QADR,
                      LI_TYPE)

_SMALL = 1e-6  # dynamics.lie._SMALL


@jit
def _quat_rotation(q, a, RJ):
    """Rotation of the quaternion ``q[a:a+4]`` (w, x, y, z), normalised first (lie.quat_to_rotation)."""
    n = np.sqrt(q[a] * q[a] + q[a + 1] * q[a + 1] + q[a + 2] * q[a + 2] + q[a + 3] * q[a + 3])
    w = q[a] / n
    x = q[a + 1] / n
    y = q[a + 2] / n
    z = q[a + 3] / n
    RJ[0, 0] = 1 - 2 * (y * y + z * z)
    RJ[0, 1] = 2 * (x * y - w * z)
    RJ[0, 2] = 2 * (x * z + w * y)
    RJ[1, 0] = 2 * (x * y + w * z)
    RJ[1, 1] = 1 - 2 * (x * x + z * z)
    RJ[1, 2] = 2 * (y * z - w * x)
    RJ[2, 0] = 2 * (x * z - w * y)
    RJ[2, 1] = 2 * (y * z + w * x)
    RJ[2, 2] = 1 - 2 * (x * x + y * y)


@jit
def _rotation_from(sc, cc, w0, w1, w2, RJ):
    """``RJ = 1 + sc [w]x + cc [w]x²`` (3, 3): the Rodrigues form shared by :func:`_rodrigues` and
    :func:`_hinge_rotation`, which differ only in how they get the two coefficients."""
    RJ[0, 0] = 1.0 + cc * (-w2 * w2 - w1 * w1)
    RJ[1, 1] = 1.0 + cc * (-w2 * w2 - w0 * w0)
    RJ[2, 2] = 1.0 + cc * (-w1 * w1 - w0 * w0)
    RJ[0, 1] = sc * -w2 + cc * (w1 * w0)
    RJ[0, 2] = sc * w1 + cc * (w2 * w0)
    RJ[1, 0] = sc * w2 + cc * (w0 * w1)
    RJ[1, 2] = sc * -w0 + cc * (w2 * w1)
    RJ[2, 0] = sc * -w1 + cc * (w0 * w2)
    RJ[2, 1] = sc * w0 + cc * (w1 * w2)


@jit
def _rodrigues(w0, w1, w2, RJ):
    """``exp([w]x) = 1 + sinc(θ) [w]x + (1 - cos θ)/θ² [w]x²`` (lie.so3_exp)."""
    t2 = w0 * w0 + w1 * w1 + w2 * w2
    if t2 < _SMALL:
        sc = 1 - t2 / 6 + t2 * t2 / 120
        cc = 0.5 - t2 / 24 + t2 * t2 / 720
    else:
        t = np.sqrt(t2)
        sc = np.sin(t) / t
        cc = (1 - np.cos(t)) / t2
    _rotation_from(sc, cc, w0, w1, w2, RJ)


@jit
def _hinge_rotation(th, a0, a1, a2, RJ):
    """``exp(θ [a]x)`` about a unit axis ``a`` (MuJoCo normalises joint axes):
    ``1 + sin θ [a]x + (1 - cos θ) [a]x²`` with ``sin θ = 2 sin(θ/2) cos(θ/2)`` and
    ``1 - cos θ = 2 sin²(θ/2)`` (no cancellation at small θ). The same rotation as
    :func:`_rodrigues` (to rounding) without its square root and divisions."""
    sh = np.sin(0.5 * th)
    ch = np.cos(0.5 * th)
    s = 2.0 * sh * ch
    cm = 2.0 * sh * sh
    _rotation_from(s, cm, a0, a1, a2, RJ)


@jit
def link_placement(li, lf, i, q, RJ, R, p):
    """Placement ``(R, p)`` (3, 3), (3,) of link ``i`` in its parent link frame at configuration ``q``
    (nq,); ``RJ`` is (3, 3) scratch for the joint rotation."""
    jt = li[i, LI_TYPE]
    qa = li[i, LI_QADR]
    pj0 = 0.0
    pj1 = 0.0
    pj2 = 0.0
    if jt == J_HINGE or jt == J_BALL:
        if jt == J_HINGE:
            th = q[qa] - lf[i, LF_QPOS0]
            a0, a1, a2 = lf[i, LF_AXIS], lf[i, LF_AXIS + 1], lf[i, LF_AXIS + 2]
            if abs(a0 * a0 + a1 * a1 + a2 * a2 - 1.0) < 1e-12:
                _hinge_rotation(th, a0, a1, a2, RJ)
            else:
                _rodrigues(th * a0, th * a1, th * a2, RJ)
        else:
            _quat_rotation(q, qa, RJ)
        c0 = lf[i, LF_ANCHOR]
        c1 = lf[i, LF_ANCHOR + 1]
        c2 = lf[i, LF_ANCHOR + 2]
        pj0 = c0 - (RJ[0, 0] * c0 + RJ[0, 1] * c1 + RJ[0, 2] * c2)
        pj1 = c1 - (RJ[1, 0] * c0 + RJ[1, 1] * c1 + RJ[1, 2] * c2)
        pj2 = c2 - (RJ[2, 0] * c0 + RJ[2, 1] * c1 + RJ[2, 2] * c2)
    elif jt == J_FREE:
        _quat_rotation(q, qa + 3, RJ)
        pj0 = q[qa]
        pj1 = q[qa + 1]
        pj2 = q[qa + 2]
    else:  # slide
        d = q[qa] - lf[i, LF_QPOS0]
        for r in range(3):
            for c in range(3):
                RJ[r, c] = 1.0 if r == c else 0.0
        pj0 = d * lf[i, LF_AXIS]
        pj1 = d * lf[i, LF_AXIS + 1]
        pj2 = d * lf[i, LF_AXIS + 2]
    for r in range(3):
        a0 = lf[i, LF_R0 + 3 * r]
        a1 = lf[i, LF_R0 + 3 * r + 1]
        a2 = lf[i, LF_R0 + 3 * r + 2]
        for c in range(3):
            R[r, c] = a0 * RJ[0, c] + a1 * RJ[1, c] + a2 * RJ[2, c]
        p[r] = lf[i, LF_P0 + r] + (a0 * pj0 + a1 * pj1 + a2 * pj2)


@jit
def all_placements(li, lf, q, RJ, R, p):
    """Placements of every link in its parent: ``R`` (L, 3, 3), ``p`` (L, 3)."""
    for i in range(li.shape[0]):
        link_placement(li, lf, i, q, RJ, R[i], p[i])


@jit
def world_placements(li, R, p, oR, op):
    """World placements ``oR`` (L, 3, 3), ``op`` (L, 3) of every link from the parent placements."""
    for i in range(li.shape[0]):
        lam = li[i, 0]
        if lam < 0:
            for r in range(3):
                op[i, r] = p[i, r]
                for c in range(3):
                    oR[i, r, c] = R[i, r, c]
        else:
            for r in range(3):
                op[i, r] = op[lam, r] + (oR[lam, r, 0] * p[i, 0] + oR[lam, r, 1] * p[i, 1] + oR[lam, r, 2] * p[i, 2])
                for c in range(3):
                    oR[i, r, c] = oR[lam, r, 0] * R[i, 0, c] + oR[lam, r, 1] * R[i, 1, c] + oR[lam, r, 2] * R[i, 2, c]
