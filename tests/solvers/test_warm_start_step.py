"""The first step from an infeasible warm start (:func:`solvers.line_search.warm_start_step`): the
full step alone when it costs no more than the guess, else the comparison with α = 0 and, failing
that, the cheapest of every step size — checked on a scripted rollout whose buffers are reused from
call to call, as the solvers' rollout buffers are."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers import ILQR
from solvers.line_search import Candidates, default_alphas, warm_start_step

ALPHAS = default_alphas(4)          # 1, 1/2, 1/4, 1/8


class ScriptedRollout:
    """``rollout(alphas)``: candidate α has states and controls filled with α and cost ``costs[α]``
    (inf: a failed candidate); every call writes into the same buffers (one per batch size)."""

    def __init__(self, costs: dict):
        self.costs, self.calls, self._buffers = costs, [], {}

    def __call__(self, alphas: np.ndarray) -> Candidates:
        self.calls.append([float(a) for a in alphas])
        S = alphas.shape[0]
        if S not in self._buffers:
            self._buffers[S] = (np.empty((S, 3, 2)), np.empty((S, 2, 1)))
        xs, us = self._buffers[S]
        for s, a in enumerate(alphas):
            xs[s], us[s] = a, a
        cost = np.array([self.costs[float(a)] for a in alphas])
        return Candidates(xs, us, cost, np.isfinite(cost))


def _costs(c1, c0, rest=(9.0, 9.0, 9.0)):
    return {1.0: c1, 0.0: c0, **dict(zip(ALPHAS[1:].tolist(), rest))}


def test_full_step_alone_when_it_costs_no_more_than_the_guess():
    r = ScriptedRollout(_costs(4.0, 3.0))      # α = 0 is cheaper, but α = 1 beats the guess
    ls = warm_start_step(r, ALPHAS, guess_cost=4.0)
    assert r.calls == [[1.0]]
    assert ls.accepted and ls.alpha == 1.0 and ls.cost == 4.0 and ls.evaluated == 1
    assert np.all(ls.xs == 1.0) and np.all(ls.us == 1.0)


def test_full_step_against_alpha_zero_when_it_costs_more_than_the_guess():
    r = ScriptedRollout(_costs(5.0, 6.0))
    ls = warm_start_step(r, ALPHAS, guess_cost=4.0)
    assert r.calls == [[1.0], [0.0]]
    # the full step's arrays survive the α = 0 rollout into the same buffers
    assert ls.accepted and ls.alpha == 1.0 and ls.cost == 5.0 and ls.evaluated == 2
    assert np.all(ls.xs == 1.0) and np.all(ls.us == 1.0)


@pytest.mark.parametrize("c1, c0, rest, alpha, cost", [
    (7.0, 6.0, (9.0, 2.0, 9.0), 0.25, 2.0),      # a smaller step is the cheapest
    (7.0, 6.0, (9.0, 9.0, 9.0), 0.0, 6.0),       # α = 0 is the cheapest
    (np.inf, 6.0, (5.0, 9.0, 9.0), 0.5, 5.0),    # the full step failed
])
def test_cheapest_of_every_step_size_otherwise(c1, c0, rest, alpha, cost):
    for guess in (4.0, None):           # with the guess's cost, and the comparison without it
        r = ScriptedRollout(_costs(c1, c0, rest))
        ls = warm_start_step(r, ALPHAS, guess_cost=guess)
        assert r.calls == ([[1.0], [0.0]] if guess is not None else [[1.0, 0.0]]) + [ALPHAS[1:].tolist()]
        assert ls.accepted and ls.alpha == alpha and ls.cost == cost and ls.evaluated == ALPHAS.size + 1
        assert np.all(ls.xs == alpha) and np.all(ls.us == alpha)


def test_without_a_finite_guess_cost_alpha_one_and_zero_together():
    for guess in (None, np.nan, np.inf):
        r = ScriptedRollout(_costs(4.0, 5.0))
        ls = warm_start_step(r, ALPHAS, guess_cost=guess)
        assert r.calls == [[1.0, 0.0]] and ls.alpha == 1.0 and ls.evaluated == 2


def test_every_candidate_failed():
    r = ScriptedRollout(_costs(np.inf, np.inf, (np.inf,) * 3))
    ls = warm_start_step(r, ALPHAS, guess_cost=1.0)
    assert not ls.accepted and ls.xs is None and ls.cost == np.inf and ls.evaluated == ALPHAS.size + 1


def test_warm_solve_rolls_out_the_full_step_alone_when_it_beats_the_guess(monkeypatch):
    """A receding-horizon warm start of iLQR (the shifted solution from the next state): its first
    line search is the α = 1 rollout alone when that costs no more than the guess (the solve's first
    cost), and the step taken is the one the comparison with α = 0 takes too. (On the numba backend
    that rollout is part of the first iteration's compiled call,
    :meth:`solvers.prepared_iteration.PreparedIteration.first_iteration`.)"""
    from solvers.prepared_iteration import PreparedIteration
    outcomes = []
    first_iteration = PreparedIteration.first_iteration

    def recorded(self, *args):
        got = first_iteration(self, *args)
        outcomes.append(None if got is None else got[0])
        return got
    monkeypatch.setattr(PreparedIteration, "first_iteration", recorded)
    task = tasks.get_task("iiwa-reach")
    problem = task.build_problem(task.initial_state(), 10, 0.02)
    r = ILQR(problem).solve(max_iter=30, tol=1e-8)
    xs, us = r.shifted(1)
    problem.set_initial_state(r.xs[1] + 1e-3)
    solver = ILQR(problem)
    calls = []
    rollout = solver._rollout

    def counted(alphas):
        calls.append([float(a) for a in alphas])
        return rollout(alphas)
    solver._rollout = counted
    w = solver.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0)
    assert w.step_sizes == [1.0] and w.cost <= w.cost_history[0] and w.finite
    if outcomes and outcomes[-1] in ("full", "accepted"):   # the full step rolled out in the compiled call, alone
        assert calls == []
    else:
        assert calls == [[1.0]]
    # the step the comparison of α = 1 with α = 0 alone (no guess cost) takes: the same, bitwise
    pair = ILQR(problem)
    pair._line_search = lambda: warm_start_step(pair._rollout, pair.alphas)
    p = pair.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0)
    assert p.step_sizes == [1.0]
    assert np.array_equal(p.xs, w.xs) and np.array_equal(p.us, w.us) and np.array_equal(p.K, w.K)
