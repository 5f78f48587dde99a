"""A solver without hard constraints (iLQR, DDP, FDDP) refuses a problem that has some, instead of
silently ignoring them; CSQP takes it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from solvers import CSQP, DDP, FDDP, ILQR, ActionModel, ShootingProblem

from .problems import iiwa_wall


@pytest.mark.parametrize("solver", [ILQR, DDP, FDDP])
def test_unconstrained_solver_refuses_constrained_problem(solver):
    p = iiwa_wall(N=3, backend="numpy")
    assert not solver.handles_constraints
    with pytest.raises(ValueError, match=r"3 of its 3 running knots and the terminal knot.*CSQP.*--solver csqp"):
        solver(p)
    solver(iiwa_wall(N=3, backend="numpy", constrained=False))     # the same problem without them: accepted


def test_refusal_counts_only_the_constrained_knots():
    p = iiwa_wall(N=3, backend="numpy")
    run_c, term_c = p.running_models[0], p.terminal_model
    run_f, term_f = dataclasses.replace(run_c, constraints=()), dataclasses.replace(term_c, constraints=())
    one = ShootingProblem(p.x0, [run_f, run_c, run_f], term_f, backend="numpy")
    with pytest.raises(ValueError, match=r"FDDP does not handle hard constraints.* 1 of its 3 running knots and not "
                                         r"the terminal knot"):
        FDDP(one)
    term = ShootingProblem(p.x0, [run_f] * 3, term_c, backend="numpy")
    with pytest.raises(ValueError, match=r"0 of its 3 running knots and the terminal knot"):
        ILQR(term)
    assert CSQP.handles_constraints
    assert isinstance(run_c, ActionModel) and np.isfinite(CSQP(one, box=False).solve(max_iter=1).cost)
