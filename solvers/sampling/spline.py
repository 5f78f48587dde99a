"""Controls over a horizon parametrised by a few knots: ``U = W Θ`` with Θ (..., P, nu) the knot
values and W (N, P) a fixed interpolation matrix (zero-order hold or piecewise linear), as the
sampling planners of MuJoCo MPC parametrise their nominal plan (Howell et al. 2022)."""

from __future__ import annotations

import numpy as np

INTERPOLATIONS = ("zero", "linear")


class ControlSpline:
    """P knots spread evenly over N control intervals (knot j at interval ``j (N-1)/(P-1)``).

    interpolation: ``"zero"`` (u_t is the value of the last knot at or before t) or ``"linear"``
    (piecewise linear between knots)."""

    def __init__(self, horizon: int, knots: int, interpolation: str = "linear"):
        if isinstance(knots, bool) or not isinstance(knots, (int, np.integer)) or not 1 <= knots <= horizon:
            raise ValueError(f"spline knots must be an integer in [1, horizon={horizon}], got {knots!r}")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"unknown interpolation '{interpolation}'; choose one of {', '.join(INTERPOLATIONS)}")
        self.horizon, self.knots, self.interpolation = int(horizon), int(knots), interpolation
        N, P = self.horizon, self.knots
        t = np.arange(N, dtype=float)
        at = np.linspace(0.0, N - 1.0, P) if P > 1 else np.zeros(1)
        W = np.zeros((N, P))
        if P == 1:
            W[:, 0] = 1.0
        elif interpolation == "zero":
            W[t.astype(int), np.searchsorted(at, t, side="right") - 1] = 1.0
        else:
            j = np.minimum(np.searchsorted(at, t, side="right") - 1, P - 2)
            s = (t - at[j]) / (at[j + 1] - at[j])
            W[np.arange(N), j] = 1.0 - s
            W[np.arange(N), j + 1] = s
        self.W = W
        self._fit = np.linalg.pinv(W)      # least-squares knot values of a control sequence
        self.W.setflags(write=False)

    def controls(self, theta: np.ndarray) -> np.ndarray:
        """Controls (..., N, nu) of knot values theta (..., P, nu)."""
        return np.matmul(self.W, theta)

    def fit(self, us: np.ndarray) -> np.ndarray:
        """Knot values (P, nu) whose controls are closest to us (N, nu) in least squares."""
        return self._fit @ us
