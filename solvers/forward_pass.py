"""The forward pass: batched nonlinear closed-loop rollouts of the feedback policy for several
step sizes at once (the candidates of the line search, :mod:`solvers.line_search`).

For each step size α and knot t (Tassa et al. 2012 Sec. II-F; FDDP's gap closing, Mastalli et al.
2020 eq. 14)::

    x̂_0 = x0,  x̂_t = f_{t-1}(x̂_{t-1}, u_{t-1})                (single shooting, no gaps)
    x̂_t ← x̂_t ⊕ (α - 1) f̄_t                                    (FDDP with gaps f̄)
    u_t = us_t + α k_t + K_t (x̂_t ⊖ xs_t)                       (clipped to the bounds when clip)

A candidate whose control or state goes non-finite is marked failed and the batch kept finite.
Two implementations: a Python loop over the knots (batched over α, through the problem's
``step``) and, when the problem's dynamics allow it, one compiled call over all α × N
(:mod:`solvers.rollout_numba`: semi-implicit Euler free dynamics on a backend with compiled forward
dynamics; :mod:`solvers.contact_rollout_numba`: contact and impulse knots too, on a backend that
also offers its contact dynamics compiled, :meth:`dynamics.Backend.compiled_contact_dynamics`).
"""

from __future__ import annotations

import numpy as np

from .problem import ShootingProblem
from .problem_costs import RolloutContactForces


class ForwardPass:
    """Rollouts of ``problem``'s dynamics; compiled: use the compiled rollout when available."""

    def __init__(self, problem: ShootingProblem, compiled: bool):
        self.problem = problem
        self.compiled = bool(compiled)
        self._kernel = None      # CompiledRollout, or False when the dynamics are not supported
        self._revision = problem.revision   # the knot structure the kernel was built for

    def _compiled_rollout(self):
        if not self.compiled:
            return None
        if self._revision != self.problem.revision:
            # the knots were re-phased (ShootingProblem.set_running_models): rebuild for the new structure
            self._kernel, self._revision = None, self.problem.revision
        if self._kernel is None:
            # the compiled rollouts import numba: only a compiled solver loads them
            from .contact_rollout_numba import CompiledContactRollout, compiled_contact_rollout_available
            from .rollout_numba import CompiledRollout, compiled_rollout_available
            p = self.problem
            if compiled_rollout_available(p):
                self._kernel = CompiledRollout(p)
            elif compiled_contact_rollout_available(p):
                self._kernel = CompiledContactRollout(p)
            else:
                self._kernel = False
        return self._kernel or None

    def compiled_rollout(self):
        """The compiled rollout this pass runs (a ``CompiledRollout`` or ``CompiledContactRollout``),
        or None (the Python loop)."""
        return self._compiled_rollout()

    @property
    def uses_compiled_rollout(self) -> bool:
        return self._compiled_rollout() is not None

    def warmup(self) -> None:
        """Compile (first run on this machine) or load from numba's on-disk cache the compiled
        rollout this pass runs; nothing to do for the Python rollout."""
        kernel = self._compiled_rollout()
        if kernel is not None:
            kernel.warmup()

    def run(self, alphas: np.ndarray, xs, us, k, K, clip: bool, gaps: np.ndarray | None = None, out=None):
        """Roll out the policy for step sizes alphas (S,) around xs (N+1, nx), us (N, nu) with gains
        k (N, nu), K (N, nu, ndx); gaps (N+1, ndx) or None. Returns ``(X (S, N+1, nx), U (S, N, nu),
        ok (S,))``, written into ``out`` (:class:`~solvers.problem_data.RolloutBuffers` for S
        candidates, e.g. ``data.rollout(S)``) when given, else fresh arrays. xs, us must not be
        views of ``out``."""
        p = self.problem
        compiled = self._compiled_rollout()
        if compiled is not None:
            return compiled.run(p.x0, alphas, xs, us, k, K, p.u_lower, p.u_upper, clip, gaps, out=out)
        S, N = alphas.shape[0], p.horizon
        if out is None:
            X, U, ok = np.empty((S, N + 1, p.nx)), np.empty((S, N, p.nu)), np.empty(S, dtype=bool)
        else:
            X, U, ok = out.X, out.U, out.ok
        ok[:] = True
        with np.errstate(all="ignore"):
            xnext = np.repeat(p.x0[None], S, axis=0)
            for t in range(N):
                X[:, t] = self._start(alphas, xnext, gaps, t)
                dx = p.state.difference(xs[t], X[:, t])
                u = us[t] + alphas[:, None] * k[t] + dx @ K[t].T
                if clip:
                    u = np.clip(u, p.u_lower, p.u_upper)
                bad = ~np.all(np.isfinite(u), axis=-1)
                if bad.any():
                    ok &= ~bad
                    u[bad] = us[t]
                U[:, t] = u
                xnext = p.step(X[:, t], u, t)
                bad = ~np.all(np.isfinite(xnext), axis=-1)
                if bad.any():  # keep the batch finite; the candidate is marked failed
                    ok &= ~bad
                    xnext[bad] = X[bad, t]
            X[:, N] = self._start(alphas, xnext, gaps, N)
        return X, U, ok

    def contact_forces(self, out) -> RolloutContactForces | None:
        """The contact forces that the last :meth:`run` into ``out`` (its buffers) computed at the
        candidates' contact knots, for the cost of the candidates; None when this pass's rollout
        does not write them (the Python loop, free dynamics)."""
        kernel = self._compiled_rollout()
        models = getattr(kernel, "force_models", None)
        if models is None or out is None:
            return None
        return RolloutContactForces(out.forces(kernel.ncmax), models)

    def _start(self, alphas, xnext, gaps, t):
        if gaps is None:
            return xnext
        return self.problem.state.integrate(xnext, (alphas - 1.0)[:, None] * gaps[t])
