"""Benchmark of the optimal-control solvers: time per iteration of iLQR and DDP, split by stage
(derivatives / backward pass / forward pass / cost), on the iiwa reaching problem for horizons
N ∈ {16, 32, 64, 128}; and, in the same run when ``crocoddyl`` is importable, Crocoddyl's
``SolverFDDP`` on the identical problem (same MJCF, armature, costs, weights, symplectic Euler;
joint damping off on both sides since Crocoddyl's free dynamics has none; control bounds off on
both sides, or on both with ``--box``: ``SolverBoxFDDP``), with the ratio
``ours / crocoddyl`` per iteration (below 1: we are faster).

Per-iteration time = (time of a K-iteration solve − time of a 0-iteration solve) / K, both from
the same initial guess (gravity compensation rolled out from "home"), median over repeats; the
0-iteration solve (initial rollout, one derivative evaluation and backward pass) removes the
set-up cost that is not part of an iteration. Crocoddyl is timed the same way (its solve with K
and with 0 iterations from the same guess). Output: JSON on stdout (``--table`` adds a text table
on stderr). Environment: see benchmarks/README.md and docs/solvers.md.

    python benchmarks/solvers.py                          # numpy backend, N = 16, 32, 64, 128
    /work/venv-croc/bin/python benchmarks/solvers.py      # same, plus Crocoddyl and the ratios
    python benchmarks/solvers.py --quick                  # smoke run (N = 16, 2 iterations)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
import tasks  # noqa: E402
from benchmarks.anchors import CrocoddylFDDP, crocoddyl_importable  # noqa: E402
from benchmarks.arguments import add_iteration_timing_arguments  # noqa: E402
from benchmarks.machine import machine_info  # noqa: E402
from benchmarks.output import add_output_arguments, run_and_emit  # noqa: E402
from benchmarks.timing import time_iterations  # noqa: E402
from solvers import DDP, ILQR  # noqa: E402

STAGES = ("derivatives", "backward", "forward", "cost", "total")
SOLVERS = {"ilqr": ILQR, "ddp": DDP}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--horizons", default="16,32,64,128", help="comma-separated horizons N (default 16,32,64,128)")
    ap.add_argument("--dt", type=float, default=0.01, help="knot spacing [s] (default 0.01)")
    add_iteration_timing_arguments(ap, iterations=4)
    ap.add_argument("--backends", default="numpy", help="comma-separated dynamics backends (default numpy)")
    ap.add_argument("--solvers", default="ilqr,ddp", help="comma-separated: ilqr, ddp (default both)")
    ap.add_argument("--line-search", default="backtracking", choices=("backtracking", "parallel"))
    ap.add_argument("--box", action="store_true",
                    help="control bounds on: our solvers with box=True vs Crocoddyl's SolverBoxFDDP (default:\n"
                         "box=False vs SolverFDDP; the bounds are inactive at the optimum either way)")
    ap.add_argument("--no-crocoddyl", action="store_true", help="skip Crocoddyl even if it is importable")
    ap.add_argument("--crocoddyl-threads", type=int, default=1,
                    help="Crocoddyl's ShootingProblem.nthreads (default 1: single thread, like our solvers; its\n"
                         "default of several OpenMP threads is ~15x slower on a loaded 2-core machine)")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 16, 2 iterations, 1 repeat")
    add_output_arguments(ap)
    return ap


def make_problem(N: int, dt: float, backend: str):
    task = tasks.get_task("iiwa-reach")
    return task.build_problem(task.initial_state(), N, dt, backend=backend, passive_forces=False)


def time_ours(problem, solver_cls, K: int, repeats: int, line_search: str, box: bool) -> dict[str, Any]:
    xs0, us0 = problem.initial_guess()
    solver = solver_cls(problem, refresh_gains=False, line_search=line_search, box=box)

    def solve(k):
        r = solver.solve(us_init=us0, max_iter=k, tol=0.0)
        return dict(r.timings, iterations=r.iterations, final_cost=r.cost, steps=r.step_sizes)

    t = time_iterations(solve, K, repeats)
    last = t.solve_results[-1]
    return {"per_iteration_s": t.per_iteration_s(), "per_iteration_stage_s": t.per_iteration_stage_s(STAGES),
            "iterations": last["iterations"], "cost_after": last["final_cost"], "step_sizes": last["steps"],
            "solve_s": t.solve.seconds, "setup_s": t.setup.seconds}


def time_crocoddyl(problem, K: int, repeats: int, threads: int, box: bool) -> dict[str, Any]:
    croc = CrocoddylFDDP(problem, threads=threads, box=box)
    xs0, us0 = problem.initial_guess()
    t = croc.time_iterations(list(xs0), list(us0), K, repeats)
    iters, cost = t.solve_results[-1]
    iters = max(iters, 1)
    return {"per_iteration_s": t.per_iteration_s(iters), "iterations": iters, "cost_after": cost,
            "solve_s": t.solve.seconds, "setup_s": t.setup.seconds, **croc.describe()}


def run(args) -> dict[str, Any]:
    t_start = time.perf_counter()
    horizons = [16] if args.quick else [int(n) for n in args.horizons.split(",")]
    K = 2 if args.quick else args.iterations
    repeats = 1 if args.quick else args.repeats
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    solver_names = [s.strip() for s in args.solvers.split(",") if s.strip()]
    for s in solver_names:
        if s not in SOLVERS:
            raise SystemExit(f"unknown solver '{s}'; choose from {', '.join(SOLVERS)}")
    have_croc = crocoddyl_importable(skip=args.no_crocoddyl)
    entries = []
    for N in horizons:
        croc = None
        if have_croc:
            print(f"[solvers benchmark] N={N} crocoddyl", file=sys.stderr)
            croc = time_crocoddyl(make_problem(N, args.dt, "numpy"), K, repeats, args.crocoddyl_threads, args.box)
            entries.append({"horizon": N, "backend": "crocoddyl", **croc})
        for be in backends:
            dynamics.get_backend(be).warmup(dynamics.load_model("iiwa"))
            problem = make_problem(N, args.dt, be)
            for s in solver_names:
                print(f"[solvers benchmark] N={N} {s} ({be})", file=sys.stderr)
                e = {"horizon": N, "solver": s, "backend": be, "line_search": args.line_search, "box": args.box,
                     **time_ours(problem, SOLVERS[s], K, repeats, args.line_search, args.box)}
                e["ratio_vs_crocoddyl"] = (e["per_iteration_s"] / croc["per_iteration_s"]) if croc else None
                entries.append(e)
    return {"benchmark": "solvers", "problem": {"task": "iiwa-reach", "dt": args.dt, "passive_forces": False,
                                                "integrator": "euler", "initial_guess": "gravity compensation",
                                                "control_bounds": args.box},
            "iterations_per_timed_solve": K, "repeats": repeats, "crocoddyl_available": have_croc,
            "results": entries, "machine": machine_info(), "wall_s": time.perf_counter() - t_start}


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'N':>4} {'solver':<24} {'backend':<9} {'ms/iter':>9} {'deriv':>8} {'backward':>9} {'forward':>9} "
             f"{'cost':>7} {'vs croc':>8}"]
    for e in result["results"]:
        st = e.get("per_iteration_stage_s", {})
        ms = lambda k: f"{1e3 * st[k]:8.2f}" if k in st else f"{'':>8}"  # noqa: E731
        ratio = f"{e['ratio_vs_crocoddyl']:8.1f}" if e.get("ratio_vs_crocoddyl") else f"{'':>8}"
        lines.append(f"{e['horizon']:>4} {e['solver']:<24} {e['backend']:<9} {1e3 * e['per_iteration_s']:9.2f} "
                     f"{ms('derivatives')} {ms('backward'):>9} {ms('forward'):>9} {ms('cost'):>7} {ratio}")
    return "\n".join(lines)


if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
