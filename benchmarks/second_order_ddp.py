"""DDP with analytical vs numerical second-order dynamics tensors: time per DDP iteration and of the
derivative stage, for each provider of ``∂²a`` (``ShootingProblem(second_order=...)``):

* ``analytical`` — the backend's ``aba_second_derivatives`` (FDSVA-SO, Singh, Russell & Wensing 2022 eq. 46), one
  batched call over the N knots;
* ``fd`` — ``dynamics.second_order_numerical`` with central differences of the analytical
  first-order derivatives (Singh, Russell & Wensing 2022's "Finite-Diff-2"), also one batched call;
* ``complex`` — the same with complex step (numpy backend only).

Problems: the iiwa reaching task (``tasks.get_task("iiwa-reach")``, default options) for horizons
N ∈ {16, 32, 64}, and a free-base HyQ problem without contacts (state regularisation towards
"standing" + CoM height + small control cost; it falls, but the tensors are what is timed) for
N ∈ {16}. Every provider runs on the same problem from the same initial guess (gravity
compensation rolled out from x0), so the iterates agree (``tests/solvers/test_ddp_second_order_provider.py``)
and the runs differ only in the tensor provider; ``agreement`` in each entry records the relative
difference of the final cost to the analytical run as a check.

Measurements (``benchmarks/timing.py``, median of ``--repeats``):

* ``per_iteration_s`` = (time of a K-iteration DDP solve − time of a 0-iteration solve) / K, as in
  ``benchmarks/solvers.py`` (the 0-iteration solve — initial rollout, one derivative evaluation and
  backward pass — removes the set-up); ``per_iteration_stage_s`` splits it by the solver's stage
  timers (derivatives / backward / forward / cost). DDP runs with ``gauss_newton_fallback=False``
  (unless ``--gauss-newton-fallback``) so every backward pass contains ``V'_x · F2``;
* ``derivative_stage_s``: ``problem.derivatives(xs, us, second_order=True)`` at the initial guess
  (cost derivatives, ``Fx``, ``Fu`` and ``F2`` of all N knots); ``first_order_stage_s`` the same
  with ``second_order=False`` (what iLQR needs), so their difference is the second-order cost;
* ``tensor_s``: the ``∂²a`` tensors alone on the N knots (``backend.aba_second_derivatives_bracket``
  where the backend has it — what the Euler knots call, folding ``−M⁻¹`` into C — else
  ``backend.aba_second_derivatives``, or ``aba_second_derivatives_numerical``);
* ``second_order_assembly_s`` = derivative stage − first-order stage − tensors: the rest of the
  second-order work (assembling ``F2`` from ``∂²a``, the passive-force chain rule and, for
  ball/free joints, the SO(3)/SE(3) integration terms). It is a difference of medians, so it can
  be slightly negative when it is small and the machine is noisy.

Ratios ``analytical / fd`` and ``analytical / complex`` of each quantity (below 1: analytical is
faster) are computed from the same run. Output: JSON on stdout (``--table``: a text table on
stderr). Speed is never asserted in tests; see benchmarks/README.md for the environment.

The problems run on the numpy reference backend unless ``--backend`` names another (``numba``:
the compiled kernels; time them on one thread, ``NUMBA_NUM_THREADS=1``, to compare per-knot cost).

    python benchmarks/second_order_ddp.py                 # iiwa N = 16, 32, 64 and hyq N = 16
    python benchmarks/second_order_ddp.py --quick         # smoke run: iiwa N = 16, hyq N = 4, K = 2, 1 repeat
    NUMBA_NUM_THREADS=1 python benchmarks/second_order_ddp.py --backend numba --providers analytical
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
import tasks  # noqa: E402
from benchmarks.arguments import add_iteration_timing_arguments  # noqa: E402
from benchmarks.machine import load_average, machine_info  # noqa: E402
from benchmarks.output import Column, TextTable, add_output_arguments, run_and_emit  # noqa: E402
from benchmarks.problems import hyq_free_base  # noqa: E402
from benchmarks.timing import measure, time_iterations  # noqa: E402
from dynamics.second_order_numerical import aba_second_derivatives_numerical  # noqa: E402
from solvers import DDP, ShootingProblem  # noqa: E402

PROVIDERS = ("analytical", "fd", "complex")
ROBOTS = ("iiwa", "hyq")
STAGES = ("derivatives", "backward", "forward", "cost", "total")
RATIO_KEYS = ("per_iteration_s", "derivative_stage_s", "tensor_s")


def _int_list(name: str, text: str) -> list[int]:
    try:
        vals = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--{name}: expected comma-separated positive integers, got '{text}'") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"--{name}: expected comma-separated positive integers, got '{text}'")
    return vals


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--robots", default="iiwa,hyq", help="comma-separated: iiwa (reaching task), hyq (free base,\n"
                                                         "no contacts) (default both)")
    ap.add_argument("--horizons", default="16,32,64", help="iiwa horizons N (default 16,32,64)")
    ap.add_argument("--hyq-horizons", default="16", help="hyq horizons N (default 16; the numerical providers\n"
                                                         "cost ~0.3 s per derivative evaluation there)")
    ap.add_argument("--providers", default=",".join(PROVIDERS),
                    help="comma-separated second-order providers (default analytical,fd,complex)")
    ap.add_argument("--dt", type=float, default=0.02, help="knot spacing [s] (default 0.02)")
    ap.add_argument("--backend", default="numpy", help="dynamics backend of the problems (default numpy; the\n"
                                                       "complex provider needs numpy)")
    add_iteration_timing_arguments(ap, iterations=4, what="DDP iterations")
    ap.add_argument("--gauss-newton-fallback", action="store_true",
                    help="DDP's default fallback: a backward pass whose Q_uu the curvature makes indefinite is\n"
                         "redone without it (default here: off, so every pass uses the tensors; far from the\n"
                         "optimum, e.g. from the gravity-compensation guess, most passes would fall back)")
    ap.add_argument("--quick", action="store_true", help="smoke run: iiwa N = 16, hyq N = 4, K = 2, 1 repeat")
    add_output_arguments(ap)
    return ap


# ------------------------------------------------------------------------------------------ problems
def iiwa_problem(N: int, dt: float, second_order: str, backend: str = "numpy") -> ShootingProblem:
    """The iiwa reaching task's problem (default task options)."""
    task = tasks.get_task("iiwa-reach")
    return task.build_problem(task.initial_state(), N, dt, backend=backend, second_order=second_order)


PROBLEMS: dict[str, Callable[..., ShootingProblem]] = {"iiwa": iiwa_problem, "hyq": hyq_free_base}


# ------------------------------------------------------------------------------------------ timing
def tensor_call(problem: ShootingProblem, provider: str, xs: np.ndarray, us: np.ndarray) -> Callable[[], Any]:
    """The ``∂²a`` tensors alone at the N knots of (xs, us), as the given provider computes them (the
    analytical one: what DDP's Euler knots call, the bracketed terms where the backend has them)."""
    dyn = problem.dynamics
    q, v = problem.state.split(xs[:-1])
    tau = dyn.torques(q, v, us)
    if provider == "analytical":
        be = problem.backend
        fn = be.aba_second_derivatives_bracket if be.supports("aba_second_derivatives_bracket") \
            else be.aba_second_derivatives
        return lambda: fn(problem.model, q, v, tau)
    method = "central" if provider == "fd" else "complex"
    return lambda: aba_second_derivatives_numerical(problem.backend, problem.model, q, v, tau, method=method)


def time_provider(problem: ShootingProblem, provider: str, K: int, repeats: int,
                  gauss_newton_fallback: bool = False) -> dict[str, Any]:
    xs0, us0 = problem.initial_guess()
    solver = DDP(problem, refresh_gains=False, gauss_newton_fallback=gauss_newton_fallback)

    def solve(k: int):
        r = solver.solve(us_init=us0, max_iter=k, tol=0.0)
        return dict(r.timings, iterations=r.iterations, final_cost=r.cost, steps=r.step_sizes,
                    fallbacks=r.gauss_newton_fallbacks)

    t = time_iterations(solve, K, repeats)
    t_k, t_0 = t.solve, t.setup
    data = problem.create_data(second_order=True)
    t_d2 = measure(lambda: problem.derivatives(xs0, us0, second_order=True, data=data), repeats=repeats)
    t_d1 = measure(lambda: problem.derivatives(xs0, us0, second_order=False, data=data), repeats=repeats)
    t_t = measure(tensor_call(problem, provider, xs0, us0), repeats=repeats)
    last = t.solve_results[-1]
    return {"per_iteration_s": t.per_iteration_s(), "per_iteration_stage_s": t.per_iteration_stage_s(STAGES),
            "derivative_stage_s": t_d2.seconds, "first_order_stage_s": t_d1.seconds, "tensor_s": t_t.seconds,
            "second_order_assembly_s": t_d2.seconds - t_d1.seconds - t_t.seconds,
            "iterations": last["iterations"], "final_cost": last["final_cost"], "step_sizes": last["steps"],
            "gauss_newton_fallbacks": last["fallbacks"], "solve_s": t_k.seconds, "setup_s": t_0.seconds,
            "repeats": {"solve": t_k.repeats, "derivative_stage": t_d2.repeats, "tensor": t_t.repeats}}


def run(args) -> dict[str, Any]:
    robots = [r.strip() for r in args.robots.split(",") if r.strip()]
    for r in robots:
        if r not in ROBOTS:
            raise SystemExit(f"unknown robot '{r}'; choose from {', '.join(ROBOTS)}")
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    for p in providers:
        if p not in PROVIDERS:
            raise SystemExit(f"unknown provider '{p}'; choose from {', '.join(PROVIDERS)}")
    backends = dynamics.available_backends()
    if not backends.get(args.backend, (False,))[0]:
        raise SystemExit(f"unknown or unavailable backend '{args.backend}'; available: "
                         f"{', '.join(b for b, (ok, _) in backends.items() if ok)}")
    if "complex" in providers and args.backend != "numpy":
        raise SystemExit("the complex provider needs --backend numpy (complex-step inputs); "
                         "drop it from --providers or use --backend numpy")
    if not (np.isfinite(args.dt) and args.dt > 0):
        raise SystemExit(f"--dt must be a positive number of seconds, got {args.dt}")
    if args.iterations < 1 or args.repeats < 1:
        raise SystemExit("--iterations and --repeats must be >= 1")
    horizons = {"iiwa": [16] if args.quick else _int_list("horizons", args.horizons),
                "hyq": [4] if args.quick else _int_list("hyq-horizons", args.hyq_horizons)}
    K = 2 if args.quick else args.iterations
    repeats = 1 if args.quick else args.repeats
    load_start = load_average()
    t_start = time.perf_counter()
    entries = []
    for robot in robots:
        for N in horizons[robot]:
            group = {}
            for prov in providers:
                print(f"[second-order DDP benchmark] {robot} N={N} {prov}", file=sys.stderr)
                problem = PROBLEMS[robot](N, args.dt, prov, args.backend)
                e = {"robot": robot, "horizon": N, "provider": prov, **time_provider(problem, prov, K, repeats,
                                                                      args.gauss_newton_fallback)}
                group[prov] = e
                entries.append(e)
            ref = group.get("analytical")
            for prov, e in group.items():
                e["ratio_analytical_over_this"] = (
                    {k: ref[k] / e[k] for k in RATIO_KEYS} if ref is not None and prov != "analytical" else None)
                e["agreement"] = ({"final_cost_rel_diff_vs_analytical":
                                   abs(e["final_cost"] - ref["final_cost"]) / abs(ref["final_cost"]),
                                   "same_step_sizes": e["step_sizes"] == ref["step_sizes"]}
                                  if ref is not None else None)
    info = machine_info(load_start)
    return {"benchmark": "second_order_ddp",
            "problems": {"iiwa": "tasks iiwa-reach, default options", "hyq": "free base, no contacts, "
                         "state regularisation + CoM height + control cost, x0 5 cm above 'standing'"},
            "dt": args.dt, "integrator": "euler", "backend": args.backend, "initial_guess": "gravity compensation",
            "solver": {"class": "DDP", "refresh_gains": False, "gauss_newton_fallback": args.gauss_newton_fallback,
                       "tol": 0.0},
            "iterations_per_timed_solve": K, "repeats": repeats, "results": entries, "machine": info,
            "wall_s": time.perf_counter() - t_start}


def _ratio(key: str) -> Callable[[dict[str, Any]], float | None]:
    """The cell of ``ratio_analytical_over_this[key]`` (blank for the analytical run itself)."""
    return lambda e: e["ratio_analytical_over_this"][key] if e["ratio_analytical_over_this"] else None


format_table = TextTable((
    Column("robot", "<5", lambda e: e["robot"]), Column("N", ">3", lambda e: e["horizon"]),
    Column("provider", "<10", lambda e: e["provider"]), Column("ms/iter", "9.1f", lambda e: 1e3 * e["per_iteration_s"]),
    Column("deriv/iter", "10.1f", lambda e: 1e3 * e["per_iteration_stage_s"]["derivatives"]),
    Column("deriv stage", "11.1f", lambda e: 1e3 * e["derivative_stage_s"]),
    Column("1st-order", "9.1f", lambda e: 1e3 * e["first_order_stage_s"]),
    Column("tensors", "9.1f", lambda e: 1e3 * e["tensor_s"]),
    Column("assembly", "9.1f", lambda e: 1e3 * e["second_order_assembly_s"]),
    Column("an/this iter", "12.2f", _ratio("per_iteration_s")),
    Column("an/this deriv", "13.2f", _ratio("derivative_stage_s")), Column("an/this tens", "12.2f", _ratio("tensor_s"))))

if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
