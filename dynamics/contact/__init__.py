"""Rigid contact dynamics and impulses with analytical first-order derivatives.

Backend-agnostic: written on the batched kernels every :class:`~dynamics.backend.Backend` has
(``M⁻¹``, RNEA with external forces and its derivatives, frame Jacobians and their time variation)
plus one optional kernel, the frame motion derivatives (:mod:`.kinematics_derivatives`, numpy
reference and a compiled numba version in :mod:`.numba_kernels`). Reached through
``Backend.contact_dynamics`` & co.::

    contacts = dynamics.ContactSet(model, frames=("lf_foot", "rf_foot", "lh_foot", "rh_foot"), kind="point")
    a, lam = be.contact_dynamics(model, q, v, tau, contacts)
    da_dq, da_dv, da_dtau, dlam_dq, dlam_dv, dlam_dtau = be.contact_dynamics_derivatives(model, q, v, tau, contacts)
    v_plus, impulse = be.impulse_dynamics(model, q, v_minus, contacts, restitution=0.0)
    dvp_dq, dvp_dvminus, dimp_dq, dimp_dvminus = be.impulse_dynamics_derivatives(model, q, v_minus, contacts)

Conventions: docs/conventions.md ("Contacts"); math and oracle errors: docs/contacts.md.
"""

from .constrained_dynamics import (ContactDynamicsBuffers, ContactDynamicsDerivatives, ContactDynamicsResult,
                                   contact_dynamics, contact_dynamics_derivatives)
from .contact_set import ContactSet, RankDeficientContactError
from .impulse import ImpulseDynamicsDerivatives, ImpulseDynamicsResult, impulse_dynamics, impulse_dynamics_derivatives
from .kinematics_derivatives import FrameMotionDerivatives, frame_motion_derivatives

__all__ = [
    "ContactSet", "RankDeficientContactError", "contact_dynamics", "contact_dynamics_derivatives",
    "impulse_dynamics", "impulse_dynamics_derivatives", "ContactDynamicsResult", "ContactDynamicsDerivatives",
    "ImpulseDynamicsResult", "ImpulseDynamicsDerivatives", "FrameMotionDerivatives", "frame_motion_derivatives",
    "ContactDynamicsBuffers",
]
