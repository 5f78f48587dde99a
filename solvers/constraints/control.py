"""Bounds on the controls beyond the problem's box (e.g. tighter torque limits on some knots)."""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from ..costs.base import CostContext
from .base import Constraint


class ControlBounds(Constraint):
    """``lower ≤ u ≤ upper`` (nu,) [the actuators' units, N·m for torque motors]; ±inf = no bound;
    per knot (K, nu) allowed."""

    name = "control_bounds"
    uses_control = True

    def __init__(self, model: RobotModel, lower, upper):
        self.model = model
        self.nc = model.nu
        self.set_bounds(lower, upper)

    def residual(self, ctx: CostContext) -> np.ndarray:
        if ctx.u is None:
            raise ValueError(f"constraint '{self.name}' depends on the control and cannot be on a terminal knot")
        return ctx.u

    def jacobian(self, ctx: CostContext):
        B, nu = ctx.batch, ctx.model.nu
        return np.zeros((B, nu, ctx.state.ndx)), np.broadcast_to(np.eye(nu), (B, nu, nu))
