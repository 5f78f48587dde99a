"""The warm solve's shortcuts keep its results' independence and its checks: a returned result is
left untouched by the next solve (its timings are the solve's own dict, not a copy), and the μ
schedule, validated once per distinct ``reg_params``, is validated again when they change."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers import ILQR


@pytest.fixture(scope="module", params=["numpy", "numba"])
def solver(request) -> ILQR:
    """numpy: the general path; numba: the prepared iteration (one-candidate rollouts included)."""
    task = tasks.get_task("iiwa-reach")
    return ILQR(task.build_problem(task.initial_state(), 4, 0.02, backend=request.param))


def test_a_result_is_not_changed_by_the_next_solve(solver):
    first = solver.solve(max_iter=2, tol=0.0)
    kept = {name: np.array(getattr(first, name)) for name in ("xs", "us", "K", "k")}
    timings = dict(first.timings)
    xs, us = first.shifted(1)
    second = solver.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0)
    assert second.timings is not first.timings and first.timings == timings
    for name, value in kept.items():
        np.testing.assert_array_equal(getattr(first, name), value)
    assert solver.reg.mu == second.regularization
    if solver.problem.backend.prefers_compiled_solver:
        assert solver._prepared is not None        # the fast path ran


def test_changed_regularization_parameters_are_validated_at_the_next_solve(solver):
    solver.solve(max_iter=1)
    saved = dict(solver.reg_params)
    try:
        solver.reg_params["mu_min"] = 10.0 * saved["mu"]     # mu_min > mu: invalid
        with pytest.raises(ValueError, match="mu_min"):
            solver.solve(max_iter=1)
    finally:
        solver.reg_params.update(saved)
    assert solver.solve(max_iter=1).regularization >= saved["mu_min"]
