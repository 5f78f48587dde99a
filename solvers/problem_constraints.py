"""The constraint side of a shooting problem: the terms ``lower ≤ g_t(x_t, u_t) ≤ upper`` of every
knot (running knots 0..N-1 and the terminal knot N), stacked per knot into rows padded to the
largest knot (``m`` rows; padding rows are unbounded, with zero residual and Jacobian), and
evaluated with one batched call per term per group of knots that share the same terms — as the
cost groups of :mod:`solvers.knots` are.

Built by the constrained solver (:class:`solvers.CSQP`); ``box`` adds the problem's control bounds
``u_lower ≤ u ≤ u_upper`` as rows of every running knot. On a backend with compiled kinematics (the
``numba`` backend) the library terms of every group are evaluated in one compiled call
(:mod:`solvers.constraints.compiled`), the others (custom terms, ...) in Python into their own rows;
``compile_terms = False`` evaluates every term in Python (the reference).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .constraints import Constraint, ControlBounds
from .constraints.compiled import CompiledConstraints
from .costs.compiled import runs_kernel_library
from .problem_costs import RolloutContactForces, candidate_contact_solves, contact_solves_for


@dataclass
class ConstraintData:
    """Values and Jacobians of the stacked constraints at one trajectory: ``g`` (N+1, m), ``Gx``
    (N+1, m, ndx), ``Gu`` (N+1, m, nu) (zero on the terminal knot and on padding rows)."""

    g: np.ndarray
    Gx: np.ndarray
    Gu: np.ndarray


@dataclass(frozen=True)
class _Group:
    terms: tuple            # the Constraint terms the knots share, in order
    knots: np.ndarray       # (n,) knot indices (N = terminal)
    offsets: tuple          # first row of each term


@dataclass
class _Layout:
    """The row layout of one knot structure (:meth:`ProblemConstraints.build`'s tables), kept while
    its structure may come round again (a gait's phases)."""

    models: tuple           # the running models and the terminal model it was made for (kept: their ids key it)
    groups: list            # the _Groups of knots that share their terms
    m: int
    lower: np.ndarray       # (N+1, m) (these tables read-only: shared by every visit of the structure)
    upper: np.ndarray
    state_only: np.ndarray  # (N+1, m) rows whose residual does not depend on u
    row_term: np.ndarray    # (N+1, m) the name of each row's term (None: padding)
    equality: np.ndarray
    bounded: np.ndarray
    bound_arrays: tuple     # per term, (term, the lower and upper arrays its rows were read from), or None: a term
    #                         whose class computes its bounds (its structure is then never reused)
    cc: tuple | None = None  # (CompiledConstraints or None, backend, model) once compiled() has made it

    def current(self) -> bool:
        """Whether it may be reused: every term's bounds are still the arrays it read (a term's
        :meth:`~solvers.constraints.Constraint.set_bounds` replaces them)."""
        ba = self.bound_arrays
        if ba is None:
            return False
        for c, lo, hi in ba:
            if c.lower is not lo or c.upper is not hi:
                return False
        return True


class ProblemConstraints:
    """Constraint evaluation of ``problem`` (a :class:`~solvers.problem.ShootingProblem`) for a
    solver; its row layout follows the problem's re-phasing (:meth:`ShootingProblem.set_running_models`)."""

    #: evaluate the library terms compiled where the backend allows it (False: all in Python)
    compile_terms: bool = True
    #: at most this many kept row layouts (with their compiled evaluations) per problem, the least
    #: recently used dropped first: as many as :attr:`ProblemCosts.MAX_KEPT_COMPILED` keeps of
    #: the costs' (a gait cycle and its lead-in visit ~100 knot structures at one update per knot)
    MAX_KEPT_LAYOUTS = 160

    def __init__(self, problem, box: bool):
        self.problem = problem
        self.box = bool(box) and problem.has_bounds
        self._box_term = ControlBounds(problem.model, problem.u_lower, problem.u_upper) if self.box else None
        if self._box_term is not None:
            self._box_term.name = "control box (problem u_lower/u_upper)"
        self._layout: _Layout | None = None
        #: the layouts of recent knot structures, by the ids of their action models (frozen: a
        #: model's terms are its own): a re-phased horizon returns to the structures of a gait
        #: cycle ago, whose tables and compiled evaluation are then reused instead of made anew
        self._kept: dict = {}
        self.build()

    # ------------------------------------------------------------ structure
    def _knot_terms(self, t: int) -> tuple:
        p = self.problem
        if t < p.horizon:
            terms = p.running_models[t].constraints
            return terms + ((self._box_term,) if self._box_term is not None else ())
        terms = () if p.terminal_model is None else p.terminal_model.constraints
        for c in terms:
            if c.uses_control:
                raise ValueError(f"constraint '{c.name}' on the terminal knot {t} depends on the control, which does "
                                 f"not exist there; remove it from the terminal model")
        return terms

    def build(self) -> None:
        """Take the row layout of the problem's current knots: unchanged since the last call, one
        kept from an earlier visit of the same knot structure, or made anew."""
        p = self.problem
        running, terminal = p.running_models, p.terminal_model
        lay = self._layout
        if lay is not None and lay.models[0] is running and lay.models[1] is terminal:
            return
        key = (tuple(map(id, running)), id(terminal))
        lay = self._kept.pop(key, None)
        if lay is None or not lay.current():
            lay = self._make_layout(running, terminal)
            if len(self._kept) >= self.MAX_KEPT_LAYOUTS:      # the least recently used goes
                del self._kept[next(iter(self._kept))]
        self._kept[key] = lay                                 # now the most recently used
        lay.models = (running, terminal)
        self._layout = lay
        self.groups, self.m = lay.groups, lay.m
        self.lower, self.upper, self.state_only = lay.lower, lay.upper, lay.state_only
        self.row_term, self.equality, self.bounded = lay.row_term, lay.equality, lay.bounded

    def _make_layout(self, running: tuple, terminal) -> _Layout:
        """The row layout of knots with these action models: the groups of knots that share their
        terms, the rows' bounds and kinds."""
        N = self.problem.horizon
        groups: dict = {}
        for t in range(N + 1):
            terms = self._knot_terms(t)
            groups.setdefault(tuple(map(id, terms)), (terms, []))[1].append(t)
        made = []
        m = 0
        for terms, knots in groups.values():
            offsets, r = [], 0
            for c in terms:
                offsets.append(r)
                r += c.nc
            m = max(m, r)
            if terms:
                made.append(_Group(terms, np.asarray(knots, dtype=np.intp), tuple(offsets)))
        lower = np.full((N + 1, m), -np.inf)
        upper = np.full((N + 1, m), np.inf)
        state_only = np.ones((N + 1, m), bool)
        row_term = np.full((N + 1, m), None, dtype=object)
        bound_arrays: dict | None = {}
        for g in made:
            for c, o in zip(g.terms, g.offsets):
                lo, hi = c.bounds(g.knots)
                lower[g.knots, o:o + c.nc] = lo
                upper[g.knots, o:o + c.nc] = hi
                state_only[g.knots, o:o + c.nc] = not c.uses_control
                row_term[g.knots, o:o + c.nc] = c.name
                if bound_arrays is not None:
                    if type(c).bounds is Constraint.bounds:
                        bound_arrays[id(c)] = (c, c.lower, c.upper)
                    else:
                        bound_arrays = None
        equality = lower == upper
        bounded = np.isfinite(lower) | np.isfinite(upper)
        for a in (lower, upper, state_only, row_term, equality, bounded):
            a.setflags(write=False)
        return _Layout((running, terminal), made, m, lower, upper, state_only, row_term, equality, bounded,
                       None if bound_arrays is None else tuple(bound_arrays.values()))

    @property
    def empty(self) -> bool:
        return self.m == 0

    def create_data(self) -> ConstraintData:
        p = self.problem
        N, m = p.horizon, self.m
        return ConstraintData(np.zeros((N + 1, m)), np.zeros((N + 1, m, p.ndx)), np.zeros((N + 1, m, p.nu)))

    def describe_row(self, t: int, r: int) -> str:
        """``"constraint 'name' (row i of the term) at knot t"`` for row r of knot t."""
        for g in self.groups:
            if t in g.knots:
                for c, o in zip(g.terms, g.offsets):
                    if o <= r < o + c.nc:
                        return f"constraint '{c.name}' (row {r - o}) at knot {t}"
        return f"row {r} at knot {t}"

    # ------------------------------------------------------------ evaluation
    def compiled(self) -> CompiledConstraints | None:
        """The compiled evaluation of the current layout's library terms (made on the first call
        for a layout, kept with it), or None: turned off, no compiled kinematics on the backend, no such term."""
        if not self.compile_terms or not self.groups:
            return None
        p = self.problem
        lay = self._layout
        cc = lay.cc
        if cc is not None and cc[1] is p.backend and cc[2] is p.model:
            return cc[0]
        kin = p.backend.compiled_kinematics(p.model)
        made = CompiledConstraints(p, kin, self.groups) if runs_kernel_library(kin) else None
        lay.cc = (None if made is None or made.empty else made, p.backend, p.model)
        return lay.cc[0]

    def _python_terms(self, cc: CompiledConstraints | None):
        """Per group, its ``(term, first row)`` pairs evaluated in Python (all without ``cc``)."""
        for gi, g in enumerate(self.groups):
            done = () if cc is None else cc.compiled[gi]
            yield [(c, o) for i, (c, o) in enumerate(zip(g.terms, g.offsets)) if i not in done]

    def _ctx(self, g: _Group, x, u, knots, **kw):
        return self.problem.costs.ctx(x, u, knots, **kw)

    def _knot_sets(self):
        """``(group, its Python terms, knots, terminal)`` for every group with terms evaluated in
        Python (:meth:`compiled`: the others): its running knots, then its terminal knot
        (evaluated without a control), each only when it has some — or all its knots at once,
        without a control, when it has the terminal knot and none of its terms uses the control
        (its terms are then evaluated without one anyway: one kinematics evaluation, not two)."""
        N = self.problem.horizon
        cc = self.compiled()
        for g, terms in zip(self.groups, self._python_terms(cc)):
            if not terms:
                continue
            term = g.knots[-1] == N
            if term and not any(c.uses_control for c, _ in terms):
                yield g, terms, g.knots, True
                continue
            run = g.knots[:-1] if term else g.knots
            if run.size:
                yield g, terms, run, False
            if term:
                yield g, terms, g.knots[-1:], True

    def values(self, xs: np.ndarray, us: np.ndarray, forces: RolloutContactForces | None = None) -> np.ndarray:
        """``g`` (..., N+1, m) for trajectories xs (..., N+1, nx), us (..., N, nu) (batched over the
        leading dims: the line search's candidates). forces: the contact forces of these S =
        prod(...) trajectories' contact knots (contact-force terms read them instead of solving the
        contact dynamics again; :meth:`ProblemCosts.total` takes the same)."""
        p = self.problem
        N, nx, nu = p.horizon, p.nx, p.nu
        lead = xs.shape[:-2]
        S = int(np.prod(lead, dtype=int))
        X, U = xs.reshape(S, N + 1, nx), us.reshape(S, N, nu)
        out = np.zeros((S, N + 1, self.m))
        cc = self.compiled()
        if cc is not None:
            cc.values_into(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(U, dtype=np.float64), out,
                           forces)
        for g, terms, knots, terminal in self._knot_sets():
            x = X[:, knots].reshape(-1, nx)
            u = None if terminal else U[:, knots].reshape(-1, nu)
            solves = None if terminal or forces is None else candidate_contact_solves(
                forces, knots, S, bool(knots[-1] - knots[0] + 1 == knots.size))
            ctx = self._ctx(g, x, u, np.tile(knots, S), contact_solves=solves)
            for c, o in terms:
                out[:, knots, o:o + c.nc] = c.residual(ctx).reshape(S, knots.size, c.nc)
        return out.reshape(lead + (N + 1, self.m))

    def evaluate(self, xs: np.ndarray, us: np.ndarray, data: ConstraintData, solves=()) -> ConstraintData:
        """Values and Jacobians along one trajectory xs (N+1, nx), us (N, nu), into ``data``. solves:
        the contact solves of the dynamics stage at the same trajectory (shared with contact-force
        terms, as for the costs: :meth:`solvers.problem_costs.ProblemCosts.derivatives_into`)."""
        cc = self.compiled()
        if cc is not None:
            arrays = (data.g, data.Gx, data.Gu)
            out = [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]     # the arrays themselves, usually
            cc.evaluate_into(np.ascontiguousarray(xs, dtype=np.float64), np.ascontiguousarray(us, dtype=np.float64),
                             *out, solves)
            for a, b in zip(arrays, out):
                if a is not b:
                    a[...] = b
        for g, terms, knots, terminal in self._knot_sets():
            contiguous = knots[-1] - knots[0] + 1 == knots.size
            rows = slice(int(knots[0]), int(knots[-1]) + 1) if contiguous else knots
            kw: dict = {"checked": True}
            if contiguous:
                kw["knot_range"] = (rows.start, rows.stop)
                if solves and not terminal:
                    kw["contact_solves"] = contact_solves_for(rows, solves)
            ctx = self._ctx(g, xs[rows], None if terminal else us[rows], knots, **kw)
            for c, o in terms:
                s = slice(o, o + c.nc)
                Gx, Gu = c.jacobian(ctx)          # first: contact terms memoise the forces of the same solve
                data.g[rows, s] = c.residual(ctx)
                data.Gx[rows, s] = Gx
                data.Gu[rows, s] = 0.0 if Gu is None else Gu
        return data

    def violation(self, g: np.ndarray) -> np.ndarray:
        """Per-row violation ``max(lower - g, g - upper, 0)`` (same shape as g)."""
        with np.errstate(invalid="ignore"):
            return np.maximum(np.maximum(self.lower - g, g - self.upper), 0.0)


