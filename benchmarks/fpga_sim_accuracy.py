"""Accuracy of the fpga-sim fixed-point datapath against float64 (issue 14, Plancher et al. 2021 §IV-C).

1. Gradient error vs format: for each robot and each format ``Qm.n`` of the sweep, random states
   (seeded) through the completely fused ΔiFD (Plancher et al. 2021 Algorithm 3: host q̈ and M⁻¹, fixed-point
   RNEA, ∇RNEA and ``-M⁻¹ ·``); max and RMS relative error of ``∂q̈/∂q`` and ``∂q̈/∂q̇`` against the
   numpy float64 reference, the rigorous bound the backend derives, and saturation counts.
2. Optimisation with fixed-point derivatives: the iiwa reaching problem (``iiwa-reach``, horizon 32,
   dt 0.02 s) solved by box-iLQR with the derivatives from ``FpgaSimBackend(fmt,
   emulate="gradients")`` (rollouts in float64 on the host, gradients on the accelerator, as seed
   000's experiment sweeps "the numerical data types used in the gradient computation"); a format
   *converges to the float64 optimum* when the solver reports convergence and the final cost is
   within ``--cost-rtol`` of the float64 solve's.

Prints JSON on stdout (``--out`` also writes it). ``python benchmarks/fpga_sim_accuracy.py --help``.
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
from dynamics.fpga_sim import FpgaSimBackend, QFormat  # noqa: E402

DEFAULT_FORMATS = ("Q8.8", "Q8.12", "Q12.5", "Q12.8", "Q12.12", "Q12.16", "Q16.8", "Q16.12", "Q16.16", "Q12.20",
                   "Q16.14", "Q20.12")
QUICK_FORMATS = ("Q12.5", "Q16.16")



def gradient_errors(model, fmt: str, rounding: str, n_states: int, seed: int) -> dict:
    """Max/RMS relative errors of ΔiFD in ``fmt`` over ``n_states`` random states."""
    ref = dynamics.get_backend("numpy")
    rng = np.random.default_rng(seed)
    q = model.random_configuration(rng, size=(n_states,))
    v = rng.normal(size=(n_states, model.nv))
    tau = rng.normal(size=(n_states, model.nv)) * 5.0
    Mi = ref.minv(model, q)
    be = FpgaSimBackend(fmt=fmt, rounding=rounding)
    t0 = time.perf_counter()
    ours = be.aba_derivatives(model, q, v, tau, minv=Mi)
    wall = time.perf_counter() - t0
    want = ref.aba_derivatives(model, q, v, tau, minv=Mi)
    out = {"format": fmt, "rounding": rounding, "overflows": be.last_timing.overflow_total,
           "bound_normalised": be.rtol, "host_wall_s": wall}
    for name, x, y in (("da_dq", ours[0], want[0]), ("da_dv", ours[1], want[1])):
        err = np.abs(x - y)
        scale = np.abs(y).max(axis=(-2, -1))                   # per state
        out[f"{name}_max_rel"] = float((err.max(axis=(-2, -1)) / scale).max())
        out[f"{name}_rms_rel"] = float(np.sqrt(np.mean((x - y) ** 2)) / np.sqrt(np.mean(y ** 2)))
    return out


def solve_reach(backend, horizon: int, dt: float, max_iter: int) -> dict:
    from solvers import ILQR
    from tasks import get_task
    task = get_task("iiwa-reach")
    problem = task.build_problem(task.initial_state(), horizon=horizon, dt=dt, backend=backend)
    t0 = time.perf_counter()
    res = ILQR(problem, box=True).solve(max_iter=max_iter)
    return {"cost": float(res.cost), "converged": bool(res.converged), "reason": res.reason,
            "iterations": int(res.iterations), "gradient_norm": float(res.gradient_norm),
            "wall_s": time.perf_counter() - t0, "us": res.us}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=csv_list(), default=["iiwa", "hyq", "atlas"])
    p.add_argument("--formats", type=csv_list(), default=None,
                   help=f"comma-separated Qm.n (default {','.join(DEFAULT_FORMATS)})")
    p.add_argument("--rounding", type=csv_list(), default=["truncate", "nearest"], help="rounding modes to sweep")
    p.add_argument("--states", type=int, default=16, help="random states per robot and format (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-solve", action="store_true", help="skip the iiwa reaching solves")
    p.add_argument("--solve-formats", type=csv_list(), default=None, help="formats for the solves (default: --formats)")
    p.add_argument("--horizon", type=int, default=32)
    p.add_argument("--dt", type=float, default=0.02)
    p.add_argument("--max-iter", type=int, default=60)
    p.add_argument("--cost-rtol", type=float, default=1e-3,
                   help="relative cost difference to the float64 optimum still counted as the same optimum")
    p.add_argument("--quick", action="store_true", help="tiny run: iiwa, 2 formats, 2 states, short solve")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    formats = args.formats or list(QUICK_FORMATS if args.quick else DEFAULT_FORMATS)
    for f in formats:
        QFormat.parse(f)            # clear error for a bad format before any work
    robots = ["iiwa"] if args.quick else args.robots
    for r in robots:
        if r not in dynamics.BUNDLED_ROBOTS:
            p.error(f"unknown robot '{r}'; bundled robots: {', '.join(dynamics.BUNDLED_ROBOTS)}")
    n_states = 2 if args.quick else args.states
    rounding = args.rounding[:1] if args.quick else args.rounding
    horizon, max_iter = (8, 5) if args.quick else (args.horizon, args.max_iter)

    sweep = []
    for r in robots:
        m = dynamics.load_model(r)
        for rd in rounding:
            for f in formats:
                e = gradient_errors(m, f, rd, n_states, args.seed)
                e["robot"] = r
                sweep.append(e)
                print(f"[accuracy] {r} {f} {rd}: max rel {e['da_dq_max_rel']:.2e}", file=sys.stderr)

    solves = {}
    if not args.no_solve:
        ref = solve_reach("numpy", horizon, args.dt, max_iter)
        solves["float64"] = {k: v for k, v in ref.items() if k != "us"}
        for f in (args.solve_formats or formats):
            be = FpgaSimBackend(fmt=f, emulate="gradients")
            s = solve_reach(be, horizon, args.dt, max_iter)
            gap = abs(s["cost"] - ref["cost"]) / max(abs(ref["cost"]), 1e-12)
            s["relative_cost_gap"] = gap
            s["max_control_diff"] = float(np.abs(s["us"] - ref["us"]).max())
            s["reaches_float64_optimum"] = bool(s["converged"] and gap <= args.cost_rtol)
            solves[f] = {k: v for k, v in s.items() if k != "us"}
            print(f"[solve] {f}: cost {s['cost']:.6g} (gap {gap:.1e}) converged={s['converged']}", file=sys.stderr)

    data = {
        "benchmark": "fpga_sim_accuracy",
        "machine": machine_info(),
        "settings": {"robots": robots, "formats": formats, "rounding": rounding, "states": n_states, "seed": args.seed,
                     "horizon": horizon, "dt": args.dt, "max_iter": max_iter, "cost_rtol": args.cost_rtol,
                     "quick": args.quick, "function": "dIFD (completely fused, host q̈ and M⁻¹)"},
        "gradient_sweep": sweep,
        "iiwa_reach_solves": solves,
        "notes": ["errors are measured (emulated fixed point vs numpy float64); max_rel: max over states of "
                  "max|x - ref| / max|ref|; rms_rel: RMS error / RMS of the reference",
                  "bound_normalised: the rigorous running-error bound of the backend, max bound / max(1, max|x|)"],
    }
    emit_result(data, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
