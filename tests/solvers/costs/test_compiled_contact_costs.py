"""The compiled contact-force terms (solvers/costs/compiled.py: ContactForceCost, FrictionConeCost,
WrenchConeCost) on the numba backend: values and Gauss–Newton derivatives against the Python terms
(checked against Crocoddyl and finite differences in test_contact_costs.py and the Crocoddyl
problem tests), the forces read from the dynamics stage's solves and the rollout's forces against
those solved by the compiled costs themselves, the gradient against central differences, and the
fallback to the Python path when one knot's terms name two contact sets."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers.costs import ContactForceCost
from solvers.costs.compiled import COM_POSITION, CONTACT_FORCE, FORCE_CONE
from solvers.problem_costs import RolloutContactForces

N = 6


def _perturbed(task, p, seed, du=25.0):
    """States near standing (tangent perturbations) and controls far enough from the standing
    torques that some friction-cone rows are active."""
    rng = np.random.default_rng(seed)
    n, nv = p.horizon, p.model.nv
    dx = np.concatenate([0.02 * rng.normal(size=(n + 1, nv)), 0.2 * rng.normal(size=(n + 1, nv))], -1)
    xs = p.state.integrate(np.tile(task.initial_state(), (n + 1, 1)), dx)
    return xs, task.u_stand + du * rng.normal(size=(n, p.nu))


def _python_path(p, xs, us):
    """Cost and derivative arrays of the Python path (the problem is left on the compiled path)."""
    p.compile_costs = False
    try:
        d = p.create_data()
        p.derivatives(xs, us, data=d)
        return p.cost(xs, us), {k: v.copy() for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}
    finally:
        p.compile_costs = True


def _close(got, ref, tol=1e-12):
    for k, v in ref.items():
        assert np.abs(got[k] - v).max() <= tol * max(1.0, np.abs(v).max()), k


def _compiled_derivatives(p, xs, us, solves=()):
    cc = p._compiled_costs()
    d = p.create_data()
    run, term = d.running, d.terminal
    run.fill(0.0)
    term.fill(0.0)
    cc.add_derivatives(np.ascontiguousarray(xs), np.ascontiguousarray(us), run, term, solves)
    return {k: v.copy() for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}


@pytest.fixture(scope="module")
def stand():
    task = tasks.get_task("hyq-stand", cones="penalty")
    return task, task.build_problem(task.initial_state(), N, 0.01, backend="numba")


def test_stand_terms_compiled_and_equal_to_the_python_terms(stand):
    """hyq-stand with penalty cones: every term compiled (force and cone too); values and
    derivatives (l_xu included) equal the Python path with cone rows active at some knots."""
    task, p = stand
    cc = p._compiled_costs()
    kinds = {t.name: t.kind for t in cc.terms if t.group >= 0}
    assert kinds["force"] == CONTACT_FORCE and kinds["cone"] == FORCE_CONE and cc.covers_all
    xs, us = _perturbed(task, p, 3)
    cone = p.cost_groups[0].item.terms["cone"][0]
    lam = p.backend.contact_dynamics(p.model, xs[:-1, :p.model.nq], np.ascontiguousarray(xs[:-1, p.model.nq:]),
                                     cone._cf.torques(xs[:-1, :p.model.nq], xs[:-1, p.model.nq:], us), cone._cf.contacts)[1]
    assert np.any(lam @ cone._A.T + cone._b > 0), "no active cone row: the test would not check the cone"
    ref_cost, ref = _python_path(p, xs, us)
    np.testing.assert_allclose(p.cost(xs, us), ref_cost, rtol=1e-13)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    got = {k: v for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}
    assert np.abs(got["running.lxu"]).max() > 0
    _close(got, ref)


def test_forces_from_the_solves_and_the_rollout_equal_those_solved_here(stand):
    """The compiled terms read the dynamics stage's contact solves (derivatives) and a rollout's
    forces (values of S candidates): the same numbers as when they solve the contact dynamics
    themselves; a force array from other knot models is not read."""
    task, p = stand
    xs, us = _perturbed(task, p, 5)
    d = p.create_data()
    solves = d.calc_dynamics(xs[:-1], us, False)
    assert solves
    _close(_compiled_derivatives(p, xs, us, solves), _compiled_derivatives(p, xs, us), tol=1e-13)
    cc = p._compiled_costs()
    S = 3
    X = np.stack([_perturbed(task, p, 10 + s)[0] for s in range(S)])
    U = np.stack([_perturbed(task, p, 10 + s)[1] for s in range(S)])
    own = cc.values(X, U).copy()
    m, dyn = p.model, p.knot_dynamics(0)
    q, v = X[:, :-1, :m.nq].reshape(-1, m.nq), np.ascontiguousarray(X[:, :-1, m.nq:].reshape(-1, m.nv))
    lam = p.backend.contact_dynamics(m, q, v, dyn.actuation.torques(q, v, U.reshape(-1, m.nu)), dyn.contacts)[1]
    models = tuple(p.knot_dynamics(t) for t in range(N))
    np.testing.assert_allclose(cc.values(X, U, RolloutContactForces(lam.reshape(S, N, -1), models)), own, rtol=1e-14)
    # forces said to come from knots without contact dynamics: solved here instead
    np.testing.assert_allclose(cc.values(X, U, RolloutContactForces(np.zeros((S, N, lam.shape[-1])), (None,) * N)),
                               own, rtol=1e-14)


def test_gradient_against_central_differences(stand):
    """l_u and l_x of the compiled force and cone terms (plus state and control) against central
    differences of the problem's cost (the Gauss–Newton gradient is the exact gradient)."""
    task, p = stand
    xs, us = _perturbed(task, p, 7)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    eps = 1e-6
    t = 2
    for i in range(0, p.nu, 3):
        up, um = us.copy(), us.copy()
        up[t, i] += eps
        um[t, i] -= eps
        fd = (p.cost(xs, up) - p.cost(xs, um)) / (2 * eps)
        assert fd == pytest.approx(d.running.lu[t, i], rel=1e-5, abs=1e-5), i
    nv = p.model.nv
    for i in (6, 9, nv + 2, nv + 10):      # joint positions (Euclidean part of q) and velocities
        dx = np.zeros(2 * nv)
        dx[i] = eps
        xp, xm = xs.copy(), xs.copy()
        xp[t] = p.state.integrate(xs[t], dx)
        xm[t] = p.state.integrate(xs[t], -dx)
        fd = (p.cost(xp, us) - p.cost(xm, us)) / (2 * eps)
        assert fd == pytest.approx(d.running.lx[t, i], rel=1e-5, abs=1e-5), i


def test_two_contact_sets_at_a_knot_stay_on_the_python_path(stand):
    """A knot whose force terms name two contact sets keeps its force terms on the Python path
    (the kernel reads one force vector per knot); the sum is unchanged."""
    from dynamics import ContactSet
    task, p0 = stand
    p = task.build_problem(task.initial_state(), N, 0.01, backend="numba")
    m = p.model
    cs = p.cost_groups[0].item.terms["force"][0]._cf.contacts
    two = ContactSet(m, frames=cs.frames[:2], kind="point")
    p.cost_groups[0].item.add("two_feet", ContactForceCost(m, two, np.zeros(two.nc)), 1e-3)
    cc = p._compiled_costs()
    assert {t.name for t in cc.terms} == {"state", "control", None} and not cc.covers_all
    xs, us = _perturbed(task, p, 9)
    ref_cost, ref = _python_path(p, xs, us)
    np.testing.assert_allclose(p.cost(xs, us), ref_cost, rtol=1e-13)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    _close({k: v for k, v in d.arrays().items()}, ref)


def test_wrench_cone_on_atlas_compiled_against_the_python_terms():
    """atlas-balance (6-D sole contacts: contact-force, wrench-cone and CoM terms compiled, nothing
    on the Python path): values and derivatives equal the Python path, some cone rows active."""
    task = tasks.get_task("atlas-balance", cones="penalty")
    p = task.build_problem(task.initial_state(), 4, 0.01, backend="numba")
    cc = p._compiled_costs()
    kinds = {t.name: t.kind for t in cc.terms if t.group >= 0}
    assert kinds["force"] == CONTACT_FORCE and kinds["wrench_cone"] == FORCE_CONE and kinds["com"] == COM_POSITION
    assert cc.covers_all
    xs, us = _perturbed(task, p, 2, du=40.0)
    ref_cost, ref = _python_path(p, xs, us)
    np.testing.assert_allclose(p.cost(xs, us), ref_cost, rtol=1e-13)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    _close({k: v for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}, ref, tol=1e-11)
    cone = p.cost_groups[0].item.terms["wrench_cone"][0]
    q, v = xs[:-1, :p.model.nq], np.ascontiguousarray(xs[:-1, p.model.nq:])
    lam = p.backend.contact_dynamics(p.model, q, v, cone._cf.torques(q, v, us), cone._cf.contacts)[1]
    assert np.any(cone.constraint_values(lam) > 0)
