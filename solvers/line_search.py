"""Step-size selection for shooting solvers: backtracking over a decreasing list of step sizes
with an expected-improvement (Armijo-like) acceptance test, sequentially or as one batched
evaluation of several step sizes ("parallel line search").

The solver supplies ``rollout(alphas) -> Candidates`` (a batched nonlinear rollout of the
forward pass for every step size in ``alphas``) and ``accept(alpha, cost) -> bool``. Both modes
accept the *largest* step size that passes the test, so they take identical steps; the parallel
mode trades extra rollouts for fewer (batched) dynamics calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

LINE_SEARCHES = ("backtracking", "parallel")


def default_alphas(n: int = 10) -> np.ndarray:
    """Step sizes ``1, 1/2, …, 2^-(n-1)`` (Crocoddyl's default schedule)."""
    return 0.5 ** np.arange(n)


@dataclass
class Candidates:
    """Rollouts for S step sizes: xs (S, N+1, nx), us (S, N, nu), cost (S,), ok (S,) (finite)."""

    xs: np.ndarray
    us: np.ndarray
    cost: np.ndarray
    ok: np.ndarray


@dataclass
class LineSearchResult:
    accepted: bool
    alpha: float
    xs: np.ndarray | None
    us: np.ndarray | None
    cost: float
    evaluated: int          # number of step sizes rolled out


def line_search(rollout: Callable[[np.ndarray], Candidates], accept: Callable[[float, float], bool],
                alphas: np.ndarray, mode: str = "backtracking") -> LineSearchResult:
    """Return the first (largest) step size in ``alphas`` whose rollout is finite and accepted."""
    if mode not in LINE_SEARCHES:
        raise ValueError(f"unknown line search '{mode}'; use one of {', '.join(LINE_SEARCHES)}")
    alphas = np.asarray(alphas, float)
    if mode == "parallel":
        c = rollout(alphas)
        for s, a in enumerate(alphas):
            if c.ok[s] and accept(float(a), float(c.cost[s])):
                return LineSearchResult(True, float(a), c.xs[s], c.us[s], float(c.cost[s]), alphas.size)
        return LineSearchResult(False, float(alphas[-1]), None, None, np.inf, alphas.size)
    for s, a in enumerate(alphas):
        c = rollout(alphas[s:s + 1])
        if c.ok[0] and accept(float(a), float(c.cost[0])):
            return LineSearchResult(True, float(a), c.xs[0], c.us[0], float(c.cost[0]), s + 1)
    return LineSearchResult(False, float(alphas[-1]), None, None, np.inf, alphas.size)
