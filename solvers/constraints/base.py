"""Constraint interface: a residual ``g(x, u)`` (B, nc) with bounds ``lower ≤ g ≤ upper``,
evaluated batched over the knots that share the term (as costs are, :mod:`solvers.costs.base`).

A row is an equality when its two bounds are equal and one-sided when the other bound is ±inf.
Jacobians are taken along the tangent perturbation ``g(x ⊕ dx, u + du)`` (docs/conventions.md):
``Gx`` (B, nc, ndx), ``Gu`` (B, nc, nu) or None for a term that does not depend on the control.
Bounds are constant (nc,) or per knot (K, nc) with K covering the knots used (like per-knot cost
references). The context is the costs' :class:`~solvers.costs.base.CostContext`, so constraints
share the kinematics and the contact solves of the problem's cost evaluation.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from ..costs.base import CostContext


def check_bounds(name: str, lower, upper, nc: int) -> tuple[np.ndarray, np.ndarray]:
    """``lower``, ``upper`` as read-only float arrays of shape (nc,) or per knot (K, nc), checked:
    no NaN (±inf is "no bound"), the shapes agree, and ``lower <= upper`` everywhere; the error names
    the term, the row and the knot."""
    lo, hi = np.array(lower, dtype=float), np.array(upper, dtype=float)
    for label, a in (("lower", lo), ("upper", hi)):
        if a.shape != (nc,) and not (a.ndim == 2 and a.shape[1] == nc and a.shape[0] > 0):
            raise ValueError(f"constraint '{name}': {label} bound has shape {a.shape}; expected ({nc},) or per knot "
                             f"(K, {nc})")
        if np.isnan(a).any():
            raise ValueError(f"constraint '{name}': {label} bound contains NaN; use ±inf for no bound")
    bad = np.argwhere(np.broadcast_arrays(lo, hi)[0] > np.broadcast_arrays(lo, hi)[1])
    if bad.size:
        where = (f"row {int(bad[0][-1])}" + (f" at knot {int(bad[0][0])}" if bad.shape[1] == 2 else ""))
        lo_b, hi_b = np.broadcast_arrays(lo, hi)
        raise ValueError(f"constraint '{name}': lower bound {lo_b[tuple(bad[0])]:.6g} > upper bound "
                         f"{hi_b[tuple(bad[0])]:.6g} in {where}; the constraint set is infeasible — swap or "
                         f"relax the bounds")
    if np.isneginf(hi).any() or np.isposinf(lo).any():
        raise ValueError(f"constraint '{name}': an upper bound of -inf or a lower bound of +inf cannot be met")
    lo.setflags(write=False)
    hi.setflags(write=False)
    return lo, hi


class Constraint:
    """A constraint term. Subclasses set ``nc`` and implement :meth:`residual` and
    :meth:`jacobian`; the bounds are given to :meth:`set_bounds`. ``uses_control``: the residual
    depends on u (such a term cannot be on a terminal knot)."""

    name: str = "constraint"
    nc: int = 0
    uses_control: bool = False

    def set_bounds(self, lower, upper) -> None:
        self.lower, self.upper = check_bounds(self.name, lower, upper, self.nc)

    def residual(self, ctx: CostContext) -> np.ndarray:
        """``g`` (B, nc) at the context's knots."""
        raise NotImplementedError

    def jacobian(self, ctx: CostContext) -> tuple[np.ndarray, np.ndarray | None]:
        """``(Gx (B, nc, ndx), Gu (B, nc, nu) or None)``."""
        raise NotImplementedError

    def bounds(self, knots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` (B, nc) at knots (B,)."""
        out = []
        for label, a in (("lower", self.lower), ("upper", self.upper)):
            if a.ndim == 1:
                out.append(np.broadcast_to(a, (knots.size, self.nc)))
                continue
            if knots.size and knots.max() >= a.shape[0]:
                raise IndexError(f"constraint '{self.name}': {label} bound is given for {a.shape[0]} knots but knot "
                                 f"{int(knots.max())} was requested")
            out.append(a[knots])
        return out[0], out[1]

    def check_model(self, model: RobotModel) -> None:
        """Raise if this term was built for another robot."""
        own = getattr(self, "model", None)
        if own is not None and own is not model and (own.name != model.name or own.nq != model.nq):
            raise ValueError(f"constraint '{self.name}' was built for model '{own.name}', not '{model.name}'")

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self.name}', nc={self.nc})"
