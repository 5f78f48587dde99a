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
], ids=["force", "cone"])
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
