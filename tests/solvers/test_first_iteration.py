"""A warm start's first iteration as one compiled call (:mod:`solvers.iteration_numba`,
:meth:`solvers.prepared_iteration.PreparedIteration.first_iteration`), its derivative stage spread
over the worker threads as the separate calls spread it: on one worker thread and on two (every
batch on its parallel variant, the cost's knots in two parts) the solves give, bitwise, what the
separate calls give (each stage's own call: the same kernels on the same buffers and slices) in
each of its outcomes — the full step taken, the full step rejected (the line search goes on from
its rollout), a feasible warm start, a backward pass that fails at the starting μ (DDP's
Gauss–Newton fallback takes over) — and the iiwa closed loop is unchanged; a non-finite warm start
is refused with the general checks' error, before anything is written."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from solvers import DDP, ILQR, ShootingProblem
from solvers.costs import ControlCost, CostSum, FramePositionCost, StateCost
from solvers.prepared_iteration import PreparedIteration

N = 16       # (17 knots: the cost kernel's two parts on two threads)


def _problem(m, target=(0.4, 0.1, 0.6)):
    x0 = np.r_[m.keyframe("home"), np.zeros(m.nv)]
    running = CostSum({"ee": (FramePositionCost(m, "ee", np.tile(target, (N + 1, 1))), 10.0),
                       "state": (StateCost(m, x0, weights=np.r_[np.full(m.nv, 0.1), np.full(m.nv, 1.0)]), 1e-2),
                       "control": (ControlCost(m), 1e-4)})
    terminal = CostSum({"ee": (FramePositionCost(m, "ee", list(target)), 100.0), "state": (StateCost(m, x0), 1.0)})
    return ShootingProblem.uniform(m, x0, N, 0.01, running, terminal, backend="numba")


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(bundled, request):
    """The backend on one worker thread, or on two with every batch sent to its parallel variant."""
    be = _problem(bundled["iiwa"]).backend
    threshold = be.parallel_threshold_us
    be.set_threads(request.param)
    if request.param > 1:
        be.parallel_threshold_us = 0.0
    yield request.param
    be.set_threads(None)
    be.parallel_threshold_us = threshold


def _separate(mp) -> None:
    """The prepared iteration's separate calls: no first-iteration call, no fused derivative stage."""
    mp.setattr(PreparedIteration, "_first_call", lambda self: ())

    def unfused(self, second):
        self._fused = ()
        return ()
    mp.setattr(PreparedIteration, "_fuse", unfused)


def _through(outcomes) -> int:
    """The calls that ran every stage: the full step taken inside the call ("accepted") or rolled out
    for the solver's line search ("full")."""
    return outcomes.get("full", 0) + outcomes.get("accepted", 0)


@pytest.fixture
def outcomes(monkeypatch):
    """The outcomes of every first-iteration call (None: it did not apply)."""
    seen = collections.Counter()
    first_iteration = PreparedIteration.first_iteration

    def recorded(self, *args):
        got = first_iteration(self, *args)
        seen[None if got is None else got[0]] += 1
        return got
    monkeypatch.setattr(PreparedIteration, "first_iteration", recorded)
    return seen


def _warm_solves(solver_cls, m, starts, separate: bool, monkeypatch, **options) -> list:
    """A cold solve, then one warm-started solve per ``(perturbation scale, seed)`` of ``starts``
    from the previous result shifted by one knot and its first state perturbed; ``separate``: with
    the first-iteration call switched off (the prepared iteration's separate calls)."""
    with monkeypatch.context() as mp:
        if separate:
            _separate(mp)
        p = _problem(m)
        s = solver_cls(p, **options)
        r = s.solve(max_iter=20)
        out = [r]
        for scale, seed in starts:
            xs, us = r.shifted(1)
            x = xs[0] + scale * np.random.default_rng(seed).normal(size=xs.shape[1])
            p.set_initial_state(x)
            if scale == 0.0:        # a feasible warm start: the rollout of the shifted controls from x0
                xs = s.solve(xs_init=None, us_init=us, max_iter=0).xs
            else:
                xs[0] = x
            r = s.solve(xs_init=xs, us_init=us, max_iter=1)
            out.append(r)
    return out


def _assert_same(a, b) -> None:
    for k in ("xs", "us", "K", "k"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    assert a.cost_history == b.cost_history and a.cost == b.cost
    assert (a.step_sizes, a.iterations, a.reason, a.gauss_newton_fallbacks, a.regularization) == \
        (b.step_sizes, b.iterations, b.reason, b.gauss_newton_fallbacks, b.regularization)


STARTS = [(1e-3, 1), (0.3, 2), (1e-3, 3), (0.0, 4), (2.0, 5), (1e-3, 6)]


@pytest.mark.parametrize("solver_cls", [ILQR, DDP])
def test_first_iteration_call_gives_the_separate_calls_results(bundled, solver_cls, threads, outcomes,
                                                               monkeypatch):
    m = bundled["iiwa"]
    fused = _warm_solves(solver_cls, m, STARTS, False, monkeypatch)
    ran = dict(outcomes)
    outcomes.clear()
    separate = _warm_solves(solver_cls, m, STARTS, True, monkeypatch)
    assert set(outcomes) <= {None}          # (switched off)
    # (DDP's curvature on this short horizon makes the first pass fail at every warm start: the
    # closed-loop test below has DDP's full steps)
    ran_through = _through(ran) if solver_cls is ILQR else _through(ran) + ran.get("backward failed", 0)
    assert ran_through == len(STARTS) - 1 and ran.get("feasible", 0) == 1, ran
    if solver_cls is ILQR:      # the full step taken inside the call, and one left to the line search
        assert ran.get("accepted", 0) >= 1 and ran.get("full", 0) >= 1, ran
    for a, b in zip(fused, separate):
        _assert_same(a, b)
    # a full step rejected (its cost above the guess's): the line search went on from its rollout
    assert any(r.step_sizes and r.step_sizes[0] != 1.0 for r in fused[1:]) or \
        any(len(r.cost_history) == 1 for r in fused[1:]), [r.step_sizes for r in fused]
    for r in fused[1:]:
        t = r.timings
        assert all(t[k] >= 0 for k in ("derivatives", "backward", "forward", "cost"))
        assert 0 < t["derivatives"] + t["backward"] + t["forward"] + t["cost"] <= t["total"]


def test_without_the_box(bundled, threads, outcomes, monkeypatch):
    """``box=False``: no clipped warm start, no bounds on the step; the same results as the separate calls."""
    m = bundled["iiwa"]
    fused = _warm_solves(ILQR, m, STARTS, False, monkeypatch, box=False)
    assert _through(outcomes) >= 3, dict(outcomes)
    separate = _warm_solves(ILQR, m, STARTS, True, monkeypatch, box=False)
    for a, b in zip(fused, separate):
        _assert_same(a, b)


def test_ddp_backward_failure_at_the_starting_mu_goes_on_as_the_general_pass(bundled, threads, outcomes,
                                                                            monkeypatch):
    """A DDP warm start far from the solution: the curvature makes ``Q_uu`` indefinite in the
    compiled call's pass; the solve goes on with the Gauss–Newton fallback as the separate calls do."""
    m = bundled["iiwa"]
    starts = [(3.0, seed) for seed in range(6)]
    fused = _warm_solves(DDP, m, starts, False, monkeypatch)
    assert outcomes.get("backward failed", 0) >= 1, dict(outcomes)
    separate = _warm_solves(DDP, m, starts, True, monkeypatch)
    for a, b in zip(fused, separate):
        _assert_same(a, b)
    assert any(r.gauss_newton_fallbacks for r in fused[1:])


def test_a_non_finite_warm_start_is_refused_before_anything_is_written(bundled, threads, outcomes):
    m = bundled["iiwa"]
    s = ILQR(_problem(m))
    r = s.solve(max_iter=2)
    xs, us = r.shifted(1)
    s.solve(xs_init=xs, us_init=us, max_iter=1)
    assert _through(outcomes) == 1
    kept = (s._xs_buf.copy(), s._us_buf.copy())
    bad_us = us.copy()
    bad_us[2, 1] = np.nan
    with pytest.raises(ValueError, match="us_init must be a finite"):
        s.solve(xs_init=xs, us_init=bad_us, max_iter=1)
    np.testing.assert_array_equal(s._xs_buf, kept[0])
    np.testing.assert_array_equal(s._us_buf, kept[1])
    bad_xs = xs.copy()
    bad_xs[3, 0] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        s.solve(xs_init=bad_xs, us_init=us, max_iter=1)
    assert outcomes.get("non-finite start", 0) == 2
    # a warm start of another dtype or layout takes the general steps, with the same result
    a = s.solve(xs_init=xs, us_init=us, max_iter=1)
    b = s.solve(xs_init=np.asfortranarray(xs), us_init=us.tolist(), max_iter=1)
    _assert_same(a, b)
    assert outcomes.get(None, 0) == 1


@pytest.mark.parametrize("solver", ["ilqr", "ddp"])
def test_iiwa_closed_loop_is_unchanged(bundled, solver, threads, outcomes, monkeypatch):
    """The iiwa-reach MPC (N = 16, 0.3 s in lockstep): every update's first iteration is the
    compiled call (iLQR: every one a full step; DDP: some with its Gauss–Newton fallback) and the
    trajectory is the separate calls' one, bitwise."""
    import tasks
    from mpc import MPC
    from sim.runner import simulate
    task = tasks.get_task("iiwa-reach")
    runs = []
    for separate in (False, True):
        with monkeypatch.context() as mp:
            if separate:
                _separate(mp)
            ctrl = MPC(task, solver=solver, backend="numba", horizon=16, dt=0.01)
            runs.append(simulate(task.model, ctrl, task.initial_state(), 0.3, mode="lockstep", update_every=10))
            if not separate:
                n = len(runs[0].updates)
                full = _through(outcomes)
                assert n > 0 and (full == n if solver == "ilqr" else 0 < full < n), dict(outcomes)
                assert full + outcomes.get("backward failed", 0) == n, dict(outcomes)
    a, b = runs
    assert a.aborted is None and b.aborted is None
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.u, b.u)


def _warm_solved(m) -> tuple:
    """``(solver, xs, us, plan)``: an iLQR solver after one warm-started solve on the prepared
    iteration, the warm start it took, and the fused stage's thread plan (row 0: the backend's
    batch, row 2: the cost kernel)."""
    s = ILQR(_problem(m))
    xs, us = s.solve(max_iter=2).shifted(1)
    s.solve(xs_init=xs, us_init=us, max_iter=1)
    return s, xs, us, s._fast._fused[3][8]


def test_two_threads_spread_the_stage_inside_the_call(bundled, outcomes):
    """On two worker threads (the default policy's count on two free cores at N = 16) the compiled
    call runs the backend's batch and the cost kernel on two threads, as the separate calls would
    (its plan; the results are checked above)."""
    m = bundled["iiwa"]
    be = _problem(m).backend
    threshold = be.parallel_threshold_us
    be.set_threads(2)
    be.parallel_threshold_us = 0.0
    try:
        s, xs, us, plan = _warm_solved(m)
        assert _through(outcomes) == 1 and plan[0] == 2 and plan[2] == 2 and plan[1] != 0 and plan[3] != 0
        be.set_threads(1)           # back on the calling thread: the drivers are not called
        s.solve(xs_init=xs, us_init=us, max_iter=1)
        assert _through(outcomes) == 2 and plan[0] == 1 and plan[2] == 1
    finally:
        be.set_threads(None)
        be.parallel_threshold_us = threshold


def test_stage_threads_follow_the_adaptive_policy(bundled, outcomes, monkeypatch):
    """The stage's thread counts are derived again when the adaptive policy chooses another count
    (they are kept between solves while worker_threads.epoch stays the same)."""
    from dynamics import worker_threads
    m = bundled["iiwa"]
    be = _problem(m).backend
    if be.max_threads < 2:
        pytest.skip("one numba thread")
    clock, others = [0.0], [0]
    mon = worker_threads.CoreMonitor(
        interval_s=0.05, window=1, clock=lambda: clock[0],
        read=lambda: worker_threads.LoadReading(running=1 + others[0], own_running=1, cpus=2))
    monkeypatch.setattr(worker_threads, "_monitor", mon)
    monkeypatch.setattr(worker_threads, "_policy", "adaptive")
    threshold = be.parallel_threshold_us
    be.set_threads(None)
    be.parallel_threshold_us = 0.0
    try:
        s, xs, us, plan = _warm_solved(m)
        assert _through(outcomes) == 1 and plan[0] == 2 and plan[2] == 2
        others[0] = 1                       # a neighbour, seen at the next reading only
        s.solve(xs_init=xs, us_init=us, max_iter=1)
        assert plan[0] == 2
        clock[0] += 0.06
        s.solve(xs_init=xs, us_init=us, max_iter=1)
        assert _through(outcomes) == 3 and plan[0] == 1 and plan[2] == 1
    finally:
        be.parallel_threshold_us = threshold


def test_the_warm_start_cost_is_summed_as_numpy_sums_it():
    """The compiled call takes the full step by comparing its cost with the warm start's, which it
    sums itself: bitwise what ``numpy.add.reduce`` gives (the general path's ``ProblemDerivatives.cost``),
    on every block length of numpy's pairwise summation and across magnitudes."""
    from solvers.iteration_numba import pairwise_sum
    rng = np.random.default_rng(7)
    for n in [*range(0, 140), 255, 256, 257, 1000, 4099]:
        for _ in range(5):
            a = rng.standard_normal(n) * 10.0 ** rng.integers(-9, 9, n)
            assert pairwise_sum(a) == np.add.reduce(a, axis=None), n
    assert np.signbit(pairwise_sum(np.array([-0.0]))) == np.signbit(np.add.reduce(np.array([-0.0])))


@pytest.mark.parametrize("change", ["bounds", "box", "weight", "target"])
def test_a_warm_solver_follows_what_is_replaced_between_solves(bundled, outcomes, change):
    """A solve keeps the last solve's prepared iteration and bounds while nothing they are derived
    from was replaced (``ILQR._start_solve``): replacing the control bounds, switching the box off,
    or replacing a cost weight or a cost's targets between two warm solves gives, bitwise, what a
    new solver gives, and not what the solve before the change gave."""
    m = bundled["iiwa"]
    p = _problem(m)
    s = ILQR(p, refresh_gains=False)        # (as the MPC controller: the gains of the call's pass)
    xs, us = s.solve(max_iter=20).shifted(1)
    p.set_initial_state(xs[0] + 1e-3 * np.random.default_rng(1).normal(size=xs.shape[1]))
    xs[0] = p.x0
    before = s.solve(xs_init=xs, us_init=us, max_iter=1)
    assert outcomes.get("accepted", 0) == 1 and before.gains_finite is True
    if change == "bounds":
        p.u_lower = p._bound("u_lower", np.full(m.nu, -2.0))
        p.u_upper = p._bound("u_upper", np.full(m.nu, 2.0))
    elif change == "box":
        p.u_lower = p._bound("u_lower", np.full(m.nu, -2.0))
        s.solve(xs_init=xs, us_init=us, max_iter=1)
        s.box = False
    elif change == "weight":
        p.running_cost.set_weight("control", 1.0)
    else:
        p.running_cost["ee"].target = np.tile((0.3, -0.2, 0.5), (N + 1, 1))
    a = s.solve(xs_init=xs, us_init=us, max_iter=1)
    fresh = ILQR(p, box=s.box, refresh_gains=False)
    b = fresh.solve(xs_init=xs, us_init=us, max_iter=1)
    _assert_same(a, b)
    assert not np.array_equal(a.us, before.us) or a.cost != before.cost
    assert _through(outcomes) >= 3, dict(outcomes)
