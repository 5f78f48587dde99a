"""First-order partial derivatives of forward dynamics (seed 000, Algorithm 3): run ABA, then
∇RNEA with the resulting accelerations as input, and multiply by ``-M^-1``:
``∂a/∂q = -M^-1 ∂τ/∂q``, ``∂a/∂v = -M^-1 ∂τ/∂v``, ``∂a/∂τ = M^-1``. With ``minv`` given this is
Dadu-RBD's ΔiFD (seed 001, Table I)."""

from __future__ import annotations

import numpy as np

from .aba import aba
from .minv import minv as minv_fn
from .rnea_derivatives import rnea_derivatives


def aba_derivatives(model, q, v, tau, fext=None, minv=None):
    """Returns ``(da_dq, da_dv, da_dtau)``, each (B, nv, nv)."""
    a = aba(model, q, v, tau, fext)
    dtau_dq, dtau_dv = rnea_derivatives(model, q, v, a, fext)
    Mi = minv_fn(model, q) if minv is None else minv
    return -Mi @ dtau_dq, -Mi @ dtau_dv, Mi
