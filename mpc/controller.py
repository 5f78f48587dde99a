"""Receding-horizon controller: a shooting problem re-solved from each measured state.

At every update the controller (1) sets the measured state as the initial state, (2) moves the
task's references to the current time (``task.update_problem``, which may read that state), (3) warm-starts the
solver with the previous plan shifted to the current time (:meth:`mpc.plan.Plan.resample`: an exact
shift by ``n`` knots when the elapsed time is ``n·dt``, interpolated otherwise; the knots past its
end take the task's :meth:`tasks.Task.nominal_controls` when it gives them), (4) runs a few
solver iterations and (5) returns a :class:`mpc.plan.Plan`: feed-forward controls, state
trajectory and the Riccati feedback gains, which the simulator applies between updates. The plan
saturates its command at the problem's control bounds (the policy respects the box).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from dynamics.backend import default_backend_name, get_backend
from dynamics.inputs import sum_is_finite
from solvers import ILQR
from solvers import SOLVERS as SOLVER_CLASSES
from tasks.base import Task

from .plan import Plan, checked_bounds

SOLVERS = {name: cls.__name__ for name, cls in SOLVER_CLASSES.items()}
STAGES = ("derivatives", "backward", "forward", "cost")
_TIMED = (*STAGES, "total")
_TIMED_KEYS = frozenset(_TIMED)
INTEGRATORS = ("euler", "rk4")
SECOND_ORDER = ("auto", "analytical", "fd", "complex")
LINE_SEARCHES = ("backtracking", "parallel")


class _KnotSpacing(NamedTuple):
    """What the controller derives from a problem's knot times (:meth:`MPC._knot_spacing_of`)."""

    dts: np.ndarray                 # (N,) the problem's knot times [s] (read-only, of its knot structure)
    uniform: bool                   # every knot dt apart
    timed: np.ndarray | None        # (N,) the knots that take time (None: all; impulse knots take none)
    kept: np.ndarray | None         # (N+1,) the states a plan keeps: the timed knots' and the last (None: all)
    plan_knots: np.ndarray | None   # (N+1,) how many timed knots precede each knot: the knot of a plan dt
                                    # apart it starts at, from the horizon's (None: a timed knot not dt long)
    starts: np.ndarray              # (N,) the running knots' start times from the horizon's [s]


@dataclass
class UpdateRecord:
    """Bookkeeping of one solve. Times in s: ``t`` (sim time of the measured state), ``wall``
    (wall-clock time of the whole update, problem set-up and warm start included), ``timings``
    (solver stage split: derivatives, backward, forward, cost, total), ``iterations`` (solver
    iterations run), ``cost`` (final cost), ``converged``, ``reason`` (solver's stop reason),
    ``fallback`` (the solve failed before its first iteration or returned non-finite values, so
    the previous plan was kept). With a backend that emulates hardware (``Backend.simulated_time``:
    fpga-sim), ``simulated_s`` is the emulated calls' time by the hardware model and
    ``emulation_wall_s`` what the host spent emulating them; the real-time runner charges
    ``wall - emulation_wall_s + simulated_s`` as the update's latency."""

    t: float
    wall: float
    timings: dict = field(default_factory=dict)
    iterations: int = 0
    cost: float = float("nan")
    converged: bool = False
    reason: str = ""
    fallback: bool = False
    simulated_s: float | None = None
    emulation_wall_s: float | None = None

    def as_info(self) -> dict:
        """The record as the plan's ``info`` dict (a shallow copy: ``dataclasses.asdict``'s deep
        copy cost a measurable part of a warm update)."""
        d = dict(self.__dict__)
        d["timings"] = dict(self.timings)
        return d


def _solver_class(name: str) -> type[ILQR]:
    key = str(name).lower()
    if key not in SOLVERS:
        raise ValueError(f"unknown solver '{name}'; choose one of {', '.join(SOLVERS)}")
    return SOLVER_CLASSES[key]


def _positive(name: str, value, integer: bool = False):
    ok = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if not ok or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ValueError(f"MPC: {name} must be {kind}, got {value!r}")
    return int(value) if integer else float(value)


class MPC:
    """Model-predictive controller for a task (see ``tasks``).

    task: the task (model, costs, references); solver: ``"ilqr"``, ``"ddp"``, ``"fddp"``, ``"csqp"``
    or ``"alddp"`` (hard constraints), ...; None: the task's own (``task.defaults.solver``, e.g. csqp for
    the legged tasks' hard cones; ``"ddp"`` for a task without defaults);
    backend: dynamics backend name, None for :func:`dynamics.default_backend_name` (``"numba"``
    when numba imports: compiled dynamics and solver kernels, call :meth:`warmup` once before
    timing; else ``"numpy"``, the reference); horizon: number of knots N; dt: knot spacing [s];
    iterations_per_update: solver iterations per update (the maximum when ``time_budget`` is set);
    time_budget: optional wall-clock budget per update [s] — no new iteration is started once the
    estimated finish would exceed it (at least one iteration is run); initial_iterations:
    iterations of the first solve (:meth:`start`); feedback: apply the Riccati gains between
    updates (False gives an open-loop plan, for comparison); tol: solver tolerance (a solve stops
    when the projected gradient norm is below it; 0 runs every iteration); refresh_gains: after
    the last iteration of an update, re-linearise at the accepted trajectory and recompute the
    gains (one more derivative stage and backward pass per update; off by default, as in
    Crocoddyl-based MPC: the gains of the update's last backward pass are used); box: the solver
    respects the problem's control bounds (box-QP backward pass; False: unconstrained QP — the
    command is still saturated at the bounds);
    line_search: ``"backtracking"`` or ``"parallel"`` (all step sizes rolled out as one batch);
    integrator: ``"euler"`` (semi-implicit) or ``"rk4"``; second_order: DDP's source of ``∂²f``,
    ``"auto"``, ``"analytical"``, ``"fd"`` or ``"complex"``. integrator and second_order go to
    ``task.build_problem`` (only when they differ from the defaults, so tasks whose
    ``build_problem`` takes no solver options keep working). solver_options: more keyword
    arguments of the solver's constructor (the sampling planners' ``samples``, ``noise``, ``seed``…;
    ``"sampling"``, ``"mppi"`` and ``"cem"`` are :mod:`solvers.sampling`).
    """

    def __init__(self, task, solver: str | None = None, backend: str | None = None, horizon: int = 32, dt: float = 0.01,
                 iterations_per_update: int = 1, time_budget: float | None = None, initial_iterations: int = 50,
                 feedback: bool = True, tol: float = 1e-6, refresh_gains: bool = False, box: bool = True,
                 line_search: str = "backtracking", integrator: str = "euler", second_order: str = "auto",
                 latency_compensation: float | str | None = None, solver_options: dict | None = None):
        self.task = task
        if not (latency_compensation is None or latency_compensation == "auto"
                or (isinstance(latency_compensation, (int, float)) and latency_compensation >= 0)):
            raise ValueError(f"MPC: latency_compensation must be None, 'auto' or a time >= 0 [s], got "
                             f"{latency_compensation!r}")
        self.latency_compensation = latency_compensation
        self._latency_estimate: float | None = None
        self._predictors: dict = {}
        self.model = task.model
        if solver is None:
            solver = getattr(getattr(task, "defaults", None), "solver", None) or "ddp"
        self.solver_name = str(solver).lower()
        cls = _solver_class(solver)
        for name, value, allowed in (("line_search", line_search, LINE_SEARCHES),
                                     ("integrator", integrator, INTEGRATORS),
                                     ("second_order", second_order, SECOND_ORDER)):
            if value not in allowed:
                raise ValueError(f"MPC: unknown {name} '{value}'; choose one of {', '.join(allowed)}")
        # raises a clear error for unknown/unavailable backends
        self.backend = get_backend(default_backend_name() if backend is None else backend)
        self.horizon = _positive("horizon", horizon, integer=True)
        self.dt = _positive("dt", dt)
        self.iterations_per_update = _positive("iterations_per_update", iterations_per_update, integer=True)
        self.initial_iterations = _positive("initial_iterations", initial_iterations, integer=True)
        self.time_budget = None if time_budget is None else _positive("time_budget", time_budget)
        self.feedback = bool(feedback)
        if isinstance(tol, bool) or not isinstance(tol, (int, float, np.number)) or not (0 <= tol < math.inf):
            raise ValueError(f"MPC: tol must be a finite number >= 0 (0: always run every iteration), got {tol!r}")
        self.tol = float(tol)
        self.box = bool(box)
        self.line_search = line_search
        self.integrator = integrator
        self.second_order = second_order
        self.refresh_gains = bool(refresh_gains)
        x0 = np.asarray(task.initial_state(), float)
        opts = {k: v for k, v, d in (("integrator", integrator, "euler"), ("second_order", second_order, "auto"))
                if v != d}
        self.problem = task.build_problem(x0, self.horizon, self.dt, backend=self.backend, **opts)
        # a derivative-free (sampling) planner has no line search and no gains to refresh
        opts = (dict(box=self.box) if getattr(cls, "derivative_free", False) else
                dict(box=self.box, line_search=self.line_search, refresh_gains=self.refresh_gains))
        self.solver = cls(self.problem, **opts, **dict(solver_options or {}))
        self.records: list[UpdateRecord] = []
        self.initial_record: UpdateRecord | None = None
        self.plan: Plan | None = None
        # the warm start of every update is written here (the solver copies it into its own arrays)
        nx, nu = self.problem.nx, self.problem.nu
        self._warm = (np.empty((self.horizon + 1, nx)), np.empty((self.horizon, nu)))
        self._bounds: tuple = ()        # (problem.u_lower, problem.u_upper, their checked read-only copies)
        self._knot_times: _KnotSpacing | None = None     # of the problem's knot times (_knot_spacing_of)

    # ----------------------------------------------------------------- control loop
    def warmup(self, progress=None) -> float:
        """Compile (first run on this machine) or load from numba's on-disk cache every kernel the
        control loop uses — the backend's dynamics kernels and, with the ``numba`` backend, the
        solver's compiled backward pass, rollout and cost terms, and (with latency compensation)
        the state predictor's step — so that no update pays for compilation
        (:meth:`solvers.ILQR.warmup`, :mod:`solvers.warmup`); also at the task's
        :meth:`~tasks.Task.warmup_times` (a gait's swing and impulse knots; the trot's: every knot time
        of its first cycle, which also builds the knot structures the loop meets).

        progress: optional ``progress(label, done, total)``: for a backend compiled on first use
        (numba) called with each kernel numba starts compiling (``total`` None: not known in
        advance; not called when every kernel loads from the cache), else before each step of the
        backend's warm-up. Returns the seconds it took. Leaves no state behind (the first plan is
        still made by :meth:`start`)."""
        def predict_one_step() -> None:
            p = self.problem
            x0, u = np.asarray(p.x0, float), p.clip_controls(p.default_controls())
            self._predictor(self.dt).step(x0, u)

        def extra() -> None:
            # the state-space interpolation of a warm start laid on impulse knots (Plan.sample)
            s, x0 = self.problem.state, np.asarray(self.problem.x0, float)
            s.integrate(np.stack([x0, x0]), s.difference(np.stack([x0, x0]), np.stack([x0, x0])))
            if self.latency_compensation is not None:
                predict_one_step()
        seconds = self.solver.warmup(progress=progress, extra=extra).seconds
        times = tuple(self.task.warmup_times())
        if times:
            # the knot kinds a gait's problem takes later (swing, touchdown impulse): solved once
            # per knot structure here (a structure met again needs only the task's update, which
            # fills its caches), then the problem is set back to t = 0
            seen = {id(self.problem.structure)}
            try:
                for t in times:
                    self.task.update_problem(self.problem, float(t))
                    if id(self.problem.structure) in seen:
                        continue
                    seen.add(id(self.problem.structure))
                    seconds += self.solver.warmup(progress=progress).seconds
            finally:
                self.task.update_problem(self.problem, 0.0)
        return seconds

    def start(self, t: float, x) -> Plan:
        """First plan from state ``x`` at time ``t``: ``initial_iterations`` iterations from the
        solver's default guess (gravity-compensating controls rolled out from ``x``). When that
        solve cannot take a single step or returns non-finite values, it is retried from ``x``
        held at every knot with the default controls (the record's ``reason`` says so); if that
        fails too, a RuntimeError names both failures. Not added to :attr:`records`; its record
        is :attr:`initial_record`."""
        x = np.asarray(x, float)
        plan, rec = self._solve(t, x, None, None, self.initial_iterations, budget=None)
        if plan is None:
            # the default guess failed (e.g. a legged robot's standing torques rolled out open loop
            # from a perturbed state: the posture is unstable under constant torques and the rollout
            # diverges): retry from the measured state held at every knot, which a multiple-shooting
            # solver takes with gaps and a single-shooting one rolls out with feedback around
            first = rec.reason or "it returned non-finite values"
            p = self.problem
            xs_hold = np.repeat(x[None], p.horizon + 1, axis=0)
            us_hold = np.repeat(p.default_controls()[None], p.horizon, axis=0)
            try:
                plan, rec = self._solve(t, x, xs_hold, us_hold, self.initial_iterations, budget=None)
                second = None if plan is not None else rec.reason or "it returned non-finite values"
            except ValueError as e:     # non-finite values or a rank-deficient contact inside the solver
                plan, second, cause = None, f"{type(e).__name__}: {e}", e
            else:
                cause = None
            if plan is None:
                raise RuntimeError(f"MPC: the first solve failed from the solver's initial guess ({first}) and "
                                   f"from the measured state held over the horizon ({second}); start from a "
                                   f"state closer to the task's initial state") from cause
            rec.reason = f"{rec.reason} (retried from the held state: the solver's own guess failed: {first})"
            plan.info["reason"] = rec.reason
        self.initial_record = rec
        self.plan = plan
        return plan

    def update(self, t: float, x) -> Plan:
        """Re-plan from the state ``x`` (nq+nv,) measured at time ``t`` [s]; returns the new plan.

        With ``latency_compensation`` (a time [s], or ``"auto"``: a running estimate of this
        controller's own update time), the plan is computed for the moment it will be applied: the
        state is predicted that far ahead with the model under the current plan's policy, and the
        new plan starts there — the usual remedy for a slow controller, which otherwise applies
        feedback around a state that is already stale."""
        if self.plan is None:
            return self.start(t, x)
        w0 = time.perf_counter()
        delay = 0.0 if self.latency_compensation is None else self._delay()
        if delay > 0:
            t, x = t + delay, self._predict(t, np.asarray(x, float), delay)
        xs_ws, us_ws = self.plan.resample(t, self.horizon, self.dt, out=self._warm)
        plan, rec = self._solve(t, x, xs_ws, us_ws, self.iterations_per_update, budget=self.time_budget)
        self.records.append(rec)
        self.plan = plan
        took = time.perf_counter() - w0
        self._latency_estimate = took if self._latency_estimate is None else 0.8 * self._latency_estimate + 0.2 * took
        return plan

    def _delay(self) -> float:
        c = self.latency_compensation
        if c is None:
            return 0.0
        if c == "auto":
            return 0.0 if self._latency_estimate is None else float(self._latency_estimate)
        return float(c)

    def _predict(self, t: float, x: np.ndarray, delay: float) -> np.ndarray:
        """The state ``delay`` seconds after ``t`` under the current plan's policy, by the model's
        discrete dynamics in steps of at most the knot spacing."""
        n = max(1, int(np.ceil(delay / self.dt - 1e-9)))
        h = delay / n
        dyn = self._predictor(h)
        for k in range(n):
            u = self.plan.control(t + k * h, x)
            xn = dyn.step(x, u)
            if not np.all(np.isfinite(xn)):
                return x            # keep the measured state rather than a diverged prediction
            x = xn
        return x

    def _predictor(self, h: float):
        """The model's discrete dynamics with step ``h`` [s]: knot 0's dynamics (integrator, passive
        forces, contacts) integrated over h, built once per step size."""
        key = round(h, 12)
        dyn = self._predictors.get(key)
        if dyn is None:
            description = self.problem.running_models[0].dynamics
            dyn = self._predictors[key] = description.integrated(self.model, self.backend, h)
        return dyn

    # ----------------------------------------------------------------- internals
    def _solve(self, t: float, x, xs_init, us_init, max_iter: int, budget: float | None):
        be = self.backend
        sim0 = (be.simulated_s_total, be.emulation_wall_s_total) if be.simulated_time else None
        w0 = time.perf_counter()
        t = float(t)
        x = np.asarray(x, float)
        # the measured state first: a task's update_problem may read it (problem.x0), e.g. a gait
        # re-phasing its horizon from where the robot is now
        self.problem.set_initial_state(x)
        self.task.update_problem(self.problem, t)
        k = self._knot_spacing_of()
        # whether every knot is dt apart, and the mask (N,) of the knots that take time when some do
        # not (impulse knots), else None
        uniform, timed = k.uniform, k.timed
        if xs_init is not None and self.plan is not None and not uniform:
            # knots not dt apart (impulse knots): the warm start is laid on the problem's knot times
            xs_init, us_init = self._warm_start_on_knots(t)
        if xs_init is not None:
            if xs_init is not self._warm[0]:        # the controller's own buffer is written in place
                xs_init = np.array(xs_init, float)
            xs_init[0] = x
            if self.plan is not None:
                us_init = self._nominal_tail(t, us_init)
        iterations = 0
        if budget is None:
            res = self.solver.solve(xs_init=xs_init, us_init=us_init, max_iter=max_iter, tol=self.tol)
            # one solve: its timings as they are (what _add_timings would sum into zeros); the
            # result's own dict when it has every stage (a solver makes a new one for each solve)
            timings = getattr(res, "timings", None)
            if type(timings) is not dict or timings.keys() != _TIMED_KEYS:
                timings = dict.fromkeys(_TIMED, 0.0) | dict(timings or {})
            iterations = int(res.iterations)
        else:
            timings = dict.fromkeys(_TIMED, 0.0)
            # one iteration at a time, warm-started from the last, until the budget would be exceeded
            res = None
            while iterations < max_iter:
                res = self.solver.solve(xs_init=xs_init, us_init=us_init, max_iter=1, tol=self.tol)
                self._add_timings(timings, res)
                iterations += int(res.iterations)
                elapsed = time.perf_counter() - w0
                per_iter = elapsed / max(iterations, 1)
                if res.converged or int(res.iterations) == 0 or elapsed + per_iter > budget:
                    break
                xs_init, us_init = res.xs, res.us
        wall = time.perf_counter() - w0
        failed = not res.converged and iterations == 0 and max_iter > 0
        rec = UpdateRecord(t=t, wall=wall, timings=timings, iterations=iterations, cost=float(res.cost),
                           converged=bool(res.converged), reason=str(getattr(res, "reason", "")),
                           fallback=bool(failed and self.plan is not None))
        if sim0 is not None:
            rec.simulated_s = be.simulated_s_total - sim0[0]
            rec.emulation_wall_s = be.emulation_wall_s_total - sim0[1]
        plan = None
        if self.plan is None and failed:
            return None, rec        # a first solve that could not take one step: start() retries it
        if not rec.fallback:
            xs, us, K = np.asarray(res.xs, float), np.asarray(res.us, float), np.asarray(res.K, float)
            if timed is not None:
                # impulse knots (dt = 0) take no time: the plan keeps the post-impact state and drops
                # the pre-impact state, control and gain of each, so its knots are dt apart again
                xs, us, K = xs[self._knot_times.kept], us[timed], K[timed]
            if self.plan is not None and not self.feedback and not sum_is_finite(K):
                rec.fallback = True     # the plan checks xs and us; K must be finite even without feedback
            else:
                try:            # the plan checks that K (and xs, us unless the solver did) is finite
                    plan = Plan.of_solver(self.model, t, self.dt, xs, us, K if self.feedback else None,
                                          rec.as_info(), self._checked_bounds(),
                                          states_finite=getattr(res, "finite", None) is True,
                                          state=self._plan_state(),
                                          gains_finite=getattr(res, "gains_finite", None) is True)
                except ValueError as e:
                    if "non-finite" not in str(e):
                        raise
                    if self.plan is None:
                        return None, rec    # start() retries it
                    rec.fallback = True
        if rec.fallback:
            # the solver could not even start (or produced non-finite values): its gains are not
            # valid, so keep applying the previous, time-indexed plan
            old = self.plan
            plan = Plan(self.model, old.t0, old.dt, old.xs, old.us, old.K, info=rec.as_info(),
                        u_lower=old.u_lower, u_upper=old.u_upper, state=old.state)
        return plan, rec

    def _plan_state(self):
        """The state space a plan evaluates its policy through (:attr:`mpc.plan.Plan.state`): the
        problem's on a robot with free or ball joints (its compiled Lie-group operations), None on a
        hinge/slide robot (the plan's own closed form)."""
        state = self.problem.state
        return None if state.euclidean or state.model is not self.model else state

    def _checked_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The problem's control bounds as the plan takes them (:func:`mpc.plan.checked_bounds`),
        checked again only when the problem's bound arrays were replaced."""
        p = self.problem
        b = self._bounds
        if not b or b[0] is not p.u_lower or b[1] is not p.u_upper:
            b = self._bounds = (p.u_lower, p.u_upper, checked_bounds(self.model, p.u_lower, p.u_upper))
        return b[2]

    def _knot_spacing_of(self) -> _KnotSpacing:
        """What the controller derives from the problem's knot times (:class:`_KnotSpacing`),
        computed again only when they were replaced."""
        dts = self.problem.dts
        k = self._knot_times
        if k is None or k.dts is not dts:
            timed = dts > 0
            every = bool(timed.all())
            k = self._knot_times = _KnotSpacing(
                dts, not (dts != self.dt).any(), None if every else timed, None if every else np.r_[timed, True],
                np.concatenate([[0], np.cumsum(timed)]) if not (dts[timed] != self.dt).any() else None,
                np.concatenate([[0.0], np.cumsum(dts[:-1])]))
        return k

    def _nominal_tail(self, t: float, us_init: np.ndarray) -> np.ndarray:
        """``us_init`` with the knots past the previous plan's end set to the task's nominal controls
        (:meth:`tasks.Task.nominal_controls`), when the task gives them."""
        nominal = getattr(self.task, "nominal_controls", None)
        if nominal is None or getattr(nominal, "__func__", None) is Task.nominal_controls:
            return us_init      # the base class's: never gives controls (a call saved per update)
        nominal = nominal(self.problem)
        if nominal is None:
            return us_init
        old = self.plan
        new = t + self._knot_spacing_of().starts >= old.t_end - 1e-9
        if new.any():
            if us_init is not self._warm[1]:
                us_init = np.array(us_init, float)
            us_init[new] = np.asarray(nominal, float)[new]
        return us_init

    def _warm_start_on_knots(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The current plan evaluated at the problem's knot times ``t + Σ dts`` (an impulse knot's
        pre- and post-impact states are at the same time): (N+1, nx), (N, nu)."""
        plan = self.plan
        steps = self._knot_spacing_of().plan_knots
        shift = (t - plan.t0) / plan.dt
        n = int(round(shift))
        if steps is not None and plan.dt == self.dt and n >= 0 and abs(shift - n) <= 1e-9:
            # an update a whole number of knots on (the usual MPC case): each knot time is a knot
            # of the plan, whose state and control are taken as they are (Plan.resample's exact
            # shift, with the impulse knots' repeated times; past the plan's end, its last knot)
            M = plan.horizon
            j = n + steps
            return plan.xs[np.minimum(j, M)], plan.us[np.minimum(j[:-1], M - 1)]
        ts = t + np.concatenate([[0.0], np.cumsum(self.problem.dts)])
        return plan.sample(ts, self.problem.state)

    @staticmethod
    def _add_timings(acc: dict, res) -> None:
        for k, v in (getattr(res, "timings", None) or {}).items():
            acc[k] = acc.get(k, 0.0) + float(v)
