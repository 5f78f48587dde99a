"""The dynamics stage's contact solves shared with the contact-force costs and constraints when a
contact set's knots are not contiguous (hyq-trot at N = 40: the same stance recurs a gait cycle
later, the dynamics group's rows an index array): the cost derivatives and the constraint values
and Jacobians are those the terms get by solving again at those knots (the solves of contiguous
groups only, what was shared before), and the terms no longer call the backend's contact solve for
them (a counting wrapper on the backend). Equal to rounding, not bitwise: the dynamics stage's
prepared solve (``prepare_contact_dynamics_derivatives``) and the backend's
``contact_dynamics_derivatives`` give λ and ∂λ that may differ in the last bits (~1e-15 to 1e-13
relative), as for the contiguous solves shared before."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics import available_backends
from solvers.problem_constraints import ProblemConstraints
from solvers.problem_costs import contact_solves_for
from tasks.registry import get_task

pytestmark = pytest.mark.skipif(not available_backends()["numba"][0], reason="numba backend unavailable")

N, DT = 40, 0.02


@pytest.fixture(scope="module")
def trot():
    """hyq-trot at N = 40 re-phased into the gait (two stance sets recurring on non-contiguous
    knots), a perturbed rollout, and its dynamics data after the dynamics stage."""
    task = get_task("hyq-trot")
    p = task.build_problem(task.initial_state(), N, DT, backend="numba")
    task.update_problem(p, task.start_time + 0.1)
    rng = np.random.default_rng(3)
    us = np.array(task.nominal_controls(p)) + 2.0 * rng.normal(size=(N, p.nu))
    xs = p.rollout(us)
    assert np.all(np.isfinite(xs))
    d = p.create_data(second_order=False)
    solves = d.calc_dynamics(xs[:-1], us, False)
    arrays = [r for r, _, _ in solves if not isinstance(r, slice)]
    assert arrays and all(np.all(np.diff(r) > 0) for r in arrays)      # the case under test is there
    return p, xs, us, d, solves


class _Counter:
    """Counts calls of the backend's contact_dynamics_derivatives (an instance attribute wrapping it)."""

    def __init__(self, mp, backend):
        self.calls = 0
        inner = backend.contact_dynamics_derivatives

        def counted(*a, **k):
            self.calls += 1
            return inner(*a, **k)
        mp.setattr(backend, "contact_dynamics_derivatives", counted)


def _evaluate(p, xs, us, d, solves, python: bool = False):
    """Cost derivatives and constraint values/Jacobians with these solves, and the backend's contact
    solves made on the way (the compiled terms, or with ``python`` the Python terms)."""
    pc = ProblemConstraints(p, False)
    cdata = pc.create_data()
    with pytest.MonkeyPatch.context() as mp:
        count = _Counter(mp, p.backend)
        if python:
            p.compile_costs = False
            mp.setattr(pc, "compile_terms", False)
        try:
            p.costs.derivatives_into(xs, us, d.running, d.terminal, solves)
            pc.evaluate(xs, us, cdata, solves)
        finally:
            p.compile_costs = True
    out = {f"running.{k}": getattr(d.running, k).copy() for k in ("l", "lx", "lu", "lxx", "lxu", "luu")}
    out.update({"g": cdata.g, "Gx": cdata.Gx, "Gu": cdata.Gu})
    return out, count.calls


@pytest.mark.parametrize("python", [False, True], ids=["compiled", "python"])
def test_shared_noncontiguous_solves_equal_solving_again(trot, python):
    p, xs, us, d, solves = trot
    contiguous = [s for s in solves if isinstance(s[0], slice)]
    shared, calls_shared = _evaluate(p, xs, us, d, solves, python)
    again, calls_again = _evaluate(p, xs, us, d, contiguous, python)
    for k in shared:
        np.testing.assert_allclose(shared[k], again[k], rtol=1e-10, atol=1e-11 * np.abs(again[k]).max(), err_msg=k)
    assert np.any(shared["g"] != 0.0) and np.any(shared["running.lx"] != 0.0)
    assert calls_again > 0                  # without them the terms solve those knots themselves
    if python:
        # the Python path hands solves only to contiguous cost/constraint groups: fewer solves
        assert calls_shared < calls_again
    else:
        assert calls_shared == 0


def test_contact_solves_for_index_rows():
    """The knots of a contiguous term group looked up in a dynamics group's sorted index rows."""
    class Dyn:
        contacts = object()

    r = np.array([0, 1, 2, 7, 8, 9])
    lam = np.arange(6.0)[:, None] * np.ones((6, 3))
    dl = np.arange(6.0)[None, :, None, None] * np.ones((3, 6, 3, 2))
    buf = type("Buf", (), {"lam": lam, "dl": dl})()
    solves = [(r, Dyn, buf)]
    for rows, first in ((slice(7, 10), 3), (slice(1, 3), 1), (slice(0, 1), 0), (slice(9, 10), 5)):
        (dyn, lk, dk), = contact_solves_for(rows, solves).values()
        n = rows.stop - rows.start
        assert dyn is Dyn
        np.testing.assert_array_equal(lk[:, 0], np.arange(first, first + n))
        np.testing.assert_array_equal(dk[1, :, 0, 0], np.arange(first, first + n))
    for rows in (slice(2, 4), slice(6, 8), slice(9, 11), slice(3, 5), slice(10, 11)):
        assert contact_solves_for(rows, solves) is None
