"""Contact wrench cone of flat rectangular feet (6-D contacts) as a soft penalty.

A flat foot in rigid 6-D contact carries a wrench ``w = (f, τ)`` (the contact force and torque
the ground applies, in the contact frame at its origin: :class:`dynamics.ContactSet` with
``kind="6d"``, docs/conventions.md). The ground can give it only when the pressure under the
sole is non-negative and every point of the sole stays inside its friction cone. For a rectangle
``|x| ≤ X``, ``|y| ≤ Y`` centred on the frame origin, normal +z of the frame, and the linearised
(pyramid) friction cone ``|f_x|, |f_y| ≤ μ f_z`` at each point, the set of feasible wrenches is
(Caron, Pham & Nakamura, "Stability of surface contacts for humanoid robots: closed-form
formulae of the contact wrench cone for rectangular support areas", ICRA 2015):

* unilateral normal force ``f_z ≥ f_min``;
* friction ``|f_x| ≤ μ f_z``, ``|f_y| ≤ μ f_z``;
* centre of pressure inside the sole, ``p = (−τ_y, τ_x) / f_z``: ``|τ_x| ≤ Y f_z``,
  ``|τ_y| ≤ X f_z``;
* yaw torque ``τ_min ≤ τ_z ≤ τ_max`` with
  ``τ_max = μ (X + Y) f_z − |Y f_x + μ τ_x| − |X f_y + μ τ_y|`` and
  ``τ_min = −μ (X + Y) f_z + |Y f_x − μ τ_x| + |X f_y − μ τ_y|`` (each absolute value split into
  its two signs: 8 linear rows).

That is 17 linear rows ``g = A w + b ≤ 0`` per foot (:func:`wrench_cone_rows`; rows in N, or N m
for the centre-of-pressure and yaw rows). :class:`WrenchConeCost` penalises ``max(0, g)`` as a
Gauss–Newton residual, the 6-D counterpart of :class:`solvers.costs.FrictionConeCost`, on the
wrenches ``λ(x, u)`` of the knot's contact dynamics with the same force/Jacobian plumbing (one
contact-dynamics solve per evaluation, shared with :class:`solvers.costs.ContactForceCost`).
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from .base import _plain
from .contact import _FUSED, _ContactForceInequality, _ContactForces

ROWS_PER_FOOT = 17
ROW_NAMES = ("unilateral", "friction +x", "friction -x", "friction +y", "friction -y",
             "cop +y", "cop -y", "cop +x", "cop -x",
             "yaw max ++", "yaw max +-", "yaw max -+", "yaw max --",
             "yaw min ++", "yaw min +-", "yaw min -+", "yaw min --")


def wrench_cone_rows(half_length: float, half_width: float, mu: float, f_min: float = 0.0):
    """``(A (17, 6), b (17,))``: the wrench ``w = (f_x, f_y, f_z, τ_x, τ_y, τ_z)`` of a flat
    rectangular foot (half-extents ``half_length`` = X along the frame's x, ``half_width`` = Y
    along y [m], centred on the frame origin) is feasible for friction coefficient ``mu`` (the
    pyramid's) and minimum normal force ``f_min`` [N] iff ``A w + b ≤ 0`` row by row
    (:data:`ROW_NAMES`; see the module docstring). The centre-of-pressure rows are
    ``f_z (±p_y − Y)`` and ``f_z (±p_x − X)`` with ``p`` the centre of pressure."""
    X, Y, mu = float(half_length), float(half_width), float(mu)
    if not (X > 0 and Y > 0 and np.isfinite(X) and np.isfinite(Y)):
        raise ValueError(f"wrench cone: the sole half-extents must be positive lengths [m], got "
                         f"half_length={half_length}, half_width={half_width}")
    if not (mu > 0 and np.isfinite(mu)):
        raise ValueError(f"wrench cone: mu must be a positive friction coefficient, got {mu}")
    if not np.isfinite(f_min):
        raise ValueError(f"wrench cone: f_min must be a finite force [N], got {f_min}")
    rows = [[0, 0, -1, 0, 0, 0],                   # f_min - f_z <= 0 (b carries f_min)
            [1, 0, -mu, 0, 0, 0], [-1, 0, -mu, 0, 0, 0], [0, 1, -mu, 0, 0, 0], [0, -1, -mu, 0, 0, 0],
            [0, 0, -Y, 1, 0, 0], [0, 0, -Y, -1, 0, 0],          # ±τ_x = ±p_y f_z  <= Y f_z
            [0, 0, -X, 0, -1, 0], [0, 0, -X, 0, 1, 0]]          # ∓τ_y = ±p_x f_z  <= X f_z
    c = -mu * (X + Y)
    for s1 in (1, -1):                             # τ_z + s1 (Y f_x + μ τ_x) + s2 (X f_y + μ τ_y) <= μ (X+Y) f_z
        for s2 in (1, -1):
            rows.append([s1 * Y, s2 * X, c, s1 * mu, s2 * mu, 1])
    for s1 in (1, -1):                             # −τ_z + s1 (Y f_x − μ τ_x) + s2 (X f_y − μ τ_y) <= μ (X+Y) f_z
        for s2 in (1, -1):
            rows.append([s1 * Y, s2 * X, c, -s1 * mu, -s2 * mu, -1])
    b = np.zeros(ROWS_PER_FOOT)
    b[0] = float(f_min)
    return np.array(rows, float), b


class WrenchConeCost(_ContactForceInequality):
    """Contact wrench cone of flat rectangular feet on 6-D contacts as a soft penalty: residuals
    ``max(0, A λ + b)`` (17 per foot, :func:`wrench_cone_rows`), zero inside the cone, quadratic
    outside (Gauss–Newton, like :class:`FrictionConeCost`).

    contacts: a ``kind="6d"`` :class:`dynamics.ContactSet` whose frames sit at the sole centres
    with +z the sole normal; half_length, half_width: the sole rectangle's half-extents along the
    frame's x and y [m], one value for all feet or one per foot (k,); mu: friction coefficient
    (the pyramid's is ``mu / √2`` when ``inscribed``, inside the true cone); f_min: minimum normal
    force [N] (the foot stays loaded); weights (17 k,) or per knot; passive_forces: as in the
    knot's :class:`solvers.ContactDynamics`."""

    name = "wrench_cone"
    uses_control = True

    def __init__(self, model: RobotModel, contacts, half_length, half_width, mu: float = 0.7, f_min: float = 0.0,
                 weights=None, inscribed: bool = True, passive_forces: bool = True):
        kind = getattr(contacts, "kind", None)
        if kind is not None and kind != "6d":
            raise ValueError(f"WrenchConeCost: needs 6-D contacts (ContactSet(..., kind='6d'), one wrench per "
                             f"sole), got kind='{kind}'; for point contacts use FrictionConeCost")
        self._cf = _ContactForces(model, contacts, passive_forces)
        self.model = model
        self.k = len(contacts.frames)
        self.nr = ROWS_PER_FOOT * self.k
        X = np.broadcast_to(np.asarray(half_length, float), (self.k,)) if np.ndim(half_length) == 0 \
            else np.asarray(half_length, float)
        Y = np.broadcast_to(np.asarray(half_width, float), (self.k,)) if np.ndim(half_width) == 0 \
            else np.asarray(half_width, float)
        if X.shape != (self.k,) or Y.shape != (self.k,):
            raise ValueError(f"WrenchConeCost: half_length and half_width are one length or one per foot "
                             f"({self.k},) [m], got shapes {X.shape}, {Y.shape}")
        super().__init__(weights)
        self.mu = float(mu) / (np.sqrt(2.0) if inscribed else 1.0)
        self.f_min = float(f_min)
        self.half_length, self.half_width = X.copy(), Y.copy()
        blocks = [wrench_cone_rows(X[i], Y[i], self.mu, self.f_min) for i in range(self.k)]
        A = np.zeros((self.nr, 6 * self.k))
        for i, (Ai, _) in enumerate(blocks):
            A[ROWS_PER_FOOT * i:ROWS_PER_FOOT * (i + 1), 6 * i:6 * (i + 1)] = Ai
        self._A = A                                                   # (17k, 6k)
        self._b = np.concatenate([bi for _, bi in blocks])            # (17k,)

    def constraint_values(self, wrenches) -> np.ndarray:
        """``A λ + b`` (..., 17 k) for wrenches λ (..., 6 k): ≤ 0 row by row inside the cone."""
        return np.asarray(wrenches, float) @ self._A.T + self._b

    def _fused_ok(self) -> bool:
        # the inherited fused derivatives: on the active rows only (most knots have none) and
        # reduced to the wrench first, lx = Λxᵀ Aᵀ W r, lxx = Λxᵀ (Aᵀ W A) Λx (6k rows, not 17k)
        return _plain(self, WrenchConeCost, _FUSED)
