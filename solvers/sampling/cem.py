"""The cross-entropy method (Rubinstein 1999, "The Cross-Entropy Method for Combinatorial and
Continuous Optimization"; as an MPC planner, Botev, Kroese, Rubinstein, L'Ecuyer 2013, "The
Cross-Entropy Method for Optimization"): sample a Gaussian over the spline knots, refit its
mean and per-knot standard deviation to the cheapest samples (the elites)."""

from __future__ import annotations

import numpy as np

from .base import SamplingPlanner


class CEM(SamplingPlanner):
    """CEM on the spline knots. elites: how many of the cheapest samples refit the distribution
    (2 ≤ elites ≤ samples; default a tenth of the samples, at least 2). min_noise: floor of the
    refitted standard deviation, relative to the initial one (keeps exploring). The distribution
    starts at the warm start with the initial ``noise`` at every solve. Other options as
    :class:`~solvers.sampling.base.SamplingPlanner`."""

    name = "cem"

    def __init__(self, problem, *, elites: int | None = None, min_noise: float = 0.1, **options):
        super().__init__(problem, **options)
        n = max(2, self.samples // 10) if elites is None else elites
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= self.samples:
            raise ValueError(f"CEM: elites must be an integer in [2, samples={self.samples}], got {elites!r}")
        if not (isinstance(min_noise, (int, float)) and 0 <= min_noise <= 1):
            raise ValueError(f"CEM: min_noise must be a number in [0, 1], got {min_noise!r}")
        self.elites = int(n)
        self.min_noise = float(min_noise)
        self._std = np.empty((self.spline.knots, problem.nu))

    def _begin(self, nominal: np.ndarray) -> None:
        self._std[:] = self.sigma

    def _propose(self, nominal: np.ndarray, out: np.ndarray) -> None:
        out[0] = nominal
        out[1:] = nominal + self.rng.standard_normal(out[1:].shape) * self._std

    def _update(self, theta: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, int | None]:
        elite = np.argsort(J, kind="stable")[:self.elites]
        elite = elite[np.isfinite(J[elite])]
        if elite.size < 2:
            best = int(np.argmin(J))
            return theta[best].copy(), best
        self._std[:] = np.maximum(theta[elite].std(axis=0), self.min_noise * self.sigma)
        return theta[elite].mean(axis=0), None
