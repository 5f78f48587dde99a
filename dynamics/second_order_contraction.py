"""Contractions ``λᵀ·∂²(·)`` of the second-order dynamics derivatives, as the DDP backward pass
consumes them: for a batch of co-states ``λ`` (..., nv) the (..., nv, nv) Hessian blocks of the
scalar ``λᵀ f``.

The analytical functions contract **inside** the algorithms and never form an nv³ tensor:
IDSVA-SO (Singh, Russell & Wensing 2022 Alg. 1) accumulates ``Σ_i μ_i ∂²τ_i`` directly in its backward pass, and the
forward-dynamics blocks follow from Singh, Russell & Wensing 2022 eq. 46 with ``μ = M⁻¹ λ``::

    λᵀ ∂²a/∂q_j∂q_k = −(μᵀ∂²τ/∂q_j∂q_k + D[:, j]·∂a/∂q_k + D[:, k]·∂a/∂q_j)
    λᵀ ∂²a/∂v_j∂v_k = −μᵀ∂²τ/∂v_j∂v_k
    λᵀ ∂²a/∂q_j∂v_k = −(μᵀ∂²τ/∂q_j∂v_k + D[:, j]·∂a/∂v_k)
    λᵀ ∂²a/∂q_j∂τ_k = −D[:, j]·M⁻¹[:, k]

with ``D[m, j] = Σ_i μ_i ∂M_im/∂q_j``. :func:`contract_output` contracts already materialised
tensors (any provider, e.g. ``dynamics.second_order_numerical``).

Index order is that of the tensors (docs/second_order.md): ``qq[j, k]`` is ``∂_k ∂_j (λᵀ f)``
with the ``k``-perturbation applied first; for two dofs of one ball or free joint it is not
symmetric (symmetrise it where a symmetric Hessian is needed). All blocks are float64 numpy
arrays; the analytical path runs on the numpy reference kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .backend import batch_args
from .inputs import unflatten
from .model import RobotModel


@dataclass(frozen=True)
class RNEASecondOrderContraction:
    """Hessian blocks of ``λᵀ τ(q, v, a)``, each (..., nv, nv).

    qq[j, k] = Σ_i λ_i ∂²τ_i/∂q_j∂q_k; vv[j, k] = Σ_i λ_i ∂²τ_i/∂v_j∂v_k;
    qv[j, k] = Σ_i λ_i ∂²τ_i/∂q_j∂v_k; qa[j, k] = Σ_i λ_i ∂M_ik/∂q_j (∂²τ_i/∂q_j∂a_k)."""

    qq: np.ndarray
    vv: np.ndarray
    qv: np.ndarray
    qa: np.ndarray


@dataclass(frozen=True)
class ABASecondOrderContraction:
    """Hessian blocks of ``λᵀ a(q, v, τ)``, each (..., nv, nv) (``ττ`` and ``vτ`` vanish).

    qq[j, k] = Σ_i λ_i ∂²a_i/∂q_j∂q_k; vv[j, k]; qv[j, k] = Σ_i λ_i ∂²a_i/∂q_j∂v_k;
    qtau[j, k] = Σ_i λ_i ∂²a_i/∂q_j∂τ_k."""

    qq: np.ndarray
    vv: np.ndarray
    qv: np.ndarray
    qtau: np.ndarray


def contract_output(lam, *tensors) -> tuple[np.ndarray, ...]:
    """``Σ_i λ_i T[..., i, :, :]`` for each tensor (..., n, n1, n2) and λ (..., n) -> (..., n1, n2)."""
    lam = np.asarray(lam)
    out = []
    for T in tensors:
        T = np.asarray(T)
        if T.ndim < 3 or T.shape[-3] != lam.shape[-1]:
            raise ValueError(f"contract_output: tensor of shape {T.shape} does not have an output axis of size "
                             f"{lam.shape[-1]} (λ's length) at position -3; expected (..., {lam.shape[-1]}, n1, n2)")
        out.append(np.einsum("...i,...ijk->...jk", lam, T))
    return tuple(out)


def _inputs(func: str, model: RobotModel, fext, lam, **arrays):
    """Checked, broadcast and flattened ``(batch, [*arrays, lam, fext or None])`` (the backend's
    :func:`dynamics.backend.batch_args`)."""
    return batch_args(func, model, fext, **{k: (x, "nq" if k == "q" else "nv") for k, x in arrays.items()},
                      lam=(lam, "nv"))


def rnea_second_order_contraction(model: RobotModel, q, v, a, lam, fext=None) -> RNEASecondOrderContraction:
    """``λᵀ ∂²τ`` blocks at ``(q, v, a)`` for co-states ``lam`` (..., nv), contracted inside
    IDSVA-SO (Singh, Russell & Wensing 2022 Alg. 1); batch dimensions of all arguments broadcast."""
    from .numpy_backend.rnea_second_derivatives import rnea_second_derivatives_contracted
    batch, (q, v, a, lam, fe) = _inputs("rnea_second_order_contraction", model, fext, lam, q=q, v=v, a=a)
    qq, vv, qv, dM = rnea_second_derivatives_contracted(model, q, v, a, lam, fe)
    return RNEASecondOrderContraction(unflatten(batch, qq), unflatten(batch, vv), unflatten(batch, qv),
                                      unflatten(batch, np.swapaxes(dM, -1, -2)))


def aba_second_order_contraction(model: RobotModel, q, v, tau, lam, fext=None) -> ABASecondOrderContraction:
    """``λᵀ ∂²a`` blocks of forward dynamics at ``(q, v, tau)`` for co-states ``lam`` (..., nv)
    (FDSVA-SO, Singh, Russell & Wensing 2022 eq. 46, with the ID tensors contracted inside IDSVA-SO)."""
    from .numpy_backend.aba import aba
    from .numpy_backend.minv import minv
    from .numpy_backend.rnea_derivatives import rnea_derivatives
    from .numpy_backend.rnea_second_derivatives import rnea_second_derivatives_contracted
    batch, (q, v, t, lam, fe) = _inputs("aba_second_order_contraction", model, fext, lam, q=q, v=v, tau=tau)
    a = aba(model, q, v, t, fe)
    Mi = minv(model, q)
    dtau_dq, dtau_dv = rnea_derivatives(model, q, v, a, fe)
    da_dq, da_dv = -Mi @ dtau_dq, -Mi @ dtau_dv
    mu = np.einsum("bij,bj->bi", Mi, lam)                      # M⁻¹ λ (M⁻¹ is symmetric)
    Cqq, Cvv, Cqv, CdM = rnea_second_derivatives_contracted(model, q, v, a, mu, fe)
    Dt = np.swapaxes(CdM, -1, -2)                                # Dt[j, m] = Σ_i μ_i ∂M_im/∂q_j
    E = Dt @ da_dq
    qq = -(Cqq + E + np.swapaxes(E, -1, -2))
    qv = -(Cqv + Dt @ da_dv)
    qtau = -(Dt @ Mi)
    return ABASecondOrderContraction(unflatten(batch, qq), unflatten(batch, -Cvv), unflatten(batch, qv),
                                     unflatten(batch, qtau))
