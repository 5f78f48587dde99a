"""Named frames (sites, bodies, geoms): the model's kinematics of each kind of frame against
MuJoCo's own (``site_xpos``/``xpos``/``geom_xpos`` and their rotations), the search order shared by
:meth:`RobotModel.frame` and :func:`mujoco_frame`, and the error that lists the frames there are."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from dynamics import from_mujoco, get_backend
from dynamics.mujoco_frames import mujoco_frame

ARM = """<mujoco model="frames_arm">
  <worldbody>
    <body name="base" pos="0 0 0.1">
      <joint name="j0" axis="0 0 1"/>
      <geom name="base_geom" type="box" size="0.05 0.05 0.05" pos="0.01 0.02 0.03" euler="0.1 0.2 0.3"/>
      <body name="link" pos="0 0 0.2" euler="0.3 0 0">
        <joint name="j1" axis="0 1 0"/>
        <geom name="link_capsule" type="capsule" fromto="0 0 0 0.3 0.05 -0.1" size="0.02"/>
        <site name="tip" pos="0.3 0.05 -0.1" euler="0 0.4 0"/>
        <geom name="tip" type="sphere" pos="0.25 0 0" size="0.02"/>
        <geom name="toe" type="sphere" pos="0.3 0.05 -0.12" size="0.025" euler="0.2 -0.1 0.5"/>
      </body>
    </body>
  </worldbody>
</mujoco>"""


@pytest.fixture(scope="module")
def arm():
    return from_mujoco(mujoco.MjModel.from_xml_string(ARM), name="frames_arm")


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name, kind", [("tip", "site"), ("link", "body"), ("toe", "geom"),
                                        ("link_capsule", "geom"), ("base_geom", "geom")])
def test_frame_placement_matches_mujoco(arm, backend, name, kind):
    mj = arm.mj_model
    frame = mujoco_frame(mj, name)
    assert frame.kind == kind
    d = mujoco.MjData(mj)
    Q = np.random.default_rng(3).uniform(-2, 2, (5, arm.nq))
    R, p = get_backend(backend).frame_placement(arm, Q, name)
    for k, q in enumerate(Q):
        d.qpos[:] = q
        mujoco.mj_kinematics(mj, d)
        np.testing.assert_allclose(p[k], frame.position(d), atol=1e-12)
        np.testing.assert_allclose(R[k], frame.rotation(d), atol=1e-12)


def test_search_order_site_then_body_then_geom(arm):
    mj = arm.mj_model
    assert mujoco_frame(mj, "tip").kind == "site"          # a site and a geom share the name
    body, R, p = arm.body_frame("tip")
    assert body == mj.site_bodyid[mj.site("tip").id]
    np.testing.assert_allclose(p, mj.site_pos[mj.site("tip").id])
    toe = mujoco_frame(mj, "toe")
    assert (toe.kind, toe.body) == ("geom", mj.body("link").id)


def test_unknown_frame_lists_sites_bodies_and_geoms(arm):
    with pytest.raises(KeyError, match="no site, body or geom named 'heel'; sites: tip; bodies: base, link; "
                                       "geoms: base_geom, link_capsule, tip, toe"):
        arm.frame("heel")
    with pytest.raises(KeyError, match="no site, body or geom named 'heel'; sites: tip"):
        mujoco_frame(arm.mj_model, "heel")
