"""Comparing a backend's results with a reference: ``|x - ref| <= rtol * max(1, max|ref|)``."""

from __future__ import annotations

import numpy as np

#: float64 tolerance every backend meets against the numpy reference
RTOL = 1e-10


def check(what: str, ours, ref, rtol: float = RTOL) -> None:
    """Assert ``|ours - ref| <= rtol * max(1, max|ref|)`` (shapes equal)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape}, reference {ref.shape}"
    assert ours.dtype == np.float64, f"{what}: dtype {ours.dtype}, expected float64"
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(ours - ref).max(initial=0.0))
    assert err <= rtol * scale, (f"{what}: max |x - ref| = {err:.3e} > {rtol:.0e} * {scale:.3e} at index "
                                 f"{np.unravel_index(np.argmax(np.abs(ours - ref)), ref.shape)}")


def check_all(what: str, ours, ref, rtol: float = RTOL) -> None:
    """:func:`check` on a result that may be a tuple of arrays."""
    if isinstance(ref, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(ref), f"{what}: expected {len(ref)} results"
        for k, (x, y) in enumerate(zip(ours, ref)):
            check(f"{what}[{k}]", x, y, rtol)
    else:
        check(what, ours, ref, rtol)
