"""Closed-loop runner (sim/runner.py) with simple controllers written here (no solver needed):
timing modes, logging, clipping/violation bookkeeping, instability and error handling."""

from __future__ import annotations

import time

import numpy as np
import pytest

import dynamics
from mpc.plan import Plan
from sim.runner import simulate


class HoldPD:
    """Joint-space PD around ``q_target`` with gravity compensation, expressed as a one-knot plan
    (u_ff = g(q_target), K = [-Kp, -Kd]); optional artificial compute latency [s]; saturate: the
    plan saturates its command at the actuator limits (False: the runner has to clip it)."""

    def __init__(self, model, q_target, kp=200.0, kd=20.0, latency=0.0, sign=1.0, saturate=True):
        self.saturate = saturate
        self.m = model
        self.xt = np.r_[q_target, np.zeros(model.nv)]
        self.g = dynamics.get_backend("numpy").gravity_torques(model, q_target)
        self.K = sign * np.hstack([-kp * np.eye(model.nv), -kd * np.eye(model.nv)])[None]
        self.latency = latency
        self.calls = []

    def _plan(self, t):
        return Plan(self.m, t, 0.01, np.tile(self.xt, (2, 1)), self.g[None], self.K,
                    info={"timings": {"derivatives": 1e-4, "backward": 2e-4, "forward": 1e-4, "cost": 1e-5},
                          "iterations": 1}, saturate=self.saturate)

    def start(self, t, x):
        return self._plan(t)

    def update(self, t, x):
        self.calls.append(t)
        if self.latency:
            time.sleep(self.latency)
        return self._plan(t)


@pytest.fixture(scope="module")
def iiwa():
    return dynamics.load_model("iiwa")


def _x0(m):
    return np.r_[m.keyframe("home"), np.zeros(m.nv)]


def test_lockstep_pd_reaches_target_and_logs(iiwa):
    m = iiwa
    qt = m.keyframe("home") + 0.2
    ctrl = HoldPD(m, qt)
    r = simulate(m, ctrl, _x0(m), 1.0, mode="lockstep", update_every=10)
    assert r.completed and r.mode == "lockstep"
    assert len(r.t) == 1000 and r.x.shape == (1000, 14) and r.u.shape == (1000, 7)
    # updates every 10 steps, from the state of that very step, applied at once
    np.testing.assert_allclose(ctrl.calls, np.arange(1, 100) * 0.01, atol=1e-12)
    assert all(u.t_applied == u.t_measured for u in r.updates)
    assert r.updates[0].info["iterations"] == 1
    assert np.max(r.plan_age) < 0.01 + 1e-12
    # MuJoCo's arm: started 0.2 rad away, ends near the target and at rest
    assert np.abs(r.x[0, :7] - qt).min() > 0.19
    assert np.abs(r.x[-1, :7] - qt).max() < 0.03
    assert np.abs(r.x[-1, 7:]).max() < 0.05


def test_lockstep_is_reproducible(iiwa):
    m = iiwa
    qt = m.keyframe("home") - 0.1
    a = simulate(m, HoldPD(m, qt), _x0(m), 0.3, update_every=7)
    b = simulate(m, HoldPD(m, qt, latency=0.002), _x0(m), 0.3, update_every=7)
    np.testing.assert_array_equal(a.x, b.x)  # compute time never changes a lockstep run


def test_realtime_applies_plans_after_their_latency(iiwa):
    m = iiwa
    qt = m.keyframe("home") + 0.1
    lat = 0.02
    ctrl = HoldPD(m, qt, latency=lat)
    r = simulate(m, ctrl, _x0(m), 0.3, mode="realtime", update_every=5)
    assert r.completed and len(r.updates) >= 3
    applied = [u for u in r.updates if u.t_applied is not None]
    for u in applied:
        assert u.t_applied - u.t_measured >= u.latency - 1e-9           # never before it was computed
        assert u.t_applied - u.t_measured <= u.latency + r.physics_dt + 1e-9
    # the controller is busy while computing: starts are at least one latency apart
    starts = np.array([u.t_measured for u in r.updates])
    assert np.all(np.diff(starts) >= lat - 1e-9)
    # the plan in use is always older than the compute latency (after the first switch)
    k0 = int(round(applied[0].t_applied / r.physics_dt))
    assert np.min(r.plan_age[k0:]) >= lat - 1e-9
    # MuJoCo's arm still moves towards the target under the delayed plans
    err = np.abs(r.x[:, :7] - qt).max(axis=1)
    assert err[-1] < 0.5 * err[0]


def test_realtime_slow_controller_updates_less_often_with_older_plans(iiwa):
    """Same update period (10 ms); a 60 ms compute latency stretches it and ages the plans.
    (That this hurts tracking with a real MPC is checked in test_mpc_closed_loop.py.)"""
    m = iiwa
    qt = m.keyframe("home") + 0.3
    fast = simulate(m, HoldPD(m, qt), _x0(m), 0.4, mode="realtime", update_every=10)
    slow = simulate(m, HoldPD(m, qt, latency=0.06), _x0(m), 0.4, mode="realtime", update_every=10)
    assert len(fast.updates) >= 35 and len(slow.updates) <= 7
    assert np.median(slow.plan_age) > np.median(fast.plan_age) + 0.05


def test_command_clipping_is_counted(iiwa):
    """A law that ignores the limits: the runner clips what it applies and records the command."""
    m = iiwa
    qt = m.keyframe("home") + 1.0  # far away with stiff gains: saturates
    r = simulate(m, HoldPD(m, qt, kp=5000, kd=50, saturate=False), _x0(m), 0.1, update_every=10)
    assert np.all(r.u <= m.u_upper + 1e-12) and np.all(r.u >= m.u_lower - 1e-12)
    over = (r.u_cmd > m.u_upper) | (r.u_cmd < m.u_lower)
    assert over[0].any()                                   # 1 rad x 5000 N m/rad from the first step
    np.testing.assert_array_equal(r.u[over], np.clip(r.u_cmd, m.u_lower, m.u_upper)[over])
    np.testing.assert_array_equal(r.u[~over], r.u_cmd[~over])


def test_saturating_plan_commands_inside_the_limits(iiwa):
    """The same stiff law as a plan that respects the box: its command is already saturated, so
    nothing is left to clip, and MuJoCo's arm moves towards the target without diverging."""
    m = iiwa
    qt = m.keyframe("home") + 1.0
    r = simulate(m, HoldPD(m, qt, kp=5000, kd=50), _x0(m), 0.1, update_every=10)
    assert np.all(r.u_cmd <= m.u_upper) and np.all(r.u_cmd >= m.u_lower)
    np.testing.assert_array_equal(r.u, r.u_cmd)
    assert np.any(r.u_cmd == m.u_upper)                    # driven to the limit
    assert np.all(np.isfinite(r.x))
    assert np.linalg.norm(r.x[-1, :7] - qt) < 0.6 * np.linalg.norm(r.x[0, :7] - qt)


def test_unstable_run_is_stopped_with_a_reason(iiwa):
    m = iiwa
    ctrl = HoldPD(m, m.keyframe("home"), kp=300, kd=30, sign=-1.0)  # positive feedback
    x0 = _x0(m)
    x0[0] += 0.05
    r = simulate(m, ctrl, x0, 3.0, update_every=10, max_speed=3.0)
    assert not r.completed and "unstable" in r.aborted
    assert len(r.t) < 3000


def test_controller_exception_is_reported(iiwa):
    m = iiwa

    class Broken(HoldPD):
        def update(self, t, x):
            raise FloatingPointError("solver diverged")

    r = simulate(m, Broken(m, m.keyframe("home")), _x0(m), 0.2, update_every=10)
    assert not r.completed and "FloatingPointError: solver diverged" in r.aborted and len(r.t) == 10
    assert r.error_traceback.startswith("Traceback") and "in update" in r.error_traceback
    assert r.error_traceback.rstrip().endswith("FloatingPointError: solver diverged")


def test_bad_arguments(iiwa):
    m = iiwa
    c = HoldPD(m, m.keyframe("home"))
    with pytest.raises(ValueError, match="unknown mode"):
        simulate(m, c, _x0(m), 1.0, mode="fast")
    with pytest.raises(ValueError, match="duration"):
        simulate(m, c, _x0(m), -1.0)
    with pytest.raises(ValueError, match="update_every"):
        simulate(m, c, _x0(m), 1.0, update_every=0)
    with pytest.raises(ValueError, match="shape"):
        simulate(m, c, np.zeros(3), 1.0)
    hyq = dynamics.load_model("hyq")
    with pytest.raises(ValueError, match="does not match"):
        simulate(m, c, _x0(m), 1.0, mj_model=hyq.mj_model)
