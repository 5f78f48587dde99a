"""The compiled constraint evaluation (solvers/constraints/compiled.py) against the numpy terms (the
reference, themselves checked against finite differences and Crocoddyl in test_constraint_terms.py):
values and Jacobians of every compiled kind, with the contact solves of the dynamics stage and the
forward pass's forces, and a group that mixes compiled terms with a plain-Python one."""

from __future__ import annotations

import numpy as np

import tasks
from solvers import (
    CSQP,
    ActionModel,
    ControlBounds,
    CustomConstraint,
    FrameHalfSpace,
    JointPositionBounds,
    JointVelocityBounds,
    ShootingProblem,
    WrenchCone,
)
from solvers.problem_constraints import ProblemConstraints

from .problems import WALL, hyq_push, iiwa_wall

ATOL = 1e-12


class _Disc:
    """Plain-Python constraint: ``q_0² + q_1² ≤ 4`` (its own Jacobian)."""

    lower, upper, name = np.array([-np.inf]), np.array([4.0]), "disc"

    def residual(self, x, u):
        return (x[:, 0] ** 2 + x[:, 1] ** 2)[:, None]

    def jacobian(self, x, u):
        gx = np.zeros((x.shape[0], 1, 14))
        gx[:, 0, 0], gx[:, 0, 1] = 2 * x[:, 0], 2 * x[:, 1]
        return gx, None


def _trajectory(p, seed: int, scale: float = 0.05):
    rng = np.random.default_rng(seed)
    xs = p.state.integrate(np.repeat(p.x0[None], p.horizon + 1, 0), rng.normal(size=(p.horizon + 1, p.ndx)) * scale)
    u0 = getattr(p, "initial_controls", None)
    us = np.zeros((p.horizon, p.nu)) + (0.0 if u0 is None else u0) + rng.normal(size=(p.horizon, p.nu))
    return np.ascontiguousarray(xs), us


def _both(p, box: bool = True):
    """(compiled, numpy reference) stacks of the same problem; the compiled terms' Python methods
    are made to raise, so a compiled term that fell back to Python fails the test."""
    pc, ref = ProblemConstraints(p, box), ProblemConstraints(p, box)
    ref.compile_terms = False
    cc = pc.compiled()
    assert cc is not None
    return pc, ref, cc


def _forbid_python(pc, cc):
    """Shadow the compiled terms' numpy methods (the kernel's kind is chosen by class)."""
    def boom(*a, **k):
        raise AssertionError("a compiled term was evaluated in Python")
    for g, done in zip(pc.groups, cc.compiled):
        for i in done:
            g.terms[i].residual = g.terms[i].jacobian = boom


def _restore(pc, cc):
    for g, done in zip(pc.groups, cc.compiled):
        for i in done:
            vars(g.terms[i]).pop("residual", None)
            vars(g.terms[i]).pop("jacobian", None)


def _compare(pc, ref, cc, xs, us, solves=(), forces=None):
    a, b = pc.create_data(), ref.create_data()
    ref.evaluate(xs, us, b, solves)
    gr = ref.values(xs, us, forces)
    _forbid_python(pc, cc)
    try:
        pc.evaluate(xs, us, a, solves)
        g = pc.values(xs, us, forces)
    finally:
        _restore(pc, cc)
    assert np.abs(b.g).max() > 0 and np.abs(b.Gx).max() > 0
    for mine, theirs in ((a.g, b.g), (a.Gx, b.Gx), (a.Gu, b.Gu), (g, gr)):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=ATOL)
    return a


def test_iiwa_joint_bounds_half_space_control_bounds_and_a_custom_term():
    p0 = iiwa_wall(6)
    m = p0.model
    run = p0.running_models[0]
    custom = CustomConstraint(_Disc())
    cons = [FrameHalfSpace(m, "ee", [0, 1, 0.5], 0.1), JointPositionBounds(m, margin=0.05),
            JointVelocityBounds(m, limit=1.5, dofs=[0, 2, 5]), custom,
            ControlBounds(m, np.full(m.nu, -5.0), np.full(m.nu, 5.0))]
    term_cons = [JointVelocityBounds(m, limit=1.0), FrameHalfSpace(m, "ee", [0, 0, -1], -0.2)]
    p = ShootingProblem(p0.x0, [ActionModel(m, run.cost, run.dt, run.dynamics, constraints=cons)] * 3
                        + [ActionModel(m, run.cost, run.dt, run.dynamics, constraints=cons[:2])] * 3,
                        ActionModel(m, p0.terminal_model.cost, 0.0, run.dynamics, constraints=term_cons),
                        backend="numba", u_lower=np.full(m.nu, -50.0), u_upper=np.full(m.nu, 50.0))
    pc, ref, cc = _both(p)
    # the custom term stays in Python, every library term (and the control box) is compiled
    mixed = [i for i, g in enumerate(pc.groups) if custom in g.terms]
    assert len(mixed) == 1 and cc.compiled[mixed[0]] == set(range(len(pc.groups[mixed[0]].terms))) - {3}
    assert all(done == set(range(len(g.terms))) for i, (g, done) in enumerate(zip(pc.groups, cc.compiled))
               if i not in mixed)
    xs, us = _trajectory(p, 0, 0.3)
    a = _compare(pc, ref, cc, xs, us)
    assert np.all(a.Gu[p.horizon] == 0.0)
    # several candidates at once (the line search's batch)
    X = np.stack([xs, _trajectory(p, 1, 0.3)[0]])
    U = np.stack([us, us + 1.0])
    np.testing.assert_allclose(pc.values(X, U), ref.values(X, U), rtol=0, atol=ATOL)


def test_hyq_friction_cones_with_the_dynamics_stage_solves_and_the_rollout_forces():
    _, p = hyq_push(5)
    pc, ref, cc = _both(p)
    assert cc.sources and all(done == set(range(len(g.terms))) for g, done in zip(pc.groups, cc.compiled))
    xs, us = _trajectory(p, 2)
    _compare(pc, ref, cc, xs, us)                          # forces solved by the evaluation itself
    solver = CSQP(p)
    solves = solver.data.calc_dynamics(xs[:-1], us, False)
    forces = solver._contact_forces(xs, us)
    assert solves and forces is not None
    _compare(pc, ref, cc, xs, us, solves, forces)          # read from the solves / the rollout


def test_hyq_eight_facet_cones_compiled_and_solved():
    """A cone of 8 faces (9 rows per foot): compiled against numpy, and CSQP reaches its KKT point."""
    _, p = hyq_push(5, facets=8)
    pc, ref, cc = _both(p, box=False)
    assert pc.groups[0].terms[0].nc == 36
    _compare(pc, ref, cc, *_trajectory(p, 5))
    r = CSQP(p, box=False, eps_abs=1e-9, eps_rel=0.0).solve(max_iter=50, tol=1e-8)
    assert r.converged and np.isfinite(r.cost), r.reason
    assert (r.multipliers > 1e-6).sum() >= 2                            # faces active under the push


def test_atlas_wrench_cones_of_the_balance_task():
    """atlas-balance's hard wrench cones (two 6-D soles), one group with the running knots."""
    task = tasks.get_task("atlas-balance")
    p = task.build_problem(task.initial_state(), 3, 0.02, backend="numba")
    assert any(isinstance(c, WrenchCone) for c in p.running_models[0].constraints)
    pc, ref, cc = _both(p, box=False)
    xs, us = _trajectory(p, 3, 0.02)
    us += np.random.default_rng(4).normal(size=us.shape) * 30
    _compare(pc, ref, cc, xs, us)


def test_numpy_backend_and_compile_terms_off_stay_on_the_python_path():
    assert ProblemConstraints(iiwa_wall(3, backend="numpy"), True).compiled() is None
    pc = ProblemConstraints(iiwa_wall(3), True)
    pc.compile_terms = False
    assert pc.compiled() is None



def test_rephased_structures_take_their_kept_layout_and_compiled_evaluation():
    """A problem re-phased back to a knot structure met before takes that structure's row layout
    and compiled evaluation again (kept, not made anew: the MPC re-phasing of a gait); its tables
    equal those of a ProblemConstraints built afresh on the structure, its values and Jacobians
    those of the numpy terms. A term whose bounds were replaced since (``set_bounds``) gets its
    structures laid out anew, with the new bounds."""
    p = iiwa_wall(6)
    a = p.running_models[0]
    m = p.model
    half = FrameHalfSpace(m, "ee", [0, 1, 0.5], 0.1)
    b = ActionModel(m, a.cost, a.dt, a.dynamics, constraints=[half, JointVelocityBounds(m, limit=1.5, dofs=[0, 2])])
    phases = [[a] * 6, [b] + [a] * 5, [a, b, b] + [a] * 3]
    pc = ProblemConstraints(p, True)
    kept = {}
    tables = ("lower", "upper", "equality", "bounded", "state_only", "row_term")

    def check(i, seed):
        fresh, ref = ProblemConstraints(p, True), ProblemConstraints(p, True)
        ref.compile_terms = False
        assert pc.m == fresh.m
        for name in tables:
            np.testing.assert_array_equal(getattr(pc, name), getattr(fresh, name))
        xs, us = _trajectory(p, seed, 0.02)
        _compare(pc, ref, pc.compiled(), xs, us)

    for visit in range(2):
        for i, phase in enumerate(phases):
            p.set_running_models(phase)
            pc.build()
            cc = pc.compiled()
            assert cc is not None
            if visit == 0:
                kept[i] = (pc.lower, cc)
                assert all(cc is not c for j, (_, c) in kept.items() if j != i)
            else:
                assert pc.lower is kept[i][0] and cc is kept[i][1]
            check(i, 10 * visit + i)
    half.set_bounds([-np.inf], [0.3])
    for i in (1, 2):
        p.set_running_models(phases[i])
        pc.build()
        assert pc.lower is not kept[i][0] and pc.compiled() is not kept[i][1]
        check(i, 30 + i)
    assert pc.upper[1, 0] == 0.3                   # the half-space's new bound (knot 1 holds b, its first term)


def test_a_solver_rephased_to_another_layout_of_the_same_size_takes_its_equality_rows():
    """CSQP on a problem re-phased to knots whose rows are as many but an equality where an
    inequality was (the ADMM's penalty of those rows is 10³ ρ) solves as a solver built on the
    re-phased problem does: the same ADMM iterations, the same iterates."""
    p = iiwa_wall(6)
    a = p.running_models[0]
    m = p.model
    eq = FrameHalfSpace(m, "ee", [0, 1, 0], 0.0)
    eq.set_bounds([WALL], [WALL])                       # the end effector on the wall's plane: an equality row
    b = ActionModel(m, a.cost, a.dt, a.dynamics, constraints=[eq, *a.constraints[1:]])
    s = CSQP(p)
    s.solve(max_iter=2)
    p.set_running_models([a] + [b] * 5)                 # (knot 0's state-only rows are x0's: left inequalities)
    fresh = CSQP(p)
    assert fresh.constraints.m == s.constraints.m and fresh.constraints.equality[1:6, 0].all()
    assert not s.constraints.equality.any()
    s.reset_multipliers()
    r = s.solve(max_iter=3)
    r0 = fresh.solve(max_iter=3)
    assert r.qp_iterations == r0.qp_iterations and max(r0.qp_iterations) < 1000    # (the old layout's flags: 1000 each)
    np.testing.assert_array_equal(r.xs, r0.xs)
    np.testing.assert_array_equal(r.multipliers, r0.multipliers)
