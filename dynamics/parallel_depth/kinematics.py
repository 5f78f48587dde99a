"""Per-link joint transforms and external-force mapping in an array namespace (step 0 of Yang, Wu & Pan 2017
Algorithm 1, ``CalcTransform``: all links at once, no recursion).

Same conventions as :mod:`dynamics.joints` / :func:`dynamics.numpy_backend.transforms.link_transforms`
(MuJoCo joint frames, hinge/ball anchors, ``q - ref``), but written against ``xp`` so it also runs
on CuPy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .namespace import ModelArrays
from .se3 import matvec, skew

Array = Any


def _quat_to_rotation(xp, q: Array) -> Array:
    q = q / xp.sqrt(xp.sum(q * q, axis=-1, keepdims=True))
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    rows = [[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]]
    return xp.stack([xp.stack(r, axis=-1) for r in rows], axis=-2)


def link_transforms(c: ModelArrays, q: Array) -> tuple[Array, Array]:
    """Parent-to-child motion transforms ``X_i = ^iX_λ(i)`` of every link as ``(E, r)``
    (B, L, 3, 3), (B, L, 3) (see :mod:`.se3`) from configurations q (B, nq)."""
    xp = c.xp
    B = q.shape[0]
    L = c.R0.shape[0]
    RJ = xp.empty((B, L, 3, 3), dtype=q.dtype)
    pJ = xp.empty((B, L, 3), dtype=q.dtype)
    idx = c.hinge
    if idx.size:
        th = q[:, c.qadr[idx]] - c.qpos0[idx]
        K = skew(c.axis[idx])
        R = (xp.eye(3) + xp.sin(th)[..., None, None] * K + (1 - xp.cos(th))[..., None, None] * (K @ K))
        anc = c.anchor[idx]
        RJ[:, idx] = R
        pJ[:, idx] = anc - matvec(R, anc)
    idx = c.slide
    if idx.size:
        disp = q[:, c.qadr[idx]] - c.qpos0[idx]
        RJ[:, idx] = xp.eye(3)
        pJ[:, idx] = disp[..., None] * c.axis[idx]
    idx = c.ball
    if idx.size:
        R = _quat_to_rotation(xp, q[:, c.qadr[idx][:, None] + np.arange(4)])
        anc = c.anchor[idx]
        RJ[:, idx] = R
        pJ[:, idx] = anc - matvec(R, anc)
    idx = c.free
    if idx.size:
        adr = c.qadr[idx]
        RJ[:, idx] = _quat_to_rotation(xp, q[:, adr[:, None] + np.arange(4) + 3])
        pJ[:, idx] = q[:, adr[:, None] + np.arange(3)]
    R = c.R0 @ RJ
    p = c.p0 + matvec(c.R0, pJ)
    return xp.swapaxes(R, -1, -2), p


def link_external_forces(c: ModelArrays, fext: Array | None) -> Array | None:
    """Per-body external forces (B, nbody, 6) in body frames -> per-link forces (B, L, 6) in link
    frames (bodies welded to the world are dropped), or None."""
    if fext is None:
        return None
    fb = matvec(c.body_X, fext)      # each body's force in its link frame, at the link origin
    return c.body_sel @ fb           # summed per link: (L, nbody) @ (B, nbody, 6) -> (B, L, 6)
