"""Closed-loop MPC benchmark: control-loop rate and tracking of the iiwa reaching demo for each
horizon N and each available dynamics backend, with Crocoddyl's warm-started FDDP iteration on
the same problem size as the anchor, timed in the same run when ``crocoddyl`` is importable.

For every (backend, N): the iiwa-reach task runs in closed loop in MuJoCo (lockstep mode, an
update every knot of ``--dt``, ``--solver`` with one iteration per update) for ``--duration``
simulated seconds. Reported: ``control_loop_hz`` (updates per wall-clock second of the loop,
physics included), ``max_update_rate_hz`` (1 / median update latency), median / p95 latency, the
per-stage split, tracking (mean end-effector error, time to reach each target, success).

Anchor (``crocoddyl`` key per N): a ``crocoddyl.SolverFDDP`` iteration on the same problem
(``solvers.crocoddyl_problem.build_crocoddyl_problem``: same MJCF, costs, weights, symplectic
Euler; joint damping off on both sides because Crocoddyl's free dynamics has none), warm-started
from a converged solution shifted by one knot — one MPC update's worth of work, on one thread.
Our own warm-started iteration on the identical problem is timed next to it
(``ours_iteration_s``), and ``ratio_update_vs_crocoddyl_iteration`` = our median closed-loop
update latency / Crocoddyl's iteration. Crocoddyl 3.2.1 needs pin 4.0.0, hence a separate venv:

    python benchmarks/mpc_rate.py --table                       # numpy (+ numba) backends
    /work/venv-croc/bin/python benchmarks/mpc_rate.py --table   # same, plus the Crocoddyl anchor
    python benchmarks/mpc_rate.py --quick                        # smoke run: N = 16, 0.3 s

Output: JSON on stdout (``--table`` adds a text table on stderr). Speed is only meaningful as a
ratio to the anchor measured in the same run (see benchmarks/README.md).
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
import tasks  # noqa: E402
from mpc import MPC  # noqa: E402
from sim import report  # noqa: E402
from sim.runner import simulate  # noqa: E402

try:
    from benchmarks.timing import measure  # noqa: E402
except ModuleNotFoundError:  # pragma: no cover - run from an unusual working directory
    sys.path.insert(0, str(_HERE))
    from timing import measure  # type: ignore  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--horizons", default="16,32,64", help="comma-separated horizons N (default 16,32,64)")
    ap.add_argument("--backends", default=None,
                    help="comma-separated dynamics backends (default: every available one)")
    ap.add_argument("--solver", default="ddp", choices=("ilqr", "ddp", "fddp"), help="MPC solver (default ddp)")
    ap.add_argument("--dt", type=float, default=0.01, help="knot spacing [s] (default 0.01)")
    ap.add_argument("--duration", type=float, default=4.0,
                    help="simulated seconds per closed-loop run (default 4.0: the first two targets)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of the Crocoddyl / single-iteration timings")
    ap.add_argument("--no-crocoddyl", action="store_true", help="skip the Crocoddyl anchor even if importable")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 16, 0.3 s, numpy only, 1 repeat")
    ap.add_argument("--out", help="also write the JSON to this file")
    ap.add_argument("--table", action="store_true", help="print a text table on stderr")
    return ap


def machine_info() -> dict[str, Any]:
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("mujoco", "numba", "crocoddyl", "pinocchio"):
        try:
            versions[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception:  # optional packages: absent is fine
            versions[mod] = None
    threads = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "versions": versions,
            "threads": threads, "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def closed_loop(task, backend: str, solver: str, N: int, dt: float, duration: float) -> dict[str, Any]:
    """One lockstep closed-loop run; the summary fields the benchmark reports."""
    model = task.model
    ctrl = MPC(task, solver=solver, backend=backend, horizon=N, dt=dt)
    warm = ctrl.warmup()    # dynamics and solver kernels compiled/loaded before the clock starts
    h = float(model.mj_model.opt.timestep)
    r = simulate(model, ctrl, task.initial_state(), duration, mode="lockstep", update_every=max(1, round(dt / h)))
    s = report.summarize(r, task, config={"solver": solver, "backend": backend, "horizon": N, "dt": dt},
                         warmup_s=warm)
    tm = s["timing"]
    med = tm["update_latency_ms"]["median"]
    ev = s.get("evaluation") or {}
    crit = {c["name"]: c for c in ev.get("criteria", [])}
    covered = [r for r in (ev.get("details") or {}).get("targets", []) if r["t_start_s"] is not None]
    return {"control_loop_hz": tm["control_loop_hz"], "max_update_rate_hz": 1e3 / med if med else None,
            "update_latency_ms": tm["update_latency_ms"], "stage_ms": tm["stage_ms"],
            "stage_fraction": tm["stage_fraction"], "updates": tm["updates"], "real_time_factor": tm["real_time_factor"],
            "warmup_s": warm, "initial_solve_s": tm["initial_solve_s"], "completed": s["completed"],
            "mean_ee_error_m": (s.get("tracking") or {}).get("ee_error", {}).get("mean"),
            "time_to_reach_s": [r["time_to_reach_s"] for r in covered],
            "targets_reached": [bool(crit[f"target {r['index']} time to reach"]["passed"]) for r in covered],
            "torque_violation_steps": s["constraints"]["torque_limit"]["violation_steps"],
            "torque_violation_Nm": crit.get("torque limit", {}).get("value")}


def warm_start_problem(task, N: int, dt: float, backend: str):
    """The problem of an MPC update at t = 0 (damping off, for Crocoddyl), its converged solution
    shifted by one knot as the warm start."""
    from solvers import FDDP
    problem = task.build_problem(task.initial_state(), N, dt, backend=backend, passive_forces=False)
    res = FDDP(problem).solve(max_iter=100, tol=1e-8)
    xs, us = res.shifted(1)
    task.update_problem(problem, dt)
    problem.set_initial_state(xs[0])
    return problem, xs, us


def time_ours_iteration(task, N: int, dt: float, backend: str, solver: str, repeats: int) -> float:
    from solvers import SOLVERS
    problem, xs, us = warm_start_problem(task, N, dt, backend)
    # one iteration as Crocoddyl's solve(maxiter=1) does it: derivatives, backward pass, forward
    # pass; no re-linearisation at the accepted trajectory (refresh_gains=False)
    s = SOLVERS[solver](problem, refresh_gains=False)
    s.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0)    # compiled kernels loaded outside the timing
    return measure(lambda: s.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0), repeats=repeats,
                   min_time=0.0).seconds


def time_crocoddyl_iteration(task, N: int, dt: float, repeats: int) -> dict[str, Any]:
    import crocoddyl

    from solvers.crocoddyl_problem import build_crocoddyl_problem
    problem, xs, us = warm_start_problem(task, N, dt, "numpy")
    cp = build_crocoddyl_problem(problem)
    cp.nthreads = 1  # one thread, like our solvers
    solver = crocoddyl.SolverFDDP(cp)
    solver.th_stop = 1e-300  # (must be > 0) never stop before the one iteration
    xs_l, us_l = list(xs), list(us)
    t1 = measure(lambda: solver.solve(xs_l, us_l, 1, False), repeats=repeats, min_time=0.02)
    t0 = measure(lambda: solver.solve(xs_l, us_l, 0, False), repeats=repeats, min_time=0.02)
    return {"iteration_s": t1.seconds, "solve_0_iterations_s": t0.seconds, "solver": "crocoddyl.SolverFDDP",
            "version": getattr(crocoddyl, "__version__", "?"), "threads": 1,
            "note": "solve(warm start, maxiter=1): calc + backward + forward of one iteration, as one MPC update"}


def run(args) -> dict[str, Any]:
    horizons = [16] if args.quick else [int(n) for n in args.horizons.split(",")]
    duration = 0.3 if args.quick else args.duration
    repeats = 1 if args.quick else args.repeats
    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    else:
        backends = ["numpy"] if args.quick else [k for k, (ok, _) in dynamics.available_backends().items() if ok]
    have_croc = False
    if not args.no_crocoddyl:
        try:
            import crocoddyl  # noqa: F401
            have_croc = True
        except ImportError:
            pass
    task = tasks.get_task("iiwa-reach")
    entries = []
    t_start = time.perf_counter()
    for N in horizons:
        croc = None
        if have_croc:
            print(f"[mpc_rate] N={N} crocoddyl anchor", file=sys.stderr)
            croc = time_crocoddyl_iteration(task, N, args.dt, repeats)
        for be in backends:
            print(f"[mpc_rate] N={N} {be}: closed loop, {duration:g} s", file=sys.stderr)
            e = {"horizon": N, "backend": be, "solver": args.solver,
                 **closed_loop(task, be, args.solver, N, args.dt, duration)}
            e["ours_iteration_s"] = time_ours_iteration(task, N, args.dt, be, args.solver, repeats)
            if croc is not None:
                e["crocoddyl"] = croc
                med = e["update_latency_ms"]["median"]
                e["ratio_update_vs_crocoddyl_iteration"] = med * 1e-3 / croc["iteration_s"] if med else None
                e["ratio_iteration_vs_crocoddyl_iteration"] = e["ours_iteration_s"] / croc["iteration_s"]
            entries.append(e)
    return {"benchmark": "mpc_rate",
            "setup": {"task": "iiwa-reach", "solver": args.solver, "dt": args.dt, "duration_s": duration,
                      "mode": "lockstep", "iterations_per_update": 1, "physics_dt": 0.001},
            "crocoddyl_available": have_croc, "results": entries, "machine": machine_info(),
            "wall_s": time.perf_counter() - t_start}


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'N':>4} {'backend':<8} {'loop Hz':>8} {'max Hz':>7} {'med ms':>7} {'p95 ms':>7} {'deriv':>6} "
             f"{'bwd':>6} {'fwd':>6} {'ee err':>7} {'reached':>8} {'croc it ms':>10} {'upd/croc':>8}"]
    for e in result["results"]:
        st = e["stage_ms"]
        lat = e["update_latency_ms"]
        croc = e.get("crocoddyl")
        reached = f"{sum(bool(x) for x in e['targets_reached'])}/{len(e['targets_reached'])}"
        lines.append(
            f"{e['horizon']:>4} {e['backend']:<8} {e['control_loop_hz'] or 0:8.1f} {e['max_update_rate_hz'] or 0:7.1f} "
            f"{lat['median'] or 0:7.1f} {lat['p95'] or 0:7.1f} {st.get('derivatives', 0):6.1f} {st.get('backward', 0):6.1f} "
            f"{st.get('forward', 0):6.1f} {100 * (e['mean_ee_error_m'] or 0):6.2f}c {reached:>8} "
            f"{(1e3 * croc['iteration_s']) if croc else float('nan'):10.2f} "
            f"{e.get('ratio_update_vs_crocoddyl_iteration') or float('nan'):8.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    result = run(args)
    text = json.dumps(report._jsonable(result), indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.table:
        print(format_table(result), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
