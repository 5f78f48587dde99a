"""Centre-of-mass tracking ``r = c(q) - c_target`` [m] with the backend's CoM Jacobian."""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from .base import CostContext, CostDerivatives, PerKnotReference, ResidualCost, _plain
from .frame import add_point_gauss_newton


class ComPositionCost(ResidualCost):
    """Centre of mass of the moving links (3,) minus a target (3,) or per knot (K, 3).
    Hessian: Gauss–Newton."""

    name = "com_position"
    nr = 3

    def __init__(self, model: RobotModel, target, weights=None):
        self.model = model
        super().__init__(weights)
        self.target = target

    target = reference = PerKnotReference("_target", "{name} target", (3,))

    def residual(self, ctx: CostContext) -> np.ndarray:
        return ctx.center_of_mass() - ctx.rows_of(f"{self.name} target", self._target, (3,))

    def residual_jacobian(self, ctx: CostContext):
        J = ctx.com_jacobian()
        Rx = np.zeros((ctx.batch, 3, ctx.state.ndx))
        Rx[..., :self.model.nv] = J
        return Rx, None

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        if not _plain(self, ComPositionCost):
            return super()._accumulate(ctx, out, w)
        # the Jacobian has configuration columns only: products on the (3, nv) CoM Jacobian
        add_point_gauss_newton(out, self.residual(ctx), self._wk(ctx), ctx.com_jacobian(), w)
