"""Contact-force constraints of rigid-contact knots: the linearised friction cone with a
unilateral normal force (point feet) and the contact wrench cone (flat 6-D feet).

The forces are the contact-dynamics forces ``λ(x, u)`` of the knot (docs/conventions.md: force on
the robot, world axes) and their analytical Jacobians, taken as the contact-force costs take them
(:mod:`solvers.costs.contact`: the dynamics stage's contact solve when it is shared, else one
``contact_dynamics_derivatives`` call). Put the term on knots whose dynamics is
``ContactDynamics`` with the same contact set.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from ..costs.base import CostContext
from ..costs.contact import _ContactForces, friction_pyramid
from .base import Constraint


class FrictionCone(Constraint):
    """Per point-contact foot with force ``(f_x, f_y, f_z)`` (ground normal +z): the ``facets``
    faces ``d · (f_x, f_y) − μ f_z ≤ 0`` of :func:`solvers.costs.friction_pyramid` (with the
    default 4: ``±f_x − μ f_z ≤ 0``, ``±f_y − μ f_z ≤ 0``, Crocoddyl's ``FrictionCone`` order;
    inscribed in the cone of coefficient ``mu`` with ``μ = mu cos(π/facets)`` when ``inscribed``,
    else ``μ = mu``), then the unilateral ``f_z ≥ f_min`` [N]: ``facets + 1`` rows per foot.
    facets: an even number ≥ 4 (more faces: a tighter approximation, more rows)."""

    name = "friction_cone"
    uses_control = True

    def __init__(self, model: RobotModel, contacts, mu: float = 0.7, f_min: float = 0.0, inscribed: bool = True,
                 passive_forces: bool = True, facets: int = 4):
        if getattr(contacts, "kind", None) != "point":
            raise ValueError("FrictionCone: only point contacts (a dynamics.ContactSet of kind 'point')")
        if not (np.isfinite(mu) and mu > 0):
            raise ValueError(f"FrictionCone: mu must be a positive friction coefficient, got {mu}")
        if not (np.isfinite(f_min) and f_min >= 0):
            raise ValueError(f"FrictionCone: f_min must be a finite force >= 0 [N], got {f_min}")
        faces, self.mu = friction_pyramid(mu, facets, inscribed, "FrictionCone")
        self._cf = _ContactForces(model, contacts, passive_forces)
        self.model, self.contacts = model, contacts
        self.feet = len(contacts.frames)
        self.facets = n = len(faces)
        self.nc = (n + 1) * self.feet
        self.f_min = float(f_min)
        A = np.vstack([faces, [0.0, 0.0, 1.0]])
        self.A = np.kron(np.eye(self.feet), A)                 # ((n+1) k, 3k)
        self.set_bounds(np.tile([-np.inf] * n + [self.f_min], self.feet), np.tile([0.0] * n + [np.inf], self.feet))

    def residual(self, ctx: CostContext) -> np.ndarray:
        return self._cf.forces(ctx) @ self.A.T

    def jacobian(self, ctx: CostContext):
        Lx, Lu = self._cf.jacobians(ctx)
        return self.A @ Lx, self.A @ Lu


class WrenchCone(Constraint):
    """Contact wrench cone of flat rectangular feet on 6-D contacts: per foot the 17 linear rows
    ``A w ≤ −b`` of :func:`solvers.costs.wrench_cone_rows` on the contact wrench ``w = (f, τ)``
    (unilateral ``f_z ≥ f_min``, friction pyramid, centre of pressure inside the sole, yaw-torque
    limits; Caron, Pham & Nakamura 2015), as hard constraints. contacts: a ``kind="6d"``
    :class:`dynamics.ContactSet` whose frames sit at the sole centres with +z the sole normal;
    half_length, half_width: the sole's half-extents [m], one value or one per foot; mu: friction
    coefficient (the pyramid's is ``mu/√2`` when ``inscribed``)."""

    name = "wrench_cone"
    uses_control = True

    def __init__(self, model: RobotModel, contacts, half_length, half_width, mu: float = 0.7, f_min: float = 0.0,
                 inscribed: bool = True, passive_forces: bool = True):
        from ..costs import wrench_cone_rows
        if getattr(contacts, "kind", None) != "6d":
            raise ValueError("WrenchCone: only 6-D contacts (a dynamics.ContactSet of kind '6d'); for point feet use "
                             "FrictionCone")
        self._cf = _ContactForces(model, contacts, passive_forces)
        self.model, self.contacts = model, contacts
        self.feet = k = len(contacts.frames)
        X = np.broadcast_to(np.asarray(half_length, float), (k,)) if np.ndim(half_length) == 0 \
            else np.asarray(half_length, float)
        Y = np.broadcast_to(np.asarray(half_width, float), (k,)) if np.ndim(half_width) == 0 \
            else np.asarray(half_width, float)
        if X.shape != (k,) or Y.shape != (k,):
            raise ValueError(f"WrenchCone: half_length and half_width must be scalars or one per foot ({k},) [m], "
                             f"got shapes {X.shape}, {Y.shape}")
        self.mu = float(mu) / (np.sqrt(2.0) if inscribed else 1.0)
        self.f_min = float(f_min)
        self.half_length, self.half_width = X.copy(), Y.copy()
        blocks = [wrench_cone_rows(X[i], Y[i], self.mu, self.f_min) for i in range(k)]
        n = blocks[0][0].shape[0]
        self.nc = n * k
        self.A = np.zeros((self.nc, 6 * k))
        for i, (Ai, _) in enumerate(blocks):
            self.A[n * i:n * (i + 1), 6 * i:6 * (i + 1)] = Ai
        b = np.concatenate([bi for _, bi in blocks])
        self.set_bounds(np.full(self.nc, -np.inf), -b)

    def residual(self, ctx: CostContext) -> np.ndarray:
        return self._cf.forces(ctx) @ self.A.T

    def jacobian(self, ctx: CostContext):
        Lx, Lu = self._cf.jacobians(ctx)
        return self.A @ Lx, self.A @ Lu
