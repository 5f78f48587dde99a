"""Costs on the contact forces of rigid-contact knots: force regularisation towards a reference
distribution, and a linearised friction cone as a soft penalty.

The forces are those of :meth:`dynamics.Backend.contact_dynamics` at the knot's state and control,
``λ(x, u)`` (nc,) (docs/conventions.md: point contacts, force on the robot, world axes), with
``τ = B u + τ_passive(q, v)`` as in the dynamics; their Jacobians come from the analytical
``contact_dynamics_derivatives`` (Carpentier & Mansard 2018), chained through ``τ``. Both costs
are Gauss–Newton (residual) costs, evaluated batched over their knots: one contact-dynamics and one
derivative call per evaluation. Use them on knots whose dynamics is ``ContactDynamics`` with the
same contact set.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from dynamics.actuation import Actuation

from ..contact_or_nan import contact_dynamics_or_nan
from .base import CostContext, PerKnotReference, ResidualCost


class _ContactForces:
    """λ(x, u) and its Jacobians for one contact set (shared by the costs below, memoised per context)."""

    def __init__(self, model: RobotModel, contacts, passive_forces: bool):
        from dynamics.contact import ContactSet
        if not isinstance(contacts, ContactSet):
            raise TypeError(f"contacts must be a dynamics.ContactSet, got {type(contacts).__name__}")
        if contacts.model is not model:
            raise ValueError("the ContactSet was built for another RobotModel than the cost's")
        self.model, self.contacts, self.passive = model, contacts, bool(passive_forces)
        self.actuation = Actuation(model, passive_forces)
        self.B, self.damping, self.stiffness = self.actuation.B, self.actuation.damping, self.actuation.stiffness

    def torques(self, q, v, u):
        return self.actuation.torques(q, v, u)

    def forces(self, ctx: CostContext) -> np.ndarray:
        def compute():
            q, v = ctx.q, np.ascontiguousarray(ctx.v)
            return contact_dynamics_or_nan(ctx.backend, self.model, q, v, self.torques(q, v, ctx.u), self.contacts)[1]
        return ctx.memo(("contact_forces", id(self.contacts), self.passive), compute)

    def jacobians(self, ctx: CostContext):
        """``(Λx (B, nc, ndx), Λu (B, nc, nu))``; the forces of the same solve are memoised for
        :meth:`forces` (no second contact-dynamics call in a derivative evaluation)."""
        def compute():
            shared = ctx.contact_solve(self.contacts)
            if shared is not None and self.actuation.same_as(shared[0].actuation):
                # the dynamics stage solved these knots' contact dynamics with the same torques
                _, lam, (dl_dq, dl_dv, dl_dt) = shared
            else:
                q, v = ctx.q, np.ascontiguousarray(ctx.v)
                (_, lam), d = ctx.backend.contact_dynamics_derivatives(self.model, q, v, self.torques(q, v, ctx.u),
                                                                       self.contacts, return_values=True)
                dl_dq, dl_dv, dl_dt = d[3], d[4], d[5]
            ctx.cache.setdefault(("contact_forces", id(self.contacts), self.passive), lam)
            dl_dq, dl_dv = self.actuation.chain_partials(dl_dq, dl_dv, dl_dt)
            return np.concatenate([dl_dq, dl_dv], axis=-1), dl_dt @ self.B
        return ctx.memo(("contact_force_jacobians", id(self.contacts), self.passive), compute)


class _ContactForceResidual(ResidualCost):
    """Shared by the costs below: a derivative evaluation takes the forces and their Jacobians from
    one contact-dynamics solve (the Jacobians first, which memoise the forces in the context)."""

    _cf: _ContactForces

    def derivatives(self, ctx: CostContext):
        self._cf.jacobians(ctx)
        return super().derivatives(ctx)


class ContactForceCost(_ContactForceResidual):
    """``r = λ(x, u) − λ_ref`` (nc,): regularises the contact forces towards a reference
    distribution (e.g. the weight shared evenly by the feet), which keeps a rigid-contact MPC from
    planning forces the ground cannot give. reference (nc,) or per knot (K, nc) [N]."""

    name = "contact_force"
    uses_control = True

    def __init__(self, model: RobotModel, contacts, reference=None, weights=None, passive_forces: bool = True):
        self._cf = _ContactForces(model, contacts, passive_forces)
        self.model = model
        self.nr = contacts.nc
        super().__init__(weights)
        self.reference = np.zeros(self.nr) if reference is None else reference

    reference = PerKnotReference("_reference", "{name} reference", lambda cost: (cost.nr,))

    def residual(self, ctx: CostContext) -> np.ndarray:
        return self._cf.forces(ctx) - ctx.rows_of(f"{self.name} reference", self._reference, (self.nr,))

    def residual_jacobian(self, ctx: CostContext):
        return self._cf.jacobians(ctx)


class _ContactForceInequality(_ContactForceResidual):
    """``r = max(0, A λ + b)``: the violations of linear inequalities ``A λ + b ≤ 0`` on the contact
    forces λ as a soft penalty. The subclass sets ``_A`` and ``_b``."""

    def _g(self, ctx: CostContext) -> np.ndarray:
        return self._cf.forces(ctx) @ self._A.T + self._b

    def residual(self, ctx: CostContext) -> np.ndarray:
        return np.maximum(self._g(ctx), 0.0)

    def residual_jacobian(self, ctx: CostContext):
        active = (self._g(ctx) > 0.0)[..., None]
        Lx, Lu = self._cf.jacobians(ctx)
        return active * (self._A @ Lx), active * (self._A @ Lu)


class FrictionConeCost(_ContactForceInequality):
    """Linearised friction cone of point contacts as a soft penalty: for each foot with force
    ``(f_x, f_y, f_z)`` (world axes, ground normal +z) the residuals ``max(0, ±f_x − μ f_z)``,
    ``max(0, ±f_y − μ f_z)`` (a four-sided pyramid, inscribed with ``μ = mu / √2`` when
    ``inscribed``) and ``max(0, f_min − f_z)`` (unilateral: the ground only pushes). Zero inside the
    cone, quadratic outside (Gauss–Newton)."""

    name = "friction_cone"
    uses_control = True

    def __init__(self, model: RobotModel, contacts, mu: float = 0.7, f_min: float = 0.0, weights=None,
                 inscribed: bool = True, passive_forces: bool = True):
        if contacts.kind != "point":
            raise ValueError("FrictionConeCost: only point contacts; for a 6-D (flat-foot) contact use "
                             "solvers.costs.WrenchConeCost (friction, centre-of-pressure and yaw-torque limits)")
        if not (mu > 0 and np.isfinite(mu)):
            raise ValueError(f"FrictionConeCost: mu must be a positive friction coefficient, got {mu}")
        self._cf = _ContactForces(model, contacts, passive_forces)
        self.model = model
        self.k = len(contacts.frames)
        self.nr = 5 * self.k
        super().__init__(weights)
        self.mu = float(mu) / (np.sqrt(2.0) if inscribed else 1.0)
        self.f_min = float(f_min)
        A = np.array([[1, 0, -self.mu], [-1, 0, -self.mu], [0, 1, -self.mu], [0, -1, -self.mu], [0, 0, -1.0]])
        self._A = np.kron(np.eye(self.k), A)                       # (5k, 3k)
        self._b = np.tile([0, 0, 0, 0, self.f_min], self.k)
