"""Compiled forward pass: the whole batched closed-loop rollout of :meth:`ILQR._simulate` (S step
sizes × N knots) in one numba call, for the semi-implicit Euler integrator on any backend that offers
its forward dynamics as a compiled function (:meth:`dynamics.Backend.compiled_forward_dynamics`:
the ``numba`` backend).

For each candidate ``s`` (step size ``α_s``) and knot ``t``::

    x̂_t = x⁺_{t-1}                         (x⁺_{-1} = x0; single shooting, gaps None)
    x̂_t = x⁺_{t-1} ⊕ (α_s - 1) f̄_t          (FDDP with gaps f̄, also at t = 0 and t = N)
    u_t  = us_t + α_s k_t + K_t (x̂_t ⊖ xs_t)  (clipped to the bounds when clip)
    x⁺_t = f(x̂_t, u_t): τ = B u - D v - K_s (q - q_spring), a = ABA(q, v, τ),
           v⁺ = v + dt_t a, q⁺ = q ⊕ dt_t v⁺

A non-finite ``u`` marks the candidate failed and is replaced by ``us_t``; a non-finite ``x⁺``
marks it failed and is replaced by ``x̂_t`` (the batch stays finite), as in the Python loop.

ABA and the SO(3)/SE(3) operations ``q ⊕ w``, ``x1 ⊖ x0`` come from the backend
(:class:`dynamics.backend.CompiledForwardDynamics`: for numba, ``aba_range`` and
:mod:`dynamics.kernels.lie`), so this module holds no dynamics or Lie-group code of its own and
the result agrees with the Python path to rounding.

Importing this module imports neither numba nor any kernel; the kernel is compiled (or loaded from
numba's on-disk cache) on the first :meth:`CompiledRollout.run` or by :meth:`CompiledRollout.warmup`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dynamics.worker_threads import use_threads

aba_range = None                         # bound from the backend's CompiledForwardDynamics on compilation
prange = range                           # numba.prange once numba is imported (first compilation)
integrate_q = None
difference_x = None


# ---------------------------------------------------------------- kernel sources (jitted lazily)
def _start_state(joints, nq, xn, alpha, gaps, t, d, out):
    """``x̂ = xn`` (no gaps) or ``xn ⊕ (α - 1) gaps[t]`` into ``out`` (nx,)."""
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


#: rows between two candidates' ABA inputs (q, v, τ) and outputs: candidates run on different
#: threads, and inputs sharing a cache line made the two threads' writes evict each other (two iiwa
#: candidates × 64 knots on two threads: 255 µs against 215 µs for one candidate on one thread)
_PAD = 8


def _all_finite(x):
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return False
    return True


def _rollout_kernel(margs, fext, joints, springs, B, damping, stiffness, qspring, has_passive, dts,
                    x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok, q, vt, q_ro, vt_ro, s0, s1):
    """The batched rollout (module docstring) of candidates ``s0 <= s < s1`` into X (S, N+1, nx),
    U (S, N, nu), ok (S,).

    margs / fext: the backend's packed model and "no external force" array
    (:class:`dynamics.backend.CompiledForwardDynamics`); dts (N,) the knots' time steps.
    q (S·_PAD, nq) and vt (2, S·_PAD, nv) are scratch for the ABA inputs (q, v, tau; candidate s in
    row s·_PAD); q_ro / vt_ro are
    read-only views of the same memory, passed to ``aba_range`` so that it runs the backend's
    own compiled specialisation (read-only float64 inputs)."""
    S, N, nu = alphas.shape[0], us.shape[0], us.shape[1]
    nq, nv = qspring.shape[0], damping.shape[0]
    v = vt[0]
    tau = vt[1]
    acc = np.empty((S * _PAD, nv))
    xn = np.empty((S, nq + nv))
    d = np.empty(2 * nv)
    u = np.empty(nu)
    for s in range(s0, s1):
        ok[s] = True
        for i in range(nq + nv):
            xn[s, i] = x0[i]
    for t in range(N + 1):
        for s in range(s0, s1):
            _start_state(joints, nq, xn[s], alphas[s], gaps, t, d, X[s, t])
        if t == N:
            break
        for s in range(s0, s1):
            x = X[s, t]
            difference_x(joints, nq, xs[t], x, d)
            for i in range(nu):
                fb = 0.0
                for j in range(2 * nv):
                    fb += K[t, i, j] * d[j]
                ui = us[t, i] + alphas[s] * k[t, i] + fb
                if clip:
                    ui = lo[i] if ui < lo[i] else ui
                    ui = hi[i] if ui > hi[i] else ui
                u[i] = ui
            if not _all_finite(u):
                ok[s] = False
                for i in range(nu):
                    u[i] = us[t, i]
            for i in range(nu):
                U[s, t, i] = u[i]
            r0 = s * _PAD
            for i in range(nq):
                q[r0, i] = x[i]
            for i in range(nv):
                v[r0, i] = x[nq + i]
            for i in range(nv):
                ti = 0.0
                for j in range(nu):
                    ti += u[j] * B[i, j]
                if has_passive:
                    ti = ti - damping[i] * v[r0, i]
                tau[r0, i] = ti
            for r in range(springs.shape[0]):
                qa, va = springs[r, 0], springs[r, 1]
                tau[r0, va] -= stiffness[va] * (q[r0, qa] - qspring[qa])
            aba_range(*margs, q_ro, vt_ro[0], vt_ro[1], fext, acc, r0, r0 + 1)
        dt = dts[t]
        for s in range(s0, s1):
            x = X[s, t]
            r0 = s * _PAD
            for i in range(nv):
                vn = v[r0, i] + dt * acc[r0, i]
                xn[s, nq + i] = vn
                d[i] = dt * vn
            good = _all_finite(d[:nv])
            if good:
                integrate_q(joints, x, d, xn[s])
                good = _all_finite(xn[s])
            if not good:       # diverged: mark failed, keep the batch finite
                ok[s] = False
                for i in range(nq + nv):
                    xn[s, i] = x[i]



def _rollout_parallel(margs, fext, joints, springs, B, damping, stiffness, qspring, has_passive, dts,
                      x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok, q, vt, q_ro, vt_ro, nt):
    """:func:`_rollout_kernel` with the candidates in ``nt`` contiguous slices on the worker threads:
    candidates are independent, so the rollouts of the line search's step sizes (two per warm-started
    MPC update) run side by side."""
    S = alphas.shape[0]
    for c in prange(nt):
        _rollout_kernel(margs, fext, joints, springs, B, damping, stiffness, qspring, has_passive, dts, x0, alphas,
                        xs, us, k, K, lo, hi, clip, gaps, X, U, ok, q, vt, q_ro, vt_ro, c * S // nt,
                        (c + 1) * S // nt)


_JITTED = ("_start_state", "_all_finite", "_rollout_kernel")
_compiled = None                         # the parallel driver once bound
_bound_hash: str | None = None


def _jit(fn, **options):
    """numba's njit with the on-disk cache and the numerics of the dynamics kernels (FMA
    contraction only, numpy's floating-point error model)."""
    from numba import njit
    return njit(cache=True, fastmath={"contract"}, error_model="numpy", **options)(fn)


def _kernel(fd):
    """The compiled rollout (:func:`_rollout_parallel`) calling ``fd.aba_range`` (a
    :class:`dynamics.backend.CompiledForwardDynamics`). numba imported, functions jitted and the
    cache locator registered on the first call; the cached kernel contains a compiled copy of
    ``aba_range``, so its stamp includes ``fd.source_hash``. One process binds one backend's
    function (every compiled backend so far is the numba backend)."""
    global _compiled, aba_range, integrate_q, difference_x, _bound_hash, prange
    if _compiled is not None:
        if fd.source_hash != _bound_hash or fd.aba_range is not aba_range:
            raise RuntimeError("the compiled rollout is already bound to another backend's forward dynamics in "
                               "this process; run the solver with compiled=False for the second backend")
        return _compiled
    from dynamics.kernel_cache import stamp_sources
    here = Path(__file__).resolve()
    # the cached kernel contains compiled copies of the backend's functions: stamp with their hash
    stamp_sources("solvers.rollout_numba", lambda path: path == here, lambda: _bound_hash)
    g = globals()
    aba_range, integrate_q, difference_x, _bound_hash = fd.aba_range, fd.integrate_q, fd.difference_x, fd.source_hash
    import numba
    prange = numba.prange
    for name in _JITTED:
        # the kernel body is inlined into the parallel driver, the one function compiled: a callee
        # compiled on its own would be compiled, then linked and optimised again inside the driver
        g[name] = _jit(g[name], inline="always") if name == "_rollout_kernel" else _jit(g[name])
    _compiled = _jit(g["_rollout_parallel"], parallel=True)
    return _compiled


# ---------------------------------------------------------------- Python side
def compiled_rollout_available(problem) -> bool:
    """Whether :class:`CompiledRollout` implements ``problem``'s dynamics: semi-implicit Euler free
    dynamics (no contacts) at every knot (one passive-force setting), on a backend that offers
    :meth:`~dynamics.backend.Backend.compiled_forward_dynamics`."""
    groups = problem.dynamics_groups
    if any(g.item.integrator != "euler" or g.item.contacts is not None for g in groups):
        return False
    if len({(g.item._has_passive, g.item.damping.tobytes(), g.item.stiffness.tobytes()) for g in groups}) != 1:
        return False
    return problem.backend.compiled_forward_dynamics(problem.model) is not None


def _ro(x, dtype=np.float64) -> np.ndarray:
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
        dynamics = problem.dynamics_groups[0].item
        m = problem.model
        self.fd = problem.backend.compiled_forward_dynamics(m)
        self.model = m
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nx, self.ndx = m.nq + m.nv, 2 * m.nv
        joints = self.fd.joint_rows
        sl = np.asarray(dynamics._spring_links, dtype=np.int64)
        springs = np.stack([np.asarray(m.link_qadr)[sl], np.asarray(m.link_dofadr)[sl]], axis=-1).astype(np.int64)
        has_passive = bool(dynamics._has_passive)
        self._dyn_args = (_ro(joints, np.int64), _ro(springs.reshape(-1, 2), np.int64),
                          _ro(np.asarray(dynamics.B, float).reshape(m.nv, m.nu)), _ro(dynamics.damping),
                          _ro(dynamics.stiffness), _ro(m.qpos_spring), has_passive)
        self._dts = _ro(problem.dts)
        self._no_gaps = _ro(np.zeros((0, self.ndx)))
        self._views: dict = {}       # id -> (array, read-only view), see _view
        self._scratch: dict = {}     # S -> ABA input scratch (q, vt and their read-only views)

    def run(self, x0, alphas, xs, us, k, K, u_lower, u_upper, clip: bool, gaps=None, dts=None, out=None):
        """Roll out ``u = us + α k + K (x̂ ⊖ xs)`` from x0 for every step size α.

        x0 (nx,), alphas (S,), xs (N+1, nx), us (N, nu), k (N, nu), K (N, nu, ndx), u_lower /
        u_upper (nu,) (used when ``clip``), gaps None (single shooting) or (N+1, ndx) (FDDP:
        ``x̂_t = f(x̂_{t-1}, u_{t-1}) ⊕ (α - 1) gaps[t]``), dts (N,) time steps (default the
        problem's). Returns ``(X (S, N+1, nx), U (S, N, nu), ok (S,) bool)``; ``ok`` is False for
        candidates whose controls or states went non-finite. out: buffers with ``X``, ``U``,
        ``ok`` of those shapes to write into (:meth:`solvers.problem_data.ProblemData.rollout`)."""
        alphas = _ro(alphas)
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
        scratch = self._scratch.get(S)
        if scratch is None:
            q = np.empty((S * _PAD, self.nq))
            vt = np.empty((2, S * _PAD, self.nv))
            scratch = self._scratch[S] = (q, vt, _ro(q), _ro(vt))
        q, vt, q_ro, vt_ro = scratch
        nt = max(1, min(S, self.fd.threads()))
        use_threads(nt)                     # 1: no worker woken
        _kernel(self.fd)(self.fd.model_args, self.fd.no_fext, *self._dyn_args, arr["dts"], arr["x0"], alphas, arr["xs"],
                         us, arr["k"], arr["K"], arr["u_lower"], arr["u_upper"], bool(clip),
                         arr.get("gaps", self._no_gaps), X, U, ok, q, vt, q_ro, vt_ro, nt)
        return X, U, ok

    def _view(self, a) -> np.ndarray:
        """:func:`_ro` of ``a``, kept for the next call when it is a view (no copy) of the same array:
        the solver passes its own buffers every time (state, controls, gains), and a read-only view
        follows their contents."""
        hit = self._views.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        v = _ro(a)
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
