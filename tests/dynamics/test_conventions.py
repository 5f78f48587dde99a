"""docs/conventions.md, enforced: configuration layout, tangent perturbations, MuJoCo conversions,
spatial-vector order, derivative index order, neutral configuration, keyframes, centre of mass.

Oracles: MuJoCo (qpos layout, mj_integratePos, kinematics), Pinocchio (integrate, dIntegrate,
dDifference — the conventions name Pinocchio's as the reference), an explicit SE(3)/SO(3)
exponential written here with ``scipy.linalg.expm``, and central finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import expm

import dynamics
from dynamics.joints import JointType, joint_placements
from tests.helpers.robot_cases import ROBOT_CASES, robot_case

mujoco = pytest.importorskip("mujoco")

BE = dynamics.get_backend("numpy")

# free root -> ball -> hinge (ref 0.3) -> slide (ref -0.1): one joint of each type, in this order
CHAIN_XML = """
<mujoco>
  <worldbody>
    <body name="base" pos="0.1 0.2 0.3">
      <freejoint name="root"/>
      <inertial pos="0.01 0.02 0.03" mass="2" diaginertia="0.1 0.2 0.15"/>
      <body name="b1" pos="0.3 0 0">
        <joint name="ball" type="ball" pos="0.02 0 0"/>
        <inertial pos="0.1 0 0" mass="1" diaginertia="0.01 0.02 0.03"/>
        <body name="b2" pos="0.2 0.1 0" quat="0.9 0.1 0.2 0.3">
          <joint name="hinge" type="hinge" axis="0 0 1" ref="0.3"/>
          <inertial pos="0 0.1 0" mass="0.5" diaginertia="0.01 0.01 0.01"/>
          <body name="b3" pos="0 0.2 0">
            <joint name="slide" type="slide" axis="1 0 0" ref="-0.1"/>
            <inertial pos="0 0 0" mass="0.3" diaginertia="0.001 0.001 0.001"/>
            <site name="tip" pos="0 0.05 0"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture(scope="module")
def chain():
    m = mujoco.MjModel.from_xml_string(CHAIN_XML)
    return dynamics.from_mujoco(m, name="chain"), m


@pytest.fixture(scope="module", params=ROBOT_CASES)
def model(request, bundled):
    return robot_case(request.param, bundled)


def same_configuration(model, q1, q2, tol=1e-12) -> bool:
    """Equality of configurations with each quaternion compared up to sign (q and -q are one rotation)."""
    q1, q2 = np.array(q1, float), np.array(q2, float)
    quats = [qa for qa, _ in model.ball_adr] + [qa + 3 for qa, _ in model.free_adr]
    for qa in quats:
        s = np.sign(np.sum(q1[..., qa:qa + 4] * q2[..., qa:qa + 4], axis=-1, keepdims=True))
        q2[..., qa:qa + 4] *= s
    return bool(np.max(np.abs(q1 - q2)) < tol)


def skew(w):
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


def se3_exp_expm(xi):
    """exp of the twist ξ = (linear ρ, angular ω) through the 4×4 matrix exponential."""
    X = np.zeros((4, 4))
    X[:3, :3] = skew(xi[3:])
    X[:3, 3] = xi[:3]
    G = expm(X)
    return G[:3, :3], G[:3, 3]


def quat_to_R(q):
    """Rotation of a unit (w, x, y, z) quaternion, via MuJoCo (independent of dynamics.lie)."""
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, float))
    return out.reshape(3, 3)


# ---------------------------------------------------------------- configuration layout
def test_q_is_mujoco_qpos(model):
    m = model.mj_model
    assert (model.nq, model.nv) == (m.nq, m.nv)
    np.testing.assert_array_equal(model.link_qadr, m.jnt_qposadr)
    np.testing.assert_array_equal(model.link_dofadr, m.jnt_dofadr)
    np.testing.assert_array_equal(model.link_type, m.jnt_type)
    assert model.joint_names == tuple(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or ""
                                      for j in range(m.njnt))


def test_quaternion_and_free_position_layout(chain):
    """qpos[0:3] is the free body's world position, qpos[3:7] its (w, x, y, z) quaternion, and the
    ball quaternion is also (w, x, y, z): checked against rotations built by hand."""
    model, m = chain
    q = model.neutral()
    c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)   # 90° about z
    q[0:3] = [1.0, -2.0, 0.5]
    q[3:7] = [c, 0, 0, s]
    q[7:11] = [c, s, 0, 0]                         # ball: 90° about x
    R, p = BE.body_placements(model, q)
    Rz = np.array([[0, -1, 0], [1, 0, 0], [0, 0, 1.0]])
    Rx = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0.0]])
    np.testing.assert_allclose(p[1], [1.0, -2.0, 0.5], atol=1e-15)
    np.testing.assert_allclose(R[1], Rz, atol=1e-15)
    np.testing.assert_allclose(R[2], Rz @ Rx, atol=1e-15)
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    np.testing.assert_allclose(p, d.xpos, atol=1e-14)
    np.testing.assert_allclose(R, d.xmat.reshape(-1, 3, 3), atol=1e-14)


def test_neutral_is_identity_joint_transforms(model, request):
    R, p = joint_placements(model, model.neutral()[None])
    np.testing.assert_allclose(R[0], model.link_R0, atol=1e-15)
    np.testing.assert_allclose(p[0], model.link_p0, atol=1e-15)


def test_neutral_matches_mujoco_qpos0(model, request):
    """Hinge/slide/ball coordinates of neutral() are MuJoCo's qpos0 (refs included), so body
    placements agree with MuJoCo at qpos0; a free joint's neutral is the world origin/identity."""
    m = model.mj_model
    q = model.neutral()
    q_mj = m.qpos0.copy()
    for qa, _ in model.free_adr:
        np.testing.assert_array_equal(q[qa:qa + 7], [0, 0, 0, 1, 0, 0, 0])
        q_mj[qa:qa + 7] = q[qa:qa + 7]  # MuJoCo's qpos0 puts the free body at its MJCF pose
    np.testing.assert_allclose(q, q_mj, atol=0)
    d = mujoco.MjData(m)
    d.qpos[:] = q_mj
    mujoco.mj_kinematics(m, d)
    R, p = BE.body_placements(model, q)
    np.testing.assert_allclose(p, d.xpos, atol=1e-14)
    np.testing.assert_allclose(R, d.xmat.reshape(-1, 3, 3), atol=1e-14)


def test_neutral_with_refs_hinge_only():
    """Refs on hinges only (no slide): neutral() is MuJoCo's qpos0."""
    xml = """<mujoco><worldbody><body><joint name="h1" ref="20"/><geom size=".1"/>
             <body pos="0 0.3 0"><joint name="h2" axis="1 0 0" ref="-35"/><geom size=".1"/></body>
             </body></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    np.testing.assert_allclose(dynamics.from_mujoco(m).neutral(), m.qpos0, atol=0)
    np.testing.assert_allclose(m.qpos0, np.deg2rad([20, -35]), atol=1e-15)


def test_neutral_slide_then_hinge_minimal():
    """Regression: slide (ref 0.2) then hinge (ref 0.5 rad) — neutral() once put the refs in the wrong slots."""
    xml = """<mujoco><compiler angle="radian"/><worldbody><body><joint type="slide" ref="0.2"/><geom size=".1"/>
             <body><joint type="hinge" ref="0.5"/><geom size=".1"/></body></body></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    np.testing.assert_array_equal(dynamics.from_mujoco(m).neutral(), m.qpos0)  # gives [0.5, 0.2]


@pytest.mark.parametrize("name,key", [("iiwa", "home"), ("hyq", "standing"), ("atlas", "standing")])
def test_keyframes(bundled, name, key):
    model = bundled[name]
    q = model.keyframe(key)
    m = model.mj_model
    kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, key)
    np.testing.assert_array_equal(q, m.key_qpos[kid])
    assert q.shape == (model.nq,) and np.all(np.isfinite(q))
    q[0] += 1.0  # a copy: the model's keyframe is unchanged
    np.testing.assert_array_equal(model.keyframe(key), m.key_qpos[kid])


def test_gravity_from_option():
    xml = '<mujoco><option gravity="0 1 -3"/><worldbody><body><joint/><geom size=".1"/></body></worldbody></mujoco>'
    np.testing.assert_array_equal(dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml)).gravity, [0, 1, -3])
    xml_off = xml.replace('<option gravity="0 1 -3"/>', '<option><flag gravity="disable"/></option>')
    np.testing.assert_array_equal(dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml_off)).gravity, [0, 0, 0])


# ---------------------------------------------------------------- tangent space
def test_integrate_difference_round_trip(model):
    rng = np.random.default_rng(1)
    q0 = model.random_configuration(rng, size=4)
    q1 = model.random_configuration(rng, size=4)
    d = model.difference(q0, q1)
    assert d.shape == (4, model.nv)
    assert same_configuration(model, model.integrate(q0, d), q1, 1e-10)
    np.testing.assert_allclose(model.difference(q0, q0), 0.0, atol=1e-12)
    # rotation angles of difference lie in [0, π]
    for _, va in model.ball_adr + tuple((qa, va + 3) for qa, va in model.free_adr):
        assert np.all(np.linalg.norm(d[:, va:va + 3], axis=-1) <= np.pi + 1e-12)
    # difference ignores the quaternion sign
    q1n = q1.copy()
    for qa in [qa for qa, _ in model.ball_adr] + [qa + 3 for qa, _ in model.free_adr]:
        q1n[:, qa:qa + 4] *= -1
    np.testing.assert_allclose(model.difference(q0, q1n), d, atol=1e-12)
    v = 0.5 * rng.normal(size=(4, model.nv))
    np.testing.assert_allclose(model.difference(q0, model.integrate(q0, v)), v, atol=1e-10)


def test_free_and_ball_integrate_are_right_perturbations(chain):
    """free: M · exp_SE3(δ) with δ = (linear, angular); ball: R · exp(δ); hinge/slide: q + δ."""
    model, _ = chain
    rng = np.random.default_rng(2)
    for _ in range(5):
        q = model.random_configuration(rng)
        dlt = rng.normal(size=model.nv)
        q1 = model.integrate(q, dlt)
        R0, p0 = quat_to_R(q[3:7]), q[0:3]
        dR, dp = se3_exp_expm(dlt[0:6])
        np.testing.assert_allclose(quat_to_R(q1[3:7]), R0 @ dR, atol=1e-12)
        np.testing.assert_allclose(q1[0:3], p0 + R0 @ dp, atol=1e-12)
        np.testing.assert_allclose(quat_to_R(q1[7:11]), quat_to_R(q[7:11]) @ expm(skew(dlt[6:9])), atol=1e-12)
        np.testing.assert_allclose(q1[11:], q[11:] + dlt[9:], atol=1e-15)
        assert np.allclose(np.linalg.norm(q1[3:7]), 1) and np.allclose(np.linalg.norm(q1[7:11]), 1)


# ---- Pinocchio: integrate, dIntegrate and dDifference (the conventions cite Pinocchio's)
@pytest.fixture(scope="module")
def pin():
    """The ``pinocchio`` module; only the tests that request it skip when it is not installed (the
    rest of this file needs MuJoCo only)."""
    return pytest.importorskip("pinocchio", reason="Pinocchio is the oracle of this test (pip install pin)")


def pin_chain(pin):
    """The CHAIN_XML joint sequence in Pinocchio (joint placements do not matter for these maps)."""
    pm = pin.Model()
    j = pm.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "root")
    j = pm.addJoint(j, pin.JointModelSpherical(), pin.SE3.Identity(), "ball")
    j = pm.addJoint(j, pin.JointModelRZ(), pin.SE3.Identity(), "hinge")
    pm.addJoint(j, pin.JointModelPX(), pin.SE3.Identity(), "slide")
    return pm


def to_pin(q):
    """(w, x, y, z) → (x, y, z, w) for the two quaternions of the chain."""
    q = np.asarray(q, float)
    return np.r_[q[0:3], q[4:7], q[3], q[8:11], q[7], q[11:]]


def from_pin(q):
    """Inverse of :func:`to_pin`."""
    q = np.asarray(q, float)
    return np.r_[q[0:3], q[6], q[3:6], q[10], q[7:10], q[11:]]


def test_integrate_and_jacobians_match_pinocchio(chain, pin):
    """integrate / difference and their Jacobians equal Pinocchio's on a free-ball-hinge-slide chain
    (quaternions reordered, tangent vectors passed unchanged)."""
    model, _ = chain
    pm = pin_chain(pin)
    rng = np.random.default_rng(3)
    A0, A1 = pin.ArgumentPosition.ARG0, pin.ArgumentPosition.ARG1
    for _ in range(5):
        q = model.random_configuration(rng)
        v = 0.7 * rng.normal(size=model.nv)
        qp = to_pin(q)
        q1 = model.integrate(q, v)
        assert same_configuration(model, q1, from_pin(pin.integrate(pm, qp, v))), "integrate vs pin.integrate"
        np.testing.assert_allclose(model.difference(q, q1), pin.difference(pm, qp, to_pin(q1)), atol=1e-10)
        Jq, Jv = model.integrate_jacobians(q, v)
        np.testing.assert_allclose(Jq, pin.dIntegrate(pm, qp, v, A0), atol=1e-12)
        np.testing.assert_allclose(Jv, pin.dIntegrate(pm, qp, v, A1), atol=1e-12)
        q2 = model.random_configuration(rng)
        J0, J1 = model.difference_jacobians(q, q2)
        np.testing.assert_allclose(J0, pin.dDifference(pm, qp, to_pin(q2), A0), atol=1e-9)
        np.testing.assert_allclose(J1, pin.dDifference(pm, qp, to_pin(q2), A1), atol=1e-9)


# ---------------------------------------------------------------- MuJoCo velocity conversions
def test_velocity_conversions_round_trip(model):
    rng = np.random.default_rng(4)
    q = model.random_configuration(rng, size=3)
    v, a, f = (rng.normal(size=(3, model.nv)) for _ in range(3))
    np.testing.assert_allclose(model.v_from_qvel(q, model.qvel_from_v(q, v)), v, atol=1e-13)
    np.testing.assert_allclose(model.a_from_qacc(q, v, model.qacc_from_a(q, v, a)), a, atol=1e-13)
    np.testing.assert_allclose(model.tau_from_qfrc(q, model.qfrc_from_tau(q, f)), f, atol=1e-13)
    # generalised forces are dual to velocities: power is the same in both coordinate systems
    qvel = model.qvel_from_v(q, v)
    np.testing.assert_allclose(np.sum(model.tau_from_qfrc(q, f) * v, -1), np.sum(f * qvel, -1), rtol=1e-12)
    if not model.free_adr:  # without free joints every conversion is the identity
        np.testing.assert_array_equal(model.qvel_from_v(q, v), v)
        np.testing.assert_array_equal(model.qacc_from_a(q, v, a), a)


def mj_step_pos(m, q, qvel, h):
    out = np.array(q, float, copy=True)
    mujoco.mj_integratePos(m, out, np.asarray(qvel, float), h)
    return out


def test_v_from_qvel_is_mujocos_motion(model):
    """MuJoCo moves qpos with qvel (mj_integratePos); measured in our tangent coordinates that
    motion is v_from_qvel(q, qvel) (central difference, O(h²))."""
    m = model.mj_model
    rng = np.random.default_rng(5)
    h = 1e-6
    for _ in range(3):
        q = model.random_configuration(rng)
        qvel = rng.normal(size=model.nv)
        qp, qm = mj_step_pos(m, q, qvel, h), mj_step_pos(m, q, qvel, -h)
        rate = (model.difference(q, qp) - model.difference(q, qm)) / (2 * h)
        np.testing.assert_allclose(rate, model.v_from_qvel(q, qvel), atol=1e-7)
        # and the opposite direction: our integrate along v is MuJoCo's qvel_from_v
        q_ours = model.integrate(q, h * model.v_from_qvel(q, qvel))
        q_mj = mj_step_pos(m, q, qvel, h)
        assert same_configuration(model, q_ours, q_mj, tol=1e-10)


def test_a_from_qacc_is_time_derivative_of_v(model):
    """a = dv/dt along MuJoCo's motion q(t), qvel(t) = qvel + t qacc (the ω × v term of free joints)."""
    m = model.mj_model
    rng = np.random.default_rng(6)
    h = 1e-5
    for _ in range(3):
        q = model.random_configuration(rng)
        qvel, qacc = rng.normal(size=model.nv), rng.normal(size=model.nv)
        # q(t) = q + t qvel + O(t²); the O(t²) term is even in t and cancels in the central difference
        vp = model.v_from_qvel(mj_step_pos(m, q, qvel, h), qvel + h * qacc)
        vm = model.v_from_qvel(mj_step_pos(m, q, qvel, -h), qvel - h * qacc)
        v = model.v_from_qvel(q, qvel)
        np.testing.assert_allclose(model.a_from_qacc(q, v, qacc), (vp - vm) / (2 * h), atol=1e-7)


# ---------------------------------------------------------------- spatial-vector order and indices
def test_spatial_vectors_are_linear_then_angular(chain):
    """A pure slide gives (ẋ, 0); a pure hinge about z through the frame gives (·, ω e_z) — and a
    pure force along +z on a body (force, torque) order balances gravity exactly."""
    model, _ = chain
    q = model.neutral()
    v = np.zeros(model.nv)
    v[-1] = 2.0  # slide along the b3 body x axis
    vel = BE.frame_velocity(model, q, v, "b3", "local")
    np.testing.assert_allclose(vel, [2, 0, 0, 0, 0, 0], atol=1e-15)
    v[:] = 0
    v[-2] = 1.5  # hinge about b2's z axis through b2's origin
    vel = BE.frame_velocity(model, q, v, "b2", "local")
    np.testing.assert_allclose(vel, [0, 0, 0, 0, 0, 1.5], atol=1e-15)
    # weight of the whole chain carried by a world-frame upward force at the root's body origin ...
    fext = np.zeros((model.nbody, 6))
    R, p = BE.body_placements(model, q)
    for b in range(1, model.nbody):
        fext[b, :3] = R[b].T @ (-model.mj_model.body_mass[b] * model.gravity)  # weight, body axes
        # ... at the body's centre of mass: torque about the origin = c × f in body axes
        fext[b, 3:] = np.cross(model.mj_model.body_ipos[b], fext[b, :3])
    a = BE.aba(model, q, np.zeros(model.nv), np.zeros(model.nv), fext)
    np.testing.assert_allclose(a, 0, atol=1e-12)


def test_derivative_rows_are_outputs(bundled):
    """``D[..., i, j] = ∂out_i/∂var_j`` on matrices that are not symmetric, so a transpose fails."""
    model = bundled["iiwa"]
    rng = np.random.default_rng(7)
    q, v, a = model.random_configuration(rng), rng.normal(size=7), rng.normal(size=7)
    dq, dv = BE.rnea_derivatives(model, q, v, a)
    assert np.max(np.abs(dv - dv.T)) > 1e-2 and np.max(np.abs(dq - dq.T)) > 1e-2
    h, j = 1e-6, 2
    e = np.eye(7)[j]
    col_v = (BE.rnea(model, q, v + h * e, a) - BE.rnea(model, q, v - h * e, a)) / (2 * h)
    qp, qm = model.integrate(q, h * e), model.integrate(q, -h * e)
    col_q = (BE.rnea(model, qp, v, a) - BE.rnea(model, qm, v, a)) / (2 * h)
    np.testing.assert_allclose(dv[:, j], col_v, atol=1e-6)
    np.testing.assert_allclose(dq[:, j], col_q, atol=1e-6)
    # Jacobians: (6, nv) and (3, nv), column j = response to v_j
    J = BE.frame_jacobian(model, q, "ee")
    assert J.shape == (6, 7) and BE.com_jacobian(model, q).shape == (3, 7)
    np.testing.assert_allclose(J[:, j], BE.frame_velocity(model, q, e, "ee"), atol=1e-15)


def test_center_of_mass_excludes_world_welded_bodies(bundled):
    """iiwa's 5 kg base is welded to the world: counted by MuJoCo's subtree_com[0], not by us."""
    model = bundled["iiwa"]
    m = model.mj_model
    base = model.body_id("base")
    assert model.body_link[base] == -1 and m.body_mass[base] > 0
    np.testing.assert_allclose(model.total_mass, m.body_mass.sum() - m.body_mass[base], rtol=1e-14)
    d = mujoco.MjData(m)
    d.qpos[:] = model.keyframe("home")
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    com = BE.center_of_mass(model, d.qpos)
    np.testing.assert_allclose(com, d.subtree_com[model.body_id("link1")], atol=1e-14)
    assert np.linalg.norm(com - d.subtree_com[0]) > 1e-3


def test_site_wins_name_clash():
    xml = """<mujoco><worldbody><body name="foo" pos="0 0 1"><joint axis="0 1 0"/><geom size=".1"/>
             <site name="foo" pos="0.5 0 0"/></body></worldbody></mujoco>"""
    model = dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml))
    _, p = BE.frame_placement(model, np.zeros(1), "foo")
    np.testing.assert_allclose(p, [0.5, 0, 1], atol=1e-15)


def test_joint_types_numbered_as_mujoco():
    assert [int(JointType.FREE), int(JointType.BALL), int(JointType.SLIDE), int(JointType.HINGE)] == [
        int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL), int(mujoco.mjtJoint.mjJNT_SLIDE),
        int(mujoco.mjtJoint.mjJNT_HINGE)]


def test_so3_log_is_the_inverse_of_expm():
    """``dynamics.lie.so3_log`` against scipy's matrix exponential of the skew matrix (an independent
    oracle), for angles from 0 to just below π: below 120° (trace > 0, the trace-pivot path) and
    above it (Shepperd's full pivoting), single and batched, and mixed batches."""
    from dynamics.lie import skew, so3_log
    rng = np.random.default_rng(11)
    axes = rng.normal(size=(40, 3))
    axes /= np.linalg.norm(axes, axis=-1, keepdims=True)
    angles = np.concatenate([[0.0, 1e-9, 1e-5], np.linspace(0.01, np.pi - 1e-3, 37)])
    w = axes * angles[:, None]
    R = np.stack([expm(skew(x)) for x in w])
    np.testing.assert_allclose(so3_log(R), w, rtol=0, atol=1e-12)                 # mixed batch
    small = angles < 2 * np.pi / 3
    np.testing.assert_allclose(so3_log(R[small]), w[small], rtol=0, atol=1e-12)   # trace-pivot path only
    for i in (0, 5, 39):
        np.testing.assert_allclose(so3_log(R[i]), w[i], rtol=0, atol=1e-12)
