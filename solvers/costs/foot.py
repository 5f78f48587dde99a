"""Foot (frame) costs for legged locomotion: swing height and frame velocity.

* :class:`FrameHeightCost` — ``r = z_frame(q) - h_target`` [m] (1,): a swing foot follows a height
  profile over its swing phase (per-knot targets), or a foot keeps a clearance.
* :class:`FrameVelocityCost` — ``r = ṗ_frame(q, v) - v_target`` [m/s] (3,): the classical linear
  velocity of the frame origin in world axes (e.g. zero velocity of a foot about to touch down, or
  a swing foot following a planned velocity).

Foot placement (a swing foot tracking its planned touchdown point) is
:class:`solvers.costs.FramePositionCost` with per-knot targets (weights ``(w, w, 0)`` for the
horizontal point only); base velocity tracking is :class:`solvers.costs.StateCost` with a
velocity reference (the free-flyer velocity is in the base frame, docs/conventions.md).
Hessians are Gauss–Newton.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from .base import CostContext, PerKnotReference, ResidualCost


class FrameHeightCost(ResidualCost):
    """Height of a frame (site or body) origin above the world's z = 0: ``r = p_z(q) - h`` [m].
    target: a scalar or per knot (K,); weights: (1,) or per knot (K, 1). The Jacobian is the z row
    of the ``local_world_aligned`` frame Jacobian."""

    name = "frame_height"
    nr = 1

    def __init__(self, model: RobotModel, frame: str, target=0.0, weights=None):
        model.frame(frame)  # raises KeyError naming the known sites/bodies
        self.model, self.frame = model, frame
        super().__init__(weights)
        self.target = target

    target = reference = PerKnotReference("_target", "{name} target", ())

    def residual(self, ctx: CostContext) -> np.ndarray:
        h = ctx.rows_of(f"{self.name} target", self._target, ())
        return (ctx.frame_position(self.frame)[:, 2] - h)[:, None]

    def residual_jacobian(self, ctx: CostContext):
        J = ctx.frame_jacobian(self.frame, "local_world_aligned")
        Rx = np.zeros((ctx.batch, 1, ctx.state.ndx))
        Rx[:, 0, :self.model.nv] = J[:, 2]
        return Rx, None


class FrameVelocityCost(ResidualCost):
    """Linear velocity of a frame origin in world axes minus a target: ``r = J(q) v - v_target``
    [m/s] (3,) with J the linear rows of the ``local_world_aligned`` frame Jacobian. target: (3,)
    or per knot (K, 3), default 0; weights (3,).

    ``∂r/∂v = J``; ``∂r/∂q`` is the derivative of the frame velocity at fixed v, from the contact
    layer's frame motion derivatives (:func:`dynamics.contact.frame_motion_derivatives`, the
    point-contact velocity rows of :func:`dynamics.contact.constraint_rows.velocity_derivative_q`)."""

    name = "frame_velocity"
    nr = 3

    def __init__(self, model: RobotModel, frame: str, target=(0.0, 0.0, 0.0), weights=None):
        from dynamics.contact import ContactSet
        model.frame(frame)
        self.model, self.frame = model, frame
        self._point = ContactSet(model, frames=(frame,), kind="point")   # the frame's velocity rows
        super().__init__(weights)
        self.target = target

    target = reference = PerKnotReference("_target", "{name} target", (3,))

    def residual(self, ctx: CostContext) -> np.ndarray:
        J = ctx.frame_jacobian(self.frame, "local_world_aligned")[:, :3]
        return (J @ ctx.v[..., None])[..., 0] - ctx.rows_of(f"{self.name} target", self._target, (3,))

    def residual_jacobian(self, ctx: CostContext):
        from dynamics.contact import frame_motion_derivatives
        from dynamics.contact.constraint_rows import velocity_derivative_q
        nv = self.model.nv
        v = np.ascontiguousarray(ctx.v)
        fm = ctx.memo(("frame_motion", self.frame), lambda: frame_motion_derivatives(
            ctx.backend, self.model, ctx.q, v, np.zeros_like(v), self._point))
        Rx = np.zeros((ctx.batch, 3, ctx.state.ndx))
        Rx[:, :, :nv] = velocity_derivative_q(fm, self._point)
        Rx[:, :, nv:] = ctx.frame_jacobian(self.frame, "local_world_aligned")[:, :3]
        return Rx, None
