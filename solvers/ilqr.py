"""Iterative LQR: Gauss–Newton differential dynamic programming.

References: Li & Todorov 2004 ("Iterative linear quadratic regulator design for nonlinear
biological movement systems"); Tassa, Erez & Todorov 2012 (the backward pass with regularised
``Q_uu``, eq. 5–11; line search with expected improvement, Sec. II-F); Tassa, Mansard & Todorov
2014 (control limits through a box QP per knot, Algorithm 2).

One iteration at the current trajectory (xs, us):

1. derivatives: cost derivatives and the dynamics Jacobians ``Fx, Fu`` of all N knots, from one
   batched backend call (:meth:`ShootingProblem.derivatives`);
2. backward pass (:mod:`solvers.backward_pass`): the Riccati recursion from t = N-1 to 0 with
   ``Q_uu + μI`` and a box QP per knot, giving ``k``, ``K`` (gains of clamped controls zero);
   DDP adds the dynamics curvature ``V'_x · F2`` (:mod:`solvers.ddp`); μ is raised until it
   succeeds (:mod:`solvers.regularization`);
3. forward pass (:mod:`solvers.forward_pass`) and line search (:mod:`solvers.line_search`):
   nonlinear rollouts ``u_t = us_t + α k_t + K_t (x̂_t ⊖ xs_t)`` (clipped to the bounds) for
   step sizes α = 1, ½, …; accept the first with actual reduction ≥ armijo × expected reduction
   ``-(α Σ kᵀQ_u + ½ α² Σ kᵀQ_uu k)``; lower μ after a step, raise it after a failed search.

Stopping (:mod:`solvers.stopping`): the ∞-norm of the projected gradient ``∂J/∂us`` below ``tol``.

This class is the loop that composes those pieces; DDP (second-order curvature) and FDDP (gaps,
its own acceptance test) change only what their papers change.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from dynamics.contact import RankDeficientContactError
from dynamics.inputs import sum_is_finite

from .backward_pass import BackwardPass, non_finite_derivatives
from .costs.base import data_changes as cost_data_changes
from .costs.base import term_changes as cost_term_changes
from .forward_pass import ForwardPass
from .line_search import LINE_SEARCHES, Candidates, LineSearchResult, default_alphas, line_search, warm_start_step
from .prepared_iteration import PreparedIteration
from .problem import ProblemDerivatives, ShootingProblem
from .regularization import Regularization
from .result import TIMING_KEYS, SolverResult
from .stopping import projected_gradient_norm
from .warmup import Progress, WarmupResult, warm_up


class _StageTimer:
    """Context manager adding a block's wall time to ``timings[key]`` (a plain class: a
    ``contextlib.contextmanager`` generator costs a few µs per use, five uses per iteration)."""

    __slots__ = ("timings", "key", "t0")

    def __init__(self, timings: dict, key: str):
        self.timings, self.key = timings, key

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc) -> bool:
        self.timings[self.key] += time.perf_counter() - self.t0
        return False


def refuse_constraints(solver: str, problem: ShootingProblem) -> None:
    """ValueError when a knot of ``problem`` carries hard constraints (a solver without them would
    silently ignore them)."""
    knots = sum(1 for am in problem.running_models if am.constraints)
    term = problem.terminal_model is not None and bool(problem.terminal_model.constraints)
    if knots or term:
        raise ValueError(f"{solver} does not handle hard constraints, but the problem has constraints on {knots} "
                         f"of its {problem.horizon} running knots and {'the' if term else 'not the'} terminal knot; "
                         f"solve it with CSQP or ALDDP (--solver csqp|alddp / solvers.CSQP, solvers.ALDDP), or build "
                         f"the problem without constraints")


_NON_FINITE_DYNAMICS = ("the dynamics of the current iterate are non-finite (a diverged warm start); give a better "
                        "xs_init/us_init")


class SolverFailure(RuntimeError):
    """Raised internally when a solve cannot continue; reported in ``SolverResult.reason``."""


def initial_controls(p: ShootingProblem, us_init, box: bool, clip_default: bool = True,
                     out: np.ndarray | None = None) -> np.ndarray:
    """The controls (N, nu) a solve starts from: ``us_init`` checked (finite, (N, nu)) or the
    problem's default controls at every knot (clipped to the bounds when ``clip_default``); clipped
    to the bounds when ``box``. out: an (N, nu) float64 array (a solver's own iterate) to write a
    given ``us_init`` into instead of a new array (it is then returned)."""
    if us_init is None:
        u = p.default_controls()
        us = np.tile(p.clip_controls(u) if clip_default else u, (p.horizon, 1))
    else:
        us = np.asarray(us_init, dtype=float) if out is not None else np.array(us_init, dtype=float)
        # (out, when given, has the shape us must have: compared first, without the problem's properties)
        if (us.shape != out.shape if out is not None else us.shape != (p.horizon, p.nu)) or not sum_is_finite(us):
            raise ValueError(f"us_init must be a finite ({p.horizon}, {p.nu}) array (horizon, nu), "
                             f"got shape {us.shape}")
        if out is not None:
            if box:     # p.clip_controls's operations, in place
                np.minimum(np.maximum(us, p.u_lower, out=out), p.u_upper, out=out)
            else:
                np.copyto(out, us)
            return out
    return p.clip_controls(us) if box else us


def initial_states(p: ShootingProblem, xs_init, shape: tuple | None = None) -> np.ndarray:
    """``xs_init`` checked as a (N+1, nx) state trajectory of ``p`` (not copied: the solver copies it).
    shape: ``(N+1, nx)`` when the caller has it at hand (its own state buffer's shape)."""
    if (shape is not None and type(xs_init) is np.ndarray and xs_init.dtype == np.float64
            and xs_init.shape == shape and sum_is_finite(xs_init)):
        return xs_init          # a float64 array of the right shape, finite: what the checks below pass
    xs = p.state.check(xs_init, "xs_init", "solve")
    if xs.shape != (p.horizon + 1, p.nx):
        raise ValueError(f"xs_init must have shape ({p.horizon + 1}, {p.nx}) (horizon+1, nx), got {xs.shape}")
    return xs


class ILQR:
    """Gauss–Newton DDP (iLQR) on a :class:`ShootingProblem`.

    box: respect the problem's control bounds (box-QP backward pass + clipped rollouts); with
    ``box=False`` the bounds are ignored. line_search: ``"backtracking"`` (one rollout per step
    size) or ``"parallel"`` (all step sizes rolled out as one batch). alphas: step sizes, largest
    first. armijo: acceptance ratio of actual to expected cost reduction. reg_*: Levenberg–Marquardt
    μ schedule. refresh_gains: when ``max_iter`` ends the solve right after a step, recompute the
    derivatives and gains at the returned trajectory so ``K``/``k`` match ``xs``/``us``.
    gap_tol: gaps below this count as closed. gauss_newton_fallback (DDP): see
    :meth:`_backward_pass_with_regularization`. compiled: run the backward pass and the gradient
    recursion as compiled numba calls (:mod:`solvers.riccati_numba`), and the line-search
    rollouts too where the dynamics allow it (Euler on a backend with compiled forward dynamics,
    :mod:`solvers.rollout_numba`), instead of the Python reference loops; ``None`` (default) does
    so when the problem's backend says it prefers a compiled solver (``prefers_compiled_solver``:
    the numba backend). In the common case of a compiled solver (one Euler free-dynamics group on
    hinge/slide joints, every cost term compiled) an iteration's compiled calls run with their
    arguments bound once (:mod:`solvers.prepared_iteration`; same kernels, same results).
    """

    name = "ilqr"
    multiple_shooting = False
    uses_second_order = False
    handles_constraints = False     # hard constraints (ActionModel.constraints): refused unless True

    def __init__(self, problem: ShootingProblem, box: bool = True, line_search: str = "backtracking",
                 alphas=None, armijo: float = 0.1, reg_init: float = 1e-9, reg_min: float = 1e-9,
                 reg_max: float = 1e10, refresh_gains: bool = True, gap_tol: float = 1e-12,
                 gauss_newton_fallback: bool = True, compiled: bool | None = None, verbose: bool = False):
        if not isinstance(problem, ShootingProblem):
            raise TypeError(f"{type(self).__name__}: expected a ShootingProblem, got {type(problem).__name__}")
        if line_search not in LINE_SEARCHES:
            raise ValueError(f"unknown line_search '{line_search}'; use one of {', '.join(LINE_SEARCHES)}")
        if not self.handles_constraints:
            refuse_constraints(type(self).__name__, problem)
        self.problem = problem
        self.box = bool(box)
        self.line_search = line_search
        self.alphas = default_alphas() if alphas is None else np.asarray(alphas, float)
        if self.alphas.ndim != 1 or self.alphas.size == 0 or np.any(self.alphas <= 0) or np.any(self.alphas > 1):
            raise ValueError("alphas must be a non-empty 1-D list of step sizes in (0, 1], largest first")
        self.armijo = float(armijo)
        self.reg_params = dict(mu=reg_init, mu_min=reg_min, mu_max=reg_max)
        self._reg_start: tuple | None = None    # (reg_params as validated, a validated schedule's fields)
        self._new_regularization()              # validate early
        self.refresh_gains = refresh_gains
        self.gap_tol = float(gap_tol)
        self.gauss_newton_fallback = bool(gauss_newton_fallback)
        self._with_curvature = True
        self.compiled = problem.backend.prefers_compiled_solver if compiled is None else bool(compiled)
        self.backward = BackwardPass(problem.horizon, problem.nu, problem.ndx, self.compiled)
        self.forward = ForwardPass(problem, self.compiled)
        # the workspace every iteration writes into (derivatives, rollouts), and the iterate's own
        # arrays: nothing per-knot is allocated by a warm solve of a few iterations
        self.data = problem.create_data(second_order=False, max_candidates=max(2, self.alphas.size))
        N, nx, nu, ndx = problem.horizon, problem.nx, problem.nu, problem.ndx
        self._xs_buf, self._us_buf = np.empty((N + 1, nx)), np.empty((N, nu))
        self.gaps = np.zeros((N + 1, ndx))
        self._gap_targets = np.empty((N + 1, nx))   # (x0, f(xs_t, us_t)): what the gaps measure xs from
        self._gaps_current = False          # whether ``gaps`` are those of the current iterate
        self._finite_iterate = False        # whether the iterate is known finite without a check
        self.verbose = verbose
        self._sources_of = None             # (knot structure, its second-order sources)
        #: the iteration's compiled calls with their arguments bound (:mod:`solvers.prepared_iteration`),
        #: None outside its common case; rebuilt when the problem's structure, costs or bounds change
        self._prepared: PreparedIteration | None = None
        self._fast: PreparedIteration | None = None      # the one in force during the current solve
        self._bounds_seen: tuple | None = None             # (u_lower, u_upper, problem.has_bounds)
        self._solve_stamp: tuple | None = None              # what _start_solve derived _fast and the bounds from
        self._read_bounds()

    # the backward pass's results (views of its workspace)
    K = property(lambda self: self.backward.K, doc="feedback gains (N, nu, ndx) of the last backward pass")
    k = property(lambda self: self.backward.k, doc="feed-forward steps (N, nu) of the last backward pass")
    Qu = property(lambda self: self.backward.Qu)
    Quuk = property(lambda self: self.backward.Quuk)
    Vx = property(lambda self: self.backward.Vx, doc="value gradients (N+1, ndx)")
    Vxx = property(lambda self: self.backward.Vxx, doc="value Hessians (N+1, ndx, ndx)")

    # ------------------------------------------------------------ public API
    def warmup(self, progress: Progress | None = None, extra: Callable[[], None] | None = None) -> WarmupResult:
        """Compile (first run on this machine) or load from numba's on-disk cache every kernel a
        solve runs — the backend's and, when compiled, the solver's own — so no timed solve pays for
        compilation; kernels compile in parallel where they can. progress: optional
        ``progress(label, done, total)`` per kernel compiled or warm-up step; extra: more work to
        warm under the same reporting. See :mod:`solvers.warmup`. Leaves no state behind."""
        return warm_up(self, progress, extra)

    def _start_solve(self, max_iter, tol) -> float:
        """Check ``max_iter`` (a non-negative integer) and ``tol`` (>= 0), zero the stage timings,
        read the control bounds the solve respects (``_box``, ``_lower``, ``_upper``: fixed during a
        solve); returns the solve's start time (time.perf_counter)."""
        if int(max_iter) != max_iter or max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer, got {max_iter}")
        if not (tol >= 0):
            raise ValueError(f"tol must be >= 0, got {tol}")
        self.timings = dict.fromkeys(TIMING_KEYS, 0.0)
        if not self.compiled:
            self._read_bounds()
            self._fast = None
            return time.perf_counter()
        # nothing the bounds and the prepared iteration are derived from was replaced since the last
        # solve (the problem's bounds, knot structure, terminal cost and cost switch, the solver's box
        # and workspace, any cost's terms, references or weights: cost_term_changes and
        # cost_data_changes count those): the last solve's (a warm MPC update's usual case)
        p = self.problem
        st, structure = self._solve_stamp, p.structure
        if not (st is not None and self._fast is not None and st[0] is p.u_lower and st[1] is p.u_upper
                and st[2] == self.box and st[3] is self.data and st[4] == p.revision and st[5] is structure
                and st[6] is structure.cost_scales and st[7] is p.terminal_cost and st[8] == p.compile_costs
                and st[9] == cost_term_changes() and st[10] == cost_data_changes()):
            self._read_bounds()
            self._fast = self._prepare_iteration()
            self._solve_stamp = (p.u_lower, p.u_upper, self.box, self.data, p.revision, structure,
                                 structure.cost_scales, p.terminal_cost, p.compile_costs, cost_term_changes(),
                                 cost_data_changes())
        return time.perf_counter()

    def _prepare_iteration(self) -> PreparedIteration | None:
        """The prepared iteration for this solve (:mod:`solvers.prepared_iteration`): the one kept
        from the last solve while it still applies, else a new one (None outside its common case)."""
        cc = self.problem.costs.compiled()
        prep = self._prepared
        if prep is None or not prep.current(self, cc):
            prep = self._prepared = PreparedIteration.build(self, cc)
        if prep is not None:
            prep.begin()
        return prep

    def _new_regularization(self) -> Regularization:
        """A fresh μ schedule at ``reg_params``, validated once per distinct ``reg_params`` (a
        solve starts one; the dataclass's validation is the same for the same parameters)."""
        params, start = self.reg_params, self._reg_start
        if start is None or start[0] != params:
            start = self._reg_start = (dict(params), dict(Regularization(**params).__dict__))
        reg = object.__new__(Regularization)
        reg.__dict__.update(start[1])
        return reg

    def _read_bounds(self) -> None:
        """``_box`` (the bounds are respected), ``_lower`` / ``_upper`` (nu,) (None without): read
        once per solve, not at every stage."""
        p = self.problem
        lower, upper = p.u_lower, p.u_upper
        seen = self._bounds_seen
        if seen is None or seen[0] is not lower or seen[1] is not upper:
            # the problem's bounds are read-only arrays, replaced rather than changed: identity tells
            seen = self._bounds_seen = (lower, upper, p.has_bounds)
        self._box = self.box and seen[2]
        self._lower, self._upper = (lower, upper) if self._box else (None, None)

    def solve(self, xs_init=None, us_init=None, max_iter: int = 50, tol: float = 1e-6) -> SolverResult:
        """Optimise from an initial guess (default: gravity-compensation controls rolled out from
        x0). ILQR/DDP: with ``us_init`` only, the guess is its open-loop rollout from x0; with
        ``xs_init`` too (a warm start, e.g. ``res.shifted(1)``), the first iteration linearises
        around ``(xs_init, us_init)`` — gaps allowed — and its forward pass rolls out from x0 with
        feedback around the guess (the full step when it costs no more than the guess, or than
        α = 0; else the cheapest of all step sizes, α = 0 included:
        :func:`solvers.line_search.warm_start_step`), after which
        every iterate is feasible and the cost decreases monotonically. FDDP starts from
        ``xs_init`` as given and closes the gaps gradually."""
        t_start = self._start_solve(max_iter, tol)
        if self.uses_second_order:
            self.data.enable_second_order()     # allocates once, on the first second-order solve
        self.gaps.fill(0.0)
        self._gaps_current = False
        self.feasible = True
        self.fallbacks = 0
        self.reg = self._new_regularization()
        self.xs, self.us = self._xs_buf, self._us_buf
        self._finite_iterate = False
        self._started = False               # whether the initial trajectory was taken (_start_iterate)
        self._gains_finite = False          # whether K is known finite (checked by the first-iteration call)
        history: list[float] = []
        steps: list[float] = []
        converged, reason = False, ""
        gnorm = np.inf
        it = 0
        try:
            # the derivatives at the initial trajectory give its cost too (their l; Crocoddyl's
            # calcDiff likewise): no separate cost evaluation. first: what the first iteration's
            # backward pass gave with them (a warm start on the prepared iteration: _start_iterate)
            derivs, first, self.cost = self._start_iterate(xs_init, us_init, max_iter)
            if type(first) is LineSearchResult and max_iter == 1 and not self.refresh_gains and not self.verbose:
                # one iteration whose full step the first-iteration call took (a warm MPC update's
                # usual course): what the loop below does with it (the step taken, μ lowered, the
                # solve ended at its iteration limit), without the loop's tests, none of which applies
                history.append(self.cost)
                self._take_accepted(first, steps, history)
                it, reason, gnorm = 1, f"maximum number of iterations ({max_iter}) reached", np.nan
            else:
                if not math.isfinite(self.cost):
                    if first is not None:
                        self.backward.reset()       # no gains, as when the solve stops before its backward pass
                    raise SolverFailure("the initial trajectory has a non-finite cost")
                gnorm = self._gradient_norm(derivs) if self.feasible else np.inf
                history.append(self.cost)
                for it in range(max_iter + 1):
                    if derivs is None:
                        derivs = self._derivatives()
                        gnorm = self._gradient_norm(derivs) if self.feasible else np.inf
                    if first is None or type(first) is str:     # (str: the first pass failed, in _start_iterate)
                        self._backward_pass_with_regularization(derivs, first)
                        first = None
                    if self.feasible and gnorm <= tol:
                        converged, reason = True, f"projected gradient norm {gnorm:.3e} <= tol {tol:.1e}"
                        break
                    if it == max_iter:
                        reason = f"maximum number of iterations ({max_iter}) reached"
                        break
                    if first is None:
                        ls = self._line_search()
                    elif type(first) is LineSearchResult:   # the warm start's full step, taken in _start_iterate
                        ls, first = first, None
                    else:           # the warm start's step, its full step already rolled out
                        ls, first = warm_start_step(self._rollout, self.alphas, self.cost, first), None
                    if self.verbose:
                        print(f"[{self.name}] it {it:3d} cost {self.cost:.10e} |g| {gnorm:.3e} mu {self.reg.mu:.1e} "
                              f"alpha {ls.alpha if ls.accepted else 0:.4f} gap {np.abs(self.gaps).max():.1e}")
                    if ls.accepted:
                        self._take_accepted(ls, steps, history)
                        derivs = None
                        if it + 1 == max_iter and not self.refresh_gains:
                            it += 1
                            reason = f"maximum number of iterations ({max_iter}) reached"
                            gnorm = np.nan
                            break
                    else:
                        steps.append(0.0)
                        if self._no_progress_possible():
                            it += 1
                            reason = (f"no step size reduces the cost and the expected reduction is at rounding "
                                      f"level; projected gradient norm {gnorm:.3e} > tol {tol:.1e}")
                            break
                        if not self.reg.increase():
                            it += 1
                            raise SolverFailure(f"regularization blow-up: no step size reduced the cost even with "
                                                f"mu > {self.reg.mu_max:.1e} (projected gradient norm {gnorm:.3e})")
        except SolverFailure as e:
            converged, reason = False, str(e)
            if not self._started:
                # no initial trajectory: the iterate returned is NaN, not what the buffers held
                self._xs_buf.fill(np.nan)
                self._us_buf.fill(np.nan)
        self.timings["total"] = time.perf_counter() - t_start
        # an iterate taken from a finite candidate (_accept_step) needs no second look
        finite = self._finite_iterate or (sum_is_finite(self.xs) and sum_is_finite(self.us))
        if not finite:
            converged = False
            reason = reason + "; the returned trajectory contains non-finite values"
        return SolverResult(xs=self.xs.copy(), us=self.us.copy(), K=self.K.copy(), k=self.k.copy(),
                            cost=float(self.cost) if hasattr(self, "cost") else np.nan, cost_history=history,
                            iterations=it, converged=converged, reason=reason, timings=self.timings,
                            solver=self.name, gradient_norm=float(gnorm), gap=self._final_gap(),
                            regularization=self.reg.mu, step_sizes=steps, gauss_newton_fallbacks=self.fallbacks,
                            second_order=self._second_order_sources(), finite=finite,
                            gains_finite=True if self._gains_finite else None)

    def _take(self, xs: np.ndarray, us: np.ndarray) -> None:
        """Make (xs, us) the current iterate, copied into the solver's own arrays (candidates live
        in the rollout buffers, which the next forward pass overwrites)."""
        # (slice assignment: np.copyto's Python wrapper costs twice the copy of these small arrays)
        if xs is not self._xs_buf:
            self._xs_buf[...] = xs
        if us is not self._us_buf:
            self._us_buf[...] = us
        self.xs, self.us = self._xs_buf, self._us_buf
        self._gaps_current = False
        self._finite_iterate = False    # set again by whoever knows the new iterate is finite

    def _second_order_sources(self) -> tuple:
        """The distinct second-order sources of the problem's dynamics groups (once per knot structure)."""
        if not self.uses_second_order:
            return ()
        structure = self.problem.structure
        cached = self._sources_of
        if cached is None or cached[0] is not structure:
            cached = self._sources_of = (structure, tuple(dict.fromkeys(g.item.second_order_source
                                                                        for g in structure.dynamics_groups)))
        return cached[1]

    # ------------------------------------------------------------ hooks (FDDP / DDP override)
    def _initial_trajectory(self, xs_init, us_init):
        p = self.problem
        # a warm start's controls go straight into the iterate's buffer (_take then skips the copy)
        us = initial_controls(p, us_init, self.box, out=self._us_buf if xs_init is not None else None)
        if xs_init is not None:
            # warm start: linearise around the (possibly infeasible) guess; the first forward pass
            # rolls out from x0 with feedback around it, which closes every gap at once
            self.feasible = False
            return initial_states(p, xs_init, self._xs_buf.shape), us
        c = self._rollout_open_loop(us)
        if not c.ok[0]:
            raise SolverFailure("the initial rollout diverged (non-finite states); give a better us_init")
        return c.xs[0], us

    def _rollout_open_loop(self, us) -> Candidates:
        zero_K = np.zeros_like(self.K)
        xs_nom = np.repeat(self.problem.x0[None], self.problem.horizon + 1, axis=0)
        return self._simulate(np.ones(1), xs_nom, us, np.zeros_like(us), zero_K, with_cost=False)

    def _after_derivatives(self, d: ProblemDerivatives) -> None:
        """Gaps ``f̄_0 = x0 ⊖ xs_0``, ``f̄_{t+1} = f(xs_t, us_t) ⊖ xs_{t+1}`` of an infeasible iterate."""
        if self.feasible:
            self.gaps[:] = 0.0
            self._gaps_current = True
            return
        ss = self.problem.state
        gaps = self.gaps
        if ss.euclidean:
            # x1 ⊖ x0 = x1 - x0, without StateSpace.difference's re-checks: the iterate and x0 are finite
            # (checked when set), so a gap is non-finite exactly where xnext is, which the largest
            # |gap| shows (NaN or inf): the finiteness check and the gap test in one
            np.subtract(self.problem.x0, self.xs[0], out=gaps[0])
            np.subtract(d.dynamics.xnext, self.xs[1:], out=gaps[1:])
            largest = float(max(gaps.max(), -gaps.min()))
            if not math.isfinite(largest):
                raise SolverFailure(_NON_FINITE_DYNAMICS)
        else:
            if not sum_is_finite(d.dynamics.xnext):
                raise SolverFailure(_NON_FINITE_DYNAMICS)
            # every gap in one difference call, the targets (x0, xnext) stacked in their buffer
            targets = self._gap_targets
            targets[0] = self.problem.x0
            targets[1:] = d.dynamics.xnext
            ss.difference(self.xs, targets, out=gaps)
            largest = max(gaps.max(), -gaps.min())
        if largest <= self.gap_tol:
            self.feasible = True
            gaps[:] = 0.0
        self._gaps_current = True

    def _expected_reduction(self, alpha: float, xs_try=None) -> float:
        d1 = float(np.sum(self.Qu * self.k))
        d2 = float(np.sum(self.k * self.Quuk))
        return -(alpha * d1 + 0.5 * alpha * alpha * d2)

    def _accept(self, alpha: float, cost_try: float, xs_try) -> bool:
        expected = self._expected_reduction(alpha)
        return expected > 0 and (self.cost - cost_try) >= self.armijo * expected

    def _no_progress_possible(self) -> bool:
        return self._expected_reduction(1.0) <= 1e-14 * max(1.0, abs(self.cost))

    def _accept_step(self, ls) -> None:
        self._take(ls.xs, ls.us)
        self._finite_iterate = True     # a line search accepts finite candidates only (Candidates.ok)
        self.cost = ls.cost
        self.feasible = True    # single shooting: every rollout is feasible
        self.gaps.fill(0.0)

    def _take_accepted(self, ls, steps: list, history: list) -> None:
        """An accepted line search's step: its size and the new cost recorded, the iterate taken
        (:meth:`_accept_step`), μ lowered."""
        steps.append(ls.alpha)
        self._accept_step(ls)
        history.append(self.cost)
        self.reg.decrease()

    def _final_gap(self) -> float:
        return 0.0

    # ------------------------------------------------------------ stages
    def _timed(self, key: str) -> "_StageTimer":
        """``with self._timed(key):`` adds the block's wall time to ``self.timings[key]``."""
        return _StageTimer(self.timings, key)

    def _start_iterate(self, xs_init, us_init, max_iter: int
                       ) -> tuple[ProblemDerivatives, Candidates | LineSearchResult | str | None, float]:
        """The backward pass's results zeroed (``BackwardPass.reset``), the initial trajectory made the
        iterate (:meth:`_initial_trajectory`, :meth:`_take`), its :meth:`_derivatives` (with the
        gaps of a warm start) and its cost (theirs, ``ProblemDerivatives.cost``). For a warm start on
        the prepared iteration, in one compiled call with the first iteration's backward pass and
        full-step rollout (:meth:`PreparedIteration.first_iteration`): then ``(derivatives, the
        full step's candidate, cost)``, which the first line search starts from, or ``(derivatives,
        the step, cost)`` where that call took the full step already (the warm start's step rule,
        :func:`solvers.line_search.warm_start_step`; the iterate is then the step's, the gaps not
        yet zeroed: :meth:`_accept_step` does that), or, where that backward pass failed,
        ``(derivatives, its message, cost)``, which the first
        :meth:`_backward_pass_with_regularization` takes; else ``(derivatives, None, cost)``."""
        fast = self._fast
        if fast is not None and xs_init is not None and us_init is not None and max_iter > 0:
            got = fast.first_iteration(self.timings, xs_init, us_init)
            if got is not None and got[0] != "non-finite start":
                outcome, c = got
                # what _initial_trajectory and _take leave for a warm start, and the gaps computed
                self.xs, self.us = self._xs_buf, self._us_buf
                self.feasible = False
                self._finite_iterate = False
                self._started = True
                self._gaps_current = True
                if outcome == "accepted":
                    self._with_curvature = True         # (what the backward pass ran with)
                    guess, cost, gains = c
                    self._gains_finite = gains == 1.0   # (K of this pass, checked in the call)
                    return fast.derivs, LineSearchResult(True, float(self.alphas[0]), self.xs, self.us, cost, 1), guess
                d = fast.derivs
                if outcome == "full":
                    self._with_curvature = True
                    return d, self._prepared_candidates(*c), d.cost
                if outcome == "non-finite":
                    raise SolverFailure(_NON_FINITE_DYNAMICS)
                if outcome == "feasible":
                    self.feasible = True
                if outcome == "backward failed":
                    return d, c, d.cost
                return d, None, d.cost
        self.backward.reset()
        self._take(*self._initial_trajectory(xs_init, us_init))
        self._started = True
        d = self._derivatives()
        return d, None, d.cost

    def _derivatives(self) -> ProblemDerivatives:
        fast = self._fast
        if fast is not None and self.xs is fast.xs and self.us is fast.us:
            d = fast.derivatives(self.timings)
            self._after_derivatives(d)
            return d
        with self._timed("derivatives"):
            try:
                # the iterate is the solver's own, checked when the solve started (initial_states,
                # initial_controls) or rolled out finite since (Candidates.ok)
                d = self.problem.derivatives(self.xs, self.us, second_order=self.uses_second_order, data=self.data,
                                             checked=True)
            except RankDeficientContactError as e:      # an iterate at which a contact Jacobian lost rank
                raise SolverFailure(f"the derivatives cannot be evaluated at the current iterate: {e}") from e
        # the derivatives' finiteness is checked where it matters, by the backward pass: a
        # non-finite entry makes Q_uu or the value function non-finite, which it reports; only
        # then are they searched (non_finite_derivatives), to name what went non-finite and where
        self._after_derivatives(d)
        return d

    def _gradient_norm(self, d: ProblemDerivatives) -> float:
        return projected_gradient_norm(d, self.us, self._lower, self._upper, self.compiled)

    def _backward_pass_with_regularization(self, d: ProblemDerivatives, failed: str | None = None) -> None:
        """Backward pass, raising μ until ``Q_uu + μI`` is positive definite at every knot. With
        second-order terms, an indefinite ``Q_uu`` first falls back to the Gauss–Newton pass at
        the same μ (far from a minimum the curvature ``V'_x·F2`` can be strongly indefinite; near
        it the full pass succeeds and DDP keeps its quadratic convergence). failed: the message of
        the first pass at the current μ when it ran already (:meth:`_start_iterate`)."""
        checked = False
        timings = self.timings
        self._gains_finite = False      # (new gains, not checked)
        while True:
            t0 = time.perf_counter()
            try:            # (what ``with self._timed("backward")`` does, without its timer object)
                self._with_curvature = True
                if failed is None:
                    failure = self._backward_pass(d, self.reg.mu)
                else:
                    failure, failed = failed, None
                if failure is not None and not checked:
                    checked = True
                    bad = non_finite_derivatives(d)     # non-finite derivatives: say which, not "not PD"
                    if bad is not None:
                        self.backward.reset()           # no gains from a pass over non-finite derivatives
                        raise SolverFailure(bad)
                if failure is not None and self.uses_second_order and self.gauss_newton_fallback:
                    self._with_curvature = False
                    if self._backward_pass(d, self.reg.mu) is None:
                        self.fallbacks += 1
                        failure = None
            finally:
                timings["backward"] += time.perf_counter() - t0
            if failure is None:
                return
            if not self.reg.increase():
                raise SolverFailure(f"regularization blow-up in the backward pass ({failure}; mu > "
                                    f"{self.reg.mu_max:.1e})")

    def _backward_pass(self, d: ProblemDerivatives, mu: float) -> str | None:
        """One Riccati pass (:class:`solvers.backward_pass.BackwardPass`); None on success."""
        fast = self._fast
        if fast is not None and d is fast.derivs and self.us is fast.us:
            run = fast.backward_pass(None if self.feasible else self.gaps, self._with_curvature and self.uses_second_order)
            if run is not None:
                return run(mu, self.us, self._lower, self._upper)
        return self.backward.run(d, mu, self.us, self._lower, self._upper, None if self.feasible else self.gaps,
                                 self._with_curvature and self.uses_second_order)

    # ------------------------------------------------------------ forward pass
    def _line_search(self):
        if not self.feasible:
            # the cost of the guess (the derivatives' l at it): the full step that costs no more is
            # taken without rolling out α = 0
            return warm_start_step(self._rollout, self.alphas, self.cost)
        return line_search(self._rollout, self._accept_candidate, self.alphas, self.line_search)

    def _accept_candidate(self, alpha: float, cost_try: float) -> bool:
        return self._accept(alpha, cost_try, self._candidate_xs(alpha))

    def _candidate_xs(self, alpha: float) -> np.ndarray | None:
        """The states (N+1, nx) the last rollout produced for step size ``alpha``; None if it had none."""
        alphas, c = self._last_rollout
        hit = np.flatnonzero(alphas == alpha)
        return c.xs[hit[0]] if hit.size else None

    def _rollout(self, alphas: np.ndarray) -> Candidates:
        c = self._simulate(alphas, self.xs, self.us, self.k, self.K)
        self._last_rollout = (alphas, c)
        return c

    def _rollout_gaps(self) -> np.ndarray | None:
        """Gaps the forward pass closes (FDDP on an infeasible iterate); None: single shooting."""
        return None

    def _simulate(self, alphas, xs, us, k, K, with_cost: bool = True) -> Candidates:
        """Batched closed-loop rollout of ``u = us + α k + K (x̂ ⊖ xs)`` for all step sizes α."""
        fast = self._fast
        if fast is not None and xs is fast.xs and us is fast.us and k is self.backward.k and K is self.backward.K:
            gaps = self._rollout_gaps()
            if gaps is None or gaps is self.gaps:
                return self._simulate_prepared(fast, alphas, gaps, with_cost)
        out = self.data.rollout(alphas.shape[0])
        with self._timed("forward"):
            X, U, ok = self.forward.run(alphas, xs, us, k, K, self._box, self._rollout_gaps(), out=out)
        return self._score(X, U, ok, with_cost, self.forward.contact_forces(out))

    def _simulate_prepared(self, fast: PreparedIteration, alphas, gaps, with_cost: bool) -> Candidates:
        """:meth:`_simulate` around the solver's own iterate and gains through the prepared call: the
        rollout and the candidates' compiled cost values in one call (the general path's kernels and
        math). Its time is split between the forward and cost stages by the share the compiled code
        measured (its cycle counter)."""
        S = alphas.shape[0]
        run, out = fast.candidates(S, gaps)
        t0 = time.perf_counter()
        J, share = run(self.problem.x0, alphas)
        wall = time.perf_counter() - t0
        timings = self.timings
        timings["forward"] += share * wall
        timings["cost"] += (1.0 - share) * wall
        if not with_cost:
            return Candidates(out.X, out.U, np.full(S, np.inf), out.ok)
        return self._prepared_candidates(out.X, out.U, J, out.ok)

    @staticmethod
    def _prepared_candidates(X, U, J, ok) -> Candidates:
        """The candidates of a prepared rollout with their costs J (S,); a non-finite cost fails."""
        if J.shape[0] == 1:     # one candidate (a warm start's full step): a scalar test, not two numpy calls
            if not math.isfinite(J[0]):
                ok[0] = False
        else:
            ok &= np.isfinite(J)
        return Candidates(X, U, J, ok)

    def _score(self, X, U, ok, with_cost: bool, forces=None) -> Candidates:
        """Total cost of each rolled-out candidate (inf where not requested); non-finite ones fail.
        forces: the contact forces the rollout computed (:meth:`ForwardPass.contact_forces`)."""
        S = X.shape[0]
        if not with_cost:
            return Candidates(X, U, np.full(S, np.inf), ok)
        with self._timed("cost"), np.errstate(all="ignore"):
            cost = np.asarray(self.problem.costs.total(X, U, forces), float).reshape(S)
        ok &= np.isfinite(cost)
        return Candidates(X, U, cost, ok)
