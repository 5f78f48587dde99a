"""Quadruped trot: ``update_problem`` keeps the phase-only part of each horizon per gait phase
(:meth:`tasks.quadruped_trot.QuadrupedTrot._phase_pattern`); over more than a gait cycle of
updates, from perturbed states, the re-phased problem equals the one computed afresh every update."""

from __future__ import annotations

import math

import numpy as np

from tasks.registry import get_task


def _phase_key(task, problem) -> list:
    return [next(k for k, v in task._phase_models.items() if v is m) for m in problem.running_models]


def test_cached_rephasing_equals_rephasing_afresh():
    N, dt = 12, 0.01
    a, b = get_task("hyq-trot", cones="penalty"), get_task("hyq-trot", cones="penalty")
    pa = a.build_problem(a.initial_state(), N, dt, backend="numpy")
    pb = b.build_problem(b.initial_state(), N, dt, backend="numpy")
    rng = np.random.default_rng(3)
    ts = np.arange(0.0, a.start_time + 1.5 * a.cycle, dt)
    hits = 0
    for t in ts:
        x = a.initial_state() + 0.01 * rng.normal(size=pa.x0.shape)
        x[3:7] /= np.linalg.norm(x[3:7])
        pa.set_initial_state(x)
        pb.set_initial_state(x)
        before = len(a._pattern_cache[1]) if hasattr(a, "_pattern_cache") else 0
        a.update_problem(pa, t)
        hits += len(a._pattern_cache[1]) == before and t >= a.start_time + dt
        b._pattern_cache = (None, {})      # b: every update computed afresh
        b.update_problem(pb, t)
        assert _phase_key(a, pa) == _phase_key(b, pb), f"t = {t}: other phase models"
        np.testing.assert_array_equal(a.nominal_controls(pa), b.nominal_controls(pb))
        # the same bits: a phase's pattern is computed at one time per phase, cached or not
        for ca, cb in zip(a._state_costs, b._state_costs):
            np.testing.assert_array_equal(ca.reference, cb.reference)
        for j in range(4):
            for ca, cb in ((a._swing_z[j], b._swing_z[j]), (a._swing_xy[j], b._swing_xy[j]),
                           (a._impact[j], b._impact[j])):
                np.testing.assert_array_equal(ca.target, cb.target, err_msg=f"t = {t}, foot {j}")
    # the second pass over the cycle's phases found them kept
    assert hits >= round(0.4 * a.cycle / dt)


def _swing_window_by_decimals(task, t: float, foot: int) -> tuple[float, float]:
    """The swing window of ``foot`` around t as written down from the gait's definition, knot by
    knot in Python scalars (``round`` to 1 ns by decimal rounding)."""
    pair = 0 if foot in task.pairs[0] else 1
    offset = task.start_time + pair * (task.swing_time + task.double_support_time)
    t = round(float(t), 9)
    n = math.floor(round((t - offset) / task.cycle, 9))
    lo = offset + max(n, 0) * task.cycle
    if t >= round(lo + task.swing_time, 9):
        lo += task.cycle
    return lo, lo + task.swing_time


def test_swing_windows_match_the_schedule():
    """The swing windows of a whole horizon's probes, found in one vectorised call, are those of the
    gait's definition probe by probe (exactly, on probes at and around phase switches too)."""
    N, dt = 12, 0.01
    for yaw in (0.0, 0.5):
        task = get_task("hyq-trot", cones="penalty", yaw_rate=yaw)
        task.build_problem(task.initial_state(), N, dt, backend="numpy")      # sets the gait's start
        probes = []
        for t in np.arange(task.start_time - 2 * dt, task.start_time + 1.5 * task.cycle, dt / 2):
            probes.append(task.swing_probes(task.knot_schedule(float(t), N, dt), dt))
        switches = task.start_time + np.arange(6)[:, None] * task.cycle + np.array(
            [0.0, task.swing_time, task.swing_time + task.double_support_time, 2 * task.swing_time
             + task.double_support_time])[None]
        probes.append(switches.ravel()[:, None] + np.array([-1e-9, -4e-10, 0.0, 4e-10, 1e-9, 1e-12])[None])
        probes = np.concatenate([np.ravel(p) for p in probes])
        for foot in range(4):
            lo, td = task.swing_windows(probes, foot)
            want = np.array([_swing_window_by_decimals(task, pk, foot) for pk in probes.tolist()])
            np.testing.assert_array_equal(lo, want[:, 0])
            np.testing.assert_array_equal(td, want[:, 1])
            assert task.swing_window(float(probes[7]), foot) == tuple(want[7])


def test_straight_footholds_during_the_ramp():
    """Straight ahead while the command ramps up, updates off the knot grid: every touchdown target
    of an update (the impulse knots' foothold, the swing path's end) is the foot's standing position
    (MuJoCo's kinematics) shifted by the trunk's x now, its travel until the touchdown (the ramped
    command integrated by the trapezoid rule on a fine grid) and half the stance stride at the
    touchdown's command."""
    import mujoco

    N, dt = 16, 0.02
    task = get_task("hyq-trot", cones="penalty", ramp_time=0.8)
    problem = task.build_problem(task.initial_state(), N, dt, backend="numpy")
    mj = task.model.mj_model
    d = mujoco.MjData(mj)
    d.qpos[:] = task.x_stand[:mj.nq]
    mujoco.mj_kinematics(mj, d)
    feet0 = np.array([d.site(f).xpos for f in task.feet])
    v, a, r = task.velocity, task.start_time, task.ramp_time

    def command(tau):
        return v * np.clip((tau - a) / r, 0.0, 1.0)

    def travel(t0, t1):
        grid = np.linspace(t0, t1, 20001)
        return float(np.trapezoid(command(grid), grid))

    seen = 0
    for t in np.arange(a - 0.05, a + r + 0.1, 0.013):
        x = task.initial_state()
        x[0] += 0.05 + 0.1 * t
        problem.set_initial_state(x)
        task.update_problem(problem, float(t))
        for k, (tk, kind) in enumerate(task.knot_schedule(float(t), N, dt)):
            if kind[0] != "impulse":
                continue
            td = task.swing_window(tk - 0.5 * dt, kind[1][0])[1]     # the swing this impulse ends
            for j in kind[1]:
                want = feet0[j, :2] + [x[0] - task.x_stand[0] + travel(t, td) + 0.5 * task.stance_time
                                       * command(td), 0.0]
                np.testing.assert_allclose(task._impact[j].target[k][:2], want, atol=1e-8, err_msg=f"t={t}")
                np.testing.assert_allclose(task._swing_xy[j].target[k][:2], want, atol=1e-8)
                seen += 1
    assert seen > 20


def test_kept_compiled_costs_take_the_new_references_after_a_rephase():
    """A knot structure met again a gait cycle later gets its kept compiled costs back, and the
    references and targets moved since then reach them: the compiled total equals the Python path's
    (each term's own value, with the contact solves), before and after the return."""
    N, dt = 12, 0.01
    task = get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), N, dt, backend="numba")
    rng = np.random.default_rng(5)

    def check(t, shift):
        x = task.initial_state()
        x[0] += shift
        p.set_initial_state(x)
        task.update_problem(p, t)
        xs = np.repeat(x[None], N + 1, axis=0) + 0.003 * rng.normal(size=(N + 1, x.size))
        xs[:, 3:7] /= np.linalg.norm(xs[:, 3:7], axis=-1, keepdims=True)
        us = np.array(task.nominal_controls(p)) + rng.normal(size=(N, p.nu))
        want = p.costs.running(xs, us).sum() + p.costs.terminal(xs[-1])
        np.testing.assert_allclose(p.costs.total(xs, us), want, rtol=1e-9)
        return p.costs.compiled()

    t0 = task.start_time + task.swing_time - 0.05     # a touchdown impulse inside the horizon
    first = check(t0, 0.0)
    assert first is not None
    shifted = check(t0 + dt, 0.02)                # shifted by a knot: another structure
    assert shifted is not first
    again = check(t0 + task.cycle, 0.3)           # same structure, the trunk 0.3 m further ahead
    assert again is first
    # at most MAX_KEPT_COMPILED kept, the least recently used dropped first
    p.costs.MAX_KEPT_COMPILED = 2
    check(t0 + 2 * dt, 0.0)                       # a third structure: `shifted` goes, `first` stays
    assert check(t0 + task.cycle, 0.1) is first
    assert check(t0 + dt, 0.05) is not shifted


def test_kept_knot_structures_equal_structures_built_afresh():
    """A running-model sequence met again (the gait's next cycle) gets its kept knot structure back,
    and every structure equals the one built afresh from the same models."""
    from solvers.knots import KnotStructure

    N, dt = 12, 0.01
    task = get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), N, dt, backend="numpy")
    seen: dict = {}
    reused = 0
    for t in np.arange(task.start_time - 2 * dt, task.start_time + 2.2 * task.cycle, dt):
        task.update_problem(p, float(t))
        s = p.structure
        key = tuple(map(id, s.running_models))
        reused += seen.get(key) is s
        seen[key] = s
        fresh = KnotStructure.build(s.running_models, p._integrated_model)
        np.testing.assert_array_equal(s.dts, fresh.dts)
        np.testing.assert_array_equal(s.cost_scales, fresh.cost_scales)
        assert s.common_dt == fresh.common_dt
        for name in ("dynamics_groups", "cost_groups"):
            a, b = getattr(s, name), getattr(fresh, name)
            assert [g.item for g in a] == [g.item for g in b], name
            for ga, gb in zip(a, b):
                np.testing.assert_array_equal(ga.knots, gb.knots)
                assert ga.rows == gb.rows if ga.contiguous else np.array_equal(ga.rows, gb.rows)
        assert list(s.knot_dynamics) == list(fresh.knot_dynamics)
    assert reused > 0
