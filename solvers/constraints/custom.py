"""Constraints written in plain Python: any object with a batched ``residual(x, u)`` -> (B, nc) and
``lower`` / ``upper`` bounds ((nc,) or per knot (K, nc)); optionally ``jacobian(x, u)`` ->
``(gx (B, nc, ndx), gu (B, nc, nu))`` along the tangent perturbation ``x ⊕ dx`` (for hinge-only
robots simply ``x + dx``), else central finite differences (step 1e-6, one-time warning); a
``uses_control`` attribute (default False: ``u`` is None on a terminal knot) and a ``name``.
Methods accepting ``knots`` get the (B,) knot indices, methods accepting ``ctx`` the
:class:`~solvers.costs.base.CostContext` (backend, shared kinematics), as for custom costs
(:mod:`solvers.costs.custom`).
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np

from ..costs.base import CostContext
from .base import Constraint


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def as_constraint(obj, name: str | None = None) -> Constraint:
    """``obj`` if it already is a :class:`Constraint`, else a :class:`CustomConstraint` wrapping it."""
    if isinstance(obj, Constraint):
        return obj
    return CustomConstraint(obj, name=name)


class CustomConstraint(Constraint):
    """Adapter from a plain-Python constraint object (see the module docstring) to :class:`Constraint`."""

    def __init__(self, obj, name: str | None = None):
        if not callable(getattr(obj, "residual", None)):
            raise TypeError(f"{type(obj).__name__} is not a constraint: give it a method residual(x, u) -> (B, nc) "
                            f"and lower/upper bounds (see solvers.constraints.custom)")
        if getattr(obj, "lower", None) is None or getattr(obj, "upper", None) is None:
            raise TypeError(f"constraint {type(obj).__name__}: give it 'lower' and 'upper' bound attributes ((nc,) "
                            f"or per knot (K, nc); ±inf for no bound)")
        self.obj = obj
        self.name = name or getattr(obj, "name", None) or type(obj).__name__
        self.uses_control = bool(getattr(obj, "uses_control", False))
        lo = np.asarray(obj.lower, float)
        if lo.ndim == 0 or lo.ndim > 2:
            raise ValueError(f"constraint '{self.name}': lower bound must be (nc,) or (K, nc), got shape {lo.shape}")
        self.nc = int(lo.shape[-1])
        self.set_bounds(obj.lower, obj.upper)
        self._jac = obj.jacobian if callable(getattr(obj, "jacobian", None)) else None
        self._warned = False
        self._kw = {m: (_accepts(getattr(obj, m), "knots"), _accepts(getattr(obj, m), "ctx"))
                    for m in ("residual", "jacobian") if callable(getattr(obj, m, None))}

    def _call(self, method: str, x, u, knots, ctx):
        with_knots, with_ctx = self._kw[method]
        kw = {}
        if with_knots:
            kw["knots"] = knots
        if with_ctx:
            if ctx is None or x is not ctx.x or u is not ctx.u:
                ctx = None if ctx is None else CostContext(ctx.model, ctx.backend, ctx.state, x, u, knots)
            kw["ctx"] = ctx
        return getattr(self.obj, method)(x, u, **kw)

    def _residual(self, ctx, x, u, knots) -> np.ndarray:
        g = np.asarray(self._call("residual", x, u, knots, ctx), dtype=float)
        if g.shape != (x.shape[0], self.nc):
            raise ValueError(f"constraint '{self.name}': residual() returned shape {g.shape}, expected "
                             f"({x.shape[0]}, {self.nc}) (B, nc)")
        return g

    def residual(self, ctx: CostContext) -> np.ndarray:
        if self.uses_control and ctx.u is None:
            raise ValueError(f"constraint '{self.name}' uses the control and cannot be on a terminal knot")
        return self._residual(ctx, ctx.x, ctx.u, ctx.knots)

    def jacobian(self, ctx: CostContext):
        B, ndx, nu = ctx.batch, ctx.state.ndx, ctx.model.nu
        if self._jac is not None:
            gx, gu = self._call("jacobian", ctx.x, ctx.u, ctx.knots, ctx)
            gx = np.asarray(gx, float)
            if gx.shape != (B, self.nc, ndx):
                raise ValueError(f"constraint '{self.name}': jacobian() returned gx of shape {gx.shape}, expected "
                                 f"{(B, self.nc, ndx)}")
            if ctx.u is None or gu is None:
                return gx, None
            gu = np.asarray(gu, float)
            if gu.shape != (B, self.nc, nu):
                raise ValueError(f"constraint '{self.name}': jacobian() returned gu of shape {gu.shape}, expected "
                                 f"{(B, self.nc, nu)}")
            return gx, gu
        if not self._warned:
            self._warned = True
            warnings.warn(f"constraint '{self.name}' does not provide jacobian(); using finite differences (slower "
                          f"and approximate)", stacklevel=3)
        nz, h = ndx + (0 if ctx.u is None else nu), 1e-6
        Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])
        P = Z.shape[0]
        xp = ctx.state.integrate(ctx.x[:, None, :], np.broadcast_to(Z[:, :ndx], (B, P, ndx))).reshape(B * P, -1)
        up = None if ctx.u is None else (ctx.u[:, None, :] + Z[:, ndx:]).reshape(B * P, -1)
        gp = self._residual(ctx, xp, up, np.repeat(ctx.knots, P)).reshape(B, P, self.nc)
        J = np.swapaxes((gp[:, :nz] - gp[:, nz:]) / (2 * h), 1, 2)          # (B, nc, nz)
        return J[..., :ndx], (None if ctx.u is None else J[..., ndx:])
