"""Humanoid walk: the biped contact schedule (phases, touchdown impulse knots, CoM lean, swing-sole
height targets) and a short lockstep closed loop of Atlas taking its first step in MuJoCo
(assertions on what MuJoCo measured: pelvis height, sole contacts, sole tilt at touchdown)."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.biped_gait import BipedGait


def test_biped_schedule_phases_and_impulses():
    g = BipedGait(swing_time=0.4, double_support_time=0.1, start_time=0.5, shift_time=0.3)
    assert g.cycle == pytest.approx(1.0) and g.stance_time == pytest.approx(0.6)
    # (time, soles down): standing, sole 0 swings, double support, sole 1 swings, double support
    for t, want in ((0.2, (1, 1)), (0.55, (0, 1)), (0.85, (0, 1)), (0.95, (1, 1)), (1.05, (1, 0)),
                    (1.35, (1, 0)), (1.45, (1, 1)), (1.55, (0, 1))):
        assert tuple(g.contact_state(t).astype(int)) == want, t
    sched = g.knot_schedule(0.4, 40, 0.05)
    kinds = [k for _, k in sched]
    impulses = [i for i, k in enumerate(kinds) if k[0] == "impulse"]
    assert [kinds[i][1] for i in impulses] == [0, 1, 0]                 # sole 0 lands, then 1, then 0
    assert [sched[i][0] for i in impulses] == pytest.approx([0.9, 1.4, 1.9])
    for i in impulses:
        j = kinds[i][1]
        assert not kinds[i - 1][j] and kinds[i - 1][1 - j]              # swinging before, the other down
        assert kinds[i + 1] == (True, True)                             # double support after
    assert sum(1 for k in kinds if k[0] != "impulse") == 40 - len(impulses)
    # the CoM leans over the stance sole during a swing, crosses during double support
    assert g.com_side(0.1) == 0.0 and g.com_side(0.5) == pytest.approx(-1.0)
    assert g.com_side(0.7) == pytest.approx(-1.0) and g.com_side(1.2) == pytest.approx(1.0)
    assert g.com_side(0.95) == pytest.approx(0.0, abs=1e-12)
    assert g.swing_window(0.7, 0) == pytest.approx((0.5, 0.9))
    assert g.swing_window(0.95, 0) == pytest.approx((1.5, 1.9))        # down: its next swing
    assert g.swing_window(0.2, 1) == pytest.approx((1.0, 1.4))
    with pytest.raises(ValueError, match="swing_time"):
        BipedGait(0.0, 0.1, 0.5)


def test_swing_targets_follow_the_schedule():
    from tasks import get_task
    task = get_task("humanoid-walk")
    dt = 0.03
    problem = task.build_problem(task.initial_state(), 20, dt, backend="numpy")
    lo, td = task.gait.swing_window(task.start_time, 0)
    t = lo - 0.03                                    # the whole swing of sole 0 inside the horizon
    task.update_problem(problem, t)
    sched = task.gait.knot_schedule(t, 20, dt)
    times = np.array([tk for tk, _ in sched] + [sched[-1][0] + dt])
    z = task._swing_z[0].target
    ground = task._ground[0]
    # the profile: up and down over the first (1 - land_early) of the swing, then held at the floor
    t_down = lo + (1.0 - task.land_early) * (td - lo)
    s = np.clip((times - lo) / (t_down - lo), 0.0, 1.0)
    swinging = (times > lo) & (times < td)
    assert swinging.sum() >= 10
    np.testing.assert_allclose(z[swinging] - ground,
                               task.step_height * np.sin(np.pi * s[swinging]) ** 2, atol=1e-12)
    mid = np.argmin(np.abs(times - 0.5 * (lo + t_down)))
    assert z[mid] - ground == pytest.approx(task.step_height, rel=0.05)
    assert np.allclose(z[(times >= t_down) | (times <= lo)], ground)
    # the running models: the swinging knots carry the swing terms of sole 0, the impulse knot its foothold
    names = [set(am.cost.terms) for am in problem.running_models]
    k_imp = next(i for i, (_, k) in enumerate(sched) if k[0] == "impulse")
    assert sched[k_imp][1] == ("impulse", 0) and "impact" in names[k_imp]
    assert "touchdown_vel" in names[k_imp - 1] and "swing_z" in names[k_imp - 1]
    # the foothold is ahead of where the sole lifted off (forward command)
    hold = task._impact[0].target[k_imp]
    assert hold[0] > task._soles0[0][1][0] + 0.02
    assert hold[2] == pytest.approx(ground)


def test_atlas_takes_a_step_in_mujoco():
    """Lockstep closed loop, 1.3 s: standing for one horizon (0.6 s), the left sole swings for
    0.5 s and lands; judged from MuJoCo's state and contacts."""
    from mpc import MPC
    from sim.runner import simulate
    from tasks import get_task
    task = get_task("humanoid-walk", duration_s=1.3)
    d = task.defaults
    ctrl = MPC(task, solver=d.solver, backend="numba", horizon=d.horizon, dt=d.dt,
               iterations_per_update=task.defaults.iterations)
    ctrl.warmup()
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep",
                 update_every=round(d.period / task.model.mj_model.opt.timestep))
    assert r.aborted is None, r.aborted
    t, x = r.t[::5], r.x[::5]
    z0 = task.standing_height
    assert np.all(np.abs(x[:, 2] - z0) < 0.05 * z0), (x[:, 2].min(), x[:, 2].max(), z0)
    c = task.foot_contacts(x)                                   # MuJoCo contacts, every 5 ms
    lo, td = task.gait.swing_window(task.start_time, 0)
    swing = (t > lo + 0.05) & (t < td - 0.05)
    assert (~c[swing, 0]).mean() > 0.9 and c[swing, 1].all(), (c[swing, 0].mean(), c[swing, 1].mean())
    assert c[t > td + 0.1].all()                                # both soles down after the touchdown
    downs = task.touchdowns(t, x, c)
    assert downs and downs[0][1] == 0 and abs(downs[0][0] - td) < 0.05, downs
    assert downs[0][2] < task.touchdown_tilt_tolerance, downs
    soles = task.foot_positions(x)
    assert soles[-1, 0, 0] - soles[0, 0, 0] > 0.03              # the left sole moved forward
    assert x[-1, 0] - x[0, 0] > 0.0
