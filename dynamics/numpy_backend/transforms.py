"""Per-call link transforms and external-force mapping shared by the numpy algorithms."""

from __future__ import annotations

import numpy as np

from ..joints import joint_placements
from ..spatial import cross, motion_transform


def link_transforms(model, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parent-to-child motion transforms ``X[:, i] = ^iX_λ(i)`` (B, L, 6, 6) plus the placements
    ``(R, p)`` (B, L, 3, 3), (B, L, 3) they are built from."""
    R, p = joint_placements(model, q)
    return motion_transform(R, p), R, p


def gravity_acceleration(model, B: int, dtype) -> np.ndarray:
    """Spatial acceleration of the world frame that emulates gravity: ``a_0 = -g`` (B, 6)."""
    a0 = np.zeros((B, 6), dtype=dtype)
    a0[:, :3] = -model.gravity
    return a0


def link_external_forces(model, fext: np.ndarray | None, B: int, dtype) -> np.ndarray | None:
    """Map per-body external forces (B, nbody, 6) in body frames to per-link forces in link frames
    (B, L, 6). Forces on bodies welded to the world are dropped."""
    if fext is None:
        return None
    out = np.zeros((B, model.nlinks, 6), dtype=np.result_type(fext, dtype))
    for b in range(1, model.nbody):
        lk = model.body_link[b]
        if lk < 0:
            continue
        Rb, pb = model.body_R[b], model.body_p[b]
        f = fext[:, b, :3] @ Rb.T
        n = fext[:, b, 3:] @ Rb.T + cross(pb, f)
        out[:, lk, :3] += f
        out[:, lk, 3:] += n
    return out


def pass_inputs(model, q: np.ndarray, x: np.ndarray, y: np.ndarray, fext: np.ndarray | None, X: np.ndarray | None):
    """What a recursive pass over the links starts from: ``(B, L, dtype, X, fl)`` with dtype the
    result type of q, the two per-dof inputs x, y and fext (at least float64; complex under a
    complex step), X the link transforms (computed where None) and fl the per-link external forces."""
    dtype = np.result_type(q, x, y, np.float64, *(() if fext is None else (fext,)))
    if X is None:
        X, _, _ = link_transforms(model, q)
    return q.shape[0], model.nlinks, dtype, X, link_external_forces(model, fext, q.shape[0], dtype)
