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

#: the backward pass kernel's return type, ``(status, knot)``
STATUS_TYPE = types.UniTuple(types.int64, 2)


#: ``call(address, pack)`` of a kernel that returns ``(status, knot)`` (the backward pass)
_call_status_at = packed_call("_call_status_at", STATUS_TYPE)


@jit
def first_iteration(stage_address, stage_args, xs, xnext, gaps, us, lower, upper, lo, hi, backward_address, views,
                    box, outs, block, rollout_address, rollout_args, x0_buf, alpha_buf, params, clip, clk, x0,
                    xs_init, us_init):
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
    reads x0 and the step size from ``x0_buf``, ``alpha_buf``). params (3,): μ, the gap tolerance,
    the step size. ``clk`` (5,): the cycle counter before the derivative stage, after it, after
    the gaps, after the backward pass and at the end. Returns ``(status, backward status, knot)``:
    the module's constants, then the backward pass's ``(status, knot)``
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
    clk[3] = clk[4] = clk[2]
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
    clk[3] = clk[4] = cycles()
    if status != 0:
        return BACKWARD_FAILED, status, knot
    for i in range(nx):
        x0_buf[i] = x0[i]
    alpha_buf[0] = params[2]
    call_at(rollout_address, pack_arguments(rollout_args), 0, 1)
    clk[4] = cycles()
    return FULL, 0, -1
