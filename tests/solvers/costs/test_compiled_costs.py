"""The compiled cost terms (solvers/costs/compiled.py) on the numba backend: against central
finite differences of the cost itself, against the Python terms (which are checked against
Crocoddyl and finite differences elsewhere), and on problems that mix compiled and Python terms,
per-knot references and weights, two phases and a structure change. (The Crocoddyl comparisons
of tests/solvers/test_solvers_crocoddyl.py also solve on the numba backend, so through this path.)"""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from dynamics import get_backend
from solvers.costs.compiled import CompiledCosts
from solvers import ILQR, ActionModel, ControlCost, CostSum, FramePositionCost, FrameRotationCost, FreeDynamics, \
    JointLimitCost, ShootingProblem, StateCost

N = 8


@pytest.fixture(scope="module")
def iiwa():
    return tasks.get_task("iiwa-reach")


class _Speed:
    """A plain-Python residual term (stays on the Python path)."""

    def residual(self, x, u):
        return x[..., 7:]

    def residual_jacobian(self, x, u):
        Rx = np.zeros(x.shape[:-1] + (7, 14))
        Rx[..., :, 7:] = np.eye(7)
        return Rx, np.zeros(x.shape[:-1] + (7, 7))


def _problem(task, backend="numba"):
    """Two phases (dt 0.02 / 0.03) with every compiled kind (a frame rotation among them), per-knot
    target, per-knot term weight and per-knot state weights, and a plain-Python term on the Python
    path."""
    m, nv = task.model, task.model.nv
    x_ref = task.initial_state()
    targets = task.targets[0] + np.linspace(0.0, 0.1, N + 1)[:, None] * np.array([1.0, -0.5, 0.2])
    w_state = np.tile(np.r_[np.full(nv, 0.5), np.full(nv, 0.2)], (N + 1, 1)) * np.linspace(1, 2, N + 1)[:, None]
    run_a = CostSum({
        "ee": (FramePositionCost(m, "ee", targets), np.linspace(50.0, 150.0, N + 1)),
        "state": (StateCost(m, x_ref, w_state), 1.0),
        "control": (ControlCost(m, task.u_gravity, np.linspace(1.0, 2.0, m.nu)), 1e-3),
        "limits": (JointLimitCost(m, margin=0.3), 20.0),
        "speed": (_Speed(), 0.1),
    })
    run_b = CostSum({
        "ee": (FramePositionCost(m, "ee", targets[-1], weights=[1.0, 2.0, 0.5]), 80.0),
        "rot": (FrameRotationCost(m, "ee", task.R_home), 5.0),
        "control": (ControlCost(m, np.zeros(m.nu)), 2e-3),
    })
    terminal = CostSum({"ee": (FramePositionCost(m, "ee", targets), 1e3),
                        "state": (StateCost(m, x_ref, w_state), 1.0),
                        "limits": (JointLimitCost(m, margin=0.3), 20.0)})
    dyn = FreeDynamics()
    models = [ActionModel(m, run_a, 0.02, dyn)] * (N // 2) + [ActionModel(m, run_b, 0.03, dyn)] * (N - N // 2)
    return ShootingProblem(task.initial_state(), models, ActionModel(m, terminal, 0.0, dyn), backend=backend)


def _trajectory(task, seed=0, S=None):
    """States far enough from home that the joint-limit rows are active at some knots."""
    rng = np.random.default_rng(seed)
    lead = () if S is None else (S,)
    q = task.q_home + rng.uniform(-1.6, 1.6, lead + (N + 1, 7))
    v = rng.normal(size=lead + (N + 1, 7))
    us = task.u_gravity + 5 * rng.normal(size=lead + (N, 7))
    return np.concatenate([q, v], axis=-1), us


def test_compiled_terms_cover_the_supported_kinds(iiwa):
    p = _problem(iiwa)
    cc = p._compiled_costs()
    assert cc is not None
    compiled = {(t.group, t.name) for t in cc.terms}
    assert compiled == {(0, "ee"), (0, "state"), (0, "control"), (0, "limits"), (1, "ee"), (1, "rot"), (1, "control"),
                        (-1, "ee"), (-1, "state"), (-1, "limits")}
    assert set(cc.python_part(0, p.cost_groups[0].item).terms) == {"speed"}
    assert cc.python_part(1, p.cost_groups[1].item) is None
    assert cc.python_part(-1, p.terminal_cost) is None
    # no compiled kinematics on the numpy reference: every term on the Python path
    assert _problem(iiwa, backend="numpy")._compiled_costs() is None
    assert get_backend("numpy").compiled_kinematics(iiwa.model) is None


def test_values_and_derivatives_equal_the_python_terms(iiwa):
    p = _problem(iiwa)
    X, U = _trajectory(iiwa, S=3)
    xs, us = X[0], U[0]
    limits = p.cost_groups[0].item["limits"]
    q = X[..., :7][..., limits.q_index]
    assert np.any(q < limits.lower) and np.any(q > limits.upper)      # limit rows active on both sides
    a = p.cost(X, U)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    got = {k: v.copy() for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}
    p.compile_costs = False
    b = p.cost(X, U)
    p.derivatives(xs, us, data=d)
    np.testing.assert_allclose(a, b, rtol=1e-13)
    for k, v in got.items():
        ref = d.arrays()[k]
        assert np.abs(v - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max()), k


def test_gradient_against_central_differences(iiwa):
    """l_x, l_u of the compiled path against central differences of the compiled cost value."""
    p = _problem(iiwa)
    xs, us = _trajectory(iiwa, seed=1)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    h = 1e-6
    rng = np.random.default_rng(3)
    for t in (1, N // 2 + 1, N):
        for i in rng.choice(14, 4, replace=False):
            xp, xm = xs.copy(), xs.copy()
            xp[t, i] += h
            xm[t, i] -= h
            fd = (p.cost(xp, us) - p.cost(xm, us)) / (2 * h)
            an = d.terminal.lx[0, i] if t == N else d.running.lx[t, i]
            assert fd == pytest.approx(an, rel=1e-6, abs=1e-6), (t, i)
    h = 1e-2    # the cost is quadratic in u: central differences are exact up to rounding
    for t in (0, N - 1):
        for i in range(7):
            up, um = us.copy(), us.copy()
            up[t, i] += h
            um[t, i] -= h
            fd = (p.cost(xs, up) - p.cost(xs, um)) / (2 * h)
            assert fd == pytest.approx(d.running.lu[t, i], rel=1e-6, abs=1e-9), (t, i)


def test_changed_references_weights_and_terms_are_picked_up(iiwa):
    p = _problem(iiwa)
    xs, us = _trajectory(iiwa, seed=2)
    p.cost(xs, us)
    cc = p._compiled_costs()
    run = p.cost_groups[0].item
    run["ee"].target = iiwa.targets[1]                  # setter: a new array
    run.set_weight("control", 5e-3)
    p.terminal_cost["state"].weights = np.ones(14)
    run.add("control", ControlCost(p.model, np.ones(7)), 1e-3)   # a new term object: a new layout
    a = p.cost(xs, us)
    assert p._compiled_costs() is not cc
    p.compile_costs = False
    assert a == pytest.approx(p.cost(xs, us), rel=1e-13)


def test_each_change_alone_between_evaluations_is_picked_up(iiwa):
    """The compiled costs look at their terms again only after some reference, weight or term was
    replaced (counted: every way of replacing one, the terms dict's own methods included); each
    change alone, between two evaluations, reaches the compiled total (oracle: the Python terms)."""
    p = _problem(iiwa)
    xs, us = _trajectory(iiwa, seed=4)
    run = p.cost_groups[0].item

    def same():
        a = float(p.cost(xs, us))
        assert a == float(p.cost(xs, us))                       # a second evaluation, nothing changed
        p.compile_costs = False
        assert a == pytest.approx(p.cost(xs, us), rel=1e-13)
        p.compile_costs = True
        return a

    values = [same()]
    changes = (
        lambda: setattr(run["ee"], "target", iiwa.targets[1]),
        lambda: setattr(p.terminal_cost["state"], "weights", 2.0 * np.ones(14)),
        lambda: run.terms.__setitem__("control", (run["control"], np.asarray(7e-3))),
        lambda: run.terms.update(control=(run["control"], np.asarray(2e-3))),
        lambda: run.terms.__delitem__("control"),
        lambda: run.terms.setdefault("control", (ControlCost(p.model, np.ones(7)), np.asarray(1e-3))),
    )
    for change in changes:
        change()
        values.append(same())
    assert len(set(values)) == len(values)                      # each change moved the cost


def test_solver_result_unchanged_by_compilation(iiwa):
    p = iiwa.build_problem(iiwa.initial_state(), 16, 0.02, backend="numba")
    r1 = ILQR(p).solve(max_iter=20, tol=1e-8)
    p.compile_costs = False
    r2 = ILQR(p).solve(max_iter=20, tol=1e-8)
    assert r1.cost == pytest.approx(r2.cost, rel=1e-10)
    np.testing.assert_allclose(r1.us, r2.us, atol=1e-7 * np.abs(r2.us).max())


@pytest.mark.parametrize("scale", [1.0, 0.05])     # large rotations (closed forms), small (series)
def test_floating_base_state_cost_and_difference(scale):
    """HyQ (free-flyer): the compiled x ⊖ x_ref, its Jacobian (SE(3) right-Jacobian inverse) and
    the solver's compiled batched difference against the numpy Lie algebra, and l_x against
    central differences along tangent perturbations x ⊕ h e_i."""
    task = tasks.get_task("hyq-stand", cones="penalty")
    p = task.build_problem(task.initial_state(), 6, 0.02, backend="numba")
    m, n = p.model, p.horizon
    assert any(t.name == "state" and t.group == 0 for t in p._compiled_costs().terms)
    rng = np.random.default_rng(5)
    q0 = task.initial_state()[:m.nq]
    q = m.random_configuration(rng, size=n + 1)
    q = m.integrate(np.tile(q0, (n + 1, 1)), scale * m.difference(np.tile(q0, (n + 1, 1)), q))
    xs = np.concatenate([q, rng.normal(size=(n + 1, m.nv))], axis=-1)
    us = rng.normal(size=(n, m.nu))
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    got = {k: v.copy() for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}
    a = p.cost(xs, us)
    from solvers.state_space import StateSpace
    ref_space = StateSpace(m)
    np.testing.assert_allclose(p.state.difference(xs[:-1], xs[1:]), ref_space.difference(xs[:-1], xs[1:]),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(p.state.difference(xs[0], xs[1]), ref_space.difference(xs[0], xs[1]), rtol=0,
                               atol=1e-12)
    p.compile_costs = False
    assert a == pytest.approx(p.cost(xs, us), rel=1e-13)
    p.derivatives(xs, us, data=d)
    for k, v in got.items():
        ref = d.arrays()[k]
        assert np.abs(v - ref).max() <= 1e-11 * max(1.0, np.abs(ref).max()), k
    p.compile_costs = True
    h = 1e-6
    for t in (0, n):
        for i in (0, 3, 4, 5, 9, 20):       # base translation, base rotation, a leg joint, a velocity
            e = np.zeros(2 * m.nv)
            e[i] = h
            xp, xm = xs.copy(), xs.copy()
            xp[t] = p.state.integrate(xs[t], e)
            xm[t] = p.state.integrate(xs[t], -e)
            fd = (p.cost(xp, us) - p.cost(xm, us)) / (2 * h)
            an = got["terminal.lx"][0, i] if t == n else got["running.lx"][t, i]
            assert fd == pytest.approx(an, rel=1e-5, abs=1e-5 * max(1.0, abs(an))), (t, i)


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs numba with two threads")
def test_two_threads_equal_one_thread_and_the_python_terms(iiwa):
    """The parallel driver splits the candidates (values of S > 1 trajectories) or one trajectory's
    knots (its value and derivatives) over the backend's threads: per-knot derivatives bitwise
    those of one thread, totals to rounding, and both equal the Python terms."""
    n = 3 * CompiledCosts.MIN_KNOTS_PER_THREAD     # long enough for the knot split
    rng = np.random.default_rng(5)
    X = np.concatenate([iiwa.q_home + rng.uniform(-1.0, 1.0, (3, n + 1, 7)), rng.normal(size=(3, n + 1, 7))], -1)
    U = iiwa.u_gravity + rng.normal(size=(3, n, 7))
    got = {}
    for threads in (1, 2):
        p = iiwa.build_problem(iiwa.initial_state(), n, 0.02, backend=get_backend("numba", threads=threads))
        assert p._compiled_costs().kin.threads() == threads
        d = p.create_data()
        p.derivatives(X[0], U[0], data=d)
        got[threads] = (p.cost(X, U), p.cost(X[0], U[0]),
                        {k: v.copy() for k, v in d.arrays().items() if k.startswith(("running", "terminal"))})
    np.testing.assert_allclose(got[2][0], got[1][0], rtol=1e-14)
    assert got[2][1] == pytest.approx(got[1][1], rel=1e-14)
    for k, v in got[2][2].items():
        if not k.endswith(".l"):          # per-knot rows: the same arithmetic on either thread
            assert np.array_equal(v, got[1][2][k]), k
    p.compile_costs = False
    np.testing.assert_allclose(got[2][0], p.cost(X, U), rtol=1e-13)
    d = p.create_data()
    p.derivatives(X[0], U[0], data=d)
    for k, v in got[2][2].items():
        ref = d.arrays()[k]
        assert np.abs(v - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max()), k



def _compiled_equals_python(p, X, U, cost_rtol=1e-13, tol=1e-12):
    """Values of X, U (S stacked or one trajectory) and derivatives along the first with the
    compiled terms equal those of the Python path (the problem is left on the compiled path); the
    compiled derivatives returned."""
    xs, us = (X[0], U[0]) if X.ndim == 3 else (X, U)
    a = p.cost(X, U)
    d = p.create_data()
    p.derivatives(xs, us, data=d)
    got = {k: v.copy() for k, v in d.arrays().items() if k.startswith(("running", "terminal"))}
    p.compile_costs = False
    np.testing.assert_allclose(a, p.cost(X, U), rtol=cost_rtol)
    p.derivatives(xs, us, data=d)
    for k, v in got.items():
        ref = d.arrays()[k]
        assert np.abs(v - ref).max() <= tol * max(1.0, np.abs(ref).max()), k
    p.compile_costs = True
    return got


def test_frame_height_term_compiled_against_the_python_term(iiwa):
    """FrameHeightCost (per-knot targets and weights, a term weight per knot) on the compiled path:
    values, l_x, l_xx (Gauss–Newton) against the Python term, and l_x against central differences."""
    from solvers.costs import FrameHeightCost
    m = iiwa.model
    h = np.linspace(0.3, 0.6, N + 1)
    w = np.linspace(1.0, 3.0, N + 1)[:, None]
    run = CostSum({"z": (FrameHeightCost(m, "ee", h, weights=w), np.linspace(20.0, 40.0, N + 1)),
                   "control": (ControlCost(m, iiwa.u_gravity), 1e-3)})
    terminal = CostSum({"z": (FrameHeightCost(m, "ee", 0.45), 100.0)})
    dyn = FreeDynamics()
    p = ShootingProblem(iiwa.initial_state(), [ActionModel(m, run, 0.02, dyn)] * N,
                        ActionModel(m, terminal, 0.0, dyn), backend="numba")
    cc = p._compiled_costs()
    assert {(t.group, t.name) for t in cc.terms} == {(0, "z"), (0, "control"), (-1, "z")} and cc.covers_all
    X, U = _trajectory(iiwa, seed=4, S=3)
    got = _compiled_equals_python(p, X, U)
    assert np.abs(got["running.lxx"]).max() > 0 and np.abs(got["terminal.lx"]).max() > 0
    xs, us = X[0], U[0]
    eps = 1e-6
    for t in (2, N):
        for i in range(7):
            xp, xm = xs.copy(), xs.copy()
            xp[t, i] += eps
            xm[t, i] -= eps
            fd = (p.cost(xp, us) - p.cost(xm, us)) / (2 * eps)
            an = got["terminal.lx"][0, i] if t == N else got["running.lx"][t, i]
            assert fd == pytest.approx(an, rel=1e-6, abs=1e-6), (t, i)


def _trot_trajectory(task, p, seed):
    """States near standing (tangent perturbations) and controls around the standing torques."""
    rng = np.random.default_rng(seed)
    n, nv = p.horizon, p.model.nv
    dx = np.concatenate([0.02 * rng.normal(size=(n + 1, nv)), 0.2 * rng.normal(size=(n + 1, nv))], -1)
    xs = p.state.integrate(np.tile(task.initial_state(), (n + 1, 1)), dx)
    return xs, task.u_stand + 5.0 * rng.normal(size=(n, p.nu))


def test_trot_problem_compiled_equals_python_path():
    """A re-phased hyq-trot problem (swing height and foothold terms, touchdown velocity, contact
    force and cone terms, an impulse knot): the compiled terms plus the Python remainder give the
    Python path's values and derivatives."""
    task = tasks.get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), 16, 0.01, backend="numba")
    task.update_problem(p, 0.5)
    assert any(type(t.cost).__name__ == "FrameHeightCost" for t in p._compiled_costs().terms)
    xs, us = _trot_trajectory(task, p, 7)
    _compiled_equals_python(p, xs, us, cost_rtol=1e-12, tol=1e-11)


def test_layout_reused_when_a_knot_structure_returns():
    """A re-phased horizon that returns to an earlier knot structure reuses that structure's compiled
    costs (kept by the problem's costs, layout not rebuilt), re-packs the references and scales of
    the current update, and still equals the Python path; a changed term list gets a new layout."""
    task = tasks.get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), 12, 0.01, backend="numba")
    xs, us = _trot_trajectory(task, p, 11)
    task.update_problem(p, 0.5)
    first = p._compiled_costs()
    task.update_problem(p, 0.61)
    assert p._compiled_costs().layout is not first.layout
    p.set_initial_state(xs[0])         # other references than at the first visit
    task.update_problem(p, 0.5)
    again = p._compiled_costs()
    assert again is first and again.layout is first.layout
    a = p.cost(xs, us)
    _compiled_equals_python(p, xs, us, cost_rtol=1e-12, tol=1e-11)
    p.cost_groups[0].item.add("extra", ControlCost(p.model, task.u_stand + 1.0), 1e-2)
    assert p._compiled_costs().layout is not first.layout
    assert p.cost(xs, us) > a
    _compiled_equals_python(p, xs, us, cost_rtol=1e-12, tol=1e-11)


def test_frame_rotation_far_from_its_target_and_on_a_floating_base():
    """FrameRotationCost compiled against the Python term where the rotation error is large (up to
    near π, the SO(3) log's hard case) and on a floating base (HyQ's foot frames, Atlas's soles
    in the walk's swing and impact terms), with per-knot targets."""
    rng = np.random.default_rng(11)
    from dynamics import lie
    for name, frame in (("iiwa-reach", "ee"), ("hyq-stand", None)):
        task = tasks.get_task(name)
        m = task.model
        frame = frame or task.feet[0]
        targets = lie.so3_exp(rng.normal(size=(N + 1, 3)) * np.linspace(0.1, 3.0, N + 1)[:, None])
        run = CostSum({"rot": (FrameRotationCost(m, frame, targets, weights=[1.0, 2.0, 0.5]), 3.0),
                       "control": (ControlCost(m, np.zeros(m.nu)), 1e-3)})
        terminal = CostSum({"rot": (FrameRotationCost(m, frame, targets[-1]), 10.0)})
        dyn = FreeDynamics()
        p = ShootingProblem(task.initial_state(), [ActionModel(m, run, 0.02, dyn)] * N,
                            ActionModel(m, terminal, 0.0, dyn), backend="numba")
        assert p._compiled_costs().covers_all
        dx = np.concatenate([0.8 * rng.normal(size=(N + 1, m.nv)), rng.normal(size=(N + 1, m.nv))], -1)
        xs = p.state.integrate(np.tile(task.initial_state(), (N + 1, 1)), dx)
        us = rng.normal(size=(N, m.nu))
        _compiled_equals_python(p, xs, us, cost_rtol=1e-12, tol=1e-11)


def _equal_to_python_and_differences(p, task, rng, knots, n_dirs, S=3):
    """On S random states (tangent perturbations of the task's initial state) and controls: the
    compiled values and derivatives equal the Python path's (:func:`_compiled_equals_python`), the
    configuration blocks of l_xx and the terminal l_x are not all zero, and l_x at ``knots`` equals
    central differences of the compiled cost along the state manifold (``x ⊕ ±h e_i``) in the first
    n_dirs tangent directions."""
    m, nv = p.model, p.model.nv
    dx = np.concatenate([0.6 * rng.normal(size=(S, N + 1, nv)), rng.normal(size=(S, N + 1, nv))], -1)
    X = p.state.integrate(np.broadcast_to(task.initial_state(), (S, N + 1, p.nx)).copy(), dx)
    U = rng.normal(size=(S, N, m.nu))
    got = _compiled_equals_python(p, X, U, cost_rtol=1e-12, tol=1e-12)
    assert np.abs(got["running.lxx"][:, :nv, :nv]).max() > 0 and np.abs(got["terminal.lx"][0, :nv]).max() > 0
    xs, us = X[0], U[0]
    h = 1e-6
    for t in knots:
        for i in range(n_dirs):
            e = np.zeros((N + 1, p.ndx))
            e[t, i] = h
            fd = (p.cost(p.state.integrate(xs, e), us) - p.cost(p.state.integrate(xs, -e), us)) / (2 * h)
            an = got["terminal.lx"][0, i] if t == N else got["running.lx"][t, i]
            assert fd == pytest.approx(an, rel=1e-6, abs=1e-6), (t, i)


@pytest.mark.parametrize("name", ["iiwa-reach", "hyq-stand"])
def test_frame_velocity_term_compiled_against_the_python_term_and_differences(name):
    """FrameVelocityCost (per-knot targets, weights and term weight; a terminal term) on the compiled
    path, on a fixed base (iiwa) and a floating one (a HyQ foot): values, l_x, l_xx (Gauss–Newton)
    against the Python term, and l_x against central differences of the cost along the state
    manifold (x ⊕ ±h e_i)."""
    from solvers.costs import FrameVelocityCost
    task = tasks.get_task(name)
    m = task.model
    frame = "ee" if name == "iiwa-reach" else task.feet[1]
    rng = np.random.default_rng(21)
    targets = rng.normal(size=(N + 1, 3))
    weights = rng.uniform(0.5, 2.0, size=(N + 1, 3))
    run = CostSum({"vel": (FrameVelocityCost(m, frame, targets, weights=weights), np.linspace(2.0, 4.0, N + 1)),
                   "control": (ControlCost(m, np.zeros(m.nu)), 1e-3)})
    terminal = CostSum({"vel": (FrameVelocityCost(m, frame, weights=[1.0, 0.5, 2.0]), 10.0)})
    dyn = FreeDynamics()
    p = ShootingProblem(task.initial_state(), [ActionModel(m, run, 0.02, dyn)] * N,
                        ActionModel(m, terminal, 0.0, dyn), backend="numba")
    cc = p._compiled_costs()
    assert {(t.group, t.name) for t in cc.terms} == {(0, "vel"), (0, "control"), (-1, "vel")} and cc.covers_all
    _equal_to_python_and_differences(p, task, rng, (3, N), 2 * m.nv)


def test_trot_problem_costs_all_compiled():
    """Every cost term of a re-phased hyq-trot problem, its touchdown velocity terms included, is
    compiled: nothing stays on the Python path."""
    task = tasks.get_task("hyq-trot", cones="penalty")
    p = task.build_problem(task.initial_state(), 16, 0.01, backend="numba")
    task.update_problem(p, 0.5)
    cc = p._compiled_costs()
    assert any(type(t.cost).__name__ == "FrameVelocityCost" for t in cc.terms)
    assert cc.covers_all


@pytest.mark.parametrize("name", ["hyq-stand", "iiwa-reach"])
def test_com_position_term_compiled_against_the_python_term_and_differences(name):
    """ComPositionCost (per-knot targets, weights and term weight; a terminal term) on the compiled
    path, on a floating base (HyQ) and a fixed one (iiwa), at knots with and without frame terms:
    values, l_x, l_xx (Gauss–Newton) against the Python term, and l_x against central differences
    of the cost along the state manifold."""
    from solvers.costs import ComPositionCost
    task = tasks.get_task(name)
    m = task.model
    frame = "ee" if name == "iiwa-reach" else task.feet[2]
    rng = np.random.default_rng(23)
    targets = rng.normal(scale=0.3, size=(N + 1, 3))
    weights = rng.uniform(0.5, 2.0, size=(N + 1, 3))
    run_a = CostSum({"com": (ComPositionCost(m, targets, weights=weights), np.linspace(20.0, 40.0, N + 1)),
                     "control": (ControlCost(m, np.zeros(m.nu)), 1e-3)})
    run_b = CostSum({"com": (ComPositionCost(m, targets[-1]), 30.0),
                     "foot": (FramePositionCost(m, frame, rng.normal(size=3)), 5.0)})
    terminal = CostSum({"com": (ComPositionCost(m, targets[-1], weights=[1.0, 0.5, 2.0]), 100.0)})
    dyn = FreeDynamics()
    p = ShootingProblem(task.initial_state(),
                        [ActionModel(m, run_a, 0.02, dyn)] * (N // 2) + [ActionModel(m, run_b, 0.02, dyn)] * (N // 2),
                        ActionModel(m, terminal, 0.0, dyn), backend="numba")
    assert p._compiled_costs().covers_all
    _equal_to_python_and_differences(p, task, rng, (1, N // 2 + 1, N), m.nv)
