"""Quadruped standing: four feet on the ground (rigid point contacts), the trunk tracks a sequence of
height and orientation targets and recovers from pushes; for any quadruped MJCF with actuators.

The controller's model is the rigid-contact dynamics of :class:`solvers.ContactDynamics` on the
four feet (Mastalli et al. 2020: MPC with a fixed contact set), with a state cost pulling the
trunk to the target pose (height offset and roll/pitch/yaw relative to the standing posture) and
the legs to the standing posture, and a control cost around the torques that hold the standing
posture still. The simulator is MuJoCo with its own soft contacts on the robot's foot geoms and a
floor, so the controller's contact model is an approximation the closed loop has to survive.

The standing posture is the model's keyframe ``standing``, else ``home``; otherwise the task
computes one (feet under the hips, inside the joint ranges, forces in the friction cone, torques
within the limits; :class:`tasks.legged.LeggedTask`) and says so in
:attr:`QuadrupedStand.posture_source` and the run summary.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from dynamics import RobotModel
from dynamics.lie import quat_multiply
from solvers import ContactDynamics, ControlCost, CostSum, ShootingProblem, StateCost, StateSpace
from solvers.constraints import FrictionCone
from solvers.costs import ContactForceCost, FrictionConeCost

from .base import Criterion, Evaluation, Event, MetricInfo, RunDefaults, Task
from .legged import BUNDLED_FEET, LeggedTask, _quat_rpy
from .registry import register_task

__all__ = ["QuadrupedStand", "HyqStand", "BUNDLED_FEET", "DEFAULT_POSES", "LeggedTask"]
# (t_start [s], trunk height offset [m], roll, pitch, yaw [rad]) relative to the standing posture
DEFAULT_POSES = ((0.0, 0.0, 0.0, 0.0, 0.0), (1.0, -0.06, 0.0, 0.0, 0.0), (2.0, 0.03, 0.0, 0.0, 0.0),
                 (3.0, 0.0, 0.0, 0.12, 0.0), (4.0, 0.0, 0.1, 0.0, 0.1), (5.0, 0.0, 0.0, 0.0, 0.0))


@register_task("quadruped-stand", "any quadruped (default HyQ): four feet down, the trunk tracks height and "
                                  "orientation targets and survives pushes")
@dataclass
class QuadrupedStand(LeggedTask, Task):
    """Quadruped standing on four point feet. robot: a bundled name or an MJCF path with
    actuators and a free-floating trunk; feet: the four contact frames (sites or bodies; defaults
    for the bundled robots); poses: ``(t_start, dz, roll, pitch, yaw)`` rows, each active from its
    start time; pushes: ``(t [s], body, (fx, fy, fz) [N], duration [s])`` applied in the simulator;
    cones: ``"hard"`` (the default: friction cone and unilateral normal force as constraints of
    every running knot, solved by csqp) or ``"penalty"`` (the same as a cost, ``w_cone``, solved by
    fddp)."""

    robot: str = "hyq"
    feet: tuple | str | None = None
    poses: tuple = DEFAULT_POSES
    pushes: tuple = ()
    duration_s: float = 6.0
    w_base_pos: float = 200.0           # trunk position [1/(m² s)]
    w_base_rot: float = 200.0           # trunk orientation [1/(rad² s)]
    w_joint: float = 0.01               # leg posture (with four feet fixed, the trunk pose decides the legs:
                                        # only a light pull, or it fights the trunk target)
    w_base_vel: float = 5.0             # trunk velocity
    w_joint_vel: float = 0.1            # joint velocity
    w_u: float = 1e-5                   # control around the standing torques
    w_force: float = 1e-3               # contact forces around the standing distribution [1/(N² s)]
    w_cone: float = 10.0                # friction-cone and unilateral-force penalty [1/(N² s)]
    mu: float = 0.7                     # friction coefficient of the cone (inscribed pyramid)
    cones: str = "hard"                 # "hard" (constraints, csqp) or "penalty" (w_cone, fddp): tasks.legged.CONE_MODES
    terminal_factor: float = 10.0       # terminal weights = running weights × this
    fall_height: float = 0.5            # a fall: the trunk below this fraction of its standing height
    height_tolerance: float = 0.02      # m, median height error after settling
    angle_tolerance: float = 0.06       # rad, median orientation error after settling
    settle_time: float = 0.5            # s after each pose switch before tracking is judged
    slip_tolerance: float = 0.03        # m, largest horizontal foot displacement
    name: str = "quadruped-stand"
    description: str = "quadruped: four feet down, trunk height/orientation targets, pushes"
    model: RobotModel = field(init=False, repr=False)
    defaults = RunDefaults(solver="csqp", horizon=20, dt=0.02)   # cones=hard; docs/tasks.md: rates measured

    def __post_init__(self):
        poses = np.array(self.poses, dtype=float).reshape(-1, 5)
        if poses.shape[0] < 1 or poses[0, 0] != 0.0 or np.any(np.diff(poses[:, 0]) <= 0):
            raise ValueError("poses: rows (t_start, dz, roll, pitch, yaw) with increasing start times, the first at 0")
        self._poses = poses
        self._setup_legged()   # model, feet, contacts, standing posture, forces, torques, pushes
        self._setup_cones()

    # ------------------------------------------------------------ Task interface
    def _pose_index(self, t) -> np.ndarray:
        """The row of the pose table active at times t [s] (...,)."""
        i = np.searchsorted(self._poses[:, 0], np.asarray(t, float), side="right") - 1
        return np.clip(i, 0, len(self._poses) - 1)

    def pose_at(self, t) -> np.ndarray:
        """(dz, roll, pitch, yaw) targets (..., 4) active at times t [s]."""
        return self._poses[self._pose_index(t), 1:]

    def _pose_references(self) -> np.ndarray:
        """:meth:`reference_state` of each pose (P, nx), one row per pose of the table (the targets
        are piecewise constant in time: every update's horizon picks its rows), made once per pose
        table and standing state."""
        kept = getattr(self, "_pose_refs", None)
        if kept is None or kept[0] is not self._poses or kept[1] is not self.x_stand:
            kept = self._pose_refs = (self._poses, self.x_stand, self.reference_state(self._poses[:, 0]))
        return kept[2]

    def reference_state(self, t) -> np.ndarray:
        """Target states (..., nx): trunk at the target pose, legs standing, at rest."""
        pose = self.pose_at(t)
        x = np.broadcast_to(self.x_stand, pose.shape[:-1] + self.x_stand.shape).copy()
        x[..., 2] += pose[..., 0]
        dq = np.moveaxis(_quat_rpy(pose[..., 1], pose[..., 2], pose[..., 3]), 0, -1)   # (..., 4), every knot at once
        x[..., 3:7] = quat_multiply(dq, self.x_stand[3:7])
        return x

    def _weights(self) -> np.ndarray:
        m = self.model
        nj = m.nv - 6
        return np.r_[np.full(3, self.w_base_pos), np.full(3, self.w_base_rot), np.full(nj, self.w_joint),
                     np.full(6, self.w_base_vel), np.full(nj, self.w_joint_vel)]

    def build_problem(self, x0, horizon: int, dt: float, backend: str | None = None, **solver_opts) -> ShootingProblem:
        m = self.model
        x0 = self.check_state(x0, "x0")
        integrator = solver_opts.pop("integrator", "euler")
        passive = solver_opts.pop("passive_forces", True)
        w = self._weights()
        refs = np.repeat(self.x_stand[None], horizon + 1, axis=0)
        running = CostSum({"state": (StateCost(m, refs, w), 1.0), "control": (ControlCost(m, self.u_stand), self.w_u),
                           "force": (ContactForceCost(m, self.contacts, self.lam_stand, passive_forces=passive),
                                     self.w_force)})
        f_min = 0.05 * self.lam_stand[2]
        hard = []
        if self.cones == "hard":
            hard = [FrictionCone(m, self.contacts, self.mu, f_min=f_min, passive_forces=passive)]
        else:
            running.add("cone", FrictionConeCost(m, self.contacts, self.mu, f_min=f_min, passive_forces=passive),
                        self.w_cone)
        terminal = StateCost(m, refs, self.terminal_factor * w)
        dyn = ContactDynamics(self.contacts, integrator=integrator, passive_forces=passive)
        return self._standing_problem(x0, horizon, dt, running, terminal, dyn, backend, solver_opts, hard)

    _cones_problem = build_problem

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        refs = self._knot_references(problem, float(t))
        for cost in (problem.running_cost, problem.terminal_cost):
            state_cost = next(c for c, _ in cost.terms.values() if isinstance(c, StateCost)) \
                if hasattr(cost, "terms") else cost
            if state_cost.reference is not refs:
                state_cost.reference = refs
                refs = state_cost.reference     # the validated (read-only) copy, for the next cost too
        self._knot_refs = self._knot_refs[:-1] + (refs,)

    def _knot_references(self, problem: ShootingProblem, t: float) -> np.ndarray:
        """The target states (N+1, nx) of the knots of ``problem``'s horizon from t [s]: the pose
        table's rows at the knot times. The table is piecewise constant in time, so consecutive
        updates almost always pick the same rows: then the validated array the state costs got last
        time comes back, and the update neither copies and checks the references again nor makes the
        compiled costs re-pack them. Same rows as :meth:`_pose_index` at every knot time."""
        table = self._pose_references()
        dts = problem.dts
        kept = getattr(self, "_knot_refs", None)
        if kept is None or kept[0] is not table or kept[1] is not dts:
            # the knot offsets from t, once per knot structure (its dts: a read-only array replaced with it)
            offsets = np.concatenate([[0.0], np.cumsum(dts)])
            kept = self._knot_refs = (table, dts, offsets, self._poses[:, 0].tolist(), None, None)
        offsets, starts = kept[2], kept[3]
        # the first and the last knot's pose (bisect: what np.searchsorted(side="right") - 1 gives,
        # clipped); the knot times increase, so equal ones mean every knot has that pose
        first = min(max(bisect.bisect_right(starts, t + offsets[0]) - 1, 0), len(starts) - 1)
        last = min(max(bisect.bisect_right(starts, t + float(offsets[-1])) - 1, 0), len(starts) - 1)
        if first == last:
            rows = first
        else:
            rows = self._pose_index(t + offsets)
        if kept[4] is not None and (rows == kept[4] if isinstance(rows, int) and isinstance(kept[4], int)
                                    else np.array_equal(rows, kept[4])):
            return kept[5]
        refs = table[np.full(offsets.shape[0], rows) if isinstance(rows, int) else rows]
        self._knot_refs = kept[:4] + (rows, refs)
        return refs

    # ------------------------------------------------------------ reporting
    def _errors(self, t, x):
        x = np.atleast_2d(x)
        ref = self.reference_state(np.broadcast_to(np.asarray(t, float), x.shape[:1]))
        height_err = x[:, 2] - ref[:, 2]
        d = StateSpace(self.model).difference(ref, x)
        angle_err = np.linalg.norm(d[:, 3:6], axis=-1)
        return height_err, angle_err

    def metrics(self, t: float, x) -> dict[str, float]:
        h, a = self._errors(t, x)
        return {"trunk_height": float(np.atleast_2d(x)[0, 2]), "height_error": float(abs(h[0])),
                "orientation_error": float(a[0]), "foot_slip": float(self._slip(x)[0])}

    def metric_info(self) -> dict[str, MetricInfo]:
        return {"trunk_height": MetricInfo("m", self.fall_height * self.standing_height, label="trunk height"),
                "height_error": MetricInfo("m", self.height_tolerance, label="|height error|"),
                "orientation_error": MetricInfo("rad", self.angle_tolerance, label="orientation error"),
                "foot_slip": MetricInfo("m", self.slip_tolerance, label="foot slip")}

    def events(self, t_end: float) -> list[Event]:
        ev = [Event(float(t), f"pose {i}") for i, t in enumerate(self._poses[1:, 0], 1) if t <= t_end]
        ev += [Event(p.t, f"push {p.body}") for p in self._pushes if p.t <= t_end]
        return ev

    def evaluate(self, times, states, controls) -> Evaluation:
        times, states = np.asarray(times, float), np.asarray(states, float)
        h_err, a_err = self._errors(times, states)
        slip = self._slip(states)
        min_height = float(states[:, 2].min())
        fell = min_height < self.fall_height * self.standing_height
        crit = [Criterion("no fall", min_height, "m", not fell,
                          f"lowest trunk height; a fall is below {self.fall_height * self.standing_height:.3f} m")]
        # tracking, judged per pose on its settled part (from settle_time after the switch, and
        # outside the settle time after a push): the worst pose's median error must be in tolerance
        quiet = np.ones_like(times, dtype=bool)
        for p in self._pushes:
            quiet &= ~((times >= p.t) & (times < p.t + p.duration + self.settle_time))
        starts = list(self._poses[:, 0]) + [np.inf]
        worst_h = worst_a = None
        for i in range(len(self._poses)):
            sel = quiet & (times >= starts[i] + (self.settle_time if i else 0.0)) & (times < starts[i + 1])
            if sel.any():
                hm, am = float(np.median(np.abs(h_err[sel]))), float(np.median(a_err[sel]))
                worst_h = hm if worst_h is None else max(worst_h, hm)
                worst_a = am if worst_a is None else max(worst_a, am)
        crit.append(Criterion("trunk height tracking", worst_h, "m",
                              None if worst_h is None else worst_h <= self.height_tolerance,
                              f"worst pose's median |error| from {self.settle_time} s after its switch, "
                              f"<= {self.height_tolerance} m"))
        crit.append(Criterion("trunk orientation tracking", worst_a, "rad",
                              None if worst_a is None else worst_a <= self.angle_tolerance,
                              f"worst pose's median error from {self.settle_time} s after its switch, "
                              f"<= {self.angle_tolerance} rad"))
        crit.append(Criterion("foot slip", float(slip.max()), "m", float(slip.max()) <= self.slip_tolerance,
                              f"largest horizontal foot displacement, <= {self.slip_tolerance} m"))
        for i, p in enumerate(self._pushes):
            after = times >= p.t
            ok = bool(after.any()) and not np.any(states[after, 2] < self.fall_height * self.standing_height)
            crit.append(Criterion(f"push {i} survived", float(np.linalg.norm(p.force)), "N",
                                  ok if after.any() else None,
                                  f"{p.body} pushed at t = {p.t} s for {p.duration} s"))
        cone_crit, cones = self._cone_criteria(times, states, controls)
        return Evaluation(crit + cone_crit, {"posture": self.posture_source, "feet": list(self.feet), "cones": cones})


@register_task("hyq-stand", "HyQ: four feet down, trunk height/orientation targets (quadruped-stand preset)")
@dataclass
class HyqStand(QuadrupedStand):
    robot: str = "hyq"
    name: str = "hyq-stand"
    description: str = "HyQ: four feet down, trunk height/orientation targets and pushes"
