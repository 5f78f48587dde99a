"""Constraint force algorithm, CFA, with the odd-even elimination solver (Yang, Wu & Pan 2016 §III, eqs.
(9)–(17), Algorithm 1), for serial chains of 1-DoF joints with invertible link inertias.

With ``K = (1 - Γ) J^-1 (1 - Γ)^T`` (block tri-diagonal: ``K_ii = J_i^-1 + X_i J_{i-1}^-1 X_i^T``,
``K_{i,i+1} = -J_i^-1 X_{i+1}^T``) the bias-free equations of motion are ``K F = S q̈`` and
``τδ = S^T F + A_rm q̈`` (``A_rm`` = diagonal joint armature). Writing each joint force as
``F_i = S̃_i μ_i + W_i F^c_i`` (``S̃_i = S_i / |S_i|²``, ``W_i`` an orthonormal 6×5 basis of the
constraint-force directions, ``W_i^T S_i = 0``; Yang, Wu & Pan 2016 eq. (14)) and eliminating q̈ with ``W^T``
(eq. (11)) gives the block tri-diagonal system of eq. (15) for the constraint forces ``F^c``;
``q̈ = S̃^T K F`` (eq. (13)). Without armature this is exactly ``M^-1 = C - B^T A^-1 B`` (eq. (17)).

Armature (not in the seed) is kept exact and the system symmetric positive definite by adding the
unknown ``ν_i = sqrt(a_i) q̈_i`` per joint: with ``μ = τδ - sqrt(A_rm) ν`` the per-link unknown
``y_i = (F^c_i, ν_i)`` (6 numbers) satisfies ``G y = R`` with
``G = T^T K T + diag(0,0,0,0,0,1)``, ``T_i = [W_i, -sqrt(a_i) S̃_i]``, ``R = -T^T K S̃ τδ``
(the Schur complement of the F^c block is ``1 + sqrt(A_rm) M_rb^-1 sqrt(A_rm)``, so G is SPD).
G is solved by :func:`.oee.oee_solve`; every other step is block-local (O(1) depth).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .namespace import ModelArrays
from .oee import oee_apply, oee_factor
from .rnea_scan import rnea_scan
from .se3 import matTvec, matvec, motion_matrix

Array = Any
_CONST: "weakref.WeakKeyDictionary[ModelArrays, tuple]" = weakref.WeakKeyDictionary()


def cfa_constants(c: ModelArrays) -> tuple[Array, Array, Array]:
    """``(J^-1 (L, 6, 6), T (L, 6, 6), S̃ (L, 6))`` for a chain of 1-DoF joints (cached)."""
    if c in _CONST:
        return _CONST[c]
    xp = c.xp
    from .namespace import to_numpy
    S = to_numpy(c.S1)
    I = to_numpy(c.inertia)
    arm = to_numpy(c.armature)
    L = S.shape[0]
    Jinv = np.linalg.inv(I)
    St = S / np.sum(S * S, axis=1, keepdims=True)
    T = np.empty((L, 6, 6))
    for i in range(L):
        u, _, _ = np.linalg.svd(S[i][:, None], full_matrices=True)
        T[i, :, :5] = u[:, 1:]
        T[i, :, 5] = -np.sqrt(arm[i]) * St[i]
    out = (xp.asarray(Jinv), xp.asarray(T), xp.asarray(St))
    _CONST[c] = out
    return out


def btd_matvec(Kd: Array, Ku: Array, x: Array) -> Array:
    """``K x`` for a symmetric block tri-diagonal K (diagonal Kd (B, n, k, k), upper Ku (B, n-1, k, k))."""
    out = matvec(Kd, x)
    out[:, :-1] += matvec(Ku, x[:, 1:])
    out[:, 1:] += matTvec(Ku, x[:, :-1])
    return out


def cfa(c: ModelArrays, E: Array, r: Array, v: Array, tau: Array, fl: Array | None,
        method: str = "hillis-steele", refine: int = 1) -> Array:
    """Joint accelerations (B, L) by the CFA with OEE (Yang, Wu & Pan 2016 Algorithm 1 with Algorithm 2).

    refine: steps of iterative refinement ``q̈ += CFA(τδ - M q̈)`` (``M q̈`` by one scan ID, the
    OEE elimination reused). The CFA recovers q̈ from differences of the large inter-link forces
    (``M^-1 = C - B^T A^-1 B``), which costs accuracy on long chains (see docs/parallel_depth.md);
    one step restores the accuracy of the recursive ABA at O(log n) extra depth."""
    xp = c.xp
    Jinv, T, St = cfa_constants(c)
    td = tau - rnea_scan(c, E, r, v, xp.zeros_like(v), fl, method=method)
    X = motion_matrix(E, r)
    Xt = xp.swapaxes(X[:, 1:], -1, -2)
    Kd = xp.broadcast_to(Jinv, X.shape).copy()
    Kd[:, 1:] += X[:, 1:] @ Jinv[:-1] @ Xt
    Ku = -(Jinv[:-1] @ Xt)
    Tt = xp.swapaxes(T, -1, -2)
    Gd = Tt @ Kd @ T
    Gd[..., 5, 5] += 1.0
    Gu = Tt[:-1] @ Ku @ T[1:]
    factors = oee_factor(Gd, Gu)

    def solve(rhs: Array) -> Array:
        s = St * rhs[..., None]
        y = oee_apply(factors, -matTvec(T, btd_matvec(Kd, Ku, s)))
        F = matvec(T, y) + s
        return xp.sum(St * btd_matvec(Kd, Ku, F), axis=-1)

    qdd = solve(td)
    for _ in range(refine):
        res = td - rnea_scan(c, E, r, xp.zeros_like(v), qdd, None, gravity=False, method=method)
        qdd = qdd + solve(res)
    return qdd
