"""Closed-loop MPC benchmark: control-loop rate and per-stage time of a task's closed loop for each
horizon N and each dynamics backend, with Crocoddyl's warm-started FDDP iteration on the same
problem as the anchor, timed in the same run when ``crocoddyl`` is importable. Any registered task:
the iiwa reaching demo (default), the legged ones (``--task hyq-stand``, ``hyq-trot``,
``atlas-balance`` once registered, or ``quadruped-stand --task-arg robot=...``).

For every (backend, N): the task runs in closed loop in MuJoCo (lockstep mode, an update every
knot of ``--dt``, ``--solver`` with one iteration per update) for ``--duration`` simulated
seconds. Reported: ``control_loop_hz`` (updates per wall-clock second of the loop, physics
included), ``real_time_factor``, ``max_update_rate_hz`` (1 / median update latency), median / p95
latency, the per-stage split (derivatives / backward / forward / cost / other, medians from the run
summary), and the task's own success criteria (iiwa: end-effector error and time to reach; legged:
no fall, trunk tracking, foot slip). Slow backends (numpy, fpga-sim on legged tasks) run only at
the smallest horizon (``--small-horizon-backends``).

Anchor (``crocoddyl`` key per N): a ``crocoddyl.SolverFDDP`` iteration on the same problem
(``solvers.crocoddyl_problem.build_crocoddyl_problem``: same MJCF, costs term by term, weights,
symplectic Euler, contact knots as ``DifferentialActionModelContactFwdDynamics``; joint damping
off on both sides because Crocoddyl's forward dynamics has none), warm-started from a converged
solution shifted by one knot — one MPC update's worth of work, on one thread — and Crocoddyl's
``problem.calcDiff`` on that trajectory (its derivative stage). Our own warm-started iteration and
our derivative stage (``problem.derivatives``) on the identical problem and trajectory are timed
next to them. Ratios (below 1: we are faster): ``ratio_update_vs_crocoddyl_iteration`` (median
closed-loop update latency / Crocoddyl's iteration), ``ratio_iteration_vs_crocoddyl_iteration``,
``ratio_derivatives_vs_crocoddyl_calcdiff``. A task whose costs have no Crocoddyl counterpart gets
``crocoddyl: {"unavailable": reason}``.

    python benchmarks/mpc_rate.py --table                                    # iiwa-reach
    python benchmarks/mpc_rate.py --task hyq-stand --table                   # legged: FDDP, N = 16, 40, 64
    python benchmarks/mpc_rate.py --task hyq-stand --horizons 40 --backends numba --repeats 3
    python benchmarks/mpc_rate.py --quick                                    # smoke run: N = 16, 0.3 s
    python benchmarks/mpc_rate.py --horizons 32 --solver ilqr --duration 2 --busy 1 --loop-repeats 3 --no-crocoddyl

Contention (``--busy K``): every closed loop also runs with K single-threaded busy processes beside
it (:mod:`benchmarks.contention`; ended afterwards, also on Ctrl-C or an error), alternating quiet
and busy runs ``--loop-repeats`` times. Each entry then has ``busy``: the median loop rate and
update latency of the busy runs, every run's rate (``runs_hz``, quiet and busy), and
``ratio_quiet_vs_busy_hz`` (quiet median rate / busy median rate: the factor lost to the
neighbours; the issue's target is <= 2 with one busy process on a 2-core machine). The numba
backend's worker-thread policy in force (``MPC_ACCEL_THREADS``, docs/backends.md) is in
``machine.threads.thread_policy``.

Output: JSON on stdout (``--table`` adds a text table on stderr). Speed is only meaningful as a
ratio to the anchor measured in the same run (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
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
from benchmarks.contention import add_busy_arguments, busy_neighbours  # noqa: E402
from dynamics.worker_threads import adaptive_choices  # noqa: E402
from benchmarks.machine import machine_info  # noqa: E402
from benchmarks.output import add_output_arguments, run_and_emit  # noqa: E402
from benchmarks.timing import measure  # noqa: E402
from tasks.legged import with_penalty_cones  # noqa: E402
from mpc import MPC  # noqa: E402
from sim import report  # noqa: E402
from sim.runner import simulate  # noqa: E402

LEGGED_RT_TARGET = {"hyq": 1.0, "quadruped": 1.0, "atlas": 0.5, "humanoid": 0.5}  # issue #12, x real time
# issue #13, fixed-base tasks: the MPC update (median closed-loop update latency) at most this many
# Crocoddyl FDDP iterations on the same problem, timed in the same run; and the iLQR closed loop at N = 32
UPDATE_RATIO_TARGET = {"ilqr": 1.0, "ddp": 2.0}
LOOP_HZ_TARGET = {("ilqr", 32): 1000.0}
LEGGED_MIN_HORIZON_S = 0.4


def _task_arg(text: str) -> tuple[str, Any]:
    key, sep, val = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--task-arg takes key=value, got '{text}'")
    try:
        value: Any = json.loads(val)
    except json.JSONDecodeError:
        value = val
    return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--task", default="iiwa-reach", help="registered task name or module:Class (default iiwa-reach)")
    ap.add_argument("--task-arg", type=_task_arg, action="append", default=[], metavar="KEY=VALUE",
                    help="task constructor argument (JSON value or string), repeatable, e.g. robot=atlas")
    ap.add_argument("--horizons", default=None,
                    help="comma-separated horizons N (default 16,32,64; floating-base tasks 16,40,64)")
    ap.add_argument("--backends", default=None,
                    help="comma-separated dynamics backends (default: every available one)")
    ap.add_argument("--small-horizon-backends", default=None,
                    help="backends run only at the smallest horizon (default: none for fixed-base tasks, "
                         "numpy,fpga-sim for floating-base ones: minutes per closed loop otherwise)")
    ap.add_argument("--solver", default=None, choices=("ilqr", "ddp", "fddp"),
                    help="MPC solver (default ddp; fddp for floating-base tasks, Crocoddyl's solver, since DDP's "
                         "second-order term on contact knots is central differences)")
    ap.add_argument("--dt", type=float, default=0.01, help="knot spacing [s] (default 0.01)")
    ap.add_argument("--duration", type=float, default=None,
                    help="simulated seconds per closed-loop run (default 4.0 for iiwa-reach: its first two targets; "
                         "1.0 otherwise)")
    ap.add_argument("--threads", type=int, default=None,
                    help="worker threads of backends that have them (numba); default: the backend's own. Crocoddyl "
                         "runs on 1; on a shared 2-core machine 1 thread is usually faster (a parallel region waits "
                         "for every thread)")
    add_busy_arguments(ap)
    ap.add_argument("--loop-repeats", type=int, default=1, metavar="R",
                    help="closed-loop runs per (backend, N) (quiet and, with --busy, busy, alternating); the entry "
                         "reports medians (default 1)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of the Crocoddyl / single-iteration timings")
    ap.add_argument("--no-crocoddyl", action="store_true", help="skip the Crocoddyl anchor even if importable")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 16, 0.3 s, numpy only, 1 repeat")
    add_output_arguments(ap)
    return ap


def _criteria(ev: dict) -> list[dict[str, Any]]:
    return [{k: c[k] for k in ("name", "value", "unit", "passed")} for c in ev.get("criteria", [])]


def closed_loop(task, backend: str, solver: str, N: int, dt: float, duration: float) -> dict[str, Any]:
    """One lockstep closed-loop run; the summary fields the benchmark reports (iiwa-reach adds its
    end-effector error and times to reach)."""
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
    out = {"control_loop_hz": tm["control_loop_hz"], "max_update_rate_hz": 1e3 / med if med else None,
           "update_latency_ms": tm["update_latency_ms"], "stage_ms": tm["stage_ms"],
           "stage_fraction": tm["stage_fraction"], "updates": tm["updates"], "real_time_factor": tm["real_time_factor"],
           "warmup_s": warm, "initial_solve_s": tm["initial_solve_s"], "completed": s["completed"],
           "success": ev.get("success"), "criteria": _criteria(ev),
           "torque_violation_steps": s["constraints"]["torque_limit"]["violation_steps"]}
    if "ee_error" in (s.get("tracking") or {}):          # iiwa-reach: the fields of its README table
        crit = {c["name"]: c for c in ev.get("criteria", [])}
        covered = [t for t in (ev.get("details") or {}).get("targets", []) if t["t_start_s"] is not None]
        out.update({"mean_ee_error_m": s["tracking"]["ee_error"]["mean"],
                    "time_to_reach_s": [t["time_to_reach_s"] for t in covered],
                    "targets_reached": [bool(crit[f"target {t['index']} time to reach"]["passed"]) for t in covered],
                    "torque_violation_Nm": crit.get("torque limit", {}).get("value")})
    return out


def _median(values: list[float]) -> float | None:
    v = sorted(x for x in values if x is not None)
    return None if not v else (v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2]))


def closed_loops(task, backend: str, solver: str, N: int, dt: float, duration: float, busy: int,
                 loop_repeats: int, same_session: bool = False) -> dict[str, Any]:
    """:func:`closed_loop` ``loop_repeats`` times quiet and, when ``busy`` > 0, as often beside
    ``busy`` busy processes (alternating): the quiet run closest to the median rate as the entry,
    with ``busy`` (the busy runs' medians) and every run's rate."""
    quiet: list[dict[str, Any]] = []
    loaded: list[dict[str, Any]] = []

    def run_one(into: list[dict[str, Any]]) -> None:
        before = adaptive_choices()
        r = closed_loop(task, backend, solver, N, dt, duration)
        after = adaptive_choices()
        r["threads_chosen"] = {str(k): after[k] - before.get(k, 0) for k in sorted(after)
                               if after[k] - before.get(k, 0)}
        into.append(r)

    for _ in range(loop_repeats):
        run_one(quiet)
        if busy:
            with busy_neighbours(busy, same_session=same_session):
                run_one(loaded)
    q_hz = [r["control_loop_hz"] for r in quiet]
    med = _median(q_hz)
    e = dict(min(quiet, key=lambda r: abs((r["control_loop_hz"] or 0) - (med or 0))))
    e["control_loop_hz_median"] = med
    e["runs_hz"] = {"quiet": q_hz}
    # the numba backend's adaptive policy: how many of its load readings chose each thread count, per run
    e["runs_threads_chosen"] = {"quiet": [r["threads_chosen"] for r in quiet]}
    if busy:
        b_hz = [r["control_loop_hz"] for r in loaded]
        b_med = _median(b_hz)
        e["runs_hz"]["busy"] = b_hz
        e["runs_threads_chosen"]["busy"] = [r["threads_chosen"] for r in loaded]
        e["busy"] = {"processes": busy, "same_session": same_session, "control_loop_hz": b_med,
                     "update_latency_ms_median": _median([r["update_latency_ms"]["median"] for r in loaded]),
                     "update_latency_ms_p95": _median([r["update_latency_ms"]["p95"] for r in loaded]),
                     "real_time_factor": _median([r["real_time_factor"] for r in loaded]),
                     "ratio_quiet_vs_busy_hz": med / b_med if med and b_med else None}
    return e


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


def time_ours(task, N: int, dt: float, backend: str, solver: str, repeats: int) -> dict[str, float]:
    """Our warm-started iteration and derivative stage on the anchor's problem and trajectory [s]."""
    from solvers import SOLVERS
    problem, xs, us = warm_start_problem(task, N, dt, backend)
    # one iteration as Crocoddyl's solve(maxiter=1) does it: derivatives, backward pass, forward
    # pass; no re-linearisation at the accepted trajectory (refresh_gains=False)
    s = SOLVERS[solver](problem, refresh_gains=False)
    s.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0)    # compiled kernels loaded outside the timing
    it = measure(lambda: s.solve(xs_init=xs, us_init=us, max_iter=1, tol=0.0), repeats=repeats, min_time=0.0)
    data = problem.create_data(second_order=False)
    der = measure(lambda: problem.derivatives(xs, us, second_order=False, data=data), repeats=repeats, min_time=0.02)
    return {"iteration_s": it.seconds, "derivatives_s": der.seconds}


def time_crocoddyl_iteration(task, N: int, dt: float, repeats: int) -> dict[str, Any]:
    from solvers.crocoddyl_problem import to_crocoddyl_controls, to_pinocchio_states
    problem, xs, us = warm_start_problem(task, N, dt, "numpy" if task.model.nv <= 7 else "numba")
    try:
        croc = CrocoddylFDDP(problem, threads=1)     # one thread, like our solvers
    except NotImplementedError as e:
        return {"unavailable": f"no Crocoddyl counterpart of this problem: {e}"}
    xs_l, us_l = list(to_pinocchio_states(problem, xs)), to_crocoddyl_controls(problem, us)
    t = croc.time_iterations(xs_l, us_l, 1, repeats)
    croc.problem.calc(xs_l, us_l)
    td = measure(lambda: croc.problem.calcDiff(xs_l, us_l), repeats=repeats, min_time=0.02)
    return {"iteration_s": t.solve.seconds, "solve_0_iterations_s": t.setup.seconds, "calcdiff_s": td.seconds,
            **croc.describe(),
            "note": "solve(warm start, maxiter=1): calc + backward + forward of one iteration, as one MPC update; "
                    "calcdiff_s: problem.calcDiff on the same trajectory (the derivative stage)"}


def _legged_target(task, N: int, dt: float) -> float | None:
    """Real-time factor the issue asks of this legged task at this horizon (None: no target)."""
    if not task.model.has_floating_base or N * dt < LEGGED_MIN_HORIZON_S - 1e-9:
        return None
    name = f"{getattr(task, 'name', '')} {getattr(task, 'robot', '')}"
    hits = [v for k, v in LEGGED_RT_TARGET.items() if k in name]
    return min(hits) if hits else None


def _update_targets(e: dict[str, Any], solver: str, N: int) -> None:
    """Add ``targets``: the update-vs-Crocoddyl ratio and closed-loop rate the issue asks of this
    solver and horizon, each with its value, pass/miss and, for a miss, the largest stage of the
    median update (what holds it back) and its share."""
    out = []
    stages = {k: v for k, v in (e.get("stage_ms") or {}).items() if v is not None}
    total = sum(stages.values()) or None
    worst = max(stages, key=stages.get) if stages else None
    held = {"stage": worst, "ms": stages.get(worst), "fraction": stages[worst] / total if total else None} \
        if worst else None
    limit = UPDATE_RATIO_TARGET.get(solver)
    ratio = e.get("ratio_update_vs_crocoddyl_iteration")
    if limit is not None and ratio is not None:
        ok = ratio <= limit
        out.append({"target": f"MPC update <= {limit:g}x one Crocoddyl FDDP iteration", "value": ratio, "limit": limit,
                     "result": "pass" if ok else "miss", **({} if ok else {"held_back_by": held})})
    hz = LOOP_HZ_TARGET.get((solver, N))
    if hz is not None and e.get("control_loop_hz") is not None:
        ok = e["control_loop_hz"] >= hz
        out.append({"target": f"closed loop >= {hz:g} Hz (lockstep wall time)", "value": e["control_loop_hz"],
                    "limit": hz, "result": "pass" if ok else "miss", **({} if ok else {"held_back_by": held})})
    if out:
        e["targets"] = out


def run(args) -> dict[str, Any]:
    if args.busy < 0 or args.loop_repeats < 1:
        raise SystemExit(f"--busy must be >= 0 and --loop-repeats >= 1, got {args.busy} and {args.loop_repeats}")
    # the legged cases time FDDP against Crocoddyl's FDDP on the penalty problem (the cones as
    # costs), not the tasks' default hard cones: cones=penalty unless asked otherwise
    task_args = with_penalty_cones(tasks.resolve_task(args.task), dict(args.task_arg))
    task = tasks.get_task(args.task, **task_args)
    legged = bool(task.model.has_floating_base)
    solver = args.solver or ("fddp" if legged else "ddp")
    default_h = "16,40,64" if legged else "16,32,64"
    horizons = [16] if args.quick else [int(n) for n in (args.horizons or default_h).split(",")]
    duration = 0.3 if args.quick else (args.duration if args.duration is not None
                                        else (4.0 if args.task == "iiwa-reach" else 1.0))
    repeats = 1 if args.quick else args.repeats
    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    else:
        backends = ["numpy"] if args.quick else [k for k, (ok, _) in dynamics.available_backends().items() if ok]
    if args.threads is not None:
        for be in backends:
            b = dynamics.get_backend(be)
            if hasattr(b, "set_threads"):
                b.set_threads(args.threads)
    skipped: dict[str, str] = {}
    if legged and not args.backends and "fpga-sim" in backends:
        backends.remove("fpga-sim")
        skipped["fpga-sim"] = ("runs contact dynamics (generic path, fixed-point emulation in Python) but far too slowly "
                               "for a closed loop (one 0.3 s hyq-stand run did not finish in 8 min); "
                               "ask for it with --backends fpga-sim")
    small = ([b.strip() for b in args.small_horizon_backends.split(",") if b.strip()]
             if args.small_horizon_backends is not None else (["numpy", "fpga-sim"] if legged else []))
    have_croc = crocoddyl_importable(skip=args.no_crocoddyl)
    entries = []
    t_start = time.perf_counter()
    for N in horizons:
        croc = None
        if have_croc:
            print(f"[mpc_rate] {task.name} N={N} crocoddyl anchor", file=sys.stderr)
            croc = time_crocoddyl_iteration(task, N, args.dt, repeats)
        for be in backends:
            if be in small and N != min(horizons):
                continue
            print(f"[mpc_rate] {task.name} N={N} {be}: closed loop, {duration:g} s", file=sys.stderr)
            try:
                e = {"horizon": N, "backend": be, "solver": solver,
                     **closed_loops(task, be, solver, N, args.dt, duration, args.busy, args.loop_repeats,
                                   args.busy_same_session)}
            except Exception as err:  # noqa: BLE001 — one backend failing (e.g. unsupported) must not end the run
                entries.append({"horizon": N, "backend": be, "solver": solver,
                                "error": f"{type(err).__name__}: {err}"})
                continue
            ours = time_ours(task, N, args.dt, be, solver, repeats)
            e["ours_iteration_s"] = ours["iteration_s"]
            e["ours_derivatives_s"] = ours["derivatives_s"]
            if croc is not None:
                e["crocoddyl"] = croc
                if "iteration_s" in croc:
                    med = e["update_latency_ms"]["median"]
                    e["ratio_update_vs_crocoddyl_iteration"] = med * 1e-3 / croc["iteration_s"] if med else None
                    e["ratio_iteration_vs_crocoddyl_iteration"] = e["ours_iteration_s"] / croc["iteration_s"]
                    e["ratio_derivatives_vs_crocoddyl_calcdiff"] = e["ours_derivatives_s"] / croc["calcdiff_s"]
            if not legged:
                _update_targets(e, solver, N)
            rt = _legged_target(task, N, args.dt)
            if rt is not None:
                got = e["real_time_factor"]
                e["real_time_target"] = {"min_real_time_factor": rt, "horizon_s": N * args.dt,
                                         "update_every_s": args.dt, "value": got,
                                         "result": "pass" if got is not None and got >= rt else "miss",
                                         "held_back_by": max(e["stage_ms"], key=lambda k: e["stage_ms"][k] or 0)}
            entries.append(e)
    return {"benchmark": "mpc_rate",
            "setup": {"task": task.name, "task_args": task_args, "solver": solver, "dt": args.dt,
                      "threads": args.threads, "busy_processes": args.busy,
                      "busy_same_session": args.busy_same_session, "loop_repeats": args.loop_repeats,
                      "duration_s": duration, "mode": "lockstep", "iterations_per_update": 1,
                      "physics_dt": float(task.model.mj_model.opt.timestep), "horizons": horizons,
                      "small_horizon_backends": small},
            "crocoddyl_available": have_croc, "results": entries, "skipped_backends": skipped, "machine": machine_info(),
            "wall_s": time.perf_counter() - t_start}


def format_table(result: dict[str, Any]) -> str:
    lines = [f"{'N':>4} {'backend':<8} {'loop Hz':>8} {'RTF':>5} {'med ms':>7} {'p95 ms':>7} {'deriv':>6} "
             f"{'bwd':>6} {'fwd':>6} {'cost':>6} {'ok':>3} {'croc it ms':>10} {'upd/croc':>8} {'der/croc':>8} targets"]
    for e in result["results"]:
        if "error" in e:
            lines.append(f"{e['horizon']:>4} {e['backend']:<8} error: {e['error'][:80]}")
            continue
        st = e["stage_ms"]
        lat = e["update_latency_ms"]
        croc = e.get("crocoddyl") or {}
        nan = float("nan")
        lines.append(
            f"{e['horizon']:>4} {e['backend']:<8} {e['control_loop_hz'] or 0:8.1f} {e['real_time_factor'] or 0:5.2f} "
            f"{lat['median'] or 0:7.1f} {lat['p95'] or 0:7.1f} {st.get('derivatives', 0):6.1f} "
            f"{st.get('backward', 0):6.1f} {st.get('forward', 0):6.1f} {st.get('cost', 0):6.1f} "
            f"{'yes' if e.get('success') else 'no':>3} "
            f"{(1e3 * croc['iteration_s']) if 'iteration_s' in croc else nan:10.2f} "
            f"{e.get('ratio_update_vs_crocoddyl_iteration') or nan:8.2f} "
            f"{e.get('ratio_derivatives_vs_crocoddyl_calcdiff') or nan:8.2f} "
            f"{' '.join(t['result'] for t in e.get('targets', [])) or '-'}")
        b = e.get("busy")
        if b:
            lines.append(f"{'':>4} {'':<8} beside {b['processes']} busy process(es): {b['control_loop_hz'] or 0:.1f} Hz, "
                         f"median update {b['update_latency_ms_median'] or 0:.2f} ms; quiet median "
                         f"{e['control_loop_hz_median'] or 0:.1f} Hz = {b['ratio_quiet_vs_busy_hz'] or nan:.2f}x busy "
                         f"(runs: quiet {e['runs_hz']['quiet']}, busy {e['runs_hz']['busy']})")
    return "\n".join(lines)


if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
