"""KUKA iiwa reaching: the end effector (site "ee") visits a sequence of targets in turn.

Target ``i`` is active during ``[i·T, (i+1)·T)`` with ``T = switch_period`` (2 s by default);
the task succeeds when every target is reached within ``reach_tolerance`` (2 cm) no later than
``reach_time`` (1.5 s) after it becomes active, without exceeding the torque limits.

Costs (running ones integrated over time, see :class:`solvers.ShootingProblem`):
end-effector position tracking (Gauss–Newton Hessian by default, exact on request), optionally the
end-effector orientation, state regularisation towards the "home" posture at rest, and control
regularisation around gravity compensation at "home"; torque limits from the model as control
bounds. The references are time-varying: knot k of a horizon starting at time t tracks the
target active at ``t + k·dt``, so the controller sees a switch coming.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dynamics import RobotModel, get_backend, load_model
from solvers import (ControlCost, CostSum, FramePositionCost, FrameRotationCost, ShootingProblem, StateCost,
                     gravity_compensation)

from .base import Task
from .registry import register_task

# reachable from "home" (ee at (0.669, 0, 0.285) m), inside the workspace, away from singularities
DEFAULT_TARGETS = ((0.55, 0.25, 0.45), (0.45, -0.25, 0.55), (0.65, -0.2, 0.30), (0.50, 0.20, 0.35))


@register_task("iiwa-reach", "KUKA iiwa: end effector visits 4 targets in turn, one every 2 s "
                             "(reach each within 2 cm in 1.5 s, torque limits respected)")
@dataclass
class IiwaReach(Task):
    """KUKA iiwa end-effector reaching through a sequence of targets."""

    targets: np.ndarray = field(default_factory=lambda: np.array(DEFAULT_TARGETS))
    switch_period: float = 2.0          # s per target
    reach_tolerance: float = 0.02       # m
    reach_time: float = 1.5             # s
    orientation: bool = False           # also track the "home" end-effector orientation
    frame: str = "ee"
    w_ee: float = 1e3                   # running end-effector position weight [1/(m² s)]
    w_ee_terminal: float = 1e4          # terminal end-effector position weight [1/m²]
    w_rot: float = 10.0                 # orientation weight (when orientation=True)
    w_q: float = 1.0                    # posture regularisation
    w_v: float = 1.0                    # joint-velocity regularisation
    w_u: float = 1e-3                   # control regularisation around gravity compensation
    w_v_terminal: float = 10.0          # terminal velocity weight (arrive at rest)
    exact_hessian: bool = False         # exact end-effector Hessian (DDP converges quadratically near a
                                        # minimum; Gauss–Newton is more robust far from it, e.g. after a switch)
    name: str = "iiwa-reach"
    description: str = "KUKA iiwa end-effector reaching through a sequence of targets"

    def __post_init__(self):
        self.model: RobotModel = load_model("iiwa")
        self.model.frame(self.frame)
        self.targets = np.array(self.targets, dtype=float)
        if self.targets.ndim != 2 or self.targets.shape[1] != 3 or self.targets.shape[0] < 1:
            raise ValueError(f"targets must be an (n, 3) array of positions [m], got shape {self.targets.shape}")
        if not np.all(np.isfinite(self.targets)):
            raise ValueError("targets contain non-finite values")
        if not (self.switch_period > 0 and self.reach_time > 0 and self.reach_tolerance > 0):
            raise ValueError("switch_period, reach_time and reach_tolerance must be positive")
        self.q_home = self.model.keyframe("home")
        be = get_backend("numpy")
        self.u_gravity = gravity_compensation(self.model, be, self.q_home)
        self.R_home = be.frame_placement(self.model, self.q_home, self.frame)[0]

    @property
    def duration(self) -> float:  # type: ignore[override]
        return self.switch_period * self.targets.shape[0]

    # ------------------------------------------------------------ references
    def target_index(self, t) -> np.ndarray:
        """Index of the target active at time(s) t [s] (the last one stays active after the end)."""
        return np.clip(np.floor(np.asarray(t, float) / self.switch_period).astype(int), 0, self.targets.shape[0] - 1)

    def target_at(self, t) -> np.ndarray:
        return self.targets[self.target_index(t)]

    def initial_state(self) -> np.ndarray:
        return np.concatenate([self.q_home, np.zeros(self.model.nv)])

    # ------------------------------------------------------------ problem
    def build_problem(self, x0, horizon: int, dt: float, backend: str = "numpy", **solver_opts) -> ShootingProblem:
        m, nv = self.model, self.model.nv
        x0 = self.check_state(x0, "x0")
        hess = "exact" if self.exact_hessian else "gauss-newton"
        x_ref = self.initial_state()
        first = self.targets[0]
        running = CostSum({
            "ee": (FramePositionCost(m, self.frame, first, hessian=hess), self.w_ee),
            "state": (StateCost(m, x_ref, np.r_[np.full(nv, self.w_q), np.full(nv, self.w_v)]), 1.0),
            "control": (ControlCost(m, self.u_gravity), self.w_u),
        })
        terminal = CostSum({
            "ee": (FramePositionCost(m, self.frame, first, hessian=hess), self.w_ee_terminal),
            "state": (StateCost(m, x_ref, np.r_[np.full(nv, self.w_q), np.full(nv, self.w_v_terminal)]), 1.0),
        })
        if self.orientation:
            running.add("rotation", FrameRotationCost(m, self.frame, self.R_home), self.w_rot)
            terminal.add("rotation", FrameRotationCost(m, self.frame, self.R_home), 10 * self.w_rot)
        problem = ShootingProblem(m, x0, horizon, dt, running, terminal, backend=backend, **solver_opts)
        self.update_problem(problem, 0.0)
        return problem

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        knots_t = float(t) + problem.dt * np.arange(problem.horizon + 1)
        refs = self.target_at(knots_t)                   # (N+1, 3): running knots 0..N-1, terminal knot N
        problem.running_cost["ee"].target = refs
        problem.terminal_cost["ee"].target = refs

    # ------------------------------------------------------------ metrics
    def ee_position(self, x) -> np.ndarray:
        q = np.asarray(x, float)[..., :self.model.nq]
        return get_backend("numpy").frame_placement(self.model, q, self.frame)[1]

    def metrics(self, t: float, x) -> dict[str, float]:
        x = self.check_state(x)
        i = int(self.target_index(t))
        err = float(np.linalg.norm(self.ee_position(x) - self.targets[i]))
        return {"ee_error": err, "target_index": float(i), "time_since_switch": float(t - i * self.switch_period)}

    def evaluate(self, times, states, controls) -> dict:
        """Per target: time to first come within ``reach_tolerance`` after the switch (inf if
        never), whether that is within ``reach_time``; torque-limit violation [N m] (the largest
        excess over the model's limits, 0 if none). ``success`` when every target is reached in
        time with no violation."""
        times = np.asarray(times, float)
        states = np.asarray(states, float)
        controls = np.asarray(controls, float)
        if states.ndim != 2 or states.shape[0] != times.shape[0]:
            raise ValueError("states must be (T, nx) with T = len(times)")
        err = np.linalg.norm(self.ee_position(states) - self.target_at(times), axis=-1)
        idx = self.target_index(times)
        reach = []
        for i in range(self.targets.shape[0]):
            seg = np.flatnonzero((idx == i) & (times >= i * self.switch_period))
            hit = seg[err[seg] <= self.reach_tolerance] if seg.size else seg
            reach.append(float(times[hit[0]] - i * self.switch_period) if hit.size else np.inf)
        m = self.model
        excess = np.maximum(controls - m.u_upper, 0) + np.maximum(m.u_lower - controls, 0) if controls.size else np.zeros(1)
        violation = float(np.max(excess)) if excess.size else 0.0
        ok = [r <= self.reach_time for r in reach]
        return {"success": bool(all(ok) and violation <= 1e-9), "reach_times": reach, "reached": ok,
                "torque_violation": violation, "final_ee_error": float(err[-1]) if err.size else np.nan}
