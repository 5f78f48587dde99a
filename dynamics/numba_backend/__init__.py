"""The ``numba`` backend: compiled CPU kernels, parallel over the batch (Plancher et al. 2021's CPU design).

* Each state (knot point) is computed by one compiled function with preallocated scratch and
  structured spatial algebra (:mod:`.spatial`): no interpreter work per state.
* Batches are split into one contiguous slice per worker thread of numba's persistent thread pool
  (``numba.prange``); a single state, a one-thread setting or a batch too small to pay for waking
  the pool runs a non-parallel compiled variant on the calling thread.
* Every public function of :class:`~dynamics.backend.Backend` is implemented, including the
  second-order derivatives (Singh, Russell & Wensing 2022); results match the numpy reference to ~1e-12 relative
  (``tests/dynamics/test_backend_consistency.py``; ``docs/backends.md``).
* Kernels are compiled on first use (or by :meth:`NumbaBackend.warmup`) and cached on disk
  (``cache=True``); the model is passed as flat float64/int64 arrays (:mod:`.packing`), so one
  compilation serves every robot. Importing this package imports neither numba nor the kernels.

Usage::

    be = dynamics.get_backend("numba")   # or NumbaBackend(threads=2)
    be.set_threads(2)
    be.warmup(model)                     # compile / load the kernels now rather than on first call
    da_dq, da_dv, da_dtau = be.aba_derivatives(model, q, v, tau)
"""

from __future__ import annotations

import importlib.util
import math
import weakref
from functools import partial
from types import SimpleNamespace

import numpy as np

from ..backend import Backend, BatchKernelCall, CombinedComKernel, _check_out
from ..contact.common import flat_args
from ..contact.constrained_dynamics import ContactDynamicsDerivatives, ContactDynamicsResult
from ..contact.impulse import ImpulseDynamicsResult, check_restitution
from ..contact.kinematics_derivatives import unflatten_motion
from ..contact.schur import check_pivots
from ..inputs import unflatten
from ..model import RobotModel
from ..worker_threads import changed, default_threads, use_threads
from ..worker_wait import configure_before_workers_start
from ..kernels.packing import as_kernel_input as _f64
from ..kernels.packing import frame_arrays, packed

if importlib.util.find_spec("numba") is None:  # reported by dynamics.available_backends()
    raise ModuleNotFoundError("the numba backend needs the 'numba' package (pip install numba)")

_REFERENCES = {"local": 0, "world": 1, "local_world_aligned": 2}
_F64 = np.dtype(np.float64)
_kernels: SimpleNamespace | None = None


def _k() -> SimpleNamespace:
    """The compiled-kernel modules, imported on first use (importing numba takes ~0.4 s)."""
    global _kernels
    if _kernels is None:
        # how the thread pool's workers wait is read once, when numba starts it: set it before
        # numba can (dynamics.worker_wait)
        configure_before_workers_start()
        import numba

        from ..kernels import (aba, aba_derivatives, aba_second_derivatives, crba, kinematics, minv, rnea,
                               rnea_derivatives, rnea_second_derivatives, threaded_batch)
        _kernels = SimpleNamespace(numba=numba, rnea=rnea, crba=crba, minv=minv, aba=aba,
                                   rnea_derivatives=rnea_derivatives, aba_derivatives=aba_derivatives,
                                   rnea_second_derivatives=rnea_second_derivatives,
                                   aba_second_derivatives=aba_second_derivatives, kinematics=kinematics,
                                   threaded_batch=threaded_batch)
    return _kernels


_contact_kernels = None


def _ck():
    """:mod:`dynamics.contact.numba_kernels`, imported on first use (it imports numba)."""
    global _contact_kernels
    if _contact_kernels is None:
        _k()   # numba's thread pool settings first (dynamics.worker_wait)
        from ..contact import numba_kernels
        _contact_kernels = numba_kernels
    return _contact_kernels


# Serial cost of one state per link [us], measured on a 2.6 GHz Zen 4 core (rounded up); used only
# to decide whether a batch is worth waking the thread pool for (see NumbaBackend.parallel_threshold_us).
_COST_PER_LINK_US = {"rnea": 0.2, "crba": 0.2, "minv": 0.5, "aba": 0.35, "rnea_derivatives": 0.4,
                     "aba_derivatives": 0.75, "kinematics": 0.15, "second_order": 2.0}


class _OneState:
    """A model's constants for :class:`NumbaBackend`'s single-state fast path: the kernels' model
    arguments, output shapes and the weights of the finiteness sums, found by one dict lookup on
    ``id(model)`` (the entry removes itself when the model is garbage-collected)."""

    __slots__ = ("__weakref__", "flat", "flat2", "flat3", "gv", "head", "lf", "li", "no_acc", "no_fext", "no_minv", "nq", "nv",
                 "ref", "row", "rows", "shape2", "shape3", "size2", "size3", "vector")

    def __init__(self, model: RobotModel, pm, table: dict):
        key = id(model)

        def forget(ref, key=key, table=table):
            if getattr(table.get(key), "ref", None) is ref:
                del table[key]

        self.ref = weakref.ref(model, forget)
        nq, nv = self.nq, self.nv = pm.nq, pm.nv
        self.flat = ((nq,), (nv,), (nv,))           # input shapes of one state ...
        self.rows = ((1, nq), (1, nv), (1, nv))     # ... and of a batch of one
        self.head = (pm.li, pm.lf, pm.gv, pm.bl, pm.bf)
        self.li, self.lf, self.gv = pm.li, pm.lf, pm.gv
        self.no_fext, self.no_minv = pm.no_fext, pm.no_minv
        self.no_acc = np.empty(0)                   # aba_derivatives without the acceleration (never written)
        self.row, self.vector = (1, nv), (nv,)
        self.shape2, self.flat2, self.size2 = (2, 1, nv, nv), (2, nv, nv), 2 * nv * nv
        self.shape3, self.flat3, self.size3 = (3, 1, nv, nv), (3, nv, nv), 3 * nv * nv
        table[key] = self


def _state(table: dict, model, q, v, w):
    """``(rec, flat)`` when q, v, w are one float64 C-contiguous state of ``model``'s size each
    ((nq,), (nv,), (nv,): ``flat``, or with a leading 1), with ``rec`` the model's
    :class:`_OneState`; else None. Finiteness is not checked here (the caller checks the kernel's
    output instead)."""
    if type(q) is not _ndarray or type(v) is not _ndarray or type(w) is not _ndarray:
        return None
    if q.dtype is not _F64 or v.dtype is not _F64 or w.dtype is not _F64:
        return None
    if not (q.flags.c_contiguous and v.flags.c_contiguous and w.flags.c_contiguous):
        return None
    rec = table.get(id(model))
    if rec is None or rec.ref() is not model:
        if type(model) is not RobotModel:
            return None
        rec = _OneState(model, packed(model), table)
    shapes = (q.shape, v.shape, w.shape)
    if shapes == rec.rows:
        return rec, False
    if shapes == rec.flat:
        return rec, True
    return None


def _inputs(table: dict, model, q, v, w):
    """``(rec, flat, q1, v1, w1)``: :func:`_state`'s answer and q, v, w as (1, n) arrays; else None."""
    hit = _state(table, model, q, v, w)
    if hit is None:
        return None
    rec, flat = hit
    return (rec, True, q[None], v[None], w[None]) if flat else (rec, False, q, v, w)


_ndarray = np.ndarray
_isfinite = math.isfinite


class NumbaBackend(CombinedComKernel, Backend):
    """Compiled CPU backend.

    threads: worker threads for batched calls (``None``: numba's default, all cores or
    ``NUMBA_NUM_THREADS``). parallel_threshold_us: a batch runs in parallel only if its estimated
    serial run time is at least this many microseconds (waking the thread pool costs a few
    microseconds); a single state always runs serially on the calling thread.
    """

    name = "numba"

    def __init__(self, threads: int | None = None, parallel_threshold_us: float = 20.0):
        self._threads: int | None = None
        self._entries: dict = {}      # kernel name -> compiled entry point of the single-state fast path
        self._one_states: dict = {}   # id(model) -> _OneState, the single-state fast path's constants
        self._threshold_us = float(parallel_threshold_us)
        if threads is not None:
            self.set_threads(threads)

    @property
    def parallel_threshold_us(self) -> float:
        """A batch runs in parallel only if its estimated serial run time is at least this [µs]."""
        return self._threshold_us

    @parallel_threshold_us.setter
    def parallel_threshold_us(self, us: float) -> None:
        self._threshold_us = float(us)
        changed()       # the serial rule of the calls handed out (BatchKernelCall.threads) moved

    # ------------------------------------------------------------ threads
    def set_threads(self, n: int | None) -> None:
        """Use ``n`` worker threads for batched calls (applied with ``numba.set_num_threads`` before
        each parallel call); ``None`` restores numba's default. ``n`` must be between 1 and
        ``numba.config.NUMBA_NUM_THREADS``."""
        changed()       # (BatchKernelCall.threads of the calls handed out)
        if n is None:
            self._threads = None
            return
        top = _k().numba.config.NUMBA_NUM_THREADS
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= top:
            raise ValueError(f"numba backend: threads must be an integer between 1 and {top} "
                             f"(NUMBA_NUM_THREADS), got {n!r}")
        self._threads = int(n)

    @property
    def threads(self) -> int:
        """Number of worker threads batched calls use now: the count set, else the one
        ``MPC_ACCEL_THREADS``'s policy chooses (by default the cores other processes leave free,
        :func:`dynamics.worker_threads.default_threads`)."""
        return self._threads if self._threads is not None else default_threads(_k().numba.config.NUMBA_NUM_THREADS)

    @property
    def max_threads(self) -> int:
        """The most worker threads batched calls may use (the count set, else ``NUMBA_NUM_THREADS``)."""
        return self._threads if self._threads is not None else _k().numba.config.NUMBA_NUM_THREADS

    def _run(self, kind: str, pm, kernel, B: int, *args) -> None:
        """Run ``kernel(*args, start, stop)`` (a ``*_range`` kernel) on a batch of ``B`` states: one
        contiguous slice per worker thread (:mod:`dynamics.kernels.threaded_batch`), or the whole
        batch on the calling thread (one state, one thread, or a batch too small to be worth waking
        the thread pool)."""
        nt = self.threads
        if self._serial(kind, pm, B, nt):
            kernel(*args, 0, B)
            return
        use_threads(nt)
        _k().threaded_batch.run_threaded(kernel, B, min(nt, B), *args)

    def _variant(self, kind: str, model: RobotModel, B: int) -> str:
        """Which variant :meth:`_run` takes for a batch of B states: "serial" or "parallel"."""
        # the variant it runs in when the cores are free
        return "serial" if self._serial(kind, packed(model), B, self.max_threads) else "parallel"

    def _serial(self, kind: str, pm, B: int, nt: int) -> bool:
        """Whether a batch of B states of kernel ``kind`` runs on the calling thread with ``nt``
        worker threads: one thread, one state, or an estimated cost below ``parallel_threshold_us``
        (not worth waking the thread pool)."""
        return nt <= 1 or B <= 1 or B * pm.nlinks * _COST_PER_LINK_US[kind] < self._threshold_us

    def compile_ahead(self, model: RobotModel, calls):
        """Start compiling, in a child process, the batched kernels of ``calls`` — (function, batch
        size) pairs among ``aba_derivatives`` and ``aba_second_derivatives`` — in the variants this
        backend will run them in; only when the on-disk cache is cold (a first run).
        Returns a job (its ``calls``: what the child took) to ``wait()`` for before making those
        calls (the caller compiles everything else meanwhile), or None (cache warm, or no child
        could be started). See :mod:`.compile_ahead`."""
        from . import compile_ahead as ca
        kinds = {"aba_derivatives": "aba_derivatives", "aba_second_derivatives": "second_order"}
        calls = [(f, int(B)) for f, B in calls if f in kinds]
        if not calls or not ca.cache_is_cold():
            return None
        # the child takes the derivative kernels (the longest compiles, sharing their passes; figures
        # in docs/backends.md), the caller the solver's rollout, cost and backward-pass kernels
        # meanwhile; the second order, the longest, goes first
        calls = sorted(dict.fromkeys(calls), key=lambda c: c[0] != "aba_second_derivatives")
        specs = list(dict.fromkeys(f"{f}:{self._variant(kinds[f], model, B)}" for f, B in calls))
        return ca.start(specs, calls)

    # ------------------------------------------------------------ compilation
    prefers_compiled_solver = True
    warmup_by_use = True

    def compiled_forward_dynamics(self, model: RobotModel):
        """:class:`~dynamics.backend.CompiledForwardDynamics` for the solvers' compiled rollout:
        this backend's serial ``aba_range`` and the packed model arrays it takes."""
        from ..backend import CompiledForwardDynamics
        from ..kernels import lie
        from ..kernels.jit import package_source_hash
        pm = packed(model)
        rows = lie.joint_rows(model)
        rows.setflags(write=False)
        return CompiledForwardDynamics(_k().aba.aba_range, (pm.li, pm.lf, pm.gv, pm.bl, pm.bf), pm.no_fext,
                                       package_source_hash(), lie.integrate_q, lie.difference_x, rows,
                                       lambda: self.threads)

    def compiled_kinematics(self, model: RobotModel):
        """:class:`~dynamics.backend.CompiledKinematics` for the solvers' compiled cost terms: this
        backend's single-state frame kinematics (:func:`.kinematics.frames_knot`, and
        :func:`.kinematics.frame_velocity_dq` for frame velocities, :func:`.kinematics.com_knot` for the
        centre of mass)."""
        from ..backend import CompiledKinematics
        from ..kernels.jit import package_source_hash
        pm = packed(model)

        def frame_table(names):
            rows = [frame_arrays(model, pm, n) for n in names]
            flink = np.ascontiguousarray(np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int64))
            ff = np.ascontiguousarray(np.concatenate([r[1] for r in rows]) if rows else np.zeros((0, 12)))
            flink.setflags(write=False)
            ff.setflags(write=False)
            return flink, ff

        from ..kernels import lie
        rows = lie.joint_rows(model)
        rows.setflags(write=False)
        k = _k().kinematics
        return CompiledKinematics(k.frames_workspace, k.frames_knot, (pm.li, pm.lf), frame_table, lie.difference_x,
                                  lie.difference_jacobian, lie.difference_batch, rows, package_source_hash(),
                                  lambda: self.threads, lie.integrate_batch, lie.integrate_with_jacobians_batch,
                                  k.frame_velocity_dq, k.com_knot)

    def compiled_contact_dynamics(self, model: RobotModel, contacts):
        """:class:`~dynamics.backend.CompiledContactDynamics` for the solvers' compiled contact
        rollout: the fused serial contact and impulse kernels of :mod:`dynamics.contact.numba_kernels`
        (the ones :meth:`contact_dynamics` and :meth:`impulse_dynamics` run) and the arguments they
        take for ``contacts``; None for a set they do not cover (damping, 6-D Baumgarte ``kp``)."""
        from ..backend import CompiledContactDynamics
        from ..contact import numba_kernels as ck
        contacts.check(model, "compiled_contact_dynamics")
        if not ck.supports_fused(contacts):
            return None
        pm = packed(model)
        flink, ff, fbody, fbR, fbp, pref = ck.static_args(contacts)
        kp, kd = contacts.baumgarte
        return CompiledContactDynamics(ck.contact_range, ck.impulse_range, (pm.li, pm.lf, pm.gv, pm.bl, pm.bf),
                                       (flink, ff, fbody, fbR, fbp), contacts.kind == "point", float(kp), float(kd),
                                       pref, contacts.nc, pm.no_fext, ck.PIVOT_RTOL, ck.source_hash())

    def warmup(self, model: RobotModel, progress=None) -> None:
        """Compile (first run on this machine) or load from numba's on-disk cache every kernel, in its
        serial and parallel variant, by running each once on ``model``'s neutral configuration.

        progress: optional callable ``progress(label, done, total)``, called before each kernel
        (compiling all of them takes minutes on the first run; loading them about a second)."""
        q = model.neutral()
        z = np.zeros(model.nv)
        frame = next((n for n in model.site_names if n), None) or next((n for n in model.body_names[1:] if n), None)
        saved = self._threads, self.parallel_threshold_us
        thread_counts = sorted({1, min(2, _k().numba.config.NUMBA_NUM_THREADS)})
        try:
            self.parallel_threshold_us = 0.0
            for ti, threads in enumerate(thread_counts):
                self._threads = threads
                changed()
                qb, zb = np.stack([q] * threads), np.stack([z] * threads)
                steps = [
                    ("rnea", lambda: self._rnea(model, qb, zb, zb, None)),
                    ("crba", lambda: self._crba(model, qb)),
                    ("minv", lambda: self._minv(model, qb)),
                    ("aba", lambda: self._aba(model, qb, zb, zb, None)),
                    # the single-state path's own kernel, in both input forms ((n,) and (1, n))
                    ("aba (one state)", lambda: (self.aba(model, q, z, z), self.aba(model, q[None], z[None], z[None]))),
                    ("derivatives (one state)", lambda: [f(model, *x) for f in (self.rnea_derivatives, self.aba_derivatives)
                                                         for x in ((q, z, z), (q[None], z[None], z[None]))]),
                    ("rnea_derivatives", lambda: self._rnea_derivatives(model, qb, zb, zb, None)),
                    ("aba_derivatives", lambda: self._aba_derivatives(model, qb, zb, zb, None, self._minv(model, qb))),
                    ("rnea_second_derivatives", lambda: self._rnea_second_derivatives(model, qb, zb, zb, None)),
                    ("aba_second_derivatives", lambda: self._aba_second_derivatives(model, qb, zb, zb, None)),
                    ("placements", lambda: self._body_placements(model, qb)),
                    ("frame_jacobian", lambda: frame is not None and self._frame_jacobian_time_variation(
                        model, qb, zb, frame, "local")),
                    ("com", lambda: self._com_jacobian(model, qb)),
                ]
                for i, (label, run) in enumerate(steps):
                    if progress is not None:
                        kind = "serial" if threads == 1 else "parallel"
                        progress(f"{label} ({kind})", ti * len(steps) + i, len(thread_counts) * len(steps))
                    run()
        finally:
            self._threads, self.parallel_threshold_us = saved

    # ------------------------------------------------------------ contact dynamics (fused kernels)
    # One compiled pass per state (dynamics.contact.numba_kernels) for the sets it covers (no damping,
    # no 6-D Baumgarte kp term, float64 inputs); anything else runs the generic implementation of
    # dynamics.contact on this backend's kernels (Backend's methods).

    def frame_motion_derivatives(self, model: RobotModel, q, v, a, contacts):
        func = "frame_motion_derivatives"
        batch, (qf, vf, af) = flat_args(func, model, contacts, q=(q, "nq"), v=(v, "nv"), a=(a, "nv"))
        if not qf.dtype == vf.dtype == af.dtype == _F64:   # complex step: the generic implementation
            return super().frame_motion_derivatives(model, q, v, a, contacts)
        return unflatten_motion(batch, _ck().frame_motion_derivatives(self, model, qf, vf, af, contacts))

    def contact_dynamics(self, model: RobotModel, q, v, tau, contacts):
        func = "contact_dynamics"
        batch, (qf, vf, tf) = flat_args(func, model, contacts, q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
        ck = _ck()
        if not ck.supports_fused(contacts, qf, vf, tf):
            return super().contact_dynamics(model, q, v, tau, contacts)
        a, lam, flag, _, _ = ck.contact_dynamics_fused(self, model, qf, vf, tf, contacts, False)
        check_pivots(contacts, func, flag)
        return ContactDynamicsResult(unflatten(batch, a), unflatten(batch, lam))

    def contact_dynamics_derivatives(self, model: RobotModel, q, v, tau, contacts, return_values: bool = False,
                                     out=None):
        func = "contact_dynamics_derivatives"
        batch, (qf, vf, tf) = flat_args(func, model, contacts, q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
        ck = _ck()
        if not ck.supports_fused(contacts, qf, vf, tf):
            return super().contact_dynamics_derivatives(model, q, v, tau, contacts, return_values, out)
        if out is not None:
            out.check(qf.shape[0], model.nv, contacts.nc, func)
        a, lam, flag, da, dl = ck.contact_dynamics_fused(self, model, qf, vf, tf, contacts, True, out)
        check_pivots(contacts, func, flag)
        if len(batch) != 1:         # a (B, ...) batch comes back as the kernel wrote it, without reshapes
            a, lam, da, dl = unflatten(batch, a), unflatten(batch, lam), [unflatten(batch, x) for x in da], \
                [unflatten(batch, x) for x in dl]
        d = ContactDynamicsDerivatives(*da, *dl)
        return (ContactDynamicsResult(a, lam), d) if return_values else d

    def prepare_contact_dynamics_derivatives(self, model: RobotModel, q, v, tau, contacts, out):
        """See :meth:`Backend.prepare_contact_dynamics_derivatives`: the fused kernel's arguments
        bound once (read-only views of the caller's state buffers, which follow their contents), so
        ``run()`` is the thread-count check, one kernel call and the pivot check."""
        func = "prepare_contact_dynamics_derivatives"
        B = self._prepared_batch(func, model, q, v, tau)
        ck = _ck()
        if not ck.supports_fused(contacts, q, v, tau):
            return super().prepare_contact_dynamics_derivatives(model, q, v, tau, contacts, out)
        contacts.check(model, func)
        out.check(B, model.nv, contacts.nc, func)
        return ck.prepare_contact_dynamics_fused(self, model, q, v, tau, contacts, out, "contact_dynamics_derivatives")

    def impulse_dynamics(self, model: RobotModel, q, v_minus, contacts, restitution: float = 0.0):
        func = "impulse_dynamics"
        e = check_restitution(restitution, func)
        batch, (qf, vm) = flat_args(func, model, contacts, q=(q, "nq"), v_minus=(v_minus, "nv"))
        ck = _ck()
        if not ck.supports_fused_impulse(contacts, qf, vm):
            return super().impulse_dynamics(model, q, v_minus, contacts, restitution)
        v_plus, imp, flag = ck.impulse_dynamics_fused(model, qf, vm, contacts, e)
        check_pivots(contacts, func, flag)
        return ImpulseDynamicsResult(unflatten(batch, v_plus), unflatten(batch, imp))

    # ------------------------------------------------------------ single-state fast path
    # One state without f_ext / M^-1 (the common call from Python, e.g. per knot or in a custom
    # loop): the generic path (argument broadcasting, read-only views, numba's dispatch resolving
    # the types of 12-14 arguments) costs several times the kernel on small robots. Here the
    # per-model constants come from one dict lookup (_OneState), the inputs are checked in place
    # (float64, C-contiguous, right length) and the kernel's compiled entry point for exactly these
    # argument types is called directly, skipping numba's type dispatch. Finiteness is checked on
    # the output, by one sum (a vector: Python's sum of its entries, cheaper than a BLAS call at
    # this size; a matrix: one dot product; ``aba``: inside its single-state kernel, which returns
    # the answer): a non-finite input makes the output non-finite (NaN/inf propagate through
    # every recursion), which sends the call to the generic path, as does anything else: it words
    # every error (a finite output whose plain sum overflows only takes the generic path too,
    # which returns it). ``aba`` has a kernel of its own (aba.aba_state: the state's own shapes,
    # no batch range or external-force arguments), compiled on first use for each of the two
    # input forms; the others run their ``*_range`` kernel, the one the general path compiles.
    # Every kernel allocates its scratch per call (nothing shared between callers or threads).

    def _entry(self, name: str, kernel, args: tuple, first: int = 5):
        """Run ``kernel(*args)`` through numba's dispatcher (compiling or loading it from the cache),
        keep, under ``name``, its compiled entry point for the types of ``args`` and return the
        kernel's result; ``args[first:first + 3]`` are the state inputs (q, v, tau / a)."""
        # through the dispatcher with the generic path's argument types (inputs read-only), so
        # that a ``*_range`` kernel serves both paths with one compiled specialisation; numba's
        # unboxing does not look at the writeable flag, so the entry point then also takes the
        # caller's writeable arrays
        args = args[:first] + tuple(_f64(a) for a in args[first:first + 3]) + args[first + 3:]
        result = kernel(*args)
        self._entries[name] = _k().threaded_batch.entry_point(kernel, args)
        return result

    def _one_vector(self, name: str, model, q, v, w):
        """The (nv,) or (1, nv) result of the single-state kernel ``name`` (``rnea``: τ) on the fast path, or None when the inputs or a non-finite result send the call to the
        generic path."""
        hit = _inputs(self._one_states, model, q, v, w)
        if hit is None:
            return None
        rec, flat, q1, v1, w1 = hit
        res = np.empty(rec.row)
        args = rec.head + (q1, v1, w1, rec.no_fext, res, 0, 1)
        ep = self._entries.get(name)
        if ep is None:
            self._entry(name, getattr(getattr(_k(), name), name + "_range"), args)
        else:
            ep(*args)
        row = res[0]
        if _isfinite(sum(row.tolist())):
            return row if flat else res
        return None

    def rnea(self, model: RobotModel, q, v, a, fext=None, algorithm: str = "recursive") -> np.ndarray:
        if fext is None and algorithm == "recursive":
            tau = self._one_vector("rnea", model, q, v, a)
            if tau is not None:
                return tau
        return super().rnea(model, q, v, a, fext, algorithm)

    def aba(self, model: RobotModel, q, v, tau, fext=None) -> np.ndarray:
        if fext is None:
            # the single-state kernel (.aba.aba_state): the state's own shapes, no batch range or
            # external-force arguments, the finiteness check compiled (its result)
            hit = _state(self._one_states, model, q, v, tau)
            if hit is not None:
                rec, flat = hit
                qdd = np.empty(rec.vector if flat else rec.row)
                name = "aba_state" if flat else "aba_state_row"
                ep = self._entries.get(name)
                if ep is not None:
                    finite = ep(rec.li, rec.lf, rec.gv, q, v, tau, qdd)
                else:
                    finite = self._entry(name, _k().aba.aba_state, (rec.li, rec.lf, rec.gv, q, v, tau, qdd), 3)
                if finite:
                    return qdd
        return super().aba(model, q, v, tau, fext)

    def rnea_derivatives(self, model: RobotModel, q, v, a, fext=None):
        if fext is None:
            # the single-state kernel (.rnea_derivatives.rnea_derivatives_state), as aba_derivatives'
            hit = _state(self._one_states, model, q, v, a)
            if hit is not None:
                rec, flat = hit
                buf = np.empty(rec.size2)
                name = "rnea_derivatives_state" if flat else "rnea_derivatives_state_row"
                ep = self._entries.get(name)
                if ep is not None:
                    finite = ep(rec.li, rec.lf, rec.gv, q, v, a, buf)
                else:
                    finite = self._entry(name, _k().rnea_derivatives.rnea_derivatives_state,
                                         (rec.li, rec.lf, rec.gv, q, v, a, buf), 3)
                if finite:
                    res = buf.reshape(rec.flat2 if flat else rec.shape2)
                    return res[0], res[1]
        return super().rnea_derivatives(model, q, v, a, fext)

    def aba_derivatives(self, model: RobotModel, q, v, tau, fext=None, minv=None, return_acceleration: bool = False,
                        out=None, acceleration_out=None):
        if fext is None and minv is None and out is None and acceleration_out is None:
            # the single-state kernel (.aba_derivatives.aba_derivatives_state): no batch range,
            # external-force or M^-1 arguments, the finiteness check compiled (its result)
            hit = _state(self._one_states, model, q, v, tau)
            if hit is not None:
                rec, flat = hit
                buf = np.empty(rec.size3)
                acc = np.empty(rec.nv) if return_acceleration else rec.no_acc
                name = "aba_derivatives_state" if flat else "aba_derivatives_state_row"
                ep = self._entries.get(name)
                if ep is not None:
                    finite = ep(rec.li, rec.lf, rec.gv, q, v, tau, buf, acc)
                else:
                    finite = self._entry(name, _k().aba_derivatives.aba_derivatives_state,
                                         (rec.li, rec.lf, rec.gv, q, v, tau, buf, acc), 3)
                if finite:
                    res = buf.reshape(rec.flat3 if flat else rec.shape3)
                    d = (res[0], res[1], res[2])
                    if return_acceleration:
                        return (acc if flat else acc.reshape(rec.row), *d)
                    return d
        return super().aba_derivatives(model, q, v, tau, fext, minv, return_acceleration, out, acceleration_out)

    # ------------------------------------------------------------ dynamics kernels
    def _dynamics(self, name: str, model, q, v, x, fext):
        """rnea (x = a, gives tau) or aba (x = tau, gives qdd): (B, nv) from kernel ``name``."""
        pm = packed(model)
        k = getattr(_k(), name)
        out = np.empty((q.shape[0], pm.nv))
        fe = pm.no_fext if fext is None else _f64(fext)
        self._run(name, pm, getattr(k, name + "_range"), q.shape[0], pm.li, pm.lf,
                  pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(x), fe, out)
        return out

    def _matrix(self, name: str, model, q):
        """crba (M) or minv (M⁻¹): (B, nv, nv) from kernel ``name``."""
        pm = packed(model)
        k = getattr(_k(), name)
        out = np.empty((q.shape[0], pm.nv, pm.nv))
        self._run(name, pm, getattr(k, name + "_range"), q.shape[0], pm.li, pm.lf,
                  _f64(q), out)
        return out

    def _rnea(self, model, q, v, a, fext):
        return self._dynamics("rnea", model, q, v, a, fext)

    def _crba(self, model, q):
        return self._matrix("crba", model, q)

    def _minv(self, model, q):
        return self._matrix("minv", model, q)

    def _aba(self, model, q, v, tau, fext):
        return self._dynamics("aba", model, q, v, tau, fext)

    def _rnea_derivatives(self, model, q, v, a, fext):
        pm = packed(model)
        k = _k().rnea_derivatives
        B, nv = q.shape[0], pm.nv
        out = np.empty((2, B, nv, nv))
        fe = pm.no_fext if fext is None else _f64(fext)
        self._run("rnea_derivatives", pm, k.rnea_derivatives_range, B, pm.li, pm.lf,
                  pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(a), fe, out)
        return out[0], out[1]

    def _aba_derivatives(self, model, q, v, tau, fext, minv):
        pm = packed(model)
        k = _k().aba_derivatives
        B, nv = q.shape[0], pm.nv
        out = np.empty((3, B, nv, nv))
        fe = pm.no_fext if fext is None else _f64(fext)
        mi = pm.no_minv if minv is None else _f64(minv)
        self._run("aba_derivatives", pm, k.aba_derivatives_range, B, pm.li, pm.lf,
                  pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), fe, mi, out, np.empty((0, nv)))  # writeable, like acc below
        return out[0], out[1], out[2]

    def prepare_aba_derivatives(self, model, q, v, tau, out, acceleration_out):
        """See :meth:`Backend.prepare_aba_derivatives`: the kernel's arguments bound once (read-only
        views of the caller's state buffers, which follow their contents), so ``run()`` is the
        thread-count check and one dispatch of the serial or parallel kernel."""
        B = self._prepared_batch("prepare_aba_derivatives", model, q, v, tau)
        nv = model.nv
        _check_out("prepare_aba_derivatives", "out", out, (3, B, nv, nv))
        _check_out("prepare_aba_derivatives", "acceleration_out", acceleration_out, (B, nv))
        pm = packed(model)
        k = _k().aba_derivatives
        return partial(self._run, "aba_derivatives", pm, k.aba_derivatives_range, B,
                       pm.li, pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), pm.no_fext, pm.no_minv, out,
                       acceleration_out)

    def prepare_aba_second_derivatives(self, model, q, v, tau, out, bracket: bool = False):
        """See :meth:`Backend.prepare_aba_second_derivatives`: the kernel's arguments bound once, as
        :meth:`prepare_aba_derivatives` binds its own."""
        self._require("aba_second_derivatives")
        B = self._prepared_batch("prepare_aba_second_derivatives", model, q, v, tau)
        nv = model.nv
        _check_out("prepare_aba_second_derivatives", "out", out, (4, B, nv, nv, nv))
        pm = packed(model)
        k = _k().aba_second_derivatives
        return partial(self._run, "second_order", pm, k.aba_second_derivatives_range, B,
                       pm.li, pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), pm.no_fext, bool(bracket), out)

    def prepare_aba_derivatives_call(self, model, q, v, tau, out, acceleration_out):
        """See :meth:`Backend.prepare_aba_derivatives_call`: :meth:`prepare_aba_derivatives`'
        kernel (``aba_derivatives_range``) and its bound arguments."""
        return self._kernel_call(self.prepare_aba_derivatives(model, q, v, tau, out, acceleration_out))

    def prepare_aba_second_derivatives_call(self, model, q, v, tau, out, bracket: bool = False):
        """See :meth:`Backend.prepare_aba_second_derivatives_call`: :meth:`prepare_aba_second_derivatives`'
        kernel (``aba_second_derivatives_range``) and its bound arguments."""
        return self._kernel_call(self.prepare_aba_second_derivatives(model, q, v, tau, out, bracket))

    def _kernel_call(self, run: partial) -> BatchKernelCall:
        """The :class:`BatchKernelCall` of a prepared ``run`` (a partial of :meth:`_run`): its kernel's
        address for its bound arguments (compiled or loaded here), and :meth:`_run`'s serial rule."""
        kind, pm, kernel, B, *args = run.args
        args = tuple(args)
        address = _k().threaded_batch.kernel_address(kernel, (*args, 0, B))

        def threads() -> int:       # what _run spreads the batch over
            nt = self.threads
            return 1 if self._serial(kind, pm, B, nt) else min(nt, B)
        return BatchKernelCall(address, args, B, threads)

    def _aba_derivatives_into(self, model, q, v, tau, fext, minv, out, acc) -> bool:
        if out is None:
            return False
        pm = packed(model)
        k = _k().aba_derivatives
        fe = pm.no_fext if fext is None else _f64(fext)
        mi = pm.no_minv if minv is None else _f64(minv)
        self._run("aba_derivatives", pm, k.aba_derivatives_range, q.shape[0], pm.li,
                  pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), fe, mi, out,
                  np.empty((0, pm.nv)) if acc is None else acc)
        return True

    def _aba_derivatives_with_acceleration(self, model, q, v, tau, fext, minv):
        pm = packed(model)
        k = _k().aba_derivatives
        B, nv = q.shape[0], pm.nv
        out = np.empty((3, B, nv, nv))
        acc = np.empty((B, nv))
        fe = pm.no_fext if fext is None else _f64(fext)
        mi = pm.no_minv if minv is None else _f64(minv)
        self._run("aba_derivatives", pm, k.aba_derivatives_range, B, pm.li, pm.lf,
                  pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), fe, mi, out, acc)
        return acc, out[0], out[1], out[2]

    def _rnea_second_derivatives(self, model, q, v, a, fext):
        pm = packed(model)
        k = _k().rnea_second_derivatives
        B, nv = q.shape[0], pm.nv
        out = np.empty((4, B, nv, nv, nv))
        fe = pm.no_fext if fext is None else _f64(fext)
        self._run("second_order", pm, k.rnea_second_derivatives_range, B, pm.li,
                  pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(a), fe, out)
        return out[0], out[1], out[2], out[3]

    def _aba_second_derivatives(self, model, q, v, tau, fext):
        out = np.empty((4, q.shape[0], model.nv, model.nv, model.nv))
        self._aba_second_derivatives_into(model, q, v, tau, fext, out)
        return out[0], out[1], out[2], out[3]

    def _aba_second_derivatives_into(self, model, q, v, tau, fext, out, bracket: bool = False) -> bool:
        pm = packed(model)
        k = _k().aba_second_derivatives
        fe = pm.no_fext if fext is None else _f64(fext)
        self._run("second_order", pm, k.aba_second_derivatives_range, q.shape[0],
                  pm.li, pm.lf, pm.gv, pm.bl, pm.bf, _f64(q), _f64(v), _f64(tau), fe, bool(bracket), out)
        return True

    def _aba_second_derivatives_bracket(self, model, q, v, tau, fext):
        out = np.empty((4, q.shape[0], model.nv, model.nv, model.nv))
        self._aba_second_derivatives_into(model, q, v, tau, fext, out, True)
        return out[0], out[1], out[2], out[3]

    def _aba_second_derivatives_bracket_into(self, model, q, v, tau, fext, out) -> bool:
        return self._aba_second_derivatives_into(model, q, v, tau, fext, out, True)

    # ------------------------------------------------------------ kinematics kernels
    def _placements(self, model, q, flink, ff):
        k = _k().kinematics
        pm = packed(model)
        B, nf = q.shape[0], flink.shape[0]
        R = np.empty((B, nf, 3, 3))
        p = np.empty((B, nf, 3))
        self._run("kinematics", pm, k.placements_range, B, pm.li, pm.lf, _f64(q), flink, ff,
                  R, p)
        return R, p

    def _frame_placement(self, model, q, frame):
        flink, ff = frame_arrays(model, packed(model), frame)
        R, p = self._placements(model, q, flink, ff)
        return R[:, 0], p[:, 0]

    def _body_placements(self, model, q):
        pm = packed(model)
        return self._placements(model, q, pm.bl, pm.bf)

    def _site_placements(self, model, q):
        pm = packed(model)
        return self._placements(model, q, pm.site_link, pm.site_frames)

    def _jacobians(self, model, q, v, frame, reference, with_dJ):
        if reference not in _REFERENCES:
            raise ValueError(f"unknown reference frame '{reference}'; use one of {', '.join(_REFERENCES)}")
        pm = packed(model)
        flink, ff = frame_arrays(model, pm, frame)
        k = _k().kinematics
        B, nv = q.shape[0], pm.nv
        J = np.empty((B, 6, nv))
        dJ = np.empty((B, 6, nv)) if with_dJ else np.empty((0, 6, nv))
        vv = _f64(v) if with_dJ else _f64(np.zeros((1, nv)))
        self._run("kinematics", pm, k.frame_jacobian_range, B, pm.li, pm.lf, _f64(q), vv,
                  flink, ff, _REFERENCES[reference], J, dJ)
        return J, dJ

    def _frame_jacobian(self, model, q, frame, reference):
        return self._jacobians(model, q, None, frame, reference, False)[0]

    def _frame_jacobian_time_variation(self, model, q, v, frame, reference):
        return self._jacobians(model, q, v, frame, reference, True)

    def _com(self, model, q, with_J):
        pm = packed(model)
        k = _k().kinematics
        B, nv = q.shape[0], pm.nv
        com = np.empty((B, 3))
        J = np.empty((B, 3, nv)) if with_J else np.empty((0, 3, nv))
        self._run("kinematics", pm, k.com_range, B, pm.li, pm.lf, pm.gv, _f64(q), com, J)
        return com, J

