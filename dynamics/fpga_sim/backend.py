"""``FpgaSimBackend``: the dynamics backend that computes with the accelerator's arithmetic and
reports the time the accelerator would take.

Emulated (fixed point, :mod:`.datapath`): the Dadu-RBD function set of Yang, Chen & Han 2023 Table I —
``rnea`` (ID), ``crba`` (M), ``minv`` (M⁻¹), ``aba`` (FD = M⁻¹(τ - c), no ABA instance, Yang, Chen & Han 2023
eq. 2), ``rnea_derivatives`` (ΔID), ``aba_derivatives`` (ΔFD; with ``minv=`` given ΔiFD, the
completely fused kernel of Plancher et al. 2021 Algorithm 3). ``bias_forces``, ``gravity_torques`` and
``forward_dynamics`` are built by the base class from these kernels.

Not emulated (the accelerators do not compute them): kinematics (placements, Jacobians, centre of
mass) run on the host in float64 and leave ``last_timing`` unchanged; second-order derivatives are
refused (``supports()`` is False) with a pointer to the numpy backend.

The host side (``host=``, :mod:`dynamics.accelerator_host`): with ``"numba"`` (the default where
numba is installed) the solvers run their compiled rollouts, cost kernels and Riccati pass on the
numba backend's float64 dynamics and kinematics, and only the calls the solver makes to this backend
(the derivatives) are emulated and charged the accelerator's time; with ``"python"`` the host side
is the numpy reference and the solvers' Python loops.

After every emulated call ``last_timing`` holds the simulated accelerator time (from the
:class:`~dynamics.fpga_sim.timing.AcceleratorDesign`), the measured host time spent emulating, and
the overflow/saturation counts; ``last_error_bound`` the rigorous absolute error bound of each
output (same shapes as the flat-batch results, reshape to the result's shape).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..accelerator_host import CompiledHost, resolve_host
from ..backend import Backend
from ..model import RobotModel
from ..numpy_backend import kinematics as _kin
from . import datapath as dp
from .fixed_point import FxContext, OverflowCounter, QFormat
from .timing import ROBOMORPHIC_CLOCK_HZ, AcceleratorDesign, IOLink

_KERNEL_FUNCTION = {"_rnea": "ID", "_crba": "M", "_minv": "Minv", "_aba": "FD", "_rnea_derivatives": "dID",
                    "_aba_derivatives": "dFD"}


def _host_kinematics(name: str):
    """A kinematics method of the backend that is not on the accelerator: the host's float64
    kernel (the numba backend's, or the numpy reference ``dynamics.numpy_backend.kinematics.<name>``
    with ``host="python"``), no accelerator time, no error bound."""

    def method(self, model, *args):
        self._delegated()
        cpu = self.host_backend()
        if cpu is not None:
            return getattr(cpu, "_" + name)(model, *args)
        return getattr(_kin, name)(model, *args)

    method.__name__ = method.__qualname__ = "_" + name
    method.__doc__ = "Not on the accelerator: the host's float64 kernel."
    return method


@dataclass(frozen=True)
class LastTiming:
    """Timing of the last emulated call. ``*_s`` in seconds; everything but ``host_wall_s`` is
    simulated from the accelerator model (``simulated=True``); ``host_wall_s`` is measured."""

    function: str                  # Table I name: ID, FD, M, Minv, dID, dFD, dIFD
    knots: int                     # states in the call (flat batch size)
    cycles: int                    # accelerator compute cycles for all knots
    compute_s: float               # simulated compute time
    io_s: float                    # simulated transfer time (in + out, before overlap)
    end_to_end_s: float            # simulated I/O + compute, overlapped as the design allows
    throughput_knots_per_s: float  # knots / end_to_end_s
    host_wall_s: float             # measured wall time this host spent emulating
    clock_hz: float
    mode: str                      # "latency" or "pipelined"
    overflow_counts: dict = field(default_factory=dict)
    overflow_total: int = 0
    error_bound_rtol: float = 0.0  # max over outputs of bound / max(1, max|result|)
    simulated: bool = True


class FpgaSimBackend(CompiledHost, Backend):
    """Fixed-point accelerator emulation with a cycle-level timing model.

    design: an :class:`AcceleratorDesign` for one model (calls with another model are refused), or
        None to generate one per model from ``forward_pes``, ``backward_pes``, ``block_size``
        (None: the fastest design, one PE per schedule node), ``clock_hz``, ``base``, ``mode``, ``io``.
    fmt: fixed-point format, ``"Q16.16"`` (Plancher et al. 2021) or a :class:`QFormat`; rounding, overflow:
        override the format's modes (``"truncate"``/``"nearest"``/``"nearest_even"``/
        ``"toward_zero"``; ``"saturate"``/``"wrap"``).
    on_overflow: ``"count"`` (saturate and count, reported in ``last_timing``) or ``"raise"``
        (:class:`~dynamics.fpga_sim.fixed_point.FixedPointOverflowError` at the first event).
    emulate: ``"all"`` (every Table I function on the accelerator) or ``"gradients"`` (only ΔID,
        ΔFD, ΔiFD; ID, FD, M, M⁻¹ and the contact / impulse solves run on the host in float64 and
        leave ``last_timing`` unchanged —
        Plancher et al. 2021's partition, where the CPU rolls out the dynamics and the FPGA computes gradients).
    host: where the host side runs, ``"numba"`` (default where numba is installed: compiled solver
        loops on the numba backend's dynamics, the host's share of ``emulate="gradients"`` on the
        numba backend) or ``"python"`` (the numpy reference and the solvers' Python loops); see the
        module docstring.

    ``rtol``: the tolerance promised against the numpy reference, ``|x - ref| <= rtol ·
    max(1, max|ref|)``. It is derived from the format, never tuned: before any call it is one
    rounding unit of the format (``2^-n`` truncating, ``2^-(n+1)`` rounding to nearest: the error of
    a value that only crosses the host conversion); after each emulated call it is the normalised
    rigorous bound of that call, obtained by running error analysis from the same rounding unit
    (docs/fpga_sim.md, "Error bound"). Class default: Q16.16 truncating, ``2^-16``.
    """

    name = "fpga-sim"
    simulated_time = True
    rtol: float = 2.0 ** -16

    def __init__(self, design: AcceleratorDesign | None = None, fmt: "str | QFormat" = "Q16.16",
                 rounding: str | None = None, overflow: str | None = None, on_overflow: str = "count",
                 forward_pes: int | None = None, backward_pes: int | None = None, block_size: int | None = None,
                 clock_hz: float = ROBOMORPHIC_CLOCK_HZ, base: str = "link", mode: str = "latency",
                 io: IOLink | None = None, overlap_io: bool = True, emulate: str = "all", host: str | None = None):
        self.host = resolve_host(host, "fpga-sim")
        if design is not None and not isinstance(design, AcceleratorDesign):
            raise TypeError(f"FpgaSimBackend: design must be an AcceleratorDesign, got {type(design).__name__}")
        self.fmt = QFormat.parse(fmt, rounding=rounding, overflow=overflow)
        if on_overflow not in ("count", "raise"):
            raise ValueError(f"FpgaSimBackend: on_overflow must be 'count' or 'raise', got '{on_overflow}'")
        self.on_overflow = on_overflow
        if emulate not in ("all", "gradients"):
            raise ValueError(f"FpgaSimBackend: emulate must be 'all' or 'gradients', got '{emulate}'")
        self.emulate = emulate
        self.design = design
        self._design_kw = dict(forward_pes=forward_pes, backward_pes=backward_pes, block_size=block_size,
                               clock_hz=clock_hz, base=base, mode=mode, io=io, overlap_io=overlap_io)
        self._designs: dict[int, tuple[RobotModel, AcceleratorDesign]] = {}
        self.rtol = self.fmt.rounding_unit
        self.last_timing: LastTiming | None = None
        self.simulated_s_total = 0.0         # running totals over the emulated calls (Backend.simulated_time)
        self.emulation_wall_s_total = 0.0
        self.last_error_bound = None
        self.last_overflow: dict = {}

    def __repr__(self) -> str:
        return (f"FpgaSimBackend(fmt='{self.fmt.name}', rounding='{self.fmt.rounding}', "
                f"on_overflow='{self.on_overflow}', emulate='{self.emulate}', host='{self.host}')")

    # ------------------------------------------------------------------ designs
    def design_for(self, model: RobotModel) -> AcceleratorDesign:
        """The accelerator that times calls on ``model``."""
        if self.design is not None:
            if self.design.model is not model and self.design.model.name != model.name:
                raise ValueError(f"fpga-sim: this backend's design was generated for '{self.design.model.name}' "
                                 f"but was called with model '{model.name}'; build the backend without design= "
                                 f"(one design per model is generated) or pass a design for '{model.name}'")
            return self.design
        hit = self._designs.get(id(model))
        if hit is None or hit[0] is not model:
            hit = (model, AcceleratorDesign(model, **self._design_kw))
            self._designs[id(model)] = hit
        return hit[1]

    # ------------------------------------------------------------------ emulation driver
    def _run(self, kernel: str, model: RobotModel, knots: int, compute, function: str | None = None):
        ctx = FxContext(self.fmt, OverflowCounter(self.on_overflow), where=f"{function or _KERNEL_FUNCTION[kernel]}"
                                                                          f" on {model.name}")
        design = self.design_for(model)
        t0 = time.perf_counter()
        with np.errstate(over="ignore", invalid="ignore"):
            outs = compute(ctx)
        single = not isinstance(outs, tuple)
        outs = (outs,) if single else outs
        values = tuple(o.to_float() for o in outs)
        bounds = tuple(np.array(o.e, dtype=float) for o in outs)
        norm = 0.0
        for v, e in zip(values, bounds):
            if e.size:
                emax = float(np.max(e)) if not np.any(np.isnan(e)) else float("inf")
                norm = max(norm, emax / max(1.0, float(np.max(np.abs(v)))))
        fn = function or _KERNEL_FUNCTION[kernel]
        kt = design.time(fn, knots)
        counts = dict(ctx.counter.counts)
        self.last_overflow = counts
        # the host's time emulating: the datapath, converting the results back and bounding them
        wall = time.perf_counter() - t0
        self.last_timing = LastTiming(fn, knots, kt.cycles, kt.compute_s, kt.io_s, kt.end_to_end_s,
                                      kt.throughput_knots_per_s, wall, design.clock_hz, design.mode, counts,
                                      int(sum(counts.values())), norm)
        self.simulated_s_total += kt.end_to_end_s
        self.emulation_wall_s_total += wall
        self.last_error_bound = bounds[0] if single else bounds
        self.rtol = max(self.fmt.rounding_unit, norm)
        return values[0] if single else values

    # ------------------------------------------------------------------ emulated kernels
    def _rnea(self, model, q, v, a, fext):
        """ID (Table I): fixed-point RNEA, (B, nv)."""
        if self.emulate != "all":
            return self._host("rnea", model, q, v, a, fext)
        return self._run("_rnea", model, q.shape[0], lambda ctx: dp.inverse_dynamics(model, q, v, a, fext, ctx))

    def _crba(self, model, q):
        """M (Table I): fixed-point composite-inertia mass matrix, (B, nv, nv)."""
        if self.emulate != "all":
            return self._host("crba", model, q)
        return self._run("_crba", model, q.shape[0], lambda ctx: dp.mass_matrix(model, q, ctx))

    def _minv(self, model, q):
        """M⁻¹ (Table I): MMinvGen with the float reciprocal of Dadu-RBD §IV-B2, (B, nv, nv)."""
        if self.emulate != "all":
            return self._host("minv", model, q)
        return self._run("_minv", model, q.shape[0], lambda ctx: dp.mass_matrix_inverse(model, q, ctx))

    def _aba(self, model, q, v, tau, fext):
        """FD (Table I) as Dadu-RBD computes it, ``M⁻¹ (τ - c)`` (no ABA), (B, nv)."""
        if self.emulate != "all":
            return self._host("aba", model, q, v, tau, fext)
        return self._run("_aba", model, q.shape[0],
                         lambda ctx: dp.forward_dynamics(model, q, v, tau, fext, ctx)[0])

    def _rnea_derivatives(self, model, q, v, a, fext):
        """ΔID (Table I): ``(∂τ/∂q, ∂τ/∂q̇)``, (B, nv, nv) each (Plancher et al. 2021 Algorithms 1-2/5)."""
        return self._run("_rnea_derivatives", model, q.shape[0],
                         lambda ctx: dp.id_derivatives(model, q, v, a, fext, ctx))

    def _aba_derivatives(self, model, q, v, tau, fext, minv):
        """ΔFD, or ΔiFD when ``minv`` is given (Plancher et al. 2021 Algorithm 3, completely fused):
        ``(∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ)``, (B, nv, nv) each. With ``emulate="gradients"`` the host
        supplies M⁻¹ (float64) and the accelerator runs ΔiFD, Plancher et al. 2021's partition."""
        out = self._aba_derivatives_with_acceleration(model, q, v, tau, fext, minv)[1:]
        self.last_error_bound = self.last_error_bound[1:]
        return out

    def _aba_derivatives_with_acceleration(self, model, q, v, tau, fext, minv):
        """``(q̈, ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ)`` from one accelerator call (q̈ from its FD stage, or the
        host's float64 q̈ for ΔiFD)."""
        if minv is None and self.emulate != "all":
            cpu = self.host_backend()
            if cpu is not None:
                minv = cpu._minv(model, q)
            else:
                from ..numpy_backend.minv import minv as host_minv
                minv = host_minv(model, q)
        return self._run("_aba_derivatives", model, q.shape[0],
                         lambda ctx: dp.fd_derivatives(model, q, v, tau, fext, ctx, minv=minv,
                                                       return_acceleration=True),
                         function="dFD" if minv is None else "dIFD")

    def forward_dynamics(self, model, q, v, tau, fext=None, method: str = "aba"):
        """FD. ``method="aba"`` and ``"minv"`` are the same accelerator computation here: Dadu-RBD
        has no ABA instance and computes ``M⁻¹ (τ - c)`` (Yang, Chen & Han 2023 eq. 2); other methods (the
        parallel-in-depth ones) run on the base class from the emulated kernels."""
        if method in ("aba", "minv"):
            return self.aba(model, q, v, tau, fext)
        return super().forward_dynamics(model, q, v, tau, fext, method=method)

    # ------------------------------------------------------------------ contact values
    def contact_dynamics(self, model, q, v, tau, contacts):
        """``(a, λ)``: with ``emulate="all"`` the shared contact code on the emulated M⁻¹ and ID (the
        host solves the contact Schur complement); with ``emulate="gradients"`` a value, not a
        gradient, so the host computes all of it (the numba backend's fused kernel with
        ``host="numba"``), no accelerator time."""
        cpu = self.host_backend()
        if self.emulate != "all" and cpu is not None:
            self._delegated()
            return cpu.contact_dynamics(model, q, v, tau, contacts)
        return super().contact_dynamics(model, q, v, tau, contacts)

    def impulse_dynamics(self, model, q, v_minus, contacts, restitution: float = 0.0):
        """``(v⁺, impulse)``: as :meth:`contact_dynamics`, on the host with ``emulate="gradients"``."""
        cpu = self.host_backend()
        if self.emulate != "all" and cpu is not None:
            self._delegated()
            return cpu.impulse_dynamics(model, q, v_minus, contacts, restitution)
        return super().impulse_dynamics(model, q, v_minus, contacts, restitution)

    # ------------------------------------------------------------------ delegated (float64 host)
    def _host(self, kernel: str, model, *args):
        """Run ``kernel`` (a public Backend function: rnea, crba, minv, aba) on the host in float64
        (the numba backend, or the numpy reference with ``host="python"``), no accelerator time."""
        self._delegated()
        cpu = self.host_backend()
        if cpu is None:
            from ..numpy_backend import NumpyBackend
            cpu = NumpyBackend()
        return getattr(cpu, kernel)(model, *args)

    def _delegated(self) -> None:
        self.last_error_bound = None     # a float64 result: no fixed-point bound applies

    _frame_placement = _host_kinematics("frame_placement")
    _body_placements = _host_kinematics("body_placements")
    _site_placements = _host_kinematics("site_placements")
    _frame_jacobian = _host_kinematics("frame_jacobian")
    _frame_jacobian_time_variation = _host_kinematics("frame_jacobian_time_variation")
    _center_of_mass = _host_kinematics("center_of_mass")
    _com_jacobian = _host_kinematics("com_jacobian")
