"""Classical Runge–Kutta on the tangent space (Crocoddyl's ``IntegratedActionModelRK`` on Lie
groups): stages ``x_i = x ⊕ c_i dt k_{i-1}`` with ``c = (0, ½, ½, 1)``, ``k_i = (v_i, a_i)``, and
``x⁺ = x ⊕ dt/6 (k_1 + 2k_2 + 2k_3 + k_4)``; ``a`` free or contact dynamics
(:mod:`solvers.integrators.actuated`).

First order: the chain rule through the stages, with the acceleration partials of all 4 N stage
states in one bound backend call. Second order: central differences of those exact Jacobians
(:meth:`IntegratedModel._second_order_by_differences`), C = I.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .actuated import ActuatedModel, StateBuffers
from .base import IntegratedData
from .lie import integrate_or_nan


@dataclass(eq=False)
class RK4Data(IntegratedData):
    """:class:`IntegratedData` plus the 4 n stage states and their acceleration partials
    (``stages``, stage-major). The stage chain rule's intermediates are fresh arrays."""

    stages: StateBuffers | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        out = super().arrays()
        out.update({f"stages.{k}": a for k, a in self.stages.arrays().items()})
        return out


class RK4Model(ActuatedModel):
    """Runge–Kutta 4 over ``dt`` seconds (module docstring)."""

    integrator = "rk4"

    @property
    def second_order_source(self) -> str:
        return "central differences of the exact RK4 Jacobians"

    def _make_data(self, n, xnext, Fx, Fu) -> RK4Data:
        return RK4Data(xnext, Fx, Fu, stages=self._state_buffers(4 * n))

    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        x, u = np.asarray(x, float), np.asarray(u, float)
        _, K = self._stages(x, u)
        return integrate_or_nan(self.state.integrate, x, self.dt / 6.0 * (K[0] + 2 * K[1] + 2 * K[2] + K[3]))

    def _stages(self, x: np.ndarray, u: np.ndarray) -> tuple[list, list]:
        """Stage states and stage tangents ``k_i = (v_i, a_i)`` (lists of 4)."""
        c = (0.0, 0.5 * self.dt, 0.5 * self.dt, self.dt)
        X, K = [], []
        bad = np.zeros(x.shape[:-1], dtype=bool)
        for i in range(4):
            if i == 0:
                xi = x
            else:
                d = c[i] * K[-1]
                bad = bad | ~np.all(np.isfinite(d), axis=-1)   # diverged states: keep the batch finite
                xi = self.state.integrate(x, np.where(bad[..., None], 0.0, d))
            ki = np.concatenate([xi[..., self.state.nq:], self.acceleration(xi, u)], axis=-1)
            ki[bad] = np.nan
            X.append(xi)
            K.append(ki)
        return X, K

    def _calc_first_order(self, data: RK4Data, x: np.ndarray, u: np.ndarray) -> None:
        ss, dt, nq, nv = self.state, self.dt, self.model.nq, self.model.nv
        N = x.shape[0]
        ndx, nz = 2 * nv, 2 * nv + self.nu
        X, K = self._stages(x, u)
        s = data.stages
        Xs = np.stack(X).reshape(4 * N, -1)                    # stage-major, (4N, nx)
        s.q[...] = Xs[:, :nq]
        s.v[...] = Xs[:, nq:]
        self.torques(s.q, s.v, np.tile(u, (4, 1)), out=s.tau)
        _, Aq, Av, Au = self._accel_partials(s)                 # one call over the 4N stage states
        Aq, Av, Au = (A.reshape(4, N, nv, -1) for A in (Aq, Av, Au))
        c = (0.0, 0.5 * dt, 0.5 * dt, dt)
        I0 = np.zeros((ndx, nz))
        I0[:, :ndx] = np.eye(ndx)
        dK = []
        for i in range(4):
            if i == 0:
                dXi = np.broadcast_to(I0, (N, ndx, nz))
            else:
                Jx, Jd = ss.integrate_jacobians(x, c[i] * K[i - 1])
                dXi = Jx @ I0 + Jd @ (c[i] * dK[-1])
            dk = np.zeros((N, ndx, nz))
            dk[:, :nv] = dXi[:, nv:]                           # k_v = v_i
            dk[:, nv:] = np.concatenate([Aq[i], Av[i]], axis=-1) @ dXi
            dk[:, nv:, ndx:] += Au[i]
            dK.append(dk)
        step = dt / 6.0 * (K[0] + 2 * K[1] + 2 * K[2] + K[3])
        Jx, Jd = ss.integrate_jacobians(x, step)
        Fz = Jx @ I0 + Jd @ (dt / 6.0 * (dK[0] + 2 * dK[1] + 2 * dK[2] + dK[3]))
        data.xnext[...] = ss.integrate(x, step)
        data.Fx[...] = Fz[..., :ndx]
        data.Fu[...] = Fz[..., ndx:]
