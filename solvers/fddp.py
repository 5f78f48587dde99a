"""Feasibility-driven DDP (Mastalli et al. 2020, "Crocoddyl: An Efficient and Versatile Framework
for Multi-Contact Optimal Control", Sec. IV; Crocoddyl's ``SolverFDDP``).

A multiple-shooting variant of DDP: the trajectory may have *gaps*
``f̄_0 = x0 ⊖ xs_0``, ``f̄_{t+1} = f(xs_t, us_t) ⊖ xs_{t+1}`` (an infeasible initial guess, e.g. a
state interpolation). Differences to iLQR:

* backward pass: the value gradient is taken at the end of each interval,
  ``V_x ← V_x + V_xx f̄`` (eq. 11 of the paper);
* forward pass: the gaps are closed gradually, ``x̂_t = f(x̂_{t-1}, û_{t-1}) ⊕ (α - 1) f̄_t``;
  a full step (α = 1) closes every gap and the trajectory becomes feasible for good;
* expected improvement with the gap terms (eq. 15–16, Crocoddyl's ``expectedImprovement``):
  ``d1 = -Σ kᵀQ_u - Σ V_xᵀf̄ - Σ f̄ᵀV_xx(xs ⊖ x̂)``, ``d2 = -Σ kᵀQ_uu k + Σ f̄ᵀV_xx f̄ + 2 Σ f̄ᵀV_xx(xs ⊖ x̂)``,
  ``ΔJ_exp(α) = α (d1 + ½ α d2)``. A step is accepted if ``ΔJ ≥ armijo·ΔJ_exp`` when
  ``ΔJ_exp ≥ 0``, or — while gaps are being closed and an increase is predicted — if the increase
  is at most twice the predicted one.

``box=True`` uses the box-QP backward pass and clipped rollouts (Crocoddyl's ``SolverBoxFDDP``);
``second_order=True`` adds the DDP curvature terms of :mod:`solvers.ddp`.
"""

from __future__ import annotations

import numpy as np

from .ilqr import ILQR, initial_controls, initial_states
from .line_search import line_search
from .problem import ShootingProblem


class FDDP(ILQR):
    """Feasibility-driven DDP; accepts infeasible ``xs_init`` and closes the gaps."""

    name = "fddp"
    multiple_shooting = True

    def __init__(self, problem: ShootingProblem, box: bool = True, second_order: bool = False, **options):
        super().__init__(problem, box=box, **options)
        self.uses_second_order = bool(second_order)
        self.accept_increase = 2.0   # Crocoddyl's th_acceptnegstep
        self._Vf: np.ndarray | None = None       # V_xx f̄ (N+1, ndx, 1) of the acceptance test
        self._dx = np.empty((problem.horizon + 1, problem.ndx))    # its xs ⊖ x̂

    # ------------------------------------------------------------ initial guess and gaps
    def _initial_trajectory(self, xs_init, us_init):
        p = self.problem
        if xs_init is None:
            return super()._initial_trajectory(None, us_init)
        xs = initial_states(p, xs_init)          # copied by _take
        us = initial_controls(p, us_init, self.box, clip_default=False, out=self._us_buf)
        self.feasible = False
        return xs, us

    def _rollout_gaps(self):
        return None if self.feasible else self.gaps

    def _rollout_open_loop(self, us):
        was, self.feasible = self.feasible, True
        try:
            return super()._rollout_open_loop(us)
        finally:
            self.feasible = was

    # ------------------------------------------------------------ step acceptance
    def _expected_reduction(self, alpha: float, xs_try=None) -> float:
        d1 = -float(np.sum(self.Qu * self.k))
        d2 = -float(np.sum(self.k * self.Quuk))
        if not self.feasible:
            f = self.gaps
            d1 -= float(np.sum(self.Vx * f))
            # V_xx f̄ once (batched products: a three-operand einsum runs numpy's generic loop),
            # shared by both quadratic forms: V_xx is symmetric, so f̄ᵀV_xx dx = dxᵀ(V_xx f̄)
            buf = self._Vf
            if buf is None or buf.shape != f.shape + (1,):
                buf = self._Vf = np.empty(f.shape + (1,))
            Vf = np.matmul(self.Vxx, f[..., None], out=buf)[..., 0]
            d2 += float(np.sum(f * Vf))
            if xs_try is not None:
                dx = self.problem.state.difference(xs_try, self.xs, out=self._dx)     # xs ⊖ x̂
                dv = -float(np.sum(dx * Vf))
                d1 += dv
                d2 -= 2.0 * dv
        return alpha * (d1 + 0.5 * alpha * d2)

    def _accept(self, alpha: float, cost_try: float, xs_try) -> bool:
        if self.feasible:
            return super()._accept(alpha, cost_try, xs_try)
        expected = self._expected_reduction(alpha, xs_try)
        actual = self.cost - cost_try
        if expected >= 0:
            return actual >= self.armijo * expected
        # closing gaps may raise the cost: allow an increase of at most accept_increase × predicted
        return actual > self.accept_increase * expected

    def _no_progress_possible(self) -> bool:
        return self.feasible and super()._no_progress_possible()

    def _line_search(self):
        # FDDP closes gaps gradually: the ordinary step-size search also when infeasible
        return line_search(self._rollout, self._accept_candidate, self.alphas, self.line_search)

    def _accept_step(self, ls) -> None:
        self._take(ls.xs, ls.us)
        self.cost = ls.cost
        if ls.alpha == 1.0 or self.feasible:   # a full step closes every gap
            self.feasible = True
            self.gaps[:] = 0.0
        else:
            # the rollout set x̂_t = f(x̂_{t-1}, û_{t-1}) ⊕ (α - 1) f̄_t: the new iterate's gaps are
            # (1 - α) f̄ by construction (what the returned gap reports without evaluating f again)
            self.gaps *= 1.0 - ls.alpha
            self._gaps_current = True

    def _final_gap(self) -> float:
        if not hasattr(self, "xs"):
            return np.inf
        if self.feasible:       # a rollout (a full step closed the gaps): 0 by construction, as for iLQR
            return 0.0
        if self._gaps_current:  # the iterate's derivatives gave its gaps: no second evaluation of f
            return float(np.abs(self.gaps).max())
        p = self.problem
        with self._timed("forward"), np.errstate(all="ignore"):
            try:
                xn = p.next_states(self.xs[:-1], self.us)
                g = np.concatenate([p.state.difference(self.xs[:1], p.x0[None]), p.state.difference(self.xs[1:], xn)])
            except ValueError:
                return np.inf
        return float(np.abs(g).max())
