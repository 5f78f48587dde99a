"""The ``gpu`` backend: batched dynamics and derivatives as CUDA kernels (Plancher et al. 2021 §IV-B).

* One thread block per knot point; inside a block, threads over links, tree depths, dofs,
  derivative columns and matrix entries; the ABA/RNEA sweeps stay serial on one thread
  (:mod:`.kernels` lists the parallel steps).
* Kernels are :mod:`numba.cuda` kernels launched on CuPy arrays on a GPU, or run by Numba's CUDA
  simulator on any machine with ``simulate=True`` (slow; for testing only). The per-state passes are
  the numba backend's, retargeted to device functions on the same packed model layout (:mod:`.runtime`).
* Inputs of a call travel host→device as one contiguous block and outputs device→host as one block;
  ``last_timing`` (:class:`GpuTiming`) separates transfer, device compute and host time.
* ∇FD in three partitions (``partition=``): ``"split"`` (device: ∂c'/∂u only), ``"fused"``
  (device: RNEA + ∂c'/∂u) and ``"completely_fused"`` (device: all of Plancher et al. 2021 Algorithm 3).
* Kernels: RNEA, CRBA, M⁻¹, ABA, ∇RNEA, ∇FD (also with M⁻¹ given), IDSVA-SO (``rnea_second_derivatives``),
  frame/body/site placements, frame Jacobians and their time variation, centre of mass and its Jacobian.
  Array code (``xp`` = NumPy or CuPy, on device arrays): the FDSVA-SO contraction of
  ``aba_second_derivatives`` (Singh, Russell & Wensing 2022 eq. 46) on the kernels' outputs, and ``-M⁻¹ ∂c'/∂u`` of the
  split/fused partitions (on the host, by their definition).
* float64 by default; ``dtype="float32"`` computes on the device in float32 (results returned as
  float64; accuracy bound :data:`FLOAT32_RTOL`).

Usage::

    be = dynamics.get_backend("gpu")                               # needs CuPy and a CUDA GPU
    be = dynamics.get_backend("gpu", simulate=True, dtype="float32", partition="fused")
    da_dq, da_dv, da_dtau = be.aba_derivatives(model, q, v, tau)  # (B, nv, nv) each
    be.last_timing                                                # GpuTiming
    out = be.on_device("aba_derivatives", model, q_dev, v_dev, tau_dev)   # device arrays in and out
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..accelerator_host import CompiledHost, resolve_host
from ..backend import Backend, BackendUnavailableError, CombinedComKernel
from ..model import RobotModel
from ..kernels.packing import frame_arrays, packed
from .runtime import INSTALL_HINT, Compiler, Runtime, make_runtime

__all__ = ["GpuBackend", "GpuTiming", "PARTITIONS", "LAUNCHES", "FLOAT32_RTOL", "BackendUnavailableError", "INSTALL_HINT"]

#: the CPU/GPU partitions of ∇FD (Plancher et al. 2021 §IV-B)
PARTITIONS = ("split", "fused", "completely_fused")
#: how kernels are launched on a GPU: "bound" (PTX loaded once, parameters bound once per buffer set:
#: :mod:`.launch`) or "numba" (numba-cuda's dispatcher, which types every argument at every launch)
LAUNCHES = ("bound", "numba")
#: accuracy of ``dtype="float32"`` against the float64 numpy reference: ``|x - ref| <= rtol * max(1, max|ref|)``
#: per output array. Measured in the simulator at random states: ≤ 6e-6 on iiwa and HyQ for every
#: function (≤ 8e-6 second order), ≤ 1.5e-4 on Atlas (M⁻¹, ABA and ∇FD; its M is ill-conditioned)
FLOAT32_RTOL = 1e-3
_REFERENCES = {"local": 0, "world": 1, "local_world_aligned": 2}


@dataclass
class GpuTiming:
    """Wall-clock breakdown of the last call [s]. ``compute_s``: device work (kernels and device
    array code, synchronised); ``h2d_s``/``d2h_s``: the host↔device copies of the input/output
    blocks; ``host_s``: CPU work (packing, and the host side of the split/fused partitions)."""

    function: str
    partition: str
    batch: int
    h2d_s: float = 0.0
    compute_s: float = 0.0
    d2h_s: float = 0.0
    host_s: float = 0.0
    total_s: float = 0.0
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    simulated: bool = False

    @property
    def transfer_s(self) -> float:
        """Host↔device copy time [s]."""
        return self.h2d_s + self.d2h_s


@dataclass(eq=False)
class _ModelData:
    """A model's packed arrays on the device, and the kernels compiled for its sizes."""

    pm: object
    compiler: Compiler
    li: object
    lf: object
    gv: object
    bl: object
    bf: object
    levl: object
    levs: object
    nlev: int
    dl: object
    site_link: object
    site_frames: object
    block: int = 64
    frames: dict = field(default_factory=dict)


@dataclass(eq=False)
class _Plan:
    """Everything one (function, shapes) call reuses on a GPU (see :meth:`GpuBackend._plan`)."""

    pin_in: np.ndarray
    pin_out: np.ndarray
    din: object
    dout: object
    ins: list
    hin: list
    outs: list
    osz: list
    events: list


_COMPILERS: dict[tuple, Compiler] = {}


def _compiler(rt: Runtime, consts: dict) -> Compiler:
    """One kernel compiler per target and set of compile-time constants, shared by every backend
    instance (a model's kernels are JIT-compiled once per process, not once per instance)."""
    key = (rt.simulate, tuple(sorted((k, np.dtype(v).name if k == "DT" else v) for k, v in consts.items())))
    if key not in _COMPILERS:
        _COMPILERS[key] = Compiler(rt, consts)
    return _COMPILERS[key]


def _levels(li: np.ndarray) -> np.ndarray:
    """Tree depth of every link (root links 0)."""
    lvl = np.zeros(li.shape[0], dtype=np.int64)
    for i in range(li.shape[0]):
        lam = li[i, 0]
        lvl[i] = 0 if lam < 0 else lvl[lam] + 1
    return lvl


class GpuBackend(CompiledHost, CombinedComKernel, Backend):
    """CUDA-kernel backend (see the module docstring).

    simulate: run the kernels in Numba's CUDA simulator (any machine; slow, for testing only).
    dtype: ``"float64"`` (default) or ``"float32"`` device arithmetic.
    partition: ∇FD partition, one of :data:`PARTITIONS`.
    threads_per_block: threads of each knot's block (default: :meth:`block_size`, 64 or 128 on a GPU by robot
    size, 8 in the simulator, where every GPU thread is a Python thread).
    host: where the solver's host side runs (:mod:`dynamics.accelerator_host`): ``"numba"`` (default
    where numba is installed) — the solvers' compiled rollouts, cost kernels and Riccati pass on the
    numba backend's dynamics, the device computing the derivatives the solver asks the backend for
    (the rollout on the CPU, the gradients on the GPU: Plancher et al. 2021's partition) — or
    ``"python"`` (the solvers' Python reference loops, each forward-dynamics call a launch).
    launch: on a GPU, ``"bound"`` (default: PTX cached on disk, parameters bound once per device
    buffer set, pinned staging, one copy each way; :mod:`.launch`) or ``"numba"`` (numba-cuda's
    dispatcher, which types every argument at every launch). The simulator always uses its own.
    Raises BackendUnavailableError without CuPy or a CUDA device (unless ``simulate=True``).
    """

    name = "gpu"
    #: warm up by running one solver iteration: compiles exactly the kernels the solver launches
    #: (with the host side on numba, ∇FD and what the MPC predictor calls), not all of :meth:`warmup`'s
    warmup_by_use = True

    def __init__(self, simulate: bool = False, dtype: str = "float64", partition: str = "completely_fused",
                 threads_per_block: int | None = None, host: str | None = None, launch: str = "bound"):
        self.host = resolve_host(host, "gpu")
        if launch not in LAUNCHES:
            raise ValueError(f"gpu backend: launch must be one of {', '.join(LAUNCHES)}, got {launch!r}")
        if dtype not in ("float64", "float32"):
            raise ValueError(f"gpu backend: dtype must be 'float64' or 'float32', got {dtype!r}")
        if partition not in PARTITIONS:
            raise ValueError(f"gpu backend: partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
        if threads_per_block is not None and (isinstance(threads_per_block, bool) or
                                              not 1 <= int(threads_per_block) <= 1024):
            raise ValueError(f"gpu backend: threads_per_block must be between 1 and 1024, got {threads_per_block!r}")
        self.rt: Runtime = make_runtime(bool(simulate))
        self.simulate = bool(simulate)
        self.dtype = np.dtype(dtype)
        self.partition = partition
        self.threads_per_block = None if threads_per_block is None else int(threads_per_block)
        self.rtol = 1e-10 if self.dtype == np.float64 else FLOAT32_RTOL
        self.last_timing: GpuTiming | None = None
        self._models: "weakref.WeakKeyDictionary[RobotModel, _ModelData]" = weakref.WeakKeyDictionary()
        self._cpu = None
        self._work: dict = {}      # persistent device work arrays, see _scratch
        self._staging: dict = {}   # persistent host staging arrays, see _host_block
        self._plans: dict = {}     # persistent pinned staging, device blocks and events, see _run_bound
        self.launch = "numba" if self.simulate else launch
        self._bound = None
        if self.launch == "bound":
            from .launch import BoundLauncher
            cc = self.rt.xp.cuda.Device().compute_capability
            self._bound = BoundLauncher(self.rt.xp, (int(cc[:-1]), int(cc[-1])))

    def __repr__(self) -> str:
        return (f"GpuBackend(simulate={self.simulate}, dtype='{self.dtype.name}', partition='{self.partition}', "
                f"threads_per_block={self.threads_per_block}, host='{self.host}', launch='{self.launch}')")

    # ------------------------------------------------------------ model data, launches, transfers
    def _md(self, model: RobotModel) -> _ModelData:
        md = self._models.get(model)
        if md is None:
            from ..kernels.rnea_second_derivatives import NMATS as _NMATS, NVECS as _NVECS
            pm = packed(model)
            consts = dict(DT=self.dtype.type, NL=max(pm.nlinks, 1), NV=max(pm.nv, 1), NMATS=_NMATS, NVECS=_NVECS,
                          LIW=pm.li.shape[1], LFW=pm.lf.shape[1])
            dev = self.rt.to_device
            lvl = _levels(pm.li)
            nlev = int(lvl.max()) + 1 if lvl.size else 0
            dl = np.empty(pm.nv, dtype=np.int64)
            for i in range(pm.nlinks):
                dl[pm.li[i, 3]:pm.li[i, 3] + pm.li[i, 4]] = i
            md = _ModelData(pm=pm, compiler=_compiler(self.rt, consts), li=dev(pm.li), lf=dev(pm.lf.astype(self.dtype)),
                            gv=dev(pm.gv.astype(self.dtype)), bl=dev(pm.bl), bf=dev(pm.bf.astype(self.dtype)),
                            levl=dev(np.argsort(lvl, kind="stable").astype(np.int64)),
                            levs=dev(np.searchsorted(np.sort(lvl), np.arange(nlev + 1)).astype(np.int64)),
                            nlev=nlev, dl=dev(dl),
                            site_link=dev(pm.site_link), site_frames=dev(pm.site_frames.astype(self.dtype)),
                            block=self.block_size(model))
            self._models[model] = md
        return md

    def block_size(self, model: RobotModel) -> int:
        """Threads per knot block for ``model``: the ``threads_per_block`` option, else 8 in the
        simulator and on a GPU 64 up to 8 links, 128 above. Measured on an H200 (docs/gpu.md) with 32,
        64 and 128 threads: this choice is within 15 % of the fastest for ``aba``, ``minv``,
        ``rnea_derivatives`` and ``aba_derivatives`` on the iiwa, HyQ and Atlas at N = 1, 64 and 1024."""
        if self.threads_per_block is not None:
            return self.threads_per_block
        if self.simulate:
            return 8
        return 64 if packed(model).nlinks <= 8 else 128

    def _launch(self, md: _ModelData, kernel: str, B: int, *args) -> None:
        from .kernels import KERNELS
        if self._bound is not None:
            self._bound.launch(md.compiler, kernel, KERNELS[kernel], B, md.block, args,
                               self.rt.xp.cuda.get_current_stream().ptr)
            return
        k = md.compiler.kernel(KERNELS[kernel])
        k[B, md.block](*[self.rt.arg(a) for a in args])

    def _empty(self, shape, dtype=None):
        return self.rt.xp.empty(shape, dtype=dtype or self.dtype)

    def _host_block(self, key: tuple, n: int) -> np.ndarray:
        """A host staging array of n elements (the backend's dtype), allocated once per key."""
        buf = self._staging.get(key)
        if buf is None or buf.size != n:
            buf = self._staging[key] = np.empty(n, dtype=self.dtype)
        return buf

    def _scratch(self, slot: str, shape: tuple, dtype=None):
        """A kernel's device work array, allocated once per (slot, shape, dtype) and reused by every
        later launch (launches on one stream run in order, so reuse is safe; nothing is read before
        the kernel writes it). One set per batch size the caller uses."""
        key = (slot, tuple(shape), np.dtype(dtype or self.dtype).str)
        buf = self._work.get(key)
        if buf is None:
            buf = self._work[key] = self._empty(shape, dtype)
        return buf

    def _run(self, function: str, md: _ModelData, B: int, inputs: list, outputs: list[tuple], launch,
             keep_on_device: bool = False, partition: str = "-", host_s: float = 0.0):
        """Move ``inputs`` ((B, …) host arrays, or device arrays when ``keep_on_device``) to the device
        as one block, allocate ``outputs`` (shapes without the batch axis) as one block, run
        ``launch(ins, outs)``, and bring the outputs back as one block (float64) unless
        ``keep_on_device``. Records :attr:`last_timing`."""
        if self._bound is not None and not keep_on_device:
            return self._run_bound(function, B, inputs, outputs, launch, partition, host_s)
        rt, xp, dt = self.rt, self.rt.xp, self.dtype
        tm = GpuTiming(function, partition, B, host_s=host_s, simulated=self.simulate)
        t0 = time.perf_counter()
        if keep_on_device:
            moved = [not rt.is_device_array(x) for x in inputs]
            ins = [rt.to_device(x) if mv else x for x, mv in zip(inputs, moved)]
            ins = [xp.ascontiguousarray(x, dtype=dt) if x.dtype.kind == "f" else x for x in ins]
            rt.synchronize()
            t2 = time.perf_counter()
            tm.h2d_s = t2 - t0 if any(moved) else 0.0  # inputs already on the device: no transfer
            tm.host_s += t2 - t0 - tm.h2d_s
        else:
            sizes = [x.size for x in inputs]
            # host staging and device input block: allocated once per (function, input sizes)
            block = self._host_block(("in", function, tuple(sizes)), sum(sizes))
            o = 0
            for x, n in zip(inputs, sizes):
                block[o:o + n] = x.reshape(-1)
                o += n
            t1 = time.perf_counter()
            tm.host_s += t1 - t0
            dblock = self._scratch(f"in:{function}:{sizes}", (block.size,))
            rt.copy_to_device(dblock, block)
            rt.synchronize()
            tm.bytes_h2d = block.nbytes
            ins, o = [], 0
            for x, n in zip(inputs, sizes):
                ins.append(dblock[o:o + n].reshape(x.shape))
                o += n
            t2 = time.perf_counter()
            tm.h2d_s = t2 - t1
        osz = [B * int(np.prod(s)) for s in outputs]
        # the device output block persists too, unless the caller keeps the outputs on the device
        oblock = self._empty(sum(osz)) if keep_on_device else self._scratch(f"out:{function}:{osz}", (sum(osz),))
        outs, o = [], 0
        for s, n in zip(outputs, osz):
            outs.append(oblock[o:o + n].reshape((B,) + tuple(s)))
            o += n
        if B > 0:  # an empty batch launches nothing (a grid of 0 blocks is an error)
            launch(ins, outs)
        rt.synchronize()
        t3 = time.perf_counter()
        tm.compute_s = t3 - t2
        if keep_on_device:
            result = outs
        else:
            host = rt.to_host(oblock)
            tm.bytes_d2h = host.nbytes
            t4 = time.perf_counter()
            tm.d2h_s = t4 - t3
            host = host.astype(np.float64, copy=False)
            result, o = [], 0
            for s, n in zip(outputs, osz):
                result.append(host[o:o + n].reshape((B,) + tuple(s)))
                o += n
        tm.total_s = time.perf_counter() - t0 + host_s
        self.last_timing = tm
        return result

    def _plan(self, function: str, B: int, inputs: list, outputs: list[tuple]) -> "_Plan":
        """Pinned host staging, device blocks, their per-array views and four timing events for one
        (function, input shapes, output shapes), allocated on first use and reused by every call."""
        key = (function, tuple(x.shape for x in inputs), B, tuple(tuple(s) for s in outputs))
        plan = self._plans.get(key)
        if plan is None:
            cp = self.rt.xp
            isz = [int(np.prod(x.shape)) for x in inputs]
            osz = [B * int(np.prod(s)) for s in outputs]
            item = self.dtype.itemsize
            pin_in = np.frombuffer(cp.cuda.alloc_pinned_memory(max(sum(isz), 1) * item), self.dtype, max(sum(isz), 1))
            pin_out = np.frombuffer(cp.cuda.alloc_pinned_memory(max(sum(osz), 1) * item), self.dtype,
                                    max(sum(osz), 1))
            din, dout = self._empty(pin_in.size), self._empty(pin_out.size)
            ins, hin, o = [], [], 0
            for x, n in zip(inputs, isz):
                ins.append(din[o:o + n].reshape(x.shape))
                hin.append(pin_in[o:o + n].reshape(x.shape))
                o += n
            outs, o = [], 0
            for s, n in zip(outputs, osz):
                outs.append(dout[o:o + n].reshape((B,) + tuple(s)))
                o += n
            plan = self._plans[key] = _Plan(pin_in, pin_out, din, dout, ins, hin, outs, osz,
                                            [cp.cuda.Event() for _ in range(4)])
        return plan

    def _run_bound(self, function: str, B: int, inputs: list, outputs: list[tuple], launch, partition: str,
                   host_s: float):
        """:meth:`_run` on a GPU with pre-bound launches: inputs packed into pinned staging, one
        asynchronous copy each way on the current stream around the launch, one synchronisation; the
        copy / compute split comes from CUDA events on the stream."""
        cp = self.rt.xp
        t0 = time.perf_counter()
        plan = self._plan(function, B, inputs, outputs)
        for h, x in zip(plan.hin, inputs):
            np.copyto(h, x, casting="unsafe")
        stream = cp.cuda.get_current_stream()
        sp = stream.ptr
        ev = plan.events
        memcpy = cp.cuda.runtime.memcpyAsync
        ev[0].record(stream)
        memcpy(plan.din.data.ptr, plan.pin_in.ctypes.data, plan.pin_in.nbytes, 1, sp)   # 1: host -> device
        ev[1].record(stream)
        if B > 0:  # an empty batch launches nothing (a grid of 0 blocks is an error)
            launch(plan.ins, plan.outs)
        ev[2].record(stream)
        memcpy(plan.pin_out.ctypes.data, plan.dout.data.ptr, plan.pin_out.nbytes, 2, sp)  # 2: device -> host
        ev[3].record(stream)
        ev[3].synchronize()
        host = plan.pin_out.astype(np.float64)  # a copy: the pinned block is reused by the next call
        result, o = [], 0
        for s, n in zip(outputs, plan.osz):
            result.append(host[o:o + n].reshape((B,) + tuple(s)))
            o += n
        t1 = time.perf_counter()
        el = cp.cuda.get_elapsed_time
        h2d, comp, d2h = el(ev[0], ev[1]) * 1e-3, el(ev[1], ev[2]) * 1e-3, el(ev[2], ev[3]) * 1e-3
        total = t1 - t0 + host_s
        self.last_timing = GpuTiming(function, partition, B, h2d_s=h2d, compute_s=comp, d2h_s=d2h,
                                     host_s=max(total - h2d - comp - d2h, 0.0), total_s=total,
                                     bytes_h2d=plan.pin_in.nbytes, bytes_d2h=plan.pin_out.nbytes)
        return result

    def _dummy(self, shape: tuple, keep: bool):
        """A placeholder for an absent optional input: part of the host block, or created on the device."""
        return self.rt.xp.zeros(shape, dtype=self.dtype) if keep else np.zeros(shape)

    def _fext(self, md: _ModelData, fext, keep: bool = False):
        """``(array, flag)``: external forces, or a dummy (1, nbody, 6) array and 0."""
        if fext is None:
            return self._dummy((1, md.pm.nbody, 6), keep), 0
        return fext, 1

    # ------------------------------------------------------------ dynamics (kernels)
    def _rnea(self, model, q, v, a, fext, keep=False):
        md = self._md(model)
        B = q.shape[0]
        fe, has = self._fext(md, fext, keep)
        return self._run("rnea", md, B, [q, v, a, fe], [(md.pm.nv,)], lambda i, o: self._launch(
            md, "k_rnea", B, md.li, md.lf, md.gv, md.bl, md.bf, i[0], i[1], i[2], i[3], has, o[0]), keep)[0]

    def _crba(self, model, q, keep=False):
        md = self._md(model)
        B, nv = q.shape[0], md.pm.nv
        return self._run("crba", md, B, [q], [(nv, nv)], lambda i, o: self._launch(
            md, "k_crba", B, md.li, md.lf, md.levl, md.levs, md.nlev, md.dl, i[0], o[0]), keep)[0]

    def _articulated_ws(self, B: int, L: int):
        return [self._scratch(k, (B, max(L, 1), 6, 6)) for k in ("IA", "U", "UD", "Dinv")]

    def _minv(self, model, q, keep=False):
        md = self._md(model)
        B, nv, L = q.shape[0], md.pm.nv, md.pm.nlinks

        def launch(i, o):
            IA, U, UD, Dinv = self._articulated_ws(B, L)
            F, P = self._scratch("F", (B, L, nv, 6)), self._scratch("P", (B, L, nv, 6))
            self._launch(md, "k_minv", B, md.li, md.lf, md.levl, md.levs, md.nlev, md.dl, i[0], IA, U, UD, Dinv,
                         F, P, o[0])
        return self._run("minv", md, B, [q], [(nv, nv)], launch, keep)[0]

    def _aba(self, model, q, v, tau, fext, keep=False):
        md = self._md(model)
        B, nv, L = q.shape[0], md.pm.nv, md.pm.nlinks
        fe, has = self._fext(md, fext, keep)

        def launch(i, o):
            IA, U, UD, Dinv = self._articulated_ws(B, L)
            self._launch(md, "k_aba", B, md.li, md.lf, md.gv, md.bl, md.bf, md.levl, md.levs, md.nlev, md.dl,
                         i[0], i[1], i[2], i[3], has, IA, U, UD, Dinv, o[0])
        return self._run("aba", md, B, [q, v, tau, fe], [(nv,)], launch, keep)[0]

    def _rnea_derivatives(self, model, q, v, a, fext, keep=False, function="rnea_derivatives", partition="-",
                          host_s=0.0):
        md = self._md(model)
        B, nv = q.shape[0], md.pm.nv
        fe, has = self._fext(md, fext, keep)

        def launch(i, o):
            cols = self._scratch("cols", (B, 8, nv, 6))
            self._launch(md, "k_rnea_derivatives", B, md.li, md.lf, md.gv, md.bl, md.bf, md.levl, md.levs,
                         md.nlev, md.dl,
                         i[0], i[1], i[2], i[3], has, cols, o[0])
        out = self._run(function, md, B, [q, v, a, fe], [(2, nv, nv)], launch, keep, partition, host_s)[0]
        return out[:, 0], out[:, 1]

    def _aba_derivatives(self, model, q, v, tau, fext, minv, keep=False):
        if self.partition == "completely_fused" or keep:
            return self._aba_derivatives_fused_all(model, q, v, tau, fext, minv, keep)
        return self._aba_derivatives_host_side(model, q, v, tau, fext, minv)

    def _aba_derivatives_fused_all(self, model, q, v, tau, fext, minv, keep):
        md = self._md(model)
        B, nv, L = q.shape[0], md.pm.nv, md.pm.nlinks
        fe, has = self._fext(md, fext, keep)
        mi, has_mi = (self._dummy((1, nv, nv), keep), 0) if minv is None else (minv, 1)

        def launch(i, o):
            IA, U, UD, Dinv = self._articulated_ws(B, L)
            F, P = self._scratch("F", (B, L, nv, 6)), self._scratch("P", (B, L, nv, 6))
            cols, dtau = self._scratch("cols", (B, 8, nv, 6)), self._scratch("dtau", (B, 2, nv, nv))
            self._launch(md, "k_aba_derivatives", B, md.li, md.lf, md.gv, md.bl, md.bf, md.levl, md.levs, md.nlev,
                         md.dl,
                         i[0], i[1], i[2], i[3], has, i[4], has_mi, IA, U, UD, Dinv, F, P, cols, dtau, o[0])
        out = self._run("aba_derivatives", md, B, [q, v, tau, fe, mi], [(3, nv, nv)], launch, keep,
                        "completely_fused")[0]
        return out[:, 0], out[:, 1], out[:, 2]

    def _cpu_backend(self):
        """The numba backend of the split / fused partitions' host work (the host side's when it has one)."""
        if self._cpu is None and self.host_backend() is not None:
            self._cpu = self.host_backend()
        if self._cpu is None:
            from ..numba_backend import NumbaBackend
            self._cpu = NumbaBackend()
        return self._cpu

    def _aba_derivatives_host_side(self, model, q, v, tau, fext, minv):
        """split / fused partitions: q̈ and M⁻¹ (and for split the RNEA quantities) on the host."""
        cpu = self._cpu_backend()
        t0 = time.perf_counter()
        qdd = cpu.aba(model, q, v, tau, fext)
        Mi = cpu.minv(model, q) if minv is None else np.ascontiguousarray(minv, dtype=np.float64)
        if self.partition == "fused":
            host_s = time.perf_counter() - t0
            dtq, dtv = self._rnea_derivatives(model, q, v, qdd, fext, function="aba_derivatives",
                                              partition="fused", host_s=host_s)
        else:
            from .host import rnea_quantities
            md = self._md(model)
            B, nv = q.shape[0], md.pm.nv
            w = rnea_quantities(md.pm, q, v, qdd, fext)
            host_s = time.perf_counter() - t0

            def launch(i, o):
                cols = self._scratch("cols", (B, 8, nv, 6))
                self._launch(md, "k_rnea_derivative_columns", B, md.li, md.dl, md.gv, i[0], i[1], i[2], i[3],
                             i[4], i[5],
                             i[6], int(fext is not None), cols, o[0])
            out = self._run("aba_derivatives", md, B, [w["J"], w["ov"], w["oa"], w["oY"], w["oR"], w["op"], w["fl"]],
                            [(2, nv, nv)], launch, False, "split", host_s)[0]
            dtq, dtv = out[:, 0], out[:, 1]
        t1 = time.perf_counter()
        daq = -np.matmul(Mi, dtq)
        dav = -np.matmul(Mi, dtv)
        dt = time.perf_counter() - t1
        self.last_timing.host_s += dt
        self.last_timing.total_s += dt
        return daq, dav, Mi.copy()

    # ------------------------------------------------------------ second order
    def _rnea_second_derivatives(self, model, q, v, a, fext, keep=False):
        md = self._md(model)
        B, nv = q.shape[0], md.pm.nv
        fe, has = self._fext(md, fext, keep)
        from ..kernels.rnea_second_derivatives import NMATS as _NMATS, NVECS as _NVECS

        def launch(i, o):
            mats, vecs = self._scratch("mats", (B, _NMATS, 6, 6)), self._scratch("vecs", (B, _NVECS, 6))
            clink = self._scratch("clink", (B, max(nv, 1)), np.int64)
            self._launch(md, "k_rnea_second_derivatives", B, md.li, md.lf, md.gv, md.bl, md.bf, md.levl, md.levs,
                         md.nlev,
                         md.dl, i[0], i[1], i[2], i[3], has, mats, vecs, clink, o[0])
        out = self._run("rnea_second_derivatives", md, B, [q, v, a, fe], [(4, nv, nv, nv)], launch, keep)[0]
        return out[:, 0], out[:, 1], out[:, 2], out[:, 3]

    def _aba_second_derivatives(self, model, q, v, tau, fext):
        """FDSVA-SO (Singh, Russell & Wensing 2022 eq. 46): kernels for q̈, ∇FD (with M⁻¹) and IDSVA-SO at q̈, all kept on
        the device, then the tensor contraction as batched ``xp`` array code on the device."""
        xp = self.rt.xp
        t0 = time.perf_counter()
        dq, dv, dtau = (self.rt.to_device(np.ascontiguousarray(x, dtype=self.dtype)) for x in (q, v, tau))
        fe = None if fext is None else self.rt.to_device(np.ascontiguousarray(fext, dtype=self.dtype))
        self.rt.synchronize()
        t1 = time.perf_counter()
        qdd = self._aba(model, dq, dv, dtau, fe, keep=True)
        daq, dav, Mi = self._aba_derivatives_fused_all(model, dq, dv, dtau, fe, None, True)
        Tq, Tv, Tqv, dM = self._rnea_second_derivatives(model, dq, dv, qdd, fe, keep=True)
        # dM[b, l, m, j] = ∂M_lm/∂q_j;  G[b, l, j, k] = Σ_m ∂M_lm/∂q_j Y[m, k]
        G = xp.einsum("blmj,bmk->bljk", dM, daq)
        d2q = -xp.einsum("blm,bmjk->bljk", Mi, Tq + G + xp.swapaxes(G, 2, 3))
        d2v = -xp.einsum("blm,bmjk->bljk", Mi, Tv)
        d2qv = -xp.einsum("blm,bmjk->bljk", Mi, Tqv + xp.einsum("blmj,bmk->bljk", dM, dav))
        d2qt = -xp.einsum("blm,bmjk->bljk", Mi, xp.einsum("blmj,bmk->bljk", dM, Mi))
        self.rt.synchronize()
        t2 = time.perf_counter()
        res = [self.rt.to_host(x).astype(np.float64, copy=False) for x in (d2q, d2v, d2qv, d2qt)]
        t3 = time.perf_counter()
        self.last_timing = GpuTiming("aba_second_derivatives", "-", q.shape[0], h2d_s=t1 - t0, compute_s=t2 - t1,
                                     d2h_s=t3 - t2, total_s=t3 - t0, simulated=self.simulate)
        return tuple(res)

    # ------------------------------------------------------------ kinematics (kernels)
    def _placements(self, model, q, flink, ff, nf: int, name: str):
        md = self._md(model)
        B = q.shape[0]
        if nf == 0:
            return np.zeros((B, 0, 3, 3)), np.zeros((B, 0, 3))
        R, p = self._run(name, md, B, [q], [(nf, 3, 3), (nf, 3)], lambda i, o: self._launch(
            md, "k_placements", B, md.li, md.lf, md.levl, md.levs, md.nlev, i[0], flink, ff, o[0], o[1]))
        return R, p

    def _frame(self, model, frame: str):
        md = self._md(model)
        hit = md.frames.get(frame)
        if hit is None:
            flink, ff = frame_arrays(model, md.pm, frame)
            hit = (self.rt.to_device(flink), self.rt.to_device(ff.astype(self.dtype)))
            md.frames[frame] = hit
        return hit

    def _frame_placement(self, model, q, frame):
        flink, ff = self._frame(model, frame)
        R, p = self._placements(model, q, flink, ff, 1, "frame_placement")
        return R[:, 0], p[:, 0]

    def _body_placements(self, model, q):
        md = self._md(model)
        return self._placements(model, q, md.bl, md.bf, md.pm.nbody, "body_placements")

    def _site_placements(self, model, q):
        md = self._md(model)
        return self._placements(model, q, md.site_link, md.site_frames, md.pm.site_link.shape[0], "site_placements")

    def _jacobians(self, model, q, v, frame, reference, with_dJ):
        if reference not in _REFERENCES:
            raise ValueError(f"unknown reference frame '{reference}'; use one of {', '.join(_REFERENCES)}")
        md = self._md(model)
        flink, ff = self._frame(model, frame)
        B, nv, L = q.shape[0], md.pm.nv, md.pm.nlinks
        vv = v if with_dJ else np.zeros((B, nv))

        def launch(i, o):
            Jw, dJw = self._scratch("Jw", (B, nv, 6)), self._scratch("dJw", (B, nv, 6))
            chain = self._scratch("chain", (B, max(L, 1)), np.int64)
            self._launch(md, "k_frame_jacobian", B, md.li, md.lf, md.levl, md.levs, md.nlev, i[0], i[1], flink, ff,
                         _REFERENCES[reference], int(with_dJ), Jw, dJw, chain, o[0], o[1])
        J, dJ = self._run("frame_jacobian", md, B, [q, vv], [(6, nv), (6, nv)], launch)
        return J, dJ

    def _frame_jacobian(self, model, q, frame, reference):
        return self._jacobians(model, q, None, frame, reference, False)[0]

    def _frame_jacobian_time_variation(self, model, q, v, frame, reference):
        return self._jacobians(model, q, v, frame, reference, True)

    def _com(self, model, q, with_J: bool):
        md = self._md(model)
        B, nv, L = q.shape[0], md.pm.nv, md.pm.nlinks

        def launch(i, o):
            mx = self._scratch("mx", (B, max(L, 1), 4))
            self._launch(md, "k_com", B, md.li, md.lf, md.gv, md.levl, md.levs, md.nlev, md.dl, i[0], int(with_J),
                         o[0], o[1], mx)
        com, J = self._run("center_of_mass", md, B, [q], [(3,), (3, nv)], launch)
        return com, J

    # ------------------------------------------------------------ device-resident calls
    _DEVICE_FUNCTIONS = {"rnea": 3, "crba": 1, "minv": 1, "aba": 3, "rnea_derivatives": 3, "aba_derivatives": 3,
                         "rnea_second_derivatives": 3}

    def on_device(self, function: str, model: RobotModel, *arrays, fext=None, minv=None) -> tuple:
        """Run ``function`` on device arrays and return device arrays, with no host round-trip (for a
        GPU-resident solver). ``arrays``: the function's state arguments as (B, nq) / (B, nv) arrays
        already on the device (CuPy arrays; NumPy arrays in the simulator); ``fext`` (B, nbody, 6)
        and ``minv`` (B, nv, nv) likewise. Returns a tuple of (B, …) device arrays in the backend's
        dtype. ``aba_derivatives`` always runs completely fused here (the other partitions need the host)."""
        if function not in self._DEVICE_FUNCTIONS:
            raise ValueError(f"on_device: unknown function '{function}'; use one of "
                             f"{', '.join(self._DEVICE_FUNCTIONS)}")
        if not isinstance(model, RobotModel):
            raise TypeError(f"on_device: expected a RobotModel, got {type(model).__name__}")
        n = self._DEVICE_FUNCTIONS[function]
        if len(arrays) != n:
            raise TypeError(f"on_device('{function}'): expected {n} state arrays, got {len(arrays)}")
        sizes = [model.nq] + [model.nv] * (n - 1)
        B = None
        for k, (x, s) in enumerate(zip(arrays, sizes)):
            if not self.rt.is_device_array(x):
                raise TypeError(f"on_device: argument {k} is a {type(x).__name__}, not a device array; move it with "
                                f"backend.rt.to_device(x) (CuPy: cupy.asarray(x))")
            if x.ndim != 2 or x.shape[1] != s or (B is not None and x.shape[0] != B):
                raise ValueError(f"on_device('{function}'): argument {k} must be (B, {s}) with one B for all, "
                                 f"got {tuple(x.shape)}")
            B = x.shape[0]
        for k, x in (("fext", fext), ("minv", minv)):
            if x is not None and not self.rt.is_device_array(x):
                raise TypeError(f"on_device: {k} is a {type(x).__name__}, not a device array")
        kw = dict(keep=True)
        if function in ("rnea", "aba", "rnea_derivatives", "rnea_second_derivatives"):
            res = getattr(self, "_" + function)(model, *arrays, fext, **kw)
        elif function == "aba_derivatives":
            res = self._aba_derivatives_fused_all(model, *arrays, fext, minv, True)
        else:
            res = getattr(self, "_" + function)(model, *arrays, **kw)
        return tuple(res) if isinstance(res, (tuple, list)) else (res,)

    def warmup(self, model: RobotModel, progress=None) -> None:
        """Compile (GPU: JIT to PTX, seconds per kernel) every kernel for ``model`` by running each on
        one state. progress: optional ``progress(label, done, total)``."""
        q = model.neutral()[None]
        z = np.zeros((1, model.nv))
        steps = [("rnea", lambda: self._rnea(model, q, z, z, None)), ("crba", lambda: self._crba(model, q)),
                 ("minv", lambda: self._minv(model, q)), ("aba", lambda: self._aba(model, q, z, z, None)),
                 ("rnea_derivatives", lambda: self._rnea_derivatives(model, q, z, z, None)),
                 ("aba_derivatives", lambda: self._aba_derivatives(model, q, z, z, None, None))]
        for k, (label, run) in enumerate(steps):
            if progress is not None:
                progress(label, k, len(steps))
            run()
