"""A complete custom task in plain Python: the iiwa end effector draws a horizontal circle while a
hand-written cost keeps it above a table.

Run it directly (``python examples/custom_task.py``) for a short receding-horizon rollout on the
solver's own model, or load the task anywhere a task name is accepted::

    import tasks
    task = tasks.get_task("examples/custom_task.py:IiwaCircle", radius=0.1)

What it shows:

* a plain-Python cost (:class:`TableClearance`): no base class, just batched ``residual`` and
  ``residual_jacobian`` methods (x: (B, nx), u: (B, nu) or None at the terminal knot) and a
  ``weights`` attribute; leave out ``residual_jacobian`` and the solver falls back to finite
  differences with a one-time warning;
* a :class:`tasks.Task` dataclass with a time-varying reference: ``update_problem`` gives every
  knot of the horizon its own point on the circle.
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


class TableClearance:
    """Soft constraint ``z_ee >= height``: residual ``min(z_ee - height, 0)`` [m], cost ½ w r²."""

    def __init__(self, model: dynamics.RobotModel, height: float, weight: float = 1e4, frame: str = "ee"):
        self.model, self.height, self.frame = model, height, frame
        self.backend = dynamics.get_backend("numpy")
        self.weights = np.array([weight])

    def residual(self, x, u):
        _, p = self.backend.frame_placement(self.model, x[:, :self.model.nq], self.frame)
        return np.minimum(p[:, 2:3] - self.height, 0.0)                    # (B, 1)

    def residual_jacobian(self, x, u):
        q = x[:, :self.model.nq]
        _, p = self.backend.frame_placement(self.model, q, self.frame)
        J = self.backend.frame_jacobian(self.model, q, self.frame, "local_world_aligned")
        rx = np.zeros((x.shape[0], 1, 2 * self.model.nv))
        below = p[:, 2] < self.height
        rx[below, 0, :self.model.nv] = J[below, 2, :]                       # d z_ee / d q
        ru = None if u is None else np.zeros((x.shape[0], 1, self.model.nu))
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
        self.q_home = self.model.keyframe("home")
        self.u_gravity = gravity_compensation(self.model, dynamics.get_backend("numpy"), self.q_home)

    @property
    def duration(self) -> float:
        return self.revolutions * self.period

    def point(self, t) -> np.ndarray:
        """Circle point(s) at time(s) t [s], (..., 3)."""
        a = 2 * np.pi * np.asarray(t, float) / self.period
        return self.center + self.radius * np.stack([np.cos(a), np.sin(a), np.zeros_like(a)], axis=-1)

    def initial_state(self) -> np.ndarray:
        return np.concatenate([self.q_home, np.zeros(self.model.nv)])

    def build_problem(self, x0, horizon, dt, backend="numpy", **solver_opts) -> ShootingProblem:
        m = self.model
        x_ref = self.initial_state()
        running = CostSum({
            "ee": (FramePositionCost(m, "ee", self.point(0.0)), 2e3),
            "table": (TableClearance(m, self.table_height), 1.0),        # the plain-Python cost
            "state": (StateCost(m, x_ref, np.r_[np.full(7, 0.5), np.full(7, 0.5)]), 1.0),
            "control": (ControlCost(m, self.u_gravity), 1e-3),
        })
        terminal = CostSum({"ee": (FramePositionCost(m, "ee", self.point(0.0)), 2e4),
                            "table": (TableClearance(m, self.table_height), 10.0)})
        problem = ShootingProblem(m, self.check_state(x0, "x0"), horizon, dt, running, terminal,
                                  backend=backend, **solver_opts)
        self.update_problem(problem, 0.0)
        return problem

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        refs = self.point(t + problem.dt * np.arange(problem.horizon + 1))   # one point per knot
        problem.running_cost["ee"].target = refs
        problem.terminal_cost["ee"].target = refs

    def metrics(self, t: float, x) -> dict[str, float]:
        q = self.check_state(x)[:self.model.nq]
        _, p = dynamics.get_backend("numpy").frame_placement(self.model, q, "ee")
        return {"ee_error": float(np.linalg.norm(p - self.point(t))), "ee_height": float(p[2])}

    def evaluate(self, times, states, controls) -> dict:
        errs = np.array([self.metrics(t, x)["ee_error"] for t, x in zip(times, states)])
        settled = np.asarray(times) >= self.settle_time
        return {"success": bool(errs[settled].max(initial=0.0) < 0.02), "max_error_after_settling": float(
            errs[settled].max(initial=0.0))}


def main(duration: float = 1.0) -> dict:
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
    print({k: round(v, 4) for k, v in task.metrics(t, x).items()}, out)
    return out


if __name__ == "__main__":
    main()
