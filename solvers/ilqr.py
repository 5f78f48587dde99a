"""Iterative LQR: Gauss–Newton differential dynamic programming.

References: Li & Todorov 2004 ("Iterative linear quadratic regulator design for nonlinear
biological movement systems"); Tassa, Erez & Todorov 2012 (the backward pass with regularised
``Q_uu``, eq. 5–11; line search with expected improvement, Sec. II-F); Tassa, Mansard & Todorov
2014 (control limits through a box QP per knot, Algorithm 2).

One iteration at the current trajectory (xs, us):

1. derivatives: cost derivatives and the dynamics Jacobians ``Fx, Fu`` of all N knots, from one
   batched backend call (:meth:`ShootingProblem.derivatives`);
2. backward pass (t = N-1 … 0), with ``V'`` the value function at t+1::

       Q_x  = l_x  + Fxᵀ V'_x            Q_u  = l_u  + Fuᵀ V'_x
       Q_xx = l_xx + Fxᵀ V'_xx Fx        Q_ux = l_ux + Fuᵀ V'_xx Fx       Q_uu = l_uu + Fuᵀ V'_xx Fu
       k = argmin_{lower <= us+k <= upper} ½ kᵀ (Q_uu + μI) k + Q_uᵀ k   (box QP; or -Q̃_uu⁻¹ Q_u)
       K = -Q̃_uu,ff⁻¹ Q_ux,f on free rows, 0 on clamped rows
       V_x  = Q_x  + Kᵀ Q_uu k + Kᵀ Q_u + Q_uxᵀ k
       V_xx = Q_xx + Kᵀ Q_uu K + Kᵀ Q_ux + Q_uxᵀ K

   (DDP adds the dynamics curvature ``V'_x · F2`` to the Q blocks, see :mod:`solvers.ddp`.)
3. forward pass: nonlinear rollout ``u_t = us_t + α k_t + K_t (x̂_t ⊖ xs_t)`` (clipped to the
   bounds) for step sizes α = 1, ½, …; accept the first with actual reduction ≥ armijo × expected
   reduction ``-(α Σ kᵀQ_u + ½ α² Σ kᵀQ_uu k)``; adapt μ (:mod:`solvers.regularization`).

Stopping: the ∞-norm of the projected gradient ``∂J/∂us`` (adjoint recursion along the current
feasible trajectory; components pushing into an active bound are dropped) below ``tol``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import scipy.linalg as sla

from .box_qp import box_qp
from .line_search import LINE_SEARCHES, Candidates, LineSearchResult, default_alphas, line_search
from .problem import ProblemDerivatives, ShootingProblem
from .regularization import Regularization
from .result import TIMING_KEYS, SolverResult


def _c(a: np.ndarray) -> np.ndarray:
    """float64 C-contiguous (what the compiled kernels are specialised for)."""
    return np.ascontiguousarray(a, dtype=np.float64)


# placeholders for "none" with the dimensions the compiled kernel expects
_NO_C = np.zeros((0, 1, 1))
_NO_T = np.zeros((0, 1, 1, 1))
_NO_GAPS = np.zeros((0, 1))
_NO_BOUNDS = np.zeros((1, 1))


class SolverFailure(RuntimeError):
    """Raised internally when a solve cannot continue; reported in ``SolverResult.reason``."""


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
    the numba backend).
    """

    name = "ilqr"
    multiple_shooting = False
    uses_second_order = False

    def __init__(self, problem: ShootingProblem, box: bool = True, line_search: str = "backtracking",
                 alphas=None, armijo: float = 0.1, reg_init: float = 1e-9, reg_min: float = 1e-9,
                 reg_max: float = 1e10, refresh_gains: bool = True, gap_tol: float = 1e-12,
                 gauss_newton_fallback: bool = True, compiled: bool | None = None, verbose: bool = False):
        if not isinstance(problem, ShootingProblem):
            raise TypeError(f"{type(self).__name__}: expected a ShootingProblem, got {type(problem).__name__}")
        if line_search not in LINE_SEARCHES:
            raise ValueError(f"unknown line_search '{line_search}'; use one of {', '.join(LINE_SEARCHES)}")
        self.problem = problem
        self.box = bool(box)
        self.line_search = line_search
        self.alphas = default_alphas() if alphas is None else np.asarray(alphas, float)
        if self.alphas.ndim != 1 or self.alphas.size == 0 or np.any(self.alphas <= 0) or np.any(self.alphas > 1):
            raise ValueError("alphas must be a non-empty 1-D list of step sizes in (0, 1], largest first")
        self.armijo = float(armijo)
        self.reg_params = dict(mu=reg_init, mu_min=reg_min, mu_max=reg_max)
        Regularization(**self.reg_params)  # validate early
        self.refresh_gains = refresh_gains
        self.gap_tol = float(gap_tol)
        self.gauss_newton_fallback = bool(gauss_newton_fallback)
        self._with_curvature = True
        self.compiled = problem.backend.prefers_compiled_solver if compiled is None else bool(compiled)
        self._kernels = None
        self._rollout_kernel = None     # CompiledRollout, or False when the dynamics are not supported
        self.verbose = verbose

    # ------------------------------------------------------------ public API
    def solve(self, xs_init=None, us_init=None, max_iter: int = 50, tol: float = 1e-6) -> SolverResult:
        """Optimise from an initial guess (default: gravity-compensation controls rolled out from
        x0). ILQR/DDP: with ``us_init`` only, the guess is its open-loop rollout from x0; with
        ``xs_init`` too (a warm start, e.g. ``res.shifted(1)``), the first iteration linearises
        around ``(xs_init, us_init)`` — gaps allowed — and its forward pass rolls out from x0 with
        feedback around the guess (the cheapest of all step sizes, α = 0 included), after which
        every iterate is feasible and the cost decreases monotonically. FDDP starts from
        ``xs_init`` as given and closes the gaps gradually."""
        p = self.problem
        if int(max_iter) != max_iter or max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer, got {max_iter}")
        if not (tol >= 0):
            raise ValueError(f"tol must be >= 0, got {tol}")
        self.timings = dict.fromkeys(TIMING_KEYS, 0.0)
        t_start = time.perf_counter()
        N, nu, ndx = p.horizon, p.nu, p.ndx
        self.K = np.zeros((N, nu, ndx))
        self.k = np.zeros((N, nu))
        self.Vx = np.zeros((N + 1, ndx))
        self.Vxx = np.zeros((N + 1, ndx, ndx))
        self.Qu = np.zeros((N, nu))
        self.Quuk = np.zeros((N, nu))
        self.gaps = np.zeros((N + 1, ndx))
        self.feasible = True
        self.fallbacks = 0
        self.reg = Regularization(**self.reg_params)
        history: list[float] = []
        steps: list[float] = []
        converged, reason = False, ""
        gnorm = np.inf
        it = 0
        try:
            self.xs, self.us = self._initial_trajectory(xs_init, us_init)
            with self._timed("cost"):
                self.cost = float(p.cost(self.xs, self.us))
            if not np.isfinite(self.cost):
                raise SolverFailure("the initial trajectory has a non-finite cost")
            history.append(self.cost)
            derivs = None
            for it in range(max_iter + 1):
                if derivs is None:
                    derivs = self._derivatives()
                    gnorm = self._gradient_norm(derivs) if self.feasible else np.inf
                self._backward_pass_with_regularization(derivs)
                if self.feasible and gnorm <= tol:
                    converged, reason = True, f"projected gradient norm {gnorm:.3e} <= tol {tol:.1e}"
                    break
                if it == max_iter:
                    reason = f"maximum number of iterations ({max_iter}) reached"
                    break
                ls = self._line_search()
                if self.verbose:
                    print(f"[{self.name}] it {it:3d} cost {self.cost:.10e} |g| {gnorm:.3e} mu {self.reg.mu:.1e} "
                          f"alpha {ls.alpha if ls.accepted else 0:.4f} gap {np.abs(self.gaps).max():.1e}")
                if ls.accepted:
                    steps.append(ls.alpha)
                    self._accept_step(ls)
                    history.append(self.cost)
                    self.reg.decrease()
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
        self.timings["total"] = time.perf_counter() - t_start
        if not (np.all(np.isfinite(self.xs)) and np.all(np.isfinite(self.us))):
            converged = False
            reason = reason + "; the returned trajectory contains non-finite values"
        return SolverResult(xs=self.xs.copy(), us=self.us.copy(), K=self.K.copy(), k=self.k.copy(),
                            cost=float(self.cost) if hasattr(self, "cost") else np.nan, cost_history=history,
                            iterations=it, converged=converged, reason=reason, timings=dict(self.timings),
                            solver=self.name, gradient_norm=float(gnorm), gap=self._final_gap(),
                            regularization=self.reg.mu, step_sizes=steps, gauss_newton_fallbacks=self.fallbacks)

    # ------------------------------------------------------------ hooks (FDDP / DDP override)
    def _initial_trajectory(self, xs_init, us_init):
        p = self.problem
        if us_init is None:
            us = np.tile(p.clip_controls(p.gravity_compensation()), (p.horizon, 1))
        else:
            us = np.array(us_init, dtype=float)
            if us.shape != (p.horizon, p.nu) or not np.all(np.isfinite(us)):
                raise ValueError(f"us_init must be a finite ({p.horizon}, {p.nu}) array (horizon, nu), "
                                 f"got shape {us.shape}")
        if self.box:
            us = p.clip_controls(us)
        if xs_init is not None:
            xs = p.state.check(xs_init, "xs_init", "solve").copy()
            if xs.shape != (p.horizon + 1, p.nx):
                raise ValueError(f"xs_init must have shape ({p.horizon + 1}, {p.nx}) (horizon+1, nx), got {xs.shape}")
            # warm start: linearise around the (possibly infeasible) guess; the first forward pass
            # rolls out from x0 with feedback around it, which closes every gap at once
            self.feasible = False
            return xs, us
        c = self._rollout_open_loop(us)
        if not c.ok[0]:
            raise SolverFailure("the initial rollout diverged (non-finite states); give a better us_init")
        return c.xs[0], us

    def _rollout_open_loop(self, us) -> Candidates:
        zero_K = np.zeros_like(self.K)
        xs_nom = np.repeat(self.problem.x0[None], self.problem.horizon + 1, axis=0)
        return self._simulate(np.ones(1), xs_nom, us, np.zeros_like(us), zero_K, with_cost=False)

    def _curvature(self, t: int, Vx_next: np.ndarray, derivs: ProblemDerivatives):
        """Dynamics second-order term ``V'_x · F2`` at knot t over z = (dx, du), (ndx + nu, ndx + nu);
        None for Gauss–Newton (iLQR, or FDDP without ``second_order``)."""
        if not self.uses_second_order or not derivs.dynamics.has_second_order:
            return None
        return derivs.dynamics.curvature(t, Vx_next)

    def _after_derivatives(self, d: ProblemDerivatives) -> None:
        """Gaps ``f̄_0 = x0 ⊖ xs_0``, ``f̄_{t+1} = f(xs_t, us_t) ⊖ xs_{t+1}`` of an infeasible iterate."""
        if self.feasible:
            self.gaps[:] = 0.0
            return
        ss = self.problem.state
        self.gaps[0] = ss.difference(self.xs[0], self.problem.x0)
        self.gaps[1:] = ss.difference(self.xs[1:], d.dynamics.xnext)
        if np.abs(self.gaps).max() <= self.gap_tol:
            self.feasible = True
            self.gaps[:] = 0.0

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
        self.xs, self.us, self.cost = ls.xs, ls.us, ls.cost
        self.feasible = True    # single shooting: every rollout is feasible
        self.gaps[:] = 0.0

    def _final_gap(self) -> float:
        return 0.0

    # ------------------------------------------------------------ stages
    @contextmanager
    def _timed(self, key: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[key] += time.perf_counter() - t0

    def _derivatives(self) -> ProblemDerivatives:
        with self._timed("derivatives"):
            d = self.problem.derivatives(self.xs, self.us, second_order=self.uses_second_order)
        for name, arr in (("running cost derivatives", d.running.lxx), ("terminal cost derivatives", d.terminal.lxx),
                          ("dynamics Jacobians", d.dynamics.Fx), ("dynamics Jacobians", d.dynamics.Fu),
                          ("cost gradient", d.running.lx), ("cost gradient", d.running.lu),
                          ("terminal cost gradient", d.terminal.lx)):
            if not np.all(np.isfinite(arr)):
                t = int(np.argwhere(~np.isfinite(arr))[0][0])
                raise SolverFailure(f"non-finite {name} at knot {t} of the current trajectory")
        if d.dynamics.has_second_order and not (np.all(np.isfinite(d.dynamics.T)) and np.all(np.isfinite(d.dynamics.C))):
            raise SolverFailure("non-finite second-order dynamics derivatives on the current trajectory")
        self._after_derivatives(d)
        return d

    def _gradient_norm(self, d: ProblemDerivatives) -> float:
        """∞-norm of the projected gradient of J(us) along the current feasible trajectory, by the
        adjoint recursion ``λ_N = l_N,x``, ``g_t = l_u + Fuᵀ λ_{t+1}``, ``λ_t = l_x + Fxᵀ λ_{t+1}``."""
        p = self.problem
        lam = d.terminal.lx[0]
        g = np.empty((p.horizon, p.nu))
        Fx, Fu = d.dynamics.Fx, d.dynamics.Fu
        if self.compiled:
            self._compiled().gradient_kernel(_c(Fx), _c(Fu), _c(d.running.lx), _c(d.running.lu), _c(lam), g)
        else:
            for t in range(p.horizon - 1, -1, -1):
                g[t] = d.running.lu[t] + Fu[t].T @ lam
                lam = d.running.lx[t] + Fx[t].T @ lam
        if self.box:
            scale = 1e-9 * (1.0 + np.abs(self.us))
            at_lo = self.us <= p.u_lower + scale
            at_hi = self.us >= p.u_upper - scale
            g = np.where((at_lo & (g > 0)) | (at_hi & (g < 0)), 0.0, g)
        return float(np.abs(g).max()) if g.size else 0.0

    def _backward_pass_with_regularization(self, d: ProblemDerivatives) -> None:
        """Backward pass, raising μ until ``Q_uu + μI`` is positive definite at every knot. With
        second-order terms, an indefinite ``Q_uu`` first falls back to the Gauss–Newton pass at
        the same μ (far from a minimum the curvature ``V'_x·F2`` can be strongly indefinite; near
        it the full pass succeeds and DDP keeps its quadratic convergence)."""
        while True:
            with self._timed("backward"):
                self._with_curvature = True
                failure = self._backward_pass(d, self.reg.mu)
                if failure is not None and self.uses_second_order and self.gauss_newton_fallback:
                    self._with_curvature = False
                    if self._backward_pass(d, self.reg.mu) is None:
                        self.fallbacks += 1
                        failure = None
            if failure is None:
                return
            if not self.reg.increase():
                raise SolverFailure(f"regularization blow-up in the backward pass ({failure}; mu > "
                                    f"{self.reg.mu_max:.1e})")

    def _compiled(self):
        """The compiled kernels (imported on first use: importing them imports numba)."""
        if self._kernels is None:
            from . import riccati_numba
            self._kernels = riccati_numba
        return self._kernels

    def _backward_pass_compiled(self, d: ProblemDerivatives, mu: float) -> str | None:
        """:meth:`_backward_pass` as one compiled call (:func:`solvers.riccati_numba.backward_pass_kernel`)."""
        p = self.problem
        kern = self._compiled()
        run, dyn = d.running, d.dynamics
        box = self.box and p.has_bounds
        curv = self._with_curvature and self.uses_second_order and dyn.has_second_order
        C, T = (dyn.C, dyn.T) if curv else (_NO_C, _NO_T)
        gaps = _NO_GAPS if self.feasible else self.gaps
        lower = p.u_lower - self.us if box else _NO_BOUNDS
        upper = p.u_upper - self.us if box else _NO_BOUNDS
        status, t = kern.backward_pass_kernel(
            _c(dyn.Fx), _c(dyn.Fu), _c(run.lx), _c(run.lu), _c(run.lxx), _c(run.lxu), _c(run.luu),
            _c(d.terminal.lx[0]), _c(d.terminal.lxx[0]), _c(C), _c(T), _c(gaps), float(mu), box,
            _c(lower), _c(upper), _c(self.k), self.K, self.k, self.Qu, self.Quuk, self.Vx, self.Vxx)
        if status == kern.OK:
            return None
        return kern.MESSAGES[status].format(t=t)

    def _backward_pass(self, d: ProblemDerivatives, mu: float) -> str | None:
        """Riccati recursion (module docstring); returns None on success or why it failed."""
        if self.compiled:
            return self._backward_pass_compiled(d, mu)
        p = self.problem
        N, nu, ndx = p.horizon, p.nu, p.ndx
        run, dyn = d.running, d.dynamics
        box = self.box and p.has_bounds
        gaps = None if self.feasible else self.gaps
        Vx = d.terminal.lx[0].copy()
        Vxx = d.terminal.lxx[0].copy()
        if gaps is not None:
            Vx = Vx + Vxx @ gaps[N]
        self.Vx[N], self.Vxx[N] = Vx, Vxx
        eye_u = np.eye(nu)
        k_warm = self.k  # box-QP warm start: the previous iteration's feed-forward (Tassa et al. 2014)
        for t in range(N - 1, -1, -1):
            Fx, Fu = dyn.Fx[t], dyn.Fu[t]
            FxV = Fx.T @ Vxx
            FuV = Fu.T @ Vxx
            Qx = run.lx[t] + Fx.T @ Vx
            Qu = run.lu[t] + Fu.T @ Vx
            Qxx = run.lxx[t] + FxV @ Fx
            Qux = run.lxu[t].T + FuV @ Fx
            Quu = run.luu[t] + FuV @ Fu
            H = self._curvature(t, Vx, d) if self._with_curvature else None
            if H is not None:
                Qxx = Qxx + H[:ndx, :ndx]
                Qux = Qux + H[ndx:, :ndx]
                Quu = Quu + H[ndx:, ndx:]
            Quu = 0.5 * (Quu + Quu.T)
            Quu_reg = Quu + mu * eye_u
            K = np.zeros((nu, ndx))
            if box:
                res = box_qp(Quu_reg, Qu, p.u_lower - self.us[t], p.u_upper - self.us[t], x0=k_warm[t])
                if not res.ok:
                    return f"Q_uu + mu I not positive definite at knot {t}"
                k = res.x
                if res.chol is not None and res.free.any():
                    K[res.free] = -sla.cho_solve(res.chol, Qux[res.free], check_finite=False)
            else:
                try:
                    c = sla.cho_factor(Quu_reg, check_finite=False)
                except np.linalg.LinAlgError:
                    return f"Q_uu + mu I not positive definite at knot {t}"
                if not np.all(np.isfinite(c[0])):
                    return f"non-finite Q_uu at knot {t}"
                k = -sla.cho_solve(c, Qu, check_finite=False)
                K = -sla.cho_solve(c, Qux, check_finite=False)
            Quuk = Quu @ k
            Vx = Qx + K.T @ Quuk + K.T @ Qu + Qux.T @ k
            Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
            Vxx = 0.5 * (Vxx + Vxx.T)
            if gaps is not None:
                Vx = Vx + Vxx @ gaps[t]
            if not (np.all(np.isfinite(Vx)) and np.all(np.isfinite(Vxx))):
                return f"non-finite value function at knot {t}"
            self.K[t], self.k[t], self.Qu[t], self.Quuk[t] = K, k, Qu, Quuk
            self.Vx[t], self.Vxx[t] = Vx, Vxx
        return None

    # ------------------------------------------------------------ forward pass
    def _line_search(self):
        if not self.feasible:
            return self._warm_start_step()
        return line_search(self._rollout, self._accept_candidate, self.alphas, self.line_search)

    def _warm_start_step(self) -> LineSearchResult:
        """First step from an infeasible warm start: roll out from x0 with the feedback policy
        around the guess. The full step is taken when it costs no more than α = 0 (pure tracking
        of the guess) — the usual case in MPC, two rollouts; otherwise every other step size is
        rolled out too (one batch) and the cheapest of all is kept. The iterate is feasible from
        then on."""
        first = np.array([self.alphas[0], 0.0])
        c = self._rollout(first)
        if c.ok[0] and (not c.ok[1] or c.cost[0] <= c.cost[1]):
            return LineSearchResult(True, float(first[0]), c.xs[0], c.us[0], float(c.cost[0]), 2)
        rest = self._rollout(self.alphas[1:]) if self.alphas.size > 1 else None
        alphas = first if rest is None else np.concatenate([first, self.alphas[1:]])
        ok = c.ok if rest is None else np.concatenate([c.ok, rest.ok])
        if not ok.any():
            return LineSearchResult(False, 0.0, None, None, np.inf, alphas.size)
        cost = c.cost if rest is None else np.concatenate([c.cost, rest.cost])
        s = int(np.argmin(np.where(ok, cost, np.inf)))
        src, j = (c, s) if s < 2 else (rest, s - 2)
        return LineSearchResult(True, float(alphas[s]), src.xs[j], src.us[j], float(cost[s]), alphas.size)

    def _accept_candidate(self, alpha: float, cost_try: float) -> bool:
        return self._accept(alpha, cost_try, self._last_candidates_xs.get(alpha))

    def _rollout(self, alphas: np.ndarray) -> Candidates:
        c = self._simulate(alphas, self.xs, self.us, self.k, self.K)
        self._last_candidates_xs = {float(a): c.xs[s] for s, a in enumerate(alphas)}
        return c

    def _start_states(self, alphas: np.ndarray, t: int, xnext: np.ndarray) -> np.ndarray:
        """State x̂_t of each candidate given the dynamics output ``xnext`` (single shooting: equal)."""
        return xnext

    def _rollout_gaps(self) -> np.ndarray | None:
        """Gaps the forward pass closes (FDDP on an infeasible iterate); None: single shooting."""
        return None

    def _compiled_rollout(self):
        """The compiled forward pass (:mod:`solvers.rollout_numba`) when this solve uses compiled
        kernels and the dynamics support it (:func:`solvers.rollout_numba.compiled_rollout_available`), else None."""
        if not self.compiled:
            return None
        if self._rollout_kernel is None:
            from .rollout_numba import CompiledRollout, compiled_rollout_available
            p = self.problem
            self._rollout_kernel = CompiledRollout(p) if compiled_rollout_available(p) else False
        return self._rollout_kernel or None

    def _simulate(self, alphas, xs, us, k, K, with_cost: bool = True) -> Candidates:
        """Batched closed-loop rollout of ``u = us + α k + K (x̂ ⊖ xs)`` for all step sizes α."""
        p = self.problem
        S, N = alphas.shape[0], p.horizon
        clip = self.box and p.has_bounds
        compiled = self._compiled_rollout()
        if compiled is not None:
            with self._timed("forward"):
                X, U, ok = compiled.run(p.x0, alphas, xs, us, k, K, p.u_lower, p.u_upper, clip, self._rollout_gaps())
            return self._score(X, U, ok, with_cost)
        X = np.empty((S, N + 1, p.nx))
        U = np.empty((S, N, p.nu))
        ok = np.ones(S, dtype=bool)
        with self._timed("forward"), np.errstate(all="ignore"):
            xnext = np.repeat(p.x0[None], S, axis=0)
            for t in range(N):
                X[:, t] = self._start_states(alphas, t, xnext)
                dx = p.state.difference(xs[t], X[:, t])
                u = us[t] + alphas[:, None] * k[t] + dx @ K[t].T
                if clip:
                    u = np.clip(u, p.u_lower, p.u_upper)
                bad = ~np.all(np.isfinite(u), axis=-1)
                if bad.any():
                    ok &= ~bad
                    u[bad] = us[t]
                U[:, t] = u
                xnext = p.step(X[:, t], u, t)
                bad = ~np.all(np.isfinite(xnext), axis=-1)
                if bad.any():  # keep the batch finite; the candidate is marked failed
                    ok &= ~bad
                    xnext[bad] = X[bad, t]
            X[:, N] = self._start_states(alphas, N, xnext)
        return self._score(X, U, ok, with_cost)

    def _score(self, X, U, ok, with_cost: bool) -> Candidates:
        """Total cost of each rolled-out candidate (inf where not requested); non-finite ones fail."""
        p = self.problem
        S = X.shape[0]
        cost = np.full(S, np.inf)
        if with_cost:
            with self._timed("cost"), np.errstate(all="ignore"):
                cost = np.asarray(p.cost(X, U), float).reshape(S)
            ok &= np.isfinite(cost)
        return Candidates(X, U, cost, ok)
