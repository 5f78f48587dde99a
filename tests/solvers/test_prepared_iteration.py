"""The prepared iteration (:mod:`solvers.prepared_iteration`): in its common case (numba backend,
one Euler group of a hinge robot, every cost term compiled) a solve runs the same kernels on the
same inputs as the general path, so on one worker thread the trajectories and gains are bitwise
the general path's and the costs equal to the last bits (the fused rollout's copy of the cost
kernel is compiled in another context, where FMA contraction may differ), through cold and
warm-started solves, cost references and weights that change between solves, and a re-phased
horizon (on two threads, to rounding: the general path also sums one candidate's cost over the
threads' knot slices); the candidates' costs of the fused rollout equal the numpy reference's cost of the same
trajectories; anything outside the common case keeps the general path."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import DDP, FDDP, ILQR, ActionModel, ShootingProblem
from solvers.costs import ComPositionCost, ControlCost, CostSum, FramePositionCost, StateCost
from solvers.prepared_iteration import PreparedIteration

N = 8


def _problem(m, backend="numba", python_term=False):
    x0 = np.r_[m.keyframe("home"), np.zeros(m.nv)]
    running = CostSum({"ee": (FramePositionCost(m, "ee", np.tile([0.4, 0.1, 0.6], (N + 1, 1))), 10.0),
                       "state": (StateCost(m, x0, weights=np.r_[np.full(m.nv, 0.1), np.full(m.nv, 1.0)]), 1e-2),
                       "control": (ControlCost(m), 1e-4)})
    if python_term:
        running.add("com", ComPositionCost(m, [0.0, 0.0, 0.5]), 1e-3)
    terminal = CostSum({"ee": (FramePositionCost(m, "ee", [0.4, 0.1, 0.6]), 100.0), "state": (StateCost(m, x0), 1.0)})
    return ShootingProblem.uniform(m, x0, N, 0.01, running, terminal, backend=backend)


def _general(monkeypatch):
    monkeypatch.setattr(PreparedIteration, "build", classmethod(lambda cls, solver, cc: None))


def _mpc_like(solver_cls, m, rng):
    """Results of a cold solve, then warm-started one-iteration solves from perturbed states, with
    the target moved, the control weight replaced and the horizon re-phased in between."""
    p = _problem(m)
    s = solver_cls(p)
    out = []
    r = s.solve(max_iter=3)
    out.append(r)
    for i in range(4):
        xs, us = r.shifted(1)
        x = xs[0] + 1e-3 * rng.normal(size=xs.shape[1])
        p.set_initial_state(x)
        xs[0] = x
        if i == 1:
            p.running_cost["ee"].target = np.tile([0.3, -0.1, 0.7], (N + 1, 1))
        if i == 2:
            p.running_cost.set_weight("control", 2e-4)
        if i == 3:
            am = p.running_models
            p.set_running_models([ActionModel(m, am[0].cost, 0.01, am[0].dynamics)] * N)
        r = s.solve(xs_init=xs, us_init=us, max_iter=1)
        out.append(r)
    return s, out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("solver_cls", [ILQR, DDP, FDDP])
def test_prepared_iteration_gives_the_general_paths_results(bundled, solver_cls, threads, monkeypatch):
    m = bundled["iiwa"]
    be = _problem(m).backend
    be.set_threads(min(threads, be.max_threads))
    try:
        s, fast = _mpc_like(solver_cls, m, np.random.default_rng(3))
        assert s._fast is not None and s._fast.first_order == (solver_cls is not DDP)
        with monkeypatch.context() as mp:
            _general(mp)
            g, general = _mpc_like(solver_cls, m, np.random.default_rng(3))
            assert g._fast is None
    finally:
        be.set_threads(None)
    exact = threads == 1 or be.max_threads == 1
    for a, b in zip(fast, general):
        for k in ("xs", "us", "K", "k"):
            x, y = getattr(a, k), getattr(b, k)
            assert np.array_equal(x, y) if exact else np.allclose(x, y, rtol=1e-9, atol=1e-12), k
        assert np.allclose(a.cost_history, b.cost_history, rtol=1e-13, atol=0.0)
        assert a.step_sizes == b.step_sizes and a.iterations == b.iterations and a.reason == b.reason
        assert a.timings["forward"] > 0 and a.timings["cost"] > 0 and a.timings["derivatives"] > 0


def test_fused_candidate_costs_equal_the_numpy_reference(bundled, rng):
    m = bundled["iiwa"]
    p = _problem(m)
    s = ILQR(p)
    r = s.solve(max_iter=2)
    xs, us = r.shifted(1)
    s.solve(xs_init=xs, us_init=us, max_iter=1)
    fast = s._fast
    run, out = fast.candidates(3, None)
    alphas = np.array([1.0, 0.5, 0.0])
    J, share = run(p.x0, alphas)
    assert 0.0 < share < 1.0
    assert out.ok.all()
    ref = _problem(m, backend="numpy")
    ref.set_initial_state(p.x0)
    for i in range(3):
        want = float(ref.cost(out.X[i], out.U[i]))
        assert abs(J[i] - want) <= 1e-12 * abs(want), (i, J[i], want)
    # alpha = 0 with feedback around the iterate reproduces the iterate's rollout from x0
    assert np.allclose(out.U[2], s.us) and np.allclose(out.X[2], s.xs)


def test_outside_the_common_case_the_general_path_runs(bundled):
    m = bundled["iiwa"]
    for p in (_problem(m, backend="numpy"), _problem(m, python_term=True)):
        s = ILQR(p)
        r = s.solve(max_iter=2)
        assert s._fast is None and np.isfinite(r.cost)
    s = ILQR(_problem(m), compiled=False)
    s.solve(max_iter=1)
    assert s._fast is None
