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

from .jit import jit, jit_inline
from .packing import (J_BALL, J_FREE, J_HINGE, LF_ANCHOR, LF_AXIS, LF_P0, LF_QPOS0, LF_R0, LI_QADR,
                      LI_TYPE)

_SMALL = 1e-6  # dynamics.lie._SMALL


@jit
def _quat_rotation(q, a):
    """Rotation (9 entries, row-major) of the quaternion ``q[a:a+4]`` (w, x, y, z), normalised first
    (lie.quat_to_rotation)."""
    n = np.sqrt(q[a] * q[a] + q[a + 1] * q[a + 1] + q[a + 2] * q[a + 2] + q[a + 3] * q[a + 3])
    w = q[a] / n
    x = q[a + 1] / n
    y = q[a + 2] / n
    z = q[a + 3] / n
    return (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y))


@jit
def _rotation_from(sc, cc, w0, w1, w2):
    """``1 + sc [w]x + cc [w]x²`` (9 entries, row-major): the Rodrigues form shared by
    :func:`_rodrigues` and :func:`_hinge_rotation`, which differ only in how they get the two
    coefficients."""
    return (1.0 + cc * (-w2 * w2 - w1 * w1), sc * -w2 + cc * (w1 * w0), sc * w1 + cc * (w2 * w0),
            sc * w2 + cc * (w0 * w1), 1.0 + cc * (-w2 * w2 - w0 * w0), sc * -w0 + cc * (w2 * w1),
            sc * -w1 + cc * (w0 * w2), sc * w0 + cc * (w1 * w2), 1.0 + cc * (-w1 * w1 - w0 * w0))


@jit
def _rodrigues(w0, w1, w2):
    """``exp([w]x) = 1 + sinc(θ) [w]x + (1 - cos θ)/θ² [w]x²`` (lie.so3_exp), 9 entries."""
    t2 = w0 * w0 + w1 * w1 + w2 * w2
    if t2 < _SMALL:
        sc = 1 - t2 / 6 + t2 * t2 / 120
        cc = 0.5 - t2 / 24 + t2 * t2 / 720
    else:
        t = np.sqrt(t2)
        sc = np.sin(t) / t
        cc = (1 - np.cos(t)) / t2
    return _rotation_from(sc, cc, w0, w1, w2)


@jit
def _hinge_rotation(th, a0, a1, a2):
    """``exp(θ [a]x)`` about a unit axis ``a`` (MuJoCo normalises joint axes), 9 entries:
    ``1 + sin θ [a]x + (1 - cos θ) [a]x²`` with ``sin θ = 2 sin(θ/2) cos(θ/2)`` and
    ``1 - cos θ = 2 sin²(θ/2)`` (no cancellation at small θ). The same rotation as
    :func:`_rodrigues` (to rounding) without its square root and divisions."""
    sh = np.sin(0.5 * th)
    ch = np.cos(0.5 * th)
    return _rotation_from(2.0 * sh * ch, 2.0 * sh * sh, a0, a1, a2)


@jit
def _compose(lf, i, RJ, pj0, pj1, pj2, R, p):
    """``(R[i], p[i]) = (R0, p0) ∘ (RJ, pj)`` for link ``i``, with ``RJ`` the joint rotation (9
    entries, row-major) and ``pj`` the joint translation, in the pre-joint frame."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = RJ
    for r in range(3):
        a0 = lf[i, LF_R0 + 3 * r]
        a1 = lf[i, LF_R0 + 3 * r + 1]
        a2 = lf[i, LF_R0 + 3 * r + 2]
        R[i, r, 0] = a0 * r00 + a1 * r10 + a2 * r20
        R[i, r, 1] = a0 * r01 + a1 * r11 + a2 * r21
        R[i, r, 2] = a0 * r02 + a1 * r12 + a2 * r22
        p[i, r] = lf[i, LF_P0 + r] + (a0 * pj0 + a1 * pj1 + a2 * pj2)


@jit
def _about_anchor(lf, i, RJ):
    """The translation ``c - R_J c`` of a rotation ``RJ`` (9 entries) about the joint anchor ``c``."""
    c0 = lf[i, LF_ANCHOR]
    c1 = lf[i, LF_ANCHOR + 1]
    c2 = lf[i, LF_ANCHOR + 2]
    return (c0 - (RJ[0] * c0 + RJ[1] * c1 + RJ[2] * c2), c1 - (RJ[3] * c0 + RJ[4] * c1 + RJ[5] * c2),
            c2 - (RJ[6] * c0 + RJ[7] * c1 + RJ[8] * c2))


@jit
def _other_placement(li, lf, i, q, R, p):
    """:func:`link_placement` of a ball, free or slide joint."""
    jt = li[i, LI_TYPE]
    qa = li[i, LI_QADR]
    if jt == J_BALL:
        RJ = _quat_rotation(q, qa)
        pj0, pj1, pj2 = _about_anchor(lf, i, RJ)
    elif jt == J_FREE:
        RJ = _quat_rotation(q, qa + 3)
        pj0, pj1, pj2 = q[qa], q[qa + 1], q[qa + 2]
    else:  # slide
        RJ = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
        d = q[qa] - lf[i, LF_QPOS0]
        pj0, pj1, pj2 = d * lf[i, LF_AXIS], d * lf[i, LF_AXIS + 1], d * lf[i, LF_AXIS + 2]
    _compose(lf, i, RJ, pj0, pj1, pj2, R, p)


@jit_inline
def _hinge_placement(li, lf, i, q, R, p):
    """:func:`link_placement` of a hinge."""
    th = q[li[i, LI_QADR]] - lf[i, LF_QPOS0]
    a0, a1, a2 = lf[i, LF_AXIS], lf[i, LF_AXIS + 1], lf[i, LF_AXIS + 2]
    if abs(a0 * a0 + a1 * a1 + a2 * a2 - 1.0) < 1e-12:
        RJ = _hinge_rotation(th, a0, a1, a2)
    else:
        RJ = _rodrigues(th * a0, th * a1, th * a2)
    pj0, pj1, pj2 = _about_anchor(lf, i, RJ)
    _compose(lf, i, RJ, pj0, pj1, pj2, R, p)


@jit
def link_placement(li, lf, i, q, R, p):
    """Placement ``(R[i], p[i])`` (3, 3), (3,) of link ``i`` in its parent link frame at
    configuration ``q`` (nq,)."""
    if li[i, LI_TYPE] == J_HINGE:
        _hinge_placement(li, lf, i, q, R, p)
    else:
        _other_placement(li, lf, i, q, R, p)


@jit
def all_placements(li, lf, q, R, p):
    """Placements of every link in its parent: ``R`` (L, 3, 3), ``p`` (L, 3)."""
    # link_placement's branch written into the loop, the hinge's path inlined there and the other
    # joints' called: the loop over a numba-inlined link_placement, or over every joint type's code
    # inlined, ran 2.5-3.5x slower on the bundled robots, the arm's seven hinges included
    # (docs/backends.md).
    for i in range(li.shape[0]):
        if li[i, LI_TYPE] == J_HINGE:
            _hinge_placement(li, lf, i, q, R, p)
        else:
            _other_placement(li, lf, i, q, R, p)


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
