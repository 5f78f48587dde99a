"""Bad constraint input is refused early with the term (and knot) named; an infeasible start or a
constraint that goes non-finite ends the solve with a diagnostic and a finite trajectory, never
NaNs; multipliers warm-start the next solve."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import (
    CSQP,
    SOLVERS,
    ActionModel,
    ControlBounds,
    FrameHalfSpace,
    FreeDynamics,
    JointVelocityBounds,
    ShootingProblem,
)

from .problems import iiwa_wall


@pytest.fixture(scope="module")
def wall():
    return iiwa_wall(6, dt=0.05, backend="numpy")


def _with(p, running=(), terminal=()):
    dyn = FreeDynamics(passive_forces=False)
    am, tm = p.running_models[0], p.terminal_model
    return ShootingProblem(p.x0, [ActionModel(p.model, am.cost, am.dt, dyn, constraints=list(running))] * p.horizon,
                           ActionModel(p.model, tm.cost, 0.0, dyn, constraints=list(terminal)), backend="numpy")


def test_lower_above_upper_names_the_term_row_and_knot(wall):
    m = wall.model
    with pytest.raises(ValueError, match=r"constraint 'control_bounds': lower bound 2 > upper bound 1 in row 3"):
        ControlBounds(m, np.r_[np.zeros(3), 2.0, np.zeros(3)], np.ones(7))
    lo = np.zeros((5, 7))
    lo[4, 1] = 3.0
    with pytest.raises(ValueError, match=r"row 1 at knot 4"):
        ControlBounds(m, lo, np.ones((5, 7)))
    with pytest.raises(ValueError, match="joint_velocity_bounds.*NaN"):
        JointVelocityBounds(m, lower=np.full(7, np.nan), upper=np.ones(7))


def test_wrong_shapes_are_refused(wall):
    m = wall.model
    with pytest.raises(ValueError, match=r"upper bound has shape \(6,\); expected \(7,\)"):
        ControlBounds(m, -np.ones(7), np.ones(6))
    with pytest.raises(ValueError, match="normal must be a finite non-zero"):
        FrameHalfSpace(m, "ee", [0, 0], 0.1)
    with pytest.raises(TypeError, match="lower' and 'upper'"):
        ActionModel(m, wall.running_models[0].cost, 0.05, constraints=[type("C", (), {"residual": lambda s, x, u: x})()])

    class BadShape:
        lower, upper = np.zeros(2), np.ones(2)

        def residual(self, x, u):
            return x[:, :3]

    p = _with(wall, [BadShape()])
    with pytest.raises(ValueError, match=r"residual\(\) returned shape \(6, 3\), expected \(6, 2\)"):
        CSQP(p).solve(max_iter=2)
    r = CSQP(wall, box=False).solve(max_iter=1)
    with pytest.raises(ValueError, match="multipliers must be a finite"):
        CSQP(wall, box=False).solve(max_iter=1, multipliers=np.zeros((3, 3)))
    assert r.multipliers.shape == (7, 2)       # the wall row and the one bounded joint


def test_control_dependent_terminal_constraint_is_refused(wall):
    p = _with(wall, terminal=[ControlBounds(wall.model, -np.ones(7), np.ones(7))])
    with pytest.raises(ValueError, match="'control_bounds' on the terminal knot 6 depends on the control"):
        CSQP(p)


def test_start_state_violating_a_constraint_gives_a_diagnostic_not_nans(wall):
    p = _with(wall, [FrameHalfSpace(wall.model, "ee", [1, 0, 0], 0.3)])      # x0's end effector is at x = 0.67
    r = CSQP(p, box=False).solve(max_iter=10)
    assert not r.converged and r.iterations == 0
    assert "knot 0" in r.reason and "frame_half_space" in r.reason and "x0" in r.reason, r.reason
    assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us)) and np.all(np.isfinite(r.multipliers))


def test_non_finite_constraint_gives_a_diagnostic_not_nans(wall):
    class GoesNaN:
        name = "goes_nan"
        lower, upper = np.array([-np.inf]), np.array([1.0])

        def residual(self, x, u, knots):
            return np.where(knots[:, None] == 3, np.nan, x[:, :1])

        def jacobian(self, x, u, knots):
            gx = np.zeros((x.shape[0], 1, 14))
            gx[:, 0, 0] = 1.0
            return gx, None

    r = CSQP(_with(wall, [GoesNaN()]), box=False).solve(max_iter=5)
    assert not r.converged
    assert "goes_nan" in r.reason and "knot 3" in r.reason, r.reason
    assert np.all(np.isfinite(r.xs)) and np.all(np.isfinite(r.us))


def test_multipliers_warm_start_the_next_solve(wall):
    s = CSQP(wall, box=False, eps_abs=1e-9, eps_rel=0.0)
    r = s.solve(max_iter=100, tol=1e-9)
    assert r.converged, r.reason
    again = s.solve(xs_init=r.xs, us_init=r.us, max_iter=100, tol=1e-9)     # warm: already optimal
    assert again.converged and again.iterations == 0, again.reason
    s.reset_multipliers()
    cold = s.solve(xs_init=r.xs, us_init=r.us, max_iter=100, tol=1e-9)      # y = 0: not a KKT point
    assert cold.converged and cold.iterations > 0
    assert np.abs(cold.multipliers - r.multipliers).max() < 1e-5
    given = CSQP(wall, box=False, eps_abs=1e-9, eps_rel=0.0).solve(r.xs, r.us, max_iter=100, tol=1e-9,
                                                                    multipliers=r.multipliers)
    assert given.iterations == 0
    shifted = r.shifted_multipliers(2)
    assert np.array_equal(shifted[:4], r.multipliers[2:6]) and np.array_equal(shifted[4:6], r.multipliers[[5, 5]])
    assert np.array_equal(shifted[6], r.multipliers[6])


def test_warm_start_follows_rephased_knots():
    """Re-phasing the running models by n knots (a gait's horizon sliding) moves the warm-start rows
    with them; knots that keep their models keep their rows."""
    import dataclasses

    from solvers.result import shift_knots
    wall = iiwa_wall(6, dt=0.05, backend="numpy")
    a = wall.running_models[0]
    b = dataclasses.replace(a)                      # another phase: same terms, another object
    N = wall.horizon
    phases = [a, a, b, b, b, a]
    assert N == len(phases)
    wall.set_running_models(phases)
    s = CSQP(wall, box=False, eps_abs=1e-9, eps_rel=0.0)
    r = s.solve(max_iter=100, tol=1e-9)
    assert r.converged and np.abs(r.multipliers).max() > 0, r.reason
    z = s.qp.z.copy()
    rows = ~(s.constraints.state_only[0] & s.constraints.bounded[0])    # knot 0's state-only rows: x0 is fixed
    wall.set_running_models(phases[2:] + [b, b])    # moved 2 knots earlier
    # max_iter=0: the solve returns the multipliers it starts from
    start = s.solve(xs_init=r.xs, us_init=r.us, max_iter=0).multipliers
    expected = r.shifted_multipliers(2)
    assert np.array_equal(start[1:], expected[1:]) and np.array_equal(start[0, rows], expected[0, rows])
    assert np.array_equal(s.qp.z[1:], shift_knots(z, 2)[1:])
    again = s.solve(xs_init=r.xs, us_init=r.us, max_iter=0).multipliers      # same models: rows stay
    assert np.array_equal(again, start)
    wall.set_running_models([a] * N)                # no shift reproduces it: rows stay on their knots
    assert np.array_equal(s.solve(xs_init=r.xs, us_init=r.us, max_iter=0).multipliers, start)


def test_warmup_leaves_no_multipliers_behind():
    p = iiwa_wall(4, backend="numba")
    s = CSQP(p, box=False)
    s.warmup()
    first = s.solve(max_iter=50)
    fresh = CSQP(p, box=False).solve(max_iter=50)
    assert first.qp_iterations == fresh.qp_iterations and first.cost == fresh.cost


def test_registered_for_the_cli_and_the_study():
    assert SOLVERS["csqp"] is CSQP



@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_an_exploding_qp_ends_the_solve_with_a_diagnostic(compiled):
    """A QP whose step moves the linearised constraints by far more than their own size (here: a
    guess whose last knot has a joint angle of 1e20 rad, a gap the step closes; the constraints —
    the end effector's position, joint 1 — stay of order 1) stops at the first residual check with a diagnostic, not
    after max_qp_iter ADMM iterations; the finite guess is returned and the previous solve's
    multipliers stay the next warm start."""
    p = iiwa_wall(8)
    s = CSQP(p, compiled=compiled, max_qp_iter=500)
    good = s.solve(max_iter=3, tol=1e-8)
    y_good = s._y_prev.copy()
    xs, us = good.xs.copy(), good.us.copy()
    xs[-1, 3] = 1e20
    r = s.solve(xs, us, max_iter=3, tol=1e-8)
    assert not r.converged and "ADMM diverged" in r.reason, r.reason
    n = int(r.reason.split(" after ")[1].split()[0])
    assert n <= s.qp.rho_update_interval if compiled else n == 1
    assert np.isfinite(r.xs).all() and np.isfinite(r.us).all()
    np.testing.assert_array_equal(s._y_prev, y_good)
