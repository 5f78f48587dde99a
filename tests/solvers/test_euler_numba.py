"""The compiled Euler step Jacobians (solvers.euler_numba, used by the numba backend's solver
workspace) against the numpy assembly on the numpy-reference dynamics (an independent backend) and
against central finite differences of the numpy step: iiwa (B = I, joint damping) and random
hinge/slide trees with springs (with spring reference), damping and geared motors (B ≠ I)."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
import tasks
from solvers import ShootingProblem, StateCost
from solvers.discrete_dynamics import DiscreteDynamics
from tests.helpers.random_trees import random_passive_tree_model

pytestmark = pytest.mark.skipif("numba" not in dynamics.available_backends(),
                                reason="the numba backend is not available on this machine")

N, DT = 5, 0.01


def _tree(seed: int):
    """A random hinge/slide tree with damping and springs on every joint and geared motors on every
    other one (B is not the identity)."""
    m = random_passive_tree_model(seed, 6, name=f"euclidean_tree_{seed}", free_root=False, ball=False, slide=True)
    assert m.is_euclidean and np.any(m.link_stiffness) and m.nu < m.nv
    return m


def _problems(name: str):
    if name == "iiwa":
        task = tasks.get_task("iiwa-reach")
        return [task.build_problem(task.initial_state(), N, DT, backend=b) for b in ("numba", "numpy")]
    m = _tree(int(name.split("-")[1]))
    x0 = np.concatenate([m.neutral(), np.zeros(m.nv)])
    return [ShootingProblem.uniform(m, x0, N, DT, StateCost(m, x0), backend=b) for b in ("numba", "numpy")]


@pytest.mark.parametrize("name", ["iiwa", "tree-1", "tree-2"])
def test_compiled_euler_jacobians_match_numpy_and_finite_differences(name):
    p_nb, p_np = _problems(name)
    dyn_nb = p_nb.dynamics_groups[0].item
    assert dyn_nb._compiled_euler() is not None          # the compiled path is the one under test
    assert p_np.dynamics_groups[0].item._compiled_euler() is None
    rng = np.random.default_rng(7)
    m = p_nb.model
    xs = np.concatenate([m.random_configuration(rng, size=N), rng.normal(size=(N, m.nv))], axis=-1)
    us = rng.normal(size=(N, m.nu))
    data = p_nb.create_data()
    got = dyn_nb.derivatives(xs, us, False, out=data.dynamics)
    assert got.Fx is data.dynamics.Fx                    # written into the workspace
    ref = p_np.dynamics_groups[0].item.derivatives(xs, us)
    for f in ("xnext", "Fx", "Fu"):
        np.testing.assert_allclose(getattr(got, f), getattr(ref, f), rtol=1e-11, atol=1e-11, err_msg=f)
    # central differences of the numpy step (Euclidean: x ⊕ dx = x + dx)
    step = p_np.dynamics_groups[0].item.step
    h = 1e-6
    for i in range(xs.shape[1]):
        e = np.zeros(xs.shape[1])
        e[i] = h
        col = (step(xs + e, us) - step(xs - e, us)) / (2 * h)
        np.testing.assert_allclose(got.Fx[:, :, i], col, rtol=1e-5, atol=1e-6)
    for j in range(m.nu):
        e = np.zeros(m.nu)
        e[j] = h
        col = (step(xs, us + e) - step(xs, us - e)) / (2 * h)
        np.testing.assert_allclose(got.Fu[:, :, j], col, rtol=1e-5, atol=1e-6)


def test_compiled_euler_is_not_used_where_it_does_not_apply():
    hyq = dynamics.load_model("hyq")                          # free joint: not Euclidean
    assert DiscreteDynamics(hyq, dynamics.get_backend("numba"), DT)._compiled_euler() is None
    iiwa = dynamics.load_model("iiwa")
    assert DiscreteDynamics(iiwa, dynamics.get_backend("numpy"), DT)._compiled_euler() is None


@pytest.mark.parametrize("name", ["iiwa", "tree-1"])
def test_compiled_acceleration_hessian_matches_the_numpy_assembly(name):
    """DDP's second-order factors (T holds the acceleration Hessian with the passive-force and
    actuation chain rule): workspace (compiled assembly) against fresh arrays on the numpy backend."""
    p_nb, p_np = _problems(name)
    rng = np.random.default_rng(11)
    m = p_nb.model
    xs = np.concatenate([m.random_configuration(rng, size=N), rng.normal(size=(N, m.nv))], axis=-1)
    us = rng.normal(size=(N, m.nu))
    got = p_nb.dynamics_groups[0].item.derivatives(xs, us, True, out=p_nb.create_data().dynamics)
    ref = p_np.dynamics_groups[0].item.derivatives(xs, us, second_order=True)
    # C holds −dt² M⁻¹, −dt M⁻¹ (the fold of the bracketed terms, docs/second_order.md): each
    # backend's own M⁻¹, equal to rounding
    np.testing.assert_allclose(got.C, ref.C, rtol=0, atol=1e-12 * np.abs(ref.C).max())
    scale = np.abs(ref.T).max()
    np.testing.assert_allclose(got.T, ref.T, rtol=1e-9, atol=1e-9 * scale)
    np.testing.assert_allclose(got.T, np.swapaxes(got.T, -1, -2), rtol=0, atol=1e-12 * scale)   # a Hessian
    F2 = got.F2
    np.testing.assert_allclose(F2, ref.F2, rtol=0, atol=1e-9 * np.abs(ref.F2).max())
