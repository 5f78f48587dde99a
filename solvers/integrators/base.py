"""What every integrated model shares: the derivatives it produces, its data, and the batched
evaluation interface (Crocoddyl's ``ActionModelAbstract`` / ``ActionDataAbstract`` for the dynamics
part of a knot).

Derivatives are those of the tangent map ``F(dx, du) = f(x ⊕ dx, u + du) ⊖ f(x, u)`` at zero:
``Fx = ∂F/∂dx`` (ndx, ndx), ``Fu = ∂F/∂du`` (ndx, nu) and the second-order tensor
``F2[i, a, b] = ∂²F_i/∂z_a∂z_b`` over ``z = (dx, du)`` (ndx, nz, nz), ``nz = ndx + nu``.
DDP contracts ``F2`` with the next value-function gradient ``V'_x`` (Tassa, Erez & Todorov 2012,
eq. 4).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend

from ..state_space import StateSizes, StateSpace

SECOND_ORDER_MODES = ("auto", "analytical", "fd", "complex")


@dataclass(eq=False)
class DynamicsDerivatives:
    """Derivatives of ``f`` at N knots. ``xnext`` (N, nx) = f(x, u); ``Fx`` (N, ndx, ndx);
    ``Fu`` (N, ndx, nu); the second-order tensor, when requested, in factored form:

        F2[n, i] = Σ_r C[n, r, i] T[n, r]      C (N, R, ndx), T (N, R, nz, nz), nz = ndx + nu

    so DDP's curvature ``V'_x · F2[n] = Σ_r (C[n] V'_x)_r T[n, r]`` never needs the full
    (N, ndx, nz, nz) tensor. For the Euler integrator ``T`` is the acceleration Hessian (R = nv
    rows) plus, for ball/free joints, the SO(3)/SE(3) integration terms of their tangent rows, so
    R = nv (+ the Lie dofs) instead of ndx = 2 nv (see docs/second_order.md); for RK4 and impulse
    knots, C = I and T = F2. :attr:`F2` assembles the full tensor on demand (tests, diagnostics)."""

    xnext: np.ndarray
    Fx: np.ndarray
    Fu: np.ndarray
    C: np.ndarray | None = None
    T: np.ndarray | None = None

    @property
    def has_second_order(self) -> bool:
        return self.T is not None

    @property
    def F2(self) -> np.ndarray | None:
        """The full second-order tensor (N, ndx, nz, nz), assembled from the factors (None when
        not requested)."""
        if self.T is None:
            return None
        return np.einsum("nri,nrab->niab", self.C, self.T)

    def curvature(self, t: int, Vx_next: np.ndarray) -> np.ndarray:
        """``V'_x · F2[t]`` (nz, nz) from the factors."""
        lam = self.C[t] @ Vx_next
        return np.tensordot(lam, self.T[t], axes=(0, 0))


@dataclass(eq=False)
class IntegratedData(DynamicsDerivatives):
    """The data of an integrated model for n knots: the :class:`DynamicsDerivatives` it writes
    (``C``, ``T`` point at ``factors`` after a second-order evaluation and are None after a
    first-order one) and, once :meth:`IntegratedModel.enable_second_order` has run, the factor
    buffers ``factors = (C (n, R, ndx), T (n, R, nz, nz))``. Kinds add their own buffers."""

    factors: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n(self) -> int:
        return self.Fx.shape[0]

    def arrays(self) -> dict[str, np.ndarray]:
        """The buffers this data owns beyond the first-order outputs, by name."""
        return {} if self.factors is None else {"C": self.factors[0], "T": self.factors[1]}


class IntegratedModel(StateSizes, ABC):
    """``x⁺ = f(x, u)`` of one kind of knot for one robot and time step, batched over knots.

    ``integrator`` names the kind (``"euler"``, ``"rk4"``, ``"impulse"``); ``contacts`` is the
    :class:`~dynamics.ContactSet` the dynamics are constrained by (None for free dynamics)."""

    integrator: str
    contacts = None
    restitution = 0.0

    def __init__(self, model: RobotModel, backend: Backend, dt: float, second_order: str = "auto"):
        if second_order not in SECOND_ORDER_MODES:
            raise ValueError(f"unknown second_order '{second_order}'; use one of {', '.join(SECOND_ORDER_MODES)}")
        self.model, self.backend, self.dt = model, backend, float(dt)
        self.second_order = second_order
        self.state = StateSpace(model)

    # ------------------------------------------------------------ sizes (nx, ndx, nu: StateSizes)
    @property
    def second_order_rows(self) -> int:
        """R: the rows of the factors C (n, R, ndx), T (n, R, nz, nz) of :class:`DynamicsDerivatives`
        (ndx with C = I, the default second-order path's layout)."""
        return self.ndx

    @property
    @abstractmethod
    def second_order_source(self) -> str:
        """Where DDP's second-order term on these knots comes from, in words (reported by the solvers)."""

    # ------------------------------------------------------------ data
    def create_data(self, n: int, second_order: bool = False, outputs: tuple | None = None) -> IntegratedData:
        """Data for n knots. outputs: ``(xnext (n, nx), Fx (n, ndx, ndx), Fu (n, ndx, nu))``
        C-contiguous arrays to write the first-order results into (e.g. rows of a problem's
        arrays), else allocated here. second_order: allocate the factor buffers too."""
        if outputs is None:
            outputs = (np.empty((n, self.nx)), np.empty((n, self.ndx, self.ndx)), np.empty((n, self.ndx, self.nu)))
        data = self._make_data(n, *outputs)
        if second_order:
            self.enable_second_order(data)
        return data

    def _make_data(self, n: int, xnext: np.ndarray, Fx: np.ndarray, Fu: np.ndarray) -> IntegratedData:
        """The kind's data object around the first-order outputs (first-order buffers only)."""
        return IntegratedData(xnext, Fx, Fu)

    def enable_second_order(self, data: IntegratedData) -> None:
        """Allocate ``data``'s second-order buffers (once; a no-op when they exist): C = I and T
        for the full tensor F2, the layout of the default second-order path."""
        if data.factors is None:
            n, ndx, nz = data.n, self.ndx, self.ndx + self.nu
            C = np.zeros((n, ndx, ndx))
            C[:, np.arange(ndx), np.arange(ndx)] = 1.0
            data.factors = (C, np.empty((n, ndx, nz, nz)))

    # ------------------------------------------------------------ evaluation
    @abstractmethod
    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``f(x, u)`` (..., nx) for x (..., nx), u (..., nu). States whose result is not finite (a
        diverging rollout) or cannot be evaluated (a contact or impact Jacobian that lost rank)
        come back as NaN rather than raising, so a batched rollout can drop them."""

    @abstractmethod
    def _calc_first_order(self, data: IntegratedData, x: np.ndarray, u: np.ndarray) -> None:
        """``xnext``, ``Fx``, ``Fu`` of x (n, nx), u (n, nu) into ``data``."""

    def _calc_second_order(self, data: IntegratedData, x: np.ndarray, u: np.ndarray) -> None:
        """T (and C where it is not I) into ``data.factors``, after :meth:`_calc_first_order` at the
        same point. Default: central differences of the exact Jacobians."""
        data.factors[1][...] = self._second_order_by_differences(x, u, data.xnext)

    def calc_diff(self, data: IntegratedData, x: np.ndarray, u: np.ndarray,
                  second_order: bool = False) -> IntegratedData:
        """First (and optionally second) derivatives at knots x (n, nx), u (n, nu) float64, written
        into ``data`` (from :meth:`create_data`, with second-order buffers when second_order)."""
        if second_order and data.factors is None:
            raise ValueError("calc_diff: second_order=True needs data with second-order buffers; create it with "
                             "create_data(n, second_order=True) or call enable_second_order(data) first")
        self._calc_first_order(data, x, u)
        if second_order:
            self._calc_second_order(data, x, u)
            data.C, data.T = data.factors
        else:
            data.C = data.T = None
        return data

    def derivatives(self, x: np.ndarray, u: np.ndarray, second_order: bool = False,
                    out: IntegratedData | None = None) -> IntegratedData:
        """:meth:`calc_diff` at x (N, nx), u (N, nu) into ``out``, or into fresh data when None."""
        x, u = np.asarray(x, float), np.asarray(u, float)
        if out is None:
            out = self.create_data(x.shape[0], second_order)
        return self.calc_diff(out, x, u, second_order)

    def contact_solve(self, data: IntegratedData):
        """The :class:`~dynamics.contact.ContactDynamicsBuffers` of the contact solve the last
        :meth:`calc_diff` made at these knots' own (x, u) (its λ and ∂λ serve the contact-force
        costs of the same knots), or None where there is none."""
        return None

    # ------------------------------------------------------------ shared helpers
    def _split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(q, v)`` as C-contiguous arrays (what the backends take without copying or checks)."""
        nq = self.state.nq
        return np.ascontiguousarray(x[..., :nq]), np.ascontiguousarray(x[..., nq:])

    def _second_order_by_differences(self, x: np.ndarray, u: np.ndarray, xn: np.ndarray,
                                     h: float = 1e-5) -> np.ndarray:
        """``F2`` (n, ndx, nz, nz) by central differences of the exact Jacobians of
        ``F(z) = f(x ⊕ dx, u + du) ⊖ f(x, u)``: ``∂F/∂z (z) = Jd(f0, f(z)) [Fx(z) Jint(x, dx), Fu(z)]``,
        all 2 nz perturbations of every knot in one batch (fresh arrays, not the workspace)."""
        ss = self.state
        N, ndx, nu = x.shape[0], self.ndx, self.nu
        nz = ndx + nu
        Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])           # (2nz, nz)
        xp = ss.integrate(x[:, None, :], np.broadcast_to(Z[:, :ndx], (N, 2 * nz, ndx)))
        up = u[:, None, :] + Z[:, ndx:]
        d = self.create_data(N * 2 * nz)
        self._calc_first_order(d, np.ascontiguousarray(xp.reshape(-1, self.nx)), up.reshape(-1, nu))
        _, Jint = ss.integrate_jacobians(np.repeat(x, 2 * nz, axis=0), np.tile(Z[:, :ndx], (N, 1)))
        _, Jd = ss.difference_jacobians(np.repeat(xn, 2 * nz, axis=0), d.xnext)
        Jz = Jd @ np.concatenate([d.Fx @ Jint, d.Fu], axis=-1)
        Jz = Jz.reshape(N, 2 * nz, ndx, nz)
        D = (Jz[:, :nz] - Jz[:, nz:]) / (2 * h)                          # [n, b, i, a] = ∂/∂z_b (∂F_i/∂z_a)
        F2 = np.moveaxis(D, 1, -1)
        return 0.5 * (F2 + np.swapaxes(F2, -1, -2))
