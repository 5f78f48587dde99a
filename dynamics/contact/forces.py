"""Contact forces as external forces of the inverse dynamics.

The contact derivatives (Carpentier & Mansard 2018; Pinocchio ``computeConstraintDynamicsDerivatives``)
differentiate ``ID(q, v, a, fext(λ)) = τ`` where ``fext`` holds the contact forces as the backend's
external forces: ``(B, nbody, 6)``, the spatial force (force, torque) on each MuJoCo body in its
body frame at its origin (docs/conventions.md).
"""

from __future__ import annotations

import numpy as np

from ..spatial import cross, skew
from .contact_set import ContactSet


def contact_fext(model, contacts: ContactSet, lam: np.ndarray, R: np.ndarray) -> np.ndarray:
    """External forces (B, nbody, 6) of the contact forces λ (B, nc); R (B, k, 3, 3) are the world
    rotations of the contact frames (needed for point contacts, whose λ is world-aligned)."""
    B = lam.shape[0]
    d = contacts.dim
    fext = np.zeros((B, model.nbody, 6), dtype=np.result_type(lam, R))
    for c in range(len(contacts.frames)):
        f = lam[:, d * c:d * c + 3]
        if contacts.kind == "point":
            f = np.einsum("bji,bj->bi", R[:, c], f)          # world-aligned -> frame axes
            t = np.zeros_like(f)
        else:
            t = lam[:, d * c + 3:d * c + 6]
        Rb, pb = contacts.body_frame_R[c], contacts.body_frame_p[c]
        fb = f @ Rb.T
        b = contacts.bodies[c]
        fext[:, b, :3] += fb
        fext[:, b, 3:] += t @ Rb.T + cross(pb, fb)
    return fext


def world_force_rotation_dq(contacts: ContactSet, lam: np.ndarray, J: np.ndarray, Jw_ang: np.ndarray) -> np.ndarray:
    """Extra ``∂ID/∂q`` (B, nv, nv) of point contacts: λ is held fixed in world axes while the
    backend's ∂RNEA holds ``fext`` fixed in body axes. The body-frame force ``Rᵀλ`` turns with the
    frame, which adds ``-Σ_c J_c,linᵀ [λ_c]× J_c,ω`` (J_c,lin = rows of J, J_c,ω the world-aligned
    angular Jacobian (B, k, 3, nv)). Zero for 6-D contacts (λ fixed in the frame)."""
    out = np.zeros(J.shape[:1] + (J.shape[2], J.shape[2]), dtype=np.result_type(lam, J))
    if contacts.kind != "point":
        return out
    for c in range(len(contacts.frames)):
        rows = slice(3 * c, 3 * c + 3)
        out -= np.swapaxes(J[:, rows], -1, -2) @ (skew(lam[:, rows]) @ Jw_ang[:, c])
    return out
