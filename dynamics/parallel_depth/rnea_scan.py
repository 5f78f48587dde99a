"""Inverse dynamics as two scans on semigroups (Yang, Wu & Pan 2017 §III-B, §III-C, Algorithm 1).

Forward scan (Yang, Wu & Pan 2017 eq. (12)/(13)): in the project's body-frame convention the link velocity
and acceleration recursions ``v_i = X_i v_λ + S_i q̇_i``, ``a_i = X_i a_λ + S_i q̈_i + v_i × S_i q̇_i``
are one linear recursion ``[a_i; v_i; 1] = A_i [a_λ; v_λ; 1]`` with the 13×13 operand

    A_i = [[X_i, -(S_i q̇_i)× X_i, S_i q̈_i],
           [0,    X_i,             S_i q̇_i],
           [0,    0,               1      ]],

whose products keep that block form, so an operand is equivalently the triple
``(X, ξ1, ξ2) ∈ SE(3) × se(3)²`` with the product of Yang, Wu & Pan 2017 eq. (13)
``(X, ξ1, ξ2) ⊕ (X', ξ1', ξ2') = (X X', X ξ1' - ξ2 × X ξ2' + ξ1, X ξ2' + ξ2)``. ``operand="group"``
scans the triples (X as ``(E, r)``, 24 numbers), ``operand="matrix"`` the dense 13×13 matrices. The
base state ``(a_0, v_0) = (-g, 0)`` is applied after the scan, in parallel (the "parallel
isomorphism" step of §III-B).

Backward scan (Yang, Wu & Pan 2017 eq. (16)): ``F_i = X_{i+1}^T F_{i+1} + F̂_i`` with the link bias forces
``F̂_i = I_i a_i + v_i ×* I_i v_i - f^ext_i`` computed in parallel after the forward scan; the
affine operands ``(X_{i+1}^T, F̂_i)`` are scanned from the tip (group form ``(E, r, f)`` or dense
7×7). Then ``τ_i = S_i^T F_i + armature_i q̈_i`` in parallel.

Trees: the forward scan runs by pointer jumping (Hillis–Steele on the tree, ``ceil(log2 depth)``
steps). The backward recursion sums over *subtrees*, not paths, so it is done in the world frame:
``F_i = X_{0,i}^-T Σ_{j ∈ subtree(i)} X_{0,j}^T F̂_j`` with the cumulative transforms ``X_{0,i} = ^iX_0``
from the forward scan; in a depth-first preorder every subtree is a contiguous range, so the sums
are differences of one additive scan (the "scan along the tree" variant of the issue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import scan as _scan
from .namespace import ModelArrays
from .se3 import (compose, force_apply_invT, force_apply_T, force_cross, matvec, motion_apply, motion_cross,
                  motion_cross_matrix, motion_matrix)

Array = Any
OPERANDS = ("group", "matrix")


@dataclass(frozen=True)
class ForwardScan:
    """Result of the forward scan, all (B, L, …): cumulative transforms ``^iX_0`` as ``(EP, rP)``,
    link velocities ``vel`` [m/s, rad/s] and accelerations ``acc`` (gravity included as ``a_0 = -g``)."""
    EP: Array
    rP: Array
    vel: Array
    acc: Array


def _group_forward(outer, inner):
    Eo, ro, ao, bo = outer
    Ei, ri, ai, bi = inner
    E, r = compose(Eo, ro, Ei, ri)
    Xb = motion_apply(Eo, ro, bi)
    alpha = motion_apply(Eo, ro, ai) - motion_cross(bo, Xb) + ao
    return E, r, alpha, Xb + bo


def _group_backward(outer, inner):
    # maps F -> X_o^T (X_i^T F + f_i) + f_o: transform X_i X_o, offset X_o^T f_i + f_o
    Eo, ro, fo = outer
    Ei, ri, fi = inner
    E, r = compose(Ei, ri, Eo, ro)
    return E, r, force_apply_T(Eo, ro, fi) + fo


def _run(c: ModelArrays, el, combine, method: str):
    if c.topo.serial:
        return _scan.inclusive_scan(el, combine, method)
    if method != "hillis-steele":
        raise ValueError(f"scan method '{method}' runs on serial chains only; trees use 'hillis-steele' "
                         f"(pointer jumping)")
    return _scan.pointer_jumping(el, combine, c.topo.parent)


def _unskew(xp, S: Array) -> Array:
    return xp.stack([S[..., 2, 1], S[..., 0, 2], S[..., 1, 0]], axis=-1)


def forward_scan(c: ModelArrays, E: Array, r: Array, vJ: Array, aJ: Array, gravity: bool = True,
                 operand: str = "group", method: str = "hillis-steele") -> ForwardScan:
    """Velocities and accelerations of all links by one scan (Yang, Wu & Pan 2017 eq. (12)/(13)).

    E, r: link transforms ``X_i`` (B, L, 3, 3), (B, L, 3); vJ, aJ: joint motions ``S_i q̇_i`` and
    ``S_i q̈_i`` (B, L, 6). gravity: start from ``a_0 = -g`` (else 0)."""
    xp = c.xp
    if operand == "group":
        EP, rP, alpha, beta = _run(c, (E, r, aJ, vJ), _group_forward, method)
    elif operand == "matrix":
        X = motion_matrix(E, r)
        A = xp.zeros(E.shape[:-2] + (13, 13), dtype=E.dtype)
        A[..., :6, :6] = X
        A[..., :6, 6:12] = -motion_cross_matrix(vJ) @ X
        A[..., :6, 12] = aJ
        A[..., 6:12, 6:12] = X
        A[..., 6:12, 12] = vJ
        A[..., 12, 12] = 1.0
        (P,) = _run(c, (A,), _scan.matmul_combine, method)
        EP = P[..., :3, :3]
        rP = _unskew(xp, -xp.swapaxes(EP, -1, -2) @ P[..., :3, 3:6])
        alpha, beta = P[..., :6, 12], P[..., 6:12, 12]
    else:
        raise ValueError(f"unknown scan operand '{operand}'; use one of {', '.join(OPERANDS)}")
    acc = alpha
    if gravity:
        acc = alpha + motion_apply(EP, rP, xp.broadcast_to(c.gravity_acc, alpha.shape))
    return ForwardScan(EP=EP, rP=rP, vel=beta, acc=acc)


def backward_scan(c: ModelArrays, E: Array, r: Array, fhat: Array, fwd: ForwardScan,
                  operand: str = "group", method: str = "hillis-steele") -> Array:
    """Joint reaction forces ``F_i`` (B, L, 6) from the link bias forces ``F̂_i`` (B, L, 6):
    suffix scan of Yang, Wu & Pan 2017 eq. (16) on chains, world-frame subtree sums on trees."""
    xp = c.xp
    if not c.topo.serial:
        return _tree_backward(c, fhat, fwd, method)
    B, L = fhat.shape[:2]
    # operand i maps F_{i+1} -> X_{i+1}^T F_{i+1} + F̂_i; the tip's transform is never used
    En = xp.concatenate([E[:, 1:], xp.broadcast_to(xp.eye(3), (B, 1, 3, 3))], axis=1)
    rn = xp.concatenate([r[:, 1:], xp.zeros((B, 1, 3), dtype=r.dtype)], axis=1)
    flip = (slice(None), slice(None, None, -1))
    if operand == "group":
        el = (En[flip], rn[flip], fhat[flip])
        return _scan.inclusive_scan(el, _group_backward, method)[2][flip]
    if operand == "matrix":
        A = xp.zeros((B, L, 7, 7), dtype=fhat.dtype)
        A[..., :6, :6] = xp.swapaxes(motion_matrix(En, rn), -1, -2)
        A[..., :6, 6] = fhat
        A[..., 6, 6] = 1.0
        (P,) = _scan.inclusive_scan((A[flip],), _scan.matmul_combine, method)
        return P[flip][..., :6, 6]
    raise ValueError(f"unknown scan operand '{operand}'; use one of {', '.join(OPERANDS)}")


def _tree_backward(c: ModelArrays, fhat: Array, fwd: ForwardScan, method: str) -> Array:
    xp = c.xp
    B = fhat.shape[0]
    t = c.topo
    fw = force_apply_T(fwd.EP, fwd.rP, fhat)[:, t.order]         # world frame, preorder
    (cs,) = _scan.hillis_steele((fw,), _scan.add_combine)          # inclusive prefix sums
    cs = xp.concatenate([xp.zeros((B, 1, 6), dtype=cs.dtype), cs], axis=1)
    sub = cs[:, t.end] - cs[:, t.pos]                               # subtree sums, link order
    return force_apply_invT(fwd.EP, fwd.rP, sub)


def link_bias_forces(c: ModelArrays, fwd: ForwardScan, fl: Array | None, with_velocity: bool = True) -> Array:
    """``F̂_i = I_i a_i + v_i ×* (I_i v_i) - f^ext_i`` (B, L, 6), all links in parallel."""
    f = matvec(c.inertia, fwd.acc)
    if with_velocity:
        f = f + force_cross(fwd.vel, matvec(c.inertia, fwd.vel))
    if fl is not None:
        f = f - fl
    return f


def joint_motions(c: ModelArrays, x: Array) -> Array:
    """``S_i x_i`` stacked per link (B, L, 6) for a velocity-space vector x (B, nv)."""
    if c.dof_per_link:
        return x[..., None] * c.S1
    return (x @ c.smap).reshape(x.shape[0], -1, 6)


def joint_forces(c: ModelArrays, F: Array) -> Array:
    """``S_i^T F_i`` for link forces F (B, L, 6) -> (B, nv)."""
    if c.dof_per_link:
        return c.xp.sum(F * c.S1, axis=-1)
    return F.reshape(F.shape[0], -1) @ c.smap.T


def rnea_scan(c: ModelArrays, E: Array, r: Array, v: Array, a: Array, fl: Array | None = None,
              gravity: bool = True, operand: str = "group", method: str = "hillis-steele") -> Array:
    """Joint forces ``τ = M a + c(q, v) - J^T f^ext`` (B, nv) by the forward and backward scans.

    E, r: link transforms from :func:`.kinematics.link_transforms`; v, a: (B, nv); fl: per-link
    external forces (B, L, 6) or None; gravity: include ``-g`` as the base acceleration."""
    fwd = forward_scan(c, E, r, joint_motions(c, v), joint_motions(c, a), gravity, operand, method)
    fhat = link_bias_forces(c, fwd, fl)
    F = backward_scan(c, E, r, fhat, fwd, operand, method)
    return joint_forces(c, F) + c.armature * a
