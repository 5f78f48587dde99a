"""dynamics.actuation: τ = B u − D v − K (q − q_spring) against MuJoCo's own actuator and passive
forces (qfrc_actuator + qfrc_passive) on a chain with gears, damping, springs and spring
references, and the chain rule of its partials against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import dynamics
from dynamics.actuation import Actuation

XML = """
<mujoco>
  <option gravity="0 0 0"/>
  <worldbody>
    <body name="a">
      <joint name="j0" type="hinge" axis="0 0 1" damping="0.7" stiffness="3.0" springref="0.4" ref="0.1"/>
      <geom type="capsule" size="0.05" fromto="0 0 0 0.3 0 0"/>
      <body name="b" pos="0.3 0 0">
        <joint name="j1" type="slide" axis="1 0 0" damping="1.3"/>
        <geom type="box" size="0.05 0.05 0.05"/>
        <body name="c" pos="0.1 0 0">
          <joint name="j2" type="hinge" axis="0 1 0" stiffness="5.0" springref="-0.3"/>
          <geom type="sphere" size="0.05" pos="0.1 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j0" gear="2.5"/>
    <motor joint="j2" gear="-0.5"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    path = tmp_path_factory.mktemp("actuation") / "chain.xml"
    path.write_text(XML)
    return dynamics.load_model(path)


def test_torques_match_mujoco(chain):
    rng = np.random.default_rng(3)
    act = Actuation(chain)
    m = chain.mj_model
    d = mujoco.MjData(m)
    for _ in range(5):
        q, v, u = rng.normal(size=chain.nq), rng.normal(size=chain.nv), rng.normal(size=chain.nu)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(m, d)
        np.testing.assert_allclose(act.torques(q, v, u), d.qfrc_actuator + d.qfrc_passive, rtol=1e-12, atol=1e-12)
        # batched and in place give the same
        out, tmp = np.empty((2, chain.nv)), np.empty((2, chain.nv))
        got = act.torques(np.stack([q, q]), np.stack([v, v]), np.stack([u, u]), out=out, tmp=tmp)
        assert got is out
        np.testing.assert_allclose(out, np.stack([d.qfrc_actuator + d.qfrc_passive] * 2), rtol=1e-12, atol=1e-12)


def test_without_passive_forces_only_actuation(chain):
    act = Actuation(chain, passive_forces=False)
    u = np.array([0.3, -1.2])
    np.testing.assert_allclose(act.torques(np.ones(chain.nq), np.ones(chain.nv), u), chain.actuation_matrix @ u)
    assert not act.has_passive and not act.B_identity


def test_chain_partials_match_central_differences(chain):
    """y(q, v, τ) = W τ + small nonlinear terms: ∂y/∂(q, v) through τ(q, v, u) by the chain rule vs
    central differences of y(q, v, τ(q, v, u))."""
    rng = np.random.default_rng(5)
    act = Actuation(chain)
    W = rng.normal(size=(4, chain.nv))
    q, v, u = rng.normal(size=chain.nq), rng.normal(size=chain.nv), rng.normal(size=chain.nu)

    def y(q, v):
        return W @ act.torques(q, v, u) + np.sin(q[:4] if chain.nq >= 4 else np.pad(q, (0, 4 - chain.nq)))

    dq0 = np.zeros((4, chain.nv))
    dq0[:chain.nq, :chain.nq] = np.diag(np.cos(q))[:4, :chain.nq] if chain.nq >= 4 else np.diag(np.cos(q))
    dyq, dyv = act.chain_partials(dq0, np.zeros((4, chain.nv)), W)
    h = 1e-6
    for j in range(chain.nv):
        e = np.zeros(chain.nv)
        e[j] = h
        np.testing.assert_allclose(dyq[:, j], (y(q + e, v) - y(q - e, v)) / (2 * h), rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(dyv[:, j], (y(q, v + e) - y(q, v - e)) / (2 * h), rtol=1e-7, atol=1e-8)


def test_same_as(chain):
    assert Actuation(chain).same_as(Actuation(chain))
    assert not Actuation(chain).same_as(Actuation(chain, passive_forces=False))
