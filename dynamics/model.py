"""``RobotModel``: an immutable, flat (structure-of-arrays) description of a kinematic tree, built
from a MuJoCo model so that the controller and the simulator read the same file.

MuJoCo bodies may carry several joints; each joint becomes one *link* of the tree (the links of a
multi-joint body are chained, the inertia sits on the last one). Bodies without joints are welded:
their inertia is merged into the link they are attached to and their frames are kept as fixed
offsets (``body_link``, ``body_R``, ``body_p``), so placements, Jacobians and external forces
still refer to MuJoCo bodies.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType

import numpy as np

from . import joints as _joints
from . import lie
from .inputs import as_array, broadcast_batch, fast_flat, unflatten
from .joints import JOINT_NQ, JOINT_NV, JointType
from .spatial import compose, spatial_inertia

#: why MuJoCo's OpenGL back-end named by ``MUJOCO_GL`` could not be loaded in this process (MuJoCo
#: was then loaded without it), or None
MUJOCO_GL_ERROR: str | None = None


def import_mujoco() -> ModuleType:
    """The ``mujoco`` module, loaded even when the OpenGL back-end that ``MUJOCO_GL`` names cannot be.

    ``import mujoco`` also loads its classic renderer, which loads the back-end ``MUJOCO_GL`` names
    (``osmesa``, ``egl``, ``glfw``); on a machine without that library PyOpenGL raises (for
    OSMesa: ``AttributeError: 'NoneType' object has no attribute 'glGetError'``) and takes every
    command down, rendering or not. Then MuJoCo is loaded again with ``MUJOCO_GL=disable`` for
    this import only (the variable is restored, so a renderer started later in a child process,
    :mod:`sim.video`, still gets the user's choice), a :class:`RuntimeWarning` says so and
    :data:`MUJOCO_GL_ERROR` keeps the reason. Import MuJoCo through this function (or import
    :mod:`dynamics` first) wherever a process may not render."""
    global MUJOCO_GL_ERROR
    platform = os.environ.get("PYOPENGL_PLATFORM")
    try:
        import mujoco
        return mujoco
    except Exception as e:  # noqa: BLE001 - PyOpenGL raises AttributeError/OSError/RuntimeError, not ImportError
        gl = os.environ.get("MUJOCO_GL")
        if not gl or gl.strip().lower() in ("disable", "disabled", "off", "false", "0"):
            raise
        err = f"{type(e).__name__}: {e}"
    # the failed attempt chose PyOpenGL's platform for the back-end (mujoco.osmesa sets it): undo
    # that, so that the environment a child renderer inherits is the user's
    if platform is None:
        os.environ.pop("PYOPENGL_PLATFORM", None)
    else:
        os.environ["PYOPENGL_PLATFORM"] = platform
    # the modules that failed are out of sys.modules (the bindings that loaded stay and are
    # reused); OpenGL's half-initialised platform must not be picked up by the retry
    for name in [n for n in sys.modules if n == "OpenGL" or n.startswith("OpenGL.")]:
        del sys.modules[name]
    os.environ["MUJOCO_GL"] = "disable"
    try:
        import mujoco
    finally:
        os.environ["MUJOCO_GL"] = gl
    MUJOCO_GL_ERROR = f"MUJOCO_GL={gl}: {err}"
    warnings.warn(f"MuJoCo's OpenGL back-end MUJOCO_GL={gl} could not be loaded ({err}); MuJoCo was loaded "
                  f"without rendering, which only commands that render need. Install that back-end's library "
                  f"(osmesa: libosmesa6, egl: libegl1) or unset MUJOCO_GL", RuntimeWarning, stacklevel=2)
    return mujoco


mujoco = import_mujoco()

ROBOTS_DIR = Path(__file__).resolve().parent / "robots"
BUNDLED_ROBOTS = {"iiwa": "iiwa.xml", "hyq": "hyq.xml", "atlas": "atlas.xml"}


class UnsupportedModelError(ValueError):
    """The MJCF/URDF uses an element the dynamics layer cannot represent."""


def _frozen(a) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class RobotModel:
    """Kinematic tree with inertias, joint data and actuation, loaded from MJCF/URDF.

    Sizes: ``nq`` configuration coordinates, ``nv`` velocity/tangent coordinates, ``nlinks`` joints
    (links), ``nbody`` MuJoCo bodies (index 0 is the world), ``nu`` torque actuators.
    Arrays named ``link_*`` are indexed by link, ``dof_*`` by velocity coordinate, ``body_*`` by
    MuJoCo body id, ``site_*`` by MuJoCo site id, ``geom_*`` by MuJoCo geom id. Lengths in m, masses in kg, angles in rad.
    """

    name: str
    path: str | None
    nq: int
    nv: int
    nlinks: int
    nbody: int
    nu: int
    # links (one per joint), topologically ordered: link_parent[i] < i, -1 is the world
    link_parent: np.ndarray
    link_type: np.ndarray
    link_qadr: np.ndarray
    link_dofadr: np.ndarray
    link_nq: np.ndarray
    link_nv: np.ndarray
    link_R0: np.ndarray          # (L, 3, 3) pre-joint frame in the parent link frame
    link_p0: np.ndarray          # (L, 3)
    link_axis: np.ndarray        # (L, 3) hinge/slide axis in the child frame
    link_anchor: np.ndarray      # (L, 3) hinge/ball anchor in the child frame
    link_qpos0: np.ndarray       # (L,) hinge/slide reference (MuJoCo ``ref``)
    link_inertia: np.ndarray     # (L, 6, 6) spatial inertia about the link origin
    link_mass: np.ndarray        # (L,)
    link_com: np.ndarray         # (L, 3) centre of mass in the link frame
    link_S: tuple                # per link (6, nv_i) constant motion subspace
    link_ancestor: np.ndarray    # (L, L) bool: [i, j] is True if j is i or an ancestor of i
    dof_link: np.ndarray         # (nv,)
    dof_S: np.ndarray            # (nv, 6) column of S belonging to each dof
    dof_support: np.ndarray      # (L, nv) bool: dof moves link
    dof_armature: np.ndarray
    dof_damping: np.ndarray
    dof_frictionloss: np.ndarray
    link_stiffness: np.ndarray
    qpos_spring: np.ndarray
    q_lower: np.ndarray          # (nq,) -inf where unlimited (and for quaternion coordinates)
    q_upper: np.ndarray
    joint_names: tuple
    # MuJoCo bodies and sites
    body_names: tuple
    body_link: np.ndarray        # (nbody,) link the body is attached to, -1 for the world
    body_R: np.ndarray           # (nbody, 3, 3) body frame in its link frame
    body_p: np.ndarray
    site_names: tuple
    site_body: np.ndarray
    site_R: np.ndarray           # (nsite, 3, 3) site frame in its body frame
    site_p: np.ndarray
    geom_names: tuple
    geom_body: np.ndarray
    geom_R: np.ndarray           # (ngeom, 3, 3) geom frame in its body frame
    geom_p: np.ndarray
    # actuation: tau = actuation_matrix @ u, u = actuator force (N or N m)
    actuator_names: tuple
    actuator_dof: np.ndarray     # (nu,)
    actuation_matrix: np.ndarray  # (nv, nu)
    u_lower: np.ndarray          # (nu,) actuator force limits
    u_upper: np.ndarray
    gravity: np.ndarray          # (3,) m/s^2
    timestep: float
    keyframes: dict = field(repr=False)
    mj_model: mujoco.MjModel = field(repr=False)
    # derived groupings (for vectorised joint code)
    links_by_type: dict = field(repr=False)
    scalar_q_index: np.ndarray = field(repr=False)
    scalar_v_index: np.ndarray = field(repr=False)
    ball_adr: tuple = field(repr=False)
    free_adr: tuple = field(repr=False)

    # ------------------------------------------------------------ look-ups
    @property
    def has_floating_base(self) -> bool:
        return bool(self.links_by_type[JointType.FREE].size)

    @cached_property
    def is_euclidean(self) -> bool:
        """Whether the configuration space is a plain vector space: only hinge and slide joints,
        with q and v coordinates in the same order (nq == nv). Then ``q ⊕ v = q + v``,
        ``q1 ⊖ q0 = q1 - q0`` and their Jacobians are ± identities."""
        n = self.nq
        return (self.nv == n and not self.ball_adr and not self.free_adr
                and np.array_equal(self.scalar_q_index, np.arange(n))
                and np.array_equal(self.scalar_v_index, np.arange(n)))

    @property
    def total_mass(self) -> float:
        """Mass of the moving links (bodies welded to the world are excluded, as in Pinocchio)."""
        return float(self.link_mass.sum())

    def _name_index(self, names: tuple[str, ...], name: str, kind: str, kinds: str) -> int:
        """Index of ``name`` in ``names``; KeyError listing the named ``kinds`` when absent."""
        try:
            return names.index(name)
        except ValueError:
            raise KeyError(f"model '{self.name}' has no {kind} named '{name}'; {kinds}: "
                           f"{', '.join(n for n in names if n) or '(none)'}") from None

    def body_id(self, name: str) -> int:
        return self._name_index(self.body_names, name, "body", "bodies")

    def site_id(self, name: str) -> int:
        return self._name_index(self.site_names, name, "site", "sites")

    def body_frame(self, name: str) -> tuple[int, np.ndarray, np.ndarray]:
        """Resolve a site, body or geom name (searched in that order, as
        :func:`dynamics.mujoco_frames.mujoco_frame` does) to ``(body, R, p)``: the MuJoCo body that
        carries the frame and the frame's placement in that body's frame."""
        if name in self.site_names:
            i = self.site_names.index(name)
            return int(self.site_body[i]), self.site_R[i], self.site_p[i]
        if name in self.body_names:
            return self.body_names.index(name), np.eye(3), np.zeros(3)
        if name in self.geom_names:
            i = self.geom_names.index(name)
            return int(self.geom_body[i]), self.geom_R[i], self.geom_p[i]
        from .mujoco_frames import listing     # below model in the package, but it needs mujoco loaded first
        raise KeyError(f"model '{self.name}' has no site, body or geom named '{name}'; {listing(self.mj_model)}")

    def frame(self, name: str) -> tuple[int, np.ndarray, np.ndarray]:
        """Resolve a site, body or geom name (as :meth:`body_frame`) to ``(link, R, p)``: the
        frame's placement in its link frame. ``link`` is -1 for world-fixed frames."""
        b, R, p = self.body_frame(name)
        R, p = compose(self.body_R[b], self.body_p[b], R, p)
        return int(self.body_link[b]), R, p

    def keyframe(self, name: str) -> np.ndarray:
        """Configuration q (nq,) stored under keyframe ``name``."""
        if name not in self.keyframes:
            raise KeyError(f"model '{self.name}' has no keyframe '{name}'; keyframes: "
                           f"{', '.join(self.keyframes) or '(none)'}")
        return self.keyframes[name].copy()

    # ------------------------------------------------------------ configuration space
    def neutral(self) -> np.ndarray:
        """Configuration where every joint transform is the identity (nq,)."""
        q = np.zeros(self.nq)
        q[self.link_qadr[self._scalar_links]] = self.link_qpos0[self._scalar_links]
        for qa, _ in self.ball_adr:
            q[qa] = 1.0
        for qa, _ in self.free_adr:
            q[qa + 3] = 1.0
        return q

    def random_configuration(self, rng: np.random.Generator | None = None, size=()) -> np.ndarray:
        """Random configuration(s) (size + (nq,)): hinge/slide uniform within their limits (or in
        [-π, π] / [-1, 1] m if unlimited), uniform random rotations, free positions in [-1, 1] m."""
        rng = np.random.default_rng() if rng is None else rng
        size = (size,) if np.isscalar(size) else tuple(size)
        q = np.zeros(size + (self.nq,))
        for li in self._scalar_links:
            qa = self.link_qadr[li]
            lo, hi = self.q_lower[qa], self.q_upper[qa]
            if not np.isfinite(lo) or not np.isfinite(hi):
                r = np.pi if self.link_type[li] == JointType.HINGE else 1.0
                lo, hi = -r, r
            q[..., qa] = rng.uniform(lo, hi, size=size)
        for qa, _ in self.ball_adr:
            q[..., qa:qa + 4] = lie.quat_normalize(rng.normal(size=size + (4,)))
        for qa, _ in self.free_adr:
            q[..., qa:qa + 3] = rng.uniform(-1, 1, size=size + (3,))
            q[..., qa + 3:qa + 7] = lie.quat_normalize(rng.normal(size=size + (4,)))
        return q

    def _cfg(self, func, **arrays):
        """Check and flatten the arguments of a configuration-space function: ``(batch, [(B, n)])``.
        Plain finite float64 ``(n,)``/``(B, n)`` arrays take a fast path (no broadcasting
        machinery); anything else, and every error, goes through ``as_array``/``broadcast_batch``."""
        fast = fast_flat(arrays)
        if fast is not None:
            return fast
        checked = {}
        for k, (x, n) in arrays.items():
            checked[k] = (as_array(k, x, (n,), func), 1)
        return broadcast_batch(func, checked)

    def integrate(self, q, v) -> np.ndarray:
        """``q ⊕ v`` (..., nq): move from q along the tangent vector v (body-frame for free/ball)."""
        batch, (qf, vf) = self._cfg("integrate", q=(q, self.nq), v=(v, self.nv))
        return unflatten(batch, _joints.integrate(self, qf, vf))

    def difference(self, q0, q1) -> np.ndarray:
        """``q1 ⊖ q0`` (..., nv): the tangent vector v with ``integrate(q0, v) == q1``."""
        batch, (a, b) = self._cfg("difference", q0=(q0, self.nq), q1=(q1, self.nq))
        return unflatten(batch, _joints.difference(self, a, b))

    def integrate_jacobians(self, q, v) -> tuple[np.ndarray, np.ndarray]:
        """``(d(q⊕v)/dq, d(q⊕v)/dv)``, each (..., nv, nv), in tangent coordinates at the result."""
        batch, (qf, vf) = self._cfg("integrate_jacobians", q=(q, self.nq), v=(v, self.nv))
        Jq, Jv = _joints.integrate_jacobians(self, qf, vf)
        return unflatten(batch, Jq), unflatten(batch, Jv)

    def difference_jacobians(self, q0, q1) -> tuple[np.ndarray, np.ndarray]:
        """``(d(q1⊖q0)/dq0, d(q1⊖q0)/dq1)``, each (..., nv, nv)."""
        batch, (a, b) = self._cfg("difference_jacobians", q0=(q0, self.nq), q1=(q1, self.nq))
        J0, J1 = _joints.difference_jacobians(self, a, b)
        return unflatten(batch, J0), unflatten(batch, J1)

    # ------------------------------------------------------------ MuJoCo state conversions
    def _free_rotations(self, q):
        return [(qa, va, lie.quat_to_rotation(q[..., qa + 3:qa + 7])) for qa, va in self.free_adr]

    def _rotate_free_linear(self, func, q, x, name, to_body: bool) -> np.ndarray:
        """``x`` (..., nv) with the linear part of each free joint rotated by the joint's rotation
        ``R`` at ``q``: into the body frame (``R^T x``, ``to_body``) or out of it (``R x``)."""
        batch, (qf, xf) = self._cfg(func, q=(q, self.nq), **{name: (x, self.nv)})
        out = xf.copy()
        subscripts = "bji,bj->bi" if to_body else "bij,bj->bi"
        for _, va, R in self._free_rotations(qf):
            out[:, va:va + 3] = np.einsum(subscripts, R, xf[:, va:va + 3])
        return unflatten(batch, out)

    def v_from_qvel(self, q, qvel) -> np.ndarray:
        """Model velocity v from MuJoCo qvel: free-joint linear velocity rotated into the body frame."""
        return self._rotate_free_linear("v_from_qvel", q, qvel, "qvel", to_body=True)

    def qvel_from_v(self, q, v) -> np.ndarray:
        """MuJoCo qvel from model velocity v (inverse of :meth:`v_from_qvel`)."""
        return self._rotate_free_linear("qvel_from_v", q, v, "v", to_body=False)

    def a_from_qacc(self, q, v, qacc) -> np.ndarray:
        """Model acceleration (time derivative of v) from MuJoCo qacc at velocity v (model convention)."""
        batch, (qf, vf, af) = self._cfg("a_from_qacc", q=(q, self.nq), v=(v, self.nv), qacc=(qacc, self.nv))
        a = af.copy()
        for _, va, R in self._free_rotations(qf):
            lin = np.einsum("bji,bj->bi", R, af[:, va:va + 3])
            a[:, va:va + 3] = lin - np.cross(vf[:, va + 3:va + 6], vf[:, va:va + 3])
        return unflatten(batch, a)

    def qacc_from_a(self, q, v, a) -> np.ndarray:
        """MuJoCo qacc from model acceleration a at model velocity v."""
        batch, (qf, vf, af) = self._cfg("qacc_from_a", q=(q, self.nq), v=(v, self.nv), a=(a, self.nv))
        qacc = af.copy()
        for _, va, R in self._free_rotations(qf):
            lin = af[:, va:va + 3] + np.cross(vf[:, va + 3:va + 6], vf[:, va:va + 3])
            qacc[:, va:va + 3] = np.einsum("bij,bj->bi", R, lin)
        return unflatten(batch, qacc)

    def tau_from_qfrc(self, q, qfrc) -> np.ndarray:
        """Generalised force in model coordinates from a MuJoCo generalised force (qfrc_*): ``T^T qfrc``
        with ``qvel = T v`` (the free-joint force is rotated into the body frame)."""
        return self._rotate_free_linear("tau_from_qfrc", q, qfrc, "qfrc", to_body=True)

    def qfrc_from_tau(self, q, tau) -> np.ndarray:
        """MuJoCo generalised force from model coordinates (inverse of :meth:`tau_from_qfrc`)."""
        return self._rotate_free_linear("qfrc_from_tau", q, tau, "tau", to_body=False)

    @property
    def _scalar_links(self) -> np.ndarray:
        return np.concatenate([self.links_by_type[JointType.HINGE], self.links_by_type[JointType.SLIDE]]).astype(int)


# ---------------------------------------------------------------- loading
def _name(m: mujoco.MjModel, obj, i: int) -> str:
    return mujoco.mj_id2name(m, obj, i) or ""


def _refuse_unsupported(m: mujoco.MjModel, label: str) -> None:
    def refuse(what: str) -> None:
        raise UnsupportedModelError(f"model '{label}': {what} cannot be represented by the mpc-accel dynamics "
                                    f"layer (kinematic trees of hinge, slide, ball and free joints with joint "
                                    f"actuators). Remove it from the model file or use MuJoCo directly.")
    if m.ntendon:
        refuse(f"tendon '{_name(m, mujoco.mjtObj.mjOBJ_TENDON, 0) or 0}' ({m.ntendon} tendons)")
    if m.neq:
        refuse(f"equality constraint '{_name(m, mujoco.mjtObj.mjOBJ_EQUALITY, 0) or 0}' ({m.neq} equality "
               f"constraints: coupled or closed-loop joints)")
    if getattr(m, "nflex", 0):
        refuse(f"flex '{_name(m, mujoco.mjtObj.mjOBJ_FLEX, 0) or 0}'")
    for a in range(m.nu):
        if int(m.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT):
            refuse(f"actuator '{_name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a) or a}' with a non-joint transmission")
        j = m.actuator_trnid[a, 0]
        if int(m.jnt_type[j]) not in (int(JointType.HINGE), int(JointType.SLIDE)):
            refuse(f"actuator '{_name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a) or a}' on a ball/free joint")
    for b in range(1, m.nbody):
        if m.body_gravcomp[b] != 0:
            refuse(f"gravity compensation on body '{_name(m, mujoco.mjtObj.mjOBJ_BODY, b)}'")
    for j in range(m.njnt):
        if int(m.jnt_type[j]) == int(JointType.FREE) and m.body_parentid[m.jnt_bodyid[j]] != 0:
            refuse(f"free joint '{_name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or j}' on a body that is not a child "
                   f"of the world")


def _is_torque_actuator(m: mujoco.MjModel, a: int) -> bool:
    """Direct force actuators: force = gain·ctrl with fixed gain, no bias, no activation dynamics."""
    return (int(m.actuator_gaintype[a]) == int(mujoco.mjtGain.mjGAIN_FIXED)
            and int(m.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_NONE)
            and int(m.actuator_dyntype[a]) == int(mujoco.mjtDyn.mjDYN_NONE))


def from_mujoco(m: mujoco.MjModel, name: str = "model", path: str | None = None) -> RobotModel:
    """Build a :class:`RobotModel` from a compiled ``mujoco.MjModel``."""
    _refuse_unsupported(m, name)
    nb = m.nbody
    body_link = -np.ones(nb, dtype=int)
    body_R = np.tile(np.eye(3), (nb, 1, 1))
    body_p = np.zeros((nb, 3))
    L = m.njnt
    link_parent = np.empty(L, dtype=int)
    link_type = np.empty(L, dtype=int)
    R0 = np.tile(np.eye(3), (L, 1, 1))
    p0 = np.zeros((L, 3))
    axis = np.zeros((L, 3))
    anchor = np.zeros((L, 3))
    qpos0 = np.zeros(L)
    for b in range(1, nb):
        pb = m.body_parentid[b]
        Rb = lie.quat_to_rotation(m.body_quat[b])
        Rpre, ppre = compose(body_R[pb], body_p[pb], Rb, m.body_pos[b])
        parent_link = body_link[pb]
        jadr, jnum = m.body_jntadr[b], m.body_jntnum[b]
        if jnum == 0:
            body_link[b], body_R[b], body_p[b] = parent_link, Rpre, ppre
            continue
        for k, j in enumerate(range(jadr, jadr + jnum)):
            link_type[j] = int(m.jnt_type[j])
            if link_type[j] == JointType.FREE:
                link_parent[j] = -1  # MuJoCo places free bodies directly in world coordinates
            else:
                link_parent[j] = parent_link if k == 0 else j - 1
                if k == 0:
                    R0[j], p0[j] = Rpre, ppre
            axis[j] = m.jnt_axis[j]
            anchor[j] = m.jnt_pos[j]
            if link_type[j] in (JointType.HINGE, JointType.SLIDE):
                qpos0[j] = m.qpos0[m.jnt_qposadr[j]]
        body_link[b] = jadr + jnum - 1
    if np.any(link_parent >= np.arange(L)):
        raise UnsupportedModelError(f"model '{name}': joints are not topologically ordered")

    # inertia: merge every body into its link frame
    link_inertia = np.zeros((L, 6, 6))
    for b in range(1, nb):
        lk = body_link[b]
        if lk < 0 or m.body_mass[b] == 0:
            continue
        Ri = lie.quat_to_rotation(m.body_iquat[b])
        Icom_body = Ri @ np.diag(m.body_inertia[b]) @ Ri.T
        com = body_p[b] + body_R[b] @ m.body_ipos[b]
        link_inertia[lk] += spatial_inertia(m.body_mass[b], com, body_R[b] @ Icom_body @ body_R[b].T)
    link_mass = link_inertia[:, 0, 0].copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        mc = np.stack([link_inertia[:, 5, 1], link_inertia[:, 3, 2], link_inertia[:, 4, 0]], axis=-1)  # m·c from m[c]x block
        link_com = np.where(link_mass[:, None] > 0, mc / np.where(link_mass > 0, link_mass, 1)[:, None], 0.0)

    link_qadr = m.jnt_qposadr.astype(int).copy()
    link_dofadr = m.jnt_dofadr.astype(int).copy()
    link_nq = np.array([JOINT_NQ[JointType(t)] for t in link_type], dtype=int)
    link_nv = np.array([JOINT_NV[JointType(t)] for t in link_type], dtype=int)
    link_S = tuple(_frozen(_joints.motion_subspace(link_type[i], axis[i], anchor[i])) for i in range(L))
    nv = m.nv
    dof_link = np.empty(nv, dtype=int)
    dof_S = np.zeros((nv, 6))
    for i in range(L):
        for k in range(link_nv[i]):
            dof_link[link_dofadr[i] + k] = i
            dof_S[link_dofadr[i] + k] = link_S[i][:, k]
    anc = np.zeros((L, L), dtype=bool)
    for i in range(L):
        j = i
        while j >= 0:
            anc[i, j] = True
            j = link_parent[j]
    dof_support = anc[:, dof_link]

    q_lower = np.full(m.nq, -np.inf)
    q_upper = np.full(m.nq, np.inf)
    for j in range(L):
        if link_type[j] in (JointType.HINGE, JointType.SLIDE) and m.jnt_limited[j]:
            q_lower[link_qadr[j]], q_upper[link_qadr[j]] = m.jnt_range[j]

    # actuation: torque actuators on hinge/slide joints
    acts = [a for a in range(m.nu) if _is_torque_actuator(m, a)]
    nu = len(acts)
    act_dof = np.array([m.jnt_dofadr[m.actuator_trnid[a, 0]] for a in acts], dtype=int)
    Bmat = np.zeros((nv, nu))
    u_lo = np.full(nu, -np.inf)
    u_hi = np.full(nu, np.inf)
    for k, a in enumerate(acts):
        gain = m.actuator_gainprm[a, 0] * m.actuator_gear[a, 0]
        Bmat[act_dof[k], k] = m.actuator_gear[a, 0]
        # u is the actuator force; limits: force range, control range times gain, joint actuator-force range
        if m.actuator_forcelimited[a]:
            u_lo[k], u_hi[k] = max(u_lo[k], m.actuator_forcerange[a, 0]), min(u_hi[k], m.actuator_forcerange[a, 1])
        if m.actuator_ctrllimited[a]:
            lo, hi = sorted(m.actuator_ctrlrange[a] * m.actuator_gainprm[a, 0])
            u_lo[k], u_hi[k] = max(u_lo[k], lo), min(u_hi[k], hi)
        j = m.actuator_trnid[a, 0]
        if m.jnt_actfrclimited[j] and gain != 0:
            lo, hi = sorted(m.jnt_actfrcrange[j] / m.actuator_gear[a, 0])
            u_lo[k], u_hi[k] = max(u_lo[k], lo), min(u_hi[k], hi)

    grav = np.zeros(3) if (int(m.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)) else np.array(m.opt.gravity)
    keyframes = {(_name(m, mujoco.mjtObj.mjOBJ_KEY, k) or f"key{k}"): _frozen(m.key_qpos[k]) for k in range(m.nkey)}
    by_type = {t: np.flatnonzero(link_type == t) for t in JointType}
    scalar = np.sort(np.concatenate([by_type[JointType.HINGE], by_type[JointType.SLIDE]])).astype(int)
    return RobotModel(
        name=name, path=path, nq=m.nq, nv=nv, nlinks=L, nbody=nb, nu=nu,
        link_parent=_frozen(link_parent), link_type=_frozen(link_type), link_qadr=_frozen(link_qadr),
        link_dofadr=_frozen(link_dofadr), link_nq=_frozen(link_nq), link_nv=_frozen(link_nv),
        link_R0=_frozen(R0), link_p0=_frozen(p0), link_axis=_frozen(axis), link_anchor=_frozen(anchor),
        link_qpos0=_frozen(qpos0), link_inertia=_frozen(link_inertia), link_mass=_frozen(link_mass),
        link_com=_frozen(link_com), link_S=link_S, link_ancestor=_frozen(anc), dof_link=_frozen(dof_link),
        dof_S=_frozen(dof_S), dof_support=_frozen(dof_support), dof_armature=_frozen(m.dof_armature),
        dof_damping=_frozen(m.dof_damping), dof_frictionloss=_frozen(m.dof_frictionloss),
        link_stiffness=_frozen(m.jnt_stiffness), qpos_spring=_frozen(m.qpos_spring),
        q_lower=_frozen(q_lower), q_upper=_frozen(q_upper),
        joint_names=tuple(_name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(L)),
        body_names=tuple(_name(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(nb)),
        body_link=_frozen(body_link), body_R=_frozen(body_R), body_p=_frozen(body_p),
        site_names=tuple(_name(m, mujoco.mjtObj.mjOBJ_SITE, s) for s in range(m.nsite)),
        site_body=_frozen(m.site_bodyid.astype(int)),
        site_R=_frozen(lie.quat_to_rotation(m.site_quat) if m.nsite else np.zeros((0, 3, 3))),
        site_p=_frozen(m.site_pos.copy()),
        geom_names=tuple(_name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in range(m.ngeom)),
        geom_body=_frozen(m.geom_bodyid.astype(int)),
        geom_R=_frozen(lie.quat_to_rotation(m.geom_quat) if m.ngeom else np.zeros((0, 3, 3))),
        geom_p=_frozen(m.geom_pos.copy()),
        actuator_names=tuple(_name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in acts),
        actuator_dof=_frozen(act_dof), actuation_matrix=_frozen(Bmat), u_lower=_frozen(u_lo), u_upper=_frozen(u_hi),
        gravity=_frozen(grav), timestep=float(m.opt.timestep), keyframes=keyframes, mj_model=m,
        links_by_type=by_type, scalar_q_index=_frozen(link_qadr[scalar]), scalar_v_index=_frozen(link_dofadr[scalar]),
        ball_adr=tuple((int(link_qadr[i]), int(link_dofadr[i])) for i in by_type[JointType.BALL]),
        free_adr=tuple((int(link_qadr[i]), int(link_dofadr[i])) for i in by_type[JointType.FREE]),
    )


def load_model(name_or_path: str | os.PathLike) -> RobotModel:
    """Load a bundled robot (``"iiwa"``, ``"hyq"``, ``"atlas"``) or any MJCF/URDF file through MuJoCo."""
    key = str(name_or_path)
    if key in BUNDLED_ROBOTS:
        path = ROBOTS_DIR / BUNDLED_ROBOTS[key]
        label = key
    else:
        path = Path(key)
        if not path.exists():
            raise FileNotFoundError(f"unknown robot '{key}': not a bundled robot ({', '.join(BUNDLED_ROBOTS)}) "
                                    f"and no such MJCF/URDF file")
        label = path.stem
    try:
        m = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as e:
        raise ValueError(f"MuJoCo could not load '{path}': {e}") from e
    return from_mujoco(m, name=label, path=str(path))
