"""First-order partial derivatives of forward dynamics (Plancher et al. 2021, Algorithm 3): run ABA, then
∇RNEA with the resulting accelerations as input, and multiply by ``-M^-1``:
``∂a/∂q = -M^-1 ∂τ/∂q``, ``∂a/∂v = -M^-1 ∂τ/∂v``, ``∂a/∂τ = M^-1``. With ``minv`` given this is
Dadu-RBD's ΔiFD (Yang, Chen & Han 2023, Table I)."""

from __future__ import annotations

import numpy as np

from .aba import aba
from .minv import minv as minv_fn
from .rnea_derivatives import rnea_derivatives


def aba_derivatives(model, q, v, tau, fext=None, minv=None, return_acceleration: bool = False):
    """Returns ``(da_dq, da_dv, da_dtau)``, each (B, nv, nv); with ``return_acceleration`` the
    acceleration ABA computed on the way comes first, ``(a (B, nv), da_dq, da_dv, da_dtau)``."""
    a = aba(model, q, v, tau, fext)
    dtau_dq, dtau_dv = rnea_derivatives(model, q, v, a, fext)
    Mi = minv_fn(model, q) if minv is None else minv
    out = (-Mi @ dtau_dq, -Mi @ dtau_dv, Mi)
    return (a, *out) if return_acceleration else out
