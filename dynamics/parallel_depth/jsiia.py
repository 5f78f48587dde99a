"""Joint-space inertia inversion algorithm, JSIIA (Yang, Wu & Pan 2017 §III-D, Algorithm 2; Yang, Wu & Pan 2016 §II-C eq. (7)).

``q̈ = M(q)^-1 (τ - τ_bias)``: the bias ``τ_bias = ID(q, q̇, 0)`` and the n columns
``M[:, j] = ID(q, 0, e_j)`` (no gravity, no external force; Yang, Wu & Pan 2017 eq. (17)) are n + 1
data-independent scan-based inverse dynamics (:mod:`.rnea_scan`), run as one batch; then one
batched factorisation and solve (``xp.linalg.solve``: LU with partial pivoting, LAPACK ``gesv``
on the CPU, cuSOLVER on CuPy). Works on any tree the scan ID handles. Work O(n² log n) for the
columns plus O(n³) for the factorisation, per problem.
"""

from __future__ import annotations

from typing import Any

from .namespace import ModelArrays
from .rnea_scan import rnea_scan

Array = Any

#: links × problems per batched scan call when building M (bounds the memory of the column batch)
CHUNK_LINK_ELEMENTS = 1 << 17


def mass_matrix_scan(c: ModelArrays, E: Array, r: Array, operand: str = "group",
                     method: str = "hillis-steele") -> Array:
    """``M(q)`` (B, nv, nv) column by column: n scan IDs per problem with ``q̇ = 0``, ``q̈ = e_j``."""
    xp = c.xp
    B, L = E.shape[:2]
    nv = c.smap.shape[0]
    per = max(1, CHUNK_LINK_ELEMENTS // max(1, nv * L))
    eye = xp.eye(nv, dtype=E.dtype)
    out = []
    for b0 in range(0, B, per):
        Eb, rb = E[b0:b0 + per], r[b0:b0 + per]
        nb = Eb.shape[0]
        Ec = xp.broadcast_to(Eb[:, None], (nb, nv) + Eb.shape[1:]).reshape((nb * nv,) + Eb.shape[1:])
        rc = xp.broadcast_to(rb[:, None], (nb, nv) + rb.shape[1:]).reshape((nb * nv,) + rb.shape[1:])
        acols = xp.broadcast_to(eye, (nb, nv, nv)).reshape(nb * nv, nv)
        cols = rnea_scan(c, Ec, rc, xp.zeros_like(acols), acols, None, gravity=False, operand=operand,
                         method=method)
        out.append(xp.swapaxes(cols.reshape(nb, nv, nv), -1, -2))
    return out[0] if len(out) == 1 else xp.concatenate(out, axis=0)


def jsiia(c: ModelArrays, E: Array, r: Array, v: Array, tau: Array, fl: Array | None,
          operand: str = "group", method: str = "hillis-steele") -> Array:
    """Joint accelerations (B, nv) by JSIIA; E, r: link transforms, v, tau: (B, nv), fl: (B, L, 6)."""
    xp = c.xp
    bias = rnea_scan(c, E, r, v, xp.zeros_like(v), fl, operand=operand, method=method)
    M = mass_matrix_scan(c, E, r, operand, method)
    return xp.linalg.solve(M, (tau - bias)[..., None])[..., 0]
