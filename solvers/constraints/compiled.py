"""Compiled evaluation of the library's constraint terms: the values ``g`` of every knot (of one or
several candidate trajectories), or the values and Jacobians ``Gx``, ``Gu`` along one trajectory,
of all supported terms of all knot groups in **one** numba call, on a backend that offers its frame
kinematics compiled (:meth:`dynamics.Backend.compiled_kinematics`: the ``numba`` backend).

Supported terms (exactly these classes, or subclasses that keep their ``residual`` and
``jacobian``): :class:`~solvers.constraints.JointPositionBounds` and
:class:`~solvers.constraints.JointVelocityBounds` (coordinate rows, unit Jacobian rows),
:class:`~solvers.constraints.ControlBounds` (also the problem's control box as rows),
:class:`~solvers.constraints.FrameHalfSpace` (``n · p_frame`` and ``nᵀ J_v`` from the kernel
library's :func:`~dynamics.kernels.kinematics.frames_knot`, as the compiled frame costs take them),
and on a running knot's contact forces the linear rows ``A λ`` of
:class:`~solvers.constraints.FrictionCone` and :class:`~solvers.constraints.WrenchCone`, whose
Jacobians ``A Λx``, ``A Λu`` are chained from the contact solve's partials at fixed τ by
:func:`solvers.costs.compiled.force_jacobians` (the compiled contact-force costs' own). The forces
and partials are those the compiled costs read (:meth:`~solvers.costs.compiled.CompiledCosts._forces_at`,
:meth:`~solvers.costs.compiled.CompiledCosts._partials_at`, shared here): the dynamics stage's
contact solves, the forward pass's forces, else one batched contact solve per contact set. The
numpy terms are the reference; every other term (plain-Python custom constraints, subclasses that
change a term's math, contact terms of a knot that names two contact sets or actuations) is
evaluated by :class:`~solvers.problem_constraints.ProblemConstraints` in Python, term by term,
into its own rows.

Layout: one *entry* per (term, knot), sorted by knot: ``E[e] = (knot, kind, frame slot, offset
into IX, first row, rows)``; the int table IX holds per entry its index rows (joint bounds), or
``(offset of its normal in CF)`` (half-space), or ``(nc, offset of its actuation in CF, offset of
its A in CF)`` (force rows); the float constants CF hold per contact set and actuation B
(nv, nu) row-major, the stiffness K (nv,) and damping D (nv,) (the compiled costs' layout), per
force term A (rows, nc) row-major, per half-space its unit normal (3,). A layout depends on
the terms and their knots only (bounds live in ``ProblemConstraints``), so it is made once per knot
structure; a term's constants (its normal, index rows, cone rows A) are read then. Importing
this module imports no numba; the kernel is compiled (or loaded from numba's on-disk cache) on its
first use, i.e. only when a problem with constraints is solved on the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..costs.base import _plain
from ..costs.compiled import CompiledCosts, _ForceSource
from .contact import FrictionCone, WrenchCone
from .control import ControlBounds
from .frame import FrameHalfSpace
from .joints import JointPositionBounds, JointVelocityBounds

JOINT_POSITION, JOINT_VELOCITY, CONTROL, HALF_SPACE, FORCE_ROWS = 0, 1, 2, 3, 4
_MATH = ("residual", "jacobian")
#: (class, kernel kind) of the compiled terms
_KINDS = ((JointPositionBounds, JOINT_POSITION), (JointVelocityBounds, JOINT_VELOCITY), (ControlBounds, CONTROL),
          (FrameHalfSpace, HALF_SPACE), (FrictionCone, FORCE_ROWS), (WrenchCone, FORCE_ROWS))

frames_knot = None                       # the kernel library's, bound on the first compilation
frames_workspace = None
force_jacobians = None                   # the compiled costs', bound with them
frame_outputs = None


# ---------------------------------------------------------------- kernel source (jitted lazily)
def _constraint_kernel(margs, flink, ff, nq, nv, E, KS, FK, IX, CF, X, U, deriv, G, GX, GU, LAM, DL, koff):
    """Values ``G[s, t, rows]`` of the entries of trajectories X (S, N+1, nx), U (S, N, nu) and, with
    ``deriv`` (S = 1), their Jacobians into ``GX[t, rows]`` (N+1, m, ndx), ``GU[t, rows]`` (N+1, m, nu)
    (each entry's rows written whole; other rows untouched). E, KS (N+2,) entry offsets per knot, FK
    (N+1,) knots with half-space entries, IX, CF: module docstring. Force entries read ``LAM[s, t -
    koff]`` (≥ nc,) and, with ``deriv``, ``DL[:, t - koff]`` (3, ≥ nc, nv) = (∂λ/∂q, ∂λ/∂v, ∂λ/∂τ)
    at fixed τ."""
    S = X.shape[0]
    N = X.shape[1] - 1
    nu = U.shape[2]
    ndx = 2 * nv
    ws, wsi = frames_workspace(*margs, nv)
    oRf, opf, Jf = frame_outputs(flink.shape[0], nv)
    q = np.empty(nq)
    L = np.empty((max(LAM.shape[2], 1), ndx + nu))   # the force Jacobians (Λx, Λu) of the knot
    for s in range(S):
        for t in range(N + 1):
            if KS[t + 1] == KS[t]:
                continue
            x = X[s, t]
            if FK[t]:                              # the half-space frames (with Jacobians: deriv)
                q[:] = x[:nq]
                frames_knot(*margs, q, flink, ff, deriv, ws, wsi, oRf, opf, Jf)
            g = G[s, t]
            chained = False                        # the knot's force Jacobians L are made
            for e in range(KS[t], KS[t + 1]):
                kind = E[e, 1]
                o = E[e, 3]
                r = E[e, 4]
                n = E[e, 5]
                if deriv and kind != FORCE_ROWS:     # (force rows are assigned whole below)
                    for i in range(r, r + n):
                        for a in range(ndx):
                            GX[t, i, a] = 0.0
                        for a in range(nu):
                            GU[t, i, a] = 0.0
                if kind == JOINT_POSITION:         # q_i at IX[o + i]; its dof at IX[o + n + i]
                    for i in range(n):
                        g[r + i] = x[IX[o + i]]
                        if deriv:
                            GX[t, r + i, IX[o + n + i]] = 1.0
                elif kind == JOINT_VELOCITY:       # v_i, dof IX[o + i]
                    for i in range(n):
                        g[r + i] = x[nq + IX[o + i]]
                        if deriv:
                            GX[t, r + i, nv + IX[o + i]] = 1.0
                elif kind == CONTROL:
                    for i in range(n):
                        g[r + i] = U[s, t, i]
                        if deriv:
                            GU[t, r + i, i] = 1.0
                elif kind == HALF_SPACE:           # n · p_frame, nᵀ J_v (local_world_aligned)
                    f = E[e, 2]
                    a0 = IX[o]
                    n0, n1, n2 = CF[a0], CF[a0 + 1], CF[a0 + 2]
                    g[r] = n0 * opf[f, 0] + n1 * opf[f, 1] + n2 * opf[f, 2]
                    if deriv:
                        for a in range(nv):
                            GX[t, r, a] = n0 * Jf[f, 0, a] + n1 * Jf[f, 1, a] + n2 * Jf[f, 2, a]
                else:                              # FORCE_ROWS: A λ on the knot's forces λ
                    nc = IX[o]
                    lam = LAM[s, t - koff]
                    if deriv and not chained:
                        force_jacobians(nv, nu, nc, IX[o + 1], CF, DL, t - koff, L)
                        chained = True
                    ao = IX[o + 2]                 # A λ, A (n, nc) at CF[ao:]
                    for j in range(n):
                        a0 = ao + j * nc
                        v = 0.0
                        for i in range(nc):
                            v += CF[a0 + i] * lam[i]
                        g[r + j] = v
                        if deriv:
                            gx = GX[t, r + j]      # row views: unit-stride inner loops
                            gu = GU[t, r + j]
                            first = True
                            for i in range(nc):
                                aji = CF[a0 + i]
                                if aji == 0.0:
                                    continue
                                Li = L[i]
                                if first:
                                    for a in range(ndx):
                                        gx[a] = aji * Li[a]
                                    for a in range(nu):
                                        gu[a] = aji * Li[ndx + a]
                                    first = False
                                else:
                                    for a in range(ndx):
                                        gx[a] += aji * Li[a]
                                    for a in range(nu):
                                        gu[a] += aji * Li[ndx + a]
                            if first:              # a zero row of A
                                gx[:] = 0.0
                                gu[:] = 0.0


_compiled = None


def _kernel():
    """The compiled kernel (the kernel library's frame kinematics and the compiled costs' force
    chain called directly), compiled with the project's options and cache stamp."""
    global _compiled, frames_knot, frames_workspace, force_jacobians, frame_outputs
    if _compiled is not None:
        return _compiled
    from dynamics.kernels import kinematics
    from dynamics.kernels.jit import jit

    from ..costs import compiled as cost_kernel
    cost_kernel._kernel()                # binds its inlined helpers (compiles nothing yet)
    frames_knot, frames_workspace = kinematics.frames_knot, kinematics.frames_workspace
    force_jacobians, frame_outputs = cost_kernel.force_jacobians, cost_kernel.frame_outputs
    _compiled = jit(_constraint_kernel)
    return _compiled


# ---------------------------------------------------------------- Python side
def compiled_kind(term) -> int | None:
    """The kernel's kind for a constraint term, None when it stays on the Python path."""
    for cls, kind in _KINDS:
        if isinstance(term, cls) and _plain(term, cls, _MATH):
            return kind
    return None


@dataclass
class _ForceLayout:
    """What :meth:`CompiledCosts._forces_at` / :meth:`CompiledCosts._partials_at` read of a layout."""

    ncmax: int
    gives: dict = field(default_factory=dict)
    models_give: dict = field(default_factory=dict)


class CompiledConstraints:
    """The compiled constraint terms of a :class:`~solvers.problem_constraints.ProblemConstraints`
    (its groups: ``(terms, knots, row offsets)``), and which terms of each group stay in Python
    (:attr:`compiled`: per group the set of compiled term positions)."""

    # the contact-force readers of the compiled costs (one implementation): they read sources,
    # layout (ncmax, gives, models_give), problem, model and the buffers below
    _gives = CompiledCosts._gives
    _forces_at = CompiledCosts._forces_at
    _partials_at = CompiledCosts._partials_at

    def __init__(self, problem, kin, groups):
        self.problem, self.kin, self.model = problem, kin, problem.model
        m, N = problem.model, problem.horizon
        frames: list[str] = []
        ints: list[int] = []
        floats: list[np.ndarray] = []
        nfl = 0
        sources: list[_ForceSource] = []
        src_knots: dict = {}
        owner = np.full(max(N, 1), -1, np.int64)        # per running knot: the force source its terms read
        clash = False
        specs = []                                      # (group index, term index, kind, slot, IX offset)
        for gi, g in enumerate(groups):
            for ti, c in enumerate(g.terms):
                kind = compiled_kind(c)
                if kind is None:
                    continue
                slot, off = 0, len(ints)
                if kind == JOINT_POSITION:
                    ints += [*map(int, c.q_index), *map(int, c.v_index)]
                elif kind == JOINT_VELOCITY:
                    ints += [*map(int, c.v_index)]
                elif kind == HALF_SPACE:
                    if c.frame not in frames:
                        frames.append(c.frame)
                    slot = frames.index(c.frame)
                    ints.append(nfl)
                    floats.append(np.asarray(c.normal, float))
                    nfl += 3
                elif kind == FORCE_ROWS:
                    cf = c._cf
                    si, nfl = _ForceSource.index(sources, floats, nfl, cf, m.nv)
                    k = g.knots[g.knots < N]
                    clash |= bool(np.any((owner[k] >= 0) & (owner[k] != si)))
                    owner[k] = si
                    src_knots.setdefault(si, []).append(k)
                    ints += [cf.contacts.nc, sources[si].cf_offset, nfl]
                    floats.append(np.asarray(c.A, float).ravel())
                    nfl += c.A.size
                specs.append((gi, ti, kind, slot, off))
        if clash:      # a knot's force rows read one force vector: two contact sets stay in Python
            specs = [sp for sp in specs if sp[2] != FORCE_ROWS]
            sources = []
        for si, sr in enumerate(sources):
            sr.knots = np.unique(np.concatenate(src_knots[si]))
        self.sources = sources
        self.compiled = [set() for _ in groups]
        rows = []
        for gi, ti, kind, slot, off in specs:
            g = groups[gi]
            self.compiled[gi].add(ti)
            k = g.knots
            rows.append(np.column_stack([k, np.full((k.size, 5), (kind, slot, off, g.offsets[ti], g.terms[ti].nc))]))
        E = np.concatenate(rows).astype(np.int64) if rows else np.zeros((0, 6), np.int64)
        self.E = np.ascontiguousarray(E[np.argsort(E[:, 0], kind="stable")])
        self.KS = np.searchsorted(self.E[:, 0], np.arange(N + 2)).astype(np.int64)
        self.FK = np.zeros(N + 1, np.int64)
        self.FK[self.E[self.E[:, 1] == HALF_SPACE, 0]] = 1
        self.IX = np.array(ints or [0], np.int64)
        self.CF = np.concatenate(floats) if floats else np.zeros(1)
        self.flink, self.ff = kin.frame_table(frames)
        self.layout = _ForceLayout(max([sr.contacts.nc for sr in sources] or [1]))
        # the force buffers of CompiledCosts' readers, and the arrays of calls without force rows
        self._lam_buf: dict[int, np.ndarray] = {}
        self._dl_buf = None
        self._no_lam = np.zeros((1, 1, 1))
        self._no_dl = np.zeros((3, 1, 1, 1))
        self._no_gx = np.zeros((1, 1, problem.ndx))
        self._no_gu = np.zeros((1, 1, problem.nu))

    @property
    def empty(self) -> bool:
        return self.E.shape[0] == 0

    def _run(self, X, U, deriv, G, GX, GU, forces) -> None:
        lam, dl, koff = (self._no_lam, self._no_dl, 0) if forces is None else forces
        m = self.model
        _kernel()(self.kin.model_args, self.flink, self.ff, m.nq, m.nv, self.E, self.KS, self.FK, self.IX, self.CF,
                  X, U, deriv, G, GX, GU, lam, dl, koff)

    def values_into(self, X: np.ndarray, U: np.ndarray, G: np.ndarray, forces=None) -> None:
        """Write the compiled rows of ``g`` of S trajectories X (S, N+1, nx), U (S, N, nu) into G
        (S, N+1, m) (C-contiguous float64). forces: the
        :class:`~solvers.problem_costs.RolloutContactForces` of the rollout that made them."""
        f = self._forces_at(X, U, forces) if self.sources else None
        self._run(X, U, False, G, self._no_gx, self._no_gu, f)

    def evaluate_into(self, xs: np.ndarray, us: np.ndarray, g: np.ndarray, Gx: np.ndarray, Gu: np.ndarray,
                      solves=()) -> None:
        """The compiled rows of g (N+1, m), Gx (N+1, m, ndx), Gu (N+1, m, nu) (C-contiguous float64)
        along one trajectory; solves: the dynamics stage's contact solves at it."""
        f = self._partials_at(xs, us, solves) if self.sources else None
        self._run(xs[None], us[None], True, g[None], Gx, Gu, f)
