"""The Python of a warm MPC update: the time an update spends outside its stage clocks (derivatives,
backward, forward, cost), measured in four settings in the same run, to separate what the Python
itself costs from what the compiled code and the simulator around it cost the Python.

* ``closed_loop``: the task's lockstep closed loop in MuJoCo, as ``mpc_rate.py`` runs it: per update,
  its wall time minus its stage times (medians over the loop's updates). This is the figure of the
  README's speed table and of issue #28's item 1 (at most 30 µs per update on the 2-core VM).
* ``alone``: ``--updates`` updates back to back with the compiled first-iteration call
  (:mod:`solvers.iteration_numba`) replaced by a stand-in that computes nothing and reports the
  full step taken, the usual course of a warm update: every line of Python runs as in the loop,
  with the interpreter's caches warm. The stand-in makes every update re-plan from the same
  iterate, so the plans stay finite.
* ``after_compiled_call``: as ``alone``, each update preceded (untimed) by the real compiled call
  on the controller's own buffers: what the compiled call's footprint (its code and data evicting
  the interpreter's) costs the Python that follows it.
* ``after_sweep``: as ``alone``, each update preceded by a pass over ``--sweep-mb`` MiB of memory:
  the cost of data eviction alone, for comparison.

Each setting runs ``--repeats`` times; the JSON has every run's median and their median. The anchor
is the closed loop's median update latency, timed in the same run (``ratio_other_vs_update``).
Needs a solver and backend that take the compiled first-iteration call (``ilqr`` or ``ddp`` on
``numba``, a robot without free or ball joints, no hard constraints: the iiwa).

    python benchmarks/update_overhead.py --table
    python benchmarks/update_overhead.py --solver ddp --horizon 32 --repeats 5 --table
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

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()
import tasks  # noqa: E402
from benchmarks import mpc_rate  # noqa: E402
from benchmarks.machine import load_average, machine_info  # noqa: E402
from benchmarks.output import Column, TextTable, add_output_arguments, run_and_emit  # noqa: E402
from mpc import MPC  # noqa: E402

TARGET_US = 30.0    # issue #28, item 1: Python per warm update
STAGES = ("derivatives", "backward", "forward", "cost")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="iiwa-reach", help="registered task (default iiwa-reach)")
    ap.add_argument("--solver", default="ilqr", choices=("ilqr", "ddp"), help="MPC solver (default ilqr)")
    ap.add_argument("--backend", default="numba", help="dynamics backend (default numba, the one with the "
                                                      "compiled call)")
    ap.add_argument("--horizon", type=int, default=16, help="knots N (default 16)")
    ap.add_argument("--dt", type=float, default=0.01, help="knot spacing and update period [s] (default 0.01)")
    ap.add_argument("--duration", type=float, default=2.0, help="simulated seconds of each closed loop (default 2)")
    ap.add_argument("--updates", type=int, default=3000, help="timed updates of each stand-in run (default 3000)")
    ap.add_argument("--sweep-mb", type=float, default=4.0, help="memory swept before each update of "
                                                               "after_sweep [MiB] (default 4)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each setting (default 3)")
    add_output_arguments(ap)
    return ap


def _stand_in(ctrl: MPC):
    """``(real, install, remove)``: the solver's bound compiled first-iteration call, and functions that
    put the stand-in in its place and the real call back. SystemExit where the solver has none."""
    from solvers.iteration_numba import ACCEPTED
    prep = getattr(ctrl.solver, "_prepared", None)
    first = getattr(prep, "_first", None)
    if not first:
        raise SystemExit(f"update_overhead: the {ctrl.solver_name} solver on the {ctrl.backend.name} backend makes "
                         f"no compiled first-iteration call to stand in for (use --solver ilqr or ddp on numba, "
                         f"a robot without free or ball joints)")
    real = first[0]
    standin = (lambda *args: (ACCEPTED, 0, -1),) + tuple(first[1:])

    def install() -> None:
        prep._first = standin

    def remove() -> None:
        prep._first = first
    return real, install, remove


def closed_loop(task, args) -> dict[str, float]:
    """Median update latency and time outside the stage clocks [s] of one lockstep closed loop
    (``mpc_rate.py``'s run: the runner's wall time around each ``update`` minus its stage times)."""
    r = mpc_rate.closed_loop(task, args.backend, args.solver, args.horizon, args.dt, args.duration)
    return {"update_s": r["update_latency_ms"]["median"] * 1e-3, "other_s": r["stage_ms"]["other"] * 1e-3}


def started(task, args) -> tuple[MPC, float, np.ndarray]:
    """A controller past its first 50 updates (structures built, caches filled), its time and state."""
    ctrl = MPC(task, solver=args.solver, backend=args.backend, horizon=args.horizon, dt=args.dt)
    ctrl.warmup()
    t = 0.0
    plan = ctrl.start(t, task.initial_state())
    for _ in range(50):
        t += args.dt
        plan = ctrl.update(t, plan.xs[1].copy())
    return ctrl, t, plan.xs[1].copy()


def stand_in_runs(ctrl: MPC, t: float, x: np.ndarray, args) -> dict[str, list[float]]:
    """Per setting, each run's median time outside the stage clocks [s] over ``args.updates`` updates."""
    real, install, remove = _stand_in(ctrl)
    sweep = np.zeros(max(1, int(args.sweep_mb * 2 ** 20 / 8)))
    xs_w, us_w = ctrl._warm
    before = {"alone": None, "after_compiled_call": lambda: real(ctrl.problem.x0, xs_w, us_w),
              "after_sweep": lambda: np.add(sweep, 1.0, out=sweep)}
    out: dict[str, list[float]] = {k: [] for k in before}
    for _ in range(args.repeats):
        for name, between in before.items():
            samples = np.empty(args.updates)
            install()
            for i in range(args.updates):
                if between is not None:
                    between()       # (the real call by itself: the stand-in stays in the solver)
                t += args.dt
                w = time.perf_counter()         # around the update, as the closed loop's runner times it
                ctrl.update(t, x)
                w = time.perf_counter() - w
                samples[i] = w - sum(ctrl.records[-1].timings[k] for k in STAGES)
            remove()
            del ctrl.records[:]
            out[name].append(float(np.median(samples)))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.horizon < 1 or args.dt <= 0 or args.updates < 1 or args.repeats < 1 or args.duration <= 0:
        raise SystemExit("--horizon, --updates, --repeats must be >= 1 and --dt, --duration > 0")
    load0 = load_average()
    task = tasks.get_task(args.task)
    ctrl, t, x = started(task, args)
    _stand_in(ctrl)         # (refused before the closed loops run)
    loops = [closed_loop(task, args) for _ in range(args.repeats)]
    stand_in = stand_in_runs(ctrl, t, x, args)
    settings = {"closed_loop": [r["other_s"] for r in loops], **stand_in}
    update_s = float(np.median([r["update_s"] for r in loops]))
    rows = []
    for name, runs in settings.items():
        med = float(np.median(runs))
        rows.append({"setting": name, "other_s": med, "runs_s": runs, "ratio_other_vs_update": med / update_s,
                     "within_target": bool(med * 1e6 <= TARGET_US)})
    return {"benchmark": "update_overhead", "task": args.task, "solver": args.solver, "backend": args.backend,
            "horizon": args.horizon,
            "dt": args.dt, "anchor": "median closed-loop update latency, same run", "update_s": update_s,
            "target_us": TARGET_US, "results": rows, "machine": machine_info(load0)}


format_table = TextTable((
    Column("setting", "<20", lambda r: r["setting"]),
    Column("other us", "9.1f", lambda r: r["other_s"] * 1e6),
    Column("runs us", "<22", lambda r: " ".join(f"{v * 1e6:.1f}" for v in r["runs_s"])),
    Column("other/update", "13.3f", lambda r: r["ratio_other_vs_update"])))


if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
