"""Cycle-level timing model of a dynamics-gradient accelerator, parameterised by the robot's tree.

Latency mode (Robomorphic / RoboShape, Plancher et al. 2021 §IV-C and Yang, Chen & Han 2023 ref. [52]): one knot at a time,
``forward_pes`` gradient PEs in the forward unit, ``backward_pes`` in the backward unit (which also
runs the blocked M⁻¹ multiply) and a ``block_size`` for that multiply. One knot of the completely
fused ∇FD (Plancher et al. 2021 Algorithm 3, Dadu-RBD's ΔiFD) takes

    latency = 3 · forward_steps + backward_steps + 2 · matmul_steps   cycles,

forward/backward steps being the lengths of the list schedules of :mod:`.schedule` (a forward step
is three cycles: Algorithm 5 lines 2, 3 and 4 are dependent stages; a backward step is one), and
``matmul_steps`` the steps of one blocked ``M⁻¹ · ∂c/∂u`` (two matrices: ∂/∂q and ∂/∂q̇). This
reproduces RoboShape's iiwa table exactly (829 cycles at 1/1/1, 34 cycles = 0.61 µs at 55.6 MHz at
7/7/7) and its HyQ table.

Throughput mode (Dadu-RBD Round-Trip Pipeline, Yang, Chen & Han 2023 §IV-A): one forward and one backward
submodule per link, connected by FIFOs; a submodule processes its link's RNEA step and the
derivative columns alive at that link (deeper links carry more columns, §IV-A4) on
``forward_pes``/``backward_pes`` lanes. The initiation interval II is the slowest stage and N knots
take ``latency + (N - 1) · II`` cycles.

I/O (Plancher et al. 2021 §IV-C): 32-bit words per knot in and out, padded to the bus width, over PCIe of a
given generation and lane count; end-to-end time = I/O + compute, overlapped when ``overlap_io``.

Floating base (neither paper builds one): ``base="link"`` schedules the free joint as one link
with 6 derivative columns (as the datapath computes it, S = I₆), ``"six"`` as a chain of six 1-DoF
links (GRiD's code; ball joints likewise become three), ``"fixed"`` drops the base and schedules
the limbs as fixed-base chains, as the published HyQ design (12 leg joints).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from ..joints import JointType
from ..model import RobotModel
from .schedule import (ScheduleTree, backward_tasks, check_schedule, forward_tasks, list_schedule, matmul_steps,
                       matvec_steps)

#: Plancher et al. 2021 §IV-C: the FPGA design was synthesised at 55.6 MHz.
ROBOMORPHIC_CLOCK_HZ = 55.6e6
#: Yang, Chen & Han 2023 §VI: Dadu-RBD runs at 125 MHz on the same FPGA.
DADU_CLOCK_HZ = 125e6
#: DSP slices per PE of RoboShape's iiwa build (forward 2848 / 7 PEs, backward 2612 / 7 PEs); used
#: only as a relative resource proxy (a PE handles both the ∂/∂q and ∂/∂q̇ datapaths).
DSP_PER_FORWARD_PE = 2848 / 7
DSP_PER_BACKWARD_PE = 2612 / 7
BASE_MODES = ("link", "six", "fixed")
FUNCTIONS = ("ID", "FD", "M", "Minv", "dID", "dFD", "dIFD")

# PCIe payload bandwidth per lane [bytes/s]: line rate x encoding efficiency / 8
_PCIE_LANE_BYTES = {1: 2.5e9 * 8 / 10 / 8, 2: 5e9 * 8 / 10 / 8, 3: 8e9 * 128 / 130 / 8, 4: 16e9 * 128 / 130 / 8,
                    5: 32e9 * 128 / 130 / 8, 6: 64e9 * 242 / 256 / 8}


@dataclass(frozen=True)
class IOLink:
    """Host link: PCIe ``gen`` x ``lanes``, transfers padded to ``bus_bits``, plus a fixed
    ``latency_s`` per batch (doorbell/DMA set-up). Plancher et al. 2021's board ran Connectal over PCIe Gen1."""

    gen: int = 1
    lanes: int = 8
    bus_bits: int = 512
    latency_s: float = 1e-6
    word_bits: int = 32

    def __post_init__(self) -> None:
        if self.gen not in _PCIE_LANE_BYTES:
            raise ValueError(f"IOLink: PCIe generation must be one of {sorted(_PCIE_LANE_BYTES)}, got {self.gen}")
        if self.lanes not in (1, 2, 4, 8, 16):
            raise ValueError(f"IOLink: lanes must be 1, 2, 4, 8 or 16, got {self.lanes}")
        if self.bus_bits % 32 or self.bus_bits <= 0:
            raise ValueError(f"IOLink: bus_bits must be a positive multiple of 32, got {self.bus_bits}")

    @property
    def bytes_per_s(self) -> float:
        return _PCIE_LANE_BYTES[self.gen] * self.lanes

    def padded_bytes(self, words: int) -> int:
        """Bytes of ``words`` 32-bit words padded to the bus width."""
        bus = self.bus_bits // 8
        return -(-words * (self.word_bits // 8) // bus) * bus

    def seconds(self, words: int) -> float:
        return self.padded_bytes(words) / self.bytes_per_s


@dataclass(frozen=True)
class DesignPoint:
    """One point of the design space (cycles per knot of ΔiFD in latency mode)."""
    forward_pes: int
    backward_pes: int
    block_size: int
    latency_cycles: int
    latency_s: float
    dsp_proxy: float
    pareto: bool


@dataclass(frozen=True)
class KnotTime:
    """Simulated time of N knots of one function (all times in seconds)."""
    function: str
    knots: int
    mode: str
    cycles: int              # compute cycles for all N knots
    compute_s: float
    io_s: float              # total transfer time in + out (not counting overlap)
    end_to_end_s: float
    throughput_knots_per_s: float
    words_in_per_knot: int
    words_out_per_knot: int


def schedule_tree(model: RobotModel, base: str = "link") -> ScheduleTree:
    """The tree the accelerator is generated for (module docstring, ``base``)."""
    if base not in BASE_MODES:
        raise ValueError(f"unknown base mode '{base}'; use one of {', '.join(BASE_MODES)}")
    parent, ncols, names = [], [], []
    node_of_link: dict[int, int] = {}
    for i in range(model.nlinks):
        lam = int(model.link_parent[i])
        p = node_of_link.get(lam, -1) if lam >= 0 else -1
        t = int(model.link_type[i])
        nd = int(model.link_nv[i])
        nm = model.joint_names[i] or f"link{i}"
        if t == JointType.FREE and base == "fixed":
            node_of_link[i] = -1
            continue
        if nd > 1 and base == "six":
            for k in range(nd):
                parent.append(p)
                ncols.append(1)
                names.append(f"{nm}[{k}]")
                p = len(parent) - 1
            node_of_link[i] = p
            continue
        parent.append(p)
        ncols.append(nd)
        names.append(nm)
        node_of_link[i] = len(parent) - 1
    return ScheduleTree(tuple(parent), tuple(ncols), tuple(names))


class AcceleratorDesign:
    """A generated accelerator for ``model`` (see module docstring).

    forward_pes, backward_pes, block_size: resources (None: one per schedule node / per column, the
    fastest design). clock_hz: default 55.6 MHz (Plancher et al. 2021). base: floating-base treatment.
    mode: ``"latency"`` (one knot at a time) or ``"pipelined"`` (Dadu-RBD RTP). io: the host link.
    overlap_io: stream I/O under compute (Plancher et al. 2021's FPGA pipelines I/O with computation).
    reciprocal_cycles: latency of one fixed->float->reciprocal->fixed in M⁻¹ (an assumption of this
    model; the papers give none).
    """

    def __init__(self, model: RobotModel, forward_pes: int | None = None, backward_pes: int | None = None,
                 block_size: int | None = None, clock_hz: float = ROBOMORPHIC_CLOCK_HZ, base: str = "link",
                 mode: str = "latency", io: IOLink | None = None, overlap_io: bool = True,
                 reciprocal_cycles: int = 8):
        if not isinstance(model, RobotModel):
            raise TypeError(f"AcceleratorDesign: model must be a RobotModel (dynamics.load_model), got "
                            f"{type(model).__name__}")
        self.model = model
        self.base = base
        self.tree = schedule_tree(model, base)
        n, nc = self.tree.n, self.tree.ncolumns
        self.forward_pes = n if forward_pes is None else int(forward_pes)
        self.backward_pes = n if backward_pes is None else int(backward_pes)
        self.block_size = nc if block_size is None else int(block_size)
        for label, val, hi in (("forward_pes", self.forward_pes, None), ("backward_pes", self.backward_pes, None),
                               ("block_size", self.block_size, nc)):
            if val < 1 or (hi is not None and val > hi):
                raise ValueError(f"AcceleratorDesign: {label} must be in 1..{hi or 'inf'}, got {val}")
        if not (clock_hz > 0 and math.isfinite(clock_hz)):
            raise ValueError(f"AcceleratorDesign: clock_hz must be a positive frequency [Hz], got {clock_hz}")
        if mode not in ("latency", "pipelined"):
            raise ValueError(f"AcceleratorDesign: mode must be 'latency' or 'pipelined', got '{mode}'")
        self.clock_hz = float(clock_hz)
        self.mode = mode
        self.io = io or IOLink()
        self.overlap_io = bool(overlap_io)
        self.reciprocal_cycles = int(reciprocal_cycles)

    def __repr__(self) -> str:
        return (f"AcceleratorDesign({self.model.name}, forward_pes={self.forward_pes}, backward_pes="
                f"{self.backward_pes}, block_size={self.block_size}, clock_hz={self.clock_hz:g}, base='{self.base}', "
                f"mode='{self.mode}')")

    def replace(self, **kw) -> "AcceleratorDesign":
        args = dict(forward_pes=self.forward_pes, backward_pes=self.backward_pes, block_size=self.block_size,
                    clock_hz=self.clock_hz, base=self.base, mode=self.mode, io=self.io, overlap_io=self.overlap_io,
                    reciprocal_cycles=self.reciprocal_cycles)
        args.update(kw)
        model = args.pop("model", self.model)
        return AcceleratorDesign(model, **args)

    # ------------------------------------------------------------------ schedules (cached per tree)
    @cached_property
    def _forward_graph(self):
        return forward_tasks(self.tree)

    @cached_property
    def _backward_graph(self):
        return backward_tasks(self.tree)

    def forward_schedule(self, pes: int | None = None):
        return list_schedule(self._forward_graph, self.forward_pes if pes is None else pes)

    def backward_schedule(self, pes: int | None = None):
        return list_schedule(self._backward_graph, self.backward_pes if pes is None else pes)

    @cached_property
    def forward_steps(self) -> int:
        return self.forward_schedule().length

    @cached_property
    def backward_steps(self) -> int:
        return self.backward_schedule().length

    @cached_property
    def matmul_steps(self) -> int:
        return matmul_steps(self.tree, self.block_size, self.backward_pes)

    def schedule_violations(self) -> list[str]:
        """Dependencies violated by the forward and backward schedules (empty: none)."""
        return check_schedule(self.forward_schedule()) + check_schedule(self.backward_schedule())

    # ------------------------------------------------------------------ latency mode
    @property
    def latency_cycles(self) -> int:
        """Cycles of one knot of ΔiFD (completely fused ∇FD): 3·fwd + bwd + 2·matmul."""
        return 3 * self.forward_steps + self.backward_steps + 2 * self.matmul_steps

    @property
    def latency_s(self) -> float:
        return self.latency_cycles / self.clock_hz

    def function_cycles(self, function: str) -> int:
        """Latency-mode cycles of one knot of a Table I function. ΔiFD and ΔID use the published
        schedule model; the others are this model's extension from the same units: ID = RNEA on the
        ID unit (3 cycles per forward node, 1 per backward node and leaf seed); M = backward sweep;
        M⁻¹ = backward sweep + a reciprocal per node on the deepest path + forward sweep; FD = ID +
        M⁻¹ + one blocked matrix-vector product (Dadu-RBD eq. 2); ΔFD = FD + ΔiFD (Fig. 14f)."""
        t = self.tree
        n, leaves = t.n, len(t.leaves())
        depth = max(t.depth(i) for i in range(n))
        ID = 3 * n + n + leaves
        minv = (n + leaves) + depth * self.reciprocal_cycles + 3 * n
        mv = matvec_steps(t, self.block_size, self.backward_pes)
        table = {"dIFD": self.latency_cycles, "dID": 3 * self.forward_steps + self.backward_steps, "ID": ID,
                 "M": n + leaves, "Minv": minv, "FD": ID + minv + mv}
        table["dFD"] = table["FD"] + table["dIFD"]
        if function not in table:
            raise ValueError(f"unknown function '{function}'; use one of {', '.join(FUNCTIONS)}")
        return int(table[function])

    # ------------------------------------------------------------------ pipelined mode (Dadu-RBD RTP)
    @cached_property
    def _stage_columns(self) -> tuple[list[int], list[int]]:
        t = self.tree
        fwd = [t.ncols[i] + sum(t.ncols[a] for a in t.ancestors(i)) for i in range(t.n)]
        desc = [0] * t.n
        for i in range(t.n - 1, -1, -1):
            if t.parent[i] >= 0:
                desc[t.parent[i]] += desc[i] + t.ncols[i]
        bwd = [fwd[i] + desc[i] for i in range(t.n)]
        return fwd, bwd

    def pipeline_stages(self) -> dict[str, int]:
        """Cycles of every pipeline stage: ``Rf``/``Df`` (forward RNEA / derivative submodule of a
        link: 3 cycles per step, ⌈columns/forward_pes⌉ steps), ``Rb``/``Db`` (backward: 1 cycle per
        step, ⌈columns/backward_pes⌉ steps) and the M⁻¹ multiply (2 matrices)."""
        fwd, bwd = self._stage_columns
        out = {}
        for i, nm in enumerate(self.tree.names or range(self.tree.n)):
            out[f"Rf[{nm}]"] = 3
            out[f"Df[{nm}]"] = 3 * -(-fwd[i] // self.forward_pes)
            out[f"Rb[{nm}]"] = 1
            out[f"Db[{nm}]"] = -(-bwd[i] // self.backward_pes)
        out["matmul"] = 2 * self.matmul_steps
        return out

    @property
    def initiation_interval(self) -> int:
        """Cycles between knots entering the Round-Trip Pipeline (slowest stage)."""
        return max(self.pipeline_stages().values())

    @property
    def pipeline_latency_cycles(self) -> int:
        """Cycles for one knot through the pipeline: derivative stages along the deepest root-to-leaf
        path, forward and back, then the multiply."""
        fwd, bwd = self._stage_columns
        t = self.tree
        best = 0
        for leaf in t.leaves():
            path = [leaf] + t.ancestors(leaf)
            c = sum(3 * -(-fwd[i] // self.forward_pes) + -(-bwd[i] // self.backward_pes) for i in path)
            best = max(best, c)
        return best + 2 * self.matmul_steps

    # ------------------------------------------------------------------ I/O and N knots
    def words_per_knot(self, function: str) -> tuple[int, int]:
        """32-bit words in and out per knot: joint inputs (sin q, cos q per hinge; displacement per
        slide; R, p per ball/free joint), q̇ and q̈/τ per dof, M⁻¹ for ΔiFD; outputs as Table I."""
        m = self.model
        joint = 0
        for t in m.link_type:
            joint += {JointType.HINGE: 2, JointType.SLIDE: 1}.get(int(t), 12)
        nv = m.nv
        ins = {"ID": joint + 2 * nv, "FD": joint + 2 * nv, "M": joint, "Minv": joint, "dID": joint + 2 * nv,
               "dFD": joint + 2 * nv, "dIFD": joint + 2 * nv + nv * nv}
        outs = {"ID": nv, "FD": nv, "M": nv * nv, "Minv": nv * nv, "dID": 2 * nv * nv, "dFD": 3 * nv * nv,
                "dIFD": 2 * nv * nv}
        if function not in ins:
            raise ValueError(f"unknown function '{function}'; use one of {', '.join(FUNCTIONS)}")
        return ins[function], outs[function]

    def compute_cycles(self, function: str, knots: int) -> int:
        """Cycles to compute ``knots`` knots: ``N · latency`` (latency mode: one knot at a time, as
        Plancher et al. 2021's FPGA) or ``latency + (N - 1) · II`` (pipelined)."""
        if knots < 0:
            raise ValueError(f"knots must be >= 0, got {knots}")
        if knots == 0:
            return 0
        if self.mode == "latency":
            return knots * self.function_cycles(function)
        lat = self.function_cycles(function) - self.latency_cycles + self.pipeline_latency_cycles \
            if function in ("dIFD", "dFD") else self.function_cycles(function)
        return lat + (knots - 1) * self.initiation_interval

    def time(self, function: str = "dIFD", knots: int = 1) -> KnotTime:
        """Simulated time of ``knots`` knots of ``function`` including I/O."""
        cyc = self.compute_cycles(function, knots)
        comp = cyc / self.clock_hz
        win, wout = self.words_per_knot(function)
        t_in, t_out = self.io.seconds(win), self.io.seconds(wout)
        io_total = knots * (t_in + t_out)
        if knots == 0:
            e2e = 0.0
        elif self.overlap_io:   # full-duplex link streaming under compute
            e2e = self.io.latency_s + t_in + max(comp, (knots - 1) * max(t_in, t_out)) + t_out
        else:
            e2e = self.io.latency_s + io_total + comp
        return KnotTime(function, knots, self.mode, cyc, comp, io_total, e2e,
                        knots / e2e if e2e > 0 else float("inf"), win, wout)

    # ------------------------------------------------------------------ design space
    def dsp_proxy(self) -> float:
        return _dsp(self.forward_pes, self.backward_pes, self.block_size)

    def design_space(self, max_pes: int | None = None) -> list[DesignPoint]:
        """Every ``(forward_pes, backward_pes, block_size)`` with 1 <= PEs <= ``max_pes`` (default:
        number of schedule nodes) and 1 <= block size <= number of columns, with its ΔiFD latency,
        DSP proxy and whether it is Pareto-optimal in (latency, DSP proxy)."""
        n = self.tree.n if max_pes is None else int(max_pes)
        nc = self.tree.ncolumns
        F = {f: self.forward_schedule(f).length for f in range(1, n + 1)}
        B = {b: self.backward_schedule(b).length for b in range(1, n + 1)}
        pts = []
        for f in range(1, n + 1):
            for b in range(1, n + 1):
                for bs in range(1, nc + 1):
                    lat = 3 * F[f] + B[b] + 2 * matmul_steps(self.tree, bs, b)
                    pts.append((f, b, bs, lat, _dsp(f, b, bs)))
        arr = np.array([(p[3], p[4]) for p in pts])
        order = np.lexsort((arr[:, 1], arr[:, 0]))
        pareto = np.zeros(len(pts), dtype=bool)
        best = np.inf
        for k in order:             # sweep by latency, keep strictly improving resources
            if arr[k, 1] < best:
                pareto[k] = True
                best = arr[k, 1]
        return [DesignPoint(f, b, bs, lat, lat / self.clock_hz, dsp, bool(pareto[k]))
                for k, (f, b, bs, lat, dsp) in enumerate(pts)]

    def report(self) -> dict:
        """JSON-friendly summary of this design."""
        return {"model": self.model.name, "base": self.base, "nodes": self.tree.n, "columns": self.tree.ncolumns,
                "forward_pes": self.forward_pes, "backward_pes": self.backward_pes, "block_size": self.block_size,
                "clock_hz": self.clock_hz, "mode": self.mode, "forward_steps": self.forward_steps,
                "backward_steps": self.backward_steps, "matmul_steps": self.matmul_steps,
                "latency_cycles": self.latency_cycles, "latency_s": self.latency_s,
                "initiation_interval": self.initiation_interval,
                "pipeline_latency_cycles": self.pipeline_latency_cycles, "dsp_proxy": self.dsp_proxy(),
                "io": asdict(self.io)}


def _dsp(f: int, b: int, bs: int) -> float:
    """DSP proxy: per-PE DSPs of RoboShape's iiwa build, plus ``bs²`` multipliers per backward PE
    for the block matrix-column product."""
    return f * DSP_PER_FORWARD_PE + b * DSP_PER_BACKWARD_PE + b * bs * bs
