"""Model-predictive path integral control (Williams, Drews, Goldfain, Rehg, Theodorou,
"Information Theoretic MPC for Model-Based Reinforcement Learning", 2017): the new nominal is the
average of the samples weighted by ``exp(−(J_k − J_min)/λ)`` (the information-theoretic optimal
update for Gaussian control noise)."""

from __future__ import annotations

import math

import numpy as np

from .base import SamplingPlanner


class MPPI(SamplingPlanner):
    """MPPI on the spline knots. temperature: λ relative to the samples' cost spread,
    ``λ = temperature · (J_max − J_min)`` over the finite costs, which makes the weights
    independent of the cost's units. The control-cost term of Williams et al. (``γ uᵀ Σ⁻¹ ε``) is
    not added: the problem's own control cost already penalises effort. Other options as
    :class:`~solvers.sampling.base.SamplingPlanner`."""

    name = "mppi"

    def __init__(self, problem, *, temperature: float = 0.1, **options):
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.number)) \
                or not (0 < temperature < math.inf):
            raise ValueError(f"MPPI: temperature must be a positive finite number, got {temperature!r}")
        super().__init__(problem, **options)
        self.temperature = float(temperature)

    def _update(self, theta: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, int | None]:
        finite = np.isfinite(J)
        Jf = J[finite]
        spread = float(Jf.max() - Jf.min())
        if spread <= 0.0:
            return theta[int(np.argmin(J))].copy(), int(np.argmin(J))
        w = np.zeros(J.shape)
        w[finite] = np.exp(-(Jf - Jf.min()) / (self.temperature * spread))
        w /= w.sum()
        return np.tensordot(w, theta, axes=1), None
