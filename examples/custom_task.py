"""A complete custom task in plain Python: the iiwa end effector draws a horizontal circle while a
hand-written cost keeps it above a table.

Run it directly (``python examples/custom_task.py``) for a short receding-horizon rollout on the
solver's own model, or load the task anywhere a task name is accepted::

    import tasks
    task = tasks.get_task("examples/custom_task.py:IiwaCircle", radius=0.1)

What it shows:

* a cost written in plain Python (:class:`TableClearance`): a subclass of
  :class:`solvers.costs.ResidualCost` with batched ``residual(ctx)`` and ``residual_jacobian(ctx)``.
  The :class:`solvers.costs.CostContext` ``ctx`` carries the knots' states (``ctx.x``, ``ctx.q``),
  the problem's backend (``ctx.backend``) and shared kinematics: ``ctx.frame_position("ee")`` is
  computed once per evaluation for every cost term on that frame (here also the tracking cost), on
  whatever backend the problem uses — no backend is hard-coded;
* a :class:`tasks.Task` dataclass with a time-varying reference: ``update_problem`` gives every
  knot of the horizon its own point on the circle; its ``build_problem`` passes the backend it is
  given (default: :func:`dynamics.default_backend_name`) to the problem;
* success criteria (:class:`tasks.Criterion`) that ``mpc-accel run`` prints and plots like any
  task's::

    mpc-accel run examples/custom_task.py:IiwaCircle --horizon 20 --dt 0.02
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout without installing

import dynamics  # noqa: E402
import tasks  # noqa: E402
from solvers import DDP, ControlCost, CostSum, FramePositionCost, ShootingProblem, StateCost  # noqa: E402
from solvers import gravity_compensation  # noqa: E402
from solvers.costs import CostContext, ResidualCost  # noqa: E402


class TableClearance(ResidualCost):
    """Soft constraint ``z_ee >= height``: residual ``min(z_ee - height, 0)`` [m], cost ½ w r².

    Kinematics come from the context: the problem's backend, shared with the other terms on the
    same frame."""

    nr = 1

    def __init__(self, model: dynamics.RobotModel, height: float, weight: float = 1e4, frame: str = "ee"):
        self.model, self.height, self.frame = model, float(height), frame
        self.name = "table_clearance"
        model.frame(frame)                       # fail early on an unknown frame
        super().__init__(weights=np.array([weight]))

    def residual(self, ctx: CostContext) -> np.ndarray:
        z = ctx.frame_position(self.frame)[:, 2:3]                          # (B, 1), shared kinematics
        return np.minimum(z - self.height, 0.0)

    def residual_jacobian(self, ctx: CostContext):
        nv = self.model.nv
        z = ctx.frame_position(self.frame)[:, 2]
        J = ctx.frame_jacobian(self.frame, "local_world_aligned")           # (B, 6, nv), linear part first
        rx = np.zeros((ctx.batch, 1, 2 * nv))
        below = z < self.height
        rx[below, 0, :nv] = J[below, 2, :]                                  # d z_ee / d q
        ru = None if ctx.terminal else np.zeros((ctx.batch, 1, self.model.nu))
        return rx, ru


@tasks.register_task("iiwa-circle", "iiwa end effector draws a horizontal circle above a table (example)")
@dataclass
class IiwaCircle(tasks.Task):
    """The iiwa end effector follows a horizontal circle; a custom cost keeps it above a table."""

    center: np.ndarray = field(default_factory=lambda: np.array([0.6, 0.0, 0.35]))
    radius: float = 0.12            # m
    period: float = 2.0             # s per revolution
    table_height: float = 0.25      # m
    revolutions: float = 2.0
    settle_time: float = 0.3        # s before the tracking error is judged
    name: str = "iiwa-circle"
    description: str = "iiwa end effector draws a horizontal circle above a table"

    def __post_init__(self):
        self.model = dynamics.load_model("iiwa")
        self.center = np.asarray(self.center, float)
        if self.center.shape != (3,) or not np.all(np.isfinite(self.center)):
            raise ValueError(f"center must be a finite (3,) position [m], got {self.center!r}")
        if not (self.radius >= 0 and self.period > 0 and self.revolutions > 0):
            raise ValueError("radius must be >= 0, period and revolutions > 0")
        self.q_home = self.model.keyframe("home")
        self.backend = dynamics.get_backend(dynamics.default_backend_name())  # for metrics; set by build_problem

    @property
    def duration(self) -> float:
        return self.revolutions * self.period

    def point(self, t) -> np.ndarray:
        """Circle point(s) at time(s) t [s], (..., 3)."""
        a = 2 * np.pi * np.asarray(t, float) / self.period
        return self.center + self.radius * np.stack([np.cos(a), np.sin(a), np.zeros_like(a)], axis=-1)

    def initial_state(self) -> np.ndarray:
        return np.concatenate([self.q_home, np.zeros(self.model.nv)])

    def build_problem(self, x0, horizon, dt, backend=None, **solver_opts) -> ShootingProblem:
        m = self.model
        self.backend = dynamics.get_backend(self.resolve_backend(backend))   # the problem's backend
        u_gravity = gravity_compensation(m, self.backend, self.q_home)
        x_ref = self.initial_state()
        running = CostSum({
            "ee": (FramePositionCost(m, "ee", self.point(0.0)), 2e3),
            "table": (TableClearance(m, self.table_height), 1.0),        # the plain-Python cost
            "state": (StateCost(m, x_ref, np.r_[np.full(7, 0.5), np.full(7, 0.5)]), 1.0),
            "control": (ControlCost(m, u_gravity), 1e-3),
        })
        terminal = CostSum({"ee": (FramePositionCost(m, "ee", self.point(0.0)), 2e4),
                            "table": (TableClearance(m, self.table_height), 10.0)})
        problem = ShootingProblem.uniform(m, self.check_state(x0, "x0"), horizon, dt, running, terminal,
                                          backend=self.backend, **solver_opts)
        self.update_problem(problem, 0.0)
        return problem

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        refs = self.point(t + problem.dt * np.arange(problem.horizon + 1))   # one point per knot
        problem.running_cost["ee"].target = refs
        problem.terminal_cost["ee"].target = refs

    def ee_position(self, x) -> np.ndarray:
        """End-effector position(s) [m] of state(s) x (..., nx)."""
        q = np.ascontiguousarray(np.asarray(x, float)[..., :self.model.nq])
        return self.backend.frame_placement(self.model, q, "ee")[1]

    def metrics(self, t: float, x) -> dict[str, float]:
        p = self.ee_position(self.check_state(x))
        return {"ee_error": float(np.linalg.norm(p - self.point(t))), "ee_height": float(p[2])}

    def metric_info(self) -> dict[str, tasks.MetricInfo]:
        return {"ee_error": tasks.MetricInfo(unit="m", threshold=0.02, log=True, label="distance to circle"),
                "ee_height": tasks.MetricInfo(unit="m", threshold=self.table_height, label="height above floor")}

    def evaluate(self, times, states, controls) -> tasks.Evaluation:
        """``max error after settling`` (< 2 cm after ``settle_time``) and ``lowest height``
        (the end effector stays above the table, within 5 mm: the constraint is soft)."""
        times = np.asarray(times, float)
        states = np.asarray(states, float)
        if states.shape[0] == 0:
            return tasks.Evaluation()
        p = self.ee_position(states)
        errs = np.linalg.norm(p - self.point(times), axis=-1)
        settled = times >= self.settle_time
        worst = float(errs[settled].max()) if settled.any() else None
        low = float(p[:, 2].min())
        return tasks.Evaluation([
            tasks.Criterion("max error after settling", worst, "m", worst is not None and worst < 0.02,
                            f"< 2 cm after {self.settle_time:g} s" if worst is not None
                            else f"not measured: the run ended before {self.settle_time:g} s"),
            tasks.Criterion("lowest height", low, "m", low >= self.table_height - 0.005,
                            f">= table {self.table_height:g} m - 5 mm"),
        ])


def main(duration: float = 1.0) -> tasks.Evaluation:
    """Receding horizon on the solver's own model (no simulator): solve, apply u_0, shift, repeat."""
    task = IiwaCircle()
    horizon, dt = 20, 0.02
    x = task.initial_state()
    problem = task.build_problem(x, horizon, dt)
    solver = DDP(problem)
    res = solver.solve(max_iter=50)
    print(res.summary())
    times, states, controls = [], [], []
    t = 0.0
    while t < duration - 1e-9:
        if t > 0:
            problem.set_initial_state(x)
            task.update_problem(problem, t)
            res = solver.solve(*res.shifted(1), max_iter=2)
        times.append(t)
        states.append(x)
        controls.append(res.us[0])
        x = problem.step(x, res.us[0])
        t += dt
    out = task.evaluate(times, states, controls)
    print({k: round(v, 4) for k, v in task.metrics(t, x).items()})
    for c in out.criteria:
        print(f"  {c.name}: {c.value:.4g} {c.unit} ({'pass' if c.passed else 'FAIL'}; {c.detail})")
    return out


if __name__ == "__main__":
    main()
