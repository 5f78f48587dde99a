"""The derivative stage of a prepared solver iteration as one compiled call.

:class:`solvers.prepared_iteration.PreparedIteration` runs, at every iteration, the Euler inputs
(:func:`solvers.euler_numba.euler_inputs`), the backend's batched ``aba_derivatives``, the Euler
Jacobians (:func:`solvers.euler_numba.euler_jacobians`), for DDP the backend's second-order tensors
and the acceleration Hessian (:func:`solvers.euler_numba.acceleration_hessian`), and the compiled
cost derivatives. :func:`derivative_stage` / :func:`derivative_stage_second` run them in that order
in one call: the backend's kernel and the cost kernel by address
(:class:`dynamics.backend.BatchKernelCall`,
:meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`, as the compiled rollout calls the
cost kernel), so their code exists once; the two small Euler kernels are compiled into the driver.
A stage that the backend (or the cost layout) would spread over several worker threads is spread
the same way from inside the call: the library's batch drivers
(:func:`dynamics.kernels.threaded_batch.run_slices`, :func:`~dynamics.kernels.threaded_batch.run_parts`)
called by address with the thread counts of ``plan``, which the caller sets before each call — the
drivers the separate calls run, compiled once for both. Same kernels on the same inputs and the same
slices as the separate calls: the results are identical.
"""

from __future__ import annotations

from functools import partial

from dynamics.kernels.jit import jit
from dynamics.kernels.threaded_batch import call_at, call_none_at, pack_arguments

from .euler_numba import acceleration_hessian, euler_inputs, euler_jacobians, folded_factor_C

#: the rows of a stage's ``plan`` (int64): each threaded stage's worker-thread count (1: the calling
#: thread) and the address of its batch driver for those arguments (0 where none was needed)
PLAN_ABA, PLAN_ABA_DRIVER, PLAN_COST, PLAN_COST_DRIVER, PLAN_SECOND, PLAN_SECOND_DRIVER = range(6)


@jit
def _batch(address, args, B, nt, driver):
    """The kernel at ``address`` on states ``[0, B)``: on the calling thread (nt 1), or on nt
    slices in parallel through ``run_slices`` compiled at ``driver``."""
    if nt > 1:
        call_none_at(driver, pack_arguments((address, B, nt, args)))
    else:
        call_at(address, pack_arguments(args), 0, B)


@jit
def derivative_stage(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args, plan):
    """The first-order derivative stage: ``euler_inputs(*inputs)``, the backend's kernel at
    ``aba_address`` on states ``[0, B)`` (``aba_args``: :class:`dynamics.backend.BatchKernelCall`),
    ``euler_jacobians(*jacobians)``, zero the cost derivatives' block ``zero`` (1-D), then the cost
    kernel at ``cost_address`` as parts ``c < nt`` (``cost_args``:
    :meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`). plan (6,) int64: the thread
    counts and driver addresses (module docstring, ``PLAN_*``)."""
    x, u, Bu, b_identity, damping, springs, stiffness, qspring, q, v, tau = inputs
    euler_inputs(x, u, Bu, b_identity, damping, springs, stiffness, qspring, q, v, tau)
    _batch(aba_address, aba_args, B, plan[0], plan[1])
    q, v, a, Aq, Av, Minv, Bu, b_identity, damping, stiffness, dt, xn, Fx, Fu = jacobians
    euler_jacobians(q, v, a, Aq, Av, Minv, Bu, b_identity, damping, stiffness, dt, xn, Fx, Fu)
    zero[:] = 0.0
    nt = plan[2]
    if nt > 1:
        call_none_at(plan[3], pack_arguments((cost_address, nt, cost_args)))
    else:
        call_at(cost_address, pack_arguments(cost_args), 0, 1)


@jit
def derivative_stage_second(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args, plan,
                            second_address, second_args, hessian):
    """:func:`derivative_stage`, then DDP's second-order dynamics: the backend's second-order kernel
    at ``second_address`` on states ``[0, B)`` and ``acceleration_hessian(*hessian)``."""
    derivative_stage(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args, plan)
    _batch(second_address, second_args, B, plan[4], plan[5])
    A2, Bu, b_identity, damping, stiffness, H = hessian
    acceleration_hessian(A2, Bu, b_identity, damping, stiffness, H)


@jit
def derivative_stage_folded(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args, plan,
                            second_address, second_args, hessian, fold):
    """:func:`derivative_stage_second` with the backend's bracketed terms, then the factor C with
    ``−M⁻¹`` folded in: ``folded_factor_C(*fold)``."""
    derivative_stage_second(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args, plan,
                            second_address, second_args, hessian)
    Minv, Jw, dt, C = fold
    folded_factor_C(Minv, Jw, dt, C)


def fused_stage(inputs: tuple, aba, jacobians: tuple, zero, cost: tuple, plan, second=None,
                hessian: tuple | None = None, fold: tuple | None = None) -> tuple:
    """``(run(), address, args)``: :func:`derivative_stage` (or, with ``second`` and ``hessian``,
    :func:`derivative_stage_second`; with ``fold``, ``(folded_factor_C, args)`` too,
    :func:`derivative_stage_folded`) with its arguments bound, through the driver's compiled entry
    point, and the same call for another compiled loop to make by address as ``kernel(*args)``
    (numba's calling convention; :mod:`solvers.iteration_numba`); compiled or loaded here, once.
    aba, second: :class:`dynamics.backend.BatchKernelCall`; cost: ``(address, args)`` of
    :meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`; plan: the (6,) int64 array the
    caller writes the thread counts into before each call (module docstring; the driver addresses
    are the caller's too, :func:`dynamics.kernels.threaded_batch.driver_address`)."""
    from dynamics.kernels.threaded_batch import entry_point, kernel_address
    args = (inputs, aba.address, aba.args, aba.batch, jacobians, zero, cost[0], cost[1], plan)
    if second is None:
        kernel = derivative_stage
    elif fold is None:
        kernel, args = derivative_stage_second, (*args, second.address, second.args, hessian)
    else:
        kernel, args = derivative_stage_folded, (*args, second.address, second.args, hessian, fold[1])
    return partial(entry_point(kernel, args), *args), kernel_address(kernel, args), args
