"""Costs on the contact forces of rigid-contact knots: force regularisation towards a reference
distribution, and a linearised friction cone as a soft penalty.

The forces are those of :meth:`dynamics.Backend.contact_dynamics` at the knot's state and control,
``λ(x, u)`` (nc,) (docs/conventions.md: point contacts, force on the robot, world axes), with
``τ = B u + τ_passive(q, v)`` as in the dynamics; their Jacobians come from the analytical
``contact_dynamics_derivatives`` (Carpentier & Mansard 2018), chained through ``τ``. Both costs
are Gauss–Newton (residual) costs, evaluated batched over their knots: one contact-dynamics and one
derivative call per evaluation. Both are functions of λ alone, so their Gauss–Newton products are taken on
the nc force rows (``Λxᵀ H Λx`` with ``H = ∂²l/∂λ²``), not on the residual rows, and the cones' only
at the knots where a row is active. Use them on knots whose dynamics is ``ContactDynamics`` with the
same contact set.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from dynamics.actuation import Actuation

from ..contact_or_nan import contact_dynamics_or_nan
from .base import CostContext, CostDerivatives, PerKnotReference, ResidualCost, _plain

#: the methods a subclass must not override for the fused derivatives below to be its own
_FUSED = ("value", "derivatives", "residual", "residual_jacobian", "_g")


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

    def _shared(self, ctx: CostContext):
        """The context's contact solve of these knots (:meth:`CostContext.contact_solve`) when it was
        made with this set and the same torques, else None."""
        shared = ctx.contact_solve(self.contacts)
        if shared is not None and self.actuation.same_as(shared[0].actuation):
            return shared
        return None

    def forces(self, ctx: CostContext) -> np.ndarray:
        """λ (B, nc) at the context's knots: from the solve that the dynamics stage or the forward
        pass already made at the same states and controls, else one contact-dynamics call."""
        def compute():
            shared = self._shared(ctx)
            if shared is not None:
                return shared[1]
            q, v = ctx.q, np.ascontiguousarray(ctx.v)
            return contact_dynamics_or_nan(ctx.backend, self.model, q, v, self.torques(q, v, ctx.u), self.contacts)[1]
        return ctx.memo(("contact_forces", id(self.contacts), self.passive), compute)

    def jacobians(self, ctx: CostContext):
        """``(Λx (B, nc, ndx), Λu (B, nc, nu))``; the forces of the same solve are memoised for
        :meth:`forces` (no second contact-dynamics call in a derivative evaluation)."""
        def compute():
            shared = self._shared(ctx)
            if shared is not None and shared[2] is not None:
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


def _chain_to_state(out: CostDerivatives, rows, Lx: np.ndarray, Lu: np.ndarray, gl: np.ndarray,
                    H: np.ndarray) -> None:
    """Add the Gauss–Newton derivatives of a cost that is quadratic in the contact forces λ at the
    knots ``rows`` (an index array or a slice): ``lx += Λxᵀ gl``, ``lu += Λuᵀ gl``, ``lxx += Λxᵀ H Λx``,
    ``lxu += Λxᵀ H Λu``, ``luu += Λuᵀ H Λu``, with gl (n, nc) = ∂l/∂λ and H = ∂²l/∂λ² either
    (n, nc) (diagonal) or (n, nc, nc); Λx (B, nc, ndx), Λu (B, nc, nu) the force Jacobians. The
    products are taken on the nc force rows (not on the cost's residual rows, 5 or 17 per foot for
    the cones) and one batched product per block."""
    Lx, Lu = Lx[rows], Lu[rows]
    LxT, LuT = np.swapaxes(Lx, -1, -2), np.swapaxes(Lu, -1, -2)
    if H.ndim == 2:
        HLx, HLu = H[..., None] * Lx, H[..., None] * Lu
    else:
        HLx, HLu = H @ Lx, H @ Lu
    out.lx[rows] += (LxT @ gl[..., None])[..., 0]
    out.lu[rows] += (LuT @ gl[..., None])[..., 0]
    out.lxx[rows] += LxT @ HLx
    out.lxu[rows] += LxT @ HLu
    out.luu[rows] += LuT @ HLu


class _ContactForceResidual(ResidualCost):
    """Shared by the costs below: a derivative evaluation takes the forces and their Jacobians from
    one contact-dynamics solve (the Jacobians first, which memoise the forces in the context)."""

    _cf: _ContactForces

    def derivatives(self, ctx: CostContext):
        out = CostDerivatives.zeros(ctx.batch, ctx.state.ndx, ctx.model.nu)
        self._accumulate(ctx, out, 1.0)
        return out

    def _fused_ok(self) -> bool:
        """Whether this object runs its library class's math (a subclass overriding it does not
        take the fused derivatives); each library class says so for itself."""
        return False

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        """``out += w * derivatives``, the Gauss–Newton products reduced to the force rows
        (:func:`_chain_to_state`); a subclass that overrides the math gets ResidualCost's products."""
        if not self._fused_ok():
            self._cf.jacobians(ctx)
            out._add_weighted(ResidualCost.derivatives(self, ctx), w)
            return
        Lx, Lu = self._cf.jacobians(ctx)
        wk = np.broadcast_to(np.asarray(w, float), (ctx.batch,))
        self._fused(ctx, out, wk, Lx, Lu)

    def _fused(self, ctx: CostContext, out: CostDerivatives, wk: np.ndarray, Lx, Lu) -> None:
        raise NotImplementedError


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

    def _fused_ok(self) -> bool:
        return _plain(self, ContactForceCost, _FUSED)

    def _fused(self, ctx: CostContext, out: CostDerivatives, wk: np.ndarray, Lx, Lu) -> None:
        # r = λ - λ_ref, Λ the residual Jacobian itself: gl = w W r, H = diag(w W)
        r = self.residual(ctx)
        Wk = wk[:, None] * self._wk(ctx)
        out.l += 0.5 * (Wk * r * r).sum(axis=-1)
        _chain_to_state(out, slice(None), Lx, Lu, Wk * r, np.broadcast_to(Wk, r.shape))


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

    def _fused(self, ctx: CostContext, out: CostDerivatives, wk: np.ndarray, Lx, Lu) -> None:
        # on the knots with an active row only (inside the cone the cost and its derivatives are
        # zero): gl = Aᵀ W_a r, H = Aᵀ W_a A with W_a the weights of the active rows
        g = self._g(ctx)
        r = np.maximum(g, 0.0)
        Wa = wk[:, None] * np.broadcast_to(self._wk(ctx), r.shape) * (g > 0.0)
        out.l += 0.5 * (Wa * r * r).sum(axis=-1)
        rows = np.flatnonzero((g > 0.0).any(axis=-1))
        if rows.size:
            Wa = Wa[rows]
            A = self._A
            _chain_to_state(out, rows, Lx, Lu, (Wa * r[rows]) @ A, (A.T * Wa[:, None, :]) @ A)


def friction_pyramid(mu: float, facets: int = 4, inscribed: bool = True, owner: str = "friction_pyramid"):
    """The faces of a linearised friction cone of coefficient ``mu`` (ground normal +z): rows
    ``(d_x, d_y, −μ)`` (facets, 3) of the inequalities ``d · (f_x, f_y) − μ f_z ≤ 0`` and the slope μ.
    Face pair i (θ = 2π i / facets, i < facets/2) has ``d = ±(cos θ, sin θ)`` — with 4: ``±f_x``,
    ``±f_y``, Crocoddyl's ``FrictionCone`` order — and the polygon is inscribed in the cone
    (``μ = mu cos(π/facets)``, ``mu/√2`` for 4) when ``inscribed``, else circumscribed (``μ = mu``).
    facets: an even number ≥ 4; owner names the caller in the error."""
    if isinstance(facets, bool) or int(facets) != facets or facets < 4 or facets % 2:
        raise ValueError(f"{owner}: facets must be an even number >= 4 (the cone's faces come in opposite "
                         f"pairs), got {facets!r}")
    n = int(facets)
    if n == 4:      # the axis-aligned square, exact zeros (cos(π/2) is not 0 in floating point)
        slope = float(mu) / (np.sqrt(2.0) if inscribed else 1.0)
        faces = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    else:
        slope = float(mu) * (np.cos(np.pi / n) if inscribed else 1.0)
        theta = 2.0 * np.pi * np.arange(n // 2) / n
        d = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
        faces = np.stack([d, -d], axis=1).reshape(n, 2)
    rows = np.empty((n, 3))
    rows[:, :2], rows[:, 2] = faces, -slope
    return rows, slope


class FrictionConeCost(_ContactForceInequality):
    """Linearised friction cone of point contacts as a soft penalty: for each foot with force
    ``(f_x, f_y, f_z)`` (world axes, ground normal +z) the residuals ``max(0, d · (f_x, f_y) − μ f_z)``
    of the ``facets`` faces of :func:`friction_pyramid` (4: ``±f_x``, ``±f_y``; inscribed with
    ``μ = mu cos(π/facets)`` when ``inscribed``) and ``max(0, f_min − f_z)`` (unilateral: the ground
    only pushes): ``facets + 1`` rows per foot. Zero inside the cone, quadratic outside (Gauss–Newton)."""

    name = "friction_cone"
    uses_control = True

    def __init__(self, model: RobotModel, contacts, mu: float = 0.7, f_min: float = 0.0, weights=None,
                 inscribed: bool = True, passive_forces: bool = True, facets: int = 4):
        if contacts.kind != "point":
            raise ValueError("FrictionConeCost: only point contacts; for a 6-D (flat-foot) contact use "
                             "solvers.costs.WrenchConeCost (friction, centre-of-pressure and yaw-torque limits)")
        if not (mu > 0 and np.isfinite(mu)):
            raise ValueError(f"FrictionConeCost: mu must be a positive friction coefficient, got {mu}")
        faces, self.mu = friction_pyramid(mu, facets, inscribed, "FrictionConeCost")
        self.facets = n = len(faces)
        self._cf = _ContactForces(model, contacts, passive_forces)
        self.model = model
        self.k = len(contacts.frames)
        self.nr = (n + 1) * self.k
        super().__init__(weights)
        self.f_min = float(f_min)
        A = np.vstack([faces, [0.0, 0.0, -1.0]])
        self._A = np.kron(np.eye(self.k), A)                       # ((n+1) k, 3k)
        self._b = np.tile([0.0] * n + [self.f_min], self.k)

    def _fused_ok(self) -> bool:
        return _plain(self, FrictionConeCost, _FUSED)
