"""What a solve returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TIMING_KEYS = ("derivatives", "backward", "forward", "cost", "total")


@dataclass
class SolverResult:
    """Outcome of ``solver.solve``.

    xs (N+1, nx) states, us (N, nu) controls, K (N, nu, ndx) feedback gains on the tangent
    deviation ``x ⊖ xs[t]`` and k (N, nu) feed-forward steps of the last backward pass
    (``u = us[t] + K[t] (x ⊖ xs[t])`` is the locally optimal policy); cost (float);
    cost_history (list: initial cost, then the cost after every accepted step); iterations;
    converged and reason (str, always set; a failure says what happened); timings [s] with keys
    derivatives / backward / forward / cost / total; gradient_norm: ∞-norm of the projected gradient
    of J with respect to the controls at the returned trajectory (the stopping measure);
    gap: largest dynamics gap ‖f(x_t, u_t) ⊖ x_{t+1}‖∞ (0 for a feasible trajectory);
    regularization: final μ; step_sizes: accepted step size per iteration (0 = rejected);
    gauss_newton_fallbacks: backward passes where DDP's curvature made ``Q_uu`` indefinite and the
    Gauss–Newton pass was used instead; second_order: where the dynamics' second-order terms came
    from, per kind of knot (empty for Gauss–Newton solvers: iLQR, FDDP without second_order);
    finite: whether every entry of xs and us is finite, when the solver checked it before
    returning (None: not checked; a consumer such as the MPC plan then checks them itself);
    gains_finite: likewise for every entry of K (True: checked by the solver; None: not checked).
    """

    xs: np.ndarray
    us: np.ndarray
    K: np.ndarray
    k: np.ndarray
    cost: float
    cost_history: list
    iterations: int
    converged: bool
    reason: str
    timings: dict
    solver: str = ""
    gradient_norm: float = np.inf
    gap: float = 0.0
    regularization: float = 0.0
    step_sizes: list = field(default_factory=list)
    gauss_newton_fallbacks: int = 0
    second_order: tuple = ()
    finite: bool | None = None
    gains_finite: bool | None = None

    def shifted(self, n: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """``(xs, us)`` moved ``n`` knots earlier, the last state/control repeated to fill the end:
        the usual warm start for the next receding-horizon solve."""
        if int(n) != n or n < 0:
            raise ValueError(f"shift n must be a non-negative integer, got {n}")
        n = int(n)
        N = self.us.shape[0]
        m = min(n, N)
        xs = np.concatenate([self.xs[m:], np.repeat(self.xs[-1:], m, axis=0)])
        us = np.concatenate([self.us[m:], np.repeat(self.us[-1:], m, axis=0)])
        return xs, us

    def summary(self) -> str:
        t = self.timings
        return (f"{self.solver}: cost {self.cost:.6g} after {self.iterations} iterations, "
                f"{'converged' if self.converged else 'NOT converged'} ({self.reason}); "
                f"|grad| {self.gradient_norm:.2e}, gap {self.gap:.1e}; "
                f"time {t.get('total', 0) * 1e3:.1f} ms")


@dataclass
class ConstrainedResult(SolverResult):
    """Outcome of a constrained solve (:class:`solvers.CSQP`, :class:`solvers.ALDDP`): the fields of :class:`SolverResult`
    (``gradient_norm`` is the dual residual, ``gap`` the largest dynamics gap) and

    multipliers (N+1, m): the constraint multipliers ``y`` of the stacked rows of every knot
    (positive on an active upper bound, negative on an active lower bound; rows and padding as in
    :class:`solvers.problem_constraints.ProblemConstraints`); costates (N+1, ndx): the dynamics
    multipliers ``λ``; constraint_values, lower, upper (N+1, m); primal_residual: the largest gap
    or constraint violation; dual_residual: ∞-norm of the Lagrangian's gradient in the controls
    (the states' part is zero by the choice of λ); complementarity: the largest ``min(|y_i|,
    distance of g_i to the bound y_i's sign selects)``; constraint_violation: the largest
    violation; qp_iterations: ADMM iterations per SQP iteration (empty for ALDDP); rho: the final ADMM penalty
    (ALDDP: the augmented-Lagrangian penalty)."""

    multipliers: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    costates: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    constraint_values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    lower: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    upper: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    primal_residual: float = np.inf
    dual_residual: float = np.inf
    complementarity: float = np.inf
    constraint_violation: float = np.inf
    qp_iterations: list = field(default_factory=list)
    rho: float = 0.0

    def shifted_multipliers(self, n: int = 1) -> np.ndarray:
        """The multipliers moved ``n`` knots earlier (the last running knot's row repeated, the
        terminal row kept): the warm start of the next receding-horizon solve, with
        :meth:`shifted` for the trajectory."""
        if int(n) != n or n < 0:
            raise ValueError(f"shift n must be a non-negative integer, got {n}")
        return shift_knots(self.multipliers, int(n))


def shift_knots(a: np.ndarray, n: int) -> np.ndarray:
    """Per-knot rows a (N+1, ...) moved n >= 0 knots earlier: the last running knot's rows
    repeated, the terminal knot's kept."""
    N = a.shape[0] - 1
    m = min(n, N)
    run = np.concatenate([a[m:N], np.repeat(a[N - 1:N], m, axis=0)]) if N > 0 else a[:0]
    return np.concatenate([run, a[N:]])
