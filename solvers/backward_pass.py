"""The Riccati backward pass shared by iLQR, DDP and FDDP, with its workspace.

References: Tassa, Erez & Todorov 2012, eq. (5)–(11) (regularised ``Q_uu``); Tassa, Mansard &
Todorov 2014, Algorithm 2 (control limits: a box QP per knot, gains zero on clamped controls);
Mastalli et al. 2020, eq. (11) (FDDP: the value gradient at the end of each interval,
``V_x ← V_x + V_xx f̄``). With ``V'`` the value function at t+1::

    Q_x  = l_x  + Fxᵀ V'_x            Q_u  = l_u  + Fuᵀ V'_x
    Q_xx = l_xx + Fxᵀ V'_xx Fx        Q_ux = l_ux + Fuᵀ V'_xx Fx       Q_uu = l_uu + Fuᵀ V'_xx Fu
    (DDP: + V'_x · F2, the dynamics curvature, solvers.ddp)
    k = argmin_{lower <= us+k <= upper} ½ kᵀ (Q_uu + μI) k + Q_uᵀ k   (box QP; or -Q̃_uu⁻¹ Q_u)
    K = -Q̃_uu,ff⁻¹ Q_ux,f on free rows, 0 on clamped rows
    V_x  = Q_x  + Kᵀ Q_uu k + Kᵀ Q_u + Q_uxᵀ k
    V_xx = Q_xx + Kᵀ Q_uu K + Kᵀ Q_ux + Q_uxᵀ K

Two implementations of the same recursion: the Python reference below and one compiled numba
call (:mod:`solvers.riccati_numba`), chosen once per solver; tests/solvers/test_riccati_numba.py checks
that they agree.
"""

from __future__ import annotations

import operator

import numpy as np
import scipy.linalg as sla

from dynamics.inputs import sum_is_finite

from .box_qp import box_qp
from .problem import ProblemDerivatives

# placeholders for "none" with the dimensions the compiled kernel expects
_NO_C = np.zeros((0, 1, 1))
_NO_T = np.zeros((0, 1, 1, 1))
_NO_GAPS = np.zeros((0, 1))
_NO_BOUNDS = np.zeros((1, 1))


def _c(a: np.ndarray) -> np.ndarray:
    """float64 C-contiguous (what the compiled kernels are specialised for)."""
    return np.ascontiguousarray(a, dtype=np.float64)


def non_finite_derivatives(d: ProblemDerivatives) -> str | None:
    """Which derivative array of ``d`` has a non-finite entry and at which knot, in words; None when
    all are finite (what a failed backward pass is explained with)."""
    for name, arr in (("running cost derivatives", d.running.lxx), ("terminal cost derivatives", d.terminal.lxx),
                      ("dynamics Jacobians", d.dynamics.Fx), ("dynamics Jacobians", d.dynamics.Fu),
                      ("cost gradient", d.running.lx), ("cost gradient", d.running.lu),
                      ("terminal cost gradient", d.terminal.lx)):
        if not sum_is_finite(arr):
            t = int(np.argwhere(~np.isfinite(arr))[0][0])
            return f"non-finite {name} at knot {t} of the current trajectory"
    if d.dynamics.has_second_order and not (sum_is_finite(d.dynamics.T) and sum_is_finite(d.dynamics.C)):
        return "non-finite second-order dynamics derivatives on the current trajectory"
    return None


class BackwardPass:
    """Riccati recursion over N knots into preallocated arrays: ``K`` (N, nu, ndx), ``k`` (N, nu),
    ``Qu``, ``Quuk`` (N, nu) (for the expected improvement), ``Vx`` (N+1, ndx), ``Vxx`` (N+1,
    ndx, ndx). ``k`` also warm-starts the next box QP (Tassa et al. 2014). compiled: run it as one
    numba call."""

    def __init__(self, N: int, nu: int, ndx: int, compiled: bool):
        self.N, self.nu, self.ndx = N, nu, ndx
        self.compiled = bool(compiled)
        # the six results are C-contiguous views of one block, which reset() zeroes in one call
        shapes = ((N, nu, ndx), (N, nu), (N, nu), (N, nu), (N + 1, ndx), (N + 1, ndx, ndx))
        sizes = [int(np.prod(s)) for s in shapes]
        self._block = np.zeros(sum(sizes))
        ends = np.cumsum(sizes)
        self.K, self.k, self.Qu, self.Quuk, self.Vx, self.Vxx = (self._block[e - n:e].reshape(s)
                                                                 for s, n, e in zip(shapes, sizes, ends))
        self._lo = np.empty((N, nu))        # bounds on the step k, lower - us and upper - us
        self._hi = np.empty((N, nu))
        self._kernels = None
        self._inputs = None                # (input buffers, their C-contiguous forms) of the last compiled pass

    def reset(self) -> None:
        """Zero the gains, steps and value function."""
        self._block.fill(0.0)

    def run(self, d: ProblemDerivatives, mu: float, us: np.ndarray, lower: np.ndarray | None,
            upper: np.ndarray | None, gaps: np.ndarray | None, curvature: bool) -> str | None:
        """One pass at regularisation ``mu``. us (N, nu) the current controls; lower / upper (nu,)
        absolute control bounds, or None for the unconstrained pass; gaps (N+1, ndx) or None
        (feasible iterate); curvature: add the dynamics' ``V'_x · F2`` (DDP). Returns None on
        success, else why it failed (and at which knot)."""
        curvature = curvature and d.dynamics.has_second_order
        if self.compiled:
            return self._run_compiled(d, mu, us, lower, upper, gaps, curvature)
        return self._run_python(d, mu, us, lower, upper, gaps, curvature)

    # ------------------------------------------------------------ compiled
    def _riccati(self):
        """The compiled kernels' module (:mod:`solvers.riccati_numba`), imported on first use (numba)."""
        if self._kernels is None:
            from . import riccati_numba
            self._kernels = riccati_numba
        return self._kernels

    @staticmethod
    def _sources(d: ProblemDerivatives, gaps, curvature: bool) -> tuple:
        """The kernel's twelve derivative inputs (the terminal cost's arrays whole, (1, ...))."""
        run, dyn = d.running, d.dynamics
        C, T = (dyn.C, dyn.T) if curvature else (_NO_C, _NO_T)
        return (dyn.Fx, dyn.Fu, run.lx, run.lu, run.lxx, run.lxu, run.luu, d.terminal.lx, d.terminal.lxx, C, T,
                _NO_GAPS if gaps is None else gaps)

    @staticmethod
    def _views(src: tuple) -> tuple:
        """``src`` as the kernel takes it: the terminal row of the terminal cost's arrays."""
        return src[:7] + (src[7][0], src[8][0]) + src[9:]

    def _outputs(self) -> tuple:
        return self.k, self.K, self.k, self.Qu, self.Quuk, self.Vx, self.Vxx

    def _run_compiled(self, d, mu, us, lower, upper, gaps, curvature) -> str | None:
        kern = self._riccati()
        box = lower is not None
        lo = np.subtract(lower, us, out=self._lo) if box else _NO_BOUNDS
        hi = np.subtract(upper, us, out=self._hi) if box else _NO_BOUNDS
        src = self._sources(d, gaps, curvature) + (lo, hi)
        cached = self._inputs
        if cached is not None and all(map(operator.is_, src, cached[0])):
            args = cached[1]            # the same buffers as last time (a solver's workspace): no re-checks
        else:
            views = self._views(src)
            args = tuple(_c(a) for a in views)
            # kept only when nothing was copied (contents of the same buffers may change, copies would not)
            self._inputs = (src, args) if all(map(operator.is_, args, views)) else None
        status, t = kern.backward_pass_kernel(*args[:12], float(mu), box, *args[12:], *self._outputs())
        if status == kern.OK:
            return None
        return kern.MESSAGES[status].format(t=t)

    def prepared(self, d: ProblemDerivatives, gaps: np.ndarray | None, box: bool, curvature: bool):
        """``run(mu, us, lower, upper) -> None | str``: :meth:`run` of the compiled pass on the fixed
        buffers of ``d`` (a solver's workspace, C-contiguous float64) and ``gaps`` (or None), with
        the arguments bound once; lower / upper the bounds when ``box``. None where a buffer is not
        in the kernel's layout (the caller then uses :meth:`run`)."""
        if not self.compiled:
            return None
        kern = self._riccati()
        views = self._views(self._sources(d, gaps, curvature and d.dynamics.has_second_order))
        if not all(a.dtype == np.float64 and a.flags.c_contiguous for a in views):
            return None
        lo, hi = (self._lo, self._hi) if box else (_NO_BOUNDS, _NO_BOUNDS)
        outs = self._outputs()
        kernel, ok, messages, subtract = kern.backward_pass_kernel, kern.OK, kern.MESSAGES, np.subtract

        def run_pass(mu: float, us: np.ndarray, lower, upper) -> str | None:
            if box:
                subtract(lower, us, out=lo)
                subtract(upper, us, out=hi)
            status, t = kernel(*views, float(mu), box, lo, hi, *outs)
            return None if status == ok else messages[status].format(t=t)

        def address_call() -> tuple:
            """``(address, views, lo, hi, outs, box)``: the pass for another compiled loop
            (:mod:`solvers.iteration_numba`) to make by address as ``kernel(*views, mu, box, lo, hi,
            *outs)`` after writing ``lower - us``, ``upper - us`` into lo, hi when box; returns the
            kernel's ``(status, knot)``. Compiled (or loaded) here, once."""
            from dynamics.kernels.threaded_batch import kernel_address
            return kernel_address(kernel, (*views, 0.0, box, lo, hi, *outs)), views, lo, hi, outs, box
        run_pass.address_call = address_call
        return run_pass

    def failure_message(self, status: int, knot: int) -> str:
        """What :meth:`run` returns for the compiled pass's failure ``status`` at ``knot``."""
        return self._riccati().MESSAGES[status].format(t=knot)

    # ------------------------------------------------------------ Python reference
    def _run_python(self, d, mu, us, lower, upper, gaps, curvature) -> str | None:
        N, nu, ndx = self.N, self.nu, self.ndx
        run, dyn = d.running, d.dynamics
        box = lower is not None
        Vx = d.terminal.lx[0].copy()
        Vxx = d.terminal.lxx[0].copy()
        if gaps is not None:
            Vx = Vx + Vxx @ gaps[N]
        self.Vx[N], self.Vxx[N] = Vx, Vxx
        eye_u = np.eye(nu)
        k_warm = self.k  # box-QP warm start: the previous iteration's feed-forward (Tassa et al. 2014)
        for t in range(N - 1, -1, -1):
            Fx, Fu = dyn.Fx[t], dyn.Fu[t]
            FxV = Fx.T @ Vxx
            FuV = Fu.T @ Vxx
            Qx = run.lx[t] + Fx.T @ Vx
            Qu = run.lu[t] + Fu.T @ Vx
            Qxx = run.lxx[t] + FxV @ Fx
            Qux = run.lxu[t].T + FuV @ Fx
            Quu = run.luu[t] + FuV @ Fu
            if curvature:
                H = dyn.curvature(t, Vx)
                Qxx = Qxx + H[:ndx, :ndx]
                Qux = Qux + H[ndx:, :ndx]
                Quu = Quu + H[ndx:, ndx:]
            Quu = 0.5 * (Quu + Quu.T)
            Quu_reg = Quu + mu * eye_u
            K = np.zeros((nu, ndx))
            if box:
                res = box_qp(Quu_reg, Qu, lower - us[t], upper - us[t], x0=k_warm[t])
                if not res.ok:
                    return f"Q_uu + mu I not positive definite at knot {t}"
                k = res.x
                if res.chol is not None and res.free.any():
                    K[res.free] = -sla.cho_solve(res.chol, Qux[res.free], check_finite=False)
            else:
                try:
                    c = sla.cho_factor(Quu_reg, check_finite=False)
                except np.linalg.LinAlgError:
                    return f"Q_uu + mu I not positive definite at knot {t}"
                if not np.all(np.isfinite(c[0])):
                    return f"non-finite Q_uu at knot {t}"
                k = -sla.cho_solve(c, Qu, check_finite=False)
                K = -sla.cho_solve(c, Qux, check_finite=False)
            Quuk = Quu @ k
            Vx = Qx + K.T @ Quuk + K.T @ Qu + Qux.T @ k
            Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
            Vxx = 0.5 * (Vxx + Vxx.T)
            if gaps is not None:
                Vx = Vx + Vxx @ gaps[t]
            if not (np.all(np.isfinite(Vx)) and np.all(np.isfinite(Vxx))):
                return f"non-finite value function at knot {t}"
            self.K[t], self.k[t], self.Qu[t], self.Quuk[t] = K, k, Qu, Quuk
            self.Vx[t], self.Vxx[t] = Vx, Vxx
        return None
