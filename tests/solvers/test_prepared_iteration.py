"""The prepared iteration (:mod:`solvers.prepared_iteration`): in its common case (numba backend,
one Euler group of a hinge robot, every cost term compiled) a solve runs the same kernels on the
same inputs as the general path, so on one worker thread the trajectories and gains are bitwise
the general path's and the costs equal to the last bits (the fused rollout's copy of the cost
kernel is compiled in another context, where FMA contraction may differ), through cold and
warm-started solves, cost references and weights that change between solves, and a re-phased
horizon (on two threads, to rounding: the general path also sums one candidate's cost over the
threads' knot slices); the candidates' costs of the fused rollout equal the numpy reference's cost of the same
trajectories; anything outside the common case keeps the general path."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import DDP, FDDP, ILQR, ActionModel, ShootingProblem
from solvers.costs import ControlCost, CostSum, FramePositionCost, StateCost
from solvers.prepared_iteration import PreparedIteration

N = 8


class _PlainSpeedCost:
    """A plain-Python residual term (joint velocities), which the compiled cost kernel cannot run."""

    def __init__(self, nq: int, nv: int):
        self.nq, self.nv = nq, nv

    def residual(self, x, u):
        return x[:, self.nq:self.nq + self.nv]

    def residual_jacobian(self, x, u):
        J = np.zeros((x.shape[0], self.nv, 2 * self.nv))
        J[:, :, self.nv:] = np.eye(self.nv)
        return J, np.zeros((x.shape[0], self.nv, u.shape[1]))


def _problem(m, backend="numba", python_term=False, second_order="auto"):
    x0 = np.r_[m.keyframe("home"), np.zeros(m.nv)]
    running = CostSum({"ee": (FramePositionCost(m, "ee", np.tile([0.4, 0.1, 0.6], (N + 1, 1))), 10.0),
                       "state": (StateCost(m, x0, weights=np.r_[np.full(m.nv, 0.1), np.full(m.nv, 1.0)]), 1e-2),
                       "control": (ControlCost(m), 1e-4)})
    if python_term:
        running.add("speed", _PlainSpeedCost(m.nq, m.nv), 1e-3)
    terminal = CostSum({"ee": (FramePositionCost(m, "ee", [0.4, 0.1, 0.6]), 100.0), "state": (StateCost(m, x0), 1.0)})
    return ShootingProblem.uniform(m, x0, N, 0.01, running, terminal, backend=backend, second_order=second_order)


def _general(monkeypatch):
    monkeypatch.setattr(PreparedIteration, "build", classmethod(lambda cls, solver, cc: None))


def _mpc_like(solver_cls, m, rng):
    """Results of a cold solve, then warm-started one-iteration solves from perturbed states, with
    the target moved, the control weight replaced and the horizon re-phased in between."""
    p = _problem(m)
    s = solver_cls(p)
    out = []
    r = s.solve(max_iter=3)
    out.append(r)
    for i in range(4):
        xs, us = r.shifted(1)
        x = xs[0] + 1e-3 * rng.normal(size=xs.shape[1])
        p.set_initial_state(x)
        xs[0] = x
        if i == 1:
            p.running_cost["ee"].target = np.tile([0.3, -0.1, 0.7], (N + 1, 1))
        if i == 2:
            p.running_cost.set_weight("control", 2e-4)
        if i == 3:
            am = p.running_models
            p.set_running_models([ActionModel(m, am[0].cost, 0.01, am[0].dynamics)] * N)
        r = s.solve(xs_init=xs, us_init=us, max_iter=1)
        out.append(r)
    return s, out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("solver_cls", [ILQR, DDP, FDDP])
def test_prepared_iteration_gives_the_general_paths_results(bundled, solver_cls, threads, monkeypatch):
    m = bundled["iiwa"]
    be = _problem(m).backend
    be.set_threads(min(threads, be.max_threads))
    try:
        s, fast = _mpc_like(solver_cls, m, np.random.default_rng(3))
        assert s._fast is not None and s._fast.first_order == (solver_cls is not DDP)
        with monkeypatch.context() as mp:
            _general(mp)
            g, general = _mpc_like(solver_cls, m, np.random.default_rng(3))
            assert g._fast is None
    finally:
        be.set_threads(None)
    exact = threads == 1 or be.max_threads == 1
    for a, b in zip(fast, general):
        for k in ("xs", "us", "K", "k"):
            x, y = getattr(a, k), getattr(b, k)
            assert np.array_equal(x, y) if exact else np.allclose(x, y, rtol=1e-9, atol=1e-12), k
        assert np.allclose(a.cost_history, b.cost_history, rtol=1e-13, atol=0.0)
        assert a.step_sizes == b.step_sizes and a.iterations == b.iterations and a.reason == b.reason
        assert a.timings["forward"] > 0 and a.timings["cost"] > 0 and a.timings["derivatives"] > 0


def _warm_solver(solver_cls, m):
    """``(solver, problem)`` after a cold solve and one warm-started iteration (its prepared
    iteration in force)."""
    p = _problem(m)
    s = solver_cls(p)
    r = s.solve(max_iter=2)
    xs, us = r.shifted(1)
    s.solve(xs_init=xs, us_init=us, max_iter=1)
    return s, p


def test_fused_candidate_costs_equal_the_numpy_reference(bundled, rng):
    m = bundled["iiwa"]
    s, p = _warm_solver(ILQR, m)
    fast = s._fast
    run, out = fast.candidates(3, None)
    alphas = np.array([1.0, 0.5, 0.0])
    J, share = run(p.x0, alphas)
    assert 0.0 < share < 1.0
    assert out.ok.all()
    ref = _problem(m, backend="numpy")
    ref.set_initial_state(p.x0)
    for i in range(3):
        want = float(ref.cost(out.X[i], out.U[i]))
        assert abs(J[i] - want) <= 1e-12 * abs(want), (i, J[i], want)
    # alpha = 0 with feedback around the iterate reproduces the iterate's rollout from x0
    assert np.allclose(out.U[2], s.us) and np.allclose(out.X[2], s.xs)


def test_outside_the_common_case_the_general_path_runs(bundled):
    m = bundled["iiwa"]
    for p in (_problem(m, backend="numpy"), _problem(m, python_term=True)):
        s = ILQR(p)
        r = s.solve(max_iter=2)
        assert s._fast is None and np.isfinite(r.cost)
    s = ILQR(_problem(m), compiled=False)
    s.solve(max_iter=1)
    assert s._fast is None


def test_ddp_prepared_second_order_equals_the_general_evaluation_and_finite_differences(bundled):
    """DDP's prepared second-order stage (the backend's prepared FDSVA-SO, the compiled Hessian
    assembly, a constant C) writes what the Euler model's general second-order evaluation writes,
    bitwise; and the curvature it gives, Σ_r C[r, i] T[r] = ∂²x⁺_i/∂z², matches central differences
    of the numpy reference backend's Jacobians (the oracle)."""
    m = bundled["iiwa"]
    s, p = _warm_solver(DDP, m)
    fast = s._fast
    assert fast is not None and not fast.first_order and fast._second
    d = s.data.dynamics
    fast.derivatives(dict.fromkeys(("derivatives",), 0.0))
    C, T = d.C.copy(), d.T.copy()
    assert C is not None and T is not None
    # the general evaluation at the same iterate, into the same buffers
    d.C[...] = np.nan
    d.T[...] = np.nan
    s.data.calc_dynamics(s.xs[:N], s.us, True)
    np.testing.assert_array_equal(d.C, C)
    np.testing.assert_array_equal(d.T, T)
    # oracle: central differences of the numpy backend's Fx, Fu at knots 0 and N - 1
    ref = _problem(m, backend="numpy")
    ndx, nu = p.ndx, p.nu
    h = 1e-6

    def jac(x, u):
        dd = ref.derivatives(x, u).dynamics
        return np.concatenate([dd.Fx, dd.Fu], axis=-1)      # (N, ndx, nz)

    F2 = np.einsum("tri,trjk->tijk", C, T)                  # (N, ndx, nz, nz)
    x0, u0 = s.xs.copy(), s.us.copy()
    for t in (0, N - 1):
        H = np.empty((ndx, ndx + nu, ndx + nu))
        for j in range(ndx + nu):
            xp, up, xm, um = x0.copy(), u0.copy(), x0.copy(), u0.copy()
            if j < ndx:
                xp[t, j] += h
                xm[t, j] -= h
            else:
                up[t, j - ndx] += h
                um[t, j - ndx] -= h
            H[:, :, j] = (jac(xp, up)[t] - jac(xm, um)[t]) / (2 * h)
        scale = max(1.0, np.abs(H).max())
        assert np.abs(F2[t] - H).max() <= 1e-5 * scale, (t, np.abs(F2[t] - H).max())


def test_prepared_aba_second_derivatives_equal_the_general_call_and_the_reference(bundled, rng):
    """Backend.prepare_aba_second_derivatives: the numba backend's bound call writes what
    aba_second_derivatives(out=) writes, bitwise, from whatever the state buffers hold at call time;
    the default (numpy reference backend) agrees with it; wrong buffers are refused up front."""
    from dynamics import get_backend
    m = bundled["iiwa"]
    B, nv = 3, m.nv
    q = np.ascontiguousarray(m.random_configuration(rng, B))
    v, tau = rng.normal(size=(B, nv)), rng.normal(size=(B, nv))
    nb, npb = get_backend("numba"), get_backend("numpy")
    out = np.empty((4, B, nv, nv, nv))
    run = nb.prepare_aba_second_derivatives(m, q, v, tau, out)
    q[...] = m.random_configuration(rng, B)         # the buffers' contents at call time count
    run()
    want = np.empty_like(out)
    nb.aba_second_derivatives(m, q, v, tau, out=want)
    np.testing.assert_array_equal(out, want)
    ref = np.empty_like(out)
    npb.prepare_aba_second_derivatives(m, q, v, tau, ref)()
    np.testing.assert_allclose(ref, out, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="prepare_aba_second_derivatives: out"):
        nb.prepare_aba_second_derivatives(m, q, v, tau, np.empty((4, B, nv, nv)))
    with pytest.raises(ValueError):
        nb.prepare_aba_second_derivatives(m, q[:, :2].copy(), v, tau, out)


def test_warm_start_into_the_iterate_and_non_finite_dynamics(bundled):
    """initial_controls(out=): the clipped controls of the copying form, written into the solver's
    own buffer; a warm start whose dynamics go non-finite stops with the diagnostic, not NaNs."""
    from solvers.ilqr import initial_controls
    m = bundled["iiwa"]
    p = _problem(m)
    rng = np.random.default_rng(5)
    us = 3 * p.u_upper * rng.uniform(-1, 1, size=(N, p.nu))
    out = np.empty((N, p.nu))
    assert initial_controls(p, us, True, out=out) is out
    np.testing.assert_array_equal(out, initial_controls(p, us, True))
    np.testing.assert_array_equal(initial_controls(p, us, False, out=out), us)
    with pytest.raises(ValueError, match="us_init must be a finite"):
        initial_controls(p, np.full((N, p.nu), np.nan), True, out=out)
    s = ILQR(p)
    r = s.solve(max_iter=1)
    xs = r.xs.copy()
    xs[3, m.nq:] = 1e300                # a velocity whose Euler step overflows
    bad = s.solve(xs_init=xs, us_init=r.us, max_iter=1)
    assert not bad.converged and "dynamics of the current iterate are non-finite" in bad.reason, bad.reason


def test_ddp_with_numerical_second_order_keeps_the_general_evaluation(bundled, monkeypatch):
    """DDP with central-difference second derivatives (no backend tensors): the prepared iteration
    runs the data's general second-order evaluation, with the general path's results (one thread)."""
    m = bundled["iiwa"]
    be = _problem(m).backend
    be.set_threads(1)
    try:
        runs = []
        for general in (False, True):
            with monkeypatch.context() as mp:
                if general:
                    _general(mp)
                p = _problem(m, second_order="fd")
                s = DDP(p)
                r = s.solve(max_iter=2)
                xs, us = r.shifted(1)
                runs.append((s, s.solve(xs_init=xs, us_init=us, max_iter=1)))
    finally:
        be.set_threads(None)
    (s, fast), (g, general) = runs
    assert s._fast is not None and s._fast._second == () and g._fast is None
    for k in ("xs", "us", "K", "k"):
        np.testing.assert_array_equal(getattr(fast, k), getattr(general, k))
