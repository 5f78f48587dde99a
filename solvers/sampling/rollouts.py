"""K rollouts of a shooting problem's dynamics (open loop, or around a state feedback) as one
batched call per knot, and their costs from the problem's own cost objects (one batched
evaluation)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..problem import ShootingProblem


class RolloutPolicy(Protocol):
    def controls(self, s: np.ndarray, q: np.ndarray, v: np.ndarray) -> np.ndarray: ...

    def linear_form(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...


def rollout_batch(problem: ShootingProblem, us: np.ndarray, out: np.ndarray,
                  feedback: RolloutPolicy | None = None) -> np.ndarray:
    """States out (K, N+1, nx) from the problem's x0 under controls us (K, N, nu): knot t's dynamics
    ``f_t`` applied to all K states in one call. With a feedback policy (:mod:`.policy`), us holds
    the spline's values and the control applied at knot t is ``feedback.controls(us[:, t], q_t, v_t)``
    clipped to the problem's bounds; us is overwritten with the applied controls. A rollout that diverges (a non-finite state) is NaN
    from there on and leaves the batch, so the others go on."""
    K, N, nq = us.shape[0], problem.horizon, problem.model.nq
    out[:, 0] = problem.x0
    alive = np.ones(K, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):     # a diverging sample is expected, and dropped
        for t in range(N):
            dyn = problem.knot_dynamics(t)
            rows = slice(None) if alive.all() else np.flatnonzero(alive)
            if feedback is not None:
                x = out[rows, t]
                us[rows, t] = problem.clip_controls(feedback.controls(us[rows, t], x[:, :nq], x[:, nq:]))
            if isinstance(rows, slice):
                out[:, t + 1] = dyn.step(out[:, t], us[:, t])
            else:
                out[:, t + 1] = np.nan
                if rows.size:
                    out[rows, t + 1] = dyn.step(out[rows, t], us[rows, t])
            finite = np.isfinite(out[:, t + 1]).all(axis=1)
            if not finite.all():
                alive &= finite
                out[~alive, t + 1:] = np.nan
    return out


def rollout_costs(problem: ShootingProblem, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
    """Total costs (K,) of rollouts xs (K, N+1, nx), us (K, N, nu); +inf for a diverged rollout or
    a non-finite cost."""
    ok = np.isfinite(xs).all(axis=(1, 2))
    J = np.full(xs.shape[0], np.inf)
    if ok.all():
        J[:] = problem.cost(xs, us)
    elif ok.any():
        J[ok] = problem.cost(xs[ok], us[ok])
    J[~np.isfinite(J)] = np.inf
    return J


class CompiledSampleRollouts:
    """:func:`rollout_batch` on the compiled rollout kernel
    (:meth:`solvers.rollout_numba.CompiledRollout.run_samples`): all K rollouts of all knots in one
    call, split over the worker threads, for open-loop controls and for feedbacks that are affine
    in the state (``feedback.linear_form``); any other feedback takes :func:`rollout_batch`. A
    diverged rollout is NaN throughout (:func:`rollout_costs` gives it +inf either way). Needs
    ``compiled_rollout_available(problem)`` (:mod:`solvers.rollout_numba`)."""

    def __init__(self, problem: ShootingProblem):
        from ..rollout_numba import (
            CompiledRollout,  # imports numba: only a compiled planner loads it
        )
        self._kernel = CompiledRollout(problem)
        self._revision = problem.revision

    def __call__(self, problem: ShootingProblem, us: np.ndarray, out: np.ndarray,
                 feedback: RolloutPolicy | None = None) -> np.ndarray:
        form = (us, np.zeros((problem.nu, problem.ndx)), problem.x0) if feedback is None else feedback.linear_form(us)
        if form is None or problem.revision != self._revision:      # re-phased knots: the kernel's are stale
            return rollout_batch(problem, us, out, feedback)
        offsets, G, xref = form
        clip = feedback is not None
        ok = self._kernel.run_samples(problem.x0, offsets, G, xref, problem.u_lower, problem.u_upper, clip, out, us)
        if not ok.all():
            out[~ok] = np.nan
        return out
