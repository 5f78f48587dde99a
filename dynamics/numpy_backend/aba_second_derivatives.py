"""Second-order partial derivatives of forward dynamics: FDSVA-SO (Singh, Russell & Wensing 2022, §VI, eq. 46).

Differentiating the identity ``ID(q, v, FD(q, v, τ)) = τ`` twice (Singh, Russell & Wensing 2022 eqs. 44-46) gives, with
``∂a/∂q = −M⁻¹ ∂τ/∂q``, ``∂a/∂v = −M⁻¹ ∂τ/∂v`` (eq. 45) evaluated at ``a = FD(q, v, τ)``::

    ∂²a/∂q_j∂q_k = −M⁻¹ (∂²τ/∂q_j∂q_k + ∂M/∂q_j ∂a/∂q_k + ∂M/∂q_k ∂a/∂q_j)
    ∂²a/∂v_j∂v_k = −M⁻¹  ∂²τ/∂v_j∂v_k
    ∂²a/∂q_j∂v_k = −M⁻¹ (∂²τ/∂q_j∂v_k + ∂M/∂q_j ∂a/∂v_k)
    ∂²a/∂q_j∂τ_k = −M⁻¹  ∂M/∂q_j M⁻¹[:, k]

and ``∂²a/∂τ² = ∂²a/∂v∂τ = 0``. :func:`aba_second_derivatives_bracket` stops before the outer
``−M⁻¹``: a caller that contracts the tensors' output index with a vector λ (DDP's ``λᵀ ∂²a``) can
fold ``−M⁻¹`` into λ (``μ = −M⁻¹λ``, then ``μᵀ B``), which skips four nv⁴ products per state.
The ID tensors come from IDSVA-SO (this backend's ``rnea_second_derivatives``), ``M⁻¹`` from the
analytical inverse (Singh, Russell & Wensing 2022 ref. [52]); the inner and outer products are the
seed's Direct-Tensor-Matrix variant (§VI-A), which it finds fastest for practical robot sizes. The
index order is the one of ``rnea_second_derivatives``: ``T[b, i, j, k] = ∂_k (∂_j a_i)`` with the
``k``-perturbation applied first; for the configuration/configuration block that order is kept by
the formula above because the ID tensor already has it and the ``∂M`` terms are symmetric in the
roles of ``j`` and ``k``.
"""

from __future__ import annotations

import numpy as np

from .aba import aba
from .minv import minv as minv_fn
from .rnea_derivatives import rnea_derivatives
from .rnea_second_derivatives import rnea_second_derivatives


def aba_second_derivatives_bracket(model, q, v, tau, fext=None):
    """``(B_qq, B_vv, B_qv, B_qτ)``, each (B, nv, nv, nv): the bracketed terms of eq. 46 above, so that
    ``∂²a/∂x∂y = −M⁻¹ B_xy`` (the output index first, as in the tensors)."""
    return _bracket(model, q, v, tau, fext)[1]


def aba_second_derivatives(model, q, v, tau, fext=None):
    """``(d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau)``, each (B, nv, nv, nv): ``−M⁻¹`` times the brackets."""
    Mi, brackets = _bracket(model, q, v, tau, fext)
    B, nv = q.shape[0], model.nv

    def outer(T):  # −M⁻¹ applied to the output index
        return -(Mi @ T.reshape(B, nv, nv * nv)).reshape(B, nv, nv, nv)

    return tuple(outer(T) for T in brackets)


def _bracket(model, q, v, tau, fext):
    """``(M⁻¹ (B, nv, nv), (B_qq, B_vv, B_qv, B_qτ))`` at ``a = FD(q, v, τ)``."""
    a = aba(model, q, v, tau, fext)
    Mi = minv_fn(model, q)
    dtau_dq, dtau_dv = rnea_derivatives(model, q, v, a, fext)
    da_dq, da_dv = -Mi @ dtau_dq, -Mi @ dtau_dv
    d2q, d2v, dqv, dM = rnea_second_derivatives(model, q, v, a, fext)
    # dMt[b, l, j, m] = ∂M_lm/∂q_j, so dMt @ X contracts m: (∂M/∂q_j X)[l, k]
    dMt = np.swapaxes(dM, -1, -2)
    G_q = dMt @ da_dq[:, None]                      # [l, j, k] = (∂M/∂q_j ∂a/∂q)[l, k]
    inner_qq = d2q + G_q + np.swapaxes(G_q, -1, -2)
    inner_qv = dqv + dMt @ da_dv[:, None]
    inner_qt = dMt @ Mi[:, None]
    return Mi, (inner_qq, d2v, inner_qv, inner_qt)
