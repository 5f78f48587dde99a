"""Soft joint limits: a quadratic penalty on the part of each hinge/slide coordinate that lies
outside ``[lower + margin, upper - margin]`` (MuJoCo's joint ranges by default)."""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from dynamics.joints import JointType

from .base import CostContext, ResidualCost


class JointLimitCost(ResidualCost):
    """``r_i = min(q_i - (lo_i + margin), 0) + max(q_i - (hi_i - margin), 0)`` for every limited
    hinge/slide coordinate (nr of them). The residual is piecewise affine, so the Gauss–Newton
    Hessian is exact wherever it is differentiable. lower/upper: (nq,) overrides, ±inf = no limit."""

    name = "joint_limits"
    hessian = "exact"

    def __init__(self, model: RobotModel, margin: float = 0.0, weights=None, lower=None, upper=None):
        self.model = model
        lo = np.asarray(model.q_lower if lower is None else lower, float)
        hi = np.asarray(model.q_upper if upper is None else upper, float)
        if lo.shape != (model.nq,) or hi.shape != (model.nq,):
            raise ValueError(f"joint limits must have shape ({model.nq},) (nq)")
        scalar = np.isin(model.link_type, (JointType.HINGE, JointType.SLIDE))
        links = np.flatnonzero(scalar)
        qa = model.link_qadr[links]
        keep = np.isfinite(lo[qa]) | np.isfinite(hi[qa])
        self.q_index = qa[keep]
        self.v_index = model.link_dofadr[links][keep]
        if margin < 0 or np.any(hi[self.q_index] - lo[self.q_index] < 2 * margin):
            raise ValueError(f"margin {margin} must be >= 0 and smaller than half of every joint range")
        self.lower = lo[self.q_index] + margin
        self.upper = hi[self.q_index] - margin
        self.nr = self.q_index.size
        super().__init__(weights)

    def residual(self, ctx: CostContext) -> np.ndarray:
        q = ctx.q[:, self.q_index]
        return np.minimum(q - self.lower, 0.0) + np.maximum(q - self.upper, 0.0)

    def residual_jacobian(self, ctx: CostContext):
        q = ctx.q[:, self.q_index]
        active = ((q < self.lower) | (q > self.upper)).astype(float)
        Rx = np.zeros((ctx.batch, self.nr, ctx.state.ndx))
        Rx[:, np.arange(self.nr), self.v_index] = active
        return Rx, None
