"""A gradient solver warm-started from the best of K samples: one predictive-sampling iteration
around the warm start picks a trajectory (the warm start itself when no sample is cheaper), then
iLQR or FDDP iterates from it — sampling explores beyond the local minimum the gradient solver
would stay in, the gradient solver refines and supplies the feedback gains (the idea of MuJoCo
MPC's sampling-gradient planners; Howell et al. 2022)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..fddp import FDDP
from ..ilqr import ILQR
from ..problem import ShootingProblem
from ..result import SolverResult
from ..warmup import WarmupResult
from .predictive import PredictiveSampling

GRADIENT_SOLVERS = {"ilqr": ILQR, "fddp": FDDP}


class SampledWarmStart:
    """Predictive sampling (``samples``, ``noise``, ``knots``, ``seed``; one iteration per solve)
    then ``solver`` (``"ilqr"`` or ``"fddp"``) from the best sample; ``solver_options`` (box,
    line_search, refresh_gains, …) go to the gradient solver. The result is the gradient solver's,
    with the sampling stage's time added to its ``forward`` and ``cost`` timings."""

    name = "sampling+ilqr"
    derivative_free = False
    uses_second_order = False

    def __init__(self, problem: ShootingProblem, solver: str = "ilqr", samples: int = 64, noise: float = 0.02,
                 knots: int = 6, seed: int = 0, **solver_options):
        if solver not in GRADIENT_SOLVERS:
            raise ValueError(f"unknown gradient solver '{solver}'; choose one of {', '.join(GRADIENT_SOLVERS)}")
        self.problem = problem
        self.solver = GRADIENT_SOLVERS[solver](problem, **solver_options)
        self.sampler = PredictiveSampling(problem, samples=samples, noise=noise, knots=knots, seed=seed,
                                          box=self.solver.box)
        self.name = f"sampling+{solver}"

    def solve(self, xs_init=None, us_init=None, max_iter: int = 1, tol: float = 1e-6) -> SolverResult:
        """One sampling iteration from (xs_init, us_init), then ``max_iter`` gradient iterations from
        the best sample when it is cheaper than the warm start's own rollout (the sampler's nominal
        is the warm start fitted by its spline, which loses detail), else from the warm start."""
        p = self.problem
        sampled = self.sampler.solve(xs_init=xs_init, us_init=us_init, max_iter=1)
        if sampled.iterations:
            own = np.inf
            if us_init is not None:
                xs_own = p.rollout(p.clip_controls(np.asarray(us_init, float)) if self.solver.box else us_init)
                own = float(p.cost(xs_own, us_init)) if np.isfinite(xs_own).all() else np.inf
            if sampled.cost < own:
                xs_init, us_init = sampled.xs, sampled.us
        res = self.solver.solve(xs_init=xs_init, us_init=us_init, max_iter=max_iter, tol=tol)
        for key in ("forward", "cost", "total"):
            res.timings[key] = res.timings.get(key, 0.0) + sampled.timings[key]
        res.solver = self.name
        return res

    def warmup(self, progress: Callable[[str, int, "int | None"], None] | None = None,
               extra: Callable[[], None] | None = None) -> WarmupResult:
        """Both stages' warm-up (the sampler's restores its generator)."""
        first = self.sampler.warmup(progress=progress)
        second = self.solver.warmup(progress=progress, extra=extra)
        return WarmupResult(first.seconds + second.seconds, first.compiled + second.compiled,
                            second.compiled_ahead)
