"""The MPC policy respects the box (issue #10, "Limits the policy respects").

* Gains of controls clamped in the box QP are zero, on the compiled path (numba backend) as on
  the Python reference path (numpy backend), for iLQR, DDP and FDDP.
* The command ``u = ū + K (x ⊖ x̄)`` is saturated at the actuator limits: a horizon sweep
  N ∈ {8, 16, 32} × {ilqr, ddp, fddp} in lockstep on iiwa-reach (two targets, a switch at 0.4 s,
  when short horizons are most aggressive), judged on what MuJoCo measured (commands inside the
  limits, joints inside their ranges, finite states, both targets reached in time).
"""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
import solvers
import tasks
from mpc import MPC
from sim.runner import simulate
from tasks.iiwa_reach import DEFAULT_TARGETS

SWITCH = 0.4         # s per target: each is reached in 0.05-0.25 s at every horizon
DURATION = 2 * SWITCH


@pytest.fixture(scope="module")
def reach():
    return tasks.get_task("iiwa-reach")


def _clamped(us, k, lower, upper, tol=1e-9):
    """Controls the box QP clamped: the step's end ``us + k`` sits on a bound."""
    un = us + k
    return np.isclose(un, lower, rtol=0, atol=tol) | np.isclose(un, upper, rtol=0, atol=tol)


@pytest.mark.parametrize("name", ["ILQR", "DDP", "FDDP"])
def test_gains_of_clamped_controls_are_zero_on_both_backends(reach, name):
    """Tight bounds (30 % of the actuator limits) so that many controls are clamped; the rows of K
    for those are exactly zero on both backends, the free rows are not, and both backends agree."""
    m = reach.model
    out = {}
    for backend in ("numpy", "numba"):
        if backend == "numba" and dynamics.default_backend_name() != "numba":
            pytest.skip("numba is not installed: the compiled path cannot be checked here")
        p = reach.build_problem(reach.initial_state(), 16, 0.01, backend=backend,
                                u_lower=0.3 * m.u_lower, u_upper=0.3 * m.u_upper)
        r = getattr(solvers, name)(p, refresh_gains=True).solve(max_iter=10, tol=1e-8)
        assert np.all(np.isfinite(r.K)) and np.all(np.isfinite(r.us)), r.reason
        clamped = _clamped(r.us, r.k, p.u_lower, p.u_upper)
        assert clamped.sum() >= 10, f"{backend}: only {clamped.sum()} controls clamped; the check needs some"
        rows = np.abs(r.K).max(axis=2)                       # (N, nu): largest gain of each control
        assert np.all(rows[clamped] == 0.0), f"{backend}: clamped controls with gains {rows[clamped].max():.3g}"
        assert np.all(rows[~clamped] > 1.0), f"{backend}: a free control has (almost) no feedback"
        out[backend] = r
    a, b = out["numpy"], out["numba"]
    np.testing.assert_array_equal(_clamped(a.us, a.k, 0.3 * m.u_lower, 0.3 * m.u_upper),
                                  _clamped(b.us, b.k, 0.3 * m.u_lower, 0.3 * m.u_upper))
    np.testing.assert_allclose(b.K, a.K, rtol=1e-6, atol=1e-6 * np.abs(a.K).max())


@pytest.mark.parametrize("solver", ["ilqr", "ddp", "fddp"])
@pytest.mark.parametrize("N", [8, 16, 32])
def test_horizon_sweep_commands_stay_inside_the_limits(N, solver):
    """Short horizons make the controller aggressive (at N = 8 the unsaturated policy asks for
    more than the actuators give); the command must still stay inside the limits and the arm must
    neither diverge nor hit its joint limits. The soft joint-limit term (``w_limits``) is on: at
    N = 8 the 80 ms horizon sees the limit of joint 4 too late without it (docs/mpc.md)."""
    task = tasks.get_task("iiwa-reach", targets=DEFAULT_TARGETS[:2], switch_period=SWITCH, w_limits=1e5)
    m = task.model
    backend = dynamics.default_backend_name()
    ctrl = MPC(task, solver=solver, backend=backend, horizon=N, dt=0.01, initial_iterations=20)
    ctrl.warmup()
    r = simulate(m, ctrl, task.initial_state(), DURATION, mode="lockstep", update_every=10)
    assert r.completed, r.aborted
    assert len(r.t) == round(DURATION / r.physics_dt)
    assert np.all(np.isfinite(r.x))
    # the controller's command, at every physics step, inside the actuator limits
    assert np.all(r.u_cmd <= m.u_upper + 1e-9) and np.all(r.u_cmd >= m.u_lower - 1e-9), (
        f"largest excess {max(np.max(r.u_cmd - m.u_upper), np.max(m.u_lower - r.u_cmd)):.3g} N m")
    np.testing.assert_array_equal(r.u, r.u_cmd)              # nothing left for the actuators to clip
    # MuJoCo's joints inside their ranges, speeds bounded (iiwa: a few rad/s; divergence is far more)
    q = r.x[:, :m.nq]
    assert np.all(q <= m.q_upper + 1e-6) and np.all(q >= m.q_lower - 1e-6)
    assert np.abs(r.x[:, m.nq:]).max() < 50.0
    ev = task.evaluate(r.t, r.x, r.u_cmd)
    assert ev["target 0 time to reach"].value < SWITCH and ev["target 1 time to reach"].value < SWITCH, ev
    assert ev["torque limit"].value == 0.0 and ev.success
    if N == 8:
        # the saturation is exercised: the short-horizon policy drives some torque to its limit
        at_limit = np.isclose(r.u_cmd, m.u_upper, rtol=0, atol=1e-9) | np.isclose(r.u_cmd, m.u_lower, rtol=0,
                                                                                       atol=1e-9)
        assert at_limit.any()
