"""The sampling planners' rollouts through MuJoCo (``rollout="mujoco"``): the same controls give
the same states as stepping MuJoCo directly with ``mj_step`` (the oracle: one MjData, the
controls written to ``ctrl`` by hand, the state read back); a feedback policy is evaluated at the
rollouts' own states once per knot; a planner runs on HyQ with MuJoCo's contacts."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import tasks
from tasks.legged import with_penalty_cones
from dynamics.mujoco_state import ActuatorMap, read_state, write_state
from solvers.sampling import MPPI, PredictiveSampling
from solvers.sampling.mujoco_rollout import MujocoRollout
from solvers.sampling.policy import PDSetpoints


def _problem(name: str, horizon: int = 4, dt: float = 0.02):
    task = tasks.get_task(name, **with_penalty_cones(tasks.resolve_task(name), {}))   # planners refuse hard cones
    return task.build_problem(task.initial_state(), horizon, dt, backend="numpy")


def _mj_step_oracle(problem, controls_of, K: int) -> tuple[np.ndarray, np.ndarray]:
    """States (K, N+1, nx) and applied controls (K, N, nu) from a loop of mj_step: at knot t,
    u = controls_of(k, t, x) held for dt / timestep steps."""
    m = problem.model
    d = mujoco.MjData(m.mj_model)
    amap = ActuatorMap.for_model(m)
    steps = round(problem.dt / m.mj_model.opt.timestep)
    xs = np.empty((K, problem.horizon + 1, problem.nx))
    us = np.empty((K, problem.horizon, problem.nu))
    for k in range(K):
        mujoco.mj_resetData(m.mj_model, d)
        write_state(m, d, problem.x0)
        xs[k, 0] = read_state(m, d)
        for t in range(problem.horizon):
            us[k, t] = controls_of(k, t, xs[k, t])
            d.ctrl[amap.ids] = us[k, t] / amap.gain
            for _ in range(steps):
                mujoco.mj_step(m.mj_model, d)
            xs[k, t + 1] = read_state(m, d)
    return xs, us


@pytest.mark.parametrize("name", ["iiwa-reach", "hyq-stand"])
def test_open_loop_matches_mj_step(name):
    p = _problem(name)
    rng = np.random.default_rng(0)
    us = p.clip_controls(p.default_controls() + 5.0 * rng.normal(size=(3, p.horizon, p.nu)))
    xs = MujocoRollout(p, threads=2)(p, us.copy(), np.empty((3, p.horizon + 1, p.nx)))
    ref, _ = _mj_step_oracle(p, lambda k, t, x: us[k, t], 3)
    assert np.abs(ref[:, -1] - p.x0).max() > 1e-3          # the robot moved
    np.testing.assert_allclose(xs, ref, rtol=0, atol=1e-9)


def test_feedback_matches_mj_step():
    """PD set-points on HyQ (floating base: bias = the task's standing torques): the control of
    each knot is the law at the rollout's own MuJoCo state."""
    p = _problem("hyq-stand")
    fb = PDSetpoints(p)
    rng = np.random.default_rng(1)
    theta = fb.default() + 0.05 * rng.normal(size=(2, p.horizon, p.nu))
    us = theta.copy()
    xs = MujocoRollout(p)(p, us, np.empty((2, p.horizon + 1, p.nx)), fb)
    nq = p.model.nq

    def law(k, t, x):
        return p.clip_controls(fb.controls(theta[k, t][None], x[None, :nq], x[None, nq:])[0])
    ref, ref_us = _mj_step_oracle(p, law, 2)
    np.testing.assert_allclose(xs, ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(us, ref_us, rtol=0, atol=1e-9)


def test_planner_option_and_bad_input():
    p = _problem("hyq-stand", horizon=5)
    planner = MPPI(p, samples=8, noise=0.02, knots=3, seed=0, rollout="mujoco")
    assert planner.policy == "pd"
    res = planner.solve(max_iter=2)
    assert np.isfinite(res.cost) and res.iterations == 2
    oracle, _ = _mj_step_oracle(p, lambda k, t, x: res.us[t], 1)
    np.testing.assert_allclose(res.xs, oracle[0], rtol=0, atol=1e-9)      # the plan is MuJoCo's trajectory
    with pytest.raises(ValueError, match="rollout"):
        PredictiveSampling(p, rollout="gpu")
    with pytest.raises(ValueError, match="timestep"):
        PredictiveSampling(_problem("hyq-stand", dt=0.0155), rollout="mujoco")


def test_hyq_stands_with_mujoco_rollouts():
    """Closed loop in MuJoCo: predictive sampling (8 samples, 10 knots of 20 ms) through MuJoCo
    rollouts, with no contact schedule, keeps HyQ's trunk within 5 mm of its start height for 1 s
    (MuJoCo's own free-joint position): a smoke test of the planner on a floating base with
    MuJoCo's contacts (the 150 N push is measured in docs/solvers.md: too long for a test)."""
    from mpc import MPC
    from sim.runner import simulate
    task = tasks.get_task("hyq-stand", cones="penalty")
    ctrl = MPC(task, solver="sampling", backend="numpy", horizon=10, dt=0.02, initial_iterations=2, tol=0.0,
               solver_options={"samples": 8, "seed": 0, "rollout": "mujoco"})
    assert ctrl.solver.policy == "pd" and ctrl.solver.feedback.stiffness == 1.0
    res = simulate(task.model, ctrl, task.initial_state(), 1.0, update_every=20)
    assert res.completed, res.aborted
    z = res.x[:, 2]
    assert np.abs(z - z[0]).max() < 5e-3, f"trunk height moved {np.abs(z - z[0]).max() * 1e3:.1f} mm"
