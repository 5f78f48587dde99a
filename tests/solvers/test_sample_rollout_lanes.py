"""The sampling planners' compiled rollout (solvers/rollout_numba.py ``CompiledRollout.run_samples``)
on both of its kernels — the lanes kernel (hinge/slide models: W samples per SIMD lane group) and
the per-sample kernel (any other model) — against a knot-by-knot loop of the numpy reference
problem (``problem.step``) applying ``clip(offsets + G (x ⊖ x_ref))``: random trees with damping,
springs and an actuation matrix B ≠ I, several lane groups, 1 and 2 worker threads, and a sample
whose control goes non-finite."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from dynamics.kernels.aba_lanes import LANES  # noqa: E402
from solvers import ControlCost, CostSum, ShootingProblem, StateCost  # noqa: E402
from solvers.rollout_numba import CompiledRollout  # noqa: E402
from tests.helpers.random_trees import random_passive_tree_model  # noqa: E402

N = 5
K = LANES + 7                       # two lane groups, the second one short


def _problems(ball: bool):
    m = random_passive_tree_model(621 + ball, 9, name=f"rollout_tree_{ball}", ball=ball, multi_joint=False,
                                  welded=False)
    rng = np.random.default_rng(5)
    x0 = np.concatenate([m.neutral(), rng.uniform(-0.5, 0.5, m.nv)])
    running = CostSum({"u": (ControlCost(m, np.zeros(m.nu)), 1e-3)})
    terminal = CostSum({"x": (StateCost(m, x0, np.ones(2 * m.nv)), 1.0)})
    lo, hi = -np.full(m.nu, 4.0), np.full(m.nu, 4.0)
    return tuple(ShootingProblem.uniform(m, x0, N, 0.01, running, terminal, backend=b, u_lower=lo, u_upper=hi)
                 for b in ("numba", "numpy"))


@pytest.fixture(scope="module", params=(False, True), ids=("hinge_slide_lanes", "ball_per_sample"))
def problems(request):
    return _problems(request.param)


def _sequential(ref, offsets, G, xref):
    X, U = np.empty((K, N + 1, ref.nx)), np.empty((K, N, ref.nu))
    for k in range(K):
        x = X[k, 0] = ref.x0
        for t in range(N):
            u = offsets[k, t] + G @ ref.state.difference(xref, x)
            U[k, t] = np.clip(u, ref.u_lower, ref.u_upper)
            x = X[k, t + 1] = ref.step(x, U[k, t])
    return X, U


@pytest.mark.parametrize("threads", (1, 2))
def test_matches_the_numpy_loop(problems, threads):
    p, ref = problems
    cr = CompiledRollout(p)
    assert (cr._lane_rows is not None) == (p.model.nq == p.model.nv)     # which kernel this case runs
    rng = np.random.default_rng(6)
    offsets = rng.uniform(-6, 6, (K, N, p.nu))                           # some clipped
    G = rng.normal(scale=2.0, size=(p.nu, 2 * p.model.nv))
    xref = p.x0.copy()
    xref[p.model.nq:] += 0.2
    X_ref, U_ref = _sequential(ref, offsets, G, xref)
    p.backend.set_threads(min(threads, p.backend.max_threads))
    try:
        X, U = np.empty((K, N + 1, p.nx)), np.empty((K, N, p.nu))
        ok = cr.run_samples(p.x0, offsets, G, xref, p.u_lower, p.u_upper, True, X, U)
    finally:
        p.backend.set_threads(None)
    assert ok.all()
    assert np.any(np.isclose(U_ref, p.u_upper) | np.isclose(U_ref, p.u_lower))
    np.testing.assert_allclose(U, U_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(X, X_ref, rtol=1e-10, atol=1e-10)


def _open_loop_samples(p, offsets, clip: bool):
    """``(ok, X)`` of ``run_samples`` with zero feedback gains around x0 (K samples of N knots)."""
    X, U = np.empty((K, N + 1, p.nx)), np.empty((K, N, p.nu))
    ok = CompiledRollout(p).run_samples(p.x0, offsets, np.zeros((p.nu, 2 * p.model.nv)), p.x0, p.u_lower,
                                        p.u_upper, clip, X, U)
    return ok, X


def test_non_finite_control_fails_only_its_sample(problems):
    p, _ = problems
    offsets = np.random.default_rng(7).uniform(-2, 2, (K, N, p.nu))
    ok, X = _open_loop_samples(p, offsets, True)
    bad = offsets.copy()
    bad[LANES + 2, 1, 0] = np.nan
    okb, Xb = _open_loop_samples(p, bad, True)
    assert ok.all() and not okb[LANES + 2] and np.delete(okb, LANES + 2).all()
    np.testing.assert_array_equal(np.delete(Xb, LANES + 2, axis=0), np.delete(X, LANES + 2, axis=0))


def test_diverging_state_fails_only_its_sample(problems):
    """A sample whose step overflows (an unclipped control of 1e308) keeps its last finite state and
    is marked failed; the others (same lane group included) are unchanged."""
    p, _ = problems
    offsets = np.random.default_rng(8).uniform(-2, 2, (K, N, p.nu))
    ok, X = _open_loop_samples(p, offsets, False)
    assert ok.all()
    bad = offsets.copy()
    bad[5, 2, :] = 1e308
    with np.errstate(all="ignore"):
        okb, Xb = _open_loop_samples(p, bad, False)
    assert not okb[5] and np.delete(okb, 5).all()
    assert np.isfinite(Xb[5]).all()                                  # the state was kept, not propagated
    np.testing.assert_array_equal(Xb[5, 3], Xb[5, 2])
    np.testing.assert_array_equal(np.delete(Xb, 5, axis=0), np.delete(X, 5, axis=0))
