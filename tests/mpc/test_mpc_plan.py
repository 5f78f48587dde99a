"""The time-indexed plan and its feedback law (mpc/plan.py).

Oracles: closed-form geodesics (pure translation / pure rotation of a free body), Pinocchio's
``interpolate`` on a free-flyer model, and hand-written ZOH/feedback formulas."""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin
import pytest

import dynamics
from mpc.plan import Plan

FREE_BODY = """<mujoco><worldbody><body name="b" pos="0 0 1"><freejoint/>
<geom type="box" size=".1 .2 .3" mass="1"/></body></worldbody></mujoco>"""


@pytest.fixture(scope="module")
def free_body():
    return dynamics.from_mujoco(mujoco.MjModel.from_xml_string(FREE_BODY), name="free_body")


def _quat_z(theta):
    return np.array([np.cos(theta / 2), 0, 0, np.sin(theta / 2)])


def _plan(model, xs, us, K=None, t0=0.0, dt=0.1):
    return Plan(model, t0, dt, np.asarray(xs, float), np.asarray(us, float), K)


def test_reference_is_linear_for_hinges_and_hits_knots(bundled, rng):
    m = bundled["iiwa"]
    xs = np.concatenate([m.random_configuration(rng, 4), rng.normal(size=(4, m.nv))], axis=1)
    p = _plan(m, xs, np.zeros((3, m.nu)), t0=1.0, dt=0.02)
    for i in range(4):
        np.testing.assert_allclose(p.reference_state(1.0 + i * 0.02), xs[i], atol=1e-12)
    np.testing.assert_allclose(p.reference_state(1.0 + 0.25 * 0.02 + 0.02), 0.75 * xs[1] + 0.25 * xs[2], atol=1e-12)
    # before the plan and past its end the first/last knot is held
    np.testing.assert_allclose(p.reference_state(0.5), xs[0])
    np.testing.assert_allclose(p.reference_state(9.0), xs[-1])
    assert p.exhausted(9.0) and not p.exhausted(1.05)


def test_reference_follows_free_body_geodesics(free_body):
    m = free_body
    zero_v = np.zeros(6)
    # pure translation: straight line, orientation kept
    qa = np.r_[0.1, 0.2, 0.3, _quat_z(0.7)]
    qb = np.r_[1.1, -0.8, 0.7, _quat_z(0.7)]
    p = _plan(m, [np.r_[qa, zero_v], np.r_[qb, zero_v]], np.zeros((1, 0)))
    x = p.reference_state(0.03)
    np.testing.assert_allclose(x[:3], 0.7 * qa[:3] + 0.3 * qb[:3], atol=1e-12)
    np.testing.assert_allclose(np.abs(x[3:7] @ qa[3:7]), 1.0, atol=1e-12)
    # pure rotation about the body origin: position kept, angle interpolated
    qa = np.r_[0.1, 0.2, 0.3, _quat_z(0.2)]
    qb = np.r_[0.1, 0.2, 0.3, _quat_z(1.4)]
    p = _plan(m, [np.r_[qa, zero_v], np.r_[qb, zero_v]], np.zeros((1, 0)))
    x = p.reference_state(0.025)
    np.testing.assert_allclose(x[:3], qa[:3], atol=1e-12)
    np.testing.assert_allclose(np.abs(x[3:7] @ _quat_z(0.2 + 0.25 * 1.2)), 1.0, atol=1e-12)


def test_reference_matches_pinocchio_interpolate(free_body, rng):
    pm = pin.Model()
    pm.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "free")
    m = free_body
    for _ in range(5):
        qa, qb = m.random_configuration(rng, 2)
        s = rng.uniform()
        p = _plan(m, [np.r_[qa, np.zeros(6)], np.r_[qb, np.zeros(6)]], np.zeros((1, 0)), dt=1.0)
        x = p.reference_state(s)
        to_pin = lambda q: np.r_[q[:3], q[4:7], q[3]]  # (w,x,y,z) -> pin (x,y,z,w)
        qp = pin.interpolate(pm, to_pin(qa), to_pin(qb), s)
        np.testing.assert_allclose(x[:3], qp[:3], atol=1e-10)
        np.testing.assert_allclose(np.abs(x[3:7] @ np.r_[qp[6], qp[3:6]]), 1.0, atol=1e-10)


def test_control_is_zoh_feedforward_plus_gain_times_tangent_error(bundled, rng):
    m = bundled["iiwa"]
    N = 3
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    us = rng.normal(size=(N, m.nu))
    K = rng.normal(size=(N, m.nu, 2 * m.nv))
    p = _plan(m, xs, us, K, t0=0.0, dt=0.1)
    x = xs[1] + 0.01 * rng.normal(size=m.nq + m.nv)
    t = 0.14  # interval 1, 40 % of the way
    xref = 0.6 * xs[1] + 0.4 * xs[2]
    expected = us[1] + K[1] @ (x - xref)
    np.testing.assert_allclose(p.control(t, x, clip=False), expected, atol=1e-10)
    np.testing.assert_allclose(p.control(t, x, feedback=False, clip=False), us[1])
    np.testing.assert_allclose(p.control(t, x), np.clip(expected, m.u_lower, m.u_upper), atol=1e-10)
    # batched states
    xb = np.stack([x, xs[0]])
    assert p.control(t, xb, clip=False).shape == (2, m.nu)
    np.testing.assert_allclose(p.control(t, xb, clip=False)[0], expected, atol=1e-10)


def test_clipping_uses_model_limits(bundled):
    m = bundled["iiwa"]
    xs = np.tile(np.r_[m.keyframe("home"), np.zeros(7)], (2, 1))
    p = _plan(m, xs, np.full((1, 7), 1e4))
    np.testing.assert_allclose(p.control(0.0, xs[0]), m.u_upper)
    np.testing.assert_allclose(p.control(0.0, xs[0], clip=False), 1e4)


def test_resample_by_whole_knots_is_a_shift(bundled, rng):
    m = bundled["iiwa"]
    N = 6
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    us = rng.normal(size=(N, m.nu))
    p = _plan(m, xs, us, t0=2.0, dt=0.01)
    xw, uw = p.resample(2.02)
    np.testing.assert_allclose(xw[:N - 1], xs[2:], atol=1e-12)
    np.testing.assert_allclose(xw[N - 1:], np.tile(xs[-1], (2, 1)), atol=1e-12)  # held past the end
    np.testing.assert_allclose(uw[:N - 2], us[2:], atol=1e-12)
    np.testing.assert_allclose(uw[N - 2:], np.tile(us[-1], (2, 1)), atol=1e-12)
    xw, uw = p.resample(2.015, horizon=3)  # fractional: halfway states, held controls
    assert xw.shape == (4, 14) and uw.shape == (3, 7)
    np.testing.assert_allclose(xw[0], 0.5 * (xs[1] + xs[2]), atol=1e-12)
    np.testing.assert_allclose(uw[0], us[1], atol=1e-12)


@pytest.mark.parametrize("t_start, horizon", [(2.0, None), (2.03, None), (2.03, 9), (2.08, 4)])
def test_whole_knot_shift_equals_evaluating_the_plan(bundled, rng, t_start, horizon):
    """The sliced shift (the MPC's usual case) returns what evaluating the plan at every knot time
    returns (reference_state / feedforward), also past the horizon end and for another horizon."""
    m = bundled["hyq"]
    N = 6
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    us = rng.normal(size=(N, m.nu))
    p = _plan(m, xs, us, t0=2.0, dt=0.01)
    xw, uw = p.resample(t_start, horizon=horizon)
    n = horizon or N
    ts = t_start + 0.01 * np.arange(n + 1)
    # evaluating at 2.0 + 0.01 k lands within round-off of a knot: equal to ~1e-14, quaternions
    # possibly with the opposite sign (the same rotation), so configurations compare on the manifold
    ref = np.stack([p.reference_state(t) for t in ts])
    np.testing.assert_allclose(m.difference(ref[:, :m.nq], xw[:, :m.nq]), 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(xw[:, m.nq:], ref[:, m.nq:], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(uw, np.stack([p.feedforward(t) for t in ts[:-1]]))


@pytest.mark.parametrize("t_start, horizon, dt", [(2.03, 9, 0.01), (2.013, 5, 0.01)])
def test_resample_into_buffers_equals_fresh_arrays(bundled, rng, t_start, horizon, dt):
    """resample(out=) (the controller's warm-start buffers): same values as fresh arrays, for the
    whole-knot shift past the plan's end and for the fractional path; the buffers are returned."""
    m = bundled["iiwa"]
    N = 6
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    us = rng.normal(size=(N, m.nu))
    p = _plan(m, xs, us, t0=2.0, dt=0.01)
    ref = p.resample(t_start, horizon=horizon, dt=dt)
    out = (np.full((horizon + 1, xs.shape[1]), np.nan), np.full((horizon, m.nu), np.nan))
    got = p.resample(t_start, horizon=horizon, dt=dt, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_array_equal(out[1], ref[1])


@pytest.mark.parametrize("t_start, horizon, dt", [(2.013, None, 0.01), (1.995, 8, 0.01), (2.004, 5, 0.015),
                                                   (2.07, 4, 0.007)])
def test_fractional_resample_equals_evaluating_the_plan(bundled, rng, t_start, horizon, dt):
    """The batched general path (an update period that is not whole knots, another dt, before t0
    and past the end) returns what evaluating the plan knot by knot returns."""
    m = bundled["hyq"]
    N = 6
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    us = rng.normal(size=(N, m.nu))
    p = _plan(m, xs, us, t0=2.0, dt=0.01)
    xw, uw = p.resample(t_start, horizon=horizon, dt=dt)
    n = horizon or N
    ts = t_start + dt * np.arange(n + 1)
    ref = np.stack([p.reference_state(t) for t in ts])
    np.testing.assert_allclose(m.difference(ref[:, :m.nq], xw[:, :m.nq]), 0.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(xw[:, m.nq:], ref[:, m.nq:], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(uw, np.stack([p.feedforward(t) for t in ts[:-1]]))


def test_plan_rejects_bad_shapes_and_values(bundled):
    m = bundled["iiwa"]
    xs = np.zeros((3, 14))
    with pytest.raises(ValueError, match=r"us has shape"):
        Plan(m, 0.0, 0.1, xs, np.zeros((2, 6)))
    with pytest.raises(ValueError, match=r"xs has shape"):
        Plan(m, 0.0, 0.1, xs[:2], np.zeros((2, 7)))
    with pytest.raises(ValueError, match=r"K has shape"):
        Plan(m, 0.0, 0.1, xs, np.zeros((2, 7)), np.zeros((2, 7, 7)))
    with pytest.raises(ValueError, match="dt must be"):
        Plan(m, 0.0, 0.0, xs, np.zeros((2, 7)))
    with pytest.raises(ValueError, match="non-finite"):
        Plan(m, 0.0, 0.1, np.full((3, 14), np.nan), np.zeros((2, 7)))
    p = Plan(m, 0.0, 0.1, xs, np.zeros((2, 7)))
    with pytest.raises(ValueError, match="shape"):
        p.control(0.0, np.zeros(13))


def test_resample_into_buffers_of_the_wrong_shape_names_the_shapes(bundled, rng):
    """The whole-knot shift into ``out`` of the wrong shape: a ValueError that says which shapes it
    needs (numpy's own message names neither array)."""
    m = bundled["iiwa"]
    N = 6
    xs = np.concatenate([m.random_configuration(rng, N + 1), rng.normal(size=(N + 1, m.nv))], axis=1)
    us = rng.normal(size=(N, m.nu))
    p = _plan(m, xs, us, t0=2.0, dt=0.01)
    with pytest.raises(ValueError, match=r"out must be two arrays of shapes \(5, 14\) and \(4, 7\)"):
        p.resample(2.01, horizon=4, dt=0.01, out=(np.empty((4, 14)), np.empty((4, 7))))
