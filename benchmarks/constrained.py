"""Benchmark of the constrained solvers: time per SQP iteration of :class:`solvers.CSQP` against
mim-solvers' ``SolverCSQP`` on the identical problem (solvers/crocoddyl_problem.py maps costs,
dynamics and constraints) and against our own unconstrained FDDP iteration on the same problem
built without its constraints (FDDP refuses constrained problems), all timed in the same run.

Problems: the iiwa reaching past a wall (end effector in y ≤ 0.10 m, joint 1 ≥ 0.72 rad; both
active at the optimum), N = 32, dt = 0.03 s; HyQ standing under a 1 m/s lateral push with hard
friction cones on every knot, N = 20, dt = 0.01 s. Joint damping off (Crocoddyl has none); no
control box on either side.

An SQP iteration of either solver is a derivative evaluation, an ADMM QP of several Riccati
passes and a line search; the two ADMM implementations need different numbers of iterations, so
each is timed with the same fixed number of ADMM iterations per SQP iteration (``--qp-iterations``,
tolerances 0 so neither stops early) — the ratio compares the implementations iteration for
iteration — and the per-ADMM-iteration time is reported too. Our iteration is timed a second
time with the solver's default ADMM settings (``csqp_default_admm``: tolerance-stopped, the ADMM
iterations each SQP iteration then takes from the default guess reported with it) and its ratio to
our FDDP iteration given next to the fixed-count one (``ratio_vs_unconstrained_default_admm``):
the fixed count measures the implementation, the default one what a user's solve from the same
guess costs per iteration (its first iterations, far from the optimum, take the most ADMM
iterations). Per-iteration time = (time of a
K-iteration solve − time of a 0-iteration solve) / K, median over repeats (benchmarks/timing.py):
wall clock, and CPU time of this process (``time.process_time`` around each solve, medians over
the same calls; the ``*_cpu`` fields) — on a shared machine the CPU-time ratios are the ones to
compare, wall-clock ratios move with the other processes' load.
Solves to convergence (KKT residuals ≤ 1e-6, each solver's default ADMM settings) are reported
too: iterations, ADMM iterations (ours) and wall time.

The augmented-Lagrangian DDP (:class:`solvers.ALDDP`: one Riccati pass per iteration, no QP) is
timed the same way from the same guess (``alddp``; its default settings, tolerance 0 so every
iteration runs), with its ratios to mim-solvers' CSQP iteration and to our FDDP iteration
(``alddp_ratio_*``), and its solve to KKT residuals ≤ 1e-6 next to CSQP's and mim-solvers'
(``alddp_converged_solve_tol_1e-6``: iterations and wall and CPU time — time to solution, the
honest comparison when the iterations differ in cost and in number). ``alddp_warm``: the
steady-state MPC iteration, ALDDP warm-started from its own converged solve (multipliers and
penalty warm) against FDDP from its converged solve of the problem without constraints (CPU time
per iteration and their ratio).

    python benchmarks/constrained.py                 # numba backend, both problems
    python benchmarks/constrained.py --quick         # smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import dynamics

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
from benchmarks.anchors import crocoddyl_importable
from benchmarks.arguments import add_iteration_timing_arguments
from benchmarks.machine import machine_info
from benchmarks.output import Column, TextTable, add_output_arguments, run_and_emit
from benchmarks.problems import hyq_push, iiwa_wall
from benchmarks.timing import IterationTiming, time_iterations
from solvers import ALDDP, CSQP, FDDP, ShootingProblem


def hyq_push_problem(N: int, backend: str, constrained: bool = True) -> ShootingProblem:
    """The problem of :func:`benchmarks.problems.hyq_push` (a 1 m/s push, dt = 0.01 s), without its task."""
    return hyq_push(N, backend=backend, constrained=constrained)[1]


#: name -> (builder, horizon N); a builder takes (N, backend=, constrained=) and returns the problem
PROBLEMS = {"iiwa-wall": (iiwa_wall, 32), "hyq-push": (hyq_push_problem, 20)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--problems", default="iiwa-wall,hyq-push", help="comma-separated: iiwa-wall, hyq-push")
    ap.add_argument("--backend", default="numba", help="our dynamics backend (default numba)")
    add_iteration_timing_arguments(ap, iterations=3, what="SQP iterations")
    ap.add_argument("--qp-iterations", type=int, default=25, help="ADMM iterations per SQP iteration (default 25)")
    ap.add_argument("--no-mim", action="store_true", help="skip mim-solvers even if it is importable")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 iteration, 1 repeat, 5 ADMM iterations")
    add_output_arguments(ap)
    return ap


def _from_guess(problem):
    xs0, us0 = problem.initial_guess()
    return xs0, us0


def time_ours(problem, K: int, Q: int | None, repeats: int) -> dict[str, Any]:
    """Our SQP iteration with Q ADMM iterations each (tolerances 0); Q None: the solver's default
    ADMM settings (stopped by its tolerances, as users run it), from the same guess."""
    fixed = {} if Q is None else {"max_qp_iter": Q, "eps_abs": 0.0, "eps_rel": 0.0}
    solver = CSQP(problem, box=False, warm_start_multipliers=False, **fixed)
    xs0, us0 = _from_guess(problem)

    def solve(k):
        c = time.process_time()
        r = solver.solve(xs0, us0, max_iter=k, tol=0.0)
        return dict(r.timings, qp=sum(r.qp_iterations), iterations=r.iterations, cpu=time.process_time() - c)

    t = time_iterations(solve, K, repeats)
    qp = t.solve_results[-1]["qp"] / max(K, 1)
    per = t.per_iteration_s()
    return {"per_iteration_s": per, "per_iteration_cpu_s": _cpu_per_iteration(t), "qp_iterations_per_iteration": qp,
            "per_qp_iteration_s": per / max(qp, 1), **_stage_split(t, "CSQP")}


_STAGES = ("derivatives", "backward", "forward", "cost")


def _stage_split(t, what: str) -> dict[str, Any]:
    """The per-iteration stage times of ``t`` and the stages among them that came out negative
    (:meth:`benchmarks.timing.IterationTiming.negative_stages`), which are reported on stderr: the
    wall-clock per-iteration figure of that measurement is then noise, the CPU-time one still holds."""
    negative = t.negative_stages(_STAGES)
    if negative:
        print(f"[constrained benchmark] warning: {what}'s per-iteration wall-clock difference is negative for "
              f"{', '.join(negative)} (the 0-iteration solves took longer than the {t.iterations}-iteration ones): "
              "its wall-clock ratios are noise in this run; the *_cpu ratios still hold, or rerun with more --repeats",
              file=sys.stderr)
    return {"per_iteration_stage_s": t.per_iteration_stage_s(_STAGES), "negative_stages": negative}


def time_alddp(problem, K: int, repeats: int) -> dict[str, Any]:
    """The augmented-Lagrangian DDP iteration (default settings, tolerance 0) from the same guess."""
    solver = ALDDP(problem, box=False, warm_start_multipliers=False)
    xs0, us0 = _from_guess(problem)

    def solve(k):
        c = time.process_time()
        r = solver.solve(xs0, us0, max_iter=k, tol=0.0)
        return dict(r.timings, iterations=r.iterations, cpu=time.process_time() - c)

    t = time_iterations(solve, K, repeats)
    return {"per_iteration_s": t.per_iteration_s(), "per_iteration_cpu_s": _cpu_per_iteration(t),
            **_stage_split(t, "ALDDP")}


def time_warm(problem, free_problem, K: int, repeats: int) -> dict[str, Any]:
    """The steady-state MPC iteration: ALDDP from its own converged solve (trajectory, multipliers
    and penalty warm), against FDDP from its converged solve of the problem without constraints."""
    al = ALDDP(problem, box=False)
    ra = al.solve(max_iter=500, tol=1e-8)
    fd = FDDP(free_problem, box=False, refresh_gains=False)
    rf = fd.solve(max_iter=500, tol=1e-8)

    def solve_al(k):
        c = time.process_time()
        al.solve(ra.xs, ra.us, max_iter=k, tol=0.0)
        return {"cpu": time.process_time() - c}

    ta = time_iterations(solve_al, K, repeats)
    tf = time_iterations(_with_cpu(lambda k: fd.solve(rf.xs, rf.us, max_iter=k, tol=0.0).iterations), K, repeats)
    out = {"alddp_per_iteration_cpu_s": _cpu_per_iteration(ta), "fddp_per_iteration_cpu_s": _cpu_per_iteration(tf)}
    out["ratio_cpu"] = out["alddp_per_iteration_cpu_s"] / out["fddp_per_iteration_cpu_s"]
    return out


def _cpu_per_iteration(t: IterationTiming) -> float:
    """(CPU time of a K-iteration solve − that of a 0-iteration solve) / K [s], medians over the
    calls: ``solve(k)`` returned its own ``time.process_time`` difference as ``"cpu"``."""
    def med(results):
        return median(r["cpu"] for r in results)
    return (med(t.solve_results) - med(t.setup_results)) / t.iterations


def _with_cpu(fn):
    """``fn(k)`` returning ``{"result": fn(k), "cpu": its CPU time [s]}``."""
    def timed(k):
        c = time.process_time()
        r = fn(k)
        return {"result": r, "cpu": time.process_time() - c}
    return timed


def time_unconstrained(problem, K: int, repeats: int) -> dict[str, Any]:
    """FDDP's iteration on ``problem`` (built with ``constrained=False``)."""
    solver = FDDP(problem, box=False, refresh_gains=False)
    xs0, us0 = _from_guess(problem)
    t = time_iterations(_with_cpu(lambda k: solver.solve(xs0, us0, max_iter=k, tol=0.0).iterations), K, repeats)
    return {"per_iteration_s": t.per_iteration_s(), "per_iteration_cpu_s": _cpu_per_iteration(t)}


def time_mim(problem, K: int, Q: int, repeats: int) -> dict[str, Any]:
    import crocoddyl  # noqa: F401  (before mim_solvers: its Boost library)
    import mim_solvers

    from solvers.crocoddyl_problem import build_crocoddyl_problem, to_pinocchio_states
    cp = build_crocoddyl_problem(problem)
    cp.nthreads = 1
    s = mim_solvers.SolverCSQP(cp)
    s.termination_tolerance, s.eps_abs, s.eps_rel, s.max_qp_iters = 0.0, 0.0, 0.0, Q
    xs0, us0 = _from_guess(problem)
    xs0, us0 = list(to_pinocchio_states(problem, xs0)), list(us0)

    def solve(k):
        s.solve(xs0, us0, k, False)
        return int(s.iter)

    t = time_iterations(_with_cpu(solve), K, repeats)
    per = t.per_iteration_s()
    return {"per_iteration_s": per, "per_iteration_cpu_s": _cpu_per_iteration(t), "qp_iterations_per_iteration": Q,
            "per_qp_iteration_s": per / Q, "iterations_done": t.solve_results[-1]["result"]}


def converged_counts(problem, tol: float) -> dict[str, Any]:
    """A solve of ours to KKT residuals <= tol from the default guess (default ADMM tolerances)."""
    r = CSQP(problem, box=False).solve(max_iter=200, tol=tol)
    return {"converged": r.converged, "iterations": r.iterations, "qp_iterations": int(sum(r.qp_iterations)),
            "total_s": r.timings["total"], "cost": r.cost}


def alddp_converged_counts(problem, tol: float) -> dict[str, Any]:
    """ALDDP's solve to KKT residuals <= tol from the default guess (default settings)."""
    c = time.process_time()
    r = ALDDP(problem, box=False).solve(max_iter=500, tol=tol)
    cpu = time.process_time() - c
    return {"converged": r.converged, "iterations": r.iterations, "total_s": r.timings["total"], "total_cpu_s": cpu,
            "cost": r.cost, "final_rho": r.rho}


def mim_converged_counts(problem, tol: float) -> dict[str, Any]:
    """mim-solvers' solve to its KKT measure <= tol from the same guess (its default ADMM settings)."""
    import crocoddyl  # noqa: F401
    import mim_solvers

    from solvers.crocoddyl_problem import build_crocoddyl_problem, to_pinocchio_states
    cp = build_crocoddyl_problem(problem)
    cp.nthreads = 1
    s = mim_solvers.SolverCSQP(cp)
    s.termination_tolerance = tol
    xs0, us0 = _from_guess(problem)
    t0 = time.perf_counter()
    ok = s.solve(list(to_pinocchio_states(problem, xs0)), list(us0), 200, False)
    return {"converged": bool(ok), "iterations": int(s.iter), "total_s": time.perf_counter() - t0, "cost": s.cost,
            "kkt": s.KKT}


def _ratios(prefix: str, timed: dict[str, Any], anchors: dict[str, dict | None]) -> dict[str, float | None]:
    """``{prefix}ratio_vs_{anchor}`` (wall clock) and ``…_cpu`` (CPU time) of ``timed``'s
    per-iteration time to each anchor's (None where the anchor was not timed)."""
    out: dict[str, float | None] = {}
    for name, anchor in anchors.items():
        for suffix, key in (("", "per_iteration_s"), ("_cpu", "per_iteration_cpu_s")):
            out[f"{prefix}ratio_vs_{name}{suffix}"] = timed[key] / anchor[key] if anchor else None
    return out


def run(args) -> dict[str, Any]:
    K = 1 if args.quick else args.iterations
    Q = 5 if args.quick else args.qp_iterations
    repeats = 1 if args.quick else args.repeats
    have_mim = crocoddyl_importable(skip=args.no_mim)
    if have_mim:
        try:
            import mim_solvers  # noqa: F401
        except ImportError:
            have_mim = False
    t_start = time.perf_counter()
    entries = []
    for name in [s.strip() for s in args.problems.split(",") if s.strip()]:
        if name not in PROBLEMS:
            raise SystemExit(f"unknown problem '{name}'; choose from {', '.join(PROBLEMS)}")
        make, N = PROBLEMS[name]
        problem = make(N, backend=args.backend)
        print(f"[constrained benchmark] {name} N={N}", file=sys.stderr)
        CSQP(problem, box=False).warmup()
        ALDDP(problem, box=False).warmup()
        ours = time_ours(problem, K, Q, repeats)
        default = time_ours(problem, K, None, repeats)
        free = time_unconstrained(make(N, backend=args.backend, constrained=False), K, repeats)
        mim = time_mim(problem, K, Q, repeats) if have_mim else None
        al = time_alddp(problem, K, repeats)
        warm = time_warm(problem, make(N, backend=args.backend, constrained=False), K, repeats)
        entries.append({
            "problem": name, "horizon": N, "backend": args.backend, "csqp": ours, "fddp_unconstrained": free,
            "mim_csqp": mim, "csqp_default_admm": default,
            "ratio_vs_mim_csqp": ours["per_iteration_s"] / mim["per_iteration_s"] if mim else None,
            "ratio_vs_unconstrained": ours["per_iteration_s"] / free["per_iteration_s"],
            "ratio_vs_unconstrained_default_admm": default["per_iteration_s"] / free["per_iteration_s"],
            "ratio_vs_mim_csqp_cpu": ours["per_iteration_cpu_s"] / mim["per_iteration_cpu_s"] if mim else None,
            "ratio_vs_unconstrained_cpu": ours["per_iteration_cpu_s"] / free["per_iteration_cpu_s"],
            "ratio_vs_unconstrained_default_admm_cpu": default["per_iteration_cpu_s"] / free["per_iteration_cpu_s"],
            "converged_solve_tol_1e-6": None if args.quick else converged_counts(problem, 1e-6),
            "mim_converged_solve_tol_1e-6": None if args.quick or not have_mim else mim_converged_counts(problem, 1e-6),
            "alddp": al, **_ratios("alddp_", al, {"mim_csqp": mim, "unconstrained": free, "csqp": ours}),
            "alddp_warm": warm,
            "alddp_converged_solve_tol_1e-6": None if args.quick else alddp_converged_counts(problem, 1e-6)})
    return {"benchmark": "constrained", "sqp_iterations_per_timed_solve": K, "qp_iterations_per_sqp_iteration": Q,
            "repeats": repeats, "mim_solvers_available": have_mim, "results": entries, "machine": machine_info(),
            "wall_s": time.perf_counter() - t_start}


def _mim_ms(e: dict[str, Any]) -> float:
    return 1e3 * e["mim_csqp"]["per_iteration_s"] if e["mim_csqp"] else float("nan")


format_table = TextTable((
    Column("problem", "<10", lambda e: e["problem"]), Column("N", ">3", lambda e: e["horizon"]),
    Column("csqp ms/it", "11.2f", lambda e: 1e3 * e["csqp"]["per_iteration_s"]), Column("mim ms/it", "10.2f", _mim_ms),
    Column("fddp ms/it", "11.2f", lambda e: 1e3 * e["fddp_unconstrained"]["per_iteration_s"]),
    Column("vs mim", "7.2f", lambda e: e["ratio_vs_mim_csqp"] or float("nan")),
    Column("vs fddp", "8.2f", lambda e: e["ratio_vs_unconstrained"]),
    Column("admm/it dflt", "12.1f", lambda e: e["csqp_default_admm"]["qp_iterations_per_iteration"]),
    Column("vs fddp dflt", "12.2f", lambda e: e["ratio_vs_unconstrained_default_admm"]),
    Column("cpu: vs mim", "11.2f", lambda e: e["ratio_vs_mim_csqp_cpu"] or float("nan")),
    Column("vs fddp", "8.2f", lambda e: e["ratio_vs_unconstrained_cpu"]),
    Column("vs fddp dflt", "12.2f", lambda e: e["ratio_vs_unconstrained_default_admm_cpu"]),
    Column("al ms/it", "9.2f", lambda e: 1e3 * e["alddp"]["per_iteration_s"]),
    Column("al cpu: vs mim", "14.2f", lambda e: e["alddp_ratio_vs_mim_csqp_cpu"] or float("nan")),
    Column("vs fddp", "8.2f", lambda e: e["alddp_ratio_vs_unconstrained_cpu"]),
    Column("warm vs fddp", "12.2f", lambda e: e["alddp_warm"]["ratio_cpu"])))


if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
