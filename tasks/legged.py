"""Shared pieces of the legged tasks (any MJCF with a free-floating trunk and actuated legs): robot
checks, contact frames, the standing posture (the model's ``standing`` keyframe, or one computed
and settled in MuJoCo), the standing contact forces and torques, pushes, and what MuJoCo measures
about the feet (contact states, horizontal slip while in contact, trunk height).

Used by :mod:`tasks.quadruped` (stand) and :mod:`tasks.quadruped_trot`; a task class mixes in
:class:`LeggedTask` and calls :meth:`LeggedTask._setup_legged` from its ``__post_init__``.
"""

from __future__ import annotations

import mujoco
import numpy as np

from dynamics import ContactSet, get_backend, load_model
from dynamics.mujoco_state import ActuatorMap, read_state, write_state
from solvers import ActionModel, ShootingProblem

from .base import Disturbance, Task

BUNDLED_FEET = {"hyq": ("lf_foot", "rf_foot", "lh_foot", "rh_foot")}


def _quat_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Unit quaternion (w, x, y, z) of R = Rz(yaw) Ry(pitch) Rx(roll)."""
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.array([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy])


def floating_robot_and_frames(name: str, robot: str, feet, bundled: dict, n: int, base: str = "trunk",
                              joints: str = "leg joint", noun: str = "feet", frames: str = "foot frames",
                              example: str = "feet=('FL_foot', 'FR_foot', 'RL_foot', 'RR_foot') (sites or bodies)"):
    """``(model, frames)`` of a legged task: the robot loaded and checked (a free-floating ``base`` as
    its first joint, every other joint actuated), the contact frames resolved (``feet`` as given, a
    comma-separated string, or ``bundled[robot]`` when None) and checked (``n`` of them, each a
    frame of the model). Errors name the task, the problem and the fix."""
    m = load_model(robot)
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
    for f in feet:
        m.frame(f)      # a clear error naming the frames there are
    return m, feet


class StandingTask(Task):
    """Mix-in for tasks of a floating robot that start at rest in a standing posture (legged and
    humanoid). The subclass (a dataclass) has the fields ``robot`` and ``duration_s``, sets
    ``model`` and ``x_stand``, gives :meth:`_computed_standing_configuration` for a model without a
    ``standing`` keyframe and describes it in the class attribute ``computed_posture``."""

    computed_posture = "computed (the model has no 'standing' keyframe)"

    @property
    def duration(self) -> float:  # type: ignore[override]
        return float(self.duration_s)

    def initial_state(self) -> np.ndarray:
        return self.x_stand.copy()

    def _standing_state(self) -> tuple[np.ndarray, str]:
        """The standing state (q, 0) from the model's keyframe ``standing``, else computed, and where
        it came from."""
        m = self.model
        try:
            q = np.array(m.keyframe("standing"), float)
            source = "keyframe 'standing' of the model"
        except (KeyError, ValueError):
            q = self._computed_standing_configuration()
            source = self.computed_posture
        return np.concatenate([q, np.zeros(m.nv)]), source

    def _computed_standing_configuration(self) -> np.ndarray:
        raise NotImplementedError

    def _standing_problem(self, x0, horizon: int, dt: float, running, terminal, dyn, backend,
                          solver_opts: dict) -> ShootingProblem:
        """The shooting problem of ``horizon`` knots of ``dt`` with the same running cost and
        dynamics ``dyn`` at every knot, starting from the standing controls, references of time 0."""
        m = self.model
        am = ActionModel(m, running, dt, dyn)
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
            raise ValueError(f"{self.name}: the computed standing posture of '{self.robot}' did not come to rest "
                             f"in MuJoCo; add a keyframe named 'standing'")
        return x[:m.nq]


class LeggedTask(StandingTask):
    """Mix-in for legged tasks. The subclass (a dataclass) has the fields ``robot`` (bundled name or
    MJCF path), ``feet`` (contact frames, a tuple or a comma-separated string; None for the bundled
    robots' defaults) and ``pushes`` (``(t, body, (fx, fy, fz), duration)`` rows), and the class
    attribute ``n_feet``. :meth:`_setup_legged` sets ``model``, ``feet``, ``contacts`` (point
    contacts on every foot), ``x_stand``, ``posture_source``, ``lam_stand``, ``u_stand``,
    ``standing_height`` and the pushes."""

    n_feet: int = 4
    computed_posture = ("computed (the model has no 'standing' keyframe): feet under their straight-leg positions, "
                        "legs bent until the feet rise 15 % of the leg length towards the trunk, trunk lowered onto "
                        "the floor and settled in MuJoCo with the joints held")

    def _setup_legged(self) -> None:
        self.model, self.feet = floating_robot_and_frames(self.name, self.robot, self.feet, BUNDLED_FEET, self.n_feet)
        m = self.model
        self.contacts = ContactSet(m, frames=self.feet, kind="point")
        self.x_stand, self.posture_source = self._standing_state()
        self.lam_stand, self.u_stand = self._standing_forces_and_torques(self.x_stand)
        be = get_backend("numpy")
        self._feet0 = np.stack([be.frame_placement(m, self.x_stand[:m.nq], f)[1] for f in self.feet])
        self.standing_height = float(self.x_stand[2])
        self._pushes = [Disturbance(float(t), str(body), np.asarray(f, float), float(d)) for t, body, f, d in self.pushes]
        for p in self._pushes:
            m.body_id(p.body)

    # ------------------------------------------------------------ posture
    def _computed_standing_configuration(self) -> np.ndarray:
        """A standing configuration for a model without a 'standing' keyframe: damped least-squares
        inverse kinematics of the feet (trunk fixed) from the reference configuration with
        slightly bent joints, then the trunk lowered until the lowest foot is at the floor (z = 0,
        plus the radius of a sphere foot geom at the frame)."""
        m = self.model
        be = get_backend("numpy")
        q = np.array(m.neutral(), float)
        feet0 = np.stack([be.frame_placement(m, q, f)[1] for f in self.feet])
        leg_length = float(q[2] - feet0[:, 2].min())
        if not leg_length > 0:
            raise ValueError(f"{self.name}: cannot compute a standing posture for '{self.robot}': its feet are not "
                             f"below the trunk in the reference configuration; add a keyframe named 'standing'")
        target = feet0 + np.array([0.0, 0.0, 0.15 * leg_length])
        q[7:] += 0.3                                       # off the straight-leg singularity
        for _ in range(200):
            P = np.stack([be.frame_placement(m, q, f)[1] for f in self.feet])
            e = (target - P).reshape(-1)
            if np.abs(e).max() < 1e-9:
                break
            J = np.concatenate([be.frame_jacobian(m, q, f, "local_world_aligned")[:3, 6:] for f in self.feet])
            q[7:] += J.T @ np.linalg.solve(J @ J.T + 1e-6 * np.eye(J.shape[0]), e)
        else:
            raise ValueError(f"{self.name}: inverse kinematics for a standing posture of '{self.robot}' did not "
                             f"converge; add a keyframe named 'standing'")
        lowest = min(be.frame_placement(m, q, f)[1][2] for f in self.feet)
        q[2] -= lowest - self._foot_radius() - 2e-3       # 2 mm above the floor, then let it settle
        return self._settle(q)

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
        """Radius of a sphere geom centred on a foot frame (the floor contact is its surface), else 0."""
        mj = self.model.mj_model
        for f in self.feet:
            sid = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_SITE, f)
            if sid < 0:
                continue
            body = mj.site_bodyid[sid]
            for g in range(mj.ngeom):
                if (mj.geom_bodyid[g] == body and mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE
                        and np.allclose(mj.geom_pos[g], mj.site_pos[sid], atol=1e-6)):
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
        mj = self.model.mj_model
        ids = []
        for f in self.feet:
            sid = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_SITE, f)
            ids.append(int(mj.site_bodyid[sid]) if sid >= 0 else int(mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, f)))
        return np.array(ids)

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
