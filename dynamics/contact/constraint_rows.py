"""The constraint rows of a :class:`~.contact_set.ContactSet`: Jacobian, acceleration drift with
Baumgarte terms, and the partial derivatives of the constrained acceleration (and velocity).

Constrained acceleration (docs/conventions.md, "Contacts"), per frame with world rotation R:

* point: ``α = R (a_lin + ω × v_lin) + kd R v_lin + kp (p - p_ref)`` (local spatial quantities
  ``a_lin, ω, v_lin``; ``R (a_lin + ω × v_lin)`` is the classical acceleration of the origin);
* 6d: ``α = a + kd v + kp log6(M_ref⁻¹ M)`` (local spatial acceleration / twist).

``α = J a + γ(q, v)``: J is the LOCAL_WORLD_ALIGNED linear (point) or LOCAL (6d) frame Jacobian and
γ the drift ``J̇ v`` plus the Baumgarte terms. The derivatives ``∂α/∂q``, ``∂α/∂v`` at fixed a follow
Pinocchio's ``computeConstraintDynamicsDerivatives`` (contact part), built from the frame motion
derivatives of :mod:`.kinematics_derivatives`; the rotation of the frame along ``q ⊕ δ`` is
``R exp([J_ω δ]×)`` (J_ω the local angular Jacobian), giving the ``-R [x]× J_ω`` terms.
"""

from __future__ import annotations

import numpy as np

from .. import lie
from ..spatial import cross, skew
from .contact_set import ContactSet
from .kinematics_derivatives import FrameMotionDerivatives


def _log_error(contacts: ContactSet, c: int, R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``log6(M_ref⁻¹ M)`` (B, 6) of 6-D contact c at world placement (R, p) (real inputs)."""
    ref = contacts.reference[c]
    Rr, pr = ref[:3, :3], ref[:3, 3]
    Rrel = np.einsum("ji,bjk->bik", Rr, R)
    prel = (p - pr) @ Rr
    return lie.se3_log(Rrel, prel)


def contact_rows(backend, model, q, v, contacts: ContactSet, drift: bool = True):
    """``(J (B, nc, nv), γ (B, nc) or None, R (B, k, 3, 3), p (B, k, 3))`` from the backend's frame
    Jacobians (and their time variation when ``drift``) and frame placements; q (B, nq), v (B, nv)."""
    B, nv, d = q.shape[0], model.nv, contacts.dim
    k = len(contacts.frames)
    kp, kd = contacts.baumgarte
    dtype = np.result_type(q, v)
    J = np.empty((B, contacts.nc, nv), dtype=dtype)
    gamma = np.empty((B, contacts.nc), dtype=dtype) if drift else None
    R = np.empty((B, k, 3, 3), dtype=dtype)
    p = np.empty((B, k, 3), dtype=dtype)
    ref = contacts.reference_frame
    for c, name in enumerate(contacts.frames):
        R[:, c], p[:, c] = backend.frame_placement(model, q, name)
        rows = slice(d * c, d * c + d)
        if drift:
            Jf, dJf = backend.frame_jacobian_time_variation(model, q, v, name, ref)
        else:
            Jf = backend.frame_jacobian(model, q, name, ref)
        J[:, rows] = Jf[:, :d]
        if drift:
            g = np.einsum("bik,bk->bi", dJf[:, :d], v)
            if kd:
                g = g + kd * np.einsum("bik,bk->bi", Jf[:, :d], v)
            if kp:
                if contacts.kind == "point":
                    g = g + kp * (p[:, c] - contacts.reference[c])
                else:
                    g = g + kp * _log_error(contacts, c, R[:, c], p[:, c])
            gamma[:, rows] = g
    return J, gamma, R, p


def acceleration_derivatives(fm: FrameMotionDerivatives, contacts: ContactSet):
    """``(J, ∂α/∂q, ∂α/∂v)``, (B, nc, nv) each, from the frame motion derivatives at (q, v, a)."""
    B, k, _, nv = fm.dv_dq.shape
    d = contacts.dim
    kp, kd = contacts.baumgarte
    dtype = fm.dv_dq.dtype
    J = np.empty((B, contacts.nc, nv), dtype=dtype)
    dq = np.empty_like(J)
    dv = np.empty_like(J)
    for c in range(k):
        rows = slice(d * c, d * c + d)
        if contacts.kind == "point":
            R = fm.R[:, c]
            vl, w, al = fm.v[:, c, :3], fm.v[:, c, 3:], fm.a[:, c, :3]
            Ja = fm.dv_dv[:, c, 3:]
            W, V = skew(w), skew(vl)
            cl = al + cross(w, vl)
            dc_dq = fm.da_dq[:, c, :3] + W @ fm.dv_dq[:, c, :3] - V @ fm.dv_dq[:, c, 3:]
            dc_dv = fm.da_dv[:, c, :3] + W @ fm.dv_dv[:, c, :3] - V @ fm.dv_dv[:, c, 3:]
            Jc = R @ fm.dv_dv[:, c, :3]
            gq = R @ (dc_dq - skew(cl) @ Ja)
            gv = R @ dc_dv
            if kd:
                gq = gq + kd * (R @ (fm.dv_dq[:, c, :3] - V @ Ja))
                gv = gv + kd * Jc
            if kp:
                gq = gq + kp * Jc
        else:
            Jc = fm.dv_dv[:, c]
            gq = fm.da_dq[:, c]
            gv = fm.da_dv[:, c]
            if kd:
                gq = gq + kd * fm.dv_dq[:, c]
                gv = gv + kd * Jc
            if kp:
                err = _log_error(contacts, c, fm.R[:, c], fm.p[:, c])
                gq = gq + kp * (lie.se3_right_jacobian_inverse(err) @ Jc)
        J[:, rows], dq[:, rows], dv[:, rows] = Jc, gq, gv
    return J, dq, dv


def velocity_derivative_q(fm: FrameMotionDerivatives, contacts: ContactSet) -> np.ndarray:
    """``∂(J(q) v)/∂q`` at fixed v (B, nc, nv): point ``R (∂v_lin/∂q - [v_lin]× J_ω)``, 6d ``∂v/∂q``."""
    B, k, _, nv = fm.dv_dq.shape
    d = contacts.dim
    out = np.empty((B, contacts.nc, nv), dtype=fm.dv_dq.dtype)
    for c in range(k):
        rows = slice(d * c, d * c + d)
        if contacts.kind == "point":
            out[:, rows] = fm.R[:, c] @ (fm.dv_dq[:, c, :3] - skew(fm.v[:, c, :3]) @ fm.dv_dv[:, c, 3:])
        else:
            out[:, rows] = fm.dv_dq[:, c]
    return out
