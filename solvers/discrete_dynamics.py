"""Discrete-time robot dynamics ``x⁺ = f(x, u)`` described by keywords: :func:`DiscreteDynamics`
builds the integrated model of :mod:`solvers.integrators` that an
:class:`~solvers.action_model.ActionModel` with the same description would use.

>>> dyn = DiscreteDynamics(model, backend, 0.01, "rk4")                # an RK4Model on free dynamics
>>> d = dyn.derivatives(xs, us, second_order=True)                      # Fx, Fu, C, T of N knots
"""

from __future__ import annotations

from dynamics import RobotModel
from dynamics.backend import Backend

from .action_model import INTEGRATORS, ContactDynamics, FreeDynamics, ImpulseDynamics
from .integrators import DynamicsDerivatives, IntegratedModel

__all__ = ["DiscreteDynamics", "DynamicsDerivatives"]


def DiscreteDynamics(model: RobotModel, backend: Backend, dt: float, integrator: str = "euler",  # noqa: N802
                     second_order: str = "auto", passive_forces: bool = True, contacts=None,
                     restitution: float = 0.0) -> IntegratedModel:
    """The integrated model of ``model``'s dynamics over ``dt`` seconds on ``backend``.

    integrator: ``"euler"`` or ``"rk4"`` (free dynamics, or contact dynamics when ``contacts`` — a
    :class:`~dynamics.ContactSet` — is given), or ``"impulse"`` (an impact of ``contacts`` with
    ``restitution``; dt is not used). second_order: the source of DDP's ``∂²a`` (``"auto"``,
    ``"analytical"``, ``"fd"``, ``"complex"``). passive_forces: joint damping and hinge/slide
    springs of the model (Euler and RK4)."""
    if integrator == "impulse":
        if contacts is None:
            raise ValueError("integrator='impulse' (an impact knot) needs the contacts that touch down")
        return ImpulseDynamics(contacts, restitution).integrated(model, backend, dt, second_order)
    if integrator not in INTEGRATORS:
        raise ValueError(f"unknown integrator '{integrator}'; use one of {', '.join(INTEGRATORS)}")
    description = FreeDynamics(integrator, passive_forces) if contacts is None else \
        ContactDynamics(contacts, integrator, passive_forces)
    return description.integrated(model, backend, dt, second_order)
