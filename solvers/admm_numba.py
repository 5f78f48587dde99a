"""Compiled ADMM iterations of the constrained solver's QP (:class:`solvers.admm_qp.StagewiseAdmmQP`).

While the penalty ρ (and the Riccati pass's μ) stay the same, the augmented LQ problem of every
ADMM iteration has the same Hessians and only new gradients, so its Riccati recursion keeps the
gains ``K``, the factor of ``Q_uu + μI`` and ``V_xx`` of the last full pass and re-runs only the
vector part (``k``, ``V_x``), as mim-solvers' CSQP does; the linear rollout, the projection onto
the bounds, the multiplier update and the residuals follow in the same call, so a run of ADMM
iterations at one ρ is one compiled call. With ``K = −Q̃⁻¹ Q_ux`` and ``k = −Q̃⁻¹ Q_u``
(``Q̃ = Q_uu + μI``) the value gradient ``V_x = Q_x + Kᵀ Q_uu k + Kᵀ Q_u + Q_uxᵀ k`` becomes
``V_x = Q_x + Kᵀ (Q_u − μ k)`` (``Q_uxᵀ k = −Kᵀ Q̃ k = Kᵀ Q_u``), which needs neither ``Q_uu`` nor
``Q_ux``. The iteration itself (OSQP's): :mod:`solvers.admm_qp`, which keeps the NumPy form as the
reference (``tests/solvers/constraints/test_admm_numba.py`` runs both).

Importing this module imports numba; :mod:`solvers.admm_qp` imports it only when it is used.
"""

from __future__ import annotations

import numpy as np

from dynamics.kernels.dense import cholesky, cholesky_solve
from dynamics.kernels.jit import jit, jit_inline

# status of admm_iterations
NOT_CONVERGED = 0     # the iterations asked for ran without meeting the tolerances
CONVERGED = 1
NON_FINITE = 2        # the step became non-finite
# status of factor_quu
OK = 0
NOT_PD = 1


@jit
def factor_quu(Fu, luu, Vxx, mu, L, Qinv):
    """``L[t]`` (N, nu, nu), lower: the Cholesky factor of ``Q̃ = sym(l_uu + Fuᵀ V'_xx Fu) + μI`` of
    each knot, the matrix the last full Riccati pass factorised (same operations, same order), and
    ``Qinv[t]`` (N, nu, nu) = Q̃⁻¹ from it, symmetrised: the ADMM iterations' ``k = −Q̃⁻¹ Q_u`` is
    then a matrix-vector product, not two substitutions (serial chains of dependent operations).
    Fu (N, ndx, nu), luu (N, nu, nu) augmented cost Hessian, Vxx (N+1, ndx, ndx) of that pass.
    Returns ``(status, t)``."""
    N, ndx, nu = Fu.shape
    FuV = np.empty((nu, ndx))
    Quu = np.empty((nu, nu))
    idx = np.arange(nu)
    for t in range(N):
        np.dot(Fu[t].T, Vxx[t + 1], FuV)
        np.dot(FuV, Fu[t], Quu)
        for a in range(nu):
            for b in range(nu):
                Quu[a, b] += luu[t, a, b]
        for i in range(nu):
            for j in range(i + 1):
                s = 0.5 * (Quu[i, j] + Quu[j, i])
                Quu[i, j] = s
                Quu[j, i] = s
            Quu[i, i] += mu
        if not cholesky(Quu, idx, nu, L[t], 0.0) > 0.0:
            return NOT_PD, t
        Qi = Qinv[t]
        for a in range(nu):
            for b in range(nu):
                Qi[a, b] = 1.0 if a == b else 0.0
        cholesky_solve(L[t], nu, Qi)
        for a in range(nu):
            for b in range(a):
                s = 0.5 * (Qi[a, b] + Qi[b, a])
                Qi[a, b] = s
                Qi[b, a] = s
    return OK, 0


@jit
def _multiplier_row(y, rho, g, z, v):
    """``v = y + ρ (g − z)`` for one knot's rows."""
    for r in range(v.shape[0]):
        v[r] = y[r] + rho[r] * (g[r] - z[r])


@jit_inline
def _add_transpose_times(G, v, out):
    """``out += Gᵀ v`` for G (m, n), v (m,), out (n,): a sum of G's contiguous rows (vectorises);
    inlined (a call per knot and product costs as much as the product on a small robot)."""
    m, n = G.shape
    r = 0
    # four rows per sweep of out: one load and store of out[i] per four multiply-adds (the sweep
    # row by row is bound by them); the sum's order is the row-by-row one's (a zero entry of v
    # adds an exact zero)
    while r + 4 <= m:
        w0, w1, w2, w3 = v[r], v[r + 1], v[r + 2], v[r + 3]
        if w0 != 0.0 or w1 != 0.0 or w2 != 0.0 or w3 != 0.0:
            for i in range(n):
                o = out[i]
                o += G[r, i] * w0
                o += G[r + 1, i] * w1
                o += G[r + 2, i] * w2
                o += G[r + 3, i] * w3
                out[i] = o
        r += 4
    while r < m:
        w = v[r]
        if w != 0.0:
            for i in range(n):
                out[i] += G[r, i] * w
        r += 1
    return out


@jit
def _transpose_times(G, v, out):
    """``out = Gᵀ v`` for G (m, n), v (m,)."""
    for i in range(out.shape[0]):
        out[i] = 0.0
    return _add_transpose_times(G, v, out)


@jit
def _max_abs(a):
    m = 0.0
    for i in range(a.shape[0]):
        x = abs(a[i])
        if x > m:
            m = x
    return m


@jit_inline
def _rollout(gaps, k, KT, FxT, FuT, dx, du):
    """The linear rollout ``dx_0 = f̄_0``, ``du_t = k_t + K_t dx_t``, ``dx_{t+1} = Fx_t dx_t + Fu_t du_t
    + f̄_{t+1}`` into dx (N+1, ndx), du (N, nu), from gaps (N+1, ndx), k (N, nu) and the transposed
    (C-contiguous) KT (N, ndx, nu), FxT (N, ndx, ndx), FuT (N, nu, ndx). Returns the sum of the
    step's entries (non-finite exactly when the step is)."""
    N, nu = k.shape
    ndx = dx.shape[1]
    finite = 0.0
    for i in range(ndx):
        dx[0, i] = gaps[0, i]
    for t in range(N):
        for i in range(nu):
            du[t, i] = k[t, i]
        _add_transpose_times(KT[t], dx[t], du[t])
        for i in range(ndx):
            dx[t + 1, i] = gaps[t + 1, i]
        _add_transpose_times(FxT[t], dx[t], dx[t + 1])
        _add_transpose_times(FuT[t], du[t], dx[t + 1])
        for i in range(nu):
            finite += du[t, i]
        for i in range(ndx):
            finite += dx[t + 1, i]
    return finite


@jit
def linear_rollout(gaps, k, KT, FxT, FuT, dx, du):
    """:func:`_rollout` as a call of its own (the augmented-Lagrangian solver's step, one per
    Riccati pass); returns the sum of the step's entries."""
    return _rollout(gaps, k, KT, FxT, FuT, dx, du)


@jit
def admm_iterations(Fx, Fu, FxT, FuT, gaps, K, KT, Qinv, Vxx, mu, lx, lu, lxN, Gx, Gu, GxT, GuT, g, lower, upper, rho, near,
                    sigma, alpha, n_iter, eps_abs, eps_rel, scale_q, y, z, dx, du, k, w, out):
    """Up to ``n_iter`` ADMM iterations at fixed ρ and μ, in place.

    Fx (N, ndx, ndx), Fu (N, ndx, nu), gaps (N+1, ndx): the linearised dynamics; K (N, nu, ndx),
    Qinv (N, nu, nu) (:func:`factor_quu`), Vxx (N+1, ndx, ndx): the last full Riccati pass at μ;
    lx (N, ndx), lu (N, nu), lxN (ndx,): the cost gradients; Gx (N+1, m, ndx), Gu (N+1, m, nu),
    g (N+1, m): the constraints' Jacobians and values, lower/upper (N+1, m) their bounds; rho
    (N+1, m) the per-row penalty; near (N+1, m) bool: the rows the ρ update measures; sigma the
    proximal weight, alpha the over-relaxation; scale_q: a floor of the dual residual's scale
    ``max(‖Gᵀy‖∞, scale_q)`` (:meth:`solvers.admm_qp.StagewiseAdmmQP.solve`'s ``dual_scale``).
    FxT, FuT, KT, GxT, GuT: the same matrices with their last two axes swapped (C-contiguous), so
    that every matrix-vector product of the iteration is a sum of contiguous matrix rows scaled by
    one entry of the vector (no serial reduction: the loops vectorise). State (in/out): y, z (N+1,
    m), dx (N+1, ndx), du (N, nu); outputs: k (N, nu) the last feed-forward, w (N+1, m) the last
    ``g + G d``, out (6,): primal and dual residuals, their scales, and the primal and dual
    residuals over the ``near`` rows (for the ρ update), all of the last iteration. The dual
    residual and its scale (``Gᵀ dz``, ``Gᵀ y``: as costly as the Riccati pass's constraint
    terms) are computed only where the test can pass — the primal residual within its tolerance —
    and at the last iteration: the same iterations stop as when they are computed every time.
    Returns ``(iterations, status)``."""
    N, ndx, nu = Fu.shape
    M = g.shape[1]
    v = np.empty(M)
    ax = np.empty(ndx)
    au = np.empty(nu)
    Vx = np.empty(ndx)
    Qx = np.empty(ndx)
    Qu = np.empty(nu)
    kt = np.empty(nu)
    gx = np.empty(ndx)
    gu = np.empty(nu)
    dz = np.empty((N + 1, M))
    dzn = np.empty(M)
    # V_xx f̄ of every knot: the same in every iteration of the call (V_xx and the gaps are fixed)
    Vf = np.empty((N + 1, ndx))
    for t in range(N + 1):
        for a in range(ndx):
            s = 0.0
            for j in range(ndx):
                s += Vxx[t, a, j] * gaps[t, j]
            Vf[t, a] = s
    for it in range(1, n_iter + 1):
        # vector part of the Riccati pass: V_x, k
        _multiplier_row(y[N], rho[N], g[N], z[N], v)
        _transpose_times(Gx[N], v, ax)
        for i in range(ndx):
            Vx[i] = lxN[i] + ax[i] - sigma * dx[N, i] + Vf[N, i]
        for t in range(N - 1, -1, -1):
            _multiplier_row(y[t], rho[t], g[t], z[t], v)
            _transpose_times(Gx[t], v, ax)
            _transpose_times(Gu[t], v, au)
            for i in range(ndx):
                Qx[i] = lx[t, i] + ax[i] - sigma * dx[t, i]
            for i in range(nu):
                Qu[i] = lu[t, i] + au[i] - sigma * du[t, i]
            _add_transpose_times(Fx[t], Vx, Qx)
            _add_transpose_times(Fu[t], Vx, Qu)
            _transpose_times(Qinv[t], Qu, kt)       # Q̃⁻¹ Q_u (Q̃⁻¹ symmetric)
            for i in range(nu):
                kt[i] = -kt[i]
                k[t, i] = kt[i]
                Qu[i] -= mu * kt[i]
            for a in range(ndx):
                Vx[a] = Qx[a] + Vf[t, a]
            _add_transpose_times(K[t], Qu, Vx)
        finite = _rollout(gaps, k, KT, FxT, FuT, dx, du)
        if not np.isfinite(finite):
            return it, NON_FINITE
        # splitting variables, multipliers and the primal residual
        r_prim = 0.0
        scale_p = 0.0
        r_dual = 0.0
        scale_d = scale_q
        rp_near = 0.0
        rd_near = 0.0
        last = it == n_iter
        for t in range(N + 1):
            for r in range(M):
                w[t, r] = g[t, r]
            _add_transpose_times(GxT[t], dx[t], w[t])
            if t < N:
                _add_transpose_times(GuT[t], du[t], w[t])
            for r in range(M):
                s = w[t, r]
                zp = z[t, r]
                wr = alpha * s + (1.0 - alpha) * zp
                zu = wr + y[t, r] / rho[t, r]
                zn = min(max(zu, lower[t, r]), upper[t, r])
                z[t, r] = zn
                # y + ρ (wr − z) is exactly 0 where the projection did not clip (z = wr + y/ρ)
                y[t, r] = 0.0 if zn == zu else y[t, r] + rho[t, r] * (wr - zn)
                dz[t, r] = rho[t, r] * (zn - zp)
                e = abs(s - zn)
                r_prim = max(r_prim, e)
                scale_p = max(scale_p, abs(s), abs(zn))
                if last and near[t, r]:
                    rp_near = max(rp_near, e)
        primal_met = r_prim <= eps_abs + eps_rel * scale_p
        if primal_met or last:
            # the dual residual and its scale
            for t in range(N + 1):
                r_dual = max(r_dual, _max_abs(_transpose_times(Gx[t], dz[t], gx)))
                scale_d = max(scale_d, _max_abs(_transpose_times(Gx[t], y[t], gx)))
                if t < N:
                    r_dual = max(r_dual, _max_abs(_transpose_times(Gu[t], dz[t], gu)))
                    scale_d = max(scale_d, _max_abs(_transpose_times(Gu[t], y[t], gu)))
                if last:
                    for r in range(M):
                        dzn[r] = dz[t, r] if near[t, r] else 0.0
                    rd_near = max(rd_near, _max_abs(_transpose_times(Gx[t], dzn, gx)))
                    if t < N:
                        rd_near = max(rd_near, _max_abs(_transpose_times(Gu[t], dzn, gu)))
        out[0], out[1], out[2], out[3], out[4], out[5] = r_prim, r_dual, scale_p, scale_d, rp_near, rd_near
        if primal_met and r_dual <= eps_abs + eps_rel * scale_d:
            return it, CONVERGED
    return n_iter, NOT_CONVERGED


@jit
def costates(Fx, Fu, lx, lu, Gx, Gu, y, lam):
    """The costates ``λ_t = h_x,t + Fx_tᵀ λ_{t+1}`` into lam (N+1, ndx), from ``lam[N]`` as given,
    and the dual residual ``max_t ‖h_u,t + Fu_tᵀ λ_{t+1}‖∞``, with the Lagrangian's gradients
    ``h_x,t = l_x,t + Gx_tᵀ y_t``, ``h_u,t = l_u,t + Gu_tᵀ y_t``: lx (N, ndx), lu (N, nu) the
    cost's, Gx (≥N, m, ndx), Gu (≥N, m, nu) the constraints' Jacobians, y (≥N, m) their
    multipliers, Fx (N, ndx, ndx), Fu (N, ndx, nu)."""
    N, ndx, nu = Fu.shape
    dual = 0.0
    r = np.empty(nu)
    for t in range(N - 1, -1, -1):
        # sums of contiguous rows, in the order of the dot products over j
        for i in range(nu):
            r[i] = lu[t, i]
        _add_transpose_times(Gu[t], y[t], r)
        dual = max(dual, _max_abs(_add_transpose_times(Fu[t], lam[t + 1], r)))
        for i in range(ndx):
            lam[t, i] = lx[t, i]
        _add_transpose_times(Gx[t], y[t], lam[t])
        _add_transpose_times(Fx[t], lam[t + 1], lam[t])
    return dual


@jit_inline
def _zero_row(a):
    """Whether every entry of a (n,) is zero."""
    for i in range(a.shape[0]):
        if a[i] != 0.0:
            return False
    return True


@jit
def augmented_hessians(lxx, lxu, luu, lxxN, Gx, Gu, rho, sigma, axx, axu, auu, axxN):
    """The QP's Hessians for the per-row penalty ρ (N+1, m) and the proximal weight σ:
    ``axx = l_xx + Gxᵀ ρ Gx + σI``, ``axu = l_xu + Gxᵀ ρ Gu``, ``auu = l_uu + Guᵀ ρ Gu + σI``
    (N knots) and ``axxN = l_xx,N + Gx_Nᵀ ρ Gx_N + σI``: lxx (N, ndx, ndx), lxu (N, ndx, nu), luu
    (N, nu, nu), lxxN (ndx, ndx) the cost's, Gx (N+1, m, ndx), Gu (N+1, m, nu) the Jacobians
    (the products by BLAS, as NumPy's; those with Gx over its rows before the trailing zero ones)."""
    N, ndx, nu = lxu.shape
    m = Gx.shape[1]
    rGu = np.empty((m, nu))
    pxx = np.empty((ndx, ndx))
    pxu = np.empty((ndx, nu))
    puu = np.empty((nu, nu))
    for t in range(N + 1):
        # the rows after the last one with a non-zero Gx (the control box's, appended last; the
        # padding) add only exact zeros to the x products: those run over the rows before, mx of
        # m (the same terms; BLAS may group a sum of another length differently, by rounding only:
        # the closed loops of docs/mpc.md came out bitwise the same)
        mx = m
        while mx > 0 and _zero_row(Gx[t, mx - 1]):
            mx -= 1
        Gxt = np.empty((mx, ndx))
        rGx = np.empty((mx, ndx))
        for r in range(mx):
            for i in range(ndx):
                Gxt[r, i] = Gx[t, r, i]
                rGx[r, i] = rho[t, r] * Gx[t, r, i]
        for r in range(m):
            for i in range(nu):
                rGu[r, i] = rho[t, r] * Gu[t, r, i]
        GxT = Gxt.T
        np.dot(GxT, rGx, pxx)
        if t == N:
            for i in range(ndx):
                for j in range(ndx):
                    axxN[i, j] = lxxN[i, j] + pxx[i, j]
                axxN[i, i] += sigma
            break
        np.dot(GxT, rGu[:mx], pxu)
        np.dot(Gu[t].T, rGu, puu)
        for i in range(ndx):
            for j in range(ndx):
                axx[t, i, j] = lxx[t, i, j] + pxx[i, j]
            axx[t, i, i] += sigma
            for j in range(nu):
                axu[t, i, j] = lxu[t, i, j] + pxu[i, j]
        for i in range(nu):
            for j in range(nu):
                auu[t, i, j] = luu[t, i, j] + puu[i, j]
            auu[t, i, i] += sigma


@jit
def rho_rows(y, w, z, lo_near, hi_near, bounded, equality, rho, inactive_rho, rho_min, near, r):
    """:meth:`solvers.admm_qp.StagewiseAdmmQP._rho_rows` in one pass (its NumPy form the
    reference): per row (N+1, m) the penalty ``r`` — 10³ ρ on equality rows, ρ on inequality rows
    near a bound (a non-zero multiplier y, or the linearised value w or the splitting variable z
    at or past ``lo_near``/``hi_near``), ``inactive_rho`` ρ on the others, ``rho_min`` on unbounded
    rows, at least ``rho_min`` — and into ``near`` the near inequality rows."""
    for t in range(y.shape[0]):
        for i in range(y.shape[1]):
            lo, hi, wi, zi = lo_near[t, i], hi_near[t, i], w[t, i], z[t, i]
            nr = y[t, i] != 0 or wi <= lo or wi >= hi or zi <= lo or zi >= hi
            eq = equality[t, i]
            near[t, i] = nr and not eq
            if eq:
                v = 1e3 * rho
            elif nr:
                v = rho
            else:
                v = inactive_rho * rho
            if not bounded[t, i]:
                v = rho_min
            if v < rho_min:         # (NaN stays NaN, as np.maximum leaves it)
                v = rho_min
            r[t, i] = v
