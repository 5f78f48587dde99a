"""Humanoid walk: the soles step in turn from a periodic contact schedule while the pelvis follows a
commanded forward speed and yaw rate; for any humanoid MJCF with actuators (default Atlas).

Contact schedule (:class:`tasks.biped_gait.BipedGait`): both soles down before ``start_time``, then
sole 0 swings, double support, sole 1 swings, double support, repeated. The controller's model at
each knot is the rigid-contact dynamics of the soles the schedule has down, as 6-D contacts
(:class:`solvers.ContactDynamics`: a stance sole cannot move or turn), with a touchdown **impulse
knot** (:class:`solvers.ImpulseDynamics` on both soles, dt = 0) between the last swing knot and the
first knot of the double support. As the horizon slides, :meth:`HumanoidWalk.update_problem`
re-phases the knots (one shared action model per phase) and moves the references, as
:class:`tasks.QuadrupedTrot` does for a quadruped; the gait structure (double support → single
support with the swing sole lifted and placed ahead → impulse at touchdown) is the one of
Crocoddyl's biped walking example (Mastalli et al. 2020, "Crocoddyl: An Efficient and Versatile
Framework for Multi-Contact Optimal Control").

Costs: the CoM follows the commanded path, leaning over the stance sole during a swing
(:meth:`BipedGait.com_side`, ``com_shift`` of the way to the sole centre); the pelvis upright,
at its standing height, heading as commanded, body-frame velocity = command; the joints off the
legs to the standing posture; controls and sole wrenches around the phase's standing values, the
stance soles' wrench cone (:class:`solvers.costs.WrenchConeCost`); the swing sole: height profile
``step_height · (1 - cos 2πs)/2``, horizontal path to its foothold and flat orientation with the
commanded heading; on the knot before touchdown its velocity is zero, on the impulse knot it is on
its foothold and flat. Foothold: the sole's standing offset from the pelvis, at the pelvis position
predicted for the touchdown, plus half the stance stride ahead (the neutral point).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dynamics import ContactSet, RobotModel, get_backend
from dynamics.lie import quat_multiply, quat_to_rotation
from solvers import (
    ActionModel,
    ComPositionCost,
    ContactDynamics,
    ControlCost,
    CostSum,
    ImpulseDynamics,
    ShootingProblem,
    StateCost,
)
from solvers.costs import (
    ContactForceCost,
    FrameHeightCost,
    FramePositionCost,
    FrameRotationCost,
    FrameVelocityCost,
    WrenchConeCost,
)

from .base import Criterion, Evaluation, Event, MetricInfo, RunDefaults
from .biped_gait import BipedGait
from .humanoid import HumanoidBalance
from .legged import LeggedTask, _quat_rpy
from .quadruped_trot import QuadrupedTrot
from .registry import register_task


def _rot_z(psi: float) -> np.ndarray:
    c, s = np.cos(psi), np.sin(psi)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@register_task("humanoid-walk", "any humanoid (default Atlas): walking from a contact schedule of 6-D sole "
                                "contacts (touchdown impulses) at a commanded forward speed and yaw rate")
@dataclass
class HumanoidWalk(HumanoidBalance):
    """Humanoid walking on two flat soles. robot: a bundled name or an MJCF path with actuators on
    every joint and a free-floating pelvis; feet: the two sole frames (left, right: sites at the
    sole centres, +z the sole normal); sole_size: see :class:`HumanoidBalance`; speed: forward
    command [m/s]; yaw_rate: commanded yaw rate [rad/s]; swing_time, double_support_time [s];
    step_height [m] (None: ``step_height_fraction`` leg lengths); start_time: standing before the
    first step [s] (raised to one horizon by :meth:`build_problem`); ramp_time: the command ramps
    up from 0 over this [s]; com_shift: the fraction of the way from the middle to the stance sole
    centre the CoM leans during a swing."""

    robot: str = "atlas"
    feet: tuple | str | None = None
    sole_size: tuple | None = None
    speed: float = 0.3                  # forward command [m/s]
    yaw_rate: float = 0.0
    swing_time: float = 0.5
    double_support_time: float = 0.3
    step_height: float | None = None
    step_height_fraction: float = 0.08
    start_time: float = 0.5
    ramp_time: float = 1.0
    com_shift: float = 0.7
    duration_s: float = 10.0
    w_com: float = 1000.0               # CoM position [1/(m² s)]
    w_base_pos: float = 20.0            # pelvis position (follows the CoM path)
    w_base_rot: float = 500.0           # pelvis orientation (upright, commanded heading)
    w_joint: float = 20.0               # joints off the legs (back, arms, neck): standing posture
    w_leg: float = 0.1                  # leg joints
    w_base_vel: float = 10.0            # pelvis velocity (body frame) vs command
    w_joint_vel: float = 0.5            # joint velocity
    w_swing_z: float = 1e4              # swing-sole height profile [1/(m² s)]
    w_swing_xy: float = 1e3             # swing-sole horizontal path to the foothold
    w_swing_rot: float = 1e4            # swing sole flat, commanded heading [1/(rad² s)]
    w_touchdown_vel: float = 1e4        # sole velocity on the knot before touchdown
    w_impact: float = 1e4               # foothold and flat sole on the impulse knot (counted once)
    w_u: float = 1e-3                   # control around the phase's standing torques (lower: the light
                                        # swing foot's explicit Euler step goes unstable at dt = 30 ms)
    land_early: float = 0.25            # the swing profile ends this fraction of the swing before touchdown
    impulse_state_factor: float = 0.02  # the impulse knot's state/control weights = running × this [s]
    min_distance: float = 2.0           # m the pelvis must travel forward
    velocity_tolerance: float = 0.2     # mean forward speed within this fraction of the command
    settle_cycles: float = 1.0          # gait cycles after the ramp before the speed is judged
    touchdown_tilt_tolerance: float = 5.0   # deg, largest sole tilt at a MuJoCo touchdown
    cones: str = "penalty"              # its own problem has the soles' wrench cone as a cost only (no "hard")
    name: str = "humanoid-walk"
    description: str = "humanoid: walking with 6-D sole contacts and touchdown impulses at a commanded speed"
    model: RobotModel = field(init=False, repr=False)
    # three solver iterations per update: with one or two, Atlas falls (one: at the first lift-off);
    # three walk from the perturbed starts as four do, faster (docs/tasks.md)
    defaults = RunDefaults(solver="fddp", horizon=20, dt=0.03, iterations=3)

    # the commanded path (ramped speed and yaw rate, heading, arc) is the quadruped trot's
    command = QuadrupedTrot.command
    yaw_command = QuadrupedTrot.yaw_command
    _ramp = QuadrupedTrot._ramp
    _ramp_parts = QuadrupedTrot._ramp_parts
    _ramp_integral = QuadrupedTrot._ramp_integral
    _travel = QuadrupedTrot._travel
    heading = QuadrupedTrot.heading
    _arc = QuadrupedTrot._arc
    _forward_velocity = QuadrupedTrot._forward_velocity
    _yaw_rate = QuadrupedTrot._yaw_rate
    # MuJoCo contacts of the sole bodies and slip while in contact, as for a legged robot's feet
    foot_positions = LeggedTask.foot_positions
    foot_contacts = LeggedTask.foot_contacts
    _foot_bodies = LeggedTask._foot_bodies
    stance_slip = LeggedTask.stance_slip
    _feet_now = QuadrupedTrot._feet_now

    def __post_init__(self):
        rules = ((("speed", "yaw_rate"), lambda v: True, "a finite number"),
                 (("swing_time", "duration_s", "step_height_fraction"), lambda v: v > 0, "a positive number"),
                 (("double_support_time", "start_time", "ramp_time"), lambda v: v >= 0, "a number >= 0"))
        for keys, ok, what in rules:
            for key in keys:
                val = getattr(self, key)
                if isinstance(val, bool) or not (isinstance(val, (int, float)) and np.isfinite(val) and ok(val)):
                    raise ValueError(f"{self.name}: {key} must be {what}, got {val!r}")
        # the commanded path functions shared with the quadruped trot read ``velocity``
        self.velocity, self.yaw_rate = float(self.speed), float(self.yaw_rate)
        if not 0.0 <= self.com_shift <= 1.0:
            raise ValueError(f"{self.name}: com_shift must be in [0, 1], got {self.com_shift!r}")
        self.pushes = tuple(self.pushes)
        super().__post_init__()
        m = self.model
        q0 = self.x_stand[:m.nq]
        self.leg_length = float(q0[2] - min(p[2] for _, p in self._soles0))
        if self.step_height is None:
            self.step_height = self.step_height_fraction * self.leg_length
        if not (np.isfinite(self.step_height) and self.step_height > 0):
            raise ValueError(f"{self.name}: step_height must be a positive number [m], got {self.step_height!r}")
        R0 = quat_to_rotation(self.x_stand[3:7])
        self._yaw_stand = float(np.arctan2(R0[1, 0], R0[0, 0]))
        Rz0 = _rot_z(self._yaw_stand)
        # standing offsets from the pelvis in the heading frame (yaw removed)
        self._sole_off = np.array([Rz0.T @ (p - q0[:3]) for _, p in self._soles0])      # (2, 3)
        self._com_off = Rz0.T @ (self.com_stand - q0[:3])
        self._half_width = 0.5 * float(self._sole_off[0, 1] - self._sole_off[1, 1])
        if not self._half_width > 0:
            raise ValueError(f"{self.name}: the first sole '{self.feet[0]}' must be the left one (its standing "
                             f"position left of the second, '{self.feet[1]}'); give feet=LEFT,RIGHT")
        self._ground = np.array([p[2] for _, p in self._soles0])
        self._liftoff = np.array([p for _, p in self._soles0])
        self._make_gait(self.start_time)

    def _make_gait(self, start_time: float) -> None:
        self.start_time = float(start_time)
        self.gait = BipedGait(self.swing_time, self.double_support_time, self.start_time,
                              shift_time=min(self.start_time, max(0.3, self.double_support_time)))

    # ------------------------------------------------------------ references
    def _sway(self, t) -> np.ndarray:
        """Lateral lean of the CoM and pelvis (...,) [m] in the heading frame at times t."""
        return self.com_shift * self._half_width * self.gait.com_side(t)

    def _path(self, x_now: np.ndarray, t: float, times: np.ndarray) -> np.ndarray:
        """Commanded pelvis positions (K, 2) [m] at ``times`` without the sway: from where the pelvis
        is at t along the commanded heading (straight ahead: lateral position of the standing pelvis)."""
        if self.yaw_rate == 0.0:
            u = np.array([np.cos(self._yaw_stand), np.sin(self._yaw_stand)])
            p0 = self.x_stand[:2] + u * float(u @ (x_now[:2] - self.x_stand[:2]))
            return p0 + np.outer(self._travel(t, times), u)
        psi = float(self.heading(t))
        p0 = x_now[:2] - self._sway(t) * np.array([-np.sin(psi), np.cos(psi)])
        return self._arc(p0, t, times)

    def _foothold(self, j: int, x_now: np.ndarray, t: float, t_td: float) -> np.ndarray:
        """Planned touchdown point (3,) of sole j: its standing offset from the pelvis at the pelvis
        position predicted for the touchdown, plus half the stance stride ahead."""
        psi = float(self.heading(t_td))
        Rz = _rot_z(psi)
        ahead = 0.5 * self.gait.stance_time * float(self.command(t_td))
        p = np.empty(3)
        p[:2] = self._path(x_now, t, np.array([t_td]))[0] + (Rz @ (self._sole_off[j] + [ahead, 0.0, 0.0]))[:2]
        p[2] = self._ground[j]
        return p

    def _sole_rotation(self, j: int, t) -> np.ndarray:
        """Target rotation (3, 3) of sole j at time t: its standing rotation turned to the heading."""
        return _rot_z(float(self.heading(t)) - self._yaw_stand) @ self._soles0[j][0]

    def com_target(self, t) -> np.ndarray:
        """CoM targets (..., 3) [m] at times t [s] along the commanded path from the standing pelvis
        (what the plots mark; the controller's targets start from where the pelvis is)."""
        t = np.atleast_1d(np.asarray(t, float))
        return self._com_refs(self.x_stand, 0.0, t)

    def _com_refs(self, x_now: np.ndarray, t: float, times: np.ndarray) -> np.ndarray:
        path = self._path(x_now, t, times)
        psi = self.heading(times)
        c, s = np.cos(psi), np.sin(psi)
        off_x, off_y = self._com_off[0], self._com_off[1] + self._sway(times)
        out = np.empty((len(times), 3))
        out[:, 0] = path[:, 0] + c * off_x - s * off_y
        out[:, 1] = path[:, 1] + s * off_x + c * off_y
        out[:, 2] = self.com_stand[2]
        return out

    # ------------------------------------------------------------ problem
    def _weights(self) -> np.ndarray:
        nv = self.model.nv
        wq = np.full(nv - 6, self.w_joint)
        wq[self.leg_dofs() - 6] = self.w_leg
        return np.r_[np.full(3, self.w_base_pos), np.full(3, self.w_base_rot), wq,
                     np.full(6, self.w_base_vel), np.full(nv - 6, self.w_joint_vel)]

    def _single_support(self, stance: int) -> tuple[np.ndarray, np.ndarray]:
        """Sole wrench (6,) and torques (nu,) holding the standing posture on sole ``stance`` alone."""
        m = self.model
        be = get_backend("numpy")
        q = self.x_stand[:m.nq]
        f = self.feet[stance]
        J = be.frame_jacobian(m, q, f, "local")
        lam_even = np.r_[be.frame_placement(m, q, f)[0].T @ [0.0, 0.0, self.weight], np.zeros(3)]
        return self._holding(q, J, lam_even)

    def build_problem(self, x0, horizon: int, dt: float, backend: str | None = None, **solver_opts) -> ShootingProblem:
        m = self.model
        # passive forces: as humanoid-balance (see there)
        x0, integrator, passive = self._gait_problem_inputs(x0, dt, solver_opts, passive_default=False)
        self.dt = float(dt)
        # the first solve starts from the standing controls: the gait starts after one horizon
        self._make_gait(max(float(self.start_time), horizon * self.dt))
        w = self._weights()
        K = horizon + 1
        refs = np.repeat(self.x_stand[None], K, axis=0)
        coms = np.repeat(self.com_stand[None], K, axis=0)
        self._state_costs, self._com_costs = [], []

        def state_cost(scale: float) -> StateCost:
            c = StateCost(m, refs, scale * w)
            self._state_costs.append(c)
            return c

        def com_cost() -> ComPositionCost:
            c = ComPositionCost(m, coms)
            self._com_costs.append(c)
            return c

        X, Y = (self.cop_margin * self.sole_half_extents).T
        eye = np.repeat(np.eye(3)[None], K, axis=0)
        self._swing_z = [FrameHeightCost(m, f, np.zeros(K), self.w_swing_z) for f in self.feet]
        self._swing_xy = [FramePositionCost(m, f, np.zeros((K, 3)), (self.w_swing_xy,) * 2 + (0.0,)) for f in self.feet]
        self._swing_rot = [FrameRotationCost(m, f, eye, self.w_swing_rot) for f in self.feet]
        self._touch_vel = [FrameVelocityCost(m, f, (0.0, 0.0, 0.0), self.w_touchdown_vel) for f in self.feet]
        self._impact = [FramePositionCost(m, f, np.zeros((K, 3)), self.w_impact) for f in self.feet]
        self._impact_rot = [FrameRotationCost(m, f, eye, self.w_impact) for f in self.feet]
        self._phase_models: dict = {}
        self._phase_controls: dict = {(True, True): self.u_stand}   # contact mask -> standing torques
        both = ContactDynamics(self.contacts, integrator=integrator, passive_forces=passive)
        self._phase_models[((True, True), False)] = ActionModel(m, CostSum({
            "com": (com_cost(), self.w_com), "state": (state_cost(1.0), 1.0),
            "control": (ControlCost(m, self.u_stand), self.w_u),
            "force": (ContactForceCost(m, self.contacts, self.lam_stand, passive_forces=passive), self.w_force),
            "wrench_cone": (WrenchConeCost(m, self.contacts, X, Y, self.mu, f_min=0.05 * self.weight / 2,
                                           passive_forces=passive), self.w_cone)}), dt, both)
        for j in range(2):                       # sole j swings, sole k stands
            k = 1 - j
            cs = ContactSet(m, frames=(self.feet[k],), kind="6d")
            lam, u = self._single_support(k)
            dyn = ContactDynamics(cs, integrator=integrator, passive_forces=passive)
            mask = (j == 1, j == 0)
            self._phase_controls[mask] = u
            for last in (False, True):
                terms = {"com": (com_cost(), self.w_com), "state": (state_cost(1.0), 1.0),
                         "control": (ControlCost(m, u), self.w_u),
                         "force": (ContactForceCost(m, cs, lam, passive_forces=passive), self.w_force),
                         "wrench_cone": (WrenchConeCost(m, cs, X[[k]], Y[[k]], self.mu, f_min=0.05 * self.weight,
                                                        passive_forces=passive), self.w_cone),
                         "swing_z": (self._swing_z[j], 1.0), "swing_xy": (self._swing_xy[j], 1.0),
                         "swing_rot": (self._swing_rot[j], 1.0)}
                if last:
                    terms["touchdown_vel"] = (self._touch_vel[j], 1.0)
                self._phase_models[(mask, last)] = ActionModel(m, CostSum(terms), dt, dyn)
        impulse = ImpulseDynamics(self.contacts)      # the touchdown impact, on both soles
        f = self.impulse_state_factor
        for j in range(2):
            terms = {"state": (state_cost(f), 1.0), "control": (ControlCost(m, self.u_stand), f * self.w_u),
                     "impact": (self._impact[j], 1.0), "impact_rot": (self._impact_rot[j], 1.0)}
            self._phase_models[("impulse", j)] = ActionModel(m, CostSum(terms), 0.0, impulse)
        terminal = CostSum({"com": (com_cost(), self.terminal_factor * self.w_com),
                            "state": (state_cost(self.terminal_factor), 1.0)})
        stand = self._phase_models[((True, True), False)]
        problem = ShootingProblem(x0, [stand] * horizon, ActionModel(m, terminal, 0.0, both),
                                  backend=self.resolve_backend(backend), **solver_opts)
        problem.initial_controls = self.u_stand
        self.update_problem(problem, 0.0)
        return problem

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        m, N, dt, t, x_now = self.model, problem.horizon, self.dt, float(t), problem.x0
        sched = self.gait.knot_schedule(t, N, dt)
        # one shared model per phase; a swing knot followed by a touchdown takes the "last" variant
        problem.set_running_models([self._phase_models[kind if kind[0] == "impulse" else
                                                        (kind, self.gait.touchdown_next(sched, k))]
                                    for k, (_, kind) in enumerate(sched)])
        self._knot_controls = np.stack([self.u_stand if kind[0] == "impulse" else self._phase_controls[kind]
                                        for _, kind in sched])
        times = self.gait.knot_times(sched, dt)
        coms = self._com_refs(x_now, t, times)
        refs = np.repeat(self.x_stand[None], N + 1, axis=0)
        psi = self.heading(times)
        refs[:, :2] = coms[:, :2] - self._com_xy_world(psi)     # the pelvis under the CoM path
        dq = np.stack([_quat_rpy(0.0, 0.0, p - self._yaw_stand) for p in psi])
        refs[:, 3:7] = quat_multiply(dq, self.x_stand[3:7])
        refs[:, m.nq] = self.command(times)                    # body-frame forward velocity
        refs[:, m.nq + 5] = self.yaw_command(times)
        for c in self._state_costs:
            c.reference = refs
        for c in self._com_costs:
            c.target = coms
        # swing soles: lift-off points remembered while a sole is down; footholds ahead
        soles_now = self._feet_now(x_now)
        down = self.gait.contact_state(t)
        for j in range(2):
            if down[j]:
                self._liftoff[j] = soles_now[j]
        probe = self.gait.swing_probes(sched, dt)
        for j in range(2):
            win = np.array([self.gait.swing_window(float(pk), j) for pk in probe])
            lo, td = win.T
            start = np.where((lo <= t)[:, None], self._liftoff[j][None, :2], soles_now[j][None, :2])
            holds = {d: self._foothold(j, x_now, t, d) for d in np.unique(td)}
            hold = np.stack([holds[d][:2] for d in td])
            # the profile ends ``land_early`` of the swing before the scheduled touchdown, and the sole
            # is then held at the floor: a sole that lands late is planned (rigid 6-D contact in
            # double support) as if it were down, and the leg swings it onto its edge
            s = np.clip((times - lo) / ((1.0 - self.land_early) * (td - lo)), 0.0, 1.0)
            z = self._ground[j] + self.step_height * 0.5 * (1.0 - np.cos(2.0 * np.pi * s))
            xy = np.empty((N + 1, 3))
            xy[:, :2] = start + (hold - start) * (s - np.sin(2 * np.pi * s) / (2 * np.pi))[:, None]
            xy[:, 2] = self._ground[j]
            rot = np.stack([self._sole_rotation(j, d) for d in td])
            self._swing_z[j].target = z
            self._swing_xy[j].target = xy
            self._swing_rot[j].target = rot
            self._impact[j].target = xy
            self._impact_rot[j].target = rot

    def warmup_times(self) -> tuple[float, ...]:
        """Halfway through the first swing (swing and, with a horizon past the touchdown, impulse and
        stance knots) and 1.5 knots before the touchdown (swing, touchdown-impulse and stance knots
        with any horizon of 3 knots or more: half a 0.5 s swing is longer than a short horizon)."""
        touchdown = self.start_time + self.swing_time
        return (self.start_time + 0.5 * self.swing_time, touchdown - 1.5 * self.dt)

    def nominal_controls(self, problem: ShootingProblem) -> np.ndarray:
        """Each knot's phase standing torques (N, nu) (:meth:`Task.nominal_controls`): a swing knot
        entering the horizon gets the single-support torques, not the double-support ones of the
        previous plan's last knot (which would push the free leg as if it carried half the weight)."""
        return self._knot_controls

    def _com_xy_world(self, psi: np.ndarray) -> np.ndarray:
        """The standing CoM's horizontal offset from the pelvis (K, 2) [m] turned to headings psi."""
        c, s = np.cos(psi), np.sin(psi)
        ox, oy = self._com_off[0], self._com_off[1]
        return np.stack([c * ox - s * oy, s * ox + c * oy], axis=-1)

    # ------------------------------------------------------------ reporting (MuJoCo's measurements)
    def metrics(self, t: float, x) -> dict[str, float]:
        x = np.atleast_2d(x)
        c = self.foot_contacts(x)[0]
        out = {"pelvis_height": float(x[0, 2]), "forward_velocity": float(self._forward_velocity(x)[0]),
               "velocity_command": float(self.command(t)), "sole_tilt": float(self.sole_tilt_and_lift(x)[0][0])}
        if self.yaw_rate != 0.0:
            out["yaw_rate"] = float(self._yaw_rate(x)[0])
        for j, f in enumerate(self.feet):
            out[f"contact_{f}"] = float(c[j])
        return out

    def metric_info(self) -> dict[str, MetricInfo]:
        info = {"pelvis_height": MetricInfo("m", self.fall_height * self.standing_height, label="pelvis height"),
                "forward_velocity": MetricInfo("m/s", self.velocity, label="forward velocity"),
                "velocity_command": MetricInfo("m/s", label="velocity command"),
                "sole_tilt": MetricInfo("deg", self.touchdown_tilt_tolerance, label="largest sole tilt")}
        if self.yaw_rate != 0.0:
            info["yaw_rate"] = MetricInfo("rad/s", self.yaw_rate, label="yaw rate")
        for f in self.feet:
            info[f"contact_{f}"] = MetricInfo("", label=f"{f} in contact (MuJoCo)", summary=False)
        return info

    def events(self, t_end: float) -> list[Event]:
        ev = [Event(self.start_time, "gait starts")] if self.start_time <= t_end else []
        return ev + [Event(p.t, f"push {p.body}") for p in self._pushes if p.t <= t_end]

    def touchdowns(self, times, states, contacts: np.ndarray | None = None) -> list[tuple[float, int, float]]:
        """MuJoCo touchdowns after the gait started: (time [s], sole, largest tilt [deg] of either
        sole at the first sample in contact), from contacts (T, 2) (:meth:`foot_contacts` of ``states``)."""
        times = np.asarray(times, float)
        C = self.foot_contacts(states) if contacts is None else contacts
        out = []
        for j in range(2):
            for i in np.flatnonzero(C[1:, j] & ~C[:-1, j]) + 1:
                if times[i] >= self.start_time:
                    out.append((float(times[i]), j, float(self.sole_tilt_and_lift(states[i])[0][0])))
        return sorted(out)

    def evaluate(self, times, states, controls) -> Evaluation:
        times, states = np.asarray(times, float), np.asarray(states, float)
        com = self._com(states)
        fall = self.fall_height * self.standing_height
        fallen = (states[:, 2] < fall) | (com[:, 2] < self.fall_height * self.com_stand[2])
        crit = [Criterion("no fall", float(states[:, 2].min()), "m", not fallen.any(),
                          f"lowest pelvis height; fallen: pelvis below {fall:.3f} m or CoM below "
                          f"{self.fall_height * self.com_stand[2]:.3f} m")]
        u0 = np.array([np.cos(self._yaw_stand), np.sin(self._yaw_stand)])
        if self.yaw_rate == 0.0:
            along = (states[:, :2] - states[0, :2]) @ u0
            how = "pelvis displacement along the initial heading"
        else:
            v = self._forward_velocity(states)
            along = np.concatenate([[0.0], np.cumsum(0.5 * (v[1:] + v[:-1]) * np.diff(times))])
            how = "∫ pelvis velocity along its heading dt"
        dist = float(along[-1])
        crit.append(Criterion("distance walked", dist, "m", dist >= self.min_distance and not fallen.any(),
                              f"{how}, >= {self.min_distance} m without falling"))
        steady = times >= self.start_time + self.ramp_time + self.settle_cycles * self.gait.cycle
        tol = self.velocity_tolerance * abs(self.velocity)
        if steady.sum() > 1:
            ts = times[steady]
            v_mean = float((along[steady][-1] - along[steady][0]) / (ts[-1] - ts[0]))
            crit.append(Criterion("mean speed", v_mean, "m/s", abs(v_mean - self.velocity) <= tol,
                                  f"mean over the steady part (from {ts[0]:.2f} s) vs command {self.velocity:.3f} m/s, "
                                  f"within {100 * self.velocity_tolerance:.0f} %"))
        else:
            crit.append(Criterion("mean speed", None, "m/s", None, "the run ended before the steady part"))
        if self.yaw_rate != 0.0 and steady.sum() > 1:
            w_mean = float(np.mean(self._yaw_rate(states[steady])))
            crit.append(Criterion("yaw rate", w_mean, "rad/s", abs(w_mean - self.yaw_rate) <= 0.3 * abs(self.yaw_rate),
                                  f"mean measured pelvis yaw rate over the steady part vs command "
                                  f"{self.yaw_rate:.3f} rad/s, within 30 %"))
        # MuJoCo contacts every 5 ms (at 1 ms steps)
        step = float(np.median(np.diff(times))) if times.size > 1 else 0.005
        stride = max(1, round(0.005 / max(step, 1e-6)))
        ts, sub = times[::stride], states[::stride]
        contacts = self.foot_contacts(sub)
        td = self.touchdowns(ts, sub, contacts)
        per_sole = [sum(1 for _, j, _ in td if j == s) for s in range(2)]
        crit.append(Criterion("steps", float(len(td)), "touchdowns", min(per_sole) >= 1 if ts[-1] > self.start_time
                              + self.gait.cycle else None,
                              f"MuJoCo touchdowns after the gait started (per sole {per_sole}); each sole must step"))
        worst = max((tilt for _, _, tilt in td), default=None)
        crit.append(Criterion("soles flat at touchdown", worst, "deg",
                              None if worst is None else worst <= self.touchdown_tilt_tolerance,
                              f"largest tilt of a sole (MuJoCo) at the first 5 ms sample of a touchdown, "
                              f"<= {self.touchdown_tilt_tolerance} deg"))
        slip = self.stance_slip(sub, contacts)
        crit.append(Criterion("sole slip", float(slip.max()), "m", None,
                              "largest horizontal sole displacement during one contact (MuJoCo)"))
        return Evaluation(crit, {"posture": self.posture_source, "feet": list(self.feet),
                                 "velocity_command": self.velocity, "yaw_rate_command": self.yaw_rate,
                                 "step_height_m": self.step_height, "touchdowns": td,
                                 "slip_per_sole_m": [float(s) for s in slip]})

