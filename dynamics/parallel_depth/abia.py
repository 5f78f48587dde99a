"""Hybrid articulated-body inertia algorithm, ABIA (Yang, Wu & Pan 2017 §II-B eqs. (7)–(8), §III-E and
Algorithm 3; Yang, Wu & Pan 2016 §II-C eq. (8)), for serial chains of 1-DoF joints.

1. ``τ̂ = τ - ID(q, q̇, 0)`` with the scan ID (:mod:`.rnea_scan`).
2. Articulated-body inertias by the *serial* nonlinear recursion (7) (not scannable — Yang, Wu & Pan 2017
   §II-B, Hyafil & Kung), batched over problems: ``Î_i = I_i + X_{i+1}^T (Î_{i+1} - U U^T / D)
   X_{i+1}`` with ``U = Î_{i+1} S_{i+1}``, ``D = Ω_{i+1} = S_{i+1}^T Î_{i+1} S_{i+1} + armature``.
3. In parallel: ``Y_{i,i+1} = X_{i+1}^T (1 - U_{i+1} S_{i+1}^T / D_{i+1})``,
   ``Π_{i,i+1} = X_{i+1}^T U_{i+1} / D_{i+1}``.
4. Backward scan ``ẑ_i = Y_{i,i+1} ẑ_{i+1} + Π_{i,i+1} τ̂_{i+1}`` (operands of Yang, Wu & Pan 2017 eq. (18)),
   ``ĉ_i = (τ̂_i - S_i^T ẑ_i) / Ω_i`` in parallel, forward scan
   ``λ_i = Y_{i-1,i}^T λ_{i-1} + S_i ĉ_i`` (eq. (19)) and ``q̈_i = ĉ_i - Π_{i-1,i}^T λ_{i-1}``.

``ẑ`` is the articulated bias force and ``λ`` the link acceleration of Featherstone's ABA with zero
velocity; joint armature enters ``Ω`` as in :mod:`dynamics.numpy_backend.aba`.
"""

from __future__ import annotations

from typing import Any

from . import scan as _scan
from .namespace import ModelArrays
from .rnea_scan import rnea_scan
from .se3 import matTvec, motion_matrix

Array = Any


def articulated_inertias(c: ModelArrays, X: Array) -> tuple[Array, Array, Array]:
    """Serial recursion (7): ``(Î, U, D)`` — articulated inertias (B, L, 6, 6), ``U_i = Î_i S_i``
    (B, L, 6) and ``D_i = S_i^T Î_i S_i + armature_i`` (B, L). X: link transforms as 6×6 (B, L, 6, 6)."""
    xp = c.xp
    B, L = X.shape[:2]
    IA = xp.broadcast_to(c.inertia, (B,) + c.inertia.shape).copy()
    U = xp.empty((B, L, 6), dtype=X.dtype)
    D = xp.empty((B, L), dtype=X.dtype)
    for i in range(L - 1, -1, -1):
        U[:, i] = IA[:, i] @ c.S1[i]
        D[:, i] = U[:, i] @ c.S1[i] + c.armature[i]
        if i > 0:
            Ia = IA[:, i] - U[:, i, :, None] * U[:, i, None, :] / D[:, i, None, None]
            IA[:, i - 1] += xp.swapaxes(X[:, i], -1, -2) @ Ia @ X[:, i]
    return IA, U, D


def abia(c: ModelArrays, E: Array, r: Array, v: Array, tau: Array, fl: Array | None,
         method: str = "hillis-steele") -> Array:
    """Joint accelerations (B, L) of a serial chain of 1-DoF joints by the hybrid ABIA."""
    xp = c.xp
    B, L = E.shape[:2]
    td = tau - rnea_scan(c, E, r, v, xp.zeros_like(v), fl, method=method)
    X = motion_matrix(E, r)
    _, U, D = articulated_inertias(c, X)
    S = c.S1
    # Y_i = Y_{i,i+1}, Pi_i = Π_{i,i+1} for i = 0 … L-2
    P = xp.eye(6) - U[:, 1:, :, None] * S[1:, None, :] / D[:, 1:, None, None]
    Xt = xp.swapaxes(X[:, 1:], -1, -2)
    Y = Xt @ P
    Pi = matTvec(X[:, 1:], U[:, 1:] / D[:, 1:, None])
    flip = (slice(None), slice(None, None, -1))
    z = _scan.inclusive_scan((Y[flip], (Pi * td[:, 1:, None])[flip]), _scan.affine_combine, method)[1][flip]
    z = xp.concatenate([z, xp.zeros((B, 1, 6), dtype=z.dtype)], axis=1)       # ẑ_{L-1} = 0
    chat = (td - xp.sum(z * S, axis=-1)) / D
    T = xp.concatenate([xp.broadcast_to(xp.eye(6), (B, 1, 6, 6)), xp.swapaxes(Y, -1, -2)], axis=1)
    lam = _scan.inclusive_scan((T, chat[..., None] * S), _scan.affine_combine, method)[1]
    qdd = chat.copy()
    qdd[:, 1:] -= xp.sum(Pi * lam[:, :-1], axis=-1)
    return qdd
