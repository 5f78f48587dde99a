"""Compiled forward pass for problems with contact and impulse knots: the whole batched closed-loop
rollout (S step sizes × N knots) of :class:`solvers.forward_pass.ForwardPass` in one numba call,
on a backend that hands its packed model and contact sets to compiled solver loops
(:meth:`dynamics.Backend.compiled_forward_dynamics` and
:meth:`dynamics.Backend.compiled_contact_dynamics`: the ``numba`` backend).

For each candidate ``s`` (step size ``α_s``) and knot ``t``, as the Python loop of the forward pass::

    x̂_t = x⁺_{t-1}                         (x⁺_{-1} = x0; single shooting, gaps None)
    x̂_t = x⁺_{t-1} ⊕ (α_s - 1) f̄_t          (FDDP with gaps f̄, also at t = 0 and t = N)
    u_t  = us_t + α_s k_t + K_t (x̂_t ⊖ xs_t)  (clipped to the bounds when clip)
    τ    = B u - D v - K_s (q - q_spring)
    free knot:     a = ABA(q, v, τ),                         v⁺ = v + dt_t a, q⁺ = q ⊕ dt_t v⁺
    contact knot:  a, λ = constrained acceleration and contact forces (q, v, τ),   v⁺ = v + dt_t a, q⁺ = q ⊕ dt_t v⁺
    impulse knot:  v⁺ = impact velocity (q, v),              q⁺ = q

A non-finite ``u`` marks the candidate failed and is replaced by ``us_t``; a non-finite ``x⁺``, or a
contact / impact whose contact Jacobian is rank deficient at that candidate's state (a leg stretched
straight), marks it failed and ``x⁺`` is replaced by ``x̂_t`` so the batch stays finite — the same
outcome as the Python path, where :mod:`solvers.contact_or_nan` turns those rows into NaN.

The contact forces λ of every candidate's contact knots are written out too (NaN where the Jacobian
lost rank), so that the line search's cost of the candidates — contact-force and cone terms —
reads them instead of solving each knot's contact dynamics a second time
(:class:`solvers.problem_costs.RolloutContactForces`).

Every piece of physics is the kernel library's and the contact kernels' (the functions the
backend's ``aba`` / ``contact_dynamics`` / ``impulse_dynamics`` run: :func:`dynamics.kernels.aba.aba_range`,
:func:`dynamics.contact.numba_kernels.contact_range` and ``impulse_range``, the torque and the Euler
step of :mod:`dynamics.kernels.passive` and :mod:`dynamics.kernels.integrators`), and the policy is
:mod:`solvers.rollout_numba`'s; this module holds the knot loop only, binds no backend, and its
result agrees with the Python path to rounding (tests/solvers/test_contact_rollout.py). The candidates are
split into one contiguous slice per worker thread, as in :mod:`solvers.rollout_numba`.

Importing this module imports numba and the kernel library; the kernel is compiled (or loaded from
numba's on-disk cache) on the first :meth:`CompiledContactRollout.run` or by
:meth:`CompiledContactRollout.warmup`.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from dynamics.contact.numba_kernels import contact_range, impulse_range
from dynamics.kernels.aba import aba_range
from dynamics.kernels.integrators import all_finite, euler_step
from dynamics.kernels.jit import jit, jit_inline
from dynamics.kernels.threaded_batch import run_threaded_parts
from dynamics.worker_threads import use_threads

from .rollout_numba import (
    input_rows,
    knot_input,
    passive_args,
    read_only,
    runs_kernel_library,
    slice_rows,
    start_state,
)

FREE, CONTACT, IMPULSE = 0, 1, 2   # knot kinds of the kernel's `kind` table


# ---------------------------------------------------------------- kernels
@jit_inline
def _contact_rollout_slice(margs, no_fext, joints, passive, knots, sets, x0, alphas, xs, us, k, K, lo, hi, clip, gaps,
                           X, U, ok, F, work, s0, s1, r0):
    """The batched rollout (module docstring) of candidates ``s0 <= s < s1`` into X (S, N+1, nx),
    U (S, N, nu), ok (S,), and the contact forces of the contact knots into F (S, N, ncmax) (the
    first nc entries of row (s, t): the knot's set; NaN where its Jacobian lost rank; rows of free
    and impulse knots are not written).

    margs / no_fext: the backend's packed model and "no external force" array; passive: the torque's
    terms (:func:`solvers.rollout_numba.passive_args`). knots = (kind, cset, dts, rest): each knot's
    kind (FREE, CONTACT, IMPULSE) and contact set (row of the sets' arrays; -1 on free knots), (N,)
    int64, and its time step and restitution (N,). sets = (soff, spoint, skp, skd, flink, ff,
    fbody, fbR, fbp, pref, pivot_rtol, no): contact set c has the frames ``soff[c]:soff[c+1]`` of the
    stacked per-frame arrays flink .. pref, the kind spoint[c] and the Baumgarte gains skp[c],
    skd[c]; no: False (the ``derivs`` argument of the contact kernel). work = (q, vt, q_ro, vt_ro,
    zero, acc, Mi, bias, fext, rd, lam, flag, da, dl), per-candidate rows (candidate s in row
    ``r0 + s - s0``, :func:`solvers.rollout_numba.input_rows`): q (R, nq), vt (2, R, nv) the
    dynamics' inputs (q, v, τ) with read-only views q_ro, vt_ro (passed to the kernels so that they
    run the backend's own compiled specialisation); zero (R, nv) read-only zeros; acc, Mi, bias,
    lam, flag: the kernels' outputs and scratch; fext, rd, da, dl: their empty derivative arguments.
    (Grouped in tuples: a call of more than 30 arguments is passed as *args, which numba's inlining
    does not take.)"""
    li, lf, gv, bl, bf = margs          # the packed model (dynamics.kernels.packing)
    B, b_identity, damping, damped, springs, stiffness, qspring = passive
    kind, cset, dts, rest = knots
    soff, spoint, skp, skd, flink, ff, fbody, fbR, fbp, pref, pivot_rtol, no = sets
    q, vt, q_ro, vt_ro, zero, acc, Mi, bias, fext, rd, lam, flag, da, dl = work
    N = us.shape[0]
    nq, nv = qspring.shape[0], damping.shape[0]
    v = vt[0]
    tau = vt[1]
    r1 = r0 + s1 - s0
    xn = np.empty((alphas.shape[0], nq + nv))
    good = np.empty(alphas.shape[0], dtype=np.bool_)
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
            good[s] = all_finite(tau[r])
        kt = kind[t]
        if kt == FREE:
            aba_range(li, lf, gv, bl, bf, q_ro, vt_ro[0], vt_ro[1], no_fext, acc, r0, r1)
        else:
            c = cset[t]
            o0, o1 = soff[c], soff[c + 1]
            if kt == CONTACT:
                contact_range(li, lf, gv, bl, bf, q_ro, vt_ro[0], vt_ro[1], flink[o0:o1], ff[o0:o1], fbody[o0:o1],
                              fbR[o0:o1], fbp[o0:o1], spoint[c], skp[c], skd[c], pref[o0:o1], no, Mi, bias, zero,
                              no_fext, fext, rd, acc, lam, flag, da, dl, r0, r1)
                nc = (3 if spoint[c] else 6) * (o1 - o0)
                for s in range(s0, s1):
                    r = r0 + s - s0
                    if flag[r] > pivot_rtol:
                        for i in range(nc):
                            F[s, t, i] = lam[r, i]
                    else:
                        for i in range(nc):
                            F[s, t, i] = np.nan
            else:
                impulse_range(li, lf, gv, bl, bf, q_ro, vt_ro[0], flink[o0:o1], ff[o0:o1], fbody[o0:o1], fbR[o0:o1],
                              fbp[o0:o1], spoint[c], skp[c], skd[c], pref[o0:o1], rest[t], Mi, zero, acc, lam,
                              flag, r0, r1)
            for s in range(s0, s1):   # a rank-deficient contact Jacobian: the kernel left this row unwritten
                if not flag[r0 + s - s0] > pivot_rtol:
                    good[s] = False
        for s in range(s0, s1):
            x = X[s, t]
            a = acc[r0 + s - s0]
            if good[s]:
                if kt == IMPULSE:
                    for i in range(nq):
                        xn[s, i] = x[i]
                    for i in range(nv):
                        xn[s, nq + i] = a[i]
                    good[s] = all_finite(xn[s])
                else:
                    good[s] = euler_step(joints, nq, x, a, dts[t], w, xn[s])
            if not good[s]:    # diverged or singular contacts: mark failed, keep the batch finite
                ok[s] = False
                for i in range(nq + nv):
                    xn[s, i] = x[i]


@jit
def _contact_rollout_part(margs, no_fext, joints, passive, knots, sets, x0, alphas, xs, us, k, K, lo, hi, clip,
                          gaps, X, U, ok, F, work, c, nt):
    """:func:`_contact_rollout_slice` for part ``c`` of ``nt`` of the candidates (candidates are
    independent; one part per worker thread, :func:`dynamics.kernels.threaded_batch.run_threaded_parts`)."""
    s0, s1, r0 = slice_rows(alphas.shape[0], nt, c)
    _contact_rollout_slice(margs, no_fext, joints, passive, knots, sets, x0, alphas, xs, us, k, K, lo, hi, clip,
                           gaps, X, U, ok, F, work, s0, s1, r0)


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
    passive-force setting among them; a backend whose
    :meth:`~dynamics.backend.Backend.compiled_forward_dynamics` and, for every contact set,
    :meth:`~dynamics.backend.Backend.compiled_contact_dynamics` are the kernel library's and
    :mod:`dynamics.contact.numba_kernels`'."""
    groups = problem.dynamics_groups
    shared = _shared(problem)
    key = tuple([id(g.item) for g in groups])
    hit = shared.available.get(key)
    if hit is None:
        if len(shared.available) > 256:
            shared.available.clear()
        # the integrated models are the problem's own, kept for its lifetime (their ids stay theirs)
        hit = shared.available[key] = (tuple(g.item for g in groups), _available(problem))
    return hit[1]


def _available(problem) -> bool:
    """:func:`compiled_contact_rollout_available`, evaluated."""
    groups = problem.dynamics_groups
    if all(g.item.contacts is None for g in groups):
        return False                  # free dynamics only: solvers.rollout_numba
    timed = [g.item for g in groups if g.item.integrator != "impulse"]
    if any(d.integrator != "euler" for d in timed):
        return False
    if len({(d._has_passive, d.damping.tobytes(), d.stiffness.tobytes()) for d in timed}) > 1:
        return False
    be, m = problem.backend, problem.model
    if not runs_kernel_library(be.compiled_forward_dynamics(m)):
        return False
    for c in _contact_sets(problem):
        cd = be.compiled_contact_dynamics(m, c)
        if cd is None or cd.contact_range is not contact_range or cd.impulse_range is not impulse_range:
            return False
    return True


@dataclass(eq=False)
class _SharedTables:
    """What a problem's compiled contact rollouts share across its knot structures (a gait re-phases
    the horizon every MPC update): the backend's packed forward dynamics, the contact sets met so
    far (never dropped: a re-phased horizon meets the same few phases' sets again) with their
    arrays stacked, the torque terms per timed integrated model, the kernel's scratch per candidate
    count and the availability answer per set of dynamics groups."""

    backend: object
    fd: object = None
    sets: list = field(default_factory=list)          # contact sets, in the order they were met
    cds: list = field(default_factory=list)           # their compiled contact dynamics
    stacked: tuple | None = None                      # the kernel's ``sets`` tuple of ``sets``
    ncmax: int = 0
    dyn_args: dict = field(default_factory=dict)      # id(integrated model) -> (model, kernel args)
    scratch: dict = field(default_factory=dict)       # (S, ncmax, thread) -> the kernel's ``work`` tuple
    available: dict = field(default_factory=dict)     # ids of the groups' models -> (models, answer)
    #: id(knot structure) -> (structure, the kernel's per-knot tables, force models): a structure the
    #: problem returns to (a gait's next cycle) finds its tables made
    knot_tables: dict = field(default_factory=dict)


_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _shared(problem) -> _SharedTables:
    """The problem's :class:`_SharedTables` (made on first use, anew if its backend was replaced)."""
    sh = _SHARED.get(problem)
    if sh is None or sh.backend is not problem.backend:
        sh = _SHARED[problem] = _SharedTables(problem.backend)
    return sh


class CompiledContactRollout:
    """The batched closed-loop rollout of the solvers' forward pass for ``problem`` (a
    :class:`~solvers.problem.ShootingProblem` with ``compiled_contact_rollout_available``), for
    its current knot structure. What does not depend on the structure (model and contact-set
    arrays, torque terms, scratch) is kept per problem and shared by the rollouts of its later
    structures: a re-phasing makes only the per-knot tables."""

    def __init__(self, problem):
        if not compiled_contact_rollout_available(problem):
            raise ValueError(f"CompiledContactRollout needs contact or impulse knots, the 'euler' integrator on the "
                             f"others and a backend with compiled forward and contact dynamics for every contact set, "
                             f"got integrator '{problem.integrator}' on '{problem.backend.name}'")
        m = problem.model
        be = problem.backend
        sh = _shared(problem)
        if sh.fd is None:
            sh.fd = be.compiled_forward_dynamics(m)
        self.fd = sh.fd
        new = [c for c in _contact_sets(problem) if not any(c is o for o in sh.sets)]
        if new or sh.stacked is None:
            sh.sets += new
            sh.cds += [be.compiled_contact_dynamics(m, c) for c in new]
            cds = sh.cds
            # the contact sets' arrays stacked frame by frame (one kernel signature for any number of sets)
            soff = np.cumsum([0] + [cd.contact_args[0].shape[0] for cd in cds]).astype(np.int64)
            stacked = [read_only(np.concatenate([cd.contact_args[i] for cd in cds]), cds[0].contact_args[i].dtype)
                       for i in range(5)]
            sh.stacked = (read_only(soff, np.int64), read_only(np.array([cd.point for cd in cds]), np.bool_),
                          read_only([cd.kp for cd in cds]), read_only([cd.kd for cd in cds]), *stacked,
                          read_only(np.concatenate([cd.pref for cd in cds])), float(cds[0].pivot_rtol), False)
            sh.ncmax = max(cd.nc for cd in cds)
        sets = sh.sets
        self.cd = sh.cds[0]
        self.model = m
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nx, self.ndx = m.nq + m.nv, 2 * m.nv
        self.nbody = m.nbody
        self.ncmax = sh.ncmax
        # passive forces of the timed (free and contact) knots; impulse knots take no torque
        timed = [g.item for g in problem.dynamics_groups if g.item.integrator != "impulse"]
        dyn = timed[0] if timed else problem.dynamics_groups[0].item
        hit = sh.dyn_args.get(id(dyn))
        if hit is None:
            hit = sh.dyn_args[id(dyn)] = (dyn, (read_only(self.fd.joint_rows, np.int64), passive_args(m, dyn)))
        self._dyn_args = hit[1]
        # per-knot tables, per knot structure (the sets' indices stay valid: sets are only appended)
        st = problem.structure
        hit = sh.knot_tables.get(id(st))
        if hit is None or hit[0] is not st:
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
            # per knot, the integrated model whose contact forces the rollout writes (contact knots), else None
            force_models = tuple(np.where(kind == CONTACT, st.knot_dynamics, None).tolist())
            if len(sh.knot_tables) >= 256:          # (as many as the problem keeps structures)
                sh.knot_tables.clear()
            hit = sh.knot_tables[id(st)] = (st, (read_only(kind, np.int64), read_only(cset, np.int64),
                                                 read_only(problem.dts), read_only(rest)), force_models)
        self._knots = hit[1]
        self._sets = sh.stacked
        self._no_gaps = read_only(np.zeros((0, self.ndx)))
        #: per knot, the integrated model whose contact forces the rollout writes (contact knots), else None
        self.force_models = hit[2]
        self._problem = problem
        self._scratch = sh.scratch

    def _work(self, S: int) -> tuple:
        """The kernel's ``work`` tuple for S candidates (rows: :func:`solvers.rollout_numba.input_rows`),
        made once per S, contact-row width and calling thread (the line search uses one or two sizes;
        the scratch is shared with the problem's rollouts of other knot structures, whose sets may be
        fewer, but not between threads: the parallel driver runs without the GIL, so two threads
        rolling out on one problem at once would otherwise write the same rows)."""
        key = (S, self.ncmax, threading.get_ident())
        w = self._scratch.get(key)
        if w is None:
            nq, nv, R = self.nq, self.nv, input_rows(S)
            q = np.empty((R, nq))
            vt = np.empty((2, R, nv))
            w = (q, vt, read_only(q), read_only(vt), read_only(np.zeros((R, nv))), np.empty((R, nv)),
                 np.empty((R, nv, nv)), np.empty((R, nv)), np.zeros((0, self.nbody, 6)), np.empty((2, 0, nv, nv)),
                 np.empty((R, self.ncmax)), np.empty(R), np.empty((3, 0, nv, nv)), np.empty((3, 0, self.ncmax, nv)))
            if len(self._scratch) > 8:
                self._scratch.clear()
            self._scratch[key] = w
        return w

    def run(self, x0, alphas, xs, us, k, K, u_lower, u_upper, clip: bool, gaps=None, out=None):
        """Roll out ``u = us + α k + K (x̂ ⊖ xs)`` from x0 for every step size α.

        x0 (nx,), alphas (S,), xs (N+1, nx), us (N, nu), k (N, nu), K (N, nu, ndx), u_lower /
        u_upper (nu,) (used when ``clip``), gaps None (single shooting) or (N+1, ndx) (FDDP:
        ``x̂_t = f(x̂_{t-1}, u_{t-1}) ⊕ (α - 1) gaps[t]``). Returns ``(X (S, N+1, nx), U (S, N, nu),
        ok (S,) bool)``; ``ok`` is False for candidates whose controls or states went non-finite or
        whose contact Jacobian lost rank. out: buffers with ``X``, ``U``, ``ok`` of those shapes to
        write into (:meth:`solvers.problem_data.ProblemData.rollout`); the contact forces of the
        contact knots go to ``out.forces(ncmax)`` (S, N, ≥ ncmax) (:attr:`force_models`: which
        knots; a scratch array without ``out``)."""
        alphas = read_only(alphas)
        us = read_only(us)
        N = self._knots[0].shape[0]
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
            arr[name] = read_only(a)
            if arr[name].shape != shape:
                raise ValueError(f"CompiledContactRollout.run: {name} has shape {arr[name].shape}, expected {shape}")
        if out is None:
            X, U, ok = np.empty((S, N + 1, nx)), np.empty((S, N, nu)), np.empty(S, dtype=np.bool_)
            F = np.empty((S, N, self.ncmax))
        else:
            X, U, ok = out.X, out.U, out.ok
            if X.shape != (S, N + 1, nx) or U.shape != (S, N, nu) or ok.shape != (S,):
                raise ValueError(f"CompiledContactRollout.run: out buffers are for {ok.shape[0]} candidates, not {S}")
            F = out.forces(self.ncmax)
        nt = max(1, min(S, self.fd.threads()))
        use_threads(nt)                     # 1: no worker woken
        run_threaded_parts(_contact_rollout_part, nt, self.cd.model_args, self.cd.no_fext, *self._dyn_args, self._knots,
                           self._sets, arr["x0"], alphas, arr["xs"], us, arr["k"], arr["K"], arr["u_lower"],
                           arr["u_upper"], bool(clip), arr.get("gaps", self._no_gaps), X, U, ok, F, self._work(S))
        return X, U, ok

    def warmup(self, x0=None) -> None:
        """Compile the kernel (first run on this machine) or load it from numba's on-disk cache, by
        one rollout of the horizon from ``x0`` (default: the problem's initial state) with zero
        gains."""
        if x0 is None:
            x0 = self._problem.x0
        N = self._knots[0].shape[0]
        xs = np.repeat(np.asarray(x0, float)[None], N + 1, axis=0)
        z = np.zeros((N, self.nu))
        self.run(x0, np.ones(1), xs, z, z, np.zeros((N, self.nu, self.ndx)), z[0], z[0], True,
                 np.zeros((N + 1, self.ndx)))
