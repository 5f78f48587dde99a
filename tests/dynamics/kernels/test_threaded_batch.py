"""The batch driver that calls a serial kernel by address on the worker threads
(dynamics/kernels/threaded_batch.py), on small kernels whose results numpy computes directly: both
conventions (``kernel(*args, start, stop)`` and ``kernel(*args, c, nt)``), flat and nested argument
tuples with booleans (stored as bytes in numba's data representation), every thread count, one
address per kernel and argument kinds. The backends' kernels through it are checked against the
numpy reference in tests/dynamics/test_backend_consistency.py (1 vs 2 threads)."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from dynamics.kernels import threaded_batch as tb  # noqa: E402


@numba.njit
def _scaled_rows(x, scale, negate, out, start, stop):
    for b in range(start, stop):
        for i in range(x.shape[1]):
            out[b, i] = (-scale if negate else scale) * x[b, i] + b


@numba.njit
def _part_sums(pair, flags, weights, out, c, nt):
    """Part c of nt of the rows of pair[0] + pair[1] (nested tuple of arrays), each row summed with
    weights; flags = (square, offset, shift): a tuple of a boolean, an array and a float."""
    a, b = pair
    square, offset, shift = flags
    B = a.shape[0]
    for r in range(c * B // nt, (c + 1) * B // nt):
        s = 0.0
        for i in range(a.shape[1]):
            v = a[r, i] + b[r, i] + offset[i]
            s += weights[i] * (v * v if square else v)
        out[r] = s + shift + c * 0.0


def test_slices_match_numpy_for_every_thread_count():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 3))
    expected = -2.5 * x + np.arange(7)[:, None]
    for nt in (1, 2, 3, 7):
        numba.set_num_threads(min(nt, numba.config.NUMBA_NUM_THREADS))
        out = np.full_like(x, np.nan)
        tb.run_threaded(_scaled_rows, 7, nt, x, 2.5, True, out)
        np.testing.assert_allclose(out, expected, rtol=1e-15, atol=0)


def test_parts_with_nested_tuples_and_booleans_match_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(9, 4)), rng.normal(size=(9, 4))
    offset, w = rng.normal(size=4), rng.normal(size=4)
    for square in (False, True):
        v = a + b + offset
        expected = ((v * v) if square else v) @ w + 0.75
        for nt in (1, 2, 4):
            numba.set_num_threads(min(nt, numba.config.NUMBA_NUM_THREADS))
            out = np.full(9, np.nan)
            tb.run_threaded_parts(_part_sums, nt, (a, b), (square, offset, 0.75), w, out)
            np.testing.assert_allclose(out, expected, rtol=1e-14, atol=1e-14)


def test_one_address_per_kernel_and_argument_kinds():
    x = np.ones((4, 2))
    out = np.empty_like(x)
    tb.run_threaded(_scaled_rows, 4, 2, x, 1.0, False, out)
    tb.run_threaded(_scaled_rows, 4, 2, x[::-1].copy(), 3.0, True, out)   # other values, same kinds
    keys = [k for k in tb._addresses if k[0] is _scaled_rows]
    assert len(keys) == 1
    assert _scaled_rows.signatures == [_scaled_rows.signatures[0]]
    # another dimension is another machine code: another address
    tb.run_threaded(_scaled_rows, 4, 2, x, 1.0, False, out)
    x3 = np.ones((4, 2))
    tb.run_threaded(_scaled_rows, 4, 2, x3.astype(np.float32), 1.0, False, out)
    assert len([k for k in tb._addresses if k[0] is _scaled_rows]) == 2


def test_strided_arrays_get_their_own_compiled_code():
    """A kernel first run on contiguous arrays assumes unit strides; a strided view of the same
    dtype and dimensions must not reuse that code (numpy computes the expected rows)."""
    base = np.arange(24.0).reshape(8, 3)
    out = np.empty((4, 3))
    tb.run_threaded(_scaled_rows, 4, 2, base[:4].copy(), 2.0, False, out)
    np.testing.assert_array_equal(out, 2.0 * base[:4] + np.arange(4)[:, None])
    strided = base[::2]                      # rows 0, 2, 4, 6: not C-contiguous
    tb.run_threaded(_scaled_rows, 4, 2, strided, 2.0, False, out)
    np.testing.assert_array_equal(out, 2.0 * strided + np.arange(4)[:, None])


def test_read_only_inputs_reuse_the_writeable_inputs_code():
    """The address is looked up by numba's type fingerprint first, which tells a read-only array
    from a writeable one; the same machine code serves both, so the second kind must not compile
    the kernel again (a compile in the control loop) and must give the same rows."""
    x = np.arange(12.0).reshape(6, 2)
    out = np.empty_like(x)
    tb.run_threaded(_scaled_rows, 6, 2, x, 1.5, False, out)
    n_signatures = len(_scaled_rows.signatures)
    ro = x.copy()
    ro.flags.writeable = False
    out2 = np.full_like(x, np.nan)
    tb.run_threaded(_scaled_rows, 6, 2, ro, 1.5, False, out2)
    np.testing.assert_array_equal(out2, out)
    assert len(_scaled_rows.signatures) == n_signatures
    keys = [(_scaled_rows, tb._fingerprint(a)) for a in ((x, 1.5, False, out), (ro, 1.5, False, out2))]
    assert keys[0] != keys[1] and tb._by_fingerprint[keys[0]] == tb._by_fingerprint[keys[1]]
