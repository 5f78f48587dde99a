"""The numpy reference dynamics against MuJoCo, an independent implementation, at random states.

Robots: the three bundled models and random MJCF trees (``random_trees.py``) mixing hinge, slide
and ball joints, several joints per body, welded bodies, joint anchors, armature and hinge/slide
``ref`` values, with and without a free-floating root.

MuJoCo is set up so that its equations of motion are exactly rigid-body dynamics: constraints
(contacts, limits, friction loss), springs, dampers and actuators are disabled. MuJoCo's free-joint
``qvel`` has its linear part in world axes while our ``v`` is body-frame (docs/conventions.md), so
every quantity is mapped through ``qvel = T v``: ``M = Tᵀ M_mj T``, ``tau = Tᵀ qfrc`` and
Jacobians ``J = J_mj T``.
"""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

import dynamics  # noqa: E402
from dynamics.joints import JointType  # noqa: E402
from tests.helpers.oracle_helpers import mj_frame_jacobian, mj_frames, oracle_mjmodel  # noqa: E402
from tests.helpers.random_trees import random_tree_model  # noqa: E402

BE = dynamics.get_backend("numpy")
NSTATES = 3  # random states per robot and check
TOL = 1e-9   # relative to max(1, |reference|): all checks are exact up to round-off

# (seed, nbodies, free_root): chosen so that together they contain every joint type, welded
# bodies, multi-joint bodies and hinge/slide refs (see random_trees.py)
TREES = {
    "tree_fixed": (13, 10, False),
    "tree_free": (16, 10, True),
    "tree_free_ball": (20, 10, True),
}
CASES = ["iiwa", "hyq", "atlas", *TREES]


@pytest.fixture(scope="module", params=CASES)
def case(request, bundled):
    """``(RobotModel, oracle MjModel)`` for one robot."""
    name = request.param
    if name in TREES:
        seed, nb, free = TREES[name]
        model, mj = random_tree_model(seed, nb, free_root=free, refs=True)
    else:
        model = bundled[name]
        mj = mujoco.MjModel.from_xml_path(model.path)
    for _, va in model.free_adr:
        assert np.all(model.dof_armature[va:va + 6] == 0), "test premise: no armature on free joints"
    return model, oracle_mjmodel(mj)


def states(model, seed: int, n: int = NSTATES):
    """``n`` random (q, v, a_or_tau) triples, q uniform over the configuration space."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield model.random_configuration(rng), rng.normal(size=model.nv), rng.normal(size=model.nv) * 3


def mj_data(model, m, q, v=None, qacc_or_applied=None, *, xfrc=None) -> "mujoco.MjData":
    """MjData at (q, v) after ``mj_forward`` with optional generalised force / body wrenches applied."""
    d = mujoco.MjData(m)
    d.qpos[:] = q
    if v is not None:
        d.qvel[:] = model.qvel_from_v(q, v)
    if qacc_or_applied is not None:
        d.qfrc_applied[:] = qacc_or_applied
    if xfrc is not None:
        d.xfrc_applied[:] = xfrc
    mujoco.mj_forward(m, d)
    return d


def T_matrix(model, q) -> np.ndarray:
    """``T`` (nv, nv) with ``qvel = T v`` (built column by column from the model's conversion)."""
    return np.stack([model.qvel_from_v(q, e) for e in np.eye(model.nv)], axis=1)


def rel_err(x, ref) -> float:
    x, ref = np.asarray(x), np.asarray(ref)
    return float(np.max(np.abs(x - ref), initial=0.0) / max(1.0, float(np.max(np.abs(ref), initial=0.0))))


def check(x, ref, what: str, tol: float = TOL) -> float:
    e = rel_err(x, ref)
    assert e < tol, f"{what}: relative error {e:.3e} > {tol:.0e}"
    return e


def moving_roots(model) -> list[int]:
    """MuJoCo bodies that move and whose parent is fixed to the world (roots of the moving subtrees)."""
    m = model.mj_model
    return [b for b in range(1, model.nbody)
            if model.body_link[b] >= 0 and model.body_link[m.body_parentid[b]] < 0]


def world_wrench_at_com(model, d, fext) -> np.ndarray:
    """MuJoCo ``xfrc_applied`` equivalent of our ``fext``.

    fext[b] is (force, torque) in body b's frame about the body origin; MuJoCo wants (force, torque)
    in world axes with the torque about the body's centre of mass ``xipos``."""
    xfrc = np.zeros((model.nbody, 6))
    for b in range(1, model.nbody):
        R = d.xmat[b].reshape(3, 3)
        F = R @ fext[b, :3]
        N_origin = R @ fext[b, 3:]
        # moving the reference point from the origin x to the com c: N_c = N_x + (x - c) × F
        xfrc[b, :3] = F
        xfrc[b, 3:] = N_origin + np.cross(d.xpos[b] - d.xipos[b], F)
    return xfrc


# ---------------------------------------------------------------- joint-space quantities
def test_mass_matrix_and_inverse(case):
    model, m = case
    for q, _, _ in states(model, 1):
        d = mj_data(model, m, q)
        Mmj = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, Mmj)
        T = T_matrix(model, q)
        Mref = T.T @ Mmj @ T
        check(BE.crba(model, q), Mref, "crba vs MuJoCo")
        check(BE.minv(model, q), np.linalg.inv(Mref), "minv vs inverse of MuJoCo M")


def test_bias_and_gravity(case):
    model, m = case
    for q, v, _ in states(model, 2):
        d = mj_data(model, m, q, v)
        T = T_matrix(model, q)
        Mmj = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, Mmj)
        # a = 0 is qacc = qacc_from_a(q, v, 0) ≠ 0 for free joints (the ω × v term): c = Tᵀ(M_mj qacc0 + bias)
        qacc0 = model.qacc_from_a(q, v, np.zeros(model.nv))
        check(BE.bias_forces(model, q, v), T.T @ (Mmj @ qacc0 + d.qfrc_bias), "bias_forces vs qfrc_bias")
        d0 = mj_data(model, m, q, np.zeros(model.nv))
        check(BE.gravity_torques(model, q), T.T @ d0.qfrc_bias, "gravity_torques vs qfrc_bias(v=0)")


def test_inverse_dynamics(case):
    model, m = case
    for q, v, a in states(model, 3):
        d = mj_data(model, m, q, v)
        d.qacc[:] = model.qacc_from_a(q, v, a)
        mujoco.mj_inverse(m, d)
        check(BE.rnea(model, q, v, a), model.tau_from_qfrc(q, d.qfrc_inverse), "rnea vs mj_inverse")


def test_forward_dynamics(case):
    model, m = case
    for q, v, tau in states(model, 4):
        d = mj_data(model, m, q, v, model.qfrc_from_tau(q, tau))
        a_ref = model.a_from_qacc(q, v, d.qacc)
        check(BE.aba(model, q, v, tau), a_ref, "aba vs MuJoCo qacc")
        check(BE.forward_dynamics(model, q, v, tau, method="minv"), a_ref, "forward_dynamics(minv) vs MuJoCo")


def test_external_forces(case):
    """fext (body frame, body origin) against MuJoCo xfrc_applied (world frame, at the com)."""
    model, m = case
    rng = np.random.default_rng(5)
    for q, v, tau in states(model, 5):
        fext = rng.normal(size=(model.nbody, 6)) * 5
        d = mj_data(model, m, q)  # kinematics only, for the conversion
        xfrc = world_wrench_at_com(model, d, fext)
        d = mj_data(model, m, q, v, model.qfrc_from_tau(q, tau), xfrc=xfrc)
        a_ref = model.a_from_qacc(q, v, d.qacc)
        # row 0 (the world) is documented as ignored
        check(BE.aba(model, q, v, tau, fext), a_ref, "aba(fext) vs MuJoCo xfrc_applied")
        check(BE.forward_dynamics(model, q, v, tau, fext, method="minv"), a_ref, "forward_dynamics(minv, fext)")
        check(BE.rnea(model, q, v, a_ref, fext), tau, "rnea(fext) at MuJoCo's acceleration")
        # and the world row really is ignored
        f2 = fext.copy()
        f2[0] = 1e3
        check(BE.aba(model, q, v, tau, f2), a_ref, "aba(fext) with a force on the world row")


# ---------------------------------------------------------------- kinematics
def test_body_and_site_placements(case):
    model, m = case
    for q, _, _ in states(model, 6):
        d = mj_data(model, m, q)
        R, p = BE.body_placements(model, q)
        check(p, d.xpos, "body positions vs xpos")
        check(R, d.xmat.reshape(-1, 3, 3), "body rotations vs xmat")
        R, p = BE.site_placements(model, q)
        check(p, d.site_xpos, "site positions vs site_xpos")
        check(R, d.site_xmat.reshape(-1, 3, 3), "site rotations vs site_xmat")
        for s, name in enumerate(model.site_names):
            R, p = BE.frame_placement(model, q, name)
            check(p, d.site_xpos[s], f"frame_placement({name})")
            check(R, d.site_xmat[s].reshape(3, 3), f"frame_placement({name}) rotation")


def test_frame_jacobians(case):
    """mj_jacSite / mj_jacBody (world axes, at the frame origin) → local_world_aligned and local."""
    model, m = case
    for q, _, _ in states(model, 7, n=2):
        d = mj_data(model, m, q)
        T = T_matrix(model, q)
        for name, typ, i in mj_frames(model):
            J_mj, R = mj_frame_jacobian(m, d, typ, i)
            J_lwa = J_mj @ T
            check(BE.frame_jacobian(model, q, name), J_lwa, f"frame_jacobian({name}, lwa)")
            J_loc = np.vstack([R.T @ J_lwa[:3], R.T @ J_lwa[3:]])
            check(BE.frame_jacobian(model, q, name, "local"), J_loc, f"frame_jacobian({name}, local)")


def test_frame_velocity_and_acceleration(case):
    """mj_objectVelocity / mj_objectAcceleration (rot, lin) at the frame origin.

    MuJoCo's accelerations include the base acceleration -g (gravity as fictitious acceleration),
    so its linear part is the classical acceleration minus g."""
    model, m = case
    for q, v, tau in states(model, 8, n=2):
        d = mj_data(model, m, q, v, model.qfrc_from_tau(q, tau))
        mujoco.mj_rnePostConstraint(m, d)  # fills cacc used by mj_objectAcceleration
        a = model.a_from_qacc(q, v, d.qacc)
        for name, typ, i in mj_frames(model):
            for local in (0, 1):
                ref = "local" if local else "local_world_aligned"
                vel, acc = np.zeros(6), np.zeros(6)
                mujoco.mj_objectVelocity(m, d, typ, i, vel, local)
                check(BE.frame_velocity(model, q, v, name, ref), np.r_[vel[3:], vel[:3]],
                      f"frame_velocity({name}, {ref})")
                if not local:
                    mujoco.mj_objectAcceleration(m, d, typ, i, acc, 0)
                    check(BE.frame_acceleration(model, q, v, a, name, ref),
                          np.r_[acc[3:] + model.gravity, acc[:3]], f"frame_acceleration({name}, {ref})")


def test_center_of_mass(case):
    """Moving links only (Pinocchio's convention): MuJoCo's subtree_com of the moving root, and the
    mass-weighted xipos of the moving bodies; Jacobian vs mj_jacSubtreeCom."""
    model, m = case
    moving = [b for b in range(1, model.nbody) if model.body_link[b] >= 0]
    roots = moving_roots(model)
    assert len(roots) == 1, "every test robot has a single moving subtree (iiwa's base is welded)"
    for q, _, _ in states(model, 9):
        d = mj_data(model, m, q)
        com = BE.center_of_mass(model, q)
        mass = m.body_mass[moving]
        check(com, mass @ d.xipos[moving] / mass.sum(), "center_of_mass vs moving xipos")
        check(com, d.subtree_com[roots[0]], "center_of_mass vs subtree_com of the moving root")
        jp = np.zeros((3, m.nv))
        mujoco.mj_jacSubtreeCom(m, d, jp, roots[0])
        check(BE.com_jacobian(model, q), jp @ T_matrix(model, q), "com_jacobian vs mj_jacSubtreeCom")
    assert np.isclose(model.total_mass, m.body_mass[moving].sum())


def test_tree_set_covers_everything():
    """Guard: the chosen random trees keep exercising every feature the module doc promises."""
    types, welded, multi, free, refs, anchors = set(), 0, 0, 0, 0, 0
    for seed, nb, fr in TREES.values():
        model, m = random_tree_model(seed, nb, free_root=fr, refs=True)
        types |= {JointType(t) for t in model.link_type}
        welded += sum(m.body_jntnum[b] == 0 for b in range(1, m.nbody))
        multi += sum(m.body_jntnum[b] > 1 for b in range(1, m.nbody))
        free += fr
        refs += np.count_nonzero(model.link_qpos0)
        anchors += np.count_nonzero(model.link_anchor)
    assert types == set(JointType) and welded and multi and free and refs and anchors
