"""Rigid impulse (impact) dynamics and its analytical first-order derivatives: the generic
implementation, written on the public :class:`~dynamics.backend.Backend` API, which
``Backend.impulse_dynamics`` & co. run unless a backend overrides them (the numba backend's
``impulse_dynamics`` runs the fused kernel of :mod:`.numba_kernels`).

An inelastic (``restitution`` e = 0) or partially elastic impact on the contacts of a
:class:`~.contact_set.ContactSet` (Featherstone RBDA §11.7; Pinocchio's ``impulseDynamics``):

    M (v⁺ − v⁻) = Jᵀ Λ,     J v⁺ = −e J v⁻,

solved as ``Λ = −(1 + e) K⁻¹ J v⁻`` with ``K = J M⁻¹ Jᵀ`` and ``v⁺ = v⁻ + M⁻¹ Jᵀ Λ``; Λ [N s] is the
impulse in the contact conventions of λ (docs/conventions.md). Baumgarte gains are not used.

Derivatives (Pinocchio's ``computeImpulseDynamicsDerivatives``): with
``ID₀(q, Δv, Λ) = M(q) Δv − J(q)ᵀ Λ`` (inverse dynamics at zero velocity and gravity, obtained from
the backend's ``rnea_derivatives`` at v = 0 minus its gravity part) and the velocity constraint
``J(q)(v⁺ + e v⁻)``,

    ∂Λ/∂q = K⁻¹ (J M⁻¹ ∂ID₀/∂q − ∂(J (v⁺ + e v⁻))/∂q),   ∂v⁺/∂q = −M⁻¹ ∂ID₀/∂q + M⁻¹ Jᵀ ∂Λ/∂q,
    ∂Λ/∂v⁻ = −(1 + e) K⁻¹ J,                          ∂v⁺/∂v⁻ = 1 + M⁻¹ Jᵀ ∂Λ/∂v⁻.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..inputs import unflatten
from .common import flat_args, mat_t
from .constrained_dynamics import _Unpack
from .constraint_rows import contact_rows, velocity_derivative_q
from .contact_set import ContactSet
from .forces import contact_fext, world_force_rotation_dq
from .schur import SchurSolver, check_pivots


@dataclass(frozen=True)
class ImpulseDynamicsResult(_Unpack):
    """``v_plus`` (..., nv) velocity after the impact, ``impulse`` (..., nc) [N s]. Unpacks as
    ``v_plus, impulse = result``."""
    v_plus: np.ndarray
    impulse: np.ndarray


@dataclass(frozen=True)
class ImpulseDynamicsDerivatives(_Unpack):
    """Partial derivatives [output, variable] of :func:`impulse_dynamics`: ``dvp_*`` (..., nv, nv),
    ``dimp_*`` (..., nc, nv)."""
    dvp_dq: np.ndarray
    dvp_dvminus: np.ndarray
    dimp_dq: np.ndarray
    dimp_dvminus: np.ndarray


def check_restitution(r, func: str) -> float:
    """The coefficient of restitution ``r`` as a float in [0, 1], or a TypeError/ValueError naming ``func``."""
    try:
        e = float(r)
    except (TypeError, ValueError):
        raise TypeError(f"{func}: restitution must be a number in [0, 1], got {r!r}") from None
    if not 0.0 <= e <= 1.0:
        raise ValueError(f"{func}: restitution must be in [0, 1] (0: inelastic, 1: elastic), got {r!r}")
    return e


def _solve(backend, model, q, v_minus, contacts, e, func):
    J, _, R, _ = contact_rows(backend, model, q, v_minus, contacts, drift=False)
    Mi = backend.minv(model, q)
    MiJt = Mi @ mat_t(J)
    solver = SchurSolver(J @ MiJt, contacts, func)
    imp = solver.solve(-(1.0 + e) * np.einsum("bij,bj->bi", J, v_minus))
    v_plus = v_minus + np.einsum("bij,bj->bi", MiJt, imp)
    return v_plus, imp, J, R, Mi, MiJt, solver


def impulse_dynamics(backend, model, q, v_minus, contacts: ContactSet, restitution: float = 0.0) -> ImpulseDynamicsResult:
    """Velocity after a rigid impact ``v_plus`` (..., nv) and the impulse (..., nc) (module docstring)."""
    func = "impulse_dynamics"
    e = check_restitution(restitution, func)
    batch, (q, vm) = flat_args(func, model, contacts, q=(q, "nq"), v_minus=(v_minus, "nv"))
    v_plus, imp, *_ = _solve(backend, model, q, vm, contacts, e, func)
    return ImpulseDynamicsResult(unflatten(batch, v_plus), unflatten(batch, imp))


def _fused_derivatives(backend, model, q, vm, contacts, e, func):
    """``(dvp_dq, dvp_dv, dimp_dq, dimp_dv)`` (flat batch) from the compiled kernel of
    :mod:`.numba_kernels` when the backend's compiled impulse dynamics is that module's (the numba
    backend: same packed model) and covers this call, else None."""
    cd = backend.compiled_contact_dynamics(model, contacts)
    if cd is None:
        return None
    from . import numba_kernels as ck
    if cd.impulse_range is not ck.impulse_range or not ck.supports_fused_impulse(contacts, q, vm):
        return None
    _, _, flag, dvp, dimp = ck.impulse_dynamics_derivatives_fused(model, q, vm, contacts, e)
    check_pivots(contacts, func, flag)
    return dvp[0], dvp[1], dimp[0], dimp[1]


def prepare_impulse_dynamics_with_derivatives(backend, model, contacts: ContactSet, restitution: float, B: int):
    """``run(q (B, nq), v_minus (B, nv)) -> (v_plus (B, nv), dvp_dq (B, nv, nv), dvp_dvminus (B, nv, nv))``:
    :func:`impulse_dynamics`' ``v_plus`` and the first two :func:`impulse_dynamics_derivatives` in one
    evaluation of the compiled kernel of :mod:`.numba_kernels` (which solves for v⁺ on its way to
    the derivatives), its arguments bound once for batches of B states (float64 inputs; the returned
    arrays are the call's buffers, overwritten by the next call); raises as :func:`impulse_dynamics`
    does where the contact Jacobian lost rank. None where the backend's compiled impulse dynamics is
    not that module's (the caller then makes the two calls)."""
    cd = backend.compiled_contact_dynamics(model, contacts)
    if cd is None:
        return None
    from . import numba_kernels as ck
    if cd.impulse_range is not ck.impulse_range or contacts.damping != 0.0:
        return None
    e = check_restitution(restitution, "impulse_dynamics")
    run = ck.prepare_impulse_dynamics_derivatives_fused(model, contacts, e, B)

    def call(q: np.ndarray, v_minus: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v_plus, flag, dvp = run(q, v_minus)
        check_pivots(contacts, "impulse_dynamics", flag)
        return v_plus, dvp[0], dvp[1]
    return call


def impulse_dynamics_derivatives(backend, model, q, v_minus, contacts: ContactSet,
                                 restitution: float = 0.0) -> ImpulseDynamicsDerivatives:
    """``(dvp_dq, dvp_dvminus, dimp_dq, dimp_dvminus)`` of :func:`impulse_dynamics`."""
    func = "impulse_dynamics_derivatives"
    e = check_restitution(restitution, func)
    batch, (q, vm) = flat_args(func, model, contacts, q=(q, "nq"), v_minus=(v_minus, "nv"))
    fused = _fused_derivatives(backend, model, q, vm, contacts, e, func)
    if fused is not None:
        return ImpulseDynamicsDerivatives(*(unflatten(batch, x) for x in fused))
    v_plus, imp, J, R, Mi, MiJt, solver = _solve(backend, model, q, vm, contacts, e, func)
    z = np.zeros_like(vm)
    fext = contact_fext(model, contacts, imp, R)
    dID = backend.rnea_derivatives(model, q, z, v_plus - vm, fext)[0] - backend.rnea_derivatives(model, q, z, z)[0]
    fm = backend.frame_motion_derivatives(model, q, v_plus + e * vm, z, contacts)
    if contacts.kind == "point":
        dID = dID + world_force_rotation_dq(contacts, imp, J, fm.R @ fm.dv_dv[:, :, 3:])
    JMi = mat_t(MiJt)
    dimp_dq = solver.solve(JMi @ dID - velocity_derivative_q(fm, contacts))
    dvp_dq = MiJt @ dimp_dq - Mi @ dID
    dimp_dv = -(1.0 + e) * solver.solve(J)
    dvp_dv = np.eye(model.nv) + MiJt @ dimp_dv
    return ImpulseDynamicsDerivatives(*(unflatten(batch, x) for x in (dvp_dq, dvp_dv, dimp_dq, dimp_dv)))
