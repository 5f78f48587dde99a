"""Spatial algebra on array-namespace arrays for the scans: motion transforms in SE(3) form.

A motion transform ``X = [[E, -E [r]x], [0, E]]`` (Featherstone's ``plux(E, r)``; in the
project's convention ``X = motion_transform(R, p)`` with ``E = R^T``, ``r = p``) is stored as the
pair ``(E, r)`` (..., 3, 3), (..., 3) — the SE(3) element of Yang, Wu & Pan 2017 §III-B — instead of a 6×6
matrix. Motion vectors are ``(linear, angular)``, force vectors ``(force, torque)``. Every
function takes the namespace from its arguments (works on numpy and CuPy arrays alike).
"""

from __future__ import annotations

from typing import Any

from .namespace import array_namespace as _xp

Array = Any


def cross(a: Array, b: Array) -> Array:
    """``a × b`` over the last axis (..., 3)."""
    xp = _xp(a)
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return xp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def matvec(M: Array, x: Array) -> Array:
    """``M x`` for stacks of matrices (..., m, k) and vectors (..., k)."""
    return _xp(x).einsum("...ij,...j->...i", M, x)


def matTvec(M: Array, x: Array) -> Array:
    """``M^T x`` for stacks of matrices (..., k, m) and vectors (..., k)."""
    return _xp(x).einsum("...ji,...j->...i", M, x)


def motion_apply(E: Array, r: Array, m: Array) -> Array:
    """``X m`` for a motion vector m (..., 6): ``(E (lin - r × ang), E ang)``."""
    xp = _xp(m)
    lin, ang = m[..., :3], m[..., 3:]
    return xp.concatenate([matvec(E, lin - cross(r, ang)), matvec(E, ang)], axis=-1)


def force_apply_T(E: Array, r: Array, f: Array) -> Array:
    """``X^T f`` for a force f (..., 6) (child to parent): ``(E^T f, r × E^T f + E^T n)``."""
    xp = _xp(f)
    fl = matTvec(E, f[..., :3])
    return xp.concatenate([fl, cross(r, fl) + matTvec(E, f[..., 3:])], axis=-1)


def force_apply_invT(E: Array, r: Array, f: Array) -> Array:
    """``X^-T f`` (parent to child), the inverse of :func:`force_apply_T`."""
    xp = _xp(f)
    fl = f[..., :3]
    return xp.concatenate([matvec(E, fl), matvec(E, f[..., 3:] - cross(r, fl))], axis=-1)


def compose(E1: Array, r1: Array, E2: Array, r2: Array) -> tuple[Array, Array]:
    """``X1 X2`` as ``(E1 E2, r2 + E2^T r1)``."""
    return E1 @ E2, r2 + matTvec(E2, r1)


def motion_cross(v: Array, m: Array) -> Array:
    """``v × m`` for motion vectors (..., 6)."""
    xp = _xp(v)
    lin = cross(v[..., 3:], m[..., :3]) + cross(v[..., :3], m[..., 3:])
    return xp.concatenate([lin, cross(v[..., 3:], m[..., 3:])], axis=-1)


def force_cross(v: Array, f: Array) -> Array:
    """``v ×* f`` (motion v acting on force f), (..., 6)."""
    xp = _xp(v)
    lin = cross(v[..., 3:], f[..., :3])
    return xp.concatenate([lin, cross(v[..., :3], f[..., :3]) + cross(v[..., 3:], f[..., 3:])], axis=-1)


def skew(w: Array) -> Array:
    """``[w]x`` (..., 3) -> (..., 3, 3)."""
    xp = _xp(w)
    z = xp.zeros_like(w[..., 0])
    return xp.stack([xp.stack([z, -w[..., 2], w[..., 1]], -1),
                     xp.stack([w[..., 2], z, -w[..., 0]], -1),
                     xp.stack([-w[..., 1], w[..., 0], z], -1)], axis=-2)


def motion_matrix(E: Array, r: Array) -> Array:
    """The 6×6 matrix ``X`` of ``(E, r)``."""
    xp = _xp(E)
    out = xp.zeros(E.shape[:-2] + (6, 6), dtype=E.dtype)
    out[..., :3, :3] = E
    out[..., 3:, 3:] = E
    out[..., :3, 3:] = -E @ skew(r)
    return out


def motion_cross_matrix(v: Array) -> Array:
    """6×6 matrix of ``m -> v × m``."""
    xp = _xp(v)
    out = xp.zeros(v.shape[:-1] + (6, 6), dtype=v.dtype)
    sw = skew(v[..., 3:])
    out[..., :3, :3] = sw
    out[..., 3:, 3:] = sw
    out[..., :3, 3:] = skew(v[..., :3])
    return out
