"""Each library constraint's Jacobian against central finite differences of its residual along the
tangent perturbation ``g(x ⊕ dx, u + du)``, and the plain-Python constraint adapter (given
Jacobian, and its finite-difference fallback)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import (
    ControlBounds,
    CustomConstraint,
    FrameHalfSpace,
    FrictionCone,
    JointPositionBounds,
    JointVelocityBounds,
)

from .problems import hyq_push, iiwa_wall


def _fd_jacobian(c, p, x, u, h=1e-6):
    """Central differences of c.residual over (dx, du): (B, nc, ndx), (B, nc, nu)."""
    ndx, nu = p.ndx, p.nu
    B = x.shape[0]
    cols = []
    for i in range(ndx + (0 if u is None else nu)):
        dz = np.zeros(ndx + nu)
        dz[i] = h
        vals = []
        for s in (1.0, -1.0):
            xp = p.state.integrate(x, np.broadcast_to(s * dz[:ndx], (B, ndx)))
            up = None if u is None else u + s * dz[ndx:]
            vals.append(c.residual(p.costs.ctx(np.ascontiguousarray(xp), up, np.arange(B))))
        cols.append((vals[0] - vals[1]) / (2 * h))
    J = np.stack(cols, axis=-1)
    return J[..., :ndx], (None if u is None else J[..., ndx:])


def _check(c, p, x, u, rtol):
    Gx, Gu = c.jacobian(p.costs.ctx(x, u, np.arange(x.shape[0])))
    Fx, Fu = _fd_jacobian(c, p, x, u)
    scale = max(1.0, np.abs(Fx).max(), 0.0 if Fu is None else np.abs(Fu).max())
    assert np.abs(Gx - Fx).max() <= rtol * scale, (c.name, np.abs(Gx - Fx).max())
    if Fu is not None:
        Gu = np.zeros_like(Fu) if Gu is None else Gu
        assert np.abs(Gu - Fu).max() <= rtol * scale, (c.name, np.abs(Gu - Fu).max())
    assert c.residual(p.costs.ctx(x, u, np.arange(x.shape[0]))).shape == (x.shape[0], c.nc)


@pytest.fixture(scope="module")
def iiwa():
    p = iiwa_wall(4, backend="numpy")
    rng = np.random.default_rng(1)
    x = np.concatenate([p.model.random_configuration(rng, 3), rng.normal(size=(3, 7))], axis=-1)
    u = rng.normal(size=(3, 7)) * 10
    return p, x, u


def test_joint_position_and_velocity_bounds_jacobians(iiwa):
    p, x, u = iiwa
    m = p.model
    _check(JointPositionBounds(m), p, x, u, 1e-8)
    _check(JointVelocityBounds(m, limit=2.0, dofs=[0, 3, 5]), p, x, u, 1e-8)


def test_frame_half_space_jacobian_any_normal(iiwa):
    p, x, u = iiwa
    _check(FrameHalfSpace(p.model, "ee", [0.3, -1.0, 0.5], 0.2), p, x, u, 1e-7)
    _check(FrameHalfSpace(p.model, "ee", [0, 0, -1], -0.3), p, x, None, 1e-7)        # terminal: no control


def test_control_bounds_jacobian(iiwa):
    p, x, u = iiwa
    _check(ControlBounds(p.model, -np.ones(7), np.ones(7)), p, x, u, 1e-8)


def test_friction_cone_jacobian_against_finite_differences():
    task, p = hyq_push(backend="numpy")
    m = task.model
    rng = np.random.default_rng(2)
    x = p.state.integrate(np.repeat(p.x0[None], 2, axis=0), rng.normal(size=(2, 2 * m.nv)) * 0.02)
    u = task.u_stand + rng.normal(size=(2, m.nu))
    cone = FrictionCone(m, task.contacts, 0.7, f_min=5.0, passive_forces=False)
    _check(cone, p, x, u, 1e-5)
    # the rows: ±fx − μ fz, ±fy − μ fz per foot, then fz; bounds (−inf, 0] and [f_min, inf)
    ctx = p.costs.ctx(x, u, np.arange(2))
    lam = cone._cf.forces(ctx).reshape(2, -1, 3)
    g = cone.residual(ctx).reshape(2, -1, 5)
    mu = 0.7 / np.sqrt(2)
    assert np.allclose(g[..., 0], lam[..., 0] - mu * lam[..., 2]) and np.allclose(g[..., 4], lam[..., 2])
    assert np.all(cone.upper.reshape(-1, 5)[:, :4] == 0) and np.all(cone.lower.reshape(-1, 5)[:, 4] == 5.0)


def test_friction_cone_with_eight_facets_rows_as_crocoddyl_and_jacobian():
    """8 faces: the rows of Crocoddyl's FrictionCone(I, μ, 8, outer) with μ = mu cos(π/8) (inscribed),
    then f_z; the Jacobian against finite differences; an odd or too small count is refused."""
    croc = pytest.importorskip("crocoddyl")
    task, p = hyq_push(backend="numpy")
    m = task.model
    cone = FrictionCone(m, task.contacts, 0.7, f_min=5.0, passive_forces=False, facets=8)
    assert cone.nc == 9 * 4
    ref = croc.FrictionCone(np.eye(3), 0.7, 8, True, 5.0)      # Crocoddyl's own inner approximation
    A_ref = np.asarray(ref.A)
    np.testing.assert_allclose(cone.A[:9, :3][:8], A_ref[:8], rtol=0, atol=1e-15)
    np.testing.assert_allclose(cone.lower[:9], [-np.inf] * 8 + [5.0])
    rng = np.random.default_rng(3)
    x = p.state.integrate(np.repeat(p.x0[None], 2, axis=0), rng.normal(size=(2, 2 * m.nv)) * 0.02)
    u = task.u_stand + rng.normal(size=(2, m.nu))
    _check(cone, p, x, u, 1e-5)
    for bad in (3, 5, 2, 6.5, True):
        with pytest.raises(ValueError, match="facets must be an even number >= 4"):
            FrictionCone(m, task.contacts, 0.7, facets=bad)


class _Sphere:
    """Keep the configuration's first two joints outside a disc: ``q0² + q1² ≥ r²`` (one row)."""

    name = "disc"
    lower, upper = np.array([0.25]), np.array([np.inf])

    def residual(self, x, u):
        return (x[:, 0] ** 2 + x[:, 1] ** 2)[:, None]


class _SphereWithJacobian(_Sphere):
    def jacobian(self, x, u):
        gx = np.zeros((x.shape[0], 1, 14))
        gx[:, 0, 0], gx[:, 0, 1] = 2 * x[:, 0], 2 * x[:, 1]
        return gx, None


def test_custom_constraint_given_and_finite_difference_jacobians(iiwa):
    p, x, u = iiwa
    given = CustomConstraint(_SphereWithJacobian())
    _check(given, p, x, u, 1e-8)
    fd = CustomConstraint(_Sphere())
    with pytest.warns(UserWarning, match="finite differences"):
        Gx_fd, _ = fd.jacobian(p.costs.ctx(x, u, np.arange(3)))
    Gx, _ = given.jacobian(p.costs.ctx(x, u, np.arange(3)))
    assert np.abs(Gx_fd - Gx).max() < 1e-7
    assert fd.nc == 1 and fd.name == "disc"


def test_wrench_cone_jacobian_and_the_same_set_as_crocoddyl():
    import dynamics
    from solvers import (
        ActionModel,
        ContactDynamics,
        ShootingProblem,
        StateCost,
        WrenchCone,
    )
    m = dynamics.load_model("atlas")
    cs = dynamics.ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="6d")
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    cone = WrenchCone(m, cs, 0.1, 0.05, mu=0.7, f_min=20.0, passive_forces=False)
    dyn = ContactDynamics(cs, passive_forces=False)
    p = ShootingProblem(x0, [ActionModel(m, StateCost(m, x0), 0.01, dyn, constraints=[cone])] * 2,
                        ActionModel(m, StateCost(m, x0), 0.0, dyn), backend="numpy")
    rng = np.random.default_rng(3)
    x = p.state.integrate(np.repeat(x0[None], 2, axis=0), rng.normal(size=(2, 2 * m.nv)) * 0.02)
    u = rng.normal(size=(2, m.nu)) * 30
    _check(cone, p, x, u, 1e-5)
    # against Crocoddyl's wrench cone on the same knot: the same rows are violated by the same amounts
    croc = pytest.importorskip("crocoddyl")
    from solvers.crocoddyl_problem import build_crocoddyl_problem, to_pinocchio_states
    rm = build_crocoddyl_problem(p).runningModels[0]
    d = rm.createData()
    rm.calc(d, to_pinocchio_states(p, x[0]), u[0])
    ours = np.sort(np.maximum(cone.residual(p.costs.ctx(x[:1], u[:1], np.arange(1)))[0] - cone.upper, 0.0))
    g = np.asarray(d.differential.constraints.g) if hasattr(d.differential, "constraints") else np.asarray(d.g)
    lb, ub = np.asarray(rm.g_lb), np.asarray(rm.g_ub)
    theirs = np.sort(np.maximum(np.maximum(lb - g, g - ub), 0.0))
    assert ours.max() > 1.0                                         # some rows violated
    assert np.allclose(ours, theirs, rtol=1e-9, atol=1e-7), (ours, theirs)
    assert croc is not None
