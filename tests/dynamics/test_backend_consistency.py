"""Every available non-reference backend against the numpy reference backend (issue 6).

The backend list is read from ``dynamics.available_backends()``, so backends added later (GPU,
FPGA emulation) are covered automatically. The numpy backend is itself checked against Pinocchio,
MuJoCo, finite differences and complex step in the oracle tests; here every public function of each
other backend must reproduce it to ``|x - ref| <= 1e-10 * max(1, max|ref|)`` on the bundled robots
(iiwa, HyQ, Atlas) and on random MJCF trees (hinge, slide, ball, free root, several joints per body,
welded bodies, joint anchors, armature, ``ref``), for one state, batches of 1 and 7, batch
dimensions (2, 3) and broadcast batch dimensions, with and without external forces, and
``aba_derivatives`` with a given ``M^-1``. Backends that expose ``set_threads`` must give the same
results with 1 and 2 threads (to 1e-14).

Reduced-precision backends declare their own tolerance (issue 14): the tolerance of a check is
``max(1e-10, backend.rtol)``, and a backend that reports a per-element error bound for its last
call (``last_error_bound``, the fixed-point ``fpga-sim``) is held to that bound element by element
(``|x - ref| <= bound + 1e-10 * max(1, max|ref|)``). fpga-sim emulates integer arithmetic in
Python and is slow, so it runs the batch shapes ``()`` and ``(2, 3)`` only; every other backend
runs all of ``BATCHES``.

Compilation happens once per backend and model in a module-scoped fixture (``warmup``), not inside
the timed tests; compiled backends cache their kernels on disk, so later sessions only load them.
"""

from __future__ import annotations


import numpy as np
import pytest


from tests.helpers.random_trees import random_tree_model  # noqa: E402

import dynamics  # noqa: E402
from tests.helpers.comparisons import RTOL, check_all  # noqa: E402

BACKENDS = [name for name, (ok, _) in dynamics.available_backends().items() if ok and name != "numpy"]
REFERENCES = ("local", "world", "local_world_aligned")
BATCHES = ((), (1,), (7,), (2, 3))
MODELS = ("iiwa", "hyq", "atlas", "tree_free", "tree_fixed")
SLOW_EMULATION_BATCHES = {"fpga-sim": ((), (2, 3))}

pytestmark = pytest.mark.skipif(not BACKENDS, reason="no backend other than numpy is available on this machine")


def check_be(backend, what: str, ours, ref) -> None:
    """Check the result of ``backend``'s *last* call against the reference with the tolerance the
    backend declares: a per-element bound (``last_error_bound``; None after a float64 call) or
    ``max(RTOL, backend.rtol)``. Call it as ``check_be(backend, tag, backend.f(...), ref.f(...))``
    so that the backend's call is the last one it made."""
    if hasattr(backend, "last_error_bound"):
        bound = backend.last_error_bound
        if bound is None:
            check_all(what, ours, ref)
            return
        if not isinstance(ref, tuple):
            ours, ref, bound = (ours,), (ref,), (bound,)
        assert isinstance(ours, tuple) and len(ours) == len(ref) == len(bound), \
            f"{what}: expected {len(ref)} results"
        for k, (x, y, b) in enumerate(zip(ours, ref, bound)):
            x, y = np.asarray(x), np.asarray(y)
            assert x.shape == y.shape, f"{what}[{k}]: shape {x.shape}, reference {y.shape}"
            assert x.dtype == np.float64, f"{what}[{k}]: dtype {x.dtype}, expected float64"
            b = np.reshape(b, x.shape)
            scale = max(1.0, float(np.abs(y).max(initial=0.0)))
            err = np.abs(x - y)
            bad = err > b + RTOL * scale
            assert not bad.any(), (f"{what}[{k}]: {int(bad.sum())} entries outside the declared bound; worst "
                                   f"|x - ref| = {err[bad].max():.3e}")
        return
    check_all(what, ours, ref, max(RTOL, backend.rtol))


def skip_slow_batches(backend, batch) -> None:
    allowed = SLOW_EMULATION_BATCHES.get(backend.name)
    if allowed is not None and batch not in allowed:
        pytest.skip(f"{backend.name}: emulation is slow; batch shapes {allowed} cover its batching")


@pytest.fixture(scope="module")
def models(bundled) -> dict[str, dynamics.RobotModel]:
    """Bundled robots plus two random trees of ~30 bodies: free-floating root, and fixed base."""
    out = dict(bundled)
    out["tree_free"] = random_tree_model(601, 30, free_root=True, refs=True)[0]
    out["tree_fixed"] = random_tree_model(602, 30, free_root=False, refs=True)[0]
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request, models):
    """The backend under test, warmed up (compiled or loaded from its cache) on every model."""
    be = dynamics.get_backend(request.param)
    for m in models.values():
        be.warmup(m)
    return be


def frames(model: dynamics.RobotModel) -> list[str]:
    """A few sites and bodies, including a frame fixed to the world where the model has one."""
    sites = [n for n in model.site_names if n]
    bodies = [n for n in model.body_names if n]
    picks = sites[:1] + sites[-1:] + bodies[-1:]
    if bodies and model.frame(bodies[0])[0] < 0:
        picks.append(bodies[0])  # the world body (Jacobians are zero)
    return list(dict.fromkeys(picks))


def states(model: dynamics.RobotModel, batch: tuple[int, ...], seed: int):
    """Random (q, v, a_or_tau, fext) with batch dimensions ``batch``."""
    rng = np.random.default_rng(seed)
    q = model.random_configuration(rng, size=batch)
    v = rng.normal(size=batch + (model.nv,))
    a = rng.normal(size=batch + (model.nv,))
    fext = rng.normal(size=batch + (model.nbody, 6))
    return q, v, a, fext


def batched_case(backend, models, name: str, batch: tuple[int, ...], seed: int):
    """For a test over ``MODELS x BATCHES``: skip the batch shapes a slow emulation leaves out, and
    return ``(numpy reference backend, model, states(model, batch, seed), label of the checks)``."""
    skip_slow_batches(backend, batch)
    m = models[name]
    return dynamics.get_backend("numpy"), m, states(m, batch, seed), f"{backend.name} {name} batch={batch}"


def fext_cases(tag: str, fext: np.ndarray):
    """``(None, label)`` and ``(fext, label)``: a check without, then with external forces."""
    yield None, f"{tag} fext=no"
    yield fext, f"{tag} fext=yes"


OVER_MODELS_AND_BATCHES = pytest.mark.parametrize(
    "name, batch", [(n, b) for n in MODELS for b in BATCHES],
    ids=lambda x: x if isinstance(x, str) else "x".join(map(str, x)) or "single")


# ---------------------------------------------------------------------------------------------
@OVER_MODELS_AND_BATCHES
def test_dynamics(backend, models, name, batch):
    """rnea, bias_forces, gravity_torques, crba, minv, aba and forward_dynamics (both methods)."""
    ref, m, (q, v, a, fext), tag_q = batched_case(backend, models, name, batch, 1)
    for fe, tag in fext_cases(tag_q, fext):
        check_be(backend, f"{tag} rnea", backend.rnea(m, q, v, a, fe), ref.rnea(m, q, v, a, fe))
        check_be(backend, f"{tag} bias_forces", backend.bias_forces(m, q, v, fe), ref.bias_forces(m, q, v, fe))
        check_be(backend, f"{tag} aba", backend.aba(m, q, v, a, fe), ref.aba(m, q, v, a, fe))
        for method in ("aba", "minv"):
            check_be(backend, f"{tag} forward_dynamics({method})",
                     backend.forward_dynamics(m, q, v, a, fe, method=method),
                  ref.forward_dynamics(m, q, v, a, fe, method=method))
    check_be(backend, f"{tag_q} gravity_torques", backend.gravity_torques(m, q), ref.gravity_torques(m, q))
    check_be(backend, f"{tag_q} crba", backend.crba(m, q), ref.crba(m, q))
    check_be(backend, f"{tag_q} minv", backend.minv(m, q), ref.minv(m, q))


@OVER_MODELS_AND_BATCHES
def test_derivatives(backend, models, name, batch):
    """rnea_derivatives and aba_derivatives, with and without external forces and a given M^-1."""
    ref, m, (q, v, a, fext), tag_q = batched_case(backend, models, name, batch, 2)
    for fe, tag in fext_cases(tag_q, fext):
        check_be(backend, f"{tag} rnea_derivatives", backend.rnea_derivatives(m, q, v, a, fe),
                  ref.rnea_derivatives(m, q, v, a, fe))
        check_be(backend, f"{tag} aba_derivatives", backend.aba_derivatives(m, q, v, a, fe),
                  ref.aba_derivatives(m, q, v, a, fe))
    Mi = ref.minv(m, q)
    check_be(backend, f"{tag_q} aba_derivatives(minv given)", backend.aba_derivatives(m, q, v, a, fext, minv=Mi),
              ref.aba_derivatives(m, q, v, a, fext, minv=Mi))


@OVER_MODELS_AND_BATCHES
def test_kinematics(backend, models, name, batch):
    """Placements, frame Jacobians (all references), their time variation, frame velocity and
    acceleration, centre of mass and its Jacobian."""
    ref, m, (q, v, a, _), tag = batched_case(backend, models, name, batch, 3)
    check_be(backend, f"{tag} body_placements", backend.body_placements(m, q), ref.body_placements(m, q))
    check_be(backend, f"{tag} site_placements", backend.site_placements(m, q), ref.site_placements(m, q))
    check_be(backend, f"{tag} center_of_mass", backend.center_of_mass(m, q), ref.center_of_mass(m, q))
    check_be(backend, f"{tag} com_jacobian", backend.com_jacobian(m, q), ref.com_jacobian(m, q))
    for f in frames(m):
        check_be(backend, f"{tag} frame_placement({f})", backend.frame_placement(m, q, f),
                 ref.frame_placement(m, q, f))
        for r in REFERENCES:
            t = f"{tag} {f} {r}"
            check_be(backend, f"{t} frame_jacobian", backend.frame_jacobian(m, q, f, r),
                     ref.frame_jacobian(m, q, f, r))
            check_be(backend, f"{t} frame_jacobian_time_variation",
                     backend.frame_jacobian_time_variation(m, q, v, f, r),
                      ref.frame_jacobian_time_variation(m, q, v, f, r))
            check_be(backend, f"{t} frame_velocity", backend.frame_velocity(m, q, v, f, r),
                     ref.frame_velocity(m, q, v, f, r))
            check_be(backend, f"{t} frame_acceleration", backend.frame_acceleration(m, q, v, a, f, r),
                  ref.frame_acceleration(m, q, v, a, f, r))


@pytest.mark.parametrize("name", ("hyq", "tree_free"))
def test_broadcast_batch_dimensions(backend, models, name):
    """Arguments with different (broadcastable) batch dimensions: q (2, 3, nq) with v (3, nv),
    tau unbatched and fext (2, 1, nbody, 6)."""
    ref = dynamics.get_backend("numpy")
    m = models[name]
    rng = np.random.default_rng(4)
    q = m.random_configuration(rng, size=(2, 3))
    v = rng.normal(size=(3, m.nv))
    tau = rng.normal(size=m.nv)
    fext = rng.normal(size=(2, 1, m.nbody, 6))
    Mi = ref.minv(m, q[0, 0])
    tag = f"{backend.name} {name} broadcast"
    check_be(backend, f"{tag} rnea", backend.rnea(m, q, v, tau, fext), ref.rnea(m, q, v, tau, fext))
    check_be(backend, f"{tag} aba", backend.aba(m, q, v, tau, fext), ref.aba(m, q, v, tau, fext))
    check_be(backend, f"{tag} rnea_derivatives", backend.rnea_derivatives(m, q, v, tau, fext),
              ref.rnea_derivatives(m, q, v, tau, fext))
    check_be(backend, f"{tag} aba_derivatives", backend.aba_derivatives(m, q, v, tau, fext),
              ref.aba_derivatives(m, q, v, tau, fext))
    check_be(backend, f"{tag} aba_derivatives(one minv for all)",
             backend.aba_derivatives(m, q, v, tau, fext, minv=Mi),
              ref.aba_derivatives(m, q, v, tau, fext, minv=Mi))
    f = frames(m)[0]
    check_be(backend, f"{tag} frame_jacobian_time_variation",
             backend.frame_jacobian_time_variation(m, q, v, f, "local"),
              ref.frame_jacobian_time_variation(m, q, v, f, "local"))


@pytest.mark.parametrize("name", ("iiwa", "atlas"))
def test_second_order_supported_or_refused(backend, models, name):
    """Second-order derivatives: equal to the reference where the backend implements them,
    otherwise a NotImplementedError that names the fallback."""
    ref = dynamics.get_backend("numpy")
    m = models[name]
    q, v, a, fext = states(m, (2,), 5)
    for fn in ("rnea_second_derivatives", "aba_second_derivatives"):
        if backend.supports(fn):
            check_all(f"{backend.name} {name} {fn}", getattr(backend, fn)(m, q, v, a, fext),
                      getattr(ref, fn)(m, q, v, a, fext), rtol=1e-9)
        else:
            with pytest.raises(NotImplementedError, match="numpy"):
                getattr(backend, fn)(m, q, v, a, fext)


def test_errors_match_reference(backend, models):
    """Unknown frame names and reference frames fail as in the reference backend."""
    m = models["iiwa"]
    q = m.neutral()
    with pytest.raises(KeyError, match="no site, body or geom named"):
        backend.frame_jacobian(m, q, "no_such_frame")
    with pytest.raises(ValueError, match="unknown reference frame"):
        backend.frame_jacobian(m, q, "ee", "global")
    with pytest.raises(ValueError, match="non-finite"):
        backend.aba(m, np.full(m.nq, np.nan), np.zeros(m.nv), np.zeros(m.nv))


@pytest.mark.parametrize("name", ("iiwa", "atlas", "tree_free"))
def test_thread_count_does_not_change_results(backend, models, name):
    """Results with 1 and 2 worker threads agree (each state is computed by the same compiled code
    whatever the thread that runs it)."""
    if not hasattr(backend, "set_threads"):
        pytest.skip(f"backend '{backend.name}' has no thread-count setting")
    be = type(backend)()  # a private instance: the shared one keeps its setting
    if hasattr(be, "parallel_threshold_us"):
        be.parallel_threshold_us = 0.0  # run the parallel variant even for this small batch
    m = models[name]
    q, v, a, fext = states(m, (7,), 6)
    f = frames(m)[0]
    calls = {
        "rnea": lambda: be.rnea(m, q, v, a, fext),
        "crba": lambda: be.crba(m, q),
        "minv": lambda: be.minv(m, q),
        "aba": lambda: be.aba(m, q, v, a, fext),
        "rnea_derivatives": lambda: be.rnea_derivatives(m, q, v, a, fext),
        "aba_derivatives": lambda: be.aba_derivatives(m, q, v, a, fext),
        "frame_jacobian_time_variation": lambda: be.frame_jacobian_time_variation(m, q, v, f, "local"),
        "com_jacobian": lambda: be.com_jacobian(m, q),
        "body_placements": lambda: be.body_placements(m, q),
    }
    for fn in ("rnea_second_derivatives", "aba_second_derivatives"):
        if be.supports(fn):
            calls[fn] = lambda fn=fn: getattr(be, fn)(m, q[:3], v[:3], a[:3], fext[:3])
    results = {}
    for n in (1, 2):
        be.set_threads(n)
        results[n] = {k: fn() for k, fn in calls.items()}
    for k in calls:
        check_all(f"{backend.name} {name} {k} 1 vs 2 threads", results[2][k], results[1][k], rtol=1e-14)


def test_numba_specifics():
    """numba backend: thread-count validation and a clear refusal of complex (complex-step) inputs."""
    if "numba" not in BACKENDS:
        pytest.skip("the numba backend is not available on this machine")
    from dynamics.numba_backend import NumbaBackend
    m = dynamics.load_model("iiwa")
    with pytest.raises(ValueError, match="threads must be an integer"):
        NumbaBackend(threads=0)
    with pytest.raises(ValueError, match="threads must be an integer"):
        NumbaBackend(threads=1.5)
    be = NumbaBackend(threads=1)
    assert be.threads == 1
    q = m.neutral().astype(complex)
    with pytest.raises(TypeError, match="complex"):
        be.rnea(m, q, np.zeros(m.nv), np.zeros(m.nv))


def test_numba_one_signature_per_kernel():
    """Each numba kernel is compiled for exactly one signature, whatever the inputs: writeable or
    read-only (broadcast) arrays, float32 or int input, with or without fext / minv."""
    if "numba" not in BACKENDS:
        pytest.skip("the numba backend is not available on this machine")
    import dynamics.numba_backend as nb
    be = nb.NumbaBackend(threads=2, parallel_threshold_us=0.0)
    m = dynamics.load_model("hyq")
    rng = np.random.default_rng(7)
    q = m.random_configuration(rng, size=(3,))
    v = rng.normal(size=(3, m.nv))
    variants = [(q, v, v, None),
                (np.broadcast_to(q[0], (2, m.nq)), v[0].astype(np.float32), np.ones(m.nv, int), None),
                (q[0], v[0], v[0], rng.normal(size=(m.nbody, 6)))]
    for nt in (1, 2):
        be.set_threads(nt)
        for qq, vv, aa, fe in variants:
            be.rnea(m, qq, vv, aa, fe)
            be.aba_derivatives(m, qq, vv, aa, fe)
            be.aba_derivatives(m, qq, vv, aa, fe, minv=be.minv(m, qq))
            be.frame_jacobian_time_variation(m, qq, vv, "lf_foot")
            be.frame_jacobian(m, qq, "lf_foot")
    k = nb._k()
    for mod in (k.rnea, k.aba_derivatives, k.minv, k.kinematics):
        for name in dir(mod):
            fn = getattr(mod, name)
            if name.endswith("_range") and hasattr(fn, "signatures") and fn.signatures:
                assert len(fn.signatures) == 1, f"{mod.__name__}.{name} compiled for {fn.signatures}"
