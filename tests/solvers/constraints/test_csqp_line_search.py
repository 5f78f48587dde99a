"""CSQP's line search on a contact problem: one contact solve of a trial trajectory (its own Euler
step's) serves its next states, contact-force costs and friction-cone constraints; the forces are the backend's contact
dynamics at each knot, and the cost and constraint values are those computed without sharing."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import CSQP
from solvers.problem_constraints import ProblemConstraints

from .problems import hyq_push


def _trial_trajectory(p, seed=0):
    """A trajectory off the rollout (gaps, non-rest controls), as a line-search trial is."""
    rng = np.random.default_rng(seed)
    xs0, us0 = p.initial_guess()
    us = us0 + rng.normal(scale=5.0, size=us0.shape)
    xs = p.state.integrate(xs0, rng.normal(scale=1e-3, size=(xs0.shape[0], p.ndx)))
    return xs, us


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_shared_trial_forces_are_the_contact_dynamics_and_give_the_same_values(backend):
    _, p = hyq_push(N=4, backend=backend)
    solver = CSQP(p, box=False)
    xs, us = _trial_trajectory(p)
    forces = solver._contact_forces(xs, us)
    assert forces is not None and forces.lam.shape[:2] == (1, p.horizon)
    m = p.model
    for t in range(p.horizon):
        d = p.knot_dynamics(t)
        assert forces.models[t] is d
        q, v = xs[t, :m.nq], xs[t, m.nq:]
        _, lam = p.backend.contact_dynamics(m, q, v, d.torques(q, v, us[t]), d.contacts)
        np.testing.assert_allclose(forces.lam[0, t, :d.contacts.nc], lam, rtol=1e-12, atol=1e-9)
    # the forces the trial's own Euler step hands out are the same
    targets, stepped = solver._next_states_and_forces(xs, us)
    np.testing.assert_allclose(stepped.lam, forces.lam, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(targets[0], p.x0)
    np.testing.assert_allclose(targets[1:], p.next_states(xs[:-1], us), rtol=1e-12, atol=1e-12)
    pc = ProblemConstraints(p, box=False)
    np.testing.assert_allclose(pc.values(xs, us, forces), pc.values(xs, us), rtol=1e-12, atol=1e-9)
    assert abs(p.costs.total(xs, us, forces) - p.cost(xs, us)) <= 1e-12 * abs(p.cost(xs, us))


def test_a_line_search_trial_solves_the_contact_dynamics_once_for_costs_and_constraints(monkeypatch):
    _, p = hyq_push(N=4)
    solver = CSQP(p, box=False)
    r = solver.solve(max_iter=1, tol=0.0)          # a QP step to try
    assert r.iterations == 1
    be = p.backend
    calls = []
    real = be.contact_dynamics

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(be, "contact_dynamics", counted)
    trial = solver._trial(1.0)
    assert trial is not None
    # one solve per knot: the dynamics' own step hands its forces to the force cost and the cones
    assert len(calls) == 1, len(calls)
    _, _, cost, _ = trial
    monkeypatch.setattr(be, "contact_dynamics", real)
    xs = p.state.integrate(solver.xs, solver.qp.dx)
    assert abs(cost - p.cost(xs, solver.us + solver.qp.du)) <= 1e-12 * abs(cost)
