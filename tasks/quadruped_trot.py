"""Quadruped trot: diagonal pairs of feet swing in turn, from a contact schedule, while the trunk
tracks a commanded forward velocity; for any quadruped MJCF with actuators.

Contact schedule (times from ``start_time``): pair A (first and fourth foot: front-left, hind-right)
swings for ``swing_time``, all four feet are down for ``double_support_time``, pair B (front-right,
hind-left) swings, all four down again; repeated. Before ``start_time`` the robot stands.

The controller's model at each knot is the rigid-contact dynamics of the feet the schedule has on
the ground (:class:`solvers.ContactDynamics` on a shared :class:`dynamics.ContactSet` per phase),
with a touchdown **impulse knot** (:class:`solvers.ImpulseDynamics` on the four feet, dt = 0)
between a swing knot and the knot where the swing feet are down again. As the horizon slides,
:meth:`QuadrupedTrot.update_problem` re-phases the knots (``ShootingProblem.set_running_models``:
one shared action model per phase, so a horizon costs a few batched calls per stage) and moves the
references. The horizon has N knots in all: an impulse knot inside it takes the place of a timed
knot, so the horizon spans ``(N - impulses) · dt`` seconds.

Costs: trunk state (position following the command from where the trunk is, height and attitude of
the standing posture, body-frame velocity = command; legs to the standing posture), controls and
contact forces around the standing values of the phase's stance feet, a linearised friction cone,
swing feet: height profile (:class:`solvers.costs.FrameHeightCost`, ``step_height`` · (1 - cos 2πs)/2
over the swing) and horizontal path to the planned foothold
(:class:`solvers.costs.FramePositionCost`), touchdown: the foothold and zero foot velocity
(:class:`solvers.costs.FrameVelocityCost`) on the knot before the impact, the foothold on the impulse
knot. Footholds: the foot's standing offset from the trunk, at the trunk position predicted for the
touchdown, plus half the stance stride (Raibert's neutral point).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import mujoco
import numpy as np

from dynamics import ContactSet, RobotModel
from dynamics.lie import quat_multiply, quat_to_rotation
from dynamics.mujoco_frames import mujoco_frame
from solvers import ActionModel, ContactDynamics, ControlCost, CostSum, ImpulseDynamics, ShootingProblem, StateCost
from solvers.constraints import FrictionCone
from solvers.costs import (ContactForceCost, FrameHeightCost, FramePositionCost, FrameVelocityCost,
                           FrictionConeCost)
from solvers.costs.base import assign_reference, check_per_knot_rows

from .base import Criterion, Evaluation, Event, MetricInfo, RunDefaults, Task
from .legged import LeggedTask, _quat_rpy
from .registry import register_task

HYQ_VELOCITY = 0.3              # m/s, HyQ's default command
VELOCITY_LEG_FRACTION = 0.5     # other robots: half a leg length per second


class _PhasePattern(NamedTuple):
    """What a horizon from time t owes only to the gait's phase (:meth:`QuadrupedTrot._phase_pattern`):
    the same for every horizon starting at the same phase of the periodic gait."""

    models: list                # the N running action models
    controls: np.ndarray        # (N, nu) each knot's phase standing torques (read-only)
    times: np.ndarray           # (N+1,) knot times - t [s]
    touchdowns: np.ndarray      # (T,) the touchdowns of the knots' swings - t [s], pair A's then pair B's
    down: np.ndarray            # (4,) bool: the feet on the ground at t
    lifted: np.ndarray          # (4, N+1, 1) bool: the foot's swing of that knot lifted off by t
    which: np.ndarray           # (4, N+1) the index in ``touchdowns`` of the foot's swing of that knot
    stride: np.ndarray          # (4, N+1, 1) stride profile s - sin(2πs)/2π, s the knot's swing fraction
    heights: list               # 4 checked read-only (N+1,) height targets: ground + step · ½(1 - cos 2πs)
    command_times: np.ndarray   # (N+1+T,) ``times`` then ``touchdowns``: where the straight update
                                # evaluates the command and the travel (one pass)


@register_task("quadruped-trot", "any quadruped (default HyQ): diagonal-pair trot from a contact schedule "
                                 "(touchdown impulses) at a commanded forward velocity and yaw rate")
@dataclass
class QuadrupedTrot(LeggedTask, Task):
    """Quadruped trotting on point feet. robot: a bundled name or an MJCF path with actuators and a
    free-floating trunk; feet: the four contact frames in the order front-left, front-right,
    hind-left, hind-right (defaults for the bundled robots); yaw_rate: commanded yaw rate [rad/s]
    (0: straight ahead; the trunk then follows the commanded heading along an arc, and with
    velocity=0 turns in place; a turning task's ``defaults`` run two solver iterations per update);
    velocity: forward command [m/s] (None: 0.3 for HyQ, else ``velocity_leg_fraction`` leg lengths per second); swing_time,
    double_support_time [s]; step_height [m] (None: 0.15 leg lengths); start_time: standing
    before the first step [s] (raised to one horizon by :meth:`build_problem`); ramp_time: the command ramps up from 0 over this [s]; pushes:
    ``(t, body, (fx, fy, fz), duration)`` applied in the simulator; cones: the stance feet's friction
    cone and unilateral normal force as constraints of the stance knots (``"hard"``, the default,
    solved by csqp; the impulse knots have none) or as a cost (``"penalty"``, ``w_cone``, fddp)."""

    robot: str = "hyq"
    feet: tuple | str | None = None
    velocity: float | None = None
    yaw_rate: float = 0.0               # commanded yaw rate [rad/s] (with velocity=0: turning in place)
    velocity_leg_fraction: float = VELOCITY_LEG_FRACTION
    swing_time: float = 0.3
    double_support_time: float = 0.04
    step_height: float | None = None
    start_time: float = 0.3
    ramp_time: float = 1.0
    pushes: tuple = ()
    duration_s: float = 10.0
    w_base_xy: float = 50.0             # trunk horizontal position (follows the command) [1/(m² s)]
    w_base_z: float = 500.0             # trunk height
    w_base_rot: float = 500.0           # trunk attitude [1/(rad² s)]
    w_joint: float = 1.0                # leg posture
    w_base_vel: float = 20.0            # trunk velocity (body frame) vs command
    w_joint_vel: float = 0.1            # joint velocity
    w_u: float = 1e-4                   # control around the phase's standing torques
    w_force: float = 1e-4               # contact forces around the phase's standing distribution [1/(N² s)]
    w_cone: float = 10.0                # friction-cone and unilateral-force penalty [1/(N² s)]
    mu: float = 0.7                     # friction coefficient of the cone (inscribed pyramid)
    cones: str = "hard"                 # stance feet's cones: "hard" (constraints, csqp) or "penalty" (w_cone, fddp)
    w_swing_z: float = 1e4              # swing-foot height profile [1/(m² s)]
    w_swing_xy: float = 1e3             # swing-foot horizontal path to the foothold
    w_touchdown_vel: float = 1e2        # foot velocity on the knot before touchdown [1/((m/s)² s)]
    w_impact: float = 1e3               # foothold on the impulse knot (counted once) [1/m²]
    impulse_state_factor: float = 0.02  # the impulse knot's state/control weights = running × this [s]
    terminal_factor: float = 10.0       # terminal weights = running weights × this
    fall_height: float = 0.5            # a fall: the trunk below this fraction of its standing height
    height_band: float = 0.1            # trunk height judged within ± this fraction of the standing height
    velocity_tolerance: float = 0.3     # mean forward velocity within this fraction of the command
    velocity_floor: float = 0.05        # m/s: the velocity tolerance is never below this (a command of 0)
    yaw_tolerance: float = 0.3          # mean yaw rate within this fraction of the command
    settle_cycles: float = 1.0          # gait cycles after the ramp before velocity tracking is judged
    slip_tolerance: float = 0.03        # m, largest horizontal foot displacement during one stance
    name: str = "quadruped-trot"
    description: str = "quadruped: diagonal-pair trot at a commanded forward velocity and yaw rate"
    model: RobotModel = field(init=False, repr=False)
    defaults = RunDefaults(solver="csqp", horizon=16, dt=0.02)   # cones=hard; docs/tasks.md: rates measured

    def __post_init__(self):
        for key in ("swing_time", "duration_s", "velocity_leg_fraction"):
            val = getattr(self, key)
            if not (isinstance(val, (int, float)) and np.isfinite(val) and val > 0):
                raise ValueError(f"{self.name}: {key} must be a positive number, got {val!r}")
        for key in ("double_support_time", "start_time", "ramp_time"):
            val = getattr(self, key)
            if not (isinstance(val, (int, float)) and np.isfinite(val) and val >= 0):
                raise ValueError(f"{self.name}: {key} must be a number >= 0, got {val!r}")
        self._setup_legged()
        self._setup_cones()
        self.leg_length = float(self.standing_height - self._feet0[:, 2].mean())
        if self.velocity is None:
            self.velocity = HYQ_VELOCITY if self.robot == "hyq" else self.velocity_leg_fraction * self.leg_length
            self.velocity_source = ("HyQ default 0.3 m/s" if self.robot == "hyq" else
                                    f"{self.velocity_leg_fraction} leg lengths per second "
                                    f"(leg length {self.leg_length:.3f} m)")
        else:
            self.velocity_source = "given"
        self.velocity = float(self.velocity)
        if not np.isfinite(self.velocity):
            raise ValueError(f"{self.name}: velocity must be a finite number [m/s], got {self.velocity!r}")
        if not (isinstance(self.yaw_rate, (int, float)) and np.isfinite(self.yaw_rate)):
            raise ValueError(f"{self.name}: yaw_rate must be a finite number [rad/s], got {self.yaw_rate!r}")
        self.yaw_rate = float(self.yaw_rate)
        R0 = quat_to_rotation(self.x_stand[3:7])
        self._yaw_stand = float(np.arctan2(R0[1, 0], R0[0, 0]))
        if self.yaw_rate != 0.0:
            # turning: with one solver iteration per update the plan can fail to recover from the
            # dynamics gaps of a touchdown impulse entering the horizon (tiny line-search steps, the
            # gaps and cone violations pile up, the robot falls); a second iteration closes them (the
            # solver stays the one _setup_cones chose for the cones mode)
            self.defaults = replace(self.defaults, iterations=max(2, self.defaults.iterations))
        if self.step_height is None:
            self.step_height = 0.15 * self.leg_length
        if not (np.isfinite(self.step_height) and self.step_height > 0):
            raise ValueError(f"{self.name}: step_height must be a positive number [m], got {self.step_height!r}")
        self.cycle = 2.0 * (self.swing_time + self.double_support_time)
        self.stance_time = self.swing_time + 2.0 * self.double_support_time
        # diagonal pairs: (front-left, hind-right) and (front-right, hind-left)
        self.pairs = ((0, 3), (1, 2))
        # foot offsets from the trunk in the standing posture (world axes, trunk yaw 0)
        self._offsets = self._feet0 - self.x_stand[None, :3]
        self._ground = self._feet0[:, 2].copy()
        self._liftoff = self._feet0.copy()
        self._x_now = self.x_stand.copy()

    # ------------------------------------------------------------ schedule
    def command(self, t) -> np.ndarray:
        """Forward velocity command [m/s] at times t: 0 before start_time, ramped up over ramp_time."""
        return self.velocity * self._ramp(t)

    def yaw_command(self, t) -> np.ndarray:
        """Yaw-rate command [rad/s] at times t: ramped like :meth:`command`."""
        return self.yaw_rate * self._ramp(t)

    def _ramp(self, t) -> np.ndarray:
        """The command's ramp (0 before start_time, 1 after start_time + ramp_time) at times t."""
        return self._ramp_parts(np.asarray(t, float) - self.start_time)[0]

    def _ramp_parts(self, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ramp and ∫ ramp dt [s] from start_time (exact), each shaped as d, at the times
        start_time + d [s]."""
        r = self.ramp_time
        if r <= 0:
            return (d >= 0.0).astype(float), np.maximum(d, 0.0)
        s = np.minimum(np.maximum(d, 0.0), r)
        return np.minimum(np.maximum(d / r, 0.0), 1.0), s * s / (2 * r) + np.maximum(d - r, 0.0)

    def _ramp_integral(self, t0: float, t1) -> np.ndarray:
        """∫ ramp dt [s] from t0 to t1 (exact)."""
        t1 = np.asarray(t1, float)
        f = self._ramp_parts(np.concatenate([[float(t0)], t1.ravel()]) - self.start_time)[1]   # both ends in one pass
        return (f[1:] - f[0]).reshape(t1.shape)

    def _command_and_travel(self, t: float, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`command` at ``times`` (K,) and :meth:`_travel` from t to them, in one pass."""
        d = np.empty(times.shape[0] + 1)
        d[0] = t
        d[1:] = times
        d -= self.start_time
        ramp, f = self._ramp_parts(d)
        return self.velocity * ramp[1:], self.velocity * (f[1:] - f[0])

    def _travel(self, t0: float, t1) -> np.ndarray:
        """∫ command dt [m] from t0 to t1 (exact for the ramp)."""
        return self.velocity * self._ramp_integral(t0, t1)

    def heading(self, t) -> np.ndarray:
        """Commanded trunk yaw [rad] at times t: the standing yaw plus ∫ yaw command dt from 0."""
        return self._yaw_stand + self.yaw_rate * self._ramp_integral(0.0, t)

    def _arc(self, p0: np.ndarray, t0: float, times) -> np.ndarray:
        """Commanded trunk positions (..., 2) [m] at ``times`` (>= t0) from p0 (2,) at t0: ∫ command ·
        (cos ψ, sin ψ) dt along the commanded heading ψ (midpoint rule on 5 ms steps)."""
        times = np.asarray(times, float)
        t1 = float(times.max()) if times.size else t0
        n = max(1, int(np.ceil((t1 - t0) / 0.005)))
        grid = np.linspace(t0, t1, n + 1)
        mid = 0.5 * (grid[1:] + grid[:-1])
        psi = self.heading(mid)
        step = (self.command(mid) * np.diff(grid))[:, None] * np.stack([np.cos(psi), np.sin(psi)], axis=-1)
        path = np.concatenate([np.zeros((1, 2)), np.cumsum(step, axis=0)])
        return p0 + np.stack([np.interp(times, grid, path[:, i]) for i in range(2)], axis=-1)

    def contact_state(self, t) -> np.ndarray:
        """Which feet (..., 4) the schedule has on the ground at times t [s]."""
        # rounded to 1 ns: a knot whose middle sits on a phase switch (updates half a knot apart)
        # gets the same phase at every update, not one that flips with the rounding of t
        t = np.round(np.asarray(t, float), 9)
        tau = np.round(np.mod(t - self.start_time, self.cycle), 9)
        sw, ds = self.swing_time, self.double_support_time
        a_swing = (t >= self.start_time) & (tau < sw)
        b_swing = (t >= self.start_time) & (tau >= sw + ds) & (tau < 2 * sw + ds)
        out = np.ones(t.shape + (4,), dtype=bool)
        for j in self.pairs[0]:
            out[..., j] = ~a_swing
        for j in self.pairs[1]:
            out[..., j] = ~b_swing
        return out

    def swing_window(self, t: float, foot: int) -> tuple[float, float]:
        """(lift-off, touchdown) times [s] of the swing of ``foot`` that contains t, or of its next
        swing if it is on the ground at t (:meth:`swing_windows` of one time; also the biped gait's,
        :class:`tasks.biped_gait.BipedGait`, which has the same attributes)."""
        lo, td = QuadrupedTrot.swing_windows(self, np.array([float(t)]), foot)
        return float(lo[0]), float(td[0])

    def swing_windows(self, t: np.ndarray, foot: int) -> tuple[np.ndarray, np.ndarray]:
        """(lift-off, touchdown) times [s], each shaped as t, of the swings of ``foot`` that contain
        the times t [s] (a foot on the ground: its next swing). Times and phases are compared after
        rounding to 1 ns, as :meth:`contact_state` does."""
        pair = 0 if foot in self.pairs[0] else 1
        offset = self.start_time + pair * (self.swing_time + self.double_support_time)
        t = np.round(np.asarray(t, float), 9)
        n = np.floor(np.round((t - offset) / self.cycle, 9))
        lo = offset + np.maximum(n, 0.0) * self.cycle
        lo = np.where(t >= np.round(lo + self.swing_time, 9), lo + self.cycle, lo)
        return lo, lo + self.swing_time

    # ------------------------------------------------------------ Task interface
    def _weights(self) -> np.ndarray:
        nj = self.model.nv - 6
        return np.r_[self.w_base_xy, self.w_base_xy, self.w_base_z, np.full(3, self.w_base_rot),
                     np.full(nj, self.w_joint), np.full(6, self.w_base_vel), np.full(nj, self.w_joint_vel)]

    def build_problem(self, x0, horizon: int, dt: float, backend: str | None = None, **solver_opts) -> ShootingProblem:
        m = self.model
        x0, integrator, passive = self._gait_problem_inputs(x0, dt, solver_opts, passive_default=True)
        self.dt = float(dt)
        # the first solve starts from the standing controls rolled out over the horizon: with a swing
        # in it that rollout diverges (standing torques on two feet), so the gait starts after it
        self.start_time = max(float(self.start_time), horizon * self.dt)
        w = self._weights()
        refs = np.repeat(self.x_stand[None], horizon + 1, axis=0)
        self._state_costs = []

        def state_cost(scale: float) -> StateCost:
            c = StateCost(m, refs, scale * w)
            self._state_costs.append(c)
            return c

        # swing-foot costs, one object per foot (per-knot targets), shared by the knots where it swings
        self._swing_z = [FrameHeightCost(m, f, np.zeros(horizon + 1), self.w_swing_z) for f in self.feet]
        self._swing_xy = [FramePositionCost(m, f, np.zeros((horizon + 1, 3)), (self.w_swing_xy,) * 2 + (0.0,))
                          for f in self.feet]
        self._touch_vel = [FrameVelocityCost(m, f, (0.0, 0.0, 0.0), self.w_touchdown_vel) for f in self.feet]
        self._impact = [FramePositionCost(m, f, np.zeros((horizon + 1, 3)), self.w_impact) for f in self.feet]
        # one action model per phase: (contact mask, touchdown-next flag)
        self._phase_models: dict = {}
        self._phase_controls: dict = {}       # contact mask -> the standing torques on its stance feet
        all4 = ContactSet(m, frames=self.feet, kind="point")
        masks = [(True,) * 4]
        for pair in self.pairs:
            masks.append(tuple(j not in pair for j in range(4)))
        for mask in masks:
            stance = tuple(f for f, c in zip(self.feet, mask) if c)
            cs = all4 if all(mask) else ContactSet(m, frames=stance, kind="point")
            lam, u = self._standing_forces_and_torques(self.x_stand, stance)
            self._phase_controls[mask] = u
            dyn = ContactDynamics(cs, integrator=integrator, passive_forces=passive)
            for last in ((False, True) if not all(mask) else (False,)):
                terms = {"state": (state_cost(1.0), 1.0), "control": (ControlCost(m, u), self.w_u),
                         "force": (ContactForceCost(m, cs, lam, passive_forces=passive), self.w_force)}
                hard = []
                if self.cones == "hard":
                    hard = [FrictionCone(m, cs, self.mu, f_min=0.05 * lam[2], passive_forces=passive)]
                else:
                    terms["cone"] = (FrictionConeCost(m, cs, self.mu, f_min=0.05 * lam[2], passive_forces=passive),
                                     self.w_cone)
                for j in range(4):
                    if not mask[j]:
                        terms[f"swing_z_{j}"] = (self._swing_z[j], 1.0)
                        terms[f"swing_xy_{j}"] = (self._swing_xy[j], 1.0)
                        if last:
                            terms[f"touchdown_vel_{j}"] = (self._touch_vel[j], 1.0)
                self._phase_models[(mask, last)] = ActionModel(m, CostSum(terms), dt, dyn, constraints=hard)
        impulse = ImpulseDynamics(all4)     # the touchdown impact, on the four feet
        for pair in self.pairs:
            f = self.impulse_state_factor
            terms = {"state": (state_cost(f), 1.0), "control": (ControlCost(m, self.u_stand), f * self.w_u)}
            for j in pair:
                terms[f"impact_{j}"] = (self._impact[j], 1.0)
            self._phase_models[("impulse", pair)] = ActionModel(m, CostSum(terms), 0.0, impulse)
        terminal = state_cost(self.terminal_factor)
        stand = self._phase_models[((True,) * 4, False)]
        problem = ShootingProblem(x0, [stand] * horizon, ActionModel(m, terminal, 0.0, stand.dynamics),
                                  backend=self.resolve_backend(backend), **solver_opts)
        problem.initial_controls = self.u_stand
        self.update_problem(problem, 0.0)
        return problem

    _cones_problem = build_problem

    def knot_schedule(self, t: float, horizon: int, dt: float) -> list:
        """The horizon's knots from time t: a list of (time [s], kind) with kind a contact mask
        (4 bools, the feet down over that knot, judged at its middle) or ``("impulse", pair)``
        for a touchdown of ``pair`` (no time), N entries in all."""
        # the timed knots (at most N; an impulse knot takes a timed knot's place) summed up knot by
        # knot (add.accumulate is sequential), their masks in one call
        tks = np.add.accumulate(np.r_[float(t), np.full(max(horizon - 1, 0), float(dt))])
        tk_list = tks.tolist()
        mask_list = [tuple(r) for r in self.contact_state(tks + 0.5 * dt).tolist()]
        knots = []
        i = 0
        prev = None
        while len(knots) < horizon:
            tk, mask = tk_list[i], mask_list[i]
            if prev is not None and mask != prev and any(c and not p for c, p in zip(mask, prev)) \
                    and knots[-1][1][0] != "impulse":
                landing = tuple(j for j in range(4) if mask[j] and not prev[j])
                pair = next(p for p in self.pairs if set(landing) & set(p))
                knots.append((tk, ("impulse", pair)))
                continue
            knots.append((tk, mask))
            prev = mask
            i += 1
        return knots

    @staticmethod
    def touchdown_next(schedule: list, k: int) -> bool:
        """Whether knot k of a :meth:`knot_schedule` is a swing knot followed by a touchdown."""
        kind = schedule[k][1]
        return kind[0] != "impulse" and not all(kind) and k + 1 < len(schedule) \
            and schedule[k + 1][1][0] == "impulse"

    @staticmethod
    def knot_times(schedule: list, dt: float) -> np.ndarray:
        """Times (N+1,) [s] of the knots of a :meth:`knot_schedule` and of the terminal knot."""
        t_end = schedule[-1][0] + (0.0 if schedule[-1][1][0] == "impulse" else dt)
        return np.array([tk for tk, _ in schedule] + [t_end])

    @staticmethod
    def swing_probes(schedule: list, dt: float) -> np.ndarray:
        """Times (N+1,) [s] at which :meth:`swing_window` finds the swing each knot of a
        :meth:`knot_schedule` (and the terminal knot) belongs to: a timed knot's middle, where its
        contact mask is judged; an impulse knot and the terminal knot take the probe of the knot
        before them, the swing that ends there (an impulse knot's time can be up to half a knot past
        the scheduled touchdown, where the foot is already down and its next swing would be found)."""
        probe = np.empty(len(schedule) + 1)
        tks = np.array([tk for tk, _ in schedule])
        probe[:-1] = tks + 0.5 * dt
        for k in (k for k, (_, kind) in enumerate(schedule) if kind[0] == "impulse"):
            # the middle of the knot before (first knot: where it would be)
            probe[k] = probe[k - 1] if k > 0 else tks[k] - 0.5 * dt
        probe[-1] = probe[-2]
        return probe

    def _phase_pattern(self, t: float, N: int, dt: float) -> _PhasePattern:
        """What the horizon from t owes only to the gait's phase (:class:`_PhasePattern`, times
        relative to t). Once every probe of the horizon is past start_time the pattern repeats every
        gait cycle, so it is kept per phase (rounded to 1 ns, as :meth:`contact_state`), before that
        per time, for the phase models of the last :meth:`build_problem`."""
        owner, cache = getattr(self, "_pattern_cache", (None, None))
        if owner is not self._phase_models:
            cache = {}
            self._pattern_cache = (self._phase_models, cache)
        if t >= self.start_time + dt:   # every probe (down to t - dt/2) inside the periodic gait
            phase = round((t - self.start_time) % self.cycle, 9)       # (np.mod's result, without its call)
            key = (N, dt, self.start_time, self.cycle, phase)
        else:                           # before it, the time itself (the warm-up's visits, the loop's first steps)
            phase = None
            key = (N, dt, self.start_time, self.cycle, "at", t)
        hit = cache.get(key)
        if hit is not None:
            return hit
        if phase is not None:
            # computed at one time per phase (in the gait's first whole cycle past start_time + dt),
            # whichever update meets the phase first: the pattern (times relative to that time) is
            # then the same bits whether it comes from the cache or is computed afresh
            t = self.start_time + max(1.0, np.ceil(dt / self.cycle)) * self.cycle + phase
        sched = self.knot_schedule(t, N, dt)
        # running models: a swing knot followed by a touchdown takes the "last" variant
        models = [self._phase_models[kind if kind[0] == "impulse" else (kind, self.touchdown_next(sched, k))]
                  for k, (_, kind) in enumerate(sched)]
        # each kind's torques once, then a row per knot
        row = {kind: None for _, kind in sched}
        table = np.stack([self.u_stand if kind[0] == "impulse" else self._phase_controls[kind] for kind in row])
        row = dict(zip(row, range(len(row))))
        controls = table[[row[kind] for _, kind in sched]]
        controls.setflags(write=False)
        times = self.knot_times(sched, dt)
        probe = self.swing_probes(sched, dt)
        impulse = np.array([kind[0] == "impulse" for _, kind in sched] + [False])
        tds, lifted, which = [], np.empty((4, N + 1, 1), bool), np.empty((4, N + 1), np.intp)
        lift, stride = np.empty((4, N + 1)), np.empty((4, N + 1, 1))
        for p in (0, 1):
            lo, td = self.swing_windows(probe, self.pairs[p][0])
            s = np.clip((times - lo) / (td - lo), 0.0, 1.0)
            s[impulse] = 1.0            # the impulse knot is the touchdown: on the foothold
            u, inv = np.unique(td - t, return_inverse=True)
            js = list(self.pairs[p])
            # lifted off by t (lift-off at or before t, to the schedule's 1 ns): from the lift-off point
            lifted[js] = (lo - t <= 1e-9)[None, :, None]
            which[js] = sum(x.size for x in tds) + inv[None]
            lift[js] = 0.5 * (1.0 - np.cos(2.0 * np.pi * s))
            stride[js] = (s - np.sin(2 * np.pi * s) / (2 * np.pi))[None, :, None]
            tds.append(u)
        z = self._ground[:, None] + self.step_height * lift
        rel, tds = times - t, np.concatenate(tds)
        out = _PhasePattern(models, controls, rel, tds, self.contact_state(t), lifted, which, stride,
                            check_per_knot_rows("swing height targets", z, ()), np.concatenate([rel, tds]))
        for a in out[1:]:
            if isinstance(a, np.ndarray):
                a.setflags(write=False)     # kept and shared by the updates at this phase
        if len(cache) > 512:            # a few cycles' phases and the times before the gait, in practice
            cache.clear()
        cache[key] = out
        return out

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        m = self.model
        N = problem.horizon
        t = float(t)
        x_now = problem.x0
        pat = self._phase_pattern(t, N, self.dt)
        self._knot_controls = pat.controls
        problem.set_running_models(pat.models)
        # trunk references: forward from where the trunk is, height/attitude/legs of the standing posture
        refs, hold, xy_t = self._update_templates(N)
        if self.yaw_rate == 0.0:
            # the knots' and the touchdowns' commands and travels in one pass
            cmd, trav = self._command_and_travel(t, t + pat.command_times)
            refs[:, m.nq] = cmd[:N + 1]                       # body-frame forward velocity
            refs[:, 0] = x_now[0] + trav[:N + 1]              # straight ahead, lateral position held
            # the four feet's footholds of each knot's swing in one pass (their y: the template's)
            ahead = self._neutral_x(x_now[0], trav[N + 1:], cmd[N + 1:])
            np.add(self._offsets[:, 0, None], ahead[pat.which], out=hold[:, :, 0])
        else:
            times = t + pat.times
            refs[:, m.nq] = self.command(times)               # body-frame forward velocity
            # along the commanded arc from where the trunk is, heading and yaw rate as commanded
            refs[:, :2] = self._arc(x_now[:2], t, times)
            dq = np.stack([_quat_rpy(0.0, 0.0, psi - self._yaw_stand) for psi in self.heading(times)])
            refs[:, 3:7] = quat_multiply(dq, self.x_stand[3:7])
            refs[:, m.nq + 5] = self.yaw_command(times)       # body-frame yaw rate (level trunk)
            # each touchdown on its own arc
            for j in range(4):
                ks = np.unique(pat.which[j])
                holds = np.array([self._foothold(j, x_now, t, d)[:2] for d in (t + pat.touchdowns[ks]).tolist()])
                hold[j] = holds[np.searchsorted(ks, pat.which[j])]
        assign_reference(self._state_costs, refs)      # validated once, shared by every phase's state cost
        # feet: lift-off points remembered while a foot is down; the swing path from there (or from
        # where the foot is, before it lifts off) to the foothold
        feet_now = self._feet_now(x_now)
        self._liftoff[pat.down] = feet_now[pat.down]
        start = np.where(pat.lifted, self._liftoff[:, None, :2], feet_now[:, None, :2])
        xy_t[:, :, :2] = start + (hold - start) * pat.stride      # (z: the template's ground heights)
        # validated once for the four feet (read-only rows the setters take as they are)
        xy_rows = check_per_knot_rows("swing foot targets", xy_t, (3,))
        for j in range(4):
            self._swing_z[j].target = pat.heights[j]
            self._swing_xy[j].target = xy_rows[j]
            self._impact[j].target = xy_rows[j]

    def _update_templates(self, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh working arrays of an update of an N-knot horizon, copied from templates made once
        per horizon: the state references (N+1, nx) (the standing state on every knot), the
        footholds (4, N+1, 2) (y: each foot's standing offset beside the standing trunk; x to be
        written) and the swing targets (4, N+1, 3) (z: each foot's ground height; x, y to be
        written). (The references and targets go to the costs as new arrays every update: the
        costs' setters and the compiled costs' re-packing tell a change by identity.)"""
        tpl = getattr(self, "_templates", None)
        if tpl is None or tpl[0] != N or tpl[1] is not self.x_stand:
            hold = np.zeros((4, N + 1, 2))
            hold[:, :, 1] = (self._offsets[:, 1] + self.x_stand[1])[:, None]
            xy = np.zeros((4, N + 1, 3))
            xy[:, :, 2] = self._ground[:, None]
            tpl = self._templates = (N, self.x_stand, np.repeat(self.x_stand[None], N + 1, axis=0), hold, xy)
        return tpl[2].copy(), tpl[3].copy(), tpl[4].copy()

    def warmup_times(self) -> tuple[float, ...]:
        """Every knot time (``dt`` of the last :meth:`build_problem`) from dt to ``start_time +
        cycle``, and halfway through the first swing: the horizons of the gait's first cycle, which
        has stance, swing and touchdown-impulse knots. An MPC updating on that grid then meets, after
        its warm-up, only knot structures that its problem keeps (structures, cost layouts, dynamics
        data, phase patterns: built during the warm-up, not by the closed loop's first cycle); the
        gait repeats them every cycle after."""
        dt = self.dt
        n = int(np.floor(round((self.start_time + self.cycle) / dt, 9)))
        grid = np.round(dt * np.arange(1, n + 1), 9).tolist()
        return tuple(sorted(set(grid) | {self.start_time + 0.5 * self.swing_time}))

    def nominal_controls(self, problem: ShootingProblem) -> np.ndarray:
        """Each knot's phase standing torques (N, nu) (:meth:`Task.nominal_controls`): a knot that
        enters the horizon with feet lifted gets the torques of its own stance, not those of the
        previous plan's last (four-foot) knot, whose stance torques whip the free legs (a gap of
        ~50 rad/s in one 20 ms knot that one FDDP iteration per update does not close)."""
        return self._knot_controls

    def _feet_now(self, x: np.ndarray) -> np.ndarray:
        """World positions (4, 3) [m] of the foot frames at state x, by MuJoCo's kinematics (the same
        model; one C call instead of one backend call per foot, in every update)."""
        mj = self.model.mj_model
        d = getattr(self, "_kin_data", None)
        if d is None:
            d = self._kin_data = mujoco.MjData(mj)
            self._foot_frames = [mujoco_frame(mj, f) for f in self.feet]
        d.qpos[:] = x[:self.model.nq]       # (the kinematics read no velocity)
        mujoco.mj_kinematics(mj, d)
        return np.array([frame.position(d) for frame in self._foot_frames])

    def _neutral_x(self, x0, travel, command):
        """Straight ahead: the world x [m] that a foot's standing offset is added to for a touchdown,
        from the trunk's x0 now, its commanded travel until the touchdown and the command there (each
        [m], [m], [m/s], broadcast): the trunk's predicted position plus half the stance stride
        (Raibert's neutral point)."""
        return x0 + travel + 0.5 * self.stance_time * command

    def _foothold(self, j: int, x_now: np.ndarray, t: float, t_td: float) -> np.ndarray:
        """Planned touchdown point (3,) of foot j: its standing offset from the trunk at the trunk
        position predicted for the touchdown, plus half the stance stride (the neutral point)."""
        p = self._offsets[j].copy()
        if self.yaw_rate == 0.0:
            p[0] += self._neutral_x(x_now[0], self._travel(t, t_td), float(self.command(t_td)))
            p[1] += self.x_stand[1]
        else:   # the offset turned with the commanded heading, at the trunk's commanded position
            psi = float(self.heading(t_td))
            c, s = np.cos(psi - self._yaw_stand), np.sin(psi - self._yaw_stand)
            off = np.array([c * p[0] - s * p[1], s * p[0] + c * p[1]])
            ahead = 0.5 * self.stance_time * float(self.command(t_td)) * np.array([np.cos(psi), np.sin(psi)])
            p[:2] = self._arc(x_now[:2], t, np.array([t_td]))[0] + off + ahead
        p[2] = self._ground[j]
        return p

    # ------------------------------------------------------------ reporting
    def _yaw_rate(self, x) -> np.ndarray:
        """Trunk yaw rate (T,) [rad/s]: the world z component of its angular velocity."""
        m = self.model
        x = np.atleast_2d(x)
        R = quat_to_rotation(x[:, 3:7])
        return np.einsum("bj,bj->b", R[:, 2, :], x[:, m.nq + 3:m.nq + 6])

    def _forward_velocity(self, x) -> np.ndarray:
        """Trunk forward velocity (T,) [m/s]: its horizontal velocity along its heading (the body x
        axis projected on the ground); at yaw 0, the world x velocity."""
        m = self.model
        x = np.atleast_2d(x)
        R = quat_to_rotation(x[:, 3:7])
        v = np.einsum("bij,bj->bi", R[:, :2, :], x[:, m.nq:m.nq + 3])     # world axes (the state's: body)
        heading = R[:, :2, 0] / np.linalg.norm(R[:, :2, 0], axis=-1, keepdims=True)
        return np.einsum("bi,bi->b", heading, v)

    def metrics(self, t: float, x) -> dict[str, float]:
        x = np.atleast_2d(x)
        c = self.foot_contacts(x)[0]
        out = {"trunk_height": float(x[0, 2]), "forward_velocity": float(self._forward_velocity(x)[0]),
               "velocity_command": float(self.command(t))}
        if self.yaw_rate != 0.0:
            out["yaw_rate"] = float(self._yaw_rate(x)[0])
            out["yaw_rate_command"] = float(self.yaw_command(t))
        for j, f in enumerate(self.feet):
            out[f"contact_{f}"] = float(c[j])
        return out

    def metric_info(self) -> dict[str, MetricInfo]:
        info = {"trunk_height": MetricInfo("m", self.fall_height * self.standing_height, label="trunk height"),
                "forward_velocity": MetricInfo("m/s", self.velocity, label="forward velocity"),
                "velocity_command": MetricInfo("m/s", label="velocity command")}
        if self.yaw_rate != 0.0:
            info["yaw_rate"] = MetricInfo("rad/s", self.yaw_rate, label="yaw rate")
            info["yaw_rate_command"] = MetricInfo("rad/s", label="yaw-rate command")
        for f in self.feet:
            info[f"contact_{f}"] = MetricInfo("", label=f"{f} in contact (MuJoCo)", summary=False)
        return info

    def events(self, t_end: float) -> list[Event]:
        ev = [Event(self.start_time, "gait starts")] if self.start_time <= t_end else []
        return ev + [Event(p.t, f"push {p.body}") for p in self._pushes if p.t <= t_end]

    def evaluate(self, times, states, controls) -> Evaluation:
        times, states = np.asarray(times, float), np.asarray(states, float)
        z = states[:, 2]
        fall = self.fall_height * self.standing_height
        lo, hi = (1 - self.height_band) * self.standing_height, (1 + self.height_band) * self.standing_height
        crit = [Criterion("no fall", float(z.min()), "m", bool(z.min() >= fall),
                          f"lowest trunk height; a fall is below {fall:.3f} m")]
        crit.append(Criterion("trunk height in band", float(np.abs(z - self.standing_height).max()), "m",
                              bool(np.all((z >= lo) & (z <= hi))),
                              f"largest |height - standing| ; band {lo:.3f}..{hi:.3f} m"))
        steady = times >= self.start_time + self.ramp_time + self.settle_cycles * self.cycle
        v_tol = max(self.velocity_tolerance * abs(self.velocity), self.velocity_floor)
        if steady.sum() > 1 and self.yaw_rate == 0.0:
            v_mean = float((states[steady, 0][-1] - states[steady, 0][0]) / (times[steady][-1] - times[steady][0]))
            crit.append(Criterion("forward velocity", v_mean, "m/s", abs(v_mean - self.velocity) <= v_tol,
                                  f"mean over the steady part (x displacement / time) vs command {self.velocity:.3f} "
                                  f"m/s, within {v_tol:.3g} m/s"))
        elif steady.sum() > 1:
            v_mean = float(np.mean(self._forward_velocity(states[steady])))
            crit.append(Criterion("forward velocity", v_mean, "m/s", abs(v_mean - self.velocity) <= v_tol,
                                  f"mean over the steady part of the velocity along the trunk's heading vs command "
                                  f"{self.velocity:.3f} m/s, within {v_tol:.3g} m/s"))
        else:
            crit.append(Criterion("forward velocity", None, "m/s", None, "the run ended before the steady part"))
        if self.yaw_rate != 0.0 and steady.sum() > 1:
            R = quat_to_rotation(states[steady, 3:7])
            yaw = np.unwrap(np.arctan2(R[:, 1, 0], R[:, 0, 0]))
            w_mean = float((yaw[-1] - yaw[0]) / (times[steady][-1] - times[steady][0]))
            crit.append(Criterion("yaw rate", w_mean, "rad/s",
                                  abs(w_mean - self.yaw_rate) <= self.yaw_tolerance * abs(self.yaw_rate),
                                  f"mean over the steady part (yaw change / time) vs command {self.yaw_rate:.3f} "
                                  f"rad/s, within {100 * self.yaw_tolerance:.0f} %"))
        elif self.yaw_rate != 0.0:
            crit.append(Criterion("yaw rate", None, "rad/s", None, "the run ended before the steady part"))
        # MuJoCo-measured contacts (every 5th sample: 5 ms at 1 ms steps) and slip while in contact
        stride = max(1, int(round(0.005 / max(float(np.median(np.diff(times))) if times.size > 1 else 0.005, 1e-6))))
        sub = states[::stride]
        contacts = self.foot_contacts(sub)
        slip = self.stance_slip(sub, contacts)
        crit.append(Criterion("foot slip", float(slip.max()), "m", bool(slip.max() <= self.slip_tolerance),
                              f"largest horizontal foot displacement during one contact (MuJoCo), "
                              f"<= {self.slip_tolerance} m"))
        gait = times[::stride] >= self.start_time
        lifted = [bool((~contacts[gait, j]).any()) for j in range(4)]
        crit.append(Criterion("both diagonal pairs lift", float(sum(lifted)), "feet", None if not gait.any() else
                              all(lifted), "feet seen off the ground (MuJoCo) after the gait started, of 4"))
        cone_crit, cones = self._cone_criteria(times, states, controls)
        return Evaluation(crit + cone_crit, {"posture": self.posture_source, "feet": list(self.feet),
                                             "velocity_command": self.velocity, "velocity_source": self.velocity_source,
                                             "yaw_rate_command": self.yaw_rate,
                                             "slip_per_foot": [float(s) for s in slip], "cones": cones})


@register_task("hyq-trot", "HyQ: diagonal-pair trot at 0.3 m/s (quadruped-trot preset)")
@dataclass
class HyqTrot(QuadrupedTrot):
    robot: str = "hyq"
    name: str = "hyq-trot"
    description: str = "HyQ: diagonal-pair trot at 0.3 m/s from a contact schedule with touchdown impulses"
