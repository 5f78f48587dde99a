"""Cost terms: values against direct formulas / MuJoCo kinematics, gradients against central
finite differences of the value (tangent perturbations), Hessians against finite differences
(exact costs) or against Rᵀ W R with a finite-difference residual Jacobian (Gauss–Newton costs)."""

from __future__ import annotations

import warnings

import mujoco
import numpy as np
import pytest

import dynamics
from dynamics import lie
from solvers import ShootingProblem
from solvers.costs import (ComPositionCost, ControlCost, CostContext, CostSum, FramePlacementCost, FramePositionCost,
                           FrameRotationCost, JointLimitCost, StateCost, as_cost, gravity_compensation)
from solvers.state_space import StateSpace

BE = dynamics.get_backend("numpy")


def _ctx(model, x, u, knots=None):
    knots = np.arange(x.shape[0]) if knots is None else knots
    return CostContext(model, BE, StateSpace(model), x, u, knots)


def _sample(model, rng, B=3, terminal=False):
    x = np.concatenate([model.random_configuration(rng, B), rng.normal(size=(B, model.nv))], axis=-1)
    u = None if terminal else rng.normal(size=(B, model.nu)) * 10
    return x, u


def _perturbed(model, x, u, Z):
    ss = StateSpace(model)
    ndx = ss.ndx
    B, P = x.shape[0], Z.shape[0]
    xp = ss.integrate(x[:, None], np.broadcast_to(Z[:, :ndx], (B, P, ndx))).reshape(B * P, -1)
    up = None if u is None else (u[:, None] + Z[:, ndx:]).reshape(B * P, -1)
    return xp, up


def fd_gradient(cost, model, x, u, knots, fn="value", h=1e-6):
    """Central differences of ``cost.<fn>`` (value (B,) or residual (B, nr)) along z = (dx, du)."""
    nz = 2 * model.nv + (0 if u is None else model.nu)
    Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])
    xp, up = _perturbed(model, x, u, Z)
    f = getattr(cost, fn)(_ctx(model, xp, up, np.repeat(knots, 2 * nz)))
    f = f.reshape((x.shape[0], 2 * nz) + f.shape[1:])
    return np.moveaxis((f[:, :nz] - f[:, nz:]) / (2 * h), 1, -1)      # (B, [nr,] nz)


def fd_hessian(cost, model, x, u, knots, h=1e-4):
    nz = 2 * model.nv + (0 if u is None else model.nu)
    E = np.eye(nz) * h
    a, b = np.triu_indices(nz)
    Z = np.concatenate([E[a] + E[b], E[a] - E[b], -E[a] + E[b], -E[a] - E[b]])
    xp, up = _perturbed(model, x, u, Z)
    f = cost.value(_ctx(model, xp, up, np.repeat(knots, Z.shape[0]))).reshape(x.shape[0], 4, a.size)
    vals = (f[:, 0] - f[:, 1] - f[:, 2] + f[:, 3]) / (4 * h * h)
    H = np.zeros((x.shape[0], nz, nz))
    H[:, a, b] = vals
    H[:, b, a] = vals
    return H


def _full(d, terminal):
    g = d.lx if terminal else np.concatenate([d.lx, d.lu], axis=-1)
    if terminal:
        return g, d.lxx
    H = np.block([[d.lxx, d.lxu], [np.swapaxes(d.lxu, 1, 2), d.luu]])
    return g, H


def check_cost(cost, model, rng, terminal=False, exact=None, B=3, knots=None, gtol=1e-6, htol=1e-4):
    x, u = _sample(model, rng, B, terminal)
    knots = np.arange(B) if knots is None else knots
    d = cost.derivatives(_ctx(model, x, u, knots))
    assert np.allclose(d.l, cost.value(_ctx(model, x, u, knots)), rtol=1e-12, atol=1e-12)
    g, H = _full(d, terminal)
    g_fd = fd_gradient(cost, model, x, u, knots)
    assert np.abs(g - g_fd).max() < gtol * max(1.0, np.abs(g).max())
    exact = cost.hessian == "exact" if exact is None else exact
    if exact:
        H_fd = fd_hessian(cost, model, x, u, knots)
        assert np.abs(H - H_fd).max() < htol * max(1.0, np.abs(H).max())
    else:  # Gauss–Newton: Rᵀ W R with the residual Jacobian by finite differences
        R = fd_gradient(cost, model, x, u, knots, fn="residual")
        w = np.broadcast_to(cost.weights, (B, R.shape[1])) if cost.weights.ndim == 1 else cost.weights[knots]
        H_gn = np.einsum("bri,br,brj->bij", R, w, R)
        assert np.abs(H - H_gn).max() < 1e-6 * max(1.0, np.abs(H).max())
    return x, u, d


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_state_cost(bundled, rng, robot):
    m = bundled[robot]
    ref = np.concatenate([m.random_configuration(rng), rng.normal(size=m.nv)])
    w = rng.uniform(0.5, 2.0, size=2 * m.nv)
    c = StateCost(m, ref, w)
    x, u, d = check_cost(c, m, rng)
    r = StateSpace(m).difference(np.broadcast_to(ref, x.shape), x)
    assert np.allclose(d.l, 0.5 * np.sum(w * r * r, axis=-1))
    check_cost(c, m, rng, terminal=True)


def test_control_cost_and_gravity_reference(bundled, rng):
    m = bundled["iiwa"]
    q = m.keyframe("home")
    ug = gravity_compensation(m, BE, q)
    d = mujoco.MjData(m.mj_model)
    d.qpos[:] = q
    mujoco.mj_forward(m.mj_model, d)
    assert np.allclose(ug, d.qfrc_bias, atol=1e-9)          # MuJoCo's bias force at rest = gravity
    c = ControlCost(m, ug, np.arange(1, 8) * 0.1)
    check_cost(c, m, rng, exact=True)


def test_control_cost_rejects_terminal_use(bundled):
    m = bundled["iiwa"]
    x0 = np.concatenate([m.keyframe("home"), np.zeros(7)])
    with pytest.raises(ValueError, match="terminal"):
        ShootingProblem.uniform(m, x0, 4, 0.01, ControlCost(m), terminal_cost=ControlCost(m))


@pytest.mark.parametrize("robot,frame", [("iiwa", "ee"), ("hyq", "lf_foot"), ("atlas", "l_hand_site")])
@pytest.mark.parametrize("hessian", ["gauss-newton", "exact"])
def test_frame_position_cost(bundled, rng, robot, frame, hessian):
    m = bundled[robot]
    c = FramePositionCost(m, frame, rng.normal(size=3), weights=[1.0, 2.0, 3.0], hessian=hessian)
    # atlas (nz = 102): one terminal knot keeps the second-order differences cheap
    big = robot == "atlas"
    x, _, d = check_cost(c, m, rng, exact=(hessian == "exact"), terminal=big, B=1 if big else 3)
    if robot == "iiwa":  # the position itself against MuJoCo's site kinematics
        md = mujoco.MjData(m.mj_model)
        md.qpos[:] = x[0, :m.nq]
        mujoco.mj_kinematics(m.mj_model, md)
        r = md.site_xpos[m.site_id(frame)] - c.target
        assert np.isclose(d.l[0], 0.5 * np.sum(np.array([1.0, 2.0, 3.0]) * r * r), rtol=1e-10)


def test_frame_rotation_and_placement_costs(bundled, rng):
    m = bundled["hyq"]
    R = lie.so3_exp(rng.normal(size=3))
    check_cost(FrameRotationCost(m, "lf_foot", R, weights=[1, 2, 3]), m, rng)
    check_cost(FramePlacementCost(m, "lf_foot", (R, rng.normal(size=3)), weights=np.arange(1, 7)), m, rng)
    M = np.eye(4)
    M[:3, :3], M[:3, 3] = R, [0.1, 0.2, 0.3]
    c = FramePlacementCost(m, "lf_foot", M)
    assert np.allclose(c.target[0], R) and np.allclose(c.target[1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="rotation"):
        FrameRotationCost(m, "lf_foot", np.ones((3, 3)))


def test_com_cost(bundled, rng):
    m = bundled["atlas"]
    check_cost(ComPositionCost(m, [0.0, 0.1, 0.9]), m, rng)


def test_joint_limit_cost(bundled, rng):
    m = bundled["iiwa"]
    c = JointLimitCost(m, margin=0.1, weights=np.full(7, 10.0))
    # configurations well inside/outside the limits (away from the kinks, where FD is exact)
    x, u = _sample(m, rng, 3)
    x[:, :7] = np.where(rng.random((3, 7)) < 0.5, m.q_upper * 1.2, 0.1)
    d = c.derivatives(_ctx(m, x, u))
    g_fd = fd_gradient(c, m, x, u, np.arange(3))
    assert np.abs(np.concatenate([d.lx, d.lu], -1) - g_fd).max() < 1e-6
    H_fd = fd_hessian(c, m, x, u, np.arange(3))
    assert np.abs(_full(d, False)[1] - H_fd).max() < 1e-4
    viol = np.maximum(x[:, :7] - (m.q_upper - 0.1), 0)
    assert np.allclose(d.l, 0.5 * 10 * np.sum(viol ** 2, axis=-1))


def test_weighted_sum_with_time_varying_references(bundled, rng):
    m = bundled["iiwa"]
    K = 5
    targets = rng.normal(size=(K, 3))
    weights = np.linspace(1.0, 3.0, K)
    ee = FramePositionCost(m, "ee", targets)
    total = CostSum({"ee": (ee, weights), "x": (StateCost(m, np.zeros(14)), 0.5)}) + 2.0 * ControlCost(m)
    assert set(total.terms) == {"ee", "x", "control"}
    knots = np.array([0, 3, 4])
    x, u = _sample(m, rng, 3)
    ctx = _ctx(m, x, u, knots)
    v = total.value(ctx)
    _, p = BE.frame_placement(m, x[:, :7], "ee")
    manual = (weights[knots] * 0.5 * np.sum((p - targets[knots]) ** 2, -1)
              + 0.5 * 0.5 * np.sum(x ** 2, -1) + 2.0 * 0.5 * np.sum(u ** 2, -1))
    assert np.allclose(v, manual, rtol=1e-12)
    d = total.derivatives(ctx)
    g_fd = fd_gradient(total, m, x, u, knots)
    assert np.abs(np.concatenate([d.lx, d.lu], -1) - g_fd).max() < 1e-6 * max(1, np.abs(d.lx).max())
    # references can be moved in place; a knot beyond the given references is a clear error
    total["ee"].target = targets[::-1]
    assert not np.allclose(total.value(ctx), v)
    with pytest.raises(IndexError, match="knots"):
        total.value(_ctx(m, x, u, np.array([0, 1, K])))


def test_reference_and_weight_validation(bundled):
    m = bundled["iiwa"]
    with pytest.raises(ValueError, match="shape"):
        StateCost(m, np.zeros(13))
    with pytest.raises(ValueError, match="non-finite"):
        FramePositionCost(m, "ee", [0.0, np.nan, 0.0])
    with pytest.raises(ValueError, match="non-negative"):
        ControlCost(m, weights=-np.ones(7))
    with pytest.raises(KeyError, match="ee"):
        FramePositionCost(m, "no_such_frame", np.zeros(3))


# ---------------------------------------------------------------- plain-Python costs
class _ValueOnly:
    """½‖q - 0.3‖² + 0.05 Σ u³ (non-quadratic in u) with only a value."""

    def value(self, x, u):
        out = 0.5 * np.sum((x[:, :7] - 0.3) ** 2, axis=-1)
        return out if u is None else out + 0.05 * np.sum(u ** 3, axis=-1)


class _Full(_ValueOnly):
    def gradient(self, x, u):
        lx = np.zeros((x.shape[0], 14))
        lx[:, :7] = x[:, :7] - 0.3
        return lx, (None if u is None else 0.15 * u ** 2)

    def hessian(self, x, u):
        B = x.shape[0]
        lxx = np.zeros((B, 14, 14))
        lxx[:, np.arange(7), np.arange(7)] = 1.0
        luu = None if u is None else np.einsum("bi,ij->bij", 0.3 * u, np.eye(7))
        return lxx, np.zeros((B, 14, 7)), luu


class _Residual:
    weights = np.array([2.0, 3.0])

    def residual(self, x, u, knots):
        return np.stack([np.sin(x[:, 0]) + knots, x[:, 1] * u[:, 0]], axis=-1)


def test_custom_costs_exact_and_finite_difference(bundled, rng):
    m = bundled["iiwa"]
    x, u = _sample(m, rng, 2)
    u = u * 0.1
    full = as_cost(_Full(), name="full")
    assert full.hessian == "exact"
    ref = full.derivatives(_ctx(m, x, u))
    assert np.abs(np.concatenate([ref.lx, ref.lu], -1) - fd_gradient(full, m, x, u, np.arange(2))).max() < 1e-6
    with pytest.warns(UserWarning, match="finite differences"):
        vo = as_cost(_ValueOnly(), name="value-only")
        fd = vo.derivatives(_ctx(m, x, u))
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # the warning is given once only
        vo.derivatives(_ctx(m, x, u))
    for a, b, tol in ((fd.lx, ref.lx, 1e-7), (fd.lu, ref.lu, 1e-7), (fd.lxx, ref.lxx, 1e-5), (fd.luu, ref.luu, 1e-5),
                      (fd.lxu, ref.lxu, 1e-5)):
        assert np.abs(a - b).max() < tol
    # residual-only custom cost with time-varying data through the knots keyword: Gauss–Newton
    res = as_cost(_Residual())
    with pytest.warns(UserWarning):
        d = res.derivatives(_ctx(m, x, u, np.array([0, 5])))
    r = _Residual().residual(x, u, np.array([0, 5]))
    assert np.allclose(d.l, 0.5 * np.sum(_Residual.weights * r * r, -1))
    Rx = np.zeros((2, 2, 14))
    Rx[:, 0, 0] = np.cos(x[:, 0])
    Rx[:, 1, 1] = u[:, 0]
    Ru = np.zeros((2, 2, 7))
    Ru[:, 1, 0] = x[:, 1]
    assert np.allclose(d.lxx, np.einsum("bri,r,brj->bij", Rx, _Residual.weights, Rx), atol=1e-8)
    assert np.allclose(d.lxu, np.einsum("bri,r,brj->bij", Rx, _Residual.weights, Ru), atol=1e-8)


def test_custom_cost_errors(bundled, rng):
    m = bundled["iiwa"]
    with pytest.raises(TypeError, match="value"):
        as_cost(object())

    class Bad:
        def value(self, x, u):
            return np.zeros(3)
    x, u = _sample(m, rng, 2)
    with pytest.raises(ValueError, match="shape"):
        as_cost(Bad()).value(_ctx(m, x, u))


def test_plain_python_cost_receives_the_context():
    """A duck-typed cost whose methods take ``ctx`` gets the problem's CostContext (its backend and
    the shared kinematics) — also when its Jacobian is left to finite differences, where the
    context describes the perturbed states."""
    import dynamics
    from solvers import ShootingProblem

    m = dynamics.load_model("iiwa")
    seen = []

    class Height:
        weights = np.array([10.0])

        def residual(self, x, u, ctx):
            seen.append((ctx.backend.name, ctx.x is x))
            return ctx.frame_position("ee")[:, 2:3] - 0.3

    x0 = np.concatenate([m.keyframe("home"), np.zeros(m.nv)])
    for backend in ("numpy", "numba"):
        seen.clear()
        p = ShootingProblem.uniform(m, x0, 3, 0.01, Height(), backend=backend)
        xs = np.repeat(x0[None], 4, axis=0)
        us = np.zeros((3, m.nu))
        with pytest.warns(UserWarning, match="finite"):
            run, _ = p.cost_derivatives(xs, us)
        assert {name for name, _ in seen} == {backend}
        assert all(same for _, same in seen)       # every call saw a context of its own states
        z = dynamics.get_backend("numpy").frame_placement(m, x0[:7], "ee")[1][2]
        J = dynamics.get_backend("numpy").frame_jacobian(m, x0[:7], "ee")[2]
        np.testing.assert_allclose(run.lx[0, :7], 0.01 * 10.0 * (z - 0.3) * J, rtol=1e-5, atol=1e-9)


def test_plain_python_cost_takes_per_knot_weights_like_the_library():
    """A custom residual cost with per-knot weights (K, nr) gives the same value and derivatives as
    the library's StateCost with the same per-knot weights; a wrong weight shape is refused."""
    import dynamics
    from solvers import ShootingProblem, StateCost

    m = dynamics.load_model("iiwa")
    rng = np.random.default_rng(1)
    N = 4
    W = rng.uniform(0.5, 2.0, size=(N + 1, 14))

    class Plain:
        weights = W

        def residual(self, x, u):
            return x - 0.1

        def residual_jacobian(self, x, u):
            B = x.shape[0]
            return np.broadcast_to(np.eye(14), (B, 14, 14)), np.zeros((B, 14, 7))

    x0 = np.concatenate([m.keyframe("home"), np.zeros(m.nv)])
    xs = x0 + 0.1 * rng.normal(size=(N + 1, 14))
    us = rng.normal(size=(N, 7))
    ours = ShootingProblem.uniform(m, x0, N, 0.01, Plain(), backend="numpy")
    ref = ShootingProblem.uniform(m, x0, N, 0.01, StateCost(m, np.full(14, 0.1), W), backend="numpy")
    a, _ = ours.cost_derivatives(xs, us)
    b, _ = ref.cost_derivatives(xs, us)
    for name in ("l", "lx", "lxx"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-14, err_msg=name)
    Plain.weights = np.ones((N + 1, 3))
    with pytest.raises(ValueError, match=r"weights has shape \(5, 3\); expected \(14,\) or \(K, 14\)"):
        ShootingProblem.uniform(m, x0, N, 0.01, Plain(), backend="numpy").cost(xs, us)


def test_per_knot_into_a_strided_view():
    """per_knot(out=): per-knot rows gathered (and constants broadcast) into a strided view of a
    larger array, as the compiled cost terms pack them; the knot check still runs."""
    from solvers.costs.base import per_knot
    P = np.zeros((9, 5))
    data = np.arange(12.0).reshape(4, 3)
    knots = np.array([0, 2, 3])
    per_knot("x", data, knots, (3,), out=P[0:9:3, 1:4])
    np.testing.assert_array_equal(P[0:9:3, 1:4], data[knots])
    assert np.all(P[1::3] == 0) and np.all(P[:, [0, 4]] == 0)
    per_knot("x", np.array([7.0, 8.0, 9.0]), knots, (3,), out=P[1:9:3, 1:4])
    np.testing.assert_array_equal(P[1:9:3, 1:4], np.tile([7.0, 8.0, 9.0], (3, 1)))
    with pytest.raises(IndexError, match="given for 4 knots but knot 5"):
        per_knot("x", data, np.array([0, 5]), (3,), out=np.zeros((2, 3)))


def test_reference_setter_keeps_a_validated_array_and_checks_anything_else():
    """Assigning a reference that a setter already validated (read-only, same shape) stores that very
    array; a writable array is copied, made read-only and checked (shape, finiteness) with the
    cost's name in the error; a validated array of another shape is checked and refused."""
    m = dynamics.load_model("iiwa")
    a, b = FramePositionCost(m, "ee", np.zeros(3)), FramePositionCost(m, "ee", np.zeros(3))
    targets = np.arange(15.0).reshape(5, 3)
    a.target = targets
    assert a.target is not targets and not a.target.flags.writeable
    np.testing.assert_array_equal(a.target, targets)
    b.target = a.target
    assert b.target is a.target
    targets[0, 0] = np.nan
    with pytest.raises(ValueError, match="target contains non-finite"):
        b.target = targets
    assert b.target is a.target                   # a refused value leaves the old one
    with pytest.raises(ValueError, match="target has shape"):
        b.target = np.zeros((5, 2))
    ctrl = ControlCost(m, np.zeros(m.nu))
    with pytest.raises(ValueError, match="control reference has shape"):
        ctrl.reference = a.target                 # validated for (3,), not for (nu,)
