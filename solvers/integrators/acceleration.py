"""The continuous dynamics an integrator steps: the acceleration ``a(q, v, τ)`` of the free robot
(ABA) or of the robot held by rigid contacts (the KKT solve of
:meth:`dynamics.Backend.contact_dynamics`), with its first- and second-order partials — the part
of Crocoddyl's differential action models (``DifferentialActionModelFreeFwdDynamics`` /
``ContactFwdDynamics``) that differs between the two. The torque map ``τ = B u + τ_passive`` and
the integration are the integrator's (:mod:`solvers.integrators.actuated`).

First order (both): into buffers bound once per data object (:class:`AccelerationBuffers`); free
dynamics through :meth:`dynamics.Backend.prepare_aba_derivatives` (Plancher et al. 2021, Alg. 3),
contact dynamics through :meth:`dynamics.Backend.prepare_contact_dynamics_derivatives`
(Carpentier & Mansard 2018).
Second order: the backend's ``aba_second_derivatives`` (FDSVA-SO, Singh, Russell & Wensing 2022
eq. 46) or central / complex-step differences of the first-order partials; contact dynamics have
central differences only. Where the backend has ``aba_second_derivatives_bracket`` (the tensors
before their outer ``−M⁻¹``), the Euler integrator takes those and folds ``−M⁻¹`` into its factor C
(:attr:`FreeAcceleration.bracket_second_order`, docs/second_order.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend
from dynamics.second_order_numerical import aba_second_derivatives_numerical, contact_second_derivatives_numerical

from ..contact_or_nan import contact_dynamics_or_nan


@dataclass(eq=False)
class AccelerationBuffers:
    """First-order results for n states, written by ``run()`` from what the state buffers it was
    bound to hold: ``a`` (n, nv), ``partials`` (3, n, nv, nv) = (∂a/∂q, ∂a/∂v, ∂a/∂τ), ``tmp``
    (n, nv, nv) a temporary for the caller; ``contact`` the
    :class:`~dynamics.contact.ContactDynamicsBuffers` of a contact solve (None for free dynamics)."""

    a: np.ndarray
    partials: np.ndarray
    tmp: np.ndarray
    run: Callable[[], None]
    contact: object = None

    def arrays(self) -> dict[str, np.ndarray]:
        if self.contact is None:
            return {"a": self.a, "partials": self.partials, "tmp": self.tmp}
        c = self.contact
        return {"contact.a": c.a, "contact.lam": c.lam, "contact.da": c.da, "contact.dl": c.dl, "tmp": self.tmp}


class FreeAcceleration:
    """``a = ABA(q, v, τ)``. second_order: source of ``∂²a`` (``"auto"``: analytical when the
    backend has ``aba_second_derivatives``, else ``"fd"``; ``"analytical"``, ``"fd"``, ``"complex"``)."""

    contacts = None

    def __init__(self, model: RobotModel, backend: Backend, second_order: str = "auto"):
        if second_order == "analytical" and not backend.supports("aba_second_derivatives"):
            raise ValueError(f"second_order='analytical' but backend '{backend.name}' does not implement "
                             f"aba_second_derivatives; use second_order='auto' or 'fd'")
        if second_order == "complex" and not backend.complex_step_safe:
            raise ValueError(f"second_order='complex' needs a complex-step-safe backend (the 'numpy' reference), not "
                             f"'{backend.name}'; use second_order='fd'")
        if second_order == "auto":
            second_order = "analytical" if backend.supports("aba_second_derivatives") else "fd"
        self.model, self.backend, self.mode = model, backend, second_order

    @property
    def analytical_second_order(self) -> bool:
        """Whether ``∂²a`` comes from the backend (written into a caller's buffer)."""
        return self.mode == "analytical"

    @property
    def bracket_second_order(self) -> bool:
        """Whether the backend also gives the bracketed terms ``B`` of ``∂²a = −M⁻¹ B``
        (:meth:`dynamics.Backend.aba_second_derivatives_bracket`), so a caller that contracts the
        output index can fold ``−M⁻¹`` (``∂a/∂τ``) into its contraction instead."""
        return self.mode == "analytical" and self.backend.supports("aba_second_derivatives_bracket")

    @property
    def second_order_source(self) -> str:
        return {"analytical": "analytical (FDSVA-SO, Singh, Russell & Wensing 2022)",
                "fd": "central differences of the analytical first-order ABA derivatives",
                "complex": "complex step of the analytical first-order ABA derivatives"}[self.mode]

    def value(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray, forces: np.ndarray | None = None) -> np.ndarray:
        """``a`` (n, nv); ``forces`` is for the contact model's signature (free dynamics has none)."""
        return self.backend.aba(self.model, q, v, tau)

    def create_buffers(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> AccelerationBuffers:
        """Buffers for the states q (n, nq), v, tau (n, nv) (C-contiguous, the caller's), with the
        backend's call bound to them once."""
        n, nv = q.shape[0], self.model.nv
        D = np.empty((4, n, nv, nv))          # ∂a/∂(q, v, τ) and a temporary: one allocation
        a = np.empty((n, nv))
        run = self.backend.prepare_aba_derivatives(self.model, q, v, tau, D[:3], a)
        return AccelerationBuffers(a, D[:3], D[3], run)

    def second_order_tensors(self, q, v, tau, out: np.ndarray | None = None, bracket: bool = False) -> tuple:
        """``(∂²a/∂q², ∂²a/∂v², ∂²a/∂q∂v, ∂²a/∂q∂τ)`` (n, nv, nv, nv); out: (4, n, nv, nv, nv)
        buffer the analytical call writes into (the numerical ones return fresh arrays). bracket
        (only where :attr:`bracket_second_order`): the bracketed terms ``B`` instead, ``∂²a = −M⁻¹ B``."""
        if bracket:
            return self.backend.aba_second_derivatives_bracket(self.model, q, v, tau, out=out)
        if self.mode == "analytical":
            return self.backend.aba_second_derivatives(self.model, q, v, tau, out=out)
        method = "central" if self.mode == "fd" else "complex"
        return aba_second_derivatives_numerical(self.backend, self.model, q, v, tau, method=method)


class ContactAcceleration:
    """The constrained acceleration of the contact set ``contacts`` (point contacts do not
    accelerate, 6-D contacts do not move); states whose contact Jacobian lost rank give NaN."""

    analytical_second_order = False
    bracket_second_order = False
    second_order_source = "central differences of the analytical first-order contact-dynamics derivatives"

    def __init__(self, model: RobotModel, backend: Backend, contacts, second_order: str = "auto"):
        if second_order in ("analytical", "complex"):
            raise ValueError(f"second_order='{second_order}' is not available for contact dynamics (no analytical "
                             f"second-order contact derivatives yet); use second_order='auto' or 'fd' (central "
                             f"differences of the analytical first-order ones)")
        self.model, self.backend, self.contacts = model, backend, contacts

    def value(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray, forces: np.ndarray | None = None) -> np.ndarray:
        """``a`` (n, nv); the contact forces λ of the same solve into ``forces`` (n, nc) when given
        (NaN where the contact Jacobian lost rank)."""
        a, lam = contact_dynamics_or_nan(self.backend, self.model, q, v, tau, self.contacts)
        if forces is not None:
            forces[...] = lam
        return a

    def create_buffers(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> AccelerationBuffers:
        from dynamics.contact import ContactDynamicsBuffers
        n, nv = q.shape[0], self.model.nv
        cb = ContactDynamicsBuffers.allocate(n, nv, self.contacts.nc)
        run = self.backend.prepare_contact_dynamics_derivatives(self.model, q, v, tau, self.contacts, cb)
        # ∂a/∂τ of the contact solve stands where M⁻¹ stands for free dynamics
        return AccelerationBuffers(cb.a, cb.da, np.empty((n, nv, nv)), run, cb)

    def second_order_tensors(self, q, v, tau, out: np.ndarray | None = None, bracket: bool = False) -> tuple:
        return contact_second_derivatives_numerical(self.backend, self.model, q, v, tau, self.contacts)
