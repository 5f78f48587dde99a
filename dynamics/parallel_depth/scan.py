"""Inclusive scans (all-prefix-sums) of batched operands under an associative product.

Yang, Wu & Pan 2017 §III-A / Yang, Wu & Pan 2016 §II-B (after Blelloch 1990): a linear recursion ``x_i = b_i x_{i-1} + c_i``
is the scan of the operands ``a_i = [[b_i, c_i], [0, 1]]`` under matrix multiplication, so the
n-step recursion can be evaluated in O(log n) parallel steps. Here an *element* is a tuple of
arrays whose axis 1 is the scan axis (axis 0 is the batch), and ``combine(outer, inner)`` returns
the product ``outer ∘ inner`` of two elements (``outer`` is applied after ``inner``), elementwise
over any leading axes. Each step of the step loops below is one batched ``combine`` over all the
positions that are active in that step — the "processors" of the PRAM model are array lanes.

* :func:`hillis_steele`: ``ceil(log2 n)`` steps, ``O(n log n)`` operand products (step-efficient).
* :func:`blelloch`: up-sweep + down-sweep, ``2 ceil(log2 n)`` steps, ``< 2n`` products
  (work-efficient; the inclusive Brent–Kung form, valid for non-commutative products).
* :func:`pointer_jumping`: Hillis–Steele on a tree (each node combines with its current
  ancestor pointer, then doubles it): root-to-node products in ``ceil(log2 depth)`` steps.
* :func:`serial`: the plain left-to-right recursion (n steps), for reference and benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

Element = tuple
Combine = Callable[[Element, Element], Element]
METHODS = ("hillis-steele", "blelloch", "serial")


def _take(el: Element, idx: Any) -> Element:
    return tuple(x[:, idx] for x in el)


def _put(el: Element, idx: Any, val: Element) -> None:
    for x, v in zip(el, val):
        x[:, idx] = v


def _copy(el: Element) -> Element:
    return tuple(x.copy() for x in el)


def hillis_steele(el: Element, combine: Combine) -> Element:
    """Inclusive scan in ``ceil(log2 n)`` steps: step ``d = 1, 2, 4, …`` sets ``x_i = x_i ∘ x_{i-d}``
    for every ``i >= d`` at once (Hillis & Steele 1986)."""
    el = _copy(el)
    n = el[0].shape[1]
    d = 1
    while d < n:
        new = combine(_take(el, slice(d, n)), _take(el, slice(0, n - d)))
        _put(el, slice(d, n), new)
        d *= 2
    return el


def blelloch(el: Element, combine: Combine) -> Element:
    """Work-efficient inclusive scan (Blelloch 1990; Brent–Kung): an up-sweep building the
    products of aligned blocks of 2, 4, 8, … operands, then a down-sweep completing the prefixes.
    Fewer than ``2n`` products in ``2 ceil(log2 n)`` steps."""
    el = _copy(el)
    n = el[0].shape[1]
    ds = []
    d = 1
    while d < n:
        tgt = slice(2 * d - 1, n, 2 * d)
        cnt = len(range(2 * d - 1, n, 2 * d))
        if cnt:
            src = slice(d - 1, d - 1 + 2 * d * (cnt - 1) + 1, 2 * d)
            _put(el, tgt, combine(_take(el, tgt), _take(el, src)))
        ds.append(d)
        d *= 2
    for d in reversed(ds):
        cnt = len(range(3 * d - 1, n, 2 * d))
        if cnt:
            tgt = slice(3 * d - 1, n, 2 * d)
            src = slice(2 * d - 1, 2 * d - 1 + 2 * d * (cnt - 1) + 1, 2 * d)
            _put(el, tgt, combine(_take(el, tgt), _take(el, src)))
    return el


def serial(el: Element, combine: Combine) -> Element:
    """The sequential recursion ``x_i = x_i ∘ x_{i-1}`` (n - 1 dependent steps)."""
    el = _copy(el)
    n = el[0].shape[1]
    for i in range(1, n):
        _put(el, slice(i, i + 1), combine(_take(el, slice(i, i + 1)), _take(el, slice(i - 1, i))))
    return el


@lru_cache(maxsize=64)
def _jump_schedule(parent: tuple[int, ...]) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    anc = np.asarray(parent, dtype=np.int64)
    steps = []
    while np.any(anc >= 0):
        act = np.flatnonzero(anc >= 0)
        steps.append((act, anc[act].copy()))
        nxt = anc.copy()
        nxt[act] = anc[anc[act]]
        anc = nxt
    return tuple(steps)


def pointer_jumping(el: Element, combine: Combine, parent: np.ndarray) -> Element:
    """Root-to-node products on a tree: ``x_i = x_i ∘ x_parent(i) ∘ … ∘ x_root``.

    parent: (n,) parent index of each node (-1 for a root), any order. Each step combines every
    node that still has an ancestor pointer with the element there and then replaces the pointer
    by the ancestor's pointer (Wyllie's pointer jumping): ``ceil(log2 depth)`` steps. On a chain
    this is exactly :func:`hillis_steele`."""
    el = _copy(el)
    for act, anc in _jump_schedule(tuple(int(p) for p in parent)):
        _put(el, act, combine(_take(el, act), _take(el, anc)))
    return el


def inclusive_scan(el: Element, combine: Combine, method: str = "hillis-steele") -> Element:
    """Inclusive scan of ``el`` along axis 1 by ``method`` (one of :data:`METHODS`)."""
    if method == "hillis-steele":
        return hillis_steele(el, combine)
    if method == "blelloch":
        return blelloch(el, combine)
    if method == "serial":
        return serial(el, combine)
    raise ValueError(f"unknown scan method '{method}'; use one of {', '.join(METHODS)}")


def affine_combine(outer: Element, inner: Element) -> Element:
    """Product of affine maps ``x -> T x + t`` given as ``(T, t)`` (..., k, k), (..., k):
    ``(T_o T_i, T_o t_i + t_o)`` — the homogeneous ``[[T, t], [0, 1]]`` operands of Yang, Wu & Pan 2016 eq. (5)."""
    To, to = outer
    Ti, ti = inner
    return To @ Ti, (To @ ti[..., None])[..., 0] + to


def add_combine(outer: Element, inner: Element) -> Element:
    """The additive semigroup (plain prefix sums)."""
    return tuple(a + b for a, b in zip(outer, inner))


def matmul_combine(outer: Element, inner: Element) -> Element:
    """Matrix product of dense operands ``(A,)`` (..., k, k): ``(A_o A_i,)``."""
    return (outer[0] @ inner[0],)
