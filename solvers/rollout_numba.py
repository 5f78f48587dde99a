"""Compiled forward pass: the whole batched closed-loop rollout of :meth:`ILQR._simulate` (S step
sizes × N knots) in one numba call, for the semi-implicit Euler integrator on any backend that hands
its packed model to compiled solver loops (:meth:`dynamics.Backend.compiled_forward_dynamics`: the
``numba`` backend).

For each candidate ``s`` (step size ``α_s``) and knot ``t``::

    x̂_t = x⁺_{t-1}                         (x⁺_{-1} = x0; single shooting, gaps None)
    x̂_t = x⁺_{t-1} ⊕ (α_s - 1) f̄_t          (FDDP with gaps f̄, also at t = 0 and t = N)
    u_t  = us_t + α_s k_t + K_t (x̂_t ⊖ xs_t)  (clipped to the bounds when clip)
    x⁺_t = f(x̂_t, u_t): τ = B u - D v - K_s (q - q_spring), a = ABA(q, v, τ),
           v⁺ = v + dt_t a, q⁺ = q ⊕ dt_t v⁺

A non-finite ``u`` marks the candidate failed and is replaced by ``us_t``; a non-finite ``x⁺``
marks it failed and is replaced by ``x̂_t`` (the batch stays finite), as in the Python loop.

Every piece of physics is the kernel library's (:mod:`dynamics.kernels`): ABA
(:func:`~dynamics.kernels.aba.aba_range`) on the packed model the backend hands over, the torque
(:func:`~dynamics.kernels.passive.joint_torques`), the Euler step
(:func:`~dynamics.kernels.integrators.euler_step`) and ``⊕``, ``⊖`` (:mod:`dynamics.kernels.lie`);
this module holds the policy and the loop only, binds no backend (any number of backends can use
it in one process), and its result agrees with the Python path to rounding. The candidates are
split into one contiguous slice per worker thread.

Importing this module imports numba and the kernel library (:mod:`solvers.forward_pass` imports it
only for a compiled solver); the kernel is compiled (or loaded from numba's on-disk cache) on the
first :meth:`CompiledRollout.run` or by :meth:`CompiledRollout.warmup`.
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from dynamics.kernels.aba import aba_range
from dynamics.kernels.aba_lanes import LANES, aba_lanes, lane_rows, lanes_supported
from dynamics.kernels.integrators import all_finite, euler_step
from dynamics.kernels.jit import jit, jit_inline
from dynamics.kernels.lie import difference_x, integrate_q
from dynamics.kernels.passive import joint_torques
from dynamics.kernels.scratch import THREAD_PAD_ROWS
from dynamics.kernels.threaded_batch import call_at, kernel_address, pack_arguments, run_threaded_parts
from dynamics.worker_threads import use_threads


# ---------------------------------------------------------------- kernels
@intrinsic
def cycles(typingctx):
    """The processor's cycle counter (LLVM's ``readcyclecounter``: x86 ``rdtsc``; 0 where the target
    has none): what a compiled loop splits its own wall time by, between stages of one call."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


@jit
def start_state(joints, nq, xn, alpha, gaps, t, d, out):
    """``x̂ = xn`` (no gaps: ``gaps`` (0, ndx)) or ``xn ⊕ (α - 1) gaps[t]`` into ``out`` (nx,); d
    (ndx,) scratch."""
    if gaps.shape[0] == 0:
        for i in range(xn.shape[0]):
            out[i] = xn[i]
        return
    nv = gaps.shape[1] // 2
    for i in range(2 * nv):
        d[i] = (alpha - 1.0) * gaps[t, i]
    integrate_q(joints, xn, d, out)
    for i in range(nv):
        out[nq + i] = xn[nq + i] + d[nv + i]


@jit
def feedback_control(joints, nq, x, xs_t, us_t, k_t, K_t, alpha, clip, lo, hi, d, u) -> bool:
    """``u = us_t + α k_t + K_t (x ⊖ xs_t)`` into u (nu,), clipped to ``[lo, hi]`` when clip; d
    (ndx,) scratch. A non-finite u is replaced by ``us_t``; returns whether it was finite."""
    difference_x(joints, nq, xs_t, x, d)
    for i in range(u.shape[0]):
        fb = 0.0
        for j in range(d.shape[0]):
            fb += K_t[i, j] * d[j]
        ui = us_t[i] + alpha * k_t[i] + fb
        if clip:
            ui = lo[i] if ui < lo[i] else ui
            ui = hi[i] if ui > hi[i] else ui
        u[i] = ui
    if all_finite(u):
        return True
    for i in range(u.shape[0]):
        u[i] = us_t[i]
    return False


@jit
def knot_input(joints, nq, x, xs_t, us_t, k_t, K_t, alpha, clip, lo, hi, passive, d, u, U_st, q_r, v_r, tau_r) -> bool:
    """One candidate at one knot: its control (:func:`feedback_control`) into u and ``U_st`` (nu,),
    its state x split into ``q_r`` (nq,) and ``v_r`` (nv,), and the joint torques from u and the
    passive forces (:func:`~dynamics.kernels.passive.joint_torques`) into ``tau_r`` (nv,); returns
    whether the control was finite."""
    B, b_identity, damping, damped, springs, stiffness, qspring = passive
    finite = feedback_control(joints, nq, x, xs_t, us_t, k_t, K_t, alpha, clip, lo, hi, d, u)
    for i in range(u.shape[0]):
        U_st[i] = u[i]
    for i in range(nq):
        q_r[i] = x[i]
    for i in range(v_r.shape[0]):
        v_r[i] = x[nq + i]
    joint_torques(u, B, b_identity, damping, damped, springs, stiffness, qspring, q_r, v_r, tau_r)
    return finite


def input_rows(S: int) -> int:
    """Rows of the per-candidate ABA inputs and outputs for S candidates: the slice of worker
    thread c (of at most S) starts ``c · THREAD_PAD_ROWS`` rows after its first candidate
    (:func:`slice_rows`), so that two threads never write one cache line."""
    return S * (THREAD_PAD_ROWS + 1)


@jit
def slice_rows(S, nt, c):
    """``(s0, s1, r0)``: the candidates ``s0 <= s < s1`` of worker thread c of nt, and the row of
    candidate s0 in the per-candidate arrays (candidate s in row ``r0 + s - s0``)."""
    s0 = c * S // nt
    return s0, (c + 1) * S // nt, s0 + c * THREAD_PAD_ROWS


@jit_inline
def _rollout_slice(margs, fext, joints, passive, dts, x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok,
                   q, vt, q_ro, vt_ro, s0, s1, r0):
    """The batched rollout (module docstring) of candidates ``s0 <= s < s1`` into X (S, N+1, nx),
    U (S, N, nu), ok (S,).

    margs / fext: the backend's packed model and "no external force" array
    (:class:`dynamics.backend.CompiledForwardDynamics`); passive: the torque's terms
    (:func:`passive_args`); dts (N,) the knots' time steps. q (R, nq) and vt (2, R, nv): the ABA
    inputs (q, v, τ), candidate s in row ``r0 + s - s0`` (:func:`input_rows`); q_ro / vt_ro:
    read-only views of the same memory, passed to ``aba_range`` so that it runs the backend's own
    compiled specialisation (read-only float64 inputs)."""
    li, lf, gv, bl, bf = margs          # the packed model (dynamics.kernels.packing)
    B, b_identity, damping, damped, springs, stiffness, qspring = passive
    N = us.shape[0]
    nq, nv = qspring.shape[0], damping.shape[0]
    v = vt[0]
    tau = vt[1]
    r1 = r0 + s1 - s0
    acc = np.empty((q.shape[0], nv))
    xn = np.empty((alphas.shape[0], nq + nv))
    d = np.empty(2 * nv)
    w = np.empty(nv)
    u = np.empty(us.shape[1])
    for s in range(s0, s1):
        ok[s] = True
        for i in range(nq + nv):
            xn[s, i] = x0[i]
    for t in range(N + 1):
        for s in range(s0, s1):
            start_state(joints, nq, xn[s], alphas[s], gaps, t, d, X[s, t])
        if t == N:
            break
        for s in range(s0, s1):
            x = X[s, t]
            r = r0 + s - s0
            if not knot_input(joints, nq, x, xs[t], us[t], k[t], K[t], alphas[s], clip, lo, hi, passive, d, u, U[s, t],
                              q[r], v[r], tau[r]):
                ok[s] = False
        aba_range(li, lf, gv, bl, bf, q_ro, vt_ro[0], vt_ro[1], fext, acc, r0, r1)
        for s in range(s0, s1):
            x = X[s, t]
            if not euler_step(joints, nq, x, acc[r0 + s - s0], dts[t], w, xn[s]):
                ok[s] = False            # diverged: mark failed, keep the batch finite
                for i in range(nq + nv):
                    xn[s, i] = x[i]


@jit
def _rollout_part(margs, fext, joints, passive, dts, x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok,
                  q, vt, q_ro, vt_ro, c, nt):
    """:func:`_rollout_slice` for part ``c`` of ``nt`` of the candidates (:func:`slice_rows`): the
    candidates are independent, so the rollouts of the line search's step sizes (two per
    warm-started MPC update) run side by side, one part per worker thread
    (:func:`dynamics.kernels.threaded_batch.run_threaded_parts`)."""
    s0, s1, r0 = slice_rows(alphas.shape[0], nt, c)
    # (fewer than 31 arguments: CPython passes more as *args, which numba's inlining does not take)
    _rollout_slice(margs, fext, joints, passive, dts, x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok,
                   q, vt, q_ro, vt_ro, s0, s1, r0)


@jit
def _rollout_cost_part(margs, fext, joints, passive, dts, x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok,
                       q, vt, q_ro, vt_ro, cost_address, cost_args, clk, c, nt):
    """:func:`_rollout_part`, then the cost values of the same candidates: the thread that rolled a
    candidate out scores it, calling the compiled cost kernel by address (``cost_address``,
    ``cost_args``: :meth:`solvers.costs.compiled.CompiledCosts.values_call`; its code exists once,
    shared with the other cost evaluations): the line search's candidates and their costs in one
    parallel region. ``clk[c]`` (3,): the cycle counter (:func:`cycles`) at the start, after the
    rollout and at the end of part c, for the stage split."""
    clk[c, 0] = cycles()
    s0, s1, r0 = slice_rows(alphas.shape[0], nt, c)
    _rollout_slice(margs, fext, joints, passive, dts, x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok,
                   q, vt, q_ro, vt_ro, s0, s1, r0)
    clk[c, 1] = cycles()
    call_at(cost_address, pack_arguments(cost_args), c, nt)
    clk[c, 2] = cycles()


@jit
def _sample_rollout_part(margs, fext, joints, passive, dts, x0, xref, offsets, G, lo, hi, clip, X, U, ok,
                         q, vt, q_ro, vt_ro, c, nt):
    """Part ``c`` of ``nt`` of the sampling planners' rollouts: sample s applies
    ``u = offsets[s, t] + G (x ⊖ xref)`` (clipped to ``[lo, hi]`` when clip) at knot t, from x0;
    X (S, N+1, nx), U (S, N, nu), ok (S,) as in :func:`_rollout_slice`, whose per-knot steps it
    shares (with ``us_t = offsets[s, t]``, ``k_t = 0``, ``K_t = G``)."""
    li, lf, gv, bl, bf = margs
    S, N, nu = offsets.shape
    nq, nv = x0.shape[0] - passive[2].shape[0], passive[2].shape[0]
    s0, s1, r0 = slice_rows(S, nt, c)
    r1 = r0 + s1 - s0
    v = vt[0]
    tau = vt[1]
    acc = np.empty((q.shape[0], nv))
    d = np.empty(2 * nv)
    w = np.empty(nv)
    u = np.empty(nu)
    zero = np.zeros(nu)
    for s in range(s0, s1):
        ok[s] = True
        for i in range(nq + nv):
            X[s, 0, i] = x0[i]
    for t in range(N):
        for s in range(s0, s1):
            r = r0 + s - s0
            if not knot_input(joints, nq, X[s, t], xref, offsets[s, t], zero, G, 0.0, clip, lo, hi, passive, d, u,
                              U[s, t], q[r], v[r], tau[r]):
                ok[s] = False
        aba_range(li, lf, gv, bl, bf, q_ro, vt_ro[0], vt_ro[1], fext, acc, r0, r1)
        for s in range(s0, s1):
            x = X[s, t]
            if not euler_step(joints, nq, x, acc[r0 + s - s0], dts[t], w, X[s, t + 1]):
                ok[s] = False            # diverged: mark failed, keep the batch finite
                for i in range(nq + nv):
                    X[s, t + 1, i] = x[i]


@jit
def _lanes_finite_check(rows, n, ck):
    """``ck[l] = Σ_k 0·rows[k * LANES + l]`` over the first n rows: 0 in a lane where all n entries
    are finite, NaN where one is not (a loop over the lanes, not a branch per entry)."""
    for l in range(LANES):
        ck[l] = 0.0
    for k in range(n):
        for l in range(LANES):
            ck[l] += 0.0 * rows[k * LANES + l]


@jit
def _sample_rollout_lanes_part(margs, passive, dts, x0, xref, offsets, G, lo, hi, clip, X, U, ok, ws, rows, c, nt):
    """:func:`_sample_rollout_part` for a model of hinge and slide joints only (``nq = nv``, x ⊖ xref =
    x - xref), ``LANES`` samples at a time in the lanes of ``ws[c]`` (R * LANES,) (:func:`~dynamics.kernels.aba_lanes.aba_lanes`):
    part ``c`` of ``nt`` takes a contiguous run of the ⌈S / W⌉ lane groups. The control, the torque
    and the Euler step are the Euclidean forms of :func:`feedback_control`,
    :func:`~dynamics.kernels.passive.joint_torques` and :func:`~dynamics.kernels.integrators.euler_step`
    written over the lanes (a call per sample would cost as much as the lanes' ABA saves); a short
    last group repeats its last sample in the spare lanes. Finiteness is checked as ``Σ 0·x`` per
    lane (NaN where some x is not), a loop over the lanes rather than a branch per entry."""
    li, lf, gv, bl, bf = margs
    B, b_identity, damping, damped, springs, stiffness, qspring = passive
    S, N, nu = offsets.shape
    Q, V, T, A = rows[0], rows[1], rows[2], rows[3]
    UC = rows[-1]                 # controls (nu rows), next state (nq + nv), finite flag (1), check (1)
    NX = UC + nu
    FL = NX + 2 * (V - Q)
    CK = FL + 1
    nv = V - Q
    nx = 2 * nv
    w = ws[c]
    W = LANES
    # views at constant row offsets (view[row * LANES + l], never negative: vectorisable loops)
    xl = w[Q * LANES:(Q + nx) * LANES]          # the state: q rows, then v rows (V = Q + nq)
    tl = w[T * LANES:(T + nv) * LANES]
    al = w[A * LANES:(A + nv) * LANES]
    ul = w[UC * LANES:(UC + nu) * LANES]
    nl = w[NX * LANES:(NX + nx) * LANES]
    fl = w[FL * LANES:(FL + 1) * LANES]
    ck = w[CK * LANES:(CK + 1) * LANES]          # Σ 0·x: NaN in a lane where some x is not finite
    groups = (S + W - 1) // W
    for g in range(c * groups // nt, (c + 1) * groups // nt):
        base = g * W
        last = min(W, S - base)
        for l in range(LANES):
            fl[l] = 1.0
        for k in range(nx):
            for l in range(LANES):
                xl[k * LANES + l] = x0[k]
        for l in range(last):
            ok[base + l] = True
            for k in range(nx):
                X[base + l, 0, k] = x0[k]
        for t in range(N):
            dt = dts[t]
            # u = offsets + G (x - xref), clipped; a non-finite u falls back to the offsets
            for i in range(nu):
                for l in range(LANES):
                    ul[i * LANES + l] = offsets[base + min(l, last - 1), t, i]
                for j in range(nx):
                    gij = G[i, j]
                    xr = xref[j]
                    for l in range(LANES):
                        ul[i * LANES + l] += gij * (xl[j * LANES + l] - xr)
                if clip:
                    a = lo[i]
                    b = hi[i]
                    for l in range(LANES):
                        x = ul[i * LANES + l]
                        x = a if x < a else x
                        ul[i * LANES + l] = b if x > b else x
            _lanes_finite_check(ul, nu, ck)
            for l in range(LANES):
                if ck[l] != 0.0:                 # NaN: a non-finite control
                    fl[l] = 0.0
                    for i in range(nu):
                        ul[i * LANES + l] = offsets[base + min(l, last - 1), t, i]
            # tau = B u - D v - K_s (q - q_spring)
            for i in range(nv):
                if b_identity:
                    for l in range(LANES):
                        tl[i * LANES + l] = ul[i * LANES + l]
                else:
                    for l in range(LANES):
                        tl[i * LANES + l] = 0.0
                    for j in range(nu):
                        bij = B[i, j]
                        for l in range(LANES):
                            tl[i * LANES + l] += bij * ul[j * LANES + l]
                if damped:
                    di = damping[i]
                    for l in range(LANES):
                        tl[i * LANES + l] -= di * xl[(nv + i) * LANES + l]
            for r in range(springs.shape[0]):
                qa, va = springs[r, 0], springs[r, 1]
                ks = stiffness[va]
                qs = qspring[qa]
                for l in range(LANES):
                    tl[va * LANES + l] -= ks * (xl[qa * LANES + l] - qs)
            aba_lanes(li, lf, gv, w, rows)
            # v+ = v + dt a, q+ = q + dt v+; a non-finite step keeps the state and fails the sample
            for i in range(nv):
                for l in range(LANES):
                    vn = xl[(nv + i) * LANES + l] + dt * al[i * LANES + l]
                    nl[(nv + i) * LANES + l] = vn
                    nl[i * LANES + l] = xl[i * LANES + l] + dt * vn
            _lanes_finite_check(nl, nx, ck)
            for k in range(nx):
                for l in range(LANES):
                    xl[k * LANES + l] = nl[k * LANES + l] if ck[l] == 0.0 else xl[k * LANES + l]
            for l in range(LANES):
                if ck[l] != 0.0:
                    fl[l] = 0.0
            for l in range(last):
                s = base + l
                for i in range(nu):
                    U[s, t, i] = ul[i * LANES + l]
                for k in range(nx):
                    X[s, t + 1, k] = xl[k * LANES + l]
                if fl[l] == 0.0:
                    ok[s] = False


# ---------------------------------------------------------------- Python side
def runs_kernel_library(fd) -> bool:
    """Whether ``fd`` (a :class:`~dynamics.backend.CompiledForwardDynamics` or None) is the kernel
    library's forward dynamics on its packed model: what the compiled rollouts run."""
    return (fd is not None and fd.aba_range is aba_range and fd.integrate_q is integrate_q
            and fd.difference_x is difference_x)


def compiled_rollout_available(problem) -> bool:
    """Whether :class:`CompiledRollout` implements ``problem``'s dynamics: semi-implicit Euler free
    dynamics (no contacts) at every knot (one passive-force setting), on a backend whose
    :meth:`~dynamics.backend.Backend.compiled_forward_dynamics` is the kernel library's."""
    groups = problem.dynamics_groups
    if any(g.item.integrator != "euler" or g.item.contacts is not None for g in groups):
        return False
    if len({(g.item._has_passive, g.item.damping.tobytes(), g.item.stiffness.tobytes()) for g in groups}) != 1:
        return False
    return runs_kernel_library(problem.backend.compiled_forward_dynamics(problem.model))


def passive_args(model, dynamics) -> tuple:
    """The torque's terms for ``dynamics`` (the integrated model of a knot group of ``model``), read-only:
    ``(B, b_identity, damping, damped, springs, stiffness, qspring)``, the arguments of
    :func:`dynamics.kernels.passive.joint_torques` between u and q."""
    sl = np.asarray(dynamics._spring_links, dtype=np.int64)
    springs = np.stack([np.asarray(model.link_qadr)[sl], np.asarray(model.link_dofadr)[sl]], axis=-1)
    B = np.asarray(dynamics.B, float).reshape(model.nv, model.nu)
    return (read_only(B), bool(dynamics._B_identity), read_only(dynamics.damping), bool(dynamics._has_damping),
            read_only(springs.reshape(-1, 2), np.int64), read_only(dynamics.stiffness), read_only(model.qpos_spring))


def read_only(x, dtype=np.float64) -> np.ndarray:
    """``x`` as a read-only C-contiguous array (one compiled signature for every call)."""
    x = np.ascontiguousarray(x, dtype=dtype)
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


class CompiledRollout:
    """The batched closed-loop rollout of the solvers' forward pass for ``problem`` (a
    :class:`~solvers.problem.ShootingProblem` with ``compiled_rollout_available``)."""

    def __init__(self, problem):
        if not compiled_rollout_available(problem):
            raise ValueError(f"CompiledRollout needs the 'euler' integrator at every knot and a backend with compiled "
                             f"forward dynamics, got integrator '{problem.integrator}' on '{problem.backend.name}'")
        m = problem.model
        self.fd = problem.backend.compiled_forward_dynamics(m)
        self.model = m
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nx, self.ndx = m.nq + m.nv, 2 * m.nv
        self._dyn_args = (read_only(self.fd.joint_rows, np.int64), passive_args(m, problem.dynamics_groups[0].item))
        self._dts = read_only(problem.dts)
        self._no_gaps = read_only(np.zeros((0, self.ndx)))
        self._views: dict = {}       # id -> (array, read-only view), see _view
        self._scratch: dict = {}     # (S, thread) -> ABA input scratch (q, vt and their read-only views)
        li, lf = self.fd.model_args[0], self.fd.model_args[1]
        # the sampling rollouts' lanes (_sample_rollout_lanes_part): hinge/slide models only
        self._lane_rows = lane_rows(li.shape[0], self.nv) if self.nq == self.nv and lanes_supported(li, lf) else None
        self._lane_ws = np.empty((0, 0))
        self._direct = False         # run() has run once: a single part then runs on the calling thread

    def run(self, x0, alphas, xs, us, k, K, u_lower, u_upper, clip: bool, gaps=None, dts=None, out=None):
        """Roll out ``u = us + α k + K (x̂ ⊖ xs)`` from x0 for every step size α.

        x0 (nx,), alphas (S,), xs (N+1, nx), us (N, nu), k (N, nu), K (N, nu, ndx), u_lower /
        u_upper (nu,) (used when ``clip``), gaps None (single shooting) or (N+1, ndx) (FDDP:
        ``x̂_t = f(x̂_{t-1}, u_{t-1}) ⊕ (α - 1) gaps[t]``), dts (N,) time steps (default the
        problem's). Returns ``(X (S, N+1, nx), U (S, N, nu), ok (S,) bool)``; ``ok`` is False for
        candidates whose controls or states went non-finite. out: buffers with ``X``, ``U``,
        ``ok`` of those shapes to write into (:meth:`solvers.problem_data.ProblemData.rollout`)."""
        alphas = read_only(alphas)
        us = self._view(us)
        if alphas.ndim != 1 or us.ndim != 2 or us.shape[1] != self.nu:
            raise ValueError(f"CompiledRollout.run: alphas must be (S,) and us (N, {self.nu}), got "
                             f"{alphas.shape} and {us.shape}")
        S, N = alphas.shape[0], us.shape[0]
        nx, ndx, nu = self.nx, self.ndx, self.nu
        args = {"x0": (x0, (nx,)), "xs": (xs, (N + 1, nx)), "k": (k, (N, nu)), "K": (K, (N, nu, ndx)),
                "u_lower": (u_lower, (nu,)), "u_upper": (u_upper, (nu,)),
                "dts": (self._dts if dts is None else dts, (N,))}
        if gaps is not None:
            args["gaps"] = (gaps, (N + 1, ndx))
        arr = {}
        for name, (a, shape) in args.items():
            arr[name] = self._view(a)
            if arr[name].shape != shape:
                raise ValueError(f"CompiledRollout.run: {name} has shape {arr[name].shape}, expected {shape}")
        if out is None:
            X, U, ok = np.empty((S, N + 1, nx)), np.empty((S, N, nu)), np.empty(S, dtype=np.bool_)
        else:
            X, U, ok = out.X, out.U, out.ok
            if X.shape != (S, N + 1, nx) or U.shape != (S, N, nu) or ok.shape != (S,):
                raise ValueError(f"CompiledRollout.run: out buffers are for {ok.shape[0]} candidates, not {S}")
        q, vt, q_ro, vt_ro = self._aba_inputs(S)
        nt = max(1, min(S, self.fd.threads()))
        if nt > 1 or not self._direct:
            use_threads(nt)                 # 1: no worker woken (see prepared's run)
        self._direct = True
        run_threaded_parts(_rollout_part, nt, self.fd.model_args, self.fd.no_fext, *self._dyn_args, arr["dts"],
                           arr["x0"], alphas, arr["xs"], us, arr["k"], arr["K"], arr["u_lower"], arr["u_upper"],
                           bool(clip), arr.get("gaps", self._no_gaps), X, U, ok, q, vt, q_ro, vt_ro)
        return X, U, ok

    def prepared(self, xs, us, k, K, u_lower, u_upper, clip: bool, gaps, out, costs=None):
        """``run(x0, alphas)``: :meth:`run` on fixed buffers — xs, us, k, K, the bounds, gaps (or
        None) and ``out`` (:class:`~solvers.problem_data.RolloutBuffers` for S = alphas.size
        candidates) — with the arguments checked and bound once; x0 (nx,) and alphas (S,) float64,
        given per call. The buffers' contents may change between calls. costs: the problem's
        :class:`~solvers.costs.compiled.CompiledCosts` covering every term, to write each candidate's
        total cost in the same call (:func:`_rollout_cost_part`; the caller re-packs the terms that
        changed, :meth:`~solvers.costs.compiled.CompiledCosts.values_call`); ``run`` then returns
        ``(J (S,), the share of the call's time the rollout took)`` (the share by the cycle counter
        of the calling thread's part; J a fresh array), else None."""
        N = us.shape[0]
        S = out.ok.shape[0]
        shapes = ((xs, (N + 1, self.nx)), (us, (N, self.nu)), (k, (N, self.nu)), (K, (N, self.nu, self.ndx)),
                  (u_lower, (self.nu,)), (u_upper, (self.nu,)), (out.X, (S, N + 1, self.nx)), (out.U, (S, N, self.nu)))
        if gaps is not None:
            shapes += ((gaps, (N + 1, self.ndx)),)
        for a, shape in shapes:
            if a.shape != shape:
                raise ValueError(f"CompiledRollout.prepared: an array has shape {a.shape}, expected {shape}")
        head = (self.fd.model_args, self.fd.no_fext, *self._dyn_args, self._dts)
        tail = (self._view(xs), self._view(us), self._view(k), self._view(K), self._view(u_lower),
                self._view(u_upper), bool(clip), self._no_gaps if gaps is None else self._view(gaps), out.X, out.U,
                out.ok, *self._aba_inputs(S))
        threads = self.fd.threads
        if costs is None:
            kernel, costed = _rollout_part, False
        else:
            Jc = np.zeros((S, S))
            address, cargs = costs.values_call(out.X, out.U, Jc)
            clk = np.zeros((S, 3), np.int64)
            kernel, costed, tail = _rollout_cost_part, True, tail + (address, cargs, clk)

        # x0 and alphas are copied into fixed buffers the kernel reads through read-only views (the
        # signature it was compiled for), instead of a fresh read-only view per call
        x0_buf, alphas_buf = np.empty(self.nx), np.empty(S)
        x0_ro, alphas_ro = read_only(x0_buf), read_only(alphas_buf)

        direct = False

        def run(x0: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, float] | None:
            nonlocal direct
            nt = min(S, threads())
            if nt > 1 or not direct:
                # 1: no worker woken. After the first call one part runs on the calling thread,
                # outside numba's pool (run_threaded_parts), so its thread count is left as the
                # other stages set it: changing it costs µs (a process lock), twice per update
                use_threads(nt)
            direct = True
            np.copyto(x0_buf, x0)
            np.copyto(alphas_buf, alphas)
            run_threaded_parts(kernel, nt, *head, x0_ro, alphas_ro, *tail)
            if not costed:
                return None
            a, b, c = clk[0].tolist()
            return (Jc[0].copy() if nt == 1 else Jc[:nt].sum(axis=0)), ((b - a) / (c - a) if c > a else 1.0)
        if costed:
            def address_call() -> tuple:
                """``(address, args, x0 buffer, alphas buffer, Jc, clk)``: ``run`` on the calling thread
                for another compiled loop (:mod:`solvers.iteration_numba`) to make by address as
                ``kernel(*args, 0, 1)``, after writing x0 and alphas into their buffers; the candidates'
                costs are then ``Jc[0]``, the cycle counts ``clk[0]``. Compiled (or loaded) here, once."""
                args = (*head, x0_ro, alphas_ro, *tail)
                return kernel_address(kernel, (*args, 0, 1)), args, x0_buf, alphas_buf, Jc, clk
            run.address_call = address_call
        return run

    def run_samples(self, x0, offsets, G, xref, u_lower, u_upper, clip: bool, X, U) -> np.ndarray:
        """The sampling planners' rollouts: sample s applies ``u = offsets[s, t] + G (x ⊖ xref)``
        (clipped to the bounds when clip) from x0 (nx,). offsets (S, N, nu), G (nu, ndx), xref (nx,);
        states into X (S, N+1, nx), applied controls into U (S, N, nu). Returns ok (S,): False for a
        sample whose control or state went non-finite (its rows are then not meaningful)."""
        S, N = offsets.shape[0], offsets.shape[1]
        if offsets.shape[2] != self.nu or G.shape != (self.nu, self.ndx) or X.shape != (S, N + 1, self.nx) \
                or U.shape != (S, N, self.nu):
            raise ValueError(f"CompiledRollout.run_samples: shapes offsets {offsets.shape}, G {G.shape}, X {X.shape}, "
                             f"U {U.shape} do not fit nu={self.nu}, ndx={self.ndx}, nx={self.nx}")
        dts = self._dts if self._dts.shape[0] == N else read_only(self._dts[:N])
        ok = np.empty(S, dtype=np.bool_)
        if self._lane_rows is not None and S >= LANES // 4:     # fewer: a lane group costs more than S samples
            nt = max(1, min((S + LANES - 1) // LANES, self.fd.threads()))
            rows = self._lane_rows
            if self._lane_ws.shape[0] < nt:      # per worker thread: the ABA's rows, u, x⁺, a flag, a check
                self._lane_ws = np.empty((nt, (rows[-1] + self.nu + 2 * self.nv + 2) * LANES))
            use_threads(nt)
            run_threaded_parts(_sample_rollout_lanes_part, nt, self.fd.model_args, self._dyn_args[1], dts,
                               read_only(x0), read_only(xref), read_only(offsets), read_only(G), read_only(u_lower),
                               read_only(u_upper), bool(clip), X, U, ok, self._lane_ws, rows)
            return ok
        q, vt, q_ro, vt_ro = self._aba_inputs(S)
        nt = max(1, min(S, self.fd.threads()))
        use_threads(nt)
        run_threaded_parts(_sample_rollout_part, nt, self.fd.model_args, self.fd.no_fext, *self._dyn_args, dts,
                           read_only(x0), read_only(xref), read_only(offsets), read_only(G), read_only(u_lower),
                           read_only(u_upper), bool(clip), X, U, ok, q, vt, q_ro, vt_ro)
        return ok

    def _aba_inputs(self, S: int) -> tuple:
        """The ABA input scratch for S candidates, allocated once per S and calling thread: q (R, nq),
        vt (2, R, nv) (:func:`input_rows`) and their read-only views (not shared between threads:
        the parallel driver runs without the GIL, so two threads rolling out at once would
        otherwise write the same rows)."""
        key = (S, threading.get_ident())
        scratch = self._scratch.get(key)
        if scratch is None:
            if len(self._scratch) > 64:      # (threads come and go: their ids are not kept for ever)
                self._scratch.clear()
            q = np.empty((input_rows(S), self.nq))
            vt = np.empty((2, input_rows(S), self.nv))
            scratch = self._scratch[key] = (q, vt, read_only(q), read_only(vt))
        return scratch

    def _view(self, a) -> np.ndarray:
        """:func:`_ro` of ``a``, kept for the next call when it is a view (no copy) of the same array:
        the solver passes its own buffers every time (state, controls, gains), and a read-only view
        follows their contents."""
        hit = self._views.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        v = read_only(a)
        if isinstance(a, np.ndarray) and (v is a or v.base is a):
            if len(self._views) > 32:
                self._views.clear()
            self._views[id(a)] = (a, v)       # holds a: its id is not reused while cached
        return v

    def warmup(self) -> None:
        """Compile the kernel (first run on this machine) or load it from numba's on-disk cache, by
        one rollout of one knot from the neutral state (one compilation serves every robot)."""
        x0 = np.concatenate([self.model.neutral(), np.zeros(self.nv)])
        z = np.zeros((1, self.nu))
        self.run(x0, np.ones(1), np.stack([x0, x0]), z, z, np.zeros((1, self.nu, self.ndx)), z[0], z[0], True,
                 np.zeros((2, self.ndx)), dts=np.full(1, 0.01))
