"""The sampling planners' compiled rollouts (solvers/sampling/rollouts.py CompiledSampleRollouts,
solvers/rollout_numba.py run_samples) against a sequential loop on the numpy reference problem
(``problem.step`` and the policy's own ``controls``): open-loop controls, the PD set-point policy
(its exact affine form), 1 and 2 worker threads, a diverging sample, and the planners' choice of
rollout."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import dynamics  # noqa: E402
import tasks  # noqa: E402
from solvers import ControlCost, CostSum, FramePositionCost, ShootingProblem, StateCost  # noqa: E402
from solvers.sampling import MPPI, PredictiveSampling  # noqa: E402
from solvers.sampling.policy import GravityDampingFeedback, PDSetpoints  # noqa: E402
from solvers.sampling.rollouts import CompiledSampleRollouts, rollout_batch, rollout_costs  # noqa: E402

K, N = 5, 6


def _problem(backend: str) -> ShootingProblem:
    m = dynamics.load_model("iiwa")
    x0 = tasks.get_task("iiwa-reach").initial_state()
    x0[m.nq:] = np.linspace(-0.3, 0.3, m.nv)            # moving: the velocity terms matter
    target = np.array([0.5, 0.2, 0.4])
    running = CostSum({"ee": (FramePositionCost(m, "ee", target), 1e3), "u": (ControlCost(m, np.zeros(m.nu)), 1e-3)})
    terminal = CostSum({"state": (StateCost(m, x0, np.ones(2 * m.nv)), 1.0)})
    return ShootingProblem.uniform(m, x0, N, 0.02, running, terminal, backend=backend)


@pytest.fixture(scope="module")
def problems():
    return _problem("numba"), _problem("numpy")


def _sequential(ref: ShootingProblem, controls_of) -> tuple[np.ndarray, np.ndarray]:
    """States (K, N+1, nx) and applied controls (K, N, nu) of a knot-by-knot loop on ``ref``."""
    X, U = np.empty((K, N + 1, ref.nx)), np.empty((K, N, ref.nu))
    for k in range(K):
        x = ref.x0.copy()
        X[k, 0] = x
        for t in range(N):
            U[k, t] = controls_of(k, t, x)
            x = X[k, t + 1] = ref.step(x, U[k, t])
    return X, U


@pytest.mark.parametrize("threads", (1, 2))
def test_open_loop_matches_sequential_numpy(problems, threads):
    p, ref = problems
    p.backend.set_threads(min(threads, p.backend.max_threads))
    try:
        rng = np.random.default_rng(0)
        us = p.default_controls() + 3.0 * rng.normal(size=(K, N, p.nu))
        X_ref, _ = _sequential(ref, lambda k, t, x: us[k, t])
        us_run = us.copy()
        X = CompiledSampleRollouts(p)(p, us_run, np.empty((K, N + 1, p.nx)))
        np.testing.assert_allclose(X, X_ref, rtol=1e-11, atol=1e-11)
        np.testing.assert_array_equal(us_run, us)           # open loop: the controls as given
    finally:
        p.backend.set_threads(None)


@pytest.mark.parametrize("threads", (1, 2))
def test_pd_setpoints_match_the_policy_step_by_step(problems, threads):
    """The compiled kernel applies ``offsets + G (x ⊖ x_ref)`` from ``PDSetpoints.linear_form``;
    the reference applies ``PDSetpoints.controls`` (linearised gravity, PD on the actuated joints)
    at each state of a numpy loop, clipped to the bounds — the same law if the affine form is exact."""
    p, ref = problems
    p.backend.set_threads(min(threads, p.backend.max_threads))
    try:
        fb, fb_ref = PDSetpoints(p), PDSetpoints(ref)
        rng = np.random.default_rng(1)
        theta = fb.default() + 0.4 * rng.normal(size=(K, N, p.nu))
        nq = p.model.nq
        X_ref, U_ref = _sequential(ref, lambda k, t, x: ref.clip_controls(
            fb_ref.controls(theta[k, t][None], x[None, :nq], x[None, nq:])[0]))
        us = theta.copy()
        X = CompiledSampleRollouts(p)(p, us, np.empty((K, N + 1, p.nx)), fb)
        np.testing.assert_allclose(X, X_ref, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(us, U_ref, rtol=1e-10, atol=1e-9)  # the applied (clipped) controls
        assert np.any(np.isclose(U_ref, p.u_upper) | np.isclose(U_ref, p.u_lower))  # the clip was exercised
    finally:
        p.backend.set_threads(None)


def test_diverged_sample_is_nan_and_costs_inf(problems):
    p, _ = problems
    rng = np.random.default_rng(2)
    us = p.default_controls() + rng.normal(size=(K, N, p.nu))
    good = CompiledSampleRollouts(p)(p, us.copy(), np.empty((K, N + 1, p.nx)))
    bad_us = us.copy()
    bad_us[3, 2] = np.inf
    X = CompiledSampleRollouts(p)(p, bad_us, np.empty((K, N + 1, p.nx)))
    assert np.isnan(X[3]).all()
    J = rollout_costs(p, X, bad_us)
    assert np.isinf(J[3]) and np.isfinite(np.delete(J, 3)).all()
    np.testing.assert_array_equal(np.delete(X, 3, axis=0), np.delete(good, 3, axis=0))


def test_planners_choose_the_compiled_rollouts_where_they_apply(problems):
    p, ref = problems
    assert isinstance(PredictiveSampling(p, samples=8)._rollout, CompiledSampleRollouts)
    assert isinstance(MPPI(p, samples=8, policy="open_loop")._rollout, CompiledSampleRollouts)
    assert PredictiveSampling(ref, samples=8)._rollout is rollout_batch          # numpy: the reference path
    # a feedback without an affine form goes through the step-by-step rollout, with the same result
    fb = GravityDampingFeedback(p, 0.1)
    assert fb.linear_form(np.zeros((K, N, p.nu))) is None
    rng = np.random.default_rng(3)
    offsets = rng.normal(size=(K, N, p.nu))
    X1 = CompiledSampleRollouts(p)(p, offsets.copy(), np.empty((K, N + 1, p.nx)), fb)
    X2 = rollout_batch(p, offsets.copy(), np.empty((K, N + 1, p.nx)), fb)
    np.testing.assert_array_equal(X1, X2)
