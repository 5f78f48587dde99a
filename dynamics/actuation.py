"""The generalised force a robot's actuators and passive joint elements apply:
``τ = B u + τ_passive(q, v)`` with ``τ_passive = -D v - K (q - q_spring)``.

``B`` (nv, nu) is the model's actuation matrix (gears, transmissions), ``D`` the joint damping and
``K`` the hinge/slide joint stiffness, as MuJoCo applies them (friction loss is not modelled; a
model with friction loss gets a warning). This is the one numpy definition: the integrated action
models and the contact-force costs evaluate it, and the compiled kernels'
(:mod:`dynamics.kernels.passive`) are tested against it.
"""

from __future__ import annotations

import warnings

import numpy as np

from .joints import JointType
from .model import RobotModel


class Actuation:
    """``τ(q, v, u)`` of one model (immutable once built). passive_forces: include joint damping and
    hinge/slide springs; False gives ``τ = B u``."""

    def __init__(self, model: RobotModel, passive_forces: bool = True, warn_stacklevel: int = 3):
        nv = model.nv
        self.model = model
        self.passive_forces = bool(passive_forces)
        self.B = np.asarray(model.actuation_matrix, dtype=float)
        self.damping = np.asarray(model.dof_damping, float) if passive_forces else np.zeros(nv)
        self.stiffness = np.zeros(nv)
        self.spring_links = np.zeros(0, dtype=int)
        if passive_forces:
            scalar_links = np.flatnonzero(np.isin(model.link_type, (JointType.HINGE, JointType.SLIDE)))
            other = np.setdiff1d(np.arange(model.nlinks), scalar_links)
            if np.any(model.link_stiffness[other] != 0):
                raise NotImplementedError("joint stiffness on ball/free joints is not modelled; remove it from the "
                                          "model or pass passive_forces=False")
            self.stiffness[model.link_dofadr[scalar_links]] = model.link_stiffness[scalar_links]
            self.spring_links = scalar_links[model.link_stiffness[scalar_links] != 0]
            if np.any(model.dof_frictionloss != 0):
                warnings.warn(f"model '{model.name}' has joint friction loss; the solver's dynamics ignore it",
                              stacklevel=warn_stacklevel)
        for a in (self.B, self.damping, self.stiffness, self.spring_links):
            a.setflags(write=False)
        self.has_damping = bool(np.any(self.damping))
        self.has_stiffness = bool(np.any(self.stiffness))
        # B = I (one actuator per dof, in order, gear 1): B u = u and ∂τ/∂u = I, exactly
        self.B_identity = self.B.shape == (nv, nv) and bool(np.array_equal(self.B, np.eye(nv)))

    @property
    def has_passive(self) -> bool:
        return self.has_damping or self.has_stiffness

    def same_as(self, other: "Actuation") -> bool:
        """Whether ``other`` maps (q, v, u) to the same τ (same model, B, D and K)."""
        return other is self or (other.model is self.model and np.array_equal(other.B, self.B)
                                 and np.array_equal(other.damping, self.damping)
                                 and np.array_equal(other.stiffness, self.stiffness))

    def torques(self, q: np.ndarray, v: np.ndarray, u: np.ndarray, out: np.ndarray | None = None,
                tmp: np.ndarray | None = None, passive: bool = True) -> np.ndarray:
        """``τ`` (..., nv) [N·m or N] for q (..., nq), v (..., nv), u (..., nu). out, tmp: optional
        float64 arrays of shape (..., nv) for the result and a temporary (a workspace's buffers).
        passive=False leaves the passive terms out (a caller that switched them off)."""
        if self.B_identity and np.shape(u)[-1:] == (self.B.shape[1],):
            if out is None:
                tau = np.array(u, dtype=float)
            else:
                out[...] = u
                tau = out
        else:
            tau = np.matmul(u, self.B.T, out=out)
        if passive:
            if self.has_damping:      # in place: tau is this call's own array (fresh or out)
                tau -= np.multiply(self.damping, v, out=tmp)
            model = self.model
            for li in self.spring_links:
                qa, va = model.link_qadr[li], model.link_dofadr[li]
                tau[..., va] -= self.stiffness[va] * (q[..., qa] - model.qpos_spring[qa])
        return tau

    def chain_partials(self, d_dq: np.ndarray, d_dv: np.ndarray, d_dtau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Partials of ``y(q, v, τ(q, v, u))`` over q and v from those of ``y`` at fixed τ
        (..., m, nv each): ``∂y/∂q - ∂y/∂τ K``, ``∂y/∂v - ∂y/∂τ D`` (fresh arrays where they change)."""
        if self.has_stiffness:
            d_dq = d_dq - d_dtau * self.stiffness
        if self.has_damping:
            d_dv = d_dv - d_dtau * self.damping
        return d_dq, d_dv
