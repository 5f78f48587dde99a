"""The workspace of a shooting problem: every per-knot array a solver iteration writes, allocated
once and reused by every iteration and every MPC update (Crocoddyl's ``ShootingProblem`` datas,
Pinocchio's ``Data``: the problem is the immutable description, this is its scratch).

A solver creates one with :meth:`ShootingProblem.create_data` and passes it to
:meth:`ShootingProblem.derivatives` (``data=``) and to the forward pass; the arrays it holds are
overwritten by the next call, so results a caller keeps must be copied (the solvers copy the
trajectory they return). DDP's second-order factors ``C``, ``T`` and the backend's
second-order tensors are kept here too (allocated on the first second-order call, per dynamics
group), and so are the contact-dynamics derivative stage's outputs and the fused contact
kernel's work arrays. What is *not* in the workspace: the RK4 integrator's and the
floating-base SO(3)/SE(3) second-order terms (fresh arrays), the cost terms evaluated in Python
(their residuals and Jacobians, at most (N, nr, ndx); the library's compiled terms write into
the workspace) and numpy's own iteration buffers.
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
    D (4, N, nv, nv))`` (acceleration, ``∂a/∂(q, v, τ)`` in ``D[:3]`` and a temporary in ``D[3]``)."""

    scratch: tuple | None = None
    _group_scratch: dict = field(default_factory=dict, repr=False)
    _second: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    def second_order_scratch(self, R: int, nz: int) -> tuple:
        """Buffers ``(A2 (4, n, nv, nv, nv), C (n, R, ndx), T (n, R, nz, nz))`` for the
        second-order call of these n knots: the backend's ``∂²a`` tensors and the factors of
        :class:`DynamicsDerivatives` (made on the first request for this R, then reused)."""
        key = (R, nz)
        s = self._second.get(key)
        if s is None:
            n, ndx = self.Fx.shape[0], self.Fx.shape[1]
            nv = self.scratch[0].shape[1]
            if len(self._second) > 8:
                self._second.clear()
            s = self._second[key] = (np.empty((4, n, nv, nv, nv)), np.empty((n, R, ndx)), np.empty((n, R, nz, nz)))
        return s

    def memo(self, key, make):
        """``make()`` on the first request for ``key``, then the same object: what a dynamics
        description prepares once per workspace (e.g. a backend call bound to these buffers)."""
        s = self._memo.get(key)
        if s is None:
            if len(self._memo) > 8:
                self._memo.clear()
            s = self._memo[key] = make()
        return s

    def state_scratch(self, nq: int) -> tuple:
        """``(q (n, nq), V (4, n, nv))``: the configurations of these n knots and their velocity,
        torque, next velocity and step ``w`` (made on the first request, then reused)."""
        key = ("state", nq)
        s = self._second.get(key)
        if s is None:
            n, nv = self.Fx.shape[0], self.scratch[0].shape[1]
            if len(self._second) > 8:
                self._second.clear()
            s = self._second[key] = (np.empty((n, nq)), np.empty((4, n, nv)))
        return s

    def contact_buffers(self, nc: int):
        """:class:`~dynamics.contact.ContactDynamicsBuffers` for the contact-dynamics derivatives of
        these n knots with nc contact rows (made on the first request for this nc, then reused)."""
        key = ("contact", nc)
        b = self._second.get(key)
        if b is None:
            from dynamics.contact import ContactDynamicsBuffers
            if len(self._second) > 8:
                self._second.clear()
            b = self._second[key] = ContactDynamicsBuffers.allocate(self.Fx.shape[0], self.scratch[0].shape[1], nc)
        return b

    def padded_factors(self, R: int, nz: int) -> tuple:
        """Zeroed ``(C (N, R, ndx), T (N, R, nz, nz))`` that gather the factors of several
        dynamics groups (of up to R rows each; unused rows stay zero)."""
        key = ("padded", R, nz)
        s = self._second.get(key)
        N, ndx = self.Fx.shape[0], self.Fx.shape[1]
        if s is None:
            if len(self._second) > 8:
                self._second.clear()
            s = self._second[key] = (np.empty((N, R, ndx)), np.empty((N, R, nz, nz)))
        s[0].fill(0.0)
        s[1].fill(0.0)
        return s

    def group_scratch(self, rows: slice) -> tuple:
        """Scratch ``(a, D)`` for the knots ``rows`` of one dynamics group (D must be contiguous
        per call, so a group of a multi-phase problem gets its own, made once)."""
        key = (rows.start, rows.stop)
        s = self._group_scratch.get(key)
        if s is None:
            if len(self._group_scratch) > 64:     # re-phased problems (a trot) keep making new ranges
                self._group_scratch.clear()
            n, nv = rows.stop - rows.start, self.scratch[0].shape[1]
            s = self._group_scratch[key] = (self.scratch[0][rows], np.empty((4, n, nv, nv)))
        return s

    def group_view(self, rows: slice) -> "DynamicsBuffers":
        """The buffers of the knots ``rows`` (a contiguous dynamics group), with their own scratch
        and second-order buffers (made once per row range, kept)."""
        key = ("view", rows.start, rows.stop)
        view = self._group_scratch.get(key)
        if view is None:
            if len(self._group_scratch) > 64:     # re-phased problems (a trot) keep making new ranges
                self._group_scratch.clear()
            view = type(self)(self.xnext[rows], self.Fx[rows], self.Fu[rows], scratch=self.group_scratch(rows))
            self._group_scratch[key] = view
        return view


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
                              scratch=(np.empty((N, nv)), np.empty((4, N, nv, nv))))
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
        for key, bufs in self.dynamics._second.items():
            if key[0] == "contact":
                names, bufs = ("a", "lam", "da", "dl"), (bufs.a, bufs.lam, bufs.da, bufs.dl)
            elif key[0] == "state":
                names = ("q", "V")
            else:
                names = ("A2", "C", "T") if len(bufs) == 3 else ("C", "T")
            for name, b in zip(names, bufs):
                out[f"dynamics.{key}.{name}"] = b
        for S, b in self._rollouts.items():
            out.update({f"rollout[{S}].X": b.X, f"rollout[{S}].U": b.U})
        return out
