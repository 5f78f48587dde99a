"""The data of a shooting problem: every per-knot array an evaluation or a solver iteration writes,
allocated when the data is built and reused by every iteration and every MPC update (Crocoddyl's
``ShootingProblem`` datas, Pinocchio's ``Data``: the problem is the description, this its scratch).

Built by :meth:`ShootingProblem.create_data`; the results of :meth:`ShootingProblem.derivatives`
(``data=``) and of the forward pass (:meth:`ProblemData.rollout`) are its buffers, overwritten by
the next call, so results a caller keeps must be copied (the solvers copy the trajectory they
return). It holds:

* the cost derivatives of the N running knots and of the terminal knot;
* per dynamics group, its integrated model's data (:mod:`solvers.integrators`: first-order
  outputs — rows of the problem's (N, ...) arrays when the group's knots are contiguous — the
  state, acceleration-partial and contact buffers, and with second order the factors C, T and
  the backend's second-order tensors), plus the (N, R, ...) factors gathering several groups';
* the forward pass's rollouts for 1 … S candidates.

Second-order buffers exist from construction with ``second_order=True``, or from one call of
:meth:`ProblemData.enable_second_order` (a solver's setup). A re-phased problem
(:meth:`ShootingProblem.set_running_models`) gets data for its new groups on the next evaluation,
keeping the data of groups that did not change and handing that of a former group of the same
integrated model and knot count to a moved one, or that of a group dropped by an earlier
re-phasing (kept, up to :attr:`ProblemData.pool_knots` knots per horizon knot, for a gait's
next cycle, which meets the same sizes again); a knot structure met before takes back the data its
groups had then (kept per structure, :attr:`ProblemData.MAX_KEPT_STRUCTURES`). Not in the data: the RK4 stage chain rule's and
the floating-base SO(3)/SE(3) terms' intermediates, the second-order differences of RK4 and
impulse knots, the cost terms evaluated in Python (at most (N, nr, ndx); the library's compiled
terms write into the data) and numpy's own iteration buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costs import CostDerivatives
from .integrators import DynamicsDerivatives, IntegratedData
from .knots import KnotGroup


@dataclass
class ProblemDerivatives:
    """Everything a backward pass needs at a trajectory: running cost derivatives (already scaled
    by dt) over the N knots, terminal cost derivatives (B = 1), and the dynamics derivatives."""

    running: CostDerivatives
    terminal: CostDerivatives
    dynamics: DynamicsDerivatives

    @property
    def cost(self) -> float:
        add = np.add.reduce      # ndarray.sum's own reduction, without its Python wrapper
        return float(add(self.running.l, axis=None) + add(self.terminal.l, axis=None))


@dataclass(eq=False)
class RolloutBuffers:
    """Forward-pass outputs for S step sizes: X (S, N+1, nx), U (S, N, nu), ok (S,) bool, and the
    contact forces of a rollout that computes them (:meth:`forces`)."""

    X: np.ndarray
    U: np.ndarray
    ok: np.ndarray
    _forces: np.ndarray | None = None

    def forces(self, nc: int) -> np.ndarray:
        """The contact-force buffer (S, N, ≥ nc), made on first use and again only when a knot
        structure with more force rows than before needs it."""
        F = self._forces
        if F is None or F.shape[2] < nc:
            F = self._forces = np.empty(self.U.shape[:2] + (nc,))
        return F


def _cost_derivative_block(sizes: tuple[int, ...], ndx: int, nu: int) -> tuple[np.ndarray, list[CostDerivatives]]:
    """Zeroed :class:`CostDerivatives` for knot counts ``sizes``, every array a C-contiguous view of
    one flat block (returned too: zeroing all of them is one call)."""
    shapes = [[(B,), (B, ndx), (B, nu), (B, ndx, ndx), (B, ndx, nu), (B, nu, nu)] for B in sizes]
    block = np.zeros(sum(int(np.prod(s)) for group in shapes for s in group))
    out, o = [], 0
    for group in shapes:
        arrays = []
        for s in group:
            n = int(np.prod(s))
            arrays.append(block[o:o + n].reshape(s))
            o += n
        out.append(CostDerivatives(*arrays))
    return block, out


class ProblemData:
    """Data of one :class:`~solvers.problem.ShootingProblem` (N knots). second_order: allocate
    the second-order buffers too; max_candidates: rollout buffers for 1 … max_candidates
    candidates (one set each: a solver may hold two candidate batches at once)."""

    #: the knots of dropped groups' data :meth:`_regroup` keeps for reuse, per knot of the horizon:
    #: a trot's groups meet every size once per gait cycle (~25 N knots of data at N = 16, ~43 N at
    #: N = 40, each ~25 KiB on HyQ), and a pool smaller than that cycle's is emptied before a size
    #: comes back; 0: none kept
    pool_knots: int = 48

    def __init__(self, problem, second_order: bool = True, max_candidates: int = 1):
        if int(max_candidates) != max_candidates or max_candidates < 1:
            raise ValueError(f"max_candidates must be a positive integer, got {max_candidates}")
        N, nx, ndx, nu = problem.horizon, problem.nx, problem.ndx, problem.nu
        self.problem = problem
        self.horizon, self.nx, self.ndx, self.nu = N, nx, ndx, nu
        #: the running (N knots) and terminal cost derivatives, views of one block (``cost_block``)
        self.cost_block, (self.running, self.terminal) = _cost_derivative_block((N, 1), ndx, nu)
        #: the dynamics derivatives of the N knots (the groups' first-order outputs are its rows)
        self.horizon_dynamics = DynamicsDerivatives(np.empty((N, nx)), np.empty((N, ndx, ndx)),
                                                    np.empty((N, ndx, nu)))
        self.rollouts = tuple(RolloutBuffers(np.empty((S, N + 1, nx)), np.empty((S, N, nu)), np.empty(S, np.bool_))
                              for S in range(1, int(max_candidates) + 1))
        self.second_order = bool(second_order)
        self.groups: tuple[tuple[KnotGroup, IntegratedData], ...] = ()
        self._factors: tuple[np.ndarray, np.ndarray] | None = None     # (C, T) of several groups, padded
        self._revision = None
        #: data of groups a re-phasing dropped, oldest first, by id(data): (integrated model, knot
        #: count, data); a gait's groups come back with the same few sizes every cycle, so a group of
        #: a model and size met before takes its data (buffers, prepared backend calls) instead of
        #: new data; ``_pooled_knots``: their knot count
        self._pool: dict = {}
        self._pooled_knots = 0
        #: per knot structure met (by id of its dynamics groups, which it holds): its groups' data and
        #: first-order outputs, ``(groups, ((data, (xnext, Fx, Fu)), ...))`` — a gait's horizon comes
        #: back to the structures of a cycle ago, which then take their data as they had it
        self._kept: dict = {}
        self._regroup()

    # ------------------------------------------------------------ structure
    def _regroup(self) -> None:
        """Data for the problem's current dynamics groups. A group keeps its data when its
        integrated model and knots did not change; otherwise it takes the data of a former group
        of the same integrated model and knot count, its first-order outputs pointed at the new
        rows (the buffers, their prepared backend calls and compiled-kernel scratch do not depend
        on which knots they serve: a gait's re-phasing moves its groups every update), and only
        then new data."""
        p = self.problem
        k = self.horizon_dynamics
        new = p.dynamics_groups
        kept = self._kept.get(id(new))
        if kept is not None and kept[0] is new:
            self._take_kept(kept[1])
            return
        data: list = [None] * len(new)
        # unchanged groups first (the same integrated model on the same knots, looked up by value:
        # a kept structure's groups are other objects than the last one's), then any of the same size
        unchanged: dict = {}
        for j, (g0, _) in enumerate(self.groups):
            unchanged.setdefault((id(g0.item), g0.knots.tobytes()), []).append(j)
        taken = set()
        for i, g in enumerate(new):
            js = unchanged.get((id(g.item), g.knots.tobytes()))
            if js:
                j = js.pop(0)
                data[i] = self.groups[j][1]
                taken.add(j)
        spare = [gd for j, gd in enumerate(self.groups) if j not in taken]
        for i, g in enumerate(new):
            if data[i] is not None:
                continue
            j = next((j for j, (g0, _) in enumerate(spare) if g0.item is g.item and g0.knots.size == g.knots.size),
                     None)
            d = spare.pop(j)[1] if j is not None else self._from_pool(g.item, g.knots.size)
            if d is None:
                rows = g.rows
                outputs = (k.xnext[rows], k.Fx[rows], k.Fu[rows]) if g.contiguous else None
                data[i] = g.item.create_data(g.knots.size, self.second_order, outputs)
                continue
            data[i] = d
            if g.contiguous:
                d.xnext, d.Fx, d.Fu = k.xnext[g.rows], k.Fx[g.rows], k.Fu[g.rows]
            elif np.may_share_memory(d.Fx, k.Fx):      # it wrote rows of the problem's arrays: its own now
                d.xnext, d.Fx, d.Fu = np.empty_like(d.xnext), np.empty_like(d.Fx), np.empty_like(d.Fu)
        for g0, d in spare:                 # former groups' data, for a later structure with their size
            self._to_pool(g0, d)
        if len(self._kept) >= self.MAX_KEPT_STRUCTURES:
            self._kept.clear()
        self._kept[id(new)] = (new, tuple([(d, (d.xnext, d.Fx, d.Fu)) for d in data]))
        self._set_groups(tuple(zip(new, data)))

    #: at most this many knot structures' data assignments kept (:attr:`_kept`; a trot's gait cycle
    #: at 10 ms knots meets ~100)
    MAX_KEPT_STRUCTURES = 256

    def _take_kept(self, kept: tuple) -> None:
        """The groups of a knot structure met before take the data they had then, their outputs
        pointed back at their rows; the current groups' other data goes to the pool."""
        new = self.problem.dynamics_groups
        now = set()
        for d, (xnext, Fx, Fu) in kept:
            d.xnext, d.Fx, d.Fu = xnext, Fx, Fu
            now.add(id(d))
        pool = self._pool
        for i in now & pool.keys():         # (a structure's data may have been pooled since)
            self._pooled_knots -= pool.pop(i)[1]
        for g0, d in self.groups:
            if id(d) not in now:
                self._to_pool(g0, d)
        self._set_groups(tuple(zip(new, [d for d, _ in kept])))

    def _set_groups(self, groups: tuple) -> None:
        """The current groups and their data (the pool trimmed to its size)."""
        pool, cap = self._pool, self.pool_knots * self.horizon
        while self._pooled_knots > cap:     # the oldest go first
            self._pooled_knots -= pool.pop(next(iter(pool)))[1]
        self.groups = groups
        self._revision = self.problem.revision
        if self.second_order:
            self._allocate_factors()

    def _to_pool(self, group: KnotGroup, d) -> None:
        self._pool[id(d)] = (group.item, group.knots.size, d)
        self._pooled_knots += group.knots.size

    def _from_pool(self, item, size: int):
        """A former group's data for integrated model ``item`` and ``size`` knots, taken out of the
        pool, or None."""
        i = next((i for i, (it, n, _) in self._pool.items() if it is item and n == size), None)
        if i is None:
            return None
        self._pooled_knots -= size
        return self._pool.pop(i)[2]

    def _allocate_factors(self) -> None:
        """The (N, R, ...) factors gathering several groups' (None for one group)."""
        if len(self.groups) == 1:
            self._factors = None
            return
        # factors of different row counts (e.g. Euler and RK4 groups): zero rows pad the shorter
        R = max(g.item.second_order_rows for g, _ in self.groups)
        if self._factors is not None and self._factors[0].shape[1] == R:
            for f in self._factors:         # the rows a group does not write must be zero
                f.fill(0.0)
        else:
            N, ndx, nz = self.horizon, self.ndx, self.ndx + self.nu
            self._factors = (np.zeros((N, R, ndx)), np.zeros((N, R, nz, nz)))

    def enable_second_order(self) -> None:
        """Allocate the second-order buffers (once; a no-op when they exist)."""
        if not self.second_order:
            self.second_order = True
            for g, d in self.groups:
                g.item.enable_second_order(d)
            done = {id(d) for _, d in self.groups}
            for item, _, d in self._pool.values():
                item.enable_second_order(d)
                done.add(id(d))
            for groups, kept in self._kept.values():    # data only a kept structure holds now
                for g, (d, _) in zip(groups, kept):
                    if id(d) not in done:
                        g.item.enable_second_order(d)
                        done.add(id(d))
            self._allocate_factors()

    @property
    def dynamics(self) -> DynamicsDerivatives:
        """The dynamics derivatives of the N knots: the group's data for a one-group problem."""
        return self.groups[0][1] if len(self.groups) == 1 else self.horizon_dynamics

    def follow_structure(self) -> None:
        """Regroup for the problem's current knot structure when it was re-phased since (what
        :meth:`calc_dynamics` does first)."""
        if self._revision != self.problem.revision:
            self._regroup()

    # ------------------------------------------------------------ evaluation
    def calc_dynamics(self, xs: np.ndarray, us: np.ndarray, second_order: bool) -> list:
        """Dynamics derivatives of the knots xs (N, nx), us (N, nu), one batched evaluation per
        group, into this data. Returns the contact solves made on the way, ``[(rows, integrated
        model, ContactDynamicsBuffers)]``, rows the group's knots (a slice, or their sorted index
        array for a non-contiguous group), the solve at those knots' own (x, u)."""
        self.follow_structure()
        if second_order and not self.second_order:
            raise ValueError("derivatives: second_order=True needs data with second-order buffers; use "
                             "problem.create_data(second_order=True) or data.enable_second_order()")
        solves = []
        k = self.horizon_dynamics
        for g, d in self.groups:
            rows = g.rows
            g.item.calc_diff(d, xs[rows], us[rows], second_order)
            if not g.contiguous:
                k.xnext[rows], k.Fx[rows], k.Fu[rows] = d.xnext, d.Fx, d.Fu
            solve = g.item.contact_solve(d)
            if solve is not None:
                solves.append((rows, g.item, solve))
        if len(self.groups) > 1:
            k.C = k.T = None
            if second_order:
                C, T = self._factors
                for g, d in self.groups:
                    r = d.T.shape[1]
                    C[g.rows, :r], T[g.rows, :r] = d.C, d.T
                k.C, k.T = C, T
        return solves

    def derivatives(self) -> ProblemDerivatives:
        """The :class:`ProblemDerivatives` view of the buffers."""
        return ProblemDerivatives(self.running, self.terminal, self.dynamics)

    def rollout(self, S: int) -> RolloutBuffers:
        """The buffers for a rollout of S candidates."""
        if not 1 <= S <= len(self.rollouts):
            raise ValueError(f"ProblemData.rollout: this data holds rollouts of 1 to {len(self.rollouts)} candidates, "
                             f"not {S}; create it with problem.create_data(max_candidates={S})")
        return self.rollouts[S - 1]

    def arrays(self) -> dict[str, np.ndarray]:
        """Every buffer by name (for tests that check the data is reused)."""
        out = {f"running.{k}": getattr(self.running, k) for k in ("l", "lx", "lu", "lxx", "lxu", "luu")}
        out.update({f"terminal.{k}": getattr(self.terminal, k) for k in ("l", "lx", "lxx")})
        k = self.horizon_dynamics
        out.update({"dynamics.xnext": k.xnext, "dynamics.Fx": k.Fx, "dynamics.Fu": k.Fu})
        for i, (g, d) in enumerate(self.groups):
            if not g.contiguous:
                out.update({f"dynamics[{i}].xnext": d.xnext, f"dynamics[{i}].Fx": d.Fx, f"dynamics[{i}].Fu": d.Fu})
            out.update({f"dynamics[{i}].{name}": a for name, a in d.arrays().items()})
        if self._factors is not None:
            out["dynamics.C"], out["dynamics.T"] = self._factors
        for S, b in enumerate(self.rollouts, start=1):
            out.update({f"rollout[{S}].X": b.X, f"rollout[{S}].U": b.U, f"rollout[{S}].ok": b.ok})
        return out
