"""Constrained optimal control by augmented-Lagrangian DDP: one Riccati pass per iteration on the
cost plus the augmented-Lagrangian penalty of the constraints (Jallet, Bambade, Mansard, Carpentier
2022, "Constrained Differential Dynamic Programming: A primal-dual augmented Lagrangian approach";
aligator's ``SolverProxDDP``), with the bound-constrained-Lagrangian multiplier and penalty
schedule of Conn, Gould, Toint 1991 ("A globally convergent augmented Lagrangian algorithm for
optimization with general constraints and simple bounds") as ProxDDP uses it.

Problem: that of :class:`solvers.CSQP` — the shooting problem's cost and dynamics (gaps allowed:
multiple shooting) and ``lower ≤ g_t(x_t, u_t) ≤ upper`` on every knot (:mod:`solvers.constraints`
stacked by :mod:`solvers.problem_constraints`; with ``box`` the control bounds as rows).

Penalty (Powell–Hestenes–Rockafellar, for two-sided bounds): with multipliers y (N+1, m) (positive
on an upper bound, negative on a lower bound) and penalty ρ,

    w = g + y/ρ,   ŷ = ρ (w − Π(w))   (Π: projection onto [lower, upper]),
    L_A(xs, us) = J(xs, us) + Σ_rows (ŷ² − y²) / (2ρ),

whose gradient in g is the *shifted multiplier* ŷ and whose Gauss–Newton Hessian is ρ on the rows
where w is outside its bounds (every equality row), 0 elsewhere.

One iteration at (xs, us):

1. derivatives: cost and dynamics by FDDP's derivative stage (the prepared compiled calls of
   :mod:`solvers.prepared_iteration` where they apply, else CSQP's general evaluation), then the
   constraints' values and Jacobians and the gaps as :class:`solvers.CSQP`;
2. residuals: the KKT residuals of :class:`solvers.CSQP` with the shifted multipliers ŷ (the dual
   residual is then the stationarity of L_A: the inner problem's residual); BCL: when it is below
   the inner tolerance ω, either the primal residual (largest gap or violation) is below η and
   y ← ŷ (η and ω tightened), or ρ ← ``rho_growth`` ρ (η and ω reset from the new ρ);
3. a Riccati pass (:class:`solvers.backward_pass.BackwardPass`, compiled on the numba backend;
   FDDP's gaps) on the LQ problem with ``l_x + Gxᵀŷ``, ``l_u + Guᵀŷ`` and ``l_xx + Gxᵀ ρ_a Gx + σI``,
   ``l_xu + Gxᵀ ρ_a Gu``, ``l_uu + Guᵀ ρ_a Gu + σI`` (ρ_a: ρ on the active rows; the Hessians by the
   constrained QP's implementation, :meth:`solvers.admm_qp.StagewiseAdmmQP.augmented_hessians`),
   then the linear rollout of its gains (dx, du; compiled on numba: the ADMM iterations' own,
   :func:`solvers.admm_numba.linear_rollout`) — the multiple-shooting step; while the rows active
   at the step's linearised values ``g + G d`` differ from those the pass penalised, up to
   ``active_set_passes`` more passes with the penalty's piecewise-quadratic model re-expanded at d
   (semismooth Newton on the AL of the LQ model: without it an MPC update's single iteration
   ignores the rows its step activates; the Hessians updated only at the knots whose rows
   changed);
4. CSQP's filter line search, with the infeasibility measured as the gaps' ℓ1 norm plus the AL
   penalty ``Σ (ŷ² − y²)/(2ρ)``: the first α that lowers the cost or that measure is taken; when
   none does, the smallest finite one. The two measures sum to the merit ``L_A + Σ‖f̄‖₁`` of the
   inner problem (L_A at fixed y, ρ; the dynamics its only constraints), so a trial that lowers
   that merit always passes, and so does one that trades one part for the other (docs/solvers.md:
   Armijo on the merit and filters on (L_A, infeasibility), measured, took more iterations or
   stalled). Its trial (:meth:`ALDDP._trial`): on the prepared path
   FDDP's nonlinear rollout of the gains with its cost (one compiled call) and the candidate's
   constraint values; elsewhere CSQP's ``xs ⊕ α dx``, ``us + α du`` (one dynamics step per knot,
   the cost, the constraint values).

``second_order=True`` adds DDP's term ``V'_x · F2`` to the Riccati pass (:class:`solvers.ILQR`'s
pass with its Gauss–Newton fallback at each μ), the constraints' own curvature is not added. A
step whose passes fail up to ``reg_max`` is retried by CSQP's loop only without
``gauss_newton_fallback`` (then with Gauss–Newton passes): with it, the Gauss–Newton pass was
already tried at every μ.

Stopping: as CSQP, primal, dual and complementarity residuals (with ŷ) ≤ tol. Reported
multipliers are ŷ of the iterate the residuals were computed at (the returned one, or on a stop at
``max_iter``, MPC's one iteration per update, the iterate before the last step, as CSQP reports). Knot-0 state-only rows, bad input (lower > upper, a
start state that violates a knot-0 row), warm-started multipliers moved with re-phased knots and
the diagnostics instead of NaNs are CSQP's (the same methods). A warm-started solve starts from
the previous solve's ρ too (with η, ω reset from it): in MPC, one iteration per update, the
penalty keeps the value the earlier updates raised it to.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dynamics.inputs import sum_is_finite

from .admm_qp import penalty_hessians
from .csqp import CSQP
from .problem import ProblemDerivatives, ShootingProblem
from .result import ConstrainedResult


class ALDDP(CSQP):
    """Augmented-Lagrangian DDP on a :class:`ShootingProblem` with constraints.

    box: the problem's control bounds become constraint rows of every running knot. rho_init: the
    penalty ρ of a cold solve's first iteration (> 0; a warm solve starts from the last solve's);
    rho_max: the largest ρ; rho_growth: the factor ρ grows by when the primal residual misses its
    tolerance (> 1); primal_tol0, inner_tol0: the BCL's tolerance scales η₀, ω₀ (η = η₀ ρ^−0.1,
    ω = ω₀ / ρ after a penalty increase; η ← η ρ^−0.9, ω ← ω / ρ after a multiplier update, with ρ
    there at least rho_growth; never below the solve's tol); sigma: a proximal weight on the
    Hessians' diagonals (Levenberg–Marquardt: no effect on the solution); active_set_passes: the
    most extra Riccati passes of an iteration, taken while the rows active at the step's
    linearised constraint values differ from those the last pass penalised (0: one pass per
    iteration); x0_tolerance, warm_start_multipliers, second_order: as :class:`CSQP`; the other
    options are :class:`ILQR`'s (``alphas``, ``reg_*``, ``compiled``)."""

    name = "alddp"
    multiple_shooting = True
    uses_second_order = False
    handles_constraints = True

    def __init__(self, problem: ShootingProblem, box: bool = True, rho_init: float = 100.0, rho_max: float = 1e8,
                 rho_growth: float = 10.0, primal_tol0: float = 1.0, inner_tol0: float = 1.0, sigma: float = 1e-8,
                 active_set_passes: int = 3, x0_tolerance: float = 1e-2, warm_start_multipliers: bool = True,
                 second_order: bool = False, **options):
        for name, v in (("rho_init", rho_init), ("rho_max", rho_max), ("primal_tol0", primal_tol0),
                        ("inner_tol0", inner_tol0)):
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        if not (np.isfinite(rho_growth) and rho_growth > 1):
            raise ValueError(f"rho_growth must be a finite number > 1, got {rho_growth}")
        if rho_max < rho_init:
            raise ValueError(f"rho_max ({rho_max}) must be >= rho_init ({rho_init})")
        for key in ("max_qp_iter", "eps_abs", "eps_rel", "rho", "relaxation", "rho_update_interval", "inactive_rho",
                    "rho_update_tolerance"):
            if key in options:
                raise TypeError(f"ALDDP has no ADMM QP: '{key}' is a CSQP option (ALDDP's penalty is rho_init)")
        super().__init__(problem, box=box, sigma=sigma, x0_tolerance=x0_tolerance,
                         warm_start_multipliers=warm_start_multipliers, second_order=second_order, **options)
        if int(active_set_passes) != active_set_passes or active_set_passes < 0:
            raise ValueError(f"active_set_passes must be a non-negative integer, got {active_set_passes}")
        self.active_set_passes = int(active_set_passes)
        self.rho_init, self.rho_max, self.rho_growth = float(rho_init), float(rho_max), float(rho_growth)
        self.primal_tol0, self.inner_tol0 = float(primal_tol0), float(inner_tol0)
        self.rho = self.rho_init
        self._rho_prev: float | None = None       # the penalty the next warm-started solve starts from
        self.multiplier_updates = self.penalty_updates = 0
        self._gauss_newton_only = False           # the passes of CSQP's Gauss–Newton retry (_solve_qp)

    def reset_multipliers(self) -> None:
        """Forget the previous solve's multipliers and penalty (the next solve starts from zero and
        ``rho_init``)."""
        super().reset_multipliers()
        self._rho_prev = None

    def _read_bounds(self) -> None:
        # the control bounds are constraint rows (ProblemConstraints' box), not the Riccati pass's
        # box QP: the pass and the trials run unclipped
        super()._read_bounds()
        self._box = False
        self._lower = self._upper = None

    # ------------------------------------------------------------ public API
    def solve(self, xs_init=None, us_init=None, max_iter: int = 50, tol: float = 1e-6,
              multipliers=None) -> ConstrainedResult:
        """Optimise from an initial guess: :meth:`CSQP.solve`'s loop (its arguments, stopping test
        and result) with this class's stages — the KKT residuals at ŷ and the BCL schedule, the
        Riccati step instead of the QP, the AL penalty as the filter's infeasibility. The result's
        ``rho`` is the final penalty, ``qp_iterations`` empty."""
        self._tol = tol
        self.multiplier_updates = self.penalty_updates = 0
        r = super().solve(xs_init, us_init, max_iter, tol, multipliers)
        if not self._last_failed:
            self._rho_prev = self.rho       # CSQP kept this solve's multipliers (it did not fail): their penalty too
        return dataclasses.replace(r, qp_iterations=[], rho=float(self.rho))

    # ------------------------------------------------------------ CSQP's stages
    def _start_multipliers(self, multipliers) -> None:
        warm = (self.warm_start_multipliers and multipliers is None and self._y_prev is not None
                and self._rho_prev is not None)
        super()._start_multipliers(multipliers)
        self._set_penalty(self._rho_prev if warm else self.rho_init, self._tol)
        self._bcl_due = None

    def _relax_knot0(self) -> None:
        super()._relax_knot0()
        self._y = self.qp.y.copy()          # the BCL's multipliers; qp.y holds the shifted ŷ

    def _kkt(self, d: ProblemDerivatives) -> tuple[float, float, float, float]:
        """CSQP's residuals with the shifted multipliers ŷ at the iterate (in qp.y), and whether
        the BCL update is due (the inner problem solved to ω), applied by the next step."""
        self._active = self._shift_multipliers(self.cdata.g)
        kkt = super()._kkt(d)
        primal, dual = kkt[0], kkt[1]
        self._bcl_due = (dual <= self._omega, primal)
        if self.verbose:
            print(f"[alddp] primal {primal:.2e} dual {dual:.2e} rho {self.rho:.1e} eta {self._eta:.1e} "
                  f"omega {self._omega:.1e}")
        return kkt

    def _solve_qp(self, d: ProblemDerivatives, curvature: bool) -> int:
        """The BCL update when due, then the step (:meth:`_step`) in place of CSQP's QP (DDP's
        term, with ``second_order``, is the Riccati pass's own; ``curvature`` False: CSQP's retry
        after a failed step, whose passes are then Gauss–Newton only). Returns 0 (no ADMM
        iteration)."""
        due, self._bcl_due = self._bcl_due, None     # taken once: a retry does not update y or ρ again
        if due is not None and due[0]:
            self._active = self._bcl_update(due[1], self._tol)
        self._gauss_newton_only = self.uses_second_order and not curvature
        try:
            self._step(d, self._active)
        finally:
            self._gauss_newton_only = False
        return 0

    def _gauss_newton_retry(self) -> bool:
        """With ``gauss_newton_fallback`` (the default) the failed step's passes already fell back
        to Gauss–Newton at every μ they tried: a retry would repeat them, and fail again. Without
        it the passes tried the curvature only: the retry's are Gauss–Newton."""
        return not self.gauss_newton_fallback

    def _backward_pass(self, d: ProblemDerivatives, mu: float) -> str | None:
        """:meth:`ILQR._backward_pass`; without DDP's term in CSQP's retry (:meth:`_solve_qp`)."""
        if self._gauss_newton_only:
            self._with_curvature = False        # the retry: no pass with the curvature at all
        return super()._backward_pass(d, mu)

    # ------------------------------------------------------------ augmented Lagrangian
    def _set_penalty(self, rho: float, tol: float) -> None:
        """ρ and the BCL tolerances that go with a new penalty: η = η₀ ρ^−0.1, ω = ω₀ ρ^−1 (≥ tol)."""
        self.rho = float(rho)
        self._tol = tol
        self._eta = max(self.primal_tol0 * self.rho ** -0.1, tol)
        self._omega = max(self.inner_tol0 / self.rho, tol)

    def _shifted(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ŷ, active)`` for constraint values g (..., N+1, m): ``ŷ = ρ (w − Π(w))``, ``w = g + y/ρ``,
        and the rows where w is outside its bounds (the penalty's Gauss–Newton Hessian is ρ there)."""
        rho = self.rho
        w = g + self._y / rho
        proj = np.clip(w, self._lo, self._hi)
        # equality rows always carry ρ (w can land exactly on the bound); knot 0's relaxed rows are ±inf
        return rho * (w - proj), (w != proj) | (self._lo == self._hi)

    def _shift_multipliers(self, g: np.ndarray) -> np.ndarray:
        """``qp.y ← ŷ`` at g (what the KKT residuals, the step and the result use); returns the active rows."""
        yhat, active = self._shifted(g)
        self.qp.y[:] = yhat
        return active

    def _penalty(self, g: np.ndarray) -> float:
        """``Σ (ŷ² − y²) / (2ρ)``: the penalty part of L_A at constraint values g."""
        yhat, _ = self._shifted(g)
        return float(np.sum(yhat * yhat - self._y * self._y)) / (2.0 * self.rho)

    def _bcl_update(self, primal: float, tol: float) -> np.ndarray:
        """The inner problem is solved to ω: take the multipliers when the primal residual is below
        η (and tighten both), else raise ρ. Returns the active rows of the new ŷ (also in qp.y)."""
        if primal <= self._eta:
            self._y[:] = self.qp.y
            self.multiplier_updates += 1
            base = max(self.rho, self.rho_growth)     # tightens also while ρ <= 1
            self._eta = max(self._eta * base ** -0.9, tol)
            self._omega = max(self._omega / base, tol)
        elif self.rho < self.rho_max:
            self.penalty_updates += 1
            self._set_penalty(min(self.rho * self.rho_growth, self.rho_max), tol)
        else:
            # ρ at its cap cannot grow: take the multipliers anyway, or the method would stay a
            # fixed-penalty one with a violation of about |y*| / ρ_max
            self._y[:] = self.qp.y
            self.multiplier_updates += 1
        return self._shift_multipliers(self.cdata.g)

    def _step(self, d: ProblemDerivatives, active: np.ndarray) -> None:
        """The step (qp.dx, qp.du): the Riccati pass on the augmented LQ problem at the iterate and
        the linear rollout of its gains; then, while the rows active at the step's linearised
        values ``g + G d`` differ from those the pass penalised (at most ``active_set_passes``
        times), the pass again with the penalty's piecewise-quadratic model re-expanded there — a
        semismooth Newton iteration on the AL of the LQ model (derivatives reused)."""
        cd, qp, N = self.cdata, self.qp, self.problem.horizon
        Gx, Gu = cd.Gx, cd.Gu
        v = qp.y                                # the penalty's gradient in g at d = 0: ŷ
        lqr = ProblemDerivatives(qp.aug, qp.aug_terminal, d.dynamics)
        linear_trial = self._fast is None       # CSQP's trial reads (qp.dx, qp.du); the rollout's reads the gains
        changed = None
        for n in range(self.active_set_passes + 1):
            last = n == self.active_set_passes
            self._augmented_pass(d, lqr, v, active, changed, rollout=linear_trial or not last)
            if last:
                return
            with self._timed("backward"):
                Gd = np.einsum("tmi,ti->tm", Gx, qp.dx)
                Gd[:N] += np.einsum("tmi,ti->tm", Gu[:N], qp.du)
                yhat, now = self._shifted(cd.g + Gd)
                changed = now != active
                if not changed.any():
                    return
                active = now
                # the active rows' quadratic (ρ/2)(w(d) − bound)² expanded at d = 0: gradient ŷ(d) − ρ G d
                v = yhat - np.where(active, self.rho, 0.0) * Gd

    def _augmented_pass(self, d: ProblemDerivatives, lqr: ProblemDerivatives, v: np.ndarray, active: np.ndarray,
                        changed: np.ndarray | None, rollout: bool = True) -> None:
        """One Riccati pass on ``l_x + Gxᵀv``, ``l_u + Guᵀv`` and the Hessians with ``Gᵀ diag(ρ_a) G``
        (ρ_a: ρ on the ``active`` rows), and (``rollout``) the linear rollout of its gains into
        (qp.dx, qp.du). changed: None (the Hessians assembled anew), or the rows whose activity
        changed since the last pass, whose Hessians stay in ``lqr``: only the knots with such a row
        are updated, by ``± ρ Gᵀ G`` of those rows."""
        cd, qp, N = self.cdata, self.qp, self.problem.horizon
        a, at = lqr.running, lqr.terminal
        with self._timed("backward"):
            np.add(d.running.lx, np.einsum("tmi,tm->ti", cd.Gx[:N], v[:N]), out=a.lx)
            np.add(d.running.lu, np.einsum("tmi,tm->ti", cd.Gu[:N], v[:N]), out=a.lu)
            np.add(d.terminal.lx[0], cd.Gx[N].T @ v[N], out=at.lx[0])
            if changed is None:
                qp.augmented_hessians(d, cd.Gx, cd.Gu, np.where(active, self.rho, 0.0))
            else:
                self._update_hessians(lqr, active, changed)
        self._backward_pass_with_regularization(lqr)
        if not rollout:
            return
        with self._timed("backward"):
            qp.linear_rollout(d.dynamics.Fx, d.dynamics.Fu, self.gaps)

    def _update_hessians(self, lqr: ProblemDerivatives, active: np.ndarray, changed: np.ndarray) -> None:
        """Add ``Gᵀ diag(Δρ) G`` to the augmented Hessians of the knots with a changed row (Δρ = ρ
        on the rows that became active, −ρ on those that left, 0 elsewhere)."""
        cd, N = self.cdata, self.problem.horizon
        a, at = lqr.running, lqr.terminal
        knots = np.flatnonzero(changed.any(axis=1))
        drho = np.where(changed[knots], np.where(active[knots], self.rho, -self.rho), 0.0)
        hxx, hxu, huu = penalty_hessians(cd.Gx[knots], cd.Gu[knots], drho)
        run = knots < N
        a.lxx[knots[run]] += hxx[run]
        a.lxu[knots[run]] += hxu[run]
        a.luu[knots[run]] += huu[run]
        if not run[-1]:
            at.lxx[0] += hxx[-1]

    # ------------------------------------------------------------ FDDP's stages
    def _model_derivatives(self) -> tuple[ProblemDerivatives, tuple]:
        """The cost and dynamics derivatives by FDDP's derivative stage: the prepared compiled calls
        (:mod:`solvers.prepared_iteration`) where they apply, else CSQP's general evaluation."""
        fast = self._fast
        if fast is not None and self.xs is fast.xs and self.us is fast.us:
            return fast.derivatives(self.timings), ()
        return super()._model_derivatives()

    def _rollout_gaps(self) -> np.ndarray:
        return self.gaps        # multiple shooting: the trial's rollout closes the gaps by (1 − α), as FDDP's

    def _trial(self, alpha: float):
        """On the prepared path (:mod:`solvers.prepared_iteration`), the candidate of step size α by
        FDDP's nonlinear rollout of the last pass's gains
        (``x̂_{t+1} = f(x̂_t, û_t) ⊕ (α − 1) f̄_{t+1}``, ``û_t = u_t + α k_t + K_t (x̂_t ⊖ x_t)``) with
        its cost (:meth:`ILQR._simulate`: one compiled call), then its constraint values; its gaps
        are ``(1 − α) f̄`` by construction. None when anything is non-finite. Elsewhere CSQP's trial
        ``xs ⊕ α dx``, ``us + α du`` (the linear rollout's step): on the general path the nonlinear
        rollout costs the same dynamics steps, and on contact problems its feedback through the
        gains of weakly penalised directions (a stance's internal forces) can throw an accepted
        full step far outside the friction cones, after which no step lowers either measure
        (docs/solvers.md)."""
        if self._fast is None:
            return super()._trial(alpha)
        c = self._simulate(np.array([alpha]), self.xs, self.us, self.k, self.K)
        if not c.ok[0]:
            return None
        xs, us, cost = c.xs[0].copy(), c.us[0].copy(), float(c.cost[0])   # the next trial reuses the buffers
        with self._timed("cost"), np.errstate(all="ignore"):
            g = self.constraints.values(xs, us)         # the prepared path has no contact knots
        if not sum_is_finite(g):
            return None
        return xs, us, cost, (1.0 - alpha) * float(np.abs(self.gaps).sum()) + self._penalty(g)

    def _infeasibility(self, gaps: np.ndarray, g: np.ndarray) -> float:
        """``Σ‖f̄‖₁ + Σ (ŷ² − y²)/(2ρ)``: the gaps and the AL penalty of constraint values g, the
        measure of infeasibility of CSQP's filter line search (which this class keeps: a step is
        taken when it lowers the cost or this measure; the two sum to ``L_A + Σ‖f̄‖₁``, so a
        trial that lowers that merit always passes)."""
        return float(np.abs(gaps).sum()) + self._penalty(g)
