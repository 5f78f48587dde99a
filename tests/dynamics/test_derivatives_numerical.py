"""Analytical first-order derivatives against numerical differentiation of the functions themselves.

Two oracles per derivative:
  * central finite differences of the public, batched API (step ``H_FD``; truncation + round-off
    ≈ 1e-8 relative), perturbing configurations along the tangent ``q ⊕ δ`` (docs/conventions.md);
  * complex step: the numpy kernels accept complex arrays, so ``Im f(x + i h e_j) / h`` is the
    derivative to round-off (no subtractive cancellation). Configurations are perturbed with
    ``dynamics.joints.integrate(model, q, 1j h E)``.

Errors are relative to ``max(1, max|reference|)`` of the whole matrix.
"""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics import joints
from dynamics.numpy_backend import aba as k_aba
from dynamics.numpy_backend import kinematics as k_kin
from dynamics.numpy_backend import minv as k_minv
from dynamics.numpy_backend import rnea as k_rnea
from dynamics.second_order_numerical import aba_second_derivatives_numerical
from tests.helpers.oracle_helpers import H_CS, H_FD, cs, fd, perturbed_q
from tests.helpers.robot_cases import ROBOT_CASES, robot_case

BE = dynamics.get_backend("numpy")
TOL_FD = 1e-6
TOL_CS = 1e-10
REFERENCES = ("local", "world", "local_world_aligned")


@pytest.fixture(scope="module", params=ROBOT_CASES)
def model(request, bundled):
    return robot_case(request.param, bundled)


def state(model, seed=0):
    """A random (q, v, u, fext): u serves as acceleration or torque."""
    rng = np.random.default_rng(seed)
    q = model.random_configuration(rng)
    return q, rng.normal(size=model.nv), rng.normal(size=model.nv) * 3, rng.normal(size=(model.nbody, 6)) * 5


def rel_err(x, ref) -> float:
    return float(np.max(np.abs(np.asarray(x) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


def check(x, ref, what: str, tol: float) -> float:
    assert np.shape(x) == np.shape(ref), f"{what}: shape {np.shape(x)} vs {np.shape(ref)}"
    e = rel_err(x, ref)
    assert e < tol, f"{what}: relative error {e:.3e} > {tol:.0e}"
    return e


# ---------------------------------------------------------------- dynamics derivatives
@pytest.mark.parametrize("with_fext", [False, True], ids=["no_fext", "fext"])
def test_rnea_derivatives(model, with_fext):
    q, v, a, fe = state(model, 1)
    fe = fe if with_fext else None
    dq, dv = BE.rnea_derivatives(model, q, v, a, fe)
    args = (q, v, a, fe)
    rnea = lambda *x: BE.rnea(model, *x)  # noqa: E731
    for which, D, name in ((0, dq, "dtau_dq"), (1, dv, "dtau_dv")):
        check(D, cs(k_rnea.rnea, model, args, which), f"{name} vs complex step", TOL_CS)
        check(D, fd(rnea, model, args, which), f"{name} vs central FD", TOL_FD)
    # dtau/da is M (crba): same oracle, closes the set of RNEA partials
    check(BE.crba(model, q), cs(k_rnea.rnea, model, args, 2), "crba as dtau_da vs complex step", TOL_CS)


@pytest.mark.parametrize("with_fext", [False, True], ids=["no_fext", "fext"])
def test_aba_derivatives(model, with_fext):
    q, v, tau, fe = state(model, 2)
    fe = fe if with_fext else None
    args = (q, v, tau, fe)
    aba = lambda *x: BE.aba(model, *x)  # noqa: E731
    refs = [cs(k_aba.aba, model, args, w) for w in range(3)]
    fds = [fd(aba, model, args, w) for w in range(3)]
    given = BE.aba_derivatives(model, q, v, tau, fe, minv=BE.minv(model, q))
    for label, res in (("", BE.aba_derivatives(model, q, v, tau, fe)), (" (minv given)", given)):
        for D, ref, f, name in zip(res, refs, fds, ("da_dq", "da_dv", "da_dtau")):
            check(D, ref, f"{name}{label} vs complex step", TOL_CS)
            check(D, f, f"{name}{label} vs central FD", TOL_FD)


def test_aba_derivatives_batched_minv(model):
    """``minv=`` broadcast against a batch of states reuses the matching M^-1 per state."""
    rng = np.random.default_rng(3)
    q = model.random_configuration(rng, size=2)
    v, tau = rng.normal(size=(2, model.nv)), rng.normal(size=(2, model.nv))
    res = BE.aba_derivatives(model, q, v, tau, minv=BE.minv(model, q))
    for k in range(2):
        args = (q[k], v[k], tau[k], None)
        for w in range(3):
            check(res[w][k], cs(k_aba.aba, model, args, w), f"batched derivative {w}, state {k}", TOL_CS)


# ---------------------------------------------------------------- kinematics derivatives
def _vee(W):
    """Vector of the skew part of W (..., 3, 3)."""
    return 0.5 * np.stack([W[..., 2, 1] - W[..., 1, 2], W[..., 0, 2] - W[..., 2, 0], W[..., 1, 0] - W[..., 0, 1]], -1)


def jacobian_from_placement_rates(R0, p0, dR, dp, reference):
    """Frame Jacobian (6, nv) from the rates (nv, 3, 3), (nv, 3) of its placement along each direction."""
    w_world = _vee(dR @ R0.T)            # Ṙ Rᵀ = [ω_world]×
    if reference == "local":
        cols = np.concatenate([dp @ R0, _vee(R0.T @ dR)], axis=-1)  # Rᵀṗ, [ω_local]× = RᵀṘ
    elif reference == "local_world_aligned":
        cols = np.concatenate([dp, w_world], axis=-1)
    else:  # world: velocity of the body point at the world origin, ṗ - ω × p
        cols = np.concatenate([dp - np.cross(w_world, p0), w_world], axis=-1)
    return cols.T


def frames_of(model):
    """Every named site plus up to four bodies spread over the tree (leaves and the root)."""
    bodies = [n for n in model.body_names[1:] if n and n not in model.site_names]
    return [n for n in model.site_names if n] + bodies[:: max(1, len(bodies) // 4)]


@pytest.mark.parametrize("reference", REFERENCES)
def test_frame_jacobian(model, reference):
    q = state(model, 4)[0]
    for frame in frames_of(model):
        J = BE.frame_jacobian(model, q, frame, reference)
        R0, p0 = BE.frame_placement(model, q, frame)
        Rp, pp = BE.frame_placement(model, perturbed_q(model, q, H_FD), frame)
        Rm, pm = BE.frame_placement(model, perturbed_q(model, q, -H_FD), frame)
        J_fd = jacobian_from_placement_rates(R0, p0, (Rp - Rm) / (2 * H_FD), (pp - pm) / (2 * H_FD), reference)
        check(J, J_fd, f"frame_jacobian({frame}, {reference}) vs FD of placement", TOL_FD)
        Rc, pc = k_kin.frame_placement(model, perturbed_q(model, q, 1j * H_CS), frame)
        J_cs = jacobian_from_placement_rates(R0, p0, Rc.imag / H_CS, pc.imag / H_CS, reference)
        check(J, J_cs, f"frame_jacobian({frame}, {reference}) vs complex step of placement", TOL_CS)


@pytest.mark.parametrize("reference", REFERENCES)
def test_frame_jacobian_time_variation(model, reference):
    """dJ/dt along the flow q(t) = q ⊕ t v, whose velocity at t = 0 is v."""
    q, v, _, _ = state(model, 5)
    for frame in frames_of(model):
        J, dJ = BE.frame_jacobian_time_variation(model, q, v, frame, reference)
        check(J, BE.frame_jacobian(model, q, frame, reference), f"J of time variation ({frame})", 1e-14)
        Jp = BE.frame_jacobian(model, model.integrate(q, H_FD * v), frame, reference)
        Jm = BE.frame_jacobian(model, model.integrate(q, -H_FD * v), frame, reference)
        check(dJ, (Jp - Jm) / (2 * H_FD), f"dJ/dt({frame}, {reference}) vs FD along the flow", TOL_FD)
        qc = joints.integrate(model, q[None].astype(complex), 1j * H_CS * v[None])
        Jc = k_kin.frame_jacobian(model, qc, frame, reference)[0]
        check(dJ, Jc.imag / H_CS, f"dJ/dt({frame}, {reference}) vs complex step along the flow", TOL_CS)


def test_com_jacobian(model):
    q = state(model, 6)[0]
    Jc = BE.com_jacobian(model, q)
    com = lambda Q: BE.center_of_mass(model, Q)  # noqa: E731
    check(Jc, fd(com, model, (q,), 0), "com_jacobian vs FD of center_of_mass", TOL_FD)
    check(Jc, cs(k_kin.center_of_mass, model, (q,), 0), "com_jacobian vs complex step", TOL_CS)


# ---------------------------------------------------------------- configuration-space Jacobians
def test_integrate_jacobians(model):
    """Columns: ``(q⊕δe_j)⊕v ⊖ (q⊕v)`` and ``q⊕(v+δe_j) ⊖ q⊕v`` over δ (tangent coordinates at q⊕v)."""
    q, v, _, _ = state(model, 7)
    v = 0.3 * v  # keep rotation angles well below π (log branch)
    Jq, Jv = model.integrate_jacobians(q, v)
    r = model.integrate(q, v)
    E = np.eye(model.nv)
    def col(qp, qm):
        return np.moveaxis((model.difference(r, qp) - model.difference(r, qm)) / (2 * H_FD), 0, -1)
    check(Jq, col(model.integrate(model.integrate(q, H_FD * E), v), model.integrate(model.integrate(q, -H_FD * E), v)),
          "integrate_jacobians d/dq vs FD", TOL_FD)
    check(Jv, col(model.integrate(q, v + H_FD * E), model.integrate(q, v - H_FD * E)), "integrate_jacobians d/dv vs FD",
          TOL_FD)


def test_difference_jacobians(model):
    rng = np.random.default_rng(8)
    q0 = model.random_configuration(rng)
    q1 = model.integrate(q0, 0.3 * rng.normal(size=model.nv))
    J0, J1 = model.difference_jacobians(q0, q1)
    E = np.eye(model.nv)
    d0 = (model.difference(model.integrate(q0, H_FD * E), q1) - model.difference(model.integrate(q0, -H_FD * E), q1))
    d1 = (model.difference(q0, model.integrate(q1, H_FD * E)) - model.difference(q0, model.integrate(q1, -H_FD * E)))
    check(J0, np.moveaxis(d0 / (2 * H_FD), 0, -1), "difference_jacobians d/dq0 vs FD", TOL_FD)
    check(J1, np.moveaxis(d1 / (2 * H_FD), 0, -1), "difference_jacobians d/dq1 vs FD", TOL_FD)


# ---------------------------------------------------------------- second-order numerical provider
@pytest.mark.parametrize("name", ["iiwa", "tree_free"])
@pytest.mark.parametrize("with_fext", [False, True], ids=["no_fext", "fext"])
def test_second_order_numerical_central_vs_complex(bundled, name, with_fext):
    """The two numerical second-order providers must agree (central error ~1e-6 relative at most)."""
    model = robot_case(name, bundled)
    q, v, tau, fe = state(model, 9)
    fe = fe if with_fext else None
    central = aba_second_derivatives_numerical(BE, model, q, v, tau, fe, method="central")
    cplx = aba_second_derivatives_numerical(BE, model, q, v, tau, fe, method="complex")
    for c, x, what in zip(central, cplx, ("d2a_dq2", "d2a_dv2", "d2a_dqdv", "d2a_dqdtau")):
        assert c.shape == (model.nv,) * 3
        check(c, x, f"{what}: central vs complex step", 1e-6)
    # ∂²a/∂v² is the v-Hessian of a, symmetric in its two derivative variables
    check(cplx[1], np.swapaxes(cplx[1], -1, -2), "d2a_dv2 symmetric in (j, k)", 1e-9)
    # ∂²a_i/∂q_j∂τ_k = ∂(M^-1)_ik/∂q_j: an independent route through the complex step of minv
    dMinv = cs(k_minv.minv, model, (q,), 0)   # [i, k, j] = ∂(M^-1)_ik / ∂q_j
    check(cplx[3], np.swapaxes(dMinv, 1, 2), "d2a_dqdtau vs complex step of minv", 1e-8)
