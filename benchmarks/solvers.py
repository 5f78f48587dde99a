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
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
if __name__ == "__main__":
    # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
    sys.path.insert(0, str(_ROOT))

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
import tasks  # noqa: E402
from solvers import DDP, ILQR  # noqa: E402

try:  # the shared timing helper lives next to this file
    from benchmarks.timing import measure  # noqa: E402
except ModuleNotFoundError:  # pragma: no cover - run from an unusual working directory
    sys.path.insert(0, str(_HERE))
    from timing import measure  # type: ignore  # noqa: E402

STAGES = ("derivatives", "backward", "forward", "cost", "total")
SOLVERS = {"ilqr": ILQR, "ddp": DDP}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--horizons", default="16,32,64,128", help="comma-separated horizons N (default 16,32,64,128)")
    ap.add_argument("--dt", type=float, default=0.01, help="knot spacing [s] (default 0.01)")
    ap.add_argument("--iterations", type=int, default=4, help="iterations K per timed solve (default 4)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats, median reported (default 3)")
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
    ap.add_argument("--out", help="also write the JSON to this file")
    ap.add_argument("--table", action="store_true", help="print a text table on stderr")
    return ap


def machine_info() -> dict[str, Any]:
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("crocoddyl", "pinocchio", "numba", "mujoco"):
        try:
            versions[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception:  # optional packages: absent is fine
            versions[mod] = None
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "versions": versions, "load_average_1_5_15min": load,
            "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                        "NUMBA_NUM_THREADS")},
            "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def make_problem(N: int, dt: float, backend: str):
    task = tasks.get_task("iiwa-reach")
    return task.build_problem(task.initial_state(), N, dt, backend=backend, passive_forces=False)


def time_ours(problem, solver_cls, K: int, repeats: int, line_search: str, box: bool) -> dict[str, Any]:
    xs0, us0 = problem.initial_guess()
    solver = solver_cls(problem, refresh_gains=False, line_search=line_search, box=box)
    runs: dict[int, list[dict]] = {0: [], K: []}

    def solve(k):
        r = solver.solve(us_init=us0, max_iter=k, tol=0.0)
        runs[k].append(dict(r.timings, iterations=r.iterations, final_cost=r.cost, steps=r.step_sizes))
        return r

    t_k = measure(lambda: solve(K), repeats=repeats, min_time=0.0)
    t_0 = measure(lambda: solve(0), repeats=repeats, min_time=0.0)
    med = {s: statistics.median(r[s] for r in runs[K]) - statistics.median(r[s] for r in runs[0]) for s in STAGES}
    last = runs[K][-1]
    return {"per_iteration_s": (t_k.seconds - t_0.seconds) / K,
            "per_iteration_stage_s": {s: med[s] / K for s in STAGES},
            "iterations": last["iterations"], "cost_after": last["final_cost"], "step_sizes": last["steps"],
            "solve_s": t_k.seconds, "setup_s": t_0.seconds}


def time_crocoddyl(problem, K: int, repeats: int, threads: int, box: bool) -> dict[str, Any]:
    import crocoddyl

    from solvers.crocoddyl_problem import build_crocoddyl_problem
    cp = build_crocoddyl_problem(problem, bounds=box)
    cp.nthreads = threads        # its OpenMP loop over knots; our solvers run on one thread
    xs0, us0 = problem.initial_guess()
    xs0, us0 = list(xs0), list(us0)
    solver = crocoddyl.SolverBoxFDDP(cp) if box else crocoddyl.SolverFDDP(cp)
    solver.th_stop = 1e-300   # (must be > 0) never stop early: K full iterations
    info = {}

    def solve(k):
        solver.solve(xs0, us0, k, False)
        info[k] = (solver.iter, solver.cost)

    t_k = measure(lambda: solve(K), repeats=repeats, min_time=0.02)
    t_0 = measure(lambda: solve(0), repeats=repeats, min_time=0.02)
    iters = max(int(info[K][0]), 1)
    return {"per_iteration_s": (t_k.seconds - t_0.seconds) / iters, "iterations": iters,
            "cost_after": float(info[K][1]), "solve_s": t_k.seconds, "setup_s": t_0.seconds,
            "solver": "crocoddyl." + type(solver).__name__, "version": getattr(crocoddyl, "__version__", "?"),
            "threads": int(cp.nthreads)}


def run(args) -> dict[str, Any]:
    horizons = [16] if args.quick else [int(n) for n in args.horizons.split(",")]
    K = 2 if args.quick else args.iterations
    repeats = 1 if args.quick else args.repeats
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    solver_names = [s.strip() for s in args.solvers.split(",") if s.strip()]
    for s in solver_names:
        if s not in SOLVERS:
            raise SystemExit(f"unknown solver '{s}'; choose from {', '.join(SOLVERS)}")
    have_croc = False
    if not args.no_crocoddyl:
        try:
            import crocoddyl  # noqa: F401
            have_croc = True
        except ImportError:
            pass
    entries = []
    t_start = time.perf_counter()
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.table:
        print(format_table(result), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
