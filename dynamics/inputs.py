"""Validation and batching of array arguments: shape checks with clear messages, finite checks,
and flattening of leading batch dimensions to one axis (the backends work on ``(B, n)``)."""

from __future__ import annotations

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
