"""Against Crocoddyl: the same iiwa reaching problem (same model file, armature, costs, weights,
symplectic Euler) solved by Crocoddyl's FDDP reaches the same cost as our solvers — uniform,
with per-knot dt and weights, and as a two-phase problem of different cost terms and dt.

Crocoddyl 3.2.1 needs pin 4.0.0 (it crashes in calcDiff with pin 4.1); the ``test`` extra pins
that pair, so these tests run in the README's test command and in CI.
"""

from __future__ import annotations

import numpy as np
import pytest

croc = pytest.importorskip("crocoddyl", reason="crocoddyl is not installed in this environment (see docs/solvers.md)")

import tasks  # noqa: E402
from solvers import DDP, FDDP, ILQR, ActionModel, ControlCost, CostSum, FramePositionCost, FreeDynamics, \
    ShootingProblem, StateCost  # noqa: E402
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


def _solve_crocoddyl(p, max_iter=300):
    xs0, us0 = p.initial_guess()
    solver = croc.SolverFDDP(build_crocoddyl_problem(p))
    solver.th_stop = 1e-14
    solver.solve(list(xs0), list(us0), max_iter, False)
    return solver


def _assert_same_optimum(p, backends=("numpy", "numba")):
    solver = _solve_crocoddyl(p)
    for backend in backends:
        q = ShootingProblem(p.x0, p.running_models, p.terminal_model, backend=backend)
        for S in (ILQR, DDP, FDDP):
            r = S(q).solve(max_iter=100, tol=1e-7)
            assert abs(r.cost - solver.cost) <= 1e-8 * solver.cost, (backend, S.name, r.cost, solver.cost, r.reason)
            assert np.abs(r.us - np.array(solver.us)).max() < 1e-3 * np.abs(r.us).max(), (backend, S.name)


def _costs(task, w_ee, w_u, target):
    m, nv = task.model, task.model.nv
    x_ref = task.initial_state()
    running = CostSum({
        "ee": (FramePositionCost(m, "ee", target), w_ee),
        "state": (StateCost(m, x_ref, np.r_[np.full(nv, 1e-2), np.full(nv, 1e-1)]), 1.0),
        "control": (ControlCost(m, task.u_gravity), w_u),
    })
    terminal = CostSum({"ee": (FramePositionCost(m, "ee", target), 10 * w_ee),
                        "state": (StateCost(m, x_ref, np.r_[np.full(nv, 1e-2), np.full(nv, 1.0)]), 1.0)})
    return running, terminal


def test_per_knot_dt_and_weights_same_optimum_as_crocoddyl():
    """Every knot its own dt and its own end-effector weight (one action model per knot)."""
    task = tasks.get_task("iiwa-reach")
    m = task.model
    dyn = FreeDynamics(passive_forces=False)
    dts = np.linspace(0.02, 0.04, N)
    target = task.targets[0]
    models = []
    for t in range(N):
        running, _ = _costs(task, 50.0 + 10.0 * t, 1e-3, target)
        models.append(ActionModel(m, running, dts[t], dyn))
    _, terminal = _costs(task, 100.0, 1e-3, target)
    p = ShootingProblem(task.initial_state(), models, ActionModel(m, terminal, 0.0, dyn), backend="numpy")
    assert len(p.dynamics_groups) == N and len(p.cost_groups) == N
    np.testing.assert_array_equal(p.dts, dts)
    _assert_same_optimum(p)


def test_per_knot_weights_in_one_cost_object_same_optimum_as_crocoddyl():
    """Per-knot weights as an array inside one cost (one cost group, one batched evaluation)."""
    task = tasks.get_task("iiwa-reach")
    m = task.model
    dyn = FreeDynamics(passive_forces=False)
    running, terminal = _costs(task, 1.0, 1e-3, task.targets[0] + np.array([0.0, 0.05, 0.0]))
    running.terms["ee"] = (running.terms["ee"][0], np.linspace(20.0, 200.0, N + 1))
    am = ActionModel(m, running, DT, dyn)
    p = ShootingProblem(task.initial_state(), [am] * N, ActionModel(m, terminal, 0.0, dyn), backend="numpy")
    assert len(p.cost_groups) == 1
    _assert_same_optimum(p)


def test_two_phase_problem_same_optimum_as_crocoddyl():
    """First half: reach target 1 with dt = 0.02; second half: another target, other weights
    and dt = 0.04 (two dynamics groups, two cost groups)."""
    task = tasks.get_task("iiwa-reach")
    m = task.model
    dyn = FreeDynamics(passive_forces=False)
    run_a, _ = _costs(task, 100.0, 1e-3, task.targets[0])
    run_b, terminal = _costs(task, 300.0, 3e-3, task.targets[0] + np.array([0.05, 0.0, -0.05]))
    run_b = CostSum({"ee": run_b.terms["ee"],                      # other posture weight in the second phase,
                     "state": (run_b.terms["state"][0], 3.0),       # and a control term without gravity reference
                     "control": (ControlCost(m, np.zeros(m.nu)), 1e-3)})
    phase_a = ActionModel(m, run_a, 0.02, dyn)
    phase_b = ActionModel(m, run_b, 0.04, dyn)
    p = ShootingProblem(task.initial_state(), [phase_a] * (N // 2) + [phase_b] * (N - N // 2),
                        ActionModel(m, terminal, 0.0, dyn), backend="numpy")
    assert len(p.dynamics_groups) == 2 and len(p.cost_groups) == 2
    _assert_same_optimum(p)
