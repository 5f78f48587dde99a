"""The derivative stage of a prepared solver iteration as one compiled call (one thread).

:class:`solvers.prepared_iteration.PreparedIteration` runs, at every iteration, the Euler inputs
(:func:`solvers.euler_numba.euler_inputs`), the backend's batched ``aba_derivatives``, the Euler
Jacobians (:func:`solvers.euler_numba.euler_jacobians`), for DDP the backend's second-order tensors
and the acceleration Hessian (:func:`solvers.euler_numba.acceleration_hessian`), and the compiled
cost derivatives. When every one of them runs on the calling thread (one worker thread, or batches
too small to be spread), :func:`derivative_stage` / :func:`derivative_stage_second` run them in
that order in one call: the backend's kernel and the cost kernel by address
(:class:`dynamics.backend.BatchKernelCall`,
:meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`, as the compiled rollout calls the
cost kernel), so their code exists once; the two small Euler kernels are compiled into the driver.
Same kernels on the same inputs as the separate calls: the results are identical.
"""

from __future__ import annotations

from functools import partial

from dynamics.kernels.jit import jit
from dynamics.kernels.threaded_batch import call_at, pack_arguments

from .euler_numba import acceleration_hessian, euler_inputs, euler_jacobians, folded_factor_C


@jit
def derivative_stage(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args):
    """The first-order derivative stage: ``euler_inputs(*inputs)``, the backend's kernel at
    ``aba_address`` on states ``[0, B)`` (``aba_args``: :class:`dynamics.backend.BatchKernelCall`),
    ``euler_jacobians(*jacobians)``, zero the cost derivatives' block ``zero`` (1-D), then the cost
    kernel at ``cost_address`` as part 0 of 1 (``cost_args``:
    :meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`)."""
    x, u, Bu, b_identity, damping, springs, stiffness, qspring, q, v, tau = inputs
    euler_inputs(x, u, Bu, b_identity, damping, springs, stiffness, qspring, q, v, tau)
    call_at(aba_address, pack_arguments(aba_args), 0, B)
    q, v, a, Aq, Av, Minv, Bu, b_identity, damping, stiffness, dt, xn, Fx, Fu = jacobians
    euler_jacobians(q, v, a, Aq, Av, Minv, Bu, b_identity, damping, stiffness, dt, xn, Fx, Fu)
    zero[:] = 0.0
    call_at(cost_address, pack_arguments(cost_args), 0, 1)


@jit
def derivative_stage_second(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args,
                            second_address, second_args, hessian):
    """:func:`derivative_stage`, then DDP's second-order dynamics: the backend's second-order kernel
    at ``second_address`` on states ``[0, B)`` and ``acceleration_hessian(*hessian)``."""
    derivative_stage(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args)
    call_at(second_address, pack_arguments(second_args), 0, B)
    A2, Bu, b_identity, damping, stiffness, H = hessian
    acceleration_hessian(A2, Bu, b_identity, damping, stiffness, H)


@jit
def derivative_stage_folded(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args,
                            second_address, second_args, hessian, fold):
    """:func:`derivative_stage_second` with the backend's bracketed terms, then the factor C with
    ``−M⁻¹`` folded in: ``folded_factor_C(*fold)``."""
    derivative_stage_second(inputs, aba_address, aba_args, B, jacobians, zero, cost_address, cost_args,
                            second_address, second_args, hessian)
    Minv, Jw, dt, C = fold
    folded_factor_C(Minv, Jw, dt, C)


def fused_stage(inputs: tuple, aba, jacobians: tuple, zero, cost: tuple, second=None, hessian: tuple | None = None,
                fold: tuple | None = None):
    """``run()``: :func:`derivative_stage` (or, with ``second`` and ``hessian``,
    :func:`derivative_stage_second`; with ``fold``, ``(folded_factor_C, args)`` too,
    :func:`derivative_stage_folded`) with its arguments bound, through the driver's compiled entry
    point (compiled or loaded here, once). aba, second: :class:`dynamics.backend.BatchKernelCall`;
    cost: ``(address, args)`` of :meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`. The
    caller runs it only when each stage would run on the calling thread anyway (``aba.serial()``,
    the cost's own thread count)."""
    from dynamics.kernels.threaded_batch import entry_point
    args = (inputs, aba.address, aba.args, aba.batch, jacobians, zero, cost[0], cost[1])
    if second is None:
        kernel = derivative_stage
    elif fold is None:
        kernel, args = derivative_stage_second, (*args, second.address, second.args, hessian)
    else:
        kernel, args = derivative_stage_folded, (*args, second.address, second.args, hessian, fold[1])
    return partial(entry_point(kernel, args), *args)
