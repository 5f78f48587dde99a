"""The state feedback the sampled controls ride on: ``u = θ(t) + B⁻¹ (g(q) − D v)``, gravity
compensation at the rollout's own configuration plus joint damping ``D = diag(κ M_ii(q0) / dt)``:
κ (``damping``) is the fraction of each joint's velocity the damping alone removes in one knot —
scaled by the joint's inertia and the knot spacing, because an explicit damping term is unstable
beyond ``D dt / M_ii = 2`` (light wrist joints at dt = 30 ms reach that with a few N m s/rad).

Sampled open-loop torques leave a torque-controlled arm without a stable default: beyond the
horizon a plan holds a stale torque and the arm drifts, so every update must re-stabilise the tail
by chance (docs/sampling.md). With this feedback in the rollouts, the knots are offsets from a
stable hold, as position actuators give MJPC's arm tasks. Needs a fixed base and one actuator per
dof (``B`` square and invertible).
"""

from __future__ import annotations

import numpy as np

from ..problem import ShootingProblem


class GravityDampingFeedback:
    """``feedback(q, v) = B⁻¹ (g(q) − D v)`` (K, nu) on the problem's backend, and its gains.
    damping: κ in [0, 1] (module docstring); D (nv,) [N m s/rad] from M at the problem's x0 and
    its smallest knot spacing."""

    def __init__(self, problem: ShootingProblem, damping: float):
        m = problem.model
        B = np.asarray(m.actuation_matrix, float)
        if m.has_floating_base or B.shape != (m.nv, m.nv) or abs(np.linalg.det(B)) < 1e-12:
            raise ValueError(f"policy 'gravity_damping' needs a fixed-base robot with one actuator per dof; model "
                             f"'{m.name}' has nv={m.nv}, nu={m.nu}{', a floating base' if m.has_floating_base else ''}"
                             f"; use policy='open_loop'")
        if isinstance(damping, bool) or not isinstance(damping, (int, float, np.number)) or not (0 <= damping <= 1):
            raise ValueError(f"damping must be a number in [0, 1] (velocity fraction removed per knot), got {damping!r}")
        self.problem, self.damping = problem, float(damping)
        self.Binv = np.linalg.inv(B)
        dt = float(np.min(problem.dts[problem.dts > 0]))
        self.D = self.damping * np.diag(problem.backend.crba(m, problem.x0[:m.nq])) / dt      # (nv,)

    def __call__(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        p = self.problem
        return (p.backend.gravity_torques(p.model, q) - self.D * v) @ self.Binv.T

    def offsets(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """The knots' view of applied controls us (N, nu) along states xs (N+1, nx): ``us − feedback``."""
        nq = self.problem.model.nq
        return us - self(xs[:-1, :nq], xs[:-1, nq:])

    def gains(self, xs: np.ndarray) -> np.ndarray:
        """``∂u/∂x`` (N, nu, 2 nv) of the feedback at xs[:-1]: ``B⁻¹ [∂g/∂q, −D I]`` (the plan's
        gains between updates; ∂g/∂q is ∂RNEA/∂q at v = a = 0)."""
        p = self.problem
        m, nq, nv = p.model, p.model.nq, p.model.nv
        q = xs[:-1, :nq]
        zero = np.zeros((q.shape[0], nv))
        dg = p.backend.rnea_derivatives(m, q, zero, zero)[0]
        K = np.empty((q.shape[0], p.nu, 2 * nv))
        K[:, :, :nv] = self.Binv @ dg
        K[:, :, nv:] = -self.Binv * self.D
        return K
