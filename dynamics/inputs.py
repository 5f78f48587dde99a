"""Validation and batching of array arguments: shape checks with clear messages, finite checks,
and flattening of leading batch dimensions to one axis (the backends work on ``(B, n)``)."""

from __future__ import annotations

import math

import numpy as np


class ShapeError(ValueError):
    """An array argument has the wrong trailing shape for the model."""


def as_array(name: str, x, tail: tuple[int, ...], func: str) -> np.ndarray:
    """``x`` as a float64 (or complex, for complex-step use) array whose trailing dims are ``tail``."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "fc":
        if arr.dtype.kind in "iub":
            arr = arr.astype(np.float64)
        else:
            raise TypeError(f"{func}: {name} must be a numeric array, got dtype {arr.dtype}")
    elif arr.dtype.kind == "f" and arr.dtype != np.float64:
        arr = arr.astype(np.float64)
    if arr.ndim < len(tail) or arr.shape[arr.ndim - len(tail):] != tail:
        want = "(..., " + ", ".join(str(t) for t in tail) + ")"
        raise ShapeError(f"{func}: {name} has shape {arr.shape}, expected {want} for this model; "
                         f"leading dimensions are batch dimensions")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{func}: {name} contains non-finite values (NaN or inf); "
                         f"check the state/inputs passed in")
    return arr


def broadcast_batch(func: str, arrays: dict[str, tuple[np.ndarray, int]]) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """Broadcast the batch dims of several arrays (each given with its number of trailing dims)
    and flatten them to one leading axis. Returns the batch shape and the ``(B, ...)`` arrays."""
    batch_shapes = [a.shape[: a.ndim - nt] for a, nt in arrays.values()]
    try:
        batch = np.broadcast_shapes(*batch_shapes)
    except ValueError:
        shapes = ", ".join(f"{k}{a.shape}" for k, (a, _) in arrays.items())
        raise ShapeError(f"{func}: batch dimensions do not broadcast: {shapes}") from None
    n = int(np.prod(batch)) if batch else 1
    out = []
    for a, nt in arrays.values():
        tail = a.shape[a.ndim - nt:]
        out.append(np.ascontiguousarray(np.broadcast_to(a, batch + tail).reshape((n,) + tail)))
    return batch, out


def unflatten(batch: tuple[int, ...], x: np.ndarray) -> np.ndarray:
    """Inverse of the flattening in :func:`broadcast_batch`."""
    return x.reshape(batch + x.shape[1:])


_F64 = np.dtype(np.float64)
_ONES: dict[int, np.ndarray] = {}  # ones vectors by length, for the finiteness sums


def fast_flat(arrays: dict[str, tuple[np.ndarray, int]]) -> tuple[tuple[int, ...], list[np.ndarray]] | None:
    """The common case of ``as_array`` + :func:`broadcast_batch` for vector arguments (one trailing
    dim each), without the broadcasting machinery: every array is a float64 ndarray ``(n,)`` or
    ``(B, n)`` with the expected ``n`` and the same batch shape, and every value is finite. Returns
    ``(batch, [(B, n) C-contiguous arrays])`` like :func:`broadcast_batch`, or ``None`` for anything
    else (the caller then takes the general path, which also words any error).

    Finiteness is checked by one dot product per array (see :func:`sum_is_finite`)."""
    batch = None
    out = []
    for x, n in arrays.values():
        if type(x) is not np.ndarray or x.dtype != _F64 or not 1 <= x.ndim <= 2 or x.shape[-1] != n:
            return None
        shape = x.shape
        if batch is None:
            batch = shape[:-1]
        elif shape[:-1] != batch:
            return None
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if not sum_is_finite(x):
            return None
        out.append(x if x.ndim == 2 else x.reshape(1, n))
    if batch is None:
        return None
    return batch, out


def _ones(n: int) -> np.ndarray:
    """``2**-64`` repeated n times: weights for finiteness sums that cannot overflow."""
    ones = _ONES.get(n)
    if ones is None:
        if len(_ONES) > 64:
            _ONES.clear()
        ones = _ONES.setdefault(n, np.full(n, 2.0 ** -64))
    return ones


_DOT_MAX = 4096  # larger arrays: np.isfinite (OpenBLAS runs long dot products multi-threaded, and
# its spinning threads then slow down the numba backend's parallel kernels many times over)


def sum_is_finite(x: np.ndarray) -> bool:
    """Whether every entry of the float64 array ``x`` is finite, by one dot product (a few times
    cheaper than ``np.all(np.isfinite(x))`` on small arrays). The entries are weighted by 2**-64, so
    the sum of finite values cannot overflow (no false alarm, no floating-point warning) while a
    NaN or inf still propagates."""
    flat = x.reshape(-1)
    n = flat.shape[0]
    if n > _DOT_MAX:     # in chunks of _DOT_MAX (single-threaded BLAS sizes, and no boolean temporary)
        ones = _ones(_DOT_MAX)
        for i in range(0, n, _DOT_MAX):
            part = flat[i:i + _DOT_MAX]
            if not math.isfinite(part.dot(ones[:part.shape[0]])):
                return False
        return True
    ones = _ONES.get(n)
    return math.isfinite(flat.dot(_ones(n) if ones is None else ones))
