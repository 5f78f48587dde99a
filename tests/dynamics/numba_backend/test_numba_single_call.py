"""The numba backend's single-state fast path (``rnea``, ``aba``, ``rnea_derivatives``, ``aba_derivatives`` on one
finite float64 contiguous state, no f_ext / M⁻¹): the numpy reference's results for every input form
that takes it; ``rnea`` shares one compiled specialisation with the general path, ``aba``,
``rnea_derivatives`` and ``aba_derivatives`` have single-state kernels of their own (one
specialisation per input form, ready after ``warmup``, answering whether their output is finite);
every other input still goes the general way with its usual errors."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics.inputs import ShapeError

pytest.importorskip("numba")

NB = dynamics.get_backend("numba")
REF = dynamics.get_backend("numpy")


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.max(np.abs(a - b)) <= 1e-10 * max(1.0, np.max(np.abs(b)))


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_single_state_forms_match_reference(bundled, robot):
    m = bundled[robot]
    rng = np.random.default_rng(5)
    q, v, u = m.random_configuration(rng), rng.normal(size=m.nv), rng.normal(size=m.nv)
    ro = [x.copy() for x in (q, v, u)]
    for x in ro:
        x.flags.writeable = False
    forms = {"(n,)": (q, v, u), "(1, n)": (q[None], v[None], u[None]), "read-only": tuple(ro),
             "strided (general path)": tuple(np.stack([x, x], axis=-1)[..., 0] for x in (q, v, u))}
    for name, (qq, vv, uu) in forms.items():
        _close(NB.rnea(m, qq, vv, uu), REF.rnea(m, qq, vv, uu))
        _close(NB.aba(m, qq, vv, uu), REF.aba(m, qq, vv, uu))
        for a, b in zip(NB.rnea_derivatives(m, qq, vv, uu), REF.rnea_derivatives(m, qq, vv, uu)):
            _close(a, b)
        for a, b in zip(NB.aba_derivatives(m, qq, vv, uu), REF.aba_derivatives(m, qq, vv, uu)):
            _close(a, b)
        got = NB.aba_derivatives(m, qq, vv, uu, return_acceleration=True)
        want = REF.aba_derivatives(m, qq, vv, uu, return_acceleration=True)
        assert len(got) == 4, name
        for a, b in zip(got, want):
            _close(a, b)
    # results are fresh arrays each call (not a buffer reused by the next call)
    a1 = NB.aba(m, q, v, u)
    NB.aba(m, q, v + 1.0, u)
    _close(a1, REF.aba(m, q, v, u))
    d1 = NB.aba_derivatives(m, q, v, u)
    NB.aba_derivatives(m, q, v + 1.0, u)
    for a, b in zip(d1, REF.aba_derivatives(m, q, v, u)):
        _close(a, b)


@pytest.mark.parametrize("function", ["rnea", "aba", "rnea_derivatives", "aba_derivatives"])
def test_fast_path_adds_no_range_specialisation(bundled, function):
    """The fast path compiles no variant of the batched ``*_range`` kernel besides the general path's
    (``rnea`` shares its specialisation; the others run a single-state kernel of their own)."""
    from dynamics.numba_backend import _k
    m = bundled["iiwa"]
    rng = np.random.default_rng(6)
    q, v, u = m.random_configuration(rng), rng.normal(size=m.nv), rng.normal(size=m.nv)
    fext = rng.normal(size=(m.nbody, 6))
    f = getattr(NB, function)
    kernel = getattr(getattr(_k(), function), function + "_range")
    f(m, q, v, u, fext)                # general path (read-only views, serial kernel)
    before = set(kernel.signatures)
    f(m, q, v, u)                      # fast path: writeable inputs, (n,) and (1, n)
    f(m, q[None], v[None], u[None])
    if function == "aba_derivatives":
        f(m, q, v, u, return_acceleration=True)
    assert set(kernel.signatures) == before


@pytest.mark.parametrize("function", ["rnea_derivatives", "aba_derivatives"])
def test_derivative_single_state_kernels(bundled, function):
    """``rnea_derivatives_state`` / ``aba_derivatives_state``: the reference's matrices (row-major in one
    flat output), one specialisation per input form, and False when any output entry is not finite."""
    from dynamics.kernels import aba_derivatives as AD, rnea_derivatives as RD
    from dynamics.kernels.packing import as_kernel_input, packed
    m = bundled["hyq"]
    nv = m.nv
    rng = np.random.default_rng(9)
    q, v, u = m.random_configuration(rng), rng.normal(size=nv), rng.normal(size=nv)
    ro = [as_kernel_input(x) for x in (q, v, u)]
    pm = packed(m)
    want = getattr(REF, function)(m, q, v, u)
    kernel = RD.rnea_derivatives_state if function == "rnea_derivatives" else AD.aba_derivatives_state
    extra = () if function == "rnea_derivatives" else (np.empty(0),)
    for args in (tuple(ro), tuple(x[None] for x in ro)):
        out = np.empty(len(want) * nv * nv)
        assert kernel(pm.li, pm.lf, pm.gv, *args, out, *extra) is True
        for a, b in zip(out.reshape(len(want), nv, nv), want):
            _close(a, b)
    assert sorted(sig[3].ndim for sig in kernel.signatures) == [1, 2], kernel.signatures
    for k in (0, nv - 1):              # the first and the last dof: the check covers every entry
        bad = u.copy()
        bad[k] = np.inf
        out = np.empty(len(want) * nv * nv)
        assert kernel(pm.li, pm.lf, pm.gv, ro[0], ro[1], as_kernel_input(bad), out, *extra) is False
    if function == "aba_derivatives":  # the acceleration, when asked for
        acc = np.empty(nv)
        assert kernel(pm.li, pm.lf, pm.gv, *ro, np.empty(3 * nv * nv), acc) is True
        _close(acc, REF.aba(m, q, v, u))


def test_aba_single_state_kernel(bundled):
    """``aba``'s own single-state kernel: one specialisation per input form ((n,) and (1, n), read-only
    types, as for the general path), taken by writeable and read-only callers alike; it answers
    whether its result is finite."""
    from dynamics.kernels.aba import aba_state
    from dynamics.kernels.packing import as_kernel_input, packed
    m = bundled["hyq"]
    rng = np.random.default_rng(8)
    q, v, u = m.random_configuration(rng), rng.normal(size=m.nv), rng.normal(size=m.nv)
    ro = [as_kernel_input(x) for x in (q, v, u)]
    for qq, vv, uu in ((q, v, u), tuple(ro), (q[None], v[None], u[None]), tuple(x[None] for x in ro)):
        _close(NB.aba(m, qq, vv, uu), REF.aba(m, qq, vv, uu))
    sigs = aba_state.signatures
    assert sorted(sig[3].ndim for sig in sigs) == [1, 2], sigs
    assert all(not sig[k].mutable for sig in sigs for k in (3, 4, 5)) and all(sig[6].mutable for sig in sigs)
    pm = packed(m)
    out = np.empty(m.nv)
    assert aba_state(pm.li, pm.lf, pm.gv, *ro, out) is True
    _close(out, REF.aba(m, q, v, u))
    for k in (0, m.nv - 1):            # the first and the last dof: the check covers every entry
        bad = u.copy()
        bad[k] = np.inf
        assert aba_state(pm.li, pm.lf, pm.gv, ro[0], ro[1], as_kernel_input(bad), out) is False
    assert len(aba_state.signatures) == 2


def test_warmup_covers_the_single_state_kernels(bundled):
    """``warmup`` leaves both forms of the single-state kernels ready: their compiled entry points are
    kept, so a first call after it neither compiles nor goes through numba's dispatcher."""
    from dynamics.numba_backend import NumbaBackend
    be = NumbaBackend(threads=1)
    be.warmup(bundled["iiwa"])
    assert {f"{name}{form}" for name in ("aba_state", "rnea_derivatives_state", "aba_derivatives_state")
            for form in ("", "_row")} <= set(be._entries)


def test_model_constants_are_dropped_with_the_model(bundled):
    import copy
    import gc
    m = copy.copy(bundled["iiwa"])     # a model object of its own
    q, z = m.neutral(), np.zeros(m.nv)
    _close(NB.aba(m, q, z, z), REF.aba(bundled["iiwa"], q, z, z))
    key = id(m)
    assert key in NB._one_states
    del m
    gc.collect()
    assert key not in NB._one_states


def test_errors_unchanged(bundled):
    m = bundled["iiwa"]
    q, z = m.neutral(), np.zeros(m.nv)
    bad = z.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="aba_derivatives: v contains non-finite values"):
        NB.aba_derivatives(m, q, bad, z)
    for f in ("rnea", "aba", "rnea_derivatives"):
        with pytest.raises(ValueError, match=f"{f}: q contains non-finite values"):
            getattr(NB, f)(m, np.full(m.nq, np.inf), z, z)
    with pytest.raises(ValueError, match="aba_derivatives: tau contains non-finite values"):
        NB.aba_derivatives(m, q, z, bad, return_acceleration=True)
    for name in ("v", "tau"):            # aba's single-state kernel answers "not finite": the general path words it
        args = {"q": q, "v": z, "tau": z, name: bad}
        with pytest.raises(ValueError, match=f"aba: {name} contains non-finite values"):
            NB.aba(m, **args)
        with pytest.raises(ValueError, match=f"aba: {name} contains non-finite values"):
            NB.aba(m, **{k: x[None] for k, x in args.items()})
    with pytest.raises(ShapeError, match=r"aba: tau has shape \(3,\), expected \(\.\.\., 7\)"):
        NB.aba(m, q, z, np.zeros(3))
    with pytest.raises(TypeError, match="expected a RobotModel"):
        NB.rnea_derivatives("iiwa", q, z, z)
    # integer input is converted by the general path, as before
    _close(NB.aba(m, q, np.zeros(m.nv, dtype=int), z), REF.aba(m, q, z, z))
