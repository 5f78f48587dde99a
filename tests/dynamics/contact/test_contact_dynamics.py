"""Rigid contact dynamics, impulses and their derivatives (dynamics.contact, issue #11) against
independent oracles, on every available backend:

* Pinocchio ``constraintDynamics`` / ``impulseDynamics`` and ``computeConstraintDynamicsDerivatives``
  / ``computeImpulseDynamicsDerivatives`` with ``RigidConstraintModel``s built to our conventions
  (point: CONTACT_3D + LOCAL_WORLD_ALIGNED; 6d: CONTACT_6D + LOCAL), on HyQ (four point feet),
  Atlas (two 6-D soles), random floating-base trees with random contact frames, and a redundant set
  (four corner points on one sole) against Pinocchio's proximal solve;
* MuJoCo: the equations of motion ``M a + b − τ − J_cᵀ λ = 0`` with MuJoCo's M, bias forces and site
  Jacobians, and the constraint ``α + kd ν + kp e = 0`` with MuJoCo's ``mj_objectAcceleration`` /
  ``mj_objectVelocity`` / site placements;
* central differences (every backend) and the complex step (numpy) of our own values.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
pin = pytest.importorskip("pinocchio")

import dynamics  # noqa: E402
from tests.helpers import pinocchio_models as pm_  # noqa: E402
from dynamics.contact import ContactSet, RankDeficientContactError  # noqa: E402
from dynamics.inputs import ShapeError  # noqa: E402
from tests.helpers.oracle_helpers import oracle_mjmodel, perturbed_q  # noqa: E402
from tests.helpers.random_trees import random_tree_mjcf  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TOL = 1e-9          # relative to max(1, max |reference|), float64 backends
FD_TOL = 2e-6       # central differences (step 1e-6), relative to max(1, max |analytical|)
CS_TOL = 1e-9       # complex step
NSTATES = 3
# every available float64 backend (declared rtol <= 1e-10). Reduced-precision backends (fixed point,
# float32) are left out: the contact Schur complement amplifies their declared kernel tolerance, and
# they have no contact tolerance of their own yet.
BACKENDS = [n for n, (ok, _) in dynamics.available_backends().items()
            if ok and dynamics.get_backend(n).rtol <= 1e-10]
ROBOTS = {"hyq": (("lf_foot", "rf_foot", "lh_foot", "rh_foot"), "point"),
          "atlas": (("l_foot_site", "r_foot_site"), "6d")}
TREES = {  # random floating-base trees (seed, nbodies) with contact frames picked at random
    "tree_point": (11, 12, "point", 3),
    "tree_6d": (16, 10, "6d", 1),
}


def tol_for(be) -> float:
    """TOL, scaled by the backend's declared rtol if it is looser than float64's 1e-10."""
    return TOL * max(1.0, be.rtol / 1e-10)


def check(what: str, ours, ref, tol: float) -> float:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    err = float(np.max(np.abs(ours - ref)) / max(1.0, float(np.max(np.abs(ref)))))
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"
    return err


# ------------------------------------------------------------------------------ cases
class Case:
    """A model, its MuJoCo model, a Pinocchio oracle and a contact set."""

    def __init__(self, name, model, mj, oracle, frames, kind):
        self.name, self.model, self.mj, self.oracle = name, model, mj, oracle
        self.frames, self.kind = frames, kind

    def contacts(self, **kw) -> ContactSet:
        return ContactSet(self.model, self.frames, kind=self.kind, **kw)

    def references(self, rng) -> np.ndarray:
        """Random reference placements (Baumgarte kp term) near the frames' placements."""
        be = dynamics.get_backend("numpy")
        q = self.model.random_configuration(rng)
        out = []
        for f in self.frames:
            R, p = be.frame_placement(self.model, q, f)
            T = np.eye(4)
            T[:3, :3], T[:3, 3] = R, p
            out.append(T)
        out = np.array(out)
        return out[:, :3, 3] if self.kind == "point" else out

    def pin_contacts(self, baumgarte=(0.0, 0.0), reference=None):
        pm = self.oracle.model
        ct = pin.ContactType.CONTACT_3D if self.kind == "point" else pin.ContactType.CONTACT_6D
        rf = pin.LOCAL_WORLD_ALIGNED if self.kind == "point" else pin.LOCAL
        cms = []
        for i, f in enumerate(self.frames):
            fr = pm.frames[self.oracle.frame_id(f)]
            if reference is None:
                cm = pin.RigidConstraintModel(ct, pm, fr.parentJoint, fr.placement, rf)
            else:
                T = np.eye(4)
                if self.kind == "point":
                    T[:3, 3] = reference[i]
                else:
                    T = reference[i]
                cm = pin.RigidConstraintModel(ct, pm, fr.parentJoint, fr.placement, 0, pin.SE3(T[:3, :3], T[:3, 3]), rf)
            bp = cm.m_baumgarte_parameters
            bp.Kp, bp.Kd = baumgarte
            cm.m_baumgarte_parameters = bp
            cms.append(cm)
        cds = [c.createData() for c in cms]
        data = pm.createData()
        pin.initConstraintDynamics(pm, data, cms, cds)
        return data, cms, cds

    def pin_lam(self, cds) -> np.ndarray:
        return np.concatenate([np.array(cd.contact_force.linear if self.kind == "point" else cd.contact_force.vector)
                               for cd in cds])


@functools.cache
def get_case(name: str) -> Case:
    if name in ROBOTS:
        model = dynamics.load_model(name)
        mj = mujoco.MjModel.from_xml_path(model.path)
        return Case(name, model, mj, pm_.oracle_from_mjcf(model.path, mj), *ROBOTS[name])
    if name == "atlas_corners":  # four corner points on the left sole: a redundant point set
        spec = mujoco.MjSpec.from_file(dynamics.load_model("atlas").path)
        foot = spec.body("l_foot")
        frames = []
        for i, (dx, dy) in enumerate(((0.1, 0.05), (0.1, -0.05), (-0.08, 0.05), (-0.08, -0.05))):
            foot.add_site(name=f"l_corner{i}", pos=[0.0426 + dx, 0.0017 + dy, -0.07645])
            frames.append(f"l_corner{i}")
        mj = spec.compile()
        model = dynamics.from_mujoco(spec.compile(), name="atlas_corners")
        return Case(name, model, mj, pm_.oracle_from_mujoco(mj), tuple(frames), "point")
    seed, nb, kind, nframes = TREES[name]
    xml = random_tree_mjcf(np.random.default_rng(seed), nb, free_root=True, refs=True)
    mj = mujoco.MjModel.from_xml_string(xml)
    model = dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml), name=name)
    rng = np.random.default_rng(seed + 1000)
    frames = tuple(f"s{b}" for b in sorted(rng.choice(np.arange(1, nb), size=nframes, replace=False)))
    return Case(name, model, mj, pm_.oracle_from_mujoco(mj), frames, kind)


def states(case: Case, n: int = NSTATES, seed: int = 0):
    rng = np.random.default_rng(sum(map(ord, case.name)) + seed)
    m = case.model
    return (m.random_configuration(rng, size=n), rng.normal(size=(n, m.nv)), rng.normal(size=(n, m.nv)) * 10.0)


@pytest.fixture(scope="module", autouse=True)
def warm_backends():
    """Compile (or load from numba's disk cache) every kernel once per module."""
    c = get_case("hyq")
    q, v, tau = states(c, 2)
    for name in BACKENDS:
        be = dynamics.get_backend(name)
        be.contact_dynamics_derivatives(c.model, q, v, tau, c.contacts())
        be.impulse_dynamics_derivatives(c.model, q, v, c.contacts())


# ------------------------------------------------------------------------------ Pinocchio
CASES = ("hyq", "atlas", *TREES)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("baumgarte", [False, True], ids=["plain", "baumgarte"])
def test_contact_dynamics_and_derivatives_vs_pinocchio(backend, name, baumgarte):
    be, c = dynamics.get_backend(backend), get_case(name)
    o = c.oracle
    gains, ref = ((7.0, 3.0), c.references(np.random.default_rng(3))) if baumgarte else ((0.0, 0.0), None)
    contacts = c.contacts(baumgarte=gains, reference=ref)
    q, v, tau = states(c)
    a, lam = be.contact_dynamics(c.model, q, v, tau, contacts)
    d = be.contact_dynamics_derivatives(c.model, q, v, tau, contacts)
    data, cms, cds = c.pin_contacts(gains, ref)
    prox = pin.ProximalSettings(1e-14, 0.0, 1)
    tol = tol_for(be)
    for s in range(q.shape[0]):
        ap = pin.constraintDynamics(o.model, data, o.q_to_pin(q[s]), o.v_to_pin(v[s]), o.v_to_pin(tau[s]), cms, cds, prox)
        check(f"{name} a[{s}]", a[s], o.vec_from_pin(ap), tol)
        check(f"{name} lam[{s}]", lam[s], c.pin_lam(cds), tol)
        ref_d = pin.computeConstraintDynamicsDerivatives(o.model, data, cms, cds, prox)
        for i, label in enumerate(("da_dq", "da_dv", "da_dtau", "dlam_dq", "dlam_dv", "dlam_dtau")):
            r = o.mat_from_pin(ref_d[i]) if i < 3 else o.cols_from_pin(ref_d[i])
            check(f"{name} {label}[{s}]", d[i][s], r, tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("restitution", [0.0, 0.4])
def test_impulse_dynamics_and_derivatives_vs_pinocchio(backend, name, restitution):
    be, c = dynamics.get_backend(backend), get_case(name)
    o = c.oracle
    contacts = c.contacts()
    q, v, _ = states(c, seed=1)
    vp, imp = be.impulse_dynamics(c.model, q, v, contacts, restitution=restitution)
    dvp_dq, dvp_dv, dimp_dq, dimp_dv = be.impulse_dynamics_derivatives(c.model, q, v, contacts, restitution=restitution)
    prox = pin.ProximalSettings(1e-14, 0.0, 1)
    tol = tol_for(be)
    eye = np.eye(c.model.nv)
    for s in range(q.shape[0]):
        # fresh pin.Data per state: with restitution 0, computeImpulseDynamicsDerivatives reuses a
        # term of the previous call's Data (pin 4.1.0: errors ~0.2 on the second state otherwise)
        data, cms, cds = c.pin_contacts()
        r = pin.impulseDynamics(o.model, data, o.q_to_pin(q[s]), o.v_to_pin(v[s]), cms, cds, restitution, prox)
        check(f"{name} v_plus[{s}]", vp[s], o.vec_from_pin(r), tol)
        check(f"{name} impulse[{s}]", imp[s], c.pin_lam(cds), tol)
        pin.computeImpulseDynamicsDerivatives(o.model, data, cms, cds, restitution, prox)
        check(f"{name} dvp_dq[{s}]", dvp_dq[s], o.mat_from_pin(data.ddq_dq), tol)
        # Pinocchio's ddq_dv is ∂(v⁺ − v⁻)/∂v⁻ (it leaves out the identity); ours is ∂v⁺/∂v⁻
        check(f"{name} dvp_dvminus[{s}]", dvp_dv[s] - eye, o.mat_from_pin(data.ddq_dv), tol)
        check(f"{name} dimp_dq[{s}]", dimp_dq[s], o.cols_from_pin(data.dlambda_dq), tol)
        check(f"{name} dimp_dvminus[{s}]", dimp_dv[s], o.cols_from_pin(data.dlambda_dv), tol)
    # the constraint holds after the impact: J v⁺ = −e J v⁻ (MuJoCo Jacobians)
    m, dm = oracle_mjmodel(c.mj), None
    dm = mujoco.MjData(m)
    for s in range(q.shape[0]):
        Jc = _mj_contact_jacobian(c, m, dm, q[s])
        qv_p, qv_m = c.model.qvel_from_v(q[s], vp[s]), c.model.qvel_from_v(q[s], v[s])
        check(f"{name} J v_plus", Jc @ qv_p, -restitution * (Jc @ qv_m), tol)



@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("restitution", [0.0, 0.4])
def test_numba_compiled_impulse_derivatives_match_the_numpy_reference(name, restitution, monkeypatch):
    """The numba backend's impulse-dynamics derivatives come from its compiled kernel
    (``numba_kernels.impulse_dynamics_derivatives_fused``, counted) and equal the numpy backend's
    generic implementation to round-off; the Pinocchio and finite-difference tests check both."""
    if "numba" not in BACKENDS:
        pytest.skip("the numba backend is not available on this machine")
    from dynamics.contact import numba_kernels as ck
    calls = []
    fused = ck.impulse_dynamics_derivatives_fused
    monkeypatch.setattr(ck, "impulse_dynamics_derivatives_fused", lambda *a: calls.append(1) or fused(*a))
    c = get_case(name)
    contacts = c.contacts()
    q, v, _ = states(c, seed=5)
    ours = dynamics.get_backend("numba").impulse_dynamics_derivatives(c.model, q, v, contacts, restitution=restitution)
    ref = dynamics.get_backend("numpy").impulse_dynamics_derivatives(c.model, q, v, contacts, restitution=restitution)
    assert calls == [1], "the numba backend did not run its compiled impulse derivatives"
    for label, o, r in zip(("dvp_dq", "dvp_dvminus", "dimp_dq", "dimp_dvminus"), ours, ref):
        check(f"{name} {label}", o, r, 1e-12)


# ------------------------------------------------------------------------------ MuJoCo
def _mj_contact_jacobian(c: Case, m, d, q) -> np.ndarray:
    """Constraint Jacobian (nc, nv) w.r.t. MuJoCo qvel: point rows world-aligned linear, 6d rows
    (linear, angular) in the site frame."""
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    mujoco.mj_comPos(m, d)
    rows = []
    for f in c.frames:
        sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, f)
        jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jp, jr, sid)
        if c.kind == "point":
            rows.append(jp)
        else:
            R = d.site_xmat[sid].reshape(3, 3)
            rows += [R.T @ jp, R.T @ jr]
    return np.vstack(rows)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ("hyq", "atlas", "tree_point"))
def test_residuals_and_constraint_acceleration_vs_mujoco(backend, name):
    be, c = dynamics.get_backend(backend), get_case(name)
    rng = np.random.default_rng(5)
    kp, kd = 5.0, 2.0
    ref = c.references(rng)
    contacts = c.contacts(baumgarte=(kp, kd), reference=ref)
    q, v, tau = states(c, seed=2)
    a, lam = be.contact_dynamics(c.model, q, v, tau, contacts)
    m = oracle_mjmodel(c.mj)
    d = mujoco.MjData(m)
    tol = tol_for(be)
    for s in range(q.shape[0]):
        qvel = c.model.qvel_from_v(q[s], v[s])
        d.qpos[:], d.qvel[:] = q[s], qvel
        mujoco.mj_forward(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        qacc = c.model.qacc_from_a(q[s], v[s], a[s])
        Jc = _mj_contact_jacobian(c, m, d, q[s])
        mujoco.mj_forward(m, d)
        lhs = M @ qacc + d.qfrc_bias - c.model.qfrc_from_tau(q[s], tau[s]) - Jc.T @ lam[s]
        check(f"{name} M a + b - tau - J^T lam [{s}]", lhs, np.zeros(m.nv), tol * max(1.0, np.abs(d.qfrc_bias).max()))
        d.qacc[:] = qacc
        mujoco.mj_rnePostConstraint(m, d)
        for i, f in enumerate(c.frames):
            sid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, f)
            acc, vel = np.zeros(6), np.zeros(6)  # (angular, linear)
            R = d.site_xmat[sid].reshape(3, 3)
            if c.kind == "point":
                mujoco.mj_objectAcceleration(m, d, mujoco.mjtObj.mjOBJ_SITE, sid, acc, 0)
                mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, sid, vel, 0)
                alpha = acc[3:] + c.model.gravity + kd * vel[3:] + kp * (d.site_xpos[sid] - ref[i])
            else:
                mujoco.mj_objectAcceleration(m, d, mujoco.mjtObj.mjOBJ_SITE, sid, acc, 1)
                mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, sid, vel, 1)
                w, vl = vel[:3], vel[3:]
                lin = acc[3:] + R.T @ c.model.gravity - np.cross(w, vl)   # classical -> spatial
                err = pin.log6(pin.SE3(ref[i][:3, :3], ref[i][:3, 3]).inverse()
                               * pin.SE3(R, d.site_xpos[sid].copy())).vector
                alpha = np.concatenate([lin, acc[:3]]) + kd * np.concatenate([vl, w]) + kp * err
            check(f"{name} constraint acceleration {f}[{s}]", alpha, np.zeros_like(alpha),
                  tol * max(1.0, np.abs(acc).max()))


# ------------------------------------------------------------------------------ redundant set
@pytest.mark.parametrize("backend", BACKENDS)
def test_redundant_point_set_is_refused_without_damping(backend):
    c = get_case("atlas_corners")
    q, v, tau = states(c, 2)
    be = dynamics.get_backend(backend)
    for f in (be.contact_dynamics, be.contact_dynamics_derivatives):
        with pytest.raises(RankDeficientContactError, match="at 2 of 2 states.*damping"):
            f(c.model, q, v, tau, c.contacts())


@pytest.mark.parametrize("backend", BACKENDS)
def test_redundant_point_set_matches_pinocchio_proximal_and_residuals(backend):
    be, c = dynamics.get_backend(backend), get_case("atlas_corners")
    o = c.oracle
    contacts = c.contacts(damping=1e-6, max_iter=500, tol=1e-12)
    q, v, tau = states(c)
    # consistent constraints: the sole does not move (a turning sole's four corners cannot all
    # have zero acceleration; such an inconsistent set is refused with an error)
    J6 = dynamics.get_backend("numpy").frame_jacobian(c.model, q, "l_foot_site", "local")
    v = v - np.einsum("bij,bj->bi", np.linalg.pinv(J6) @ J6, v)
    a, lam = be.contact_dynamics(c.model, q, v, tau, contacts)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(lam))
    data, cms, cds = c.pin_contacts()
    prox = pin.ProximalSettings(1e-13, 1e-6, 500)
    m = oracle_mjmodel(c.mj)
    d = mujoco.MjData(m)
    for s in range(q.shape[0]):
        ap = pin.constraintDynamics(o.model, data, o.q_to_pin(q[s]), o.v_to_pin(v[s]), o.v_to_pin(tau[s]), cms, cds, prox)
        check(f"redundant a[{s}]", a[s], o.vec_from_pin(ap), 1e-8)
        # λ is not unique: compare the resultant, and check ours is the minimum-norm one
        Jc = _mj_contact_jacobian(c, m, d, q[s])
        check(f"redundant J^T lam [{s}]", Jc.T @ lam[s], Jc.T @ c.pin_lam(cds), 1e-8)
        null = np.linalg.svd(Jc.T)[2][-(Jc.shape[0] - np.linalg.matrix_rank(Jc)):]
        assert np.max(np.abs(null @ lam[s])) <= 1e-6 * max(1.0, np.abs(lam[s]).max())
        d.qpos[:], d.qvel[:] = q[s], c.model.qvel_from_v(q[s], v[s])
        mujoco.mj_forward(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        qacc = c.model.qacc_from_a(q[s], v[s], a[s])
        res = M @ qacc + d.qfrc_bias - c.model.qfrc_from_tau(q[s], tau[s]) - Jc.T @ lam[s]
        check(f"redundant residual [{s}]", res, np.zeros(m.nv), 1e-8 * np.abs(d.qfrc_bias).max())


# ------------------------------------------------------------------------------ numerical differentiation
def _fd(f, model, args, which, h=1e-6):
    """Central differences of f(*args) (batched public function, one state) along every tangent
    direction of args[which]; last axis = variable."""
    nv = model.nv
    rep = [np.broadcast_to(x, (nv,) + np.shape(x)) for x in args]

    def at(step):
        r = list(rep)
        r[which] = perturbed_q(model, args[0], step) if which == 0 else args[which] + step * np.eye(nv)
        return f(*r)
    plus, minus = at(h), at(-h)
    return [np.moveaxis((p - m) / (2 * h), 0, -1) for p, m in zip(plus, minus)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ("hyq", "atlas", "tree_point"))
def test_contact_derivatives_vs_central_differences(backend, name):
    be, c = dynamics.get_backend(backend), get_case(name)
    contacts = c.contacts(baumgarte=(4.0, 1.5), reference=c.references(np.random.default_rng(8)))
    q, v, tau = (x[0] for x in states(c, seed=3))
    d = be.contact_dynamics_derivatives(c.model, q, v, tau, contacts)
    f = lambda *args: tuple(be.contact_dynamics(c.model, *args, contacts))  # noqa: E731
    for which, (ia, il) in enumerate(((0, 3), (1, 4), (2, 5))):
        num_a, num_l = _fd(f, c.model, (q, v, tau), which)
        scale = max(1.0, np.abs(d[ia]).max())
        check(f"{name} da/d{'q v tau'.split()[which]}", d[ia] / scale, num_a / scale, FD_TOL)
        scale = max(1.0, np.abs(d[il]).max())
        check(f"{name} dlam/d{'q v tau'.split()[which]}", d[il] / scale, num_l / scale, FD_TOL)
    g = lambda *args: tuple(be.impulse_dynamics(c.model, *args, contacts, restitution=0.3))  # noqa: E731
    di = be.impulse_dynamics_derivatives(c.model, q, v, contacts, restitution=0.3)
    for which, (iv, ii) in enumerate(((0, 2), (1, 3))):
        num_v, num_i = _fd(g, c.model, (q, v), which)
        for label, ours, num in ((f"dvp/d{which}", di[iv], num_v), (f"dimp/d{which}", di[ii], num_i)):
            scale = max(1.0, np.abs(ours).max())
            check(f"{name} {label}", ours / scale, num / scale, FD_TOL)


@pytest.mark.parametrize("name", ("hyq", "atlas", "tree_6d"))
def test_contact_derivatives_vs_complex_step(name):
    """Complex step (step 1e-20) of the numpy backend's values: exact to round-off."""
    be, c = dynamics.get_backend("numpy"), get_case(name)
    contacts = c.contacts(baumgarte=(0.0, 2.5))
    q, v, tau = (x[0] for x in states(c, seed=4))
    nv, h = c.model.nv, 1e-20
    d = be.contact_dynamics_derivatives(c.model, q, v, tau, contacts)
    Q = perturbed_q(c.model, q, 1j * h)
    V = v + 1j * h * np.eye(nv)
    T = tau + 1j * h * np.eye(nv)
    for which, (Qx, Vx, Tx) in enumerate(((Q, v, tau), (q, V, tau), (q, v, T))):
        a, lam = be.contact_dynamics(c.model, Qx, Vx, Tx, contacts)
        check(f"{name} cs da/d{which}", d[which], np.imag(a).T / h, CS_TOL)
        check(f"{name} cs dlam/d{which}", d[3 + which], np.imag(lam).T / h, CS_TOL)
    di = be.impulse_dynamics_derivatives(c.model, q, v, contacts)
    for which, (Qx, Vx) in enumerate(((Q, v), (q, V))):
        vp, imp = be.impulse_dynamics(c.model, Qx, Vx, contacts)
        check(f"{name} cs dvp/d{which}", di[which], np.imag(vp).T / h, CS_TOL)
        check(f"{name} cs dimp/d{which}", di[2 + which], np.imag(imp).T / h, CS_TOL)


# ------------------------------------------------------------------------------ API
@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_shapes_and_leading_dims(backend):
    be, c = dynamics.get_backend(backend), get_case("hyq")
    contacts = c.contacts()
    assert contacts.nc == 12 and get_case("atlas").contacts().nc == 12
    q, v, tau = states(c, 6)
    q, v, tau = q.reshape(2, 3, -1), v.reshape(2, 3, -1), tau.reshape(2, 3, -1)
    a, lam = be.contact_dynamics(c.model, q, v, tau, contacts)
    assert a.shape == (2, 3, c.model.nv) and lam.shape == (2, 3, 12)
    d = be.contact_dynamics_derivatives(c.model, q, v, tau, contacts)
    assert [x.shape for x in d] == [(2, 3, 18, 18)] * 3 + [(2, 3, 12, 18)] * 3
    a1, lam1 = be.contact_dynamics(c.model, q[1, 2], v[1, 2], tau[1, 2], contacts)
    assert a1.shape == (18,) and lam1.shape == (12,)
    np.testing.assert_allclose(a1, a[1, 2], rtol=1e-12, atol=1e-12)
    vp, imp = be.impulse_dynamics(c.model, q, v, contacts)
    assert vp.shape == (2, 3, 18) and imp.shape == (2, 3, 12)
    di = be.impulse_dynamics_derivatives(c.model, q[0], v[0], contacts)
    assert [x.shape for x in di] == [(3, 18, 18), (3, 18, 18), (3, 12, 18), (3, 12, 18)]
    # a robot standing on its feet: the feet push up
    q0 = c.model.keyframe(next(iter(c.model.keyframes))) if c.model.keyframes else None
    if q0 is not None:
        _, lam0 = be.contact_dynamics(c.model, q0, np.zeros(18), np.zeros(18), contacts)
        assert np.all(lam0.reshape(4, 3)[:, 2] > 0)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_derivatives_into_caller_buffers(backend):
    """``out=`` buffers (a solver's workspace) receive the same results as fresh arrays, are
    reused call after call, and a buffer of the wrong size is refused with the fix."""
    from dynamics.contact import ContactDynamicsBuffers
    be, c = dynamics.get_backend(backend), get_case("hyq")
    contacts = c.contacts()
    q, v, tau = states(c, 6)
    ref_vals, ref = be.contact_dynamics_derivatives(c.model, q, v, tau, contacts, return_values=True)
    buf = ContactDynamicsBuffers.allocate(6, c.model.nv, contacts.nc)
    for _ in range(2):
        vals, d = be.contact_dynamics_derivatives(c.model, q, v, tau, contacts, return_values=True, out=buf)
        for g, r in zip((*vals, *d), (*ref_vals, *ref)):
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
        assert np.shares_memory(d.da_dq, buf.da) and np.shares_memory(d.dlam_dtau, buf.dl)
        assert np.shares_memory(vals.a, buf.a) and np.shares_memory(vals.lam, buf.lam)
        q = q + 0.0                                               # a fresh input array, same buffers
    with pytest.raises(ValueError, match=r"ContactDynamicsBuffers.allocate\(6, 18, 12\)"):
        be.contact_dynamics_derivatives(c.model, q, v, tau, contacts, out=ContactDynamicsBuffers.allocate(5, 18, 12))


def test_clear_errors():
    be, c = dynamics.get_backend("numpy"), get_case("hyq")
    m = c.model
    q, v, tau = (x[0] for x in states(c, 1))
    with pytest.raises(KeyError, match="no site, body or geom named 'nope'"):
        ContactSet(m, ("lf_foot", "nope"))
    with pytest.raises(ValueError, match="unknown kind"):
        ContactSet(m, ("lf_foot",), kind="3d")
    with pytest.raises(ValueError, match="distinct"):
        ContactSet(m, ("lf_foot", "lf_foot"))
    with pytest.raises(ValueError, match="fixed to the world"):
        ContactSet(m, ("world",))
    with pytest.raises(ValueError, match="needs reference"):
        ContactSet(m, ("lf_foot",), baumgarte=(1.0, 0.0))
    with pytest.raises(ValueError, match="shape"):
        ContactSet(m, ("lf_foot",), baumgarte=(1.0, 0.0), reference=np.zeros((2, 3)))
    cs = c.contacts()
    with pytest.raises(ShapeError, match="tau"):
        be.contact_dynamics(m, q, v, tau[:-1], cs)
    with pytest.raises(ValueError, match="non-finite"):
        be.contact_dynamics(m, q, v * np.nan, tau, cs)
    with pytest.raises(ValueError, match="built for model 'hyq'"):
        be.contact_dynamics(get_case("atlas").model, q, v, tau, cs)
    with pytest.raises(TypeError, match="ContactSet"):
        be.contact_dynamics(m, q, v, tau, ("lf_foot",))
    with pytest.raises(ValueError, match="restitution"):
        be.impulse_dynamics(m, q, v, cs, restitution=1.5)
    with pytest.raises(dynamics.contact.contact_set.RankDeficientContactError):  # a point on the trunk, thrice
        be.contact_dynamics(m, q, v, tau, ContactSet(m, ("trunk_imu", "trunk", "lf_foot", "lf_lowerleg"), kind="6d"))
    assert dynamics.ContactSet is ContactSet


def test_benchmark_smoke(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "contact_dynamics.py"), "--quick", "--robots",
                           "hyq", "--backends", "numpy", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data == json.loads(out.read_text())
    assert {r["function"] for r in data["results"]} == {"contact_dynamics", "contact_dynamics_derivatives"}
    assert all(r["ratio_vs_pinocchio_loop"] > 0 for r in data["results"])
