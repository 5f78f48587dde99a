"""Quadruped trot: ``update_problem`` keeps the phase-only part of each horizon per gait phase
(:meth:`tasks.quadruped_trot.QuadrupedTrot._phase_pattern`); over more than a gait cycle of
updates, from perturbed states, the re-phased problem equals the one computed afresh every update."""

from __future__ import annotations

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
        b._pattern_cache = (None, {})          # b: every update computed afresh
        b.update_problem(pb, t)
        assert _phase_key(a, pa) == _phase_key(b, pb), f"t = {t}: other phase models"
        np.testing.assert_array_equal(a.nominal_controls(pa), b.nominal_controls(pb))
        for ca, cb in zip(a._state_costs, b._state_costs):
            np.testing.assert_allclose(ca.reference, cb.reference, rtol=0, atol=1e-12)
        for j in range(4):
            for ca, cb in ((a._swing_z[j], b._swing_z[j]), (a._swing_xy[j], b._swing_xy[j]),
                           (a._impact[j], b._impact[j])):
                np.testing.assert_allclose(ca.target, cb.target, rtol=0, atol=1e-12, err_msg=f"t = {t}, foot {j}")
    # the second pass over the cycle's phases found them kept
    assert hits >= round(0.4 * a.cycle / dt)
