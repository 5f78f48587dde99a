"""The task interface: what the receding-horizon controller, the CLI and the report need to know
about a task.

A task owns a robot model, an initial state, a way to build a :class:`solvers.ShootingProblem`
and to move its time-varying references as the horizon slides, metrics traced along a run and
success criteria judged over a whole run. Subclass :class:`Task` in plain Python (dataclasses
welcome) and register it with :func:`tasks.register_task`, or load it by ``"module:Class"`` /
``"path/file.py:Class"``. The CLI, the report and the plots use only the members documented
here (docs/tasks.md), so every task gets the same summary table, JSON and figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dynamics import RobotModel, default_backend_name
from solvers import ShootingProblem


@dataclass(frozen=True)
class Criterion:
    """One named result of :meth:`Task.evaluate`.

    name: what is measured (e.g. ``"target 0 time to reach"``); value: the measured number (None
    when it could not be measured, e.g. the run ended first; ``inf`` allowed); unit: e.g. ``"s"``,
    ``"m"``, ``"N m"``; passed: True/False for a success criterion, None for a value that is
    reported but not judged; detail: the limit or how the value is judged (shown next to it)."""

    name: str
    value: float | None
    unit: str = ""
    passed: bool | None = None
    detail: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Criterion: name must be a non-empty string")
        if self.value is not None:
            object.__setattr__(self, "value", float(self.value))
        if self.passed is not None:
            object.__setattr__(self, "passed", bool(self.passed))

    def to_dict(self) -> dict:
        """JSON-ready (a non-finite value becomes None)."""
        v = self.value
        return {"name": self.name, "value": v if v is not None and math.isfinite(v) else None, "unit": self.unit,
                "passed": self.passed, "detail": self.detail}


@dataclass
class Evaluation:
    """What :meth:`Task.evaluate` returns: named criteria, and optional task-specific JSON-ready
    ``details`` (e.g. per-target rows) that the report stores but does not interpret.
    ``success``: every judged criterion passed (True when there is none)."""

    criteria: list[Criterion] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        self.criteria = list(self.criteria)
        for c in self.criteria:
            if not isinstance(c, Criterion):
                raise TypeError(f"Evaluation: criteria must be tasks.Criterion objects, got {type(c).__name__}")
        names = [c.name for c in self.criteria]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"Evaluation: criterion names must be unique; repeated: {', '.join(dup)}")

    @property
    def success(self) -> bool:
        return all(c.passed for c in self.criteria if c.passed is not None)

    @property
    def judged(self) -> list[Criterion]:
        """The criteria with a pass/fail verdict."""
        return [c for c in self.criteria if c.passed is not None]

    def __getitem__(self, name: str) -> Criterion:
        for c in self.criteria:
            if c.name == name:
                return c
        raise KeyError(f"no criterion '{name}'; criteria: {', '.join(c.name for c in self.criteria) or '(none)'}")

    def __contains__(self, name: str) -> bool:
        return any(c.name == name for c in self.criteria)

    def to_dict(self) -> dict:
        return {"success": self.success, "criteria": [c.to_dict() for c in self.criteria], "details": self.details}


@dataclass(frozen=True)
class MetricInfo:
    """How the report and the plots show one metric of :meth:`Task.metrics`: unit; threshold
    (drawn as a dashed line, e.g. a success tolerance); log (log-scale axis); plot (draw it);
    summary (mean/max/final in the summary; off for e.g. an index); label (axis label)."""

    unit: str = ""
    threshold: float | None = None
    log: bool = False
    plot: bool = True
    summary: bool = True
    label: str = ""


@dataclass(frozen=True)
class Event:
    """A time [s] worth marking in the plots (e.g. a reference switch), with a short label."""

    t: float
    label: str = ""


@dataclass(frozen=True)
class Disturbance:
    """A push the simulator applies: ``force`` (3,) [N], world axes, at the origin of MuJoCo body
    ``body``, during ``[t, t + duration)`` [s]."""

    t: float
    body: str
    force: np.ndarray
    duration: float

    def __post_init__(self):
        f = np.asarray(self.force, float).reshape(-1)
        if f.shape != (3,) or not np.all(np.isfinite(f)):
            raise ValueError(f"Disturbance: force must be 3 finite numbers [N], got {self.force!r}")
        if not (np.isfinite(self.t) and self.t >= 0 and np.isfinite(self.duration) and self.duration > 0):
            raise ValueError(f"Disturbance: need t >= 0 and duration > 0 [s], got t={self.t}, "
                             f"duration={self.duration}")
        object.__setattr__(self, "force", f)


@dataclass(frozen=True)
class RunDefaults:
    """The controller settings a task is tuned for: what ``mpc-accel run TASK`` uses for each option
    the user does not give. solver: ``"ilqr"``, ``"ddp"`` or ``"fddp"``; horizon: knots N; dt: knot
    spacing [s]; update_period: seconds between controller updates (None: one knot, ``dt``);
    iterations: solver iterations per update (the most a solve runs). The
    update period applies only with the task's own ``dt``: a user who sets ``--dt`` gets one update
    per knot unless ``--update-every`` says otherwise."""

    solver: str = "ddp"
    horizon: int = 32
    dt: float = 0.01
    update_period: float | None = None
    iterations: int = 1

    def __post_init__(self):
        if not (isinstance(self.horizon, int) and self.horizon > 0):
            raise ValueError(f"RunDefaults: horizon must be a positive integer, got {self.horizon!r}")
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"RunDefaults: dt must be a positive time [s], got {self.dt!r}")
        if self.update_period is not None and not (math.isfinite(self.update_period) and self.update_period > 0):
            raise ValueError(f"RunDefaults: update_period must be a positive time [s] or None, got "
                             f"{self.update_period!r}")
        if not (isinstance(self.iterations, int) and self.iterations > 0):
            raise ValueError(f"RunDefaults: iterations must be a positive integer, got {self.iterations!r}")

    @property
    def period(self) -> float:
        """Seconds between controller updates."""
        return self.dt if self.update_period is None else float(self.update_period)

    def describe(self) -> str:
        """One line, e.g. ``fddp, horizon 20 x 20 ms, update every 40 ms`` (``, 4 iterations per
        update`` when more than one)."""
        more = f", {self.iterations} iterations per update" if self.iterations > 1 else ""
        return (f"{self.solver}, horizon {self.horizon} x {self.dt * 1e3:g} ms, "
                f"update every {self.period * 1e3:g} ms{more}")


class Task:
    """Base class. Subclasses set ``name``, ``description``, ``model`` and ``duration`` [s] and
    implement :meth:`initial_state`, :meth:`build_problem` and :meth:`update_problem`; the
    reporting hooks :meth:`metrics`, :meth:`evaluate`, :meth:`metric_info`, :meth:`events` and
    :meth:`markers`, and :meth:`disturbances`, are optional (the defaults report nothing task-specific)."""

    @classmethod
    def solver_switches(cls) -> tuple[tuple[str, str], ...]:
        """Task options that change the default solver, as ``(option, solver)`` rows (shown by
        ``mpc-accel tasks``); none unless a task says so."""
        return ()

    name: str = "task"
    description: str = ""
    model: RobotModel
    duration: float = 1.0
    #: the controller settings this task is tuned for (``mpc-accel run`` uses them unless overridden)
    defaults: ClassVar[RunDefaults] = RunDefaults()

    def initial_state(self) -> np.ndarray:
        """Initial state x0 = (q, v), (nq + nv,)."""
        raise NotImplementedError

    def build_problem(self, x0, horizon: int, dt: float, backend: str | None = None,
                      **solver_opts) -> ShootingProblem:
        """A shooting problem starting at x0 over ``horizon`` knots of ``dt`` seconds, with the
        references of time 0. backend: dynamics backend name, None for
        :func:`dynamics.default_backend_name`. ``solver_opts`` go to :class:`ShootingProblem`
        (integrator, second_order, u_lower, u_upper, passive_forces)."""
        raise NotImplementedError

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        """Move the time-varying references so that knot k of ``problem`` is at time
        ``t + k · problem.dt`` [s]."""

    def nominal_controls(self, problem: ShootingProblem) -> np.ndarray | None:
        """Controls (N, nu) that suit each knot of ``problem`` as :meth:`update_problem` last set it
        up (e.g. each contact phase's standing torques), or None (the default). The MPC warm-starts
        the knots its previous plan did not reach with them instead of repeating that plan's last
        control (which, for a knot with another contact set, can be far from feasible)."""
        return None

    def warmup_times(self) -> tuple[float, ...]:
        """Times [s] at which :meth:`update_problem` gives the problem knot kinds that it does not
        have at t = 0 (e.g. a gait's swing and touchdown-impulse knots): the MPC's warm-up also
        solves there, so the first updates that meet those knots do not compile their kernels.
        Default: none (the problem's kinds of knots do not change over time). Valid once
        :meth:`build_problem` has run."""
        return ()

    def metrics(self, t: float, x) -> dict[str, float]:
        """Scalar metrics of state x at time t [s] (e.g. ``"ee_error"`` [m]), traced over a run:
        the report summarises and plots each one."""
        return {}

    def metric_info(self) -> dict[str, MetricInfo]:
        """How to show each metric (unit, threshold, log scale, whether to plot/summarise it);
        metrics not listed are plotted and summarised without unit."""
        return {}

    def evaluate(self, times, states, controls) -> Evaluation:
        """Success criteria over a closed-loop run: times (T,) [s], states (T, nx) measured in the
        simulator, controls (T, nu) the controller's commands. No criteria by default."""
        return Evaluation()

    def events(self, t_end: float) -> list[Event]:
        """Times in ``[0, t_end]`` to mark in the plots (e.g. reference switches). None by default."""
        return []

    def disturbances(self) -> list[Disturbance]:
        """Pushes the simulator applies during a run (the controller is not told). None by default."""
        return []

    def notes(self) -> list[str]:
        """What the task decided about its robot that a user should know (e.g. where a standing
        posture came from, a floor added to a bare robot file): one line each, printed in the
        run summary. None by default."""
        return []

    def markers(self, times) -> np.ndarray | None:
        """World points (T, 3) [m] to draw in videos at ``times`` (T,) (e.g. the current target),
        or None."""
        return None

    def check_state(self, x, name: str = "x") -> np.ndarray:
        x = np.asarray(x, dtype=float)
        n = self.model.nq + self.model.nv
        if x.shape != (n,):
            raise ValueError(f"{self.name}: {name} has shape {x.shape}, expected ({n},) = (nq + nv,)")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{self.name}: {name} contains non-finite values")
        return x

    @staticmethod
    def resolve_backend(backend: str | None) -> str:
        """``backend``, or :func:`dynamics.default_backend_name` when None (for build_problem)."""
        return default_backend_name() if backend is None else backend


def check_evaluation(task, ev) -> Evaluation:
    """``ev`` if it is an :class:`Evaluation`, else a TypeError naming the task and the fix."""
    if isinstance(ev, Evaluation):
        return ev
    raise TypeError(f"task '{getattr(task, 'name', type(task).__name__)}': evaluate() returned "
                    f"{type(ev).__name__}, expected tasks.Evaluation (a list of tasks.Criterion; see docs/tasks.md)")
