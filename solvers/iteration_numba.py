"""The first iteration of a warm-started solve on the prepared iteration as one compiled call.

A warm MPC update of :class:`solvers.ilqr.ILQR` / :class:`solvers.ddp.DDP` on the prepared
iteration (:mod:`solvers.prepared_iteration`) is, in its usual course, the warm start checked and
taken into the iterate, the derivative stage there, its dynamics gaps, the Riccati backward pass at
the starting μ and the rollout of the full step with its cost: three compiled calls with Python
(and numpy) between them. :func:`first_iteration` makes them one call, each stage's compiled code
called by address (the fused derivative stage, :mod:`solvers.derivative_stage_numba`, which spreads
its batches over the worker threads as the separate calls do; the backward pass,
:mod:`solvers.riccati_numba`; the rollout that scores its candidate, :mod:`solvers.rollout_numba`),
so that the machine code and the results are those of the separate calls; only the copies (the
warm start, its controls clipped), the gaps ``x0 - xs_0``, ``f(xs_t, us_t) - xs_{t+1}`` and the box
bounds on the step ``lower - us``, ``upper - us`` (comparisons and subtractions) are computed here,
as the solver's numpy code computes them. The cycle counter (:func:`solvers.rollout_numba.cycles`)
marks the stage boundaries, so the caller splits the call's wall time into the solver's stage
timings.

The call stops early where the solver's general code takes over (it returns why): a non-finite
warm start (before writing anything), non-finite dynamics, gaps already closed (a feasible warm
start), or a backward pass that fails at the starting μ.
"""

from __future__ import annotations

import numpy as np
from numba import types

from dynamics.kernels.jit import jit
from dynamics.kernels.threaded_batch import call_at, call_none_at, pack_arguments, packed_call

from .rollout_numba import cycles

#: what :func:`first_iteration` returns first (then the backward pass's status and knot)
FULL = 0                #: every stage ran: the full step's candidate is in the rollout buffers
NON_FINITE = 1          #: the dynamics at the warm start are non-finite (stopped after the gaps)
FEASIBLE = 2            #: every gap is at most the tolerance (stopped after the gaps; they are zeroed)
BACKWARD_FAILED = 3     #: the backward pass failed at the starting μ (its status, and the knot where)
NON_FINITE_START = 4    #: the warm start has a non-finite entry (nothing ran, nothing was written)
ACCEPTED = 5            #: every stage ran and the full step was taken (copied into the iterate)

#: the backward pass kernel's return type, ``(status, knot)``
STATUS_TYPE = types.UniTuple(types.int64, 2)


#: ``call(address, pack)`` of a kernel that returns ``(status, knot)`` (the backward pass)
_call_status_at = packed_call("_call_status_at", STATUS_TYPE)


@jit
def pairwise_sum(a):
    """``numpy.add.reduce(a)`` of a 1-D float64 array, bitwise: numpy's pairwise summation (blocks
    of at most 128 entries, each summed in eight interleaved partial sums from the identity 0; a
    longer run split in two halves, each a multiple of 8 long, summed alike and added). The halves
    are walked with an explicit stack (numba's on-disk cache does not keep recursive functions)."""
    n = a.shape[0]
    if n <= 128:
        return _block_sum(a, 0, n)
    # frames: (start, length, halves done); a frame's left half's sum waits in ``left``
    lo = np.empty(64, np.int64)
    ln = np.empty(64, np.int64)
    done = np.empty(64, np.int64)
    left = np.empty(64)
    lo[0], ln[0], done[0] = 0, n, 0
    sp = 1
    value = 0.0
    while sp > 0:
        f = sp - 1
        m = ln[f]
        if m <= 128 or done[f] == 2:
            value = _block_sum(a, lo[f], m) if m <= 128 else left[f] + value
            sp -= 1
            if sp > 0 and done[sp - 1] == 1:
                left[sp - 1] = value
            continue
        n2 = m // 2
        n2 -= n2 % 8
        if done[f] == 0:
            done[f] = 1
            lo[sp], ln[sp], done[sp] = lo[f], n2, 0
        else:
            done[f] = 2
            lo[sp], ln[sp], done[sp] = lo[f] + n2, m - n2, 0
        sp += 1
    return value


@jit
def _block_sum(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]``, n <= 128 (one block)."""
    if n < 8:
        r = 0.0
        for i in range(n):
            r += a[lo + i]
        return r
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    r = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        r += a[lo + i]
        i += 1
    return r


@jit
def first_iteration(stage_address, stage_args, xs, xnext, gaps, us, lower, upper, lo, hi, backward_address, views,
                    box, outs, block, rollout_address, rollout_args, x0_buf, alpha_buf, params, clip, clk, rclk,
                    run_l, term_l, X, U, J, ok, K, costs, x0, xs_init, us_init):
    """The warm start (xs_init, us_init) into the iterate (xs, us), the controls clipped to
    ``[lower, upper]`` when ``clip`` — unless an entry is non-finite (then nothing is written) —,
    the backward pass's results (``block``, 1-D: the gains the box QP starts from among them)
    zeroed as at the start of a solve,
    the derivative stage at (xs, us) (the kernel at ``stage_address`` run as
    ``kernel(*stage_args)``), the gaps ``gaps[0] = x0 - xs[0]``, ``gaps[1:] = xnext - xs[1:]`` (a
    Euclidean state: (N+1, nx)), then, unless one is non-finite or all are within the tolerance,
    the backward pass (the kernel at ``backward_address`` on ``(*views, mu, box, lo, hi, *outs)``,
    with ``lo = lower - us``, ``hi = upper - us`` when ``box``) and the rollout of one step size from
    x0 with its cost (the kernel at ``rollout_address`` as ``kernel(*rollout_args, 0, 1)``, which
    reads x0 and the step size from ``x0_buf``, ``alpha_buf`` and writes the candidate into ``X[0]``,
    ``U[0]``, its cost into ``J[0]``, its finiteness into ``ok[0]`` and its cycle counts into
    ``rclk[0]``), then the warm start's step rule (:func:`solvers.line_search.warm_start_step`) on
    that candidate: the full step is taken — copied into (xs, us), as the solver's ``_accept_step``
    copies it (which then zeroes the gaps) — when it is finite and costs no more than the warm start, whose cost is
    the derivative stage's ``Σ run_l + Σ term_l`` (summed as numpy sums them); ``costs`` (3,) then
    gets the warm start's cost, the step's and whether every entry of the backward pass's gains
    ``K`` is finite (1.0) or not (0.0). params (3,): μ, the gap tolerance, the step size.
    ``clk`` (6,): the cycle counter before the derivative stage, after it, after the gaps, after the
    backward pass, between the rollout and its cost, and at the end. Returns ``(status, backward
    status, knot)``: the module's constants, then the backward pass's ``(status, knot)``
    (:func:`solvers.riccati_numba.backward_pass_kernel`; 0 and -1 where it did not fail)."""
    for t in range(xs.shape[0]):
        for i in range(xs.shape[1]):
            v = xs_init[t, i]
            if v - v != 0.0:
                return NON_FINITE_START, 0, -1
    for t in range(us.shape[0]):
        for j in range(us.shape[1]):
            v = us_init[t, j]
            if v - v != 0.0:
                return NON_FINITE_START, 0, -1
    for t in range(xs.shape[0]):
        for i in range(xs.shape[1]):
            xs[t, i] = xs_init[t, i]
    for t in range(us.shape[0]):
        for j in range(us.shape[1]):
            v = us_init[t, j]
            if clip:        # np.minimum(np.maximum(v, lower), upper) on finite v and non-NaN bounds
                v = v if v >= lower[j] else lower[j]
                v = v if v <= upper[j] else upper[j]
            us[t, j] = v
    block[:] = 0.0
    clk[0] = cycles()
    call_none_at(stage_address, pack_arguments(stage_args))
    clk[1] = cycles()
    nx = x0.shape[0]
    largest = 0.0
    finite = True
    for i in range(nx):
        g = x0[i] - xs[0, i]
        gaps[0, i] = g
        finite = finite and g - g == 0.0
        largest = max(largest, abs(g))
    for t in range(xnext.shape[0]):
        for i in range(nx):
            g = xnext[t, i] - xs[t + 1, i]
            gaps[t + 1, i] = g
            finite = finite and g - g == 0.0
            largest = max(largest, abs(g))
    clk[2] = cycles()
    clk[3] = clk[4] = clk[5] = clk[2]
    if not finite:
        return NON_FINITE, 0, -1
    if largest <= params[1]:
        gaps[:] = 0.0
        return FEASIBLE, 0, -1
    if box:
        for t in range(us.shape[0]):
            for j in range(us.shape[1]):
                lo[t, j] = lower[j] - us[t, j]
                hi[t, j] = upper[j] - us[t, j]
    status, knot = _call_status_at(backward_address, pack_arguments(views + (params[0], box, lo, hi) + outs))
    clk[3] = clk[4] = clk[5] = cycles()
    if status != 0:
        return BACKWARD_FAILED, status, knot
    for i in range(nx):
        x0_buf[i] = x0[i]
    alpha_buf[0] = params[2]
    call_at(rollout_address, pack_arguments(rollout_args), 0, 1)
    clk[5] = cycles()
    clk[4] = rclk[0, 1]
    cost = J[0]
    if ok[0] and cost - cost == 0.0:
        guess = pairwise_sum(run_l) + pairwise_sum(term_l)
        if guess - guess == 0.0 and cost <= guess:
            for t in range(xs.shape[0]):
                for i in range(xs.shape[1]):
                    xs[t, i] = X[0, t, i]
            for t in range(us.shape[0]):
                for j in range(us.shape[1]):
                    us[t, j] = U[0, t, j]
            costs[0] = guess
            costs[1] = cost
            costs[2] = 1.0
            for t in range(K.shape[0]):
                for j in range(K.shape[1]):
                    for i in range(K.shape[2]):
                        v = K[t, j, i]
                        if v - v != 0.0:
                            costs[2] = 0.0
            return ACCEPTED, 0, -1
    return FULL, 0, -1
