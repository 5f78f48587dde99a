"""A frame's position in a half-space: obstacles, a table, a wall."""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel

from ..costs.base import CostContext
from .base import Constraint


class FrameHalfSpace(Constraint):
    """``n · p_frame(q) ≤ offset`` [m]: the frame's origin stays on the side of the plane
    ``n · p = offset`` that ``-n`` points into (n: (3,) world normal, normalised here). For "stay
    above a table at height h" use ``normal=(0, 0, -1), offset=-h``. Jacobian: ``nᵀ J_v`` with the
    frame's ``local_world_aligned`` Jacobian."""

    name = "frame_half_space"
    nc = 1

    def __init__(self, model: RobotModel, frame: str, normal, offset: float):
        model.frame(frame)      # raises KeyError naming the known sites/bodies
        n = np.asarray(normal, float)
        if n.shape != (3,) or not np.all(np.isfinite(n)) or np.linalg.norm(n) == 0:
            raise ValueError(f"FrameHalfSpace: normal must be a finite non-zero (3,) vector, got {normal!r}")
        if not np.isfinite(offset):
            raise ValueError(f"FrameHalfSpace: offset must be finite, got {offset}")
        scale = np.linalg.norm(n)
        self.model, self.frame = model, frame
        self.normal = n / scale
        self.offset = float(offset) / scale
        self.set_bounds([-np.inf], [self.offset])

    def residual(self, ctx: CostContext) -> np.ndarray:
        return (ctx.frame_position(self.frame) @ self.normal)[:, None]

    def jacobian(self, ctx: CostContext):
        J = ctx.frame_jacobian(self.frame, "local_world_aligned")[:, :3]       # (B, 3, nv)
        Gx = np.zeros((ctx.batch, 1, ctx.state.ndx))
        Gx[:, 0, :ctx.model.nv] = np.einsum("i,bij->bj", self.normal, J)
        return Gx, None
