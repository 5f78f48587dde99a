"""Lie-group operations on SO(3) and SE(3) used by ball and free joints.

Quaternions are ``(w, x, y, z)`` (MuJoCo order). Tangent vectors of SE(3) are ``(linear, angular)``
and are *right* (body-frame) perturbations: ``M ⊕ ξ = M · exp(ξ)``. Every function broadcasts
over leading dimensions and is complex-step safe: trigonometric ratios are evaluated through
``θ²`` with Taylor series near zero, selected on the real part only.
"""

from __future__ import annotations

import math

import numpy as np

from .spatial import cross, skew

_SMALL = 0.25  # θ² below which Taylor series are used: the closed forms lose ~ε/θ⁴ there, the
# 8-term series are exact to < 1e-18 (the closed forms of the SE(3) Jacobian blocks cancel badly)

_FACT = [math.factorial(n) for n in range(40)]
_BERN = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510]  # B2, B4, ...


def _series(coefs):
    def f(s):
        out = np.zeros_like(s) + coefs[-1]
        for c in coefs[-2::-1]:
            out = out * s + c
        return out
    return f


def _ratio(theta2: np.ndarray, closed, series) -> np.ndarray:
    """Evaluate a smooth function of θ² by its closed form, or its series where θ² is small."""
    theta2 = np.asarray(theta2)
    small = np.real(theta2) < _SMALL
    safe = np.where(small, np.ones_like(theta2), theta2)
    return np.where(small, series(theta2), closed(safe))


_K = range(8)
_S_SIN = _series([(-1) ** k / _FACT[2 * k + 1] for k in _K])          # sin θ / θ
_S_COS = _series([(-1) ** k / _FACT[2 * k + 2] for k in _K])          # (1 - cos θ) / θ²
_S_SIN3 = _series([(-1) ** k / _FACT[2 * k + 3] for k in _K])         # (θ - sin θ) / θ³
_S_Q2 = _series([(-1) ** k / _FACT[2 * k + 4] for k in _K])           # (θ² + 2 cos θ - 2) / (2 θ⁴)
_S_Q3 = _series([(-1) ** k * (k + 1) / _FACT[2 * k + 5] for k in _K])  # (2θ - 3 sin θ + θ cos θ) / (2 θ⁵)
_S_LOG = _series([(-1) ** n * _BERN[n] / _FACT[2 * n + 2] for n in _K])  # 1/θ² - (1 + cos θ)/(2 θ sin θ)
_S_COSF = _series([(-1) ** k / _FACT[2 * k] for k in _K])             # cos θ


def _sin_c(t2):  # sin θ / θ
    return _ratio(t2, lambda s: np.sin(np.sqrt(s)) / np.sqrt(s), _S_SIN)


def _cos_c(t2):  # (1 - cos θ) / θ²
    return _ratio(t2, lambda s: (1 - np.cos(np.sqrt(s))) / s, _S_COS)


def _sin_c3(t2):  # (θ - sin θ) / θ³
    return _ratio(t2, lambda s: (np.sqrt(s) - np.sin(np.sqrt(s))) / (s * np.sqrt(s)), _S_SIN3)


def _log_c(t2):  # 1/θ² - (1 + cos θ) / (2 θ sin θ)
    return _ratio(t2, lambda s: 1 / s - (1 + np.cos(np.sqrt(s))) / (2 * np.sqrt(s) * np.sin(np.sqrt(s))), _S_LOG)


def _q_c2(t2):  # (θ² + 2 cos θ - 2) / (2 θ⁴)
    return _ratio(t2, lambda s: (s + 2 * np.cos(np.sqrt(s)) - 2) / (2 * s * s), _S_Q2)


def _q_c3(t2):  # (2θ - 3 sin θ + θ cos θ) / (2 θ⁵)
    def closed(s):
        t = np.sqrt(s)
        return (2 * t - 3 * np.sin(t) + t * np.cos(t)) / (2 * s * s * t)
    return _ratio(t2, closed, _S_Q3)


# ---------------------------------------------------------------- quaternions
def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` of (..., 4) quaternions."""
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - np.sum(av * bv, axis=-1, keepdims=True)
    v = aw * bv + bw * av + cross(av, bv)
    return np.concatenate([w, v], axis=-1)


def quat_conjugate(q: np.ndarray) -> np.ndarray:
    return np.concatenate([q[..., :1], -q[..., 1:]], axis=-1)


def quat_normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternion (complex-step safe: divides by sqrt(q·q), not |q|)."""
    return q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True))


def quat_to_rotation(q: np.ndarray) -> np.ndarray:
    """Rotation matrix (..., 3, 3) of a (not necessarily unit) quaternion (..., 4)."""
    q = quat_normalize(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    R = np.empty(q.shape[:-1] + (3, 3), dtype=q.dtype)
    R[..., 0, 0] = 1 - 2 * (y * y + z * z)
    R[..., 0, 1] = 2 * (x * y - w * z)
    R[..., 0, 2] = 2 * (x * z + w * y)
    R[..., 1, 0] = 2 * (x * y + w * z)
    R[..., 1, 1] = 1 - 2 * (x * x + z * z)
    R[..., 1, 2] = 2 * (y * z - w * x)
    R[..., 2, 0] = 2 * (x * z - w * y)
    R[..., 2, 1] = 2 * (y * z + w * x)
    R[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return R


def rotation_to_quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (w >= 0) of a rotation matrix (..., 3, 3), real inputs (Shepperd's method:
    the largest of the four candidate pivots keeps the division well conditioned)."""
    R = np.asarray(R, dtype=float)
    m00, m11, m22 = R[..., 0, 0], R[..., 1, 1], R[..., 2, 2]
    cand = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    k = np.argmax(cand, axis=-1)
    s = 2.0 * np.sqrt(np.take_along_axis(cand, k[..., None], -1)[..., 0])
    d21, d02, d10 = R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]
    s01, s02, s12 = R[..., 0, 1] + R[..., 1, 0], R[..., 0, 2] + R[..., 2, 0], R[..., 1, 2] + R[..., 2, 1]
    opts = np.stack([
        np.stack([s * s / 4, d21, d02, d10], -1),
        np.stack([d21, s * s / 4, s01, s02], -1),
        np.stack([d02, s01, s * s / 4, s12], -1),
        np.stack([d10, s02, s12, s * s / 4], -1),
    ], -2)
    q = np.take_along_axis(opts, k[..., None, None], -2)[..., 0, :] / s[..., None]
    return q * np.where(q[..., :1] < 0, -1.0, 1.0)


# ---------------------------------------------------------------- SO(3)
def so3_exp(w: np.ndarray) -> np.ndarray:
    """Rotation matrix ``exp([w]x)`` (..., 3) -> (..., 3, 3) (Rodrigues)."""
    t2 = np.sum(w * w, axis=-1)
    W = skew(w)
    return np.eye(3) + _sin_c(t2)[..., None, None] * W + _cos_c(t2)[..., None, None] * (W @ W)


def so3_exp_quat(w: np.ndarray) -> np.ndarray:
    """Unit quaternion of ``exp([w]x)``: ``(cos θ/2, sin(θ/2)/θ · w)``."""
    t2 = np.sum(w * w, axis=-1)
    half = _sin_c(t2 / 4) * 0.5
    c = _ratio(t2 / 4, lambda s: np.cos(np.sqrt(s)), _S_COSF)
    return np.concatenate([c[..., None], half[..., None] * w], axis=-1)


def quat_log(q: np.ndarray) -> np.ndarray:
    """Rotation vector (..., 3) of a quaternion, angle in [0, π] (shortest path)."""
    q = quat_normalize(q)
    sign = np.where(np.real(q[..., :1]) < 0, -1.0, 1.0)
    q = q * sign
    w, v = q[..., 0], q[..., 1:]
    s2 = np.sum(v * v, axis=-1)
    # θ = 2 atan2(|v|, w); ratio θ/|v| evaluated through |v|² for complex-step safety
    small = np.real(s2) < 1e-12
    s_safe = np.sqrt(np.where(small, np.ones_like(s2), s2))
    ratio = np.where(small, 2.0 / w * (1 - s2 / (3 * w * w)), 2.0 * np.arctan2(s_safe, w) / s_safe) \
        if not np.iscomplexobj(q) else np.where(small, 2.0 / w * (1 - s2 / (3 * w * w)),
                                                2.0 * np.arctan(s_safe / w) / s_safe)
    return ratio[..., None] * v


def so3_log(R: np.ndarray) -> np.ndarray:
    """Rotation vector of a rotation matrix (real inputs)."""
    R = np.asarray(R, dtype=float)
    tr = R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2]
    if not np.all(tr > 0.0):
        return quat_log(rotation_to_quat(R))
    # every angle below 120°: w = √(1 + tr)/2 > 1/2, so the trace pivot of Shepperd's method is well
    # conditioned for every rotation and the per-row pivot choice can be skipped (the cost terms'
    # orientation residuals are near the identity)
    w = 0.5 * np.sqrt(1.0 + tr)
    v = np.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1)
    return quat_log(np.concatenate([w[..., None], v / (4.0 * w)[..., None]], -1))


def so3_right_jacobian(w: np.ndarray) -> np.ndarray:
    """Right Jacobian ``Jr(w)``: ``exp(w + δ) ≈ exp(w) exp(Jr(w) δ)``."""
    t2 = np.sum(w * w, axis=-1)
    W = skew(w)
    return np.eye(3) - _cos_c(t2)[..., None, None] * W + _sin_c3(t2)[..., None, None] * (W @ W)


def so3_right_jacobian_inverse(w: np.ndarray) -> np.ndarray:
    """Inverse of :func:`so3_right_jacobian`."""
    t2 = np.sum(w * w, axis=-1)
    W = skew(w)
    return np.eye(3) + 0.5 * W + _log_c(t2)[..., None, None] * (W @ W)


def so3_left_jacobian(w: np.ndarray) -> np.ndarray:
    return so3_right_jacobian(-w)


def so3_left_jacobian_inverse(w: np.ndarray) -> np.ndarray:
    return so3_right_jacobian_inverse(-w)


# ---------------------------------------------------------------- SE(3)
def se3_exp(xi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``exp(ξ)`` for ξ = (linear, angular) (..., 6) -> (R (..., 3, 3), p (..., 3))."""
    rho, w = xi[..., :3], xi[..., 3:]
    R = so3_exp(w)
    p = (so3_left_jacobian(w) @ rho[..., None])[..., 0]
    return R, p


def se3_log(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Inverse of :func:`se3_exp` (real inputs)."""
    w = so3_log(R)
    rho = (so3_left_jacobian_inverse(w) @ p[..., None])[..., 0]
    return np.concatenate([rho, w], axis=-1)


def _se3_q(rho: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Off-diagonal block Q(ρ, φ) of the SE(3) left Jacobian (Barfoot & Furgale 2014)."""
    t2 = np.sum(w * w, axis=-1)[..., None, None]
    P, W = skew(rho), skew(w)
    WP, PW = W @ P, P @ W
    WPW = WP @ W
    return (0.5 * P + _sin_c3(t2) * (WP + PW + WPW)
            + _q_c2(t2) * (W @ WP + PW @ W - 3 * WPW)
            + _q_c3(t2) * (WPW @ W + W @ WPW))


def se3_right_jacobian(xi: np.ndarray) -> np.ndarray:
    """Right Jacobian of SE(3) (Pinocchio's ``Jexp6``), (..., 6) -> (..., 6, 6)."""
    rho, w = xi[..., :3], xi[..., 3:]
    J = np.zeros(xi.shape[:-1] + (6, 6), dtype=xi.dtype)
    Jr = so3_right_jacobian(w)
    J[..., :3, :3] = Jr
    J[..., 3:, 3:] = Jr
    J[..., :3, 3:] = _se3_q(-rho, -w)
    return J


def se3_right_jacobian_inverse(xi: np.ndarray) -> np.ndarray:
    """Inverse of :func:`se3_right_jacobian` (Pinocchio's ``Jlog6`` at ``exp(ξ)``)."""
    rho, w = xi[..., :3], xi[..., 3:]
    Ji = so3_right_jacobian_inverse(w)
    J = np.zeros(xi.shape[:-1] + (6, 6), dtype=xi.dtype)
    J[..., :3, :3] = Ji
    J[..., 3:, 3:] = Ji
    J[..., :3, 3:] = -Ji @ _se3_q(-rho, -w) @ Ji
    return J
