"""Joint models: motion subspaces, joint placements and configuration-space operations
(integrate, difference and their Jacobians) for the four MuJoCo joint types.

Every backend draws its joint-specific facts from here. Joint frames follow MuJoCo: a joint acts
between the body's pre-joint frame (parent frame ∘ body offset) and the body frame; hinge and ball
joints rotate about an anchor point ``jnt_pos`` given in the body frame. Because axis and anchor are
fixed in the child frame, every motion subspace ``S`` is constant in the child frame.

Configuration layout is MuJoCo's qpos: hinge/slide one coordinate (the transform uses
``q - qpos0``, MuJoCo's ``ref``); ball a unit quaternion (w, x, y, z); free a world position then a
unit quaternion. Velocities are body-frame (local): ball = angular velocity in the child frame, free =
(linear, angular) velocity of the body frame in body coordinates (Pinocchio's convention; MuJoCo's
free-joint linear velocity is in world coordinates — see ``RobotModel.v_from_qvel``).
Tangent perturbations are right perturbations ``q ⊕ δ``: SO(3) for ball joints and SE(3) for free
joints (the same group Pinocchio uses).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from . import lie
from .spatial import motion_transform, skew


class JointType(IntEnum):
    """Joint types, numbered as MuJoCo's ``mjtJoint``."""

    FREE = 0
    BALL = 1
    SLIDE = 2
    HINGE = 3


JOINT_NQ = {JointType.FREE: 7, JointType.BALL: 4, JointType.SLIDE: 1, JointType.HINGE: 1}
JOINT_NV = {JointType.FREE: 6, JointType.BALL: 3, JointType.SLIDE: 1, JointType.HINGE: 1}


def motion_subspace(jtype: int, axis: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Constant motion subspace ``S`` (6, nv_j) of a joint in its child frame."""
    jtype = JointType(jtype)
    if jtype is JointType.HINGE:
        return np.concatenate([np.cross(anchor, axis), axis])[:, None]
    if jtype is JointType.SLIDE:
        return np.concatenate([axis, np.zeros(3)])[:, None]
    if jtype is JointType.BALL:
        return np.vstack([skew(anchor), np.eye(3)])
    return np.eye(6)


def joint_placements(model, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Placement of every link frame in its parent link frame.

    q: (B, nq). Returns R (B, L, 3, 3) and p (B, L, 3), ``(R, p) = (R0, p0) ∘ joint(q)``.
    """
    B = q.shape[0]
    L = model.nlinks
    dtype = np.result_type(q, np.float64)
    RJ = np.empty((B, L, 3, 3), dtype=dtype)
    pJ = np.empty((B, L, 3), dtype=dtype)
    groups = model.links_by_type
    idx = groups[JointType.HINGE]
    if idx.size:
        theta = q[:, model.link_qadr[idx]] - model.link_qpos0[idx]
        R = lie.so3_exp(theta[..., None] * model.link_axis[idx])
        anc = model.link_anchor[idx]
        RJ[:, idx] = R
        pJ[:, idx] = anc - (R @ anc[..., None])[..., 0]
    idx = groups[JointType.SLIDE]
    if idx.size:
        disp = q[:, model.link_qadr[idx]] - model.link_qpos0[idx]
        RJ[:, idx] = np.eye(3)
        pJ[:, idx] = disp[..., None] * model.link_axis[idx]
    idx = groups[JointType.BALL]
    if idx.size:
        cols = model.link_qadr[idx][:, None] + np.arange(4)
        R = lie.quat_to_rotation(q[:, cols])
        anc = model.link_anchor[idx]
        RJ[:, idx] = R
        pJ[:, idx] = anc - (R @ anc[..., None])[..., 0]
    idx = groups[JointType.FREE]
    if idx.size:
        adr = model.link_qadr[idx]
        RJ[:, idx] = lie.quat_to_rotation(q[:, adr[:, None] + np.arange(3, 7)])
        pJ[:, idx] = q[:, adr[:, None] + np.arange(3)]
    R = model.link_R0 @ RJ
    p = model.link_p0 + (model.link_R0 @ pJ[..., None])[..., 0]
    return R, p


# ---------------------------------------------------------------- configuration space
def integrate(model, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``q ⊕ v`` for q (B, nq), v (B, nv)."""
    if model.is_euclidean:
        return q + v
    out = q.astype(np.result_type(q, v), copy=True)
    s = model.scalar_q_index
    out[:, s] = q[:, s] + v[:, model.scalar_v_index]
    for qa, va in model.ball_adr:
        out[:, qa:qa + 4] = lie.quat_multiply(q[:, qa:qa + 4], lie.so3_exp_quat(v[:, va:va + 3]))
    for qa, va in model.free_adr:
        R = lie.quat_to_rotation(q[:, qa + 3:qa + 7])
        _, dp = lie.se3_exp(v[:, va:va + 6])
        out[:, qa:qa + 3] = q[:, qa:qa + 3] + (R @ dp[..., None])[..., 0]
        out[:, qa + 3:qa + 7] = lie.quat_multiply(q[:, qa + 3:qa + 7], lie.so3_exp_quat(v[:, va + 3:va + 6]))
    return out


def difference(model, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    """``q1 ⊖ q0``: the tangent vector v with ``q0 ⊕ v = q1`` (B, nv)."""
    if model.is_euclidean:
        return q1 - q0
    out = np.empty((q0.shape[0], model.nv), dtype=np.result_type(q0, q1))
    out[:, model.scalar_v_index] = q1[:, model.scalar_q_index] - q0[:, model.scalar_q_index]
    for qa, va in model.ball_adr:
        dq = lie.quat_multiply(lie.quat_conjugate(lie.quat_normalize(q0[:, qa:qa + 4])), lie.quat_normalize(q1[:, qa:qa + 4]))
        out[:, va:va + 3] = lie.quat_log(dq)
    for qa, va in model.free_adr:
        quat0 = lie.quat_normalize(q0[:, qa + 3:qa + 7])
        Rt = np.swapaxes(lie.quat_to_rotation(quat0), -1, -2)
        dp = (Rt @ (q1[:, qa:qa + 3] - q0[:, qa:qa + 3])[..., None])[..., 0]
        w = lie.quat_log(lie.quat_multiply(lie.quat_conjugate(quat0), lie.quat_normalize(q1[:, qa + 3:qa + 7])))
        out[:, va:va + 3] = (lie.so3_left_jacobian_inverse(w) @ dp[..., None])[..., 0]
        out[:, va + 3:va + 6] = w
    return out


def integrate_jacobians(model, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Jacobians of ``q ⊕ v`` in tangent coordinates at the result: w.r.t. q and w.r.t. v, (B, nv, nv)."""
    B = q.shape[0]
    dtype = np.result_type(q, v)
    if model.is_euclidean:
        Jq = np.empty((B, model.nv, model.nv), dtype=dtype)
        Jq[:] = np.eye(model.nv, dtype=dtype)
        return Jq, Jq.copy()
    Jq = np.zeros((B, model.nv, model.nv), dtype=dtype)
    Jv = np.zeros((B, model.nv, model.nv), dtype=dtype)
    s = model.scalar_v_index
    Jq[:, s, s] = 1.0
    Jv[:, s, s] = 1.0
    for _, va in model.ball_adr:
        w = v[:, va:va + 3]
        sl = slice(va, va + 3)
        Jq[:, sl, sl] = lie.so3_exp(-w)
        Jv[:, sl, sl] = lie.so3_right_jacobian(w)
    for _, va in model.free_adr:
        xi = v[:, va:va + 6]
        sl = slice(va, va + 6)
        R, p = lie.se3_exp(xi)
        Jq[:, sl, sl] = motion_transform(R, p)
        Jv[:, sl, sl] = lie.se3_right_jacobian(xi)
    return Jq, Jv


def difference_jacobians(model, q0: np.ndarray, q1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Jacobians of ``q1 ⊖ q0`` w.r.t. q0 and q1 (tangent perturbations), (B, nv, nv)."""
    B = q0.shape[0]
    if model.is_euclidean:
        dtype = np.result_type(q0, q1)
        eye = np.eye(model.nv, dtype=dtype)
        J0 = np.empty((B, model.nv, model.nv), dtype=dtype)
        J1 = np.empty((B, model.nv, model.nv), dtype=dtype)
        J0[:] = 0.0 - eye
        J1[:] = eye
        return J0, J1
    d = difference(model, q0, q1)
    dtype = d.dtype
    J0 = np.zeros((B, model.nv, model.nv), dtype=dtype)
    J1 = np.zeros((B, model.nv, model.nv), dtype=dtype)
    s = model.scalar_v_index
    J0[:, s, s] = -1.0
    J1[:, s, s] = 1.0
    for _, va in model.ball_adr:
        sl = slice(va, va + 3)
        w = d[:, sl]
        Ji = lie.so3_right_jacobian_inverse(w)
        J1[:, sl, sl] = Ji
        J0[:, sl, sl] = -Ji @ np.swapaxes(lie.so3_exp(w), -1, -2)
    for _, va in model.free_adr:
        sl = slice(va, va + 6)
        xi = d[:, sl]
        Ji = lie.se3_right_jacobian_inverse(xi)
        R, p = lie.se3_exp(xi)
        J1[:, sl, sl] = Ji
        J0[:, sl, sl] = -Ji @ motion_transform(R, p)
    return J0, J1
