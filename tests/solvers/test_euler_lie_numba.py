"""The compiled Euler step Jacobians of robots with ball/free joints (solvers.euler_lie_numba: HyQ
on four point contacts, HyQ falling freely, a random floating tree with ball joints, springs,
damping and geared motors) against the numpy assembly on the numpy-reference dynamics (an
independent backend) and against central finite differences of the numpy step; and the prepared
contact-dynamics call (Backend.prepare_contact_dynamics_derivatives) against the unprepared one."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics import ContactSet
from dynamics.contact import ContactDynamicsBuffers, RankDeficientContactError
from solvers.discrete_dynamics import DiscreteDynamics
from tests.helpers.random_trees import random_passive_tree_model

pytestmark = pytest.mark.skipif("numba" not in dynamics.available_backends(),
                                reason="the numba backend is not available on this machine")

N, DT = 4, 0.01
FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")


def _case(name: str):
    """(model, contacts or None, states (N, nx), controls (N, nu)) near a meaningful posture."""
    rng = np.random.default_rng(3)
    if name.startswith("hyq"):
        m = dynamics.load_model("hyq")
        cs = ContactSet(m, frames=FEET, kind="point") if name == "hyq-contacts" else None
        q0 = m.keyframe("standing")
    else:
        m = random_passive_tree_model(5, 7, name="floating_ball_tree", free_root=True, ball=True, slide=True)
        assert not m.is_euclidean and m.ball_adr and np.any(m.link_stiffness) and m.nu < m.nv
        cs, q0 = None, m.neutral()
    dx = np.concatenate([0.05 * rng.normal(size=(N, m.nv)), rng.normal(size=(N, m.nv))], axis=-1)
    dx[:, 3:6] *= 20.0                      # floating-base rotations of about a radian
    dx[0, m.nv + 3:m.nv + 6] = [40.0, -30.0, 35.0]      # a step dt ω past the series' range (θ² > 0.25)
    q = m.integrate(np.broadcast_to(q0, (N, m.nq)), dx[:, :m.nv])
    xs = np.concatenate([q, dx[:, m.nv:]], axis=-1)
    us = rng.normal(size=(N, m.nu))
    return m, cs, xs, us


@pytest.mark.parametrize("name", ["hyq-contacts", "hyq-free", "ball-tree"])
def test_compiled_lie_euler_jacobians_match_numpy_and_finite_differences(name):
    m, cs, xs, us = _case(name)
    dyn = DiscreteDynamics(m, dynamics.get_backend("numba"), DT, contacts=cs)
    ref_dyn = DiscreteDynamics(m, dynamics.get_backend("numpy"), DT, contacts=cs)
    assert dyn._compiled_lie_euler() is not None            # the compiled path is the one under test
    assert ref_dyn._compiled_lie_euler() is None and dyn._compiled_euler() is None
    data = dyn.create_data(N)
    got = dyn.calc_diff(data, xs, us)
    ref = ref_dyn.derivatives(xs, us)
    for f in ("xnext", "Fx", "Fu", "Jq", "Jw", "w", "vn"):
        np.testing.assert_allclose(getattr(got, f), getattr(ref, f), rtol=1e-9, atol=1e-10, err_msg=f)
    # the acceleration partials hold the passive-force chain rule, as the numpy path leaves them
    np.testing.assert_allclose(data.states.acc.partials, ref.states.acc.partials, rtol=1e-9, atol=1e-9)
    # the same data evaluated again (the prepared calls follow the buffers' contents)
    dyn.calc_diff(data, xs[::-1].copy(), us[::-1].copy())
    np.testing.assert_allclose(data.Fx, ref.Fx[::-1], rtol=1e-9, atol=1e-10)
    # central differences of the numpy step on the state manifold, every direction of a knot in one batch
    ss, h = ref_dyn.state, 1e-6
    E = h * np.eye(ss.ndx + m.nu)
    for n in range(N):
        x, u = np.broadcast_to(xs[n], (E.shape[0], m.nq + m.nv)), us[n]
        f0 = ref_dyn.step(xs[n], u)
        fp = ref_dyn.step(ss.integrate(x, E[:, :ss.ndx]), u + E[:, ss.ndx:])
        fm = ref_dyn.step(ss.integrate(x, -E[:, :ss.ndx]), u - E[:, ss.ndx:])
        J = (ss.difference(f0, fp) - ss.difference(f0, fm)).T / (2 * h)
        F = np.concatenate([data.Fx[-1 - n], data.Fu[-1 - n]], axis=-1)
        err = np.abs(F - J).max()
        assert err <= 1e-5 * max(1.0, np.abs(J).max()), f"{name} knot {n}: step Jacobian vs differences {err:.2e}"


def test_compiled_lie_euler_leaves_a_non_finite_state_to_the_numpy_path():
    """A state whose step is not finite gets the numpy path's outcome (its error), and the partials
    are not changed in place before that is known."""
    m, _, xs, us = _case("hyq-free")
    xs = xs.copy()
    xs[1, m.nq + 2] = np.inf
    outcomes = []
    for compiled in (True, False):
        dyn = DiscreteDynamics(m, dynamics.get_backend("numba"), DT)
        if not compiled:
            dyn._kernels = dyn._lie_kernel = None           # the numpy assembly
        try:
            d = dyn.calc_diff(dyn.create_data(N), xs, us)
            outcomes.append(("ok", d.xnext.copy(), d.Fx.copy()))
        except Exception as e:          # noqa: BLE001 (whatever the numpy path does, both do it)
            outcomes.append((type(e), str(e)))
    assert outcomes[0][0] == outcomes[1][0]
    if outcomes[0][0] == "ok":
        for a, b in zip(outcomes[0][1:], outcomes[1][1:]):
            np.testing.assert_array_equal(a, b)
    else:
        assert outcomes[0][1] == outcomes[1][1]


@pytest.fixture(scope="module")
def hyq_contacts():
    m = dynamics.load_model("hyq")
    return m, ContactSet(m, frames=FEET, kind="point")


def _states(m, B, seed):
    rng = np.random.default_rng(seed)
    q = m.integrate(np.broadcast_to(m.keyframe("standing"), (B, m.nq)), 0.05 * rng.normal(size=(B, m.nv)))
    return np.ascontiguousarray(q), rng.normal(size=(B, m.nv)), rng.normal(size=(B, m.nv))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_prepared_contact_dynamics_derivatives_follow_their_buffers(hyq_contacts, backend):
    m, cs = hyq_contacts
    be = dynamics.get_backend(backend)
    B = 5
    q, v, tau = (np.empty((B, m.nq)), np.empty((B, m.nv)), np.empty((B, m.nv)))
    out = ContactDynamicsBuffers.allocate(B, m.nv, cs.nc)
    run = be.prepare_contact_dynamics_derivatives(m, q, v, tau, cs, out)
    ref_be = dynamics.get_backend("numpy")
    for seed in (0, 1):                     # new contents of the same buffers
        q[...], v[...], tau[...] = _states(m, B, seed)
        run()
        (a, lam), d = ref_be.contact_dynamics_derivatives(m, q, v, tau, cs, return_values=True)
        np.testing.assert_allclose(out.a, a, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(out.lam, lam, rtol=1e-9, atol=1e-9)
        for i, name in enumerate(("da_dq", "da_dv", "da_dtau")):
            np.testing.assert_allclose(out.da[i], getattr(d, name), rtol=1e-8, atol=1e-8, err_msg=name)
        for i, name in enumerate(("dlam_dq", "dlam_dv", "dlam_dtau")):
            np.testing.assert_allclose(out.dl[i], getattr(d, name), rtol=1e-8, atol=1e-8, err_msg=name)


def test_prepared_contact_dynamics_derivatives_check_once_and_report_rank_loss(hyq_contacts):
    m, cs = hyq_contacts
    be = dynamics.get_backend("numba")
    B = 3
    q, v, tau = _states(m, B, 2)
    with pytest.raises(ValueError, match="ContactDynamicsBuffers.allocate"):
        be.prepare_contact_dynamics_derivatives(m, q, v, tau, cs, ContactDynamicsBuffers.allocate(B + 1, m.nv, cs.nc))
    with pytest.raises(ValueError, match="C-contiguous float64"):
        be.prepare_contact_dynamics_derivatives(m, q, v[:, :-1], tau, cs, ContactDynamicsBuffers.allocate(B, m.nv, cs.nc))
    twice = ContactSet(m, ("trunk_imu", "trunk"), kind="6d")     # the trunk held twice: K is singular
    out = ContactDynamicsBuffers.allocate(B, m.nv, twice.nc)
    run = be.prepare_contact_dynamics_derivatives(m, q, v, tau, twice, out)
    with pytest.raises(RankDeficientContactError):
        run()
