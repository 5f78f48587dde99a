"""Contact dynamics as a knot's dynamics (``ActionModel(..., dynamics=ContactDynamics(contacts))``):
the discrete Jacobians against central differences of the step itself, and HyQ standing on four
point feet solved by iLQR, FDDP and DDP (whose second-order term on contact knots comes from
differences of the analytical first-order derivatives, and says so)."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics import ContactSet
from solvers import DDP, FDDP, ILQR, ActionModel, ContactDynamics, ControlCost, ShootingProblem, StateCost
from solvers.discrete_dynamics import DiscreteDynamics

FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")


@pytest.fixture(scope="module")
def hyq():
    m = dynamics.load_model("hyq")
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    return m, x0, ContactSet(m, frames=FEET, kind="point")


def test_contact_step_jacobians_match_central_differences(hyq, rng):
    m, x0, cs = hyq
    be = dynamics.get_backend("numpy")
    dyn = DiscreteDynamics(m, be, 0.01, contacts=cs)
    ss = dyn.state
    x = ss.integrate(x0, 0.05 * rng.normal(size=ss.ndx))
    u = be.gravity_torques(m, x[:m.nq])[6:] + rng.normal(size=m.nu)
    d = dyn.derivatives(x[None], u[None])
    f0 = dyn.step(x, u)
    h = 1e-6
    nz = ss.ndx + m.nu
    J = np.empty((ss.ndx, nz))
    for k in range(nz):
        e = np.zeros(nz)
        e[k] = h
        fp = dyn.step(ss.integrate(x, e[:ss.ndx]), u + e[ss.ndx:])
        fm = dyn.step(ss.integrate(x, -e[:ss.ndx]), u - e[ss.ndx:])
        J[:, k] = (ss.difference(f0, fp) - ss.difference(f0, fm)) / (2 * h)
    F = np.concatenate([d.Fx[0], d.Fu[0]], axis=-1)
    err = np.abs(F - J).max()
    assert err <= 1e-6 * max(1.0, np.abs(J).max()), f"contact step Jacobian vs central differences: {err:.2e}"
    # the constrained feet do not accelerate: foot velocity after the step is the drift of one step
    a = dyn.acceleration(x, u)
    acc = be.frame_acceleration(m, x[:m.nq], x[m.nq:], a, "lf_foot")
    assert np.abs(acc[:3]).max() < 1e-9


def test_hyq_stand_solved_on_contacts_by_every_solver(hyq):
    m, x0, cs = hyq
    xref = x0.copy()
    xref[2] += 0.04                                   # raise the trunk 4 cm
    w = np.r_[np.full(6, 10.0), np.full(m.nv - 6, 1.0), np.full(m.nv, 0.1)]
    dyn = ContactDynamics(cs)
    am = ActionModel(m, StateCost(m, xref, w) + ControlCost(m, np.zeros(m.nu), 1e-4), 0.02, dyn)
    p = ShootingProblem(x0, [am] * 6, ActionModel(m, StateCost(m, xref, 10 * w), 0.0, dyn), backend="numpy")
    assert len(p.dynamics_groups) == 1
    res = {S.name: S(p).solve(max_iter=40, tol=1e-6) for S in (ILQR, FDDP, DDP)}
    be = dynamics.get_backend("numpy")
    for name, r in res.items():
        assert r.converged, (name, r.reason)
        assert abs(r.cost - res["ilqr"].cost) <= 1e-6 * res["ilqr"].cost, (name, r.cost, res["ilqr"].cost)
        assert r.xs[-1, 2] > x0[2] + 0.002, f"{name}: the trunk did not rise ({r.xs[-1, 2]:.4f} m)"
        for foot in FEET:   # rigid contacts: the feet stay where they were (up to Euler drift)
            _, pf = be.frame_placement(m, r.xs[:, :m.nq], foot)
            assert np.abs(pf - pf[0]).max() < 1e-4, (name, foot, np.abs(pf - pf[0]).max())
    assert res["ilqr"].second_order == ()
    assert res["ddp"].second_order == ("central differences of the analytical first-order contact-dynamics "
                                       "derivatives",)


def test_contact_second_order_refused_where_not_available(hyq):
    m, x0, cs = hyq
    with pytest.raises(ValueError, match="contact dynamics"):
        DiscreteDynamics(m, dynamics.get_backend("numpy"), 0.01, second_order="analytical", contacts=cs)
    with pytest.raises(TypeError, match="ContactSet"):
        ContactDynamics(FEET)


@pytest.mark.parametrize("restitution", [0.0, 0.3])
def test_numba_impulse_knot_in_one_evaluation_matches_differences(hyq, rng, restitution):
    """On the numba backend an impact knot's v⁺ and ∂v⁺ come from one evaluation of the compiled
    derivative kernel, its buffers reused call after call (1, 2, 1 knots): each call's Jacobian
    against central differences of the step, x⁺ the step itself, and a second call with other
    states does not change the first's results (the data's arrays were copied out)."""
    if not dynamics.available_backends()["numba"][0]:
        pytest.skip("numba backend unavailable")
    m, x0, cs = hyq
    dyn = DiscreteDynamics(m, dynamics.get_backend("numba"), 0.0, integrator="impulse", contacts=cs,
                           restitution=restitution)
    ss = dyn.state
    h = 1e-6
    for n in (1, 2, 1):
        x = ss.integrate(x0, np.c_[0.02 * rng.normal(size=(n, m.nv)), rng.normal(size=(n, m.nv))])
        u = np.zeros((n, m.nu))
        d = dyn.derivatives(x, u)
        np.testing.assert_array_equal(d.xnext, dyn.step(x, u))
        dyn.derivatives(ss.integrate(x0, 0.1 * rng.normal(size=(n, ss.ndx))), u)     # (other states, same buffers)
        for b in range(n):
            J = np.empty((ss.ndx, ss.ndx))
            for k in range(ss.ndx):
                e = np.zeros(ss.ndx)
                e[k] = h
                J[:, k] = (ss.difference(d.xnext[b], dyn.step(ss.integrate(x[b], e), u[b]))
                           - ss.difference(d.xnext[b], dyn.step(ss.integrate(x[b], -e), u[b]))) / (2 * h)
            assert np.abs(d.Fx[b] - J).max() <= 1e-6 * max(1.0, np.abs(J).max())
        assert np.all(d.Fu == 0)


def test_impulse_knot_jacobians_and_touchdown(hyq, rng):
    """An impact knot (ImpulseDynamics): configuration unchanged, feet velocities zero after it,
    Jacobians against central differences; a problem with an impulse in the middle is solved."""
    from solvers import ImpulseDynamics
    m, x0, cs = hyq
    be = dynamics.get_backend("numpy")
    dyn = DiscreteDynamics(m, be, 0.0, integrator="impulse", contacts=cs)
    ss = dyn.state
    x = ss.integrate(x0, np.r_[0.02 * rng.normal(size=m.nv), rng.normal(size=m.nv)])
    u = np.zeros(m.nu)
    xp = dyn.step(x, u)
    np.testing.assert_array_equal(xp[:m.nq], x[:m.nq])
    for foot in FEET:
        vf = be.frame_velocity(m, xp[:m.nq], xp[m.nq:], foot)
        assert np.abs(vf[:3]).max() < 1e-10, (foot, vf)
    d = dyn.derivatives(x[None], u[None], second_order=True)
    h = 1e-6
    J = np.empty((ss.ndx, ss.ndx))
    for k in range(ss.ndx):
        e = np.zeros(ss.ndx)
        e[k] = h
        J[:, k] = (ss.difference(xp, dyn.step(ss.integrate(x, e), u))
                   - ss.difference(xp, dyn.step(ss.integrate(x, -e), u))) / (2 * h)
    assert np.abs(d.Fx[0] - J).max() <= 1e-6 * max(1.0, np.abs(J).max())
    assert np.all(d.Fu == 0) and d.has_second_order
    # a swing-free "drop": contact knots, one impact, contact knots; the cost counts the impulse knot once
    w = np.r_[np.full(6, 10.0), np.full(m.nv - 6, 1.0), np.full(m.nv, 0.1)]
    run = StateCost(m, x0, w) + ControlCost(m, np.zeros(m.nu), 1e-4)
    stance = ActionModel(m, run, 0.02, ContactDynamics(cs))
    impact = ActionModel(m, run, 0.0, ImpulseDynamics(cs))
    with pytest.raises(ValueError, match="dt=0"):
        ActionModel(m, run, 0.02, ImpulseDynamics(cs))
    p = ShootingProblem(x, [stance] * 2 + [impact] + [stance] * 3, ActionModel(m, StateCost(m, x0, 10 * w), 0.0),
                        backend="numpy")
    assert p.cost_scales[2] == 1.0 and p.dts[2] == 0.0 and len(p.dynamics_groups) == 2
    r = FDDP(p).solve(max_iter=30, tol=1e-6)
    assert r.converged, r.reason
    vf = be.frame_velocity(m, r.xs[3, :m.nq], r.xs[3, m.nq:], "lf_foot")
    assert np.abs(vf[:3]).max() < 1e-8
