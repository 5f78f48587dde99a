"""Odd-even elimination (OEE) for symmetric block tri-diagonal systems (Yang, Wu & Pan 2016 §IV, Algorithm 2;
Fijany, Sharf & D'Eleuterio 1995; Levit 1989).

Solves ``A x = R`` for ``A`` with symmetric diagonal blocks ``D_i`` and lower blocks equal to the
transposed upper blocks ``U_i = A_{i,i+1}``. Step ``j`` (stride ``s = 2^(j-1)``) eliminates, in
every row at once, the couplings to rows ``i ± s`` with ``E_i = U_i D_{i+s}^-1`` and
``K_i = U_{i-s}^T D_{i-s}^-1`` (computed by solves with ``D``, Yang, Wu & Pan 2016 lines 3–4), which couples
row i to ``i ± 2s`` only (Yang, Wu & Pan 2016 eq. (19)); after ``ceil(log2 n)`` steps the matrix is block
diagonal and every block row is solved independently (line 16). O(log n) steps, O(n log n) work —
each step is a handful of batched k×k solves and products over all rows.

The elimination of the matrix (:func:`oee_factor`) is kept apart from its application to a right
side (:func:`oee_apply`, the ``R`` updates of lines 9–11 and 16), so further right sides — e.g. an
iterative-refinement step — cost only batched matrix-vector products.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .namespace import array_namespace

Array = Any


@dataclass(frozen=True)
class OEEFactors:
    """The eliminated system: per step ``(s, E, K)`` with E (B, n-s, k, k) and K (B, n-s, k, k)
    (``K[:, i]`` belongs to row ``i + s``), and the final block-diagonal D (B, n, k, k)."""
    steps: tuple
    D: Array


def oee_factor(D: Array, U: Array) -> OEEFactors:
    """Odd-even elimination of the matrix with diagonal blocks D (B, n, k, k) and upper blocks
    U (B, n-1, k, k) (``A_{i,i+1}``; ``A_{i+1,i} = U_i^T``), Yang, Wu & Pan 2016 Algorithm 2 lines 1–8, 13."""
    xp = array_namespace(D)
    n = D.shape[1]
    steps = []
    s = 1
    while s < n:
        m = n - s
        Ut = xp.swapaxes(U, -1, -2)
        E = xp.swapaxes(xp.linalg.solve(D[:, s:], Ut), -1, -2)      # E_i, i in [0, m)
        K = xp.swapaxes(xp.linalg.solve(D[:, :m], U), -1, -2)       # K_{i+s}, i in [0, m)
        Dn = D.copy()
        Dn[:, :m] -= E @ Ut
        Dn[:, s:] -= K @ U
        U = -(E[:, :max(n - 2 * s, 0)] @ U[:, s:])                  # couples i and i + 2s
        steps.append((s, E, K))
        D = Dn
        s *= 2
    return OEEFactors(steps=tuple(steps), D=D)


def oee_apply(f: OEEFactors, R: Array) -> Array:
    """Solution x (B, n, k) for the right side R (B, n, k) (lines 9–11 and 16)."""
    R = R.copy()
    for s, E, K in f.steps:
        m = R.shape[1] - s
        Rn = R.copy()
        Rn[:, :m] -= (E @ R[:, s:, :, None])[..., 0]
        Rn[:, s:] -= (K @ R[:, :m, :, None])[..., 0]
        R = Rn
    xp = array_namespace(R)
    return xp.linalg.solve(f.D, R[..., None])[..., 0]


def oee_solve(D: Array, U: Array, R: Array) -> Array:
    """Solution x (B, n, k) of the block tri-diagonal system (D, U) for the right side R (B, n, k)."""
    return oee_apply(oee_factor(D, U), R)
