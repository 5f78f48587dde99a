"""Backends specialise by method override, never by a flag or their name, and the generic code
written on top of them (dynamics.contact, dynamics.parallel_depth) uses only the public Backend API.

* Every generic contact function, and the parallel-in-depth algorithms, give the numpy results on
  a backend that exposes nothing but public attributes.
* The numba backend runs its fused contact / impulse / frame-motion kernels through its overrides
  of the public methods, and the generic implementation (``super()``) for what they do not cover
  (damping, complex inputs); a subclass with another name still runs them, and a backend merely
  *named* "numba" does not.
"""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics import contact, parallel_depth
from dynamics.backend import Backend
from dynamics.contact import ContactDynamicsBuffers, ContactSet
from dynamics.numpy_backend import NumpyBackend

HYQ_FEET = ("lf_foot", "rf_foot", "lh_foot", "rh_foot")
TOL = 1e-9


def _public_only(be: Backend):
    """A stand-in for ``be`` whose private attributes cannot be reached: any ``_name`` lookup fails
    the test, naming the attribute."""

    class PublicOnly:
        def __getattr__(self, name):
            if name.startswith("_"):
                raise AssertionError(f"generic code reached the backend's private attribute {name}")
            return getattr(be, name)

    return PublicOnly()


def _close(ours, ref, what: str) -> None:
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    err = float(np.max(np.abs(ours - ref), initial=0.0)) / max(1.0, float(np.max(np.abs(ref), initial=0.0)))
    assert err <= TOL, f"{what}: relative error {err:.1e}"


@pytest.fixture(scope="module")
def hyq():
    m = dynamics.load_model("hyq")
    rng = np.random.default_rng(7)
    q = m.random_configuration(rng, size=3)
    return m, q, rng.normal(size=(3, m.nv)), 10.0 * rng.normal(size=(3, m.nv))


def _all_contact_results(be, m, q, v, tau, cs):
    """Every contact function of ``dynamics.contact`` on ``be``, as a flat list of arrays."""
    out = [*contact.contact_dynamics(be, m, q, v, tau, cs)]
    (a, lam), d = contact.contact_dynamics_derivatives(be, m, q, v, tau, cs, return_values=True)
    out += [a, lam, *d]
    out += [*contact.impulse_dynamics(be, m, q, v, cs, restitution=0.3)]
    out += [*contact.impulse_dynamics_derivatives(be, m, q, v, cs, restitution=0.3)]
    fm = contact.frame_motion_derivatives(be, m, q, v, tau, cs)
    return out + [fm.v, fm.a, fm.dv_dq, fm.dv_dv, fm.da_dq, fm.da_dv, fm.R, fm.p]


@pytest.mark.parametrize("kind", ["point", "6d"])
def test_contact_code_uses_only_the_public_backend_api(hyq, kind):
    m, q, v, tau = hyq
    cs = ContactSet(m, frames=HYQ_FEET[:2], kind=kind, baumgarte=(0.0, 4.0))
    ref = _all_contact_results(NumpyBackend(), m, q, v, tau, cs)
    ours = _all_contact_results(_public_only(NumpyBackend()), m, q, v, tau, cs)
    for i, (o, r) in enumerate(zip(ours, ref)):
        _close(o, r, f"result {i}")


def test_parallel_depth_uses_only_the_public_backend_api():
    m = dynamics.load_model("iiwa")
    rng = np.random.default_rng(3)
    q, v, a = m.random_configuration(rng, size=2), rng.normal(size=(2, m.nv)), rng.normal(size=(2, m.nv))
    be = NumpyBackend()
    _close(parallel_depth.rnea(_public_only(be), m, q, v, a), be.rnea(m, q, v, a), "scan rnea")
    tau = be.rnea(m, q, v, a)
    _close(parallel_depth.forward_dynamics(_public_only(be), m, q, v, tau, method="jsiia"), a, "jsiia")
    with pytest.raises(ValueError, match="rnea: q contains non-finite values"):
        parallel_depth.rnea(_public_only(be), m, np.full(m.nq, np.nan), v[0], a[0])


# ------------------------------------------------------------------------------ numba overrides
@pytest.fixture
def counted(monkeypatch):
    """Counts of calls into the fused kernels of dynamics.contact.numba_kernels."""
    pytest.importorskip("numba")
    if not dynamics.available_backends()["numba"][0]:
        pytest.skip("the numba backend is not available on this machine")
    from dynamics.contact import numba_kernels as ck
    calls = {"contact": 0, "impulse": 0, "motion": 0}
    for key, fn in (("contact", "contact_dynamics_fused"), ("impulse", "impulse_dynamics_fused"),
                    ("motion", "frame_motion_derivatives")):
        def wrapped(*args, _f=getattr(ck, fn), _k=key, **kw):
            calls[_k] += 1
            return _f(*args, **kw)
        monkeypatch.setattr(ck, fn, wrapped)
    return calls


def _numba_results(be, m, q, v, tau, cs):
    out = [*be.contact_dynamics(m, q, v, tau, cs)]
    buf = ContactDynamicsBuffers.allocate(q.shape[0], m.nv, cs.nc)
    (a, lam), d = be.contact_dynamics_derivatives(m, q, v, tau, cs, return_values=True, out=buf)
    out += [a, lam, *d]
    out += [*be.impulse_dynamics(m, q, v, cs, restitution=0.3)]
    fm = be.frame_motion_derivatives(m, q, v, tau, cs)
    return out + [fm.v, fm.a, fm.dv_dq, fm.dv_dv, fm.da_dq, fm.da_dv, fm.R, fm.p]


def test_numba_runs_its_fused_kernels_by_override(hyq, counted):
    from dynamics.numba_backend import NumbaBackend
    m, q, v, tau = hyq
    cs = ContactSet(m, frames=HYQ_FEET, kind="point", baumgarte=(0.0, 5.0))
    ref = _numba_results(NumpyBackend(), m, q, v, tau, cs)
    for o, r in zip(_numba_results(NumbaBackend(), m, q, v, tau, cs), ref):
        _close(o, r, "numba")
    # contact_dynamics, contact_dynamics_derivatives; impulse_dynamics; frame_motion_derivatives
    assert counted == {"contact": 2, "impulse": 1, "motion": 1}

    class Renamed(NumbaBackend):
        name = "my-cpu"

    for o, r in zip(_numba_results(Renamed(), m, q, v, tau, cs), ref):
        _close(o, r, "renamed numba")
    assert counted == {"contact": 4, "impulse": 2, "motion": 2}

    class NamedNumba(NumpyBackend):
        name = "numba"

    for o, r in zip(_numba_results(NamedNumba(), m, q, v, tau, cs), ref):
        _close(o, r, "numpy named numba")
    assert counted == {"contact": 4, "impulse": 2, "motion": 2}


def test_numba_falls_back_to_the_generic_implementation(hyq, counted):
    m, q, v, tau = hyq
    be = dynamics.get_backend("numba")
    damped = ContactSet(m, frames=HYQ_FEET[:2], kind="point", damping=1e-3)
    ref = _numba_results(NumpyBackend(), m, q, v, tau, damped)
    for o, r in zip(_numba_results(be, m, q, v, tau, damped), ref):
        _close(o, r, "damped")
    # the generic contact derivatives and the direct call still run the compiled frame motion kernel
    # (damping does not enter it)
    assert counted == {"contact": 0, "impulse": 0, "motion": 2}
    # complex inputs (complex step): the numpy frame motion derivatives
    h = 1e-20
    qc = q.astype(complex)
    qc[:, 9] += 1j * h
    fm = be.frame_motion_derivatives(m, qc, v, tau, damped)
    fm_ref = NumpyBackend().frame_motion_derivatives(m, qc, v, tau, damped)
    _close(fm.dv_dq.imag / h, fm_ref.dv_dq.imag / h, "complex step")
    assert counted["motion"] == 2


def test_numba_contact_errors_name_the_problem(hyq):
    pytest.importorskip("numba")
    m, q, v, tau = hyq
    be = dynamics.get_backend("numba")
    cs = ContactSet(m, frames=HYQ_FEET, kind="point")
    with pytest.raises(ValueError, match="impulse_dynamics: restitution must be in"):
        be.impulse_dynamics(m, q, v, cs, restitution=2.0)
    with pytest.raises(ValueError, match="contact_dynamics: tau has shape"):
        be.contact_dynamics(m, q, v, tau[:, :3], cs)
    with pytest.raises(ValueError, match="make them with ContactDynamicsBuffers.allocate"):
        be.contact_dynamics_derivatives(m, q, v, tau, cs, out=ContactDynamicsBuffers.allocate(2, m.nv, cs.nc))
