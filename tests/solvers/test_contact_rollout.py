"""The compiled contact rollout (solvers.contact_rollout_numba) against the Python forward pass run on
the numpy-reference dynamics (the independent oracle: ``DiscreteDynamics.step`` with the "numpy"
backend, whose contact and impulse dynamics are the generic Schur-complement path, not the numba
backend's fused kernels): HyQ on point contacts with a four-foot stance, a diagonal pair, a
touchdown impulse and a flight knot in one horizon, Atlas on 6-D soles (double and single support,
an impact), random feedback gains, with and without clipping and FDDP gaps; diverging candidates and
singular contact sets flagged as on the Python path; FDDP's result the same with and without the
compiled rollout (the backend capability switched off). The contact forces the rollout writes, and
the candidates' contact-force and cone costs evaluated from them (no second contact solve), against
the numpy reference's contact dynamics and costs evaluated from scratch."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics import ContactSet
from solvers import (FDDP, ActionModel, ContactDynamics, ControlCost, FreeDynamics, ImpulseDynamics, ShootingProblem,
                     StateCost)
from solvers.contact_rollout_numba import CompiledContactRollout, compiled_contact_rollout_available
from solvers.costs import ContactForceCost, FrictionConeCost, WrenchConeCost
from solvers.forward_pass import ForwardPass
from tests.helpers.comparisons import check
from tests.helpers.rollout_checks import check_rollouts, check_rollouts_on_two_threads

pytestmark = pytest.mark.skipif("numba" not in dynamics.available_backends(),
                                reason="the numba backend is not available on this machine")

RTOL = 1e-10
ALPHAS = np.array([1.0, 0.5, 0.125, 0.0])
HYQ_FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")


def _force_costs(m, cs):
    """Contact-force regularisation and the set's cone (friction pyramid or sole wrench cone), with
    weights that make them a sizeable share of the cost."""
    ref = np.tile([0.0, 0.0, 9.81 * m.total_mass / len(cs.frames)] + [0.0] * (cs.nc // len(cs.frames) - 3), len(cs.frames))
    force = ContactForceCost(m, cs, reference=ref, weights=1e-3)
    if cs.kind == "point":
        return force + FrictionConeCost(m, cs, mu=0.3, f_min=5.0, weights=10.0)
    return force + WrenchConeCost(m, cs, half_length=0.1, half_width=0.05, mu=0.3, f_min=5.0, weights=10.0)


def _numba_without_contact_rollout():
    """A numba backend that does not offer its contact dynamics to compiled solver loops (the
    capability switched off: the solvers fall back to the Python rollout)."""
    from dynamics.numba_backend import NumbaBackend

    class NoCompiledContacts(NumbaBackend):
        def compiled_contact_dynamics(self, model, contacts):
            return None
    return NoCompiledContacts()


def _hyq_models(m, x0):
    """Stance (4 feet), diagonal pair, touchdown impulse (restitution 0.2), flight, stance."""
    four = ContactSet(m, frames=HYQ_FEET, kind="point", baumgarte=(0.0, 5.0))
    pair = ContactSet(m, frames=("lf_foot", "rh_foot"), kind="point")
    w = np.r_[np.full(6, 10.0), np.full(m.nv - 6, 1.0), np.full(m.nv, 0.1)]
    run = StateCost(m, x0, w) + ControlCost(m, np.zeros(m.nu), 1e-4)
    stance = ActionModel(m, run + _force_costs(m, four), 0.02, ContactDynamics(four))
    diag = ActionModel(m, run + _force_costs(m, pair), 0.02, ContactDynamics(pair))
    impact = ActionModel(m, run, 0.0, ImpulseDynamics(four, restitution=0.2))
    flight = ActionModel(m, run, 0.01, FreeDynamics())
    return [stance] * 3 + [diag] * 3 + [impact] + [flight] + [stance] * 3, ActionModel(m, StateCost(m, x0, w), 0.0)


def _atlas_models(m, x0):
    """Both soles (6-D), left sole only, right-sole impact, both soles."""
    both = ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="6d")
    left = ContactSet(m, frames=("l_foot_site",), kind="6d", baumgarte=(0.0, 3.0))
    w = np.r_[np.full(6, 10.0), np.full(m.nv - 6, 1.0), np.full(m.nv, 0.1)]
    run = StateCost(m, x0, w) + ControlCost(m, np.zeros(m.nu), 1e-4)
    double = ActionModel(m, run + _force_costs(m, both), 0.01, ContactDynamics(both))
    single = ActionModel(m, run + _force_costs(m, left), 0.01, ContactDynamics(left))
    impact = ActionModel(m, run, 0.0, ImpulseDynamics(both))
    return [double] * 3 + [single] * 3 + [impact] + [double] * 2, ActionModel(m, StateCost(m, x0, w), 0.0)


def _state(m, rng):
    return np.concatenate([m.keyframe("standing"), 0.2 * rng.normal(size=m.nv)])


def _problems(name, backends=("numpy", "numba")):
    m = dynamics.load_model(name)
    rng = np.random.default_rng(11)
    x0 = _state(m, rng)
    running, terminal = (_hyq_models if name == "hyq" else _atlas_models)(m, x0)
    be = dynamics.get_backend("numpy")
    u_g = be.gravity_torques(m, x0[:m.nq])[6:]
    span = 5.0 * _joint_inertia(m, x0)      # bounds and random controls ~ rad/s² on every joint (Atlas'
    return tuple(ShootingProblem(x0, running, terminal, backend=be, u_lower=u_g - span, u_upper=u_g + span)
                 for be in backends)      # wrists are 1e3 times lighter than its hips)


def _joint_inertia(m, x0):
    """Diagonal of the joint-space inertia at x0 on the actuated joints, (nu,) [kg m²]."""
    return np.diagonal(dynamics.get_backend("numpy").crba(m, x0[:m.nq]))[6:]


@pytest.fixture(scope="module", params=["hyq", "atlas"])
def problems(request):
    return _problems(request.param)


def _inputs(p, rng):
    """A reference trajectory (the open-loop rollout of controls around the bounds' centre,
    perturbed), feed-forward steps large enough to clip, random gains."""
    N = p.horizon
    scale = _joint_inertia(p.model, p.x0)
    us = 0.5 * (p.u_lower + p.u_upper) + 2.0 * scale * rng.normal(size=(N, p.nu))
    xs = p.rollout(us)
    xs = p.state.integrate(xs, 0.02 * rng.normal(size=(N + 1, p.ndx)))
    k = 8.0 * scale * rng.normal(size=(N, p.nu))
    K = rng.normal(size=(N, p.nu, p.ndx)) * (20.0 * scale / p.ndx)[:, None]
    return xs, us, k, K


def _check(p_np, p_nb, alphas, xs, us, k, K, clip, gaps=None, expect_ok=None):
    ref = ForwardPass(p_np, compiled=False).run(alphas, xs, us, k, K, clip, gaps)
    fp = ForwardPass(p_nb, compiled=True)
    assert isinstance(fp._compiled_rollout(), CompiledContactRollout)
    X, U, ok = fp.run(alphas, xs, us, k, K, clip, gaps)
    check_rollouts((X, U, ok), ref, alphas, p_nb, RTOL, expect_ok)
    return X, U, ok


@pytest.mark.parametrize("clip,with_gaps", [(False, False), (True, True)])
def test_matches_python_forward_pass(problems, clip, with_gaps):
    p_np, p_nb = problems
    rng = np.random.default_rng(5)
    xs, us, k, K = _inputs(p_np, rng)
    gaps = 0.02 * rng.normal(size=(p_np.horizon + 1, p_np.ndx)) if with_gaps else None
    X, U, _ = _check(p_np, p_nb, ALPHAS, xs, us, k, K, clip, gaps, expect_ok=np.ones(len(ALPHAS), bool))
    m = p_nb.model
    imp = next(t for t in range(p_nb.horizon) if p_nb.knot_dynamics(t).integrator == "impulse")
    # the impact keeps the configuration and stops the touching frames (restitution e: J v⁺ = -e J v⁻);
    # candidate α = 1 (no gap added after the knot)
    np.testing.assert_array_equal(X[0, imp + 1, :m.nq], X[0, imp, :m.nq])
    cs = p_nb.knot_dynamics(imp).contacts
    be = dynamics.get_backend("numpy")
    e = p_nb.knot_dynamics(imp).restitution
    for f in cs.frames:
        ref = "local_world_aligned" if cs.kind == "point" else "local"
        q = X[0, imp, :m.nq]
        v_minus, v_plus = (be.frame_velocity(m, q, X[0, j, m.nq:], f, ref) for j in (imp, imp + 1))
        rows = slice(0, 3) if cs.kind == "point" else slice(0, 6)
        np.testing.assert_allclose(v_plus[rows], -e * v_minus[rows], atol=1e-9)
    if clip:
        assert np.any(U == p_nb.u_upper) and np.all(U <= p_nb.u_upper) and np.all(U >= p_nb.u_lower)


def test_contact_forces_and_candidate_costs_reuse_the_rollout_solves(problems):
    """The forces the compiled rollout writes at every candidate's contact knots are the numpy
    reference's contact dynamics at the candidate's (x_t, u_t); the candidates' total cost with the
    contact-force and cone terms reading them equals the same cost evaluated from scratch (numpy
    reference, and the numba backend's own contact solves), and no contact dynamics is solved
    for it."""
    p_np, p_nb = problems
    rng = np.random.default_rng(8)
    xs, us, k, K = _inputs(p_np, rng)
    gaps = 0.02 * rng.normal(size=(p_np.horizon + 1, p_np.ndx))
    fp = ForwardPass(p_nb, compiled=True)
    for alphas in (ALPHAS, ALPHAS[1:2]):       # the parallel line search's batch, one backtracking step
        S = alphas.shape[0]
        data = p_nb.create_data(max_candidates=S)
        out = data.rollout(S)
        X, U, ok = fp.run(alphas, xs, us, k, K, True, gaps, out=out)
        assert ok.all()
        forces = fp.contact_forces(out)
        m, be = p_np.model, p_np.backend
        contact_knots = [t for t in range(p_nb.horizon) if forces.models[t] is not None]
        assert contact_knots == [t for t in range(p_nb.horizon) if p_nb.knot_dynamics(t).integrator == "euler"
                                 and p_nb.knot_dynamics(t).contacts is not None]
        for t in contact_knots:
            dyn = p_np.knot_dynamics(t)
            q, v = X[:, t, :m.nq], X[:, t, m.nq:]
            lam = be.contact_dynamics(m, q, v, dyn.actuation.torques(q, v, U[:, t]), dyn.contacts)[1]
            check(f"contact forces, knot {t}", forces.lam[:, t, :dyn.contacts.nc], lam, RTOL)
        ref = p_np.cost(X, U)
        scratch = p_nb.cost(X, U)
        calls = []
        solve = p_nb.backend.contact_dynamics
        p_nb.backend.contact_dynamics = lambda *a, **kw: calls.append(1) or solve(*a, **kw)
        try:
            reused = p_nb.costs.total(X, U, forces)
        finally:
            del p_nb.backend.contact_dynamics
        assert not calls
        check("candidate costs (reused forces vs numba from scratch)", reused, scratch, 1e-12)
        check("candidate costs (reused forces vs numpy reference)", reused, ref, RTOL)


def test_diverging_and_singular_candidates_are_flagged():
    """A huge feed-forward spike makes the α = 1 candidate blow up (non-finite state: failed, kept
    finite) while α·spike ~ 1 and α = 0 still match; a contact set with two points on one rigid link
    (rank-deficient J at every state) fails every candidate, as on the Python path where
    solvers.contact_or_nan returns NaN rows."""
    p_np, p_nb = _problems("hyq")
    rng = np.random.default_rng(2)
    xs, us, k, K = _inputs(p_np, rng)
    k[4, 2] = 1e200
    _check(p_np, p_nb, np.array([1.0, 1e-200, 0.0]), xs, us, k, K, clip=False,
           expect_ok=np.array([False, True, True]))
    m = p_nb.model
    bad = ContactSet(m, frames=("lf_foot", "lf_lowerleg"), kind="point")    # 6 rows, rank 5
    am = ActionModel(m, StateCost(m, p_nb.x0), 0.02, ContactDynamics(bad))
    pb_np, pb_nb = (ShootingProblem(p_nb.x0, [p_nb.running_models[0]] * 2 + [am] * 2, None, backend=be)
                    for be in ("numpy", "numba"))
    xs = pb_np.state.integrate(np.repeat(pb_np.x0[None], 5, axis=0), 0.01 * rng.normal(size=(5, pb_np.ndx)))
    _check(pb_np, pb_nb, ALPHAS, xs, us[:4], k[:4], K[:4], clip=True, expect_ok=np.zeros(len(ALPHAS), bool))


def test_fddp_same_with_and_without_compiled_rollout():
    """HyQ standing (FDDP, infeasible start, parallel line search): the same iterates whether the
    forward pass is the compiled contact rollout or the Python loop (capability switched off). Four
    iterations: the solve has converged by then (later steps are rounding noise that the backward
    pass amplifies differently on both paths)."""
    m = dynamics.load_model("hyq")
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    xref = x0.copy()
    xref[2] += 0.03
    cs = ContactSet(m, frames=HYQ_FEET, kind="point")
    w = np.r_[np.full(6, 10.0), np.full(m.nv - 6, 1.0), np.full(m.nv, 0.1)]
    dyn = ContactDynamics(cs)
    am = ActionModel(m, StateCost(m, xref, w) + ControlCost(m, np.zeros(m.nu), 1e-4), 0.02, dyn)
    res = []
    for be in (dynamics.get_backend("numba"), _numba_without_contact_rollout()):
        p = ShootingProblem(x0, [am] * 8, ActionModel(m, StateCost(m, xref, 10 * w), 0.0, dyn), backend=be)
        s = FDDP(p, line_search="parallel")
        assert s.forward.uses_compiled_rollout is (be.compiled_contact_dynamics(m, cs) is not None)
        xs0 = np.repeat(x0[None], 9, axis=0)
        xs0[1:, 2] += 0.01               # an infeasible guess: FDDP closes the gaps
        us0 = np.tile(dynamics.get_backend("numpy").gravity_torques(m, x0[:m.nq])[6:], (8, 1))
        res.append(s.solve(xs_init=xs0, us_init=us0, max_iter=4, tol=0.0))
    a, b = res
    assert a.iterations == b.iterations
    assert abs(a.cost - b.cost) <= 1e-9 * abs(b.cost)
    np.testing.assert_allclose(a.xs, b.xs, rtol=0, atol=1e-11)
    np.testing.assert_allclose(a.us, b.us, rtol=0, atol=1e-9)
    assert a.xs[-1, 2] > x0[2] + 0.002        # the trunk rose towards the target


def test_availability():
    """Offered where the numba backend covers every knot; otherwise the Python rollout runs."""
    m = dynamics.load_model("hyq")
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    cost = StateCost(m, x0)

    def problem(dyn, backend="numba", dt=0.02):
        return ShootingProblem(x0, [ActionModel(m, cost, dt, dyn)] * 2, None, backend=backend)
    cs = ContactSet(m, frames=HYQ_FEET, kind="point")
    p = problem(ContactDynamics(cs))
    assert compiled_contact_rollout_available(p)
    CompiledContactRollout(p).warmup(p.x0)
    CompiledContactRollout(p).warmup()          # from the problem's initial state (what the solvers call)
    assert not compiled_contact_rollout_available(problem(ContactDynamics(cs), backend="numpy"))
    assert not compiled_contact_rollout_available(problem(ContactDynamics(cs, integrator="rk4")))
    assert not compiled_contact_rollout_available(problem(FreeDynamics()))       # solvers.rollout_numba's
    damped = ContactSet(m, frames=HYQ_FEET, kind="point", damping=1e-8)
    assert dynamics.get_backend("numba").compiled_contact_dynamics(m, damped) is None
    assert not compiled_contact_rollout_available(problem(ContactDynamics(damped)))
    off = _numba_without_contact_rollout()
    assert not compiled_contact_rollout_available(problem(ContactDynamics(cs), backend=off))
    assert not ForwardPass(problem(ContactDynamics(damped)), compiled=True).uses_compiled_rollout
    with pytest.raises(ValueError, match="CompiledContactRollout needs"):
        CompiledContactRollout(problem(ContactDynamics(cs), backend="numpy"))


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs numba with two threads")
@pytest.mark.parametrize("S", [2, 5])
def test_candidates_on_two_threads_equal_one_thread(S):
    """The candidates split over two worker threads (each slice in its own padded rows of the
    per-candidate arrays) run the same arithmetic as on one thread: bitwise the same rollouts,
    and both match the Python oracle."""
    p_np, = _problems("hyq", ("numpy",))
    xs, us, k, K = _inputs(p_np, np.random.default_rng(4))
    alphas = ALPHAS[:S] if S <= len(ALPHAS) else np.linspace(1.0, 0.0, S)
    out = {}
    for threads in (1, 2):
        p, = _problems("hyq", (dynamics.get_backend("numba", threads=threads),))
        cr = CompiledContactRollout(p)
        assert cr.fd.threads() == threads
        out[threads] = cr.run(p.x0, alphas, xs, us, k, K, p.u_lower, p.u_upper, True)
    for a, b in zip(out[1], out[2]):
        assert np.array_equal(a, b)
    X_ref, U_ref, ok_ref = ForwardPass(p_np, compiled=False).run(alphas, xs, us, k, K, True)
    assert np.array_equal(out[2][2], ok_ref) and ok_ref.all()
    check("states", out[2][0], X_ref, RTOL)
    check("controls", out[2][1], U_ref, RTOL)


@pytest.mark.skipif(__import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs numba with two threads")
def test_rollouts_on_two_python_threads_equal_serial_ones():
    """Two Python threads rolling out on one problem at once (the parallel driver runs without the
    GIL) each get the rollouts of a serial call: the kernel's scratch, shared by the problem's
    rollouts, is not shared between calling threads."""
    p_np, = _problems("hyq", ("numpy",))
    xs, us, k, K = _inputs(p_np, np.random.default_rng(4))
    p, = _problems("hyq", (dynamics.get_backend("numba", threads=2),))
    cr = CompiledContactRollout(p)
    alphas = (np.linspace(1.0, 0.0, 8), np.linspace(0.05, 0.9, 8))
    check_rollouts_on_two_threads(cr, p, xs, us, k, K, alphas, repeats=40)
