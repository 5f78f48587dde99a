"""The cost side of a shooting problem: values of whole trajectories (batched over candidates, for
the line search) and derivatives along one trajectory, written into a problem's data.

    J = Σ_{t<N} s_t · l_t(x_t, u_t) + l_N(x_N),    s_t = dt_t (or 1 on an impulse knot)

Kinematics are computed once per evaluation and shared by every cost group and the terminal cost;
the library's cost terms run as one compiled call when the backend offers compiled kinematics
(:mod:`solvers.costs.compiled`), the rest on the Python path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamics.inputs import sum_is_finite

from .costs import CostContext, CostDerivatives
from .costs.base import term_changes
from .costs.compiled import CompiledCosts, runs_kernel_library
from .knots import KnotGroup


def contact_solves_for(rows: slice, solves) -> dict | None:
    """``{id(ContactSet): (dynamics, lam, dlam)}`` for the knots ``rows`` from the contact solves
    ``[(rows, integrated model, ContactDynamicsBuffers)]`` of dynamics groups that cover all of them
    (a group's rows a slice or a sorted index array of its knots)."""
    found = None
    for r, dyn, buf in solves:
        if isinstance(r, slice):
            if not (r.start <= rows.start and rows.stop <= r.stop):
                continue
            a, b = rows.start - r.start, rows.stop - r.start
        else:
            # sorted distinct knots: they hold rows.start..rows.stop-1 iff its first and last
            # land at positions a and a + n - 1 (then lam[a:b] is a view, as for a slice)
            a = int(np.searchsorted(r, rows.start))
            b = a + rows.stop - rows.start
            if b > r.size or r[a] != rows.start or r[b - 1] != rows.stop - 1:
                continue
        found = found or {}
        found[id(dyn.contacts)] = (dyn, buf.lam[a:b], buf.dl[:, a:b])
    return found


@dataclass(frozen=True)
class RolloutContactForces:
    """The contact forces a forward pass computed at its candidates' contact knots: ``lam``
    (S, N, ≥ nc), candidate s and knot t in row (s, t), its first nc entries the forces of that
    knot's contact set (NaN where the contact Jacobian lost rank); ``models`` (N,): per knot the
    integrated model whose contact dynamics gave them (its ``contacts``, ``actuation``), None on
    knots without (free, impulse)."""

    lam: np.ndarray
    models: tuple


def candidate_contact_solves(forces: RolloutContactForces, knots: np.ndarray, S: int, contiguous: bool) -> dict | None:
    """:attr:`CostContext.contact_solves` (forces only, no Jacobians) for a cost group's knots in S
    stacked candidates (candidate-major, as :meth:`ProblemCosts.total_batched` stacks them), when
    one contact set's dynamics covers every knot; else None."""
    models = forces.models
    first = models[knots[0]]
    if first is None:
        return None
    for t in knots:
        m = models[t]
        if m is not first and (m is None or m.contacts is not first.contacts
                               or not m.actuation.same_as(first.actuation)):
            return None
    nc = first.contacts.nc
    if contiguous and S == 1:
        lam = forces.lam[0, knots[0]:knots[-1] + 1, :nc]
    else:
        lam = forces.lam[:S, knots, :nc].reshape(-1, nc)
    return {id(first.contacts): (first, lam, None)}


def accumulate_scaled(cost, ctx: CostContext, scale, dst: CostDerivatives) -> None:
    """``dst = scale · cost.derivatives(ctx)`` in place (the terms accumulated with their weights,
    then scaled); scale a float or per-knot (n,)."""
    dst.fill(0.0)
    cost._accumulate(ctx, dst, 1.0)
    if isinstance(scale, float):
        if scale != 1.0:
            dst.scale(scale)
    else:
        dst.scale_rows(scale)


class ProblemCosts:
    """Cost evaluation of ``problem`` (a :class:`~solvers.problem.ShootingProblem`, which owns this)."""

    #: at most this many kept CompiledCosts per problem, the least recently used dropped first (a
    #: gait's first cycle and its lead-in at one update per knot: ~100 structures for the trot at
    #: 10 ms knots, which a smaller cache visited in the same order would drop one by one just before
    #: their next use; each holds its float rows, ~0.1 MB at N = 40)
    MAX_KEPT_COMPILED = 160

    def __init__(self, problem):
        self.problem = problem
        self._cc = None                 # CompiledCosts, or (signature, None) when unavailable
        #: the CompiledCosts of recent knot structures, by what their layout depends on (terms and
        #: each group's knots): a re-phased horizon returns to the structures of a gait cycle ago,
        #: and their packed rows, putters and buffers are then reused instead of made anew
        self._cc_kept: dict = {}
        self._index: dict = {}          # knot-index arrays of the current knot structure
        #: what :meth:`compiled` last answered and what that answer depends on beyond the terms'
        #: float data: (revision, knot structure, terminal cost, term-change count, answer)
        self._last: tuple | None = None
        #: the same per knot structure met, by its id (the entry holds it): (structure, terminal
        #: cost, term-change count, answer, its key in ``_cc_kept`` or None)
        self._by_structure: dict = {}
        self._key = None                # the ``_cc_kept`` key of :meth:`_compiled`'s answer
        self._scales: dict = {}         # cost scales of the current structure's groups, by id

    def restructured(self) -> None:
        """Forget what depended on the previous knot structure (after re-phasing)."""
        self._index = {}
        self._scales = {}

    # ------------------------------------------------------------ helpers
    def ctx(self, x, u, knots, **kw) -> CostContext:
        p = self.problem
        return CostContext(p.model, p.backend, p.state, x, u, knots, **kw)

    def knots(self, key, make) -> np.ndarray:
        """Knot-index arrays of the current structure, made once per key (group index, candidates)."""
        arr = self._index.get(key)
        if arr is None:
            if len(self._index) > 256:
                self._index.clear()
            arr = self._index[key] = make()
            arr.setflags(write=False)
        return arr

    def scale_of(self, g: KnotGroup) -> float | np.ndarray:
        """The cost scale of a group's knots: one float when they share it, else (n,) (made once
        per knot structure: the scales are read-only and replaced with the structure)."""
        s = self._scales.get(id(g))
        if s is None:
            d = self.problem.cost_scales[g.rows]
            s = self._scales[id(g)] = (g, float(d[0]) if np.all(d == d[0]) else d)
        return s[1]

    def _rows(self, gi: int, g: KnotGroup, S: int, stride: int):
        """Rows of group g's knots in S stacked trajectories of ``stride`` knots: a slice when
        S == 1 and the knots are contiguous, else an index array."""
        if S == 1:
            return g.rows
        return self.knots(("rows", gi, S, stride), lambda: (np.arange(S)[:, None] * stride + g.knots).ravel())

    def compiled(self) -> CompiledCosts | None:
        """The problem's :class:`~solvers.costs.compiled.CompiledCosts` (rebuilt when the knot
        structure or a cost's terms change), or None: disabled, no compiled kinematics on this
        backend, or no supported term."""
        p = self.problem
        if not p.compile_costs:
            return None
        # the signature (every group cost's term objects) is rebuilt only when the knot structure,
        # the terminal cost or some CostSum's terms changed since the last call: several calls per
        # solve (the trot's MPC update: three) share one
        last = self._last
        changes = term_changes()
        structure = p.structure
        if (last is not None and last[0] == p.revision and last[1] is structure and last[2] is p.terminal_cost
                and last[3] == changes):
            return last[4]
        # a knot structure met before (a re-phased gait's horizon), with the same terms: its answer,
        # while its CompiledCosts is still kept (now the most recently used)
        seen = self._by_structure.get(id(structure))
        cc = None
        hit = seen is not None and seen[0] is structure and seen[1] is p.terminal_cost and seen[2] == changes
        if hit and seen[4] is not None:
            kept = self._cc_kept.pop(seen[4], None)
            hit = kept is not None and kept[2] is seen[3]
            if kept is not None:
                self._cc_kept[seen[4]] = kept
        if hit:
            cc = seen[3]
            if cc is not None:
                self._cc = cc
        else:
            self._key = None
            cc = self._compiled()
            if len(self._by_structure) >= self.MAX_KEPT_COMPILED:
                self._by_structure.clear()
            self._by_structure[id(structure)] = (structure, p.terminal_cost, changes, cc, self._key)
        self._last = (p.revision, structure, p.terminal_cost, changes, cc)
        return cc

    def _compiled(self) -> CompiledCosts | None:
        """:meth:`compiled` from the problem's signature."""
        p = self.problem
        sig = CompiledCosts.signature_of(p)
        cc = self._cc
        if isinstance(cc, tuple):
            if cc[0] == sig:
                return None
        elif cc is not None and cc.signature == sig:
            key = CompiledCosts.layout_key(p, sig)
            self._key = key if key in self._cc_kept else None
            return cc
        key = CompiledCosts.layout_key(p, sig)
        kept = self._cc_kept.pop(key, None)
        if kept is not None and kept[0] is p.backend and kept[1] is p.model:
            self._cc_kept[key] = kept       # now the most recently used
            self._key = key
            cc = kept[2]
            # the same terms on the same knots: its rows repack where a reference, weight or
            # scale object was replaced since it was last used (CompiledCosts._pack)
            cc.signature = sig
            self._cc = cc
            return cc
        kin = p.backend.compiled_kinematics(p.model)
        cc = CompiledCosts(p, kin) if runs_kernel_library(kin) else None
        if cc is not None and not cc.empty:
            if len(self._cc_kept) >= self.MAX_KEPT_COMPILED:    # the least recently used goes
                del self._cc_kept[next(iter(self._cc_kept))]
            self._cc_kept[key] = (p.backend, p.model, cc)
            self._key = key
        if cc is None or cc.empty:
            self._cc = (sig, None)
            return None
        self._cc = cc
        return cc

    # ------------------------------------------------------------ values
    def running(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """``s_t · l_t(x_t, u_t)`` for xs (..., N+1 or N, nx), us (..., N, nu): (..., N)."""
        p = self.problem
        N, nx, nu = p.horizon, p.nx, p.nu
        lead = us.shape[:-2]
        S = int(np.prod(lead, dtype=int))
        X = xs[..., :N, :].reshape(S, N, nx)
        U = us.reshape(S, N, nu)
        out = np.empty((S, N))
        for g in p.cost_groups:
            x = X[:, g.rows].reshape(-1, nx)
            u = U[:, g.rows].reshape(-1, nu)
            val = g.item.value(self.ctx(x, u, np.tile(g.knots, S))).reshape(S, -1)
            out[:, g.rows] = p.cost_scales[g.rows] * val
        return out.reshape(lead + (N,))

    def terminal(self, xN: np.ndarray) -> np.ndarray:
        """``l_N(x_N)`` for xN (..., nx): (...)."""
        p = self.problem
        lead = xN.shape[:-1]
        if p.terminal_cost is None:
            return np.zeros(lead)
        x = xN.reshape(-1, p.nx)
        return p.terminal_cost.value(self.ctx(x, None, np.full(x.shape[0], p.horizon))).reshape(lead)

    def total(self, xs: np.ndarray, us: np.ndarray, forces: RolloutContactForces | None = None) -> np.ndarray:
        """Total cost J (...) of trajectories xs (..., N+1, nx), us (..., N, nu). forces: the contact
        forces of the rollout that made S = prod(...) candidates xs, us (contact-force and cone
        terms read them instead of solving the contact dynamics again)."""
        fast = self.total_batched(xs, us, forces)
        if fast is not None:
            return fast
        return self.running(xs, us).sum(axis=-1) + self.terminal(xs[..., -1, :])

    def total_batched(self, xs: np.ndarray, us: np.ndarray,
                      forces: RolloutContactForces | None = None) -> np.ndarray | None:
        """:meth:`total` for the usual case — xs (..., N+1, nx) finite, us (..., N, nu) — with the
        kinematics of all S·(N+1) states computed once and shared by every cost group and the
        terminal cost. None otherwise (the general path then evaluates, or raises)."""
        p = self.problem
        N, nx, nu = p.horizon, p.nx, p.nu
        lead = xs.shape[:-2]
        if xs.shape[-2:] != (N + 1, nx) or us.shape != lead + (N, nu):
            return None
        S = 1
        for n in lead:
            S *= n
        X = xs.reshape(S * (N + 1), nx)
        if not sum_is_finite(X):
            return None
        cc = self.compiled()
        if cc is not None and cc.covers_all:      # one compiled call, nothing on the Python path
            return cc.values(np.ascontiguousarray(xs.reshape(S, N + 1, nx)),
                             np.ascontiguousarray(us.reshape(S, N, nu)), forces).reshape(lead)
        U = us.reshape(S * N, nu)
        full = self.ctx(X, None, self.knots(("all", S), lambda: np.tile(np.arange(N + 1), S)), checked=True)
        J = np.zeros(S) if cc is None else cc.values(np.ascontiguousarray(X.reshape(S, N + 1, nx)),
                                                     np.ascontiguousarray(U.reshape(S, N, nu)), forces)
        for gi, g in enumerate(p.cost_groups):
            item = g.item if cc is None else cc.python_part(gi, g.item)
            if item is None:
                continue
            x_rows, u_rows = self._rows(gi, g, S, N + 1), self._rows(gi, g, S, N)
            contiguous = S == 1 and g.contiguous
            ctx = self.ctx(X[x_rows], U[u_rows], self.knots(("knots", gi, S), lambda: np.tile(g.knots, S)),
                           checked=True, knot_range=(g.rows.start, g.rows.stop) if contiguous else None,
                           parent=full, rows=x_rows, contact_solves=None if forces is None else
                           candidate_contact_solves(forces, g.knots, S, g.contiguous))
            dt = self.scale_of(g)
            J += (dt * item.value(ctx).reshape(S, -1) if isinstance(dt, float)
                  else item.value(ctx).reshape(S, -1) * dt).sum(axis=-1)
        terminal = p.terminal_cost if cc is None or p.terminal_cost is None else cc.python_part(-1, p.terminal_cost)
        if terminal is not None:
            rows = slice(N, N + 1) if S == 1 else self.knots(("term_rows", S), lambda: np.arange(S) * (N + 1) + N)
            term = self.ctx(X[rows], None, self.knots(("term", S), lambda: np.full(S, N)), checked=True,
                            knot_range=(N, N + 1) if S == 1 else None, parent=full, rows=rows)
            J += terminal.value(term)
        return J.reshape(lead)

    # ------------------------------------------------------------ derivatives
    def derivatives_into(self, xs: np.ndarray, us: np.ndarray, run: CostDerivatives, term: CostDerivatives,
                         solves=()) -> None:
        """Running (N knots, each scaled by s_t) and terminal (1 knot) cost derivatives along a
        checked trajectory xs (N+1, nx), us (N, nu), written into ``run`` and ``term``. solves: the
        contact solves of the dynamics stage at the same (xs, us), ``[(rows, integrated model,
        ContactDynamicsBuffers)]``, handed to the cost contexts of the knots they cover
        (:meth:`CostContext.contact_solve`)."""
        p = self.problem
        N = p.horizon
        cc = self.compiled()
        if cc is not None and cc.covers_all:      # one compiled call, nothing on the Python path
            run.fill(0.0)
            term.fill(0.0)
            cc.add_derivatives(np.ascontiguousarray(xs), np.ascontiguousarray(us), run, term, solves)
            return
        full = self.ctx(xs, None, self.knots("all", lambda: np.arange(N + 1)), checked=True, knot_range=(0, N + 1))
        for gi, g in enumerate(p.cost_groups):
            rows = g.rows
            item = g.item if cc is None else cc.python_part(gi, g.item)
            dst = run.rows(rows) if g.contiguous else CostDerivatives.zeros(g.knots.size, p.ndx, p.nu)
            if item is None:
                dst.fill(0.0)
            else:
                ctx = self.ctx(xs[rows], us[rows], g.knots, checked=True,
                               knot_range=(rows.start, rows.stop) if g.contiguous else None, parent=full, rows=rows,
                               contact_solves=contact_solves_for(rows, solves) if solves and g.contiguous else None)
                accumulate_scaled(item, ctx, self.scale_of(g), dst)
            if not g.contiguous:
                run.set_rows(rows, dst)
        terminal = p.terminal_cost if cc is None or p.terminal_cost is None else cc.python_part(-1, p.terminal_cost)
        if terminal is None:
            term.fill(0.0)
        else:
            ctx = self.ctx(xs[N:N + 1], None, self.knots("term", lambda: np.array([N])), checked=True,
                           knot_range=(N, N + 1), parent=full, rows=slice(N, N + 1))
            accumulate_scaled(terminal, ctx, 1.0, term)
        if cc is not None:
            # the compiled terms, already scaled by their weight and dt, added on top
            cc.add_derivatives(np.ascontiguousarray(xs), np.ascontiguousarray(us), run, term, solves)
