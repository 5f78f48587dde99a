"""What the Euler and RK4 integrators share: the continuous dynamics of an actuated robot,
``a(q, v, u) = acc(q, v, τ)`` with ``τ = B u + τ_passive(q, v)``, its partials and its Hessian.

``τ`` is :class:`dynamics.actuation.Actuation` (actuation matrix, joint damping and springs).
``acc`` is a :class:`~solvers.integrators.acceleration.FreeAcceleration` or
:class:`~solvers.integrators.acceleration.ContactAcceleration`: contact dynamics is the free
dynamics with the acceleration replaced by the contact solve, so it is composed into the
integrators rather than being a kind of its own (Crocoddyl's differential action model inside an
integrated action model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamics import RobotModel
from dynamics.actuation import Actuation
from dynamics.backend import Backend

from .acceleration import AccelerationBuffers, ContactAcceleration, FreeAcceleration
from .base import IntegratedModel


@dataclass(eq=False)
class StateBuffers:
    """n states and their partials: q (n, nq), v and tau (n, nv) C-contiguous; ``acc`` the
    acceleration partials bound to them; ``Au`` (n, nv, nu) ``∂a/∂u`` when B ≠ I."""

    q: np.ndarray
    v: np.ndarray
    tau: np.ndarray
    acc: AccelerationBuffers
    Au: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"q": self.q, "v": self.v, "tau": self.tau, "Au": self.Au}
        out.update(self.acc.arrays())
        return out


class ActuatedModel(IntegratedModel):
    """Base of the integrators of ``a(q, v, u)`` over ``dt`` > 0 seconds. passive_forces: joint
    damping and hinge/slide springs of the model."""

    def __init__(self, model: RobotModel, backend: Backend, dt: float, acceleration, second_order: str = "auto",
                 passive_forces: bool = True):
        if not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"time step dt must be a positive finite number of seconds, got {dt}")
        super().__init__(model, backend, dt, second_order)
        if not isinstance(acceleration, (FreeAcceleration, ContactAcceleration)):
            raise TypeError(f"acceleration must be a FreeAcceleration or ContactAcceleration, got "
                            f"{type(acceleration).__name__}")
        self.acc = acceleration
        self.contacts = acceleration.contacts
        #: τ(q, v, u) (dynamics.actuation: the one definition of the passive torques)
        self.actuation = act = Actuation(model, passive_forces, warn_stacklevel=5)
        self.B, self.damping, self.stiffness, self._spring_links = act.B, act.damping, act.stiffness, act.spring_links
        # shortcuts, read at every evaluation (tests switch them off to compare with the general code)
        self._has_damping = act.has_damping
        self._has_stiffness = act.has_stiffness
        self._has_passive = act.has_passive
        self._B_identity = act.B_identity
        # hinge/slide-only robots: q ⊕ w = q + w, integration Jacobians are identities
        self._euclidean = model.is_euclidean

    @property
    def second_order_source(self) -> str:
        return self.acc.second_order_source

    # ------------------------------------------------------------ continuous dynamics
    def torques(self, q: np.ndarray, v: np.ndarray, u: np.ndarray, out: np.ndarray | None = None,
                tmp: np.ndarray | None = None) -> np.ndarray:
        """Generalised force ``τ = B u + τ_passive(q, v)`` (..., nv). out, tmp: optional float64
        arrays of that shape for the result and a temporary (a data object's buffers)."""
        return self.actuation.torques(q, v, u, out=out, tmp=tmp, passive=self._has_passive)

    def acceleration(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``a(x, u)`` (..., nv) for x (..., nx), u (..., nu)."""
        q, v = self._split(np.asarray(x, float))
        return self.acc.value(q, v, self.torques(q, v, np.asarray(u, float)))

    # ------------------------------------------------------------ first order
    def _state_buffers(self, n: int) -> StateBuffers:
        m = self.model
        q, v, tau = np.empty((n, m.nq)), np.empty((n, m.nv)), np.empty((n, m.nv))
        return StateBuffers(q, v, tau, self.acc.create_buffers(q, v, tau), np.empty((n, m.nv, m.nu)))

    def _accel_partials(self, s: StateBuffers) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(a, ∂a/∂dq, ∂a/∂v, ∂a/∂u)`` (n, nv[, nv|nu]) at the states ``s`` holds, including the
        passive-force terms, in ``s``'s buffers."""
        acc = s.acc
        acc.run()
        daq, dav, dat = acc.partials
        # τ depends on q and v through τ_passive: chain rule with ∂a/∂τ (= M⁻¹ without contacts),
        # in place through the buffers' temporary
        if self._has_stiffness:
            daq -= np.multiply(dat, self.stiffness, out=acc.tmp)
        if self._has_damping:
            dav -= np.multiply(dat, self.damping, out=acc.tmp)
        return acc.a, daq, dav, (dat if self._B_identity else np.matmul(dat, self.B, out=s.Au))

    # ------------------------------------------------------------ second order
    def _acceleration_hessian(self, q, v, tau, out=None, tensor_out=None, bracket: bool = False) -> np.ndarray:
        """Hessian of ``a(q ⊕ dq, v + dv, τ(q ⊕ dq, v + dv, u + du))`` over z, (N, nv, nz, nz),
        written into ``out`` when given; tensor_out: buffer for the backend's second-order tensors.
        bracket (where ``acc.bracket_second_order``): the same assembly from the bracketed terms
        ``B`` of ``∂²a = −M⁻¹ B`` (it is linear in the tensors), so the Hessian is ``−M⁻¹`` times the result.

        The backend's ``d2a_dq2[i, j, k]`` differentiates along ``e_k`` then ``e_j`` (right
        perturbations), which differs from the Hessian of ``dq -> a(q ⊕ dq)`` by an
        antisymmetric Lie-bracket term; the Hessian is its symmetric part."""
        nv, nu = self.model.nv, self.model.nu
        a_qq, a_vv, a_qv, a_qt = self.acc.second_order_tensors(q, v, tau, out=tensor_out, bracket=bracket)
        nz = 2 * nv + nu
        H = np.empty((q.shape[0], nv, nz, nz)) if out is None else out
        q_, v_, u_ = slice(0, nv), slice(nv, 2 * nv), slice(2 * nv, nz)
        Hqq, Hqv, Hvq, Hvv = H[..., q_, q_], H[..., q_, v_], H[..., v_, q_], H[..., v_, v_]
        Hqu, Huq = H[..., q_, u_], H[..., u_, q_]
        np.add(a_qq, np.swapaxes(a_qq, -1, -2), out=Hqq)
        Hqq *= 0.5
        if self._has_stiffness:
            # τ_passive is linear with diagonal ∂τ/∂q = -K, ∂τ/∂v = -D, and ∂²a/∂τ², ∂²a/∂v∂τ
            # vanish; Hvq (set below) holds kq = -∂²a/∂q∂τ K meanwhile
            np.multiply(a_qt, -self.stiffness, out=Hvq)
            Hqq += Hvq
            Hqq += np.swapaxes(Hvq, -1, -2)
        if self._has_damping:
            np.multiply(a_qt, -self.damping, out=Hqv)
            Hqv += a_qv
        else:
            Hqv[...] = a_qv
        Hvq[...] = np.swapaxes(Hqv, -1, -2)
        Hvv[...] = a_vv
        if self._B_identity:
            Hqu[...] = a_qt
        else:
            np.matmul(a_qt, self.B, out=Hqu)
        Huq[...] = np.swapaxes(Hqu, -1, -2)
        H[..., v_, u_] = 0.0
        H[..., u_, v_] = 0.0
        H[..., u_, u_] = 0.0
        return H
