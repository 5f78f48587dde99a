"""Levenberg–Marquardt regularisation ``Q_uu + μ I`` with the adaptive schedule of Tassa, Erez and
Todorov 2012 ("Synthesis and stabilization of complex behaviors through online trajectory
optimization", Sec. II-F): μ grows quadratically-fast on repeated failures and shrinks on success,

    increase:  Δ ← max(Δ₀, Δ·Δ₀),   μ ← max(μ_min, μ·Δ)
    decrease:  Δ ← min(Δ/Δ₀, 1/Δ₀),  μ ← μ·Δ if μ·Δ > μ_min else μ_min

and a blow-up (μ > μ_max) ends the solve with a diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Regularization:
    mu: float = 1e-9
    mu_min: float = 1e-9
    mu_max: float = 1e10
    delta0: float = 2.0
    delta: float = 1.0

    def __post_init__(self):
        if not (0 < self.mu_min <= self.mu <= self.mu_max):
            raise ValueError(f"need 0 < mu_min <= mu <= mu_max, got {self.mu_min}, {self.mu}, {self.mu_max}")
        if self.delta0 <= 1:
            raise ValueError(f"delta0 must be > 1, got {self.delta0}")

    def increase(self) -> bool:
        """Raise μ; returns False when μ exceeded μ_max (the caller stops)."""
        self.delta = max(self.delta0, self.delta * self.delta0)
        self.mu = max(self.mu_min, self.mu * self.delta)
        return self.mu <= self.mu_max

    def decrease(self) -> None:
        self.delta = min(self.delta / self.delta0, 1.0 / self.delta0)
        self.mu = self.mu * self.delta if self.mu * self.delta > self.mu_min else self.mu_min
