"""Compiled Riccati backward pass (and projected-Newton box QP) for the shooting solvers.

The same recursion as :meth:`solvers.ilqr.ILQR._backward_pass` (iLQR/DDP/FDDP, Tassa, Erez &
Todorov 2012 eq. 5–11; control limits by Tassa, Mansard & Todorov 2014 Algorithm 2 with the box QP
of :mod:`solvers.box_qp`; FDDP's gap terms, Mastalli et al. 2020 eq. 11), compiled with numba so
that one backward pass over N knots is one call instead of ~15 small numpy/LAPACK calls per knot.
The Python implementation stays the reference (``tests/solvers/test_riccati_numba.py`` compares both);
the solvers use this one when the problem's dynamics backend is ``numba`` (``compiled=None``) or
when asked to (``compiled=True``). The Cholesky factorisation and substitutions of ``Q_uu`` are the
kernel library's (:mod:`dynamics.kernels.dense`, shared with the contact kernels).

Importing this module imports numba; :mod:`solvers.ilqr` imports it only when it is used.
"""

from __future__ import annotations

import numpy as np

from dynamics.kernels.dense import cholesky, cholesky_solve
from dynamics.kernels.jit import jit

from .box_qp import ALL_CLAMPED, HESSIAN_NOT_PD, INTERIOR, MAX_ITER, MAX_LINESEARCH, NO_DESCENT, NO_IMPROVEMENT, \
    SMALL_GRADIENT

# backward-pass status codes (the Python side words the message)
OK = 0
NOT_PD = 1            # Q_uu + mu I not positive definite at knot t
NONFINITE_QUU = 2     # non-finite Q_uu at knot t (unconstrained pass)
NONFINITE_V = 3       # non-finite value function at knot t


@jit
def _gain_rows(L, n, B, idx, Y, out):
    """``out[idx[:n]] = -(L Lᵀ)⁻¹ B[idx[:n]]`` for B (·, m), every column at once (the substitution
    runs over whole rows of the m columns). Y (≥ n, m) scratch."""
    m = B.shape[1]
    for i in range(n):
        r = idx[i]
        for c in range(m):
            Y[i, c] = B[r, c]
    cholesky_solve(L, n, Y)
    for i in range(n):
        r = idx[i]
        for c in range(m):
            out[r, c] = -Y[i, c]


@jit
def _quad_value(H, g, x, n):
    """``xᵀ g + ½ xᵀ H x``."""
    v = 0.0
    for i in range(n):
        hx = 0.0
        for j in range(n):
            hx += H[i, j] * x[j]
        v += x[i] * (g[i] + 0.5 * hx)
    return v


@jit
def box_qp_kernel(H, g, lower, upper, x0, x, free, L, idx, work):
    """Projected-Newton box QP, the algorithm of :func:`solvers.box_qp.box_qp` (default options).

    Writes the solution into ``x`` (n,), the free mask into ``free`` (n,) bool, the lower Cholesky
    factor of ``H[free][:, free]`` into ``L`` (valid when the returned ``nfree > 0``) and the free
    indices in order into ``idx[:nfree]`` (int64). ``work`` (≥ 4, n) scratch. Returns
    ``(status, nfree)``."""
    n = g.shape[0]
    sol = work[0]
    grad = work[1]
    search = work[2]
    xc = work[3]
    for i in range(n):
        idx[i] = i
    # fast path: convex and the unconstrained minimiser is inside the box
    if cholesky(H, idx, n, L, 0.0) > 0.0:
        for i in range(n):
            x[i] = -g[i]
        cholesky_solve(L, n, x)
        inside = True
        for i in range(n):
            if not (x[i] >= lower[i] and x[i] <= upper[i]):
                inside = False
        if inside:
            for i in range(n):
                free[i] = True
            return INTERIOR, n
    for i in range(n):
        x[i] = min(max(x0[i], lower[i]), upper[i])
    value = _quad_value(H, g, x, n)
    clamped = np.zeros(n, dtype=np.bool_)
    old_clamped = np.zeros(n, dtype=np.bool_)
    have_chol = False
    nfree = n
    status = MAX_ITER
    old_value = 0.0
    max_iter = 100
    for it in range(max_iter):
        if it > 0 and (old_value - value) < 1e-8 * abs(old_value):
            status = NO_IMPROVEMENT
            break
        old_value = value
        for i in range(n):
            s = g[i]
            for j in range(n):
                s += H[i, j] * x[j]
            grad[i] = s
        changed = False
        nfree = 0
        for i in range(n):
            old_clamped[i] = clamped[i]
            c = (x[i] <= lower[i] and grad[i] > 0.0) or (x[i] >= upper[i] and grad[i] < 0.0)
            clamped[i] = c
            free[i] = not c
            if c != old_clamped[i]:
                changed = True
            if not c:
                idx[nfree] = i
                nfree += 1
        if nfree == 0:
            have_chol = False
            status = ALL_CLAMPED
            break
        if it == 0 or changed or not have_chol:
            have_chol = cholesky(H, idx, nfree, L, 0.0) > 0.0
            if not have_chol:
                status = HESSIAN_NOT_PD
                break
        gn = 0.0
        for j in range(nfree):
            gn += grad[idx[j]] * grad[idx[j]]
        if np.sqrt(gn) < 1e-8:
            status = SMALL_GRADIENT
            break
        # Newton step on the free dims, clamped dims stay
        for j in range(nfree):
            i = idx[j]
            s = g[i]
            for m in range(n):
                if clamped[m]:
                    s += H[i, m] * x[m]
            sol[j] = s
        cholesky_solve(L, nfree, sol)
        for i in range(n):
            search[i] = 0.0
        for j in range(nfree):
            search[idx[j]] = -sol[j] - x[idx[j]]
        sdotg = 0.0
        for i in range(n):
            sdotg += search[i] * grad[i]
        if sdotg >= 0.0:
            status = NO_DESCENT
            break
        step = 1.0
        for i in range(n):
            xc[i] = min(max(x[i] + step * search[i], lower[i]), upper[i])
        vc = _quad_value(H, g, xc, n)
        failed = False
        while (vc - value) / (step * sdotg) < 0.1:
            step *= 0.6
            if step < 1e-22:
                failed = True
                break
            for i in range(n):
                xc[i] = min(max(x[i] + step * search[i], lower[i]), upper[i])
            vc = _quad_value(H, g, xc, n)
        if failed:
            status = MAX_LINESEARCH
            break
        for i in range(n):
            x[i] = xc[i]
        value = vc
    if not have_chol:      # all clamped, or H_ff not positive definite: no gains
        return status, 0
    return status, nfree


@jit
def backward_pass_kernel(Fx, Fu, lx, lu, lxx, lxu, luu, VxN, VxxN, C, T, gaps, mu, box, lower, upper, k_warm,
                         K, k, Qu_out, Quuk_out, Vx_out, Vxx_out):
    """Riccati recursion of :meth:`solvers.ilqr.ILQR._backward_pass` over the N knots.

    Fx (N, ndx, ndx), Fu (N, ndx, nu), lx (N, ndx), lu (N, nu), lxx (N, ndx, ndx), lxu (N, ndx, nu),
    luu (N, nu, nu): dynamics Jacobians and running-cost derivatives; VxN (ndx,), VxxN (ndx, ndx):
    terminal cost; C (N, R, ndx), T (N, R, nz, nz): the dynamics second-order tensor in factored
    form ``F2[n, i] = Σ_r C[n, r, i] T[n, r]`` (DDP curvature ``V'_x · F2 = Σ_r (C V'_x)_r T_r``,
    :class:`solvers.integrators.base.DynamicsDerivatives`), or arrays with N = 0 for none; gaps (N+1, ndx) or (0, ndx) for a feasible iterate; mu
    regularisation; box: use the box QP with ``lower <= k <= upper`` (N, nu) (bounds minus the
    current controls); k_warm (N, nu) the box-QP starting point. Outputs K (N, nu, ndx), k (N, nu),
    Qu_out, Quuk_out (N, nu), Vx_out (N+1, ndx), Vxx_out (N+1, ndx, ndx), each knot's written in
    place as the recursion goes (no scratch copies; knot t - 1 reads V_x, V_xx from Vx_out[t],
    Vxx_out[t]), so after a failure at knot t the outputs of knot t are partly written.
    Returns ``(status, t)``: OK, or the failure code and the knot where it happened."""
    N, ndx, nu = Fu.shape
    nz = ndx + nu
    curvature = T.shape[0] > 0
    R = T.shape[1]
    lam = np.empty(R)
    has_gaps = gaps.shape[0] > 0
    Vx = VxN.copy()
    Vxx = VxxN.copy()
    if has_gaps:
        for i in range(ndx):
            s = Vx[i]
            for j in range(ndx):
                s += Vxx[i, j] * gaps[N, j]
            Vx[i] = s
    Vx_out[N] = Vx
    Vxx_out[N] = Vxx
    FxV = np.empty((ndx, ndx))
    FuV = np.empty((nu, ndx))
    Qx = np.empty(ndx)
    Qxx = np.empty((ndx, ndx))
    Qux = np.empty((nu, ndx))
    Quu = np.empty((nu, nu))
    Quu_reg = np.empty((nu, nu))
    H = np.empty(nz * nz)
    kt = np.empty(nu)
    QuuK = np.empty((nu, ndx))
    L = np.empty((nu, nu))
    work = np.empty((4, nu))
    free = np.empty(nu, dtype=np.bool_)
    idx = np.empty(nu, dtype=np.int64)
    Vx_new = np.empty(ndx)
    VKa = np.empty((ndx, ndx))
    Y = np.empty((nu, ndx))
    for t in range(N - 1, -1, -1):
        # knot t's results are written where they are returned: K[t], Qu_out[t], Quuk_out[t], and
        # V_x, V_xx into Vx_out[t], Vxx_out[t], which the next knot (t - 1) reads as its Vx, Vxx
        Kt = K[t]
        Qu = Qu_out[t]
        Quuk = Quuk_out[t]
        Vx_t = Vx_out[t]
        Vxx_t = Vxx_out[t]
        # the (ndx³) products through BLAS (numba's np.dot): ≈ 1.4× the loops at ndx = 14, 3× at
        # ndx = 72 (Atlas), where they are most of the pass
        np.dot(Fx[t].T, Vxx, FxV)
        np.dot(Fu[t].T, Vxx, FuV)
        for i in range(ndx):
            Qx[i] = lx[t, i]
        for i in range(nu):
            Qu[i] = lu[t, i]
        for j in range(ndx):
            w = Vx[j]
            for i in range(ndx):
                Qx[i] += Fx[t, j, i] * w
            for i in range(nu):
                Qu[i] += Fu[t, j, i] * w
        np.dot(FxV, Fx[t], Qxx)
        np.dot(FuV, Fx[t], Qux)
        np.dot(FuV, Fu[t], Quu)
        lxx_t = lxx[t]
        lxu_t = lxu[t]
        luu_t = luu[t]
        for a in range(ndx):
            for b in range(ndx):
                Qxx[a, b] += lxx_t[a, b]
        for a in range(nu):
            for b in range(ndx):
                Qux[a, b] += lxu_t[b, a]
            for b in range(nu):
                Quu[a, b] += luu_t[a, b]
        if curvature:
            Ct = C[t]
            Tt = T[t]
            for r in range(R):
                s = 0.0
                for i in range(ndx):
                    s += Ct[r, i] * Vx[i]
                lam[r] = s
            for a in range(nz * nz):
                H[a] = 0.0
            for r in range(R):
                w = lam[r]
                if w != 0.0:
                    for a in range(nz):
                        for b in range(nz):
                            H[a * nz + b] += w * Tt[r, a, b]
            for a in range(ndx):
                for b in range(ndx):
                    Qxx[a, b] += H[a * nz + b]
            for a in range(nu):
                for b in range(ndx):
                    Qux[a, b] += H[(ndx + a) * nz + b]
                for b in range(nu):
                    Quu[a, b] += H[(ndx + a) * nz + ndx + b]
        for i in range(nu):
            for j in range(i + 1):
                s = 0.5 * (Quu[i, j] + Quu[j, i])
                Quu[i, j] = s
                Quu[j, i] = s
        for i in range(nu):
            for j in range(nu):
                Quu_reg[i, j] = Quu[i, j]
            Quu_reg[i, i] += mu
        for i in range(nu):
            for j in range(ndx):
                Kt[i, j] = 0.0
        if box:
            status, nfree = box_qp_kernel(Quu_reg, Qu, lower[t], upper[t], k_warm[t], kt, free, L, idx, work)
            if status == HESSIAN_NOT_PD:
                return NOT_PD, t
            if nfree > 0:
                _gain_rows(L, nfree, Qux, idx, Y, Kt)
        else:
            for i in range(nu):
                idx[i] = i
            for i in range(nu):
                for j in range(nu):
                    if not np.isfinite(Quu_reg[i, j]):
                        return NONFINITE_QUU, t
            if not cholesky(Quu_reg, idx, nu, L, 0.0) > 0.0:
                return NOT_PD, t
            for i in range(nu):
                kt[i] = -Qu[i]
            cholesky_solve(L, nu, kt)
            _gain_rows(L, nu, Qux, idx, Y, Kt)
        # V_x = Q_x + Kᵀ Q_uu k + Kᵀ Q_u + Q_uxᵀ k ; V_xx = Q_xx + Kᵀ Q_uu K + Kᵀ Q_ux + Q_uxᵀ K
        for i in range(nu):
            s = 0.0
            for j in range(nu):
                s += Quu[i, j] * kt[j]
            Quuk[i] = s
        np.dot(Quu, Kt, QuuK)
        for i in range(nu):             # QuuK <- Q_uu K + 2 Q_ux (the sum Kᵀ multiplies)
            for b in range(ndx):
                QuuK[i, b] += 2.0 * Qux[i, b]
        for a in range(ndx):
            s = Qx[a]
            for i in range(nu):
                s += Kt[i, a] * (Quuk[i] + Qu[i]) + Qux[i, a] * kt[i]
            Vx_new[a] = s
        # V_xx = sym(Q_xx + Kᵀ Q_uu K + Kᵀ Q_ux + Q_uxᵀ K) = sym(Q_xx + Kᵀ (Q_uu K + 2 Q_ux)): the
        # symmetric part of Q_uxᵀ K is that of Kᵀ Q_ux, so one ndx × nu × ndx product instead of two
        # (both triangles of Q_xx enter: a cost Hessian need not be symmetric, and a NaN in either
        # triangle must reach V_xx, where the pass reports it)
        np.dot(Kt.T, QuuK, VKa)
        finite = True
        for a in range(ndx):
            for b in range(a + 1):
                s = 0.5 * (Qxx[a, b] + Qxx[b, a]) + 0.5 * (VKa[a, b] + VKa[b, a])
                Vxx_t[a, b] = s
                Vxx_t[b, a] = s
                finite &= np.isfinite(s)
        for a in range(ndx):
            s = Vx_new[a]
            if has_gaps:
                for j in range(ndx):
                    s += Vxx_t[a, j] * gaps[t, j]
            Vx_t[a] = s
            finite &= np.isfinite(s)
        if not finite:
            return NONFINITE_V, t
        for i in range(nu):
            k[t, i] = kt[i]
        Vx = Vx_t
        Vxx = Vxx_t
    return OK, -1


@jit
def gradient_kernel(Fx, Fu, lx, lu, lxN, g):
    """Adjoint recursion of :meth:`solvers.ilqr.ILQR._gradient_norm`: ``g_t = l_u + Fuᵀ λ_{t+1}``,
    ``λ_t = l_x + Fxᵀ λ_{t+1}``, ``λ_N = l_N,x``; writes ``g`` (N, nu)."""
    N, ndx, nu = Fu.shape
    lam = lxN.copy()
    new = np.empty(ndx)
    for t in range(N - 1, -1, -1):
        for i in range(nu):
            s = lu[t, i]
            for j in range(ndx):
                s += Fu[t, j, i] * lam[j]
            g[t, i] = s
        for i in range(ndx):
            s = lx[t, i]
            for j in range(ndx):
                s += Fx[t, j, i] * lam[j]
            new[i] = s
        for i in range(ndx):
            lam[i] = new[i]


MESSAGES = {NOT_PD: "Q_uu + mu I not positive definite at knot {t}", NONFINITE_QUU: "non-finite Q_uu at knot {t}",
            NONFINITE_V: "non-finite value function at knot {t}"}
