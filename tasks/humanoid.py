"""Humanoid balance: both soles flat on the ground (rigid 6-D contacts), the centre of mass tracks a
squat and a lateral lean and the robot recovers from pushes; for any humanoid MJCF with actuators.

The controller's model is the rigid-contact dynamics of :class:`solvers.ContactDynamics` with the
two soles as 6-D contacts (the sole cannot move or turn: Mastalli et al. 2020's fixed-contact MPC)
at every knot. Costs: centre-of-mass tracking (:class:`solvers.costs.ComPositionCost`, the
targets of :attr:`HumanoidBalance.waypoints`), the pelvis upright and following the CoM, a light
pull of the joints to the standing posture, controls around the standing torques, the sole
wrenches around the standing distribution (:class:`solvers.costs.ContactForceCost`) and inside the
contact wrench cone of a flat rectangular sole (:class:`solvers.costs.WrenchConeCost`: unilateral,
friction, centre of pressure inside the sole, yaw torque). The simulator is MuJoCo with its own
soft contacts on the robot's sole geoms, so the controller's rigid model is an approximation the
closed loop has to survive; :meth:`HumanoidBalance.evaluate` judges what MuJoCo measured.

The standing posture is the model's keyframe named ``standing`` when it has one; otherwise the
task computes one and says so in :attr:`HumanoidBalance.posture_source`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from dynamics import ContactSet, RobotModel, get_backend
from dynamics.joints import JointType
from dynamics.lie import so3_log
from dynamics.mujoco_state import ActuatorMap, read_state, write_state
from solvers import ComPositionCost, ContactDynamics, ControlCost, CostSum, ShootingProblem, StateCost
from solvers.constraints import WrenchCone
from solvers.costs import ContactForceCost, WrenchConeCost

from .base import Criterion, Disturbance, Evaluation, Event, MetricInfo, RunDefaults
from .legged import StandingTask, floating_robot_and_frames, frame_bodies
from .legged_scene import check_feet_lowest, check_torques
from .registry import register_task

BUNDLED_FEET = {"atlas": ("l_foot_site", "r_foot_site")}
# (t [s], CoM height offset dz [m], lean): the CoM target at time t relative to the standing CoM;
# lean is the fraction of the way from the standing CoM's lateral position to the first (left)
# sole centre (negative: towards the second sole). Between waypoints the target moves smoothly
# (a cubic smoothstep, zero velocity at both ends).
DEFAULT_WAYPOINTS = ((0.0, 0.0, 0.0), (0.3, 0.0, 0.0), (1.3, -0.10, 0.0), (1.8, -0.10, 0.0), (2.8, 0.0, 0.0),
                     (3.2, 0.0, 0.0), (4.2, 0.0, 0.5), (4.8, 0.0, 0.5), (5.8, 0.0, 0.0))


def _smoothstep(s: np.ndarray) -> np.ndarray:
    s = np.clip(s, 0.0, 1.0)
    return s * s * (3.0 - 2.0 * s)


@register_task("humanoid-balance", "any humanoid (default Atlas): both soles flat, CoM squat and lateral lean, "
                                   "pushes")
@dataclass
class HumanoidBalance(StandingTask):
    """Humanoid standing on two flat soles. robot: a bundled name or an MJCF path with actuators on
    every joint and a free-floating pelvis; feet: the two sole frames (sites at the sole centres,
    +z the sole normal; defaults for the bundled robots); sole_size: the sole rectangle's
    half-extents (X along the frame's x, Y along y) [m], None to read them from a box geom whose
    bottom face holds the frame; waypoints: ``(t, dz, lean)`` rows (see ``DEFAULT_WAYPOINTS``);
    pushes: ``(t [s], body, (fx, fy, fz) [N], duration [s])`` applied in the simulator; cones: the
    soles' wrench cone as constraints of every running knot (``"hard"``, the default, solved by
    csqp) or as a cost (``"penalty"``, ``w_cone``, fddp)."""

    robot: str = "atlas"
    feet: tuple | str | None = None
    sole_size: tuple | None = None
    waypoints: tuple = DEFAULT_WAYPOINTS
    pushes: tuple = ()
    computed_posture = ("computed (no keyframe 'standing' or 'home'): soles raised 5 % of the leg length "
                        "towards the pelvis and levelled by inverse kinematics, pelvis lowered onto the floor and "
                        "settled in MuJoCo with the joints held")
    duration_s: float = 7.0
    w_com: float = 2000.0               # CoM position [1/(m² s)]
    w_base_pos: float = 20.0            # pelvis position, following the CoM offset (a squat bends the knees)
    w_base_rot: float = 500.0           # pelvis orientation (upright)
    w_joint: float = 20.0               # posture of the joints off the legs (back, arms, neck): kept standing
    w_leg: float = 0.1                  # posture of the leg joints (set by the pelvis and the fixed soles)
    w_base_vel: float = 10.0            # pelvis velocity
    w_joint_vel: float = 0.5            # joint velocity
    w_u: float = 1e-5                   # control around the standing torques
    w_force: float = 1e-4               # sole wrenches around the standing distribution
    w_cone: float = 10.0                # wrench-cone penalty
    mu: float = 0.7                     # friction coefficient of the cone (inscribed pyramid)
    cones: str = "hard"                 # "hard" (constraints, csqp) or "penalty" (w_cone, fddp): tasks.legged.CONE_MODES
    cop_margin: float = 0.8             # the cost's sole rectangle: this fraction of the real one
    terminal_factor: float = 10.0       # terminal weights = running weights × this
    fall_height: float = 0.6            # a fall: the pelvis below this fraction of its standing height
    com_tolerance: float = 0.02         # m, median CoM error while a target is held
    settle_time: float = 0.4            # s after a target stops moving before tracking is judged
    tilt_tolerance: float = 3.0         # deg, largest sole tilt
    lift_tolerance: float = 0.01        # m, largest rise of a sole corner
    slip_tolerance: float = 0.02        # m, largest horizontal sole displacement
    name: str = "humanoid-balance"
    description: str = "humanoid: both soles flat, CoM squat and lateral lean, pushes"
    model: RobotModel = field(init=False, repr=False)
    defaults = RunDefaults(solver="csqp", horizon=16, dt=0.025)  # cones=hard; docs/tasks.md: rates measured

    def __post_init__(self):
        self.model, self.feet, self.floor_note = floating_robot_and_frames(
            self.name, self.robot, self.feet, BUNDLED_FEET, 2, base="pelvis", joints="joint", noun="sole frames",
            frames="sole frames",
            example="feet=('l_sole', 'r_sole') (sites at the sole centres, +z the sole normal)")
        m = self.model
        tag = self.name
        wp = np.array(self.waypoints, dtype=float)
        if wp.ndim != 2 or wp.shape[1] != 3 or wp.shape[0] < 1 or wp[0, 0] != 0.0 or np.any(np.diff(wp[:, 0]) <= 0):
            raise ValueError(f"{tag}: waypoints are rows (t [s], dz [m], lean) with increasing times, the first at 0")
        if not np.all(np.isfinite(wp)) or np.any(np.abs(wp[:, 2]) > 1.0):
            raise ValueError(f"{tag}: waypoint lean must be in [-1, 1] (fraction of the way to a sole centre)")
        self._wp = wp
        if not 0.0 < self.cop_margin <= 1.0:
            raise ValueError(f"{tag}: cop_margin must be in (0, 1], got {self.cop_margin}")
        self.sole_half_extents = self._sole_half_extents()
        self.contacts = ContactSet(m, frames=self.feet, kind="6d")
        self.x_stand, self.posture_source = self._standing_state()
        self.lam_stand, self.u_stand = self._standing_wrenches_and_torques(self.x_stand)
        check_feet_lowest(m, self.name, self.robot, self.x_stand[:m.nq], self.feet, self.posture_source)
        check_torques(m, self.name, self.robot, self.u_stand, self.posture_source)
        be = get_backend("numpy")
        q0 = self.x_stand[:m.nq]
        self.standing_height = float(q0[2])
        self.com_stand = np.asarray(be.center_of_mass(m, q0), float)
        self._soles0 = [be.frame_placement(m, q0, f) for f in self.feet]
        self._corners0 = self._sole_corners(self.x_stand[None])[0]                  # (2, 4, 3)
        self.weight = -float(m.total_mass * m.gravity[2])
        self._pushes = [Disturbance(float(t), str(body), np.asarray(f, float), float(d))
                        for t, body, f, d in self.pushes]
        for p in self._pushes:
            m.body_id(p.body)
        self._setup_cones()

    # ------------------------------------------------------------ geometry and posture
    def _sole_half_extents(self) -> np.ndarray:
        """(2, 2) half-extents (X, Y) [m] of each sole rectangle in its frame."""
        if self.sole_size is not None:
            s = np.asarray(self.sole_size, float)
            if s.shape == (2,):
                s = np.stack([s, s])
            if s.shape != (2, 2) or not np.all(s > 0):
                raise ValueError(f"{self.name}: sole_size is (X, Y) half-extents [m] (or one pair per sole), "
                                 f"positive, got {self.sole_size!r}")
            return s
        mj = self.model.mj_model
        out = []
        for f in self.feet:
            sid = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_SITE, f)
            found = None
            if sid >= 0:
                body = mj.site_bodyid[sid]
                Rs = np.empty(9)
                mujoco.mju_quat2Mat(Rs, mj.site_quat[sid])
                Rs = Rs.reshape(3, 3)
                for g in range(mj.ngeom):
                    if mj.geom_bodyid[g] != body or mj.geom_type[g] != mujoco.mjtGeom.mjGEOM_BOX:
                        continue
                    Rg = np.empty(9)
                    mujoco.mju_quat2Mat(Rg, mj.geom_quat[g])
                    Rg = Rg.reshape(3, 3)
                    size = mj.geom_size[g]
                    # the box's bottom face centre, in the site frame, must be the site
                    c = Rs.T @ (mj.geom_pos[g] - mj.site_pos[sid])
                    if np.allclose(Rs.T @ Rg, np.eye(3), atol=1e-6) and np.allclose(c, [0, 0, size[2]], atol=1e-4):
                        found = size[:2].copy()
                        break
            if found is None:
                raise ValueError(f"{self.name}: cannot read the sole rectangle of '{f}' (expected a site at the "
                                 f"centre of the bottom face of a box geom, axes aligned); give "
                                 f"sole_size=(half_length, half_width) [m]")
            out.append(found)
        return np.array(out)

    def _computed_standing_configuration(self) -> np.ndarray:
        """A standing configuration for a model without a 'standing' keyframe: from the reference
        configuration with the joints moved slightly towards the middle of their ranges, damped
        least-squares inverse kinematics (pelvis fixed) puts each sole 5 % of the leg length above
        its reference position, level (sole normal = world z, heading kept); then the pelvis is
        lowered until the soles touch the floor and the robot settles in MuJoCo with its joints
        held. (For Atlas with its keyframe removed the settling does not come to rest: the task
        then asks for a keyframe.)"""
        m = self.model
        be = get_backend("numpy")
        q = np.array(m.neutral(), float)
        soles0 = [be.frame_placement(m, q, f) for f in self.feet]
        leg_length = float(q[2] - min(p[2] for _, p in soles0))
        if not leg_length > 0:
            raise ValueError(f"{self.name}: cannot compute a standing posture for '{self.robot}': its soles are not "
                             f"below the pelvis in the reference configuration; add a keyframe named 'standing'")
        targets = []
        for R, p in soles0:
            yaw = np.arctan2(R[1, 0], R[0, 0])
            c, s = np.cos(yaw), np.sin(yaw)
            targets.append((np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]]), p + [0.0, 0.0, 0.05 * leg_length]))
        # off the straight-leg singularity: every limited joint 15 % of the way to the middle of its range
        lo, hi = m.q_lower[7:], m.q_upper[7:]
        limited = np.isfinite(lo) & np.isfinite(hi)
        q[7:] += np.where(limited, 0.15 * (0.5 * (lo + hi) - q[7:]), 0.0)
        for _ in range(300):
            errs, Js = [], []
            for f, (Rt, pt) in zip(self.feet, targets):
                R, p = be.frame_placement(m, q, f)
                errs.append(np.r_[pt - p, so3_log(Rt @ R.T)])
                Js.append(be.frame_jacobian(m, q, f, "local_world_aligned")[:, 6:])
            e, J = np.concatenate(errs), np.concatenate(Js)
            if np.abs(e).max() < 1e-9:
                break
            dq = J.T @ np.linalg.solve(J @ J.T + 1e-6 * np.eye(J.shape[0]), e)
            q[7:] = np.clip(q[7:] + dq, m.q_lower[7:], m.q_upper[7:])
        else:
            raise ValueError(f"{self.name}: inverse kinematics for a standing posture of '{self.robot}' did not "
                             f"converge; add a keyframe named 'standing'")
        lowest = min(be.frame_placement(m, q, f)[1][2] for f in self.feet)
        q[2] -= lowest - 1e-3                                   # 1 mm above the floor, then let it settle
        return self._settle(q)

    def _settle(self, q: np.ndarray, seconds: float = 2.0) -> np.ndarray:
        """The configuration a robot placed at q comes to rest in on MuJoCo's floor with its joints
        held by a PD whose gains scale with each joint's apparent inertia (``1 / (M⁻¹)_jj``: a
        10 Hz, critically damped hold), so light wrist joints and heavy hips are both stable at the
        model's time step (uniform gains, as for a quadruped's similar leg joints, make the light
        joints of a humanoid oscillate), on top of the torques that hold q with the weight on both
        soles."""
        m = self.model
        mj = m.mj_model
        d = mujoco.MjData(mj)
        write_state(m, d, np.concatenate([q, np.zeros(m.nv)]))
        mujoco.mj_forward(mj, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(mj, d, M)
        inertia = 1.0 / np.diag(np.linalg.inv(M))[6:]        # each joint's apparent inertia, the rest free
        h = float(mj.opt.timestep)
        w = min(2 * np.pi * 10.0, 0.2 / h)
        kp, kd = w * w * inertia, 2.0 * w * inertia
        act = ActuatorMap.for_model(m, mj)
        Bp = np.linalg.pinv(np.asarray(m.actuation_matrix, float)[6:])
        u_hold = self._standing_wrenches_and_torques(np.concatenate([q, np.zeros(m.nv)]))[1]   # weight on the soles
        for _ in range(int(seconds / h)):
            x = read_state(m, d)
            tau = kp * (q[7:] - x[7:m.nq]) - kd * x[m.nq + 6:]
            act.apply(d, np.clip(u_hold + Bp @ tau, m.u_lower, m.u_upper))
            mujoco.mj_step(mj, d)
        return self._at_rest(d)

    def _standing_wrenches_and_torques(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sole wrenches λ (12,) (local frames) closest to the weight shared evenly by the two soles
        with no torque that hold the pelvis still (the 6 unactuated rows of ``g(q) = B u + Jᵀ λ``),
        and the torques u that then hold the joints: the standing equilibrium the costs regularise
        towards."""
        m = self.model
        be = get_backend("numpy")
        q = x[:m.nq]
        J = np.concatenate([be.frame_jacobian(m, q, f, "local") for f in self.feet])          # (12, nv)
        weight = -float(m.total_mass * m.gravity[2])
        lam_even = np.concatenate([np.r_[be.frame_placement(m, q, f)[0].T @ [0.0, 0.0, weight / 2], np.zeros(3)]
                                   for f in self.feet])
        return self._holding(q, J, lam_even)

    def _sole_corners(self, x) -> np.ndarray:
        """World positions (T, 2, 4, 3) of the sole rectangles' corners at states x (T, nx)."""
        m = self.model
        be = get_backend("numpy")
        q = np.ascontiguousarray(np.atleast_2d(x)[:, :m.nq])
        out = []
        for f, (X, Y) in zip(self.feet, self.sole_half_extents):
            R, p = be.frame_placement(m, q, f)
            local = np.array([[X, Y, 0], [X, -Y, 0], [-X, Y, 0], [-X, -Y, 0]])
            out.append(p[:, None, :] + np.einsum("tij,cj->tci", R, local))
        return np.stack(out, axis=1)

    # ------------------------------------------------------------ references
    def offsets_at(self, t) -> np.ndarray:
        """CoM target offsets (..., 2) = (dy, dz) [m] from the standing CoM at times t [s]."""
        t = np.asarray(t, float)
        wp = self._wp
        # lean > 0 towards the first sole, < 0 towards the second
        lat = np.where(wp[:, 2] >= 0, wp[:, 2] * (self._soles0[0][1][1] - self.com_stand[1]),
                       -wp[:, 2] * (self._soles0[1][1][1] - self.com_stand[1]))
        i = np.clip(np.searchsorted(wp[:, 0], t, side="right") - 1, 0, len(wp) - 1)
        j = np.minimum(i + 1, len(wp) - 1)
        span = np.where(j > i, wp[j, 0] - wp[i, 0], 1.0)
        s = _smoothstep(np.where(j > i, (t - wp[i, 0]) / span, 0.0))
        dy = lat[i] + s * (lat[j] - lat[i])
        dz = wp[i, 1] + s * (wp[j, 1] - wp[i, 1])
        return np.stack([dy, dz], axis=-1)

    def com_target(self, t) -> np.ndarray:
        """CoM targets (..., 3) [m] at times t [s]."""
        off = self.offsets_at(t)
        c = np.broadcast_to(self.com_stand, off.shape[:-1] + (3,)).copy()
        c[..., 1] += off[..., 0]
        c[..., 2] += off[..., 1]
        return c

    def reference_state(self, t) -> np.ndarray:
        """Target states (..., nx): the standing posture at rest with the pelvis moved by the CoM offset."""
        off = self.offsets_at(t)
        x = np.broadcast_to(self.x_stand, off.shape[:-1] + self.x_stand.shape).copy()
        x[..., 1] += off[..., 0]
        x[..., 2] += off[..., 1]
        return x

    def leg_dofs(self) -> np.ndarray:
        """Velocity indices of the joints between the pelvis and the soles (the legs)."""
        m = self.model
        dofs = []
        for link in self.contacts.links:
            li = int(link)
            while li >= 0 and m.link_type[li] != JointType.FREE:
                dofs.append(int(m.link_dofadr[li]))
                li = int(m.link_parent[li])
        return np.unique(dofs)

    def _weights(self) -> np.ndarray:
        nv = self.model.nv
        wq = np.full(nv - 6, self.w_joint)
        wq[self.leg_dofs() - 6] = self.w_leg
        # pelvis x free-ish: in a squat the pelvis moves back while the CoM stays over the soles
        return np.r_[0.05 * self.w_base_pos, self.w_base_pos, self.w_base_pos, np.full(3, self.w_base_rot), wq,
                     np.full(6, self.w_base_vel), np.full(nv - 6, self.w_joint_vel)]

    def build_problem(self, x0, horizon: int, dt: float, backend: str | None = None, **solver_opts) -> ShootingProblem:
        m = self.model
        x0 = self.check_state(x0, "x0")
        integrator = solver_opts.pop("integrator", "euler")
        # joint damping left out of the model by default: explicit integration of a damper b on a
        # joint of apparent inertia I is unstable for dt > 2 I / b (Atlas' wrist yaw: 4.2e-4 kg m²,
        # b = 0.1 N m s: dt > 8.5 ms), and the damping is negligible for balance (MuJoCo keeps it)
        passive = solver_opts.pop("passive_forces", False)
        w = self._weights()
        refs = np.repeat(self.x_stand[None], horizon + 1, axis=0)
        coms = np.repeat(self.com_stand[None], horizon + 1, axis=0)
        X, Y = (self.cop_margin * self.sole_half_extents).T
        running = CostSum({
            "com": (ComPositionCost(m, coms), self.w_com),
            "state": (StateCost(m, refs, w), 1.0),
            "control": (ControlCost(m, self.u_stand), self.w_u),
            "force": (ContactForceCost(m, self.contacts, self.lam_stand, passive_forces=passive), self.w_force)})
        f_min = 0.05 * self.weight / 2
        hard = []
        if self.cones == "hard":
            hard = [WrenchCone(m, self.contacts, X, Y, self.mu, f_min=f_min, passive_forces=passive)]
        else:
            running.add("wrench_cone", WrenchConeCost(m, self.contacts, X, Y, self.mu, f_min=f_min,
                                                      passive_forces=passive), self.w_cone)
        terminal = CostSum({"com": (ComPositionCost(m, coms), self.terminal_factor * self.w_com),
                            "state": (StateCost(m, refs, self.terminal_factor * w), 1.0)})
        dyn = ContactDynamics(self.contacts, integrator=integrator, passive_forces=passive)
        return self._standing_problem(x0, horizon, dt, running, terminal, dyn, backend, solver_opts, hard)

    _cones_problem = build_problem

    def reference_wrenches(self, t) -> np.ndarray:
        """Sole wrench references (..., 12) at times t [s]: the standing wrenches with the weight
        shared by the lever rule for the lateral CoM target (a lean loads the sole it leans over)."""
        y_target = self.com_target(t)[..., 1]
        y1, y2 = self._soles0[0][1][1], self._soles0[1][1][1]
        share = np.clip((y_target - y2) / (y1 - y2), 0.0, 1.0)
        share0 = np.clip((self.com_stand[1] - y2) / (y1 - y2), 0.0, 1.0)
        lam = np.broadcast_to(self.lam_stand, share.shape + (12,)).copy()
        lam[..., 0:6] *= (share / share0)[..., None]
        lam[..., 6:12] *= ((1.0 - share) / (1.0 - share0))[..., None]
        return lam

    def update_problem(self, problem: ShootingProblem, t: float) -> None:
        times = float(t) + np.concatenate([[0.0], np.cumsum(problem.dts)])
        refs, coms = self.reference_state(times), self.com_target(times)
        for cost in (problem.running_cost, problem.terminal_cost):
            cost["state"].reference = refs
            cost["com"].target = coms
        problem.running_cost["force"].reference = self.reference_wrenches(times[:-1])

    # ------------------------------------------------------------ measurements
    def _com(self, x) -> np.ndarray:
        m = self.model
        q = np.ascontiguousarray(np.atleast_2d(x)[:, :m.nq])
        return np.asarray(get_backend("numpy").center_of_mass(m, q), float)

    def sole_tilt_and_lift(self, x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per state (T,): the largest sole tilt [deg] (angle of a sole normal from its standing
        direction), the largest rise of a sole corner above its standing height [m], and the
        largest horizontal displacement of a sole centre [m], over both soles."""
        m = self.model
        be = get_backend("numpy")
        q = np.ascontiguousarray(np.atleast_2d(x)[:, :m.nq])
        tilt = []
        for f, (R0, _) in zip(self.feet, self._soles0):
            R = be.frame_placement(m, q, f)[0]
            c = np.clip(np.einsum("ti,i->t", R[:, :, 2], R0[:, 2]), -1.0, 1.0)
            tilt.append(np.degrees(np.arccos(c)))
        corners = self._sole_corners(x)
        lift = (corners[..., 2] - self._corners0[None, ..., 2]).reshape(len(q), -1).max(axis=1)
        centre = corners.mean(axis=2)
        slip = np.linalg.norm((centre - self._corners0.mean(axis=1)[None])[..., :2], axis=-1).max(axis=1)
        return np.max(tilt, axis=0), lift, slip

    def metrics(self, t: float, x) -> dict[str, float]:
        c = self._com(x)[0]
        err = c - self.com_target(t)
        tilt, lift, slip = self.sole_tilt_and_lift(x)
        return {"com_height": float(c[2]), "com_lateral": float(c[1] - self.com_stand[1]),
                "com_error": float(np.linalg.norm(err)), "pelvis_height": float(np.atleast_2d(x)[0, 2]),
                "sole_tilt": float(tilt[0]), "sole_lift": float(lift[0]), "sole_slip": float(slip[0])}

    def metric_info(self) -> dict[str, MetricInfo]:
        return {"com_height": MetricInfo("m", label="CoM height"),
                "com_lateral": MetricInfo("m", label="CoM lateral offset"),
                "com_error": MetricInfo("m", self.com_tolerance, label="|CoM error|"),
                "pelvis_height": MetricInfo("m", self.fall_height * self.standing_height, label="pelvis height"),
                "sole_tilt": MetricInfo("deg", self.tilt_tolerance, label="sole tilt"),
                "sole_lift": MetricInfo("m", self.lift_tolerance, label="sole corner lift"),
                "sole_slip": MetricInfo("m", self.slip_tolerance, label="sole slip")}

    def events(self, t_end: float) -> list[Event]:
        ev = [Event(float(t), f"waypoint {i}") for i, t in enumerate(self._wp[1:, 0], 1) if t <= t_end]
        ev += [Event(p.t, f"push {p.body}") for p in self._pushes if p.t <= t_end]
        return ev

    def disturbances(self) -> list[Disturbance]:
        return list(self._pushes)

    def markers(self, times) -> np.ndarray:
        return self.com_target(np.asarray(times, float))

    def sole_forces(self, times, states, controls, every: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Normal force [N] and centre of pressure (in the sole frame) [m] of each sole as MuJoCo
        computes them, re-evaluating every ``every``-th recorded step (state, applied controls and
        the active pushes) with ``mj_forward``: ``(t (S,), normal (S, 2), cop (S, 2, 2))``; a sole
        without contact has force 0 and CoP NaN."""
        m = self.model
        mj = m.mj_model
        d = mujoco.MjData(mj)
        act = ActuatorMap.for_model(m, mj)
        sole_bodies = [int(b) for b in frame_bodies(mj, self.feet)]
        be = get_backend("numpy")
        push_ids = [mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, p.body) for p in self._pushes]
        idx = np.arange(0, len(times), max(1, int(every)))
        normal = np.zeros((len(idx), 2))
        cop = np.full((len(idx), 2, 2), np.nan)
        f6 = np.zeros(6)
        for n, k in enumerate(idx):
            write_state(m, d, states[k])
            act.apply(d, np.clip(controls[k], m.u_lower, m.u_upper))
            d.xfrc_applied[:] = 0.0
            for p, bid in zip(self._pushes, push_ids):
                if p.t <= times[k] < p.t + p.duration:
                    d.xfrc_applied[bid, :3] += p.force
            mujoco.mj_forward(mj, d)
            moments = np.zeros((2, 2))
            for c_i in range(d.ncon):
                con = d.contact[c_i]
                b1, b2 = mj.geom_bodyid[con.geom1], mj.geom_bodyid[con.geom2]
                for s, body in enumerate(sole_bodies):
                    if body not in (b1, b2) or 0 not in (b1, b2):
                        continue
                    mujoco.mj_contactForce(mj, d, c_i, f6)
                    fw = con.frame.reshape(3, 3).T @ f6[:3]       # contact frame -> world (on geom2's body)
                    fz = abs(fw[2])
                    R, p = be.frame_placement(m, states[k, :m.nq], self.feet[s])
                    local = R.T @ (con.pos - p)
                    normal[n, s] += fz
                    moments[s] += fz * local[:2]
            for s in range(2):
                if normal[n, s] > 1e-6:
                    cop[n, s] = moments[s] / normal[n, s]
        return np.asarray(times, float)[idx], normal, cop

    def fallen(self, states, com=None, lift=None) -> np.ndarray:
        """Per state (T,): the robot is down: the pelvis below ``fall_height`` × its standing
        height, the CoM below ``fall_height`` × its standing height, or a sole corner more than
        10 cm above its standing height (no longer standing on both soles)."""
        states = np.atleast_2d(states)
        com = self._com(states) if com is None else com
        lift = self.sole_tilt_and_lift(states)[1] if lift is None else lift
        return ((states[:, 2] < self.fall_height * self.standing_height)
                | (com[:, 2] < self.fall_height * self.com_stand[2]) | (lift > 0.1))

    def evaluate(self, times, states, controls) -> Evaluation:
        times, states = np.asarray(times, float), np.asarray(states, float)
        com = self._com(states)
        target = self.com_target(times)
        err = np.linalg.norm(com - target, axis=-1)
        tilt, lift, slip = self.sole_tilt_and_lift(states)
        fallen = self.fallen(states, com, lift)
        pelvis_min = float(states[:, 2].min())
        fall = self.fall_height * self.standing_height
        crit = [Criterion("no fall", pelvis_min, "m", not fallen.any(),
                          f"lowest pelvis height; fallen: pelvis below {fall:.3f} m, CoM below "
                          f"{self.fall_height * self.com_stand[2]:.3f} m or a sole corner 10 cm off the floor")]
        quiet = np.ones_like(times, dtype=bool)
        for p in self._pushes:
            quiet &= ~((times >= p.t) & (times < p.t + p.duration + 1.0))
        # holds: intervals where the target stays put (consecutive equal waypoints, and after the last)
        wp = self._wp
        holds = [(wp[i, 0], wp[i + 1, 0]) for i in range(len(wp) - 1) if np.allclose(wp[i, 1:], wp[i + 1, 1:])]
        holds.append((wp[-1, 0], np.inf))
        worst = None
        for t0, t1 in holds:
            sel = quiet & (times >= t0 + (self.settle_time if t0 > 0 else 0.0)) & (times < t1)
            if sel.any():
                med = float(np.median(err[sel]))
                worst = med if worst is None else max(worst, med)
        crit.append(Criterion("CoM tracking", worst, "m", None if worst is None else worst <= self.com_tolerance,
                              f"worst hold's median |CoM error| from {self.settle_time} s after the target stops, "
                              f"<= {self.com_tolerance} m"))
        depth = -float(wp[:, 1].min())
        if depth > 0:
            t_reach = float(wp[np.argmin(wp[:, 1]), 0])
            drop = float(self.com_stand[2] - com[:, 2].min())
            crit.append(Criterion("squat depth reached", drop, "m",
                                  drop >= depth - self.com_tolerance if times[-1] >= t_reach else None,
                                  f"largest CoM drop below standing, >= {depth:.3f} - {self.com_tolerance} m"))
            after = np.flatnonzero(wp[:, 0] > t_reach)
            back = [i for i in after if abs(wp[i, 1]) < 1e-12]
            if back:
                t_back = float(wp[back[0], 0])
                sel = quiet & (times >= t_back + self.settle_time)
                h_err = float(np.median(np.abs(com[sel, 2] - self.com_stand[2]))) if sel.any() else None
                crit.append(Criterion("squat returned", h_err, "m",
                                      None if h_err is None else h_err <= self.com_tolerance,
                                      f"median |CoM height - standing| from {self.settle_time} s after the target "
                                      f"returns ({t_back} s), <= {self.com_tolerance} m"))
        lean = self.offsets_at(wp[:, 0])[:, 0]
        k_lean = int(np.argmax(np.abs(lean)))
        if abs(lean[k_lean]) > 1e-9:
            want = float(lean[k_lean])
            reached = float(np.max(np.sign(want) * (com[:, 1] - self.com_stand[1])))
            crit.append(Criterion("lean reached", reached, "m",
                                  reached >= abs(want) - self.com_tolerance if times[-1] >= wp[k_lean, 0] else None,
                                  f"largest lateral CoM shift towards the {'first' if want > 0 else 'second'} sole, "
                                  f">= {abs(want):.3f} - {self.com_tolerance} m"))
        crit.append(Criterion("soles flat", float(tilt.max()), "deg", float(tilt.max()) <= self.tilt_tolerance,
                              f"largest sole tilt from standing, <= {self.tilt_tolerance} deg"))
        crit.append(Criterion("soles on the floor", float(lift.max()), "m", float(lift.max()) <= self.lift_tolerance,
                              f"largest rise of a sole corner, <= {self.lift_tolerance} m"))
        crit.append(Criterion("sole slip", float(slip.max()), "m", float(slip.max()) <= self.slip_tolerance,
                              f"largest horizontal sole displacement, <= {self.slip_tolerance} m"))
        for i, p in enumerate(self._pushes):
            after = times >= p.t
            ok = bool(after.any()) and not np.any(fallen[after])
            crit.append(Criterion(f"push {i} survived", float(np.linalg.norm(p.force)), "N",
                                  ok if after.any() else None, f"{p.body} pushed at t = {p.t} s for {p.duration} s"))
        details = {"posture": self.posture_source, "feet": list(self.feet),
                   "sole_half_extents_m": self.sole_half_extents.tolist(),
                   "com_standing_m": self.com_stand.tolist()}
        if controls is not None and len(controls) == len(times):
            _, fn, cop = self.sole_forces(times, states, np.asarray(controls, float))
            crit.append(Criterion("least sole normal force", float(fn.min()), "N", None,
                                  "smallest MuJoCo normal force on a sole (every 10th step)"))
            with np.errstate(invalid="ignore"):
                margin = np.nanmin(self.sole_half_extents[None] - np.abs(cop)) if np.isfinite(cop).any() else None
            crit.append(Criterion("least CoP margin", margin, "m", None,
                                  "smallest distance of a sole's MuJoCo centre of pressure inside its rectangle"))
            details["sole_normal_force_N"] = {"min": fn.min(axis=0).tolist(), "mean": fn.mean(axis=0).tolist(),
                                              "max": fn.max(axis=0).tolist()}
            cone_crit, details["cones"] = self._cone_criteria(times, states, controls)
            crit += cone_crit
        return Evaluation(crit, details)


@register_task("atlas-balance", "Atlas: both soles flat, CoM squat 10 cm and back, lateral lean, pushes "
                                "(humanoid-balance preset)")
@dataclass
class AtlasBalance(HumanoidBalance):
    robot: str = "atlas"
    name: str = "atlas-balance"
    description: str = "Atlas: both soles flat, CoM squat 10 cm and back, lateral lean, pushes"
