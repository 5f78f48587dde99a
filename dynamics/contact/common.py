"""Argument checking and flattening shared by the contact functions."""

from __future__ import annotations

import numpy as np

from ..inputs import as_array, broadcast_batch, fast_flat
from ..model import RobotModel
from .contact_set import ContactSet


def flat_args(func: str, model, contacts, **arrays):
    """Check the model, the contact set and the ``(array, "nq"|"nv")`` arguments; returns
    ``(batch, [flat (B, n) arrays])``."""
    if not isinstance(model, RobotModel):
        raise TypeError(f"{func}: expected a RobotModel (from dynamics.load_model) as model, got "
                        f"{type(model).__name__}")
    if not isinstance(contacts, ContactSet):
        raise TypeError(f"{func}: contacts must be a dynamics.ContactSet(model, frames=..., kind=...), got "
                        f"{type(contacts).__name__}")
    contacts.check(model, func)
    fast = fast_flat({k: (x, getattr(model, n)) for k, (x, n) in arrays.items()})
    if fast is not None:  # plain finite float64 (n,) / (B, n) arrays: no broadcasting machinery
        return fast
    checked = {k: (as_array(k, x, (getattr(model, n),), func), 1) for k, (x, n) in arrays.items()}
    return broadcast_batch(func, checked)


def mat_t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)
