"""The prepared iteration's derivative stage as one compiled call (:mod:`solvers.derivative_stage_numba`):
iLQR and DDP take it, on one worker thread and on two (the backend's batches then spread over both
from inside the call, as its separate call spreads them), and it writes what the separate calls
write (the Euler inputs, the backend's prepared ``aba_derivatives``, the Euler Jacobians, the cost
derivatives, DDP's second-order tensors and Hessian), bitwise; the dynamics Jacobians it gives match
the numpy reference backend's; a backend without compiled kernels hands out none
(``Backend.prepare_aba_derivatives_call``)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import DDP, ILQR

from tests.solvers.test_prepared_iteration import _problem, _warm_solver


def _outputs(s) -> list[np.ndarray]:
    """Every array the derivative stage writes (the solver's own buffers, not copies)."""
    d = s.data.dynamics
    out = [d.xnext, d.Fx, d.Fu, s.data.cost_block, d.states.acc.a, d.states.acc.partials, d.states.tau]
    if d.T is not None:
        out += [d.T, d.A2]
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("solver_cls", [ILQR, DDP])
def test_fused_stage_writes_what_the_separate_calls_write(bundled, solver_cls, threads):
    m = bundled["iiwa"]
    be = _problem(m).backend
    if be.max_threads < threads:
        pytest.skip("one numba thread")
    threshold = be.parallel_threshold_us
    be.set_threads(threads)
    be.parallel_threshold_us = 0.0 if threads > 1 else threshold    # (every batch on its parallel variant)
    try:
        s, p = _warm_solver(solver_cls, m)
        fast = s._fast
        assert fast is not None and fast._fused
        timings = {"derivatives": 0.0}
        fast.derivatives(timings)
        plan = fast._fused[3][8]
        assert plan[0] == threads and (solver_cls is ILQR or plan[4] == threads)
        fused = [a.copy() for a in _outputs(s)]
        assert timings["derivatives"] > 0.0
        # the separate calls on the same iterate, into the same buffers (NaN first: all written)
        kept = fast._fused
        fast._fused = ()
        for a in _outputs(s):
            a.fill(np.nan)
        fast.derivatives(timings)
        fast._fused = kept
        for x, y in zip(fused, _outputs(s)):
            np.testing.assert_array_equal(x, y)
    finally:
        be.set_threads(None)
        be.parallel_threshold_us = threshold
    # oracle: the numpy reference backend's Jacobians and cost derivatives at the same iterate
    ref = _problem(m, backend="numpy")
    ref.set_initial_state(p.x0)
    r = ref.derivatives(s.xs, s.us)
    np.testing.assert_allclose(fused[1], r.dynamics.Fx, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fused[2], r.dynamics.Fu, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.data.running.lx, r.running.lx, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.data.terminal.lxx, r.terminal.lxx, rtol=1e-9, atol=1e-9)


def test_a_backend_without_compiled_kernels_hands_out_none(bundled, rng):
    from dynamics import get_backend
    m = bundled["iiwa"]
    B, nv = 2, m.nv
    q = np.ascontiguousarray(m.random_configuration(rng, B))
    v, tau = rng.normal(size=(B, nv)), rng.normal(size=(B, nv))
    npb = get_backend("numpy")
    assert npb.prepare_aba_derivatives_call(m, q, v, tau, np.empty((3, B, nv, nv)), np.empty((B, nv))) is None
    assert npb.prepare_aba_second_derivatives_call(m, q, v, tau, np.empty((4, B, nv, nv, nv))) is None
    nb = get_backend("numba")
    with pytest.raises(ValueError, match="prepare_aba_derivatives: out"):
        nb.prepare_aba_derivatives_call(m, q, v, tau, np.empty((3, B, nv)), np.empty((B, nv)))
    call = nb.prepare_aba_derivatives_call(m, q, v, tau, np.empty((3, B, nv, nv)), np.empty((B, nv)))
    assert call.batch == B and call.address > 0 and call.serial()      # 2 iiwa states: below the threshold
