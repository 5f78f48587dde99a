"""Configuration integration ``q ⊕ w`` for the integrators, and the exact second-order terms of
that integration on ball (SO(3)) and free (SE(3)) joints, which DDP's Euler tensor needs.

Hinge/slide-only robots (:attr:`dynamics.RobotModel.is_euclidean`) integrate as ``q + w`` with
identity Jacobians and no second-order terms.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dynamics import RobotModel
from dynamics.inputs import sum_is_finite
from dynamics.spatial import motion_cross_matrix, skew


def integrate_or_nan(integrate: Callable, a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``integrate(a, d)`` with NaN results where ``a`` or ``d`` is not finite (the model rejects
    NaN input; a diverging rollout candidate or line-search trial is dropped by its NaN state
    instead)."""
    if sum_is_finite(a) and sum_is_finite(d):
        return integrate(a, d)
    bad = ~(np.all(np.isfinite(d), axis=-1) & np.all(np.isfinite(a), axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):     # the zeroed rows' quaternions: NaN, as wanted
        out = integrate(np.where(bad[..., None], 0.0, a), np.where(bad[..., None], 0.0, d))
    out[bad] = np.nan
    return out


def integrate_state(model: RobotModel, q: np.ndarray, w: np.ndarray, v: np.ndarray, euclidean: bool) -> np.ndarray:
    """``(q ⊕ w, v)`` (..., nq + nv) for q (..., nq), w and v (..., nv); NaN configuration where w
    is not finite. euclidean: q ⊕ w = q + w (hinge/slide joints only)."""
    nq = q.shape[-1]
    if euclidean and sum_is_finite(w):
        out = np.empty(v.shape[:-1] + (nq + v.shape[-1],))
        np.add(q, w, out=out[..., :nq])
        out[..., nq:] = v
        return out
    return np.concatenate([integrate_or_nan(model.integrate, q, w), v], axis=-1)


def lie_blocks(model: RobotModel) -> list[tuple[int, int, str]]:
    """``(first dof, size, "ball" | "free")`` of the tangent blocks of ball and free joints."""
    return [(va, 3, "ball") for _, va in model.ball_adr] + [(va, 6, "free") for _, va in model.free_adr]


def lie_integration_terms(model: RobotModel, blocks: list, q: np.ndarray, w: np.ndarray, Jq: np.ndarray,
                          Jw: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Second-order terms of ``G(dq, w) = ((q ⊕ dq) ⊕ w) ⊖ (q ⊕ w₀)`` for the ball/free ``blocks``,
    mapped to z through ``w = w₀ + W z + …`` (W = ∂w/∂z, (N, nv, nz)); Jq, Jw (N, nv, nv) the
    integration Jacobians at (q, w₀). Returns (N, nl, nz, nz): the rows of the blocks' dofs, in the
    blocks' order (nl of them; G's other rows vanish).

    With ``A = ∂G/∂dq`` (= Ad of exp(-w₀)) and ``Jr = ∂G/∂w`` (right Jacobian of exp), the
    BCH formula ``log(exp(a) exp(b)) = a + b + ½[a, b] + …`` applied to
    ``exp(-w₀) exp(dq) exp(w₀ + Δw) = exp(A dq) · exp(η(Δw))`` gives
    ``∂²G/∂dq∂w = ½ [A e_j, Jr e_k]`` (Lie bracket: cross product on SO(3), ``ad`` on SE(3)),
    ``∂²G/∂dq² = 0`` and ``∂²G/∂w² = sym(∂Jr/∂w)``; the derivative of the closed-form right
    Jacobian is taken by complex step (exact to rounding). Both are zero outside a block's own
    (row, dq, w) dofs (each joint integrates on its own), so each block's rows take its (n, n, n)
    pieces and its n rows of W only."""
    N, nz = q.shape[0], W.shape[-1]
    lie_dofs = np.concatenate([np.arange(va, va + n) for va, n, _ in blocks])
    nl = lie_dofs.size
    h = 1e-30
    wc = np.repeat(w[:, None, :].astype(complex), nl, axis=1)
    wc[:, np.arange(nl), lie_dofs] += 1j * h
    _, Jw_c = model.integrate_jacobians(np.repeat(q[:, None, :], nl, axis=1), wc)    # (N, nl, nv, nv)
    out = np.empty((N, nl, nz, nz))
    o = 0                                                 # the block's first row in the output
    for va, n, kind in blocks:
        sl = slice(va, va + n)
        dJr = np.moveaxis(Jw_c.imag[:, o:o + n, sl, sl], 1, -1) / h   # [n, i, j, k] = ∂Jr[i, j]/∂w_k
        Gww = 0.5 * (dJr + np.swapaxes(dJr, -1, -2))
        A = Jq[:, sl, sl]                                 # columns A e_j
        J = Jw[:, sl, sl]                                 # columns Jr e_k
        if kind == "ball":
            # [x, y] = x × y ; out[n, :, j, k] = A[:, j] × J[:, k]
            ad = skew(np.swapaxes(A, -1, -2))             # (N, j, 3, 3): ad(A e_j)
        else:
            ad = motion_cross_matrix(np.swapaxes(A, -1, -2))  # (N, j, 6, 6)
        Gqw = 0.5 * np.einsum("njil,nlk->nijk", ad, J)    # [n, i, j, k] = ∂²G_i/∂dq_j∂w_k
        Wb = W[:, sl, :]                                  # (N, n, nz): the block's rows of ∂w/∂z
        # G(dq, w(z)) with dq = E z, w = w0 + W z: Hessian over z (w's own curvature is the caller's):
        # Wᵀ Gww W, plus Eᵀ (Gqw W) and its transpose, which touch the block's dq rows / columns only
        blk = out[:, o:o + n]
        np.matmul(np.swapaxes(Wb, -1, -2)[:, None], Gww @ Wb[:, None], out=blk)
        X = np.einsum("nijk,nkb->nijb", Gqw, Wb)          # (N, n, n (dq_j), nz)
        blk[:, :, sl, :] += X
        blk[:, :, :, sl] += np.swapaxes(X, -1, -2)
        o += n
    return out
