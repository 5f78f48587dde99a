"""Pinocchio oracle models for the oracle tests: a ``pin.Model`` equivalent to a MuJoCo model,
plus the maps between our conventions (MuJoCo qpos / dof order, quaternions (w, x, y, z),
external forces per MuJoCo body) and Pinocchio's (per-joint idx_q / idx_v, quaternions
(x, y, z, w), external forces per joint in the joint frame).

Two ways to build the oracle, both independent of ``dynamics.model`` (they read only the MJCF file
or the compiled ``mujoco.MjModel``):

* :func:`oracle_from_mjcf` — Pinocchio's own MJCF reader (``pin.buildModelFromMJCF``). Used for the
  bundled robots and one random tree. Gaps seen in Pinocchio 4.1.0: bodies inside a ``<frame>``
  element and every top-level body after the first are silently dropped; several joints in one
  body become one ``JointModelComposite`` named ``Composite_<first joint>``; a ``<freejoint>`` body
  with a non-identity ``quat`` and non-zero ``pos`` gets the FreeFlyer placement
  ``(I, pos - R(quat)^T pos)`` instead of the identity. So the tests assert nq, nv, total mass,
  gravity, armature and all body/site placements against MuJoCo before comparing anything, and
  every frame compared must exist in the reader's model.
* :func:`oracle_from_mujoco` — built programmatically with ``pin.Model.addJoint`` /
  ``appendBodyToJoint`` / ``addFrame`` from the raw ``mujoco.MjModel`` fields (``body_pos``,
  ``body_quat``, ``jnt_axis``, ``jnt_pos``, ``body_ipos``, ``body_iquat``, ``body_inertia``,
  ``body_mass``, ``qpos0``, ``dof_armature``, ``site_pos``, ``site_quat``). Used for the random
  trees, which exercise features the reader handles differently from MuJoCo (see
  :func:`oracle_from_mujoco`).

Armature: MuJoCo's ``dof_armature`` is part of our M. The reader copies MJCF ``armature`` into
``pin.Model.armature`` (checked in the tests against ``MjModel.dof_armature``); the programmatic
builder sets ``pin.Model.armature`` from ``MjModel.dof_armature``. Pinocchio's crba / aba /
computeMinverse / rnea and their derivatives include ``model.armature``, so both sides use the same
armature and nothing is zeroed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np
import pinocchio as pin

FREE, BALL, SLIDE, HINGE = (int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL),
                            int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE))
_PIN_SHORTNAMES = {
    FREE: ("JointModelFreeFlyer",),
    BALL: ("JointModelSpherical",),
    SLIDE: ("JointModelPX", "JointModelPY", "JointModelPZ", "JointModelPrismaticUnaligned"),
    HINGE: ("JointModelRX", "JointModelRY", "JointModelRZ", "JointModelRevoluteUnaligned"),
}


def _quat_wxyz_to_rotation(qw: np.ndarray) -> np.ndarray:
    """Rotation matrix of a (w, x, y, z) quaternion, via MuJoCo (independent of ``dynamics.lie``)."""
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, np.asarray(qw, dtype=float) / np.linalg.norm(qw))
    return R.reshape(3, 3)


def _se3(quat_wxyz, pos) -> pin.SE3:
    return pin.SE3(_quat_wxyz_to_rotation(quat_wxyz), np.asarray(pos, dtype=float))


@dataclass
class PinOracle:
    """A Pinocchio model equivalent to a MuJoCo model, and the convention maps between them.

    ``v_index[d]`` is Pinocchio's velocity index of our dof ``d`` (MuJoCo dof order).
    ``q_joints`` holds per MuJoCo joint ``(type, our qadr, pin qadr, hinge/slide offset)``: the pin
    coordinate of a hinge/slide is ``q - offset`` (MuJoCo's ``ref`` where the oracle uses it).
    ``body_frames[b] = (pin joint id, SE3 of MuJoCo body b's frame in that joint's frame)``.
    ``frame_ids`` maps site names (pin OP_FRAME) and body names (pin BODY frames) to pin frame ids;
    sites win over bodies of the same name (our convention).
    """

    model: pin.Model
    source: str
    mj_model: mujoco.MjModel
    v_index: np.ndarray
    q_joints: list
    body_frames: list
    frame_ids: dict = field(default_factory=dict)

    def data(self) -> pin.Data:
        return self.model.createData()

    # ---------------------------------------------------------------- configuration
    def _q_map(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pin index, our index, offset)`` per coordinate, so that ``qp[pin] = q[ours] - offset``:
        quaternions reordered from (w, x, y, z) to (x, y, z, w), hinge/slide offsets, the rest as is."""
        pin_i: list[int] = []
        our_i: list[int] = []
        off: list[float] = []
        for jt, qa, pa, o in self.q_joints:
            if jt in (HINGE, SLIDE):
                ours, offsets = [qa], [o]
            elif jt == BALL:
                ours, offsets = [qa + 1, qa + 2, qa + 3, qa], [0.0] * 4
            else:
                ours, offsets = [qa, qa + 1, qa + 2, qa + 4, qa + 5, qa + 6, qa + 3], [0.0] * 7
            pin_i += range(pa, pa + len(ours))
            our_i += ours
            off += offsets
        return np.array(pin_i, dtype=int), np.array(our_i, dtype=int), np.array(off, dtype=float)

    def q_to_pin(self, q: np.ndarray) -> np.ndarray:
        """Our q (MuJoCo qpos, nq) -> Pinocchio q (nq)."""
        pin_i, our_i, off = self._q_map()
        qp = np.zeros(self.model.nq)
        qp[pin_i] = np.asarray(q, dtype=float)[our_i] - off
        return qp

    def q_from_pin(self, qp: np.ndarray) -> np.ndarray:
        """Pinocchio q -> our q (MuJoCo qpos)."""
        pin_i, our_i, off = self._q_map()
        q = np.zeros(self.mj_model.nq)
        q[our_i] = np.asarray(qp)[pin_i] + off
        return q

    # ---------------------------------------------------------------- tangent vectors
    def v_to_pin(self, v: np.ndarray) -> np.ndarray:
        vp = np.zeros(self.model.nv)
        vp[self.v_index] = v
        return vp

    def vec_from_pin(self, x: np.ndarray) -> np.ndarray:
        """A Pinocchio nv-vector in our dof order."""
        return np.asarray(x)[self.v_index]

    def mat_from_pin(self, M: np.ndarray) -> np.ndarray:
        """A Pinocchio (nv, nv) matrix (rows and columns in pin's dof order) in our dof order."""
        return np.asarray(M)[np.ix_(self.v_index, self.v_index)]

    def cols_from_pin(self, J: np.ndarray) -> np.ndarray:
        """A Pinocchio (k, nv) Jacobian with its columns in our dof order."""
        return np.asarray(J)[:, self.v_index]

    # ---------------------------------------------------------------- external forces
    def fext_to_pin(self, fext: np.ndarray) -> list:
        """Our fext (nbody, 6): spatial force (force, torque) on MuJoCo body b in body b's frame at
        its origin -> Pinocchio's per-joint forces in each joint's local frame. Bodies welded to
        the world (pin joint 0) are dropped, as in our convention (row 0 is ignored)."""
        out = [pin.Force.Zero() for _ in range(self.model.njoints)]
        for b in range(1, self.mj_model.nbody):
            jid, M = self.body_frames[b]
            if jid == 0:
                continue
            f = pin.Force(np.asarray(fext[b, :3], float), np.asarray(fext[b, 3:], float))
            out[jid] = out[jid] + M.act(f)
        return out

    def frame_id(self, name: str) -> int:
        return self.frame_ids[name]


def _mj_name(m: mujoco.MjModel, obj, i: int) -> str:
    return mujoco.mj_id2name(m, obj, i) or ""


def _q_joints(m: mujoco.MjModel, pm: pin.Model, pin_joint_of, offsets) -> list:
    out = []
    for j in range(m.njnt):
        jid = pin_joint_of[j]
        out.append((int(m.jnt_type[j]), int(m.jnt_qposadr[j]), int(pm.idx_qs[jid]), float(offsets[j])))
    return out


def _v_index(m: mujoco.MjModel, pm: pin.Model, pin_joint_of) -> np.ndarray:
    v_index = np.empty(m.nv, dtype=int)
    for j in range(m.njnt):
        jid = pin_joint_of[j]
        nv_j = {FREE: 6, BALL: 3, SLIDE: 1, HINGE: 1}[int(m.jnt_type[j])]
        if pm.nvs[jid] != nv_j:
            raise AssertionError(f"pin joint '{pm.names[jid]}' has nv={pm.nvs[jid]}, MuJoCo joint has {nv_j}")
        v_index[m.jnt_dofadr[j]:m.jnt_dofadr[j] + nv_j] = pm.idx_vs[jid] + np.arange(nv_j)
    if sorted(v_index) != list(range(m.nv)):
        raise AssertionError("pin dof map is not a permutation")
    return v_index


def oracle_from_mjcf(path: str, m: mujoco.MjModel) -> PinOracle:
    """Pinocchio's MJCF reader, joints matched to MuJoCo's by name (each must exist, with the
    matching joint type); bodies and sites matched by name to pin BODY / OP_FRAME frames.

    Hinge/slide ``ref``: the reader bakes MuJoCo's ``ref`` into the joint placement, so the pin
    coordinate equals MuJoCo's qpos (offset 0; checked against ``mj_kinematics`` in the tests).
    Free joints: MuJoCo's free-joint qpos is the world pose of the body. The reader gives the
    FreeFlyer an identity placement only when the body's ``quat`` is the identity (or its ``pos``
    is zero); otherwise it places it at ``(I, pos - R(quat)^T pos)`` (observed in pin 4.1.0), which
    is not MuJoCo's convention. That is asserted away here (AssertionError), not silently remapped.
    """
    pm = pin.buildModelFromMJCF(str(path))
    pin_joint_of = []
    for j in range(m.njnt):
        name = _mj_name(m, mujoco.mjtObj.mjOBJ_JOINT, j)
        if not name or not pm.existJointName(name):
            raise AssertionError(f"MuJoCo joint '{name or j}' has no pin joint of that name")
        jid = pm.getJointId(name)
        short = pm.joints[jid].shortname()
        if short not in _PIN_SHORTNAMES[int(m.jnt_type[j])]:
            raise AssertionError(f"joint '{name}': MuJoCo type {int(m.jnt_type[j])} became pin {short}")
        if int(m.jnt_type[j]) == FREE and not pm.jointPlacements[jid].isIdentity():
            raise AssertionError(f"free joint '{name}': pin placement is not the identity")
        pin_joint_of.append(jid)
    body_frames = [(0, pin.SE3.Identity())]
    frame_ids = {}
    for b in range(1, m.nbody):
        name = _mj_name(m, mujoco.mjtObj.mjOBJ_BODY, b)
        if not pm.existFrame(name, pin.BODY):
            raise AssertionError(f"MuJoCo body '{name}' has no pin BODY frame")
        fid = pm.getFrameId(name, pin.BODY)
        fr = pm.frames[fid]
        body_frames.append((int(fr.parentJoint), pin.SE3(fr.placement)))
        frame_ids[name] = fid
    for s in range(m.nsite):
        name = _mj_name(m, mujoco.mjtObj.mjOBJ_SITE, s)
        if name and pm.existFrame(name, pin.OP_FRAME):
            frame_ids[name] = pm.getFrameId(name, pin.OP_FRAME)
    return PinOracle(pm, "mjcf-reader", m, _v_index(m, pm, pin_joint_of),
                     _q_joints(m, pm, pin_joint_of, np.zeros(m.njnt)), body_frames, frame_ids)


def oracle_from_mujoco(m: mujoco.MjModel) -> PinOracle:
    """Build the pin model joint by joint from the raw MuJoCo model fields.

    MuJoCo composes a body's joints left to right in its pre-joint frame ``P = parent ∘ offset``:
    ``body = P ∘ J_0(q_0) ∘ J_1(q_1) …``, where a hinge is ``T(p) R(axis, q - ref) T(-p)`` about the
    anchor ``p = jnt_pos`` (axis and anchor in the body frame), a ball ``T(p) R(quat) T(-p)``, a slide
    ``T(axis (q - ref))`` (``jnt_pos`` unused) and a free joint the world pose itself (body offset
    unused). So every MuJoCo joint becomes one pin joint (RevoluteUnaligned, PrismaticUnaligned,
    Spherical, FreeFlyer) placed at its anchor: placement ``P ∘ T(p_0)`` for the first joint and
    ``T(-p_{k-1}) ∘ T(p_k)`` for the next ones of the same body; the body frame is ``T(-p_last)`` in
    the last joint frame, and the body inertia (about its COM in the principal frame ``body_ipos``,
    ``body_iquat``, ``body_inertia``) is appended there. Joint-less (welded) bodies are appended to
    the joint of their parent (the universe for bodies welded to the world, which Pinocchio leaves
    out of the dynamics and of the centre of mass, as our convention does). The pin coordinate of a
    hinge/slide is ``q - ref`` (MuJoCo ``qpos0``). Sites become OP_FRAMEs, bodies BODY frames.
    """
    pm = pin.Model()
    pm.name = "mujoco_programmatic"
    disabled = int(m.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_GRAVITY)
    pm.gravity = pin.Motion(np.zeros(3) if disabled else np.array(m.opt.gravity), np.zeros(3))
    body_frames: list = [(0, pin.SE3.Identity())]
    body_fid = [0]
    pin_joint_of = [0] * m.njnt
    frame_ids = {}
    for b in range(1, m.nbody):
        pb = int(m.body_parentid[b])
        jp, Mp = body_frames[pb]
        Mpre = Mp * _se3(m.body_quat[b], m.body_pos[b])
        parent, placement = jp, Mpre
        for j in range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b]):
            jt = int(m.jnt_type[j])
            name = _mj_name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint{j}"
            anchor = np.zeros(3)
            if jt == FREE:
                if parent != 0:
                    raise AssertionError("free joints are only supported on children of the world")
                jm, placement = pin.JointModelFreeFlyer(), pin.SE3.Identity()
            elif jt == BALL:
                jm, anchor = pin.JointModelSpherical(), np.array(m.jnt_pos[j])
            elif jt == HINGE:
                jm, anchor = pin.JointModelRevoluteUnaligned(np.array(m.jnt_axis[j])), np.array(m.jnt_pos[j])
            else:
                jm = pin.JointModelPrismaticUnaligned(np.array(m.jnt_axis[j]))
            jid = pm.addJoint(parent, jm, placement * pin.SE3(np.eye(3), anchor), name)
            pin_joint_of[j] = jid
            parent, placement = jid, pin.SE3(np.eye(3), -anchor)
        body_frames.append((parent, placement))
        Ri = _quat_wxyz_to_rotation(m.body_iquat[b])
        inertia = pin.Inertia(float(m.body_mass[b]), np.array(m.body_ipos[b]), Ri @ np.diag(m.body_inertia[b]) @ Ri.T)
        pm.appendBodyToJoint(parent, inertia, placement)
        name = _mj_name(m, mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}"
        fid = pm.addFrame(pin.Frame(name, parent, body_fid[pb], placement, pin.BODY))
        body_fid.append(fid)
        frame_ids[name] = fid
    for j in range(m.njnt):  # armature in pin's dof order
        jid = pin_joint_of[j]
        nv_j = pm.nvs[jid]
        pm.armature[pm.idx_vs[jid]:pm.idx_vs[jid] + nv_j] = m.dof_armature[m.jnt_dofadr[j]:m.jnt_dofadr[j] + nv_j]
    for s in range(m.nsite):
        b = int(m.site_bodyid[s])
        jid, Mb = body_frames[b]
        name = _mj_name(m, mujoco.mjtObj.mjOBJ_SITE, s) or f"site{s}"
        frame_ids[name] = pm.addFrame(pin.Frame(name, jid, body_fid[b], Mb * _se3(m.site_quat[s], m.site_pos[s]),
                                                pin.OP_FRAME))
    offsets = np.array([m.qpos0[m.jnt_qposadr[j]] if int(m.jnt_type[j]) in (HINGE, SLIDE) else 0.0
                        for j in range(m.njnt)])
    return PinOracle(pm, "programmatic", m, _v_index(m, pm, pin_joint_of),
                     _q_joints(m, pm, pin_joint_of, offsets), body_frames, frame_ids)
