"""MuJoCo ↔ model state and control conversions (dynamics/mujoco_state.py, which the simulator and the
tasks share), checked against MuJoCo itself."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from dynamics.mujoco_state import ActuatorMap, read_state, write_state


def _random_state(model, rng):
    q = model.random_configuration(rng)
    v = rng.normal(size=model.nv)
    return np.concatenate([q, v])


@pytest.mark.parametrize("name", ["iiwa", "hyq", "atlas"])
def test_state_round_trip(bundled, rng, name):
    model = bundled[name]
    d = mujoco.MjData(model.mj_model)
    for _ in range(5):
        x = _random_state(model, rng)
        write_state(model, d, x)
        np.testing.assert_allclose(read_state(model, d), x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["hyq", "atlas"])
def test_free_base_velocity_matches_mujoco_body_velocity(bundled, rng, name):
    """v of the free joint is the base's (linear, angular) velocity in its own frame: compare with
    MuJoCo's ``mj_objectVelocity`` (local frame, (angular, linear) order) after ``write_state``."""
    model = bundled[name]
    m = model.mj_model
    d = mujoco.MjData(m)
    (qa, va), = model.free_adr
    base = int(m.jnt_bodyid[0])
    for _ in range(5):
        x = _random_state(model, rng)
        write_state(model, d, x)
        mujoco.mj_forward(m, d)
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, base, vel, 1)  # body frame (BODY = inertial frame)
        v = x[model.nq:]
        np.testing.assert_allclose(vel[3:], v[va:va + 3], atol=1e-10)   # linear, body frame
        np.testing.assert_allclose(vel[:3], v[va + 3:va + 6], atol=1e-10)  # angular, body frame


def test_write_state_rejects_bad_input(bundled):
    model = bundled["iiwa"]
    d = mujoco.MjData(model.mj_model)
    with pytest.raises(ValueError, match="shape"):
        write_state(model, d, np.zeros(5))
    with pytest.raises(ValueError, match="non-finite"):
        write_state(model, d, np.full(14, np.nan))
    with pytest.raises(ValueError, match="single state"):
        write_state(model, d, np.zeros((2, 14)))


@pytest.mark.parametrize("name", ["iiwa", "hyq", "atlas"])
def test_actuator_map_gives_the_model_actuation(bundled, rng, name):
    """Writing u through the map makes MuJoCo apply ``tau = actuation_matrix @ u`` (qfrc_actuator,
    converted to model coordinates) and report ``actuator_force == u``."""
    model = bundled[name]
    m = model.mj_model
    d = mujoco.MjData(m)
    amap = ActuatorMap.for_model(model)
    write_state(model, d, _random_state(model, rng))
    lo = np.where(np.isfinite(model.u_lower), model.u_lower, -50)
    hi = np.where(np.isfinite(model.u_upper), model.u_upper, 50)
    u = rng.uniform(0.9 * lo, 0.9 * hi)
    amap.apply(d, u)
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(amap.forces(d), u, rtol=1e-12, atol=1e-12)
    tau = model.tau_from_qfrc(d.qpos, d.qfrc_actuator)
    np.testing.assert_allclose(tau, model.actuation_matrix @ u, rtol=1e-12, atol=1e-9)
