"""Derivative-free sampling planners on a :class:`~solvers.ShootingProblem`: predictive sampling
(Howell et al. 2022), MPPI (Williams et al. 2017) and the cross-entropy method, on controls
parametrised by a few spline knots; all K rollouts of an iteration as one batched backend call
per knot; :class:`SampledWarmStart` runs iLQR/FDDP from the best sample. See docs/sampling.md."""

from .base import SamplingPlanner
from .cem import CEM
from .hybrid import SampledWarmStart
from .mppi import MPPI
from .predictive import PredictiveSampling
from .rollouts import rollout_batch, rollout_costs
from .spline import ControlSpline

__all__ = ["SamplingPlanner", "PredictiveSampling", "MPPI", "CEM", "ControlSpline", "rollout_batch", "rollout_costs",
           "SampledWarmStart"]
