"""Against Crocoddyl: the same iiwa reaching problem (same model file, armature, costs, weights,
symplectic Euler) solved by Crocoddyl's FDDP reaches the same cost as our solvers.

Crocoddyl 3.2.1 on PyPI needs pin 4.0.0 (it crashes in calcDiff with pin 4.1), so it lives in its
own environment; see docs/solvers.md ("Comparing with Crocoddyl"):

    python3 -m venv /work/venv-croc
    /work/venv-croc/bin/pip install crocoddyl pin==4.0.0 numpy scipy numba mujoco pytest
    PYTHONPATH=. /work/venv-croc/bin/python -m pytest tests/test_solvers_crocoddyl.py
"""

from __future__ import annotations

import numpy as np
import pytest

croc = pytest.importorskip("crocoddyl", reason="crocoddyl is not installed in this environment (see docs/solvers.md)")

import tasks  # noqa: E402
from solvers import DDP, FDDP, ILQR  # noqa: E402
from solvers.crocoddyl_problem import build_crocoddyl_problem  # noqa: E402

N, DT = 16, 0.03


def _problem(**opts):
    task = tasks.get_task("iiwa-reach")
    return task, task.build_problem(task.initial_state(), N, DT, passive_forces=False, **opts)


def test_same_dynamics_and_costs():
    task, p = _problem()
    cp = build_crocoddyl_problem(p)
    rng = np.random.default_rng(0)
    xs = np.concatenate([task.model.random_configuration(rng, N + 1), rng.normal(size=(N + 1, 7))], axis=-1)
    us = rng.normal(size=(N, 7)) * 10
    assert cp.calc(list(xs), list(us)) == pytest.approx(p.cost(xs, us), rel=1e-12)
    for t in (0, N - 1):
        d = cp.runningModels[t].createData()
        cp.runningModels[t].calc(d, xs[t], us[t])
        assert np.abs(d.xnext - p.step(xs[t], us[t])).max() < 1e-12


def test_crocoddyl_fddp_reaches_the_same_cost():
    task, p = _problem()
    xs0, us0 = p.initial_guess()
    solver = croc.SolverFDDP(build_crocoddyl_problem(p))
    solver.th_stop = 1e-14
    solver.solve(list(xs0), list(us0), 200, False)
    ours = {S.name: S(p).solve(max_iter=100, tol=1e-7) for S in (ILQR, DDP, FDDP)}
    for name, r in ours.items():
        assert abs(r.cost - solver.cost) <= 1e-8 * solver.cost, (name, r.cost, solver.cost, r.reason)
        assert np.abs(r.us - np.array(solver.us)).max() < 1e-3 * np.abs(r.us).max()


def test_box_fddp_matches_crocoddyl_box_fddp():
    hi = np.array([20.0, 80.0, 20.0, 20.0, 20.0, 20.0, 20.0])
    task, p = _problem(u_lower=-hi, u_upper=hi)
    xs0, us0 = p.initial_guess()
    solver = croc.SolverBoxFDDP(build_crocoddyl_problem(p, bounds=True))
    solver.th_stop = 1e-14
    solver.solve(list(xs0), list(us0), 300, False)
    r = FDDP(p, box=True).solve(max_iter=100, tol=1e-7)
    assert r.converged, r.reason
    assert np.all(np.abs(r.us) <= hi)
    assert abs(r.cost - solver.cost) <= 1e-6 * solver.cost, (r.cost, solver.cost)
