"""Compiled SO(3)/SE(3) configuration arithmetic on a packed joint table: ``q ⊕ w`` and
``x1 ⊖ x0`` for hinge/slide, ball and free joints, state by state, for compiled loops that run
many small steps (the solvers' compiled rollout gets them through
:meth:`dynamics.Backend.compiled_forward_dynamics`).

The same closed forms and Taylor series (below θ² = 0.25) as the batched numpy implementation,
:mod:`dynamics.lie` / :mod:`dynamics.joints`, which is the reference; tests/solvers/test_rollout_numba.py
checks that they agree to rounding. ``joints`` rows are ``(kind, qadr, dofadr)`` with kind 0 =
hinge/slide, 1 = ball, 2 = free (:func:`joint_rows`).
"""

from __future__ import annotations

import math

import numpy as np

from .jit import jit

_SCALAR, _BALL, _FREE = 0, 1, 2          # joint kinds of the `joints` rows (kind, qadr, dofadr)

# ---------------------------------------------------------------- series of dynamics.lie
_SMALL = 0.25                            # dynamics.lie._SMALL
_SIN, _COS, _SIN3, _LOG, _COSF, _Q2, _Q3 = 0, 1, 2, 3, 4, 5, 6
_F = [math.factorial(n) for n in range(40)]
_BERN = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510]
_COEFS = np.array([
    [(-1) ** k / _F[2 * k + 1] for k in range(8)],                     # sin θ / θ
    [(-1) ** k / _F[2 * k + 2] for k in range(8)],                     # (1 - cos θ) / θ²
    [(-1) ** k / _F[2 * k + 3] for k in range(8)],                     # (θ - sin θ) / θ³
    [(-1) ** n * _BERN[n] / _F[2 * n + 2] for n in range(8)],          # 1/θ² - (1 + cos θ)/(2 θ sin θ)
    [(-1) ** k / _F[2 * k] for k in range(8)],                         # cos θ
    [(-1) ** k / _F[2 * k + 4] for k in range(8)],                     # (θ² + 2 cos θ - 2) / (2 θ⁴)
    [(-1) ** k * (k + 1) / _F[2 * k + 5] for k in range(8)],           # (2θ - 3 sin θ + θ cos θ) / (2 θ⁵)
])


@jit
def _ratio(s, which):
    """dynamics.lie._ratio of the function ``which`` of θ² = s."""
    if s < _SMALL:
        out = _COEFS[which, 7]
        for i in range(6, -1, -1):
            out = out * s + _COEFS[which, i]
        return out
    t = np.sqrt(s)
    if which == _SIN:
        return np.sin(t) / t
    if which == _COS:
        return (1 - np.cos(t)) / s
    if which == _SIN3:
        return (t - np.sin(t)) / (s * t)
    if which == _LOG:
        return 1 / s - (1 + np.cos(t)) / (2 * t * np.sin(t))
    if which == _Q2:
        return (s + 2 * np.cos(t) - 2) / (2 * s * s)
    if which == _Q3:
        return (2 * t - 3 * np.sin(t) + t * np.cos(t)) / (2 * s * s * t)
    return np.cos(t)


@jit
def _qmul(aw, ax, ay, az, bw, bx, by, bz):
    """Hamilton product (lie.quat_multiply)."""
    return (aw * bw - (ax * bx + ay * by + az * bz), aw * bx + bw * ax + (ay * bz - az * by),
            aw * by + bw * ay + (az * bx - ax * bz), aw * bz + bw * az + (ax * by - ay * bx))


@jit
def _qnormalize(w, x, y, z):
    n = np.sqrt(w * w + x * x + y * y + z * z)
    return w / n, x / n, y / n, z / n


@jit
def _exp_quat(w0, w1, w2):
    """lie.so3_exp_quat."""
    s = (w0 * w0 + w1 * w1 + w2 * w2) / 4
    h = _ratio(s, _SIN) * 0.5
    return _ratio(s, _COSF), h * w0, h * w1, h * w2


@jit
def _quat_log(w, x, y, z):
    """lie.quat_log (angle in [0, π])."""
    w, x, y, z = _qnormalize(w, x, y, z)
    if w < 0:
        w, x, y, z = -w, -x, -y, -z
    s2 = x * x + y * y + z * z
    if s2 < 1e-12:
        r = 2.0 / w * (1 - s2 / (3 * w * w))
    else:
        sn = np.sqrt(s2)
        r = 2.0 * np.arctan2(sn, w) / sn
    return r * x, r * y, r * z


@jit
def _rotate(qw, qx, qy, qz, v0, v1, v2, transpose):
    """``R v`` (or ``Rᵀ v``) with R = lie.quat_to_rotation(q) (q normalised first)."""
    w, x, y, z = _qnormalize(qw, qx, qy, qz)
    r00, r01, r02 = 1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)
    r10, r11, r12 = 2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)
    r20, r21, r22 = 2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)
    if transpose:
        return r00 * v0 + r10 * v1 + r20 * v2, r01 * v0 + r11 * v1 + r21 * v2, r02 * v0 + r12 * v1 + r22 * v2
    return r00 * v0 + r01 * v1 + r02 * v2, r10 * v0 + r11 * v1 + r12 * v2, r20 * v0 + r21 * v1 + r22 * v2


@jit
def _so3_jac(m0, m1, m2, r0, r1, r2, a, b):
    """``(1 + a [m]x + b [m]x²) r`` (the SO(3) Jacobians of dynamics.lie applied to a vector)."""
    c0, c1, c2 = m1 * r2 - m2 * r1, m2 * r0 - m0 * r2, m0 * r1 - m1 * r0
    d0, d1, d2 = m1 * c2 - m2 * c1, m2 * c0 - m0 * c2, m0 * c1 - m1 * c0
    return r0 + a * c0 + b * d0, r1 + a * c1 + b * d1, r2 + a * c2 + b * d2


@jit
def integrate_q(joints, q, w, out):
    """Configuration part of ``q ⊕ w`` (dynamics.joints.integrate): reads q[:nq], w[:nv], writes out[:nq]."""
    for j in range(joints.shape[0]):
        kind, qa, va = joints[j, 0], joints[j, 1], joints[j, 2]
        if kind == _SCALAR:
            out[qa] = q[qa] + w[va]
            continue
        o = 0 if kind == _BALL else 3        # free joint: position first, then the quaternion
        e0, e1, e2, e3 = _exp_quat(w[va + o], w[va + o + 1], w[va + o + 2])
        if kind == _FREE:
            # position += R(quat) · (translation of exp_SE3(ρ, φ)) = R · Jr(-φ) ρ
            m0, m1, m2 = -w[va + 3], -w[va + 4], -w[va + 5]
            t2 = m0 * m0 + m1 * m1 + m2 * m2
            p0, p1, p2 = _so3_jac(m0, m1, m2, w[va], w[va + 1], w[va + 2], -_ratio(t2, _COS), _ratio(t2, _SIN3))
            d0, d1, d2 = _rotate(q[qa + 3], q[qa + 4], q[qa + 5], q[qa + 6], p0, p1, p2, False)
            out[qa], out[qa + 1], out[qa + 2] = q[qa] + d0, q[qa + 1] + d1, q[qa + 2] + d2
        a = qa + o
        out[a], out[a + 1], out[a + 2], out[a + 3] = _qmul(q[a], q[a + 1], q[a + 2], q[a + 3], e0, e1, e2, e3)


@jit
def difference_x(joints, nq, x0, x1, out):
    """``x1 ⊖ x0`` (solvers.state_space.difference; configuration part by dynamics.joints.difference)."""
    nv = out.shape[0] // 2
    for i in range(nv):
        out[nv + i] = x1[nq + i] - x0[nq + i]
    for j in range(joints.shape[0]):
        kind, qa, va = joints[j, 0], joints[j, 1], joints[j, 2]
        if kind == _SCALAR:
            out[va] = x1[qa] - x0[qa]
            continue
        o = 0 if kind == _BALL else 3
        a = qa + o
        aw, ax, ay, az = _qnormalize(x0[a], x0[a + 1], x0[a + 2], x0[a + 3])
        bw, bx, by, bz = _qnormalize(x1[a], x1[a + 1], x1[a + 2], x1[a + 3])
        w0, w1, w2 = _quat_log(*_qmul(aw, -ax, -ay, -az, bw, bx, by, bz))
        out[va + o], out[va + o + 1], out[va + o + 2] = w0, w1, w2
        if kind == _FREE:
            # ρ = Jl⁻¹(φ) Rᵀ (p1 - p0) with Jl⁻¹(φ) = Jr⁻¹(-φ) = 1 - ½[φ]x + c [φ]x²
            d0, d1, d2 = _rotate(aw, ax, ay, az, x1[qa] - x0[qa], x1[qa + 1] - x0[qa + 1], x1[qa + 2] - x0[qa + 2],
                                 True)
            t2 = w0 * w0 + w1 * w1 + w2 * w2
            out[va], out[va + 1], out[va + 2] = _so3_jac(-w0, -w1, -w2, d0, d1, d2, 0.5, _ratio(t2, _LOG))


@jit
def difference_batch(joints, nq, x0, x1, out):
    """``out[b] = x1[b] ⊖ x0[b]`` for x0, x1 (B, nx), out (B, 2 nv): :func:`difference_x` over a batch,
    callable from Python (the solvers' gaps and state differences on floating-base robots)."""
    for b in range(out.shape[0]):
        difference_x(joints, nq, x0[b], x1[b], out[b])


@jit
def integrate_batch(joints, nq, x, dx, out):
    """``out[b] = x[b] ⊕ dx[b]`` for x (B, nx), dx (B, 2 nv), out (B, nx): :func:`integrate_q` and
    ``v + dv`` over a batch, callable from Python (the numpy Lie algebra costs ~0.3 ms per call on a
    floating-base robot)."""
    nv = dx.shape[1] // 2
    for b in range(out.shape[0]):
        integrate_q(joints, x[b], dx[b], out[b])
        for i in range(nv):
            out[b, nq + i] = x[b, nq + i] + dx[b, nv + i]


@jit
def _skew(a0, a1, a2, out):
    out[0, 0], out[0, 1], out[0, 2] = 0.0, -a2, a1
    out[1, 0], out[1, 1], out[1, 2] = a2, 0.0, -a0
    out[2, 0], out[2, 1], out[2, 2] = -a1, a0, 0.0


@jit
def _mm3(A, B, out):
    for i in range(3):
        for j in range(3):
            out[i, j] = A[i, 0] * B[0, j] + A[i, 1] * B[1, j] + A[i, 2] * B[2, j]


@jit
def _so3_jr_inv(w0, w1, w2, W, WW, out):
    """``Jr⁻¹(φ) = 1 + ½[φ]x + c [φ]x²`` (lie.so3_right_jacobian_inverse); W, WW scratch (3, 3)."""
    _skew(w0, w1, w2, W)
    _mm3(W, W, WW)
    c = _ratio(w0 * w0 + w1 * w1 + w2 * w2, _LOG)
    for i in range(3):
        for j in range(3):
            out[i, j] = 0.5 * W[i, j] + c * WW[i, j]
        out[i, i] += 1.0


@jit
def so3_right_jacobian_inverse(w0, w1, w2, W, WW, out):
    """``Jr⁻¹(φ)`` (3, 3) into out (lie.so3_right_jacobian_inverse); W, WW scratch (3, 3)."""
    _so3_jr_inv(w0, w1, w2, W, WW, out)


@jit
def so3_log_matrix(R):
    """``log(R)`` (3 floats) of a rotation matrix R (3, 3) (lie.so3_log): its unit quaternion by the
    largest of the four pivots (Shepperd 1978: no cancellation near 0 or π), then :func:`_quat_log`."""
    r00, r11, r22 = R[0, 0], R[1, 1], R[2, 2]
    tr = r00 + r11 + r22
    if tr >= r00 and tr >= r11 and tr >= r22:
        s = 2.0 * np.sqrt(1.0 + tr)
        w, x, y, z = 0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s
    elif r00 >= r11 and r00 >= r22:
        s = 2.0 * np.sqrt(1.0 + r00 - r11 - r22)
        w, x, y, z = (R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s
    elif r11 >= r22:
        s = 2.0 * np.sqrt(1.0 + r11 - r00 - r22)
        w, x, y, z = (R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s
    else:
        s = 2.0 * np.sqrt(1.0 + r22 - r00 - r11)
        w, x, y, z = (R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s
    return _quat_log(w, x, y, z)


@jit
def difference_jacobian(joints, d, J, tmp):
    """``J = ∂(q1 ⊖ q0)/∂q1`` (nv, nv) (dynamics.joints.difference_jacobians' second output) from
    the difference ``d = x1 ⊖ x0`` (its first nv entries are used): identity on hinge/slide dofs,
    ``Jr⁻¹(φ)`` on ball joints, the SE(3) ``Jr⁻¹(ρ, φ)`` (lie.se3_right_jacobian_inverse) on free
    joints. tmp: scratch (8, 3, 3)."""
    nv = J.shape[0]
    for i in range(nv):
        for k in range(nv):
            J[i, k] = 0.0
    Ji, W, WW, B, C, Q = tmp[0], tmp[1], tmp[2], tmp[5], tmp[6], tmp[7]
    for j in range(joints.shape[0]):
        kind, va = joints[j, 0], joints[j, 2]
        if kind == _SCALAR:
            J[va, va] = 1.0
            continue
        o = 0 if kind == _BALL else 3
        w0, w1, w2 = d[va + o], d[va + o + 1], d[va + o + 2]
        _so3_jr_inv(w0, w1, w2, W, WW, Ji)
        for r in range(3):
            for c in range(3):
                J[va + o + r, va + o + c] = Ji[r, c]
        if kind == _BALL:
            continue
        for r in range(3):
            for c in range(3):
                J[va + r, va + c] = Ji[r, c]
        _se3_q(-d[va], -d[va + 1], -d[va + 2], -w0, -w1, -w2, tmp, Q)     # Q(-ρ, -φ)
        # upper-right block -Jr⁻¹ Q Jr⁻¹
        _mm3(Ji, Q, B)
        _mm3(B, Ji, C)
        for r in range(3):
            for c in range(3):
                J[va + r, va + 3 + c] = -C[r, c]


@jit
def _se3_q(r0, r1, r2, w0, w1, w2, tmp, Q):
    """``Q(ρ, φ)`` (3, 3) (lie._se3_q, Barfoot & Furgale 2014): ½P + c3 (WP + PW + WPW) + q2 (W WP +
    PW W - 3 WPW) + q3 (WPW W + W WPW) with P = [ρ]x, W = [φ]x; tmp (8, 3, 3) scratch (its last
    slot unused, so Q may be tmp[7])."""
    W, WW, P, A, B, C = tmp[1], tmp[2], tmp[3], tmp[4], tmp[5], tmp[6]
    _skew(r0, r1, r2, P)
    _skew(w0, w1, w2, W)
    t2 = w0 * w0 + w1 * w1 + w2 * w2
    c3, q2, q3 = _ratio(t2, _SIN3), _ratio(t2, _Q2), _ratio(t2, _Q3)
    _mm3(W, P, A)            # WP
    _mm3(P, W, B)            # PW
    _mm3(A, W, C)            # WPW
    _mm3(W, A, WW)           # W WP
    for r in range(3):
        for c in range(3):
            Q[r, c] = 0.5 * P[r, c] + c3 * (A[r, c] + B[r, c] + C[r, c]) + q2 * (WW[r, c] - 3 * C[r, c])
    _mm3(B, W, WW)           # PW W
    for r in range(3):
        for c in range(3):
            Q[r, c] += q2 * WW[r, c]
    _mm3(C, W, WW)           # WPW W
    _mm3(W, C, A)            # W WPW
    for r in range(3):
        for c in range(3):
            Q[r, c] += q3 * (WW[r, c] + A[r, c])


@jit
def _so3_exp_jr(w0, w1, w2, W, WW, R, Jr):
    """``R = exp([φ]x) = 1 + sinc [φ]x + c2 [φ]x²`` and ``Jr(φ) = 1 - c2 [φ]x + c3 [φ]x²``
    (lie.so3_exp, lie.so3_right_jacobian); W, WW scratch (3, 3)."""
    _skew(w0, w1, w2, W)
    _mm3(W, W, WW)
    t2 = w0 * w0 + w1 * w1 + w2 * w2
    s1, c2, c3 = _ratio(t2, _SIN), _ratio(t2, _COS), _ratio(t2, _SIN3)
    for i in range(3):
        for j in range(3):
            R[i, j] = s1 * W[i, j] + c2 * WW[i, j]
            Jr[i, j] = -c2 * W[i, j] + c3 * WW[i, j]
        R[i, i] += 1.0
        Jr[i, i] += 1.0


@jit
def integrate_jacobians(joints, w, Jq, Jw, tmp):
    """``Jq = ∂(q ⊕ w)/∂q`` and ``Jw = ∂(q ⊕ w)/∂w`` (nv, nv) in tangent coordinates at the result
    (dynamics.joints.integrate_jacobians; they depend on w only): identity on hinge/slide dofs;
    ``exp(-φ)`` and ``Jr(φ)`` on ball joints; on free joints, with (R, p) = exp_SE3(ρ, φ), the motion
    transform ``[[Rᵀ, -Rᵀ[p]x], [0, Rᵀ]]`` and the SE(3) right Jacobian ``[[Jr, Q(-ρ, -φ)], [0, Jr]]``.
    tmp: scratch (8, 3, 3)."""
    nv = Jq.shape[0]
    for i in range(nv):
        for k in range(nv):
            Jq[i, k] = 0.0
            Jw[i, k] = 0.0
    W, WW, R, Jr = tmp[1], tmp[2], tmp[3], tmp[4]
    for j in range(joints.shape[0]):
        kind, va = joints[j, 0], joints[j, 2]
        if kind == _SCALAR:
            Jq[va, va] = 1.0
            Jw[va, va] = 1.0
            continue
        o = 0 if kind == _BALL else 3
        w0, w1, w2 = w[va + o], w[va + o + 1], w[va + o + 2]
        _so3_exp_jr(w0, w1, w2, W, WW, R, Jr)
        for r in range(3):
            for c in range(3):
                Jq[va + o + r, va + o + c] = R[c, r]
                Jw[va + o + r, va + o + c] = Jr[r, c]
        if kind == _BALL:
            continue
        # p = Jl(φ) ρ = Jr(-φ) ρ; Jq's upper-right block -Rᵀ [p]x
        t2 = w0 * w0 + w1 * w1 + w2 * w2
        p0, p1, p2 = _so3_jac(-w0, -w1, -w2, w[va], w[va + 1], w[va + 2], -_ratio(t2, _COS), _ratio(t2, _SIN3))
        for r in range(3):
            for c in range(3):
                Jq[va + r, va + c] = R[c, r]
                Jw[va + r, va + c] = Jr[r, c]
            # row r of Rᵀ[p]x: (Rᵀ)[r, :] · columns of [p]x
            a0, a1, a2 = R[0, r], R[1, r], R[2, r]
            Jq[va + r, va + 3] = -(a1 * p2 - a2 * p1)
            Jq[va + r, va + 4] = -(a2 * p0 - a0 * p2)
            Jq[va + r, va + 5] = -(a0 * p1 - a1 * p0)
        Q = tmp[7]
        _se3_q(-w[va], -w[va + 1], -w[va + 2], -w0, -w1, -w2, tmp, Q)
        for r in range(3):
            for c in range(3):
                Jw[va + r, va + 3 + c] = Q[r, c]


@jit
def integrate_with_jacobians_batch(joints, q, w, out, Jq, Jw):
    """``out[b] = q[b] ⊕ w[b]`` (B, nq) and its Jacobians ``Jq[b]``, ``Jw[b]`` (B, nv, nv)
    (:func:`integrate_q`, :func:`integrate_jacobians`) for q (B, nq), w (B, nv), callable from
    Python (the Euler step of a floating-base robot; numpy's takes ~0.3 ms per call)."""
    tmp = np.empty((8, 3, 3))
    for b in range(q.shape[0]):
        integrate_q(joints, q[b], w[b], out[b])
        integrate_jacobians(joints, w[b], Jq[b], Jw[b], tmp)


def joint_rows(model) -> np.ndarray:
    """The ``(kind, qadr, dofadr)`` table of ``model``'s joints (int64, (njoints, 3))."""
    rows = [(_SCALAR, int(qa), int(va)) for qa, va in zip(model.scalar_q_index, model.scalar_v_index)]
    rows += [(_BALL, qa, va) for qa, va in model.ball_adr] + [(_FREE, qa, va) for qa, va in model.free_adr]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)
