"""The workspace of a shooting problem: every per-knot array a solver iteration writes, allocated
once and reused by every iteration and every MPC update (Crocoddyl's ``ShootingProblem`` datas,
Pinocchio's ``Data``: the problem is the immutable description, this is its scratch).

A solver creates one with :meth:`ShootingProblem.create_data` and passes it to
:meth:`ShootingProblem.derivatives` (``data=``) and to the forward pass; the arrays it holds are
overwritten by the next call, so results a caller keeps must be copied (the solvers copy the
trajectory they return). What is *not* in the workspace: the second-order factors ``C``, ``T``
of DDP (fresh each iteration, their size depends on the dynamics groups), the contact-dynamics
derivative stage's scratch (the contact kernels allocate their outputs) and the small per-term
temporaries of the cost terms (residuals and their Jacobians, at most (N, nr, ndx)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .costs import CostDerivatives
from .discrete_dynamics import DynamicsDerivatives


@dataclass
class DynamicsBuffers(DynamicsDerivatives):
    """:class:`DynamicsDerivatives` buffers (xnext (N, nx), Fx (N, ndx, ndx), Fu (N, ndx, nu),
    C-contiguous) plus the scratch of the backend's first-order call: ``scratch = (a (N, nv),
    D (3, N, nv, nv))`` (acceleration and ``∂a/∂(q, v, τ)``)."""

    scratch: tuple | None = None
    _group_scratch: dict = field(default_factory=dict, repr=False)

    def group_scratch(self, rows: slice) -> tuple:
        """Scratch ``(a, D)`` for the knots ``rows`` of one dynamics group (D must be contiguous
        per call, so a group of a multi-phase problem gets its own, made once)."""
        key = (rows.start, rows.stop)
        s = self._group_scratch.get(key)
        if s is None:
            if len(self._group_scratch) > 64:     # re-phased problems (a trot) keep making new ranges
                self._group_scratch.clear()
            n, nv = rows.stop - rows.start, self.scratch[0].shape[1]
            s = self._group_scratch[key] = (self.scratch[0][rows], np.empty((3, n, nv, nv)))
        return s


@dataclass
class RolloutBuffers:
    """Forward-pass outputs for S step sizes: X (S, N+1, nx), U (S, N, nu), ok (S,) bool."""

    X: np.ndarray
    U: np.ndarray
    ok: np.ndarray


@dataclass
class ProblemData:
    """Workspace of one :class:`~solvers.problem.ShootingProblem` (N knots).

    running: cost derivatives of the N knots (already scaled by their dt); terminal: those of the
    terminal knot (B = 1); dynamics: :class:`DynamicsBuffers`. :meth:`rollout` hands out the
    forward pass's buffers for S candidates (one set per S, kept)."""

    horizon: int
    nx: int
    ndx: int
    nu: int
    running: CostDerivatives
    terminal: CostDerivatives
    dynamics: DynamicsBuffers
    _rollouts: dict = field(default_factory=dict, repr=False)

    @classmethod
    def allocate(cls, horizon: int, nx: int, ndx: int, nu: int, nv: int) -> "ProblemData":
        N = int(horizon)
        dyn = DynamicsBuffers(np.empty((N, nx)), np.empty((N, ndx, ndx)), np.empty((N, ndx, nu)),
                              scratch=(np.empty((N, nv)), np.empty((3, N, nv, nv))))
        return cls(N, nx, ndx, nu, CostDerivatives.zeros(N, ndx, nu), CostDerivatives.zeros(1, ndx, nu), dyn)

    def derivatives(self):
        """The :class:`~solvers.problem.ProblemDerivatives` view of the buffers."""
        from .problem import ProblemDerivatives
        return ProblemDerivatives(self.running, self.terminal, self.dynamics)

    def rollout(self, S: int) -> RolloutBuffers:
        """Buffers for a rollout of S candidates (allocated on the first request for this S)."""
        buf = self._rollouts.get(S)
        if buf is None:
            N = self.horizon
            buf = self._rollouts[S] = RolloutBuffers(np.empty((S, N + 1, self.nx)), np.empty((S, N, self.nu)),
                                                     np.empty(S, dtype=np.bool_))
        return buf

    def arrays(self) -> dict[str, np.ndarray]:
        """Every buffer by name (for tests that check the workspace is reused)."""
        out = {f"running.{k}": getattr(self.running, k) for k in ("l", "lx", "lu", "lxx", "lxu", "luu")}
        out.update({f"terminal.{k}": getattr(self.terminal, k) for k in ("l", "lx", "lxx")})
        out.update({"dynamics.xnext": self.dynamics.xnext, "dynamics.Fx": self.dynamics.Fx,
                    "dynamics.Fu": self.dynamics.Fu, "dynamics.a": self.dynamics.scratch[0],
                    "dynamics.D": self.dynamics.scratch[1]})
        for S, b in self._rollouts.items():
            out.update({f"rollout[{S}].X": b.X, f"rollout[{S}].U": b.U})
        return out
