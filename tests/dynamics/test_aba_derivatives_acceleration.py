"""``aba_derivatives(..., return_acceleration=True)`` returns the acceleration the derivative
algorithm computes on the way (so the solvers stop running ABA twice per knot): it must equal
``aba`` and leave the derivatives unchanged, on every available backend, for one state and batches."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics

BACKENDS = [n for n, (ok, _) in dynamics.available_backends().items() if ok and n in ("numpy", "numba")]


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
@pytest.mark.parametrize("batch", [(), (5,)])
def test_acceleration_equals_aba_and_derivatives_unchanged(name, robot, batch, bundled, rng):
    be = dynamics.get_backend(name)
    m = bundled[robot]
    q = m.random_configuration(rng, size=batch) if batch else m.random_configuration(rng)
    v = rng.normal(size=batch + (m.nv,))
    tau = rng.normal(size=batch + (m.nv,)) * 10
    a, daq, dav, dat = be.aba_derivatives(m, q, v, tau, return_acceleration=True)
    ref_a = be.aba(m, q, v, tau)
    assert a.shape == batch + (m.nv,)
    np.testing.assert_allclose(a, ref_a, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(ref_a).max()))
    for got, ref in zip((daq, dav, dat), be.aba_derivatives(m, q, v, tau)):
        np.testing.assert_array_equal(got, ref)   # the same kernel: bitwise identical
