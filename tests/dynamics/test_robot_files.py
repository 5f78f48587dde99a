"""Checks on the bundled MJCF robot models in dynamics/robots/.

The pinned mass-matrix / gravity numbers were measured with MuJoCo 4.0.0 at each model's
keyframe with joint armature set to zero. The inertial data in the files are bit-identical to
the upstream parameter sets (see dynamics/robots/LICENSES.md); a change to any body pose,
inertial or keyframe shows up here.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

ROBOTS_DIR = Path(__file__).parents[2] / "dynamics" / "robots"

# name -> expected facts
SPECS = {
    "iiwa": dict(file="iiwa.xml", nq=7, nv=7, nu=7, mass=30.61,  # the mass includes the 5 kg base welded to the world
                 key="home", floating=False, sites=("ee", "attachment_site"),
                 torque_limits=(320, 320, 176, 176, 110, 40, 40)),
    "hyq": dict(file="hyq.xml", nq=19, nv=18, nu=12, mass=86.774004, key="standing", floating=True,
                sites=("lf_foot", "rf_foot", "lh_foot", "rh_foot", "trunk_imu"), torque_limits=(150,) * 12),
    "atlas": dict(file="atlas.xml", nq=37, nv=36, nu=30, mass=175.11796, key="standing", floating=True,
                  sites=("l_foot_site", "r_foot_site", "l_hand_site", "r_hand_site"), torque_limits=None),
}

# Measured at the keyframe, armature zeroed: (i, j) -> M[i, j]; "trace"; ("bias", k) -> qfrc_bias[k].
PINNED = {
    "iiwa": {
        (0, 0): 2.6458759032687613,
        (6, 6): 0.0010000000000000252,
        "trace": 7.548363281796666,
        ("bias", 1): -56.9668589655646,
    },
    "hyq": {
        (0, 0): 86.774004,
        (6, 6): 0.32515445969901796,
        (17, 17): 0.026184974666084437,
        "trace": 290.9635472250755,
        ("bias", 7): 3.244277325299075,
    },
    "atlas": {
        (0, 0): 175.11796,
        (6, 6): 7.709848586807752,
        (35, 35): 0.012818490000000293,
        "trace": 695.0360598468777,
        ("bias", 7): -22.528460345147785,
    },
}

NAMES = sorted(SPECS)


def _path(name: str) -> Path:
    return ROBOTS_DIR / SPECS[name]["file"]


def _load(name: str):
    return mujoco.MjModel.from_xml_path(str(_path(name)))


def _full_mass_matrix(m, d) -> np.ndarray:
    """Dense joint-space inertia via mj_mulM (signature stable across MuJoCo versions)."""
    M = np.zeros((m.nv, m.nv))
    e = np.zeros(m.nv)
    col = np.zeros(m.nv)
    for i in range(m.nv):
        e[:] = 0.0
        e[i] = 1.0
        mujoco.mj_mulM(m, d, col, e)
        M[:, i] = col
    return M


@pytest.mark.parametrize("name", NAMES)
def test_dimensions(name):
    m = _load(name)
    spec = SPECS[name]
    assert (m.nq, m.nv, m.nu) == (spec["nq"], spec["nv"], spec["nu"])
    n_free = int(np.sum(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE))
    n_hinge = int(np.sum(m.jnt_type == mujoco.mjtJoint.mjJNT_HINGE))
    assert n_free == (1 if spec["floating"] else 0)
    assert n_hinge == spec["nu"]
    # no tendons / equality constraints in the bundled models
    assert m.ntendon == 0
    assert m.neq == 0


@pytest.mark.parametrize("name", NAMES)
def test_total_mass(name):
    m = _load(name)
    assert float(np.sum(m.body_mass)) == pytest.approx(SPECS[name]["mass"], abs=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_keyframe_and_sites_exist(name):
    m = _load(name)
    spec = SPECS[name]
    key = m.key(spec["key"])  # raises KeyError if missing
    assert key.qpos.shape == (m.nq,)
    for s in spec["sites"]:
        m.site(s)  # raises KeyError if missing
    if name == "iiwa":
        np.testing.assert_allclose(m.key("home").qpos, [0, 0.785398, 0, -1.5708, 0, 0, 0])
        np.testing.assert_array_equal(m.site("ee").pos, m.site("attachment_site").pos)


@pytest.mark.parametrize("name", NAMES)
def test_actuators(name):
    m = _load(name)
    spec = SPECS[name]
    assert np.all(m.actuator_ctrllimited)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    assert np.all(np.isfinite(m.actuator_ctrlrange))
    assert np.all(hi > 0)
    np.testing.assert_array_equal(lo, -hi)
    # every actuator is a torque motor on exactly one hinge, gear 1
    assert np.all(m.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT)
    assert np.all(m.actuator_gear[:, 0] == 1.0)
    assert np.all(m.actuator_biastype == mujoco.mjtBias.mjBIAS_NONE)
    assert len(set(m.actuator_trnid[:, 0])) == m.nu
    # joint actuatorfrcrange mirrors the actuator limits
    jnt = m.actuator_trnid[:, 0]
    assert np.all(m.jnt_actfrclimited[jnt])
    np.testing.assert_array_equal(m.jnt_actfrcrange[jnt], m.actuator_ctrlrange)
    if spec["torque_limits"] is not None:
        np.testing.assert_array_equal(hi, spec["torque_limits"])
        np.testing.assert_array_equal(m.actuator_forcerange[:, 1], spec["torque_limits"])


@pytest.mark.parametrize("name", NAMES)
def test_file_is_self_contained(name):
    text = _path(name).read_text()
    for forbidden in ("<frame", "<mesh", "file=", "<tendon", "<equality"):
        assert forbidden not in text, f"{name}: contains {forbidden!r}"
    if hasattr(mujoco, "mju_getXMLDependencies"):
        deps = mujoco.mju_getXMLDependencies(str(_path(name)))
        assert [Path(p).resolve() for p in deps] == [_path(name).resolve()]


@pytest.mark.parametrize("name", NAMES)
def test_jointed_bodies_have_explicit_inertial(name):
    root = ET.parse(_path(name)).getroot()
    for body in root.iter("body"):
        has_joint = body.find("joint") is not None or body.find("freejoint") is not None
        if has_joint:
            assert body.find("inertial") is not None, body.get("name")


@pytest.mark.parametrize("name", NAMES)
def test_pinned_mass_matrix_and_gravity(name):
    m = _load(name)
    m.dof_armature[:] = 0.0
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key(SPECS[name]["key"]).id)
    mujoco.mj_forward(m, d)
    M = _full_mass_matrix(m, d)
    np.testing.assert_allclose(M, M.T, atol=1e-12)
    for what, value in PINNED[name].items():
        if what == "trace":
            got = float(np.trace(M))
        elif what[0] == "bias":
            got = float(d.qfrc_bias[what[1]])
        else:
            got = float(M[what])
        assert got == pytest.approx(value, abs=1e-8), (name, what)


@pytest.mark.parametrize("name", ["hyq", "atlas"])
def test_standing_keyframe_feet_touch_floor(name):
    m = _load(name)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("standing").id)
    mujoco.mj_kinematics(m, d)
    if name == "hyq":
        radius = 0.02175
        for s in ("lf_foot", "rf_foot", "lh_foot", "rh_foot"):
            assert d.site(s).xpos[2] == pytest.approx(radius, abs=1e-3)
    else:
        for s in ("l_foot_site", "r_foot_site"):
            assert d.site(s).xpos[2] == pytest.approx(0.0, abs=1e-3)
            # soles level
            np.testing.assert_allclose(d.site(s).xmat.reshape(3, 3)[:, 2], [0, 0, 1], atol=1e-9)
    mujoco.mj_forward(m, d)
    assert d.ncon >= (4 if name == "hyq" else 2)


@pytest.mark.parametrize("name", NAMES)
def test_passive_simulation_from_keyframe(name):
    m = _load(name)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key(SPECS[name]["key"]).id)
    d.ctrl[:] = 0.0
    n_steps = int(round(0.3 / m.opt.timestep))
    for _ in range(n_steps):
        mujoco.mj_step(m, d)
    assert np.all(np.isfinite(d.qpos))
    assert np.all(np.isfinite(d.qvel))
    if SPECS[name]["floating"]:
        assert d.qpos[2] > 0.2
