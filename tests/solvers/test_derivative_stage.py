"""The prepared iteration's derivative stage as one compiled call (:mod:`solvers.derivative_stage_numba`):
on one worker thread iLQR and DDP take it, and it writes what the separate calls write (the Euler
inputs, the backend's prepared ``aba_derivatives``, the Euler Jacobians, the cost derivatives, DDP's
second-order tensors and Hessian), bitwise; the dynamics Jacobians it gives match the numpy
reference backend's; where a stage would spread over the worker threads the separate calls run;
a backend without compiled kernels hands out none (``Backend.prepare_aba_derivatives_call``)."""

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


@pytest.mark.parametrize("solver_cls", [ILQR, DDP])
def test_fused_stage_writes_what_the_separate_calls_write(bundled, solver_cls):
    m = bundled["iiwa"]
    be = _problem(m).backend
    be.set_threads(1)
    try:
        s, p = _warm_solver(solver_cls, m)
        fast = s._fast
        assert fast is not None and fast._fused and fast._fused[0]()
        timings = {"derivatives": 0.0}
        fast.derivatives(timings)
        fused = [a.copy() for a in _outputs(s)]
        assert timings["derivatives"] > 0.0
        # the separate calls on the same iterate, into the same buffers (NaN first: all written)
        applies, run = fast._fused
        fast._fused = (lambda: False, run)
        for a in _outputs(s):
            a.fill(np.nan)
        fast.derivatives(timings)
        fast._fused = (applies, run)
        for x, y in zip(fused, _outputs(s)):
            np.testing.assert_array_equal(x, y)
    finally:
        be.set_threads(None)
    # oracle: the numpy reference backend's Jacobians and cost derivatives at the same iterate
    ref = _problem(m, backend="numpy")
    ref.set_initial_state(p.x0)
    r = ref.derivatives(s.xs, s.us)
    np.testing.assert_allclose(fused[1], r.dynamics.Fx, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fused[2], r.dynamics.Fu, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.data.running.lx, r.running.lx, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s.data.terminal.lxx, r.terminal.lxx, rtol=1e-9, atol=1e-9)


def test_on_several_threads_the_separate_calls_run(bundled, monkeypatch):
    m = bundled["iiwa"]
    be = _problem(m).backend
    if be.max_threads < 2:
        pytest.skip("one numba thread: the fused stage always applies")
    be.set_threads(2)
    try:
        s, _ = _warm_solver(ILQR, m)
        fast = s._fast
        assert fast._fused and not fast._fused[0]()     # the cost kernel would split N + 1 = 9 knots over 2
        calls = []
        monkeypatch.setattr(fast, "_fused", (fast._fused[0], lambda: calls.append(1)))
        fast.derivatives({"derivatives": 0.0})
        assert not calls
    finally:
        be.set_threads(None)


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
