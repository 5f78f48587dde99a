"""Predictive sampling (Howell, Gileadi, Tunyasuvunakool, Erez, Tassa, "Predictive Sampling:
Real-time Behaviour Synthesis with MuJoCo", 2022): Gaussian perturbations of the nominal spline,
the nominal itself among the samples, the cheapest rollout becomes the new nominal."""

from __future__ import annotations

import numpy as np

from .base import SamplingPlanner


class PredictiveSampling(SamplingPlanner):
    """Predictive sampling; options as :class:`~solvers.sampling.base.SamplingPlanner`. The
    nominal's cost never increases within a solve (it is sample 0)."""

    name = "sampling"

    def _update(self, theta: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, int | None]:
        best = int(np.argmin(J))
        return theta[best].copy(), best
