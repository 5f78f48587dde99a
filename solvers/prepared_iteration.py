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

When each of the derivative stage's calls would run on the calling thread anyway (one worker
thread, or batches too small to spread), the stage is one compiled call instead
(:mod:`solvers.derivative_stage_numba`: the backend's kernel and the cost kernel called by address,
:meth:`dynamics.Backend.prepare_aba_derivatives_call`,
:meth:`solvers.costs.compiled.CompiledCosts.derivatives_call`), DDP's second-order stage included:
with the backward pass and the rollout with its costs, a warm iteration is then three compiled calls.

A prepared iteration belongs to one solver and one state of its problem: the knot structure
(``problem.revision``), the compiled cost layout, the control bounds and the solver's workspace.
:meth:`PreparedIteration.current` tells whether it still applies (checked once per solve).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .problem_data import ProblemDerivatives

if TYPE_CHECKING:
    from .ilqr import ILQR


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
        #: the stage as one compiled call (:meth:`_fuse`): (when it applies, the call), built at first
        #: use; () where the backend hands out no kernel
        self._fused = None
        self.refresh_costs = cc.refresh
        self.derivs = ProblemDerivatives(run, term, d)
        self._cc, self._rollout = cc, rollout
        self._candidates: dict = {}         # (S, with gaps) -> (rollout run, rollout buffers)
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
            if fused and fused[0]():
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
        """``(applies(), run())``: the whole derivative stage (the first-order calls, the cost
        derivatives and, with ``second``, DDP's second-order stage) as one compiled call
        (:mod:`solvers.derivative_stage_numba`), which applies while each of its stages would run on
        the calling thread anyway; ``()`` where the backend hands out no kernel to call
        (:meth:`dynamics.Backend.prepare_aba_derivatives_call`). Compiled (or loaded) here, once."""
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
        run = fused_stage(self._inputs[1], aba, self._jacobians[1], self._zero, cost[:2], aba2, hessian,
                          second[3] if second else None)
        aba_serial, cost_serial = aba.serial, cost[2]
        if aba2 is None:
            def applies() -> bool:
                return aba_serial() and cost_serial()
        else:
            aba2_serial = aba2.serial

            def applies() -> bool:
                return aba_serial() and aba2_serial() and cost_serial()
        self._fused = (applies, run)
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
