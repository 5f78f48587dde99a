"""``mpc-accel``: run a receding-horizon controller on a task in MuJoCo and report how fast the
control loop runs and how well it tracks.

Subcommands: ``run`` (closed-loop simulation), ``tasks`` (list tasks), ``backends`` (list dynamics
backends and whether each is available here). Also callable as ``python -m mpc``.
Exit codes: 0 success; 1 the run aborted (instability or solver failure) or failed at runtime;
2 bad arguments; 3 the run completed but the task's success criteria were not met (with
``--strict``).
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
from pathlib import Path

EPILOG_MAIN = """\
examples:
  mpc-accel run iiwa-reach                         # the iiwa reaching demo, default settings
  mpc-accel run iiwa-reach --solver fddp --horizon 16 --mode realtime --out runs/iiwa --plot
  mpc-accel run my_module:MyTask                   # a task class you wrote (subclass of tasks.Task)
  mpc-accel run path/to/my_task.py:MyTask --duration 4
  mpc-accel tasks                                  # what can be run
  mpc-accel backends                               # which dynamics backends work on this machine

Run 'mpc-accel run --help' for every option of a run."""

EPILOG_RUN = """\
timing modes:
  lockstep  the controller is updated every --update-every physics steps, whatever its compute
            time: reproducible, independent of the machine (default).
  realtime  a plan computed from the state at time t is applied only at t + (its measured compute
            time); meanwhile the previous plan keeps running. A slow solver/backend hurts control.

outputs (in --out): summary.json (control-loop rate, latency and per-stage split, constraint
violations, tracking errors, success per target), trajectory.npz, and with --plot tracking.png,
torques.png, latency.png; with --video an MP4 (or GIF) rendered offscreen.

examples:
  mpc-accel run iiwa-reach --solver ddp --backend numba --horizon 32 --mode lockstep --duration 8 \\
      --out runs/iiwa --plot --video
  mpc-accel run iiwa-reach --mode realtime --update-every 5 --iterations 2
  mpc-accel run my_module:MyTask --dt 0.02 --horizon 25"""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (and exit code 2) instead of usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{s}'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{s}'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {s}")
    return v


def _task_arg(s: str) -> tuple[str, object]:
    key, eq, raw = s.partition("=")
    if not eq or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with a Python identifier as KEY, got '{s}'")
    low = raw.strip().lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    try:
        return key.strip(), ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key.strip(), raw  # a plain string


def build_parser() -> argparse.ArgumentParser:
    from .controller import SOLVERS
    from sim.runner import MODES

    p = _Parser(prog="mpc-accel", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_MAIN,
                description="Real-time nonlinear MPC (DDP/iLQR/FDDP) on MuJoCo robots, with batched rigid-body "
                            "dynamics derivatives. Runs a controller in closed loop and reports how fast the "
                            "control loop runs and how well it tracks.")
    sub = p.add_subparsers(dest="command", metavar="{run,tasks,backends}")
    r = sub.add_parser("run", help="run a task in closed loop (MPC + MuJoCo) and report",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_RUN,
                       description="Simulate a task with the MPC controller in the loop and write a report.")
    r.add_argument("task", help="registered task name (see 'mpc-accel tasks'), 'module:Class' or 'file.py:Class'")
    r.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE", type=_task_arg,
                   help="keyword argument for the task's constructor (repeatable), e.g. --task-arg reach_time=1.0")
    g = r.add_argument_group("controller")
    g.add_argument("--solver", choices=list(SOLVERS), default="ddp", help="optimal-control solver (default: ddp)")
    g.add_argument("--backend", default="numba",
                   help="dynamics backend (see 'mpc-accel backends'; default: numba, compiled; "
                        "numpy is the slow reference)")
    g.add_argument("--horizon", type=_positive_int, default=32, help="number of knots N (default: 32)")
    g.add_argument("--dt", type=_positive_float, default=0.01, help="knot spacing in seconds (default: 0.01)")
    g.add_argument("--iterations", type=_positive_int, default=1,
                   help="solver iterations per update (the maximum with --time-budget; default: 1)")
    g.add_argument("--time-budget", type=_positive_float, default=None, metavar="SECONDS",
                   help="wall-clock budget per update; stop iterating when the next iteration would exceed it")
    g.add_argument("--initial-iterations", type=_positive_int, default=50,
                   help="iterations of the first solve, before the clock starts (default: 50)")
    g.add_argument("--no-feedback", action="store_true",
                   help="apply only the feed-forward plan between updates (no Riccati gains), for comparison")
    s = r.add_argument_group("simulation")
    s.add_argument("--mode", choices=list(MODES), default="lockstep", help="timing mode (default: lockstep)")
    s.add_argument("--update-every", type=_positive_int, default=None, metavar="STEPS",
                   help="physics steps between controller updates (default: one knot, dt / physics step)")
    s.add_argument("--duration", type=_positive_float, default=None, metavar="SECONDS",
                   help="simulated seconds (default: the task's duration)")
    o = r.add_argument_group("output")
    o.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder (default: runs/<task>)")
    o.add_argument("--plot", action="store_true", help="write PNG plots (needs matplotlib)")
    o.add_argument("--video", action="store_true", help="render an MP4/GIF offscreen (needs OpenGL: EGL/OSMesa)")
    o.add_argument("--fps", type=_positive_float, default=30.0, help="video frame rate (default: 30)")
    o.add_argument("--viewer", action="store_true", help="show the simulation in MuJoCo's viewer (needs a display)")
    o.add_argument("--json", action="store_true", help="print the JSON summary instead of the table")
    o.add_argument("--quiet", action="store_true", help="no progress display")
    o.add_argument("--strict", action="store_true", help="exit with code 3 when the task's success criteria fail")
    sub.add_parser("tasks", help="list the registered tasks", description="List the registered tasks.")
    sub.add_parser("backends", help="list dynamics backends and whether each is available here",
                   description="List dynamics backends and whether each is available on this machine.")
    return p


def _fail(message: str, code: int = 2) -> int:
    print(f"mpc-accel: error: {message}", file=sys.stderr)
    return code


def cmd_tasks() -> int:
    import tasks

    for name, desc in tasks.list_tasks().items():
        print(f"{name:<16} {desc}")
    print("\nuser tasks: mpc-accel run module:Class  or  mpc-accel run path/to/file.py:Class "
          "(a subclass of tasks.Task)")
    return 0


def cmd_backends() -> int:
    from dynamics import available_backends

    for name, (ok, why) in available_backends().items():
        print(f"{name:<10} {'available  ' if ok else 'unavailable'}  {why}")
    return 0


def _load_task(spec: str, kwargs: dict | None = None):
    import tasks

    try:
        return tasks.get_task(spec, **(kwargs or {}))
    except (KeyError, ValueError, FileNotFoundError, AttributeError, TypeError, ImportError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise _ArgError(msg if spec in msg else f"task '{spec}': {msg}") from e


class _ArgError(Exception):
    pass


def _check_backend(name: str):
    from dynamics import available_backends, get_backend

    table = available_backends()
    if name not in table:
        raise _ArgError(f"unknown backend '{name}'; known backends: {', '.join(table)}")
    ok, why = table[name]
    if not ok:
        avail = [k for k, (a, _) in table.items() if a]
        raise _ArgError(f"backend '{name}' is not available here: {why}; available: {', '.join(avail)}")
    return get_backend(name)


def cmd_run(a: argparse.Namespace) -> int:
    from .controller import MPC
    from sim import report
    from sim.progress import make_progress
    from sim.runner import simulate

    try:
        backend = _check_backend(a.backend)
        task = _load_task(a.task, dict(a.task_arg))
        model = task.model
        h = float(model.mj_model.opt.timestep)
        update_every = a.update_every or max(1, int(round(a.dt / h)))
        duration = a.duration if a.duration is not None else float(getattr(task, "duration", 0) or 0)
        if duration <= 0:
            raise _ArgError(f"task '{a.task}' has no duration; give --duration SECONDS")
        if a.viewer:
            from sim.viewer import check_display
            check_display()
    except _ArgError as e:
        return _fail(str(e))
    except Exception as e:  # noqa: BLE001 — e.g. ViewerUnavailable: report on one line
        return _fail(str(e))

    out = a.out if a.out is not None else Path("runs") / str(getattr(task, "name", "task")).replace("/", "_")
    config = {**({"task_args": dict(a.task_arg)} if a.task_arg else {}), "solver": a.solver, "backend": backend.name, "horizon": a.horizon, "dt": a.dt,
              "iterations": a.iterations, "time_budget": a.time_budget, "mode": a.mode,
              "update_every": update_every, "duration": duration, "feedback": not a.no_feedback}
    say = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr))
    try:
        ctrl = MPC(task, solver=a.solver, backend=backend.name, horizon=a.horizon, dt=a.dt,
                   iterations_per_update=a.iterations, time_budget=a.time_budget,
                   initial_iterations=a.initial_iterations, feedback=not a.no_feedback)
    except (ValueError, TypeError) as e:
        return _fail(str(e))
    show = not (a.quiet or a.json)
    if backend.name == "numba" and show:
        say("mpc-accel: loading the compiled kernels (the first run on a machine compiles them: "
            "about 3 min on 2 cores; cached on disk afterwards)")

    def warmup_progress(label: str, done: int, total: int) -> None:
        print(f"\r  kernels {done}/{total}: {label:<40}", end="", file=sys.stderr, flush=True)

    warmup_s = ctrl.warmup(progress=warmup_progress if show else None)
    if show:
        print(f"\r  kernels ready{'':<50}", file=sys.stderr, flush=True)
    say(f"mpc-accel: {task.name}: backend '{backend.name}' warm-up {warmup_s:.2f} s")
    callbacks = []
    progress, close_progress = make_progress(duration, enabled=not (a.quiet or a.json))
    if progress is not None:
        callbacks.append(progress)
    viewer = None
    if a.viewer:
        from sim.viewer import PassiveViewer
        viewer = PassiveViewer(model.mj_model)
        callbacks.append(viewer)
    try:
        result = simulate(model, ctrl, task.initial_state(), duration, mode=a.mode, update_every=update_every,
                          callbacks=tuple(callbacks))
    except Exception as e:  # noqa: BLE001 — runtime failure outside the controller (e.g. viewer)
        close_progress()
        return _fail(f"{type(e).__name__}: {e}", code=1)
    finally:
        if viewer is not None:
            viewer.close()
    close_progress()

    metrics = report.metric_series(task, result)
    summary = report.summarize(result, task, metrics, config=config, warmup_s=warmup_s)
    files = [report.write_summary(summary, out / "summary.json"), report.write_trajectory(result, out / "trajectory.npz", metrics)]
    notes = []
    if a.plot:
        from sim import plots
        try:
            times = None
            if hasattr(task, "switch_period") and hasattr(task, "targets"):
                times = [i * task.switch_period for i in range(1, len(task.targets))]
            if "ee_error" in metrics:
                files.append(plots.plot_tracking(result, metrics, out / "tracking.png",
                                                 threshold=getattr(task, "reach_tolerance", None), target_times=times))
            files.append(plots.plot_torques(result, out / "torques.png"))
            files.append(plots.plot_latency(result, out / "latency.png"))
        except plots.PlotsUnavailable as e:
            notes.append(f"no plots: {e}")
    if a.video:
        from sim.video import render_video, sample_frames
        idx, _ = sample_frames(result.t, result.x, a.fps)
        markers = None
        if hasattr(task, "target_at"):
            markers = task.target_at(result.t[idx])
        say("mpc-accel: rendering video ...")
        outcome = render_video(model.mj_model, result.x[idx, :model.nq], out / "video", fps=a.fps, markers=markers)
        if outcome.path is not None:
            files.append(outcome.path)
        else:
            notes.append(outcome.message)
    summary["files"] = [str(f) for f in files]
    summary["notes"] = notes
    report.write_summary(summary, out / "summary.json")
    if a.json:
        import json
        print(json.dumps(summary, indent=2))
    else:
        print(report.format_summary(summary))
        for n in notes:
            print(f"note: {n}")
        print("files: " + ", ".join(str(f) for f in files))
    if not result.completed:
        return 1
    if a.strict and not summary.get("success"):
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mpc-accel`` console script and ``python -m mpc``."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command is None:
        parser.print_help()
        return 2
    if a.command == "tasks":
        return cmd_tasks()
    if a.command == "backends":
        return cmd_backends()
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())
