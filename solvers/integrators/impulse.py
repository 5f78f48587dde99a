"""A rigid impact (Crocoddyl's ``ActionModelImpulseFwdDynamics``): the configuration is unchanged
and the velocity jumps to ``v⁺(q, v)`` with ``M (v⁺ − v) = Jᵀ Λ``, ``J v⁺ = −e J v``
(:meth:`dynamics.Backend.impulse_dynamics`, restitution e). The knot takes no time and the
control has no effect: ``Fx = [[I, 0], [∂v⁺/∂q, ∂v⁺/∂v]]``, ``Fu = 0``. First-order derivatives
are analytical (one batched ``impulse_dynamics_derivatives`` call); DDP's second-order term is
central differences of them.
"""

from __future__ import annotations

import threading

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend
from dynamics.contact.impulse import prepare_impulse_dynamics_with_derivatives
from dynamics.inputs import sum_is_finite

from ..contact_or_nan import impulse_dynamics_or_nan
from .base import IntegratedData, IntegratedModel


class ImpulseModel(IntegratedModel):
    """The impact of the frames of ``contacts`` (a :class:`~dynamics.ContactSet`) with restitution
    ``restitution`` in [0, 1]."""

    integrator = "impulse"
    # an impact takes no torque: no joint damping or springs act over it
    _has_passive = False
    second_order_source = "central differences of the analytical first-order impulse-dynamics derivatives"

    def __init__(self, model: RobotModel, backend: Backend, contacts, restitution: float = 0.0,
                 second_order: str = "auto"):
        if second_order in ("analytical", "complex"):
            raise ValueError(f"second_order='{second_order}' is not available for impulse dynamics (no analytical "
                             f"second-order impulse derivatives yet); use second_order='auto' or 'fd'")
        super().__init__(model, backend, 0.0, second_order)
        self.contacts = contacts
        self.restitution = float(restitution)
        self._fused_calls: dict = {}        # (knots, thread) -> the bound call of _fused, or None

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        q, v = self._split(np.asarray(x, float))
        vp = impulse_dynamics_or_nan(self.backend, self.model, q, v, self.contacts, self.restitution)[0]
        return np.concatenate([q, vp], axis=-1)

    def _fused(self, n: int):
        """The backend's one-evaluation v⁺ and ∂v⁺ for n knots
        (:func:`dynamics.contact.impulse.prepare_impulse_dynamics_with_derivatives`), bound once per
        knot count and calling thread (its buffers are the call's), or None where the backend has none."""
        key = (n, threading.get_ident())
        hit = self._fused_calls.get(key, False)
        if hit is False:
            if len(self._fused_calls) > 16:
                self._fused_calls.clear()
            hit = self._fused_calls[key] = prepare_impulse_dynamics_with_derivatives(
                self.backend, self.model, self.contacts, self.restitution, n)
        return hit

    def _calc_first_order(self, data: IntegratedData, x: np.ndarray, u: np.ndarray) -> None:
        nq, nv = self.model.nq, self.model.nv
        # (a non-finite state takes the two calls, which report it as before)
        fused = self._fused(x.shape[0]) if x.dtype == np.float64 and sum_is_finite(x) else None
        if fused is not None:
            # v⁺ is a by-product of the derivative kernel: one evaluation instead of two
            vp, dvq, dvv = fused(x[:, :nq], x[:, nq:])
        else:
            q, v = self._split(x)
            vp = self.backend.impulse_dynamics(self.model, q, v, self.contacts, self.restitution)[0]
            dvq, dvv = self.backend.impulse_dynamics_derivatives(self.model, q, v, self.contacts, self.restitution)[:2]
        q = x[:, :nq]
        data.xnext[:, :nq] = q
        data.xnext[:, nq:] = vp
        Fx = data.Fx
        Fx[:, :nv] = 0.0
        Fx[:, np.arange(nv), np.arange(nv)] = 1.0
        Fx[:, nv:, :nv] = dvq
        Fx[:, nv:, nv:] = dvv
        data.Fu.fill(0.0)
