"""The loop every sampling planner shares: perturb a nominal control spline, roll all samples out
as one batch, score them with the problem's costs, update the nominal (the planner's rule).

A planner keeps the solver protocol of :class:`~solvers.ILQR` that the MPC controller drives —
``solve(xs_init, us_init, max_iter, tol)`` returning a :class:`~solvers.SolverResult`,
``warmup(progress, extra)`` — with zero feedback gains (a sampling plan is open loop) and
no gradient (``gradient_norm`` NaN): one iteration is one batch of K rollouts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from dynamics.inputs import sum_is_finite

from ..ilqr import refuse_constraints
from ..problem import ShootingProblem
from ..result import TIMING_KEYS, SolverResult
from ..warmup import WarmupResult
from .mujoco_rollout import MujocoRollout
from .policy import GravityDampingFeedback, PDSetpoints, control_scale
from .rollouts import CompiledSampleRollouts, rollout_batch, rollout_costs
from .spline import ControlSpline

POLICIES = ("auto", "pd", "gravity_damping", "open_loop")
ROLLOUTS = ("model", "mujoco")


def _compiled_rollouts(problem: ShootingProblem) -> CompiledSampleRollouts | None:
    """The compiled rollouts of ``problem`` when its backend prefers compiled solvers and
    :func:`~solvers.rollout_numba.compiled_rollout_available` (free Euler dynamics), else None."""
    if not problem.backend.prefers_compiled_solver:
        return None
    from ..rollout_numba import compiled_rollout_available  # imports numba: only then
    return CompiledSampleRollouts(problem) if compiled_rollout_available(problem) else None


def _positive_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


class SamplingPlanner:
    """Base of the sampling planners (see the module docstring).

    problem: the shooting problem (any dynamics its knots describe; the rollouts call the knots'
    ``step`` on all samples at once, so the backend sees batches of K states). samples: K rollouts
    per iteration, the nominal included (≥ 2). noise: exploration standard deviation relative to
    each control's half range ``(u_upper − u_lower)/2`` where it is finite, else to
    ``max(1, |default control|)`` [N m or N]. knots: spline knots over the horizon (≤ N);
    interpolation: ``"zero"`` or ``"linear"``. seed: of the planner's ``numpy.random.Generator``
    (the sequence of solves is reproducible from it). box: clip every sample to the control bounds.
    policy: what the sampled spline drives (:mod:`solvers.sampling.policy`) — ``"pd"``: joint
    position set-points of a PD law around the torques that hold the configuration still (gravity
    compensation on a fixed base, the standing torques on the contacts of a floating base with
    contact dynamics, else the default controls), evaluated along each rollout; the noise is then relative to each joint's half
    range and the set-points are clipped to the joint ranges (pd_stiffness: ω·dt of the PD law,
    default 0.2 on a fixed base, 1.0 on a floating base,
    pd_damping_ratio: its ζ); ``"gravity_damping"``: torque offsets on ``B⁻¹ (g(q) − D v)``
    (damping: the fraction κ of each joint's velocity it removes per knot; fixed-base robots with
    one actuator per dof); ``"open_loop"``: the controls themselves (the published algorithms);
    ``"auto"`` (default): ``"pd"`` when every actuator drives its own joint, else ``"open_loop"``.
    With a feedback the result's gains are the feedback's ``∂u/∂x``. rollout: ``"model"`` (the
    problem's own knot dynamics, batched on its backend; all rollouts in one compiled call,
    :class:`~solvers.sampling.rollouts.CompiledSampleRollouts`, where the backend prefers compiled
    solvers and the dynamics allow it) or ``"mujoco"``: MuJoCo steps the
    rollouts with its own contact model (:mod:`solvers.sampling.mujoco_rollout`; legged robots
    without a contact schedule; knot spacings must be multiples of MuJoCo's timestep), on
    ``rollout_threads`` threads.
    """

    name = "sampling"
    #: the MPC controller passes no line-search or gain options to a derivative-free planner
    derivative_free = True
    uses_second_order = False

    def __init__(self, problem: ShootingProblem, samples: int = 64, noise: float = 0.02, knots: int = 6,
                 interpolation: str = "linear", seed: int = 0, box: bool = True, policy: str = "auto",
                 damping: float = 0.1, pd_stiffness: float | None = None, pd_damping_ratio: float = 1.0,
                 rollout: str = "model", rollout_threads: int = 1):
        if not isinstance(problem, ShootingProblem):
            raise TypeError(f"{type(self).__name__}: expected a ShootingProblem, got {type(problem).__name__}")
        refuse_constraints(type(self).__name__, problem)     # the rollouts' costs would ignore them
        self.problem = problem
        self.samples = _positive_int("samples", samples, 2)
        if isinstance(noise, bool) or not isinstance(noise, (int, float, np.number)) or not (0 < noise < math.inf):
            raise ValueError(f"noise must be a positive finite number (relative to the control range), got {noise!r}")
        self.noise = float(noise)
        self.spline = ControlSpline(problem.horizon, min(_positive_int("knots", knots, 1), problem.horizon),
                                    interpolation)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.box = bool(box)
        if policy not in POLICIES:
            raise ValueError(f"unknown policy '{policy}'; choose one of {', '.join(POLICIES)}")
        if policy == "auto":
            try:
                PDSetpoints(problem, pd_stiffness, pd_damping_ratio)
                policy = "pd"
            except ValueError as e:
                if "pd_" in str(e):     # a bad option, not an unsuitable robot
                    raise
                policy = "open_loop"
        self.policy = policy
        if rollout not in ROLLOUTS:
            raise ValueError(f"unknown rollout '{rollout}'; choose one of {', '.join(ROLLOUTS)}")
        self.rollout = rollout
        self._rollout = (MujocoRollout(problem, rollout_threads) if rollout == "mujoco" else
                         _compiled_rollouts(problem) or rollout_batch)
        self.feedback = (PDSetpoints(problem, pd_stiffness, pd_damping_ratio) if policy == "pd" else
                         GravityDampingFeedback(problem, damping) if policy == "gravity_damping" else None)
        self.sigma = self.noise * (self.feedback.scale() if self.feedback is not None else control_scale(problem))
        # bounds of the knot values: the controls' (open loop), the joint ranges (pd), none (offsets)
        self._knot_bounds = ((problem.u_lower, problem.u_upper) if self.feedback is None else self.feedback.bounds())
        K, N, P = self.samples, problem.horizon, self.spline.knots
        self._theta = np.empty((K, P, problem.nu))
        self._us = np.empty((K, N, problem.nu))
        self._xs = np.empty((K, N + 1, problem.nx))
        self.K = np.zeros((N, problem.nu, problem.ndx))      # no feedback: the plan is open loop
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self.k = np.zeros((N, problem.nu))

    # ------------------------------------------------------------ the planner's rule
    def _begin(self, nominal: np.ndarray) -> None:
        """Called once per solve with the warm-start knots (P, nu)."""

    def _propose(self, nominal: np.ndarray, out: np.ndarray) -> None:
        """Sample knot values into out (K, P, nu); row 0 is the nominal itself."""
        out[0] = nominal
        out[1:] = nominal + self.rng.standard_normal(out[1:].shape) * self.sigma

    def _update(self, theta: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, int | None]:
        """The new nominal knots (P, nu) from the samples theta (K, P, nu) and their costs J (K,),
        and the index of the sample it is (its rollout is known), or None for a new point."""
        raise NotImplementedError

    # ------------------------------------------------------------ public API
    def solve(self, xs_init=None, us_init=None, max_iter: int = 1, tol: float = 0.0) -> SolverResult:
        """``max_iter`` iterations (batches of K rollouts) from the nominal ``us_init`` (N, nu) (a
        warm start, fitted by the spline), default the problem's default controls held constant
        (with feedback: zero offsets). xs_init (N+1, nx): the warm start's states, where the
        feedback's offsets are taken (default: us_init's rollout); every rollout starts at x0.
        tol: converged (stop) when the K samples' costs all lie within ``tol·max(1, |J|)`` of each
        other (the exploration noise no longer changes the cost); 0 runs every iteration."""
        p = self.problem
        if int(max_iter) != max_iter or max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer, got {max_iter}")
        if not (tol >= 0):
            raise ValueError(f"tol must be >= 0, got {tol}")
        timings = dict.fromkeys(TIMING_KEYS, 0.0)
        t_start = time.perf_counter()
        if self.feedback is not None:
            self.feedback.prepare()     # its gains at the current x0
        us0 = self._warm_start(xs_init, us_init)
        nominal = self.spline.fit(us0)
        if self.box and self._knot_bounds is not None:
            nominal = np.clip(nominal, *self._knot_bounds)
        self._begin(nominal)
        history: list[float] = []
        xs_nom = us_nom = None
        J_nom = np.inf
        reason, it, converged = "", 0, False
        for it in range(1, max_iter + 1):
            theta = self._theta
            self._propose(nominal, theta)
            if self.box and self._knot_bounds is not None:     # the rollout clips what it applies
                np.clip(theta, *self._knot_bounds, out=theta)
            J = self._evaluate(theta, timings)
            if not np.isfinite(J).any():
                it -= 1
                reason = "every rollout diverged or had a non-finite cost; the nominal plan is kept"
                break
            if not history:
                history.append(float(J[0]))
            nominal, known = self._update(theta, J)
            if known is not None:       # one of the samples: its rollout is known
                xs_nom, us_nom, J_nom = self._xs[known].copy(), self._us[known].copy(), float(J[known])
            else:                       # a new point (a weighted mean): one more rollout
                xs_nom, us_nom, J_nom = self._nominal_rollout(nominal, timings)
            history.append(J_nom)
            spread = float(J.max() - J.min())
            if tol > 0 and spread <= tol * max(1.0, abs(J_nom)):
                converged = True
                reason = f"sample cost spread {spread:.3e} <= tol·max(1, |J|) after {it} iterations"
                break
        if not reason:
            reason = f"maximum number of iterations ({max_iter}) reached"
        if xs_nom is None:
            us_nom = self.spline.controls(nominal)
            xs_nom = np.full((p.horizon + 1, p.nx), np.nan)
            if max_iter == 0:
                xs_nom, us_nom, J_nom = self._nominal_rollout(nominal, timings)
        timings["total"] = time.perf_counter() - t_start
        ok = bool(np.isfinite(J_nom)) and sum_is_finite(xs_nom)
        # the knots' values per interval along the returned rollout, for the next warm start
        self._last = (xs_nom.copy(), self.spline.controls(nominal)) if ok and self.feedback is not None else None
        K = self.feedback.gains(xs_nom) if ok and self.feedback is not None else self.K.copy()
        return SolverResult(xs=xs_nom, us=us_nom, K=K, k=self.k.copy(), cost=J_nom,
                            cost_history=history, iterations=it if ok else 0, converged=converged and ok,
                            reason=reason if ok else reason + "; the returned trajectory is not finite",
                            timings=timings, solver=self.name, gradient_norm=float("nan"))

    def warmup(self, progress: Callable[[str, int, int | None], None] | None = None,
               extra: Callable[[], None] | None = None) -> WarmupResult:
        """One throw-away iteration (compiles, or loads from numba's cache, the backend's batched
        forward dynamics and the cost kernels at this batch size), then ``extra``. The generator's
        state is restored, so warming up does not change the sequence of samples."""
        t0 = time.perf_counter()
        result = WarmupResult(0.0)
        state = self.rng.bit_generator.state
        be = self.problem.backend

        def run() -> None:
            self.solve(max_iter=1)
            if extra is not None:
                extra()
        try:
            if getattr(be, "warmup_by_use", False):
                from dynamics.kernel_cache import report_compiles

                def on_compile(name: str) -> None:
                    result.compiled.append(name)
                    if progress is not None:
                        progress(name, len(result.compiled), None)
                with report_compiles(on_compile):
                    run()
            else:
                be.warmup(self.problem.model, progress=progress)
                run()
        finally:
            self.rng.bit_generator.state = state
        result.seconds = time.perf_counter() - t0
        return result

    # ------------------------------------------------------------ internals
    def _warm_start(self, xs_init, us_init) -> np.ndarray:
        """What the spline is fitted to (N, nu): the controls (open loop) or their offsets from the
        feedback along the warm start's states (xs_init, else us_init's open-loop rollout)."""
        p = self.problem
        if us_init is None:
            if self.feedback is not None:
                return np.tile(self.feedback.default(), (p.horizon, 1))     # the feedback alone: hold still
            return np.tile(p.clip_controls(p.default_controls()), (p.horizon, 1))
        us0 = np.array(us_init, dtype=float)
        if us0.shape != (p.horizon, p.nu) or not sum_is_finite(us0):
            raise ValueError(f"us_init must be a finite ({p.horizon}, {p.nu}) array (horizon, nu), got shape "
                             f"{us0.shape}")
        if self.feedback is None:
            return us0
        if xs_init is None:
            xs = p.rollout(us0)
        else:
            xs = p.state.check(xs_init, "xs_init", "solve")
            if xs.shape != (p.horizon + 1, p.nx):
                raise ValueError(f"xs_init must have shape ({p.horizon + 1}, {p.nx}) (horizon+1, nx), got {xs.shape}")
        if not sum_is_finite(xs):
            return np.tile(self.feedback.default(), (p.horizon, 1))
        shifted = self._shifted_last(xs)
        if shifted is not None:
            return shifted
        offsets = self.feedback.offsets(xs, us0)
        if p.horizon > 1:
            # knot 0: the MPC puts the measured state in xs_init[0] beside the old plan's control,
            # and inverting the feedback there moves the set-point (offset) with the tracking
            # error, cancelling the feedback's correction; the next knot's value is kept instead
            offsets[0] = offsets[1]
        return offsets

    def _shifted_last(self, xs: np.ndarray) -> np.ndarray | None:
        """The last solve's spline values (N, nu) shifted in time by δ knots, when the warm start's
        states xs[1:] (N, nx) are the last returned states sampled δ knots later (linear
        interpolation, held after the end), as the MPC controller resamples its plan; else None.
        Inverting the feedback instead loses the set-points where the controls were clipped."""
        if self._last is None:
            return None
        xl, sl = self._last
        N = self.problem.horizon
        if xs.shape != xl.shape or N < 2:
            return None
        scale = np.maximum(1.0, np.abs(xl).max(axis=0))
        tol = 1e-6 * np.sqrt(xl.shape[1])
        for n in range(N):                       # δ = n + f, f in [0, 1]: xs[k] from xl[k + n], xl[k + n + 1]
            a = xl[np.minimum(np.arange(1, N + 1) + n, N)]
            b = xl[np.minimum(np.arange(2, N + 2) + n, N)]
            d, r = (b - a) / scale, (xs[1:] - a) / scale
            dd = float(np.sum(d * d))
            f = float(np.clip(np.sum(d * r) / dd, 0.0, 1.0)) if dd > 0 else 0.0
            if np.sqrt(np.sum((r - f * d) ** 2) / N) <= tol:
                t = np.minimum(np.arange(N) + n + f, N - 1.0)
                i = np.minimum(np.floor(t).astype(int), N - 2)
                w = (t - i)[:, None]
                return (1.0 - w) * sl[i] + w * sl[i + 1]
        return None

    def _evaluate(self, theta: np.ndarray, timings: dict) -> np.ndarray:
        """Costs (K,) of the K knot vectors theta, their applied controls and states left in
        self._us / self._xs."""
        t0 = time.perf_counter()
        np.matmul(self.spline.W, theta, out=self._us)
        self._rollout(self.problem, self._us, self._xs, self.feedback)
        t1 = time.perf_counter()
        J = rollout_costs(self.problem, self._xs, self._us)
        timings["forward"] += t1 - t0
        timings["cost"] += time.perf_counter() - t1
        return J

    def _nominal_rollout(self, nominal: np.ndarray, timings: dict) -> tuple[np.ndarray, np.ndarray, float]:
        """Rollout, applied controls and cost of one knot vector (P, nu)."""
        t0 = time.perf_counter()
        us = self.spline.controls(nominal)[None]
        xs = self._rollout(self.problem, us, np.empty((1, self.problem.horizon + 1, self.problem.nx)), self.feedback)
        t1 = time.perf_counter()
        J = float(rollout_costs(self.problem, xs, us)[0])
        timings["forward"] += t1 - t0
        timings["cost"] += time.perf_counter() - t1
        return xs[0], us[0], J
