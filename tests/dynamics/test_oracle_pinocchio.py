"""Oracle tests: the numpy backend against Pinocchio (issue 2).

Models: the three bundled robots through Pinocchio's MJCF reader, and random MJCF trees
(``random_trees.py``; hinge, slide, ball, free root, several joints per body, welded bodies, joint
anchors, armature, ``ref``) through a Pinocchio model built joint by joint from the raw
``mujoco.MjModel`` fields (``pinocchio_models.oracle_from_mujoco``), plus one random tree without
multi-joint bodies through the reader. Before any dynamics are compared, each oracle is itself
checked against MuJoCo: nq, nv, total mass, gravity, armature and the world placements of every
body and site (``mj_kinematics``).

Conventions reconciled in ``pinocchio_models.PinOracle``: quaternion order (ours (w, x, y, z), pin
(x, y, z, w)), joints matched by name and pin's idx_q / idx_v, hinge/slide ``ref`` offsets, and
external forces (ours per MuJoCo body in the body frame; pin per joint in the joint frame).
Velocity conventions are *not* remapped: our free-joint v (body-frame linear, angular) is fed to
pin's FreeFlyer as is, and our ball v (child-frame angular velocity) to pin's Spherical joint, so
every comparison with v ≠ 0 checks that the conventions really agree.

Tolerances: ``|ours - pin| <= 1e-9 * max(1, max|pin|)`` per quantity (all float64).
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import pytest

pin = pytest.importorskip("pinocchio", reason="Pinocchio is the oracle of these tests (pip install pin)")


import mujoco  # noqa: E402
from tests.helpers import pinocchio_models as pm_  # noqa: E402
from tests.helpers.random_trees import random_tree_mjcf  # noqa: E402

import dynamics  # noqa: E402

RTOL = 1e-9
N_STATES = 3
REFERENCES = {"local": pin.LOCAL, "world": pin.WORLD, "local_world_aligned": pin.LOCAL_WORLD_ALIGNED}

# Largest error seen per (case, quantity): (abs error, abs error / max(1, max|ref|)). Read by the
# report script; the assertions below do not depend on it.
ERRORS: dict[tuple[str, str], tuple[float, float]] = {}


def check(case: str, quantity: str, ours, ref, rtol: float = RTOL) -> None:
    """Assert ``|ours - ref| <= rtol * max(1, max|ref|)`` and record the error."""
    ours, ref = np.asarray(ours, dtype=float), np.asarray(ref, dtype=float)
    assert ours.shape == ref.shape, f"{case} {quantity}: shape {ours.shape} vs pin {ref.shape}"
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(ours - ref).max(initial=0.0))
    old = ERRORS.get((case, quantity), (0.0, 0.0))
    ERRORS[(case, quantity)] = (max(old[0], err), max(old[1], err / scale))
    assert err <= rtol * scale, (f"{case} {quantity}: max |ours - pin| = {err:.3e} > {rtol:.0e} * {scale:.3e}; "
                                 f"worst at index {np.unravel_index(np.argmax(np.abs(ours - ref)), ref.shape)}")


# ---------------------------------------------------------------- cases
@dataclass(frozen=True)
class TreeSpec:
    seed: int
    nbodies: int
    kwargs: tuple
    builder: str  # "programmatic" or "mjcf-reader"


TREES = {
    # all random-tree features on (ball, slide, multi-joint, welded, anchors, armature) plus ref
    "tree10": TreeSpec(10, 10, (("refs", True),), "programmatic"),
    "tree25": TreeSpec(14, 25, (("refs", True), ("branching", 0.8)), "programmatic"),
    "tree25_free": TreeSpec(11, 25, (("free_root", True), ("refs", True)), "programmatic"),
    "tree40": TreeSpec(15, 40, (("refs", True),), "programmatic"),
    "tree40_free": TreeSpec(12, 40, (("free_root", True), ("refs", True), ("branching", 0.7)), "programmatic"),
    # second, independent oracle: pin's own MJCF reader, on the features it maps like MuJoCo
    # (it turns multi-joint bodies into JointModelComposite and misplaces a rotated free root)
    "tree12_reader": TreeSpec(24, 12, (("multi_joint", False), ("refs", True)), "mjcf-reader"),
}
BUNDLED = ("iiwa", "hyq", "atlas")
CASES = (*BUNDLED, *TREES)


@dataclass
class Case:
    name: str
    model: dynamics.RobotModel
    mj: mujoco.MjModel
    oracle: pm_.PinOracle


@functools.cache
def get_case(name: str) -> Case:
    if name in BUNDLED:
        model = dynamics.load_model(name)
        mj = mujoco.MjModel.from_xml_path(model.path)  # compiled afresh: the oracle never sees our loader
        return Case(name, model, mj, pm_.oracle_from_mjcf(model.path, mj))
    spec = TREES[name]
    xml = random_tree_mjcf(np.random.default_rng(spec.seed), spec.nbodies, **dict(spec.kwargs))
    mj = mujoco.MjModel.from_xml_string(xml)
    model = dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml), name=name)
    if spec.builder == "programmatic":
        return Case(name, model, mj, pm_.oracle_from_mujoco(mj))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.xml")
        with open(path, "w") as f:
            f.write(xml)
        return Case(name, model, mj, pm_.oracle_from_mjcf(path, mj))


@dataclass
class States:
    q: np.ndarray     # (S, nq)
    v: np.ndarray     # (S, nv)
    a: np.ndarray
    tau: np.ndarray
    fext: np.ndarray  # (S, nbody, 6)


@functools.cache
def get_states(name: str) -> States:
    c = get_case(name)
    rng = np.random.default_rng(sum(map(ord, name)))  # fixed per case, independent of PYTHONHASHSEED
    S, nv = N_STATES, c.model.nv
    q = c.model.random_configuration(rng, size=S)
    fext = rng.normal(size=(S, c.model.nbody, 6)) * 5.0  # row 0 (world) non-zero on purpose: must be ignored
    return States(q, rng.normal(size=(S, nv)), rng.normal(size=(S, nv)), rng.normal(size=(S, nv)) * 10.0, fext)


def case_states_oracle(name: str) -> tuple[Case, States, pm_.PinOracle, pin.Model]:
    """The case, its states, its Pinocchio oracle and the oracle's ``pin.Model``."""
    c = get_case(name)
    return c, get_states(name), c.oracle, c.oracle.model


def pin_states(c: Case, s: States, u: np.ndarray):
    """Per state ``k``: ``(k, a fresh pin Data, q, v, u[k], fext)`` in Pinocchio's form (``u`` is
    ``s.a`` or ``s.tau``; fext as pin's per-joint forces)."""
    orc = c.oracle
    for k in range(N_STATES):
        yield (k, orc.model.createData(), orc.q_to_pin(s.q[k]), orc.v_to_pin(s.v[k]), orc.v_to_pin(u[k]),
               orc.fext_to_pin(s.fext[k]))


def _sym_upper(M: np.ndarray) -> np.ndarray:
    """Pinocchio fills only the upper triangle of M and M^-1: mirror it."""
    M = np.array(M)
    return np.triu(M) + np.triu(M, 1).T


def _frames(c: Case) -> list[str]:
    """Every site and body the oracle has a frame for (sites win over bodies of the same name)."""
    names = [n for n in c.model.site_names if n in c.oracle.frame_ids]
    names += [n for n in c.model.body_names[1:] if n not in c.model.site_names and n in c.oracle.frame_ids]
    return names


# ---------------------------------------------------------------- the oracle itself
@pytest.mark.parametrize("name", CASES)
def test_oracle_model_agrees_with_mujoco(name):
    """The oracle is the same mechanism as the MuJoCo model (independently of our loader)."""
    c = get_case(name)
    mj, pm, orc = c.mj, c.oracle.model, c.oracle
    assert (pm.nq, pm.nv) == (mj.nq, mj.nv) == (c.model.nq, c.model.nv)
    # moving mass: bodies whose chain to the world contains a joint (welded-to-world ones excluded)
    moving = [b for b in range(1, mj.nbody) if mj.body_weldid[b] != 0]
    mass = float(mj.body_mass[moving].sum())
    assert pin.computeTotalMass(pm) == pytest.approx(mass, rel=1e-12)
    assert c.model.total_mass == pytest.approx(mass, rel=1e-12)
    # bodies welded to the world (e.g. the iiwa's 5 kg base) sit on pin's universe joint, outside the dynamics
    welded = [b for b in range(1, mj.nbody) if mj.body_weldid[b] == 0]
    assert pm.inertias[0].mass == pytest.approx(float(mj.body_mass[welded].sum()), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(pm.gravity.linear, mj.opt.gravity, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pm.gravity.angular, 0.0)
    # armature: the MJCF reader copies `armature` into model.armature; the programmatic builder sets it
    np.testing.assert_allclose(orc.vec_from_pin(pm.armature), mj.dof_armature, rtol=0, atol=1e-15)
    if name in BUNDLED:
        assert all(s in orc.frame_ids for s in c.model.site_names), "pin reader dropped a site"
        if mj.nq > mj.nv:
            free = [j for j in range(1, pm.njoints) if pm.joints[j].shortname() == "JointModelFreeFlyer"]
            assert len(free) == 1, "the <freejoint> must become a pin FreeFlyer"
    # placements of every body and site against MuJoCo's forward kinematics
    rng = np.random.default_rng(0)
    d = mujoco.MjData(mj)
    pd = pm.createData()
    for q in c.model.random_configuration(rng, size=3):
        d.qpos[:] = q
        mujoco.mj_kinematics(mj, d)
        pin.framesForwardKinematics(pm, pd, orc.q_to_pin(q))
        for b in range(1, mj.nbody):
            jid, M = orc.body_frames[b]
            oMb = pd.oMi[jid] * M
            check(name, "oracle_vs_mujoco_body", oMb.translation, d.xpos[b], rtol=1e-12)
            check(name, "oracle_vs_mujoco_body", oMb.rotation, d.xmat[b].reshape(3, 3), rtol=1e-12)
        for s, nm in enumerate(c.model.site_names):
            if nm in orc.frame_ids:
                oMf = pd.oMf[orc.frame_ids[nm]]
                check(name, "oracle_vs_mujoco_site", oMf.translation, d.site_xpos[s], rtol=1e-12)
                check(name, "oracle_vs_mujoco_site", oMf.rotation, d.site_xmat[s].reshape(3, 3), rtol=1e-12)


def _features(mj: mujoco.MjModel) -> set[str]:
    found = set()
    children = np.bincount(mj.body_parentid[1:], minlength=mj.nbody)
    if (children[1:] >= 2).any():
        found.add("branching")
    for b in range(1, mj.nbody):
        if mj.body_jntnum[b] == 0:
            found.add("welded body")
        if mj.body_jntnum[b] >= 2:
            found.add("multi-joint body")
    for j in range(mj.njnt):
        t = int(mj.jnt_type[j])
        found.add({0: "free", 1: "ball", 2: "slide", 3: "hinge"}[t])
        if t in (1, 3) and np.abs(mj.jnt_pos[j]).max() > 0:
            found.add("anchor")
        if t in (2, 3) and mj.qpos0[mj.jnt_qposadr[j]] != 0:
            found.add("ref")
    if (mj.dof_armature > 0).any():
        found.add("armature")
    return found


def test_random_trees_cover_every_feature():
    """The programmatic-oracle trees together exercise every feature the loader must map, and the
    reader tree every feature but multi-joint bodies and a free root."""
    everything = {"branching", "welded body", "multi-joint body", "free", "ball", "slide", "hinge", "anchor", "ref",
                  "armature"}
    found = set().union(*(_features(get_case(n).mj) for n, sp in TREES.items() if sp.builder == "programmatic"))
    assert not everything - found, f"random trees do not exercise {everything - found}; change the seeds in TREES"
    reader = set().union(*(_features(get_case(n).mj) for n, sp in TREES.items() if sp.builder == "mjcf-reader"))
    assert reader == everything - {"multi-joint body", "free"}, f"reader tree features: {reader}"


# ---------------------------------------------------------------- dynamics
BE = dynamics.get_backend("numpy")


@pytest.mark.parametrize("name", CASES)
def test_rnea(name):
    c, s, orc, pm = case_states_oracle(name)
    ours = BE.rnea(c.model, s.q, s.v, s.a)
    ours_f = BE.rnea(c.model, s.q, s.v, s.a, fext=s.fext)
    bias, grav = BE.bias_forces(c.model, s.q, s.v), BE.gravity_torques(c.model, s.q)
    for k, d, qp, vp, ap, fp in pin_states(c, s, s.a):
        check(name, "rnea", ours[k], orc.vec_from_pin(pin.rnea(pm, d, qp, vp, ap)))
        check(name, "rnea_fext", ours_f[k], orc.vec_from_pin(pin.rnea(pm, d, qp, vp, ap, fp)))
        check(name, "bias_forces", bias[k], orc.vec_from_pin(pin.nonLinearEffects(pm, d, qp, vp)))
        check(name, "gravity_torques", grav[k], orc.vec_from_pin(pin.computeGeneralizedGravity(pm, d, qp)))
        # tau = M a + c with the armature inside M (pin's rnea and crba both include model.armature)
        M = orc.mat_from_pin(_sym_upper(pin.crba(pm, d, qp)))
        check(name, "rnea_minus_bias_is_Ma", ours[k] - bias[k], M @ s.a[k])


@pytest.mark.parametrize("name", CASES)
def test_configuration_functions(name):
    """The functions of q alone: M, M^-1, the centre of mass and its Jacobian."""
    c, s, orc, pm = case_states_oracle(name)
    M, Minv = BE.crba(c.model, s.q), BE.minv(c.model, s.q)
    com, Jc = BE.center_of_mass(c.model, s.q), BE.com_jacobian(c.model, s.q)
    for k in range(N_STATES):
        d, d_com = pm.createData(), pm.createData()
        qp = orc.q_to_pin(s.q[k])
        check(name, "crba", M[k], orc.mat_from_pin(_sym_upper(pin.crba(pm, d, qp))))
        check(name, "minv", Minv[k], orc.mat_from_pin(_sym_upper(pin.computeMinverse(pm, d, qp))))
        check(name, "center_of_mass", com[k], np.array(pin.centerOfMass(pm, d_com, qp)))
        check(name, "com_jacobian", Jc[k], orc.cols_from_pin(pin.jacobianCenterOfMass(pm, d_com, qp)))


@pytest.mark.parametrize("name", CASES)
def test_aba(name):
    c, s, orc, pm = case_states_oracle(name)
    ours = BE.aba(c.model, s.q, s.v, s.tau)
    ours_f = BE.aba(c.model, s.q, s.v, s.tau, fext=s.fext)
    ours_minv = BE.forward_dynamics(c.model, s.q, s.v, s.tau, fext=s.fext, method="minv")
    for k, d, qp, vp, tp, fp in pin_states(c, s, s.tau):
        check(name, "aba", ours[k], orc.vec_from_pin(pin.aba(pm, d, qp, vp, tp)))
        ref_f = orc.vec_from_pin(pin.aba(pm, d, qp, vp, tp, fp))
        check(name, "aba_fext", ours_f[k], ref_f)
        check(name, "forward_dynamics_minv", ours_minv[k], ref_f)


@pytest.mark.parametrize("name", CASES)
def test_rnea_derivatives(name):
    c, s, orc, pm = case_states_oracle(name)
    dq, dv = BE.rnea_derivatives(c.model, s.q, s.v, s.a, fext=s.fext)
    dq0, dv0 = BE.rnea_derivatives(c.model, s.q, s.v, s.a)
    for k, d, qp, vp, ap, fp in pin_states(c, s, s.a):
        rq, rv, _ = (np.array(x) for x in pin.computeRNEADerivatives(pm, d, qp, vp, ap, fp))
        check(name, "rnea_dtau_dq", dq[k], orc.mat_from_pin(rq))
        check(name, "rnea_dtau_dv", dv[k], orc.mat_from_pin(rv))
        d = pm.createData()
        rq, rv, _ = (np.array(x) for x in pin.computeRNEADerivatives(pm, d, qp, vp, ap))
        check(name, "rnea_dtau_dq", dq0[k], orc.mat_from_pin(rq))
        check(name, "rnea_dtau_dv", dv0[k], orc.mat_from_pin(rv))


@pytest.mark.parametrize("name", CASES)
def test_aba_derivatives(name):
    c, s, orc, pm = case_states_oracle(name)
    dq, dv, dtau = BE.aba_derivatives(c.model, s.q, s.v, s.tau, fext=s.fext)
    # the optional precomputed M^-1 must give the same result
    dq2, dv2, dtau2 = BE.aba_derivatives(c.model, s.q, s.v, s.tau, fext=s.fext, minv=BE.minv(c.model, s.q))
    for k, d, qp, vp, tp, fp in pin_states(c, s, s.tau):
        rq, rv, rt = (np.array(x) for x in pin.computeABADerivatives(pm, d, qp, vp, tp, fp))
        rq, rv, rt = orc.mat_from_pin(rq), orc.mat_from_pin(rv), orc.mat_from_pin(_sym_upper(rt))
        check(name, "aba_da_dq", dq[k], rq)
        check(name, "aba_da_dv", dv[k], rv)
        check(name, "aba_da_dtau", dtau[k], rt)
        check(name, "aba_da_dq", dq2[k], rq)
        check(name, "aba_da_dv", dv2[k], rv)
        check(name, "aba_da_dtau", dtau2[k], rt)


# ---------------------------------------------------------------- kinematics
@pytest.mark.parametrize("name", CASES)
def test_placements_and_jacobians(name):
    c, s, orc, pm = case_states_oracle(name)
    frames = _frames(c)
    assert frames, "no frame to compare"
    datas = []
    for k in range(N_STATES):
        d = pm.createData()
        qp, vp = orc.q_to_pin(s.q[k]), orc.v_to_pin(s.v[k])
        pin.computeJointJacobians(pm, d, qp)
        pin.computeJointJacobiansTimeVariation(pm, d, qp, vp)
        pin.forwardKinematics(pm, d, qp, vp, orc.v_to_pin(s.a[k]))
        pin.updateFramePlacements(pm, d)
        datas.append(d)
    R_s, p_s = BE.site_placements(c.model, s.q)
    for k, d in enumerate(datas):
        for i, nm in enumerate(c.model.site_names):
            if nm in orc.frame_ids:
                check(name, "site_placements", R_s[k, i], d.oMf[orc.frame_ids[nm]].rotation)
                check(name, "site_placements", p_s[k, i], d.oMf[orc.frame_ids[nm]].translation)
    R_b, p_b = BE.body_placements(c.model, s.q)
    for k, d in enumerate(datas):
        for b in range(1, c.mj.nbody):
            jid, M = orc.body_frames[b]
            oMb = d.oMi[jid] * M
            check(name, "body_placements", R_b[k, b], oMb.rotation)
            check(name, "body_placements", p_b[k, b], oMb.translation)
    for f in frames:
        fid = orc.frame_id(f)
        R, p = BE.frame_placement(c.model, s.q, f)
        for k, d in enumerate(datas):
            check(name, "frame_placement", R[k], d.oMf[fid].rotation)
            check(name, "frame_placement", p[k], d.oMf[fid].translation)
        for ref, pref in REFERENCES.items():
            J = BE.frame_jacobian(c.model, s.q, f, ref)
            J2, dJ = BE.frame_jacobian_time_variation(c.model, s.q, s.v, f, ref)
            acc = BE.frame_acceleration(c.model, s.q, s.v, s.a, f, ref)
            vel = BE.frame_velocity(c.model, s.q, s.v, f, ref)
            for k, d in enumerate(datas):
                Jp = orc.cols_from_pin(pin.getFrameJacobian(pm, d, fid, pref))
                check(name, f"frame_jacobian_{ref}", J[k], Jp)
                check(name, f"frame_velocity_{ref}", vel[k], pin.getFrameVelocity(pm, d, fid, pref).vector)
                check(name, f"frame_jacobian_{ref}", J2[k], Jp)
                dJp = pin.getFrameJacobianTimeVariation(pm, d, fid, pref)
                check(name, f"frame_dJdt_{ref}", dJ[k], orc.cols_from_pin(dJp))
                spatial = pin.getFrameAcceleration(pm, d, fid, pref)
                if ref == "local_world_aligned":
                    # linear part: classical acceleration of the frame origin; angular: dω/dt in world axes
                    classical = pin.getFrameClassicalAcceleration(pm, d, fid, pref)
                    check(name, f"frame_acceleration_{ref}", acc[k], np.r_[classical.linear, spatial.angular])
                else:
                    # local: pin's spatial acceleration; world: the same vector in world coordinates
                    check(name, f"frame_acceleration_{ref}", acc[k], spatial.vector)


# ---------------------------------------------------------------- configuration space
def _align_quaternions(c: Case, q_ours: np.ndarray, q_ref: np.ndarray) -> np.ndarray:
    """``q_ref`` with each quaternion's sign chosen to match ``q_ours`` (q and -q are one rotation)."""
    q_ref = q_ref.copy()
    for j in range(c.mj.njnt):
        t, qa = int(c.mj.jnt_type[j]), int(c.mj.jnt_qposadr[j])
        sl = {0: slice(qa + 3, qa + 7), 1: slice(qa, qa + 4)}.get(t)
        if sl is not None and np.dot(q_ours[sl], q_ref[sl]) < 0:
            q_ref[sl] *= -1
    return q_ref


@pytest.mark.parametrize("name", CASES)
def test_configuration_space(name):
    """integrate / difference and their Jacobians, far apart and near the identity.

    Step sizes keep every rotation out of 1e-4 < |θ| < ~0.03, where Pinocchio 4.1 is not a 1e-9
    oracle: against a 60-digit reference its Jlog3 (in dDifference) errs by ≈ 1e-16/θ² (2e-9 at
    θ = 2e-4) and its Jexp6 (dIntegrate of a free joint) by up to 6e-6 at θ = 3e-4 and 6e-11 at
    θ = 1e-2. The 1e-5 steps exercise both sides' small-angle (Taylor) branches."""
    c, s, orc, pm = case_states_oracle(name)
    rng = np.random.default_rng(7)
    q0 = s.q
    for scale in (1.0, 0.1, 1e-5):
        v = scale * s.v
        q_int = c.model.integrate(q0, v)
        Jq, Jv = c.model.integrate_jacobians(q0, v)
        for k in range(N_STATES):
            qp, vp = orc.q_to_pin(q0[k]), orc.v_to_pin(v[k])
            ref = orc.q_from_pin(pin.integrate(pm, qp, vp))
            check(name, "integrate", q_int[k], _align_quaternions(c, q_int[k], ref))
            check(name, "dIntegrate_dq", Jq[k], orc.mat_from_pin(pin.dIntegrate(pm, qp, vp, pin.ARG0)))
            check(name, "dIntegrate_dv", Jv[k], orc.mat_from_pin(pin.dIntegrate(pm, qp, vp, pin.ARG1)))
    q_far = c.model.random_configuration(rng, size=N_STATES)
    q_near = [orc.q_from_pin(pin.integrate(pm, orc.q_to_pin(q0[k]), orc.v_to_pin(sc * rng.normal(size=c.model.nv))))
              for sc in (0.1, 1e-5) for k in range(N_STATES)]  # built by pin, not by our integrate
    for q1 in (q_far, np.array(q_near[:N_STATES]), np.array(q_near[N_STATES:])):
        dlt = c.model.difference(q0, q1)
        J0, J1 = c.model.difference_jacobians(q0, q1)
        for k in range(N_STATES):
            a, b = orc.q_to_pin(q0[k]), orc.q_to_pin(q1[k])
            check(name, "difference", dlt[k], orc.vec_from_pin(pin.difference(pm, a, b)))
            check(name, "dDifference_dq0", J0[k], orc.mat_from_pin(pin.dDifference(pm, a, b, pin.ARG0)))
            check(name, "dDifference_dq1", J1[k], orc.mat_from_pin(pin.dDifference(pm, a, b, pin.ARG1)))


# ---------------------------------------------------------------- batching
@pytest.mark.parametrize("name", ["hyq", "tree25_free"])
def test_batched_leading_dims(name):
    """Leading batch dims (2, 3) against a loop of Pinocchio calls."""
    c = get_case(name)
    orc, pm, model = c.oracle, c.oracle.model, c.model
    rng = np.random.default_rng(3)
    shape = (2, 3)
    q = model.random_configuration(rng, size=shape)
    v, a, tau = (rng.normal(size=shape + (model.nv,)) for _ in range(3))
    fext = rng.normal(size=shape + (model.nbody, 6))
    frame = model.site_names[-1]
    out = {
        "rnea": BE.rnea(model, q, v, a, fext=fext),
        "aba": BE.aba(model, q, v, tau, fext=fext),
        "crba": BE.crba(model, q),
        "aba_da_dq": BE.aba_derivatives(model, q, v, tau, fext=fext)[0],
        "rnea_dtau_dv": BE.rnea_derivatives(model, q, v, a, fext=fext)[1],
        "frame_jacobian_world": BE.frame_jacobian(model, q, frame, "world"),
        "integrate": model.integrate(q, v),
    }
    for key, val in out.items():
        assert val.shape[:2] == shape, f"{key}: batch dims {val.shape[:2]} != {shape}"
    for i in range(shape[0]):
        for j in range(shape[1]):
            d = pm.createData()
            qp = orc.q_to_pin(q[i, j])
            vp, ap, tp = orc.v_to_pin(v[i, j]), orc.v_to_pin(a[i, j]), orc.v_to_pin(tau[i, j])
            fp = orc.fext_to_pin(fext[i, j])
            check(name, "batched_rnea", out["rnea"][i, j], orc.vec_from_pin(pin.rnea(pm, d, qp, vp, ap, fp)))
            check(name, "batched_aba", out["aba"][i, j], orc.vec_from_pin(pin.aba(pm, d, qp, vp, tp, fp)))
            check(name, "batched_crba", out["crba"][i, j], orc.mat_from_pin(_sym_upper(pin.crba(pm, d, qp))))
            rq = np.array(pin.computeABADerivatives(pm, d, qp, vp, tp, fp)[0])
            check(name, "batched_aba_da_dq", out["aba_da_dq"][i, j], orc.mat_from_pin(rq))
            rv = np.array(pin.computeRNEADerivatives(pm, d, qp, vp, ap, fp)[1])
            check(name, "batched_rnea_dtau_dv", out["rnea_dtau_dv"][i, j], orc.mat_from_pin(rv))
            pin.computeJointJacobians(pm, d, qp)
            pin.updateFramePlacements(pm, d)
            Jp = pin.getFrameJacobian(pm, d, orc.frame_id(frame), pin.WORLD)
            check(name, "batched_frame_jacobian", out["frame_jacobian_world"][i, j], orc.cols_from_pin(Jp))
            ref = orc.q_from_pin(pin.integrate(pm, qp, vp))
            check(name, "batched_integrate", out["integrate"][i, j], _align_quaternions(c, out["integrate"][i, j], ref))
