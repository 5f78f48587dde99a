"""Discrete dynamics of the solvers: f(x, u), its tangent-space Jacobians and the second-order
tensor contracted with a multiplier, against independent oracles (MuJoCo's forward dynamics for the
passive forces, central finite differences of f, of the transported Jacobian, and of φ = λ·F)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import dynamics
from solvers.discrete_dynamics import DiscreteDynamics

BE = dynamics.get_backend("numpy")


def _state(model, rng, n, vscale=1.0):
    q = model.random_configuration(rng, n)
    return np.concatenate([q, vscale * rng.normal(size=(n, model.nv))], axis=-1)


def _batch(m, rng, dt: float, integrator: str = "euler", vscale: float = 1.0, n: int = 2):
    """``(m, its DiscreteDynamics, x, u)``: a batch of ``n`` random states (velocities scaled by
    ``vscale``) and controls ~ N(0, 5²)."""
    dyn = DiscreteDynamics(m, BE, dt, integrator)
    x = _state(m, rng, n, vscale)
    return m, dyn, x, rng.normal(size=(n, m.nu)) * 5


OVER_ROBOTS_AND_INTEGRATORS = pytest.mark.parametrize(
    "robot, integrator", [(r, i) for i in ("euler", "rk4") for r in ("iiwa", "hyq")])


def _tangent_map(dyn, x, u, f0):
    """F(z) = f(x ⊕ dx, u + du) ⊖ f(x, u) for perturbations z (B, P, nz) -> (B, P, ndx)."""
    ss = dyn.state
    ndx = ss.ndx

    def F(z):
        xp = ss.integrate(x[:, None], z[..., :ndx])
        up = u[:, None] + z[..., ndx:]
        return ss.difference(f0[:, None], dyn.step(xp, up))
    return F


def test_acceleration_matches_mujoco_with_passive_forces(bundled, rng):
    """a(q, v, u) including joint damping equals MuJoCo's unconstrained acceleration (iiwa: qacc = a)."""
    m = bundled["iiwa"]
    dyn = DiscreteDynamics(m, BE, 0.01)
    mj, d = m.mj_model, mujoco.MjData(m.mj_model)
    for _ in range(3):
        x = _state(m, rng, 1, 2.0)[0]
        u = rng.uniform(m.u_lower, m.u_upper) * 0.3
        d.qpos[:], d.qvel[:], d.ctrl[:] = x[:7], x[7:], u
        mujoco.mj_forward(mj, d)
        # qacc_smooth: MuJoCo's acceleration before constraints (joint limits, contacts)
        assert np.allclose(dyn.acceleration(x, u), d.qacc_smooth, rtol=1e-9, atol=1e-8)
    assert np.any(m.dof_damping > 0)  # the check above exercised the damping term


@OVER_ROBOTS_AND_INTEGRATORS
def test_jacobians_against_finite_differences(bundled, rng, robot, integrator):
    m, dyn, x, u = _batch(bundled[robot], rng, 0.02, integrator)
    N = len(x)
    d = dyn.derivatives(x, u)
    f0 = dyn.step(x, u)
    assert np.array_equal(d.xnext, f0)
    nz, h = dyn.ndx + m.nu, 1e-6
    F = _tangent_map(dyn, x, u, f0)
    Z = np.broadcast_to(np.eye(nz) * h, (N, nz, nz))
    J_fd = np.swapaxes((F(Z) - F(-Z)) / (2 * h), 1, 2)
    J = np.concatenate([d.Fx, d.Fu], axis=-1)
    assert np.abs(J - J_fd).max() < 1e-7 * max(1.0, np.abs(J).max())


def _transported_jacobian_fd(dyn, x, u, f0, h=1e-5):
    """Central differences of z -> ∂F/∂z(z) = Jd(f0, f(z)) [Fx(z) Jint(x, dx), Fu(z)], built
    from f_x/f_u at perturbed points (which the first-order test checks against FD of f)."""
    ss = dyn.state
    N, ndx, nu = x.shape[0], ss.ndx, dyn.nu
    nz = ndx + nu
    Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])                 # (2nz, nz)
    xr, ur = np.repeat(x, 2 * nz, axis=0), np.repeat(u, 2 * nz, axis=0)
    zr = np.tile(Z, (N, 1))
    dp = dyn.derivatives(ss.integrate(xr, zr[:, :ndx]), ur + zr[:, ndx:])
    _, Jint = ss.integrate_jacobians(xr, zr[:, :ndx])
    _, Jd = ss.difference_jacobians(np.repeat(f0, 2 * nz, axis=0), dp.xnext)
    J = (Jd @ np.concatenate([dp.Fx @ Jint, dp.Fu], axis=-1)).reshape(N, 2 * nz, ndx, nz)
    return np.moveaxis((J[:, :nz] - J[:, nz:]) / (2 * h), 1, -1)


@OVER_ROBOTS_AND_INTEGRATORS
def test_second_order_contracted_against_fd_of_jacobian(bundled, rng, robot, integrator):
    """λ·F2 against central differences of λᵀ∂F/∂z; on hyq this includes the SE(3) terms."""
    m, dyn, x, u = _batch(bundled[robot], rng, 0.05, integrator, vscale=2.0)
    d = dyn.derivatives(x, u, second_order=True)
    lam = rng.normal(size=(len(x), dyn.ndx))
    H = np.einsum("ni,niab->nab", lam, d.F2)
    T = np.einsum("ni,niab->nab", lam, _transported_jacobian_fd(dyn, x, u, d.xnext))
    assert np.abs(T - np.swapaxes(T, 1, 2)).max() < 1e-6 * np.abs(T).max()   # it is a Hessian
    assert np.abs(H - T).max() < 1e-6 * max(1.0, np.abs(H).max())
    if robot == "hyq" and integrator == "euler":
        # the SO(3)/SE(3) integration terms are not negligible: leaving them out fails the check
        q, v = x[:, :m.nq], x[:, m.nq:]
        tau = dyn.torques(q, v, u)
        vn = v + dyn.dt * BE.aba(m, q, v, tau)
        Ha = dyn._acceleration_hessian(q, v, tau)
        Jq, Jw = m.integrate_jacobians(q, dyn.dt * vn)
        F2_no_lie = np.concatenate([np.einsum("nim,nmab->niab", Jw, dyn.dt ** 2 * Ha), dyn.dt * Ha], axis=1)
        H_no_lie = np.einsum("ni,niab->nab", lam, F2_no_lie)
        assert np.abs(H_no_lie - T).max() > 1e3 * np.abs(H - T).max()


def test_second_order_against_fd_of_value_iiwa(bundled, rng):
    """Fully independent oracle: second-order central differences of φ(z) = λ·F(z) using only f."""
    m, dyn, x, u = _batch(bundled["iiwa"], rng, 0.05, vscale=2.0, n=1)
    d = dyn.derivatives(x, u, second_order=True)
    lam = rng.normal(size=(1, dyn.ndx))
    H = np.einsum("ni,niab->nab", lam, d.F2)[0]
    nz, h = dyn.ndx + m.nu, 1e-4
    F = _tangent_map(dyn, x, u, d.xnext)
    a, b = np.triu_indices(nz)
    E = np.eye(nz) * h
    P = [np.einsum("i,pi->p", lam[0], F((sa * E[a] + sb * E[b])[None])[0]) for sa, sb in
         ((1, 1), (1, -1), (-1, 1), (-1, -1))]
    vals = (P[0] - P[1] - P[2] + P[3]) / (4 * h * h)
    H_fd = np.zeros((nz, nz))
    H_fd[a, b] = vals
    H_fd[b, a] = vals
    assert np.abs(H - H_fd).max() < 1e-5 * max(1.0, np.abs(H).max())


@pytest.mark.parametrize("mode", ["analytical", "fd", "complex"])
def test_second_order_providers_agree(bundled, rng, mode):
    m = bundled["hyq"]
    x = _state(m, rng, 2, 2.0)
    u = rng.normal(size=(2, m.nu))
    ref = DiscreteDynamics(m, BE, 0.02, second_order="complex").derivatives(x, u, True).F2
    F2 = DiscreteDynamics(m, BE, 0.02, second_order=mode).derivatives(x, u, True).F2
    tol = 1e-5 if mode == "fd" else 1e-9
    assert np.abs(F2 - ref).max() < tol * max(1.0, np.abs(ref).max())


def test_diverging_rows_become_nan_not_errors(bundled):
    m = bundled["iiwa"]
    dyn = DiscreteDynamics(m, BE, 0.01)
    x = np.tile(np.concatenate([m.keyframe("home"), np.zeros(7)]), (2, 1))
    x[1, 7] = 1e300  # huge velocity: the step overflows
    with np.errstate(all="ignore"):
        out = dyn.step(x, np.zeros((2, m.nu)))
    assert np.all(np.isfinite(out[0])) and np.all(np.isnan(out[1]))


def test_invalid_options_raise(bundled):
    m = bundled["iiwa"]
    with pytest.raises(ValueError, match="integrator"):
        DiscreteDynamics(m, BE, 0.01, integrator="rk45")
    with pytest.raises(ValueError, match="second_order"):
        DiscreteDynamics(m, BE, 0.01, second_order="exact")
    with pytest.raises(ValueError, match="dt"):
        DiscreteDynamics(m, BE, -0.01)


@pytest.mark.parametrize("robot, lie_rows", [("iiwa", 0), ("hyq", 6)])
def test_factored_second_order_tensor(robot, lie_rows, rng):
    """DDP's curvature from the factors (C, T) equals the contraction of the full F2, and the
    factors have nv (+ Lie dofs) rows instead of ndx = 2 nv (docs/second_order.md)."""
    m = dynamics.load_model(robot)
    dyn = DiscreteDynamics(m, BE, 0.02)
    N = 3
    x = np.concatenate([m.random_configuration(rng, N), rng.normal(size=(N, m.nv))], axis=-1)
    u = rng.normal(size=(N, m.nu))
    d = dyn.derivatives(x, u, second_order=True)
    assert d.T.shape == (N, m.nv + lie_rows, 2 * m.nv + m.nu, 2 * m.nv + m.nu)
    assert d.C.shape == (N, m.nv + lie_rows, 2 * m.nv)
    F2 = d.F2
    for t in range(N):
        Vx = rng.normal(size=2 * m.nv)
        ref = np.tensordot(Vx, F2[t], axes=(0, 0))
        assert np.abs(d.curvature(t, Vx) - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())


FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")


def _kinds(m):
    """Every kind of integrated model on HyQ: free and contact Euler and RK4, and an impact."""
    from dynamics import ContactSet
    from solvers import ContactDynamics, FreeDynamics, ImpulseDynamics
    cs = ContactSet(m, frames=FEET, kind="point")
    return {"euler": FreeDynamics("euler").integrated(m, BE, 0.01),
            "rk4": FreeDynamics("rk4").integrated(m, BE, 0.01),
            "contact-euler": ContactDynamics(cs).integrated(m, BE, 0.01),
            "contact-rk4": ContactDynamics(cs, "rk4").integrated(m, BE, 0.01),
            "impulse": ImpulseDynamics(cs, 0.2).integrated(m, BE)}


def test_descriptions_build_the_integrated_model_of_their_kind(bundled):
    from solvers.integrators import ContactAcceleration, EulerModel, FreeAcceleration, ImpulseModel, RK4Model
    k = _kinds(bundled["hyq"])
    expected = {"euler": (EulerModel, FreeAcceleration), "rk4": (RK4Model, FreeAcceleration),
                "contact-euler": (EulerModel, ContactAcceleration), "contact-rk4": (RK4Model, ContactAcceleration)}
    for name, (cls, acc) in expected.items():
        assert type(k[name]) is cls and type(k[name].acc) is acc, name
        assert (k[name].contacts is None) == (acc is FreeAcceleration)
    assert type(k["impulse"]) is ImpulseModel and k["impulse"].restitution == 0.2
    assert DiscreteDynamics(bundled["hyq"], BE, 0.0, "impulse", contacts=k["impulse"].contacts).integrator == "impulse"


@pytest.mark.parametrize("kind", ["euler", "rk4", "contact-euler", "contact-rk4", "impulse"])
def test_data_written_in_place_equals_fresh_data(bundled, rng, kind):
    """calc_diff writes into the data's own buffers (the same arrays evaluation after evaluation)
    and gives what fresh data gives at the same point; second order needs second-order buffers."""
    m = bundled["hyq"]
    dyn = _kinds(m)[kind]
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    N = 2
    data = dyn.create_data(N, second_order=True)
    buffers = {k: a.__array_interface__["data"][0] for k, a in data.arrays().items()}
    assert "T" in buffers and ("A2" in buffers) == (kind == "euler")      # numpy: analytical ∂²a on free knots
    for _ in range(2):
        x = dyn.state.integrate(x0, 0.05 * rng.normal(size=(N, dyn.ndx)))
        u = BE.gravity_torques(m, x[:, :m.nq])[:, 6:] + rng.normal(size=(N, m.nu))
        got = dyn.calc_diff(data, x, u, second_order=True)
        ref = dyn.derivatives(x, u, second_order=True)
        assert got is data and {k: a.__array_interface__["data"][0] for k, a in data.arrays().items()} == buffers
        for f in ("xnext", "Fx", "Fu", "C", "T"):
            np.testing.assert_allclose(getattr(got, f), getattr(ref, f), rtol=1e-12, atol=1e-12, err_msg=f)
        np.testing.assert_array_equal(got.xnext, dyn.step(x, u))
    dyn.calc_diff(data, x, u)
    assert not data.has_second_order                         # a first-order evaluation drops the factors
    with pytest.raises(ValueError, match="second-order buffers"):
        dyn.calc_diff(dyn.create_data(N), x, u, second_order=True)
