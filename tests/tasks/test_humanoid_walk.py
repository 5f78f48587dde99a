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


def test_a_touchdown_inside_the_first_knot_is_its_impulse():
    """Sole 0 lands at 0.9 s. A horizon from 0.89 s (30 ms knots: the first knot's middle is past the
    touchdown, the sole still in the air at its start) begins with the touchdown impulse, so the
    falling sole is not held as a rigid contact at its velocity (``--seed 2`` fell at such a
    touchdown, 9.09 s: the sole was kicked to 1.1 m/s); from 0.88 s the impulse follows the swing
    knot, and from the touchdown itself there is none."""
    g = BipedGait(swing_time=0.4, double_support_time=0.1, start_time=0.5)
    kinds = [k for _, k in g.knot_schedule(0.89, 4, 0.03)]
    assert kinds == [("impulse", 0), (True, True), (True, True), (True, True)]
    kinds = [k for _, k in g.knot_schedule(0.88, 4, 0.03)]
    assert kinds == [(False, True), ("impulse", 0), (True, True), (True, True)]
    kinds = [k for _, k in g.knot_schedule(0.9, 3, 0.03)]
    assert kinds == [(True, True)] * 3
    probe = g.swing_probes(g.knot_schedule(0.89, 4, 0.03), 0.03)
    assert g.swing_window(float(probe[0]), 0) == pytest.approx((0.5, 0.9))   # the swing that ends there


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


@pytest.fixture(scope="module")
def walk():
    from tasks import get_task
    return get_task("humanoid-walk")


def test_standing_torques_do_not_hold_a_perturbed_double_support(walk):
    """Why a perturbed start broke the first solve: with both soles as rigid 6-D contacts, the
    standing posture under the constant standing torques is unstable — the one-knot map (30 ms) has
    an eigenvalue of about 3 (a ~37/s mode of the hips, knees and back), so the solver's default
    guess, those torques rolled out open loop over 20 knots, amplifies a 0.01 rad perturbation by
    ~1e9 and diverges. Checked by finite differences of the model's step (numpy backend)."""
    from dynamics import get_backend
    m, be, dt = walk.model, get_backend("numpy"), 0.03
    p = walk.build_problem(walk.x_stand, 4, dt, backend=be)
    step = p.running_models[0].dynamics.integrated(m, be, dt).step
    x0, u = walk.x_stand, walk.u_stand
    f0 = step(x0, u)
    assert np.abs(f0 - x0).max() < 1e-9                    # an equilibrium of the model
    idx = np.r_[7:m.nq, m.nq:m.nq + m.nv]                  # joint positions and all velocities
    A = np.empty((idx.size, idx.size))
    for c, i in enumerate(idx):
        x = x0.copy()
        x[i] += 1e-6
        A[:, c] = (step(x, u)[idx] - f0[idx]) / 1e-6
    assert np.abs(np.linalg.eigvals(A)).max() > 2.0


@pytest.mark.parametrize("seed", [1, 2])
def test_first_solve_from_a_perturbed_start_retries_from_the_held_state(walk, seed):
    """The run's ``--seed`` 1 and 2 starts: the solver's default guess fails (seed 2: the open-loop
    rollout diverges; seed 1: it stays finite at ~1e75 and no step can be taken), so the first plan
    used to be non-finite (a ValueError) or garbage that every later update failed from (a
    rank-deficient impulse at 0.54 s). The MPC retries from the measured state held at every knot:
    a finite plan that keeps Atlas standing."""
    from dynamics import default_backend_name
    from mpc import MPC
    from mpc.cli import perturbed_initial_state
    d = walk.defaults
    ctrl = MPC(walk, solver=d.solver, backend=default_backend_name(), horizon=d.horizon, dt=d.dt,
               initial_iterations=10)
    x = perturbed_initial_state(walk.model, walk.initial_state(), seed)
    p = ctrl.problem
    p.set_initial_state(x)
    walk.update_problem(p, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):     # the diverging default guess overflows
        own = ctrl.solver.solve(max_iter=10)                # the solver's own guess: fails
        assert own.iterations == 0 and not own.converged, own.reason
        plan = ctrl.start(0.0, x)
    rec = ctrl.initial_record
    assert rec.iterations > 0 and "retried from the held state" in rec.reason, rec.reason
    assert np.all(np.isfinite(plan.xs)) and np.all(np.isfinite(plan.us))
    z0 = walk.standing_height
    assert np.abs(plan.xs[:, 2] - z0).max() < 0.03, plan.xs[:, 2]


def test_two_sole_impulse_stays_full_rank_with_straight_knees(walk):
    """The touchdown impulse holds both soles as 6-D contacts (as Crocoddyl's biped example does at
    a foot switch). That set is not what made ``--seed 1`` rank deficient: each sole's Jacobian is
    full rank through the free-flyer columns, so J M⁻¹ Jᵀ of the pair stays well conditioned with
    one or both knees straight (MuJoCo's mass matrix), and the impulse evaluates there."""
    import mujoco

    from dynamics import get_backend
    m, be = walk.model, get_backend("numpy")
    mj = m.mj_model
    d = mujoco.MjData(mj)

    def conditioning(q):
        d.qpos[:] = q
        mujoco.mj_forward(mj, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(mj, d, M)
        J = np.concatenate([be.frame_jacobian(m, q, f, "local") for f in walk.feet])
        e = np.linalg.eigvalsh(J @ np.linalg.solve(M, J.T))
        return e[0] / e[-1]

    q = walk.x_stand[:m.nq].copy()
    assert conditioning(q) > 1e-5
    for knee in ("l_leg_kny", "r_leg_kny"):
        q[mj.jnt_qposadr[mj.joint(knee).id]] = 0.0
        assert conditioning(q) > 1e-5, knee
    v_plus, _ = be.impulse_dynamics(m, q, np.ones(m.nv) * 0.1, walk.contacts, 0.0)
    assert np.all(np.isfinite(v_plus))
