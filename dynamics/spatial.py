"""Spatial (6D) algebra shared by every backend.

Conventions (see ``docs/conventions.md``): spatial motion vectors are ``(linear, angular)`` and
spatial force vectors are ``(force, torque)``, as in Pinocchio. A placement ``(R, p)`` of a child
frame in a parent frame has ``R`` = child axes expressed in parent coordinates and ``p`` = child
origin in parent coordinates. All functions broadcast over leading batch dimensions and are
complex-step safe (no ``abs``/``norm`` on values).
"""

from __future__ import annotations

import numpy as np


def skew(w: np.ndarray) -> np.ndarray:
    """Cross-product matrix ``[w]x`` of ``w`` (..., 3) -> (..., 3, 3)."""
    w = np.asarray(w)
    out = np.zeros(w.shape[:-1] + (3, 3), dtype=w.dtype)
    out[..., 0, 1] = -w[..., 2]
    out[..., 0, 2] = w[..., 1]
    out[..., 1, 0] = w[..., 2]
    out[..., 1, 2] = -w[..., 0]
    out[..., 2, 0] = -w[..., 1]
    out[..., 2, 1] = w[..., 0]
    return out


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a × b`` over the last axis (..., 3); much cheaper than ``np.cross`` on small batches."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def motion_cross_matrix(v: np.ndarray) -> np.ndarray:
    """Matrix of ``m -> v x m`` for motion vectors, (..., 6) -> (..., 6, 6)."""
    v = np.asarray(v)
    out = np.zeros(v.shape[:-1] + (6, 6), dtype=v.dtype)
    sw = skew(v[..., 3:])
    out[..., :3, :3] = sw
    out[..., 3:, 3:] = sw
    out[..., :3, 3:] = skew(v[..., :3])
    return out


def force_cross_matrix(v: np.ndarray) -> np.ndarray:
    """Matrix of ``f -> v x* f`` (dual cross product), (..., 6) -> (..., 6, 6)."""
    return -np.swapaxes(motion_cross_matrix(v), -1, -2)


def force_cross_rhs_matrix(f: np.ndarray) -> np.ndarray:
    """Matrix of ``v -> v x* f`` for fixed force ``f`` (linear in ``v``), (..., 6) -> (..., 6, 6).

    Needed by the derivative algorithms, where ``d(v x* (I v))`` has a term in ``dv`` with the
    momentum held fixed.
    """
    f = np.asarray(f)
    out = np.zeros(f.shape[:-1] + (6, 6), dtype=f.dtype)
    sf = skew(f[..., :3])
    out[..., :3, 3:] = -sf
    out[..., 3:, :3] = -sf
    out[..., 3:, 3:] = -skew(f[..., 3:])
    return out


def motion_cross(v: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``v x m`` for motion vectors (..., 6)."""
    lin = cross(v[..., 3:], m[..., :3]) + cross(v[..., :3], m[..., 3:])
    ang = cross(v[..., 3:], m[..., 3:])
    return np.concatenate([lin, ang], axis=-1)


def force_cross(v: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``v x* f`` (motion ``v`` acting on force ``f``), both (..., 6)."""
    lin = cross(v[..., 3:], f[..., :3])
    ang = cross(v[..., :3], f[..., :3]) + cross(v[..., 3:], f[..., 3:])
    return np.concatenate([lin, ang], axis=-1)


def motion_transform(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """6x6 matrix mapping motion vectors from parent to child coordinates.

    ``(R, p)`` is the child placement in the parent, (..., 3, 3) and (..., 3).
    Returns ``X = [[R^T, -R^T [p]x], [0, R^T]]`` (..., 6, 6); its transpose maps forces from
    child to parent.
    """
    Rt = np.swapaxes(R, -1, -2)
    out = np.zeros(R.shape[:-2] + (6, 6), dtype=np.result_type(R, p))
    out[..., :3, :3] = Rt
    out[..., 3:, 3:] = Rt
    out[..., :3, 3:] = -Rt @ skew(p)
    return out


def adjoint(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Adjoint ``Ad_(R,p)`` mapping motion vectors from child to parent coordinates, (..., 6, 6)."""
    out = np.zeros(R.shape[:-2] + (6, 6), dtype=np.result_type(R, p))
    out[..., :3, :3] = R
    out[..., 3:, 3:] = R
    out[..., :3, 3:] = skew(p) @ R
    return out


def spatial_inertia(mass: np.ndarray, com: np.ndarray, inertia_com: np.ndarray) -> np.ndarray:
    """6x6 spatial inertia about the frame origin from mass (kg), centre of mass (m, (..., 3)) and
    rotational inertia about the centre of mass in frame axes (kg m^2, (..., 3, 3))."""
    mass = np.asarray(mass, dtype=float)
    sc = skew(com)
    out = np.zeros(np.shape(mass) + (6, 6))
    m = mass[..., None, None]
    out[..., :3, :3] = m * np.eye(3)
    out[..., :3, 3:] = -m * sc
    out[..., 3:, :3] = m * sc
    out[..., 3:, 3:] = inertia_com - m * (sc @ sc)
    return out


def compose(R1: np.ndarray, p1: np.ndarray, R2: np.ndarray, p2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Placement composition ``(R1, p1) * (R2, p2)``."""
    return R1 @ R2, p1 + (R1 @ p2[..., None])[..., 0]
