"""The kernel library's one compiled torque ``τ = B u - D v - K_s (q - q_spring)`` and semi-implicit
Euler step ``v⁺ = v + dt a, q⁺ = q ⊕ dt v⁺`` (dynamics/kernels/passive.py, integrators.py) against
the numpy reference path (``DiscreteDynamics(...).torques`` / ``.step`` on the numpy backend): iiwa
and random trees with springs (and spring references), damping, geared motors on some joints
(B ≠ I), ball joints and a free root. The compiled step composed with ABA is also checked against
the reference Jacobians by central finite differences on the state manifold."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import dynamics  # noqa: E402
from dynamics.kernels.integrators import euler_step  # noqa: E402
from dynamics.kernels.lie import joint_rows  # noqa: E402
from dynamics.kernels.passive import joint_torques  # noqa: E402
from solvers.discrete_dynamics import DiscreteDynamics  # noqa: E402
from solvers.state_space import StateSpace  # noqa: E402
from tests.helpers.random_trees import random_passive_tree_model  # noqa: E402

DT = 0.01


def _tree(seed: int, free_root: bool):
    """A random tree with ball joints, damping and springs on every hinge/slide joint and geared
    motors on every other one (tests/helpers/random_trees.py)."""
    m = random_passive_tree_model(seed, 8, name=f"passive_tree_{seed}", free_root=free_root, ball=True, slide=True)
    assert np.any(m.link_stiffness) and np.any(m.dof_damping) and m.ball_adr and m.nu < m.nv
    return m


MODELS = {"iiwa": lambda: dynamics.load_model("iiwa"), "tree": lambda: _tree(3, False),
          "tree-free": lambda: _tree(8, True)}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def _torque_args(m):
    """The torque's terms, from the model's own data: B, B = I, D, damped, springs (q address, dof
    address) of the stiff hinge/slide joints, K_s on their dofs, q_spring."""
    B = np.ascontiguousarray(m.actuation_matrix, dtype=float)
    scalar = np.isin(m.link_type, (dynamics.JointType.HINGE, dynamics.JointType.SLIDE))
    sl = np.flatnonzero(scalar & (m.link_stiffness != 0))
    stiffness = np.zeros(m.nv)
    stiffness[m.link_dofadr[sl]] = m.link_stiffness[sl]
    springs = np.stack([m.link_qadr[sl], m.link_dofadr[sl]], axis=-1).astype(np.int64).reshape(-1, 2)
    damping = np.asarray(m.dof_damping, float)
    b_identity = B.shape == (m.nv, m.nv) and bool(np.array_equal(B, np.eye(m.nv)))
    return B, b_identity, damping, bool(np.any(damping)), springs, stiffness, np.asarray(m.qpos_spring, float)


def _compiled_torques(m, q, v, u):
    B, b_identity, damping, damped, springs, stiffness, qspring = _torque_args(m)
    tau = np.empty((q.shape[0], m.nv))
    for n in range(q.shape[0]):
        joint_torques(u[n], B, b_identity, damping, damped, springs, stiffness, qspring, q[n], v[n], tau[n])
    return tau


def _compiled_step(m, x, a):
    joints = joint_rows(m)
    out = np.empty_like(x)
    ok = np.empty(x.shape[0], dtype=bool)
    w = np.empty(m.nv)
    for n in range(x.shape[0]):
        ok[n] = euler_step(joints, m.nq, x[n], a[n], DT, w, out[n])
    return out, ok


def _states(m, rng, n=6):
    q = m.random_configuration(rng, size=n)
    return q, 2.0 * rng.normal(size=(n, m.nv)), 3.0 * rng.normal(size=(n, m.nu))


def test_torque_matches_the_reference(model):
    m = model
    dyn = DiscreteDynamics(m, dynamics.get_backend("numpy"), DT)
    q, v, u = _states(m, np.random.default_rng(1))
    ref = dyn.torques(q, v, u)
    got = _compiled_torques(m, q, v, u)
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13 * np.abs(ref).max())
    if m.name == "iiwa":
        assert np.array_equal(m.actuation_matrix, np.eye(m.nv))     # B = I: the product skipped, exact
    else:
        assert not np.array_equal(got, u @ np.asarray(m.actuation_matrix).T)   # passive terms are present


def test_step_matches_the_reference(model):
    m = model
    be = dynamics.get_backend("numpy")
    dyn = DiscreteDynamics(m, be, DT)
    q, v, u = _states(m, np.random.default_rng(2))
    x = np.concatenate([q, v], axis=-1)
    a = be.aba(m, q, v, dyn.torques(q, v, u))
    got, ok = _compiled_step(m, x, a)
    ref = dyn.step(x, u)
    assert ok.all()
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    a[1, 0] = np.inf                                              # a diverging state: rejected
    assert not _compiled_step(m, x, a)[1][1]
    assert _compiled_step(m, x, a)[1][0]


def test_compiled_step_has_the_reference_jacobians(model):
    """Central differences on the state manifold of x⁺ = step(x, u) built from the compiled torque
    and step (ABA from the numpy backend) against the reference path's analytical Fx, Fu."""
    m = model
    be = dynamics.get_backend("numpy")
    dyn = DiscreteDynamics(m, be, DT)
    state = StateSpace(m)
    q, v, u = _states(m, np.random.default_rng(3), n=2)
    x = np.concatenate([q, v], axis=-1)
    ref = dyn.derivatives(x, u)

    def f(x, u):
        q, v = np.ascontiguousarray(x[:, :m.nq]), np.ascontiguousarray(x[:, m.nq:])
        return _compiled_step(m, x, be.aba(m, q, v, _compiled_torques(m, q, v, u)))[0]

    h = 1e-6
    x1 = f(x, u)
    for i in range(2 * m.nv):
        e = np.zeros((x.shape[0], 2 * m.nv))
        e[:, i] = h
        col = state.difference(f(state.integrate(x, -e), u), f(state.integrate(x, e), u)) / (2 * h)
        np.testing.assert_allclose(col, ref.Fx[:, :, i], rtol=1e-5, atol=1e-6, err_msg=f"∂x⁺/∂x column {i}")
    for j in range(m.nu):
        e = np.zeros_like(u)
        e[:, j] = h
        col = state.difference(f(x, u - e), f(x, u + e)) / (2 * h)
        np.testing.assert_allclose(col, ref.Fu[:, :, j], rtol=1e-5, atol=1e-6, err_msg=f"∂x⁺/∂u column {j}")
    np.testing.assert_allclose(x1, ref.xnext, rtol=1e-12, atol=1e-12)
