"""``dynamics.kernels.finite.all_finite`` against NumPy's ``isfinite`` (the oracle) on the values at
the edges of the float64 range."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from dynamics.kernels.finite import all_finite  # noqa: E402

EDGES = [0.0, -0.0, 1.0, -1.0, 5e-324, -5e-324, 2.2250738585072014e-308, np.finfo(float).max,
         -np.finfo(float).max, np.inf, -np.inf, np.nan, -np.nan]


@pytest.mark.parametrize("value", EDGES)
@pytest.mark.parametrize("where", [0, 6, 16])
def test_all_finite_matches_isfinite(value, where):
    x = np.ones(17)
    x[where] = value
    assert all_finite(x) == bool(np.all(np.isfinite(x)))


def test_all_finite_random_and_empty():
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000) * 10.0 ** rng.integers(-300, 300, size=1000)
    assert all_finite(x) is True
    assert all_finite(np.empty(0)) is True
    x[rng.integers(1000)] = np.nan
    assert all_finite(x) is False
