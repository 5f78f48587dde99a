"""The QP of one stagewise SQP iteration solved by ADMM (OSQP's iteration: Stellato et al. 2020,
"OSQP: an operator splitting solver for quadratic programs"; stagewise as in Jordana, Kleff,
Meduri, Righetti, Mansard 2023, "Stagewise Implementations of Sequential Quadratic Programming for
Model-Predictive Control"). On the splitting ``g + G d = z``, z in [lower, upper]::

    d⁺ = argmin  q(d) + Σ_t ρ/2 ‖g + G d − z + y/ρ‖² + σ/2 ‖d − d_prev‖²   s.t. the linearised dynamics
    w  = α (g + G d⁺) + (1 − α) z                (over-relaxation α)
    z⁺ = Π_[lower, upper](w + y/ρ),   y⁺ = y + ρ (w − z⁺)

until ``‖g + G d − z‖∞`` and ``‖ρ Gᵀ(z⁺ − z)‖∞`` are below ``eps_abs + eps_rel·scale`` (the primal
scale ``max(‖g + G d‖∞, ‖z‖∞)``, the dual scale ``max(‖Gᵀy‖∞, the SQP's dual residual)``). The per-row
penalty and its update: docs/solvers.md ("Hard constraints and the constrained solver"); the SQP
around it: :mod:`solvers.csqp`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dynamics.inputs import sum_is_finite

from .backward_pass import BackwardPass
from .costs import CostDerivatives
from .ilqr import SolverFailure
from .problem import ProblemDerivatives
from .regularization import Regularization

RHO_MIN, RHO_MAX = 1e-6, 1e6
#: ADMM is stopped as diverged when its primal residual ‖g + G d − z‖∞ exceeds this factor times
#: (1 + max|g|): a step that moves the linearised constraints by 10¹⁰ times their own size is no
#: step a line search can use (an ill-conditioned QP: e.g. controls with almost no cost curvature)
DIVERGED_FACTOR = 1e10


class StagewiseAdmmQP:
    """ADMM on the QP in the step d = (dx, du) of a shooting problem with N knots, state tangent
    size ndx, nu controls and m constraint rows per knot: the Gauss–Newton cost model, the
    linearised dynamics with gaps, and ``lower ≤ g + G d ≤ upper``. The d-update is a Riccati pass
    of ``backward`` on cost terms augmented by ``ρ GᵀG + σI`` and ``Gᵀ(y + ρ(g − z)) − σ d``, then a
    linear rollout.

    State kept between calls (the warm start): the multipliers ``y`` (N+1, m), the splitting
    variables ``z`` (N+1, m) and the scalar penalty ``rho``. After :meth:`solve`: the step ``dx``
    (N+1, ndx), ``du`` (N, nu). Options: see :class:`solvers.CSQP`. timed: ``timed(key)`` gives a
    context manager adding the block's wall time to the caller's timings."""

    def __init__(self, horizon: int, ndx: int, nu: int, equality: np.ndarray, backward: BackwardPass,
                 timed: Callable, max_iter: int = 1000, eps_abs: float = 1e-6, eps_rel: float = 1e-6,
                 rho: float = 1e-1, sigma: float = 1e-6, relaxation: float = 1.6, rho_update_interval: int = 10,
                 inactive_rho: float = 3e-4, rho_update_tolerance: float = 5.0, verbose: int = 0):
        if int(max_iter) != max_iter or max_iter < 1:
            raise ValueError(f"max_qp_iter must be a positive integer, got {max_iter}")
        for name, v in (("eps_abs", eps_abs), ("eps_rel", eps_rel), ("sigma", sigma)):
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if not (RHO_MIN <= rho <= RHO_MAX):
            raise ValueError(f"rho must be in [{RHO_MIN}, {RHO_MAX}], got {rho}")
        if not 0 < relaxation < 2:
            raise ValueError(f"relaxation must be in (0, 2), got {relaxation}")
        if not (np.isfinite(rho_update_tolerance) and rho_update_tolerance >= 1):
            raise ValueError(f"rho_update_tolerance must be a finite number >= 1, got {rho_update_tolerance}")
        self.max_iter, self.eps_abs, self.eps_rel = int(max_iter), float(eps_abs), float(eps_rel)
        self.rho0, self.sigma, self.relaxation = float(rho), float(sigma), float(relaxation)
        self.rho_update_interval = int(rho_update_interval)
        self.inactive_rho = float(inactive_rho)
        self.rho_update_tolerance = float(rho_update_tolerance)
        self.verbose = verbose
        self.backward, self._timed = backward, timed
        N, m = horizon, equality.shape[-1]
        self.equality = equality                        # (N+1, m) bool
        self.aug = CostDerivatives.zeros(N, ndx, nu)
        self.aug_terminal = CostDerivatives.zeros(1, ndx, nu)
        self.dx, self.du = np.zeros((N + 1, ndx)), np.zeros((N, nu))
        self.y, self.z = np.zeros((N + 1, m)), np.zeros((N + 1, m))
        self.rho = self.rho0
        self._closed_loop, self._K_seen, self._curvature = None, None, None
        self._near = np.zeros((N + 1, m), bool)
        self._bounds_seen = None                      # (lower, upper, their copies, _near_bounds)
        self._L = self._w = self._out = None          # the compiled path's factors and outputs

    def solve(self, d: ProblemDerivatives, g: np.ndarray, Gx: np.ndarray, Gu: np.ndarray, lower: np.ndarray,
              upper: np.ndarray, gaps: np.ndarray, us: np.ndarray, reg: Regularization,
              costates: np.ndarray | None = None, dual_scale: float = 0.0) -> int:
        """ADMM on the QP at an iterate: constraint values g (N+1, m), Jacobians Gx (N+1, m, ndx),
        Gu (N+1, m, nu), bounds lower/upper (N+1, m), gaps (N+1, ndx), controls us (N, nu); reg: the
        Riccati pass's μ schedule (raised on failure). costates (N+1, ndx): add ``λ_{t+1} · F2_t``
        to the Hessian. dual_scale: the SQP's own dual (stationarity) residual at the iterate, a
        floor of the dual residual's relative scale (an inexact SQP: the QP is solved to a fraction
        eps_rel of the residual the step is to remove — Dembo, Eisenstat, Steihaug 1982, "Inexact
        Newton methods" — not further while that residual is large, as tightly as before near the
        optimum). Leaves the step in (dx, du), y and z updated; returns the iterations."""
        N = len(us)
        self._curvature = None
        if costates is not None and d.dynamics.has_second_order:
            dyn = d.dynamics
            lam = np.einsum("tri,ti->tr", dyn.C, costates[1:])
            H = np.einsum("tr,trab->tab", lam, dyn.T)
            self._curvature = 0.5 * (H + np.swapaxes(H, -1, -2))
        lo, hi = lower, upper
        y, z = self.y, self.z
        np.clip(z, lo, hi, out=z)
        dx, du = self.dx, self.du
        dx.fill(0.0)
        du.fill(0.0)
        a, at = self.aug, self.aug_terminal
        rho = self._rho_rows(g, lo, hi)
        with self._timed("backward"):
            self.augmented_hessians(d, Gx, Gu, rho)
        lqr = ProblemDerivatives(a, at, d.dynamics)
        if self.backward.compiled:
            return self._solve_compiled(d, lqr, g, Gx, Gu, lo, hi, gaps, us, reg, rho, float(dual_scale))
        Fx, Fu = d.dynamics.Fx, d.dynamics.Fu
        alpha, s = self.relaxation, self.sigma
        scale_q = float(dual_scale)
        Cd = np.zeros_like(g)
        self._closed_loop = None            # new Fx, Fu: the closed-loop matrices are rebuilt
        g_scale = _divergence_scale(g)
        it = 0
        for it in range(1, self.max_iter + 1):
            with self._timed("backward"):
                v = y + rho * (g - z)
                np.subtract(d.running.lx + np.einsum("tmi,tm->ti", Gx[:N], v[:N]), s * dx[:N], out=a.lx)
                np.subtract(d.running.lu + np.einsum("tmi,tm->ti", Gu[:N], v[:N]), s * du, out=a.lu)
                at.lx[0] = d.terminal.lx[0] + Gx[N].T @ v[N] - s * dx[N]
                self._riccati(lqr, reg, us, gaps)
                self.linear_rollout(Fx, Fu, gaps)
                if not (sum_is_finite(dx) and sum_is_finite(du)):
                    raise SolverFailure("the QP step is non-finite (ill-conditioned constraints or dynamics); "
                                        "the last finite iterate is returned")
                np.einsum("tmi,ti->tm", Gx, dx, out=Cd)
                Cd[:N] += np.einsum("tmi,ti->tm", Gu[:N], du)
                w = g + Cd
                z_prev = z.copy()
                wr = alpha * w + (1.0 - alpha) * z_prev
                zu = wr + y / rho
                np.clip(zu, lo, hi, out=z)
                # y + ρ (wr − z) is exactly 0 where the projection did not clip (z = wr + y/ρ): set so,
                # not left to rounding, as the rows' active flags (y ≠ 0) read it
                np.copyto(y, np.where(z == zu, 0.0, y + rho * (wr - z)))
                r_prim = float(np.abs(w - z).max(initial=0.0))
                _check_divergence(r_prim, g_scale, it)
                dz = rho * (z - z_prev)
                r_dual = max(float(np.abs(np.einsum("tmi,tm->ti", Gx, dz)).max(initial=0.0)),
                             float(np.abs(np.einsum("tmi,tm->ti", Gu[:N], dz[:N])).max(initial=0.0)))
                scale_p = max(float(np.abs(w).max(initial=0.0)), float(np.abs(z).max(initial=0.0)))
                Gty = max(float(np.abs(np.einsum("tmi,tm->ti", Gx, y)).max(initial=0.0)),
                          float(np.abs(np.einsum("tmi,tm->ti", Gu[:N], y[:N])).max(initial=0.0)), scale_q)
                if r_prim <= self.eps_abs + self.eps_rel * scale_p and r_dual <= self.eps_abs + self.eps_rel * Gty:
                    break
                if self.rho_update_interval and it % self.rho_update_interval == 0:
                    # ρ ← ρ √(r_primal / r_dual), the residuals' own ratio (the rows' magnitudes —
                    # torques, angles, metres — differ too much for OSQP's normalisation by the
                    # largest of them), measured on the rows ρ applies to: far-inactive rows only
                    # follow their linearised values
                    near = self._near | self.equality
                    rp = float(np.abs(np.where(near, w - z, 0.0)).max(initial=0.0))
                    dzn = np.where(near, dz, 0.0)
                    rd = max(float(np.abs(np.einsum("tmi,tm->ti", Gx, dzn)).max(initial=0.0)),
                             float(np.abs(np.einsum("tmi,tm->ti", Gu[:N], dzn[:N])).max(initial=0.0)))
                    rho = self._update_rho(d, Gx, Gu, w, lo, hi, it, rp, rd, (r_prim, r_dual, scale_p, Gty), rho)
        return it

    def _solve_compiled(self, d, lqr, g, Gx, Gu, lo, hi, gaps, us, reg, rho, scale_q) -> int:
        """:meth:`solve`'s iterations as compiled runs of ADMM iterations at one ρ
        (:mod:`solvers.admm_numba`): a full Riccati pass and the factors of ``Q_uu + μI`` whenever
        ρ (or μ) changes, then only vector passes."""
        from . import admm_numba as kern        # imports numba: only when used
        N = len(us)
        a, at = self.aug, self.aug_terminal
        np.copyto(a.lx, d.running.lx)           # the full pass is for K, V_xx: any finite gradient will do
        np.copyto(a.lu, d.running.lu)
        np.copyto(at.lx, d.terminal.lx)
        Fx, Fu, gaps = (np.ascontiguousarray(v, dtype=np.float64) for v in (d.dynamics.Fx, d.dynamics.Fu, gaps))
        bw = self.backward
        if self._L is None or self._L.shape != (N, Fu.shape[-1], Fu.shape[-1]):
            self._L = np.zeros((N, Fu.shape[-1], Fu.shape[-1]))
            self._Qinv = np.zeros_like(self._L)
            self._w, self._out = np.zeros_like(g), np.zeros(6)
        L, Qinv, w, out = self._L, self._Qinv, self._w, self._out
        g, Gx, Gu, lo, hi = (np.ascontiguousarray(v, dtype=np.float64) for v in (g, Gx, Gu, lo, hi))
        FxT, FuT, GxT, GuT = (_transposed(v) for v in (Fx, Fu, Gx, Gu))
        lx, lu = np.ascontiguousarray(d.running.lx), np.ascontiguousarray(d.running.lu)
        lxN = np.ascontiguousarray(d.terminal.lx[0])
        it, factored, g_scale = 0, None, _divergence_scale(g)
        while True:
            with self._timed("backward"):
                if factored is not rho:         # a new penalty (or the first pass): K, V_xx and the factors
                    self._riccati(lqr, reg, us, gaps)
                    status, t = kern.factor_quu(Fu, a.luu, bw.Vxx, float(reg.mu), L, Qinv)
                    if status != kern.OK:
                        raise SolverFailure(f"Q_uu + mu I not positive definite at knot {t} in the QP's Riccati pass")
                    factored = rho
                    KT = _transposed(bw.K)
                n = self.max_iter - it
                if self.rho_update_interval:
                    n = min(n, self.rho_update_interval - it % self.rho_update_interval)
                done, status = kern.admm_iterations(
                    Fx, Fu, FxT, FuT, gaps, bw.K, KT, Qinv, bw.Vxx, float(reg.mu), lx, lu, lxN, Gx, Gu, GxT, GuT, g,
                    lo, hi, rho, self._near | self.equality, self.sigma, self.relaxation, int(n), self.eps_abs,
                    self.eps_rel, scale_q, self.y, self.z, self.dx, self.du, bw.k, w, out)
            it += done
            if status == kern.NON_FINITE:
                raise SolverFailure("the QP step is non-finite (ill-conditioned constraints or dynamics); "
                                    "the last finite iterate is returned")
            if status == kern.CONVERGED:
                return it
            _check_divergence(float(out[0]), g_scale, it)
            if self.rho_update_interval and it % self.rho_update_interval == 0:
                rho = self._update_rho(d, Gx, Gu, w, lo, hi, it, out[4], out[5], out[:4], rho)
            if it >= self.max_iter:
                return it

    def _update_rho(self, d, Gx, Gu, w, lo, hi, it, rp, rd, residuals, rho) -> np.ndarray:
        """The scalar penalty from the residuals over the rows it applies to (``rp``, ``rd``), taken
        when it differs from the current one by more than ``rho_update_tolerance`` (OSQP's rule: a
        new ρ costs a full Riccati pass); the per-row penalty with the rows' active flags refreshed,
        and the augmented Hessians for it. Returns ``rho`` itself (the same object) when no row's
        penalty changed."""
        est = self.rho if rp == 0 or rd == 0 else float(np.clip(self.rho * np.sqrt(rp / rd), RHO_MIN, RHO_MAX))
        tol = self.rho_update_tolerance
        new = est if (est > tol * self.rho or est < self.rho / tol) else self.rho
        if self.verbose > 1:
            r_prim, r_dual, scale_p, scale_d = residuals
            print(f"[csqp]   admm {it:4d} primal {r_prim:.2e}/{scale_p:.2e} dual {r_dual:.2e}/{scale_d:.2e} "
                  f"rho {self.rho:.1e} -> {new:.1e} (estimate {est:.1e})")
        self.rho = new
        rows = self._rho_rows(w, lo, hi)
        if np.array_equal(rows, rho):
            return rho
        self.augmented_hessians(d, Gx, Gu, rows)
        return rows

    def _rho_rows(self, w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per-row penalty (N+1, m): 10³ ρ on equality rows, ρ on inequality rows that are active or
        nearly so (a non-zero multiplier, or ``w`` — the linearised value — or z at or past a
        bound), 10⁻³ ρ on the other inequality rows, ρ_min on unbounded rows. A far-inactive row
        (e.g. a torque limit) with the full ρ would act as a proximal term of weight ρ on its
        variables and stall ADMM where the cost's curvature is much smaller than ρ."""
        z, y = self.z, self.y
        lo_near, hi_near, bounded = self._near_bounds(lo, hi)
        if self.backward.compiled:
            from . import admm_numba  # imports numba: only when used
            r = np.empty(y.shape)                   # a new array: the caller compares it with the last one
            admm_numba.rho_rows(y, np.ascontiguousarray(w, dtype=np.float64), z, lo_near, hi_near, bounded,
                                self.equality, float(self.rho), self.inactive_rho, RHO_MIN, self._near, r)
            return r
        near = (y != 0) | (w <= lo_near) | (w >= hi_near) | (z <= lo_near) | (z >= hi_near)
        self._near = near & ~self.equality
        r = np.where(self.equality, 1e3 * self.rho, np.where(near, self.rho, self.inactive_rho * self.rho))
        return np.maximum(np.where(bounded, r, RHO_MIN), RHO_MIN)

    def _near_bounds(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(lower + slack, upper − slack, bounded)`` of :meth:`_rho_rows`, kept while the bounds
        are the same (the SQP passes the same arrays at every iteration of a solve)."""
        seen = self._bounds_seen
        if seen is None or seen[0] is not lo or seen[1] is not hi or not (
                np.array_equal(seen[2], lo) and np.array_equal(seen[3], hi)):
            with np.errstate(invalid="ignore"):
                near = (lo + _slack(lo), hi - _slack(hi), np.isfinite(lo) | np.isfinite(hi))
            self._bounds_seen = (lo, hi, lo.copy(), hi.copy(), near)
        return self._bounds_seen[4]

    def augmented_hessians(self, d: ProblemDerivatives, Gx: np.ndarray, Gu: np.ndarray, rho: np.ndarray) -> None:
        """``l_xx + Gxᵀ ρ Gx + σI``, ``l_xu + Gxᵀ ρ Gu``, ``l_uu + Guᵀ ρ Gu + σI`` (+ the curvature);
        one compiled call (:func:`solvers.admm_numba.augmented_hessians`) when the Riccati pass is compiled."""
        N, s = len(d.running.lxx), self.sigma
        a, at = self.aug, self.aug_terminal
        curv = self._curvature
        if self.backward.compiled:
            from . import admm_numba  # imports numba: only when used
            admm_numba.augmented_hessians(*(np.ascontiguousarray(v, dtype=np.float64) for v in (
                d.running.lxx, d.running.lxu, d.running.luu, d.terminal.lxx[0], Gx, Gu, rho)), s,
                a.lxx, a.lxu, a.luu, at.lxx[0])
        else:
            hxx, hxu, huu = penalty_hessians(Gx[:N], Gu[:N], rho[:N])
            np.add(d.running.lxx, hxx, out=a.lxx)
            np.add(d.running.lxu, hxu, out=a.lxu)
            np.add(d.running.luu, huu, out=a.luu)
            np.add(d.terminal.lxx[0], penalty_hessians(Gx[N], Gu[N], rho[N])[0], out=at.lxx[0])
            for A in (a.lxx, a.luu, at.lxx):
                n = A.shape[-1]
                A.reshape(A.shape[0], n * n)[:, ::n + 1] += s
        if curv is not None:
            ndx = a.lxx.shape[-1]
            a.lxx += curv[:, :ndx, :ndx]
            a.lxu += curv[:, :ndx, ndx:]
            a.luu += curv[:, ndx:, ndx:]

    def linear_rollout(self, Fx: np.ndarray, Fu: np.ndarray, gaps: np.ndarray) -> None:
        """``dx_0 = f̄_0``, ``du_t = k_t + K_t dx_t``, ``dx_{t+1} = Fx dx_t + Fu du_t + f̄_{t+1}``
        into (dx, du): one compiled call (:func:`solvers.admm_numba.linear_rollout`, the ADMM
        iterations' own) when the Riccati pass is compiled, else one matrix-vector product per knot
        with the closed-loop ``Fx + Fu K`` (the same for every ADMM iteration at one ρ and μ:
        rebuilt when K changes)."""
        K, k, dx, du = self.backward.K, self.backward.k, self.dx, self.du
        if self.backward.compiled:
            from . import admm_numba  # imports numba: only when used
            admm_numba.linear_rollout(np.ascontiguousarray(gaps, dtype=np.float64), k, _transposed(K), _transposed(Fx),
                                      _transposed(Fu), dx, du)
            return
        A = self._closed_loop
        if A is None or not np.array_equal(self._K_seen, K):
            A = self._closed_loop = Fx + Fu @ K
            self._K_seen = K.copy()
        b = (Fu @ k[:, :, None])[:, :, 0] + gaps[1:]
        dx[0] = gaps[0]
        for t in range(len(A)):
            np.add(A[t] @ dx[t], b[t], out=dx[t + 1])
        np.add(k, (K @ dx[:-1, :, None])[:, :, 0], out=du)

    def _riccati(self, lqr: ProblemDerivatives, reg: Regularization, us: np.ndarray, gaps: np.ndarray) -> None:
        """One Riccati pass on the augmented LQ problem, raising μ until it succeeds."""
        while True:
            failure = self.backward.run(lqr, reg.mu, us, None, None, gaps, False)
            if failure is None:
                return
            if not reg.increase():
                raise SolverFailure(f"regularization blow-up in the QP's Riccati pass ({failure}; mu > "
                                    f"{reg.mu_max:.1e})")


def penalty_hessians(Gx: np.ndarray, Gu: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Gxᵀ diag(r) Gx, Gxᵀ diag(r) Gu, Guᵀ diag(r) Gu)`` per knot: the Gauss–Newton Hessian of a
    quadratic penalty with row weights r (..., m) on constraint rows with Jacobians Gx (..., m, ndx),
    Gu (..., m, nu)."""
    rGx, rGu = r[..., None] * Gx, r[..., None] * Gu
    GxT = np.swapaxes(Gx, -1, -2)
    return GxT @ rGx, GxT @ rGu, np.swapaxes(Gu, -1, -2) @ rGu


def _divergence_scale(g: np.ndarray) -> float:
    """``1 + max|g|``: the size of the QP's constraint values that its ADMM residuals are judged by."""
    return 1.0 + float(np.abs(g).max(initial=0.0))


def _check_divergence(r_prim: float, scale: float, it: int) -> None:
    """Raise :class:`SolverFailure` when the primal residual after ``it`` ADMM iterations is beyond
    ``DIVERGED_FACTOR scale`` (``scale``: :func:`_divergence_scale` of the QP's g; or not a number)
    rather than let ADMM run to ``max_qp_iter``."""
    if not r_prim <= DIVERGED_FACTOR * scale:
        raise SolverFailure(f"the QP's ADMM diverged: primal residual {r_prim:.2e} after {it} ADMM iterations, beyond "
                            f"{DIVERGED_FACTOR:.0e} x (1 + max|g| = {scale:.2e}) (an ill-conditioned QP, e.g. controls "
                            f"with almost no cost curvature); the last finite iterate is returned")


def _transposed(a: np.ndarray) -> np.ndarray:
    """``a`` (..., r, c) with its last two axes swapped, C-contiguous (..., c, r)."""
    return np.ascontiguousarray(np.swapaxes(a, -1, -2))


def _slack(bound: np.ndarray) -> np.ndarray:
    """How close to a bound a value counts as "nearly active": 1e-3 (1 + |bound|)."""
    with np.errstate(invalid="ignore"):
        return 1e-3 * (1.0 + np.abs(bound))
