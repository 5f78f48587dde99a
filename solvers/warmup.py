"""Warm-up of a solver: compile (first run on a machine) or load from numba's on-disk cache every
kernel a solve runs, so that no timed solve pays for compilation.

Two ways, chosen by the problem's backend:

* a backend that compiles each kernel on its first call (``Backend.warmup_by_use``: the numba
  backend) is warmed up by *using* it: one throw-away solver iteration from the problem's initial
  state runs exactly the kernels, variants (serial on one state, parallel on the horizon's batch)
  and argument types that later solves run, and nothing else. A second iteration with the
  backend's parallel threshold at zero sends every batch to the parallel variant, because which
  variant a batch takes depends on its size (the number of trial step sizes, ...), which one
  iteration need not show. On a fresh machine (numba's cache cold) the backend compiles its
  largest kernels, the batched derivative calls, in a second process meanwhile
  (:meth:`~dynamics.backend.Backend.compile_ahead`): this process then compiles the solver's own
  kernels (rollout, backward pass, cost terms) on dummy data, waits for the child and loads its
  kernels from the cache, so two cores compile at once. A solver warmed up before (a task's
  :meth:`~tasks.Task.warmup_times`: the same problem re-phased to other knots) runs one iteration,
  which builds the new knot structure's data, cost layout and rollout tables, and the second
  iteration only when the first met a kernel signature not compiled or loaded before;
* any other backend runs its own :meth:`~dynamics.backend.Backend.warmup` (every kernel), then, with
  a compiled solver, one throw-away iteration compiles the solver's kernels.

Progress is reported through ``progress(label, done, total)``: for a ``warmup_by_use`` backend
once per kernel numba starts compiling (``total`` None: not known in advance; never called when
every kernel loads from the cache), else before each step of the backend's warm-up.
"""

from __future__ import annotations

import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from .ilqr import ILQR

#: ``progress(label, done, total)``: a kernel (or warm-up step) ``label`` starts; ``done`` counts
#: from 1 (kernels) or 0 (steps); ``total`` None when not known in advance
Progress = Callable[[str, int, "int | None"], None]


@dataclass
class WarmupResult:
    """What a warm-up did. seconds: wall time [s]; compiled: the kernels numba compiled, in order
    (empty when everything loaded from the cache, or for a backend that is not ``warmup_by_use``);
    compiled_ahead: the backend's batched calls, (function, batch size) pairs, that a second
    process compiled meanwhile (empty when none was started)."""

    seconds: float
    compiled: list[str] = field(default_factory=list)
    compiled_ahead: list[tuple[str, int]] = field(default_factory=list)


def warm_up(solver: "ILQR", progress: Progress | None = None,
            extra: Callable[[], None] | None = None) -> WarmupResult:
    """Warm up ``solver`` (an :class:`~solvers.ilqr.ILQR` or subclass) as the module docstring
    describes. extra: optional work run after the throw-away iterations, under the same compile
    reporting (a caller's own use of the backend, e.g. an MPC's state predictor). Leaves no state
    behind: the next ``solve`` starts from scratch and the backend's settings are restored."""
    t0 = time.perf_counter()
    p = solver.problem
    be = p.backend
    result = WarmupResult(0.0)
    if not getattr(be, "warmup_by_use", False):
        _warm_up_backend_first(solver, progress)
        if extra is not None:
            extra()
        result.seconds = time.perf_counter() - t0
        return result

    events = [0]

    def report(label: str) -> None:
        events[0] += 1
        if progress is not None:
            progress(label, events[0], None)

    def on_compile(name: str) -> None:
        result.compiled.append(name)
        report(name)

    # imports numba, which only a backend that is warmed by use (compiled with numba) needs
    from dynamics.kernel_cache import report_compiles

    saved = getattr(be, "parallel_threshold_us", None)
    if solver in _WARMED and extra is None:
        with report_compiles(on_compile):
            before = kernel_signatures()
            _one_iteration(solver)
            if saved is not None and kernel_signatures() != before:
                try:
                    be.parallel_threshold_us = 0.0
                    _one_iteration(solver)
                finally:
                    be.parallel_threshold_us = saved
        result.seconds = time.perf_counter() - t0
        return result
    try:
        with report_compiles(on_compile):
            calls = batched_derivative_calls(solver)
            # on a fresh machine a child process compiles the batched derivative kernels (the largest)
            # while this one compiles the solver's own
            job = be.compile_ahead(p.model, calls)
            if job is not None:
                result.compiled_ahead = list(job.calls)
                names = " and ".join(dict.fromkeys(f for f, _ in job.calls))
                report(f"{names} (in a second process, alongside)")
                try:
                    warm_kernels_on_dummy_data(solver, [c for c in calls if c not in job.calls])
                finally:
                    job.wait()
            _one_iteration(solver)
            if saved is not None:
                # whether a batch is worth the thread pool depends on its size, which one iteration
                # need not show: a second one sends every batch to the parallel variant
                be.parallel_threshold_us = 0.0
                _one_iteration(solver)
            if extra is not None:
                extra()
    finally:
        if saved is not None:
            be.parallel_threshold_us = saved
    _WARMED[solver] = True
    result.seconds = time.perf_counter() - t0
    return result


#: solvers whose full warm-up ran (both iterations): a later warm-up of one re-phases its problem only
_WARMED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_DISPATCHERS: list = [0, []]        # (len(sys.modules) when listed, the project's numba dispatchers)


def kernel_signatures() -> int:
    """How many signatures the project's numba kernels (module-level dispatchers of ``dynamics.*``
    and ``solvers.*``) have compiled or loaded from the cache so far: a count that grows when a
    call meets a kernel signature for the first time."""
    from numba.core.registry import CPUDispatcher
    if _DISPATCHERS[0] != len(sys.modules):         # modules imported since: list again
        found = []
        for name, mod in list(sys.modules.items()):
            if mod is not None and name.startswith(("dynamics.", "solvers.")):
                found += [v for v in list(vars(mod).values()) if isinstance(v, CPUDispatcher)]
        _DISPATCHERS[:] = [len(sys.modules), found]
    return sum(len(d.signatures) for d in _DISPATCHERS[1])


def _one_iteration(solver: "ILQR") -> None:
    """One throw-away solver iteration from the default guess, or, when that guess fails before its
    first iteration or raises on non-finite values (an open-loop rollout that diverges, e.g. a
    legged robot's torques held through a touchdown), from the initial state held at every knot with the default controls (as
    :meth:`mpc.MPC.start` retries). tol 0: an iteration even where the guess is already optimal (a
    robot standing still), which would otherwise end the solve before the QP's or backward pass's
    kernels ran."""
    from .ilqr import ILQR
    try:
        r = solver.solve(max_iter=1, tol=0.0)
        failed = r.iterations == 0 and not r.converged
        if not failed and type(solver).solve is ILQR.solve and solver._prepared is not None and r.finite:
            # a warm-started solve, as every MPC update makes: its first iteration's compiled call
            # (PreparedIteration.first_iteration; the solvers whose solve runs it)
            xs, us = r.shifted(1)
            solver.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0)
    except ValueError:      # non-finite values met inside the solve (a wild trial step)
        failed = True
    if failed:
        p = solver.problem
        x0 = np.asarray(p.x0, float)
        solver.solve(np.repeat(x0[None], p.horizon + 1, axis=0),
                     np.repeat(p.default_controls()[None], p.horizon, axis=0), max_iter=1, tol=0.0)


def _warm_up_backend_first(solver: "ILQR", progress: Progress | None) -> None:
    """A backend that is not warmed by use: its own warm-up, then one iteration for a compiled solver."""
    p = solver.problem
    compiled = bool(solver.compiled)
    total = [0]

    def backend_progress(label: str, done: int, n: int) -> None:
        total[0] = n + int(compiled)          # the solver's kernels are one more step
        progress(label, done, total[0])

    p.backend.warmup(p.model, progress=None if progress is None else backend_progress)
    if compiled:
        if progress is not None:
            progress("solver kernels", max(total[0] - 1, 0), max(total[0], 1))
        _one_iteration(solver)


def batched_derivative_calls(solver: "ILQR") -> list[tuple[str, int]]:
    """The backend's batched derivative calls one iteration of ``solver`` makes, as (function, batch
    size) pairs: first-order ABA derivatives of each group of free-dynamics Euler knots, and their
    second-order derivatives when the solver uses them analytically (DDP)."""
    calls = []
    for g in solver.problem.dynamics_groups:
        d = g.item
        if d.contacts is None and d.integrator == "euler":
            calls.append(("aba_derivatives", int(g.knots.size)))
            if solver.uses_second_order and d.second_order_source.startswith("analytical"):
                calls.append(("aba_second_derivatives", int(g.knots.size)))
    return calls


def warm_kernels_on_dummy_data(solver: "ILQR", calls: list[tuple[str, int]]) -> None:
    """Compile (or load) the solver's compiled rollout, backward pass and cost terms, and the
    backend's batched ``calls`` ((function, batch size) pairs), on the neutral configuration and
    zero derivatives, without running the derivative calls a second process may be compiling.
    Leaves no state behind."""
    p = solver.problem
    be, m = p.backend, p.model
    for f, B in calls:
        q = np.tile(m.neutral(), (B, 1))
        z = np.zeros((B, m.nv))
        if f == "aba_derivatives":
            be.aba_derivatives(m, q, z, z, return_acceleration=True)
        else:
            getattr(be, f)(m, q, z, z)
    us = np.zeros((p.horizon, p.nu))
    p.cost(np.tile(p.x0, (p.horizon + 1, 1)), us)
    solver.forward.warmup()
    if solver.backward.compiled:
        d = p.create_data(second_order=False)
        for a in d.arrays().values():
            a.fill(0.0)
        box = solver.box and p.has_bounds
        solver.backward.run(d.derivatives(), 1.0, us, p.u_lower if box else None, p.u_upper if box else None, None,
                            False)
        solver.backward.reset()
