"""Costs on contact forces (ContactForceCost, FrictionConeCost): values against the forces of
``contact_dynamics``, gradients against central differences of the problem's own cost, and
``contact_dynamics_derivatives(return_values=True)`` against the separate calls."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics import ContactSet
from solvers import ActionModel, ContactDynamics, ShootingProblem
from solvers.costs import ContactForceCost, FrictionConeCost

FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")


@pytest.fixture(scope="module")
def hyq():
    m = dynamics.load_model("hyq")
    return m, ContactSet(m, frames=FEET, kind="point"), np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_values_come_with_the_derivatives(hyq, backend, rng):
    m, cs, x0 = hyq
    be = dynamics.get_backend(backend)
    q = np.stack([m.keyframe("standing")] * 3)
    v = 0.1 * rng.normal(size=(3, m.nv))
    tau = np.concatenate([np.zeros((3, 6)), 10 * rng.normal(size=(3, m.nv - 6))], axis=1)
    (a, lam), d = be.contact_dynamics_derivatives(m, q, v, tau, cs, return_values=True)
    a_ref, lam_ref = be.contact_dynamics(m, q, v, tau, cs)
    np.testing.assert_allclose(a, a_ref, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(lam, lam_ref, rtol=1e-12, atol=1e-10)
    for x, y in zip(d, be.contact_dynamics_derivatives(m, q, v, tau, cs)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("make", [
    lambda m, cs, lam: ContactForceCost(m, cs, lam, weights=1e-3),
    lambda m, cs, lam: FrictionConeCost(m, cs, mu=0.3, f_min=0.6 * lam[2], weights=1e-2),   # several rows active
    lambda m, cs, lam: FrictionConeCost(m, cs, mu=0.3, f_min=0.6 * lam[2], weights=1e-2, facets=8),
], ids=["force", "cone", "cone8"])
def test_cost_gradients_match_central_differences(hyq, make, rng):
    m, cs, x0 = hyq
    be = dynamics.get_backend("numpy")
    lam0 = be.contact_dynamics(m, x0[:m.nq], x0[m.nq:], np.zeros(m.nv), cs)[1]
    cost = make(m, cs, lam0)
    p = ShootingProblem(x0, [ActionModel(m, cost, 0.02, ContactDynamics(cs))] * 2, None, backend="numpy")
    ss = p.state
    xs = np.stack([ss.integrate(x0, 0.02 * rng.normal(size=ss.ndx)) for _ in range(3)])
    us = 20 * rng.normal(size=(2, m.nu))
    run, _ = p.cost_derivatives(xs, us)
    assert run.l[0] > 0
    # the value is the cost of the forces contact_dynamics gives
    tau = np.r_[np.zeros(6), us[0]] - np.asarray(m.dof_damping) * xs[0, m.nq:]
    lam = be.contact_dynamics(m, xs[0, :m.nq], xs[0, m.nq:], tau, cs)[1]
    if isinstance(cost, ContactForceCost):
        assert run.l[0] == pytest.approx(0.02 * 0.5 * 1e-3 * np.sum((lam - lam0) ** 2), rel=1e-10)
    nz = ss.ndx + m.nu
    g = np.empty(nz)
    h = 1e-6
    for i in range(nz):
        e = np.zeros(nz)
        e[i] = h
        xp, xm, up, um = xs.copy(), xs.copy(), us.copy(), us.copy()
        xp[0], xm[0] = ss.integrate(xs[0], e[:ss.ndx]), ss.integrate(xs[0], -e[:ss.ndx])
        up[0] += e[ss.ndx:]
        um[0] -= e[ss.ndx:]
        g[i] = (p.running_costs(xp, up)[0] - p.running_costs(xm, um)[0]) / (2 * h)
    an = np.r_[run.lx[0], run.lu[0]]
    assert np.abs(an - g).max() <= 1e-5 * max(1.0, np.abs(g).max()), np.abs(an - g).max()


def test_bad_contact_cost_input(hyq):
    m, cs, _ = hyq
    with pytest.raises(TypeError, match="ContactSet"):
        ContactForceCost(m, FEET)
    with pytest.raises(ValueError, match="mu"):
        FrictionConeCost(m, cs, mu=-1.0)
    sole = ContactSet(m, frames=("lf_foot",), kind="6d")
    with pytest.raises(ValueError, match="point contacts"):
        FrictionConeCost(m, sole)


def _generic_gauss_newton(cost, ctx):
    """ResidualCost's Gauss–Newton products on the full residual Jacobian (the path the gradient
    tests above check against central differences)."""
    from solvers.costs import ResidualCost
    return ResidualCost.derivatives(cost, ctx)


@pytest.mark.parametrize("which", ["force", "cone", "wrench"])
def test_fused_force_derivatives_match_the_residual_products(hyq, which, rng):
    """The contact-force costs' derivatives, reduced to the force rows and (cones) to the knots with
    an active row, equal the Gauss–Newton products on their full residual Jacobians, with a per-knot
    weight, at knots inside and outside the cone."""
    from solvers.costs import CostContext, CostDerivatives, WrenchConeCost
    from solvers.state_space import StateSpace
    if which == "wrench":
        m = dynamics.load_model("atlas")
        cs = ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="6d")
        x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
        cost = WrenchConeCost(m, cs, half_length=0.01, half_width=(0.005, 0.008), mu=0.1, f_min=700.0,
                              weights=1e-3 * rng.uniform(0.5, 2.0, 34))
    else:
        m, cs, x0 = hyq
        lam0 = dynamics.get_backend("numpy").contact_dynamics(m, x0[:m.nq], x0[m.nq:], np.zeros(m.nv), cs)[1]
        cost = (ContactForceCost(m, cs, lam0, weights=rng.uniform(0.5, 2.0, 12) * 1e-3) if which == "force"
                else FrictionConeCost(m, cs, mu=0.7, f_min=1.0, weights=1e-2))
    ss = StateSpace(m)
    be = dynamics.get_backend("numpy")
    B = 6
    x = np.stack([ss.integrate(x0, 0.02 * rng.normal(size=ss.ndx)) for _ in range(B)])
    u = 20 * rng.normal(size=(B, m.nu))
    if which != "wrench":
        # standing with the torques that hold the weight shared evenly by the feet: inside the cone
        q = x0[:m.nq]
        J = np.concatenate([be.frame_jacobian(m, q, f, "local_world_aligned")[:3] for f in FEET])
        x[:2] = x0
        u[:2] = (be.gravity_torques(m, q) - J.T @ np.tile([0.0, 0.0, -m.total_mass * m.gravity[2] / 4], 4))[6:]

    def ctx():
        return CostContext(m, be, ss, x, u, np.arange(B), checked=True)
    w = rng.uniform(0.5, 2.0, B)
    fused = CostDerivatives.zeros(B, ss.ndx, m.nu)
    cost._accumulate(ctx(), fused, w)
    ref = _generic_gauss_newton(cost, ctx())
    if which != "force":
        active = (cost._g(ctx()) > 0).any(axis=-1)
        assert active.any() and (which == "wrench" or not active.all()), active
    for f in CostDerivatives._FIELDS:
        a, b = getattr(fused, f), w.reshape((B,) + (1,) * (getattr(ref, f).ndim - 1)) * getattr(ref, f)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(b).max()), err_msg=f)
    # derivatives() is the fused accumulation with weight 1
    d = cost.derivatives(ctx())
    np.testing.assert_allclose(d.lxx, ref.lxx, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(ref.lxx).max()))


def test_a_subclass_that_overrides_the_residual_keeps_its_own_math(hyq, rng):
    """A ContactForceCost subclass with its own residual does not take the fused derivatives."""
    from solvers.costs import CostContext, CostDerivatives
    from solvers.state_space import StateSpace
    m, cs, x0 = hyq

    class Doubled(ContactForceCost):
        def residual(self, ctx):
            return 2.0 * super().residual(ctx)

        def residual_jacobian(self, ctx):
            Lx, Lu = super().residual_jacobian(ctx)
            return 2.0 * Lx, 2.0 * Lu

    plain, doubled = ContactForceCost(m, cs, weights=1e-3), Doubled(m, cs, weights=1e-3)
    ss, be = StateSpace(m), dynamics.get_backend("numpy")
    x = np.stack([ss.integrate(x0, 0.02 * rng.normal(size=ss.ndx)) for _ in range(2)])
    u = 20 * rng.normal(size=(2, m.nu))
    outs = []
    for c in (plain, doubled):
        out = CostDerivatives.zeros(2, ss.ndx, m.nu)
        c._accumulate(CostContext(m, be, ss, x, u, np.arange(2), checked=True), out, 1.0)
        outs.append(out)
    np.testing.assert_allclose(outs[1].lx, 4.0 * outs[0].lx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(outs[1].l, 4.0 * outs[0].l, rtol=1e-10)
