"""Step-size selection for shooting solvers: backtracking over a decreasing list of step sizes
with an expected-improvement (Armijo-like) acceptance test, sequentially or as one batched
evaluation of several step sizes ("parallel line search").

The solver supplies ``rollout(alphas) -> Candidates`` (a batched nonlinear rollout of the
forward pass for every step size in ``alphas``) and ``accept(alpha, cost) -> bool``. Both modes
accept the *largest* step size that passes the test, so they take identical steps; the parallel
mode trades extra rollouts for fewer (batched) dynamics calls.
"""

from __future__ import annotations

import math
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


def warm_start_step(rollout: Callable[[np.ndarray], Candidates], alphas: np.ndarray,
                    guess_cost: float | None = None, first: Candidates | None = None) -> LineSearchResult:
    """First step from an infeasible warm start (xs, us given, gaps allowed): roll out from x0 with
    the feedback policy around the guess. The full step is taken when it costs no more than the
    guess itself (``guess_cost``: the cost of the given xs, us, which the derivatives at the guess
    already gave) — the usual case in MPC, one rollout — or, failing that, no more than α = 0 (pure
    tracking of the guess); otherwise every other step size is rolled out too (one batch) and the
    cheapest of all is kept. Without ``guess_cost`` (None or non-finite) α = 1 and α = 0 are rolled
    out together and compared. Every candidate is a rollout, so the iterate is feasible from then on.
    first: the full step's rollout when the caller made it already (``rollout(alphas[:1])``)."""
    if guess_cost is not None and math.isfinite(guess_cost):
        c = rollout(alphas[:1]) if first is None else first
        if c.ok[0] and c.cost[0] <= guess_cost:
            return LineSearchResult(True, float(alphas[0]), c.xs[0], c.us[0], float(c.cost[0]), 1)
        # α = 1 stays a candidate, copied: the next rollout may reuse the buffers it lies in
        c = Candidates(c.xs[:1].copy(), c.us[:1].copy(), c.cost[:1].copy(), c.ok[:1].copy())
        zero = rollout(np.zeros(1))
        c = Candidates(np.concatenate([c.xs, zero.xs]), np.concatenate([c.us, zero.us]),
                       np.concatenate([c.cost, zero.cost]), np.concatenate([c.ok, zero.ok]))
        return _full_or_cheapest(rollout, alphas, c)
    return _full_or_cheapest(rollout, alphas, rollout(np.array([alphas[0], 0.0])))


def _full_or_cheapest(rollout: Callable[[np.ndarray], Candidates], alphas: np.ndarray,
                      c: Candidates) -> LineSearchResult:
    """:func:`warm_start_step` once α = 1 and α = 0 are rolled out (``c``, in that order): the full
    step when it costs no more than α = 0, else the cheapest of them and every other step size (one
    more batch)."""
    if c.ok[0] and (not c.ok[1] or c.cost[0] <= c.cost[1]):
        return LineSearchResult(True, float(alphas[0]), c.xs[0], c.us[0], float(c.cost[0]), 2)
    first = np.array([alphas[0], 0.0])
    rest = rollout(alphas[1:]) if alphas.size > 1 else None
    every = first if rest is None else np.concatenate([first, alphas[1:]])
    ok = c.ok if rest is None else np.concatenate([c.ok, rest.ok])
    if not ok.any():
        return LineSearchResult(False, 0.0, None, None, np.inf, every.size)
    cost = c.cost if rest is None else np.concatenate([c.cost, rest.cost])
    s = int(np.argmin(np.where(ok, cost, np.inf)))
    src, j = (c, s) if s < 2 else (rest, s - 2)
    return LineSearchResult(True, float(every[s]), src.xs[j], src.us[j], float(cost[s]), every.size)
