"""Joint-space bounds: joint positions of hinge/slide joints and joint velocities."""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from dynamics.joints import JointType

from ..costs.base import CostContext
from .base import Constraint


class JointPositionBounds(Constraint):
    """``lower_i ≤ q_i ≤ upper_i`` for every hinge/slide coordinate with a finite limit (nc of
    them; ``q_index`` says which). lower/upper: (nq,) overrides of the model's ranges (MuJoCo's
    ``range``) [rad or m], ±inf = no limit; margin [rad or m] shrinks every range on both sides."""

    name = "joint_position_bounds"

    def __init__(self, model: RobotModel, lower=None, upper=None, margin: float = 0.0):
        self.model = model
        lo = np.asarray(model.q_lower if lower is None else lower, float)
        hi = np.asarray(model.q_upper if upper is None else upper, float)
        if lo.shape != (model.nq,) or hi.shape != (model.nq,):
            raise ValueError(f"JointPositionBounds: lower/upper must have shape ({model.nq},) (nq), got {lo.shape}, "
                             f"{hi.shape}")
        links = np.flatnonzero(np.isin(model.link_type, (JointType.HINGE, JointType.SLIDE)))
        qa = model.link_qadr[links]
        keep = np.isfinite(lo[qa]) | np.isfinite(hi[qa])
        self.q_index = qa[keep]
        self.v_index = model.link_dofadr[links][keep]
        self.nc = self.q_index.size
        if self.nc == 0:
            raise ValueError("JointPositionBounds: no hinge/slide joint of the model has a finite limit")
        self.set_bounds(lo[self.q_index] + margin, hi[self.q_index] - margin)

    def residual(self, ctx: CostContext) -> np.ndarray:
        return ctx.q[:, self.q_index]

    def jacobian(self, ctx: CostContext):
        Gx = np.zeros((ctx.batch, self.nc, ctx.state.ndx))
        Gx[:, np.arange(self.nc), self.v_index] = 1.0
        return Gx, None


class JointVelocityBounds(Constraint):
    """``-limit ≤ v ≤ limit`` (or ``lower ≤ v ≤ upper``) on the joint velocities [rad/s or m/s].
    limit: scalar or (nv,); dofs: which velocity indices are bounded (default all; a floating base's
    six are usually left out)."""

    name = "joint_velocity_bounds"

    def __init__(self, model: RobotModel, limit=None, lower=None, upper=None, dofs=None):
        self.model = model
        self.v_index = np.arange(model.nv) if dofs is None else np.asarray(dofs, dtype=np.intp).ravel()
        if self.v_index.size == 0 or self.v_index.min() < 0 or self.v_index.max() >= model.nv:
            raise ValueError(f"JointVelocityBounds: dofs must be indices in [0, {model.nv})")
        self.nc = self.v_index.size
        if limit is not None:
            if lower is not None or upper is not None:
                raise ValueError("JointVelocityBounds: give either limit or lower/upper, not both")
            lim = np.broadcast_to(np.asarray(limit, float), (self.nc,))
            if np.any(lim < 0):
                raise ValueError("JointVelocityBounds: limit must be >= 0")
            lower, upper = -lim, lim
        elif lower is None or upper is None:
            raise ValueError("JointVelocityBounds: give limit, or both lower and upper")
        self.set_bounds(np.broadcast_to(np.asarray(lower, float), (self.nc,)),
                        np.broadcast_to(np.asarray(upper, float), (self.nc,)))

    def residual(self, ctx: CostContext) -> np.ndarray:
        return ctx.v[:, self.v_index]

    def jacobian(self, ctx: CostContext):
        Gx = np.zeros((ctx.batch, self.nc, ctx.state.ndx))
        Gx[:, np.arange(self.nc), ctx.model.nv + self.v_index] = 1.0
        return Gx, None
