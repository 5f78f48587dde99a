"""Compiled costs of a re-phased horizon (solvers/costs/compiled.py): a new knot structure of the same
phases' costs reuses their term table (:class:`~solvers.costs.compiled._TermTable`) and makes only
the knot columns anew; the layouts so made, their packed rows and the costs they give equal those
of a problem built afresh at every update, and a reference, weight or term weight changed after
a re-phase reaches the kernel. Also :func:`~solvers.costs.base.check_per_knot`'s reuse of the
arrays it validated (one value assigned to several costs)."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers.costs.base import check_per_knot
from solvers.costs.compiled import CompiledCosts, _Layout

N, DT = 12, 0.01


def _trajectory(task, p, seed):
    rng = np.random.default_rng(seed)
    nv = p.model.nv
    dx = np.concatenate([0.02 * rng.normal(size=(N + 1, nv)), 0.2 * rng.normal(size=(N + 1, nv))], -1)
    xs = p.state.integrate(np.tile(task.initial_state(), (N + 1, 1)), dx)
    return xs, task.u_stand + 5.0 * rng.normal(size=(N, p.nu))


def _derivs(p, xs, us):
    d = p.derivatives(xs, us)
    return [np.array(getattr(d.running, f)) for f in ("l", "lx", "lu", "lxx", "lxu", "luu")] + \
        [np.array(getattr(d.terminal, f)) for f in ("l", "lx", "lxx")]


def test_rephased_layouts_and_costs_equal_a_problem_built_afresh():
    """Over the first gait cycle (a new knot structure at every update) the kept problem's compiled
    costs — layouts from the kept term tables, rows packed on new structures — give bitwise the
    layout, rows, total and derivatives of a problem built afresh at each update."""
    kept = tasks.get_task("hyq-trot", cones="penalty")
    p = kept.build_problem(kept.initial_state(), N, DT, backend="numba")
    rng = np.random.default_rng(2)
    t0 = kept.start_time - 2 * DT
    structures = set()
    for i in range(14):
        t = t0 + 3 * i * DT
        x = kept.initial_state()
        x[0] += 0.01 * i
        p.set_initial_state(x)
        liftoff = kept._liftoff.copy()        # the lift-off points the kept task remembers
        kept.update_problem(p, t)
        fresh_task = tasks.get_task("hyq-trot", cones="penalty")
        fresh = fresh_task.build_problem(x, N, DT, backend="numba")
        fresh_task._liftoff = liftoff
        fresh_task.update_problem(fresh, t)
        a, b = p.costs.compiled(), fresh.costs.compiled()
        structures.add(id(a.layout))
        a._pack()
        b._pack()
        for name in ("E", "KS", "FK", "IX", "CF", "P"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=f"t = {t}: {name}")
        for ta, tb in zip(a.terms, b.terms):
            assert ta.name == tb.name and ta.group == tb.group
            np.testing.assert_array_equal(ta.rows, tb.rows)
            if ta.sl is not None:       # evenly spaced rows: the slice is the rows
                np.testing.assert_array_equal(np.arange(a.P.shape[0])[ta.sl], ta.rows)
        xs, us = _trajectory(kept, p, int(rng.integers(1000)))
        assert p.cost(xs, us) == fresh.cost(xs, us), f"t = {t}"
        for da, db in zip(_derivs(p, xs, us), _derivs(fresh, xs, us)):
            np.testing.assert_array_equal(da, db, err_msg=f"t = {t}")
    tables = CompiledCosts._layouts[p][1]
    assert len(structures) >= 6 and len(tables) < len(structures)      # the tables were reused


def test_changes_after_a_rephase_reach_the_kernel():
    """After a re-phase onto a new structure (made from a kept term table), a replaced term weight,
    cost weights and a reference are in the compiled cost, as in the Python path."""
    task = tasks.get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), N, DT, backend="numba")
    t = task.start_time + task.swing_time - 0.05      # a touchdown impulse inside the horizon
    task.update_problem(p, t)
    xs, us = _trajectory(task, p, 4)
    first = p.costs.compiled()
    p.cost(xs, us)
    task.update_problem(p, t + DT)            # another structure of the same phases' costs
    before = p.cost(xs, us)
    assert p.costs.compiled().layout is not first.layout
    swing = next(g.item for g in p.cost_groups if any(n.startswith("swing_z") for n in g.item.terms))
    name = next(n for n in swing.terms if n.startswith("swing_z"))
    swing.set_weight(name, 3.0)
    height = swing[name]
    height.target = height.target + 0.05
    state = p.cost_groups[0].item["state"]
    state.weights = 2.0 * state.weights
    after = p.cost(xs, us)
    want = p.costs.running(xs, us).sum() + p.costs.terminal(xs[-1])       # the Python path's terms
    np.testing.assert_allclose(after, want, rtol=1e-12)
    assert abs(after - before) > 1e-6 * abs(before)
    p.compile_costs = False
    np.testing.assert_allclose(p.cost(xs, us), after, rtol=1e-12)


def test_layout_from_a_kept_table_equals_one_built_alone():
    """:meth:`_Layout.build` with the term tables of earlier structures equals its build from no
    table, structure by structure (E, KS, FK, rows; the tables kept once per set of group costs)."""
    task = tasks.get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), N, DT, backend="numba")
    kin = p.backend.compiled_kinematics(p.model)
    tables: dict = {}
    for i in range(20):
        task.update_problem(p, task.start_time + 2 * i * DT)
        a, b = _Layout.build(p, kin, tables), _Layout.build(p, kin)
        for name in ("E", "KS", "FK", "IX", "CF"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert a.P_shape == b.P_shape and a.covers_all == b.covers_all
        assert [t.name for t in a.terms] == [t.name for t in b.terms]
        for ta, tb in zip(a.terms, b.terms):
            np.testing.assert_array_equal(ta.rows, tb.rows)
            assert ta.sl == tb.sl
    assert 0 < len(tables) < 20


def test_check_per_knot_reuses_only_the_arrays_it_made():
    ref = np.arange(12.0).reshape(4, 3)
    a = check_per_knot("target", ref, (3,))
    assert a is not ref and not a.flags.writeable
    assert check_per_knot("target", a, (3,)) is a                 # validated once: handed back
    b = check_per_knot("weights", a, (4, 3))                     # another shape: checked again
    assert b is not a and b.shape == (4, 3)
    with pytest.raises(ValueError, match="shape"):
        check_per_knot("target", a, (4,))
    other = np.array(ref)
    other.setflags(write=False)
    c = check_per_knot("target", other, (3,))                    # read-only, but not made here
    assert c is not other
    bad = np.full((2, 3), np.nan)
    bad.setflags(write=False)
    with pytest.raises(ValueError, match="non-finite"):
        check_per_knot("target", bad, (3,))
