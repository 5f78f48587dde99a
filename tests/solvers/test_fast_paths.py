"""The fast paths of the derivative and cost stages give the general paths' results (to rounding)
and leave every user-facing error unchanged.

* ``RobotModel`` configuration functions: plain finite float64 ``(n,)``/``(B, n)`` arguments skip
  the broadcasting machinery; hinge/slide-only robots (``is_euclidean``) use ``q + v``/``q1 - q0``
  and identity Jacobians. Anything else (NaN, wrong shapes, other dtypes, broadcasting) goes the
  general way and is worded as before.
* ``StateSpace.integrate``/``difference``, ``DiscreteDynamics.step``/``derivatives`` (Euclidean
  robots, ``B = I``, passive terms only where non-zero), ``ShootingProblem.cost`` (kinematics shared
  by running and terminal costs), and the fused cost accumulation (``Cost._accumulate``).
"""

from __future__ import annotations

import re

import mujoco
import numpy as np
import pytest

import dynamics
from dynamics import from_mujoco
from dynamics.inputs import ShapeError
from solvers import DiscreteDynamics, ShootingProblem, StateSpace
from solvers.costs import (ComPositionCost, ControlCost, CostContext, CostDerivatives, CostSum, FramePlacementCost,
                           FramePositionCost, FrameRotationCost, JointLimitCost, StateCost)
from solvers.costs.frame import frame_position_hessian, frame_position_hessian_contracted

BE = dynamics.get_backend("numpy")

# hinge/slide chain with damping, a spring, a slide reference and a geared actuator
_CHAIN = """
<mujoco>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="j0" type="hinge" axis="0 1 0" damping="0.3"/>
      <geom type="capsule" size="0.05" fromto="0 0 0 0.3 0 0" mass="1"/>
      <body name="b" pos="0.3 0 0">
        <joint name="j1" type="slide" axis="1 0 0" ref="0.1" stiffness="2" springref="0.05"/>
        <geom type="box" size="0.05 0.05 0.05" mass="0.5"/>
        <body name="c" pos="0.1 0 0">
          <joint name="j2" type="hinge" axis="0 0 1" damping="0.1" stiffness="1"/>
          <geom type="capsule" size="0.04" fromto="0 0 0 0.2 0 0" mass="0.4"/>
          <site name="tip" pos="0.2 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="j0" gear="2"/>
    <motor joint="j2"/>
    <motor joint="j1"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def chain():
    return from_mujoco(mujoco.MjModel.from_xml_string(_CHAIN), name="chain")


def _general(model, monkeypatch):
    """Force the general (non-Euclidean) configuration-space code for ``model``."""
    monkeypatch.setitem(model.__dict__, "is_euclidean", False)


def _close(a, b, tol=1e-13):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    scale = max(np.abs(a).max(initial=0.0), 1e-300)
    assert np.abs(a - b).max(initial=0.0) <= tol * scale


# ---------------------------------------------------------------- RobotModel
def test_is_euclidean(bundled, chain):
    assert bundled["iiwa"].is_euclidean and chain.is_euclidean
    assert not bundled["hyq"].is_euclidean and not bundled["atlas"].is_euclidean


@pytest.mark.parametrize("robot", ["iiwa", "chain"])
def test_euclidean_shortcuts_equal_general_joint_code(bundled, chain, robot, rng, monkeypatch):
    m = chain if robot == "chain" else bundled[robot]
    q0, q1 = m.random_configuration(rng, 5), m.random_configuration(rng, 5)
    v = rng.normal(size=(5, m.nv))
    fast = [m.integrate(q0, v), m.difference(q0, q1), *m.integrate_jacobians(q0, v), *m.difference_jacobians(q0, q1)]
    _general(m, monkeypatch)
    slow = [m.integrate(q0, v), m.difference(q0, q1), *m.integrate_jacobians(q0, v), *m.difference_jacobians(q0, q1)]
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_configuration_functions_fast_path_inputs(bundled, robot, rng):
    """Views, Fortran order, float32, ints, lists and broadcast batches give the float64 result."""
    m = bundled[robot]
    q = m.random_configuration(rng, 4)
    v = rng.normal(size=(4, m.nv))
    ref = m.integrate(q, v)
    wide = np.concatenate([q, v], axis=-1)
    np.testing.assert_array_equal(m.integrate(wide[:, :m.nq], wide[:, m.nq:]), ref)        # strided views
    np.testing.assert_array_equal(m.integrate(np.asfortranarray(q), v), ref)
    np.testing.assert_array_equal(m.integrate(q.tolist(), v.tolist()), ref)
    np.testing.assert_array_equal(m.integrate(q[0], v), m.integrate(np.repeat(q[:1], 4, 0), v))
    np.testing.assert_array_equal(m.integrate(q[0], v[0]), ref[0])
    np.testing.assert_allclose(m.integrate(q.astype(np.float32), v), m.integrate(q.astype(np.float32).astype(float), v))
    assert m.integrate(q.reshape(2, 2, m.nq), v.reshape(2, 2, m.nv)).shape == (2, 2, m.nq)
    assert m.difference(np.zeros(m.nq, dtype=int) + m.neutral().astype(int), m.neutral()).shape == (m.nv,)


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_configuration_functions_errors_unchanged(bundled, robot):
    m = bundled[robot]
    nq, nv = m.nq, m.nv
    q = m.neutral()
    for bad in (np.nan, np.inf, -np.inf):
        qb = np.tile(q, (3, 1))
        qb[1, 0] = bad
        for fn, args, name in ((m.integrate, (qb, np.zeros((3, nv))), "q"),
                               (m.integrate, (q, np.full(nv, bad)), "v"),
                               (m.difference, (np.tile(q, (3, 1)), qb), "q1"),
                               (m.integrate_jacobians, (qb, np.zeros((3, nv))), "q"),
                               (m.difference_jacobians, (qb, np.tile(q, (3, 1))), "q0")):
            with pytest.raises(ValueError, match=rf"^{fn.__name__}: {name} contains non-finite values \(NaN or inf\); "
                                                 r"check the state/inputs passed in$"):
                fn(*args)
    with pytest.raises(ShapeError, match=re.escape(f"integrate: q has shape ({nq + 1},), expected (..., {nq}) "
                                                            "for this model; leading dimensions are batch dimensions")):
        m.integrate(np.zeros(nq + 1), np.zeros(nv))
    with pytest.raises(ShapeError, match=re.escape(f"difference: batch dimensions do not broadcast: "
                                                            f"q0(3, {nq}), q1(2, {nq})")):
        m.difference(np.tile(q, (3, 1)), np.tile(q, (2, 1)))
    with pytest.raises(TypeError, match="integrate: q must be a numeric array"):
        m.integrate(np.array(["a"] * nq), np.zeros(nv))


# ---------------------------------------------------------------- StateSpace
@pytest.mark.parametrize("robot", ["iiwa", "chain"])
def test_state_space_fast_path_equals_general(bundled, chain, robot, rng, monkeypatch):
    m = chain if robot == "chain" else bundled[robot]
    ss = StateSpace(m)
    assert ss.euclidean
    x0 = np.concatenate([m.random_configuration(rng, 6), rng.normal(size=(6, m.nv))], -1)
    x1 = np.concatenate([m.random_configuration(rng, 6), rng.normal(size=(6, m.nv))], -1)
    dx = rng.normal(size=(6, ss.ndx))
    cases = [(x0, dx), (x0[0], dx), (x0, dx[0]), (x0[0], dx[0])]
    fast = [ss.integrate(a, b) for a, b in cases] + [ss.difference(x0, x1), ss.difference(x0[0], x1)]
    ss.euclidean = False
    slow = [ss.integrate(a, b) for a, b in cases] + [ss.difference(x0, x1), ss.difference(x0[0], x1)]
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("robot", ["hyq", "atlas"])
def test_state_space_compiled_lie_group_equals_numpy(bundled, robot, rng):
    """On floating-base robots a backend's compiled ``integrate_batch`` / ``difference_batch``
    (CompiledKinematics) give what the numpy Lie algebra (RobotModel.integrate/difference) gives,
    for single states and batches; anything else (broadcast shapes, non-finite) takes the numpy path
    and its errors."""
    pytest.importorskip("numba")
    m = bundled[robot]
    be = dynamics.get_backend("numba")
    fast, ref = StateSpace(m, be.compiled_kinematics(m)), StateSpace(m)
    assert not fast.euclidean and fast._compiled is not None and fast._compiled.integrate_batch is not None
    x = np.concatenate([m.random_configuration(rng, 5), rng.normal(size=(5, m.nv))], -1)
    dx = 0.7 * rng.normal(size=(5, fast.ndx))
    for a, b in ((x, dx), (x[0], dx[0]), (x, dx[0])):
        np.testing.assert_allclose(fast.integrate(a, b), ref.integrate(a, b), rtol=1e-13, atol=1e-13)
    x1 = fast.integrate(x, dx)
    np.testing.assert_allclose(fast.difference(x, x1), dx, rtol=1e-11, atol=1e-11)   # round trip
    bad = dx.copy()
    bad[2, 0] = np.nan
    for ss in (fast, ref):        # the numpy path's error, unchanged
        with pytest.raises(ValueError, match="non-finite"):
            ss.integrate(x, bad)


def test_state_space_errors_unchanged(bundled):
    ss = StateSpace(bundled["iiwa"])
    x = np.zeros((3, 14))
    bad = x.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"^integrate: q contains non-finite values"):
        ss.integrate(bad, x)
    with pytest.raises(ValueError, match=r"^difference: q1 contains non-finite values"):
        ss.difference(x, bad)
    with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
        ss.difference(x, np.zeros((2, 14)))
    with pytest.raises(ValueError):
        ss.integrate(np.zeros(13), np.zeros(14))


# ---------------------------------------------------------------- discrete dynamics
def _reference_dynamics(model, dt, integrator="euler"):
    """A DiscreteDynamics with every shortcut switched off (general code, zero terms included)."""
    dyn = DiscreteDynamics(model, BE, dt, integrator)
    dyn._euclidean = False
    dyn._B_identity = False
    dyn._has_damping = dyn._has_stiffness = dyn._has_passive = True
    return dyn


@pytest.mark.parametrize("robot", ["iiwa", "chain", "hyq"])
@pytest.mark.parametrize("integrator", ["euler", "rk4"])
def test_dynamics_shortcuts_equal_general(bundled, chain, robot, integrator, rng):
    m = chain if robot == "chain" else bundled[robot]
    dyn = DiscreteDynamics(m, BE, 0.02, integrator)
    ref = _reference_dynamics(m, 0.02, integrator)
    if robot == "iiwa":
        assert dyn._euclidean and dyn._B_identity and dyn._has_damping and not dyn._has_stiffness
    if robot == "chain":
        assert dyn._euclidean and not dyn._B_identity and dyn._has_stiffness
    N = 3
    x = np.concatenate([m.random_configuration(rng, N), rng.normal(size=(N, m.nv))], -1)
    u = rng.normal(size=(N, m.nu)) * 3
    d, r = dyn.derivatives(x, u, second_order=True), ref.derivatives(x, u, second_order=True)
    for a, b in ((d.xnext, r.xnext), (d.Fx, r.Fx), (d.Fu, r.Fu), (d.F2, r.F2)):
        _close(a, b)
    _close(dyn.step(x, u), ref.step(x, u))
    if integrator == "euler":
        _close(dyn.step(x[0], u), ref.step(x[0], u))
    _close(dyn.torques(x[:, :m.nq], x[:, m.nq:], u), ref.torques(x[:, :m.nq], x[:, m.nq:], u))
    q, v = x[:, :m.nq], x[:, m.nq:]
    tau = dyn.torques(q, v, u)
    _close(dyn._acceleration_hessian(q, v, tau), ref._acceleration_hessian(q, v, tau))


def test_step_diverging_rows_and_bad_controls(bundled):
    m = bundled["iiwa"]
    dyn = DiscreteDynamics(m, BE, 0.01)
    x = np.tile(np.r_[m.keyframe("home"), np.zeros(7)], (3, 1))
    u = np.zeros((3, 7))
    x[1, 8] = 1e300                                 # finite input, the step overflows: NaN q-row, no error
    x[2, 7] = 1e3                                   # fast but finite
    ref = _reference_dynamics(m, 0.01)
    with np.errstate(all="ignore"):
        out, expected = dyn.step(x, u), ref.step(x, u)
    assert np.all(np.isfinite(out[[0, 2]])) and np.all(np.isnan(out[1, :m.nq]))
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match="matmul"):   # a control of the wrong size: numpy's matmul error, as before
        dyn.step(x[0], np.zeros(6))
    with pytest.raises(ValueError, match="aba: q contains non-finite values"):
        dyn.step(np.full(14, np.nan), u[0])


# ---------------------------------------------------------------- costs
def test_position_hessian_contracted(bundled, rng):
    for robot, frame in (("iiwa", "ee"), ("hyq", None)):
        m = bundled[robot]
        frame = frame or next(n for n in m.site_names if n)
        q = m.random_configuration(rng, 5)
        J = BE.frame_jacobian(m, q, frame, "world")
        p = BE.frame_placement(m, q, frame)[1]
        c = rng.normal(size=(5, 3))
        _close(frame_position_hessian_contracted(m, J, p, c),
               np.einsum("bi,bijk->bjk", c, frame_position_hessian(m, J, p)), 1e-14)


class _ShiftedState(StateCost):
    """A subclass that changes the residual: the fused StateCost path must not be taken."""

    def residual(self, ctx):
        return super().residual(ctx) + 1.0


def _costs(m, rng, K):
    frame = "ee" if m.name == "iiwa" else next(n for n in m.site_names if n)
    R = BE.frame_placement(m, m.neutral(), frame)[0]
    return CostSum({
        "pos": (FramePositionCost(m, frame, rng.normal(size=(K, 3)), weights=[1.0, 2.0, 3.0]), rng.uniform(1, 2, K)),
        "pos_exact": (FramePositionCost(m, frame, [0.3, 0.1, 0.5], hessian="exact"), 7.0),
        "rot": (FrameRotationCost(m, frame, R), 0.5),
        "place": (FramePlacementCost(m, frame, (R, [0.2, 0.0, 0.4])), 0.25),
        "com": (ComPositionCost(m, [0.0, 0.0, 0.3]), 2.0),
        "state": (StateCost(m, weights=rng.uniform(0.5, 2, (K, 2 * m.nv))), 1.5),
        "shifted": (_ShiftedState(m), 0.1),
        "control": (ControlCost(m, rng.normal(size=m.nu)), 1e-2),
        "limits": (JointLimitCost(m, margin=0.1), 3.0),
    })


def _term_sum(cost: CostSum, ctx, scale):
    """Σ_k scale w_k derivatives_k(ctx), from each term's public derivatives() (what CostSum did
    before the fused accumulation)."""
    out = CostDerivatives.zeros(ctx.batch, ctx.state.ndx, ctx.model.nu)
    for name, (c, w) in cost.terms.items():
        wk = scale * (np.full(ctx.batch, float(w)) if w.ndim == 0 else w[ctx.knots])
        out.add_scaled(c.derivatives(ctx), wk)
    return out


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
@pytest.mark.parametrize("checked", [False, True])
def test_fused_cost_derivatives_equal_term_sums(bundled, robot, checked, rng):
    m = bundled[robot]
    N = 5
    cost = _costs(m, rng, N + 1)
    x = np.concatenate([m.random_configuration(rng, N), rng.normal(size=(N, m.nv))], -1)
    u = rng.normal(size=(N, m.nu))
    full = CostContext(m, BE, StateSpace(m), np.concatenate([x, x[:1]]), None, np.arange(N + 1), checked=checked)
    ctx = CostContext(m, BE, StateSpace(m), x, u, np.arange(N), checked=checked, knot_range=(0, N), parent=full,
                      rows=slice(0, N))
    fused = cost.derivatives(ctx)
    plain = _term_sum(cost, CostContext(m, BE, StateSpace(m), x, u, np.arange(N)), 1.0)
    for k in ("l", "lx", "lu", "lxx", "lxu", "luu"):
        _close(getattr(fused, k), getattr(plain, k), 1e-14)
    _close(cost.value(ctx), cost.value(CostContext(m, BE, StateSpace(m), x, u, np.arange(N))), 1e-14)


def test_per_knot_data_too_short_still_raises(bundled):
    m = bundled["iiwa"]
    c = FramePositionCost(m, "ee", np.zeros((3, 3)))
    x = np.tile(np.r_[m.keyframe("home"), np.zeros(7)], (5, 1))
    ctx = CostContext(m, BE, StateSpace(m), x, None, np.arange(5), checked=True, knot_range=(0, 5))
    with pytest.raises(IndexError, match="frame_position target is given for 3 knots but knot 4 was requested"):
        c.value(ctx)


# ---------------------------------------------------------------- ShootingProblem
def _problem(m, rng, backend="numpy", N=6):
    running = _costs(m, rng, N + 1)
    del running.terms["shifted"]
    terminal = CostSum({"pos": (FramePositionCost(m, running["pos"].frame, [0.1, 0.2, 0.3], hessian="exact"), 10.0),
                        "state": (StateCost(m), 2.0)})
    x0 = np.r_[m.neutral(), np.zeros(m.nv)]
    return ShootingProblem.uniform(m, x0, N, 0.01, running, terminal, backend=backend)


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_batched_cost_equals_general_path(bundled, robot, rng):
    m = bundled[robot]
    p = _problem(m, rng)
    xs, us = p.initial_guess()
    X = xs + 1e-2 * rng.normal(size=(2, 3) + xs.shape)
    U = us + 1e-1 * rng.normal(size=(2, 3) + us.shape)
    general = p.running_costs(X, U).sum(axis=-1) + p.terminal_costs(X[..., -1, :])
    _close(p.cost(X, U), general, 1e-14)
    _close(p.cost(X[0, 0], U[0, 0]), general[0, 0], 1e-14)
    assert p.cost(X[0, 0], U[0, 0]).shape == ()
    bad = X.copy()
    bad[1, 2, 3, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        p.cost(bad, U)


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_problem_derivatives_equal_independent_evaluations(bundled, robot, rng):
    """Shared kinematics, folded dt and the checked flag change nothing beyond rounding."""
    m = bundled[robot]
    p = _problem(m, rng)
    xs, us = p.initial_guess()
    xs = xs + 1e-2 * rng.normal(size=xs.shape)
    d = p.derivatives(xs, us, second_order=True)
    N = p.horizon
    run = p.running_cost.derivatives(CostContext(m, p.backend, p.state, xs[:N], us, np.arange(N))).scaled(p.dt)
    term = p.terminal_cost.derivatives(CostContext(m, p.backend, p.state, xs[N:], None, np.array([N])))
    for k in ("l", "lx", "lu", "lxx", "lxu", "luu"):
        _close(getattr(d.running, k), getattr(run, k), 1e-14)
        _close(getattr(d.terminal, k), getattr(term, k), 1e-14)
    dyn = p.dynamics.derivatives(xs[:-1], us, second_order=True)
    for a, b in ((d.dynamics.Fx, dyn.Fx), (d.dynamics.Fu, dyn.Fu), (d.dynamics.F2, dyn.F2)):
        np.testing.assert_array_equal(a, b)


def test_problem_errors_unchanged(bundled, rng):
    p = _problem(bundled["iiwa"], rng)
    xs, us = p.initial_guess()
    bad = xs.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"^derivatives: xs contains non-finite values \(NaN or inf\)$"):
        p.derivatives(bad, us)
    badu = us.copy()
    badu[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"^derivatives: us contains non-finite values \(NaN or inf\)$"):
        p.derivatives(xs, badu)
    with pytest.raises(ValueError, match=re.escape("derivatives: xs has shape (6, 14), expected (7, 14)")):
        p.derivatives(xs[:-1], us)
    with pytest.raises(ValueError, match="frame_placement: q contains non-finite values"):
        p.cost(bad, us)


def test_huge_finite_values_are_finite_for_the_fast_paths(bundled):
    """Finite values near the float64 limit pass the fast paths' finiteness checks without a
    floating-point warning (the weighted sums cannot overflow) and give the general path's results."""
    import warnings
    m = bundled["iiwa"]
    ss = StateSpace(m)
    x0 = np.zeros((2, 14))
    x1 = np.full((2, 14), 1e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(ss.difference(x0, x1), x1)
        np.testing.assert_array_equal(ss.integrate(x0, x1), x1)
        np.testing.assert_array_equal(m.integrate(np.zeros(7), np.full(7, 1e308)), np.full(7, 1e308))
        np.testing.assert_array_equal(m.difference(np.zeros((3, 7)), np.full((3, 7), -1e308)), np.full((3, 7), -1e308))
    p = ShootingProblem.uniform(m, np.r_[m.keyframe("home"), np.zeros(7)], 2, 0.01,
                                CostSum({"u": (ControlCost(m), 1.0)}), CostSum({"x": (StateCost(m), 1.0)}))
    xs = np.tile(p.x0, (3, 1))
    xs[1:, 0] = 1e200
    us = np.zeros((2, 7))
    with np.errstate(over="ignore"):                 # the cost itself overflows (r² ~ 1e400), both ways
        assert p._cost_batched(xs, us) is not None
        np.testing.assert_array_equal(p.cost(xs, us), p.running_costs(xs, us).sum() + p.terminal_costs(xs[-1]))


@pytest.mark.parametrize("robot", ["hyq", "atlas", "ball_tree"])
def test_compiled_integrate_with_jacobians(bundled, robot, rng):
    """The backend's compiled configuration step and its Jacobians (CompiledKinematics
    ``integrate_with_jacobians_batch``, used by the Euler model of floating-base robots) against the
    numpy Lie algebra (RobotModel.integrate / integrate_jacobians) and against central differences of
    ``q ⊕ w`` in tangent coordinates at the result."""
    pytest.importorskip("numba")
    from tests.helpers.random_trees import random_tree_model
    m = random_tree_model(632, 10, free_root=True, ball=True)[0] if robot == "ball_tree" else bundled[robot]
    ck = dynamics.get_backend("numba").compiled_kinematics(m)
    q = m.random_configuration(rng, 4)
    w = 0.8 * rng.normal(size=(4, m.nv))
    w[0] *= 1e-5                                        # the series branch of the SO(3) ratios
    qn, Jq, Jw = np.empty((4, m.nq)), np.empty((4, m.nv, m.nv)), np.empty((4, m.nv, m.nv))
    ro = [a.view() for a in (q, w)]
    for a in ro:
        a.flags.writeable = False
    ck.integrate_with_jacobians_batch(ck.joint_rows, ro[0], ro[1], qn, Jq, Jw)
    Jq_ref, Jw_ref = m.integrate_jacobians(q, w)
    np.testing.assert_allclose(qn, m.integrate(q, w), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(Jq, Jq_ref, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(Jw, Jw_ref, rtol=1e-13, atol=1e-13)
    h = 1e-6
    for k in range(m.nv):
        e = np.zeros(m.nv)
        e[k] = h
        dq = m.difference(m.integrate(q - 0, w - e), m.integrate(q, w + e)) / (2 * h)
        np.testing.assert_allclose(Jw[..., k], dq, rtol=1e-6, atol=1e-7)
        dq = m.difference(m.integrate(m.integrate(q, -e), w), m.integrate(m.integrate(q, e), w)) / (2 * h)
        np.testing.assert_allclose(Jq[..., k], dq, rtol=1e-6, atol=1e-7)
