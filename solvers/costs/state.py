"""State and control regularisation: ``½ ||x ⊖ x_ref||²_W`` and ``½ ||u - u_ref||²_W``."""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend

from ..state_space import StateSpace
from .base import CostContext, CostDerivatives, PerKnotReference, ResidualCost, _add_diagonal, _col, _plain, per_knot


def _add_identity_residual(out: CostDerivatives, grad, hess, r, W, w) -> None:
    """Add ``w ½ rᵀ W r`` to ``out.l``, ``w W r`` to ``grad`` and ``w W`` to the diagonal of ``hess``:
    the exact Gauss–Newton terms of a residual whose Jacobian is the identity on that block."""
    wr = W * r
    wc = _col(w)
    out.l += w * (0.5 * (wr * r).sum(axis=-1))
    grad += wc * wr
    _add_diagonal(hess, wc * W)


class StateCost(ResidualCost):
    """State tracking ``r = x ⊖ x_ref`` (ndx,) (Crocoddyl's ``ResidualModelState``).

    reference: (nx,) or per knot (K, nx); default ``(model.neutral(), 0)``. weights (ndx,).
    Jacobian ``∂(x ⊖ x_ref)/∂x`` from ``difference_jacobians``. Hessian: Gauss–Newton, which is
    exact for hinge/slide-only robots (the residual is then affine)."""

    name = "state"

    def __init__(self, model: RobotModel, reference=None, weights=None):
        self.model = model
        self.state = StateSpace(model)
        self.nr = self.state.ndx
        self.hessian = "exact" if not (model.ball_adr or model.free_adr) else "gauss-newton"
        super().__init__(weights)
        self.reference = self.state.neutral() if reference is None else reference

    reference = PerKnotReference("_reference", "state reference", lambda cost: (cost.state.nx,))

    def _ref(self, ctx: CostContext) -> np.ndarray:
        return per_knot("state reference", self._reference, ctx.knots, (self.state.nx,))

    def residual(self, ctx: CostContext) -> np.ndarray:
        if self._vector_fast(ctx):
            return ctx.x - ctx.rows_of("state reference", self._reference, (self.state.nx,))
        return self.state.difference(self._ref(ctx), ctx.x)

    def residual_jacobian(self, ctx: CostContext):
        return self.state.difference_jacobians(self._ref(ctx), ctx.x)[1], None

    def _vector_fast(self, ctx: CostContext) -> bool:
        """Checked states of a hinge/slide-only robot: ``x ⊖ x_ref = x - x_ref``, ``Rx = I``."""
        return ctx.checked and self.state.euclidean

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        if not (self._vector_fast(ctx) and _plain(self, StateCost)):
            return super()._accumulate(ctx, out, w)
        # Rx = I: lx = W r, lxx = diag(W) (what the Gauss–Newton products give, exactly)
        r = ctx.x - ctx.rows_of("state reference", self._reference, (self.state.nx,))
        _add_identity_residual(out, out.lx, out.lxx, r, self._wk(ctx), w)


class ControlCost(ResidualCost):
    """Control regularisation ``r = u - u_ref`` (nu,), exact Hessian.

    reference: (nu,) or per knot (K, nu), default 0 — e.g. gravity compensation from
    :func:`gravity_compensation`. weights (nu,)."""

    name = "control"
    hessian = "exact"
    uses_control = True

    def __init__(self, model: RobotModel, reference=None, weights=None):
        self.model = model
        self.nr = model.nu
        super().__init__(weights)
        self.reference = np.zeros(model.nu) if reference is None else reference

    reference = PerKnotReference("_reference", "control reference", lambda cost: (cost.model.nu,))

    def residual(self, ctx: CostContext) -> np.ndarray:
        u = self._require_control(ctx)
        return u - ctx.rows_of("control reference", self._reference, (self.model.nu,))

    def residual_jacobian(self, ctx: CostContext):
        B, nu = ctx.batch, self.model.nu
        return np.zeros((B, nu, ctx.state.ndx)), np.broadcast_to(np.eye(nu), (B, nu, nu))

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        if not _plain(self, ControlCost):
            return super()._accumulate(ctx, out, w)
        # Ru = I, Rx = 0: lu = W r, luu = diag(W)
        _add_identity_residual(out, out.lu, out.luu, self.residual(ctx), self._wk(ctx), w)


def gravity_compensation(model: RobotModel, backend: Backend, q) -> np.ndarray:
    """Controls (..., nu) whose torques ``B u`` best match gravity ``g(q)`` (least squares; exact
    for fully actuated robots, the actuated part only for floating-base robots)."""
    g = backend.gravity_torques(model, q)
    Bpinv = np.linalg.pinv(np.asarray(model.actuation_matrix, float))
    return g @ Bpinv.T
