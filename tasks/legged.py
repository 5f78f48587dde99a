"""Shared pieces of the legged tasks (any MJCF with a free-floating trunk and actuated legs): robot
checks, contact frames, the standing posture (the model's keyframe ``standing``, else ``home``, else
one computed as a small static problem and settled in MuJoCo), the standing contact forces and
torques, pushes, the ``cones`` option (contact-force cones as penalty costs or hard constraints), and
what MuJoCo measures about the feet (contact states, horizontal slip while in contact, trunk height,
contact forces against the friction cone: :func:`mujoco_cone_ratios`).

Used by :mod:`tasks.quadruped` (stand) and :mod:`tasks.quadruped_trot`; a task class mixes in
:class:`LeggedTask` and calls :meth:`LeggedTask._setup_legged` from its ``__post_init__``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mujoco
import numpy as np

from dynamics import ContactSet, RobotModel, get_backend
from dynamics.mujoco_frames import mujoco_frame
from dynamics.mujoco_state import ActuatorMap, read_state, write_state
from solvers import ActionModel, ShootingProblem

from .base import Criterion, Disturbance, Task
from .legged_scene import (check_feet_collide, check_feet_exist, check_feet_lowest, check_ground, check_torques,
                           load_legged_scene)

BUNDLED_FEET = {"hyq": ("lf_foot", "rf_foot", "lh_foot", "rh_foot")}
#: values of the legged tasks' ``cones`` option: the contact-force cones (friction cone and unilateral
#: normal force of point feet, wrench cone of 6-D soles) as hard constraints of the contact knots
#: (the default of the tasks whose problem supports them) or as penalty costs
CONE_MODES = ("penalty", "hard")
#: the default solver that goes with each ``cones`` mode: hard constraints need csqp (the other
#: solvers refuse constraints); the penalty problem is unconstrained (FDDP: the contact gaps)
CONE_SOLVERS = {"hard": "csqp", "penalty": "fddp"}


def with_penalty_cones(task_class: type, task_args: dict) -> dict:
    """``task_args`` with ``cones="penalty"`` added when ``task_class`` has the ``cones`` option
    and it is not given: the task's problem without hard constraints, which the unconstrained
    solvers (fddp, ilqr, ddp) and Crocoddyl's FDDP anchor take."""
    if hasattr(task_class, "cones") and "cones" not in task_args:
        return {**task_args, "cones": "penalty"}
    return dict(task_args)


#: the closed-loop criterion: share of simulated steps with every foot-ground contact force of MuJoCo
#: inside the task's friction cone
CONE_SHARE_TARGET = 0.99


@dataclass
class ContactCones:
    """Foot-ground contact forces of a run as MuJoCo computes them, against a friction cone of
    coefficient ``mu``, per simulated step (T,): ``ratio`` the largest ``|f_t| / (mu f_n)`` over the
    step's contacts (0 without contact; inf for a tangential force without normal force),
    ``contacts`` how many foot-ground contacts MuJoCo had. Forces in each contact's frame
    (``mj_contactForce``: normal, then the two tangential components)."""

    mu: float
    ratio: np.ndarray
    contacts: np.ndarray

    @property
    def inside(self) -> np.ndarray:
        """(T,) bool: every contact of the step inside the cone (ratio <= 1, to 1e-9)."""
        return self.ratio <= 1.0 + 1e-9

    def share_inside(self) -> float:
        """Share of steps with every contact inside the cone (1 for an empty run)."""
        return float(self.inside.mean()) if self.ratio.size else 1.0


def mujoco_cone_ratios(model: RobotModel, bodies, mu: float, states, controls, times=None, disturbances=(),
                       mj_model: mujoco.MjModel | None = None) -> ContactCones:
    """The contact forces MuJoCo applies between the bodies ``bodies`` (MuJoCo body ids) and the
    world body at each simulated step, against the friction cone of coefficient ``mu``.

    states (T, nq+nv) as measured at the start of each step, controls (T, nu) the commands (clipped
    to the actuator limits, as the simulator applies them), times (T,) [s] and disturbances
    (:class:`tasks.Disturbance`, applied through ``xfrc_applied`` while active, as
    :func:`sim.runner.simulate` does): each step's ``mj_forward`` is the contact solve of that
    physics step (``mj_step`` = ``mj_forward`` + integration), its forces read with
    ``mj_contactForce``. mj_model: the scene (default ``model.mj_model``)."""
    if not (np.isfinite(mu) and mu > 0):
        raise ValueError(f"mujoco_cone_ratios: mu must be a positive friction coefficient, got {mu}")
    mj = model.mj_model if mj_model is None else mj_model
    X = np.atleast_2d(np.asarray(states, float))
    U = np.atleast_2d(np.asarray(controls, float))
    if U.shape != (X.shape[0], model.nu):
        raise ValueError(f"mujoco_cone_ratios: controls must be (T, nu) = ({X.shape[0]}, {model.nu}), got {U.shape}")
    if disturbances and times is None:
        raise ValueError("mujoco_cone_ratios: give the step times to apply the disturbances")
    body_set = {int(b) for b in np.atleast_1d(bodies)}
    pushes = [(p.t, p.t + p.duration, mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, p.body), np.asarray(p.force))
              for p in disturbances]
    for p, (_, _, bid, _) in zip(disturbances, pushes):
        if bid < 0:
            raise ValueError(f"mujoco_cone_ratios: disturbance on unknown body '{p.body}' of the MuJoCo scene")
    act = ActuatorMap.for_model(model, mj)
    d = mujoco.MjData(mj)
    f6 = np.zeros(6)
    ratio = np.zeros(X.shape[0])
    count = np.zeros(X.shape[0], dtype=int)
    for k in range(X.shape[0]):
        write_state(model, d, X[k])
        act.apply(d, np.minimum(np.maximum(U[k], model.u_lower), model.u_upper))
        d.xfrc_applied[:] = 0.0
        for t0, t1, bid, f in pushes:
            if t0 <= times[k] < t1:
                d.xfrc_applied[bid, :3] += f
        mujoco.mj_forward(mj, d)
        for i in range(d.ncon):
            c = d.contact[i]
            b1, b2 = int(mj.geom_bodyid[c.geom1]), int(mj.geom_bodyid[c.geom2])
            if not ((b1 == 0 and b2 in body_set) or (b2 == 0 and b1 in body_set)):
                continue
            mujoco.mj_contactForce(mj, d, i, f6)
            count[k] += 1
            ft = float(np.hypot(f6[1], f6[2])) if c.dim >= 3 else 0.0
            r = ft / (mu * f6[0]) if f6[0] > 0 else (np.inf if ft > 0 else 0.0)
            ratio[k] = max(ratio[k], r)
    return ContactCones(float(mu), ratio, count)


def _quat_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of R = Rz(yaw) Ry(pitch) Rx(roll); angles [rad] as floats or
    arrays of one shape (...): the result is then (4, ...)."""
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.array([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy])


def frame_bodies(mj_model: mujoco.MjModel, frames) -> np.ndarray:
    """MuJoCo body ids (k,) carrying the frames (sites, bodies or geoms: :func:`mujoco_frame`)."""
    return np.array([mujoco_frame(mj_model, f).body for f in frames], dtype=int)


def floating_robot_and_frames(name: str, robot: str, feet, bundled: dict, n: int, base: str = "trunk",
                              joints: str = "leg joint", noun: str = "feet", frames: str = "foot frames",
                              example: str = "feet=('FL_foot', 'FR_foot', 'RL_foot', 'RR_foot') (sites or bodies)"):
    """``(model, frames, floor_note)`` of a legged task: the robot loaded (a scene file that includes
    it, or a bare robot file that gets a floor: ``floor_note`` says so, else None) and checked (a
    free-floating ``base`` as its first joint, every other joint actuated), the contact frames
    resolved (``feet`` as given, a comma-separated string, or ``bundled[robot]`` when None) and
    checked (``n`` of them, each a frame of the model with collision geometry, a ground they can
    touch). Errors name the task, the problem and the fix."""
    m, floor_note = load_legged_scene(robot)
    if not m.free_adr or m.free_adr[0] != (0, 0):
        raise ValueError(f"{name}: robot '{robot}' needs a free-floating {base} as its first joint")
    if m.nu != m.nv - 6:
        raise ValueError(f"{name}: robot '{robot}' must actuate every {joints} (nu = nv - 6 = {m.nv - 6}), "
                         f"has nu = {m.nu}")
    if feet is None:
        feet = bundled.get(robot)
        if feet is None:
            raise ValueError(f"{name}: give the {n} {frames} of '{robot}', e.g. {example}")
    if isinstance(feet, str):
        feet = tuple(f.strip() for f in feet.split(",") if f.strip())
    feet = tuple(feet)
    if len(feet) != n:
        raise ValueError(f"{name}: expected {n} {noun}, got {len(feet)}: {feet}")
    check_feet_exist(m, name, robot, feet)
    check_feet_collide(m, name, robot, feet)
    check_ground(m, name, robot, feet)
    return m, feet, floor_note


class StandingTask(Task):
    """Mix-in for tasks of a floating robot that start at rest in a standing posture (legged and
    humanoid). The subclass (a dataclass) has the fields ``robot`` and ``duration_s``, sets
    ``model`` and ``x_stand``, gives :meth:`_computed_standing_configuration` for a model without a
    ``standing`` keyframe and describes it in the class attribute ``computed_posture``."""

    computed_posture = "computed (the model has no keyframe 'standing' or 'home')"
    #: the keyframes tried for the standing posture, in order (Menagerie names it 'home')
    standing_keyframes = ("standing", "home")

    @property
    def duration(self) -> float:  # type: ignore[override]
        return float(self.duration_s)

    def initial_state(self) -> np.ndarray:
        return self.x_stand.copy()

    def _standing_state(self) -> tuple[np.ndarray, str]:
        """The standing state (q, 0) from the model's keyframe ``standing``, else ``home``, else
        computed, and where it came from."""
        m = self.model
        for key in self.standing_keyframes:
            if key in m.keyframes:
                return np.concatenate([np.array(m.keyframe(key), float), np.zeros(m.nv)]), \
                    f"keyframe '{key}' of the model"
        return np.concatenate([self._computed_standing_configuration(), np.zeros(m.nv)]), self.computed_posture

    def notes(self) -> list[str]:
        """Where the standing posture came from, and whether a floor was added."""
        return [f"standing posture: {self.posture_source}"] + ([self.floor_note] if self.floor_note else [])

    def _computed_standing_configuration(self) -> np.ndarray:
        raise NotImplementedError

    # ------------------------------------------------------------ contact-force cones
    #: the ``build_problem`` that honours the ``cones`` option, set in the body of the class that
    #: defines it: a subclass that builds its own problem does not inherit the option
    _cones_problem = None

    @classmethod
    def supports_hard_cones(cls) -> bool:
        """Whether this class's problem puts the cones as constraints when ``cones="hard"``."""
        return cls._cones_problem is not None and cls.build_problem is cls._cones_problem

    @classmethod
    def solver_switches(cls) -> tuple[tuple[str, str], ...]:
        """Task options that change the default solver, as ``(option, solver)`` rows (shown by
        ``mpc-accel tasks``): the ``cones`` mode other than the class's default."""
        if not cls.supports_hard_cones():
            return ()
        other = "penalty" if getattr(cls, "cones", "penalty") == "hard" else "hard"
        return ((f"cones={other}", CONE_SOLVERS[other]),)

    def _gait_problem_inputs(self, x0, dt: float, solver_opts: dict, passive_default: bool) -> tuple:
        """``(x0, integrator, passive_forces)`` for a gait's ``build_problem``: x0 checked, a swing
        (``self.swing_time``) at least two knots of dt long, the two model options taken out of
        ``solver_opts``."""
        x0 = self.check_state(x0, "x0")
        if self.swing_time < 2 * dt:
            raise ValueError(f"{self.name}: swing_time {self.swing_time} s is shorter than two knots of dt = {dt} s; "
                             f"use a smaller dt or a longer swing_time")
        return x0, solver_opts.pop("integrator", "euler"), solver_opts.pop("passive_forces", passive_default)

    def _setup_cones(self) -> None:
        """Checks the ``cones`` field (:data:`CONE_MODES`) and sets the instance's default solver to
        the mode's (:data:`CONE_SOLVERS`: csqp for ``hard``, whose constraints the other solvers
        refuse; fddp for ``penalty``), the class's other defaults kept."""
        if self.cones not in CONE_MODES:
            raise ValueError(f"{self.name}: cones must be one of {', '.join(CONE_MODES)}, got {self.cones!r}; "
                             f"give --task-arg cones=hard (constraints, solved by csqp) or cones=penalty (costs)")
        if self.cones == "hard" and not self.supports_hard_cones():
            raise ValueError(f"{self.name}: cones=hard is not available for this task (its problem has the cones as "
                             f"penalty costs only); use cones=penalty (a subclass with its own build_problem: "
                             f"declare the field as cones: str = \"penalty\")")
        solver = CONE_SOLVERS[self.cones]
        if self.defaults.solver != solver:
            self.defaults = replace(self.defaults, solver=solver)

    def _contact_bodies(self) -> np.ndarray:
        """MuJoCo ids of the bodies whose contacts with the ground the cone criterion judges: those
        carrying the contact frames ``feet``."""
        return frame_bodies(self.model.mj_model, self.feet)

    def contact_cones(self, times, states, controls) -> ContactCones:
        """The run's foot-ground contact forces as MuJoCo computes them against the task's cone
        (``mu``): :func:`mujoco_cone_ratios` with the task's pushes."""
        return mujoco_cone_ratios(self.model, self._contact_bodies(), self.mu, states, controls, times,
                                  self.disturbances())

    def _cone_criteria(self, times, states, controls) -> tuple[list[Criterion], dict]:
        """The criteria ``contact forces in cone`` (share of steps with every MuJoCo foot-ground
        contact inside the cone of ``mu``, passes at :data:`CONE_SHARE_TARGET`) and ``worst cone
        ratio`` (largest ``|f_t| / (mu f_n)``, reported), and the details' ``cones`` entry."""
        cc = self.contact_cones(times, states, controls)
        share, worst = cc.share_inside(), float(cc.ratio.max()) if cc.ratio.size else 0.0
        crit = [Criterion("contact forces in cone", 100 * share, "%", share >= CONE_SHARE_TARGET,
                          f"share of steps with every MuJoCo foot-ground contact force (mj_contactForce) inside the "
                          f"friction cone of mu = {self.mu:g}, >= {100 * CONE_SHARE_TARGET:g} %"),
                Criterion("worst cone ratio", worst, "", None,
                          "largest |f_t| / (mu f_n) of a MuJoCo foot-ground contact (inside the cone: <= 1)")]
        details = {"mode": self.cones, "mu": self.mu, "share_inside": share, "worst_ratio": worst,
                   "steps_outside": int((~cc.inside).sum()), "steps_without_contact": int((cc.contacts == 0).sum())}
        return crit, details

    def _standing_problem(self, x0, horizon: int, dt: float, running, terminal, dyn, backend,
                          solver_opts: dict, constraints=()) -> ShootingProblem:
        """The shooting problem of ``horizon`` knots of ``dt`` with the same running cost, dynamics
        ``dyn`` and hard ``constraints`` at every running knot, starting from the standing controls,
        references of time 0."""
        m = self.model
        am = ActionModel(m, running, dt, dyn, constraints=list(constraints))
        problem = ShootingProblem(x0, [am] * horizon, ActionModel(m, terminal, 0.0, dyn),
                                  backend=self.resolve_backend(backend), **solver_opts)
        problem.initial_controls = self.u_stand
        self.update_problem(problem, 0.0)
        return problem

    def _holding(self, q: np.ndarray, J: np.ndarray, lam_even: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The contact forces λ closest to ``lam_even`` (the weight shared evenly) that hold the base
        still at q (the 6 unactuated rows of ``g(q) = B u + Jᵀ λ``, J the contact rows (nc, nv)), and
        the torques u that then hold the joints."""
        m = self.model
        g = get_backend("numpy").gravity_torques(m, q)
        Jb = J[:, :6].T                                                  # (6, nc)
        lam = lam_even + np.linalg.pinv(Jb) @ (g[:6] - Jb @ lam_even)
        B = np.asarray(m.actuation_matrix, float)
        u = np.linalg.lstsq(B, g - J.T @ lam, rcond=None)[0]
        return lam, u

    def _at_rest(self, d) -> np.ndarray:
        """The configuration of MuJoCo data ``d`` at the end of settling a computed posture; an error
        if it did not come to rest."""
        m = self.model
        x = read_state(m, d)
        if not np.all(np.isfinite(x)) or np.abs(x[m.nq:]).max() > 2e-2:
            speed = float(np.abs(x[m.nq:]).max()) if np.all(np.isfinite(x)) else float("nan")
            raise ValueError(f"{self.name}: the computed standing posture of '{self.robot}' did not come to rest "
                             f"in MuJoCo after settling (trunk at z = {x[2]:.3f} m, largest speed {speed:.3g}); "
                             f"add a keyframe named 'standing'")
        return x[:m.nq]


class LeggedTask(StandingTask):
    """Mix-in for legged tasks. The subclass (a dataclass) has the fields ``robot`` (bundled name or
    MJCF path), ``feet`` (contact frames, a tuple or a comma-separated string; None for the bundled
    robots' defaults) and ``pushes`` (``(t, body, (fx, fy, fz), duration)`` rows), and the class
    attribute ``n_feet``. :meth:`_setup_legged` sets ``model``, ``feet``, ``contacts`` (point
    contacts on every foot), ``floor_note`` (None, or that a floor was added to a bare robot file),
    ``x_stand``, ``posture_source``, ``lam_stand``, ``u_stand``, ``standing_height`` and the pushes,
    after the checks of :mod:`tasks.legged_scene` (each failure its own message and fix)."""

    n_feet: int = 4
    computed_posture = ("computed (no keyframe 'standing' or 'home'): feet under the hips on the floor, joints "
                        "inside their ranges, contact forces in the friction cone and static torques within the "
                        "limits, settled in MuJoCo with the joints held")
    #: foot depth below the hips tried for a computed posture, as fractions of the shortest leg's
    #: length (hip to foot along the chain), first the usual stance, then straighter, then lower
    STANCE_DEPTHS = (0.85, 0.9, 0.95, 0.8, 0.75, 0.7, 0.65, 0.6)

    def _setup_legged(self) -> None:
        self.model, self.feet, self.floor_note = floating_robot_and_frames(self.name, self.robot, self.feet,
                                                                           BUNDLED_FEET, self.n_feet)
        m = self.model
        self.contacts = ContactSet(m, frames=self.feet, kind="point")
        self.x_stand, self.posture_source = self._standing_state()
        self.lam_stand, self.u_stand = self._standing_forces_and_torques(self.x_stand)
        check_feet_lowest(m, self.name, self.robot, self.x_stand[:m.nq], self.feet, self.posture_source)
        check_torques(m, self.name, self.robot, self.u_stand, self.posture_source)
        be = get_backend("numpy")
        self._feet0 = np.stack([be.frame_placement(m, self.x_stand[:m.nq], f)[1] for f in self.feet])
        self.standing_height = float(self.x_stand[2])
        self._pushes = [Disturbance(float(t), str(body), np.asarray(f, float), float(d)) for t, body, f, d in self.pushes]
        for p in self._pushes:
            m.body_id(p.body)

    # ------------------------------------------------------------ posture
    def _computed_standing_configuration(self) -> np.ndarray:
        """A standing configuration for a model without a keyframe: a small static problem. The trunk
        level at the origin; every foot under its hip (the trunk's child body on the way to the foot)
        at a common depth below the hips (:attr:`STANCE_DEPTHS` of the shortest leg, tried in turn),
        by damped least-squares inverse kinematics that starts inside the joint ranges (the reference
        configuration bent 0.3 rad and moved 10 % of each range inside it, so a one-sided knee range
        sets the knee direction) and clips every step to the ranges; then the forces that hold the
        trunk (closest to the weight shared evenly) must lie in the friction cone and the static
        torques within the actuator limits. The first depth that meets all of it is placed on the
        floor and settled in MuJoCo; errors say which condition no depth met."""
        m = self.model
        q0 = np.array(m.neutral(), float)
        q0[:3] = 0.0
        lo, hi = np.asarray(m.q_lower[7:], float), np.asarray(m.q_upper[7:], float)
        span = np.where(np.isfinite(hi - lo), hi - lo, 0.0)
        start = q0[7:] + 0.3                               # off the straight-leg singularity
        start = np.where(np.isfinite(lo), np.maximum(start, lo + 0.1 * span), start)
        start = np.where(np.isfinite(hi), np.minimum(start, hi - 0.1 * span), start)
        q0[7:] = start
        hips, lengths = self._hips_and_leg_lengths(q0)
        radius = self._foot_radius()
        mu = float(getattr(self, "mu", 0.7))
        worst_ik, torque_fail, cone_fail = None, None, None
        for depth in self.STANCE_DEPTHS:
            target = hips.copy()
            target[:, 2] = hips[:, 2].mean() - depth * lengths.min()
            q, err, foot = self._feet_ik(q0, target, lo, hi)
            if err > 1e-3:
                if worst_ik is None or err < worst_ik[0]:
                    worst_ik = (err, foot, depth)
                continue
            q[2] = radius - target[0, 2]
            lam, u = self._standing_forces_and_torques(np.concatenate([q, np.zeros(m.nv)]))
            f = lam.reshape(-1, 3)
            if np.any(f[:, 2] <= 0) or np.any(np.linalg.norm(f[:, :2], axis=1) > mu * f[:, 2]):
                cone_fail = cone_fail or (depth, f)
                continue
            excess = np.maximum(u - m.u_upper, m.u_lower - u).max()
            if excess > 0:
                if torque_fail is None or excess < torque_fail[0]:
                    torque_fail = (excess, q.copy(), u)
                continue
            check_feet_lowest(m, self.name, self.robot, q, self.feet, "computed")
            q[2] += 2e-3                                   # 2 mm above the floor, then let it settle
            return self._settle(q)
        if torque_fail is not None:
            check_torques(m, self.name, self.robot, torque_fail[2],
                          "computed: the best of the stance heights tried")
        if cone_fail is not None:
            depth, f = cone_fail
            raise ValueError(f"{self.name}: no computed standing posture of '{self.robot}' keeps the contact forces "
                             f"in the friction cone (mu = {mu:g}; e.g. at {depth:g} leg lengths below the hips the "
                             f"normal forces are {np.round(f[:, 2], 1).tolist()} N): the centre of mass is not over "
                             f"the feet; check the foot frames or give a keyframe named 'standing'")
        err, foot, depth = worst_ik
        raise ValueError(f"{self.name}: the feet of '{self.robot}' cannot reach the ground under the hips within the "
                         f"joint ranges: foot '{foot}' stays {100 * err:.1f} cm from its place (at best, at {depth:g} "
                         f"leg lengths below the hips); check the foot frames (--feet) and the joint ranges, or give "
                         f"a keyframe named 'standing'")

    def _hips_and_leg_lengths(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World positions (k, 3) of each foot's hip (the trunk's child body on the way to the foot)
        at q, and each leg's length [m]: the sum of the body-to-body distances from the hip to the
        foot frame along the chain (the leg fully stretched)."""
        m = self.model
        mj = m.mj_model
        be = get_backend("numpy")
        hips, lengths = [], []
        for f in self.feet:
            b = mujoco_frame(mj, f).body
            trunk = int(mj.jnt_bodyid[0])                  # the free joint's body
            chain = [b]
            while int(mj.body_parentid[chain[-1]]) != trunk:
                chain.append(int(mj.body_parentid[chain[-1]]))
                if chain[-1] == 0:
                    raise ValueError(f"{self.name}: foot frame '{f}' of '{self.robot}' is not on a leg of the trunk")
            pts = [be.frame_placement(m, q, f)[1]] + [be.frame_placement(m, q, m.body_names[c])[1] for c in chain]
            hips.append(pts[-1])
            lengths.append(sum(float(np.linalg.norm(a - c)) for a, c in zip(pts[:-1], pts[1:])))
        return np.array(hips), np.array(lengths)

    def _feet_ik(self, q0: np.ndarray, target: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 iterations: int = 300) -> tuple[np.ndarray, float, str]:
        """Damped least squares for the feet at ``target`` (k, 3) with the trunk fixed, every step
        clipped to the joint ranges: ``(q, largest foot error [m], that foot)``."""
        m = self.model
        be = get_backend("numpy")
        q = q0.copy()
        for _ in range(iterations):
            P = np.stack([be.frame_placement(m, q, f)[1] for f in self.feet])
            E = target - P
            if np.abs(E).max() < 1e-6:
                break
            J = np.concatenate([be.frame_jacobian(m, q, f, "local_world_aligned")[:3, 6:] for f in self.feet])
            step = J.T @ np.linalg.solve(J @ J.T + 1e-4 * np.eye(J.shape[0]), E.reshape(-1))
            q[7:] = np.clip(q[7:] + np.clip(step, -0.3, 0.3), lo, hi)
        P = np.stack([be.frame_placement(m, q, f)[1] for f in self.feet])
        errs = np.linalg.norm(target - P, axis=1)
        return q, float(errs.max()), self.feet[int(np.argmax(errs))]

    def _settle(self, q: np.ndarray, seconds: float = 2.0) -> np.ndarray:
        """The configuration a robot placed at q comes to rest in on MuJoCo's floor with its joints held
        by a stiff PD (MuJoCo's soft contacts penetrate a little: starting there, the closed loop does
        not begin with a contact transient)."""
        m = self.model
        mj = m.mj_model
        d = mujoco.MjData(mj)
        write_state(m, d, np.concatenate([q, np.zeros(m.nv)]))
        act = ActuatorMap.for_model(m, mj)
        B = np.asarray(m.actuation_matrix, float)[6:]         # leg dofs -> controls
        Bp = np.linalg.pinv(B)
        mass = max(float(m.total_mass), 1e-3)
        kp, kd = 20.0 * mass, 0.5 * mass                      # stiff for the robot's size, stable at 1 ms
        for _ in range(int(seconds / mj.opt.timestep)):
            x = read_state(m, d)
            e = q[7:] - x[7:m.nq]
            tau = kp * e - kd * x[m.nq + 6:]
            act.apply(d, np.clip(Bp @ tau, m.u_lower, m.u_upper))
            mujoco.mj_step(mj, d)
        return self._at_rest(d)

    def _foot_radius(self) -> float:
        """Radius of a sphere geom centred on a foot frame (the floor contact is its surface; the
        frame may be that geom itself), else 0."""
        mj = self.model.mj_model
        for f in self.feet:
            body, _, p = self.model.body_frame(f)
            for g in range(mj.ngeom):
                if (mj.geom_bodyid[g] == body and mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE
                        and np.allclose(mj.geom_pos[g], p, atol=1e-6)):
                    return float(mj.geom_size[g, 0])
        return 0.0

    def _standing_forces_and_torques(self, x: np.ndarray, feet: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Contact forces λ (3k,) on ``feet`` (default all) closest to the weight shared evenly by
        them that hold the trunk still (the 6 unactuated rows of ``g(q) = B u + Jᵀ λ``), and the
        torques u that then hold the legs: the standing equilibrium the costs regularise towards."""
        m = self.model
        feet = self.feet if feet is None else tuple(feet)
        be = get_backend("numpy")
        q = x[:m.nq]
        J = np.concatenate([be.frame_jacobian(m, q, f, "local_world_aligned")[:3] for f in feet])  # (3k, nv)
        weight = -float(m.total_mass * m.gravity[2])
        return self._holding(q, J, np.tile([0.0, 0.0, weight / len(feet)], len(feet)))

    # ------------------------------------------------------------ measured in MuJoCo
    def foot_positions(self, x) -> np.ndarray:
        """World positions (T, k, 3) [m] of the foot frames at states x (T, nx) (or (nx,))."""
        m = self.model
        be = get_backend("numpy")
        q = np.ascontiguousarray(np.atleast_2d(x)[:, :m.nq])
        return np.stack([be.frame_placement(m, q, f)[1] for f in self.feet], axis=1)

    def _slip(self, x) -> np.ndarray:
        """Largest horizontal displacement (T,) [m] of a foot from its standing position."""
        P = self.foot_positions(x)
        return np.linalg.norm((P - self._feet0[None])[..., :2], axis=-1).max(axis=1)

    def foot_contacts(self, x) -> np.ndarray:
        """Which feet touch the floor in MuJoCo (T, k) bool at states x (T, nx): a contact between a
        geom of the world body and a geom of the body carrying the foot frame (MuJoCo's own
        collision detection after ``mj_forward`` at that state)."""
        mj = self.model.mj_model
        bodies = self._foot_bodies()
        d = mujoco.MjData(mj)
        X = np.atleast_2d(np.asarray(x, float))
        out = np.zeros((X.shape[0], len(self.feet)), dtype=bool)
        for i, xi in enumerate(X):
            write_state(self.model, d, xi)
            mujoco.mj_forward(mj, d)
            for c in d.contact[:d.ncon]:
                b1, b2 = mj.geom_bodyid[c.geom1], mj.geom_bodyid[c.geom2]
                other = b2 if b1 == 0 else b1 if b2 == 0 else -1
                if other >= 0:
                    out[i] |= bodies == other
        return out

    def _foot_bodies(self) -> np.ndarray:
        return frame_bodies(self.model.mj_model, self.feet)

    def stance_slip(self, x, contacts: np.ndarray | None = None) -> np.ndarray:
        """Per foot (k,), the largest horizontal displacement [m] of the foot while it stays in
        contact, from where that contact began (contacts (T, k) from :meth:`foot_contacts`)."""
        P = self.foot_positions(x)[..., :2]
        C = self.foot_contacts(x) if contacts is None else contacts
        out = np.zeros(len(self.feet))
        for j in range(len(self.feet)):
            start = None
            for i in range(P.shape[0]):
                if C[i, j]:
                    if start is None:
                        start = P[i, j]
                    out[j] = max(out[j], float(np.linalg.norm(P[i, j] - start)))
                else:
                    start = None
        return out

    def disturbances(self) -> list[Disturbance]:
        return list(self._pushes)
