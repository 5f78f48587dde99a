"""Reaching with any arm: the end effector (a site or body) visits a sequence of targets in turn.

Target ``i`` is active during ``[i·T, (i+1)·T)`` with ``T = switch_period`` (2 s by default);
the task succeeds when every target is reached within ``reach_tolerance`` (2 cm) no later than
``reach_time`` (1.5 s) after it becomes active, without exceeding the torque limits.

The arm: any fixed-base MJCF with torque actuators (``<motor>``, or ``<general>`` with a fixed gain
and no bias) whose limits the file gives (``ctrlrange``, ``forcerange`` or the joint's
``actuatorfrcrange``); position or velocity servos are not torque actuators and are not used. The
home posture is the keyframe ``home`` (else the model's reference configuration moved inside the
joint ranges). Targets, unless given: points at ``reach_fraction`` (40–70 %) of the arm's reach
from its first joint, no lower than that joint, at least a fifth of
the reach apart, each one reached by inverse kinematics from home within the joint ranges
(:func:`workspace_targets`). The arm's reach is the farthest the end effector gets from the first
joint over seeded random configurations inside the joint ranges.

Costs (running ones integrated over time, see :class:`solvers.ShootingProblem`):
end-effector position tracking (Gauss–Newton Hessian by default, exact on request), optionally the
end-effector orientation, state regularisation towards the home posture at rest, and control
regularisation around gravity compensation at home; torque limits from the model as control
bounds. The references are time-varying: knot k of a horizon starting at time t tracks the
target active at ``t + k·dt``, so the controller sees a switch coming.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np

from dynamics import RobotModel, get_backend, load_model
from dynamics.mujoco_frames import mujoco_frame
from solvers import (
    ActionModel,
    ControlCost,
    CostSum,
    FrameHalfSpace,
    FramePositionCost,
    FrameRotationCost,
    FreeDynamics,
    ShootingProblem,
    StateCost,
    gravity_compensation,
)
from solvers.costs import JointLimitCost
from solvers.costs.base import data_changes as cost_data_changes

from .arm import (
    check_arm,
    check_holds_gravity,
    frame_hint,
    home_configuration,
    workspace_targets,
)
from .base import Criterion, Evaluation, Event, MetricInfo, RunDefaults, Task
from .registry import register_task

BUNDLED_EE = {"iiwa": "ee"}
WALL_VIOLATION_LIMIT = 0.005    # m: the obstacle criterion (never further past the plane)
_AXES = {"x": 0, "y": 1, "z": 2}


def parse_wall(spec) -> tuple[np.ndarray, float]:
    """A wall the end effector must not cross, as ``(n, b)`` with the allowed side ``n · p ≤ b``
    (n: unit (3,) world normal, b [m]). spec: ``"AXIS<=B"`` / ``"AXIS>=B"`` (AXIS one of x, y, z;
    e.g. ``"y<=0.1"``: stay at y ≤ 0.1 m) or four numbers ``(nx, ny, nz, b)`` meaning
    ``n · p ≤ b``."""
    hint = "give --task-arg wall=AXIS<=B or wall=AXIS>=B (AXIS x, y or z, B in m; e.g. wall=y<=0.1) or wall=nx,ny,nz,b"
    if isinstance(spec, str):
        txt = spec.replace(" ", "")
        for op, sign in (("<=", 1.0), (">=", -1.0)):
            axis, found, value = txt.partition(op)
            if found:
                if axis.lower() not in _AXES:
                    raise ValueError(f"wall '{spec}': unknown axis '{axis}'; {hint}")
                try:
                    b = float(value)
                except ValueError:
                    raise ValueError(f"wall '{spec}': '{value}' is not a number; {hint}") from None
                n = np.zeros(3)
                n[_AXES[axis.lower()]] = sign
                return n, sign * b
        raise ValueError(f"wall '{spec}': expected '<=' or '>='; {hint}")
    try:
        v = np.asarray(spec, float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"wall {spec!r}: {hint}") from None
    if v.shape != (4,) or not np.all(np.isfinite(v)) or np.linalg.norm(v[:3]) == 0:
        raise ValueError(f"wall {spec!r}: expected four finite numbers with a non-zero normal; {hint}")
    scale = float(np.linalg.norm(v[:3]))
    return v[:3] / scale, float(v[3]) / scale


@register_task("arm-reach", "any arm (default the iiwa): the end effector visits 4 targets inside the arm's "
                            "workspace, one every 2 s (--robot FILE --ee FRAME)")
@dataclass
class ArmReach(Task):
    """End-effector reaching through a sequence of targets, for any fixed-base arm. robot: a bundled
    name or an MJCF path; ee: the end-effector frame (site or body; None: ``"ee"`` for the bundled
    iiwa); targets: (n, 3) world positions [m], None to place ``n_targets`` inside the arm's
    workspace (module docstring); reach_fraction: (low, high) fractions of the arm's reach for the
    computed targets; seed: of the workspace sampling; wall: a plane the end effector must not
    cross (:func:`parse_wall`), a hard constraint on every knot that makes ``csqp`` the default
    solver; targets past it are judged at their projection on it (``goals``)."""

    robot: str = "iiwa"
    ee: str | None = None
    targets: np.ndarray | None = None
    n_targets: int = 4
    reach_fraction: tuple = (0.4, 0.7)
    seed: int = 0
    switch_period: float = 2.0          # s per target
    reach_tolerance: float = 0.02       # m
    reach_time: float = 1.5             # s
    orientation: bool = False           # also track the home end-effector orientation
    w_ee: float = 1e3                   # running end-effector position weight [1/(m² s)]
    w_ee_terminal: float = 1e4          # terminal end-effector position weight [1/m²]
    w_rot: float = 10.0                 # orientation weight (when orientation=True)
    w_q: float = 1.0                    # posture regularisation
    w_v: float = 1.0                    # joint-velocity regularisation
    w_u: float = 1e-3                   # control regularisation around gravity compensation
    w_v_terminal: float = 10.0          # terminal velocity weight (arrive at rest)
    w_limits: float = 0.0               # soft joint-limit penalty [1/(rad² s)], off by default (see docs/mpc.md:
                                        # short horizons brush the joint limits at a target switch)
    limit_margin: float = 0.1           # rad inside each joint range where the penalty starts
    exact_hessian: bool = False         # exact end-effector Hessian (DDP converges quadratically near a
                                        # minimum; Gauss–Newton is more robust far from it, e.g. after a switch)
    wall: object = None                 # obstacle plane the end effector must not cross (parse_wall); a hard
                                        # constraint on every knot, solved by csqp
    name: str = "arm-reach"
    description: str = "arm end-effector reaching through targets inside its workspace"
    defaults = RunDefaults(solver="ddp", horizon=32, dt=0.01)

    @classmethod
    def solver_switches(cls) -> tuple[tuple[str, str], ...]:
        return (("wall=…", "csqp"),)

    def __post_init__(self):
        self.model: RobotModel = load_model(self.robot)
        m = self.model
        check_arm(m, self.name, self.robot)
        ee = self.ee if self.ee is not None else BUNDLED_EE.get(self.robot)
        if ee is None:
            raise ValueError(f"{self.name}: give the end-effector frame of '{self.robot}' (a site or body), e.g. "
                             f"--ee {frame_hint(m)}")
        try:
            m.frame(ee)
        except KeyError as e:
            raise ValueError(f"{self.name}: {e.args[0]} (give it with --ee FRAME)") from None
        self.frame = ee
        if not (self.switch_period > 0 and self.reach_time > 0 and self.reach_tolerance > 0):
            raise ValueError("switch_period, reach_time and reach_tolerance must be positive")
        if not (self.w_limits >= 0 and self.limit_margin >= 0):
            raise ValueError("w_limits and limit_margin must be >= 0")
        self.q_home, self.home_source = home_configuration(m)
        be = get_backend("numpy")
        self.u_gravity = gravity_compensation(m, be, self.q_home)
        check_holds_gravity(m, self.name, self.robot, self.u_gravity)
        self.R_home = be.frame_placement(m, self.q_home, self.frame)[0]
        if self.targets is None:
            self.targets, self.reach = workspace_targets(m, self.frame, self.q_home, self.n_targets,
                                                         self.reach_fraction, self.seed)
            self.target_source = (f"computed: {self.n_targets} points at {self.reach_fraction[0]:g}-"
                                  f"{self.reach_fraction[1]:g} of the arm's reach ({self.reach:.3f} m), reached by "
                                  f"inverse kinematics from {self.home_source}")
        else:
            self.reach = None
            self.target_source = "given"
        self.targets = np.array(self.targets, dtype=float)
        if self.targets.ndim != 2 or self.targets.shape[1] != 3 or self.targets.shape[0] < 1:
            raise ValueError(f"targets must be an (n, 3) array of positions [m], got shape {self.targets.shape}")
        if not np.all(np.isfinite(self.targets)):
            raise ValueError("targets contain non-finite values")
        self.wall_plane: tuple[np.ndarray, float] | None = None
        self.goals = self.targets
        if self.wall is not None:
            self.wall_plane = parse_wall(self.wall)
            n, b = self.wall_plane
            # a target past the wall stays the cost's reference; the criteria judge its projection on the wall
            self.goals = self.targets - np.maximum(self.targets @ n - b, 0.0)[:, None] * n
            p0 = self.ee_position(self.initial_state())
            if float(p0 @ n - b) > WALL_VIOLATION_LIMIT:
                raise ValueError(f"{self.name}: the end effector starts {(p0 @ n - b) * 1e3:.1f} mm past the wall "
                                 f"{self.wall!r} (at {np.round(p0, 3).tolist()} m); move the wall")
            self.defaults = RunDefaults(solver="csqp", horizon=type(self).defaults.horizon,
                                        dt=type(self).defaults.dt, update_period=type(self).defaults.update_period)
        # (weak reference to the problem, target key, the target arrays update_problem left it with)
        self._applied: tuple | None = None

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
    def build_problem(self, x0, horizon: int, dt: float, backend: str | None = None,
                      **solver_opts) -> ShootingProblem:
        """See :meth:`tasks.Task.build_problem` (backend None: :func:`dynamics.default_backend_name`)."""
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
        if self.w_limits > 0:
            running.add("joint_limits", JointLimitCost(m, margin=self.limit_margin), self.w_limits)
            terminal.add("joint_limits", JointLimitCost(m, margin=self.limit_margin), self.w_limits)
        if self.orientation:
            running.add("rotation", FrameRotationCost(m, self.frame, self.R_home), self.w_rot)
            terminal.add("rotation", FrameRotationCost(m, self.frame, self.R_home), 10 * self.w_rot)
        if self.wall_plane is None:
            problem = ShootingProblem.uniform(m, x0, horizon, dt, running, terminal,
                                              backend=self.resolve_backend(backend), **solver_opts)
        else:
            n, b = self.wall_plane
            wall = [FrameHalfSpace(m, self.frame, n, b)]
            dyn = FreeDynamics(solver_opts.pop("integrator", "euler"), solver_opts.pop("passive_forces", True))
            problem = ShootingProblem(x0, [ActionModel(m, running, dt, dyn, constraints=wall)] * int(horizon),
                                      ActionModel(m, terminal, 0.0, dyn, constraints=wall),
                                      backend=self.resolve_backend(backend), **solver_opts)
        self.update_problem(problem, 0.0)
        return problem

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        t, dt, N = float(t), problem.dt, problem.horizon
        # between target switches every knot has the same target, the one set last time: checked
        # from the first and last knot's index in scalar arithmetic (this runs every update)
        last = self.targets.shape[0] - 1
        i0 = min(max(math.floor(t / self.switch_period), 0), last)
        iN = min(max(math.floor((t + dt * N) / self.switch_period), 0), last)
        # what the skip relies on: the problem (its knot structure's revision and terminal cost), the
        # target (its index, the task's row for it, the switch period) and no cost's target, weights
        # or terms replaced anywhere since update_problem last set them (cost_data_changes counts every
        # replacement); one problem remembered (a weak reference), as a controller has one
        seen = self._applied
        if i0 == iN:
            key = (i0, self.targets[i0].tobytes(), self.switch_period, problem.revision, cost_data_changes())
            if seen is not None and seen[0]() is problem and seen[1] == key and seen[2] is problem.terminal_cost:
                return             # nothing to re-pack
        ee, term = problem.running_cost["ee"], problem.terminal_cost["ee"]
        refs = self.target_at(t + dt * np.arange(N + 1))  # (N+1, 3): running knots 0..N-1, terminal knot N
        if not np.array_equal(refs, ee.target):
            ee.target = refs
        if not np.array_equal(refs, term.target):
            term.target = refs
        if i0 == iN:        # (the count after the replacements above)
            key = (*key[:4], cost_data_changes())
            self._applied = (weakref.ref(problem), key, problem.terminal_cost)
        else:
            self._applied = None

    # ------------------------------------------------------------ metrics and criteria
    def ee_position(self, x) -> np.ndarray:
        q = np.asarray(x, float)[..., :self.model.nq]
        return get_backend("numpy").frame_placement(self.model, q, self.frame)[1]

    def metrics(self, t: float, x) -> dict[str, float]:
        """``ee_error``: distance [m] from the end effector to the active target;
        ``target_index``: which target is active."""
        x = self.check_state(x)
        i = int(self.target_index(t))
        err = float(np.linalg.norm(self.ee_position(x) - self.goals[i]))
        return {"ee_error": err, "target_index": float(i)}

    def metric_info(self) -> dict[str, MetricInfo]:
        return {"ee_error": MetricInfo(unit="m", threshold=self.reach_tolerance, log=True,
                                       label="distance to target"),
                "target_index": MetricInfo(plot=False, summary=False)}

    def events(self, t_end: float) -> list[Event]:
        """The target switches inside ``[0, t_end]``."""
        return [Event(i * self.switch_period, f"target {i}") for i in range(1, self.targets.shape[0])
                if i * self.switch_period <= t_end]

    def markers(self, times) -> np.ndarray:
        """The active target at each time (drawn in videos)."""
        return self.target_at(times)

    def evaluate(self, times, states, controls) -> Evaluation:
        """Per target i (active from ``t_i = i·switch_period``): ``target i time to reach`` — time
        from t_i to first coming within ``reach_tolerance`` (passes when <= ``reach_time``; value
        None when never reached or when the run ended before t_i, the detail says which) and
        ``target i error after reach`` — median distance from reaching to the next switch
        (reported, not judged: the controller starts for the next target when it enters the
        horizon). ``torque limit`` — the largest command beyond the model's actuator limits
        [N m] (passes when 0). ``details["targets"]``: per-target rows (position, start time,
        time to reach, best error, median error after reach)."""
        times = np.asarray(times, float)
        states = np.asarray(states, float)
        controls = np.asarray(controls, float)
        if times.ndim != 1 or states.ndim != 2 or states.shape[0] != times.shape[0]:
            raise ValueError("states must be (T, nx) with T = len(times)")
        if controls.size and (controls.ndim != 2 or controls.shape != (times.shape[0], self.model.nu)):
            raise ValueError(f"controls must be (T, nu) = ({times.shape[0]}, {self.model.nu}), got {controls.shape}")
        err = (np.linalg.norm(self.ee_position(states) - self.goals[self.target_index(times)], axis=-1)
               if times.size else times)
        idx = self.target_index(times)
        tol_cm = self.reach_tolerance * 100
        criteria, rows = [], []
        for i, target in enumerate(self.goals):
            t_i = i * self.switch_period
            seg = np.flatnonzero((idx == i) & (times >= t_i))
            where = "(" + ", ".join(f"{p:.2f}" for p in target) + ")"
            row = {"index": i, "position_m": target.tolist(), "t_start_s": float(times[seg[0]]) if seg.size else None,
                   "time_to_reach_s": None, "min_error_m": float(err[seg].min()) if seg.size else None,
                   "median_error_after_reach_m": None}
            if not seg.size:
                criteria.append(Criterion(f"target {i} time to reach", None, "s", False,
                                          f"not run: the run ended before its switch at {t_i:g} s"))
                criteria.append(Criterion(f"target {i} error after reach", None, "m", None, "not run"))
                rows.append(row)
                continue
            hit = seg[err[seg] <= self.reach_tolerance]
            reach = float(times[hit[0]] - t_i) if hit.size else None
            row["time_to_reach_s"] = reach
            rule = f"within {tol_cm:g} cm of {where} by {self.reach_time:g} s after {t_i:g} s"
            criteria.append(Criterion(f"target {i} time to reach", reach, "s",
                                      reach is not None and reach <= self.reach_time,
                                      rule if hit.size else f"never reached; {rule}"))
            after = seg[times[seg] >= times[hit[0]]] if hit.size else seg[:0]
            med = float(np.median(err[after])) if after.size else None
            row["median_error_after_reach_m"] = med
            criteria.append(Criterion(f"target {i} error after reach", med, "m", None,
                                      "median distance from reaching to the next switch" if hit.size
                                      else f"never reached (best {row['min_error_m'] * 100:.2f} cm)"))
            rows.append(row)
        m = self.model
        if controls.size:
            excess = np.maximum(controls - m.u_upper, 0) + np.maximum(m.u_lower - controls, 0)
            violation = float(np.max(excess))
        else:
            violation = 0.0
        criteria.append(Criterion("torque limit", violation, "N m", violation <= 1e-9,
                                  "largest command beyond the actuator limits"))
        q = states[:, :m.nq]
        if times.size:
            lo, hi = m.mj_model.jnt_range[:, 0], m.mj_model.jnt_range[:, 1]
            limited = m.mj_model.jnt_limited.astype(bool) & (m.mj_model.jnt_type >= 2)     # hinge/slide
            adr = m.mj_model.jnt_qposadr[limited]
            beyond = np.maximum(q[:, adr] - hi[limited], 0) + np.maximum(lo[limited] - q[:, adr], 0)
            joint_excess = float(beyond.max()) if beyond.size else 0.0
        else:
            joint_excess = 0.0
        criteria.append(Criterion("joint range", joint_excess, "rad", None,
                                  "largest joint position beyond its MJCF range (MuJoCo's qpos)"))
        details = {"targets": rows, "target_source": self.target_source, "home": self.home_source,
                   "end_effector": self.frame}
        if self.wall_plane is not None:
            n, b = self.wall_plane
            past = (self.mujoco_frame_positions(q) @ n - b) if times.size else np.zeros(0)
            worst = float(max(past.max(), 0.0)) * 1e3 if past.size else 0.0
            criteria.append(Criterion("wall violation", worst, "mm", worst <= WALL_VIOLATION_LIMIT * 1e3,
                                      f"largest distance of the end effector past the wall {self.wall!r}, MuJoCo's "
                                      f"kinematics of the simulated qpos (at most {WALL_VIOLATION_LIMIT * 1e3:g} mm)"))
            details["wall"] = {"normal": n.tolist(), "offset_m": b, "spec": str(self.wall),
                               "max_violation_mm": worst,
                               "share_of_steps_past_mm": float(np.mean(past > WALL_VIOLATION_LIMIT)) if past.size else 0.0}
        return Evaluation(criteria, details=details)

    def mujoco_frame_positions(self, q) -> np.ndarray:
        """(T, 3) world position [m] of the end-effector site/body/geom as MuJoCo computes it
        (``mj_kinematics``) for each row of q (T, nq): an oracle independent of our kinematics."""
        import mujoco
        mm = self.model.mj_model
        data = mujoco.MjData(mm)
        frame = mujoco_frame(mm, self.frame)
        out = np.empty((len(q), 3))
        for k, qk in enumerate(np.asarray(q, float)):
            data.qpos[:] = qk
            mujoco.mj_kinematics(mm, data)
            out[k] = frame.position(data)
        return out
