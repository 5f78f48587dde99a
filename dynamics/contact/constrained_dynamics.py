"""Rigid contact (constrained) forward dynamics and its analytical first-order derivatives: the
generic implementation, written on the public :class:`~dynamics.backend.Backend` API, which
``Backend.contact_dynamics`` & co. run unless a backend overrides them with its own kernel (the
numba backend does, with the fused kernels of :mod:`.numba_kernels`).

Values: the KKT system of :mod:`.schur` solved through the backend's ``minv`` and ``bias_forces``
and the contact Schur complement ``K = J M⁻¹ Jᵀ``.

Derivatives (Carpentier & Mansard, "Analytical derivatives of rigid body dynamics algorithms",
RSS 2018, Sec. V-B; Pinocchio's ``computeConstraintDynamicsDerivatives``): differentiating
``ID(q, v, a, fext(λ)) = τ`` and ``α(q, v, a) = 0`` gives, for x ∈ {q, v},

    ∂λ/∂x = K⁻¹ (J M⁻¹ ∂ID/∂x − ∂α/∂x),    ∂a/∂x = −M⁻¹ ∂ID/∂x + M⁻¹ Jᵀ ∂λ/∂x,
    ∂λ/∂τ = −K⁻¹ J M⁻¹,                      ∂a/∂τ = M⁻¹ + M⁻¹ Jᵀ ∂λ/∂τ,

where ``∂ID/∂x`` is the backend's ``rnea_derivatives`` with the contact forces as external forces
(plus, for world-aligned point forces, the turning of the force in the body frame, see
:mod:`.forces`) and ``∂α/∂x`` the derivatives of the constrained acceleration at fixed a
(:mod:`.constraint_rows`, :mod:`.kinematics_derivatives`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from ..inputs import unflatten
from .common import flat_args, mat_t
from .constraint_rows import acceleration_derivatives, contact_rows
from .contact_set import ContactSet
from .forces import contact_fext, world_force_rotation_dq
from .schur import SchurSolver


class _Unpack:
    """Tuple-like access to a result dataclass: unpacking, ``len`` and indexing in field order."""

    def __iter__(self):
        return iter(getattr(self, f.name) for f in fields(self))

    def __len__(self) -> int:
        return len(fields(self))

    def __getitem__(self, i):
        return tuple(self)[i]


@dataclass(frozen=True)
class ContactDynamicsResult(_Unpack):
    """``a`` (..., nv) constrained acceleration; ``lam`` (..., nc) contact forces (docs/conventions.md).
    Unpacks as ``a, lam = result``."""
    a: np.ndarray
    lam: np.ndarray


@dataclass(frozen=True)
class ContactDynamicsDerivatives(_Unpack):
    """Partial derivatives [output, variable] of :func:`contact_dynamics`; ``da_*`` (..., nv, nv),
    ``dlam_*`` (..., nc, nv). Unpacks in field order."""
    da_dq: np.ndarray
    da_dv: np.ndarray
    da_dtau: np.ndarray
    dlam_dq: np.ndarray
    dlam_dv: np.ndarray
    dlam_dtau: np.ndarray


@dataclass
class ContactDynamicsBuffers:
    """Caller-owned results of :func:`contact_dynamics_derivatives` for B states (its ``out=``;
    batch dimensions flattened), reused from call to call (a solver's workspace): ``a`` (B, nv),
    ``lam`` (B, nc), ``da`` (3, B, nv, nv) = (∂a/∂q, ∂a/∂v, ∂a/∂τ), ``dl`` (3, B, nc, nv) =
    (∂λ/∂q, ∂λ/∂v, ∂λ/∂τ), plus the compiled kernel's scratch (made on first use)."""
    a: np.ndarray
    lam: np.ndarray
    da: np.ndarray
    dl: np.ndarray
    scratch: dict = field(default_factory=dict, repr=False)

    @classmethod
    def allocate(cls, B: int, nv: int, nc: int) -> "ContactDynamicsBuffers":
        return cls(np.empty((B, nv)), np.empty((B, nc)), np.empty((3, B, nv, nv)), np.empty((3, B, nc, nv)))

    def check(self, B: int, nv: int, nc: int, func: str) -> None:
        if self.a.shape != (B, nv) or self.lam.shape != (B, nc) or self.da.shape != (3, B, nv, nv) \
                or self.dl.shape != (3, B, nc, nv):
            raise ValueError(f"{func}: out holds buffers for {self.a.shape[0]} states of nv = {self.a.shape[-1]}, "
                             f"nc = {self.lam.shape[-1]}, but the call has {B} states, nv = {nv}, nc = {nc}; make "
                             f"them with ContactDynamicsBuffers.allocate({B}, {nv}, {nc})")


@dataclass
class _Solution:
    a: np.ndarray
    lam: np.ndarray
    Mi: np.ndarray
    MiJt: np.ndarray
    J: np.ndarray
    R: np.ndarray
    solver: SchurSolver


def _solve(backend, model, q, v, tau, contacts: ContactSet, func: str) -> _Solution:
    J, gamma, R, _ = contact_rows(backend, model, q, v, contacts)
    Mi = backend.minv(model, q)
    b = backend.bias_forces(model, q, v)
    a_free = np.einsum("bij,bj->bi", Mi, tau - b)
    MiJt = Mi @ mat_t(J)
    solver = SchurSolver(J @ MiJt, contacts, func)
    lam = solver.solve(-(gamma + np.einsum("bij,bj->bi", J, a_free)))
    a = a_free + np.einsum("bij,bj->bi", MiJt, lam)
    return _Solution(a, lam, Mi, MiJt, J, R, solver)


def contact_dynamics(backend, model, q, v, tau, contacts: ContactSet) -> ContactDynamicsResult:
    """Constrained forward dynamics: ``a`` (..., nv) and contact forces ``lam`` (..., nc) with
    ``M a + b = τ + Jᵀ λ`` and ``J a + γ = 0`` (see :mod:`.constraint_rows` for γ)."""
    func = "contact_dynamics"
    batch, (q, v, tau) = flat_args(func, model, contacts, q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
    s = _solve(backend, model, q, v, tau, contacts, func)
    return ContactDynamicsResult(unflatten(batch, s.a), unflatten(batch, s.lam))


def contact_dynamics_derivatives(backend, model, q, v, tau, contacts: ContactSet, return_values: bool = False,
                                 out: ContactDynamicsBuffers | None = None):
    """``(da_dq, da_dv, da_dtau, dlam_dq, dlam_dv, dlam_dtau)`` of :func:`contact_dynamics`
    (module docstring); q-derivatives along the tangent perturbation ``q ⊕ δ``. return_values:
    return ``(ContactDynamicsResult, ContactDynamicsDerivatives)``, the values the derivatives are
    computed at coming from the same solve (no second :func:`contact_dynamics` call). out:
    :class:`ContactDynamicsBuffers` for the (flattened) batch that receive the results, which are
    then its views (a backend's own kernel may write into them; this implementation copies)."""
    func = "contact_dynamics_derivatives"
    batch, (q, v, tau) = flat_args(func, model, contacts, q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
    if out is not None:
        out.check(q.shape[0], model.nv, contacts.nc, func)
        (a, lam), d = contact_dynamics_derivatives(backend, model, q, v, tau, contacts, True)
        out.a[...], out.lam[...] = a, lam
        out.da[0], out.da[1], out.da[2] = d.da_dq, d.da_dv, d.da_dtau
        out.dl[0], out.dl[1], out.dl[2] = d.dlam_dq, d.dlam_dv, d.dlam_dtau
        d = ContactDynamicsDerivatives(*(unflatten(batch, x) for x in (*out.da, *out.dl)))
        return (ContactDynamicsResult(unflatten(batch, out.a), unflatten(batch, out.lam)), d) if return_values \
            else d
    s = _solve(backend, model, q, v, tau, contacts, func)
    fm = backend.frame_motion_derivatives(model, q, v, s.a, contacts)
    _, dal_dq, dal_dv = acceleration_derivatives(fm, contacts)
    fext = contact_fext(model, contacts, s.lam, fm.R)
    dID_dq, dID_dv = backend.rnea_derivatives(model, q, v, s.a, fext)
    if contacts.kind == "point":
        Jw_ang = fm.R @ fm.dv_dv[:, :, 3:]
        dID_dq = dID_dq + world_force_rotation_dq(contacts, s.lam, s.J, Jw_ang)
    JMi = mat_t(s.MiJt)
    dlam_dq = s.solver.solve(JMi @ dID_dq - dal_dq)
    dlam_dv = s.solver.solve(JMi @ dID_dv - dal_dv)
    dlam_dtau = -s.solver.solve(JMi)
    da_dq = s.MiJt @ dlam_dq - s.Mi @ dID_dq
    da_dv = s.MiJt @ dlam_dv - s.Mi @ dID_dv
    da_dtau = s.Mi + s.MiJt @ dlam_dtau
    d = ContactDynamicsDerivatives(*(unflatten(batch, x) for x in
                                     (da_dq, da_dv, da_dtau, dlam_dq, dlam_dv, dlam_dtau)))
    return (ContactDynamicsResult(unflatten(batch, s.a), unflatten(batch, s.lam)), d) if return_values else d
