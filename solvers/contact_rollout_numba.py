"""Compiled forward pass for problems with contact and impulse knots: the whole batched closed-loop
rollout (S step sizes × N knots) of :class:`solvers.forward_pass.ForwardPass` in one numba call,
on a backend that offers its forward dynamics and its rigid-contact / impulse dynamics as compiled
functions (:meth:`dynamics.Backend.compiled_forward_dynamics` and
:meth:`dynamics.Backend.compiled_contact_dynamics`: the ``numba`` backend).

For each candidate ``s`` (step size ``α_s``) and knot ``t``, as the Python loop of the forward pass::

    x̂_t = x⁺_{t-1}                         (x⁺_{-1} = x0; single shooting, gaps None)
    x̂_t = x⁺_{t-1} ⊕ (α_s - 1) f̄_t          (FDDP with gaps f̄, also at t = 0 and t = N)
    u_t  = us_t + α_s k_t + K_t (x̂_t ⊖ xs_t)  (clipped to the bounds when clip)
    τ    = B u - D v - K_s (q - q_spring)
    free knot:     a = ABA(q, v, τ),                         v⁺ = v + dt_t a, q⁺ = q ⊕ dt_t v⁺
    contact knot:  a = constrained acceleration (q, v, τ),   v⁺ = v + dt_t a, q⁺ = q ⊕ dt_t v⁺
    impulse knot:  v⁺ = impact velocity (q, v),              q⁺ = q

A non-finite ``u`` marks the candidate failed and is replaced by ``us_t``; a non-finite ``x⁺``, or a
contact / impact whose contact Jacobian is rank deficient at that candidate's state (a leg stretched
straight), marks it failed and ``x⁺`` is replaced by ``x̂_t`` so the batch stays finite — the same
outcome as the Python path, where :mod:`solvers.contact_rows` turns those rows into NaN.

All dynamics and Lie-group code comes from the backend (its ``aba_range``, ``contact_range``,
``impulse_range``, ``integrate_q``, ``difference_x``: the same compiled functions its
``aba`` / ``contact_dynamics`` / ``impulse_dynamics`` run), so this module holds none of its own and
the result agrees with the Python path to rounding (tests/test_contact_rollout.py).

Importing this module imports neither numba nor any kernel; the kernel is compiled (or loaded from
numba's on-disk cache) on the first :meth:`CompiledContactRollout.run` or by
:meth:`CompiledContactRollout.warmup`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

aba_range = None                   # bound from the backend's compiled functions on compilation
integrate_q = None
difference_x = None
contact_range = None
impulse_range = None

FREE, CONTACT, IMPULSE = 0, 1, 2   # knot kinds of the kernel's `kind` table


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


def _all_finite(x):
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return False
    return True


def _contact_rollout_kernel(margs, no_fext, joints, springs, B, damping, stiffness, qspring, has_passive,
                            kind, cset, dts, rest, soff, spoint, skp, skd, flink, ff, fbody, fbR, fbp, pref,
                            pivot_rtol, no, x0, alphas, xs, us, k, K, lo, hi, clip, gaps, X, U, ok,
                            q, vt, q_ro, vt_ro, zero, acc, Mi, bias, fext, rd, lam, flag, da, dl, good):
    """The batched rollout (module docstring) into X (S, N+1, nx), U (S, N, nu), ok (S,).

    margs / no_fext: the backend's packed model and "no external force" array; kind, cset (N,)
    int64: each knot's kind (FREE, CONTACT, IMPULSE) and contact set (row of soff..skd; -1 on free
    knots); dts, rest (N,): time step and restitution of each knot. Contact set c: frames
    ``soff[c]:soff[c+1]`` of the stacked per-frame arrays flink, ff, fbody, fbR, fbp, pref;
    spoint[c], skp[c], skd[c] its kind and Baumgarte gains. no: False (the ``derivs`` argument of
    the contact kernel). q (S, nq), vt (2, S, nv): scratch for (q, v, τ) with read-only views q_ro,
    vt_ro (passed to the backend's kernels so that they run their own compiled specialisation);
    zero (S, nv) read-only zeros; acc, Mi, bias, fext, rd, lam, flag, da, dl: the backend
    kernels' outputs and scratch; good (S,) scratch."""
    S, N, nu = alphas.shape[0], us.shape[0], us.shape[1]
    nq, nv = qspring.shape[0], damping.shape[0]
    v = vt[0]
    tau = vt[1]
    xn = np.empty((S, nq + nv))
    d = np.empty(2 * nv)
    u = np.empty(nu)
    for s in range(S):
        ok[s] = True
        for i in range(nq + nv):
            xn[s, i] = x0[i]
    for t in range(N + 1):
        for s in range(S):
            _start_state(joints, nq, xn[s], alphas[s], gaps, t, d, X[s, t])
        if t == N:
            break
        for s in range(S):
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
            for i in range(nq):
                q[s, i] = x[i]
            for i in range(nv):
                v[s, i] = x[nq + i]
            for i in range(nv):
                ti = 0.0
                for j in range(nu):
                    ti += u[j] * B[i, j]
                if has_passive:
                    ti = ti - damping[i] * v[s, i]
                tau[s, i] = ti
            for r in range(springs.shape[0]):
                qa, va = springs[r, 0], springs[r, 1]
                tau[s, va] -= stiffness[va] * (q[s, qa] - qspring[qa])
            good[s] = _all_finite(tau[s])
        kt = kind[t]
        if kt == FREE:
            aba_range(*margs, q_ro, vt_ro[0], vt_ro[1], no_fext, acc, S - S, S)   # S - S: an int64 0 (a
            # literal 0 would compile another specialisation of the backend's kernel)
        else:
            c = cset[t]
            o0, o1 = soff[c], soff[c + 1]
            if kt == CONTACT:
                contact_range(*margs, q_ro, vt_ro[0], vt_ro[1], flink[o0:o1], ff[o0:o1], fbody[o0:o1], fbR[o0:o1],
                              fbp[o0:o1], spoint[c], skp[c], skd[c], pref[o0:o1], no, Mi, bias, zero, no_fext, fext,
                              rd, acc, lam, flag, da, dl, S - S, S)
            else:
                impulse_range(*margs, q_ro, vt_ro[0], flink[o0:o1], ff[o0:o1], fbody[o0:o1], fbR[o0:o1],
                              fbp[o0:o1], spoint[c], skp[c], skd[c], pref[o0:o1], rest[t], Mi, zero, acc, lam,
                              flag, S - S, S)
            for s in range(S):   # a rank-deficient contact Jacobian: the kernel left this row unwritten
                if not flag[s] > pivot_rtol:
                    good[s] = False
        dt = dts[t]
        for s in range(S):
            x = X[s, t]
            if good[s]:
                if kt == IMPULSE:
                    for i in range(nq):
                        xn[s, i] = x[i]
                    for i in range(nv):
                        xn[s, nq + i] = acc[s, i]
                    good[s] = _all_finite(xn[s])
                else:
                    for i in range(nv):
                        vn = v[s, i] + dt * acc[s, i]
                        xn[s, nq + i] = vn
                        d[i] = dt * vn
                    good[s] = _all_finite(d[:nv])
                    if good[s]:
                        integrate_q(joints, x, d, xn[s])
                        good[s] = _all_finite(xn[s])
            if not good[s]:    # diverged or singular contacts: mark failed, keep the batch finite
                ok[s] = False
                for i in range(nq + nv):
                    xn[s, i] = x[i]


_JITTED = ("_start_state", "_all_finite", "_contact_rollout_kernel")
_compiled = None
_bound: tuple | None = None


def _jit(fn):
    """numba's njit with the on-disk cache and the numerics of the dynamics kernels (FMA
    contraction only, numpy's floating-point error model)."""
    from numba import njit
    return njit(cache=True, fastmath={"contract"}, error_model="numpy")(fn)


def _kernel(fd, cd):
    """The compiled rollout kernel calling the backend's functions of ``fd`` (a
    :class:`dynamics.backend.CompiledForwardDynamics`) and ``cd`` (a
    :class:`dynamics.backend.CompiledContactDynamics`). numba imported, functions jitted and the cache
    locator registered on the first call; the cached kernel contains compiled copies of the backend's
    functions, so its stamp includes their source hashes. One process binds one backend's functions
    (every compiled backend so far is the numba backend)."""
    global _compiled, aba_range, integrate_q, difference_x, contact_range, impulse_range, _bound
    funcs = (fd.aba_range, fd.integrate_q, fd.difference_x, cd.contact_range, cd.impulse_range)
    if _compiled is not None:
        if _bound != (fd.source_hash, cd.source_hash) or funcs != (aba_range, integrate_q, difference_x,
                                                                    contact_range, impulse_range):
            raise RuntimeError("the compiled contact rollout is already bound to another backend's dynamics in this "
                               "process; run the solver with compiled=False for the second backend")
        return _compiled
    from dynamics.kernel_cache import stamp_sources
    here = Path(__file__).resolve()
    # the cached kernel contains compiled copies of the backend's functions: stamp with their hashes
    stamp_sources("solvers.contact_rollout_numba", lambda path: path == here, lambda: _bound)
    g = globals()
    aba_range, integrate_q, difference_x, contact_range, impulse_range = funcs
    _bound = (fd.source_hash, cd.source_hash)
    for name in _JITTED:
        g[name] = _jit(g[name])
    _compiled = g["_contact_rollout_kernel"]
    return _compiled


# ---------------------------------------------------------------- Python side
def _contact_sets(problem) -> list:
    """The distinct contact sets of ``problem``'s contact and impulse knots, first-appearance order."""
    sets = []
    for g in problem.dynamics_groups:
        c = g.item.contacts
        if c is not None and not any(c is o for o in sets):
            sets.append(c)
    return sets


def compiled_contact_rollout_available(problem) -> bool:
    """Whether :class:`CompiledContactRollout` implements ``problem``'s dynamics: some contact or
    impulse knots; every other knot free; semi-implicit Euler on every free and contact knot, one
    passive-force setting among them; a backend offering
    :meth:`~dynamics.backend.Backend.compiled_forward_dynamics` and, for every contact set,
    :meth:`~dynamics.backend.Backend.compiled_contact_dynamics`."""
    groups = problem.dynamics_groups
    if all(g.item.contacts is None for g in groups):
        return False                  # free dynamics only: solvers.rollout_numba
    timed = [g.item for g in groups if g.item.integrator != "impulse"]
    if any(d.integrator != "euler" for d in timed):
        return False
    if len({(d._has_passive, d.damping.tobytes(), d.stiffness.tobytes()) for d in timed}) > 1:
        return False
    be, m = problem.backend, problem.model
    if be.compiled_forward_dynamics(m) is None:
        return False
    return all(be.compiled_contact_dynamics(m, c) is not None for c in _contact_sets(problem))


def _ro(x, dtype=np.float64) -> np.ndarray:
    """``x`` as a read-only C-contiguous array (one compiled signature for every call)."""
    x = np.ascontiguousarray(x, dtype=dtype)
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


class CompiledContactRollout:
    """The batched closed-loop rollout of the solvers' forward pass for ``problem`` (a
    :class:`~solvers.problem.ShootingProblem` with ``compiled_contact_rollout_available``)."""

    def __init__(self, problem):
        if not compiled_contact_rollout_available(problem):
            raise ValueError(f"CompiledContactRollout needs contact or impulse knots, the 'euler' integrator on the "
                             f"others and a backend with compiled forward and contact dynamics for every contact set, "
                             f"got integrator '{problem.integrator}' on '{problem.backend.name}'")
        m = problem.model
        be = problem.backend
        self.fd = be.compiled_forward_dynamics(m)
        sets = _contact_sets(problem)
        cds = [be.compiled_contact_dynamics(m, c) for c in sets]
        self.cd = cds[0]
        self.model = m
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nx, self.ndx = m.nq + m.nv, 2 * m.nv
        self.nbody = m.nbody
        self.ncmax = max(cd.nc for cd in cds)
        # passive forces of the timed (free and contact) knots; impulse knots take no torque
        timed = [g.item for g in problem.dynamics_groups if g.item.integrator != "impulse"]
        dyn = timed[0] if timed else problem.dynamics_groups[0].item
        sl = np.asarray(dyn._spring_links, dtype=np.int64)
        springs = np.stack([np.asarray(m.link_qadr)[sl], np.asarray(m.link_dofadr)[sl]], axis=-1).astype(np.int64)
        self._dyn_args = (_ro(self.fd.joint_rows, np.int64), _ro(springs.reshape(-1, 2), np.int64),
                          _ro(np.asarray(dyn.B, float).reshape(m.nv, m.nu)), _ro(dyn.damping), _ro(dyn.stiffness),
                          _ro(m.qpos_spring), bool(dyn._has_passive))
        # per-knot tables
        N = problem.horizon
        kind = np.zeros(N, dtype=np.int64)
        cset = np.full(N, -1, dtype=np.int64)
        rest = np.zeros(N)
        for g in problem.dynamics_groups:
            d = g.item
            if d.contacts is None:
                continue
            kind[g.knots] = IMPULSE if d.integrator == "impulse" else CONTACT
            cset[g.knots] = next(i for i, c in enumerate(sets) if c is d.contacts)
            rest[g.knots] = d.restitution
        # the contact sets' arrays stacked frame by frame (one kernel signature for any number of sets)
        soff = np.cumsum([0] + [cd.contact_args[0].shape[0] for cd in cds]).astype(np.int64)
        stacked = [_ro(np.concatenate([cd.contact_args[i] for cd in cds]), cds[0].contact_args[i].dtype)
                   for i in range(5)]
        self._set_args = (_ro(kind, np.int64), _ro(cset, np.int64), _ro(problem.dts), _ro(rest), _ro(soff, np.int64),
                          _ro(np.array([cd.point for cd in cds], dtype=np.bool_), np.bool_),
                          _ro([cd.kp for cd in cds]), _ro([cd.kd for cd in cds]), *stacked,
                          _ro(np.concatenate([cd.pref for cd in cds])), float(self.cd.pivot_rtol), False)
        self._no_gaps = _ro(np.zeros((0, self.ndx)))
        self._scratch: dict = {}

    def _work(self, S: int) -> tuple:
        """Scratch arrays for S candidates, made once per S (the line search uses one or two sizes)."""
        w = self._scratch.get(S)
        if w is None:
            nq, nv = self.nq, self.nv
            q = np.empty((S, nq))
            vt = np.empty((2, S, nv))
            w = (q, vt, _ro(q), _ro(vt), _ro(np.zeros((S, nv))), np.empty((S, nv)), np.empty((S, nv, nv)),
                 np.empty((S, nv)), np.zeros((0, self.nbody, 6)), np.empty((2, 0, nv, nv)),
                 np.empty((S, self.ncmax)), np.empty(S), np.empty((3, 0, nv, nv)), np.empty((3, 0, self.ncmax, nv)),
                 np.empty(S, dtype=np.bool_))
            if len(self._scratch) > 8:
                self._scratch.clear()
            self._scratch[S] = w
        return w

    def run(self, x0, alphas, xs, us, k, K, u_lower, u_upper, clip: bool, gaps=None, out=None):
        """Roll out ``u = us + α k + K (x̂ ⊖ xs)`` from x0 for every step size α.

        x0 (nx,), alphas (S,), xs (N+1, nx), us (N, nu), k (N, nu), K (N, nu, ndx), u_lower /
        u_upper (nu,) (used when ``clip``), gaps None (single shooting) or (N+1, ndx) (FDDP:
        ``x̂_t = f(x̂_{t-1}, u_{t-1}) ⊕ (α - 1) gaps[t]``). Returns ``(X (S, N+1, nx), U (S, N, nu),
        ok (S,) bool)``; ``ok`` is False for candidates whose controls or states went non-finite or
        whose contact Jacobian lost rank. out: buffers with ``X``, ``U``, ``ok`` of those shapes to
        write into (:meth:`solvers.problem_data.ProblemData.rollout`)."""
        alphas = _ro(alphas)
        us = _ro(us)
        N = self._set_args[0].shape[0]
        if alphas.ndim != 1 or us.shape != (N, self.nu):
            raise ValueError(f"CompiledContactRollout.run: alphas must be (S,) and us ({N}, {self.nu}), got "
                             f"{alphas.shape} and {us.shape}")
        S = alphas.shape[0]
        nx, ndx, nu = self.nx, self.ndx, self.nu
        args = {"x0": (x0, (nx,)), "xs": (xs, (N + 1, nx)), "k": (k, (N, nu)), "K": (K, (N, nu, ndx)),
                "u_lower": (u_lower, (nu,)), "u_upper": (u_upper, (nu,))}
        if gaps is not None:
            args["gaps"] = (gaps, (N + 1, ndx))
        arr = {}
        for name, (a, shape) in args.items():
            arr[name] = _ro(a)
            if arr[name].shape != shape:
                raise ValueError(f"CompiledContactRollout.run: {name} has shape {arr[name].shape}, expected {shape}")
        if out is None:
            X, U, ok = np.empty((S, N + 1, nx)), np.empty((S, N, nu)), np.empty(S, dtype=np.bool_)
        else:
            X, U, ok = out.X, out.U, out.ok
            if X.shape != (S, N + 1, nx) or U.shape != (S, N, nu) or ok.shape != (S,):
                raise ValueError(f"CompiledContactRollout.run: out buffers are for {ok.shape[0]} candidates, not {S}")
        _kernel(self.fd, self.cd)(self.cd.model_args, self.cd.no_fext, *self._dyn_args, *self._set_args,
                                  arr["x0"], alphas, arr["xs"], us, arr["k"], arr["K"], arr["u_lower"],
                                  arr["u_upper"], bool(clip), arr.get("gaps", self._no_gaps), X, U, ok,
                                  *self._work(S))
        return X, U, ok

    def warmup(self, x0) -> None:
        """Compile the kernel (first run on this machine) or load it from numba's on-disk cache, by
        one rollout of the horizon from ``x0`` with zero gains."""
        N = self._set_args[0].shape[0]
        xs = np.repeat(np.asarray(x0, float)[None], N + 1, axis=0)
        z = np.zeros((N, self.nu))
        self.run(x0, np.ones(1), xs, z, z, np.zeros((N, self.nu, self.ndx)), z[0], z[0], True,
                 np.zeros((N + 1, self.ndx)))
