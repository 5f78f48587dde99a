"""A solver iteration's compiled calls with their arguments bound once: the fast path of the warm
MPC iteration in the common case.

The common case: a compiled solver (:attr:`ILQR.compiled`) on a problem with one dynamics group of
semi-implicit Euler free dynamics that the compiled Euler assembly covers (hinge and slide joints,
a backend that prefers compiled solver kernels: :mod:`solvers.euler_numba`), every cost term
compiled (:attr:`solvers.costs.compiled.CompiledCosts.covers_all`) and the compiled rollout
(:class:`solvers.rollout_numba.CompiledRollout`). Then an iteration is a fixed sequence of kernel
calls on the solver's own buffers —

* derivatives: the Euler inputs, the backend's prepared ``aba_derivatives``
  (:meth:`dynamics.Backend.prepare_aba_derivatives`), the Euler Jacobians, the cost derivatives;
* the Riccati backward pass (:meth:`solvers.backward_pass.BackwardPass.prepared`);
* per batch of line-search candidates: the rollout and the candidates' cost values
  (:meth:`solvers.rollout_numba.CompiledRollout.prepared`,
  :meth:`solvers.costs.compiled.CompiledCosts.prepared`)

— whose arguments (buffers, packed model, layouts) are looked up and checked here once, instead of
at every call through the general path (problem → data → groups → integrated model → backend, the
cost layout's signature, the rollout's argument checks). The math is the general path's: the same
kernels on the same inputs, so the results are identical (the candidates' costs to the last bits
where the general path splits one candidate's knots over threads). Anything else (several dynamics
groups, contacts, RK4, Lie-group joints, cost terms in Python) keeps the general path
(:meth:`PreparedIteration.build` returns None there). DDP's derivative stage adds, after the
first-order calls, the backend's prepared second-order tensors
(:meth:`dynamics.Backend.prepare_aba_second_derivatives`) and the compiled Hessian assembly
(:func:`solvers.euler_numba.acceleration_hessian`), what the Euler model's general second-order
evaluation runs; with numerical second derivatives it runs the data's general evaluation
(:meth:`solvers.problem_data.ProblemData.calc_dynamics`) instead.

The derivative stage is one compiled call (:mod:`solvers.derivative_stage_numba`: the backend's
kernel and the cost kernel called by address, :meth:`dynamics.Backend.prepare_aba_derivatives_call`,
:meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`), DDP's second-order stage included,
each batch spread over the worker threads its separate call would use (the library's batch drivers,
called by address from inside): with the backward pass and the rollout with its costs, a warm
iteration is then three compiled calls.
The first iteration of a warm-started solve (every MPC update) is one: the warm start taken into
the iterate, that derivative stage, the gaps, the backward pass at the starting μ and the full
step's rollout with its cost (:meth:`PreparedIteration.first_iteration`,
:mod:`solvers.iteration_numba`: each stage's kernel called by address). The call also applies the
warm start's step rule to that candidate (the full step when it is finite and costs no more than the
warm start) and, when it holds, copies the step into the iterate; otherwise the solver's line search
goes on from the candidate as before.

A prepared iteration belongs to one solver and one state of its problem: the knot structure
(``problem.revision``), the compiled cost layout, the control bounds and the solver's workspace.
:meth:`PreparedIteration.current` tells whether it still applies (checked once per solve).
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from .problem_data import ProblemDerivatives

if TYPE_CHECKING:
    from .ilqr import ILQR


#: :func:`solvers.iteration_numba.first_iteration`'s status codes, as :meth:`PreparedIteration.first_iteration`
#: names them
_OUTCOMES = ("full", "non-finite", "feasible", "backward failed", "non-finite start", "accepted")
_NON_FINITE_START, _ACCEPTED = _OUTCOMES.index("non-finite start"), _OUTCOMES.index("accepted")


class PreparedIteration:
    """The bound calls of :class:`~solvers.ilqr.ILQR` ``solver``'s iteration (module docstring);
    made by :meth:`build`."""

    def __init__(self, solver: ILQR, cc, euler, rollout):
        p = solver.problem
        data = solver.data
        self.solver = solver
        self.key = self._key(solver, cc)
        #: the dynamics derivatives are the three prepared calls (first order); DDP adds its prepared
        #: second-order stage (:meth:`_second_order`) or, where that does not apply, the data's general evaluation
        self.first_order = not solver.uses_second_order
        N = p.horizon
        g, d = data.groups[0]
        kern, B, b_identity, damping, springs, stiffness, qspring = euler
        s = d.states
        D = s.acc.partials
        xs, us = solver._xs_buf, solver._us_buf
        self.xs, self.us = xs, us
        self._dyn_data = d
        self._calc_dynamics = (data.calc_dynamics, (xs[:N], us, True))
        self._euler_item = g.item
        self._euclidean = p.state.euclidean
        self._second = None                 # DDP's prepared second-order stage (second_order()), once built
        self._inputs = (kern.euler_inputs, (xs[:N], us, B, b_identity, damping, springs, stiffness, qspring, s.q, s.v,
                                            s.tau))
        self._aba = s.acc.run
        self._jacobians = (kern.euler_jacobians, (s.q, s.v, s.acc.a, D[0], D[1], D[2], B, b_identity, damping,
                                                  stiffness, float(g.item.dt), d.xnext, d.Fx, d.Fu))
        run, term = data.running, data.terminal
        self._zero = data.cost_block            # every cost derivative array: zeroed in one call
        self._cost_outs = (run.l, run.lx, run.lu, run.lxx, run.luu, term.l, term.lx, term.lxx)
        self._cost_derivatives = cc.prepared_derivatives(xs, us, self._cost_outs)
        #: the stage as one compiled call (:meth:`_fuse`): (set its thread counts, the call, its
        #: address and arguments), built at first use; () where the backend hands out no kernel
        self._fused = None
        self.refresh_costs = cc.refresh
        self.derivs = ProblemDerivatives(run, term, d)
        self._cc, self._rollout = cc, rollout
        self._candidates: dict = {}         # (S, with gaps) -> (rollout run, rollout buffers)
        #: the warm start's first iteration as one compiled call (:meth:`first_iteration`), built at
        #: first use; () where it does not apply
        self._first = None
        self._warm_checked: tuple = (None, None)   # the last warm start arrays first_iteration checked
        self._x0_shape = xs.shape[1:]
        self._passes: dict = {}             # (with gaps, curvature) -> prepared backward pass or None

    @staticmethod
    def _key(solver: ILQR, cc) -> tuple:
        p = solver.problem
        return (p.revision, cc, solver._lower, solver._upper, solver._box, solver.data)

    # ------------------------------------------------------------ construction
    @classmethod
    def build(cls, solver: ILQR, cc) -> PreparedIteration | None:
        """The prepared iteration of ``solver`` at its problem's current state, with ``cc`` its
        problem's compiled costs (``problem.costs.compiled()``); None outside the common case."""
        p = solver.problem
        if not solver.compiled or cc is None or not cc.covers_all or cc.sources:
            return None                     # contact-force entries read each call's contact solves
        groups = p.dynamics_groups
        if len(groups) != 1 or not groups[0].contiguous:
            return None
        euler = getattr(groups[0].item, "_compiled_euler", None)
        euler = None if euler is None else euler()
        if euler is None:
            return None
        rollout = solver.forward.compiled_rollout()
        from .rollout_numba import CompiledRollout
        if type(rollout) is not CompiledRollout:
            return None
        data = solver.data
        data.follow_structure()
        d = data.groups[0][1]
        if getattr(d, "states", None) is None or d.states.acc.contact is not None:
            return None
        return cls(solver, cc, euler, rollout)

    def current(self, solver: ILQR, cc) -> bool:
        """Whether this prepared iteration still applies to ``solver`` (same problem structure,
        compiled cost layout, bounds and workspace) given its problem's compiled costs ``cc``."""
        k = self.key
        p = solver.problem
        return (k[0] == p.revision and k[1] is cc and k[2] is solver._lower and k[3] is solver._upper
                and k[4] == solver._box and k[5] is solver.data)

    # ------------------------------------------------------------ the calls
    def begin(self) -> None:
        """At the start of a solve: re-pack the compiled cost terms whose references or weights were
        replaced (a task's references move between solves, not during one)."""
        self.refresh_costs()

    def derivatives(self, timings: dict) -> ProblemDerivatives:
        """Dynamics and cost derivatives at the solver's iterate (its own buffers) into its data;
        the wall time is added to ``timings["derivatives"]``."""
        t0 = time.perf_counter()
        second = None if self.first_order else (self._second if self._second is not None else self._second_order())
        if self.first_order or second:
            fused = self._fused if self._fused is not None else self._fuse(second)
            if fused:
                fused[0]()
                fused[1]()
                d = self._dyn_data
                if second:
                    d.C, d.T = second[2]
                else:
                    d.C = d.T = None
                timings["derivatives"] += time.perf_counter() - t0
                return self.derivs
            f, args = self._inputs
            f(*args)
            self._aba()
            f, args = self._jacobians
            f(*args)
            d = self._dyn_data
            if second:
                aba2, (f, args), factors, fold = second
                aba2()
                f(*args)
                if fold is not None:
                    fold[0](*fold[1])
                d.C, d.T = factors
            else:
                d.C = d.T = None
        else:
            f, args = self._calc_dynamics
            f(*args)
        self._zero.fill(0.0)
        self._cost_derivatives()
        timings["derivatives"] += time.perf_counter() - t0
        return self.derivs

    def _fuse(self, second) -> tuple:
        """``(prepare(), run(), address, args)``: the whole derivative stage (the first-order calls, the
        cost derivatives and, with ``second``, DDP's second-order stage) as one compiled call
        (:mod:`solvers.derivative_stage_numba`), each stage on the worker threads its separate call
        would use (``prepare()`` reads them, before each ``run()``), and the same call by address
        (``kernel(*args)``, :meth:`first_iteration`); ``()`` where the backend hands out no kernel to
        call (:meth:`dynamics.Backend.prepare_aba_derivatives_call`). Compiled (or loaded) here, once."""
        item, d = self._euler_item, self._dyn_data
        s = d.states
        acc = item.acc
        aba = acc.backend.prepare_aba_derivatives_call(acc.model, s.q, s.v, s.tau, s.acc.partials, s.acc.a)
        aba2 = hessian = None
        if second:
            aba2 = item.backend.prepare_aba_second_derivatives_call(item.model, s.q, s.v, s.tau, d.A2,
                                                                    bracket=second[3] is not None)
            hessian = second[1][1]
        if aba is None or (second and aba2 is None):
            self._fused = ()
            return ()
        from .derivative_stage_numba import fused_stage
        cost = self._cc.derivatives_call(self.xs, self.us, self._cost_outs)
        #: the thread counts and batch-driver addresses the compiled stage reads
        #: (:mod:`solvers.derivative_stage_numba`), written by ``prepare()`` before each call
        plan = np.zeros(6, np.int64)
        run, address, args = fused_stage(self._inputs[1], aba, self._jacobians[1], self._zero, cost[:2], plan, aba2,
                                          hessian, second[3] if second else None)
        from dynamics.kernels.threaded_batch import driver_address, run_parts, run_slices
        from dynamics.worker_threads import epoch, use_threads
        stages = [(aba.threads, 0, lambda nt: driver_address(run_slices, (aba.address, aba.batch, nt), aba.args)),
                  (cost[2], 2, lambda nt: driver_address(run_parts, (cost[0], nt), cost[1]))]
        if aba2 is not None:
            stages.append((aba2.threads, 4, lambda nt: driver_address(run_slices, (aba2.address, aba2.batch, nt),
                                                                        aba2.args)))

        derived = [None, 1]     # the thread-count epoch the plan was derived at, and its largest count

        def prepare() -> None:
            """Each stage's thread count into the plan (its driver compiled or loaded at its first
            threaded call) and numba's count for this thread: what the separate calls would use now.
            The counts are derived again only when they may have changed (worker_threads.epoch)."""
            e = epoch()
            if e is None or e != derived[0]:
                top = 1
                for threads, row, driver in stages:
                    nt = threads()
                    plan[row] = nt
                    if nt > 1:
                        top = max(top, nt)
                        if plan[row + 1] == 0:
                            plan[row + 1] = driver(nt)
                derived[0], derived[1] = epoch(), top
            if derived[1] > 1:
                use_threads(derived[1])
        self._fused = (prepare, run, address, args)
        return self._fused

    def _second_order(self) -> tuple:
        """DDP's second-order dynamics stage with its arguments bound, what the Euler model's
        general evaluation (:meth:`solvers.integrators.base.IntegratedModel.calc_diff` with
        ``second_order``) runs after the first-order calls: the backend's prepared FDSVA-SO
        (:meth:`dynamics.Backend.prepare_aba_second_derivatives`) into the data's tensors ``A2``, the
        compiled Hessian assembly into ``T``, and ``C`` (constant for a hinge/slide robot: written
        here once, as the general evaluation writes it; with ``−M⁻¹`` folded in
        (:meth:`solvers.integrators.euler.EulerModel.fold_call`) a compiled call after the Hessian's,
        the backend's call then giving the bracketed terms). ``()`` (falsy: the general evaluation runs)
        where that evaluation takes another route: numerical second derivatives (no ``A2``), a
        Lie-group joint, or buffers not allocated yet."""
        d, item = self._dyn_data, self._euler_item
        if d.factors is None:
            return ()                       # decided once the solve has allocated them
        kernels = item._compiled_euler()
        C, T = d.factors
        nv = item.model.nv
        if (kernels is None or not self._euclidean or getattr(d, "A2", None) is None
                or not item.acc.analytical_second_order or T.shape[1] != nv or C.shape[1] != nv):
            self._second = ()
            return ()
        s = d.states
        kern, B, b_identity, damping, _, stiffness, _ = kernels
        fold = item.fold_call(d)
        aba2 = item.backend.prepare_aba_second_derivatives(item.model, s.q, s.v, s.tau, d.A2, bracket=fold is not None)
        if fold is None:
            item.write_factor_C(d)
        self._second = (aba2, (kern.acceleration_hessian, (d.A2, B, b_identity, damping, stiffness, T[:, :nv])),
                        d.factors, fold)
        return self._second

    def backward_pass(self, gaps: np.ndarray | None, curvature: bool):
        """The prepared compiled backward pass ``run(mu, us, lower, upper)`` for these gaps (the
        solver's buffer, or None) and curvature, or None (the caller runs the general one)."""
        key = (gaps is None, curvature)
        if key not in self._passes:
            s = self.solver
            self._passes[key] = s.backward.prepared(self.derivs, gaps, s._box, curvature)
        return self._passes[key]

    def candidates(self, S: int, gaps: np.ndarray | None):
        """``(run(x0, alphas) -> (costs (S,), the rollout's share of the time), buffers)``: the
        rollout of S candidates around the solver's iterate and gains, with these gaps (the solver's
        buffer, or None), and their total costs, in one compiled call."""
        key = (S, gaps is None)
        hit = self._candidates.get(key)
        if hit is None:
            s = self.solver
            out = s.data.rollout(S)
            run = self._rollout.prepared(self.xs, self.us, s.k, s.K, s.problem.u_lower, s.problem.u_upper, s._box,
                                         gaps, out, self._cc)
            hit = self._candidates[key] = (run, out)
        return hit

    # ------------------------------------------------------------ a warm start's first iteration
    def first_iteration(self, timings: dict, xs_init: np.ndarray, us_init: np.ndarray) -> tuple[str, object] | None:
        """The first iteration of a solve warm-started from (xs_init, us_init) up to its first
        candidate, as one compiled call (:func:`solvers.iteration_numba.first_iteration`): the warm
        start into the solver's iterate (what its ``_initial_trajectory`` and ``_take`` do with
        finite arrays: the controls clipped to the bounds when ``solver.box``), the backward pass's
        results zeroed (``BackwardPass.reset``, as a solve starts), the derivative stage there, the
        gaps into ``solver.gaps``, the backward pass at the solver's starting μ with those gaps and
        the full step's rollout with its cost — the calls :meth:`derivatives`, the solver's gap
        computation, :meth:`backward_pass` and :meth:`candidates` make, same kernels on the same
        buffers. The call's wall time goes into
        ``timings`` split by the stages' cycle counts. Returns ``(outcome, candidate)``:
        ``"accepted"`` (every stage ran and the warm start's step rule took the full step, now the
        solver's iterate) with ``[the warm start's cost, the step's cost, 1.0 if every entry of K is
        finite else 0.0]``; ``"full"`` (every stage ran, the full step not taken) with the full
        step's ``(X, U, J (1,), ok)`` (the rollout buffers, J a fresh array); ``"backward failed"``
        (at the starting μ) with the pass's message
        (:meth:`solvers.backward_pass.BackwardPass.run`'s); ``"non-finite"`` (the dynamics at the
        warm start) or ``"feasible"`` (every gap within the solver's tolerance: zeroed) with None;
        after all but the first the solver's general steps go on; ``"non-finite start"`` with None:
        nothing ran, nothing was written (the solver's checks then say what is wrong). None where
        the call does not apply (the solver then runs the general steps): xs_init / us_init not
        C-contiguous float64 arrays of the iterate's shapes, a solver that changes the iteration's
        steps (FDDP), a non-Euclidean state, or a backend without a derivative kernel to call."""
        first = self._first
        if first is None:
            first = self._first = self._first_call()
        if not first:
            return None
        s = self.solver
        x0 = s.problem.x0
        # (the compiled call's argument types; the warm start's type, dtype and layout are checked
        # once per pair of arrays: an MPC controller passes its own two buffers at every update)
        if xs_init is not self._warm_checked[0] or us_init is not self._warm_checked[1]:
            if not (type(xs_init) is np.ndarray and type(us_init) is np.ndarray
                    and xs_init.dtype == np.float64 and us_init.dtype == np.float64
                    and xs_init.flags.c_contiguous and us_init.flags.c_contiguous):
                return None
            self._warm_checked = (xs_init, us_init)
        if xs_init.shape != self.xs.shape or us_init.shape != self.us.shape:
            return None
        if not (type(x0) is np.ndarray and x0.dtype == np.float64 and x0.shape == self._x0_shape
                and x0.flags.c_contiguous):
            return None
        fused = self._fused
        if not fused:
            return None
        fused[0]()          # (the stage's thread counts, as derivatives() sets them)
        call, params, clk, jc, costs, out, second = first
        params[0] = s.reg.mu
        params[1] = s.gap_tol
        params[2] = s.alphas[0]
        t0 = time.perf_counter()
        status, failure, knot = call(x0, xs_init, us_init)
        wall = time.perf_counter() - t0
        outcome = _OUTCOMES[status]
        if status == _NON_FINITE_START:
            return outcome, None
        d = self._dyn_data
        if second:
            d.C, d.T = second[2]
        else:
            d.C = d.T = None
        c0, c1, c2, c3, b, c5 = clk.tolist()
        if c5 > c0:             # (the gaps, between c1 and c2, are outside the stages, as in the solver)
            scale = wall / (c5 - c0)
            timings["derivatives"] += (c1 - c0) * scale
            timings["backward"] += (c3 - c2) * scale
            if c5 > c3:
                timings["forward"] += (b - c3) * scale
                timings["cost"] += (c5 - b) * scale
        else:                   # no cycle counter on this processor: the call as the derivative stage
            timings["derivatives"] += wall
        if status == _ACCEPTED:
            return outcome, costs.tolist()
        if outcome == "full":
            return outcome, (out.X, out.U, jc[0].copy(), out.ok)
        if outcome == "backward failed":
            return outcome, s.backward.failure_message(failure, knot)
        return outcome, None

    def _first_call(self) -> tuple:
        """The bound call of :meth:`first_iteration` and its buffers, or () where it does not apply."""
        from .ilqr import ILQR
        s = self.solver
        cls = type(s)
        hooks = ("_line_search", "_after_derivatives", "_rollout_gaps", "_initial_trajectory", "_take", "_accept_step",
                 "_simulate", "_backward_pass", "_backward_pass_with_regularization", "_derivatives")
        if (not self._euclidean or any(getattr(cls, h) is not getattr(ILQR, h) for h in hooks)
                or not s.__dict__.keys().isdisjoint(hooks)):       # (a step replaced on the class or the solver)
            return ()
        second = None if self.first_order else (self._second if self._second is not None else self._second_order())
        if not (self.first_order or second):
            return ()
        fused = self._fused if self._fused is not None else self._fuse(second)
        if second:
            self._dyn_data.C, self._dyn_data.T = second[2]    # (the pass binds them: the stage's outputs)
        run_pass = self.backward_pass(s.gaps, s.uses_second_order)
        rollout = self.candidates(1, None)
        address_call = getattr(rollout[0], "address_call", None)
        if not fused or run_pass is None or address_call is None:
            return ()
        from dynamics.kernels.threaded_batch import entry_point

        from .iteration_numba import (ACCEPTED, BACKWARD_FAILED, FEASIBLE, FULL, NON_FINITE, NON_FINITE_START,
                                      STATUS_TYPE, first_iteration)
        from .riccati_numba import backward_pass_kernel
        # (_OUTCOMES' order)
        assert (FULL, NON_FINITE, FEASIBLE, BACKWARD_FAILED, NON_FINITE_START, ACCEPTED) == (0, 1, 2, 3, 4, 5)
        stage = fused[2:]
        b_address, views, lo, hi, outs, box = run_pass.address_call()
        if any(c.signature.return_type != STATUS_TYPE for c in backward_pass_kernel.overloads.values()):
            return ()           # (the compiled call reads the pass's result as two int64)
        r_address, r_args, x0_buf, alpha_buf, jc, rclk = address_call()
        p = s.problem
        out = rollout[1]
        params = np.zeros(3)            # μ, gap tolerance, step size: read at each call
        clk = np.zeros(6, np.int64)
        costs = np.zeros(3)             # the warm start's cost, the full step's, K finite: when it is taken
        # (the backward pass's one block of results, which BackwardPass.reset zeroes)
        args = (*stage, self.xs, self._dyn_data.xnext, s.gaps, self.us, p.u_lower, p.u_upper, lo, hi, b_address,
                views, box, outs, s.backward._block, r_address, r_args, x0_buf, alpha_buf, params, s.box, clk, rclk,
                self.derivs.running.l, self.derivs.terminal.l, out.X, out.U, jc[0], out.ok, s.backward.K, costs)
        kernel_args = (*args, np.asarray(p.x0, float), self.xs, self.us)
        run = entry_point(first_iteration, kernel_args)
        return (partial(run, *args), params, clk, jc, costs, out, second)
