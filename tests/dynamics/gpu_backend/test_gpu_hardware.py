"""The ``gpu`` backend on a real NVIDIA GPU (marker ``gpu``): the checks of tests/dynamics/gpu_backend/test_gpu_backend.py,
run with ``simulate=False``, plus a larger batch and device-resident CuPy arrays.

Skipped, with the reason from :class:`dynamics.BackendUnavailableError` (no CuPy, no CUDA device),
on machines without a GPU — CI included. Run only these with ``pytest -m gpu``.
"""

from __future__ import annotations


import numpy as np
import pytest


import dynamics  # noqa: E402
from dynamics.gpu_backend import FLOAT32_RTOL, PARTITIONS  # noqa: E402
from tests.helpers.comparisons import check, check_all  # noqa: E402
from tests.helpers.gpu_checks import (check_dynamics, check_kinematics, check_partitions, check_second_order,  # noqa: E402
                              states)


def _gpu_or_reason() -> str | None:
    try:
        dynamics.get_backend("gpu")
    except dynamics.BackendUnavailableError as e:
        return str(e)
    return None


_REASON = _gpu_or_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=f"no usable GPU: {_REASON}")]


@pytest.fixture(scope="module")
def gpu64():
    return dynamics.get_backend("gpu", dtype="float64")


@pytest.fixture(scope="module")
def gpu32():
    return dynamics.get_backend("gpu", dtype="float32")


@pytest.mark.parametrize("name", ("iiwa", "hyq", "atlas"))
def test_dynamics(gpu64, bundled, name):
    check_dynamics(gpu64, bundled[name], 4, 1e-10)


@pytest.mark.parametrize("name", ("iiwa", "hyq", "atlas"))
def test_kinematics(gpu64, bundled, name):
    check_kinematics(gpu64, bundled[name], 4, 1e-10)


@pytest.mark.parametrize("name", ("iiwa", "hyq", "atlas"))
def test_second_order(gpu64, bundled, name):
    check_second_order(gpu64, bundled[name], 2, 1e-10)


@pytest.mark.parametrize("name", ("iiwa", "hyq", "atlas"))
def test_partitions(bundled, name):
    check_partitions(lambda p: dynamics.get_backend("gpu", partition=p), bundled[name], 4, 1e-10)


@pytest.mark.parametrize("name", ("iiwa", "hyq", "atlas"))
def test_float32(gpu32, bundled, name):
    check_dynamics(gpu32, bundled[name], 4, FLOAT32_RTOL)


@pytest.mark.parametrize("n", (1, 256, 1024))
def test_large_batches(gpu64, bundled, n):
    """The batch sizes of the benchmark: every block computes its own knot."""
    ref = dynamics.get_backend("numba")
    m = bundled["atlas"]
    q, v, tau, fext = states(m, n, 21)
    check_all(f"atlas N={n} aba_derivatives", gpu64.aba_derivatives(m, q, v, tau, fext),
              ref.aba_derivatives(m, q, v, tau, fext), 1e-10)


def test_cupy_arrays_stay_on_device(gpu64, bundled):
    import cupy
    m = bundled["hyq"]
    q, v, tau, _ = states(m, 64, 22)
    out = gpu64.on_device("aba_derivatives", m, cupy.asarray(q), cupy.asarray(v), cupy.asarray(tau))
    assert all(isinstance(x, cupy.ndarray) for x in out)
    assert gpu64.last_timing.h2d_s == 0 and gpu64.last_timing.d2h_s == 0
    host = gpu64.aba_derivatives(m, q, v, tau)
    for k in range(3):
        check(f"on_device[{k}]", cupy.asnumpy(out[k]), host[k], 1e-14)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_timing_is_reported(bundled, partition):
    be = dynamics.get_backend("gpu", partition=partition)
    m = bundled["iiwa"]
    q, v, tau, _ = states(m, 64, 23)
    be.aba_derivatives(m, q, v, tau)
    tm = be.last_timing
    assert not tm.simulated and tm.partition == partition
    assert tm.compute_s > 0 and tm.h2d_s > 0 and tm.d2h_s > 0 and np.isfinite(tm.total_s)


def test_bound_and_numba_launches_agree(bundled):
    """The pre-bound launch path (PTX through the driver, parameters bound once) computes what
    numba-cuda's dispatcher computes from the same kernel source."""
    m = bundled["hyq"]
    q, v, tau, fext = states(m, 8, 24)
    a = dynamics.get_backend("gpu", launch="bound").aba_derivatives(m, q, v, tau, fext)
    b = dynamics.get_backend("gpu", launch="numba").aba_derivatives(m, q, v, tau, fext)
    for x, y in zip(a, b):
        assert np.max(np.abs(x - y)) <= 1e-13 * max(1.0, np.max(np.abs(y)))
