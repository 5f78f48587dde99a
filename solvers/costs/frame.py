"""Frame (site or body) tracking: position, orientation and full placement.

Jacobians come from the backend's ``frame_jacobian``: the position residual uses the
``local_world_aligned`` Jacobian (rows 0-2 = velocity of the frame origin in world axes), the
orientation/placement residuals use the ``local`` Jacobian composed with the inverse right
Jacobian of the log map (Crocoddyl's ``ResidualModelFrameRotation``/``FramePlacement``).
Hessians are Gauss–Newton (the residuals are nonlinear in q; their curvature is dropped).
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel, lie

from .base import CostContext, CostDerivatives, PerKnotReference, ResidualCost, _col, _plain, check_per_knot


class _FrameCost(ResidualCost):
    def __init__(self, model: RobotModel, frame: str, weights=None):
        model.frame(frame)  # raises KeyError naming the known sites/bodies
        self.model, self.frame = model, frame
        super().__init__(weights)


def _bracket(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Lie bracket ``[a, b] = ad(a) b`` of motion vectors (linear, angular) (..., 6)."""
    va, wa, vb, wb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return np.concatenate([np.cross(wa, vb) - np.cross(wb, va), np.cross(wa, wb)], axis=-1)


def frame_position_hessian(model: RobotModel, J_world: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Hessian ``∂²p/∂δ_j∂δ_k`` of a frame origin under right perturbations of q, (B, 3, nv, nv).

    J_world: (B, 6, nv) frame Jacobian in the ``world`` reference (column j = world twist of dof
    j), p: (B, 3) frame position. Column j of the world Jacobian depends on dof k only if k's link
    is j's link or an ancestor, with ``∂J_j/∂δ_k = [J_k, J_j]`` (Lie bracket); the point velocity
    column is ``Jp_j = v_j + ω_j × p``, so ``∂Jp_j/∂δ_k = [J_k, J_j]_v + [J_k, J_j]_ω × p + ω_j × Jp_k``.
    The Hessian is the symmetric part (the antisymmetric part is the bracket of the perturbations).
    """
    Jt = np.swapaxes(J_world, -1, -2)                         # (B, nv, 6): twist per dof
    w = Jt[..., 3:]
    Jp = Jt[..., :3] + np.cross(w, p[:, None, :])             # (B, nv, 3)
    mask = model.link_ancestor[model.dof_link[:, None], model.dof_link[None, :]]   # [j, k]: k supports j
    dJ = _bracket(Jt[:, None, :, :], Jt[:, :, None, :])       # [b, j, k] = [J_k, J_j]
    dJ = dJ * mask[None, :, :, None]
    T = dJ[..., :3] + np.cross(dJ[..., 3:], p[:, None, None, :]) + np.cross(w[:, :, None, :], Jp[:, None, :, :])
    T = np.moveaxis(T, -1, 1)                                 # (B, 3, j, k)
    return 0.5 * (T + np.swapaxes(T, -1, -2))


def _cross3(a, b):
    """``a × b`` for vectors given as component triples of broadcasting arrays; the operations
    (and so the rounding) of ``np.cross``, without its per-call overhead."""
    a0, a1, a2 = a
    b0, b1, b2 = b
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


def frame_position_hessian_contracted(model: RobotModel, J_world: np.ndarray, p: np.ndarray,
                                      c: np.ndarray) -> np.ndarray:
    """``Σ_i c_i ∂²p_i/∂δ_j∂δ_k`` (B, nv, nv) for c (B, 3): ``np.einsum("bi,bijk->bjk", c,
    frame_position_hessian(model, J_world, p))``, bitwise: the same floating-point operations,
    the cross products evaluated per component on (B, nv, nv) arrays (``np.cross`` on the
    (B, nv, nv, 3) arrays costs several times more)."""
    v = (J_world[:, 0], J_world[:, 1], J_world[:, 2])                  # (B, nv): column j's twist
    w = (J_world[:, 3], J_world[:, 4], J_world[:, 5])
    P = (p[:, 0:1], p[:, 1:2], p[:, 2:3])
    wp = _cross3(w, P)
    Jp = (v[0] + wp[0], v[1] + wp[1], v[2] + wp[2])                     # point velocity columns
    vj, wj = [tuple(x[:, :, None] for x in t) for t in (v, w)]           # dof j on axis 1
    vk, wk = [tuple(x[:, None, :] for x in t) for t in (v, w)]           # dof k on axis 2
    mask = model.link_ancestor[model.dof_link[:, None], model.dof_link[None, :]]
    c1, c2 = _cross3(wk, vj), _cross3(wj, vk)                            # [J_k, J_j] = (ω_k×v_j - ω_j×v_k, ω_k×ω_j)
    lin = [(c1[i] - c2[i]) * mask for i in range(3)]
    ang = [x * mask for x in _cross3(wk, wj)]
    c3 = _cross3(ang, tuple(x[:, :, None] for x in P))
    c4 = _cross3(wj, tuple(x[:, None, :] for x in Jp))
    # the contraction in frame_position_hessian's memory layout: einsum's summation order over i
    # depends on it
    T = np.moveaxis(np.stack([lin[i] + c3[i] + c4[i] for i in range(3)], axis=-1), -1, 1)
    return np.einsum("bi,bijk->bjk", c, 0.5 * (T + np.swapaxes(T, -1, -2)))


def add_point_gauss_newton(out: CostDerivatives, r: np.ndarray, W: np.ndarray, J: np.ndarray, w,
                           curvature=None) -> None:
    """``out += w * derivatives`` of ``½ Σ_i W_i r_i²`` for a point residual r (B, 3) (a frame
    origin, the centre of mass) whose Jacobian J (B, 3, nv) only has configuration columns: the
    Gauss–Newton products are taken on the (3, nv) Jacobian, as sums over the three residual rows
    (the operations, in order, of the products on the zero-padded (3, ndx) Jacobian), not on
    full-size (B, ndx, ndx) intermediates. W (3,) or (B, 3); w a float or (B,) per-knot weights;
    ``curvature(W r)`` (B, nv, nv), when given, is added to the configuration Hessian."""
    nv = J.shape[-1]
    wr = W * r
    WJ = W[..., None] * J
    lq = J[:, 0] * wr[:, 0:1] + J[:, 1] * wr[:, 1:2] + J[:, 2] * wr[:, 2:3]
    lqq = (J[:, 0, :, None] * WJ[:, 0, None, :] + J[:, 1, :, None] * WJ[:, 1, None, :]
           + J[:, 2, :, None] * WJ[:, 2, None, :])
    if curvature is not None:
        lqq += curvature(wr)
    wc = _col(w)
    out.l += w * (0.5 * (wr * r).sum(axis=-1))
    out.lx[:, :nv] += wc * lq
    out.lxx[:, :nv, :nv] += (wc if isinstance(w, float) else wc[..., None]) * lqq


class FramePositionCost(_FrameCost):
    """``r = p_frame(q) - p_target`` [m] (3,). target: (3,) or per knot (K, 3); weights (3,).

    hessian: ``"gauss-newton"`` (default, ``Jᵀ W J``) or ``"exact"`` (adds ``Σ w_i r_i ∇²p_i``
    from :func:`frame_position_hessian`; what DDP needs for its quadratic convergence)."""

    name = "frame_position"
    nr = 3

    def __init__(self, model: RobotModel, frame: str, target, weights=None, hessian: str = "gauss-newton"):
        super().__init__(model, frame, weights)
        if hessian not in ("gauss-newton", "exact"):
            raise ValueError(f"hessian must be 'gauss-newton' or 'exact', got '{hessian}'")
        self.hessian = hessian
        self.target = target

    # reference: the alias used by tasks that move references generically
    target = reference = PerKnotReference("_target", "{name} target", (3,))

    def residual(self, ctx: CostContext) -> np.ndarray:
        return ctx.frame_position(self.frame) - ctx.rows_of(f"{self.name} target", self._target, (3,))

    def residual_jacobian(self, ctx: CostContext):
        J = ctx.frame_jacobian(self.frame, "local_world_aligned")
        Rx = np.zeros((ctx.batch, 3, ctx.state.ndx))
        Rx[..., :self.model.nv] = J[..., :3, :]
        return Rx, None

    def derivatives(self, ctx: CostContext):
        out = CostDerivatives.zeros(ctx.batch, ctx.state.ndx, ctx.model.nu)
        self._fused(ctx, out, 1.0)
        return out

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        if _plain(self, FramePositionCost):
            self._fused(ctx, out, w)
        else:
            super()._accumulate(ctx, out, w)

    def _fused(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        """``out += w * derivatives`` (:func:`add_point_gauss_newton`), with the exact Hessian's
        curvature term when asked for."""
        curvature = None
        if self.hessian == "exact":
            def curvature(wr):
                return frame_position_hessian_contracted(self.model, ctx.frame_jacobian(self.frame, "world"),
                                                         ctx.frame_position(self.frame), wr)
        add_point_gauss_newton(out, self.residual(ctx), self._wk(ctx),
                               ctx.frame_jacobian(self.frame, "local_world_aligned")[:, :3], w, curvature)


def _as_rotation(name: str, R) -> np.ndarray:
    R = check_per_knot(name, R, (3, 3))
    err = np.abs(np.swapaxes(R, -1, -2) @ R - np.eye(3)).max()
    if err > 1e-6:
        raise ValueError(f"{name} is not a rotation matrix (|R^T R - I| = {err:.2e})")
    return R


class FrameRotationCost(_FrameCost):
    """``r = log(R_target^T R_frame(q))`` [rad] (3,). target: (3, 3) or per knot (K, 3, 3)."""

    name = "frame_rotation"
    nr = 3

    def __init__(self, model: RobotModel, frame: str, target, weights=None):
        super().__init__(model, frame, weights)
        self.target = target

    target = reference = PerKnotReference("_target", "{name} target", check=_as_rotation)

    def residual(self, ctx: CostContext) -> np.ndarray:
        R, _ = ctx.frame_placement(self.frame)
        Rref = ctx.rows_of(f"{self.name} target", self._target, (3, 3))
        return lie.so3_log(np.swapaxes(Rref, -1, -2) @ R)

    def residual_jacobian(self, ctx: CostContext):
        r = self.residual(ctx)
        J = ctx.frame_jacobian(self.frame, "local")
        Rx = np.zeros((ctx.batch, 3, ctx.state.ndx))
        Rx[..., :self.model.nv] = lie.so3_right_jacobian_inverse(r) @ J[..., 3:, :]
        return Rx, None


class FramePlacementCost(_FrameCost):
    """``r = log6(M_target^{-1} M_frame(q))`` (6,) = (linear [m], angular [rad]).

    target: ``(R, p)`` with R (3, 3) or (K, 3, 3) and p (3,) or (K, 3), or homogeneous (4, 4) /
    (K, 4, 4). weights (6,)."""

    name = "frame_placement"
    nr = 6

    def __init__(self, model: RobotModel, frame: str, target, weights=None):
        super().__init__(model, frame, weights)
        self.target = target

    @property
    def target(self) -> tuple[np.ndarray, np.ndarray]:
        return self._R, self._p

    @target.setter
    def target(self, M) -> None:
        if isinstance(M, tuple) and len(M) == 2:
            R, p = M
        else:
            M = np.asarray(M, float)
            if M.shape[-2:] != (4, 4):
                raise ValueError(f"{self.name} target must be (R, p) or a homogeneous (4, 4)/(K, 4, 4) matrix, "
                                 f"got shape {M.shape}")
            R, p = M[..., :3, :3], M[..., :3, 3]
        self._R = _as_rotation(f"{self.name} target rotation", R)
        self._p = check_per_knot(f"{self.name} target position", p, (3,))

    reference = target

    def residual(self, ctx: CostContext) -> np.ndarray:
        R, p = ctx.frame_placement(self.frame)
        Rref = ctx.rows_of(f"{self.name} target", self._R, (3, 3))
        pref = ctx.rows_of(f"{self.name} target", self._p, (3,))
        RrT = np.swapaxes(Rref, -1, -2)
        return lie.se3_log(RrT @ R, (RrT @ (p - pref)[..., None])[..., 0])

    def residual_jacobian(self, ctx: CostContext):
        r = self.residual(ctx)
        J = ctx.frame_jacobian(self.frame, "local")
        Rx = np.zeros((ctx.batch, 6, ctx.state.ndx))
        Rx[..., :self.model.nv] = lie.se3_right_jacobian_inverse(r) @ J
        return Rx, None
