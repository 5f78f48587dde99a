"""Frame velocity and acceleration with their partial derivatives w.r.t. q and v, at fixed a.

This is the optional backend kernel the contact derivatives need (Pinocchio's
``getFrameVelocityDerivatives`` / ``getFrameAccelerationDerivatives``; Carpentier & Mansard,
"Analytical derivatives of rigid body dynamics algorithms", RSS 2018, Sec. IV). For each frame the
forward sweep of the RNEA derivatives (Plancher et al. 2021 Algorithm 2, the first loop of
:mod:`dynamics.numpy_backend.rnea_derivatives`) is run along the frame's chain of ancestors only,
**without gravity**, in link coordinates:

``v_i = X_i v_λ + S_i q̇_i``, ``a_i = X_i a_λ + S_i q̈_i + v_i × S_i q̇_i``,
``∂v_i/∂q = X_i ∂v_λ/∂q + [(X_i v_λ) × S_i]_(cols i)``,
``∂a_i/∂q = X_i ∂a_λ/∂q + [(X_i a_λ) × S_i]_(cols i) − (S_i q̇_i) × ∂v_i/∂q``,
``∂v_i/∂v = X_i ∂v_λ/∂v + [S_i]_(cols i)``,
``∂a_i/∂v = X_i ∂a_λ/∂v − (S_i q̇_i) × ∂v_i/∂v + [v_i × S_i]_(cols i)``,

then mapped to the frame by its constant placement in the link. Derivatives w.r.t. q are along
the tangent perturbation ``q ⊕ δ`` (docs/conventions.md); ``∂v_f/∂v`` is the LOCAL frame Jacobian.

:func:`frame_motion_derivatives_numpy` is the generic implementation (batched, complex-step safe),
which ``Backend.frame_motion_derivatives`` runs; a backend with its own kernel overrides that
method (the numba backend runs the compiled kernel of :mod:`.numba_kernels` on float64 inputs).
:func:`frame_motion_derivatives` calls the backend's method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spatial import motion_cross, motion_cross_matrix, motion_transform
from .contact_set import ContactSet


@dataclass(frozen=True)
class FrameMotionDerivatives:
    """Per contact frame (k frames, batch B), local (frame axes, frame origin) quantities.

    v, a: spatial velocity / acceleration (B, k, 6) (linear, angular), gravity not included;
    dv_dq, dv_dv, da_dq, da_dv: their derivatives (B, k, 6, nv); ``dv_dv`` is the LOCAL Jacobian
    and also ``∂a/∂a``; R, p: world placement of each frame (B, k, 3, 3), (B, k, 3).
    """

    v: np.ndarray
    a: np.ndarray
    dv_dq: np.ndarray
    dv_dv: np.ndarray
    da_dq: np.ndarray
    da_dv: np.ndarray
    R: np.ndarray
    p: np.ndarray


def frame_motion_derivatives_numpy(model, q, v, a, contacts: ContactSet) -> FrameMotionDerivatives:
    """Numpy reference of the kernel, flat batch inputs q (B, nq), v (B, nv), a (B, nv)."""
    from ..numpy_backend.transforms import link_transforms
    X, Rl, pl = link_transforms(model, q)
    B, nv = q.shape[0], model.nv
    dtype = np.result_type(X, v, a)
    k = len(contacts.frames)
    out = {n: np.zeros((B, k, 6, nv), dtype=dtype) for n in ("dv_dq", "dv_dv", "da_dq", "da_dv")}
    vf = np.zeros((B, k, 6), dtype=dtype)
    af = np.zeros((B, k, 6), dtype=dtype)
    Rf = np.zeros((B, k, 3, 3), dtype=dtype)
    pf = np.zeros((B, k, 3), dtype=dtype)
    for c in range(k):
        chain = []
        i = int(contacts.links[c])
        while i >= 0:
            chain.append(i)
            i = int(model.link_parent[i])
        vel = np.zeros((B, 6), dtype=dtype)
        acc = np.zeros((B, 6), dtype=dtype)
        dv_dq = np.zeros((B, 6, nv), dtype=dtype)
        dv_dv = np.zeros((B, 6, nv), dtype=dtype)
        da_dq = np.zeros((B, 6, nv), dtype=dtype)
        da_dv = np.zeros((B, 6, nv), dtype=dtype)
        oR = np.broadcast_to(np.eye(3), (B, 3, 3)).astype(dtype)
        op = np.zeros((B, 3), dtype=dtype)
        for i in reversed(chain):
            S = model.link_S[i]
            d0, nd = model.link_dofadr[i], model.link_nv[i]
            cols = slice(d0, d0 + nd)
            Xi = X[:, i]
            vJ = v[:, cols] @ S.T
            Xv = np.einsum("bij,bj->bi", Xi, vel)
            Xa = np.einsum("bij,bj->bi", Xi, acc)
            dv_dq = Xi @ dv_dq
            dv_dv = Xi @ dv_dv
            da_dq = Xi @ da_dq
            da_dv = Xi @ da_dv
            dv_dq[:, :, cols] += motion_cross_matrix(Xv) @ S
            dv_dv[:, :, cols] += S
            da_dq[:, :, cols] += motion_cross_matrix(Xa) @ S
            vel = Xv + vJ
            acc = Xa + a[:, cols] @ S.T + motion_cross(vel, vJ)
            cvJ = motion_cross_matrix(vJ)
            da_dq = da_dq - cvJ @ dv_dq
            da_dv = da_dv - cvJ @ dv_dv
            da_dv[:, :, cols] += motion_cross_matrix(vel) @ S
            op = op + np.einsum("bij,bj->bi", oR, pl[:, i])
            oR = oR @ Rl[:, i]
        Xf = motion_transform(contacts.frame_R[c], contacts.frame_p[c])  # link -> frame
        vf[:, c] = vel @ Xf.T
        af[:, c] = acc @ Xf.T
        out["dv_dq"][:, c] = Xf @ dv_dq
        out["dv_dv"][:, c] = Xf @ dv_dv
        out["da_dq"][:, c] = Xf @ da_dq
        out["da_dv"][:, c] = Xf @ da_dv
        Rf[:, c] = oR @ contacts.frame_R[c]
        pf[:, c] = op + np.einsum("bij,j->bi", oR, contacts.frame_p[c])
    return FrameMotionDerivatives(vf, af, out["dv_dq"], out["dv_dv"], out["da_dq"], out["da_dv"], Rf, pf)


def unflatten_motion(batch: tuple[int, ...], fm: FrameMotionDerivatives) -> FrameMotionDerivatives:
    """``fm`` computed on a flat batch (B = prod(batch)) with every field reshaped to ``batch + ...``."""
    if len(batch) == 1:   # the inputs were flat already
        return fm
    return FrameMotionDerivatives(*(x.reshape(batch + x.shape[1:]) for x in
                                    (fm.v, fm.a, fm.dv_dq, fm.dv_dv, fm.da_dq, fm.da_dv, fm.R, fm.p)))


def frame_motion_derivatives(backend, model, q, v, a, contacts: ContactSet) -> FrameMotionDerivatives:
    """Frame motion and its derivatives for every frame of ``contacts``: the backend's
    ``frame_motion_derivatives`` (q (..., nq), v, a (..., nv); fields with the same batch dims)."""
    return backend.frame_motion_derivatives(model, q, v, a, contacts)
