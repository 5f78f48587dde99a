"""Any number of backends can be bound in one process: two numba backends (different thread
counts) and a user's subclass solve the same problem through the compiled rollout and compiled
cost kernel, interleaved, and agree with the numpy reference path."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from dynamics.numba_backend import NumbaBackend
from solvers import ILQR

N, DT = 8, 0.02


class UsersNumba(NumbaBackend):
    """A user's backend that specialises nothing: it must get the compiled paths all the same."""
    name = "users-numba"


@pytest.fixture(scope="module")
def task():
    return tasks.get_task("iiwa-reach")


def _solve(task, backend):
    problem = task.build_problem(task.initial_state(), N, DT, backend=backend)
    solver = ILQR(problem, box=True)
    r = solver.solve(max_iter=2, tol=0.0)
    return solver, r


def test_backends_share_the_compiled_paths(task):
    reference = _solve(task, "numpy")[1]
    results = []
    for backend in (NumbaBackend(threads=1), UsersNumba(threads=2), NumbaBackend(threads=2), UsersNumba(threads=1)):
        solver, r = _solve(task, backend)
        assert solver.forward.uses_compiled_rollout, type(backend).__name__
        assert solver.problem.costs.compiled() is not None, type(backend).__name__
        results.append(r)
    for r in results:
        np.testing.assert_allclose(r.us, reference.us, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(r.xs, reference.xs, rtol=1e-8, atol=1e-10)
