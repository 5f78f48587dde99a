"""The task interface: what the receding-horizon controller needs to know about a task.

A task owns a robot model, an initial state, a way to build a :class:`solvers.ShootingProblem`
and to move its time-varying references as the horizon slides, and metrics to judge the
closed-loop behaviour. Subclass :class:`Task` in plain Python (dataclasses welcome) and register
it with :func:`tasks.register_task`, or load it by ``"module:Class"`` / ``"path/file.py:Class"``.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from solvers import ShootingProblem


class Task:
    """Base class. Subclasses set ``name``, ``description``, ``model`` and ``duration`` [s] and
    implement :meth:`initial_state`, :meth:`build_problem`, :meth:`update_problem` and
    :meth:`metrics`; :meth:`evaluate` (success criteria over a whole run) is optional."""

    name: str = "task"
    description: str = ""
    model: RobotModel
    duration: float = 1.0

    def initial_state(self) -> np.ndarray:
        """Initial state x0 = (q, v), (nq + nv,)."""
        raise NotImplementedError

    def build_problem(self, x0, horizon: int, dt: float, backend: str = "numpy", **solver_opts) -> ShootingProblem:
        """A shooting problem starting at x0 over ``horizon`` knots of ``dt`` seconds, with the
        references of time 0. ``solver_opts`` go to :class:`ShootingProblem` (integrator,
        second_order, u_lower, u_upper, passive_forces)."""
        raise NotImplementedError

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        """Move the time-varying references so that knot k of ``problem`` is at time
        ``t + k · problem.dt`` [s]."""

    def metrics(self, t: float, x) -> dict[str, float]:
        """Scalar metrics of state x at time t [s] (e.g. ``"ee_error"`` [m])."""
        return {}

    def evaluate(self, times, states, controls) -> dict:
        """Success criteria over a closed-loop run: times (T,), states (T, nx), controls (T, nu).
        Returns at least ``{"success": bool}``."""
        return {"success": True}

    def check_state(self, x, name: str = "x") -> np.ndarray:
        x = np.asarray(x, dtype=float)
        n = self.model.nq + self.model.nv
        if x.shape != (n,):
            raise ValueError(f"{self.name}: {name} has shape {x.shape}, expected ({n},) = (nq + nv,)")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{self.name}: {name} contains non-finite values")
        return x
