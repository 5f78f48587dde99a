"""Design space of the simulated accelerator (issue 14; Plancher et al. 2021 Fig. 3 style comparison).

For iiwa, HyQ and Atlas (floating-base robots in the three base treatments: ``fixed`` = limbs
only as published, ``link`` = base as one 6-column link, ``six`` = six 1-DoF links as GRiD) it
enumerates every (forward PEs, backward PEs, block size) of :class:`AcceleratorDesign`, reports the
latency of one ΔiFD knot (cycles and µs at 55.6 MHz), the DSP proxy and the Pareto points; then,
for N ∈ {16, 32, 64, 128} knots, the *simulated* end-to-end time of the fastest design (latency
mode, as Plancher et al. 2021's FPGA, and pipelined, as Dadu-RBD) next to the *measured* wall time of the
numpy and numba backends' ``aba_derivatives`` on N states in the same run (and the measured host
time the emulation itself takes). Prints JSON (``--out`` also writes it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
from benchmarks.arguments import csv_list  # noqa: E402
from benchmarks.machine import machine_info  # noqa: E402
from benchmarks.output import emit_result  # noqa: E402
from benchmarks.timing import measure  # noqa: E402
from dynamics.fpga_sim import AcceleratorDesign, FpgaSimBackend  # noqa: E402

KNOTS = (16, 32, 64, 128)



def design_table(model, base: str, max_pes: int | None) -> dict:
    d = AcceleratorDesign(model, base=base)
    t0 = time.perf_counter()
    pts = d.design_space(max_pes=max_pes)
    wall = time.perf_counter() - t0
    pareto = sorted((p for p in pts if p.pareto), key=lambda p: p.latency_cycles)
    by = {(p.forward_pes, p.backward_pes, p.block_size): p for p in pts}
    n = d.tree.n if max_pes is None else max_pes
    fastest = min(pts, key=lambda p: (p.latency_cycles, p.dsp_proxy))
    smallest = by[(1, 1, 1)]
    # latency vs resources along the diagonal (k PEs each, block size k capped at the column count)
    diag = [{"pes": k, "block_size": min(k, d.tree.ncolumns), "latency_cycles":
             by[(k, k, min(k, d.tree.ncolumns))].latency_cycles} for k in range(1, n + 1)]
    return {"robot": model.name, "base": base, "nodes": d.tree.n, "columns": d.tree.ncolumns, "points": len(pts),
            "enumeration_wall_s": wall,
            "smallest": _pt(smallest), "fastest": _pt(fastest),
            "pareto": [_pt(p) for p in pareto], "diagonal": diag}


def _pt(p) -> dict:
    return {"forward_pes": p.forward_pes, "backward_pes": p.backward_pes, "block_size": p.block_size,
            "latency_cycles": p.latency_cycles, "latency_us": p.latency_s * 1e6, "dsp_proxy": round(p.dsp_proxy, 1)}


def knots_comparison(model, base: str, knots, backends, repeats: int, fastest: dict) -> dict:
    d = AcceleratorDesign(model, fastest["forward_pes"], fastest["backward_pes"], fastest["block_size"], base=base)
    dp = d.replace(mode="pipelined")
    rng = np.random.default_rng(0)
    out = {"design": d.report(), "pipelined": {"initiation_interval": dp.initiation_interval,
                                               "pipeline_latency_cycles": dp.pipeline_latency_cycles}, "rows": []}
    for n in knots:
        q = model.random_configuration(rng, size=(n,))
        v = rng.normal(size=(n, model.nv))
        tau = rng.normal(size=(n, model.nv))
        row = {"N": n}
        for mode, dd in (("latency", d), ("pipelined", dp)):
            t = dd.time("dFD", n)
            ti = dd.time("dIFD", n)
            row[f"fpga_sim_{mode}"] = {"dFD_end_to_end_s": t.end_to_end_s, "dFD_compute_s": t.compute_s,
                                       "dIFD_end_to_end_s": ti.end_to_end_s, "dIFD_compute_s": ti.compute_s,
                                       "dIFD_io_s": ti.io_s, "simulated": True}
        for name in backends:
            be = dynamics.get_backend(name)
            be.warmup(model)
            m = measure(lambda: be.aba_derivatives(model, q, v, tau), repeats=repeats, min_time=0.01, budget=1.0)
            row[f"{name}_measured_s"] = m.seconds
        be = FpgaSimBackend(design=d)
        t0 = time.perf_counter()
        be.aba_derivatives(model, q, v, tau)
        row["fpga_sim_host_emulation_s"] = time.perf_counter() - t0
        out["rows"].append(row)
        print(f"[knots] {model.name}/{base} N={n}", file=sys.stderr)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=csv_list(), default=["iiwa", "hyq", "atlas"])
    p.add_argument("--bases", type=csv_list(), default=["fixed", "link", "six"],
                   help="floating-base treatments for floating-base robots")
    p.add_argument("--knots", type=csv_list(int), default=list(KNOTS))
    p.add_argument("--backends", type=csv_list(), default=None, help="measured backends (default numpy,numba if available)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-pes", type=int, default=None, help="cap the PE counts of the enumeration")
    p.add_argument("--quick", action="store_true", help="tiny run: iiwa, PEs <= 3, N = 16, numpy only")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    robots = ["iiwa"] if args.quick else args.robots
    for r in robots:
        if r not in dynamics.BUNDLED_ROBOTS:
            p.error(f"unknown robot '{r}'; bundled robots: {', '.join(dynamics.BUNDLED_ROBOTS)}")
    knots = [16] if args.quick else args.knots
    max_pes = 3 if args.quick else args.max_pes
    if args.backends is not None:
        backends = args.backends
    elif args.quick:
        backends = ["numpy"]
    else:
        avail = dynamics.available_backends()
        backends = [b for b in ("numpy", "numba") if avail.get(b, (False,))[0]]

    tables, comparisons = [], []
    dadu = None
    for r in robots:
        m = dynamics.load_model(r)
        bases = args.bases if m.has_floating_base else ["link"]
        for base in bases:
            tab = design_table(m, base, max_pes)
            tables.append(tab)
            print(f"[design] {r}/{base}: {tab['points']} points, {len(tab['pareto'])} Pareto", file=sys.stderr)
            if base == "link":   # the tree the backend's numerics compute (measured backends: same model)
                comparisons.append({"robot": r, "base": base,
                                    **knots_comparison(m, base, knots, backends, args.repeats, tab["fastest"])})
        if r == "iiwa":
            d = AcceleratorDesign(m, 7, 7, 7, clock_hz=125e6, mode="pipelined")
            dadu = {"config": "iiwa 7/7/7 at 125 MHz (Dadu-RBD's clock), pipelined",
                    "pipeline_latency_cycles": d.pipeline_latency_cycles,
                    "pipeline_latency_us": d.pipeline_latency_cycles / 125e6 * 1e6,
                    "initiation_interval_cycles": d.initiation_interval,
                    "latency_mode_cycles": d.latency_cycles,
                    "latency_mode_us_at_125MHz": d.latency_cycles / 125e6 * 1e6,
                    "published_dadu_dIFD_latency_us": 0.76}
    data = {"benchmark": "fpga_sim_design",
            "machine": machine_info(),
            "settings": {"robots": robots, "bases": args.bases, "knots": knots, "backends": backends,
                         "max_pes": max_pes, "quick": args.quick, "clock_hz": 55.6e6},
            "design_spaces": tables, "knots_comparison": comparisons, "dadu_configuration": dadu,
            "notes": ["latency_cycles: one knot of ΔiFD (completely fused ∇FD), latency mode, 3·fwd + bwd + 2·matmul",
                      "fpga_sim_* times are simulated from the cycle model and the PCIe Gen1 x8 I/O model; "
                      "*_measured_s are wall-clock medians on this machine; fpga_sim_host_emulation_s is what the "
                      "Python emulation itself took here",
                      "dsp_proxy: RoboShape iiwa per-PE DSPs plus block_size² per backward PE (relative only)"]}
    emit_result(data, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
