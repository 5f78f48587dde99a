"""The backend interface every dynamics implementation provides, and the registry of backends.

A backend implements the flat-batch kernels (``_rnea``, ``_crba``, …) on arrays whose leading
axis is the batch; :class:`Backend` does everything user-facing once for all backends: shape and
finiteness checks with clear messages, broadcasting of leading batch dimensions and reshaping of
results. All results are float64 arrays ``(..., ...)`` with the caller's batch dimensions.
Derivative matrices are ``(..., nv, nv)``: rows = output, columns = derivative variable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .inputs import as_array, broadcast_batch, fast_flat, unflatten
from .model import RobotModel



def _check_out(function: str, name: str, buf, shape: tuple) -> None:
    """Raise when ``buf`` cannot receive a result of ``shape`` in place (an ``out=`` argument)."""
    if not (isinstance(buf, np.ndarray) and buf.dtype == np.float64 and buf.flags.c_contiguous
            and buf.flags.writeable and buf.shape == shape):
        got = f"{getattr(buf, 'dtype', type(buf).__name__)} {getattr(buf, 'shape', '')}"
        raise ValueError(f"{function}: {name} must be a writeable C-contiguous float64 array of shape {shape}, "
                         f"got {got}")

def batch_args(func: str, model: RobotModel, fext=None, **arrays) -> tuple[tuple[int, ...], list]:
    """Check and flatten the arguments of the Backend API function ``func``: ``arrays`` given as
    ``name=(x, "nq"|"nv")`` (the model attribute giving the trailing size), fext (..., nbody, 6) or
    None. Returns ``(batch, [(B, n) arrays..., (B, nbody, 6) fext or None])`` with the leading batch
    dimensions broadcast and flattened to B; a wrong type, shape or a non-finite value raises an
    error naming ``func`` and the argument."""
    if fext is None and type(model) is RobotModel:
        # the common case without the broadcasting machinery (tens of µs per call otherwise,
        # several times a single-state kernel; the solvers call the backend once per knot)
        fast = fast_flat({k: (x, model.nq if n == "nq" else model.nv) for k, (x, n) in arrays.items()})
        if fast is not None:
            fast[1].append(None)
            return fast
    if not isinstance(model, RobotModel):
        raise TypeError(f"{func}: expected a RobotModel (from dynamics.load_model) as first argument, "
                        f"got {type(model).__name__}")
    checked = {}
    for k, (x, n) in arrays.items():
        checked[k] = (as_array(k, x, (getattr(model, n),), func), 1)
    if fext is not None:
        checked["fext"] = (as_array("fext", fext, (model.nbody, 6), func), 2)
    batch, flat = broadcast_batch(func, checked)
    if fext is None:
        flat.append(None)
    return batch, flat


class BackendUnavailableError(RuntimeError):
    """A known backend cannot run on this machine (missing dependency or hardware)."""


@dataclass(frozen=True)
class CompiledForwardDynamics:
    """What a compiled (numba) backend offers to compiled solver loops, so that a solver's kernel
    can call the backend's forward dynamics without knowing the backend (see
    :meth:`Backend.compiled_forward_dynamics`).

    ``aba_range(*model_args, q, v, tau, fext, qdd, start, stop)``: a numba-compiled function
    writing ``qdd[s] = ABA(q[s], v[s], tau[s])`` for ``start <= s < stop``, with q (S, nq), v and
    tau (S, nv) read-only float64 C-contiguous arrays, qdd (S, nv) and fext ``model_args``' own
    "no external force" array (``no_fext``). ``integrate_q(joint_rows, q, w, out)`` and
    ``difference_x(joint_rows, nq, x0, x1, out)``: compiled ``q ⊕ w`` (configuration part) and
    ``x1 ⊖ x0`` (tangent (2 nv,)) on the model's joint table ``joint_rows``. ``source_hash``:
    changes whenever the compiled code behind these functions changes; a caller that caches its own
    kernel on disk adds it to its stamp. ``threads()``: how many worker threads the backend's batched
    calls use now (a caller may spread independent slices of its own work over that many numba
    threads).
    """

    aba_range: Callable
    model_args: tuple
    no_fext: np.ndarray
    source_hash: str
    integrate_q: Callable
    difference_x: Callable
    joint_rows: np.ndarray
    threads: Callable[[], int] = lambda: 1


@dataclass(frozen=True)
class BatchKernelCall:
    """A backend's prepared batched call as a compiled kernel for a solver's own compiled loop to
    call by address (:meth:`Backend.prepare_aba_derivatives_call`): ``kernel(*args, 0, batch)``
    with numba's calling convention (:func:`dynamics.kernels.threaded_batch.call_at`) computes the
    whole batch on the calling thread. ``threads()``: how many worker threads the backend itself
    would spread the batch over now (its thread count and the batch's size; 1: the calling thread);
    with nt > 1 the caller runs the kernel as the backend would, on the slices ``[c·B//nt,
    (c+1)·B//nt)`` in parallel (:func:`dynamics.kernels.threaded_batch.run_slices`, by address:
    :func:`~dynamics.kernels.threaded_batch.driver_address`) after ``use_threads(nt)``. Its value
    changes only when :func:`dynamics.worker_threads.epoch` does (a backend whose count changes
    otherwise calls :func:`dynamics.worker_threads.changed`), so a caller may keep it until then."""

    address: int
    args: tuple
    batch: int
    threads: Callable[[], int]

    def serial(self) -> bool:
        """Whether the backend would run the batch on the calling thread now."""
        return self.threads() <= 1


@dataclass(frozen=True)
class CompiledContactDynamics:
    """What a compiled (numba) backend offers to compiled solver loops for one
    :class:`~dynamics.contact.ContactSet` (see :meth:`Backend.compiled_contact_dynamics`): the
    backend's own compiled rigid-contact and impulse dynamics, callable from a solver's kernel
    without knowing the backend.

    ``contact_range(*model_args, q, v, tau, *contact_args, point, kp, kd, pref, derivs, Mi, bias, zero,
    no_fext, fext, rd, a, lam, flag, da, dl, start, stop)``: for ``start <= s < stop`` the
    constrained acceleration ``a[s]`` (S, nv) and forces ``lam[s]`` (S, ≥ nc) of
    ``M a + b = τ + Jᵀ λ``, ``J a + γ = 0`` (docs/contacts.md), and ``flag[s]`` the smallest
    relative pivot of ``K = J M⁻¹ Jᵀ``: where ``not flag[s] > pivot_rtol`` the contact Jacobian is
    rank deficient and ``a[s]``, ``lam[s]`` are not written. q (S, nq), v, tau, zero (S, nv):
    read-only float64 C-contiguous (zero: zeros); Mi (S, nv, nv), bias (S, nv): scratch; with
    ``derivs=False``: fext (0, nbody, 6), rd (2, 0, nv, nv), da (3, 0, nv, nv), dl (3, 0, nc, nv)
    empty scratch; no_fext: this object's ``no_fext``.
    ``impulse_range(*model_args, q, v, *contact_args, point, kp, kd, pref, restitution, Mi, zero, vp,
    imp, flag, start, stop)``: the rigid impact ``vp[s]`` = v⁺ and ``imp[s]`` = Λ with the same
    rank flag. ``contact_args`` (read-only arrays of this set), ``point``, ``kp``, ``kd``, ``pref``:
    this set's constants. ``source_hash`` changes whenever the compiled code behind the functions
    changes (a caller caching its own kernel on disk adds it to its stamp).
    """

    contact_range: Callable
    impulse_range: Callable
    model_args: tuple
    contact_args: tuple
    point: bool
    kp: float
    kd: float
    pref: np.ndarray
    nc: int
    no_fext: np.ndarray
    pivot_rtol: float
    source_hash: str


@dataclass(frozen=True)
class CompiledKinematics:
    """What a compiled (numba) backend offers to compiled cost evaluation (see
    :meth:`Backend.compiled_kinematics`): frame kinematics of one configuration, callable from a
    solver's kernel without knowing the backend.

    ``ws, wsi = workspace(*model_args, nv)``: scratch arrays, made once per kernel call.
    ``frames_knot(*model_args, q, flink, ff, with_J, ws, wsi, oRf, opf, J)``: world rotations
    ``oRf`` (nf, 3, 3) and positions ``opf`` (nf, 3) of the frames given by
    :meth:`frame_table` at q (nq,) and, when ``with_J``, their ``local_world_aligned`` Jacobians
    ``J`` (nf, 6, nv). ``frame_table(names) -> (flink (nf,) int64, ff (nf, 12) float64)``: the
    frames' rows, read-only. ``difference_x(joint_rows, nq, x0, x1, out)``: ``x1 ⊖ x0`` (2 nv,)
    and ``difference_jacobian(joint_rows, d, J, tmp)``: ``∂(q1 ⊖ q0)/∂q1`` (nv, nv) from that
    difference d (tmp: (8, 3, 3) scratch), on the model's joint table ``joint_rows``;
    ``difference_batch(joint_rows, nq, x0, x1, out)``: ``x1[b] ⊖ x0[b]`` for (B, nx) read-only
    float64 C-contiguous arrays into out (B, 2 nv), callable from Python;
    ``integrate_batch(joint_rows, nq, x, dx, out)``: ``x[b] ⊕ dx[b]`` for read-only (B, nx), (B, 2 nv)
    float64 C-contiguous arrays into out (B, nx), callable from Python;
    ``integrate_with_jacobians_batch(joint_rows, q, w, out, Jq, Jw)``: the configuration step
    ``q[b] ⊕ w[b]`` into out (B, nq) and its Jacobians (``dynamics.joints.integrate_jacobians``)
    into Jq, Jw (B, nv, nv), for read-only (B, nq), (B, nv) inputs, callable from Python.
    ``source_hash`` changes whenever the compiled code behind the functions changes (a caller
    caching its own kernel on disk adds it to its stamp). ``threads()``: as
    :attr:`CompiledForwardDynamics.threads`.
    ``frame_velocity_dq(li, link, v, J, out)`` (``li = model_args[0]``, link = a frame's
    ``flink`` entry): the derivative (3, nv) with respect to q at fixed v (nv,) of the frame origin's
    linear velocity ``J[:3] v``, from the frame's ``local_world_aligned`` Jacobian J (6, nv) that
    ``frames_knot`` gave, into out; None where the backend does not offer it.
    ``com_knot(*model_args, ws, with_J, com, J)``: the centre of mass (3,) into com and, when
    ``with_J``, its Jacobian (3, nv) into J, at the configuration of the last ``frames_knot`` call
    on the workspace ws; None where the backend does not offer it.
    """

    workspace: Callable
    frames_knot: Callable
    model_args: tuple
    frame_table: Callable
    difference_x: Callable
    difference_jacobian: Callable
    difference_batch: Callable
    joint_rows: np.ndarray
    source_hash: str
    threads: Callable[[], int] = lambda: 1
    integrate_batch: Callable | None = None
    integrate_with_jacobians_batch: Callable | None = None
    frame_velocity_dq: Callable | None = None
    com_knot: Callable | None = None


class Backend:
    """Batched rigid-body dynamics. Subclasses implement the underscore kernels on (B, …) arrays; a
    subclass with a faster way to compute a public function (the numba backend's fused contact
    kernels) overrides that method and calls ``super()`` for the inputs its kernel does not cover.

    Capabilities a solver may ask for (and must not infer from the backend's name):
    :attr:`prefers_compiled_solver`, :meth:`compiled_forward_dynamics`,
    :meth:`compiled_contact_dynamics`, :meth:`compiled_kinematics`, :meth:`supports`."""

    name: str = "abstract"
    #: the backend runs compiled code, so the solver's own loops (Riccati pass, rollouts) should be
    #: compiled too or they dominate; interpreted backends (the numpy reference) leave this False
    prefers_compiled_solver: bool = False
    #: the kernels accept complex inputs and propagate them exactly (complex-step derivatives)
    complex_step_safe: bool = False
    #: the backend emulates hardware and keeps running totals ``simulated_s_total`` (the hardware's
    #: time by its model) and ``emulation_wall_s_total`` (what the host spent emulating); the MPC
    #: runner's real-time mode charges the first instead of the second (fpga-sim)
    simulated_time: bool = False
    #: the backend compiles each kernel (and its serial/parallel variant) on its first call and
    #: caches it on disk, so running a computation once warms up exactly the kernels it needs:
    #: the MPC controller then warms up by running one solver iteration rather than
    #: :meth:`warmup`, which compiles every kernel of the backend
    warmup_by_use: bool = False

    def compiled_forward_dynamics(self, model: RobotModel) -> CompiledForwardDynamics | None:
        """The backend's forward dynamics as a function compiled solver loops can call, or None
        when this backend has none (the solver then rolls out through :meth:`aba` in Python)."""
        return None

    def compile_ahead(self, model: RobotModel, calls):
        """Start compiling the batched kernels of ``calls`` ((function name, batch size) pairs) in
        the background, for a backend that compiles on first use; returns a job with ``wait()``
        to call before making those calls, or None (nothing to do: the default)."""
        return None

    def compiled_kinematics(self, model: RobotModel) -> CompiledKinematics | None:
        """The backend's frame kinematics as functions compiled cost evaluation can call, or None
        when this backend has none (the problem then evaluates its cost terms in Python)."""
        return None

    def compiled_contact_dynamics(self, model: RobotModel, contacts) -> CompiledContactDynamics | None:
        """The backend's rigid-contact and impulse dynamics on ``contacts`` (a
        :class:`~dynamics.contact.ContactSet` of ``model``) as functions compiled solver loops can
        call, or None when this backend has none or they do not cover this contact set (the solver
        then rolls out through :meth:`contact_dynamics` / :meth:`impulse_dynamics` in Python)."""
        return None

    # ---------------------------------------------------------------- argument handling
    _args = staticmethod(batch_args)   # the subclasses' spelling (no extra call on the hot path)

    # ---------------------------------------------------------------- public API
    def rnea(self, model: RobotModel, q, v, a, fext=None, algorithm: str = "recursive") -> np.ndarray:
        """Inverse dynamics ``tau = M(q) a + c(q, v) - Σ J_b^T fext_b`` (..., nv) [N m or N].

        fext: (..., nbody, 6) spatial force (force, torque) on each MuJoCo body in its body frame,
        at the body origin; row 0 (world) is ignored.
        algorithm: ``"recursive"`` (RNEA, O(n) depth) or ``"scan"`` (prefix-sum RNEA, Yang, Wu & Pan 2017,
        O(log n) depth; see :mod:`dynamics.parallel_depth`)."""
        if algorithm != "recursive":
            from . import parallel_depth
            return parallel_depth.rnea(self, model, q, v, a, fext=fext, algorithm=algorithm)
        batch, (q, v, a, fe) = self._args("rnea", model, fext, q=(q, "nq"), v=(v, "nv"), a=(a, "nv"))
        return unflatten(batch, self._rnea(model, q, v, a, fe))

    def bias_forces(self, model: RobotModel, q, v, fext=None) -> np.ndarray:
        """``c(q, v)``: Coriolis, centrifugal, gravity and external-force terms (..., nv)."""
        batch, (q, v, fe) = self._args("bias_forces", model, fext, q=(q, "nq"), v=(v, "nv"))
        return unflatten(batch, self._rnea(model, q, v, np.zeros_like(v), fe))

    def gravity_torques(self, model: RobotModel, q) -> np.ndarray:
        """Generalised gravity ``g(q) = rnea(q, 0, 0)`` (..., nv)."""
        batch, (q, _) = self._args("gravity_torques", model, None, q=(q, "nq"))
        z = np.zeros((q.shape[0], model.nv))
        return unflatten(batch, self._rnea(model, q, z, z, None))

    def crba(self, model: RobotModel, q) -> np.ndarray:
        """Joint-space inertia matrix M(q) including armature (..., nv, nv)."""
        batch, (q, _) = self._args("crba", model, None, q=(q, "nq"))
        return unflatten(batch, self._crba(model, q))

    def minv(self, model: RobotModel, q) -> np.ndarray:
        """Analytical ``M(q)^-1`` (..., nv, nv), computed without factorising M."""
        batch, (q, _) = self._args("minv", model, None, q=(q, "nq"))
        return unflatten(batch, self._minv(model, q))

    def aba(self, model: RobotModel, q, v, tau, fext=None) -> np.ndarray:
        """Forward dynamics by the Articulated Body Algorithm, a = M^-1 (tau - c) (..., nv)."""
        batch, (q, v, t, fe) = self._args("aba", model, fext, q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
        return unflatten(batch, self._aba(model, q, v, t, fe))

    def forward_dynamics(self, model: RobotModel, q, v, tau, fext=None, method: str = "aba") -> np.ndarray:
        """Forward dynamics by ``method="aba"``, ``"minv"`` (``M^-1 (tau - c)`` with the analytical
        M^-1) or one of the parallel-in-depth methods of :mod:`dynamics.parallel_depth` (Yang, Wu & Pan 2016:
        ``"jsiia"``, ``"abia"``, ``"oee"``)."""
        if method == "aba":
            return self.aba(model, q, v, tau, fext)
        if method != "minv":
            from . import parallel_depth
            return parallel_depth.forward_dynamics(self, model, q, v, tau, fext=fext, method=method)
        batch, (q, v, t, fe) = self._args("forward_dynamics", model, fext, q=(q, "nq"), v=(v, "nv"),
                                          tau=(tau, "nv"))
        c = self._rnea(model, q, v, np.zeros_like(v), fe)
        return unflatten(batch, np.einsum("bij,bj->bi", self._minv(model, q), t - c))

    def rnea_derivatives(self, model: RobotModel, q, v, a, fext=None) -> tuple[np.ndarray, np.ndarray]:
        """``(dtau_dq, dtau_dv)``, each (..., nv, nv); ``dtau_da`` is ``crba(q)``."""
        batch, (q, v, a, fe) = self._args("rnea_derivatives", model, fext, q=(q, "nq"), v=(v, "nv"),
                                          a=(a, "nv"))
        return tuple(unflatten(batch, x) for x in self._rnea_derivatives(model, q, v, a, fe))

    def aba_derivatives(self, model: RobotModel, q, v, tau, fext=None, minv=None, return_acceleration: bool = False,
                        out: np.ndarray | None = None, acceleration_out: np.ndarray | None = None):
        """``(da_dq, da_dv, da_dtau)``, each (..., nv, nv) (Plancher et al. 2021 Algorithm 3).

        minv: optional precomputed ``M^-1`` (..., nv, nv) to reuse (Dadu-RBD's ΔiFD).
        return_acceleration: also return the acceleration ``a`` (..., nv) that the algorithm
        computes on the way (ABA), first: ``(a, da_dq, da_dv, da_dtau)`` — one call instead of
        ``aba`` plus ``aba_derivatives``.
        out: optional float64 C-contiguous (3, ..., nv, nv) array receiving ``(da_dq, da_dv,
        da_dtau)``, and acceleration_out (..., nv) receiving ``a`` (with return_acceleration): the
        returned arrays are then views of them (a solver's workspace, reused across calls; the
        compiled backends write into them directly, the others copy)."""
        arrays = dict(q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
        batch, (q, v, t, fe) = self._args("aba_derivatives", model, fext, **arrays)
        mi = None
        if minv is not None:
            mi = as_array("minv", minv, (model.nv, model.nv), "aba_derivatives")
            mi = np.broadcast_to(mi, batch + (model.nv, model.nv)).reshape((-1, model.nv, model.nv))
        if out is not None or acceleration_out is not None:
            return self._aba_derivatives_out(model, batch, q, v, t, fe, mi, return_acceleration, out, acceleration_out)
        if return_acceleration:
            return tuple(unflatten(batch, x) for x in self._aba_derivatives_with_acceleration(model, q, v, t, fe, mi))
        return tuple(unflatten(batch, x) for x in self._aba_derivatives(model, q, v, t, fe, mi))

    def prepare_aba_derivatives(self, model: RobotModel, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                                out: np.ndarray, acceleration_out: np.ndarray):
        """A call made once per solver workspace: returns ``run()`` that computes
        ``aba_derivatives(model, q, v, tau, return_acceleration=True, out=out,
        acceleration_out=acceleration_out)`` on whatever q (B, nq), v, tau (B, nv) hold at that
        moment, into out (3, B, nv, nv) and acceleration_out (B, nv).

        Shapes and types are checked here, once; ``run()`` does not check its inputs again (the
        solver's iteration calls it on its own buffers; a non-finite input gives non-finite outputs,
        which the solver reports). Backends with compiled kernels bind the kernel's arguments
        here (numba: one dispatch, no per-call argument handling); this default calls
        :meth:`aba_derivatives`."""
        B = self._prepared_batch("prepare_aba_derivatives", model, q, v, tau)
        nv = model.nv
        _check_out("prepare_aba_derivatives", "out", out, (3, B, nv, nv))
        _check_out("prepare_aba_derivatives", "acceleration_out", acceleration_out, (B, nv))

        def run() -> None:
            self.aba_derivatives(model, q, v, tau, return_acceleration=True, out=out, acceleration_out=acceleration_out)
        return run

    def prepare_aba_second_derivatives(self, model: RobotModel, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                                       out: np.ndarray, bracket: bool = False):
        """A call made once per solver workspace: returns ``run()`` that computes
        ``aba_second_derivatives(model, q, v, tau, out=out)`` (with ``bracket``:
        :meth:`aba_second_derivatives_bracket`) on whatever q (B, nq), v, tau (B, nv) hold at that
        moment, into out (4, B, nv, nv, nv). Checked here, once, as :meth:`prepare_aba_derivatives`
        is; this default calls the public method."""
        fn = "aba_second_derivatives_bracket" if bracket else "aba_second_derivatives"
        self._require(fn)
        B = self._prepared_batch("prepare_aba_second_derivatives", model, q, v, tau)
        nv = model.nv
        _check_out("prepare_aba_second_derivatives", "out", out, (4, B, nv, nv, nv))
        call = getattr(self, fn)

        def run() -> None:
            call(model, q, v, tau, out=out)
        return run

    def prepare_aba_derivatives_call(self, model: RobotModel, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                                     out: np.ndarray, acceleration_out: np.ndarray) -> BatchKernelCall | None:
        """:meth:`prepare_aba_derivatives` as a compiled kernel with its arguments
        (:class:`BatchKernelCall`), for a solver's compiled loop that runs several stages in one
        call; checked as :meth:`prepare_aba_derivatives` is. None (this default): the backend has
        no such kernel (the caller runs the prepared call)."""
        return None

    def prepare_aba_second_derivatives_call(self, model: RobotModel, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                                            out: np.ndarray, bracket: bool = False) -> BatchKernelCall | None:
        """:meth:`prepare_aba_second_derivatives` as a :class:`BatchKernelCall`, as
        :meth:`prepare_aba_derivatives_call`; None (this default): no such kernel."""
        return None

    @staticmethod
    def _prepared_batch(func: str, model: RobotModel, q, v, tau) -> int:
        """B for the (B, n) C-contiguous float64 state buffers of a prepared call; raises otherwise."""
        if not isinstance(model, RobotModel):
            raise TypeError(f"{func}: expected a RobotModel, got {type(model).__name__}")
        B = getattr(q, "shape", (0,))[0]
        for name, a, n in (("q", q, model.nq), ("v", v, model.nv), ("tau", tau, model.nv)):
            if not (isinstance(a, np.ndarray) and a.dtype == np.float64 and a.flags.c_contiguous and a.shape == (B, n)):
                raise ValueError(f"{func}: {name} must be a C-contiguous float64 array of shape ({B}, {n}), got "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
        return B

    def _aba_derivatives_out(self, model, batch, q, v, t, fe, mi, return_acceleration, out, acc):
        """:meth:`aba_derivatives` into caller-owned buffers (checked here, once)."""
        nv, B = model.nv, q.shape[0]
        for name, buf, shape in (("out", out, (3,) + batch + (nv, nv)), ("acceleration_out", acc, batch + (nv,))):
            if buf is not None:
                _check_out("aba_derivatives", name, buf, shape)
        if acc is not None and not return_acceleration:
            raise ValueError("aba_derivatives: acceleration_out needs return_acceleration=True")
        D = None if out is None else out.reshape(3, B, nv, nv)
        a = None if acc is None else acc.reshape(B, nv)
        if not self._aba_derivatives_into(model, q, v, t, fe, mi, D, a):
            res = (self._aba_derivatives_with_acceleration(model, q, v, t, fe, mi) if return_acceleration
                   else (None, *self._aba_derivatives(model, q, v, t, fe, mi)))
            if a is not None:
                a[...] = res[0]
            if D is not None:
                D[0], D[1], D[2] = res[1:]
            a = res[0] if a is None else a
            derivs = res[1:] if D is None else (D[0], D[1], D[2])
        else:
            derivs = (D[0], D[1], D[2])
        derivs = tuple(unflatten(batch, x) for x in derivs)
        return (unflatten(batch, a), *derivs) if return_acceleration else derivs

    def _aba_derivatives_into(self, model, q, v, tau, fext, minv, out, acc) -> bool:
        """Write ``(da_dq, da_dv, da_dtau)`` into out (3, B, nv, nv) and, when acc (B, nv) is not
        None, ``a`` into acc, without temporaries; return False when this backend cannot (the
        caller then copies)."""
        return False

    def _aba_derivatives_with_acceleration(self, model, q, v, tau, fext, minv):
        """``(a, da_dq, da_dv, da_dtau)``; backends whose derivative kernel computes ``a`` anyway
        override this to return it instead of running ABA a second time."""
        return (self._aba(model, q, v, tau, fext), *self._aba_derivatives(model, q, v, tau, fext, minv))

    # kinematics
    def frame_placement(self, model: RobotModel, q, frame: str):
        """World rotation (..., 3, 3) and position (..., 3) [m] of a site, body or geom."""
        batch, (q, _) = self._args("frame_placement", model, None, q=(q, "nq"))
        R, p = self._frame_placement(model, q, frame)
        return unflatten(batch, R), unflatten(batch, p)

    def body_placements(self, model: RobotModel, q):
        """World rotations (..., nbody, 3, 3) and positions (..., nbody, 3) of all bodies (MuJoCo xmat/xpos)."""
        batch, (q, _) = self._args("body_placements", model, None, q=(q, "nq"))
        R, p = self._body_placements(model, q)
        return unflatten(batch, R), unflatten(batch, p)

    def site_placements(self, model: RobotModel, q):
        """World rotations (..., nsite, 3, 3) and positions (..., nsite, 3) of all sites."""
        batch, (q, _) = self._args("site_placements", model, None, q=(q, "nq"))
        R, p = self._site_placements(model, q)
        return unflatten(batch, R), unflatten(batch, p)

    def frame_jacobian(self, model: RobotModel, q, frame: str, reference: str = "local_world_aligned"):
        """Frame Jacobian (..., 6, nv) in ``reference`` ∈ {local, world, local_world_aligned}."""
        batch, (q, _) = self._args("frame_jacobian", model, None, q=(q, "nq"))
        return unflatten(batch, self._frame_jacobian(model, q, frame, reference))

    def frame_jacobian_time_variation(self, model: RobotModel, q, v, frame: str,
                                      reference: str = "local_world_aligned"):
        """``(J, dJ/dt)`` (..., 6, nv) each; ``J a + dJ v`` is the time derivative of ``J v``."""
        batch, (q, v, _) = self._args("frame_jacobian_time_variation", model, None, q=(q, "nq"), v=(v, "nv"))
        J, dJ = self._frame_jacobian_time_variation(model, q, v, frame, reference)
        return unflatten(batch, J), unflatten(batch, dJ)

    def frame_velocity(self, model: RobotModel, q, v, frame: str, reference: str = "local_world_aligned"):
        """Spatial velocity (linear, angular) (..., 6) of a frame in ``reference``."""
        if not isinstance(model, RobotModel):
            raise TypeError(f"frame_velocity: expected a RobotModel, got {type(model).__name__}")
        v = as_array("v", v, (model.nv,), "frame_velocity")
        return np.einsum("...ik,...k->...i", self.frame_jacobian(model, q, frame, reference), v)

    def frame_acceleration(self, model: RobotModel, q, v, a, frame: str, reference: str = "local_world_aligned"):
        """``d/dt (J v) = J a + dJ v`` (..., 6). In ``local`` this is the spatial acceleration; in
        ``local_world_aligned`` its linear part is the classical acceleration of the frame origin."""
        J, dJ = self.frame_jacobian_time_variation(model, q, v, frame, reference)
        v = np.asarray(v, float)
        a = as_array("a", a, (model.nv,), "frame_acceleration")
        return np.einsum("...ik,...k->...i", J, a) + np.einsum("...ik,...k->...i", dJ, v)

    def center_of_mass(self, model: RobotModel, q):
        """Centre of mass of the moving links [m] (..., 3)."""
        batch, (q, _) = self._args("center_of_mass", model, None, q=(q, "nq"))
        return unflatten(batch, self._center_of_mass(model, q))

    def com_jacobian(self, model: RobotModel, q):
        """Centre-of-mass Jacobian (..., 3, nv)."""
        batch, (q, _) = self._args("com_jacobian", model, None, q=(q, "nq"))
        return unflatten(batch, self._com_jacobian(model, q)[0])

    # second-order derivatives (Singh, Russell & Wensing 2022)
    def rnea_second_derivatives(self, model: RobotModel, q, v, a, fext=None):
        """``(d2tau_dq2, d2tau_dv2, d2tau_dqdv, dM_dq)``, each (..., nv, nv, nv), index order
        [output, first variable, second variable] (IDSVA-SO, Singh, Russell & Wensing 2022 Algorithm 1)."""
        self._require("rnea_second_derivatives")
        batch, (q, v, a, fe) = self._args("rnea_second_derivatives", model, fext, q=(q, "nq"),
                                          v=(v, "nv"), a=(a, "nv"))
        return tuple(unflatten(batch, x) for x in self._rnea_second_derivatives(model, q, v, a, fe))

    def aba_second_derivatives(self, model: RobotModel, q, v, tau, fext=None, out: np.ndarray | None = None):
        """``(d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau)``, each (..., nv, nv, nv) (FDSVA-SO, Singh, Russell & Wensing 2022
        eq. 46); ``∂²a/∂τ²`` and ``∂²a/∂v∂τ`` vanish.

        out: optional float64 C-contiguous (4, ..., nv, nv, nv) array receiving the four tensors
        (a solver's workspace); the returned arrays are then its views (the compiled backends
        write into it directly, the others copy)."""
        return self._second_order_tensors("aba_second_derivatives", model, q, v, tau, fext, out)

    def aba_second_derivatives_bracket(self, model: RobotModel, q, v, tau, fext=None, out: np.ndarray | None = None):
        """``(B_qq, B_vv, B_qv, B_qτ)``, each (..., nv, nv, nv): the bracketed terms of FDSVA-SO (Singh,
        Russell & Wensing 2022 eq. 46), ``∂²a/∂x∂y = −M⁻¹ B_xy`` (output index first, the index order
        of :meth:`aba_second_derivatives`). A caller contracting the output index with λ (DDP's
        ``λᵀ ∂²a``) folds ``−M⁻¹`` into λ instead and skips four nv⁴ products per state; a backend
        advertises it through ``supports("aba_second_derivatives_bracket")``. out: as for
        :meth:`aba_second_derivatives`."""
        return self._second_order_tensors("aba_second_derivatives_bracket", model, q, v, tau, fext, out)

    def _second_order_tensors(self, fn: str, model: RobotModel, q, v, tau, fext, out):
        """The four (..., nv, nv, nv) tensors of ``fn`` (:meth:`aba_second_derivatives` or
        :meth:`aba_second_derivatives_bracket`), into ``out`` when given."""
        self._require(fn)
        batch, (q, v, t, fe) = self._args(fn, model, fext, q=(q, "nq"), v=(v, "nv"), tau=(tau, "nv"))
        if out is None:
            return tuple(unflatten(batch, x) for x in getattr(self, "_" + fn)(model, q, v, t, fe))
        nv, B = model.nv, q.shape[0]
        _check_out(fn, "out", out, (4,) + batch + (nv, nv, nv))
        D = out.reshape(4, B, nv, nv, nv)
        if not getattr(self, f"_{fn}_into")(model, q, v, t, fe, D):
            D[0], D[1], D[2], D[3] = getattr(self, "_" + fn)(model, q, v, t, fe)
        return tuple(unflatten(batch, x) for x in D)

    def _aba_second_derivatives_into(self, model, q, v, tau, fext, out) -> bool:
        """Write the four tensors into out (4, B, nv, nv, nv) without temporaries; return False
        when this backend cannot (the caller then copies)."""
        return False

    def _aba_second_derivatives_bracket_into(self, model, q, v, tau, fext, out) -> bool:
        """:meth:`_aba_second_derivatives_into` for :meth:`aba_second_derivatives_bracket`."""
        return False

    # contact dynamics (rigid contacts; see dynamics.contact and docs/conventions.md). The generic
    # implementations of dynamics.contact use only this class's public methods; a backend with its
    # own (fused) kernels overrides these methods.
    def frame_motion_derivatives(self, model: RobotModel, q, v, a, contacts):
        """Velocity and acceleration (gravity not included) of every frame of ``contacts`` and their
        partial derivatives w.r.t. q (along ``q ⊕ δ``) and v at fixed a: a
        :class:`~dynamics.contact.FrameMotionDerivatives` whose fields have the inputs' batch dims,
        ``v``, ``a`` (..., k, 6), ``dv_dq``, ``dv_dv``, ``da_dq``, ``da_dv`` (..., k, 6, nv), ``R``
        (..., k, 3, 3), ``p`` (..., k, 3) [m]."""
        from .contact.common import flat_args
        from .contact.kinematics_derivatives import frame_motion_derivatives_numpy, unflatten_motion
        batch, (q, v, a) = flat_args("frame_motion_derivatives", model, contacts, q=(q, "nq"), v=(v, "nv"),
                                     a=(a, "nv"))
        return unflatten_motion(batch, frame_motion_derivatives_numpy(model, q, v, a, contacts))

    def contact_dynamics(self, model: RobotModel, q, v, tau, contacts):
        """``(a, lam)``: constrained forward dynamics (..., nv) and contact forces (..., nc)."""
        from . import contact
        return contact.contact_dynamics(self, model, q, v, tau, contacts)

    def contact_dynamics_derivatives(self, model: RobotModel, q, v, tau, contacts, return_values: bool = False,
                                     out=None):
        """``(da_dq, da_dv, da_dtau, dlam_dq, dlam_dv, dlam_dtau)`` of :meth:`contact_dynamics`;
        with ``return_values`` also ``(a, lam)`` from the same solve: ``((a, lam), derivatives)``.
        out: optional :class:`~dynamics.contact.ContactDynamicsBuffers` for the (flattened) batch,
        reused across calls; the results are then its views."""
        from . import contact
        return contact.contact_dynamics_derivatives(self, model, q, v, tau, contacts, return_values=return_values,
                                                    out=out)

    def prepare_contact_dynamics_derivatives(self, model: RobotModel, q: np.ndarray, v: np.ndarray, tau: np.ndarray,
                                             contacts, out):
        """A call made once per solver workspace: returns ``run()`` that computes
        ``contact_dynamics_derivatives(model, q, v, tau, contacts, return_values=True, out=out)``
        on whatever q (B, nq), v, tau (B, nv) hold at that moment, into ``out`` (a
        :class:`~dynamics.contact.ContactDynamicsBuffers` for B states).

        Shapes, types and the contact set are checked here, once (as
        :meth:`prepare_aba_derivatives` does); ``run()`` still raises
        :class:`~dynamics.contact.RankDeficientContactError` where the contact Jacobian lost rank.
        Backends with compiled kernels bind the kernel's arguments here; this default calls
        :meth:`contact_dynamics_derivatives`."""
        B = self._prepared_batch("prepare_contact_dynamics_derivatives", model, q, v, tau)
        contacts.check(model, "prepare_contact_dynamics_derivatives")
        out.check(B, model.nv, contacts.nc, "prepare_contact_dynamics_derivatives")

        def run() -> None:
            self.contact_dynamics_derivatives(model, q, v, tau, contacts, return_values=True, out=out)
        return run

    def impulse_dynamics(self, model: RobotModel, q, v_minus, contacts, restitution: float = 0.0):
        """``(v_plus, impulse)``: velocity after a rigid impact (..., nv) and the impulse (..., nc)."""
        from . import contact
        return contact.impulse_dynamics(self, model, q, v_minus, contacts, restitution=restitution)

    def impulse_dynamics_derivatives(self, model: RobotModel, q, v_minus, contacts, restitution: float = 0.0):
        """``(dvp_dq, dvp_dvminus, dimp_dq, dimp_dvminus)`` of :meth:`impulse_dynamics`."""
        from . import contact
        return contact.impulse_dynamics_derivatives(self, model, q, v_minus, contacts, restitution=restitution)

    #: tolerance this backend promises against the numpy reference, ``|x - ref| <= rtol * max(1, |ref|)``;
    #: float64 backends keep the default, reduced-precision ones (fixed point, float32) declare theirs
    rtol: float = 1e-10

    def supports(self, function: str) -> bool:
        """Whether this backend implements ``function`` (e.g. ``"aba_second_derivatives"``)."""
        return callable(getattr(self, "_" + function, None))

    def _require(self, function: str) -> None:
        if not self.supports(function):
            raise NotImplementedError(f"backend '{self.name}' does not implement {function}; use the 'numpy' "
                                      f"backend or dynamics.second_order_numerical for a numerical fallback")

    def warmup(self, model: RobotModel, progress=None) -> None:
        """Do any one-time work (compilation) for ``model``; a no-op for interpreted backends.
        progress: optional ``progress(label, done, total)`` called before each step."""


class CombinedComKernel:
    """Mix-in for a backend whose one kernel ``_com(model, q, with_J) -> (com (B, 3), J (B, 3, nv))``
    gives the centre of mass and, where ``with_J``, its Jacobian."""

    def _center_of_mass(self, model, q):
        return self._com(model, q, False)[0]

    def _com_jacobian(self, model, q):
        com, J = self._com(model, q, True)
        return J, com


@dataclass(frozen=True)
class BackendInfo:
    """How to build a backend: ``module:cls`` imported lazily (so an optional dependency such as
    CuPy is only needed when the backend is asked for), or a ``factory(**options)`` callable."""
    name: str
    module: str
    cls: str
    description: str
    factory: Callable[..., Backend] | None = None


BACKENDS: dict[str, BackendInfo] = {
    "numpy": BackendInfo("numpy", "dynamics.numpy_backend", "NumpyBackend",
                         "reference implementation, batched numpy (always available)"),
    "numba": BackendInfo("numba", "dynamics.numba_backend", "NumbaBackend",
                         "compiled CPU backend, parallel over the batch (numba)"),
    "gpu": BackendInfo("gpu", "dynamics.gpu_backend", "GpuBackend",
                       "NVIDIA GPU through CuPy + CUDA kernels (gpu extra); simulate=True runs the kernels "
                       "in Numba's CUDA simulator on any machine"),
    "fpga-sim": BackendInfo("fpga-sim", "dynamics.fpga_sim", "FpgaSimBackend",
                            "fixed-point datapath emulation with a cycle-level accelerator timing model"),
    "mujoco": BackendInfo("mujoco", "dynamics.mujoco_backend", "MujocoBackend",
                          "MuJoCo's own dynamics (mj_forward / mj_inverse), first-order derivatives by its central "
                          "differences (MJPC's approach); no second order"),
}
_instances: dict[str, Backend] = {}


def register_backend(name: str, factory: Callable[..., Backend] | str, description: str = "",
                     replace: bool = False) -> None:
    """Make ``get_backend(name, **options)`` build a backend that lives outside this package.

    factory: a callable ``factory(**options) -> Backend``, or ``"module:Class"`` imported lazily.
    A name already registered needs ``replace=True``."""
    if not isinstance(name, str) or not name:
        raise ValueError("register_backend: name must be a non-empty string")
    if name in BACKENDS and not replace:
        raise ValueError(f"register_backend: backend '{name}' is already registered; pass replace=True "
                         f"to override it")
    if isinstance(factory, str):
        mod, sep, cls = factory.partition(":")
        if not sep or not mod or not cls:
            raise ValueError(f"register_backend: factory string must look like 'package.module:Class', "
                             f"got '{factory}'")
        BACKENDS[name] = BackendInfo(name, mod, cls, description)
    elif callable(factory):
        BACKENDS[name] = BackendInfo(name, "", "", description, factory)
    else:
        raise TypeError(f"register_backend: factory must be callable or 'module:Class', got "
                        f"{type(factory).__name__}")
    _instances.pop(name, None)


def parse_backend_spec(spec: str) -> tuple[str, dict]:
    """``"name"`` or ``"name:key=value,key=value"`` (a backend with options, as a command line or a
    study configuration gives it) -> ``(name, options)``; values ``true``/``false`` become bools,
    integers ints, other numbers floats, the rest stay strings."""
    name, sep, rest = spec.partition(":")
    options: dict = {}
    for item in rest.split(",") if sep else ():
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"backend spec '{spec}': options must be key=value pairs separated by commas, "
                             f"e.g. 'fpga-sim:emulate=gradients,host=numba'")
        text = text.strip()
        value: object = {"true": True, "false": False}.get(text.lower(), text)
        if isinstance(value, str):
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    pass
        options[key.strip()] = value
    return name.strip(), options


def get_backend(name: str | Backend = "numpy", **options) -> Backend:
    """The backend called ``name`` (see :func:`available_backends`), or given by a spec with options
    (``"fpga-sim:emulate=gradients"``, :func:`parse_backend_spec`).

    options: passed to the backend's constructor (e.g. ``get_backend("gpu", simulate=True)``,
    ``get_backend("fpga-sim", fmt="Q12.20")``). Without options the instance is shared."""
    if isinstance(name, Backend):
        if options:
            raise ValueError("get_backend: options are only accepted with a backend name, not an instance")
        return name
    if isinstance(name, str) and name not in BACKENDS and ":" in name:
        name, spec_options = parse_backend_spec(name)
        options = {**spec_options, **options}
    if not options and name in _instances:
        return _instances[name]
    if name not in BACKENDS:
        raise ValueError(f"unknown backend '{name}'; known backends: {', '.join(BACKENDS)} "
                         f"(dynamics.register_backend adds your own)")
    info = BACKENDS[name]
    if info.factory is not None:
        inst = info.factory(**options)
    else:
        try:
            mod = importlib.import_module(info.module)
            cls = getattr(mod, info.cls)
        except BackendUnavailableError:
            raise
        except (ImportError, AttributeError) as e:
            raise BackendUnavailableError(f"backend '{name}' is not available: {e}") from e
        inst = cls(**options)
    if not isinstance(inst, Backend):
        raise TypeError(f"backend '{name}': its factory returned {type(inst).__name__}, not a dynamics.Backend")
    if not options:
        _instances[name] = inst
    return inst


def default_backend_name() -> str:
    """The backend the library and the CLI use when none is named: ``"numba"`` when numba imports
    here, else ``"numpy"`` (``mpc-accel backends`` says which)."""
    try:
        importlib.import_module("numba")
    except ImportError:
        return "numpy"
    return "numba"


def available_backends() -> dict[str, tuple[bool, str]]:
    """Every known backend name -> (available on this machine, description or reason)."""
    out = {}
    for name, info in BACKENDS.items():
        try:
            get_backend(name)
            out[name] = (True, info.description)
        except Exception as e:  # report why, never crash a listing
            out[name] = (False, str(e))
    return out
