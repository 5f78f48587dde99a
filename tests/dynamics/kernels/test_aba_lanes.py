"""The lanes ABA (dynamics/kernels/aba_lanes.py) against the numpy reference: the bundled iiwa,
random branching trees and chains of hinge and slide joints (random axes, anchors, references,
armature), a state's independence of its lane, batches that do not fill the last group, large joint angles (the
polynomial sine and cosine after range reduction), NaN confined to its own lane, and which models
it accepts."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import dynamics  # noqa: E402
from dynamics.kernels.aba_lanes import LANES, aba_lanes_range, lane_rows, lanes_supported  # noqa: E402
from dynamics.kernels.packing import packed  # noqa: E402
from tests.helpers.random_chains import random_chain_model  # noqa: E402
from tests.helpers.random_trees import random_tree_model  # noqa: E402

MODELS = {
    "iiwa": lambda: dynamics.load_model("iiwa"),
    "tree": lambda: random_tree_model(611, 16, ball=False, multi_joint=False, refs=True)[0],
    "chain": lambda: random_chain_model(612, 9),
}


@pytest.fixture(scope="module")
def models():
    return {name: make() for name, make in MODELS.items()}


def lanes_aba(model, q, v, tau) -> np.ndarray:
    pm = packed(model)
    rows = lane_rows(pm.li.shape[0], model.nv)
    out = np.full(tau.shape, -1.0)
    aba_lanes_range(pm.li, pm.lf, pm.gv, q, v, tau, out, np.empty(rows[-1] * LANES), rows, 0, q.shape[0])
    return out


def random_states(model, n: int, seed: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    return (scale * rng.uniform(-3, 3, (n, model.nq)), rng.uniform(-2, 2, (n, model.nv)),
            rng.uniform(-10, 10, (n, model.nv)))


def check(ours, ref, rtol=1e-10):
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("name", list(MODELS))
def test_matches_the_numpy_reference(models, name):
    m = models[name]
    pm = packed(m)
    assert lanes_supported(pm.li, pm.lf)
    q, v, tau = random_states(m, 2 * LANES + 5, seed=1)
    check(lanes_aba(m, q, v, tau), dynamics.get_backend("numpy").aba(m, q, v, tau))


@pytest.mark.parametrize("batch", (1, 3, LANES - 1, LANES + 1))
def test_a_state_does_not_depend_on_its_lane_or_group(models, batch):
    """Each state's result is the same whichever lane it lands in and whatever fills the others."""
    m = models["tree"]
    q, v, tau = random_states(m, batch, seed=2)
    alone = np.concatenate([lanes_aba(m, q[i:i + 1], v[i:i + 1], tau[i:i + 1]) for i in range(batch)])
    np.testing.assert_array_equal(lanes_aba(m, q, v, tau), alone)


def test_large_angles(models):
    """Hinge angles up to ±3000 rad: the range reduction keeps the rotation exact to rounding."""
    m = models["iiwa"]
    q, v, tau = random_states(m, LANES, seed=3, scale=1000.0)
    check(lanes_aba(m, q, v, tau), dynamics.get_backend("numpy").aba(m, q, v, tau), rtol=1e-9)


def test_non_finite_state_stays_in_its_lane(models):
    m = models["iiwa"]
    q, v, tau = random_states(m, LANES, seed=4)
    good = lanes_aba(m, q, v, tau)
    q[3, 0] = np.nan
    v[7, 2] = np.inf
    bad = lanes_aba(m, q, v, tau)
    assert not np.isfinite(bad[3]).any() and not np.isfinite(bad[7]).all()
    keep = np.setdiff1d(np.arange(LANES), [3, 7])
    np.testing.assert_array_equal(bad[keep], good[keep])


def test_models_it_accepts():
    for name in ("hyq", "atlas"):                               # free-floating base
        pm = packed(dynamics.load_model(name))
        assert not lanes_supported(pm.li, pm.lf)
    ball = random_tree_model(613, 8, ball=True, multi_joint=False)[0]
    assert (ball.link_type == dynamics.JointType.BALL).any()
    pm = packed(ball)
    assert not lanes_supported(pm.li, pm.lf)
    multi = random_tree_model(614, 12, ball=False, multi_joint=True)[0]
    pm = packed(multi)
    if (pm.li[:, 4] > 1).any():                                # a link with two dofs
        assert not lanes_supported(pm.li, pm.lf)
