"""Per-thread scratch space: one allocation per batch slice, carved into C-contiguous views.

A state's work arrays (placements, per-link vectors, per-dof columns, …) are views into one flat
float64 buffer allocated once per call of a ``*_range`` kernel, so a single-state call pays for one
allocation instead of one per work array.
"""

from __future__ import annotations

from .jit import jit


@jit
def view1(buf, o, n0):
    """``buf[o:o+n0]`` and the next free offset."""
    return buf[o:o + n0], o + n0


@jit
def view2(buf, o, n0, n1):
    """``buf[o:...]`` as a (n0, n1) array and the next free offset."""
    n = n0 * n1
    return buf[o:o + n].reshape((n0, n1)), o + n


@jit
def view3(buf, o, n0, n1, n2):
    """``buf[o:...]`` as a (n0, n1, n2) array and the next free offset."""
    n = n0 * n1 * n2
    return buf[o:o + n].reshape((n0, n1, n2)), o + n
