"""Constrained optimal control by stagewise sequential quadratic programming with an ADMM QP
(Jordana, Kleff, Meduri, Righetti, Mansard 2023, "Stagewise Implementations of Sequential
Quadratic Programming for Model-Predictive Control"; mim-solvers' ``SolverCSQP``). The ADMM
iteration is OSQP's (Stellato et al. 2020, "OSQP: an operator splitting solver for quadratic
programs"): over-relaxation, adaptive penalty ρ.

Problem: the shooting problem's cost and dynamics (gaps allowed: multiple shooting) and the
constraints of its knots, ``lower ≤ g_t(x_t, u_t) ≤ upper`` (:mod:`solvers.constraints`,
stacked by :mod:`solvers.problem_constraints`; with ``box`` the problem's control bounds too).

One SQP iteration at (xs, us):

1. derivatives: cost and dynamics derivatives (:meth:`ShootingProblem.derivatives`' stages), the
   constraint values ``g`` and Jacobians ``G = [Gx Gu]``, the gaps ``f̄``;
2. the QP in the step d = (dx, du): the Gauss–Newton quadratic model of the cost, the linearised
   dynamics ``dx_{t+1} = Fx dx_t + Fu du_t + f̄_{t+1}`` (``dx_0 = f̄_0``) and ``lower ≤ g + G d ≤
   upper``, by ADMM (:class:`solvers.admm_qp.StagewiseAdmmQP`: OSQP's iteration, each d-update a
   Riccati pass of the other solvers and a linear rollout; docs/solvers.md gives the details);
3. a filter line search (the current point as the filter): ``xs ⊕ α dx``, ``us + α du`` is
   accepted when it lowers the cost or the infeasibility ``Σ‖f̄‖₁ + Σ‖violation‖₁``.

Stopping: the KKT residuals at the iterate — the primal residual (largest gap or constraint
violation), the dual residual ``max_t ‖l_u + Gu_tᵀ y_t + Fu_tᵀ λ_{t+1}‖∞`` with the costates
``λ_N = l_x + Gxᵀy``, ``λ_t = l_x + Gxᵀ y_t + Fxᵀ λ_{t+1}`` (the states' stationarity then holds
exactly) and the complementarity of y — all ≤ tol.

``second_order=True`` adds DDP's term, the dynamics' curvature contracted with the costates
``λ_{t+1} · F2_t``, to the QP's Hessian (the constraints' own curvature is not added).

Knot 0's state-only rows cannot be changed (x_0 is given): they are left out of the QP, and a
start state that violates one by more than ``x0_tolerance`` ends the solve with a diagnostic
naming the term. The multipliers y (and the ADMM splitting variables) of the last solve warm-start
the next one (``warm_start_multipliers``; moved with the knots when the problem's running models
were re-phased), or are given to :meth:`CSQP.solve`.
"""

from __future__ import annotations

import time

import numpy as np

from dynamics.inputs import sum_is_finite

from .admm_qp import StagewiseAdmmQP
from .contact_or_nan import contact_dynamics_or_nan
from .ilqr import ILQR, SolverFailure, initial_controls, initial_states
from .problem import ProblemDerivatives, ShootingProblem
from .problem_constraints import ProblemConstraints
from .problem_costs import RolloutContactForces
from .regularization import Regularization
from .result import ConstrainedResult, shift_knots


class CSQP(ILQR):
    """Stagewise SQP with an ADMM QP on a :class:`ShootingProblem` with constraints.

    box: the problem's control bounds become constraint rows of every running knot. max_qp_iter:
    ADMM iterations per SQP iteration at most; eps_abs / eps_rel: ADMM's absolute and relative
    tolerances; rho: initial ADMM penalty; sigma: proximal weight; relaxation: over-relaxation
    α in (0, 2); rho_update_interval: ADMM iterations between ρ updates (0: never);
    rho_update_tolerance: a new ρ is taken only when it differs by more than this factor (≥ 1);
    x0_tolerance: the largest violation of a knot-0 state-only constraint by x0 that is tolerated;
    warm_start_multipliers: start from the previous solve's multipliers; inactive_rho: the penalty
    factor of far-inactive rows; second_order: add the dynamics' curvature ``λ_{t+1} · F2_t`` (the
    costates') to the QP's Hessian, DDP's term in the Lagrangian (an indefinite result falls back
    to Gauss–Newton for that iteration). The other options are
    :class:`ILQR`'s (``alphas``, ``reg_*``, ``compiled``; ``line_search`` and ``refresh_gains``
    are accepted for a uniform interface: the line search is always the backtracking filter)."""

    name = "csqp"
    multiple_shooting = True
    uses_second_order = False
    handles_constraints = True

    def __init__(self, problem: ShootingProblem, box: bool = True, max_qp_iter: int = 1000, eps_abs: float = 1e-4,
                 eps_rel: float = 1e-4, rho: float = 1e-1, sigma: float = 1e-6, relaxation: float = 1.6,
                 rho_update_interval: int = 10, x0_tolerance: float = 1e-2, warm_start_multipliers: bool = True,
                 inactive_rho: float = 3e-4, rho_update_tolerance: float = 5.0, second_order: bool = False,
                 **options):
        super().__init__(problem, box=box, **options)
        self.uses_second_order = bool(second_order)
        if not (np.isfinite(x0_tolerance) and x0_tolerance >= 0):
            raise ValueError(f"x0_tolerance must be a finite number >= 0, got {x0_tolerance}")
        self.qp_options = {"max_iter": max_qp_iter, "eps_abs": eps_abs, "eps_rel": eps_rel, "rho": rho, "sigma": sigma,
                           "relaxation": relaxation, "rho_update_interval": rho_update_interval,
                           "inactive_rho": inactive_rho, "rho_update_tolerance": rho_update_tolerance}
        self.x0_tolerance = float(x0_tolerance)
        self.warm_start_multipliers = bool(warm_start_multipliers)
        self.constraints = ProblemConstraints(problem, box)
        self._y_prev = self._z_prev = None
        self._force_models = None       # (problem revision, per-knot models, contact groups, λ buffer)
        self._models_seen = None        # the running models of the last solve (_follow_rephased_knots)
        self._allocate()

    def _allocate(self) -> None:
        p, pc = self.problem, self.constraints
        self.cdata = pc.create_data()
        self.qp = StagewiseAdmmQP(p.horizon, p.ndx, p.nu, pc.equality, self.backward, self._timed,
                                  verbose=self.verbose, **self.qp_options)
        self.costates = np.zeros((p.horizon + 1, p.ndx))
        self._m = pc.m

    # ------------------------------------------------------------ public API
    def solve(self, xs_init=None, us_init=None, max_iter: int = 50, tol: float = 1e-6,
              multipliers=None) -> ConstrainedResult:
        """Optimise from an initial guess (default: the problem's default controls rolled out from
        x0; with ``xs_init`` the guess is taken as given, gaps and all). multipliers: (N+1, m)
        constraint multipliers to start from (default: the previous solve's when
        ``warm_start_multipliers``, else zero). Stops when the primal, dual and complementarity
        residuals are all <= tol."""
        pc = self.constraints
        t_start = self._start_solve(max_iter, tol)
        pc.build()
        if pc.m != self._m:
            self._allocate()
            self._y_prev = self._z_prev = None
        else:
            self.qp.equality = pc.equality      # the layout's own (a re-phased layout may put equalities elsewhere)
        self._follow_rephased_knots()
        self._start_multipliers(multipliers)
        self.backward.reset()
        if self.uses_second_order:
            self.data.enable_second_order()     # allocates once
        self.reg = Regularization(**self.reg_params)
        self.qp.rho = self.qp.rho0 if self._z_prev is None else self.qp.rho
        self.fallbacks = 0
        self.feasible = False
        history, steps, qp_iters = [], [], []
        converged, reason, it = False, "", 0
        self.kkt = (np.inf, np.inf, np.inf, np.inf)
        self.cost = np.nan
        try:
            self._take(*self._initial_guess(xs_init, us_init))
            self._relax_knot0()
            derivs = self._linearize()
            self.cost = derivs.cost
            if not np.isfinite(self.cost):
                raise SolverFailure("the initial trajectory has a non-finite cost")
            history.append(self.cost)
            for it in range(max_iter + 1):
                if derivs is None:
                    derivs = self._linearize()
                self.kkt = self._kkt(derivs)
                primal, dual, comp, _ = self.kkt
                if self.verbose:
                    print(f"[csqp] it {it:3d} cost {self.cost:.10e} primal {primal:.2e} dual {dual:.2e} "
                          f"comp {comp:.2e} rho {self.qp.rho:.1e}")
                if max(primal, dual, comp) <= tol:
                    converged, reason = True, (f"KKT residuals primal {primal:.2e}, dual {dual:.2e}, "
                                               f"complementarity {comp:.2e} <= tol {tol:.1e}")
                    break
                if it == max_iter:
                    reason = (f"maximum number of iterations ({max_iter}) reached; KKT residuals primal {primal:.2e}, "
                              f"dual {dual:.2e}, complementarity {comp:.2e}")
                    break
                try:
                    qp_iters.append(self._solve_qp(derivs, self.uses_second_order))
                except SolverFailure:
                    if not (self.uses_second_order and self._gauss_newton_retry()):
                        raise
                    self.fallbacks += 1         # the curvature made the QP indefinite: Gauss–Newton
                    self.reg = Regularization(**self.reg_params)
                    np.clip(self.cdata.g, self._lo, self._hi, out=self.qp.z)
                    qp_iters.append(self._solve_qp(derivs, False))
                alpha = self._filter_line_search()
                steps.append(alpha)
                history.append(self.cost)
                derivs = None
                if it + 1 == max_iter and not self.refresh_gains:
                    # as ILQR: the last iterate is not linearised only to report its residuals
                    # (MPC's one iteration per update); those reported are the previous iterate's
                    it += 1
                    reason = (f"maximum number of iterations ({max_iter}) reached; KKT residuals before the last "
                              f"step primal {primal:.2e}, dual {dual:.2e}, complementarity {comp:.2e}")
                    break
        except SolverFailure as e:
            converged, reason = False, str(e)
            failed = True
        else:
            failed = False
        self.timings["total"] = time.perf_counter() - t_start
        if not (sum_is_finite(self.xs) and sum_is_finite(self.us)):
            converged = False
            reason += "; the returned trajectory contains non-finite values"
        self._last_failed = failed
        if not failed:
            # not a failed solve's multipliers (e.g. those of a diverged QP): the next solve starts
            # from the last solve that did not fail (or from zero)
            self._y_prev, self._z_prev = self.qp.y.copy(), self.qp.z.copy()
        primal, dual, comp, viol = self.kkt
        return ConstrainedResult(
            xs=self.xs.copy(), us=self.us.copy(), K=self.K.copy(), k=self.k.copy(), cost=float(self.cost),
            cost_history=history, iterations=it, converged=converged, reason=reason, timings=dict(self.timings),
            solver=self.name, gradient_norm=float(dual), gap=float(np.abs(self.gaps).max()),
            regularization=self.reg.mu, step_sizes=steps, gauss_newton_fallbacks=self.fallbacks,
            second_order=self._second_order_sources(), multipliers=self.qp.y.copy(), costates=self.costates.copy(),
            constraint_values=self.cdata.g.copy(), lower=pc.lower.copy(), upper=pc.upper.copy(),
            primal_residual=float(primal), dual_residual=float(dual), complementarity=float(comp),
            constraint_violation=float(viol), qp_iterations=qp_iters, rho=float(self.qp.rho))

    def warmup(self, progress=None, extra=None):
        """:meth:`ILQR.warmup`, then the multipliers of its solves forgotten (a warm-up leaves no
        state behind)."""
        try:
            return super().warmup(progress, extra)
        finally:
            self.reset_multipliers()

    def reset_multipliers(self) -> None:
        """Forget the previous solve's multipliers (the next solve starts from zero)."""
        self._y_prev = self._z_prev = None

    # ------------------------------------------------------------ setup
    def _start_multipliers(self, multipliers) -> None:
        pc = self.constraints
        shape = (self.problem.horizon + 1, pc.m)
        qp = self.qp
        qp.z.fill(np.nan)                 # set from the first constraint evaluation unless warm
        if multipliers is not None:
            y = np.asarray(multipliers, float)
            if y.shape != shape or not np.all(np.isfinite(y)):
                raise ValueError(f"multipliers must be a finite {shape} array (horizon+1, constraint rows), got shape "
                                 f"{y.shape}")
            qp.y[:] = y
        elif self.warm_start_multipliers and self._y_prev is not None:
            qp.y[:] = self._y_prev
            qp.z[:] = self._z_prev
        else:
            qp.y.fill(0.0)
            qp.rho = qp.rho0

    def _follow_rephased_knots(self) -> None:
        """When the problem's running models moved n knots earlier since the last solve (a
        receding-horizon controller re-phasing a gait: new knot t is old knot t+n's action model
        object), move the warm start — multipliers and splitting variables — with them, so that
        each knot's rows start from the multipliers of the same constraint terms (the last running
        knot's rows repeated, the terminal rows kept). Otherwise the rows stay on their knots: on a
        problem whose knots keep their models (e.g. standing) a solve starts from the previous
        solve's rows of the same knot."""
        models = self.problem.running_models
        prev, self._models_seen = self._models_seen, models
        if prev is None or self._y_prev is None or all(a is b for a, b in zip(models, prev)):
            return
        N = len(models)
        for n in range(1, N):
            if all(models[t] is prev[t + n] for t in range(N - n)):
                self._y_prev, self._z_prev = shift_knots(self._y_prev, n), shift_knots(self._z_prev, n)
                return

    def _initial_guess(self, xs_init, us_init):
        p = self.problem
        us = initial_controls(p, us_init, self.box)
        if xs_init is not None:
            return initial_states(p, xs_init), us
        with self._timed("forward"), np.errstate(all="ignore"):
            xs = p.rollout(us)
        if not sum_is_finite(xs):
            raise SolverFailure("the initial rollout diverged (non-finite states); give a better us_init or xs_init")
        return xs, us

    def _relax_knot0(self) -> None:
        """QP bounds: the constraints' with knot 0's state-only rows removed (x_0 is given); a
        start state violating one of them by more than x0_tolerance ends the solve."""
        p, pc = self.problem, self.constraints
        self._lo, self._hi = pc.lower.copy(), pc.upper.copy()
        rows = pc.state_only[0] & pc.bounded[0]
        if not rows.any():
            return
        xs = np.repeat(p.x0[None], p.horizon + 1, axis=0)
        g0 = pc.values(xs, self.us)[0]
        viol = np.where(rows, pc.violation(g0), 0.0)[0]
        r = int(np.argmax(viol))
        if viol[r] > self.x0_tolerance:
            raise SolverFailure(f"infeasible start: the initial state x0 violates {pc.describe_row(0, r)} by "
                                f"{viol[r]:.3g} (value {g0[r]:.6g}, bounds [{pc.lower[0, r]:.6g}, {pc.upper[0, r]:.6g}]); "
                                f"x0 is fixed, so no plan can satisfy it — move the bound or start elsewhere")
        self._lo[0, rows], self._hi[0, rows] = -np.inf, np.inf
        self.qp.y[0, rows] = 0.0

    # ------------------------------------------------------------ SQP stages
    def _linearize(self) -> ProblemDerivatives:
        """Cost, dynamics and constraint derivatives at the iterate, and its gaps."""
        p, pc = self.problem, self.constraints
        derivs, solves = self._model_derivatives()
        with self._timed("derivatives"):
            pc.evaluate(self.xs, self.us, self.cdata, solves)
        targets = self._gap_targets     # x0 and the knots' next states: one difference for every gap
        targets[0] = p.x0
        targets[1:] = derivs.dynamics.xnext
        p.state.difference(self.xs, targets, out=self.gaps)
        cd = self.cdata
        if not (sum_is_finite(cd.g) and sum_is_finite(cd.Gx) and sum_is_finite(cd.Gu)):
            bad = ~(np.isfinite(cd.g) & np.isfinite(cd.Gx).all(-1) & np.isfinite(cd.Gu).all(-1))
            t, r = map(int, np.argwhere(bad)[0])
            raise SolverFailure(f"non-finite value or Jacobian of {pc.describe_row(t, r)} on the current trajectory")
        if np.isnan(self.qp.z).any():
            np.clip(cd.g, self._lo, self._hi, out=self.qp.z)
        return derivs

    def _model_derivatives(self) -> tuple[ProblemDerivatives, tuple]:
        """The cost and dynamics derivatives at the iterate (into :attr:`data`) and the dynamics
        stage's contact solves (for the contact-force constraint terms to share); their wall time
        is added to ``timings["derivatives"]``."""
        with self._timed("derivatives"):
            d = self.data
            solves = d.calc_dynamics(self.xs[:-1], self.us, self.uses_second_order)
            self.problem.costs.derivatives_into(self.xs, self.us, d.running, d.terminal, solves)
            return d.derivatives(), solves

    def _kkt(self, d: ProblemDerivatives) -> tuple[float, float, float, float]:
        """(primal, dual, complementarity, violation) residuals at the iterate; sets the costates."""
        cd, N, y = self.cdata, self.problem.horizon, self.qp.y
        Fx, Fu = d.dynamics.Fx, d.dynamics.Fu
        lam = self.costates
        lam[N] = d.terminal.lx[0] + cd.Gx[N].T @ y[N]
        if self.backward.compiled:
            from . import admm_numba     # imports numba: only when used
            dual = admm_numba.costates(*(np.ascontiguousarray(a, dtype=np.float64) for a in (
                Fx, Fu, d.running.lx, d.running.lu, cd.Gx, cd.Gu, y)), lam)
        else:
            hx = d.running.lx + np.einsum("tmi,tm->ti", cd.Gx[:N], y[:N])
            hu = d.running.lu + np.einsum("tmi,tm->ti", cd.Gu[:N], y[:N])
            dual = 0.0
            for t in range(N - 1, -1, -1):
                dual = max(dual, float(np.abs(hu[t] + Fu[t].T @ lam[t + 1]).max(initial=0.0)))
                lam[t] = hx[t] + Fx[t].T @ lam[t + 1]
        viol = np.maximum(np.maximum(self._lo - cd.g, cd.g - self._hi), 0.0)
        violation = float(viol.max(initial=0.0))
        primal = max(violation, float(np.abs(self.gaps).max()))
        with np.errstate(invalid="ignore"):
            dist = np.where(y > 0, np.abs(self._hi - cd.g), np.abs(cd.g - self._lo))
        comp = float(np.minimum(np.abs(y), dist).max(initial=0.0))
        return primal, dual, comp, violation

    def _solve_qp(self, d: ProblemDerivatives, curvature: bool) -> int:
        """The QP at the iterate by :attr:`qp` (the step in ``qp.dx``, ``qp.du``, the multipliers
        in ``qp.y``); curvature: with ``λ_{t+1} · F2_t`` of the last KKT evaluation's costates."""
        cd = self.cdata
        return self.qp.solve(d, cd.g, cd.Gx, cd.Gu, self._lo, self._hi, self.gaps, self.us, self.reg,
                             self.costates if curvature else None,
                             dual_scale=self.kkt[1] if np.isfinite(self.kkt[1]) else 0.0)

    def _gauss_newton_retry(self) -> bool:
        """Whether a step that failed with ``second_order`` is computed again without the
        curvature (the QP with DDP's term indefinite: its Gauss–Newton QP instead)."""
        return True

    def _infeasibility(self, gaps: np.ndarray, g: np.ndarray) -> float:
        viol = np.maximum(np.maximum(self._lo - g, g - self._hi), 0.0)
        return float(np.abs(gaps).sum() + viol.sum())

    def _trial(self, alpha: float):
        p = self.problem
        xs = p.state.integrate(self.xs, alpha * self.qp.dx)
        us = self.us + alpha * self.qp.du
        with self._timed("forward"), np.errstate(all="ignore"):
            targets, forces = self._next_states_and_forces(xs, us)   # one contact solve per knot, shared
            if not (sum_is_finite(xs) and sum_is_finite(targets)):    # a diverging trial (the model refuses NaN)
                return None
            gaps = p.state.difference(xs, targets)
        if not (sum_is_finite(gaps) and sum_is_finite(xs)):
            return None
        with self._timed("cost"), np.errstate(all="ignore"):
            cost = float(p.costs.total(xs, us, forces))
            g = self.constraints.values(xs, us, forces)
        if not (np.isfinite(cost) and sum_is_finite(g)):
            return None
        return xs, us, cost, self._infeasibility(gaps, g)

    def _next_states_and_forces(self, xs: np.ndarray, us: np.ndarray) -> tuple:
        """``(targets (N+1, nx), forces)``: x0 then the trial's next states ``f_t(xs[t], us[t])``
        (what each knot's state is compared with for its gap: one difference for all gaps), one
        batched step per dynamics group, and the contact forces ``λ(x_t, u_t)`` of every contact
        knot (rigid contact, not impulse) for its cost and constraint terms to share (:meth:`_contact_forces`); a
        semi-implicit Euler contact group writes the forces of its own step's contact solve, so each
        knot's contact dynamics is solved once per trial."""
        p = self.problem
        forces = self._contact_forces(xs, us, stepped=True)
        lam = forces.lam if forces is not None else None
        targets = np.empty((p.horizon + 1, p.nx))
        targets[0] = p.x0
        out = targets[1:]
        for g in p.dynamics_groups:
            d = g.item
            if lam is not None and d.contacts is not None and d.integrator == "euler":
                buf = np.empty((len(g.knots), d.contacts.nc))
                out[g.rows] = d.step(xs[:-1][g.rows], us[g.rows], forces=buf)
                lam[0, g.rows, :d.contacts.nc] = buf
            else:
                out[g.rows] = d.step(xs[:-1][g.rows], us[g.rows])
        return targets, forces

    def _contact_forces(self, xs: np.ndarray, us: np.ndarray, stepped: bool = False) -> RolloutContactForces | None:
        """The contact forces ``λ(x_t, u_t)`` of every contact knot (rigid contact, not impulse) of a
        trial trajectory, one contact-dynamics call per dynamics group, for its cost and constraint
        terms to share (each would otherwise solve its knots' contact dynamics again); NaN where the
        contact Jacobian lost rank. None when the problem has no such knot. ``stepped``: the
        semi-implicit Euler groups' forces are left to their step (:meth:`_next_states_and_forces`)."""
        p = self.problem
        if self._force_models is None or self._force_models[0] != p.revision:
            models = [None] * p.horizon
            groups = []
            for g in p.dynamics_groups:
                d = g.item
                if d.contacts is not None and d.integrator != "impulse":
                    groups.append(g)
                    for t in g.knots:
                        models[t] = d
            nc = max((g.item.contacts.nc for g in groups), default=0)
            self._force_models = (p.revision, tuple(models), groups, np.empty((1, p.horizon, nc)))
        _, models, groups, lam = self._force_models
        if not groups:
            return None
        nq = p.model.nq
        for g in groups:
            d = g.item
            if stepped and d.integrator == "euler":
                continue
            x, u = xs[g.rows], us[g.rows]
            q, v = x[:, :nq], np.ascontiguousarray(x[:, nq:])
            lam[0, g.rows, :d.contacts.nc] = contact_dynamics_or_nan(p.backend, p.model, q, v, d.torques(q, v, u),
                                                                     d.contacts)[1]
        return RolloutContactForces(lam, models)

    def _filter_line_search(self) -> float:
        """Backtracking over ``alphas``: the first step that lowers the cost or the infeasibility
        is taken (the current point is the filter); when none does, the smallest finite one is
        taken (as mim-solvers does), so that the SQP keeps moving. Returns α (0: nothing finite)."""
        cd = self.cdata
        infeas = self._infeasibility(self.gaps, cd.g)
        last = None
        for alpha in self.alphas:
            trial = self._trial(float(alpha))
            if trial is None:
                continue
            last = (float(alpha), trial)
            _, _, cost, inf_try = trial
            if cost < self.cost or inf_try < infeas:
                break
        if last is None:
            raise SolverFailure("every step of the line search gave non-finite states, costs or constraint values; "
                                "the last finite iterate is returned")
        alpha, (xs, us, cost, _) = last
        self._take(xs, us)
        self.cost = cost
        return alpha

